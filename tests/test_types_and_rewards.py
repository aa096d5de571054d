"""Fast tier: task format, verdicts, rewards, pass@k, text space."""

from __future__ import annotations

import json
import pickle

import pytest

from proofgym.envs.errors import InvalidSubmission, TaskFormatError, TaskTooLarge
from proofgym.envs.rewards import RewardMap
from proofgym.envs.spaces import UnicodeText
from proofgym.envs.tasks.suites import load_tasks
from proofgym.envs.types import MAX_METADATA_CHARS, MAX_METADATA_DEPTH, TASK_FIELD_LIMITS, CheckResult, Task, Verdict
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


@pytest.mark.parametrize("field", sorted(TASK_FIELD_LIMITS))
def test_every_text_field_is_bounded_at_construction_and_from_dict(field):
    limit = TASK_FIELD_LIMITS[field]
    if field != "system":  # from_dict allows only the known systems anyway
        assert len(getattr(Task.from_dict({**GOOD, field: "x" * limit}), field)) == limit  # the bound is allowed
        with pytest.raises(TaskTooLarge, match=rf"suite.jsonl:3: '{field}' has {limit + 1} characters; the limit"):
            Task.from_dict({**GOOD, field: "x" * (limit + 1)}, source="suite.jsonl:3")
    with pytest.raises(TaskTooLarge, match=f"'{field}'"):  # also when code builds a Task directly
        Task(**{**GOOD, field: "x" * (limit + 1)})
    assert issubclass(TaskTooLarge, TaskFormatError)  # callers that catch format errors catch it too


def test_the_bounds_are_generous_for_real_suites():
    # The largest fields the built suites have (see TASK_FIELD_LIMITS): HOL Light library contexts are
    # file prefixes of up to 1.7 MB, s2n-bignum's up to 0.8 MB; statements are a few kB.
    assert TASK_FIELD_LIMITS["context"] >= 4 * 1_728_268
    assert TASK_FIELD_LIMITS["reference_proof"] >= 4 * 788_858 and TASK_FIELD_LIMITS["statement"] >= 1 << 20
    for task in load_tasks("dafny-nl"):
        assert all(len(getattr(task, f)) * 100 < TASK_FIELD_LIMITS[f] for f in TASK_FIELD_LIMITS)


def test_metadata_is_bounded_in_size_and_depth():
    deep: dict = {}
    node = deep
    for _ in range(MAX_METADATA_DEPTH + 5):
        node["x"] = {}
        node = node["x"]
    with pytest.raises(TaskTooLarge, match="nests more than"):
        Task.from_dict({**GOOD, "metadata": deep})
    with pytest.raises(TaskTooLarge, match="metadata"):
        Task.from_dict({**GOOD, "metadata": {"blob": "x" * MAX_METADATA_CHARS}})
    cyclic: list = []
    cyclic.append(cyclic)  # in-memory metadata can be cyclic: the depth count still ends
    with pytest.raises(TaskTooLarge):
        Task(**{**GOOD, "metadata": {"loop": cyclic}})
    assert Task.from_dict({**GOOD, "metadata": {"qualid": "Coq.Init.Nat.add", "line": 3}}).metadata["line"] == 3


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


def test_check_result_round_trips_through_to_dict_with_its_goals():
    from proofgym.envs.types import CheckResult, ErrorCategory, Goal, Verdict

    goals = (Goal(("n : nat", "H : forall m,\n  m = m"), "n + 0 = n"), Goal((), "True"))
    result = CheckResult(Verdict.FAIL, ("goals remain",), ("msg",), goals, ErrorCategory.LOGIC, wall_s=1.5,
                         backend="coqidetop", prover_version="8.16.1", audited=True)
    back = CheckResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert back == result and back.remaining_goals == goals  # a hypothesis over two lines survives
    assert (back.wall_s, back.backend, back.audited) == (1.5, "coqidetop", True)
    legacy = {k: v for k, v in result.to_dict().items() if k != "goals"}  # a row written before "goals"
    assert CheckResult.from_dict(legacy).remaining_goals[1] == Goal((), "True")
    unknown = CheckResult.from_dict({"verdict": "OK", "error_category": "from-the-future"})
    assert unknown.error_category is ErrorCategory.UNKNOWN
    with pytest.raises(TaskFormatError, match="verdict"):
        CheckResult.from_dict({"verdict": "MAYBE"})
