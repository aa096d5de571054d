"""Gymnasium environments, verdicts, rewards and verifier backends.

Importing this package registers the environment ids; it starts no prover.
"""

from __future__ import annotations

from proofgym.envs.errors import (
    InvalidSubmission,
    ProofgymError,
    ProverNotFound,
    TaskFormatError,
    VerifierCrashed,
    VerifierError,
)
from proofgym.envs.types import CheckResult, ErrorCategory, Goal, Task, Verdict

__all__ = [
    "CheckResult",
    "ErrorCategory",
    "Goal",
    "InvalidSubmission",
    "ProofgymError",
    "ProverNotFound",
    "Task",
    "TaskFormatError",
    "Verdict",
    "VerifierCrashed",
    "VerifierError",
    "register_envs",
]


def register_envs() -> None:
    """Register ``proofgym/*`` ids with Gymnasium (idempotent, string entry points)."""
    from gymnasium.envs.registration import register, registry

    if "proofgym/WholeProof-v0" not in registry:
        register(id="proofgym/WholeProof-v0", entry_point="proofgym.envs.proof_env:WholeProofEnv")
    if "proofgym/Tactic-v0" not in registry:
        register(id="proofgym/Tactic-v0", entry_point="proofgym.envs.tactic_env:TacticEnv")


register_envs()
