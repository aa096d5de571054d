"""Tests for Coq lemma extraction (``envs/tasks/coq_extract.py``) and suite files (``envs/tasks/suites.py``)."""

from __future__ import annotations

import json
import shutil
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from proofgym.envs.errors import TaskFormatError
from proofgym.envs.tasks.coq_extract import (
    CATEGORIES,
    ExtractedLemma,
    count_proof_lines,
    extract_from_source,
    extract_lemmas,
    extract_stdlib,
    proof_category,
    sample_suite,
    stdlib_root,
)
from proofgym.envs.tasks.suites import SuiteNotFound, load_tasks, resolve_suite, suite_dir, write_tasks
from proofgym.envs.types import Task


def _extract(src: str, prefix: str = "Coq.T"):
    src = textwrap.dedent(src)
    return src, extract_from_source(src, prefix)


def _by_name(lemmas: list[ExtractedLemma]) -> dict[str, ExtractedLemma]:
    return {lemma.name: lemma for lemma in lemmas}


def _assert_exact_slices(src: str, lemma: ExtractedLemma) -> None:
    assert lemma.context == src[: lemma.statement_start]
    assert lemma.context + lemma.statement + lemma.separator + lemma.proof == src[: lemma.proof_end]
    assert lemma.separator.strip() == "" or lemma.separator.strip().startswith("(*")


# --- extraction on synthetic sources ----------------------------------------------------------


def test_comments_with_closers_in_strings_do_not_move_boundaries() -> None:
    src, found = _extract(
        """\
        (* a comment with "*)" in a string (* and a nested one *) still open *)
        Lemma c1 : True.
        Proof. (* "*) Qed." *) exact I. Qed.
        (* Lemma fake : False. Proof. Qed. *)
        Definition s := "(* Lemma fake2 : False. *)".
        Lemma c2 : True /\\ True.
        Proof.
          (* a comment line is not a proof line *)
          split.
          - exact I.
          - exact I.
        Qed.
        """
    )
    lemmas = _by_name(found.lemmas)
    assert sorted(lemmas) == ["c1", "c2"]
    c1 = lemmas["c1"]
    assert c1.statement == "Lemma c1 : True."
    assert c1.proof == 'Proof. (* "*) Qed." *) exact I. Qed.'
    assert c1.context.startswith('(* a comment with "*)"')
    assert c1.line == 2
    assert c1.proof_lines == 1 and c1.category == "P1"
    c2 = lemmas["c2"]
    assert c2.proof_lines == 3 and c2.category == "P2"
    for lemma in found.lemmas:
        _assert_exact_slices(src, lemma)


def test_proof_term_sentence_is_a_whole_proof() -> None:
    src, found = _extract(
        """\
        Lemma t1 : True.
        Proof I.
        Theorem t2 (P : Prop) (p : P) : P.
        Proof (fun x => x) p.
        Lemma t3 : True.
        Proof using.
          exact I.
        Qed.
        Lemma t4 : True.
        Proof with auto.
          idtac...
        Qed.
        """
    )
    lemmas = _by_name(found.lemmas)
    assert sorted(lemmas) == ["t1", "t2", "t3", "t4"]
    assert lemmas["t1"].proof == "Proof I."
    assert lemmas["t2"].proof == "Proof (fun x => x) p."
    assert lemmas["t2"].keyword == "Theorem"
    assert lemmas["t3"].proof == "Proof using.\n  exact I.\nQed."
    assert lemmas["t3"].proof_lines == 1
    assert lemmas["t4"].proof_lines == 1
    assert not found.excluded
    for lemma in found.lemmas:
        _assert_exact_slices(src, lemma)


def test_bullets_braces_spaced_qed_and_defined() -> None:
    src, found = _extract(
        """\
        Lemma b1 : True /\\ (True /\\ True).
        Proof.
          split.
          - exact I.
          - split.
            + { exact I. }
            + 2: { idtac. } exact I.
        Qed .
        Lemma b2 : nat.
        Proof. exact 0. Defined.
        Lemma b3 : True. exact I. Qed.
        """
    )
    lemmas = _by_name(found.lemmas)
    assert lemmas["b1"].proof.endswith("Qed .")
    assert lemmas["b1"].proof_lines == 5
    assert lemmas["b2"].proof == "Proof. exact 0. Defined."
    assert lemmas["b3"].proof == "exact I. Qed."  # no Proof. sentence at all
    for lemma in found.lemmas:
        _assert_exact_slices(src, lemma)


def test_modules_sections_and_attributes() -> None:
    src, found = _extract(
        """\
        Module Import Outer.
        Section S.
          Variable A : Type.
          #[local] Lemma in_section (a : A) : a = a.
          Proof. reflexivity. Qed.
        End S.
        Module Alias := Outer.
        Module Alias2 <: T with Module E := M := M2.
        Module Inner.
          Global Lemma in_inner : True.
          Proof. exact I. Qed.
        End Inner.
        Module Sealed <: Sig with Definition t := nat.
          Local Theorem in_sealed : True.
          Proof. exact I. Qed.
        End Sealed.
        Lemma after_inner : True.
        Proof. exact I. Qed.
        End Outer.
        Lemma top : True.
        Proof. exact I. Qed.
        """,
        "Coq.Dir.File",
    )
    lemmas = _by_name(found.lemmas)
    assert lemmas["in_section"].statement == "#[local] Lemma in_section (a : A) : a = a."
    assert lemmas["in_section"].sections == ("S",)
    assert lemmas["in_section"].modules == ("Outer",)
    assert lemmas["in_section"].qualid == "Coq.Dir.File.Outer.in_section"
    assert lemmas["in_inner"].qualid == "Coq.Dir.File.Outer.Inner.in_inner"
    assert lemmas["in_sealed"].modules == ("Outer", "Sealed")
    assert lemmas["after_inner"].modules == ("Outer",)  # `Module Alias := ...` opened nothing
    assert lemmas["after_inner"].sections == ()
    assert lemmas["top"].modules == () and lemmas["top"].qualid == "Coq.Dir.File.top"


def test_exclusions_are_counted() -> None:
    src, found = _extract(
        """\
        Lemma adm : False.
        Proof. Admitted.
        Lemma abo : False.
        Proof. intros. Abort.
        Program Lemma prog : True.
        Proof. exact I. Qed.
        #[program] Lemma prog2 : True.
        Proof. exact I. Qed.
        Lemma mut1 : True with mut2 : True.
        Proof. Admitted.
        Lemma not_mutual (n : nat) : match n with 0 => True | S _ => True end.
        Proof. destruct n; exact I. Qed.
        Example ex := 3.
        Example ex_thm : 1 = 1.
        Proof. reflexivity. Qed.
        Definition d : nat.
        Proof. exact 0. Defined.
        Instance i : True.
        Proof. exact I. Qed.
        Goal True.
        Proof. exact I. Qed.
        Module Type Sig.
          Parameter t : Type.
          Lemma in_sig : True.
          Proof. exact I. Qed.
        End Sig.
        Module Type Alias := Sig.
        Module F (X : Sig).
          Lemma in_functor : True.
          Proof. exact I. Qed.
          Module G.
            Lemma in_nested_functor : True.
            Proof. exact I. Qed.
          End G.
        End F.
        Declare Module D : Sig.
        Lemma last : True.
        Proof. exact I. Qed.
        """
    )
    assert sorted(_by_name(found.lemmas)) == ["ex_thm", "last", "not_mutual"]
    assert found.excluded == Counter(admitted=2, aborted=1, program=2, definition=1, module_type=1, functor=2)
    assert _by_name(found.lemmas)["last"].modules == ()


def test_unterminated_proof_does_not_swallow_the_next_lemma() -> None:
    _, found = _extract(
        """\
        Lemma broken : True.
        Proof. exact I.
        Lemma fine : True.
        Proof. exact I. Qed.
        Lemma at_eof : True.
        Proof.
        """
    )
    assert [lemma.name for lemma in found.lemmas] == ["fine"]
    assert found.excluded == Counter(unterminated=2)


@pytest.mark.parametrize(
    ("body_lines", "category"), [(1, "P1"), (2, "P2"), (6, "P2"), (7, "P3"), (20, "P3"), (21, "long")]
)
def test_categories_by_line_count(body_lines: int, category: str) -> None:
    body = "\n".join("  idtac." for _ in range(body_lines - 1))
    src = f"Lemma l : True.\nProof.\n{body}\n  exact I.\nQed.\n"
    (lemma,) = extract_from_source(src, "Coq.T").lemmas
    assert lemma.proof_lines == body_lines
    assert lemma.category == category == proof_category(body_lines)


def test_count_proof_lines_definition() -> None:
    assert count_proof_lines("Proof. auto. Qed.") == 1
    assert count_proof_lines("Proof.\n  auto.\nQed.") == 1
    assert count_proof_lines("Proof I.") == 1
    assert count_proof_lines("Proof.\n  intros.\n\n  (* why *)\n  auto.\nQed.") == 2
    assert count_proof_lines("Proof.\n  intros. auto. Qed.") == 1  # the Qed line holds a tactic
    assert count_proof_lines("Proof using A B.\n  auto.\nDefined.") == 1
    assert count_proof_lines("intros.\n(* multi\n line\n comment *)\nauto.\nQed.") == 2


def test_lex_errors_propagate_from_a_single_file(tmp_path: Path) -> None:
    bad = tmp_path / "Bad.v"
    bad.write_text("(* never closed\nLemma x : True. Proof. exact I. Qed.\n")
    with pytest.raises(ValueError, match="unterminated comment"):
        extract_lemmas(bad, "Coq.Bad")


# --- stdlib-style trees, tasks and sampling -------------------------------------------------


def _write_tree(root: Path) -> None:
    (root / "Lists").mkdir(parents=True)
    (root / "Compat").mkdir()
    (root / "Lists" / "L.v").write_text(
        "Module M.\nLemma a : True.\nProof. exact I. Qed.\nEnd M.\n"
        "Section S.\nLemma a : True.\nProof.\n  exact I.\nQed.\nEnd S.\n"
        "Lemma a : True.\nProof.\n  idtac.\n  exact I.\nQed.\n"
    )
    (root / "Lists" / "Broken.v").write_text('Definition s := "never closed.\n')
    (root / "Compat" / "Coq816.v").write_text("Lemma c : True.\nProof. exact I. Qed.\n")
    long_body = "\n".join("  idtac." for _ in range(25))
    (root / "Long.v").write_text(f"Lemma long : True.\nProof.\n{long_body}\n  exact I.\nQed.\n")


def test_extract_stdlib_tree_ids_metadata_and_stats(tmp_path: Path) -> None:
    _write_tree(tmp_path)
    tasks, stats = extract_stdlib(tmp_path)
    ids = [t.id for t in tasks]
    assert ids == ["coq.stdlib.Lists.L.M.a", "coq.stdlib.Lists.L.a", "coq.stdlib.Lists.L.a.2"]
    first = tasks[0]
    assert first.system == "coq" and first.suite == "coq-stdlib" and first.timeout_s == 30
    assert first.category == "P1"
    assert first.metadata == {
        "file": "Lists/L.v",
        "line": 2,
        "qualid": "Coq.Lists.L.M.a",
        "sections": [],
        "modules": ["M"],
        "proof_lines": 1,
    }
    assert tasks[1].metadata["sections"] == ["S"] and tasks[1].metadata["qualid"] == "Coq.Lists.L.a"
    assert tasks[2].category == "P2"
    assert Task.from_dict(json.loads(first.to_json())) == first
    assert stats.files_scanned == 3
    assert list(stats.files_skipped) == ["Lists/Broken.v"]
    assert list(stats.files_excluded) == ["Compat/Coq816.v"]
    assert stats.categories == Counter(P1=2, P2=1, long=1)
    assert stats.duplicate_ids == 1
    assert "Lists/Broken.v" in stats.summary()
    with_long, _ = extract_stdlib(tmp_path, include_long=True, progress=True)
    assert [t.category for t in with_long if t.id.endswith(".long")] == ["long"]


def _fake_tasks() -> list[Task]:
    return [
        Task(
            id=f"t.{cat}.{k:03d}",
            system="coq",
            context="",
            statement="Lemma x : True.",
            reference_proof="",
            category=cat,
        )
        for cat, n in (("P1", 50), ("P2", 30), ("P3", 5))
        for k in range(n)
    ]


def test_sample_suite_is_deterministic_sorted_and_per_category() -> None:
    tasks = _fake_tasks()
    counts = {"P1": 10, "P2": 5, "P3": 8}
    sample = sample_suite(tasks, counts, seed=0)
    assert [t.id for t in sample] == sorted(t.id for t in sample)
    assert Counter(t.category for t in sample) == Counter(P1=10, P2=5, P3=5)  # P3 has only 5
    assert sample == sample_suite(list(reversed(tasks)), counts, seed=0)
    assert sample != sample_suite(tasks, counts, seed=1)
    other = sample_suite(tasks, {"P1": 10, "P2": 6, "P3": 8}, seed=0)
    assert [t for t in other if t.category == "P1"] == [t for t in sample if t.category == "P1"]
    assert len(sample_suite(tasks)) == 50 + 30 + 5  # default 160/120/80 takes all
    with pytest.raises(ValueError):
        sample_suite(tasks, {"P1": -1})


# --- suite files ----------------------------------------------------------------------------


def test_write_and_load_roundtrip_with_blank_lines(tmp_path: Path) -> None:
    tasks = _fake_tasks()[:3]
    path = write_tasks(tmp_path / "sub" / "s.jsonl", tasks)
    assert load_tasks(path) == tasks
    path.write_text("\n" + path.read_text().replace("\n", "\n\n") + "  \n")
    assert load_tasks(str(path)) == tasks
    assert [p.name for p in path.parent.iterdir()] == ["s.jsonl"]  # no temp file left behind


def test_unicode_line_separators_survive_jsonl(tmp_path: Path) -> None:
    task = Task(id="u", system="coq", context="(* \u2028 \u0085 *)", statement="Lemma ∀ : True.", reference_proof="")
    path = write_tasks(tmp_path / "u.jsonl", [task])
    assert load_tasks(path) == [task]


def test_load_errors_name_file_and_line(tmp_path: Path) -> None:
    good = _fake_tasks()[0].to_json()
    path = tmp_path / "bad.jsonl"
    path.write_text(good + "\n\n{not json\n")
    with pytest.raises(TaskFormatError, match=r"bad\.jsonl:3: invalid JSON"):
        load_tasks(path)
    path.write_text(good + "\n" + json.dumps({"id": "x", "system": "coq"}) + "\n")
    with pytest.raises(TaskFormatError, match=r"bad\.jsonl:2: missing required key"):
        load_tasks(path)
    path.write_text(good + "\n" + good + "\n")
    with pytest.raises(TaskFormatError, match=r"bad\.jsonl:2: duplicate task id .* \(first at .*bad\.jsonl:1\)"):
        load_tasks(path)


def test_json_files_hold_one_task_or_a_list(tmp_path: Path) -> None:
    tasks = _fake_tasks()[:2]
    one = tmp_path / "one.json"
    one.write_text(tasks[0].to_json())
    assert load_tasks(one) == tasks[:1]
    many = tmp_path / "many.json"
    many.write_text(json.dumps([t.to_dict() for t in tasks], indent=2))
    assert load_tasks(many) == tasks
    broken = [t.to_dict() for t in tasks]
    del broken[1]["statement"]
    many.write_text("[\n" + json.dumps(broken[0]) + ",\n" + json.dumps(broken[1]) + "\n]")
    with pytest.raises(TaskFormatError, match=r"many\.json:3: missing required key\(s\) statement"):
        load_tasks(many)
    many.write_text("42")
    with pytest.raises(TaskFormatError, match=r"many\.json:1: a \.json suite must hold"):
        load_tasks(many)


def test_suite_dir_and_resolution_read_the_environment_at_call_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROOFGYM_CACHE", str(tmp_path / "cache"))
    assert suite_dir() == tmp_path / "cache" / "suites"
    with pytest.raises(SuiteNotFound, match="run `proofgym build coq-stdlib` first"):
        resolve_suite("coq-stdlib")
    with pytest.raises(FileNotFoundError):
        load_tasks("coq-stdlib")
    built = write_tasks(suite_dir() / "coq-stdlib.jsonl", _fake_tasks()[:1])
    assert resolve_suite("coq-stdlib") == built
    assert load_tasks("coq-stdlib") == _fake_tasks()[:1]
    with pytest.raises(SuiteNotFound, match="does not exist"):
        resolve_suite(tmp_path / "missing.jsonl")
    monkeypatch.delenv("PROOFGYM_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert suite_dir() == tmp_path / "home" / ".cache" / "proofgym" / "suites"


# --- the real stdlib ------------------------------------------------------------------------


@pytest.mark.prover
@pytest.mark.skipif(shutil.which("coqc") is None, reason="coqc not installed")
def test_real_stdlib_extraction() -> None:
    root = stdlib_root()
    tasks, stats = extract_stdlib(root)
    assert len(tasks) > 5000
    assert not stats.files_skipped, stats.summary()
    assert all(stats.categories[c] > 500 for c in CATEGORIES)
    assert len({t.id for t in tasks}) == len(tasks)
    by_id = {t.id: t for t in tasks}
    task = by_id["coq.stdlib.Lists.List.app_nil_r"]
    assert task.statement == "Theorem app_nil_r (l:list A) : l ++ [] = l."
    assert task.reference_proof.startswith("Proof.") and task.reference_proof.endswith("Qed.")
    assert "induction l" in task.reference_proof
    assert task.metadata["qualid"] == "Coq.Lists.List.app_nil_r"
    assert task.metadata["file"] == "Lists/List.v"
    src = (root / "Lists" / "List.v").read_text(encoding="utf-8")
    lemma = _by_name(extract_lemmas(root / "Lists" / "List.v", "Coq.Lists.List"))["app_nil_r"]
    assert lemma.context == task.context == src[: lemma.statement_start]
    assert src.splitlines()[task.metadata["line"] - 1].strip() == task.statement
    _assert_exact_slices(src, lemma)
    # Lemmas of functors and module types are not tasks (they are not closed constants).
    assert stats.excluded["functor"] > 0 and stats.excluded["module_type"] > 0
    assert not any(t.id.startswith("coq.stdlib.Compat.") for t in tasks)
