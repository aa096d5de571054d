"""The Coq verifier on the real prover: verdicts, timeouts without stray processes, error categories."""

from __future__ import annotations

import os
import time

import pytest

from proofgym.envs.types import ErrorCategory, Task, Verdict
from proofgym.envs.verifiers.base import Rejected
from proofgym.envs.verifiers.coq import CoqVerifier, audit_context, categorize, parse_assumptions
from proofgym.envs.verifiers.coq.lexer import CoqLexError, split_sentences
from proofgym.envs.verifiers.coq.proof import normalize_proof
from tests.conftest import requires_coq

# -- fast tier: lexer, whitelist, parsers -----------------------------------------------------------

def test_lexer_follows_coq_on_comments_strings_bullets():
    src = 'Proof. (* a. (* nested. *) "str *) in comment" *) idtac "x. y". - auto. + { 2: auto. } Qed.'
    codes = [s.code for s in split_sentences(src)]
    assert codes == ["Proof.", 'idtac "x. y".', "-", "auto.", "+", "{", "2: auto.", "}", "Qed."]
    with pytest.raises(CoqLexError):
        split_sentences("Proof. (* open")
    with pytest.raises(CoqLexError):
        split_sentences("Proof. auto")


def test_normalize_wraps_tactics_and_keeps_structure():
    norm = normalize_proof("Proof using. intros. all: auto. 2: { lia. } Qed .")
    assert norm.sentences == ("Proof using.", "(intros).", "all: (auto).", "2: {", "(lia).", "}", "Qed.")
    assert normalize_proof("intros; auto.").sentences[-1] == "Qed."
    assert normalize_proof("Proof I.").sentences == ("Proof.", "exact (I).", "Qed.")


@pytest.mark.parametrize("proof, reason", [
    ("Proof. Admitted.", "Admitted"),
    ("Proof. admit. Qed.", "hole"),
    ("Proof. Unset Guard Checking. Qed.", "Unset"),
    ("Proof. auto. Qed. Lemma x : True.", "after the end"),
    ("Proof. #[bypass_check(guard)] auto. Qed.", "attributes"),
])
def test_whitelist_rejects_vernacular_as_cheating(proof, reason):
    with pytest.raises(Rejected) as info:
        normalize_proof(proof)
    assert info.value.verdict == "CHEATING" and reason in "; ".join(info.value.reasons)


def test_error_categories():
    assert categorize("The reference foo was not found in the current environment.") is ErrorCategory.UNDEFINED
    assert categorize("Syntax error: '.' expected after [vernac:command] (in [vernac_aux]).") is ErrorCategory.SYNTAX
    assert categorize("In environment\nn : nat\nThe term \"n\" has type \"nat\" while it is expected to have type "
                      "\"bool\".") is ErrorCategory.TYPE
    assert categorize("No applicable tactic.") is ErrorCategory.LOGIC


def test_parse_assumptions():
    text = "Section Variables:\nH : n = 0\nAxioms:\nclassic : forall P : Prop,\n  P \\/ ~ P\nfoo : nat"
    assert parse_assumptions(text) == (["classic", "foo"], [])
    assert parse_assumptions("Closed under the global context") == ([], [])


def test_allow_list_matches_full_names_and_only_unique_short_ones():
    from proofgym.envs.verifiers.coq.verifier import _disallowed, _session_name

    classic = "Coq.Logic.Classical_Prop.classic"
    env = frozenset({classic, _session_name("PG.ProofgymSubmission.M.classic"), "Coq.Logic.Eqdep.Eq_rect_eq.eq_rect_eq"})
    assert _session_name("PG.ProofgymSubmission.M.classic") == "Top.M.classic"
    assert _disallowed(classic, frozenset({classic}), lambda: env) == ""
    assert "outside the allow-list" in _disallowed("Top.M.classic", frozenset({classic}), lambda: env)
    # A short name that two axioms of the environment share allows neither.
    assert "ambiguous" in _disallowed(classic, frozenset({"classic"}), lambda: env)
    assert "ambiguous" in _disallowed("Top.M.classic", frozenset({"classic"}), lambda: env)
    assert _disallowed("Coq.Logic.Eqdep.Eq_rect_eq.eq_rect_eq", frozenset({"eq_rect_eq"}), lambda: env) == ""
    assert _disallowed(classic, frozenset({"Classical_Prop.classic"}), lambda: env) == ""
    assert "cannot be decided" in _disallowed(classic, frozenset({"classic"}), lambda: None)
    # Kernel primitives only by their full name.
    assert "primitive" in _disallowed("Coq.Numbers.Cyclic.Int63.PrimInt63.int", frozenset({"int"}), lambda: env)


def test_audit_context_closes_blocks_and_drops_signatures():
    ctx, closings = audit_context("Module Nat <: NAxiomsSig.\nSection S.\nVariable x : nat.\n")
    assert ctx.startswith("Module Nat.\n") and closings == "\nEnd S.\nEnd Nat."


# -- prover tier ------------------------------------------------------------------------------------

LOOP = Task(id="loop", system="coq", context="", statement="Lemma loop : 1 = 1.", reference_proof="reflexivity.",
            category="P1", timeout_s=2)


@pytest.mark.prover
@requires_coq
def test_loop_times_out_within_grace_and_leaves_no_process():
    seen: set[int] = set()

    def remember(verifier: CoqVerifier) -> None:
        for session in verifier._sessions.values():  # noqa: SLF001 - the test watches the real processes
            seen.update(session.ide.program_pids())
            seen.add(session.ide.pid)

    with CoqVerifier(audit="never") as verifier:
        verifier.check(LOOP, "Proof. reflexivity. Qed.")
        remember(verifier)
        result = verifier.check(LOOP, "Proof. repeat (idtac; assert True by exact I). Qed.")
        # Ended by the verifier's own deadline, enforced from outside (interrupt, then kill), as it reports:
        assert result.verdict is Verdict.TIMEOUT and result.reasons == (f"no verdict within timeout_s={LOOP.timeout_s}",)
        assert verifier.check(LOOP, "Proof. reflexivity. Qed.").verdict is Verdict.OK
        remember(verifier)
    assert len(seen) >= 2
    deadline = time.monotonic() + 60  # a condition polled, not a pause: generous, and asserted below
    while any(os.path.exists(f"/proc/{p}") for p in seen) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in seen if os.path.exists(f"/proc/{p}")], "prover processes survived close()"


@pytest.mark.prover
@requires_coq
def test_close_is_idempotent_and_kills_sessions():
    verifier = CoqVerifier(audit="never")
    verifier.check(LOOP, "reflexivity.")
    pids = {p for s in verifier._sessions.values() for p in s.ide.program_pids()}  # noqa: SLF001
    assert pids
    verifier.close()
    verifier.close()
    deadline = time.monotonic() + 60  # a condition polled, not a pause: generous, and asserted below
    while any(os.path.exists(f"/proc/{p}") for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [p for p in pids if os.path.exists(f"/proc/{p}")]


@pytest.mark.prover
@requires_coq
def test_failure_reports_goals_and_category(coq_verifier):
    task = Task(id="goals", system="coq", context="", statement="Lemma g (n : nat) : n + 0 = n.",
                reference_proof="Proof. induction n; simpl; congruence. Qed.", category="P1", timeout_s=20)
    result = coq_verifier.check(task, "Proof. intros. simpl. Qed.")
    assert result.verdict is Verdict.FAIL and result.error_category is ErrorCategory.LOGIC
    assert result.remaining_goals and "n + 0 = n" in result.remaining_goals[0].conclusion
    result = coq_verifier.check(task, "Proof. inductio n. Qed.")
    assert result.verdict is Verdict.FAIL and result.error_category is ErrorCategory.UNDEFINED
    result = coq_verifier.check(task, "Proof. induction n; simpl; congruence. Qed.")
    assert result.verdict is Verdict.OK and result.audited


@pytest.mark.prover
@requires_coq
def test_allowed_axioms_come_from_the_reference(coq_verifier):
    task = Task(id="classic", system="coq", context="Require Import Classical.\n",
                statement="Lemma em (P : Prop) : P \\/ ~ P.", reference_proof="Proof. apply classic. Qed.",
                category="P1", timeout_s=20)
    assert coq_verifier.check(task, "Proof. apply classic. Qed.").verdict is Verdict.OK
    strict = Task(**{**task.to_dict(), "id": "classic.strict", "metadata": {"allowed_axioms": []}})
    result = coq_verifier.check(strict, "Proof. apply classic. Qed.")
    assert result.verdict is Verdict.CHEATING and "classic" in " ".join(result.reasons)


@pytest.mark.prover
@requires_coq
def test_print_assumptions_is_skipped_only_when_the_environment_has_nothing_disallowed():
    clean = Task(id="clean", system="coq", context="", statement="Lemma c : 2 + 2 = 4.",
                 reference_proof="reflexivity.", category="P1", timeout_s=20, metadata={"allowed_axioms": []})
    dirty = Task(id="dirty", system="coq", context="Axiom ax : forall n : nat, n = 0.\n",
                 statement="Lemma d (n : nat) : n * 0 = 0.", reference_proof="Proof. induction n; auto. Qed.",
                 category="P1", timeout_s=20, metadata={"allowed_axioms": []})
    with CoqVerifier(audit="never") as verifier:
        queries = []
        original = verifier._assumptions  # noqa: SLF001

        def counting(*args, **kwargs):
            queries.append(args)
            return original(*args, **kwargs)

        verifier._assumptions = counting  # noqa: SLF001
        for _ in range(3):
            assert verifier.check(clean, "reflexivity.").verdict is Verdict.OK
        assert len(queries) < 3  # the clean environment's summary replaced the query
        for _ in range(3):
            assert verifier.check(dirty, "Proof. induction n; auto. Qed.").verdict is Verdict.OK
        result = verifier.check(dirty, "Proof. apply ax. Qed.")
        assert result.verdict is Verdict.CHEATING and "ax" in " ".join(result.reasons)


@pytest.mark.prover
@requires_coq
def test_audit_layer_catches_what_a_whitelist_hole_would_let_through(coq_verifier):
    """Defence in depth: feed the audit a proof the whitelist would never pass."""
    from proofgym.envs.verifiers.coq.proof import NormalizedProof

    task = Task(id="audit", system="coq", context="Axiom declared : True.\n", statement="Lemma a : 1 = 1.",
                reference_proof="reflexivity.", category="P1", timeout_s=20)
    honest = NormalizedProof(("Proof.", "(reflexivity).", "Qed."), frozenset(), False)
    assert coq_verifier._audit(task, honest) is None  # noqa: SLF001 - a declared context axiom is fine
    smuggled = NormalizedProof(("Proof.", "(reflexivity).", "Qed.", "Axiom extra : False."), frozenset(), False)
    result = coq_verifier._audit(task, smuggled)  # noqa: SLF001
    assert result is not None and result.verdict is Verdict.CHEATING
    assert "PG.ProofgymSubmission.extra" in " ".join(result.reasons)
