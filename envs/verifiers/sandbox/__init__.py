"""Untrusted prover jobs under limits, and the processes that run them.

- :mod:`~proofgym.envs.verifiers.sandbox.bwrap`: :class:`Sandbox`, one job or one long-lived process in
  bubblewrap's namespaces with rlimits and a pids cgroup, killed as a whole tree at its deadline;
- :mod:`~proofgym.envs.verifiers.sandbox.warm`: :class:`~proofgym.envs.verifiers.sandbox.warm.WarmProcess`,
  a prover kept running inside the sandbox and asked many questions (coqidetop, DafnyServer, HOL Light's
  fork server), with its deadline, whole-tree kill and recycling rule;
- :mod:`~proofgym.envs.verifiers.sandbox.procfs`: process trees from ``/proc`` (descendants, memory, CPU seconds),
  which the sandbox, the pool and the benchmarks measure with.
"""

from __future__ import annotations

from proofgym.envs.verifiers.sandbox.bwrap import (
    DEFAULT_LIMITS,
    MAX_CAPTURED_BYTES,
    Sandbox,
    SandboxedProcess,
    SandboxLimits,
    SandboxRun,
    bwrap_available,
)

__all__ = [
    "DEFAULT_LIMITS",
    "MAX_CAPTURED_BYTES",
    "Sandbox",
    "SandboxLimits",
    "SandboxRun",
    "SandboxedProcess",
    "bwrap_available",
]
