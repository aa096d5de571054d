"""The old path of :mod:`proofgym.envs.verifiers.coq.tactic` (kept for one release; import from there)."""

from proofgym.envs.verifiers.coq.tactic import (
    ADMIT,
    CoqTacticSession,
    Hole,
    Localization,
    localize,
)

__all__ = [
    "ADMIT",
    "CoqTacticSession",
    "Hole",
    "Localization",
    "localize",
]
