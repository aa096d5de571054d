"""Proof states and step results shared by the tactic sessions of every prover (Coq, HOL Light)."""

from __future__ import annotations

from dataclasses import dataclass

from proofgym.envs.types import ErrorCategory, Goal, Verdict


@dataclass(frozen=True)
class TacticState:
    """One node of the proof-state tree."""

    state_id: int
    goals: tuple[Goal, ...]  # focused goals, as the prover prints them
    background: tuple[Goal, ...] = ()  # unfocused goals (Coq's other bullets)
    shelved: int = 0
    finished: bool = False  # no goal of any kind remains

    def pretty(self, max_goals: int = 5) -> str:
        if self.finished:
            return "No more goals."
        if not self.goals:
            return (f"This subproof is complete; {len(self.background)} unfocused goal(s) remain: "
                    "focus the next one with a bullet (-, +, *) or close a brace (}).")
        shown = "\n\n".join(f"Goal {i + 1}:\n{g.pretty()}" for i, g in enumerate(self.goals[:max_goals]))
        more = len(self.goals) - max_goals
        return shown + (f"\n\n(+{more} more focused goals)" if more > 0 else "")


@dataclass(frozen=True)
class StepResult:
    """What one step did. On failure ``state`` is the unchanged starting state."""

    ok: bool
    state: TacticState
    error: str = ""
    verdict: Verdict | None = None  # FAIL (tactic failed), ERROR (does not parse), CHEATING (whitelist), TIMEOUT
    category: ErrorCategory = ErrorCategory.NONE
    reasons: tuple[str, ...] = ()
