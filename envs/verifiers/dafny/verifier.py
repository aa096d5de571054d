"""The Dafny verifier (Debian's Dafny 2.3): a warm DafnyServer, specification anchoring, exact verdicts.

How a check runs (the README's "Dafny verifier" section says why):

0. Every text is normalised first (:func:`~proofgym.envs.verifiers.dafny.lexer.normalize_source`:
   CRLF and lone CR become LF, a BOM is dropped), so the program Dafny checks and the one proofgym
   reads are the same, and a CR-only, CRLF or BOM file gets its LF twin's verdict.
1. The submission (a whole program) is validated and cut into tokens. Cheats that Dafny would not
   report -- ``assume``, attributes whose row in the attribute table says they weaken a check
   (``{:verify false}`` also with a space, ``{:axiom}``, ``{:extern}``...), ``decreases *``,
   ``include`` -- are CHEATING before any prover runs, as is a context declaration that is changed;
   an attribute the table does not know is ERROR ("remove the attribute"), a harmless one
   (``{:verify true}``, ``{:split_here}``, ``{:timeLimit N}``...) is checked with.
2. Dafny's ``symbols`` answer gives every declaration; each one is classified
   (:func:`~proofgym.envs.verifiers.dafny.integrity.classify_declarations`): a method, lemma,
   constructor, function, predicate or iterator without a body is CHEATING unless it is the task's
   own trusted declaration or an abstract member that is an obligation (a trait's, implemented by
   every class that extends it; an abstract module's, given a body where it is refined). What cannot
   be placed in the text is refused (ERROR), never skipped.
3. The program is verified by a sandboxed, warm ``DafnyServer.exe`` (``/verifySnapshots:0`` so
   nothing is reused from an earlier program, ``/timeLimit`` per implementation, an outer kill
   at the task's deadline, z3 pinned to 4.8.5 with ``/z3exe:``, ``/noCheating:1`` so any
   assumption left in the program is checked as an assertion). ``{:axiom}`` marks exactly the
   declarations step 2 allows, so ``/noCheating:1`` stays on for the submission whatever the
   context trusts (only an ``assume`` or a bodyless loop in the task's own context turns it off,
   and then step 2's rules alone hold the submission). The ``cli`` backend runs a fresh ``dafny``
   per check instead (the naive way, kept for audits and benchmarks).
4. Dafny's own view decides the rest: the trace gives the outcome of every Boogie implementation.
   OK needs no error, every outcome ``verified``, the verified ``Impl$$`` implementations paired
   one-to-one with the declarations that have bodies (the ``{:rlimit}`` trap drops one silently),
   unchanged statement headers and kept context (:mod:`~proofgym.envs.verifiers.dafny.integrity`).
5. On every OK candidate, Dafny's Boogie translation (``/noVerify /print``, no prover) is read: no
   bodyless procedure or function outside what step 2 allows, every implementation verified, no
   ``Impl$$`` procedure left without an implementation where there is something to prove.
6. Audit (sampled, or always): the CLI re-checks an OK with ``/trace`` and ``/print``: exit code
   0, the summary ``N verified, 0 errors`` parsed exactly with N equal to the number of
   implementations in Dafny's Boogie translation, each of them ``verified``, no ``time out`` and
   no ``out of resource``.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import math
import os
import re
import shutil
import subprocess
import sysconfig
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from proofgym.envs.errors import ProverNotFound, TaskFormatError, VerifierCrashed
from proofgym.envs.systems import DAFNY
from proofgym.envs.types import CheckResult, ErrorCategory, Task, Verdict
from proofgym.envs.verifiers.base import ProverConfig, ProverVerifier, Rejected, died_under_proof
from proofgym.envs.verifiers.dafny.equiv import LEMMA_NOTE, EquivalenceResult, equivalence_program
from proofgym.envs.verifiers.dafny.integrity import (
    AXIOM_MARK,
    Anchor,
    BoogieView,
    Declarations,
    Symbol,
    banned_constructs,
    boogie_findings,
    boogie_unverified,
    build_anchor,
    check_anchoring,
    classify_declarations,
    expected_implementations,
    impl_matches,
    left_out,
    mark_axioms,
    pair_implementations,
    parse_boogie,
    parse_symbols,
    sanitize,
    trusted_ranges,
)
from proofgym.envs.verifiers.dafny.lexer import DafnyLexError, Token, normalize_source, tokenize
from proofgym.envs.verifiers.dafny.output import DafnyOutput, parse_output, primary_category
from proofgym.envs.verifiers.dafny.server import DafnyServer
from proofgym.envs.verifiers.sandbox import Sandbox, SandboxLimits
from proofgym.envs.verifiers.sandbox.warm import DeadlinePassed, ProcessDied

__all__ = ["DafnyConfig", "DafnyVerifier", "dafny_available", "find_z3"]

logger = logging.getLogger(__name__)

#: The z3 that Dafny 2.3 was tested with; ``pip install z3-solver==4.8.5.0`` ships it as ``bin/z3``.
PINNED_Z3 = "4.8.5"
DAFNY_DIR = "/usr/lib/dafny"
INSTALL_HINT = DAFNY.install_hint  # kept for one release: the hint is the system spec's (envs/systems.py)

_BODYLESS_WARNING_RE = re.compile(r"this (loop|forall statement) has no body")
#: z3's answer when its resource limit (/rlimit) ran out before Boogie's own handshake; Dafny 2.3 then crashes.
_Z3_RLIMIT_HIT = "max. resource limit exceeded"
_TIMED_OUT = object()  # what _translate answers when the translation ran past its deadline


def find_z3(explicit: str = "") -> tuple[str, str]:
    """``(path, version)`` of the z3 to pass with ``/z3exe:``: ``explicit``, ``$PROOFGYM_Z3``, the pinned
    z3-solver's ``bin/z3`` in this environment, else the system's ``z3``.

    Raises:
        ProverNotFound: when no z3 is found.
    """
    candidates = [explicit, os.environ.get("PROOFGYM_Z3", ""),
                  os.path.join(sysconfig.get_path("scripts"), "z3"), shutil.which("z3") or ""]
    found = [os.path.realpath(p) for p in candidates if p and os.path.isfile(p) and os.access(p, os.X_OK)]
    if not found:
        raise ProverNotFound(f"z3 not found; {DAFNY.install_hint}")
    if explicit and found[0] == os.path.realpath(explicit):
        return found[0], _z3_version(found[0])
    pinned = next((p for p in found if _z3_version(p) == PINNED_Z3), None)  # prefer the pinned z3
    path = pinned or found[0]
    return path, _z3_version(path)


@functools.lru_cache(maxsize=8)
def _z3_version(path: str) -> str:
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
    m = re.search(r"version (\S+)", out)
    return m.group(1) if m else ""


@functools.lru_cache(maxsize=4)
def _dafny_version(mono: str, dafny_exe: str) -> str:
    try:
        out = subprocess.run([mono, dafny_exe, "/version"], capture_output=True, text=True, timeout=120).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
    m = re.search(r"Dafny (\d+(?:\.\d+)+)", out)
    return m.group(1) if m else ""


def dafny_available(dafny_dir: str = DAFNY_DIR, mono: str = "mono") -> bool:
    """Whether Dafny 2.3's ``Dafny.exe``/``DafnyServer.exe``, mono and a z3 are installed."""
    if shutil.which(mono) is None:
        return False
    if not all(os.path.isfile(os.path.join(dafny_dir, f)) for f in ("Dafny.exe", "DafnyServer.exe")):
        return False
    try:
        find_z3()
    except ProverNotFound:
        return False
    return True


@dataclass(frozen=True)
class DafnyConfig(ProverConfig):
    """Options of :class:`DafnyVerifier`."""

    backend: str = "server"  # "server": warm DafnyServer; "cli": a fresh dafny per check (the naive way)
    dafny_dir: str = DAFNY_DIR
    mono: str = "mono"
    z3: str = ""  # "" -> find_z3(): $PROOFGYM_Z3, the pinned z3-solver's bin/z3, the system z3
    audit: str = "sample"  # "always" | "sample" | "never": re-check an OK with the CLI and the Boogie translation
    audit_rate: float = 0.05
    no_cheating: bool = True  # /noCheating:1: an assumption that slipped through is checked as an assertion
    max_time_limit_s: int = 120  # cap on /timeLimit (seconds per implementation)
    grace_s: float = 10.0  # the outer kill fires at the task's timeout plus this
    # A deterministic budget (the README's TIMEOUT policy): z3's resource limit per implementation (/rlimit:N,
    # in z3's own units; 0: off, the budget is /timeLimit, wall-clock). With it, the wall-clock limits become a
    # backstop: /timeLimit and the outer kill at wall_backstop * timeout_s.
    rlimit: int = 0  # the backstop is ProverConfig.wall_backstop; the checks' Budget: timeout_clock_of
    restart_every: int = 200  # restart the server after this many checks (bounds its memory and CPU time)
    filename: str = "program.dfy"
    limits: SandboxLimits = field(default_factory=lambda: SandboxLimits(
        memory_bytes=8 * 1024**3, cpu_seconds=3600, max_processes=512))
    use_bwrap: bool | None = None  # None: use bubblewrap when it works here
    seed: int = 0

    def timeout_clock_of(self) -> str:
        """z3's resource units under a resource limit (the wall clock is then a backstop), else wall-clock seconds."""
        return "rlimit" if self.rlimit else "wall"


@dataclass
class _Run:
    """One verification run's raw result (server or CLI)."""

    output: DafnyOutput
    backend: str
    timed_out: bool = False
    crashed: str = ""  # why the run produced no answer
    returncode: int | None = 0
    boogie: str = ""  # the CLI's /print output (Boogie translation), when asked for
    cpu_s: float = 0.0


class DafnyVerifier(ProverVerifier):
    """Checks whole Dafny programs against a task's statement; see the module docstring.

    Example:
        >>> with DafnyVerifier() as v:  # doctest: +SKIP
        ...     v.check(task, program).verdict
        <Verdict.OK: 'OK'>
    """

    system = "dafny"
    config_class = DafnyConfig
    config: DafnyConfig

    def __init__(self, config: DafnyConfig | None = None, **overrides: object) -> None:
        super().__init__(config, **overrides)
        cfg = self.config
        if cfg.backend not in ("server", "cli"):
            raise ValueError(f"backend must be 'server' or 'cli', got {cfg.backend!r}")
        if isinstance(cfg.rlimit, bool) or not isinstance(cfg.rlimit, int) or cfg.rlimit < 0:
            raise ValueError(f"rlimit must be an int >= 0 (z3 resource units; 0: off), got {cfg.rlimit!r}")
        mono = shutil.which(cfg.mono)
        if mono is None:
            raise ProverNotFound(f"{cfg.mono} not found (Dafny 2.3 runs on mono); {DAFNY.install_hint}")
        self._mono = mono
        self._dafny_exe = os.path.join(cfg.dafny_dir, "Dafny.exe")
        self._server_exe = os.path.join(cfg.dafny_dir, "DafnyServer.exe")
        for exe in (self._dafny_exe, self._server_exe):
            if not os.path.isfile(exe):
                raise ProverNotFound(f"{exe} not found; {DAFNY.install_hint}")
        self.z3, self.z3_version = find_z3(cfg.z3)
        if self.z3_version != PINNED_Z3:
            logger.warning("dafny: z3 %s at %s is not the pinned %s (pip install z3-solver==4.8.5.0); verdicts stay "
                           "safe (every obligation is counted) but time outs may read as errors",
                           self.z3_version or "of unknown version", self.z3, PINNED_Z3)
        self.version = _dafny_version(self._mono, self._dafny_exe) or "2.3"
        ro = [self.z3] if not self.z3.startswith(("/usr/", "/bin/", "/lib")) else []
        if not cfg.dafny_dir.startswith("/usr/"):
            ro.append(cfg.dafny_dir)
        self.sandbox = Sandbox(cfg.limits, use_bwrap=cfg.use_bwrap, ro_binds=ro)
        self._root = Path(tempfile.mkdtemp(prefix="proofgym-dafny-"))
        self._server: DafnyServer | None = None
        self._anchors: dict[str, Anchor] = {}
        self.stats.update({"server_starts": 0, "server_requests": 0, "cli_runs": 0, "audits": 0,
                           "server_fallbacks": 0, "cli_retries": 0, "outer_kills": 0, "translations": 0})

    # -- lifecycle ----------------------------------------------------------------------------
    def _shutdown(self) -> None:
        with self._lock:
            server, self._server = self._server, None
        if server is not None:
            server.kill()
        shutil.rmtree(self._root, ignore_errors=True)

    # -- public API ---------------------------------------------------------------------------
    @property
    def prover_version(self) -> str:
        return f"dafny {self.version}"

    def symbols(self, program: str, timeout_s: float = 60.0) -> list[Symbol] | None:
        """Dafny's declarations of ``program`` (``None`` if it does not parse or resolve)."""
        program = normalize_source(program)
        with self._lock:
            text = self._server_request("symbols", program, self._symbol_args(timeout_s), timeout_s)
        symbols = parse_symbols(text)
        if symbols is None or (not symbols and parse_output(text, filename=self.config.filename).errors):
            return None
        return symbols

    def resolve(self, program: str, timeout_s: float = 60.0) -> DafnyOutput:
        """Parse and resolve ``program`` without verifying it (a type check for spec skeletons)."""
        program = normalize_source(program)
        with self._lock:
            text = self._server_request("symbols", program, self._symbol_args(timeout_s), timeout_s)
        return parse_output(text, filename=self.config.filename)

    def check_equivalence(self, task: Task, program: str, *, result: CheckResult | None = None) -> EquivalenceResult:
        """Whether the verified ``program`` behaves like the task's reference (SkillForge's ER).

        ``result`` is the program's :meth:`check` result when the caller already has it. See
        :mod:`~proofgym.envs.verifiers.dafny.equiv` for the wrapper program that Dafny verifies.
        """
        program = normalize_source(program)
        result = result if result is not None else self.check(task, program)
        if not result.ok:
            return EquivalenceResult("unverified", (f"the program is {result.verdict.value}",))
        with self._lock:
            anchor = self._anchor(task)
            text, names, notes = equivalence_program(task, anchor, program)
            if not text:
                if notes and all(LEMMA_NOTE in n for n in notes):
                    return EquivalenceResult("equivalent", tuple(notes))  # proof irrelevance
                return EquivalenceResult("not_applicable", tuple(notes))
            run = self._verify(text, task.timeout_s, boogie=False)
        out = run.output
        done = {impl.rsplit(".", 1)[-1] for impl, outcome in out.outcomes if outcome == "verified"}
        unproven = [n for n in names if sanitize(n) not in done]
        if run.timed_out or out.errors or unproven:
            why = [f"{n}: not proven equal to the reference" for n in unproven] or ["the wrapper did not verify"]
            return EquivalenceResult("not_proven", tuple(why + notes),
                                     tuple(d.render() for d in out.errors[:10]), text)
        return EquivalenceResult("equivalent", tuple([f"{n}: proven equal to the reference" for n in names] + notes),
                                 (), text)

    # -- internals ----------------------------------------------------------------------------
    def _wall_s(self, timeout_s: float) -> float:
        """The wall-clock seconds a run gets: the task's timeout, or its backstop under a z3 resource limit."""
        return self.budget.wall_s(timeout_s)

    def _base_args(self, timeout_s: float, *, no_cheating: bool | None = None, server: bool = True) -> list[str]:
        limit = max(1, min(self.config.max_time_limit_s, math.ceil(self._wall_s(timeout_s))))
        args = ["/compile:0", f"/z3exe:{self.z3}", f"/timeLimit:{limit}"]
        if self.config.rlimit:
            args.append(f"/rlimit:{self.config.rlimit}")
        if server:
            # The server caches results by checksum across requests; the CLI has nothing to cache, and
            # there /verifySnapshots:0 makes it look for snapshot files, verify nothing and exit 0.
            args.insert(2, "/verifySnapshots:0")
        if self.config.no_cheating if no_cheating is None else no_cheating:
            args.append("/noCheating:1")
        return args

    def _symbol_args(self, timeout_s: float) -> list[str]:
        # Without /noCheating: under it Dafny refuses a bodyless method with an ensures clause as an
        # error, and a statement (all headers) would not resolve, nor would a cheat be named as one.
        return self._base_args(timeout_s, no_cheating=False)

    def _anchor(self, task: Task) -> Anchor:
        context, statement = normalize_source(task.context), normalize_source(task.statement)
        key = hashlib.sha256(f"{context}\0{statement}".encode()).hexdigest()
        anchor = self._anchors.get(key)
        if anchor is None:
            program = context + "\n" + statement if context else statement
            try:
                tokenize(program)
            except DafnyLexError as exc:
                raise TaskFormatError(f"task {task.id}: context/statement do not lex: {exc}") from None
            text = self._server_request("symbols", program, self._symbol_args(60), 120)
            symbols = parse_symbols(text)
            out = parse_output(text, filename=self.config.filename)
            if symbols is None or out.errors:
                detail = "; ".join(d.render() for d in out.errors[:3]) or "no symbols"
                raise TaskFormatError(f"task {task.id}: its context + statement do not resolve in Dafny: {detail}")
            anchor = build_anchor(context, statement, symbols)
            context_lines = context.count("\n") + 1 if context else 0
            if any(_BODYLESS_WARNING_RE.search(d.message) and d.line <= context_lines for d in out.warnings):
                anchor = replace(anchor, unmarkable_assumptions=True)  # a bodyless loop or forall in the context
            if not anchor.targets and not anchor.verbatim:
                raise TaskFormatError(f"task {task.id}: the statement declares nothing to implement")
            all_tokens = tokenize(program)
            unplaced = classify_declarations(anchor, all_tokens, symbols, [(0, len(all_tokens))]).unplaced
            if unplaced:
                # Fail closed on the task's side too: what cannot be placed cannot be anchored.
                raise TaskFormatError(f"task {task.id}: proofgym cannot place {unplaced[0]} in its context + statement")
            if len(self._anchors) > 4096:
                self._anchors.clear()
            self._anchors[key] = anchor
        return anchor

    def _check(self, task: Task, proof: str, audit: bool | None) -> CheckResult:
        result = self._check_program(task, proof, audit)
        if result.verdict not in (Verdict.OK, Verdict.FAIL, Verdict.ERROR):  # (a Rejected has passed by)
            return result
        # A declaration of the task left out altogether is no cheat (see _check_program), but the program is not
        # the task's either: never OK, and whatever Dafny said comes after what to change.
        program = normalize_source(proof)
        tokens = tokenize(program)
        anchor = self._anchor(task)
        absent = left_out(anchor, tokens, trusted_ranges(anchor, tokens)[1])
        if not absent:
            return result
        missing = tuple(f"the program leaves out the task's declaration '{m} ...': the whole program must hold the "
                        "task's context (and the statement's declarations with bodies) verbatim at its top level "
                        "(not inside a module), so copy it unchanged above your code" for m in absent)
        return replace(result, verdict=Verdict.ERROR, reasons=missing + tuple(
            r for r in result.reasons if result.verdict is not Verdict.OK),
            error_category=result.error_category if result.verdict is Verdict.ERROR else ErrorCategory.TYPE_ERROR)

    def _check_program(self, task: Task, proof: str, audit: bool | None) -> CheckResult:
        program = normalize_source(proof)
        try:
            tokens = tokenize(program)
        except DafnyLexError as exc:
            raise Rejected(Verdict.ERROR, (f"does not lex: {exc}",), ErrorCategory.PARSE_ERROR) from None
        anchor = self._anchor(task)
        trusted, missing = trusted_ranges(anchor, tokens)
        # A declaration left out altogether (its name declared nowhere: the model sent its code without the context)
        # cannot change what the task means: ERROR below, saying what to add. One declared again is a change: CHEATING.
        absent = left_out(anchor, tokens, missing)
        changed = list(missing)
        for label in absent:
            changed.remove(label)
        reasons = [f"context declaration '{m} ...' is missing or changed (it must be kept verbatim)"
                   for m in changed]
        unknown: list[str] = []
        reasons += banned_constructs(tokens, trusted, allowed_attributes=anchor.task_attributes, unknown=unknown)
        if reasons:
            raise Rejected(Verdict.CHEATING, reasons)
        if unknown:  # refused (fail closed), but nothing says it was an attempt: ERROR, saying what to change
            raise Rejected(Verdict.ERROR, unknown, ErrorCategory.UNKNOWN)
        # Dafny's view of every declaration (read without /noCheating, so that a bodyless cheat is named
        # as one), classified before anything is verified: what may lack a body gets {:axiom}, so that
        # /noCheating:1 holds the rest of the program -- the submission's declarations -- to the same
        # rule whatever the task's context trusts.
        try:
            symbols = self._server_symbols(program, task.timeout_s)
        except DeadlinePassed:  # no verdict within the deadline, which says nothing against the program
            self.stats["outer_kills"] += 1
            return CheckResult(Verdict.TIMEOUT, ("Dafny did not read the program's declarations within the deadline",),
                               error_category=ErrorCategory.TIMEOUT, backend="server")
        decls = classify_declarations(anchor, tokens, symbols, trusted) if symbols is not None else None
        no_cheating = self.config.no_cheating and not anchor.unmarkable_assumptions
        judged, inserted = mark_axioms(program, decls.marks if decls is not None and no_cheating else ())
        run = _unshift(self._verify(judged, task.timeout_s, boogie=self.config.backend == "cli",
                                    no_cheating=no_cheating), inserted)
        view = None
        if run.backend == "server" and _ok_candidate(run):
            # Defence in depth on every OK: Boogie's own translation (cheap next to verification) must show
            # a verified body for everything but what the classification allows.
            bpl = self._translate(judged, task.timeout_s, no_cheating=no_cheating)
            if not isinstance(bpl, str):  # fail closed: an OK needs the translation read
                if bpl is _TIMED_OUT:
                    return CheckResult(Verdict.TIMEOUT, ("Dafny's Boogie translation ran past the deadline",),
                                       error_category=ErrorCategory.TIMEOUT, backend="server", cpu_s=run.cpu_s)
                return CheckResult(Verdict.FAIL, ("Dafny's Boogie translation could not be read",),
                                   error_category=ErrorCategory.UNKNOWN, backend="server", cpu_s=run.cpu_s)
            view = parse_boogie(bpl)
        result = self._judge(task, tokens, anchor, trusted, run, symbols, decls, view)
        if result.verdict is not Verdict.OK or run.backend != "server":
            return result
        do_audit = self.audit_due(audit)
        if do_audit:
            self.stats["audits"] += 1
            cli = _unshift(self._cli(judged, task.timeout_s, boogie=True, no_cheating=no_cheating), inserted)
            audited = self._judge(task, tokens, anchor, trusted, cli, symbols, decls,
                                  parse_boogie(cli.boogie) if cli.boogie else None)
            if audited.verdict is not Verdict.OK:
                return replace(audited, reasons=("audit: the CLI disagrees with the server",
                                                  *audited.reasons), audited=True)
            return replace(result, audited=True)
        return result

    def _judge(self, task: Task, tokens: list[Token], anchor: Anchor, trusted: list[tuple[int, int]], run: _Run,
               symbols: list[Symbol] | None, decls: Declarations | None, view: BoogieView | None = None) -> CheckResult:
        """The verdict of one run: the first that one of its rules gives (the deadline, a crash, errors,
        Dafny's view of bodies and specs, the implementation count, and Boogie's translation: ``view``, from the
        run itself on the CLI, read apart for a server OK)."""
        judging = _Judging.of(task, tokens, anchor, trusted, run, symbols, decls, view, self.config.rlimit)
        early = next((result for rule in _RUN_RULES if (result := rule(judging)) is not None), None)
        if early is not None:
            return early
        resolved = _resolved(judging)
        if isinstance(resolved, CheckResult):
            return resolved
        return next(result for rule in _RESOLVED_RULES if (result := rule(resolved)) is not None)

    # -- running Dafny ------------------------------------------------------------------------
    def _verify(self, program: str, timeout_s: float, *, boogie: bool, no_cheating: bool | None = None) -> _Run:
        if self.config.backend == "cli":
            run = self._cli(program, timeout_s, boogie=boogie, no_cheating=no_cheating)
            if run.crashed and not _z3_gave_up(run):  # a death is retried once on a fresh process (died_under_proof)
                self.stats["cli_retries"] += 1
                run = self._cli(program, timeout_s, boogie=boogie, no_cheating=no_cheating)
            return run
        cpu_before = self._server.cpu_s if self._server is not None else 0.0
        try:
            text = self._server_request("verify", program, self._base_args(timeout_s, no_cheating=no_cheating),
                                        self._wall_s(timeout_s) + self.config.grace_s, fatal_ok=True)
        except DeadlinePassed:
            self.stats["outer_kills"] += 1
            return _Run(DafnyOutput(), "server", timed_out=True)
        except ProcessDied:
            # The server died under the program (the first death): a fresh process, the CLI, gives the verdict, and
            # a crash there is the second (died_under_proof).
            self.stats["server_fallbacks"] += 1
            return self._cli(program, timeout_s, boogie=True, no_cheating=no_cheating)
        server = self._server
        if server is not None:
            server.count_use()
        cpu = max(0.0, server.cpu_s - cpu_before) if server is not None else 0.0  # cgroup accounting: mono + z3
        return _Run(parse_output(text, filename=self.config.filename), "server", cpu_s=cpu)

    def _translate(self, program: str, timeout_s: float, *, no_cheating: bool) -> str | object | None:
        """Dafny's Boogie translation of ``program`` (``/noVerify /print``: no prover runs); ``None`` when
        it cannot be read, :data:`_TIMED_OUT` past the deadline."""
        self.stats["translations"] += 1
        workdir = Path(tempfile.mkdtemp(prefix="bpl", dir=self._root))
        try:
            (workdir / self.config.filename).write_text(program, encoding="utf-8")
            args = [self._mono, self._dafny_exe, *self._base_args(timeout_s, server=False, no_cheating=no_cheating),
                    "/noVerify", f"/print:{workdir / 'boogie.bpl'}", self.config.filename]
            run = self.sandbox.run(args, workdir=workdir, timeout_s=self._wall_s(timeout_s) + self.config.grace_s)
            if run.timed_out:
                self.stats["outer_kills"] += 1
                return _TIMED_OUT
            files = sorted(workdir.glob("*.bpl"))
            if run.returncode != 0 or not files:
                return None
            return "\n".join(p.read_text(encoding="utf-8", errors="replace") for p in files)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    def _server_symbols(self, program: str, timeout_s: float) -> list[Symbol] | None:
        """Dafny's view of the program's declarations, or None when it does not parse or resolve.

        Raises:
            DeadlinePassed: Dafny did not answer within the check's deadline (the caller's TIMEOUT).
        """
        args, wall_s = self._symbol_args(timeout_s), self._wall_s(timeout_s) + self.config.grace_s
        try:
            text = self._server_request("symbols", program, args, wall_s, fatal_ok=True)
        except ProcessDied:
            # The server died under this request: one of its own limits (its CPU over its life), or this
            # program. A fresh server tells which: a program that kills it again does not resolve (ERROR).
            self.stats["server_fallbacks"] += 1
            try:
                text = self._server_request("symbols", program, args, wall_s, fatal_ok=True)
            except ProcessDied:
                return None
        symbols = parse_symbols(text)
        if symbols is not None and not symbols and parse_output(text, filename=self.config.filename).errors:
            return None  # it does not parse or resolve
        return symbols

    def _server_request(self, verb: str, program: str, args: list[str], timeout_s: float,
                        *, fatal_ok: bool = False) -> str:
        """One request to the warm server (started, or restarted, as needed)."""
        server = self._server
        if server is not None and (not server.alive() or server.worn_out()
                                   or server.cpu_s > 0.8 * self.config.limits.cpu_seconds):
            server.kill()
            server = self._server = None
        if server is None:
            workdir = Path(tempfile.mkdtemp(prefix="server", dir=self._root))
            server = DafnyServer(self.sandbox, workdir, mono=self._mono, server_exe=self._server_exe,
                                 max_uses=self.config.restart_every)
            self._server = server
            self.stats["server_starts"] += 1
        self.stats["server_requests"] += 1
        try:
            return server.request(verb, program, args=args, timeout_s=timeout_s, filename=self.config.filename).text
        except (DeadlinePassed, ProcessDied):
            self._server = None
            if not fatal_ok:
                raise VerifierCrashed(f"DafnyServer failed on a '{verb}' request") from None
            raise

    def _cli(self, program: str, timeout_s: float, *, boogie: bool, no_cheating: bool | None = None) -> _Run:
        """A fresh ``dafny`` process (sandboxed) with ``/trace`` and, when asked, ``/print``."""
        self.stats["cli_runs"] += 1
        workdir = Path(tempfile.mkdtemp(prefix="cli", dir=self._root))
        try:
            source = workdir / self.config.filename
            source.write_text(program, encoding="utf-8")
            args = [self._mono, self._dafny_exe, *self._base_args(timeout_s, server=False, no_cheating=no_cheating),
                    "/trace"]
            if boogie:
                args.append(f"/print:{workdir / 'boogie.bpl'}")
            args.append(self.config.filename)
            run = self.sandbox.run(args, workdir=workdir, timeout_s=self._wall_s(timeout_s) + self.config.grace_s)
            if run.timed_out:
                self.stats["outer_kills"] += 1
                return _Run(DafnyOutput(), "cli", timed_out=True, returncode=None, cpu_s=run.cpu_s)
            text = run.stdout + "\n" + run.stderr
            out = parse_output(text, filename=self.config.filename)
            crashed = ""
            if out.fatal or "FATAL UNHANDLED EXCEPTION" in text or (run.returncode not in (0, 2, 3, 4)):
                crashed = f"exit {run.returncode}" + (" (unhandled exception)" if "UNHANDLED" in text else "")
            bpl = "\n".join(p.read_text(encoding="utf-8", errors="replace")
                            for p in sorted(workdir.glob("*.bpl"))) if boogie else ""
            return _Run(out, "cli", crashed=crashed, returncode=run.returncode, boogie=bpl, cpu_s=run.cpu_s)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)


def _z3_gave_up(run: _Run) -> bool:
    """Whether a crashed run's prover errors say z3 hit a resource limit: it gave up, it did not die."""
    return any(_Z3_RLIMIT_HIT in e for e in run.output.prover_errors)


def _ok_candidate(run: _Run) -> bool:
    """Whether a run may still end in OK: an answer, no error, every outcome verified."""
    out = run.output
    return not (run.timed_out or run.crashed or out.errors or out.prover_errors or out.trace_anomalies) and all(
        o == "verified" for _, o in out.outcomes)


# -- judging one run -------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Judging:
    """One run as the judge's rules read it: the task's anchoring, the run's output (without the task's own
    bodyless declarations when Dafny's symbols are missing), the messages a verdict carries, Boogie's view."""

    task: Task
    tokens: list[Token]
    anchor: Anchor
    trusted: list[tuple[int, int]]
    trusted_lines: set[int]
    run: _Run
    out: DafnyOutput
    messages: tuple[str, ...]
    symbols: list[Symbol] | None
    decls: Declarations | None
    view: BoogieView | None
    rlimit: int
    category: ErrorCategory  # the diagnostics' primary category

    @classmethod
    def of(cls, task: Task, tokens: list[Token], anchor: Anchor, trusted: list[tuple[int, int]], run: _Run,
           symbols: list[Symbol] | None, decls: Declarations | None, view: BoogieView | None,
           rlimit: int) -> _Judging:
        out = run.output
        if view is None and run.boogie:
            view = parse_boogie(run.boogie)
        trusted_lines = _trusted_lines(tokens, trusted)
        if decls is None:
            # Without Dafny's symbols nothing was marked, so /noCheating:1 names the task's own trusted
            # declarations: that is not the submission's error (and must not route its repair).
            out = replace(out, diagnostics=tuple(d for d in out.diagnostics if not (
                "must have a body" in d.message and d.line in trusted_lines)))
        messages = tuple(d.render() for d in out.diagnostics if d.level != "warning"
                         or _BODYLESS_WARNING_RE.search(d.message))[:50]
        return cls(task, tokens, anchor, trusted, trusted_lines, run, out, messages, symbols, decls, view, rlimit,
                   primary_category(out.diagnostics))

    def verdict(self, verdict: Verdict, reasons: Iterable[str], category: ErrorCategory,
                messages: tuple[str, ...] | None = None) -> CheckResult:
        return CheckResult(verdict, tuple(reasons), self.messages if messages is None else messages,
                           error_category=category, backend=self.run.backend, cpu_s=self.run.cpu_s)

    def cheating(self, reasons: Iterable[str]) -> CheckResult:
        return self.verdict(Verdict.CHEATING, reasons, ErrorCategory.CHEATING)

    @property
    def failure_category(self) -> ErrorCategory:
        return self.category if self.category is not ErrorCategory.NONE else ErrorCategory.UNKNOWN


@dataclass(frozen=True)
class _Resolved(_Judging):
    """A run of a program that parsed and resolved: Dafny's symbols, and the declarations read from them, are there
    (what :data:`_RESOLVED_RULES` read)."""

    symbols: list[Symbol]
    decls: Declarations


def _timed_out(j: _Judging) -> CheckResult | None:
    if not j.run.timed_out:
        return None
    return j.verdict(Verdict.TIMEOUT, (f"ran past the {j.task.timeout_s:g} s deadline (killed)",), ErrorCategory.TIMEOUT)


def _resource_limit_hit(j: _Judging) -> CheckResult | None:
    """The budget ran out (so early that Boogie crashed on it): a TIMEOUT, as an "out of resource" outcome is."""
    if not (j.run.crashed and j.rlimit and any(_Z3_RLIMIT_HIT in e for e in j.out.prover_errors)):
        return None
    return j.verdict(Verdict.TIMEOUT, (f"z3 ran out of its resource limit (rlimit={j.rlimit})",),
                     ErrorCategory.TIMEOUT, j.messages + j.out.prover_errors[:1])


def _crashed(j: _Judging) -> CheckResult | None:
    """On a fresh process, after a first death (see _verify): the policy of died_under_proof."""
    if not j.run.crashed:
        return None
    if _z3_gave_up(j.run):
        # z3 gave up on the program's own {:rlimit} (Dafny 2.3 crashes on a tiny one): nothing is proved, a FAIL
        # (red team corpus, rlimit-trap), not the prover dying under the proof.
        return j.verdict(Verdict.FAIL, (f"Dafny crashed on this program: {j.run.crashed}",),
                         j.category if j.category is not ErrorCategory.NONE else ErrorCategory.UNKNOWN)
    return replace(died_under_proof(f"Dafny {j.run.crashed}", backend=j.run.backend, messages=j.messages),
                   cpu_s=j.run.cpu_s)


def _resolved(j: _Judging) -> _Resolved | CheckResult:
    """The run with its symbols and declarations; for a program that does not parse or resolve (or Dafny's symbols
    are missing): ERROR, unless what can be read of it already shows an assumption."""
    errors, symbols, decls = j.out.errors, j.symbols, j.decls
    if symbols is not None and decls is not None and not (
            j.category in (ErrorCategory.PARSE_ERROR, ErrorCategory.TYPE_ERROR) or (errors and not j.out.outcomes)):
        return _Resolved(j.task, j.tokens, j.anchor, j.trusted, j.trusted_lines, j.run, j.out, j.messages, symbols,
                         decls, j.view, j.rlimit, j.category)
    reasons = check_anchoring(j.anchor, j.tokens, j.symbols, j.trusted, []) + list(j.decls.cheats) \
        if j.symbols and j.decls else []
    # Under /noCheating:1 Dafny itself names bodyless contracts and forall statements as errors -- as parse errors, so
    # they are evidence only where nothing else failed to parse: after a syntax error the parser loses its place and
    # says "must have a body" of a method whose body is right there (`ensures c == Count(a[.., x])` then `{ ... }`:
    # issue 27's dafny-nl replies were CHEATING for that typo). Then it is ERROR with Dafny's messages.
    bodyless = [d for d in errors if "must have a body" in d.message]
    if len(bodyless) == len(errors):
        reasons += [f"line {d.line}: {d.message} (a declaration or statement without a body is an assumption)"
                    for d in bodyless if d.line not in j.trusted_lines]
    if reasons:
        return j.cheating(reasons)
    category = j.failure_category
    return j.verdict(Verdict.ERROR, (f"{len(errors)} {category.value} diagnostic(s): the program does "
                                     f"not {'parse' if category is ErrorCategory.PARSE_ERROR else 'resolve'}",),
                     category)


def _assumptions_or_header(j: _Resolved) -> CheckResult | None:
    """An assumption anywhere (the task's anchoring, a bodyless declaration, loop or forall, Boogie's view):
    CHEATING; else a header that differs from the statement's, but not by a weakening: ERROR (no reward, and what
    to change)."""
    header_errors: list[str] = []
    reasons = check_anchoring(j.anchor, j.tokens, j.symbols, j.trusted, header_errors) + list(j.decls.cheats)
    for d in j.out.warnings:
        if (m := _BODYLESS_WARNING_RE.search(d.message)) and d.line not in j.trusted_lines:
            reasons.append(f"line {d.line}: a {m.group(1)} without a body is an assumption")
    if j.view is not None:
        reasons += boogie_findings(j.view, j.decls)
    if reasons:
        return j.cheating(reasons)
    if header_errors:
        return j.verdict(Verdict.ERROR, header_errors[:5], ErrorCategory.UNKNOWN)
    return None


def _unplaced(j: _Resolved) -> CheckResult | None:
    """Fail closed: what proofgym cannot place in the text is not judged, so it is not accepted."""
    if not j.decls.unplaced:
        return None
    return j.verdict(Verdict.ERROR, (f"proofgym cannot place {u} in the program text or classify it, so it cannot "
                                     f"be judged: give it a name of its own and write it as a plain declaration"
                                     for u in j.decls.unplaced[:5]), ErrorCategory.UNKNOWN)


def _verification_errors(j: _Resolved) -> CheckResult | None:
    """Errors or an implementation not verified: TIMEOUT when every error is a time out, else FAIL."""
    errors = j.out.errors
    bad_outcomes = [(i, o) for i, o in j.out.outcomes if o != "verified"]
    if not (errors or bad_outcomes):
        return None
    timeouts = [d for d in errors if d.level in ("timeout", "resource")]
    if timeouts and len(timeouts) == len(errors):
        return j.verdict(Verdict.TIMEOUT, tuple(f"{i}: {o}" for i, o in bad_outcomes) or ("verification timed out",),
                         ErrorCategory.TIMEOUT)
    return j.verdict(Verdict.FAIL, (f"{len(errors)} verification error(s)",) + tuple(
        f"{i}: {o}" for i, o in bad_outcomes[:5]), j.failure_category)


def _accounted_for(j: _Resolved) -> CheckResult:
    """No error: an OK needs every obligation accounted for (a dropped one is CHEATING, a doubt is FAIL)."""
    out = j.out
    problems: list[str] = []
    if out.prover_errors:
        problems.append(f"prover error: {out.prover_errors[0][:120]}")
    if out.trace_anomalies:
        problems.append(f"unreadable trace: {out.trace_anomalies[0]}")
    verified = out.verified_implementations()
    if not verified:
        problems.append("nothing was verified (0 implementations)")
    expected = expected_implementations(j.tokens, j.symbols, j.decls)
    drops: list[str] = []
    if j.view is not None:
        # Dafny emits no implementation where it has nothing to prove (no postcondition, no check in
        # the body): such a declaration is not a dropped obligation.
        expected = [e for e in expected if not any(impl_matches(p, e) for p in j.view.nothing_to_prove)]
        drops = boogie_unverified(j.view, verified)
    drops += pair_implementations(verified, expected, j.decls.copies)
    if j.run.backend == "cli":
        _cli_summary(j, problems, drops)
    if drops:
        return j.cheating(drops)
    if problems:
        return j.verdict(Verdict.FAIL, problems, ErrorCategory.UNKNOWN)
    return CheckResult(Verdict.OK, (), j.messages, backend=j.run.backend, cpu_s=j.run.cpu_s)


def _cli_summary(j: _Judging, problems: list[str], drops: list[str]) -> None:
    """The CLI's exit code and its one summary line must agree with the trace and Boogie's implementations."""
    out, run = j.out, j.run
    s = out.summary
    if run.returncode != 0:
        problems.append(f"dafny exited with {run.returncode}")
    if out.summary_lines != 1 or s is None:
        problems.append("no exact 'N verified, 0 errors' summary")
    else:
        if s.errors or s.time_outs or s.inconclusive or s.out_of_memory or s.out_of_resource:
            problems.append("the summary reports errors, time outs or out of resource")
        if s.verified < 1:
            problems.append("the summary reports 0 verified")
        if s.verified != len(out.outcomes):
            drops.append(f"the summary counts {s.verified} verified but the trace has "
                         f"{len(out.outcomes)} implementations")
    if j.view is not None and len(j.view.implementations) != (s.verified if s else -1):
        drops.append(f"Boogie has {len(j.view.implementations)} implementations but {s.verified if s else 0} verified")
    raw = "\n".join(d.message for d in out.diagnostics)
    if "time out" in raw or "out of resource" in raw:
        problems.append("a time out or out of resource was reported")


#: The verdict of a run is the first one a rule gives, in this order: those of any run, then :func:`_resolved`
#: (a program that does not parse or resolve), then those of a resolved program (the last, :func:`_accounted_for`,
#: always gives one).
_RUN_RULES: tuple[Callable[[_Judging], CheckResult | None], ...] = (_timed_out, _resource_limit_hit, _crashed)
_RESOLVED_RULES: tuple[Callable[[_Resolved], CheckResult | None], ...] = (
    _assumptions_or_header, _unplaced, _verification_errors, _accounted_for)


def _trusted_lines(tokens: list[Token], trusted: list[tuple[int, int]]) -> set[int]:
    lines: set[int] = set()
    for a, b in trusted:
        if a < b:
            lines.update(range(tokens[a].line, tokens[b - 1].line + 1))
    return lines


def _unshift(run: _Run, inserted: list[tuple[int, int]]) -> _Run:
    """``run`` with the columns of its diagnostics mapped back from the marked program to the submission."""
    if not inserted:
        return run
    width = len(AXIOM_MARK)

    def col(line: int, c: int) -> int:
        return c - width * sum(1 for ln, at in inserted if ln == line and at <= c)

    diags = tuple(replace(d, col=col(d.line, d.col)) for d in run.output.diagnostics)
    return replace(run, output=replace(run.output, diagnostics=diags))
