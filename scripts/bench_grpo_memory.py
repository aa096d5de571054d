"""Where a GRPO process's host memory goes: resident memory (RSS) per step beside step time (a benchmark, not a test).

Issue 29: the main job's training process peaked at 11.0 GB of RSS for a 135M-parameter model, and a GRPO
process grew from 4.9 to 7.7 GB over 16 steps. Each arm runs in a fresh process (so that one arm's heap
does not carry into the next), on the same model, tasks and settings, with the real Coq verifier pool:

- ``plain``: proofgym's GRPO as it runs (SFT warm start, then GRPO);
- ``trim``: the same, with glibc's ``malloc_trim(0)`` after every optimizer step (returns the freed heap to
  the system: if RSS then stays flat, the growth was allocator retention, not live objects).

Milestones (``load``: after loading the model; ``warm``: after the SFT warm start; ``warm+gc``: after a
``gc.collect()``, which frees what only reference cycles kept, e.g. the warm start's trainer and its optimizer
state) and every step's RSS, peak RSS and step time go to one JSON and a markdown table.

    .venv/bin/python scripts/bench_grpo_memory.py --model smollm2 --steps 4 --out runs/bench/grpo_memory.json
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ARMS = ("plain", "trim")


def malloc_trim() -> bool:
    """glibc's ``malloc_trim(0)``: give the heap's free pages back to the system (False where there is no glibc)."""
    try:
        return bool(ctypes.CDLL("libc.so.6").malloc_trim(0))
    except (OSError, AttributeError):
        return False


def run_arm(arm: str, model: str, steps: int, warm_steps: int) -> dict[str, Any]:
    """One arm in this process: milestones and per-step rows."""
    from transformers import TrainerCallback

    import proofgym.training.grpo as grpo
    from proofgym.training.grpo_config import ProofGRPOConfig
    from proofgym.training.grpo_trainer import host_memory

    milestones: dict[str, float] = {"start": host_memory()["memory/host_rss_gib"]}
    original_load, original_warm = grpo.load_model, grpo.sft_warm_start

    def load(*args: Any, **kwargs: Any) -> Any:
        out = original_load(*args, **kwargs)
        milestones["load"] = host_memory()["memory/host_rss_gib"]
        return out

    def warm(*args: Any, **kwargs: Any) -> Any:
        out = original_warm(*args, **kwargs)
        milestones["warm"] = host_memory()["memory/host_rss_gib"]
        gc.collect()
        milestones["warm+gc"] = host_memory()["memory/host_rss_gib"]
        return out

    class Trim(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            malloc_trim()

    grpo.load_model, grpo.sft_warm_start = load, warm
    if arm == "trim":
        from proofgym.training.grpo_trainer import ProofGRPOTrainer

        original_init = ProofGRPOTrainer.__init__

        def init(self: Any, *args: Any, **kwargs: Any) -> None:
            kwargs["callbacks"] = [*kwargs.get("callbacks", []), Trim()]
            original_init(self, *args, **kwargs)

        ProofGRPOTrainer.__init__ = init
    with tempfile.TemporaryDirectory(prefix="proofgym-grpo-memory-") as tmp:
        cfg = ProofGRPOConfig(
            model_name_or_path=model, suite=str(ROOT / "envs" / "tasks" / "data" / "coq-tiny.jsonl"),
            heldout_fraction=0.0, output_dir=tmp, report_to="none", max_steps=steps, per_device_train_batch_size=8,
            num_generations=4, max_completion_length=64, prompt_context_chars=200, torch_threads=1,
            learning_rate=1e-5, save_strategy="no", checkpoint_eval_at_end=False, verifier_workers=1,
            warm_start_sft_steps=warm_steps, warm_start_sft_batch_size=4, seed=0, log_completions=True)
        begin = time.monotonic()
        result = grpo.train_grpo(cfg)
        wall = time.monotonic() - begin
    rows = [{"step": r["step"], "step_s": round(r.get("step_time", 0.0), 2), "rss_gib": r.get("memory/host_rss_gib"),
             "peak_rss_gib": r.get("memory/host_peak_rss_gib")} for r in result.log_history if "reward" in r]
    return {"arm": arm, "model": model, "steps": steps, "warm_start_steps": warm_steps, "wall_s": round(wall, 1),
            "milestones_rss_gib": milestones, "per_step": rows, "end": host_memory()}


def table(arms: list[dict[str, Any]]) -> str:
    """Markdown: milestones, then one row per step with each arm's step time, RSS and peak RSS side by side."""
    lines = ["| milestone | " + " | ".join(a["arm"] for a in arms) + " |", "|---|" + "---|" * len(arms)]
    names = list(dict.fromkeys(k for a in arms for k in a["milestones_rss_gib"]))
    for name in names:
        lines.append(f"| RSS at {name} (GiB) | " + " | ".join(str(a["milestones_rss_gib"].get(name, "")) for a in arms)
                     + " |")
    lines += ["", "| step | " + " | ".join(f"{a['arm']}: s/step, RSS, peak RSS (GiB)" for a in arms) + " |",
              "|---|" + "---|" * len(arms)]
    for i in range(max(len(a["per_step"]) for a in arms)):
        cells = []
        for a in arms:
            r = a["per_step"][i] if i < len(a["per_step"]) else None
            cells.append(f"{r['step_s']}, {r['rss_gib']}, {r['peak_rss_gib']}" if r else "")
        lines.append(f"| {i + 1} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="tiny", help="tiny, smollm2, auto or a checkpoint dir (proofgym's names)")
    p.add_argument("--steps", type=int, default=4, help="GRPO steps per arm")
    p.add_argument("--warm-start-steps", type=int, default=4, help="SFT warm-start steps before GRPO (0: none)")
    p.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated, of {', '.join(ARMS)}")
    p.add_argument("--out", help="write the JSON here")
    p.add_argument("--arm", help=argparse.SUPPRESS)  # internal: run one arm in this process, JSON on stdout
    args = p.parse_args(argv)
    if args.arm:
        print("ARM " + json.dumps(run_arm(args.arm, args.model, args.steps, args.warm_start_steps)), flush=True)
        return 0
    arms = []
    for arm in args.arms.split(","):
        done = subprocess.run([sys.executable, __file__, "--arm", arm, "--model", args.model, "--steps",
                               str(args.steps), "--warm-start-steps", str(args.warm_start_steps)],
                              capture_output=True, text=True, cwd=ROOT)
        line = next((x for x in done.stdout.splitlines() if x.startswith("ARM ")), None)
        if done.returncode or line is None:
            print(done.stdout[-2000:] + done.stderr[-4000:], file=sys.stderr)
            return 1
        arms.append(json.loads(line.removeprefix("ARM ")))
        print(f"{arm}: {arms[-1]['wall_s']} s", file=sys.stderr)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(arms, indent=2) + "\n", encoding="utf-8")
    print(table(arms))
    return 0


if __name__ == "__main__":
    sys.exit(main())
