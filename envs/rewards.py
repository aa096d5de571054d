"""Verdict -> reward: the one place a check result becomes a reward.

The reward is a pure function of the check result. A harness failure (the verifier broke) has no
reward: ``None``, counted as its own metric by callers, never scored as 0. Every caller (the envs,
the pool's callers, the TRL reward, the repair rollout) scores through :class:`RewardMap`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import overload

from proofgym.envs.types import CheckResult, Verdict

DEFAULT_REWARDS: Mapping[str, float] = {"OK": 1.0, "FAIL": 0.0, "CHEATING": -1.0, "TIMEOUT": 0.0, "ERROR": 0.0}

SHAPED_VERDICTS = frozenset({Verdict.FAIL.value, Verdict.TIMEOUT.value})
"""Verdicts that earn ``format_bonus``: the verifier ran the submission as a proof script, and it did not prove."""

HONEST_MISSES = (Verdict.FAIL.value, Verdict.TIMEOUT.value, Verdict.ERROR.value)


@dataclass(frozen=True)
class RewardMap:
    """A configurable verdict -> reward map (defaults: OK 1, CHEATING -1, others 0).

    Attributes:
        rewards: The reward of each verdict (by name).
        format_bonus: Optional shaping (default 0: off), added to a FAIL or TIMEOUT only (a submission the
            verifier ran as a proof script); see :mod:`proofgym.training.rewards` for why it cannot be
            farmed into a proof's reward, and :meth:`check_policy` for its bound.

    Example:
        >>> RewardMap()(CheckResult(Verdict.CHEATING)), RewardMap()(None)
        (-1.0, None)
        >>> RewardMap(format_bonus=0.1)(CheckResult(Verdict.FAIL))
        0.1
    """

    rewards: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_REWARDS))
    format_bonus: float = 0.0

    def __post_init__(self) -> None:
        unknown = set(self.rewards) - {v.value for v in Verdict}
        if unknown:
            raise ValueError(f"unknown verdict(s) in reward map: {sorted(unknown)}; use {[v.value for v in Verdict]}")

    @overload
    def __call__(self, result: CheckResult) -> float: ...
    @overload
    def __call__(self, result: None) -> None: ...
    @overload
    def __call__(self, result: CheckResult | None) -> float | None: ...

    def __call__(self, result: CheckResult | None) -> float | None:
        """The reward of ``result``; ``None`` for a harness failure (no result)."""
        if result is None:
            return None
        verdict = result.verdict.value
        reward = float(self.rewards.get(verdict, DEFAULT_REWARDS[verdict]))
        return reward + self.format_bonus if self.format_bonus and verdict in SHAPED_VERDICTS else reward

    def check_policy(self) -> None:
        """Refuse rewards that break CHEATING < FAIL, TIMEOUT, ERROR < OK, or a bonus that lifts a miss to OK.

        Raises:
            ValueError: saying which order is broken and what to change.
        """
        rewards = {v.value: float(self.rewards.get(v.value, DEFAULT_REWARDS[v.value])) for v in Verdict}
        ok, cheat = rewards[Verdict.OK.value], rewards[Verdict.CHEATING.value]
        misses = {v: rewards[v] for v in HONEST_MISSES}
        if not all(cheat < r < ok for r in misses.values()):
            raise ValueError(f"rewards must order CHEATING ({cheat}) < FAIL, TIMEOUT, ERROR ({misses}) < OK ({ok}): "
                             f"an honest miss (malformed output is ERROR) may not cost as much as a cheat, nor earn "
                             f"as much as a proof")
        if self.format_bonus < 0:
            raise ValueError(f"format_bonus must be >= 0, got {self.format_bonus}")
        top = max(rewards[v] for v in SHAPED_VERDICTS) + self.format_bonus
        if self.format_bonus and top >= ok:
            raise ValueError(f"format_bonus {self.format_bonus} lifts FAIL/TIMEOUT to {top}, not below OK ({ok}): "
                             f"keep it small (e.g. 0.1) so that only a proof earns the top reward")

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, float] | None, format_bonus: float = 0.0) -> RewardMap:
        merged = dict(DEFAULT_REWARDS)
        merged.update({str(k).upper(): float(v) for k, v in (mapping or {}).items()})
        return cls(merged, float(format_bonus))
