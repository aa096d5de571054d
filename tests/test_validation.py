"""The one suite validator on the pool (mechanics, with a stand-in verifier): what is kept, what is dropped and why.

The real verdicts are covered where each suite validates itself (test_coq_suite, test_dafny_suite,
test_hol_light); here a stand-in says OK for a task's reference proof and for the cheats a broken
verifier would let through, so that every exclusion path is taken.
"""

from __future__ import annotations

import pytest

from proofgym.envs.errors import TaskFormatError, VerifierCrashed
from proofgym.envs.systems import CheatProbe
from proofgym.envs.types import CheckResult, Task, Verdict
from proofgym.envs.verifiers.pool import PoolClosed
from proofgym.envs.verifiers.pool.inprocess import InProcessPool
from proofgym.envs.verifiers.validation import validate_suite


def task(tid: str, reference: str = "good.", context: str = "") -> Task:
    return Task(id=tid, system="coq", context=context, statement=f"Lemma {tid} : True.", reference_proof=reference,
                category="P1", timeout_s=5)


class StandIn:
    """OK for ``good.``, CHEATING (precheck) for ``Proof. Admitted.``; ``leaky`` tasks accept the cheat."""

    system = "coq"

    def check(self, t: Task, proof: str) -> CheckResult:
        if t.context == "broken":
            raise TaskFormatError("the context does not load\nsecond line")
        if t.context == "crash":
            raise VerifierCrashed("coqidetop died")
        if proof == "Proof. Admitted.":
            verdict = Verdict.OK if t.id.startswith("leaky") else Verdict.CHEATING
            return CheckResult(verdict, ("Admitted",), backend="precheck")
        if proof == "good.":
            return CheckResult(Verdict.OK, wall_s=0.25)
        if proof == "whitelisted.":
            return CheckResult(Verdict.CHEATING, ("refused by the whitelist",), backend="precheck")
        return CheckResult(Verdict.FAIL, ("no",))

    def close(self) -> None:
        pass

    def __enter__(self) -> StandIn:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def test_every_task_is_kept_or_excluded_with_its_reason() -> None:
    tasks = [task("ok"), task("wrong", "bad."), task("leaky"), task("white", "whitelisted."),
             task("broken", context="broken"), task("crash", context="crash")]
    lines: list[str] = []
    with InProcessPool({"coq": StandIn()}, workers=2) as pool:
        checked = validate_suite(tasks, pool, concurrency=2, progress=lines.append)
    assert [t.id for t in checked.kept] == ["ok"]
    assert checked.reasons == {"wrong": "reference proof FAIL", "leaky": "Admitted accepted",
                               "white": "reference proof CHEATING",
                               "broken": "context does not load: TaskFormatError: the context does not load second line",
                               "crash": "harness failure: verifier"}
    assert sum(checked.excluded.values()) == len(tasks) - len(checked.kept)
    assert checked.false_rejected == {"white"} and checked.false_rejections == ["white: refused by the whitelist"]
    assert checked.references["ok"].wall_s == 0.25
    assert len(lines) == len(tasks) and lines[-1].startswith(f"[{len(tasks)}/{len(tasks)}]")


def test_a_probe_with_a_required_verdict_and_a_task_built_probe() -> None:
    def probes(t: Task) -> list[CheatProbe]:
        return [CheatProbe("must be cheating", text="Proof. Admitted.", must_be="CHEATING"),
                CheatProbe("built", build="tests.test_validation:built_probe")]

    with InProcessPool({"coq": StandIn()}) as pool:
        checked = validate_suite([task("ok"), task("leaky"), task("accepts_built")], pool, probes=probes,
                                 probe_verifier="the verifier")
    assert [t.id for t in checked.kept] == ["ok"]
    assert checked.reasons == {"leaky": "must be cheating was OK, not CHEATING", "accepts_built": "built accepted"}


def built_probe(t: Task, verifier: str) -> str:
    """A probe built from the task (it gets ``probe_verifier``): an OK proof for ``accepts_built``."""
    assert verifier == "the verifier"
    return "good." if t.id == "accepts_built" else "bad."


def test_a_closed_pool_refuses_checks() -> None:
    pool = InProcessPool({"coq": StandIn()})
    pool.close()
    with pytest.raises(PoolClosed):
        pool.submit(task("ok"), "good.")


class SlowOnce(StandIn):
    """A stand-in whose reference proof times out within a task's own budget and verifies within four times it
    (a machine under load); ``hopeless`` references time out whatever the budget."""

    def __init__(self) -> None:
        self.budgets: list[float] = []

    def check(self, t: Task, proof: str) -> CheckResult:
        if proof != "good.":
            return super().check(t, proof)
        self.budgets.append(t.timeout_s)
        if t.id.startswith("hopeless") or t.timeout_s < 20:
            return CheckResult(Verdict.TIMEOUT, ("time limit",))
        return CheckResult(Verdict.OK)


def test_a_reference_that_timed_out_gets_a_second_check_with_more_time() -> None:
    stand_in = SlowOnce()
    with InProcessPool({"coq": stand_in}, workers=1) as pool:
        checked = validate_suite([task("loaded"), task("hopeless")], pool)
    assert [t.id for t in checked.kept] == ["loaded"]
    assert checked.kept[0].timeout_s == 5  # kept with its own budget: the retry only rules out the load
    assert checked.reasons == {"hopeless": "reference proof TIMEOUT"}
    assert stand_in.budgets == [5, 20, 5, 20]
