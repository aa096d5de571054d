"""The training plan: optimizer steps, curriculum refreshes and evaluation points, computed before training.

A config written for one machine runs on another: the same GRPO recipe on 8 GPUs instead of 1 takes
8 times fewer optimizer steps, so a refresh every 50 steps or an evaluation every 100 may never come
(the 8-GPU recipe on the ~280 training tasks of ``coq-stdlib`` is 24 steps). :func:`make_plan`
computes, from the number of training tasks, the world size and the batch shape, the step count the
trainer will run, exactly as TRL and transformers compute it:

- GRPO: a generation batch holds ``per_device_train_batch_size * world * steps_per_generation``
  completions, that is ``P`` = that / ``num_generations`` distinct prompts; TRL's ``RepeatSampler``
  takes ``floor(tasks / P)`` whole generation batches per epoch (the last ``tasks % P`` tasks wait for
  the next epoch's shuffle), each used for ``num_iterations * steps_per_generation`` dataloader batches
  per process; an optimizer step is ``gradient_accumulation_steps`` of those;
- SFT: ``ceil(ceil(tasks / per_device) / world)`` batches per process (accelerate's even shards),
  ``gradient_accumulation_steps`` per optimizer step;
- then ``max_steps`` when set, else ``ceil(num_train_epochs * steps per epoch)`` (transformers).

Refreshes and evaluations can be given as a count (``curriculum_refreshes``, ``checkpoint_evals``),
spread evenly over the planned steps, so that a recipe means the same on any number of GPUs;
:func:`apply_plan` turns them into the step intervals the callbacks read, and refuses an interval that
never fires inside the run. The plan is printed at the start of every run and saved in
``train_result.json``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from proofgym.training.common import TrainConfigError


@dataclass(frozen=True)
class TrainingPlan:
    """What a run will do, in optimizer steps (see the module docstring).

    Attributes:
        algo: ``grpo`` or ``sft``.
        tasks: Training tasks (rows of the training dataset).
        world_size: Training processes.
        per_device_batch: ``per_device_train_batch_size``.
        gradient_accumulation: ``gradient_accumulation_steps``.
        samples_per_step: Completions (GRPO) or examples (SFT) per optimizer step over all processes.
        prompts_per_generation: GRPO: distinct prompts per generation batch (0 for SFT).
        steps_per_epoch: Optimizer steps per pass over the tasks.
        total_steps: Optimizer steps of the run.
        refresh_every: Curriculum refresh interval in steps (0: none).
        refresh_at: The steps after which the curriculum refreshes.
        eval_every: Checkpoint evaluation interval in steps (0: none).
        eval_at: The steps at which a checkpoint is evaluated during training (the end is separate).
    """

    algo: str
    tasks: int
    world_size: int
    per_device_batch: int
    gradient_accumulation: int
    samples_per_step: int
    prompts_per_generation: int
    steps_per_epoch: int
    total_steps: int
    refresh_every: int = 0
    refresh_at: tuple[int, ...] = ()
    eval_every: int = 0
    eval_at: tuple[int, ...] = ()

    def describe(self) -> str:
        """One paragraph for the start of a run."""
        shape = (f"{self.prompts_per_generation} prompts x {self.samples_per_step // max(self.prompts_per_generation, 1)}"
                 f" completions" if self.algo == "grpo" else f"{self.samples_per_step} examples")
        text = (f"plan: {self.total_steps} optimizer steps ({self.steps_per_epoch} per epoch) on {self.tasks} tasks, "
                f"{self.world_size} process(es) x {self.per_device_batch} per device x {self.gradient_accumulation} "
                f"accumulated = {self.samples_per_step} per step ({shape})")
        if self.algo == "grpo" and self.prompts_per_generation and self.tasks % self.prompts_per_generation:
            text += f"; {self.tasks % self.prompts_per_generation} task(s) left out of each epoch's draw"
        if self.refresh_every:
            text += f"; curriculum refresh every {self.refresh_every} steps, after steps {_steps(self.refresh_at)}"
        if self.eval_every:
            text += f"; checkpoint evaluation every {self.eval_every} steps, at steps {_steps(self.eval_at)}"
        return text

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "refresh_at": list(self.refresh_at), "eval_at": list(self.eval_at)}


def _steps(steps: tuple[int, ...]) -> str:
    return ", ".join(map(str, steps[:8])) + (f", ... ({len(steps)} in all)" if len(steps) > 8 else "")


def grpo_steps_per_epoch(tasks: int, *, world_size: int, per_device: int, gradient_accumulation: int,
                         steps_per_generation: int, num_generations: int, num_iterations: int = 1) -> tuple[int, int]:
    """``(optimizer steps per epoch, distinct prompts per generation batch)`` of TRL's GRPO.

    0 steps when the tasks do not fill one generation batch (TRL's sampler then yields nothing).
    """
    completions = per_device * world_size * steps_per_generation
    if completions % num_generations:
        raise TrainConfigError(f"a generation batch of {completions} completions ({per_device} per device x "
                               f"{world_size} process(es) x {steps_per_generation} steps per generation) is not a "
                               f"whole number of groups of num_generations {num_generations}")
    prompts = completions // num_generations
    batches = (tasks // prompts) * num_iterations * steps_per_generation
    if not batches:
        return 0, prompts
    return batches // gradient_accumulation + int(batches % gradient_accumulation > 0), prompts


def sft_steps_per_epoch(tasks: int, *, world_size: int, per_device: int, gradient_accumulation: int) -> int:
    """Optimizer steps per epoch of transformers' Trainer over ``tasks`` examples (accelerate's even shards)."""
    batches = math.ceil(math.ceil(tasks / per_device) / world_size)
    return max(batches // gradient_accumulation + int(batches % gradient_accumulation > 0), 1)


def every_for(count: int, total: int) -> int:
    """The interval that fires about ``count`` times strictly inside ``total`` steps (0 when it cannot fire)."""
    if count <= 0 or total < 2:
        return 0
    return max(1, math.ceil(total / (count + 1)))


def fires(every: int, total: int, *, last: bool = False) -> tuple[int, ...]:
    """The steps ``every`` fires at within ``total`` steps (before the last one, unless ``last``)."""
    if every <= 0:
        return ()
    return tuple(range(every, total + (1 if last else 0), every))


def make_plan(cfg: Any, tasks: int, *, world_size: int, algo: str) -> TrainingPlan:
    """The plan of ``cfg`` on ``tasks`` training tasks over ``world_size`` processes (no refresh/eval resolved).

    Raises:
        TrainConfigError: a batch shape TRL refuses, or a GRPO split too small for one generation batch.
    """
    per_device, accumulation = int(cfg.per_device_train_batch_size), int(cfg.gradient_accumulation_steps)
    if algo == "grpo":
        per_generation = int(getattr(cfg, "steps_per_generation", None) or accumulation)
        per_epoch, prompts = grpo_steps_per_epoch(
            tasks, world_size=world_size, per_device=per_device, gradient_accumulation=accumulation,
            steps_per_generation=per_generation, num_generations=int(cfg.num_generations),
            num_iterations=int(getattr(cfg, "num_iterations", 1) or 1))
        if per_epoch == 0:
            raise TrainConfigError(
                f"the training split has {tasks} task(s), fewer than the {prompts} distinct prompts of one generation "
                f"batch ({per_device} per device x {world_size} process(es) x {per_generation} steps per generation "
                f"/ num_generations {cfg.num_generations}): no step would run. Lower per_device_train_batch_size or "
                f"gradient_accumulation_steps, or train on more tasks")
        samples = per_device * world_size * accumulation
    else:
        per_epoch, prompts = sft_steps_per_epoch(tasks, world_size=world_size, per_device=per_device,
                                                 gradient_accumulation=accumulation), 0
        samples = per_device * world_size * accumulation
    total = int(cfg.max_steps) if cfg.max_steps and cfg.max_steps > 0 else \
        math.ceil(float(cfg.num_train_epochs) * per_epoch)
    return TrainingPlan(algo=algo, tasks=tasks, world_size=world_size, per_device_batch=per_device,
                        gradient_accumulation=accumulation, samples_per_step=samples, prompts_per_generation=prompts,
                        steps_per_epoch=per_epoch, total_steps=total)


def apply_plan(cfg: Any, plan: TrainingPlan) -> TrainingPlan:
    """Resolve the refresh and evaluation intervals of ``cfg`` against ``plan`` (set on ``cfg``); refuse dead ones.

    ``curriculum_refreshes`` / ``checkpoint_evals`` (counts) win over ``curriculum_refresh_steps`` /
    ``checkpoint_eval_steps`` (intervals) and are written into them, since those are what the callbacks read.

    Raises:
        TrainConfigError: an interval (given or derived) that never fires within the plan's steps.
    """
    total = plan.total_steps
    where = (f"the plan has {total} optimizer step(s) ({plan.tasks} tasks, {plan.world_size} process(es), "
             f"{plan.samples_per_step} per step)")
    refresh = 0
    if getattr(cfg, "curriculum", False):
        count = int(getattr(cfg, "curriculum_refreshes", 0) or 0)
        refresh = every_for(count, total) if count else int(cfg.curriculum_refresh_steps)
        if count and not refresh:
            raise TrainConfigError(f"curriculum_refreshes: {count} cannot fire: {where}; a refresh needs a step "
                                   f"after it")
        if refresh and not fires(refresh, total):
            raise TrainConfigError(
                f"curriculum_refresh_steps: {refresh} never fires: {where}. Give curriculum_refreshes: N (N "
                f"refreshes spread over the run, whatever its size), a curriculum_refresh_steps below {total}, or 0 "
                f"for the estimate before training only")
        cfg.curriculum_refresh_steps = refresh
    count = int(getattr(cfg, "checkpoint_evals", 0) or 0)
    evaluation = every_for(count, total) if count else int(cfg.checkpoint_eval_steps)
    if count and not evaluation:
        raise TrainConfigError(f"checkpoint_evals: {count} cannot fire: {where}")
    if evaluation and not fires(evaluation, total, last=True):
        raise TrainConfigError(
            f"checkpoint_eval_steps: {evaluation} never fires: {where}. Give checkpoint_evals: N (N evaluations "
            f"spread over the run), a checkpoint_eval_steps of at most {total}, or 0 (the start and end evaluations "
            f"are checkpoint_eval_on_start and checkpoint_eval_at_end)")
    cfg.checkpoint_eval_steps = evaluation
    save = getattr(cfg, "save_steps", 0) or 0
    if str(getattr(cfg, "save_strategy", "")).endswith("steps") and save >= 1 and save > total:
        raise TrainConfigError(f"save_steps: {save:g} never fires: {where}, so the run leaves no checkpoint to resume "
                               f"from. Give save_steps as a share of the run (0.25: every quarter) or at most {total}")
    return TrainingPlan(**{**asdict(plan), "refresh_every": refresh, "refresh_at": fires(refresh, total),
                           "eval_every": evaluation, "eval_at": fires(evaluation, total)})


def plan_run(cfg: Any, tasks: int, *, algo: str, world_size: int | None = None) -> TrainingPlan:
    """:func:`make_plan` then :func:`apply_plan`, with the run's own world size by default; announced once."""
    from proofgym.training.callbacks import announce

    world = int(world_size if world_size is not None else getattr(cfg, "world_size", 1) or 1)
    plan = apply_plan(cfg, make_plan(cfg, tasks, world_size=world, algo=algo))
    if getattr(cfg, "process_index", 0) == 0:
        announce(plan.describe())
    return plan


def vllm_max_num_seqs(cfg: Any) -> int:
    """The most sequences TRL's colocated vLLM engine runs at once (what TRL passes it as ``max_num_seqs``)."""
    per_generation = int(getattr(cfg, "steps_per_generation", None) or cfg.gradient_accumulation_steps)
    return int(cfg.per_device_train_batch_size) * int(getattr(cfg, "vllm_tensor_parallel_size", 1) or 1) \
        * per_generation


def vllm_model_length_needed(cfg: Any, longest_prompt: int) -> int:
    """Tokens one sequence can reach: the longest prompt, every turn's reply, and (repair) the feedback between
    them, counted at one token per character of ``feedback_chars`` (an upper bound)."""
    turns = int(getattr(cfg, "max_turns", 1) or 1)
    feedback = int(getattr(cfg, "feedback_chars", 0) or 0) if turns > 1 else 0
    return int(longest_prompt) + turns * int(cfg.max_completion_length) + (turns - 1) * feedback


def check_vllm_caps(cfg: Any, longest_prompt: int) -> None:
    """Refuse a colocated vLLM engine sized for the wrong run (no-op without vLLM or in server mode).

    - ``vllm_max_model_length`` unset: vLLM sizes its KV cache for the model's whole context (32k tokens for
      Qwen2.5), memory the run never uses; set below what a sequence reaches: vLLM refuses the prompt mid-run.
    - ``curriculum_batch_size`` above the engine's ``max_num_seqs``: every estimate runs in several waves.

    Raises:
        TrainConfigError: what to set, with the numbers.
    """
    if not getattr(cfg, "use_vllm", False) or getattr(cfg, "vllm_mode", "colocate") != "colocate":
        return
    needed = vllm_model_length_needed(cfg, longest_prompt)
    length = getattr(cfg, "vllm_max_model_length", None)
    if not length or length < needed:
        what = "is not set: vLLM would size its KV cache for the model's whole context" if not length else \
            f"is {length}, below what a sequence reaches"
        raise TrainConfigError(
            f"vllm_max_model_length {what}. Set it to at least {needed} (the longest prompt, {longest_prompt} tokens, "
            f"+ {getattr(cfg, 'max_turns', 1) or 1} turn(s) of max_completion_length {cfg.max_completion_length}"
            + (f" + feedback_chars {cfg.feedback_chars} per repair turn" if getattr(cfg, "max_turns", 1) > 1 else "")
            + "), rounded up to a power of two")
    seqs = vllm_max_num_seqs(cfg)
    if getattr(cfg, "curriculum", False) and cfg.curriculum_batch_size > seqs:
        raise TrainConfigError(
            f"curriculum_batch_size {cfg.curriculum_batch_size} is above the {seqs} sequences TRL's vLLM engine runs "
            f"at once (per_device_train_batch_size x vllm_tensor_parallel_size x steps_per_generation): each "
            f"curriculum call would run in waves. Set curriculum_batch_size to at most {seqs}")
