"""Vector envs: ``gymnasium.vector.AsyncVectorEnv`` over proofgym envs, with small pickles.

AsyncVectorEnv pickles every sub-env's spaces and each step's observations and infos; a
full-Unicode ``Text`` charset alone pickles to 44 MB, so sizes are asserted here.
proofgym's text spaces have no shared-memory layout: use ``shared_memory=False``.
"""

from __future__ import annotations

import pickle

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AsyncVectorEnv, SyncVectorEnv

import proofgym  # noqa: F401 - registers the envs
from proofgym.envs.verifiers.pool import LocalVerifierPool
from proofgym.envs.verifiers.service import ServiceConfig, VerifierService
from proofgym.envs.verifiers.service.client import ServiceVerifier
from tests.conftest import requires_coq
from tests.test_pool import FakeVerifier, fake_task

#: Far above what the spaces need (~2 KB), far below what a Unicode charset costs (44 MB).
MAX_SPACE_PICKLE = 16 * 1024


@pytest.mark.parametrize("env_id", ["proofgym/WholeProof-v0", "proofgym/Tactic-v0"])
def test_spaces_pickle_small(tiny_suite, env_id):
    env = gym.make(env_id, tasks=str(tiny_suite))  # no prover starts before reset
    try:
        for space in (env.observation_space, env.action_space):
            blob = pickle.dumps(space)
            assert len(blob) < MAX_SPACE_PICKLE, (env_id, len(blob))
            assert pickle.loads(blob) == space
    finally:
        env.close()


def _fake_env_fn(url: str):
    tasks = [fake_task(i).to_dict() for i in range(3)]
    return lambda: gym.make("proofgym/WholeProof-v0", tasks=tasks, verifier=ServiceVerifier(url), max_attempts=2)


def test_async_vector_envs_share_one_pool_through_the_service():
    with LocalVerifierPool(2, verifier_factory=FakeVerifier) as pool, \
            VerifierService(pool, ServiceConfig(port=0)) as service:
        envs = AsyncVectorEnv([_fake_env_fn(service.url) for _ in range(3)], shared_memory=False)
        try:
            obs, _ = envs.reset(seed=0, options={"task_id": "fake.1"})
            assert list(obs["task_id"]) == ["fake.1"] * 3
            obs, reward, terminated, truncated, info = envs.step(["ok", "fail", "cheat"])
            assert list(reward) == [1.0, 0.0, -1.0]
            assert list(terminated) == [True, False, False] and not truncated.any()
            assert list(info["verdict"]) == ["OK", "FAIL", "CHEATING"]
            assert "Verdict: FAIL" in obs["feedback"][1]
            assert len(pickle.dumps(obs)) < 8 * 1024
        finally:
            envs.close()
        assert pool.stats()["completed"] == 3  # every sub-env checked on the one shared pool


def test_sync_vector_env_over_a_pool_verifier():
    with LocalVerifierPool(1, verifier_factory=FakeVerifier) as pool:
        tasks = [fake_task(i).to_dict() for i in range(2)]
        envs = SyncVectorEnv([lambda: gym.make("proofgym/WholeProof-v0", tasks=tasks,
                                               verifier=pool.as_verifier("coq")) for _ in range(2)])
        envs.reset(seed=1)
        _, reward, *_ = envs.step(["ok", "ok"])
        assert np.array_equal(reward, [1.0, 1.0])
        envs.close()


# ---------------------------------------------------------------------------------------------
# real Coq


@pytest.mark.prover
@requires_coq
def test_async_vector_whole_proof_on_real_coq(tiny_suite):
    envs = AsyncVectorEnv([lambda: gym.make("proofgym/WholeProof-v0", tasks=str(tiny_suite), max_attempts=2)] * 2,
                          shared_memory=False)
    try:
        assert len(pickle.dumps(envs.single_observation_space)) < MAX_SPACE_PICKLE
        obs, _ = envs.reset(seed=0, options={"task_id": "tiny.lia"})
        assert len(pickle.dumps(obs)) < 8 * 1024
        obs, reward, terminated, truncated, info = envs.step(["Proof. lia. Qed.", "Proof. Admitted."])
        assert list(info["verdict"]) == ["OK", "CHEATING"]
        assert list(reward) == [1.0, -1.0] and list(terminated) == [True, False] and not truncated.any()
        assert "Verdict: CHEATING" in obs["feedback"][1]
        _, reward, _, truncated, info = envs.step(["Proof. lia. Qed.", "Proof. lia. Qed."])
        assert info["verdict"][1] == "OK" and reward[1] == 1.0  # env 0 auto-reset meanwhile
    finally:
        envs.close()


@pytest.mark.prover
@requires_coq
def test_async_vector_tactic_on_real_coq(tiny_suite):
    envs = AsyncVectorEnv([lambda: gym.make("proofgym/Tactic-v0", tasks=str(tiny_suite), max_steps=5)] * 2,
                          shared_memory=False)
    try:
        obs, _ = envs.reset(seed=0, options={"task_id": "tiny.and_comm"})
        assert all("P /\\ Q -> Q /\\ P" in g for g in obs["goals"])
        assert len(pickle.dumps(obs)) < 8 * 1024
        obs, reward, terminated, _, info = envs.step(["intros [p q]; split; assumption.", "intros [p q]."])
        assert list(terminated) == [True, False] and reward[0] == 1.0 and info["verdict"][0] == "OK"
        assert "Q /\\ P" in obs["goals"][1]
        _, reward, terminated, _, info = envs.step(["auto.", "split; assumption."])
        assert terminated[1] and reward[1] == 1.0
    finally:
        envs.close()
