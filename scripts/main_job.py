"""The main job (`make eval`): build the suite, evaluate the baseline, GRPO, evaluate the checkpoint, report.

    python scripts/main_job.py                                  # configs/train/grpo_cpu.yaml
    python scripts/main_job.py --config configs/train/grpo_gpu.yaml      # the same job on a GPU machine
    python scripts/main_job.py --max_steps 5 --checkpoint_eval_limit 16  # any config field as a flag

Stages, each announced with its elapsed time:

1. the suite: ``proofgym build coq-stdlib`` when it is not built yet;
2. GRPO with the real verifier as reward (:func:`proofgym.training.grpo.train_grpo`): the
   model before training is saved as ``checkpoint-0`` and evaluated on the held-out split (the
   baseline), then trained, then the final model is evaluated the same way;
3. the report: ``<output_dir>/report/`` (the eval report of baseline vs trained, with plots) and
   ``<output_dir>/MAIN_JOB.md`` (before/after pass@1, the training curve, timings, where the W&B run is).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CONFIG = ROOT / "configs" / "train" / "grpo_cpu.yaml"


def banner(stage: str, start: float) -> None:
    print(f"\n=== [{time.monotonic() - start:6.0f} s] {stage}", file=sys.stderr, flush=True)


def build_suite_if_missing(suite: str, workers: int, start: float) -> None:
    from proofgym.envs.tasks.suites import SuiteNotFound, resolve_suite

    try:
        path = resolve_suite(suite)
        banner(f"1/3 suite {suite}: already built ({path})", start)
        return
    except SuiteNotFound:
        if suite != "coq-stdlib":
            raise
    banner("1/3 building and validating the coq-stdlib suite (proofgym build coq-stdlib)", start)
    from proofgym.envs.tasks.build import build_coq_stdlib

    print(build_coq_stdlib(workers=workers, progress=True).render(), flush=True)


def training_curve(log_history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    keys = ("reward", "proof/ok_rate", "proof/cheat_rate", "verifier/error_rate", "verifier/timeout_rate",
            "verifier/harness_failures", "step_time")
    return [{"step": row.get("step"), **{k: row.get(k) for k in keys}} for row in log_history if "reward" in row]


def _pct(value: Any) -> str:
    return f"{100 * value:.1f}%" if isinstance(value, (int, float)) else "-"


def write_summary(result: Any, cfg: Any, timings: dict[str, float], report: Path | None) -> Path:
    lines = [f"# Main job: {cfg.run_name}", "",
             f"GRPO on `{cfg.suite}` ({', '.join(cfg.categories or ['all categories'])}) with "
             f"`{result.model or cfg.model_name_or_path}`, {result.global_step} steps; rewards from the real verifier.",
             ""]
    evals = [r for r in result.checkpoint_evals if "per_category" in r]
    if evals:
        cats = [c for c in evals[0]["per_category"]]
        lines += ["## Held-out pass@1 (greedy)", "", "| step | " + " | ".join(cats) + " | verdicts |",
                  "|---|" + "---|" * (len(cats) + 1)]
        for r in evals:
            cells = [f"{_pct(r['per_category'].get(c, {}).get('pass@1'))} of {r['per_category'].get(c, {}).get('n', 0)}"
                     for c in cats]
            lines.append(f"| {r['step']} | " + " | ".join(cells) + f" | {r['verdicts']} |")
        lines.append("")
    curve = training_curve(result.log_history)
    if curve:
        lines += ["## Training", "", "| step | reward | ok | cheat | error | timeout | harness failures | s/step |",
                  "|---|---|---|---|---|---|---|---|"]
        for row in curve:
            reward = row["reward"]
            lines.append(f"| {row['step']} | {reward if reward is None else f'{reward:.3f}'} | "
                         f"{_pct(row['proof/ok_rate'])} | {_pct(row['proof/cheat_rate'])} | "
                         f"{_pct(row['verifier/error_rate'])} | {_pct(row['verifier/timeout_rate'])} | "
                         f"{row['verifier/harness_failures']} | {row['step_time'] or 0:.0f} |")
        lines.append("")
    lines += ["## Timings", ""] + [f"- {name}: {seconds:.0f} s" for name, seconds in timings.items()] + [""]
    lines += ["## Where things are", "",
              f"- final model: `{result.final_checkpoint}` (`proofgym eval --agent local --model "
              f"{result.final_checkpoint}`)"]
    if report:
        lines.append(f"- eval report, baseline vs trained: `{report}`")
    if result.wandb_dir:
        lines.append(f"- W&B run (offline unless configured): `{result.wandb_dir}`; upload with "
                     f"`wandb sync {result.wandb_dir}`")
    path = Path(result.output_dir) / "MAIN_JOB.md"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if "--config" not in args:
        args = ["--config", str(DEFAULT_CONFIG), *args]
    start = time.monotonic()
    timings: dict[str, float] = {}
    from proofgym.envs.errors import ProofgymError
    from proofgym.training.common import parse_config
    from proofgym.training.grpo import train_grpo
    from proofgym.training.grpo_config import ProofGRPOConfig

    try:
        cfg = parse_config(ProofGRPOConfig, args)
        mark = time.monotonic()
        build_suite_if_missing(cfg.suite, cfg.verifier_workers, start)
        timings["suite"] = time.monotonic() - mark
        banner(f"2/3 GRPO with verifier rewards: baseline eval (step 0), {cfg.max_steps} steps, final eval "
               f"-> {cfg.output_dir}", start)
        mark = time.monotonic()
        result = train_grpo(cfg)
    except ProofgymError as exc:
        print(f"proofgym: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    timings["GRPO with baseline and final evaluation"] = time.monotonic() - mark
    for record in result.checkpoint_evals:
        timings[f"evaluation at step {record['step']}"] = record.get("seconds", 0.0)
    banner("3/3 report", start)
    report = None
    evals = [r for r in result.checkpoint_evals if "run_dir" in r]
    if evals:
        from proofgym.training.report import write_report

        runs = [evals[0]["run_dir"]] + ([evals[-1]["run_dir"]] if len(evals) > 1 else [])
        report = write_report(runs, out=Path(result.output_dir) / "report")
    timings["total"] = time.monotonic() - start
    summary = write_summary(result, cfg, timings, report)
    print(summary.read_text(encoding="utf-8"))
    print(f"main job done in {timings['total']:.0f} s: {summary}", flush=True)
    (Path(result.output_dir) / "main_job.json").write_text(json.dumps(
        {"timings": timings, "checkpoint_evals": result.checkpoint_evals, "run_name": result.run_name},
        indent=2, default=str) + "\n", encoding="utf-8")
    return 130 if result.interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
