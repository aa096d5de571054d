"""The runnable examples/ (the README's three quick starts) run as a user runs them, on the real prover.

Each example is run as its own process (``python examples/X.py``) from a fresh folder with a fresh
``$PROOFGYM_CACHE``, so only what ships with proofgym is there, and its printed output is checked: the
verdicts are Coq's own. The training example is in the slow tier (TRL and a tiny model).
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import requires_coq

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def run_example(name: str, tmp_path: Path, *args: str, timeout: float = 900) -> str:
    env = {**os.environ, "PROOFGYM_CACHE": str(tmp_path / "cache"), "WANDB_MODE": "disabled"}
    proc = subprocess.run([sys.executable, str(EXAMPLES / name), *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{name}:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return proc.stdout


def test_every_example_is_tested_here():
    """A new example gets a test in this file (the integrations have theirs in test_integrations_*)."""
    tested = set(re.findall(r'run_example\("(\w+\.py)"', Path(__file__).read_text(encoding="utf-8")))
    assert tested == {p.name for p in EXAMPLES.glob("*.py")}


@requires_coq
@pytest.mark.prover
def test_the_env_loop_example_prints_coqs_verdicts(tmp_path):
    assert run_example("env_loop.py", tmp_path).splitlines() == [
        "task: coq.tiny.add_0_r | Lemma add_0_r' (n : nat) : n + 0 = n.",
        "verdict: FAIL reward: 0.0 terminated: False",
        "feedback: Reasons: sentence 2 failed: (reflexivity).",
        "verdict: OK reward: 1.0 terminated: True",
        "verdict: CHEATING reward: -1.0 terminated: False | Admitted ends the proof without proving it",
    ]


@requires_coq
@pytest.mark.prover
def test_the_evaluate_agent_example_scores_its_agent_and_a_rerun_redoes_nothing(tmp_path):
    expected = [
        "coq.tiny.add_0_r: FAIL",
        "coq.tiny.and_comm: FAIL",
        "coq.tiny.app_nil: FAIL",
        "coq.tiny.lia: OK",
        "coq.tiny.section: FAIL",
        "pass@1 P1: 0.25 over 4 task(s)",
        "pass@1 P2: 0.00 over 1 task(s)",
        "pass@1 all: 0.20 over 5 task(s)",
    ]
    results = tmp_path / "results.jsonl"
    assert run_example("evaluate_agent.py", tmp_path, str(results)).splitlines() == expected
    rows = results.read_text(encoding="utf-8")
    assert run_example("evaluate_agent.py", tmp_path, str(results)).splitlines() == expected
    assert results.read_text(encoding="utf-8") == rows  # the rows already there are not redone


@requires_coq
@pytest.mark.prover
@pytest.mark.slow
def test_the_grpo_example_trains_on_coqs_rewards(tmp_path):
    from safetensors.torch import load_file

    out = tmp_path / "run"
    printed = run_example("train_tiny_grpo.py", tmp_path, str(out))
    steps = re.findall(r"^step (\d+): mean reward ([\d.]+), OK rate ([\d.]+), groups with a reward to compare (\d+)%$",
                       printed, re.MULTILINE)
    assert [int(s) for s, *_ in steps] == [1, 2], printed
    (counts,) = re.findall(r"^verdicts of the 16 completions: (\{.*\})$", printed, re.MULTILINE)
    verdicts = ast.literal_eval(counts)
    assert sum(verdicts.values()) == 16 and set(verdicts) <= {"OK", "FAIL", "ERROR", "TIMEOUT", "CHEATING"}
    # Coq accepted proofs after the warm start, the reward reached training, and a group had a reward to compare
    assert verdicts.get("OK", 0) > 0 and any(float(reward) > 0 for _, reward, _, _ in steps), printed
    assert any(int(groups) > 0 for *_, groups in steps), printed
    start, final = load_file(str(out / "warm-start" / "model.safetensors")), load_file(str(out / "model.safetensors"))
    assert any(not (start[name] == final[name]).all() for name in start)  # GRPO changed the parameters
