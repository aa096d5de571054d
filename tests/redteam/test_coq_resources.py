"""Red team, Coq: what a proof controls besides its verdict. What it prints is bounded (``idetop.MESSAGE_BYTES``),
and a query the verifier judges by (``Print Assumptions``, the leak audit's ``Print``) never judges on part of
its answer: a cut answer is a harness failure.

Moved from the red-team rounds (tests/redteam/ROUNDS.md: what each round found and fixed):
round 6.
"""

from __future__ import annotations

import pytest

from proofgym.envs.types import Task, Verdict
from tests.conftest import requires_coq

ADD_0 = "Lemma t (n : nat) : n + 0 = n."
IND = "induction n; simpl; congruence."


def _coq(tid: str, statement: str = ADD_0, context: str = "") -> Task:
    return Task(id=f"rt6.{tid}", system="coq", context=context, statement=statement,
                reference_proof=f"Proof. {IND} Qed.", category="P1", timeout_s=20, metadata={"allowed_axioms": []})


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
