"""Red team: what a submission costs before any prover runs. The reply parser's fence pairing and Dafny's
bracket, attribute and module readers and lexer are one pass; each test pins that they answer exactly what the
old (quadratic) readers answered. The cost was measured, never asserted as a timing.

Moved from the red-team rounds (tests/redteam/ROUNDS.md: what each round found and fixed):
round 6.
"""

from __future__ import annotations

# ---------------------------------------------------------------------------------------------
# What a submission costs before any prover runs: the pure-Python readers are linear
#
# Found and fixed here: ``last_code_block`` copied and searched the rest of the fence list for every opener
# (32,000 fence lines: 4.3 s of CPU, 17 s at the 256 KB submission limit; the reply parser runs in the trainer
# too); Dafny's ``attribute_spans`` and ``module_scopes`` scanned to the end of the program for each nested
# attribute or module (5,800 nested ``module M {`` lines: 3.2 s of CPU, ~50 s at the limit; 16,000 nested
# ``{:a``: past 250 s of wall time at nice 19); the Dafny lexer sliced each line from its start for every token.
# Tests here pin that the one-pass versions answer exactly what the old readers answered; the cost was measured
# (never a timing threshold in a test).


def test_last_code_block_pairs_fences_as_before():
    from proofgym.envs.parsing import last_code_block

    cases = {
        "```coq\nA\n```\ntext\n```\nB\n```\n": ("B\n", True, True),
        "```\nA\n```\n```coq\nB": ("B", True, False),
        "~~~\nA\n```\nB\n~~~\n": ("A\n```\nB\n", True, True),
        "````\nA\n```\nB\n````\n": ("A\n```\nB\n", True, True),
        "```\nA\n```py\nB\n```\n": ("A\n```py\nB\n", True, True),
        "no fence": ("no fence", False, True),
        "```\n" * 9: ("", True, False),
        "```\n" * 10: ("", True, True),
    }
    for text, expected in cases.items():
        assert last_code_block(text) == expected, text


def test_bracket_closes_is_matching_close_for_every_bracket():
    import random

    from proofgym.envs.verifiers.dafny.lexer import Token, bracket_closes, matching_close

    rng = random.Random(6)
    for _ in range(2000):
        tokens = [Token("op", rng.choice("()[]{}x"), 0, 0, 1, 1) for _ in range(rng.randint(0, 24))]
        assert bracket_closes(tokens) == [matching_close(tokens, k) for k in range(len(tokens))]


def test_nested_modules_and_attributes_are_read_as_before():
    from proofgym.envs.verifiers.dafny.integrity import module_scopes
    from proofgym.envs.verifiers.dafny.lexer import attribute_spans, tokenize

    tokens = tokenize("module {:a {:b}} M refines N {\n  module P { }\n  lemma {:c} L() { }\n}\nmodule Q { ")
    assert [(s.name, s.refines, tokens[s.open].text, tokens[s.close].text) for s in module_scopes(tokens)] == [
        ("M", "N", "{", "}"), ("P", "", "{", "}")]
    assert [(name, tokens[a].text, tokens[b].text) for name, a, b in attribute_spans(tokens)] == [
        ("a", "{", "}"), ("b", "{", "}"), ("c", "{", "}")]
    deep = tokenize("module M {\n" * 300 + "}\n" * 300)
    assert len(module_scopes(deep)) == 300


def test_the_dafny_lexer_counts_columns_in_utf8_bytes_after_many_tokens():
    """The column grows from the last token's now: the same UTF-8 byte columns as the old reader's slices."""
    from proofgym.envs.verifiers.dafny.lexer import tokenize

    text = "var a := \"\u00e9\u2200\"; x\r\n  y /* \u00e9\n */ z {" + "}" * 50 + " w\n@\"a\u00e9\nb\" q 'c'"
    assert {t.text: (t.line, t.col) for t in tokenize(text)} == {
        "var": (1, 1), "a": (1, 5), ":=": (1, 7), '"\u00e9\u2200"': (1, 10), ";": (1, 17), "x": (1, 19),
        "y": (2, 3), "z": (3, 5), "{": (3, 7), "}": (3, 57), "w": (3, 59), '@"a\u00e9\nb"': (4, 1), "q": (5, 4),
        "'c'": (5, 6)}
