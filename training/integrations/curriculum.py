"""proofgym's pass-rate curriculum for any trainer: keep the tasks the policy solves sometimes.

GRPO-style trainers learn nothing from a task the policy always or never solves (every reward in
the group is the same). proofgym's own GRPO estimates each task's pass rate p̂ and trains on
0 < p̂ < 1 (``training/curriculum.py``); :class:`PassRateFilter` offers the same rule to a trainer
that has its own loop (verl, OpenRLHF, verifiers/prime-rl, a TRL script): feed it the verdicts the
trainer's rewards already produced, ask which tasks to keep. The classification is
:class:`~proofgym.training.curriculum.PassRateCurriculum`'s, over each task's last ``window`` verdicts.

    keep = PassRateFilter(task_ids, window=8)
    keep.record_many(reward.drain_task_outcomes())   # VerifierReward's (task_id, verdict) pairs
    keep.refresh()
    next_ids = keep.kept()

A harness failure (verdict ``None``) says nothing about the policy and is not counted.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any

from proofgym.envs.types import Verdict

__all__ = ["PassRateFilter"]


class PassRateFilter:
    """Tasks with 0 < p̂ < 1 over each task's last ``window`` verdicts (unscored tasks are kept).

    Args:
        task_ids: Every task the trainer may draw (its dataset's ids, in order).
        window: Verdicts per task that p̂ is estimated from (at least 2).
    """

    def __init__(self, task_ids: Sequence[str], *, window: int = 8) -> None:
        from proofgym.training.curriculum import PassRateCurriculum

        self.curriculum = PassRateCurriculum(task_ids, k=window)
        self.window = int(window)
        self._seen: dict[str, deque[bool]] = {t: deque(maxlen=self.window) for t in self.curriculum.task_ids}
        self._step = 0

    def record(self, task_id: str, verdict: str | Verdict | None) -> None:
        """One reply's verdict (``None``: a harness failure, not counted)."""
        if verdict is None:
            return
        value = verdict.value if isinstance(verdict, Verdict) else str(verdict)
        self._seen.setdefault(task_id, deque(maxlen=self.window)).append(value == Verdict.OK.value)

    def record_many(self, outcomes: Iterable[tuple[str, str | Verdict | None]]) -> None:
        """``(task_id, verdict)`` pairs, e.g. ``VerifierReward.drain_task_outcomes()``."""
        for task_id, verdict in outcomes:
            self.record(task_id, verdict)

    def refresh(self, step: int | None = None) -> dict[str, float]:
        """Re-classify every task from its window; returns the ``curriculum/*`` counts to log."""
        self._step = self._step + 1 if step is None else int(step)
        counts = {t: (sum(seen), len(seen)) for t, seen in self._seen.items()}
        return self.curriculum.update(counts, self._step)

    def kept(self) -> list[str]:
        """The task ids to train on now (every task when none is kept: the curriculum's fallback)."""
        return [self.curriculum.task_ids[i] for i in self.curriculum.active]

    def p_hat(self) -> dict[str, float | None]:
        """Each task's estimated pass rate at the last refresh (``None``: no verdict yet)."""
        return dict(self.curriculum.p_hat)

    def state(self) -> dict[str, Any]:
        """The last refresh's counts (``curriculum/kept`` ...), empty before the first."""
        return self.curriculum.metrics()
