"""scripts/main_job.py (`make eval`) on a tiny local model and the tiny suite: the job's mechanics.

The whole job: SFT warm start, held-out evaluation of the warm start (step 0), the pass-rate curriculum,
GRPO, the final evaluation, the report with intervals. And what it writes to disk: each model once (the
1-step run that wrote 1.1 GB saved the unchanged start model a second time, as checkpoint-0).

What checks what: the GRPO rewards and the curriculum's pass-rate estimates come from fake verifiers named as
such (``AlternatingVerifier`` here, ``LateCheater`` from test_grpo.py: a reward that varies within every group,
which the real verifier on a tiny model does not promise, so that the step changes the weights); the held-out
evaluations (step 0 and the final one) run the real Coq verifier. Training on real Coq rewards is
tests/test_grpo.py's ``test_grpo_two_steps_real_coq_wandb_offline_and_checkpoint_eval``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("trl")

from proofgym.envs.tasks.suites import load_tasks  # noqa: E402
from proofgym.envs.types import CheckResult, Task, Verdict  # noqa: E402
from proofgym.training.data import prompt_messages, reference_completion  # noqa: E402
from tests.conftest import requires_coq  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.prover, requires_coq]
ROOT = Path(__file__).resolve().parents[1]
CONTEXT_CHARS = 120
WEIGHTS = (".safetensors", ".bin", ".pt", ".pth")


def _main_job() -> Any:
    spec = importlib.util.spec_from_file_location("proofgym_main_job_script", ROOT / "scripts" / "main_job.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def taught_model(tmp_path_factory, tiny_suite) -> Path:
    from proofgym.agents.tiny_model import build_tiny_model

    teach = [(prompt_messages(t, context_chars=CONTEXT_CHARS), reference_completion(t)) for t in load_tasks(tiny_suite)]
    return build_tiny_model(tmp_path_factory.mktemp("policy") / "model", teach=teach, teach_steps=400)


class AlternatingVerifier:
    """Per worker process: OK, FAIL, OK, FAIL... so that every GRPO group of two has reward variance and the
    step changes the weights (the held-out evaluations use the real Coq verifier)."""

    calls = 0

    def __init__(self, system: str = "coq", **kwargs: Any) -> None:
        pass

    def check(self, task: Task, proof: str) -> CheckResult:
        AlternatingVerifier.calls += 1
        return CheckResult(Verdict.OK if AlternatingVerifier.calls % 2 else Verdict.FAIL, messages=("alternating",))

    def close(self) -> None:
        pass


def _weight_files(root: Path) -> dict[str, str]:
    """``{relative path: sha256}`` of every weight file under ``root``."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and p.name.endswith(WEIGHTS)
            and p.name != "training_args.bin"}


def _args(tmp_path: Path, model: Path, suite: Path, *extra: str) -> list[str]:
    return ["--model_name_or_path", str(model), "--suite", str(suite), "--output_dir", str(tmp_path / "run"),
            "--report_to", "none", "--heldout_fraction", "0.25", "--max_train_tasks", "0",
            "--prompt_context_chars", str(CONTEXT_CHARS), "--verifier_workers", "1", "--torch_threads", "1",
            "--warm_start_sft_steps", "2", "--warm_start_sft_batch_size", "2", "--curriculum_k", "2",
            "--curriculum_batch_size", "4", "--max_steps", "1", "--per_device_train_batch_size", "4",
            "--num_generations", "2", "--max_completion_length", "48", "--checkpoint_eval_k", "2",
            "--checkpoint_eval_n", "2", "--checkpoint_eval_max_tokens", "48", "--checkpoint_eval_batch_size", "4",
            *extra]


def test_the_main_job_warm_starts_runs_the_curriculum_and_grpo_and_reports_intervals(tmp_path, taught_model,
                                                                                     tiny_suite):
    main_job = _main_job()
    assert main_job.main(["--config", str(ROOT / "configs" / "train" / "grpo_cpu.yaml"),
                          *_args(tmp_path, taught_model, tiny_suite, "--verifier_factory",
                                 "tests.test_main_job:AlternatingVerifier")]) == 0
    run = tmp_path / "run"
    report = (run / "MAIN_JOB.md").read_text()
    assert "SFT warm start: 2 steps" in report and "## Curriculum" in report
    assert "## Training reward per step" in report and "mean pass@1 | 95% CI" in report
    assert "Δ mean pass@1, last vs step 0" in report and "docs/learning.md" in report
    assert "of which the curriculum estimate at step 0" in report and "machine load average" in report
    data = json.loads((run / "main_job.json").read_text())
    assert [e["step"] for e in data["heldout"]["evals"]] == [0, 1]
    for e in data["heldout"]["evals"]:
        ci = e["pass@1_ci"]
        assert e["samples"] == 2 * e["tasks"] and ci["lo"] <= e["pass@1"] <= ci["hi"]
    assert data["curriculum"] and data["curriculum"][0]["step"] == 0 and len(data["training"]) == 1
    step = data["training"][0]
    assert step["reward"] > 0 and step["reward_std"] > 0 and step["frac_reward_zero_std"] < 1
    # step 0 evaluated the warm start where it was saved, not a copy of it
    evals = json.loads((run / "checkpoint_evals.json").read_text())
    assert evals[0]["checkpoint"] == str(run / "warm-start")
    # each model written once: the warm start and the final model, two different sets of weights
    weights = _weight_files(run)
    assert sorted(weights) == ["model.safetensors", "warm-start/model.safetensors"], weights
    assert len(set(weights.values())) == 2
    assert set(weights.values()).isdisjoint(_weight_files(taught_model).values())  # the start model: never copied


def test_a_one_step_grpo_run_with_a_baseline_evaluation_saves_one_model(tmp_path, taught_model, tiny_suite):
    from proofgym.training.grpo import train_grpo
    from proofgym.training.grpo_config import ProofGRPOConfig

    result = train_grpo(ProofGRPOConfig(
        model_name_or_path=str(taught_model), suite=str(tiny_suite), output_dir=str(tmp_path / "run"),
        report_to="none", max_steps=1, per_device_train_batch_size=4, num_generations=2, max_completion_length=32,
        prompt_context_chars=CONTEXT_CHARS, heldout_fraction=0.25, verifier_workers=1, torch_threads=1,
        checkpoint_eval_on_start=True, checkpoint_eval_at_end=False, checkpoint_eval_max_tokens=32,
        save_strategy="no", verifier_factory="tests.test_grpo:LateCheater"))
    assert result.checkpoint_evals[0]["checkpoint"] == str(taught_model)  # the baseline read in place
    assert list(_weight_files(tmp_path / "run")) == ["model.safetensors"]
    size = (tmp_path / "run" / "model.safetensors").stat().st_size
    assert size <= (taught_model / "model.safetensors").stat().st_size * 1.01  # saved once, as it was trained (fp32)
