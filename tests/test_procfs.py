"""The /proc process-tree helpers on real processes: a shell with a sleeping child and a busy grandchild."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from proofgym.envs.verifiers.sandbox import procfs

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux /proc")


def _wait(predicate, timeout_s: float = 60.0) -> bool:
    """Poll ``predicate`` until it holds or a generous ``timeout_s`` passes (the caller asserts the result)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def test_tree_rss_and_cpu_of_a_real_process_tree():
    # bash -> (sleep, python busy loop that allocates 64 MiB)
    script = ("sleep 60 & " f"{sys.executable} -c 'b = bytearray(64 << 20); import time; t = time.time()\n"
              "while time.time() - t < 60: pass' & wait")
    proc = subprocess.Popen(["bash", "-c", script])
    try:
        assert _wait(lambda: len(procfs.descendants(proc.pid)) == 2)
        kids = procfs.children(proc.pid)
        assert sorted(kids) == sorted(procfs.descendants(proc.pid)) and os.getpid() not in kids
        assert proc.pid in procfs.children(os.getpid())
        assert proc.pid in procfs.parent_map()[os.getpid()]
        assert _wait(lambda: procfs.rss_bytes(kids) > 64 << 20), "the 64 MiB buffer is resident"
        before = procfs.tree_cpu_s(proc.pid)
        assert _wait(lambda: procfs.tree_cpu_s(proc.pid) > before), "the busy loop's CPU time is counted"
        # Stopped, the tree's CPU clock stands still, so ours (which includes the tree below us) is compared with
        # it exactly, with no slack for what the loop burnt between the two reads.
        for pid in kids:
            os.kill(pid, signal.SIGSTOP)
        assert _wait(lambda: all((procfs._stat_fields(p) or [b"T"])[0] == b"T" for p in kids))
        assert procfs.tree_cpu_s() >= procfs.tree_cpu_s(proc.pid)
    finally:
        for pid in [*procfs.descendants(proc.pid), proc.pid]:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        proc.wait()


def test_gone_processes_are_skipped_not_errors():
    proc = subprocess.Popen(["true"])
    proc.wait()
    assert procfs.children(proc.pid) == [] and procfs.descendants(proc.pid) == []
    assert procfs.rss_bytes([proc.pid]) == 0 and procfs.cpu_seconds([proc.pid]) == 0.0


def test_zombies_can_be_left_out():
    proc = subprocess.Popen(["true"])
    assert _wait(lambda: (procfs._stat_fields(proc.pid) or [b"?"])[0] == b"Z")  # exited, not yet reaped
    try:
        assert proc.pid in procfs.descendants(os.getpid())
        assert proc.pid not in procfs.descendants(os.getpid(), zombies=False)
        assert proc.pid not in procfs.parent_map(zombies=False).get(os.getpid(), [])
    finally:
        proc.wait()


def test_a_programs_cpu_counts_the_helpers_it_starts_while_they_run_and_after_they_exit():
    """The CPU clock of a Coq check (timeout_clock="cpu") counts CoqHammer's provers, which coqidetop starts: a
    helper's CPU is the program's while the helper runs and after it is reaped (red team round 5)."""
    helper = "import resource\nx = 0\nwhile x < 20_000_000: x += 1\nr = resource.getrusage(resource.RUSAGE_SELF)\nprint(r.ru_utime + r.ru_stime, flush=True)"
    program = ("import subprocess, sys\n"
               f"out = subprocess.run([sys.executable, '-c', {helper!r}], capture_output=True, text=True).stdout\n"
               "print(out.strip(), flush=True)\nsys.stdin.readline()")
    proc = subprocess.Popen([sys.executable, "-c", program], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        helper_cpu = float(proc.stdout.readline())  # the helper has exited and been reaped
        own = procfs.cpu_seconds([proc.pid])
        counted = procfs.program_tree_cpu_s([proc.pid])
        assert counted >= own + helper_cpu - 0.05, (counted, own, helper_cpu)
        assert own < helper_cpu  # what counting only the program's own pid missed
    finally:
        proc.stdin.close()
        proc.stdout.close()
        proc.wait(timeout=30)
