"""proofgym's exception hierarchy. Infrastructure failures are exceptions, never verdicts.

Every exception message is one line that says what to do next.
"""

from __future__ import annotations


class ProofgymError(Exception):
    """Base class of everything proofgym raises on purpose."""


class TaskFormatError(ProofgymError, ValueError):
    """A task or suite file is malformed (bad JSON, missing keys, wrong types)."""


class TaskTooLarge(TaskFormatError):
    """A task field is larger than its documented bound (``proofgym.envs.types.TASK_FIELD_LIMITS``).

    The verifier service answers it with 413. The bounds are far above any real suite's fields: a
    task this large is a mistake or an attempt to tie up the verifiers.
    """


class InvalidSubmission(ProofgymError, ValueError):
    """A submission that cannot be sent to a prover at all (empty, binary, too large).

    Environments turn this into an ``ERROR`` verdict; the CLI exits non-zero.
    """


class VerifierError(ProofgymError):
    """The verifier itself broke. Never a verdict; in training its reward is ``None``."""


class ProverNotFound(VerifierError):
    """A prover binary is missing. The message names the package to install."""


class VerifierCrashed(VerifierError):
    """A prover process died or spoke garbage for reasons not caused by the submission."""


class SandboxError(VerifierError):
    """The sandbox could not be set up (e.g. bubblewrap missing or not permitted)."""


class DependencyNotInstalled(ProofgymError, ImportError):
    """An optional Python dependency is missing; the message names the extra to install."""
