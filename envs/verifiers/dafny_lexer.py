"""The old path of :mod:`proofgym.envs.verifiers.dafny.lexer` (kept for one release; import from there)."""

from proofgym.envs.verifiers.dafny.lexer import (
    CLAUSE_KEYWORDS,
    DECL_KEYWORDS,
    DafnyLexError,
    Token,
    attribute_spans,
    matching_close,
    matching_open,
    normalize_source,
    tokenize,
)

__all__ = [
    "CLAUSE_KEYWORDS",
    "DECL_KEYWORDS",
    "DafnyLexError",
    "Token",
    "attribute_spans",
    "matching_close",
    "matching_open",
    "normalize_source",
    "tokenize",
]
