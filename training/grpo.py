"""GRPO with verifier rewards, with TRL's ``GRPOTrainer``.

The policy answers the training split's prompts (evaluation's zero-shot prompts); the
real verifier checks each completion on a pool of warm verifier processes
(:class:`~proofgym.training.rewards.VerifierReward`); the reward is the verdict (OK 1,
CHEATING -1, else 0: malformed output is ERROR, 0; a harness failure is ``None`` and left
out). With ``curriculum: true`` a pass-rate curriculum keeps the tasks the current policy
solves sometimes (:mod:`proofgym.training.curriculum`). With ``max_turns > 1``
a :class:`~proofgym.training.rollout.RepairRollout` runs attempt, feedback, retry, with
the feedback tokens masked out of the loss (``env_mask``).

    proofgym train grpo --config configs/train/grpo_cpu.yaml [--field value ...]
    accelerate launch --config_file configs/accelerate/single_gpu.yaml -m proofgym.training.grpo \\
        --config configs/train/grpo_gpu.yaml
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from proofgym.envs.rewards import RewardMap
from proofgym.training.common import (
    PreparedRun,
    TrainConfigError,
    TrainResult,
    checkpoint_evaluator,
    keep_fp32_masters,
    load_model,
    parse_config,
    peft_config,
    prepare_run,
    run_trainer,
)
from proofgym.training.data import grpo_rows, sft_rows, to_dataset
from proofgym.training.distributed import fix_reentrant_checkpointing, refuse_hanging_settings
from proofgym.training.eval_runs import checkpoint_settings, write_checkpoint_settings
from proofgym.training.grpo_config import ProofGRPOConfig
from proofgym.training.logging import setup_wandb
from proofgym.training.plan import check_vllm_caps, plan_run
from proofgym.training.reward_service import reward_backend
from proofgym.training.rewards import PermutedReward, VerifierReward, check_reward_policy
from proofgym.training.rollout import RepairRollout, render_chat, token_ids


def control_reward(cfg: ProofGRPOConfig, reward: VerifierReward, announce: Callable[[str], None]) -> PermutedReward:
    """The negative control's reward (``control_permute_rewards``): shuffled across the batch, or within each
    group with ``control_within_groups`` (the matched-scale control); the log says which."""
    group = cfg.num_generations if cfg.control_within_groups else None
    scope = f"within each group of {group}" if group else "across each batch"
    announce(f"control run: the verifier's rewards are shuffled {scope} (control_permute_rewards"
             + (", control_within_groups)" if group else ")"))
    return PermutedReward(reward, seed=cfg.seed, group=group)


def train_grpo(cfg: ProofGRPOConfig) -> TrainResult:
    """Run GRPO as ``cfg`` says: checks first, then training, the final checkpoint and its evaluation."""
    from proofgym.training.callbacks import (
        GracefulInterrupt,
        MetricsPrinter,
        ReleaseHostMemory,
        TaskPassRateCallback,
        TrainingHealthCallback,
        announce,
    )
    from proofgym.training.curriculum import CurriculumCallback, PassRateCurriculum
    from proofgym.training.grpo_trainer import ProofGRPOTrainer

    try:  # before prepare_run: a reward policy that would teach the wrong thing fails first, without a prover
        reward_map = RewardMap.from_mapping(cfg.verdict_rewards)
        check_reward_policy(reward_map, cfg.format_bonus)
    except (ValueError, TypeError) as exc:
        raise TrainConfigError(f"verdict_rewards/format_bonus: {exc}") from None
    try:  # settings that would hang a multi-process run, before anything starts
        refuse_hanging_settings(cfg)
    except ValueError as exc:
        raise TrainConfigError(str(exc)) from None
    prepared = prepare_run(cfg)
    template = _read_template(cfg.chat_template_path) if cfg.chat_template_path else None
    rows = grpo_rows(prepared.train_tasks, context_chars=cfg.prompt_context_chars)
    plan = plan_run(cfg, len(rows), algo="grpo")  # sets the refresh and evaluation intervals the callbacks read
    setup_wandb(cfg)
    model, tokenizer = load_model(prepared.model, init_kwargs=cfg.model_init_kwargs,
                                  threads=cfg.torch_threads)
    model = keep_fp32_masters(model, cfg)
    if template is not None:
        tokenizer.chat_template = template
    if cfg.use_vllm:  # the engine's caps against the prompts it will get
        check_vllm_caps(cfg, longest_prompt(tokenizer, rows))
    warm: dict[str, Any] = {}
    start = None
    if cfg.warm_start_sft_steps:
        model, warm = sft_warm_start(cfg, prepared, model, tokenizer)
        start = warm["path"]
    fix_reentrant_checkpointing(cfg, peft=cfg.use_peft)
    backend = reward_backend(cfg, prepared.train_tasks)  # a pool per rank, or this node's verifier service
    pool = backend.pool
    try:
        reward = VerifierReward(prepared.train_tasks, pool, reward_map=reward_map, timeout_s=cfg.reward_timeout_s,
                                feedback_chars=cfg.feedback_chars, format_bonus=cfg.format_bonus)
        rollout = None
        if cfg.max_turns > 1:
            rollout = RepairRollout(prepared.train_tasks, pool, max_turns=cfg.max_turns,
                                    turn_discount=cfg.turn_discount, reward_map=reward_map,
                                    feedback_chars=cfg.feedback_chars, context_chars=cfg.prompt_context_chars,
                                    format_bonus=cfg.format_bonus,
                                    generation_chunk=cfg.repair_generation_chunk or None)
        environments = None
        if cfg.tool_env:
            from proofgym.training.environment import environment_factory

            environments = environment_factory(reward.tasks, pool, max_calls=cfg.tool_max_calls,
                                               feedback_chars=cfg.feedback_chars)
        evaluator = checkpoint_evaluator(cfg, prepared, start=start)
        interrupt = GracefulInterrupt()
        pass_rates = TaskPassRateCallback(reward, prepared.train_tasks)
        curriculum = curriculum_callback = None
        if cfg.curriculum:
            curriculum = PassRateCurriculum([r["task_id"] for r in rows], k=cfg.curriculum_k,
                                            refresh_steps=cfg.curriculum_refresh_steps)
            # its own checker on the same pool: estimates stay out of the reward's totals and per-task counts
            checker = VerifierReward(prepared.train_tasks, pool, reward_map=reward_map, timeout_s=cfg.reward_timeout_s)
            curriculum_callback = CurriculumCallback(
                curriculum, prepared.train_tasks, checker, context_chars=cfg.prompt_context_chars,
                batch_size=cfg.curriculum_batch_size, max_new_tokens=cfg.curriculum_max_tokens or None,
                on_estimate=lambda step, counts: pass_rates.add(step, counts, "curriculum"))
        callbacks = [c for c in (curriculum_callback, evaluator, interrupt, MetricsPrinter(), TrainingHealthCallback(),
                                 pass_rates, ReleaseHostMemory()) if c is not None]
        reward_func = backend.wrap(control_reward(cfg, reward, announce) if cfg.control_permute_rewards else reward)
        trainer = ProofGRPOTrainer(model=model, reward_funcs=[reward_func], args=cfg, train_dataset=to_dataset(rows),
                                   processing_class=tokenizer, peft_config=peft_config(cfg), callbacks=callbacks,
                                   rollout_func=rollout, environment_factory=environments, curriculum=curriculum)
        if curriculum_callback is not None:
            curriculum_callback.bind(trainer)
        result = run_trainer(trainer, cfg, evaluator=evaluator, interrupt=interrupt, reward=reward,
                             model_name=prepared.model.name, curriculum=curriculum, warm_start=warm, plan=plan)
    finally:
        backend.close()
    return result


def sft_warm_start(cfg: ProofGRPOConfig, prepared: PreparedRun, model: Any, tokenizer: Any) -> tuple[Any, dict]:
    """``cfg.warm_start_sft_steps`` SFT steps on the training split's reference proofs, in memory.

    The model goes on to GRPO without a reload; it is saved once (main process), to
    ``<output_dir>/warm-start``, for the step-0 evaluation and as an artifact. With ``use_peft``
    the warm start trains a LoRA adapter and merges it (GRPO then adds its own adapter).

    Returns:
        The model and ``{"path", "steps", "loss" (per step), "seconds"}``.
    """

    from trl import SFTTrainer

    from proofgym.training.callbacks import (
        MetricsPrinter,
        ReleaseHostMemory,
        announce,
        release_host_memory,
        save_model,
    )
    from proofgym.training.sft_config import ProofSFTConfig

    begin = time.monotonic()
    out = Path(cfg.output_dir) / "warm-start"
    announce(f"SFT warm start: {cfg.warm_start_sft_steps} step(s) on {len(prepared.train_tasks)} reference proofs")
    args = ProofSFTConfig(
        model_name_or_path=prepared.model.location, suite=cfg.suite, output_dir=str(out),
        run_name=f"{cfg.run_name}__warm-start", report_to="none", save_strategy="no", logging_steps=1,
        max_steps=cfg.warm_start_sft_steps, learning_rate=cfg.warm_start_sft_learning_rate,
        per_device_train_batch_size=cfg.warm_start_sft_batch_size, max_length=cfg.warm_start_sft_max_length,
        seed=cfg.seed, use_cpu=cfg.use_cpu, bf16=cfg.bf16, torch_threads=cfg.torch_threads,
        checkpoint_eval_at_end=False, use_peft=cfg.use_peft, lora_r=cfg.lora_r, lora_alpha=cfg.lora_alpha,
        lora_dropout=cfg.lora_dropout, lora_target_modules=cfg.lora_target_modules,
        deepspeed=cfg.deepspeed)
    rows = sft_rows(prepared.train_tasks, context_chars=cfg.prompt_context_chars)
    trainer = SFTTrainer(model=model, args=args, train_dataset=to_dataset(rows), processing_class=tokenizer,
                         peft_config=peft_config(args), callbacks=[MetricsPrinter(), ReleaseHostMemory()])
    trainer.train()
    model = trainer.accelerator.unwrap_model(trainer.model)
    if hasattr(model, "merge_and_unload"):
        model = model.merge_and_unload()
    if trainer.is_world_process_zero():
        save_model(model, tokenizer, out)
        write_checkpoint_settings(out, checkpoint_settings(cfg))  # the warm start was trained on this prompt
    trainer.accelerator.wait_for_everyone()
    losses = [r["loss"] for r in trainer.state.log_history if "loss" in r]
    steps = trainer.state.global_step
    del trainer  # its optimizer state goes before GRPO's is built; the heap it used goes back to the system
    release_host_memory()
    info = {"path": str(out), "steps": steps, "loss": losses,
            "seconds": round(time.monotonic() - begin, 1)}
    announce(f"SFT warm start done in {info['seconds']:.0f} s: loss {losses[0]:.3f} -> {losses[-1]:.3f}; "
             f"saved to {out}" if losses else f"SFT warm start done; saved to {out}")
    return model, info


def longest_prompt(tokenizer: Any, rows: list[dict[str, Any]]) -> int:
    """Tokens of the longest training prompt, as the policy sees it (chat template, generation prompt)."""
    return max((len(token_ids(tokenizer, render_chat(tokenizer, r["prompt"], generation_prompt=True))) for r in rows),
               default=0)


def _read_template(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise TrainConfigError(f"cannot read chat_template_path {path}: {exc.strerror or exc}") from None


def main(argv: Sequence[str] | None = None) -> TrainResult:
    return train_grpo(parse_config(ProofGRPOConfig, argv))


if __name__ == "__main__":  # pragma: no cover - `accelerate launch -m proofgym.training.grpo`
    from proofgym.training.runner import run_main

    sys.exit(run_main("grpo", main, sys.argv[1:]))
