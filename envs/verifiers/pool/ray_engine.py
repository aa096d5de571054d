"""The verifier pool on Ray: one actor per node and system, each holding a local pool of warm workers.

Why this shape: a context is warm in a process, so it must stay on one machine; one actor per
(node, system) owns that machine's warm verifier processes (a :class:`LocalVerifierPool`, which
already routes by context inside the node, retries a check whose worker died, and restarts
workers). The driver routes each check to an actor by the same context key, so a context stays on
the node that has it warm, and spills to an idle actor only when the warm ones are saturated. Inside a node,
the actor's local pool schedules as the local engine does by default (``spill_at=0``: an idle worker takes a
queued check by what its context's load would cost, see :meth:`LocalVerifierPool._next_job`).

The interface is :class:`~proofgym.envs.verifiers.pool.VerifierPool`'s: the same ``submit``,
``imap_unordered``, ``check_many``, ``check_batch`` and ``as_verifier`` as the local engine, so
``proofgym eval``, the reward functions and the verifier service switch engines with one argument.

Faults: an actor that dies (process killed) is restarted by Ray (``max_restarts=-1``) on its node; a
check that was on it is sent again once, then is a ``worker_died`` harness failure. While an actor is
down, new checks go to the other nodes' actors. A node that leaves the cluster (``ray stop`` there, a
lost machine) takes its actor with it for good: the pool drops that actor once Ray reports the node
dead, and the checks it held are sent to the other nodes, each answered exactly once.

Nodes and ranks: ``nodes``/``node_resource`` say which nodes get an actor; ``node`` (``"local"``: the
caller's node) sends every check to that node's actor while it is up, so that a training rank checks
on its own node; ``share`` names the actors in the cluster so that every pool given the same name
(one per rank) uses the same actor per node and system instead of starting its own. See
``docs/scale.md`` ("Ray across machines").

Needs the ``ray`` extra (``pip install 'proofgym[ray]'``). Unless told to join a cluster (an
``address``, e.g. ``"auto"`` for one started with ``ray start`` here, or ``$RAY_ADDRESS``), it
starts a local Ray instance and shuts it down on :meth:`close`. That instance listens on
127.0.0.1 only (GCS, raylet, object manager, workers, agents; no dashboard): by default Ray binds
its ports on every interface, where anyone on the network could submit jobs to it, i.e. run code
as the operator. See :func:`init_local_ray`.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import logging
import os
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Iterable, Mapping
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass
from typing import Any

from proofgym.envs.errors import DependencyNotInstalled
from proofgym.envs.types import Task
from proofgym.envs.verifiers.pool.base import (
    DEFAULT_CONTEXT_ALLOWANCE_S,
    Boundary,
    HarnessFailure,
    PoolClosed,
    PoolResult,
    VerifierPool,
    routing_key,
)
from proofgym.envs.verifiers.pool.cache import DEFAULT_VERDICT_CACHE_ENTRIES
from proofgym.envs.verifiers.pool.local import LocalVerifierPool, VerifierFactory

__all__ = ["SHARED_NAMESPACE", "RayVerifierPool", "init_local_ray"]

logger = logging.getLogger(__name__)


def init_local_ray(**init_kwargs: Any) -> None:
    """Start a new Ray instance on this machine whose every port listens on 127.0.0.1 only.

    Why it takes more than ``_node_ip_address="127.0.0.1"``: on Linux, Ray replaces a loopback node
    address with the machine's external one unless its single-machine mode is on (the switch behind
    ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``), and its servers bind to the node address. So the switch
    is turned on for the start-up only. ``init_kwargs`` (e.g. ``num_cpus``) override the defaults.
    """
    ray = _ray()
    from ray._private import ray_constants

    kwargs = {"include_dashboard": False, "dashboard_host": "127.0.0.1", "_node_ip_address": "127.0.0.1",
              **init_kwargs}
    saved = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        ray.init(address="local", **kwargs)
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved


def _usable_nodes(nodes: list[dict[str, Any]], wanted: Iterable[str] | None,
                  resource: str | None) -> list[tuple[str, int]]:
    """(node id, CPUs) of the alive nodes with CPUs that verifier actors may use, from ``ray.nodes()``."""
    ids = set(wanted) if wanted is not None else None
    usable = [(n["NodeID"], int(n["Resources"]["CPU"])) for n in nodes
              if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) > 0
              and (ids is None or n["NodeID"] in ids) and (resource is None or n["Resources"].get(resource, 0) > 0)]
    if not usable:
        which = " offering the resource " + repr(resource) if resource else ""
        raise DependencyNotInstalled(f"the Ray cluster has no alive node with CPUs{which} to run verifiers on "
                                     "(see `ray status`)")
    return usable


def _gone(ray: Any, node_id: str, handle: Any) -> str:
    """Why an actor never comes back ('' while it may): its node left the cluster, or Ray gave it up
    (killed for good, e.g. by the pool that created a shared actor, or not placeable on its node)."""
    if not any(n.get("NodeID") == node_id and n.get("Alive") for n in ray.nodes()):
        return "its node left the cluster"
    try:
        from ray._private.state import actors as actor_table  # Ray's own debugging view of the GCS table

        state = actor_table(actor_id=handle._actor_id.hex()).get("State")
    except Exception:  # noqa: BLE001 - a Ray without this view: the node's state decides alone
        return ""
    return "Ray reports the actor dead for good" if state == "DEAD" else ""


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise DependencyNotInstalled(
            "the Ray engine needs Ray: pip install 'proofgym[ray]' (or: pip install 'ray[default]')"
        ) from None
    return ray


class VerifierActor:
    """A Ray actor (async) that owns one node's warm verifier workers for one system.

    Plain class so that it can be tested and documented without Ray; :func:`_actor_class` wraps it
    with ``ray.remote`` on first use.
    """

    def __init__(self, workers: int, verifier_kwargs: dict[str, Any], system_kwargs: dict[str, dict[str, Any]],
                 verifier_factory: VerifierFactory | str | None, spill_at: int, measure_cpu: bool = False,
                 context_allowance_s: float = DEFAULT_CONTEXT_ALLOWANCE_S, owner: str = "") -> None:
        self.owner = owner  # the pool that created this actor (a shared actor's other pools only use it)
        self.pool = LocalVerifierPool(workers, verifier_kwargs=verifier_kwargs, system_kwargs=system_kwargs,
                                      verifier_factory=verifier_factory, spill_at=spill_at, measure_cpu=measure_cpu,
                                      context_allowance_s=context_allowance_s,
                                      # the driver bounds what is in flight, and its verdict cache answers repeats
                                      # (or, off, every check must run: a second cache here would answer them)
                                      max_pending=1 << 30, verdict_cache=0)

    def ready(self) -> dict[str, Any]:
        import ray

        return {"pid": os.getpid(), "node_id": ray.get_runtime_context().get_node_id(),
                "worker_pids": self.pool.worker_pids(), "workers": self.pool.workers, "owner": self.owner}

    async def check(self, task: Task, proof: str, request_id: Any) -> PoolResult:
        return await asyncio.wrap_future(self.pool.submit(task, proof, request_id=request_id, block=False))

    def stats(self) -> dict[str, Any]:
        return {**self.pool.stats(), "pid": os.getpid(), "spill_at": self.pool.spill_at}

    def shutdown(self) -> bool:
        self.pool.close()
        return True


_ACTOR_CLASS: Any = None


def _actor_class() -> Any:
    global _ACTOR_CLASS
    if _ACTOR_CLASS is None:
        _ACTOR_CLASS = _ray().remote(VerifierActor)
    return _ACTOR_CLASS


@dataclass(eq=False)
class _Actor:
    handle: Any
    node_id: str
    system: str
    index: int
    workers: int
    load: int = 0
    pid: int = 0
    down_since: float = 0.0  # when a call on it last failed; 0 once it answers again
    lost: bool = False  # gone for good (its node left the cluster, or Ray gave it up): never chosen again
    owned: bool = True  # this pool created it (a shared actor another pool created is only used here)
    watched: bool = False  # a thread waits for it to answer again (or for its node to be reported dead)


@dataclass(eq=False)
class _RayJob:
    request_id: Any
    task: Task
    proof: str
    key: str
    future: Future[PoolResult]
    submitted: float
    attempts: int = 0
    unavailable_since: float = 0.0
    sent_while_down: bool = False


#: How long a check waits for a restarting actor before it is a harness failure.
UNAVAILABLE_GRACE_S = 300.0

#: Across nodes, with ``spill_at=0``: the driver sends a context's checks to the actor that has it warm until
#: that actor holds this many per worker, then to an idle actor. The driver has no queue of its own to take
#: from at idle time (each check goes to an actor when it is submitted), so this is the one rule left at
#: submit time; inside the node, the actor's pool decides at idle time.
DRIVER_SPILL_PER_WORKER = 2

#: The Ray namespace of shared actors (``share=``): ``{share}:{system}:{node id}``.
SHARED_NAMESPACE = "proofgym"


class RayVerifierPool(VerifierPool):
    """:class:`VerifierPool` on Ray actors; see the module docstring.

    Args:
        systems: Systems to start actors for now (others get actors on first use).
        workers_per_actor: Worker processes per actor (default: the node's CPUs / number of systems).
        address: Ray cluster to join (``"auto"``: one started with ``ray start`` on this machine). ``None``
            and no ``$RAY_ADDRESS``: a new local instance on 127.0.0.1 only (:func:`init_local_ray`).
        init_kwargs: Extra ``ray.init`` arguments when this pool starts or joins the cluster (e.g. ``num_cpus``).
        verifier_kwargs, system_kwargs, verifier_factory: As for :class:`LocalVerifierPool`.
        max_pending: Most unfinished checks before :meth:`submit` blocks (default 4 per worker process).
        max_retries: Times a check is sent again after its actor died under it.
        spill_at: As for :class:`LocalVerifierPool`, in each actor's pool: 0 (the default, the local engine's)
            decides where a check runs when a worker is idle; N > 0 adds the spill at submit. Across nodes the
            driver spills a warm actor's checks to an idle actor once it holds ``spill_at`` (0:
            :data:`DRIVER_SPILL_PER_WORKER`) checks per worker.
        actor_num_cpus: CPUs each actor reserves in Ray's scheduler. The default 0 lets a trainer on
            the same cluster keep its reservations; set it to ``workers_per_actor`` on verifier-only nodes.
        nodes: Node ids to use (default: every alive node with CPUs).
        node_resource: Use only the nodes that offer this custom resource (``ray start --resources
            '{"verifier": 1}'``), e.g. to keep verifiers off the GPU nodes.
        node: Send every check to the actor on this node while it is up (``"local"``: the node this process
            runs on, ``ray.get_runtime_context().get_node_id()``), so that a rank checks on its own node; the
            other nodes' actors answer only while it is down or lost. ``None`` (the default): by context and load
            over all nodes. A node with no actor of the pool (``"local"`` on a node without CPUs) routes as ``None``.
        share: A name for this pool's actors in the cluster: every pool with the same ``share`` uses the same
            actor per node and system (the first pool creates it with its settings; it lives as long as that pool,
            whose :meth:`close` ends it; the others' ``close`` leaves it). Give each training rank's pool the
            launcher's ``share``, ``nodes``/``node_resource`` and ``node="local"``: the ranks of a node then share
            that node's warm verifiers.
        start_timeout_s: How long to wait for the actors' workers to come up.
        measure_cpu, context_allowance_s: As for :class:`LocalVerifierPool` (each actor's local pool enforces
            the deadline).
    """

    engine = "ray"

    def __init__(
        self,
        systems: Iterable[str] = ("coq",),
        *,
        workers_per_actor: int | None = None,
        address: str | None = None,
        init_kwargs: Mapping[str, Any] | None = None,
        verifier_kwargs: Mapping[str, Any] | None = None,
        system_kwargs: Mapping[str, Mapping[str, Any]] | None = None,
        verifier_factory: VerifierFactory | str | None = None,
        max_pending: int | None = None,
        max_retries: int = 1,
        spill_at: int = 0,
        actor_num_cpus: float = 0,
        nodes: Iterable[str] | None = None,
        node_resource: str | None = None,
        node: str | None = None,
        share: str | None = None,
        start_timeout_s: float = 300.0,
        measure_cpu: bool = False,
        context_allowance_s: float = DEFAULT_CONTEXT_ALLOWANCE_S,
        verdict_cache: int = DEFAULT_VERDICT_CACHE_ENTRIES,
    ) -> None:
        ray = _ray()
        self._owns_ray = False
        if not ray.is_initialized():
            if address is None and not os.environ.get("RAY_ADDRESS"):
                init_local_ray(**dict(init_kwargs or {}))
            else:  # joining the user's cluster: its network settings are the user's
                ray.init(address=address, include_dashboard=False, **dict(init_kwargs or {}))
            self._owns_ray = True
        self._systems = tuple(dict.fromkeys(systems))
        try:
            self._nodes = _usable_nodes(ray.nodes(), nodes, node_resource)
            if node not in (None, "local") and node not in {n for n, _ in self._nodes}:
                raise ValueError(f"node {node!r} gets no verifier actor in this pool (its nodes: "
                                 f"{', '.join(n for n, _ in self._nodes)})")
        except Exception:
            if self._owns_ray:
                ray.shutdown()
            raise
        self._node = ray.get_runtime_context().get_node_id() if node == "local" else node
        self._share = share
        self._owner = f"{os.getpid()}:{id(self)}:{time.time_ns()}"
        self._stop = threading.Event()
        self._workers_per_actor = workers_per_actor
        self._verifier_kwargs = dict(verifier_kwargs or {})
        self._system_kwargs = {k: dict(v) for k, v in (system_kwargs or {}).items()}
        self._factory = verifier_factory
        self._measure_cpu = bool(measure_cpu)
        self._context_allowance_s = float(context_allowance_s)
        self.max_retries = int(max_retries)
        self.spill_at = max(0, int(spill_at))
        self._actor_num_cpus = actor_num_cpus
        self._lock = threading.RLock()
        self._actors: dict[str, list[_Actor]] = {}
        self._affinity: OrderedDict[str, list[int]] = OrderedDict()
        self._counters: Counter[str] = Counter()
        self._verdicts: Counter[str] = Counter()
        self._harness: Counter[str] = Counter()
        self._inflight: dict[int, _RayJob] = {}
        self._job_ids = itertools.count()
        total_workers = 0
        with self._lock:
            for system in self._systems:
                total_workers += sum(a.workers for a in self._start_actors(system))
        super().__init__(max_pending=max_pending or 4 * max(1, total_workers), verdict_cache=verdict_cache)
        try:
            infos = ray.get([a.handle.ready.remote() for acts in self._actors.values() for a in acts],
                            timeout=start_timeout_s)
        except Exception:
            self.close()
            raise
        for actor, info in zip([a for acts in self._actors.values() for a in acts], infos, strict=True):
            actor.pid = int(info["pid"])
            actor.workers = int(info.get("workers") or actor.workers)  # a shared actor has its creator's
            actor.owned = info.get("owner", self._owner) == self._owner

    # -- actors -------------------------------------------------------------------------------
    def _start_actors(self, system: str) -> list[_Actor]:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        actors = []
        for index, (node_id, cpus) in enumerate(self._nodes):
            workers = self._workers_per_actor or max(1, cpus // max(1, len(self._systems)))
            named: dict[str, Any] = {}
            if self._share:
                named = {"name": f"{self._share}:{system}:{node_id}", "namespace": SHARED_NAMESPACE,
                         "get_if_exists": True}
            handle = _actor_class().options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False),
                num_cpus=self._actor_num_cpus,
                max_restarts=-1,
                max_task_retries=0,  # the pool decides what is retried, once
                max_concurrency=10_000,
                **named,
            ).remote(workers, self._verifier_kwargs, self._system_kwargs, self._factory, self.spill_at,
                     self._measure_cpu, self._context_allowance_s, self._owner)
            actors.append(_Actor(handle, node_id, system, index, workers))
        self._actors[system] = actors
        return actors

    def actors(self, system: str = "coq") -> list[Any]:
        """The Ray actor handles serving ``system`` (one per node)."""
        with self._lock:
            return [a.handle for a in self._actors.get(system, [])]

    def _choose(self, system: str, key: str) -> _Actor | None:
        """The actor for a check: this pool's node's while it is up (``node=``), else by context and load.

        Actors whose node is lost are never chosen; actors that are down (restarting) only when none is up.
        """
        live = [a for a in self._actors.get(system) or self._start_actors(system) if not a.lost]
        actors = [a for a in live if not a.down_since] or live
        if not actors:
            return None
        here = [a for a in actors if a.node_id == self._node]
        if here:
            return here[0]
        warm = [a for a in actors if a.index in self._affinity.get(key, ())]
        if warm:
            self._affinity.move_to_end(key)
            best = min(warm, key=lambda a: a.load / a.workers)
            if best.load < (self.spill_at or DRIVER_SPILL_PER_WORKER) * best.workers:
                return best
            idle = [a for a in actors if a.load == 0 and a not in warm]
            if not idle:
                return best
            chosen = idle[0]
        else:
            offset = int(hashlib.blake2b(key.encode(), digest_size=4).hexdigest(), 16)
            chosen = min(actors, key=lambda a: (a.load / a.workers, (a.index + offset) % len(live)))
        self._affinity[key] = [*(i for i in self._affinity.get(key, ()) if i != chosen.index), chosen.index]
        self._affinity.move_to_end(key)
        while len(self._affinity) > 65536:
            self._affinity.popitem(last=False)
        return chosen

    # -- checks -------------------------------------------------------------------------------
    def _dispatch(self, request_id: Any, task: Task, proof: str, future: Future[PoolResult]) -> None:
        if self._closed:
            raise PoolClosed("the ray verifier pool is closed")
        job = _RayJob(request_id, task, proof, routing_key(task), future, time.monotonic())
        future.set_running_or_notify_cancel()
        with self._lock:
            self._counters["submitted"] += 1
        self._send(job)

    def _send(self, job: _RayJob) -> None:
        with self._lock:
            actor = self._choose(job.task.system, job.key)
            if actor is not None:
                actor.load += 1
                job.attempts += 1
                job.sent_while_down = actor.down_since > 0
                token = next(self._job_ids)
                self._inflight[token] = job
        if actor is None:
            self._finish(job, PoolResult(job.request_id, job.task.id, job.task.system, HarnessFailure(
                Boundary.WORKER_DIED, f"every node with a {job.task.system} verifier actor of this pool left the "
                "cluster"), job.attempts, "ray", 0.0, time.monotonic() - job.submitted))
            return
        try:
            ref = actor.handle.check.remote(job.task, job.proof, job.request_id)
            reply = ref.future()
        except Exception as exc:  # noqa: BLE001 - e.g. the cluster went away
            with self._lock:
                actor.load -= 1
                self._inflight.pop(token, None)
            self._finish(job, self._failure(job, "internal", f"cannot reach the verifier actor: {exc}", actor))
            return
        reply.add_done_callback(lambda f: self._on_reply(job, actor, token, f))

    def _on_reply(self, job: _RayJob, actor: _Actor, token: int, reply: Future[Any]) -> None:
        ray = _ray()
        with self._lock:
            actor.load -= 1
            self._inflight.pop(token, None)
        try:
            inner: PoolResult = reply.result()
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError,
                ray.exceptions.WorkerCrashedError, ray.exceptions.ObjectLostError, ray.exceptions.NodeDiedError):
            self._on_actor_down(job, actor, reply, ran=not job.sent_while_down)
            return
        except ray.exceptions.ActorUnschedulableError:  # its node is gone (the actor is pinned there): never ran
            self._on_actor_down(job, actor, reply, ran=False)
            return
        except Exception as exc:  # noqa: BLE001 - an error inside the actor: a harness failure
            text = str(exc).strip().splitlines()[-1][:500] if str(exc).strip() else type(exc).__name__
            self._finish(job, self._failure(job, "internal", text, actor))
            return
        with self._lock:
            actor.down_since = 0.0
        worker = f"ray:{actor.node_id[:8]}:{actor.system}/{inner.worker}"
        self._finish(job, PoolResult(inner.request_id, inner.task_id, inner.system, inner.outcome,
                                     inner.attempts + job.attempts - 1, worker, inner.queue_s,
                                     time.monotonic() - job.submitted))

    def _on_actor_down(self, job: _RayJob, actor: _Actor, reply: Future[Any], *, ran: bool) -> None:
        """The actor could not answer (died under the check, restarting, or gone with its node): the check is sent
        again (to another node while this one is down), once if it may have run there (``ran``)."""
        exc = reply.exception()
        now = time.monotonic()
        with self._lock:
            actor.down_since = actor.down_since or now
            watch = not actor.watched and not actor.lost and not self._closed
            actor.watched = actor.watched or watch
        if watch:
            threading.Thread(target=self._watch, args=(actor,), name="proofgym-ray-watch", daemon=True).start()
        if not ran:
            job.attempts -= 1  # sent to an actor known to be restarting, or not placeable: it never ran there
        job.unavailable_since = job.unavailable_since or now
        if self._closed:
            self._finish(job, self._failure(job, "closed", "the verifier pool was closed", actor))
        elif job.attempts > self.max_retries:
            self._finish(job, self._failure(
                job, "worker_died", f"the verifier actor died running this check {job.attempts} times: "
                f"{type(exc).__name__}", actor))
        elif now - job.unavailable_since > UNAVAILABLE_GRACE_S:
            self._finish(job, self._failure(
                job, "worker_died", f"the verifier actor stayed unavailable for {UNAVAILABLE_GRACE_S:.0f} s: "
                f"{type(exc).__name__}", actor))
        else:
            if ran:
                with self._lock:
                    self._counters["retries"] += 1
                logger.warning("verifier actor on node %s died under a check; sending it again", actor.node_id[:8])
            # Ray restarts the actor; give it a moment instead of spinning on ActorUnavailableError.
            timer = threading.Timer(0.5, self._send, args=(job,))
            timer.daemon = True
            timer.start()

    def _watch(self, actor: _Actor) -> None:
        """Wait until a down actor answers again (Ray restarted it) or is gone for good (:func:`_gone`: then its
        checks, and every later one, go to the other nodes' actors)."""
        ray = _ray()
        while not self._stop.is_set():
            why = _gone(ray, actor.node_id, actor.handle)
            if why:
                with self._lock:
                    actor.lost, actor.watched = True, False
                    self._counters["actors_lost"] += 1
                logger.warning("the %s verifier actor on node %s is dropped from the pool: %s", actor.system,
                               actor.node_id[:8], why)
                return
            try:
                info = ray.get(actor.handle.ready.remote(), timeout=5)
            except Exception:  # noqa: BLE001 - still restarting (or unreachable): ask again
                self._stop.wait(0.5)  # a pause between asks, not an ordering
                continue
            with self._lock:
                actor.down_since, actor.watched, actor.pid = 0.0, False, int(info["pid"])
            return

    def _failure(self, job: _RayJob, kind: str, text: str, actor: _Actor) -> PoolResult:
        return PoolResult(job.request_id, job.task.id, job.task.system, HarnessFailure.of(kind, text), job.attempts,
                          f"ray:{actor.node_id[:8]}:{actor.system}", 0.0, time.monotonic() - job.submitted)

    def _finish(self, job: _RayJob, result: PoolResult) -> None:
        try:
            job.future.set_result(result)
        except InvalidStateError:
            return
        with self._lock:
            self._counters["completed"] += 1
            if isinstance(result.outcome, HarnessFailure):
                self._harness[result.outcome.boundary.value] += 1
            else:
                self._verdicts[result.outcome.verdict.value] += 1

    # -- state --------------------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        ray = _ray()
        with self._lock:
            actors = [a for acts in self._actors.values() for a in acts]
            out: dict[str, Any] = {
                "engine": self.engine,
                "actors": len(actors),
                "workers": sum(a.workers for a in actors),
                "pending": self.pending,
                "submitted": self._counters["submitted"],
                "completed": self._counters["completed"],
                "retries": self._counters["retries"],
                "actors_lost": self._counters["actors_lost"],
                "verdicts": dict(self._verdicts),
                "harness_failures": dict(self._harness),
                "verdict_cache": self.cache_stats(),
            }
        per_actor: list[dict[str, Any]] = []
        for actor in actors:
            head: dict[str, Any] = {"node_id": actor.node_id, "system": actor.system, "load": actor.load, "lost": actor.lost,
                    "owned": actor.owned}
            if actor.lost:
                per_actor.append({**head, "error": "lost: it never comes back"})
                continue
            try:
                per_actor.append({**head, **ray.get(actor.handle.stats.remote(), timeout=10)})
            except Exception as exc:  # noqa: BLE001 - a restarting actor has no stats right now
                per_actor.append({**head, "error": type(exc).__name__})
        out["per_actor"] = per_actor
        out["workers_alive"] = sum(int(a.get("workers_alive", 0)) for a in per_actor)
        out["worker_restarts"] = sum(int(a.get("worker_restarts", 0)) for a in per_actor)
        return out

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            # a shared actor another pool created stays for that pool; a lost one is gone already
            actors = [a for acts in self._actors.values() for a in acts if a.owned and not a.lost]
        self._stop.set()
        ray = _ray()
        if ray.is_initialized():
            try:
                ray.get([a.handle.shutdown.remote() for a in actors], timeout=30)
            except Exception:  # noqa: BLE001 - a dead actor needs no shutdown
                pass
            for actor in actors:
                try:
                    ray.kill(actor.handle, no_restart=True)
                except Exception:  # noqa: BLE001
                    pass
        with self._lock:
            stranded = list(self._inflight.values())
            self._inflight.clear()
        for job in stranded:
            self._finish(job, PoolResult(job.request_id, job.task.id, job.task.system, HarnessFailure(
                Boundary.CLOSED, "the verifier pool was closed before this check finished"), job.attempts))
        if self._owns_ray and ray.is_initialized():
            ray.shutdown()
