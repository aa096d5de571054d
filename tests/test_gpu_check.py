"""scripts/gpu_check.sh and training/gpu_check.py on a machine without a GPU (issue 29).

There is no GPU here: what runs is the refusal with one clear line (no nvidia-smi; no CUDA for the python
file) and the --cpu-dry-run path, which goes through the same stages as on the GPU machine (precision,
SFT, GRPO-style step) on a tiny model and writes the JSON of numbers. The GPU machine has torch and
transformers but neither gymnasium nor TRL, so the check must run as a plain file without importing
proofgym; and its rewards are a table of real Coq verdicts recorded here, re-checked against Coq below.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from tests.conftest import requires_coq  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_check.sh"


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has nvidia-smi")
def test_without_nvidia_smi_the_script_fails_at_once_with_one_line_saying_so():
    done = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHON": sys.executable})
    assert done.returncode == 2
    assert done.stdout.strip().splitlines()[-1].startswith("gpu_check: FAIL: nvidia-smi not found")


def test_the_gpu_path_refuses_a_machine_without_cuda_and_says_what_to_do(capsys):
    import torch

    from proofgym.training.gpu_check import main

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert main([]) == 2
    out = capsys.readouterr().out.splitlines()
    assert out[-1].startswith("gpu_check: FAIL: torch ") and "--cpu-dry-run" in out[-1]
    assert any(line.startswith("gpu_check: torch: ") for line in out)  # the machine report came first


def test_the_cpu_dry_run_proves_fp32_masters_train_and_writes_the_numbers(tmp_path):
    done = subprocess.run(["bash", str(SCRIPT), "--cpu-dry-run", "--out", str(tmp_path)], capture_output=True,
                          text=True, timeout=600, env={**os.environ, "PYTHON": sys.executable})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[-1].startswith("gpu_check: OK") and "no GPU was used" in lines[-1]
    numbers = json.loads((tmp_path / "gpu_check.json").read_text())
    assert numbers["mode"] == "cpu-dry-run"
    # the configured precision moves the weights; bf16 storage without masters rounds most updates away
    precision = numbers["precision"]
    assert precision["float32_weights_moved"] > 0.99 > 0.5 > precision["bfloat16_weights_moved"]
    sft, grpo = numbers["sft"], numbers["grpo"]
    assert sft["weights_moved"] > 0.99 and sft["tokens_per_s"] > 0 and sft["step_s"] > 0 and sft["peak_rss_gib"] > 0
    assert grpo["generation_tokens"] == 5 * 2 * 16 and grpo["generation_tokens_per_s"] > 0
    assert grpo["recorded_verdicts"] == {"OK": 5, "CHEATING": 5, "FAIL": 10, "ERROR": 5}
    assert grpo["weights_moved"] > 0 and grpo["step_s"] > 0 and grpo["peak_rss_gib"] > 0


@pytest.mark.slow
def test_the_check_runs_as_a_file_on_torch_and_transformers_alone(tmp_path):
    """No proofgym, gymnasium or TRL import: the GPU machine has none of them (only the file travels there)."""
    code = ("import runpy, sys\n"
            f"sys.argv = ['gpu_check.py', '--cpu-dry-run', '--out', {str(tmp_path)!r}]\n"
            "try:\n"
            f"    runpy.run_path({str(ROOT / 'training' / 'gpu_check.py')!r}, run_name='__main__')\n"
            "except SystemExit as exc:\n"
            "    assert exc.code == 0, exc.code\n"
            "loaded = sorted({m.split('.')[0] for m in sys.modules} & {'proofgym', 'gymnasium', 'trl', 'vllm'})\n"
            "print('LOADED', loaded)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert done.stdout.splitlines()[-1] == "LOADED []"


@pytest.mark.prover
@requires_coq
def test_the_recorded_verdicts_are_what_coq_says_today():
    from proofgym.envs.tasks.suites import load_tasks
    from proofgym.envs.verifiers.base import make_verifier
    from proofgym.training.gpu_check import RECORDED_VERDICTS, TASKS, WRONG_ATTEMPTS

    tasks = load_tasks(TASKS)
    assert sorted(RECORDED_VERDICTS) == sorted(t.id for t in tasks)
    verifier = make_verifier("coq")
    try:
        for task in tasks:
            seen = tuple(verifier.check(task, proof).verdict.value for proof in (task.reference_proof, *WRONG_ATTEMPTS))
            assert seen == RECORDED_VERDICTS[task.id], task.id
    finally:
        verifier.close()
