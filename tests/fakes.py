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


class FakeScriptedGenerator:
    """A fake policy (no model): generation call ``c`` answers row ``r`` with ``replies[(c * width + r) % len]``,
    the reply's token ids; the call numbered ``signal_on_call`` (1-based) sets ``started`` as it begins, an event
    that says generation of that chunk has started."""

    def __init__(self, tokenizer: Any, replies: list[str], *, signal_on_call: int = 2) -> None:
        import threading

        self.tokenizer = tokenizer
        self.replies = list(replies)
        self.signal_on_call = signal_on_call
        self.started = threading.Event()
        self.calls = 0
        self.rows = 0

    def __call__(self, prompt_ids: Any, max_new_tokens: int) -> tuple[list[list[int]], None]:
        self.calls += 1
        if self.calls == self.signal_on_call:
            self.started.set()
        out = []
        for _ in prompt_ids:
            text = self.replies[self.rows % len(self.replies)]
            self.rows += 1
            out.append(list(self.tokenizer(text, add_special_tokens=False)["input_ids"]))
        return out, None


class FakeEventGatedPool:
    """A fake verifier pool (``check_batch`` only; :class:`EvenVerifier`'s verdicts): its first batch waits for
    ``event`` (set by a :class:`FakeScriptedGenerator` starting its second chunk) before it answers, so a caller
    that checks a chunk before generating the next one can never see it set. ``saw_event_during_first_batch``
    records which happened; ``give_up_s`` only keeps such a caller from hanging (the test then fails)."""

    def __init__(self, event: Any, *, give_up_s: float = 60.0) -> None:
        self.event = event
        self.give_up_s = give_up_s
        self.batches: list[list[str]] = []
        self.saw_event_during_first_batch: bool | None = None

    def check_batch(self, pairs: Any, timeout: float | None = None) -> list[Any]:
        from proofgym.envs.verifiers.pool import PoolResult

        pairs = list(pairs)
        self.batches.append([proof for _, proof in pairs])
        if len(self.batches) == 1:
            self.saw_event_during_first_batch = self.event.wait(self.give_up_s)
        return [PoolResult(None, task.id, task.system, EvenVerifier().check(task, proof)) for task, proof in pairs]
