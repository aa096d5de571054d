"""The old path of :mod:`proofgym.envs.verifiers.dafny.equiv` (kept for one release; import from there)."""

from proofgym.envs.verifiers.dafny.equiv import (
    LEMMA_NOTE,
    EquivalenceResult,
    equivalence_program,
    sanitize_name,
)

__all__ = [
    "EquivalenceResult",
    "LEMMA_NOTE",
    "equivalence_program",
    "sanitize_name",
]
