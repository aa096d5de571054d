"""Fast tier for Dafny (no prover): the lexer, the output parser and its traps, the taxonomy, the
integrity helpers, and the prompt post-processing."""

from __future__ import annotations

import pytest

from proofgym.envs.types import ErrorCategory
from proofgym.envs.verifiers.dafny_integrity import (
    banned_constructs,
    impl_matches,
    pair_implementations,
    parse_symbols,
    split_header,
    top_level_decls,
)
from proofgym.envs.verifiers.dafny_lexer import DafnyLexError, attribute_spans, tokenize
from proofgym.envs.verifiers.dafny_output import (
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
