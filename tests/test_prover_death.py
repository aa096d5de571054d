"""One policy for a prover that dies under a proof (docs/verdicts.md, "A prover that dies under a proof").

A death is retried once on a fresh process; a second death is the proof's doing: ERROR with what to change
(never CHEATING, never a reward of -1); a death the retry does not repeat gives the retry's verdict.
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import pytest

from proofgym.envs.rewards import RewardMap
from proofgym.envs.types import CheckResult, ErrorCategory, Task, Verdict
from proofgym.envs.verifiers.base import DIED_TWICE
from proofgym.envs.verifiers.sandbox.procfs import descendants as descendants_of
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


@requires_coq
def test_a_warm_coq_session_that_dies_while_extending_its_context_is_replaced_not_reported(monkeypatch) -> None:
    """A warm session dies between two checks (as the sandbox's --die-with-parent kills it when the thread that
    started it ends): the next task of the same file, whose context extends the session's, is checked on a fresh
    coqidetop and gets its verdict, not a harness failure. The death is real (SIGKILL to the sandbox, waited for);
    only its moment is chosen, between the session's rewind and the context's first new sentence."""
    from proofgym.envs.verifiers.coq import CoqVerifier

    first = Task(id="death.a", system="coq", context="Definition a := 1.", statement="Lemma la : a = 1.",
                 reference_proof="Proof. reflexivity. Qed.", timeout_s=60)
    second = Task(id="death.b", system="coq", context="Definition a := 1.\nDefinition b := a + 1.",
                  statement="Lemma lb : b = 2.", reference_proof="Proof. reflexivity. Qed.", timeout_s=60)
    with CoqVerifier(isolation_cache=False, audit="never") as verifier:
        assert verifier.check(first, first.reference_proof).verdict is Verdict.OK
        (warm,) = verifier._sessions.values()
        ide, real_add = warm.ide, warm.ide.add

        def add_after_death(*args, **kwargs):
            os.kill(ide.pid, signal.SIGKILL)
            for _ in range(2400):  # fails loudly after about 2 minutes instead of hanging
                if not ide._warm.proc.alive():
                    break
                threading.Event().wait(0.05)
            else:
                raise AssertionError("the killed sandbox did not exit")
            monkeypatch.setattr(ide, "add", real_add)
            return real_add(*args, **kwargs)

        monkeypatch.setattr(ide, "add", add_after_death)
        started = verifier.stats["sessions_started"]
        result = verifier.check(second, second.reference_proof)
        assert verifier.stats["sessions_started"] == started + 1  # the dead session was dropped, one fresh one
    assert result.verdict is Verdict.OK, result


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


def _new_worker(root: int, known: set[int]) -> int:
    """Wait for a HOL Light worker the test has not seen: a new process whose parent is a zygote it knew before."""
    for _ in range(2400):  # fails loudly after about 2 minutes instead of hanging
        for pid in descendants_of(root, zombies=False):
            if pid not in known:
                try:
                    ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
                except (OSError, ValueError, IndexError):
                    continue  # gone meanwhile
                if ppid in known and ppid != root:
                    return pid
        threading.Event().wait(0.05)
    raise AssertionError("no HOL Light worker appeared under the zygote")


@pytest.mark.prover
def test_a_hol_light_proof_whose_worker_dies_twice_is_an_error_with_feedback(hol) -> None:
    """SIGKILL the worker of a looping attempt, then the worker of its retry (the real HOL Light server, the
    session's warm one): the second death is the one policy's ERROR, its words from ``died_under_proof``."""
    task = Task(id="death.hol", system="hol_light", context="let DEATH_ZYGOTE = 1;;", statement="`1 + 1 = 2`",
                reference_proof="ARITH_TAC", timeout_s=120)
    assert hol.check(task, "ARITH_TAC").verdict is Verdict.OK  # its zygote is loaded: what forks now is a worker
    root = hol.server("plain").proc.program_pids()[0]
    known = set(descendants_of(root))
    retries = hol.stats["retries"]
    out: dict[str, CheckResult] = {}
    thread = threading.Thread(target=lambda: out.setdefault("r", hol.check(task, "let rec f () = f () in f ()")))
    thread.start()
    for _ in range(2):  # the attempt's worker, then the retry's, forked from the same zygote
        worker = _new_worker(root, known)
        os.kill(worker, signal.SIGKILL)
        known.add(worker)
    thread.join(300)
    died = out["r"]
    assert (died.verdict, died.error_category) == (Verdict.ERROR, ErrorCategory.RESOURCE), died
    assert died.reasons[0].startswith(DIED_TWICE) and "killed by SIGKILL without a verdict" in died.reasons[0], died
    assert RewardMap()(died) == 0.0
    assert hol.stats["retries"] == retries + 1
    assert hol.check(task, "ARITH_TAC").verdict is Verdict.OK  # the zygote lives on
