"""The check_proof tool environment (TRL environment_factory)."""

from __future__ import annotations

from pathlib import Path

import pytest

from proofgym.envs.tasks.suites import load_tasks
from proofgym.envs.verifiers.pool import LocalVerifierPool
from proofgym.training.environment import CheckProofEnv, environment_factory
from proofgym.training.rewards import completion_text
from tests.conftest import requires_coq


def test_the_answer_is_the_last_assistant_turn_not_a_tool_reply():
    conversation = [{"role": "assistant", "content": "", "tool_calls": [{"name": "check_proof"}]},
                    {"role": "tool", "content": "Verdict: FAIL"},
                    {"role": "assistant", "content": "```coq\nProof. lia. Qed.\n```"},
                    {"role": "tool", "content": "Verdict: OK"}]
    assert completion_text(conversation) == "```coq\nProof. lia. Qed.\n```"


def test_the_tool_reports_verdicts_and_harness_failures_and_limits_calls(tiny_suite):
    tasks = {t.id: t for t in load_tasks(tiny_suite)}
    with LocalVerifierPool(1, verifier_factory="tests.test_rewards_trl:ScriptVerifier") as pool:
        env = environment_factory(tasks, pool, max_calls=3)()
        assert isinstance(env, CheckProofEnv)
        assert env.check_proof("ok").startswith("No task")
        assert env.reset(task_id="tiny.lia", prompt=[], system="coq") is None
        assert env.check_proof("ok").startswith("Verdict: OK")
        assert "checker itself failed" in env.check_proof("crash")
        assert env.check_proof("cheat").startswith("Verdict: CHEATING")
        assert env.check_proof("ok").startswith("No more checks")
        assert env.verdicts == ["OK", None, "CHEATING"]
        env.reset(task_id="tiny.and_comm")
        assert env.calls == 0 and env.verdicts == []


@requires_coq
@pytest.mark.prover
def test_the_tool_checks_with_real_coq(tiny_suite):
    tasks = {t.id: t for t in load_tasks(tiny_suite)}
    with LocalVerifierPool(1) as pool:
        env = CheckProofEnv(tasks, pool)
        env.reset(task_id="tiny.lia")
        assert env.check_proof("Proof. lia. Qed.").startswith("Verdict: OK")
        assert env.check_proof("Proof. reflexivity. Qed.").startswith("Verdict: FAIL")


@pytest.mark.slow
@pytest.mark.prover
@requires_coq
def test_grpo_runs_with_the_tool_environment_and_a_qwen3_template(tmp_path, tiny_suite):
    trl = pytest.importorskip("trl")
    from proofgym.agents.tiny_model import build_tiny_model
    from proofgym.training.grpo import train_grpo
    from proofgym.training.grpo_config import ProofGRPOConfig

    template = Path(trl.__file__).parent / "chat_templates" / "qwen3.jinja"
    model = build_tiny_model(tmp_path / "model", seed=0)
    cfg = ProofGRPOConfig(model_name_or_path=str(model), suite=str(tiny_suite), output_dir=str(tmp_path / "run"),
                          report_to="none", max_steps=1, per_device_train_batch_size=4, num_generations=2,
                          max_completion_length=16, torch_threads=1, prompt_context_chars=80, verifier_workers=1,
                          checkpoint_eval_at_end=False, save_strategy="no", tool_env=True,
                          chat_template_path=str(template))
    result = train_grpo(cfg)
    assert result.global_step == 1
    assert result.reward_totals["samples"] == 4
    assert (tmp_path / "run" / "chat_template.jinja").read_text() == template.read_text()  # eval uses it too
