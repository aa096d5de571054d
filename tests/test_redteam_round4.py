"""Red team, round 4: the verifier mechanisms added for speed (the Coq isolation cache's segment chain, environment
baselines kept on disk, the allow-list computed from a task's reference) against the real Coq.

Each test pins a verdict the serial, uncached verifier gives (or the file's own meaning): the holes found in this
round fail without their fixes; the rest guard a rule nobody had tested yet.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from proofgym.envs.types import Task, Verdict
from proofgym.envs.verifiers.coq.isolation import Plan, plan
from tests.conftest import requires_coq


def _task(tid: str, context: str, statement: str, reference: str, **metadata: object) -> Task:
    return Task(id=f"rt4.{tid}", system="coq", context=context, statement=statement, reference_proof=reference,
                category="P1", timeout_s=20, metadata=dict(metadata))


# A notation of the first segment, shadowed in the file by a later import (a module of the context's own).
NOTATION_CHAIN = ("Notation \"'kk'\" := 1.\nModule M.\nNotation \"'kk'\" := 2.\nEnd M.\nImport M.\n"
                  "Definition z := 0.\n")


def test_a_later_segment_does_not_re_export_an_earlier_segments_notation():
    """A later segment's source writes the earlier segments' replayed notations and scopes Local (fast tier)."""
    p = plan(NOTATION_CHAIN, coq_version="8.16.1", args=())
    assert isinstance(p, Plan) and p.whole and len(p.links) == 1
    assert "Local Notation \"'kk'\" := 1." in p.links[0].source
    assert "\nNotation \"'kk'\" := 1." in "\n" + p.tail  # the session itself still replays it as written


@pytest.mark.prover
@requires_coq
def test_an_earlier_segments_notation_does_not_come_back_over_a_later_import(tmp_path: Path):
    """Hole: importing a later segment re-exported the first segment's notation over the file's import (a statement
    false in the file was OK)."""
    from proofgym.envs.verifiers.coq import CoqVerifier

    tasks = [_task(f"kk{n}", NOTATION_CHAIN, f"Lemma t : kk = {n}.", "Proof. reflexivity. Qed.", allowed_axioms=[])
             for n in (1, 2)]
    with CoqVerifier(audit="never", isolation_cache=False) as plain:
        expected = [plain.check(t, t.reference_proof).verdict for t in tasks]
    assert expected == [Verdict.FAIL, Verdict.OK]  # after `Import M`, kk is M's notation
    with CoqVerifier(audit="never", isolation_dir=str(tmp_path)) as cached:
        assert [cached.check(t, t.reference_proof).verdict for t in tasks] == expected
        assert cached.isolation.stats.get("loaded") == 1  # the chain was loaded, not replayed


F = "Definition f (n : nat) := match n with 0 => 0 | S m => S m end.\n"
# A replayed sentence (after the cached module is imported) that something not replayed overrode in the file: a
# Global command in a closed section, an Arguments of a closed module (global there).
OVERRIDDEN = {
    "section_global": F + "Opaque f.\nSection S.\nGlobal Transparent f.\nEnd S.\nDefinition z := 0.\n",
    "module_arguments": F + "Arguments f n : simpl never.\nModule M.\nArguments f n : simpl nomatch.\nEnd M.\n"
                            "Import M.\nDefinition z := 0.\n",
}


def test_a_replayed_sentence_that_a_closed_block_overrides_is_not_cached():
    """Fast tier: such a context falls back to the replay (it is in none of coq-stdlib's contexts)."""
    for context in OVERRIDDEN.values():
        assert "outlives" in str(plan(context, coq_version="8.16.1", args=())), context
    # Local in the closed block, or nothing replayed of its kind before it: cached as before.
    assert isinstance(plan(F + "Module M.\nArguments f n : simpl nomatch.\nEnd M.\nDefinition z := 0.\n",
                           coq_version="8.16.1", args=()), Plan)
    assert isinstance(plan(F + "Opaque f.\nSection S.\nTransparent f.\nEnd S.\nDefinition z := 0.\n",
                           coq_version="8.16.1", args=()), Plan)


@pytest.mark.prover
@requires_coq
@pytest.mark.parametrize("context", list(OVERRIDDEN.values()), ids=list(OVERRIDDEN))
def test_a_replayed_sentence_does_not_win_over_what_overrode_it_in_the_file(context: str, tmp_path: Path):
    """Hole: the cache replayed `Opaque f` / `Arguments f : simpl never` after the module that a later Global Transparent
    or a module's Arguments had overridden in the file, so an honest `simpl` proof FAILed."""
    from proofgym.envs.verifiers.coq import CoqVerifier

    task = _task("overridden", context, "Lemma t : f 1 = 1.", "Proof. progress simpl. reflexivity. Qed.",
                 allowed_axioms=[])
    with CoqVerifier(audit="never", isolation_cache=False) as plain:
        assert plain.check(task, task.reference_proof).verdict is Verdict.OK
    with CoqVerifier(audit="never", isolation_dir=str(tmp_path)) as cached:
        assert cached.check(task, task.reference_proof).verdict is Verdict.OK


def _library(folder: Path, text: str) -> None:
    (folder / "A.v").write_text(text, encoding="utf-8")
    subprocess.run(["coqc", "-Q", ".", "RT4Lib", "A.v"], cwd=folder, check=True, capture_output=True)


@pytest.mark.prover
@requires_coq
@pytest.mark.parametrize("context", ["Require Import RT4Lib.A.\nSection S.\nVariable n : nat.\n",
                                     "Require Import RT4Lib.A.\nDefinition y := 0.\n"], ids=["baseline", "whole"])
def test_a_library_rebuilt_in_place_does_not_reuse_a_stale_environment_baseline(context: str, tmp_path: Path):
    """Hole: a baseline kept on disk outlived a rebuild of a library on the load path, so Print Assumptions was
    skipped and a proof by the library's new Admitted lemma was OK."""
    from proofgym.envs.verifiers.coq import CoqVerifier

    lib = tmp_path / "lib"
    lib.mkdir()
    _library(lib, "Definition x := 0.\nLemma helper : x = 0. Proof. reflexivity. Qed.\n")
    honest = _task("lib_ok", context, "Lemma t : x = 0.", "Proof. exact helper. Qed.", allowed_axioms=[])
    cheat = _task("lib_cheat", context, "Lemma t2 : 1 = 2.", "Proof. Admitted.", allowed_axioms=[])
    kwargs = {"audit": "never", "isolation_dir": str(tmp_path / "iso"), "extra_args": ("-Q", str(lib), "RT4Lib")}
    with CoqVerifier(**kwargs) as v:  # two OKs: the environment's summary is computed and kept
        assert [v.check(honest, honest.reference_proof).verdict for _ in range(2)] == [Verdict.OK] * 2
    _library(lib, "Definition x := 0.\nLemma helper : x = 0. Proof. reflexivity. Qed.\nLemma bad : 1 = 2. Admitted.\n")
    with CoqVerifier(**kwargs) as v:
        assert v.check(honest, honest.reference_proof).verdict is Verdict.OK
        result = v.check(cheat, "Proof. exact bad. Qed.")
    assert result.verdict is Verdict.CHEATING and "RT4Lib.A.bad" in " ".join(result.reasons), result


@pytest.mark.prover
@requires_coq
def test_two_versions_of_a_task_with_one_id_do_not_share_an_allow_list():
    """Hole: the allow-list computed from a reference was kept by task id, so a version of the task whose reference
    needs classic made classic OK in another version whose reference needs no axiom."""
    from proofgym.envs.verifiers.coq import CoqVerifier

    context = "Require Import Classical.\n"
    needs_classic = Task(id="rt4.same", system="coq", context=context, statement="Lemma em (P : Prop) : P \\/ ~ P.",
                         reference_proof="Proof. apply classic. Qed.", category="P1", timeout_s=20)
    intuitionistic = Task(id="rt4.same", system="coq", context=context, statement="Lemma nn (P : Prop) : P -> ~ ~ P.",
                          reference_proof="Proof. intros p np. exact (np p). Qed.", category="P1", timeout_s=20)
    with CoqVerifier(audit="never", isolation_cache=False) as v:
        assert v.check(needs_classic, needs_classic.reference_proof).verdict is Verdict.OK
        result = v.check(intuitionistic, "Proof. destruct (classic P); tauto. Qed.")
        assert v.check(intuitionistic, intuitionistic.reference_proof).verdict is Verdict.OK
    assert result.verdict is Verdict.CHEATING and "classic" in " ".join(result.reasons), result


@pytest.mark.prover
@requires_coq
def test_a_proof_naming_a_context_lemma_by_its_top_name_has_the_uncached_verdict(tmp_path: Path):
    """Fairness: `exact Top.f1` (the replayed context's full name of its own lemma) must not FAIL only because the
    context came from the cache."""
    from proofgym.envs.verifiers.coq import CoqVerifier

    task = _task("top", F + "Lemma f1 : f 1 = 1. Proof. reflexivity. Qed.\n", "Lemma t : f 1 = 1.",
                 "Proof. exact Top.f1. Qed.", allowed_axioms=[])
    with CoqVerifier(audit="never", isolation_cache=False) as plain:
        assert plain.check(task, task.reference_proof).verdict is Verdict.OK
    with CoqVerifier(audit="never", isolation_dir=str(tmp_path)) as cached:
        assert cached.check(task, "Proof. exact f1. Qed.").verdict is Verdict.OK
        assert cached.isolation.stats["builds"] + cached.isolation.stats["hits"] >= 1, "the context was cached"
        assert cached.check(task, task.reference_proof).verdict is Verdict.OK  # a replayed session of its own
        assert cached.check(task, "Proof. exact f1. Qed.").verdict is Verdict.OK  # the cached one still serves
        # The replayed session keeps every rule: an axiom of the context named by its Top. name is still refused.
        axiom = _task("top_axiom", F + "Axiom f1 : f 1 = 1.\n", "Lemma t : f 1 = 1.", "Proof. reflexivity. Qed.",
                      allowed_axioms=[])
        result = cached.check(axiom, "Proof. exact Top.f1. Qed.")
        assert result.verdict is Verdict.CHEATING and "f1" in " ".join(result.reasons), result


def test_the_verdict_cache_key_covers_what_decides_a_verdict():
    """A pool's repeat is answered from its verdict cache only for the same task in every field (its allow-list,
    context, deadline), the same proof text and the same verifier settings (fast tier)."""
    from dataclasses import replace

    from proofgym.envs.verifiers.pool.cache import cache_key

    task = _task("vc", "Require Import Classical.\n", "Lemma em (P : Prop) : P \\/ ~ P.", "Proof. apply classic. Qed.")
    proof, settings = "Proof. apply classic. Qed.", repr(("coq", [("audit", "never")]))
    key = cache_key(task, proof, settings)
    assert cache_key(replace(task), proof, settings) == key
    others = [replace(task, metadata={"allowed_axioms": ["Coq.Logic.Classical_Prop.classic"]}),
              replace(task, context="Require Import Classical.\nSection S.\n"), replace(task, timeout_s=5)]
    assert len({key, *(cache_key(t, proof, settings) for t in others)}) == 4
    assert cache_key(task, proof + " ", settings) != key
    assert cache_key(task, proof, repr(("coq", [("audit", "always")]))) != key


@pytest.mark.prover
def test_a_dafny_budget_that_runs_out_is_timeout_never_ok_nor_cheating():
    """Dafny's rlimit: an honest program whose helper runs out of z3's budget is TIMEOUT (not a dropped obligation
    called CHEATING), and a false helper that runs out never makes the target OK."""
    from tests.test_dafny_common import NO_DAFNY, have_dafny

    if not have_dafny():
        pytest.skip(NO_DAFNY)
    from proofgym.envs.verifiers.dafny import DafnyVerifier
    from tests.test_dafny_redteam import FALSE
    from tests.test_deterministic_budgets import DAFNY_TASK

    helper = "lemma Helper(n: nat)\n  ensures n * (n + 1) / 2 >= 0\n{\n}\n"
    false_helper = "lemma Helper()\n  ensures false\n{\n}\nlemma Impossible()\n  ensures false\n{\n  Helper();\n}\n"
    with DafnyVerifier(audit="never", rlimit=100_000) as verifier:
        honest = verifier.check(DAFNY_TASK, helper + DAFNY_TASK.reference_proof)
        cheat = verifier.check(FALSE, false_helper)
    assert honest.verdict is Verdict.TIMEOUT, honest
    assert cheat.verdict is not Verdict.OK, cheat
