#!/usr/bin/env python3
"""Benchmark the warm DafnyServer path against the naive way (a fresh ``dafny`` per check), in one run.

For each task of the dafny-nl suite, the same programs (the reference, and a broken variant
without its first loop invariant or with a wrong constant) are checked, interleaved:
1. the naive way: write the program to a file and run ``dafny /compile:0`` on it (sandboxed,
   pinned z3), exactly what a per-check verifier would do;
2. the proofgym way: :class:`DafnyVerifier` with a warm sandboxed DafnyServer (audit off, to time
   the per-check path: parse + resolve + verify + symbols + integrity).
It prints per-check medians and means, the ratio, the server's one-time start, and peak memory
(RSS summed over each process tree: mono, its threads' process and every z3), sampled every 20 ms.

With ``--coverage`` it also measures the taxonomy's regex coverage on the diagnostics of broken
programs (mutants of every reference, plus a corpus of resolution errors).

    python scripts/bench_dafny.py                       # 12 tasks, 2 programs each
    python scripts/bench_dafny.py --tasks 61 --coverage
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from proofgym.envs.systems import DAFNY
from proofgym.envs.tasks.dafny_nl import build_tasks
from proofgym.envs.types import Task, Verdict
from proofgym.envs.verifiers.dafny import DafnyVerifier, dafny_available
from proofgym.envs.verifiers.dafny.output import parse_output, taxonomy_coverage
from proofgym.envs.verifiers.dafny.server import DafnyServer
from proofgym.envs.verifiers.sandbox import procfs


def broken(task: Task) -> str:
    """A wrong variant of the reference: drop its first loop invariant, else change a constant."""
    ref = task.reference_proof
    lines = ref.split("\n")
    for k, line in enumerate(lines):
        if line.strip().startswith("invariant"):
            return "\n".join(lines[:k] + lines[k + 1:])
    return re.sub(r"\b1\b", "2", ref, count=1) if re.search(r"\b1\b", ref) else ref.replace("0", "1", 1)


def tree_rss_kib(root: int) -> int:
    return procfs.rss_bytes([root, *procfs.descendants(root)]) // 1024


def server_root() -> int | None:
    """The verifier's warm DafnyServer: the sandbox process that runs it, among this process's descendants."""
    for pid in procfs.descendants(os.getpid()):  # parents first: the sandbox before the mono it runs
        try:
            if b"DafnyServer.exe" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return pid
        except OSError:
            continue
    return None


def dafny_args(z3: str, timeout_s: float, *extra: str) -> list[str]:
    """Flags of a plain Dafny run (no compilation) with the verifier's z3."""
    return ["/compile:0", f"/z3exe:{z3}", f"/timeLimit:{int(timeout_s)}", *extra]


class PeakSampler:
    """Samples the RSS of a process tree (whose root may change) in a thread; keeps the peak."""

    def __init__(self) -> None:
        self.root: int | None = None
        self.peak_kib = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            root = self.root
            if root is not None:
                self.peak_kib = max(self.peak_kib, tree_rss_kib(root))

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak_kib


def naive_check(verifier: DafnyVerifier, program: str, timeout_s: float, sampler: PeakSampler) -> tuple[float, str]:
    """One fresh ``dafny /compile:0`` run in the same sandbox; returns (seconds, summary line)."""
    mono = shutil.which(verifier.config.mono) or verifier.config.mono
    args = [mono, os.path.join(verifier.config.dafny_dir, "Dafny.exe"), *dafny_args(verifier.z3, timeout_s),
            "program.dfy"]
    with tempfile.TemporaryDirectory(prefix="proofgym-naive-") as tmp:
        workdir = Path(tmp)
        (workdir / "program.dfy").write_text(program, encoding="utf-8")
        start = time.perf_counter()
        job = verifier.sandbox.popen(args, workdir=workdir, stdin=subprocess.DEVNULL)
        sampler.root = job.pid
        with job:
            out, err, _, _ = job.communicate_until(None, time.monotonic() + timeout_s + 30)
        sampler.root = None
        seconds = time.perf_counter() - start
    text = out.decode("utf-8", "replace")
    summary = next((line for line in text.splitlines() if line.startswith("Dafny program verifier")), "")
    return seconds, summary


def coverage(verifier: DafnyVerifier, tasks: list[Task]) -> None:
    corpus = [
        "method M() { var x := 1; x := x + true; }", "method P(x: int) {} method M() { P(1, 2); }",
        "method M(a: array<int>) { var x := a.Lenght; }", "method M() { Foo(); }",
        "method M() returns (r: int) { ghost var g := 1; r := g; }", "method M(x: Foo) {}",
        "method M(x: int) { if x { } }", "method M() { var x := 1; var x := 2; }",
        "function G(): int { 1 } method M() returns (r: int) { r := G(); }", "method M() { break; }",
        "method M() returns (r: int) { return 1, 2; }", "datatype D = A | B method M(d: D) { match d { case A => } }",
        "method M(c: char) { var x := c + 1; }", "method M() { var s := set x: int | x > 0; }",
    ]
    programs = list(corpus)
    for task in tasks:
        ref = task.reference_proof
        programs.append(broken(task))
        programs.append(ref.replace(":=", ":= undefinedName +", 1))
        programs.append(ref.replace("{", "{ assert false;", 1) if "method" in ref else ref + "\nlemma X() ensures false {}\n")
        programs.append(ref.rsplit("}", 1)[0])  # a missing closing brace
    diagnostics = []
    # A server of the bench's own, in the verifier's sandbox: these programs are read as Dafny says them,
    # not judged (the verifier's checks would refuse most of them before Dafny saw them).
    args = dafny_args(verifier.z3, 30, "/verifySnapshots:0", *(["/noCheating:1"] if verifier.config.no_cheating else []))
    with tempfile.TemporaryDirectory(prefix="proofgym-coverage-") as tmp:
        server = DafnyServer(verifier.sandbox, Path(tmp), mono=shutil.which(verifier.config.mono) or verifier.config.mono,
                             server_exe=os.path.join(verifier.config.dafny_dir, "DafnyServer.exe"))
        try:
            for program in programs:
                reply = server.request("verify", program, args=args, timeout_s=60, filename=verifier.config.filename)
                diagnostics.extend(parse_output(reply.text, filename=verifier.config.filename).errors)
        finally:
            server.kill()
    covered, total = taxonomy_coverage(diagnostics)
    by_cat = Counter(d.category.value for d in diagnostics)
    print(f"taxonomy coverage: {covered}/{total} diagnostics = {100 * covered / max(total, 1):.1f}% "
          f"(from {len(programs)} broken programs)")
    print("  by category: " + ", ".join(f"{k} {v}" for k, v in by_cat.most_common()))
    unknown = sorted({d.message for d in diagnostics if d.category.value == "unknown"})
    for message in unknown[:10]:
        print(f"  unknown: {message}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=12, help="tasks of dafny-nl to use (default 12)")
    parser.add_argument("--coverage", action="store_true", help="also measure the taxonomy's coverage")
    args = parser.parse_args()
    if not dafny_available():
        raise SystemExit(f"Dafny 2.3 is not installed: {DAFNY.install_hint}")
    all_tasks = build_tasks()
    step = max(1, len(all_tasks) // max(1, args.tasks))
    tasks = all_tasks[::step][: args.tasks]
    with DafnyVerifier(audit="never") as verifier:
        t0 = time.perf_counter()
        verifier.check(tasks[0], tasks[0].reference_proof)  # starts the server (one-time cost)
        start_s = time.perf_counter() - t0
        warm: list[float] = []
        naive: list[float] = []
        agree = 0
        disagreements: list[str] = []
        server_sampler, naive_sampler = PeakSampler(), PeakSampler()
        for task in tasks:
            for program in (task.reference_proof, broken(task)):
                server_sampler.root = server_root()
                t = time.perf_counter()
                result = verifier.check(task, program)
                warm.append(time.perf_counter() - t)
                seconds, summary = naive_check(verifier, program, task.timeout_s, naive_sampler)
                naive.append(seconds)
                naive_ok = summary.endswith(" 0 errors") and "finished with 0 verified" not in summary
                if (result.verdict is Verdict.OK) == naive_ok:
                    agree += 1
                else:
                    disagreements.append(f"{task.id}: proofgym {result.verdict.value} "
                                         f"({'; '.join(result.reasons)[:100]}), naive '{summary}'")
        server_peak, naive_peak = server_sampler.stop(), naive_sampler.stop()
        print(f"tasks: {len(tasks)}, checks per path: {len(warm)} (reference + broken variant each), "
              f"verdicts agree (OK or not): {agree}/{len(warm)}")
        for line in disagreements:
            print(f"  differs: {line}")
        print(f"server start (once): {start_s:.2f} s")
        print(f"warm DafnyServer per check: median {statistics.median(warm):.3f} s, mean {statistics.mean(warm):.3f} s")
        print(f"naive dafny CLI per check:  median {statistics.median(naive):.3f} s, mean {statistics.mean(naive):.3f} s")
        print(f"ratio (naive / warm): median {statistics.median(naive) / statistics.median(warm):.1f}x, "
              f"mean {statistics.mean(naive) / statistics.mean(warm):.1f}x")
        print(f"peak memory: warm server tree {server_peak / 1024:.0f} MiB (resident for the whole run), "
              f"naive tree {naive_peak / 1024:.0f} MiB (per check)")
        if args.coverage:
            coverage(verifier, all_tasks)


if __name__ == "__main__":
    main()
