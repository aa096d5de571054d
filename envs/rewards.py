"""Verdict -> reward. The reward is a pure function of the check result.

A harness failure (the verifier broke) has no reward: ``None``, counted as its
own metric by callers, never scored as 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from proofgym.envs.types import CheckResult, Verdict

DEFAULT_REWARDS: Mapping[str, float] = {"OK": 1.0, "FAIL": 0.0, "CHEATING": -1.0, "TIMEOUT": 0.0, "ERROR": 0.0}


@dataclass(frozen=True)
class RewardMap:
    """A configurable verdict -> reward map (defaults: OK 1, CHEATING -1, others 0)."""

    rewards: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_REWARDS))

    def __post_init__(self) -> None:
        unknown = set(self.rewards) - {v.value for v in Verdict}
        if unknown:
            raise ValueError(f"unknown verdict(s) in reward map: {sorted(unknown)}; use {[v.value for v in Verdict]}")

    def __call__(self, result: CheckResult | None) -> float | None:
        if result is None:
            return None
        return float(self.rewards.get(result.verdict.value, DEFAULT_REWARDS[result.verdict.value]))

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, float] | None) -> RewardMap:
        merged = dict(DEFAULT_REWARDS)
        merged.update({str(k).upper(): float(v) for k, v in (mapping or {}).items()})
        return cls(merged)
