"""The reward is computed in one place (:class:`RewardMap`): every scorer of a verdict gives its number."""

from __future__ import annotations

import pytest

from proofgym.envs.episode import Episode
from proofgym.envs.rewards import RewardMap
from proofgym.envs.types import CheckResult, Task, Verdict
from proofgym.training.rewards import VerifierReward, shaped_reward

TASK = Task(id="t", system="coq", context="", statement="Lemma t : True.", reference_proof="Proof. exact I. Qed.")
SHAPED = {Verdict.OK: 1.0, Verdict.FAIL: 0.1, Verdict.TIMEOUT: 0.1, Verdict.ERROR: 0.0, Verdict.CHEATING: -1.0}


def test_the_format_bonus_belongs_to_the_reward_map() -> None:
    rewards = RewardMap(format_bonus=0.1)
    assert {v: rewards(CheckResult(v)) for v in Verdict} == pytest.approx(SHAPED)
    assert rewards(None) is None  # a harness failure: no reward, never 0


@pytest.mark.parametrize("verdict", list(Verdict))
def test_every_scorer_of_a_verdict_gives_the_reward_maps_number(verdict: Verdict) -> None:
    result = CheckResult(verdict)
    trl = VerifierReward([TASK], format_bonus=0.1)
    episode = Episode(TASK, reward_map=trl.reward_map)
    episode.record("p.", result)
    scores = {
        "reward map": RewardMap.from_mapping(None, format_bonus=0.1)(result),
        "TRL reward": trl.reward_of(result),
        "its map": trl.reward_map(result),
        "shaped_reward": shaped_reward(result, RewardMap(), 0.1),
        "episode turn": episode.turns[-1].reward,
    }
    assert scores == pytest.approx(dict.fromkeys(scores, SHAPED[verdict])), scores


def test_a_reward_maps_bonus_is_checked_like_the_trl_rewards() -> None:
    with pytest.raises(ValueError, match="format_bonus 1.0 lifts FAIL/TIMEOUT"):
        RewardMap(format_bonus=1.0).check_policy()
    with pytest.raises(ValueError, match="must order CHEATING"):
        RewardMap.from_mapping({"ERROR": -1}).check_policy()
    RewardMap.from_mapping({"CHEATING": -2}, format_bonus=0.1).check_policy()


def test_an_outcome_keeps_the_verdict_and_writes_its_name_only_in_a_row() -> None:
    from proofgym.training.rewards import HARNESS, Outcome

    outcome = Outcome.from_dict(Outcome(Verdict.CHEATING, -1.0, ("axiom: x",)).to_dict())
    assert outcome.verdict is Verdict.CHEATING and outcome.to_dict()["verdict"] == "CHEATING"
    assert Outcome("OK", 1.0).verdict is Verdict.OK  # a row's name is read as the verdict
    failed = Outcome(None, None, harness_error="verifier: VerifierCrashed: x")
    assert failed.verdict is None and failed.verdict_name == HARNESS and failed.to_dict()["verdict"] is None
