"""HOL Light through the trainer adapters: TRL's reward call on the spec, and OpenEnv's client on the env.

The real HOL Light verifier is the run-wide ``hol`` server (tests/conftest.py; this file is in its
``HOL_SERVER_FILES``, so under xdist it runs in the worker that has the server loaded already). No suite
of HOL Light tasks is packaged (``proofgym build`` makes them), so the tasks are written here.
"""

from __future__ import annotations

import math

import pytest

from proofgym.envs.types import Task
from proofgym.envs.verifiers.pool.inprocess import InProcessPool
from proofgym.training.integrations.trl_spec import ProofgymSpec
from tests.integrations_common import FakeBrokenVerifier
from tests.test_integrations_trl import _trainer, trl_rewards

TASKS = [Task(id="hol.test.add_0", system="hol_light", context="", statement="`!n. n + 0 = n`", reference_proof="ARITH_TAC",
              timeout_s=60.0),
         Task(id="hol.test.le_refl", system="hol_light", context="", statement="`!n. n <= n`", reference_proof="ARITH_TAC",
              timeout_s=60.0)]
TASK = "hol.test.add_0"
OK_REPLY = "```ocaml\nARITH_TAC\n```"
FAIL_REPLY = "```ocaml\nREFL_TAC\n```"  # n + 0 = n is not syntactically reflexive
CHEAT_REPLY = "```ocaml\nCHEAT_TAC\n```"


@pytest.mark.prover
def test_trls_reward_call_scores_hol_light_with_the_real_prover(tmp_path, hol):
    with InProcessPool({"hol_light": hol}) as pool, ProofgymSpec(TASKS, pool=pool) as spec:
        rewards = trl_rewards(_trainer(tmp_path, spec), spec, TASK, [OK_REPLY, FAIL_REPLY, CHEAT_REPLY])
        verdicts = [o.verdict for o in spec.scorer.reward.last_outcomes]
    assert (rewards, verdicts) == ([1.0, 0.0, -1.0], ["OK", "FAIL", "CHEATING"])


def test_trls_reward_call_masks_a_hol_light_harness_failure(tmp_path):
    with InProcessPool({"hol_light": FakeBrokenVerifier("hol_light")}) as pool, ProofgymSpec(TASKS, pool=pool) as spec:
        (reward,) = trl_rewards(_trainer(tmp_path, spec), spec, TASK, [OK_REPLY])
        assert spec.scorer.reward.last_outcomes[0].harness_error == \
            "verifier: VerifierCrashed: fake: the hol_light prover died"
    assert math.isnan(reward)


@pytest.mark.prover
def test_openenvs_client_repairs_and_catches_a_cheat_in_hol_light(hol):
    pytest.importorskip("openenv.core", reason="pip install 'proofgym[openenv]'")
    from openenv.core import GenericEnvClient

    from proofgym.training.integrations.openenv_env import make_app
    from tests.test_integrations_openenv import serving

    with InProcessPool({"hol_light": hol}) as pool, serving(make_app(TASKS, pool=pool)) as url, \
            GenericEnvClient(base_url=url).sync() as env:
        env.reset(task_id=TASK)
        steps = [env.step({"proof": reply}) for reply in (FAIL_REPLY, OK_REPLY)]
        env.reset(task_id=TASK)
        steps.append(env.step({"proof": CHEAT_REPLY}))
    assert [(s.observation["verdict"], s.reward, s.done) for s in steps] == [
        ("FAIL", 0.0, False), ("OK", 1.0, True), ("CHEATING", -1.0, True)]
    assert steps[0].observation["prompt"][-1]["role"] == "user"  # the feedback turn to repair with


def test_a_hol_light_harness_failure_is_no_reward_over_openenv():
    pytest.importorskip("openenv.core", reason="pip install 'proofgym[openenv]'")
    from openenv.core import GenericEnvClient

    from proofgym.training.integrations.openenv_env import make_app
    from tests.test_integrations_openenv import serving

    with InProcessPool({"hol_light": FakeBrokenVerifier("hol_light")}) as pool, \
            serving(make_app(TASKS, pool=pool)) as url, GenericEnvClient(base_url=url).sync() as env:
        env.reset(task_id=TASK)
        broken = env.step({"proof": OK_REPLY})
    assert (broken.reward, broken.done, broken.observation["verdict"]) == (None, True, None)


@pytest.mark.prover
def test_trls_tactic_tool_proves_a_hol_light_goal_step_by_step(tmp_path, hol):
    """Tactic-v0 on HOL Light through the tool TRL found on the env it pooled (the Coq test runs TRL's whole loop)."""
    with ProofgymSpec(TASKS, tactics=True, tactic_verifier=hol) as spec:
        trainer = _trainer(tmp_path, spec, max_completion_length=64)
        env, apply_tactic = trainer._environment_pool[None][0], trainer._env_tools[None][0]
        row = next(r for r in spec.train_dataset if r["task_id"] == TASK)
        assert "?- `!n. n + 0 = n`" in env.reset(**row)
        root = env.session.observation["state_id"]
        replies = [apply_tactic(t) for t in ("GEN_TAC", "INDUCT_TAC", "CHEAT_TAC", f"@{root} INDUCT_TAC", "ARITH_TAC",
                                             "ARITH_TAC")]
        trainer.environments = [env]
        rewards = trainer._calculate_rewards([dict(row)], [row["prompt"]],
                                             [[{"role": "assistant", "content": "Proved."}]], [[1]])
        verdict = env.session.verdict  # the whole-proof check's, once no goal was left
    assert "the tactic failed" in replies[1]  # HOL Light's error on INDUCT_TAC after GEN_TAC, the state unchanged
    assert replies[-1].startswith("Proof complete") and verdict == "OK"
    assert rewards[0, 0].item() == 0.0  # the cheat tried (-1) and the proof (1): the episode's return
