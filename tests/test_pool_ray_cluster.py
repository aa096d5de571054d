"""The Ray engine past one machine: a Ray cluster of several nodes (``ray.cluster_utils.Cluster``, on this
machine, every node on 127.0.0.1), each node with its own custom resource and one CPU, the real Coq verifier.

One actor per node and system, checks spread over the nodes, a training rank's checks answered on its own node
by the actors the launcher's pool started (shared by name), and a node removed in the middle of a batch: no
check lost, each answered exactly once, with the verdict Coq gives.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from proofgym.envs.proof_env import load_task_list
from proofgym.envs.types import Task, Verdict
from tests.conftest import requires_coq
from tests.test_faults import _wait_until
from tests.test_pool import _alive

ray = pytest.importorskip("ray", reason="the Ray engine needs the ray extra: pip install 'proofgym[ray]'")

from proofgym.envs.verifiers.ray_pool import RayVerifierPool  # noqa: E402 - after the importorskip

pytestmark = [pytest.mark.prover, requires_coq]

ROOT = Path(__file__).resolve().parents[1]

#: A bound on Ray's start-up and on a batch under load (~30 once timed out): waits, not speed thresholds.
START_BOUND_S = 300.0


@contextlib.contextmanager
def _loopback() -> Iterator[None]:
    """Nodes started here keep 127.0.0.1 as their address (see ``init_local_ray``: on Linux, Ray replaces a
    loopback node address with the machine's external one unless its single-machine switch is on)."""
    from ray._private import ray_constants

    saved = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved


def _add_node(cluster: Any, name: str) -> Any:
    with _loopback():
        return cluster.add_node(num_cpus=1, resources={name: 1}, node_ip_address="127.0.0.1")


@pytest.fixture(scope="module")
def ray_cluster():
    """A head node without CPUs (the driver's: no verifier there) and nodes ``node_a`` and ``node_b``, one CPU each."""
    from ray.cluster_utils import Cluster

    paths = os.pathsep.join([str(ROOT), str(ROOT.parent), os.environ.get("PYTHONPATH", "")]).strip(os.pathsep)
    with _loopback():
        cluster = Cluster(initialize_head=True, head_node_args={
            "num_cpus": 0, "node_ip_address": "127.0.0.1", "include_dashboard": False, "dashboard_host": "127.0.0.1"})
    try:
        cluster.nodes = {name: _add_node(cluster, name) for name in ("node_a", "node_b")}
        cluster.wait_for_nodes(timeout=START_BOUND_S)
        with _loopback():
            # ranks (Ray tasks below) import this module, as the driver does
            ray.init(address=cluster.address, logging_level="warning", log_to_driver=False,
                     runtime_env={"env_vars": {"PYTHONPATH": paths}})
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


def _node_id(cluster: Any, name: str) -> str:
    return cluster.nodes[name].node_id


def _requests(tasks: list[Task], copies: int = 1) -> list[tuple[str, Task, str]]:
    return [(f"{t.id}/{p}/{c}", t, t.reference_proof if p == "ref" else "Proof. Admitted.")
            for t in tasks for p in ("ref", "cheat") for c in range(copies)]


def _expected(request_id: str) -> Verdict:
    """Coq's one verdict for each request: the reference proofs check but tiny.wrong_ref's; Admitted is a cheat."""
    task_id, proof, _ = request_id.split("/")
    if proof == "cheat":
        return Verdict.CHEATING
    return Verdict.FAIL if task_id == "tiny.wrong_ref" else Verdict.OK


def _per_node(stats: dict[str, Any]) -> dict[str, int]:
    return {a["node_id"]: int(a.get("completed", 0)) for a in stats["per_actor"]}


def test_one_actor_per_node_and_checks_spread_over_the_nodes(ray_cluster, tiny_suite):
    a, b = _node_id(ray_cluster, "node_a"), _node_id(ray_cluster, "node_b")
    requests = _requests(load_task_list(tiny_suite), copies=2)
    pool = RayVerifierPool(("coq",), workers_per_actor=1, verdict_cache=0, start_timeout_s=START_BOUND_S)
    try:
        placed = ray.get([h.ready.remote() for h in pool.actors("coq")], timeout=START_BOUND_S)
        got = Counter()
        verdicts = {}
        for r in pool.imap_unordered(requests):
            got[r.request_id] += 1
            verdicts[r.request_id] = r.verdict
        stats = pool.stats()
    finally:
        pool.close()
    # the head node has no CPUs: one actor on each of the two others
    assert sorted(info["node_id"] for info in placed) == sorted([a, b])
    assert got == Counter({rid: 1 for rid, _, _ in requests})
    assert verdicts == {rid: _expected(rid) for rid, _, _ in requests}
    assert stats["harness_failures"] == {}
    answered = _per_node(stats)
    assert set(answered) == {a, b} and sum(answered.values()) == len(requests), answered
    assert all(n > 0 for n in answered.values()), f"the checks did not spread over both nodes: {answered}"


def _rank(suite: str, share: str) -> dict[str, Any]:
    """A training rank (a Ray task on its node): a pool on the launcher's shared actors, routed to its own node."""
    pool = RayVerifierPool(("coq",), share=share, node="local", verdict_cache=0, start_timeout_s=START_BOUND_S)
    try:
        results = pool.check_batch(_requests(load_task_list(suite)))
        stats = pool.stats()
    finally:
        pool.close()
    return {"node_id": ray.get_runtime_context().get_node_id(),
            "results": [(r.request_id, r.verdict, r.worker) for r in results],
            "owned": [a["owned"] for a in stats["per_actor"]]}


def test_a_rank_checks_on_its_own_nodes_shared_actor(ray_cluster, tiny_suite):
    """The launcher's pool starts one actor per node under a shared name; each rank's pool (``share=``, ``node=
    "local"``) uses those actors, not its own, and its checks are answered by its own node's actor."""
    nodes = {name: _node_id(ray_cluster, name) for name in ("node_a", "node_b")}
    tasks = load_task_list(tiny_suite)
    launcher = RayVerifierPool(("coq",), workers_per_actor=1, share="test-ranks", verdict_cache=0,
                               start_timeout_s=START_BOUND_S)
    try:
        rank = ray.remote(_rank)
        runs = {name: rank.options(num_cpus=0, resources={name: 0.01}).remote(str(tiny_suite), "test-ranks")
                for name in nodes}
        out = {name: ray.get(ref, timeout=START_BOUND_S) for name, ref in runs.items()}
        answered = _per_node(launcher.stats())
        # the ranks' pools closed: the actors are the launcher's, and still answer it
        after = launcher.check(tasks[0], tasks[0].reference_proof).verdict
    finally:
        launcher.close()
    n = 2 * len(tasks)
    for name, node_id in nodes.items():
        run = out[name]
        assert run["node_id"] == node_id  # the rank ran on its node
        assert run["owned"] == [False, False], "a rank's pool must use the launcher's actors, not start its own"
        assert {rid: verdict for rid, verdict, _ in run["results"]} == {rid: _expected(rid) for rid, _, _ in
                                                                        _requests(tasks)}
        foreign = [w for _, _, w in run["results"] if not w.startswith(f"ray:{node_id[:8]}:")]
        assert not foreign, f"checks of the rank on {name} answered on another node: {foreign}"
    # each node's actor answered its own rank's checks, and only those
    assert answered == {node_id: n for node_id in nodes.values()}, answered
    assert after is Verdict.OK


def test_a_node_removed_mid_batch_loses_no_check(ray_cluster, tiny_suite):
    """Node C leaves the cluster while it holds checks: each is sent to node A or B and answered exactly once,
    with Coq's verdict. C's verifier worker is stopped (SIGSTOP) before the batch, so that the checks C gets
    are still in flight on C when it goes, whatever the machine's load."""
    node_c = _add_node(ray_cluster, "node_c")
    c = node_c.node_id
    requests = _requests(load_task_list(tiny_suite), copies=2)
    pool = RayVerifierPool(("coq",), workers_per_actor=1, verdict_cache=0, start_timeout_s=START_BOUND_S)
    try:
        on_c = next(h for h in pool.actors("coq") if ray.get(h.ready.remote(), timeout=START_BOUND_S)["node_id"] == c)
        held = ray.get(on_c.ready.remote(), timeout=START_BOUND_S)["worker_pids"]
        assert held, "node C's actor has no verifier worker up"
        for pid in held:
            os.kill(pid, signal.SIGSTOP)
        stream = pool.imap_unordered(requests)
        results = [next(stream)]  # the batch is under way
        assert _wait_until(lambda: ray.get(on_c.stats.remote(), timeout=60)["pending"] > 0, START_BOUND_S), \
            "node C never received a check"
        ray_cluster.remove_node(node_c, allow_graceful=False)
        results.extend(stream)
        assert _wait_until(lambda: pool.stats()["actors_lost"] == 1, START_BOUND_S), "C's actor was never dropped"
        stats = pool.stats()
        later = pool.check(requests[0][1], requests[0][2]).verdict  # the pool goes on with A and B
    finally:
        pool.close()
    got = Counter(r.request_id for r in results)
    assert got == Counter({rid: 1 for rid, _, _ in requests}), "each check answered exactly once"
    assert {r.request_id: r.verdict for r in results} == {rid: _expected(rid) for rid, _, _ in requests}
    assert not [r for r in results if r.worker.startswith(f"ray:{c[:8]}:")], "C's stopped worker answered nothing"
    resent = [r for r in results if r.attempts == 2]
    assert resent and len(resent) == stats["retries"], (len(resent), stats["retries"])
    assert stats["harness_failures"] == {} and later is Verdict.OK
    assert [a["lost"] for a in stats["per_actor"] if a["node_id"] == c] == [True]
    assert _wait_until(lambda: not any(_alive(pid) for pid in held)), "node C's verifier worker outlived its node"
