"""HOL Light's zero-shot prompt, after s2n-bignum-bench's template.

One worked example, the answer as a single tactic expression in ``THEN`` form, no ``CHEAT_TAC``
and no prose: the benchmark's answers are tactic expressions, and so is the action of
``proofgym/WholeProof-v0`` on a ``hol_light`` task.
"""

from __future__ import annotations

from dataclasses import dataclass

from proofgym.agents.prompts.base import Message, ZeroShotPrompts, fenced
from proofgym.envs.types import Task

EXAMPLE_GOAL = "`x * (y + z) = x * z + x * y`"
EXAMPLE_TACTIC = "REWRITE_TAC[LEFT_ADD_DISTRIB] THEN GEN_REWRITE_TAC LAND_CONV [ADD_SYM] THEN REFL_TAC"

TEMPLATE = """\
You are given a HOL Light goal and the HOL Light setup it lives in. Write a HOL Light tactic that proves it.

Rules:
- Answer with exactly one OCaml expression of type `tactic`, combining tactics with THEN / THENL.
- Do not use CHEAT_TAC, mk_thm, new_axiom, or anything that is not a tactic (no `;;`, no `let module`,
  no file or system access). Such answers are graded CHEATING.
- Theorems and definitions from the setup may be used by name.
- Output only the tactic, in a single ```ocaml fenced code block, with no explanation.

Example.
Goal:
{example_goal}
Answer:
{example_answer}
{context}
Goal:
{goal}
Answer:
"""


@dataclass(frozen=True)
class HolLightPrompts(ZeroShotPrompts):
    """The benchmark's zero-shot template (one worked example) as a prompt family."""

    system: str = "hol_light"
    context_chars: int = 2000

    def system_message(self) -> str:
        return ("You are an expert in HOL Light and formal verification. You answer with a single HOL Light "
                "tactic expression that the HOL Light kernel accepts.")

    def messages(self, task: Task, *, context: str | None = None) -> list[Message]:
        if context is None:
            context = task.context[-self.context_chars:] if self.context_chars else ""
        shown = f"\nThe end of the setup:\n{fenced(context, 'ocaml')}\n" if context.strip() else ""
        user = TEMPLATE.format(example_goal=EXAMPLE_GOAL, example_answer=fenced(EXAMPLE_TACTIC, "ocaml"),
                               context=shown, goal=task.statement)
        return [{"role": "system", "content": self.system_message()}, {"role": "user", "content": user}]


PROMPTS = HolLightPrompts()
