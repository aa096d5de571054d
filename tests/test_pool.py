"""The verifier pool: completion order, back-pressure, routing, retries, harness failures as values.

The fast tier runs the pool's own machinery with :class:`FakeVerifier` (no prover); the prover
tier checks the same interface with real Coq and compares verdicts with a serial verifier.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import os
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

from proofgym.envs.errors import TaskFormatError, VerifierCrashed, VerifierError
from proofgym.envs.proof_env import load_task_list
from proofgym.envs.rewards import RewardMap
from proofgym.envs.types import CheckResult, Task, Verdict
from proofgym.envs.verifiers.base import Budget
from proofgym.envs.verifiers.hol_light import hol_light_installed
from proofgym.envs.verifiers.pool import (
    Boundary,
    CheckRequest,
    LocalVerifierPool,
    PoolClosed,
    PoolFull,
    PoolResult,
    make_pool,
    routing_key,
)
from tests.conftest import requires_coq

REWARD = RewardMap()  # the default rewards: OK 1, CHEATING -1, the rest 0, a harness failure None


class FakeVerifier:
    """A verifier whose proof text says what to do; runs in the pool's worker processes.

    ``ok``/``fail``/``cheat`` -> that verdict; ``sleep:S`` -> OK after S seconds; ``load:C:W`` -> OK after C
    seconds on a context this verifier has not seen (a context load), W on one it has; ``die`` -> SIGKILL
    itself; ``die-once:PATH`` -> SIGKILL itself unless PATH exists (and creates it); ``wait:PATH`` -> OK once
    PATH exists (FAIL if it does not appear within 120 s: an order a test decides, not a sleep); ``hold:DIR`` ->
    creates DIR/started, then as ``wait:DIR/release`` (the test sees the check running, then ends it); ``raise`` ->
    VerifierCrashed; ``raise-once:PATH`` -> VerifierCrashed unless PATH exists (and creates it); ``badtask`` -> TaskFormatError; ``oserror`` -> FileNotFoundError; ``hang`` ->
    sleeps forever. Messages are ``(pid, "warm" | "cold")``: whether its context was seen before. Its time
    budget is ``budget=`` or, as a prover's config makes it, ``timeout_clock=`` and ``wall_backstop=``.
    """

    def __init__(self, system: str, **kwargs: Any) -> None:
        self.system = system
        self.kwargs = kwargs
        self.contexts: set[str] = set()
        self.budget = kwargs.get("budget") or Budget(kwargs.get("timeout_clock", "wall"),
                                                     kwargs.get("wall_backstop", 4.0))

    def check(self, task: Task, proof: str) -> CheckResult:
        warm = "warm" if task.context in self.contexts else "cold"
        self.contexts.add(task.context)
        verb, _, arg = proof.partition(":")
        if verb == "sleep":
            time.sleep(float(arg))
        elif verb == "load":
            cold_s, _, warm_s = arg.partition(":")
            time.sleep(float(cold_s if warm == "cold" else warm_s))
        elif verb in ("wait", "hold"):
            if verb == "hold":
                Path(arg, "started").touch()
                arg = str(Path(arg, "release"))
            deadline = time.monotonic() + 120.0
            while not os.path.exists(arg):
                if time.monotonic() > deadline:
                    return CheckResult(Verdict.FAIL, messages=("gave up waiting for " + arg,), backend="fake")
                time.sleep(0.01)
        elif verb == "die":
            os.kill(os.getpid(), signal.SIGKILL)
        elif verb == "die-once":
            if not os.path.exists(arg):
                Path(arg).write_text("died")
                os.kill(os.getpid(), signal.SIGKILL)
        elif verb == "raise":
            raise VerifierCrashed("the fake prover crashed")
        elif verb == "raise-once":
            if not os.path.exists(arg):
                Path(arg).write_text("crashed")
                raise VerifierCrashed("the fake prover was killed under the check")
        elif verb == "badtask":
            raise TaskFormatError("the fake task does not load")
        elif verb == "oserror":
            raise FileNotFoundError(2, "No such file or directory", "/gone/coqidetop.opt")
        elif verb == "hang":
            time.sleep(10_000)
        verdict = {"fail": Verdict.FAIL, "cheat": Verdict.CHEATING}.get(verb, Verdict.OK)
        return CheckResult(verdict, messages=(str(os.getpid()), warm, str(self.kwargs.get("tag", ""))),
                           backend="fake")

    def close(self) -> None:
        pass

    def __enter__(self) -> FakeVerifier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SlowStartVerifier(FakeVerifier):
    """A FakeVerifier whose ``prepare`` (its prover's start-up, like a HOL Light server loading) takes 1.5 s once."""

    def prepare(self, task: Task) -> None:
        if not getattr(self, "_started", False):
            time.sleep(1.5)
            self._started = True


def fake_task(i: int, context: str = "") -> Task:
    return Task(id=f"fake.{i}", system="coq", context=context, statement=f"Lemma l{i} : True.",
                reference_proof="ok", category="P1", timeout_s=5)


def fake_pool(workers: int = 2, **kwargs: Any) -> LocalVerifierPool:
    """A pool of fake verifiers; its verdict cache is off unless asked for, since these tests are about
    what the workers do (tests/test_verdict_cache.py tests the cache)."""
    kwargs.setdefault("verdict_cache", 0)
    return LocalVerifierPool(workers, verifier_factory=FakeVerifier, **kwargs)


@pytest.fixture(scope="module")
def pool():
    with fake_pool(2, max_pending=8) as p:
        yield p


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


# ---------------------------------------------------------------------------------------------


def test_results_come_in_completion_order_tagged_with_request_ids(pool, tmp_path):
    # "slow" finishes only once the test has received "fast": the order is the test's, not the machine's load.
    release = tmp_path / "release"
    requests = [CheckRequest(fake_task(0), f"wait:{release}", "slow"), CheckRequest(fake_task(1, "b"), "ok", "fast")]
    results = pool.imap_unordered(requests)
    first = next(results)
    release.touch()
    second = next(results)
    assert [first.request_id, second.request_id] == ["fast", "slow"]
    assert first.verdict is Verdict.OK and second.verdict is Verdict.OK


def test_verdicts_and_harness_failures_are_values(pool):
    requests = [("a", fake_task(0), "ok"), ("b", fake_task(1), "fail"), ("c", fake_task(2), "cheat"),
                ("d", fake_task(3), "raise"), ("e", fake_task(4), "badtask"), ("f", fake_task(5), "oserror"),
                ("g", fake_task(6), None)]
    results = {r.request_id: r for r in pool.imap_unordered(requests)}
    assert results["a"].verdict is Verdict.OK and REWARD(results["a"].result) == 1.0
    assert results["b"].verdict is Verdict.FAIL and results["c"].verdict is Verdict.CHEATING
    assert results["d"].harness_failure and results["d"].failure.boundary is Boundary.VERIFIER
    assert "VerifierCrashed" in results["d"].failure.message and REWARD(results["d"].result) is None
    assert results["e"].failure.boundary is Boundary.TASK and results["f"].failure.boundary is Boundary.VERIFIER
    assert results["g"].verdict is Verdict.ERROR  # a non-text proof is an ERROR verdict, as in the envs
    with pytest.raises(VerifierError):
        results["d"].raise_for_harness()
    row = results["d"].to_dict()
    assert row["verdict"] is None and row["error_kind"] == "verifier"
    # The worker survived its broken verifier, which is rebuilt for the next check.
    assert pool.check(fake_task(7), "ok").verdict is Verdict.OK


def test_a_prover_that_breaks_once_under_a_check_is_retried_on_a_fresh_verifier(pool, tmp_path):
    """A prover killed from outside mid-check (a verifier harness failure) costs a retry, not a lost result."""
    result = pool.check_batch([(fake_task(0), f"raise-once:{tmp_path / 'crashed'}")])[0]
    assert result.verdict is Verdict.OK and result.attempts == 2, result
    assert result.result.messages[1] == "cold", "the retry ran on a freshly built verifier"
    again = pool.check_batch([(fake_task(1), "raise")])[0]  # breaks every time: reported after one retry
    assert again.harness_failure and again.failure.boundary is Boundary.VERIFIER and again.attempts == 2


def test_check_batch_keeps_input_order_and_check_raises_on_harness_failure(pool):
    out = pool.check_batch([(fake_task(0), "sleep:0.3"), (fake_task(1), "fail"), (fake_task(2), "ok")])
    assert [r.verdict for r in out] == [Verdict.OK, Verdict.FAIL, Verdict.OK]
    with pytest.raises(VerifierError, match="crashed"):
        pool.check(fake_task(3), "raise")


def test_back_pressure_bounds_pending_checks(tmp_path):
    release = tmp_path / "release"  # the first check holds its slot until the test has seen the pool full
    with fake_pool(1, max_pending=2) as p:
        first = p.submit(fake_task(0), f"wait:{release}")
        p.submit(fake_task(1), "ok")
        assert p.pending == 2
        with pytest.raises(PoolFull):
            p.submit(fake_task(2), "ok", block=False)
        release.touch()
        third = p.submit(fake_task(2), "ok", timeout=30)  # blocks until a slot frees up
        assert first.done()
        assert third.result(timeout=30).verdict is Verdict.OK
        # A lazy request stream is only pulled when there is room.
        pulled: list[int] = []

        def requests():
            for i in range(6):
                pulled.append(i)
                yield fake_task(i), "sleep:0.05"

        seen = 0
        for _ in p.imap_unordered(requests(), window=2):
            seen += 1
            assert len(pulled) <= seen + 2
        assert seen == 6


def test_async_check_many(pool):
    async def go() -> list[PoolResult]:
        async def requests():
            for i in range(5):
                yield (i, fake_task(i), "ok" if i % 2 else "fail")

        return [r async for r in pool.check_many(requests(), window=3)]

    results = asyncio.run(go())
    assert sorted(r.request_id for r in results) == [0, 1, 2, 3, 4]
    assert {r.request_id: r.verdict for r in results}[1] is Verdict.OK


def test_a_context_stays_on_the_worker_that_has_it_warm(pool):
    tasks = [fake_task(i, context=f"ctx{i % 3}") for i in range(12)]
    results = [pool.check_batch([(t, "ok")])[0] for t in tasks]  # one at a time: nothing to spill
    by_context: dict[str, set[str]] = {}
    for task, res in zip(tasks, results, strict=True):
        by_context.setdefault(task.context, set()).add(res.result.messages[0])
    assert all(len(pids) == 1 for pids in by_context.values()), by_context
    assert all(r.result.messages[1] == "warm" for r in results[3:])


def test_a_busy_context_spills_to_an_idle_worker():
    with fake_pool(2) as p:
        results = p.check_batch([(fake_task(i, "same"), "sleep:0.4") for i in range(4)])
        assert len({r.result.messages[0] for r in results}) == 2, "both workers should share a hot context"


def test_an_idle_worker_never_loads_a_context_twice_for_a_short_queue():
    """A GRPO-shaped batch (checks grouped by context, a load 100x a warm check): an idle worker takes the checks of
    a context nobody has loaded yet (with the rest of that context's queue), never a short queue's checks of a context
    the other worker has warm. So each context is loaded once, and both workers work."""
    requests = [(f"{c}/{k}", fake_task(4 * c + k, context=f"ctx{c}"), "load:1.0:0.01") for c in range(4) for k in range(4)]
    with fake_pool(2) as p:
        assert p.wait_ready(60)
        results = p.check_batch(requests)
        stats = p.stats()
    cold = Counter(r.request_id.split("/")[0] for r in results if r.result.messages[1] == "cold")
    assert cold == Counter({str(c): 1 for c in range(4)}), cold
    assert stats["context_loads"] == 4, stats
    assert len({r.result.messages[0] for r in results}) == 2, "both workers should have worked"


def test_repeats_answered_by_the_verdict_cache_take_no_room(tmp_path):
    """Eight identical checks with max_pending 2: the seven repeats wait on the first without holding room, so the
    next prompt's check is submitted (and runs on the other worker) while the first still runs."""
    release = tmp_path / "release"  # the first check ends only once the other prompt's result has come
    with fake_pool(2, max_pending=2, verdict_cache=64) as p:
        assert p.wait_ready(60)
        requests = [(i, fake_task(0, context="a"), f"wait:{release}") for i in range(8)]
        requests.append((8, fake_task(1, context="b"), "ok"))
        results = p.imap_unordered(requests)
        first = next(results)
        release.touch()
        order = [first.request_id, *(r.request_id for r in results)]
    assert order[0] == 8, order
    assert sorted(order) == list(range(9))


def test_routing_key_groups_a_file():
    a = Task("a", "coq", "Require A.", "Lemma a : True.", "", metadata={"file": "x.v"})
    b = Task("b", "coq", "Require A. Lemma a : True. Admitted.", "Lemma b : True.", "", metadata={"file": "x.v"})
    c = Task("c", "coq", "Require A.", "Lemma c : True.", "")
    assert routing_key(a) == routing_key(b) != routing_key(c)


def test_kwargs_reach_the_workers():
    with fake_pool(1, verifier_kwargs={"tag": "all"}, system_kwargs={"coq": {"tag": "coq-only"}}) as p:
        assert p.check(fake_task(0), "ok").messages[2] == "coq-only"


def test_pool_as_verifier_in_an_env():
    with fake_pool(1) as p:
        env = gym.make("proofgym/WholeProof-v0", tasks=[fake_task(0).to_dict()], verifier=p.as_verifier("coq"))
        env.reset(seed=0)
        _, reward, terminated, _, info = env.step("ok")
        assert reward == 1.0 and terminated and info["verdict"] == "OK"
        env.close()
        assert not p.closed  # the env does not own the pool


def test_close_is_idempotent_and_leaves_no_process():
    p = fake_pool(2)
    assert p.wait_ready(60)
    pids = p.worker_pids()
    assert len(pids) == 2
    waiting = p.submit(fake_task(0), "sleep:30", request_id="waiting")
    deadline = time.monotonic() + 60
    while "waiting" not in p.running():  # close() must find the check running on a worker, not still queued
        assert time.monotonic() < deadline, "the check never started on a worker"
        time.sleep(0.01)
    p.close()
    p.close()
    res = waiting.result(timeout=5)
    assert res.harness_failure and res.failure.boundary is Boundary.CLOSED
    assert not any(_alive(pid) for pid in pids)
    with pytest.raises(PoolClosed):
        p.submit(fake_task(1), "ok")


def test_watchdog_kills_a_silent_check():
    with fake_pool(1, watchdog_s=1.0) as p:
        res = p.submit(fake_task(0), "hang").result(timeout=60)
        assert res.failure.boundary is Boundary.WATCHDOG and res.attempts == 1  # a hang is not retried
        assert p.check(fake_task(1), "ok").verdict is Verdict.OK  # a fresh worker took over


def test_kwargs_only_factories_and_cpu_measurement():
    """``run_eval(verifier="module:Factory")`` factories take only kwargs; the pool calls them that way."""
    with LocalVerifierPool(1, verifier_factory="tests.test_eval_fakes:FakeVerifier", measure_cpu=True) as p:
        result = p.check(fake_task(0), "good")
        assert result.verdict is Verdict.OK and result.cpu_s == 0.02  # the verifier's own figure is kept
        assert p.check(fake_task(1), "cheat").verdict is Verdict.CHEATING
    with fake_pool(1, measure_cpu=True) as p:
        assert p.check(fake_task(0), "sleep:0.05").cpu_s >= 0.0


def test_a_check_past_its_deadline_is_timeout_never_a_late_ok():
    """The deadline (timeout_s + context_allowance_s) covers the whole check, context loading included."""
    with fake_pool(1, context_allowance_s=0.0) as p:
        pids = p.worker_pids()
        slow = dataclasses.replace(fake_task(0), timeout_s=0.2)
        result = p.submit(slow, "sleep:3").result(timeout=60)
        assert result.verdict is Verdict.TIMEOUT and REWARD(result.result) == 0.0
        assert "deadline" in result.result.reasons[0] and "timeout_s=0.2" in result.result.reasons[0]
        # The worker was not killed (its warm contexts survive): it finishes, drops the late OK, goes on.
        assert p.check(fake_task(1), "ok").verdict is Verdict.OK
        assert p.worker_pids() == pids and p.stats()["worker_restarts"] == 0
        assert p.stats()["verdicts"] == {"TIMEOUT": 1, "OK": 1}
    with pytest.raises(ValueError, match="context_allowance_s"):
        fake_pool(1, context_allowance_s=-1)


def test_a_provers_start_up_is_not_part_of_the_deadline():
    """``prepare(task)`` (a HOL Light server loading its base: minutes) runs before the deadline starts."""
    with LocalVerifierPool(1, verifier_factory=SlowStartVerifier, context_allowance_s=0.0) as p:
        result = p.submit(dataclasses.replace(fake_task(0), timeout_s=1.0), "ok").result(timeout=60)
        assert result.verdict is Verdict.OK, result


def test_make_pool_rejects_unknown_engines():
    with pytest.raises(ValueError, match="engine"):
        make_pool("threads")


# ---------------------------------------------------------------------------------------------
# real Coq


@pytest.mark.prover
@requires_coq
def test_pool_verdicts_match_a_serial_verifier(tiny_suite):
    from proofgym.envs.verifiers.coq import CoqVerifier

    tasks = load_task_list(tiny_suite)
    proofs = ["reference", "Proof. Admitted.", "Proof. exact I. Qed.", "garbage ((("]
    requests = [(f"{t.id}/{i}", t, t.reference_proof if p == "reference" else p)
                for t in tasks for i, p in enumerate(proofs)]
    with CoqVerifier() as serial:
        expected = {rid: serial.check(t, p).verdict for rid, t, p in requests}
    with LocalVerifierPool(2) as p:
        got = {r.request_id: r.verdict for r in p.imap_unordered(requests)}
        assert p.stats()["harness_failures"] == {}
    assert got == expected
    assert Verdict.OK in got.values() and Verdict.CHEATING in got.values()


def counting_coq(loads_dir: str, **kwargs: Any) -> Any:
    """A pool worker's CoqVerifier that writes a line (the context's hash) to ``loads_dir`` for each coqidetop it starts
    to load a context."""
    from proofgym.envs.verifiers.coq import CoqVerifier

    verifier = CoqVerifier(**kwargs)
    session = verifier._session

    def counted(context: str) -> Any:
        before = verifier.stats["sessions_started"]
        try:
            return session(context)
        finally:
            if verifier.stats["sessions_started"] != before:
                with open(os.path.join(loads_dir, f"{os.getpid()}.txt"), "a", encoding="utf-8") as f:
                    f.write(hashlib.sha256(context.encode()).hexdigest()[:12] + "\n")

    verifier._session = counted
    return verifier


@pytest.mark.prover
@requires_coq
def test_real_coq_loads_each_context_of_a_batch_once(tmp_path, monkeypatch):
    """Three contexts x four checks on two real Coq workers: each context is loaded by one coqidetop, once, and the
    verdicts are a serial verifier's.

    An idle worker may also take a check whose context is warm elsewhere when it would wait there longer than two
    loads (``STEAL_MARGIN``): on a loaded machine that happened here and a context was loaded twice, by design. That
    rule weighs measured times, so it is switched off: what is tested is the routing, which never depends on them."""
    from proofgym.envs.verifiers.coq import CoqVerifier
    from proofgym.envs.verifiers.pool import local as pool_module

    monkeypatch.setattr(pool_module, "STEAL_MARGIN", float("inf"))

    tasks = [Task(f"loads.{c}", "coq", f"From Coq Require Import Lia List.\nDefinition c{c} := {c}.\n",
                  f"Lemma l{c} : c{c} = {c}.", "Proof. reflexivity. Qed.", timeout_s=60) for c in range(3)]
    proofs = ["Proof. reflexivity. Qed.", "Proof. Admitted.", "Proof. exact I. Qed.", "Proof. unfold c0. lia. Qed."]
    requests = [(f"{t.id}/{i}", t, p) for t in tasks for i, p in enumerate(proofs)]
    with CoqVerifier(audit="never") as serial:
        expected = {rid: serial.check(t, p).verdict for rid, t, p in requests}
    loads = tmp_path / "loads"
    loads.mkdir()
    with LocalVerifierPool(2, verifier_factory=counting_coq, verifier_kwargs={"loads_dir": str(loads)},
                           system_kwargs={"coq": {"audit": "never"}}) as p:
        got = {r.request_id: r.verdict for r in p.check_batch(requests)}
        assert p.stats()["harness_failures"] == {}
    assert got == expected
    lines = [line for f in loads.iterdir() for line in f.read_text().split()]
    assert sorted(Counter(lines).values()) == [1, 1, 1], lines


@pytest.mark.prover
@requires_coq
def test_a_slow_context_on_real_coq_times_out_at_the_pools_deadline():
    """A context that takes 3 s to load (``Fail Timeout 3``: at least 3 s on any machine) with timeout_s 1 and no
    allowance is TIMEOUT, not the OK that Coq gives after loading it; the context stays warm on its worker."""
    context = "Require Import PArith.\nFail Timeout 3 Eval vm_compute in (Pos.iter negb true 10000000000%positive).\n"
    task = Task("slow.context", "coq", context, "Lemma two : 1 + 1 = 2.", "Proof. reflexivity. Qed.", timeout_s=1)
    # Without the isolation cache: a cached context would load its compiled .vo in milliseconds, not in 3 s.
    with LocalVerifierPool(1, system_kwargs={"coq": {"audit": "never", "isolation_cache": False}},
                           context_allowance_s=0.0) as p:
        result = p.submit(task, "Proof. reflexivity. Qed.").result(timeout=300)
        assert result.verdict is Verdict.TIMEOUT and "deadline" in result.result.reasons[0], result
        # The same context with time to spare: the worker finished loading it, so it is warm now.
        relaxed = dataclasses.replace(task, timeout_s=60)
        assert p.submit(relaxed, "Proof. reflexivity. Qed.").result(timeout=300).verdict is Verdict.OK


@pytest.mark.prover
@pytest.mark.slow
@pytest.mark.skipif(not hol_light_installed(), reason="HOL Light is not installed: run `make setup`")
def test_a_hol_light_servers_start_up_is_outside_the_deadline():
    """The first HOL Light check of a worker starts its server (minutes: loading the base). The pool runs the
    verifier's prepare() first, so even with no context allowance a 30 s check of a true goal is OK.

    Slow tier: the worker process loads HOL Light itself. In `make test`, the pool side is
    test_a_provers_start_up_is_not_part_of_the_deadline above (a fake prepare that takes its time) and the verifier side
    is tests/test_hol_light.py::test_prepare_starts_the_tasks_base_and_refuses_an_unknown_one."""
    task = Task("pool.hol", "hol_light", "", "`1 + 1 = 2`", "ARITH_TAC", timeout_s=30)
    with LocalVerifierPool(1, context_allowance_s=0.0, start_timeout_s=300) as p:
        result = p.submit(task, "ARITH_TAC").result(timeout=1800)
        assert result.verdict is Verdict.OK, result
