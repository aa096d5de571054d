"""The local engine: worker processes on this machine, each with warm verifiers (one per system).

See the package docstring (:mod:`proofgym.envs.verifiers.pool`) for the scheduling and the faults it handles.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import importlib
import inspect
import itertools
import logging
import multiprocessing
import os
import shutil
import signal
import tempfile
import threading
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as wait_for_ready
from typing import Any

from proofgym.envs.errors import ProofgymError, TaskFormatError, VerifierCrashed, VerifierError
from proofgym.envs.types import CheckResult, ErrorCategory, Task, Verdict
from proofgym.envs.verifiers.base import Budget
from proofgym.envs.verifiers.pool.base import (
    DEFAULT_CONTEXT_ALLOWANCE_S,
    Boundary,
    HarnessFailure,
    PoolClosed,
    PoolResult,
    VerifierPool,
    routing_key,
)
from proofgym.envs.verifiers.pool.cache import (
    DEFAULT_VERDICT_CACHE_ENTRIES,
)
from proofgym.envs.verifiers.sandbox.procfs import tree_cpu_s

logger = logging.getLogger(__name__)


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
            from it, or waits for the identical check already running (see ``cache.py``).
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
            if isinstance(result.outcome, HarnessFailure):
                self._harness[result.outcome.boundary.value] += 1
            else:
                self._verdicts[result.outcome.verdict.value] += 1


