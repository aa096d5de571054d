"""Zero-shot prompts for Dafny tasks (``prompts_for("dafny")`` finds ``PROMPTS`` here).

A Dafny action is the *whole program*: the context to keep, the statement's headers unchanged,
and the bodies. The generic zero-shot family asks not to restate the statement, which is right
for a Coq proof and wrong here, so Dafny has its own family.
"""

from __future__ import annotations

from dataclasses import dataclass

from proofgym.agents.prompts.base import Message, fenced
from proofgym.agents.prompts.skillforge import DAFNY_VERSION_NOTE
from proofgym.envs.types import Task


@dataclass(frozen=True)
class DafnyPrompts:
    """System message, then description, code to keep, headers to implement, and the rules, in one user turn."""

    context_chars: int = 4000

    def messages(self, task: Task, *, context: str | None = None) -> list[Message]:
        if context is None:
            context = task.context[-self.context_chars:] if self.context_chars else task.context
        parts = ["Write a complete Dafny program that implements the specification below and that Dafny verifies."]
        description = str(task.metadata.get("description", "")) if task.metadata else ""
        if description:
            parts.append(f"Task:\n{description}")
        if context.strip():
            parts.append(f"Code the program must keep, verbatim:\n{fenced(context, 'dafny')}")
        parts.append(f"Specification to implement (keep every header exactly as it is, add the bodies):\n"
                     f"{fenced(task.statement, 'dafny')}")
        parts.append("Answer with the whole program (the kept code, the declarations with their bodies, loop "
                     "invariants and any helper lemmas with bodies) in a single ```dafny fenced code block. "
                     + DAFNY_VERSION_NOTE)
        system = ("You are an expert in Dafny and formal verification. You write programs that Dafny verifies, "
                  "without weakening specifications or using shortcuts.")
        return [{"role": "system", "content": system}, {"role": "user", "content": "\n\n".join(parts)}]

    def repair(self, feedback: str) -> str:
        return (f"Dafny rejected that program:\n{feedback.strip()}\n\nWrite the corrected, complete program, "
                "with the specification unchanged, in a single ```dafny fenced code block.")


PROMPTS = DafnyPrompts()
