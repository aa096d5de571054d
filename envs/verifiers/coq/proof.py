"""Turn a hostile Coq proof text into a whitelisted list of proof-mode sentences.

The submission is cut with :func:`~proofgym.envs.verifiers.coq.lexer.iter_sentences`
and read in three parts.

**Before the proof** (everything ahead of the first ``Proof`` sentence; without one,
a restated statement and the ``Require``/``Import``/scope lines ahead of it). None of
it is ever sent to Coq: the verifier states the task's statement itself. So an honest
slip there is normalised, and only an attempt to cheat is ``CHEATING``:

* the task's statement repeated (any whitespace, ``Theorem`` for ``Lemma``, even
  another name): dropped. A *different* statement: ``ERROR`` saying what to change;
* ``Require [Import|Export] L``/``From R Require ...``: handed to the verifier as
  :attr:`NormalizedProof.requires`, which judges it by what it brings: a library the
  context loads is dropped (its ``Import`` runs inside the proof), any other installed
  library is loaded right after the opener, after the statement; its axioms then show in
  ``Print Assumptions`` and the original lemma in the leak check. No library: ``ERROR``;
* ``Import M``/``Export M`` and ``Open Scope``: run after ``Proof.`` instead, where
  they cannot change the statement;
* a copy of a sentence of the task's context, prose: dropped;
* any other command has the class :mod:`.classes` gives it, the same wherever it stands:
  CHEATING (axioms, holes, checker-changing options, notations, file I/O), HARMLESS
  (queries, display and tactic options, hints: dropped with a note) or ERROR (helper
  definitions and lemmas: the proof may only use the context; anything unlisted).

**The proof**, where every sentence must be one of:

* ``Proof.``, ``Proof using ...``, ``Proof with <tactic>.`` (first only; a repeated
  ``Proof.`` or ``Proof using`` is dropped, a ``Proof with`` or ``Proof <term>`` right
  after ``Proof.`` replaces it); ``Proof <term>.`` becomes ``Proof. exact (<term>). Qed.``;
* a bullet (``-``, ``+``, ``*``, repeated) or a brace, optionally after a goal selector;
* a tactic, optionally after a goal selector (``2:``, ``1-3:``, ``all:``, ``!:``,
  ``par:``, ``[x]:``). It is sent to Coq as ``(<tactic>).`` so that Coq's own
  parser must agree with our cut: a sentence that Coq would end earlier leaves an
  unbalanced parenthesis and fails to parse;
* ``Import M``/``Export M`` (it loads nothing, and the statement is already elaborated),
  and ``Require`` (resolved by the verifier where it stood, as before the proof);
* ``Qed.`` or ``Defined.`` (last only; its period may be missing at the very end). A
  bare tactic script gets ``Qed.`` appended. ``Save name.`` (the old closer: ``Qed`` under
  another name) is ``Qed.``; the verifier names the lemma itself;
* ``Focus n.``, ``Unfocus.``, ``Unfocused.``: deprecated focusing, sent as written (they only
  change which goals are shown and worked on, like ``n: {``).
* ``Set``/``Unset`` of an option that leaves the kernel alone (``Set Printing All.``): dropped,
  as before the proof, with a note (never sent; a proof that needed it may FAIL without it); one
  that switches a kernel check off (guard, positivity, universes, ``Definitional UIP``) is ``CHEATING``.

``Abort`` gives the proof up: it is ``FAIL`` (nothing is proved, and nothing runs), never
``OK`` and not ``CHEATING``, since it claims nothing; a cheat around it still is.

Any other vernacular command is judged by its class in :mod:`.classes` and never sent:
CHEATING (``Admitted``, ``Declare ML Module``, ``Redirect``, ``Load``, notations...),
HARMLESS and dropped with a note (queries such as ``Locate``/``Check``/``Show``, hints,
``Arguments``, ``Opaque``), or ERROR (helper definitions, ``Ltac``, ``Undo``, anything
unlisted). English that merely starts with a command word or says "admit" ("Proposition
add_0_r takes the argument..."): ``ERROR``, and it is not sent to Coq.

**After the proof**: prose, a stuttered ``Qed.``, a second copy of the lemma and HARMLESS
commands are dropped (none of it is ever sent to Coq either); a restart, a new lemma and
CHEATING commands (``Admitted``) are ``CHEATING``; helper definitions are ``ERROR``.

Before any of this, a reply pasted as it came gets the reply parser's rules: the last
fenced code block, ASCII for typographic look-alikes, no Markdown emphasis around a line.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

from proofgym.envs.parsing import last_code_block, normalize_unicode
from proofgym.envs.types import Verdict
from proofgym.envs.verifiers.base import Rejected
from proofgym.envs.verifiers.coq.classes import (
    HELPER_WHY,
    CommandClass,
    Rule,
    classify_command,
    option_class,
    unlisted,
)
from proofgym.envs.verifiers.coq.lexer import (
    CoqLexError,
    Sentence,
    iter_sentences,
    open_blocks,
    split_sentences,
    strip_comments,
)

# Tactic names that only ever mean "leave a hole".
HOLE_TACTICS = frozenset({"admit", "give_up"})

#: Tokens after which the kernel may rely on the VM or native compiler; such OKs are always audited.
VM_TOKENS = ("vm_compute", "native_compute", "vm_cast_no_check", "native_cast_no_check", "<:", "<<:")

_QUALID = r"[A-Za-z_][\w']*(?:\.[A-Za-z_][\w']*)*"
_PREFIXES = r"(?:#\[[^\]]*\]\s*)*(?:(?:Local|Global|Polymorphic|Monomorphic|Program)\s+)*"
_THEOREM_KEYWORDS = "Lemma|Theorem|Fact|Remark|Corollary|Proposition|Property|Example"
#: The head of a statement: its keyword (group 1) and name (group 2; empty for ``Goal``).
STATEMENT_RE = re.compile(rf"^\s*{_PREFIXES}({_THEOREM_KEYWORDS}|Goal)\b\s*([^\s:({{]*)", re.S)
# A restated statement as a model writes it: a name, then binders or the colon. Stricter than
# STATEMENT_RE so that prose such as "Lemma 1 says..." or "Theorem: ..." is not taken for one.
_RESTATEMENT_RE = re.compile(rf"^{_PREFIXES}(?:(?:{_THEOREM_KEYWORDS})\s+([A-Za-z_][\w']*)\s*(?=[:({{\[`])|Goal\s+(?=[^\s:]))")
# ``Lemma foo n m : ...``: bare binder names before the colon, as stdpp, Iris and much of the standard
# library write statements; binder names may be Unicode (Iris's ``Φ``). Prose can have that shape too ("Lemma foo holds: ..."), so a sentence of
# this shape counts as a restatement only when it is the task's own statement (:func:`_restates`).
_BARE_BINDERS_RE = re.compile(rf"^{_PREFIXES}(?:{_THEOREM_KEYWORDS})\s+[^\W\d][\w']*(?:\s+[^\W\d][\w']*)+\s*(?=[:({{\[`])")

_SELECTOR = r"(?:\d+(?:\s*-\s*\d+)?(?:\s*,\s*\d+(?:\s*-\s*\d+)?)*|all|!|par|\[\s*[A-Za-z_][\w']*\s*\])"
_SELECTOR_RE = re.compile(rf"^({_SELECTOR})\s*:(?![=>])\s*(.*)$", re.S)
_PROOF_RE = re.compile(r"^Proof\s*\.$")
_PROOF_USING_RE = re.compile(r"^Proof\s+using\b([\sA-Za-z0-9_'*()+\-]*)\.$")
_PROOF_WITH_RE = re.compile(r"^Proof\s+with\b(.*)\.$", re.S)
_PROOF_TERM_RE = re.compile(r"^Proof\s+(.*)\.$", re.S)
_END_RE = re.compile(r"^(Qed|Defined)\s*\.$")
_SCOPE_RE = re.compile(r"^(?:Local\s+)?(?:Open|Close)\s+Scope\s+[A-Za-z_][\w']*\s*\.$")
_CHEAT_END_RE = re.compile(r"^(Admitted|Abort|Save|Give\s+Up)\b")
# ``Save name.``: Coq 8.16's ``Qed`` that names the constant (a bare ``Save.`` no longer parses; read as the same).
_SAVE_RE = re.compile(r"^Save(?:\s+[A-Za-z_][\w']*)?\s*\.$")
_ABORT_RE = re.compile(r"^Abort\b")
# Deprecated focusing (Coq 8.16 warns, and still runs them): they change which goals a tactic sees, nothing else.
_FOCUS_RE = re.compile(r"^(?:Focus(?:\s+\d+)?|Unfocus|Unfocused)\s*\.$")
_WORD_RE = re.compile(_QUALID)
_FIRST_WORD_RE = re.compile(r"^[A-Za-z_][\w']*")
_REQUIRE_RE = re.compile(rf"^(?:From\s+({_QUALID})\s+)?Require\s+(?:(Import|Export)\s+)?((?:{_QUALID}\s*)+)\.$")
_REQUIRE_LIKE_RE = re.compile(rf"^(?:From\s+{_QUALID}\s+)?Require\b")
# ``Export Set``/``Export Unset`` is an option command (``Export Unset Guard Checking.``), never an import.
_IMPORT_RE = re.compile(rf"^(?:Import|Export(?!\s+(?:Set|Unset)\b))\s+((?:{_QUALID}\s*)+)\.$")
_OPTION_RE = re.compile(rf"^{_PREFIXES}(?:Export\s+)?(Set|Unset)\s+([A-Z][\w']*(?:\s+[A-Z][\w']*)*)\b.*\.$", re.S)
# Declarations that assume something: a name (or several), then a colon or a binder.
_ASSUME_RE = re.compile(rf"^{_PREFIXES}(?:Axioms?|Parameters?|Conjectures?|Hypothes[ie]s|Variables?|Context)\s+"
                        r"(?:[A-Za-z_][\w']*(?:\s+[A-Za-z_][\w']*)*\s*:|[({`\[])")
_LET_RE = re.compile(r"^Let\s+[A-Za-z_][\w']*\s*(?:[:({\[]|:=)")
_END_BLOCK_RE = re.compile(r"^End\s+([A-Za-z_][\w']*)\s*\.$")
_BOLD_LINE_RE = re.compile(r"^([ \t]*)\*\*([A-Za-z](?:[^*\n]*[^\s*])?)\*\*[ \t]*$", re.M)
_FENCE_LINE_RE = re.compile(r"^[ \t]*(?:```|~~~)", re.M)
_FENCE_SPLIT_RE = re.compile(r"^[ \t]*(?:```|~~~)[^\n]*$", re.M)
_BLOCK_RE = re.compile(r"^(?:Section|Module(?:\s+Type)?)\s+[A-Za-z_][\w']*")

# Control prefixes of a sentence inside a proof: ``Time``/``Info n`` only report, ``Fail``/``Succeed`` leave the
# proof state as it was, ``Timeout n`` is the tactic ``timeout n``. What follows the prefix is judged as itself.
_CONTROL_RE = re.compile(r"^(Time|Fail|Succeed|Info\s+\d+|Timeout\s+\d+)\s+(?=\S)")
# The logical symbols of Coq.Unicode.Utf8, which the prover only reads once a context loads it: written as their
# ASCII forms (the notations are defined as exactly these, at the same levels) when neither the context nor the
# statement writes one (then the context may give it another meaning, and the proof is left as it is).
_UTF8_LOGIC = {"\u2200": " forall ", "\u2203": " exists ", "\u2192": " -> ", "\u2194": " <-> ",
               "\u2227": " /\\ ", "\u2228": " \\/ ", "\u00ac": " ~ ", "\u2260": " <> "}
_UTF8_LOGIC_RE = re.compile("|".join(_UTF8_LOGIC))
# Attributes that only say where a declaration is visible: a command under them is judged as itself.
_LOCALITY_ATTRS_RE = re.compile(r"^(?:#\[\s*(?:local|global|export)\s*\]\s*)+(?=[A-Z])")
# Commands the normaliser rewrites or places itself (see the module docstring), never judged by the table: one
# that does not have the form its rule reads is prose outside the proof and ERROR inside it.
_STRUCTURAL = frozenset(f"""
    Proof Qed Defined Save Abort Goal End Import Export Require From Set Unset Open Close Focus Unfocus Unfocused
    Unshelve Time Fail Succeed Timeout Info Local Global Polymorphic Monomorphic Program
    {_THEOREM_KEYWORDS.replace("|", " ")}
""".split())


@dataclass(frozen=True)
class LibraryRequest:
    """A ``Require`` in the submission, for the verifier to resolve against the context.

    Attributes:
        text: The sentence as written (for feedback).
        root: The ``From`` root, or ``""``.
        names: The libraries it names, as written.
        imports: ``Require Import``/``Export`` (else a plain ``Require``).
        at: Where in :attr:`NormalizedProof.sentences` it stood inside the proof; -1 when it
            was written before the proof (its ``Import`` then runs right after the opener).
    """

    text: str
    root: str
    names: tuple[str, ...]
    imports: bool
    at: int = -1


@dataclass(frozen=True)
class NormalizedProof:
    """The sentences to send, in order. ``sentences[-1]`` is ``Qed.`` or ``Defined.``.

    ``requires`` are the submission's ``Require`` sentences: the verifier must resolve
    them (:meth:`with_imports`) or refuse the proof. ``notes`` say what normalisation
    changed, for the feedback.
    """

    sentences: tuple[str, ...]
    identifiers: frozenset[str]  # identifier tokens used outside comments and strings
    uses_vm: bool
    requires: tuple[LibraryRequest, ...] = ()
    notes: tuple[str, ...] = ()
    loads: tuple[str, ...] = ()  # libraries (full names) the proof loads itself with a Require

    @property
    def text(self) -> str:
        return "\n".join(self.sentences)

    def with_imports(self, modules: list[list[str]], notes: list[str]) -> NormalizedProof:
        """The proof with ``requires`` resolved: ``modules[i]`` are the (loaded) libraries that
        ``requires[i]`` imports, each imported where that ``Require`` stood (one written before
        the proof: right after the opener). ``notes`` say what was dropped.

        For libraries that are already loaded: ``Import`` loads nothing, and inside the
        proof it cannot change the statement, which Coq elaborated before it.
        """
        return self.with_library_sentences([[f"Import {m}." for m in mods] for mods in modules], notes)

    def with_library_sentences(self, sentences_per_request: list[list[str]], notes: list[str],
                               loads: tuple[str, ...] = ()) -> NormalizedProof:
        """The proof with ``requires`` resolved into the verifier's own sentences (``Import M.``, or ``Require
        Import M.`` of a library the context does not load), each where its ``Require`` stood (one written before
        the proof: right after the opener, so after the statement, which Coq elaborated before it). ``loads``
        are the libraries the proof itself loads: the integrity checks must look at what they bring."""
        sentences = list(self.sentences)
        opener = 1 if sentences and sentences[0].startswith("Proof") else 0
        # From the last position back, so that earlier positions stay valid.
        order = sorted(range(len(self.requires)), key=lambda i: (self.requires[i].at, i), reverse=True)
        for i in order:
            at = self.requires[i].at if self.requires[i].at >= 0 else opener
            sentences[at:at] = sentences_per_request[i]
        return NormalizedProof(tuple(sentences), self.identifiers, self.uses_vm, (), (*self.notes, *notes),
                               (*self.loads, *loads))


def _strip_strings(code: str) -> str:
    return re.sub(r'"(?:[^"]|"")*"', '""', code)


def _tokens(code: str) -> set[str]:
    return set(_WORD_RE.findall(_strip_strings(code)))


def _restates(code: str, task_key: tuple[str, tuple[str, ...]] | None) -> bool:
    """Whether ``code`` reads as a restated statement: by its shape (:data:`_RESTATEMENT_RE`), or,
    with bare binder names before its colon, by being the task's own statement."""
    if _RESTATEMENT_RE.match(code):
        return True
    if task_key is None or not _BARE_BINDERS_RE.match(code):
        return False
    key = _statement_key(code)
    return key is not None and key[1] == task_key[1]


def _statement_key(code: str) -> tuple[str, tuple[str, ...]] | None:
    """(name, tokens after the name) of a statement sentence; None when ``code`` is not one.

    Tokens ignore whitespace and the keyword, so a statement repeated over other line breaks,
    with ``(n:nat)`` for ``(n : nat)``, or as a ``Theorem`` for a ``Lemma`` has the same key.
    """
    m = STATEMENT_RE.match(code)
    if not m:
        return None
    return m.group(2), _canonical_statement(_sentence_key(code[m.end():]))


_OPEN_CLOSE = {"(": ")", "{": "}", "[": "]"}


def _before_colon(tokens: tuple[str, ...]) -> tuple[int, list[tuple[str, ...]]] | None:
    """Where a statement's top-level colon is and the binder groups before it; None when there is no colon or the
    binders are not plain."""
    colon = _top_level(tokens, ":")
    if colon is None:
        return None
    groups: list[tuple[str, ...]] = []
    if not _binders(tokens[:colon], groups, bare_typed=False):
        return None
    return colon, groups


def _canonical_statement(tokens: tuple[str, ...]) -> tuple[str, ...]:
    """``(n : nat) (m : nat) : T``, ``: forall n m : nat, T`` and ``: forall (n : nat), forall m : nat, T``
    all become ``forall ( n : nat ) ( m : nat ) , T``: the same statement written another way.

    Only binder syntax is rewritten; anything this does not parse stays as written.
    """
    split = _before_colon(tokens)
    if split is None:
        return tokens
    colon, groups = split
    body = tokens[colon + 1:]
    while body[:1] == ("forall",):
        comma = _top_level(body, ",")
        if comma is None or not _binders(body[1:comma], groups, bare_typed=True):
            break
        body = body[comma + 1:]
    if not groups:
        return body
    return ("forall", *(t for g in groups for t in g), ",", *body)


def _colon_binders(code: str) -> list[str] | None:
    """The names a statement binds before its colon, in order (``Lemma t (n m : nat) (H : P) : T``: n, m, H);
    None when ``code`` is not a statement or its binders are not plain (then only an identical copy matches)."""
    m = STATEMENT_RE.match(code)
    if not m:
        return None
    split = _before_colon(_sentence_key(code[m.end():]))
    return None if split is None else [g[1] for g in split[1]]


def _binder_bridge(restated: str, statement: str) -> str:
    """The tactic that turns the goal of the task's ``statement`` into the goal of ``restated``, a copy of it
    (same :func:`_statement_key`) that binds more or fewer names before its colon; "" when both bind the same.

    The canonical keys are equal, so both bind the same names in the same order and only the split differs:
    ``revert`` the task's extra names (the copy quantifies them in its goal), or ``intros`` the copy's extra ones.
    """
    mine, theirs = _colon_binders(restated), _colon_binders(statement)
    if mine is None or theirs is None or mine == theirs:
        return ""
    if len(mine) < len(theirs) and theirs[:len(mine)] == mine:
        return f"(revert {' '.join(theirs[len(mine):])})."
    if len(mine) > len(theirs) and mine[:len(theirs)] == theirs:
        return f"(intros {' '.join(mine[len(theirs):])})."
    return ""


def _top_level(tokens: tuple[str, ...], wanted: str) -> int | None:
    depth = 0
    for i, t in enumerate(tokens):
        if t in _OPEN_CLOSE:
            depth += 1
        elif t in _OPEN_CLOSE.values():
            depth -= 1
        elif t == wanted and depth == 0:
            return i
    return None


def _binders(tokens: tuple[str, ...], groups: list[tuple[str, ...]], *, bare_typed: bool) -> bool:
    """Append one group per bound name to ``groups``; False when ``tokens`` are not plain binders."""
    def ident(t: str) -> bool:
        return bool(re.fullmatch(r"[A-Za-z_][\w']*", t))

    if bare_typed and tokens and tokens[0] not in _OPEN_CLOSE:
        # ``forall n m : nat, ...``: names, then one type for all of them.
        colon = _top_level(tokens, ":")
        names, typ = (tokens, ()) if colon is None else (tokens[:colon], tokens[colon + 1:])
        if not names or not all(ident(n) for n in names):
            return False
        groups.extend(("(", n, *((":", *typ) if typ else ()), ")") for n in names)
        return True
    i = 0
    while i < len(tokens):
        t = tokens[i]
        if ident(t):
            groups.append(("(", t, ")"))
            i += 1
            continue
        if t not in _OPEN_CLOSE:
            return False
        depth, j = 0, i
        while j < len(tokens):
            if tokens[j] in _OPEN_CLOSE:
                depth += 1
            elif tokens[j] in _OPEN_CLOSE.values():
                depth -= 1
                if depth == 0:
                    break
            j += 1
        inner = tokens[i + 1:j]
        colon = _top_level(inner, ":")
        if j >= len(tokens) or colon is None or ":=" in inner or not all(ident(n) for n in inner[:colon]):
            return False
        groups.extend((t, n, ":", *inner[colon + 1:], _OPEN_CLOSE[t]) for n in inner[:colon])
        i = j + 1
    return True


def _sentence_key(code: str) -> tuple[str, ...]:
    return tuple(re.findall(r"[A-Za-z_][\w']*(?:\.[A-Za-z_][\w']*)*|\d+|\S", code))


@functools.lru_cache(maxsize=64)
def _context_keys(context: str) -> frozenset[tuple[str, ...]]:
    # Every submission is compared with its task's context: computed once per context.
    try:
        return frozenset(_sentence_key(s.code) for s in split_sentences(context))
    except CoqLexError:
        return frozenset()


def command_rule(code: str) -> Rule | None:
    """The class of the Coq command ``code`` (:mod:`.classes`), or None when ``code`` is not a command.

    Locality attributes (``#[local] Hint ...``) leave the command what it is; any other attribute
    (``#[bypass_check(guard)]``) is CHEATING wherever it stands.
    """
    unattributed = _LOCALITY_ATTRS_RE.sub("", code)
    if unattributed.startswith("#"):
        return Rule("#[...]", CommandClass.CHEATING, "attributes are not allowed (one can switch a kernel check "
                                                     "off: `#[bypass_check(guard)]`)")
    rule = classify_command(unattributed)
    if rule is not None:
        return rule
    first = _first_word(re.sub(rf"^{_PREFIXES}", "", unattributed))
    if first and first[0].isupper() and first in VERNACULAR and first not in _STRUCTURAL:
        return unlisted(first)
    return None


def _outside_kind(code: str, context_keys: frozenset[tuple[str, ...]], open_names: frozenset[str]) -> str:
    """What a sentence before or after the proof is: "context", "cheat:<why>", "harmless:<note>",
    "error:<what to change>", "helper", "code" or "prose".

    Only what is clearly Coq is classified; English (or anything else) is "prose". Nothing
    outside the proof is sent to Coq, so a misread sentence costs fairness, never soundness:
    the rules err towards prose. A command has the class :mod:`.classes` gives it, as inside the proof.
    """
    if _sentence_key(code) in context_keys:
        return "context"
    code, _ = _control_prefixes(code)  # ``Time``/``Fail``/``Timeout n``: what follows is judged as itself
    first = _first_word(code)
    if first in HOLE_TACTICS:
        return f"cheat:hole tactic ({first}) leaves the goal unproved"
    if m := _CHEAT_END_RE.match(code):
        return f"cheat:{m.group(1)} ends the proof without proving it"
    if _ASSUME_RE.match(code):
        return f"cheat:{_short(code)} assumes what the task does not give"
    if m := _OPTION_RE.match(code):
        option = option_class(m.group(2), m.group(1))
        if option.cls is CommandClass.CHEATING:
            return f"cheat:{m.group(1)} {m.group(2)} {option.why}"
        return f"harmless:the option `{_short(code)}`"
    if m := _END_BLOCK_RE.match(code):
        return "context" if m.group(1) in open_names else "code"
    if (_RESTATEMENT_RE.match(code) or _END_RE.match(code) or _REQUIRE_LIKE_RE.match(code)
            or _IMPORT_RE.match(code) or _SCOPE_RE.match(code) or _PROOF_RE.match(code)
            or _PROOF_USING_RE.match(code) or _PROOF_WITH_RE.match(code)):
        return "code"
    if code.startswith("#[") and STATEMENT_RE.match(code):
        return "code"
    rule = command_rule(code)
    if rule is None:
        body = re.sub(rf"^{_PREFIXES}", "", code)
        return "helper" if _LET_RE.match(body) or _BLOCK_RE.match(body) else "prose"
    if _reads_as_prose(code):
        # "Back to the main goal.", "Check the base case first.": English that starts with a command word. Never
        # sent, so reading a command as prose here costs no soundness (the proof itself is judged as written).
        return "prose"
    if rule.cls is CommandClass.CHEATING:
        return f"cheat:{rule.command} {rule.why}"
    if rule.cls is CommandClass.HARMLESS:
        return f"harmless:`{_short(code)}` ({rule.why})"
    return "helper" if rule.why == HELPER_WHY else f"error:`{_short(code)}` {rule.why}"


@dataclass
class _Scan:
    """One submission as :func:`normalize_proof` reads it: the cleaned text, its sentences, and what each stage
    found (notes, cheats, errors, the libraries it asks for) and built (the sentences to send)."""

    proof: str  # the submission once fences, typographic characters and emphasis are gone
    statement: str
    notes: list[str]
    sentences: list[Sentence] = field(default_factory=list)
    tail: str = ""  # the text after the proof (never sent)
    unlexed: str = ""  # text after a ``Proof <term>.`` that does not lex: read as text after the proof
    task_key: tuple[str, tuple[str, ...]] | None = None
    context_keys: frozenset[tuple[str, ...]] = frozenset()
    open_names: frozenset[str] = frozenset()
    cheats: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    requires: list[LibraryRequest] = field(default_factory=list)
    moved: list[str] = field(default_factory=list)  # Import and scope sentences from before the proof: after its opener
    other_statement: bool = False  # a statement before the proof that is not the task's (a helper, a changed one)
    restatement: str = ""  # the last copy of the task's statement before the proof, as the submission wrote it
    body: list[Sentence] = field(default_factory=list)  # the sentences from the proof's start on
    out: list[str] = field(default_factory=list)
    identifiers: set[str] = field(default_factory=set)
    ended: bool = False
    opener: int = -1  # index in ``out`` of the Proof sentence, -1 before it
    tactic_seen: bool = False
    gave_up: str = ""  # the ``Abort`` sentence that gave the proof up


def normalize_proof(proof: str, statement: str = "", context: str = "") -> NormalizedProof:
    """Whitelist and normalise a submission (see the module docstring).

    Args:
        proof: The submission.
        statement: The task's statement; a copy of it before the proof is dropped. Without
            it every restated statement before the proof is ``ERROR``.
        context: The task's context; copies of its sentences before the proof are dropped.

    Raises:
        Rejected: ``CHEATING`` for vernacular, holes and restarts;
            ``ERROR`` for text that cannot be cut into sentences and for slips that
            cannot be normalised, with a reason that says what to change.

    The stages, over one :class:`_Scan`: clean the reply (:func:`_clean_reply`), cut it into sentences
    (:func:`_cut`), read what stands before the proof (:func:`_read_head`), the proof sentence by sentence (the
    first of :data:`_PROOF_RULES` that takes it), the text after it (:func:`_read_tail`), then the verdict
    (:func:`_refuse`) or the sentences to send (:func:`_assemble`).
    """
    notes: list[str] = []
    scan = _Scan(_clean_reply(proof, statement, context, notes), statement, notes)
    _cut(scan)
    scan.task_key = _statement_key(strip_comments(statement)) if statement.strip() else None
    scan.context_keys = _context_keys(context) if context else frozenset()
    scan.open_names = frozenset(name for _, name in _open_blocks(context)) if context else frozenset()
    n_head = _head_length(scan.sentences, scan.task_key)
    for sentence in scan.sentences[:n_head]:
        _read_head(scan, sentence)
    scan.body = scan.sentences[n_head:]
    for sentence in scan.body:
        if scan.ended:
            # Only reached after ``Proof <term>.``: a Qed stops the reading in _cut.
            scan.tail = scan.proof[sentence.start:]
            break
        view = _InProof.of(sentence)
        next(rule for rule in _PROOF_RULES if rule(scan, view))
    _read_tail(scan)
    _refuse(scan)
    return _assemble(scan)


def _clean_reply(proof: str, statement: str, context: str, notes: list[str]) -> str:
    """The submission as Coq text. A model's reply may come as it was written (``proofgym check`` has no parser in
    front): the reply parser's rules for fences and typographic look-alikes apply here too. What lies outside the
    last fenced block is never run."""
    if _FENCE_LINE_RE.search(proof):
        block = last_code_block(proof)[0]
        if not block.strip():
            # A closing fence without its opener (``... Qed.\n```\n``): the last text between fence lines.
            block = next((piece for piece in reversed(_FENCE_SPLIT_RE.split(proof)) if piece.strip()), "")
        proof = block
        notes.append("took the last fenced code block")
    typographic = normalize_unicode(proof)
    if typographic != proof:
        proof = typographic
        notes.append("replaced typographic characters (no-break spaces, curly quotes, U+2212) by ASCII")
    if _UTF8_LOGIC_RE.search(proof) and not _UTF8_LOGIC_RE.search(context + statement):
        proof = _UTF8_LOGIC_RE.sub(lambda m: _UTF8_LOGIC[m.group(0)], proof)
        notes.append("wrote the Unicode logical symbols (\u2200 \u2203 \u2192 \u2194 \u2227 \u2228 \u00ac \u2260) as their ASCII "
                     "forms, which Coq.Unicode.Utf8 defines them to be (the task's own text does not use them)")
    # ``**Proof.**`` on a line of its own is Markdown emphasis: Coq cannot read it at all (a
    # period followed by ``*`` ends no sentence), so the emphasis is all it can mean.
    unbold = _BOLD_LINE_RE.sub(r"\1\2", proof)
    if unbold != proof:
        proof = unbold
        notes.append("removed Markdown emphasis around a line")
    return proof


def _cut(scan: _Scan) -> None:
    """The sentences up to the proof's end (what follows it is never sent to Coq and need not even lex)."""
    proof, sentences = scan.proof, scan.sentences
    try:
        for sentence in _split_prose_preface(proof):
            sentences.append(sentence)
            if _END_RE.match(sentence.code) or _SAVE_RE.match(sentence.code) or _ABORT_RE.match(sentence.code):
                scan.tail = proof[sentence.end:]
                break
    except CoqLexError as exc:
        done = sentences[-1].end if sentences else 0
        rest = proof[done:]
        try:
            last = strip_comments(rest)
        except CoqLexError:
            last = ""
        if last in ("Qed", "Defined"):
            # ``... Qed`` at the very end, its period forgotten: nothing else can be meant.
            start = done + rest.index(last)
            sentences.append(Sentence(start, len(proof), last + ".", last + ".", "sentence"))
            scan.notes.append(f"added the missing period after the final {last}")
        elif any(s.kind == "sentence" and _first_word(s.code) == "Proof" and _is_proof_term(s.code)
                 for s in sentences):
            scan.unlexed = rest
        else:
            raise Rejected(Verdict.ERROR, [f"syntax: {exc}"]) from None
    if not sentences:
        raise Rejected(Verdict.ERROR, ["syntax: the proof has no sentences"])


# -- before the proof ----------------------------------------------------------------------------
def _read_head(scan: _Scan, sentence: Sentence) -> None:
    """A sentence before the proof: never sent; a statement, a library, a cheat, a slip or prose."""
    code = sentence.code
    if sentence.kind != "sentence":
        scan.notes.append(f"dropped {code!r} before the proof")
        return
    key = _statement_key(code) if _restates(code, scan.task_key) else None
    if key is not None:
        _head_statement(scan, code, key)
    elif not _head_library(scan, code):
        _head_outside(scan, code)


def _head_statement(scan: _Scan, code: str, key: tuple[str, tuple[str, ...]]) -> None:
    """A statement before the proof: a copy of the task's is dropped, another one is an ERROR."""
    if code.startswith("#") and (rule := command_rule(code)) is not None and rule.cls is CommandClass.CHEATING:
        # ``#[bypass_check(guard)] Lemma ...``: the statement may be the task's, the attribute is not harmless.
        scan.cheats.append(f"before the proof: {rule.why}")
    elif scan.task_key is not None and key[1] == scan.task_key[1]:
        renamed = f" (named {key[0]} instead of {scan.task_key[0]})" if key[0] != scan.task_key[0] else ""
        scan.notes.append(f"dropped the repeated statement{renamed}")
        scan.restatement = code
    else:
        scan.other_statement = True
        statement = scan.statement
        expected = f"`{_short(' '.join(statement.split()), 200)}`" if statement.strip() else "the task's"
        scan.errors.append(
            f"the submission states `{_short(code, 200)}`, which is not the task's statement {expected}: "
            "send only the proof (from `Proof.` to `Qed.`); the verifier states the lemma itself")


def _head_library(scan: _Scan, code: str) -> bool:
    """A ``Require`` (for the verifier to resolve), an ``Import`` or a scope (run after the proof's opener)."""
    if _REQUIRE_LIKE_RE.match(code):
        if m := _REQUIRE_RE.match(code):
            scan.requires.append(LibraryRequest(code, m.group(1) or "", tuple(m.group(3).split()),
                                                m.group(2) is not None))
        else:
            scan.errors.append(f"cannot read `{_short(code)}`: write `Require Import <Library>.` of a library "
                               "the task's context loads, or remove it")
    elif m := _IMPORT_RE.match(code):
        scan.moved.append(f"Import {' '.join(m.group(1).split())}.")
    elif _SCOPE_RE.match(code):
        scan.moved.append(code)
    else:
        return False
    return True


def _head_outside(scan: _Scan, code: str) -> None:
    """Any other sentence before the proof, by its kind (:func:`_outside_kind`)."""
    kind = _outside_kind(code, scan.context_keys, scan.open_names)
    if kind.startswith("cheat:"):
        scan.cheats.append(f"before the proof: {kind[6:]}")
    elif kind == "helper":
        scan.errors.append(f"`{_short(code)}` before the proof: a submission cannot add definitions, lemmas, "
                           "tactics or sections; the proof may only use what the task's context defines "
                           "(inline a helper with `assert`, `pose` or `ltac:(...)`), so remove it")
    elif kind.startswith("error:"):
        scan.errors.append(f"{kind[6:]} (before the proof)")
    elif kind.startswith("harmless:"):
        scan.notes.append(f"dropped {kind[9:]} before the proof")
    elif kind == "context":
        scan.notes.append(f"dropped a copy of the context's `{_short(code)}`")
    else:
        scan.notes.append(f"dropped {_short(code)!r} before the proof (not part of a proof script)")


# -- the proof -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class _InProof:
    """A sentence of the proof as the rules read it: without its control prefixes (``Time``, ``Fail``, ``Timeout
    n``), and after a goal selector (``2: ...``)."""

    sentence: Sentence
    code: str  # the sentence without its control prefixes
    controls: list[str]
    first: str  # the first word of ``code``
    selector: str
    body: str  # ``code`` after its goal selector
    body_first: str

    @classmethod
    def of(cls, sentence: Sentence) -> _InProof:
        code, controls = _control_prefixes(sentence.code)
        selector, body = _split_selector(code)
        return cls(sentence, code, controls, _first_word(code), selector, body, _first_word(body))


def _structure(scan: _Scan, s: _InProof) -> bool:
    """A bullet or a brace: kept."""
    if s.sentence.kind not in ("bullet", "brace"):
        return False
    scan.out.append(s.sentence.code)
    scan.tactic_seen = True
    return True


def _prose_in_proof(scan: _Scan, s: _InProof) -> bool:
    """An explanation inside the proof ("Proposition add_0_r takes the argument..."): not a command and never
    sent to Coq, so no cheat either; it must go."""
    if (s.first in HOLE_TACTICS or (_tokens(s.code) & HOLE_TACTICS) or s.first in VERNACULAR) \
            and _reads_as_prose(s.code):
        scan.errors.append(f"`{_short(s.code)}` is not Coq: the proof may only hold tactics "
                           "(put explanations in comments, or leave them out)")
        return True
    return False


def _hole(scan: _Scan, s: _InProof) -> bool:
    holes = _tokens(s.code) & HOLE_TACTICS
    if s.first in HOLE_TACTICS or holes:
        scan.cheats.append(f"hole tactic ({', '.join(sorted(holes) or [s.first])}) leaves the goal unproved")
        return True
    return False


def _ending(scan: _Scan, s: _InProof) -> bool:
    """``Qed.``/``Defined.`` end the proof; ``Save`` is written as ``Qed.``; ``Abort`` gives it up (claims nothing,
    so no cheat; what follows is still read for one); ``Admitted`` and the like are cheats."""
    code = s.code
    if m := _END_RE.match(code):
        scan.out.append(m.group(1) + ".")
    elif _SAVE_RE.match(code):
        scan.out.append("Qed.")
        scan.notes.append(f"wrote `{_short(code)}` as `Qed.` (the verifier names the lemma)")
    elif _ABORT_RE.match(code):
        scan.gave_up = _short(code)
    elif m := _CHEAT_END_RE.match(code):
        scan.cheats.append(f"{m.group(1)} ends the proof without proving it")
    else:
        return False
    scan.ended = True
    return True


def _proof_command(scan: _Scan, s: _InProof) -> bool:
    """``Proof.``, ``Proof using``/``with`` (:func:`_proof_sentence`), or ``Proof <term>.``, written as
    ``exact (<term>).``, also right after a ``Proof.`` (``Proof. Proof (t).``)."""
    if s.first != "Proof":
        return False
    out, opener = scan.out, scan.opener
    fresh_bare = opener >= 0 and not scan.tactic_seen and out[opener] == "Proof."
    if (opener < 0 or fresh_bare) and not scan.tactic_seen and _is_proof_term(s.code) \
            and (m := _PROOF_TERM_RE.match(s.code)) is not None:
        term = m.group(1).strip()
        scan.identifiers |= _tokens(term)
        if fresh_bare:
            scan.notes.append("dropped a `Proof.` before `Proof <term>.`")
        else:
            out.append("Proof.")
        out.extend([f"exact ({term}).", "Qed."])
        scan.ended = True
        return True
    error = _proof_sentence(s.code, out, opener, scan.tactic_seen, scan.identifiers, scan.notes)
    if error:
        scan.errors.append(error)
    elif opener < 0 and out and out[-1].startswith("Proof"):
        scan.opener = len(out) - 1
    return True


def _proof_mode(scan: _Scan, s: _InProof) -> bool:
    """Sentences kept as they are: a scope (changes how later sentences parse, never the stated goal or the
    kernel), ``Unshelve.`` and focusing (only reorder goals), ``Import`` (loads nothing: a module that is not
    loaded is an error; it runs after the statement was elaborated), and a ``Require`` (inside the proof too, only
    a library the context loads: the verifier decides)."""
    code = s.code
    if _SCOPE_RE.match(code) or code == "Unshelve.":
        scan.out.append(code)
    elif _FOCUS_RE.match(code):
        scan.out.append(" ".join(code[:-1].split()) + ".")
        scan.tactic_seen = True
    elif m := _IMPORT_RE.match(code):
        scan.out.append(f"Import {' '.join(m.group(1).split())}.")
    elif m := _REQUIRE_RE.match(code):
        scan.requires.append(LibraryRequest(code, m.group(1) or "", tuple(m.group(3).split()),
                                            m.group(2) is not None, len(scan.out)))
    else:
        return False
    return True


def _nested_statement(scan: _Scan, s: _InProof) -> bool:
    """A statement inside the proof (a model restating another lemma, or its own in another form): Coq refuses
    nested proofs, so it cannot get anything accepted; a hole or ending around it is still judged as itself."""
    if s.selector or not (_RESTATEMENT_RE.match(s.body) or _BARE_BINDERS_RE.match(s.body)):
        return False
    scan.errors.append(f"`{_short(s.code, 200)}` states a lemma inside the proof, which Coq does not allow: "
                       "send only the proof of the task's statement (from `Proof.` to `Qed.`); "
                       "inline a helper with `assert`")
    return True


def _option_in_proof(scan: _Scan, s: _InProof) -> bool:
    """``Set``/``Unset``: a CHEATING option is a cheat; a display or tactic option (``Set Printing All.``,
    ``Unset Ltac Backtrace.``) claims nothing: it is dropped, as before the proof (never sent, so sound); a proof
    that needed it may FAIL without it."""
    if s.selector or not (m := _OPTION_RE.match(s.body)):
        return False
    option = option_class(m.group(2), m.group(1))
    if option.cls is CommandClass.CHEATING:
        scan.cheats.append(f"{m.group(1)} {m.group(2)} {option.why}")
    else:
        scan.notes.append(f"dropped the option `{_short(s.sentence.code)}` inside the proof (options are not sent "
                          "to Coq; the proof runs without it)")
    return True


def _command_in_proof(scan: _Scan, s: _InProof) -> bool:
    """A command: one class wherever it stands (:mod:`.classes`); none of these is ever sent to Coq."""
    rule = command_rule(s.body)
    if rule is None and s.body_first and s.body_first[0].isupper() and s.body_first in VERNACULAR:
        rule = unlisted(s.body_first)  # a command with a rule of its own, not in the form that rule reads
    if rule is None:
        return False
    written = _short(s.sentence.code)
    if rule.cls is CommandClass.CHEATING:
        scan.cheats.append(f"`{written}` inside the proof: {rule.command} {rule.why}")
    elif rule.cls is CommandClass.HARMLESS:
        scan.notes.append(f"dropped `{written}` inside the proof ({rule.why})")
    else:
        scan.errors.append(f"`{written}` inside the proof {rule.why}")
    return True


def _attribute_in_proof(scan: _Scan, s: _InProof) -> bool:
    if not s.body.startswith("#"):
        return False
    scan.cheats.append("attributes are not allowed inside a proof")
    return True


def _tactic(scan: _Scan, s: _InProof) -> bool:
    """Anything else is a tactic: sent in parentheses, after its goal selector; ``Timeout n`` becomes the tactic
    ``timeout n``, ``Time`` and the like are dropped, and a ``Fail``/``Succeed`` sentence too (it leaves the proof
    state as it was)."""
    body = s.body
    if body.endswith("..."):
        tactic, terminator = body[:-3].rstrip(), "..."
    elif body.endswith("."):
        tactic, terminator = body[:-1].rstrip(), "."
    else:  # pragma: no cover - the lexer only cuts at periods
        raise Rejected(Verdict.ERROR, [f"syntax: sentence without a period: {_short(s.code)}"])
    if not tactic:
        raise Rejected(Verdict.ERROR, ["syntax: empty sentence"])
    if any(c in ("Fail", "Succeed") for c in s.controls):
        scan.notes.append(f"dropped `{_short(s.sentence.code)}` inside the proof (`Fail`/`Succeed` leave the proof "
                          "state as it was)")
        return True
    for control in reversed(s.controls):
        if control.startswith("Timeout"):
            tactic = f"timeout {control.split()[1]} {_parenthesised(tactic)}"
    reported = [c for c in s.controls if not c.startswith("Timeout")]
    if reported:
        scan.notes.append(f"dropped the prefix `{' '.join(reported)}` (it only reports)")
    if len(reported) < len(s.controls):
        scan.notes.append("wrote the prefix `Timeout n` as the tactic `timeout n`")
    scan.identifiers |= _tokens(tactic)
    prefix = f"{s.selector}: " if s.selector else ""
    scan.out.append(f"{prefix}{_parenthesised(tactic)}{terminator}")
    scan.tactic_seen = True
    return True


#: A sentence of the proof is taken by the first rule that returns True (the last, :func:`_tactic`, takes any).
_PROOF_RULES: tuple[Callable[[_Scan, _InProof], bool], ...] = (
    _structure, _prose_in_proof, _hole, _ending, _proof_command, _proof_mode, _nested_statement, _option_in_proof,
    _command_in_proof, _attribute_in_proof, _tactic)


# -- after the proof -----------------------------------------------------------------------------
def _read_tail(scan: _Scan) -> None:
    """The text after the proof: never sent; a restart, a hole or a lemma of the task's name there is a cheat, a lemma
    of another name (the file's next one) is dropped."""
    if scan.unlexed:
        if not scan.ended:
            last = scan.body[-1].code if scan.body else ""
            raise Rejected(Verdict.ERROR, [f"syntax: the text after `{_short(last)}` "
                                          "cannot be cut into sentences (a sentence without its final period?)"])
        scan.tail = scan.tail + scan.unlexed if scan.tail else scan.unlexed
    if not (scan.ended and scan.tail.strip()):
        return
    cheat, restated, error, next_lemma = _tail_cheat(scan.tail, scan.context_keys, scan.open_names, scan.task_key)
    if cheat:
        scan.cheats.append(f"content after the end of the proof: {cheat}")
    elif error:
        scan.errors.append(f"after the end of the proof: {error}")
    elif restated and scan.other_statement:
        scan.errors.append("the submission proves another lemma and then states the task's lemma again: "
                           "send only the proof of the task's lemma (from `Proof.` to `Qed.`); prove a helper "
                           "inside it with `assert (H : ...)`")
    elif restated:
        scan.notes.append("dropped a second copy of the lemma after the proof")
    elif next_lemma:
        scan.notes.append(f"dropped the text after the end of the proof, from the lemma `{next_lemma}` on: nothing "
                          "after `Qed.` is checked, so send only the task's proof")
    else:
        scan.notes.append("dropped the text after the end of the proof")


def _refuse(scan: _Scan) -> None:
    """Raise the verdict of a submission that cannot be sent: a cheat first, then a proof given up, then slips."""
    if scan.cheats:
        raise Rejected(Verdict.CHEATING, scan.cheats)
    if scan.gave_up:
        raise Rejected(Verdict.FAIL, [f"`{scan.gave_up}` gives the proof up, so nothing is proved: finish the proof "
                                      "and end it with `Qed.`", *scan.errors])
    if scan.errors:
        raise Rejected(Verdict.ERROR, scan.errors)
    if not scan.out and not scan.moved and not scan.requires:
        raise Rejected(Verdict.ERROR, ["syntax: the submission has no proof: send the proof script, "
                                      "from `Proof.` to `Qed.`"])


def _assemble(scan: _Scan) -> NormalizedProof:
    """The sentences to send: the binder bridge and the moved imports after the opener, and a final ``Qed.``."""
    out, requires, opener = scan.out, scan.requires, scan.opener
    bridge = _binder_bridge(scan.restatement, strip_comments(scan.statement)) if scan.restatement else ""
    if bridge:
        # The copy puts binders on the other side of the colon (``Lemma t : forall n, ...`` for ``Lemma t (n :
        # nat) : ...``): the same statement, but the proof was written for the goal of the copy (it starts with
        # ``intros n``). The verifier states the task's form, so a tactic turns its goal into the copy's
        # (``revert``/``intros`` of exactly those binders) and the kernel still checks the task's statement.
        first = 1 if out and out[0].startswith("Proof") else 0
        out.insert(first, bridge)
        requires = [replace(r, at=r.at + 1) if r.at >= first else r for r in requires]
        if opener >= first:
            opener += 1
        scan.notes.append(f"the repeated statement binds on the other side of the colon: ran `{bridge}` first, so "
                          "that the proof starts from the goal it was written for")
    if scan.moved:
        at = opener + 1 if opener >= 0 else 0
        out[at:at] = scan.moved
        requires = [replace(r, at=r.at + len(scan.moved)) if r.at >= at else r for r in requires]
    if not scan.ended:
        out.append("Qed.")
    uses_vm = any(tok in " ".join(out) for tok in VM_TOKENS)
    return NormalizedProof(tuple(out), frozenset(scan.identifiers), uses_vm, tuple(requires), tuple(scan.notes))


_PROOF_LINE_RE = re.compile(r"\n[ \t]*(?=Proof(?:\s*\.|\s+(?:using|with)\b|\s*\())")


def _split_prose_preface(proof: str) -> Iterator[Sentence]:
    """:func:`iter_sentences`, except that prose without a final period ("Here is the proof:")
    does not swallow the ``Proof.`` on the next line: before the first ``Proof``, a sentence
    that runs into a line starting with a ``Proof`` command is cut there.
    """
    offset = 0
    while True:
        for sentence in iter_sentences(proof[offset:]):
            if _first_word(sentence.code) == "Proof":
                yield _shifted(sentence, offset)
                yield from (_shifted(s, offset + sentence.end) for s in iter_sentences(proof[offset + sentence.end:]))
                return
            m = _PROOF_LINE_RE.search(sentence.text) if sentence.kind == "sentence" else None
            if m:
                try:
                    preface = strip_comments(sentence.text[:m.start()])  # raises inside a comment or string
                except CoqLexError:
                    preface = ""
                if preface:
                    yield Sentence(offset + sentence.start, offset + sentence.start + m.start(),
                                   sentence.text[:m.start()].strip(), preface, "sentence")
                    offset += sentence.start + m.end()
                    break
            yield _shifted(sentence, offset)
        else:
            return


def _shifted(sentence: Sentence, offset: int) -> Sentence:
    return Sentence(sentence.start + offset, sentence.end + offset, sentence.text, sentence.code, sentence.kind)


def _head_length(sentences: list[Sentence], task_key: tuple[str, tuple[str, ...]] | None = None) -> int:
    """How many sentences stand before the proof (see the module docstring)."""
    proofs = [i for i, s in enumerate(sentences) if s.kind == "sentence" and _first_word(s.code) == "Proof"
              and not _outside_is_prose_proof(s.code)]
    if proofs:
        # ``Proof by induction on n. Proof. ...``: a ``Proof <term>`` before the real opener is prose.
        strict = [i for i in proofs if not _is_proof_term(sentences[i].code)]
        if strict and all(_is_proof_term(sentences[i].code) for i in proofs if i < strict[0]) and not any(
                s.kind != "sentence" or not _outside_prose_like(s.code) for s in sentences[proofs[0]:strict[0]]):
            return strict[0]
        return proofs[0]
    last_statement = max((i for i, s in enumerate(sentences) if s.kind == "sentence"
                          and _restates(s.code, task_key)), default=-1)
    # Without a Proof sentence: a restated statement ends the part before the proof, else
    # the leading Require/Import/scope lines do ("Require Import Lia. lia.").
    n = 0
    while n < len(sentences) and sentences[n].kind == "sentence" and (
            _REQUIRE_LIKE_RE.match(sentences[n].code) or _IMPORT_RE.match(sentences[n].code)
            or _SCOPE_RE.match(sentences[n].code)):
        n += 1
    if last_statement >= 0 and all(s.kind == "sentence" and not _END_RE.match(s.code)
                                   for s in sentences[:last_statement]):
        return max(n, last_statement + 1)
    return n


_ENGLISH_WORD_RE = re.compile(r"(?<![\w'.])[a-z]{2,}(?![\w'.])")


def _reads_as_prose(code: str) -> bool:
    """An English sentence that happens to start with a Coq command word, or to contain ``admit``.

    ``Note: ...``-like (a command word and a colon), or at least four plain lowercase words and
    none of the punctuation that Coq commands and tactics are made of.
    """
    body = code[:-1]
    if re.match(r"^[A-Z][\w']*\s*:(?!=)", body):
        return True
    if re.search(r":=|;|=>|\||\(|\[|\{", _strip_strings(body)):
        return False
    return len(_ENGLISH_WORD_RE.findall(_strip_strings(body))) >= 4


def _outside_prose_like(code: str) -> bool:
    """Whether a sentence between a ``Proof <term>`` and a later ``Proof.`` reads as prose, not a tactic.

    Prose has no Coq punctuation at all; a tactic almost always has some.
    """
    return not re.search(r"[;:()\[\]|=<>+*/@%^~{}_']", code[:-1]) or _first_word(code) == "Proof"


def _outside_is_prose_proof(code: str) -> bool:
    """``Proof sketch: ...``-like prose, which is not a ``Proof`` command."""
    return bool(re.match(r"^Proof\s*:", code))


def _proof_sentence(code: str, out: list[str], opener: int, tactic_seen: bool, identifiers: set[str],
                    notes: list[str]) -> str:
    """Handle a ``Proof ...`` sentence: append to ``out`` or note it; return an error text or ""."""
    if opener >= 0 or tactic_seen:
        # A second Proof command. ``Proof.`` changes nothing in a proof that has begun, and a
        # ``Proof using`` only narrows the section variables the proof may use, which the
        # statement checked inside its section does not depend on: both are dropped (Coq would
        # apply the ``using`` and fail a proof that uses a hypothesis of the section). A
        # ``Proof with`` right after a plain ``Proof.`` replaces it, as the model meant.
        fresh = opener >= 0 and not tactic_seen and out[opener] == "Proof."
        if _PROOF_RE.match(code):
            notes.append("dropped a repeated `Proof.`")
            return ""
        if _PROOF_USING_RE.match(code):
            notes.append(f"dropped `{_short(code)}` after the first `Proof`")
            return ""
        if (m := _PROOF_WITH_RE.match(code)) and fresh:
            tactic = m.group(1).strip()
            identifiers |= _tokens(tactic)
            out[opener] = f"Proof with {_parenthesised(tactic)}."
            notes.append("merged `Proof with` into the first `Proof.`")
            return ""
        return (f"`{_short(code)}` after the proof has begun: `Proof with`/`Proof <term>` must be the first "
                "sentence of the proof; write it once, at the start")
    if _PROOF_RE.match(code):
        out.append("Proof.")
    elif m := _PROOF_USING_RE.match(code):
        out.append(f"Proof using{m.group(1)}.")
    elif m := _PROOF_WITH_RE.match(code):
        tactic = m.group(1).strip()
        identifiers |= _tokens(tactic)
        out.append(f"Proof with {_parenthesised(tactic)}.")
    else:  # pragma: no cover - the caller handles ``Proof <term>.``, and every other form is above
        return f"unrecognised Proof command: {_short(code)}"
    return ""


def _is_proof_term(code: str) -> bool:
    """``Proof <term>.``: neither ``Proof.`` nor ``Proof using``/``Proof with``."""
    return not (_PROOF_RE.match(code) or _PROOF_USING_RE.match(code) or _PROOF_WITH_RE.match(code)) \
        and bool(_PROOF_TERM_RE.match(code))


def _tail_cheat(tail: str, context_keys: frozenset[tuple[str, ...]], open_names: frozenset[str],
                task_key: tuple[str, tuple[str, ...]] | None) -> tuple[str, bool, str, str]:
    """Why the text after the proof is an attempt (a restart, a hole, a lemma of the task's name), or "" for prose;
    whether it states the task's own statement again (a helper lemma proved first, then the task); the first
    ERROR-class command there (a helper definition), or ""; and the name of a lemma of another name that the text
    goes on with (the file's next lemma, as a model continuing the file writes it), or "".

    Nothing after the proof is sent, so a lemma of another name there cannot get anything accepted: it is dropped
    (a hole or an assumption in its proof is still a cheat). One of the task's own name is not: a whole-file reader
    would take it for the task's lemma (a shadow).
    """
    sentences: list[str] = []
    done = 0
    try:
        for sentence in iter_sentences(tail):
            sentences.append(sentence.code if sentence.kind == "sentence" else "")
            done = sentence.end
    except CoqLexError:
        # The rest does not lex (prose without a final period, a lone quote): read it as one
        # sentence, so that a final ``Admitted`` without its period is still seen.
        sentences.append(" ".join(tail[done:].split()))
    restated = False
    first_code = first_error = next_lemma = ""
    for code in sentences:
        if not code:
            continue
        key = _statement_key(code) if _restates(code, task_key) else None
        if task_key is not None and key is not None and key[1] == task_key[1]:
            restated = True  # what follows is that lemma's proof: only a cheat in it still counts
            continue
        if _END_RE.match(code) or _SAVE_RE.match(code):
            continue  # ``Qed. Qed.``: a stutter
        kind = _outside_kind(code, context_keys, open_names)
        if kind.startswith("cheat:"):
            return kind[6:], restated, "", next_lemma
        if restated or first_code:
            continue
        if kind == "code" and key is not None and task_key is not None and key[0] != task_key[0]:
            next_lemma = next_lemma or key[0]  # the file's next lemma: in its proof only a cheat counts
            continue
        if next_lemma and not (kind == "code" and key is not None):  # (a lemma of the task's name still counts)
            continue
        if kind == "code" and (_REQUIRE_LIKE_RE.match(code) or _IMPORT_RE.match(code) or _SCOPE_RE.match(code)):
            continue  # loads or opens something after the proof, where nothing runs: dropped
        if kind == "code":
            # A restart, a second proof, or a statement of the task's name after the proof: what a whole-file
            # reader could take for the task's lemma (a shadow). Only the verifier's own statement is checked, but
            # it claims one.
            first_code = _short(code)
        elif kind == "helper" or kind.startswith("error:"):
            first_error = first_error or (kind[6:] if kind.startswith("error:") else f"`{_short(code)}` {HELPER_WHY}")
    return first_code, restated, first_error, next_lemma


def _open_blocks(context: str) -> list[tuple[str, str]]:
    try:
        return open_blocks(context)
    except CoqLexError:
        return []


def _control_prefixes(code: str) -> tuple[str, list[str]]:
    """``code`` without its control prefixes (``Time``, ``Fail``, ``Timeout 5``...), and those prefixes."""
    controls: list[str] = []
    while m := _CONTROL_RE.match(code):
        controls.append(" ".join(m.group(1).split()))
        code = code[m.end():]
    return code, controls


def _parenthesised(tactic: str) -> str:
    """``(<tactic>)``, with a space where the parenthesis would make a comment token: ssreflect's ``in H *`` ends
    with ``*``, and ``*)`` closes a comment (Coq then reads ``(rewrite addn0 in H *).`` as a syntax error, so an
    honest mathcomp proof was ERROR)."""
    return f"({' ' if tactic.startswith('*') else ''}{tactic}{' ' if tactic.endswith('*') else ''})"


def _split_selector(code: str) -> tuple[str, str]:
    m = _SELECTOR_RE.match(code)
    if m:
        return " ".join(m.group(1).split()), m.group(2).strip()
    return "", code


def _first_word(code: str) -> str:
    m = _FIRST_WORD_RE.match(code)
    return m.group(0) if m else ""


def _short(code: str, n: int = 60) -> str:
    return code if len(code) <= n else code[: n - 3] + "..."


# Coq 8.16 vernacular commands and control prefixes (from the reference manual's command
# index). A sentence whose first word is one of these is never a tactic.
VERNACULAR = frozenset(
    """
    Abort About Add Admit Admitted Arguments Axiom Axioms Back BackTo Bind Canonical Cd Check Class
    Close CoFixpoint CoInductive Collection Combined Comments Compute Conjecture Conjectures Constraint
    Context Corollary Create Debug Declare Defined Definition Delimit Derive Drop Eval Example Existential
    Existing Export Extract Extraction Fact Fail Fixpoint Focus Function Functional Generalizable Global
    Goal Grab Guarded Hint Hypotheses Hypothesis Identity Implicit Import Include Inductive Infix Info
    Inline Inspect Instance Instances Lemma Let Load Local Locate Ltac Ltac2 Module Monomorphic Next
    Notation Number Obligation Obligations Opaque Open Optimize Parameter Parameters Polymorphic Prenex
    Preterm Primitive Print Private Program Proof Proposition Pwd Qed Quit Record Recursive Redirect
    Register Remark Remove Require Reserved Reset Restart Save Scheme Search SearchAbout SearchHead
    SearchPattern SearchRewrite Section Separate Set Show Solve Strategy String Structure SubClass
    Succeed Tactic Test Theorem Time Timeout Transparent Typeclasses Undelimit Undo Unfocus Unfocused
    Universe Universes Unset Unshelve Validate Variable Variables Variant Chapter Attributes
    Cumulative NonCumulative Coercion Equations Import Instructions Property Abbreviation Enable
    Disable Drop Initial Primitive Sort Syntax Custom Contextual Inductives Plugin Fail Succeed
    From End Grab Proof Goal Lemma Import Export Include Declare Hint Tactic Ltac
    """.split()
)
