"""proofgym in TRL: one spec object whose three properties plug into ``GRPOTrainer``.

The shape is TRL's own (``trl.experimental.harbor.HarborSpec``, ``OpenRewardSpec``): build one
spec from a suite name, read ``.train_dataset``, ``.environment_factory`` and ``.reward_funcs``::

    from trl import GRPOConfig, GRPOTrainer
    from proofgym.training.integrations.trl_spec import ProofgymSpec

    spec = ProofgymSpec("coq-tiny", max_turns=2)     # or tools=True: a check_proof tool per rollout
    trainer = GRPOTrainer(model="Qwen/Qwen3-0.6B", args=GRPOConfig(),
                          train_dataset=spec.train_dataset, environment_factory=spec.environment_factory,
                          rollout_func=spec.rollout_func, reward_funcs=spec.reward_funcs)

With ``tactics=True`` each rollout proves its task in Tactic-v0 instead: the environment is a
:class:`TacticToolEnv` whose ``apply_tactic`` tool runs one tactic on the prover and answers the new goals
or the prover's error, and whose ``get_reward`` (TRL's env-owned reward) is the episode's return: the
whole-proof verdict once no goal is left (OK 1), -1 for each cheat tried, ``None`` if the prover broke.

Nothing here scores: the dataset rows are GRPO's (``training/data.py``), the tool env is
``training/environment.py``'s ``check_proof`` env, the repair rollout ``training/rollout.py``'s, the reward is
:class:`~proofgym.training.rewards.VerifierReward` (the verdict of the final answer; ``None`` for a
harness failure, which TRL turns into NaN and leaves out of the advantage).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import cached_property
from typing import Any

from proofgym.training.data import to_dataset
from proofgym.training.environment import environment_factory
from proofgym.training.integrations.core import ProofScorer, SuiteLike, TacticSession
from proofgym.training.rollout import RepairRollout

__all__ = ["ProofgymSpec", "TacticToolEnv"]

_TACTIC_INSTRUCTIONS = ("\n\nProve it one tactic at a time with the apply_tactic tool: each call answers the new "
                        "proof state or the prover's error. The proof counts once no goal is left.\n\n")


class TacticToolEnv:
    """One rollout's Tactic-v0 episode for TRL's ``environment_factory``: the ``apply_tactic`` tool and the reward.

    Args:
        scorer: The suite and the tactic verifier (shared by every rollout; the spec owns it).
        max_steps: Tactics per rollout; later calls are answered without running.
    """

    def __init__(self, scorer: ProofScorer, *, max_steps: int = 20) -> None:
        self._scorer = scorer
        self._max_steps = int(max_steps)
        self.session: TacticSession | None = None

    def reset(self, **row: Any) -> str:
        """Open the row's task (``task_id``) in tactic mode; the initial goals are appended to the prompt."""
        self.close()
        self.session = self._scorer.tactic_session(str(row["task_id"]), max_steps=self._max_steps)
        return _TACTIC_INSTRUCTIONS + self.session.describe()

    def apply_tactic(self, tactic: str) -> str:
        """Run one tactic on the current proof state with the proof assistant.

        Args:
            tactic: One tactic or proof sentence (Coq: `intros.`, `lia.`; HOL Light: `ARITH_TAC`). Prefix it with
                `@<state id>` to run it on an earlier proof state instead.

        Returns:
            The new proof state (its id and open goals), the prover's error with the state unchanged, or that the
            proof is complete.
        """
        if self.session is None:
            return "No task: the environment was not reset."
        if self.session.done:
            return "The episode is over: " + self.session.describe()
        self.session.step(tactic)
        return self.session.describe()

    def get_reward(self) -> float | None:
        """The episode's return (TRL's env-owned reward); ``None`` when the prover broke (no reward, never 0)."""
        return None if self.session is None else self.session.episode_return

    def close(self) -> None:
        """Stop the episode's prover session."""
        if self.session is not None:
            self.session.close()
            self.session = None


class ProofgymSpec:
    """A proofgym suite wired into TRL's ``GRPOTrainer``.

    Args:
        suite: A suite name (``coq-tiny``, or one ``proofgym build`` made), a path, or a list of tasks.
        tools: Give each rollout the ``check_proof`` tool (``environment_factory``); without it
            ``environment_factory`` is ``None``.
        max_tool_calls: ``check_proof`` calls a rollout may make.
        max_turns: Attempts per repair episode: above 1, ``rollout_func`` runs attempt, the verifier's
            feedback as the next user turn, retry (``training/rollout.py``); 1: one answer per prompt.
        pool: A verifier pool (the caller closes it); else one is made on first use (``close()`` frees it).
        service_url: Check on a running ``proofgym serve-verifier`` instead of a local pool.
        token: The service's bearer token.
        workers: Local pool workers (or concurrent service requests).
        reward_map: Verdict -> reward (default OK 1, CHEATING -1, else 0).
        context_chars: Longest task context a prompt shows.
        task_ids: Only these tasks (default: the whole suite).
        tactics: Tactic-v0 rollouts (:class:`TacticToolEnv`): ``environment_factory`` gives the ``apply_tactic``
            tool, the env owns the reward (``reward_funcs`` is empty); Coq and HOL Light suites.
        max_steps: Tactics per rollout (``tactics=True``).
        tactic_verifier: The verifier tactic sessions open on (the caller closes it); else one is made.
    """

    def __init__(self, suite: SuiteLike, *, tools: bool = False, max_tool_calls: int = 4, max_turns: int = 1,
                 pool: Any = None,
                 service_url: str | None = None, token: str | None = None, workers: int = 2,
                 reward_map: Mapping[str, float] | None = None, context_chars: int = 2000,
                 task_ids: list[str] | None = None, tactics: bool = False, max_steps: int = 20,
                 tactic_verifier: Any = None) -> None:
        self.scorer = ProofScorer(suite, pool=pool, service_url=service_url, token=token, workers=workers,
                                  reward_map=reward_map, tactic_verifier=tactic_verifier)
        self.tactics = bool(tactics)
        self.max_steps = int(max_steps)
        self._tactic_envs: list[TacticToolEnv] = []
        self.tools = bool(tools)
        self.max_tool_calls = int(max_tool_calls)
        self.max_turns = int(max_turns)
        self.context_chars = int(context_chars)
        self.task_ids = list(task_ids) if task_ids is not None else None

    @cached_property
    def train_dataset(self) -> Any:
        """A ``datasets.Dataset``: ``prompt`` (chat messages), ``task_id``, ``system``, ``category``."""
        tasks = self.scorer.tasks if self.task_ids is None else [self.scorer.task(t) for t in self.task_ids]
        return to_dataset(self.scorer.rows(tasks, context_chars=self.context_chars))

    @property
    def environment_factory(self) -> Callable[[], Any] | None:
        """The tactic env's factory (``tactics=True``), the ``check_proof`` tool env's (``tools=True``), else ``None``."""
        if self.tactics:
            return self._make_tactic_env
        if not self.tools:
            return None

        return environment_factory(self.scorer.tasks.by_id, self.scorer.pool, max_calls=self.max_tool_calls)

    @cached_property
    def rollout_func(self) -> Any:
        """The repair rollout (``max_turns > 1``) for ``GRPOTrainer(rollout_func=...)``, else ``None``.

        Its episodes are checked as they run, and the reward reads their outcomes (the ``rollout_outcomes``
        column TRL passes on) instead of checking again.
        """
        if self.max_turns <= 1:
            return None

        return RepairRollout(list(self.scorer.tasks), self.scorer.pool, max_turns=self.max_turns,
                             reward_map=self.scorer.reward.reward_map, context_chars=self.context_chars)

    def _make_tactic_env(self) -> TacticToolEnv:
        env = TacticToolEnv(self.scorer, max_steps=self.max_steps)
        self._tactic_envs.append(env)  # TRL pools and resets them; close() stops their prover sessions
        return env

    @property
    def reward_funcs(self) -> list[Any]:
        """``[VerifierReward]``: the verifier's verdict on each final answer, ``None`` for a harness failure.

        Empty with ``tactics=True``: the tactic env owns the reward (its ``get_reward``, which TRL adds).
        """
        if self.tactics:
            return []
        _ = self.scorer.pool  # the reward checks on the scorer's pool: make it now if it is made here
        return [self.scorer.reward]

    def close(self) -> None:
        """Close the pool and verifiers the spec made (never ones it was given), and its tactic envs' sessions."""
        for env in self._tactic_envs:
            env.close()
        self.scorer.close()

    def __enter__(self) -> ProofgymSpec:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
