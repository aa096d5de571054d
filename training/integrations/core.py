"""The one layer every trainer adapter calls: a suite, a checker, and a multi-turn session.

Each adapter in this package (TRL, OpenEnv, verifiers, verl, OpenRLHF) is a thin shape over
these three things, so that no adapter holds a second copy of verdict, reward or parsing logic:

- :class:`ProofScorer`: the tasks of a suite and the verifier pool that checks them. Scoring a
  reply is :class:`~proofgym.training.rewards.VerifierReward`'s (the proof taken out of the
  reply by ``envs/parsing.py``, checked on the pool, the verdict mapped to a reward). The pool is
  one the caller gives (and closes), a local pool it makes on first use, or the shared verifier
  service (``proofgym serve-verifier``) when given its URL: the service is then this process's
  verifier, behind an in-process pool, so a Ray worker or a vLLM engine never starts provers.
- :class:`ProofSession`: one task's multi-turn repair episode (:class:`~proofgym.envs.episode.Episode`):
  each reply is checked, the verifier's feedback is the next user turn, OK, CHEATING, a harness
  failure or the turn budget ends it.
- :class:`TacticSession`: one task's Tactic-v0 episode (``proofgym/Tactic-v0``'s ``TacticEnv``): one
  tactic per step, the prover's goals or error back, the whole-proof check's verdict once no goal is
  left; for trainers whose interface has tools or multi-step sessions (TRL's tool env, OpenEnv).
- :func:`scorer_for`: one scorer per process for trainers that load a reward by name in workers they
  start themselves (verl, OpenRLHF, verifiers), made from their config on first use, closed at exit.

The reward-service contract every adapter relies on:

- a harness failure (the verifier broke, a worker died, the service is unreachable) is a masked
  status, ``reward=None`` with ``harness_error`` set, never a score: each adapter turns it into its
  library's "no reward" (TRL: ``None``; OpenEnv: ``reward=None`` and the observation's
  ``harness_error``; verifiers: a ``TaskError`` on the rollout, reward ``None``; OpenRLHF single-turn:
  reward ``None`` (or the service's 503 with ``Retry-After``); verl and OpenRLHF's multi-turn agent,
  whose contracts have no such value: an exception that stops the step);
- the time budget is the task's ``timeout_s``, enforced by the pool (past it the verdict is TIMEOUT,
  a hung check is killed by the watchdog);
- :meth:`ProofScorer.close` frees what the scorer made (its pool, its service client), idempotently.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from proofgym.envs.episode import FINAL_VERDICTS, Episode, TaskSet, Turn
from proofgym.envs.errors import VerifierError
from proofgym.envs.types import Task
from proofgym.envs.verifiers.pool import LocalVerifierPool
from proofgym.training.data import grpo_rows, prompt_messages, repair_message
from proofgym.training.rewards import Outcome, VerifierReward, harness_error

__all__ = ["CHATML_FEEDBACK", "ProofScorer", "ProofSession", "SuiteLike", "TacticSession", "close_scorers",
           "scorer_for", "use_scorer"]

SuiteLike = str | Path | Sequence[Task | Mapping[str, Any]] | TaskSet

#: A feedback turn in ChatML, for trainers that append it to the running token stream (OpenRLHF, verl):
#: it closes the assistant's turn, shows the verifier's feedback as a user turn, and opens the next reply.
CHATML_FEEDBACK = "<|im_end|>\n<|im_start|>user\n{feedback}<|im_end|>\n<|im_start|>assistant\n"


class ProofScorer:
    """The tasks of a suite and what checks replies to them.

    Args:
        suite: A packaged or built suite name (``coq-tiny``), a suite path, a list of tasks or a ``TaskSet``.
        pool: A verifier pool to check on (the caller owns it). Without one, the scorer makes one on
            first use: an in-process pool over the verifier service at ``service_url`` if given, else a
            local pool of ``workers`` worker processes. The scorer closes what it made.
        service_url: The verifier service (``proofgym serve-verifier``) to check on.
        token: The service's bearer token.
        workers: Worker processes (local pool) or concurrent requests (service).
        reward_map: Verdict -> reward (default OK 1, CHEATING -1, else 0).
        feedback_chars: Longest feedback text a repair turn shows.
        timeout_s: Longest wait for one batch; past it the unfinished replies are harness failures.
        tactic_verifier: The verifier tactic sessions open on (one system; the caller owns it). Without
            one, a verifier per system is made on first use and closed by :meth:`close`.
    """

    def __init__(self, suite: SuiteLike, *, pool: Any = None, service_url: str | None = None,
                 token: str | None = None, workers: int = 1, reward_map: Mapping[str, float] | None = None,
                 feedback_chars: int = 2000, timeout_s: float | None = None, tactic_verifier: Any = None) -> None:
        from proofgym.envs.proof_env import VerifierSet

        self.tasks = TaskSet(suite)
        self._tactic_verifiers = VerifierSet(tactic_verifier, None)
        # A verifier keeps warm prover sessions that are not meant for two threads at once; tactic sessions
        # (OpenEnv serves them from a thread pool) take turns on it, each step whole.
        self.tactic_lock = threading.Lock()
        self.service_url = service_url
        self._token = token
        self._workers = int(workers)
        self._given_pool = pool
        self._made_pool: Any = None
        self._lock = threading.Lock()
        self.reward = VerifierReward(self.tasks.by_id, pool, reward_map=reward_map, timeout_s=timeout_s,
                                     feedback_chars=feedback_chars)

    # -- the checker ----------------------------------------------------------------------------
    @property
    def pool(self) -> Any:
        """The pool checks run on (made on first use when none was given)."""
        if self._given_pool is not None:
            return self._given_pool
        with self._lock:
            if self._made_pool is None:
                self._made_pool = self._make_pool()
                self.reward.pool = self._made_pool
            return self._made_pool

    def _make_pool(self) -> Any:
        if self.service_url:
            from proofgym.envs.verifiers.pool.inprocess import InProcessPool
            from proofgym.envs.verifiers.service.client import ServiceVerifier

            systems = {t.system for t in self.tasks}
            return InProcessPool({s: ServiceVerifier(self.service_url, s, token=self._token) for s in systems},
                                 workers=max(1, self._workers))

        return LocalVerifierPool(max(1, self._workers))

    def close(self) -> None:
        """Close the pool and tactic verifiers this scorer made (never ones it was given). Idempotent."""
        with self._lock:
            made, self._made_pool = self._made_pool, None
        if made is not None:
            made.close()
        self._tactic_verifiers.close()

    def __enter__(self) -> ProofScorer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- tasks ----------------------------------------------------------------------------------
    def task(self, task: str | Task) -> Task:
        """The task ``task`` names (a ``Task`` is returned as is)."""
        return task if isinstance(task, Task) else self.tasks.get(str(task))

    def prompt(self, task: str | Task, *, context_chars: int = 2000) -> list[dict[str, str]]:
        """The zero-shot chat prompt of a task, as GRPO and evaluation word it."""
        return prompt_messages(self.task(task), context_chars=context_chars)

    def repair_turn(self, task: str | Task, feedback: str) -> dict[str, str]:
        """The user turn that shows the verifier's feedback, as evaluation's repair rounds word it."""
        return repair_message(self.task(task).system, feedback)

    def rows(self, tasks: Iterable[Task] | None = None, *, context_chars: int = 2000) -> list[dict[str, Any]]:
        """Prompt rows (``prompt``, ``task_id``, ``system``, ``category``), GRPO's dataset columns."""
        return grpo_rows(self.tasks if tasks is None else tasks, context_chars=context_chars)

    # -- scoring --------------------------------------------------------------------------------
    def proof_of(self, task: str | Task, reply: Any) -> str:
        """The proof in a model reply (text or chat messages): its last fenced block, statement copy removed."""
        return self.reward.proof_of(reply, self.task(task))

    def score_many(self, pairs: Sequence[tuple[str | Task, Any]]) -> list[Outcome]:
        """Check ``(task, reply)`` pairs in parallel; a harness failure is an outcome with ``reward=None``."""
        tasks = [self.task(t) for t, _ in pairs]
        proofs = [self.proof_of(t, reply) for t, (_, reply) in zip(tasks, pairs, strict=True)]
        _ = self.pool  # make the pool now, so VerifierReward has it
        return self.reward.check(tasks, proofs)

    def score(self, task: str | Task, reply: Any) -> Outcome:
        """Check one reply: its verdict and reward, or a harness failure (``verdict`` and ``reward`` ``None``)."""
        return self.score_many([(task, reply)])[0]

    def session(self, task: str | Task, *, max_turns: int = 1) -> ProofSession:
        """A multi-turn repair episode on ``task``."""
        return ProofSession(self, self.task(task), max_turns=max_turns)

    def tactic_session(self, task: str | Task, *, max_steps: int = 50) -> TacticSession:
        """A Tactic-v0 episode on ``task`` (its prover's tactic mode: Coq or HOL Light). Close it when done."""
        task = self.task(task)
        with self._lock:
            verifier = self._tactic_verifiers.get(task.system)
        return TacticSession(self, task, verifier, max_steps=max_steps)


class ProofSession:
    """One task's repair episode: reply, verdict and feedback, until OK, CHEATING or the turn budget.

    A harness failure records no reward and ends the session (:meth:`Episode.fail`): the episode
    says nothing about the policy, and the adapter reports it as its library's "no reward".
    """

    def __init__(self, scorer: ProofScorer, task: Task, *, max_turns: int = 1) -> None:
        self.scorer = scorer
        self.task = task
        self.episode = Episode(task, max_attempts=max(1, int(max_turns)), reward_map=scorer.reward.reward_of,
                               ends_on=FINAL_VERDICTS, feedback_chars=scorer.reward.feedback_chars)

    def step(self, reply: Any) -> Turn:
        """Check one reply and record it; returns the turn (``reward`` ``None`` for a harness failure)."""
        if self.episode.done:
            raise RuntimeError(f"the session on {self.task.id} is over ({self.episode.attempt} turns); start another")
        proof = self.scorer.proof_of(self.task, reply)
        _ = self.scorer.pool
        result = self.scorer.reward.check_results([self.task], [proof])[0]
        if result.result is None:
            return self.episode.fail(proof, harness_error(result))
        return self.episode.record(proof, result.result)

    @property
    def done(self) -> bool:
        return self.episode.done

    @property
    def last(self) -> Turn | None:
        return self.episode.last

    @property
    def reward(self) -> float | None:
        """The last turn's reward (``None`` before the first turn and after a harness failure)."""
        return None if self.episode.last is None else self.episode.last.reward

    @property
    def harness_error(self) -> str:
        return "" if self.episode.last is None else self.episode.last.harness_error

    def feedback_turn(self) -> dict[str, str]:
        """The user turn that carries the last verdict's feedback (for the next attempt)."""
        return self.scorer.repair_turn(self.task, self.episode.feedback)


class TacticSession:
    """One task's Tactic-v0 episode: a ``TacticEnv`` (``proofgym/Tactic-v0``) on the task, stepped by an adapter.

    The env owns the semantics (a bad tactic is its observation with the prover's error and the state
    unchanged; a cheat costs the CHEATING reward; once no goal is left the whole proof is re-checked and
    that verdict is the reward); the session keeps the episode's return and turns a broken prover (an
    infrastructure exception out of the step) into a harness failure: no reward, the episode over.
    """

    def __init__(self, scorer: ProofScorer, task: Task, verifier: Any, *, max_steps: int = 50) -> None:
        from proofgym.envs.tactic_env import TacticEnv

        self.task = task
        self.env = TacticEnv([task], max_steps=max_steps, reward_map=dict(scorer.reward.reward_map.rewards),
                             verifier=verifier)
        self.observation: dict[str, Any] = {}
        self.rewards: list[float] = []
        self.verdict: str | None = None  # the whole-proof check's, once a path finished
        self.terminated = self.truncated = False
        self.harness_error = ""
        self._lock = scorer.tactic_lock
        try:
            with self._lock:
                self.observation, _ = self.env.reset(options={"task_id": task.id})
        except VerifierError as exc:
            self._broken(exc)

    def step(self, action: Any) -> tuple[float | None, dict[str, Any]]:
        """Apply one tactic (text, ``"@<state_id> tactic"`` or ``{"tactic", "state_id"}``): its reward and info.

        The reward is ``None`` for a harness failure (the episode then ends).
        """
        if self.done:
            raise RuntimeError(f"the tactic session on {self.task.id} is over ({len(self.rewards)} steps); "
                               f"start another")
        try:
            with self._lock:
                self.observation, reward, self.terminated, self.truncated, info = self.env.step(action)
        except VerifierError as exc:
            self._broken(exc)
            return None, {"harness_error": self.harness_error}
        self.rewards.append(float(reward))
        if info.get("result") is not None and info.get("proof") is not None:
            self.verdict = info["verdict"]  # a finished path's whole-proof verdict
        return float(reward), info

    def _broken(self, exc: BaseException) -> None:
        self.harness_error = f"{type(exc).__name__}: {exc}"
        self.truncated = True

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated

    @property
    def episode_return(self) -> float | None:
        """The sum of the step rewards (``None`` after a harness failure: the episode says nothing)."""
        return None if self.harness_error else sum(self.rewards)

    def describe(self) -> str:
        """The state for a model to read: the proof state's id and goals, the prover's last error, or the end."""
        if self.harness_error:
            return f"The prover itself failed ({self.harness_error}); this says nothing about the proof."
        obs = self.observation
        if self.terminated:
            return f"Proof complete: the whole proof was checked ({self.verdict})."
        lines = [f"Proof state {obs['state_id']} (step {obs['steps']}):", obs["goals"] or "(no goals)"]
        if obs["last_error"]:
            lines.append(f"Error: {obs['last_error']}")
        if self.truncated:
            lines.append("No more steps.")
        return "\n".join(lines)

    def close(self) -> None:
        """Stop the episode's prover session (the verifier itself is the scorer's). Idempotent."""
        with self._lock:
            self.env.close()


# -- one scorer per process, for trainers that load a reward by name ----------------------------
# verl, OpenRLHF and verifiers call a reward function (or build a task) in worker processes they
# start themselves, with no way to hand it an object: such a process gets its scorer here, made on
# first use from what the trainer's config names, and closed at exit.
_SCORERS: dict[tuple[str, str | None], ProofScorer] = {}
_MADE: set[tuple[str, str | None]] = set()
_REGISTRY_LOCK = threading.Lock()


def scorer_for(suite: str, *, service_url: str | None = None, token: str | None = None,
               workers: int = 2) -> ProofScorer:
    """This process's scorer for ``suite`` (checked on ``service_url`` if given), made on first use."""
    key = (str(suite), service_url or None)
    with _REGISTRY_LOCK:
        if key not in _SCORERS:
            if not _MADE:
                atexit.register(close_scorers)  # the worker processes of a made pool stop with this process
            _SCORERS[key] = ProofScorer(suite, service_url=service_url, token=token, workers=workers)
            _MADE.add(key)
        return _SCORERS[key]


def use_scorer(suite: str, scorer: ProofScorer | None, *, service_url: str | None = None) -> None:
    """Install ``scorer`` as this process's scorer for ``suite`` (``None`` removes it; its owner closes it)."""
    key = (str(suite), service_url or None)
    with _REGISTRY_LOCK:
        _MADE.discard(key)
        if scorer is None:
            _SCORERS.pop(key, None)
        else:
            _SCORERS[key] = scorer


def close_scorers() -> None:
    """Close the scorers :func:`scorer_for` made (never one installed with :func:`use_scorer`)."""
    with _REGISTRY_LOCK:
        made = [_SCORERS.pop(key) for key in list(_MADE) if key in _SCORERS]
        _MADE.clear()
    for scorer in made:
        scorer.close()
