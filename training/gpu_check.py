"""A short GPU check for a machine lent for a few minutes: what it has, then a few real GRPO steps.

    scripts/gpu_check.sh                 # on the GPU machine (under 8 minutes)
    scripts/gpu_check.sh --cpu-dry-run   # the same path on CPU, without vLLM or bf16 (a tiny model)

What it does, in order, each stage announced:

1. reports the machine: torch and its CUDA, the GPU, vLLM, TRL, transformers, the Coq verifier;
   anything the GPU run needs and lacks ends the check at once with one ``gpu_check: FAIL:`` line
   saying what to install, and a non-zero exit (2: a missing piece; 1: the run itself failed);
2. builds a small causal LM from a config (a Llama with random weights and a locally trained
   tokenizer, :func:`proofgym.agents.tiny_model.build_tiny_model`; nothing is downloaded) and
   teaches it the packaged tasks' reference proofs for a few seconds, so that the verifier sees
   real proofs and some rewards are 1;
3. runs a few GRPO steps on ``envs/tasks/data/coq-tiny.jsonl`` with the real Coq verifier pool as
   the reward: vLLM in colocate mode and bf16 on the GPU; ``model.generate`` in fp32 on CPU;
4. prints ``gpu_check: RESULT`` lines: generation tokens/s (completion tokens over the seconds in
   TRL's generation call), reward seconds / step seconds (the verifier's share of a step),
   completions per second, and peak memory (GPU: torch's peak allocation and the device's used
   memory; CPU: the process's peak RSS); and ``gpu_check: OK`` at the end.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import resource
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TASKS = ROOT / "envs" / "tasks" / "data" / "coq-tiny.jsonl"


class CheckFailed(Exception):
    """Something the check needs is missing: the message says what to install (exit 2)."""


def say(text: str) -> None:
    print(f"gpu_check: {text}", flush=True)


def version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def report_machine(*, gpu: bool) -> dict[str, Any]:
    """The machine's versions and devices; raises :class:`CheckFailed` when the run cannot go ahead."""
    info: dict[str, Any] = {name: version(name) for name in ("torch", "transformers", "trl", "accelerate", "vllm")}
    for name in ("torch", "transformers", "trl", "accelerate"):
        if info[name] is None:
            raise CheckFailed(f"{name} is not installed: pip install 'proofgym[train]'")
    import torch

    info["cuda"] = torch.version.cuda
    info["cuda_available"] = torch.cuda.is_available()
    if info["cuda_available"]:
        info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        info["bf16_supported"] = torch.cuda.is_bf16_supported()
    for key, value in info.items():
        say(f"{key}: {value}")
    if gpu:
        if not info["cuda_available"]:
            raise CheckFailed(f"torch {info['torch']} sees no CUDA device (a CPU-only build, or no driver): install a "
                              f"CUDA build of torch, or run with --cpu-dry-run")
        if info["vllm"] is None:
            raise CheckFailed(f"vLLM is not installed: pip install vllm (a version TRL {info['trl']} supports, see "
                              f"TRL's docs), or run with --cpu-dry-run")
        if not info["bf16_supported"]:
            raise CheckFailed(f"{info['gpus'][0]} does not support bf16")
    from proofgym.envs.errors import ProofgymError
    from proofgym.envs.verifiers.base import require_provers

    try:
        require_provers(["coq"])
    except ProofgymError as exc:
        raise CheckFailed(f"the Coq verifier cannot run: {exc}") from None
    say(f"coq: {shutil.which('coqidetop.opt') or shutil.which('coqidetop')}")
    return info


def build_model(path: Path, *, gpu: bool) -> Path:
    """A config-initialised Llama, taught the packaged tasks' reference proofs (larger on a GPU)."""
    from proofgym.agents.tiny_model import build_tiny_model
    from proofgym.envs.tasks.suites import load_tasks
    from proofgym.training.data import prompt_messages, reference_completion

    teach = [(prompt_messages(t, context_chars=200), reference_completion(t)) for t in load_tasks(TASKS)]
    size = dict(hidden_size=128, layers=4) if gpu else {}
    start = time.monotonic()
    build_tiny_model(path, teach=teach, teach_steps=150 if gpu else 200, **size)
    say(f"model: a config-initialised Llama ({'128 wide, 4 layers' if gpu else 'tiny'}) taught "
        f"{len(teach)} reference proofs in {time.monotonic() - start:.0f} s -> {path}")
    return path


def grpo_config(model: Path, out: Path, *, gpu: bool, steps: int, workers: int) -> Any:
    from proofgym.training.grpo_config import ProofGRPOConfig

    common = dict(model_name_or_path=str(model), suite=str(TASKS), heldout_fraction=0.0, output_dir=str(out),
                  run_name="gpu_check", report_to="none", max_steps=steps, logging_steps=1, save_strategy="no",
                  checkpoint_eval_at_end=False, verifier_workers=workers, prompt_context_chars=200,
                  temperature=1.0, learning_rate=1e-5, seed=0, log_completions=False)
    if gpu:
        return ProofGRPOConfig(**common, use_cpu=False, bf16=True, use_vllm=True, vllm_mode="colocate",
                               vllm_gpu_memory_utilization=0.3,
                               num_generations=8, per_device_train_batch_size=40, max_completion_length=256)
    return ProofGRPOConfig(**common, use_cpu=True, bf16=False, torch_threads=1, num_generations=2,
                           per_device_train_batch_size=4, max_completion_length=32)


class GenerationTimer:
    """Wraps ``GRPOTrainer._generate`` to add up its seconds and the completion tokens it returns."""

    def __init__(self, trainer_cls: type) -> None:
        self.trainer_cls = trainer_cls
        self.seconds = 0.0
        self.tokens = 0
        self.completions = 0
        self._original = trainer_cls._generate

    def __enter__(self) -> GenerationTimer:
        timer, original = self, self._original

        def timed(trainer: Any, prompts: list) -> Any:
            start = time.perf_counter()
            out = original(trainer, prompts)
            timer.seconds += time.perf_counter() - start
            timer.tokens += sum(len(ids) for ids in out[1])
            timer.completions += len(out[1])
            return out

        self.trainer_cls._generate = timed
        return self

    def __exit__(self, *exc: Any) -> None:
        self.trainer_cls._generate = self._original


def run_grpo(cfg: Any, *, gpu: bool) -> dict[str, Any]:
    """A few GRPO steps; the numbers named in the module docstring."""
    import torch

    from proofgym.training.grpo import train_grpo
    from proofgym.training.grpo_trainer import ProofGRPOTrainer

    if gpu:
        torch.cuda.reset_peak_memory_stats()
    start = time.monotonic()
    with GenerationTimer(ProofGRPOTrainer) as timer:
        result = train_grpo(cfg)
    wall = time.monotonic() - start
    rows = [r for r in result.log_history if "reward" in r]
    step_s = sum(r.get("step_time", 0.0) for r in rows)
    reward_s = sum(r.get("verifier/batch_seconds", 0.0) for r in rows)
    numbers: dict[str, Any] = {
        "steps": result.global_step, "wall_s": round(wall, 1), "completions": timer.completions,
        "generation_tokens_per_s": round(timer.tokens / timer.seconds, 1) if timer.seconds else None,
        "reward_s_per_step_s": round(reward_s / step_s, 4) if step_s else None,
        "completions_per_s": round(timer.completions / step_s, 2) if step_s else None,
        "mean_reward": round(sum(r["reward"] for r in rows) / len(rows), 3) if rows else None,
        "verdicts": dict(result.reward_totals)}
    if gpu:
        free, total = torch.cuda.mem_get_info()
        numbers["peak_gpu_memory_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
        numbers["gpu_memory_used_gib"] = round((total - free) / 2**30, 2)
    else:
        numbers["peak_rss_gib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)
    return numbers


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cpu-dry-run", action="store_true",
                   help="the same path on CPU: no vLLM, no bf16, a tiny model, 2 steps (checks everything but the GPU)")
    p.add_argument("--steps", type=int, help="GRPO steps (default 4 on a GPU, 2 on CPU)")
    p.add_argument("--workers", type=int, default=None, help="Coq verifier workers (default 8 on a GPU, 1 on CPU)")
    p.add_argument("--out", help="where the run goes (default: a temporary dir, removed at the end)")
    args = p.parse_args(argv)
    gpu = not args.cpu_dry_run
    say(f"mode: {'GPU (vLLM colocate, bf16)' if gpu else 'CPU dry run (no vLLM, fp32: NOT a GPU check)'}")
    start = time.monotonic()
    try:
        info = report_machine(gpu=gpu)
    except CheckFailed as exc:
        say(f"FAIL: {exc}")
        return 2
    with tempfile.TemporaryDirectory(prefix="proofgym-gpu-check-") as tmp:
        out = Path(args.out) if args.out else Path(tmp)
        try:
            model = build_model(out / "model", gpu=gpu)
            cfg = grpo_config(model, out / "run", gpu=gpu, steps=args.steps or (4 if gpu else 2),
                              workers=args.workers or (8 if gpu else 1))
            say(f"GRPO: {cfg.max_steps} steps, {cfg.per_device_train_batch_size} completions per step, "
                f"{cfg.max_completion_length} tokens, {cfg.verifier_workers} Coq workers as the reward")
            numbers = run_grpo(cfg, gpu=gpu)
        except Exception as exc:  # the check's job is to say what broke: the traceback, then one line
            traceback.print_exc()
            say(f"FAIL: the GRPO run failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
            return 1
    for key, value in numbers.items():
        say(f"RESULT {key}: {value}")
    say("RESULT json: " + json.dumps({"machine": info, **numbers}, default=str))
    say(f"OK in {time.monotonic() - start:.0f} s" + ("" if gpu else " (CPU dry run: no GPU was used)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
