"""proofgym as an OpenEnv environment: ``Environment[ProofAction, ProofObservation, ProofState]``.

OpenEnv (``pip install openenv-core``) serves an environment with its FastAPI ``create_app``:
``POST /reset``, ``POST /step``, ``GET /state``, ``/schema``, ``/health`` and the ``/ws``
WebSocket, one environment per WebSocket session. An episode is one task's repair loop
(:class:`~proofgym.training.integrations.core.ProofSession`): ``reset`` picks a task (``task_id``,
or drawn with ``seed``) and shows its statement; each ``step`` checks ``ProofAction.proof`` (a whole
model reply: the proof is taken from its last fenced block) and answers the verdict, the reward
and the verifier's feedback; OK, CHEATING or the turn budget ends it.

Rewards (the shared core's): OK 1.0, FAIL/TIMEOUT/ERROR 0.0, CHEATING -1.0. A harness failure
(the verifier broke) is ``reward=None`` with ``harness_error`` set and ``done=True``: OpenEnv's own
"no reward", never a 0. Every session of one app shares one :class:`ProofScorer` (one pool of warm
provers); the WebSocket sessions run concurrently (``max_concurrent_envs``).

Serve it::

    from proofgym.training.integrations.openenv_env import make_app
    app = make_app("coq-tiny")          # uvicorn app, or examples/integrations/openenv/server/app.py

and talk to it with OpenEnv's own client::

    from openenv.core import GenericEnvClient
    with GenericEnvClient(base_url="http://127.0.0.1:8000").sync() as env:
        result = env.reset(task_id="coq.tiny.lia")
        result = env.step({"proof": "```coq\\nProof. lia. Qed.\\n```"})   # result.reward == 1.0
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from proofgym.envs.errors import DependencyNotInstalled
from proofgym.http_guard import GuardedApp, RequestGuard
from proofgym.training.integrations.core import ProofScorer, ProofSession, SuiteLike

try:
    from openenv.core.env_server.interfaces import Environment
    from openenv.core.env_server.types import Action, EnvironmentMetadata, Observation, State
    from pydantic import Field
except ImportError as exc:  # pragma: no cover - the message is the point
    raise DependencyNotInstalled(
        f"the OpenEnv adapter needs openenv-core: pip install 'proofgym[openenv]' ({exc})") from exc

__all__ = ["ProofAction", "ProofObservation", "ProofState", "ProofgymEnvironment", "make_app"]


class ProofAction(Action):
    """A model's reply: the proof is its last fenced block (or the whole text when it has none)."""

    proof: str = Field(description="The reply with the proof, e.g. ```coq\\nProof. lia. Qed.\\n```")


class ProofObservation(Observation):
    """The task and the verifier's answer to the last reply (``reward``/``done`` are OpenEnv's own fields)."""

    task_id: str = Field(default="", description="The task's id")
    system: str = Field(default="", description="The prover: coq, hol_light or dafny")
    prompt: list[dict[str, str]] = Field(default_factory=list,
                                         description="The chat messages to answer (the task, then feedback turns)")
    verdict: str | None = Field(default=None, description="OK, FAIL, CHEATING, TIMEOUT or ERROR; None before a "
                                                          "reply and after a harness failure")
    reasons: list[str] = Field(default_factory=list, description="The verifier's reasons (cheat reasons, errors)")
    feedback: str = Field(default="", description="The verifier's feedback on the last reply")
    attempt: int = Field(default=0, description="Replies checked so far")
    max_attempts: int = Field(default=1, description="The turn budget")
    harness_error: str = Field(default="", description="What broke when the checker failed (reward is then None)")


class ProofState(State):
    """The episode: its task, the verdict of each reply (``None`` for a harness failure) and the budget."""

    task_id: str = ""
    verdicts: list[str | None] = Field(default_factory=list)
    max_attempts: int = 1


class ProofgymEnvironment(Environment[ProofAction, ProofObservation, ProofState]):
    """One OpenEnv session: a task's repair episode, checked by a shared :class:`ProofScorer`.

    Args:
        scorer: The suite and the pool (shared by every session; its owner closes it).
        max_turns: Replies per episode.
        seed: Seed of the task draw when ``reset`` gets neither ``task_id`` nor ``seed``.
    """

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, scorer: ProofScorer, *, max_turns: int = 3, seed: int | None = None) -> None:
        super().__init__()
        self.scorer = scorer
        self.max_turns = int(max_turns)
        self._rng = np.random.default_rng(seed)
        self._session: ProofSession | None = None
        self._state = ProofState(max_attempts=self.max_turns)

    def reset(self, seed: int | None = None, episode_id: str | None = None, task_id: str | None = None,
              **kwargs: Any) -> ProofObservation:
        rng = self._rng if seed is None else np.random.default_rng(seed)
        task = self.scorer.tasks.select(rng, {"task_id": task_id} if task_id is not None else None)
        self._session = self.scorer.session(task, max_turns=self.max_turns)
        self._state = ProofState(episode_id=episode_id or uuid.uuid4().hex, step_count=0, task_id=task.id,
                                 max_attempts=self.max_turns)
        return self._observation(self.scorer.prompt(task), reward=None, done=False)

    def step(self, action: ProofAction, timeout_s: float | None = None, **kwargs: Any) -> ProofObservation:
        # ``timeout_s`` is not a proof's budget: each check runs under its task's own ``timeout_s``,
        # which the pool enforces (TIMEOUT past it, the watchdog past that).
        session = self._session
        if session is None:
            return ProofObservation(done=True, reward=None, harness_error="no episode: call reset() before step()")
        if session.done:
            return self._observation([], reward=None, done=True,
                                     harness_error=f"the episode on {session.task.id} is over: call reset()")
        turn = session.step(action.proof)
        self._state.step_count += 1
        self._state.verdicts.append(None if turn.verdict is None else turn.verdict.value)
        follow_up = [] if session.done else [session.feedback_turn()]
        return self._observation(follow_up, reward=turn.reward, done=session.done, harness_error=turn.harness_error)

    @property
    def state(self) -> ProofState:
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(name="proofgym", version="0.1.0",
                                   description="Write a proof (Coq, HOL Light, Dafny); the real prover's verdict is "
                                               "the reward: OK 1, FAIL 0, CHEATING -1, a broken checker no reward")

    def _observation(self, prompt: list[dict[str, str]], *, reward: float | None, done: bool,
                     harness_error: str = "") -> ProofObservation:
        session = self._session
        assert session is not None  # noqa: S101 - only called with an episode
        last = session.last
        result = None if last is None else last.result
        return ProofObservation(
            task_id=session.task.id, system=session.task.system, prompt=prompt,
            verdict=None if result is None else result.verdict.value,
            reasons=[] if result is None else list(result.reasons),
            feedback="" if last is None else last.feedback, attempt=session.episode.attempt,
            max_attempts=self.max_turns, harness_error=harness_error, reward=reward, done=done)


def make_app(suite: SuiteLike | ProofScorer, *, max_turns: int = 3, max_concurrent_envs: int = 8,
             pool: Any = None, service_url: str | None = None, service_token: str | None = None, workers: int = 2,
             reward_map: Mapping[str, float] | None = None, host: str = "127.0.0.1", token: str | None = None,
             allowed_origins: Sequence[str] = (), allowed_hosts: Sequence[str] = (),
             max_body_bytes: int = 16 * 1024 * 1024) -> GuardedApp:
    """OpenEnv's FastAPI app over a suite, behind proofgym's request guard (``proofgym.http_guard.GuardedApp``).

    Every session shares one scorer, kept as ``app.state.proofgym``. Whoever serves the app closes
    the scorer when done (``app.state.proofgym.close()``): it stops the worker processes it made. A
    given ``ProofScorer`` is used as is. ``service_url``/``service_token``: check on a running
    ``proofgym serve-verifier`` instead of local workers.

    The guard is ``serve-verifier``'s: ``host`` is the address the app will listen on (the Host
    names it answers to), ``token`` the shared secret (needed for requests that come in beyond
    loopback; clients put it in the URL, ``http://user:<token>@host:port``), ``allowed_origins`` and
    ``allowed_hosts`` its ``--allow-origin``/``--allow-host``; JSON bodies up to ``max_body_bytes``.
    :class:`~proofgym.http_guard.GuardConfigError` for a bad origin or host name.
    """
    from openenv.core.env_server.http_server import create_app

    scorer = suite if isinstance(suite, ProofScorer) else ProofScorer(
        suite, pool=pool, service_url=service_url, token=service_token, workers=workers, reward_map=reward_map)

    def factory() -> ProofgymEnvironment:
        return ProofgymEnvironment(scorer, max_turns=max_turns)

    guard = RequestGuard.create(host, allowed_origins=allowed_origins, allowed_hosts=allowed_hosts)
    app = create_app(factory, ProofAction, ProofObservation, env_name="proofgym",
                     max_concurrent_envs=max_concurrent_envs)
    app.state.proofgym = scorer
    return GuardedApp(app, guard, token=token, max_body_bytes=max_body_bytes)
