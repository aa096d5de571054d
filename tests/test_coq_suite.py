"""The default Coq suite: built from the installed stdlib, validated, and every reference accepted.

Building the suite validates every sampled task (reference OK in isolation with the coqc + coqchk
audit; ``Admitted`` and ``exact <original>`` rejected). The session fixture reuses a suite already
built in ``$PROOFGYM_CACHE`` (``make eval`` builds it), otherwise builds it here.
"""

from __future__ import annotations

import json

import pytest

from proofgym.envs.tasks.suites import load_tasks, suite_dir
from proofgym.envs.types import Verdict
from proofgym.training.evaluate import ReferenceAgent, run_eval
from tests.conftest import requires_coq

pytestmark = [pytest.mark.prover, requires_coq]


@pytest.fixture(scope="session")
def stdlib_suite():
    from proofgym.envs.tasks.build import build_coq_stdlib

    path = suite_dir() / "coq-stdlib.jsonl"
    report_path = path.with_suffix(".report.json")
    if not path.exists() or not report_path.exists():
        build_coq_stdlib(out=path, workers=2, progress=False)
    return path, json.loads(report_path.read_text())


def test_suite_follows_selene_sampling_and_reports_exclusions(stdlib_suite):
    path, report = stdlib_suite
    assert report["sampled"] == {"P1": 160, "P2": 120, "P3": 80}
    tasks = load_tasks(path)
    kept = sum(report["kept"].values())
    assert len(tasks) == kept
    excluded = sum(report["excluded"].values())
    assert kept + excluded == 360, "every sampled task is either kept or excluded with a reason"
    assert kept >= 300, f"only {kept} of 360 tasks survived validation: {report['excluded']}"
    assert {t.category for t in tasks} == {"P1", "P2", "P3"}
    assert all(t.metadata.get("qualid", "").startswith("Coq.") for t in tasks)
    assert all("allowed_axioms" in t.metadata for t in tasks)


def test_every_reference_proof_in_the_default_suite_is_accepted(stdlib_suite, tmp_path):
    path, _ = stdlib_suite
    tasks = load_tasks(path)
    rows = []
    summary = run_eval(tasks, agent=ReferenceAgent(), k=1, out=tmp_path / "ref.jsonl", workers=2,
                       progress=False, on_result=rows.append)
    rejected = [(r["task_id"], r["verdict"], r["reasons"][:1]) for r in rows if r["verdict"] != Verdict.OK.value]
    assert summary.harness_failures == 0
    assert not rejected, f"honest reference proofs rejected: {rejected[:10]}"
    assert summary.per_category["all"]["pass@1"] == 1.0
