"""Cobblestone (divide and conquer with partial progress) on any agent.

1. Hammer on the whole goal.
2. Sample ``samples`` whole proofs from the agent per invocation.
3. Fail-safe localization of each: the verified skeleton is kept and every failing
   part becomes a hole (``admit.``) with its goal and proof-state id.
4. Recurse on the holes, hammer first there, then the agent on the hole's goal,
   up to ``max_depth``; the whole search is bounded by ``invocations`` agent calls.
5. Splice the successes back and re-check the final proof, with no placeholder
   left, by the verifier's whole-proof ``check``: only that verdict counts.

The agent is anything with ``act(observation) -> str`` (or a plain callable). For
a hole the observation's ``statement`` is the hole's goal as Coq prints it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from proofgym.envs.types import CheckResult, Task, Verdict
from proofgym.envs.verifiers.coq_tactic import Hole, Localization, localize


@dataclass(frozen=True)
class CobblestoneConfig:
    """Bounds and tactics (defaults from the paper: depth 5, 5 invocations of 4 samples)."""

    max_depth: int = 5
    invocations: int = 5
    samples: int = 4
    hammer_tactics: tuple[str, ...] = ("sauto.",)  # needs the verifier's HAMMER_PRELUDE; () to skip
    hammer_timeout_s: float = 10.0


@dataclass
class CobblestoneResult:
    """What Cobblestone reports for one task."""

    task_id: str
    solved: bool = False
    proof: str | None = None
    result: CheckResult | None = None
    solved_by: str | None = None  # "hammer", "one_invocation" or "recursion"
    samples_used: int = 0
    invocations_used: int = 0
    hammer_calls: int = 0
    holes_seen: int = 0
    max_depth_reached: int = 0
    wall_s: float = 0.0
    trace: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id, "solved": self.solved, "solved_by": self.solved_by,
            "verdict": self.result.verdict.value if self.result else None, "samples_used": self.samples_used,
            "invocations_used": self.invocations_used, "hammer_calls": self.hammer_calls,
            "holes_seen": self.holes_seen, "max_depth_reached": self.max_depth_reached,
            "wall_s": round(self.wall_s, 3),
        }


def _act(agent: Any, observation: dict[str, Any]) -> str:
    if hasattr(agent, "act"):
        return agent.act(observation)
    if callable(agent):
        return agent(observation)
    raise TypeError("the agent needs act(observation) -> str or to be callable")


class Cobblestone:
    """Run Cobblestone with ``agent`` on a verifier that has tactic mode (``open``)."""

    def __init__(self, verifier: Any, agent: Any | Callable[[dict[str, Any]], str],
                 config: CobblestoneConfig | None = None) -> None:
        self.verifier = verifier
        self.agent = agent
        self.config = config or CobblestoneConfig()

    def solve(self, task: Task) -> CobblestoneResult:
        report = CobblestoneResult(task.id)
        start = time.monotonic()
        try:
            with self.verifier.open(task) as session:
                self._solve(task, session, report)
        finally:
            report.wall_s = time.monotonic() - start
        return report

    # -- the search --------------------------------------------------------------------------------
    def _solve(self, task: Task, session: Any, report: CobblestoneResult) -> None:
        hammered = self._hammer(session, session.root, report, focused=False)
        if hammered is not None and self._final(task, "Proof.\n" + "\n".join(hammered) + "\nQed.", report):
            report.solved_by = "hammer"
            return
        feedback = ""
        while report.invocations_used < self.config.invocations:
            report.invocations_used += 1
            first_invocation = report.invocations_used == 1
            skeletons: list[Localization] = []
            for k in range(self.config.samples):
                proof = _act(self.agent, self._observation(task, task.statement, k, feedback))
                report.samples_used += 1
                loc = localize(session, proof)
                if loc.rejected:
                    report.trace.append(f"sample rejected: {loc.rejected[:80]}")
                    continue
                if loc.complete:
                    if self._final(task, loc.script(), report):
                        report.solved_by = "one_invocation" if first_invocation else "recursion"
                        return
                    continue
                if loc.final_state is not None or loc.holes:
                    skeletons.append(loc)
                    if loc.holes:
                        feedback = loc.holes[0].error
            for loc in sorted(skeletons, key=lambda item: len(item.holes)):
                fills = self._fill(task, session, loc.holes, depth=1, report=report)
                if fills is not None and self._final(task, loc.script(fills), report):
                    report.solved_by = "recursion"
                    return
                if report.invocations_used >= self.config.invocations:
                    break

    def _fill(self, task: Task, session: Any, holes: list[Hole], depth: int,
              report: CobblestoneResult) -> dict[int, list[str]] | None:
        """A proof for every hole, or None."""
        report.max_depth_reached = max(report.max_depth_reached, depth)
        fills: dict[int, list[str]] = {}
        for hole in holes:
            report.holes_seen += 1
            sub = self._prove_hole(task, session, hole, depth, report)
            if sub is None:
                return None
            fills[hole.index] = sub
        return fills

    def _prove_hole(self, task: Task, session: Any, hole: Hole, depth: int,
                    report: CobblestoneResult) -> list[str] | None:
        opened = session.run_sentences(["{"], hole.state_id)
        if not opened.ok:
            return None
        inside = opened.state.state_id
        hammered = self._hammer(session, inside, report, focused=True)
        if hammered is not None:
            return hammered
        if depth >= self.config.max_depth:
            return None
        goal_text = hole.goal.pretty()
        while report.invocations_used < self.config.invocations:
            report.invocations_used += 1
            for k in range(self.config.samples):
                proof = _act(self.agent, self._observation(task, goal_text, k, hole.error, hole=True))
                report.samples_used += 1
                loc = localize(session, proof, at=inside, focus=True)
                if loc.rejected:
                    continue
                if loc.complete:
                    return loc.sentences
                if loc.holes:
                    fills = self._fill(task, session, loc.holes, depth + 1, report)
                    if fills is not None:
                        candidate = loc.spliced(fills)
                        if session.run_sentences(["{", *candidate, "}"], hole.state_id).ok:
                            return candidate
            return None
        return None

    def _hammer(self, session: Any, state_id: int, report: CobblestoneResult, *, focused: bool) -> list[str] | None:
        for tactic in self.config.hammer_tactics:
            report.hammer_calls += 1
            result = session.run(tactic, state_id, timeout_s=self.config.hammer_timeout_s)
            if not result.ok:
                continue
            if focused and not result.state.goals and session.run_sentences(["}"], result.state.state_id).ok:
                return [f"({tactic.rstrip('.')})."]
            if not focused and result.state.finished:
                return [f"({tactic.rstrip('.')})."]
        return None

    def _final(self, task: Task, proof: str, report: CobblestoneResult) -> bool:
        if "admit." in proof.split():
            return False  # never: a placeholder left in means not solved
        result = self.verifier.check(task, proof)
        report.trace.append(f"final check: {result.verdict.value}")
        if result.verdict is Verdict.OK:
            report.solved, report.proof, report.result = True, proof, result
            return True
        report.result = result
        return False

    def _observation(self, task: Task, statement: str, sample: int, feedback: str, hole: bool = False) -> dict:
        return {
            "task_id": task.id + ("#hole" if hole else ""),
            "system": task.system,
            "statement": statement,
            "description": "Prove this subgoal; the hypotheses are above the line." if hole else
            str(task.metadata.get("description", "")),
            "context": task.context[-2000:],
            "feedback": feedback,
            "attempt": 0,
            "sample": sample,
        }
