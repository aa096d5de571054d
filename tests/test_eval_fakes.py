"""A fake verifier for evaluation tests that need no prover (importable by worker processes).

Verdicts by what the proof says: ``good`` -> OK, ``cheat`` -> CHEATING, ``slow`` -> TIMEOUT,
``garbage`` -> ERROR (syntax), ``unknown_lemma`` -> FAIL (undefined), anything else -> FAIL (logic).
``crash`` raises VerifierError (a harness failure, never a verdict).
"""

from __future__ import annotations

from proofgym.envs.errors import VerifierCrashed
from proofgym.envs.types import CheckResult, ErrorCategory, Goal, Task, Verdict


class FakeVerifier:
    system = "coq"

    def __init__(self, **_: object) -> None:
        self.closed = False

    def check(self, task: Task, proof: str) -> CheckResult:
        if "crash" in proof:
            raise VerifierCrashed("fake crash")
        if "good" in proof:
            return CheckResult(Verdict.OK, wall_s=0.01, cpu_s=0.02, backend="fake")
        if "cheat" in proof:
            return CheckResult(Verdict.CHEATING, ("forbidden: Admitted",), error_category=ErrorCategory.CHEATING,
                               wall_s=0.01, backend="fake")
        if "slow" in proof:
            return CheckResult(Verdict.TIMEOUT, ("timeout",), error_category=ErrorCategory.TIMEOUT, wall_s=0.01)
        if "garbage" in proof:
            return CheckResult(Verdict.ERROR, ("syntax error",), ("Syntax error: '.' expected.",),
                               error_category=ErrorCategory.SYNTAX, wall_s=0.01)
        if "unknown_lemma" in proof:
            return CheckResult(Verdict.FAIL, ("tactic failed",), ("The reference unknown_lemma was not found.",),
                               error_category=ErrorCategory.UNDEFINED, wall_s=0.01)
        return CheckResult(Verdict.FAIL, ("goals remain",), ("Attempt to save an incomplete proof",),
                           remaining_goals=(Goal(("n : nat",), "n + 0 = n"),), error_category=ErrorCategory.LOGIC,
                           wall_s=0.01)

    def close(self) -> None:
        self.closed = True

    def __enter__(self) -> FakeVerifier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


FAKE = "tests.test_eval_fakes:FakeVerifier"
