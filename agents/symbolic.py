"""Hammer-style symbolic baselines: no model, only the provers' own automation.

Coq: CoqHammer's ``sauto`` (and ``hammer``, whose failures cost ~46 s, so it is off
by default) need the verifier's ``prelude=HAMMER_PRELUDE``; plain-Coq automation
(``auto``, ``intuition``, ``congruence``, ``firstorder``) needs nothing.
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
from typing import Any

COQ_PLAIN = ("auto.", "intuition.", "congruence.", "firstorder.", "trivial.")
COQ_HAMMER = ("sauto.",)
HOL_LIGHT = ("MESON_TAC[]", "ARITH_TAC", "ASM_MESON_TAC[]")


class SymbolicAgent:
    """A baseline policy of prover automation, for both environments.

    Args:
        system: ``coq`` or ``hol_light`` (the observation's ``system`` wins when present).
        hammer: Use CoqHammer tactics (the verifier must load ``HAMMER_PRELUDE``).
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
