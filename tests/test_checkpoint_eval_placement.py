"""A checkpoint evaluation process (issue 29) reads a snapshot that checkpoint rotation cannot delete, and runs
where ``checkpoint_eval_device`` puts it.

Mechanics only: the checkpoint is the tiny local model and the verifier a fake that answers once the test opens
its gate (tests/fakes.py). GPU counts are fakes (this machine has none): what is tested is the decision and the
environment the evaluation process gets.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from proofgym.envs.errors import ProofgymError
from proofgym.training.checkpoint_eval import (
    EvalPlacement,
    evaluation_environment,
    place_evaluation,
    snapshot_checkpoint,
)

pytest.importorskip("transformers")


def _first_log_line(path: Path) -> str:
    return path.read_text(encoding="utf-8").splitlines()[0]


def test_a_checkpoint_rotated_out_under_its_evaluation_still_gets_its_record(tmp_path, tiny_suite, monkeypatch):
    """save_total_limit: 1 deletes checkpoint-3 once checkpoint-5 is saved, while checkpoint-3's evaluation runs
    (its checks wait for the gate). The evaluation reads its snapshot, lands a record with every verdict, and the
    snapshot is gone once the record is collected."""
    from transformers.trainer_utils import rotate_checkpoints

    from proofgym.agents.tiny_model import build_tiny_model
    from proofgym.training.callbacks import CheckpointEvalCallback

    gate = tmp_path / "gate"
    monkeypatch.setenv("PROOFGYM_TEST_GATE", str(gate))
    run = tmp_path / "run"
    checkpoint = build_tiny_model(run / "checkpoint-3")
    (checkpoint / "optimizer.pt").write_bytes(b"the trainer's state: no evaluation reads it")
    callback = CheckpointEvalCallback(tiny_suite, workers=1, max_tokens=4, device="cpu", out_dir=run,
                                      verifier="tests.fakes:FakeGatedVerifier", announce=lambda _: None)
    pending = callback.start_evaluation(checkpoint, 3)
    snapshot = run / "checkpoint_evals" / "snapshots" / "step-3"
    assert pending.snapshot == snapshot and not (snapshot / "optimizer.pt").exists()
    assert os.stat(snapshot / "config.json").st_ino == os.stat(checkpoint / "config.json").st_ino  # a hard link
    (run / "checkpoint-5").mkdir()
    rotate_checkpoints(str(run), save_total_limit=1)  # what the trainer does after saving checkpoint-5
    assert not checkpoint.exists() and snapshot.is_dir()
    assert callback.collect() == []  # still running: its checks wait for the gate
    gate.write_text("open")
    (record,) = callback.collect(wait=True)
    tasks = len(tiny_suite.read_text().splitlines())
    assert "error" not in record and record["checkpoint"] == str(checkpoint)
    assert sum(record["verdicts"].values()) == tasks and record["harness_failures"] == 0
    assert not snapshot.exists()
    assert "CUDA_VISIBLE_DEVICES=''" in _first_log_line(pending.log)  # cpu: the process sees no GPU


def test_a_snapshot_copies_where_hard_links_fail(tmp_path, monkeypatch):
    """A filesystem that refuses hard links (faked: os.link raises) gets copies; a .gguf file is snapshotted too."""
    from proofgym.training import checkpoint_eval

    def fake_link_refused(source: str, target: str) -> None:
        raise OSError(18, "Invalid cross-device link (a fake)")

    monkeypatch.setattr(checkpoint_eval.os, "link", fake_link_refused)
    folder = tmp_path / "checkpoint-2"
    (folder / "sub").mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    (folder / "sub" / "rng_state.pth").write_text("kept: only the top level's training state is left out")
    (folder / "scheduler.pt").write_text("left out")
    copy = snapshot_checkpoint(folder, tmp_path / "snap")
    assert sorted(str(p.relative_to(copy)) for p in copy.rglob("*")) == ["config.json", "sub", "sub/rng_state.pth"]
    assert os.stat(copy / "config.json").st_ino != os.stat(folder / "config.json").st_ino
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF")
    assert snapshot_checkpoint(gguf, tmp_path / "snap-gguf").read_bytes() == b"GGUF"
    assert snapshot_checkpoint(tmp_path / "missing", tmp_path / "snap-missing") == tmp_path / "missing"


def test_a_resumed_run_deletes_the_snapshots_a_crashed_run_left(tmp_path, tiny_suite):
    from types import SimpleNamespace

    from transformers import TrainerControl, TrainerState

    from proofgym.training.callbacks import CheckpointEvalCallback

    stale = tmp_path / "run" / "checkpoint_evals" / "snapshots" / "step-2"
    stale.mkdir(parents=True)
    (stale / "model.safetensors").write_text("left by a killed run")
    said: list[str] = []
    callback = CheckpointEvalCallback(tiny_suite, every_steps=2, announce=said.append)
    callback.on_train_begin(SimpleNamespace(report_to=[], output_dir=str(tmp_path / "run")),
                            TrainerState(global_step=4), TrainerControl())
    assert not stale.exists() and "deleted 1 snapshot(s)" in said[0]


# -- where the evaluation process runs (fake GPU counts) ----------------------------------------------------------
FAKE_GPUS = 8


@pytest.mark.parametrize(("setting", "gpus", "local_ranks", "visible", "device", "devices", "says"), [
    ("auto", FAKE_GPUS, 7, None, "cuda", "7", "no training rank of this node uses"),
    ("auto", FAKE_GPUS, 4, "0,1,2,3,4,5,6,7", "cuda", "4", "no training rank of this node uses"),
    ("auto", FAKE_GPUS, 8, None, "cuda", "7", "sharing it with training rank 7"),
    ("auto", 1, 1, None, "cuda", "0", "sharing it with training rank 0"),
    ("auto", 0, 1, None, "cpu", None, "no GPU visible"),
    ("cpu", FAKE_GPUS, 8, None, "cpu", "", "checkpoint_eval_device: cpu"),
    ("cuda:2", 4, 2, "4,5,6,7", "cuda", "6", "no training rank"),
    ("cuda:0", 4, 2, None, "cuda", "0", "sharing it with training rank 0"),
])
def test_where_an_evaluation_process_runs(setting, gpus, local_ranks, visible, device, devices, says):
    placement = place_evaluation(setting, gpus=gpus, local_ranks=local_ranks, visible=visible)
    assert (placement.device, placement.visible_devices) == (device, devices) and says in placement.note


def test_a_device_that_is_not_there_is_refused_with_what_to_write():
    with pytest.raises(ProofgymError, match="cuda:0..cuda:3"):
        place_evaluation("cuda:4", gpus=4, local_ranks=1)
    with pytest.raises(ProofgymError, match="auto .*cpu, or cuda:N"):
        place_evaluation("gpu", gpus=4, local_ranks=1)


def test_the_evaluation_environment_holds_the_placement_and_no_rank_variables():
    environ = {"RANK": "0", "LOCAL_RANK": "0", "CUDA_VISIBLE_DEVICES": "0,1", "PATH": "/bin"}
    env = evaluation_environment(EvalPlacement("cuda", "1", "on GPU 1"), environ, ("RANK", "LOCAL_RANK"))
    assert env == {"CUDA_VISIBLE_DEVICES": "1", "PATH": "/bin", "PROOFGYM_EVAL_PLACEMENT": "on GPU 1"}
    kept = evaluation_environment(EvalPlacement("cpu", None, "on the CPU"), environ, ())
    assert kept["CUDA_VISIBLE_DEVICES"] == "0,1"


def test_an_evaluation_process_gets_the_gpu_no_training_rank_uses(tmp_path, tiny_suite, monkeypatch):
    """Two training processes on a node with 4 GPUs (a fake count): the evaluation process sees GPU 2 alone and is
    told to use it (cuda), and says so in its log; the training process's line says so too."""
    from proofgym.training import callbacks

    def fake_four_gpus() -> int:
        return 4

    monkeypatch.setattr(callbacks, "visible_gpus", fake_four_gpus)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    said: list[str] = []
    callback = callbacks.CheckpointEvalCallback(tiny_suite, workers=1, out_dir=tmp_path / "run", announce=said.append)
    pending = callback.start_evaluation(tmp_path / "no-such-checkpoint", 1)  # fails at once: no GPU is here
    callback.wait_pending()
    request = json.loads((tmp_path / "run" / "checkpoint_evals" / "step-1.request.json").read_text())
    assert request["config"]["device"] == "cuda"
    assert "CUDA_VISIBLE_DEVICES='2'" in _first_log_line(pending.log) and "no training rank" in said[0]


def test_the_train_config_says_where_evaluations_run(tmp_path):
    pytest.importorskip("trl")
    from proofgym.training.common import TrainConfigError, eval_device, parse_config
    from proofgym.training.sft_config import ProofSFTConfig

    def parsed(*flags: str):
        return parse_config(ProofSFTConfig, ["--output_dir", str(tmp_path), *flags])

    assert eval_device(parsed()) == "cpu"  # a CPU run (use_cpu, the default): auto is the CPU
    assert eval_device(parsed("--checkpoint_eval_device", "cuda:1")) == "cuda:1"
    with pytest.raises(TrainConfigError, match="checkpoint_eval_device: 'gpu1' is not a device"):
        parsed("--checkpoint_eval_device", "gpu1")
