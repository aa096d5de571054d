"""Deterministic budgets (the README's TIMEOUT policy): they reach the prover, and they decide the verdict.

Whether a verdict stays the same on a busy machine is a timing question and is measured by ``scripts/bench.py
--rows load``, not here. Here: Coq's ``timeout_clock="cpu"`` stops a CPU-bound loop at the prover's CPU budget
(the wall-clock backstop is far off; HOL Light's is tested on the warm server in test_hol_light.py), and Dafny's
``rlimit`` is passed to z3, so that a budget too small for the
reference proof is TIMEOUT (out of resource), never FAIL.
"""

from __future__ import annotations

import pytest

from proofgym.envs.types import ErrorCategory, Task, Verdict
from tests.conftest import requires_coq
from tests.test_dafny_common import NO_DAFNY, dafny_verifier, dtask, have_dafny

LOOP = Task(id="budget.loop", system="coq", context="", statement="Lemma loop : 1 = 1.",
            reference_proof="Proof. reflexivity. Qed.", category="P1", timeout_s=1)
COQ_LOOP = "Proof. repeat (idtac; assert True by exact I). Qed."


def test_bad_budget_options_are_refused_before_any_prover_starts():
    from proofgym.envs.verifiers.coq import CoqVerifier
    from proofgym.envs.verifiers.dafny import DafnyVerifier

    with pytest.raises(ValueError, match="timeout_clock"):
        CoqVerifier(timeout_clock="gpu")
    with pytest.raises(ValueError, match="wall_backstop"):
        CoqVerifier(timeout_clock="cpu", wall_backstop=0.5)
    with pytest.raises(ValueError, match="rlimit"):
        DafnyVerifier(rlimit=-1)
    from proofgym.envs.verifiers.hol_light import HolLightVerifier

    with pytest.raises(ValueError, match="timeout_clock"):
        HolLightVerifier(timeout_clock="gpu")
    with pytest.raises(ValueError, match="wall_backstop"):
        HolLightVerifier(timeout_clock="cpu", wall_backstop=0.5)


@pytest.mark.prover
@requires_coq
def test_a_cpu_bound_loop_hits_the_coq_cpu_budget():
    """With the CPU clock the loop is stopped by the prover's CPU seconds, not by the wall-clock backstop (30 x
    timeout_s here), is TIMEOUT saying so, and the verifier answers the next check."""
    from proofgym.envs.verifiers.coq import CoqVerifier

    with CoqVerifier(audit="never", timeout_clock="cpu", wall_backstop=30) as verifier:
        assert verifier.check(LOOP, LOOP.reference_proof).verdict is Verdict.OK
        result = verifier.check(LOOP, COQ_LOOP)
        assert result.verdict is Verdict.TIMEOUT and result.error_category is ErrorCategory.TIMEOUT, result
        assert "CPU seconds" in result.reasons[0], result.reasons
        assert verifier.check(LOOP, LOOP.reference_proof).verdict is Verdict.OK
    with CoqVerifier(audit="never") as wall:  # the default clock is the wall clock, as before
        result = wall.check(LOOP, COQ_LOOP)
        assert result.verdict is Verdict.TIMEOUT and "CPU" not in result.reasons[0], result.reasons


DAFNY_TASK = dtask(
    "rlimit", "method Sum(n: nat) returns (s: nat)\n  ensures s == n * (n + 1) / 2\n",
    reference=("method Sum(n: nat) returns (s: nat)\n  ensures s == n * (n + 1) / 2\n{\n  s := 0;\n  var i := 0;\n"
               "  while i < n\n    invariant i <= n\n    invariant s == i * (i + 1) / 2\n  {\n    i := i + 1;\n"
               "    s := s + i;\n  }\n}\n"))


@pytest.mark.prover
@pytest.mark.skipif(not have_dafny(), reason=NO_DAFNY)
def test_dafny_rlimit_reaches_z3_and_running_out_is_timeout_not_fail():
    from proofgym.envs.verifiers.dafny import DafnyVerifier

    # Without a resource limit the reference verifies; the limits below are all that changes.
    assert dafny_verifier().check(DAFNY_TASK, DAFNY_TASK.reference_proof).verdict is Verdict.OK
    # 100,000 units: z3 runs out on the loop's obligations (about 10^7 verify it); the server reports them timed out.
    # 1 unit: z3 runs out before Boogie's handshake and Dafny 2.3 crashes on it; still TIMEOUT, never FAIL.
    for rlimit, said in ((100_000, "timed out"), (1, "resource limit")):
        with DafnyVerifier(audit="never", rlimit=rlimit) as verifier:
            assert f"/rlimit:{rlimit}" in verifier._base_args(DAFNY_TASK.timeout_s)  # noqa: SLF001 - the flag itself
            result = verifier.check(DAFNY_TASK, DAFNY_TASK.reference_proof)
        assert result.verdict is Verdict.TIMEOUT and result.error_category is ErrorCategory.TIMEOUT, (rlimit, result)
        assert any(said in m for m in (*result.reasons, *result.messages)), (rlimit, result)
