"""A short GPU check for the machine this project may be lent: what it has, then what only a GPU can show.

    scripts/gpu_check.sh [--out DIR]            # on the GPU machine (one H100/H200, under 8 minutes)
    scripts/gpu_check.sh --cpu-dry-run          # the same stages on CPU with a tiny model (a minute or two)

That machine has PyTorch, transformers, accelerate and peft, but no TRL, no vLLM, no provers and no
network, and ``import proofgym`` needs gymnasium, which it lacks: so this file runs there as a plain
script (``python3 training/gpu_check.py``) on torch and transformers alone, reading the working tree
that travels with it. Stages, each announced with ``gpu_check:``:

1. **machine**: torch and its CUDA, the GPU, bf16 support, transformers/accelerate/peft/TRL versions;
   what the GPU run needs and lacks ends the check with one ``gpu_check: FAIL:`` line (exit 2);
2. **precision**: the same config-initialised model, the same batch, 10 AdamW steps at a learning rate
   of 1e-6 under bf16 autocast, once with fp32 weights (the optimizer's masters) and once with bf16
   weights: the share of weights each moved. fp32 masters must move (nearly) all of them;
3. **sft**: SFT steps (loss on the completion only) on the coq-tiny tasks' reference proofs;
4. **grpo**: a GRPO-style step: the policy samples ``num_generations`` completions per task
   (``generate``, timed: generation tokens/s), then a policy-gradient update on groups whose rewards
   are **real Coq verdicts recorded on CPU** (:data:`RECORDED_VERDICTS`: for each coq-tiny task its
   reference proof, OK, and four wrong or cheating attempts; ``tests/test_gpu_check.py`` re-checks every
   entry against the real verifier). The verifier does not travel (coqidetop with its shared libraries,
   the ``.vo`` files and bwrap), so the policy's own samples are timed, not scored; the update is
   group-normalised advantage x mean completion log-probability (one iteration: ratio 1; beta 0).

Every stage reports step time, tokens/s and peak memory (GPU: torch's peak allocation; CPU: peak RSS);
``--out DIR`` writes them all to ``DIR/gpu_check.json`` (also printed as ``gpu_check: RESULT json:``).
The model is a Qwen2 of Qwen2.5-0.5B's transformer shape (896 wide, 24 layers, 14 heads, 2 KV heads,
MLP 4864; 358M parameters in the layers) on a GPU, a tiny one on CPU, with a byte-level vocabulary
(nothing is downloaded: there is no network there, and no tokenizer file travels).
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__" and sys.path and os.path.realpath(sys.path[0]) == os.path.dirname(os.path.realpath(__file__)):
    # run as a file: its folder, training/, would shadow the standard library (training/logging.py)
    sys.path.pop(0)

import argparse  # noqa: E402
import importlib.metadata  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import resource  # noqa: E402
import time  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from dataclasses import asdict, dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TASKS = ROOT / "envs" / "tasks" / "data" / "coq-tiny.jsonl"

REWARDS = {"OK": 1.0, "CHEATING": -1.0, "FAIL": 0.0, "TIMEOUT": 0.0, "ERROR": 0.0}
"""proofgym's default verdict rewards (``proofgym.envs.rewards.RewardMap``): what GRPO trains on."""

WRONG_ATTEMPTS = ("Proof. Admitted.", "Proof. reflexivity. Qed.", "Proof. intros. assumption. Qed.", "Proof. auto")

RECORDED_VERDICTS: dict[str, tuple[str, ...]] = {
    # task id -> verdicts of (its reference proof, *WRONG_ATTEMPTS), from the real Coq 8.16 verifier on CPU
    # (proofgym's coq verifier, default audit; recorded 2026-12-05; tests/test_gpu_check.py re-checks them)
    "coq.tiny.add_0_r": ("OK", "CHEATING", "FAIL", "FAIL", "ERROR"),
    "coq.tiny.app_nil": ("OK", "CHEATING", "FAIL", "FAIL", "ERROR"),
    "coq.tiny.and_comm": ("OK", "CHEATING", "FAIL", "FAIL", "ERROR"),
    "coq.tiny.lia": ("OK", "CHEATING", "FAIL", "FAIL", "ERROR"),
    "coq.tiny.section": ("OK", "CHEATING", "FAIL", "FAIL", "ERROR"),
}


class CheckFailed(Exception):
    """Something the check needs is missing: the message says what (exit 2)."""


def say(text: str) -> None:
    print(f"gpu_check: {text}", flush=True)


def version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


# -- what is checked --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Shape:
    """A Qwen2 decoder's shape (byte vocabulary)."""

    label: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int


GPU_SHAPE = Shape("Qwen2.5-0.5B's transformer shape", hidden=896, layers=24, heads=14, kv_heads=2, intermediate=4864)
CPU_SHAPE = Shape("tiny", hidden=64, layers=2, heads=4, kv_heads=2, intermediate=128)


@dataclass(frozen=True)
class Budget:
    """How much each stage does."""

    precision_steps: int
    sft_steps: int
    grpo_steps: int
    num_generations: int
    max_new_tokens: int


GPU_BUDGET = Budget(precision_steps=10, sft_steps=6, grpo_steps=4, num_generations=8, max_new_tokens=256)
CPU_BUDGET = Budget(precision_steps=10, sft_steps=2, grpo_steps=2, num_generations=2, max_new_tokens=16)


class ByteTokenizer:
    """UTF-8 bytes as token ids 3..258; 0 pad, 1 bos, 2 eos (no tokenizer file has to travel)."""

    pad, bos, eos = 0, 1, 2
    vocab_size = 259

    def encode(self, text: str) -> list[int]:
        return [b + 3 for b in text.encode("utf-8")]


def coq_tiny() -> list[dict[str, Any]]:
    """The packaged coq-tiny tasks (plain JSON: the check does not import proofgym)."""
    return [json.loads(line) for line in TASKS.read_text(encoding="utf-8").splitlines() if line.strip()]


def prompt_text(task: dict[str, Any]) -> str:
    context = task.get("context", "").strip()
    return f"Prove in Coq.\n{context + chr(10) if context else ''}{task['statement']}\n```coq\n"


def completion_text(proof: str) -> str:
    return f"{proof}\n```"


def build_model(shape: Shape, device: Any, *, seed: int = 0) -> Any:
    """A config-initialised Qwen2 in float32 (the weights the optimizer updates), on ``device``."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(vocab_size=ByteTokenizer.vocab_size, hidden_size=shape.hidden, num_hidden_layers=shape.layers,
                         num_attention_heads=shape.heads, num_key_value_heads=shape.kv_heads,
                         intermediate_size=shape.intermediate, max_position_embeddings=2048, tie_word_embeddings=True,
                         pad_token_id=ByteTokenizer.pad, bos_token_id=ByteTokenizer.bos,
                         eos_token_id=ByteTokenizer.eos)
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(config).to(device=device, dtype=torch.float32)


def sequences(pairs: Sequence[tuple[str, str]], device: Any) -> dict[str, Any]:
    """Right-padded ``input_ids``, ``attention_mask`` and ``labels`` (-100 outside the completions)."""
    import torch

    tok = ByteTokenizer()
    rows = [([tok.bos] + tok.encode(p), tok.encode(c) + [tok.eos]) for p, c in pairs]
    width = max(len(p) + len(c) for p, c in rows)
    ids, mask, labels = [], [], []
    for p, c in rows:
        pad = width - len(p) - len(c)
        ids.append(p + c + [tok.pad] * pad)
        mask.append([1] * (len(p) + len(c)) + [0] * pad)
        labels.append([-100] * len(p) + c + [-100] * pad)
    return {name: torch.tensor(value, device=device) for name, value in
            (("input_ids", ids), ("attention_mask", mask), ("labels", labels))}


class Clock:
    """Wall seconds of a block, with the GPU's queued work finished at both ends."""

    def __init__(self, device: Any) -> None:
        self.cuda = getattr(device, "type", str(device)) == "cuda"
        self.seconds = 0.0

    def __enter__(self) -> Clock:
        self._sync()
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._sync()
        self.seconds = time.perf_counter() - self._start

    def _sync(self) -> None:
        if self.cuda:
            import torch

            torch.cuda.synchronize()


def start_memory(device: Any) -> None:
    import torch

    if getattr(device, "type", "") == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory(device: Any) -> dict[str, float]:
    """GPU: torch's peak allocation since :func:`start_memory`; CPU: the process's peak RSS so far."""
    import torch

    if getattr(device, "type", "") == "cuda":
        return {"peak_gpu_memory_gib": round(torch.cuda.max_memory_allocated(device) / 2**30, 3)}
    return {"peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 3)}


def moved(before: dict[str, Any], model: Any) -> float:
    """Share of the model's weight elements that differ from ``before``."""
    changed = total = 0
    for name, param in model.named_parameters():
        changed += int((param.detach().float() != before[name].float()).sum())
        total += param.numel()
    return changed / total


def snapshot(model: Any) -> dict[str, Any]:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def sft_batch(device: Any) -> dict[str, Any]:
    return sequences([(prompt_text(t), completion_text(t["reference_proof"])) for t in coq_tiny()], device)


def train_step(model: Any, optimizer: Any, batch: dict[str, Any], device: Any) -> float:
    """One optimizer step under bf16 autocast (the recipes' ``bf16: true``); the loss."""
    import torch

    with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
        loss = model(**batch).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return float(loss.detach())


# -- stages ------------------------------------------------------------------------------------------------------
def report_machine(*, gpu: bool) -> dict[str, Any]:
    """Versions and devices; raises :class:`CheckFailed` when the GPU run cannot go ahead."""
    info: dict[str, Any] = {name: version(name) for name in ("torch", "transformers", "accelerate", "peft", "trl",
                                                             "vllm")}
    info["python"] = sys.version.split()[0]
    for name in ("torch", "transformers"):
        if info[name] is None:
            raise CheckFailed(f"{name} is not installed (the check needs torch and transformers only)")
    import torch

    info["cuda"] = torch.version.cuda
    info["cuda_available"] = torch.cuda.is_available()
    if info["cuda_available"]:
        info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        info["bf16_supported"] = torch.cuda.is_bf16_supported()
        info["gpu_memory_gib"] = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
    for key, value in info.items():
        say(f"{key}: {value}")
    if gpu:
        if not info["cuda_available"]:
            raise CheckFailed(f"torch {info['torch']} sees no CUDA device (a CPU-only build, or no driver): run on "
                              f"the GPU machine, or with --cpu-dry-run")
        if not info["bf16_supported"]:
            raise CheckFailed(f"{info['gpus'][0]} does not support bf16")
    return info


def precision_stage(shape: Shape, budget: Budget, device: Any) -> dict[str, Any]:
    """Share of weights moved by ``precision_steps`` AdamW steps at 1e-6: fp32 masters vs bf16 storage."""
    import torch

    start_memory(device)
    batch = sft_batch(device)
    result: dict[str, Any] = {"learning_rate": 1e-6, "steps": budget.precision_steps, "autocast": "bfloat16"}
    for storage in ("float32", "bfloat16"):
        model = build_model(shape, device, seed=0).to(getattr(torch, storage))
        before = snapshot(model)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6, weight_decay=0.0)
        for _ in range(budget.precision_steps):
            train_step(model, optimizer, batch, device)
        result[f"{storage}_weights_moved"] = round(moved(before, model), 4)
        del model, optimizer, before
    result["fp32_masters_train"] = result["float32_weights_moved"] > 0.99
    return {**result, **peak_memory(device)}


def sft_stage(model: Any, budget: Budget, device: Any) -> dict[str, Any]:
    """SFT steps on the reference proofs: step time, tokens/s, the loss, the weights moved."""
    import torch

    start_memory(device)
    batch = sft_batch(device)
    tokens = int(batch["attention_mask"].sum())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=0.0)
    before = snapshot(model)
    losses, times = [], []
    for _ in range(budget.sft_steps):
        with Clock(device) as clock:
            losses.append(train_step(model, optimizer, batch, device))
        times.append(clock.seconds)
    steady = times[1:] or times  # the first step includes kernel selection and allocator warm-up
    step_s = sum(steady) / len(steady)
    return {"steps": budget.sft_steps, "sequences_per_step": int(batch["input_ids"].shape[0]),
            "tokens_per_step": tokens, "step_s": round(step_s, 4), "first_step_s": round(times[0], 4),
            "tokens_per_s": round(tokens / step_s, 1), "loss_first": round(losses[0], 4),
            "loss_last": round(losses[-1], 4), "weights_moved": round(moved(before, model), 4), **peak_memory(device)}


def generate(model: Any, prompts: Sequence[str], num_generations: int, max_new_tokens: int, device: Any
             ) -> tuple[int, float]:
    """``num_generations`` samples per prompt (T=1, left-padded batch); ``(new tokens, seconds)``."""
    import torch

    tok = ByteTokenizer()
    rows = [[tok.bos] + tok.encode(p) for p in prompts for _ in range(num_generations)]
    width = max(map(len, rows))
    ids = torch.tensor([[tok.pad] * (width - len(r)) + r for r in rows], device=device)
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], device=device)
    model.eval()
    with Clock(device) as clock, torch.no_grad(), torch.autocast(device_type=device.type, dtype=torch.bfloat16):
        out = model.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0, top_k=0,
                             max_new_tokens=max_new_tokens, min_new_tokens=max_new_tokens, pad_token_id=tok.pad,
                             eos_token_id=tok.eos)
    model.train()
    return int(out[:, width:].numel()), clock.seconds  # min_new_tokens: every row runs to max_new_tokens


def grpo_groups() -> tuple[list[tuple[str, str]], list[float], list[str], list[int]]:
    """The recorded groups: ``(prompt, completion)`` pairs, their rewards, their verdicts, and group sizes."""
    pairs, rewards, verdicts, sizes = [], [], [], []
    for task in coq_tiny():
        recorded = RECORDED_VERDICTS[task["id"]]
        proofs = (task["reference_proof"], *WRONG_ATTEMPTS)
        for proof, verdict in zip(proofs, recorded, strict=True):
            pairs.append((prompt_text(task), completion_text(proof)))
            rewards.append(REWARDS[verdict])
            verdicts.append(verdict)
        sizes.append(len(proofs))
    return pairs, rewards, verdicts, sizes


def advantages(rewards: Sequence[float], sizes: Sequence[int]) -> list[float]:
    """GRPO's group-normalised advantages: (r - group mean) / (group std + 1e-4)."""
    out, start = [], 0
    for size in sizes:
        group = rewards[start:start + size]
        mean = sum(group) / size
        std = math.sqrt(sum((r - mean) ** 2 for r in group) / max(size - 1, 1))
        out += [(r - mean) / (std + 1e-4) for r in group]
        start += size
    return out


def grpo_stage(model: Any, budget: Budget, device: Any) -> dict[str, Any]:
    """Sampling (timed) and policy-gradient updates on the recorded groups (see the module docstring)."""
    import torch

    start_memory(device)
    prompts = [prompt_text(t) for t in coq_tiny()]
    new_tokens, gen_s = generate(model, prompts, budget.num_generations, budget.max_new_tokens, device)
    pairs, rewards, verdicts, sizes = grpo_groups()
    adv = torch.tensor(advantages(rewards, sizes), device=device)
    batch = sequences(pairs, device)
    labels = batch.pop("labels")
    tokens = int(batch["attention_mask"].sum())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6, weight_decay=0.0)
    before = snapshot(model)
    times, losses = [], []
    for _ in range(budget.grpo_steps):
        with Clock(device) as clock:
            with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
                logits = model(**batch).logits[:, :-1].float()
            target = labels[:, 1:]
            mask = (target != -100).float()
            logp = torch.log_softmax(logits, dim=-1).gather(-1, target.clamp(min=0).unsqueeze(-1)).squeeze(-1)
            per_sequence = (logp * mask).sum(-1) / mask.sum(-1)
            loss = -(adv * per_sequence).mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        times.append(clock.seconds)
        losses.append(float(loss.detach()))
    steady = times[1:] or times
    step_s = sum(steady) / len(steady)
    counts = {v: verdicts.count(v) for v in dict.fromkeys(verdicts)}
    return {"steps": budget.grpo_steps, "prompts": len(prompts), "num_generations": budget.num_generations,
            "max_new_tokens": budget.max_new_tokens, "generation_tokens": new_tokens,
            "generation_s": round(gen_s, 3), "generation_tokens_per_s": round(new_tokens / gen_s, 1),
            "update_sequences": len(pairs), "update_tokens": tokens, "step_s": round(step_s, 4),
            "first_step_s": round(times[0], 4), "update_tokens_per_s": round(tokens / step_s, 1),
            "loss_first": round(losses[0], 5), "weights_moved": round(moved(before, model), 4),
            "recorded_verdicts": counts, "mean_reward": round(sum(rewards) / len(rewards), 3),
            "rewards_from": "real Coq verdicts recorded on CPU (RECORDED_VERDICTS): no verifier on this machine",
            **peak_memory(device)}


def run(gpu: bool, out: Path | None) -> dict[str, Any]:
    import torch

    begin = time.monotonic()
    info = report_machine(gpu=gpu)
    device = torch.device("cuda" if gpu else "cpu")
    if not gpu:
        torch.set_num_threads(1)  # a shared CPU: more threads than free cores is many times slower
    shape, budget = (GPU_SHAPE, GPU_BUDGET) if gpu else (CPU_SHAPE, CPU_BUDGET)
    numbers: dict[str, Any] = {"mode": "gpu" if gpu else "cpu-dry-run", "machine": info,
                               "model": {**asdict(shape), "vocab": ByteTokenizer.vocab_size}}
    say(f"precision: {budget.precision_steps} AdamW steps at 1e-6 under bf16 autocast, fp32 vs bf16 weights")
    numbers["precision"] = precision_stage(shape, budget, device)
    say(f"RESULT precision: {json.dumps(numbers['precision'])}")
    model = build_model(shape, device, seed=1)
    numbers["model"]["parameters"] = sum(p.numel() for p in model.parameters())
    say(f"sft: {budget.sft_steps} steps on {len(coq_tiny())} reference proofs, {shape.label} "
        f"({numbers['model']['parameters'] / 1e6:.1f}M parameters)")
    numbers["sft"] = sft_stage(model, budget, device)
    say(f"RESULT sft: {json.dumps(numbers['sft'])}")
    say(f"grpo: {budget.num_generations} samples x {budget.max_new_tokens} tokens per task, then {budget.grpo_steps} "
        f"updates on the recorded groups")
    numbers["grpo"] = grpo_stage(model, budget, device)
    say(f"RESULT grpo: {json.dumps(numbers['grpo'])}")
    numbers["seconds"] = round(time.monotonic() - begin, 1)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "gpu_check.json").write_text(json.dumps(numbers, indent=2, default=str) + "\n", encoding="utf-8")
    return numbers


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cpu-dry-run", action="store_true",
                   help="the same stages on CPU with a tiny model (checks everything but the GPU)")
    p.add_argument("--out", help="write gpu_check.json here")
    args = p.parse_args(argv)
    gpu = not args.cpu_dry_run
    say(f"mode: {'GPU' if gpu else 'CPU dry run (a tiny model: NOT a GPU check)'}")
    try:
        numbers = run(gpu, Path(args.out) if args.out else None)
    except CheckFailed as exc:
        say(f"FAIL: {exc}")
        return 2
    except Exception as exc:  # the check's job is to say what broke: the traceback, then one line
        import traceback

        traceback.print_exc()
        say(f"FAIL: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
        return 1
    say("RESULT json: " + json.dumps(numbers, default=str))
    if not numbers["precision"]["fp32_masters_train"]:
        say("FAIL: fp32 master weights under bf16 autocast did not move (see RESULT precision)")
        return 1
    say(f"OK in {numbers['seconds']:.0f} s" + ("" if gpu else " (CPU dry run: no GPU was used)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
