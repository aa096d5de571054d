"""Primitive integers (issue 26): a library proof that rests on kernel primitives and on the axioms ``Uint63.v``
states as their specification is honest, and the allow-list its reference proof gives names both by full name.

Before the fix ``proofgym build coq-stdlib`` excluded 8 of 360 stdlib references (all ``Uint63``/``Sint63`` lemmas)
as "reference proof CHEATING": primitives were never put on a reference's allow-list, ``Uint63``'s own axioms were
called primitives, and an axiom printed as ``lor`` (a keyword of the library's notations, so ``About lor.`` does
not parse) "could not be resolved". ``Admitted`` and an axiom the reference does not need stay CHEATING.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from proofgym.envs.types import Task, Verdict

pytestmark = pytest.mark.prover

UINT63 = "Require Import Coq.Numbers.Cyclic.Int63.Uint63.\n"
SINT63 = "Require Import Coq.Numbers.Cyclic.Int63.Sint63.\n"
PRIM = "Coq.Numbers.Cyclic.Int63.PrimInt63."
SPEC = "Coq.Numbers.Cyclic.Int63.Uint63."


def _task(tid: str, context: str, statement: str, reference: str) -> Task:
    return Task(id=f"prim.{tid}", system="coq", context=context, statement=statement, reference_proof=reference,
                category="P1", timeout_s=30)


EQB = _task("eqb", UINT63, "Lemma eqb_false' : forall x y : int, x <> y -> (x =? y)%uint63 = false.",
            "Proof. intros x y; rewrite eqb_false_spec; trivial. Qed.")
# Sint63.to_Z_inj rests on PrimInt63.lor, which Print Assumptions prints as `lor`: a keyword here.
TO_Z = _task("to_z", SINT63, "Lemma to_Z_inj' (x y : int) : Sint63.to_Z x = Sint63.to_Z y -> x = y.",
             "Proof. exact (Sint63.to_Z_inj x y). Qed.")


def test_the_allow_list_of_a_primitive_integer_proof_names_primitives_and_library_axioms(coq_verifier) -> None:
    allowed = coq_verifier.allowed_axioms(EQB)
    assert {PRIM + "eqb", PRIM + "int", SPEC + "eqb_correct", SPEC + "eqb_refl"} <= allowed, allowed
    assert {PRIM + "lor", SPEC + "lor_spec"} <= coq_verifier.allowed_axioms(TO_Z)


@pytest.mark.parametrize("task", [EQB, TO_Z], ids=["uint63", "sint63-lor"])
def test_a_primitive_integer_reference_proof_is_ok(coq_verifier, task: Task) -> None:
    result = coq_verifier.check(task, task.reference_proof)
    assert result.verdict is Verdict.OK, (result.reasons, result.messages)


@pytest.mark.parametrize("task", [EQB, TO_Z], ids=["uint63", "sint63-lor"])
def test_admitted_beside_it_stays_cheating(coq_verifier, task: Task) -> None:
    result = coq_verifier.check(task, "Proof. Admitted.")
    assert result.verdict is Verdict.CHEATING, result


def test_a_library_axiom_the_task_does_not_allow_is_cheating_and_named_an_axiom(coq_verifier) -> None:
    """Uint63.of_to_Z is an axiom of the library, not a primitive: outside the allow-list it is CHEATING, and the
    reason calls it an axiom (it said "uses primitive")."""
    task = Task.from_dict({**_task("of_to_z", UINT63, "Lemma of_to_Z' (x : int) : of_Z (to_Z x) = x.",
                                   "Proof. Admitted.").to_dict(), "metadata": {"allowed_axioms": []}})
    result = coq_verifier.check(task, "Proof. apply of_to_Z. Qed.")
    assert result.verdict is Verdict.CHEATING, result
    assert any(f"axiom {SPEC}of_to_Z outside the allow-list" in r for r in result.reasons), result.reasons


def test_the_build_lists_every_exclusion_by_id_and_never_calls_it_cheating() -> None:
    """A suite build validates a primitive-integer lemma into the suite, and lists a reference that relies on an axiom
    its task does not allow by id, as "relies on", never as "reference proof CHEATING" (issue 26)."""
    from proofgym.envs.tasks.build import BuildReport, validate_tasks

    classic = Task(id="prim.needs_classic", system="coq", context="Require Import Coq.Logic.Classical.\n",
                   statement="Lemma em' (P : Prop) : P \\/ ~ P.", reference_proof="Proof. apply classic. Qed.",
                   category="P1", timeout_s=30, metadata={"allowed_axioms": []})
    exclusions: dict[str, str] = {}
    kept, excluded, _ = validate_tasks([EQB, classic], workers=1, progress=False, exclusions=exclusions)
    assert [t.id for t in kept] == [EQB.id], exclusions
    assert set(exclusions) == {classic.id}
    reason = exclusions[classic.id]
    assert reason.startswith("excluded: relies on what the task does not allow") and "Classical_Prop.classic" in reason, \
        reason
    assert "CHEATING" not in reason and dict(excluded) == {"relies on what the task does not allow": 1}, excluded
    report = BuildReport("prim", out=Path("prim.jsonl"), exclusions=exclusions)
    assert f"  {classic.id}: {reason}" in report.render().splitlines()
