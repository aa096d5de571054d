"""All of proofgym's Weights & Biases code: evaluation runs, training runs, and a reader for offline run files.

Runs are offline unless W&B is configured: the mode is ``WANDB_MODE`` when set,
else ``online`` when ``WANDB_API_KEY`` is set, else ``offline`` (the run is
written under the eval run dir and can be uploaded later with ``wandb sync``).

Training runs: :func:`setup_wandb` points transformers' W&B callback at ``<output_dir>`` (project,
mode); the callbacks log through :func:`log_heldout` (checkpoint evaluations) and
:func:`log_task_pass_rates`; :func:`log_metrics` logs expert iteration's rounds;
:func:`finish_training_run` adds the reward totals and the model artifact and finishes the run.

What an evaluation logs (CleanRL-style run identity, namespaced metrics):

- the config (``wandb.init(config=...)``), run name ``{suite}__{agent}__{model}__...``;
- while it runs, ``eval/done`` and ``eval/running_pass_rate``;
- at the end, the summary metrics (``proof/pass@1``, ``proof/cheat_rate``,
  ``verifier/timeout_rate``, ``verdict/OK``, ``cost/...``, ``category/P1/pass@1``...),
  a table of attempts (task, category, sample, attempt, proof, verdict, reasons,
  error category, seconds, tokens), bar charts per category and per verdict, and the pass@k
  curve per category (``pass_at_k`` table, ``charts/pass_at_k`` line plot; k = 1..n).

What GRPO adds at each logging step (:func:`log_training_categories`): the reward, OK rate and
pass@1..num_generations per task category (``train/category/P1/reward``, ``train/category/P1/pass@2``,
``train/proof/pass@2``...); at the end, those pass@k as a table (``train/pass_at_k``) and the last
window's curve (``charts/train_pass_at_k``).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import struct
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from proofgym.agents.base import require
from proofgym.training.eval_metrics import curve_of

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
        curve = pass_at_k_table_rows(0, metrics)
        self.run.log({
            "attempts": table,
            "charts/pass@1_per_category": wandb.plot.bar(cats, "category", "pass@1", title="pass@1 per category"),
            "charts/verdicts": wandb.plot.bar(verdicts, "verdict", "count", title="verdicts"),
            "pass_at_k": wandb.Table(columns=["category", "k", "pass@k"], data=[row[1:] for row in curve]),
            "charts/pass_at_k": pass_at_k_plot(wandb, metrics, "pass@k per category"),
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


# -- training runs ----------------------------------------------------------------------------------
def active_wandb(report_to: Any) -> Any:
    """The ``wandb`` module when this run reports to W&B and a run is active; else ``None``."""
    if "wandb" not in (report_to or []):
        return None
    try:
        import wandb
    except ImportError:
        return None
    return wandb if wandb.run is not None else None


def setup_wandb(cfg: Any) -> None:
    """Environment for transformers' W&B callback: project, mode (offline unless configured), and the W&B
    dir, ``<output_dir>/wandb`` (the W&B callback reads these when training starts)."""
    if "wandb" not in (cfg.report_to or []):
        return
    require("wandb", "train")
    os.environ["WANDB_PROJECT"] = cfg.wandb_project
    os.environ["WANDB_MODE"] = wandb_mode(cfg.wandb_mode)
    os.environ["WANDB_DIR"] = str(Path(cfg.output_dir).resolve())  # each run's W&B files live in its output dir
    Path(os.environ["WANDB_DIR"]).mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("WANDB_SILENT", "true")


def log_checkpoint_artifact(path: str | Path, name: str) -> bool:
    """Upload the final checkpoint as a W&B model artifact (online runs only). True when logged."""
    import wandb

    if wandb.run is None or wandb.run.settings.mode != "online":  # offline: `wandb sync` uploads the run, not this
        return False
    artifact = wandb.Artifact(re.sub(r"[^\w.-]+", "-", name)[:120], type="model")
    artifact.add_dir(str(path))
    wandb.run.log_artifact(artifact)
    return True


def finish_training_run(cfg: Any, final: str | Path, totals: Mapping[str, int] | None = None) -> Path | None:
    """End a training run's W&B run: reward totals into its summary, the final model as an artifact (online
    runs), finish. Returns the W&B run folder (``None`` when the run did not report to W&B)."""
    if "wandb" not in (cfg.report_to or []):
        return None
    import wandb

    run_dir = None
    if wandb.run is not None:
        run_dir = Path(wandb.run.dir).parent
        if totals:
            wandb.run.summary.update({f"reward_totals/{k}": v for k, v in totals.items()})
        log_checkpoint_artifact(final, f"{cfg.run_name}-model")
    finish_wandb()
    return run_dir


def log_metrics(cfg: Any, metrics: Mapping[str, Any]) -> None:
    """Log ``metrics`` (``None`` values left out) to the run's W&B run, starting it when no Trainer has yet
    (expert iteration's first round may sample before any fine-tuning)."""
    if "wandb" not in (cfg.report_to or []):
        return
    import wandb

    if wandb.run is None:
        wandb.init(project=cfg.wandb_project, name=cfg.run_name, config=cfg.to_dict(), dir=cfg.output_dir)
    wandb.log({k: v for k, v in metrics.items() if v is not None})


def log_heldout(report_to: Any, step: int, metrics: Mapping[str, float], history: Sequence[Mapping[str, Any]],
                k: int) -> None:
    """A checkpoint evaluation into the training's W&B run: its metrics and the pass@k table of every one so far."""
    wandb = active_wandb(report_to)
    if wandb is None:
        return
    rows = [[r["step"], cat, s.get("pass@1", 0.0), s.get(f"pass@{k}", 0.0), s.get("n", 0)]
            for r in history if "per_category" in r for cat, s in r["per_category"].items()]
    table = wandb.Table(columns=["step", "category", "pass@1", f"pass@{k}", "tasks"], data=rows)
    own = {name.removeprefix("heldout/"): value for name, value in metrics.items()}
    wandb.log({**metrics, "heldout/pass_at_k": table, "train/global_step": step,
               "charts/heldout_pass_at_k": pass_at_k_plot(wandb, own, f"held-out pass@k per category (step {step})")})


def log_task_pass_rates(report_to: Any, columns: Sequence[str], rows: Sequence[Sequence[Any]], steps: Sequence[int],
                        series: Mapping[str, Sequence[float]], plot_path: Path | None) -> None:
    """Each task's pass rate over training: a table, a line plot per task, and the PNG, when the run has W&B."""
    wandb = active_wandb(report_to)
    if wandb is None:
        return
    logged: dict[str, Any] = {"task_pass_rate": wandb.Table(columns=list(columns), data=[list(r) for r in rows])}
    if steps:
        keys = list(series)
        logged["charts/task_pass_rate"] = wandb.plot.line_series(
            xs=list(steps), ys=[list(series[k]) for k in keys], keys=keys, title="training pass rate per task",
            xname="step")
    if plot_path is not None:
        logged["charts/task_pass_rate_image"] = wandb.Image(str(plot_path))
    wandb.log(logged)


def log_training_categories(report_to: Any, step: int, metrics: Mapping[str, float]) -> None:
    """One GRPO logging window's reward, OK rate and pass@k per category as ``train/...`` scalars, when the run
    has W&B (at the trainer's ``train/global_step``, beside TRL's own ``train/reward``)."""
    wandb = active_wandb(report_to)
    if wandb is None:
        return
    wandb.log({**{f"train/{k}": v for k, v in metrics.items()}, "train/global_step": step})


def pass_at_k_table_rows(step: int, metrics: Mapping[str, float]) -> list[list[Any]]:
    """``[step, category, k, pass@k]`` rows from flat metrics (``proof/pass@k`` is category ``all``)."""
    cats = sorted({name.split("/")[1] for name in metrics if name.startswith("category/")})
    return [[step, cat, k, value] for cat in [*cats, "all"]
            for k, value in curve_of(metrics, "proof" if cat == "all" else f"category/{cat}").items()]


def pass_at_k_plot(wandb: Any, metrics: Mapping[str, float], title: str) -> Any:
    """A W&B line plot of pass@k against k, one line per category (and ``all``), from flat metrics."""
    rows = pass_at_k_table_rows(0, metrics)
    ks = sorted({k for _, _, k, _ in rows})
    cats = list(dict.fromkeys(cat for _, cat, _, _ in rows))
    ys = [[next((v for _, c, j, v in rows if c == cat and j == k), math.nan) for k in ks] for cat in cats]
    return wandb.plot.line_series(xs=ks, ys=ys, keys=cats, title=title, xname="k")


def log_pass_at_k_curves(report_to: Any, windows: Sequence[Mapping[str, Any]]) -> None:
    """At the end of GRPO: every logging window's pass@k per category as a table (``train/pass_at_k``: step,
    category, k, pass@k) and the last window's pass@k curve as a line plot (``charts/train_pass_at_k``)."""
    wandb = active_wandb(report_to)
    if wandb is None or not windows:
        return
    rows = [row for w in windows for row in pass_at_k_table_rows(int(w["step"]), w)]
    last = windows[-1]
    wandb.log({"train/pass_at_k": wandb.Table(columns=["step", "category", "k", "pass@k"], data=rows),
               "charts/train_pass_at_k": pass_at_k_plot(wandb, last, f"pass@k per category (step {last['step']})")})


def finish_wandb() -> None:
    """Finish this process's W&B run, if any, and tear W&B down (so that a next run gets its own W&B dir)."""
    try:
        import wandb
    except ImportError:
        return
    if wandb.run is not None:
        wandb.finish()
    # W&B reads WANDB_DIR once per process; tear down so a next run in this process (SFT then GRPO) gets its own.
    with contextlib.suppress(Exception):
        wandb.teardown()


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

    from wandb.proto import wandb_internal_pb2 as pb

    files = sorted(Path(run_dir).glob("*.wandb"))
    if not files:
        raise FileNotFoundError(f"no .wandb file in {run_dir}")
    deadline = time.monotonic() + wait_s
    from google.protobuf.message import DecodeError

    while True:
        records = []
        try:
            for raw in _records(files[0]):
                record = pb.Record()
                record.ParseFromString(raw)
                records.append(record)
        except DecodeError:
            # W&B's writer may still be appending (a record read half-written on a busy machine): read again,
            # and raise only if the file still does not read at the deadline.
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.1)
            continue
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
