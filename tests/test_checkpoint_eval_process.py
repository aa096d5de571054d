"""Checkpoint evaluation in its own process (issue 29): started, not awaited, landed when it ends.

Mechanics only: the checkpoint is the tiny local model and the verifier a fake that answers once the test opens
its gate (tests/fakes.py); the multi-process proof with Coq's verdicts is tests/test_train_distributed_more.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("transformers")


def test_an_evaluation_runs_in_its_own_process_and_lands_when_it_ends(tmp_path, tiny_suite, monkeypatch):
    from proofgym.agents.tiny_model import build_tiny_model
    from proofgym.training.callbacks import CheckpointEvalCallback

    gate = tmp_path / "gate"
    monkeypatch.setenv("PROOFGYM_TEST_GATE", str(gate))
    monkeypatch.setenv("RANK", "0")  # a training rank's variables stay out of the evaluation process
    model = build_tiny_model(tmp_path / "checkpoint-3")
    said: list[str] = []
    callback = CheckpointEvalCallback(tiny_suite, workers=1, max_tokens=4, device="cpu", out_dir=tmp_path / "run",
                                      verifier="tests.fakes:FakeGatedVerifier", announce=said.append)
    pending = callback.start_evaluation(model, 3)
    assert callback.collect() == [] and callback.history == []  # its checks wait for the gate: still running
    request = json.loads((tmp_path / "run" / "checkpoint_evals" / "step-3.request.json").read_text())
    assert request["config"]["model"] == str(model) and request["config"]["agent"] == "local"
    gate.write_text("open")
    (record,) = callback.collect(wait=True)
    assert pending.process.returncode == 0 and callback.pending == []
    tasks = len(tiny_suite.read_text().splitlines())
    assert record["step"] == 3 and sum(record["verdicts"].values()) == tasks and record["harness_failures"] == 0
    assert json.loads((tmp_path / "run" / "checkpoint_evals.json").read_text()) == [record]
    assert Path(record["run_dir"], "results.jsonl").read_text().count("\n") == tasks
    assert "training goes on" in said[0] and said[-1].startswith("step 3: pass@1")
    assert callback.wait_pending() == []


def test_an_evaluation_process_that_fails_lands_as_an_error_record(tmp_path, tiny_suite):
    from proofgym.training.callbacks import CheckpointEvalCallback

    callback = CheckpointEvalCallback(tiny_suite, workers=1, device="cpu", out_dir=tmp_path / "run",
                                      announce=lambda _: None)
    callback.start_evaluation(tmp_path / "no-such-checkpoint", 5)
    (record,) = callback.wait_pending()
    assert record["step"] == 5 and "error" in record and callback.history == [record]
