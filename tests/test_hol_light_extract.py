"""Fast tier: HOL Light problem extraction, categories, ids, timeouts, the prompt (no prover needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from proofgym.envs.errors import TaskFormatError
from proofgym.envs.tasks.hol_extract import (
    ExtractionReport,
    TimeoutRule,
    category,
    extract_file,
    parse_prove,
    split_phrases,
)
from proofgym.envs.types import Task
from proofgym.envs.verifiers.hol_light.proof import goal_text
from proofgym.envs.verifiers.hol_light.verifier import _HolSandbox, _ocaml_string, context_key

SOURCE = """\
(* A file in the style of HOL Light's library. ;; inside a comment *)
needs "Library/floor.ml";;

let FOO = prove
 (`!n. n + 0 = n`,
  REWRITE_TAC[ADD_CLAUSES]);;

let helper = "a;;b" and c = '"';;

let BAR = prove(`1 + 1 = 2`, ARITH_TAC);;
let BAR = prove(`2 + 2 = 4`, ARITH_TAC);;
let BAR_EQUIV = prove(`T`, REWRITE_TAC[]);;
let DUP = prove(`!n.   n + 0 = n`, ARITH_TAC);;
let NOQUOTE = prove(some_term, ARITH_TAC);;
let W = prove(`!x:int64. word_add x (word 0) = x`, CONV_TAC WORD_RULE);;
let S_CORRECT = prove(`ensures arm (\\s. read PC s = a) (\\s. T) (MAYCHANGE [PC])`, CHEAT_TAC);;
let P = prove(`nonoverlapping (a,8) (b,8) ==> T`, REWRITE_TAC[]);;
"""


@pytest.fixture
def library(tmp_path: Path) -> Path:
    path = tmp_path / "Library" / "demo.ml"
    path.parent.mkdir()
    path.write_text(SOURCE)
    return path


def test_split_phrases_skips_comments_strings_and_quotes():
    phrases = split_phrases("let a = `x;;y`;; (* ;; *) let b = \"c;;d\";; let c = 'x';;")
    assert [p.text.strip() for p in phrases] == ["let a = `x;;y`", "(* ;; *) let b = \"c;;d\"", "let c = 'x'"]


def test_parse_prove():
    assert parse_prove("let FOO = prove\n (`!n. n = n`,\n  REFL_TAC)") == ("FOO", "!n. n = n", "REFL_TAC")
    assert parse_prove("let X = prove(t, ALL_TAC)") == ("X", None, "ALL_TAC")
    assert parse_prove("let X = 1") is None
    assert parse_prove("let X = prove_by_refinement(`T`, [])") is None


def test_extract_ids_categories_dedup_and_setup(library: Path):
    report = ExtractionReport()
    tasks = extract_file(library, rel="Library/demo.ml", arch="arm", suite="demo", report=report)
    ids = [t.id for t in tasks]
    assert ids == ["arm.demo.FOO", "arm.demo.BAR.0", "arm.demo.BAR.1", "arm.demo.W", "arm.demo.S_CORRECT",
                   "arm.demo.P"]
    assert report.dropped == {"goal without backquotes": 1,
                              "name with _EQUIV / SUBROUTINE_SAFE / SUBROUTINE_CORRECT": 1, "duplicate goal": 1}
    by_id = {t.id: t for t in tasks}
    assert by_id["arm.demo.W"].category == "bit_vector"
    assert by_id["arm.demo.S_CORRECT"].category == "functional_correctness_arm"
    assert by_id["arm.demo.P"].category == "program_state"
    assert by_id["arm.demo.FOO"].category == "generic"
    bar1 = by_id["arm.demo.BAR.1"]
    assert bar1.statement == "`2 + 2 = 4`" and bar1.reference_proof == "ARITH_TAC"
    # the setup is the file prefix, earlier proofs replaced by CHEAT_TAC, needs kept
    assert 'needs "Library/floor.ml";;' in bar1.context
    assert "REWRITE_TAC[ADD_CLAUSES]" not in bar1.context and "CHEAT_TAC" in bar1.context
    assert "let BAR = prove\n (`1 + 1 = 2`,\n  CHEAT_TAC);;" in bar1.context
    assert "2 + 2 = 4" not in bar1.context
    assert bar1.metadata["source"] == "Library/demo.ml" and bar1.metadata["base"] == "plain"
    assert all(t.system == "hol_light" for t in tasks)


@pytest.mark.parametrize(("name", "goal", "expected"), [
    ("X_SUBROUTINE_CORRECT", "ensures", None),
    ("X_SUBROUTINE_SAFE", "T", None),
    ("X_CORRECT", "ensures x86 P Q R", "functional_correctness_x86"),
    ("X_CORRECT", "T", "generic"),
    ("Y", "read RIP s = x", "program_state"),
    ("Y", "s :> x", "program_state"),
    ("Y", "contained_modulo a b", "program_state"),
    ("Y", "val (w:int64) < 5", "bit_vector"),
    ("Y", "words_of x", "bit_vector"),
    ("Y", "sword x = y", "generic"),
    ("Y", "interval x", "generic"),
])
def test_categories(name, goal, expected):
    arch = "x86" if "x86" in goal else "arm"
    assert category(name, goal, arch) == expected


def test_timeout_rule():
    rule = TimeoutRule()
    assert rule(1.0) == 120 and rule(100.0) == 200 and rule(200.0) == 1000 and rule(5000.0) == 10800
    assert TimeoutRule(k_small=10, lo_s=30)(2.0) == 30 and TimeoutRule(k_small=10, lo_s=5)(2.0) == 20


def test_goal_text_and_keys():
    assert goal_text("  `!n. n = n` ") == "!n. n = n"
    for bad in ("n = n", "`a` `b`", "``"):
        with pytest.raises(TaskFormatError):
            goal_text(bad)
    assert context_key("a") != context_key("b") and len(context_key("")) == 24
    assert _ocaml_string('a"b\\c\n∀') == '"a\\"b\\\\c\\010\\226\\136\\128"'


def test_sandbox_keeps_only_the_root_capabilities():
    sandbox = _HolSandbox(use_bwrap=None, keep_caps=True)
    if not sandbox.isolated:
        pytest.skip("bubblewrap is not usable here")
    cmd = sandbox.command(["true"], Path("/tmp"))
    head = cmd[: cmd.index("--")]
    assert "--unshare-all" not in head and "--unshare-pid" in head and "--unshare-net" in head
    i = head.index("--cap-drop")
    assert head[i + 1] == "ALL"
    assert head[i + 2: i + 8] == ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_KILL"]


def test_prompt_is_the_benchmark_template():
    from proofgym.agents.prompts import prompts_for

    task = Task(id="t", system="hol_light", context="let X = 1;;", statement="`1 + 1 = 2`",
                reference_proof="ARITH_TAC")
    messages = prompts_for("hol_light").messages(task)
    user = messages[-1]["content"]
    assert "REWRITE_TAC[LEFT_ADD_DISTRIB] THEN GEN_REWRITE_TAC LAND_CONV [ADD_SYM] THEN REFL_TAC" in user
    assert "CHEAT_TAC" in user and "`1 + 1 = 2`" in user and "let X = 1;;" in user
    assert user.count("Goal:") == 2


def test_a_build_report_lists_every_exclusion_by_id_and_never_calls_one_cheating():
    """Issue 26: the HOL Light and s2n-bignum build reports name each task left out with its reason; a library's
    proof refused by the checker says what it relies on, not "CHEATING". ``checked`` is a real SuiteValidation
    filled by hand with real CheckResults (no prover: the wording is what is tested)."""
    from collections import Counter

    from proofgym.envs.tasks.hol_build import HolBuildReport, hol_exclusions
    from proofgym.envs.types import CheckResult, Verdict
    from proofgym.envs.verifiers.validation import SuiteValidation

    checked = SuiteValidation(
        excluded=Counter({"reference proof CHEATING": 1, "reference proof TIMEOUT": 1, "CHEAT_TAC was FAIL, not "
                          "CHEATING": 1, "context does not load: x": 1}),
        reasons={"hol.a.refused": "reference proof CHEATING", "hol.a.slow": "reference proof TIMEOUT",
                 "hol.a.probe": "CHEAT_TAC was FAIL, not CHEATING", "hol.a.ctx": "context does not load: x"},
        rejected={"hol.a.ctx": "context does not load: x\nTraceback ..."},
        references={"hol.a.refused": CheckResult(Verdict.CHEATING, reasons=("uses foo: reaches what a proof may "
                                                                           "not use",)),
                    "hol.a.slow": CheckResult(Verdict.TIMEOUT, reasons=("ran past its deadline",)),
                    "hol.a.probe": CheckResult(Verdict.OK)})
    got = hol_exclusions(checked)
    assert set(got) == {"hol.a.refused", "hol.a.slow", "hol.a.probe", "hol.a.ctx"}
    assert got["hol.a.refused"] == ("excluded: relies on what the task does not allow (uses foo: reaches what a "
                                    "proof may not use)")
    assert got["hol.a.slow"] == "excluded: reference proof TIMEOUT (ran past its deadline)"
    assert got["hol.a.probe"] == "excluded: CHEAT_TAC was FAIL, not CHEATING"
    assert got["hol.a.ctx"] == "excluded: context does not load: x"
    report = HolBuildReport(suite="hol-light", out="x.jsonl", hol_dir="/h", files=[], exclusions=got)
    text = report.render()
    for task_id, reason in got.items():
        assert f"  {task_id}: {reason}" in text
    assert "reference proof CHEATING" not in text
