"""Stepwise Coq: a tactic session with branching proof states, and Cobblestone's fail-safe localization.

A :class:`CoqTacticSession` is one sandboxed ``coqidetop`` with the task's context
loaded and its statement stated. Proof states form a tree: every successful step
creates a new state id, and any earlier state can be extended again (branching and
backtracking). Coq's document is linear, so the session keeps the path of the
state it last used; moving to another branch goes back (``Edit_at``) to the common
ancestor and replays the other path, a few milliseconds per sentence.

Each step goes through the same whitelist as a whole proof (no vernacular, no
holes), and a finished tactic path is re-checked by the verifier's whole-proof
``check``: tactic mode and whole-proof mode never disagree.
"""

from __future__ import annotations

import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from proofgym.envs.errors import VerifierCrashed
from proofgym.envs.types import ErrorCategory, Goal, Task, Verdict
from proofgym.envs.verifiers.base import Rejected
from proofgym.envs.verifiers.coq.errors import ContextLoadError, categorize
from proofgym.envs.verifiers.coq.idetop import GoalSnapshot, IdeTop
from proofgym.envs.verifiers.coq.lexer import CoqLexError, split_sentences
from proofgym.envs.verifiers.coq.proof import normalize_proof
from proofgym.envs.verifiers.sandbox.warm import DeadlinePassed, ProcessDied
from proofgym.envs.verifiers.tactic_state import StepResult, TacticState

ADMIT = "admit."


@dataclass
class _Node:
    parent: int | None
    sentences: tuple[str, ...]  # the sentences that led here from the parent
    state: TacticState
    ide_state: int | None = None  # the coqidetop state while this node is on the live path


class CoqTacticSession:
    """A branching tactic session on one task (see module docstring). Use as a context manager."""

    def __init__(self, verifier, task: Task) -> None:  # verifier: CoqVerifier (import cycle)
        self.verifier = verifier
        self.task = task
        self._workdir = Path(tempfile.mkdtemp(prefix="proofgym-tactic-"))
        self._ide: IdeTop | None = None
        self._nodes: dict[int, _Node] = {}
        self._live: list[int] = []  # node ids whose ide_state is valid, root first
        self._next_id = 0
        self.steps = 0
        self.step_seconds = 0.0
        root_state = self._start()
        self.root = root_state.state_id

    # -- lifecycle ------------------------------------------------------------------------------
    def _start(self) -> TacticState:
        """(Re)start the prover, load the context, state the statement; returns the root state."""
        if self._ide is not None:
            self._ide.kill()
        cfg = self.verifier.config
        ide = IdeTop(self.verifier.sandbox, self._workdir, binary=cfg.coqidetop, args=self.verifier.coq_args,
                     env=self.verifier.prover_env())
        self._ide = ide
        try:
            sentences = split_sentences(self.task.context)
        except CoqLexError as exc:
            raise ContextLoadError(f"task context cannot be cut into sentences: {exc}") from None
        base, _ = self.verifier.load_context(ide, ide.root_state, sentences)
        sid, reply = ide.add(self.task.statement, base, timeout_s=60)
        snap, reply2 = ide.goal_snapshot(timeout_s=max(60.0, self.task.timeout_s))
        if sid is None or snap is None:
            raise ContextLoadError(f"task statement fails in Coq: {reply.error or reply2.error}")
        if not self._nodes:
            state = self._make_state(snap)
            self._nodes[state.state_id] = _Node(None, (), state, sid)
        else:
            self._nodes[0].ide_state = sid
            for node in self._nodes.values():
                if node.parent is not None:
                    node.ide_state = None
        self._live = [0]
        return self._nodes[0].state

    def close(self) -> None:
        """Kill the prover and remove the work dir. Idempotent."""
        if self._ide is not None:
            self._ide.kill()
            self._ide = None
        shutil.rmtree(self._workdir, ignore_errors=True)

    def __enter__(self) -> CoqTacticSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- API ------------------------------------------------------------------------------------
    def state(self, state_id: int) -> TacticState:
        return self._node(state_id).state

    def path(self, state_id: int) -> list[str]:
        """The sentences from the statement to ``state_id``."""
        out: list[tuple[str, ...]] = []
        node_id: int | None = state_id
        while node_id is not None:
            node = self._node(node_id)
            out.append(node.sentences)
            node_id = node.parent
        return [s for chunk in reversed(out) for s in chunk]

    def proof_script(self, state_id: int) -> str:
        """A whole proof for ``check``: the path from the statement, then ``Qed.``."""
        return "Proof.\n" + "\n".join(self.path(state_id)) + "\nQed."

    def run(self, tactic: str, state_id: int | None = None, *, timeout_s: float | None = None) -> StepResult:
        """Apply ``tactic`` (one or more proof sentences) at ``state_id`` (default: the root)."""
        start_id = self.root if state_id is None else state_id
        start = self._node(start_id).state
        try:
            sentences = _step_sentences(tactic, self.task)
        except Rejected as exc:
            return StepResult(False, start, "; ".join(exc.reasons), exc.verdict, exc.category, exc.reasons)
        if not sentences:
            return StepResult(False, start, "empty tactic", Verdict.ERROR, ErrorCategory.SYNTAX)
        return self._apply(start_id, sentences, timeout_s or self.task.timeout_s)

    def run_sentences(self, sentences: list[str], state_id: int, *, timeout_s: float | None = None) -> StepResult:
        """Apply already-normalised sentences (from :func:`normalize_proof`) at ``state_id``."""
        return self._apply(state_id, tuple(sentences), timeout_s or self.task.timeout_s)

    # -- internals ------------------------------------------------------------------------------
    def _node(self, state_id: int) -> _Node:
        try:
            return self._nodes[state_id]
        except KeyError:
            raise KeyError(f"unknown state id {state_id}; known: 0..{self._next_id - 1}") from None

    def _make_state(self, snap: GoalSnapshot) -> TacticState:
        # Given-up goals (placeholders of fail-safe localization) do not block "finished";
        # the whole-proof check rejects them anyway.
        finished = not (snap.foreground or snap.background or snap.shelved)
        state = TacticState(self._next_id, snap.foreground, snap.background, len(snap.shelved), finished)
        self._next_id += 1
        return state

    def _goto(self, state_id: int, deadline: float) -> int:
        """Make ``state_id`` the tip of Coq's document; returns its coqidetop state."""
        assert self._ide is not None  # noqa: S101 - internal invariant
        if self._ide.closed:
            self._start()
        chain: list[int] = []
        node_id: int | None = state_id
        while node_id is not None:
            chain.append(node_id)
            node_id = self._nodes[node_id].parent
        chain.reverse()
        common = 0
        while common < len(chain) and common < len(self._live) and chain[common] == self._live[common]:
            common += 1
        anchor = chain[common - 1]
        ide_state = self._nodes[anchor].ide_state
        if ide_state is None:  # a live node always has its coqidetop state
            raise VerifierCrashed(f"the tactic session lost the prover state of node {anchor}")
        if self._live[-1] != anchor:
            self._ide.edit_at(ide_state, timeout_s=max(1.0, deadline - time.monotonic()))
        for node_id in self._live[common:]:
            self._nodes[node_id].ide_state = None
        self._live = self._live[:common]
        for node_id in chain[common:]:  # replay the other branch
            for sentence in self._nodes[node_id].sentences:
                new, reply = self._ide.add(sentence, ide_state, timeout_s=max(1.0, deadline - time.monotonic()))
                if new is None:
                    raise VerifierCrashed(f"replaying a known-good path failed: {reply.error}")
                ide_state = new
            snap, reply = self._ide.goal_snapshot(timeout_s=max(1.0, deadline - time.monotonic()))
            if snap is None:
                raise VerifierCrashed(f"replaying a known-good path failed: {reply.error}")
            self._nodes[node_id].ide_state = ide_state
            self._live.append(node_id)
        return ide_state

    def _apply(self, start_id: int, sentences: tuple[str, ...], timeout_s: float) -> StepResult:
        t0 = time.monotonic()
        deadline = t0 + timeout_s
        start = self._node(start_id).state
        try:
            ide_state = self._goto(start_id, deadline + 60)
            assert self._ide is not None  # noqa: S101
            anchor = ide_state
            snap = None
            for sentence in sentences:
                new, reply = self._ide.add(sentence, ide_state, timeout_s=max(0.05, deadline - time.monotonic()))
                if new is None:
                    self._ide.edit_at(anchor, timeout_s=30)
                    return StepResult(False, start, reply.error, Verdict.ERROR, ErrorCategory.SYNTAX)
                ide_state = new
                snap, reply = self._ide.goal_snapshot(timeout_s=max(0.05, deadline - time.monotonic()))
                if snap is None:
                    error = reply.error or "the tactic left proof mode"
                    self._ide.edit_at(anchor, timeout_s=30)
                    category = categorize(error)
                    if category in (ErrorCategory.SYNTAX, ErrorCategory.TIMEOUT):
                        category = ErrorCategory.LOGIC
                    return StepResult(False, start, error, Verdict.FAIL, category)
        except DeadlinePassed:
            self._restart_after_failure()
            return StepResult(False, start, f"no answer within {timeout_s:.1f}s", Verdict.TIMEOUT,
                              ErrorCategory.TIMEOUT)
        except ProcessDied as exc:
            self._restart_after_failure()
            return StepResult(False, start, f"the prover died ({exc})", Verdict.FAIL, ErrorCategory.RESOURCE)
        finally:
            self.steps += 1
            self.step_seconds += time.monotonic() - t0
        assert snap is not None  # noqa: S101 - sentences is non-empty
        state = self._make_state(snap)
        self._nodes[state.state_id] = _Node(start_id, sentences, state, ide_state)
        self._live.append(state.state_id)
        return StepResult(True, state)

    def _restart_after_failure(self) -> None:
        # An interrupted or dead prover is restarted; states are replayed lazily on the next step.
        self._start()


def _step_sentences(tactic: str, task: Task | None = None) -> tuple[str, ...]:
    """Whitelist and normalise a step; ``Proof.``/``Qed.`` around it are dropped.

    With ``task``, a restated statement or a copy of the context before it is dropped as in
    a whole-proof check. A ``Require`` is refused: resolving it is the whole-proof check's job.
    """
    norm = normalize_proof(tactic, task.statement if task else "", task.context if task else "")
    if norm.requires:
        raise Rejected(Verdict.ERROR, [f"`{r.text}`: a tactic step cannot load a library; the proof may only "
                                      "use the libraries the task's context loads, so remove it"
                                      for r in norm.requires])
    sentences = list(norm.sentences)
    if sentences and sentences[-1] in ("Qed.", "Defined."):
        sentences.pop()
    if sentences and (sentences[0] == "Proof." or sentences[0].startswith("Proof using")):
        sentences.pop(0)
    return tuple(sentences)


# -- fail-safe localization (Cobblestone §2.5) ---------------------------------------------------------

@dataclass(frozen=True)
class Hole:
    """A goal the proof did not prove: where the failing sentence stood, and the goal there."""

    index: int  # position of its ``admit.`` in ``Localization.sentences``
    goal: Goal
    state_id: int  # tactic-session state just before the ``admit.`` (the goal is focused first)
    failed_sentence: str  # "" when the proof was simply missing (bullet-count mismatch, end of proof)
    error: str


@dataclass
class Localization:
    """The verified skeleton of a proof: failing parts replaced by ``admit.`` placeholders."""

    sentences: list[str]  # the proof with placeholders (no Proof./Qed.)
    holes: list[Hole] = field(default_factory=list)
    final_state: int | None = None
    rejected: str = ""  # whitelist rejection (CHEATING/ERROR) of the whole submission

    @property
    def complete(self) -> bool:
        return not self.holes and not self.rejected and self.final_state is not None

    def spliced(self, fills: dict[int, list[str]] | None = None) -> list[str]:
        """The sentences, with ``{ fills[hole.index] }`` in place of those placeholders."""
        fills = fills or {}
        out: list[str] = []
        for i, sentence in enumerate(self.sentences):
            if i in fills:
                out.extend(["{", *fills[i], "}"])
            else:
                out.append(sentence)
        return out

    def script(self, fills: dict[int, list[str]] | None = None) -> str:
        """The whole proof text, with ``fills`` spliced in for placeholders."""
        return "Proof.\n" + "\n".join(self.spliced(fills)) + "\nQed."


_BULLET = re.compile(r"^(-+|\++|\*+)$")


def _block_ends(sentences: list[str]) -> list[int]:
    """For each index, where to resume after a failure there: the next sibling/outer bullet or ``}``."""
    ends = [len(sentences)] * len(sentences)
    stack: list[str] = []  # open bullets and braces, innermost last
    stacks: list[list[str]] = []
    for s in sentences:
        if _BULLET.match(s):
            if s in stack:
                del stack[stack.index(s):]
            stack.append(s)
        elif s.endswith("{"):
            stack.append("{")
        elif s == "}":
            if "{" in stack:
                del stack[len(stack) - 1 - stack[::-1].index("{"):]
        stacks.append(list(stack))
    for i in range(len(sentences)):
        open_ = stacks[i]
        # Innermost enclosing block up to the nearest brace.
        upto = open_[len(open_) - 1 - open_[::-1].index("{"):] if "{" in open_ else open_
        bullets = {b for b in upto if b != "{"}
        has_brace = "{" in open_
        for j in range(i + 1, len(sentences)):
            s = sentences[j]
            if (_BULLET.match(s) and s in bullets) or (s == "}" and has_brace):
                ends[i] = j
                break
    return ends


def localize(session: CoqTacticSession, proof: str, *, at: int | None = None, focus: bool = False,
             max_steps: int = 2000) -> Localization:
    """Step ``proof`` sentence by sentence from state ``at`` (default root), admitting failures.

    On a failing sentence the focused goal is recorded as a :class:`Hole`, ``admit.``
    takes its place, and stepping resumes at the next sibling or outer bullet (or
    closing brace), so outer bullets are never swallowed. Bullet-count mismatches are
    repaired: a bullet that arrives while the previous block still has goals admits
    them first; a bullet with no goal left to focus is skipped with its block; goals
    left at the end are admitted (with the bullets they need).

    With ``focus=True`` the proof is for the goal focused by a ``{`` at ``at`` (a
    sub-proof for a hole): it is complete when a closing ``}`` would be accepted, and
    ``final_state`` is the state just before that ``}``.
    """
    try:
        sentences = list(_step_sentences(proof, session.task))
    except Rejected as exc:
        return Localization([], rejected=f"{exc.verdict.value}: {'; '.join(exc.reasons)}")
    run = _Localizing(session, session.state(session.root if at is None else at), focus)
    run.step(sentences, max_steps)
    run.close(sentences)
    return Localization(run.out, run.holes, run.state.state_id if run.done() else None)


@dataclass
class _Localizing:
    """One :func:`localize` run: the sentences kept (``admit.`` in place of the failing ones), the holes, the state."""

    session: CoqTacticSession
    state: TacticState
    focus: bool
    out: list[str] = field(default_factory=list)
    holes: list[Hole] = field(default_factory=list)

    def admit_focused(self, failed: str, error: str) -> None:
        """Admit every goal left (each one a hole that ``failed`` with ``error``)."""
        for _ in range(len(self.state.goals)):
            goal = self.state.goals[0]
            result = self.session.run_sentences([ADMIT], self.state.state_id)
            if not result.ok:
                raise VerifierCrashed(f"admit failed during localization: {result.error}")
            self.holes.append(Hole(len(self.out), goal, self.state.state_id, failed, error))
            self.out.append(ADMIT)
            self.state = result.state

    def step(self, sentences: list[str], max_steps: int) -> None:
        """Run ``sentences``, admitting a failing one's goals and resuming at its block's end."""
        ends = _block_ends(sentences)
        i = 0
        steps = 0
        while i < len(sentences) and steps < max_steps:
            steps += 1
            sentence = sentences[i]
            result = self.session.run_sentences([sentence], self.state.state_id)
            if result.ok:
                self.out.append(sentence)
                self.state = result.state
                i += 1
                continue
            is_structure = bool(_BULLET.match(sentence)) or sentence == "}" or sentence.endswith("{")
            if is_structure and self.state.goals:
                # The previous block is unfinished: admit what is left of it, then retry the bullet.
                self.admit_focused("", result.error)
                continue
            if is_structure:
                # Nothing left for this bullet (more bullets than goals): skip it and its block.
                i = ends[i] if ends[i] > i else i + 1
                continue
            self.admit_focused(sentence, result.error)
            i = ends[i]

    def done(self) -> bool:
        if not self.focus:
            return self.state.finished
        return not self.state.goals and self.session.run_sentences(["}"], self.state.state_id).ok

    def close(self, sentences: list[str]) -> None:
        """Goals left at the end: focus them with bullets of a fresh kind and admit them."""
        guard = 0
        while not self.done() and guard < 100:
            guard += 1
            if self.state.goals:
                self.admit_focused("", "goals left at the end of the proof")
                continue
            closed = False
            closers = () if self.focus else ("}",)
            for structure in (*closers, *sorted({s for s in sentences if _BULLET.match(s)} | {"-", "+", "*"},
                                                key=len)):
                result = self.session.run_sentences([structure], self.state.state_id)
                if result.ok:
                    self.out.append(structure)
                    self.state = result.state
                    closed = True
                    break
            if not closed:
                break
