"""Coq's zero-shot prompts: the generic family plus what trips models up in Coq."""

from __future__ import annotations

from dataclasses import dataclass

from proofgym.agents.prompts.base import ZeroShotPrompts


@dataclass(frozen=True)
class CoqPrompts(ZeroShotPrompts):
    """Zero-shot Coq: section variables and hypotheses are in scope, the lemma itself may not be used."""

    system: str = "coq"

    def system_message(self) -> str:
        return (super().system_message() + " In Coq, the statement is already given: you write the script "
                "that follows it. Variables and hypotheses of open sections are in scope; the original lemma "
                "of the same name is not available.")


PROMPTS = CoqPrompts()
