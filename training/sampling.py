"""Sample k attempts per task with a policy and check each on the verifier pool.

The pass-rate curriculum (:mod:`proofgym.training.curriculum`) and expert iteration
(:mod:`proofgym.training.expert_iteration`) both need the same step: every task's
zero-shot prompt (the prompt training and evaluation use), ``k`` sampled replies, the proof
parsed out of each and checked by the real verifier. :func:`sample_and_check` does it in
generation batches of ``batch_size`` prompts, each batch's proofs checked while the next batch generates
(:func:`~proofgym.training.pipeline.check_while_generating`); a harness failure is an outcome with verdict
``None``, never a miss.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from tqdm.auto import tqdm

from proofgym.envs.types import Task, Verdict
from proofgym.training.data import prompt_messages
from proofgym.training.pipeline import DEFAULT_DEPTH, check_while_generating
from proofgym.training.rewards import Outcome, VerifierReward
from proofgym.training.rollout import Generator, render_chat, token_ids


@dataclass(frozen=True)
class Sample:
    """One sampled attempt: the task, the reply as generated, and the verifier's outcome on its proof."""

    task: Task
    text: str
    outcome: Outcome

    @property
    def ok(self) -> bool:
        return self.outcome.verdict == Verdict.OK.value


def sample_and_check(generate: Generator, tokenizer: Any, tasks: Sequence[Task], checker: VerifierReward, *,
                     k: int, max_new_tokens: int, batch_size: int = 16, context_chars: int = 2000,
                     progress: str = "", pipeline_depth: int = DEFAULT_DEPTH) -> list[Sample]:
    """``k`` attempts at each task, generated ``batch_size`` prompts at a time and checked on ``checker``'s pool,
    each batch's checks running while the next batch generates.

    Args:
        generate: The policy (a :class:`~proofgym.training.rollout.Generator`, sampling as configured).
        tokenizer: Its tokenizer, with a chat template.
        tasks: The tasks to attempt.
        checker: Parses and checks proofs (its pool and reward map).
        k: Attempts per task.
        max_new_tokens: Tokens per reply.
        batch_size: Prompts per ``generate`` call.
        context_chars: The prompts' context, as in training.
        progress: When given, a progress bar with this title (samples done, OK so far) on stderr:
            a curriculum estimate or an expert-iteration round is minutes of generation on a CPU.
        pipeline_depth: Batches being checked while the next generates (0: check each batch before generating
            the next; the samples are the same either way).

    Returns:
        ``len(tasks) * k`` samples, the ``k`` of a task next to each other, in task order.
    """
    if k < 1 or batch_size < 1:
        raise ValueError(f"k and batch_size must be >= 1, got {k} and {batch_size}")
    prompts = {t.id: token_ids(tokenizer, render_chat(tokenizer, prompt_messages(t, context_chars=context_chars),
                                                      generation_prompt=True)) for t in tasks}
    todo = [t for t in tasks for _ in range(k)]

    def batches() -> Iterator[tuple[tuple[list[Task], list[str]], list[Task], list[str]]]:
        for start in range(0, len(todo), batch_size):
            batch = todo[start:start + batch_size]
            new_ids, _ = generate([prompts[t.id] for t in batch], max_new_tokens)
            texts = [tokenizer.decode(ids, skip_special_tokens=True) for ids in new_ids]
            yield (batch, texts), batch, [checker.proof_of(text, t) for text, t in zip(texts, batch, strict=True)]

    samples: list[Sample] = []
    passed = 0
    with tqdm(total=len(todo), desc=progress, unit="sample", disable=not progress, file=sys.stderr,
              dynamic_ncols=True) as bar:
        for (batch, texts), outcomes in check_while_generating(batches(), checker.check, depth=pipeline_depth):
            fresh = [Sample(t, text, o) for t, text, o in zip(batch, texts, outcomes, strict=True)]
            samples += fresh
            passed += sum(s.ok for s in fresh)
            bar.update(len(batch))
            bar.set_postfix(ok=passed, refresh=False)
    return samples


def pass_counts(samples: Iterable[Sample]) -> dict[str, tuple[int, int]]:
    """``{task_id: (OK samples, samples with a verdict)}``; harness failures are left out of both counts."""
    ok: Counter[str] = Counter()
    scored: Counter[str] = Counter()
    for s in samples:
        scored[s.task.id] += 0
        if s.outcome.verdict is not None:
            scored[s.task.id] += 1
            ok[s.task.id] += s.ok
    return {task_id: (ok[task_id], n) for task_id, n in scored.items()}
