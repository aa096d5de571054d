"""A checkpoint is evaluated with the prompt it was trained on (issue 27).

A training run writes its prompt and sampling settings (``prompt_context_chars``, the strategy,
max tokens, temperature, seed, batch size) beside every checkpoint; ``proofgym eval --agent local
--model CHECKPOINT`` takes them as defaults and says when a flag overrides one. The slow test trains a
tiny model for one step and checks that the CLI's evaluation of the run's checkpoint is the run's own
checkpoint evaluation, reply for reply and verdict for verdict. Training needs no prover (SFT; a fake
verifier factory skips the install check); both evaluations use that fake verifier: the run's checkpoint
evaluation takes the run's ``verifier_factory``, the CLI's ``--verifier``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from proofgym.training.eval_runs import (
    CHECKPOINT_SETTINGS,
    apply_checkpoint_settings,
    read_checkpoint_settings,
    read_results,
    write_checkpoint_settings,
)
from tests.conftest import requires_coq

CONTEXT_CHARS = 24


SAVED = {"strategy": "plain", "strategy_options": {"context_chars": 200}, "max_tokens": 96, "top_p": 0.95,
         "seed": 3, "batch_size": 8, "temperature": 1.0}


def test_saved_settings_are_defaults_and_each_override_is_said():
    values, notes = apply_checkpoint_settings({"model": "m", "k": 4}, {"model": "m", "k": 4}, SAVED)
    assert values["strategy_options"] == {"context_chars": 200} and values["max_tokens"] == 96
    assert (values["temperature"], values["seed"], values["batch_size"], values["k"]) == (1.0, 3, 8, 4)
    assert notes == []
    given = {"max_tokens": 256, "strategy_options": {"context_chars": 2000}, "seed": 3}
    values, notes = apply_checkpoint_settings(given, given, SAVED)
    assert values["max_tokens"] == 256 and values["strategy_options"] == {"context_chars": 2000}
    assert notes == ["--max-tokens 256 overrides the checkpoint's max_tokens 96",
                     "--set context_chars=2000 overrides the checkpoint's context_chars 200"]  # seed: same value
    # another strategy keeps its own options: the checkpoint's context_chars is plain's
    values, notes = apply_checkpoint_settings({"strategy": "selene"}, {"strategy": "selene"}, SAVED)
    assert values["strategy_options"] == {} and notes == ["--strategy selene overrides the checkpoint's strategy "
                                                          "'plain'"]


def test_settings_are_read_from_the_checkpoint_dir_or_beside_a_gguf(tmp_path):
    assert read_checkpoint_settings(tmp_path) is None
    path = write_checkpoint_settings(tmp_path, SAVED)
    assert path.name == CHECKPOINT_SETTINGS and read_checkpoint_settings(tmp_path) == (SAVED, path)
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"")
    assert read_checkpoint_settings(gguf) == (SAVED, path)


def _suite(tmp_path: Path) -> Path:
    """Six tasks whose contexts are longer than the run's prompt shows, four for training, two held out."""
    rows = []
    for i in range(6):
        context = "".join(f"Definition d{i}_{j} := {j}.\n" for j in range(12))
        rows.append({"id": f"ctx.t{i}", "system": "coq", "category": "P1", "context": context,
                     "statement": f"Lemma t{i} (n : nat) : n + {i} = {i} + n.",
                     "reference_proof": "Proof. lia. Qed.", "timeout_s": 20, "metadata": {"split": "heldout" if i < 2 else "train"}})
    path = tmp_path / "ctx.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _replies(results: Path) -> list[tuple[str, int, str, str]]:
    return sorted((r["task_id"], r["sample"], r.get("proof") or "", r["verdict"]) for r in read_results(results))


@pytest.mark.slow
@requires_coq
def test_the_cli_reproduces_the_runs_own_checkpoint_evaluation(tmp_path):
    pytest.importorskip("trl")
    from proofgym.agents.tiny_model import build_tiny_model
    from proofgym.training.sft import train_sft
    from proofgym.training.sft_config import ProofSFTConfig

    model = build_tiny_model(tmp_path / "model", seed=0)
    fake = "tests.fakes:EvenVerifier"
    result = train_sft(ProofSFTConfig(
        model_name_or_path=str(model), suite=str(_suite(tmp_path)), output_dir=str(tmp_path / "run"),
        report_to="none", max_steps=1, per_device_train_batch_size=2, learning_rate=1e-3, max_length=512,
        prompt_context_chars=CONTEXT_CHARS, save_strategy="no", torch_threads=1, seed=3, verifier_factory=fake,
        verifier_workers=1, checkpoint_eval_at_end=True, checkpoint_eval_k=2, checkpoint_eval_temperature=1.0,
        checkpoint_eval_max_tokens=16, checkpoint_eval_batch_size=4))
    run = Path(result.output_dir)
    saved = json.loads((run / CHECKPOINT_SETTINGS).read_text())
    assert saved["strategy_options"] == {"context_chars": CONTEXT_CHARS} and saved["max_tokens"] == 16
    (own,) = result.checkpoint_evals
    expected = _replies(Path(own["run_dir"]) / "results.jsonl")
    assert len(expected) == 4

    def cli(out: str, *extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "proofgym.cli", "eval", "--suite", str(run / "heldout.jsonl"),
                               "--agent", "local", "--model", str(run), "--k", "2",
                               "--verifier", fake, "--no-progress", "--out", str(tmp_path / out), *extra],
                              capture_output=True, text=True, timeout=600)

    proc = cli("cli")
    assert proc.returncode == 0, proc.stderr
    assert f"using the prompt and sampling settings saved with the checkpoint ({run / CHECKPOINT_SETTINGS})" \
        in proc.stderr and "overrides" not in proc.stderr
    assert _replies(tmp_path / "cli" / "results.jsonl") == expected
    config = json.loads((tmp_path / "cli" / "config.json").read_text())["config"]
    assert config["strategy_options"] == {"context_chars": CONTEXT_CHARS} and config["seed"] == 3

    proc = cli("wide", "--set", "context_chars=2000")  # eval's old default: the whole context
    assert proc.returncode == 0, proc.stderr
    assert "--set context_chars=2000 overrides the checkpoint's context_chars 24" in proc.stderr
    assert _replies(tmp_path / "wide" / "results.jsonl") != expected  # another prompt, other replies
