"""Hammer-style symbolic baselines: no model, only the provers' own automation.

Coq: CoqHammer's ``sauto`` (and ``hammer``, whose failures cost ~46 s, so it is off
by default) need CoqHammer loaded: the verifier's ``prelude=HAMMER_PRELUDE`` (before the
context), or :func:`with_hammer_postlude` (after it); plain-Coq automation (``auto``,
``intuition``, ``congruence``, ``firstorder``) needs nothing.

Before or after the context. Imported before a project's own sources, CoqHammer changes
how their proofs run: in front of stdpp's ``fin_maps.v`` (under plain ``coqc`` too)
``elem_of_list_to_map_1'`` fails with "Incorrect number of goals", so that file's later
lemmas are missing and every task whose context goes past it "does not load". Loaded
after the context it changes nothing the context states, so a project suite (coq-stdpp,
coq-iris, coq-mathcomp) loads it there. The price: each task's context is its own (a
file's warm session cannot be extended from one lemma to the next).
HOL Light: ``MESON_TAC[]``, ``ARITH_TAC``, ``ASM_MESON_TAC[]``.

In ``WholeProof-v0`` the agent submits one proof that tries the candidates in turn.
In ``Tactic-v0`` it proposes the next untried candidate for the observed state, so a
failed candidate (the env keeps the state) is followed by the next one.

``candidate_timeout_s`` bounds each Coq candidate with Coq's own ``timeout`` tactic: a
candidate that runs long then *fails*, and the next one is tried, instead of one slow
``sauto`` using the whole check's budget (a TIMEOUT verdict, which also costs the warm
session: the verifier restarts it).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from proofgym.envs.types import Task

COQ_PLAIN = ("auto.", "intuition.", "congruence.", "firstorder.", "trivial.")
COQ_HAMMER = ("sauto.",)
HOL_LIGHT = ("MESON_TAC[]", "ARITH_TAC", "ASM_MESON_TAC[]")
#: Appended to a Coq task's context to load CoqHammer's tactics (``sauto``...) and Lia after it.
HAMMER_POSTLUDE = "From Hammer Require Import Tactics.\nFrom Coq Require Import Lia.\n"


def with_hammer_postlude(task: Task) -> Task:
    """``task`` with CoqHammer's tactics and Lia loaded after its context (the context itself unchanged).

    A task of another system, or one whose context already ends with the postlude, is returned as it is.
    """
    if task.system != "coq" or task.context.endswith(HAMMER_POSTLUDE):
        return task
    sep = "" if not task.context or task.context.endswith("\n") else "\n"
    return replace(task, context=task.context + sep + HAMMER_POSTLUDE)


class SymbolicAgent:
    """A baseline policy of prover automation, for both environments.

    Args:
        system: ``coq`` or ``hol_light`` (the observation's ``system`` wins when present).
        hammer: Use CoqHammer tactics (CoqHammer must be loaded: ``HAMMER_PRELUDE`` or :func:`with_hammer_postlude`).
        full_hammer: Also try ``hammer.`` (slow when it fails).
        tactics: Replace the default candidate list.
        candidate_timeout_s: Coq: wrap each candidate in ``timeout N`` (0: no bound of its own).
    """

    name = "symbolic"

    def __init__(self, system: str = "coq", *, hammer: bool = False, full_hammer: bool = False,
                 tactics: Sequence[str] | None = None, candidate_timeout_s: int = 0) -> None:
        if candidate_timeout_s < 0:
            raise ValueError(f"candidate_timeout_s must be >= 0, got {candidate_timeout_s}")
        self.system = system
        self.candidate_timeout_s = int(candidate_timeout_s)
        self.hammer = hammer
        self.full_hammer = full_hammer
        self._custom = tuple(tactics) if tactics else None
        self._tried: dict[tuple[str, int], int] = defaultdict(int)

    def candidates(self, system: str | None = None) -> tuple[str, ...]:
        if self._custom:
            return self._custom
        system = system or self.system
        if system == "hol_light":
            return HOL_LIGHT
        extra = COQ_HAMMER + (("hammer.",) if self.full_hammer else ()) if self.hammer else ()
        return extra + COQ_PLAIN

    def whole_proof(self, system: str | None = None) -> str:
        """One proof that tries every candidate (``FIRST [...]`` in HOL Light)."""
        cands = self.candidates(system)
        if (system or self.system) == "hol_light":
            return "FIRST [" + "; ".join(cands) + "]"
        bound = f"timeout {self.candidate_timeout_s} " if self.candidate_timeout_s else ""
        alternatives = " | ".join(f"solve [{bound}{c.rstrip('.')}]" for c in cands)
        return f"Proof. intros; first [ {alternatives} ]. Qed."

    def act(self, observation: dict[str, Any]) -> str:
        system = str(observation.get("system") or self.system)
        if "goals" in observation and "state_id" in observation:  # Tactic-v0
            key = (str(observation.get("task_id", "")), int(observation["state_id"]))
            cands = self.candidates(system)
            i = self._tried[key]
            self._tried[key] += 1
            return cands[i % len(cands)]
        return self.whole_proof(system)

    def act_batch(self, observations: Sequence[dict[str, Any]]) -> list[str]:
        return [self.act(o) for o in observations]
