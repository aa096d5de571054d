"""The training plan (issue 29): steps, curriculum refreshes and evaluation points from data size, world size and
batch shape, computed on CPU for the 8-GPU recipe (no GPU is needed to compute a plan), and checked against the
step count TRL's and transformers' own trainers compute for the same shape.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("trl")

from proofgym.training.common import TrainConfigError, parse_config  # noqa: E402
from proofgym.training.grpo_config import ProofGRPOConfig  # noqa: E402
from proofgym.training.plan import apply_plan, make_plan  # noqa: E402
from proofgym.training.sft_config import ProofSFTConfig  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
STDLIB_TRAIN_TASKS = 281  # coq-stdlib's 351 tasks less the 20% held out (docs/benchmarks.md: the built suite)


def _gpu_config(cls: type, name: str, tmp_path: Path, *flags: str) -> Any:
    off_gpu = ["--use_cpu", "true"] + (["--use_vllm", "false"] if cls is ProofGRPOConfig else [])
    return parse_config(cls, ["--config", str(ROOT / "configs" / "train" / name), "--output_dir", str(tmp_path),
                              *off_gpu, *flags])


def test_the_8_gpu_recipe_is_24_steps_and_its_old_intervals_are_refused_as_never_firing(tmp_path):
    cfg = _gpu_config(ProofGRPOConfig, "grpo_gpu.yaml", tmp_path, "--curriculum_refreshes", "0",
                      "--curriculum_refresh_steps", "50", "--checkpoint_evals", "0")
    plan = make_plan(cfg, STDLIB_TRAIN_TASKS, world_size=8, algo="grpo")
    # 8 GPUs x 8 per device x 4 accumulated = 256 completions = 32 prompts of 8; 281 // 32 = 8 per epoch, 3 epochs
    assert (plan.prompts_per_generation, plan.samples_per_step, plan.steps_per_epoch, plan.total_steps) == \
        (32, 256, 8, 24)
    with pytest.raises(TrainConfigError, match=r"curriculum_refresh_steps: 50 never fires: the plan has 24 "
                                               r"optimizer step.*curriculum_refreshes: N"):
        apply_plan(cfg, plan)
    cfg.curriculum_refresh_steps = 0
    cfg.checkpoint_eval_steps = 100
    with pytest.raises(TrainConfigError, match=r"checkpoint_eval_steps: 100 never fires.*checkpoint_evals: N"):
        apply_plan(cfg, plan)
    cfg.checkpoint_eval_steps = 0
    cfg.save_strategy, cfg.save_steps = "steps", 100
    with pytest.raises(TrainConfigError, match=r"save_steps: 100 never fires.*no checkpoint to resume"):
        apply_plan(cfg, plan)


def test_the_shipped_gpu_recipes_plan_refreshes_and_evaluations_that_fire_on_1_and_8_gpus(tmp_path):
    cfg = _gpu_config(ProofGRPOConfig, "grpo_gpu.yaml", tmp_path)
    plan = apply_plan(cfg, make_plan(cfg, STDLIB_TRAIN_TASKS, world_size=8, algo="grpo"))
    assert (plan.total_steps, plan.refresh_at, plan.eval_at) == (24, (6, 12, 18), (8, 16))
    assert (cfg.curriculum_refresh_steps, cfg.checkpoint_eval_steps) == (6, 8)  # what the callbacks read
    text = plan.describe()
    assert text.startswith("plan: 24 optimizer steps (8 per epoch) on 281 tasks, 8 process(es)")
    assert "25 task(s) left out of each epoch's draw" in text and "after steps 6, 12, 18" in text
    one = _gpu_config(ProofGRPOConfig, "grpo_gpu.yaml", tmp_path)
    plan = apply_plan(one, make_plan(one, STDLIB_TRAIN_TASKS, world_size=1, algo="grpo"))
    assert (plan.prompts_per_generation, plan.total_steps, plan.refresh_at, plan.eval_at) == \
        (4, 210, (53, 106, 159), (70, 140))
    sft = _gpu_config(ProofSFTConfig, "sft_gpu.yaml", tmp_path)
    plan = apply_plan(sft, make_plan(sft, STDLIB_TRAIN_TASKS, world_size=8, algo="sft"))
    # 36 batches of 8 over 8 ranks: 5 each, 3 optimizer steps of 2 per epoch, 3 epochs
    assert (plan.steps_per_epoch, plan.total_steps, plan.eval_at) == (3, 9, (3, 6))


def test_a_split_smaller_than_one_generation_batch_is_refused(tmp_path):
    cfg = _gpu_config(ProofGRPOConfig, "grpo_gpu.yaml", tmp_path)
    with pytest.raises(TrainConfigError, match="has 20 task.*fewer than the 32 distinct prompts.*no step would run"):
        make_plan(cfg, 20, world_size=8, algo="grpo")


def _rows(tiny_suite: Path, n: int) -> list[dict[str, Any]]:
    from proofgym.envs.tasks.suites import load_tasks
    from proofgym.training.data import grpo_rows

    base = grpo_rows(load_tasks(tiny_suite), context_chars=60)
    return [{**base[i % len(base)], "task_id": f"{base[i % len(base)]['task_id']}#{i}"} for i in range(n)]


@pytest.mark.parametrize("shape", [
    dict(per_device_train_batch_size=4, gradient_accumulation_steps=2, num_generations=2, num_train_epochs=2.0),
    dict(per_device_train_batch_size=6, gradient_accumulation_steps=3, num_generations=3, num_iterations=2,
         num_train_epochs=1.5),
    dict(per_device_train_batch_size=4, gradient_accumulation_steps=1, steps_per_generation=3, num_generations=4),
], ids=["accumulated", "iterations", "steps_per_generation"])
def test_the_grpo_plan_has_the_step_count_trl_computes(tmp_path, tiny_model, tiny_suite, shape):
    from proofgym.training.data import to_dataset
    from proofgym.training.grpo_trainer import ProofGRPOTrainer

    cfg = ProofGRPOConfig(model_name_or_path=str(tiny_model), suite=str(tiny_suite), output_dir=str(tmp_path),
                          report_to="none", max_completion_length=8, save_strategy="no", **shape)
    rows = _rows(tiny_suite, 37)
    trainer = ProofGRPOTrainer(model=str(tiny_model), reward_funcs=[lambda completions, **_: [0.0] * len(completions)],
                               args=cfg, train_dataset=to_dataset(rows))
    trl_steps = trainer.set_initial_training_values(cfg, trainer.get_train_dataloader())[-1]
    assert make_plan(cfg, len(rows), world_size=1, algo="grpo").total_steps == trl_steps


def test_the_sft_plan_has_the_step_count_transformers_computes(tmp_path, tiny_model, tiny_suite):
    from trl import SFTTrainer

    from proofgym.envs.tasks.suites import load_tasks
    from proofgym.training.data import sft_rows, to_dataset

    cfg = ProofSFTConfig(model_name_or_path=str(tiny_model), suite=str(tiny_suite), output_dir=str(tmp_path),
                         report_to="none", per_device_train_batch_size=4, gradient_accumulation_steps=3,
                         num_train_epochs=2.5, save_strategy="no")
    base = sft_rows(load_tasks(tiny_suite), context_chars=60)
    rows = [base[i % len(base)] for i in range(29)]
    trainer = SFTTrainer(model=str(tiny_model), args=cfg, train_dataset=to_dataset(rows))
    steps = trainer.set_initial_training_values(cfg, trainer.get_train_dataloader())[-1]
    assert make_plan(cfg, len(rows), world_size=1, algo="sft").total_steps == steps


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    from proofgym.agents.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def test_the_vllm_recipes_cap_the_engine_for_what_the_run_sends(tmp_path):
    from proofgym.training.plan import check_vllm_caps, vllm_max_num_seqs

    cfg = _gpu_config(ProofGRPOConfig, "grpo_gpu.yaml", tmp_path)
    cfg.use_vllm = True  # after loading: TRL checks that vLLM is installed when the flag is set
    assert vllm_max_num_seqs(cfg) == 32 and cfg.curriculum_batch_size <= 32
    assert cfg.vllm_enable_sleep_mode is False  # every generate would re-push the weights
    check_vllm_caps(cfg, longest_prompt=1000)
    repair = _gpu_config(ProofGRPOConfig, "grpo_repair_gpu.yaml", tmp_path)
    repair.use_vllm = True
    check_vllm_caps(repair, longest_prompt=1000)  # 1000 + 3 x 1024 + 2 x 1500 = 7072 <= 8192
    with pytest.raises(TrainConfigError, match=r"vllm_max_model_length is 8192, below.*at least 8272"):
        check_vllm_caps(repair, longest_prompt=2200)
    cfg.vllm_max_model_length = None
    with pytest.raises(TrainConfigError, match=r"vllm_max_model_length is not set.*whole context.*at least 2024"):
        check_vllm_caps(cfg, longest_prompt=1000)
    cfg.vllm_max_model_length, cfg.curriculum_batch_size = 4096, 64
    with pytest.raises(TrainConfigError, match=r"curriculum_batch_size 64 is above the 32 sequences"):
        check_vllm_caps(cfg, longest_prompt=1000)
    cfg.vllm_mode = "server"  # the server's own flags size it
    check_vllm_caps(cfg, longest_prompt=1000)
