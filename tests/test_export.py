"""``proofgym export``: a suite as a Hugging Face dataset, with the splits training uses."""

from __future__ import annotations

import json
import subprocess
import sys

import datasets

from proofgym.envs.tasks.suites import load_tasks
from proofgym.training.data import split_tasks


def test_export_writes_the_training_split_as_parquet_that_datasets_loads(tmp_path):
    out = tmp_path / "dafny-nl-hf"
    proc = subprocess.run([sys.executable, "-m", "proofgym.cli", "export", "dafny-nl", "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert f"to {out}/" in proc.stdout
    # The files datasets' parquet loader reads (load_dataset("parquet", data_dir=...) in the card), read locally
    data = {split: datasets.Dataset.from_parquet(str(out / f"{split}.parquet"))
            for split in ("train", "validation", "test") if (out / f"{split}.parquet").is_file()}
    tasks = load_tasks("dafny-nl")
    splits = split_tasks(tasks, heldout_fraction=0.2, seed=0)
    assert sorted(data) == ["test", "train"]
    assert data["test"]["id"] == [t.id for t in splits["heldout"]]
    assert data["train"]["id"] == [t.id for t in splits["train"]]
    row, task = data["train"][0], splits["train"][0]
    assert (row["statement"], row["reference_proof"], row["system"]) == (task.statement, task.reference_proof, "dafny")
    assert json.loads(row["metadata"]) == dict(task.metadata)
    assert "load_dataset" in (out / "README.md").read_text()


def test_export_of_an_unknown_suite_is_bad_input(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "proofgym.cli", "export", "no-such-suite", "--out",
                           str(tmp_path / "x")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "no suite named 'no-such-suite'" in proc.stderr
    assert not (tmp_path / "x").exists()
