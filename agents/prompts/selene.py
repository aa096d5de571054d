"""Selene's prompts (zhang2024selene §4.1, §5.1, App. D), for any system.

One user turn: an instruction, five fixed demonstrations (specification and
ground-truth proof), then the target specification. Augmentations wrap extra
text in tags, in demonstrations and target alike (App. D): ``<sim>`` the first
lines of the most similar source chunk, ``<dep>`` the first lines of the
definitions of facts used by the reference proof.

The fixing round is a second dialogue turn after a failed proof: the error
type, the error message and the proof state at failure, preceded by the fixing
demonstrations (App. D: a demonstration lemma on which the model failed shows
its erroneous proof, the error, and the ground-truth proof). The "try again"
ablation sends the same turn without any error information.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from proofgym.agents.prompts.base import Message, fenced, system_info
from proofgym.envs.types import Task


@dataclass(frozen=True)
class Augmented:
    """A specification with its optional augmentations."""

    statement: str
    sim: str = ""
    dep: Sequence[tuple[str, str]] = ()  # (fact name, excerpt)


@dataclass(frozen=True)
class FixingDemo:
    """A fixing demonstration: the erroneous proof and its error, when the model failed on the lemma."""

    statement: str
    proof: str
    failed_proof: str = ""
    error: str = ""


def instruction(system: str) -> str:
    info = system_info(system)
    return (f"You are given specifications from {info.name} sources, each followed by its proof. Write a "
            f"complete proof for the last specification so that it passes verification by {info.name}. "
            f"The proof is {info.answer}. Do not use {info.forbidden}. Answer with the proof only, in a single "
            f"```{info.fence} fenced code block, as in the examples.")


def _augmentations(item: Augmented, fence: str) -> list[str]:
    parts = []
    if item.sim:
        parts.append(f"<sim>\n{item.sim}\n</sim>")
    if item.dep:
        body = "\n\n".join(excerpt for _, excerpt in item.dep)
        parts.append(f"<dep>\n{body}\n</dep>")
    return parts


def first_turn(system: str, demos: Sequence[tuple[Augmented, str]], target: Augmented) -> list[Message]:
    """The first round: instruction, demonstrations ``(specification, ground-truth proof)``, target."""
    fence = system_info(system).fence
    parts = [instruction(system)]
    for i, (demo, proof) in enumerate(demos, start=1):
        block = [f"### Example {i}", *_augmentations(demo, fence), f"Specification:\n{fenced(demo.statement, fence)}",
                 f"Proof:\n{fenced(proof, fence)}"]
        parts.append("\n".join(block))
    block = ["### Target", *_augmentations(target, fence), f"Specification:\n{fenced(target.statement, fence)}",
             "Proof:"]
    parts.append("\n".join(block))
    return [{"role": "user", "content": "\n\n".join(parts)}]


def error_report(result: dict) -> str:
    """Selene's error message: the error type, the prover's messages, and the proof state at failure."""
    lines = [f"Error type: {result.get('error_category') or 'other'} (verdict {result.get('verdict', '?')})"]
    messages = [m for m in result.get("messages", []) if m.strip()] or list(result.get("reasons", []))
    if messages:
        text = "\n".join(messages)
        lines.append("Error message:\n" + (text if len(text) <= 1500 else text[:1500] + "..."))
    goals = result.get("remaining_goals") or []
    if goals:
        lines.append("Proof state at failure:\n" + "\n\n".join(goals[:3]))
    return "\n".join(lines)


def fixing_turn(system: str, result: dict | None, fixing_demos: Sequence[FixingDemo] = ()) -> str:
    """The second round's user turn. ``result=None`` is the "try again without the error" ablation."""
    fence = system_info(system).fence
    if result is None:
        return (f"The proof is not correct. Try again: answer with a complete proof in a single ```{fence} fenced "
                "code block.")
    parts = []
    failed = [d for d in fixing_demos if d.failed_proof]
    if failed:
        parts.append("Here is how failed proofs of other specifications were fixed.")
        for i, demo in enumerate(failed, start=1):
            parts.append("\n".join([
                f"### Fixing example {i}",
                f"Specification:\n{fenced(demo.statement, fence)}",
                f"Proof:\n{fenced(demo.failed_proof, fence)}",
                f"Verification failed.\n{demo.error}",
                f"Fixed proof:\n{fenced(demo.proof, fence)}",
            ]))
    parts.append("Your proof of the target failed verification.\n" + error_report(result))
    parts.append(f"Fix the proof. Answer with the complete fixed proof in a single ```{fence} fenced code block.")
    return "\n\n".join(parts)


def task_augmented(task: Task, sim: str = "", dep: Sequence[tuple[str, str]] = ()) -> Augmented:
    return Augmented(task.statement, sim, tuple(dep))
