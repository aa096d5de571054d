"""The shared episode loop (envs/episode.py) and the per-system specs (envs/systems.py): fast tier."""

from __future__ import annotations

import pytest

from proofgym.agents.prompts import prompts_for
from proofgym.agents.strategies.cobblestone import HAMMER_TACTICS
from proofgym.envs import systems
from proofgym.envs.episode import FINAL_VERDICTS, Episode, TaskSet
from proofgym.envs.errors import TaskFormatError
from proofgym.envs.parsing import statement_to_strip
from proofgym.envs.tasks.suites import BUILDABLE_SUITES
from proofgym.envs.types import SYSTEMS, CheckResult, Task, Verdict
from proofgym.envs.verifiers.base import verifier_class

TASK = Task(id="t", system="coq", context="", statement="Lemma l : True.", reference_proof="Proof. exact I. Qed.",
            category="P1", timeout_s=10)


def verdict_of(proof: str) -> CheckResult:
    return CheckResult(Verdict[proof.upper()], (f"said {proof}",))


def test_episode_budget_feedback_and_rewards():
    episode = Episode(TASK, max_attempts=3)
    assert episode.feedback == "" and not episode.done
    turn = episode.submit("fail", lambda task, proof: verdict_of(proof))
    assert turn.index == 1 and turn.reward == 0.0 and "said fail" in episode.feedback and not episode.done
    assert episode.submit(None, lambda *_: pytest.fail("a non-text action never reaches the verifier")
                          ).verdict is Verdict.ERROR
    episode.record("cheating", verdict_of("cheating"))
    assert episode.truncated and not episode.terminated and episode.last.reward == -1.0


def test_episode_ends_on_its_final_verdicts_and_on_a_harness_failure():
    ok = Episode(TASK, max_attempts=5)
    ok.record("ok", verdict_of("ok"))
    assert ok.terminated and ok.done and not ok.truncated
    rollout = Episode(TASK, max_attempts=5, ends_on=FINAL_VERDICTS)
    rollout.record("cheating", verdict_of("cheating"))
    assert rollout.terminated
    broken = Episode(TASK, max_attempts=5)
    turn = broken.fail("p", "worker_died: gone")
    assert broken.failed and broken.done and turn.reward is None and turn.result is None
    tool = Episode(TASK, max_attempts=2, ends_on=frozenset(), stop_on_failure=False)
    tool.fail("p", "gone")
    tool.record("ok", verdict_of("ok"))
    assert not tool.terminated and tool.truncated  # only the budget ends the tool env's episode


def test_taskset_finds_tasks_and_refuses_duplicates():
    tasks = TaskSet([TASK, {**TASK.to_dict(), "id": "u"}])
    assert len(tasks) == 2 and tasks.get("u").id == "u" and "t" in tasks and TaskSet(tasks).by_id is tasks.by_id
    with pytest.raises(KeyError, match="zzz"):
        tasks.get("zzz")
    with pytest.raises(TaskFormatError, match="duplicate task id 't'"):
        TaskSet([TASK, TASK])


def test_every_place_reads_the_system_specs():
    assert SYSTEMS == systems.SYSTEM_NAMES
    assert BUILDABLE_SUITES == tuple(systems.buildable_suites())
    for spec in systems.SPECS.values():
        if spec.wired:
            assert verifier_class(spec.name).system == spec.name  # imports the class; starts no prover
        task = Task(id="x", system=spec.name, context="", statement="S", reference_proof="p", category="c",
                    timeout_s=1)
        assert statement_to_strip(task) == ("S" if spec.parser_strips_statement else "")
        messages = prompts_for(spec.name).messages(task)
        assert f"```{spec.fence}" in messages[-1]["content"]
        assert HAMMER_TACTICS.get(spec.name, ()) == spec.hammers
    with pytest.raises(TaskFormatError, match="no verifier for system 'isabelle'"):
        verifier_class("isabelle")
    with pytest.raises(TaskFormatError, match="known systems: coq, hol_light, dafny, isabelle"):
        systems.spec("lean")
