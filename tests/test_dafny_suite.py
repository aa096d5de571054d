"""The dafny-nl suite: shipped JSONL, SkillForge's difficulty split, and self-validation on Dafny 2.3."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from proofgym.envs.tasks.dafny_nl import CATEGORIES, DATA_PATH, SKILLFORGE_SPLIT, build_tasks, validate
from proofgym.envs.tasks.suites import load_tasks
from proofgym.envs.types import Verdict
from tests.conftest import seeded_sample
from tests.test_dafny_common import dafny_verifier, requires_dafny


def test_shipped_jsonl_is_the_authored_suite() -> None:
    """``data/dafny-nl.jsonl`` is exactly what the builder writes (rerun ``--write`` after editing tasks)."""
    lines = [json.loads(line) for line in DATA_PATH.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert lines == [t.to_dict() for t in build_tasks()]


def test_load_tasks_by_name() -> None:
    tasks = load_tasks("dafny-nl")
    assert len(tasks) >= 60 and len({t.id for t in tasks}) == len(tasks)
    for task in tasks:
        assert task.system == "dafny" and task.suite == "dafny-nl" and task.category in CATEGORIES
        assert task.metadata["description"].strip() and task.statement.strip()
        assert task.reference_proof.startswith(task.context)  # the reference keeps the context verbatim


def test_difficulty_split_follows_skillforge() -> None:
    counts = Counter(t.category for t in build_tasks())
    total = sum(counts.values())
    want_total = sum(SKILLFORGE_SPLIT.values())
    for category, n in SKILLFORGE_SPLIT.items():
        assert abs(counts[category] / total - n / want_total) < 0.03, (category, counts)


@pytest.mark.prover
@requires_dafny
def test_a_seeded_sample_of_each_category_validates_itself() -> None:
    """Reference OK and its ``assume false`` variant CHEATING, for a seeded sample of every category."""
    tasks = seeded_sample(build_tasks(), per_category=4, seed=0)
    assert {t.category for t in tasks} == set(CATEGORIES)
    report = validate(tasks, dafny_verifier())
    assert not report.failures, report.render()
    assert sum(report.per_category.values()) == len(tasks)


@pytest.mark.slow
@pytest.mark.prover
@requires_dafny
def test_every_task_validates_itself() -> None:
    """Reference OK and its ``assume false`` variant CHEATING, for every task of the suite (``make test-slow``)."""
    report = validate(build_tasks(), dafny_verifier())
    assert not report.failures, report.render()
    assert sum(report.per_category.values()) == len(build_tasks())


@pytest.mark.prover
@requires_dafny
@pytest.mark.parametrize("name", ["insertion_sort", "stack_class"])
def test_cli_audit_agrees_on_suite_references(name: str) -> None:
    task = next(t for t in build_tasks() if t.id == f"dafny.nl.{name}")
    result = dafny_verifier().check(task, task.reference_proof, audit=True)
    assert result.verdict is Verdict.OK and result.audited, (result.reasons, result.messages)
