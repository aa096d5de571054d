"""What :class:`ProverVerifier` owns for every prover: the one place a pre-check rejection becomes its verdict."""

from __future__ import annotations

import pytest

from proofgym.envs.errors import InvalidSubmission
from proofgym.envs.types import CheckResult, ErrorCategory, Task, Verdict
from proofgym.envs.verifiers.base import FENCE_NOTE, Rejected
from tests.fakes import FakeScreeningVerifier

TASK = Task(id="t", system="coq", context="", statement="Lemma t : True.", reference_proof="Proof. exact I. Qed.")


@pytest.mark.parametrize(("raised", "verdict", "category"), [
    (Rejected(Verdict.CHEATING, ["`Admitted` leaves the goal unproved"]), Verdict.CHEATING, ErrorCategory.CHEATING),
    (Rejected(Verdict.FAIL, ["`Abort` gives the proof up"]), Verdict.FAIL, ErrorCategory.LOGIC),
    (Rejected(Verdict.ERROR, ["syntax: empty sentence"]), Verdict.ERROR, ErrorCategory.SYNTAX),
    (Rejected(Verdict.ERROR, ["does not lex"], ErrorCategory.PARSE_ERROR), Verdict.ERROR, ErrorCategory.PARSE_ERROR),
])
def test_a_rejection_from_the_provers_screening_is_its_verdict(raised: Rejected, verdict: Verdict,
                                                              category: ErrorCategory) -> None:
    with FakeScreeningVerifier({"p.": raised}) as verifier:
        result = verifier.check(TASK, "p.")
    assert (result.verdict, result.error_category, result.backend) == (verdict, category, "precheck")
    assert result.reasons == raised.reasons


def test_an_invalid_submission_found_by_the_prover_is_the_same_error_as_the_shared_screening() -> None:
    with FakeScreeningVerifier({"p.": InvalidSubmission("no e(...) step")}) as verifier:
        from_prover = verifier.check(TASK, "p.")
        shared = verifier.check(TASK, "\x00")
    assert from_prover.verdict is shared.verdict is Verdict.ERROR
    assert from_prover.reasons == ("invalid submission: no e(...) step",)
    assert from_prover.error_category is shared.error_category is ErrorCategory.SYNTAX
    assert verifier.seen == ["p."]  # the shared screening turned "\x00" away before the prover saw it


def test_a_fenced_submission_keeps_the_fence_note_whatever_the_prover_answers() -> None:
    script: dict[str, CheckResult | BaseException] = {
        "p.": Rejected(Verdict.CHEATING, ["cheat"]), "q.": CheckResult(Verdict.OK)}
    with FakeScreeningVerifier(script) as verifier:
        rejected = verifier.check(TASK, "```\np.\n```")
        proved = verifier.check(TASK, "```\nq.\n```")
        empty = verifier.check(TASK, "```\n\n```")
    assert rejected.messages == (FENCE_NOTE,) and rejected.verdict is Verdict.CHEATING
    assert proved.messages == (FENCE_NOTE,) and proved.verdict is Verdict.OK
    assert empty.verdict is Verdict.ERROR and FENCE_NOTE not in empty.messages
