"""What a multi-process run needs from proofgym's training code: lockstep, rank-0 writes, ZeRO-3 care.

A leaf module (torch and the standard library, nothing else of proofgym) so that the rollout,
the callbacks and the run helpers can all use it without import cycles.

- :func:`max_across_ranks` / :func:`world_size`: collectives that are no-ops in a single process.
  The repair rollout uses the first to keep every rank on the same number of turns and the same
  batch width per turn: a rank that stopped early would otherwise leave the others waiting in a
  collective that never completes (vLLM server mode gathers prompts per call; ZeRO-3 gathers
  weights per forward pass).
- :func:`zero_stage`: the DeepSpeed ZeRO stage of a run, read from the trainer's plugin, the
  ``deepspeed`` config (a dict or a JSON file) or ``accelerate launch``'s environment, without
  importing deepspeed (which may not be installed).
- :func:`refuse_zero3_checkpoint_eval`: checkpoint evaluation during a ZeRO-3 run is refused
  before training starts, with what to do instead (see its docstring for why).
- :func:`fix_reentrant_checkpointing`: TRL's PEFT + ZeRO-3 ``use_reentrant=True`` fix, applied to
  the field transformers 5 reads (``activation_checkpointing_kwargs``); :func:`keep_checkpointing`
  keeps it (and ``every_n_layers``) through a generation, which TRL's unwrap re-enables with defaults.
- :func:`refuse_hanging_settings`: GRPO settings that would hang a multi-process run (ZeRO-3 without
  gathering for the shared-prefix generator; the SFT warm start under ZeRO-3), refused before training.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def world_size() -> int:
    """Processes in the default ``torch.distributed`` group (1 when it is not initialised)."""
    try:
        import torch.distributed as dist
    except ImportError:  # pragma: no cover - torch without distributed support
        return 1
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def rank() -> int:
    """This process's rank in the default group (0 when it is not initialised)."""
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def max_across_ranks(value: int, device: Any = None) -> int:
    """The largest ``value`` over all processes (an all-reduce; ``value`` itself in one process).

    Every process must call it the same number of times. ``device``: where the reduction tensor
    lives (a CUDA device under NCCL; CPU under gloo, the default).
    """
    if world_size() == 1:
        return int(value)
    import torch
    import torch.distributed as dist

    tensor = torch.tensor([int(value)], dtype=torch.long, device=device if device is not None else "cpu")
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return int(tensor.item())


def zero_stage(args: Any = None) -> int:
    """The DeepSpeed ZeRO stage of this run (0: no DeepSpeed).

    Read from, in order: ``args.deepspeed_plugin.zero_stage`` (set by transformers when DeepSpeed
    is on), ``args.deepspeed`` (a config dict or the path of a JSON file, its
    ``zero_optimization.stage``), and ``accelerate launch``'s environment
    (``ACCELERATE_USE_DEEPSPEED`` with ``ACCELERATE_DEEPSPEED_ZERO_STAGE``, or the JSON file in
    ``ACCELERATE_DEEPSPEED_CONFIG_FILE``).
    """
    plugin = getattr(args, "deepspeed_plugin", None)
    if plugin is not None and getattr(plugin, "zero_stage", None) is not None:
        return int(plugin.zero_stage)
    config = getattr(args, "deepspeed", None)
    if config:
        return _stage_of(config)
    if os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() in ("1", "true", "yes"):
        if os.environ.get("ACCELERATE_DEEPSPEED_ZERO_STAGE"):
            return int(os.environ["ACCELERATE_DEEPSPEED_ZERO_STAGE"])
        if os.environ.get("ACCELERATE_DEEPSPEED_CONFIG_FILE"):
            return _stage_of(os.environ["ACCELERATE_DEEPSPEED_CONFIG_FILE"])
    return 0


def deepspeed_enabled(args: Any = None) -> bool:
    """Whether this run trains under DeepSpeed (any ZeRO stage, 0 included), read where :func:`zero_stage` reads.

    DeepSpeed's bf16 and fp16 optimizers keep fp32 master weights whatever dtype the model was loaded in, so a
    half-precision model is safe to train under it (and only under it, or with LoRA's fp32 adapters).
    """
    if getattr(args, "deepspeed_plugin", None) is not None or getattr(args, "deepspeed", None):
        return True
    return os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() in ("1", "true", "yes")


def _stage_of(config: Any) -> int:
    if isinstance(config, (str, Path)):
        text = str(config)
        try:
            config = json.loads(text) if text.lstrip().startswith("{") else \
                json.loads(Path(text).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return 0  # unreadable here: transformers reports it itself when it loads the file
    stage = (config or {}).get("zero_optimization", {}).get("stage", 0) if isinstance(config, dict) else 0
    return int(stage) if str(stage).isdigit() else 0


ZERO3_EVAL_REFUSAL = (
    "checkpoint evaluation during training is not supported under DeepSpeed ZeRO-3: each process holds only "
    "a shard of the weights, so a checkpoint saved for evaluation is empty, and loading it for evaluation on one "
    "process enters deepspeed.zero.Init, which waits for the other processes forever. Set "
    "checkpoint_eval_steps: 0, checkpoint_eval_on_start: false and checkpoint_eval_at_end: false, and evaluate "
    "the final model afterwards (`proofgym eval --agent local --model OUTPUT_DIR`, which trainer.save_model "
    "gathers under ZeRO-3 when stage3_gather_16bit_weights_on_model_save is true), or train with ZeRO-2 "
    "(configs/accelerate/deepspeed_zero2.yaml)")


def refuse_zero3_checkpoint_eval(cfg: Any) -> None:
    """Raise ``ValueError`` (:data:`ZERO3_EVAL_REFUSAL`) when ``cfg`` asks for checkpoint evaluation under ZeRO-3.

    Why not gather and evaluate: evaluation loads the checkpoint with ``from_pretrained`` on the
    main process, and under an active ZeRO-3 config transformers wraps that load in
    ``deepspeed.zero.Init``, a collective the other processes never join. Evaluating from a
    separate process after training has none of these problems.
    """
    wants = cfg.checkpoint_eval_on_start or cfg.checkpoint_eval_at_end or cfg.checkpoint_eval_steps \
        or getattr(cfg, "checkpoint_evals", 0)
    if wants and zero_stage(cfg) == 3:
        raise ValueError(ZERO3_EVAL_REFUSAL)


def fix_reentrant_checkpointing(args: Any, *, peft: bool) -> bool:
    """PEFT + ZeRO-3 + activation checkpointing needs ``use_reentrant=True``; set it where transformers 5 reads it.

    TRL 1.16 applies this fix to ``args.gradient_checkpointing_kwargs`` only when that dict already
    exists; transformers 5 reads ``activation_checkpointing_kwargs`` (the old name only mirrors it
    at ``__post_init__``), so with no kwargs given the fix never reaches the model. This sets
    ``use_reentrant=True`` in one dict bound to both names; call it before the trainer is built
    (transformers enables checkpointing in ``Trainer.__init__``). ``peft``: the run trains a LoRA
    adapter. Returns whether it applied.
    """
    checkpointing = getattr(args, "activation_checkpointing", None) or getattr(args, "gradient_checkpointing", False)
    if not (checkpointing and peft and zero_stage(args) == 3):
        return False
    kwargs = dict(getattr(args, "activation_checkpointing_kwargs", None)
                  or getattr(args, "gradient_checkpointing_kwargs", None) or {})
    kwargs["use_reentrant"] = True
    if hasattr(args, "activation_checkpointing_kwargs"):
        args.activation_checkpointing_kwargs = kwargs
    args.gradient_checkpointing_kwargs = kwargs
    return True


@contextmanager
def keep_checkpointing(model: Any) -> Iterator[None]:
    """Restore ``model``'s activation-checkpointing setup, exactly as it was, when the block ends.

    TRL's ``unwrap_model_for_generation`` turns checkpointing off for generation and back on with
    ``gradient_checkpointing_enable(gradient_checkpointing_kwargs=...)``: without the kwargs (the curriculum's
    and the repair rollout's generator passed none) transformers 5 re-enables it with ``use_reentrant=False``
    on every layer, undoing :func:`fix_reentrant_checkpointing` and ``every_n_layers`` for the rest of the run;
    with them, the ``every_n_layers``/``offload`` keys transformers' Trainer takes out of the dict would reach
    ``torch.utils.checkpoint``. Saving each module's flag and checkpoint function and putting them back is
    right in every case. ``model``: the trainer's (possibly wrapped) model.
    """
    inner = model
    while hasattr(inner, "module"):  # DDP / DeepSpeed engine -> the model
        inner = inner.module
    saved = [(m, m.gradient_checkpointing, m.__dict__.get("_gradient_checkpointing_func"))
             for m in inner.modules() if hasattr(m, "gradient_checkpointing")]
    try:
        yield
    finally:
        for module, flag, func in saved:
            module.gradient_checkpointing = flag
            if func is not None:
                module._gradient_checkpointing_func = func


ZERO3_NO_GATHER_REFUSAL = (
    "ds3_gather_for_generation: false under DeepSpeed ZeRO-3 without vLLM would hang: proofgym's generator (GRPO "
    "steps, the curriculum's estimates, the repair rollout) prefills each distinct prompt of a batch with its own "
    "forward pass, and the number of distinct prompts differs between processes, while every ZeRO-3 forward pass "
    "is a collective that gathers each layer's shards from all of them. Keep ds3_gather_for_generation: true (the "
    "default: the weights are gathered once per generation), or use_vllm: true")

ZERO3_WARM_START_REFUSAL = (
    "warm_start_sft_steps under DeepSpeed ZeRO-3 is not supported: the warm start's engine leaves a partitioned "
    "model (its save on the main process would be empty) that GRPO would wrap in a second engine while the first "
    "still holds its optimizer state. Run `proofgym train sft` (or accelerate launch -m proofgym.training.sft) "
    "first and start GRPO from its output (model_name_or_path), or use ZeRO-2")


def refuse_hanging_settings(cfg: Any) -> None:
    """Raise ``ValueError`` for GRPO settings that would hang or corrupt a multi-process run (see the messages)."""
    if zero_stage(cfg) != 3:
        return
    if not getattr(cfg, "ds3_gather_for_generation", True) and not getattr(cfg, "use_vllm", False):
        raise ValueError(ZERO3_NO_GATHER_REFUSAL)
    if getattr(cfg, "warm_start_sft_steps", 0):
        raise ValueError(ZERO3_WARM_START_REFUSAL)
