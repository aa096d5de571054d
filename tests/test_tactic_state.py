"""The step outcomes every tactic session shares (a closed union, matched exhaustively) and the session protocol."""

from __future__ import annotations

import pytest

from proofgym.envs.types import ErrorCategory, Goal, Task, Verdict
from proofgym.envs.verifiers.coq.tactic import CoqTacticSession
from proofgym.envs.verifiers.hol_light.tactic import HolTacticSession
from proofgym.envs.verifiers.tactic_state import (
    ProofFinished,
    StepOutcome,
    StepResult,
    TacticError,
    TacticSession,
    TacticState,
)
from tests.conftest import requires_coq

OPEN = TacticState(3, (Goal(("n : nat",), "n + 0 = n"),))
DONE = TacticState(4, (), finished=True)


def describe(outcome: StepOutcome) -> str:
    match outcome:
        case ProofFinished(state_id=sid):
            return f"finished at {sid}"
        case TacticError(verdict=verdict, error=error):
            return f"{verdict.value}: {error}"
        case TacticState(goals=goals):
            return f"{len(goals)} goal(s)"
    raise AssertionError(f"not a step outcome: {outcome!r}")


def test_each_step_result_is_exactly_one_outcome() -> None:
    assert describe(StepResult(True, OPEN).outcome) == "1 goal(s)"
    assert describe(StepResult(True, DONE).outcome) == "finished at 4"
    failed = StepResult(False, OPEN, "no such tactic", Verdict.ERROR, ErrorCategory.SYNTAX, ("unknown",)).outcome
    assert failed == TacticError(3, "no such tactic", Verdict.ERROR, ErrorCategory.SYNTAX, ("unknown",))
    # A failed step stays where it started, even when that state was finished.
    assert isinstance(StepResult(False, DONE, "nothing to prove", Verdict.FAIL).outcome, TacticError)


def test_outcomes_are_frozen() -> None:
    with pytest.raises(AttributeError):
        ProofFinished(1).state_id = 2  # type: ignore[misc]
    with pytest.raises(AttributeError):
        TacticError(1, "x", Verdict.FAIL).error = "y"  # type: ignore[misc]


@pytest.mark.parametrize("session_class", [CoqTacticSession, HolTacticSession])
def test_both_sessions_have_the_protocols_methods(session_class: type) -> None:
    for name in ("state", "run", "path", "proof_script", "close", "__enter__", "__exit__"):
        assert callable(getattr(session_class, name, None)), f"{session_class.__name__} lacks {name}"


@pytest.mark.prover
@requires_coq
def test_a_real_coq_session_is_a_tactic_session(coq_verifier) -> None:
    task = Task(id="ts.and", system="coq", context="", statement="Lemma and_t : True /\\ True.",
                reference_proof="Proof. split; exact I. Qed.", category="P1", timeout_s=20)
    with coq_verifier.open(task) as session:
        assert isinstance(session, TacticSession)
        bad = session.run("exact 0.")
        assert isinstance(bad.outcome, TacticError) and bad.outcome.state_id == session.root
        split = session.run("split.")
        assert isinstance(split.outcome, TacticState) and len(split.outcome.goals) == 2
        done = session.run("all: exact I.", split.state.state_id)
        assert done.outcome == ProofFinished(done.state.state_id)
        assert coq_verifier.check(task, session.proof_script(done.state.state_id)).verdict is Verdict.OK
