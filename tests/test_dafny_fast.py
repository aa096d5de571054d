"""Fast tier for Dafny (no prover): the lexer, the output parser and its traps, the taxonomy, the
integrity helpers, and the prompt post-processing."""

from __future__ import annotations

import pytest

from proofgym.envs.types import ErrorCategory
from proofgym.envs.verifiers.dafny.integrity import (
    banned_constructs,
    impl_matches,
    pair_implementations,
    parse_symbols,
    split_header,
    top_level_decls,
)
from proofgym.envs.verifiers.dafny.lexer import DafnyLexError, attribute_spans, tokenize
from proofgym.envs.verifiers.dafny.output import (
    categorize,
    parse_output,
    parse_summary,
    primary_category,
    taxonomy_coverage,
)

# -- lexer ----------------------------------------------------------------------------------------


def test_lexer_follows_dafny_comments_strings_and_chars() -> None:
    text = ("/* a /* nested */ assume */ x' := '\\''; // assume\n"
            's := "assume \\" {:verify false}"; t := @"say ""hi""\nthere"; c := \'"\';')
    kinds = [(t.kind, t.text) for t in tokenize(text)]
    assert ("ident", "assume") not in kinds
    assert ("ident", "x'") in kinds and ("char", "'\\''") in kinds and ("char", "'\"'") in kinds
    assert ("string", '"assume \\" {:verify false}"') in kinds
    assert ("string", '@"say ""hi""\nthere"') in kinds
    last = tokenize(text)[-1]
    assert (last.line, last.text) == (3, ";")


@pytest.mark.parametrize("bad", ["/* open", '"open', "x := '", "a § b"])
def test_lexer_refuses_unterminated_text(bad: str) -> None:
    with pytest.raises(DafnyLexError):
        tokenize(bad)


@pytest.mark.parametrize("attr", ["{:verify false}", "{ :verify false }", "{/**/:verify false}", "{\n:verify\nfalse}"])
def test_attributes_are_found_by_tokens(attr: str) -> None:
    tokens = tokenize(f"lemma {attr} L() ensures s == {{}} {{ }}")
    assert [name for name, _, _ in attribute_spans(tokens)] == ["verify"]


def test_set_displays_are_not_attributes() -> None:
    assert attribute_spans(tokenize("method M() ensures {1} == {1} { var s := {}; }")) == []


# -- output parsing and its traps -----------------------------------------------------------------


def test_summary_is_parsed_exactly() -> None:
    ten = parse_summary("Dafny program verifier finished with 1 verified, 10 errors")
    assert ten is not None and (ten.verified, ten.errors) == (1, 10)  # "10 errors" contains "0 errors"
    assert parse_summary("Dafny program verifier finished with 2 verified, 0 errors, 1 time out").time_outs == 1
    assert parse_summary("Dafny program verifier finished with 2 verified, 0 errors, 1 out of resource") \
        .out_of_resource == 1
    assert parse_summary("Dafny program verifier finished with 2 verified, 0 errors, 3 bogus") is None
    assert parse_summary("Dafny program verifier finished with 2 verified, 0 errors trailing") is None


SERVER_OUTPUT = """prog.dfy(6,32): Info: Selected triggers: {a[j], a[i]}
prog.dfy(21,9): Info: class Iter {
   var n: nat  // immutable
 }

Verifying Impl$$_module.__default.Abs ...
  [2 proof obligations]  verified

Verifying Impl$$_module.__default.Bad ...
  [1 proof obligation]  error
prog.dfy(9,0): Error BP5003: A postcondition might not hold on this return path.
prog.dfy(8,12): Related location: This is the postcondition that might not hold.
Execution trace:
    (0,0): anon0

Verifying Impl$$_module.__default.Slow ...
  [1 proof obligation]  timed out
prog.dfy(6,6): Verification of 'Impl$$_module.__default.Slow' timed out after 3 seconds
prog.dfy(6,165): Timed out on BP5003: A postcondition might not hold on this return path.
Verification completed successfully!
"""


def test_trace_and_diagnostics() -> None:
    out = parse_output(SERVER_OUTPUT, filename="prog.dfy")
    assert out.outcomes == (("Impl$$_module.__default.Abs", "verified"), ("Impl$$_module.__default.Bad", "error"),
                            ("Impl$$_module.__default.Slow", "timed out"))
    assert [d.level for d in out.diagnostics] == ["error", "timeout"]
    assert out.diagnostics[0].code == "BP5003" and out.diagnostics[0].category is ErrorCategory.SPEC_GAP
    assert "Related location at line 8" in out.diagnostics[0].related[0]
    assert out.diagnostics[1].category is ErrorCategory.TIMEOUT  # a time out is not a postcondition error
    assert primary_category(out.diagnostics) is ErrorCategory.SPEC_GAP
    assert out.summary is None and not out.trace_anomalies


def test_info_continuation_lines_cannot_forge_a_trace() -> None:
    forged = ("prog.dfy(1,1): Info: class X {\n Verifying Impl$$_module.__default.Evil ...\n"
              "   [1 proof obligation]  verified\n }\n")
    assert parse_output(forged, filename="prog.dfy").outcomes == ()


def test_cli_phase_line_fixes_the_category() -> None:
    out = parse_output("p.dfy(1,44): Error: something odd\n1 parse errors detected in p.dfy\n", filename="p.dfy")
    assert out.phase == "parse" and out.diagnostics[0].category is ErrorCategory.PARSE_ERROR


@pytest.mark.parametrize(("message", "code", "category"), [
    ("A postcondition might not hold on this return path.", "BP5003", ErrorCategory.SPEC_GAP),
    ("This loop invariant might not hold on entry.", "BP5004", ErrorCategory.INVARIANT_MISSING),
    ("This loop invariant might not be maintained by the loop.", "BP5005", ErrorCategory.INVARIANT_MISSING),
    ("assertion violation", "", ErrorCategory.BODY_ERROR),
    ("cannot prove termination; try supplying a decreases clause for the loop", "", ErrorCategory.BODY_ERROR),
    ("decreases expression might not decrease", "", ErrorCategory.BODY_ERROR),
    ("A precondition for this call might not hold.", "BP5002", ErrorCategory.BODY_ERROR),
    ("possible division by zero", "", ErrorCategory.BODY_ERROR),
    ("index out of range", "", ErrorCategory.BODY_ERROR),
    ("unresolved identifier: z", "", ErrorCategory.TYPE_ERROR),
    ("RHS (of type bool) not assignable to LHS (of type int)", "", ErrorCategory.TYPE_ERROR),
    ("incorrect type of method in-parameter 0 (expected int, got bool)", "", ErrorCategory.TYPE_ERROR),
    ("invalid UnaryExpression", "", ErrorCategory.PARSE_ERROR),
    ('"}" expected', "", ErrorCategory.PARSE_ERROR),
    ("trying to break out of more loop levels than there are enclosing loops", "", ErrorCategory.UNKNOWN),
])
def test_categorize(message: str, code: str, category: ErrorCategory) -> None:
    assert categorize(message, code) is category


def test_coverage_counts_unknowns() -> None:
    out = parse_output("p.dfy(1,1): Error: assertion violation\np.dfy(2,1): Error: something never seen\n",
                       filename="p.dfy")
    assert taxonomy_coverage(out.diagnostics) == (1, 2)


# -- integrity helpers ----------------------------------------------------------------------------


def test_banned_constructs_outside_trusted_spans() -> None:
    tokens = tokenize("lemma {:axiom} A() ensures false\nlemma B() { assume false; }\n"
                      "method C() decreases * { }\nlemma {:induction false} {:trigger x} D() {}\n")
    reasons = banned_constructs(tokens)
    assert any("{:axiom}" in r for r in reasons) and any("assume" in r for r in reasons)
    assert not any("induction" in r for r in reasons)
    assert not any("decreases" in r for r in reasons)  # judged per target, with Dafny's view
    assert banned_constructs(tokens, [(0, len(tokens))]) == []  # all trusted (the task's own context)
    assert not any("{:axiom}" in r for r in banned_constructs(tokens, allowed_attributes={"axiom"}))


def test_header_split_ignores_attributes_and_keeps_clauses() -> None:
    header = split_header(tokenize("(x: int) returns (y: int) requires x > 0 ensures y == {x}.Size() "
                                   "ensures forall k {:trigger k} :: k == k decreases x"))
    assert header.signature == ("(", "x", ":", "int", ")", "returns", "(", "y", ":", "int", ")")
    assert header.requires == (("x", ">", "0"),) and len(header.ensures) == 2 and header.decreases == (("x",),)
    assert "trigger" not in header.ensures[1]


def test_top_level_declarations_keep_modifiers_together() -> None:
    tokens = tokenize("function method F(): int { 1 }\nghost predicate P() { true }\n"
                      "datatype D = A | B\nlemma {:induction false} L() {}\n")
    starts = [tokens[a].text for a, _ in top_level_decls(tokens)]
    assert starts == ["function", "ghost", "datatype", "lemma"]


def test_implementations_pair_one_to_one() -> None:
    symbols = parse_symbols(
        'SYMBOLS_START [{"SymbolType": "Method", "Module": "_module", "ParentClass": "_default", "Name": "is_sorted",'
        ' "Line": 1, "Column": 8, "EndLine": 3, "EndColumn": 1},'
        ' {"SymbolType": "Method", "Module": "M", "ParentClass": "C", "Name": "x\'", "Line": 5, "Column": 8,'
        ' "EndLine": 6, "EndColumn": 1},'
        ' {"SymbolType": "Call", "Name": "ignored"}] SYMBOLS_END')
    assert len(symbols) == 2
    assert impl_matches("Impl$$_module.__default.is__sorted", symbols[0])
    assert impl_matches("Impl$$_3_M.C.x_k", symbols[1])
    assert not impl_matches("CheckWellformed$$_module.__default.is__sorted", symbols[0])
    assert pair_implementations(["Impl$$_module.__default.is__sorted", "Impl$$_3_M.C.x_k"], symbols) == []
    assert pair_implementations(["Impl$$_module.__default.is__sorted"], symbols) == [
        "M.C.x' was not verified (its obligation was dropped)"]


# -- prompts --------------------------------------------------------------------------------------


def test_extract_program_strips_fences_and_unicode() -> None:
    from proofgym.agents.prompts.skillforge import braces_balanced, extract_program, parse_diagnosis, render

    reply = "Here:\n```python\nprint()\n```\n```dafny\nmethod M(x: int)\n  ensures x \u2265 0 \u21d2 true   \n{ }\n\n```"
    program = extract_program(reply)
    assert program == "method M(x: int)\n  ensures x >= 0 ==> true\n{ }\n" and braces_balanced(program)
    assert not braces_balanced("method M() { (")
    assert parse_diagnosis("category: body_error\nline: 7\nsuggestion: add an assert") == (
        "body_error", 7, "add an assert")
    assert parse_diagnosis("no idea")[0] == "unknown"
    prompt = render("synth_body", description="D", spec="S", context="C")
    assert "Do NOT modify the signature" in prompt and "Dafny 2.3" in prompt


def test_zero_shot_dafny_prompts_ask_for_the_whole_program() -> None:
    from proofgym.agents.prompts import prompts_for
    from proofgym.envs.types import Task

    task = Task(id="d", system="dafny", context="function F(): int { 1 }", statement="method M()\n  ensures F() == 1\n",
                reference_proof="", metadata={"description": "Do it."})
    system, user = prompts_for("dafny").messages(task)
    assert "Do it." in user["content"] and "keep every header exactly" in user["content"]
    assert "function F()" in user["content"] and "Do not restate" not in user["content"]
    assert "```dafny" in prompts_for("dafny").repair("Verdict: FAIL")


# -- line endings, classification and Boogie's view (issue 12) ----------------------------------


def test_normalize_source_makes_cr_crlf_and_bom_lf() -> None:
    from proofgym.envs.verifiers.dafny.lexer import normalize_source

    assert normalize_source("\ufeffa\r\nb\rc\nd\r\r\n") == "a\nb\nc\nd\n\n"
    assert normalize_source("plain\n") == "plain\n"
    assert normalize_source("x\ufeff") == "x\ufeff"  # only a leading BOM is a BOM


@pytest.mark.parametrize("sep", ["\n", "\r\n", "\r"])
def test_lexer_counts_lines_as_dafny_does(sep: str) -> None:
    text = sep.join(["// note", "lemma L()", "  ensures true", "{", "}"])
    tokens = tokenize(text)
    assert [(t.text, t.line, t.col) for t in tokens[:2]] == [("lemma", 2, 1), ("L", 2, 7)]
    assert tokens[-1].line == 5


def test_a_line_comment_ends_at_a_lone_cr() -> None:
    """Dafny's scanner: ``// x<CR>assume false;`` is a comment and then code."""
    tokens = tokenize("// x\rassume false;\n")
    assert [t.text for t in tokens] == ["assume", "false", ";"] and tokens[0].line == 2
    assert any("assume" in r for r in banned_constructs(tokens))


def test_bom_is_skipped_and_columns_start_after_it() -> None:
    tokens = tokenize("\ufefflemma L() {}")
    assert (tokens[0].text, tokens[0].line, tokens[0].col) == ("lemma", 1, 1)


def test_module_scopes() -> None:
    from proofgym.envs.verifiers.dafny.integrity import module_scopes

    tokens = tokenize("abstract module A { lemma L() }\nmodule {:options \"x\"} B refines A { }\nmodule O { module I { } }")
    scopes = {m.name: m for m in module_scopes(tokens)}
    assert scopes["A"].abstract and not scopes["B"].abstract and scopes["B"].refines == "A"
    assert scopes["I"].open > scopes["O"].open and scopes["I"].close < scopes["O"].close


def test_boogie_names_map_back_to_dafny_keys() -> None:
    from proofgym.envs.verifiers.dafny.integrity import boogie_key, sanitize, unsanitize

    for name in ("is_sorted", "x'", "P?", "L#", "a__b"):
        assert unsanitize(sanitize(name)) == name
    assert boogie_key("_1_B.__default.L") == ("B", "_default", "L")
    assert boogie_key("_module.Gen") == ("_module", "Gen")
    assert boogie_key("_module.__default.EvL_h") == ("_module", "_default", "EvL#")


BPL = """procedure Call$$_module.Gen.__ctor(n#0: int);
procedure Call$$_module.Gen.MoveNext(this: ref);
procedure Impl$$_module.Gen(this: ref);
procedure Call$$_module.__default.Use();
procedure Impl$$_module.__default.Use();
implementation Impl$$_module.__default.Use()
{
}
// function declaration for _module.Gen.Valid
// function declaration for _module._default.Magic
"""


def test_boogie_view_finds_a_body_that_is_never_verified() -> None:
    """Dafny 2.3 declares ``Impl$$`` for an iterator with an empty body but gives it no
    implementation: the obligation is dropped, and only the translation shows it."""
    from proofgym.envs.verifiers.dafny.integrity import Declarations, boogie_findings, boogie_unverified, parse_boogie

    view = parse_boogie(BPL)
    assert view.implementations == ("Impl$$_module.__default.Use",)
    unverified = boogie_unverified(view, ["Impl$$_module.__default.Use"])
    assert unverified == ["Boogie: _module.Gen has a body that is never verified (no implementation)"]
    assert boogie_unverified(view, []) == unverified + ["Boogie: Impl$$_module.__default.Use was not verified"]
    findings = boogie_findings(view, Declarations())
    assert "Boogie: _module.Gen.MoveNext has no implementation (no body)" in findings
    assert "Boogie: _module.Gen._ctor has no implementation (no body)" in findings
    assert "Boogie: function _module._default.Magic has no definition (no body)" in findings
    assert not any("Valid" in r for r in findings)  # synthesised for the iterator: judged with it


def _symbols(*rows: tuple) -> list:
    import json

    keys = ("SymbolType", "Module", "ParentClass", "Name", "Line", "Column", "EndLine", "EndColumn")
    return parse_symbols("SYMBOLS_START " + json.dumps([dict(zip(keys, r, strict=True)) for r in rows]) + " SYMBOLS_END")


def test_classify_fails_closed_on_what_it_cannot_place() -> None:
    from proofgym.envs.verifiers.dafny.integrity import Anchor, classify_declarations

    tokens = tokenize("lemma L()\n  ensures true\n{\n}\n")
    symbols = _symbols(("Method", "_module", "_default", "L", 1, 7, 4, 1),
                       ("Method", "_module", "_default", "Ghost", 9, 3, 0, 0),  # nowhere in the text
                       ("Constant", "_module", "_default", "K", 1, 7, 0, 0))  # a kind proofgym does not know
    decls = classify_declarations(Anchor((), (), ()), tokens, symbols, [])
    assert len(decls.unplaced) == 2 and not decls.cheats
    assert any("Ghost" in u for u in decls.unplaced) and any("Constant" in u for u in decls.unplaced)


def test_classify_bodyless_iterator_trait_obligation_and_marks() -> None:
    from proofgym.envs.verifiers.dafny.integrity import Anchor, classify_declarations, mark_axioms

    text = ("iterator It() yields (x: int)\n"
            "trait T { method M() ensures true }\n"
            "class C extends T { method M() ensures true { } }\n"
            "trait U { lemma N() ensures false }\n")
    tokens = tokenize(text)
    symbols = _symbols(("Class", "_module", None, "It", 1, 10, 0, 0),
                       ("Method", "_module", "It", "MoveNext", 1, 10, 0, 0),
                       ("Class", "_module", None, "T", 2, 7, 2, 35),
                       ("Method", "_module", "T", "M", 2, 18, 0, 0),
                       ("Class", "_module", None, "C", 3, 7, 3, 49),
                       ("Method", "_module", "C", "M", 3, 28, 3, 47),
                       ("Class", "_module", None, "U", 4, 7, 4, 35),
                       ("Method", "_module", "U", "N", 4, 17, 0, 0))
    decls = classify_declarations(Anchor((), (), ()), tokens, symbols, [])
    assert not decls.unplaced
    assert [c.split(" (")[0] for c in decls.cheats] == [
        "iterator It has no body", "lemma U.N has no body and no class that extends U implements it"]
    assert [s.label for s in decls.allowed] == ["T.M"]  # an obligation: C implements it
    marked, inserted = mark_axioms(text, decls.marks)
    assert "trait T { method  {:axiom} M()" in marked and inserted == [(2, 18)]


def test_boogie_view_knows_a_body_with_nothing_to_prove() -> None:
    """No implementation and only ``free ensures``: Dafny had nothing to check (a helper with no
    postcondition and no check in its body); a checked ``ensures`` makes the same gap a dropped one."""
    from proofgym.envs.verifiers.dafny.integrity import boogie_unverified, parse_boogie

    free = ("procedure Impl$$_module.__default.Inc(x#0: int) returns (y#0: int);\n  modifies $Heap;\n"
            "  free ensures $HeapSucc(old($Heap), $Heap);\n\n")
    view = parse_boogie(free)
    assert view.nothing_to_prove == ("Impl$$_module.__default.Inc",) and boogie_unverified(view, []) == []
    assert ("_module", "_default", "Inc") in view.bodies
    checked = parse_boogie(free.replace("  free ensures", "  ensures y#0 > x#0;\n  free ensures"))
    assert checked.nothing_to_prove == () and boogie_unverified(checked, []) == [
        "Boogie: _module.__default.Inc has a body that is never verified (no implementation)"]


def test_only_dafnys_include_form_is_a_cheat() -> None:
    """``include "file"`` brings in unchecked code; a C ``#include <x.h>`` from a confused model is a
    parse error for Dafny to report (ERROR), not a cheat."""
    assert any("include" in r for r in banned_constructs(tokenize('include "/etc/lib.dfy"\nlemma L() {}')))
    assert banned_constructs(tokenize("#include <dafny.h>\nlemma L() {}")) == []
