"""Red team, round 6: both sides of every verdict rule, against the real provers.

A verdict must survive an adversary and be fair: CHEATING (reward -1) only for an attempt to get an unproved
statement accepted, and an honest slip normalised or ERROR with feedback that says what to change. This round
started from round 5's open items (``Save``/``Focus``/``Abort`` inside a Coq proof; the HOL Light zygote's
budgets; the verifier pool's stealing, spill and verdict cache) and then probed what a proof controls besides
its verdict: how much it prints.

Found and fixed here (each test below fails on the code before the fix):

- Coq fairness: ``Save name.`` (the old closer: ``Qed`` under another name) was CHEATING; it is ``Qed.``.
  ``Focus n.``/``Unfocus.``/``Unfocused.`` (deprecated focusing, which Coq 8.16 still runs) were CHEATING; they
  are sent as written. ``Abort`` inside the proof was CHEATING: it gives the proof up and claims nothing, so it is
  FAIL (never run, never OK) with feedback; a cheat after it is still CHEATING.
- Coq resources: what a proof prints was kept whole by the verifier (``do 60000 idtac "<10 KB>"``: the checking
  process held 650 MB for one check, an OK verdict); a call now keeps at most ``idetop.MESSAGE_BYTES`` of
  message text, and a query the verifier judges by (``Print Assumptions``, the leak audit's ``Print``) never
  judges on part of its answer.
- Coq determinism: a proof naming the isolation cache's module (``C<key>.f1``, which feedback can show) was OK on
  a cached context and FAIL on a replayed one; it now runs replayed, as ``Top.`` names do.
- Cost before any prover runs: the reply parser's fence pairing and Dafny's attribute/module readers were
  quadratic in the submission (see that section).
- The pool: with a CPU-time budget (``timeout_clock="cpu"``) the pool still answered TIMEOUT at ``timeout_s`` of
  wall time, before the verifier's own wall backstop: its deadline is now the verifier's.

Looked at and held: the HOL Light zygote caps what a worker prints and its verdict (``pg_max_output``,
``pg_max_verdict``) and limits each worker (RLIMIT_AS/CPU, seccomp); the pool never caches a TIMEOUT or a
harness failure, keys the verdict cache by the whole task, the proof and the verifier settings, and retries a
dead worker's check elsewhere; a Coq goal too large to print ends in Coq's own ``Stack overflow`` (FAIL).
"""

from __future__ import annotations

import pytest

from proofgym.envs.types import ErrorCategory, Task, Verdict
from proofgym.envs.verifiers.base import Rejected
from proofgym.envs.verifiers.coq.proof import normalize_proof
from tests.conftest import requires_coq

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


@pytest.mark.prover
@requires_coq
def test_what_a_proof_prints_is_bounded(monkeypatch: pytest.MonkeyPatch):
    """Was a hole (fixed): every message a proof printed was kept for the call (``do 60000 idtac "<10 KB>"``: the
    checking process grew to 650 MB, a pool's worst case that per worker). Here the bound is made small, the proof
    prints 40 times more, and the verdict is still OK."""
    from proofgym.envs.verifiers.coq import CoqVerifier, idetop

    monkeypatch.setattr(idetop, "MESSAGE_BYTES", 20_000)
    replies: list[idetop.Reply] = []
    call = idetop.IdeTop.call

    def spy(self, xml: str, **kwargs):
        reply = call(self, xml, **kwargs)
        replies.append(reply)
        return reply

    monkeypatch.setattr(idetop.IdeTop, "call", spy)
    with CoqVerifier(audit="never", isolation_cache=False) as v:
        result = v.check(_coq("print", "Lemma t : 1 = 1."), f'Proof. do 80 idtac "{"x" * 10_000}". reflexivity. Qed.')
    assert result.verdict is Verdict.OK, result
    assert any(r.dropped >= 600_000 for r in replies)
    assert all(sum(len(text) for _, text in r.messages) <= 20_000 for r in replies)


def test_print_assumptions_in_part_is_a_harness_failure():
    """The other side of the bound: ``Print Assumptions`` whose answer did not fit is never judged on the part
    that did (an axiom could be in the rest): a harness failure, no reward."""
    import xml.etree.ElementTree as ET
    from types import SimpleNamespace

    from proofgym.envs.errors import VerifierCrashed
    from proofgym.envs.verifiers.coq import CoqVerifier
    from proofgym.envs.verifiers.coq.idetop import Reply

    cut = Reply(True, ET.Element("value"), [("notice", "Closed under the global context")], dropped=1)
    session = SimpleNamespace(ide=SimpleNamespace(query=lambda *args, **kwargs: cut))
    with pytest.raises(VerifierCrashed, match="Print Assumptions"):
        CoqVerifier._assumptions(None, session, 1, "t")  # type: ignore[arg-type]
    whole = Reply(True, ET.Element("value"), [("notice", "Closed under the global context")])
    session.ide.query = lambda *args, **kwargs: whole
    assert CoqVerifier._assumptions(None, session, 1, "t") == ([], [])  # type: ignore[arg-type]


@pytest.mark.prover
@requires_coq
def test_a_leak_audit_never_reads_a_proof_term_in_part(monkeypatch: pytest.MonkeyPatch):
    """The other side of the bound: the leak audit reads the proof term (``Print``); one that did not fit is
    refused as too large to audit, as one naming too many constants is, never judged on its first part."""
    from proofgym.envs.verifiers.coq import CoqVerifier, idetop

    leak = Task(id="rt6.leak", system="coq", context="Require Import List.\n",
                statement="Lemma app_nil_r (A : Type) (l : list A) : l ++ nil = l.",
                reference_proof="Proof. induction l; simpl; [reflexivity | rewrite IHl; reflexivity]. Qed.",
                category="P1", timeout_s=20, metadata={"qualid": "Coq.Lists.List.app_nil_r", "allowed_axioms": []})
    honest = "Proof. induction l; simpl; [reflexivity | rewrite IHl; reflexivity]. Qed."
    with CoqVerifier(audit="never", isolation_cache=False) as v:
        assert v.check(leak, honest).verdict is Verdict.OK
        monkeypatch.setattr(v, "_environment_is_clean", lambda task: True)  # Print Assumptions is tested above
        monkeypatch.setattr(idetop, "MESSAGE_BYTES", 0)  # every message is past the bound
        result = v.check(leak, honest)
    assert result.verdict is Verdict.CHEATING and "too large to audit" in result.reasons[0], result



@pytest.mark.prover
@requires_coq
@pytest.mark.parametrize("prefix", ["", "PGIso."])
def test_the_isolation_cache_module_name_gets_the_uncached_verdict(tmp_path, prefix: str):
    """Was a hole (fixed): a context served from the isolation cache is the module ``PGIso.C<key>``, which a
    replayed (uncached) context has no trace of, so ``exact C<key>.f1`` was OK with the cache and FAIL without:
    a verdict that depended on the cache (and on which pool worker had the context cached). Such a proof now
    runs on the replayed session, as ``Top.`` names do (round 4), and gets the uncached verdict everywhere."""
    from proofgym.envs.verifiers.coq import CoqVerifier

    context = "Definition f (n : nat) := match n with 0 => 0 | S m => S m end.\n" \
              "Lemma f1 : f 1 = 1. Proof. reflexivity. Qed.\n"
    task = _coq("iso_name", "Lemma t : f 1 = 1.", context)
    verdicts = []
    for where in ({"isolation_dir": str(tmp_path)}, {"isolation_cache": False}):
        with CoqVerifier(audit="never", **where) as v:
            assert v.check(task, "Proof. exact f1. Qed.").verdict is Verdict.OK
            if v.isolation is not None:
                module = v.isolation.plan(v._with_prelude(task).context).module
            verdicts.append(v.check(task, f"Proof. exact {prefix}{module}.f1. Qed.").verdict)
    assert verdicts == [Verdict.FAIL, Verdict.FAIL]

# ---------------------------------------------------------------------------------------------
# What a submission costs before any prover runs: the pure-Python readers are linear
#
# Found and fixed here: ``last_code_block`` copied and searched the rest of the fence list for every opener
# (32,000 fence lines: 4.3 s of CPU, 17 s at the 256 KB submission limit; the reply parser runs in the trainer
# too); Dafny's ``attribute_spans`` and ``module_scopes`` scanned to the end of the program for each nested
# attribute or module (5,800 nested ``module M {`` lines: 3.2 s of CPU, ~50 s at the limit; 16,000 nested
# ``{:a``: past 250 s of wall time at nice 19); the Dafny lexer sliced each line from its start for every token.
# Tests here pin that the one-pass versions answer exactly what the old readers answered; the cost was measured
# (never a timing threshold in a test).


def test_last_code_block_pairs_fences_as_before():
    from proofgym.envs.parsing import last_code_block

    cases = {
        "```coq\nA\n```\ntext\n```\nB\n```\n": ("B\n", True, True),
        "```\nA\n```\n```coq\nB": ("B", True, False),
        "~~~\nA\n```\nB\n~~~\n": ("A\n```\nB\n", True, True),
        "````\nA\n```\nB\n````\n": ("A\n```\nB\n", True, True),
        "```\nA\n```py\nB\n```\n": ("A\n```py\nB\n", True, True),
        "no fence": ("no fence", False, True),
        "```\n" * 9: ("", True, False),
        "```\n" * 10: ("", True, True),
    }
    for text, expected in cases.items():
        assert last_code_block(text) == expected, text


def test_bracket_closes_is_matching_close_for_every_bracket():
    import random

    from proofgym.envs.verifiers.dafny.lexer import Token, bracket_closes, matching_close

    rng = random.Random(6)
    for _ in range(2000):
        tokens = [Token("op", rng.choice("()[]{}x"), 0, 0, 1, 1) for _ in range(rng.randint(0, 24))]
        assert bracket_closes(tokens) == [matching_close(tokens, k) for k in range(len(tokens))]


def test_nested_modules_and_attributes_are_read_as_before():
    from proofgym.envs.verifiers.dafny.integrity import module_scopes
    from proofgym.envs.verifiers.dafny.lexer import attribute_spans, tokenize

    tokens = tokenize("module {:a {:b}} M refines N {\n  module P { }\n  lemma {:c} L() { }\n}\nmodule Q { ")
    assert [(s.name, s.refines, tokens[s.open].text, tokens[s.close].text) for s in module_scopes(tokens)] == [
        ("M", "N", "{", "}"), ("P", "", "{", "}")]
    assert [(name, tokens[a].text, tokens[b].text) for name, a, b in attribute_spans(tokens)] == [
        ("a", "{", "}"), ("b", "{", "}"), ("c", "{", "}")]
    deep = tokenize("module M {\n" * 300 + "}\n" * 300)
    assert len(module_scopes(deep)) == 300


def test_the_dafny_lexer_counts_columns_in_utf8_bytes_after_many_tokens():
    """The column grows from the last token's now: the same UTF-8 byte columns as the old reader's slices."""
    from proofgym.envs.verifiers.dafny.lexer import tokenize

    text = "var a := \"\u00e9\u2200\"; x\r\n  y /* \u00e9\n */ z {" + "}" * 50 + " w\n@\"a\u00e9\nb\" q 'c'"
    assert {t.text: (t.line, t.col) for t in tokenize(text)} == {
        "var": (1, 1), "a": (1, 5), ":=": (1, 7), '"\u00e9\u2200"': (1, 10), ";": (1, 17), "x": (1, 19),
        "y": (2, 3), "z": (3, 5), "{": (3, 7), "}": (3, 57), "w": (3, 59), '@"a\u00e9\nb"': (4, 1), "q": (5, 4),
        "'c'": (5, 6)}


# ---------------------------------------------------------------------------------------------
# The verifier pool


def test_the_pool_deadline_is_the_cpu_clocked_verifiers_own(tmp_path):
    """Was a hole (fixed): with ``timeout_clock="cpu"`` a verifier gives a check ``timeout_s`` of CPU and up to
    ``wall_backstop * timeout_s`` of wall time (a loaded machine), but the pool answered TIMEOUT at ``timeout_s``
    of wall time: the verdict depended on the load again. Here the check answers OK once the old deadline has
    surely passed (the test waits for it, no timing threshold)."""
    import dataclasses
    import time as clock

    from tests.test_pool import fake_pool, fake_task

    gate = tmp_path / "go"
    task = dataclasses.replace(fake_task(0), timeout_s=0.5)
    kwargs = {"timeout_clock": "cpu", "wall_backstop": 1000.0}
    with fake_pool(1, context_allowance_s=0.0, verifier_kwargs=kwargs) as pool:
        future = pool.submit(task, f"wait:{gate}")
        clock.sleep(2.0)  # past timeout_s + context_allowance_s: where the old pool answered TIMEOUT
        gate.write_text("go")
        assert future.result(timeout=120).verdict is Verdict.OK
    with fake_pool(1, context_allowance_s=0.0) as pool:  # the wall clock: timeout_s is the verifier's deadline
        gate.unlink()
        future = pool.submit(task, f"wait:{gate}")
        assert future.result(timeout=120).verdict is Verdict.TIMEOUT
        gate.write_text("go")
