"""proofgym as a verifiers (Prime Intellect) v1 taskset, and the ``load_environment`` entry point.

verifiers 0.4 (``pip install 'proofgym[verifiers]'``) loads a taskset package by id: the package
exports its ``vf.Taskset`` subclass in ``__all__`` (``examples/integrations/verifiers/proofgym_verifiers``
is that package for the Environments Hub). Here:

- :class:`ProofgymTaskset` yields one :class:`ProofTask` per suite task (``TaskData.prompt`` is the
  chat prompt GRPO and evaluation use; ``task_id`` names the proofgym task);
- :meth:`ProofTask.proof` is the ``@vf.reward``: the proof in the agent's last reply
  (``trace.last_reply``) checked by the shared core, OK 1.0, FAIL/TIMEOUT/ERROR 0.0, CHEATING -1.0;
- :meth:`ProofTask.validate` is verifiers' model-free check: the task's reference proof verifies;
- :class:`ProofgymRepairEnv` is the taskset's ``vf.Env`` (the Hub package exports it, so verifiers runs
  every proofgym rollout through it): the agent answers, and with ``max_turns`` above 1 the reply is
  checked by the shared core (:class:`~proofgym.training.integrations.core.ProofSession`) and the
  verifier's feedback goes back as the next user turn (``interaction.turn``), until OK, CHEATING or the
  budget; the exchange's last reply is then scored by :meth:`ProofTask.proof` as any rollout is.
  ``max_turns=1`` (the default) is one answer, scored;
- :func:`load_environment` is the module-level entry (``vf.load_environment`` with this taskset).

A harness failure (the verifier broke) raises :class:`~proofgym.envs.errors.VerifierError` out of the
reward; verifiers attributes it to the task boundary (``vf.TaskError``), records it on the trace and
leaves its reward ``None``: "a bad rollout is data, not a crash", and never a 0.

The checker: one :class:`~proofgym.training.integrations.core.ProofScorer` per (suite, service URL)
in each process that scores (a verifiers env worker), made on first use; with ``service_url`` every
worker checks on one shared ``proofgym serve-verifier``. :func:`use_scorer` installs one the caller owns.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

from proofgym.envs.errors import DependencyNotInstalled, VerifierError
from proofgym.envs.types import Verdict
from proofgym.training.integrations.core import ProofScorer, scorer_for, use_scorer

try:
    import verifiers.v1 as vf
except ImportError as exc:  # pragma: no cover - the message is the point
    raise DependencyNotInstalled(
        f"the verifiers adapter needs verifiers 0.4: pip install 'proofgym[verifiers]' ({exc})") from exc

__all__ = ["TASKSET_ID", "ProofgymRepairEnv", "ProofgymTaskset", "load_environment", "use_scorer"]

#: The id verifiers loads the taskset by: the Hub package ``examples/integrations/verifiers`` installs it.
TASKSET_ID = "proofgym-verifiers"

def _scorer(config: ProofTaskConfig) -> ProofScorer:
    return scorer_for(config.suite, service_url=config.service_url, token=config.token, workers=config.workers)


class ProofTaskConfig(vf.TaskConfig):
    """Where a task's replies are checked (``--env.taskset.task.*``)."""

    suite: str = "coq-tiny"
    """The proofgym suite the tasks come from (a packaged or built suite name, or a path)."""
    service_url: str | None = None
    """A running ``proofgym serve-verifier`` to check on; unset: local worker processes."""
    token: str | None = None
    """The service's bearer token."""
    workers: int = 2
    """Local verifier workers (or concurrent service requests) per env worker process."""


class ProofgymTasksetConfig(vf.TasksetConfig):
    """The taskset's config (``--env.taskset.*``); the suite is the task config's."""

    task: ProofTaskConfig = ProofTaskConfig()
    context_chars: int = 2000
    """Longest task context a prompt shows."""


class ProofTaskData(vf.TaskData):
    """A proofgym task on the wire: verifiers' fields plus the proofgym id, system and category."""

    task_id: str
    system: str
    category: str = ""


class ProofTask(vf.Task[ProofTaskData, vf.State, ProofTaskConfig]):
    """Prove the statement; the real prover's verdict on the last reply is the reward."""

    @vf.reward
    async def proof(self, task: ProofTaskData, trace: vf.Trace) -> float:
        """OK 1.0, FAIL/TIMEOUT/ERROR 0.0, CHEATING -1.0; a harness failure raises (the rollout's error, no reward)."""
        scorer = _scorer(self.config)
        outcome = await _in_thread(scorer.score, task.task_id, trace.last_reply)
        if outcome.reward is None:
            raise VerifierError(f"harness failure, no reward: {outcome.harness_error}")
        trace.info["proofgym"] = {"verdict": outcome.verdict, "reasons": list(outcome.reasons),
                                  "feedback": outcome.feedback}
        return float(outcome.reward)

    async def validate(self, runtime: Any = None) -> bool | None:
        """The reference proof verifies (``None`` when the task has none)."""
        scorer = _scorer(self.config)
        reference = scorer.task(self.data.task_id).reference_proof
        if not reference.strip():
            return None
        outcome = await _in_thread(scorer.score, self.data.task_id, reference)
        if outcome.verdict is None:
            raise VerifierError(f"harness failure while validating {self.data.task_id}: {outcome.harness_error}")
        return outcome.verdict == Verdict.OK.value


class ProofgymTaskset(vf.Taskset[ProofTask, ProofgymTasksetConfig]):
    """The tasks of a proofgym suite, each a :class:`ProofTask`."""

    def load(self) -> Iterator[ProofTask]:
        task_config = self.config.task
        scorer = _scorer(task_config)
        for task in scorer.tasks:
            data = ProofTaskData(id=task.id, name=task.id, task_id=task.id, system=task.system,
                                 category=task.category,
                                 prompt=scorer.prompt(task, context_chars=self.config.context_chars))
            yield ProofTask(data, task_config)


class ProofgymRepairEnvConfig(vf.EnvConfig):
    """The env's config (``--env.*``): the one ``agent`` seat and the repair budget."""

    agent: vf.AgentConfig = vf.AgentConfig()
    """The policy (``--env.agent.*``), as in a plain single-agent run."""
    max_turns: int = 1
    """Replies per episode: above 1, a checked reply that is not OK or CHEATING gets the verifier's feedback
    as the next user turn."""


class ProofgymRepairEnv(vf.Env[ProofgymRepairEnvConfig]):
    """A proofgym task's repair episode in verifiers: answer, the verifier's feedback, answer again."""

    async def run(self, task: Any, agents: Any) -> None:
        scorer = _scorer(task.config)
        session = scorer.session(task.data.task_id, max_turns=self.config.max_turns)
        async with agents.agent.interaction(task) as interaction:
            segment = await interaction.turn()  # the task's prompt speaks first
            while not segment.terminated and session.episode.max_attempts > 1:
                turn = await _in_thread(session.step, segment.last_reply)
                if turn.reward is None:
                    raise VerifierError(f"harness failure, no reward: {turn.harness_error}")
                if session.done:
                    break
                segment = await interaction.turn(session.feedback_turn()["content"])
            verdicts = [None if t.verdict is None else t.verdict.value for t in session.episode.turns]
            interaction.trace.info["proofgym_turns"] = verdicts  # the exchange's last reply is scored as usual


def load_environment(suite: str = "coq-tiny", *, service_url: str | None = None, workers: int = 2,
                     max_turns: int = 1, **env: Any) -> Any:
    """The verifiers ``Env`` over a proofgym suite, built by verifiers' own loader (``vf.load_environment``).

    ``env`` is the rest of the ``EnvConfig`` (the agent, its harness). verifiers 0.4 has no pre-v1
    ``SingleTurnEnv``/``Rubric`` classes, so this entry returns the v1 ``Env``: a
    :class:`ProofgymRepairEnv` (``max_turns`` replies per episode).
    """
    taskset = {"id": TASKSET_ID, "task": {"suite": suite, "service_url": service_url, "workers": workers}}
    return vf.load_environment(ProofgymRepairEnvConfig(taskset=taskset, max_turns=max_turns, **env))


async def _in_thread(fn: Any, *args: Any) -> Any:
    """Run a blocking check off the event loop (a check takes a prover's time)."""
    return await asyncio.to_thread(fn, *args)
