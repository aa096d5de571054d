"""Dafny: the verifier, its lexer, integrity checks (specification anchoring), output parser, equivalence, server client.

``proofgym.envs.verifiers.dafny`` was the verifier module before the prover got its own package;
its public names are still importable from here (for one release; import from :mod:`.verifier`).
"""

from proofgym.envs.verifiers.dafny.verifier import (
    DAFNY_DIR,
    INSTALL_HINT,
    PINNED_Z3,
    DafnyConfig,
    DafnyVerifier,
    dafny_available,
    find_z3,
)

__all__ = ["DAFNY_DIR", "INSTALL_HINT", "PINNED_Z3", "DafnyConfig", "DafnyVerifier", "dafny_available", "find_z3"]
