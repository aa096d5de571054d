"""Faults, one test each: a worker SIGKILLed mid-check, disk full or unwritable results, a prover binary
that vanishes mid-run. Nothing is lost, nothing is counted twice, nothing hangs.

The fourth fault, the eval process itself killed and resumed with identical totals, is
``tests/test_cli.py::test_eval_killed_and_resumed_gives_same_totals`` (not repeated here).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from proofgym.envs.errors import ProofgymError
from proofgym.envs.proof_env import load_task_list
from proofgym.envs.rewards import RewardMap
from proofgym.envs.types import Task, Verdict
from proofgym.envs.verifiers.pool import Boundary, LocalVerifierPool
from proofgym.envs.verifiers.sandbox import procfs
from proofgym.training import eval_runs as evaluate  # ensure_writable lives there
from proofgym.training.evaluate import EvalOptions, ReferenceAgent, read_results, run_eval
from tests.conftest import requires_coq
from tests.test_pool import FakeVerifier, _alive, fake_task

LOOP_PROOF = "Proof. repeat (idtac; assert True by exact I). Qed."


def loop_task(i: int, timeout_s: float = 3) -> Task:
    return Task(id=f"fault.loop{i}", system="coq", context="", statement=f"Lemma loop{i} : 1 = 2.",
                reference_proof=LOOP_PROOF, category="P1", timeout_s=timeout_s)


def descendants(pid: int) -> list[int]:
    """Live processes below ``pid``."""
    return procfs.descendants(pid, zombies=False)


def _wait_until(predicate, timeout_s: float = 60.0, step: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()


# ---------------------------------------------------------------------------------------------
# a worker killed mid-check


def test_fake_worker_dying_mid_check_is_retried_once_then_a_harness_failure(tmp_path):
    marker = tmp_path / "died-once"
    with LocalVerifierPool(2, verifier_factory=FakeVerifier) as pool:
        requests = [(f"r{i}", fake_task(i), "sleep:0.1") for i in range(6)]
        requests += [("once", fake_task(10), f"die-once:{marker}"), ("always", fake_task(11), "die")]
        results = list(pool.imap_unordered(requests))
        by_id = Counter(r.request_id for r in results)
        assert by_id == Counter({rid: 1 for rid, _, _ in requests}), "one result per request, no loss, no duplicate"
        final = {r.request_id: r for r in results}
        assert final["once"].verdict is Verdict.OK and final["once"].attempts == 2
        assert final["always"].harness_failure and final["always"].failure.boundary is Boundary.WORKER_DIED
        assert final["always"].attempts == 2 and "SIGKILL" in final["always"].failure.message
        assert all(final[f"r{i}"].verdict is Verdict.OK for i in range(6))
        assert pool.wait_ready(60)  # recovered: every slot has a live worker again
        stats = pool.stats()
        assert stats["worker_restarts"] == 3 and stats["workers_alive"] == 2 and stats["retries"] == 2
        assert pool.check(fake_task(20), "ok").verdict is Verdict.OK


@pytest.mark.prover
@requires_coq
def test_coq_worker_sigkilled_mid_check_is_retried_on_a_fresh_worker(tiny_suite):
    tasks = load_task_list(tiny_suite)
    with LocalVerifierPool(2) as pool:
        futures = {"victim": pool.submit(loop_task(0), LOOP_PROOF, request_id="victim")}
        assert _wait_until(lambda: "victim" in pool.running())
        victim_pid = pool.running()["victim"]
        assert _wait_until(lambda: len(descendants(victim_pid)) > 0)  # its coqidetop is at work
        for task in tasks:  # more work arrives while the victim is busy
            futures[task.id] = pool.submit(task, task.reference_proof, request_id=task.id)
        provers = descendants(victim_pid)
        os.kill(victim_pid, signal.SIGKILL)
        results = {rid: f.result(timeout=300) for rid, f in futures.items()}
        victim = results.pop("victim")
        assert victim.verdict is Verdict.TIMEOUT and victim.attempts == 2, victim
        assert str(victim_pid) not in victim.worker
        assert {r.verdict for r in results.values()} == {Verdict.OK, Verdict.FAIL}  # tiny.wrong_ref fails
        assert all(not r.harness_failure for r in results.values())
        assert _wait_until(lambda: not any(_alive(p) for p in provers), 30), "the dead worker's provers must go"
        stats = pool.stats()
        assert stats["worker_restarts"] == 1 and stats["retries"] == 1
        assert pool.wait_ready(60) and pool.check(tasks[0], tasks[0].reference_proof).verdict is Verdict.OK


def _exe(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return ""


@pytest.mark.prover
@requires_coq
def test_coq_prover_killed_mid_check_still_gives_the_verdict(tiny_suite):
    """SIGKILL the coqidetop itself (not the worker) while it works: the check still ends in its own verdict."""
    tasks = {t.id: t for t in load_task_list(tiny_suite)}
    def provers(worker: int) -> list[int]:
        return [pid for pid in descendants(worker) if "coqidetop" in _exe(pid)]

    with LocalVerifierPool(1) as pool:
        for round_ in range(2):  # once while the prover starts (cold), once mid-proof
            # 10 s: room for the wait below on a loaded machine (a kill after the deadline would test nothing)
            future = pool.submit(loop_task(0, timeout_s=10), LOOP_PROOF, request_id=f"victim{round_}")
            assert _wait_until(lambda rid=f"victim{round_}": rid in pool.running())
            worker = pool.running()[f"victim{round_}"]
            assert _wait_until(lambda w=worker: provers(w))
            if round_:  # mid-proof: it has computed 0.5 CPU s, 8x what a cold start and a whole trivial check take
                assert _wait_until(lambda w=worker: procfs.cpu_seconds(provers(w)) > 0.5), "the loop never ran"
            killed = provers(worker)
            for pid in killed:
                os.kill(pid, signal.SIGKILL)
            assert killed and not future.done(), "the prover must die while the check is running"
            victim = future.result(timeout=300)
            assert victim.verdict is Verdict.TIMEOUT, victim  # what the loop gets undisturbed
        honest = pool.check_batch([(tasks["tiny.lia"], tasks["tiny.lia"].reference_proof)])[0]
        assert honest.verdict is Verdict.OK and pool.stats()["harness_failures"] == {}


def _eval_workers(eval_pid: int) -> list[int]:
    """The eval's verifier workers: its Python descendants that run a sandboxed prover (a bwrap child).

    Found by shape, not by name, so that it holds however the eval starts its workers
    (a process pool, a forkserver, the verifier pool).
    """
    return [pid for pid in descendants(eval_pid)
            if "python" in os.path.basename(_exe(pid)) and any("bwrap" in _exe(c) for c in procfs.children(pid))]


@pytest.mark.prover
@requires_coq
def test_eval_with_a_worker_killed_loses_and_duplicates_nothing(tiny_suite, tmp_path):
    suite = tmp_path / "suite.jsonl"
    lines = tiny_suite.read_text().splitlines() + [loop_task(i).to_json() for i in range(3)]
    suite.write_text("\n".join(lines) + "\n")
    out = tmp_path / "r.jsonl"
    cmd = [sys.executable, "-m", "proofgym.cli", "eval", "--suite", str(suite), "--k", "2", "--workers", "2",
           "--out", str(out), "--json", "--no-progress"]
    child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert _wait_until(lambda: len(read_results(out)) >= 2 or child.poll() is not None, 120)
        assert _wait_until(lambda: _eval_workers(child.pid) or child.poll() is not None, 60)
        workers = _eval_workers(child.pid)
        assert workers, "the eval should still be running (three 3 s loops per sample)"
        os.kill(workers[0], signal.SIGKILL)
        stdout, stderr = child.communicate(timeout=600)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
    assert child.returncode == 0, stderr
    summary = json.loads(stdout)
    rows = read_results(out)
    ids = [(r["task_id"], r["sample"]) for r in rows]
    assert len(ids) == len(set(ids)) == 18, "every (task, sample) exactly once"
    assert summary["n_results"] == 18 and summary["harness_failures"] == 0
    assert summary["verdicts"] == {"OK": 10, "FAIL": 2, "TIMEOUT": 6}


# ---------------------------------------------------------------------------------------------
# disk full, unwritable results


@pytest.fixture
def tiny_mount(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs (needs root and mount permission; skipped elsewhere)."""
    mount_point = tmp_path / "tiny"
    mount_point.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount_point)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def _run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "proofgym.cli", *args], capture_output=True, text=True, timeout=120)


def test_disk_full_is_a_clear_error_before_work_starts(tiny_mount, tiny_suite):
    with contextlib.suppress(OSError), open(tiny_mount / "filler", "wb") as fh:
        fh.write(b"\0" * (1 << 20))  # fill it up: ENOSPC
    out = tiny_mount / "results" / "r.jsonl"
    proc = _run_cli("eval", "--suite", str(tiny_suite), "--out", str(out))  # a hang: TimeoutExpired at 120 s
    assert proc.returncode == 2 and "free" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not out.exists() or out.stat().st_size == 0


def test_read_only_results_dir_is_a_clear_error(tiny_mount, tiny_suite):
    subprocess.run(["mount", "-o", "remount,ro", str(tiny_mount)], check=True)
    proc = _run_cli("eval", "--suite", str(tiny_suite), "--out", str(tiny_mount / "r.jsonl"))
    assert proc.returncode == 2 and "writable" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_low_disk_is_refused_before_any_check(tmp_path, tiny_suite, monkeypatch):
    """Where no tmpfs can be mounted: the free-space check itself, with a pretend-full disk."""
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(evaluate.shutil, "disk_usage", lambda _p: usage._replace(free=4096))
    started = []

    class Agent(ReferenceAgent):
        def act(self, task: Task, sample: int) -> str:
            started.append(task.id)
            return super().act(task, sample)

    with pytest.raises(ProofgymError, match="KiB free"):
        run_eval(load_task_list(tiny_suite), agent=Agent(), out=tmp_path / "r.jsonl",
                 options=EvalOptions(k=1, progress=False))
    assert started == [] and not (tmp_path / "r.jsonl").exists()


# ---------------------------------------------------------------------------------------------
# a prover binary that vanishes mid-run


@pytest.mark.prover
@requires_coq
def test_vanished_prover_binary_is_reported_not_hung(tmp_path, tiny_suite):
    real = shutil.which("coqidetop.opt")
    bindir = tmp_path / f"bin-{uuid.uuid4().hex[:8]}"
    bindir.mkdir()
    wrapper = bindir / "coqidetop.opt"
    wrapper.write_text(f'#!/bin/sh\nexec {real} "$@"\n')
    wrapper.chmod(0o755)
    tasks = {t.id: t for t in load_task_list(tiny_suite)}
    # extra_args binds the wrapper's dir into the sandbox read-only (-I only adds an ML load path).
    kwargs = {"coq": {"coqidetop": str(wrapper), "extra_args": ("-I", str(bindir)), "audit": "never"}}
    with LocalVerifierPool(1, system_kwargs=kwargs) as pool:
        # A warm session on a Section context: the next contexts do not extend it, so they need new sessions.
        first = pool.check_batch([(tasks["tiny.section"], tasks["tiny.section"].reference_proof)])[0]
        assert first.verdict is Verdict.OK, first
        shutil.rmtree(bindir)  # the prover disappears while the pool runs
        later = pool.check_batch([(tasks["tiny.lia"], tasks["tiny.lia"].reference_proof),
                                  (tasks["tiny.app_nil"], tasks["tiny.app_nil"].reference_proof)])
        for res in later:
            assert res.harness_failure and res.failure.boundary is Boundary.VERIFIER, res
            assert "coqidetop" in res.failure.message and RewardMap()(res.result) is None
        # Fresh verifiers (after the failure) refuse to start at all: still a value, still prompt.
        again = pool.check_batch([(tasks["tiny.add_0_r"], tasks["tiny.add_0_r"].reference_proof)])[0]
        assert again.harness_failure and "not found" in again.failure.message
        assert pool.stats()["workers_alive"] == 1
