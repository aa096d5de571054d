"""Training data from a suite: train/held-out splits, GRPO prompts and SFT prompt-completion pairs.

A suite has no split of its own: a task's ``metadata.split`` names one when it
is there, else :func:`split_tasks` holds out a fixed fraction of every category,
chosen by a hash of the task id and a seed (the same tasks on every machine,
and a task never moves between splits when others are added).

The prompts are exactly those that evaluation sends (the system's zero-shot
prompt family, :class:`~proofgym.agents.strategies.base.PlainStrategy` with the
same ``context_chars``), so a checkpoint is evaluated on the prompts it was
trained on. Rows are conversational, in TRL's formats:

- GRPO (prompt-only): ``prompt`` (chat messages), ``task_id``, ``system``;
- SFT (prompt-completion): the same plus ``completion``, the reference proof as
  the assistant's reply in a fenced block (the form :func:`~proofgym.envs.parsing.parse_proof` reads).
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from proofgym.agents.base import Message
from proofgym.agents.prompts import prompts_for
from proofgym.agents.prompts.base import fenced, system_info
from proofgym.envs.errors import ProofgymError
from proofgym.envs.types import Task

TRAIN = "train"
HELDOUT = "heldout"


class NoTrainSplit(ProofgymError):
    """The suite (after filters) has no task in the training split."""


def _rank(task: Task, seed: int) -> str:
    return hashlib.blake2b(f"{seed}:{task.id}".encode(), digest_size=8).hexdigest()


def split_tasks(tasks: Sequence[Task], *, heldout_fraction: float = 0.2, seed: int = 0) -> dict[str, list[Task]]:
    """``{split name: tasks}``: ``metadata.split`` where tasks carry one, else a stratified hash split.

    Args:
        tasks: The suite's tasks.
        heldout_fraction: Share of each category held out (rounded; at least one task of a
            category with two or more, none of a category with one).
        seed: Seed of the hash that picks the held-out tasks.

    Returns:
        Splits in suite order; the hash split names them ``train`` and ``heldout``.
    """
    if not 0 <= heldout_fraction < 1:
        raise ProofgymError(f"heldout_fraction must be in [0, 1), got {heldout_fraction}")
    if any("split" in t.metadata for t in tasks):
        named: dict[str, list[Task]] = defaultdict(list)
        for task in tasks:
            named[str(task.metadata.get("split", TRAIN))].append(task)
        return dict(named)
    by_category: dict[str, list[Task]] = defaultdict(list)
    for task in tasks:
        by_category[task.category].append(task)
    held: set[str] = set()
    for members in by_category.values():
        n = round(heldout_fraction * len(members))
        if heldout_fraction > 0 and len(members) >= 2:
            n = min(max(n, 1), len(members) - 1)
        held.update(t.id for t in sorted(members, key=lambda t: _rank(t, seed))[:n])
    return {TRAIN: [t for t in tasks if t.id not in held], HELDOUT: [t for t in tasks if t.id in held]}


def select(tasks: Sequence[Task], *, split: str, heldout_fraction: float = 0.2, seed: int = 0,
           categories: Iterable[str] | None = None, limit: int = 0, suite: str = "suite") -> list[Task]:
    """The tasks of one split, optionally of some categories only and at most ``limit`` of them.

    Raises:
        NoTrainSplit: when the training split is asked for and comes out empty.
        ProofgymError: when another split comes out empty.
    """
    wanted = set(categories or ())
    pool = [t for t in tasks if not wanted or t.category in wanted]
    splits = split_tasks(pool, heldout_fraction=heldout_fraction, seed=seed)
    chosen = splits.get(split, [])
    if limit:
        chosen = chosen[:limit]
    if not chosen:
        where = f" in categories {sorted(wanted)}" if wanted else ""
        have = ", ".join(f"{name} ({len(ts)})" for name, ts in splits.items() if ts) or "none"
        message = (f"suite {suite!r} has no {split!r} tasks{where} (its splits: {have}); "
                   f"pick another suite, split or category, or lower heldout_fraction")
        raise (NoTrainSplit if split == TRAIN else ProofgymError)(message)
    return chosen


def prompt_messages(task: Task, *, context_chars: int = 2000) -> list[Message]:
    """The zero-shot chat prompt of ``task``, as evaluation's plain strategy builds it."""
    context = task.context[-context_chars:] if context_chars else ""
    return [dict(m) for m in prompts_for(task.system).messages(task, context=context)]


def repair_message(system: str, feedback: str) -> Message:
    """The user turn that carries a verifier's feedback, as evaluation's repair rounds word it."""
    return {"role": "user", "content": prompts_for(system).repair(feedback)}


def reference_completion(task: Task) -> str:
    """The reply an SFT example teaches: the reference proof in one fenced block."""
    return fenced(task.reference_proof, system_info(task.system).fence)


def grpo_rows(tasks: Iterable[Task], *, context_chars: int = 2000) -> list[dict[str, Any]]:
    """Prompt-only conversational rows: ``prompt``, ``task_id``, ``system``, ``category``."""
    return [{"prompt": prompt_messages(t, context_chars=context_chars), "task_id": t.id, "system": t.system,
             "category": t.category} for t in tasks]


def sft_rows(tasks: Iterable[Task], *, context_chars: int = 2000) -> list[dict[str, Any]]:
    """Prompt-completion conversational rows: the GRPO columns plus ``completion``."""
    rows = []
    for task in tasks:
        if not task.reference_proof.strip():
            continue
        row = grpo_rows([task], context_chars=context_chars)[0]
        row["completion"] = [{"role": "assistant", "content": reference_completion(task)}]
        rows.append(row)
    return rows


def to_dataset(rows: Sequence[Mapping[str, Any]]) -> Any:
    """A ``datasets.Dataset`` of ``rows``."""
    from datasets import Dataset

    return Dataset.from_list([dict(r) for r in rows])


def prompt_key(prompt: Any) -> str:
    """A key that identifies a prompt (conversational or text), to find its task again in a rollout."""
    if isinstance(prompt, str):
        return prompt
    return "\x1e".join(f"{m.get('role')}\x1f{m.get('content')}" for m in prompt)
