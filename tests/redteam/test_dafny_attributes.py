"""Red team, Dafny: attributes and budgets. An attribute that is neither allowed nor known to weaken a check
(``{:main}``, a typo) is ERROR saying to remove it, apart from the named cheats (``{:options}``,
``{:assumption}``, ``{:termination}``); a server death under the declarations request never makes a cheat OK;
a helper that runs out of z3's budget is TIMEOUT, never OK nor CHEATING.

Moved from the red-team rounds (tests/redteam/ROUNDS.md: what each round found and fixed):
rounds 4 and 5.
"""

from __future__ import annotations

import pytest

from proofgym.envs.types import Task, Verdict


@pytest.mark.prover
def test_a_dafny_budget_that_runs_out_is_timeout_never_ok_nor_cheating():
    """Dafny's rlimit: an honest program whose helper runs out of z3's budget is TIMEOUT (not a dropped obligation
    called CHEATING), and a false helper that runs out never makes the target OK."""
    from tests.test_dafny_common import NO_DAFNY, have_dafny

    if not have_dafny():
        pytest.skip(NO_DAFNY)
    from proofgym.envs.verifiers.dafny import DafnyVerifier
    from tests.redteam.test_dafny_cheats import FALSE
    from tests.test_deterministic_budgets import DAFNY_TASK

    helper = "lemma Helper(n: nat)\n  ensures n * (n + 1) / 2 >= 0\n{\n}\n"
    false_helper = "lemma Helper()\n  ensures false\n{\n}\nlemma Impossible()\n  ensures false\n{\n  Helper();\n}\n"
    with DafnyVerifier(audit="never", rlimit=100_000) as verifier:
        honest = verifier.check(DAFNY_TASK, helper + DAFNY_TASK.reference_proof)
        cheat = verifier.check(FALSE, false_helper)
    assert honest.verdict is Verdict.TIMEOUT, honest
    assert cheat.verdict is not Verdict.OK, cheat


# ---------------------------------------------------------------------------------------------
# Dafny

ABS_STMT = "method Abs(x: int) returns (y: int)\n  ensures y >= 0\n  ensures y == x || y == -x\n"
ABS_BODY = "{\n  if x < 0 { y := -x; } else { y := x; }\n}\n"


def _dafny(tid: str, statement: str) -> Task:
    return Task(id=f"rt5.{tid}", system="dafny", context="", statement=statement, reference_proof="",
                category="P1", timeout_s=30)


def test_an_unknown_dafny_attribute_is_reported_apart_from_the_cheats():
    """Fast tier: ``banned_constructs`` hands an attribute it cannot classify to the caller's ERROR list."""
    from proofgym.envs.verifiers.dafny.integrity import banned_constructs
    from proofgym.envs.verifiers.dafny.lexer import tokenize

    tokens = tokenize("method {:foo} Main() {}\nlemma {:axiom} A() ensures false\nlemma {:options \"x\"} B() {}\n")
    unknown: list[str] = []
    cheats = banned_constructs(tokens, unknown=unknown)
    assert any("{:axiom}" in r for r in cheats) and any("{:options" in r for r in cheats)
    assert len(unknown) == 1 and "remove the attribute {:foo}" in unknown[0]
    assert any("{:foo}" in r for r in banned_constructs(tokens))  # without the list: refused among the cheats


DAFNY_CASES = {
    # Fairness hole (fixed): an attribute proofgym does not know was CHEATING; {:main} is known harmless since issue 26.
    "main-attribute": (ABS_STMT, "method {:main} Main() {\n}\n" + ABS_STMT + ABS_BODY, Verdict.OK),
    "unknown-attribute-on-false-lemma": ("lemma Impossible()\n  ensures false\n",
                                         "lemma {:foo} Impossible()\n  ensures false\n{\n}\n", Verdict.ERROR),
    # ... and one with a cheat beside it is still CHEATING.
    "unknown-attribute-and-assume": ("lemma Impossible()\n  ensures false\n",
                                     "lemma {:foo} Impossible()\n  ensures false\n{\n  assume false;\n}\n",
                                     Verdict.CHEATING),
    "assumption-variable": (ABS_STMT, ABS_STMT + "{\n  ghost var {:assumption} a: bool;\n  a := a && x >= 0;\n"
                                      "  y := x;\n}\n", Verdict.CHEATING),
    "options-no-cheating-off": ("lemma Impossible()\n  ensures false\n",
                                "module {:options \"/noCheating:0\"} M {\n  lemma L() ensures false\n}\n"
                                "lemma Impossible()\n  ensures false\n{\n  M.L();\n}\n", Verdict.CHEATING),
    "termination-false": ("lemma Impossible()\n  ensures false\n",
                          "trait {:termination false} T {\n  lemma L() ensures false\n}\n"
                          "lemma Impossible()\n  ensures false\n{\n}\n", Verdict.CHEATING),
    # Held before this round.
    "bodyless-loop-attribute-on-invariant": (ABS_STMT, ABS_STMT + "{\n  y := x;\n  while y < 0\n"
                                                                  "    invariant {:nowarn} y == x || y == -x\n}\n",
                                             Verdict.CHEATING),
    "assume-in-calc-hint": ("lemma Impossible()\n  ensures false\n",
                            "lemma Impossible()\n  ensures false\n{\n  calc {\n    1;\n  ==  { assume false; }\n"
                            "    2;\n  }\n}\n", Verdict.CHEATING),
    "assume-in-assert-by": ("lemma Impossible()\n  ensures false\n",
                            "lemma Impossible()\n  ensures false\n{\n  assert 1 == 2 by { assume false; }\n}\n",
                            Verdict.CHEATING),
    "ensures-reordered": (ABS_STMT, "method Abs(x: int) returns (y: int)\n  ensures y == x || y == -x\n"
                                    "  ensures y >= 0\n" + ABS_BODY, Verdict.OK),
    # The same contract as one conjunction: OK since red team round 7 (clauses compare conjunct by conjunct; a
    # changed conjunct is still CHEATING, tests/redteam/test_dafny_declarations.py).
    "ensures-merged": (ABS_STMT, "method Abs(x: int) returns (y: int)\n  ensures y >= 0 && (y == x || y == -x)\n"
                       + ABS_BODY, Verdict.OK),
    "crlf-and-comment": (ABS_STMT, (ABS_STMT + ABS_BODY + "// done\n").replace("\n", "\r\n"), Verdict.OK),
    "prose-after-program": (ABS_STMT, ABS_STMT + ABS_BODY + "This program computes the absolute value.\n",
                            Verdict.ERROR),
}


@pytest.mark.prover
@pytest.mark.parametrize(("statement", "program", "verdict"), list(DAFNY_CASES.values()), ids=list(DAFNY_CASES))
def test_dafny_verdicts(statement: str, program: str, verdict: Verdict):
    from tests.test_dafny_common import NO_DAFNY, dafny_verifier, have_dafny

    if not have_dafny():
        pytest.skip(NO_DAFNY)
    result = dafny_verifier().check(_dafny("case", statement), program)
    assert result.verdict is verdict, result
    if verdict is Verdict.ERROR and "{:" in program:
        assert any("remove the attribute" in r for r in result.reasons), result


@pytest.mark.prover
def test_a_server_death_under_the_declarations_request_never_makes_a_cheat_ok(monkeypatch):
    """The other side of the symbols retry (commit 0c4bd64): a cheat whose first declarations request dies is still
    judged on the fresh server's answer, and one that kills both is never OK."""
    from proofgym.envs.verifiers.sandbox.warm import ProcessDied
    from tests.redteam.test_dafny_cheats import FALSE, FALSE_HELPER
    from tests.test_dafny_common import NO_DAFNY, dafny_verifier, fail_symbols_requests, have_dafny

    if not have_dafny():
        pytest.skip(NO_DAFNY)
    verifier = dafny_verifier()
    cheat = FALSE_HELPER + "lemma Impossible()\n  ensures false\n{\n  Helper();\n}\n"
    assert verifier.check(FALSE, cheat).verdict is Verdict.CHEATING  # the task's anchor is read (and kept) first
    failures = fail_symbols_requests(verifier, monkeypatch)
    failures[:] = [ProcessDied]
    assert verifier.check(FALSE, cheat).verdict is Verdict.CHEATING
    failures[:] = [ProcessDied, ProcessDied]
    assert verifier.check(FALSE, cheat).verdict not in (Verdict.OK, Verdict.TIMEOUT)
