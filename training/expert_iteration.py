"""Expert iteration: sample, keep the verified proofs, fine-tune on them, repeat.

The algorithm of DeepSeek-Prover V1 and Goedel-Prover, and the baseline GRPO must beat. Each round:

1. sample ``samples_per_task`` attempts at every training task with the current policy
   (``sample_temperature``), and check each on the real verifier pool
   (:func:`~proofgym.training.sampling.sample_and_check`);
2. keep the proofs whose verdict is **OK**, and only those: a CHEATING proof (a hole, an axiom,
   a changed statement) is never kept, nor a FAIL, TIMEOUT, ERROR or harness failure. What is
   kept is the parsed proof the verifier accepted, as the reply in one fenced block (the form
   SFT on reference proofs teaches), at most ``max_proofs_per_task`` distinct ones per task;
3. fine-tune the policy on them with TRL's ``SFTTrainer`` (every proof so far with
   ``accumulate``, else this round's).

It logs, per round, ``expert_iteration/pass_rate`` (OK share of the sampled attempts),
``expert_iteration/solved_tasks``, ``expert_iteration/kept_proofs`` (this round's new ones),
``expert_iteration/train_proofs`` (what the round fine-tunes on) and the verdict counts, to
W&B and to ``<output_dir>/rounds.jsonl``; ``<output_dir>/round-N/kept.jsonl`` holds the SFT rows
of round N. The final model is saved to ``output_dir`` and evaluated on the held-out split
like SFT's and GRPO's.

    proofgym train expert-iteration --config configs/train/expert_iteration_cpu.yaml [--field value ...]
"""

from __future__ import annotations

import copy
import dataclasses
import json
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from proofgym.envs.types import Task
from proofgym.training.common import (
    TrainConfigError,
    TrainResult,
    checkpoint_evaluator,
    keep_fp32_masters,
    load_model,
    make_pool,
    parse_config,
    peft_config,
    prepare_run,
)
from proofgym.training.expert_iteration_config import ProofExpertIterationConfig
from proofgym.training.logging import finish_training_run, log_metrics, setup_wandb
from proofgym.training.sampling import Sample, pass_counts


def kept_proofs(samples: Sequence[Sample], kept: dict[str, list[str]], *, limit: int = 0) -> int:
    """Add the proofs of the OK samples to ``kept`` (``{task_id: [proof, ...]}``); how many were new.

    Only verdict OK counts (never CHEATING); duplicates are dropped, and a task keeps at most
    ``limit`` proofs (0: no limit).
    """
    new = 0
    for sample in samples:
        if not sample.ok or not sample.outcome.proof.strip():
            continue
        proofs = kept.setdefault(sample.task.id, [])
        if sample.outcome.proof in proofs or (limit and len(proofs) >= limit):
            continue
        proofs.append(sample.outcome.proof)
        new += 1
    return new


def sft_rows_of(proofs: dict[str, list[str]], tasks: dict[str, Task], *, context_chars: int) -> list[dict[str, Any]]:
    """SFT prompt-completion rows of the kept proofs: the task's prompt, the proof in one fenced block."""
    from proofgym.agents.prompts.base import fenced, system_info
    from proofgym.training.data import grpo_rows

    rows = []
    for task_id, found in proofs.items():
        task = tasks[task_id]
        base = grpo_rows([task], context_chars=context_chars)[0]
        for proof in found:
            rows.append({**base, "completion": [{"role": "assistant",
                                                 "content": fenced(proof, system_info(task.system).fence)}]})
    return rows


def round_metrics(round_: int, samples: Sequence[Sample], new: int, train_proofs: int) -> dict[str, Any]:
    """The per-round numbers named in the module docstring."""
    counts = pass_counts(samples)
    scored = sum(n for _, n in counts.values())
    ok = sum(o for o, _ in counts.values())
    verdicts = Counter(s.outcome.verdict or "HARNESS_FAILURE" for s in samples)
    return {"expert_iteration/round": round_, "expert_iteration/pass_rate": ok / scored if scored else 0.0,
            "expert_iteration/solved_tasks": sum(o > 0 for o, _ in counts.values()),
            "expert_iteration/tasks": len(counts), "expert_iteration/samples": len(samples),
            "expert_iteration/kept_proofs": new, "expert_iteration/train_proofs": train_proofs,
            **{f"expert_iteration/verdict/{v}": verdicts.get(v, 0)
               for v in ("OK", "FAIL", "CHEATING", "TIMEOUT", "ERROR", "HARNESS_FAILURE")}}


def train_expert_iteration(cfg: ProofExpertIterationConfig) -> TrainResult:
    """Run ``cfg.rounds`` rounds of expert iteration, then save and evaluate the final model."""
    from accelerate import PartialState
    from transformers import GenerationConfig, set_seed
    from trl import SFTTrainer

    from proofgym.training.callbacks import (
        GracefulInterrupt,
        MetricsPrinter,
        ReleaseHostMemory,
        announce,
        save_model,
    )
    from proofgym.training.data import to_dataset
    from proofgym.training.distributed import max_across_ranks, zero_stage
    from proofgym.training.eval_runs import checkpoint_settings, write_checkpoint_settings
    from proofgym.training.rewards import VerifierReward
    from proofgym.training.rollout import ModelGenerator
    from proofgym.training.sampling import sample_and_check

    if zero_stage(cfg) == 3:
        raise TrainConfigError(EI_ZERO3_REFUSAL)
    # the process group `accelerate launch`/torchrun set up, with the config's settings (TrainingArguments sets it
    # up on first use: backend, timeout); one process: rank 0 of 1
    world, rank = cfg.world_size, cfg.process_index
    state = PartialState()
    main_process = rank == 0
    prepared = prepare_run(cfg)
    set_seed(cfg.seed)  # the first round samples before any Trainer seeds torch
    output_dir = Path(cfg.output_dir)
    if main_process:
        output_dir.mkdir(parents=True, exist_ok=True)
    setup_wandb(cfg)
    model, tokenizer = load_model(prepared.model, init_kwargs=cfg.model_init_kwargs,
                                  threads=cfg.torch_threads)
    model = keep_fp32_masters(model, cfg)
    # The first round samples before any Trainer places the model: put it where the Trainer will (args.device is
    # this rank's device, cuda:LOCAL_RANK under DDP), not on cuda:0 for every rank.
    model.to(cfg.device)
    tasks = {t.id: t for t in prepared.train_tasks}
    mine = prepared.train_tasks[rank::world]  # each rank samples its share; the verdicts are gathered below
    evaluator = checkpoint_evaluator(cfg, prepared) if main_process else None
    sampling = GenerationConfig(do_sample=True, temperature=cfg.sample_temperature, top_p=cfg.sample_top_p,
                                top_k=0)
    interrupt = GracefulInterrupt().install()
    kept: dict[str, list[str]] = {}
    history: list[dict[str, Any]] = []
    rounds_path = output_dir / "rounds.jsonl"
    if main_process:
        rounds_path.write_text("", encoding="utf-8")
    step = 0
    stopped = False
    if main_process:
        announce(f"starting {cfg.verifier_workers} verifier worker(s)" + (f" on each of {world} processes, each "
                                                                          f"sampling 1/{world} of the tasks"
                                                                          if world > 1 else ""))
    pool = make_pool(cfg)
    try:
        if evaluator is not None and cfg.checkpoint_eval_on_start:
            # the initial model is evaluated where it is (a copy would be the same weights saved twice), in a
            # process of its own: no rank waits for it (CheckpointEvalCallback.start_evaluation)
            evaluator.start_evaluation(evaluator.start_checkpoint or save_model(model, tokenizer,
                                                                                 output_dir / "round-0"), 0)
        state.wait_for_everyone()  # the other ranks wait for rank 0's save of the initial model, if any
        for round_ in range(1, cfg.rounds + 1):
            start = time.monotonic()
            checker = VerifierReward(prepared.train_tasks, pool)
            model.eval()
            own = sample_and_check(ModelGenerator(model, tokenizer, sampling), tokenizer, mine,
                                   checker, k=cfg.samples_per_task, max_new_tokens=cfg.sample_max_tokens,
                                   batch_size=cfg.sample_batch_size, context_chars=cfg.prompt_context_chars,
                                   progress=f"expert iteration round {round_}: sampling" if main_process else "")
            # every rank gets every rank's samples, in task order: the same kept proofs, the same SFT rows, so
            # the ranks fine-tune on one dataset with one step count (DDP keeps their weights identical)
            samples = gather_samples(own, prepared.train_tasks, world)
            this_round: dict[str, list[str]] = {}
            new = kept_proofs(samples, kept, limit=cfg.max_proofs_per_task)
            kept_proofs(samples, this_round, limit=cfg.max_proofs_per_task)
            rows = sft_rows_of(kept if cfg.accumulate else this_round, tasks, context_chars=cfg.prompt_context_chars)
            metrics = round_metrics(round_, samples, new, len(rows))
            round_dir = output_dir / f"round-{round_}"
            if main_process:
                round_dir.mkdir(parents=True, exist_ok=True)
                (round_dir / "kept.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
                announce(f"round {round_}/{cfg.rounds}: pass rate {100 * metrics['expert_iteration/pass_rate']:.1f}% "
                         f"of {len(samples)} attempts, {metrics['expert_iteration/solved_tasks']} of "
                         f"{len(tasks)} tasks solved, {new} new verified proof(s); fine-tuning on {len(rows)}")
            if rows:
                args = copy.copy(cfg)  # each round's Trainer writes under its own dir (its steps restart at 0)
                args.output_dir = str(round_dir)
                adapted = hasattr(model, "peft_config")  # LoRA is added once, by the first round that trains
                trainer = SFTTrainer(model=model, args=args, train_dataset=to_dataset(rows),
                                     processing_class=tokenizer, peft_config=None if adapted else peft_config(cfg),
                                     callbacks=[interrupt, MetricsPrinter(), ReleaseHostMemory()])
                trainer.train()
                model = trainer.model
                step += trainer.state.global_step
                losses = [r["loss"] for r in trainer.state.log_history if "loss" in r]
                metrics["expert_iteration/sft_steps"] = trainer.state.global_step
                metrics["expert_iteration/sft_loss"] = losses[-1] if losses else None
            metrics["expert_iteration/seconds"] = round(time.monotonic() - start, 1)
            history.append(metrics)
            # one decision for all ranks: a rank that stopped alone would leave the others in the next collective
            stopped = bool(max_across_ranks(int(interrupt.requested)))
            if main_process:
                with rounds_path.open("a", encoding="utf-8") as fh:
                    fh.write(json.dumps(metrics) + "\n")
                log_metrics(cfg, metrics)
                if evaluator is not None and cfg.eval_every_round and round_ < cfg.rounds and not stopped:
                    saved = save_model(model, tokenizer, round_dir / "model")
                    write_checkpoint_settings(saved, checkpoint_settings(cfg))
                    evaluator.start_evaluation(saved, round_)  # its own process: the next round starts now
                if evaluator is not None:
                    evaluator.collect()  # the evaluations that have ended, logged as they land
            state.wait_for_everyone()
            if stopped:
                if main_process:
                    announce(f"stopped by Ctrl-C after round {round_}")
                break
    except BaseException:
        if evaluator is not None:
            evaluator.close()  # nobody will read them: stop the evaluation processes still running
        raise
    finally:
        interrupt.uninstall()
        pool.close()
    final = output_dir
    if hasattr(model, "merge_and_unload"):
        model = model.merge_and_unload()
    wandb_dir = None
    if main_process:  # one writer: the ranks hold the same weights (DDP), and would race for the same files
        save_model(model, tokenizer, final)
        write_checkpoint_settings(final, checkpoint_settings(cfg))  # eval's defaults: the prompt trained on
        if evaluator is not None:
            evaluator.wait_pending()  # training is over: the round evaluations still running land first
        if evaluator is not None and cfg.checkpoint_eval_at_end and not stopped:
            evaluator.evaluate_checkpoint(final, len(history))
        wandb_dir = finish_training_run(cfg, final)
    result = TrainResult(output_dir=output_dir, final_checkpoint=final, global_step=step,
                         interrupted=stopped, run_name=cfg.run_name, model=prepared.model.name,
                         log_history=history, checkpoint_evals=list(evaluator.history) if evaluator else [],
                         wandb_dir=wandb_dir)
    if main_process:
        (output_dir / "train_result.json").write_text(json.dumps(dataclasses.asdict(result), indent=2, default=str)
                                                      + "\n", encoding="utf-8")
    state.wait_for_everyone()  # no rank returns (and tears down its process group) while rank 0 still writes
    return result


EI_ZERO3_REFUSAL = (
    "expert iteration under DeepSpeed ZeRO-3 is not supported: each round samples with the model's own generate "
    "outside the engine (ZeRO-3 holds a shard of every weight per process) and builds a new engine per round "
    "over a partitioned model. Use ZeRO-2 (configs/accelerate/deepspeed_zero2.yaml), plain DDP "
    "(configs/accelerate/multi_gpu.yaml) or use_peft")


def gather_samples(own: Sequence[Sample], tasks: Sequence[Task], world: int) -> list[Sample]:
    """Every rank's samples (rank ``r`` sampled ``tasks[r::world]``), on every rank, in the order of ``tasks``.

    One process: ``own`` as it is. A gather (every rank must call it, once per round).
    """
    if world == 1:
        return list(own)
    from accelerate.utils import gather_object

    by_task: dict[str, list[Sample]] = {}
    for part in gather_object([list(own)]):
        for sample in part:
            by_task.setdefault(sample.task.id, []).append(sample)
    return [s for task in tasks for s in by_task.get(task.id, [])]


def main(argv: Sequence[str] | None = None) -> TrainResult:
    return train_expert_iteration(parse_config(ProofExpertIterationConfig, argv))


if __name__ == "__main__":  # pragma: no cover - `accelerate launch -m proofgym.training.expert_iteration`
    from proofgym.training.runner import run_main

    sys.exit(run_main("expert-iteration", main, sys.argv[1:]))
