"""The old path of :mod:`proofgym.envs.verifiers.coq.proof` (kept for one release; import from there)."""

from proofgym.envs.verifiers.coq.proof import (
    HOLE_TACTICS,
    STATEMENT_RE,
    VERNACULAR,
    VM_TOKENS,
    LibraryRequest,
    NormalizedProof,
    ProofRejected,
    normalize_proof,
)

__all__ = [
    "HOLE_TACTICS",
    "LibraryRequest",
    "NormalizedProof",
    "ProofRejected",
    "STATEMENT_RE",
    "VERNACULAR",
    "VM_TOKENS",
    "normalize_proof",
]
