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
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from proofgym.envs.proof_env import load_task_list
from proofgym.envs.types import Task, Verdict
from proofgym.http_guard import is_loopback_host
from tests.conftest import requires_coq
from tests.listeners import listeners
from tests.test_faults import _wait_until
from tests.test_pool import _alive

ray = pytest.importorskip("ray", reason="the Ray engine needs the ray extra: pip install 'proofgym[ray]'")

from proofgym.envs.errors import DependencyNotInstalled  # noqa: E402
from proofgym.envs.verifiers.pool.ray_engine import RayVerifierPool, _usable_nodes  # noqa: E402 - after the importorskip

ROOT = Path(__file__).resolve().parents[1]

#: A bound on Ray's start-up and on a batch under load (~30 once timed out): waits, not speed thresholds.
START_BOUND_S = 300.0


#: Tries at starting a node: on a loaded machine a node's raylet can give up on its own agents (below).
NODE_START_TRIES = 3


@contextlib.contextmanager
def _local_nodes() -> Iterator[None]:
    """Start nodes on 127.0.0.1, with generous bounds on their start.

    - On Linux, Ray replaces a loopback node address with the machine's external one unless its single-machine
      switch is on (see ``init_local_ray``): the switch is on while nodes start.
    - A new node waits a fixed 30 s for the GCS to list it (``ray._private.node``; its message names a setting it
      does not read), which a loaded machine overruns: the lookup it repeats gets :data:`START_BOUND_S`, and stops
      at once when the node's raylet has exited (it never registers then).
    - The raylet waits some 30 s for its dashboard agent to report its ports, then aborts
      (``WaitForDashboardAgentPorts``; ``RAY_agent_register_timeout_ms`` does not change that wait), and the full
      agent takes longer than that to import on a loaded machine: the agents run minimal (as without
      ``ray[default]``), which these tests do not miss (no dashboard, no metrics), and :func:`_add_node` tries again.
    """
    from ray._private import node as node_module
    from ray._private import ray_constants, services
    from ray._private import utils as ray_utils

    saved = (ray_constants.ENABLE_RAY_CLUSTER, services.get_node, node_module.Node.start_ray_processes,
             ray_utils.get_dashboard_dependency_error)
    get_node, start_ray_processes = saved[1], saved[2]
    starting: list[Any] = []

    def noted_start(self: Any, *args: Any, **kwargs: Any) -> Any:
        starting[:] = [self]
        return start_ray_processes(self, *args, **kwargs)

    def raylet_exited() -> bool:
        procs = starting[0].all_processes.get(ray_constants.PROCESS_TYPE_RAYLET, []) if starting else []
        return any(info.process.poll() is not None for info in procs)

    def patient_get_node(*args: Any, **kwargs: Any) -> Any:
        deadline = time.monotonic() + START_BOUND_S
        while True:
            try:
                return get_node(*args, **kwargs)
            except RuntimeError:
                if time.monotonic() > deadline or raylet_exited():
                    raise
                time.sleep(0.5)  # the node registers in its own time: ask again

    ray_constants.ENABLE_RAY_CLUSTER, services.get_node = False, patient_get_node
    node_module.Node.start_ray_processes = noted_start
    ray_utils.get_dashboard_dependency_error = lambda: ImportError("minimal agents for the test cluster")
    try:
        yield
    finally:
        (ray_constants.ENABLE_RAY_CLUSTER, services.get_node, node_module.Node.start_ray_processes,
         ray_utils.get_dashboard_dependency_error) = saved


def _add_node(cluster: Any, name: str | None = None, **node_args: Any) -> Any:
    """A node on 127.0.0.1 with one CPU and the custom resource ``name`` (``None``: the head, given ``node_args``).

    A start that fails (see :func:`_local_nodes`) leaves processes that no ``Node`` owns: they are ended and the
    node started again, up to :data:`NODE_START_TRIES` times.
    """
    from ray._private import node as node_module

    if name is not None:
        node_args = {"num_cpus": 1, "resources": {name: 1}, **node_args}
    init = node_module.Node.__init__

    def init_or_clean_up(self: Any, *args: Any, **kwargs: Any) -> None:
        try:
            init(self, *args, **kwargs)
        except Exception:
            with contextlib.suppress(Exception):
                self.kill_all_processes(check_alive=False, allow_graceful=False, wait=True)
            raise

    for attempt in range(1, NODE_START_TRIES + 1):
        node_module.Node.__init__ = init_or_clean_up
        try:
            with _local_nodes():
                node = cluster.add_node(wait=False, node_ip_address="127.0.0.1", **node_args)
            break
        except Exception:
            if attempt == NODE_START_TRIES:
                raise
        finally:
            node_module.Node.__init__ = init
    cluster._wait_for_node(node, timeout=START_BOUND_S)  # add_node's own wait is 30 s
    return node


def test_the_nodes_that_get_an_actor():
    """Alive nodes with CPUs, narrowed by id (``nodes``) or by a custom resource (``node_resource``), from what
    ``ray.nodes()`` says; none left is an error that says where to look."""
    nodes = [{"NodeID": "head", "Alive": True, "Resources": {"node:__internal_head__": 1.0}},  # no CPUs
             {"NodeID": "a", "Alive": True, "Resources": {"CPU": 4.0, "verifier": 1.0}},
             {"NodeID": "b", "Alive": True, "Resources": {"CPU": 8.0}},
             {"NodeID": "gone", "Alive": False, "Resources": {"CPU": 2.0, "verifier": 1.0}}]
    assert _usable_nodes(nodes, None, None) == [("a", 4), ("b", 8)]
    assert _usable_nodes(nodes, None, "verifier") == [("a", 4)]
    assert _usable_nodes(nodes, ["b", "gone"], None) == [("b", 8)]
    with pytest.raises(DependencyNotInstalled, match="offering the resource 'verifier'.*ray status"):
        _usable_nodes(nodes, ["b"], "verifier")


@pytest.fixture(scope="module")
def ray_cluster():
    """A head node without CPUs (the driver's: no verifier there) and nodes ``node_a`` and ``node_b``, one CPU each."""
    from ray.cluster_utils import Cluster

    paths = os.pathsep.join([str(ROOT), str(ROOT.parent), os.environ.get("PYTHONPATH", "")]).strip(os.pathsep)
    cluster = Cluster()
    try:
        _add_node(cluster, num_cpus=0, include_dashboard=False, dashboard_host="127.0.0.1")
        cluster.nodes = {name: _add_node(cluster, name) for name in ("node_a", "node_b")}
        cluster.wait_for_nodes(timeout=START_BOUND_S)
        with _local_nodes():
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


def _per_node(stats: dict[str, Any], system: str = "coq") -> dict[str, int]:
    """Checks each node's ``system`` actor answered."""
    return {a["node_id"]: int(a.get("completed", 0)) for a in stats["per_actor"] if a["system"] == system}


@pytest.mark.prover
@requires_coq
def test_one_actor_per_node_and_checks_spread_over_the_nodes(ray_cluster, tiny_suite):
    a, b = _node_id(ray_cluster, "node_a"), _node_id(ray_cluster, "node_b")
    requests = _requests(load_task_list(tiny_suite))
    pool = RayVerifierPool(("coq", "dafny"), workers_per_actor=1, verdict_cache=0, start_timeout_s=START_BOUND_S)
    try:
        placed = {(info["node_id"], system) for system in ("coq", "dafny")
                  for info in ray.get([h.ready.remote() for h in pool.actors(system)], timeout=START_BOUND_S)}
        got = Counter()
        verdicts = {}
        for r in pool.imap_unordered(requests):
            got[r.request_id] += 1
            verdicts[r.request_id] = r.verdict
        stats = pool.stats()
        found = listeners(os.getpid())  # the three nodes' servers, the actors and their workers are all up
    finally:
        pool.close()
    assert {"gcs_server", "raylet"} <= {name for _, _, name in found}, found  # the scan does see Ray's servers
    beyond = [entry for entry in found if not is_loopback_host(entry[0])]
    assert not beyond, f"the test cluster listens beyond loopback: {beyond}"
    # the head node has no CPUs: one actor per system on each of the two others (the Dafny actors get no check:
    # their placement is what is asserted)
    assert placed == {(node, system) for node in (a, b) for system in ("coq", "dafny")}
    assert len(stats["per_actor"]) == 4
    assert got == Counter({rid: 1 for rid, _, _ in requests})
    assert verdicts == {rid: _expected(rid) for rid, _, _ in requests}
    assert stats["harness_failures"] == {}
    answered = _per_node(stats)
    assert set(answered) == {a, b} and sum(answered.values()) == len(requests), answered
    assert all(n > 0 for n in answered.values()), f"the checks did not spread over both nodes: {answered}"


def _rank(suite: str, share: str, node: str = "local") -> dict[str, Any]:
    """A training rank: a pool on the launcher's shared actors (``share``), routed to ``node`` (its own)."""
    pool = RayVerifierPool(("coq",), share=share, node=node, verdict_cache=0, start_timeout_s=START_BOUND_S)
    try:
        results = pool.check_batch(_requests(load_task_list(suite)))
        stats = pool.stats()
    finally:
        pool.close()
    return {"node_id": ray.get_runtime_context().get_node_id(),
            "results": [(r.request_id, r.verdict, r.worker) for r in results],
            "owned": [a["owned"] for a in stats["per_actor"]]}


def _ranks_on_their_nodes(cluster: Any, suite: Path, share: str, run_rank: Any) -> dict[str, dict[str, Any]]:
    """Start the launcher's shared pool, run ``run_rank(node name, node id)`` for node_a and node_b, and check
    that each rank's checks were answered by its node's actor, the launcher's (the ranks started none)."""
    nodes = {name: _node_id(cluster, name) for name in ("node_a", "node_b")}
    tasks = load_task_list(suite)
    launcher = RayVerifierPool(("coq",), workers_per_actor=1, share=share, verdict_cache=0,
                               start_timeout_s=START_BOUND_S)
    try:
        out = {name: run_rank(name, node_id) for name, node_id in nodes.items()}
        answered = _per_node(launcher.stats())
        # the ranks' pools are closed: the actors are the launcher's, and still answer it
        after = launcher.check(tasks[0], tasks[0].reference_proof).verdict
    finally:
        launcher.close()
    for name, node_id in nodes.items():
        run = out[name]
        assert run["owned"] == [False, False], "a rank's pool must use the launcher's actors, not start its own"
        assert {rid: verdict for rid, verdict, _ in run["results"]} == {rid: _expected(rid) for rid, _, _ in
                                                                        _requests(tasks)}
        foreign = [w for _, _, w in run["results"] if not w.startswith(f"ray:{node_id[:8]}:")]
        assert not foreign, f"checks of the rank on {name} answered on another node: {foreign}"
    # each node's actor answered its own rank's checks, and only those
    assert answered == {node_id: 2 * len(tasks) for node_id in nodes.values()}, answered
    assert after is Verdict.OK
    return out


@pytest.mark.prover
@requires_coq
def test_checks_for_a_node_are_answered_by_its_shared_actor(ray_cluster, tiny_suite):
    """The launcher's pool starts one actor per node under a shared name; a second pool with that name and
    ``node=<a node id>`` (here in this process) uses those actors, and that node's actor answers all its checks."""
    _ranks_on_their_nodes(ray_cluster, tiny_suite, "test-node",
                          lambda _name, node_id: _rank(str(tiny_suite), "test-node", node_id))


@pytest.mark.prover
@requires_coq
@pytest.mark.slow  # two more Ray workers, one per node: about a minute more on a loaded machine
def test_a_rank_on_a_node_checks_on_that_nodes_actor(ray_cluster, tiny_suite):
    """Ranks as Ray tasks placed on node_a and node_b by their resources, each with ``node="local"``."""
    rank = ray.remote(_rank)

    def on_node(name: str, _node_id: str) -> dict[str, Any]:
        return ray.get(rank.options(num_cpus=0, resources={name: 0.01}).remote(str(tiny_suite), "test-ranks"),
                       timeout=START_BOUND_S)

    out = _ranks_on_their_nodes(ray_cluster, tiny_suite, "test-ranks", on_node)
    assert {name: run["node_id"] for name, run in out.items()} == {
        name: _node_id(ray_cluster, name) for name in ("node_a", "node_b")}  # each rank ran on its node


@pytest.mark.prover
@requires_coq
def test_a_node_removed_mid_batch_loses_no_check(ray_cluster, tiny_suite):
    """Node C leaves the cluster while it holds checks: each is sent to node A or B and answered exactly once,
    with Coq's verdict. C's verifier worker is stopped (SIGSTOP) before the batch, so that the checks C gets
    are still in flight on C when it goes, whatever the machine's load. A pool routed to C (``node=``, on the same
    shared actors) goes on with the others too."""
    node_c = _add_node(ray_cluster, "node_c")
    c = node_c.node_id
    requests = _requests(load_task_list(tiny_suite), copies=2)
    task, proof = requests[0][1], requests[0][2]
    pool = RayVerifierPool(("coq",), workers_per_actor=1, verdict_cache=0, share="test-removal",
                           start_timeout_s=START_BOUND_S)
    pinned = RayVerifierPool(("coq",), share="test-removal", node=c, verdict_cache=0, start_timeout_s=START_BOUND_S)
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
        later = pool.check(task, proof).verdict  # the pool goes on with A and B
        moved = pinned.check_batch([("moved", task, proof)])[0]
    finally:
        pinned.close()
        pool.close()
        if node_c in ray_cluster.worker_nodes:  # the test failed before C left: the other tests expect A and B
            ray_cluster.remove_node(node_c, allow_graceful=False)
    got = Counter(r.request_id for r in results)
    assert got == Counter({rid: 1 for rid, _, _ in requests}), "each check answered exactly once"
    assert {r.request_id: r.verdict for r in results} == {rid: _expected(rid) for rid, _, _ in requests}
    assert not [r for r in results if r.worker.startswith(f"ray:{c[:8]}:")], "C's stopped worker answered nothing"
    resent = [r for r in results if r.attempts == 2]
    assert resent and len(resent) == stats["retries"], (len(resent), stats["retries"])
    assert stats["harness_failures"] == {} and later is Verdict.OK
    assert [a["lost"] for a in stats["per_actor"] if a["node_id"] == c] == [True]
    assert moved.verdict is Verdict.OK and not moved.worker.startswith(f"ray:{c[:8]}:"), moved
    assert _wait_until(lambda: not any(_alive(pid) for pid in held)), "node C's verifier worker outlived its node"
