"""The Coq isolation cache (coq/isolation.py): what can be cached, and the same verdicts with and without it.

The fast tier checks the plan (what is compiled, what is replayed, what falls back). The prover tier runs
the real coqc/coqidetop: each task's verdicts with the cache (built, then loaded) must be those without it,
cheats included; builders of one key race; a truncated ``.vo`` is rebuilt, not loaded.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from proofgym.envs.types import Task, Verdict
from proofgym.envs.verifiers.coq import isolation
from proofgym.envs.verifiers.coq.isolation import Plan, plan, session_name
from tests.conftest import requires_coq


def _plan(context: str) -> Plan | str:
    return plan(context, coq_version="8.16.1", args=())


# -- fast tier: the plan ------------------------------------------------------------------------------


def test_a_closed_context_is_cached_whole_and_its_lost_effects_are_replayed():
    context = ("Require Import Arith.\nLocal Open Scope nat_scope.\nImplicit Types n : nat.\n"
               "Lemma a (n : nat) : n = n. Proof. reflexivity. Qed.\n#[local] Hint Resolve a : core.\n"
               "Hint Resolve a : core.\nNotation twice x := (x + x).\nSet Implicit Arguments.\n")
    p = _plan(context)
    assert isinstance(p, Plan) and p.prefix == context and p.whole
    run = [s.code for s in p.sentences()]
    # The leading Require Import runs before the module is imported (its names must not shadow the
    # context's); then the scope, implicit types, local hint, notation and option come back; the lemma,
    # its proof and the global hint (which the .vo exports) do not.
    assert run == [f"Require PGIso.{p.module}.", "Require Import Arith.", f"Import PGIso.{p.module}.",
                   "Local Open Scope nat_scope.", "Implicit Types n : nat.", "#[local] Hint Resolve a : core.",
                   "Notation twice x := (x + x).", "Set Implicit Arguments."]


def test_an_open_section_or_a_module_import_is_replayed_after_the_cached_prefix():
    head = "Require Export List.\nLemma b : True. Proof. exact I. Qed.\n"
    for rest in ("Section S.\nVariable A : Type.\nLet l := @nil A.\n", "Module Import M.\nDefinition y := 1.\nEnd M.\n"):
        p = _plan(head + rest)
        assert isinstance(p, Plan) and not p.whole and p.tail.endswith(rest)  # run verbatim, as without the cache
        assert not p.links
        # The module does not re-export List (importing it would reopen List over the context's names).
        assert p.prefix == head.replace("Require Export", "Require Import") and p.lead == "Require Export List."


def test_a_later_import_cuts_the_context_into_a_chain_of_segments():
    """Each import after the leading run starts a new segment: the session imports the segments in the file's order
    with the file's imports run verbatim between them; a later segment is compiled after what the session runs
    before it (Exports as Imports); an open Section at the end is replayed verbatim."""
    context = ("Require Export List.\nDefinition a := 1.\nRequire Export Bool.\nImport ListNotations.\n"
               "Definition b := 2.\nLocal Open Scope list_scope.\nRequire Import Arith.\nDefinition c := 3.\n"
               "Section S.\nVariable n : nat.\n")
    p = _plan(context)
    assert isinstance(p, Plan) and not p.whole and len(p.links) == 2
    first, second, third = (f"PGIso.{s.module}" for s in p.segments)
    assert [s.code for s in p.sentences()] == [
        f"Require {first}.", "Require Export List.", f"Import {first}.",
        "Require Export Bool.", "Import ListNotations.", f"Require {second}.", f"Import {second}.",
        "Local Open Scope list_scope.", "Require Import Arith.", f"Require {third}.", f"Import {third}.",
        "Section S.", "Variable n : nat."]
    assert p.links[0].source.split("\n")[:5] == [f"Require {first}.", "Require Import List.", f"Import {first}.", "",
                                                 "Require Import Bool."]
    assert p.links[1].source.endswith("Require Import Arith.\nDefinition c := 3.\n")
    assert f"Require {second}." in p.links[1].source and "Local Open Scope list_scope." in p.links[1].source
    # A local declaration after an import stops the chain there: the rest is replayed.
    local = _plan("Require Import List.\nDefinition a := 1.\nRequire Import Bool.\nLocal Definition d := 4.\n")
    assert isinstance(local, Plan) and not local.links and local.tail.endswith("Local Definition d := 4.\n")


def test_local_declarations_and_nothing_to_cache_fall_back():
    for local in ("Local Definition y := 2.\n", "#[local] Instance i : Inhabited nat := {| inhabitant := 0 |}.\n",
                  "Let z := 3.\n"):
        assert isinstance(_plan("Require Import Arith.\nDefinition w := 0.\n" + local), str), local
    assert isinstance(_plan("Section S.\nVariable n : nat.\n"), str)  # nothing before the open block
    assert isinstance(_plan("Require Import Arith.\n"), str)  # nothing but libraries


def test_the_key_is_the_prefix_the_coq_version_and_the_flags():
    context = "Definition x := 1.\n"
    keys = {plan(context, coq_version=v, args=a).key for v, a in (("8.16.1", ()), ("8.17.0", ()),  # type: ignore
                                                                   ("8.16.1", ("-Q", "/l", "L")))}
    assert len(keys) == 3
    assert _plan(context).key != _plan(context + "Definition y := 2.\n").key  # type: ignore[union-attr]
    same_prefix = ("Definition x := 1.\nSection S.\n", "Definition x := 1.\nSection S.\nVariable v : nat.\n")
    assert _plan(same_prefix[0]).key == _plan(same_prefix[1]).key  # type: ignore[union-attr]


def test_session_names_map_back_to_top():
    assert session_name("PGIso.C" + "a" * 40 + ".M.bad") == "Top.M.bad"
    assert session_name("Coq.Logic.Classical_Prop.classic") == "Coq.Logic.Classical_Prop.classic"
    assert session_name("PGIso.Cshort.bad") == "PGIso.Cshort.bad"


# -- prover tier: the same verdicts ---------------------------------------------------------------------

CONTEXTS = {
    "scopes_hints": ("Require Import Arith.\nLocal Open Scope nat_scope.\nImplicit Types n m : nat.\n"
                     "Lemma helper n : n + 0 = n. Proof. induction n; simpl; auto. Qed.\n"
                     "#[local] Hint Resolve helper : core.\nLocal Notation dbl x := (x + x).\n"),
    "section_open": ("Require Import List.\nLemma pre : True. Proof. exact I. Qed.\n"
                     "Section S.\nVariable A : Type.\nImplicit Type l : list A.\n"),
    "module_import": "Definition two := 2.\nModule Import M.\nDefinition three := 3.\nEnd M.\n",
    # A library name shadowed by the context's own (as ZMicromega's eval_nformula), then a later import.
    "shadowing": ("Require Import List.\nDefinition app := 7.\nLemma app7 : app = 7. Proof. reflexivity. Qed.\n"
                  "Require Import Bool.\nDefinition negb := 0.\n"),
    # A mid-file import that shadows a name the context defined before it (a chain of two segments).
    "import_shadows": ("Require Import List.\nDefinition eqb := 0.\nRequire Import Bool.\n"
                       "Definition t := eqb true false.\n"),
    "axiom_in_context": "Axiom bad : 1 = 2.\nLemma ok0 : True. Proof. exact I. Qed.\n",
    "leak": "Require Import List.\nDefinition pad := 0.\n",
}


def _task(tid: str, context: str, statement: str, reference: str, **metadata: object) -> Task:
    return Task(id=f"iso.{tid}", system="coq", context=context, statement=statement, reference_proof=reference,
                category="P1", timeout_s=20, metadata=dict(metadata))


TASKS = [
    (_task("hint", CONTEXTS["scopes_hints"], "Lemma t1 n : n + 0 + 0 = n.", "Proof. rewrite !helper. auto. Qed."),
     ["Proof. rewrite !helper. auto. Qed.", "Proof. auto. Qed.", "Proof. Admitted.", "Proof. exact (dbl 0). Qed.",
      "Proof. intros. reflexivity. Qed."]),
    (_task("section", CONTEXTS["section_open"], "Lemma t2 l : l ++ nil = l.", "Proof. apply app_nil_r. Qed."),
     ["Proof. apply app_nil_r. Qed.", "Proof. Admitted.", "Proof. reflexivity. Qed."]),
    (_task("module", CONTEXTS["module_import"], "Lemma t3 : three = 3.", "Proof. reflexivity. Qed."),
     ["Proof. reflexivity. Qed.", "Proof. exact (eq_refl 4). Qed.", "Proof. Admitted.", "Proof. exact I. Qed."]),
    (_task("shadow", CONTEXTS["shadowing"], "Lemma t5 : app + negb = 7.", "Proof. reflexivity. Qed."),
     ["Proof. reflexivity. Qed.", "Proof. Admitted.", "Proof. exact (eq_refl 8). Qed."]),
    (_task("import_shadows", CONTEXTS["import_shadows"], "Lemma t8 : eqb t false = true.", "Proof. reflexivity. Qed."),
     ["Proof. reflexivity. Qed.", "Proof. Admitted.", "Proof. exact (eq_refl false). Qed.",
      "Proof. unfold t. reflexivity. Qed."]),
    # An axiom of the context that the task does not allow: CHEATING, seen by Print Assumptions in the .vo.
    (_task("axiom", CONTEXTS["axiom_in_context"], "Lemma t4 : 1 = 2.", "Proof. Admitted."),
     ["Proof. exact bad. Qed.", "Proof. Axiom b2 : 1 = 2. exact b2. Qed.", "Proof. reflexivity. Qed."]),
    # The original lemma, loaded through the cached module's Require: the leak rule still sees it.
    (_task("leak", CONTEXTS["leak"], "Lemma app_nil_r (A : Type) (l : list A) : l ++ nil = l.",
           "Proof. induction l; simpl; [reflexivity | rewrite IHl; reflexivity]. Qed.",
           qualid="Coq.Lists.List.app_nil_r"),
     ["Proof. induction l; simpl; [reflexivity | rewrite IHl; reflexivity]. Qed.",
      "Proof. exact (List.app_nil_r l). Qed.", "Proof. apply List.app_nil_r. Qed."]),
]


def _verdicts(verifier, task: Task, proofs: list[str]) -> list[tuple[Verdict, tuple[str, ...]]]:
    return [(r.verdict, r.reasons) for r in (verifier.check(task, p) for p in proofs)]


@pytest.mark.prover
@requires_coq
@pytest.mark.parametrize("task, proofs", TASKS, ids=[t.id for t, _ in TASKS])
def test_same_verdicts_with_and_without_the_cache(task: Task, proofs: list[str], tmp_path: Path):
    from proofgym.envs.verifiers.coq import CoqVerifier

    with CoqVerifier(audit="never", isolation_cache=False) as plain:
        expected = _verdicts(plain, task, proofs)
    for round_ in ("built", "loaded"):
        with CoqVerifier(audit="never", isolation_dir=str(tmp_path)) as cached:
            assert _verdicts(cached, task, proofs) == expected, round_
            stats = dict(cached.isolation.stats)
        assert stats.get("loaded") == 1 and stats.get("fallback", 0) == 0, stats
        segments = len(_plan(task.context).segments)  # type: ignore[union-attr]
        assert stats.get("builds" if round_ == "built" else "hits") == segments, stats
    assert any(v is Verdict.CHEATING for v, _ in expected)  # each sample has a cheat the cache must not let by


def _cache(directory: Path, verifier) -> isolation.IsolationCache:
    return isolation.IsolationCache(directory, coqc="coqc", coq_version=verifier.version, args=(),
                                    sandbox=verifier.sandbox, env=verifier.prover_env(), build_timeout_s=120)


@pytest.mark.prover
@requires_coq
def test_concurrent_builders_of_one_key_build_it_once(tmp_path: Path):
    from proofgym.envs.verifiers.coq import CoqVerifier

    context = CONTEXTS["scopes_hints"]
    with CoqVerifier(audit="never", isolation_cache=False) as v:
        caches = [_cache(tmp_path / "iso", v) for _ in range(4)]
        p = caches[0].plan(context)
        assert isinstance(p, Plan)
        results: list[bool] = []
        threads = [threading.Thread(target=lambda c=c: results.append(c.ensure(p, p.prefix, tmp_path)))
                   for c in caches]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert results == [True] * 4
    assert sum(c.stats["builds"] for c in caches) == 1 and sum(c.stats["hits"] for c in caches) == 3
    assert caches[0].valid(p)
    assert not list((tmp_path / "iso").glob(".tmp-*"))  # nothing half-moved is left beside the entries


@pytest.mark.prover
@requires_coq
def test_a_truncated_vo_is_rebuilt_not_loaded(tmp_path: Path):
    from proofgym.envs.verifiers.coq import CoqVerifier

    task, proofs = TASKS[0]
    with CoqVerifier(audit="never", isolation_dir=str(tmp_path)) as v:
        expected = _verdicts(v, task, proofs)
    p = _plan(task.context)
    assert isinstance(p, Plan)
    vos = list(tmp_path.glob("C*.vo"))
    assert len(vos) == 1
    vos[0].write_bytes(vos[0].read_bytes()[: vos[0].stat().st_size // 2])  # a copy cut short
    with CoqVerifier(audit="never", isolation_dir=str(tmp_path)) as v:
        assert _verdicts(v, task, proofs) == expected
        stats = dict(v.isolation.stats)
    assert stats.get("rebuilt") == 1 and stats.get("builds") == 1 and stats.get("loaded") == 1, stats


@pytest.mark.prover
@requires_coq
def test_the_environment_baseline_is_kept_and_read_back_by_a_later_run(tmp_path: Path):
    """A context cached in part (an open Section) has its environment baseline (a coqc + coqchk of the whole context,
    computed at its second OK) kept in the cache directory; a later verifier reads it from its first OK on instead of
    compiling the context again, and the context's axiom still makes a proof that uses it CHEATING. An entry that does
    not match its key is not used: it is computed again."""
    from proofgym.envs.verifiers.coq import CoqVerifier

    context = "Axiom bad : 1 = 2.\nLemma ok0 : True. Proof. exact I. Qed.\nSection S.\nVariable n : nat.\n"
    honest = _task("base_ok", context, "Lemma t6 : n + 0 = n.", "Proof. induction n; simpl; auto. Qed.",
                   allowed_axioms=[])
    cheat = _task("base_cheat", context, "Lemma t7 : 1 = 2.", "Proof. Admitted.", allowed_axioms=[])
    checks = [(honest, honest.reference_proof), (honest, honest.reference_proof), (cheat, "Proof. exact bad. Qed.")]

    def run() -> tuple[list[Verdict], dict[str, int]]:
        with CoqVerifier(audit="never", isolation_dir=str(tmp_path)) as v:
            verdicts = [v.check(t, p).verdict for t, p in checks]
            return verdicts, dict(v.isolation.stats)

    first, stats = run()
    assert first == [Verdict.OK, Verdict.OK, Verdict.CHEATING]
    assert stats.get("baselines_stored") == 1 and not stats.get("baselines_read"), stats
    again, stats = run()
    assert again == first and stats.get("baselines_read", 0) >= 1 and not stats.get("baselines_stored"), stats
    entries = list(tmp_path.glob("B*.chk.json"))
    assert len(entries) == 1
    entries[0].write_text('{"key": "not this one", "out": ""}', encoding="utf-8")
    third, stats = run()
    assert third == first and stats.get("baselines_stored") == 1 and not stats.get("baselines_read"), stats
