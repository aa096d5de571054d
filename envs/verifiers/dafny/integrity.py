"""Integrity of a Dafny submission: specification anchoring and the cheats Dafny does not report.

A task's ``statement`` holds the headers (signature + ``requires``/``ensures``/``modifies``/
``reads``) of what the submission must implement; its ``context`` holds code the submission
must keep. The submission is the whole program. Rules, and where each one is decided:

* **Banned constructs** (text, by tokens, outside the kept context): ``assume``, attributes whose row in
  :data:`ATTRIBUTE_RULES` (judged by name and argument) says they can make an unproved statement pass
  (``{:verify false}``, ``{ :verify false }``, ``{:axiom}``, ``{:extern}``...) unless the task itself uses them,
  ``include``, and multi-line verbatim strings (Dafny echoes program text in tooltips; a raw newline there could
  forge a trace line).
* **What has a body** comes from Dafny: the DafnyServer ``symbols`` answer gives every method,
  lemma, constructor, function, predicate, class, trait and iterator (nested in classes, traits,
  modules) with the end of its body, or none; :func:`classify_declarations` judges each one. A
  bodyless declaration outside the kept context is CHEATING, unless it is an obligation: an
  abstract instance member of a trait that every class extending the trait implements, or a member
  of an ``abstract module`` that a refining module gives a body (Boogie's translation says which:
  Dafny reports a refining module's members without their body's end). An iterator's synthesised
  members are judged with the iterator. What cannot be placed or classified is refused.
* **Anchoring**: each statement declaration must exist in the submission, same module, class and
  name, same kind, and its header must be the statement's contract (:mod:`~proofgym.envs.verifiers.dafny.contract`:
  compared modulo attributes, comments, whitespace, binders renamed consistently, ``&&``/``||`` order and grouping,
  redundant parentheses, clauses in any order, conjunct by conjunct; extra ``ensures`` and changed ``decreases`` are
  allowed: they only make the contract stronger or re-prove termination). A contract shown weaker (an ``ensures``
  dropped or weakened, a ``requires`` added or strengthened, a type changed, more ``modifies``, ``decreases *``) is
  CHEATING; any other difference, a missing target and a changed kind are ERROR ("keep the task's header as
  written"). For methods and lemmas, Dafny's own printed ``requires``/``ensures`` lists are compared too. Functions
  with bodies in the statement, and every top-level declaration of the context, must appear verbatim.
* **What verified** (see :func:`expected_implementations`): every implementation in the trace
  must be ``verified``, and the verified ``Impl$$`` implementations must pair one-to-one with the
  declarations that have bodies -- the ``{:rlimit}`` trap drops an obligation silently, and only
  the count shows it.
"""

from __future__ import annotations

import functools
import json
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import TypeVar

from proofgym.envs.verifiers.dafny.contract import compare_header, compare_printed, parse_signature
from proofgym.envs.verifiers.dafny.lexer import (
    CLAUSE_KEYWORDS,
    DECL_KEYWORDS,
    DafnyLexError,
    Token,
    attribute_spans,
    bracket_closes,
    matching_open,
    tokenize,
)

__all__ = [
    "ALLOWED_ATTRIBUTES",
    "ATTRIBUTE_RULES",
    "Anchor",
    "AttributeClass",
    "AttributeRule",
    "DeclView",
    "Symbol",
    "banned_constructs",
    "build_anchor",
    "check_anchoring",
    "declaration_views",
    "expected_implementations",
    "judge_attribute",
    "parse_symbols",
]

class AttributeClass(Enum):
    """The three classes of an attribute (the README's principle): what decides its verdict."""

    HARMLESS = "harmless"  # weakens nothing: the program is checked with it
    CHEATING = "cheating"  # can make an unproved statement pass: CHEATING, with the row's reason
    UNKNOWN = "unknown"  # no row matches (name or argument): ERROR, "remove the attribute"


@dataclass(frozen=True)
class AttributeRule:
    """One row of :data:`ATTRIBUTE_RULES`: an attribute name, the arguments the row covers, its class and why.

    ``arguments`` is a regular expression matched (fullmatch) against the argument tokens joined by one space
    (``{:verify false}``: ``"false"``; ``{:fuel F, 2}``: ``"F , 2"``; no argument: ``""``). The reason is the one
    text the verdict cites, so a reason cannot contradict its construct.
    """

    name: str
    arguments: str
    cls: AttributeClass
    reason: str


_H, _C = AttributeClass.HARMLESS, AttributeClass.CHEATING
_ANY = r".*"
_NUMBER = r"[0-9][0-9_]*"
_SPLIT = "splits verification conditions (every part is still proved)"
_LIMIT = ("a time or resource limit: it can only make verification fail, never pass (an obligation z3 gives up on "
          "is reported, and the one-to-one count of verified implementations catches one that goes missing)")

#: Every attribute proofgym has judged, in one table: the first row whose name and arguments match decides.
#: Checked on Dafny 2.3 (tests/test_dafny_attributes.py): each harmless row parses and leaves a failing proof failing;
#: each cheating row's reason is what Dafny 2.3 was seen to do with it. An attribute that no row matches is ERROR.
ATTRIBUTE_RULES: tuple[AttributeRule, ...] = (
    # -- harmless: hints, splitting, limits, printing, compilation ------------------------------------------
    AttributeRule("verify", r"true", _H, "asks for verification, which is the default"),
    AttributeRule("trigger", _ANY, _H, "a quantifier trigger (a hint to z3; it cannot prove anything)"),
    AttributeRule("induction", _ANY, _H, "chooses induction variables (a hint; the induction is still proved)"),
    AttributeRule("inductionTrigger", _ANY, _H, "a trigger for induction (a hint)"),
    AttributeRule("fuel", _ANY, _H, "how far a function is unfolded (a hint)"),
    AttributeRule("opaque", r"", _H, "hides a function's body until revealed (only makes proofs harder)"),
    AttributeRule("autotriggers", _ANY, _H, "switches automatic triggers (a hint)"),
    AttributeRule("matchingloop", _ANY, _H, "accepts a trigger that may loop (a hint)"),
    AttributeRule("nowarn", _ANY, _H, "silences a warning"),
    AttributeRule("warnShadowing", _ANY, _H, "asks for shadowing warnings"),
    AttributeRule("tailrecursion", _ANY, _H, "asks the compiler for a loop (compilation only)"),
    AttributeRule("abstemious", _ANY, _H, "a co-recursion annotation (checked by Dafny)"),
    AttributeRule("nativeType", _ANY, _H, "a newtype's native representation (compilation only)"),
    AttributeRule("compile", _ANY, _H, "whether to compile a declaration (compilation only)"),
    AttributeRule("main", r"", _H, "marks the entry point for compilation (verification ignores it)"),
    AttributeRule("print", r"", _H, "marks a method that prints (an effect outside verification)"),
    AttributeRule("priority", _NUMBER, _H, "the order in which implementations are verified"),
    AttributeRule("split_here", r"", _H, _SPLIT),
    AttributeRule("vcs_split_on_every_assert", r"", _H, _SPLIT),
    AttributeRule("vcs_max_splits", _NUMBER, _H, _SPLIT),
    AttributeRule("vcs_max_cost", _NUMBER, _H, _SPLIT),
    AttributeRule("vcs_max_keep_going_splits", _NUMBER, _H, _SPLIT),
    AttributeRule("timeLimit", _NUMBER, _H, _LIMIT),
    AttributeRule("timeLimitMultiplier", _NUMBER, _H, _LIMIT),
    AttributeRule("rlimit", _NUMBER, _H, _LIMIT),
    # -- cheating: each can make an unproved statement pass ------------------------------------------------
    AttributeRule("verify", r"false", _C, "turns verification of the declaration off (its body is never checked)"),
    AttributeRule("axiom", _ANY, _C, "lets a declaration without a body through /noCheating:1 (its contract is "
                                     "assumed, never proved)"),
    AttributeRule("extern", _ANY, _C, "declares an external implementation: Dafny 2.3 does not check its body against "
                                      "its contract (a wrong body verifies) and accepts it without a body"),
    AttributeRule("imported", _ANY, _C, "lets a declaration without a body through /noCheating:1 (Dafny trusts it "
                                        "as imported)"),
    AttributeRule("selective_checking", _ANY, _C, "with {:start_checking_here}, assumes every assertion before it "
                                                  "(ensures false verifies)"),
    AttributeRule("start_checking_here", _ANY, _C, "assumes every assertion before it (with {:selective_checking})"),
    AttributeRule("options", _ANY, _C, "changes Dafny's options (/noCheating:0 turns the check of assumptions off)"),
    AttributeRule("termination", r"false", _C, "skips termination checks (a trait's {:termination false})"),
    AttributeRule("assumption", _ANY, _C, "declares an assumption variable (what is assigned to it is assumed)"),
    AttributeRule("autocontracts", _ANY, _C, "adds preconditions (requires Valid()) and frames to a class's methods: "
                                             "a weaker contract than the one written"),
    AttributeRule("error", _ANY, _C, "replaces the message of a failing check with program text (forged output)"),
)


def attribute_arguments(tokens: Sequence[Token], start: int, end: int) -> str:
    """The argument tokens of the attribute ``tokens[start..end]`` (``{`` ``:`` name ... ``}``), joined by a space."""
    return " ".join(t.text for t in tokens[start + 3:end])


def judge_attribute(name: str, arguments: str) -> AttributeRule | None:
    """The row of :data:`ATTRIBUTE_RULES` for ``{:name arguments}``; ``None`` (unknown: ERROR) when no row matches."""
    return next((r for r in ATTRIBUTE_RULES if r.name == name and re.fullmatch(r.arguments, arguments)), None)


_SHOWN_ARGUMENTS = {"": "", _ANY: "", _NUMBER: " N"}
_HARMLESS_LIST = ", ".join(sorted({f"{{:{r.name}{_SHOWN_ARGUMENTS.get(r.arguments, ' ' + r.arguments)}}}"
                                   for r in ATTRIBUTE_RULES if r.cls is _H}, key=str.lower))

#: The names with a harmless row for every argument (kept for callers of the old allow-list; the table decides).
ALLOWED_ATTRIBUTES = frozenset(r.name for r in ATTRIBUTE_RULES if r.cls is _H and r.arguments == _ANY)


#: Words that may precede a declaration's name (its kind and modifiers).
KIND_WORDS = frozenset({
    "method", "lemma", "function", "predicate", "constructor", "ghost", "static", "protected", "inductive",
    "copredicate", "colemma", "twostate", "least", "greatest", "abstract",
})

#: Tokens that end a bodyless header: the next declaration starts (``var`` is handled apart).
_STOP_WORDS = frozenset({
    "method", "lemma", "function", "predicate", "constructor", "class", "trait", "datatype", "codatatype",
    "type", "newtype", "const", "module", "import", "iterator", "inductive", "copredicate", "colemma",
    "twostate", "ghost", "static", "protected", "include", "least", "greatest", "abstract",
})
_DECL_START = _STOP_WORDS | {"var"}
_MODIFIERS = frozenset({"ghost", "static", "protected", "abstract", "inductive", "twostate", "least", "greatest",
                        "function", "predicate", "import"})
_EXPR_BEFORE_VAR = frozenset({"(", "[", ",", ":=", ";", "==>", "<==", "<==>", "&&", "||", "==", "!=", "then",
                              "else", "=>", "!", "in", "::", "|"}) | CLAUSE_KEYWORDS


@dataclass(frozen=True)
class Symbol:
    """One entry of DafnyServer's ``symbols`` answer (Dafny's own view of the program)."""

    kind: str  # Method (also lemmas, constructors), Function, Predicate, Class, Field, ...
    module: str
    parent: str
    name: str
    line: int
    col: int
    end_line: int
    end_col: int
    requires: tuple[str, ...] | None = None
    ensures: tuple[str, ...] | None = None

    @property
    def has_body(self) -> bool:
        return self.end_line > 0

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.module, self.parent, self.name)

    @property
    def label(self) -> str:
        where = "" if self.parent in ("_default", "") else f"{self.parent}."
        where = ("" if self.module in ("_module", "") else f"{self.module}.") + where
        return where + ("constructor" if self.name == "_ctor" else self.name)


MEMBER_KINDS = ("Method", "Function", "Predicate")


def parse_symbols(text: str) -> list[Symbol] | None:
    """The symbols in a ``symbols`` answer; ``None`` when there is no ``SYMBOLS_START`` block."""
    m = re.search(r"SYMBOLS_START (.*?) SYMBOLS_END", text, re.S)
    if not m:
        return None
    try:
        raw = json.loads(m.group(1))
    except json.JSONDecodeError:
        return None
    out = []
    for d in raw:
        if not isinstance(d, dict) or d.get("SymbolType") in (None, "Call", "Definition"):
            continue
        out.append(Symbol(
            kind=str(d.get("SymbolType")), module=str(d.get("Module") or ""), parent=str(d.get("ParentClass") or ""),
            name=str(d.get("Name") or ""), line=int(d.get("Line") or 0), col=int(d.get("Column") or 0),
            end_line=int(d.get("EndLine") or 0), end_col=int(d.get("EndColumn") or 0),
            requires=tuple(d["Requires"]) if isinstance(d.get("Requires"), list) else None,
            ensures=tuple(d["Ensures"]) if isinstance(d.get("Ensures"), list) else None,
        ))
    return out


# -- declarations as token spans ---------------------------------------------------------------


@dataclass(frozen=True)
class DeclView:
    """A declaration located in the token list from its symbol."""

    symbol: Symbol
    start: int  # first token (kind word or modifier)
    name_index: int
    kind_words: tuple[str, ...]
    header: tuple[Token, ...]  # after the name, up to the body (or the end of a bodyless header)
    body_open: int | None
    body_close: int | None
    offsets: tuple[int, int] = (0, 0)  # character span of the whole declaration in the source
    body_offsets: tuple[int, int] | None = None  # character offsets of the body's "{" and "}"

    @property
    def end(self) -> int:
        """One past the last token of the declaration."""
        if self.body_close is not None:
            return self.body_close + 1
        return self.name_index + 1 + len(self.header)


class _Index:
    """Token lookups by Dafny's (line, column) positions."""

    def __init__(self, tokens: list[Token]) -> None:
        self.tokens = tokens
        self.at = {(t.line, t.col): k for k, t in enumerate(tokens)}
        self.attr_open: dict[int, int] = {}
        self.attr_close: dict[int, int] = {}
        for _, a, b in attribute_spans(tokens):
            self.attr_open[a] = b
            self.attr_close[b] = a


def locate(index: _Index, sym: Symbol, symbols: Sequence[Symbol]) -> DeclView | None:
    """Where ``sym`` is in the tokens; ``None`` for declarations Dafny synthesised (iterators' members)."""
    tokens = index.tokens
    k = index.at.get((sym.line, sym.col))
    if k is None:
        return None
    text = tokens[k].text
    if sym.name == "_ctor":
        if text != "constructor":
            return None
        kind_end = k + 1
    elif text == sym.name:
        kind_end = k
    else:
        return None
    # Walk back over modifiers, kind words and attributes.
    start = kind_end if sym.name != "_ctor" else k
    j = start - 1
    words: list[str] = ["constructor"] if sym.name == "_ctor" else []
    while j >= 0:
        if j in index.attr_close:
            j = index.attr_close[j] - 1
            continue
        if tokens[j].kind == "ident" and tokens[j].text in KIND_WORDS:
            words.insert(0, tokens[j].text)
            start = j
            j -= 1
            continue
        break
    name_index = k
    body_open = body_close = None
    if sym.has_body:
        close = index.at.get((sym.end_line, sym.end_col))
        if close is not None and tokens[close].text == "}":
            opened = matching_open(tokens, close)
            if opened > name_index:
                body_open, body_close = opened, close
    if body_open is not None:
        header = tokens[name_index + 1: body_open]
    else:
        header = tokens[name_index + 1: _header_end(index, name_index + 1, sym, symbols)]
    last = body_close if body_close is not None else name_index + len(header)
    body_offsets = (tokens[body_open].start, tokens[body_close].start) \
        if body_open is not None and body_close is not None else None
    return DeclView(sym, start, name_index, tuple(words), tuple(header), body_open, body_close,
                    (tokens[start].start, tokens[last].end), body_offsets)


def _header_end(index: _Index, begin: int, sym: Symbol, symbols: Sequence[Symbol]) -> int:
    """End of a bodyless header: the next declaration at the same level, a closing brace, or EOF."""
    tokens = index.tokens
    limit = len(tokens)
    # Never past the next symbol Dafny knows of (fields, members, classes).
    for other in symbols:
        k = index.at.get((other.line, other.col))
        if k is not None and k >= begin and other is not sym:
            limit = min(limit, _walk_back_modifiers(index, k))
    depth = 0
    j = begin
    while j < limit:
        t = tokens[j]
        if j in index.attr_open:
            j = index.attr_open[j] + 1
            continue
        if t.text in ("(", "[", "{"):
            depth += 1
        elif t.text in (")", "]", "}"):
            if depth == 0:
                return j
            depth -= 1
        elif depth == 0 and t.kind == "ident":
            if t.text in _STOP_WORDS:
                return j
            if t.text == "var" and j > begin and tokens[j - 1].text not in _EXPR_BEFORE_VAR:
                return j
        j += 1
    return limit


def _walk_back_modifiers(index: _Index, k: int) -> int:
    tokens = index.tokens
    j = k - 1
    start = k
    while j >= 0:
        if j in index.attr_close:
            j = index.attr_close[j] - 1
            continue
        if tokens[j].kind == "ident" and tokens[j].text in KIND_WORDS | {"var", "const"}:
            start = j
            j -= 1
            continue
        break
    return start


def _strip_attributes(tokens: Sequence[Token]) -> list[str]:
    out: list[str] = []
    j = 0
    while j < len(tokens):
        if tokens[j].text == "{" and j + 1 < len(tokens) and tokens[j + 1].text == ":":
            depth = 0
            while j < len(tokens):
                if tokens[j].text == "{":
                    depth += 1
                elif tokens[j].text == "}":
                    depth -= 1
                    if depth == 0:
                        break
                j += 1
            j += 1
            continue
        out.append(tokens[j].text)
        j += 1
    return out


@dataclass(frozen=True)
class Header:
    """A header cut into its signature and its clauses (attributes removed)."""

    signature: tuple[str, ...]
    requires: tuple[tuple[str, ...], ...] = ()
    ensures: tuple[tuple[str, ...], ...] = ()
    modifies: tuple[tuple[str, ...], ...] = ()
    reads: tuple[tuple[str, ...], ...] = ()
    decreases: tuple[tuple[str, ...], ...] = ()


def split_header(tokens: Sequence[Token]) -> Header:
    words = _strip_attributes(tokens)
    depth = 0
    parts: list[tuple[str, list[str]]] = [("sig", [])]
    for w in words:
        if w in ("(", "[", "{"):
            depth += 1
        elif w in (")", "]", "}"):
            depth -= 1
        if depth == 0 and w in CLAUSE_KEYWORDS:
            parts.append((w, []))
            continue
        parts[-1][1].append(w)
    grouped: dict[str, list[tuple[str, ...]]] = {k: [] for k in CLAUSE_KEYWORDS}
    for kind, ws in parts[1:]:
        while ws and ws[-1] == ";":
            ws = ws[:-1]
        grouped[kind].append(tuple(ws))
    return Header(tuple(parts[0][1]), tuple(grouped["requires"]), tuple(grouped["ensures"]),
                  tuple(grouped["modifies"]), tuple(grouped["reads"]), tuple(grouped["decreases"]))


# -- top-level declarations (context, kept statement parts) ------------------------------------


def top_level_decls(tokens: Sequence[Token]) -> list[tuple[int, int]]:
    """``(start, end)`` token ranges of the top-level declarations (modifiers belong to theirs)."""
    starts: list[int] = []
    depth = 0
    continues = False  # the previous top-level token was a modifier (``ghost``, ``function`` of ``function method``)
    for k, t in enumerate(tokens):
        at_top = depth == 0
        if t.text == "{":
            depth += 1
        elif t.text == "}":
            depth -= 1
        if not at_top:
            continue
        if t.kind == "ident" and t.text in _DECL_START and t.text != "var":
            if not continues:
                starts.append(k)
            continues = t.text in _MODIFIERS
        else:
            continues = False
    if not starts and tokens:
        starts = [0]
    elif starts and starts[0] != 0:
        starts[0] = 0  # stray tokens before the first declaration go with it
    return [(a, starts[i + 1] if i + 1 < len(starts) else len(tokens)) for i, a in enumerate(starts)]


def _depth_zero_positions(tokens: Sequence[Token]) -> list[bool]:
    out = []
    depth = 0
    for t in tokens:
        out.append(depth == 0)
        if t.text == "{":
            depth += 1
        elif t.text == "}":
            depth -= 1
    return out


def find_verbatim(needle: Sequence[str], tokens: Sequence[Token], top: Sequence[bool], taken: set[int]) -> int:
    """Start of ``needle`` as a top-level token run in ``tokens`` (not overlapping ``taken``), or -1."""
    n = len(needle)
    if n == 0:
        return -1
    texts = [t.text for t in tokens]
    first = needle[0]
    for k in range(len(texts) - n + 1):
        if texts[k] != first or not top[k] or k in taken:
            continue
        if texts[k:k + n] == list(needle) and not any(j in taken for j in range(k, k + n)):
            return k
    return -1


# -- the anchor (what a task pins down) --------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """A statement declaration the submission must implement with an unchanged header."""

    symbol: Symbol
    kind_words: tuple[str, ...]
    header: Header
    header_text: str


@dataclass(frozen=True)
class Anchor:
    """Everything a task pins down, computed once per task from Dafny's view of context + statement."""

    targets: tuple[Target, ...]
    verbatim: tuple[tuple[str, tuple[str, ...]], ...]  # (label, token texts) that must appear at top level
    member_verbatim: tuple[tuple[Symbol, tuple[str, ...]], ...]  # class members that must be unchanged
    allowed_bodyless: frozenset[tuple[str, str, str]] = field(default_factory=frozenset)
    allow_decreases_star: bool = False
    trusted_assumptions: bool = False  # the context itself has assumptions (bodyless contracts, assume, axioms)
    declared: frozenset[tuple[str, str, str]] = field(default_factory=frozenset)  # keys the task declares
    # Attributes the task itself uses, (name, arguments): the submission may use them as the task does.
    task_attributes: frozenset[tuple[str, str]] = field(default_factory=frozenset)
    # The context has assumptions that no {:axiom} mark can carry through /noCheating:1 (an ``assume``
    # statement, a loop or forall statement without a body): only then does the check run without it.
    unmarkable_assumptions: bool = False
    # Names the task gives to types, modules and datatype constructors (``Red`` of ``datatype Color = Red | Green``):
    # no member or field of the submission may take one, since it would shadow it in a class's specifications.
    type_names: frozenset[str] = field(default_factory=frozenset)


def build_anchor(context: str, statement: str, symbols: list[Symbol]) -> Anchor:
    """The anchor of a task. ``symbols`` are Dafny's for ``context + "\\n" + statement``."""
    program = context + "\n" + statement if context else statement
    offset_lines = context.count("\n") + 1 if context else 0
    tokens = tokenize(program)
    index = _Index(tokens)
    ctx_tokens = tokenize(context) if context else []
    verbatim: list[tuple[str, tuple[str, ...]]] = []
    for a, b in top_level_decls(ctx_tokens):
        verbatim.append((" ".join(t.text for t in ctx_tokens[a:min(b, a + 4)]), tuple(t.text for t in ctx_tokens[a:b])))
    targets: list[Target] = []
    member_verbatim: list[tuple[Symbol, tuple[str, ...]]] = []
    allowed_bodyless: set[tuple[str, str, str]] = set()
    stmt_first_line = offset_lines + 1
    located: dict[tuple[str, str, str], DeclView] = {}
    for sym in symbols:
        if sym.kind not in MEMBER_KINDS + ("Field",):
            continue
        view = locate(index, sym, symbols) if sym.kind != "Field" else None
        if sym.line < stmt_first_line:
            if sym.kind in MEMBER_KINDS and not sym.has_body and view is not None:
                allowed_bodyless.add(sym.key)  # the context itself declares it without a body
            continue
        if sym.kind == "Field":
            k = index.at.get((sym.line, sym.col))
            if k is None:
                continue
            start = _walk_back_modifiers(index, k)
            end = _header_end(index, k + 1, sym, symbols)
            member_verbatim.append((sym, tuple(_strip_attributes(tokens[start:end]))))
            continue
        if view is None:
            continue
        located[sym.key] = view
        if sym.kind == "Method" or not sym.has_body:
            header_tokens = view.header
            targets.append(Target(sym, view.kind_words, split_header(header_tokens),
                                  program[tokens[view.start].start: header_tokens[-1].end if header_tokens
                                          else tokens[view.name_index].end]))
        elif sym.parent not in ("_default", ""):
            member_verbatim.append((sym, tuple(_strip_attributes(tokens[view.start:view.end]))))
    verbatim += _statement_verbatim(tokens, stmt_first_line, located)
    star = any(t.text == "decreases" and k + 1 < len(tokens) and tokens[k + 1].text == "*"
               for k, t in enumerate(tokens))
    assumes = bool(allowed_bodyless) or any(t.text == "assume" for t in ctx_tokens) or any(
        (rule := judge_attribute(name, attribute_arguments(ctx_tokens, a, b))) is None
        or rule.cls is not AttributeClass.HARMLESS for name, a, b in attribute_spans(ctx_tokens))
    declared = frozenset(sym.key for sym in symbols if sym.kind in MEMBER_KINDS + ("Field",)
                         and locate(index, sym, symbols) is not None or sym.kind == "Field")
    task_attributes = frozenset((name, attribute_arguments(tokens, a, b)) for name, a, b in attribute_spans(tokens))
    unmarkable = any(t.kind == "ident" and t.text == "assume" for t in ctx_tokens)
    return Anchor(tuple(targets), tuple(verbatim), tuple(member_verbatim), frozenset(allowed_bodyless), star,
                  assumes, declared, task_attributes, unmarkable, frozenset(type_and_constructor_names(tokens)))


def _statement_verbatim(tokens: list[Token], stmt_first_line: int,
                        located: dict[tuple[str, str, str], DeclView]) -> list[tuple[str, tuple[str, ...]]]:
    """Top-level statement declarations that Dafny reports no symbol for (datatypes, types) or that
    are functions with bodies: kept verbatim (a short label, the tokens)."""
    verbatim: list[tuple[str, tuple[str, ...]]] = []
    stmt_start = next((k for k, t in enumerate(tokens) if t.line >= stmt_first_line), len(tokens))
    stmt_tokens = tokens[stmt_start:]
    covered: set[int] = set()
    for view in located.values():
        covered.update(range(view.start - stmt_start, view.end - stmt_start))
    for a, b in top_level_decls(stmt_tokens):
        first = next((t.text for t in stmt_tokens[a:b] if t.text not in _MODIFIERS), "")
        if first in ("class", "trait", "module", "iterator"):
            continue
        if set(range(a, b)) & covered:
            found = next((v for v in located.values() if v.start - stmt_start == a), None)
            if found is None or found.symbol.kind == "Method" or not found.symbol.has_body:
                continue
        verbatim.append((" ".join(t.text for t in stmt_tokens[a:min(b, a + 4)]),
                         tuple(t.text for t in stmt_tokens[a:b])))
    return verbatim


_TYPE_WORDS = frozenset({"datatype", "codatatype", "type", "newtype", "class", "trait", "module", "iterator"})


def _skip_attributes(tokens: Sequence[Token], k: int, closes: Sequence[int]) -> int:
    while k + 1 < len(tokens) and tokens[k].text == "{" and tokens[k + 1].text == ":" and closes[k] != -1:
        k = closes[k] + 1
    return k


def type_and_constructor_names(tokens: Sequence[Token]) -> set[str]:
    """The names ``tokens`` give to types, modules and datatype constructors (``datatype Color = Red | Green(x: int)``:
    Color, Red, Green). Dafny's ``symbols`` reports none of them, and a class member of the same name shadows a
    constructor in that class's specifications (``const Red := Green`` makes ``ensures c == Red`` mean c == Green)."""
    names: set[str] = set()
    closes = bracket_closes(tokens)
    n = len(tokens)
    for k, t in enumerate(tokens):
        if t.kind != "ident" or t.text not in _TYPE_WORDS:
            continue
        j = _skip_attributes(tokens, k + 1, closes)
        if j < n and tokens[j].kind == "ident" and tokens[j].text not in _DECL_START:
            names.add(tokens[j].text)
        if t.text not in ("datatype", "codatatype"):
            continue
        e = j + 1
        while e < n and tokens[e].text not in ("=", "{", "}") and not (
                tokens[e].kind == "ident" and tokens[e].text in _DECL_START):
            e += 1
        if e >= n or tokens[e].text != "=":
            continue
        e += 1
        while e < n:
            if tokens[e].text == "|":
                e += 1
                continue
            e = _skip_attributes(tokens, e, closes)
            if e >= n or tokens[e].kind != "ident" or tokens[e].text in _DECL_START:
                break
            names.add(tokens[e].text)
            e += 1
            if e < n and tokens[e].text == "(":
                if closes[e] == -1:
                    break
                e = closes[e] + 1
            if e >= n or tokens[e].text != "|":
                break
    return names


# -- checks -----------------------------------------------------------------------------------


def trusted_ranges(anchor: Anchor, tokens: Sequence[Token]) -> tuple[list[tuple[int, int]], list[str]]:
    """Token ranges of the submission that are the anchor's verbatim declarations, and what is missing."""
    top = _depth_zero_positions(tokens)
    taken: set[int] = set()
    ranges: list[tuple[int, int]] = []
    missing: list[str] = []
    for label, needle in anchor.verbatim:
        k = find_verbatim(needle, tokens, top, taken)
        if k == -1:
            missing.append(label)
            continue
        ranges.append((k, k + len(needle)))
        taken.update(range(k, k + len(needle)))
    return ranges, missing


def _declared_name(needle: Sequence[str]) -> str:
    """The name a declaration's tokens declare (``function {:opaque} Sum(...)``: Sum), or ""."""
    k, n = 0, len(needle)
    while k < n:
        t = needle[k]
        if t == "{" and k + 1 < n and needle[k + 1] == ":":  # an attribute: skip to its closing brace
            depth = 0
            while k < n:
                depth += {"{": 1, "}": -1}.get(needle[k], 0)
                k += 1
                if depth == 0:
                    break
            continue
        if t in DECL_KEYWORDS:
            k += 1
            continue
        return t if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_'?]*", t) else ""
    return ""


#: Tokens after which an identifier is declared (a declaration keyword, a datatype constructor after ``=``/``|``).
_DECLARING = DECL_KEYWORDS | {"=", "|"}


def left_out(anchor: Anchor, tokens: Sequence[Token], missing: Sequence[str]) -> list[str]:
    """Of the ``missing`` verbatim declarations (labels from :func:`trusted_ranges`), those the submission left out
    altogether: their name is declared nowhere in it (no declaration keyword, attribute or constructor bar before
    it, in any module or class), or the whole program is wrapped in a module. Such a program cannot resolve, or does
    not use the declaration, so it is no attempt to change the task's context: an honest slip (the model sent its
    code without the context, or inside a module), ERROR. A missing declaration whose name the submission declares
    again is a changed or moved context: CHEATING, as before.
    """
    if not missing:
        return []
    attribute_start = {b: a for _, a, b in attribute_spans(list(tokens))}
    # A program wrapped whole in a module (nothing at the top level but modules) holds the task's text in no place
    # of the task's: what it declares inside is not a changed context but a misplaced program (ERROR, as its missing
    # target is). A module beside top-level code may be opened into it: its declarations count, as before.
    wrapped = bool(tokens) and all(
        next((t.text for t in tokens[a:b] if t.text not in ("abstract",)), "") == "module"
        for a, b in top_level_decls(tokens))
    top = _depth_zero_positions(tokens)
    declared: set[str] = set()
    for k, t in enumerate(tokens):
        if t.kind != "ident" or (wrapped and not top[k]):
            continue
        j = k - 1
        while j in attribute_start:  # ``function {:opaque} Sum``: the keyword before the attributes
            j = attribute_start[j] - 1
        if j >= 0 and tokens[j].text in _DECLARING:
            declared.add(t.text)
    wanted = Counter(missing)
    out: list[str] = []
    for label, needle in anchor.verbatim:
        if wanted[label] <= 0:
            continue
        wanted[label] -= 1
        name = _declared_name(needle)
        if name and name not in declared:
            out.append(label)
    return out


def banned_constructs(tokens: Sequence[Token], trusted: Iterable[tuple[int, int]] = (),
                      *, allowed_attributes: Iterable[str | tuple[str, str]] = (),
                      unknown: list[str] | None = None) -> list[str]:
    """Cheats visible in the text, outside ``trusted`` token ranges. One reason per finding.

    Each attribute is judged by its row in :data:`ATTRIBUTE_RULES` (name and arguments): a harmless one is left
    for Dafny to check with, a cheating one is refused with its row's reason, and one no row matches (``{:foo}``, a
    typo, ``{:verify maybe}``) goes to ``unknown`` (the caller's ERROR: proofgym cannot say what it does, which is
    no attempt to cheat), or among the cheats when ``unknown`` is not given. ``allowed_attributes`` are the
    task's own: a name (any argument) or a ``(name, arguments)`` pair.

    ``decreases *`` is judged per declaration by :func:`check_anchoring` (it is a cheat where
    termination is required: in a target; a helper method that may not terminate cannot be called
    from a target without ``decreases *``, which Dafny refuses).
    """
    task_own = frozenset(allowed_attributes)
    inside: set[int] = set()
    for a, b in trusted:
        inside.update(range(a, b))
    reasons: list[str] = []
    token_list = list(tokens)
    for name, a, b in attribute_spans(token_list):
        if a in inside:
            continue
        args = attribute_arguments(token_list, a, b)
        if name in task_own or (name, args) in task_own:
            continue
        rule = judge_attribute(name, args)
        shown = f"{{:{name}{' ' + args if args else ''}}}"
        if rule is not None and rule.cls is AttributeClass.HARMLESS:
            continue
        if rule is None and unknown is not None:
            unknown.append(f"remove the attribute {{:{name}}} (line {tokens[a].line}, written {shown}): proofgym does "
                           f"not know it to be harmless, so the program cannot be judged (harmless: {_HARMLESS_LIST})")
            continue
        reasons.append(f"attribute {shown} at line {tokens[a].line}: "
                       f"{rule.reason if rule is not None else 'is not in the attribute table'}")
    for k, t in enumerate(tokens):
        if k in inside:
            continue
        if t.kind == "ident" and t.text == "assume":
            reasons.append(f"assume statement at line {t.line}")
        elif t.kind == "ident" and t.text == "include" and k + 1 < len(tokens) and tokens[k + 1].kind == "string":
            # Dafny's only include is ``include "file"``; anything else (a C ``#include <x.h>``) is a
            # parse error Dafny reports, not a cheat.
            reasons.append(f"include directive at line {t.line}")
        elif t.kind == "string" and t.text.startswith("@") and ("\n" in t.text or "\r" in t.text):
            reasons.append(f"multi-line verbatim string at line {t.line}")
    return reasons


def check_anchoring(anchor: Anchor, tokens: list[Token], symbols: list[Symbol],
                    trusted: Sequence[tuple[int, int]], errors: list[str] | None = None) -> list[str]:
    """Reasons the submission breaks the anchor by weakening it (CHEATING; empty when it keeps it); what has no
    body is :func:`classify_declarations`'s.

    Differences not shown to be a weakening (:mod:`~proofgym.envs.verifiers.dafny.contract`: a dropped ``requires``,
    a target missing or moved into a module, a changed kind...) go to ``errors`` (the caller's ERROR, "keep the task's
    header as written"), or among the reasons when ``errors`` is not given (fail closed).

    The rules, in order: no declaration shadows a name of the task's (:func:`_shadowing`); each target is present
    with its kind and a header no weaker (:func:`_check_target`); members the statement has are kept verbatim
    (:func:`_check_verbatim`).
    """
    other: list[str] = [] if errors is None else errors
    index = _Index(tokens)
    by_key: dict[tuple[str, str, str], Symbol] = {}
    for sym in symbols:
        if sym.kind in MEMBER_KINDS + ("Field",):
            by_key.setdefault(sym.key, sym)
    reasons = _shadowing(anchor, tokens, symbols, index)
    for target in anchor.targets:
        _check_target(anchor, tokens, symbols, index, target, by_key.get(target.symbol.key), reasons, other)
    for want_sym, words in anchor.member_verbatim:
        _check_verbatim(tokens, symbols, index, want_sym, words, by_key.get(want_sym.key), reasons, other)
    return reasons if errors is not None else reasons + other


def _shadowing(anchor: Anchor, tokens: list[Token], symbols: list[Symbol], index: _Index) -> list[str]:
    """No second declaration of a name the task declares: a class member named like a context function would shadow
    it inside that class, and change what an unchanged header means (bodyless declarations are judged by
    classify_declarations).

    Only where the task's own text is read: in a class that holds a task declaration or at the top level of its
    module, or anywhere once a module is opened into another. A same-named declaration in a module or class of the
    submission's own (a program wrapped in a module) shadows nothing of the task's.
    """
    reasons: list[str] = []
    names = ({name for _, _, name in anchor.declared} - {"_ctor"}) | anchor.type_names
    task_scopes = {(m, c) for m, c, _ in anchor.declared} | {(m, "_default") for m, _, _ in anchor.declared}
    opened = any(t.kind == "ident" and t.text == "opened" for t in tokens)
    for sym in symbols:
        if (sym.module, sym.parent or "_default") not in task_scopes and not opened:
            continue
        if sym.kind in MEMBER_KINDS + ("Field",) and sym.name in names and sym.key not in anchor.declared:
            view = locate(index, sym, symbols) if sym.kind != "Field" else None
            if sym.kind != "Field" and view is None:
                continue  # synthesised by Dafny
            reasons.append(f"{sym.label} redeclares the task's name '{sym.name}' (it would shadow the task's own)")
    return reasons


_KEEP_HEADER = "keep the task's header as written"


def _check_target(anchor: Anchor, tokens: list[Token], symbols: list[Symbol], index: _Index, target: Target,
                  sym: Symbol | None, reasons: list[str], other: list[str]) -> None:
    """A target: present, same kind, the same header or a weaker one (CHEATING) or another one (ERROR)."""
    label = target.symbol.label
    view = locate(index, sym, symbols) if sym is not None and sym.kind == target.symbol.kind else None
    if sym is None or view is None:
        # Not shown to be a weakening: a renamed target, or a program wrapped in a module or class, proves
        # nothing about the task's declaration, and tells nothing either.
        other.append(f"the target {label} is missing: implement it under its own name, where the statement "
                     f"declares it (not renamed, not inside a module or class)")
        return
    if not sym.has_body:
        return  # already reported as bodyless
    if not _same_kind(view.kind_words, target.kind_words):
        other.append(f"{label}: kind changed from '{' '.join(target.kind_words)}' to "
                     f"'{' '.join(view.kind_words)}' ({_KEEP_HEADER})")
        return
    weaker, changed = _header_differences(target, sym, view)
    if not anchor.allow_decreases_star and any(
            tokens[k].text == "decreases" and tokens[k + 1].text == "*" for k in range(view.start, view.end - 1)):
        weaker.append("decreases * (termination is required)")
    if weaker:
        reasons.append(f"{label}: the contract is weaker than the statement's: {', '.join(weaker)}")
    elif changed:
        other.append(f"{label}: {', '.join(changed)} differ from the statement's, and not by a weakening proofgym "
                     f"can show: {_KEEP_HEADER}")


def _header_differences(target: Target, sym: Symbol, view: DeclView) -> tuple[list[str], list[str]]:
    """How the submission's header of ``target`` differs from the statement's: (weaker, otherwise changed), as
    written and as Dafny reads the clauses (printed from its resolved program), compared the same way."""
    got = split_header(view.header)
    want = target.header
    clauses = ("requires", "ensures", "modifies", "reads")
    found = compare_header(want.signature, got.signature, {k: getattr(want, k) for k in clauses},
                           {k: getattr(got, k) for k in clauses})
    weaker, changed = list(found.weaker), list(found.other)
    ws, gs = parse_signature(want.signature), parse_signature(got.signature)
    names_w, names_g = (ws.names, gs.names) if ws is not None and gs is not None else ({}, {})
    for kind in ("requires", "ensures"):
        printed_w, printed_g = getattr(target.symbol, kind), getattr(sym, kind)
        if printed_w is None or printed_g is None or any(kind in c for c in weaker + changed):
            continue
        outcome = compare_printed(_printed_tokens(printed_w), _printed_tokens(printed_g), kind, names_w, names_g)
        if outcome == "weaker":
            weaker.append(f"{kind} (as Dafny reads it)")
        elif outcome != "same":
            changed.append(f"{kind} (as Dafny reads it)")
    return weaker, changed


def _check_verbatim(tokens: list[Token], symbols: list[Symbol], index: _Index, want_sym: Symbol,
                    words: tuple[str, ...], sym: Symbol | None, reasons: list[str], other: list[str]) -> None:
    """A member kept verbatim (a field, a function with a body inside a class): a field's type or a member
    function's body is what the statement's contracts mean; changed, they can mean less."""
    missing = f"{want_sym.label} from the statement is missing: keep it as the statement writes it"
    if sym is None:
        other.append(missing)
        return
    if sym.kind == "Field":
        k = index.at.get((sym.line, sym.col))
        if k is None:
            other.append(missing)
            return
        start = _walk_back_modifiers(index, k)
        end = _header_end(index, k + 1, sym, symbols)
        got_words = tuple(_strip_attributes(tokens[start:end]))
    else:
        view = locate(index, sym, symbols)
        got_words = tuple(_strip_attributes(tokens[view.start:view.end])) if view else ()
    if got_words != words:
        reasons.append(f"{want_sym.label} differs from the statement (it must be kept unchanged)")


def _printed_tokens(clauses: Sequence[str]) -> list[tuple[str, ...]]:
    """The clauses Dafny printed (text), as token lists; a text that does not lex stays whole."""
    out: list[tuple[str, ...]] = []
    for text in clauses:
        try:
            out.append(tuple(t.text for t in tokenize(text)))
        except DafnyLexError:
            out.append((text,))
    return out


def _same_kind(got: tuple[str, ...], want: tuple[str, ...]) -> bool:
    """Kinds match; ``function``/``predicate`` may become ``function method``/``predicate method``
    (a compiled function has the same contract, its body is only more restricted)."""
    if got == want:
        return True
    return want in (("function",), ("predicate",)) and got == (*want, "method")


def sanitize(name: str) -> str:
    """Dafny's Boogie spelling of a name: ``_`` doubled, ``'`` -> ``_k``, ``?`` -> ``_q``, ``#`` -> ``_h``."""
    return "".join({"_": "__", "'": "_k", "?": "_q", "#": "_h"}.get(c, c) for c in name)


def expected_implementations(tokens: list[Token], symbols: list[Symbol],
                             decls: Declarations | None = None) -> list[Symbol]:
    """Declarations whose body Boogie must verify as an ``Impl$$`` implementation: methods, lemmas and
    constructors with bodies, and iterators with bodies (``Impl$$module.Iterator``). Synthesised
    iterator members and refinement copies are not among them (``decls`` says which are copies)."""
    index = _Index(tokens)
    copies = {s.key for s in decls.copies} if decls is not None else set()
    out = []
    for sym in symbols:
        if sym.kind == "Method" and sym.has_body and sym.key not in copies and locate(index, sym, symbols) is not None:
            out.append(sym)
    if decls is not None:
        out += decls.iterators
    return out


def impl_matches(impl: str, sym: Symbol) -> bool:
    """Whether the Boogie implementation ``impl`` (``Impl$$mod.Class.name``, or ``Impl$$mod.Iterator``
    for an iterator's ``Class`` symbol) is ``sym``'s body."""
    if not impl.startswith("Impl$$"):
        return False
    parts = impl[len("Impl$$"):].split(".")
    if sym.kind == "Class":
        if len(parts) != 2 or parts[1] != sanitize(sym.name):
            return False
        module = parts[0]
    else:
        if len(parts) != 3:
            return False
        module, cls, name = parts
        if name not in (sanitize(sym.name), sanitize(sym.name) + "_h"):
            return False
        if cls != sanitize(sym.parent or "_default"):
            return False
    if sym.module in ("_module", ""):
        return module == "_module"
    return re.fullmatch(r"_\d+_" + re.escape(sanitize(sym.module)), module) is not None


def pair_implementations(verified: Sequence[str], expected: Sequence[Symbol],
                         also: Iterable[Symbol] = ()) -> list[str]:
    """Reasons the verified ``Impl$$`` implementations do not pair one-to-one with ``expected``.

    ``also`` are declarations whose implementation may appear but is not required here (the copies a
    refining module makes: :func:`boogie_findings` judges them); every other implementation must be
    an expected one's.
    """
    optional = list(also)
    remaining = list(expected)
    reasons = []
    for impl in verified:
        if not impl.startswith("Impl$$"):
            continue
        hit = next((s for s in remaining if impl_matches(impl, s)), None)
        if hit is not None:
            remaining.remove(hit)
            continue
        hit = next((s for s in optional if impl_matches(impl, s)), None)
        if hit is not None:
            optional.remove(hit)
            continue
        reasons.append(f"verified implementation {impl} matches no declaration")
    for sym in remaining:
        what = "iterator " if sym.kind == "Class" else ""
        reasons.append(f"{what}{sym.label} was not verified (its obligation was dropped)")
    return reasons


def declaration_views(program: str, symbols: Sequence[Symbol]) -> list[DeclView]:
    """Every method, lemma, constructor, function and predicate of ``program`` located in its text.

    ``symbols`` are Dafny's for ``program``. Offsets of a view's tokens are character offsets into
    ``program`` (``tokens[view.body_open].start``), for tools that edit bodies (suite cheat variants,
    the SkillForge harness).
    """
    tokens = tokenize(program)
    index = _Index(tokens)
    views = []
    for sym in symbols:
        if sym.kind in MEMBER_KINDS:
            view = locate(index, sym, symbols)
            if view is not None:
                views.append(view)
    return views


# -- every declaration Dafny reports, classified (what may lack a body) --------------------------

#: Members Dafny synthesises for an iterator; it reports them at the iterator's name.
ITERATOR_MEMBERS = frozenset({"_ctor", "Valid", "MoveNext"})
_CONTAINER_WORDS = frozenset({"class", "trait", "iterator"})


@dataclass(frozen=True)
class ModuleScope:
    """A ``module`` declaration in the tokens: its name as Dafny reports it (the innermost one)."""

    name: str
    abstract: bool
    refines: str  # the last component of the refined module's name, "" when it refines none
    open: int  # token index of its "{"
    close: int  # token index of its "}"


def module_scopes(tokens: Sequence[Token]) -> list[ModuleScope]:
    """Every ``[abstract] module {attributes} Name [refines Q] { ... }`` in the tokens."""
    tokens = list(tokens)
    attr_close = {a: b for _, a, b in attribute_spans(tokens)}
    closes: list[int] | None = None  # every bracket's close, worked out once (nested modules were quadratic)
    out = []
    for k, t in enumerate(tokens):
        if t.kind != "ident" or t.text != "module":
            continue
        j = k + 1
        while j in attr_close:
            j = attr_close[j] + 1
        if j >= len(tokens) or tokens[j].kind != "ident":
            continue
        m = j + 1
        refines = ""
        while m < len(tokens) and not (tokens[m].text == "{" and m not in attr_close):
            if m in attr_close:
                m = attr_close[m] + 1
                continue
            if tokens[m].kind == "ident" and tokens[m].text != "refines":
                refines = tokens[m].text
            m += 1
        if m >= len(tokens):
            continue
        if closes is None:
            closes = bracket_closes(tokens)
        close = closes[m]
        if close == -1:
            continue
        out.append(ModuleScope(tokens[j].text, k > 0 and tokens[k - 1].text == "abstract",
                               refines if any(tokens[x].text == "refines" for x in range(j + 1, m)) else "", m, close))
    return out


@dataclass(frozen=True)
class ClassScope:
    """A class, trait or iterator that Dafny reports (its ``Class`` symbol), located in the tokens."""

    symbol: Symbol
    kind: str  # "class" | "trait" | "iterator"
    name_index: int
    open: int | None  # its body's "{" (None: an iterator without a body)
    close: int | None
    extends: tuple[tuple[str, str], ...] = ()  # (qualifier, name) of each extended trait


@dataclass(frozen=True)
class Declarations:
    """Every declaration Dafny reported, classified (:func:`classify_declarations`).

    ``cheats`` are CHEATING reasons (an assumption: a declaration without a body that nothing
    implements); ``unplaced`` are declarations that proofgym cannot locate or classify, which are
    refused too (fail closed). ``allowed`` are the bodyless declarations that are not assumptions:
    the task's own trusted ones, and abstract members that are obligations (a trait's, implemented
    by every class that extends it; an abstract module's, given a body where it is refined).
    ``marks`` are the character offsets where ``{:axiom}`` goes so that ``/noCheating:1`` accepts
    exactly those. ``pending`` are the abstract-module members and refinement copies whose body
    only Boogie's translation shows; ``iterators`` are the iterators with a body (each must be
    verified as ``Impl$$module.Name``).
    """

    cheats: tuple[str, ...] = ()
    unplaced: tuple[str, ...] = ()
    allowed: tuple[Symbol, ...] = ()
    marks: tuple[int, ...] = ()
    pending: tuple[Symbol, ...] = ()
    copies: tuple[Symbol, ...] = ()
    iterators: tuple[Symbol, ...] = ()
    abstract_modules: frozenset[str] = frozenset()
    refinements: tuple[tuple[str, str], ...] = ()  # (module, the module it refines)


def _kind_word(tokens: Sequence[Token], index: _Index, k: int) -> str:
    j = k - 1
    while j >= 0 and j in index.attr_close:
        j = index.attr_close[j] - 1
    return tokens[j].text if j >= 0 else ""


def _extends(tokens: Sequence[Token], name_index: int, open_index: int) -> tuple[tuple[str, str], ...]:
    """The traits a class declares it extends: ``(qualifier, name)``, read from its header."""
    words = [t.text for t in tokens[name_index + 1:open_index]]
    if "extends" not in words:
        return ()
    out = []
    depth = 0
    item: list[str] = []
    for w in words[words.index("extends") + 1:] + [","]:
        if w == "<":
            depth += 1
        elif w == ">":
            depth -= 1
        elif depth == 0 and w == ",":
            idents = [x for x in item if x != "."]
            if idents:
                out.append((".".join(idents[:-1]), idents[-1]))
            item = []
        elif depth == 0:
            item.append(w)
    return tuple(out)


_Scope = TypeVar("_Scope", ModuleScope, ClassScope)


def _innermost(scopes: Sequence[_Scope], k: int) -> _Scope | None:
    """The innermost of ``scopes`` whose braces hold token ``k``."""
    best: _Scope | None = None
    best_open = -1
    for sc in scopes:
        if (sc.open is not None and sc.close is not None and sc.open < k < sc.close
                and (best is None or sc.open > best_open)):
            best, best_open = sc, sc.open
    return best


@dataclass
class _Classifying:
    """One program's declarations as :func:`classify_declarations` classifies them: what it reads (the tokens,
    Dafny's symbols, the module scopes, the containers once placed) and what it has found so far."""

    anchor: Anchor
    tokens: list[Token]
    symbols: Sequence[Symbol]
    index: _Index
    inside: frozenset[int]  # token indices in the task's trusted text
    modules: list[ModuleScope]
    abstract_modules: frozenset[str]
    refinements: tuple[tuple[str, str], ...]
    containers: list[ClassScope] = field(default_factory=list)
    cheats: list[str] = field(default_factory=list)
    unplaced: list[str] = field(default_factory=list)
    allowed: list[Symbol] = field(default_factory=list)
    marks: list[int] = field(default_factory=list)
    pending: list[Symbol] = field(default_factory=list)
    copies: list[Symbol] = field(default_factory=list)
    iterators: list[Symbol] = field(default_factory=list)

    def module_of(self, k: int) -> str:
        sc = _innermost(self.modules, k)
        return sc.name if sc is not None else "_module"

    @functools.cached_property
    def container_by_key(self) -> dict[tuple[str, str], ClassScope]:
        """(module, name) -> the container (read once every container is placed)."""
        return {(c.symbol.module, c.symbol.name): c for c in self.containers}

    @functools.cached_property
    def member_by_key(self) -> dict[tuple[str, str, str], Symbol]:
        return {s.key: s for s in self.symbols if s.kind in MEMBER_KINDS}

    def refining(self, module: str) -> bool:
        """Whether ``module`` refines another (its members are judged as copies)."""
        return any(m == module for m, _ in self.refinements)

    def result(self) -> Declarations:
        return Declarations(tuple(self.cheats), tuple(self.unplaced), tuple(self.allowed),
                            tuple(sorted(set(self.marks))), tuple(self.pending), tuple(self.copies),
                            tuple(self.iterators), self.abstract_modules, self.refinements)


def classify_declarations(anchor: Anchor, tokens: list[Token], symbols: Sequence[Symbol],
                          trusted: Sequence[tuple[int, int]]) -> Declarations:
    """Classify every method, lemma, constructor, function, predicate, class, trait and iterator
    Dafny reports (a twostate, inductive or co- variant, a member of a class, trait or module, a
    refinement's copy...). Whatever cannot be placed in the text is ``unplaced``, never skipped.

    Classes, traits and iterators first (:func:`_place_container`): members are judged by their container
    (:func:`_classify_member`; a member without a body by the first of :data:`_BODYLESS_RULES` that decides).
    """
    modules = module_scopes(tokens)
    state = _Classifying(anchor, tokens, symbols, _Index(tokens), frozenset(i for a, b in trusted for i in range(a, b)),
                         modules, frozenset(m.name for m in modules if m.abstract),
                         tuple((m.name, m.refines) for m in modules if m.refines))
    # Dafny names a nested module by its own name only: two modules of one name cannot be told apart.
    state.unplaced += [f"two modules named {name}" for name, n in Counter(m.name for m in modules).items() if n > 1]
    for sym in symbols:
        if sym.kind == "Class" and not (sym.name == "_default" and sym.line == 0):
            _place_container(state, sym)
    for sym in symbols:
        if sym.kind in MEMBER_KINDS:
            _classify_member(state, sym)
        elif sym.kind not in ("Class", "Field"):
            state.unplaced.append(f"a {sym.kind} {sym.label} (line {sym.line}, column {sym.col})")
    return state.result()


def _place_container(state: _Classifying, sym: Symbol) -> None:
    """A class, trait or iterator: located (its name and braces), else unplaced; a bodyless iterator is a cheat
    unless the task trusts it."""
    tokens, index = state.tokens, state.index
    k = index.at.get((sym.line, sym.col))
    word = _kind_word(tokens, index, k) if k is not None else ""
    if k is None or tokens[k].text != sym.name or word not in _CONTAINER_WORDS:
        state.unplaced.append(f"{sym.label} (line {sym.line}, column {sym.col})")
        return
    if state.module_of(k) != sym.module or state.refining(sym.module):
        return  # in a refining module: its members are judged as copies
    open_i = close_i = None
    if sym.has_body:
        close_i = index.at.get((sym.end_line, sym.end_col))
        open_i = matching_open(tokens, close_i) if close_i is not None and tokens[close_i].text == "}" else -1
        if open_i is None or open_i <= k:
            state.unplaced.append(f"the body of {sym.label} (line {sym.line}, column {sym.col})")
            return
    elif word != "iterator":
        state.unplaced.append(f"{word} {sym.label} without braces (line {sym.line})")
        return
    state.containers.append(ClassScope(sym, word, k, open_i, close_i,
                                       _extends(tokens, k, open_i) if word == "class" and open_i is not None else ()))
    if word != "iterator":
        return
    if sym.has_body:
        state.iterators.append(sym)
    elif k in state.inside or sym.key in state.anchor.allowed_bodyless:
        state.allowed.append(sym)
    else:
        state.cheats.append(f"iterator {sym.label} has no body (its constructor, MoveNext and Valid would be assumed)")


def _synthesised(state: _Classifying, sym: Symbol, k: int | None) -> bool:
    """A member Dafny made itself, judged with what it was made for: an iterator's constructor, MoveNext and
    Valid; the reveal lemma of an {:opaque} function (its fuel axiom, no proof obligation)."""
    owner = state.container_by_key.get((sym.module, sym.parent))
    if owner is not None and owner.kind == "iterator" and sym.name in ITERATOR_MEMBERS and k == owner.name_index:
        return True
    return sym.name.startswith("reveal_") and k is not None and any(
        o.kind in ("Function", "Predicate") and (o.line, o.col) == (sym.line, sym.col)
        and o.key == (sym.module, sym.parent, sym.name[len("reveal_"):]) for o in state.symbols)


def _classify_member(state: _Classifying, sym: Symbol) -> None:
    """A method, function or predicate: located where Dafny says it is and in the container it names, else
    unplaced; a refining module's is a copy; one without a body goes to :data:`_BODYLESS_RULES`."""
    k = state.index.at.get((sym.line, sym.col))
    if _synthesised(state, sym, k):
        return
    view = locate(state.index, sym, state.symbols) if k is not None else None
    if view is None:
        state.unplaced.append(f"{sym.kind.lower()} {sym.label} (line {sym.line}, column {sym.col})")
        return
    mod = state.module_of(view.name_index)
    cls = _innermost(state.containers, view.name_index)
    parent = cls.symbol.name if cls is not None else "_default"
    if state.refining(sym.module):
        # A member of a refining module: Dafny reports it at the refined declaration or at its own,
        # never with its body's end, so only Boogie's translation shows whether it has a body.
        state.copies.append(sym)
        return
    if (mod, parent) != (sym.module, sym.parent or "_default"):
        state.unplaced.append(f"{sym.kind.lower()} {sym.label} (line {sym.line}, column {sym.col})")
        return
    if sym.has_body:
        return
    name = state.tokens[view.name_index]
    member = _Bodyless(sym, view, mod, cls, " ".join(view.kind_words) or sym.kind.lower(),
                       name.end if sym.name == "_ctor" else name.start)
    for rule in _BODYLESS_RULES:
        if rule(state, member):
            return


@dataclass(frozen=True)
class _Bodyless:
    """A located member without a body, as the rules for those see it."""

    sym: Symbol
    view: DeclView
    module: str
    container: ClassScope | None
    kind: str  # as written ("twostate lemma"), else Dafny's kind
    mark: int  # where {:axiom} goes if it is allowed


def _trusted_bodyless(state: _Classifying, m: _Bodyless) -> bool:
    """The task's own (in its trusted text, or a bodyless declaration its statement has): allowed."""
    if m.view.name_index in state.inside or m.sym.key in state.anchor.allowed_bodyless:
        state.allowed.append(m.sym)
        state.marks.append(m.mark)
        return True
    return False


def _abstract_trait_member(state: _Classifying, m: _Bodyless) -> bool:
    """A trait's instance member: an obligation when every class that extends the trait implements it, else a
    cheat (an abstract member left abstract is an assumption)."""
    cls = m.container
    if cls is None or cls.kind != "trait" or "static" in m.view.kind_words:
        return False
    trait_module = cls.symbol.module
    implementers = [c for c in state.containers if c.kind == "class" and any(
        n == cls.symbol.name and ((not q and c.symbol.module == trait_module) or q.rsplit(".", 1)[-1] == trait_module)
        for q, n in c.extends)]
    members = state.member_by_key
    if implementers and all((c.symbol.module, c.symbol.name, m.sym.name) in members
                            and members[(c.symbol.module, c.symbol.name, m.sym.name)].has_body for c in implementers):
        state.allowed.append(m.sym)  # an obligation: every class that extends the trait implements it
        state.marks.append(m.mark)
    else:
        state.cheats.append(f"{m.kind} {m.sym.label} has no body and no class that extends {cls.symbol.name} "
                            f"implements it (an abstract member left abstract is an assumption)")
    return True


def _abstract_module_member(state: _Classifying, m: _Bodyless) -> bool:
    """An abstract module's: an obligation if a refining module gives it a body (Boogie says)."""
    if m.module not in state.abstract_modules:
        return False
    state.pending.append(m.sym)
    state.marks.append(m.mark)
    return True


def _assumed(state: _Classifying, m: _Bodyless) -> bool:
    """Anything else without a body is an assumption."""
    state.cheats.append(f"{m.kind} {m.sym.label} has no body")
    return True


#: A member without a body, judged by the first rule that decides (returns True).
_BODYLESS_RULES: tuple[Callable[[_Classifying, _Bodyless], bool], ...] = (
    _trusted_bodyless, _abstract_trait_member, _abstract_module_member, _assumed)


#: What makes ``/noCheating:1`` accept a bodyless declaration (Dafny reads the attribute for nothing else).
AXIOM_MARK = " {:axiom} "


def mark_axioms(program: str, marks: Sequence[int]) -> tuple[str, list[tuple[int, int]]]:
    """``program`` with :data:`AXIOM_MARK` before each offset in ``marks``, and the (line, column)
    of each insertion (to map Dafny's columns back to the submission's)."""
    if not marks:
        return program, []
    parts = []
    inserted = []
    last = 0
    for off in sorted(marks):
        parts.append(program[last:off])
        parts.append(AXIOM_MARK)
        line = program.count("\n", 0, off) + 1
        col = len(program[program.rfind("\n", 0, off) + 1:off].encode("utf-8", "surrogatepass")) + 1
        inserted.append((line, col))
        last = off
    parts.append(program[last:])
    return "".join(parts), inserted


# -- Boogie's view (the translation Dafny verifies) ----------------------------------------------

_B_IMPL_RE = re.compile(r"^implementation\s+((?:\{[^}]*\}\s*)*)([^\s(]+)\s*\(", re.M)
_B_PROC_RE = re.compile(r"^procedure\s+((?:\{[^}]*\}\s*)*)([^\s(]+)\s*\(", re.M)
_B_FUNC_DECL_RE = re.compile(r"^// function declaration for (\S+)$", re.M)
_B_FUNC_DEF_RE = re.compile(r"^// definition axiom for ([^\s(]+)", re.M)
_B_MODULE_RE = re.compile(r"_\d+_(.+)")
_UNSANITIZE = {"_": "_", "k": "'", "q": "?", "h": "#"}


def unsanitize(name: str) -> str:
    """The Dafny name behind Boogie's spelling (the inverse of :func:`sanitize`)."""
    out = []
    j = 0
    while j < len(name):
        if name[j] == "_" and j + 1 < len(name) and name[j + 1] in _UNSANITIZE:
            out.append(_UNSANITIZE[name[j + 1]])
            j += 2
        else:
            out.append(name[j])
            j += 1
    return "".join(out)


def boogie_key(name: str) -> tuple[str, ...]:
    """``_1_B.__default.L`` -> ``("B", "_default", "L")``; ``_module.Gen`` -> ``("_module", "Gen")``:
    the (module, class, member) key that Dafny's symbols use."""
    module, *rest = name.split(".")
    m = _B_MODULE_RE.fullmatch(module)
    return (unsanitize(m.group(1)) if m else module, *(unsanitize(p) for p in rest))


@dataclass(frozen=True)
class BoogieView:
    """What a Boogie translation declares and implements, by Dafny key."""

    implementations: tuple[str, ...] = ()  # every implementation's Boogie name (all must be verified)
    verify_off: tuple[str, ...] = ()  # implementations with {:verify false}
    impl_procedures: tuple[str, ...] = ()  # declared Impl$$ procedures
    # Impl$$ procedures without an implementation and without a checked postcondition: Dafny emits no
    # implementation when the body has no check, and then there is nothing to prove (an iterator aside).
    nothing_to_prove: tuple[str, ...] = ()
    calls: frozenset[tuple[str, ...]] = frozenset()  # callables (Call$$ procedures)
    bodies: frozenset[tuple[str, ...]] = frozenset()  # Impl$$ implementations: method, lemma, iterator bodies
    functions: frozenset[tuple[str, ...]] = frozenset()  # declared functions and predicates
    defined: frozenset[tuple[str, ...]] = frozenset()  # functions with a definition axiom (a body)


def parse_boogie(bpl: str) -> BoogieView:
    """Read one translation (the ``/print`` files of every module, concatenated)."""
    impls = []
    verify_off = []
    bodies = set()
    for m in _B_IMPL_RE.finditer(bpl):
        impls.append(m.group(2))
        if re.search(r"\{:verify\s+false\s*\}", m.group(1)):
            verify_off.append(m.group(2))
        if m.group(2).startswith("Impl$$"):
            key = boogie_key(m.group(2)[len("Impl$$"):])
            bodies.add(key[:-1] + (key[-1].removesuffix("#"),))  # a prefix lemma's body is its lemma's
    procs = [m.group(2) for m in _B_PROC_RE.finditer(bpl)]
    calls = frozenset(boogie_key(p[len("Call$$"):]) for p in procs if p.startswith("Call$$"))
    functions = frozenset(tuple(d.split(".")) for d in _B_FUNC_DECL_RE.findall(bpl))
    defined = frozenset(boogie_key(d) for d in _B_FUNC_DEF_RE.findall(bpl))
    implemented = set(impls)
    nothing = []
    for m in _B_PROC_RE.finditer(bpl):
        name = m.group(2)
        if not name.startswith("Impl$$") or name in implemented or len(boogie_key(name[len("Impl$$"):])) != 3:
            continue  # an iterator's body carries its obligations: no implementation is never nothing to prove
        end = bpl.find("\n\n", m.end())
        spec = bpl[m.end(): len(bpl) if end == -1 else end]
        if not re.search(r"^\s*ensures\b", spec, re.M):  # only "free ensures": nothing is checked
            nothing.append(name)
            key = boogie_key(name[len("Impl$$"):])
            bodies.add(key[:-1] + (key[-1].removesuffix("#"),))  # a body, with nothing in it to prove
    return BoogieView(tuple(dict.fromkeys(impls)), tuple(verify_off),
                      tuple(dict.fromkeys(p for p in procs if p.startswith("Impl$$"))), tuple(dict.fromkeys(nothing)),
                      calls, frozenset(bodies), functions, defined)


def _descendants(module: str, refinements: Sequence[tuple[str, str]]) -> set[str]:
    """``module`` and every module that refines it, directly or through others."""
    found = {module}
    grew = True
    while grew:
        grew = False
        for m, r in refinements:
            if r in found and m not in found:
                found.add(m)
                grew = True
    return found


def boogie_unverified(view: BoogieView, verified: Iterable[str]) -> list[str]:
    """Obligations in Boogie's translation that a run (with no error) did not verify: a body Dafny
    declared but gave no implementation though it has something to prove (an iterator's empty body,
    a checked postcondition), an implementation not verified."""
    done = set(verified)
    impl_set = set(view.implementations)
    exempt = set(view.nothing_to_prove)
    reasons = [f"Boogie: {p[len('Impl$$'):]} has a body that is never verified (no implementation)"
               for p in view.impl_procedures if p not in impl_set and p not in exempt]
    return reasons + [f"Boogie: {i} was not verified" for i in view.implementations if i not in done]


def boogie_findings(view: BoogieView, decls: Declarations) -> list[str]:
    """Assumptions in Boogie's translation: verification turned off, a callable or function with no
    body that is not one of ``decls.allowed``, and an abstract-module member or refinement copy that
    no refining module gives a body."""
    reasons = [f"Boogie: verification is turned off for {i}" for i in view.verify_off]
    allowed = {s.key for s in decls.allowed}
    modules = decls.abstract_modules
    for sym in (*decls.pending, *decls.copies):
        where = _descendants(sym.module, decls.refinements) if sym.module in modules else {sym.module}
        keys = {(m, sym.parent or "_default", sym.name) for m in where}
        if keys & (view.bodies | view.defined):
            allowed.add(sym.key)
        else:
            reasons.append(f"{sym.kind.lower()} {sym.label} has no body"
                           + (" in any module that refines it" if sym.module in modules else ""))
    iterators = {k[:2] for k in view.calls if len(k) == 3 and k[2] == "MoveNext"}
    allowed_iterators = {(s.module, s.name) for s in decls.allowed if s.kind == "Class"}
    for key in sorted(view.calls):
        if len(key) != 3 or key in view.bodies or key in allowed:
            continue
        if key[:2] in iterators and key[2] in ITERATOR_MEMBERS and (key[:2] in view.bodies
                                                                     or key[:2] in allowed_iterators):
            continue  # the iterator's constructor and MoveNext: its body proves them
        if key[2].startswith("reveal_") and (*key[:2], key[2][len("reveal_"):]) in view.functions:
            continue  # the reveal lemma of an {:opaque} function
        reasons.append(f"Boogie: {'.'.join(key)} has no implementation (no body)")
    for key in sorted(view.functions):
        if len(key) != 3 or key in view.defined or key in allowed:
            continue
        if key[:2] in iterators and key[2] == "Valid":
            continue  # the Valid() predicate Dafny synthesises for an iterator
        if key[2].endswith("#") and (*key[:2], key[2][:-1]) in view.functions:
            continue  # the prefix predicate of an inductive or co-predicate: defined with it
        reasons.append(f"Boogie: function {'.'.join(key)} has no definition (no body)")
    return reasons
