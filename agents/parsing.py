"""Moved to :mod:`proofgym.envs.parsing` (the verifiers and the service parse replies too, and
``envs/`` imports nothing from ``agents/``); this re-export stays for one release."""

from proofgym.envs.parsing import (  # noqa: F401 - the old public names
    ParsedProof,
    last_code_block,
    normalize_unicode,
    parse_proof,
    statement_to_strip,
)

__all__ = ["ParsedProof", "last_code_block", "normalize_unicode", "parse_proof", "statement_to_strip"]
