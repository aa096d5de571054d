"""``proofgym/WholeProof-v0``: write a whole proof, get the verifier's verdict, repair, retry."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
from gymnasium import spaces

from proofgym.envs.errors import TaskFormatError
from proofgym.envs.rewards import RewardMap
from proofgym.envs.spaces import UnicodeText
from proofgym.envs.types import CheckResult, ErrorCategory, Task, Verdict
from proofgym.envs.verifiers.base import Verifier, make_verifier

MAX_TEXT = 1 << 20


def load_task_list(tasks: str | Path | Sequence[Task | Mapping[str, Any]]) -> list[Task]:
    """Tasks from a suite path or name, or from a list of :class:`Task`/dicts."""
    if isinstance(tasks, (str, Path)):
        from proofgym.envs.tasks.suites import load_tasks

        loaded = load_tasks(tasks)
    else:
        loaded = [t if isinstance(t, Task) else Task.from_dict(t, source=f"tasks[{i}]") for i, t in enumerate(tasks)]
    if not loaded:
        raise TaskFormatError("no tasks given: pass a suite path/name or a non-empty list of tasks")
    ids = [t.id for t in loaded]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise TaskFormatError(f"duplicate task id {dup!r}")
    return loaded


class VerifierSet:
    """Verifiers by system for an env: a given verifier is used as is (its creator closes it);
    the others are made on first use with ``kwargs`` and closed by :meth:`close`."""

    def __init__(self, verifier: Verifier | None, kwargs: Mapping[str, Any] | None) -> None:
        self._given = {verifier.system: verifier} if verifier is not None else {}
        self._made: dict[str, Verifier] = {}
        self._kwargs = dict(kwargs or {})

    def get(self, system: str) -> Verifier:
        if system in self._given:
            return self._given[system]
        if system not in self._made:
            self._made[system] = make_verifier(system, **self._kwargs)
        return self._made[system]

    def close(self) -> None:
        for verifier in self._made.values():
            verifier.close()
        self._made.clear()


def select_task(env: gym.Env, tasks: list[Task], by_id: Mapping[str, Task], options: dict[str, Any] | None) -> Task:
    """The task ``options["task_id"]`` names, else one drawn with the env's ``np_random``."""
    task_id = (options or {}).get("task_id")
    if task_id is None:
        return tasks[int(env.np_random.integers(len(tasks)))]
    if task_id not in by_id:
        from proofgym.envs.tasks.suites import unknown_task_message

        raise KeyError(unknown_task_message(task_id, by_id))
    return by_id[task_id]


class WholeProofEnv(gym.Env[dict[str, Any], str]):
    """Whole-proof generation with verifier feedback (Selene's fixing round, SkillForge's repair loop).

    Each episode is one task. The agent submits a whole proof (the text after
    the statement; for Coq ``Proof. ... Qed.``, a bare tactic script is wrapped).
    The verifier's verdict is the reward; on failure the observation carries the
    verifier's feedback, and the agent may try again, up to ``max_attempts``.

    ## Action Space
    ``UnicodeText``: the proof text. Anything else (bytes, ``None``, garbage) comes
    back as an ``ERROR`` verdict in the observation, never as an exception.

    ## Observation Space
    ``Dict`` with
    - ``task_id``: the task's id;
    - ``statement``: the statement as the prover sees it;
    - ``description``: the task's natural-language description (``metadata.description``), or "";
    - ``context``: the last ``context_chars`` characters of the task's context;
    - ``feedback``: the last verifier feedback ("" before the first attempt);
    - ``attempt``: attempts made so far.

    ## Rewards
    A configurable verdict -> reward map (default OK 1, CHEATING -1, FAIL/TIMEOUT/ERROR 0),
    see :class:`~proofgym.envs.rewards.RewardMap`. If the verifier itself breaks,
    ``step`` raises :class:`~proofgym.envs.errors.VerifierError`: a harness failure has no reward.

    ## Episode End
    Terminated on ``OK``. Truncated after ``max_attempts`` attempts without ``OK``.
    (``gymnasium.make(..., max_episode_steps=N)`` adds a ``TimeLimit`` too.)

    ## Info
    ``result`` (the :class:`CheckResult`), ``verdict``, ``reasons``, ``task_id``, ``category``.

    ## Arguments
    - ``tasks``: a suite path, a built suite name (e.g. ``coq-stdlib``) or a list of tasks/dicts.
    - ``max_attempts``: attempts per episode (default 1; Selene's fixing round is 2).
    - ``reward_map``: mapping verdict name -> reward.
    - ``verifier``: a verifier to use (else one is created per system, lazily).
    - ``verifier_kwargs``: options for the created verifiers.

    ## Version History
    - v0: initial version.
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 1}

    def __init__(
        self,
        tasks: str | Path | Sequence[Task | Mapping[str, Any]],
        max_attempts: int = 1,
        reward_map: Mapping[str, float] | None = None,
        verifier: Verifier | None = None,
        verifier_kwargs: Mapping[str, Any] | None = None,
        context_chars: int = 2000,
        render_mode: str | None = None,
    ) -> None:
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']}")
        self.tasks = load_task_list(tasks)
        self._by_id = {t.id: t for t in self.tasks}
        self.max_attempts = int(max_attempts)
        self.reward_map = RewardMap.from_mapping(reward_map)
        self.context_chars = int(context_chars)
        self.render_mode = render_mode
        self._verifiers = VerifierSet(verifier, verifier_kwargs)
        text = UnicodeText(MAX_TEXT)
        self.observation_space = spaces.Dict(
            {
                "task_id": UnicodeText(4096),
                "statement": text,
                "description": text,
                "context": text,
                "feedback": text,
                "attempt": spaces.Discrete(self.max_attempts + 1),
            }
        )
        self.action_space = UnicodeText(MAX_TEXT)
        self.task: Task | None = None
        self.attempt = 0
        self._feedback = ""
        self.last_result: CheckResult | None = None

    # -- Gymnasium API --------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.task = select_task(self, self.tasks, self._by_id, options)
        self.attempt = 0
        self._feedback = ""
        self.last_result = None
        return self._obs(), {"task_id": self.task.id, "category": self.task.category}

    def step(self, action: Any):
        if self.task is None:
            raise gym.error.ResetNeeded("call reset() before step()")
        self.attempt += 1
        if not isinstance(action, str):
            result = CheckResult(Verdict.ERROR, (f"action must be text, got {type(action).__name__}",),
                                 error_category=ErrorCategory.SYNTAX, backend="env")
        else:
            result = self._verifier(self.task.system).check(self.task, action)
        self.last_result = result
        self._feedback = result.feedback()
        reward = self.reward_map(result)
        terminated = result.verdict is Verdict.OK
        truncated = not terminated and self.attempt >= self.max_attempts
        info = {
            "result": result,
            "verdict": result.verdict.value,
            "reasons": list(result.reasons),
            "task_id": self.task.id,
            "category": self.task.category,
        }
        return self._obs(), float(reward), terminated, truncated, info

    def render(self) -> str | None:
        if self.render_mode != "ansi" or self.task is None:
            return None
        return f"[{self.task.id}] attempt {self.attempt}/{self.max_attempts}\n{self.task.statement}\n{self._feedback}"

    def close(self) -> None:
        self._verifiers.close()
        super().close()

    # -- helpers --------------------------------------------------------------------------------
    def _verifier(self, system: str) -> Verifier:
        return self._verifiers.get(system)

    def _obs(self) -> dict[str, Any]:
        assert self.task is not None  # noqa: S101 - internal invariant, reset() sets it
        context = self.task.context[-self.context_chars :] if self.context_chars else ""
        return {
            "task_id": self.task.id,
            "statement": self.task.statement,
            "description": str(self.task.metadata.get("description", "")),
            "context": context,
            "feedback": self._feedback,
            "attempt": self.attempt,
        }
