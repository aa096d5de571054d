#!/usr/bin/env python3
"""Benchmark the warm Coq path against the naive way (whole-file ``coqc`` per attempt), in one run.

For each task, the same attempts (the reference proof, and a wrong proof) are checked
1. the naive way: write context + statement + proof to a file and run ``coqc`` on it;
2. the proofgym way: a warm sandboxed ``coqidetop`` with the context loaded once
   (audit off, to time the per-attempt path; the audit is a separate, sampled cost).
It prints per-attempt medians, the ratio, the one-time context load, and peak memory.

    python scripts/bench_verifiers.py                    # default: 12 tasks of the built suite, 5 attempts each
    python scripts/bench_verifiers.py --suite tests/data/tiny_suite.jsonl --attempts 10
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.progress import track
from rich.table import Table

from proofgym.envs.systems import COQ
from proofgym.envs.tasks.suites import load_tasks
from proofgym.envs.types import Task
from proofgym.envs.verifiers.coq import CoqVerifier
from proofgym.envs.verifiers.sandbox import procfs

WRONG = "Proof. intros. reflexivity. Qed."


def naive_check(task: Task, proof: str, workdir: Path) -> float:
    src = workdir / "Naive.v"
    src.write_text(f"{task.context}\n{task.statement}\n{proof}\n", encoding="utf-8")
    start = time.perf_counter()
    subprocess.run(["coqc", "-q", str(src)], cwd=workdir, capture_output=True, timeout=600)
    return time.perf_counter() - start


def vm_hwm_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", default="coq-stdlib", help="suite name or .jsonl (default coq-stdlib)")
    parser.add_argument("--tasks", type=int, default=12, help="number of tasks (default 12)")
    parser.add_argument("--attempts", type=int, default=5, help="attempts per task and path (default 5)")
    args = parser.parse_args()
    if shutil.which("coqc") is None:
        raise SystemExit(f"coqc not found: {COQ.install_hint}")
    tasks = load_tasks(args.suite)
    step = max(1, len(tasks) // args.tasks)
    tasks = tasks[::step][: args.tasks]
    proofs = [WRONG if i % 2 else None for i in range(args.attempts)]

    naive: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        for task in track(tasks, description="naive coqc"):
            for p in proofs:
                naive.append(naive_check(task, p or task.reference_proof, Path(tmp)))
    naive_peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss

    warm: list[float] = []
    loads: list[float] = []
    peak_kib = 0
    with CoqVerifier(audit="never", max_sessions=2) as verifier:
        for task in track(tasks, description="warm coqidetop"):
            start = time.perf_counter()
            # One-time costs per context: the first two OKs (the first loads the context into a warm
            # session, the second computes its axiom summary once, which later OKs use instead of
            # Print Assumptions).
            verifier.check(task, task.reference_proof)
            verifier.check(task, task.reference_proof)
            loads.append(time.perf_counter() - start)
            for p in proofs:
                result = verifier.check(task, p or task.reference_proof)
                warm.append(result.wall_s)
            # the warm sessions are this process's only children now (the naive coqc runs are over)
            peak_kib = max([peak_kib, *(vm_hwm_kib(pid) for pid in procfs.descendants(os.getpid()))])
        # Tactic mode: per-step latency in a warm session (steps, failed steps and backtracking).
        step_times: list[float] = []
        backtrack_times: list[float] = []
        for task in tasks[: max(1, len(tasks) // 2)]:
            with verifier.open(task) as session:
                for _ in range(args.attempts):
                    t0 = time.perf_counter()
                    first = session.run("intros.", session.root)
                    step_times.append(time.perf_counter() - t0)
                    t0 = time.perf_counter()
                    session.run("idtac.", first.state.state_id if first.ok else session.root)
                    step_times.append(time.perf_counter() - t0)
                    t0 = time.perf_counter()
                    session.run("exact I.", session.root)  # usually fails: the state is restored
                    backtrack_times.append(time.perf_counter() - t0)
        audited_start = time.perf_counter()
        audit_result = verifier.check(tasks[0], tasks[0].reference_proof, audit=True)
        audit_s = time.perf_counter() - audited_start

    med_naive, med_warm = statistics.median(naive), statistics.median(warm)
    table = Table(title=f"Coq: {len(tasks)} tasks x {args.attempts} attempts (same attempts on both paths)")
    for col in ("path", "median per attempt", "mean per attempt", "peak RSS"):
        table.add_column(col, justify="right")
    table.add_row("naive: whole-file coqc", f"{med_naive * 1000:.1f} ms", f"{statistics.mean(naive) * 1000:.1f} ms",
                  f"{naive_peak_kib / 1024:.0f} MiB (largest coqc)")
    table.add_row("proofgym: warm coqidetop", f"{med_warm * 1000:.2f} ms", f"{statistics.mean(warm) * 1000:.2f} ms",
                  f"{peak_kib / 1024:.0f} MiB (largest session)")
    console = Console()
    console.print(table)
    console.print(f"ratio (median naive / median warm): [bold]{med_naive / med_warm:.0f}x[/] per attempt")
    console.print(f"tactic mode: median {statistics.median(step_times) * 1000:.2f} ms per step, "
                  f"{statistics.median(backtrack_times) * 1000:.2f} ms per failed step + backtrack; "
                  f"ratio against a whole-file coqc per attempt: "
                  f"[bold]{med_naive / statistics.median(step_times):.0f}x[/]")
    amortized = (sum(warm) + sum(loads)) / len(warm)
    console.print(f"including the one-time costs spread over these {args.attempts} attempts per task: "
                  f"{amortized * 1000:.1f} ms per attempt, {statistics.mean(naive) / amortized:.1f}x (mean vs mean)")
    console.print(f"one-time per context (load + first two OKs): median {statistics.median(loads):.2f} s; "
                  f"an audited OK (coqc + coqchk) costs {audit_s:.2f} s ({audit_result.verdict.value})")


if __name__ == "__main__":
    main()
