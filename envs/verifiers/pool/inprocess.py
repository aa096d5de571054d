"""A verifier pool in this process: threads over verifiers it is given (or makes), no worker processes.

For callers that already hold a warm verifier and want the pool's contract: a suite builder
with a HOL Light server that took minutes to load, or a Dafny verifier it also uses for
symbols. Results are the same :class:`~proofgym.envs.verifiers.pool.PoolResult` values as
the local and Ray engines give: a verdict, or a :class:`~proofgym.envs.verifiers.pool.HarnessFailure`
at its boundary (a broken task is ``task``, a broken prover ``verifier``). The pool closes
only the verifiers it made.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from proofgym.envs.types import Task
from proofgym.envs.verifiers.base import Verifier, make_verifier
from proofgym.envs.verifiers.pool.base import Boundary, HarnessFailure, PoolClosed, PoolResult, VerifierPool
from proofgym.envs.verifiers.pool.local import classify_failure


class InProcessPool(VerifierPool):
    """``workers`` threads checking on ``verifiers`` (by system); a system without one gets ``make_verifier``.

    A verifier that checks one proof at a time (Coq, Dafny) serialises the threads on itself;
    HOL Light's verifier runs them in parallel worker processes of its server.
    """

    engine = "inprocess"

    def __init__(self, verifiers: Mapping[str, Verifier] | None = None, *, workers: int = 1,
                 system_kwargs: Mapping[str, Mapping[str, Any]] | None = None, max_pending: int = 256,
                 verdict_cache: int = 0) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        super().__init__(max_pending=max_pending, verdict_cache=verdict_cache)
        self._verifiers: dict[str, Verifier] = dict(verifiers or {})
        self._owned: set[str] = set()
        self._system_kwargs = {k: dict(v) for k, v in (system_kwargs or {}).items()}
        self._make_lock = threading.Lock()
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="proofgym-inprocess")
        self._verdicts: Counter[str] = Counter()
        self._harness: Counter[str] = Counter()
        self._stats_lock = threading.Lock()
        self._queued: dict[int, tuple[Any, Task, Future[PoolResult]]] = {}  # not yet started, for close()

    def _verifier(self, system: str) -> Verifier:
        with self._make_lock:
            if system not in self._verifiers:
                self._verifiers[system] = make_verifier(system, **self._system_kwargs.get(system, {}))
                self._owned.add(system)
            return self._verifiers[system]

    def _dispatch(self, request_id: Any, task: Task, proof: str, future: Future[PoolResult]) -> None:
        submitted = time.monotonic()

        def run() -> None:
            with self._stats_lock:
                self._queued.pop(id(future), None)
            if not future.set_running_or_notify_cancel():
                return
            started = time.monotonic()
            try:
                outcome: Any = self._verifier(task.system).check(task, proof)
            except Exception as exc:  # noqa: BLE001 - every failure is a value, as in the other engines
                message = f"{type(exc).__name__}: {exc}".replace("\n", " ")[:2000]
                outcome = HarnessFailure.of(classify_failure(exc), message)
            with self._stats_lock:
                if isinstance(outcome, HarnessFailure):
                    self._harness[outcome.boundary.value] += 1
                else:
                    self._verdicts[outcome.verdict.value] += 1
            now = time.monotonic()
            future.set_result(PoolResult(request_id, task.id, task.system, outcome, 1, f"inprocess:{task.system}",
                                         started - submitted, now - submitted))

        with self._stats_lock:
            self._queued[id(future)] = (request_id, task, future)
        try:
            self._executor.submit(run)
        except RuntimeError:  # the executor was shut down by close()
            raise PoolClosed("the inprocess verifier pool is closed") from None

    def close(self) -> None:
        """Wait for running checks, then close the verifiers this pool made. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._executor.shutdown(wait=True, cancel_futures=True)  # running checks finish; queued ones do not start
        with self._stats_lock:
            stranded, self._queued = list(self._queued.values()), {}
        for request_id, task, future in stranded:
            if future.set_running_or_notify_cancel():
                future.set_result(PoolResult(request_id, task.id, task.system, HarnessFailure(
                    Boundary.CLOSED, "the verifier pool was closed before this check finished"), 0))
        for system in self._owned:
            with contextlib.suppress(Exception):
                self._verifiers[system].close()

    def stats(self) -> dict[str, Any]:
        with self._stats_lock:
            return {"engine": self.engine, "pending": self.pending, "verdicts": dict(self._verdicts),
                    "harness_failures": dict(self._harness)}
