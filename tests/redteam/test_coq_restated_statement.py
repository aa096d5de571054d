"""Red team, Coq: a proof that restates the task's statement with its binders on the other side of the colon gets
the restated goal (reached by ``revert``/``intros`` of exactly those binders; the kernel still checks the task's
statement); a copy that is not the same statement is ERROR; a cheat after a restated statement is CHEATING, and
the bridge never proves a false goal.

Moved from the red-team rounds (tests/redteam/ROUNDS.md: what each round found and fixed):
round 7.
"""

from __future__ import annotations

import pytest

from proofgym.envs.types import Verdict
from proofgym.envs.verifiers.coq.proof import normalize_proof
from tests.redteam.coq_common import ADD_0, IND
from tests.redteam.coq_common import coq_task as _coq
from tests.redteam.coq_common import rejected as _rejected

ADD_0_FORALL = "Lemma t : forall n : nat, n + 0 = n."
COMM = "Lemma t (n m : nat) (H : m <= n) : n + m = m + n."


@pytest.fixture(scope="module")
def coq(audited_coq):
    return audited_coq


# ---------------------------------------------------------------------------------------------
# Coq fairness: a restated statement with its binders on the other side of the colon


@pytest.mark.parametrize(("statement", "proof", "bridge"), [
    (ADD_0, f"Lemma t : forall n : nat, n + 0 = n.\nProof. intros n. {IND} Qed.", "(revert n)."),
    (COMM, "Lemma t : forall (n m : nat) (H : m <= n), n + m = m + n.\nProof. intros n m H. auto. Qed.",
     "(revert n m H)."),
    (COMM, "Lemma t (n : nat) : forall (m : nat) (H : m <= n), n + m = m + n.\nProof. intros m H. auto. Qed.",
     "(revert m H)."),
    (ADD_0_FORALL, f"Lemma t (n : nat) : n + 0 = n.\nProof. {IND} Qed.", "(intros n)."),
    (ADD_0_FORALL, "Lemma t (n : nat) : n + 0 = n.\nProof (eq_sym (plus_n_O n)).", "(intros n)."),
    (ADD_0, f"Lemma t (n:nat) :\n  n + 0 = n.\nProof. {IND} Qed.", ""),  # the same split: nothing to bridge
])
def test_a_restated_statement_gets_its_own_goal(statement: str, proof: str, bridge: str):
    """Fairness hole (fixed): the proof of a copy that binds on the other side of the colon ran on the task's goal
    (``intros n`` then fails: FAIL). The bridge runs right after the opener; a copy with the same split gets none."""
    sentences = normalize_proof(proof, statement).sentences
    if bridge:
        at = 1 if sentences[0].startswith("Proof") else 0
        assert sentences[at] == bridge, sentences
    else:
        assert not any(s.startswith(("(revert", "(intros")) for s in sentences), sentences


@pytest.mark.parametrize("proof", [
    f"Theorem add_0_r : forall n, n + 0 = n.\nintro n. {IND}",  # `forall n` without its type
    "Lemma t (n m : nat) : m <= n -> n + m = m + n.\nProof. auto. Qed.",  # an arrow for the binder (H : m <= n)
])
def test_a_copy_that_is_not_the_same_statement_is_error_as_before(proof: str):
    statement = COMM if "m <= n" in proof else ADD_0
    assert _rejected(proof, statement).verdict == "ERROR"


def test_the_bridge_goes_before_imports_and_requires_keep_their_place():
    norm = normalize_proof("Import Nat.\nLemma t : forall n : nat, n + 0 = n.\nProof with auto. Require Import Arith. "
                           "intros n. auto. Qed.", ADD_0)
    assert norm.sentences == ("Proof with (auto).", "Import Nat.", "(revert n).", "(intros n).", "(auto).", "Qed.")
    assert norm.requires[0].at == 3  # the Require stood after the opener, before `intros n`


@pytest.mark.parametrize("proof", [
    "Lemma t : forall n : nat, n + 0 = n.\nProof. intros n. admit. Qed.",
    "Lemma t : forall n : nat, n + 0 = n.\nProof. intros n. Admitted.",
    "Lemma t : forall n : nat, n + 0 = S n.\nProof. intros n. Admitted.",
    "Lemma t : forall n : nat, n + 0 = n.\nProof. revert n. Qed. Lemma t : True. Proof. exact I. Qed.",
])
def test_a_cheat_after_a_restated_statement_is_still_cheating(proof: str):
    assert _rejected(proof).verdict == "CHEATING"


def test_a_changed_statement_in_forall_form_is_still_error():
    rejected = _rejected("Lemma t : forall n : nat, 0 + n = n.\nProof. intros n. reflexivity. Qed.")
    assert rejected.verdict == "ERROR" and "not the task's statement" in rejected.reasons[0]


HONEST_RESTATED = {
    "forall-then-intros": (ADD_0, f"Lemma t : forall n : nat, n + 0 = n.\nProof. intros n. {IND} Qed."),
    "forall-theorem-intro": (ADD_0, f"Theorem t : forall (n : nat), n + 0 = n.\nProof.\n  intro n.\n  {IND}\nQed."),
    "forall-three": (COMM, "Lemma t : forall (n m : nat) (H : m <= n), n + m = m + n.\n"
                           "Proof. intros n m H. apply Nat.add_comm. Qed."),
    "binders-then-simpl": (ADD_0_FORALL, f"Lemma t (n : nat) : n + 0 = n.\nProof. simpl. {IND} Qed."),
    "binders-proof-term": (ADD_0_FORALL, "Lemma t (n : nat) : n + 0 = n.\nProof (eq_sym (plus_n_O n))."),
}


@pytest.mark.prover
@pytest.mark.parametrize(("statement", "proof"), list(HONEST_RESTATED.values()), ids=list(HONEST_RESTATED))
def test_a_proof_of_the_restated_form_is_ok(coq, statement: str, proof: str):
    """Was FAIL (``sentence 2 failed: (intros n).``); now OK, audited by coqc + coqchk."""
    result = coq.check(_coq("restated", statement, "Require Import Arith.\n" if statement == COMM else ""), proof)
    assert result.verdict is Verdict.OK and result.audited, result


@pytest.mark.prover
@pytest.mark.parametrize("proof", [
    "Lemma t : forall n : nat, n = S n.\nProof. intros n. Qed.",
    "Lemma t : 1 = 2.\nProof. revert n. Qed.",
    "Lemma t (n : nat) : 1 = 2.\nProof. intros n. reflexivity. Qed.",
])
def test_the_bridge_never_proves_a_false_goal(coq, proof: str):
    result = coq.check(_coq("false", "Lemma t : forall n : nat, n = S n."), proof)
    assert result.verdict is not Verdict.OK, result
