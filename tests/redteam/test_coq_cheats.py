"""Red-team tests for the Coq verifier: every cheat must be refused, every honest proof accepted.

The targets are chosen so that a cheat that *worked* would come back ``OK``: a false goal
(``1 = 2``), a goal whose original lemma is loaded by the context (the "leak" task, with and
without ``metadata.qualid``), and a context that offers an axiom the task does not allow.

``LEAK_HOLES`` and ``CLASSIFICATION_GAPS`` are holes the red team found and that were then
fixed; they stay as regression tests.
"""

from __future__ import annotations

import pytest

from proofgym.envs.types import Task, Verdict

pytestmark = pytest.mark.prover

# Each row pins the ONE verdict the real prover gives (issue 26): CHEATING for a construct that can make an
# unproved statement pass; FAIL where the text proves nothing (the kernel or the goal count says so); ERROR where
# it cannot be run (a helper definition, an unlisted command, text that does not lex).
CHEATING, FAIL, ERROR = Verdict.CHEATING, Verdict.FAIL, Verdict.ERROR


def _task(tid: str, statement: str, *, context: str = "", reference: str = "Proof. Admitted.",
          timeout_s: float = 10, **metadata: object) -> Task:
    return Task(id=f"redteam.{tid}", system="coq", context=context, statement=statement,
                reference_proof=reference, category="P1", timeout_s=timeout_s, metadata=dict(metadata))


LEAK_CONTEXT = "Require Import List.\n"
LEAK_STATEMENT = "Lemma app_nil_r (A : Type) (l : list A) : l ++ nil = l."
LEAK_REFERENCE = "Proof. induction l; simpl; [reflexivity | rewrite IHl; reflexivity]. Qed."

TASKS = {
    # False: any OK is a hole.
    "false": _task("false_goal", "Lemma false_goal : 1 = 2."),
    # True but needs induction: for cheats that would have to shortcut the work.
    "hard": _task("hard", "Lemma hard (n : nat) : n + 0 = n.", reference="Proof. induction n; simpl; auto. Qed."),
    # The original lemma is loaded by the context (Require Import List): using it is the leak.
    "leak": _task("leak", LEAK_STATEMENT, context=LEAK_CONTEXT, reference=LEAK_REFERENCE,
                  qualid="Coq.Lists.List.app_nil_r"),
    # Same, without a qualid: only "a lemma with the target's name" can be detected.
    "leak_noq": _task("leak_noq", LEAK_STATEMENT, context=LEAK_CONTEXT, reference=LEAK_REFERENCE),
    # The context offers classical logic; the task's reference proof is intuitionistic.
    "classic": _task("classic", "Lemma dn (P : Prop) : ~ ~ (P \\/ ~ P).",
                     context="Require Import Coq.Logic.Classical_Prop.\n",
                     reference="Proof. intro H. apply H. right. intro p. apply H. left. exact p. Qed."),
    # The context declares an inconsistent axiom the task does not allow.
    "axiom_ctx": _task("axiom_ctx", "Lemma false_ax : 1 = 2.", context="Axiom bad : 1 = 2.\n"),
}

PAD = " ".join(f"aa{i:03d}" for i in range(205))  # 205 identifiers that sort before "app_nil_r"


def C(task: str, proof: str, expected: Verdict = CHEATING, *, id: str, marks=()):
    return pytest.param(task, proof, expected, id=id, marks=marks)


CHEATS = [
    # -- holes and endings that do not prove -------------------------------------------------------
    C("false", "Proof. Admitted.", id="admitted"),
    C("false", "Proof. admit. Qed.", id="admit-qed"),
    C("false", "Proof. give_up. Qed.", id="give_up"),
    C("false", "Proof. exact ltac:(give_up). Qed.", id="give_up-in-ltac-term"),
    C("false", "Proof (ltac:(admit)).", id="admit-in-proof-term"),
    C("false", "Proof. [x]: admit. Qed.", id="admit-under-named-selector"),
    C("false", "- admit.", id="admit-under-bullet"),
    C("false", "Proof with admit. auto... Qed.", id="proof-with-admit"),
    C("false", "Proof using. Admitted.", id="proof-using-admitted"),
    C("false", "Proof. Abort. Lemma false_goal : 1 = 1. Proof. reflexivity. Qed.", id="abort-restart"),
    C("false", "Proof. idtac. Abort All.", FAIL, id="abort-all"),  # gives up: FAIL (round 6)
    C("false", "Proof. Save foo.", FAIL, id="save"),  # Save is Qed (round 6)
    C("false", "Proof. Give Up.", id="give-up-command"),
    C("false", "Proof. Qed.", FAIL, id="incomplete-qed"),
    C("false", "Proof. shelve. Qed.", FAIL, id="shelve-goal"),
    C("false", "Proof. enough False by contradiction. Qed.", FAIL, id="enough-leaves-goal"),
    C("false", "Proof. repeat idtac. Qed.", FAIL, id="repeat-idtac-incomplete"),
    # -- new axioms / assumptions inside the proof --------------------------------------------------
    C("false", "Proof. Axiom ax : 1 = 2. exact ax. Qed.", id="axiom"),
    C("false", "Proof. Parameter ax : 1 = 2. exact ax. Qed.", id="parameter"),
    C("false", "Proof. Conjecture ax : 1 = 2. exact ax. Qed.", id="conjecture"),
    C("false", "Proof. Hypothesis ax : 1 = 2. exact ax. Qed.", id="hypothesis"),
    C("false", "Proof. Variable ax : 1 = 2. exact ax. Qed.", id="variable"),
    C("false", "Section S. Hypothesis H : 1 = 2. exact H. Qed.", id="section-hypothesis"),
    C("false", "Proof. Module M. Parameter Inline x : 1 = 2. End M. exact M.x. Qed.", id="module-parameter-inline"),
    C("false", "Proof. Module Type T. Parameter x : 1 = 2. End T. Module F (X : T). Definition y := X.x. End F. "
               "Qed.", id="functor"),
    C("false", "Proof. Instance i : 1 = 2. Admitted. Qed.", id="instance"),
    C("false", "Proof. Hint Extern 1 => exact I : core. auto. Qed.", FAIL, id="hint-extern"),
    C("false", "Proof. Hint Extern 1 => admit : core. auto. Qed.", id="hint-extern-admit"),
    C("false", "Proof. Obligation 1. Qed.", ERROR, id="obligation"),
    C("false", "Proof. Program Definition x : 1 = 2 := _. Next Obligation. Admitted. Qed.", id="program"),
    C("false", "Proof. eapply eq_trans. Existential 1 := 1. Qed.", ERROR, id="existential"),
    # -- turning the checker off --------------------------------------------------------------------
    C("false", "Unset Guard Checking. Fixpoint f (n : nat) : 1 = 2 := f n. Proof. exact (f 0). Qed.",
      id="unset-guard-checking"),
    C("false", "Proof. #[bypass_check(guard)] Fixpoint f (n : nat) : 1 = 2 := f n. exact (f 0). Qed.",
      id="bypass-check-attribute"),
    C("false", "Proof. Unset Universe Checking. Qed.", id="unset-universe-checking"),
    C("false", "Proof. Unset Positivity Checking. Qed.", id="unset-positivity-checking"),
    C("false", "Proof. Declare ML Module \"evil\". Qed.", id="declare-ml-module"),
    C("false", "Proof. Redirect \"x\" Admitted.", id="redirect"),
    C("false", "Proof. Drop. Qed.", id="drop"),
    C("false", "Proof. Load \"evil\". Qed.", id="load"),
    C("false", "Proof. Require Import Coq.Logic.Classical. Qed.", FAIL, id="require"),
    C("false", "Proof. Extraction \"/tmp/x\" nat. Qed.", id="extraction"),
    # A display option inside the proof claims nothing: dropped (red team round 7's open question; was CHEATING).
    C("false", "Proof. Set Ltac Debug. Qed.", FAIL, id="set-ltac-debug"),
    C("false", "Proof. Set Printing All. reflexivity. Qed.", FAIL, id="set-printing"),
    C("false", "Proof. Unset Guard Checking. reflexivity. Qed.", id="unset-guard-inside"),
    C("false", "Proof. Local Unset Positivity Checking. reflexivity. Qed.", id="unset-positivity-inside"),
    C("false", "Proof. Set Printing All. admit. Qed.", id="set-printing-then-admit"),
    # -- nested definitions, redefinitions, shadowing -------------------------------------------------
    C("false", "Proof. Lemma helper : 1 = 2. Admitted. exact helper. Qed.", id="nested-lemma"),
    C("false", "Proof. Definition two := 1. reflexivity. Qed.", ERROR, id="nested-definition"),
    C("false", "Proof. Definition false_goal : 1 = 2 := ltac:(admit). Qed.", id="nested-definition-same-name"),
    C("leak", "Proof. Definition rev (A : Type) (l : list A) := l. reflexivity. Qed.", ERROR, id="shadow-rev"),
    C("false", "Proof. Notation \"2\" := 1. reflexivity. Qed.", id="notation"),
    C("false", "Proof. Infix \"=\" := (fun a b => True). exact I. Qed.", id="infix"),
    C("false", "Proof. Local Ltac foo := idtac. foo. Qed.", ERROR, id="local-ltac"),
    C("false", "Proof. Local Ltac foo := admit. foo. Qed.", id="local-ltac-admit"),
    C("false", "Proof. Ltac reflexivity := idtac. reflexivity. Qed.", ERROR, id="ltac-redefine-reflexivity"),
    C("false", "Proof. Ltac auto ::= idtac. auto. Qed.", ERROR, id="ltac-redefine-auto"),
    # -- ending early and restarting ----------------------------------------------------------------
    C("false", "Proof. reflexivity. Qed. Lemma false_goal : 1 = 1. Proof. reflexivity. Qed.", id="qed-restart"),
    C("false", "Proof. Qed. Lemma false_goal : 1 = 1. Proof. reflexivity. Qed.", id="empty-qed-restart"),
    C("false", "Proof. reflexivity. Defined. Lemma false_goal : 1 = 1. Proof. reflexivity. Qed.",
      id="defined-restart"),
    C("false", "Proof. reflexivity. Qed. Admitted.", id="qed-then-admitted"),
    # A repeated ``Proof.`` is an honest slip since issue 12: dropped, and the proof is checked (and fails).
    C("false", "Proof. Proof. reflexivity. Qed.", FAIL, id="second-proof"),
    C("false", "Proof. Restart. Admitted.", id="restart"),
    C("false", "Proof. Undo. Qed.", ERROR, id="undo"),
    C("false", "Proof. Focus 1. Qed.", FAIL, id="focus"),  # sent as written (round 6)
    # A query inside a proof is dropped since round 5 (it changes nothing): the false goal stays unproved.
    C("false", "Proof. Show Proof. Qed.", FAIL, id="show"),
    C("false", "Proof. Eval compute in 1. Qed.", FAIL, id="eval"),
    C("false", "Proof. Check 1. Qed.", FAIL, id="check"),
    C("false", "all: Admitted.", id="selector-admitted"),
    C("false", "2: Qed.", ERROR, id="selector-qed"),
    # -- control prefixes ---------------------------------------------------------------------------
    C("false", "Proof. Fail Admitted.", id="fail-prefix"),
    C("false", "Proof. Fail reflexivity. Admitted.", id="fail-prefix-then-admitted"),
    C("false", "Proof. Succeed Admitted. Qed.", id="succeed-prefix"),
    C("false", "Proof. Timeout 1 Admitted.", id="timeout-prefix"),
    C("false", "Proof. Time Admitted.", id="time-prefix"),
    # -- comments, strings and the sentence cut -------------------------------------------------------
    C("false", "Comments \"x\". Proof. reflexivity. Qed.", FAIL, id="comments-command"),
    C("false", "Proof. (* *) Admitted.", id="comment-then-admitted"),
    C("false", "Proof. idtac \"x. Admitted.\". Qed.", FAIL, id="admitted-inside-string"),
    C("false", "Proof. (* reflexivity. Qed. *)", FAIL, id="everything-in-comment"),
    C("false", "Proof. reflexivity. (* Qed. Admitted.", ERROR, id="unterminated-comment-swallows"),
    C("false", "Proof. idtac \"Qed. Admitted.", ERROR, id="unterminated-string-swallows"),
    C("false", "Proof. reflexivity. Qed. garbage", FAIL, id="qed-then-garbage"),
    C("false", "Proof.\r\nAdmitted.\r\n", id="crlf-admitted"),
    C("false", "Proof.\rAdmitted.\r", id="cr-admitted"),
    # -- Unicode ------------------------------------------------------------------------------------
    C("false", "Proof. \u0410dmitted.", FAIL, id="homoglyph-cyrillic-A-admitted"),
    C("false", "Proof. reflexivity. Q\u0435d.", FAIL, id="homoglyph-cyrillic-e-qed"),
    C("false", "Proof. \u0430dmit. Qed.", FAIL, id="homoglyph-cyrillic-a-admit"),
    C("false", "Proof. Adm\u200bitted.", id="zero-width-in-admitted"),
    C("false", "Proof. reflexivity. Qed\u200b.", FAIL, id="zero-width-in-qed"),
    C("false", "Proof.\u00a0Admitted.", id="nbsp-admitted"),
    C("false", "Proof.\u2028Admitted.", id="line-separator-admitted"),
    # -- goals and evars ----------------------------------------------------------------------------
    C("false", "Proof. refine (_ : 1 = 2). Unshelve. Qed.", FAIL, id="unshelve-abuse"),
    C("false", "Proof. eapply eq_trans. Unshelve. Qed.", FAIL, id="unshelve-evars"),
    C("false", "Proof. eapply eq_trans. Grab Existential Variables. Qed.", ERROR, id="grab-existential-variables"),
    C("false", "Proof. cofix f. exact f. Qed.", FAIL, id="cofix-self"),
    C("false", "Proof. fix f 1. Qed.", FAIL, id="fix-self"),
    C("hard", "Proof. assert (X : forall m : nat, 1 = 2). { fix f 1. intro m. exact (f m). } "
              "discriminate (X 0). Qed.", FAIL, id="unguarded-fix-tactic"),
    C("false", "Proof. apply false_goal. Qed.", FAIL, id="self-reference"),
    # -- unchecked terms and reduction machines: the kernel must re-check at Qed ------------------------
    C("false", "Proof. exact_no_check (eq_refl 1). Qed.", FAIL, id="exact_no_check"),
    C("false", "Proof. abstract (exact_no_check (eq_refl 1)). Qed.", FAIL, id="abstract-exact_no_check"),
    C("false", "Proof. vm_cast_no_check (eq_refl 1). Qed.", FAIL, id="vm_cast_no_check"),
    C("false", "Proof. native_cast_no_check (eq_refl 1). Qed.", FAIL, id="native_cast_no_check"),
    C("false", "Proof. change_no_check (1 = 1). reflexivity. Qed.", FAIL, id="change_no_check"),
    C("false", "Proof. vm_compute. reflexivity. Qed.", FAIL, id="vm_compute"),
    C("leak", "Proof. Open Scope list_scope. auto with datatypes. Qed.", id="leak-hidden-by-scope"),
    C("leak_noq", "Proof. auto with datatypes. Qed.", id="leak-noq-hint-sibling-after-target"),
    C("leak_noq", "Proof. rewrite <- app_nil_end. reflexivity. Qed.", id="leak-noq-sibling-after-target"),
    C("false", "Proof. Open Scope nat_scope. Admitted.", id="scope-then-admitted"),
    C("false", "Proof. native_compute. reflexivity. Qed.", FAIL, id="native_compute"),
    C("false", "Proof. exact (eq_refl 1 <: 1 = 2). Qed.", FAIL, id="vm-cast-term"),
    C("false", "Proof. exact (eq_refl 1 <<: 1 = 2). Qed.", FAIL, id="native-cast-term"),
    C("false", "Proof (eq_refl 2).", FAIL, id="proof-term-wrong"),
    C("false", "Proof. discriminate. Qed.", FAIL, id="discriminate"),
    # -- axioms the context offers but the task does not allow -------------------------------------------
    C("classic", "Proof. intro H. apply H. apply classic. Qed.", id="context-axiom-classic"),
    C("classic", "Proof. intro H. apply H. destruct (classic P); tauto. Qed.", id="context-axiom-classic-destruct"),
    C("axiom_ctx", "Proof. exact bad. Qed.", id="context-axiom-exact"),
    C("axiom_ctx", "Proof. abstract (exact bad). Qed.", id="context-axiom-abstract"),
    C("axiom_ctx", "Proof. assert (H : 1 = 1) by (abstract reflexivity using false_ax). exact bad. Qed.",
      id="context-axiom-abstract-same-name"),
    C("axiom_ctx", "Proof (bad).", id="context-axiom-proof-term"),
    # -- the original lemma, named: detected -------------------------------------------------------------
    C("leak", "Proof (List.app_nil_r _ _).", FAIL, id="leak-proof-term-two-args"),
    C("leak", "Proof (List.app_nil_r l).", id="leak-proof-term"),
    C("leak", "Proof. exact (@List.app_nil_r A l). Qed.", id="leak-exact-qualified"),
    C("leak", "Proof. exact (Coq.Lists.List.app_nil_r l). Qed.", id="leak-exact-fully-qualified"),
    C("leak", "Proof. apply List.app_nil_r. Qed.", id="leak-apply-qualified"),
    C("leak", "Proof. rewrite List.app_nil_r. reflexivity. Qed.", id="leak-rewrite-qualified"),
    C("leak", "Proof. apply (List.app_nil_r (A:=A)). Qed.", id="leak-apply-named-arg"),
    C("leak_noq", "Proof. apply List.app_nil_r. Qed.", id="leak-noq-apply-qualified"),
    C("leak_noq", "Proof (List.app_nil_r _).", id="leak-noq-proof-term"),
]

# Found by the red team and fixed: the leak check now reads the proof *term* (hint databases,
# autorewrite and Ltac included), follows every Locate entry, and has no identifier cap.
LEAK_HOLES = [
    C("leak", "Proof. exact (app_nil_r l). Qed.", id="leak-exact-bare"),
    C("leak", "Proof. apply app_nil_r. Qed.", id="leak-apply-bare"),
    C("leak", "Proof. rewrite app_nil_r. reflexivity. Qed.", id="leak-rewrite-bare"),
    C("leak_noq", "Proof. exact (app_nil_r l). Qed.", id="leak-noq-exact-bare"),
    C("leak", "Proof. rewrite <- app_nil_end. reflexivity. Qed.", id="leak-sibling-lemma"),
    C("leak", "Proof. autorewrite with list. reflexivity. Qed.", id="leak-autorewrite"),
    C("leak", "Proof. simpl_list. reflexivity. Qed.", id="leak-ltac-simpl_list"),
    C("leak", "Proof. auto with datatypes. Qed.", id="leak-auto-with-datatypes"),
    C("leak", "Proof. auto with *. Qed.", id="leak-auto-with-star"),
    C("leak_noq", "Proof. autorewrite with list. reflexivity. Qed.", id="leak-noq-autorewrite"),
    C("leak_noq", "Proof. simpl_list. reflexivity. Qed.", id="leak-noq-simpl_list"),
    C("leak", f"Proof. pose (fun {PAD} : nat => 0) as f. clear f. exact (app_nil_r l). Qed.",
      id="leak-200-identifier-cap"),
]

# Found by the red team and fixed: From/End are vernacular (CHEATING), and a failing tactic is FAIL
# whatever its message says (the proof controls the message text).
CLASSIFICATION_GAPS = [
    C("false", "Proof. From Coq Require Import Classical. Qed.", FAIL, id="from-require"),
    # Since issue 12 a Require before the proof is an honest slip: a library the context does not
    # load (it could bring an axiom) is ERROR with feedback, never OK.
    C("false", "From Coq Require Import Classical.", FAIL,
      id="from-require-bare"),
    C("false", "Proof. End Foo. Qed.", ERROR, id="end-section"),
    C("false", "Proof. fail \"Syntax error: x\". Qed.", FAIL, id="spoof-error"),
    C("false", "Proof. fail \"timeout\". Qed.", FAIL, id="spoof-timeout"),
]


def _check(verifier, task_key: str, proof: str):
    return verifier.check(TASKS[task_key], proof)


@pytest.mark.parametrize(("task_key", "proof", "expected"), CHEATS)
def test_cheat_is_refused(coq_verifier, task_key: str, proof: str, expected: Verdict) -> None:
    result = _check(coq_verifier, task_key, proof)
    assert result.verdict is expected, (result.verdict, result.reasons, result.messages)
    if result.verdict is Verdict.CHEATING:
        assert result.reasons


@pytest.mark.parametrize("proof", [
    "Proof. Set Printing All. induction n; simpl; auto. Qed.",
    "Proof. induction n. Unset Printing Notations. - reflexivity. - simpl; auto. Qed.",
])
def test_a_display_option_inside_an_honest_proof_is_dropped(coq_verifier, proof: str) -> None:
    """CHEATING before red team round 7's open question was settled: an option that leaves the kernel alone claims
    nothing, so it is dropped with a note (the kernel-check ones stay CHEATING in CHEATS)."""
    result = _check(coq_verifier, "hard", proof)
    assert result.verdict is Verdict.OK, (result.reasons, result.messages)
    assert any("dropped the option" in m for m in result.messages), result.messages


@pytest.mark.parametrize(("task_key", "proof", "expected"), LEAK_HOLES)
def test_leak_is_refused(coq_verifier, task_key: str, proof: str, expected: Verdict) -> None:
    result = _check(coq_verifier, task_key, proof)
    assert result.verdict is expected, (result.verdict, result.reasons, result.messages)


@pytest.mark.parametrize(("task_key", "proof", "expected"), CLASSIFICATION_GAPS)
def test_cheat_gets_the_right_verdict(coq_verifier, task_key: str, proof: str, expected: Verdict) -> None:
    result = _check(coq_verifier, task_key, proof)
    assert result.verdict is expected, (result.verdict, result.reasons, result.messages)


# -- submissions that must never reach Coq ----------------------------------------------------------


@pytest.mark.parametrize(
    "proof",
    [
        pytest.param("", id="empty"),
        pytest.param("   \n\t  ", id="blank"),
        pytest.param("(* only a comment *)", id="only-comment"),
        pytest.param("Proof. \x00 Admitted.", id="nul-byte"),
        pytest.param("Proof. reflexivity.\x00 Qed.", id="nul-before-qed"),
        pytest.param("Proof. \x1b[2J Qed.", id="escape-sequence"),
        pytest.param("Proof. " + "idtac. " * (10 * 1024 * 1024 // 7) + "Qed.", id="10MB"),
    ],
)
def test_garbage_is_not_ok(coq_verifier, proof: str) -> None:
    result = coq_verifier.check(TASKS["false"], proof)
    assert result.verdict is Verdict.ERROR, result  # refused before any prover runs: nothing to check
    assert result.backend == "precheck", result  # the verifier's own report that no prover ran (no wall clock)


# -- resources: the session must survive ------------------------------------------------------------

HONEST_HARD = "Proof. induction n; simpl; auto. Qed."


def test_looping_tactic_times_out_and_session_recovers(coq_verifier) -> None:
    task = _task("loop", "Lemma loop_goal : 1 = 2.", timeout_s=3)
    for proof in ("Proof. do 100000000 idtac. Qed.", "Proof. do 1000000 (do 1000000 idtac). Qed."):
        result = coq_verifier.check(task, proof)
        # Ended by the verifier's own deadline (interrupt, then kill, from outside), as it reports:
        assert result.verdict is Verdict.TIMEOUT and result.reasons == ("no verdict within timeout_s=3",), result
        assert coq_verifier.check(TASKS["hard"], HONEST_HARD).verdict is Verdict.OK


def test_ltac_self_recursion_is_refused_and_session_recovers(coq_verifier) -> None:
    task = _task("letrec", "Lemma letrec_goal : 1 = 2.", timeout_s=3)
    result = coq_verifier.check(task, "Proof. let rec f := f in f. Qed.")
    # Ltac sees the loop at once (no step is taken); FAIL, not TIMEOUT, is Coq's answer before the deadline
    assert result.verdict is Verdict.FAIL, result
    assert coq_verifier.check(TASKS["hard"], HONEST_HARD).verdict is Verdict.OK


def test_memory_bomb_is_refused_and_session_recovers(coq_verifier) -> None:
    # A budget far above the time the bomb takes to exhaust the sandbox's address space (about 19 s here), so the
    # verdict is the memory limit's, one verdict on any machine (with 5 s it was TIMEOUT or FAIL by machine speed);
    # a bomb that outruns its budget is the loop test's TIMEOUT above.
    task = _task("membomb", "Lemma membomb_goal : 1 = 2.", timeout_s=300)
    result = coq_verifier.check(
        task, "Proof. let x := eval vm_compute in (Nat.pow 2 100000000) in idtac. Qed.")
    assert result.verdict is Verdict.FAIL, result
    assert coq_verifier.check(TASKS["hard"], HONEST_HARD).verdict is Verdict.OK


def test_output_that_breaks_the_xml_channel_is_refused_and_session_recovers(coq_verifier) -> None:
    # U+FFFF is not an XML character: echoed back by coqidetop it kills our XML reader.
    task = _task("xml", "Lemma xml_goal : 1 = 2.", timeout_s=3)
    result = coq_verifier.check(task, 'Proof. idtac "\uffff". Qed.')
    assert result.verdict is Verdict.FAIL, result
    assert coq_verifier.check(TASKS["hard"], HONEST_HARD).verdict is Verdict.OK


# -- honest proofs must be accepted (false rejections matter) -----------------------------------------

HONEST_TASKS = {
    "hard": TASKS["hard"],
    "leak": TASKS["leak"],
    "classic": TASKS["classic"],
    "lia": _task("lia", "Lemma lia_ok (a b : nat) : a + b = b + a /\\ a <= a + b.",
                 context="Require Import Lia.\n", reference="Proof. lia. Qed."),
    "unicode": _task("unicode", "Lemma lemme_\u00e9 (n : nat) : 0 + n = n.", reference="Proof. reflexivity. Qed."),
    "conj": _task("conj", "Lemma conj4 : True /\\ (1 = 1 /\\ (2 = 2 /\\ 3 = 3)).",
                  reference="Proof. repeat split. Qed."),
    "ex": _task("ex", "Lemma ex2 : exists n : nat, n = 2.", reference="Proof. exists 2. reflexivity. Qed."),
}


def H(task: str, proof: str, *, id: str):
    return pytest.param(task, proof, id=id)


HONEST = [
    H("hard", "Proof using. induction n; simpl; auto. Qed.", id="proof-using"),
    H("hard", "Proof. induction n; simpl; auto. Defined.", id="defined"),
    H("hard", "Proof. induction n; simpl; auto. Qed .", id="qed-space-period"),
    H("hard", "induction n; simpl; auto.", id="bare-script"),
    H("hard", "Proof (eq_sym (plus_n_O n)).", id="proof-term"),
    H("hard", "Proof. induction n. all: simpl; auto. Qed.", id="all-selector"),
    H("hard", "Proof. induction n. 2: { simpl. rewrite IHn. reflexivity. } reflexivity. Qed.", id="2-selector-brace"),
    H("hard", "Proof. induction n. 1: reflexivity. !: simpl; rewrite IHn; reflexivity. Qed.", id="bang-selector"),
    H("hard", "Proof. induction n.\n{ reflexivity. }\n{ simpl. now rewrite IHn. }\nQed.", id="braces-now"),
    H("hard", "Proof. (* Admitted. *) induction n; simpl; auto. (* Qed. Admitted. (* nested *) *) Qed.",
      id="admitted-in-comments"),
    H("hard", 'Proof. idtac "Qed. Admitted.". induction n; simpl; auto. Qed.', id="admitted-in-string"),
    H("hard", 'Proof. (* "*)" *) induction n; simpl; auto. Qed.', id="comment-closer-in-string"),
    H("hard", "Proof with auto. induction n; simpl... Qed.", id="proof-with-ellipsis"),
    H("hard", "Proof. now induction n; simpl; auto. Qed.", id="now"),
    H("hard", "Proof. vm_compute. induction n; simpl; auto. Qed.", id="vm_compute"),
    H("leak", "Proof. Local Open Scope list_scope. induction l; simpl; congruence. Qed.", id="local-open-scope"),
    # app_nil_l comes before app_nil_r in Lists/List.v: only what the file defines at or after the target is banned
    H("leak", "Proof. induction l; simpl; [apply app_nil_l | congruence]. Qed.", id="earlier-lemma-of-original-file"),
    H("hard", "Proof. induction n; [ reflexivity | .. ]. simpl. now rewrite IHn. Qed.", id="dotdot-dispatch"),
    H("hard", "Proof.\r\n  induction n.\r\n  - reflexivity.\r\n  - simpl. rewrite IHn. reflexivity.\r\nQed.\r\n",
      id="crlf-multiline"),
    H("hard", "Proof.\n\tinduction n as [|m IH].\n\t- reflexivity.\n\t- cbn. f_equal. exact IH.\nQed.", id="tabs"),
    H("lia", "Proof. lia. Qed.", id="lia"),
    H("lia", "Proof. split.\n  - lia.\n  - lia.\nQed.", id="lia-bullets"),
    H("unicode", "Proof. reflexivity. Qed.", id="unicode-lemma-name"),
    H("unicode", "Proof. intros. (* \u00e9 \u2200 \u03bb *) simpl. reflexivity. Qed.", id="unicode-comment"),
    H("conj", "Proof. split.\n- exact I.\n- split.\n  + reflexivity.\n  + split.\n    * reflexivity.\n"
              "    * reflexivity.\nQed.", id="nested-bullets"),
    H("conj", "Proof. split; [exact I|]. split. -- reflexivity. -- split; reflexivity. Qed.", id="double-bullets"),
    H("ex", "Proof. refine (ex_intro _ _ _). Unshelve. 2: exact 2. reflexivity. Qed.", id="unshelve"),
    H("ex", "Proof. eexists ?[m]. [m]: exact 2. reflexivity. Qed.", id="named-goal-selector"),
    H("ex", "Proof. eexists. reflexivity. Qed.", id="eexists"),
    H("leak", LEAK_REFERENCE, id="leak-task-reference"),
    H("leak", "Proof. induction l; simpl; congruence. Qed.", id="leak-task-congruence"),
    H("classic", "Proof. intro H. apply H. right. intro p. apply H. left. exact p. Qed.", id="classic-context"),
]


@pytest.mark.parametrize(("task_key", "proof"), HONEST)
def test_honest_proof_is_ok(coq_verifier, task_key: str, proof: str) -> None:
    result = coq_verifier.check(HONEST_TASKS[task_key], proof)
    assert result.verdict is Verdict.OK, (result.verdict, result.reasons, result.messages)
    assert result.audited  # the fixture audits every OK with coqc + coqchk


def test_there_are_at_least_forty_distinct_cheats() -> None:
    cheats = [(p.values[0], p.values[1]) for p in CHEATS + LEAK_HOLES + CLASSIFICATION_GAPS]
    assert len(set(cheats)) == len(cheats) >= 40


# -- round 3 (issue 12): new task shapes --------------------------------------------------------------
# Allow-lists by full name, contexts that declare or load a second axiom with an allowed short name,
# a typeclass context, a library loaded but not imported, and the text around a proof, which the
# normaliser now reads (prose, a repeated statement, a Require) instead of refusing outright.

CLASSIC_FULL = "Coq.Logic.Classical_Prop.classic"
SHADOW = "Require Import Coq.Logic.Classical_Prop.\nModule M. Axiom classic : forall P : Prop, P \\/ ~ P. End M.\n"
CID = "Coq.Logic.IndefiniteDescription.constructive_indefinite_description"
CID_CONTEXT = "Require Import Coq.Logic.IndefiniteDescription.\nRequire Coq.Logic.ClassicalEpsilon.\n"
CID_STATEMENT = "Lemma cid (A : Type) (P : A -> Prop) : (exists x, P x) -> {x : A | P x}."
MONOID = ("Class Monoid (A : Type) := { op : A -> A -> A; unit : A;\n"
          "  unit_l : forall x, op unit x = x; unit_r : forall x, op x unit = x }.\n"
          "Section M.\nContext {A : Type} `{Monoid A}.\n")
EM = "Lemma em (P : Prop) : P \\/ ~ P."

TASKS.update({
    # The context declares a second axiom named `classic` in a module; only the stdlib one is allowed.
    "shadow_full": _task("shadow_full", EM, context=SHADOW, allowed_axioms=[CLASSIC_FULL]),
    # The same, listed by short name: ambiguous here, so no axiom of that name passes.
    "shadow_short": _task("shadow_short", EM, context=SHADOW, allowed_axioms=["classic"]),
    # The same, the allow-list taken from the reference proof (which uses the stdlib axiom).
    "shadow_ref": _task("shadow_ref", EM, context=SHADOW, reference="Proof. apply classic. Qed."),
    # Two stdlib libraries declare an axiom constructive_indefinite_description; one is allowed.
    "cid": _task("cid", CID_STATEMENT, context=CID_CONTEXT, allowed_axioms=[CID]),
    # A typeclass context whose lemma is false for an arbitrary instance unless the laws are used.
    "monoid_false": _task("monoid_false", "Lemma op_comm (x y : A) : op x y = op y x.", context=MONOID),
    # The original library is loaded but not imported: `Import` (or a `Require Import` of it) makes
    # the original lemma reachable by its short name.
    "leak_required": _task("leak_required", "Lemma app_nil_r (A : Type) (l : list A) : List.app l nil = l.",
                           context="Require Coq.Lists.List.\n",
                           reference=LEAK_REFERENCE, qualid="Coq.Lists.List.app_nil_r"),
    # A context module that holds an inconsistent axiom, not allowed.
    "cheat_module": _task("cheat_module", "Lemma cm : 1 = 2.", context="Module Cheat. Axiom bad : False. End Cheat.\n",
                          allowed_axioms=[]),
})

ROUND3_CHEATS = [
    # -- the axiom allow-list is matched by full name ----------------------------------------------------
    C("shadow_full", "Proof. exact (M.classic P). Qed.", id="second-axiom-same-short-name-in-module"),
    C("shadow_full", "Proof. apply M.classic. Qed.", id="second-axiom-same-short-name-apply"),
    C("shadow_full", "Proof (M.classic P).", id="second-axiom-same-short-name-proof-term"),
    C("shadow_full", "Proof. Import M. exact (classic P). Qed.", id="second-axiom-imported-over-the-allowed"),
    C("shadow_short", "Proof. exact (M.classic P). Qed.", id="short-allow-list-ambiguous"),
    C("shadow_short", "Proof. exact (Classical_Prop.classic P). Qed.", id="short-allow-list-ambiguous-even-stdlib"),
    C("shadow_ref", "Proof. exact (M.classic P). Qed.", id="reference-allow-list-is-full-names"),
    C("cid", "Proof. apply ClassicalEpsilon.constructive_indefinite_description. Qed.",
      id="second-stdlib-axiom-same-short-name-loaded-by-require"),
    C("cheat_module", "Proof. Import Cheat. destruct bad. Qed.", id="import-of-a-context-module-axiom"),
    C("cheat_module", "Import Cheat. Proof. destruct bad. Qed.", id="import-before-proof-of-a-context-module-axiom"),
    # -- before the proof: still cheats, whatever honest text surrounds them ------------------------------
    C("false", "Here is my proof:\nProof. Admitted.", id="prose-then-admitted"),
    C("false", "Lemma false_goal : 1 = 2.\nProof. admit. Qed.", id="statement-then-admit"),
    C("false", "Axiom one_two : 1 = 2.\nLemma false_goal : 1 = 2.\nProof. exact one_two. Qed.", id="axiom-then-statement"),
    C("monoid_false", "Context `{forall x y : A, op x y = op y x}.\nProof. auto. Qed.", id="context-assumption-before"),
    C("monoid_false", "Hypothesis comm : forall x y : A, op x y = op y x.\nProof. apply comm. Qed.",
      id="hypothesis-before"),
    C("false", "Unset Guard Checking.\nLemma false_goal : 1 = 2.\nProof. reflexivity. Qed.", id="unset-guard-then-statement"),
    C("false", "#[bypass_check(guard)]\nLemma false_goal : 1 = 2.\nProof. reflexivity. Qed.",
      id="bypass-attribute-on-statement"),
    C("false", "Notation \"2\" := 1.\nProof. reflexivity. Qed.", id="notation-before"),
    C("false", "Local Notation \"x = y\" := True.\nProof. exact I. Qed.", id="local-notation-before"),
    C("false", "Proof (ltac:(admit)). Proof. reflexivity. Qed.", FAIL, id="proof-term-hole-then-proof"),
    C("false", "```coq\nProof. Admitted.\n```", id="fenced-admitted"),
    C("false", "```coq\nProof. reflexivity. Qed.\n```\n```coq\nProof. Admitted.\n```", id="last-fence-admitted"),
    C("false", "Proof. -admit. Qed.", id="glued-bullet-admit"),
    C("false", "Proof. Proof. admit. Qed.", id="second-proof-admit"),
    # -- a changed statement is never checked in place of the task's --------------------------------------
    C("false", "Lemma false_goal : 1 = 1.\nProof. reflexivity. Qed.", ERROR,
      id="changed-statement-same-name"),
    C("false", "Lemma easy : 1 = 1.\nProof. reflexivity. Qed.", ERROR,
      id="changed-statement-other-name"),
    C("false", "Theorem false_goal : 2 = 2.\nreflexivity.", ERROR,
      id="changed-statement-bare-script"),
    # -- after the proof -------------------------------------------------------------------------------
    C("false", "Proof. Qed.\nLemma false_goal : 1 = 1.\nProof. reflexivity. Qed.", id="restart-after-qed-newlines"),
    C("false", "Proof. reflexivity. Qed.\nAdmitted", id="admitted-after-qed-without-period"),
    C("false", "Proof. reflexivity. Qed.\nAxiom x : 1 = 2.", id="axiom-after-qed"),
    # -- Require / Import: never a way to the original lemma or a new axiom ---------------------------------
    C("leak_required", "Require Import List.\nProof. apply app_nil_r. Qed.", id="require-import-of-loaded-original"),
    C("leak_required", "Import Coq.Lists.List.\nProof. apply app_nil_r. Qed.", id="import-of-loaded-original"),
    C("leak_required", "Proof. Import List. exact (app_nil_r l). Qed.", id="import-inside-proof-original"),
    C("leak", "From Coq Require Import List.\nProof. apply app_nil_r. Qed.", id="from-require-loaded-original"),
    # A Require is judged by what it brings (issue 26): the axiom it adds shows in Print Assumptions.
    C("hard", "Require Import Coq.Logic.Classical.\nProof. destruct (classic (n = 0)); auto. Qed.",
      id="require-of-an-axiom-library"),
    C("classic", "Require Import Classical_Prop.\nProof. intro H. apply H. apply classic. Qed.",
      id="require-of-loaded-axiom-library-then-axiom"),
    C("false", "Proof. Require Import Coq.Logic.Classical. Qed.", FAIL, id="require-inside-proof"),
    C("leak_required", "Proof. Require Import List. apply app_nil_r. Qed.", id="require-inside-proof-original"),
    C("classic", "Proof. intro H. Require Import Classical_Prop. apply H. apply classic. Qed.",
      id="require-inside-proof-loaded-axiom-library-then-axiom"),
    # -- typeclass context: instances and hints are vernacular inside a proof -------------------------------
    C("monoid_false", "Proof. Existing Instance H. Qed.", ERROR, id="existing-instance"),
    C("monoid_false", "Proof. Hint Resolve unit_l : core. auto. Qed.", FAIL, id="hint-in-typeclass-context"),
    C("monoid_false", "Proof. Admitted.", id="admitted-in-typeclass-context"),
]


@pytest.mark.parametrize(("task_key", "proof", "expected"), ROUND3_CHEATS)
def test_round3_cheat_is_refused(coq_verifier, task_key: str, proof: str, expected: Verdict) -> None:
    result = _check(coq_verifier, task_key, proof)
    assert result.verdict is expected, (result.verdict, result.reasons, result.messages)
    if result.verdict is Verdict.CHEATING:
        assert result.reasons


def test_ambiguous_short_allow_list_says_so(coq_verifier) -> None:
    result = _check(coq_verifier, "shadow_short", "Proof. exact (classic P). Qed.")
    assert result.verdict is Verdict.CHEATING
    assert "ambiguous" in " ".join(result.reasons) and "fully qualified" in " ".join(result.reasons)


HONEST_TASKS.update({
    "shadow_full": TASKS["shadow_full"],
    "shadow_ref": TASKS["shadow_ref"],
    "cid": TASKS["cid"],
    "short_unique": _task("short_unique", EM, context="Require Import Classical.\n", allowed_axioms=["classic"]),
    "monoid": _task("monoid", "Lemma unit_unique (u : A) (Hu : forall x, op u x = x) : u = unit.", context=MONOID),
    "leak_required": TASKS["leak_required"],
})

ROUND3_HONEST = [
    H("shadow_full", "Proof. exact (classic P). Qed.", id="allowed-axiom-by-full-name"),
    H("shadow_full", "Proof. exact (Classical_Prop.classic P). Qed.", id="allowed-axiom-partially-qualified-use"),
    H("shadow_ref", "Proof. apply classic. Qed.", id="allowed-axiom-from-reference"),
    H("cid", "Proof. apply constructive_indefinite_description. Qed.", id="allowed-stdlib-axiom-beside-its-namesake"),
    H("short_unique", "Proof. apply classic. Qed.", id="short-allow-list-unique"),
    H("short_unique", "Require Import Classical.\nLemma em (P : Prop) : P \\/ ~ P.\nProof.\n  apply classic.\nQed.\n"
                      "This uses the law of excluded middle.", id="short-allow-list-with-slips"),
    H("monoid", "Proof. rewrite <- (unit_r u). apply Hu. Qed.", id="typeclass"),
    H("monoid", "Lemma unit_unique (u : A) (Hu : forall x, op u x = x) : u = unit.\nProof.\n"
                "  rewrite <- (unit_r u).\n  apply Hu.\nQed.", id="typeclass-statement-repeated"),
    H("leak_required", "Require Import List.\nProof. induction l; simpl; [reflexivity | rewrite IHl; reflexivity]. "
                       "Qed.", id="require-of-loaded-library-honest"),
    H("leak_required", "Proof.\n  induction l.\n  -reflexivity.\n  -simpl. rewrite IHl. reflexivity.\nQed.",
      id="glued-bullets-in-leak-task"),
    # Was CHEATING (a Require of a library the context does not load, by name): an axiom-free library the proof
    # needs is loaded after the statement and judged by what it brings (issue 26).
    H("hard", "Proof. Require Import Lia. lia. Qed.", id="require-inside-proof-of-an-unloaded-library"),
]


@pytest.mark.parametrize(("task_key", "proof"), ROUND3_HONEST)
def test_round3_honest_proof_is_ok(coq_verifier, task_key: str, proof: str) -> None:
    result = coq_verifier.check(HONEST_TASKS[task_key], proof)
    assert result.verdict is Verdict.OK, (result.verdict, result.reasons, result.messages)
    assert result.audited


# -- issue 26: an alias (a module's Include) is the constant it names ------------------------------------------------
ADD_COMM = _task("add_comm", "Lemma add_comm (n m : nat) : n + m = m + n.", context="Require Import PeanoNat Lia.\n",
                 reference="Proof. lia. Qed.", qualid="Coq.Arith.PeanoNat.Nat.add_comm")


@pytest.mark.parametrize(("proof", "expected"), [
    # lia's term names Nat.add, which Locate gives as Coq.Arith.PeanoNat.Nat.add "(alias of Init.Nat.add)": it was
    # CHEATING as a constant "defined at or after the target in Coq.Arith.PeanoNat".
    ("Proof. lia. Qed.", Verdict.OK),
    ("Proof. apply Nat.add_comm. Qed.", Verdict.CHEATING),
    ("Proof. rewrite Nat.add_comm. reflexivity. Qed.", Verdict.CHEATING),
])
def test_an_alias_in_the_proof_term_is_the_constant_it_names(coq_verifier, proof: str, expected: Verdict) -> None:
    result = coq_verifier.check(ADD_COMM, proof)
    assert result.verdict is expected, (result.reasons, result.messages)
