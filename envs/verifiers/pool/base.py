"""The pool interface and its values: what every engine takes and gives back.

A check goes in as a :class:`CheckRequest` (or a ``(task, proof)`` tuple) and comes back as a :class:`PoolResult`:
a :class:`~proofgym.envs.types.CheckResult`, or a :class:`HarnessFailure` at its :class:`Boundary`. Engines
subclass :class:`VerifierPool` and implement ``_dispatch``; the package docstring says what each engine adds.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import enum
import functools
import hashlib
import itertools
import logging
import queue
import threading
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import Any

from proofgym.envs.errors import ProofgymError, TaskFormatError, VerifierCrashed, VerifierError
from proofgym.envs.systems import SPECS
from proofgym.envs.types import CheckResult, ErrorCategory, Task, Verdict
from proofgym.envs.verifiers.pool.cache import (
    DEFAULT_VERDICT_CACHE_ENTRIES,
    VerdictCache,
    answer_from,
    cache_key,
    cacheable,
)

logger = logging.getLogger(__name__)

class Boundary(str, enum.Enum):
    """The boundary a harness failure crossed: which part of the harness broke (``HarnessFailure.boundary``)."""

    VERIFIER = "verifier"  # the verifier raised (a prover missing or crashed, twice when retried)
    TASK = "task"  # the task is broken (its context does not load): a fault of the suite, not the proof
    WORKER_DIED = "worker_died"  # the worker process died under the check, twice
    WATCHDOG = "watchdog"  # the check ran past its deadline plus the allowance and the worker was killed
    INTERNAL = "internal"  # the pool itself failed (a bug: say so in an issue)
    CLOSED = "closed"  # the pool was closed before the check finished


#: Kinds of harness failure a :class:`PoolResult` can carry (``error_kind`` in its JSON row): the :class:`Boundary` values.
HARNESS_KINDS = tuple(b.value for b in Boundary)


@dataclass(frozen=True)
class HarnessFailure:
    """No verdict: the harness broke at ``boundary``; ``message`` is one line saying what broke."""

    boundary: Boundary
    message: str

    @classmethod
    def of(cls, kind: str | Boundary, message: str) -> HarnessFailure:
        return cls(Boundary(kind), message)

    def __str__(self) -> str:
        """The one line a log, a feedback turn or an exception shows: the boundary, then what broke."""
        return f"{self.boundary.value}: {self.message}"

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
            raise VerifierCrashed(str(self.outcome))
        return self.result

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the verdict fields of :meth:`CheckResult.to_dict`, or ``harness_error``/``error_kind``."""
        row: dict[str, Any] = {"request_id": self.request_id, "task_id": self.task_id, "system": self.system,
                               "attempts": self.attempts, "worker": self.worker}
        if isinstance(self.outcome, HarnessFailure):
            row.update(verdict=None, harness_error=self.outcome.message, error_kind=self.outcome.boundary.value)
        else:
            row.update(self.outcome.to_dict())
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

    # -- the verdict cache (see cache.py) ---------------------------------------------
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
        future.add_done_callback(functools.partial(self._first_done, key, task, proof))
        return False

    def _first_done(self, key: str, task: Task, proof: str, done: Future[PoolResult]) -> None:
        first = None if done.cancelled() else done.result()
        verdict = first.outcome if first is not None and isinstance(first.outcome, CheckResult) else None
        with self._followers_lock:
            if self.verdict_cache is not None and verdict is not None and cacheable(verdict):
                self.verdict_cache.put(key, verdict)
            followers = self._followers.pop(key, [])
        for rid, future in followers:
            if first is not None and verdict is not None:  # a verdict (a TIMEOUT too: same input,
                # same deadline, run at the same time) answers the checks that waited for it
                if future.set_running_or_notify_cancel():
                    future.set_result(replace(first, request_id=rid, outcome=answer_from(verdict),
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


