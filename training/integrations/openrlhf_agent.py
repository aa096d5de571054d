"""proofgym in OpenRLHF: a multi-turn ``AgentInstance`` and a single-turn ``reward_func``.

OpenRLHF loads both from one Python file (``examples/integrations/openrlhf/agent_func.py``
re-exports them):

- ``--agent_func_path agent_func.py``: OpenRLHF's vLLM engine takes the file's ``AgentExecutor``
  (a ``MultiTurnAgentExecutor`` over :class:`ProofAgentInstance`); each sample is one repair episode
  (:class:`~proofgym.training.integrations.core.ProofSession`) on the task its label names: every
  generated reply is checked, the verifier's feedback becomes the next user turn, and OK, CHEATING
  or the turn budget ends it. The step reward is 0 until the last turn, which carries the final
  verdict's reward, so OpenRLHF's sum over turns is that verdict's reward (OK 1, FAIL 0, CHEATING -1).
- ``--remote_rm_url agent_func.py``: the file's :func:`reward_func` ``(queries, prompts, labels)``
  scores one-turn samples. (``--remote_rm_url http://HOST:PORT/reward`` on ``proofgym
  serve-verifier --suite S`` is the same reward over HTTP, no file needed.)

Labels (``--label_key``) are proofgym task ids. OpenRLHF builds its agents without arguments, so
the suite and the checker come from the environment, read when an agent is made:
``PROOFGYM_SUITE`` (default ``coq-tiny``), ``PROOFGYM_VERIFIER_URL`` (a running ``proofgym
serve-verifier``, shared by every engine; else local verifier workers per engine process),
``PROOFGYM_MAX_TURNS`` (default 3) and ``PROOFGYM_FEEDBACK_TEMPLATE`` (how a feedback turn is
written into the running text; default ChatML, as Qwen models use).

A harness failure has no reward: :func:`reward_func` raises, and OpenRLHF's single-turn executor
then leaves the sample's reward ``None``; an agent step raises too, since the multi-turn contract
has no "no reward" value and a 0 would be a false verdict.

OpenRLHF itself is imported only when ``AgentInstance``/``AgentExecutor`` are first read: the full
package pins flash-attn, deepspeed and vLLM-era versions that do not install on a CPU machine.
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Sequence
from typing import Any

from proofgym.envs.errors import DependencyNotInstalled, VerifierError
from proofgym.training.integrations.core import CHATML_FEEDBACK, ProofScorer, ProofSession, scorer_for

__all__ = ["CHATML_FEEDBACK", "ProofAgentInstance", "reward_func"]



def _env_scorer() -> ProofScorer:
    """This process's scorer for ``PROOFGYM_SUITE`` / ``PROOFGYM_VERIFIER_URL`` (read now, not at import)."""
    return scorer_for(os.environ.get("PROOFGYM_SUITE", "coq-tiny"),
                      service_url=os.environ.get("PROOFGYM_VERIFIER_URL") or None,
                      token=os.environ.get("PROOFGYM_VERIFIER_TOKEN") or None,
                      workers=int(os.environ.get("PROOFGYM_WORKERS", "2")))


def _torch_tensor(values: Sequence[float]) -> Any:
    import torch

    return torch.tensor(list(values), dtype=torch.float32)


class ProofAgentInstance:
    """One sample's repair episode, in OpenRLHF's ``AgentInstance`` shape (async ``reset``/``step``).

    Args:
        scorer: The suite and checker (default: this process's, from the environment variables).
        max_turns: Replies per episode (default ``PROOFGYM_MAX_TURNS`` or 3).
        feedback_template: How a feedback turn is written, with ``{feedback}`` (default ChatML).
    """

    def __init__(self, *, scorer: ProofScorer | None = None, max_turns: int | None = None,
                 feedback_template: str | None = None) -> None:
        self.scorer = scorer or _env_scorer()
        self.max_turns = int(max_turns if max_turns is not None else os.environ.get("PROOFGYM_MAX_TURNS", "3"))
        self.feedback_template = feedback_template or os.environ.get("PROOFGYM_FEEDBACK_TEMPLATE") or CHATML_FEEDBACK
        self.session: ProofSession | None = None

    async def reset(self, states: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        """Start the episode on the task ``states["label"]`` names; the prompt is OpenRLHF's, unchanged."""
        self.session = self.scorer.session(str(states["label"]), max_turns=self.max_turns)
        return {"observation": states["observation"]}

    async def step(self, states: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        """Check the reply ``states["action_text"]``: the reward on the last turn, else feedback to repair with."""
        session = self.session
        if session is None:
            raise RuntimeError("step() before reset(): OpenRLHF resets each agent first")
        turn = await asyncio.to_thread(session.step, states["action_text"])
        if turn.reward is None:
            raise VerifierError(f"harness failure on {session.task.id}, no reward: {turn.harness_error}")
        reward = turn.reward if session.done else 0.0
        feedback = "" if session.done else self.feedback_template.format(
            feedback=session.feedback_turn()["content"])
        verdict = turn.verdict.value if turn.verdict is not None else ""
        return {"rewards": _torch_tensor([reward]), "scores": _torch_tensor([turn.reward]),
                "environment_feedback": feedback, "done": session.done,
                "sampling_params": states.get("sampling_params"),
                "extra_logs": {"proof_ok": _torch_tensor([float(verdict == "OK")]),
                               "proof_cheating": _torch_tensor([float(verdict == "CHEATING")]),
                               "repair_turns": _torch_tensor([float(session.episode.attempt)])}}


def reward_func(queries: Sequence[str], prompts: Sequence[str], labels: Sequence[str]) -> dict[str, Any]:
    """OpenRLHF's ``--remote_rm_url file.py`` reward: each query is prompt + reply, each label a task id.

    Raises:
        VerifierError: a harness failure in the batch (OpenRLHF then leaves the sample's reward ``None``).
    """
    scorer = _env_scorer()
    replies = [q[len(p):] if q.startswith(p) else q for q, p in zip(queries, prompts, strict=True)]
    outcomes = scorer.score_many(list(zip((str(label) for label in labels), replies, strict=True)))
    broken = [o for o in outcomes if o.reward is None]
    if broken:
        raise VerifierError(f"{len(broken)} of {len(outcomes)} checks had a harness failure, no reward: "
                            f"{broken[0].harness_error}")
    rewards = _torch_tensor([float(o.reward or 0.0) for o in outcomes])
    return {"rewards": rewards, "scores": rewards,
            "extra_logs": {"proof_ok": _torch_tensor([float(o.verdict == "OK") for o in outcomes]),
                           "proof_cheating": _torch_tensor([float(o.verdict == "CHEATING") for o in outcomes])}}


@functools.cache
def _openrlhf_classes() -> dict[str, type]:
    try:
        from openrlhf.utils.agent import AgentInstanceBase, MultiTurnAgentExecutor
    except ImportError as exc:
        raise DependencyNotInstalled(f"the OpenRLHF agent needs openrlhf: pip install 'proofgym[openrlhf]' "
                                     f"(on a GPU machine; {exc})") from exc

    class AgentInstance(ProofAgentInstance, AgentInstanceBase):
        """:class:`ProofAgentInstance` as OpenRLHF's ``AgentInstanceBase`` (built with no arguments)."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            ProofAgentInstance.__init__(self, **kwargs)

    class AgentExecutor(MultiTurnAgentExecutor):
        """OpenRLHF's multi-turn executor over :class:`AgentInstance` (what ``--agent_func_path`` loads)."""

        def __init__(self) -> None:
            super().__init__(AgentInstance)

    return {"AgentInstance": AgentInstance, "AgentExecutor": AgentExecutor}


def __getattr__(name: str) -> Any:
    # OpenRLHF's classes are made on first use, so this module imports without openrlhf installed.
    if name in ("AgentInstance", "AgentExecutor"):
        return _openrlhf_classes()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
