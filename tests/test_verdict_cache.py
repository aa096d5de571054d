"""The pools' verdict cache: an identical submission is never checked twice, and what is not a
verdict about the proof (a harness failure, a TIMEOUT) is never reused."""

from __future__ import annotations

import dataclasses

import pytest

from proofgym.envs.types import CheckResult, Task, Verdict
from proofgym.envs.verifiers.pool import LocalVerifierPool
from proofgym.envs.verifiers.pool.cache import VerdictCache, cache_key
from tests.test_pool import fake_pool, fake_task

COQ_TASK = Task(id="cache.plus0", system="coq", context="", statement="Lemma plus0 (n : nat) : n + 0 = n.",
                reference_proof="Proof. induction n; simpl; congruence. Qed.", category="P1", timeout_s=20)


@pytest.fixture(scope="module")
def pool():
    with fake_pool(2, max_pending=64, verdict_cache=1000) as p:
        yield p


def test_a_repeat_is_answered_from_the_cache_and_says_so(pool):
    task = fake_task(101)
    first = pool.check_batch([(task, "ok")])[0]
    again = pool.check_batch([(task, "ok")])[0]
    assert first.worker.startswith("local:") and not first.result.cached
    assert again.worker == "cache" and again.result.cached and again.attempts == 0
    assert again.result.verdict is first.result.verdict and again.result.messages == first.result.messages
    assert again.result.wall_s == 0.0  # nothing ran for it
    stats = pool.stats()["verdict_cache"]
    assert stats["hits"] >= 1 and stats["entries"] >= 1


def test_identical_checks_in_one_batch_run_once(pool):
    task = fake_task(102)
    before = pool.stats()["completed"]
    group = pool.check_batch([(task, "sleep:0.5")] * 8 + [(task, "fail")] * 4)  # a GRPO group with repeats
    assert [r.verdict for r in group] == [Verdict.OK] * 8 + [Verdict.FAIL] * 4
    assert pool.stats()["completed"] - before == 2  # one check per distinct proof; the rest waited for it
    assert sum(r.worker == "cache" for r in group) == 10


def test_the_key_is_the_whole_task_the_exact_proof_and_the_settings():
    task = fake_task(103)
    key = cache_key(task, "ok", "s")
    assert key != cache_key(task, "ok ", "s")  # the exact text: a verifier's normaliser decides the rest
    assert key != cache_key(dataclasses.replace(task, statement="Lemma l103 : False."), "ok", "s")
    assert key != cache_key(dataclasses.replace(task, timeout_s=9), "ok", "s")
    assert key != cache_key(task, "ok", "audit=always")
    assert cache_key(task, "ab", "c") != cache_key(task, "a", "bc")  # parts cannot run into each other


def test_harness_failures_and_timeouts_are_never_stored(tmp_path, pool):
    task = fake_task(104)
    flag = tmp_path / "crashed-twice"
    # raise-once crashes the first attempt; the pool retries it once on a fresh verifier, which succeeds
    assert pool.check_batch([(task, f"raise-once:{flag}")])[0].verdict is Verdict.OK
    broken = fake_task(105)
    first = pool.check_batch([(broken, "raise")])[0]
    second = pool.check_batch([(broken, "raise")])[0]
    assert first.harness_failure and second.harness_failure and second.worker != "cache"
    cache = VerdictCache(10)
    cache.put("k", CheckResult(Verdict.TIMEOUT, ("past the deadline",)))
    assert cache.get("k") is None and len(cache) == 0


def test_the_cache_is_bounded_least_recently_used_first():
    cache = VerdictCache(2)
    for key in ("a", "b"):
        cache.put(key, CheckResult(Verdict.OK))
    assert cache.get("a") is not None  # a is now the most recent
    cache.put("c", CheckResult(Verdict.FAIL))
    assert cache.get("b") is None and cache.get("a") is not None and cache.get("c") is not None
    assert len(cache) == 2


def test_a_pool_without_the_cache_checks_every_repeat():
    with fake_pool(1, verdict_cache=0) as pool:
        results = pool.check_batch([(fake_task(106), "ok")] * 3)
        assert all(r.worker.startswith("local:") for r in results) and pool.stats()["verdict_cache"] == {}


@pytest.mark.prover
def test_a_cached_coq_cheat_stays_a_cheat():
    from tests.conftest import have_coq

    if not have_coq():
        pytest.skip("Coq is not installed")
    with LocalVerifierPool(1) as pool:  # the real Coq verifier; the cache is on by default
        cheat = "Proof. Admitted."
        results = pool.check_batch([(COQ_TASK, cheat), (COQ_TASK, COQ_TASK.reference_proof)] * 2)
        assert [r.verdict for r in results] == [Verdict.CHEATING, Verdict.OK] * 2
        assert [r.worker == "cache" for r in results] == [False, False, True, True]


def test_the_service_reports_cache_hits(pool):
    from proofgym.envs.verifiers.service import ServiceConfig, VerifierService

    with VerifierService(pool, ServiceConfig(port=0)) as service:
        pool.check_batch([(fake_task(107), "ok")] * 3)
        assert service.metrics_snapshot()["verdict_cache"]["hits"] + \
            service.metrics_snapshot()["verdict_cache"]["coalesced"] >= 2
        line = next(x for x in service.prometheus().splitlines() if x.startswith("proofgym_verdict_cache_hits_total"))
        assert int(line.split()[-1]) >= 2
