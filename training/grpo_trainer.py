"""TRL's ``GRPOTrainer`` with what proofgym adds: the curriculum's sampler and honest metric averages.

:class:`ProofGRPOTrainer` changes four things and nothing else:

- with a :class:`~proofgym.training.curriculum.PassRateCurriculum` its train sampler is a
  :class:`~proofgym.training.curriculum.CurriculumSampler` (prompts from the kept tasks), and
  the curriculum's counts go into every training log row;
- at each logging step, a metric that is zero when absent (``proof/cheat/<reason>``) counts
  as 0 in the generation batches of the window that did not log it. TRL averages a metric
  over the batches that logged it; a cheat reason that showed up in one batch of four would
  otherwise read four times too high. After each generation batch the reward functions learn
  every cheat reason any process logged (TRL's gathered metric names), so from the next batch
  on every process logs it, 0 included, and the cross-process mean is over all of them. (The
  one batch in which a reason first appears is averaged over the processes that saw it.)
- a reward function that can check ahead (:class:`~proofgym.training.reward_service.AsyncVerifierReward`)
  gets each batch as soon as it is decoded, so verification overlaps the log-probability passes;
- generation with ``transformers`` (no vLLM, text only) prefills each prompt once for its whole
  group instead of once per completion, and grows the KV cache in place
  (:func:`~proofgym.agents.generation.generate_shared_prefix`): TRL repeats each prompt
  ``num_generations`` times in the batch and ``generate`` prefills every copy. Same generation
  config, so the same sampling distribution; the completions are cut after the first EOS as TRL
  cuts them.
"""

from __future__ import annotations

import os
import resource
from typing import Any

from trl import GRPOTrainer

from proofgym.agents.generation import generate_shared_prefix
from proofgym.training.curriculum import CurriculumSampler, PassRateCurriculum
from proofgym.training.distributed import keep_checkpointing
from proofgym.training.reward_service import prefetch_rewards

ZERO_WHEN_ABSENT = ("proof/cheat/",)
"""Prefixes of reward metrics whose absence from a batch means 0 (they are logged only once seen)."""


class ProofGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` plus ``curriculum`` (keyword; ``None``: TRL's sampler); see the module docstring."""

    def __init__(self, *args: Any, curriculum: PassRateCurriculum | None = None, **kwargs: Any) -> None:
        self.curriculum = curriculum
        super().__init__(*args, **kwargs)

    def _get_train_sampler(self, dataset: Any = None) -> Any:
        if self.curriculum is None:
            return super()._get_train_sampler(dataset)
        base = super()._get_train_sampler(dataset)
        return CurriculumSampler(self.curriculum, data_source=base.data_source,
                                 mini_repeat_count=base.mini_repeat_count, batch_size=base.batch_size,
                                 repeat_count=base.repeat_count, shuffle=base.shuffle, seed=base.seed)

    def _generate_single_turn(self, prompt_ids: Any, images: Any, multimodal_fields: Any, num_generations: Any,
                              has_tool_images: bool = False) -> Any:
        if (self.use_vllm or getattr(self, "use_transformers_continuous_batching", False) or self._is_vlm
                or images is not None and any(i is not None for i in images) or multimodal_fields
                or getattr(self, "pad_to_multiple_of", None)):
            return super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations,
                                                 has_tool_images)
        import torch
        from trl.models import unwrap_model_for_generation
        from trl.trainer import grpo_trainer as trl_grpo

        with (
            trl_grpo.profiling_context(self, "transformers.generate"),
            keep_checkpointing(self.model_wrapped),
            unwrap_model_for_generation(
                self.model_wrapped, self.accelerator, gather_deepspeed3_params=self.args.ds3_gather_for_generation,
                generation_kwargs=self.generation_kwargs,
                gradient_checkpointing_kwargs=self.args.gradient_checkpointing_kwargs) as unwrapped_model,
            torch.no_grad(),
            self._dist.summon_full_params(self.model_wrapped, recurse=False),
        ):
            output = generate_shared_prefix(unwrapped_model, [list(p) for p in prompt_ids], self.generation_config,
                                            pad_token_id=self._tokenizer.pad_token_id)
        width = max(len(p) for p in prompt_ids)
        eos = set(self.eos_token_ids if isinstance(self.eos_token_ids, (list, tuple)) else [self.eos_token_ids])
        completions = []
        for row in output[:, width:].tolist():
            end = next((i + 1 for i, t in enumerate(row) if t in eos), len(row))
            completions.append(row[:end])
        return completions, None

    def _generate(self, prompts: list) -> Any:
        out = super()._generate(prompts)

        # checks start now, while TRL computes log-probabilities, and the awaited reward takes their answers
        prefetch_rewards(self.reward_funcs, getattr(self, "_batch_inputs", None), completions=out[3],
                         extra_fields=out[5])
        return out

    def _generate_and_score_completions(self, inputs: Any) -> Any:
        self._batch_inputs = inputs
        out = super()._generate_and_score_completions(inputs)
        mode = "train" if self.model.training else "eval"
        names = [n.removeprefix(ZERO_WHEN_ABSENT[0]) for n in self._metrics[mode] if n.startswith(ZERO_WHEN_ABSENT)]
        for func in self.reward_funcs:
            seen = getattr(func, "seen_reasons", None)
            if isinstance(seen, set):
                seen.update(names)
        return out

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        mode = "train" if self.model.training else "eval"
        metrics = self._metrics[mode]
        batches = len(metrics.get("reward", ()))  # TRL appends "reward" once per generation batch
        for name, values in metrics.items():
            if name.startswith(ZERO_WHEN_ABSENT) and len(values) < batches:
                values.extend([0.0] * (batches - len(values)))
        if self.curriculum is not None and mode == "train" and batches:
            logs.update(self.curriculum.metrics())
        if mode == "train" and batches:
            logs.update(host_memory())
        super().log(logs, start_time)


def host_memory() -> dict[str, float]:
    """The training process's resident memory now and its peak so far, in GiB (``memory/host_*``; Linux).

    Logged at every training logging step beside ``step_time``: a GRPO process on CPU was seen to grow
    from 4.9 to 7.7 GB over 16 steps (scripts/bench_grpo_memory.py measures where it goes).
    """
    out = {}
    try:  # now first, then the peak: memory that grows between the two reads cannot put "now" above the peak
        with open("/proc/self/statm", encoding="ascii") as fh:
            out["memory/host_rss_gib"] = round(int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**30, 3)
    except OSError:  # not Linux: the peak is what there is
        pass
    peak = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 3)
    out["memory/host_peak_rss_gib"] = max(peak, out.get("memory/host_rss_gib", 0.0))
    return out
