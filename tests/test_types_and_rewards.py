"""Fast tier: task format, verdicts, rewards, pass@k, text space."""

from __future__ import annotations

import json
import pickle

import pytest

from proofgym.envs.errors import InvalidSubmission, TaskFormatError
from proofgym.envs.rewards import RewardMap
from proofgym.envs.spaces import UnicodeText
from proofgym.envs.tasks.suites import load_tasks
from proofgym.envs.types import CheckResult, Task, Verdict
from proofgym.envs.verifiers.base import validate_submission
from proofgym.training.evaluate import pass_at_k

GOOD = {"id": "t", "system": "coq", "context": "", "statement": "Lemma t : True.", "reference_proof": "exact I.",
        "category": "P1", "timeout_s": 5}


def test_verdict_enum_is_exactly_the_s2n_taxonomy():
    assert [v.value for v in Verdict] == ["OK", "FAIL", "CHEATING", "TIMEOUT", "ERROR"]


def test_task_round_trip_and_frozen():
    task = Task.from_dict(GOOD)
    assert Task.from_dict(json.loads(task.to_json())) == task
    with pytest.raises(AttributeError):
        task.id = "x"  # type: ignore[misc]


@pytest.mark.parametrize(
    "change, message",
    [
        ({"system": "lean"}, "unknown system"),
        ({"timeout_s": -1}, "timeout_s"),
        ({"timeout_s": "10"}, "timeout_s"),
        ({"statement": "  "}, "statement"),
        ({"context": 3}, "context"),
    ],
)
def test_task_errors_say_what_is_wrong(change, message):
    with pytest.raises(TaskFormatError, match=message):
        Task.from_dict({**GOOD, **change})


def test_missing_keys_are_named():
    raw = dict(GOOD)
    del raw["statement"], raw["timeout_s"]
    with pytest.raises(TaskFormatError, match="statement, timeout_s"):
        Task.from_dict(raw)


def test_load_tasks_reports_file_and_line(tmp_path):
    path = tmp_path / "suite.jsonl"
    path.write_text(json.dumps(GOOD) + "\n{not json\n")
    with pytest.raises(TaskFormatError, match=r"suite.jsonl:2"):
        load_tasks(path)


def test_reward_map_defaults_and_none_for_harness_failure():
    rewards = RewardMap.from_mapping(None)
    assert rewards(CheckResult(Verdict.OK)) == 1.0
    assert rewards(CheckResult(Verdict.CHEATING)) == -1.0
    assert rewards(CheckResult(Verdict.TIMEOUT)) == 0.0
    assert rewards(None) is None
    assert RewardMap.from_mapping({"fail": -0.5})(CheckResult(Verdict.FAIL)) == -0.5
    with pytest.raises(ValueError, match="unknown verdict"):
        RewardMap({"MAYBE": 1.0})


def test_pass_at_k_unbiased_estimator():
    assert pass_at_k(1, 1, 1) == 1.0
    assert pass_at_k(5, 0, 5) == 0.0
    assert pass_at_k(10, 1, 1) == pytest.approx(0.1)
    assert pass_at_k(10, 1, 5) == pytest.approx(0.5)
    with pytest.raises(ValueError):
        pass_at_k(1, 0, 2)


def test_unicode_text_space_accepts_math_and_newlines_and_pickles_small():
    space = UnicodeText(100)
    assert space.contains("∀ n : ℕ,\n n + 0 = n")
    assert not space.contains(b"bytes")
    assert not space.contains("x" * 101)
    assert space.contains(space.sample())
    assert len(pickle.dumps(space)) < 10_000


@pytest.mark.parametrize("proof, why", [("", "empty"), ("  \n\t", "empty"), ("a\x00b", "control"),
                                        (b"\xff\xfe", "UTF-8"), ("x" * (300 * 1024), "limit")])
def test_invalid_submissions_are_rejected_before_any_prover(proof, why):
    with pytest.raises(InvalidSubmission, match=why):
        validate_submission(proof)
