"""A Coq sentence splitter that follows Coq's lexer where it matters for safety.

It knows nested comments ``(* (* *) *)``, strings (``""`` escapes a quote, and
a string inside a comment is still a string, as in Coq), qualified names
(``List.app``), ``x.(f)`` projections, ellipses, and the sentences that end
without a period: bullets (``-``, ``+``, ``*``, repeated) and braces ``{``/``}``,
optionally after a goal selector (``2: {``).

It is deliberately conservative: a text that Coq would cut differently is
either cut *earlier* here (so Coq sees an incomplete sentence and reports a
syntax error) or rejected. The Coq verifier additionally wraps every tactic
sentence in parentheses before sending it, so that Coq's own parser must agree
with this cut or fail (see ``verifier.py``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass


class CoqLexError(ValueError):
    """Unterminated comment or string, or other text Coq would reject."""


@dataclass(frozen=True)
class Sentence:
    """One sentence of Coq source. ``text`` excludes leading whitespace/comments."""

    start: int  # offset of the first character of the sentence body (after comments)
    end: int  # offset just past the terminator
    text: str  # body with comments kept, stripped of surrounding whitespace
    code: str  # body with comments removed and whitespace collapsed (for classification)
    kind: str  # "sentence", "bullet" or "brace"


_BULLET_RE = re.compile(r"(-+|\++|\*+)")
# What may follow a bullet without a space: the first letter of a tactic name, or a
# parenthesised tactic. Not a digit (``-1``) nor a symbol (``->``, ``*)``).
_GLUED_TACTIC_RE = re.compile(r"[A-Za-z_(]")
_SELECTOR_BRACE_RE = re.compile(r"((?:\d+|\[[^\]]*\]|all|!|par)\s*:\s*)?\{")


def _skip_comment(src: str, i: int) -> int:
    """``src[i:i+2] == '(*'``. Return the index just past the matching ``*)``."""
    depth = 0
    n = len(src)
    while i < n:
        if src.startswith("(*", i):
            depth += 1
            i += 2
        elif src.startswith("*)", i):
            depth -= 1
            i += 2
            if depth == 0:
                return i
        elif src[i] == '"':
            i = _skip_string(src, i)
        else:
            i += 1
    raise CoqLexError("unterminated comment")


def _skip_string(src: str, i: int) -> int:
    """``src[i] == '"'``. Return the index just past the closing quote (``""`` escapes)."""
    n = len(src)
    i += 1
    while i < n:
        if src[i] == '"':
            if i + 1 < n and src[i + 1] == '"':
                i += 2
                continue
            return i + 1
        i += 1
    raise CoqLexError("unterminated string")


def strip_comments(text: str) -> str:
    """Remove comments (nested, string-aware) and collapse whitespace."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        if text.startswith("(*", i):
            i = _skip_comment(text, i)
            out.append(" ")
        elif text[i] == '"':
            j = _skip_string(text, i)
            out.append(text[i:j])
            i = j
        else:
            out.append(text[i])
            i += 1
    return " ".join("".join(out).split())


def _skip_blank(src: str, i: int) -> int:
    n = len(src)
    while i < n:
        if src[i].isspace():
            i += 1
        elif src.startswith("(*", i):
            i = _skip_comment(src, i)
        else:
            break
    return i


def split_sentences(src: str) -> list[Sentence]:
    """Cut Coq source into sentences.

    Raises:
        CoqLexError: on an unterminated comment/string or a trailing sentence
            without its final period.
    """
    return list(_split(src))


@functools.lru_cache(maxsize=64)
def _split(src: str) -> tuple[Sentence, ...]:
    # A check cuts its task's context several times (the normaliser, the leak scan, the audit's closings, the
    # session): a stdlib file's prefix is 10-40 ms each time. Sentences are frozen, so the cut is shared.
    return tuple(iter_sentences(src))


def iter_sentences(src: str) -> Iterator[Sentence]:
    """The sentences of ``src`` one by one, so that a reader can stop before text that does not lex.

    Raises:
        CoqLexError: when the next sentence cannot be cut (see :func:`split_sentences`).
    """
    i, n = 0, len(src)
    while True:
        i = _skip_blank(src, i)
        if i >= n:
            return
        start = i
        # Bullets and braces are sentences of their own, without a period.
        m = _BULLET_RE.match(src, i)
        if m and (m.end() >= n or src[m.end()].isspace() or src.startswith("(*", m.end())
                  or src[m.end()] == "{" or _GLUED_TACTIC_RE.match(src, m.end())):
            # ``-`` alone, not ``-1`` or ``->``; a bullet may be directly followed by a brace,
            # and Coq's lexer also reads ``-reflexivity.`` as the bullet ``-`` and a tactic.
            yield Sentence(start, m.end(), m.group(0), m.group(0), "bullet")
            i = m.end()
            continue
        m = _SELECTOR_BRACE_RE.match(src, i)
        if m:
            body = src[start : m.end()]
            yield Sentence(start, m.end(), body, " ".join(body.split()), "brace")
            i = m.end()
            continue
        if src[i] == "}":
            yield Sentence(start, i + 1, "}", "}", "brace")
            i += 1
            continue
        # An ordinary sentence: up to a period followed by whitespace or end of text.
        j = i
        while True:
            if j >= n:
                raise CoqLexError(f"sentence starting at offset {start} has no final period: {src[start:start + 60]!r}")
            c = src[j]
            if src.startswith("(*", j):
                j = _skip_comment(src, j)
                continue
            if c == '"':
                j = _skip_string(src, j)
                continue
            if c == "." and (j + 1 >= n or src[j + 1].isspace() or src.startswith("(*", j + 1)):
                # Coq's lexer reads the longest symbol: ``..`` is a token (``cons x ..``,
                # ``[ tac | .. ]``), not the end of a sentence; ``...`` is a terminator.
                run = 1
                while j - run >= start and src[j - run] == ".":
                    run += 1
                if run != 2:
                    j += 1
                    break
            j += 1
        body = src[start:j]
        yield Sentence(start, j, body.strip(), strip_comments(body), "sentence")
        i = j


def open_blocks(src: str) -> list[tuple[str, str]]:
    """Sections and modules still open at the end of ``src``, outermost first.

    Returns ``(kind, name)`` pairs, kind ``"Section"``, ``"Module"`` or ``"Module Type"``.
    Handles ``Module Import M.``, ``Module X := M.`` (a definition, no block) and
    ``Module M <: S with Module E := P.`` (a block despite the ``:=``).
    """
    blocks: list[Block] = []
    for s in split_sentences(src):
        update_blocks(blocks, command_head(s.code)[0])
    return [(b.kind, b.name) for b in blocks]


def strip_attributes(code: str) -> str:
    """Drop leading ``#[...]`` attributes."""
    code = code.lstrip()
    while code.startswith("#["):
        depth = 0
        for k, ch in enumerate(code):
            if ch == "[":
                depth += 1
            elif ch == "]":
                depth -= 1
                if depth == 0:
                    code = code[k + 1 :].lstrip()
                    break
        else:
            return code
    return code


# --- Section/Module blocks -------------------------------------------------------------------
# One block tracker for the project: the verifier (open_blocks, audit_context) and the stdlib
# extractor (envs/tasks/coq_extract.py) must agree on what a context leaves open.

#: Prefixes that can stand before a theorem keyword or a module command. ``Program`` is not one:
#: the extractor recognises it so that it can be excluded, not skipped.
MODIFIERS = ("Local", "Global", "Polymorphic", "Monomorphic", "Cumulative", "NonCumulative", "Private")
IDENT = r"[^\W\d][\w']*"
_SECTION_RE = re.compile(rf"Section\s+({IDENT})\s*\.$")
_MODULE_TYPE_RE = re.compile(rf"Module\s+Type\s+({IDENT})(.*)$", re.S)
_MODULE_RE = re.compile(rf"Module\s+(?:(?:Import|Export)(?:\s*\([^)]*\))?\s+)?({IDENT})(.*)$", re.S)
_END_RE = re.compile(rf"End\s+({IDENT})\s*\.$")
_CONSTRAINT_RE = re.compile(r"\bwith\s+(?:Definition|Module)\s+[^:]*$")


@dataclass(frozen=True)
class Block:
    """An open Section or Module: ``kind`` is "Section", "Module" or "Module Type"."""

    kind: str
    name: str
    functor: bool = False


def command_head(code: str) -> tuple[str, str]:
    """``code`` without leading attributes and modifiers, and the attribute text."""
    rest = strip_attributes(code)
    attributes = code[: len(code) - len(rest)]
    changed = True
    while changed:
        changed = False
        for modifier in MODIFIERS:
            if rest.startswith(modifier + " "):
                rest = rest[len(modifier) + 1 :].lstrip()
                changed = True
    return rest, attributes


def is_block_command(head: str) -> bool:
    """Whether ``head`` (a :func:`command_head`) is a Section, Module (Type) or End command."""
    return bool(_SECTION_RE.match(head) or _MODULE_RE.match(head) or _END_RE.match(head))


def update_blocks(blocks: list[Block], head: str) -> bool:
    """Apply a Section/Module/End command to the block stack; False if ``head`` is none of them."""
    m = _SECTION_RE.match(head)
    if m:
        blocks.append(Block("Section", m.group(1)))
        return True
    m = _MODULE_TYPE_RE.match(head)
    if m:
        if not _defines_body(m.group(2)):
            blocks.append(Block("Module Type", m.group(1), functor=m.group(2).lstrip().startswith("(")))
        return True
    m = _MODULE_RE.match(head)
    if m:
        if not _defines_body(m.group(2)):
            blocks.append(Block("Module", m.group(1), functor=m.group(2).lstrip().startswith("(")))
        return True
    m = _END_RE.match(head)
    if m:
        for k in range(len(blocks) - 1, -1, -1):
            if blocks[k].name == m.group(1):
                del blocks[k:]
                break
        return True
    return False


def _defines_body(rest: str) -> bool:
    """Whether a module command's tail has ``:= M`` (a definition, which opens no block).

    A ``:=`` inside a ``with Module E := M``/``with Definition t := u`` constraint does not count.
    """
    for m in re.finditer(":=", rest):
        if not _CONSTRAINT_RE.search(rest[: m.start()]):
            return True
    return False
