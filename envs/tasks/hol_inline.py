"""HOL Light sources as HOL Light's ``inline_load.ml`` sees them: phrases, load statements, toplevel theorems.

s2n-bignum-bench builds its problems from *inlined* proof files: HOL Light's ``inline_load.ml``
replaces each ``needs``/``loadt``/``loads`` statement by the file it loads (``needs`` only once per
file, ``loadt`` every time), and TacticTrace's ``collect-toplevel-thms`` then lists every toplevel
``let NAME = prove(goal, proof)`` and ``let NAME = time prove(goal, proof)`` with the file it came
from. This module reimplements those rules on source text:

- :func:`split_phrases` (the HOL Light lexer's) cuts a file at toplevel ``;;``; it jumps from one
  special character to the next with a regex, fast enough for s2n-bignum's 56 MB of ML;
- :func:`blank_comments` replaces comments by spaces, keeping every offset;
- :func:`toplevel_theorems` finds the theorems of one phrase as the bench's AST rule does: the pattern
  is a plain name (``let _ = prove(...)`` binds no name and is not a theorem), the right-hand side is
  ``prove`` or ``time prove`` applied to a pair; each binding of ``let A = ... and B = ...`` counts;
- :class:`SourceTree` reads the files of a checkout once and walks their loads with ``needs``
  semantics (a file is identified by basename and digest, as ``hol_loader.ml`` does).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from proofgym.envs.verifiers.hol_light.lexer import CHAR_LITERAL as _CHAR
from proofgym.envs.verifiers.hol_light.lexer import Phrase, skip_string, split_phrases
from proofgym.envs.verifiers.hol_light.lexer import regions as _regions


def _skip_string(text: str, i: int) -> int:
    """Index just past the string literal opening at ``text[i]`` (the end of the text if it never closes)."""
    return skip_string(text, i) or len(text)


def blank_comments(text: str) -> str:
    """``text`` with every comment replaced by spaces (newlines kept): offsets stay the same."""
    out: list[str] = []
    last = 0
    for kind, s, e in _regions(text):
        if kind == "comment":
            out.append(text[last:s])
            out.append(re.sub(r"[^\n]", " ", text[s:e]))
            last = e
    out.append(text[last:])
    return "".join(out)


# --------------------------------------------------------------------------------------------
# toplevel theorems


@dataclass(frozen=True)
class Theorem:
    """One toplevel theorem of a phrase. Spans are offsets in the phrase's text."""

    name: str
    goal: str  # the goal expression's source text, e.g. "`x + 0 = x`" (what the bench calls the query)
    proof: str  # the proof expression's source text
    goal_span: tuple[int, int]
    proof_span: tuple[int, int]
    timed: bool  # written `time prove(...)`


def _depth_scan(text: str, start: int, stop: int) -> Iterator[tuple[int, str, int]]:
    """``(offset, char, depth)`` of each bracket, comma and word start of ``text[start:stop]``,
    skipping strings, chars and quotations (comments must already be blanked)."""
    depth, i = 0, start
    while i < stop:
        c = text[i]
        if c == '"':
            i = _skip_string(text, i)
            continue
        if c == "`":
            k = text.find("`", i + 1)
            i = stop if k < 0 else k + 1
            continue
        if c == "'":
            m = _CHAR.match(text, i)
            i = m.end() if m else i + 1
            continue
        if c in "([{":
            yield i, c, depth
            depth += 1
        elif c in ")]}":
            depth -= 1
            yield i, c, depth
        elif c == ",":
            yield i, c, depth
        elif (c.isalpha() or c == "_") and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] in "_'")):
            yield i, "w", depth
        i += 1


_LET = re.compile(r"\s*let(?:\s+rec)?\s+")
_BINDING = re.compile(r"([A-Za-z_][\w']*)\s*=\s*(time\s+)?prove\s*\(")
_AND = re.compile(r"and\b")
_LET_IN = re.compile(r"(let|in)\b")


def _bindings(blank: str, head: int) -> list[tuple[int, int]]:
    """The spans of the bindings of ``let b1 and b2 ...``: split at ``and`` outside brackets and inner lets."""
    spans, start, inner = [], head, 0
    for i, c, depth in _depth_scan(blank, head, len(blank)):
        if c != "w" or depth != 0:
            continue
        m = _LET_IN.match(blank, i)
        if m:
            inner += 1 if m.group(1) == "let" else -1
        elif inner == 0 and _AND.match(blank, i):
            spans.append((start, i))
            start = i + 3
    spans.append((start, len(blank)))
    return spans


def toplevel_theorems(text: str, *, anonymous: bool = False) -> list[Theorem]:
    """The theorems a phrase defines, by the bench's rule (see the module docstring).

    With ``anonymous``, ``let _ = prove(...)`` counts too (named ``_``): a context cheats its proof.
    """
    blank = blank_comments(text)
    head = _LET.match(blank)
    if head is None:
        return []
    found: list[Theorem] = []
    for start, stop in _bindings(blank, head.end()):
        m = _BINDING.match(blank, start + len(blank[start:stop]) - len(blank[start:stop].lstrip()))
        if m is None or (m.group(1) == "_" and not anonymous) or m.end() > stop:
            continue
        open_paren = m.end() - 1
        comma = close = -1
        for i, c, depth in _depth_scan(blank, open_paren + 1, stop):
            if depth == 0 and c == "," and comma < 0:  # a later comma is the proof's (`let a, b = ... in`)
                comma = i
            elif depth == -1 and c == ")":
                close = i
                break
        if comma < 0 or close < 0 or blank[close + 1:stop].strip():
            continue  # not exactly prove(a, b) as the whole right-hand side
        goal_span = _stripped(blank, open_paren + 1, comma)
        proof_span = _stripped(blank, comma + 1, close)
        if goal_span[0] >= goal_span[1] or proof_span[0] >= proof_span[1]:
            continue
        found.append(Theorem(m.group(1), text[goal_span[0]:goal_span[1]], text[proof_span[0]:proof_span[1]],
                             goal_span, proof_span, timed=m.group(2) is not None))
    return found


def _stripped(text: str, start: int, stop: int) -> tuple[int, int]:
    while start < stop and text[start].isspace():
        start += 1
    while stop > start and text[stop - 1].isspace():
        stop -= 1
    return start, stop


# --------------------------------------------------------------------------------------------
# files and loads

#: ``needs "path";;`` and friends, as one phrase (comments blanked).
_LOAD = re.compile(r"\s*(needs|loadt|loads)\s+\"([^\"\\]*)\"\s*")


@dataclass(frozen=True)
class Load:
    kind: str  # needs, loadt or loads
    path: str  # as written
    target: str | None  # the checkout file it loads (relative path), None when it is HOL Light's


@dataclass
class SourceFile:
    """One ``.ml`` file of the checkout, parsed once."""

    rel: str
    text: str
    digest: str
    phrases: list[Phrase]
    loads: dict[int, Load] = field(default_factory=dict)  # phrase index -> its load statement
    theorems: dict[int, list[Theorem]] = field(default_factory=dict)  # phrase index -> its theorems
    cheats: dict[int, list[Theorem]] = field(default_factory=dict)  # the same with `let _ = prove(...)`

    @property
    def fileid(self) -> tuple[str, str]:
        """How ``hol_loader.ml``'s ``needs`` knows a file: its basename and digest."""
        return (Path(self.rel).name, self.digest)

    def line_of(self, index: int) -> int:
        """1-based line where phrase ``index`` starts (its first non-blank character)."""
        ph = self.phrases[index]
        offset = ph.start + len(ph.text) - len(ph.text.lstrip())
        return self.text.count("\n", 0, offset) + 1


class SourceTree:
    """The ``.ml`` files of a checkout, read on demand, with HOL Light's load semantics.

    A load's path is looked up as ``hol_loader.ml`` does with ``load_path = ["."; "$"]`` and the
    checkout as the working directory: first in the checkout, else it is a HOL Light library file
    (``Library/words.ml``), which is never inlined: such a load stays a statement of the context.
    ``loads`` looks in HOL Light's directory only.
    """

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).resolve()
        self._files: dict[str, SourceFile] = {}

    def resolve(self, kind: str, path: str) -> str | None:
        if kind == "loads" or Path(path).is_absolute() or path.startswith("$"):
            return None
        candidate = self.root / path
        return str(Path(path)) if candidate.is_file() else None

    def file(self, rel: str) -> SourceFile:
        found = self._files.get(rel)
        if found is not None:
            return found
        raw = (self.root / rel).read_bytes()
        text = raw.decode("utf-8", errors="replace")
        src = SourceFile(rel, text, hashlib.md5(raw).hexdigest(), split_phrases(text))  # noqa: S324 (hol_loader's Digest)
        for i, ph in enumerate(src.phrases):
            blank = blank_comments(ph.text)
            m = _LOAD.fullmatch(blank)
            if m:
                src.loads[i] = Load(m.group(1), m.group(2), self.resolve(m.group(1), m.group(2)))
            elif "prove" in blank:
                every = toplevel_theorems(ph.text, anonymous=True)
                if every:
                    src.cheats[i] = every
                    named = [t for t in every if t.name != "_"]
                    if named:
                        src.theorems[i] = named
        self._files[rel] = src
        return src

    def walk(self, rel: str, loaded: set[tuple[str, str]], visit: Callable[[SourceFile, int], None], *,
             start: int = 0, stop: int | None = None, once: bool = False,
             on_done: Callable[[SourceFile], None] | None = None, _open: frozenset[str] = frozenset()) -> None:
        """Call ``visit(file, phrase_index)`` for every phrase that loading ``rel`` runs, in order.

        A load of a checkout file is followed (``needs`` only if its file id is not in ``loaded``;
        ``loadt`` always, unless ``once``) instead of being visited; ``loaded`` is updated as
        ``hol_loader`` does, after the file has loaded (then ``on_done`` is called). HOL Light loads,
        and a load of a file that is still loading, are visited as phrases.
        """
        src = self.file(rel)
        end = len(src.phrases) if stop is None else stop
        for i in range(start, end):
            load = src.loads.get(i)
            if load is None or load.target is None or load.target in _open or load.target == rel:
                visit(src, i)
                continue
            target = self.file(load.target)
            if (load.kind == "needs" or once) and target.fileid in loaded:
                continue
            self.walk(load.target, loaded, visit, once=once, on_done=on_done, _open=_open | {rel})
            loaded.add(target.fileid)
            if on_done is not None:
                on_done(target)

    def closure(self, rel: str, loaded: set[tuple[str, str]] | None = None) -> list[str]:
        """The checkout files that loading ``rel`` loads, ``rel`` last, in the order they finish loading."""
        loaded = set() if loaded is None else loaded
        order: list[str] = []
        self.walk(rel, loaded, lambda _src, _i: None, on_done=lambda src: order.append(src.rel))
        loaded.add(self.file(rel).fileid)
        return list(dict.fromkeys([*order, rel]))
