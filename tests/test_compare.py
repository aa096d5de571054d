"""``proofgym compare``: a checkpoint's eval run against its base's, task by task, with a paired bootstrap."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from proofgym.training.compare import hierarchical_bootstrap, paired_bootstrap, per_task_pass


def _run(folder: Path, passes: dict[str, list[bool]]) -> Path:
    folder.mkdir(parents=True)
    rows = [{"task_id": task, "sample": i, "verdict": "OK" if ok else "FAIL", "category": "P1", "system": "coq"}
            for task, oks in passes.items() for i, ok in enumerate(oks)]
    (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def test_per_task_pass_is_the_share_of_ok_samples():
    rows = [{"task_id": "a", "verdict": "OK"}, {"task_id": "a", "verdict": "FAIL"}, {"task_id": "b", "verdict": "ERROR"}]
    assert per_task_pass(rows) == {"a": 0.5, "b": 0.0}


def test_the_interval_is_paired_and_covers_only_what_the_tasks_support():
    base = {f"t{i}": 0.0 for i in range(40)}
    better = {t: 1.0 if i < 20 else 0.0 for i, t in enumerate(base)}
    stats = paired_bootstrap(better, base, resamples=2000)
    assert stats["delta"] == 0.5 and stats["tasks"] == 40
    assert 0.3 < stats["lo"] < 0.5 < stats["hi"] < 0.7
    same = paired_bootstrap(base, base, resamples=200)
    assert (same["delta"], same["lo"], same["hi"]) == (0.0, 0.0, 0.0)
    # Two seeds that disagree: the hierarchical interval is wider than either seed's alone
    worse = dict.fromkeys(base, 0.0)
    two = hierarchical_bootstrap([(better, base), (worse, base)], resamples=2000)
    assert two["runs"] == 2 and two["delta"] == 0.25 and two["lo"] < 0.1 and two["hi"] > 0.4


def test_the_cli_compares_runs_on_their_shared_tasks(tmp_path):
    base = _run(tmp_path / "base", {"a": [False, False], "b": [True, False], "c": [False, False], "d": [True, True]})
    ckpt = _run(tmp_path / "ckpt", {"a": [True, True], "b": [True, True], "c": [False, False], "e": [True, True]})
    proc = subprocess.run([sys.executable, "-m", "proofgym.cli", "compare", str(base), str(ckpt), "--json",
                           "--resamples", "500"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads(proc.stdout)["comparisons"]
    assert row["tasks"] == 3 and row["only_in_run"] == 1 and row["only_in_base"] == 1
    assert row["base_pass@1"] == pytest.approx(0.5 / 3) and row["pass@1"] == pytest.approx(2 / 3)
    assert row["delta"] == pytest.approx(0.5) and row["lo"] <= row["delta"] <= row["hi"]
    text = subprocess.run([sys.executable, "-m", "proofgym.cli", "compare", str(base), str(ckpt)],
                          capture_output=True, text=True, timeout=120).stdout
    assert "delta +50.0 pp, 95% paired-bootstrap interval" in text


def test_runs_that_share_no_task_are_bad_input(tmp_path):
    base = _run(tmp_path / "base", {"a": [True]})
    other = _run(tmp_path / "other", {"b": [True]})
    proc = subprocess.run([sys.executable, "-m", "proofgym.cli", "compare", str(base), str(other)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "share no task" in proc.stderr
