"""Evaluation: ACC#k / pass@k per category, verdict counts, resumable JSONL results.

Results are appended to a JSONL file as each check finishes; a rerun with the
same output file skips (task, sample) pairs already there, so a killed run
resumes and ends with the same totals. Harness failures (the verifier broke)
are not written: they are reported and retried on the next run, never scored 0.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proofgym.envs.errors import ProofgymError, VerifierError
from proofgym.envs.types import Task, Verdict


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k (Chen et al. 2021): ``1 - C(n-c, k) / C(n, k)``; ACC#k when n == k."""
    if n < k:
        raise ValueError(f"need n >= k samples, got n={n}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


class ReferenceAgent:
    """Submits each task's reference proof. The upper bound of a suite, and a validity check."""

    name = "reference"

    def act(self, task: Task, sample: int) -> str:
        return task.reference_proof


AGENTS: dict[str, Callable[[], Any]] = {"reference": ReferenceAgent}


@dataclass
class EvalSummary:
    """Totals of an evaluation run, as printed in the table."""

    k: int
    per_category: dict[str, dict[str, float]] = field(default_factory=dict)
    verdicts: Counter = field(default_factory=Counter)
    n_tasks: int = 0
    n_results: int = 0
    harness_failures: int = 0
    cheat_reasons: Counter = field(default_factory=Counter)

    def to_dict(self) -> dict[str, Any]:
        return {
            "k": self.k,
            "per_category": self.per_category,
            "verdicts": dict(self.verdicts),
            "n_tasks": self.n_tasks,
            "n_results": self.n_results,
            "harness_failures": self.harness_failures,
            "cheat_reasons": dict(self.cheat_reasons),
        }


def ensure_writable(path: Path, min_free_bytes: int = 10 * 1024 * 1024) -> None:
    """Fail before any work starts if results cannot be written."""
    parent = path.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ProofgymError(f"cannot create results dir {parent}: {exc.strerror}; pass --out somewhere writable") from None
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise ProofgymError(f"results path {path} is not writable; pass --out somewhere writable")
    free = shutil.disk_usage(parent).free
    if free < min_free_bytes:
        raise ProofgymError(f"only {free // 1024} KiB free at {parent}; free some space or pass --out elsewhere")


def read_results(path: Path) -> list[dict[str, Any]]:
    """Results already written; a torn last line (killed mid-write) is ignored."""
    if not path.exists():
        return []
    rows = []
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(row, dict) and "task_id" in row and "sample" in row and "verdict" in row:
                rows.append(row)
    return rows


def _repair_tail(path: Path) -> None:
    """Make sure the file ends with a newline so an append never glues onto a torn line."""
    if path.exists() and path.stat().st_size:
        with path.open("rb+") as fh:
            fh.seek(-1, os.SEEK_END)
            if fh.read(1) != b"\n":
                fh.write(b"\n")


# -- worker side ------------------------------------------------------------------------------------
_WORKER: dict[str, Any] = {}


def _worker_init(verifier_kwargs: dict[str, Any]) -> None:
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C
    _WORKER["kwargs"] = verifier_kwargs
    _WORKER["verifiers"] = {}


def _worker_check(task_dict: dict[str, Any], sample: int, proof: str) -> dict[str, Any]:
    from proofgym.envs.verifiers.base import make_verifier

    task = Task.from_dict(task_dict)
    verifiers = _WORKER.setdefault("verifiers", {})
    if task.system not in verifiers:
        verifiers[task.system] = make_verifier(task.system, **_WORKER.get("kwargs", {}))
    try:
        result = verifiers[task.system].check(task, proof)
    except VerifierError as exc:
        verifiers.pop(task.system).close()
        return {"task_id": task.id, "sample": sample, "harness_error": f"{type(exc).__name__}: {exc}"}
    except ProofgymError as exc:
        return {"task_id": task.id, "sample": sample, "harness_error": f"{type(exc).__name__}: {exc}"}
    row = {"task_id": task.id, "sample": sample, "category": task.category, "system": task.system}
    row.update(result.to_dict())
    return row


def run_eval(
    tasks: list[Task],
    *,
    agent: Any,
    k: int,
    out: Path,
    workers: int = 1,
    verifier_kwargs: dict[str, Any] | None = None,
    progress: bool = True,
    on_result: Callable[[dict[str, Any]], None] | None = None,
) -> EvalSummary:
    """Evaluate ``agent`` with ``k`` samples per task; append rows to ``out``; return totals."""
    ensure_writable(out)
    done = {(r["task_id"], r["sample"]) for r in read_results(out)}
    todo = [(t, s) for t in tasks for s in range(k) if (t.id, s) not in done]
    _repair_tail(out)
    harness_failures = 0
    init_args = (dict(verifier_kwargs or {}),)
    workers = max(1, workers)
    with _progress(progress, total=len(tasks) * k, completed=len(tasks) * k - len(todo)) as advance, \
            out.open("a", encoding="utf-8") as fh:
        pool = ProcessPoolExecutor(max_workers=workers, initializer=_worker_init, initargs=init_args)
        inflight: dict[Future, tuple[Task, int, str, int]] = {}
        retry: list[tuple[Task, int, str, int]] = []
        jobs: Iterator = iter(todo)
        limit = workers * 2  # back-pressure: a bounded number of checks in flight

        def submit_next() -> bool:
            if retry:
                job = retry.pop()
            else:
                try:
                    task, sample = next(jobs)
                except StopIteration:
                    return False
                job = (task, sample, agent.act(task, sample), 0)
            inflight[pool.submit(_worker_check, job[0].to_dict(), job[1], job[2])] = job
            return True

        try:
            while True:
                while len(inflight) < limit and submit_next():
                    pass
                if not inflight:
                    break
                finished, _ = wait(list(inflight), return_when=FIRST_COMPLETED)
                broken = False
                for fut in finished:
                    job = inflight.pop(fut)
                    try:
                        row = fut.result()
                    except BrokenProcessPool:
                        broken = True
                        if job[3] == 0:
                            retry.append((*job[:3], 1))  # a killed worker: retry once on a fresh one
                        else:
                            harness_failures += 1
                            advance("harness failure: worker died twice")
                        continue
                    except Exception as exc:  # noqa: BLE001 - a harness failure, not a verdict
                        harness_failures += 1
                        advance(f"harness failure: {type(exc).__name__}")
                        continue
                    if "harness_error" in row:
                        harness_failures += 1
                        advance(f"harness failure: {row['harness_error'][:60]}")
                        continue
                    fh.write(json.dumps(row, ensure_ascii=False) + "\n")
                    fh.flush()
                    if on_result:
                        on_result(row)
                    advance(row["verdict"])
                if broken:
                    # Every check in flight on the broken pool is lost: requeue them on a fresh pool.
                    for job in inflight.values():
                        retry.append((*job[:3], job[3] + 1) if job[3] else (*job[:3], 1))
                    inflight.clear()
                    pool.shutdown(wait=False, cancel_futures=True)
                    pool = ProcessPoolExecutor(max_workers=workers, initializer=_worker_init, initargs=init_args)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
    summary = summarize(read_results(out), tasks, k)
    summary.harness_failures = harness_failures
    return summary


def summarize(rows: Iterable[dict[str, Any]], tasks: list[Task], k: int) -> EvalSummary:
    """pass@k per category (and ``all``) over ``tasks``, from result rows."""
    wanted = {t.id: t for t in tasks}
    by_task: dict[str, dict[int, str]] = defaultdict(dict)
    summary = EvalSummary(k=k, n_tasks=len(tasks))
    for row in rows:
        if row["task_id"] not in wanted or row["sample"] >= k:
            continue
        if row["sample"] in by_task[row["task_id"]]:
            continue  # a duplicate row never counts twice
        by_task[row["task_id"]][row["sample"]] = row["verdict"]
        summary.verdicts[row["verdict"]] += 1
        summary.n_results += 1
        if row["verdict"] == Verdict.CHEATING.value:
            for reason in row.get("reasons", []):
                summary.cheat_reasons[reason.split(":")[0]] += 1
    cats: dict[str, list[float]] = defaultdict(list)
    for task in tasks:
        samples = by_task.get(task.id, {})
        if len(samples) < k:
            continue
        correct = sum(v == Verdict.OK.value for v in samples.values())
        score = pass_at_k(len(samples), correct, k)
        cats[task.category or "-"].append(score)
        cats["all"].append(score)
    for cat, scores in sorted(cats.items()):
        summary.per_category[cat] = {"n": len(scores), f"pass@{k}": sum(scores) / len(scores)}
    return summary


class _progress:
    """A rich progress bar (or nothing) that counts verdicts as they arrive."""

    def __init__(self, enabled: bool, total: int, completed: int) -> None:
        self.enabled, self.total, self.completed = enabled, total, completed
        self.counts: Counter = Counter()

    def __enter__(self) -> Callable[[str], None]:
        if not self.enabled:
            return lambda _label: None
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._progress = Progress(TextColumn("[bold]eval"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                  TimeRemainingColumn(), TextColumn("{task.description}"), transient=False)
        self._progress.start()
        self._task = self._progress.add_task("", total=self.total, completed=self.completed)

        def advance(label: str) -> None:
            self.counts[label.split(":")[0]] += 1
            desc = " ".join(f"{k}={v}" for k, v in sorted(self.counts.items()))
            self._progress.update(self._task, advance=1, description=desc)

        return advance

    def __exit__(self, *exc: object) -> None:
        if self.enabled:
            self._progress.stop()


def print_summary(summary: EvalSummary, console: Any = None) -> None:
    """The table users read: pass@k per category and counts per verdict."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    table = Table(title=f"pass@{summary.k} per category")
    table.add_column("category")
    table.add_column("tasks", justify="right")
    table.add_column(f"pass@{summary.k}", justify="right")
    for cat, stats in summary.per_category.items():
        table.add_row(cat, str(stats["n"]), f"{100 * stats[f'pass@{summary.k}']:.1f}%")
    console.print(table)
    verdicts = Table(title="verdicts")
    for v in Verdict:
        verdicts.add_column(v.value, justify="right")
    verdicts.add_column("harness failures", justify="right")
    verdicts.add_row(*(str(summary.verdicts.get(v.value, 0)) for v in Verdict), str(summary.harness_failures))
    console.print(verdicts)
    if summary.cheat_reasons:
        console.print("cheat reasons: " + ", ".join(f"{r} ({n})" for r, n in summary.cheat_reasons.most_common(10)))
