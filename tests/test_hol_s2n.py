"""The s2n-bignum importer on a synthetic checkout that mirrors the real layout (pure Python).

The checkout has what the real one has: ``arm/Makefile`` naming the objects whose proofs
``make build_proofs`` builds, ``arm/proofs/base.ml`` loading HOL Light libraries and then s2n files
(``common/*.ml``, ``arm/proofs/instruction.ml``), proof files that ``needs`` the base and each
other, ``time prove``, ``let _ = prove``, ``let ... and ...``, two distinct theorems of one name,
equal goals in two files, and an x86 proof reading an object file built here with ``as``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from proofgym.envs.tasks.hol_extract import TimeoutRule
from proofgym.envs.tasks.hol_inline import SourceTree, blank_comments, split_phrases, toplevel_theorems
from proofgym.envs.tasks.hol_s2n import (
    CONTEXTS_DIR,
    bench_category,
    build_objects,
    collect_problems,
    elf_reader_strings,
    import_s2n,
    makefile_objects,
    missing_object_message,
    s2n_bases,
    task_statement,
)
from proofgym.envs.types import CheckResult, Verdict
from proofgym.envs.verifiers.base import ContextLoadError
from proofgym.envs.verifiers.hol_light import lexer

FILES = {
    "arm/Makefile": "POINT_OBJ = curve/demo_point.o\n"
                    "BIGNUM_OBJ = generic/bignum_demo.o \\\n    generic/bignum_other.o\n"
                    "UNOPT_OBJ = generic/unopt/ignored.o\n"
                    "OBJ = $(POINT_OBJ) $(BIGNUM_OBJ)\n",
    "arm/proofs/base.ml": 'loads "update_database.ml";;\nneeds "Library/words.ml";;\n'
                          'loadt "common/overlap.ml";;\nloadt "arm/proofs/instruction.ml";;\n',
    "common/overlap.ml": "let OVERLAP_LEMMA = prove\n (`nonoverlapping (a:num,1) (b,1) ==> T`,\n  REWRITE_TAC[]);;\n"
                         "let OVERLAP_TIMED = time prove(`(x:num) = x`, REFL_TAC);;\n",
    "arm/proofs/instruction.ml": 'needs "common/overlap.ml";;\n'
                                 "let word_demo = 1;;\n"
                                 "let INSTR_A = prove(`word_add (x:int64) (word 0) = x`, WORD_TAC);;\n",
    "common/extra.ml": "let EXTRA_1 = prove(`!n. n + 0 = n`, ARITH_TAC);;\n"
                       "let EXTRA_EQUIV = prove(`!n. n = n`, REWRITE_TAC[]);;\n",
    "arm/proofs/bignum_demo.ml": 'needs "arm/proofs/base.ml";;\nneeds "common/extra.ml";;\n'
                                 "let lemma = prove(`!x. x + 1 > x`, ARITH_TAC);;\n"
                                 "let _ = prove(`1 = 1`, REFL_TAC);;\n"
                                 "(* let COMMENTED = prove(`F`, ALL_TAC);; *)\n"
                                 "let lemma = time prove\n (`!x. x * 1 = x`,\n  let a, b = 1, 2 in ARITH_TAC);;\n"
                                 "let DUP_OF_EXTRA = prove(`!n.  n + 0 = n`, ARITH_TAC);;\n"
                                 "let PAIR_A = prove(`!y. y = y`, MESON_TAC[]) and PAIR_B = prove(`2 = 2`, ARITH_TAC);;\n"
                                 "let BIGNUM_DEMO_CORRECT = prove(`ensures arm P Q R`, CHEAT_TAC);;\n"
                                 "let BIGNUM_DEMO_SUBROUTINE_CORRECT = prove(`ensures arm P Q R'`, CHEAT_TAC);;\n",
    "arm/proofs/bignum_other.ml": 'needs "arm/proofs/base.ml";;\nneeds "arm/proofs/bignum_demo.ml";;\n'
                                  'needs "common/extra.ml";;\n'
                                  "let OTHER = prove(`!x. x + 1 > x`, ARITH_TAC);;\n"
                                  "let OTHER_2 = prove(`(read X s = 0) ==> T`, REWRITE_TAC[]);;\n",
    "arm/proofs/demo_point.ml": 'needs "arm/proofs/base.ml";;\n'
                                "let POINT_DEMO = prove(`(val (x:int64)) < 2 EXP 64`, REWRITE_TAC[VAL_BOUND_64]);;\n",
    "arm/proofs/not_built.ml": "let NOT_BUILT = prove(`T`, REWRITE_TAC[]);;\n",
}


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    root = tmp_path / "s2n-bignum"
    for rel, text in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


# --------------------------------------------------------------------------------------------
# the bench's rules


def test_theorem_forms_of_the_bench():
    def names(text: str) -> list[str]:
        return [t.name for t in toplevel_theorems(text)]

    assert names("let A = prove(`T`, TAC)") == ["A"]
    assert names("let A = time prove\n (`T`,\n  TAC)") == ["A"]
    assert names("let _ = prove(`T`, TAC)") == []  # binds no name (Ppat_any): no theorem
    assert [t.name for t in toplevel_theorems("let _ = prove(`T`, TAC)", anonymous=True)] == ["_"]
    assert names("let A = prove(`T`, TAC) and B = time prove(`F ==> T`, T2)") == ["A", "B"]
    assert names("let A = prove(`T`, let a, b = x in TAC)") == ["A"]  # the comma of an inner let
    assert names("let A = PROVE(`T`, TAC)") == [] and names("let A = prove `T`") == []
    assert names("let A = prove(`T`, TAC) in A") == []  # an expression, not a toplevel binding
    assert names("let A = REWRITE_RULE[] (prove(`T`, TAC))") == []
    assert names("(* let A = prove(`T`, TAC) *) let B = 1") == []
    thm = toplevel_theorems("let X = prove\n (`a (* not a comment *)`, (* c *) REWRITE_TAC[]  )")[0]
    assert thm.goal == "`a (* not a comment *)`" and thm.proof == "REWRITE_TAC[]"


def _past_string(source: str, i: int) -> int:
    """The index after the OCaml string literal that opens at ``source[i]`` (a backslash escapes one character)."""
    i += 1
    while i < len(source) and source[i] != '"':
        i += 2 if source[i] == "\\" else 1
    return i + 1


def _char_by_char_split(source: str) -> list[lexer.Phrase]:
    """The plain reading of OCaml's lexing rules, one character at a time: the oracle for the regex scanner."""
    phrases, i, n, start = [], 0, len(source), 0
    while i < n:
        if source.startswith("(*", i):
            depth = 0
            while i < n:
                if source.startswith("(*", i):
                    depth, i = depth + 1, i + 2
                elif source.startswith("*)", i):
                    depth, i = depth - 1, i + 2
                    if depth == 0:
                        break
                elif source[i] == '"':
                    i = _past_string(source, i)
                else:
                    i += 1
            continue
        if source[i] == '"':
            i = _past_string(source, i)
            continue
        if source[i] == "`":
            j = source.find("`", i + 1)
            i = n if j < 0 else j + 1
            continue
        if source[i] == "'":
            m = re.match(r"'(?:[^\\']|\\(?:[\\'\"ntbr ]|\d{3}|x[0-9a-fA-F]{2}))'", source[i:i + 6])
            i += len(m.group(0)) if m else 1
            continue
        if source.startswith(";;", i):
            phrases.append(lexer.Phrase(start, i, source[start:i]))
            i += 2
            start = i
            continue
        i += 1
    if source[start:].strip():
        phrases.append(lexer.Phrase(start, n, source[start:]))
    return phrases


def test_phrases_skip_comments_strings_quotations_and_chars():
    text = 'let a = "x;;y";;\n(* ;; *) let b = `p ;; q`;;\nlet c = \';\';;\nlet d = \'a\';;tail'
    assert [p.text.strip() for p in split_phrases(text)] == [
        'let a = "x;;y"', "(* ;; *) let b = `p ;; q`", "let c = ';'", "let d = 'a'", "tail"]
    nested = '(* a (* "*)" ;; *) ;; *) let e = "\\";; let f = 1 (* open'
    for sample in (text, nested):
        assert split_phrases(sample) == _char_by_char_split(sample)  # the regex scanner's cut is the plain one


@pytest.mark.parametrize(("name", "goal", "arch", "expected"), [
    ("FOO_CORRECT", "`ensures arm P Q R`", "arm", "functional_correctness_arm"),
    ("FOO_CORRECTNESS", "`(ensures) x86 P`", "x86", "functional_correctness_x86"),  # _CORRECT anywhere
    ("FOO_CORRECT", "`ensuresx P`", "arm", "generic"),  # no boundary on either side
    ("FOO", "`!s. read X s = 0`", "common", "program_state"),
    ("FOO", "`P(read)`", "common", "program_state"),  # boundary: parenthesis
    ("FOO", "`x = readme`", "common", "program_state"),  # the bench's rule: a prefix counts
    ("FOO", "`x_bytes_read)`", "common", "program_state"),  # ...and so does a suffix
    ("FOO", "`a :> b`", "common", "program_state"),
    ("FOO", "`contained_modulo n a b`", "common", "program_state"),
    ("FOO", "`interval s = 0`", "common", "bit_vector"),  # "val " as a suffix
    ("FOO", "`f[word_sub a b] = 0`", "common", "generic"),  # "word_" needs a space before it
    ("FOO", "`f(word_sub a b) = 0`", "common", "bit_vector"),  # ...but "(word" is "word" after a parenthesis
    ("FOO", "`x = word_sub a b`", "common", "bit_vector"),
    ("FOO", "`x = wordlike`", "common", "bit_vector"),  # "word" as a prefix
    ("FOO", "`1 = valx`", "common", "bit_vector"),
    ("FOO", "`wordlike = 1`", "common", "generic"),  # a backquote is no boundary
    ("FOO", "`x+val+1 = 1`", "common", "generic"),  # neither boundary
    ("FOO", "`a = b`", "common", "generic"),
    ("FOO", "(`a = b`)", "common", "generic"),
])
def test_bench_categories_on_tricky_keywords(name, goal, arch, expected):
    assert bench_category(name, goal, arch) == (False, expected)


@pytest.mark.parametrize(("name", "goal", "why"), [
    ("X_EQUIV", "`T`", "not a proof related to functional correctness"),
    ("X_SUBROUTINE_SAFE", "`T`", "not a proof related to functional correctness"),
    ("X_SUBROUTINE_CORRECT", "`ensures arm P Q R`", "a top-level subroutine that just uses the _CORRECT of the core part"),
    ("X", "mk_eq(a, b)", "the goal is evaluated at runtime"),
    ("X_CORRECT", "`ensures arm P Q R`", "unknown_arch:common"),
])
def test_bench_drops(name, goal, why):
    assert bench_category(name, goal, "common" if "unknown" in why else "arm") == (True, why)


def test_makefile_objects_expand_variables_and_continuations(checkout: Path):
    assert makefile_objects(checkout / "arm" / "Makefile") == [
        "curve/demo_point.o", "generic/bignum_demo.o", "generic/bignum_other.o"]


def test_ids_dedupe_and_categories(checkout: Path):
    collection = collect_problems(SourceTree(checkout))
    assert collection.files == ["arm/proofs/bignum_demo.ml", "arm/proofs/bignum_other.ml", "arm/proofs/demo_point.ml"]
    got = {pid: (p.category, p.source) for pid, p in collection.problems.items()}
    assert got == {
        "common.overlap.OVERLAP_LEMMA": ("program_state", "common/overlap.ml"),
        "common.overlap.OVERLAP_TIMED": ("generic", "common/overlap.ml"),
        "arm.instruction.INSTR_A": ("bit_vector", "arm/proofs/instruction.ml"),
        "common.extra.EXTRA_1": ("generic", "common/extra.ml"),
        "arm.bignum_demo.lemma.0": ("generic", "arm/proofs/bignum_demo.ml"),
        "arm.bignum_demo.lemma.1": ("generic", "arm/proofs/bignum_demo.ml"),
        "arm.bignum_demo.PAIR_A": ("generic", "arm/proofs/bignum_demo.ml"),
        "arm.bignum_demo.PAIR_B": ("generic", "arm/proofs/bignum_demo.ml"),
        "arm.bignum_demo.BIGNUM_DEMO_CORRECT": ("functional_correctness_arm", "arm/proofs/bignum_demo.ml"),
        "arm.bignum_other.OTHER_2": ("program_state", "arm/proofs/bignum_other.ml"),
        "arm.demo_point.POINT_DEMO": ("bit_vector", "arm/proofs/demo_point.ml"),
    }
    # the base's files come first (inlined at the first proof file's `needs`), then in load order
    assert list(got)[:4] == ["common.overlap.OVERLAP_LEMMA", "common.overlap.OVERLAP_TIMED",
                             "arm.instruction.INSTR_A", "common.extra.EXTRA_1"]
    assert collection.problems["arm.bignum_demo.lemma.1"].timed
    assert collection.dropped == {"common.extra.EXTRA_EQUIV": "not a proof related to functional correctness",
                                  "arm.bignum_demo.BIGNUM_DEMO_SUBROUTINE_CORRECT":
                                      "a top-level subroutine that just uses the _CORRECT of the core part"}
    # DUP_OF_EXTRA (= EXTRA_1 up to spaces) and OTHER (= lemma.0) are merged into the first
    assert collection.merged == 2


def test_the_bench_ids_settle_which_of_equal_goals_is_kept(checkout: Path):
    """The bench's walk order is its file system's: where its ids say it met a later equal goal
    first, that one is kept (and the first of two same-name theorems then stays NAME.0)."""
    prefer = frozenset({"arm.bignum_other.OTHER", "arm.bignum_demo.DUP_OF_EXTRA"})
    collection = collect_problems(SourceTree(checkout), prefer=prefer)
    assert prefer <= set(collection.problems)
    assert "common.extra.EXTRA_1" not in collection.problems
    assert "arm.bignum_demo.lemma.0" not in collection.problems and "arm.bignum_demo.lemma.1" in collection.problems
    assert collection.reordered == 2


# --------------------------------------------------------------------------------------------
# contexts


def _flatten(context: str, loaded: set[tuple[str, str]], cwd: Path) -> list[str]:
    """Run a context's loads the way hol_loader.ml does (needs: once per basename and digest): the phrases."""
    out: list[str] = []

    def run(text: str) -> None:
        for ph in split_phrases(text):
            stmt = ph.text.strip()
            m = re.fullmatch(r'(needs|loadt)\s+"([^"]+)"', stmt)
            if m is None:
                stmt = re.sub(r"\(\*.*?\*\)", " ", stmt, flags=re.S).strip()
                if stmt:
                    out.append(" ".join(stmt.split()))
                continue
            path = Path(m.group(2)) if Path(m.group(2)).is_absolute() else cwd / m.group(2)
            if not path.is_file():
                out.append(stmt)  # a HOL Light library load
                continue
            fileid = (path.name, hashlib.md5(path.read_bytes()).hexdigest())  # noqa: S324
            if m.group(1) == "needs" and fileid in loaded:
                continue
            run(path.read_text())
            loaded.add(fileid)

    run(context)
    return out


def _bench_prefix(checkout: Path, root: str, upto: str, loaded_files: list[str]) -> list[str]:
    """What the bench's setup runs before ``upto`` (a phrase's text), independently: line-based
    inlining of ``root`` as inline_load.ml does it, every proof cheated, nothing the base loaded."""
    loaded = {(Path(f).name, hashlib.md5((checkout / f).read_bytes()).hexdigest()) for f in loaded_files}  # noqa: S324
    lines: list[str] = []

    def inline(rel: str) -> None:
        for line in (checkout / rel).read_text().splitlines():
            m = re.fullmatch(r'\s*(needs|loadt|loads)\s+"([^"]+)";;\s*', line)
            if m and m.group(1) == "loads" and m.group(2) == "update_database.ml":
                continue
            if m and m.group(1) != "loads" and (checkout / m.group(2)).is_file():
                fileid = (Path(m.group(2)).name, hashlib.md5((checkout / m.group(2)).read_bytes()).hexdigest())  # noqa: S324
                if m.group(1) == "loadt" or fileid not in loaded:
                    inline(m.group(2))
                    loaded.add(fileid)
                continue
            lines.append(line)

    inline(root)
    text = "\n".join(lines)
    text = text[:text.index(upto)]
    text = re.sub(r"\(\*.*?\*\)", " ", text, flags=re.S)
    text = re.sub(r"(prove\s*\(\s*`[^`]*`\s*,)(?:(?!\)\s*(?:;;|and\b)).)*\)", r"\1 CHEAT_TAC)", text, flags=re.S)
    return [" ".join(p.text.split()) for p in split_phrases(text) if p.text.strip()]


def test_contexts_are_the_inlined_cheated_prefix(checkout: Path):
    tasks, report = import_s2n(checkout, hol_dir="")
    by_id = {t.id: t for t in tasks}
    arm, lib = s2n_bases(checkout)[:2]
    assert arm.name == "arm" and arm.setup == 'needs "arm/proofs/base.ml";;\n'
    assert lib.name == "arm-lib" and lib.setup == 'loads "update_database.ml";;\nneeds "Library/words.ml";;\n'
    base_files = ["common/overlap.ml", "arm/proofs/instruction.ml", "arm/proofs/base.ml"]

    # a proof file's problem: its own prefix on the arm base; common/extra.ml (needs-loaded) cheated
    task = by_id["arm.bignum_demo.PAIR_A"]
    assert task.metadata["base"] == "arm" and task.statement == "`!y. y = y`"
    assert task.reference_proof == "MESON_TAC[]"
    assert all(line.startswith(f'loadt "{checkout / CONTEXTS_DIR}/arm/') for line in task.context.splitlines())
    flat = _flatten(task.context, set(), checkout)
    assert flat == _bench_prefix(checkout, "arm/proofs/bignum_demo.ml", "let PAIR_A", base_files)
    assert "let EXTRA_1 = prove(`!n. n + 0 = n`, CHEAT_TAC)" in flat
    assert "let lemma = time prove (`!x. x * 1 = x`, CHEAT_TAC)" in flat
    assert "let _ = prove(`1 = 1`, CHEAT_TAC)" in flat  # a context runs no real proof
    assert not any("base.ml" in p or "OVERLAP" in p for p in flat)  # the arm base has loaded it

    # a file the base loads: base.ml's prefix on the lib base, so nothing is loaded twice
    task = by_id["arm.instruction.INSTR_A"]
    assert task.metadata["base"] == "arm-lib"
    flat = _flatten(task.context, set(), checkout)
    assert flat == ["let OVERLAP_LEMMA = prove (`nonoverlapping (a:num,1) (b,1) ==> T`, CHEAT_TAC)",
                    "let OVERLAP_TIMED = time prove(`(x:num) = x`, CHEAT_TAC)", "let word_demo = 1"]
    assert by_id["common.overlap.OVERLAP_TIMED"].metadata["base"] == "arm-lib"

    # the context of a later proof file: bignum_demo (needs-loaded) is cheated whole, extra.ml once
    task = by_id["arm.bignum_other.OTHER_2"]
    flat = _flatten(task.context, set(), checkout)
    assert flat.count("let EXTRA_1 = prove(`!n. n + 0 = n`, CHEAT_TAC)") == 1
    assert "let BIGNUM_DEMO_CORRECT = prove(`ensures arm P Q R`, CHEAT_TAC)" in flat
    assert flat == _bench_prefix(checkout, "arm/proofs/bignum_other.ml", "let OTHER_2", base_files)

    # small contexts: pieces, cut only where a problem starts
    pieces = sorted((checkout / CONTEXTS_DIR).rglob("*.ml"))
    assert all(p.stat().st_size < 2000 for p in pieces)
    assert report.bases == {"arm": 8, "arm-lib": 3}
    assert report.per_arch_category["arm"]["generic"] == 4 and report.per_arch_category["common"] == {
        "program_state": 1, "generic": 2}


def test_timeouts_and_comparison_from_the_bench_map(checkout: Path, tmp_path: Path):
    mapping = [{"problem_id": "arm.bignum_demo.PAIR_A", "prove_secs": 70.0, "timeout_sec": 140},
               {"problem_id": "arm.gone.X", "prove_secs": 1.0, "timeout_sec": 120}]
    (tmp_path / "timeout-map.json").write_text(json.dumps(mapping))
    tasks, report = import_s2n(checkout, hol_dir="", timeout_map=tmp_path / "timeout-map.json")
    by_id = {t.id: t for t in tasks}
    assert by_id["arm.bignum_demo.PAIR_A"].timeout_s == 140 and by_id["arm.bignum_demo.PAIR_A"].metadata[
        "bench_prove_s"] == 70.0
    assert report.bench["matched"] == 1 and report.bench["missing_ids"] == ["arm.gone.X"]
    assert report.bench["extra"] == len(tasks) - 1
    text = report.render()
    assert "1 matched, 1 missing" in text and "functional_correctness_arm" in text


def test_a_phrase_of_comments_only_is_left_out_of_a_context(checkout: Path):
    """s2n's aes_xts_encrypt_spec.ml ends in a comment of old proofs and a rule line: as a phrase of
    its own with `;;` after it, camlp5 refuses the file ("[use_file] expected")."""
    extra = checkout / "common" / "extra.ml"
    extra.write_text(extra.read_text() + "(*\nlet OLD = prove(`F`, ALL_TAC);;\n*)\n(**********)\n")
    import_s2n(checkout, hol_dir="")
    whole = (checkout / CONTEXTS_DIR / "arm" / "common" / "extra.ml").read_text()
    assert whole.rstrip().endswith("let EXTRA_EQUIV = prove(`!n. n = n`, CHEAT_TAC);;")
    for piece in (checkout / CONTEXTS_DIR).rglob("*.ml"):
        assert all(blank_comments(ph.text).strip() for ph in split_phrases(piece.read_text())), piece


def test_statements_are_one_quotation():
    assert task_statement("(`x = 1`)") == "`x = 1`"
    assert task_statement("`x = 1`") == "`x = 1`"
    assert task_statement("vsubst [`a:num`,`b:num`] `b = 1`") is None


def test_contexts_dir_must_be_inside_the_checkout(checkout: Path, tmp_path: Path):
    from proofgym.envs.errors import TaskFormatError

    with pytest.raises(TaskFormatError, match="inside the checkout"):
        import_s2n(checkout, hol_dir="", contexts_dir=tmp_path / "elsewhere")


# --------------------------------------------------------------------------------------------
# object files


def test_object_file_a_context_reads(checkout: Path):
    """An x86 proof's context reads an object file with define_assert_from_elf: the task says which,
    and a missing one is one line naming it and the command that builds it."""
    if shutil.which("as") is None or shutil.which("make") is None:
        pytest.skip("no assembler or make: apt-get install binutils make")
    (checkout / "x86" / "proofs").mkdir(parents=True)
    (checkout / "x86" / "generic").mkdir()
    (checkout / "x86" / "Makefile").write_text("OBJ = generic/bignum_tiny.o\n")
    (checkout / "x86" / "proofs" / "base.ml").write_text('needs "Library/words.ml";;\n')
    (checkout / "x86" / "generic" / "bignum_tiny.S").write_text(
        ".text\n.globl bignum_tiny\nbignum_tiny:\n  mov %rdi, %rax\n  ret\n")
    obj = checkout / "x86" / "generic" / "bignum_tiny.o"
    subprocess.run(["as", "-o", str(obj), str(obj.with_suffix(".S"))], check=True)
    (checkout / "x86" / "proofs" / "bignum_tiny.ml").write_text(
        'needs "x86/proofs/base.ml";;\n'
        'let bignum_tiny_mc = define_assert_from_elf "bignum_tiny_mc" "x86/generic/bignum_tiny.o"\n'
        "[0x48; 0x89; 0xf8; 0xc3];;\n"
        "let BIGNUM_TINY_CORRECT = prove(`ensures x86 P Q R`, X86_SIM_TAC);;\n")
    assert obj.read_bytes()[:4] == b"\x7fELF"
    tasks, report = import_s2n(checkout, hol_dir="", archs=("x86",))
    task = next(t for t in tasks if t.id == "x86.bignum_tiny.BIGNUM_TINY_CORRECT")
    assert task.category == "functional_correctness_x86"
    assert task.metadata["objects"] == ["x86/generic/bignum_tiny.o"] and task.metadata["base"] == "x86"
    assert "define_assert_from_elf" in _flatten(task.context, set(), checkout)[0]
    assert missing_object_message(task, str(checkout)) is None and not report.missing_objects
    obj.unlink()
    message = missing_object_message(task, str(checkout))
    assert message is not None and "x86/generic/bignum_tiny.o is not built" in message
    assert f"make -C {checkout}/x86 generic/bignum_tiny.o" in message
    _, report = import_s2n(checkout, hol_dir="", archs=("x86",))
    assert report.missing_objects == {"x86/generic/bignum_tiny.o": ["x86.bignum_tiny.BIGNUM_TINY_CORRECT"]}
    assert "1 x86 object files are not built" in report.render()
    # the make step: the checkout's own Makefile rule builds exactly the missing objects
    (checkout / "x86" / "Makefile").write_text("OBJ = generic/bignum_tiny.o\n%.o : %.S ; as -o $@ $<\n")
    assert build_objects(checkout, list(report.missing_objects)) == {"x86": "ok"}
    assert obj.read_bytes()[:4] == b"\x7fELF" and missing_object_message(task, str(checkout)) is None


def test_every_elf_reader_names_its_object(checkout: Path):
    """s2n reads objects with define_from_elf (351 uses), the relocs and coda forms too, its name and path
    on separate lines; a print_literal_from_elf in a comment reads nothing (found on the real
    arm.bignum_emontredc_8n_cdiff, whose context died in Sys_error on an unlisted object)."""
    (checkout / "x86" / "proofs").mkdir(parents=True)
    (checkout / "x86" / "proofs" / "base.ml").write_text('needs "Library/words.ml";;\n')
    (checkout / "x86" / "proofs" / "readers.ml").write_text(
        'needs "x86/proofs/base.ml";;\n'
        '(**** print_literal_from_elf "x86/generic/commented.o";; ****)\n'
        'let a_mc =\n  define_from_elf "a_mc"\n    "x86/generic/a.o";;\n'
        'let b_mc = define_assert_relocs_from_elf "b_mc" "x86/generic/b.o" (fun w -> []) [];;\n'
        'let c_mc = define_coda_from_elf 0x10 "c_mc" "c_data" "x86/generic/c.o";;\n'
        "let READERS_CORRECT = prove(`ensures x86 P Q R`, X86_SIM_TAC);;\n")
    tasks, report = import_s2n(checkout, hol_dir="", archs=("x86",))
    task = next(t for t in tasks if t.id == "x86.readers.READERS_CORRECT")
    assert task.metadata["objects"] == ["x86/generic/a.o", "x86/generic/b.o", "x86/generic/c.o"]
    assert sorted(report.missing_objects) == task.metadata["objects"]


def test_elf_reader_with_a_labelled_argument_names_its_object(checkout: Path):
    """s2n's arm curve25519/edwards25519 proofs pass ``~map_symbol_name:(function ...)`` before the name and
    the path (8 proof files): the label's value, with its strings, comments and parentheses, is skipped
    and the path after it is the object."""
    makefile = checkout / "arm" / "Makefile"
    makefile.write_text(makefile.read_text().replace("OBJ = $(POINT_OBJ)", "OBJ = curve25519/labelled.o $(POINT_OBJ)"))
    (checkout / "arm" / "proofs" / "labelled.ml").write_text(
        'needs "arm/proofs/base.ml";;\n'
        "let labelled_mc,const_data_list =\n"
        "  define_assert_relocs_from_elf\n"
        "    ~map_symbol_name:(function\n"
        '      | "WHOLE_READONLY" | "ltmp1" (* MacOS ) *)\n'
        '      | "not_an_object.o" -> "labelled_constant_data"\n'
        '      | s -> failwith ("unknown symbol (" ^ s))\n'
        '    "labelled_mc"\n'
        '    "arm/curve25519/labelled.o"\n'
        "(fun w BL ADR -> [w 0xa9bf53f3]);;\n"
        "let LABELLED_CORRECT = prove(`ensures arm LP LQ LR`, ARM_SIM_TAC);;\n")
    tasks, report = import_s2n(checkout, hol_dir="", archs=("arm",))
    task = next(t for t in tasks if t.id == "arm.labelled.LABELLED_CORRECT")
    assert task.metadata["objects"] == ["arm/curve25519/labelled.o"]
    assert report.missing_objects["arm/curve25519/labelled.o"] == [task.id]
    assert elf_reader_strings('x = define_from_elf ~f:g "a_mc" "a.o";; define_from_elf ~f "b.o"') == [
        "a_mc", "a.o", "b.o"]


def _sample_script():
    spec = importlib.util.spec_from_file_location(
        "proofgym_s2n_sample_script", Path(__file__).resolve().parents[1] / "scripts" / "s2n_sample.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_sampler_records_a_context_that_did_not_load_once(checkout: Path):
    """A context that does not load is one entry, "context did not load: <why>", and costs one check: the
    problem's other checks and every later problem with the same context are skipped (each retry cost
    the 600 s context deadline on the real bench). Other problems are still checked."""
    sample = _sample_script()
    tasks, _ = import_s2n(checkout, hol_dir="", archs=("arm",))
    broken = next(t for t in tasks if t.id == "arm.bignum_demo.lemma.1")
    same_context = replace(broken, id="arm.bignum_demo.SAME_CONTEXT")
    fine = next(t for t in tasks if t.id == "arm.bignum_other.OTHER_2")
    calls: list[tuple[str, str]] = []

    class Verifier:
        def check(self, task, proof):
            calls.append((task.id, proof))
            if task.context == broken.context:
                raise ContextLoadError("the task's context timed out after 600 s")
            verdict = {"ALL_TAC": Verdict.FAIL, "CHEAT_TAC": Verdict.CHEATING}.get(proof, Verdict.OK)
            return CheckResult(verdict=verdict, reasons=())

    failed: dict = {}
    rows = [sample.check_problem(Verifier(), t, failed) for t in (broken, same_context, fine)]
    assert calls == [(broken.id, "ALL_TAC"), (fine.id, "ALL_TAC"), (fine.id, "CHEAT_TAC"),
                     (fine.id, fine.reference_proof)]
    assert rows[0]["context_did_not_load"].startswith("context did not load: the task's context timed out")
    assert rows[1]["context_did_not_load"] == rows[0]["context_did_not_load"]
    assert not any(name in rows[0] or name in rows[1] for name, _ in sample.EXPECTED)
    assert [sample.as_expected(r) for r in rows] == [False, False, True]
    assert list(failed) == [(broken.metadata["base"], broken.context)]


# --------------------------------------------------------------------------------------------
# installations and tasks on the verifier side (no HOL Light load: a stand-in toplevel)

needs_stubs = pytest.mark.skipif(shutil.which("ocamlc") is None or shutil.which("ocamlmklib") is None,
                                 reason="the HOL Light server's C stubs need ocamlc (apt-get install hol-light)")


def _upstream_layout(tmp_path: Path) -> Path:
    """An upstream checkout's layout: hol.ml and the ocaml-hol toplevel ``make`` builds (a stand-in
    that shows its arguments and dies, as a broken start-up would)."""
    hol_dir = tmp_path / "hol-light"
    hol_dir.mkdir()
    (hol_dir / "hol.ml").write_text("(* a stand-in *)\n")
    (hol_dir / "ocaml-hol").write_text('#!/bin/sh\necho "ocaml-hol started with: $*" >&2\nexit 3\n')
    (hol_dir / "ocaml-hol").chmod(0o755)
    return hol_dir


def test_toplevel_of_each_layout(tmp_path: Path):
    from proofgym.envs.verifiers.hol_light.verifier import hol_toplevel

    upstream = _upstream_layout(tmp_path)
    assert hol_toplevel(str(upstream)) == [str(upstream / "ocaml-hol"), "-I", str(upstream)]
    (tmp_path / "debian").mkdir()
    (tmp_path / "debian" / "ocaml").write_text("")
    assert hol_toplevel(str(tmp_path / "debian")) == [str(tmp_path / "debian" / "ocaml")]
    assert hol_toplevel(str(tmp_path / "debian"), "/opt/my-toplevel") == ["/opt/my-toplevel"]


@needs_stubs
def test_an_s2n_task_brings_its_base_and_starts_upstream_hol_light_without_a_wrapper(checkout: Path, tmp_path: Path):
    from proofgym.envs.errors import VerifierCrashed
    from proofgym.envs.verifiers.hol_light import HolLightVerifier

    tasks, _ = import_s2n(checkout, hol_dir="")
    task = next(t for t in tasks if t.id == "arm.bignum_demo.PAIR_A")
    upstream = _upstream_layout(tmp_path)
    with HolLightVerifier(hol_dir=str(upstream), use_bwrap=False, build_dir=str(tmp_path / "build"),
                          progress=False) as verifier, pytest.raises(VerifierCrashed) as info:
        verifier.check(task, task.reference_proof)  # the base "arm" is no configured one: the task defines it
    message = str(info.value)
    assert "'arm'" in message and "died during start-up" in message and "exit status 3" in message
    assert f"ocaml-hol started with: -I {upstream} " in message


@needs_stubs
def test_a_missing_object_file_is_one_clear_error(checkout: Path, tmp_path: Path):
    from proofgym.envs.verifiers.hol_light import ContextLoadError, HolLightVerifier

    tasks, _ = import_s2n(checkout, hol_dir="")
    task = next(t for t in tasks if t.id == "arm.bignum_demo.PAIR_A")
    task = replace(task, metadata={**task.metadata, "objects": ["arm/generic/bignum_demo.o"]})
    with HolLightVerifier(hol_dir=str(_upstream_layout(tmp_path)), use_bwrap=False,
                          build_dir=str(tmp_path / "build"), progress=False) as verifier, \
            pytest.raises(ContextLoadError) as info:
        verifier.check(task, task.reference_proof)  # refused before any server starts
    assert str(info.value) == (f"task arm.bignum_demo.PAIR_A: object file arm/generic/bignum_demo.o is not built in "
                               f"{checkout} (the context reads it); build it: make -C {checkout}/arm generic/bignum_demo.o")
    assert verifier.stats["server_starts"] == 0


# --------------------------------------------------------------------------------------------
# prover tier: Debian's HOL Light checks imported tasks (one server, the `arm` base of a small checkout)

LOADABLE = {
    "arm/Makefile": "OBJ = generic/bignum_demo.o\n",
    "arm/proofs/base.ml": 'loadt "common/overlap.ml";;\n',
    "common/overlap.ml": "let OV_ADD = prove(`!n. n + 0 = n`, ARITH_TAC);;\n",
    # a file that ends in comments (one with a `;;` inside): camlp5 refuses them as a phrase before `;;`
    "common/extra.ml": "let EXTRA_DOUBLE = prove(`!n. 2 * n = n + n`, ARITH_TAC);;\n"
                       "(*\nlet OLD = prove(`F`, ALL_TAC);;\n*)\n(**********)\n",
    "arm/proofs/bignum_demo.ml": 'needs "arm/proofs/base.ml";;\nneeds "common/extra.ml";;\n'
                                 "let L1 = time prove(`!x. x + 1 > x`, ARITH_TAC);;\n"
                                 "let _ = prove(`F`, ALL_TAC);;\n"  # would fail if a context ran it
                                 "let L2 = prove(`!x. 2 * (x + 0) = x + x`, REWRITE_TAC[OV_ADD; EXTRA_DOUBLE]);;\n",
}


@pytest.mark.prover
@pytest.mark.slow  # its own HOL Light server on the task's base (a second load: 2-3 min idle, 17 min at load 10-20)
def test_imported_tasks_check_on_hol_light(tmp_path: Path):
    """Reference OK, ALL_TAC FAIL, CHEAT_TAC CHEATING on the real prover: the contexts (cheated pieces,
    a needs-loaded file, an anonymous proof that would fail) load on the base the task names, and a
    reference proof may use both a lemma the base proved and one the context cheated."""
    from proofgym.envs.tasks.hol_build import validate_tasks
    from proofgym.envs.types import Verdict
    from proofgym.envs.verifiers.hol_light import HolLightVerifier, hol_light_installed

    if not hol_light_installed():
        pytest.skip("HOL Light is not installed: apt-get install hol-light libnum-ocaml-dev")
    root = tmp_path / "s2n-bignum"
    on_arm = _loadable_checkout(root)
    with HolLightVerifier(bases=s2n_bases(root), progress=False) as verifier:
        kept = validate_tasks(on_arm, verifier, rule=TimeoutRule())
        failed = {t.id: verifier.check(t, "ALL_TAC").verdict for t in on_arm}
    assert {t.id for t in kept} == {t.id for t in on_arm}  # reference OK and CHEAT_TAC CHEATING, each
    assert set(failed.values()) == {Verdict.FAIL}


def _inline(context: str, cwd: Path, loaded: set[tuple[str, str]] | None = None) -> str:
    """A context's text with its loads of checkout files replaced by the files' text, as hol_loader.ml runs
    them (``needs`` once per basename and digest): the same phrases, runnable where the checkout is not."""
    loaded = set() if loaded is None else loaded
    out: list[str] = []
    for ph in split_phrases(context):
        m = re.fullmatch(r'\s*(needs|loadt)\s+"([^"]+)"\s*', ph.text)
        path = None if m is None else Path(m.group(2)) if Path(m.group(2)).is_absolute() else cwd / m.group(2)
        if m is None or not path.is_file():
            if ph.text.strip():
                out.append(ph.text.strip("\n") + ";;\n")
            continue
        fileid = (path.name, hashlib.md5(path.read_bytes()).hexdigest())  # noqa: S324
        if m.group(1) == "needs" and fileid in loaded:
            continue
        out.append(_inline(path.read_text(), cwd, loaded))
        loaded.add(fileid)
    return "".join(out)


def _loadable_checkout(root: Path) -> list:
    for rel, text in LOADABLE.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    tasks, _ = import_s2n(root, hol_dir="/usr/share/hol-light")
    on_arm = [t for t in tasks if t.metadata["base"] == "arm"]
    assert {t.id for t in on_arm} == {"common.extra.EXTRA_DOUBLE", "arm.bignum_demo.L1", "arm.bignum_demo.L2"}
    return on_arm


@pytest.mark.prover
def test_imported_contexts_check_on_the_plain_base(hol, tmp_path: Path):
    """The imported tasks' own context text (the base's setup, then the cheated pieces with a needs-loaded
    file and an anonymous proof that would fail if it ran), inlined, on the run-wide plain server: reference
    OK, ALL_TAC FAIL, CHEAT_TAC CHEATING. The loading of the pieces from the checkout on the task's own base
    is the slow tier's test_imported_tasks_check_on_hol_light."""
    from proofgym.envs.types import Verdict

    root = tmp_path / "s2n-bignum"
    for task in _loadable_checkout(root):
        context = _inline(task.metadata["base_setup"] + task.context, root)
        assert "loadt" not in context and "needs" not in context
        assert ("let _ = prove(`F`, CHEAT_TAC)" in context) == (task.id == "arm.bignum_demo.L2")
        plain = replace(task, context=context, metadata={})
        got = [hol.check(plain, proof).verdict for proof in (task.reference_proof, "ALL_TAC", "CHEAT_TAC")]
        assert got == [Verdict.OK, Verdict.FAIL, Verdict.CHEATING], (task.id, context)


def test_a_lib_base_routes_through_base_ml_even_when_it_starts_with_an_s2n_load(checkout: Path):
    (checkout / "arm" / "proofs" / "base.ml").write_text('loadt "common/overlap.ml";;\nloadt "arm/proofs/instruction.ml";;\n')
    instruction = checkout / "arm" / "proofs" / "instruction.ml"
    instruction.write_text(instruction.read_text().replace('needs "common/overlap.ml";;\n', ""))  # only base.ml loads it
    tasks, _ = import_s2n(checkout, hol_dir="")
    lib = next(b for b in s2n_bases(checkout) if b.name == "arm-lib")
    assert lib.setup == ""
    task = next(t for t in tasks if t.id == "arm.instruction.INSTR_A")
    assert task.metadata["base"] == "arm-lib"
    assert _flatten(task.context, set(), checkout)[0].startswith("let OVERLAP_LEMMA = prove")
