"""Shared pieces of the Dafny test files: one warm verifier per test process, task builders.

Every Dafny test module asks :func:`dafny_verifier` for the verifier instead of starting its own,
so the whole Dafny tier pays for one DafnyServer start (STYLE: keep the prover tier modest).
"""

from __future__ import annotations

import atexit
import functools

import pytest

from proofgym.envs.types import Task

NO_DAFNY = "Dafny 2.3 is not installed: apt-get install dafny z3 && pip install z3-solver==4.8.5.0 (make setup)"


@functools.cache
def have_dafny() -> bool:
    from proofgym.envs.verifiers.dafny import dafny_available

    return dafny_available()


requires_dafny = pytest.mark.skipif(not have_dafny(), reason=NO_DAFNY)


@functools.cache
def dafny_verifier(audit: str = "never"):
    """The process-wide verifier for ``audit`` ("never" or "always"), closed at exit."""
    from proofgym.envs.verifiers.dafny import DafnyVerifier

    if not have_dafny():
        pytest.skip(NO_DAFNY)
    verifier = DafnyVerifier(audit=audit)
    atexit.register(verifier.close)
    return verifier


def dtask(tid: str, statement: str, *, context: str = "", reference: str = "", timeout_s: float = 30,
          category: str = "simple", **metadata: object) -> Task:
    """A Dafny task for tests."""
    return Task(id=f"test.dafny.{tid}", system="dafny", context=context, statement=statement,
                reference_proof=reference or (context + statement), category=category, timeout_s=timeout_s,
                metadata=dict(metadata))


def test_common_task_builder() -> None:
    """The builder makes valid Dafny tasks (a fast test so that this module is not empty)."""
    t = dtask("x", "lemma L()\n  ensures true\n")
    assert t.system == "dafny" and t.id == "test.dafny.x" and t.reference_proof.startswith("lemma L()")
