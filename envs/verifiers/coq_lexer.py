"""The old path of :mod:`proofgym.envs.verifiers.coq.lexer` (kept for one release; import from there)."""

from proofgym.envs.verifiers.coq.lexer import (
    CoqLexError,
    Sentence,
    iter_sentences,
    open_blocks,
    split_sentences,
    strip_attributes,
    strip_comments,
)

__all__ = [
    "CoqLexError",
    "Sentence",
    "iter_sentences",
    "open_blocks",
    "split_sentences",
    "strip_attributes",
    "strip_comments",
]
