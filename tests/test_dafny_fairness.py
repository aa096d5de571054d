"""Issue 26 for Dafny: three classes by construction, attributes judged by name and argument, contracts compared
modulo what does not change them.

The attribute table (``ATTRIBUTE_RULES`` in envs/verifiers/dafny/integrity.py) gives each attribute one class and one
reason; the contract comparison (envs/verifiers/dafny/contract.py) calls a header CHEATING only where it is shown
weaker than the statement's, ERROR for any other difference. The fast tier tests the two tables; the prover tier runs
every harmless attribute on the real Dafny 2.3, on an honest program (OK) and on a false lemma (still FAIL: it weakens
nothing), and the README's rows of declarations proofgym cannot place. Each fair case and the cheat beside it are in
the shipped corpus (envs/tasks/data/redteam-dafny.jsonl, tests/redteam/test_shipped_corpus.py).
"""

from __future__ import annotations

import re

import pytest

from proofgym.envs.types import Verdict
from proofgym.envs.verifiers.dafny.contract import canonical_clause, compare_header, conjuncts
from proofgym.envs.verifiers.dafny.integrity import (
    ATTRIBUTE_RULES,
    AttributeClass,
    banned_constructs,
    judge_attribute,
    split_header,
)
from proofgym.envs.verifiers.dafny.lexer import tokenize
from tests.test_dafny_common import dafny_verifier, dtask

# -- the attribute table ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("attribute", "cls"), [
    ("verify true", AttributeClass.HARMLESS), ("verify false", AttributeClass.CHEATING), ("verify 1", None),
    ("verify", None), ("split_here", AttributeClass.HARMLESS), ("vcs_split_on_every_assert", AttributeClass.HARMLESS),
    ("vcs_max_splits 4", AttributeClass.HARMLESS), ("timeLimit 20", AttributeClass.HARMLESS),
    ("timeLimit x", None), ("rlimit 1000", AttributeClass.HARMLESS), ("timeLimitMultiplier 2", AttributeClass.HARMLESS),
    ("print", AttributeClass.HARMLESS), ("main", AttributeClass.HARMLESS), ("trigger f ( x )", AttributeClass.HARMLESS),
    ("induction false", AttributeClass.HARMLESS), ("fuel F , 2", AttributeClass.HARMLESS),
    ("axiom", AttributeClass.CHEATING), ("extern", AttributeClass.CHEATING),
    ("extern \"name\"", AttributeClass.CHEATING), ("imported", AttributeClass.CHEATING),
    ("selective_checking", AttributeClass.CHEATING), ("start_checking_here", AttributeClass.CHEATING),
    ("termination false", AttributeClass.CHEATING), ("termination true", None), ("focus", None),
    ("autoReq", None), ("prover \"x\"", None), ("foo", None),
])
def test_an_attribute_is_judged_by_name_and_argument(attribute: str, cls: AttributeClass | None) -> None:
    name, _, arguments = attribute.partition(" ")
    rule = judge_attribute(name, arguments)
    assert (rule.cls if rule is not None else None) is cls, rule


def test_every_row_has_a_reason_and_no_name_and_argument_is_in_two_classes() -> None:
    for rule in ATTRIBUTE_RULES:
        assert rule.reason and rule.cls is not AttributeClass.UNKNOWN, rule
    for name in {r.name for r in ATTRIBUTE_RULES}:
        for arguments in ("", "true", "false", "1", "x", "\"x\""):
            classes = {r.cls for r in ATTRIBUTE_RULES if r.name == name and re.fullmatch(r.arguments, arguments)}
            assert len(classes) <= 1, (name, arguments, classes)


def test_the_reason_given_is_the_row_that_decided() -> None:
    """One row = class + reason: {:verify true} is never refused as 'turns verification off'."""
    tokens = tokenize("lemma {:verify true} {:verify false} {:timeLimit 5} {:foo} L() ensures true {}\n")
    unknown: list[str] = []
    cheats = banned_constructs(tokens, unknown=unknown)
    assert cheats == [f"attribute {{:verify false}} at line 1: {judge_attribute('verify', 'false').reason}"]
    assert len(unknown) == 1 and unknown[0].startswith("remove the attribute {:foo}")


# -- the contract comparison ------------------------------------------------------------------------------------

ABS = "(x: int) returns (y: int) ensures y >= 0 ensures y == x || y == -x"


def _compare(want: str, got: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    clauses = ("requires", "ensures", "modifies", "reads")
    w, g = split_header(tokenize(want)), split_header(tokenize(got))
    found = compare_header(w.signature, g.signature, {k: getattr(w, k) for k in clauses},
                           {k: getattr(g, k) for k in clauses})
    return found.weaker, found.other


@pytest.mark.parametrize("got", [
    "(x: int) returns (r: int) ensures r >= 0 ensures r == x || r == -x",
    "(n: int) returns (y: int) ensures y >= 0 ensures y == n || y == -n",
    "(y: int) returns (x: int) ensures x >= 0 ensures x == y || x == -y",
    "(x: int) returns (y: int) ensures (y == -x || y == x) && y >= 0",
    "(x: int) returns (y: int) ensures ((y >= 0)) ensures (y == x) || ((y == -x))",
    "(x: int) returns (y: int) requires true ensures y >= 0 ensures y == x || y == -x ensures y * y == x * x",
])
def test_the_same_contract_written_another_way(got: str) -> None:
    assert _compare(ABS, got) == ((), ())


@pytest.mark.parametrize(("got", "what"), [
    ("(x: int) returns (y: int) ensures y == x || y == -x", "ensures"),
    ("(x: int) returns (y: int) ensures y >= 0 || x > 0 ensures y == x || y == -x", "ensures"),
    ("(x: int) returns (y: int) ensures x > 9 ==> y >= 0 ensures y == x || y == -x", "ensures"),
    ("(x: int) returns (y: int) ensures (true) ensures y == x || y == -x", "ensures"),
    ("(x: int) returns (y: int) requires x > 0 ensures y >= 0 ensures y == x || y == -x", "requires"),
    ("(x: nat) returns (y: int) ensures y >= 0 ensures y == x || y == -x", "type"),
])
def test_a_weaker_contract_is_shown_weaker(got: str, what: str) -> None:
    weaker, other = _compare(ABS, got)
    assert len(weaker) == 1 and what in weaker[0] and not other, (weaker, other)


@pytest.mark.parametrize("got", [
    "(x: int) returns (y: int) ensures y > 0 ensures y == x || y == -x",  # another ensures, not shown weaker
    "(x: int) returns (y: int) ensures forall k :: k == 0 ==> y >= 0 && (y == x || y == -x)",
    "(x: int, z: int) returns (y: int) ensures y >= 0 ensures y == x || y == -x",
    "(x: int) returns (y: int) ensures y >= 0 ensures y == x || y == -z",
])
def test_any_other_difference_is_not_called_weaker(got: str) -> None:
    weaker, other = _compare(ABS, got)
    assert not weaker and other, (weaker, other)


def test_requires_dropped_is_stronger_and_strengthened_is_weaker() -> None:
    want = "(x: int) returns (h: int) requires x >= 0 requires x % 2 == 0 ensures h + h == x"
    assert _compare(want, "(x: int) returns (h: int) requires x % 2 == 0 ensures h + h == x") == ((), ("requires",))
    weaker, _ = _compare(want, "(x: int) returns (h: int) requires x >= 0 && x < 9 requires x % 2 == 0 "
                               "ensures h + h == x")
    assert weaker == ("requires (added or strengthened)",)
    weaker, _ = _compare("(x: int) requires x > 0 || x < -3", "(x: int) requires x > 0")
    assert weaker == ("requires (added or strengthened)",)


def test_renaming_is_sound_where_a_name_means_something_else() -> None:
    """A name after ``.`` is a member, a name free outside its quantifier is not the bound one: never equated."""
    field = "(x: int) modifies this ensures this.v == x && v == x"
    assert _compare(field, "(v: int) modifies this ensures this.v == v && v == v")[1]
    quantified = "(a: array<int>) requires a.Length > 0 ensures forall k :: 0 <= k < a.Length ==> a[k] >= 0"
    assert _compare(quantified, "(b: array<int>) requires b.Length > 0 ensures forall j :: 0 <= j < b.Length "
                                "==> b[j] >= 0") == ((), ())
    assert _compare(quantified, "(a: array<int>) requires a.Length > 0 ensures forall j :: 0 <= k < a.Length "
                                "==> a[j] >= 0")[1]
    # Two bindings of one name, or a datatype update of a renamed name, are compared as written.
    assert conjuncts([("d", ".", "(", "x", ":=", "x", ")", "==", "d")], {"x": "$p0"}) != \
        conjuncts([("d", ".", "(", "z", ":=", "z", ")", "==", "d")], {"z": "$p0"})


def test_this_dot_a_field_and_swapped_parameters() -> None:
    """``this.v`` is the field ``v`` (a parameter named ``v`` is renamed first, so it cannot be confused with it);
    parameters swapped together with their uses are the same contract, swapped alone they are not."""
    cell = "(x: int) modifies this ensures v == x"
    assert _compare(cell, "(w: int) modifies this ensures this.v == w") == ((), ())
    assert _compare(cell, "(v: int) modifies this ensures this.v == v") == ((), ())
    assert _compare(cell, "(v: int) modifies this ensures v == v")[1]
    sub = "(a: int, b: int) returns (r: int) ensures r == a - b"
    assert _compare(sub, "(b: int, a: int) returns (r: int) ensures r == b - a") == ((), ())
    assert _compare(sub, "(b: int, a: int) returns (r: int) ensures r == a - b")[1]


def test_modifies_and_reads_more_is_weaker_fewer_is_another_contract() -> None:
    want = "(a: array<int>, b: array<int>) modifies a"
    assert _compare(want, "(a: array<int>, b: array<int>) modifies a, b")[0] == ("modifies (more than the statement's)",)
    assert _compare("(a: array<int>, b: array<int>) modifies a, b",
                    "(a: array<int>, b: array<int>) modifies b modifies a") == ((), ())
    assert _compare("(a: array<int>, b: array<int>) modifies a, b", want) == ((), ("modifies",))


# -- on the real Dafny ------------------------------------------------------------------------------------------

ABS_STMT = "method Abs(x: int) returns (y: int)\n  ensures y >= 0\n  ensures y == x || y == -x\n"
ABS_BODY = "{\n  if x < 0 {\n    y := -x;\n  } else {\n    y := x;\n  }\n}\n"
FALSE_STMT = "lemma Impossible(n: nat)\n  ensures n < 0\n"
#: One use of every harmless row, each where Dafny 2.3 reads it (a declaration, an assertion, a quantifier).
HARMLESS_USES = (
    "{:verify true} {:vcs_split_on_every_assert} {:vcs_max_splits 4} {:vcs_max_cost 2} {:vcs_max_keep_going_splits 2} "
    "{:timeLimit 20} {:timeLimitMultiplier 2} {:rlimit 10000000} {:priority 2} {:induction false} {:fuel Twice, 2} "
    "{:nowarn} {:autotriggers true} {:warnShadowing} {:print} {:main}"
)


def _harmless_program(target: str, body: str) -> str:
    return ("function method {:opaque} {:compile true} {:tailrecursion false} Twice(k: int): int { 2 * k }\n"
            "newtype {:nativeType \"int\"} Small = k: int | 0 <= k < 10\n"
            + target.replace("Impossible(", f"{HARMLESS_USES} Impossible(").replace("Abs(", f"{HARMLESS_USES} Abs(")
            + body)


@pytest.mark.prover
def test_every_harmless_attribute_parses_and_weakens_nothing() -> None:
    """Each harmless row of the table is used at once: an honest program is OK (every one of them parses on Dafny 2.3)
    and a false lemma with all of them is FAIL (they switch nothing off). A harmless row missing here fails below."""
    used = {r.name for r in ATTRIBUTE_RULES if r.cls is AttributeClass.HARMLESS}
    program = _harmless_program(ABS_STMT, "{\n  reveal Twice();\n  assert {:split_here} Twice(1) == 2;\n"
                                          "  assert forall k {:trigger Twice(k)} {:matchingloop} {:inductionTrigger} "
                                          ":: Twice(k) == 2 * k;\n  y := if x < 0 then -x else x;\n}\n")
    shown = {name for name in used if "{:" + name in program}
    assert shown == used - {"abstemious"}, used - shown  # {:abstemious} is for co-recursive functions only
    result = dafny_verifier().check(dtask("fair.harmless", ABS_STMT, reference=ABS_STMT + ABS_BODY), program)
    assert result.verdict is Verdict.OK, (result.reasons, result.messages)
    cheat = _harmless_program(FALSE_STMT, "{\n  assert {:split_here} n >= 0;\n}\n")
    result = dafny_verifier().check(dtask("fair.harmless-false", FALSE_STMT), cheat)
    assert result.verdict is Verdict.FAIL, (result.reasons, result.messages)


@pytest.mark.prover
@pytest.mark.parametrize(("program", "named"), [
    ("module A {\n  module M {\n    lemma L()\n      ensures true\n    {\n    }\n  }\n}\nmodule B {\n  module M {\n"
     "    lemma K()\n      ensures true\n    {\n    }\n  }\n}\n", "two modules named M"),
    ("module Outer {\n}\nmodule Outer.Inner {\n  lemma L()\n    ensures true\n  {\n  }\n}\n", "method Inner.L"),
], ids=["two-modules-of-one-name", "a-declaration-that-cannot-be-placed"])
def test_a_declaration_proofgym_cannot_place_is_error(program: str, named: str) -> None:
    """The README rows, on the real prover (were tested only on synthetic symbols): fail closed is ERROR, naming it."""
    task = dtask("unplaced", ABS_STMT, reference=ABS_STMT + ABS_BODY)
    result = dafny_verifier().check(task, program + ABS_STMT + ABS_BODY)
    assert result.verdict is Verdict.ERROR and any(named in r for r in result.reasons), result


@pytest.mark.prover
def test_a_bodyless_lemma_in_a_module_of_a_repeated_name_is_still_cheating() -> None:
    """The cheat beside the unplaced rows: an unplaceable program is no cover for a bodyless lemma."""
    program = ("module A {\n  module M {\n    lemma L()\n      ensures false\n  }\n}\nmodule B {\n  module M {\n"
               "    lemma K()\n      ensures true\n    {\n    }\n  }\n}\nlemma Impossible()\n  ensures false\n{\n"
               "  A.M.L();\n}\n")
    result = dafny_verifier().check(dtask("unplaced.cheat", "lemma Impossible()\n  ensures false\n"), program)
    assert result.verdict is Verdict.CHEATING, result


def test_a_crafted_deep_header_is_read_without_recursion() -> None:
    """A submission's header is untrusted: past MAX_DEPTH levels the reader keeps the rest as written (compared as
    text, fail closed), so no nesting depth raises RecursionError inside a check."""
    nested = ["A", "&&", "("] * 5000 + ["x"] + [")"] * 5000
    assert canonical_clause(nested) == canonical_clause(list(nested))
    assert canonical_clause(["forall", "i", "::"] * 5000 + ["x"])[0] == "bind"
    assert canonical_clause(["A", "||", "false"]) == canonical_clause(["A"]) == canonical_clause(["true", "==>", "A"])
