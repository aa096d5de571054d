"""Cobblestone and the symbolic baseline on the real Coq (and CoqHammer when installed)."""

from __future__ import annotations

import shutil

import pytest

from proofgym.agents.strategies.cobblestone import Cobblestone, CobblestoneConfig
from proofgym.agents.symbolic import HAMMER_POSTLUDE, SymbolicAgent
from proofgym.envs.types import Task, Verdict
from proofgym.envs.verifiers.coq import HAMMER_PRELUDE, CoqVerifier
from tests.conftest import requires_coq

pytestmark = [pytest.mark.prover, requires_coq]

SPLIT = Task(id="cob.split", system="coq", context="",
             statement="Lemma sp (n : nat) : (n = n /\\ 0 + n = n) /\\ (True \\/ False).",
             reference_proof="Proof. split. - split. + reflexivity. + reflexivity. - left. exact I. Qed.",
             category="P2", timeout_s=20)
BROKEN = "Proof. split. - split. + reflexivity. + simpl. discriminate. - left. exact I. Qed."


class Scripted:
    """Answers the whole task with a proof broken in one subgoal, and holes with a fix."""

    def __init__(self, whole: str, hole: str) -> None:
        self.whole, self.hole = whole, hole
        self.seen: list[dict] = []

    def act(self, observation: dict) -> str:
        self.seen.append(observation)
        return self.hole if observation["task_id"].endswith("#hole") else self.whole


def test_one_broken_subgoal_is_repaired_by_recursion(coq_verifier):
    agent = Scripted(BROKEN, "Proof. simpl. reflexivity. Qed.")
    report = Cobblestone(coq_verifier, agent, CobblestoneConfig(hammer_tactics=(), samples=1)).solve(SPLIT)
    assert report.solved and report.solved_by == "recursion" and report.result.verdict is Verdict.OK
    assert "admit" not in report.proof and "discriminate" not in report.proof
    hole_obs = [o for o in agent.seen if o["task_id"].endswith("#hole")]
    # the hole is the goal left after the sentences that worked ("simpl." turned 0 + n = n into n = n)
    assert hole_obs and hole_obs[0]["statement"].endswith("\nn = n") and "n : nat" in hole_obs[0]["statement"]
    assert "No primitive equality" in hole_obs[0]["feedback"]
    assert report.samples_used == 2 and report.holes_seen == 1 and report.max_depth_reached == 1


def test_correct_sample_is_solved_within_one_invocation(coq_verifier):
    report = Cobblestone(coq_verifier, Scripted(SPLIT.reference_proof, ""),
                         CobblestoneConfig(hammer_tactics=(), samples=2)).solve(SPLIT)
    assert report.solved_by == "one_invocation" and report.samples_used == 1


def test_unfixable_hole_fails_within_the_budget(coq_verifier):
    agent = Scripted(BROKEN, "Proof. exact I. Qed.")
    report = Cobblestone(coq_verifier, agent, CobblestoneConfig(hammer_tactics=(), samples=2, invocations=3)).solve(
        SPLIT)
    assert not report.solved and report.invocations_used == 3 and report.samples_used == 6


def test_cheating_fix_is_never_accepted(coq_verifier):
    report = Cobblestone(coq_verifier, Scripted(BROKEN, "Proof. Admitted."),
                         CobblestoneConfig(hammer_tactics=(), samples=1, invocations=2)).solve(SPLIT)
    assert not report.solved


def test_symbolic_agent_whole_proof(coq_verifier):
    agent = SymbolicAgent()
    task = Task(id="sym", system="coq", context="", statement="Lemma s (P Q : Prop) : P /\\ Q -> Q /\\ P.",
                reference_proof="tauto.", category="P1", timeout_s=20)
    assert coq_verifier.check(task, agent.act({"system": "coq", "statement": task.statement})).verdict is Verdict.OK


REV = Task(id="cob.rev", system="coq", context="Require Import List.\n",
           statement="Lemma rr (l : list nat) : rev (rev l) = l.",
           reference_proof="Proof. induction l as [|a l IH]. - reflexivity. - simpl. rewrite rev_app_distr. "
                           "simpl. rewrite IH. reflexivity. Qed.", category="P2", timeout_s=20)


@pytest.mark.skipif(shutil.which("eprover") is None, reason="CoqHammer ATPs missing: run `make setup`")
def test_hammer_first_on_the_whole_goal_and_at_the_hole():
    with CoqVerifier(audit="always", prelude=HAMMER_PRELUDE) as verifier:
        agent = Scripted(BROKEN, "Proof. exact I. Qed.")
        report = Cobblestone(verifier, agent, CobblestoneConfig(samples=1)).solve(SPLIT)
        assert report.solved_by == "hammer" and report.samples_used == 0 and "sauto" in report.proof
        # sauto cannot prove rev (rev l) = l on its own, but closes the hole the agent's proof leaves
        broken = ("Proof. induction l as [|a l IH]. - reflexivity. - simpl. rewrite rev_app_distr. simpl. "
                  "rewrite IH. discriminate. Qed.")
        agent = Scripted(broken, "Proof. exact I. Qed.")
        report = Cobblestone(verifier, agent, CobblestoneConfig(samples=1)).solve(REV)
        assert report.solved and report.solved_by == "recursion" and report.result.audited
        assert report.hammer_calls == 2 and "sauto" in report.proof and "discriminate" not in report.proof
        assert not [o for o in agent.seen if o["task_id"].endswith("#hole")]  # hammer came first at the hole


def _hammer_installed() -> bool:
    try:
        from proofgym.envs.tasks.coq_project import user_contrib

        return (user_contrib() / "Hammer" / "Tactics" / "Tactics.vo").is_file()
    except Exception:  # noqa: BLE001 - no coqc: requires_coq says why
        return False


@pytest.mark.skipif(not _hammer_installed(), reason="CoqHammer is not installed: apt-get install -y coq-hammer "
                                                    "(scripts/setup.sh)")
def test_hammer_after_the_context_runs_sauto_on_a_verifier_without_the_prelude(coq_verifier):
    # coq_verifier loads no prelude: sauto is unknown there, so the hammer finds nothing...
    agent = Scripted("Proof. exact I. Qed.", "Proof. exact I. Qed.")
    plain = Cobblestone(coq_verifier, agent, CobblestoneConfig(samples=1, invocations=1)).solve(SPLIT)
    assert not plain.solved and plain.hammer_calls >= 1
    # ...and with CoqHammer loaded after the task's context, the same search is solved by it.
    config = CobblestoneConfig(samples=1, invocations=1, hammer_after_context=True)
    report = Cobblestone(coq_verifier, agent, config).solve(SPLIT)
    assert report.solved and report.solved_by == "hammer" and "sauto" in report.proof
    assert report.result.verdict is Verdict.OK and report.samples_used == 0
    assert HAMMER_POSTLUDE not in SPLIT.context  # the task itself is unchanged
