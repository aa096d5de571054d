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
:class:`~proofgym.envs.verifiers.pool.ray_engine.RayVerifierPool` (one actor per node and system, each a
local pool). :func:`make_pool` picks one by name. :class:`InProcessPool` keeps the contract with threads over
verifiers the caller already holds.

Modules: ``base`` (the interface and its values), ``local`` (the local engine: workers and their scheduler),
``ray_engine``, ``inprocess`` and ``cache`` (the verdict cache). Callers import from this package.

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
- an identical (task, proof) checked again: answered from the verdict cache (``cache.py``),
  or, while the first is still running, by the first's answer; a harness failure or a TIMEOUT is
  never stored, and checks that waited on a first that broke get checks of their own;
- a check that never answers: the worker is killed at a watchdog deadline far beyond the verifier's
  own, and the check is a ``watchdog`` harness failure (a hang would hang again: no retry);
- ``close()`` is idempotent, stops the workers (SIGKILL after a grace period), reaps them, and
  removes their temp dirs; workers die with the pool's process (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import importlib
from typing import Any

from proofgym.envs.verifiers.pool.base import (
    DEFAULT_CONTEXT_ALLOWANCE_S,
    HARNESS_KINDS,
    Boundary,
    CheckRequest,
    HarnessFailure,
    PoolClosed,
    PoolFull,
    PoolResult,
    PoolVerifier,
    VerifierPool,
    routing_key,
)
from proofgym.envs.verifiers.pool.inprocess import InProcessPool
from proofgym.envs.verifiers.pool.local import (
    LocalVerifierPool,
    check_wall_s,
    classify_failure,
    construct_verifier,
)

__all__ = [
    "DEFAULT_CONTEXT_ALLOWANCE_S",
    "HARNESS_KINDS",
    "Boundary",
    "CheckRequest",
    "HarnessFailure",
    "InProcessPool",
    "LocalVerifierPool",
    "PoolClosed",
    "PoolFull",
    "PoolResult",
    "PoolVerifier",
    "VerifierPool",
    "check_wall_s",
    "classify_failure",
    "construct_verifier",
    "make_pool",
    "routing_key",
]


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


#: Engines built on the local pool, by string entry point (as Gymnasium registers envs): ``ray_engine``
#: imports this module, so naming it here instead of importing it keeps the dependency one way, and
#: ``ray`` stays an optional extra that only ``make_pool("ray")`` needs.
_ENGINES = {"ray": "proofgym.envs.verifiers.pool.ray_engine:RayVerifierPool"}
