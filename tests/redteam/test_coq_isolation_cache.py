"""Red team, Coq: the mechanisms added for speed never change a verdict. The isolation cache's segment chain,
environment baselines (on disk and in memory), the allow-list computed from a task's reference, and names that
reach into the cache (``Top.``, the cache's module name) each give the serial, uncached verifier's verdict; a
baseline or reference that times out is a harness failure or keeps its honest verdict, never CHEATING.

Moved from the red-team rounds (tests/redteam/ROUNDS.md: what each round found and fixed):
rounds 4, 5 and 6 (each round's helpers keep their task-id prefix; where two rounds had one name,
the later one carries _r<round>).
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


ADD_0 = "Lemma t (n : nat) : n + 0 = n."
IND = "induction n; simpl; congruence."


def _coq(tid: str, statement: str = ADD_0, context: str = "") -> Task:
    return Task(id=f"rt5.{tid}", system="coq", context=context, statement=statement,
                reference_proof=f"Proof. {IND} Qed.", category="P1", timeout_s=20, metadata={"allowed_axioms": []})


def _library_r5(folder: Path, text: str) -> None:
    (folder / "A.v").write_text(text, encoding="utf-8")
    subprocess.run(["coqc", "-Q", ".", "RT5Lib", "A.v"], cwd=folder, check=True, capture_output=True)


@pytest.mark.prover
@requires_coq
@pytest.mark.parametrize("cached", [False, True], ids=["replayed", "isolation-cache"])
def test_a_library_rebuilt_while_the_verifier_runs_does_not_keep_a_stale_baseline(cached: bool, tmp_path: Path):
    """Was a hole (fixed this round): `_baseline_cache` is keyed by the context text alone and `IsolationCache._load_path_libraries` is read
    once per process, so after an in-place rebuild that adds an Admitted lemma, the next session (here: after the
    context's session was evicted) skips Print Assumptions, and `exact bad` proves 1 = 2: OK, not CHEATING.
    Round 4 fixed the same staleness across two verifiers (on disk); within one it is still open."""
    from proofgym.envs.verifiers.coq import CoqVerifier

    lib = tmp_path / "lib"
    lib.mkdir()
    _library_r5(lib, "Definition x := 0.\nLemma helper : x = 0. Proof. reflexivity. Qed.\n")
    context = "Require Import RT5Lib.A.\nDefinition y := 0.\n"
    honest = _coq("lib_ok", "Lemma t : x = 0.", context)
    cheat = _coq("lib_cheat", "Lemma t2 : 1 = 2.", context)
    other = _coq("other", "Lemma u : 1 = 1.", "Definition other := 1.\n")
    where = {"isolation_dir": str(tmp_path / "iso")} if cached else {"isolation_cache": False}
    with CoqVerifier(audit="never", max_sessions=1, extra_args=("-Q", str(lib), "RT5Lib"), **where) as v:
        assert [v.check(honest, "Proof. exact helper. Qed.").verdict for _ in range(2)] == [Verdict.OK] * 2
        _library_r5(lib, "Definition x := 0.\nLemma helper : x = 0. Proof. reflexivity. Qed.\n"
                         "Lemma bad : 1 = 2. Admitted.\n")
        assert v.check(other, "Proof. reflexivity. Qed.").verdict is Verdict.OK  # evicts the context's session
        result = v.check(cheat, "Proof. exact bad. Qed.")
    assert result.verdict is Verdict.CHEATING and "bad" in " ".join(result.reasons), result


@pytest.mark.prover
@requires_coq
def test_a_reference_that_times_out_does_not_make_an_honest_proof_cheating():
    """Was a hole (fixed this round): without ``allowed_axioms`` the allow-list is what the reference proof needs; a reference that runs past
    ``timeout_s`` (here: forever; on a loaded machine, a slow one once) gave an empty list, kept by
    ``_allowed_cache``, so every later proof by ``classic`` is CHEATING (-1) for the verifier's life (and the pool's
    verdict cache keeps those). Not knowing the allow-list is a harness failure (or a task error), never a cheat."""
    from proofgym.envs.errors import VerifierError
    from proofgym.envs.verifiers.coq import CoqVerifier

    task = Task(id="rt5.allow", system="coq", context="Require Import Classical.\n",
                statement="Lemma em (P : Prop) : P \\/ ~ P.",
                reference_proof="Proof. let rec loop := idtac; loop in loop. apply classic. Qed.",
                category="P1", timeout_s=3)
    with CoqVerifier(audit="never", isolation_cache=False) as v:
        try:
            result = v.check(task, "Proof. apply classic. Qed.")
        except VerifierError:
            return  # a harness failure: no reward, and nothing kept
        assert result.verdict is not Verdict.CHEATING, result


@pytest.mark.prover
@requires_coq
def test_a_top_name_after_an_empty_context_task_has_the_uncached_verdict(tmp_path: Path):
    """Was a hole (fixed this round): round 4's replayed sessions are keyed ``NUL replayed NUL + context``, and the session of the empty
    context (key "") is a prefix of every key: after any task with no context, a proof writing ``Top.`` made the
    verifier extend that session with the key's NUL bytes, and the check raised ContextLoadError (a task error)."""
    from proofgym.envs.verifiers.coq import CoqVerifier

    f = "Definition f (n : nat) := match n with 0 => 0 | S m => S m end.\n"
    top = _coq("top", "Lemma t : f 1 = 1.", f + "Lemma f1 : f 1 = 1. Proof. reflexivity. Qed.\n")
    with CoqVerifier(audit="never", isolation_dir=str(tmp_path)) as v:
        assert v.check(_coq("empty", "Lemma t0 : 1 = 1."), "Proof. reflexivity. Qed.").verdict is Verdict.OK
        assert v.check(top, "Proof. exact Top.f1. Qed.").verdict is Verdict.OK


@pytest.mark.prover
@requires_coq
def test_an_environment_baseline_that_times_out_is_a_harness_failure_not_cheating(monkeypatch: pytest.MonkeyPatch):
    """Was a hole (fixed this round): a short allow-list name (``classic``) is only allowed when it names one axiom
    of the environment, which the context's standalone compile tells; when that compile ran past its deadline (a
    loaded machine), the check failed closed as CHEATING, and the pool's verdict cache kept it. Not knowing the
    environment is a harness failure: no reward, nothing cached."""
    from proofgym.envs.errors import VerifierError
    from proofgym.envs.verifiers.coq import CoqVerifier

    task = Task(id="rt5.baseline", system="coq", context="Require Import Classical.\n",
                statement="Lemma em (P : Prop) : P \\/ ~ P.", reference_proof="Proof. apply classic. Qed.",
                category="P1", metadata={"allowed_axioms": ["classic"]})
    with CoqVerifier(audit="never", isolation_cache=False) as v:
        monkeypatch.setattr(v, "_compile_and_check", lambda source, timeout_s: None)  # what a timeout returns
        with pytest.raises(VerifierError, match="context_timeout_s"):
            v.check(task, "Proof. apply classic. Qed.")
        monkeypatch.undo()
        assert v.check(task, "Proof. apply classic. Qed.").verdict is Verdict.OK  # and nothing wrong was kept


def _coq_r6(tid: str, statement: str = ADD_0, context: str = "") -> Task:
    return Task(id=f"rt6.{tid}", system="coq", context=context, statement=statement,
                reference_proof=f"Proof. {IND} Qed.", category="P1", timeout_s=20, metadata={"allowed_axioms": []})


@pytest.mark.prover
@requires_coq
@pytest.mark.parametrize("prefix", ["", "PGIso."])
def test_the_isolation_cache_module_name_gets_the_uncached_verdict(tmp_path, prefix: str):
    """Was a hole (fixed): a context served from the isolation cache is the module ``PGIso.C<key>``, which a
    replayed (uncached) context has no trace of, so ``exact C<key>.f1`` was OK with the cache and FAIL without:
    a verdict that depended on the cache (and on which pool worker had the context cached). Such a proof now
    runs on the replayed session, as ``Top.`` names do (round 4), and gets the uncached verdict everywhere."""
    from proofgym.envs.verifiers.coq import CoqVerifier

    context = "Definition f (n : nat) := match n with 0 => 0 | S m => S m end.\n" \
              "Lemma f1 : f 1 = 1. Proof. reflexivity. Qed.\n"
    task = _coq_r6("iso_name", "Lemma t : f 1 = 1.", context)
    verdicts = []
    for where in ({"isolation_dir": str(tmp_path)}, {"isolation_cache": False}):
        with CoqVerifier(audit="never", **where) as v:
            assert v.check(task, "Proof. exact f1. Qed.").verdict is Verdict.OK
            if v.isolation is not None:
                module = v.isolation.plan(v._with_prelude(task).context).module
            verdicts.append(v.check(task, f"Proof. exact {prefix}{module}.f1. Qed.").verdict)
    assert verdicts == [Verdict.FAIL, Verdict.FAIL]
