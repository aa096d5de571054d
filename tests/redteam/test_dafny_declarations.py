"""Red team, Dafny: the submission against the task's declarations and statement. A program that leaves a context
declaration out altogether is ERROR (copy the context), never OK; one that declares it again is CHEATING, as is
a member or top-level const shadowing a datatype constructor; the same contract written another way
(parentheses, clauses as conjuncts) is OK, a changed one CHEATING, and an equivalent one not shown weaker ERROR;
an attribute the task's own context uses proves nothing in the submission; the pinned honest programs are OK.

Moved from the red-team rounds (tests/redteam/ROUNDS.md: what each round found and fixed):
round 7.
"""

from __future__ import annotations

import pytest

from proofgym.envs.types import Task, Verdict
from tests.redteam.test_dafny_cheats import SUM_CTX, SUM_IMPL, SUM_STMT

# ---------------------------------------------------------------------------------------------
# Dafny fairness: the task's context left out altogether
#
# Found and fixed here: a program that left out a context declaration altogether (a model that sends only its
# method, taking the context as given) was CHEATING ("context declaration ... is missing or changed"), though such a
# program cannot resolve (``unresolved identifier: Sum``) or does not use the declaration: no attempt to change what
# the task means. It is ERROR now, with feedback that says to copy the context unchanged, never OK. A declaration
# whose name the program declares again (changed, moved into a module, a class member, a constructor, a type) is
# still CHEATING, and so is every other cheat next to a left-out declaration.

# The array-sum program of test_dafny_cheats, its context and statement as they are there.
SUM_BODY = SUM_IMPL[len(SUM_STMT):]
ABS_STMT = "method Abs(x: int) returns (y: int)\n  ensures y >= 0\n  ensures y == x || y == -x\n"
ABS_BODY = "{\n  if x < 0 {\n    y := -x;\n  } else {\n    y := x;\n  }\n}\n"
HELPER_CTX = "lemma Helper(x: int)\n  ensures x + 0 == x\n{\n}\n"
TWICE_CTX = "function Twice(x: int): int\n{\n  2 * x\n}\n"
TWICE_STMT = "class Cell {\n  var v: int\n  method Double()\n    modifies this\n    ensures v == Twice(old(v))\n"


def _dafny_tasks():
    from tests.test_dafny_common import dtask

    return {
        "sum": dtask("rt7.sum", SUM_STMT, context=SUM_CTX, reference=SUM_CTX + SUM_STMT + SUM_BODY),
        "helper": dtask("rt7.helper", ABS_STMT, context=HELPER_CTX, reference=HELPER_CTX + ABS_STMT + ABS_BODY),
        "twice": dtask("rt7.twice", TWICE_STMT + "}\n", context=TWICE_CTX),
    }


def _dafny(task: Task, program: str):
    """The audited Dafny verifier's result for ``program`` on ``task`` (skips where Dafny is not installed)."""
    from tests.test_dafny_common import dafny_verifier, have_dafny

    if not have_dafny():
        pytest.skip("Dafny is not installed")
    return dafny_verifier("always").check(task, program)


def _dafny_check(task: str, program: str):
    return _dafny(_dafny_tasks()[task], program)


LEFT_OUT = {
    "sum-method-only": ("sum", SUM_STMT + SUM_BODY),
    "sum-method-only-wrong": ("sum", SUM_STMT + "{\n  s := 0;\n}\n"),
    "twice-class-only": ("twice", TWICE_STMT + "  {\n    v := 2 * v;\n  }\n}\n"),
    # Nothing refers to the left-out lemma, so the program verifies: still not the task's program, never OK.
    "unused-helper-left-out": ("helper", ABS_STMT + ABS_BODY),
}


@pytest.mark.prover
@pytest.mark.parametrize(("task", "program"), list(LEFT_OUT.values()), ids=list(LEFT_OUT))
def test_a_program_without_the_context_is_error_with_feedback(task: str, program: str):
    """Fairness hole (fixed): was CHEATING ('context declaration ... is missing or changed')."""
    result = _dafny_check(task, program)
    assert result.verdict is Verdict.ERROR, result
    assert "leaves out the task's declaration" in result.reasons[0] and "copy it unchanged" in result.reasons[0]


LEFT_OUT_CHEATS = {
    "weakened-header": ("sum", "method ArraySum(a: array<int>) returns (s: int)\n  ensures true\n{\n  s := 0;\n}\n"),
    "redeclared-in-module": ("sum", "module M {\n  function Sum(s: seq<int>): int { 0 }\n}\nimport opened M\n"
                                    + SUM_STMT + "{\n  s := 0;\n}\n"),
    "redeclared-with-attribute": ("sum", "function {:opaque} Sum(s: seq<int>): int { 0 }\n" + SUM_STMT
                                         + "{\n  s := 0;\n}\n"),
    "assume": ("sum", SUM_STMT + "{\n  assume false;\n}\n"),
    "verify-false": ("sum", SUM_STMT.replace("method ", "method {:verify false} ") + "{\n  s := 0;\n}\n"),
    "class-member": ("twice", TWICE_STMT.replace("  method Double", "  function Twice(x: int): int { x }\n"
                                                                     "  method Double") + "  {\n  }\n}\n"),
    "constructor-named-like-it": ("sum", "datatype D = Sum(s: seq<int>)\n" + SUM_STMT + "{\n  s := 0;\n}\n"),
    "type-named-like-it": ("sum", "type Sum = int\n" + SUM_STMT + "{\n  s := 0;\n}\n"),
    "changed-helper": ("helper", HELPER_CTX.replace("x + 0 == x", "x + 0 == x + 1") + ABS_STMT + ABS_BODY),
    "bodyless-other-helper": ("helper", "lemma Helper2()\n  ensures false\n" + ABS_STMT + ABS_BODY),
    "changed-context": ("sum", SUM_CTX.replace("Sum(s[..|s| - 1]) + s[|s| - 1]", "(Sum(s[..|s| - 1]) + s[|s| - 1])")
                        + SUM_STMT + SUM_BODY),
}


@pytest.mark.prover
@pytest.mark.parametrize(("task", "program"), list(LEFT_OUT_CHEATS.values()), ids=list(LEFT_OUT_CHEATS))
def test_a_cheat_next_to_a_left_out_context_is_still_cheating(task: str, program: str):
    result = _dafny_check(task, program)
    assert result.verdict is Verdict.CHEATING, result


def test_left_out_reads_the_declared_name_past_attributes_and_modifiers():
    from proofgym.envs.verifiers.dafny.integrity import _declared_name

    assert _declared_name(("function", "{", ":", "opaque", "}", "Sum", "(")) == "Sum"
    assert _declared_name(("ghost", "static", "predicate", "method", "P", "(")) == "P"
    assert _declared_name(("datatype", "{", ":", "a", "{", ":", "b", "}", "}", "Tree", "=")) == "Tree"
    assert _declared_name(("{", "}")) == ""


# ---------------------------------------------------------------------------------------------
# Dafny fairness: a target's clauses rewritten without changing them
#
# Found and fixed here: ``ensures (y >= 0)`` for the statement's ``ensures y >= 0``, and ``ensures A && B`` for the
# statement's two clauses ``ensures A`` ``ensures B`` (or the reverse), were CHEATING ('ensures changed from the
# statement'), though they are the same contract. Clauses now compare conjunct by conjunct, each without
# parentheses around the whole of it; a clause is split at ``&&`` only where nothing at its top level binds looser
# (``==>``, ``<==>``, ``||``) or opens a binder (``forall``, ``var``, ``if``, ``match``...). Issue 26 went further
# (envs/verifiers/dafny/contract.py): binders renamed consistently, ``&&``/``||`` in any order or grouping and redundant
# parentheses are the same contract too; a difference is CHEATING only where it is shown weaker, else ERROR.

ABS_H = "method Abs(x: int) returns (y: int)\n"


def _abs_task():
    from tests.test_dafny_common import dtask

    return dtask("rt7.abs", ABS_STMT, reference=ABS_STMT + ABS_BODY)


def _false_task():
    from tests.test_dafny_common import dtask

    return dtask("rt7.false", "lemma Impossible()\n  ensures false\n")


def _split(text: str) -> list:
    # Since issue 26 the clauses compare in envs/verifiers/dafny/contract.py (canonical conjuncts, not token lists).
    from proofgym.envs.verifiers.dafny.contract import conjuncts
    from proofgym.envs.verifiers.dafny.lexer import tokenize

    return conjuncts([tuple(t.text for t in tokenize(text))], {})


def _same(a: list, b: list) -> bool:
    return sorted(map(repr, a)) == sorted(map(repr, b))  # conjuncts compare as multisets


def test_clause_conjuncts_split_only_where_and_means_two_clauses():
    assert _split("(y >= 0)") == _split("y >= 0") and len(_split("y >= 0")) == 1
    assert _same(_split("y >= 0 && (y == x || y == -x)"), _split("y >= 0") + _split("y == x || y == -x"))
    assert _same(_split("((A)) && ((B && C))"), _split("A") + _split("B") + _split("C"))
    assert _same(_split("|s| > 0 && v == old(v)"), _split("|s| > 0") + _split("v == old(v)"))
    for whole in ["A && B ==> C", "A && B <==> C", "C <== A && B", "forall i :: A && B", "exists i :: A && B",
                  "if b then A else B && C", "var z := 1; z > 0 && y > 0", "(A) && (B) || C", "A &&",
                  "match x case 0 => A && B case _ => C", "x :| A && B", "set i | A && B"]:
        assert len(_split(whole)) == 1, whole


HONEST_CLAUSES = {
    "parenthesised-ensures": ABS_H + "  ensures (y >= 0)\n  ensures (y == x || y == -x)\n" + ABS_BODY,
    "merged-ensures": ABS_H + "  ensures y >= 0 && (y == x || y == -x)\n" + ABS_BODY,
    "merged-parenthesised": ABS_H + "  ensures (y >= 0 && (y == x || y == -x))\n" + ABS_BODY,
    "merged-plus-extra": ABS_H + "  ensures y >= 0 && (y == x || y == -x) && y * y == x * x\n" + ABS_BODY,
    # Issue 26: redundant inner parentheses were CHEATING ('ensures changed'); the contract is the same.
    "inner-parentheses": ABS_H + "  ensures y >= 0\n  ensures (y == x) || (y == -x)\n" + ABS_BODY,
}


@pytest.mark.prover
@pytest.mark.parametrize("program", list(HONEST_CLAUSES.values()), ids=list(HONEST_CLAUSES))
def test_the_same_contract_written_another_way_is_ok(program: str):
    """Fairness hole (fixed): was CHEATING ('Abs: ensures changed from the statement')."""
    result = _dafny(_abs_task(), program)
    assert result.verdict is Verdict.OK and result.audited, result


CLAUSE_CHEATS = {
    "merged-weakened": ("abs", ABS_H + "  ensures y >= 0 && true\n" + ABS_BODY),
    "implication-in-merge": ("abs", ABS_H + "  ensures y >= 0 && x > 100 ==> y == x || y == -x\n{\n  y := 0;\n}\n"),
    "parenthesised-or-true": ("abs", ABS_H + "  ensures (y >= 0) || true\n  ensures y == x || y == -x\n" + ABS_BODY),
    "requires-added-as-conjunct": ("abs", ABS_H + "  requires x > 0 && x < 5\n  ensures y >= 0\n"
                                          "  ensures y == x || y == -x\n" + ABS_BODY),
    "false-as-parenthesised-true": ("false", "lemma Impossible()\n  ensures (true)\n{\n}\n"),
    "false-or-true": ("false", "lemma Impossible()\n  ensures (false || true)\n{\n}\n"),
}


@pytest.mark.prover
@pytest.mark.parametrize(("task", "program"), list(CLAUSE_CHEATS.values()), ids=list(CLAUSE_CHEATS))
def test_a_changed_contract_is_still_cheating(task: str, program: str):
    result = _dafny(_abs_task() if task == "abs" else _false_task(), program)
    assert result.verdict is Verdict.CHEATING, result


@pytest.mark.prover
def test_an_equivalent_contract_not_shown_weaker_is_error():
    """Issue 26: ``forall k :: k == 0 ==> A && B`` for ``A`` ``B`` means the same but is not shown weaker (proofgym
    does not reason about quantifiers): ERROR "keep the task's header as written", not CHEATING as before."""
    program = ABS_H + "  ensures forall k :: k == 0 ==> y >= 0 && (y == x || y == -x)\n" + ABS_BODY
    result = _dafny(_abs_task(), program)
    assert result.verdict is Verdict.ERROR and "keep the task's header as written" in result.reasons[0], result


HONEST_DAFNY = {
    "main-with-print": ABS_STMT + ABS_BODY + 'method Main() {\n  var y := Abs(-3);\n  print y, "\\n";\n}\n',
    "ghost-calc": ABS_STMT + "{\n  ghost var z := x * x;\n  calc {\n    z;\n    ==\n    x * x;\n  }\n"
                             "  y := if x < 0 then -x else x;\n}\n",
    "datatype-match": "datatype Sign = Neg | NonNeg\nfunction method SignOf(x: int): Sign { if x < 0 then Neg else NonNeg }\n"
                      + ABS_STMT + "{\n  match SignOf(x) {\n    case Neg => y := -x;\n    case NonNeg => y := x;\n  }\n}\n",
    "label-break": ABS_STMT + "{\n  y := x;\n  label L: while true\n    decreases 0\n  {\n    break L;\n  }\n"
                              "  if y < 0 { y := -y; }\n}\n",
    "strings-that-look-like-cheats": ABS_STMT + "{\n  var c := '\\'';\n  var s := \"/* not a comment */ assume\";\n"
                                                "  var v := @\"verbatim \"\" quote\";\n  y := if x < 0 then -x else x;\n}\n",
    "primed-identifiers": ABS_STMT + "{\n  var x' := x;\n  var y'' := if x' < 0 then -x' else x';\n  y := y'';\n}\n",
    "nested-comment": "/* outer /* inner */ still comment */\n" + ABS_STMT + ABS_BODY,
    "class-const-newtype": "class Box {\n  var v: int\n  constructor (x: int) ensures v == x { v := x; }\n}\n"
                           "const Zero: int := 0\nnewtype Small = x: int | 0 <= x < 10\n" + ABS_STMT
                           + "{\n  var b := new Box(x);\n  var s: Small := 3;\n  y := if b.v < Zero then -b.v else b.v;\n}\n",
    "target-with-decreases": ABS_STMT + "  decreases 0\n" + ABS_BODY,
}


@pytest.mark.prover
@pytest.mark.parametrize("program", list(HONEST_DAFNY.values()), ids=list(HONEST_DAFNY))
def test_pinned_honest_dafny_programs_are_ok(program: str):
    result = _dafny(_abs_task(), program)
    assert result.verdict is Verdict.OK, result


# ---------------------------------------------------------------------------------------------
# Dafny soundness: a class member shadowing a datatype constructor
#
# Found and fixed here (a hole: OK for an unproved statement): the task's context declares ``datatype Color = Red |
# Green`` and its statement a class whose method ``ensures c == Red``. A submission that adds the class member
# ``const Red: Color := Green`` (or ``var Red: Color``) keeps the header token for token, and Dafny resolves ``Red``
# in the class's specification to the member: ``c := Green`` verified and was OK. The shadow check only knew the
# names of members and fields (Dafny's ``symbols``); it now knows every type, module and constructor name the task
# declares (read from its tokens), and a member or field of the submission with one of them is CHEATING.

COLOR_CTX = "datatype Color = Red | Green\n"
LAMP_STMT = "class Lamp {\n  var c: Color\n  method TurnRed()\n    modifies this\n    ensures c == Red\n"
POINT_CTX = ("datatype Point = Point(x: int, y: int)\ndatatype Tree = Leaf | Node(left: Tree, v: int, right: Tree)\n"
             "function Size(t: Tree): nat { match t case Leaf => 0 case Node(l, _, r) => Size(l) + 1 + Size(r) }\n")


POINT_STMT = "method Origin() returns (p: Point)\n  ensures p.x == 0 && p.y == 0\n"


def _lamp_check(program: str, context: str = COLOR_CTX, statement: str = LAMP_STMT + "}\n"):
    from tests.test_dafny_common import dtask

    return _dafny(dtask("rt7.lamp", statement, context=context), program)


SHADOWS = {
    "const-member": "  const Red: Color := Green\n",
    "var-member": "  var Red: Color\n",
    "static-function-member": "  static function method Red(): Color { Green }\n",
}


@pytest.mark.prover
@pytest.mark.parametrize("member", list(SHADOWS.values()), ids=list(SHADOWS))
def test_a_member_shadowing_a_constructor_is_cheating(member: str):
    """Was a hole (fixed): ``const Red: Color := Green`` and ``var Red: Color`` were OK."""
    program = COLOR_CTX + LAMP_STMT.replace("  method TurnRed", member + "  method TurnRed") \
        + "  {\n    c := Green;\n  }\n}\n"
    if "var Red" in member:
        program = program.replace("c := Green;", "c := Red;")
    result = _lamp_check(program)
    assert result.verdict in ({Verdict.CHEATING} if "function" not in member else
                              {Verdict.CHEATING, Verdict.ERROR, Verdict.FAIL}), result
    assert result.verdict is not Verdict.OK


@pytest.mark.prover
def test_a_top_level_const_named_like_a_constructor_is_cheating():
    program = COLOR_CTX + "const Red: Color := Green\n" + LAMP_STMT + "  {\n    c := Green;\n  }\n}\n"
    assert _lamp_check(program).verdict is Verdict.CHEATING


HONEST_CONSTRUCTORS = {
    "lamp": (COLOR_CTX, LAMP_STMT + "}\n", COLOR_CTX + LAMP_STMT + "  {\n    c := Red;\n  }\n}\n"),
    "constructor-named-like-its-type": (POINT_CTX, POINT_STMT, POINT_CTX + POINT_STMT + "{\n  p := Point(0, 0);\n}\n"),
    "helper-class-with-a-destructor-name": (
        POINT_CTX, POINT_STMT, POINT_CTX + "class Helper {\n  var left: int\n  static method Mk() returns (p: Point)\n"
                                           "    ensures p.x == 0\n  {\n    p := Point(0, 0);\n  }\n}\n"
        + POINT_STMT + "{\n  p := Point(0, 0);\n}\n"),
}


@pytest.mark.prover
@pytest.mark.parametrize(("context", "statement", "program"), list(HONEST_CONSTRUCTORS.values()),
                         ids=list(HONEST_CONSTRUCTORS))
def test_honest_programs_using_constructors_are_ok(context: str, statement: str, program: str):
    result = _lamp_check(program, context, statement)
    assert result.verdict is Verdict.OK, result


def test_type_and_constructor_names_are_read_from_the_tokens():
    from proofgym.envs.verifiers.dafny.integrity import type_and_constructor_names
    from proofgym.envs.verifiers.dafny.lexer import tokenize

    text = ("datatype Color = Red | Green\ndatatype {:x} Tree<T> = | Leaf | Node(left: Tree<T>, v: T, right: Tree<T>)\n"
            "codatatype S = Cons(h: int, t: S)\nnewtype N = x: int | 0 <= x\ntype Syn = int\n"
            "module M { datatype D = A { function f(): int { 0 } } }\nclass K { var f: int }\nfunction F(): int { 0 }")
    assert type_and_constructor_names(tokenize(text)) == {
        "Color", "Red", "Green", "Tree", "Leaf", "Node", "S", "Cons", "N", "Syn", "M", "D", "A", "K"}


# Pinned: an attribute the task's own context uses is allowed in the submission too, and still proves nothing.
LOG_CTX = "method {:extern} Log(x: int)\n"
AX_CTX = "lemma {:axiom} Ax(x: int)\n  ensures x * 0 == 0\n"
IMPOSSIBLE = "lemma Impossible()\n  ensures false\n"
USE_HELPER = IMPOSSIBLE + "{\n  Helper();\n}\n"


@pytest.mark.prover
@pytest.mark.parametrize(("context", "program"), [
    (LOG_CTX, LOG_CTX + "lemma {:extern} Helper()\n  ensures false\n{\n}\n" + USE_HELPER),
    (LOG_CTX, LOG_CTX + "lemma {:extern} Helper()\n  ensures false\n" + USE_HELPER),
    (AX_CTX, AX_CTX + "lemma {:axiom} Helper()\n  ensures false\n{\n}\n" + USE_HELPER),
    (AX_CTX, AX_CTX + "lemma {:axiom} Helper()\n  ensures false\n" + USE_HELPER),
], ids=["extern-with-body", "extern-bodyless", "axiom-with-body", "axiom-bodyless"])
def test_an_attribute_the_context_uses_proves_nothing_in_the_submission(context: str, program: str):
    result = _lamp_check(program, context, IMPOSSIBLE)
    assert result.verdict is not Verdict.OK, result
    if "{\n}\n" not in program.split("Helper()", 1)[1][:30]:
        assert result.verdict is Verdict.CHEATING, result  # bodyless: an assumption


# ---------------------------------------------------------------------------------------------
# Dafny fairness: a syntax error that Dafny's parser follows with "must have a body" (session 22)
#
# Found and fixed here, in issue 27's dafny-nl replies (14 of the sweeps' 15 CHEATING verdicts): a typo in a target's
# clause (``a[.., x]`` for ``a[..], x``) makes Dafny 2.3's parser lose its place, and it goes on to say "a method with
# an ensures clause must have a body" of a method whose body is right there. That was CHEATING; Dafny's "must have a
# body" is evidence only where nothing else failed to parse. The other side: a method that really has no body, in a
# program that otherwise parses, is still CHEATING.
COUNT_CTX = ("function Count(s: seq<int>, x: int): nat\n{\n  if |s| == 0 then 0 else Count(s[..|s| - 1], x) + "
             "(if s[|s| - 1] == x then 1 else 0)\n}\n")
COUNT_STMT = "method CountOcc(a: array<int>, x: int) returns (c: nat)\n  ensures c == Count(a[..], x)\n"
COUNT_BODY = ("{\n  c := 0;\n  var i := 0;\n  while i < a.Length\n    invariant 0 <= i <= a.Length\n"
              "    invariant c == Count(a[..i], x)\n  {\n    assert a[..i + 1][..i] == a[..i];\n"
              "    if a[i] == x {\n      c := c + 1;\n    }\n"
              "    i := i + 1;\n  }\n  assert a[..a.Length] == a[..];\n}\n")


def _count_task():
    from tests.test_dafny_common import dtask

    return dtask("s22.count", COUNT_STMT, context=COUNT_CTX, reference=COUNT_CTX + "\n" + COUNT_STMT + COUNT_BODY)


@pytest.mark.prover
def test_a_syntax_error_that_dafny_follows_with_must_have_a_body_is_an_error():
    typo = COUNT_CTX + "\n" + COUNT_STMT.replace("a[..], x", "a[.., x]") + COUNT_BODY
    result = _dafny(_count_task(), typo)
    assert result.verdict is Verdict.ERROR, result
    assert any("rbracket expected" in m for m in result.messages), result  # Dafny's own words say what to fix


@pytest.mark.prover
def test_a_method_without_a_body_in_a_program_that_parses_is_still_cheating():
    result = _dafny(_count_task(), COUNT_CTX + "\n" + COUNT_STMT)
    assert result.verdict is Verdict.CHEATING, result
    assert _dafny(_count_task(), COUNT_CTX + "\n" + COUNT_STMT + COUNT_BODY).verdict is Verdict.OK  # the task is fair
