"""The old path of :mod:`proofgym.envs.verifiers.coq.idetop` (kept for one release; import from there)."""

from proofgym.envs.verifiers.coq.idetop import (
    CallTimeout,
    GoalSnapshot,
    IdeTop,
    ProcessDied,
    Reply,
    richpp_text,
)

__all__ = [
    "CallTimeout",
    "GoalSnapshot",
    "IdeTop",
    "ProcessDied",
    "Reply",
    "richpp_text",
]
