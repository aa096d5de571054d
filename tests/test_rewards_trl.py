"""The TRL reward function: verdicts from the verifier pool, None for harness failures, metrics via log_metric."""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

import pytest

from proofgym.envs.errors import VerifierCrashed
from proofgym.envs.tasks.suites import load_tasks
from proofgym.envs.types import CheckResult, ErrorCategory, Task, Verdict
from proofgym.envs.verifiers.pool import LocalVerifierPool
from proofgym.training.rewards import HARNESS, Outcome, VerifierReward, batch_metrics, completion_text, reason_key
from tests.conftest import requires_coq


def fenced(proof: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": f"Here is the proof:\n```coq\n{proof}\n```"}]


class ScriptVerifier:
    """A fake verifier: the proof says the verdict (``ok``, ``cheat``, ``timeout``...); ``crash`` breaks it."""

    def __init__(self, system: str = "coq", **kwargs: Any) -> None:
        self.system = system

    def check(self, task: Task, proof: str) -> CheckResult:
        if proof == "crash":
            raise VerifierCrashed("the fake prover crashed")
        verdict = {"ok": Verdict.OK, "cheat": Verdict.CHEATING, "timeout": Verdict.TIMEOUT}.get(proof, Verdict.ERROR)
        reasons = ("admitted: the proof ends with Admitted",) if verdict is Verdict.CHEATING else ()
        return CheckResult(verdict, reasons, messages=("fake",), error_category=ErrorCategory.NONE, wall_s=0.01)

    def close(self) -> None:
        pass


class Recorder:
    def __init__(self) -> None:
        self.metrics: dict[str, list[float]] = defaultdict(list)
        self.extra: dict[str, list[Any]] = defaultdict(list)

    def log_metric(self, name: str, value: float) -> None:
        self.metrics[name].append(value)

    def log_extra(self, column: str, values: list) -> None:
        self.extra[column].extend(values)


def test_helpers():
    assert completion_text("x") == "x"
    assert completion_text([{"role": "assistant", "content": "y"}]) == "y"
    assert completion_text([]) == ""
    assert reason_key("Admitted: the proof ends with Admitted") == "admitted"
    m = batch_metrics([Outcome("OK", 1.0, wall_s=2.0), Outcome("CHEATING", -1.0, ("axiom: x",)), Outcome(None, None)])
    assert m["proof/ok_rate"] == 0.5 and m["proof/cheat_rate"] == 0.5 and m["proof/cheat/axiom"] == 0.5
    assert m["verifier/harness_failures"] == 1 and m["verifier/seconds"] == 1.0


def test_harness_failures_are_none_and_counted_and_the_batch_goes_on(tiny_suite):
    tasks = load_tasks(tiny_suite)
    rec = Recorder()
    with LocalVerifierPool(1, verifier_factory="tests.test_rewards_trl:ScriptVerifier") as pool:
        reward = VerifierReward(tasks, pool)
        proofs = ["ok", "crash", "cheat", "timeout", "garbage"]
        rewards = reward(prompts=["p"] * 5, completions=[fenced(p) for p in proofs], task_id=["tiny.lia"] * 5,
                         trainer_state=None, log_metric=rec.log_metric, log_extra=rec.log_extra)
    assert rewards == [1.0, None, -1.0, 0.0, 0.0]
    assert rec.metrics["verifier/harness_failures"] == [1.0]
    assert rec.metrics["proof/ok_rate"] == [0.25] and rec.metrics["proof/cheat_rate"] == [0.25]
    assert rec.metrics["verifier/timeout_rate"] == [0.25] and rec.metrics["proof/cheat/admitted"] == [0.25]
    assert rec.extra["verdict"] == ["OK", HARNESS, "CHEATING", "TIMEOUT", "ERROR"]
    assert "VerifierCrashed" in rec.extra["reasons"][1]
    assert reward.totals[HARNESS] == 1 and reward.totals["samples"] == 5


def test_a_closed_pool_makes_every_reward_none(tiny_suite):
    pool = LocalVerifierPool(1, verifier_factory="tests.test_rewards_trl:ScriptVerifier")
    pool.close()
    reward = VerifierReward(load_tasks(tiny_suite), pool)
    assert reward(prompts=["p", "p"], completions=["ok", "ok"], task_id=["tiny.lia", "tiny.lia"]) == [None, None]
    assert reward.last_metrics["verifier/harness_failure_rate"] == 1.0


def test_rollout_outcomes_are_used_instead_of_checking_again(tiny_suite):
    reward = VerifierReward(load_tasks(tiny_suite), pool=None)
    outcomes = [Outcome("OK", 0.5, turns=2).to_dict(), Outcome("FAIL", 0.0, turns=3).to_dict()]
    rec = Recorder()
    assert reward(prompts=["p", "p"], completions=["a", "b"], task_id=["tiny.lia"] * 2, rollout_outcomes=outcomes,
                  log_metric=rec.log_metric, log_extra=rec.log_extra) == [0.5, 0.0]
    assert rec.metrics["repair/turns"] == [2.5] and rec.metrics["repair/fixed_rate"] == [0.5]
    assert rec.extra["turns"] == [2, 3]


@requires_coq
@pytest.mark.prover
def test_known_completions_get_verdict_rewards_from_real_coq(tiny_suite):
    tasks = {t.id: t for t in load_tasks(tiny_suite)}
    reference = tasks["tiny.app_nil"].reference_proof
    completions = [
        fenced(reference),                                     # the reference proof: OK
        fenced("Proof. induction l. Admitted."),               # a cheat: CHEATING
        [{"role": "assistant", "content": "I think it is true because lists."}],  # garbage: ERROR or FAIL
        fenced("Proof. reflexivity. Qed."),                    # wrong: FAIL
        "Proof. lia. Qed.",                                    # a plain-text completion (standard format)
    ]
    ids = ["tiny.app_nil"] * 4 + ["tiny.lia"]
    rec = Recorder()
    start = time.monotonic()
    with LocalVerifierPool(2) as pool:
        reward = VerifierReward(tasks, pool)
        rewards = reward(prompts=["p"] * 5, completions=completions, task_id=ids, log_metric=rec.log_metric,
                         log_extra=rec.log_extra)
    assert rewards == [1.0, -1.0, 0.0, 0.0, 1.0], rec.extra
    verdicts = rec.extra["verdict"]
    assert verdicts[:2] == ["OK", "CHEATING"] and verdicts[2] in ("ERROR", "FAIL") and verdicts[3:] == ["FAIL", "OK"]
    assert rec.metrics["proof/ok_rate"] == [0.4] and rec.metrics["proof/cheat_rate"] == [0.2]
    assert rec.metrics["verifier/harness_failures"] == [0.0]
    assert 0 < rec.metrics["verifier/seconds"][0] and rec.metrics["verifier/batch_seconds"][0] <= time.monotonic() - start
