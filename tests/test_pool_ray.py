"""The Ray engine of the verifier pool, on a local Ray cluster on this machine (127.0.0.1 only, no dashboard).

Same interface as the local engine: completion order, request ids, routing by context, an actor
killed mid-check is retried once, and close() leaves no process behind.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest

from proofgym.envs.proof_env import load_task_list
from proofgym.envs.rewards import RewardMap
from proofgym.envs.types import Verdict
from tests.conftest import requires_coq
from tests.test_faults import _wait_until
from tests.test_pool import FakeVerifier, _alive, fake_task

ray = pytest.importorskip("ray", reason="the Ray engine needs the ray extra: pip install 'proofgym[ray]'")

from proofgym.envs.verifiers.pool import Boundary  # noqa: E402 - after the importorskip
from proofgym.envs.verifiers.pool.ray_engine import RayVerifierPool, init_local_ray  # noqa: E402 - after the importorskip

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def cluster():
    # Workers import this test module (for FakeVerifier) as the driver does.
    paths = os.pathsep.join([str(ROOT), str(ROOT.parent), os.environ.get("PYTHONPATH", "")]).strip(os.pathsep)
    init_local_ray(num_cpus=2, logging_level="warning", log_to_driver=False,
                   runtime_env={"env_vars": {"PYTHONPATH": paths}})  # on 127.0.0.1 only
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def fake_ray_pool(cluster):
    pool = RayVerifierPool(("coq",), workers_per_actor=2, verifier_factory=FakeVerifier)
    yield pool
    pool.close()


# Run in a fresh interpreter: the pool must start Ray itself (this module's cluster is already up).
_LISTENERS_SCRIPT = textwrap.dedent("""
    import json, os, sys
    from proofgym.envs.verifiers.pool.ray_engine import RayVerifierPool
    from tests.listeners import listeners
    from tests.test_pool import fake_task

    pool = RayVerifierPool(("coq",), workers_per_actor=1, verifier_factory="tests.test_pool:FakeVerifier",
                           init_kwargs={"num_cpus": 1, "logging_level": "warning", "log_to_driver": False,
                                        "runtime_env": {"env_vars": {"PYTHONPATH": sys.argv[1]}}})
    verdict = pool.check(fake_task(0), "ok").verdict.value
    found = [list(entry) for entry in listeners(os.getpid())]
    pool.close()
    print(json.dumps({"verdict": verdict, "listeners": found}))
""")



def test_a_ray_instance_the_pool_starts_listens_on_loopback_only():
    """By default Ray binds GCS, raylet, workers and agents on every interface: anyone on the network could
    submit jobs, i.e. run code as the operator. The instance the pool starts listens on 127.0.0.1 only."""
    from proofgym.http_guard import is_loopback_host

    paths = os.pathsep.join([str(ROOT), str(ROOT.parent)])
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONPATH"] = paths
    proc = subprocess.run([sys.executable, "-c", _LISTENERS_SCRIPT, paths], capture_output=True, text=True,
                          timeout=300, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["verdict"] == "OK"
    names = {name for _, _, name in out["listeners"]}
    assert {"gcs_server", "raylet"} <= names, out  # the scan does see Ray's own servers
    beyond = [entry for entry in out["listeners"] if not is_loopback_host(entry[0])]
    assert not beyond, f"Ray ports listening beyond loopback: {beyond}"


def test_ray_pool_completion_order_routing_and_harness_failures(fake_ray_pool, tmp_path):
    pool = fake_ray_pool
    # "slow" finishes only once the test has received "fast": the order is the test's, not the machine's load.
    release = tmp_path / "release"
    results = pool.imap_unordered([("slow", fake_task(0), f"wait:{release}"), ("fast", fake_task(1, "b"), "ok")])
    first = next(results)
    release.touch()
    second = next(results)
    assert [first.request_id, second.request_id] == ["fast", "slow"]
    assert second.verdict is Verdict.OK
    results = [pool.check_batch([(fake_task(i, f"ctx{i % 2}"), "ok")])[0] for i in range(6)]
    by_context: dict[int, set[str]] = {}
    for i, res in enumerate(results):
        assert res.worker.startswith("ray:") and res.verdict is Verdict.OK
        by_context.setdefault(i % 2, set()).add(res.result.messages[0])
    assert all(len(pids) == 1 for pids in by_context.values()), "a context must stay on its warm worker"
    broken = pool.check_batch([(fake_task(9), "raise")])[0]
    assert broken.harness_failure and broken.failure.boundary is Boundary.VERIFIER and RewardMap()(broken.result) is None


def test_ray_pool_schedules_inside_a_node_as_the_local_pool_does(cluster):
    """The default is the local engine's (spill_at=0, where the Ray engine had 2), in the driver and in the actor's
    pool: a GRPO-shaped batch (checks grouped by context, a load 100x a warm check) loads each context once on the
    node, with both of the actor's workers working (test_pool's test of the same batch on the local engine). The
    actor's pool has no verdict cache of its own: with the driver's off, repeats are checked (bench.py's throughput
    rows count on it)."""
    requests = [(f"{c}/{k}", fake_task(4 * c + k, context=f"ctx{c}"), "load:1.0:0.01") for c in range(4) for k in range(4)]
    pool = RayVerifierPool(("coq",), workers_per_actor=2, verifier_factory=FakeVerifier, verdict_cache=0)
    try:
        assert pool.spill_at == 0
        results = pool.check_batch(requests)
        actor = pool.stats()["per_actor"][0]
    finally:
        pool.close()
    assert actor["spill_at"] == 0, actor
    assert actor["verdict_cache"] == {}, actor  # the driver's cache (off here) is the only one: every check ran
    assert actor["completed"] == len(requests), actor
    cold = Counter(r.request_id.split("/")[0] for r in results if r.result.messages[1] == "cold")
    assert cold == Counter({str(c): 1 for c in range(4)}), cold
    assert actor["context_loads"] == 4, actor
    assert len({r.result.messages[0] for r in results}) == 2, "both workers should have worked"


def test_ray_actor_killed_mid_check_is_retried_once(fake_ray_pool, tmp_path):
    pool = fake_ray_pool
    info = ray.get(pool.actors("coq")[0].ready.remote())
    # The fake check says when it runs (tmp_path/started) and ends when told (tmp_path/release): the actor is
    # killed under a running check, and the retry ends only after the first attempt is gone.
    future = pool.submit(fake_task(0, "kill"), f"hold:{tmp_path}", request_id="victim")
    assert _wait_until(lambda: (tmp_path / "started").exists()), "the check never started on the actor"
    os.kill(info["pid"], signal.SIGKILL)
    assert _wait_until(lambda: not _alive(info["pid"])), "the actor outlived SIGKILL"
    (tmp_path / "release").touch()
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
    from proofgym.training.evaluate import EvalOptions, ReferenceAgent, read_results, run_eval

    tasks = load_task_list(tiny_suite)
    local = run_eval(tasks, agent=ReferenceAgent(), out=tmp_path / "local.jsonl",
                     options=EvalOptions(k=1, workers=1, progress=False))
    on_ray = run_eval(tasks, agent=ReferenceAgent(), out=tmp_path / "ray.jsonl",
                      options=EvalOptions(k=1, workers=2, engine="ray", progress=False))
    assert on_ray.verdicts == local.verdicts == {"OK": len(tasks) - 1, "FAIL": 1}  # tiny.wrong_ref
    assert on_ray.harness_failures == local.harness_failures == 0
    rows = {r["task_id"]: r["verdict"] for r in read_results(tmp_path / "ray.jsonl")}
    assert rows == {r["task_id"]: r["verdict"] for r in read_results(tmp_path / "local.jsonl")}
