"""A suite as a Hugging Face dataset: ``proofgym export SUITE --out DIR``.

Trainers read datasets, not JSONL suites: the export writes the splits training uses (``metadata.split`` where
tasks carry one, else the stratified hash split of ``proofgym train``, with the same ``heldout_fraction`` and
seed), ``heldout`` as ``test``, as Parquet files plus a dataset card, so that ``datasets.load_dataset("parquet", data_dir=DIR)`` (or the folder pushed to
the hub by the user) gives the same rows everywhere. ``metadata`` differs from task to task, so it travels as a
JSON string (``json.loads(row["metadata"])`` restores it); every other field keeps its type.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

from proofgym.envs.types import Task

#: The columns of an exported row, in order.
COLUMNS = ("id", "system", "suite", "category", "statement", "context", "reference_proof", "timeout_s", "metadata")
SPLITS = ("train", "validation", "test")


def task_row(task: Task) -> dict[str, object]:
    """One dataset row: the task's fields, ``metadata`` as a JSON string."""
    return {"id": task.id, "system": task.system, "suite": task.suite, "category": task.category,
            "statement": task.statement, "context": task.context, "reference_proof": task.reference_proof,
            "timeout_s": float(task.timeout_s), "metadata": json.dumps(dict(task.metadata), ensure_ascii=False,
                                                                       sort_keys=True)}


def dataset_split(name: str) -> str:
    """A split's name the dataset way: ``heldout`` is ``test``, ``val`` is ``validation``."""
    named = name.lower()
    return {"heldout": "test", "held_out": "test", "val": "validation", "valid": "validation"}.get(named, named)


def export_suite(splits: Mapping[str, Sequence[Task]], out: str | Path, *, name: str) -> dict[str, int]:
    """Write each split of ``splits`` to ``out`` as Parquet and a dataset card; returns the row count per split.

    Raises:
        ValueError: a split name that is not train/validation/test (or heldout/val).
    """
    from datasets import Dataset

    out = Path(out)
    named = {dataset_split(split): list(tasks) for split, tasks in splits.items() if tasks}
    unknown = sorted(set(named) - set(SPLITS))
    if unknown:
        raise ValueError(f"split {unknown[0]!r} is not one of {', '.join(SPLITS)} (or heldout/val): "
                         f"fix the tasks' metadata.split")
    out.mkdir(parents=True, exist_ok=True)
    counts = {}
    for split in SPLITS:
        if split not in named:
            continue
        rows = [task_row(task) for task in named[split]]
        Dataset.from_dict({column: [row[column] for row in rows] for column in COLUMNS}).to_parquet(
            str(out / f"{split}.parquet"))
        counts[split] = len(rows)
    tasks = [task for split in named.values() for task in split]
    (out / "README.md").write_text(_card(name, tasks, counts), encoding="utf-8")
    return counts


def _card(name: str, tasks: Sequence[Task], counts: dict[str, int]) -> str:
    systems = ", ".join(sorted({t.system for t in tasks}))
    categories = ", ".join(f"{c} {n}" for c, n in sorted(Counter(t.category for t in tasks).items()))
    files = "\n".join(f"  - split: {split}\n    path: {split}.parquet" for split in counts)
    return (f"---\nconfigs:\n- config_name: default\n  data_files:\n{files}\n---\n\n"
            f"# {name}\n\nA proofgym suite ({systems}): {len(tasks)} tasks; categories: {categories}; splits: "
            + ", ".join(f"{s} {n}" for s, n in counts.items()) + ".\n\n"
            "Each row is a task: `statement` is what the prover states, `context` the source before it, "
            "`reference_proof` a proof that verifies, `metadata` a JSON string (allowed axioms, source, split).\n"
            "Verdicts come from the real prover through proofgym (`proofgym check`, `proofgym/WholeProof-v0`), "
            "never from comparing text with `reference_proof`.\n\n"
            "```python\nfrom datasets import load_dataset\n\n"
            f"data = load_dataset(\"parquet\", data_dir=\"{name}\")\n```\n")
