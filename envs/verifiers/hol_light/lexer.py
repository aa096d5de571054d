"""The OCaml (HOL Light syntax) lexer the verifier, the tactic parser and the suite extractor share.

It cuts source at toplevel ``;;`` and skips what can hide a ``;;`` or a ``*)``: nested comments,
strings (also inside comments, as OCaml lexes them), character literals and HOL term quotations.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class Phrase:
    """One toplevel phrase: ``text[start:end]`` up to (not including) its ``;;``."""

    start: int
    end: int
    text: str


_SCAN = re.compile(r"\(\*|\"|`|'|;;")
_COMMENT_TOKENS = re.compile(r"\(\*|\*\)|\"")
#: An OCaml character literal (``'x'``, ``'\\n'``, ``'\\065'``, ``'\\x41'``); any other ``'`` is a type variable or a prime.
CHAR_LITERAL = re.compile(r"'(?:[^\\']|\\(?:[\\'\"ntbr ]|\d{3}|x[0-9a-fA-F]{2}))'")


def skip_string(text: str, i: int) -> int | None:
    """The index just past the OCaml string literal that opens at ``text[i]``; ``None`` if it never closes."""
    j = i + 1
    while True:
        k = text.find('"', j)
        if k < 0:
            return None
        backslashes = 0
        while text[k - 1 - backslashes] == "\\":
            backslashes += 1
        if backslashes % 2 == 0:
            return k + 1
        j = k + 1


def skip_comment(text: str, i: int) -> int | None:
    """The index just past the (nested) OCaml comment that opens at ``text[i]``; ``None`` if it never closes.

    Strings inside a comment are lexed as strings, as OCaml does: a ``*)`` in one does not end the comment.
    """
    depth, j = 0, i
    while True:
        m = _COMMENT_TOKENS.search(text, j)
        if m is None:
            return None
        tok = m.group(0)
        if tok == "(*":
            depth, j = depth + 1, m.end()
        elif tok == "*)":
            depth, j = depth - 1, m.end()
            if depth == 0:
                return j
        else:
            k = skip_string(text, m.start())
            if k is None:
                return None
            j = k


def regions(text: str) -> Iterator[tuple[str, int, int]]:
    """``(kind, start, end)`` of each comment, string, quotation and toplevel ``;;`` (kind ``end``), in order.

    It jumps from one interesting character to the next with a regex, so a 46 MB s2n-bignum tree is cut in
    seconds; an unclosed comment, string or quotation runs to the end of the text.
    """
    i, n = 0, len(text)
    while True:
        m = _SCAN.search(text, i)
        if m is None:
            return
        tok, s = m.group(0), m.start()
        if tok == "(*":
            i = skip_comment(text, s) or n
            yield "comment", s, i
        elif tok == '"':
            i = skip_string(text, s) or n
            yield "string", s, i
        elif tok == "`":
            k = text.find("`", s + 1)
            i = n if k < 0 else k + 1
            yield "quotation", s, i
        elif tok == "'":
            c = CHAR_LITERAL.match(text, s)
            i = c.end() if c else s + 1
        else:
            i = s + 2
            yield "end", s, i


def split_phrases(source: str) -> list[Phrase]:
    """Cut OCaml (HOL Light syntax) source at toplevel ``;;``, skipping comments, strings, chars and quotations."""
    phrases: list[Phrase] = []
    start = 0
    for kind, s, e in regions(source):
        if kind == "end":
            phrases.append(Phrase(start, s, source[start:s]))
            start = e
    if source[start:].strip():
        phrases.append(Phrase(start, len(source), source[start:]))
    return phrases


def strip_comments(text: str) -> str:
    """``text`` with OCaml comments replaced by a space (strings and quotations kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text.startswith("(*", i):
            i = skip_comment(text, i) or n
            out.append(" ")
        elif text[i] == '"':
            j = skip_string(text, i) or n
            out.append(text[i:j])
            i = j
        elif text[i] == "`":
            j = text.find("`", i + 1)
            j = n if j < 0 else j + 1
            out.append(text[i:j])
            i = j
        else:
            out.append(text[i])
            i += 1
    return "".join(out)
