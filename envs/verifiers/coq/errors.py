"""What Coq's failures mean: a message's repair category, and (every prover's) a context that does not load.

Shared by the whole-proof verifier and the tactic session, which both load contexts and read
Coq's error messages.
"""

from __future__ import annotations

from proofgym.envs.types import ErrorCategory
from proofgym.envs.verifiers.base import ContextLoadError

__all__ = ["ContextLoadError", "categorize"]


def categorize(message: str) -> ErrorCategory:
    """Map a Coq error message to a repair category (Selene's undefined/logic split)."""
    m = message.lower()
    if "syntax error" in m or "lexer" in m or "unterminated" in m or "unexpected end of" in m:
        return ErrorCategory.SYNTAX
    if ("was not found in the current environment" in m or "unbound" in m or "not a defined object" in m
            or ("no such" in m and "goal" not in m) or ("unknown" in m and "tactic" not in m)):
        return ErrorCategory.UNDEFINED
    if "timeout" in m or "interrupt" in m:
        return ErrorCategory.TIMEOUT
    if "out of memory" in m or "stack overflow" in m:
        return ErrorCategory.RESOURCE
    if ("has type" in m and "expected" in m) or "ill-typed" in m or "cannot be applied" in m:
        return ErrorCategory.TYPE
    return ErrorCategory.LOGIC
