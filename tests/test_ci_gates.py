"""CI's own gates: a prover that set-up installed may not turn its tier into skips."""

from __future__ import annotations

import pytest

from tests import conftest


def _skip(reason: str) -> pytest.TestReport:
    return pytest.TestReport(nodeid="t.py::x", location=("t.py", 0, "x"), keywords={}, outcome="skipped",
                             longrepr=("t.py", 1, f"Skipped: {reason}"), when="setup")


def test_a_required_prover_skipped_as_missing_is_counted(monkeypatch):
    monkeypatch.setattr(conftest, "_missing_prover_skips", {})
    for reason in ("Coq is not installed: run `make setup`", "HOL Light is not installed: run `make setup`",
                   "CoqHammer is not installed: apt-get install -y coq-hammer", "needs a GPU"):
        conftest.pytest_runtest_logreport(_skip(reason))
    conftest.pytest_runtest_logreport(_skip("Coq is not installed"))
    assert conftest.required_provers_skipped("coq,dafny,hol_light") == {"coq": 2, "hol_light": 1}
    assert conftest.required_provers_skipped("dafny") == {}
    assert conftest.required_provers_skipped("") == {}
