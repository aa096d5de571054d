"""The Verifier protocol, the base class of the provers' verifiers, and the registry of verifiers by system."""

from __future__ import annotations

import abc
import atexit
import contextlib
import dataclasses
import random
import sys
import threading
import time
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, TypeVar, runtime_checkable

from proofgym.envs.errors import InvalidSubmission, TaskFormatError, VerifierCrashed, VerifierError
from proofgym.envs.parsing import last_code_block
from proofgym.envs.systems import SPECS, wired_systems
from proofgym.envs.types import CheckResult, ErrorCategory, Task, Verdict

#: Largest submission sent to a prover. Larger ones are rejected before any process starts.
MAX_PROOF_BYTES = 256 * 1024


#: Verifiers not yet closed. A script that never calls close() (or leaves no ``with``) had Python abort at exit
#: (rc 134, "Fatal Python error: _enter_buffered_busy"): __del__ ran during finalisation and waited on a prover's
#: reader thread, frozen holding its pipe's lock; and the temp dirs stayed. They are closed at exit instead, while
#: threads still run.
_OPEN: weakref.WeakSet[ProverVerifier] = weakref.WeakSet()


@atexit.register
def _close_open_verifiers() -> None:
    for verifier in list(_OPEN):
        with contextlib.suppress(Exception):
            verifier.close()


@runtime_checkable
class Verifier(Protocol):
    """A verifier checks whole proofs. It owns its processes like a context manager.

    ``check`` returns a :class:`CheckResult` for anything the submission does
    (including garbage: that is an ``ERROR`` verdict). It raises
    :class:`~proofgym.envs.errors.VerifierError` only when the verifier itself breaks.
    """

    system: str

    def check(self, task: Task, proof: str) -> CheckResult: ...

    def close(self) -> None: ...

    def __enter__(self) -> Verifier: ...

    def __exit__(self, *exc: object) -> None: ...


_V = TypeVar("_V", bound="ProverVerifier")

#: The note a result carries when its submission came inside a Markdown fence (the fence is not the proof).
FENCE_NOTE = "proofgym: took the last fenced code block of the submission"

#: The audit policies every prover's config takes (``audit``): an independent re-check of an OK.
AUDIT_MODES = ("always", "sample", "never")


#: What a task's ``timeout_s`` counts (:class:`Budget`): wall-clock seconds, the prover's CPU seconds, or z3's
#: resource units (Dafny's ``rlimit``).
TIMEOUT_CLOCKS = ("wall", "cpu", "rlimit")


@dataclass(frozen=True)
class Budget:
    """The time budget of one check: what ``timeout_s`` counts, and when the check's wall clock runs out.

    One owner for every prover and the pool: a prover's config makes it (:attr:`ProverConfig.budget`),
    validated once there; the pool's worker sends its :meth:`wall_s` with each check, so the pool's
    deadline is the verifier's own.

    Attributes:
        clock: ``"wall"`` (``timeout_s`` wall-clock seconds), ``"cpu"`` (the prover's CPU seconds) or
            ``"rlimit"`` (z3's resource units, Dafny); with either deterministic clock the wall clock is a backstop.
        wall_backstop: The backstop, a multiple of ``timeout_s`` (>= 1).

    Example:
        >>> Budget("cpu", 4.0).wall_s(30), Budget().wall_s(30)
        (120.0, 30.0)
    """

    clock: str = "wall"
    wall_backstop: float = 4.0

    def __post_init__(self) -> None:
        if self.clock not in TIMEOUT_CLOCKS:
            raise ValueError(f"timeout_clock must be 'wall' or 'cpu', got {self.clock!r}")
        backstop = self.wall_backstop
        if isinstance(backstop, bool) or not isinstance(backstop, (int, float)) or not backstop >= 1:
            raise ValueError(f"wall_backstop must be >= 1 (a multiple of timeout_s), got {backstop!r}")

    def wall_s(self, timeout_s: float) -> float:
        """The wall-clock seconds a check of a task with ``timeout_s`` may run."""
        return float(timeout_s) * (1.0 if self.clock == "wall" else float(self.wall_backstop))


@dataclass(frozen=True)
class ProverConfig:
    """What every prover's config shares: the wall-clock backstop of its time budget.

    A subclass (``CoqConfig``, ``DafnyConfig``, ``HolLightConfig``) says which clock ``timeout_s`` counts
    (:meth:`timeout_clock_of`); :attr:`budget` is then validated once, when the config is made.
    """

    wall_backstop: float = 4.0

    def __post_init__(self) -> None:
        self.budget  # noqa: B018 - validates the clock and the backstop, once, here

    def timeout_clock_of(self) -> str:
        """The clock of ``timeout_s`` (default: wall-clock)."""
        return "wall"

    @property
    def budget(self) -> Budget:
        """The time budget of every check made with this config."""
        return Budget(self.timeout_clock_of(), self.wall_backstop)


class ContextLoadError(TaskFormatError):
    """The task's context (or statement, or goal) does not load in the prover: the task is broken, not the proof.

    The same class for every prover (``coq.ContextLoadError`` and ``hol_light.ContextLoadError`` name it).
    """


#: The error category of a rejection that does not name one: a cheat, a proof given up (logic), or text the
#: prover cannot run (syntax).
_REJECTION_CATEGORY = {Verdict.CHEATING: ErrorCategory.CHEATING, Verdict.FAIL: ErrorCategory.LOGIC}


class Rejected(Exception):  # noqa: N818 - a verdict reached before the prover ran, not an error
    """A submission the screening turns away before the prover runs it: a verdict, not a failure.

    Every prover's screening raises it (Coq's normaliser, Dafny's lexer and declaration rules, the
    shared submission check); :meth:`ProverVerifier.check` catches it in one place and answers
    :meth:`result`, a :class:`CheckResult` from the ``precheck`` backend.

    Attributes:
        verdict: ``CHEATING`` (the construct can get an unproved statement accepted), ``ERROR`` (not a
            proof the prover can run, with what to change), or ``FAIL`` (the proof gave itself up).
        reasons: Why, one stable short string each.
        category: The error category (default: from the verdict).
        messages: Extra text for the feedback.
    """

    def __init__(self, verdict: Verdict, reasons: Iterable[str], category: ErrorCategory | None = None,
                 messages: Iterable[str] = ()) -> None:
        self.verdict = Verdict(verdict)
        self.reasons = tuple(reasons)
        self.category = category if category is not None else _REJECTION_CATEGORY.get(self.verdict,
                                                                                       ErrorCategory.SYNTAX)
        self.messages = tuple(messages)
        super().__init__("; ".join(self.reasons))

    def result(self) -> CheckResult:
        """The verdict as a check result (``backend="precheck"``)."""
        return CheckResult(self.verdict, self.reasons, self.messages, error_category=self.category,
                           backend="precheck")

    @classmethod
    def invalid(cls, exc: InvalidSubmission) -> Rejected:
        """A submission no prover may see (empty, binary, oversized): the same ERROR in every system."""
        return cls(Verdict.ERROR, (f"invalid submission: {exc}",), ErrorCategory.SYNTAX)


#: The first words of the verdict on a proof under which the prover died twice (:func:`died_under_proof`).
DIED_TWICE = "the prover died under this proof twice"


def died_under_proof(detail: str, *, backend: str, messages: Iterable[str] = ()) -> CheckResult:
    """The verdict on a proof under which the prover died again on a fresh process: the one policy for every prover.

    A prover process that dies under a proof (its memory, stack or CPU limit, a crash, or a kill from outside:
    an operator, the OOM killer) is retried once on a fresh process, and a death the retry does not repeat gives
    the retry's verdict. A second death is the proof's doing: ERROR (category ``resource``) with what to change,
    reward 0, never CHEATING (dying proves nothing false). A prover that cannot run with no proof to blame
    raises :class:`~proofgym.envs.errors.VerifierError` instead: a harness failure, no reward. See
    docs/verdicts.md, "A prover that dies under a proof".
    """
    return CheckResult(Verdict.ERROR, (f"{DIED_TWICE}, the second time on a fresh process ({detail}): it ran the "
                                       "prover out of memory, stack or CPU time, or crashed it; make it smaller or "
                                       "simpler, or prove the goal another way",),
                       tuple(messages), error_category=ErrorCategory.RESOURCE, backend=backend)


def invalid_submission(exc: InvalidSubmission) -> CheckResult:
    """The verdict on a submission no prover may see (empty, binary, oversized): the same in every system."""
    return Rejected.invalid(exc).result()


class ProverVerifier(abc.ABC):
    """What every real prover's verifier shares: config, lifecycle, the one ``check``, the audit policy.

    A subclass sets ``system`` and ``config_class`` (a frozen dataclass with an ``audit`` field, one
    of :data:`AUDIT_MODES`, an ``audit_rate`` and a ``seed``), finds its binaries and sets
    ``self.version`` in ``__init__`` after ``super().__init__``, and implements :meth:`_check` and
    :meth:`_shutdown`. :meth:`check` is not overridden: the system check, the closed flag, the
    invalid-submission verdict, the ``checks`` count, the wall time and the prover version are the same
    for every prover. ``serial`` verifiers run one check at a time under ``self._lock``; a verifier
    whose checks run in parallel processes (HOL Light) guards its own state and sets it False.

    Owning processes, it is a context manager (STYLE.md #6): ``close()`` is idempotent and runs
    :meth:`_shutdown` once, after the verifier is marked closed.
    """

    system: ClassVar[str]
    config_class: ClassVar[type]
    serial: ClassVar[bool] = True
    #: Whether an OK can be re-checked independently (Coq: coqc + coqchk; Dafny: the CLI). Where not,
    #: the audit setting is accepted (one option for a run over every system) and ``audited`` stays False.
    audits: ClassVar[bool] = True

    def __init__(self, config: Any = None, **overrides: Any) -> None:
        cfg = config if config is not None else self.config_class()
        if not self.audits:
            overrides.pop("audit", None)  # `--audit` for a mixed run: nothing to re-check here
        if overrides:
            cfg = dataclasses.replace(cfg, **overrides)
        audit = getattr(cfg, "audit", "never")
        if audit not in AUDIT_MODES:
            raise ValueError(f"audit must be always, sample or never, got {audit!r}")
        self.config = cfg
        self.version = ""
        self._rng = random.Random(getattr(cfg, "seed", 0))
        self._lock = threading.RLock()
        self._closed = False
        self.stats: dict[str, int] = {"checks": 0}
        _OPEN.add(self)

    # -- lifecycle ------------------------------------------------------------------------------
    def __enter__(self: _V) -> _V:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Kill every process this verifier started and remove its temp dirs. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._shutdown()

    @abc.abstractmethod
    def _shutdown(self) -> None:
        """Stop the processes and remove the files; runs once, after the verifier is marked closed."""

    def __del__(self) -> None:  # last resort; close() is the contract
        if sys.is_finalizing():
            return  # too late: the readers' daemon threads are frozen holding their locks (_close_open_verifiers ran)
        try:
            self.close()
        except Exception:  # noqa: BLE001 - a constructor that raised early
            pass

    def ensure_open(self) -> None:
        """Raise :class:`~proofgym.envs.errors.VerifierCrashed` once the verifier is closed."""
        if self._closed:
            raise VerifierCrashed("verifier is closed")

    def require_system(self, task: Task) -> None:
        if task.system != self.system:
            raise TaskFormatError(f"task {task.id} is for {task.system!r}, not {self.system}")

    # -- checking -------------------------------------------------------------------------------
    @property
    def budget(self) -> Budget:
        """The time budget of this verifier's checks (its config's, validated when the config was made)."""
        return self.config.budget

    @property
    def prover_version(self) -> str:
        """What a result records as ``prover_version`` when the check did not say (e.g. a precheck)."""
        return self.version

    def check(self, task: Task, proof: str, *, audit: bool | None = None) -> CheckResult:
        """Check ``proof`` against ``task``; ``audit`` forces (True) or skips (False) the independent audit.

        Returns a :class:`CheckResult` for anything the submission does (garbage is an ``ERROR``
        verdict). Raises :class:`~proofgym.envs.errors.VerifierError` only when the verifier itself
        breaks, and :class:`~proofgym.envs.errors.TaskFormatError` when the task is broken.
        """
        self.require_system(task)
        self._check_task(task)
        start = time.monotonic()
        with self._lock:
            self.ensure_open()
            self.stats["checks"] += 1
            if self.serial:
                result = self._screen_and_check(task, proof, audit)
        if not self.serial:
            result = self._screen_and_check(task, proof, audit)
        return dataclasses.replace(result, wall_s=time.monotonic() - start,
                                   prover_version=result.prover_version or self.prover_version)

    def _screen_and_check(self, task: Task, proof: str, audit: bool | None) -> CheckResult:
        """The shared screening, then the prover's :meth:`_check`; the one place a :class:`Rejected` (or an
        :class:`~proofgym.envs.errors.InvalidSubmission`) from any prover's screening becomes its verdict."""
        fenced = False
        try:
            text = validate_submission(proof)
            code, in_fence, _ = last_code_block(text)
            if in_fence:  # a reply sent as it was written: one fence rule for every prover (envs/parsing.py)
                if not code.strip():
                    raise InvalidSubmission("the fenced code block is empty: put the proof inside the fence")
                text = validate_submission(code)
            fenced = in_fence  # the note goes with what the prover's own screening or check answers
            result = self._check(task, text, audit)
        except InvalidSubmission as exc:
            result = Rejected.invalid(exc).result()
        except Rejected as exc:
            result = exc.result()
        if fenced:
            result = dataclasses.replace(result, messages=(FENCE_NOTE, *result.messages))
        return result

    def _check_task(self, task: Task) -> None:  # noqa: B027 - an optional hook, a no-op by default
        """Raise :class:`~proofgym.envs.errors.TaskFormatError` for a task this prover cannot state (hook)."""

    @abc.abstractmethod
    def _check(self, task: Task, proof: str, audit: bool | None) -> CheckResult:
        """The prover's check of a screened submission (text, within :data:`MAX_PROOF_BYTES`)."""

    def audit_due(self, override: bool | None, *, forced: bool = False) -> bool:
        """Whether an OK gets the independent audit: the caller's ``override``, else ``forced`` (a proof that
        must always be audited, e.g. Coq's ``vm_compute``), else the config's policy (``sample``: at
        ``audit_rate``, drawn from the verifier's seeded generator)."""
        if override is not None:
            return override
        mode = self.config.audit
        return forced or mode == "always" or (mode == "sample" and self._rng.random() < self.config.audit_rate)


def validate_submission(proof: Any, *, max_bytes: int = MAX_PROOF_BYTES) -> str:
    """Reject submissions that must not reach a prover: non-text, empty, binary, oversized.

    Raises:
        InvalidSubmission: with a one-line reason.
    """
    if isinstance(proof, bytes):
        try:
            proof = proof.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidSubmission(f"proof is not valid UTF-8 text (byte {exc.start})") from None
    if not isinstance(proof, str):
        raise InvalidSubmission(f"proof must be text, got {type(proof).__name__}")
    size = len(proof.encode("utf-8", errors="surrogatepass"))
    if size > max_bytes:
        raise InvalidSubmission(f"proof is {size} bytes; the limit is {max_bytes} bytes")
    if not proof.strip():
        raise InvalidSubmission("proof is empty")
    bad = next((c for c in proof if (ord(c) < 32 and c not in "\t\n\r\f") or 0xD800 <= ord(c) <= 0xDFFF), None)
    if bad is not None:
        raise InvalidSubmission(f"proof contains a control/binary character U+{ord(bad):04X}; send plain text")
    return proof


def verifier_class(system: str) -> type:
    """The verifier class for ``system`` (imported lazily; the registry is :mod:`proofgym.envs.systems`)."""
    if system not in SPECS:
        raise TaskFormatError(f"no verifier for system {system!r} yet; available: {', '.join(wired_systems())}")
    return SPECS[system].verifier_class()


def make_verifier(system: str, **kwargs: Any) -> Verifier:
    """Construct the verifier for ``system`` with keyword options."""
    return verifier_class(system)(**kwargs)


def audit_options(audit: str | None) -> dict[str, dict[str, Any]]:
    """Per-system verifier options (``system_kwargs``) that give every wired system the audit policy ``audit``.

    ``None`` leaves each verifier's default. A verifier with no independent checker (HOL Light)
    accepts the option and records ``audited=False``.

    Example:
        >>> audit_options("always")["dafny"]
        {'audit': 'always'}
    """
    if audit is None:
        return {}
    if audit not in AUDIT_MODES:
        raise ValueError(f"audit must be always, sample or never, got {audit!r}")
    return {system: {"audit": audit} for system in wired_systems()}


def require_provers(systems: Iterable[str], system_kwargs: Mapping[str, Mapping[str, Any]] | None = None) -> None:
    """Fail before a long run, not after it, when a system's prover is missing.

    Constructing a verifier finds its binaries (and starts no warm process), so this costs
    milliseconds; the exception's message names the missing binary and the apt package.

    Raises:
        VerifierError: a system's prover (or the sandbox it needs) cannot run; the same class as the
            verifier raised (``ProverNotFound`` for a missing binary), prefixed with the system.
        TaskFormatError: a system has no verifier.
    """
    for system in sorted(set(systems)):
        try:
            make_verifier(system, **dict((system_kwargs or {}).get(system, {}))).close()
        except VerifierError as exc:
            raise type(exc)(f"the {system} verifier cannot run: {exc}") from None
