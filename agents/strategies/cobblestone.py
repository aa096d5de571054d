"""Cobblestone (divide and conquer with partial progress) on any agent.

1. Hammer on the whole goal.
2. Sample ``samples`` whole proofs from the agent per invocation.
3. Fail-safe localization of each: the verified skeleton is kept and every failing
   part becomes a hole (Coq: ``admit.``; HOL Light: an open ``ALL_TAC`` goal) with its
   goal and proof-state id.
4. Recurse on the holes, hammer first there, then the agent on the hole's goal,
   up to ``max_depth``; the whole search is bounded by ``invocations`` agent calls.
5. Splice the successes back and re-check the final proof, with no placeholder
   left, by the verifier's whole-proof ``check``: only that verdict counts.

The agent is anything with ``act(observation) -> str`` (or a plain callable). For
a hole the observation's ``statement`` is the hole's goal as the prover prints it
(HOL Light: ``?- `goal``` under its numbered assumptions).

Both systems run the same search through a small backend: Coq works on sentences
(a hole is focused with ``{`` and filled with a braced block), HOL Light on tactic
expressions (a hole is an open goal of a replayed proof tree, filled by grafting a
tactic expression there; see ``envs/verifiers/hol_light/tactic.py``).

Coq's hammer (``sauto``) needs CoqHammer loaded. ``CoqVerifier(prelude=HAMMER_PRELUDE)`` loads
it *before* the context, which breaks a project's own sources (stdpp's ``fin_maps.v``: see
:mod:`proofgym.agents.symbolic`); ``hammer_after_context=True`` loads it after the context instead
(:func:`~proofgym.agents.symbolic.with_hammer_postlude`), as the project suites' symbolic baseline does.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from proofgym.agents.base import AgentError, Generation, ModelUnavailable, Request, SamplingParams
from proofgym.agents.prompts import prompts_for
from proofgym.agents.strategies.base import Strategy
from proofgym.agents.symbolic import with_hammer_postlude
from proofgym.envs.episode import Episode
from proofgym.envs.errors import ProofgymError
from proofgym.envs.parsing import parse_proof, statement_to_strip
from proofgym.envs.systems import SPECS
from proofgym.envs.types import CheckResult, Task, Verdict
from proofgym.envs.verifiers.coq import tactic as coq_tactic
from proofgym.envs.verifiers.hol_light import tactic as hol_tactic

#: Hammer tactics tried first (on the whole goal, then on every hole), per system: each spec's ``hammers``.
HAMMER_TACTICS: dict[str, tuple[str, ...]] = {name: s.hammers for name, s in SPECS.items() if s.hammers}


@dataclass(frozen=True)
class CobblestoneConfig:
    """Bounds and tactics (defaults from the paper: depth 5, 5 invocations of 4 samples)."""

    max_depth: int = 5
    invocations: int = 5
    samples: int = 4
    hammer_tactics: tuple[str, ...] | None = None  # None: HAMMER_TACTICS[task.system]; () to skip
    hammer_timeout_s: float = 10.0
    #: Coq: load CoqHammer and Lia after each task's context (the task searched and checked is the one
    #: with the postlude), for a verifier without ``HAMMER_PRELUDE``, whose prelude breaks project sources.
    hammer_after_context: bool = False

    def hammers(self, system: str) -> tuple[str, ...]:
        return HAMMER_TACTICS.get(system, ()) if self.hammer_tactics is None else tuple(self.hammer_tactics)


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
    first_sample: str | None = None  # the agent's first whole proof, as it wrote it
    last_candidate: str | None = None  # the last proof given the final check

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
        self._episode: Episode  # the final checks of the task being solved (set by solve)

    def solve(self, task: Task) -> CobblestoneResult:
        if self.config.hammer_after_context:
            task = with_hammer_postlude(task)
        report = CobblestoneResult(task.id)
        start = time.monotonic()
        backend = _BACKENDS.get(task.system)
        if backend is None:
            raise ValueError(f"Cobblestone has no backend for {task.system!r}; known: {', '.join(_BACKENDS)}")
        # The final checks are the episode's attempts: every candidate without a placeholder is one,
        # and an OK ends it (the hammer's, then at most one per sample).
        self._episode = Episode(task, max_attempts=1 + self.config.invocations * max(1, self.config.samples))
        try:
            with self.verifier.open(task) as session:
                self._solve(task, backend(session), report)
        finally:
            report.wall_s = time.monotonic() - start
        return report

    # -- the search --------------------------------------------------------------------------------
    def _solve(self, task: Task, backend: _Backend, report: CobblestoneResult) -> None:
        hammered = self._hammer(task, backend, None, report)
        if hammered is not None and self._final(task, backend.root_script(hammered), report):
            report.solved_by = "hammer"
            return
        feedback = ""
        while report.invocations_used < self.config.invocations:
            report.invocations_used += 1
            first_invocation = report.invocations_used == 1
            skeletons: list[Any] = []
            for k in range(self.config.samples):
                proof = _act(self.agent, self._observation(task, task.statement, k, feedback))
                report.samples_used += 1
                if report.first_sample is None:
                    report.first_sample = proof
                loc = backend.localize(proof, None)
                if loc.rejected:
                    report.trace.append(f"sample rejected: {loc.rejected[:80]}")
                    continue
                if loc.complete:
                    if self._final(task, backend.root_script(backend.fragment(loc, None)), report):
                        report.solved_by = "one_invocation" if first_invocation else "recursion"
                        return
                    continue
                if loc.final_state is not None or loc.holes:
                    skeletons.append(loc)
                    if loc.holes:
                        feedback = loc.holes[0].error
            for loc in sorted(skeletons, key=lambda item: len(item.holes)):
                fills = self._fill(task, backend, loc.holes, depth=1, report=report)
                if fills is not None and self._final(task, backend.root_script(backend.fragment(loc, fills)), report):
                    report.solved_by = "recursion"
                    return
                if report.invocations_used >= self.config.invocations:
                    break

    def _fill(self, task: Task, backend: _Backend, holes: list[Any], depth: int,
              report: CobblestoneResult) -> dict[int, Any] | None:
        """A proof for every hole, or None."""
        report.max_depth_reached = max(report.max_depth_reached, depth)
        fills: dict[int, Any] = {}
        for hole in holes:
            report.holes_seen += 1
            sub = self._prove_hole(task, backend, hole, depth, report)
            if sub is None:
                return None
            fills[hole.index] = sub
        return fills

    def _prove_hole(self, task: Task, backend: _Backend, hole: Any, depth: int, report: CobblestoneResult) -> Any:
        where = backend.enter(hole)
        if where is None:
            return None
        hammered = self._hammer(task, backend, where, report)
        if hammered is not None:
            return hammered
        if depth >= self.config.max_depth:
            return None
        goal_text = backend.goal_text(hole)
        while report.invocations_used < self.config.invocations:
            report.invocations_used += 1
            for k in range(self.config.samples):
                proof = _act(self.agent, self._observation(task, goal_text, k, hole.error, hole=True))
                report.samples_used += 1
                loc = backend.localize(proof, where)
                if loc.rejected:
                    continue
                if loc.complete:
                    return backend.fragment(loc, None)
                if loc.holes:
                    fills = self._fill(task, backend, loc.holes, depth + 1, report)
                    if fills is not None:
                        candidate = backend.fragment(loc, fills)
                        if backend.closes(hole, candidate):
                            return candidate
            return None
        return None

    def _hammer(self, task: Task, backend: _Backend, where: Any, report: CobblestoneResult) -> Any:
        for tactic in self.config.hammers(task.system):
            report.hammer_calls += 1
            found = backend.hammer(tactic, where, self.config.hammer_timeout_s)
            if found is not None:
                return found
        return None

    def _final(self, task: Task, proof: str | None, report: CobblestoneResult) -> bool:
        if proof is None or "admit." in proof.split() or self._episode.done:
            return False  # never: a placeholder left in means not solved
        report.last_candidate = proof
        result = self._episode.submit(proof, self.verifier).result
        assert result is not None  # noqa: S101 - submit raises on a harness failure, it records none
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


# -- per-system backends -----------------------------------------------------------------------------
# ``where`` is the place a proof goes: None for the task's goal, else what ``enter(hole)`` returned.
# A fragment proves one hole: a list of sentences (Coq) or a tactic expression (HOL Light).

class _Backend:
    def __init__(self, session: Any) -> None:
        self.session = session

    def hammer(self, tactic: str, where: Any, timeout_s: float) -> Any:
        raise NotImplementedError

    def root_script(self, fragment: Any) -> str | None:
        raise NotImplementedError

    def localize(self, proof: str, where: Any) -> Any:
        raise NotImplementedError

    def enter(self, hole: Any) -> Any:
        raise NotImplementedError

    def fragment(self, loc: Any, fills: dict[int, Any] | None) -> Any:
        raise NotImplementedError

    def closes(self, hole: Any, fragment: Any) -> bool:
        raise NotImplementedError

    def goal_text(self, hole: Any) -> str:
        return hole.goal.pretty()


class _CoqBackend(_Backend):
    """Sentences: a hole is focused with ``{`` and filled with a braced block."""

    def hammer(self, tactic: str, where: int | None, timeout_s: float) -> list[str] | None:
        session = self.session
        result = session.run(tactic, session.root if where is None else where, timeout_s=timeout_s)
        if not result.ok:
            return None
        if where is not None and not result.state.goals and session.run_sentences(["}"], result.state.state_id).ok:
            return [f"({tactic.rstrip('.')})."]
        if where is None and result.state.finished:
            return [f"({tactic.rstrip('.')})."]
        return None

    def root_script(self, fragment: list[str]) -> str:
        return "Proof.\n" + "\n".join(fragment) + "\nQed."

    def localize(self, proof: str, where: int | None) -> coq_tactic.Localization:
        if where is None:
            return coq_tactic.localize(self.session, proof)
        return coq_tactic.localize(self.session, proof, at=where, focus=True)

    def enter(self, hole: coq_tactic.Hole) -> int | None:
        opened = self.session.run_sentences(["{"], hole.state_id)
        return opened.state.state_id if opened.ok else None

    def fragment(self, loc: coq_tactic.Localization, fills: dict[int, list[str]] | None) -> list[str]:
        return loc.sentences if fills is None else loc.spliced(fills)

    def closes(self, hole: coq_tactic.Hole, fragment: list[str]) -> bool:
        return self.session.run_sentences(["{", *fragment, "}"], hole.state_id).ok


class _HolLightBackend(_Backend):
    """Tactic expressions: a hole is an open goal of a proof tree, filled by grafting a tactic there."""

    def hammer(self, tactic: str, where: tuple[int, int] | None, timeout_s: float) -> str | None:
        state_id, goal = (self.session.root, 0) if where is None else where
        if self._closes(state_id, goal, tactic, timeout_s):
            return tactic
        return None

    def root_script(self, fragment: str | None) -> str | None:
        return fragment  # None: a hole was left without a proof

    def localize(self, proof: str, where: tuple[int, int] | None) -> hol_tactic.HolLocalization:
        state_id, goal = (self.session.root, 0) if where is None else where
        return hol_tactic.localize(self.session, proof, at=state_id, goal=goal)

    def enter(self, hole: hol_tactic.HolHole) -> tuple[int, int]:
        return hole.state_id, hole.goal_index

    def fragment(self, loc: hol_tactic.HolLocalization, fills: dict[int, str] | None) -> str | None:
        if fills is not None and set(fills) != {h.index for h in loc.holes}:
            return None  # a hole without a proof would stay an open ALL_TAC goal
        return loc.expression(fills)

    def closes(self, hole: hol_tactic.HolHole, fragment: str | None) -> bool:
        return fragment is not None and self._closes(hole.state_id, hole.goal_index, fragment, None)

    def goal_text(self, hole: hol_tactic.HolHole) -> str:
        return hol_tactic.hol_goal_text(hole.goal)

    def _closes(self, state_id: int, goal: int, tactic: str, timeout_s: float | None) -> bool:
        before = len(self.session.state(state_id).goals)
        result = self.session.run(tactic, state_id, timeout_s=timeout_s, goal=goal)
        return result.ok and len(result.state.goals) == before - 1


_BACKENDS: dict[str, type[_Backend]] = {"coq": _CoqBackend, "hol_light": _HolLightBackend}


# -- as an evaluation strategy ------------------------------------------------------------------------
class _PromptedAgent:
    """``act(observation) -> proof`` for Cobblestone from an evaluation :class:`~proofgym.agents.base.Agent`.

    Each observation (the task's goal, or a hole's) becomes the system's zero-shot prompt with that
    goal as the statement, plus the last error when there is one; the reply is parsed like any
    other. Tokens, cost and seconds add up over the search.
    """

    def __init__(self, agent: Any, task: Task, sample: int, sampling: Any, context_chars: int) -> None:
        self.agent, self.task, self.sample, self.sampling = agent, task, sample, sampling
        self.context_chars = context_chars
        self.calls = 0
        self.prompt_tokens = self.completion_tokens = 0
        self.cost_usd: float | None = None
        self.seconds = 0.0

    def act(self, observation: dict[str, Any]) -> str:
        goal = dataclasses.replace(self.task, statement=str(observation["statement"]))
        prompts = prompts_for(self.task.system)
        context = self.task.context[-self.context_chars:] if self.context_chars else ""
        messages = list(prompts.messages(goal, context=context))
        if observation.get("feedback"):
            messages[-1] = {**messages[-1], "content": messages[-1]["content"] + "\n\nAn earlier attempt failed "
                            "with:\n" + str(observation["feedback"])[:1000]}
        request = Request(tuple(messages), task=goal, sample=self.sample, attempt=self.calls,
                          sampling=self.sampling)
        self.calls += 1
        generation = self.agent.generate([request])[0]
        self.prompt_tokens += generation.prompt_tokens
        self.completion_tokens += generation.completion_tokens
        self.seconds += generation.seconds
        if generation.cost_usd is not None:
            self.cost_usd = (self.cost_usd or 0.0) + generation.cost_usd
        if generation.error is not None:
            raise AgentError(generation.error)
        if generation.is_proof:
            return generation.text
        return parse_proof(generation.text, statement=statement_to_strip(goal)).proof


class CobblestoneStrategy(Strategy):
    """Cobblestone as an evaluation strategy (``proofgym eval --strategy cobblestone --set samples=4``).

    Each episode is one search (hammer, whole-proof samples, fail-safe localization on tactic
    sessions, recursion on the holes), run with the evaluation's agent on a verifier in this
    process (tactic sessions cannot cross the pool's process boundary). The episode's one
    attempt is the proof the search found (else its last candidate, else the agent's first
    sample), checked by the env on the pool like every other strategy's: only that verdict counts.

    Args:
        max_depth: Deepest recursion on holes (paper: 5).
        invocations: Agent invocations per task (paper: 5).
        samples: Whole proofs per invocation (paper: 4).
        hammer_tactics: Tactics tried first on every goal; default: the system's hammers
            (:mod:`proofgym.envs.systems`; Coq's ``sauto.`` needs CoqHammer loaded in the
            verifier's prelude, which ``proofgym eval`` does not load: set ``hammer_after_context``, or
            pass e.g. ``["auto.", "lia."]``).
        hammer_timeout_s: Seconds per hammer call.
        hammer_after_context: Coq: load CoqHammer and Lia after each task's context, so that the
            default ``sauto.`` runs in ``proofgym eval`` (whose verifiers load no prelude) on any suite,
            a project's too (``--set hammer_after_context=true``). The evaluated tasks are then the
            suite's with that postlude, and the env checks them so; the leak check still applies (on
            coq-stdlib, CoqHammer's Requires can load a task's original file, and a proof that uses it
            is CHEATING).
        temperature: Sampling temperature of the search's requests (``None``: the agent's own).
        context_chars: How much of the end of the task's context the prompts show.
    """

    name = "cobblestone"
    max_attempts = 1

    def __init__(self, max_depth: int = 5, invocations: int = 5, samples: int = 4,
                 hammer_tactics: Sequence[str] | None = None, hammer_timeout_s: float = 10.0,
                 hammer_after_context: bool | str = False, temperature: float | None = None,
                 context_chars: int = 2000) -> None:
        super().__init__()
        if min(int(max_depth), int(invocations), int(samples)) < 1:
            raise ValueError("max_depth, invocations and samples must be >= 1")
        self.config = CobblestoneConfig(max_depth=int(max_depth), invocations=int(invocations), samples=int(samples),
                                        hammer_tactics=None if hammer_tactics is None else tuple(hammer_tactics),
                                        hammer_timeout_s=float(hammer_timeout_s),
                                        hammer_after_context=_flag(hammer_after_context))
        self.temperature = temperature
        self.context_chars = int(context_chars)
        self.reports: dict[tuple[str, int], dict[str, Any]] = {}

    def prepare(self, tasks: Sequence[Task], runtime: Any) -> list[Task]:
        systems = sorted({t.system for t in tasks} - set(_BACKENDS))
        if systems:
            raise ProofgymError(f"Cobblestone searches on tactic sessions of {', '.join(sorted(_BACKENDS))}; "
                                f"this suite has tasks of {', '.join(systems)}")
        if self.config.hammer_after_context:  # the env's check must load what the search's hammer used
            return [with_hammer_postlude(t) for t in tasks]
        return list(tasks)

    def request(self, task: Task, sample: int, history: Sequence[Any]) -> Any:
        if history:
            return None
        return Request((), task=task, sample=sample, attempt=0)  # the search writes its own prompts

    def generate(self, runtime: Any, requests: Sequence[Any]) -> list[Any]:
        return [self._search(runtime, request) for request in requests]

    def _search(self, runtime: Any, request: Any) -> Any:
        task = request.task
        sampling = None if self.temperature is None else SamplingParams(temperature=float(self.temperature))
        agent = _PromptedAgent(runtime.agent, task, request.sample, sampling, self.context_chars)
        error = None
        try:
            report = Cobblestone(runtime.verifier(task.system), agent, self.config).solve(task)
        except ModelUnavailable:
            raise
        except AgentError as exc:
            error, report = str(exc), None
        usage = {"prompt_tokens": agent.prompt_tokens, "completion_tokens": agent.completion_tokens,
                 "cost_usd": agent.cost_usd, "seconds": agent.seconds}
        if report is None:
            return Generation("", error=f"cobblestone: {error}", **usage)
        self.reports[(task.id, request.sample)] = report.to_dict()
        proof = report.proof if report.solved else (report.last_candidate or report.first_sample or "")
        return Generation(proof, is_proof=True, finish_reason=f"cobblestone:{report.solved_by or 'unsolved'}",
                          **usage)

    def describe(self) -> dict[str, Any]:
        config = dataclasses.asdict(self.config)
        if not config["hammer_after_context"]:  # only when set: older runs still resume as the same run
            del config["hammer_after_context"]
        return {**super().describe(), **config, "temperature": self.temperature, "context_chars": self.context_chars}


def _flag(value: bool | str) -> bool:
    if isinstance(value, str):
        if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
            raise ProofgymError(f"expected true or false, got {value!r}")
        return value.lower() in ("true", "1", "yes")
    return bool(value)


#: ``make_strategy("cobblestone", samples=4)`` builds the evaluation strategy.
STRATEGY = CobblestoneStrategy
