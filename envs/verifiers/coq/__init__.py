"""Coq: the whole-proof verifier, its lexer, proof normaliser, ``coqidetop`` client and tactic session.

``proofgym.envs.verifiers.coq`` was the verifier module before the prover got its own package;
its public names are still importable from here (for one release; import from :mod:`.verifier`).
"""

from proofgym.envs.verifiers.coq.errors import ContextLoadError, categorize
from proofgym.envs.verifiers.coq.verifier import (
    HAMMER_LIBEXEC,
    HAMMER_PRELUDE,
    MAX_TERM_IDENTS,
    PRIMITIVE_MODULES,
    CoqConfig,
    CoqVerifier,
    audit_context,
    lemma_name,
    parse_assumptions,
    prover_version,
)

__all__ = [
    "HAMMER_LIBEXEC",
    "HAMMER_PRELUDE",
    "MAX_TERM_IDENTS",
    "PRIMITIVE_MODULES",
    "ContextLoadError",
    "CoqConfig",
    "CoqVerifier",
    "audit_context",
    "categorize",
    "lemma_name",
    "parse_assumptions",
    "prover_version",
]
