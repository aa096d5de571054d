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
    "ENV_IDS",
    "register_envs",
]


#: The ids, their entry points, and the ``TimeLimit`` ``gymnasium.make`` puts around each. The env's own
#: budget (``max_attempts``, ``max_steps``) truncates an episode first; the TimeLimit is the hard cap above
#: any budget a harness uses (Selene 2 attempts, SkillForge 5), raised with ``make(..., max_episode_steps=N)``.
ENV_IDS: dict[str, tuple[str, int]] = {
    "proofgym/WholeProof-v0": ("proofgym.envs.proof_env:WholeProofEnv", 16),
    "proofgym/Tactic-v0": ("proofgym.envs.tactic_env:TacticEnv", 1000),
}


def register_envs() -> None:
    """Register the ``proofgym/*`` ids with Gymnasium (string entry points; a second call does nothing).

    ``nondeterministic=True``: a verdict near a deadline (TIMEOUT or not) depends on the machine's load,
    so the same seed and actions need not give the same episode.
    """
    from gymnasium.envs.registration import register, registry

    for env_id, (entry_point, max_episode_steps) in ENV_IDS.items():
        if env_id not in registry:
            register(id=env_id, entry_point=entry_point, max_episode_steps=max_episode_steps, nondeterministic=True)


register_envs()  # importing proofgym (or proofgym.envs) registers the ids, once
