"""The OCaml (HOL Light syntax) lexer the verifier, the tactic parser and the suite extractor share.

It cuts source at toplevel ``;;`` and skips what can hide a ``;;`` or a ``*)``: nested comments,
strings (also inside comments, as OCaml lexes them), character literals and HOL term quotations.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Phrase:
    """One toplevel phrase: ``text[start:end]`` up to (not including) its ``;;``."""

    start: int
    end: int
    text: str


def split_phrases(source: str) -> list[Phrase]:
    """Cut OCaml (HOL Light syntax) source at toplevel ``;;``, skipping comments, strings, chars and quotations."""
    phrases: list[Phrase] = []
    i, n, start = 0, len(source), 0
    while i < n:
        c = source[i]
        if c == "(" and source.startswith("(*", i):
            i = skip_comment(source, i) or n
            continue
        if c == '"':
            i = skip_string(source, i) or n
            continue
        if c == "`":
            j = source.find("`", i + 1)
            i = n if j < 0 else j + 1
            continue
        if c == "'":
            m = re.match(r"'(?:[^\\']|\\(?:[\\'\"ntbr ]|\d{3}|x[0-9a-fA-F]{2}))'", source[i:i + 6])
            i += len(m.group(0)) if m else 1
            continue
        if c == ";" and source.startswith(";;", i):
            phrases.append(Phrase(start, i, source[start:i]))
            i += 2
            start = i
            continue
        i += 1
    if source[start:].strip():
        phrases.append(Phrase(start, n, source[start:]))
    return phrases


def skip_string(text: str, i: int) -> int | None:
    """The index just past the OCaml string literal that opens at ``text[i]``; ``None`` if it never closes."""
    i += 1
    while i < len(text):
        if text[i] == "\\":
            i += 2
        elif text[i] == '"':
            return i + 1
        else:
            i += 1
    return None


def skip_comment(text: str, i: int) -> int | None:
    """The index just past the (nested) OCaml comment that opens at ``text[i]``; ``None`` if it never closes.

    Strings inside a comment are lexed as strings, as OCaml does: a ``*)`` in one does not end the comment.
    """
    depth = 0
    while i < len(text):
        if text.startswith("(*", i):
            depth, i = depth + 1, i + 2
        elif text.startswith("*)", i):
            depth, i = depth - 1, i + 2
            if depth == 0:
                return i
        elif text[i] == '"':
            j = skip_string(text, i)
            if j is None:
                return None
            i = j
        else:
            i += 1
    return None


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
