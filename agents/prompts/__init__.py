"""Prompt families, one per system, and the registry that finds them.

``prompts_for(system)`` returns the zero-shot family of a system: the one
registered with :func:`register_prompts`, else the module
``proofgym.agents.prompts.<system>`` when it defines ``PROMPTS``, else the
generic family of :mod:`proofgym.agents.prompts.base`. Selene's prompts
(instruction, five demonstrations, ``<sim>``/``<dep>``, fixing round) are in
:mod:`proofgym.agents.prompts.selene`.
"""

from __future__ import annotations

import importlib

from proofgym.agents.prompts.base import PromptFamily, ZeroShotPrompts

_REGISTRY: dict[str, PromptFamily] = {}


def register_prompts(system: str, family: PromptFamily) -> None:
    """Make ``family`` the zero-shot prompts of ``system``."""
    _REGISTRY[system] = family


def prompts_for(system: str) -> PromptFamily:
    """The zero-shot prompt family of ``system`` (see the module docstring for the lookup order)."""
    if system in _REGISTRY:
        return _REGISTRY[system]
    try:
        module = importlib.import_module(f"proofgym.agents.prompts.{system}")
    except ModuleNotFoundError as exc:
        if exc.name != f"proofgym.agents.prompts.{system}":
            raise
        module = None
    family = getattr(module, "PROMPTS", None) if module is not None else None
    _REGISTRY[system] = family if family is not None else ZeroShotPrompts(system)
    return _REGISTRY[system]


__all__ = ["PromptFamily", "ZeroShotPrompts", "prompts_for", "register_prompts"]
