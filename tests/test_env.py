"""WholeProof-v0: the Gymnasium contract, with a fake verifier (mechanics) and with real Coq."""

from __future__ import annotations

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import proofgym  # noqa: F401 - registers the ids
from proofgym.envs.types import CheckResult, Task, Verdict
from tests.conftest import requires_coq

TASKS = [
    {"id": f"fake.{i}", "system": "coq", "context": "", "statement": f"Lemma l{i} : True.",
     "reference_proof": "exact I.", "category": "P1", "timeout_s": 5}
    for i in range(3)
]


class FakeVerifier:
    """Accepts exactly the text "good"; calls "cheat" cheating. For env mechanics only."""

    system = "coq"

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.closed = False

    def check(self, task: Task, proof: str) -> CheckResult:
        self.calls.append((task.id, proof))
        verdict = {"good": Verdict.OK, "cheat": Verdict.CHEATING}.get(proof, Verdict.FAIL)
        return CheckResult(verdict, ("fake",), ("fake message",))

    def close(self) -> None:
        self.closed = True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def make(**kwargs):
    return gym.make("proofgym/WholeProof-v0", tasks=TASKS, disable_env_checker=True, **kwargs)


def test_registered_with_namespaced_id():
    assert "proofgym/WholeProof-v0" in gym.registry


def test_check_env_passes_with_fake_verifier():
    env = make(verifier=FakeVerifier(), max_attempts=3)
    check_env(env.unwrapped, skip_render_check=True)


def test_reset_picks_task_by_id_and_by_seed():
    env = make(verifier=FakeVerifier())
    obs, info = env.reset(options={"task_id": "fake.2"})
    assert obs["task_id"] == "fake.2" and info["task_id"] == "fake.2"
    picks = [env.reset(seed=s)[0]["task_id"] for s in (1, 2, 3)]
    assert picks == [env.reset(seed=s)[0]["task_id"] for s in (1, 2, 3)]
    with pytest.raises(KeyError, match="unknown task_id"):
        env.reset(options={"task_id": "nope"})


def test_rewards_termination_and_truncation():
    verifier = FakeVerifier()
    env = make(verifier=verifier, max_attempts=2, reward_map={"FAIL": -0.1})
    env.reset(options={"task_id": "fake.0"})
    obs, reward, terminated, truncated, info = env.step("bad")
    assert (reward, terminated, truncated) == (-0.1, False, False)
    assert "Verdict: FAIL" in obs["feedback"] and obs["attempt"] == 1
    assert info["result"].verdict is Verdict.FAIL
    obs, reward, terminated, truncated, info = env.step("bad")
    assert (terminated, truncated) == (False, True)
    env.reset(options={"task_id": "fake.1"})
    _, reward, terminated, _, _ = env.step("good")
    assert reward == 1.0 and terminated
    env.reset(options={"task_id": "fake.1"})
    _, reward, _, _, info = env.step("cheat")
    assert reward == -1.0 and info["verdict"] == "CHEATING"


def test_garbage_action_is_an_observation_not_an_exception():
    env = make(verifier=FakeVerifier())
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(None)
    assert info["verdict"] == "ERROR" and reward == 0.0 and "action must be text" in obs["feedback"]


def test_time_limit_wrapper_truncates():
    env = make(verifier=FakeVerifier(), max_attempts=10, max_episode_steps=2)
    env.reset(seed=0)
    env.step("bad")
    assert env.step("bad")[3] is True


@pytest.mark.prover
@requires_coq
def test_check_env_with_real_coq(tiny_suite):
    env = gym.make("proofgym/WholeProof-v0", tasks=str(tiny_suite), max_attempts=2, disable_env_checker=True)
    try:
        check_env(env.unwrapped, skip_render_check=True)
        obs, _ = env.reset(options={"task_id": "tiny.and_comm"})
        assert "P /\\ Q" in obs["statement"]
        obs, reward, terminated, truncated, info = env.step("Proof. intros [p q]. split. Qed.")
        assert info["verdict"] == "FAIL" and not terminated and obs["feedback"]
        assert info["result"].remaining_goals
        obs, reward, terminated, truncated, info = env.step("Proof. intros [p q]; split; assumption. Qed.")
        assert info["verdict"] == "OK" and reward == 1.0 and terminated
        env.reset(options={"task_id": "tiny.and_comm"})
        _, reward, _, _, info = env.step("Proof. Admitted.")
        assert info["verdict"] == "CHEATING" and reward == -1.0
    finally:
        env.close()
