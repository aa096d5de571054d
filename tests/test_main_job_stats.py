"""scripts/main_job.py's held-out statistics (the numbers `make eval` reports), on results files written here.

Fast tier: the slow main-job tests are the only other caller, and a helper the statistics used once went missing
between them (``paired_bootstrap`` left scripts/learning_curve.py for training/compare.py) without a fast test
failing.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _main_job() -> Any:
    spec = importlib.util.spec_from_file_location("proofgym_main_job_stats", ROOT / "scripts" / "main_job.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _eval_dir(root: Path, name: str, verdicts: dict[str, list[str | None]]) -> Path:
    run = root / name
    run.mkdir()
    with (run / "results.jsonl").open("w", encoding="utf-8") as fh:
        for task, samples in verdicts.items():
            for i, verdict in enumerate(samples):
                fh.write(json.dumps({"task_id": task, "sample": str(i), "verdict": verdict}) + "\n")
    return run


def test_heldout_stats_report_pass_rates_and_a_paired_delta(tmp_path):
    before = _eval_dir(tmp_path, "step-0", {"a": ["FAIL", "FAIL"], "b": ["OK", "FAIL"], "c": ["FAIL", None]})
    after = _eval_dir(tmp_path, "step-4", {"a": ["OK", "OK"], "b": ["OK", "OK"], "c": ["FAIL", "FAIL"]})
    stats = _main_job().heldout_stats([{"step": 0, "run_dir": str(before)}, {"step": 4, "run_dir": str(after)}],
                                      k=2, resamples=200, seed=0)
    first, last = stats["evals"]
    # pass@1 is the mean over tasks of OK/samples; the harness failure (None) of task c is no sample
    assert first["pass@1"] == (0 + 0.5 + 0) / 3 and last["pass@1"] == (1 + 1 + 0) / 3
    assert first["samples"] == 5 and last["samples"] == 6
    assert first["pass@1_ci"]["tasks"] == 3
    delta = stats["delta_pass@1"]
    assert delta["delta"] == last["pass@1"] - first["pass@1"] and delta["tasks"] == 3
    assert delta["lo"] <= delta["delta"] <= delta["hi"]
