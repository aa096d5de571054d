"""Multi-turn repair in GRPO: attempt, verifier feedback, retry, as a TRL ``rollout_func``.

:class:`RepairRollout` is passed to ``GRPOTrainer(rollout_func=...)``. TRL calls it with the
prompts of a generation batch, each already repeated ``num_generations`` times, and the
trainer. Each prompt is one :class:`~proofgym.envs.episode.Episode` (the loop the env, eval and
the strategies share) of up to ``max_turns`` turns:

1. the policy writes a reply (one batched ``generate`` for the episodes not yet done, or one per
   ``generation_chunk`` of them);
2. the proof in it is checked on the verifier pool and the episode ``record``s the result, or ``fail``s
   on a harness failure. With ``generation_chunk``, a chunk's proofs go to the verifier as soon as it is
   decoded, while the next chunk generates (:func:`~proofgym.training.pipeline.check_while_generating`);
3. OK, CHEATING or a harness failure ends the episode; otherwise the episode's feedback,
   worded as evaluation's repair round words it, becomes the next user turn.

One episode is one completion for TRL: the replies and the feedback turns between them
(with the chat template's turn markers) concatenated. ``env_mask`` is 1 on the policy's
tokens and 0 on the feedback tokens, so the loss never trains the policy to predict the
verifier's messages. The reward is the final verdict, ``turn_discount ** (turns - 1)``
times for a positive one (a proof found later is worth less); a cheat keeps its full
penalty and ends the episode at once. The outcomes travel to the reward function as the
``rollout_outcomes`` column (:class:`~proofgym.training.rewards.VerifierReward` logs them),
so nothing is checked twice.

Generation uses the trainer's model through ``transformers`` (the CPU path, and any GPU
without vLLM), or TRL's vLLM engine when the trainer has one (``use_vllm``; untested here,
where there is no GPU), capped at ``turn_tokens`` per turn either way.

In a multi-process run every rank runs the same number of turns with the same batch width
(an all-reduce of the number of episodes still going), so no rank leaves the others waiting in
a collective (:func:`~proofgym.training.distributed.max_across_ranks`).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from proofgym.envs.episode import FINAL_VERDICTS, Episode, Turn
from proofgym.envs.rewards import RewardMap
from proofgym.envs.types import Task
from proofgym.training.data import prompt_key, prompt_messages, repair_message
from proofgym.training.distributed import max_across_ranks
from proofgym.training.pipeline import DEFAULT_DEPTH, check_nonempty, check_while_generating
from proofgym.training.rewards import Outcome, VerifierReward, harness_error


class Generator(Protocol):
    """Generates one continuation per token-id prompt: ``(completion ids, per-token logprobs or None)``."""

    def __call__(self, prompt_ids: Sequence[Sequence[int]], max_new_tokens: int
                 ) -> tuple[list[list[int]], list[list[float]] | None]: ...


class ModelGenerator:
    """Batched ``model.generate`` with left padding; a completion keeps its EOS and loses the padding.

    Each distinct prompt of a batch is prefilled once (:func:`~proofgym.agents.generation.generate_shared_prefix`).

    Args:
        model: A causal LM.
        tokenizer: Its tokenizer (pad and EOS ids).
        generation_config: ``transformers.GenerationConfig`` (sampling); ``max_new_tokens`` is set per call.
    """

    def __init__(self, model: Any, tokenizer: Any, generation_config: Any = None) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.generation_config = generation_config

    def __call__(self, prompt_ids: Sequence[Sequence[int]], max_new_tokens: int
                 ) -> tuple[list[list[int]], list[list[float]] | None]:
        import torch

        return _generate(self.model, self.tokenizer, self.generation_config, prompt_ids, max_new_tokens, torch)


def _eos_ids(tokenizer: Any, model: Any = None) -> set[int]:
    ids = {tokenizer.eos_token_id}
    config_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids.update(config_eos if isinstance(config_eos, (list, tuple)) else [config_eos])
    return {i for i in ids if i is not None}


def _generate(model: Any, tokenizer: Any, generation_config: Any, prompt_ids: Sequence[Sequence[int]],
              max_new_tokens: int, torch: Any) -> tuple[list[list[int]], None]:
    from transformers import GenerationConfig

    from proofgym.agents.generation import generate_shared_prefix

    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    width = max(len(p) for p in prompt_ids)
    config = copy.deepcopy(generation_config) if generation_config is not None else GenerationConfig(do_sample=False)
    config.max_new_tokens = max_new_tokens
    config.pad_token_id = pad
    eos = _eos_ids(tokenizer, model)
    with torch.no_grad():  # each distinct prompt prefilled once (k samples of a task, a GRPO group)
        output = generate_shared_prefix(model, prompt_ids, config, pad_token_id=pad)
    completions = []
    for row in output[:, width:].tolist():
        end = next((i + 1 for i, t in enumerate(row) if t in eos), len(row))
        kept = row[:end]
        if end == len(row):  # no EOS: drop right padding of a sequence that finished early (pad == eos excluded)
            while kept and kept[-1] == pad and pad not in eos:
                kept.pop()
        completions.append(kept)
    return completions, None


class TrainerGenerator:
    """Generation with a TRL trainer's policy: its vLLM engine when it has one, else ``model.generate``."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer

    def __call__(self, prompt_ids: Sequence[Sequence[int]], max_new_tokens: int
                 ) -> tuple[list[list[int]], list[list[float]] | None]:
        import torch

        trainer = self.trainer
        if getattr(trainer, "use_vllm", False):
            # TRL's vLLM generation reads its token budget from its own max_completion_length, not from the
            # call: set it for this call, so a repair turn (or a curriculum sample) gets max_new_tokens, not
            # the whole episode's budget.
            engine = trainer.vllm_generation
            # vLLM holds the weights of the last sync: before the first GRPO step that is the checkpoint it loaded,
            # not the model being trained (the SFT warm start, in memory). Sync as TRL does before it generates,
            # so the curriculum's step-0 estimate measures the policy GRPO starts from (once per step, as TRL).
            step = getattr(getattr(trainer, "state", None), "global_step", None)
            if step is not None and getattr(trainer, "_last_loaded_step", None) != step:
                engine.sync_weights()
                trainer._last_loaded_step = step
            budget = engine.max_completion_length
            engine.max_completion_length = max_new_tokens
            try:
                _, completion_ids, logprobs, _ = engine.generate(
                    prompts=[list(p) for p in prompt_ids], images=None, num_generations=1)
            finally:
                engine.max_completion_length = budget
            return ([list(c)[:max_new_tokens] for c in completion_ids],
                    [[lp[0] for lp in seq][:max_new_tokens] for seq in logprobs])
        from trl.models import unwrap_model_for_generation

        from proofgym.training.distributed import keep_checkpointing

        with keep_checkpointing(trainer.model_wrapped), \
                unwrap_model_for_generation(trainer.model_wrapped, trainer.accelerator,
                                            gather_deepspeed3_params=trainer.args.ds3_gather_for_generation,
                                            generation_kwargs=getattr(trainer, "generation_kwargs", None)) as model:
            return _generate(model, tokenizer_of(trainer.processing_class), getattr(trainer, "generation_config", None),
                             prompt_ids, max_new_tokens, torch)


def tokenizer_of(processing_class: Any) -> Any:
    """The tokenizer of a trainer's ``processing_class`` (a processor wraps one)."""
    return getattr(processing_class, "tokenizer", None) or processing_class


def render_chat(tokenizer: Any, messages: Sequence[Mapping[str, str]], *, generation_prompt: bool) -> str:
    """``messages`` rendered with the tokenizer's chat template, as text."""
    return tokenizer.apply_chat_template([dict(m) for m in messages], tokenize=False,
                                         add_generation_prompt=generation_prompt)


def token_ids(tokenizer: Any, text: str) -> list[int]:
    """Token ids of rendered text (the template already holds any special tokens)."""
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


class RepairRollout:
    """A TRL ``rollout_func`` for verifier-feedback repair (see the module docstring).

    Args:
        tasks: The training tasks (a prompt is matched to its task by its text).
        pool: The verifier pool that checks each turn (the caller owns it).
        max_turns: Attempts per episode (1 makes it single-turn).
        turn_discount: Factor per extra turn on a positive reward.
        reward_map: Verdict -> reward.
        feedback_chars: Longest feedback text shown to the policy.
        turn_tokens: Most new tokens per turn (default: the trainer's ``max_completion_length``).
        context_chars: The ``context_chars`` the prompts were built with (to find tasks by prompt).
        generator: Generation backend (default: :class:`TrainerGenerator` of the calling trainer).
        format_bonus: Optional shaping of FAIL/TIMEOUT turns (off by default; see :mod:`proofgym.training.rewards`).
        generation_chunk: Episodes per ``generate`` call within a turn (None: the whole turn in one call). Each
            chunk's proofs are checked while the next chunk generates; the same on every rank (the turn's width
            is), so ranks stay in lockstep.
        pipeline_depth: Chunks being checked while the next generates (0: check each chunk first).
    """

    def __init__(self, tasks: Iterable[Task], pool: Any, *, max_turns: int = 2, turn_discount: float = 1.0,
                 reward_map: RewardMap | Mapping[str, float] | None = None, feedback_chars: int = 1000,
                 turn_tokens: int | None = None, context_chars: int = 2000, generator: Generator | None = None,
                 format_bonus: float = 0.0, generation_chunk: int | None = None,
                 pipeline_depth: int = DEFAULT_DEPTH) -> None:
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        if generation_chunk is not None and generation_chunk < 1:
            raise ValueError(f"generation_chunk must be >= 1 (or None: the whole turn), got {generation_chunk}")
        if not 0 < turn_discount <= 1:
            raise ValueError(f"turn_discount must be in (0, 1], got {turn_discount}")
        self.tasks = list(tasks)
        self.by_prompt = {prompt_key(prompt_messages(t, context_chars=context_chars)): t for t in self.tasks}
        self.checker = VerifierReward(self.tasks, pool, reward_map=reward_map, format_bonus=format_bonus)
        self.max_turns = int(max_turns)
        self.turn_discount = float(turn_discount)
        self.feedback_chars = int(feedback_chars)
        self.turn_tokens = turn_tokens
        self.generator = generator
        self.generation_chunk = generation_chunk
        self.pipeline_depth = int(pipeline_depth)

    def task_for(self, prompt: Any) -> Task:
        task = self.by_prompt.get(prompt_key(prompt))
        if task is None:
            from proofgym.envs.errors import ProofgymError

            raise ProofgymError("rollout got a prompt that matches no training task (were the prompts built with "
                                "the same context_chars?)")
        return task

    def feedback_ids(self, tokenizer: Any, conversation: Sequence[Mapping[str, str]], before: str,
                     reply_ids: Sequence[int], feedback: Mapping[str, str]) -> tuple[list[int], str]:
        """Tokens between a reply and the next one: the end of the assistant turn, the feedback, the next header.

        Args:
            tokenizer: The policy's tokenizer (with a chat template).
            conversation: The messages so far, the reply (as text) last.
            before: The text the policy was given before this reply (the rendered conversation).
            reply_ids: The reply's tokens as generated.
            feedback: The user turn with the verifier's feedback.

        Returns:
            The tokens, and the text of everything up to the next reply. They are what the chat
            template puts there, so the policy sees evaluation's repair round exactly.
        """
        before = before + tokenizer.decode(list(reply_ids), skip_special_tokens=False)
        full = render_chat(tokenizer, [*conversation, feedback], generation_prompt=True)
        if full.startswith(before):
            return token_ids(tokenizer, full[len(before):]), full
        # The template rewrites the reply (strips it, drops reasoning...): render the feedback turn on its own
        # after a placeholder system turn, and close the reply with EOS if the policy did not.
        anchor = [{"role": "system", "content": "-"}]
        tail = render_chat(tokenizer, [*anchor, feedback], generation_prompt=True)[
            len(render_chat(tokenizer, anchor, generation_prompt=False)):]
        closing = [] if reply_ids and reply_ids[-1] in _eos_ids(tokenizer) else [tokenizer.eos_token_id]
        ids = closing + token_ids(tokenizer, tail)
        return ids, before + tokenizer.decode(ids, skip_special_tokens=False)

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, Any]:
        """One episode per prompt; the fields TRL reads (``prompt_ids``, ``completion_ids``, ``logprobs``,
        ``env_mask``) and ``rollout_outcomes`` for the reward function."""
        tokenizer = tokenizer_of(trainer.processing_class)
        generate = self.generator or TrainerGenerator(trainer)
        turn_tokens = self.turn_tokens or getattr(trainer.args, "max_completion_length", None) or 256
        n = len(prompts)
        # An episode keeps the reward's feedback (the checker's feedback_chars, what an Outcome carries);
        # the next turn shows the policy its first self.feedback_chars characters.
        episodes = [Episode(self.task_for(p), max_attempts=self.max_turns, reward_map=self.checker.reward_of,
                            ends_on=FINAL_VERDICTS, feedback_chars=self.checker.feedback_chars) for p in prompts]
        conversations = [[dict(m) for m in p] for p in prompts]
        before = [render_chat(tokenizer, c, generation_prompt=True) for c in conversations]
        prompt_ids = [token_ids(tokenizer, text) for text in before]
        completion_ids: list[list[int]] = [[] for _ in range(n)]
        env_mask: list[list[int]] = [[] for _ in range(n)]
        logprobs: list[list[float]] = [[] for _ in range(n)]
        have_logprobs = True
        device = getattr(getattr(trainer, "accelerator", None), "device", None)
        for _ in range(self.max_turns):
            live = [i for i, episode in enumerate(episodes) if not episode.done]
            # Lockstep: every rank runs a turn while any rank has an episode going, with the same batch width
            # (ZeRO-3 gathers weights per generation, vLLM server mode gathers prompts and slices the replies
            # by equal shares). A rank with fewer episodes pads with a copy of its first prompt and drops the reply.
            width = max_across_ranks(len(live), device)
            if width == 0:
                break
            batch = [prompt_ids[i] + completion_ids[i] for i in live]
            batch += [prompt_ids[0]] * (width - len(batch))
            new_ids, new_logprobs, texts, proofs, results = self._turn(
                generate, tokenizer, batch, [episodes[i].task for i in live], turn_tokens)
            if not live:
                continue
            have_logprobs = have_logprobs and new_logprobs is not None
            for j, i in enumerate(live):
                episode = episodes[i]
                completion_ids[i] += new_ids[j]
                env_mask[i] += [1] * len(new_ids[j])
                logprobs[i] += list(new_logprobs[j]) if new_logprobs is not None else [0.0] * len(new_ids[j])
                if results[j].result is None:
                    episode.fail(proofs[j], harness_error(results[j]))
                else:
                    episode.record(proofs[j], results[j].result)
                if episode.done:
                    continue
                conversations[i].append({"role": "assistant", "content": texts[j]})
                feedback = repair_message(episode.task.system, episode.feedback[: self.feedback_chars])
                extra, before[i] = self.feedback_ids(tokenizer, conversations[i], before[i], new_ids[j], feedback)
                conversations[i].append(dict(feedback))
                completion_ids[i] += extra
                env_mask[i] += [0] * len(extra)
                logprobs[i] += [0.0] * len(extra)
        return {"prompt_ids": prompt_ids, "completion_ids": completion_ids,
                "logprobs": logprobs if have_logprobs else None, "env_mask": env_mask,
                "rollout_outcomes": [self.outcome(e).to_dict() for e in episodes]}

    def _turn(self, generate: Generator, tokenizer: Any, batch: Sequence[Sequence[int]], tasks: Sequence[Task],
              turn_tokens: int) -> tuple[list[list[int]], list[list[float]] | None, list[str], list[str], list[Any]]:
        """One turn: replies to ``batch`` (``len(tasks)`` episodes, then a rank's padding rows), generated a
        ``generation_chunk`` at a time, each chunk's proofs checked while the next generates. Returns the
        episodes' reply ids, logprobs (None when the generator gives none), texts, proofs and pool results."""
        chunk = self.generation_chunk or max(len(batch), 1)

        Chunk = tuple[list[list[int]], list[list[float]] | None, list[str], list[str]]

        def chunks() -> Iterable[tuple[Chunk, list[Task], list[str]]]:
            for start in range(0, len(batch), chunk):
                ids, logprobs = generate(batch[start:start + chunk], turn_tokens)
                mine = list(tasks[start:start + chunk])  # the padding rows past len(tasks) are dropped
                ids = list(ids[:len(mine)])
                texts = [tokenizer.decode(row, skip_special_tokens=True) for row in ids]
                proofs = [self.checker.proof_of(text, task) for text, task in zip(texts, mine, strict=True)]
                yield (ids, list(logprobs[:len(mine)]) if logprobs is not None else None, texts, proofs), mine, proofs

        ids: list[list[int]] = []
        logprobs: list[list[float]] | None = []
        texts: list[str] = []
        proofs: list[str] = []
        results: list[Any] = []
        for (part_ids, part_logprobs, part_texts, part_proofs), part_results in check_while_generating(
                chunks(), check_nonempty(self.checker.check_results), depth=self.pipeline_depth):
            ids += part_ids
            logprobs = logprobs + part_logprobs if logprobs is not None and part_logprobs is not None else None
            texts += part_texts
            proofs += part_proofs
            results += part_results
        return ids, logprobs, texts, proofs, results

    def outcome(self, episode: Episode) -> Outcome:
        """What the reward function gets for an episode: its last verdict, discounted by the turns it took."""
        last = episode.last
        if last is None:
            return Outcome(None, None, harness_error="not run")
        result = last.result
        wall_s = sum(t.result.wall_s for t in episode.turns if t.result is not None)
        if result is None:
            return Outcome(None, None, (), wall_s, last.harness_error, last.index, last.action)
        return Outcome(result.verdict, self._reward(last, last.index), result.reasons, wall_s, "", last.index,
                       last.action, last.feedback)

    def _reward(self, outcome: Outcome | Turn, turn: int) -> float | None:
        if outcome.reward is None or outcome.reward <= 0:
            return outcome.reward
        return outcome.reward * self.turn_discount ** (turn - 1)
