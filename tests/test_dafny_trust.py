"""Trust round 3 for Dafny (issue 12), on the real Dafny 2.3 and on dafny-nl specs.

Soundness: every kind of declaration Dafny can leave without a body is refused (iterators too,
which ``/noCheating:1`` lets through); CR, CRLF and a BOM cannot hide code from proofgym's reader;
a task whose context trusts something (a bodyless contract function, an axiom) holds the
submission's own declarations to the same rule as any other task; Boogie's translation is read on
every OK, not only in the sampled audit. Fairness: CR-only, CRLF and BOM files verify as their LF
twins; an abstract member of a trait implemented by the classes that extend it, and a member of an
``abstract module`` given its body where it is refined, are obligations, judged by their
implementations -- while a member left abstract where it is used is still refused.
"""

from __future__ import annotations

import pytest

from proofgym.envs.tasks.dafny_nl import build_tasks
from proofgym.envs.types import Task, Verdict
from tests.dafny_cli import dafny_itself
from tests.test_dafny_common import dafny_verifier, dtask, requires_dafny

pytestmark = [pytest.mark.prover, requires_dafny]

NL: dict[str, Task] = {t.id.removeprefix("dafny.nl."): t for t in build_tasks()}
# Each row pins the one verdict the real Dafny gives (issue 26: a set of verdicts let a cheat turn FAIL unnoticed).
CHEATING, FAIL = Verdict.CHEATING, Verdict.FAIL


def program(name: str, helper: str, body: str) -> str:
    """The task's context, a helper, and its statement with ``body``: a whole program."""
    task = NL[name]
    return (task.context + "\n" if task.context else "") + helper + task.statement + "{\n" + body + "}\n"


SUM_BODY = "  if n > 0 {\n    SumToFormula(n - 1);\n  }\n"
ITERATOR = "iterator It() yields (x: int)\n  yield ensures false\n  ensures false\n"
MOVE_NEXT = "  var g := new It();\n  var more := g.MoveNext();\n"

# (id, task, helper, body, verdict): a helper that proves false, used by the task's target.
BODYLESS = [
    ("iterator-abs", "abs", ITERATOR, MOVE_NEXT, CHEATING),
    ("iterator-array-sum", "array_sum", ITERATOR, MOVE_NEXT, CHEATING),
    ("iterator-linear-search", "linear_search", ITERATOR, MOVE_NEXT, CHEATING),
    ("iterator-empty-body", "array_sum", ITERATOR + "{\n}\n", MOVE_NEXT, CHEATING),
    ("iterator-only-yield-ensures", "abs", "iterator It() yields (x: int)\n  yield ensures false\n",
     "  var g := new It();\n  var more := g.MoveNext();\n  if !more {\n    y := 0;\n    return;\n  }\n", CHEATING),
    ("iterator-in-module", "abs", "module Mo {\n  iterator It() yields (x: int)\n    ensures false\n"
     "    yield ensures false\n}\n", "  var g := new Mo.It();\n  var more := g.MoveNext();\n", CHEATING),
    ("twostate-lemma", "abs", "twostate lemma H()\n  ensures false\n", "  H();\n", CHEATING),
    ("inductive-lemma", "sum_to_lemma", "inductive lemma H()\n  ensures false\n", "  H();\n", CHEATING),
    ("colemma", "fib_base", "colemma H()\n  ensures false\n", "  H();\n", CHEATING),
    ("function-method", "sum_to_lemma", "function method F(): int\n  ensures false\n", "  var x := F();\n",
     CHEATING),
    ("twostate-function", "array_sum", "twostate function F(): int\n  ensures false\n", "  var x := F();\n",
     CHEATING),
    ("predicate", "fib_base", "predicate P()\n  ensures P() && !P()\n", "  assert P();\n", CHEATING),
    ("anonymous-constructor", "abs", "class K {\n  constructor ()\n    ensures false\n}\n",
     "  var k := new K();\n", CHEATING),
    ("named-constructor", "array_sum", "class K {\n  constructor Make()\n    ensures false\n}\n",
     "  var k := new K.Make();\n", CHEATING),
    ("class-method", "linear_search", "class K {\n  method M()\n    ensures false\n}\n",
     "  var k: K :| true;\n  k.M();\n", CHEATING),
    ("nested-module-lemma", "sum_to_lemma", "module Outer {\n  module Inner {\n    lemma H()\n      ensures false\n"
     "  }\n}\n", "  Outer.Inner.H();\n", CHEATING),
    ("trait-member-left-abstract", "sum_to_lemma", "trait T {\n  lemma L()\n    ensures false\n}\n",
     "  var t: T :| true;\n  t.L();\n", CHEATING),
    ("trait-function-left-abstract", "fib_base", "trait T {\n  function F(): int\n    ensures F() == 1 && F() == 2\n}\n",
     "  var t: T :| true;\n  var x := t.F();\n", CHEATING),
    ("trait-static-lemma", "sum_to_lemma", "trait T {\n  static lemma L()\n    ensures false\n}\n", "  T.L();\n",
     CHEATING),
    ("abstract-module-refined-without-body", "sum_to_lemma",
     "abstract module A {\n  lemma L()\n    ensures false\n}\nmodule B refines A {\n}\n", "  B.L();\n", CHEATING),
    ("concrete-module-refined-with-call", "fib_base",
     "module A {\n  lemma L()\n    ensures false\n}\nmodule B refines A {\n  lemma L()\n    ensures false\n"
     "  {\n    A.L();\n  }\n}\n", "  B.L();\n", CHEATING),
    ("abstract-module-member-used-in-module", "sum_to_lemma",
     "abstract module A {\n  lemma L()\n    ensures false\n  lemma M()\n    ensures false\n  {\n    L();\n  }\n}\n",
     SUM_BODY, CHEATING),
]


@pytest.mark.parametrize(("name", "helper", "body", "verdict"), [pytest.param(*c[1:], id=c[0]) for c in BODYLESS])
def test_every_bodyless_kind_is_refused(name: str, helper: str, body: str, verdict: Verdict) -> None:
    # No audit: the sampled audit must not be what saves the verdict (it runs on 5% of OKs).
    result = dafny_verifier().check(NL[name], program(name, helper, body), audit=False)
    assert result.verdict is verdict, (result.verdict, result.reasons, result.messages)


def test_bodyless_iterator_gets_ok_from_dafny_itself() -> None:
    """Why the rule is proofgym's: Dafny 2.3 verifies the iterator cheat even under /noCheating:1."""
    out = dafny_itself(program("abs", ITERATOR, MOVE_NEXT))
    assert not out.errors and "Impl$$_module.__default.Abs" in out.verified_implementations()


# -- line endings --------------------------------------------------------------------------------

TWINS = ["abs", "array_sum", "counter_class", "sum_to_lemma", "stack_class", "binary_search", "max_function"]
ENDINGS = {"crlf": lambda p: p.replace("\n", "\r\n"), "cr": lambda p: p.replace("\n", "\r"),
           "bom": lambda p: "\ufeff" + p, "bom-crlf": lambda p: "\ufeff" + p.replace("\n", "\r\n"),
           "mixed": lambda p: p.replace("\n", "\r", 3).replace("\n", "\r\n", 2)}


@pytest.mark.parametrize("ending", sorted(ENDINGS))
@pytest.mark.parametrize("name", TWINS)
def test_line_endings_verify_as_their_lf_twin(name: str, ending: str) -> None:
    task = NL[name]
    result = dafny_verifier().check(task, ENDINGS[ending](task.reference_proof))
    assert result.verdict is Verdict.OK, (result.verdict, result.reasons, result.messages)


@pytest.mark.parametrize("name", ["abs", "array_sum"])
def test_line_endings_keep_a_failing_proof_failing_at_the_same_line(name: str) -> None:
    task = NL[name]
    broken = task.reference_proof[:task.reference_proof.rindex("}")] + "  assert 1 == 2;\n}\n"
    lf = dafny_verifier().check(task, broken)
    cr = dafny_verifier().check(task, broken.replace("\n", "\r"))
    assert lf.verdict is cr.verdict is Verdict.FAIL and lf.messages == cr.messages


LINE_CHEATS = [
    # Dafny ends a // comment at a lone CR: the code after it is code, not comment.
    ("assume-after-cr-comment", "abs", "", "  // a note\r  assume false;\n", ""),
    ("axiom-helper-after-cr-comment", "sum_to_lemma", "// a note\rlemma {:axiom} H()\r  ensures false\r", "  H();\n",
     ""),
    ("bodyless-helper-on-cr-lines", "sum_to_lemma", "// a note\rlemma H()\r  ensures false\r", "  H();\n", ""),
    ("bodyless-helper-after-bom", "fib_base", "lemma H()\n  ensures false\n", "  H();\n", "\ufeff"),
    ("iterator-on-cr-lines", "array_sum", ITERATOR.replace("\n", "\r"), MOVE_NEXT, ""),
    ("iterator-after-bom-crlf", "abs", ITERATOR.replace("\n", "\r\n"), MOVE_NEXT, "\ufeff"),
    ("verify-false-after-cr-comment", "abs", "// x\rlemma {:verify false} H()\r  ensures false\r{\r}\r", "  H();\n",
     ""),
]


@pytest.mark.parametrize(("name", "helper", "body", "prefix"), [pytest.param(*c[1:], id=c[0]) for c in LINE_CHEATS])
def test_line_ending_tricks_are_refused(name: str, helper: str, body: str, prefix: str) -> None:
    text = prefix + program(name, helper, body)
    result = dafny_verifier().check(NL[name], text, audit=False)
    assert result.verdict is Verdict.CHEATING, (result.verdict, result.reasons, result.messages)


# -- trusted contexts ----------------------------------------------------------------------------

TRUSTED_CONTEXT = """function Secret(x: int): int
  ensures Secret(x) > x

lemma {:axiom} SecretMonotone(x: int, y: int)
  requires x <= y
  ensures Secret(x) <= Secret(y)
"""
TRUSTED_STATEMENT = "method Above(x: int) returns (r: int)\n  ensures r > x\n  ensures Secret(x) <= Secret(r)\n"
TRUSTED = dtask("trusted", TRUSTED_STATEMENT, context=TRUSTED_CONTEXT)
# A context whose assumption no {:axiom} can carry (an assume statement): checked without /noCheating.
ASSUMING_CONTEXT = "method Oracle() returns (r: int)\n  ensures r > 0\n{\n  r := 1;\n  assume r > 0;\n}\n"
ASSUMING = dtask("assuming", "method Above(x: int) returns (r: int)\n  ensures r > x\n", context=ASSUMING_CONTEXT)


def trusted_program(task: Task, helper: str, body: str) -> str:
    return task.context + helper + task.statement + "{\n" + body + "}\n"


TRUSTED_CHEATS = [
    ("bodyless-lemma", "lemma H()\n  ensures false\n", "  H();\n"),
    ("bodyless-lemma-on-cr-lines", "// x\rlemma H()\r  ensures false\r", "  H();\n"),
    ("bodyless-function", "function F(): int\n  ensures false\n", "  ghost var f := F();\n"),
    ("bodyless-iterator", ITERATOR, MOVE_NEXT),
    ("bodyless-method-in-class", "class K {\n  method M()\n    ensures false\n}\n",
     "  var k: K :| true;\n  k.M();\n"),
    ("bodyless-loop", "", "  r := x;\n  while r <= x\n    invariant r == x\n"),
    ("trait-left-abstract", "trait T {\n  lemma L()\n    ensures false\n}\n", "  var t: T :| true;\n  t.L();\n"),
    ("context-name-reused-bodyless", "class Secret {\n  static lemma H()\n    ensures false\n}\n",
     "  Secret.H();\n"),
]


@pytest.mark.parametrize("task", [TRUSTED, ASSUMING], ids=["axiom-context", "assume-context"])
@pytest.mark.parametrize(("helper", "body"), [pytest.param(*c[1:], id=c[0]) for c in TRUSTED_CHEATS])
def test_trusted_context_does_not_lift_the_rule_for_the_submission(task: Task, helper: str, body: str) -> None:
    result = dafny_verifier().check(task, trusted_program(task, helper, body), audit=False)
    assert result.verdict is Verdict.CHEATING, (result.verdict, result.reasons, result.messages)


@pytest.mark.parametrize("task", [TRUSTED, ASSUMING], ids=["axiom-context", "assume-context"])
def test_trusted_context_lemma_behind_a_cr_comment_is_refused(task: Task) -> None:
    """A reader that ends a // comment only at LF sees no lemma after the target; Dafny sees one,
    bodyless -- and with /noCheating off for a trusted context, only proofgym's rule stood in its way."""
    text = trusted_program(task, "", "  H();\n  r := x + 1;\n") + "// helper\rlemma H()\r  ensures false\n"
    result = dafny_verifier().check(task, text, audit=False)
    assert result.verdict is Verdict.CHEATING, (result.verdict, result.reasons, result.messages)


@pytest.mark.parametrize("body", [
    "  r := x + 1;\n  assert Secret(x) > x;\n  SecretMonotone(x, r);\n",
    "  SecretMonotone(x, x + 2);\n  r := x + 2;\n",
], ids=["contract-function", "axiom-lemma"])
def test_trusted_context_honest_programs_are_ok(body: str) -> None:
    result = dafny_verifier("always").check(TRUSTED, trusted_program(TRUSTED, "", body))
    assert result.verdict is Verdict.OK, (result.verdict, result.reasons, result.messages)
    assert result.audited


def test_assume_context_honest_program_is_ok() -> None:
    result = dafny_verifier().check(ASSUMING, trusted_program(ASSUMING, "", "  var o := Oracle();\n  r := x + o;\n"))
    assert result.verdict is Verdict.OK, (result.verdict, result.reasons, result.messages)


# -- the Boogie scan runs on every OK ------------------------------------------------------------

def test_boogie_scan_runs_on_every_ok_without_an_audit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Second layer: with the iterator hidden from the first (as if Dafny's symbols missed it), the
    translation read on every OK still shows MoveNext without a body -- with no audit drawn."""
    verifier = dafny_verifier()
    real = verifier._server_symbols

    def blind(text: str, timeout_s: float):
        symbols = real(text, timeout_s)
        return None if symbols is None else [s for s in symbols if "It" not in (s.parent, s.name)]

    monkeypatch.setattr(verifier, "_server_symbols", blind)
    before = verifier.stats["translations"]
    result = verifier.check(NL["abs"], program("abs", ITERATOR, MOVE_NEXT), audit=False)
    assert result.verdict is Verdict.CHEATING and not result.audited, (result.reasons, result.messages)
    assert any("Boogie" in r and "It" in r for r in result.reasons), result.reasons
    assert verifier.stats["translations"] == before + 1


def test_every_ok_reads_the_translation() -> None:
    verifier = dafny_verifier()
    before = verifier.stats["translations"]
    assert verifier.check(NL["abs"], NL["abs"].reference_proof, audit=False).verdict is Verdict.OK
    assert verifier.stats["translations"] == before + 1


# -- abstract members are obligations ------------------------------------------------------------

TRAIT = """trait Norm {
  function method Weight(x: int): nat
  method Measure(x: int) returns (m: int)
    ensures m >= 0
}

class AbsNorm extends Norm {
  function method Weight(x: int): nat
  {
    if x < 0 then -x else x
  }
  method Measure(x: int) returns (m: int)
    ensures m >= 0
  {
    m := Weight(x);
  }
}

"""
ARITH = """abstract module Arith {
  function Double(n: nat): nat
  lemma DoubleIsSum(n: nat)
    ensures Double(n) == n + n
  lemma Quadruple(n: nat)
    ensures Double(Double(n)) == 4 * n
  {
    DoubleIsSum(n);
    DoubleIsSum(Double(n));
  }
}

module ArithImpl refines Arith {
  function Double(n: nat): nat
  {
    2 * n
  }
  lemma DoubleIsSum(n: nat)
    ensures Double(n) == n + n
  {
  }
}

"""

OBLIGATIONS = [
    ("trait-implemented-abs", "abs", TRAIT, "  var n := new AbsNorm;\n  y := n.Weight(x);\n"),
    ("trait-used-through-the-trait", "abs", TRAIT + "method UseNorm(t: Norm, x: int) returns (s: int)\n"
     "  ensures s >= 0\n{\n  s := t.Measure(x);\n}\n\n",
     "  var n := new AbsNorm;\n  var s := UseNorm(n, x);\n  y := if x < 0 then -x else x;\n"),
    ("trait-implemented-array-sum", "array_sum", TRAIT, "  var n := new AbsNorm;\n  var m := n.Measure(3);\n"
     + NL["array_sum"].reference_proof.split("ensures s == Sum(a[..])\n{\n")[1].rsplit("}", 1)[0]),
    ("abstract-module-refined", "sum_to_lemma", ARITH, "  ArithImpl.Quadruple(n);\n" + SUM_BODY),
    ("abstract-module-refined-fib", "fib_base", ARITH, "  ArithImpl.DoubleIsSum(3);\n"),
]


@pytest.mark.parametrize(("name", "helper", "body"), [pytest.param(*c[1:], id=c[0]) for c in OBLIGATIONS])
def test_abstract_members_with_implementations_are_ok(name: str, helper: str, body: str) -> None:
    result = dafny_verifier("always").check(NL[name], program(name, helper, body))
    assert result.verdict is Verdict.OK, (result.verdict, result.reasons, result.messages)
    assert result.audited


OBLIGATION_CHEATS = [
    # The implementation does not verify: never OK (Dafny's override and refinement checks).
    ("trait-implementation-wrong", "abs", TRAIT.replace("    m := Weight(x);\n", "    m := -1;\n"),
     "  var n := new AbsNorm;\n  y := n.Weight(x);\n", FAIL),
    ("trait-implementation-weakens-the-contract", "abs", TRAIT.replace(
        "    ensures m >= 0\n  {\n    m := Weight(x);", "  {\n    m := -1;"),
     "  var n: Norm := new AbsNorm;\n  var m := n.Measure(x);\n  y := if m < 0 then 0 else x;\n", FAIL),
    ("refinement-body-wrong", "sum_to_lemma", ARITH.replace("    2 * n\n", "    3 * n\n"),
     "  ArithImpl.Quadruple(n);\n" + SUM_BODY, FAIL),
    # Left abstract: no class implements the trait, no module refines the abstract one.
    ("trait-left-abstract-with-an-unrelated-class", "sum_to_lemma",
     "trait T {\n  lemma L()\n    ensures false\n}\nclass C {\n  lemma L()\n    ensures true\n  {\n  }\n}\n",
     "  var t: T :| true;\n  t.L();\n", CHEATING),
    ("abstract-module-left-abstract", "sum_to_lemma", ARITH.split("module ArithImpl")[0], SUM_BODY, CHEATING),
    ("refinement-keeps-a-member-bodyless", "sum_to_lemma",
     ARITH.replace("  lemma DoubleIsSum(n: nat)\n    ensures Double(n) == n + n\n  {\n  }\n", ""),
     "  ArithImpl.Quadruple(n);\n" + SUM_BODY, CHEATING),
    ("refinement-adds-a-bodyless-lemma", "sum_to_lemma",
     ARITH.replace("module ArithImpl refines Arith {\n", "module ArithImpl refines Arith {\n  lemma Bad()\n"
                   "    ensures false\n"), "  ArithImpl.Bad();\n" + SUM_BODY, CHEATING),
]


@pytest.mark.parametrize(("name", "helper", "body", "verdict"),
                         [pytest.param(*c[1:], id=c[0]) for c in OBLIGATION_CHEATS])
def test_abstract_members_left_abstract_are_refused(name: str, helper: str, body: str, verdict: Verdict) -> None:
    result = dafny_verifier().check(NL[name], program(name, helper, body), audit=False)
    assert result.verdict is verdict, (result.verdict, result.reasons, result.messages)


# -- honest helpers Dafny has nothing to prove in ---------------------------------------------

HELPERS = [
    ("method-without-contract", "abs", "method Inc(x: int) returns (y: int)\n{\n  y := x + 1;\n}\n\n"),
    ("empty-lemma", "sum_to_lemma", "lemma Nothing()\n{\n}\n\n"),
    ("empty-method", "array_sum", "method Nothing()\n{\n}\n\n"),
    ("class-method-without-contract", "counter_class", "class Log {\n  var n: int\n  method Bump()\n    modifies this\n"
     "  {\n    n := n + 1;\n  }\n}\n\n"),
    ("module-method-with-import", "linear_search", "module Lib {\n  export provides Id\n  function method Id(x: int): int"
     " { x }\n}\nmodule User {\n  import opened Lib\n  method Use() returns (r: int) { r := Id(3); }\n}\n\n"),
]


@pytest.mark.parametrize(("name", "helper"), [pytest.param(*c[1:], id=c[0]) for c in HELPERS])
def test_helper_with_nothing_to_prove_is_ok(name: str, helper: str) -> None:
    """Dafny emits no implementation for a body with no check and no postcondition: there is nothing
    to verify, so it is no dropped obligation (it was CHEATING before)."""
    task = NL[name]
    prog = task.context + "\n" + helper + task.reference_proof[len(task.context):] if task.context else \
        helper + task.reference_proof
    result = dafny_verifier("always").check(task, prog)
    assert result.verdict is Verdict.OK and result.audited, (result.verdict, result.reasons, result.messages)


def test_empty_iterator_without_a_contract_is_still_refused() -> None:
    """An iterator's obligations live in its body, so an iterator Dafny gives no implementation is
    refused whatever its contract says."""
    helper = "iterator It() yields (x: int)\n  yield ensures x > 0\n{\n}\n"
    body = "  var g := new It();\n  var more := g.MoveNext();\n  if more {\n    assert g.x > 0;\n  }\n" + \
        "  y := if x < 0 then -x else x;\n"
    result = dafny_verifier().check(NL["abs"], program("abs", helper, body), audit=False)
    assert result.verdict is Verdict.CHEATING, (result.verdict, result.reasons, result.messages)
