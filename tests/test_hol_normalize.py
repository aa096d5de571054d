"""Fast tier: what proofgym makes of a HOL Light submission before the server sees it, and how it reads goals.

These pin the exact text; the prover-tier test at the end checks each normalised shape of the verdict table on the
real server (the ``hol`` fixture; skipped where HOL Light is not installed).
"""

from __future__ import annotations

import pytest

from proofgym.envs.errors import InvalidSubmission, VerifierCrashed
from proofgym.envs.types import Goal, Task, Verdict
from proofgym.envs.verifiers.hol_light.proof import normalize_proof
from proofgym.envs.verifiers.hol_light.verifier import _parse_goals

FOLD = "(fun gl -> List.fold_left (fun gs step -> step gs) (mk_goalstate gl) [{}])"


@pytest.mark.parametrize(("proof", "expected"), [
    ("ARITH_TAC", "ARITH_TAC"),
    ("ARITH_TAC;;", "ARITH_TAC"),
    ("ARITH_TAC;; (* done *)", "ARITH_TAC"),
    ("(* first *) REWRITE_TAC[ADD_CLAUSES] THEN ARITH_TAC;;\n\n(* QED *)", "REWRITE_TAC[ADD_CLAUSES] THEN ARITH_TAC"),
    ('REWRITE_TAC[] THEN (fun g -> failwith "(* not a comment *)")',
     'REWRITE_TAC[] THEN (fun g -> failwith "(* not a comment *)")'),
    ("let ADD_0 = prove(`!n. n + 0 = n`, ARITH_TAC);;", "ARITH_TAC"),
    ("prove (`!n. n + 0 = n`,\n  INDUCT_TAC THEN ARITH_TAC)", "INDUCT_TAC THEN ARITH_TAC"),
    ("g `1 + 1 = 2`;;\ne(ARITH_TAC);;", "(ARITH_TAC)"),
    ("e ARITH_TAC;;", "ARITH_TAC"),
    ("e(ARITH_TAC);;", "(ARITH_TAC)"),
    ("set_goal([], `1 + 1 = 2`);;\ne(ARITH_TAC);;\nlet th = top_thm();;", "(ARITH_TAC)"),
    ("g `p /\\ q`;; e(CONJ_TAC);; e(A);; b();; e (B);; r 1;; e C;; top_thm();;",
     FOLD.format("by ((CONJ_TAC)); by ((B)); rotate (1); by (C)")),
    # not goalstack: unchanged, the server judges (several phrases are refused there)
    ("ARITH_TAC;; ARITH_TAC", "ARITH_TAC;; ARITH_TAC"),
    ("ALL_TAC;; let prove (t, tac) = TRUTH;;", "ALL_TAC;; let prove (t, tac) = TRUTH;;"),
    ("g `1 = 1`;; e(ALL_TAC);; let prove (t, tac) = TRUTH;;", "g `1 = 1`;; e(ALL_TAC);; let prove (t, tac) = TRUTH;;"),
    ("g `1 = 1`;; #load \"unix.cma\";; e(REFL_TAC);;", "g `1 = 1`;; #load \"unix.cma\";; e(REFL_TAC);;"),
    ("exec \"x\"", "exec \"x\""),
])
def test_normalize_proof(proof, expected):
    assert normalize_proof(proof) == expected


@pytest.mark.parametrize(("proof", "why"), [
    ("g `1 + 1 = 2`;;", r"no e\(\.\.\.\) step"),
    ("g `1 + 1 = 2`;; b();;", "no step to undo"),
    ('g `1 + 1 = 2`;; e(ARITH_TAC);; print_string "done";;', "not a goalstack command"),
])
def test_a_goalstack_script_that_cannot_be_converted_says_why(proof, why):
    with pytest.raises(InvalidSubmission, match=why):
        normalize_proof(proof)


def _frame(count: int, goals: list[tuple[list[bytes], bytes]]) -> bytes:
    out = [f"{count} {len(goals)}\n".encode()]
    for hyps, concl in goals:
        out.append(f"{len(hyps)}\n".encode())
        out += [f"{len(t)}\n".encode() + t for t in (*hyps, concl)]
    return b"".join(out)


def test_goals_are_read_by_length_so_no_byte_can_forge_one():
    sneaky = b"a\x1db\x1ec\x1fd\n5\n"
    goals = _parse_goals(_frame(2, [([sneaky], sneaky), ([], b"x = x")]))
    assert goals == (Goal(("a\x1db\x1ec\x1fd\n5\n",), "a\x1db\x1ec\x1fd\n5\n"), Goal((), "x = x"))
    assert _parse_goals(b"") == ()


def test_goals_past_the_budget_are_counted_not_dropped():
    goals = _parse_goals(_frame(5, [([], b"p")]))
    assert len(goals) == 5 and goals[0] == Goal((), "p")
    assert all("not shown" in g.conclusion for g in goals[1:])


@pytest.mark.parametrize("data", [b"2 1\n0\n99\nshort", b"1 1\n0\n1\npq", b"1 2\n0\n1\np", b"x\n", b"1 1\n1\n"])
def test_malformed_goals_are_a_crash_not_a_verdict(data):
    with pytest.raises(VerifierCrashed):
        _parse_goals(data)


# ---------------------------------------------------------------------------------------------
# prover tier: the verdict table's normalisation rows on the real server (docs/verdicts.md, HOL Light)

_PRE = "\ufeff"  # a BOM


@pytest.mark.prover
@pytest.mark.parametrize(("goal", "proof", "verdict"), [
    # one tactic expression, with or without a trailing ;;
    ("1 + 1 = 2", "ARITH_TAC", Verdict.OK),
    ("1 + 1 = 2", "ARITH_TAC;;", Verdict.OK),
    # comments around the tactic, a comment after the final ;;
    ("1 + 1 = 2", "(* arithmetic *) ARITH_TAC;; (* done *)", Verdict.OK),
    # a BOM, zero-width and no-break spaces, Markdown fences, an English remark after ;;, a Coq-style period
    ("1 + 1 = 2", _PRE + "ARITH_TAC", Verdict.OK),
    ("1 + 1 = 2", "REWRITE_TAC[]\u200b THEN\u00a0ARITH_TAC", Verdict.OK),
    ("1 + 1 = 2", "```ocaml\nARITH_TAC\n```", Verdict.OK),
    ("1 + 1 = 2", "ARITH_TAC;;\nThis completes the proof.", Verdict.OK),
    ("1 + 1 = 2", "ARITH_TAC.", Verdict.OK),
    # ... and a cheat in what remains is still judged
    ("1 + 1 = 3", "```ocaml\nCHEAT_TAC\n```", Verdict.CHEATING),
    ("1 + 1 = 3", "CHEAT_TAC.", Verdict.CHEATING),
    # prove(`goal`, TAC) and let NAME = prove(...): TAC is checked against the task's goal
    ("!n. n + 0 = n", "prove(`!n. n + 0 = n`, INDUCT_TAC THEN ASM_REWRITE_TAC[ADD_CLAUSES])", Verdict.OK),
    ("!n. n + 0 = n", "let ADD_0 = prove(`!n. n + 0 = n`, REWRITE_TAC[ADD_CLAUSES]);;", Verdict.OK),
    ("1 + 1 = 3", "let X = prove(`1 + 1 = 2`, ARITH_TAC);;", Verdict.FAIL),  # the task's goal, not the copy's
    # a goalstack script: its steps, e on the first goal only
    ("1 + 1 = 2", "g `1 + 1 = 2`;;\ne(ARITH_TAC);;\ntop_thm();;", Verdict.OK),
    ("2 + 2 = 4 /\\ (p ==> p)", "g `2 + 2 = 4 /\\ (p ==> p)`;; e(CONJ_TAC);; r 1;; e(DISCH_THEN ACCEPT_TAC);; "
                                "e(CONV_TAC NUM_REDUCE_CONV);;", Verdict.OK),
    ("1 + 1 = 3", "g `1 + 1 = 3`;;\ne(CHEAT_TAC);;", Verdict.CHEATING),
    # a goalstack script with another expression phrase, or with no e: ERROR naming why
    ("1 + 1 = 2", 'g `1 + 1 = 2`;;\ne(ARITH_TAC);;\nprint_string "done";;', Verdict.ERROR),
    ("1 + 1 = 2", "g `1 + 1 = 2`;;", Verdict.ERROR),
    # several phrases: never run; ERROR, or CHEATING where one redefines what the checks use or is a directive
    ("1 + 1 = 2", "ARITH_TAC;; ARITH_TAC", Verdict.ERROR),
    ("1 + 1 = 3", "ALL_TAC;; let prove (t, tac) = TRUTH;;", Verdict.CHEATING),
    ("1 + 1 = 3", 'ALL_TAC;; #use "x.ml";;', Verdict.CHEATING),
])
def test_each_normalised_shape_on_the_real_prover(hol, goal: str, proof: str, verdict: Verdict):
    task = Task(id="normalize", system="hol_light", context="", statement=f"`{goal}`", reference_proof="ALL_TAC",
                timeout_s=60)
    result = hol.check(task, proof)
    assert result.verdict is verdict, (proof, result)
