"""``proofgym/Tactic-v0``: one tactic per step on branching proof states."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
from gymnasium import spaces

from proofgym.envs.episode import TaskSet
from proofgym.envs.errors import TaskFormatError
from proofgym.envs.proof_env import VerifierSet
from proofgym.envs.rewards import RewardMap
from proofgym.envs.spaces import UnicodeText
from proofgym.envs.types import CheckResult, ErrorCategory, Task, Verdict
from proofgym.envs.verifiers.base import Verifier

MAX_TEXT = 1 << 20
MAX_STATE_ID = 2**31 - 1
_STATE_PREFIX = re.compile(r"^\s*@(\d+)\s+(.*)$", re.S)


def parse_action(action: Any) -> tuple[str | None, int | None]:
    """``(tactic, state_id)`` from ``"tactic"``, ``"@<state_id> tactic"`` or ``{"tactic", "state_id"}``."""
    if isinstance(action, Mapping):
        tactic = action.get("tactic")
        state = action.get("state_id")
        if not isinstance(tactic, str) or (state is not None and not isinstance(state, int)):
            return None, None
        return tactic, state
    if not isinstance(action, str):
        return None, None
    m = _STATE_PREFIX.match(action)
    if m:
        return m.group(2), int(m.group(1))
    return action, None


class TacticEnv(gym.Env[dict[str, Any], str]):
    """Prove a task one tactic at a time, with backtracking to any earlier proof state.

    ## Action Space
    ``UnicodeText``: one tactic (or a few proof sentences), applied to the current state.
    Coq: proof sentences (``"induction n."``, bullets included). HOL Light: one tactic
    expression, applied to the first open goal as by HOL Light's ``e`` (``"INDUCT_TAC"``).
    To branch or backtrack, name the state it applies to: ``"@<state_id> <tactic>"``
    (e.g. ``"@0 induction n."``) or a dict ``{"tactic": ..., "state_id": ...}``. State ids
    come from ``observation["state_id"]`` and ``info["state_id"]``; every successful step
    creates a new id and old ids stay valid for the whole episode.
    A bad tactic (fails, does not parse, or is a cheat such as ``Admitted.``) comes back
    as an observation with ``last_error`` and the state unchanged; cheats cost the
    CHEATING reward.

    ## Observation Space
    ``Dict``: ``task_id``, ``statement``, ``goals`` (pretty-printed as the prover prints
    them), ``state_id``, ``last_error``, ``steps``. Coq shows hypotheses above a line and
    the conclusion below it; HOL Light shows every open goal as its ``print_goal`` does:
    numbered assumptions (oldest first), then ``?- `conclusion``` (``?-`` marks a goal).

    ## Rewards
    When no goals remain, the whole proof assembled from the tactic path is re-checked
    by the verifier's whole-proof ``check``; only that verdict earns the reward (default
    OK 1, CHEATING -1, else 0), so tactic mode and whole-proof mode never disagree.

    Optional shaping (off by default): ``reward_map={"goal_closed": g}`` is potential-based
    (Ng, Harada and Russell, 1999) on the episode's *current* state: every step, failed
    steps and backtracking jumps included, earns ``Φ(state after) - Φ(state before)`` with
    ``Φ(s) = -g · max(1, open goals of s)`` (focused, unfocused and shelved) and ``Φ = 0``
    only for a finished state that the whole-proof check accepted. A step that closes a
    goal earns ``g``, one that splits a goal in two costs ``g``, and a jump back to a state
    with more open goals costs what reaching it again repays. The sum telescopes: over any
    episode the shaping totals ``Φ(last state) - Φ(root)``, at most ``g · (open goals at the
    root - 1)`` (0 for a single goal) unless the proof is accepted. So no sequence of steps
    (closing the same goal again from an old state id, ``assert``-ing goals only to close
    them) earns anything without finishing the proof, and the optimal policies are those of
    the unshaped reward.

    ## Episode End
    Terminated when the re-check says OK. Truncated after ``max_steps`` steps (``gymnasium.make`` adds a
    ``TimeLimit`` of 1000 steps, a cap above any budget; ``max_episode_steps=N`` changes it).

    ## Info
    ``state_id``, ``parent_state_id``, ``verdict`` (of the step, or of the final check),
    ``result`` (the final :class:`CheckResult` when the proof was re-checked), ``proof``.

    ## Backends
    - Coq: one sandboxed ``coqidetop`` per episode (``envs/verifiers/coq/tactic.py``).
    - HOL Light: states are replayed proof trees on the verifier's warm fork server, one
      sandboxed check per step (``envs/verifiers/hol_light/tactic.py``); a finished state has
      already passed that check, and is re-checked like any other.

    ## Version History
    - v0: initial version (Coq backend); HOL Light backend added (same action, reward and
      episode semantics, so the version is unchanged). The optional ``goal_closed`` shaping
      became potential-based: it used to pay per goal closed by a step, so closing the same
      goal again from an old state id paid again (30 steps earned more than a proof).
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 1}

    def __init__(
        self,
        tasks: str | Path | Sequence[Task | Mapping[str, Any]],
        max_steps: int = 50,
        reward_map: Mapping[str, float] | None = None,
        verifier: Verifier | None = None,
        verifier_kwargs: Mapping[str, Any] | None = None,
        render_mode: str | None = None,
    ) -> None:
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        self.tasks = TaskSet(tasks)
        self.max_steps = int(max_steps)
        rewards = dict(reward_map or {})
        self.goal_closed_reward = float(rewards.pop("goal_closed", 0.0))
        self.reward_map = RewardMap.from_mapping(rewards)
        self.render_mode = render_mode
        self._verifiers = VerifierSet(verifier, verifier_kwargs)
        text = UnicodeText(MAX_TEXT)
        self.observation_space = spaces.Dict({
            "task_id": UnicodeText(4096),
            "statement": text,
            "goals": text,
            "state_id": spaces.Discrete(MAX_STATE_ID),
            "last_error": text,
            "steps": spaces.Discrete(self.max_steps + 1),
        })
        self.action_space = UnicodeText(MAX_TEXT)
        self.task: Task | None = None
        self.session: Any = None
        self.state_id = 0
        self.steps = 0
        self._last_error = ""
        self._accepted: set[int] = set()  # finished states whose proof the whole-proof check accepted

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.task = self.tasks.select(self.np_random, options)
        self._close_session()
        verifier = self._verifier(self.task.system)
        if not hasattr(verifier, "open"):
            raise TaskFormatError(f"the {self.task.system} verifier has no tactic mode")
        self.session = verifier.open(self.task)
        self.state_id = self.session.root
        self.steps = 0
        self._last_error = ""
        self._accepted = set()
        return self._obs(), {"task_id": self.task.id, "category": self.task.category, "state_id": self.state_id}

    def step(self, action: Any):
        if self.session is None or self.task is None:
            raise gym.error.ResetNeeded("call reset() before step()")
        self.steps += 1
        truncated = self.steps >= self.max_steps
        tactic, state_id = parse_action(action)
        start_id = self.state_id if state_id is None else state_id
        info: dict[str, Any] = {"task_id": self.task.id, "parent_state_id": start_id}
        if tactic is None:
            return self._reject(f"action must be text or {{'tactic', 'state_id'}}, got {type(action).__name__}",
                                Verdict.ERROR, info, truncated, 0.0)
        try:
            self.session.state(start_id)
        except KeyError as exc:
            return self._reject(str(exc.args[0]), Verdict.ERROR, info, truncated, 0.0)
        potential_before = self._potential(self.state_id)
        result = self.session.run(tactic, start_id)
        if not result.ok:
            self.state_id = start_id  # a failed step still moves the episode to the state it named
            return self._reject(result.error, result.verdict or Verdict.FAIL, info, truncated,
                                self._potential(start_id) - potential_before)
        self.state_id = result.state.state_id
        self._last_error = ""
        info.update(state_id=self.state_id, verdict=None, proof=self.session.proof_script(self.state_id))
        terminated = False
        reward = 0.0
        if result.state.finished:
            final: CheckResult = self._verifier(self.task.system).check(self.task, info["proof"])
            info.update(result=final, verdict=final.verdict.value, reasons=list(final.reasons))
            reward += float(self.reward_map(final))
            terminated = final.verdict is Verdict.OK
            if terminated:
                self._accepted.add(self.state_id)
            else:
                self._last_error = "the whole-proof check did not accept the finished path: " + final.feedback()
        reward += self._potential(self.state_id) - potential_before
        return self._obs(), reward, terminated, truncated and not terminated, info

    def _potential(self, state_id: int) -> float:
        """Φ of the shaping (see the class docstring): 0 for an accepted proof, else -g per open goal (at least 1)."""
        if not self.goal_closed_reward or state_id in self._accepted:
            return 0.0
        state = self.session.state(state_id)
        open_goals = len(state.goals) + len(state.background) + state.shelved
        return -self.goal_closed_reward * max(1, open_goals)

    def _reject(self, error: str, verdict: Verdict, info: dict[str, Any], truncated: bool, shaping: float):
        self._last_error = error
        info.update(state_id=self.state_id, verdict=verdict.value,
                    result=CheckResult(verdict, (error[:200],), error_category=ErrorCategory.OTHER, backend="tactic"))
        reward = float(self.reward_map(info["result"])) if verdict is Verdict.CHEATING else 0.0
        return self._obs(), reward + shaping, False, truncated, info

    def render(self) -> str | None:
        if self.render_mode != "ansi" or self.session is None or self.task is None:
            return None
        return f"[{self.task.id}] state {self.state_id}, step {self.steps}\n{self.session.state(self.state_id).pretty()}"

    def close(self) -> None:
        self._close_session()
        self._verifiers.close()
        super().close()

    def _close_session(self) -> None:
        if self.session is not None:
            self.session.close()
            self.session = None

    def _verifier(self, system: str) -> Verifier:
        return self._verifiers.get(system)

    def _obs(self) -> dict[str, Any]:
        assert self.task is not None and self.session is not None  # noqa: S101 - reset() sets them
        return {
            "task_id": self.task.id,
            "statement": self.task.statement,
            "goals": self.session.state(self.state_id).pretty(),
            "state_id": int(self.state_id),
            "last_error": self._last_error,
            "steps": min(self.steps, self.max_steps),
        }
