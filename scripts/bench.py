#!/usr/bin/env python3
"""proofgym's benchmark suite: one table of side-by-side ratios, all measured in one run.

Rows (each a ratio of two numbers measured here, now, on this machine):

- warm / cold per verifier: a first check on a fresh verifier (prover start + context load)
  against the same check on the warm one; for Coq also whole-file ``coqc`` (the stateless way);
- ``env.step`` overhead over a raw ``verifier.check`` of the same proof on the same warm verifier
  (goal: at most 5% more);
- pool throughput with 1, 2, ... workers up to the cores (goal: at least 0.8 x N of one worker);
- checks per second per core on P1 tasks;
- peak memory of the verifier processes;
- the real workload (``--rows grpo``): a GRPO-shaped batch (B prompts drawn across ``coq-stdlib``'s files, G
  attempts each: the reference, ``Admitted``, a failing proof and repeats) through a cold pool of N workers,
  without the isolation cache, with it cold and with it warm, against whole-file ``coqc`` on the same checks
  (N at a time); checks/s, per core, p50/p95 latency, the share of time loading contexts, a verdict-cache
  hit; the same batch shape on ``dafny-nl``, and on HOL Light with ``--hol`` (opt-in: 2-5 min start);
- verdicts that do not depend on load (``--rows load``): a fixed set of checks (honest, cheats, failing,
  one close to its timeout) per prover, idle and under 2x CPU oversubscription; the verdicts that differ;
- HOL Light alone (``--rows hol``, with ``--hol-suite`` for its built suite): the GRPO-shaped batch, the load
  rows, and the fork overhead (a warm check's time minus the tactic's own time as the worker clocks it;
  goal: at most 5 ms).

    python scripts/bench.py                          # print the table (core and GRPO rows)
    python scripts/bench.py --write docs/benchmarks.md    # and write it, with the command and the machine
    python scripts/bench.py --suite coq-stdlib       # P1 tasks of a built suite instead of the tiny one
    python scripts/bench.py --rows grpo --quick      # only the GRPO rows, at a size to try (8 x 4)
    python scripts/bench.py --rows load --write docs/benchmarks.md   # the load rows, in their own block
    python scripts/bench.py --rows hol --hol-suite hol-light --write docs/benchmarks.md   # HOL Light's block

Audits are off (``audit="never"``): they are a sampled, separate cost, and would make the
per-check numbers depend on the dice.
"""

from __future__ import annotations

import argparse
import contextlib
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
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import gymnasium as gym

import proofgym  # noqa: F401 - registers the envs
from proofgym.envs.errors import ProofgymError
from proofgym.envs.proof_env import load_task_list
from proofgym.envs.systems import wired_systems
from proofgym.envs.types import CheckResult, Task
from proofgym.envs.verifiers import base
from proofgym.envs.verifiers.pool import LocalVerifierPool, routing_key
from proofgym.envs.verifiers.sandbox.procfs import cpu_seconds, descendants, rss_bytes

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


class _Sampler:
    """Calls ``sample()`` every ``period_s`` in a background thread, from ``with`` entry to exit."""

    def __init__(self, period_s: float) -> None:
        self.period_s = period_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sample(self) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.period_s)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


class PeakRss(_Sampler):
    """Samples the RSS of this process's descendants (verifier workers and provers) in the background."""

    def __init__(self, period_s: float = 0.1) -> None:
        super().__init__(period_s)
        self.peak = 0
        self.peak_processes = 0

    def sample(self) -> None:
        tree = descendants(os.getpid())
        self.peak = max(self.peak, rss_bytes(tree))
        self.peak_processes = max(self.peak_processes, len(tree))


class LoadSampler(_Sampler):
    """Samples the 1-minute load average every ``period_s`` in the background: what each section's machine
    load was while it ran, not only at its ends (the machine is shared)."""

    def __init__(self, period_s: float = 5.0) -> None:
        super().__init__(period_s)
        self.samples: list[float] = []

    def sample(self) -> None:
        self.samples.append(os.getloadavg()[0])

    def summary(self) -> str:
        if not self.samples:
            return "not sampled"
        return (f"min {min(self.samples):.1f}, median {statistics.median(self.samples):.1f}, "
                f"max {max(self.samples):.1f} ({len(self.samples)} samples, every {self.period_s:g} s)")


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

    The verdict cache is off: these are the same checks again and again, and every one must run. Best of
    ``repeat`` runs on the same warm pool: on a shared machine the best run is the one least
    disturbed by other tenants. Checks per CPU-second counts the CPU the pool's processes used, so it does
    not depend on how many cores others left free.
    """
    if engine == "ray":
        import ray

        from proofgym.envs.verifiers.pool.ray_engine import RayVerifierPool

        ray.init(num_cpus=workers, include_dashboard=False, logging_level="error", log_to_driver=False)
        pool: Any = RayVerifierPool(("coq",), workers_per_actor=workers, system_kwargs={"coq": {"audit": "never"}},
                                    verdict_cache=0)
    else:
        pool = LocalVerifierPool(workers, system_kwargs={"coq": {"audit": "never"}}, verdict_cache=0)
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
                bad = [r.failure for r in results if r.failure is not None]
                if bad:
                    raise SystemExit(f"harness failures during the benchmark: {bad[0].message}")
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


# -- the real workload: a GRPO-shaped batch ----------------------------------------------------------

#: A failing Coq attempt (an honest wrong proof: FAIL, or ERROR where the goal has no intros).
COQ_WRONG = "Proof. intros. reflexivity. Qed."
#: Where each worker of a GRPO run writes its verifier's context-load seconds (read by grpo_batch).
LOADS_ENV = "PROOFGYM_BENCH_LOADS"


def _timed_verifier(system: str, **kwargs: Any) -> Any:
    """A pool worker's verifier (``make_verifier``) that records the seconds its Coq sessions took to load.

    Named by the pool as ``"bench:_timed_verifier"``: a spawned worker imports this script by its
    name, from the same ``sys.path``. Each new session's load (process start, context, isolation cache)
    is appended to ``$PROOFGYM_BENCH_LOADS/<pid>.jsonl``; a warm session's reuse is not a load.
    """
    import json

    verifier = base.make_verifier(system, **kwargs)
    out = os.environ.get(LOADS_ENV)
    if system == "hol_light":
        starts = os.environ.get(HOL_STARTS_ENV)
        _time_hol_loads(verifier, Path(out) / f"{os.getpid()}.jsonl" if out else None,
                        Path(starts) / f"{os.getpid()}.jsonl" if starts else None)
        return verifier
    session = getattr(verifier, "_session", None)
    if out and session is not None:
        path = Path(out) / f"{os.getpid()}.jsonl"

        def timed(context: str) -> Any:
            started = verifier.stats.get("sessions_started", 0)
            t0 = time.perf_counter()
            try:
                return session(context)
            finally:
                if verifier.stats.get("sessions_started", 0) != started:
                    with path.open("a", encoding="utf-8") as f:
                        f.write(json.dumps({"load_s": time.perf_counter() - t0}) + "\n")

        verifier._session = timed  # noqa: SLF001 - the benchmark times the verifier's own context loads
    return verifier


def _dafny_variants(task: Task) -> tuple[str, str]:
    """(a cheat, a failing variant) of a Dafny reference program: a lemma of ``false`` by ``assume``; an
    ``assert false`` at the top of the first body."""
    import re

    cheat = task.reference_proof.rstrip() + "\n\nlemma ProofgymCheat() ensures false { assume false; }\n"
    m = re.search(r"\b(?:method|lemma)\b[^{]*\{", task.reference_proof)
    failing = (task.reference_proof[: m.end()] + " assert false; " + task.reference_proof[m.end():]) if m else \
        task.reference_proof + "\nlemma ProofgymWrong() ensures false { }\n"
    return cheat, failing


def grpo_attempts(task: Task, group: int) -> list[str]:
    """``group`` completions for one prompt, as GRPO sees them: the reference, a cheat, a failing variant,
    and repeats of them (samples repeat: the verdict cache answers a repeat without a check)."""
    if task.system == "coq":
        cheat, failing = "Proof. Admitted.", COQ_WRONG
    elif task.system == "dafny":
        cheat, failing = _dafny_variants(task)
    else:  # HOL Light
        cheat, failing = "CHEAT_TAC", "REFL_TAC"
    cycle = [task.reference_proof, cheat, failing, task.reference_proof, failing, task.reference_proof,
             task.reference_proof, cheat]
    return [cycle[i % len(cycle)] for i in range(group)]


def grpo_tasks(tasks: list[Task], batch: int, seed: int) -> list[Task]:
    """``batch`` prompts drawn at random across source files (one task per file while files last)."""
    import random

    rng = random.Random(seed)
    by_file: dict[str, list[Task]] = {}
    for t in tasks:
        by_file.setdefault(str(t.metadata.get("file", t.id)), []).append(t)
    files = sorted(by_file)
    chosen = rng.sample(files, min(batch, len(files)))
    chosen += [rng.choice(files) for _ in range(batch - len(chosen))]
    return [rng.choice(by_file[f]) for f in chosen]


def _whole_file_check(task: Task, proof: str) -> float:
    """Seconds of the stateless check of one attempt: the prover on one file holding the context and the proof."""
    with tempfile.TemporaryDirectory() as tmp:
        if task.system == "coq":
            src = Path(tmp) / "Naive.v"
            src.write_text(f"{task.context}\n{task.statement}\n{proof}\n", encoding="utf-8")
            cmd = ["coqc", "-q", str(src)]
        else:
            src = Path(tmp) / "naive.dfy"
            src.write_text(f"{task.context}\n{proof}\n" if task.context else proof, encoding="utf-8")
            cmd = ["dafny", "/compile:0", "/nologo", str(src)]
        start = time.perf_counter()
        subprocess.run(cmd, cwd=tmp, capture_output=True, timeout=600, check=False)
        return time.perf_counter() - start


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def grpo_batch(work: list[tuple[Task, str]], workers: int, *, system_kwargs: dict[str, Any] | None = None,
               whole_file: bool = True, spill_at: int = 0) -> dict[str, Any]:
    """One GRPO-shaped batch through a cold ``LocalVerifierPool(workers)``, and (optionally) whole-file checks
    of the same attempts, ``workers`` at a time, measured one after the other in this run.

    Returns checks/s, checks/s per core (checks/s over the ``workers`` cores), p50/p95 latency of the
    checks that ran (a verdict-cache answer is not a check), the share of that time spent loading
    contexts, the verdicts, and the same for the whole-file path.
    """
    import json
    from concurrent.futures import ThreadPoolExecutor

    with tempfile.TemporaryDirectory() as loads_dir:
        os.environ[LOADS_ENV] = loads_dir
        try:
            start = time.perf_counter()
            with LocalVerifierPool(workers, system_kwargs=system_kwargs or {}, spill_at=spill_at,
                                   verifier_factory="bench:_timed_verifier") as pool:
                results = list(pool.imap_unordered(work))
                cache = pool.cache_stats()
                elapsed = time.perf_counter() - start
                pool_stats = pool.stats()
                # A verdict-cache hit, timed alone: submit -> answer of an attempt already checked.
                hits = []
                for task, proof in work[: min(50, len(work))]:
                    t0 = time.perf_counter()
                    pool.submit(task, proof).result()
                    hits.append(time.perf_counter() - t0)
        finally:
            os.environ.pop(LOADS_ENV, None)
        loads = [json.loads(line)["load_s"] for f in Path(loads_dir).glob("*.jsonl")
                 for line in f.read_text(encoding="utf-8").splitlines() if line]
    bad = [r for r in results if r.harness_failure]
    ran = [r.result.wall_s for r in results if r.result is not None and r.worker != "cache"]
    verdicts: dict[str, int] = {}
    for r in results:
        key = r.outcome.verdict.value if isinstance(r.outcome, CheckResult) else f"harness:{r.outcome.boundary.value}"
        verdicts[key] = verdicts.get(key, 0) + 1
    out: dict[str, Any] = {
        "checks": len(work), "workers": workers, "wall_s": elapsed, "rate": len(work) / elapsed,
        "per_core": len(work) / elapsed / workers, "ran": len(ran),
        "p50": _pct(ran, 0.5), "p95": _pct(ran, 0.95), "load_share": sum(loads) / max(sum(ran), 1e-9),
        "load_p50": _pct(loads, 0.5), "loads": len(loads), "verdicts": verdicts, "cache": cache,
        "contexts": len({routing_key(t) for t, _ in work}), "pool_context_loads": pool_stats.get("context_loads"),
        "stolen": pool_stats.get("stolen"),
        "harness_failures": len(bad), "hit_p50": _pct(hits, 0.5),
    }
    if whole_file and work[0][0].system in ("coq", "dafny"):
        start = time.perf_counter()
        with ThreadPoolExecutor(workers) as ex:
            naive = list(ex.map(lambda tp: _whole_file_check(*tp), work))
        wall = time.perf_counter() - start
        out["whole_file"] = {"wall_s": wall, "p50": _pct(naive, 0.5), "p95": _pct(naive, 0.95),
                             "rate": len(work) / wall, "per_core": len(work) / wall / workers}
    return out


def with_attempts(tasks: list[Task], group: int) -> list[tuple[Task, str]]:
    """Every (task, attempt) of the batch: each task's GRPO group, in order."""
    return [(t, p) for t in tasks for p in grpo_attempts(t, group)]


def grpo_rows(args: argparse.Namespace, notes: dict[str, Any]) -> list[Row]:
    """The real-workload rows: a GRPO-shaped batch on coq-stdlib (and dafny-nl, HOL Light with ``--hol``)."""
    rows: list[Row] = []
    n = min(os.cpu_count() or 1, args.max_workers)
    if args.grpo_coq:
        try:
            rows += coq_grpo_rows(args, notes, n)
        except ProofgymError as exc:
            notes.setdefault("skipped", []).append(f"GRPO batch on coq: {exc} (run `proofgym build coq-stdlib`)")
    else:
        notes.setdefault("skipped", []).append("GRPO batch on coq: --no-grpo-coq")
    return rows + other_grpo_rows(args, notes, n)


def coq_grpo_rows(args: argparse.Namespace, notes: dict[str, Any], n: int) -> list[Row]:
    """The GRPO-shaped batch on coq-stdlib: without the isolation cache, with it cold, with it warm, and
    whole-file ``coqc`` on the same checks beside the first."""
    rows: list[Row] = []
    stdlib = [t for t in load_task_list(args.grpo_suite) if t.system == "coq"]
    batch_tasks = grpo_tasks(stdlib, args.grpo_batch, args.seed)
    batch = with_attempts(batch_tasks, args.grpo_group)
    shape = f"{len(batch_tasks)} tasks x {args.grpo_group} attempts, {n} workers, cold pool"
    runs: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as iso_dir:
        configs = {"none": ("no isolation cache", {"isolation_cache": False}),
                   "cold": ("isolation cache cold", {"isolation_dir": iso_dir}),
                   "warm": ("isolation cache warm", {"isolation_dir": iso_dir})}
        chosen = [c for c in ("none", "cold", "warm") if c in args.grpo_runs]
        for config in chosen:  # the whole-file checks run once, beside the first
            label, kwargs = configs[config]
            runs[label] = grpo_batch(batch, n, system_kwargs={"coq": {"audit": "never", **kwargs}},
                                     whole_file=config == chosen[0], spill_at=args.spill_at)
    first = runs[configs[chosen[0]][0]]
    naive = first["whole_file"]
    per_naive = naive["wall_s"] / first["checks"]
    for label, run in runs.items():
        per = run["wall_s"] / run["checks"]
        goal = label == "isolation cache warm"
        rows.append(Row(f"GRPO batch on coq-stdlib ({shape}, {label}): whole-file `coqc` per check / proofgym "
                        "per check", _fmt_ms(1000 * per_naive), _fmt_ms(1000 * per), per_naive / per,
                        "≥ 30× (stretch 50×)" if goal else "", (per_naive / per >= 30) if goal else None))
    warm = runs.get("isolation cache warm", first)
    off = runs.get("no isolation cache", first)
    rows.append(Row("cold Coq context load, p50 (session start + context): isolation cache warm / "
                    f"{'no cache' if 'no isolation cache' in runs else [k for k in runs if runs[k] is off][0]}",
                    _fmt_ms(1000 * warm["load_p50"]), _fmt_ms(1000 * off["load_p50"]),
                    warm["load_p50"] / max(off["load_p50"], 1e-9), "warm ≤ 0.3 s", warm["load_p50"] <= 0.3))
    rows.append(Row("verdict-cache hit (submit -> answer of a repeated attempt), p50 / a checked attempt, p50",
                    f"{1000 * warm['hit_p50']:.2f} ms", _fmt_ms(1000 * warm["p50"]),
                    warm["hit_p50"] / max(warm["p50"], 1e-9), "hit ≤ 1 ms", warm["hit_p50"] <= 0.001))
    notes["grpo"] = {label: {k: (round(v, 3) if isinstance(v, float) else v) for k, v in run.items()}
                     for label, run in runs.items()}
    notes["grpo_tasks"] = [t.id for t in batch_tasks]
    return rows


def other_grpo_rows(args: argparse.Namespace, notes: dict[str, Any], n: int) -> list[Row]:
    """The same batch shape on dafny-nl (whole-file ``dafny`` beside it) and, with ``--hol``, on HOL Light."""
    rows: list[Row] = []
    for suite, system, enabled in (("dafny-nl", "dafny", args.grpo_dafny), (args.hol_suite, "hol_light", args.hol)):
        if not enabled:
            notes.setdefault("skipped", []).append(
                f"GRPO batch on {system}: opt-in (--hol or --rows hol; HOL Light loads for 2-5 min before its first "
                "check)" if system == "hol_light" else f"GRPO batch on {system}: --no-grpo-dafny")
            continue
        if system == "hol_light":
            rows += hol_grpo_rows(args, notes)
            continue
        try:
            others = [t for t in load_task_list(suite) if t.system == system and t.reference_proof] \
                if suite else list(HOL_LIGHT_TASKS)
            obatch = with_attempts(grpo_tasks(others, args.grpo_batch, args.seed), args.grpo_group)
            run = grpo_batch(obatch, n)
        except Exception as exc:  # noqa: BLE001 - a prover not installed here is a note, not a crash
            notes.setdefault("skipped", []).append(f"GRPO batch on {system}: {type(exc).__name__}: {exc}")
            continue
        label = f"{system} {suite} ({len(obatch) // args.grpo_group} x {args.grpo_group}, {n} workers, cold pool)"
        notes[f"grpo_{system}"] = {label: {k: (round(v, 3) if isinstance(v, float) else v) for k, v in run.items()}}
        whole = run.get("whole_file")
        per = run["wall_s"] / run["checks"]
        if whole:
            per_naive = whole["wall_s"] / run["checks"]
            rows.append(Row(f"GRPO batch on {suite} ({len(obatch) // args.grpo_group} x {args.grpo_group}, {n} workers, cold pool): "
                            "whole-file check per check / proofgym per check", _fmt_ms(1000 * per_naive),
                            _fmt_ms(1000 * per), per_naive / per))
    return rows


def grpo_table(runs: dict[str, Any]) -> str:
    """The GRPO runs' own numbers (checks/s, per core, latency, load share) as a Markdown table."""
    lines = ["| run | checks (ran) | wall | checks/s | checks/s per core | p50 | p95 | context loads / contexts "
             "(load p50) | load share | verdicts |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for label, r in runs.items():
        lines.append(f"| {label} | {r['checks']} ({r['ran']}) | {r['wall_s']:.1f} s | {r['rate']:.2f} | "
                     f"{r['per_core']:.2f} | {_fmt_ms(1000 * r['p50'])} | {_fmt_ms(1000 * r['p95'])} | "
                     + (f"{r['loads']} / {r.get('contexts', '?')} ({_fmt_ms(1000 * r['load_p50'])}) | "
                        f"{100 * r['load_share']:.0f}% | " if r["loads"] else "not timed | | ")
                     + f"{r['verdicts']} |")
        w = r.get("whole_file")
        if w:
            lines.append(f"| {label}: whole-file, same checks, {r['workers']} at a time | {r['checks']} | "
                         f"{w['wall_s']:.1f} s | {w['rate']:.2f} | {w['per_core']:.2f} | {_fmt_ms(1000 * w['p50'])} | {_fmt_ms(1000 * w['p95'])} | "
                         "every check | | (no integrity checks) |")
    return "\n".join(lines)


# -- verdicts that do not depend on load ------------------------------------------------------------


class BusyLoops:
    """``per_core`` busy-looping processes per core while inside (CPU oversubscription), killed on exit."""

    def __init__(self, per_core: int = 2) -> None:
        self.count = per_core * (os.cpu_count() or 1)
        self.procs: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> BusyLoops:
        self.procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(self.count)]
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in self.procs:
            proc.kill()
        for proc in self.procs:
            proc.wait()


def fixed_checks(args: argparse.Namespace, notes: dict[str, Any]) -> list[tuple[Task, str, str]]:
    """The fixed set: (task, attempt, kind) for honest, cheating, failing and close-to-the-timeout attempts.

    Close to the timeout: the slowest honest check of each system, its task's ``timeout_s`` set to 1.5x
    its idle wall time (measured here first), so that 2x contention on a wall-clock deadline decides it.
    """
    from dataclasses import replace

    checks: list[tuple[Task, str, str]] = []
    coq = [t for t in load_task_list(str(TINY_SUITE)) if t.system == "coq"]
    dafny: list[Task] = []
    with contextlib.suppress(ProofgymError):
        dafny = [t for t in load_task_list("dafny-nl") if t.reference_proof][: args.load_tasks]
    systems = [("coq", coq[: args.load_tasks]), ("dafny", dafny)]
    for system, tasks in systems:  # HOL Light: hol_load_rows, on one warm server (a start is minutes)
        if not tasks:
            notes.setdefault("skipped", []).append(f"load rows: no {system} tasks")
            continue
        slowest, slowest_s = tasks[0], 0.0
        verifier = _load_verifier(system)
        try:
            for task in tasks:
                ref, cheat, failing = grpo_attempts(task, 3)
                checks += [(task, ref, "honest"), (task, cheat, "cheat"), (task, failing, "failing")]
                verifier.check(task, ref)
                t0 = time.perf_counter()
                verifier.check(task, ref)
                if time.perf_counter() - t0 > slowest_s:
                    slowest, slowest_s = task, time.perf_counter() - t0
        finally:
            verifier.close()
        near = replace(slowest, id=slowest.id + ".near_timeout", timeout_s=max(0.05, 1.5 * slowest_s))
        checks.append((near, near.reference_proof, "near timeout"))
        notes.setdefault("near_timeout_s", {})[system] = round(near.timeout_s, 3)
    return checks


def _load_verifier(system: str) -> Any:
    # Coq: audits off (a sampled audit would make the two runs differ by the dice, not by the load).
    return base.make_verifier(system, audit="never") if system == "coq" else base.make_verifier(system)


def run_fixed(checks: list[tuple[Task, str, str]]) -> list[str]:
    """The verdict of each check, on one warm verifier per system (its context loaded before it is timed)."""
    verifiers: dict[str, Any] = {}
    out = []
    try:
        for task, proof, _kind in checks:
            verifier = verifiers.get(task.system) or verifiers.setdefault(task.system, _load_verifier(task.system))
            out.append(verifier.check(task, proof).verdict.value)
    finally:
        for verifier in verifiers.values():
            verifier.close()
    return out


def load_rows(args: argparse.Namespace, notes: dict[str, Any]) -> list[Row]:
    """The fixed set of checks run idle and under 2x CPU oversubscription; the verdicts that differ."""
    checks = fixed_checks(args, notes)
    t0 = time.perf_counter()
    idle = run_fixed(checks)
    t1 = time.perf_counter()
    with BusyLoops(2):
        busy = run_fixed(checks)
    phases = {"idle": round(t1 - t0, 1), "oversubscribed": round(time.perf_counter() - t1, 1)}
    rows: list[Row] = []
    for system in sorted({t.system for t, _, _ in checks}):
        idx = [i for i, (t, _, _) in enumerate(checks) if t.system == system]
        rows.append(_flip_row(system, [checks[i] for i in idx], [idle[i] for i in idx], [busy[i] for i in idx],
                              notes, "fresh verifier per phase"))
        notes.setdefault("load_phases_s", {})[system] = phases
    if args.hol:
        from proofgym.envs.verifiers.hol_light import HolLightVerifier

        try:
            with HolLightVerifier(progress=False) as verifier:
                rows += hol_load_rows(verifier, notes)
        except Exception as exc:  # noqa: BLE001 - HOL Light not installed here is a note, not a crash
            notes.setdefault("skipped", []).append(f"load rows on hol_light: {type(exc).__name__}: {exc}")
    return rows


def _flip_row(system: str, checks: list[tuple[Task, str, str]], idle: list[str], busy: list[str],
              notes: dict[str, Any], how: str) -> Row:
    """The load row of one system: its OK/FAIL/CHEATING verdicts that differ between the two phases (a check
    decided in either phase counts), with each kind's verdicts kept in the notes."""
    decided = [i for i in range(len(checks)) if {idle[i], busy[i]} & {"OK", "FAIL", "CHEATING"}]
    differ = [i for i in decided if idle[i] != busy[i]]
    notes.setdefault("load_flips", []).extend(
        f"{checks[i][0].id} ({checks[i][2]}): {idle[i]} -> {busy[i]}" for i in differ)
    kinds: dict[str, str] = {}
    for (_, _, kind), a, b in zip(checks, idle, busy, strict=True):
        kinds.setdefault(kind, "")
        kinds[kind] += ("," if kinds[kind] else "") + (a if a == b else f"{a}->{b}")
    notes.setdefault("load_verdicts", {})[system] = kinds
    return Row(f"{system}: OK/FAIL/CHEATING verdicts that flip, idle / under 2x CPU oversubscription "
               f"({len(checks)} fixed checks: honest, cheats, failing, near the timeout; {how})",
               f"{len(differ)} of {len(decided)}", "0", float(len(differ)), "0 flips", not differ)


# -- the table ------------------------------------------------------------------------------------

#: Goals for HOL Light's warm/cold row when no suite brings any (the plain base context).
HOL_LIGHT_TASKS = [
    Task(id="bench.hol.add_0", system="hol_light", context="", statement="`!n. n + 0 = n`",
         reference_proof="ARITH_TAC", category="P1", timeout_s=30),
    Task(id="bench.hol.conj", system="hol_light", context="", statement="`!p q. p /\\ q ==> q /\\ p`",
         reference_proof="MESON_TAC[]", category="P1", timeout_s=30),
]


# -- HOL Light ---------------------------------------------------------------------------------------

#: Where each pool worker of the HOL Light GRPO run writes its server starts (read by hol_grpo_rows).
HOL_STARTS_ENV = "PROOFGYM_BENCH_HOL_STARTS"


def _time_hol_loads(verifier: Any, loads: Path | None, starts: Path | None) -> None:
    """Record a HOL Light verifier's server starts (``starts``) and context loads (``loads``: zygotes, the
    ``load_s`` lines grpo_batch reads): its ``server`` is wrapped, and each new server's ``enter_context``."""
    import json

    real_server = verifier.server

    def log(path: Path | None, key: str, seconds: float) -> None:
        if path is not None:
            with path.open("a", encoding="utf-8") as f:
                f.write(json.dumps({key: seconds}) + "\n")

    def timed_server(base: str = "plain") -> Any:
        before = verifier.stats["server_starts"]
        t0 = time.perf_counter()
        server = real_server(base)
        if verifier.stats["server_starts"] != before:
            log(starts, "start_s", time.perf_counter() - t0)
            enter = server.enter_context

            def timed_enter(context: str, **kwargs: Any) -> Any:
                t1 = time.perf_counter()
                out = enter(context, **kwargs)
                if out[1]:  # a zygote was loaded for it
                    log(loads, "load_s", time.perf_counter() - t1)
                return out

            server.enter_context = timed_enter
        return server

    verifier.server = timed_server


def _hol_tasks(args: argparse.Namespace) -> list[Task]:
    """The HOL Light suite's tasks with a reference proof (``--hol-suite``), else the two goals built in here."""
    if not args.hol_suite:
        return list(HOL_LIGHT_TASKS)
    return [t for t in load_task_list(args.hol_suite) if t.system == "hol_light" and t.reference_proof]


def hol_grpo_rows(args: argparse.Namespace, notes: dict[str, Any]) -> list[Row]:
    """The GRPO-shaped batch on HOL Light through a cold pool (each worker starts its own server first).

    There is no whole-file check to run beside it: a stateless HOL Light check loads HOL Light (minutes)
    for each attempt. The row sets the batch's cost per check against that: the measured server start plus
    the same check, per check.
    """
    import json

    n = min(os.cpu_count() or 1, args.max_workers)
    try:
        tasks = grpo_tasks(_hol_tasks(args), args.grpo_batch, args.seed)
        batch = with_attempts(tasks, args.grpo_group)
        with tempfile.TemporaryDirectory() as starts_dir:
            os.environ[HOL_STARTS_ENV] = starts_dir
            try:
                run = grpo_batch(batch, n)
            finally:
                os.environ.pop(HOL_STARTS_ENV, None)
            starts = [json.loads(line)["start_s"] for f in Path(starts_dir).glob("*.jsonl")
                      for line in f.read_text(encoding="utf-8").splitlines() if line]
    except Exception as exc:  # noqa: BLE001 - HOL Light not installed here is a note, not a crash
        notes.setdefault("skipped", []).append(f"GRPO batch on hol_light: {type(exc).__name__}: {exc}")
        return []
    run["server_start_p50"] = _pct(starts, 0.5)
    run["server_starts"] = len(starts)
    suite = Path(args.hol_suite).stem if args.hol_suite else "built-in goals"
    label = f"hol_light {suite} ({len(tasks)} x {args.grpo_group}, {n} workers, cold pool)"
    notes["grpo_hol_light"] = {label: {k: (round(v, 3) if isinstance(v, float) else v) for k, v in run.items()}}
    per = run["wall_s"] / run["checks"]
    stateless = run["server_start_p50"] + run["p50"]
    return [
        Row(f"GRPO batch on {label}: a fresh HOL Light per check (server start p50 + check p50, both measured "
            "here) / proofgym per check (batch wall, server starts included)", _fmt_ms(1000 * stateless),
            _fmt_ms(1000 * per), stateless / per),
        Row(f"GRPO batch on {label}: checks/s per core / checks/s", f"{run['per_core']:.2f}/s",
            f"{run['rate']:.2f}/s", run["per_core"] / run["rate"]),
    ]


def hol_overhead_rows(verifier: Any, tasks: list[Task], checks: int, notes: dict[str, Any]) -> list[Row]:
    """HOL Light fork overhead on a warm verifier: a check's time minus the tactic's own time as the worker
    clocks it (goal <= 5 ms); and the fork server's own part (also less the worker's goal parsing, vetting
    and compiling of the submission): fork, pipes, frames, the worker's exit."""
    for task in tasks:  # each context warm before anything is timed
        verifier.check(task, task.reference_proof)
    over: list[float] = []
    server_part: list[float] = []
    walls: list[float] = []
    phases: dict[str, list[float]] = {}
    for i in range(checks):
        task = tasks[i % len(tasks)]
        result = verifier.check(task, task.reference_proof)
        times = verifier.worker_times()
        if times is None:
            raise RuntimeError(f"{task.id}: no worker times ({result.verdict.value}: {result.reasons})")
        walls.append(result.wall_s)
        over.append(result.wall_s - times[1])
        server_part.append(result.wall_s - times[0] - times[1])
        timeline = verifier.worker_timeline()
        if timeline is not None:
            for phase, seconds in timeline.items():
                phases.setdefault(phase, []).append(seconds)
    ms = {k: round(1000 * _pct(v, q), 2) for k, v, q in (
        ("overhead_p50", over, 0.5), ("overhead_p95", over, 0.95), ("fork_server_p50", server_part, 0.5),
        ("fork_server_p95", server_part, 0.95), ("check_p50", walls, 0.5))}
    notes["hol_overhead_ms"] = {**ms, "checks": len(over), "tasks": [t.id for t in tasks]}
    # Where it goes: each phase's p50 (their sum need not be the p50 check) and share of the summed time.
    total = sum(sum(v) for v in phases.values()) or 1.0
    notes["hol_timeline_ms"] = {phase: f"{1000 * _pct(v, 0.5):.2f} p50, {100 * sum(v) / total:.0f}%"
                                for phase, v in phases.items()}
    return [
        Row(f"HOL Light fork overhead, p50 over {len(over)} warm checks: a check - its tactic's own time (the "
            "worker's clock) / the check", f"{ms['overhead_p50']:.2f} ms", f"{ms['check_p50']:.2f} ms",
            ms["overhead_p50"] / max(ms["check_p50"], 1e-9), "overhead ≤ 5 ms", ms["overhead_p50"] <= 5),
        Row("HOL Light fork server's own part, p50 (the overhead less the worker's goal parsing, vetting and "
            "compiling: fork, pipes, frames, exit) / the check", f"{ms['fork_server_p50']:.2f} ms",
            f"{ms['check_p50']:.2f} ms", ms["fork_server_p50"] / max(ms["check_p50"], 1e-9)),
    ]


def hol_load_rows(verifier: Any, notes: dict[str, Any]) -> list[Row]:
    """The load rows' fixed checks on HOL Light (honest, cheat, failing per built-in goal, and the slowest
    honest one with its ``timeout_s`` at 1.5x its idle time), idle and under 2x CPU oversubscription, on one
    warm verifier: a HOL Light start is minutes, and which server answers does not change a verdict."""
    from dataclasses import replace

    checks: list[tuple[Task, str, str]] = []
    slowest, slowest_s = HOL_LIGHT_TASKS[0], 0.0
    for task in HOL_LIGHT_TASKS:
        ref, cheat, failing = grpo_attempts(task, 3)
        checks += [(task, ref, "honest"), (task, cheat, "cheat"), (task, failing, "failing")]
        verifier.check(task, ref)  # the first check may start the server (minutes): the second is timed
        wall = verifier.check(task, ref).wall_s
        if wall > slowest_s:
            slowest, slowest_s = task, wall
    near = replace(slowest, id=slowest.id + ".near_timeout", timeout_s=max(0.05, 1.5 * slowest_s))
    checks.append((near, near.reference_proof, "near timeout"))
    notes.setdefault("near_timeout_s", {})["hol_light"] = round(near.timeout_s, 3)
    t0 = time.perf_counter()
    idle = [verifier.check(t, p).verdict.value for t, p, _ in checks]
    t1 = time.perf_counter()
    with BusyLoops(2):
        busy = [verifier.check(t, p).verdict.value for t, p, _ in checks]
    notes.setdefault("load_phases_s", {})["hol_light"] = {
        "idle": round(t1 - t0, 1), "oversubscribed": round(time.perf_counter() - t1, 1)}
    return [_flip_row("hol_light", checks, idle, busy, notes, "one warm server for both phases")]


#: A failing HOL Light attempt with a large verdict: a 3 KB failure message (the reasons of a verdict over the
#: root's and zygotes' small-frame size, the growth the framing fix in boot.ml's pg_send is about).
HOL_LARGE_FAIL = "FAIL_TAC (String.make 3000 (Char.chr 120))"


def _slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ys over xs (0 where xs do not vary)."""
    mx, my = statistics.mean(xs), statistics.mean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den if den else 0.0


def hol_growth_rows(verifier: Any, tasks: list[Task], checks: int, notes: dict[str, Any],
                    every: int = 100) -> list[Row]:
    """Whether the root and the zygotes grow per check: ``checks`` warm checks cycling over ``tasks``' contexts
    (the reference, a 3 KB failure message, a cheat, a failing tactic), the root's RSS and each zygote's
    private memory read (STATS) every ``every`` checks; the least-squares growth per check, and how many checks
    the recycle bounds (``server_max_growth_bytes``, ``zygote_max_growth_bytes``) allow at that rate."""
    from proofgym.envs.verifiers.hol_light.verifier import context_key

    work = [(t, p) for t in tasks for p in (t.reference_proof, HOL_LARGE_FAIL, "CHEAT_TAC", "REFL_TAC")]
    for task, proof in work:  # every context loaded, every kind of verdict seen once, before the first reading
        verifier.check(task, proof)
    server = verifier.server(str(tasks[0].metadata.get("base", "plain")))
    keys = list(dict.fromkeys(context_key(t.context) for t in tasks))
    xs: list[float] = []
    root: list[int] = []
    zyg: dict[str, list[int]] = {k: [] for k in keys}
    verdicts: dict[str, int] = {}
    for i in range(checks + 1):
        if i % every == 0:
            sizes = server.stats()
            if any(k not in sizes for k in keys):
                raise RuntimeError(f"a zygote was evicted or recycled during the growth run at check {i}")
            xs.append(i)
            root.append(sizes["root"][0])
            for k in keys:
                zyg[k].append(sizes[k][1])
        if i < checks:
            task, proof = work[i % len(work)]
            v = verifier.check(task, proof).verdict.value
            verdicts[v] = verdicts.get(v, 0) + 1
    root_b = _slope(xs, root)
    # A fresh zygote's private memory first climbs by its minor heap (32 MB at s=4M words: each page is copied
    # from the root on its first write), once; the growth that stays is the slope over the second half.
    half = len(xs) // 2
    zyg_b = {k: _slope(xs[half:], v[half:]) for k, v in zyg.items()}
    worst = max(zyg_b.values())
    cfg = verifier.config
    notes["hol_growth"] = {
        "checks": checks, "every": every, "verdicts": verdicts, "root_rss_mib": [round(r / MIB, 1) for r in root],
        "root_b_per_check": round(root_b), "zygote_private_mib": {k[:8]: [round(x / MIB, 1) for x in v]
                                                                   for k, v in zyg.items()},
        "zygote_b_per_check": {k[:8]: round(v) for k, v in zyg_b.items()},
        "server_max_growth_bytes": cfg.server_max_growth_bytes, "zygote_max_growth_bytes": cfg.zygote_max_growth_bytes}

    def until(bound: int, rate: float) -> str:
        return f"{bound / rate:,.0f} checks" if rate > 1 else "never (flat)"

    return [
        Row(f"HOL Light root: RSS growth per check (least squares over {checks} warm checks on {len(keys)} contexts, "
            "a quarter of them with a 3 KB failure message) / the recycle bound server_max_growth_bytes",
            f"{root_b / 1024:.2f} KiB", f"{cfg.server_max_growth_bytes / MIB:.0f} MiB",
            root_b / max(cfg.server_max_growth_bytes, 1), "recycled before it matters",
            True if cfg.server_max_growth_bytes else None),
        Row("HOL Light zygote: private-memory growth per check over the second half of the run (after the one-time "
            "copy of its minor heap), the worst of the contexts / the recycle bound zygote_max_growth_bytes", f"{worst / 1024:.2f} KiB", f"{cfg.zygote_max_growth_bytes / MIB:.0f} MiB",
            worst / max(cfg.zygote_max_growth_bytes, 1), "", None),
    ] + [Row(f"HOL Light: checks until a recycle at this rate ({what})", until(bound, rate), "", 0.0)
         for what, bound, rate in (("root", cfg.server_max_growth_bytes, root_b),
                                   ("zygote", cfg.zygote_max_growth_bytes, worst))]


def hol_rows(args: argparse.Namespace, notes: dict[str, Any]) -> list[Row]:
    """``--rows hol``: HOL Light's section alone: the GRPO-shaped batch through a cold pool (each worker starts
    a server), then one warm in-process verifier (one more start) for the load rows and the fork overhead."""
    from proofgym.envs.verifiers.hol_light import HolLightVerifier

    rows = hol_grpo_rows(args, notes)
    try:
        with HolLightVerifier(progress=False) as verifier:
            rows += hol_load_rows(verifier, notes)
            tasks = _hol_tasks(args)[: max(1, args.hol_overhead_tasks)]
            rows += hol_overhead_rows(verifier, tasks, args.hol_overhead_checks, notes)
            if args.hol_growth_checks:
                # two contexts: each zygote serves enough checks to be past the copy of its minor heap at half-time
                rows += hol_growth_rows(verifier, tasks[:2], args.hol_growth_checks, notes)
    except Exception as exc:  # noqa: BLE001 - HOL Light not installed here is a note, not a crash
        notes.setdefault("skipped", []).append(f"HOL Light load / overhead rows: {type(exc).__name__}: {exc}")
    return rows


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
    for system in [s for s in wired_systems() if s != "coq"]:
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


def grpo_train_rows(args: argparse.Namespace, notes: dict[str, Any]) -> list[Row]:
    """Real GRPO steps on the CPU config: reward seconds / step seconds (goal ≤ 10%) and completions per second.

    configs/train/grpo_cpu.yaml as it is (its model, batch, completion length, verifier workers),
    with the warm start, the curriculum and the evaluations off: only GRPO steps are timed.
    Reward seconds are the reward function's own wall time per batch (``verifier/batch_seconds``,
    the pool checking every completion); step seconds are TRL's ``step_time`` (generation,
    rewards, forward and backward). ``--train-steps`` steps; the first includes warm-up.
    """
    from proofgym.training.common import parse_config
    from proofgym.training.grpo import train_grpo
    from proofgym.training.grpo_config import ProofGRPOConfig

    config = ROOT / "configs" / "train" / "grpo_cpu.yaml"
    with tempfile.TemporaryDirectory(prefix="proofgym-bench-grpo-") as tmp:
        cfg = parse_config(ProofGRPOConfig, [
            "--config", str(config), "--output_dir", tmp, "--report_to", "none", "--max_steps", str(args.train_steps),
            "--warm_start_sft_steps", "0", "--curriculum", "false", "--checkpoint_eval_on_start", "false",
            "--checkpoint_eval_at_end", "false", "--log_completions", "false", "--suite", args.grpo_suite])
        result = train_grpo(cfg)
    logged = [r for r in result.log_history if "reward" in r and "step_time" in r]
    step_s = sum(r["step_time"] for r in logged)
    reward_s = sum(r.get("verifier/batch_seconds", 0.0) for r in logged)
    completions = len(logged) * cfg.per_device_train_batch_size * cfg.gradient_accumulation_steps
    notes["grpo_train"] = {"model": result.model, "steps": len(logged), "completions": completions,
                           "completion_tokens": cfg.max_completion_length, "step_s": round(step_s, 1),
                           "reward_s": round(reward_s, 2), "verdicts": dict(result.reward_totals),
                           "per_step": [{k: r.get(k) for k in ("step", "step_time", "verifier/batch_seconds", "reward")}
                                        for r in logged]}
    share = reward_s / step_s if step_s else float("nan")
    what = f"{result.model}, {cfg.per_device_train_batch_size} completions x {cfg.max_completion_length} tokens"
    return [Row(f"GRPO on the CPU config ({what}): reward seconds / step seconds, {len(logged)} steps",
                f"{reward_s:.1f} s", f"{step_s:.1f} s", share, "≤ 0.10", share <= 0.10),
            Row(f"GRPO on the CPU config ({what}): completions per second of step time",
                f"{completions} completions", f"{step_s:.1f} s", completions / step_s if step_s else float("nan"))]


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


def markers(rows: list[str]) -> tuple[str, str]:
    """The markers of the block that ``--rows`` writes: the core rows (alone or with the GRPO rows, the default
    set) have the historical ones, so each set of rows is regenerated on its own without erasing the others."""
    if sorted(rows) in (["core"], ["core", "grpo"]):
        return BEGIN, END
    tag = "+".join(sorted(rows))
    return (f"<!-- bench.py output ({tag}): begin (regenerated by scripts/bench.py --rows {' '.join(sorted(rows))} "
            "--write) -->", f"<!-- bench.py output ({tag}): end -->")


def write_block(path: Path, block: str, begin: str = BEGIN, end: str = END) -> None:
    """Put the table between the markers of ``path``, keeping what the file says around it (e.g. the soak).

    A block the file does not have yet goes after the default block (or at the end of the file).
    """
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        text = head + block + rest.split(end, 1)[1]
    elif END in text:
        head, tail = text.split(END, 1)
        text = head + END + "\n\n" + block + tail
    elif text:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    else:
        text = "# Benchmarks\n\n" + block + "\n"
    path.write_text(text, encoding="utf-8")


def validation_rows(args: argparse.Namespace, notes: dict[str, Any]) -> list[Row]:
    """Suite validation of one file's tasks: a task at a time (what a stratified round sees: each task's context
    loaded cold and its own audit compile) against one file piece (one warm session along the file, one audit
    compile for all), on a fresh isolation cache each, in this run."""
    from proofgym.envs.tasks import build
    from proofgym.envs.tasks.coq_extract import sample_suite
    from proofgym.envs.tasks.coq_project import DEFAULT_SAMPLE_COUNTS, extract_project, installed_library

    project = installed_library(args.validation_lib)
    tasks, _ = extract_project(project)
    sampled = sample_suite(tasks, DEFAULT_SAMPLE_COUNTS, seed=args.seed)
    files = Counter(str(t.metadata.get("file")) for t in sampled)
    name = args.validation_file or files.most_common(1)[0][0]
    along = sorted((t for t in sampled if t.metadata.get("file") == name), key=lambda t: int(t.metadata["line"]))
    step = max(1, len(along) // max(1, args.validation_tasks))  # spread along the file, as a build's piece is
    piece = along[step - 1::step][:args.validation_tasks]

    def run(groups: list[list[Task]]) -> tuple[float, list[str | None]]:
        with tempfile.TemporaryDirectory(prefix="bench-iso") as iso:
            kwargs = {"extra_args": tuple(project.coq_args), "isolation_dir": iso}
            start, reasons = time.monotonic(), []
            for group in groups:  # each group on a fresh verifier: nothing stays warm from the one before
                reasons += [r for _, r, _ in build._validate_group([t.to_dict() for t in group], kwargs)]
                build._VERIFIER.pop("coq").close()
            return time.monotonic() - start, reasons

    one_s, one = run([[t] for t in piece])
    file_s, whole = run([piece])
    notes["validation"] = {"file": name, "tasks": len(piece), "per_task_s": round(one_s, 1),
                           "piece_s": round(file_s, 1), "same_verdicts": one == whole,
                           "kept": sum(r is None for r in whole)}
    return [Row(f"suite validation of {len(piece)} tasks of {args.validation_lib}'s `{name}` (reference warm check, "
                "cheat probes, kernel audit): a task at a time / one file piece",
                f"{one_s:.1f} s", f"{file_s:.1f} s", one_s / file_s)]


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
    parser.add_argument("--rows", nargs="+", choices=("core", "grpo", "load", "train", "hol", "validation"),
                        default=["core", "grpo"],
                        help="which rows: core (warm/cold, env.step, throughput, recovery), grpo (the GRPO-shaped "
                             "real workload), load (verdicts idle vs 2x CPU oversubscription), train (real GRPO "
                             "steps on configs/train/grpo_cpu.yaml: the reward's share of step time, completions/s; "
                             "minutes: a model generates), hol (HOL Light alone: its GRPO batch on --hol-suite, its "
                             "load rows and its fork overhead; 10-20 min: each start loads HOL Light), validation (a "
                             "project suite's validation, a task at a time against a file piece: --validation-lib); "
                             "default core grpo")
    parser.add_argument("--validation-lib", default="stdpp", help="installed Coq library of the validation row "
                        "(default stdpp)")
    parser.add_argument("--validation-file", default="", help="its source file (default: the one most sampled)")
    parser.add_argument("--validation-tasks", type=int, default=8, help="tasks of that file, spread along it (default 8)")
    parser.add_argument("--train-steps", type=int, default=3, help="GRPO steps of the train rows (default 3)")
    parser.add_argument("--grpo-suite", default="coq-stdlib", help="Coq suite of the GRPO batch (default coq-stdlib)")
    parser.add_argument("--grpo-batch", type=int, default=32, help="prompts per GRPO batch, B (default 32)")
    parser.add_argument("--grpo-group", type=int, default=8, help="attempts per prompt, G (default 8)")
    parser.add_argument("--grpo-runs", nargs="+", choices=("none", "cold", "warm"), default=["none", "cold", "warm"],
                        help="which Coq GRPO runs: without the isolation cache, with it empty, with it warm (from the "
                             "cold run; default all three); the whole-file checks run beside the first")
    parser.add_argument("--no-grpo-dafny", dest="grpo_dafny", action="store_false",
                        help="skip the GRPO batch on dafny-nl")
    parser.add_argument("--no-grpo-coq", dest="grpo_coq", action="store_false",
                        help="skip the GRPO batch on coq-stdlib (e.g. to run dafny-nl's alone)")
    parser.add_argument("--spill-at", type=int, default=0,
                        help="the pool's spill_at in the GRPO batch (default 0, the pool's default: an idle worker "
                             "takes checks by their contexts' loads; N > 0 adds the older spill at submit)")
    parser.add_argument("--hol", action="store_true",
                        help="also the GRPO batch on HOL Light (opt-in: its server loads for 2-5 min first)")
    parser.add_argument("--hol-suite", default="", help="HOL Light suite for --hol (default: goals built in here)")
    parser.add_argument("--hol-overhead-checks", type=int, default=100,
                        help="warm checks of the HOL Light fork-overhead row (default 100)")
    parser.add_argument("--hol-overhead-tasks", type=int, default=4,
                        help="tasks (contexts) of the HOL Light fork-overhead row, from --hol-suite (default 4)")
    parser.add_argument("--hol-growth-checks", type=int, default=1600,
                        help="warm checks of the HOL Light growth rows (root and zygote memory per check; 0: none)")
    parser.add_argument("--load-tasks", type=int, default=4,
                        help="tasks per system in the load rows (Coq: the tiny suite; Dafny: dafny-nl; default 4)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the GRPO batch's draw (default 0)")
    parser.add_argument("--quick", action="store_true",
                        help="small sizes to try it: GRPO 8 x 4, 40 checks per worker, 1 rep, 2 throughput runs")
    parser.add_argument("--write", help="write the table, the command and the machine to this Markdown file")
    args = parser.parse_args(argv)
    if args.quick:
        args.grpo_batch, args.grpo_group = min(args.grpo_batch, 8), min(args.grpo_group, 4)
        args.checks, args.reps, args.step_reps, args.step_budget_s = min(args.checks, 40), 1, 50, 5.0
    if shutil.which("coqc") is None:
        print("bench: coqc not found: run `make setup`", file=sys.stderr)
        return 2
    started = time.monotonic()
    load_start = os.getloadavg()
    with LoadSampler() as load:
        rows, notes = build_rows(args) if "core" in args.rows else ([], {})
        if "grpo" in args.rows:
            rows += grpo_rows(args, notes)
        if "train" in args.rows:
            rows += grpo_train_rows(args, notes)
        if "load" in args.rows:
            rows += load_rows(args, notes)
        if "hol" in args.rows:
            rows += hol_rows(args, notes)
        if "validation" in args.rows:
            rows += validation_rows(args, notes)
    notes["load_average"] = load.summary()
    table = render(rows)
    grpo_runs = {**notes.get("grpo", {}), **notes.get("grpo_dafny", {}), **notes.get("grpo_hol_light", {})}
    if grpo_runs:
        table += "\n\nGRPO-shaped batches (latency: the checks that ran, a verdict-cache answer is not one; load "\
                 "share: seconds loading contexts / seconds of those checks, where the verifier times its loads):\n\n" \
                 + grpo_table(grpo_runs)
    print(table)
    for key, value in notes.items():
        print(f"{key}: {value}")
    if args.write:
        command = "python scripts/bench.py " + " ".join(a for a in (argv if argv is not None else sys.argv[1:]))
        # the GRPO rows without Coq's batch go in a block of their own, so that Coq's stays
        begin, end = markers(args.rows + (["nocoq"] if "grpo" in args.rows and not args.grpo_coq else []))
        block = "\n".join([
            begin,
            f"Command: `{command.strip()}` ({dt.date.today().isoformat()}, {time.monotonic() - started:.0f} s).",
            "",
            f"Machine: {machine()}; load average at the start {load_start[0]:.1f}/{load_start[1]:.1f}/"
            f"{load_start[2]:.1f}. The machine is shared: other jobs ran beside this one, so wall-clock "
            "numbers are upper bounds and the ratios (measured side by side in this run) are what to read.",
            "",
            table,
            "",
            (f"P1 tasks (warm ms each): {notes['warm_ms_per_task']}. Peak processes per run (workers + sandboxed "
             f"provers): {notes['processes_peak']}. Recovery: {notes['recovery']}." if "core" in args.rows else "")
            + (f" Skipped: {'; '.join(notes['skipped'])}." if notes.get("skipped") else "")
            + (f" Load rows: flips {notes['load_flips'] or 'none'}; verdicts per kind (idle, '->' where the "
               f"oversubscribed phase differs) {notes.get('load_verdicts')}; near-timeout tasks' timeout_s "
               f"{notes.get('near_timeout_s')}; seconds per phase {notes.get('load_phases_s')}."
               if "load_flips" in notes else "")
            + (f" HOL Light fork overhead (ms): {notes['hol_overhead_ms']}; where a warm check's time goes (ms, "
               f"worker_timeline): {notes.get('hol_timeline_ms')}." if "hol_overhead_ms" in notes else "")
            + (f" HOL Light growth: {notes['hol_growth']}." if "hol_growth" in notes else "")
            + f" Load average (1 min) during the run: {load.summary()}.",
            end,
        ])
        write_block(Path(args.write), block, begin, end)
        print(f"wrote {args.write}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
