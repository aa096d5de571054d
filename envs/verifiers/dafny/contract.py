"""A task's header against the submission's: the same contract written another way, a weaker one, or another one.

A statement pins a target's header (signature and ``requires``/``ensures``/``modifies``/``reads``). A submission may
write it another way without changing what it means, and then it is the task's contract: binders renamed
consistently (``returns (r: int)`` for ``returns (res: int)`` with every clause renamed alike, a quantifier's
``forall i`` for ``forall k``), ``&&``/``||``/``<==>`` chains in another order or grouping, redundant parentheses,
one clause ``ensures A && B`` for the two clauses ``ensures A`` ``ensures B``, ``requires true``, ``this.f`` for
``f``. Everything here is
decided on a canonical form (:func:`canonical_clause`) that is a faithful parse: two clauses with the same canonical
form mean the same thing, so the comparison is sound; what it cannot parse it keeps as written (fail closed).

A difference is then classified (:func:`compare_header`), never guessed:

* **weaker** (CHEATING: the submission proves less than the task asks): an ``ensures`` conjunct dropped, or replaced by
  one it implies syntactically (``A || B``, ``P ==> A``, ``true``); a ``requires`` added, or replaced by one that
  implies it; more ``modifies``/``reads``; a parameter's or result's type changed;
* **other** (ERROR, "keep the task's header as written"): any other difference -- a ``requires`` dropped (stronger),
  an ``ensures`` replaced by something not shown weaker, parameters added or removed, a changed kind (``ghost``),
  what cannot be parsed.

Extra ``ensures`` only strengthen the contract and a changed ``decreases`` re-proves termination: both are allowed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["Node", "Signature", "canonical_clause", "compare_header", "implied_by", "parse_signature"]

#: A canonical clause: ``("atom", tokens...)``, ``("and" | "or" | "iff", children...)`` (children sorted),
#: ``("imp", premise, conclusion)``, ``("bind", keyword, binder tokens, body)``.
Node = tuple

#: Tokens that start an expression running to the end of its level (a binder, a let, a statement in an expression).
_ENDLESS = frozenset({"forall", "exists", "var", "if", "match", "assert", "assume", "calc", "reveal", "expect", "set",
                      "iset", "map", "imap", "label", "function", "lemma", "case"})
#: Tokens whose meaning needs more than this reader knows (a lambda's or a case's ``=>``, ``:|``, ``;``): a level
#: holding one at depth 0 is kept as written.
_OPAQUE = frozenset({"=>", ":|", ";"})
_OPEN, _CLOSE = frozenset({"(", "[", "{"}), frozenset({")", "]", "}"})
TRUE: Node = ("atom", "true")
FALSE: Node = ("atom", "false")
#: How deep the reader nests (parentheses peeled, operators and binders within one another) before it keeps the rest
#: as written: a submission's header is untrusted, and a crafted one must cost neither recursion nor quadratic time.
MAX_DEPTH = 24


def _depth0(tokens: Sequence[str]) -> list[bool]:
    out, depth = [], 0
    for t in tokens:
        if t in _CLOSE:
            depth -= 1
        out.append(depth == 0)
        if t in _OPEN:
            depth += 1
    return out


def _unwrap(tokens: Sequence[str]) -> tuple[str, ...]:
    """``tokens`` without parentheses around the whole of them (at most :data:`MAX_DEPTH` pairs)."""
    tokens = tuple(tokens)
    for _ in range(MAX_DEPTH):
        if not (len(tokens) >= 2 and tokens[0] == "(" and tokens[-1] == ")"):
            break
        depth = 0
        for k, t in enumerate(tokens):
            depth += 1 if t in _OPEN else -1 if t in _CLOSE else 0
            if depth == 0 and k < len(tokens) - 1:
                return tokens
        tokens = tokens[1:-1]
    return tokens


def _split(tokens: Sequence[str], top: Sequence[bool], ops: frozenset[str]) -> tuple[list[tuple[str, ...]], set[str]]:
    parts: list[tuple[str, ...]] = []
    found: set[str] = set()
    start = 0
    for k, t in enumerate(tokens):
        if top[k] and t in ops:
            parts.append(tuple(tokens[start:k]))
            found.add(t)
            start = k + 1
    parts.append(tuple(tokens[start:]))
    return parts, found


def _atom(tokens: Sequence[str]) -> Node:
    """An operand as written, with ``this.f`` read as ``f``: once parameters and bound variables carry canonical
    names, a bare ``f`` can only be the member ``this.f`` means (or the program does not resolve). Not where the atom
    binds names of its own (a binder kept as written could capture ``f``)."""
    if any(t in _ENDLESS or t in _OPAQUE or t == "::" for t in tokens):
        return ("atom", *tokens)
    out: list[str] = []
    k = 0
    while k < len(tokens):
        if (tokens[k] == "this" and k + 2 < len(tokens) and tokens[k + 1] == "." and not (k and tokens[k - 1] == ".")
                and (tokens[k + 2][:1].isalpha() or tokens[k + 2][:1] == "_")):
            k += 2
            continue
        out.append(tokens[k])
        k += 1
    return ("atom", *out)


def _sorted(kind: str, children: Sequence[Node]) -> Node:
    flat: list[Node] = []
    for c in children:
        flat.extend(c[1:] if c[0] == kind else [c])  # associativity: (A && B) && C is A && B && C
    unit = {"and": TRUE, "or": FALSE}.get(kind)
    kept = [c for c in flat if c != unit]  # A && true is A, A || false is A
    if unit is not None and len(kept) <= 1:
        return kept[0] if kept else unit
    return (kind, *sorted(kept, key=repr))  # commutativity


def _bound_names(binder: Sequence[str]) -> list[str] | None:
    """The names a quantifier binds (``i: int, j | range``: i, j), or None where the binder is unusual."""
    names: list[str] = []
    depth = 0
    expect_name = True
    for t in binder:
        if depth == 0 and t == "|":
            break
        if t in ("<", "(", "["):
            depth += 1
        elif t in (">", ")", "]"):
            depth -= 1
        elif depth == 0 and t == ",":
            expect_name = True
            continue
        if expect_name:
            if not (t[:1].isalpha() or t[:1] == "_"):
                return None
            names.append(t)
            expect_name = False
    return names or None


def rename(tokens: Sequence[str], names: dict[str, str]) -> tuple[str, ...] | None:
    """``tokens`` with every variable occurrence of ``names`` renamed (a name after ``.`` is a member: kept);
    None where a name is assigned (``x :=`` in a datatype update or a let): such text is compared as written."""
    out = []
    for k, t in enumerate(tokens):
        if t in names and not (k > 0 and tokens[k - 1] == "."):
            if k + 1 < len(tokens) and tokens[k + 1] == ":=":
                return None
            out.append(names[t])
        else:
            out.append(t)
    return tuple(out)


def canonical_clause(tokens: Sequence[str], level: int = 0, depth: int = 0) -> Node:
    """The canonical form of one clause (tokens, attributes removed, the signature's binders already renamed)."""
    tokens = _unwrap(tokens)
    if not tokens or depth > MAX_DEPTH:
        return _atom(tokens)
    top = _depth0(tokens)
    if any(top[k] and t in _OPAQUE for k, t in enumerate(tokens)):
        return _atom(tokens)
    end = next((k for k, t in enumerate(tokens) if top[k] and t in _ENDLESS), len(tokens))
    head, tail = tokens[:end], tokens[end:]
    if not head:
        return _binder(tokens, level, depth)
    for ops, kind in ((frozenset({"<==>"}), "iff"), (frozenset({"==>", "<=="}), "imp"), (frozenset({"&&", "||"}), "")):
        parts, found = _split(head, top[:end], ops)
        if not found:
            continue
        if len(found) > 1:  # ``A && B || C``, ``A ==> B <== C``: Dafny refuses the mix; kept as written
            return _atom(tokens)
        parts[-1] = parts[-1] + tail
        if any(not p for p in parts):
            return _atom(tokens)
        children = [canonical_clause(p, level, depth + 1) for p in parts]
        op = found.pop()
        if kind == "iff":
            return _sorted("iff", children)  # <==> is associative and commutative
        if kind == "imp":
            if op == "<==":  # ``A <== B <== C`` is ``(A <== B) <== C``: C ==> (B ==> A)
                children.reverse()
            node = children[-1]
            for premise in reversed(children[:-1]):
                node = node if premise == TRUE else ("imp", premise, node)  # true ==> A is A
            return node
        return _sorted("and" if op == "&&" else "or", children)
    return _atom(tokens)


def _binder(tokens: tuple[str, ...], level: int, depth: int) -> Node:
    """A level that starts with an endless expression: a quantifier's bound names renamed by nesting level and its
    body made canonical; anything else as written."""
    if tokens[0] not in ("forall", "exists"):
        return _atom(tokens)
    top = _depth0(tokens)
    sep = next((k for k, t in enumerate(tokens) if top[k] and t == "::"), -1)
    if sep < 2:
        return _atom(tokens)
    names = _bound_names(tokens[1:sep])
    if names is None or len(set(names)) != len(names):
        return _atom(tokens)
    renamed = rename(tokens[1:], {n: f"$b{level}_{j}" for j, n in enumerate(names)})
    if renamed is None:
        return _atom(tokens)
    binder, body = renamed[:sep - 1], renamed[sep:]
    return ("bind", tokens[0], binder, canonical_clause(body, level + 1, depth + 1))


def implied_by(weak: Node, strong: Node) -> bool:
    """Whether ``strong`` implies ``weak`` by their shape alone: the same, ``true``, a disjunction with ``strong``
    among its disjuncts, an implication whose conclusion it implies, a conjunction of such."""
    if weak == strong or weak == TRUE:
        return True
    kind = weak[0]
    if kind == "or":
        if strong[0] == "or" and set(strong[1:]) <= set(weak[1:]):
            return True
        return any(implied_by(d, strong) for d in weak[1:])
    if kind == "imp":
        return implied_by(weak[2], strong)
    if kind == "and":
        return all(implied_by(c, strong) for c in weak[1:])
    return False


def conjuncts(clauses: Sequence[Sequence[str]], names: dict[str, str]) -> list[Node]:
    """The canonical conjuncts of a list of clauses (``ensures A && B`` is ``ensures A`` ``ensures B``; ``true``
    adds nothing and is left out)."""
    out: list[Node] = []
    for clause in clauses:
        renamed = rename(clause, names)
        node = canonical_clause(renamed) if renamed is not None else ("raw", *clause)
        for c in (node[1:] if node[0] == "and" else [node]):
            if c != TRUE:
                out.append(c)
    return out


# -- signatures --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Signature:
    """A header's signature: its type parameters, and each parameter and result as (modifiers, name, type)."""

    type_params: tuple[str, ...] = ()
    params: tuple[tuple[tuple[str, ...], str, tuple[str, ...]], ...] = ()
    results: tuple[tuple[tuple[str, ...], str, tuple[str, ...]], ...] = ()
    result_type: tuple[str, ...] = ()  # a function's unnamed result type
    names: dict[str, str] = field(default_factory=dict, compare=False)  # binder -> canonical name

    @property
    def shape(self) -> tuple:
        """Everything but the types (and names): two signatures of one shape differ at most in a type."""
        return (self.type_params, tuple(m for m, _, _ in self.params), tuple(m for m, _, _ in self.results),
                bool(self.result_type))

    @property
    def types(self) -> tuple:
        return (tuple(t for _, _, t in self.params), tuple(t for _, _, t in self.results), self.result_type)


def _close(tokens: Sequence[str], k: int) -> int:
    depth = 0
    for j in range(k, len(tokens)):
        depth += 1 if tokens[j] in _OPEN else -1 if tokens[j] in _CLOSE else 0
        if depth == 0:
            return j
    return -1


def _formals(tokens: Sequence[str]) -> list[tuple[tuple[str, ...], str, tuple[str, ...]]] | None:
    """``ghost x: int, y: seq<int>`` as (modifiers, name, type) triples; None where a formal is unusual."""
    out = []
    if not tokens:
        return out
    depth = 0
    start = 0
    pieces = []
    for k, t in enumerate(tokens):
        if t in ("<", "(", "["):
            depth += 1
        elif t in (">", ")", "]"):
            depth -= 1
        elif t == "," and depth == 0:
            pieces.append(tokens[start:k])
            start = k + 1
    pieces.append(tokens[start:])
    for piece in pieces:
        mods = []
        j = 0
        while j < len(piece) and piece[j] in ("ghost", "nameonly", "new", "older"):
            mods.append(piece[j])
            j += 1
        if len(piece) < j + 3 or piece[j + 1] != ":" or not (piece[j][:1].isalpha() or piece[j][:1] == "_"):
            return None
        out.append((tuple(mods), piece[j], tuple(piece[j + 2:])))
    return out


def parse_signature(words: Sequence[str]) -> Signature | None:
    """The signature after a declaration's name: ``<T>(x: T) returns (r: T)`` or ``(x: int): (r: int)`` or
    ``(x: int): int``; None where it is not of these shapes (then it is compared as written)."""
    words = tuple(words)
    k = 0
    type_params: tuple[str, ...] = ()
    if words[:1] == ("<",):
        depth = 0
        for j, t in enumerate(words):
            depth += 1 if t == "<" else -1 if t == ">" else 0
            if depth == 0:
                type_params = words[:j + 1]
                k = j + 1
                break
        else:
            return None
    if k >= len(words) or words[k] != "(":
        return None
    close = _close(words, k)
    if close == -1:
        return None
    params = _formals(words[k + 1:close])
    if params is None:
        return None
    rest = words[close + 1:]
    results: list = []
    result_type: tuple[str, ...] = ()
    if rest[:1] == ("returns",) and rest[1:2] == ("(",):
        c = _close(rest, 1)
        if c != len(rest) - 1:
            return None
        got = _formals(rest[2:c])
        if got is None:
            return None
        results = got
    elif rest[:1] == (":",) and rest[1:2] == ("(",) and _close(rest, 1) == len(rest) - 1:
        got = _formals(rest[2:-1])  # a named function result: function F(x: int): (r: int)
        if got is None or len(got) != 1:
            return None
        results = got
    elif rest[:1] == (":",) and len(rest) > 1:
        result_type = rest[1:]
    elif rest:
        return None
    names = {n: f"$p{j}" for j, (_, n, _) in enumerate(params)}
    names.update({n: f"$r{j}" for j, (_, n, _) in enumerate(results)})
    if len(names) != len(params) + len(results):
        return None
    return Signature(type_params, tuple(params), tuple(results), result_type, names)


# -- the comparison ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HeaderComparison:
    """What :func:`compare_header` found: ``weaker`` (CHEATING reasons) and ``other`` (ERROR reasons)."""

    weaker: tuple[str, ...] = ()
    other: tuple[str, ...] = ()


def _compare_requires(want: list[Node], got: list[Node]) -> str:
    missing = Counter(want) - Counter(got)
    extra = Counter(got) - Counter(want)
    if not missing and not extra:
        return "same"
    if not missing:
        return "weaker"  # a requires added: the submission assumes more
    if all(any(implied_by(w, e) for e in extra) for w in missing):
        return "weaker"  # each dropped requires implied by one added in its place: strengthened
    return "other"  # a requires dropped (a stronger contract) or replaced by another


def _compare_ensures(want: list[Node], got: list[Node]) -> str:
    missing = Counter(want) - Counter(got)
    if not missing:
        return "same"  # extra ensures only strengthen the contract
    extra = Counter(got) - Counter(want)
    if all(any(implied_by(e, w) for w in want) for e in extra):
        return "weaker"  # dropped, or replaced by what the statement implies (A || B, P ==> A, true)
    return "other"


def _frame_items(clauses: Sequence[Sequence[str]], names: dict[str, str]) -> Counter:
    items: Counter = Counter()
    for clause in clauses:
        top = _depth0(clause)
        for part in _split(clause, top, frozenset({","}))[0]:
            renamed = rename(part, names)
            items[renamed if renamed is not None else ("raw", *part)] += 1
    return items


def compare_header(want_sig: Sequence[str], got_sig: Sequence[str], want: dict[str, Sequence[Sequence[str]]],
                   got: dict[str, Sequence[Sequence[str]]]) -> HeaderComparison:
    """Classify the differences between the statement's header and the submission's (see the module docstring).

    ``want``/``got`` map ``requires``, ``ensures``, ``modifies``, ``reads`` to their clauses (tokens, attributes
    removed); the signatures are the tokens between the name and the first clause.
    """
    weaker: list[str] = []
    other: list[str] = []
    ws, gs = parse_signature(want_sig), parse_signature(got_sig)
    if ws is None or gs is None:
        names_w: dict[str, str] = {}
        names_g: dict[str, str] = {}
        if tuple(want_sig) != tuple(got_sig):
            other.append("signature")
    else:
        names_w, names_g = ws.names, gs.names
        if ws.shape != gs.shape:
            other.append("signature (parameters, results or their modifiers)")
        elif ws.types != gs.types:
            weaker.append("a parameter's or result's type")
    for kind in ("requires", "ensures"):
        w = conjuncts(want.get(kind, ()), names_w)
        g = conjuncts(got.get(kind, ()), names_g)
        outcome = (_compare_requires if kind == "requires" else _compare_ensures)(w, g)
        if outcome == "weaker":
            weaker.append(f"{kind} ({'added or strengthened' if kind == 'requires' else 'dropped or weakened'})")
        elif outcome == "other":
            other.append(kind)
    for kind in ("modifies", "reads"):
        w_items = _frame_items(want.get(kind, ()), names_w)
        g_items = _frame_items(got.get(kind, ()), names_g)
        if set(w_items) == set(g_items):
            continue
        if set(g_items) > set(w_items):
            weaker.append(f"{kind} (more than the statement's)")
        else:
            other.append(kind)
    return HeaderComparison(tuple(weaker), tuple(other))


def compare_printed(want: Sequence[Sequence[str]], got: Sequence[Sequence[str]], kind: str,
                    names_w: dict[str, str], names_g: dict[str, str]) -> str:
    """``same``, ``weaker`` or ``other`` for the clauses Dafny printed (token lists): Dafny's own reading."""
    w, g = conjuncts(want, names_w), conjuncts(got, names_g)
    return (_compare_requires if kind == "requires" else _compare_ensures)(w, g)
