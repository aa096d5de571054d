"""Weights & Biases logging for evaluation runs, and a reader for offline run files.

Runs are offline unless W&B is configured: the mode is ``WANDB_MODE`` when set,
else ``online`` when ``WANDB_API_KEY`` is set, else ``offline`` (the run is
written under the eval run dir and can be uploaded later with ``wandb sync``).

What an evaluation logs (CleanRL-style run identity, namespaced metrics):

- the config (``wandb.init(config=...)``), run name ``{suite}__{agent}__{model}__...``;
- while it runs, ``eval/done`` and ``eval/running_pass_rate``;
- at the end, the summary metrics (``proof/pass@1``, ``proof/cheat_rate``,
  ``verifier/timeout_rate``, ``verdict/OK``, ``cost/...``, ``category/P1/pass@1``...),
  a table of attempts (task, category, sample, attempt, proof, verdict, reasons,
  error category, seconds, tokens), and bar charts per category and per verdict.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from proofgym.agents.base import require

ATTEMPT_COLUMNS = ["task_id", "category", "sample", "attempt", "proof", "verdict", "reasons", "error_category",
                   "seconds", "prompt_tokens", "completion_tokens"]


def wandb_mode(explicit: str | None = None) -> str:
    """``explicit``, else ``WANDB_MODE``, else online with an API key, else offline."""
    if explicit:
        return explicit
    if os.environ.get("WANDB_MODE"):
        return os.environ["WANDB_MODE"]
    return "online" if os.environ.get("WANDB_API_KEY") else "offline"


class WandbLogger:
    """One W&B run for one evaluation segment (a resumed run gets a new W&B run in the same group).

    Args:
        project: W&B project.
        name: Run name (the eval run dir's name).
        config: The evaluation config (no secrets).
        directory: Where W&B writes (``<run dir>``; it adds ``wandb/``).
        mode: ``online``/``offline``/``disabled``; see :func:`wandb_mode`.
        group: Run group (default: ``name``).
    """

    def __init__(self, *, project: str, name: str, config: Mapping[str, Any], directory: str | Path,
                 mode: str | None = None, group: str | None = None) -> None:
        wandb = require("wandb", "train")
        self._wandb = wandb
        Path(directory).mkdir(parents=True, exist_ok=True)
        self.mode = wandb_mode(mode)
        # create_new: a training run that is already logging in this process goes on untouched.
        self.run = wandb.init(project=project, name=name, group=group or name, config=dict(config),
                              dir=str(directory), mode=self.mode, job_type="eval", reinit="create_new",
                              settings=wandb.Settings(console="off", silent=True))
        self._done = 0
        self._ok = 0

    @property
    def run_dir(self) -> Path:
        """The folder of this W&B run (``.../wandb/offline-run-...`` offline)."""
        return Path(self.run.dir).parent

    def log_result(self, row: Mapping[str, Any]) -> None:
        """Progress while the run goes: finished episodes and the running pass rate."""
        self._done += 1
        self._ok += row.get("verdict") == "OK"
        self.run.log({"eval/done": self._done, "eval/running_pass_rate": self._ok / self._done})

    def log_summary(self, summary: Any, rows: Iterable[Mapping[str, Any]]) -> None:
        """Summary metrics, the attempts table, and charts per category and verdict."""
        wandb = self._wandb
        metrics = summary.metrics()
        self.run.summary.update(metrics)
        table = wandb.Table(columns=ATTEMPT_COLUMNS, data=list(attempt_rows(rows)))
        k = summary.k
        cats = wandb.Table(columns=["category", "pass@1", f"pass@{k}", "tasks"],
                           data=[[c, s.get("pass@1", 0.0), s.get(f"pass@{k}", 0.0), s.get("n", 0)]
                                 for c, s in summary.per_category.items()])
        verdicts = wandb.Table(columns=["verdict", "count"], data=[[v, n] for v, n in sorted(summary.verdicts.items())])
        self.run.log({
            "attempts": table,
            "charts/pass@1_per_category": wandb.plot.bar(cats, "category", "pass@1", title="pass@1 per category"),
            "charts/verdicts": wandb.plot.bar(verdicts, "verdict", "count", title="verdicts"),
        })

    def finish(self) -> None:
        self.run.finish()


def attempt_rows(rows: Iterable[Mapping[str, Any]]) -> Iterator[list[Any]]:
    """One table row per attempt of every episode (a row without ``attempts`` is one attempt)."""
    for row in rows:
        attempts = row.get("attempts") or [row]
        for i, attempt in enumerate(attempts):
            yield [row.get("task_id"), row.get("category", ""), row.get("sample", 0), i,
                   attempt.get("proof", ""), attempt.get("verdict"), "; ".join(attempt.get("reasons", [])),
                   attempt.get("error_category", ""), round(float(attempt.get("wall_s", 0.0)), 4),
                   int(attempt.get("prompt_tokens", 0) or 0), int(attempt.get("completion_tokens", 0) or 0)]


# -- reading an offline run back ------------------------------------------------------------------
_BLOCK = 32768
_HEADER = 7  # ":W&B", magic 0xBEE1, version


def _records(path: Path) -> Iterator[bytes]:
    """The records of a ``.wandb`` file (a LevelDB-style log: 32 KiB blocks of checksummed fragments)."""
    data = path.read_bytes()
    if not data.startswith(b":W&B"):
        raise ValueError(f"{path} is not a W&B run file")
    pos, pending = _HEADER, b""
    while pos + 7 <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < 7:
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0 and length == 0:
            pos += left
            continue
        fragment = data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind == 1:
            yield fragment
        elif kind == 2:
            pending = fragment
        elif kind == 3:
            pending += fragment
        elif kind == 4:
            yield pending + fragment
            pending = b""


def read_offline_run(run_dir: str | Path, wait_s: float = 60.0) -> dict[str, Any]:
    """Config, summary and history of an offline W&B run folder (``.../wandb/offline-run-*``).

    W&B's service may still be writing the file for a moment after ``run.finish()``
    returns; this waits up to ``wait_s`` seconds for the run's exit record.

    Returns:
        ``{"config": {...}, "summary": {...}, "history": [{...}, ...], "finished": bool}`` with
        decoded JSON values; nested keys are joined with ``.``.
    """
    import time

    from wandb.proto import wandb_internal_pb2 as pb

    files = sorted(Path(run_dir).glob("*.wandb"))
    if not files:
        raise FileNotFoundError(f"no .wandb file in {run_dir}")
    deadline = time.monotonic() + wait_s
    while True:
        records = []
        for raw in _records(files[0]):
            record = pb.Record()
            record.ParseFromString(raw)
            records.append(record)
        finished = any(r.WhichOneof("record_type") == "exit" for r in records)
        if finished or time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    out: dict[str, Any] = {"config": {}, "summary": {}, "history": [], "finished": finished}

    def key_of(item: Any) -> str:
        return item.key or ".".join(item.nested_key)

    for record in records:
        kind = record.WhichOneof("record_type")
        if kind == "run":
            out["config"].update({key_of(i): json.loads(i.value_json) for i in record.run.config.update})
        elif kind == "config":
            out["config"].update({key_of(i): json.loads(i.value_json) for i in record.config.update})
        elif kind == "summary":
            out["summary"].update({key_of(i): json.loads(i.value_json) for i in record.summary.update})
        elif kind == "history":
            out["history"].append({key_of(i): json.loads(i.value_json) for i in record.history.item})
    return out
