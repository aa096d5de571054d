"""Shared fixtures. Tiers: fast (no prover), ``prover`` (real coqc/coqidetop), ``slow``."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"


def have_coq() -> bool:
    return all(shutil.which(t) for t in ("coqc", "coqidetop.opt", "coqchk"))


requires_coq = pytest.mark.skipif(not have_coq(), reason="Coq is not installed: run `make setup` (apt-get install coq)")


@pytest.fixture(scope="session")
def tiny_suite() -> Path:
    return DATA / "tiny_suite.jsonl"


@pytest.fixture(scope="module")
def coq_verifier():
    if not have_coq():
        pytest.skip("Coq is not installed: run `make setup` (apt-get install coq)")
    from proofgym.envs.verifiers.coq import CoqVerifier

    with CoqVerifier(audit="always") as verifier:
        yield verifier
