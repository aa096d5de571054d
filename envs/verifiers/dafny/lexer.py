"""A tokenizer for Dafny 2.3 source, used for integrity checks only (never to decide what verified).

Why a lexer at all: some cheats are invisible in Dafny's output (``assume``, ``{:verify false}``
with or without a space, ``decreases *``), so they must be recognised in the text, and by
*tokens*: a ban that matches the literal ``{:`` misses ``{ :verify false }``, which Dafny
accepts, and one that greps raw text fires on comments and strings. The lexer follows Dafny's
scanner: nested ``/* */`` comments, ``//`` comments, ``"..."`` strings with escapes, verbatim
``@"..."`` strings (``""`` is a quote, newlines allowed), char literals, identifiers that may
contain ``'``, ``_`` and ``?``, and the multi-character operators.

What has a body and what was verified is decided from Dafny's own output (symbols and trace),
see :mod:`proofgym.envs.verifiers.dafny.integrity`; this module only finds tokens and spans.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "CLAUSE_KEYWORDS",
    "DECL_KEYWORDS",
    "DafnyLexError",
    "Token",
    "attribute_spans",
    "bracket_closes",
    "matching_close",
    "matching_open",
    "normalize_source",
    "tokenize",
]


class DafnyLexError(ValueError):
    """The text cannot be cut into Dafny tokens (unterminated comment, string or char)."""


@dataclass(frozen=True)
class Token:
    """One token: ``kind`` is ``ident``, ``number``, ``string``, ``char`` or ``op``."""

    kind: str
    text: str
    start: int  # character offset in the source
    end: int
    line: int  # 1-based, like Dafny's messages
    col: int  # 1-based column counted in UTF-8 bytes, as Dafny's scanner counts it (a tab is one)

    def __str__(self) -> str:
        return self.text


#: Words that start a declaration (or a modifier of one) at the level of a module or class.
DECL_KEYWORDS = frozenset({
    "method", "lemma", "function", "predicate", "constructor", "class", "trait", "datatype",
    "codatatype", "type", "newtype", "const", "var", "module", "import", "iterator", "inductive",
    "copredicate", "colemma", "twostate", "ghost", "static", "protected", "include", "abstract",
    "least", "greatest", "export", "opened",
})

#: Specification clauses of a method, function or lemma header.
CLAUSE_KEYWORDS = frozenset({"requires", "ensures", "modifies", "reads", "decreases"})

_OPS = sorted(
    [
        "<==>", "==>", "<==", "==", "!=", "<=", ">=", "&&", "||", ":=", ":|", "::", "..", "!!",
        "=>", "->", "~>", "-->", "<<", ">>",
    ],
    key=len,
    reverse=True,
)
_IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_'?]*")
_NUMBER_RE = re.compile(r"0x[0-9A-Fa-f_]+|[0-9][0-9_]*(?:\.[0-9][0-9_]*)?")
_CHAR_RE = re.compile(r"'(?:\\u[0-9A-Fa-f]{4}|\\.|[^'\\\n\r])'")
_BOM = "\ufeff"
_LINE_BREAK_RE = re.compile(r"\r\n?|\n")
_LINE_END_RE = re.compile(r"[\r\n]")


def normalize_source(text: str) -> str:
    """``text`` with a leading byte-order mark dropped and CRLF and lone CR turned into LF.

    Why: Dafny's scanner ends a line at LF, at CRLF and at a lone CR, and skips a UTF-8 BOM; a
    reader that counts only LF puts a declaration Dafny reports on another line (or, after a lone
    CR, reads code as the rest of a ``//`` comment). Every text the verifier reads goes through
    this once, so the program Dafny checks and the one proofgym reads are the same LF text, and a
    CRLF, CR-only or BOM file gets exactly the verdict of its LF twin.
    """
    if text.startswith(_BOM):
        text = text[1:]
    return _LINE_BREAK_RE.sub("\n", text) if "\r" in text else text


def tokenize(text: str) -> list[Token]:
    """Cut ``text`` into tokens, dropping whitespace and comments.

    Raises:
        DafnyLexError: on an unterminated comment, string or char literal, or a stray character.
    """
    tokens: list[Token] = []
    i, n = (1 if text.startswith(_BOM) else 0), len(text)
    line, line_start = 1, i
    # The column (in UTF-8 bytes, as Dafny counts) grows from the last token's: slicing from the line's start
    # for every token made a long line quadratic (red team round 6: 32,000 `}` took a second of CPU).
    col_at, col_bytes = i, 0

    def advance_lines(a: int, b: int) -> None:
        # Dafny's scanner: a line ends at LF, at CRLF (one break) and at a lone CR.
        nonlocal line, line_start
        for m in _LINE_BREAK_RE.finditer(text, a, b):
            line += 1
            line_start = m.end()

    while i < n:
        c = text[i]
        if c in " \t\r\n\f\v":
            if c == "\n" or (c == "\r" and not text.startswith("\r\n", i)):
                line += 1
                line_start = i + 1
            i += 1
            continue
        if text.startswith("//", i):
            m = _LINE_END_RE.search(text, i)
            i = n if m is None else m.start()  # a // comment ends at a CR too, as in Dafny's scanner
            continue
        if text.startswith("/*", i):
            depth, j = 1, i + 2
            while depth:
                if j >= n:
                    raise DafnyLexError(f"line {line}: unterminated /* comment")
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            advance_lines(i, j)
            i = j
            continue
        start_line = line
        if col_at < line_start:  # a new line since the last token
            col_at, col_bytes = line_start, 0
        piece = text[col_at:i]
        col_bytes += len(piece) if piece.isascii() else len(piece.encode("utf-8", "surrogatepass"))
        col_at = i
        col = col_bytes + 1
        if c == '"' or (c == "@" and text.startswith('@"', i)):
            verbatim = c == "@"
            j = i + (2 if verbatim else 1)
            while True:
                if j >= n:
                    raise DafnyLexError(f"line {start_line}: unterminated string literal")
                ch = text[j]
                if verbatim:
                    if ch == '"':
                        if text.startswith('""', j):
                            j += 2
                            continue
                        j += 1
                        break
                    j += 1
                else:
                    if ch == "\\":
                        j += 2
                        continue
                    if ch in "\r\n":
                        raise DafnyLexError(f"line {start_line}: newline in string literal")
                    j += 1
                    if ch == '"':
                        break
            tokens.append(Token("string", text[i:j], i, j, start_line, col))
            advance_lines(i, j)
            i = j
            continue
        if c == "'":
            m = _CHAR_RE.match(text, i)
            if m is None:
                raise DafnyLexError(f"line {line}: malformed char literal")
            tokens.append(Token("char", m.group(), i, m.end(), line, col))
            i = m.end()
            continue
        m = _IDENT_RE.match(text, i)
        if m:
            tokens.append(Token("ident", m.group(), i, m.end(), line, col))
            i = m.end()
            continue
        m = _NUMBER_RE.match(text, i)
        if m:
            tokens.append(Token("number", m.group(), i, m.end(), line, col))
            i = m.end()
            continue
        for op in _OPS:
            if text.startswith(op, i):
                tokens.append(Token("op", op, i, i + len(op), line, col))
                i += len(op)
                break
        else:
            if c in "{}()[]<>,;:.=+-*/%!&|^~?#`":
                tokens.append(Token("op", c, i, i + 1, line, col))
                i += 1
            else:
                raise DafnyLexError(f"line {line} column {col}: unexpected character {c!r}")
    return tokens


_OPENERS = {"(": ")", "[": "]", "{": "}"}
_CLOSERS = {v: k for k, v in _OPENERS.items()}


def matching_open(tokens: list[Token], close_index: int) -> int:
    """Index of the bracket that ``tokens[close_index]`` (a ``)``, ``]`` or ``}``) closes, or -1."""
    want = _CLOSERS.get(tokens[close_index].text)
    if want is None:
        return -1
    stack: list[str] = []
    for k in range(close_index, -1, -1):
        t = tokens[k].text
        if t in _CLOSERS:
            stack.append(t)
        elif t in _OPENERS:
            if not stack or _CLOSERS[stack[-1]] != t:
                return -1
            stack.pop()
            if not stack:
                return k
    return -1


def matching_close(tokens: list[Token], open_index: int) -> int:
    """Index of the bracket that closes ``tokens[open_index]`` (a ``(``, ``[`` or ``{``), or -1."""
    if tokens[open_index].text not in _OPENERS:
        return -1
    stack: list[str] = []
    for k in range(open_index, len(tokens)):
        t = tokens[k].text
        if t in _OPENERS:
            stack.append(t)
        elif t in _CLOSERS:
            if not stack or _OPENERS[stack[-1]] != t:
                return -1
            stack.pop()
            if not stack:
                return k
    return -1


def bracket_closes(tokens: Sequence[Token]) -> list[int]:
    """``matching_close(tokens, k)`` for every ``k`` at once, in one pass (-1 where it is -1).

    Why: a caller that asks for many brackets (every attribute, every module) scanned to the end for each, and a
    program of nested ``module M {`` lines (red team round 6) made that quadratic in the program's length.
    A closer that does not match the innermost open bracket ends the scan of every bracket still open (each
    would meet it first), exactly as :func:`matching_close` reads it.
    """
    closes = [-1] * len(tokens)
    stack: list[int] = []
    for k, t in enumerate(tokens):
        if t.text in _OPENERS:
            stack.append(k)
        elif t.text in _CLOSERS and stack:
            if _OPENERS[tokens[stack[-1]].text] == t.text:
                closes[stack.pop()] = k
            else:
                stack.clear()
    return closes


def attribute_spans(tokens: list[Token]) -> list[tuple[str, int, int]]:
    """Every attribute as ``(name, first index, last index)``.

    An attribute is a ``{`` token followed by a ``:`` token, whatever lies between them
    (Dafny accepts ``{ :verify false }`` and ``{/* */:verify false}``). Nothing else in
    Dafny's grammar puts ``:`` right after ``{``. The name is the identifier after ``:``
    (``""`` if there is none, which Dafny rejects anyway).
    """
    spans = []
    closes: list[int] | None = None
    for k in range(len(tokens) - 1):
        if tokens[k].text == "{" and tokens[k + 1].text == ":":
            name = tokens[k + 2].text if k + 2 < len(tokens) and tokens[k + 2].kind == "ident" else ""
            if closes is None:
                closes = bracket_closes(tokens)
            end = closes[k]
            spans.append((name, k, end if end != -1 else len(tokens) - 1))
    return spans
