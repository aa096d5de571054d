"""Stepwise HOL Light: tactic states as replayed proof trees, and fail-safe localization.

A :class:`HolTacticSession` gives HOL Light the interface of Coq's tactic session
(``root``, ``state``, ``path``, ``proof_script``, ``run``, ``close``) on top of the
verifier's ordinary whole-proof ``check``. A proof state is an immutable
:class:`ProofTree`: a node is a tactic and the subtrees of the goals it left, and an
open goal is an ``ALL_TAC`` leaf. The tree renders as one tactic expression, e.g.
``(INDUCT_TAC) THENL [(ARITH_TAC); ALL_TAC]``, whose remaining goals are exactly the
state's open goals, in order. A step grafts the new tactic onto the first open leaf
(HOL Light's ``e``: the next tactic works on the first goal of the stack) and runs
the rendered expression through one ``check``:

- the tactic raised (or is rejected before running): the step fails, the state is
  unchanged;
- goals remain: a new state, whose new node has ``len(new goals) - len(old goals) + 1``
  children;
- no goal remains: the check has already checked the theorem; ``OK`` is a finished
  state, ``CHEATING`` refuses the step.

Why replayed trees rather than keeping a live HOL Light process per state:

- A worker runs a submission with rlimits and a seccomp filter (no fork, no open) and
  is killed at its deadline: it is built to die after one attempt, not to be forked
  again or asked for more steps. Replaying keeps every step behind exactly that
  sandbox and whitelist, with no new OCaml code.
- States stay valid and branchable for free: a state is a value (a tree), so any
  earlier state can be extended again, any number of times, and ids never go stale
  when a process dies or a server restarts.
- Memory: a session holds strings, not a forked HOL Light image per state (each is
  hundreds of MB of RSS once it diverges from the zygote).
- Determinism: a state's goals are by construction what its expression leaves, and
  :meth:`HolTacticSession.proof_script` is that expression, which the env re-checks
  with the whole-proof ``check``: tactic mode and whole-proof mode never disagree.

The cost is re-running the path: a step costs one warm check of the whole tree so
far (30-40 ms with a warm context on an idle machine, plus whatever the earlier
tactics take).

Goals are shown as HOL Light's ``print_goal`` does, with the ``?-`` of a goal (not
the ``|-`` of a theorem): numbered assumptions, oldest first, then the conclusion::

      0 [`n + 0 = n`]
    ?- `SUC n + 0 = SUC n`

Fail-safe localization (:func:`localize`, Cobblestone §2.5) steps a
``THEN``/``THENL`` expression node by node: a failing tactic leaves its goal open as
a hole and its siblings still run.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace

from proofgym.envs.errors import InvalidSubmission, VerifierCrashed
from proofgym.envs.types import CheckResult, ErrorCategory, Goal, Task, Verdict
from proofgym.envs.verifiers.base import Verifier
from proofgym.envs.verifiers.hol_light.lexer import skip_comment, skip_string
from proofgym.envs.verifiers.hol_light.proof import normalize_proof
from proofgym.envs.verifiers.tactic_state import StepResult, TacticState

OPEN_GOAL = "ALL_TAC"


def hol_goal_text(goal: Goal) -> str:
    """A goal as HOL Light prints it: numbered assumptions (oldest first), then ``?- `concl```.

    ``goal.hypotheses`` comes in HOL Light's assumption-list order (newest first).
    """
    hyps = [f"{i:>3} [`{h}`]" for i, h in enumerate(reversed(goal.hypotheses))]
    return "\n".join([*hyps, f"?- `{goal.conclusion}`"])


@dataclass(frozen=True)
class HolTacticState(TacticState):
    """A HOL Light proof state: every open goal is in ``goals`` (the next step works on the first)."""

    def pretty(self, max_goals: int = 5) -> str:
        if self.finished:
            return "No subgoals."
        total = len(self.goals)
        shown = [f"Goal {i + 1} of {total}{' (the next step applies here)' if i == 0 else ''}:\n{hol_goal_text(g)}"
                 for i, g in enumerate(self.goals[:max_goals])]
        more = total - max_goals
        return "\n\n".join(shown) + (f"\n\n(+{more} more goals)" if more > 0 else "")


# -- proof trees ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ProofTree:
    """``tactic`` applied to one goal; ``children[i]`` proves its i-th subgoal (``None``: still open)."""

    tactic: str
    children: tuple[ProofTree | None, ...] = ()


#: A partial proof of one goal: ``None`` is the open goal itself (rendered ``ALL_TAC``).
Tree = ProofTree | None


def render(tree: Tree, fills: Mapping[int, str] | None = None) -> str:
    """The tactic expression of ``tree``; ``fills[i]`` replaces its i-th open goal (else ``ALL_TAC``)."""
    counter = iter(range(1 << 62))
    fills = fills or {}

    def go(t: Tree) -> tuple[str, bool]:  # (text, whether it is a bare open goal)
        if t is None:
            i = next(counter)
            return (_parenthesized(fills[i]), False) if i in fills else (OPEN_GOAL, True)
        kids = [go(c) for c in t.children]
        if all(is_open for _, is_open in kids):
            return _parenthesized(t.tactic), False
        return f"{_parenthesized(t.tactic)} THENL [{'; '.join(text for text, _ in kids)}]", False

    return go(tree)[0]


def _parenthesized(text: str) -> str:
    """``(text)``, unless ``text`` already is one parenthesised group."""
    try:
        items = _top_items(text)
    except TacticSyntaxError:
        items = []
    if len(items) == 1 and items[0].kind == "group" and items[0].opener == "(" and text.strip() == text:
        return text
    return f"({text})"


def count_open(tree: Tree) -> int:
    if tree is None:
        return 1
    return sum(count_open(c) for c in tree.children)


def graft(tree: Tree, index: int, new: Tree) -> Tree:
    """``tree`` with its ``index``-th open goal (depth first, left to right) replaced by ``new``."""
    subs = [None] * count_open(tree)
    if not 0 <= index < len(subs):
        raise IndexError(f"no open goal {index} (there are {len(subs)})")
    subs[index] = new
    return fill_open(tree, subs)


def fill_open(tree: Tree, subs: list[Tree]) -> Tree:
    """``tree`` with its open goals replaced, in order, by ``subs`` (one per open goal)."""
    it = iter(subs)

    def go(t: Tree) -> Tree:
        if t is None:
            return next(it)
        return ProofTree(t.tactic, tuple(go(c) for c in t.children))

    out = go(tree)
    if next(it, _END) is not _END:
        raise ValueError("more subtrees than open goals")
    return out


_END = object()


# -- a small OCaml tokenizer: enough to find top-level THEN / THENL -----------------------------------

class TacticSyntaxError(ValueError):
    """Unbalanced brackets, or an unterminated string, comment or term quotation."""


@dataclass(frozen=True)
class _Tok:
    kind: str  # word, open, close, string, quote, char, symbol
    start: int
    end: int


_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_']*(?:\.[A-Za-z_][A-Za-z0-9_']*)*|[0-9][0-9A-Za-z_.]*")
_CHAR = re.compile(r"'(?:[^\\'\n]|\\(?:[\\'\"ntbr ]|[0-9]{3}|x[0-9a-fA-F]{2}|o[0-3][0-7]{2}))'")
_SYMBOL_CHARS = "!$%&*+-./:<=>?@^|~#"
_CLOSER = {"(": ")", "[": "]", "{": "}"}


def _lex(text: str) -> Iterator[_Tok]:
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
        elif text.startswith("(*", i):
            i = _skip_comment(text, i)
        elif c in "([{":
            yield _Tok("open", i, i + 1)
            i += 1
        elif c in ")]}":
            yield _Tok("close", i, i + 1)
            i += 1
        elif c == '"':
            j = _skip_string(text, i)
            yield _Tok("string", i, j)
            i = j
        elif c == "`":
            j = text.find("`", i + 1)
            if j < 0:
                raise TacticSyntaxError("unterminated term quotation (`)")
            yield _Tok("quote", i, j + 1)
            i = j + 1
        elif c == "'" and (m := _CHAR.match(text, i)):
            yield _Tok("char", i, m.end())
            i = m.end()
        elif m := _WORD.match(text, i):
            yield _Tok("word", i, m.end())
            i = m.end()
        elif c in ";,":
            j = i + 2 if text.startswith(";;", i) else i + 1
            yield _Tok("symbol", i, j)
            i = j
        else:
            j = i + 1
            while j < n and text[j] in _SYMBOL_CHARS and c in _SYMBOL_CHARS and not text.startswith("(*", j):
                j += 1
            yield _Tok("symbol", i, j)
            i = j


def _skip_comment(text: str, i: int) -> int:
    end = skip_comment(text, i)
    if end is None:
        raise TacticSyntaxError("unterminated comment")
    return end


def _skip_string(text: str, i: int) -> int:
    end = skip_string(text, i)
    if end is None:
        raise TacticSyntaxError("unterminated string")
    return end


@dataclass(frozen=True)
class _Item:
    """A top-level token, or a whole bracketed group (``kind`` ``group``, ``opener`` its bracket)."""

    kind: str
    start: int
    end: int
    opener: str = ""


def _top_items(text: str) -> list[_Item]:
    items: list[_Item] = []
    stack: list[tuple[str, int]] = []
    for tok in _lex(text):
        if tok.kind == "open":
            stack.append((text[tok.start], tok.start))
        elif tok.kind == "close":
            if not stack or _CLOSER[stack[-1][0]] != text[tok.start]:
                raise TacticSyntaxError(f"unbalanced {text[tok.start]!r} at offset {tok.start}")
            opener, start = stack.pop()
            if not stack:
                items.append(_Item("group", start, tok.end, opener))
        elif not stack:
            items.append(_Item(tok.kind, tok.start, tok.end))
    if stack:
        raise TacticSyntaxError(f"unclosed {stack[-1][0]!r} at offset {stack[-1][1]}")
    return items


def normalize_tactic(text: str) -> str:
    """``text`` stripped of surrounding space and a trailing ``;;``; raises :class:`TacticSyntaxError`.

    Brackets, strings, comments and term quotations must be balanced, so that ``(text)``
    is one parenthesised expression: a step can never escape the node it is put in.
    """
    text = text.strip()
    while text.endswith(";;"):
        text = text[:-2].rstrip()
    if not text or not _top_items(text):
        raise TacticSyntaxError("empty tactic")
    return text


# -- THEN / THENL expressions ------------------------------------------------------------------------

@dataclass(frozen=True)
class Atom:
    """A tactic run as one step."""

    text: str


@dataclass(frozen=True)
class Then:
    """``first THEN rest``: ``rest`` on every subgoal of ``first``."""

    first: TacticExpr
    rest: TacticExpr


@dataclass(frozen=True)
class Thenl:
    """``first THENL [items]``: ``items[i]`` on the i-th subgoal of ``first``."""

    first: TacticExpr
    items: tuple[TacticExpr, ...]


TacticExpr = Atom | Then | Thenl

#: Top-level words after which we cannot tell the structure: the whole expression is one atom.
_OPAQUE_WORDS = frozenset({
    "let", "in", "fun", "function", "match", "with", "try", "if", "then", "else", "when", "as", "and", "or",
    "begin", "end", "mod", "land", "lor", "lxor", "lsl", "lsr", "asr", "THENC", "ORELSEC", "THEN_TCL", "ORELSE_TCL",
    "o", "upto", "F_F", "THEN1",
})


def parse_tactic(text: str) -> TacticExpr:
    """The top-level ``THEN``/``THENL`` structure of a tactic expression.

    ``THEN``, ``THENL`` and ``ORELSE`` share one precedence and associate to the left, as in
    HOL Light: ``A THEN B THENL [C; D]`` is ``(A THEN B) THENL [C; D]`` and ``A THEN B ORELSE C``
    is ``(A THEN B) ORELSE C`` (kept as one atom). A parenthesised operand and every ``THENL``
    item are parsed in turn. Whatever this parser cannot read with certainty (top-level
    ``let``/``fun``/``match``, other operators, a ``THENL`` argument that is not a literal list)
    stays one atom: localization is then coarser, never wrong.
    """
    text = normalize_tactic(text)
    return _parse(text, _top_items(text))


def _parse(text: str, items: list[_Item]) -> TacticExpr:
    whole = Atom(text[items[0].start:items[-1].end])
    chunks: list[list[_Item]] = [[]]
    ops: list[str] = []
    for item in items:
        word = text[item.start:item.end] if item.kind == "word" else ""
        if word in ("THEN", "THENL", "ORELSE"):
            ops.append(word)
            chunks.append([])
        else:
            chunks[-1].append(item)
    if any(not chunk for chunk in chunks):
        return whole
    for chunk in chunks:
        for item in chunk:
            if item.kind == "symbol" or (item.kind == "word" and text[item.start:item.end] in _OPAQUE_WORDS):
                return whole
    if not ops:
        return _operand(text, chunks[0])
    expr = _operand(text, chunks[0])
    for op, chunk in zip(ops, chunks[1:], strict=True):
        if op == "THEN":
            expr = Then(expr, _operand(text, chunk))
        elif op == "ORELSE":  # same precedence, left associative: everything so far is the left operand
            expr = Atom(text[items[0].start:chunk[-1].end])
        else:
            group = chunk[0]
            if len(chunk) != 1 or group.kind != "group" or group.opener != "[" or text[group.start + 1] == "|":
                return whole
            listed = _list_items(text[group.start + 1:group.end - 1])
            if listed is None:
                return whole
            expr = Thenl(expr, listed)
    return expr


def _operand(text: str, chunk: list[_Item]) -> TacticExpr:
    if len(chunk) == 1 and chunk[0].kind == "group" and chunk[0].opener == "(":
        inner = text[chunk[0].start + 1:chunk[0].end - 1].strip()
        items = _top_items(inner)
        if items:
            return _parse(inner, items)
    return Atom(text[chunk[0].start:chunk[-1].end])


def _list_items(inner: str) -> tuple[TacticExpr, ...] | None:
    parts: list[list[_Item]] = [[]]
    for item in _top_items(inner):
        if item.kind == "symbol" and inner[item.start:item.end] == ";":
            parts.append([])
        else:
            parts[-1].append(item)
    if parts and not parts[-1]:
        parts.pop()  # [a; b;] is a list of two
    if any(not part for part in parts):
        return None
    return tuple(_parse(inner, part) for part in parts)


# -- the session -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Node:
    parent: int | None
    tactic: str  # the step that led here from the parent ("" at the root)
    tree: Tree
    state: HolTacticState
    check_s: float  # wall time of the check that produced it: the cost of replaying it


class HolTacticSession:
    """A branching tactic session on one HOL Light task (see module docstring). Use as a context manager.

    It owns no process: every step is one ``verifier.check`` on the verifier's warm server.
    """

    def __init__(self, verifier: Verifier, task: Task) -> None:  # a HolLightVerifier: only its check
        self.verifier = verifier
        self.task = task
        self._nodes: dict[int, _Node] = {}
        self._next_id = 0
        self._closed = False
        self.steps = 0
        self.step_seconds = 0.0
        probe = verifier.check(task, OPEN_GOAL)  # also loads the task's context (ContextLoadError if broken)
        if probe.verdict is not Verdict.FAIL or len(probe.remaining_goals) != 1:
            raise VerifierCrashed(f"HOL Light could not state the goal of task {task.id}: {probe.feedback(500)}")
        state = self._new_state(probe.remaining_goals, finished=False)
        # Replaying the root is free (its time was loading the context, which happens once).
        self._nodes[state.state_id] = _Node(None, "", None, state, 0.0)
        self.root = state.state_id

    # -- lifecycle --------------------------------------------------------------------------------
    def close(self) -> None:
        """Forget the states (the verifier and its server stay up). Idempotent."""
        self._closed = True

    def __enter__(self) -> HolTacticSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- API --------------------------------------------------------------------------------------
    def state(self, state_id: int) -> HolTacticState:
        return self._node(state_id).state

    def tree(self, state_id: int) -> Tree:
        return self._node(state_id).tree

    def path(self, state_id: int) -> list[str]:
        """The steps from the root to ``state_id``, in order."""
        out: list[str] = []
        node_id: int | None = state_id
        while node_id is not None:
            node = self._node(node_id)
            if node.parent is not None:
                out.append(node.tactic)
            node_id = node.parent
        return out[::-1]

    def proof_script(self, state_id: int) -> str:
        """The state's tactic expression: a whole proof for ``check`` (open goals are ``ALL_TAC``)."""
        return render(self._node(state_id).tree)

    def run(self, tactic: str, state_id: int | None = None, *, timeout_s: float | None = None,
            goal: int = 0) -> StepResult:
        """Apply ``tactic`` to the first open goal of ``state_id`` (default: the root).

        ``goal`` picks another open goal (an index into ``state.goals``), like HOL Light's
        ``r`` then ``e``; fail-safe localization uses it to work on one subgoal at a time.
        ``timeout_s`` (default: the task's) bounds the new tactic; replaying the path may
        take as long again as the check that made the starting state.
        """
        if self._closed:
            raise VerifierCrashed("the tactic session is closed")
        start_id = self.root if state_id is None else state_id
        node = self._node(start_id)
        start = node.state
        if start.finished:
            return StepResult(False, start, "no goals left: the proof is finished", Verdict.ERROR, ErrorCategory.OTHER)
        if not 0 <= goal < len(start.goals):
            return StepResult(False, start, f"no goal {goal}: the state has {len(start.goals)}", Verdict.ERROR,
                              ErrorCategory.OTHER)
        try:
            # a step may be written as HOL Light's goalstack command (e(TAC);;): it means TAC
            text = normalize_tactic(normalize_proof(tactic)) if isinstance(tactic, str) else None
        except TacticSyntaxError as exc:
            return StepResult(False, start, f"the tactic does not parse: {exc}", Verdict.ERROR, ErrorCategory.SYNTAX)
        except InvalidSubmission as exc:
            return StepResult(False, start, str(exc), Verdict.ERROR, ErrorCategory.SYNTAX)
        if text is None:
            return StepResult(False, start, "a tactic must be text", Verdict.ERROR, ErrorCategory.SYNTAX)
        budget = timeout_s or self.task.timeout_s
        expression = render(graft(node.tree, goal, ProofTree(text)))
        t0 = time.monotonic()
        try:
            result = self.verifier.check(replace(self.task, timeout_s=budget + node.check_s), expression)
        finally:
            self.steps += 1
            self.step_seconds += time.monotonic() - t0
        return self._outcome(start_id, node, goal, text, result, time.monotonic() - t0)

    # -- internals --------------------------------------------------------------------------------
    def _node(self, state_id: int) -> _Node:
        try:
            return self._nodes[state_id]
        except (KeyError, TypeError):
            raise KeyError(f"unknown state id {state_id}; known: 0..{self._next_id - 1}") from None

    def _new_state(self, goals: tuple[Goal, ...], *, finished: bool) -> HolTacticState:
        state = HolTacticState(self._next_id, goals, finished=finished)
        self._next_id += 1
        return state

    def _outcome(self, start_id: int, node: _Node, goal: int, text: str, result: CheckResult,
                 wall_s: float) -> StepResult:
        start = node.state
        remaining = result.remaining_goals
        if result.verdict is Verdict.OK:
            remaining = ()
        elif result.verdict is not Verdict.FAIL or not remaining:
            # The tactic raised, timed out, does not type, or is a cheat (whitelist, or a theorem
            # that is not the goal): the state is unchanged.
            error = "; ".join(result.reasons) or result.verdict.value
            if result.messages:
                error += "\n" + "\n".join(result.messages).strip()
            return StepResult(False, start, error, result.verdict, result.error_category, result.reasons)
        new_children = len(remaining) - len(start.goals) + 1
        if new_children < 0:
            return StepResult(False, start, f"the replayed proof left {len(remaining)} goal(s) where at least "
                              f"{len(start.goals) - 1} were expected", Verdict.ERROR, ErrorCategory.OTHER)
        tree = graft(node.tree, goal, ProofTree(text, (None,) * new_children))
        state = self._new_state(remaining, finished=not remaining)
        self._nodes[state.state_id] = _Node(start_id, text, tree, state, wall_s)
        return StepResult(True, state)


# -- fail-safe localization (Cobblestone §2.5, for THEN / THENL) ---------------------------------------

@dataclass(frozen=True)
class HolHole:
    """A goal the proof did not prove: the tactic that failed there, and where the goal is open now."""

    index: int  # its position among the localization's holes (and the open goals of its skeleton)
    goal: Goal
    state_id: int  # a session state in which this goal is open ...
    goal_index: int  # ... as goal number ``goal_index``: ``session.run(t, state_id, goal=goal_index)`` works on it
    failed_sentence: str  # the failing tactic; "" when the proof simply had nothing for this goal
    error: str


@dataclass
class HolLocalization:
    """The verified skeleton of a proof: failing tactics replaced by open goals (holes)."""

    skeleton: Tree  # proves the localized goal except for its open goals, which are ``holes`` in order
    holes: list[HolHole] = field(default_factory=list)
    final_state: int | None = None  # the session state after the skeleton (the holes still open)
    rejected: str = ""  # CHEATING/ERROR of the whole submission before anything ran
    notes: list[str] = field(default_factory=list)  # repairs: THENL items dropped

    @property
    def complete(self) -> bool:
        return not self.holes and not self.rejected and self.final_state is not None

    def expression(self, fills: Mapping[int, str] | None = None) -> str:
        """The skeleton as one tactic expression, with ``fills[hole.index]`` in place of those holes.

        Unfilled holes stay ``ALL_TAC`` (and the whole-proof check then says FAIL: goals remain).
        """
        return render(self.skeleton, fills)

    script = expression  # the whole proof for ``check``, as Coq's ``Localization.script``


@dataclass
class _Slot:
    """An open goal left by a localized expression: still to be worked on, or a hole."""

    failed: str | None = None  # None: open (an outer THEN may still work on it)
    error: str = ""


def localize(session: HolTacticSession, proof: str, *, at: int | None = None, goal: int = 0,
             timeout_s: float | None = None, max_steps: int = 500) -> HolLocalization:
    """Step ``proof`` node by node on goal ``goal`` of state ``at`` (default: the root's goal).

    First the whole expression is tried as one step (one check): if it proves the goal the
    localization is complete; a whitelist rejection (CHEATING) rejects it. Otherwise it is
    parsed (:func:`parse_tactic`) and run node by node: ``A THEN B`` runs ``B`` on each
    subgoal of ``A`` separately, ``A THENL [B1; ...]`` runs ``Bi`` on the i-th. A failing tactic
    leaves its goal open as a hole and localization goes on with the sibling goals. A
    ``THENL`` list longer than the subgoals has its extra items dropped; a shorter one leaves
    holes. Goals still open at the end are holes too.
    """
    state_id = session.root if at is None else at
    try:
        text = normalize_tactic(proof) if isinstance(proof, str) else None
        expr = parse_tactic(text) if text is not None else None
    except TacticSyntaxError as exc:
        return HolLocalization(None, rejected=f"ERROR: the tactic does not parse: {exc}")
    if text is None or expr is None:
        return HolLocalization(None, rejected="ERROR: a tactic must be text")
    first = session.run(text, state_id, timeout_s=timeout_s, goal=goal)
    if first.verdict is Verdict.CHEATING:
        return HolLocalization(None, rejected=f"CHEATING: {first.error}")
    start_goals = len(session.state(state_id).goals)
    if first.ok and len(first.state.goals) == start_goals - 1:
        return HolLocalization(ProofTree(text), [], first.state.state_id)

    current = state_id
    steps = 0
    notes: list[str] = []

    def apply(node: TacticExpr, pos: int) -> tuple[Tree, list[_Slot]]:
        """Run ``node`` on open goal ``pos`` of ``current``: its subtree and the goals it leaves."""
        nonlocal current, steps
        if isinstance(node, Atom):
            if node is expr and first is not None:
                result = first  # the whole proof is one atom: it already ran
            elif steps >= max_steps:
                return None, [_Slot(node.text, f"localization stopped after {max_steps} steps")]
            else:
                steps += 1
                result = session.run(node.text, current, timeout_s=timeout_s, goal=pos)
            if not result.ok:
                return None, [_Slot(node.text, result.error)]
            made = len(result.state.goals) - len(session.state(current).goals) + 1
            current = result.state.state_id
            return ProofTree(node.text, (None,) * made), [_Slot() for _ in range(made)]
        tree, slots = apply(node.first, pos)
        subs: list[Tree] = []
        out: list[_Slot] = []
        p = pos
        open_count = sum(1 for s in slots if s.failed is None)
        if isinstance(node, Thenl) and len(node.items) != open_count:
            notes.append(f"THENL has {len(node.items)} tactic(s) for {open_count} subgoal(s)")
        k = 0
        for slot in slots:
            if slot.failed is not None:
                subs.append(None)
                out.append(slot)
                p += 1
                continue
            if isinstance(node, Then):
                branch: TacticExpr | None = node.rest
            else:
                branch = node.items[k] if k < len(node.items) else None
                k += 1
            if branch is None:
                subs.append(None)
                out.append(_Slot("", f"the THENL list has {len(node.items)} tactic(s) for {open_count} subgoal(s)"))
                p += 1
                continue
            sub, sub_slots = apply(branch, p)
            subs.append(sub)
            out.extend(sub_slots)
            p += len(sub_slots)
        return fill_open(tree, subs), out

    skeleton, slots = apply(expr, goal)
    final = session.state(current)
    holes = [HolHole(i, final.goals[goal + i], current, goal + i,
                     slot.failed if slot.failed is not None else "",
                     slot.error if slot.failed is not None else "goal left open at the end of the proof")
             for i, slot in enumerate(slots)]
    return HolLocalization(skeleton, holes, current, notes=notes)
