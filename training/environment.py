"""A ``check_proof`` tool for GRPO through TRL's ``environment_factory``.

With ``tool_env: true`` every rollout gets a :class:`CheckProofEnv`: the policy may call
``check_proof(proof)`` while it answers, and gets the verifier's verdict and messages back as
the tool's reply (TRL masks tool replies out of the loss). The reward is still the verdict of
the *final* answer (:class:`~proofgym.training.rewards.VerifierReward` reads the last message),
so probing with the tool costs nothing but tokens and a proof counts only once it is answered.

TRL parses tool calls only with a chat template it recognises (Qwen3's, for one:
``trl/chat_templates/qwen3.jinja``); GRPOTrainer refuses a template that cannot render a
tool-calling conversation.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from proofgym.envs.episode import Episode
from proofgym.envs.types import Task
from proofgym.envs.verifiers.pool import HarnessFailure


class CheckProofEnv:
    """One rollout's environment: the task from the row, and the ``check_proof`` tool.

    Args:
        tasks: Tasks by id (the dataset's ``task_id`` column names one).
        pool: The verifier pool (shared by every rollout; the caller owns it).
        max_calls: Tool calls allowed per rollout; later calls are answered without checking.
        feedback_chars: Longest verifier reply.
    """

    def __init__(self, tasks: Mapping[str, Task], pool: Any, *, max_calls: int = 4, feedback_chars: int = 1000) -> None:
        self._tasks = tasks
        self._pool = pool
        self._max_calls = int(max_calls)
        self._feedback_chars = int(feedback_chars)
        self._task: Task | None = None
        self._episode: Episode | None = None

    @property
    def calls(self) -> int:
        """Tool calls made in this rollout."""
        return self._episode.attempt if self._episode is not None else 0

    @property
    def verdicts(self) -> list[str | None]:
        """The verdict of each call (``None`` where the checker itself failed)."""
        turns = self._episode.turns if self._episode is not None else []
        return [None if t.verdict is None else t.verdict.value for t in turns]

    def reset(self, **row: Any) -> str | None:
        """Start a rollout on the row's task (TRL passes the dataset row as keywords)."""
        self._task = self._tasks[str(row["task_id"])]
        # Each call is an attempt of one episode; no verdict ends it (the final answer is scored elsewhere),
        # nor does a broken checker: only the call budget does.
        self._episode = Episode(self._task, max_attempts=max(1, self._max_calls), ends_on=frozenset(),
                                stop_on_failure=False, feedback_chars=self._feedback_chars)
        return None

    def check_proof(self, proof: str) -> str:
        """Check a proof of the current statement with the proof assistant, before giving the final answer.

        Args:
            proof: The proof script that follows the statement, from `Proof.` to `Qed.`.

        Returns:
            The verdict (OK, FAIL, CHEATING, TIMEOUT or ERROR) with the prover's messages and remaining goals.
        """
        if self._task is None or self._episode is None:
            return "No task: the environment was not reset."
        if self._episode.done or self._max_calls < 1:
            return f"No more checks: {self._max_calls} per answer. Give your final answer."
        outcome = self._pool.submit(self._task, proof).result()
        if isinstance(outcome.outcome, HarnessFailure):
            self._episode.fail(proof, str(outcome.outcome))
            return f"The checker itself failed ({outcome.outcome.boundary.value}); this says nothing about the proof."
        return self._episode.record(proof, outcome.outcome).feedback


def environment_factory(tasks: Mapping[str, Task], pool: Any, **options: Any) -> Callable[[], CheckProofEnv]:
    """The zero-argument factory TRL's ``GRPOTrainer(environment_factory=...)`` calls once per rollout slot."""

    def make() -> CheckProofEnv:
        return CheckProofEnv(tasks, pool, **options)

    return make
