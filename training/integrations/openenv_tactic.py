"""Tactic-v0 as an OpenEnv environment: one tactic per ``step``, the prover's goals or error back.

An episode is one task's Tactic-v0 session (:class:`~proofgym.training.integrations.core.TacticSession`,
over ``proofgym/Tactic-v0``'s ``TacticEnv``): ``reset`` opens the task (``task_id``, or drawn with
``seed``) in its prover's tactic mode and shows the goals; each ``step`` runs ``TacticAction.tactic`` on
the current proof state (or on ``state_id``, to branch or backtrack) and answers the new goals, or the
prover's error with the state unchanged. Once no goal is left the whole proof is re-checked: OK ends the
episode with reward 1.0; a cheat tactic (``Admitted.``, ``CHEAT_TAC``) is refused and costs -1.0; any
other step 0.0. A harness failure (the prover broke) is ``reward=None``, ``done=True`` and
``harness_error``: no reward, never a 0. Coq and HOL Light tasks (Dafny has no tactic mode).

Serve it with :func:`make_tactic_app`: OpenEnv's own ``create_app`` behind ``serve-verifier``'s request guard
(``proofgym.http_guard.GuardedApp``: Host, Origin and WebSocket handshakes, the token, body limits), beside
(or instead of) the whole-proof app::

    from proofgym.training.integrations.core import ProofScorer
    from proofgym.training.integrations.openenv_tactic import make_tactic_app

    scorer = ProofScorer("coq-tiny")                     # every session's verifier; close() it when done
    app = make_tactic_app(scorer)                        # uvicorn.run(app, host="127.0.0.1", port=8000)
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import numpy as np

from proofgym.envs.errors import DependencyNotInstalled
from proofgym.http_guard import GuardedApp, RequestGuard
from proofgym.training.integrations.core import ProofScorer, TacticSession

try:
    from openenv.core.env_server.interfaces import Environment
    from openenv.core.env_server.types import Action, EnvironmentMetadata, Observation, State
    from pydantic import Field
except ImportError as exc:  # pragma: no cover - the message is the point
    raise DependencyNotInstalled(
        f"the OpenEnv adapter needs openenv-core: pip install 'proofgym[openenv]' ({exc})") from exc

__all__ = ["TacticAction", "TacticEnvironment", "TacticObservation", "TacticState", "make_tactic_app"]


class TacticAction(Action):
    """One tactic, run on the current proof state or on an earlier one (``state_id``)."""

    tactic: str = Field(description="One tactic or proof sentence, e.g. 'intros.' (Coq) or 'ARITH_TAC' (HOL Light)")
    state_id: int | None = Field(default=None, description="The proof state to run it on (default: the current one)")


class TacticObservation(Observation):
    """The proof state after the last step (``reward``/``done`` are OpenEnv's own fields)."""

    task_id: str = Field(default="", description="The task's id")
    system: str = Field(default="", description="The prover: coq or hol_light")
    statement: str = Field(default="", description="The statement to prove")
    goals: str = Field(default="", description="The open goals, as the prover prints them")
    state_id: int = Field(default=0, description="This proof state's id (name it in a later action to backtrack)")
    last_error: str = Field(default="", description="The prover's error on the last tactic (the state is unchanged)")
    steps: int = Field(default=0, description="Tactics run so far")
    verdict: str | None = Field(default=None, description="The step's verdict (FAIL, CHEATING...), or the whole "
                                                          "proof's once no goal is left; None for a good step")
    harness_error: str = Field(default="", description="What broke when the prover failed (reward is then None)")


class TacticState(State):
    """The episode: its task, the proof state it is at and the return so far."""

    task_id: str = ""
    state_id: int = 0
    episode_return: float | None = 0.0


class TacticEnvironment(Environment[TacticAction, TacticObservation, TacticState]):
    """One OpenEnv session of Tactic-v0, on the shared scorer's tasks and tactic verifier.

    Args:
        scorer: The suite and the tactic verifier (shared by every session; its owner closes it).
        max_steps: Tactics per episode.
        seed: Seed of the task draw when ``reset`` gets neither ``task_id`` nor ``seed``.
    """

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, scorer: ProofScorer, *, max_steps: int = 50, seed: int | None = None) -> None:
        super().__init__()
        self.scorer = scorer
        self.max_steps = int(max_steps)
        self._rng = np.random.default_rng(seed)
        self._session: TacticSession | None = None
        self._state = TacticState()

    def reset(self, seed: int | None = None, episode_id: str | None = None, task_id: str | None = None,
              **kwargs: Any) -> TacticObservation:
        rng = self._rng if seed is None else np.random.default_rng(seed)
        task = self.scorer.tasks.select(rng, {"task_id": task_id} if task_id is not None else None)
        self.close()
        self._session = self.scorer.tactic_session(task, max_steps=self.max_steps)
        self._state = TacticState(episode_id=episode_id or uuid.uuid4().hex, step_count=0, task_id=task.id)
        done = self._session.done  # the prover may have broken opening the task
        return self._observation(reward=None, done=done, verdict=None)

    def step(self, action: TacticAction, timeout_s: float | None = None, **kwargs: Any) -> TacticObservation:
        session = self._session
        if session is None:
            return TacticObservation(done=True, reward=None, harness_error="no episode: call reset() before step()")
        if session.done:
            return self._observation(reward=None, done=True, verdict=None,
                                     note=f"the episode on {session.task.id} is over: call reset()")
        act: Any = action.tactic if action.state_id is None else {"tactic": action.tactic, "state_id": action.state_id}
        reward, info = session.step(act)
        self._state.step_count += 1
        return self._observation(reward=reward, done=session.done, verdict=info.get("verdict"))

    @property
    def state(self) -> TacticState:
        if self._session is not None:
            self._state.state_id = int(self._session.observation.get("state_id", 0))
            self._state.episode_return = self._session.episode_return
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(name="proofgym-tactic", version="0.1.0",
                                   description="Prove a theorem one tactic at a time (Coq, HOL Light); the real "
                                               "prover's verdict on the finished proof is the reward")

    def close(self) -> None:
        """Stop the episode's prover session (OpenEnv calls this when a WebSocket session ends)."""
        if self._session is not None:
            self._session.close()

    def _observation(self, *, reward: float | None, done: bool, verdict: str | None,
                     note: str = "") -> TacticObservation:
        session = self._session
        assert session is not None  # noqa: S101 - only called with an episode
        obs = session.observation
        return TacticObservation(
            task_id=session.task.id, system=session.task.system, statement=session.task.statement,
            goals=str(obs.get("goals", "")), state_id=int(obs.get("state_id", 0)),
            last_error=str(obs.get("last_error", "")), steps=int(obs.get("steps", 0)), verdict=verdict,
            harness_error=note or session.harness_error, reward=reward, done=done)


def make_tactic_app(scorer: ProofScorer, *, max_concurrent_envs: int = 8, host: str = "127.0.0.1",
                    token: str | None = None, allowed_origins: Sequence[str] = (), allowed_hosts: Sequence[str] = (),
                    max_body_bytes: int = 1024 * 1024) -> GuardedApp:
    """Tactic-v0 on OpenEnv's ``create_app``, behind the same request guard as ``make_app`` and ``serve-verifier``.

    Every session runs on ``scorer``'s tactic verifier (its owner closes it). ``host``, ``token``,
    ``allowed_origins``, ``allowed_hosts``, ``max_body_bytes``: as for
    :func:`proofgym.training.integrations.openenv_env.make_app` (a tactic is short: 1 MiB bodies by default).
    """
    from openenv.core.env_server.http_server import create_app

    guard = RequestGuard.create(host, allowed_origins=allowed_origins, allowed_hosts=allowed_hosts)
    app = create_app(lambda: TacticEnvironment(scorer), TacticAction, TacticObservation, env_name="proofgym-tactic",
                     max_concurrent_envs=max_concurrent_envs)
    app.state.proofgym = scorer
    return GuardedApp(app, guard, token=token, max_body_bytes=max_body_bytes)
