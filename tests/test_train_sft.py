"""SFT on reference proofs with a tiny local model, and Ctrl-C saving a checkpoint (slow tier, no prover)."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("trl")

from transformers import TrainerCallback  # noqa: E402

from proofgym.training.sft import train_sft  # noqa: E402
from proofgym.training.sft_config import ProofSFTConfig  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    from proofgym.agents.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("sft") / "model", seed=0)


def sft_config(tmp_path: Path, model: Path, suite: Path, **overrides: Any) -> ProofSFTConfig:
    base = dict(model_name_or_path=str(model), suite=str(suite), output_dir=str(tmp_path / "run"), report_to="none",
                max_steps=3, per_device_train_batch_size=2, learning_rate=1e-3, prompt_context_chars=120,
                checkpoint_eval_at_end=False, save_strategy="no", torch_threads=1, max_length=512, seed=0)
    return ProofSFTConfig(**{**base, **overrides})


def _weights(path: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    return load_file(str(path / "model.safetensors"))


@pytest.mark.train_smoke
def test_sft_changes_the_parameters(tmp_path, tiny_model, tiny_suite):
    result = train_sft(sft_config(tmp_path, tiny_model, tiny_suite))
    assert result.global_step == 3 and not result.interrupted
    before, after = _weights(tiny_model), _weights(result.final_checkpoint)
    changed = [name for name in before if not before[name].equal(after[name])]
    assert len(changed) == len(before), f"unchanged: {sorted(set(before) - set(changed))}"
    losses = [row["loss"] for row in result.log_history if "loss" in row]
    assert len(losses) == 3 and all(loss > 0 for loss in losses)


class CtrlCAtStep(TrainerCallback):
    """Sends this process SIGINT at the start of step ``step`` (as a user pressing Ctrl-C would)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step == self.step:
            os.kill(os.getpid(), signal.SIGINT)


def test_ctrl_c_saves_a_checkpoint_and_stops(tmp_path, tiny_model, tiny_suite, monkeypatch):
    from trl import SFTTrainer

    class Trainer(SFTTrainer):
        def __init__(self, *args: Any, callbacks: list | None = None, **kwargs: Any) -> None:
            super().__init__(*args, callbacks=[*(callbacks or []), CtrlCAtStep(1)], **kwargs)

    monkeypatch.setattr("trl.SFTTrainer", Trainer)  # train_sft imports it when called
    previous = signal.getsignal(signal.SIGINT)
    result = train_sft(sft_config(tmp_path, tiny_model, tiny_suite, max_steps=50))
    assert signal.getsignal(signal.SIGINT) is previous  # the handler is given back
    assert result.interrupted and result.global_step == 2  # stopped after the step in which Ctrl-C came
    checkpoint = Path(result.output_dir) / "checkpoint-2"
    assert (checkpoint / "model.safetensors").exists() and (checkpoint / "trainer_state.json").exists()


def test_accelerate_launch_with_the_cpu_config(tmp_path, tiny_model, tiny_suite):
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
           str(root / "configs" / "accelerate" / "cpu.yaml"), "-m", "proofgym.training.sft",
           "--model_name_or_path", str(tiny_model), "--suite", str(tiny_suite), "--output_dir", str(tmp_path / "run"),
           "--report_to", "none", "--max_steps", "1", "--per_device_train_batch_size", "2",
           "--checkpoint_eval_at_end", "false", "--save_strategy", "no", "--torch_threads", "1"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "run " in done.stdout and (tmp_path / "run" / "model.safetensors").exists()
