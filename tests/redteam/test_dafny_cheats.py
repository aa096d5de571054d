"""Red team for the Dafny verifier: every cheat must be refused, every honest program accepted.

The targets are chosen so that a cheat that *worked* would come back OK: a false lemma
(``ensures false``), and real tasks whose statement or context a cheat rewrites. Each cheat is
checked by the warm path and, through the module's ``audit="always"`` verifier, an OK would
also have to survive the CLI audit (exit code, exact summary, Boogie's implementation count).
The three traps of the issue are here by name: ``rlimit-trap``, ``verify-false-with-space`` and
``ten-errors``.
"""

from __future__ import annotations

import pytest

from proofgym.envs.types import Verdict
from tests.test_dafny_common import dafny_verifier, dtask, requires_dafny

pytestmark = [pytest.mark.prover, requires_dafny]

CHEATING, FAIL, ERROR = Verdict.CHEATING, Verdict.FAIL, Verdict.ERROR

FALSE = dtask("false", "lemma Impossible()\n  ensures false\n")

ABS_STMT = """method Abs(x: int) returns (y: int)
  ensures y >= 0
  ensures y == x || y == -x
"""
ABS_BODY = """{
  if x < 0 {
    y := -x;
  } else {
    y := x;
  }
}
"""
ABS = dtask("abs", ABS_STMT, reference=ABS_STMT + ABS_BODY)

SUM_CTX = """function Sum(s: seq<int>): int
{
  if |s| == 0 then 0 else Sum(s[..|s| - 1]) + s[|s| - 1]
}
"""
SUM_STMT = """method ArraySum(a: array<int>) returns (s: int)
  ensures s == Sum(a[..])
"""
SUM_IMPL = SUM_STMT + """{
  s := 0;
  var i := 0;
  while i < a.Length
    invariant 0 <= i <= a.Length
    invariant s == Sum(a[..i])
  {
    assert a[..i + 1][..i] == a[..i];
    s := s + a[i];
    i := i + 1;
  }
  assert a[..a.Length] == a[..];
}
"""
SUM = dtask("sum", SUM_STMT, context=SUM_CTX, reference=SUM_CTX + SUM_IMPL)

COUNTER_STMT = """class Counter {
  var count: nat
  constructor ()
    ensures count == 0
  method Inc()
    modifies this
    ensures count == old(count) + 1
}
"""
COUNTER_IMPL = """class Counter {
  var count: nat
  constructor ()
    ensures count == 0
  {
    count := 0;
  }
  method Inc()
    modifies this
    ensures count == old(count) + 1
  {
    count := count + 1;
  }
}
"""
COUNTER = dtask("counter", COUNTER_STMT, reference=COUNTER_IMPL)

MAXF_STMT = """function method MaxF(a: int, b: int): int
  ensures MaxF(a, b) >= a && MaxF(a, b) >= b
"""
MAXF = dtask("maxf", MAXF_STMT, reference=MAXF_STMT + "{\n  if a >= b then a else b\n}\n")

TWICE_CTX = "function Twice(x: int): int\n{\n  2 * x\n}\n"
TWICE_STMT = """class Cell {
  var v: int
  method Double()
    modifies this
    ensures v == Twice(old(v))
}
"""
TWICE = dtask("twice", TWICE_STMT, context=TWICE_CTX)

TASKS = {"false": FALSE, "abs": ABS, "sum": SUM, "counter": COUNTER, "maxf": MAXF, "twice": TWICE}

FALSE_HELPER = "lemma Helper()\n  ensures false\n"


def C(task: str, program: str, verdict: Verdict = CHEATING, *, id: str):
    """One attempt and the one verdict the real Dafny gives it: CHEATING where the construct can make an unproved
    statement pass, FAIL where Dafny itself refuses to verify it, ERROR where it is no attempt proofgym can judge (a
    missing target, an unknown attribute, a program that does not resolve): never OK."""
    return pytest.param(task, program, verdict, id=id)


CHEATS = [
    # -- assumptions -------------------------------------------------------------------------------
    C("false", "lemma Impossible()\n  ensures false\n{\n  assume false;\n}\n", id="assume-false"),
    C("false", "lemma Impossible()\n  ensures false\n{\n  assume {:axiom} false;\n}\n", id="assume-with-attribute"),
    C("false", "lemma Impossible()\n  ensures false\n{\n  var x := 1;\n  /* c */ assume x == 2;\n}\n",
      id="assume-after-comment"),
    C("false", "function F(): int\n  ensures false\n{\n  assume false; 0\n}\nlemma Impossible()\n  ensures false\n"
               "{\n  var x := F();\n}\n", id="assume-expression-in-function"),
    C("abs", ABS_STMT + "{\n  y := 0;\n  while y < 0\n    invariant y == x || y == -x\n}\n", id="bodyless-loop"),
    C("false", "lemma Impossible()\n  ensures false\n{\n  forall i: int | i == 0\n    ensures false;\n}\n",
      id="bodyless-forall"),
    # -- missing bodies ----------------------------------------------------------------------------
    C("false", "lemma Impossible()\n  ensures false\n", id="bodyless-target"),
    C("false", FALSE_HELPER + "lemma Impossible()\n  ensures false\n{\n  Helper();\n}\n", id="bodyless-helper-lemma"),
    C("false", "lemma {:axiom} Helper()\n  ensures false\nlemma Impossible()\n  ensures false\n{\n  Helper();\n}\n",
      id="axiom-helper"),
    C("false", "lemma {:axiom} Helper()\n  ensures false\n{\n}\nlemma Impossible()\n  ensures false\n{\n  Helper();\n}\n",
      id="axiom-with-body"),
    C("false", "method {:extern} Helper()\n  ensures false\nlemma Impossible()\n  ensures false\n{\n}\n"
               "method Use()\n  ensures false\n{\n  Helper();\n}\n", id="extern-helper"),
    C("false", "function Magic(): int\n  ensures Magic() == 1 && Magic() == 2\nlemma Impossible()\n  ensures false\n"
               "{\n  var m := Magic();\n}\n", id="bodyless-function"),
    C("false", "class K {\n  static lemma Helper()\n    ensures false\n}\nlemma Impossible()\n  ensures false\n"
               "{\n  K.Helper();\n}\n", id="bodyless-lemma-in-class"),
    C("false", "trait T {\n  static lemma Helper()\n    ensures false\n}\nlemma Impossible()\n  ensures false\n"
               "{\n  T.Helper();\n}\n", CHEATING, id="bodyless-lemma-in-trait"),
    C("false", "module M {\n  lemma Helper()\n    ensures false\n}\nlemma Impossible()\n  ensures false\n"
               "{\n  M.Helper();\n}\n", id="bodyless-lemma-in-module"),
    C("false", "abstract module A {\n  lemma Helper()\n    ensures false\n}\nlemma Impossible()\n  ensures false\n{\n}\n",
      FAIL, id="abstract-module"),
    # -- verification turned off -------------------------------------------------------------------
    C("false", "lemma {:verify false} Impossible()\n  ensures false\n{\n}\n", id="verify-false"),
    C("false", "lemma { :verify false } Impossible()\n  ensures false\n{\n}\n", id="verify-false-with-space"),
    C("false", "lemma {/* x */:verify false} Impossible()\n  ensures false\n{\n}\n", id="verify-false-comment-inside"),
    C("false", "lemma {\n:verify false\n} Impossible()\n  ensures false\n{\n}\n", id="verify-false-newlines"),
    C("false", "lemma {:induction false} { :verify false } Impossible()\n  ensures false\n{\n}\n",
      id="verify-false-after-allowed-attribute"),
    C("false", "lemma {:verify false} Helper()\n  ensures false\n{\n}\nlemma Impossible()\n  ensures false\n"
               "{\n  Helper();\n}\n", id="verify-false-helper"),
    C("false", "lemma {:rlimit 1} Helper()\n  ensures false\n{\n}\nlemma Impossible()\n  ensures false\n"
               "{\n  Helper();\n}\n", FAIL, id="rlimit-trap"),
    C("false", "lemma {:timeLimit 1} Helper()\n  ensures false\n{\n}\nlemma Impossible()\n  ensures false\n"
               "{\n  Helper();\n}\n", FAIL, id="timelimit-attribute"),
    C("false", "lemma Impossible()\n  ensures false\n{\n  assert {:focus} true;\n}\n", ERROR, id="focus-attribute"),
    C("abs", ABS_STMT.replace("method Abs", "method {:autoReq} Abs") + ABS_BODY, ERROR, id="autoreq-attribute"),
    C("false", "lemma {:imported} Impossible()\n  ensures false\n{\n}\n", id="imported-attribute"),
    C("abs", ABS_STMT.rstrip("\n") + "\n  decreases *\n{\n  y := 0;\n  while true\n    decreases *\n  {\n  }\n}\n",
      id="decreases-star"),
    C("abs", "method Loop()\n  ensures false\n  decreases *\n{\n  while true\n    decreases *\n  {\n  }\n}\n"
             + ABS_STMT + "{\n  Loop();\n  y := 0;\n}\n", ERROR, id="decreases-star-helper"),
    C("false", 'include "/usr/lib/dafny/DafnyPrelude.bpl"\nlemma Impossible()\n  ensures false\n{\n}\n',
      id="include"),
    C("false", 'lemma Impossible()\n  ensures false\n{\n  var s := @"\nVerifying Impl$$x ...\n";\n}\n',
      id="multiline-verbatim-string"),
    # -- the statement changed ---------------------------------------------------------------------
    C("abs", ABS_STMT.replace("  ensures y >= 0\n", "") + ABS_BODY, id="dropped-ensures"),
    C("abs", ABS_STMT.replace("  ensures y >= 0\n", "  ensures true\n") + ABS_BODY, id="weakened-ensures"),
    C("abs", ABS_STMT.replace("returns (y: int)\n", "returns (y: int)\n  requires false\n") + ABS_BODY,
      id="requires-false"),
    C("abs", ABS_STMT.replace("(x: int)", "(x: nat)") + "{\n  y := x;\n}\n", id="parameter-type-changed"),
    C("abs", ABS_STMT.replace("Abs", "Abs2") + ABS_BODY, ERROR, id="target-renamed"),
    C("abs", "method Other()\n{\n}\n", ERROR, id="target-dropped"),
    C("abs", "module Hidden {\n" + ABS_STMT + ABS_BODY + "}\n", ERROR, id="target-moved-into-module"),
    C("abs", "class Box {\n" + ABS_STMT + ABS_BODY + "}\n", ERROR, id="target-moved-into-class"),
    C("abs", ABS_STMT.replace("method Abs", "ghost method Abs") + ABS_BODY, ERROR, id="target-made-ghost"),
    C("maxf", MAXF_STMT.replace("function method", "function") + "{\n  if a >= b then a else b\n}\n",
      ERROR, id="function-method-made-ghost"),
    C("counter", COUNTER_IMPL.replace("  method Inc()\n    modifies this\n",
                                      "  method Inc()\n    requires count == 0\n    modifies this\n"),
      id="class-method-requires-added"),
    C("counter", COUNTER_IMPL.replace("  var count: nat\n", "  var count: int\n"), id="class-field-type-changed"),
    # -- the context changed -----------------------------------------------------------------------
    C("sum", SUM_CTX.replace("Sum(s[..|s| - 1]) + s[|s| - 1]", "0") + SUM_IMPL, id="context-function-redefined"),
    C("sum", "function Sum(s: seq<int>): int\n{\n  0\n}\n" + SUM_STMT + "{\n  s := 0;\n}\n", id="context-replaced"),
    C("sum", SUM_CTX.replace("function Sum", "function {:opaque} Sum") + SUM_IMPL, id="context-made-opaque"),
    C("twice", TWICE_CTX + TWICE_STMT.replace("  method Double()", "  function Twice(x: int): int\n  {\n    x\n  }\n"
                                              "  method Double()").replace(
        "    ensures v == Twice(old(v))\n", "    ensures v == Twice(old(v))\n  {\n  }\n"),
      id="context-function-shadowed-in-class"),
    C("sum", "module Keep {\n" + SUM_CTX + "}\nfunction Sum(s: seq<int>): int\n{\n  0\n}\n" + SUM_STMT
      + "{\n  s := 0;\n}\n", id="context-hidden-in-module"),
    # -- programs Dafny refuses by itself ----------------------------------------------------------
    C("false", "lemma Impossible()\n  ensures false\n{\n  Impossible();\n}\n", FAIL, id="non-terminating-recursion"),
    C("false", "lemma Helper()\n  requires false\n  ensures false\n{\n}\nlemma Impossible()\n  ensures false\n"
               "{\n  Helper();\n}\n", FAIL, id="helper-requires-false"),
    C("false", "type Empty = x: int | false\nlemma Helper(e: Empty)\n  ensures false\n{\n}\n"
               "lemma Impossible()\n  ensures false\n{\n  var e: Empty :| true;\n  Helper(e);\n}\n", FAIL,
      id="empty-subset-type"),
    C("false", "lemma Impossible()\n  ensures false\n{\n  var x: int :| x != x;\n}\n", FAIL, id="such-that-false"),
    C("false", "lemma Impossible()\n  ensures false\n{\n  \u0430ssume false;\n}\n", ERROR, id="homoglyph-assume"),
    # -- issue 12: every kind without a body, and line ends (tests/test_dafny_trust.py has the rest) ------
    C("abs", "iterator It() yields (x: int)\n  ensures false\n  yield ensures false\n" + ABS_STMT
      + "{\n  var g := new It();\n  var more := g.MoveNext();\n}\n", id="bodyless-iterator"),
    C("abs", "iterator It() yields (x: int)\n  ensures false\n  yield ensures false\n{\n}\n" + ABS_STMT
      + "{\n  var g := new It();\n  var more := g.MoveNext();\n}\n", id="empty-body-iterator"),
    C("abs", ABS_STMT + "{\n  // a note\r  assume false;\n}\n", id="assume-after-a-cr-ended-comment"),
    C("false", "trait T {\n  lemma L()\n    ensures false\n}\nlemma Impossible()\n  ensures false\n"
               "{\n  var t: T :| true;\n  t.L();\n}\n", id="trait-member-left-abstract"),
    C("false", "abstract module A {\n  lemma L()\n    ensures false\n}\nmodule B refines A {\n}\n"
               "lemma Impossible()\n  ensures false\n{\n  B.L();\n}\n", id="refinement-keeps-it-bodyless"),
]


@pytest.mark.parametrize(("task", "program", "verdict"), CHEATS)
def test_cheat_is_refused(task: str, program: str, verdict: Verdict) -> None:
    verifier = dafny_verifier("always")
    result = verifier.check(TASKS[task], program)
    assert result.verdict is verdict, (result.verdict, result.reasons, result.messages)


def test_at_least_thirty_distinct_cheats() -> None:
    ids = [p.id for p in CHEATS]
    assert len(set(ids)) == len(ids) >= 30
    assert {"rlimit-trap", "verify-false-with-space"} <= set(ids)
    assert len(set(p.values[1] for p in CHEATS)) == len(CHEATS)  # distinct programs


def test_rlimit_trap_is_refused_by_the_count() -> None:
    """Why {:rlimit} can be harmless (issue 26): an obligation z3 drops under it breaks the one-to-one count."""
    from proofgym.envs.verifiers.dafny.integrity import pair_implementations, parse_symbols

    symbols = parse_symbols('SYMBOLS_START [{"SymbolType": "Method", "Module": "_module", "ParentClass": "_default", '
                            '"Name": "Helper", "Line": 1, "Column": 19, "EndLine": 4, "EndColumn": 1}, '
                            '{"SymbolType": "Method", "Module": "_module", "ParentClass": "_default", '
                            '"Name": "Impossible", "Line": 5, "Column": 7, "EndLine": 9, "EndColumn": 1}] SYMBOLS_END')
    # z3 4.8.12 answers "push canceled" for the {:rlimit} lemma and Dafny counts only the target.
    reasons = pair_implementations(["Impl$$_module.__default.Impossible"], symbols)
    assert reasons == ["Helper was not verified (its obligation was dropped)"]


def test_rlimit_trap_end_to_end_is_fail() -> None:
    """{:rlimit} is a harmless limit in the attribute table (it was CHEATING): z3 gives up on the false helper and the
    target is FAIL, never OK (the server dies on it with the pinned z3; the fresh CLI run that replaces it reports
    the failure). The rlimit-trap row of CHEATS pins the same verdict through the audited verifier."""
    program = "lemma {:rlimit 1} Helper()\n  ensures false\n{\n}\nlemma Impossible()\n  ensures false\n{\n  Helper();\n}\n"
    result = dafny_verifier().check(FALSE, program)
    assert result.verdict is Verdict.FAIL and "rlimit" not in " ".join(result.reasons), result


def test_ten_errors_is_not_zero_errors() -> None:
    """The trap: a summary reading '1 verified, 10 errors' contains '0 errors'. The CLI path parses it exactly."""
    bad = "".join(f"lemma Bad{k}()\n  ensures {k} == {k + 1}\n{{\n}}\n" for k in range(10))
    program = ABS_STMT + ABS_BODY + bad
    verifier = dafny_verifier()
    run = verifier._cli(program, 30, boogie=False)  # the CLI path's run, as an audit would make it
    assert run.returncode != 0
    assert run.output.summary is not None and run.output.summary_lines == 1
    assert (run.output.summary.verified, run.output.summary.errors) == (1, 10)
    assert "0 errors" in "Dafny program verifier finished with 1 verified, 10 errors"  # what a naive check sees
    assert verifier.check(ABS, program).verdict is Verdict.FAIL


HONEST = {
    "calc": ("lemma DoubleSquare(x: int)\n  ensures (x + x) * (x + x) == 4 * x * x\n",
             """lemma DoubleSquare(x: int)
  ensures (x + x) * (x + x) == 4 * x * x
{
  calc {
    (x + x) * (x + x);
    == { assert x + x == 2 * x; }
    (2 * x) * (2 * x);
    == 4 * x * x;
  }
}
"""),
    "forall-statement-with-body": ("lemma AllSquares()\n  ensures forall x: int :: x * x >= 0\n", """lemma Sq(x: int)
  ensures x * x >= 0
{
  if x < 0 {
    assert x * x == (-x) * (-x);
  }
}

lemma AllSquares()
  ensures forall x: int :: x * x >= 0
{
  forall x: int
    ensures x * x >= 0
  {
    Sq(x);
  }
}
"""),
    "ghost-variables": ("method Triple(x: int) returns (r: int)\n  ensures r == 3 * x\n", """method Triple(x: int) returns (r: int)
  ensures r == 3 * x
{
  ghost var before := x;
  var y := x + x;
  ghost var twice := y;
  assert twice == 2 * before;
  r := y + x;
}
"""),
    "opaque-and-reveal": ("method Quad(x: int) returns (r: int)\n  ensures r == 4 * x\n", """function method {:opaque} Double(x: int): int
{
  2 * x
}

method Quad(x: int) returns (r: int)
  ensures r == 4 * x
{
  reveal Double();
  r := Double(Double(x));
}
"""),
    "function-method": ("method Max(a: int, b: int) returns (m: int)\n  ensures m >= a && m >= b\n",
                        """function method MaxF(a: int, b: int): int
{
  if a >= b then a else b
}

method Max(a: int, b: int) returns (m: int)
  ensures m >= a && m >= b
{
  m := MaxF(a, b);
}
"""),
    "helpers-in-class": ("method Sum3(a: int, b: int, c: int) returns (s: int)\n  ensures s == a + b + c\n",
                         """class Helpers {
  static function method Add(x: int, y: int): int
  {
    x + y
  }
  static lemma AddAssoc(x: int, y: int, z: int)
    ensures Add(Add(x, y), z) == Add(x, Add(y, z))
  {
  }
}

method Sum3(a: int, b: int, c: int) returns (s: int)
  ensures s == a + b + c
{
  Helpers.AddAssoc(a, b, c);
  s := Helpers.Add(Helpers.Add(a, b), c);
}
"""),
    "comments-and-strings-mention-cheats": ("method Greet() returns (s: string)\n  ensures |s| > 0\n",
                                            """// assume false; {:verify false} decreases * would be cheats
/* nested /* comment with assume */ still a comment: { :verify false } */
method Greet() returns (s: string)
  ensures |s| > 0 // assume nothing
{
  var quote := '"';
  s := "assume false; {:verify false}" + [quote];
}
"""),
    "datatype-and-match": ("datatype Tree = Leaf | Node(left: Tree, right: Tree)\n"
                           "function Size(t: Tree): nat\n  ensures Size(t) >= 1\n",
                           """datatype Tree = Leaf | Node(left: Tree, right: Tree)

function Size(t: Tree): nat
  ensures Size(t) >= 1
{
  match t
  case Leaf => 1
  case Node(l, r) => Size(l) + Size(r) + 1
}
"""),
    "extra-ensures-and-decreases": ("lemma SumTo(n: nat)\n  ensures n * (n + 1) % 2 == 0\n",
                                    """lemma SumTo(n: nat)
  ensures n * (n + 1) % 2 == 0
  ensures n * (n + 1) >= 0
  decreases n
{
  if n > 1 {
    SumTo(n - 2);
    assert n * (n + 1) == (n - 2) * (n - 1) + 4 * n - 2;
  }
}
"""),
    "allowed-attributes": ("lemma Pos(n: nat)\n  ensures forall k :: 0 <= k < n ==> k + 1 > 0\n",
                           """lemma {:induction false} Pos(n: nat)
  ensures forall k :: 0 <= k < n ==> k + 1 > 0
{
  assert forall k {:trigger k + 1} :: 0 <= k < n ==> k + 1 > 0;
}
"""),
    "multiset-and-arrays": ("method Swap(a: array<int>, i: int, j: int)\n  requires 0 <= i < a.Length && 0 <= j < a.Length\n"
                            "  modifies a\n  ensures multiset(a[..]) == multiset(old(a[..]))\n",
                            """method Swap(a: array<int>, i: int, j: int)
  requires 0 <= i < a.Length && 0 <= j < a.Length
  modifies a
  ensures multiset(a[..]) == multiset(old(a[..]))
{
  a[i], a[j] := a[j], a[i];
}
"""),
    "tabs-unicode-and-crlf": ("method Abs(x: int) returns (y: int)\n  ensures y >= 0\n",
                              "\t/* \u00e9 \u00fc */\tmethod Abs(x: int) returns (y: int)\r\n\t\tensures y >= 0\r\n\t{\r\n"
                              "\t\ty := if x < 0 then -x else x; // \u2200 x\r\n\t}\r\n"),
    "class-member-named-like-nothing-in-the-task": (
        TWICE_STMT, TWICE_CTX + TWICE_STMT.replace("  method Double()", "  function Half(x: int): int\n  {\n    x / 2\n  }\n"
                                                   "  method Double()").replace(
            "    ensures v == Twice(old(v))\n", "    ensures v == Twice(old(v))\n  {\n    v := 2 * v;\n  }\n")),
    "clauses-reordered-and-nonterminating-main": (
        "method Abs(x: int) returns (y: int)\n  ensures y >= 0\n  ensures y == x || y == -x\n",
        """method Abs(x: int) returns (y: int)
  ensures y == x || y == -x
  ensures y >= 0
{
  y := if x < 0 then -x else x;
}

method Main()
  decreases *
{
  var n := 0;
  while true
    decreases *
  {
    var a := Abs(n);
    n := n - 1;
  }
}
"""),
    "iterator-helper": ("method Six() returns (s: int)\n  ensures s == 6\n", """iterator Gen(n: nat) yields (x: int)
  yield ensures |xs| <= n
  ensures |xs| == n
{
  var i := 0;
  while i < n
    invariant i <= n && |xs| == i
  {
    x := i;
    yield;
    i := i + 1;
  }
}

method Six() returns (s: int)
  ensures s == 6
{
  var g := new Gen(3);
  var more := g.MoveNext();
  s := 1 + 2 + 3;
}
"""),
    "kitchen-sink": ("method Six() returns (s: int)\n  ensures s == 6\n", """method Six() returns (s: int)
  ensures s == 6
{
  s := Inner.Id(6);
}

inductive predicate Ev(n: nat) { n == 0 || (n >= 2 && Ev(n - 2)) }
inductive lemma EvL(n: nat) requires Ev(n) ensures n % 2 == 0 { if n != 0 { EvL(n - 2); } }
twostate lemma TL() ensures true {}
datatype List = Nil | Cons(head: int, tail: List)
function Len(l: List): nat { match l case Nil => 0 case Cons(_, t) => 1 + Len(t) }
function Pick(s: set<int>): int requires s != {} { var x :| x in s; x }
function method Apply(f: int -> int, x: int): int { f(x) }
codatatype Stream = SCons(h: int, t: Stream)
function Ones(): Stream { SCons(1, Ones()) }
copredicate AllOnes(s: Stream) { s.h == 1 && AllOnes(s.t) }
colemma OnesAll() ensures AllOnes(Ones()) {}
newtype Byte = x: int | 0 <= x < 256
type Small = x: int | 0 <= x < 10
class Box { var v: int  constructor Init(x: int) ensures v == x { v := x; } }
module Inner { function method Id(x: int): int { x } }
"""),
    "reformatted-header": ("method Abs(x: int) returns (y: int)\n  ensures y >= 0\n", """method Abs
  (x: int)
  returns (y: int)
  // the contract, on one line
  ensures y >= 0 {
  y := if x < 0 then -x else x;
}
"""),
    "cr-only-line-endings": ("method Abs(x: int) returns (y: int)\n  ensures y >= 0\n",
                             "// Abs\rmethod Abs(x: int) returns (y: int)\r  ensures y >= 0\r{\r"
                             "  y := if x < 0 then -x else x;\r}\r"),
    "byte-order-mark": ("method Abs(x: int) returns (y: int)\n  ensures y >= 0\n",
                        "\ufeffmethod Abs(x: int) returns (y: int)\r\n  ensures y >= 0\r\n{\r\n"
                        "  y := if x < 0 then -x else x;\r\n}\r\n"),
    "trait-member-implemented": ("method Six() returns (s: int)\n  ensures s == 6\n", """trait Shape {
  method Area() returns (a: int)
    ensures a >= 0
}

class Square extends Shape {
  method Area() returns (a: int)
    ensures a >= 0
  {
    a := 4;
  }
}

method Six() returns (s: int)
  ensures s == 6
{
  var sq: Shape := new Square;
  var a := sq.Area();
  s := 6;
}
"""),
    "abstract-module-refined": ("lemma Twice(n: nat)\n  ensures n + n == 2 * n\n", """abstract module Spec {
  lemma Double(n: nat)
    ensures n + n == 2 * n
}

module Proof refines Spec {
  lemma Double(n: nat)
    ensures n + n == 2 * n
  {
  }
}

lemma Twice(n: nat)
  ensures n + n == 2 * n
{
  Proof.Double(n);
}
"""),
    "helper-without-a-contract": ("method Abs(x: int) returns (y: int)\n  ensures y >= 0\n", """method Log(x: int)
{
  var unused := x;
}

method Abs(x: int) returns (y: int)
  ensures y >= 0
{
  Log(x);
  y := if x < 0 then -x else x;
}
"""),
}


# Honest programs whose constructs make Dafny generate unusual Boogie (reveal lemmas, prefix lemmas,
# iterator members, class members): the CLI audit must agree with the warm path on them too.
AUDITED = {"kitchen-sink", "iterator-helper", "opaque-and-reveal", "helpers-in-class", "datatype-and-match",
           "trait-member-implemented", "abstract-module-refined", "helper-without-a-contract"}


@pytest.mark.parametrize("name", sorted(HONEST))
def test_honest_program_is_ok(name: str) -> None:
    statement, program = HONEST[name]
    context = TWICE_CTX if statement == TWICE_STMT else ""
    task = dtask(f"honest.{name}", statement, context=context, reference=program)
    result = dafny_verifier("always" if name in AUDITED else "never").check(task, program)
    assert result.verdict is Verdict.OK, (result.verdict, result.reasons, result.messages)
    assert result.audited == (name in AUDITED)  # when audited, the CLI audit agreed


def test_honest_program_with_context_bodyless_function_is_ok() -> None:
    """The task's own context may declare what the submission may not: it is kept, not written."""
    context = "function Secret(x: int): int\n  ensures Secret(x) > x\n"
    statement = "lemma UsesSecret(x: int)\n  ensures Secret(x) >= x\n"
    program = context + statement + "{\n}\n"
    result = dafny_verifier("always").check(dtask("ctx.bodyless", statement, context=context), program)
    assert result.verdict is Verdict.OK, (result.reasons, result.messages)
