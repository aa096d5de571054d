"""Red team, Coq: commands inside a proof. ``Export Unset`` of a kernel check is CHEATING, ``Export Set`` of a
harmless option is dropped; settings and queries (``Strategy``, ``Test Guard Checking``, ``Locate File``) are
dropped; the pinned refusals (``Abort All``, ``Fail Fail Admitted``, ``Register``, ``Add LoadPath``, a leak behind
``abstract ... using``) and the pinned honest styles (Software Foundations: comments after bullets, ``--``,
``2:{``, ``Defined``) keep their verdicts.

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


@pytest.fixture(scope="module")
def coq(audited_coq):
    return audited_coq


# ---------------------------------------------------------------------------------------------
# Coq: ``Export Set`` / ``Export Unset`` are option commands


@pytest.mark.parametrize("proof", [
    f"Export Unset Guard Checking.\nProof. {IND} Qed.",
    f"Export Unset Positivity Checking.\nProof. {IND} Qed.",
    f"Export  Unset\nUniverse Checking.\n{IND}",
    f"Proof. Export Unset Guard Checking. {IND} Qed.",
    f"Proof. {IND} Qed. Export Unset Guard Checking.",
    f"Set Definitional UIP.\nProof. {IND} Qed.",
    f"Export Set Definitional UIP.\nProof. {IND} Qed.",
])
def test_export_unset_of_a_kernel_check_is_cheating(proof: str):
    """Was a hole in classification (fixed): sent as ``Import Unset Guard Checking.``, ERROR from Coq."""
    rejected = _rejected(proof)
    assert rejected.verdict == "CHEATING", rejected.reasons


def test_export_set_of_a_harmless_option_before_the_proof_is_dropped():
    """The other side: ``Export Set Printing All.`` before the proof was ERROR ("import only modules..."); it is a
    harmless option, dropped like ``Set Printing All.`` there. ``Import``/``Export`` of modules still move."""
    assert normalize_proof(f"Export Set Printing All.\nProof. {IND} Qed.", ADD_0).sentences == (
        "Proof.", f"({IND[:-1]}).", "Qed.")
    assert normalize_proof(f"Export Settings.\nImport Unsetter.\nProof. {IND} Qed.", ADD_0).sentences == (
        "Proof.", "Import Settings.", "Import Unsetter.", f"({IND[:-1]}).", "Qed.")


@pytest.mark.prover
def test_export_unset_guard_checking_is_cheating_on_the_real_coq(coq):
    task = _coq("guard", "Lemma t : 1 = 2.")
    proof = "Export Unset Guard Checking.\nProof. exact ((fix f (n : nat) : 1 = 2 := f n) 0). Qed."
    result = coq.check(task, proof)
    assert result.verdict is Verdict.CHEATING, result
    honest = coq.check(_coq("printing"), f"Export Set Printing All.\nProof. {IND} Qed.")
    assert honest.verdict is Verdict.OK, honest


# ---------------------------------------------------------------------------------------------
# Pinned: new cases proofgym already judged right this round (both sides)

LEAK_STATEMENT = "Lemma app_nil_r (A : Type) (l : list A) : l ++ nil = l."


@pytest.mark.prover
@pytest.mark.parametrize("proof", [
    "Proof. abstract (auto with datatypes) using foo. Qed.",
    "Proof. assert (H : forall B (k : list B), k ++ nil = k) by (abstract (auto with datatypes) using foo). "
    "apply H. Qed.",
    "Proof. abstract (apply app_nil_r) using foo. Qed.",
])
def test_a_leak_behind_a_named_abstract_is_cheating(coq, proof: str):
    """``abstract ... using foo`` names its auxiliary constant freely (not ``t_subproof``): Coq 8.16 inlines it into
    the Qed'd term, so the leak audit still reads the original lemma's use."""
    for qualid in ("Coq.Lists.List.app_nil_r", ""):
        task = _coq("leak", LEAK_STATEMENT, "Require Import List.\n", qualid)
        result = coq.check(task, proof)
        assert result.verdict is Verdict.CHEATING, (qualid, result)


@pytest.mark.parametrize(("proof", "verdict"), [
    ("Proof. Abort All.", "FAIL"),
    (f"Proof. {IND} Qed. Abort All.", "CHEATING"),
    ("Proof. Fail Fail Admitted.", "CHEATING"),
    ("Proof. Fail Qed. Admitted.", "CHEATING"),
    ("Proof. Local Unset Guard Checking. Qed.", "CHEATING"),
    ('Proof. Add LoadPath "/tmp" as X. Qed.', "CHEATING"),
    ("Proof. Register t as core.True.type. Qed.", "CHEATING"),
    ("Proof. Strategy expand [plus]. Admitted.", "CHEATING"),
    ("Proof. Test Guard Checking. Admitted.", "CHEATING"),
    ('Proof. Locate File "x". Admitted.', "CHEATING"),
    ("Proof. Grab Existential Variables. Qed.", "ERROR"),  # not a Coq 8.16 command at all: unlisted (issue 26)
    ("Proof. 2: Focus. Qed.", "ERROR"),  # a focus under a selector does not parse; it proves nothing (issue 26)
])
def test_pinned_coq_refusals(proof: str, verdict: str):
    assert _rejected(proof).verdict == verdict


@pytest.mark.parametrize("command", ["Strategy expand [plus].", "Test Guard Checking.", 'Locate File "x".'])
def test_a_setting_or_query_inside_a_proof_is_dropped(command: str):
    """Issue 26: these were CHEATING; none can make an unproved statement pass (a conversion strategy for tactics, a
    query that is never sent), so each is dropped with a note and the proof is checked (the cheat beside it stays
    CHEATING in test_pinned_coq_refusals)."""
    normalized = normalize_proof(f"Proof. {command} {IND} Qed.", ADD_0)
    assert normalized.sentences == ("Proof.", f"({IND[:-1]}).", "Qed.")
    assert any("dropped" in n and command in n for n in normalized.notes)


HONEST_SF_STYLE = {
    "comments-after-bullets": "Proof.\n  induction n as [| n' IHn'].\n  - (* n = 0 *) reflexivity.\n"
                              "  - (* n = S n' *) simpl. rewrite -> IHn'. reflexivity.  Qed.",
    "double-bullets": "Proof.\n  induction n as [| n' IHn'].\n  -- reflexivity.\n  -- simpl.\n"
                      "     rewrite IHn'. reflexivity.\nQed.",
    "selector-brace-glued": "Proof. induction n. 2:{ simpl. rewrite IHn. reflexivity. } reflexivity. Qed.",
    "string-and-comment-saying-admit": 'Proof. idtac "admit is not used". (* we do not admit *) '
                                       f"{IND} Qed.",
    "doc-comment-after-qed": f"Proof. {IND}\nQed. (** Done *)\n\n(* Qed. *)",
    "defined": "Proof. exact (eq_sym (plus_n_O n)). Defined.",
}


@pytest.mark.prover
@pytest.mark.parametrize("proof", list(HONEST_SF_STYLE.values()), ids=list(HONEST_SF_STYLE))
def test_pinned_honest_coq_styles_are_ok(coq, proof: str):
    result = coq.check(_coq("sf"), proof)
    assert result.verdict is Verdict.OK, result
