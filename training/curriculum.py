"""A pass-rate curriculum for GRPO: train on the tasks the current policy solves sometimes.

GRPO learns only from a group whose rewards differ: a task the policy always solves
(p = 1) or never solves (p = 0) gives every completion the same reward, hence zero
advantage and no gradient. After a short SFT most tasks are one or the other (the issue
that asked for this measured 16 of 24 tasks at 0/8 and 4 at 8/8). So, as DeepSeek-Prover,
Kimina-Prover and Seed-Prover do:

1. sample ``k`` attempts at every training task with the *current* policy (the trainer's own
   generation: its sampling settings, its vLLM engine when it has one) and check each on the
   real verifier pool (:func:`~proofgym.training.sampling.sample_and_check`);
2. keep the tasks with 0 < p̂ < 1, where p̂ = OK / (samples with a verdict); a task whose
   samples all hit harness failures has no estimate and is kept (nothing says it is useless);
3. refresh p̂ every ``refresh_steps`` optimizer steps, so a task the policy has learned
   leaves and a task it has started to solve comes back.

The trainer re-reads the kept set through :class:`CurriculumSampler` (TRL's ``RepeatSampler``
with prompts drawn from the current kept set), so no dataloader is rebuilt. The counts are
logged with the training metrics at every logging step: ``curriculum/kept``,
``curriculum/too_easy``, ``curriculum/too_hard``, ``curriculum/unscored``,
``curriculum/mean_p_hat``, ``curriculum/fallback`` and ``curriculum/refreshes``. When no task
is kept (every task too easy or too hard) the sampler falls back to every task and
``curriculum/fallback`` is 1: training goes on, and the zero-variance warning says why it
cannot learn.

Cost: each refresh generates ``k`` replies for every training task (spread over the
processes of a multi-process run, in equal shares so that generation stays in lockstep).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import TrainerCallback
from trl.trainer.utils import RepeatSampler

from proofgym.envs.types import Task
from proofgym.training.rewards import VerifierReward
from proofgym.training.sampling import pass_counts, sample_and_check

CURRICULUM_FILE = "curriculum.json"
"""Each checkpoint's curriculum state (:meth:`PassRateCurriculum.state_dict`), for a resumed run."""


class PassRateCurriculum:
    """Which training tasks GRPO samples from: those with 0 < p̂ < 1 (see the module docstring).

    Args:
        task_ids: The training dataset's ``task_id`` column, in dataset order (indices refer to it).
        k: Attempts per task in an estimate.
        refresh_steps: Re-estimate every N optimizer steps (0: only before training).
    """

    def __init__(self, task_ids: Sequence[str], *, k: int = 8, refresh_steps: int = 0) -> None:
        if k < 2:
            raise ValueError(f"curriculum_k must be >= 2 (one sample cannot tell 0 < p < 1), got {k}")
        if refresh_steps < 0:
            raise ValueError(f"curriculum_refresh_steps must be >= 0, got {refresh_steps}")
        self.task_ids = list(task_ids)
        self.k = int(k)
        self.refresh_steps = int(refresh_steps)
        self.active: list[int] = list(range(len(self.task_ids)))
        self.version = 0
        self.p_hat: dict[str, float | None] = {}
        self.history: list[dict[str, Any]] = []
        self._metrics: dict[str, float] = {}

    def update(self, counts: Mapping[str, tuple[int, int]], step: int) -> dict[str, float]:
        """Classify every task from ``{task_id: (OK, scored)}`` and switch the sampler to the kept ones.

        Returns:
            The ``curriculum/*`` counts (also what :meth:`metrics` returns until the next update).
        """
        kept, easy, hard, unscored = [], [], [], []
        p_hat: dict[str, float | None] = {}
        for index, task_id in enumerate(self.task_ids):
            ok, n = counts.get(task_id, (0, 0))
            p_hat[task_id] = ok / n if n else None
            (unscored if n == 0 else easy if ok == n else hard if ok == 0 else kept).append(index)
        active = kept + unscored
        fallback = not active
        self.active = active or list(range(len(self.task_ids)))
        self.version += 1
        self.p_hat = p_hat
        scored = [p for p in p_hat.values() if p is not None]
        self._metrics = {"curriculum/kept": float(len(kept)), "curriculum/too_easy": float(len(easy)),
                         "curriculum/too_hard": float(len(hard)), "curriculum/unscored": float(len(unscored)),
                         "curriculum/mean_p_hat": sum(scored) / len(scored) if scored else 0.0,
                         "curriculum/fallback": float(fallback), "curriculum/refreshes": float(self.version)}
        self.history.append({"step": step, **self._metrics, "p_hat": dict(p_hat)})
        return dict(self._metrics)

    def metrics(self) -> dict[str, float]:
        """The counts of the last estimate (empty before the first)."""
        return dict(self._metrics)

    def state_dict(self) -> dict[str, Any]:
        """What a resumed run needs to go on with this curriculum: the kept set, the estimates, their history."""
        return {"task_ids": self.task_ids, "active": self.active, "version": self.version, "p_hat": self.p_hat,
                "history": self.history, "metrics": self._metrics}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` (from a checkpoint of the same training split).

        Raises:
            ValueError: the checkpoint's curriculum is over other tasks.
        """
        if list(state["task_ids"]) != self.task_ids:
            raise ValueError("the checkpoint's curriculum is over another training split: resume with the config "
                             "it was trained with")
        self.active, self.version = list(state["active"]), int(state["version"])
        self.p_hat, self.history = dict(state["p_hat"]), list(state["history"])
        self._metrics = dict(state["metrics"])

    def due(self, step: int) -> bool:
        """Whether a refresh is due after optimizer step ``step``."""
        return bool(self.refresh_steps) and step > 0 and step % self.refresh_steps == 0


class CurriculumSampler(RepeatSampler):
    """TRL's ``RepeatSampler`` whose prompts come from the curriculum's current kept set.

    Same length and layout as ``RepeatSampler`` (``batch_size`` distinct prompts per generation
    batch, each ``mini_repeat_count`` times, the batch ``repeat_count`` times), so the trainer's
    step accounting is unchanged; each batch reads :attr:`PassRateCurriculum.active` afresh. The
    draw is a seeded shuffle, identical on every process. When fewer tasks are kept than a batch
    holds, a task fills more than one group of the batch.
    """

    def __init__(self, curriculum: PassRateCurriculum, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.curriculum = curriculum
        self._draw = torch.Generator()
        self._draw.manual_seed(self.seed if self.seed is not None else 0)

    def __iter__(self) -> Iterator[int]:
        queue: list[int] = []
        version = -1
        for _ in range(self.num_samples // self.batch_size):
            chunk: list[int] = []
            while len(chunk) < self.batch_size:
                if not queue or version != self.curriculum.version:
                    version = self.curriculum.version
                    active = list(self.curriculum.active)
                    order = torch.randperm(len(active), generator=self._draw).tolist() if self.shuffle else \
                        range(len(active) - 1, -1, -1)
                    queue = [active[i] for i in order]
                chunk.append(queue.pop())
            for _ in range(self.repeat_count):
                for index in chunk:
                    for _ in range(self.mini_repeat_count):
                        yield index


class CurriculumCallback(TrainerCallback):
    """Estimates p̂ before training and every ``refresh_steps`` steps, with the trainer's policy.

    Args:
        curriculum: The curriculum the trainer's sampler reads.
        tasks: The training tasks (``curriculum.task_ids`` name them).
        checker: Parses and checks the sampled proofs (the reward's pool and reward map).
        context_chars: The prompts' context, as in training.
        batch_size: Prompts per generation call.
        max_new_tokens: Tokens per reply (default: the trainer's ``max_completion_length``).
        on_estimate: Called with ``(step, {task_id: (OK, scored)})`` on the main process after each
            estimate (the per-task pass-rate table uses it).
    """

    def __init__(self, curriculum: PassRateCurriculum, tasks: Sequence[Task], checker: VerifierReward, *,
                 context_chars: int = 2000, batch_size: int = 16, max_new_tokens: int | None = None,
                 on_estimate: Any = None) -> None:
        by_id = {t.id: t for t in tasks}
        self.curriculum = curriculum
        self.tasks = [by_id[task_id] for task_id in dict.fromkeys(curriculum.task_ids)]
        self.checker = checker
        self.context_chars = int(context_chars)
        self.batch_size = int(batch_size)
        self.max_new_tokens = max_new_tokens
        self.on_estimate = on_estimate
        self.trainer: Any = None

    def bind(self, trainer: Any) -> CurriculumCallback:
        """Give the callback the trainer whose policy it samples (after the trainer is built)."""
        self.trainer = trainer
        return self

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        # a resumed run (transformers has loaded its state: global_step > 0) goes on with the checkpoint's estimates
        if state.global_step > 0 and not self.curriculum.history and self._restore(args):
            return
        if not self.curriculum.history:
            self.refresh(state.global_step)

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.is_world_process_zero and self.curriculum.history:
            folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            if folder.is_dir():
                (folder / CURRICULUM_FILE).write_text(json.dumps(self.curriculum.state_dict()) + "\n",
                                                      encoding="utf-8")

    def _restore(self, args: Any) -> bool:
        """Load the resumed checkpoint's :data:`CURRICULUM_FILE`; False when it has none (then estimate afresh)."""
        from transformers.trainer_utils import get_last_checkpoint

        from proofgym.training.callbacks import announce

        resume = getattr(args, "resume_from_checkpoint", None)
        folder = get_last_checkpoint(args.output_dir) if resume is True or resume == "True" else resume
        path = Path(folder) / CURRICULUM_FILE if folder else None
        if path is None or not path.is_file():
            return False
        self.curriculum.load_state_dict(json.loads(path.read_text(encoding="utf-8")))
        if self.trainer is None or self.trainer.accelerator.is_main_process:
            announce(f"curriculum restored from {path}: {len(self.curriculum.history)} estimate(s), "
                     f"{len(self.curriculum.active)} task(s) kept")
        return True

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        # not after the last step: an estimate no step will use costs k generations per task for nothing
        if self.curriculum.due(state.global_step) and state.global_step < (state.max_steps or state.global_step + 1):
            self.refresh(state.global_step)

    def refresh(self, step: int) -> dict[str, float]:
        """Sample, check and re-filter now; every process takes an equal share of the tasks."""
        from proofgym.training.callbacks import announce
        from proofgym.training.rollout import TrainerGenerator, tokenizer_of

        if self.trainer is None:
            raise RuntimeError("CurriculumCallback.bind(trainer) was not called")
        import time

        begin = time.monotonic()
        trainer = self.trainer
        accelerator = trainer.accelerator
        world, rank = accelerator.num_processes, accelerator.process_index
        share = math.ceil(len(self.tasks) / world)
        mine = self.tasks[rank::world]
        # Equal shares keep generation in lockstep across processes (ZeRO-3 gathers weights per call):
        # a short share is padded with repeats whose samples are dropped.
        padded = mine + [self.tasks[0]] * (share - len(mine))
        max_tokens = self.max_new_tokens or getattr(trainer.args, "max_completion_length", None) or 256
        samples = sample_and_check(TrainerGenerator(trainer), tokenizer_of(trainer.processing_class), padded,
                                   self.checker, k=self.curriculum.k, max_new_tokens=max_tokens,
                                   batch_size=self.batch_size, context_chars=self.context_chars,
                                   progress=f"curriculum at step {step}" if accelerator.is_main_process else "")
        counts = pass_counts(samples[:len(mine) * self.curriculum.k])
        if world > 1:
            from accelerate.utils import gather_object

            merged: dict[str, tuple[int, int]] = {}
            for part in gather_object([counts]):
                merged.update(part)
            counts = merged
        metrics = self.curriculum.update(counts, step)
        self.curriculum.history[-1]["seconds"] = round(time.monotonic() - begin, 1)  # what a refresh costs
        if accelerator.is_main_process:
            announce(f"curriculum at step {step}: {metrics['curriculum/kept']:.0f} task(s) kept (0 < p < 1), "
                     f"{metrics['curriculum/too_easy']:.0f} too easy, {metrics['curriculum/too_hard']:.0f} too hard, "
                     f"{metrics['curriculum/unscored']:.0f} unscored; mean p {metrics['curriculum/mean_p_hat']:.2f}"
                     + (" -- none kept: sampling every task" if metrics["curriculum/fallback"] else ""))
            if self.on_estimate is not None:
                self.on_estimate(step, counts)
        return metrics
