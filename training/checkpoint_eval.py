"""A checkpoint evaluation in its own process, so that no training rank waits for it (issue 29).

:class:`~proofgym.training.callbacks.CheckpointEvalCallback` starts, on rank 0 after a save::

    python -m proofgym.training.checkpoint_eval <output_dir>/checkpoint_evals/step-N.request.json

The request holds the :class:`~proofgym.training.eval_runs.EvalConfig` (the same run as ``proofgym eval
--agent local --model <checkpoint>`` with the checkpoint's saved eval settings) and where to write the
record; the process evaluates, writes the record (the summary's metrics, per category, verdicts) and
exits. The training process reads the record when the process has ended and logs it then.

**Snapshots.** The process evaluates a snapshot of the checkpoint, not the checkpoint itself: with
``save_total_limit`` the trainer deletes old ``checkpoint-N`` folders, possibly while an evaluation still
reads one. :func:`snapshot_checkpoint` hard-links the files the evaluation reads (weights, config, tokenizer,
proofgym's settings; not the optimizer, scheduler or RNG states) into
``<output_dir>/checkpoint_evals/snapshots/step-N``, a folder the trainer never rotates (its rotation deletes
``checkpoint-*`` folders only), copying where a link fails (another filesystem). A hard link is a second name
for the same file, so the snapshot costs no space and survives the deletion of the checkpoint. The training
process deletes the snapshot once it has the record; a run resumed after a crash deletes the ones left over.

**Placement.** :func:`place_evaluation` decides where the process's model copy goes
(``checkpoint_eval_device``: ``auto``, ``cpu`` or ``cuda:N``): ``auto`` takes a GPU that no training rank of
this node uses when there is one (more visible GPUs than ``LOCAL_WORLD_SIZE``), else shares the last one and
says so. The process gets it as ``CUDA_VISIBLE_DEVICES`` (:func:`evaluation_environment`) and logs it first.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from proofgym.envs.errors import ProofgymError

#: What a ``checkpoint-N`` folder holds that an evaluation never reads (the trainer's state for resuming, and
#: DeepSpeed's ``global_stepN`` shards): left out of snapshots, so that a copy (where links fail) stays small.
TRAINING_STATE_PREFIXES = ("optimizer", "scheduler", "rng_state", "global_step")


def _link_or_copy(source: str, target: str) -> str:
    """A hard link of ``source`` at ``target`` (the same file under a second name), or a copy where the
    filesystem refuses one (another device, a filesystem without hard links)."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)
    return target


def snapshot_checkpoint(checkpoint: str | Path, into: str | Path) -> Path:
    """A snapshot of ``checkpoint`` (a folder, or a ``.gguf`` file) at ``into`` that outlives its deletion.

    Returns what to evaluate: ``into`` for a folder, ``into/<name>`` for a file; ``checkpoint`` itself when
    there is nothing there (the evaluation then says so). See the module docstring.
    """
    checkpoint, into = Path(checkpoint), Path(into)
    if into.exists():  # left by an earlier evaluation of this step (a crashed run): it may be stale
        shutil.rmtree(into)
    if checkpoint.is_dir():
        def training_state(folder: str, names: list[str]) -> list[str]:
            return [n for n in names if Path(folder) == checkpoint and n.startswith(TRAINING_STATE_PREFIXES)]

        shutil.copytree(checkpoint, into, copy_function=_link_or_copy, ignore=training_state)
        return into
    if checkpoint.is_file():
        into.mkdir(parents=True)
        return Path(_link_or_copy(str(checkpoint), str(into / checkpoint.name)))
    return checkpoint


def remove_snapshot(snapshot: str | Path | None) -> None:
    """Delete a snapshot made by :func:`snapshot_checkpoint` (the checkpoint it was made from is untouched)."""
    if snapshot is not None:
        shutil.rmtree(snapshot, ignore_errors=True)


@dataclass(frozen=True)
class EvalPlacement:
    """Where an evaluation process's model copy runs (see :func:`place_evaluation`).

    Attributes:
        device: The evaluation's ``device`` (``cpu`` or ``cuda``: the process sees one GPU, its cuda:0).
        visible_devices: ``CUDA_VISIBLE_DEVICES`` for the process (``""``: no GPU; ``None``: as the trainer's).
        note: The line that says where it runs and why (logged by the training process and the evaluation's).
    """

    device: str
    visible_devices: str | None
    note: str


def _device_index(setting: str) -> int | None:
    match = re.fullmatch(r"cuda:(\d+)", setting)
    return int(match.group(1)) if match else None


def check_eval_device(setting: str) -> str:
    """``setting`` if it is a ``checkpoint_eval_device`` (``auto``, ``cpu``, ``cuda:N``), else a
    :class:`~proofgym.envs.errors.ProofgymError` that says what to write."""
    if setting in ("auto", "cpu") or _device_index(setting) is not None:
        return setting
    raise ProofgymError(f"checkpoint_eval_device: {setting!r} is not a device: write auto (a GPU no training rank "
                        f"uses, when there is one), cpu, or cuda:N (the N-th GPU this process sees)")


def place_evaluation(setting: str, *, gpus: int, local_ranks: int, visible: str | None = None) -> EvalPlacement:
    """Where an evaluation process runs on this node.

    Args:
        setting: ``checkpoint_eval_device``: ``auto``, ``cpu`` or ``cuda:N``.
        gpus: GPUs the training process sees (``torch.cuda.device_count()``).
        local_ranks: Training processes on this node (``LOCAL_WORLD_SIZE``); rank ``i`` trains on GPU ``i``.
        visible: The training process's ``CUDA_VISIBLE_DEVICES`` (GPU ``i`` is its ``i``-th entry), if set.
    """
    check_eval_device(setting)
    if setting == "cpu":
        return EvalPlacement("cpu", "", "on the CPU (checkpoint_eval_device: cpu)")
    if setting == "auto" and gpus == 0:
        return EvalPlacement("cpu", None, "on the CPU (no GPU visible)")
    names = [v.strip() for v in visible.split(",") if v.strip()] if visible else [str(i) for i in range(gpus)]
    if setting == "auto":
        index = local_ranks if gpus > local_ranks else gpus - 1
    else:
        index = _device_index(setting) or 0
        if index >= gpus:
            raise ProofgymError(f"checkpoint_eval_device: {setting} names GPU {index}, but this process sees "
                                f"{gpus} GPU(s): write cuda:0..cuda:{max(gpus - 1, 0)}, auto or cpu")
    physical = names[index] if index < len(names) else str(index)
    if index < local_ranks:
        why = (f"sharing it with training rank {index} ({local_ranks} training process(es) on {gpus} GPU(s)): "
               f"a second model copy beside training's; leave a GPU free (fewer processes) for it, or set "
               f"checkpoint_eval_device: cpu")
    else:
        why = f"which no training rank of this node uses ({local_ranks} training process(es), {gpus} GPU(s))"
    return EvalPlacement("cuda", physical, f"on GPU {index} (CUDA_VISIBLE_DEVICES={physical}), {why}")


def evaluation_environment(placement: EvalPlacement, environ: Mapping[str, str],
                           drop: Sequence[str] = ()) -> dict[str, str]:
    """The evaluation process's environment: ``environ`` without ``drop`` (a rank's variables), with the
    placement's ``CUDA_VISIBLE_DEVICES``."""
    env = {name: value for name, value in environ.items() if name not in drop}
    if placement.visible_devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = placement.visible_devices
    env["PROOFGYM_EVAL_PLACEMENT"] = placement.note
    return env


def summary_record(step: int, checkpoint: str | Path, summary: Any, run_dir: str | Path, seconds: float) -> dict:
    """What the training run keeps of one checkpoint evaluation (``checkpoint_evals.json``, W&B)."""
    return {"step": step, "checkpoint": str(checkpoint), "run_dir": str(run_dir),
            "per_category": summary.per_category, "verdicts": dict(summary.verdicts),
            "harness_failures": summary.harness_failures,
            "metrics": {f"heldout/{name}": value for name, value in summary.metrics().items()},
            "seconds": round(seconds, 1)}


def write_request(path: Path, *, step: int, checkpoint: str | Path, config: Mapping[str, Any], record: Path) -> Path:
    """The request file the evaluation process reads."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"step": step, "checkpoint": str(checkpoint), "config": dict(config),
                                "record": str(record)}, indent=2) + "\n", encoding="utf-8")
    return path


def run_request(path: str | Path) -> dict[str, Any]:
    """Evaluate as the request says and write its record (an ``error`` record when the evaluation refused)."""
    from proofgym.training.evaluate import EvalConfig, evaluate

    request = json.loads(Path(path).read_text(encoding="utf-8"))
    step, checkpoint = int(request["step"]), request["checkpoint"]
    print(f"evaluating {checkpoint} (step {step}) from {request['config'].get('model')}, device "
          f"{request['config'].get('device')}, CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r}: "
          f"{os.environ.get('PROOFGYM_EVAL_PLACEMENT', '')}", flush=True)
    start = time.monotonic()
    try:
        summary, paths = evaluate(EvalConfig.from_mapping(request["config"], source=str(path)), progress=False)
        record = summary_record(step, checkpoint, summary, paths.run_dir, time.monotonic() - start)
    except ProofgymError as exc:
        record = {"step": step, "checkpoint": checkpoint, "error": str(exc)}
    target = Path(request["record"])
    partial = target.with_suffix(".partial")
    partial.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    partial.replace(target)  # the training process never reads a half-written record
    return record


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m proofgym.training.checkpoint_eval REQUEST.json (written by a training run)",
              file=sys.stderr)
        return 2
    record = run_request(args[0])
    return 1 if "error" in record else 0


if __name__ == "__main__":
    sys.exit(main())
