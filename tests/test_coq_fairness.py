"""Fairness of Coq verdicts (issue 12): an honest slip is normalised and checked, or ``ERROR`` with
feedback that says what to change; ``CHEATING`` only for an attempt to get an unproved statement
accepted. Every row of the README's Coq verdict-policy table has a case here, on the real prover
and on several task shapes: real stdlib tasks (a prefix of ``Lists/List.v``, open sections,
``metadata.qualid``), contexts that load libraries, an allowed axiom, a typeclass context.

The checks go through :meth:`CoqVerifier.check` with the raw text, as ``proofgym check`` does:
no reply parser in front.
"""

from __future__ import annotations

import functools

import pytest

from proofgym.envs.types import Task, Verdict
from proofgym.envs.verifiers.base import Rejected
from proofgym.envs.verifiers.coq.lexer import split_sentences
from proofgym.envs.verifiers.coq.proof import normalize_proof

# -- fast tier: the normaliser alone ---------------------------------------------------------------

HARD = "Lemma hard (n : nat) : n + 0 = n."


def test_a_tactic_ending_in_a_star_is_not_closed_as_a_comment() -> None:
    got = normalize_proof("Proof. rewrite addn0 in H *. Timeout 3 move=> * . Qed.").sentences
    assert got == ("Proof.", "(rewrite addn0 in H * ).", "(timeout 3 (move=> * )).", "Qed.")
    assert all("*)" not in s for s in got)


@pytest.mark.parametrize(("proof", "sentences", "note"), [
    pytest.param("Lemma hard (n : nat) : n + 0 = n.\nProof. auto. Qed.", ("Proof.", "(auto).", "Qed."),
                 "repeated statement", id="statement"),
    pytest.param("Theorem hard\n  (n:nat) :\n\tn+0 = n.\nProof. auto. Qed.", ("Proof.", "(auto).", "Qed."),
                 "repeated statement", id="statement-theorem-whitespace"),
    # The copy quantifies n in its goal (red team round 7): ``revert n`` gives the proof the goal it was written for.
    pytest.param("Lemma hard : forall n : nat, n + 0 = n. Proof. auto. Qed.", ("Proof.", "(revert n).", "(auto).",
                                                                              "Qed."),
                 "repeated statement", id="statement-forall-form"),
    pytest.param("Lemma plus_n_0 (n : nat) : n + 0 = n. Proof. auto. Qed.", ("Proof.", "(auto).", "Qed."),
                 "named plus_n_0 instead of hard", id="statement-other-name"),
    pytest.param("Here is the proof:\nProof. auto. Qed.", ("Proof.", "(auto).", "Qed."), "Here is the proof",
                 id="prose-without-period-then-proof"),
    pytest.param("Proof by induction on n. Proof. auto. Qed.", ("Proof.", "(auto).", "Qed."), "Proof by induction",
                 id="prose-proof-term-then-proof"),
    pytest.param("Proof. auto. Qed.\nThis completes the proof", ("Proof.", "(auto).", "Qed."), "after the end",
                 id="prose-after-qed-no-period"),
    pytest.param("Proof. auto. Qed", ("Proof.", "(auto).", "Qed."), "missing period", id="qed-without-period"),
    # An LM that continues the file it was shown writes the file's next lemma after the proof (issue 27's held-out
    # replies, e.g. i2z_3 then `Lemma i2z_4 ...`): nothing after `Qed.` is sent, so it is dropped, cut off or not.
    pytest.param("Proof. auto. Qed.\n\nLemma hard2 : 1 = 1.\nProof. reflexivity. Qed.", ("Proof.", "(auto).", "Qed."),
                 "from the lemma `hard2` on", id="next-lemma-after-qed"),
    pytest.param("Proof. auto. Qed.\n\nLemma hard2 : 1 = 1.\nProof. reflex", ("Proof.", "(auto).", "Qed."),
                 "from the lemma `hard2` on", id="next-lemma-cut-off"),
    pytest.param("Proof. Proof. auto. Qed.", ("Proof.", "(auto).", "Qed."), "repeated `Proof.`", id="proof-twice"),
    pytest.param("Proof. Proof using. auto. Qed.", ("Proof.", "(auto).", "Qed."), "Proof using",
                 id="proof-using-after-proof"),
    pytest.param("Proof. Proof (eq_refl).", ("Proof.", "exact ((eq_refl)).", "Qed."), "Proof <term>",
                 id="proof-term-after-proof"),
    pytest.param("Proof. -reflexivity. +auto. Qed.", ("Proof.", "-", "(reflexivity).", "+", "(auto).", "Qed."), "",
                 id="glued-bullets"),
    pytest.param("Import ListNotations. Open Scope list_scope. Proof. auto. Qed.",
                 ("Proof.", "Import ListNotations.", "Open Scope list_scope.", "(auto).", "Qed."), "",
                 id="import-and-scope-move-after-proof"),
    pytest.param("Set Implicit Arguments.\nProof. auto. Qed.", ("Proof.", "(auto).", "Qed."), "Set Implicit",
                 id="harmless-option"),
    pytest.param("```coq\nProof. auto. Qed.\n```\nDone.", ("Proof.", "(auto).", "Qed."), "fenced", id="fences"),
    pytest.param("**Proof.**\nauto.\nQed.", ("Proof.", "(auto).", "Qed."), "Markdown", id="bold-proof-line"),
    pytest.param("Proof.\n**auto. **\nQed.", ("Proof.", "**", "(auto).", "**", "Qed."), "", id="bullets-not-bold"),
])
def test_slips_are_normalised(proof: str, sentences: tuple[str, ...], note: str) -> None:
    norm = normalize_proof(proof, HARD)
    assert norm.sentences == sentences
    assert note in " ".join(norm.notes)


@pytest.mark.parametrize(("proof", "verdict", "reason"), [
    pytest.param("Lemma hard (n : nat) : 0 + n = n. Proof. auto. Qed.", "ERROR", "not the task's statement",
                 id="changed-statement"),
    pytest.param("Lemma helper (n : nat) : n = n + 0. Proof. auto. Qed.\nLemma hard (n : nat) : n + 0 = n.\n"
                 "Proof. symmetry. apply helper. Qed.", "ERROR", "assert", id="helper-lemma-first"),
    pytest.param("Definition two := 2. Proof. auto. Qed.", "ERROR", "cannot add definitions", id="helper-definition"),
    pytest.param("Proof. auto. Proof with auto. Qed.", "ERROR", "first sentence", id="proof-with-late"),
    pytest.param("Require Import Foo Bar(baz).\nProof. auto. Qed.", "ERROR", "Require", id="unreadable-require"),
    pytest.param("Axiom ax : forall n, n + 0 = n. Proof. auto. Qed.", "CHEATING", "assumes", id="axiom-before"),
    pytest.param("Unset Guard Checking. Proof. auto. Qed.", "CHEATING", "kernel check", id="unset-guard-before"),
    pytest.param("Notation \"0\" := 1. Proof. auto. Qed.", "CHEATING", "Notation", id="notation-before"),
    pytest.param("Proof. auto. Qed. Lemma hard (n : nat) : True. Proof. exact I. Qed.", "CHEATING",
                 "after the end", id="restart-after-qed"),
    pytest.param("Proof. auto. Qed. Admitted", "CHEATING", "Admitted", id="admitted-after-qed-no-period"),
    # The other side of dropping the file's next lemma: a hole or an assumption in it, or a lemma of the task's own
    # name after it (a shadow), is still a cheat.
    pytest.param("Proof. auto. Qed.\nLemma hard2 : 1 = 2. Admitted.", "CHEATING", "Admitted", id="next-lemma-admitted"),
    pytest.param("Proof. auto. Qed.\nLemma hard2 : 1 = 1. Proof. reflexivity. Qed.\nAxiom ax : False.", "CHEATING",
                 "assumes", id="next-lemma-then-axiom"),
    pytest.param("Proof. auto. Qed.\nLemma hard2 : 1 = 1. Proof. reflexivity. Qed.\nLemma hard : True. Proof. "
                 "exact I. Qed.", "CHEATING", "Lemma hard : True.", id="next-lemma-then-shadow"),
    # The space the checker puts before `)` after a tactic ending in `*` changes nothing for a cheat beside it.
    pytest.param("Proof. rewrite addn0 in H *. admit. Qed.", "CHEATING", "hole tactic", id="star-then-admit"),
    pytest.param("Proof. rewrite addn0 in H *. Admitted.", "CHEATING", "Admitted", id="star-then-admitted"),
])
def test_what_cannot_be_normalised(proof: str, verdict: str, reason: str) -> None:
    with pytest.raises(Rejected) as info:
        normalize_proof(proof, HARD)
    assert info.value.verdict == verdict
    assert reason in " ".join(info.value.reasons)


BARE = "Lemma bare n m : n + m = m + n."


@pytest.mark.parametrize(("proof", "outcome", "reason"), [
    # stdpp, Iris and the standard library write most statements with bare binder names before the colon.
    pytest.param(BARE + "\nProof. lia. Qed.", ("Proof.", "(lia).", "Qed."), "repeated statement",
                 id="repeated-then-proof"),
    pytest.param("Theorem bare n m :\n  n + m = m + n.\nProof. lia. Qed.", ("Proof.", "(lia).", "Qed."),
                 "repeated statement", id="repeated-other-keyword-and-layout"),
    pytest.param(BARE + "\nlia. Qed.", ("(lia).", "Qed."), "repeated statement",
                 id="repeated-without-proof-sentence"),
    # SmolLM2 on coq-iris: the statement and nothing else was CHEATING ("vernacular command 'Lemma' ...").
    pytest.param("```coq\n" + BARE + "\n```\nThis proof is a proof of the identity.", "ERROR", "no proof",
                 id="statement-alone"),
    pytest.param(BARE + "\nAdmitted.", "CHEATING", "Admitted", id="repeated-then-admitted"),
    pytest.param("Proof. lia. Qed.\n" + BARE + "\nProof. lia. Qed.", ("Proof.", "(lia).", "Qed."), "",
                 id="repeated-with-its-proof-after-the-proof"),
    pytest.param("Proof. lia. Qed.\n" + BARE + "\nAdmitted.", "CHEATING", "Admitted",
                 id="repeated-then-admitted-after-the-proof"),
    # Another lemma's statement where the proof should be (SmolLM2 on coq-iris): Coq refuses a nested proof,
    # so it cannot get anything accepted: ERROR (it was CHEATING). A hole after it is still a hole.
    pytest.param("```coq\nLemma other x : x = x.\n```\nThis proof is a proof.", "ERROR", "inside the proof",
                 id="another-statement-alone"),
    pytest.param("Proof. intros. Lemma other (x : nat) : x = x. Qed.", "ERROR", "inside the proof",
                 id="another-statement-inside-the-proof"),
    pytest.param("Proof. Lemma other : False. Admitted. Qed.", "CHEATING", "Admitted",
                 id="another-statement-then-admitted"),
    pytest.param("Proof. Lemma other : False. Proof. admit. Qed.", "CHEATING", "hole", id="another-statement-then-hole"),
    # Iris names binders in Unicode (SmolLM2 on coq-iris, session 15: the renamed statement alone was CHEATING).
    pytest.param("Lemma big_sepMS_sep_2 \u03a6 n X : \u03a6 n = \u03a6 n.", "ERROR", "no proof",
                 id="renamed-statement-with-unicode-binders-alone"),
    # Prose of the same shape is still prose: dropped before the proof, as before.
    pytest.param("Lemma bare holds: by lia.\nProof. lia. Qed.", ("Proof.", "(lia).", "Qed."), "dropped",
                 id="prose-of-the-same-shape"),
])
def test_a_statement_with_bare_binders_is_a_repeated_statement(proof: str, outcome: object, reason: str) -> None:
    statement = "Lemma big_sepMS_laterN_2 \u03a6 n X : \u03a6 n = \u03a6 n." if "\u03a6" in proof else BARE
    if isinstance(outcome, tuple):
        norm = normalize_proof(proof, statement)
        assert norm.sentences == outcome
        assert reason in " ".join(norm.notes)
        return
    with pytest.raises(Rejected) as info:
        normalize_proof(proof, statement)
    assert info.value.verdict == outcome
    assert reason in " ".join(info.value.reasons)


def test_requires_are_left_to_the_verifier() -> None:
    norm = normalize_proof("From Coq Require Import Arith Lia.\nRequire List.\nProof. lia. Qed.", HARD)
    assert [(r.root, r.names, r.imports) for r in norm.requires] == [("Coq", ("Arith", "Lia"), True),
                                                                      ("", ("List",), False)]
    assert norm.with_imports([["Coq.Arith.Arith"], []], []).sentences == (
        "Proof.", "Import Coq.Arith.Arith.", "(lia).", "Qed.")
    inside = normalize_proof("Proof. intros. Require Import Lia. lia. Qed.", HARD)
    assert inside.requires[0].at == 2
    assert inside.with_imports([["Coq.micromega.Lia"]], []).sentences == (
        "Proof.", "(intros).", "Import Coq.micromega.Lia.", "(lia).", "Qed.")


def test_lexer_cuts_a_glued_bullet_as_coq_does() -> None:
    assert [s.code for s in split_sentences("-reflexivity. --(auto). *simpl. -1.")] == [
        "-", "reflexivity.", "--", "(auto).", "*", "simpl.", "-1."]


# -- prover tier -----------------------------------------------------------------------------------


def _task(tid: str, statement: str, *, context: str = "", reference: str = "Proof. Admitted.",
          **metadata: object) -> Task:
    return Task(id=f"fairness.{tid}", system="coq", context=context, statement=statement,
                reference_proof=reference, category="P1", timeout_s=20, metadata=dict(metadata))


@functools.lru_cache(maxsize=1)
def _stdlib_tasks() -> dict[str, Task]:
    """Real stdlib tasks as the suite builder makes them: a prefix of Lists/List.v, sections open."""
    from proofgym.envs.tasks.coq_extract import extract_lemmas, lemma_to_task, stdlib_root

    lemmas = {lemma.name: lemma for lemma in extract_lemmas(stdlib_root() / "Lists" / "List.v", "Coq.Lists.List")}
    return {name: lemma_to_task(lemmas[name], task_id=f"coq.stdlib.Lists.List.{name}", rel_path="Lists/List.v")
            for name in ("app_nil_r", "nth_In")}


MONOID = ("Class Monoid (A : Type) := { op : A -> A -> A; unit : A;\n"
          "  unit_l : forall x, op unit x = x; unit_r : forall x, op x unit = x }.\n"
          "Section M.\nContext {A : Type} `{Monoid A}.\n")

TASKS = {
    "hard": _task("hard", HARD, reference="Proof. induction n; simpl; auto. Qed."),
    "bare": _task("bare", "Lemma bare n m : n + m = m + n.", context="Require Import PeanoNat.\n",
                  reference="Proof. apply Nat.add_comm. Qed."),
    "arith": _task("arith", "Lemma arith (a b : nat) : a + b = b + a.", context="Require Import Arith.\n",
                   reference="Proof. apply Nat.add_comm. Qed."),
    "lists": _task("lists", "Lemma lists (l : list nat) : List.rev (List.rev l) = l.", context="Require List.\n",
                   reference="Proof. apply List.rev_involutive. Qed."),
    "classic": _task("classic", "Lemma em (P : Prop) : P \\/ ~ P.", context="Require Import Classical.\n",
                     reference="Proof. apply classic. Qed.",
                     allowed_axioms=["Coq.Logic.Classical_Prop.classic"]),
    "section_hyp": _task("section_hyp", "Lemma x0 : x = 0.", context="Section S.\nVariable x : nat.\n"
                         "Hypothesis H : x = 0.\n", reference="Proof. exact H. Qed."),
    "ssr": _task("ssr", "Lemma ssr_in (n : nat) (H : n + 0 = 0) : n + 0 = 0.",
                 context="From Coq Require Import ssreflect.\n", reference="Proof. exact H. Qed."),
    "monoid": _task("monoid", "Lemma unit_unique (u : A) (Hu : forall x, op u x = x) : u = unit.", context=MONOID,
                    reference="Proof. rewrite <- (unit_r u). apply Hu. Qed."),
}


def _get(key: str) -> Task:
    return _stdlib_tasks()[key] if key in ("app_nil_r", "nth_In") else TASKS[key]


APP = "Proof.\n    induction l; simpl; f_equal; auto.\n  Qed."
NTH = ("Proof.\n    unfold lt; intro n; induction n as [| n hn]; simpl; intro l.\n"
       "    -destruct l; simpl; [ inversion 2 | auto ].\n    -destruct l; simpl.\n      *inversion 2.\n"
       "      *intros d ie; right; apply hn. now apply Nat.succ_le_mono.\n  Qed.")
MONOID_PROOF = "Proof. rewrite <- (unit_r u). apply Hu. Qed."


def S(task: str, proof: str, verdict: Verdict, reason: str = "", *, id: str):
    return pytest.param(task, proof, verdict, reason, id=id)


SLIPS = [
    # -- the task's statement repeated -----------------------------------------------------------------
    S("app_nil_r", "Theorem app_nil_r (l:list A) : l ++ [] = l.\n" + APP, Verdict.OK, id="stdlib-statement"),
    S("app_nil_r", "Lemma app_nil_r (l : list A) :\n   l ++ [] = l.\n" + APP, Verdict.OK,
      id="stdlib-statement-lemma-line-breaks"),
    # The same statement in forall form: dropped; the proof runs on the task's own statement.
    S("app_nil_r", "Lemma app_nil_r : forall l : list A, l ++ [] = l.\n" + APP, Verdict.OK,
      id="stdlib-statement-forall-form"),
    S("app_nil_r", "Lemma app_nil_right (l : list A) : l ++ [] = l.\n" + APP, Verdict.OK,
      id="stdlib-statement-other-name"),
    S("monoid", "Section M.\nContext {A : Type} `{Monoid A}.\nLemma unit_unique (u : A) (Hu : forall x, op u x = x) "
      ": u = unit.\n" + MONOID_PROOF + "\nEnd M.", Verdict.OK, id="typeclass-context-copied-around-the-proof"),
    S("bare", "Lemma bare n m : n + m = m + n.\nProof. apply Nat.add_comm. Qed.", Verdict.OK,
      id="statement-with-bare-binders"),
    S("bare", "Lemma bare n m : n + m = m + n.", Verdict.ERROR, "no proof", id="statement-with-bare-binders-alone"),
    S("hard", "Lemma hard (n : nat) : 0 + n = n.\nProof. induction n; simpl; auto. Qed.", Verdict.ERROR,
      "not the task's statement", id="different-statement-is-error"),
    S("hard", "Lemma helper (n : nat) : n = n + 0. Proof. induction n; simpl; auto. Qed.\n" + HARD +
      "\nProof. symmetry. apply helper. Qed.", Verdict.ERROR, "assert", id="helper-lemma-first-is-error"),
    # -- prose -------------------------------------------------------------------------------------------
    S("app_nil_r", "Here is the proof:\n" + APP, Verdict.OK, id="prose-then-proof"),
    S("app_nil_r", "We prove this by induction on l.\n\n" + APP, Verdict.OK, id="prose-sentence-then-proof"),
    S("app_nil_r", APP + "\n\nThis completes the proof. The key step is `f_equal`.", Verdict.OK,
      id="prose-after-qed"),
    S("monoid", MONOID_PROOF + "\nExplanation: rewrite with unit_r, then use Hu", Verdict.OK,
      id="prose-after-qed-without-period"),
    S("hard", "Proof. induction n; simpl; auto. Qed. Qed.", Verdict.OK, id="qed-twice"),
    S("hard", "Proof. induction n; simpl; auto. Qed.\n\n" + HARD + "\nProof. induction n; simpl; auto. Qed.",
      Verdict.OK, id="lemma-and-proof-repeated-after-the-proof"),
    S("hard", "I would prove this by induction on n.", Verdict.ERROR, "syntax", id="pure-prose-is-error"),
    # Prose inside the proof that starts with a Coq command word or says "admit" (SmolLM2 writes both).
    S("hard", "Proposition hard takes the argument of the theorem and checks the assertion.", Verdict.ERROR,
      "not Coq", id="prose-starting-with-a-command-word"),
    S("hard", "Proof.\nNote: the proof goes by induction.\ninduction n; simpl; auto.\nQed.", Verdict.ERROR,
      "syntax error in sentence 2", id="note-inside-the-proof"),
    S("hard", "Proof.\nWe do not admit anything and use induction on n.\ninduction n; simpl; auto.\nQed.",
      Verdict.ERROR, "not Coq", id="prose-with-admit-inside-the-proof"),
    # -- Require before the proof ------------------------------------------------------------------------
    S("arith", "Require Import Arith.\nProof. apply Nat.add_comm. Qed.", Verdict.OK,
      id="require-of-a-loaded-library"),
    S("arith", "From Coq Require Import Arith.\nLemma arith (a b : nat) : a + b = b + a.\n"
      "Proof. apply Nat.add_comm. Qed.", Verdict.OK, id="from-require-and-statement"),
    S("lists", "Require Import List.\nProof. apply rev_involutive. Qed.", Verdict.OK,
      id="require-import-of-a-required-library-imports-it"),
    S("lists", "Require Import Coq.Lists.List. Import ListNotations.\nProof. apply rev_involutive. Qed.", Verdict.OK,
      id="require-and-import-notations"),
    # A Require is judged by what it brings (issue 26; these were ERROR "does not load"): the library is loaded
    # after the statement, an axiom it adds shows in Print Assumptions, the original lemma in the leak check.
    S("hard", "Require Import Lia.\nProof. lia. Qed.", Verdict.OK, id="require-of-another-library"),
    S("hard", "Require Import Classical.\nProof. induction n; simpl; auto. Qed.", Verdict.OK,
      id="require-that-brings-an-unused-axiom"),
    S("hard", "Require Import Classical.\nProof. destruct (classic (n = 0)); induction n; simpl; auto. Qed.",
      Verdict.CHEATING, "Coq.Logic.Classical_Prop.classic outside the allow-list", id="require-that-brings-an-axiom"),
    S("app_nil_r", "Require Import List.\n" + APP, Verdict.OK, id="require-that-brings-the-original-lemma-unused"),
    S("app_nil_r", "Require Import List.\nProof. apply List.app_nil_r. Qed.", Verdict.CHEATING,
      "uses the original lemma", id="require-that-brings-the-original-lemma"),
    S("hard", "Require Import NoSuchLibrary.\nProof. induction n; simpl; auto. Qed.", Verdict.ERROR,
      "names no library", id="require-of-no-library"),
    S("hard", "Import Foo.\nProof. induction n; simpl; auto. Qed.", Verdict.ERROR, "Import Foo",
      id="import-of-no-module"),
    S("lists", "Proof.\n  Require Import List.\n  apply rev_involutive.\nQed.", Verdict.OK,
      id="require-of-a-loaded-library-inside-the-proof"),
    S("arith", "Proof. intros. From Coq Require Import Arith. apply Nat.add_comm. Qed.", Verdict.OK,
      id="from-require-of-a-loaded-library-inside-the-proof"),
    # -- Proof repeated, Proof using -------------------------------------------------------------------------
    S("app_nil_r", "Proof.\n" + APP, Verdict.OK, id="proof-repeated"),
    S("app_nil_r", "Proof. Proof using." + APP[len("Proof."):], Verdict.OK, id="proof-using-after-proof"),
    S("section_hyp", "Proof. Proof using. exact H. Qed.", Verdict.OK, id="proof-using-after-proof-section-hypothesis"),
    S("section_hyp", "Proof using. exact H. Qed.", Verdict.FAIL, "Qed", id="proof-using-opener-is-coqs"),
    S("hard", "Proof.\nProof (eq_sym (plus_n_O n)).", Verdict.OK, id="proof-term-after-proof"),
    S("nth_In", NTH, Verdict.OK, id="glued-bullets"),
    S("hard", "Proof. induction n. Proof. -reflexivity. -simpl. rewrite IHn. reflexivity. Qed.", Verdict.OK,
      id="proof-in-the-middle"),
    S("hard", "Proof. induction n. Proof with auto. all: simpl... Qed.", Verdict.ERROR, "first sentence",
      id="proof-with-late-is-error"),
    # -- a lemma statement where the proof should be (docs/verdicts.md's row, on the real prover) ------------
    S("hard", "Proof. Lemma other (m : nat) : m = m. induction n; simpl; auto. Qed.", Verdict.ERROR,
      "states a lemma inside the proof", id="lemma-statement-inside-the-proof"),
    S("hard", "Lemma other (m : nat) : m = m.", Verdict.ERROR, "not the task's statement",
      id="lemma-statement-as-the-whole-reply"),
    S("hard", "Proof. Lemma other (m : nat) : m = m. Admitted.", Verdict.CHEATING, "Admitted",
      id="lemma-statement-inside-then-admitted"),
    # -- issue 26: a command has one class wherever it stands ----------------------------------------------
    S("hard", "Proof. induction n; simpl; auto. Qed.\nDefinition d := 1.", Verdict.ERROR, "adds a declaration",
      id="helper-after-the-proof-is-error"),
    S("hard", "Proof. induction n; simpl; auto. Qed.\nUnset Printing Notations.", Verdict.OK,
      id="display-option-after-the-proof-is-dropped"),
    S("hard", "Proof. induction n; simpl; auto. Qed.\nUnset Guard Checking.", Verdict.CHEATING, "Guard Checking",
      id="kernel-switch-after-the-proof-is-cheating"),
    S("hard", "Proof. Locate plus_n_O. Test Printing All. Pwd. Print Assumptions plus_n_O. "
              "induction n; simpl; auto. Qed.", Verdict.OK, id="queries-inside-the-proof-are-dropped"),
    S("hard", "Proof. #[local] Hint Resolve plus_n_O : core. Create HintDb db. induction n; simpl; auto. Qed.",
      Verdict.OK, id="hints-inside-the-proof-are-dropped"),
    S("hard", "Proof. Ltac finish := auto. induction n; simpl; finish. Qed.", Verdict.ERROR, "adds a declaration",
      id="ltac-inside-the-proof-is-error"),
    # -- other commands before the proof -----------------------------------------------------------------
    S("hard", "Definition double n := n + n.\nProof. induction n; simpl; auto. Qed.", Verdict.ERROR,
      "cannot add definitions", id="helper-definition-is-error"),
    S("hard", "Set Implicit Arguments.\nCheck plus_n_O.\nProof. induction n; simpl; auto. Qed.", Verdict.OK,
      id="harmless-commands-dropped"),
    S("classic", "Require Import Classical.\nLemma em (P : Prop) : P \\/ ~ P.\nProof. apply classic. Qed.\n",
      Verdict.OK, id="allowed-axiom-task-statement-and-require"),
    S("monoid", "```coq\n" + MONOID_PROOF + "\n```", Verdict.OK, id="markdown-fence"),
    S("monoid", MONOID_PROOF[:-1], Verdict.OK, id="qed-without-period"),
    S("hard", "**Proof.**\ninduction n; simpl; auto.\nQed.", Verdict.OK, id="markdown-bold-proof"),
    S("hard", "Proof.\u00a0induction n; simpl; auto. Qed.", Verdict.OK, id="no-break-space"),
    # ssreflect's `in H *` ends a tactic with `*`: parenthesised as `(... *)`, `*)` closed a comment and the
    # honest proof was ERROR (13 of coq-mathcomp's 360 references were).
    S("ssr", "Proof. rewrite -plus_n_O in H *. exact H. Qed.", Verdict.OK, id="ssreflect-in-star"),
    S("ssr", "Proof. Timeout 5 rewrite -plus_n_O in H *. exact H. Qed.", Verdict.OK, id="ssreflect-in-star-timeout"),
    S("ssr", "Proof. all: rewrite -plus_n_O in H |- *. exact H. Qed.", Verdict.OK, id="ssreflect-in-star-selector"),
]


@pytest.mark.prover
@pytest.mark.parametrize(("task_key", "proof", "verdict", "reason"), SLIPS)
def test_honest_slip_gets_a_fair_verdict(coq_verifier, task_key: str, proof: str, verdict: Verdict,
                                         reason: str) -> None:
    result = coq_verifier.check(_get(task_key), proof)
    assert result.verdict is verdict, (result.verdict, result.reasons, result.messages)
    assert reason in " ".join(result.reasons), result.reasons
    if verdict is Verdict.ERROR:
        assert result.reasons and all(len(r) > 20 for r in result.reasons)  # says what to change


@pytest.mark.prover
def test_every_stdlib_reference_still_verifies(coq_verifier) -> None:
    for task in _stdlib_tasks().values():
        result = coq_verifier.check(task, task.reference_proof)
        assert result.verdict is Verdict.OK, (task.id, result.reasons, result.messages)


@pytest.mark.parametrize(("proof", "verdict"), [
    ("Back to the main goal.\nProof. induction n; simpl; auto. Qed.", ""),
    ("Load the library first, then we can prove it.\nProof. induction n; simpl; auto. Qed.", ""),
    ("Proof. induction n; simpl; auto. Qed.\nReset the state and try again later please.", ""),
    ('Load "evil".\nProof. induction n; simpl; auto. Qed.', "CHEATING"),
    ("Proof. induction n; simpl; auto. Qed.\nReset t.", "CHEATING"),
    # A Require, Import or scope after the proof loads nothing that runs: dropped (it was CHEATING).
    ("Proof. induction n; simpl; auto. Qed.\nRequire Import Coq.Logic.Classical.\nOpen Scope nat_scope.", ""),
])
def test_english_that_starts_with_a_cheating_command_word_is_prose(proof: str, verdict: str) -> None:
    """Issue 26: outside the proof (never sent), prose is read as prose before any command's class, as inside it:
    "Back to the main goal." was CHEATING ('Back' moves the document out of the proof). The commands stay CHEATING."""
    if not verdict:
        assert normalize_proof(proof, HARD).sentences == ("Proof.", "(induction n; simpl; auto).", "Qed.")
        return
    with pytest.raises(Rejected) as info:
        normalize_proof(proof, HARD)
    assert info.value.verdict == verdict
