"""The Verifier protocol and the registry of verifiers by system."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol, runtime_checkable

from proofgym.envs.errors import InvalidSubmission, TaskFormatError, VerifierError
from proofgym.envs.systems import SPECS, wired_systems
from proofgym.envs.types import CheckResult, Task

#: Largest submission sent to a prover. Larger ones are rejected before any process starts.
MAX_PROOF_BYTES = 256 * 1024


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


class ProcessOwner:
    """Lifecycle shared by verifiers that own prover processes (STYLE.md #6).

    Subclasses set ``self._lock`` (an RLock) and ``self._closed = False`` in ``__init__``
    and implement :meth:`_shutdown`, which runs once, after the verifier is marked closed.
    """

    _lock: Any
    _closed: bool

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Kill every process this verifier started and remove its temp dirs. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._shutdown()

    def _shutdown(self) -> None:
        raise NotImplementedError

    def __del__(self) -> None:  # last resort; close() is the contract
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


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
