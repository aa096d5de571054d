"""Strategies: the seeds' harnesses, on any agent and any system.

``make_strategy(name, **options)`` builds one: ``plain`` (zero-shot, optional
repair rounds) and ``selene`` (demonstrations, ``<sim>``/``<dep>``, fixing round)
live here; another strategy is found as the module
``proofgym.agents.strategies.<name>`` that defines ``STRATEGY``, a callable
taking the options as keywords and returning a :class:`Strategy`.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any

from proofgym.agents.strategies.base import Attempt, PlainStrategy, Runtime, Strategy
from proofgym.envs.errors import ProofgymError

_BUILTIN = {
    "plain": "proofgym.agents.strategies.base:PlainStrategy",
    "selene": "proofgym.agents.strategies.selene:SeleneStrategy",
}


def available_strategies() -> list[str]:
    """The names :func:`make_strategy` takes: the built-in ones, then the modules here that define ``STRATEGY``.

    Modules are found by reading their source for a top-level ``STRATEGY =``, so listing imports nothing.
    """
    found = [path.stem for path in sorted(Path(__file__).parent.glob("*.py"))
             if not path.stem.startswith("_") and path.stem not in _BUILTIN
             and re.search(r"^STRATEGY\s*=", path.read_text(encoding="utf-8"), re.MULTILINE)]
    return [*_BUILTIN, *found]


def make_strategy(name: str, **options: Any) -> Strategy:
    """The strategy ``name`` with ``options`` (see the module docstring)."""
    target = _BUILTIN.get(name)
    if target is not None:
        module_name, _, attr = target.partition(":")
        factory = getattr(importlib.import_module(module_name), attr)
    else:
        try:
            module = importlib.import_module(f"proofgym.agents.strategies.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"proofgym.agents.strategies.{name}":
                raise
            raise ProofgymError(f"unknown strategy {name!r}; available: {', '.join(available_strategies())}") from None
        factory = getattr(module, "STRATEGY", None)
        if factory is None:
            raise ProofgymError(f"proofgym.agents.strategies.{name} defines no STRATEGY to build it from")
    try:
        return factory(**options)
    except TypeError as exc:
        raise ProofgymError(f"bad option for strategy {name!r}: {exc}") from None


__all__ = ["Attempt", "PlainStrategy", "Runtime", "Strategy", "available_strategies", "make_strategy"]
