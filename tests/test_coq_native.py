"""`native_compute` on an install that cannot compile native code, and the flags coqchk is given.

Debian's Coq 8.16 is configured with the native compiler "ondemand" but ships no ``Nativevalues`` interface, so
``native_compute`` failed every honest proof ("Native compiler exited with status 2"): FAIL for an environmental
reason. The verifier runs coqidetop and coqc with ``-native-compiler no`` (``CoqConfig.native_compute_fallback``):
Coq's documented fallback runs ``vm_compute`` instead, and the kernel checks with the VM. The audit's coqchk takes
only the flags it knows (``checker_args``): given ``-native-compiler`` or ``-w`` it stopped with "Unknown option",
and the audit read that as a kernel disagreement: CHEATING for every audited OK of a verifier with such a flag.
"""

from __future__ import annotations

import pytest

from proofgym.envs.types import Task, Verdict
from proofgym.envs.verifiers.coq.isolation import checker_args


def _task(statement: str) -> Task:
    return Task(id="native." + statement.split()[1], system="coq", context="", statement=statement,
                reference_proof="Proof. reflexivity. Qed.", category="P1", timeout_s=30,
                metadata={"allowed_axioms": []})


FOUR = _task("Lemma four : 2 + 2 = 4.")
FIVE = _task("Lemma five : 2 + 2 = 5.")


def test_coqchk_gets_the_load_path_and_kernel_options_only() -> None:
    args = ("-w", "-notation-overridden", "-Q", "/lib/a", "A", "-native-compiler", "no", "-impredicative-set",
            "-R", "/lib/b", "B", "-coqlib", "/usr/lib/coq", "-indices-matter", "-noglob")
    assert checker_args(args) == ("-Q", "/lib/a", "A", "-impredicative-set", "-R", "/lib/b", "B",
                                  "-coqlib", "/usr/lib/coq", "-indices-matter")
    assert checker_args(()) == ()


# audit="always": the audit's coqc and coqchk see the same flags as the warm session.
@pytest.fixture(scope="module")
def coq(audited_coq):
    return audited_coq


@pytest.mark.prover
@pytest.mark.parametrize("proof", [
    "Proof. native_compute. reflexivity. Qed.",
    "Proof.\n  native_compute in *.\n  reflexivity.\nQed.",
    "Proof. exact (eq_refl 4 <<: 2 + 2 = 4). Qed.",  # a native cast: the kernel converts with the VM instead
])
def test_an_honest_native_compute_proof_is_ok(coq, proof: str) -> None:
    """FAIL on the old code ("Native compiler exited with status 2")."""
    result = coq.check(FOUR, proof)
    assert result.verdict is Verdict.OK, (result.reasons, result.messages)
    assert result.audited


@pytest.mark.prover
@pytest.mark.parametrize("proof", [
    "Proof. native_compute. reflexivity. Qed.",
    "Proof. native_cast_no_check (eq_refl 4). Qed.",  # skips the tactic-time check; the kernel's at Qed refuses
    "Proof. exact (eq_refl 4 <<: 2 + 2 = 5). Qed.",
])
def test_native_compute_still_proves_nothing_false(coq, proof: str) -> None:
    result = coq.check(FIVE, proof)
    assert result.verdict is Verdict.FAIL, (result.reasons, result.messages)  # the kernel refuses it


@pytest.mark.prover
def test_the_fallback_can_be_switched_off(tmp_path) -> None:
    """Without it the prover's own native compiler runs: on Debian it fails, and the verdict says so (an install
    with a working native compiler sets native_compute_fallback=False)."""
    from tests.conftest import have_coq

    if not have_coq():
        pytest.skip("Coq is not installed: run `make setup` (apt-get install coq)")
    from proofgym.envs.verifiers.coq import CoqVerifier

    with CoqVerifier(audit="never", isolation_dir=str(tmp_path), native_compute_fallback=False) as verifier:
        assert "-native-compiler" not in verifier.coq_args
        result = verifier.check(FOUR, "Proof. native_compute. reflexivity. Qed.")
    if result.verdict is not Verdict.OK:  # this install cannot compile native code (Debian's cannot)
        assert result.verdict is Verdict.FAIL
        assert any("Native compiler" in m for m in result.messages), result.messages


@pytest.mark.prover
def test_a_coqc_only_flag_does_not_turn_an_audited_ok_into_cheating(tmp_path) -> None:
    """CHEATING on the old code: coqchk stopped on ``-w`` ("Unknown option") and the audit read a kernel
    disagreement."""
    from tests.conftest import have_coq

    if not have_coq():
        pytest.skip("Coq is not installed: run `make setup` (apt-get install coq)")
    from proofgym.envs.verifiers.coq import CoqVerifier

    with CoqVerifier(audit="always", isolation_dir=str(tmp_path), extra_args=("-w", "-notation-overridden")) as v:
        ok = v.check(FOUR, "Proof. reflexivity. Qed.")
        cheat = v.check(FIVE, "Proof. admit. Admitted.")
    assert ok.verdict is Verdict.OK and ok.audited, (ok.reasons, ok.messages)
    assert cheat.verdict is Verdict.CHEATING
