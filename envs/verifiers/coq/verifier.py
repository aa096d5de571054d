"""The Coq verifier: warm ``coqidetop`` sessions, whitelisting, and an independent kernel audit.

How a check runs (see the README's "Coq verifier" section for the why):

1. The submission is validated (size, text) and normalised by
   :func:`~proofgym.envs.verifiers.coq.proof.normalize_proof`: proof-mode
   sentences only, every tactic parenthesised so Coq's parser must agree with our
   cut. Vernacular, holes and restarts are ``CHEATING`` before any prover runs;
   honest slips around the proof (a repeated statement, prose, a query) are normalised,
   or ``ERROR`` with what to change (:mod:`.classes` gives each command its class). A
   ``Require`` is resolved here (:meth:`CoqVerifier._prepare`): judged by what it brings.
2. A sandboxed ``coqidetop`` per context has the context loaded once. Each
   attempt goes back to that state (``Edit_at``), states the task's statement
   itself, and steps the submission sentence by sentence under a deadline.
   Roughly a millisecond per sentence instead of a whole-file ``coqc``.
3. After ``Qed``: ``Print Assumptions`` must list no axiom outside the allow-list
   (the task's ``allowed_axioms``, else the axioms its reference proof needs),
   compared by fully qualified name (a shorter name in a task's list only means
   the one axiom of the environment that it names unambiguously),
   and the proof must not refer to the original lemma or anything of the original
   file (``metadata.qualid``), which a ``Require`` in the context can leak.
4. Audit (always when the proof uses the VM/native compiler, otherwise on a
   configurable sample): a fresh sandboxed ``coqc`` compiles context + statement +
   proof as its own file (Selene's isolation), Coq's own sentence cut from
   ``coqc -time`` must match ours, and ``coqchk -norec`` re-checks the kernel
   terms and lists the axioms, which must be those of the context alone.
"""

from __future__ import annotations

import functools
import hashlib
import re
import shutil
import subprocess
import tempfile
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from proofgym.envs.errors import InvalidSubmission, ProverNotFound, TaskFormatError, VerifierCrashed
from proofgym.envs.systems import COQ
from proofgym.envs.types import CheckResult, ErrorCategory, Goal, Task, Verdict
from proofgym.envs.verifiers.base import ProverConfig, ProverVerifier, Rejected, died_under_proof
from proofgym.envs.verifiers.coq import isolation
from proofgym.envs.verifiers.coq.errors import ContextLoadError, categorize
from proofgym.envs.verifiers.coq.idetop import MESSAGE_BYTES, IdeTop, Reply
from proofgym.envs.verifiers.coq.lexer import (
    CoqLexError,
    Sentence,
    command_head,
    open_blocks,
    split_sentences,
    update_blocks,
)
from proofgym.envs.verifiers.coq.proof import STATEMENT_RE, NormalizedProof, normalize_proof
from proofgym.envs.verifiers.coq.tactic import CoqTacticSession, Localization, localize
from proofgym.envs.verifiers.sandbox import Sandbox, SandboxLimits
from proofgym.envs.verifiers.sandbox.warm import DeadlinePassed, ProcessDied

HAMMER_LIBEXEC = "/usr/libexec/coq-hammer"
#: Loads CoqHammer's reconstruction tactics (sauto, ...) and the hammer itself; pass as ``prelude``.
HAMMER_PRELUDE = "From Hammer Require Import Tactics Hammer."

#: Modules whose "axioms" are kernel primitives (``Primitive``: the kernel computes them). Allowed like any axiom:
#: by a task's list, or because its reference proof needs them, always by full name. ``Uint63``/``Sint63`` are not
#: here: what they declare (``Uint63.add_spec``...) are the library's own axioms, its specification of the
#: primitives, and are named as axioms.
PRIMITIVE_MODULES = ("PrimInt63", "PrimFloat", "PArray", "PrimString")


@dataclass(frozen=True)
class CoqConfig(ProverConfig):
    """Options of :class:`CoqVerifier`."""

    coqidetop: str = "coqidetop.opt"
    coqc: str = "coqc"
    coqchk: str = "coqchk"
    extra_args: tuple[str, ...] = ()  # e.g. ("-Q", "/path/to/lib", "Lib"); the path is bound read-only
    audit: str = "sample"  # "always" | "sample" | "never"; VM/native proofs are always audited
    audit_rate: float = 0.05
    max_sessions: int = 4  # warm coqidetop processes kept per verifier (LRU)
    context_timeout_s: float = 600.0
    max_session_rss: int = 2 * 1024**3  # a warm session above this is restarted after the check
    allowed_axioms: tuple[str, ...] = ()  # allowed for every task, on top of each task's own list
    # Trusted text loaded before every task's context, e.g. HAMMER_PRELUDE for CoqHammer's tactics.
    prelude: str = ""
    limits: SandboxLimits = field(default_factory=SandboxLimits)
    use_bwrap: bool | None = None  # None: use bubblewrap when it works here
    seed: int = 0
    # Selene's isolation: a cold session loads the context's prefix compiled once into a .vo under
    # isolation_dir (default $PROOFGYM_CACHE/coq-isolation) instead of replaying it; see coq/isolation.py.
    isolation_cache: bool = True
    isolation_dir: str = ""
    # What a task's timeout_s counts (the README's TIMEOUT policy): "wall" (default), wall-clock seconds of
    # stepping the proof; "cpu", the prover's CPU seconds for it (a budget that does not move when the machine
    # is busy), with a wall-clock backstop at wall_backstop * timeout_s for a prover that waits without computing.
    timeout_clock: str = "wall"  # with the backstop (ProverConfig.wall_backstop): the checks' Budget
    # Debian's Coq cannot compile native code (its Nativevalues interface is not installed), so an honest
    # `native_compute` failed ("Native compiler exited with status 2") for an environmental reason. True runs
    # coqidetop and coqc with `-native-compiler no`: `native_compute` then falls back to `vm_compute`, Coq's own
    # documented fallback. False (an install with a working native compiler) passes nothing.
    native_compute_fallback: bool = True

    def timeout_clock_of(self) -> str:
        return self.timeout_clock


@dataclass
class _Session:
    context: str
    ide: IdeTop
    base: int  # state after the context
    loaded: set[str]
    workdir: Path
    n_context_sentences: int


@dataclass(frozen=True)
class _Proved:
    """Where a proof Coq accepted ended, for the integrity checks of its OK (not a verdict: the verdict is the
    :class:`CheckResult` beside it)."""

    state: int  # the state after its Qed
    loaded: frozenset[str] = frozenset()  # libraries the proof loaded itself (its Requires)


#: What running a proof gives: Coq's verdict, and where the proof ended when that verdict is OK.
_Run = tuple[CheckResult, _Proved | None]


@dataclass(frozen=True)
class _Clock:
    """One check's budget: the wall-clock deadline, and the prover's CPU seconds not to pass (the CPU clock)."""

    ide: IdeTop
    deadline: float
    cpu_until: float | None

    def left(self) -> float:
        return max(0.05, self.deadline - time.monotonic())

    def expired(self) -> None:
        if time.monotonic() > self.deadline:
            raise DeadlinePassed("deadline")
        if self.cpu_until is not None and self.ide.cpu_s() > self.cpu_until:
            raise DeadlinePassed("past the CPU budget")


def _verdict(verdict: Verdict, reasons: Iterable[str] = (), messages: Iterable[str] = (), goals: Iterable[Goal] = (),
             category: ErrorCategory = ErrorCategory.NONE) -> _Run:
    """A verdict coqidetop reached on a proof that did not end accepted."""
    return CheckResult(verdict, tuple(reasons), tuple(messages), tuple(goals), category, backend="coqidetop"), None


def _reference_key(task: Task) -> str:
    """What a task's computed allow-list depends on: its context, statement and reference proof (two versions of a
    task can share an id, and one's allow-list must not admit the axioms of the other's reference)."""
    return hashlib.sha256(repr((task.id, task.context, task.statement, task.reference_proof)).encode(
        "utf-8", "surrogatepass")).hexdigest()


def lemma_name(statement: str) -> str:
    """The name the statement declares (``Unnamed_thm`` for ``Goal``)."""
    m = STATEMENT_RE.match(statement)
    if not m:
        raise TaskFormatError(
            f"statement must start with Lemma/Theorem/Fact/Remark/Corollary/Proposition/Example/Goal: "
            f"{statement[:60]!r}"
        )
    return "Unnamed_thm" if m.group(1) == "Goal" else m.group(2)


def prover_version(coqc: str = "coqc") -> str:
    """``8.16.1`` for Debian's Coq; raises :class:`ProverNotFound` when coqc is missing."""
    path = shutil.which(coqc)
    if path is None:
        raise ProverNotFound(f"{coqc} not found; {COQ.install_hint}")
    out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
    m = re.search(r"version\s+(\S+)", out)
    return m.group(1) if m else out.strip()


def parse_assumptions(text: str) -> tuple[list[str], list[str]]:
    """Parse ``Print Assumptions`` output into (axiom names, other findings).

    Section variables are the task's own hypotheses and are not reported.
    """
    if "Closed under the global context" in text:
        return [], []
    axioms: list[str] = []
    other: list[str] = []
    header = ""
    for line in text.splitlines():
        if not line.strip():
            continue
        if not line[0].isspace() and line.rstrip().endswith(":") and " : " not in line:
            header = line.strip().rstrip(":")
            continue
        if line[0].isspace():
            continue  # continuation of a type
        name = line.split(" : ", 1)[0].strip() if " : " in line else line.strip()
        if header == "Section Variables":
            continue
        if header == "Axioms":
            if name:
                axioms.append(name)
        else:
            other.append(f"{header}: {line.strip()}" if header else line.strip())
    return axioms, other


class CoqVerifier(ProverVerifier):
    """Checks Coq proofs; see the module docstring. Use as a context manager.

    Example:
        >>> with CoqVerifier() as v:  # doctest: +SKIP
        ...     v.check(task, "Proof. auto. Qed.").verdict
        <Verdict.OK: 'OK'>
    """

    system = "coq"
    config_class = CoqConfig
    config: CoqConfig

    def __init__(self, config: CoqConfig | None = None, **overrides: object) -> None:
        super().__init__(config, **overrides)
        cfg = self.config
        for tool in (cfg.coqidetop, cfg.coqc):
            if shutil.which(tool) is None:
                raise ProverNotFound(f"{tool} not found; {COQ.install_hint}")
        self.version = prover_version(cfg.coqc)
        ro = [a for a in cfg.extra_args if a.startswith("/")]
        iso_dir = (Path(cfg.isolation_dir) if cfg.isolation_dir else isolation.default_directory()) \
            if cfg.isolation_cache else None
        if iso_dir is not None:
            iso_dir.mkdir(parents=True, exist_ok=True)
            ro.append(str(iso_dir.resolve()))
        self.sandbox = Sandbox(cfg.limits, use_bwrap=cfg.use_bwrap, ro_binds=ro)
        #: What coqidetop and coqc are started with (coqchk takes the part of it it knows: checker_args).
        self.coq_args = cfg.extra_args + (("-native-compiler", "no") if cfg.native_compute_fallback else ())
        self.isolation = None if iso_dir is None else isolation.IsolationCache(
            iso_dir.resolve(), coqc=cfg.coqc, coq_version=self.version, args=self.coq_args, sandbox=self.sandbox,
            env=self.prover_env(), build_timeout_s=cfg.context_timeout_s)
        self._root = Path(tempfile.mkdtemp(prefix="proofgym-coq-"))
        self._sessions: OrderedDict[str, _Session] = OrderedDict()
        self._replay = False  # this check runs on replayed sessions only (see _check)
        self._allowed_cache: dict[str, frozenset[str]] = {}
        self._baseline_cache: dict[str, tuple[frozenset[str], frozenset[str]]] = {}
        self._oks_per_context: dict[str, int] = {}
        self.stats.update({"sessions_started": 0, "audits": 0, "session_reuse": 0})

    # -- lifecycle ----------------------------------------------------------------------------
    def _shutdown(self) -> None:
        with self._lock:
            for session in self._sessions.values():
                session.ide.kill()
            self._sessions.clear()
        shutil.rmtree(self._root, ignore_errors=True)

    # -- public API ---------------------------------------------------------------------------
    def open(self, task: Task) -> CoqTacticSession:
        """A branching tactic session on ``task`` (its own prover process): see :mod:`.tactic`."""
        self.require_system(task)
        return CoqTacticSession(self, self._with_prelude(task))

    def allowed_axioms(self, task: Task) -> frozenset[str]:
        """The axioms an OK proof of ``task`` may use: its ``allowed_axioms``, else what its reference needs."""
        with self._lock:
            self.ensure_open()
            return self._allowed_axioms(task)

    def context_loads_library(self, task: Task, library: str) -> bool:
        """Whether ``task``'s context (after the prelude) loads ``library``, as Coq's ``Locate Library`` says
        in the warm session of that context (a suite builder refuses a task that can reach its original file)."""
        with self._lock:
            self.ensure_open()
            session = self._session(self._with_prelude(task).context)
            return _locate_library(session.ide, library, session.base)[1]

    def localize(self, task: Task, proof: str) -> Localization:
        """Cobblestone's fail-safe localization of ``proof`` (see :func:`.tactic.localize`)."""
        with self.open(task) as session:
            return localize(session, proof)

    # -- internals ----------------------------------------------------------------------------
    def _with_prelude(self, task: Task) -> Task:
        if not self.config.prelude:
            return task
        return replace(task, context=self.config.prelude.rstrip() + "\n" + task.context)

    def _check(self, task: Task, proof: str, audit: bool | None) -> CheckResult:
        task = self._with_prelude(task)
        normalized = self._prepare(task, proof)  # a Rejected is the verdict (ProverVerifier._screen_and_check)
        # A context loaded from the isolation cache names its constants after the cache's module, so a check
        # whose statement or proof writes a `Top.` name runs on a replayed session, as without the cache
        # (red team round 4: `exact Top.f1` was FAIL with the cache and OK without).
        self._replay = self.isolation is not None and _NAMES_TOP.search(task.statement + "\n" + proof) is not None
        try:
            return self._checked(task, normalized, audit)
        finally:
            self._replay = False

    def _checked(self, task: Task, normalized: NormalizedProof, audit: bool | None) -> CheckResult:
        name = lemma_name(task.statement)
        notes = tuple(f"normalised: {n}" for n in normalized.notes)

        result, proved = self._run_attempt(task, normalized)
        if proved is None:
            return replace(result, messages=notes + result.messages)
        # Integrity of an OK.
        reasons, unresolved = self._integrity(task, name, proved)
        if reasons:
            return CheckResult(Verdict.CHEATING, tuple(reasons), result.messages,
                               error_category=ErrorCategory.CHEATING, backend="coqidetop")
        if unresolved:  # fail closed without a reason to call it a cheat: no reward, never -1
            return CheckResult(Verdict.ERROR, tuple(unresolved), result.messages,
                               error_category=ErrorCategory.UNDEFINED, backend="coqidetop")
        do_audit = self.audit_due(audit, forced=normalized.uses_vm)  # VM/native proofs: always audited
        if do_audit:
            audit_result = self._audit(task, normalized)
            if audit_result is not None:
                return audit_result
        return CheckResult(Verdict.OK, (), notes + result.messages, backend="coqidetop", audited=bool(do_audit))

    def _prepare(self, task: Task, proof: str) -> NormalizedProof:
        """Normalise ``proof`` for ``task`` and resolve its ``Require`` sentences.

        A ``Require`` is judged by what it brings, not by its name. A library the context already
        loads is dropped and its ``Import`` runs where the ``Require`` stood (one written before the
        proof: right after the opener). Any other library the load path has is loaded there, inside
        the proof, after Coq elaborated the statement (its notations cannot change how the statement
        reads); what it brings is then checked like the rest of the proof: an axiom shows in ``Print
        Assumptions`` (outside the allow-list: CHEATING), the original lemma in the leak check. A
        ``Require`` that names no library is ``ERROR``.

        Raises:
            Rejected: as :func:`normalize_proof`, and for a ``Require`` that names no library.
        """
        normalized = normalize_proof(proof, task.statement, task.context)
        if not normalized.requires:
            return normalized
        session = self._session(task.context)
        sentences: list[list[str]] = []
        errors: list[str] = []
        notes: list[str] = []
        loads: list[str] = []
        for request in normalized.requires:
            sentences.append([])
            for name in request.names:
                try:
                    full, loaded = _locate_library(session.ide, name, session.base)
                except (ProcessDied, DeadlinePassed) as exc:
                    self._drop(session)
                    raise VerifierCrashed(f"coqidetop failed on Locate Library: {exc}") from None
                if full and request.root and not (full == request.root or full.startswith(request.root + ".")):
                    full, loaded = "", False  # ``From R`` names a library under R, which this is not
                if not full:
                    errors.append(f"`{request.text}`: {name} names no library on the load path: require only "
                                  "installed libraries (by their full name, e.g. `From Coq Require Import Lia.`), "
                                  "or remove it")
                elif loaded:
                    if request.imports:
                        sentences[-1].append(f"Import {full}.")
                    notes.append(f"dropped `{request.text}`: the context already loads {full}")
                else:
                    sentences[-1].append(f"Require {'Import ' if request.imports else ''}{full}.")
                    loads.append(full)
                    notes.append(f"loaded {full} inside the proof, after the statement (its axioms and lemmas are "
                                 "checked like the proof's own)")
        if errors:
            raise Rejected(Verdict.ERROR, errors)
        return normalized.with_library_sentences(sentences, notes, tuple(loads))

    def _session(self, context: str) -> _Session:
        # Replayed sessions (see _check) are kept apart from sessions that may have loaded the isolation cache:
        # their keys carry a prefix no context text starts with, so neither kind extends the other.
        wanted = _REPLAYED + context if self._replay else context
        session = self._sessions.get(wanted)
        if session is not None and not session.ide.closed:
            self._sessions.move_to_end(wanted)
            self.stats["session_reuse"] += 1
            return session
        if session is not None:
            del self._sessions[wanted]
        # Extend a warm session whose context is a prefix of this one (tasks from one file).
        for key, cand in list(self._sessions.items()):
            # Never across kinds: the empty context's key "" is a prefix of every replayed key (red team round 5).
            if cand.ide.closed or not wanted.startswith(key) or key.startswith(_REPLAYED) != self._replay:
                continue
            try:
                extra = split_sentences(wanted[len(key):])
            except CoqLexError:
                break
            if key and not key[-1].isspace() and wanted[len(key):][:1] not in ("", " ", "\n", "\t"):
                continue
            try:
                state, loaded = self.load_context(cand.ide, cand.base, extra)
                del self._sessions[key]
                cand.base = state
                cand.context = context
                cand.loaded |= loaded
                self._sessions[wanted] = cand
                self.stats["session_reuse"] += 1
                return cand
            except ContextLoadError:
                raise
            except (ProcessDied, DeadlinePassed, VerifierCrashed):
                # The warm session died or stalled while extending (load_context words a death as VerifierCrashed):
                # drop it and load the whole context on a fresh coqidetop below, as a death under a proof is
                # retried once. A session can die while idle: e.g. when the thread that started it ends.
                cand.ide.kill()
                del self._sessions[key]
                break
        while len(self._sessions) >= self.config.max_sessions:
            _, old = self._sessions.popitem(last=False)
            old.ide.kill()
        workdir = Path(tempfile.mkdtemp(prefix="s", dir=self._root))
        try:
            sentences = split_sentences(context)
        except CoqLexError as exc:
            raise ContextLoadError(f"task context cannot be cut into sentences: {exc}") from None

        def start(extra: tuple[str, ...] = ()) -> IdeTop:
            try:
                ide = IdeTop(self.sandbox, workdir, binary=self.config.coqidetop, args=self.coq_args + extra,
                             env=self.prover_env(), max_rss_bytes=self.config.max_session_rss)
            except (ProcessDied, DeadlinePassed) as exc:
                raise VerifierCrashed(f"coqidetop failed to start: {exc}") from None
            self.stats["sessions_started"] += 1
            return ide

        isolated = None if self.isolation is None or self._replay else isolation.load_isolated(
            self.isolation, context, self._root, start, self.load_context)
        if isolated is not None:
            ide, state, loaded = isolated
        else:
            ide = start()
            try:
                state, loaded = self.load_context(ide, ide.root_state, sentences)
            except BaseException:
                ide.kill()
                raise
        session = _Session(context, ide, state, loaded, workdir, len(sentences))
        self._sessions[wanted] = session
        return session

    def load_context(self, ide: IdeTop, state: int, sentences: list[Sentence]) -> tuple[int, set[str]]:
        """Add and execute context ``sentences`` after ``state`` in ``ide`` (a session of this verifier's, or a
        tactic session's); returns the state after them and the libraries they loaded.

        Raises:
            ContextLoadError: the context does not parse or fails in Coq (the task is broken).
            VerifierCrashed: the prover timed out or died while loading it.
        """
        deadline = time.monotonic() + self.config.context_timeout_s
        loaded: set[str] = set()
        ide.edit_at(state, timeout_s=60)
        for s in sentences:
            try:
                new, reply = ide.add(s.text, state, timeout_s=max(1.0, deadline - time.monotonic()))
            except DeadlinePassed:
                raise VerifierCrashed("coqidetop timed out while parsing the context") from None
            except ProcessDied as exc:
                raise VerifierCrashed(f"coqidetop died while loading the context: {exc}") from None
            if new is None:
                raise ContextLoadError(f"context does not parse at {s.text[:60]!r}: {reply.error}")
            loaded.update(reply.loaded)
            state = new
        try:
            reply = ide.status(timeout_s=max(1.0, deadline - time.monotonic()))
        except DeadlinePassed:
            raise VerifierCrashed(
                f"loading the context took more than context_timeout_s={self.config.context_timeout_s}s"
            ) from None
        except ProcessDied as exc:
            raise VerifierCrashed(f"coqidetop died while loading the context: {exc}") from None
        if not reply.good:
            raise ContextLoadError(f"context fails in Coq: {reply.error[:300]}")
        loaded.update(reply.loaded)
        return state, loaded

    def _run_attempt(self, task: Task, normalized: NormalizedProof) -> _Run:
        for attempt in range(2):
            session = self._session(task.context)
            try:
                outcome = self._step(session, task, normalized)
                if outcome[0].error_category is ErrorCategory.RESOURCE or session.ide.worn_out():
                    # An OCaml heap that grew to its limit stays grown: later checks would fail with
                    # "Out of memory" for reasons that are not theirs. Start the next check fresh.
                    self._drop(session)
                return outcome
            except ProcessDied as exc:  # retried once on a fresh coqidetop (the policy: died_under_proof)
                self._drop(session)
                if attempt == 1:
                    return died_under_proof("coqidetop exited", backend="coqidetop", messages=[str(exc)]), None
            except DeadlinePassed as exc:
                # An interrupted computation may leave a grown heap or half-updated state behind.
                self._drop(session)
                budget = (f"{task.timeout_s} CPU seconds of the prover" if "CPU" in str(exc) else
                          f"the wall-clock backstop of {self.config.wall_backstop:g} x timeout_s"
                          if self.config.timeout_clock == "cpu" else f"timeout_s={task.timeout_s}")
                return _verdict(Verdict.TIMEOUT, [f"no verdict within {budget}"], category=ErrorCategory.TIMEOUT)
        raise AssertionError("unreachable")  # pragma: no cover

    def prover_env(self) -> dict[str, str]:
        """The environment of every Coq process this verifier starts (CoqHammer's ATP drivers, htimeout
        and predict, live outside PATH on Debian)."""
        return {"PATH": f"{HAMMER_LIBEXEC}:/usr/local/bin:/usr/bin:/bin"}

    def _drop(self, session: _Session) -> None:
        session.ide.kill()
        for key, s in list(self._sessions.items()):
            if s is session:
                del self._sessions[key]

    def _step(self, session: _Session, task: Task, normalized: NormalizedProof) -> _Run:
        ide = session.ide
        cpu = self.config.timeout_clock == "cpu"
        deadline = time.monotonic() + self.budget.wall_s(task.timeout_s)
        # The CPU budget counts the prover's CPU from here: the statement and the proof, as the wall clock did.
        cpu_until = ide.cpu_s() + task.timeout_s if cpu else None
        clock = _Clock(ide, deadline, cpu_until)
        left, expired = clock.left, clock.expired

        ide.edit_at(session.base, timeout_s=30)
        state, reply = ide.add(task.statement, session.base, timeout_s=left(), cpu_until=cpu_until)
        if state is None:
            raise ContextLoadError(f"task statement does not parse: {reply.error}")
        goals, reply = ide.goals(timeout_s=left(), cpu_until=cpu_until)
        if goals is None:
            raise ContextLoadError(f"task statement fails in Coq: {reply.error or 'not in proof mode'}")
        expired()
        last_goals = goals
        loaded: set[str] = set()  # libraries the proof's own Requires load (with what they load in turn)
        for index, sentence in enumerate(normalized.sentences):
            new, reply = ide.add(sentence, state, timeout_s=left(), cpu_until=cpu_until)
            if sentence.startswith(("Import ", "Require ")):
                # Only the verifier writes a bare Import or Require (tactics are parenthesised). Run it
                # now, so that a module that cannot be imported is reported as such.
                loaded.update(reply.loaded)
                if new is not None:
                    reply = ide.status(timeout_s=left(), cpu_until=cpu_until)
                    loaded.update(reply.loaded)
                if new is None or not reply.good:
                    return _verdict(Verdict.ERROR, [
                        f"`{sentence}` fails: import only modules of installed libraries, or remove it"],
                        [reply.error], last_goals, ErrorCategory.UNDEFINED)
            if new is None:
                return _verdict(Verdict.ERROR, [f"syntax error in sentence {index + 1}: {sentence[:80]}"],
                                [reply.error], last_goals, ErrorCategory.SYNTAX)
            state = new
            is_end = sentence in ("Qed.", "Defined.")
            if is_end:
                reply = ide.status(timeout_s=left(), cpu_until=cpu_until)
                expired()
                if not reply.good:
                    return self._failure(index, sentence, reply, last_goals)
                return (CheckResult(Verdict.OK, messages=tuple(_messages(reply)), backend="coqidetop"),
                        _Proved(state, frozenset(loaded | set(normalized.loads))))
            goals, reply = ide.goals(timeout_s=left(), cpu_until=cpu_until)
            expired()
            if goals is None:
                if reply.good:  # left proof mode without a terminator: cannot happen with the whitelist
                    return _verdict(Verdict.CHEATING, ["the proof left proof mode early"],
                                    category=ErrorCategory.CHEATING)
                return self._failure(index, sentence, reply, last_goals)
            last_goals = goals
        return _verdict(Verdict.FAIL, ["proof did not end"], goals=last_goals, category=ErrorCategory.LOGIC)

    def _failure(self, index: int, sentence: str, reply: Reply, goals: list[Goal]) -> _Run:
        message = reply.error or "; ".join(t for lvl, t in reply.messages if lvl == "error")
        # The verdict comes from where it failed (execution: FAIL), never from the message
        # text, which a proof controls (`fail "Syntax error"`). The category is only a hint.
        category = categorize(message)
        if category in (ErrorCategory.SYNTAX, ErrorCategory.TIMEOUT):
            category = ErrorCategory.LOGIC
        verdict = Verdict.FAIL
        return _verdict(verdict, [f"sentence {index + 1} failed: {sentence[:80]}"], [message], goals, category)

    # -- integrity ----------------------------------------------------------------------------
    def _assumptions(self, session: _Session, state: int, name: str) -> tuple[list[str], list[str]]:
        reply = session.ide.query(f"Print Assumptions {name}.", state, timeout_s=60)
        if not reply.good:
            raise VerifierCrashed(f"Print Assumptions failed: {reply.error}")
        if reply.dropped:  # an axiom could be among the messages not kept: never judged on part of the list
            raise VerifierCrashed(f"Print Assumptions printed more than {MESSAGE_BYTES >> 20} MiB")
        text = "\n".join(t for lvl, t in reply.messages if lvl == "notice")
        return parse_assumptions(text)

    def _allowed_axioms(self, task: Task) -> frozenset[str]:
        """The task's allow-list: its ``allowed_axioms``, else the full names of the axioms its reference needs."""
        explicit = task.metadata.get("allowed_axioms")
        base = frozenset(self.config.allowed_axioms)
        if explicit is not None:
            return base | frozenset(explicit)
        cached = self._allowed_cache.get(_reference_key(task))
        if cached is not None:
            return base | cached
        allowed: frozenset[str] = frozenset()
        try:
            ref = self._prepare(task, task.reference_proof)
            outcome, proved = self._run_attempt(task, ref)
            if proved is not None:
                session = self._session(task.context)
                axioms, _ = self._assumptions(session, proved.state, lemma_name(task.statement))
                # Full names: a short name would also allow any other axiom that shares it.
                fulls = [_full_constant_name(session.ide, a, proved.state) for a in axioms]
                # Kernel primitives and library-declared axioms alike: a primitive the reference needs is allowed
                # by its full name (issue 26: the primitive-integer lemmas were excluded as CHEATING).
                if not all(fulls):  # a name About cannot read (a notation keyword): the environment's list says
                    environment = self._environment_axioms(task)
                    fulls = [f or _resolve_in(a, environment) for a, f in zip(axioms, fulls, strict=True)]
                allowed = frozenset(f for f in fulls if f)
            elif outcome.verdict is Verdict.TIMEOUT or outcome.error_category is ErrorCategory.RESOURCE:
                # Not knowing what the reference needs says nothing against the proof: a harness failure, not kept
                # (an empty list kept here made every later proof by one of its axioms CHEATING: red team round 5).
                raise VerifierCrashed(f"the reference proof of {task.id} did not finish ({'; '.join(outcome.reasons)}),"
                                      " so the axioms it needs (the task's allow-list) are not known; list them in "
                                      "metadata.allowed_axioms")
        except Rejected:
            pass
        self._allowed_cache[_reference_key(task)] = allowed
        return base | allowed

    def _integrity(self, task: Task, name: str, proved: _Proved) -> tuple[list[str], list[str]]:
        """Why the OK proof is CHEATING (an axiom outside the allow-list, a leak), and what the checks could not
        settle (ERROR: an axiom that names nothing the checker can locate)."""
        session = self._session(task.context)
        state = proved.state
        # Everything that queries the submission's state runs first: computing the
        # allow-list may run the reference proof, which moves the session away from it.
        if not proved.loaded and self._environment_is_clean(task):
            # Nothing outside the allow-list exists here to rely on. A proof that loads a library reaches more
            # than the context's environment: its axioms are always read.
            axioms: list[str] = []
            other: list[str] = []
        else:
            axioms, other = self._assumptions(session, state, name)
        # Print Assumptions prints the shortest name that reaches each axiom *here*, which a
        # context can make "classic" for its own axiom: resolve each to its full name.
        fulls = [(ax, _full_constant_name(session.ide, ax, state)) for ax in axioms]
        reasons = [f"unsafe assumption: {o}" for o in other]
        unresolved: list[str] = []
        reasons += self._leak_reasons(task, name, session, state, proved.loaded)
        if fulls:
            allowed = self._allowed_axioms(task)
            env_axioms: list[frozenset[str] | None] = []  # computed once, only when a short name needs it

            def environment() -> frozenset[str] | None:
                if not env_axioms:
                    env_axioms.append(self._environment_axioms(task))
                return env_axioms[0]

            for printed, full in fulls:
                # A name Coq cannot be asked about (``lor``: a keyword of the context's notations) is the axiom of
                # the environment it names unambiguously.
                full = full or _resolve_in(printed, environment())
                if not full:
                    unresolved.append(f"the proof relies on an axiom printed as {printed}, which names no single "
                                      "axiom of the task's environment: the checker cannot tell whether it is "
                                      "allowed (write the proof without it, or report the task)")
                    continue
                why = _disallowed(full, allowed, environment)
                if why:
                    reasons.append(why)
        return reasons, unresolved

    def _environment_axioms(self, task: Task) -> frozenset[str] | None:
        """The full names of every axiom (and primitive) of ``task``'s context, as the warm session names them;
        None when the context does not compile on its own."""
        try:
            context, closings = audit_context(task.context)
            return frozenset(_session_name(a) for a in self._baseline(context, closings)[0])
        except ContextLoadError:
            return None

    def _environment_is_clean(self, task: Task) -> bool:
        """Whether every axiom in the context's environment is allowed for this task.

        ``Print Assumptions`` walks every opaque library proof a term depends on (up to
        0.5 s on Reals). When ``coqchk`` lists no axiom and no unsafe flag in the whole
        environment outside the allow-list, no proof can rely on one, so the query is
        skipped. The environment's summary costs one ``coqc`` + ``coqchk`` of the context,
        cached by content hash; it is computed from the second OK of a context on, so a
        one-off check never pays for it.
        """
        allowed = task.metadata.get("allowed_axioms")
        if allowed is None:
            allowed = self._allowed_cache.get(_reference_key(task))
        if allowed is None:
            return False
        context, closings = audit_context(task.context)
        key = self._baseline_key(context, closings)
        self._oks_per_context[key] = self._oks_per_context.get(key, 0) + 1
        # The summary costs a coqc + coqchk of the context, so it waits for the context's second OK; an isolation
        # cache entry that has it already costs nothing to read, so then from the first OK on.
        if key not in self._baseline_cache and self._oks_per_context[key] < 2 and not (
                self.isolation is not None and ((not closings and self.isolation.has_summary(context))
                                                or self.isolation.has_baseline(context + "\n" + closings + "\n"))):
            return False
        try:
            env_axioms, env_flags = self._baseline(context, closings)
        except ContextLoadError:
            return False
        allowed_all = frozenset(allowed) | frozenset(self.config.allowed_axioms)
        environment = frozenset(_session_name(a) for a in env_axioms)
        return not env_flags and not any(_disallowed(a, allowed_all, lambda: environment) for a in environment)

    def _leak_reasons(self, task: Task, name: str, session: _Session, state: int,
                      proof_loaded: frozenset[str] = frozenset()) -> list[str]:
        """The proof term must not use the original lemma, or anything of its original file.

        The check reads the *proof term* (``Print``), not the proof text, so hint
        databases, ``autorewrite`` and Ltac that use a lemma without naming it are
        caught too; ``abstract`` sub-proofs are followed. Each candidate name is
        resolved with ``Locate`` in the proof's own state.
        """
        qualid, module = _original(task, name, session, state, proof_loaded)
        reachable = session.loaded | proof_loaded  # the proof's own Requires count: what they load leaks as well
        original_loaded = bool(module) and module in reachable
        after = _defined_at_or_after(qualid) if original_loaded else None
        ide = session.ide
        reasons: set[str] = set()
        me = ".".join(["Top", *(n for _, n in open_blocks(task.context)), name])  # the lemma's own full name
        # Fast path: a leak needs something to leak. When the original library is not
        # loaded, none of its constants exist here; without a qualid, a same-named lemma
        # must exist. Both are decided without reading the (possibly huge) proof term.
        if not original_loaded and (qualid or all(full == me for full in _locate_all(ide, name, state))):
            return []
        # The term is read after a trusted `Set Printing All.`: no notation or scope the proof
        # opened can hide a constant's name.
        printing_all, reply = ide.add("Set Printing All.", state, timeout_s=30)
        if printing_all is None or not ide.status(timeout_s=30).good:
            raise VerifierCrashed(f"coqidetop refused `Set Printing All.`: {reply.error}")
        state = printing_all
        seen_consts = {me}
        to_print = [name]
        idents: set[str] = set()
        while to_print:
            const = to_print.pop()
            reply = ide.query(f"Print {const}.", state, timeout_s=60)
            if not reply.good:
                return [f"cannot read the proof term of {const} to audit it: {reply.error[:100]}"]
            if reply.dropped:
                return [f"the proof term of {const} prints more than {MESSAGE_BYTES >> 20} MiB; too large to audit "
                        "for leaks"]
            body = "\n".join(t for lvl, t in reply.messages if lvl == "notice")
            body = body.split("\n     : ", 1)[0]  # the term, not its type (which is the task's statement)
            found = set(_TERM_IDENT_RE.findall(_strip_strings(body)))
            if len(idents | found) > MAX_TERM_IDENTS:
                return [f"proof term names more than {MAX_TERM_IDENTS} constants; too large to audit for leaks"]
            for ident in sorted(found - idents):
                if not original_loaded and ident.split(".")[-1] != name and "_subproof" not in ident:
                    continue
                for full in _locate(ide, ident, state):
                    if full == me:
                        continue
                    if full.startswith(f"{me}_subproof") and full not in seen_consts:
                        seen_consts.add(full)
                        to_print.append(full.split(".", 1)[1])
                    elif qualid and full == qualid:
                        reasons.add(f"uses the original lemma {full}")
                    elif original_loaded and full.startswith(module + ".") and (
                            after is None or full.split(".")[-1] in after):
                        reasons.add(f"uses {full}, defined at or after the target in {module}")
                    elif not qualid and full.split(".")[-1] == name:
                        reasons.add(f"uses {full}, a lemma with the target's name")
            idents |= found
        return sorted(reasons)

    # -- audit ----------------------------------------------------------------------------------
    def _audit(self, task: Task, normalized: NormalizedProof) -> CheckResult | None:
        """Independent re-check with ``coqc`` + ``coqchk``. None when it agrees with OK."""
        self.stats["audits"] += 1
        if shutil.which(self.config.coqchk) is None:
            raise ProverNotFound(f"{self.config.coqchk} not found; {COQ.install_hint}")
        context, closings = audit_context(task.context)
        head = context + ("" if context.endswith("\n") or not context else "\n") + task.statement + "\n"
        body = "\n".join(normalized.sentences)
        source = head + body + "\n" + closings + "\n"
        result = self._compile_and_check(source, task.timeout_s * 3 + 60)
        if result is None:
            return CheckResult(Verdict.TIMEOUT, ("audit: coqc/coqchk ran past the deadline",), backend="coqc")
        rc, out, chk_rc, chk_out = result
        if rc != 0:
            return CheckResult(Verdict.FAIL, ("audit: coqc rejects the proof that coqidetop accepted",),
                               (out[-2000:],), error_category=ErrorCategory.LOGIC, backend="coqc", audited=True)
        # Coq's own cut of the proof region must be ours.
        if not _cut_found(_coqc_cuts(out), source, len(head), len(head) + len(body) + 1, len(normalized.sentences)):
            return CheckResult(Verdict.CHEATING, ("audit: Coq's parser cut the proof differently from the checker",),
                               error_category=ErrorCategory.CHEATING, backend="coqc", audited=True)
        if chk_rc != 0:
            return CheckResult(Verdict.CHEATING, ("audit: coqchk rejects the compiled proof (kernel disagreement)",),
                               (chk_out[-2000:],), error_category=ErrorCategory.CHEATING, backend="coqchk",
                               audited=True)
        # The submission file's own axioms must be the ones its (trusted) context declares, and no
        # unsafe flag (type-in-type, unguarded fixpoint, assumed positivity) may name the lemma.
        # Library axioms come from the context's Requires, which a proof cannot change; which of
        # them the proof *uses* was decided by Print Assumptions.
        axioms, flags = _parse_coqchk(chk_out)
        declared = _declared_axioms(context)
        own = "PG.ProofgymSubmission."
        new = sorted(a for a in axioms if a.startswith(own) and a.split(".")[-1] not in declared)
        name = lemma_name(task.statement)
        bad_flags = sorted(f for f in flags if re.search(rf"{re.escape(own)}(?:\S+\.)?{re.escape(name)}"
                                                          rf"(?:_subproof\w*)?\b", f))
        if new or bad_flags:
            reasons = [f"audit: coqchk lists axiom {a}" for a in new] + [f"audit: coqchk: {f}" for f in bad_flags]
            return CheckResult(Verdict.CHEATING, tuple(reasons), error_category=ErrorCategory.CHEATING,
                               backend="coqchk", audited=True)
        return None

    def audit_references(self, tasks: Sequence[Task]) -> dict[str, CheckResult | None]:
        """The kernel audit (``coqc`` + ``coqchk``) of each task's reference proof, one compile per file where it can.

        For suite validation. Tasks cut from one source file, each context the file up to its lemma, are audited
        together: the file up to the last of them, each one's reference in its place as the checker sends it,
        compiled once and checked by ``coqchk`` once, instead of one compile of the file's prefix per task (a
        library's 360 tasks repeat 20-28 MB of prefixes where their files' longest prefixes are about 1 MB).
        What that one run cannot settle for all of them (a compile error, a timeout, a proof whose cut it cannot
        find, any axiom or unsafe flag of the file's own) is settled task by task, by the audit a single check
        gets: the shared run never decides against a task, and never for one it cannot locate.

        Returns, per task id, None where the audit agrees with OK, else the audit's verdict.
        """
        with self._lock:
            self.ensure_open()
            out: dict[str, CheckResult | None] = {}
            for chain in _file_chains([self._with_prelude(t) for t in tasks]):
                if len(chain) > 1 and self._audit_chain(chain):
                    out.update((task.id, None) for task, _ in chain)
                    continue
                for task, _ in chain:
                    normalized = self._normalized_reference(task)
                    out[task.id] = normalized if isinstance(normalized, CheckResult) else self._audit(task, normalized)
            return out

    def _normalized_reference(self, task: Task) -> NormalizedProof | CheckResult:
        self._replay = self.isolation is not None and _NAMES_TOP.search(task.statement + "\n" + task.reference_proof) \
            is not None  # as in _check: the same session resolves its Requires
        try:
            return self._prepare(task, task.reference_proof)
        except InvalidSubmission as exc:  # the reference audit does not go through check()
            return Rejected.invalid(exc).result()
        except Rejected as exc:
            return exc.result()
        finally:
            self._replay = False

    def _audit_chain(self, chain: list[tuple[Task, int]]) -> bool:
        """Whether one ``coqc`` + ``coqchk`` of the chain's file agrees with OK for every task of it (see
        :meth:`audit_references`); False means "not settled here", never a verdict."""
        text, spans, emitted = "", [], 0
        for task, original_end in chain:
            normalized = self._normalized_reference(task)
            if isinstance(normalized, CheckResult):
                return False
            text += task.context[emitted:]
            if text and not text.endswith("\n"):
                text += "\n"
            last_statement = len(text)
            text += task.statement + "\n"
            body = "\n".join(normalized.sentences)
            spans.append((len(text), len(text) + len(body) + 1, len(normalized.sentences)))
            text += body + "\n"
            emitted = original_end
        edits, closings = _audit_edits(text[:last_statement])
        shifted = []
        for lo, hi, n in spans:
            if any(start < hi and lo < end for start, end, _ in edits):
                return False  # a header rewrite inside a proof: not a file this can read
            delta = sum(len(new) - (end - start) for start, end, new in edits if end <= lo)
            shifted.append((lo + delta, hi + delta, n))
        source = _apply_edits(text[:last_statement], edits) + text[last_statement:] + closings + "\n"
        result = self._compile_and_check(source, sum(task.timeout_s * 3 for task, _ in chain) + 60)
        if result is None or result[0] != 0 or result[2] != 0:
            return False
        _, out, _, chk_out = result
        cuts = _coqc_cuts(out)
        if not all(_cut_found(cuts, source, lo, hi, n) for lo, hi, n in shifted):
            return False
        axioms, flags = _parse_coqchk(chk_out)
        own = "PG.ProofgymSubmission."
        declared = _declared_axioms(text[:last_statement])
        if any(a.startswith(own) and a.split(".")[-1] not in declared for a in axioms) or any(own in f for f in flags):
            return False
        self.stats["audits"] += len(chain)
        self.stats["audit_files"] = self.stats.get("audit_files", 0) + 1
        return True

    def _baseline_key(self, context: str, closings: str) -> str:
        """The in-memory key of a context's environment baseline: its text and the libraries on the load path as they
        are now (one rebuilt in place while the verifier runs is another environment)."""
        libraries = isolation.load_path_libraries(self.config.extra_args)
        return hashlib.sha256(repr((context + closings, libraries)).encode("utf-8", "surrogatepass")).hexdigest()

    def _baseline(self, context: str, closings: str) -> tuple[frozenset[str], frozenset[str]]:
        key = self._baseline_key(context, closings)
        if key not in self._baseline_cache:
            summary = None if self.isolation is None or closings else self.isolation.checker_summary(
                context, self.config.coqchk, self._root)
            if summary is not None:  # the context's cached .vo is that compilation: only coqchk runs
                axioms, flags = _parse_coqchk(summary)
                self._baseline_cache[key] = (frozenset(axioms), frozenset(flags))
                return self._baseline_cache[key]
            source = context + "\n" + closings + "\n"
            out = None if self.isolation is None else self.isolation.stored_baseline(source)
            if out is None:
                result = self._compile_and_check(source, self.config.context_timeout_s)
                if result is None:
                    # Not knowing the environment says nothing against the proof: a harness failure (no reward,
                    # never cached), not a fail-closed CHEATING for a short allow-list name (red team round 5).
                    raise VerifierCrashed(f"the context's standalone compile (coqc + coqchk, for its environment's "
                                          f"axioms) ran past context_timeout_s={self.config.context_timeout_s:g}; "
                                          "retry on a quieter machine or raise context_timeout_s")
                if result[0] != 0 or result[2] != 0:
                    raise ContextLoadError("the task context does not compile on its own with coqc")
                out = result[3]
                if self.isolation is not None:
                    self.isolation.store_baseline(source, out, self._root)
            axioms, flags = _parse_coqchk(out)
            self._baseline_cache[key] = (frozenset(axioms), frozenset(flags))
        return self._baseline_cache[key]

    def _compile_and_check(self, source: str, timeout_s: float) -> tuple[int, str, int, str] | None:
        workdir = Path(tempfile.mkdtemp(prefix="audit", dir=self._root))
        try:
            (workdir / "ProofgymSubmission.v").write_text(source, encoding="utf-8")
            run = self.sandbox.run([self.config.coqc, "-q", "-time", *self.coq_args, "-Q", ".", "PG",
                                    "ProofgymSubmission.v"],
                                   workdir=workdir, timeout_s=timeout_s, env=self.prover_env())
            if run.timed_out:
                return None
            out = run.stdout + run.stderr
            if run.returncode != 0:
                return run.returncode or 1, out, 1, ""
            chk = self.sandbox.run([self.config.coqchk, "-silent", "-o", *isolation.checker_args(self.coq_args),
                                    "-Q", ".", "PG", "-norec",
                                    "PG.ProofgymSubmission"], workdir=workdir, timeout_s=timeout_s)
            if chk.timed_out:
                return None
            return 0, out, chk.returncode if chk.returncode is not None else 1, chk.stdout + chk.stderr
        finally:
            shutil.rmtree(workdir, ignore_errors=True)


_MODULE_HEADER_RE = re.compile(
    r"^((?:#\[[^\]]*\]\s*)*(?:(?:Local|Global)\s+)?Module\s+(?:(?:Import|Export)\s+)?[A-Za-z_][\w']*"
    r"(?:\s*\([^)]*\))*)\s*(?:<:|:(?!=)).*\.$",
    re.S,
)


def _audit_edits(context: str) -> tuple[list[tuple[int, int, str]], str]:
    """What :func:`audit_context` changes in ``context`` (``(start, end, replacement)``, in text order) and the
    ``End``s it appends."""
    blocks: list = []
    headers: dict[int, Sentence] = {}
    for s in split_sentences(context):
        before = len(blocks)
        update_blocks(blocks, command_head(s.code)[0])
        if len(blocks) > before:
            headers[len(blocks) - 1] = s
        for k in list(headers):
            if k >= len(blocks):
                del headers[k]
    edits = []
    for depth in sorted(headers):  # a deeper block opened later: the edits come in text order
        s = headers[depth]
        if blocks[depth].kind != "Module":
            continue
        m = _MODULE_HEADER_RE.match(s.text)
        if m:
            edits.append((s.start, s.start + len(s.text), m.group(1) + "."))
    closings = "".join(f"\nEnd {b.name}." for b in reversed(blocks))
    return edits, closings


def _coqc_cuts(out: str) -> list[tuple[int, int]]:
    """The sentences ``coqc -time`` ran, as ``(start, end)`` offsets; distinct, since it reports some sentences
    twice (scope commands replay at ``Qed``)."""
    return sorted({(int(a), int(b)) for a, b in re.findall(r"^Chars (\d+) - (\d+) ", out, re.M)})


def _cut_found(cuts: list[tuple[int, int]], source: str, lo: int, hi: int, n: int) -> bool:
    """Whether Coq cut ``source[lo:hi]`` into exactly ``n`` sentences (its offsets are characters or bytes)."""
    return any(len([c for c in cuts if a <= c[0] < b]) == n
               for a, b in ((lo, hi), (len(source[:lo].encode()), len(source[:hi].encode()))))


def _file_chains(tasks: Sequence[Task]) -> list[list[tuple[Task, int]]]:
    """Tasks in chains along their files: in a chain, each context is the one before it, that task's statement,
    the whitespace after it and its reference proof, then more of the file. Each task comes with where its
    reference ends in the next task's context (for the last of a chain: unused)."""
    chains: list[list[tuple[Task, int]]] = []
    for task in sorted(tasks, key=lambda t: len(t.context)):
        for chain in chains:
            prev = chain[-1][0]
            rest = task.context[len(prev.context):] if task.context.startswith(prev.context) else ""
            if not rest.startswith(prev.statement):
                continue
            after = rest[len(prev.statement):]
            gap = len(after) - len(after.lstrip())
            if after[gap:].startswith(prev.reference_proof) and prev.reference_proof:
                chain[-1] = (prev, len(prev.context) + len(prev.statement) + gap + len(prev.reference_proof))
                chain.append((task, 0))
                break
        else:
            chains.append([(task, 0)])
    return chains


def audit_context(context: str) -> tuple[str, str]:
    """The context as a standalone file's prefix, and the ``End``s that close what it leaves open.

    A module with a signature (``Module Nat <: NAxiomsSig.``) cannot be closed
    half-way: its signature is checked at ``End``. For the audit its header loses
    the signature, which changes nothing about the lemmas inside it.
    """
    edits, closings = _audit_edits(context)
    return _apply_edits(context, edits), closings


def _apply_edits(text: str, edits: list[tuple[int, int, str]]) -> str:
    pieces, cursor = [], 0
    for start, end, replacement in edits:
        pieces += [text[cursor:start], replacement]
        cursor = end
    return "".join(pieces) + text[cursor:]


MAX_TERM_IDENTS = 20000
_TERM_IDENT_RE = re.compile(r"(?<![\w'.])[A-Za-z_][\w']*(?:\.[A-Za-z_][\w']*)*")


def _strip_strings(text: str) -> str:
    return re.sub(r'"(?:[^"]|"")*"', '""', text)


def _locate(ide: IdeTop, ident: str, state: int, *, follow_aliases: bool = True) -> list[str]:
    """What ``ident`` refers to in ``state``: entries without a "shorter name" note.

    An alias (``Constant Coq.Arith.PeanoNat.Nat.add (alias of Init.Nat.add)``: a module's ``Include``) is the constant
    it names, where that is defined: ``Nat.add`` in a ``lia`` proof term is ``Coq.Init.Nat.add``, not a constant of
    PeanoNat (an honest ``lia`` proof of a PeanoNat lemma was CHEATING as "defined at or after the target").
    """
    reply = ide.query(f"Locate {ident}.", state, timeout_s=30)
    text = "\n".join(t for _, t in reply.messages)
    out: list[str] = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"^(?:Constant|Inductive|Constructor|Notation|Ltac|Module)\s+(\S+)(?:\s+\(alias of (\S+)\))?", line)
        if not m:
            continue
        annotated = i + 1 < len(lines) and "shorter name to refer to it" in lines[i + 1]
        if annotated:
            continue
        if m.group(2) and follow_aliases:
            target = [t for t in _locate(ide, m.group(2), state, follow_aliases=False) if t.endswith(m.group(2))]
            out.extend(target or [m.group(1)])  # unresolved: the alias itself (the stricter reading)
        else:
            out.append(m.group(1))
    return out


_DECL_RE = re.compile(r"^(?:#\[[^\]]*\]\s*)*(?:(?:Local|Global|Polymorphic|Monomorphic)\s+)*"
                      r"(?:Axiom|Axioms|Parameter|Parameters|Conjecture|Conjectures|Hypothesis|Hypotheses|"
                      r"Variable|Variables)\s+(.*)$", re.S)


def _declared_axioms(context: str) -> set[str]:
    """Short names the context declares as axioms/parameters (trusted text, coarse: all identifiers)."""
    names: set[str] = set()
    for s in split_sentences(context):
        m = _DECL_RE.match(s.code)
        if m:
            head = m.group(1).split(":", 1)[0] if "(" not in m.group(1).split(":", 1)[0] else m.group(1)
            names.update(re.findall(r"[A-Za-z_][\w']*", head))
    return names


_DEF_NAME_RE = re.compile(r"^(?:#\[[^\]]*\]\s*)*(?:(?:Local|Global|Polymorphic|Monomorphic|Program)\s+)*"
                          r"(?:Lemma|Theorem|Fact|Remark|Corollary|Proposition|Property|Example|Definition|"
                          r"Fixpoint|CoFixpoint|Inductive|CoInductive|Record|Structure|Class|Instance|Let|"
                          r"Notation|Ltac|Hint\s+\w+)\s+([A-Za-z_][\w']*)")


@functools.lru_cache(maxsize=256)
def _defined_at_or_after(qualid: str) -> frozenset[str] | None:
    """Names the original stdlib file defines at or after ``qualid``'s lemma; None if unknown.

    The rule is "nothing the original file defines after the target"; lemmas before it
    are fair game. Without the source, every name of that library counts (stricter).
    """
    parts = qualid.split(".")
    if len(parts) < 3 or parts[0] != "Coq":
        return None
    try:
        where = subprocess.run(["coqc", "-where"], capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None
    name = parts[-1]
    for cut in range(len(parts) - 1, 1, -1):  # the file is a prefix of the path (modules may follow)
        path = Path(where, "theories", *parts[1:cut]).with_suffix(".v")
        if path.is_file():
            try:
                sentences = split_sentences(path.read_text(encoding="utf-8"))
            except (OSError, CoqLexError):
                return None
            names = [m.group(1) for st in sentences if (m := _DEF_NAME_RE.match(st.code))]
            if name not in names:
                return None
            return frozenset(names[names.index(name):])
    return None


#: How ``coqc`` names the audit file's own constants, and how the warm session names them.
_AUDIT_PREFIX = "PG.ProofgymSubmission."
_SESSION_PREFIX = "Top."


#: A qualified name under the toplevel module, as a statement or proof may write a context's constant.
# ``Top.x``, or the isolation cache's own module name for it (``C<key>.x``, ``PGIso.C<key>.x``; red team round 6:
# only a cached context has that module, so such a proof was OK with the cache and FAIL without it).
_NAMES_TOP = re.compile(r"(?<![\w'.])(?:Top|(?:PGIso\.)?C[0-9a-f]{40})\.")
#: The key prefix of a replayed session in ``CoqVerifier._sessions`` (a NUL: no context text starts with one).
_REPLAYED = "\x00replayed\x00"


def _session_name(full: str) -> str:
    """A ``coqchk`` name of the context's own constant as the warm session (and an allow-list) writes it."""
    return _SESSION_PREFIX + full[len(_AUDIT_PREFIX):] if full.startswith(_AUDIT_PREFIX) else full


def _full_constant_name(ide: IdeTop, printed: str, state: int) -> str:
    """The full name of the constant that ``printed`` refers to in ``state`` ("" when Coq cannot say)."""
    if not re.fullmatch(r"[^\s.]+(?:\.[^\s.]+)*", printed):
        return ""
    reply = ide.query(f"About {printed}.", state, timeout_s=30)
    text = "\n".join(t for _, t in reply.messages)
    found = re.findall(r"Expands to:\s+Constant\s+(\S+)", text)  # the printer may break the line
    # A context loaded from the isolation cache names its constants as the replayed one does (Top.x).
    return isolation.session_name(found[0]) if reply.good and len(found) == 1 else ""


def _disallowed(full: str, allowed: frozenset[str], environment: Callable[[], frozenset[str] | None]) -> str:
    """Why the axiom ``full`` is not allowed by ``allowed``, or "" when it is.

    An entry is a full name, or a shorter one (``classic``, ``Classical_Prop.classic``)
    that may only mean an axiom it names unambiguously: the only axiom of the environment
    (``environment()``: full names, or None when unknown) whose name ends with it.
    """
    if full in allowed:
        return ""
    if _is_primitive(full):
        return f"relies on the kernel primitive {full}, which this task does not allow"  # only by full name
    entries = sorted(e for e in allowed if full.endswith("." + e))
    if not entries:
        return f"relies on axiom {full} outside the allow-list"
    env = environment()
    if env is None:
        return (f"relies on axiom {full}: the allow-list names it only as {entries[0]!r}, and whether that "
                "short name is unique here cannot be decided (the context does not compile on its own)")
    for entry in entries:
        sharing = sorted(a for a in env | {full} if a == entry or a.endswith("." + entry))
        if sharing == [full]:
            return ""
    sharing = sorted(a for a in env | {full} if a.endswith("." + entries[0]))
    return (f"relies on axiom {full}: the allow-list's {entries[0]!r} is ambiguous here "
            f"({', '.join(sharing[:5])}); the task must list the fully qualified name")


def _locate_library(ide: IdeTop, name: str, state: int) -> tuple[str, bool]:
    """(full name, already loaded) of the library ``Require name`` would load; ("", False) if none."""
    if not re.fullmatch(r"[A-Za-z_][\w']*(?:\.[A-Za-z_][\w']*)*", name):
        return "", False
    reply = ide.query(f"Locate Library {name}.", state, timeout_s=30)
    text = " ".join(t for _, t in reply.messages)
    m = re.match(r"\s*(\S+) (has been loaded from|is bound to) file", text)
    if not reply.good or not m:
        return "", False
    return m.group(1), m.group(2) == "has been loaded from"


def _locate_all(ide: IdeTop, ident: str, state: int) -> list[str]:
    """Every object whose name ends in ``ident``, visible or not."""
    reply = ide.query(f"Locate {ident}.", state, timeout_s=30)
    text = "\n".join(t for _, t in reply.messages)
    return re.findall(r"^(?:Constant|Inductive|Constructor|Notation|Ltac|Module)\s+(\S+)", text, re.M)


def _original(task: Task, name: str, session: _Session, state: int,
              proof_loaded: frozenset[str]) -> tuple[str, str]:
    """The original lemma's full name (``metadata.qualid``) and the library of its file, for the leak check.

    Without a qualid, a loaded library lemma with the target's name is taken as the original (or one of a library
    the proof loaded itself). The original file is the longest prefix of the qualid that is a loaded library: a
    lemma inside a module (Lib.File.M.foo) comes from the library Lib.File, not from one named Lib.File.M.
    """
    qualid = str(task.metadata.get("qualid", ""))
    module = qualid.rsplit(".", 1)[0] if "." in qualid else ""
    if not qualid:
        others = [f for f in _locate_all(session.ide, name, state)
                  if f.startswith("Coq.") or any(f.startswith(lib + ".") for lib in proof_loaded)]
        if len(others) == 1:
            qualid = others[0]
            module = qualid.rsplit(".", 1)[0]
    parts = qualid.split(".")
    reachable = session.loaded | proof_loaded
    module = next((lib for k in range(len(parts) - 1, 0, -1) if (lib := ".".join(parts[:k])) in reachable), module)
    return qualid, module


def _messages(reply: Reply) -> list[str]:
    return [t for lvl, t in reply.messages if lvl in ("warning", "error")]


def _resolve_in(printed: str, environment: frozenset[str] | None) -> str:
    """The one axiom of ``environment`` (full names) that the printed name ``printed`` ends with, or ""."""
    if not printed or environment is None:
        return ""
    found = [a for a in environment if a == printed or a.endswith("." + printed)]
    return found[0] if len(found) == 1 else ""


def _is_primitive(name: str) -> bool:
    return any(f"{m}." in name or name.startswith(m) for m in PRIMITIVE_MODULES)


def _parse_coqchk(out: str) -> tuple[set[str], set[str]]:
    """Axioms and unsafe-feature lines from ``coqchk -o``'s context summary."""
    axioms: set[str] = set()
    flags: set[str] = set()
    section = ""
    for line in out.splitlines():
        stripped = line.strip()
        if stripped.startswith("* "):
            section = stripped[2:]
            if ":" in section:
                head, _, rest = section.partition(":")
                section = head.strip()
                rest = rest.strip()
                if rest and rest != "<none>" and section not in ("Axioms", "Theory"):
                    flags.add(f"{section}: {rest}")
            continue
        if not stripped or stripped.startswith("=") or stripped == "CONTEXT SUMMARY":
            continue
        if section == "Axioms":
            axioms.add(stripped)
        elif section and section != "Theory" and stripped != "<none>":
            flags.add(f"{section}: {stripped}")
    return axioms, flags
