"""Gymnasium's registry, used fully: every proofgym id registered once, with its TimeLimit, as
nondeterministic, and passing ``check_env`` (fake verifier for the mechanics, real Coq for each id)."""

from __future__ import annotations

import subprocess
import sys
import warnings

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env
from gymnasium.wrappers import TimeLimit

from proofgym.envs import ENV_IDS, register_envs
from tests.conftest import requires_coq
from tests.test_env import TASKS, FakeVerifier

PROOFGYM_IDS = sorted(env_id for env_id in gym.registry if env_id.startswith("proofgym/"))


def test_every_registered_id_has_its_time_limit_and_is_nondeterministic():
    assert PROOFGYM_IDS == sorted(ENV_IDS)
    for env_id in PROOFGYM_IDS:
        spec = gym.spec(env_id)
        assert spec.max_episode_steps == ENV_IDS[env_id][1] and spec.nondeterministic, env_id
        assert isinstance(spec.entry_point, str)  # importing proofgym imports no env module


def test_registration_runs_once():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Gymnasium warns when an id is registered again
        register_envs()
    # a fresh interpreter: importing proofgym registers the ids without a re-registration warning
    proc = subprocess.run([sys.executable, "-W", "error", "-c", "import proofgym, proofgym.envs, gymnasium; "
                           "print(sorted(i for i in gymnasium.registry if i.startswith('proofgym/')))"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(PROOFGYM_IDS)


@pytest.mark.parametrize("env_id", PROOFGYM_IDS)
def test_make_puts_the_time_limit_around_each_id(env_id, tiny_suite):
    env = gym.make(env_id, tasks=str(tiny_suite), disable_env_checker=True)  # no prover starts before reset
    try:
        wrapper = env
        while not isinstance(wrapper, TimeLimit):
            wrapper = wrapper.env
        assert wrapper.spec.max_episode_steps == ENV_IDS[env_id][1]
    finally:
        env.close()


def test_time_limit_truncates_below_the_envs_own_budget():
    env = gym.make("proofgym/WholeProof-v0", tasks=TASKS, verifier=FakeVerifier(), max_attempts=5,
                   max_episode_steps=2, disable_env_checker=True)
    env.reset(options={"task_id": "fake.0"})
    assert env.step("wrong")[3] is False
    assert env.step("wrong")[3] is True  # the TimeLimit, at 2 of the env's 5 attempts


def test_check_env_whole_proof_mechanics_with_a_fake_verifier():
    env = gym.make("proofgym/WholeProof-v0", tasks=TASKS, verifier=FakeVerifier(), max_attempts=3,
                   disable_env_checker=True)
    check_env(env.unwrapped, skip_render_check=True)


@pytest.mark.prover
@requires_coq
@pytest.mark.parametrize("env_id", PROOFGYM_IDS)
def test_check_env_passes_for_every_id_on_real_coq(env_id, tiny_suite):
    env = gym.make(env_id, tasks=str(tiny_suite), disable_env_checker=True)
    try:
        check_env(env.unwrapped, skip_render_check=True)
    finally:
        env.close()
