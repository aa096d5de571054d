"""The strategy contract, and the plain strategy (zero-shot, optional repair rounds with feedback).

A strategy drives episodes with any agent: for a task and a sample it says
what to ask next given the attempts so far (:meth:`Strategy.request`), and
how to read a reply as a proof (:meth:`Strategy.parse`). Before the run it may
prepare (:meth:`Strategy.prepare`): pick demonstrations, build a retrieval
index, generate and verify fixing demonstrations. The evaluation loop
(:func:`proofgym.training.evaluate.run_eval`) owns batching, verification (each
episode runs in a ``proofgym/WholeProof-v0`` env), records and resumption.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proofgym.agents.base import Agent, Generation, Request
from proofgym.agents.prompts import prompts_for
from proofgym.envs.parsing import parse_proof, statement_to_strip
from proofgym.envs.types import CheckResult, Task


@dataclass(frozen=True)
class Attempt:
    """One attempt of an episode: what was asked, what came back, and the verifier's verdict.

    Attributes:
        proof: The text sent to the verifier.
        raw: The model's reply.
        result: The verifier's :class:`CheckResult` (a results row is made from it only when the row is written).
        generation: Token counts, cost and timing (``Generation.info()``).
        messages: The request's chat messages.
        parse_notes: What the parser did.
    """

    proof: str
    raw: str
    result: CheckResult
    generation: dict[str, Any] = field(default_factory=dict)
    messages: tuple[Any, ...] = ()
    parse_notes: tuple[str, ...] = ()

    @property
    def verdict(self) -> str:
        return self.result.verdict.value

    @property
    def ok(self) -> bool:
        return self.result.ok


@dataclass
class Runtime:
    """What a strategy may use: the agent, the verifier, and a folder for its cache.

    ``check`` verifies ``(task, proof)`` pairs and returns result dicts like the
    evaluation's (``verdict``, ``reasons``, ``messages``, ``feedback``...).
    ``open_verifier(system)`` makes a verifier in this process (for tactic sessions,
    which cannot cross the pool's process boundary); :meth:`verifier` keeps one per
    system and :meth:`close` closes them.
    """

    agent: Agent
    check: Callable[[Sequence[tuple[Task, str]]], list[dict[str, Any]]]
    cache_dir: Path | None = None
    setup_cost: dict[str, float] = field(default_factory=lambda: {"prompt_tokens": 0, "completion_tokens": 0,
                                                                  "verifier_calls": 0})
    open_verifier: Callable[[str], Any] | None = None
    _verifiers: dict[str, Any] = field(default_factory=dict, repr=False)

    def verifier(self, system: str) -> Any:
        """This process's verifier for ``system`` (made on first use, closed by :meth:`close`)."""
        if system not in self._verifiers:
            if self.open_verifier is None:
                from proofgym.envs.verifiers.base import make_verifier

                self._verifiers[system] = make_verifier(system)
            else:
                self._verifiers[system] = self.open_verifier(system)
        return self._verifiers[system]

    def close(self) -> None:
        for verifier in self._verifiers.values():
            verifier.close()
        self._verifiers.clear()

    def generate(self, requests: Sequence[Request]) -> list[Generation]:
        gens = self.agent.generate(requests)
        for gen in gens:
            self.setup_cost["prompt_tokens"] += gen.prompt_tokens
            self.setup_cost["completion_tokens"] += gen.completion_tokens
        return gens

    def verify(self, pairs: Sequence[tuple[Task, str]]) -> list[dict[str, Any]]:
        self.setup_cost["verifier_calls"] += len(pairs)
        return self.check(pairs)


class Strategy:
    """Base class: one zero-shot attempt per sample; subclasses add demonstrations and repair.

    Attributes:
        name: Registry name (``plain``, ``selene``...).
        max_attempts: Most attempts in one episode.
        notes: Lines for the run's summary (e.g. that a result is an upper bound).
        upper_bound: Whether the strategy uses the reference proof (results are then an upper bound).
    """

    name = "strategy"
    max_attempts = 1
    upper_bound = False

    def __init__(self) -> None:
        self.notes: list[str] = []

    def prepare(self, tasks: Sequence[Task], runtime: Runtime) -> list[Task]:
        """Get ready for ``tasks``; return the tasks to evaluate (demonstrations may be taken out)."""
        return list(tasks)

    def request(self, task: Task, sample: int, history: Sequence[Attempt]) -> Request | None:
        """The next request of this episode, or ``None`` when it is over."""
        raise NotImplementedError

    def generate(self, runtime: Runtime, requests: Sequence[Request]) -> list[Generation]:
        """The replies to ``requests`` (one per request, in order): the agent's batch.

        A strategy that searches before it answers (Cobblestone) runs its search here and
        returns the proof it found as the reply; the env checks that proof like any other.
        """
        return runtime.agent.generate(requests)

    def parse(self, task: Task, generation: Generation) -> tuple[str, tuple[str, ...]]:
        """The proof in a reply, and the parser's notes."""
        if generation.is_proof:
            return generation.text, ()
        parsed = parse_proof(generation.text, statement=statement_to_strip(task))
        return parsed.proof, parsed.notes

    def describe(self) -> dict[str, Any]:
        """The strategy's settings, for config.json (and for checking that a resumed run is the same run)."""
        return {"name": self.name, "max_attempts": self.max_attempts}


class PlainStrategy(Strategy):
    """The system's zero-shot prompt; with ``attempts > 1``, repair rounds that show the verifier's feedback.

    Args:
        attempts: Attempts per episode (1: no repair).
        context_chars: How much of the end of the task's context the prompt shows.
    """

    name = "plain"

    def __init__(self, attempts: int = 1, context_chars: int = 2000) -> None:
        super().__init__()
        if attempts < 1:
            raise ValueError(f"attempts must be >= 1, got {attempts}")
        self.max_attempts = int(attempts)
        self.context_chars = int(context_chars)

    def request(self, task: Task, sample: int, history: Sequence[Attempt]) -> Request | None:
        if len(history) >= self.max_attempts or (history and history[-1].ok):
            return None
        prompts = prompts_for(task.system)
        context = task.context[-self.context_chars:] if self.context_chars else ""
        messages = list(prompts.messages(task, context=context))
        for attempt in history:
            messages.append({"role": "assistant", "content": attempt.raw})
            messages.append({"role": "user", "content": prompts.repair(attempt.result.feedback())})
        return Request(tuple(messages), task=task, sample=sample, attempt=len(history))

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "context_chars": self.context_chars}
