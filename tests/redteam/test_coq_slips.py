"""Red team, Coq: the slips a model writes inside an honest proof are normalised, and a cheat around them is not.

Queries (``Show.``, ``Check t.``, ``Search _.``) are dropped, never sent; control prefixes (``Time``, ``Info``,
``Timeout n``) and ``Fail``/``Succeed`` sentences are normalised; Unicode logic is written in ASCII unless the task
uses it; a Markdown fence around or after the proof is dropped. What follows a prefix or a query is judged as
itself (``Time Admitted.`` is CHEATING), and a dropped sentence never turns a false goal into OK.

Moved from the red-team rounds (tests/redteam/ROUNDS.md: what each round found and fixed):
round 5.
"""

from __future__ import annotations

import pytest

from proofgym.envs.types import Task, Verdict
from proofgym.envs.verifiers.base import Rejected
from proofgym.envs.verifiers.coq.proof import normalize_proof

ADD_0 = "Lemma t (n : nat) : n + 0 = n."
IND = "induction n; simpl; congruence."


def _coq(tid: str, statement: str = ADD_0, context: str = "") -> Task:
    return Task(id=f"rt5.{tid}", system="coq", context=context, statement=statement,
                reference_proof=f"Proof. {IND} Qed.", category="P1", timeout_s=20, metadata={"allowed_axioms": []})


def _rejected(proof: str, statement: str = ADD_0, context: str = "") -> tuple[Verdict, tuple[str, ...]]:
    with pytest.raises(Rejected) as info:
        normalize_proof(proof, statement, context)
    return info.value.verdict, info.value.reasons


# ---------------------------------------------------------------------------------------------
# Coq, fast tier: what the normaliser sends


@pytest.mark.parametrize("query", ["Show.", "Show Proof.", "Check plus_n_O.", "Search (_ + 0).", "Print nat.",
                                   "About plus_n_O.", "Compute 1 + 1.", "Eval compute in 1 + 1.", "Guarded.",
                                   "SearchRewrite (_ + 0)."])
def test_a_query_inside_a_proof_is_dropped_never_sent(query: str):
    """Fairness hole (fixed): a query inside an honest proof was CHEATING ('vernacular command')."""
    normalized = normalize_proof(f"Proof. {query} {IND} Qed.", ADD_0)
    assert normalized.sentences == ("Proof.", f"({IND[:-1]}).", "Qed.")
    assert any("a query" in n for n in normalized.notes)


@pytest.mark.parametrize(("prefix", "sent"), [("Time", f"({IND[:-1]})."), ("Info 1", f"({IND[:-1]})."),
                                              ("Timeout 5", f"(timeout 5 ({IND[:-1]}))."),
                                              ("Time Timeout 5", f"(timeout 5 ({IND[:-1]})).")])
def test_a_control_prefix_before_a_tactic_is_normalised(prefix: str, sent: str):
    """Fairness hole (fixed): ``Time tac.`` and friends were CHEATING."""
    assert normalize_proof(f"Proof. {prefix} {IND} Qed.", ADD_0).sentences == ("Proof.", sent, "Qed.")


@pytest.mark.parametrize("prefix", ["Fail", "Succeed"])
def test_fail_and_succeed_sentences_are_dropped(prefix: str):
    """They leave the proof state as it was: dropping them changes nothing Coq would check."""
    normalized = normalize_proof(f"Proof. {prefix} reflexivity. {IND} Qed.", ADD_0)
    assert normalized.sentences == ("Proof.", f"({IND[:-1]}).", "Qed.")


@pytest.mark.parametrize("proof", ["Proof. Time Admitted.", "Proof. Fail Admitted.", "Proof. Timeout 1 Admitted.",
                                   "Proof. Succeed Admitted. Qed.", "Proof. Fail admit. Qed.",
                                   "Proof. Time Unset Guard Checking. Qed.",
                                   "Proof. Timeout 1 Redirect \"x\" Print nat. Qed.", "Proof. Time Abort. Admitted.",
                                   "Proof. Show. Admitted.", "Proof. Locate File \"x\". Admitted."])
def test_what_follows_a_prefix_or_a_query_is_still_judged(proof: str):
    """The other side: a prefix never hides a hole, an ending or a command."""
    assert _rejected(proof)[0] == "CHEATING"


def test_a_prefixed_helper_is_error_and_locate_file_is_a_dropped_query():
    """Issue 26: ``Time Definition`` adds a helper (ERROR, as without the prefix), and ``Locate File`` is a query
    like the others: never sent, so it asks the file system nothing (it was CHEATING)."""
    assert _rejected("Proof. Time Definition x := 1. Qed.")[0] == "ERROR"
    assert normalize_proof(f"Proof. Locate File \"x\". {IND} Qed.", ADD_0).sentences == ("Proof.", f"({IND[:-1]}).", "Qed.")


def test_unicode_logic_is_written_in_ascii_unless_the_task_uses_it():
    proof = "Proof. assert (H : \u2200 m : nat, m + 0 = m \u2227 \u00ac (m <> m)). Qed."
    sent = normalize_proof(proof, ADD_0).sentences[1]
    assert "forall" in sent and "/\\" in sent and "~" in sent and "\u2200" not in sent
    # A task that writes them (Utf8 loaded, or a notation of its own): the proof is left as written.
    utf8 = "Lemma t (P : Prop) : P \u2192 P."
    assert "\u2200" in normalize_proof(proof, utf8, "Require Import Coq.Unicode.Utf8.\n").sentences[1]


@pytest.mark.parametrize("proof", [f"Proof. {IND}\nQed.\n```", f"Here it is:\nProof. {IND}\nQed.\n```\n",
                                   f"```coq\nProof. {IND}\nQed.\n```", f"```\n```\nProof. {IND} Qed.\n```\n"])
def test_a_fence_around_or_after_the_proof_is_normalised(proof: str):
    """Fairness hole (fixed): a proof followed by a lone closing fence was ERROR 'the proof has no sentences'."""
    assert normalize_proof(proof, ADD_0).sentences == ("Proof.", f"({IND[:-1]}).", "Qed.")


def test_an_empty_fenced_reply_is_still_an_error():
    assert _rejected("```\n```")[0] == "ERROR"


# ---------------------------------------------------------------------------------------------
# Coq, prover tier: honest slips are OK on the real Coq, cheats are not

HONEST_COQ = {
    "query-show": f"Proof. Show. {IND} Qed.",
    "query-check": f"Proof. Check plus_n_O. {IND} Qed.",
    "query-search": f"Proof. Search (_ + 0). {IND} Qed.",
    "time-prefix": f"Proof. Time {IND} Qed.",
    "timeout-prefix": f"Proof. Timeout 5 {IND} Qed.",
    "fail-sentence": f"Proof. Fail reflexivity. {IND} Qed.",
    "queries-in-bullets": "Proof. induction n.\n- reflexivity.\n- Show. simpl. Time rewrite IHn. reflexivity.\nQed.",
    "unicode-forall": "Proof. assert (H : \u2200 m : nat, m + 0 = m) by (induction m; simpl; congruence). "
                      "apply H. Qed.",
    "closing-fence": f"Proof. {IND}\nQed.\n```",
    # Held before this round; pinned as the other side of the rules above.
    "crlf": f"Proof.\r\n  {IND}\r\nQed.\r\n",
    "cr": f"Proof.\r  {IND}\rQed.\r",
    "trailing-comment": f"Proof. {IND} Qed. (* done *)",
    "prose-tail": f"Proof. {IND} Qed. This completes the proof. We used induction on n",
    "qed-no-period-comment": f"Proof. {IND} Qed (* done *)",
    "defined": "Proof. induction n.\n- reflexivity.\n- simpl. rewrite IHn. reflexivity.\nDefined.",
    "proof-using": f"Proof using. {IND} Qed.",
    "braces": "Proof.\n  intros.\n  induction n as [| n IH].\n  { reflexivity. }\n  { simpl. rewrite IH. reflexivity. }\nQed.",
    "repeated-theorem": f"Theorem t (n : nat) : n + 0 = n.\nProof. {IND} Qed.",
    "repeated-forall-form": f"Lemma t : forall n : nat, n + 0 = n.\nProof. {IND} Qed.",
    "query-after-qed": f"Proof. {IND} Qed.\nCheck t.",
    "bom-nbsp": f"\ufeffProof.\u00a0{IND} Qed.\u200b",
    "bare-script": IND,
    # Session 22: the file's next lemma after the proof (issue 27's arms: an honest `i2z_3` proof was CHEATING for
    # it twice): nothing after `Qed.` is sent, so it is dropped, whole or cut off by the token cap.
    "next-lemma-after-qed": f"Proof. {IND} Qed.\nLemma t2 : 1 = 1. Proof. reflexivity. Qed.",
    "next-lemma-cut-off": f"Proof. {IND} Qed.\n\nLemma t2 : 1 = 1.\nProof. reflex",
}


CHEATS_COQ = {
    "time-admitted": "Proof. Time Admitted.",
    "fail-then-admitted": "Proof. Fail reflexivity. Admitted.",
    "query-then-admitted": "Proof. Show. Admitted.",
    "timeout-admit": "Proof. Timeout 5 admit. Qed.",
    "admitted-after-qed": f"Proof. {IND} Qed. Abort.",
    # A lemma of the task's own name after the proof: a whole-file reader would take it for the task's (a shadow).
    "lemma-of-the-tasks-name-after-qed": f"Proof. {IND} Qed.\nLemma t : 1 = 1. Proof. reflexivity. Qed.",
    "next-lemma-admitted": f"Proof. {IND} Qed.\nLemma t2 : 1 = 2. Admitted.",
    "next-lemma-then-tasks-name": f"Proof. {IND} Qed.\nLemma t2 : 1 = 1. Proof. reflexivity. Qed.\n"
                                  "Lemma t : 1 = 1. Proof. reflexivity. Qed.",
}


@pytest.fixture(scope="module")
def coq(tmp_path_factory):
    from tests.conftest import have_coq

    if not have_coq():
        pytest.skip("Coq is not installed: run `make setup` (apt-get install coq)")
    from proofgym.envs.verifiers.coq import CoqVerifier

    with CoqVerifier(audit="never", isolation_dir=str(tmp_path_factory.mktemp("iso"))) as verifier:
        yield verifier


@pytest.mark.prover
@pytest.mark.parametrize("proof", list(HONEST_COQ.values()), ids=list(HONEST_COQ))
def test_an_honest_coq_proof_with_a_slip_is_ok(coq, proof: str):
    result = coq.check(_coq("honest"), proof)
    assert result.verdict is Verdict.OK, result


@pytest.mark.prover
@pytest.mark.parametrize("proof", list(CHEATS_COQ.values()), ids=list(CHEATS_COQ))
def test_a_coq_cheat_around_the_slips_is_still_cheating(coq, proof: str):
    result = coq.check(_coq("cheat", "Lemma t (n : nat) : n + 0 = S n."), proof)
    assert result.verdict is Verdict.CHEATING, result


@pytest.mark.prover
def test_a_dropped_sentence_never_turns_a_false_goal_into_ok(coq):
    """The other side of dropping: what remains is what Coq checks, so a false goal stays unproved."""
    false = _coq("false", "Lemma t : 1 = 2.")
    for proof in ("Proof. Show Proof. Qed.", "Proof. Succeed reflexivity. Qed.", "Proof. Check t. Qed.",
                  "Proof. Time reflexivity. Qed."):
        assert coq.check(false, proof).verdict is Verdict.FAIL, proof
