"""A Unicode text space: Gymnasium's ``Text`` rejects ``∀``, ``ℕ`` and newlines.

Membership is "a ``str`` of at most ``max_length`` code points". There is no
charset: a full-Unicode charset would pickle to tens of MB, and vector envs pickle
their spaces. ``sample`` draws from a small printable alphabet plus some math symbols.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium.spaces import Space

_SAMPLE_ALPHABET = "abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.;:()[]{}=<>-+*/\n∀∃→ℕλ"


class UnicodeText(Space[str]):
    """Any text up to ``max_length`` characters."""

    def __init__(self, max_length: int = 1 << 20, *, min_length: int = 0, seed: int | None = None) -> None:
        if not 0 <= min_length <= max_length:
            raise ValueError(f"need 0 <= min_length <= max_length, got {min_length}, {max_length}")
        self.max_length = int(max_length)
        self.min_length = int(min_length)
        super().__init__(dtype=str, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        length = int(self.np_random.integers(self.min_length, min(self.max_length, 64) + 1))
        idx = self.np_random.integers(0, len(_SAMPLE_ALPHABET), size=length)
        return "".join(_SAMPLE_ALPHABET[i] for i in idx)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"UnicodeText({self.min_length}, {self.max_length})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, UnicodeText) and (self.min_length, self.max_length) == (
            other.min_length,
            other.max_length,
        )

    def to_jsonable(self, sample_n: list[str]) -> list[str]:
        return list(sample_n)

    def from_jsonable(self, sample_n: list[str]) -> list[str]:
        return list(sample_n)


def as_array(text: str) -> np.ndarray:  # pragma: no cover - convenience for users
    return np.array(text, dtype=object)
