"""The main job (`make eval`): a policy that can learn, GRPO with verifier rewards, and what it changed.

    python scripts/main_job.py                                  # configs/train/grpo_cpu.yaml, ~30 min on 2 cores
    python scripts/main_job.py --config configs/train/grpo_gpu.yaml      # the same job on a GPU machine
    python scripts/main_job.py --max_steps 2 --checkpoint_eval_limit 8   # any config field as a flag

Stages, each announced with its elapsed time:

1. the suite: ``proofgym build coq-stdlib`` when it is not built yet;
2. :func:`proofgym.training.grpo.train_grpo` as the config says. On the CPU config: an SFT warm
   start on the training split's reference proofs (``warm_start_sft_steps``), so the policy solves
   some tasks (p > 0: from p = 0 every GRPO group has zero reward variance and nothing is learned);
   the warm-started model evaluated on the held-out split (step 0, the baseline: k samples per task
   at temperature 1); the pass-rate curriculum (k samples per training task, GRPO only on the tasks
   with 0 < p_hat < 1); GRPO with the real Coq verifier as reward; the final model evaluated the same way;
3. the report: ``<output_dir>/MAIN_JOB.md``: the training reward per step, held-out mean pass@1 and
   pass@k before and after with 95% bootstrap intervals over tasks and the paired Δ, the curriculum's
   counts, timings; ``<output_dir>/report/`` (the eval report of baseline vs trained, with plots).

A short CPU run shows the pipeline working (nonzero rewards, groups with variance); whether GRPO
*improves* the policy takes a longer run with more held-out tasks: see docs/main-job.md and
docs/learning.md.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CONFIG = ROOT / "configs" / "train" / "grpo_cpu.yaml"


def _statistics() -> Any:
    """scripts/learning_curve.py, for its per-task counts, arm statistics and paired bootstrap (one copy of each)."""
    name = "proofgym_learning_curve_stats"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / "learning_curve.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


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


CURVE_KEYS = ("reward", "reward_std", "frac_reward_zero_std", "proof/ok_rate", "proof/cheat_rate",
              "verifier/error_rate", "verifier/timeout_rate", "verifier/harness_failures", "completions/clipped_ratio",
              "verifier/batch_seconds", "step_time")


def training_curve(log_history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per logged training step: the reward and the metrics that say whether the step could teach."""
    return [{"step": row.get("step"), **{k: row.get(k) for k in CURVE_KEYS}} for row in log_history if "reward" in row]


def _pct(value: Any) -> str:
    return f"{100 * value:.1f}%" if isinstance(value, (int, float)) else "-"


def _num(value: Any, fmt: str = ".3f") -> str:
    return format(value, fmt) if isinstance(value, (int, float)) else "-"


def heldout_stats(evals: list[dict[str, Any]], k: int, *, resamples: int = 10000, seed: int = 0) -> dict[str, Any]:
    """Per evaluation: mean pass@1 and pass@k over held-out tasks with 95% bootstrap intervals; the first vs the last.

    Reads each evaluation's ``results.jsonl`` (per-task OK counts; harness failures left out) and
    uses scripts/learning_curve.py's statistics: mean pass@1 is the mean over tasks of c/n, pass@k
    the unbiased estimator over tasks with n >= k, intervals are percentile bootstraps over tasks
    (the Δ one paired: the same tasks before and after, so task difficulty cancels).
    """
    from proofgym.training.compare import paired_bootstrap
    from proofgym.training.evaluate import pass_at_k, read_results

    lc = _statistics()
    out: dict[str, Any] = {"evals": []}
    per_task_p1: list[dict[str, float]] = []
    for record in evals:
        results = Path(record["run_dir"]) / "results.jsonl"
        counts = lc.per_task(read_results(results)) if results.exists() else {}
        stats = lc.arm_stats(counts, None, k)
        pk = {t: pass_at_k(n, c, k) for t, (c, n) in counts.items() if n >= k}
        zeros_1 = {t: 0.0 for t in stats["per_task_pass@1"]}
        entry = {"step": record["step"], "tasks": stats["tasks"], "pass@1": stats["pass@1"], f"pass@{k}": stats[f"pass@{k}"],
                 "pass@1_ci": paired_bootstrap(stats["per_task_pass@1"], zeros_1, resamples=resamples, seed=seed),
                 f"pass@{k}_ci": paired_bootstrap(pk, {t: 0.0 for t in pk}, resamples=resamples, seed=seed),
                 "samples": sum(n for _, n in counts.values())}
        out["evals"].append(entry)
        per_task_p1.append(stats["per_task_pass@1"])
    if len(per_task_p1) >= 2:
        out["delta_pass@1"] = paired_bootstrap(per_task_p1[-1], per_task_p1[0], resamples=resamples, seed=seed)
    return out


def _ci(d: Mapping[str, float]) -> str:
    return f"[{_pct(d['lo'])}, {_pct(d['hi'])}]" if d.get("tasks") else ""


def write_summary(result: Any, cfg: Any, timings: dict[str, Any], report: Path | None) -> Path:
    """``<output_dir>/MAIN_JOB.md`` and ``main_job.json``: what the run did and what it changed."""
    k = cfg.checkpoint_eval_k
    evals = [r for r in result.checkpoint_evals if "run_dir" in r]
    held = heldout_stats(evals, k, seed=cfg.seed) if evals else {"evals": []}
    warm = result.warm_start or {}
    lines = [f"# Main job: {cfg.run_name}", "",
             f"GRPO on `{cfg.suite}` ({', '.join(cfg.categories or ['all categories'])}) with "
             f"`{result.model or cfg.model_name_or_path}`, {result.global_step} steps; rewards from the real verifier.",
             ""]
    if warm:
        losses = warm.get("loss") or []
        lines += [f"SFT warm start: {warm.get('steps')} steps on the training split's reference proofs "
                  f"(loss {_num(losses[0] if losses else None)} -> {_num(losses[-1] if losses else None)}, "
                  f"{warm.get('seconds', 0):.0f} s), saved to `{warm.get('path')}`.", ""]
    if held["evals"]:
        temp = cfg.checkpoint_eval_temperature
        n = cfg.checkpoint_eval_n or k
        lines += [f"## Held-out ({held['evals'][0]['tasks']} tasks, {n} sample(s) per task at temperature "
                  f"{temp if temp is not None else ('0' if n == 1 else '0.5')})", "",
                  "Intervals: 95% percentile bootstrap over tasks. Step 0 is the model GRPO started from.", "",
                  f"| step | mean pass@1 | 95% CI | pass@{k} | 95% CI | samples |", "|---|---|---|---|---|---|"]
        for e in held["evals"]:
            lines.append(f"| {e['step']} | {_pct(e['pass@1'])} | {_ci(e['pass@1_ci'])} | {_pct(e[f'pass@{k}'])} | "
                         f"{_ci(e[f'pass@{k}_ci'])} | {e['samples']} |")
        if "delta_pass@1" in held:
            d = held["delta_pass@1"]
            verdict = ("above 0: the trained policy is better on these tasks" if d["lo"] > 0 else
                       "below 0: the trained policy is worse on these tasks" if d["hi"] < 0 else
                       "covers 0: this run cannot tell a change (a longer run, more tasks: docs/learning.md)")
            lines += ["", f"Δ mean pass@1, last vs step 0: {100 * d['delta']:+.1f} pp, paired 95% CI "
                          f"[{100 * d['lo']:+.1f}, {100 * d['hi']:+.1f}] over {d['tasks']} tasks: the interval {verdict}."]
        lines.append("")
    failed = [r for r in result.checkpoint_evals if "run_dir" not in r]
    for r in failed:
        lines += [f"Evaluation at step {r['step']} failed: {r.get('error')}", ""]
    if result.curriculum:
        lines += ["## Curriculum (0 < p_hat < 1 kept)", "", "| step | kept | too easy | too hard | unscored | mean p_hat |",
                  "|---|---|---|---|---|---|"]
        for c in result.curriculum:
            lines.append(f"| {c['step']} | {c['curriculum/kept']:.0f} | {c['curriculum/too_easy']:.0f} | "
                         f"{c['curriculum/too_hard']:.0f} | {c['curriculum/unscored']:.0f} | "
                         f"{c['curriculum/mean_p_hat']:.2f} |")
        lines.append("")
    curve = training_curve(result.log_history)
    if curve:
        lines += ["## Training reward per step", "",
                  "| step | reward | reward std | zero-variance groups | ok | cheat | error | clipped | reward s | s/step |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for row in curve:
            lines.append(f"| {row['step']} | {_num(row['reward'])} | {_num(row['reward_std'])} | "
                         f"{_pct(row['frac_reward_zero_std'])} | {_pct(row['proof/ok_rate'])} | "
                         f"{_pct(row['proof/cheat_rate'])} | {_pct(row['verifier/error_rate'])} | "
                         f"{_pct(row['completions/clipped_ratio'])} | {_num(row['verifier/batch_seconds'], '.1f')} | "
                         f"{_num(row['step_time'], '.0f')} |")
        rewarded = sum(1 for row in curve if (row["reward"] or 0) > 0)
        varied = sum(1 for row in curve if (row["reward_std"] or 0) > 0)
        lines += ["", f"{rewarded} of {len(curve)} steps earned a positive mean reward; {varied} had reward variance "
                      f"(a step without it teaches nothing).", ""]
    lines += ["## Timings", ""] + [f"- {name}: {seconds:.0f} s" for name, seconds in timings.items()
                                   if isinstance(seconds, (int, float))]
    load = timings.get("load", {})
    if load:
        lines.append(f"- machine load average (1 min) at the start / end: {load['start']:.1f} / {load['end']:.1f} on "
                     f"{load['cores']} cores (timings, not results, depend on it)")
    lines.append("")
    lines += ["## Where things are", "",
              f"- final model: `{result.final_checkpoint}` (`proofgym eval --agent local --model "
              f"{result.final_checkpoint}`)"]
    if warm:
        lines.append(f"- warm-started model (step 0): `{warm.get('path')}`")
    if report:
        lines.append(f"- eval report, baseline vs trained: `{report}`")
    if result.wandb_dir:
        lines.append(f"- W&B run (offline unless configured): `{result.wandb_dir}`; upload with "
                     f"`wandb sync {result.wandb_dir}`")
    lines += ["", "What a longer run gives, and the controlled experiment: docs/main-job.md and docs/learning.md "
                  "in the repository."]
    path = Path(result.output_dir) / "MAIN_JOB.md"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    (Path(result.output_dir) / "main_job.json").write_text(json.dumps(
        {"timings": timings, "heldout": held, "training": curve, "warm_start": warm,
         "curriculum": [{k: v for k, v in c.items() if k != "p_hat"} for c in result.curriculum],
         "checkpoint_evals": result.checkpoint_evals, "run_name": result.run_name}, indent=2, default=str) + "\n",
        encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if "--config" not in args:
        args = ["--config", str(DEFAULT_CONFIG), *args]
    start = time.monotonic()
    load_start = os.getloadavg()[0]
    timings: dict[str, Any] = {}
    from proofgym.envs.errors import ProofgymError
    from proofgym.training.common import parse_config
    from proofgym.training.grpo import train_grpo
    from proofgym.training.grpo_config import ProofGRPOConfig

    try:
        cfg = parse_config(ProofGRPOConfig, args)
        mark = time.monotonic()
        build_suite_if_missing(cfg.suite, cfg.verifier_workers, start)
        timings["suite"] = time.monotonic() - mark
        warm = f"SFT warm start ({cfg.warm_start_sft_steps} steps), " if cfg.warm_start_sft_steps else ""
        curriculum = f"curriculum (k={cfg.curriculum_k}), " if cfg.curriculum else ""
        banner(f"2/3 {warm}baseline eval (step 0), {curriculum}GRPO with verifier rewards ({cfg.max_steps} steps), "
               f"final eval -> {cfg.output_dir}", start)
        mark = time.monotonic()
        result = train_grpo(cfg)
    except ProofgymError as exc:
        print(f"proofgym: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    timings["training with baseline and final evaluation"] = time.monotonic() - mark
    if result.warm_start:
        timings["of which the SFT warm start"] = result.warm_start.get("seconds", 0.0)
    for estimate in result.curriculum:
        timings[f"of which the curriculum estimate at step {estimate['step']}"] = estimate.get("seconds", 0.0)
    for record in result.checkpoint_evals:
        timings[f"of which the evaluation at step {record['step']}"] = record.get("seconds", 0.0)
    banner("3/3 report", start)
    report = None
    evals = [r for r in result.checkpoint_evals if "run_dir" in r]
    if evals:
        from proofgym.training.report import write_report

        runs = [evals[0]["run_dir"]] + ([evals[-1]["run_dir"]] if len(evals) > 1 else [])
        report = write_report(runs, out=Path(result.output_dir) / "report")
    timings["total"] = time.monotonic() - start
    timings["load"] = {"start": load_start, "end": os.getloadavg()[0], "cores": os.cpu_count() or 1}
    summary = write_summary(result, cfg, timings, report)
    print(summary.read_text(encoding="utf-8"))
    print(f"main job done in {timings['total']:.0f} s: {summary}", flush=True)
    return 130 if result.interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
