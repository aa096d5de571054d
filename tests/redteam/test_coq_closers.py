"""Red team, Coq: how a proof ends. ``Save name.`` is ``Qed.``; ``Focus``/``Unfocus`` are sent as written; ``Abort``
gives the proof up (FAIL, never OK, never CHEATING); a cheat around any of them is still CHEATING.

Moved from the red-team rounds (tests/redteam/ROUNDS.md: what each round found and fixed):
round 6.
"""

from __future__ import annotations

import pytest

from proofgym.envs.types import ErrorCategory, Task, Verdict
from proofgym.envs.verifiers.base import Rejected
from proofgym.envs.verifiers.coq.proof import normalize_proof

ADD_0 = "Lemma t (n : nat) : n + 0 = n."
CONJ = "Lemma t (n : nat) : n + 0 = n /\\ True."
IND = "induction n; simpl; congruence."


def _coq(tid: str, statement: str = ADD_0, context: str = "") -> Task:
    return Task(id=f"rt6.{tid}", system="coq", context=context, statement=statement,
                reference_proof=f"Proof. {IND} Qed.", category="P1", timeout_s=20, metadata={"allowed_axioms": []})


def _rejected(proof: str, statement: str = ADD_0) -> Rejected:
    with pytest.raises(Rejected) as info:
        normalize_proof(proof, statement)
    return info.value


# ---------------------------------------------------------------------------------------------
# Coq, fast tier: Save, Focus, Abort


@pytest.mark.parametrize("closer", ["Save t.", "Save other_name.", "Save t. This completes the proof",
                                    "Save t. Qed.", "Time Save t."])
def test_save_is_qed(closer: str):
    """Fairness hole (fixed): ``Save name.`` was CHEATING ('Save ends the proof without proving it'). It is Coq
    8.16's ``Qed`` that names the constant; the verifier states and names the lemma itself."""
    normalized = normalize_proof(f"Proof. {IND} {closer}", ADD_0)
    assert normalized.sentences == ("Proof.", f"({IND[:-1]}).", "Qed.")
    assert any("as `Qed.`" in n for n in normalized.notes)


def test_focus_commands_are_sent_as_written():
    """Fairness hole (fixed): ``Focus 2.`` was CHEATING ('vernacular command'). Coq decides what it does."""
    proof = "Proof. split. Focus  2. exact I. Unfocused. Focus 1. (induction n). Unfocus. Qed."
    assert normalize_proof(proof, CONJ).sentences == (
        "Proof.", "(split).", "Focus 2.", "(exact I).", "Unfocused.", "Focus 1.", "((induction n)).", "Unfocus.",
        "Qed.")


@pytest.mark.parametrize("proof", ["Proof. Abort.", f"Proof. {IND} Abort.", "Proof. idtac. Abort All.",
                                   "Proof. Time Abort.", "induction n. Abort. I could not finish this one",
                                   "Proof. Abort. The lemma needs a stronger induction hypothesis."])
def test_abort_gives_up_it_is_fail_not_cheating(proof: str):
    """Fairness hole (fixed): ``Abort`` was CHEATING. It claims nothing (the statement is withdrawn), so it is
    FAIL, never OK, with feedback; nothing of it is sent to Coq."""
    rejected = _rejected(proof)
    assert rejected.verdict == "FAIL" and rejected.category is ErrorCategory.LOGIC
    assert "gives the proof up" in rejected.reasons[0] and "Qed" in rejected.reasons[0]


@pytest.mark.parametrize("proof", ["Proof. Abort. Admitted.", "Proof. Abort. admit.",
                                   "Proof. Abort. Axiom ax : False.", "Proof. admit. Abort.",
                                   "Proof. Abort. Lemma t (n : nat) : n + 0 = S n. Proof. reflexivity. Qed.",
                                   "Proof. Abort. Theorem t (n:nat) : n + 0 = n. Proof. admit. Qed.",
                                   "Proof. Save t. Admitted.", "Proof. Focus 1. Admitted.",
                                   "Proof. Unfocus. Unset Guard Checking. Qed.", "Proof. 2: Focus. Admitted."])
def test_a_cheat_around_save_focus_or_abort_is_still_cheating(proof: str):
    """The other side: giving up never hides a cheat before or after it, and neither does a closer or a focus."""
    assert _rejected(proof).verdict == "CHEATING"


# ---------------------------------------------------------------------------------------------
# Coq, prover tier


# Audited: coqc's cut of the proof (Focus sentences are sent unparenthesised) must be the checker's.
@pytest.fixture(scope="module")
def coq(audited_coq):
    return audited_coq


HONEST_COQ = {
    "save-name": (ADD_0, f"Proof. {IND} Save t."),
    "save-other-name": (ADD_0, f"Proof.\n  {IND}\nSave add_0_r.\n"),
    "focus": (CONJ, f"Proof. split. Focus 2. exact I. {IND} Qed."),
    "focus-unfocus": (CONJ + " ", "Proof. split. Focus 1. induction n. Unfocus. reflexivity. "
                                  "simpl; congruence. exact I. Qed."),
    "unfocused": (CONJ, f"Proof. split. Focus 2. exact I. Unfocused. {IND} Save t."),
}


@pytest.mark.prover
@pytest.mark.parametrize(("statement", "proof"), list(HONEST_COQ.values()), ids=list(HONEST_COQ))
def test_an_honest_coq_proof_with_save_or_focus_is_ok(coq, statement: str, proof: str):
    result = coq.check(_coq("honest", statement), proof)
    assert result.verdict is Verdict.OK and result.audited, result


@pytest.mark.prover
@pytest.mark.parametrize("proof", [f"Proof. {IND} Abort.", "Proof. Save foo.", "Proof. Focus 1. Qed.",
                                   "Proof. Focus 1. Unfocus. Unfocus. Qed.", "Proof. Unfocused. Save t."])
def test_abort_save_and_focus_never_prove_a_false_goal(coq, proof: str):
    """The other side on the real Coq: the closer and the focus commands only run what Coq runs, and a proof
    given up is FAIL even where its tactics would have proved the goal."""
    statement = ADD_0 if "Abort" in proof else "Lemma t : 1 = 2."
    result = coq.check(_coq("false", statement), proof)
    assert result.verdict is Verdict.FAIL, result


@pytest.mark.prover
def test_a_cheat_after_abort_is_cheating_on_the_real_coq(coq):
    result = coq.check(_coq("abort-cheat", "Lemma t : 1 = 2."), "Proof. Abort. Lemma t : 1 = 1. Proof. reflexivity. Qed.")
    assert result.verdict is Verdict.CHEATING, result
