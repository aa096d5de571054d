"""The Ray engine of the verifier pool, on a local Ray cluster on this machine (no dashboard).

Same interface as the local engine: completion order, request ids, routing by context, an actor
killed mid-check is retried once, and close() leaves no process behind.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from proofgym.envs.proof_env import load_task_list
from proofgym.envs.types import Verdict
from tests.conftest import requires_coq
from tests.test_pool import FakeVerifier, _alive, fake_task

ray = pytest.importorskip("ray", reason="the Ray engine needs the ray extra: pip install 'proofgym[ray]'")

from proofgym.envs.verifiers.ray_pool import RayVerifierPool  # noqa: E402 - after the importorskip

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def cluster():
    # Workers import this test module (for FakeVerifier) as the driver does.
    paths = os.pathsep.join([str(ROOT), str(ROOT.parent), os.environ.get("PYTHONPATH", "")]).strip(os.pathsep)
    ray.init(num_cpus=2, include_dashboard=False, logging_level="warning", log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": paths}})
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def fake_ray_pool(cluster):
    pool = RayVerifierPool(("coq",), workers_per_actor=2, verifier_factory=FakeVerifier)
    yield pool
    pool.close()


def test_ray_pool_completion_order_routing_and_harness_failures(fake_ray_pool):
    pool = fake_ray_pool
    order = [r.request_id for r in pool.imap_unordered([("slow", fake_task(0), "sleep:1.0"),
                                                         ("fast", fake_task(1, "b"), "ok")])]
    assert order == ["fast", "slow"]
    results = [pool.check_batch([(fake_task(i, f"ctx{i % 2}"), "ok")])[0] for i in range(6)]
    by_context: dict[int, set[str]] = {}
    for i, res in enumerate(results):
        assert res.worker.startswith("ray:") and res.verdict is Verdict.OK
        by_context.setdefault(i % 2, set()).add(res.result.messages[0])
    assert all(len(pids) == 1 for pids in by_context.values()), "a context must stay on its warm worker"
    broken = pool.check_batch([(fake_task(9), "raise")])[0]
    assert broken.harness_failure and broken.error_kind == "verifier" and broken.reward() is None


def test_ray_actor_killed_mid_check_is_retried_once(fake_ray_pool):
    pool = fake_ray_pool
    info = ray.get(pool.actors("coq")[0].ready.remote())
    future = pool.submit(fake_task(0, "kill"), "sleep:2", request_id="victim")
    time.sleep(0.7)
    os.kill(info["pid"], signal.SIGKILL)
    result = future.result(timeout=120)
    assert result.request_id == "victim" and result.verdict is Verdict.OK and result.attempts == 2
    # The restarted actor has fresh workers; the old ones died with it.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(_alive(p) for p in info["worker_pids"]):
        time.sleep(0.1)
    assert not any(_alive(p) for p in info["worker_pids"])
    assert pool.check(fake_task(1), "ok").verdict is Verdict.OK


@pytest.mark.prover
@requires_coq
def test_ray_pool_real_coq_verdicts_and_clean_close(cluster, tiny_suite):
    tasks = load_task_list(tiny_suite)
    requests = [(f"{t.id}/{p}", t, t.reference_proof if p == "ref" else "Proof. Admitted.")
                for t in tasks for p in ("ref", "cheat")]
    # The same verdicts as the local engine gives (tests/test_pool.py): tiny.wrong_ref's reference proof is wrong.
    expected = {rid: (Verdict.CHEATING if rid.endswith("cheat") else
                      Verdict.FAIL if rid.startswith("tiny.wrong_ref") else Verdict.OK) for rid, _, _ in requests}
    pool = RayVerifierPool(("coq",), workers_per_actor=2)
    info = ray.get(pool.actors("coq")[0].ready.remote())
    try:
        got = {r.request_id: r.verdict for r in pool.imap_unordered(requests)}
        stats = pool.stats()
    finally:
        pool.close()
    assert got == expected and stats["harness_failures"] == {}
    assert stats["completed"] == len(requests)
    deadline = time.monotonic() + 30
    pids = [info["pid"], *info["worker_pids"]]
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.1)
    assert not any(_alive(p) for p in pids), "close() must leave no actor or worker process"


@pytest.mark.prover
@requires_coq
def test_eval_on_the_ray_engine_gives_the_local_engines_totals(cluster, tiny_suite, tmp_path):
    """``proofgym eval --engine ray`` runs the same episodes through the same code path: same rows, same totals."""
    from proofgym.training.evaluate import ReferenceAgent, read_results, run_eval

    tasks = load_task_list(tiny_suite)
    local = run_eval(tasks, agent=ReferenceAgent(), k=1, out=tmp_path / "local.jsonl", workers=1, progress=False)
    on_ray = run_eval(tasks, agent=ReferenceAgent(), k=1, out=tmp_path / "ray.jsonl", workers=2, engine="ray",
                      progress=False)
    assert on_ray.verdicts == local.verdicts == {"OK": len(tasks) - 1, "FAIL": 1}  # tiny.wrong_ref
    assert on_ray.harness_failures == local.harness_failures == 0
    rows = {r["task_id"]: r["verdict"] for r in read_results(tmp_path / "ray.jsonl")}
    assert rows == {r["task_id"]: r["verdict"] for r in read_results(tmp_path / "local.jsonl")}
