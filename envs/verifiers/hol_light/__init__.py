"""HOL Light: the fork-server verifier (with its OCaml side here: boot.ml, server.ml, pgsys), lexer, normaliser, tactic session.

``proofgym.envs.verifiers.hol_light`` was the verifier module before the prover got its own package;
its public names are still importable from here (for one release; import from :mod:`.verifier`).
"""

from proofgym.envs.verifiers.hol_light.proof import goal_text, normalize_proof
from proofgym.envs.verifiers.hol_light.verifier import (
    DEFAULT_HOL_DIR,
    SERVER_SOURCES,
    BaseContext,
    ContextLoadError,
    HolLightConfig,
    HolLightServer,
    HolLightVerifier,
    build_stubs,
    context_key,
    hol_light_installed,
    hol_light_version,
)

__all__ = [
    "DEFAULT_HOL_DIR",
    "SERVER_SOURCES",
    "BaseContext",
    "ContextLoadError",
    "HolLightConfig",
    "HolLightServer",
    "HolLightVerifier",
    "build_stubs",
    "context_key",
    "goal_text",
    "hol_light_installed",
    "hol_light_version",
    "normalize_proof",
]
