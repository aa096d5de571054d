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


@pytest.fixture(scope="session")
def hol():
    """ONE warm HOL Light verifier for the whole run (Debian's HOL Light takes about two minutes to load).

    Shared by tests/test_hol_light.py and tests/test_hol_tactic.py; tests/test_hol_sandbox.py makes its own
    (other limits, hostile contexts).
    """
    from proofgym.envs.verifiers.hol_light import HolLightVerifier, hol_light_installed

    if not hol_light_installed():
        pytest.skip("HOL Light is not installed: run `make setup` (apt-get install hol-light libnum-ocaml-dev)")
    with HolLightVerifier(progress=False) as verifier:
        verifier.server("plain")
        yield verifier
