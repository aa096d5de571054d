"""Supervised fine-tuning on a suite's reference proofs with TRL's ``SFTTrainer``.

The training split's tasks become conversational prompt-completion pairs
(:func:`proofgym.training.data.sft_rows`): the prompt is evaluation's zero-shot prompt
(statement and context), the completion the reference proof in a fenced block; the loss
is on the completion only. LoRA through ``peft`` with ``use_peft: true``.

    proofgym train sft --config configs/train/sft_cpu.yaml [--field value ...]
    accelerate launch --config_file configs/accelerate/single_gpu.yaml -m proofgym.training.sft \\
        --config configs/train/sft_gpu.yaml
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from proofgym.training.common import (
    TrainResult,
    checkpoint_evaluator,
    keep_fp32_masters,
    load_model,
    parse_config,
    peft_config,
    prepare_run,
    run_trainer,
)
from proofgym.training.data import sft_rows, to_dataset
from proofgym.training.distributed import fix_reentrant_checkpointing
from proofgym.training.logging import setup_wandb
from proofgym.training.plan import plan_run
from proofgym.training.sft_config import ProofSFTConfig


def train_sft(cfg: ProofSFTConfig) -> TrainResult:
    """Run SFT as ``cfg`` says: checks first, then training, the final checkpoint and its evaluation."""
    from trl import SFTTrainer

    from proofgym.training.callbacks import GracefulInterrupt, MetricsPrinter, ReleaseHostMemory

    prepared = prepare_run(cfg, needs_verifier=bool(cfg.checkpoint_eval_at_end or cfg.checkpoint_eval_steps
                                                    or cfg.checkpoint_evals or cfg.checkpoint_eval_on_start))
    rows = sft_rows(prepared.train_tasks, context_chars=cfg.prompt_context_chars)
    plan = plan_run(cfg, len(rows), algo="sft")  # sets the evaluation interval the callback reads
    setup_wandb(cfg)
    model, tokenizer = load_model(prepared.model, init_kwargs=cfg.model_init_kwargs,
                                  threads=cfg.torch_threads)
    model = keep_fp32_masters(model, cfg)
    fix_reentrant_checkpointing(cfg, peft=cfg.use_peft)
    evaluator = checkpoint_evaluator(cfg, prepared)
    interrupt = GracefulInterrupt()
    callbacks = [c for c in (evaluator, interrupt, MetricsPrinter(), ReleaseHostMemory()) if c is not None]
    trainer = SFTTrainer(model=model, args=cfg, train_dataset=to_dataset(rows), processing_class=tokenizer,
                         peft_config=peft_config(cfg), callbacks=callbacks)
    return run_trainer(trainer, cfg, evaluator=evaluator, interrupt=interrupt, model_name=prepared.model.name,
                       plan=plan)


def main(argv: Sequence[str] | None = None) -> TrainResult:
    return train_sft(parse_config(ProofSFTConfig, argv))


if __name__ == "__main__":  # pragma: no cover - `accelerate launch -m proofgym.training.sft`
    from proofgym.training.runner import run_main

    sys.exit(run_main("sft", main, sys.argv[1:]))
