"""The TRL reward function: verdicts from the verifier pool, None for harness failures, metrics via log_metric."""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

import pytest

from proofgym.envs.errors import VerifierCrashed
from proofgym.envs.rewards import RewardMap
from proofgym.envs.tasks.suites import load_tasks
from proofgym.envs.types import CheckResult, ErrorCategory, Task, Verdict
from proofgym.envs.verifiers.pool import LocalVerifierPool
from proofgym.training.rewards import (
    HARNESS,
    Outcome,
    PermutedReward,
    VerifierReward,
    batch_metrics,
    check_reward_policy,
    completion_text,
    reason_key,
    shaped_reward,
)
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
        verdict = {"ok": Verdict.OK, "cheat": Verdict.CHEATING, "timeout": Verdict.TIMEOUT,
                   "fail": Verdict.FAIL}.get(proof, Verdict.ERROR)
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


# -- the reward policy: malformed output 0, -1 only for exploits, shaping off by default and capped -------------
def test_the_default_policy_and_overrides_that_would_teach_the_wrong_thing_are_refused():
    check_reward_policy(RewardMap.from_mapping(None))  # OK 1 > FAIL/TIMEOUT/ERROR 0 > CHEATING -1
    check_reward_policy(RewardMap.from_mapping({"CHEATING": -2}), format_bonus=0.1)
    with pytest.raises(ValueError, match="honest miss"):  # malformed output (ERROR) punished like a cheat
        check_reward_policy(RewardMap.from_mapping({"ERROR": -1}))
    with pytest.raises(ValueError, match="honest miss"):  # a miss paid like a proof
        check_reward_policy(RewardMap.from_mapping({"FAIL": 1}))
    with pytest.raises(ValueError, match="not below OK"):  # shaping may not reach a proof's reward
        check_reward_policy(RewardMap.from_mapping(None), format_bonus=1.0)
    with pytest.raises(ValueError, match=">= 0"):
        check_reward_policy(RewardMap.from_mapping(None), format_bonus=-0.1)
    with pytest.raises(ValueError):
        VerifierReward([], pool=None, reward_map={"ERROR": -1.0})


def test_format_bonus_is_paid_only_on_verdicts_the_verifier_ran_and_never_on_cheats_or_errors():
    rm = RewardMap.from_mapping(None)
    by_verdict = {v: shaped_reward(CheckResult(v), rm, 0.1) for v in Verdict}
    assert by_verdict == {Verdict.OK: 1.0, Verdict.FAIL: 0.1, Verdict.TIMEOUT: 0.1, Verdict.ERROR: 0.0,
                          Verdict.CHEATING: -1.0}
    assert shaped_reward(None, rm, 0.1) is None
    assert {v: shaped_reward(CheckResult(v), rm) for v in Verdict} == {v: rm(CheckResult(v)) for v in Verdict}


def test_shaping_is_off_by_default_and_on_when_asked(tiny_suite):
    tasks = load_tasks(tiny_suite)
    proofs = ["ok", "cheat", "timeout", "garbage", "fail"]
    with LocalVerifierPool(1, verifier_factory="tests.test_rewards_trl:ScriptVerifier") as pool:
        plain = VerifierReward(tasks, pool)(prompts=["p"] * 5, completions=[fenced(p) for p in proofs],
                                            task_id=["tiny.lia"] * 5)
        shaped = VerifierReward(tasks, pool, format_bonus=0.1)(
            prompts=["p"] * 5, completions=[fenced(p) for p in proofs], task_id=["tiny.lia"] * 5)
    assert plain == [1.0, -1.0, 0.0, 0.0, 0.0]
    assert shaped == [1.0, -1.0, 0.1, 0.0, 0.1]


def test_every_metric_is_logged_in_every_batch_zeros_included(tiny_suite):
    """A rate logged only in the batches where it is non-zero reads high once TRL averages it."""
    tasks = load_tasks(tiny_suite)
    rec = Recorder()
    with LocalVerifierPool(1, verifier_factory="tests.test_rewards_trl:ScriptVerifier") as pool:
        reward = VerifierReward(tasks, pool)
        for proofs in (["cheat", "ok"], ["ok", "fail"]):
            reward(prompts=["p"] * 2, completions=[fenced(p) for p in proofs], task_id=["tiny.lia", "tiny.and_comm"],
                   log_metric=rec.log_metric, log_extra=rec.log_extra)
    assert len({len(values) for values in rec.metrics.values()}) == 1  # every name in both batches
    assert rec.metrics["proof/cheat/admitted"] == [0.5, 0.0]
    assert rec.metrics["repair/turns"] == [1.0, 1.0] and rec.metrics["repair/fixed_rate"] == [0.0, 0.0]
    # the completions table: task, category, the parsed proof that was checked, and the verdict
    assert rec.extra["task_id"] == ["tiny.lia", "tiny.and_comm"] * 2
    assert rec.extra["category"] == [{t.id: t.category for t in tasks}[i] for i in rec.extra["task_id"]]
    assert rec.extra["proof"] == ["cheat", "ok", "ok", "fail"]
    assert rec.extra["verdict"] == ["CHEATING", "OK", "OK", "FAIL"]
    assert reward.drain_task_outcomes() == [("tiny.lia", "CHEATING"), ("tiny.and_comm", "OK"), ("tiny.lia", "OK"),
                                            ("tiny.and_comm", "FAIL")]
    assert reward.drain_task_outcomes() == []


@requires_coq
@pytest.mark.prover
def test_malformed_attempts_never_score_below_prose_and_only_exploits_earn_minus_one_on_real_coq(tiny_suite):
    """Prose before ``Proof.`` is an honest slip: normalised and checked (OK 1, a wrong proof 0), or ERROR (0); never
    CHEATING (-1). Otherwise group normalisation would score pure prose (+0.5) above an attempted proof (-1.5) and
    GRPO would learn to stop writing proofs."""
    tasks = load_tasks(tiny_suite)
    completions = [
        [{"role": "assistant", "content": "I will prove it by arithmetic.\nProof. lia. Qed."}],  # prose, a proof
        [{"role": "assistant", "content": "I will try this.\nProof. reflexivity. Qed."}],         # prose, wrong
        [{"role": "assistant", "content": "I think it is true."}],                                # pure prose
        [{"role": "assistant", "content": "```coq\nProof.\n  intros a b H.\n"}],              # cut at the limit
        fenced("Proof. Admitted."),                                                              # an exploit
        fenced("Proof. lia. Qed."),                                                              # a proof
    ]
    with LocalVerifierPool(1) as pool:
        reward = VerifierReward(tasks, pool)
        rewards = reward(prompts=["p"] * 6, completions=completions, task_id=["tiny.lia"] * 6)
    verdicts = [o.verdict for o in reward.last_outcomes]
    assert rewards[4:] == [-1.0, 1.0] and verdicts[4:] == ["CHEATING", "OK"], verdicts
    assert rewards[1:4] == [0.0, 0.0, 0.0] and "CHEATING" not in verdicts[:4], verdicts
    assert rewards[0] in (0.0, 1.0) and rewards[0] >= rewards[2], verdicts  # never below pure prose

def test_the_permuted_reward_control_keeps_the_rewards_and_loses_which_completion_earned_them(tiny_suite):
    tasks = load_tasks(tiny_suite)
    proofs = ["ok", "fail", "crash", "cheat", "fail", "ok", "fail", "fail"]
    with LocalVerifierPool(1, verifier_factory="tests.test_rewards_trl:ScriptVerifier") as pool:
        inner = VerifierReward(tasks, pool)
        control = PermutedReward(inner, seed=1)
        shuffled = [control(prompts=["p"] * 8, completions=[fenced(p) for p in proofs], task_id=["tiny.lia"] * 8)
                    for _ in range(4)]
    true = [1.0, 0.0, None, -1.0, 0.0, 1.0, 0.0, 0.0]
    for rewards in shuffled:
        assert rewards[2] is None  # a harness failure stays unscored
        assert sorted(r for r in rewards if r is not None) == sorted(r for r in true if r is not None)
    assert any(rewards != true for rewards in shuffled)
    assert control.last_metrics["proof/ok_rate"] == 2 / 7 and control.__name__ == "verifier"  # true metrics


def test_the_within_group_control_keeps_every_groups_rewards_and_loses_which_completion_earned_them(tiny_suite):
    """The matched-scale control: TRL scores a batch as consecutive groups, so each group keeps its rewards (its
    advantages' magnitudes) and only the pairing of completion and reward is random."""
    tasks = load_tasks(tiny_suite)
    proofs = ["ok", "fail", "fail", "fail", "ok", "ok", "crash", "fail"]
    true = [1.0, 0.0, 0.0, 0.0, 1.0, 1.0, None, 0.0]
    with LocalVerifierPool(1, verifier_factory="tests.test_rewards_trl:ScriptVerifier") as pool:
        control = PermutedReward(VerifierReward(tasks, pool), seed=3, group=4)
        shuffled = [control(prompts=["p"] * 8, completions=[fenced(p) for p in proofs], task_id=["tiny.lia"] * 8)
                    for _ in range(6)]
    for rewards in shuffled:
        assert rewards[6] is None  # a harness failure stays unscored
        for g in (0, 4):  # each group keeps exactly its own rewards
            assert sorted(r for r in rewards[g:g + 4] if r is not None) == sorted(
                r for r in true[g:g + 4] if r is not None)
    assert len({tuple(r[:4]) for r in shuffled}) > 1 and any(r != true for r in shuffled)
    with pytest.raises(ValueError, match="positive group size"):
        PermutedReward(control.reward, group=0)


def test_train_grpo_builds_the_control_its_config_names(tiny_suite):
    """``control_within_groups`` reaches the wrapper train_grpo builds (an experiment once set it by patching a
    module attribute, which a module-level import would silently have bypassed), and the log line says which."""
    pytest.importorskip("trl")
    from proofgym.training.grpo import control_reward
    from proofgym.training.grpo_config import ProofGRPOConfig

    said: list[str] = []
    for within, group, words in ((False, None, "across each batch"), (True, 4, "within each group of 4")):
        cfg = ProofGRPOConfig(output_dir="unused", report_to="none", num_generations=4, control_permute_rewards=True,
                              control_within_groups=within, per_device_train_batch_size=8)
        with LocalVerifierPool(1, verifier_factory="tests.test_rewards_trl:ScriptVerifier") as pool:
            wrapper = control_reward(cfg, VerifierReward(load_tasks(tiny_suite), pool), said.append)
        assert wrapper.group == group and words in said[-1]
