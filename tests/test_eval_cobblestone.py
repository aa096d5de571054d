"""``proofgym eval --strategy cobblestone``: the search on real Coq tactic sessions, its proof checked by the env."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from proofgym.agents import ScriptedAgent
from proofgym.agents.strategies import make_strategy
from proofgym.agents.strategies.cobblestone import CobblestoneStrategy
from proofgym.envs.errors import ProofgymError
from proofgym.envs.proof_env import load_task_list
from proofgym.envs.tasks.suites import write_tasks
from proofgym.envs.types import Task
from proofgym.training.evaluate import EvalOptions, read_results, run_eval
from tests.conftest import requires_coq

SPLIT = Task(id="cob.split", system="coq", context="",
             statement="Lemma sp (n : nat) : (n = n /\\ 0 + n = n) /\\ (True \\/ False).",
             reference_proof="Proof. split. - split. + reflexivity. + reflexivity. - left. exact I. Qed.",
             category="P2", timeout_s=20)
BROKEN = "Proof. split. - split. + reflexivity. + simpl. discriminate. - left. exact I. Qed."
DAFNY = Task(id="d", system="dafny", context="", statement="method M() {}", reference_proof="method M() {}",
             category="D", timeout_s=20)


def test_cobblestone_is_an_eval_strategy_with_its_options():
    strategy = make_strategy("cobblestone", samples=2, invocations=3, max_depth=2, hammer_tactics=["auto."])
    assert isinstance(strategy, CobblestoneStrategy) and strategy.max_attempts == 1
    described = strategy.describe()
    assert described["samples"] == 2 and described["invocations"] == 3 and described["hammer_tactics"] == ("auto.",)
    with pytest.raises(ProofgymError, match="bad option"):
        make_strategy("cobblestone", sample=2)
    with pytest.raises(ProofgymError, match="tactic sessions of coq, hol_light; this suite has tasks of dafny"):
        strategy.prepare([DAFNY], None)


def test_hammer_after_context_makes_the_evaluated_tasks_load_coqhammer_after_their_context():
    from proofgym.agents.symbolic import HAMMER_POSTLUDE, with_hammer_postlude

    task = Task(id="c", system="coq", context="Require Import List.", statement=SPLIT.statement,
                reference_proof=SPLIT.reference_proof, category="P2")
    (loaded,) = make_strategy("cobblestone", hammer_after_context="true").prepare([task], None)
    assert loaded.context == "Require Import List.\n" + HAMMER_POSTLUDE  # after the context, never before it
    assert with_hammer_postlude(loaded) == loaded and with_hammer_postlude(DAFNY) == DAFNY
    assert make_strategy("cobblestone").prepare([task], None) == [task]  # off by default
    assert make_strategy("cobblestone", hammer_after_context=True).describe()["hammer_after_context"] is True
    assert "hammer_after_context" not in make_strategy("cobblestone").describe()  # older runs resume as before
    with pytest.raises(ProofgymError, match="true or false"):
        make_strategy("cobblestone", hammer_after_context="maybe")


@pytest.mark.prover
@requires_coq
def test_eval_cobblestone_repairs_a_broken_subgoal_by_recursion_on_coq(tmp_path):
    # The agent's whole proof fails in one bullet; its next reply (asked for the hole's goal) closes it.
    agent = ScriptedAgent({SPLIT.id: [BROKEN, "Proof. simpl. reflexivity. Qed."]})
    strategy = make_strategy("cobblestone", samples=1, invocations=2, hammer_tactics=[])
    out = tmp_path / "r.jsonl"
    summary = run_eval([SPLIT], agent=agent, out=out, options=EvalOptions(k=1, progress=False), strategy=strategy)
    (row,) = read_results(out)
    assert row["verdict"] == "OK" and row["n_attempts"] == 1 and summary.per_category["all"]["pass@1"] == 1.0
    assert "discriminate" not in row["proof"] and "admit" not in row["proof"]
    assert row["attempts"][0]["finish_reason"] == "cobblestone:recursion"
    assert strategy.reports[(SPLIT.id, 0)]["holes_seen"] == 1


@pytest.mark.prover
@requires_coq
def test_eval_cobblestone_unsolved_task_is_scored_on_the_agents_own_proof(tmp_path):
    agent = ScriptedAgent({SPLIT.id: [BROKEN, "Proof. exact I. Qed."]})
    out = tmp_path / "r.jsonl"
    run_eval([SPLIT], agent=agent, out=out, options=EvalOptions(k=1, progress=False),
             strategy=make_strategy("cobblestone", samples=1, invocations=2, hammer_tactics=[]))
    (row,) = read_results(out)
    # Nothing was proved: the attempt is the agent's first whole proof, and the env's verdict on it counts.
    assert row["verdict"] == "FAIL" and row["proof"] == BROKEN
    assert row["attempts"][0]["finish_reason"] == "cobblestone:unsolved"


@pytest.mark.prover
@requires_coq
def test_cli_eval_strategy_cobblestone_on_the_tiny_suite(tiny_suite, tmp_path):
    tasks = load_task_list(tiny_suite)[:2]
    suite = write_tasks(tmp_path / "two.jsonl", tasks)
    proc = subprocess.run([sys.executable, "-m", "proofgym.cli", "eval", "--suite", str(suite), "--agent",
                           "reference", "--strategy", "cobblestone", "--set", "samples=1", "--set",
                           "hammer_tactics=[]", "--out", str(tmp_path / "run"), "--json", "--no-progress"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["n_results"] == 2
    rows = read_results(tmp_path / "run" / "results.jsonl")
    assert sorted(r["task_id"] for r in rows) == sorted(t.id for t in tasks)
    assert all(r["verdict"] == "OK" for r in rows), [(r["task_id"], r["verdict"], r["reasons"]) for r in rows]
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["identity"]["strategy"]["name"] == "cobblestone" and config["identity"]["strategy"]["samples"] == 1
