"""Fake verifiers that more than one test module (and the runs they start by ``module:factory``) share."""

from __future__ import annotations

from typing import Any

from proofgym.envs.types import CheckResult, Task, Verdict


class EvenVerifier:
    """A fake verifier: OK for a proof of even length, FAIL for odd (deterministic, content-dependent, no prover)."""

    def __init__(self, system: str = "coq", **kwargs: Any) -> None:
        pass

    def check(self, task: Task, proof: str) -> CheckResult:
        return CheckResult(Verdict.OK if len(proof) % 2 == 0 else Verdict.FAIL)

    def close(self) -> None:
        pass
