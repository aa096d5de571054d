"""One verifier service per node for GRPO's rewards, and rewards that TRL awaits instead of calling.

Without it every training rank starts its own :class:`~proofgym.envs.verifiers.pool.LocalVerifierPool`
(8 ranks x 8 Coq workers, eight verdict caches) and blocks on it for the whole batch. With
``verifier_service: node`` (or ``$PROOFGYM_VERIFIER_SERVICE=node``):

- **local rank 0 starts one service for the node** (:class:`NodeVerifierService`): a
  :class:`~proofgym.envs.verifiers.service.VerifierService` on 127.0.0.1, a random port and a random
  token, over one pool of ``verifier_workers x LOCAL_WORLD_SIZE`` workers (the same total as the
  per-rank pools) with one verdict cache, holding the run's tasks so requests name them by id. It
  writes a ready file (``url`` and ``token``, mode 0600) into a node-local rendezvous directory;
- **the other local ranks wait for that file** (a bounded wait, ``ready_timeout_s``), check the
  service answers with that token (a stale file from an earlier run does not), and use it;
- **whoever started it closes it**: local rank 0 waits (bounded, ``close_wait_s``) until every
  other local rank has said it is done (a file each), then shuts the service and its workers down.

``verifier_service: http://host:port`` (or ``$PROOFGYM_VERIFIER_SERVICE`` set to a URL, token in
``$PROOFGYM_VERIFIER_TOKEN``) uses a service somebody else started (``proofgym serve-verifier``, the
launcher): every rank connects, nobody closes it, and tasks travel inline (it needs no ``--suite``).

Every consumer of the pool in a GRPO run (the reward, the curriculum's checker, the repair rollout,
the ``check_proof`` tool) gets a :class:`ServicePool`: the pool interface (``check_batch``,
``submit``) over HTTP, where a service that cannot answer is a harness failure (``None`` reward,
counted, never scored), like a broken local pool.

**Asynchronous rewards.** TRL 1.16 awaits a reward function whose ``__call__`` is a coroutine
(``GRPOTrainer._calculate_rewards`` runs it on its own event loop thread, with the other async reward
functions concurrently, and blocks the training step on the result). :class:`AsyncVerifierReward`
is such a function. Before that call, as soon as TRL has decoded the completions,
:class:`~proofgym.training.grpo_trainer.ProofGRPOTrainer` hands them to :func:`prefetch_rewards`,
which sends the batch to the service at once: the checks run while the trainer computes the old
policy's and the reference model's log-probabilities (under vLLM's importance-sampling correction,
``beta > 0``, or ``gradient_accumulation_steps`` not a multiple of the generation interval), and the
reward call then only waits for what is left. The reward call sends the same batch only if nothing
was sent for it, so every completion is checked once. ``verifier/wait_seconds`` logs how long each
step waited. TRL does not overlap a step's reward with the *next* generation (GRPO is on-policy), so
verification can hide behind the log-probability passes, not behind generation itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import secrets
import socket
import sys
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from proofgym.envs.errors import ProofgymError, VerifierError
from proofgym.envs.types import CheckResult, Task
from proofgym.envs.verifiers.pool import HARNESS_KINDS, Boundary, HarnessFailure, PoolResult
from proofgym.envs.verifiers.service import ServiceConfig, VerifierService
from proofgym.envs.verifiers.service.client import VerifierServiceClient
from proofgym.training.common import make_pool

__all__ = [
    "SERVICE_ENV",
    "AsyncVerifierReward",
    "NodeServiceError",
    "NodeVerifierService",
    "RewardBackend",
    "ServicePool",
    "prefetch_rewards",
    "reward_backend",
    "service_setting",
]

SERVICE_ENV = "PROOFGYM_VERIFIER_SERVICE"
"""``node`` or a service URL: the GRPO config's ``verifier_service`` when the config leaves it unset."""

_PREFETCH_KEEP = 4  # batches sent ahead and not yet claimed; older ones are dropped (their checks still count)


class NodeServiceError(ProofgymError):
    """The node's verifier service did not come up (or its setting is wrong); the message says what to do."""


# -- the wire, as a pool -------------------------------------------------------------------------------------
def _pair(request: Any) -> tuple[Any, Task, Any]:
    if len(request) == 3:
        return request[0], request[1], request[2]
    task, proof = request
    return None, task, proof


def _result(row: Mapping[str, Any], task: Task) -> PoolResult:
    """A ``/check`` result row as a :class:`PoolResult` (a null verdict is the service's harness failure)."""
    if row.get("verdict") is None:
        kind = str(row.get("error_kind") or Boundary.VERIFIER.value)
        boundary = Boundary(kind) if kind in HARNESS_KINDS else Boundary.VERIFIER
        outcome: CheckResult | HarnessFailure = HarnessFailure(boundary, str(row.get("harness_error") or "no verdict"))
    else:
        outcome = CheckResult.from_dict(row)
    return PoolResult(row.get("id"), task.id, task.system, outcome, attempts=int(row.get("attempts", 1) or 1),
                      worker=str(row.get("worker", "")))


class ServicePool:
    """The pool interface that GRPO's reward, curriculum, repair rollout and tool use, answered by a service.

    Args:
        url: The verifier service (``proofgym serve-verifier`` or a :class:`NodeVerifierService`).
        token: Its bearer token, if it has one.
        by_id: Send ``task_id`` (the service holds the run's tasks) instead of the whole task.
        timeout_s: Longest wait for one HTTP answer.
        threads: Requests in flight at once (prefetched batches, tool calls).

    A service that cannot answer (unreachable, an error status after the client's retries) makes
    every check of the request a harness failure: ``None`` rewards, never scores.
    """

    engine = "service"

    def __init__(self, url: str, *, token: str | None = None, by_id: bool = False, timeout_s: float = 3600.0,
                 threads: int = 4) -> None:

        self.url = url
        self.client = VerifierServiceClient(url, token=token, timeout_s=timeout_s)
        self.by_id = by_id
        self.requests_sent = 0
        """``POST /check`` requests this pool sent (one per batch, prefetched or not)."""
        self._executor = ThreadPoolExecutor(threads, thread_name_prefix="proofgym-service-pool")
        self._ahead: OrderedDict[tuple[tuple[str, str], ...], Future[list[PoolResult]]] = OrderedDict()
        self._lock = threading.Lock()
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def pending(self) -> int:
        return 0  # the service queues; see its /metrics

    def _post(self, checks: Sequence[tuple[Any, Task, Any]]) -> list[PoolResult]:
        rows = [{"id": i if rid is None else rid, "proof": proof,
                 **({"task_id": task.id} if self.by_id else {"task": task.to_dict()})}
                for i, (rid, task, proof) in enumerate(checks)]
        with self._lock:
            self.requests_sent += 1
        try:
            answers = self.client.check(rows)
        except (VerifierError, OSError, ValueError, KeyError) as exc:
            failure = HarnessFailure(Boundary.VERIFIER, f"verifier service: {type(exc).__name__}: {exc}")
            return [PoolResult(rid, task.id, task.system, failure) for rid, task, _ in checks]
        return [_result(row, task) for row, (_, task, _) in zip(answers, checks, strict=True)]

    @staticmethod
    def _key(checks: Sequence[tuple[Any, Task, Any]]) -> tuple[tuple[str, str], ...]:
        return tuple((task.id, str(proof)) for _, task, proof in checks)

    def _send(self, checks: list[tuple[Any, Task, Any]]) -> Future[list[PoolResult]]:
        if self._closed:
            failure = HarnessFailure(Boundary.CLOSED, "the service pool was closed")
            done: Future[list[PoolResult]] = Future()
            done.set_result([PoolResult(rid, task.id, task.system, failure) for rid, task, _ in checks])
            return done
        return self._executor.submit(self._post, checks)

    def prefetch(self, requests: Iterable[Any]) -> None:
        """Send a batch now; the :meth:`check_batch` of the same batch (same tasks and proofs, in order) takes
        its answer instead of sending it again."""
        checks = [_pair(r) for r in requests]
        key = self._key(checks)
        with self._lock:
            if key in self._ahead or not checks:
                return
            self._ahead[key] = self._send(checks)
            while len(self._ahead) > _PREFETCH_KEEP:
                self._ahead.popitem(last=False)

    def check_batch(self, requests: Iterable[Any], *, timeout: float | None = None) -> list[PoolResult]:
        """Results in input order: the prefetched answer of this batch if there is one, else one request now.

        Raises:
            TimeoutError: past ``timeout`` (the reward makes the batch harness failures).
        """
        checks = [_pair(r) for r in requests]
        with self._lock:
            future = self._ahead.pop(self._key(checks), None)
        if future is None:
            future = self._send(checks)
        try:
            future.result(timeout=timeout)
        except CancelledError:
            pass
        return self._settled(future, checks)

    def submit(self, task: Task, proof: Any, *, request_id: Any = None, block: bool = True) -> Future[PoolResult]:
        """One check (the ``check_proof`` tool); its future holds a :class:`PoolResult`."""
        batch = self._send([(request_id, task, proof)])
        single: Future[PoolResult] = Future()
        batch.add_done_callback(lambda f: single.set_result(self._settled(f, [(request_id, task, proof)])[0]))
        return single

    @staticmethod
    def _settled(future: Future[list[PoolResult]], checks: Sequence[tuple[Any, Task, Any]]) -> list[PoolResult]:
        """A finished request's results; one cancelled by :meth:`close` is a ``closed`` harness failure each."""
        if future.cancelled():
            failure = HarnessFailure(Boundary.CLOSED, "the service pool was closed before the request was sent")
            return [PoolResult(rid, task.id, task.system, failure) for rid, task, _ in checks]
        return future.result()

    def stats(self) -> dict[str, Any]:
        """The service's ``/metrics`` and this pool's ``requests_sent``."""
        try:
            return {**self.client.metrics(), "requests_sent": self.requests_sent}
        except VerifierError as exc:
            return {"requests_sent": self.requests_sent, "error": str(exc)}

    def close(self) -> None:
        """Stop sending (idempotent); the service itself is closed by whoever started it."""
        self._closed = True
        self._executor.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> ServicePool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- one service per node ------------------------------------------------------------------------------------
def _wait_for(ready: Callable[[], Any], *, timeout_s: float, what: str) -> Any:
    """Poll ``ready()`` until it returns something truthy (returned), with a growing interval; past
    ``timeout_s``, :class:`NodeServiceError` naming ``what``."""
    deadline = time.monotonic() + timeout_s
    interval = 0.02
    while True:
        value = ready()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise NodeServiceError(f"waited {timeout_s:.0f} s for {what}")
        time.sleep(min(interval, max(deadline - time.monotonic(), 0.0)))
        interval = min(interval * 2, 1.0)


def _answers(url: str, token: str | None) -> bool:
    """Whether a service at ``url`` answers ``/metrics`` with ``token`` (a stale ready file's does not)."""
    try:
        VerifierServiceClient(url, token=token, timeout_s=10.0, busy_retries=0).metrics()
    except VerifierError:
        return False
    return True


def local_rank() -> int:
    """This process's rank on its node (``LOCAL_RANK``, set by torchrun and accelerate; 0 alone)."""
    return int(os.environ.get("LOCAL_RANK", "0"))


def local_world_size() -> int:
    """Training processes on this node (``LOCAL_WORLD_SIZE``; 1 alone)."""
    return int(os.environ.get("LOCAL_WORLD_SIZE", "1"))


def rendezvous_dir(output_dir: str | os.PathLike[str]) -> Path:
    """The node-local directory where a run's ranks meet their service (under the system's temp dir, one per
    output directory: an output directory on a shared file system would mix nodes)."""
    digest = hashlib.sha256(os.path.realpath(output_dir).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"proofgym-node-service-{digest}"


class NodeVerifierService:
    """The verifier service of one node, as one rank sees it; see the module docstring.

    Use :meth:`open` (local rank 0 starts it, the others join) or :meth:`connect` (a service somebody
    else runs). :attr:`url` and :attr:`token` reach it; :meth:`pool` is a :class:`ServicePool` on it;
    :meth:`close` is idempotent and shuts the service down only in the process that started it.
    """

    READY = "ready.json"

    def __init__(self, url: str, token: str | None, *, service: Any = None, rendezvous: Path | None = None,
                 rank: int = 0, ranks: int = 1, by_id: bool = False, close_wait_s: float = 600.0) -> None:
        self.url, self.token, self.by_id = url, token, by_id
        self.rendezvous, self.rank, self.ranks = rendezvous, rank, ranks
        self.close_wait_s = close_wait_s
        self._service = service
        self._closed = False

    @property
    def owner(self) -> bool:
        """Whether this process started the service (and so closes it)."""
        return self._service is not None

    @classmethod
    def open(cls, rendezvous: str | os.PathLike[str], pool_factory: Callable[[], Any], *,
             tasks: Mapping[str, Task] | None = None, rank: int | None = None, ranks: int | None = None,
             ready_timeout_s: float = 600.0, close_wait_s: float = 600.0) -> NodeVerifierService:
        """Local rank 0: start the service over ``pool_factory()`` and announce it in ``rendezvous``. Any other
        local rank: wait (at most ``ready_timeout_s``) for that announcement and a service that answers it."""
        where = Path(rendezvous)
        rank = local_rank() if rank is None else rank
        ranks = local_world_size() if ranks is None else ranks
        if rank == 0:
            return cls._start(where, pool_factory, tasks=tasks, ranks=ranks, close_wait_s=close_wait_s)

        def announced() -> dict[str, Any] | None:
            try:
                info = json.loads((where / cls.READY).read_text(encoding="utf-8"))
            except (OSError, ValueError):
                return None
            return info if _answers(info["url"], info["token"]) else None

        info = _wait_for(announced, timeout_s=ready_timeout_s,
                         what=f"local rank 0 to start this node's verifier service ({where / cls.READY}); did "
                              f"rank 0 fail? (its log says), or raise ready_timeout_s")
        return cls(info["url"], info["token"], rendezvous=where, rank=rank, ranks=ranks, by_id=True,
                   close_wait_s=close_wait_s)

    @classmethod
    def _start(cls, where: Path, pool_factory: Callable[[], Any], *, tasks: Mapping[str, Task] | None,
               ranks: int, close_wait_s: float) -> NodeVerifierService:

        where.mkdir(mode=0o700, parents=True, exist_ok=True)
        for stale in where.iterdir():  # an earlier run's announcement and goodbyes
            stale.unlink(missing_ok=True)
        token = secrets.token_hex(24)
        pool = pool_factory()
        try:  # loopback only; its batches are whole GRPO batches with their tasks' contexts
            config = ServiceConfig(host="127.0.0.1", port=0, token=token, max_body_bytes=256 * 2**20,
                                   max_batch=1 << 16, max_queue=1 << 20)
            service = VerifierService(pool, config, tasks=tasks, owns_pool=True).start()
        except BaseException:
            pool.close()
            raise
        ready = where / f".{cls.READY}.{os.getpid()}"
        fd = os.open(ready, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # the token: readable by this user only
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump({"url": service.url, "token": token, "pid": os.getpid(), "host": socket.gethostname()}, fh)
        ready.replace(where / cls.READY)
        return cls(service.url, token, service=service, rendezvous=where, rank=0, ranks=ranks, by_id=tasks is not None,
                   close_wait_s=close_wait_s)

    @classmethod
    def connect(cls, url: str, *, token: str | None = None, ready_timeout_s: float = 600.0) -> NodeVerifierService:
        """A service somebody else started (given by URL): wait until it answers; :meth:`close` leaves it up."""
        token = token if token is not None else os.environ.get("PROOFGYM_VERIFIER_TOKEN") or None
        _wait_for(lambda: _answers(url, token), timeout_s=ready_timeout_s,
                  what=f"the verifier service at {url} to answer /metrics (is it up? is "
                       f"$PROOFGYM_VERIFIER_TOKEN its token?)")
        return cls(url, token)

    def pool(self, *, timeout_s: float = 3600.0) -> ServicePool:
        return ServicePool(self.url, token=self.token, by_id=self.by_id, timeout_s=timeout_s)

    def _left(self, rank: int) -> Path:
        assert self.rendezvous is not None  # noqa: S101 - only ranks that met in a rendezvous leave one
        return self.rendezvous / f"left.{rank}"

    def close(self) -> None:
        """A joined rank says it is done; the starting rank waits (at most ``close_wait_s``) for every other
        local rank to say so, then shuts the service and its workers down. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self.rendezvous is None:
            return
        if not self.owner:
            self._left(self.rank).write_text(str(os.getpid()), encoding="utf-8")
            return
        others = [self._left(r) for r in range(1, self.ranks)]
        # closing on the way out of an error (a `finally` while it propagates): the run is going down, and the
        # launcher stops the other ranks once this one has exited, so waiting for their goodbyes would only delay it
        failing = sys.exc_info()[0] is not None
        try:
            _wait_for(lambda: failing or all(p.exists() for p in others), timeout_s=self.close_wait_s,
                      what="the other local ranks to finish with the verifier service")
        except NodeServiceError as exc:
            from proofgym.training.callbacks import announce

            announce(f"{exc}; closing it anyway")
        finally:
            self._service.shutdown()
            for path in (self.rendezvous / self.READY, *others):
                path.unlink(missing_ok=True)
            with contextlib.suppress(OSError):  # left when something else is in it
                self.rendezvous.rmdir()

    def __enter__(self) -> NodeVerifierService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- rewards TRL awaits --------------------------------------------------------------------------------------
class AsyncVerifierReward:
    """A reward function TRL awaits: the wrapped reward (a :class:`~proofgym.training.rewards.VerifierReward`,
    or a :class:`~proofgym.training.rewards.PermutedReward` of one) run off TRL's event loop, plus
    :meth:`prefetch`. Attributes are the wrapped reward's; the rewards, ``None`` for harness failures, too.

    Example (TRL's call path: ``GRPOTrainer._calculate_rewards`` sees an async ``__call__``)::

        reward = AsyncVerifierReward(VerifierReward(tasks, ServicePool(url)))
        await reward(prompts=..., completions=..., task_id=...)   # -> [1.0, -1.0, 0.0, None]
    """

    def __init__(self, reward: Any) -> None:
        self.reward = reward
        self.__name__ = reward.__name__

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["reward"], name)

    def prefetch(self, completions: Sequence[Any], task_id: Sequence[str]) -> bool:
        """Send this batch's checks now, if the pool can take them ahead; True when sent."""
        pool = self.reward.pool
        if not hasattr(pool, "prefetch"):
            return False
        tasks = [self.reward.task(t) for t in task_id]
        pool.prefetch([(t, self.reward.proof_of(c, t)) for c, t in zip(completions, tasks, strict=True)])
        return True

    async def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], completion_ids: Any = None,
                       **columns: Any) -> list[float | None]:
        start = time.monotonic()
        rewards: list[float | None] = await asyncio.to_thread(self.reward, prompts, completions, completion_ids,
                                                              **columns)
        log_metric = columns.get("log_metric")
        if log_metric is not None:
            log_metric("verifier/wait_seconds", time.monotonic() - start)
        return rewards


def prefetch_rewards(reward_funcs: Iterable[Any], inputs: Sequence[Mapping[str, Any]] | None,
                     completions: Sequence[Any], extra_fields: Mapping[str, Any] | None = None) -> int:
    """Hand a freshly decoded batch to every reward function that can check ahead (:meth:`AsyncVerifierReward.prefetch`).

    Skipped when a rollout already checked every turn (``rollout_outcomes``) or the batch has no
    ``task_id`` column. Returns how many reward functions took it.
    """
    if not inputs or "task_id" not in inputs[0] or (extra_fields and "rollout_outcomes" in extra_fields):
        return 0
    if len(inputs) != len(completions):
        return 0
    task_ids = [row["task_id"] for row in inputs]
    return sum(bool(f.prefetch(completions, task_ids)) for f in reward_funcs if hasattr(f, "prefetch"))


# -- what train_grpo uses -------------------------------------------------------------------------------------
def service_setting(cfg: Any) -> str:
    """``""`` (a pool per rank), ``"node"`` or a URL: the config's ``verifier_service``, else ``$PROOFGYM_VERIFIER_SERVICE``."""
    value = (getattr(cfg, "verifier_service", None) or os.environ.get(SERVICE_ENV, "")).strip()
    if value in ("", "node") or value.startswith(("http://", "https://")):
        return value
    raise NodeServiceError(f"verifier_service must be empty (a verifier pool per rank), 'node' (one service per "
                           f"node, started by local rank 0) or the URL of a running service; got {value!r}")


class RewardBackend:
    """Where a GRPO run's checks go: :attr:`pool` for every consumer, :meth:`wrap` for the reward function
    TRL gets, :meth:`close` when training is over (the per-rank pool, or this rank's part of the service)."""

    def __init__(self, pool: Any, service: NodeVerifierService | None = None) -> None:
        self.pool, self.service = pool, service

    def wrap(self, reward_func: Any) -> Any:
        """The reward function for TRL: awaited (:class:`AsyncVerifierReward`) when checks go to a service."""
        return AsyncVerifierReward(reward_func) if self.service is not None else reward_func

    def close(self) -> None:
        try:
            self.pool.close()
        finally:
            if self.service is not None:
                self.service.close()


class _WithWorkers:
    """``cfg`` as the pool factory reads it, with another ``verifier_workers`` (no second __post_init__)."""

    def __init__(self, cfg: Any, workers: int) -> None:
        self._cfg, self.verifier_workers = cfg, workers

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["_cfg"], name)


def reward_backend(cfg: Any, tasks: Iterable[Task], *, make_local_pool: Callable[[Any], Any] | None = None
                   ) -> RewardBackend:
    """The pool a GRPO run checks on, as ``cfg.verifier_service`` says (see :func:`service_setting`)."""
    from proofgym.training.callbacks import announce

    make: Callable[[Any], Any] = make_local_pool or make_pool
    setting = service_setting(cfg)
    if not setting:
        announce(f"starting {cfg.verifier_workers} verifier worker(s) for rewards")
        return RewardBackend(make(cfg))
    if setting != "node":
        announce(f"rewards from the verifier service at {setting}")
        service = NodeVerifierService.connect(setting)
        return RewardBackend(service.pool(), service)
    ranks = local_world_size()
    by_id = {t.id: t for t in tasks}

    def node_pool() -> Any:
        workers = cfg.verifier_workers * ranks
        announce(f"starting this node's verifier service: {workers} worker(s) for {ranks} local rank(s)")
        return make(_WithWorkers(cfg, workers))

    service = NodeVerifierService.open(rendezvous_dir(cfg.output_dir), node_pool, tasks=by_id, ranks=ranks)
    if not service.owner:
        announce(f"rewards from this node's verifier service at {service.url} (started by local rank 0)")
    return RewardBackend(service.pool(), service)
