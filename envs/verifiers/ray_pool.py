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

Faults: an actor that dies (node lost, process killed) is restarted by Ray (``max_restarts=-1``);
a check that was on it is sent again once, then is a ``worker_died`` harness failure.

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
from proofgym.envs.verifiers.pool import (
    DEFAULT_CONTEXT_ALLOWANCE_S,
    DEFAULT_VERDICT_CACHE_ENTRIES,
    Boundary,
    HarnessFailure,
    LocalVerifierPool,
    PoolClosed,
    PoolResult,
    VerifierFactory,
    VerifierPool,
    routing_key,
)

__all__ = ["RayVerifierPool", "init_local_ray"]

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
                 context_allowance_s: float = DEFAULT_CONTEXT_ALLOWANCE_S) -> None:
        self.pool = LocalVerifierPool(workers, verifier_kwargs=verifier_kwargs, system_kwargs=system_kwargs,
                                      verifier_factory=verifier_factory, spill_at=spill_at, measure_cpu=measure_cpu,
                                      context_allowance_s=context_allowance_s,
                                      # the driver bounds what is in flight, and its verdict cache answers repeats
                                      # (or, off, every check must run: a second cache here would answer them)
                                      max_pending=1 << 30, verdict_cache=0)

    def ready(self) -> dict[str, Any]:
        import ray

        return {"pid": os.getpid(), "node_id": ray.get_runtime_context().get_node_id(),
                "worker_pids": self.pool.worker_pids()}

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
        alive = [n for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) > 0]
        wanted = set(nodes) if nodes is not None else None
        self._nodes = [(n["NodeID"], int(n["Resources"]["CPU"])) for n in alive
                       if wanted is None or n["NodeID"] in wanted]
        if not self._nodes:
            raise DependencyNotInstalled("the Ray cluster has no alive node with CPUs to run verifiers on")
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

    # -- actors -------------------------------------------------------------------------------
    def _start_actors(self, system: str) -> list[_Actor]:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        actors = []
        for index, (node_id, cpus) in enumerate(self._nodes):
            workers = self._workers_per_actor or max(1, cpus // max(1, len(self._systems)))
            handle = _actor_class().options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False),
                num_cpus=self._actor_num_cpus,
                max_restarts=-1,
                max_task_retries=0,  # the pool decides what is retried, once
                max_concurrency=10_000,
            ).remote(workers, self._verifier_kwargs, self._system_kwargs, self._factory, self.spill_at,
                     self._measure_cpu, self._context_allowance_s)
            actors.append(_Actor(handle, node_id, system, index, workers))
        self._actors[system] = actors
        return actors

    def actors(self, system: str = "coq") -> list[Any]:
        """The Ray actor handles serving ``system`` (one per node)."""
        with self._lock:
            return [a.handle for a in self._actors.get(system, [])]

    def _choose(self, system: str, key: str) -> _Actor:
        actors = self._actors.get(system) or self._start_actors(system)
        warm = [actors[i] for i in self._affinity.get(key, ())]
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
            chosen = min(actors, key=lambda a: (a.load / a.workers, (a.index + offset) % len(actors)))
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
            actor.load += 1
            job.attempts += 1
            job.sent_while_down = actor.down_since > 0
            token = next(self._job_ids)
            self._inflight[token] = job
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
                ray.exceptions.WorkerCrashedError, ray.exceptions.ObjectLostError) as exc:
            now = time.monotonic()
            with self._lock:
                actor.down_since = actor.down_since or now
            if job.sent_while_down:
                job.attempts -= 1  # sent to an actor already known to be restarting: it never ran there
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
                if not job.sent_while_down:
                    with self._lock:
                        self._counters["retries"] += 1
                    logger.warning("verifier actor on node %s died under a check; sending it again",
                                   actor.node_id[:8])
                # Ray restarts the actor; give it a moment instead of spinning on ActorUnavailableError.
                timer = threading.Timer(0.5, self._send, args=(job,))
                timer.daemon = True
                timer.start()
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
            if result.result is None:
                self._harness[result.error_kind] += 1
            else:
                self._verdicts[result.result.verdict.value] += 1

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
                "verdicts": dict(self._verdicts),
                "harness_failures": dict(self._harness),
                "verdict_cache": self.cache_stats(),
            }
        per_actor = []
        for actor in actors:
            try:
                per_actor.append({"node_id": actor.node_id, "system": actor.system, "load": actor.load,
                                  **ray.get(actor.handle.stats.remote(), timeout=10)})
            except Exception as exc:  # noqa: BLE001 - a restarting actor has no stats right now
                per_actor.append({"node_id": actor.node_id, "system": actor.system, "error": type(exc).__name__})
        out["per_actor"] = per_actor
        out["workers_alive"] = sum(int(a.get("workers_alive", 0)) for a in per_actor)
        out["worker_restarts"] = sum(int(a.get("worker_restarts", 0)) for a in per_actor)
        return out

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            actors = [a for acts in self._actors.values() for a in acts]
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
