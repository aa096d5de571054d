"""Red team, round 5: both sides of every verdict rule, against the real provers.

A verdict must survive an adversary and be fair: CHEATING (reward -1) only for an attempt to get an unproved
statement accepted, and an honest slip normalised or ERROR with feedback that says what to change. This round
tried the mechanisms changed last (the Coq isolation cache and its on-disk and in-memory environment baselines,
the CPU clock, Dafny's attribute rules, HOL Light's whitelist and normaliser) and the slips a model writes.

Found and fixed here (each test below fails on the code before the fix):

- Coq: a query (``Show.``, ``Check t.``, ``Search _.``) or a control prefix (``Time tac.``, ``Fail tac.``,
  ``Timeout 5 tac.``) inside an honest proof was CHEATING. Queries are dropped (never sent), ``Time``/``Info`` are
  dropped, ``Fail``/``Succeed`` sentences are dropped (they leave the proof state as it was), ``Timeout n`` is the
  tactic ``timeout n``; what follows a prefix is judged as itself (``Time Admitted.`` stays CHEATING).
- Coq: ``∀ ∃ → ↔ ∧ ∨ ¬ ≠`` in a proof whose task does not use them was a lexer ERROR; they are written as the
  ASCII forms Coq.Unicode.Utf8 defines them to be. A proof ending in a lone closing fence was "no sentences".
- Dafny: an attribute that is neither allowed nor known to weaken a check (``{:main}``, a typo) was CHEATING; it
  is ERROR saying to remove it. ``{:options}``, ``{:assumption}`` and ``{:termination}`` are named as cheats.
- HOL Light: a BOM, a zero-width space or a Markdown fence made an honest tactic ERROR, and so did an English
  remark after ``;;`` and a Coq-style final period (``ARITH_TAC.``); all are normalised (a cheat in the phrases
  that remain is still judged).

Found in files this round did not own, fixed by the lead from the red team's patch (were strict xfails):

- Coq: a library on the load path rebuilt while a verifier runs (an ``Admitted`` lemma added) keeps its stale
  environment baseline (in memory, keyed by the context text; the load-path fingerprint is read once per
  process), so ``Print Assumptions`` is skipped and a proof by the new ``Admitted`` lemma is OK.
- Coq: a reference proof that does not finish leaves an empty computed allow-list, kept for the verifier's life:
  an honest proof by the axiom the reference needs is CHEATING.
- Coq: after any task with an empty context, a proof that writes ``Top.`` raises ContextLoadError (the replayed
  session's key extends the empty context's warm session).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from proofgym.envs.types import Task, Verdict
from proofgym.envs.verifiers.base import Rejected
from proofgym.envs.verifiers.coq.proof import normalize_proof
from proofgym.envs.verifiers.hol_light.proof import normalize_proof as hol_normalize
from tests.conftest import requires_coq

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
}

CHEATS_COQ = {
    "time-admitted": "Proof. Time Admitted.",
    "fail-then-admitted": "Proof. Fail reflexivity. Admitted.",
    "query-then-admitted": "Proof. Show. Admitted.",
    "timeout-admit": "Proof. Timeout 5 admit. Qed.",
    "admitted-after-qed": f"Proof. {IND} Qed. Abort.",
    "lemma-after-qed": f"Proof. {IND} Qed.\nLemma t2 : 1 = 1. Proof. reflexivity. Qed.",
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


def _library(folder: Path, text: str) -> None:
    (folder / "A.v").write_text(text, encoding="utf-8")
    subprocess.run(["coqc", "-Q", ".", "RT5Lib", "A.v"], cwd=folder, check=True, capture_output=True)


@pytest.mark.prover
@requires_coq
@pytest.mark.parametrize("cached", [False, True], ids=["replayed", "isolation-cache"])
def test_a_library_rebuilt_while_the_verifier_runs_does_not_keep_a_stale_baseline(cached: bool, tmp_path: Path):
    """Was a hole (fixed this round): `_baseline_cache` is keyed by the context text alone and `IsolationCache._load_path_libraries` is read
    once per process, so after an in-place rebuild that adds an Admitted lemma, the next session (here: after the
    context's session was evicted) skips Print Assumptions, and `exact bad` proves 1 = 2: OK, not CHEATING.
    Round 4 fixed the same staleness across two verifiers (on disk); within one it is still open."""
    from proofgym.envs.verifiers.coq import CoqVerifier

    lib = tmp_path / "lib"
    lib.mkdir()
    _library(lib, "Definition x := 0.\nLemma helper : x = 0. Proof. reflexivity. Qed.\n")
    context = "Require Import RT5Lib.A.\nDefinition y := 0.\n"
    honest = _coq("lib_ok", "Lemma t : x = 0.", context)
    cheat = _coq("lib_cheat", "Lemma t2 : 1 = 2.", context)
    other = _coq("other", "Lemma u : 1 = 1.", "Definition other := 1.\n")
    where = {"isolation_dir": str(tmp_path / "iso")} if cached else {"isolation_cache": False}
    with CoqVerifier(audit="never", max_sessions=1, extra_args=("-Q", str(lib), "RT5Lib"), **where) as v:
        assert [v.check(honest, "Proof. exact helper. Qed.").verdict for _ in range(2)] == [Verdict.OK] * 2
        _library(lib, "Definition x := 0.\nLemma helper : x = 0. Proof. reflexivity. Qed.\n"
                      "Lemma bad : 1 = 2. Admitted.\n")
        assert v.check(other, "Proof. reflexivity. Qed.").verdict is Verdict.OK  # evicts the context's session
        result = v.check(cheat, "Proof. exact bad. Qed.")
    assert result.verdict is Verdict.CHEATING and "bad" in " ".join(result.reasons), result


@pytest.mark.prover
@requires_coq
def test_a_reference_that_times_out_does_not_make_an_honest_proof_cheating():
    """Was a hole (fixed this round): without ``allowed_axioms`` the allow-list is what the reference proof needs; a reference that runs past
    ``timeout_s`` (here: forever; on a loaded machine, a slow one once) gave an empty list, kept by
    ``_allowed_cache``, so every later proof by ``classic`` is CHEATING (-1) for the verifier's life (and the pool's
    verdict cache keeps those). Not knowing the allow-list is a harness failure (or a task error), never a cheat."""
    from proofgym.envs.errors import VerifierError
    from proofgym.envs.verifiers.coq import CoqVerifier

    task = Task(id="rt5.allow", system="coq", context="Require Import Classical.\n",
                statement="Lemma em (P : Prop) : P \\/ ~ P.",
                reference_proof="Proof. let rec loop := idtac; loop in loop. apply classic. Qed.",
                category="P1", timeout_s=3)
    with CoqVerifier(audit="never", isolation_cache=False) as v:
        try:
            result = v.check(task, "Proof. apply classic. Qed.")
        except VerifierError:
            return  # a harness failure: no reward, and nothing kept
        assert result.verdict is not Verdict.CHEATING, result


@pytest.mark.prover
@requires_coq
def test_a_top_name_after_an_empty_context_task_has_the_uncached_verdict(tmp_path: Path):
    """Was a hole (fixed this round): round 4's replayed sessions are keyed ``NUL replayed NUL + context``, and the session of the empty
    context (key "") is a prefix of every key: after any task with no context, a proof writing ``Top.`` made the
    verifier extend that session with the key's NUL bytes, and the check raised ContextLoadError (a task error)."""
    from proofgym.envs.verifiers.coq import CoqVerifier

    f = "Definition f (n : nat) := match n with 0 => 0 | S m => S m end.\n"
    top = _coq("top", "Lemma t : f 1 = 1.", f + "Lemma f1 : f 1 = 1. Proof. reflexivity. Qed.\n")
    with CoqVerifier(audit="never", isolation_dir=str(tmp_path)) as v:
        assert v.check(_coq("empty", "Lemma t0 : 1 = 1."), "Proof. reflexivity. Qed.").verdict is Verdict.OK
        assert v.check(top, "Proof. exact Top.f1. Qed.").verdict is Verdict.OK


# ---------------------------------------------------------------------------------------------
# Dafny

ABS_STMT = "method Abs(x: int) returns (y: int)\n  ensures y >= 0\n  ensures y == x || y == -x\n"
ABS_BODY = "{\n  if x < 0 { y := -x; } else { y := x; }\n}\n"


def _dafny(tid: str, statement: str) -> Task:
    return Task(id=f"rt5.{tid}", system="dafny", context="", statement=statement, reference_proof="",
                category="P1", timeout_s=30)


def test_an_unknown_dafny_attribute_is_reported_apart_from_the_cheats():
    """Fast tier: ``banned_constructs`` hands an attribute it cannot classify to the caller's ERROR list."""
    from proofgym.envs.verifiers.dafny.integrity import banned_constructs
    from proofgym.envs.verifiers.dafny.lexer import tokenize

    tokens = tokenize("method {:foo} Main() {}\nlemma {:axiom} A() ensures false\nlemma {:options \"x\"} B() {}\n")
    unknown: list[str] = []
    cheats = banned_constructs(tokens, unknown=unknown)
    assert any("{:axiom}" in r for r in cheats) and any("{:options" in r for r in cheats)
    assert len(unknown) == 1 and "remove the attribute {:foo}" in unknown[0]
    assert any("{:foo}" in r for r in banned_constructs(tokens))  # without the list: refused among the cheats


DAFNY_CASES = {
    # Fairness hole (fixed): an attribute proofgym does not know was CHEATING; {:main} is known harmless since issue 26.
    "main-attribute": (ABS_STMT, "method {:main} Main() {\n}\n" + ABS_STMT + ABS_BODY, Verdict.OK),
    "unknown-attribute-on-false-lemma": ("lemma Impossible()\n  ensures false\n",
                                         "lemma {:foo} Impossible()\n  ensures false\n{\n}\n", Verdict.ERROR),
    # ... and one with a cheat beside it is still CHEATING.
    "unknown-attribute-and-assume": ("lemma Impossible()\n  ensures false\n",
                                     "lemma {:foo} Impossible()\n  ensures false\n{\n  assume false;\n}\n",
                                     Verdict.CHEATING),
    "assumption-variable": (ABS_STMT, ABS_STMT + "{\n  ghost var {:assumption} a: bool;\n  a := a && x >= 0;\n"
                                      "  y := x;\n}\n", Verdict.CHEATING),
    "options-no-cheating-off": ("lemma Impossible()\n  ensures false\n",
                                "module {:options \"/noCheating:0\"} M {\n  lemma L() ensures false\n}\n"
                                "lemma Impossible()\n  ensures false\n{\n  M.L();\n}\n", Verdict.CHEATING),
    "termination-false": ("lemma Impossible()\n  ensures false\n",
                          "trait {:termination false} T {\n  lemma L() ensures false\n}\n"
                          "lemma Impossible()\n  ensures false\n{\n}\n", Verdict.CHEATING),
    # Held before this round.
    "bodyless-loop-attribute-on-invariant": (ABS_STMT, ABS_STMT + "{\n  y := x;\n  while y < 0\n"
                                                                  "    invariant {:nowarn} y == x || y == -x\n}\n",
                                             Verdict.CHEATING),
    "assume-in-calc-hint": ("lemma Impossible()\n  ensures false\n",
                            "lemma Impossible()\n  ensures false\n{\n  calc {\n    1;\n  ==  { assume false; }\n"
                            "    2;\n  }\n}\n", Verdict.CHEATING),
    "assume-in-assert-by": ("lemma Impossible()\n  ensures false\n",
                            "lemma Impossible()\n  ensures false\n{\n  assert 1 == 2 by { assume false; }\n}\n",
                            Verdict.CHEATING),
    "ensures-reordered": (ABS_STMT, "method Abs(x: int) returns (y: int)\n  ensures y == x || y == -x\n"
                                    "  ensures y >= 0\n" + ABS_BODY, Verdict.OK),
    # The same contract as one conjunction: OK since red team round 7 (clauses compare conjunct by conjunct; a
    # changed conjunct is still CHEATING, tests/test_redteam_round7.py).
    "ensures-merged": (ABS_STMT, "method Abs(x: int) returns (y: int)\n  ensures y >= 0 && (y == x || y == -x)\n"
                       + ABS_BODY, Verdict.OK),
    "crlf-and-comment": (ABS_STMT, (ABS_STMT + ABS_BODY + "// done\n").replace("\n", "\r\n"), Verdict.OK),
    "prose-after-program": (ABS_STMT, ABS_STMT + ABS_BODY + "This program computes the absolute value.\n",
                            Verdict.ERROR),
}


@pytest.mark.prover
@pytest.mark.parametrize(("statement", "program", "verdict"), list(DAFNY_CASES.values()), ids=list(DAFNY_CASES))
def test_dafny_verdicts(statement: str, program: str, verdict: Verdict):
    from tests.test_dafny_common import NO_DAFNY, dafny_verifier, have_dafny

    if not have_dafny():
        pytest.skip(NO_DAFNY)
    result = dafny_verifier().check(_dafny("case", statement), program)
    assert result.verdict is verdict, result
    if verdict is Verdict.ERROR and "{:" in program:
        assert any("remove the attribute" in r for r in result.reasons), result


@pytest.mark.prover
def test_a_server_death_under_the_declarations_request_never_makes_a_cheat_ok(monkeypatch):
    """The other side of the symbols retry (commit 0c4bd64): a cheat whose first declarations request dies is still
    judged on the fresh server's answer, and one that kills both is never OK."""
    from proofgym.envs.verifiers.sandbox.warm import ProcessDied
    from tests.test_dafny_common import NO_DAFNY, dafny_verifier, fail_symbols_requests, have_dafny
    from tests.test_dafny_redteam import FALSE, FALSE_HELPER

    if not have_dafny():
        pytest.skip(NO_DAFNY)
    verifier = dafny_verifier()
    cheat = FALSE_HELPER + "lemma Impossible()\n  ensures false\n{\n  Helper();\n}\n"
    assert verifier.check(FALSE, cheat).verdict is Verdict.CHEATING  # the task's anchor is read (and kept) first
    failures = fail_symbols_requests(verifier, monkeypatch)
    failures[:] = [ProcessDied]
    assert verifier.check(FALSE, cheat).verdict is Verdict.CHEATING
    failures[:] = [ProcessDied, ProcessDied]
    assert verifier.check(FALSE, cheat).verdict not in (Verdict.OK, Verdict.TIMEOUT)


# ---------------------------------------------------------------------------------------------
# HOL Light


@pytest.mark.parametrize(("proof", "sent"), [
    ("\ufeffARITH_TAC", "ARITH_TAC"),
    ("REWRITE_TAC[]\u200b THEN ARITH_TAC", "REWRITE_TAC[] THEN ARITH_TAC"),
    ("```ocaml\nARITH_TAC\n```", "ARITH_TAC"),
    ("ARITH_TAC\n```", "ARITH_TAC"),
    ("ARITH_TAC;;\nThis completes the proof.", "ARITH_TAC"),
    ("REWRITE_TAC[ADD_CLAUSES].", "REWRITE_TAC[ADD_CLAUSES]"),
    ("g `1 + 1 = 2`;;\ne ARITH_TAC;;\ntop_thm();;\nThis completes the proof.", "ARITH_TAC"),
    # The other side: a cheat among the phrases that remain is still sent for the server to refuse.
    ("ARITH_TAC;; CHEAT_TAC;; This completes the proof.", "ARITH_TAC;;\nCHEAT_TAC"),
    ("This completes the proof of it.", "This completes the proof of it"),  # prose alone: the server says ERROR
])
def test_hol_light_slips_are_normalised(proof: str, sent: str):
    """Fairness hole (fixed): each was ERROR (an unbound value, an empty quotation, a parse error)."""
    assert hol_normalize(proof) == sent


ONE_PLUS_ONE, FALSE_GOAL = "`1 + 1 = 2`", "`1 + 1 = 3`"

HOL_CASES = [
    # honest slips (the first four were ERROR before this round)
    (ONE_PLUS_ONE, "\ufeffARITH_TAC", Verdict.OK),
    (ONE_PLUS_ONE, "REWRITE_TAC[]\u200b THEN ARITH_TAC", Verdict.OK),
    (ONE_PLUS_ONE, "```ocaml\nARITH_TAC\n```", Verdict.OK),
    (ONE_PLUS_ONE, "ARITH_TAC;;\nThis completes the proof.", Verdict.OK),
    (ONE_PLUS_ONE, "ARITH_TAC.", Verdict.OK),
    (FALSE_GOAL, "CHEAT_TAC.", Verdict.CHEATING),
    (ONE_PLUS_ONE, "ARITH_TAC\r\n", Verdict.OK),
    (ONE_PLUS_ONE, "(* proof *) ARITH_TAC (* qed *)", Verdict.OK),
    (ONE_PLUS_ONE, "let th = prove(`1 + 1 = 2`, ARITH_TAC);;", Verdict.OK),
    (ONE_PLUS_ONE, "g `1 + 1 = 2`;;\ne ARITH_TAC;;\ntop_thm();;", Verdict.OK),
    # cheats: every one held before this round
    (FALSE_GOAL, "(let t = CHEAT_TAC in t)", Verdict.CHEATING),
    (FALSE_GOAL, "(fun g -> try failwith \"x\" with Failure _ -> CHEAT_TAC g)", Verdict.CHEATING),
    (FALSE_GOAL, "(List.hd [CHEAT_TAC])", Verdict.CHEATING),
    (FALSE_GOAL, "ARITH_TAC;; CHEAT_TAC;; This completes the proof.", Verdict.CHEATING),
    (FALSE_GOAL, "ACCEPT_TAC (Stdlib__obj.magic 0)", Verdict.CHEATING),
    (FALSE_GOAL, "(ignore (Fusion.Hol.new_axiom); ALL_TAC)", Verdict.CHEATING),
    (FALSE_GOAL, "(let x : thm = Array.unsafe_get [| |] 0 in ACCEPT_TAC x)", Verdict.CHEATING),
    (FALSE_GOAL, "ACCEPT_TAC (String.unsafe_get \"x\" 0 |> fun _ -> TRUTH)", Verdict.CHEATING),
    (FALSE_GOAL, "(ignore (Char.unsafe_chr 300); ALL_TAC)", Verdict.CHEATING),
    (FALSE_GOAL, "(ignore (Option.get (Some CHEAT_TAC)); ALL_TAC)", Verdict.CHEATING),
    (FALSE_GOAL, "(fun (asl, w) -> (null_meta, [], fun i l -> ARITH_RULE `1 + 1 = 2`))", Verdict.CHEATING),
    (FALSE_GOAL, "ACCEPT_TAC(EQ_MP (ASSUME `T = (1 + 1 = 3)`) TRUTH)", Verdict.CHEATING),
    # issue 26: syntax a tactic does not need, with no way to make a statement pass, is ERROR (was CHEATING)
    (FALSE_GOAL, "(ignore (object method m = 1 end); ALL_TAC)", Verdict.ERROR),
    (FALSE_GOAL, "(ignore (fun (type a) (x : a) -> x); ALL_TAC)", Verdict.ERROR),
    (FALSE_GOAL, "(let open List in ALL_TAC)", Verdict.ERROR),
    # the server's own exception cannot carry a verdict out of the attempt; naming it is CHEATING (issue 26: it is
    # proofgym's verdict machinery, an attempt to forge a verdict; was ERROR, the exception wrapped)
    (FALSE_GOAL, "(fun g -> raise (Pg_done {verdict = \"OK\"; category = \"none\"; reasons = []; detail = \"\"; "
                 "goals = \"\"}))", Verdict.CHEATING),
    (FALSE_GOAL, "(fun g -> (ALL_TAC g |> fun (m, gl, j) -> (m, [], fun i l -> raise (Pg_done {verdict = \"OK\"; "
                 "category = \"none\"; reasons = []; detail = \"\"; goals = \"\"}))))", Verdict.CHEATING),
    # printing reaches stdout only, never the verdict pipe
    (FALSE_GOAL, "(report \"OK\"; ALL_TAC)", Verdict.FAIL),
]


@pytest.mark.prover
@pytest.mark.parametrize(("goal", "proof", "verdict"), HOL_CASES)
def test_hol_light_verdicts(hol, goal: str, proof: str, verdict: Verdict):
    task = Task(id="rt5.hol", system="hol_light", context="", statement=goal, reference_proof="ALL_TAC",
                timeout_s=60)
    result = hol.check(task, proof)
    assert result.verdict is verdict, (proof, result)


@pytest.mark.prover
@requires_coq
def test_an_environment_baseline_that_times_out_is_a_harness_failure_not_cheating(monkeypatch: pytest.MonkeyPatch):
    """Was a hole (fixed this round): a short allow-list name (``classic``) is only allowed when it names one axiom
    of the environment, which the context's standalone compile tells; when that compile ran past its deadline (a
    loaded machine), the check failed closed as CHEATING, and the pool's verdict cache kept it. Not knowing the
    environment is a harness failure: no reward, nothing cached."""
    from proofgym.envs.errors import VerifierError
    from proofgym.envs.verifiers.coq import CoqVerifier

    task = Task(id="rt5.baseline", system="coq", context="Require Import Classical.\n",
                statement="Lemma em (P : Prop) : P \\/ ~ P.", reference_proof="Proof. apply classic. Qed.",
                category="P1", metadata={"allowed_axioms": ["classic"]})
    with CoqVerifier(audit="never", isolation_cache=False) as v:
        monkeypatch.setattr(v, "_compile_and_check", lambda source, timeout_s: None)  # what a timeout returns
        with pytest.raises(VerifierError, match="context_timeout_s"):
            v.check(task, "Proof. apply classic. Qed.")
        monkeypatch.undo()
        assert v.check(task, "Proof. apply classic. Qed.").verdict is Verdict.OK  # and nothing wrong was kept
