"""Fake verifiers that more than one test module (and the runs they start by ``module:factory``) share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proofgym.envs.types import CheckResult, Task, Verdict
from proofgym.envs.verifiers.base import ProverVerifier


class EvenVerifier:
    """A fake verifier: OK for a proof of even length, FAIL for odd (deterministic, content-dependent, no prover)."""

    def __init__(self, system: str = "coq", **kwargs: Any) -> None:
        pass

    def check(self, task: Task, proof: str) -> CheckResult:
        return CheckResult(Verdict.OK if len(proof) % 2 == 0 else Verdict.FAIL)

    def close(self) -> None:
        pass


@dataclass(frozen=True)
class FakeConfig:
    """The config a fake prover takes (the fields :class:`ProverVerifier` reads)."""

    audit: str = "never"
    audit_rate: float = 0.0
    seed: int = 0


class FakeScreeningVerifier(ProverVerifier):
    """A fake prover (no process): its ``_check`` answers ``script[proof]``, a result or an exception to raise.

    For the mechanics :class:`~proofgym.envs.verifiers.base.ProverVerifier` owns (screening, the one place a
    rejection becomes its verdict); verdicts of real proofs come from the real provers' tests.
    """

    system = "coq"
    config_class = FakeConfig
    audits = False

    def __init__(self, script: dict[str, CheckResult | BaseException], **overrides: Any) -> None:
        super().__init__(**overrides)
        self.script = script
        self.seen: list[str] = []

    def _check(self, task: Task, proof: str, audit: bool | None) -> CheckResult:
        self.seen.append(proof)
        answer = self.script[proof.strip()]
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def _shutdown(self) -> None:
        pass


class FakeGatedVerifier(EvenVerifier):
    """:class:`EvenVerifier` that answers nothing until the file ``$PROOFGYM_TEST_GATE`` exists (an event the test
    makes), for tests of what goes on while a check is outstanding."""

    def check(self, task: Task, proof: str) -> CheckResult:
        import os
        import time
        from pathlib import Path

        gate = Path(os.environ["PROOFGYM_TEST_GATE"])
        deadline = time.monotonic() + 180.0
        while not gate.exists():  # polls for the test's event; never an ordering by sleeping
            if time.monotonic() > deadline:
                raise RuntimeError(f"the gate {gate} was not opened within 180 s")
            time.sleep(0.1)
        return super().check(task, proof)
