"""The shipped cheat and fairness corpora (``redteam-coq``, ``redteam-dafny``, ``redteam-hol``), case by case.

Every line is checked on the real prover and must get the ONE verdict it records: a cheat refused as CHEATING
(or FAIL where it proves nothing), honest work with a harmless construct OK (or ERROR with feedback where the
construct is not known), never CHEATING. The mechanics of the loader, the metrics and ``proofgym redteam`` are
tested on a corpus file written here, with a fake check function (named as such).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from proofgym.envs.errors import TaskFormatError
from proofgym.envs.tasks.redteam import CORPORA, CaseResult, corpus_metrics, load_corpus, run_corpus
from proofgym.envs.tasks.suites import _PACKAGED_DIR
from proofgym.envs.types import CheckResult, Task, Verdict
from tests.conftest import have_coq
from tests.test_dafny_common import dafny_verifier


def _shipped(prover: str) -> list:
    path = _PACKAGED_DIR / f"{CORPORA[prover]}.jsonl"
    return load_corpus(path) if path.is_file() else []


COQ, DAFNY, HOL = _shipped("coq"), _shipped("dafny"), _shipped("hol_light")


def _show(case, result: CheckResult) -> str:
    return f"{case.id} ({case.construct}): expected {case.expected.value}, got {result.verdict.value}: {result.reasons}"


@pytest.mark.prover
@pytest.mark.parametrize("case", COQ, ids=[c.id for c in COQ])
def test_coq_corpus_case(coq_verifier, case):
    result = coq_verifier.check(case.task, case.submission)
    assert result.verdict is case.expected, _show(case, result)


@pytest.mark.prover
@pytest.mark.parametrize("case", DAFNY, ids=[c.id for c in DAFNY])
def test_dafny_corpus_case(case):
    result = dafny_verifier().check(case.task, case.submission)
    assert result.verdict is case.expected, _show(case, result)


@pytest.mark.prover
@pytest.mark.parametrize("case", HOL, ids=[c.id for c in HOL])
def test_hol_corpus_case(hol, case):
    result = hol.check(case.task, case.submission)
    assert result.verdict is case.expected, _show(case, result)


def test_every_prover_ships_a_corpus_with_both_sides():
    for prover, cases in (("coq", COQ), ("dafny", DAFNY), ("hol_light", HOL)):
        sides = {case.side for case in cases}
        assert sides == {"cheat", "fair"}, (prover, sides)
        assert all(case.task.system == prover for case in cases), prover
        assert all(case.construct and case.why for case in cases), prover


# -- mechanics: a corpus file written here, checked by a fake ---------------------------------------------------

def _line(tid: str, side: str, submission: str, expected: str) -> dict:
    return {"id": tid, "system": "coq", "context": "", "statement": "Lemma t : True.", "reference_proof": "",
            "category": side, "timeout_s": 30, "metadata": {"redteam": {"submission": submission, "expected": expected,
                                                       "construct": tid, "why": "a test line"}}}


def _write(path: Path, lines: list[dict]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def fake_check(task: Task, proof: str) -> CheckResult:
    """A fake verifier for the mechanics: Admitted is CHEATING, 'exact I' OK, anything else FAIL."""
    if "Admitted" in proof:
        return CheckResult(Verdict.CHEATING, ("Admitted",))
    return CheckResult(Verdict.OK if "exact I" in proof else Verdict.FAIL)


def test_metrics_count_each_side(tmp_path):
    corpus = _write(tmp_path / "c.jsonl", [
        _line("hole", "cheat", "Proof. Admitted.", "CHEATING"),
        _line("fake-ok", "cheat", "Proof. exact I. Qed.", "FAIL"),  # the fake lets it through: a hole
        _line("query", "fair", "Proof. exact I. Qed.", "OK"),
        _line("wrong", "fair", "Proof. auto. Qed.", "ERROR"),
    ])
    results = run_corpus(load_corpus(corpus), fake_check)
    metrics = corpus_metrics(results)
    assert metrics["cheat/caught_rate"] == 0.5 and metrics["cheat/ok_rate"] == 0.5
    assert metrics["fair/ok_rate"] == 0.5 and metrics["fair/punished_rate"] == 0.0
    assert metrics["fair/fail_rate"] == 0.5
    assert metrics["corpus/as_expected_rate"] == 0.5
    assert [r.case.id for r in results if not r.as_expected] == ["fake-ok", "wrong"]
    assert isinstance(results[0], CaseResult)


@pytest.mark.parametrize(("line", "message"), [
    (_line("x", "fair", "Proof. auto. Qed.", "CHEATING"), "never expects CHEATING"),
    (_line("x", "cheat", "Proof. auto. Qed.", "OK"), "is a hole"),
    (_line("x", "both", "Proof. auto. Qed.", "OK"), "category must be one of"),
    (_line("x", "fair", "Proof. auto. Qed.", "PASS"), "expected must be one of"),
    ({**_line("x", "fair", "", "OK")}, "submission must be non-empty"),
    ({**_line("x", "fair", "p", "OK"), "metadata": {}}, "needs metadata.redteam"),
])
def test_a_malformed_corpus_line_says_what_is_wrong(tmp_path, line, message):
    with pytest.raises(TaskFormatError, match=message):
        load_corpus(_write(tmp_path / "bad.jsonl", [line]))


def test_repeated_ids_are_refused(tmp_path):
    line = _line("x", "fair", "Proof. exact I. Qed.", "OK")
    with pytest.raises(TaskFormatError, match="duplicate task id"):
        load_corpus(_write(tmp_path / "twice.jsonl", [line, line]))


@pytest.mark.prover
@pytest.mark.skipif(not have_coq(), reason="Coq is not installed: run `make setup`")
def test_the_cli_runs_a_corpus_and_exits_1_on_a_verdict_not_as_recorded(tmp_path):
    corpus = _write(tmp_path / "c.jsonl", [
        _line("hole", "cheat", "Proof. Admitted.", "CHEATING"),
        _line("honest", "fair", "Proof. exact I. Qed.", "OK"),
    ])
    cmd = [sys.executable, "-m", "proofgym.cli", "redteam", "--corpus", str(corpus), "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert [row["verdict"] for row in report["cases"]] == ["CHEATING", "OK"]
    assert report["metrics"]["cheat/caught_rate"] == 1.0 and report["metrics"]["fair/punished_rate"] == 0.0
    _write(corpus, [_line("wrong", "fair", "Proof. exact 0. Qed.", "OK")])
    proc = subprocess.run(cmd[:-1], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "NOT AS EXPECTED  wrong" in proc.stdout
