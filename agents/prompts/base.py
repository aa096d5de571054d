"""The prompt-family contract and the generic zero-shot prompts of every system.

A prompt family turns a task into chat messages (:meth:`PromptFamily.messages`)
and a verifier's feedback into the next user turn (:meth:`PromptFamily.repair`).
Every reply is asked for in one fenced code block, which
:func:`proofgym.envs.parsing.parse_proof` takes out again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from proofgym.envs.systems import SPECS
from proofgym.envs.types import Task

#: A chat message: ``{"role": "system" | "user" | "assistant", "content": str}`` (prompts build them,
#: agents send them).
Message = Mapping[str, str]


@dataclass(frozen=True)
class SystemInfo:
    """What a prompt says about a system: its name, the code fence tag, what a proof is, what is forbidden."""

    name: str
    fence: str
    answer: str
    forbidden: str


def system_info(system: str) -> SystemInfo:
    """The prompt's view of ``system``'s spec (:mod:`proofgym.envs.systems`); generic words for an unknown one."""
    known = SPECS.get(system)
    if known is None:
        return SystemInfo(system, system, "the proof that follows the statement", "placeholders and new axioms")
    return SystemInfo(known.display, known.fence, known.answer, known.forbidden)


def fenced(code: str, lang: str) -> str:
    """``code`` in a fenced block (longer fences when the code holds one)."""
    fence = "```"
    while fence in code:
        fence += "`"
    return f"{fence}{lang}\n{code.rstrip()}\n{fence}"


@runtime_checkable
class PromptFamily(Protocol):
    """Chat messages for a task, and the user turn that carries a verifier's feedback."""

    def messages(self, task: Task, *, context: str | None = None) -> list[Message]: ...

    def repair(self, feedback: str) -> str: ...


@dataclass(frozen=True)
class ZeroShotPrompts:
    """A system message, then the context, the statement and what to answer, in one user turn.

    Attributes:
        system: The task's system (``coq``, ``hol_light``...).
        context_chars: How much of the end of the task's context to show (0: none).
    """

    system: str
    context_chars: int = 2000

    @property
    def info(self) -> SystemInfo:
        return system_info(self.system)

    def system_message(self) -> str:
        return (f"You are an expert in {self.info.name} and formal verification. You write proofs that the "
                f"{self.info.name} checker accepts, without placeholders or shortcuts.")

    def messages(self, task: Task, *, context: str | None = None) -> list[Message]:
        info = self.info
        if context is None:
            context = task.context[-self.context_chars:] if self.context_chars else ""
        parts = [f"Write a proof of the following {info.name} statement so that {info.name} accepts it."]
        description = str(task.metadata.get("description", "")) if task.metadata else ""
        if description:
            parts.append(f"What it says:\n{description}")
        if context.strip():
            parts.append(f"The source before the statement (its end):\n{fenced(context, info.fence)}")
        parts.append(f"Statement:\n{fenced(task.statement, info.fence)}")
        parts.append(f"Answer with {info.answer}, in a single ```{info.fence} fenced code block. Do not restate "
                     f"the statement. Do not use {info.forbidden}.")
        return [{"role": "system", "content": self.system_message()}, {"role": "user", "content": "\n\n".join(parts)}]

    def repair(self, feedback: str) -> str:
        return (f"{self.info.name} rejected that proof:\n{feedback.strip()}\n\nWrite a corrected, complete proof, "
                f"in a single ```{self.info.fence} fenced code block.")
