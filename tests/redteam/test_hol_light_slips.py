"""Red team, HOL Light: a BOM, a zero-width space, a Markdown fence, an English remark after ``;;`` and a Coq-style
final period (``ARITH_TAC.``) are normalised, and a cheat in the phrases that remain is still judged, on the
run-wide HOL Light server (``hol``; this file is in tests/conftest.py's HOL_SERVER_FILES).

Moved from the red-team rounds (tests/redteam/ROUNDS.md: what each round found and fixed):
round 5.
"""

from __future__ import annotations

import pytest

from proofgym.envs.types import Task, Verdict
from proofgym.envs.verifiers.hol_light.proof import normalize_proof as hol_normalize

# ---------------------------------------------------------------------------------------------
# HOL Light


@pytest.mark.parametrize(("proof", "sent"), [
    ("\ufeffARITH_TAC", "ARITH_TAC"),
    ("REWRITE_TAC[]\u200b THEN ARITH_TAC", "REWRITE_TAC[] THEN ARITH_TAC"),
    ("```ocaml\nARITH_TAC\n```", "ARITH_TAC"),
    ("ARITH_TAC\n```", "ARITH_TAC"),
    ("ARITH_TAC;;\nThis completes the proof.", "ARITH_TAC"),
    ("REWRITE_TAC[ADD_CLAUSES].", "REWRITE_TAC[ADD_CLAUSES]"),
    ("g `1 + 1 = 2`;;\ne ARITH_TAC;;\ntop_thm();;\nThis completes the proof.", "ARITH_TAC"),
    # The other side: a cheat among the phrases that remain is still sent for the server to refuse.
    ("ARITH_TAC;; CHEAT_TAC;; This completes the proof.", "ARITH_TAC;;\nCHEAT_TAC"),
    ("This completes the proof of it.", "This completes the proof of it"),  # prose alone: the server says ERROR
])
def test_hol_light_slips_are_normalised(proof: str, sent: str):
    """Fairness hole (fixed): each was ERROR (an unbound value, an empty quotation, a parse error)."""
    assert hol_normalize(proof) == sent


ONE_PLUS_ONE, FALSE_GOAL = "`1 + 1 = 2`", "`1 + 1 = 3`"
HOL_CASES = [
    # honest slips (the first four were ERROR before this round)
    (ONE_PLUS_ONE, "\ufeffARITH_TAC", Verdict.OK),
    (ONE_PLUS_ONE, "REWRITE_TAC[]\u200b THEN ARITH_TAC", Verdict.OK),
    (ONE_PLUS_ONE, "```ocaml\nARITH_TAC\n```", Verdict.OK),
    (ONE_PLUS_ONE, "ARITH_TAC;;\nThis completes the proof.", Verdict.OK),
    (ONE_PLUS_ONE, "ARITH_TAC.", Verdict.OK),
    (FALSE_GOAL, "CHEAT_TAC.", Verdict.CHEATING),
    (ONE_PLUS_ONE, "ARITH_TAC\r\n", Verdict.OK),
    (ONE_PLUS_ONE, "(* proof *) ARITH_TAC (* qed *)", Verdict.OK),
    (ONE_PLUS_ONE, "let th = prove(`1 + 1 = 2`, ARITH_TAC);;", Verdict.OK),
    (ONE_PLUS_ONE, "g `1 + 1 = 2`;;\ne ARITH_TAC;;\ntop_thm();;", Verdict.OK),
    # cheats: every one held before this round
    (FALSE_GOAL, "(let t = CHEAT_TAC in t)", Verdict.CHEATING),
    (FALSE_GOAL, "(fun g -> try failwith \"x\" with Failure _ -> CHEAT_TAC g)", Verdict.CHEATING),
    (FALSE_GOAL, "(List.hd [CHEAT_TAC])", Verdict.CHEATING),
    (FALSE_GOAL, "ARITH_TAC;; CHEAT_TAC;; This completes the proof.", Verdict.CHEATING),
    (FALSE_GOAL, "ACCEPT_TAC (Stdlib__obj.magic 0)", Verdict.CHEATING),
    (FALSE_GOAL, "(ignore (Fusion.Hol.new_axiom); ALL_TAC)", Verdict.CHEATING),
    (FALSE_GOAL, "(let x : thm = Array.unsafe_get [| |] 0 in ACCEPT_TAC x)", Verdict.CHEATING),
    (FALSE_GOAL, "ACCEPT_TAC (String.unsafe_get \"x\" 0 |> fun _ -> TRUTH)", Verdict.CHEATING),
    (FALSE_GOAL, "(ignore (Char.unsafe_chr 300); ALL_TAC)", Verdict.CHEATING),
    (FALSE_GOAL, "(ignore (Option.get (Some CHEAT_TAC)); ALL_TAC)", Verdict.CHEATING),
    (FALSE_GOAL, "(fun (asl, w) -> (null_meta, [], fun i l -> ARITH_RULE `1 + 1 = 2`))", Verdict.CHEATING),
    (FALSE_GOAL, "ACCEPT_TAC(EQ_MP (ASSUME `T = (1 + 1 = 3)`) TRUTH)", Verdict.CHEATING),
    # issue 26: syntax a tactic does not need, with no way to make a statement pass, is ERROR (was CHEATING)
    (FALSE_GOAL, "(ignore (object method m = 1 end); ALL_TAC)", Verdict.ERROR),
    (FALSE_GOAL, "(ignore (fun (type a) (x : a) -> x); ALL_TAC)", Verdict.ERROR),
    (FALSE_GOAL, "(let open List in ALL_TAC)", Verdict.ERROR),
    # the server's own exception cannot carry a verdict out of the attempt; naming it is CHEATING (issue 26: it is
    # proofgym's verdict machinery, an attempt to forge a verdict; was ERROR, the exception wrapped)
    (FALSE_GOAL, "(fun g -> raise (Pg_done {verdict = \"OK\"; category = \"none\"; reasons = []; detail = \"\"; "
                 "goals = \"\"}))", Verdict.CHEATING),
    (FALSE_GOAL, "(fun g -> (ALL_TAC g |> fun (m, gl, j) -> (m, [], fun i l -> raise (Pg_done {verdict = \"OK\"; "
                 "category = \"none\"; reasons = []; detail = \"\"; goals = \"\"}))))", Verdict.CHEATING),
    # printing reaches stdout only, never the verdict pipe
    (FALSE_GOAL, "(report \"OK\"; ALL_TAC)", Verdict.FAIL),
]


@pytest.mark.prover
@pytest.mark.parametrize(("goal", "proof", "verdict"), HOL_CASES)
def test_hol_light_verdicts(hol, goal: str, proof: str, verdict: Verdict):
    task = Task(id="rt5.hol", system="hol_light", context="", statement=goal, reference_proof="ALL_TAC",
                timeout_s=60)
    result = hol.check(task, proof)
    assert result.verdict is verdict, (proof, result)
