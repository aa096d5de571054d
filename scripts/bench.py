#!/usr/bin/env python3
"""proofgym's benchmark suite: one table of side-by-side ratios, all measured in one run.

Rows (each a ratio of two numbers measured here, now, on this machine):

- warm / cold per verifier: a first check on a fresh verifier (prover start + context load)
  against the same check on the warm one; for Coq also whole-file ``coqc`` (the stateless way);
- ``env.step`` overhead over a raw ``verifier.check`` of the same proof on the same warm verifier
  (goal: at most 5% more);
- pool throughput with 1, 2, ... workers up to the cores (goal: at least 0.8 x N of one worker);
- checks per second per core on P1 tasks;
- peak memory of the verifier processes.

    python scripts/bench.py                          # print the table
    python scripts/bench.py --write BENCHMARKS.md    # and write it, with the command and the machine
    python scripts/bench.py --suite coq-stdlib       # P1 tasks of a built suite instead of the tiny one

Audits are off (``audit="never"``): they are a sampled, separate cost, and would make the
per-check numbers depend on the dice.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym

import proofgym  # noqa: F401 - registers the envs
from proofgym.envs.errors import ProofgymError
from proofgym.envs.proof_env import load_task_list
from proofgym.envs.types import Task
from proofgym.envs.verifiers import base
from proofgym.envs.verifiers.pool import LocalVerifierPool
from proofgym.envs.verifiers.procfs import cpu_seconds, descendants, rss_bytes

ROOT = Path(__file__).resolve().parents[1]
TINY_SUITE = ROOT / "tests" / "data" / "tiny_suite.jsonl"
MIB = 1024**2


@dataclass
class Row:
    """One line of the table: ``a`` against ``b``, their ratio, and the goal if there is one."""

    measure: str
    a: str
    b: str
    ratio: float
    goal: str = ""
    met: bool | None = None


def _rel(path: str) -> str:
    try:
        return str(Path(path).resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def _median_ms(samples: list[float]) -> float:
    return 1000 * statistics.median(samples)


def _fmt_ms(ms: float) -> str:
    return f"{ms:.1f} ms" if ms < 1000 else f"{ms / 1000:.2f} s"


class PeakRss:
    """Samples the RSS of this process's descendants (verifier workers and provers) in the background."""

    def __init__(self, period_s: float = 0.1) -> None:
        self.period_s = period_s
        self.peak = 0
        self.peak_processes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        me = os.getpid()
        while not self._stop.is_set():
            tree = descendants(me)
            self.peak = max(self.peak, rss_bytes(tree))
            self.peak_processes = max(self.peak_processes, len(tree))
            self._stop.wait(self.period_s)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


# -- measurements ---------------------------------------------------------------------------------


def warm_cold(system: str, tasks: list[Task], reps: int) -> tuple[float, float, float | None, dict[str, float]]:
    """(cold ms, warm ms, whole-file coqc ms or None, warm ms per task): medians over tasks x reps."""
    cold, warm, naive = [], [], []
    per_task: dict[str, list[float]] = {}
    for task in tasks:
        for _ in range(reps):
            start = time.perf_counter()
            verifier = base.make_verifier(system, audit="never") if system == "coq" else base.make_verifier(system)
            try:
                verifier.check(task, task.reference_proof)
                cold.append(time.perf_counter() - start)
                verifier.check(task, task.reference_proof)  # the second OK settles the allow-list cache
                for _ in range(3):
                    start = time.perf_counter()
                    verifier.check(task, task.reference_proof)
                    warm.append(time.perf_counter() - start)
                    per_task.setdefault(task.id, []).append(warm[-1])
            finally:
                verifier.close()
        if system == "coq":
            with tempfile.TemporaryDirectory() as tmp:
                src = Path(tmp) / "Naive.v"
                src.write_text(f"{task.context}\n{task.statement}\n{task.reference_proof}\n", encoding="utf-8")
                for _ in range(reps):
                    start = time.perf_counter()
                    subprocess.run(["coqc", "-q", str(src)], cwd=tmp, capture_output=True, timeout=600, check=False)
                    naive.append(time.perf_counter() - start)
    return (_median_ms(cold), _median_ms(warm), (_median_ms(naive) if naive else None),
            {tid: _median_ms(v) for tid, v in per_task.items()})


class _TimedVerifier:
    """Wraps a verifier and records how long each ``check`` took, so that ``env.step`` can be split into
    the verifier's time and the env's own (observation, feedback, reward, info)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.system = inner.system
        self.last = 0.0

    def check(self, task: Task, proof: str) -> Any:
        start = time.perf_counter()
        try:
            return self.inner.check(task, proof)
        finally:
            self.last = time.perf_counter() - start

    def close(self) -> None:
        self.inner.close()


def step_overhead(system: str, task: Task, proof: str, reps: int) -> tuple[float, float]:
    """(env.step ms, the verifier.check inside it ms): totals over ``reps`` steps, per step.

    Both come from the same calls, so the ratio is the env's own overhead, free of the run-to-run noise
    that two separate measurements pick up on a shared machine.
    """
    inner = base.make_verifier(system, audit="never") if system == "coq" else base.make_verifier(system)
    timed = _TimedVerifier(inner)
    env = gym.make("proofgym/WholeProof-v0", tasks=[task], verifier=timed, max_attempts=reps + 10)
    try:
        env.reset(seed=0)
        for _ in range(5):
            env.step(proof)
        step_total = check_total = 0.0
        for _ in range(reps):
            start = time.perf_counter()
            env.step(proof)
            step_total += time.perf_counter() - start
            check_total += timed.last
        return 1000 * step_total / reps, 1000 * check_total / reps
    finally:
        env.close()
        inner.close()


def _tree_cpu_s(pid: int) -> float:
    """CPU seconds of ``pid``'s live descendants (pool workers and their warm provers) plus its reaped children."""
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return cpu_seconds(descendants(pid, zombies=False)) + kids.ru_utime + kids.ru_stime


def throughput(workers: int, tasks: list[Task], checks: int, engine: str = "local",
               repeat: int = 2) -> tuple[float, float, int, int]:
    """(checks/s, checks per CPU-second, peak RSS bytes, peak processes) of a warm pool over P1 reference proofs.

    Best of ``repeat`` runs on the same warm pool: on a shared machine the best run is the one least
    disturbed by other tenants. Checks per CPU-second counts the CPU the pool's processes used, so it does
    not depend on how many cores others left free.
    """
    if engine == "ray":
        import ray

        from proofgym.envs.verifiers.ray_pool import RayVerifierPool

        ray.init(num_cpus=workers, include_dashboard=False, logging_level="error", log_to_driver=False)
        pool: Any = RayVerifierPool(("coq",), workers_per_actor=workers, system_kwargs={"coq": {"audit": "never"}})
    else:
        pool = LocalVerifierPool(workers, system_kwargs={"coq": {"audit": "never"}})
    try:
        # Warm-up: every worker gets every context (and its allow-list cache) warm, as in a long run.
        warmup = [(t, t.reference_proof) for t in tasks for _ in range(2 * workers)]
        list(pool.imap_unordered(warmup))
        work = [(tasks[i % len(tasks)], tasks[i % len(tasks)].reference_proof) for i in range(checks)]
        best_rate = best_cpu_rate = 0.0
        with PeakRss() as peak:
            for _ in range(repeat):
                cpu0, start = _tree_cpu_s(os.getpid()), time.perf_counter()
                results = list(pool.imap_unordered(work))
                elapsed, cpu = time.perf_counter() - start, _tree_cpu_s(os.getpid()) - cpu0
                bad = [r for r in results if r.harness_failure]
                if bad:
                    raise SystemExit(f"harness failures during the benchmark: {bad[0].harness_error}")
                best_rate = max(best_rate, checks / elapsed)
                best_cpu_rate = max(best_cpu_rate, checks / cpu if cpu > 0 else 0.0)
        return best_rate, best_cpu_rate, peak.peak, peak.peak_processes
    finally:
        pool.close()
        if engine == "ray":
            import ray

            ray.shutdown()


def recovery(task: Task, kills: int = 3) -> tuple[float, float]:
    """(seconds from a worker's SIGKILL to a ready replacement, seconds to the next answered check): medians."""
    import signal

    ready_s, answer_s = [], []
    with LocalVerifierPool(2, system_kwargs={"coq": {"audit": "never"}}) as pool:
        pool.wait_ready(120)
        pool.check(task, task.reference_proof)
        for _ in range(kills):
            victim = pool.worker_pids()[0]
            start = time.monotonic()
            os.kill(victim, signal.SIGKILL)
            while victim in pool.worker_pids():
                time.sleep(0.002)
            pool.wait_ready(120)
            ready_s.append(time.monotonic() - start)
            pool.check(task, task.reference_proof)
            answer_s.append(time.monotonic() - start)
    return statistics.median(ready_s), statistics.median(answer_s)


# -- the table ------------------------------------------------------------------------------------

#: Goals for HOL Light's warm/cold row when no suite brings any (the plain base context).
HOL_LIGHT_TASKS = [
    Task(id="bench.hol.add_0", system="hol_light", context="", statement="`!n. n + 0 = n`",
         reference_proof="ARITH_TAC", category="P1", timeout_s=30),
    Task(id="bench.hol.conj", system="hol_light", context="", statement="`!p q. p /\\ q ==> q /\\ p`",
         reference_proof="MESON_TAC[]", category="P1", timeout_s=30),
]


def build_rows(args: argparse.Namespace) -> tuple[list[Row], dict[str, Any]]:
    tasks = [t for t in load_task_list(args.suite) if t.system == "coq"]
    p1 = [t for t in tasks if t.category == "P1"][: args.tasks] or tasks[: args.tasks]
    cores = os.cpu_count() or 1
    rows: list[Row] = []
    notes: dict[str, Any] = {"tasks": [t.id for t in p1], "cores": cores}

    cold, warm, naive, per_task = warm_cold("coq", p1, args.reps)
    notes["warm_ms_per_task"] = {tid: round(ms, 1) for tid, ms in per_task.items()}
    rows.append(Row("Coq: cold check (fresh verifier: start, context, check) / warm check, P1 median",
                    _fmt_ms(cold), _fmt_ms(warm), cold / warm))
    if naive is not None:
        rows.append(Row("Coq: whole-file `coqc` (stateless) / warm check, P1 median",
                        _fmt_ms(naive), _fmt_ms(warm), naive / warm))
    pool_of_others = [t for t in load_task_list(args.suite) if t.system != "coq"]
    for suite in args.others:
        try:
            pool_of_others += load_task_list(suite)
        except ProofgymError as exc:
            notes.setdefault("skipped", []).append(f"{suite}: {exc}")
    if not any(t.system == "hol_light" for t in pool_of_others):
        pool_of_others += HOL_LIGHT_TASKS
    for system in sorted(set(base._VERIFIERS) - {"coq"}):
        others = [t for t in pool_of_others if t.system == system and t.reference_proof]
        if not others:
            notes.setdefault("skipped", []).append(f"{system}: no {system} tasks given (--others)")
            continue
        # A cold HOL Light start loads HOL Light (minutes): one task, one cold start.
        n_tasks = 1 if system == "hol_light" else args.other_tasks
        try:
            cold_o, warm_o, _, _ = warm_cold(system, others[:n_tasks], args.other_reps)
        except Exception as exc:  # noqa: BLE001 - a system that is not installed here is a note, not a crash
            notes.setdefault("skipped", []).append(f"{system}: {type(exc).__name__}: {exc}")
            continue
        rows.append(Row(f"{system}: cold check / warm check", _fmt_ms(cold_o), _fmt_ms(warm_o), cold_o / warm_o))

    by_time = sorted(p1, key=lambda t: per_task[t.id])
    pairs = [("fastest P1 check", by_time[0]), ("median P1 check", by_time[len(by_time) // 2]),
             ("slowest P1 check", by_time[-1])]
    for label, task in pairs:
        reps = max(10, min(args.step_reps, int(args.step_budget_s * 1000 / (2 * per_task[task.id]))))
        step_ms, raw_ms = step_overhead("coq", task, task.reference_proof, reps)
        ratio = step_ms / raw_ms
        rows.append(Row(f"`env.step` / the `verifier.check` inside it ({label}: {task.id})",
                        f"{step_ms:.2f} ms", f"{raw_ms:.2f} ms", ratio, "≤ 1.05", ratio <= 1.05))

    counts = list(range(1, min(cores, args.max_workers) + 1))
    thr: dict[int, tuple[float, float, int, int]] = {}
    for n in counts:
        thr[n] = throughput(n, p1, args.checks * n, repeat=args.repeat)
    base_rate, base_cpu_rate = thr[1][0], thr[1][1]
    for n in counts[1:]:
        ratio = thr[n][0] / base_rate
        rows.append(Row(f"throughput, {n} workers / 1 worker (local pool, P1 checks/s, wall clock)",
                        f"{thr[n][0]:.2f}/s", f"{base_rate:.2f}/s", ratio, f"≥ {0.8 * n:.1f} (0.8·N)",
                        ratio >= 0.8 * n))
    top = counts[-1]
    rows.append(Row(f"checks/s per core, P1: {top} workers / 1 worker (checks per CPU-second of the pool's processes)",
                    f"{thr[top][1]:.2f}/s", f"{base_cpu_rate:.2f}/s", thr[top][1] / base_cpu_rate,
                    "≥ 0.8 (no per-core loss)", thr[top][1] / base_cpu_rate >= 0.8))
    if args.ray:
        try:
            ray_rate, _, _, _ = throughput(top, p1, args.checks * top, engine="ray", repeat=args.repeat)
            rows.append(Row(f"Ray engine / local pool, {top} workers (P1 checks/s, wall clock)", f"{ray_rate:.2f}/s",
                            f"{thr[top][0]:.2f}/s", ray_rate / thr[top][0]))
        except ImportError:
            notes.setdefault("skipped", []).append("ray: not installed (pip install 'proofgym[ray]')")
    ready_s, answer_s = recovery(by_time[0])
    rows.append(Row("recovery: worker SIGKILLed -> replacement ready / cold check", f"{ready_s:.2f} s",
                    _fmt_ms(cold), ready_s * 1000 / cold, "within seconds", ready_s < 10))
    notes["recovery"] = f"next check answered {answer_s:.2f} s after the kill (median of 3)"
    peak1, peakn = thr[1][2], thr[top][2]
    rows.append(Row(f"peak RSS of the verifier processes (workers + provers): {top} workers / 1 worker",
                    f"{peakn / MIB:.0f} MiB", f"{peak1 / MIB:.0f} MiB", peakn / max(peak1, 1)))
    notes["processes_peak"] = {n: thr[n][3] for n in counts}
    return rows, notes


def render(rows: list[Row]) -> str:
    lines = ["| measure (A / B) | A | B | A / B | goal | met |", "|---|---:|---:|---:|---|---|"]
    for row in rows:
        met = "" if row.met is None else ("yes" if row.met else "**no**")
        lines.append(f"| {row.measure} | {row.a} | {row.b} | {row.ratio:.2f}× | {row.goal} | {met} |")
    return "\n".join(lines)


def machine() -> str:
    load = os.getloadavg()
    coq = subprocess.run(["coqc", "--version"], capture_output=True, text=True, check=False).stdout.split("\n")[0] \
        if shutil.which("coqc") else "no coqc"
    return (f"{platform.platform()}, {os.cpu_count()} cores, Python {platform.python_version()}, {coq}; "
            f"load average at the end {load[0]:.1f}/{load[1]:.1f}/{load[2]:.1f}")


BEGIN = "<!-- bench.py output: begin (regenerated by scripts/bench.py --write) -->"
END = "<!-- bench.py output: end -->"


def write_block(path: Path, block: str) -> None:
    """Put the table between the markers of ``path``, keeping what the file says around it (e.g. the soak)."""
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        tail = rest.split(END, 1)[1]
        text = head + block + tail
    else:
        text = "# Benchmarks\n\n" + block + "\n" + text
    path.write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", default=str(TINY_SUITE), help="suite with the P1 tasks (default: the tiny suite)")
    parser.add_argument("--tasks", type=int, default=4, help="P1 tasks to use (default 4)")
    parser.add_argument("--reps", type=int, default=3, help="cold starts per task (default 3)")
    parser.add_argument("--step-reps", type=int, default=200, help="most env.step / check pairs per task (default 200)")
    parser.add_argument("--step-budget-s", type=float, default=30.0, help="seconds per task for those pairs")
    parser.add_argument("--checks", type=int, default=80, help="checks per worker in the throughput runs")
    parser.add_argument("--max-workers", type=int, default=64, help="largest pool measured (capped at the cores)")
    parser.add_argument("--repeat", type=int, default=2, help="throughput runs per pool size; the best counts")
    parser.add_argument("--ray", action="store_true", help="also measure the Ray engine (needs the ray extra)")
    parser.add_argument("--others", nargs="*", default=["dafny-nl"],
                        help="suites with Dafny / HOL Light tasks for their warm/cold rows (default: the packaged "
                             "dafny-nl; HOL Light uses two goals built in here unless a suite has some); "
                             "--others with nothing skips them")
    parser.add_argument("--other-tasks", type=int, default=2, help="Dafny tasks for the warm/cold row (default 2)")
    parser.add_argument("--other-reps", type=int, default=1,
                        help="cold starts per Dafny / HOL Light task (default 1; HOL Light's takes minutes)")
    parser.add_argument("--write", help="write the table, the command and the machine to this Markdown file")
    args = parser.parse_args(argv)
    if shutil.which("coqc") is None:
        print("bench: coqc not found: run `make setup`", file=sys.stderr)
        return 2
    started = time.monotonic()
    rows, notes = build_rows(args)
    table = render(rows)
    print(table)
    for key, value in notes.items():
        print(f"{key}: {value}")
    if args.write:
        command = "python scripts/bench.py " + " ".join(a for a in (argv if argv is not None else sys.argv[1:]))
        block = "\n".join([
            BEGIN,
            f"Command: `{command.strip()}` ({dt.date.today().isoformat()}, {time.monotonic() - started:.0f} s).",
            "",
            f"Machine: {machine()}.",
            "",
            table,
            "",
            f"P1 tasks (warm ms each): {notes['warm_ms_per_task']}. Peak processes per run (workers + sandboxed "
            f"provers): {notes['processes_peak']}. Recovery: {notes['recovery']}."
            + (f" Skipped: {'; '.join(notes['skipped'])}." if notes.get("skipped") else ""),
            END,
        ])
        write_block(Path(args.write), block)
        print(f"wrote {args.write}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
