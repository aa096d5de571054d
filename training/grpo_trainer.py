"""TRL's ``GRPOTrainer`` with what proofgym adds: the curriculum's sampler and honest metric averages.

:class:`ProofGRPOTrainer` changes two things and nothing else:

- with a :class:`~proofgym.training.curriculum.PassRateCurriculum` its train sampler is a
  :class:`~proofgym.training.curriculum.CurriculumSampler` (prompts from the kept tasks), and
  the curriculum's counts go into every training log row;
- at each logging step, a metric that is zero when absent (``proof/cheat/<reason>``) counts
  as 0 in the generation batches of the window that did not log it. TRL averages a metric
  over the batches that logged it; a cheat reason that showed up in one batch of four would
  otherwise read four times too high.
"""

from __future__ import annotations

from typing import Any

from trl import GRPOTrainer

from proofgym.training.curriculum import CurriculumSampler, PassRateCurriculum

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

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        mode = "train" if self.model.training else "eval"
        metrics = self._metrics[mode]
        batches = len(metrics.get("reward", ()))  # TRL appends "reward" once per generation batch
        for name, values in metrics.items():
            if name.startswith(ZERO_WHEN_ABSENT) and len(values) < batches:
                values.extend([0.0] * (batches - len(values)))
        if self.curriculum is not None and mode == "train" and batches:
            logs.update(self.curriculum.metrics())
        super().log(logs, start_time)
