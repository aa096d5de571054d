"""A checkpoint evaluation in its own process, so that no training rank waits for it (issue 29).

:class:`~proofgym.training.callbacks.CheckpointEvalCallback` starts, on rank 0 after a save::

    python -m proofgym.training.checkpoint_eval <output_dir>/checkpoint_evals/step-N.request.json

The request holds the :class:`~proofgym.training.eval_runs.EvalConfig` (the same run as ``proofgym eval
--agent local --model <checkpoint>`` with the checkpoint's saved eval settings) and where to write the
record; the process evaluates, writes the record (the summary's metrics, per category, verdicts) and
exits. The training process reads the record when the process has ended and logs it then.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from proofgym.envs.errors import ProofgymError


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
