"""scripts/gpu_check.sh and its python entry (proofgym.training.gpu_check) on a machine without a GPU.

There is no GPU here: what runs is the refusal with one clear line (no nvidia-smi; no CUDA or vLLM for the
python entry) and the --cpu-dry-run path, which goes through the same entry: machine report, a
config-initialised model, GRPO steps with the real Coq verifier pool as reward, the RESULT lines.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")

from tests.conftest import requires_coq  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_check.sh"


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has nvidia-smi")
def test_without_nvidia_smi_the_script_fails_at_once_with_one_line_saying_so():
    done = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHON": sys.executable})
    assert done.returncode == 2
    assert done.stdout.strip().splitlines()[-1].startswith("gpu_check: FAIL: nvidia-smi not found")


def test_the_gpu_path_refuses_a_machine_without_cuda_or_vllm_and_says_what_to_install(capsys):
    import torch

    from proofgym.training.gpu_check import main

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert main([]) == 2
    out = capsys.readouterr().out.splitlines()
    assert out[-1].startswith("gpu_check: FAIL: torch ") and "--cpu-dry-run" in out[-1]
    assert any(line.startswith("gpu_check: torch: ") for line in out)  # the machine report came first


@pytest.mark.slow
@pytest.mark.prover
@requires_coq
def test_the_cpu_dry_run_goes_through_grpo_with_the_real_coq_pool_and_prints_the_numbers(tmp_path):
    done = subprocess.run(["bash", str(SCRIPT), "--cpu-dry-run", "--out", str(tmp_path)], capture_output=True,
                          text=True, timeout=600, env={**os.environ, "PYTHON": sys.executable})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[-1].startswith("gpu_check: OK") and "no GPU was used" in lines[-1]
    result = json.loads(next(line for line in lines if line.startswith("gpu_check: RESULT json: "))
                        .removeprefix("gpu_check: RESULT json: "))
    assert result["steps"] == 2 and result["completions"] == 8
    assert result["generation_tokens_per_s"] > 0 and 0 < result["reward_s_per_step_s"] < 1
    assert result["peak_rss_gib"] > 0
    # every completion got a verdict from Coq (the totals count the samples and each verdict)
    verdicts = dict(result["verdicts"])
    assert verdicts.pop("samples") == 8 and sum(verdicts.values()) == 8
    assert (tmp_path / "model" / "config.json").exists()
