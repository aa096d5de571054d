"""Stepwise proving, the same for every prover: proof states, the closed union of step outcomes, the session protocol.

A step ends in exactly one of three ways, as LeanDojo's ``TacticState | ProofFinished | LeanError``:

- :class:`TacticState`: the proof goes on (the new state, with its goals);
- :class:`ProofFinished`: no goal of any kind remains (the path is then re-checked by the verifier's
  whole-proof ``check`` before it earns reward: both modes give the same verdict);
- :class:`TacticError`: the step did not apply (it failed, does not parse, was refused, or timed out);
  the session stays at the state the step started from.

:attr:`StepResult.outcome` is that union, for ``match``; :class:`StepResult` itself keeps the flat
fields (``ok``, ``state``, ``error``...) that the envs and strategies read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from proofgym.envs.types import ErrorCategory, Goal, Task, Verdict


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
class ProofFinished:
    """The step closed the last goal: ``state_id`` is the finished state (``proof_script`` of it is the proof)."""

    state_id: int


@dataclass(frozen=True)
class TacticError:
    """The step did not apply; the session is still at ``state_id``, the state the step started from."""

    state_id: int
    error: str
    verdict: Verdict  # FAIL (tactic failed), ERROR (does not parse), CHEATING (whitelist), TIMEOUT
    category: ErrorCategory = ErrorCategory.NONE
    reasons: tuple[str, ...] = ()


#: What one step can end in: a closed union, so that a ``match`` over it is exhaustive.
StepOutcome = TacticState | ProofFinished | TacticError


@dataclass(frozen=True)
class StepResult:
    """What one step did. On failure ``state`` is the unchanged starting state."""

    ok: bool
    state: TacticState
    error: str = ""
    verdict: Verdict | None = None  # FAIL (tactic failed), ERROR (does not parse), CHEATING (whitelist), TIMEOUT
    category: ErrorCategory = ErrorCategory.NONE
    reasons: tuple[str, ...] = ()

    @property
    def outcome(self) -> StepOutcome:
        """The step as one member of :data:`StepOutcome`."""
        if not self.ok:
            return TacticError(self.state.state_id, self.error, self.verdict or Verdict.FAIL, self.category,
                               self.reasons)
        if self.state.finished:
            return ProofFinished(self.state.state_id)
        return self.state


@runtime_checkable
class TacticSession(Protocol):
    """A branching tactic session on one task, opened by a verifier's ``open(task)``; a context manager.

    States form a tree: every successful step creates a new state id, and any earlier state can be
    extended again (branching and backtracking). Implemented by
    :class:`~proofgym.envs.verifiers.coq.tactic.CoqTacticSession` (a coqidetop document) and
    :class:`~proofgym.envs.verifiers.hol_light.tactic.HolTacticSession` (replayed proof trees).
    """

    task: Task
    root: int

    def state(self, state_id: int) -> TacticState: ...

    def run(self, tactic: str, state_id: int | None = None, *, timeout_s: float | None = None) -> StepResult: ...

    def path(self, state_id: int) -> list[str]: ...

    def proof_script(self, state_id: int) -> str: ...

    def close(self) -> None: ...

    def __enter__(self) -> TacticSession: ...

    def __exit__(self, *exc: object) -> None: ...
