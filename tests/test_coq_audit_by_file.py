"""The references' kernel audit one compile per file (``CoqVerifier.audit_references``), with the real coqc/coqchk.

Suite validation audits every kept reference with ``coqc`` + ``coqchk``. Tasks cut from one file share
their prefixes, so one compile of the file up to the last of them, each reference in its place, audits
them all. These tests pin down that it agrees with the one-task audit where it settles something, and
that whatever it cannot settle for every task goes to the one-task audit instead of being decided.
"""

from __future__ import annotations

import re

import pytest

from proofgym.envs.types import Task, Verdict
from proofgym.envs.verifiers.coq import verifier as coq_verifier
from tests.conftest import close_at_session_end, requires_coq

# A module with a signature still open at the last lemma (its header is rewritten for the audit), a
# Section, and lemmas before, inside and after them.
SOURCE = """Module Type HAS_ZERO.
  Parameter z : nat.
End HAS_ZERO.

Lemma first_one : forall n, n + 0 = n.
Proof.
  induction n; simpl; auto.
Qed.

Section S.
  Variable k : nat.
  Lemma in_section : k + 0 = k.
  Proof. rewrite <- plus_n_O. reflexivity. Qed.
End S.

Module Zero <: HAS_ZERO.
  Definition z := 0.
  Lemma z_is_zero : z = 0.
  Proof. reflexivity. Qed.

  Lemma z_plus : forall n, z + n = n.
  Proof.
    intro n.  (* a comment inside the proof *)
    reflexivity.
  Qed.
"""

_LEMMA_RE = re.compile(r"^\s*Lemma (\w+)[^.]*\.", re.M)


def _tasks(source: str = SOURCE) -> list[Task]:
    """A task per lemma, cut as the extractor cuts one: the context is the file up to the statement."""
    tasks = []
    for m in _LEMMA_RE.finditer(source):
        start = m.start() + len(m.group(0)) - len(m.group(0).lstrip())
        proof_start = source.index("Proof", m.end())
        proof_end = source.index("Qed.", proof_start) + len("Qed.")
        tasks.append(Task(id=f"t.{m.group(1)}", system="coq", context=source[:start],
                          statement=source[start:m.end()], reference_proof=source[proof_start:proof_end],
                          category="P1", metadata={"file": "t.v"}))
    return tasks


@pytest.fixture(scope="module")
def verifier():
    return close_at_session_end(coq_verifier.CoqVerifier(audit="never", isolation_cache=False))


def test_tasks_of_one_file_chain_along_it_and_a_gap_in_the_file_breaks_the_chain() -> None:
    tasks = _tasks()
    chains = coq_verifier._file_chains(list(reversed(tasks)))
    assert [[t.id for t, _ in c] for c in chains] == [[t.id for t in tasks]]
    # Where each reference ends in the next context: the next context resumes the file right there.
    for (task, end), (nxt, _) in zip(chains[0], chains[0][1:], strict=False):
        assert nxt.context[:end].endswith(task.reference_proof)
    # A reference that is not the file's text (here: another proof of the second lemma) cannot be in the
    # next task's context: the chain breaks after it.
    altered = [tasks[0], Task.from_dict({**tasks[1].to_dict(), "reference_proof": "Proof. auto with arith. Qed."}),
               *tasks[2:]]
    assert [[t.id for t, _ in c] for c in coq_verifier._file_chains(altered)] == \
        [[tasks[0].id, tasks[1].id], [t.id for t in tasks[2:]]]


@pytest.mark.prover
@requires_coq
def test_one_compile_audits_every_reference_of_a_file(verifier) -> None:
    tasks = _tasks()
    before = dict(verifier.stats)
    assert verifier.audit_references(tasks) == {t.id: None for t in tasks}
    assert verifier.stats.get("audit_files", 0) == before.get("audit_files", 0) + 1
    assert verifier.stats["audits"] == before["audits"] + len(tasks)


@pytest.mark.prover
@requires_coq
def test_what_the_one_compile_cannot_settle_is_audited_task_by_task(verifier, monkeypatch) -> None:
    tasks = _tasks()
    real = coq_verifier.CoqVerifier._compile_and_check
    sources: list[str] = []

    def compile_and_check(self, source, timeout_s):
        sources.append(source)
        if len(sources) == 1:  # the shared file comes first: as if coqc had failed on it
            return 1, "Error: (injected)", 1, ""
        return real(self, source, timeout_s)

    monkeypatch.setattr(coq_verifier.CoqVerifier, "_compile_and_check", compile_and_check)
    files = verifier.stats.get("audit_files", 0)
    assert verifier.audit_references(tasks) == {t.id: None for t in tasks}
    assert verifier.stats.get("audit_files", 0) == files
    assert len(sources) == 1 + len(tasks)  # the shared file, then one per task

    # A proof term the shared run cannot place (coqc's cut of a proof not found) is not settled either.
    def miscut(self, source, timeout_s):
        rc, out, chk_rc, chk_out = real(self, source, timeout_s)
        return rc, re.sub(r"^Chars \d+ - \d+ .*$", "", out, flags=re.M), chk_rc, chk_out

    monkeypatch.setattr(coq_verifier.CoqVerifier, "_compile_and_check", miscut)
    got = verifier.audit_references(tasks)
    assert verifier.stats.get("audit_files", 0) == files
    # Each task's own audit finds the cut missing too, and says so: never OK on a cut nobody read.
    assert {r.verdict for r in got.values()} == {Verdict.CHEATING}
    assert all("cut the proof differently" in r.reasons[0] for r in got.values())


@pytest.mark.prover
@requires_coq
def test_a_reference_coqc_rejects_is_found_in_its_own_audit(verifier) -> None:
    tasks = _tasks()
    # The second lemma's reference as a suite could hold it: text coqidetop is never asked about here,
    # and coqc rejects (the Section variable is not an equation).
    bad = Task.from_dict({**tasks[1].to_dict(), "reference_proof": "Proof. exact eq_refl. Qed."})
    got = verifier.audit_references([tasks[0], bad, *tasks[2:]])
    assert got[bad.id] is not None and got[bad.id].verdict is Verdict.FAIL
    assert "coqc rejects" in got[bad.id].reasons[0]
    assert all(got[t.id] is None for t in tasks if t.id != bad.id)


@pytest.mark.prover
@requires_coq
def test_an_axiom_declared_in_the_file_after_a_task_is_not_taken_for_its_own(verifier) -> None:
    # An axiom the file declares between two tasks is the file's (trusted) text: the shared run reads it
    # as the context of the last task does, and settles both.
    source = SOURCE.replace("Section S.", "Axiom extra : 1 = 1.\n\nSection S.")
    tasks = _tasks(source)
    before = verifier.stats.get("audit_files", 0)
    assert verifier.audit_references(tasks) == {t.id: None for t in tasks}
    assert verifier.stats.get("audit_files", 0) == before + 1
