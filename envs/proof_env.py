"""``proofgym/WholeProof-v0``: write a whole proof, get the verifier's verdict, repair, retry."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
from gymnasium import spaces

from proofgym.envs.episode import Episode, TaskSet
from proofgym.envs.rewards import RewardMap
from proofgym.envs.spaces import UnicodeText
from proofgym.envs.types import CheckResult, Task
from proofgym.envs.verifiers.base import Verifier, make_verifier

MAX_TEXT = 1 << 20


def load_task_list(tasks: str | Path | Sequence[Task | Mapping[str, Any]]) -> list[Task]:
    """Tasks from a suite path or name, or from a list of :class:`Task`/dicts (see :class:`TaskSet`)."""
    return list(TaskSet(tasks))


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
    Terminated on ``OK``. Truncated after ``max_attempts`` attempts without ``OK`` (the episode's
    turn budget, :class:`~proofgym.envs.episode.Episode`). ``gymnasium.make`` also wraps the env in
    a ``TimeLimit`` of 16 steps, a cap above any harness's budget (``max_episode_steps=N`` changes it).

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
        self.tasks = TaskSet(tasks)
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
        self.episode: Episode | None = None

    @property
    def attempt(self) -> int:
        """Attempts made in this episode."""
        return self.episode.attempt if self.episode is not None else 0

    @property
    def last_result(self) -> CheckResult | None:
        return self.episode.last_result if self.episode is not None else None

    # -- Gymnasium API --------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.task = self.tasks.select(self.np_random, options)
        self.episode = Episode(self.task, max_attempts=self.max_attempts, reward_map=self.reward_map)
        return self._obs(), {"task_id": self.task.id, "category": self.task.category}

    def step(self, action: Any):
        if self.task is None or self.episode is None:
            raise gym.error.ResetNeeded("call reset() before step()")
        turn = self.episode.submit(action, self._verifier(self.task.system))
        result = turn.result
        assert result is not None  # noqa: S101 - submit raises on a harness failure, it records none
        info = {
            "result": result,
            "verdict": result.verdict.value,
            "reasons": list(result.reasons),
            "task_id": self.task.id,
            "category": self.task.category,
        }
        return self._obs(), float(turn.reward or 0.0), self.episode.terminated, self.episode.truncated, info

    def render(self) -> str | None:
        if self.render_mode != "ansi" or self.task is None:
            return None
        feedback = self.episode.feedback if self.episode is not None else ""
        return f"[{self.task.id}] attempt {self.attempt}/{self.max_attempts}\n{self.task.statement}\n{feedback}"

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
            "feedback": self.episode.feedback if self.episode is not None else "",
            "attempt": self.attempt,
        }
