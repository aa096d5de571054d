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
    assert request["checkpoint"] == str(model) and request["config"]["agent"] == "local"
    assert request["config"]["model"] == str(tmp_path / "run" / "checkpoint_evals" / "snapshots" / "step-3")
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


def test_a_resumed_run_keeps_the_evaluations_made_before_its_checkpoint(tmp_path, tiny_suite):
    """Issue 29 ("resume restores the evaluation history"): resumed at step 4, the run keeps the records of steps
    0-4 from checkpoint_evals.json (not step 6, made after the checkpoint it resumed from) and adds to them; a
    fresh run (step 0) starts its own history."""
    from types import SimpleNamespace

    from transformers import TrainerControl, TrainerState

    from proofgym.training.callbacks import CheckpointEvalCallback

    run = tmp_path / "run"
    run.mkdir()
    earlier = [{"step": s, "checkpoint": f"checkpoint-{s}", "metrics": {}} for s in (0, 2, 4, 6)]
    (run / "checkpoint_evals.json").write_text(json.dumps(earlier))
    args = SimpleNamespace(report_to=[], output_dir=str(run))
    said: list[str] = []

    resumed = CheckpointEvalCallback(tiny_suite, every_steps=2, announce=said.append)
    resumed.on_train_begin(args, TrainerState(global_step=4), TrainerControl())
    assert [r["step"] for r in resumed.history] == [0, 2, 4] and "3 earlier checkpoint evaluation(s)" in said[0]
    landed = {"step": 6, "checkpoint": "checkpoint-6", "metrics": {}, "per_category": {}, "verdicts": {},
              "run_dir": "r", "seconds": 1.0}
    resumed._land(landed)
    assert [r["step"] for r in json.loads((run / "checkpoint_evals.json").read_text())] == [0, 2, 4, 6]

    fresh = CheckpointEvalCallback(tiny_suite, every_steps=2, announce=said.append)
    fresh.on_train_begin(args, TrainerState(global_step=0), TrainerControl())
    assert fresh.history == []
