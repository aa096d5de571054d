"""The default Coq suite: extracted from the installed stdlib, sampled as Selene does, validated.

Validating all 360 sampled tasks takes about 25 minutes on two cores: that is ``proofgym build
coq-stdlib``'s own job (it validates every task it keeps). The test run extracts and samples the
whole suite (seconds), then validates a seeded sample of each category on the real prover: every
reference it keeps must verify again, in isolation and with the audit, and none may be a false
rejection of the whitelist. When a built suite is in ``$PROOFGYM_CACHE`` (``make eval`` builds
one), the same sample is drawn from it, so its tasks are checked as built.
"""

from __future__ import annotations

from collections import Counter

import pytest

from proofgym.envs.tasks.suites import load_tasks, suite_dir
from proofgym.envs.types import Verdict
from proofgym.training.evaluate import EvalOptions, ReferenceAgent, run_eval
from tests.conftest import requires_coq, seeded_sample

pytestmark = [pytest.mark.prover, requires_coq]

PER_CATEGORY = 8  # tasks validated per category in the test run
SEED = 20261201


@pytest.fixture(scope="session")
def sampled(tmp_path_factory):
    """The sampled suite (not validated) and its report, built into a temporary file."""
    from proofgym.envs.tasks.build import build_coq_stdlib

    path = tmp_path_factory.mktemp("coq-stdlib") / "sampled.jsonl"
    report = build_coq_stdlib(out=path, workers=2, validate=False, progress=False)
    return load_tasks(path), report


def _sample(tasks):
    return seeded_sample(tasks, PER_CATEGORY, SEED)


def test_suite_follows_selene_sampling(sampled):
    tasks, report = sampled
    assert report.sampled == {"P1": 160, "P2": 120, "P3": 80}
    assert Counter(t.category for t in tasks) == Counter(report.sampled)
    assert all(t.metadata.get("qualid", "").startswith("Coq.") for t in tasks)
    assert len({t.id for t in tasks}) == len(tasks)


def test_a_seeded_sample_validates_and_its_references_are_accepted(sampled, tmp_path):
    from proofgym.envs.tasks.build import validate_tasks

    built = suite_dir() / "coq-stdlib.jsonl"
    if built.exists():  # a suite `proofgym build` made: its kept tasks, as they are
        tasks = _sample(load_tasks(built))
        kept, excluded, false_rejections = tasks, Counter(), []
    else:
        tasks = _sample(sampled[0])
        kept, excluded, false_rejections = validate_tasks(tasks, workers=2, progress=False)
    assert len(kept) + sum(excluded.values()) == len(tasks), "every task is kept or excluded with a reason"
    assert not false_rejections, f"the whitelist rejected honest references: {false_rejections}"
    assert len(kept) >= 0.8 * len(tasks), f"only {len(kept)} of {len(tasks)} kept: {dict(excluded)}"
    assert {t.category for t in kept} == {"P1", "P2", "P3"}
    assert all("allowed_axioms" in t.metadata for t in kept)
    rows = []
    summary = run_eval(kept, agent=ReferenceAgent(), out=tmp_path / "ref.jsonl",
                       options=EvalOptions(k=1, workers=2, progress=False), on_result=rows.append)
    rejected = [(r["task_id"], r["verdict"], r["reasons"][:1]) for r in rows if r["verdict"] != Verdict.OK.value]
    assert summary.harness_failures == 0
    assert not rejected, f"honest reference proofs rejected: {rejected[:10]}"
    assert summary.per_category["all"]["pass@1"] == 1.0
