"""proofgym in verl's agent loop: a multi-turn repair episode per sample, in ``AgentLoopBase``'s shape.

verl (0.9, ``verl/experimental/agent_loop``) builds an agent loop per sample from the entry its
``actor_rollout_ref.rollout.agent.agent_loop_config_path`` YAML names, with hydra::

    - name: proofgym_repair
      _target_: proofgym.training.integrations.verl_agent.ProofRepairAgentLoop
      max_turns: 3                       # the rest are this class's keywords
      service_url: http://127.0.0.1:8000 # a running `proofgym serve-verifier` (else local workers)

and awaits ``loop.run(sampling_params, **row)`` on each row whose ``agent_name`` is ``proofgym_repair``
(the rows :func:`~proofgym.training.integrations.verl_reward.verl_rows` writes, with ``agent_name`` added).
Each turn is one ``server_manager.generate(request_id=, prompt_ids=, sampling_params=)`` call; the reply
is checked by the shared core (:class:`~proofgym.training.integrations.core.ProofSession`), the
verifier's feedback is appended as a user turn (masked out of the loss: ``response_mask`` 0), and OK,
CHEATING or the turn budget ends the episode. ``reward_score`` is the final verdict's reward (OK 1,
FAIL/TIMEOUT/ERROR 0, CHEATING -1), so verl needs no reward manager for these rows.

A harness failure raises :class:`~proofgym.envs.errors.VerifierError`: verl's output has no "no reward"
value and a 0 would be a false verdict.

verl itself is not imported unless installed: the class is ``AgentLoopBase``-shaped (the constructor
keywords verl passes, an async ``run``) rather than a subclass, and ``run`` returns verl's
``AgentLoopOutput`` when verl is importable, else :class:`RepairLoopOutput` with the same fields. verl
0.9.1 pins ``transformers<5.11`` (this project runs 5.2x), so the tests drive this class through that
contract with a scripted ``server_manager``, not with verl itself.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from typing import Any

from proofgym.envs.errors import VerifierError
from proofgym.training.integrations.core import CHATML_FEEDBACK, ProofScorer, scorer_for
from proofgym.training.integrations.verl_reward import _get, _suite_of

__all__ = ["ProofRepairAgentLoop", "RepairLoopOutput"]


@dataclass
class RepairLoopOutput:
    """verl's ``AgentLoopOutput`` fields, for when verl is not installed."""

    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    response_logprobs: list[float] | None = None
    reward_score: float | None = None
    num_turns: int = 0
    metrics: dict[str, Any] = field(default_factory=dict)
    extra_fields: dict[str, Any] = field(default_factory=dict)


def _loop_output(**fields: Any) -> Any:
    try:
        from verl.experimental.agent_loop.agent_loop import AgentLoopOutput
    except ImportError:
        return RepairLoopOutput(**fields)
    return AgentLoopOutput(**fields)


def _token_ids(encoded: Any) -> list[int]:
    """Token ids from ``apply_chat_template(tokenize=True)``: a list, or a mapping with ``input_ids``."""
    ids = encoded["input_ids"] if hasattr(encoded, "keys") else encoded
    return [int(i) for i in ids]


class ProofRepairAgentLoop:
    """One sample's repair episode, in verl's ``AgentLoopBase`` shape.

    Args:
        trainer_config: verl's ``DictConfigWrap`` of the trainer config (``response_length`` and
            ``multi_turn.max_assistant_turns`` are read from ``actor_rollout_ref.rollout``).
        server_manager: verl's LLM client: ``await generate(request_id=, prompt_ids=, sampling_params=)``.
        tokenizer: The policy's tokenizer.
        max_turns: Replies per episode (default: ``max_assistant_turns``, else 3).
        suite: The suite (default: each row's ``data_source``, ``proofgym/<suite>``).
        service_url: A running ``proofgym serve-verifier`` to check on (else local workers per process).
        token: The service's bearer token.
        workers: Local workers (or concurrent service requests) of this process's scorer.
        feedback_template: How a feedback turn is written, with ``{feedback}`` (default ChatML).
        scorer: A scorer to use instead of this process's (its owner closes it).
    """

    def __init__(self, trainer_config: Any = None, server_manager: Any = None, tokenizer: Any = None,
                 processor: Any = None, dataset_cls: Any = None, data_config: Any = None, *,
                 max_turns: int | None = None, suite: str | None = None, service_url: str | None = None,
                 token: str | None = None, workers: int = 2, feedback_template: str = CHATML_FEEDBACK,
                 scorer: ProofScorer | None = None, **kwargs: Any) -> None:
        rollout = _get(getattr(trainer_config, "config", trainer_config), "actor_rollout_ref", "rollout")
        self.server_manager = server_manager
        self.tokenizer = tokenizer
        self.response_length = int(_get(rollout, "response_length") or 4096)
        self.max_turns = int(max_turns or _get(rollout, "multi_turn", "max_assistant_turns") or 3)
        self.suite = suite
        self.service_url = service_url
        self.token = token
        self.workers = int(workers)
        self.feedback_template = feedback_template
        self.scorer = scorer

    def _scorer_for(self, row: dict[str, Any]) -> ProofScorer:
        if self.scorer is not None:
            return self.scorer
        suite = _suite_of(str(row.get("data_source", "")), row.get("extra_info"), self.suite)
        return scorer_for(suite, service_url=self.service_url, token=self.token, workers=self.workers)

    async def run(self, sampling_params: dict[str, Any], **row: Any) -> Any:
        """Play the episode on the row's task (``reward_model.ground_truth``) from its ``raw_prompt``."""
        task_id = str(row["reward_model"]["ground_truth"])
        session = self._scorer_for(row).session(task_id, max_turns=self.max_turns)
        prompt_ids = _token_ids(self.tokenizer.apply_chat_template(list(row["raw_prompt"]), tokenize=True,
                                                                   add_generation_prompt=True))
        response_ids: list[int] = []
        response_mask: list[int] = []
        while not session.done and len(response_ids) < self.response_length:
            out = await self.server_manager.generate(request_id=uuid.uuid4().hex,
                                                     prompt_ids=prompt_ids + response_ids,
                                                     sampling_params=sampling_params)
            response_ids += list(out.token_ids)
            response_mask += [1] * len(out.token_ids)
            reply = self.tokenizer.decode(out.token_ids, skip_special_tokens=True)
            turn = await asyncio.to_thread(session.step, reply)
            if turn.reward is None:
                raise VerifierError(f"harness failure on {task_id}, no reward: {turn.harness_error}")
            if not session.done:
                feedback = self.feedback_template.format(feedback=session.feedback_turn()["content"])
                feedback_ids = self.tokenizer.encode(feedback, add_special_tokens=False)
                response_ids += feedback_ids
                response_mask += [0] * len(feedback_ids)
        verdicts = [None if t.verdict is None else t.verdict.value for t in session.episode.turns]
        return _loop_output(prompt_ids=prompt_ids, response_ids=response_ids[: self.response_length],
                            response_mask=response_mask[: self.response_length], reward_score=session.reward,
                            num_turns=2 * session.episode.attempt, metrics={},
                            extra_fields={"verdicts": verdicts, "turn_scores": [], "tool_rewards": []})
