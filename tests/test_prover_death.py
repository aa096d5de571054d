"""One policy for a prover that dies under a proof (docs/verdicts.md, "A prover that dies under a proof").

A death is retried once on a fresh process; a second death is the proof's doing: ERROR with what to change
(never CHEATING, never a reward of -1); a death the retry does not repeat gives the retry's verdict.
"""

from __future__ import annotations

from proofgym.envs.rewards import RewardMap
from proofgym.envs.types import ErrorCategory, Task, Verdict
from proofgym.envs.verifiers.base import DIED_TWICE
from tests.conftest import requires_coq

TRUE = Task(id="death.true", system="coq", context="", statement="Lemma death : True.",
            reference_proof="Proof. exact I. Qed.", timeout_s=600)


@requires_coq
def test_a_coq_proof_that_kills_the_prover_twice_is_an_error_with_feedback() -> None:
    """A CPU limit of 2 s per coqidetop (SIGXCPU) and a proof that spins: it dies on the warm process and again on
    a fresh one. The wall-clock budget (600 s) is far away, so nothing but the proof ends the prover."""
    from proofgym.envs.verifiers.coq import CoqVerifier
    from proofgym.envs.verifiers.sandbox import SandboxLimits

    with CoqVerifier(limits=SandboxLimits(cpu_seconds=2), isolation_cache=False, audit="never") as verifier:
        died = verifier.check(TRUE, "Proof. do 2000000000 idtac. Qed.")
        assert verifier.stats["sessions_started"] == 2  # the warm process, then a fresh one for the retry
        after = verifier.check(TRUE, "Proof. exact I. Qed.")  # a fresh process again: the verifier goes on
    assert (died.verdict, died.error_category) == (Verdict.ERROR, ErrorCategory.RESOURCE), died
    assert died.reasons[0].startswith(DIED_TWICE) and "make it smaller" in died.reasons[0]
    assert RewardMap()(died) == 0.0
    assert after.verdict is Verdict.OK


def _dafny_dies(verifier, monkeypatch, cli_crashes: int) -> None:
    """Fakes for the mechanics, on the real Dafny verifier: its server dies under every ``verify`` request (as
    ``ProcessDied`` says), and its next ``cli_crashes`` CLI runs report a crash; the rest of each run is real."""
    from proofgym.envs.verifiers.sandbox.warm import ProcessDied

    serve, run_cli = verifier._server_request, verifier._cli
    crashes = iter(range(cli_crashes))

    def server_request(verb: str, *args, **kwargs):
        if verb == "verify":
            raise ProcessDied("fake: DafnyServer died")
        return serve(verb, *args, **kwargs)

    def cli(*args, **kwargs):
        run = run_cli(*args, **kwargs)
        if next(crashes, None) is not None:
            run.crashed = "exit 134 (unhandled exception)"
        return run

    monkeypatch.setattr(verifier, "_server_request", server_request)
    monkeypatch.setattr(verifier, "_cli", cli)


def test_a_dafny_server_death_is_retried_on_a_fresh_process(monkeypatch) -> None:
    from tests.test_dafny_common import dafny_verifier, dtask

    verifier = dafny_verifier()
    task = dtask("death", "lemma L(x: int)\n  ensures x * 0 == 0\n")
    _dafny_dies(verifier, monkeypatch, cli_crashes=0)
    fallbacks = verifier.stats["server_fallbacks"]
    retried = verifier.check(task, task.statement + "{\n}\n")
    assert retried.verdict is Verdict.OK and retried.backend == "cli", retried  # the retry's verdict
    assert verifier.stats["server_fallbacks"] == fallbacks + 1


def test_a_dafny_proof_that_kills_the_prover_twice_is_an_error_with_feedback(monkeypatch) -> None:
    from tests.test_dafny_common import dafny_verifier, dtask

    verifier = dafny_verifier()
    task = dtask("death", "lemma L(x: int)\n  ensures x * 0 == 0\n")
    _dafny_dies(verifier, monkeypatch, cli_crashes=1)
    died = verifier.check(task, task.statement + "{\n}\n")
    assert (died.verdict, died.error_category) == (Verdict.ERROR, ErrorCategory.RESOURCE), died
    assert died.reasons[0].startswith(DIED_TWICE) and "exit 134" in died.reasons[0]
    assert RewardMap()(died) == 0.0
