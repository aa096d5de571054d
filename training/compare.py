"""Did a checkpoint get better? Two eval runs on the same tasks, compared with a paired bootstrap interval.

Any trainer's checkpoint can be judged this way: evaluate the starting model and the checkpoint with
``proofgym eval`` on the same held-out suite (``--k`` samples per task), then::

    proofgym compare runs/base-eval runs/ckpt-eval [runs/control-eval ...]

Each run after the first is compared with the first, task by task: Δ is the mean over shared tasks of the
difference in per-task pass@1 (the share of a task's samples that got OK), and the interval is a paired
bootstrap over tasks (tasks drawn with replacement, the same draw for both runs). With several training runs per
arm (seeds), :func:`hierarchical_bootstrap` draws runs first, then tasks, so the interval covers the spread between
seeds too. What it does not show: anything about tasks outside the suite, or a gain at another temperature than
the one both runs used.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from proofgym.envs.errors import ProofgymError
from proofgym.training.report import load_run


def per_task_pass(rows: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """Task id -> the share of its samples whose verdict was OK (the unbiased pass@1 of that task)."""
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for row in rows:
        count = counts[str(row["task_id"])]
        count[0] += row.get("verdict") == "OK"
        count[1] += 1
    return {task: ok / n for task, (ok, n) in counts.items()}


def hierarchical_bootstrap(pairs: Sequence[tuple[Mapping[str, float], Mapping[str, float]]], *,
                           resamples: int = 10000, seed: int = 0, level: float = 0.95) -> dict[str, float]:
    """Δ = mean over runs and shared tasks of ``arm - base``, each run paired with the base it came from.

    Each resample draws runs with replacement, then tasks with replacement, so the interval covers the spread
    between seeds as well as between tasks. ``pairs``: ``(arm run, its base)`` per run, each a task -> pass map.
    """
    import numpy as np

    nan = float("nan")
    if not pairs:
        return {"delta": nan, "lo": nan, "hi": nan, "tasks": 0, "runs": 0}
    ids = sorted(set.intersection(*(set(a) & set(b) for a, b in pairs)))
    if not ids:
        return {"delta": nan, "lo": nan, "hi": nan, "tasks": 0, "runs": len(pairs)}
    diffs = np.array([[a[t] - b[t] for t in ids] for a, b in pairs], dtype=float)  # runs x tasks
    rng = np.random.default_rng(seed)
    runs = rng.integers(0, len(pairs), size=(resamples, len(pairs)))
    tasks = rng.integers(0, len(ids), size=(resamples, len(ids)))
    means = np.array([diffs[r][:, t].mean() for r, t in zip(runs, tasks, strict=True)])
    lo, hi = np.quantile(means, [(1 - level) / 2, 1 - (1 - level) / 2])
    return {"delta": float(diffs.mean()), "lo": float(lo), "hi": float(hi), "tasks": len(ids), "runs": len(pairs)}


def paired_bootstrap(arm: Mapping[str, float], base: Mapping[str, float], *, resamples: int = 10000, seed: int = 0,
                     level: float = 0.95) -> dict[str, float]:
    """One run against its base: the paired bootstrap over tasks (the hierarchical one with a single run)."""
    out = hierarchical_bootstrap([(arm, base)], resamples=resamples, seed=seed, level=level)
    out.pop("runs", None)
    return out


def compare_runs(base: str | Path, others: Sequence[str | Path], *, resamples: int = 10000,
                 seed: int = 0) -> list[dict[str, Any]]:
    """Each run of ``others`` against ``base``: pass@1 of both on the shared tasks, Δ and its 95% interval.

    Raises:
        ProofgymError: a run that holds no results, or runs that share no task.
    """
    base_pass = per_task_pass(load_run(base).rows)
    out = []
    for other in others:
        run = load_run(other)
        arm = per_task_pass(run.rows)
        shared = sorted(set(arm) & set(base_pass))
        if not shared:
            raise ProofgymError(f"{other} and {base} share no task: evaluate both on the same suite")
        stats = paired_bootstrap(arm, base_pass, resamples=resamples, seed=seed)
        out.append({"run": str(other), "label": run.label, "tasks": len(shared),
                    "base_pass@1": sum(base_pass[t] for t in shared) / len(shared),
                    "pass@1": sum(arm[t] for t in shared) / len(shared),
                    "delta": stats["delta"], "lo": stats["lo"], "hi": stats["hi"],
                    "only_in_run": len(set(arm) - set(base_pass)), "only_in_base": len(set(base_pass) - set(arm))})
    return out
