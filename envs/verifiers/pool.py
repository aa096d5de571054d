"""Verifier pools: many checks at once on warm verifiers. One interface, two engines.

Why a pool: a verifier is only fast when it is warm (a Coq context loaded once in a ``coqidetop``,
a HOL Light zygote forked once), and one verifier checks one proof at a time. A pool keeps ``N``
workers, each holding one warm verifier per system (made by
:func:`~proofgym.envs.verifiers.base.make_verifier`, so any system plugs in), and sends each check
to a worker that already has its context warm. An idle worker takes queued checks from the others by what
they cost it: first those whose context it has warm, then those whose context nobody has loaded yet (with
the rest of that context's queue, so that it is loaded once), and another worker's warm context only when
the wait there is longer than loading it here (from the load and check times the pool measures).

The interface (:class:`VerifierPool`) is what evaluation, the GRPO reward functions, the vector
envs and the verifier HTTP service all use:

- :meth:`VerifierPool.submit` -> a :class:`concurrent.futures.Future` of a :class:`PoolResult`;
  blocks while ``max_pending`` checks are unfinished (back-pressure);
- :meth:`VerifierPool.imap_unordered` (sync) and :meth:`VerifierPool.check_many` (asyncio): results
  in completion order, each tagged with its request id, with a bounded number in flight; the
  requests are pulled lazily, so a generator that calls a model is only asked for the next proof
  when there is room;
- :meth:`VerifierPool.check_batch`: results in input order (reward functions);
- :meth:`VerifierPool.as_verifier`: a :class:`~proofgym.envs.verifiers.base.Verifier` view, so an
  env or a strategy can take a pool where it takes a verifier.

Harness failures are values here, not exceptions: a :class:`PoolResult` carries either a
:class:`~proofgym.envs.types.CheckResult` or ``harness_error`` (the verifier broke, the worker died
twice, the task does not load...). Callers must never score one as 0: its ``result`` is
``None``, and :class:`~proofgym.envs.rewards.RewardMap` scores ``None`` as ``None``.

Engines: :class:`LocalVerifierPool` (worker processes on this machine) and
:class:`~proofgym.envs.verifiers.ray_pool.RayVerifierPool` (one actor per node and system, each a
local pool). :func:`make_pool` picks one by name.

Faults the local engine handles (see ``tests/test_faults.py``):

- a worker killed mid-check (SIGKILL, OOM killer): the check is retried once on a fresh worker, or
  returned as a ``worker_died`` harness failure if that worker dies too; a replacement worker is
  started at once, and checks queued behind the dead one move on;
- a prover process killed or crashed under a check (a ``verifier`` harness failure: the worker drops
  that verifier): the check is retried once on a fresh verifier, then returned as the failure;
- a check that runs past its deadline, ``task.timeout_s`` plus ``context_allowance_s`` (default
  :data:`DEFAULT_CONTEXT_ALLOWANCE_S`, for loading the task's context, lexing it included) counted
  from when the worker's verifier is ready (started and, where it has ``prepare(task)``, with its
  prover server up), is answered ``TIMEOUT`` at that deadline, and an ``OK`` that arrives after it is
  ``TIMEOUT`` too: never a late OK. The worker finishes the check (its contexts stay warm) and the
  late answer is dropped;
- an identical (task, proof) checked again: answered from the verdict cache (``verdict_cache.py``),
  or, while the first is still running, by the first's answer; a harness failure or a TIMEOUT is
  never stored, and checks that waited on a first that broke get checks of their own;
- a check that never answers: the worker is killed at a watchdog deadline far beyond the verifier's
  own, and the check is a ``watchdog`` harness failure (a hang would hang again: no retry);
- ``close()`` is idempotent, stops the workers (SIGKILL after a grace period), reaps them, and
  removes their temp dirs; workers die with the pool's process (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import ctypes
import enum
import hashlib
import importlib
import inspect
import itertools
import logging
import multiprocessing
import os
import queue
import shutil
import signal
import tempfile
import threading
import time
from collections import Counter, OrderedDict, deque
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as wait_for_ready
from typing import Any

from proofgym.envs.errors import ProofgymError, TaskFormatError, VerifierCrashed, VerifierError
from proofgym.envs.systems import SPECS
from proofgym.envs.types import CheckResult, ErrorCategory, Task, Verdict
from proofgym.envs.verifiers.base import Budget
from proofgym.envs.verifiers.procfs import tree_cpu_s
from proofgym.envs.verifiers.verdict_cache import (
    DEFAULT_VERDICT_CACHE_ENTRIES,
    VerdictCache,
    answer_from,
    cache_key,
    cacheable,
)

__all__ = [
    "Boundary",
    "CheckRequest",
    "HarnessFailure",
    "LocalVerifierPool",
    "PoolClosed",
    "PoolFull",
    "PoolResult",
    "PoolVerifier",
    "VerifierPool",
    "make_pool",
    "routing_key",
]

logger = logging.getLogger(__name__)

class Boundary(str, enum.Enum):
    """The boundary a harness failure crossed: which part of the harness broke (``PoolResult.error_kind``)."""

    VERIFIER = "verifier"  # the verifier raised (a prover missing or crashed, twice when retried)
    TASK = "task"  # the task is broken (its context does not load): a fault of the suite, not the proof
    WORKER_DIED = "worker_died"  # the worker process died under the check, twice
    WATCHDOG = "watchdog"  # the check ran past its deadline plus the allowance and the worker was killed
    INTERNAL = "internal"  # the pool itself failed (a bug: say so in an issue)
    CLOSED = "closed"  # the pool was closed before the check finished


#: Kinds of harness failure a :class:`PoolResult` can carry (``error_kind``): the :class:`Boundary` values.
HARNESS_KINDS = tuple(b.value for b in Boundary)


@dataclass(frozen=True)
class HarnessFailure:
    """No verdict: the harness broke at ``boundary``; ``message`` is one line saying what broke."""

    boundary: Boundary
    message: str

    @classmethod
    def of(cls, kind: str | Boundary, message: str) -> HarnessFailure:
        return cls(Boundary(kind), message)

#: Seconds a check may take beyond its task's ``timeout_s`` before the pool answers TIMEOUT: time to
#: load (and lex) the task's context on a cold worker. A prover's own start-up (a HOL Light server
#: loading its base, minutes) is not counted: the worker runs the verifier's ``prepare(task)`` first.
DEFAULT_CONTEXT_ALLOWANCE_S = 120.0


class PoolClosed(VerifierError):
    """The pool was closed while a check was waiting or running (or a check was submitted after)."""


class PoolFull(ProofgymError):
    """``submit(..., block=False)`` found ``max_pending`` checks unfinished. Not a harness failure: retry later."""


# --------------------------------------------------------------------------------------------
# values


@dataclass(frozen=True)
class CheckRequest:
    """One check to run: ``proof`` against ``task``, tagged with ``request_id`` (any picklable, hashable value)."""

    task: Task
    proof: str
    request_id: Any = None


@dataclass(frozen=True)
class PoolResult:
    """The outcome of one request: a verdict (:class:`CheckResult`) or a :class:`HarnessFailure`. Never both.

    Attributes:
        request_id: The id given at submit time (or a counter the pool assigned).
        task_id: The task's id.
        system: The task's system.
        outcome: The verifier's :class:`CheckResult`, or the :class:`HarnessFailure` that left none.
        attempts: Workers the check was sent to (2 when a worker died under it and it was retried).
        worker: Which worker answered, e.g. ``local:1:12345`` (slot 1, pid 12345).
        queue_s: Seconds from submit to the start of the last attempt.
        total_s: Seconds from submit to the result.
    """

    request_id: Any
    task_id: str
    system: str
    outcome: CheckResult | HarnessFailure
    attempts: int = 1
    worker: str = ""
    queue_s: float = 0.0
    total_s: float = 0.0

    @property
    def result(self) -> CheckResult | None:
        """The verdict's :class:`CheckResult`; ``None`` for a harness failure."""
        return self.outcome if isinstance(self.outcome, CheckResult) else None

    @property
    def failure(self) -> HarnessFailure | None:
        return self.outcome if isinstance(self.outcome, HarnessFailure) else None

    @property
    def harness_error(self) -> str:
        """One line saying what broke (``""`` when there is a verdict)."""
        return self.outcome.message if isinstance(self.outcome, HarnessFailure) else ""

    @property
    def error_kind(self) -> str:
        """The failure's :class:`Boundary` value, one of :data:`HARNESS_KINDS` (``""`` when there is a verdict)."""
        return self.outcome.boundary.value if isinstance(self.outcome, HarnessFailure) else ""

    @property
    def harness_failure(self) -> bool:
        return self.result is None

    @property
    def verdict(self) -> Verdict | None:
        return None if self.result is None else self.result.verdict

    @property
    def ok(self) -> bool:
        return self.result is not None and self.result.verdict is Verdict.OK

    def raise_for_harness(self) -> CheckResult:
        """The :class:`CheckResult`, or :class:`~proofgym.envs.errors.VerifierCrashed` for a harness failure."""
        if self.result is None:
            raise VerifierCrashed(f"{self.error_kind}: {self.harness_error}")
        return self.result

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the verdict fields of :meth:`CheckResult.to_dict`, or ``harness_error``/``error_kind``."""
        row: dict[str, Any] = {"request_id": self.request_id, "task_id": self.task_id, "system": self.system,
                               "attempts": self.attempts, "worker": self.worker}
        if self.result is None:
            row.update(verdict=None, harness_error=self.harness_error, error_kind=self.error_kind)
        else:
            row.update(self.result.to_dict())
        return row


RequestLike = CheckRequest | tuple[Any, ...]


def _unpack(request: RequestLike) -> tuple[Any, Task, Any]:
    """``CheckRequest``, ``(task, proof)`` or ``(request_id, task, proof)`` -> (request_id, task, proof)."""
    if isinstance(request, CheckRequest):
        return request.request_id, _as_task(request.task), request.proof
    if isinstance(request, tuple) and len(request) == 2:
        return None, _as_task(request[0]), request[1]
    if isinstance(request, tuple) and len(request) == 3:
        return request[0], _as_task(request[1]), request[2]
    raise TypeError(f"a request is a CheckRequest, (task, proof) or (request_id, task, proof); got {request!r:.80}")


def _as_task(task: Task | Mapping[str, Any]) -> Task:
    if isinstance(task, Task):
        return task
    return Task.from_dict(dict(task))


def routing_key(task: Task) -> str:
    """Which warm state a check needs: tasks with the same key share a worker when they can.

    Tasks of one source file (``metadata.file``) share a key: the Coq verifier extends one warm
    session along the file. Otherwise the key is the system, the HOL Light base, and a hash of
    the context.
    """
    source = task.metadata.get("file")
    known = SPECS.get(task.system)
    if source and known is not None and known.session_per_file:
        return f"{task.system}:file:{source}"
    digest = hashlib.blake2b(task.context.encode("utf-8", "surrogatepass"), digest_size=12).hexdigest()
    return f"{task.system}:{task.metadata.get('base', '')}:{digest}"


# --------------------------------------------------------------------------------------------
# the interface


class VerifierPool(abc.ABC):
    """Checks proofs on warm verifiers in parallel; see the module docstring.

    Subclasses implement :meth:`_dispatch` (queue one check and resolve its future exactly once,
    never raising for a harness failure), :meth:`close` and :meth:`stats`.
    """

    engine = ""

    def __init__(self, *, max_pending: int, verdict_cache: int = DEFAULT_VERDICT_CACHE_ENTRIES) -> None:
        if max_pending < 1:
            raise ValueError(f"max_pending must be >= 1, got {max_pending}")
        if verdict_cache < 0:
            raise ValueError(f"verdict_cache must be >= 0 (0: off), got {verdict_cache}")
        self.max_pending = int(max_pending)
        self._capacity = threading.Semaphore(self.max_pending)
        self._ids = itertools.count()
        self._count_lock = threading.Lock()
        self._pending = 0
        self._closed = False
        self.verdict_cache = VerdictCache(verdict_cache) if verdict_cache else None
        # key -> the (request id, future) of identical checks submitted while the first one runs
        self._followers: dict[str, list[tuple[Any, Future[PoolResult]]]] = {}
        self._followers_lock = threading.Lock()

    # -- to implement -------------------------------------------------------------------------
    @abc.abstractmethod
    def _dispatch(self, request_id: Any, task: Task, proof: str, future: Future[PoolResult]) -> None:
        """Queue one check; resolve ``future`` exactly once with a :class:`PoolResult`."""

    @abc.abstractmethod
    def close(self) -> None:
        """Stop every worker; unfinished checks become ``closed`` harness failures. Idempotent."""

    @abc.abstractmethod
    def stats(self) -> dict[str, Any]:
        """Counters for logs and metrics (pending, verdicts, harness failures, restarts...)."""

    # -- submitting ---------------------------------------------------------------------------
    @property
    def pending(self) -> int:
        """Checks submitted and not finished (queued or running)."""
        return self._pending

    @property
    def closed(self) -> bool:
        return self._closed

    def submit(self, task: Task | Mapping[str, Any], proof: Any, *, request_id: Any = None, block: bool = True,
               timeout: float | None = None) -> Future[PoolResult]:
        """Queue one check; the future's result is a :class:`PoolResult` (never an exception for a harness failure).

        Back-pressure: with ``max_pending`` checks unfinished, this blocks (``block=True``, up to
        ``timeout`` seconds) or raises :class:`PoolFull`. A non-text ``proof`` is an ``ERROR``
        verdict at once, like a non-text env action.
        """
        if self._closed:
            raise PoolClosed(f"the {self.engine} verifier pool is closed")
        task = _as_task(task)
        acquired = self._capacity.acquire(timeout=timeout) if block else self._capacity.acquire(blocking=False)
        if not acquired:
            raise PoolFull(f"{self.max_pending} checks are already pending; wait for one to finish")
        with self._count_lock:
            self._pending += 1
        future: Future[PoolResult] = Future()
        future.add_done_callback(self._finished)
        rid = next(self._ids) if request_id is None else request_id
        if not isinstance(proof, str):
            self._capacity.release()
            future.set_running_or_notify_cancel()
            result = CheckResult(Verdict.ERROR, (f"proof must be text, got {type(proof).__name__}",),
                                 error_category=ErrorCategory.SYNTAX, backend="pool")
            future.set_result(PoolResult(rid, task.id, task.system, result, attempts=0))
            return future
        if self.verdict_cache is not None and self._from_cache(rid, task, proof, future):
            # Answered from the cache, or waiting for the identical check that runs: it runs nothing, so it
            # holds no room. A GRPO group repeats completions, and repeats that held room would keep the
            # next prompts' checks (other contexts, for the other workers) from being submitted at all.
            self._capacity.release()
            future.without_check = True  # type: ignore[attr-defined]
            return future
        future.add_done_callback(self._release)
        try:
            self._dispatch(rid, task, proof, future)
        except BaseException:
            if not future.done():
                future.cancel()
            raise
        return future

    # -- the verdict cache (see verdict_cache.py) ---------------------------------------------
    def _settings(self) -> str:
        """What besides the task and the proof decides a verdict here: the verifiers' settings (fixed at
        construction, so worked out once, on the first submit)."""
        settings = getattr(self, "_settings_text", None)
        if settings is None:
            settings = self._settings_text = repr((
                getattr(self, "_factory", None), sorted(getattr(self, "_verifier_kwargs", {}).items()),
                sorted((k, sorted(v.items())) for k, v in getattr(self, "_system_kwargs", {}).items())))
        return settings

    def _from_cache(self, rid: Any, task: Task, proof: str, future: Future[PoolResult]) -> bool:
        """Answer ``future`` from the cache, or make it wait for an identical running check: True if so.

        Otherwise the check is the first of its key: it runs, and its answer goes to the cache and to
        the identical checks submitted meanwhile.
        """
        assert self.verdict_cache is not None
        key = cache_key(task, proof, self._settings())
        with self._followers_lock:
            hit = self.verdict_cache.get(key)
            if hit is None and key in self._followers:
                self._followers[key].append((rid, future))
                self.verdict_cache.coalesced += 1
                return True
            if hit is None:
                self._followers[key] = []
        if hit is not None:
            future.set_running_or_notify_cancel()
            future.set_result(PoolResult(rid, task.id, task.system, hit, attempts=0, worker="cache"))
            return True
        future.add_done_callback(lambda done, key=key, task=task, proof=proof: self._first_done(key, task, proof,
                                                                                               done))
        return False

    def _first_done(self, key: str, task: Task, proof: str, done: Future[PoolResult]) -> None:
        outcome = None if done.cancelled() else done.result()
        with self._followers_lock:
            if outcome is not None and cacheable(outcome.result):
                self.verdict_cache.put(key, outcome.result)  # type: ignore[union-attr]
            followers = self._followers.pop(key, [])
        for rid, future in followers:
            if outcome is not None and outcome.result is not None:  # a verdict (a TIMEOUT too: same input,
                # same deadline, run at the same time) answers the checks that waited for it
                if future.set_running_or_notify_cancel():
                    future.set_result(replace(outcome, request_id=rid, outcome=answer_from(outcome.result),
                                              attempts=0, worker="cache"))
            elif not future.done():  # the first broke or was cancelled: the others get checks of their own
                try:
                    self._dispatch(rid, task, proof, future)
                except PoolClosed:
                    if future.set_running_or_notify_cancel():
                        future.set_result(PoolResult(rid, task.id, task.system, HarnessFailure(
                            Boundary.CLOSED, "the verifier pool was closed before this check finished"), 0))

    def cache_stats(self) -> dict[str, Any]:
        """The verdict cache's counters (``{}`` when it is off)."""
        return self.verdict_cache.stats() if self.verdict_cache is not None else {}

    def _finished(self, _future: Future[PoolResult]) -> None:
        with self._count_lock:
            self._pending -= 1

    def _release(self, _future: Future[PoolResult]) -> None:
        self._capacity.release()

    # -- many at once -------------------------------------------------------------------------
    def imap_unordered(self, requests: Iterable[RequestLike], *, window: int | None = None) -> Iterator[PoolResult]:
        """Results in completion order, at most ``window`` (default ``max_pending``) checks in flight.

        ``requests`` is pulled lazily: the next request is taken only when there is room, so a
        generator that asks a model for each proof is throttled by the verifiers. A request answered
        from the verdict cache, or waiting for the identical check that runs, takes no room. Leaving
        the loop early cancels what has not started.
        """
        window = max(1, min(window or self.max_pending, self.max_pending))
        finished: queue.SimpleQueue[Future[PoolResult]] = queue.SimpleQueue()
        inflight: set[Future[PoolResult]] = set()
        source = iter(requests)
        exhausted = False
        try:
            while True:
                while not exhausted and _checks(inflight) < window:
                    try:
                        request = next(source)
                    except StopIteration:
                        exhausted = True
                        break
                    rid, task, proof = _unpack(request)
                    future = self.submit(task, proof, request_id=rid)
                    inflight.add(future)
                    future.add_done_callback(finished.put)
                if not inflight:
                    return
                future = finished.get()
                inflight.discard(future)
                yield future.result()
        finally:
            for future in inflight:
                future.cancel()

    async def check_many(self, requests: Iterable[RequestLike] | AsyncIterable[RequestLike], *,
                         window: int | None = None) -> AsyncIterator[PoolResult]:
        """The asyncio form of :meth:`imap_unordered`: ``async for result in pool.check_many(reqs)``.

        The event loop never blocks: when the pool is full (other users share it), the blocking
        submit runs in a thread.
        """
        loop = asyncio.get_running_loop()
        window = max(1, min(window or self.max_pending, self.max_pending))
        finished: asyncio.Queue[Future[PoolResult]] = asyncio.Queue()

        def on_done(future: Future[PoolResult]) -> None:
            with contextlib.suppress(RuntimeError):  # the loop is gone: nobody is waiting any more
                loop.call_soon_threadsafe(finished.put_nowait, future)

        source = _aiter(requests)
        inflight: set[Future[PoolResult]] = set()
        exhausted = False
        try:
            while True:
                while not exhausted and _checks(inflight) < window:
                    try:
                        request = await source.__anext__()
                    except StopAsyncIteration:
                        exhausted = True
                        break
                    rid, task, proof = _unpack(request)
                    try:
                        future = self.submit(task, proof, request_id=rid, block=False)
                    except PoolFull:
                        future = await asyncio.to_thread(self.submit, task, proof, request_id=rid)
                    inflight.add(future)
                    future.add_done_callback(on_done)
                if not inflight:
                    return
                future = await finished.get()
                inflight.discard(future)
                yield future.result()
        finally:
            for future in inflight:
                future.cancel()

    def check_batch(self, requests: Iterable[RequestLike], *, timeout: float | None = None) -> list[PoolResult]:
        """Results in input order (reward functions score a batch in the order it came)."""
        futures = []
        for request in requests:
            rid, task, proof = _unpack(request)
            futures.append(self.submit(task, proof, request_id=rid))
        return [f.result(timeout=timeout) for f in futures]

    def check(self, task: Task | Mapping[str, Any], proof: Any) -> CheckResult:
        """One check, like :meth:`Verifier.check`: raises :class:`VerifierError` for a harness failure."""
        return self.submit(task, proof).result().raise_for_harness()

    def as_verifier(self, system: str) -> PoolVerifier:
        """A :class:`~proofgym.envs.verifiers.base.Verifier` for ``system`` backed by this pool."""
        return PoolVerifier(self, system)

    def __enter__(self) -> VerifierPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _checks(inflight: set[Future[PoolResult]]) -> int:
    """How many of ``inflight`` are checks that run (not answered from, or waiting on, the verdict cache)."""
    return sum(1 for f in inflight if not getattr(f, "without_check", False))


async def _aiter(requests: Iterable[RequestLike] | AsyncIterable[RequestLike]) -> AsyncIterator[RequestLike]:
    if isinstance(requests, AsyncIterable):
        async for request in requests:
            yield request
    else:
        for request in requests:
            yield request


class PoolVerifier:
    """A pool seen as one system's :class:`~proofgym.envs.verifiers.base.Verifier`.

    ``WholeProofEnv(tasks, verifier=pool.as_verifier("coq"))`` checks through the pool; many envs
    in threads share its warm workers. ``close()`` does nothing: the pool belongs to whoever made it.
    """

    def __init__(self, pool: VerifierPool, system: str) -> None:
        self.pool = pool
        self.system = system

    def check(self, task: Task, proof: str) -> CheckResult:
        if task.system != self.system:
            raise TaskFormatError(f"task {task.id} is for {task.system!r}, not {self.system}")
        return self.pool.check(task, proof)

    def close(self) -> None:
        pass

    def __enter__(self) -> PoolVerifier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --------------------------------------------------------------------------------------------
# the local engine: worker side


VerifierFactory = Callable[..., Any]


def _resolve_factory(factory: VerifierFactory | str | None) -> VerifierFactory:
    """``None`` -> make_verifier; ``"module:attr"`` -> that callable (so tests can name a fake verifier)."""
    if factory is None:
        from proofgym.envs.verifiers.base import make_verifier

        return make_verifier
    if isinstance(factory, str):
        module, _, name = factory.partition(":")
        return getattr(importlib.import_module(module), name)
    return factory


def _set_parent_death_signal() -> None:
    """Linux: SIGKILL this worker when the thread that started it (the pool's) goes away. No orphans."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG


def construct_verifier(make: VerifierFactory, system: str, kwargs: Mapping[str, Any]) -> Any:
    """``make(system, **kwargs)`` for factories that take the system (make_verifier), else ``make(**kwargs)``.

    The pool's workers build their verifiers with it; so does anything that needs a verifier made
    the same way in its own process (eval's ``local_verifiers``, for a tactic session).
    """
    try:
        takes_system = "system" in inspect.signature(make).parameters
    except (TypeError, ValueError):
        takes_system = True
    return make(system, **kwargs) if takes_system else make(**kwargs)


def check_wall_s(verifier: Any, task: Task) -> float:
    """The wall-clock seconds ``verifier`` itself allows a check of ``task``: its :class:`~.base.Budget`'s (the
    task's ``timeout_s``, or the backstop of a CPU or z3 budget); ``timeout_s`` for a verifier without one.

    The pool's deadline for the check is this plus the context allowance, sent by the worker that runs it. Red
    team round 6: the pool answered TIMEOUT at ``timeout_s`` wall for a check the CPU-clocked verifier would
    still answer OK on a loaded machine, so the verdict depended on the load again.
    """
    budget = getattr(verifier, "budget", None)
    return budget.wall_s(task.timeout_s) if isinstance(budget, Budget) else float(task.timeout_s)


def classify_failure(exc: BaseException) -> Boundary:
    """The :class:`Boundary` of a failure raised by a verifier's ``check``."""
    if isinstance(exc, VerifierError):
        return Boundary.VERIFIER
    if isinstance(exc, (TaskFormatError, ProofgymError)):
        return Boundary.TASK
    if isinstance(exc, OSError):  # a binary that vanished, a temp dir that cannot be written
        return Boundary.VERIFIER
    return Boundary.INTERNAL


def _worker_main(conn: Connection, parent_pid: int, factory: VerifierFactory | str | None,
                 verifier_kwargs: dict[str, Any], system_kwargs: dict[str, dict[str, Any]], tmpdir: str,
                 measure_cpu: bool = False) -> None:
    """One worker process: answer checks from ``conn`` one at a time with warm verifiers (one per system)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    _set_parent_death_signal()
    if os.getppid() != parent_pid:  # the parent died before the death signal was armed
        os._exit(0)
    os.makedirs(tmpdir, exist_ok=True)
    os.environ["TMPDIR"] = tmpdir  # verifier temp dirs live under the pool's, removed even after a SIGKILL
    tempfile.tempdir = tmpdir
    make = _resolve_factory(factory)
    verifiers: dict[str, Any] = {}
    try:
        conn.send(("ready", os.getpid()))
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                break
            if message is None:
                break
            seq, task, proof = message
            try:
                verifier = verifiers.get(task.system)
                if verifier is None:
                    verifier = construct_verifier(make, task.system,
                                          {**verifier_kwargs, **system_kwargs.get(task.system, {})})
                    verifiers[task.system] = verifier
                prepare = getattr(verifier, "prepare", None)
                if prepare is not None:
                    prepare(task)  # the prover's own start-up is not part of the check's deadline
                conn.send(("running", seq, check_wall_s(verifier, task)))
                cpu_before = tree_cpu_s() if measure_cpu else 0.0
                result = verifier.check(task, proof)
                if measure_cpu and not result.cpu_s:
                    result = result.with_timing(result.wall_s, cpu_s=max(0.0, tree_cpu_s() - cpu_before))
                reply: tuple[str, int, CheckResult | HarnessFailure] = ("result", seq, result)
            except Exception as exc:  # noqa: BLE001 - every failure goes back as a value
                kind = classify_failure(exc)
                if kind is not Boundary.TASK:  # a broken verifier is rebuilt for the next check
                    broken = verifiers.pop(task.system, None)
                    if broken is not None:
                        with contextlib.suppress(Exception):
                            broken.close()
                reply = ("result", seq, HarnessFailure(kind, f"{type(exc).__name__}: {exc}".replace("\n", " ")[:2000]))
            conn.send(reply)
    finally:
        for verifier in verifiers.values():
            with contextlib.suppress(Exception):
                verifier.close()


# --------------------------------------------------------------------------------------------
# the local engine: pool side


@dataclass(eq=False)
class _Job:
    seq: int
    request_id: Any
    task: Task
    proof: str
    key: str
    future: Future[PoolResult]
    submitted: float
    attempts: int = 0
    started: float = 0.0
    deadline: float = 0.0
    check_deadline: float = 0.0  # when the verdict is due (0: the worker's verifier is not ready yet)
    running: bool = False
    watchdog_fired: bool = False
    cold: bool = False  # sent to a worker that did not have its context warm: its time includes the load
    ran_at: float = 0.0  # when the worker said it started the check (its verifier ready)


@dataclass(eq=False)
class _Slot:
    index: int
    proc: Any = None  # multiprocessing.Process
    conn: Connection | None = None
    pid: int = 0
    ready: bool = False
    generation: int = 0
    queue: deque[_Job] = field(default_factory=deque)
    current: _Job | None = None
    failed_starts: int = 0
    came_up: bool = False  # the current process said "ready" (a worker that dies before that failed to start)
    retry_at: float = 0.0
    broken: bool = False
    checks: int = 0
    tmpdir: str = ""
    # Routing keys whose contexts this worker process has loaded (it ran a check of them), most recent last:
    # what the scheduler takes to be warm there. Emptied when the process is replaced.
    warm: OrderedDict[str, None] = field(default_factory=OrderedDict)

    def holds(self, key: str) -> bool:
        """Whether this worker has ``key``'s context warm, or is loading it now."""
        return key in self.warm or (self.current is not None and self.current.key == key)

    @property
    def load(self) -> int:
        return len(self.queue) + (self.current is not None)

    @property
    def usable(self) -> bool:
        return not self.broken


#: What the scheduler takes a context load to cost before it has timed one (seconds): a stdlib context in a fresh
#: coqidetop is of this order; a warm check is milliseconds, so until loads are timed nothing warm elsewhere is stolen
#: for a queue of a few checks.
DEFAULT_LOAD_ESTIMATE_S = 1.0
_EWMA = 0.3  # weight of the newest time in the scheduler's estimates
#: An idle worker takes a check whose context only another worker has warm when the check would wait there longer
#: than this many loads of it: a second load costs memory and, on a machine with fewer free cores than workers, the
#: other workers' CPU too, and the times it is weighed with are averages.
STEAL_MARGIN = 2.0


class _Estimates:
    """What the scheduler knows of how long checks take: per system, an average warm check; per routing key
    (else per system), what loading its context adds to a check. Averages of the measured times (exponentially
    weighted: a machine's load changes), each from the worker's "running" to its answer."""

    def __init__(self, prior_load_s: float) -> None:
        self.prior_load_s = prior_load_s
        self._warm: dict[str, float] = {}
        self._cold_by_system: dict[str, float] = {}
        self._cold: OrderedDict[str, float] = OrderedDict()

    @staticmethod
    def _mix(old: float | None, new: float) -> float:
        return new if old is None else (1 - _EWMA) * old + _EWMA * new

    def record(self, job: _Job, seconds: float) -> None:
        system = job.task.system
        if job.cold:
            self._cold[job.key] = self._mix(self._cold.get(job.key), seconds)
            self._cold.move_to_end(job.key)
            if len(self._cold) > 65536:
                self._cold.popitem(last=False)
            self._cold_by_system[system] = self._mix(self._cold_by_system.get(system), seconds)
        else:
            self._warm[system] = self._mix(self._warm.get(system), seconds)

    def check_s(self, system: str) -> float:
        """A warm check's seconds (0 until one is timed: then no wait counts as long)."""
        return self._warm.get(system, 0.0)

    def load_s(self, key: str, system: str) -> float:
        """What loading ``key``'s context adds to a check: its cold time less a warm one."""
        cold = self._cold.get(key, self._cold_by_system.get(system))
        return self.prior_load_s if cold is None else max(0.0, cold - self.check_s(system))


def _default_watchdog(task: Task) -> float:
    # Far beyond any deadline a verifier sets itself (Coq: context load 600 s, check, 2 audit runs).
    return 4.0 * task.timeout_s + 900.0


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
        return f"killed by signal {-code}"
    return f"exit status {code}"


class LocalVerifierPool(VerifierPool):
    """Worker processes on this machine, each with warm verifiers; see the module docstring.

    Args:
        workers: Worker processes (each holds one warm verifier per system it has seen).
        verifier_kwargs: Options for every verifier (``make_verifier(system, **verifier_kwargs)``).
        system_kwargs: Per-system options on top, e.g. ``{"coq": {"audit": "always"}}``.
        max_pending: Most unfinished checks before :meth:`submit` blocks (default ``4 * workers``).
        max_retries: How many times a check is retried when its worker died under it (on a fresh worker) or its
            verifier broke (``verifier`` harness failure: on a freshly started verifier).
        watchdog_s: Seconds (or ``task -> seconds``) after which a silent check's worker is killed.
        spill_at: 0 (the default): where a check goes is decided when a worker is idle (see :meth:`_next_job`).
            N > 0: the older rule as well, at submit time: when a context's warm workers all have N checks, an idle
            worker takes the next one (it loads the context even when the warm worker would be done sooner).
        warm_contexts: How many contexts the scheduler takes a worker to keep warm (the Coq verifier's
            ``max_sessions``, default 4): a worker is taken to have lost the least recently used beyond these.
        load_estimate_s: What a context load is taken to cost until the pool has timed one.
        verifier_factory: ``(system, **kwargs) -> Verifier`` (or ``"module:attr"``; a factory without a
            ``system`` parameter is called with the kwargs only, as ``run_eval(verifier=...)`` does); make_verifier
            by default.
        start_timeout_s: How long the constructor waits for the workers to come up.
        mp_context: multiprocessing start method; ``spawn`` (the default) is safe with threads.
        measure_cpu: Fill ``CheckResult.cpu_s`` (when the verifier does not) with the CPU seconds of the
            worker's process tree during the check (a few ``/proc`` reads per check).
        context_allowance_s: Seconds beyond ``task.timeout_s`` a check may take (loading its context)
            before it is answered ``TIMEOUT``; see the module docstring.
        verdict_cache: Entries of the verdict cache (0: off): an identical (task, proof) is answered
            from it, or waits for the identical check already running (see ``verdict_cache.py``).
    """

    engine = "local"

    def __init__(
        self,
        workers: int = 2,
        *,
        verifier_kwargs: Mapping[str, Any] | None = None,
        system_kwargs: Mapping[str, Mapping[str, Any]] | None = None,
        max_pending: int | None = None,
        max_retries: int = 1,
        watchdog_s: float | Callable[[Task], float] | None = None,
        spill_at: int = 0,
        warm_contexts: int = 4,
        load_estimate_s: float = DEFAULT_LOAD_ESTIMATE_S,
        verifier_factory: VerifierFactory | str | None = None,
        start_timeout_s: float = 120.0,
        mp_context: str = "spawn",
        measure_cpu: bool = False,
        context_allowance_s: float = DEFAULT_CONTEXT_ALLOWANCE_S,
        verdict_cache: int = DEFAULT_VERDICT_CACHE_ENTRIES,
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if context_allowance_s < 0:
            raise ValueError(f"context_allowance_s must be >= 0, got {context_allowance_s}")
        self.context_allowance_s = float(context_allowance_s)
        super().__init__(max_pending=max_pending or 4 * workers, verdict_cache=verdict_cache)
        self.workers = int(workers)
        self.max_retries = int(max_retries)
        self.spill_at = max(0, int(spill_at))
        self.warm_contexts = max(1, int(warm_contexts))
        self._estimates = _Estimates(float(load_estimate_s))
        self._watchdog = watchdog_s if callable(watchdog_s) else (
            _default_watchdog if watchdog_s is None else (lambda _task, s=float(watchdog_s): s))
        self._factory = verifier_factory
        self._measure_cpu = bool(measure_cpu)
        self._verifier_kwargs = dict(verifier_kwargs or {})
        self._system_kwargs = {k: dict(v) for k, v in (system_kwargs or {}).items()}
        self._ctx = multiprocessing.get_context(mp_context)
        self._lock = threading.RLock()
        self._slots = [_Slot(i) for i in range(self.workers)]
        self._seq = itertools.count()
        self._stopping = False
        self._root = tempfile.mkdtemp(prefix="proofgym-pool-")
        self._counters: Counter[str] = Counter()
        self._verdicts: Counter[str] = Counter()
        self._harness: Counter[str] = Counter()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._up = threading.Event()
        # Workers are started (and restarted) only from this thread: PR_SET_PDEATHSIG ties a worker's life
        # to the thread that forked it, so a short-lived caller thread must never be that thread.
        self._thread = threading.Thread(target=self._run, name="proofgym-pool", daemon=True)
        self._thread.start()
        self._up.wait()
        if not self.wait_ready(start_timeout_s, all_workers=False):
            self.close()
            raise VerifierCrashed(f"no pool worker came up within {start_timeout_s:.0f} s")

    # -- public -------------------------------------------------------------------------------
    def wait_ready(self, timeout_s: float = 120.0, *, all_workers: bool = True) -> bool:
        """Wait until every worker (or at least one) is up; True when it is."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                ready = [s.ready for s in self._slots if s.usable]
            if ready and (all(ready) if all_workers else any(ready)):
                return True
            if self._stopping:
                return False
            time.sleep(0.01)
        return False

    def worker_pids(self) -> list[int]:
        """Pids of the live worker processes (their verifiers' processes are their descendants)."""
        with self._lock:
            return [s.pid for s in self._slots if s.ready and s.pid]

    def running(self) -> dict[Any, int]:
        """request id -> pid of the worker running it now (for tests and debugging)."""
        with self._lock:
            return {s.current.request_id: s.pid for s in self._slots if s.current is not None and s.ready}

    def stats(self) -> dict[str, Any]:
        with self._lock:
            per_worker = [{"index": s.index, "pid": s.pid, "ready": s.ready, "load": s.load, "checks": s.checks,
                           "broken": s.broken, "warm_contexts": len(s.warm)} for s in self._slots]
            return {
                "engine": self.engine,
                "workers": self.workers,
                "workers_alive": sum(s.ready for s in self._slots),
                "pending": self.pending,
                "queued": sum(len(s.queue) for s in self._slots),
                "running": sum(s.current is not None for s in self._slots),
                "submitted": self._counters["submitted"],
                "completed": self._counters["completed"],
                "retries": self._counters["retries"],
                "worker_restarts": self._counters["restarts"],
                "context_loads": self._counters["context_loads"],  # checks sent to a worker without their context warm
                "stolen": self._counters["stolen"],  # checks an idle worker took from another's queue
                "verdicts": dict(self._verdicts),
                "harness_failures": dict(self._harness),
                "per_worker": per_worker,
                "verdict_cache": self.cache_stats(),
            }

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._stopping = True
            orphans = [job for s in self._slots for job in ([s.current] if s.current else []) + list(s.queue)]
            for slot in self._slots:
                slot.queue.clear()
                slot.current = None
        for job in orphans:
            self._fail(job, "closed", "the verifier pool was closed before this check finished", "")
        self._wake()
        if threading.current_thread() is not self._thread:
            self._thread.join()
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)

    # -- submitting ---------------------------------------------------------------------------
    def _dispatch(self, request_id: Any, task: Task, proof: str, future: Future[PoolResult]) -> None:
        job = _Job(next(self._seq), request_id, task, proof, routing_key(task), future, time.monotonic())
        with self._lock:
            if self._stopping:
                raise PoolClosed("the local verifier pool is closed")
            slot = self._choose(job.key)
            if slot is None:
                self._fail(job, "internal", "every pool worker failed to start; see the log", "")
                return
            slot.queue.append(job)
            self._counters["submitted"] += 1
        self._wake()

    def _choose(self, key: str) -> _Slot | None:
        """The worker for a new check of ``key``: the least loaded of those that have it warm or queued, else the
        least loaded. (An idle worker may take it from there later: :meth:`_next_job`.)"""
        usable = [s for s in self._slots if s.usable]
        if not usable:
            return None
        holders = [s for s in usable if s.holds(key) or any(job.key == key for job in s.queue)]
        if holders:
            best = min(holders, key=lambda s: s.load)
            if not self.spill_at or best.load < self.spill_at:
                return best
            idle = [s for s in usable if s.load == 0 and s.ready and s not in holders]
            return idle[0] if idle else best
        offset = int(hashlib.blake2b(key.encode(), digest_size=4).hexdigest(), 16)
        return min(usable, key=lambda s: (s.load, (s.index + offset) % len(self._slots)))

    def _wake(self) -> None:
        with contextlib.suppress(OSError):  # full (already woken) or closed
            os.write(self._wake_w, b"x")

    # -- the pool thread ----------------------------------------------------------------------
    def _run(self) -> None:
        try:
            with self._lock:
                for slot in self._slots:
                    self._start(slot)
        finally:
            self._up.set()
        while True:
            try:
                if not self._loop_once():
                    break
            except Exception:  # noqa: BLE001 - the pool thread must survive anything
                logger.exception("verifier pool thread error")
                time.sleep(0.1)
        self._shutdown_workers()

    def _loop_once(self) -> bool:
        with self._lock:
            if self._stopping:
                return False
            conns = {s.conn: s for s in self._slots if s.conn is not None}
            sentinels = {s.proc.sentinel: s for s in self._slots if s.proc is not None}
        ready = wait_for_ready([*conns, *sentinels, self._wake_r], timeout=0.25)
        finished: list[tuple[_Job, PoolResult]] = []
        dead: list[_Slot] = []
        for obj in ready:
            if obj == self._wake_r:
                with contextlib.suppress(OSError):
                    while os.read(self._wake_r, 4096):
                        pass
            elif obj in conns:
                if not self._drain(conns[obj], finished):
                    dead.append(conns[obj])
            elif obj in sentinels:
                slot = sentinels[obj]
                if slot.conn is not None:
                    self._drain(slot, finished)  # a result sent just before dying still counts
                dead.append(slot)
        with self._lock:
            for slot in dict.fromkeys(dead):
                if slot.proc is not None:
                    self._on_death(slot, finished)
            now = time.monotonic()
            for slot in self._slots:  # a worker whose start failed (fork refused...) gets another try
                if slot.proc is None and not slot.broken and now >= slot.retry_at:
                    self._start(slot)
            self._check_watchdogs()
            self._check_deadlines(finished)
            self._feed_idle(finished)
        for job, result in finished:
            self._resolve(job, result)
        return True

    def _drain(self, slot: _Slot, finished: list[tuple[_Job, PoolResult]]) -> bool:
        """Read every message waiting from ``slot``; False when its pipe broke (the worker is gone)."""
        conn = slot.conn
        try:
            while conn is not None and conn.poll():
                message = conn.recv()
                with self._lock:
                    if message[0] == "ready":
                        slot.ready, slot.pid, slot.failed_starts, slot.came_up = True, int(message[1]), 0, True
                        continue
                    if message[0] == "running":  # with the wall-clock seconds the worker's verifier allows
                        if slot.current is not None and slot.current.seq == message[1]:
                            slot.current.ran_at = time.monotonic()
                            slot.current.check_deadline = slot.current.ran_at + message[2] + self.context_allowance_s
                        continue
                    _, seq, outcome = message  # the worker's CheckResult or HarnessFailure
                    job = slot.current
                    if job is None or job.seq != seq:
                        continue  # a job failed by close() or the watchdog meanwhile
                    if isinstance(outcome, CheckResult) and outcome.verdict is Verdict.OK and job.check_deadline \
                            and time.monotonic() > job.check_deadline:
                        outcome = self._late(job)  # never a late OK
                    slot.current = None
                    slot.checks += 1
                    if isinstance(outcome, CheckResult) and job.ran_at:
                        self._estimates.record(job, time.monotonic() - job.ran_at)
                    broke = isinstance(outcome, HarnessFailure) and outcome.boundary is Boundary.VERIFIER
                    if broke:  # the worker dropped that system's verifier
                        for key in [k for k in slot.warm if k.startswith(f"{job.task.system}:")]:
                            del slot.warm[key]
                    if broke and job.attempts <= self.max_retries:
                        # The prover broke under the check (killed, crashed): the worker has dropped that
                        # verifier, so the retry runs on a fresh one. A prover that cannot start fails again.
                        self._counters["retries"] += 1
                        slot.queue.appendleft(job)
                        continue
                    worker = f"local:{slot.index}:{slot.pid}"
                    now = time.monotonic()
                    finished.append((job, PoolResult(job.request_id, job.task.id, job.task.system, outcome,
                                                     job.attempts, worker, job.started - job.submitted,
                                                     now - job.submitted)))
        except (EOFError, OSError, ValueError, TypeError, AttributeError):  # torn message from a dying worker
            return False
        return True

    def _feed_idle(self, finished: list[tuple[_Job, PoolResult]]) -> None:
        """Send the next job to every idle worker (its own queue first, else stolen from the longest queue)."""
        for slot in self._slots:
            while slot.ready and slot.current is None and slot.conn is not None:
                job = self._next_job(slot)
                if job is None:
                    break
                job.attempts += 1
                job.started = time.monotonic()
                job.deadline = job.started + float(self._watchdog(job.task))
                job.check_deadline = 0.0
                job.ran_at = 0.0
                job.cold = job.key not in slot.warm
                if job.cold:
                    self._counters["context_loads"] += 1
                slot.warm[job.key] = None
                slot.warm.move_to_end(job.key)
                while len(slot.warm) > self.warm_contexts:
                    slot.warm.popitem(last=False)
                slot.current = job
                try:
                    slot.conn.send((job.seq, job.task, job.proof))
                except (OSError, ValueError):
                    # The worker is dying and never saw this job: requeue it without counting an attempt.
                    slot.current = None
                    job.attempts -= 1
                    slot.queue.appendleft(job)
                    slot.ready = False
                    break
                except Exception as exc:  # noqa: BLE001 - e.g. an unpicklable task
                    slot.current = None
                    finished.append((job, self._failure(job, "internal", f"cannot send the check: {exc}", "")))

    def _next_job(self, slot: _Slot) -> _Job | None:
        """The next check for the idle worker ``slot``: the head of its own queue, else one taken from another's.

        Taking a check whose context this worker does not have warm costs a context load (seconds for a stdlib
        file), so it takes, from the others' queues and in this order: a check whose context it has warm
        (free); one whose context no worker has warm (someone must load it: this worker, now; the other checks
        of that context queued elsewhere come along, so that it is loaded once); one whose context only other
        workers have warm, only when the wait before it there (the estimated rest of the running check and the
        checks ahead of it) is longer than loading its context here (:data:`STEAL_MARGIN` loads). Among each
        kind, the one that would wait longest.
        """
        while True:
            if slot.queue:
                job = slot.queue.popleft()
            else:
                job = self._steal(slot)
                if job is None:
                    return None
            if job.future.done():
                continue  # answered already (TIMEOUT at its deadline) while it waited for a retry
            if job.running or job.future.set_running_or_notify_cancel():
                job.running = True
                return job
            # cancelled before it started: drop it

    def _steal(self, thief: _Slot) -> _Job | None:
        victims = [s for s in self._slots if s is not thief and s.queue and (s.current is not None or not s.ready)]
        if not victims:
            return None
        now = time.monotonic()
        est = self._estimates
        warm_somewhere = {key for s in self._slots if s.usable for key in (*s.warm, *(
            [s.current.key] if s.current is not None else []))}
        best: tuple[int, float, _Slot, _Job] | None = None  # (kind: lower first, -wait, victim, job)
        for victim in victims:
            current = victim.current
            wait = 0.0 if current is None else max(0.0, est.check_s(current.task.system) + (
                est.load_s(current.key, current.task.system) if current.cold else 0.0) - (now - current.started))
            loaded = set(victim.warm) | ({current.key} if current is not None else set())
            for job in victim.queue:
                system = job.task.system
                if thief.holds(job.key):
                    kind = 0
                elif job.key not in warm_somewhere:
                    kind = 1
                elif wait > STEAL_MARGIN * est.load_s(job.key, system):
                    kind = 2
                else:
                    kind = 3  # not worth a load
                if kind < 3 and (best is None or (kind, -wait) < best[:2]):
                    best = (kind, -wait, victim, job)
                wait += est.check_s(system) + (0.0 if job.key in loaded else est.load_s(job.key, system))
                loaded.add(job.key)
        if best is None:
            return None
        kind, _, victim, job = best
        victim.queue.remove(job)
        self._counters["stolen"] += 1
        if kind == 1:  # the rest of that context's queued checks follow it, so that it is loaded once
            for other in self._slots:
                if other is not thief:
                    moving = [j for j in other.queue if j.key == job.key]
                    for j in moving:
                        other.queue.remove(j)
                    thief.queue.extend(moving)
        return job

    def _on_death(self, slot: _Slot, finished: list[tuple[_Job, PoolResult]]) -> None:
        proc = slot.proc
        if proc.is_alive():  # its pipe broke but it lingers: make sure it is gone before replacing it
            proc.kill()
        proc.join(timeout=5)
        code = proc.exitcode
        came_up = slot.came_up
        job = slot.current
        slot.current = None
        if slot.conn is not None:
            with contextlib.suppress(OSError):
                slot.conn.close()
        slot.proc, slot.conn, slot.ready, slot.pid = None, None, False, 0
        slot.generation += 1
        slot.warm.clear()
        if slot.tmpdir:
            shutil.rmtree(slot.tmpdir, ignore_errors=True)
        if job is not None:
            if job.watchdog_fired:
                finished.append((job, self._failure(
                    job, "watchdog", f"no answer within {job.deadline - job.started:.0f} s; the worker was killed",
                    slot)))
            elif job.attempts <= self.max_retries:
                self._counters["retries"] += 1
                slot.queue.appendleft(job)  # the replacement (or an idle worker) runs it first
            else:
                finished.append((job, self._failure(
                    job, "worker_died", f"the worker died running this check on {job.attempts} workers "
                    f"(last: {_describe_exit(code)})", slot)))
        if self._stopping:
            return
        slot.failed_starts = 0 if came_up else slot.failed_starts + 1
        if slot.failed_starts >= 3:
            logger.error("verifier pool worker %d failed to start 3 times; giving up on it", slot.index)
            slot.broken = True
            stranded = list(slot.queue)
            slot.queue.clear()
            for queued in stranded:
                target = self._choose(queued.key)
                if target is None:
                    finished.append((queued, self._failure(queued, "internal", "every pool worker failed to start",
                                                           slot)))
                else:
                    target.queue.append(queued)
            return
        self._counters["restarts"] += 1
        self._start(slot)

    def _check_watchdogs(self) -> None:
        now = time.monotonic()
        for slot in self._slots:
            job = slot.current
            if job is not None and not job.watchdog_fired and now > job.deadline and slot.proc is not None:
                job.watchdog_fired = True
                logger.warning("check %r on worker %d ran past its watchdog; killing the worker", job.request_id,
                               slot.index)
                with contextlib.suppress(OSError, AttributeError):
                    slot.proc.kill()

    def _check_deadlines(self, finished: list[tuple[_Job, PoolResult]]) -> None:
        """Answer TIMEOUT for a check past its deadline; its worker goes on, and its late answer is dropped."""
        now = time.monotonic()
        for slot in self._slots:
            job = slot.current
            if job is not None and job.check_deadline and now > job.check_deadline and not job.future.done() \
                    and all(queued is not job for queued, _ in finished):
                finished.append((job, PoolResult(job.request_id, job.task.id, job.task.system, self._late(job),
                                                 job.attempts, f"local:{slot.index}:{slot.pid}",
                                                 job.started - job.submitted, now - job.submitted)))

    def _late(self, job: _Job) -> CheckResult:
        return CheckResult(Verdict.TIMEOUT, (
            f"the check ran past its deadline: timeout_s={job.task.timeout_s:g} plus {self.context_allowance_s:g} s "
            f"allowed for loading the context",), error_category=ErrorCategory.TIMEOUT, backend="pool")

    def _start(self, slot: _Slot) -> None:
        parent, child = self._ctx.Pipe(duplex=True)
        slot.tmpdir = os.path.join(self._root, f"w{slot.index}-{slot.generation}")
        proc = self._ctx.Process(
            target=_worker_main,
            args=(child, os.getpid(), self._factory, self._verifier_kwargs, self._system_kwargs, slot.tmpdir,
                  self._measure_cpu),
            name=f"proofgym-verifier-{slot.index}",
            daemon=True,
        )
        try:
            proc.start()
        except Exception:  # noqa: BLE001 - cannot fork/spawn now: count it like a worker that died at start
            logger.exception("cannot start verifier pool worker %d", slot.index)
            parent.close()
            child.close()
            slot.failed_starts += 1
            slot.retry_at = time.monotonic() + 1.0
            if slot.failed_starts >= 3:
                slot.broken = True
            return
        child.close()
        slot.proc, slot.conn, slot.ready, slot.pid, slot.came_up = proc, parent, False, 0, False

    def _shutdown_workers(self) -> None:
        with self._lock:
            slots = list(self._slots)
        for slot in slots:
            if slot.conn is not None:
                with contextlib.suppress(OSError, ValueError):
                    slot.conn.send(None)
        deadline = time.monotonic() + 10.0
        for slot in slots:
            if slot.proc is not None:
                slot.proc.join(timeout=max(0.0, deadline - time.monotonic()))
                if slot.proc.is_alive():
                    slot.proc.kill()
                    slot.proc.join(timeout=5)
            if slot.conn is not None:
                with contextlib.suppress(OSError):
                    slot.conn.close()
            slot.proc, slot.conn, slot.ready = None, None, False
        shutil.rmtree(self._root, ignore_errors=True)

    # -- results ------------------------------------------------------------------------------
    def _failure(self, job: _Job, kind: str, text: str, slot: _Slot | str) -> PoolResult:
        worker = f"local:{slot.index}:{slot.pid}" if isinstance(slot, _Slot) else slot
        now = time.monotonic()
        return PoolResult(job.request_id, job.task.id, job.task.system, HarnessFailure.of(kind, text), job.attempts,
                          worker, (job.started or now) - job.submitted, now - job.submitted)

    def _fail(self, job: _Job, kind: str, text: str, worker: str) -> None:
        self._resolve(job, self._failure(job, kind, text, worker))

    def _resolve(self, job: _Job, result: PoolResult) -> None:
        if job.future.done():
            return
        if not job.running and not job.future.set_running_or_notify_cancel():
            return  # cancelled before it started
        job.running = True
        try:
            job.future.set_result(result)
        except InvalidStateError:  # resolved by another thread meanwhile (close() racing a result)
            return
        with self._lock:
            self._counters["completed"] += 1
            if result.result is None:
                self._harness[result.error_kind] += 1
            else:
                self._verdicts[result.result.verdict.value] += 1


# --------------------------------------------------------------------------------------------
# choosing an engine


def make_pool(engine: str = "local", *, workers: int = 2, **kwargs: Any) -> VerifierPool:
    """A pool by engine name: ``local`` (:class:`LocalVerifierPool`) or ``ray`` (needs the ``ray`` extra).

    For ``ray``, ``workers`` is the worker processes per actor (one actor per node and system);
    ``systems=("coq",)`` and ``address=`` pass through.
    """
    if engine == "local":
        kwargs.pop("systems", None)
        kwargs.pop("address", None)
        return LocalVerifierPool(workers, **kwargs)
    if engine not in _ENGINES:
        raise ValueError(f"unknown pool engine {engine!r}; use one of {', '.join(('local', *_ENGINES))}")
    module, _, name = _ENGINES[engine].partition(":")
    return getattr(importlib.import_module(module), name)(workers_per_actor=workers, **kwargs)


#: Engines built on the local pool, by string entry point (as Gymnasium registers envs): ``ray_pool``
#: imports this module, so naming it here instead of importing it keeps the dependency one way, and
#: ``ray`` stays an optional extra that only ``make_pool("ray")`` needs.
_ENGINES = {"ray": "proofgym.envs.verifiers.ray_pool:RayVerifierPool"}
