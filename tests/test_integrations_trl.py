"""The TRL spec (``training/integrations/trl_spec.py``) through TRL's own ``GRPOTrainer``.

A scripted policy's completions go through ``GRPOTrainer._calculate_rewards`` (the call TRL makes
every step, None -> NaN included) and its tool env is the trainer's own ``environments`` instance,
against the real Coq verifier on the packaged ``coq-tiny`` suite.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from proofgym.envs.verifiers.pool.inprocess import InProcessPool
from proofgym.training.integrations.trl_spec import ProofgymSpec
from tests.conftest import requires_coq
from tests.integrations_common import (
    CHEAT_REPLY,
    DAFNY_CHEAT,
    DAFNY_FAIL,
    DAFNY_OK,
    DAFNY_TASK,
    FAIL_REPLY,
    OK_REPLY,
    TASK,
    FakeBrokenVerifier,
)


def test_the_spec_has_trls_three_properties_from_a_suite_name():
    with ProofgymSpec("coq-tiny", pool=InProcessPool({"coq": FakeBrokenVerifier()})) as spec:
        rows = spec.train_dataset
        assert len(rows) == 5 and set(rows.column_names) == {"prompt", "task_id", "system", "category"}
        assert rows[0]["prompt"][-1]["role"] == "user"
        assert spec.environment_factory is None  # tools=False: one-turn answers
        assert [f.__name__ for f in spec.reward_funcs] == ["verifier"]


def _trainer(tmp_path: Path, spec: ProofgymSpec, **config: Any) -> Any:
    trl = pytest.importorskip("trl")
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from proofgym.agents.tiny_model import build_tiny_model

    model = build_tiny_model(tmp_path / "model", seed=0)
    template = Path(trl.__file__).parent / "chat_templates" / "qwen3.jinja"  # a template TRL can call tools with
    tokenizer = AutoTokenizer.from_pretrained(model)
    tokenizer.chat_template = template.read_text()
    args = GRPOConfig(output_dir=str(tmp_path / "run"), report_to="none", per_device_train_batch_size=2,
                      num_generations=2, use_cpu=True, save_strategy="no",
                      **{"max_completion_length": 8, **config})
    return GRPOTrainer(model=str(model), args=args, processing_class=tokenizer, train_dataset=spec.train_dataset,
                       environment_factory=spec.environment_factory, rollout_func=spec.rollout_func,
                       reward_funcs=spec.reward_funcs)


@requires_coq
@pytest.mark.prover
def test_trls_reward_call_scores_ok_fail_and_cheating_with_real_coq(tmp_path, coq_verifier):
    with InProcessPool({"coq": coq_verifier}) as pool, ProofgymSpec("coq-tiny", pool=pool, tools=True) as spec:
        trainer = _trainer(tmp_path, spec)
        row = next(r for r in spec.train_dataset if r["task_id"] == TASK)
        replies = [OK_REPLY, FAIL_REPLY, CHEAT_REPLY]
        inputs = [dict(row) for _ in replies]
        completions = [[{"role": "assistant", "content": text}] for text in replies]
        rewards = trainer._calculate_rewards(inputs, [row["prompt"]] * 3, completions, [[1]] * 3)
        assert rewards[:, 0].tolist() == [1.0, 0.0, -1.0]

        # the env TRL made and probed at init (its pooled instance) and the tool TRL found on it
        env = trainer._environment_pool[None][0]
        check_proof = next(tool for tool in trainer._env_tools[None] if tool.__name__ == "check_proof")
        env.reset(**row)
        assert check_proof("Proof. reflexivity. Qed.").startswith("Verdict: FAIL")
        assert check_proof("Proof. lia. Qed.").startswith("Verdict: OK")
        assert env.verdicts == ["FAIL", "OK"]


@requires_coq
@pytest.mark.prover
def test_trls_generation_step_runs_repair_episodes_through_the_specs_rollout(tmp_path, coq_verifier):
    with InProcessPool({"coq": coq_verifier}) as pool, ProofgymSpec("coq-tiny", pool=pool, max_turns=2) as spec:
        trainer = _trainer(tmp_path, spec)
        tokenizer = trainer.processing_class
        script = iter([FAIL_REPLY, OK_REPLY])  # turn 1 of both episodes, then turn 2 (after the feedback)

        def scripted_policy(prompt_ids: list[list[int]], max_new_tokens: int) -> tuple[list[list[int]], None]:
            reply = next(script)
            return [tokenizer(reply, add_special_tokens=False)["input_ids"] for _ in prompt_ids], None

        spec.rollout_func.generator = scripted_policy  # the policy's turns; TRL calls the rollout and the reward
        row = next(r for r in spec.train_dataset if r["task_id"] == TASK)
        out = trainer._generate_and_score_completions([dict(row), dict(row)])
        outcomes = spec.scorer.reward.last_outcomes
    assert [(o.verdict, o.turns, o.reward) for o in outcomes] == [("OK", 2, 1.0), ("OK", 2, 1.0)]
    # the verifier's feedback between the two replies is in the completion but out of the loss (TRL's tool_mask)
    kept = out["completion_mask"].bool()
    assert bool((kept & out["tool_mask"].eq(0)).any())


def test_trls_reward_call_masks_a_harness_failure(tmp_path):
    with InProcessPool({"coq": FakeBrokenVerifier()}) as pool, ProofgymSpec("coq-tiny", pool=pool) as spec:
        trainer = _trainer(tmp_path, spec)
        row = next(r for r in spec.train_dataset if r["task_id"] == TASK)
        rewards = trainer._calculate_rewards([dict(row)], [row["prompt"]],
                                             [[{"role": "assistant", "content": OK_REPLY}]], [[1]])
        assert math.isnan(rewards[0, 0].item())  # TRL's "no reward": left out of the advantage, never 0
        assert spec.scorer.reward.last_outcomes[0].harness_error == "verifier: VerifierCrashed: fake: coqidetop died"


def test_the_spec_closes_only_the_pool_it_made():
    given = InProcessPool({"coq": FakeBrokenVerifier()})
    with ProofgymSpec("coq-tiny", pool=given) as spec:
        assert spec.reward_funcs[0].pool is given
    assert not given.closed
    given.close()


@requires_coq
@pytest.mark.prover
@pytest.mark.slow
@pytest.mark.train_smoke  # the page's promise is kept on every `make test` (one GRPO step, about 20 s)
def test_the_pages_example_trains_one_step(tmp_path, monkeypatch):
    pytest.importorskip("trl")
    from proofgym.agents.tiny_model import build_tiny_model
    from tests.test_integrations_docs import doc_example

    model = build_tiny_model(tmp_path / "model", seed=0)
    code = doc_example("trl").replace('"Qwen/Qwen3-0.6B"', repr(str(model)))
    code = code.replace('report_to="none"', 'report_to="none", use_cpu=True')  # this machine has no GPU
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {}
    exec(compile(code, "docs/integrations/trl.md", "exec"), namespace)  # noqa: S102 - the page's own example
    assert namespace["trainer"].state.global_step == 1
    assert namespace["spec"].scorer.reward.totals["samples"] == 2


def trl_rewards(trainer: Any, spec: ProofgymSpec, task_id: str, replies: list[str]) -> list[float]:
    """The rewards TRL's own reward call gives ``replies`` to the row of ``task_id`` (NaN: no reward)."""
    row = next(r for r in spec.train_dataset if r["task_id"] == task_id)
    completions = [[{"role": "assistant", "content": text}] for text in replies]
    rewards = trainer._calculate_rewards([dict(row) for _ in replies], [row["prompt"]] * len(replies), completions,
                                         [[1]] * len(replies))
    return rewards[:, 0].tolist()


@pytest.mark.prover
def test_trls_reward_call_scores_dafny_with_the_real_verifier(tmp_path):
    from tests.test_dafny_common import dafny_verifier

    with InProcessPool({"dafny": dafny_verifier()}) as pool, ProofgymSpec("dafny-nl", pool=pool) as spec:
        rewards = trl_rewards(_trainer(tmp_path, spec), spec, DAFNY_TASK, [DAFNY_OK, DAFNY_FAIL, DAFNY_CHEAT])
        verdicts = [o.verdict for o in spec.scorer.reward.last_outcomes]
    assert (rewards, verdicts) == ([1.0, 0.0, -1.0], ["OK", "FAIL", "CHEATING"])


def test_trls_reward_call_masks_a_dafny_harness_failure(tmp_path):
    with InProcessPool({"dafny": FakeBrokenVerifier("dafny")}) as pool, ProofgymSpec("dafny-nl", pool=pool) as spec:
        (reward,) = trl_rewards(_trainer(tmp_path, spec), spec, DAFNY_TASK, [DAFNY_OK])
    assert math.isnan(reward)


def tool_call(tactic: str) -> str:
    """A Qwen3 tool call of ``apply_tactic`` (the template TRL parses tool calls with here)."""
    return f'<tool_call>\n{{"name": "apply_tactic", "arguments": {{"tactic": {json.dumps(tactic)}}}}}\n</tool_call><|im_end|>'


@requires_coq
@pytest.mark.prover
def test_trls_tool_loop_proves_a_task_tactic_by_tactic_with_real_coq(tmp_path, coq_verifier):
    with ProofgymSpec("coq-tiny", tactics=True, tactic_verifier=coq_verifier) as spec:
        assert spec.reward_funcs == []  # the env owns the reward (get_reward), which TRL adds as a reward source
        trainer = _trainer(tmp_path, spec, max_completion_length=1024)
        tokenizer = trainer.processing_class
        # the policy's turns for both rollouts of the task: a tactic Coq rejects, two that prove it, then the answer
        script = iter([tool_call("reflexivity."), tool_call("intros."), tool_call("lia."), "Proved.<|im_end|>"])

        def scripted_policy(prompt_ids: list[list[int]], *args: Any, **kwargs: Any) -> tuple[list[list[int]], None]:
            reply = next(script)
            return [tokenizer(reply, add_special_tokens=False)["input_ids"] for _ in prompt_ids], None

        trainer._generate_single_turn = scripted_policy  # TRL's tool loop calls the tool; TRL's reward call scores
        row = next(r for r in spec.train_dataset if r["task_id"] == TASK)
        out = trainer._generate_and_score_completions([dict(row), dict(row)])
        sessions = [env.session for env in trainer.environments]  # the rollouts' envs, from TRL's pool
        assert [s.verdict for s in sessions] == ["OK", "OK"]
        assert [s.episode_return for s in sessions] == [1.0, 1.0]
        text = tokenizer.decode(out["completion_ids"][0][out["completion_mask"][0].bool()])
        assert "Unable to unify" in text  # the prover's error on the bad tactic came back as the tool's reply
        assert "Proof complete" in text
        mode = "train" if trainer.model.training else "eval"  # where TRL logs this call's rewards
        assert trainer._metrics[mode]["rewards/TacticToolEnv/mean"] == [1.0]  # TRL's reward call: get_reward


def test_a_broken_prover_in_a_tactic_rollout_is_no_reward_in_trls_reward_call(tmp_path):
    with ProofgymSpec("coq-tiny", tactics=True, tactic_verifier=FakeBrokenVerifier()) as spec:
        trainer = _trainer(tmp_path, spec, max_completion_length=64)
        env, apply_tactic = trainer._environment_pool[None][0], trainer._env_tools[None][0]
        row = next(r for r in spec.train_dataset if r["task_id"] == TASK)
        assert "fake: coqidetop died" in env.reset(**row)  # the prover broke opening the task
        assert apply_tactic("intros.").startswith("The episode is over")
        trainer.environments = [env]  # what TRL's generation step sets before it scores
        rewards = trainer._calculate_rewards([dict(row)], [row["prompt"]],
                                             [[{"role": "assistant", "content": "Proved."}]], [[1]])
    assert math.isnan(rewards[0, 0].item())  # None from get_reward: TRL's "no reward", never 0
