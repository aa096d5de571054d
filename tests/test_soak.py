"""A short soak (the long one is ``scripts/soak.py --episodes 10000``; its numbers are in docs/benchmarks.md).

Many WholeProof-v0 episodes in threads over one verifier pool, mixing honest proofs, cheats, loops
and garbage: no harness failure, verdicts identical to a serial run, no process left behind.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from tests.conftest import requires_coq

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "soak.py"


def _soak_module():
    spec = importlib.util.spec_from_file_location("proofgym_soak_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_soak_plan_is_reproducible_and_mixed(tiny_suite):
    soak = _soak_module()
    tasks = soak.load_suites([], built=False)
    first, second = soak.plan(tasks, 300, seed=3), soak.plan(tasks, 300, seed=3)
    assert first == second
    kinds = {e.kind for e in first}
    assert kinds == {"honest", "repair", "cheat", "loop", "garbage"}
    assert all(len(e.proofs) == (2 if e.kind == "repair" else 1) for e in first)
    assert all(e.task.timeout_s == soak.LOOP_TIMEOUT_S for e in first if e.kind == "loop")


@pytest.mark.prover
@requires_coq
def test_short_soak_matches_a_serial_run_and_leaves_nothing_behind():
    soak = _soak_module()
    mix = {"honest": 0.4, "repair": 0.1, "cheat": 0.2, "loop": 0.05, "garbage": 0.25}
    report = soak.run_soak(40, workers=2, seed=1, mix=mix, built_suites=False)  # the tiny suite: same work anywhere
    print(report.render())
    assert sum(report.kinds.values()) == 40 and {"honest", "cheat", "garbage", "loop"} <= set(report.kinds)
    assert report.harness_failures == 0
    assert report.mismatches == [], report.mismatches
    assert report.leftover_processes == [] and report.zombies == []
    assert report.rss_end_bytes > 0 and report.processes_peak > 0
    assert report.ok
