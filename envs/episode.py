"""The one episode loop: attempt -> verifier result -> feedback -> done, under a turn budget.

Every place that lets a policy try, read the verifier's answer and try again drives an
:class:`Episode`: ``WholeProofEnv.step`` (and so ``proofgym eval``, which runs its episodes
through the env), GRPO's repair rollout and ``check_proof`` tool env, SkillForge and Cobblestone. The
episode holds the rules they share: what a non-text action gets (an ``ERROR`` verdict, never
an exception), the reward of a verdict, the feedback the next turn shows, which verdicts end
the episode, and when the budget is spent. What to try next stays each caller's own logic.

The check itself is the caller's: :meth:`Episode.submit` runs it with a verifier, and
:meth:`Episode.record` takes a result checked elsewhere (a batch on the verifier pool, as a
TRL rollout checks a whole generation batch at once). A harness failure is not a verdict:
:meth:`Episode.fail` records it without a reward, and by default it ends the episode.

:class:`TaskSet` is the tasks an env or an evaluation runs: loaded once (a suite name or
path, or a list), ids unique, a task drawn by id or with the env's ``np_random``.

The TRL repair rollout (``training/rollout.py``) drives one episode per prompt:
``Episode(task, max_attempts=max_turns, ends_on=FINAL_VERDICTS)`` with the reward's shaped reward
as ``reward_map``; each turn it ``record``s the pool's result for that prompt (or ``fail``s on a
harness failure), stops generating for it once ``done``, and words ``episode.feedback`` as the
next user turn.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from proofgym.envs.errors import TaskFormatError
from proofgym.envs.rewards import RewardMap
from proofgym.envs.types import CheckResult, ErrorCategory, Task, Verdict

#: Verdicts after which another attempt is pointless: a proof, or a cheat (it keeps its penalty).
FINAL_VERDICTS = frozenset({Verdict.OK, Verdict.CHEATING})


class TaskSet(Sequence[Task]):
    """The tasks of an env or an evaluation: a sequence of :class:`Task` with unique ids, found by id.

    Args:
        tasks: A suite path or built suite name, a list of :class:`Task`/dicts, or another ``TaskSet``
            (shared as is: many envs over one suite hold one copy).

    Raises:
        TaskFormatError: no tasks, a duplicate id, or a task that does not load.
    """

    def __init__(self, tasks: str | Path | Sequence[Task | Mapping[str, Any]] | TaskSet) -> None:
        if isinstance(tasks, TaskSet):
            self._tasks: list[Task] = tasks._tasks
            self._by_id: dict[str, Task] = tasks._by_id
            return
        if isinstance(tasks, (str, Path)):
            from proofgym.envs.tasks.suites import load_tasks

            loaded = load_tasks(tasks)
        else:
            loaded = [t if isinstance(t, Task) else Task.from_dict(t, source=f"tasks[{i}]")
                      for i, t in enumerate(tasks)]
        if not loaded:
            raise TaskFormatError("no tasks given: pass a suite path/name or a non-empty list of tasks")
        by_id: dict[str, Task] = {}
        for task in loaded:
            if task.id in by_id:
                raise TaskFormatError(f"duplicate task id {task.id!r}")
            by_id[task.id] = task
        self._tasks = loaded
        self._by_id = by_id

    def __len__(self) -> int:
        return len(self._tasks)

    def __getitem__(self, index: Any) -> Any:
        return self._tasks[index]

    def __iter__(self) -> Iterator[Task]:
        return iter(self._tasks)

    def __contains__(self, item: object) -> bool:
        return item in self._by_id if isinstance(item, str) else item in self._tasks

    @property
    def by_id(self) -> Mapping[str, Task]:
        return self._by_id

    def get(self, task_id: str) -> Task:
        """The task ``task_id``.

        Raises:
            KeyError: an unknown id; the message says how to list the ids.
        """
        if task_id not in self._by_id:
            from proofgym.envs.tasks.suites import unknown_task_message

            raise KeyError(unknown_task_message(task_id, self._by_id))
        return self._by_id[task_id]

    def select(self, np_random: Any, options: Mapping[str, Any] | None = None) -> Task:
        """The task ``options["task_id"]`` names, else one drawn with ``np_random`` (an env's)."""
        task_id = (options or {}).get("task_id")
        if task_id is None:
            return self._tasks[int(np_random.integers(len(self._tasks)))]
        return self.get(task_id)


@dataclass(frozen=True)
class Turn:
    """One attempt of an episode and what the verifier said.

    Attributes:
        index: The attempt's number, from 1.
        action: What was submitted.
        result: The verifier's result; ``None`` for a harness failure.
        reward: The verdict's reward; ``None`` for a harness failure (never scored 0).
        feedback: What the next attempt is shown (the result's feedback, or that the checker broke).
        harness_error: What broke, for a harness failure ("" otherwise).
    """

    index: int
    action: Any
    result: CheckResult | None
    reward: float | None
    feedback: str
    harness_error: str = ""

    @property
    def verdict(self) -> Verdict | None:
        return None if self.result is None else self.result.verdict


def invalid_action(action: Any) -> CheckResult | None:
    """The ``ERROR`` result of an action that is not text (it never reaches a verifier); ``None`` for text."""
    if isinstance(action, str):
        return None
    return CheckResult(Verdict.ERROR, (f"action must be text, got {type(action).__name__}",),
                       error_category=ErrorCategory.SYNTAX, backend="env")


class Episode:
    """One task's attempts until a final verdict or the end of the budget.

    Args:
        task: The task.
        max_attempts: The turn budget (attempts, harness failures included).
        reward_map: Verdict -> reward (default OK 1, CHEATING -1, else 0), or a ``CheckResult -> reward``
            callable (a TRL rollout's shaped reward).
        ends_on: Verdicts that end the episode (default: ``OK``; a rollout also stops on ``CHEATING``;
            the tool env on none, since its last answer is scored elsewhere).
        stop_on_failure: Whether a harness failure ends the episode.
        feedback_chars: Longest feedback text (``None``: the result's default).
    """

    def __init__(self, task: Task, *, max_attempts: int = 1,
                 reward_map: RewardMap | Mapping[str, float] | Callable[[CheckResult], float | None] | None = None,
                 ends_on: frozenset[Verdict] | set[Verdict] = frozenset({Verdict.OK}), stop_on_failure: bool = True,
                 feedback_chars: int | None = None) -> None:
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
        self.task = task
        self.max_attempts = int(max_attempts)
        # A RewardMap is itself a CheckResult -> reward callable; a mapping (or None) becomes one.
        self.reward_map = reward_map if callable(reward_map) else RewardMap.from_mapping(reward_map)
        self.ends_on = frozenset(ends_on)
        self.stop_on_failure = stop_on_failure
        self.feedback_chars = feedback_chars
        self.turns: list[Turn] = []

    # -- state ----------------------------------------------------------------------------------
    @property
    def attempt(self) -> int:
        """Attempts made so far."""
        return len(self.turns)

    @property
    def last(self) -> Turn | None:
        return self.turns[-1] if self.turns else None

    @property
    def last_result(self) -> CheckResult | None:
        return self.turns[-1].result if self.turns else None

    @property
    def feedback(self) -> str:
        """What the next attempt is shown: "" before the first one."""
        return self.turns[-1].feedback if self.turns else ""

    @property
    def terminated(self) -> bool:
        """The last verdict ends the episode (``OK`` by default)."""
        return bool(self.turns) and self.turns[-1].verdict in self.ends_on

    @property
    def failed(self) -> bool:
        """The last turn was a harness failure that ends the episode."""
        return bool(self.turns) and self.turns[-1].result is None and self.stop_on_failure

    @property
    def truncated(self) -> bool:
        """The budget is spent without a final verdict."""
        return not self.terminated and not self.failed and self.attempt >= self.max_attempts

    @property
    def done(self) -> bool:
        return self.terminated or self.failed or self.truncated

    # -- turns ----------------------------------------------------------------------------------
    def submit(self, action: Any, check: Callable[[Task, str], CheckResult] | Any) -> Turn:
        """Check ``action`` (with a verifier, or a ``(task, proof) -> CheckResult`` callable) and record it.

        A non-text action gets an ``ERROR`` verdict without a check. A verifier that breaks raises
        :class:`~proofgym.envs.errors.VerifierError` and records nothing (the caller decides).
        """
        result = invalid_action(action)
        if result is None:
            checker = check.check if hasattr(check, "check") else check
            result = checker(self.task, action)
        return self.record(action, result)

    def record(self, action: Any, result: CheckResult) -> Turn:
        """Record the result of ``action``, checked by the caller."""
        feedback = result.feedback() if self.feedback_chars is None else result.feedback(self.feedback_chars)
        reward = self.reward_map(result)
        if reward is None:  # a verdict always has a reward: None is a harness failure's (Episode.fail)
            raise ValueError(f"the reward map gave no reward for a {result.verdict.value} verdict")
        turn = Turn(self.attempt + 1, action, result, float(reward), feedback)
        self.turns.append(turn)
        return turn

    def fail(self, action: Any, error: str) -> Turn:
        """Record a harness failure: no verdict and no reward; it ends the episode when ``stop_on_failure``."""
        turn = Turn(self.attempt + 1, action, None, None,
                    "The checker itself failed; this says nothing about the proof.", harness_error=error)
        self.turns.append(turn)
        return turn
