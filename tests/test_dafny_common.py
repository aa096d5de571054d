"""Shared pieces of the Dafny test files: one warm verifier per test process, task builders.

Every Dafny test module asks :func:`dafny_verifier` for the verifier instead of starting its own,
so the whole Dafny tier pays for one DafnyServer start (STYLE: keep the prover tier modest): one
verifier serves both audit settings, and it is closed when the run ends (tests/conftest.py), not at
interpreter exit.
"""

from __future__ import annotations

import functools

import pytest

from proofgym.envs.types import Task
from tests.conftest import close_at_session_end

NO_DAFNY = "Dafny 2.3 is not installed: apt-get install dafny z3 && pip install z3-solver==4.8.5.0 (make setup)"


@functools.cache
def have_dafny() -> bool:
    from proofgym.envs.verifiers.dafny import dafny_available

    return dafny_available()


requires_dafny = pytest.mark.skipif(not have_dafny(), reason=NO_DAFNY)


@functools.cache
def _shared_verifier():
    from proofgym.envs.verifiers.dafny import DafnyVerifier

    return close_at_session_end(DafnyVerifier(audit="never"))


class _AlwaysAudited:
    """The shared verifier, auditing every OK (what ``DafnyVerifier(audit="always")`` does) on the same server."""

    def __init__(self, verifier) -> None:
        self._verifier = verifier

    def check(self, task: Task, proof: str, *, audit: bool | None = None):
        return self._verifier.check(task, proof, audit=True if audit is None else audit)

    def __getattr__(self, name: str):
        return getattr(self._verifier, name)


def dafny_verifier(audit: str = "never"):
    """The run-wide verifier, with ``audit`` ("never" or "always") as its default; closed when the run ends."""
    if audit not in ("never", "always"):
        raise ValueError(f"audit must be never or always, got {audit!r}")
    if not have_dafny():
        pytest.skip(NO_DAFNY)
    verifier = _shared_verifier()
    return verifier if audit == "never" else _AlwaysAudited(verifier)


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


def fail_symbols_requests(verifier, monkeypatch) -> list[type[Exception]]:
    """Make ``verifier``'s next declarations (``symbols``) requests raise what the returned list holds, one each:
    a fault injected at the server boundary (an empty list: requests go through)."""
    real = verifier._server_request  # noqa: SLF001 - the fault is injected at the server boundary
    failures: list[type[Exception]] = []

    def flaky(verb: str, *args, **kwargs):
        if verb == "symbols" and failures:
            raise failures.pop(0)("injected")
        return real(verb, *args, **kwargs)

    monkeypatch.setattr(verifier, "_server_request", flaky)
    return failures
