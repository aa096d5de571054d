"""One suite validator for every system, on the verifier pool (STYLE.md #10: every suite validates itself).

A task enters a suite only if its reference proof is OK in isolation and every cheat probe of
its system (:attr:`proofgym.envs.systems.SystemSpec.cheats`: ``Admitted`` for Coq, ``CHEAT_TAC``
for HOL Light, the ``assume false`` variant for Dafny) is refused. Every check goes through a
:class:`~proofgym.envs.verifiers.pool.VerifierPool`, so that validation sees the verdicts and
harness failures training and evaluation will see; a builder that holds a warm verifier passes an
:class:`~proofgym.envs.verifiers.pool.inprocess.InProcessPool` over it.

Per task, in order: the probes whose text is fixed (they load the task's context, so that the
reference's wall time is the proof's alone: HOL Light's timeouts are set from it), then the
reference, then the probes built from the task (they may need the reference to resolve).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from proofgym.envs.systems import SPECS, CheatProbe
from proofgym.envs.types import CheckResult, Task, Verdict
from proofgym.envs.verifiers.pool import Boundary, HarnessFailure, VerifierPool

#: How many times its budget a reference proof that timed out gets for its second check.
RETRY_BUDGET = 4


@dataclass
class SuiteValidation:
    """What validation kept and why it dropped the rest.

    Attributes:
        kept: The tasks that validate, in the order given.
        excluded: Exclusion reason -> how many tasks it dropped.
        reasons: Task id -> its exclusion reason (a key of ``excluded``).
        rejected: Task id -> why it was dropped (one line, with the prover's words where there are some).
        false_rejections: ``"id: reasons"`` of honest references the integrity checks refused as CHEATING.
        false_rejected: The ids of those tasks.
        references: Task id -> the reference proof's result (its ``wall_s`` sets measured timeouts).
    """

    kept: list[Task] = field(default_factory=list)
    excluded: Counter = field(default_factory=Counter)
    reasons: dict[str, str] = field(default_factory=dict)
    rejected: dict[str, str] = field(default_factory=dict)
    false_rejections: list[str] = field(default_factory=list)
    false_rejected: set[str] = field(default_factory=set)
    references: dict[str, CheckResult] = field(default_factory=dict)


def _first_line(text: str, width: int = 80) -> str:
    return text.splitlines()[0][:width] if text else ""


def _system_probes(task: Task) -> Sequence[CheatProbe]:
    return SPECS[task.system].cheats if task.system in SPECS else ()


def _failure(broke: HarnessFailure) -> tuple[str, str]:
    """Why a task whose check met a harness failure is dropped: its boundary (``task``: the context does not load)."""
    if broke.boundary is Boundary.TASK:
        return f"context does not load: {_first_line(broke.message)}", broke.message
    return f"harness failure: {broke.boundary.value}", broke.message


@dataclass(frozen=True)
class _Validating:
    """One validation's settings (see :func:`validate_suite`) and what it found so far."""

    pool: VerifierPool
    probes_of: Callable[[Task], Sequence[CheatProbe]]
    probe_verifier: Any
    false_rejection: Callable[[CheckResult], bool] | None
    out: SuiteValidation

    def check(self, task: Task, proof: str) -> CheckResult | HarnessFailure:
        return self.pool.submit(task, proof).result().outcome

    def task(self, task: Task) -> tuple[str | None, str]:
        """Why ``task`` is dropped (the reason and one line of detail), or ``(None, "")`` when it is kept."""
        fixed = [p for p in self.probes_of(task) if p.text is not None]
        built = [p for p in self.probes_of(task) if p.text is None]
        answers = [(p, self.check(task, p.text or "")) for p in fixed]
        broke = next((got for _, got in answers if isinstance(got, HarnessFailure)), None)
        if broke is not None:
            return _failure(broke)
        reference = self.reference(task)
        if isinstance(reference, HarnessFailure):
            return _failure(reference)
        self.out.references[task.id] = reference
        if reference.verdict is not Verdict.OK:
            return self.refused(task, reference)
        answers += [(probe, self.check(task, probe.submission(task, self.probe_verifier))) for probe in built]
        return _probes_verdict(answers)

    def reference(self, task: Task) -> CheckResult | HarnessFailure:
        """The reference proof's verdict. A reference that ran out of time may only have met a loaded machine: it is
        checked once more with RETRY_BUDGET times its budget, so that what a suite keeps does not depend on the load
        of the machine that built it. A reference that is still too slow is excluded as TIMEOUT."""
        reference = self.check(task, task.reference_proof)
        if isinstance(reference, CheckResult) and reference.verdict is Verdict.TIMEOUT:
            reference = self.check(replace(task, timeout_s=task.timeout_s * RETRY_BUDGET), task.reference_proof)
        return reference

    def refused(self, task: Task, reference: CheckResult) -> tuple[str, str]:
        """A reference proof the prover did not accept; a CHEATING one may be a false rejection (counted)."""
        verdict = reference.verdict.value
        if reference.verdict is Verdict.CHEATING and (self.false_rejection is None or self.false_rejection(reference)):
            self.out.false_rejections.append(f"{task.id}: {'; '.join(reference.reasons)}")
            self.out.false_rejected.add(task.id)
        return f"reference proof {verdict}", (f"reference is {verdict}: {'; '.join(reference.reasons)[:200]} "
                                              f"{' | '.join(reference.messages)[:300]}")


def _probes_verdict(answers: list[tuple[CheatProbe, CheckResult | HarnessFailure]]) -> tuple[str | None, str]:
    """The first probe whose verdict is not the one it must be (or, with none named, is OK) drops the task."""
    for probe, got in answers:
        if isinstance(got, HarnessFailure):
            return _failure(got)
        verdict = got.verdict
        if probe.must_be is not None and verdict.value != probe.must_be:
            reason = f"{probe.name} was {verdict.value}, not {probe.must_be}"
            return reason, reason
        if probe.must_be is None and verdict is Verdict.OK:
            reason = f"{probe.name} accepted"
            return reason, reason
    return None, ""


def validate_suite(tasks: Sequence[Task], pool: VerifierPool, *, probes: Callable[[Task], Sequence[CheatProbe]]
                   | None = None, probe_verifier: Any = None, concurrency: int = 1,
                   false_rejection: Callable[[CheckResult], bool] | None = None,
                   progress: Callable[[str], None] | None = None) -> SuiteValidation:
    """Validate ``tasks`` on ``pool``; see the module docstring.

    Args:
        tasks: The candidate tasks (their ``timeout_s`` is the budget of every check).
        pool: Where the checks run.
        probes: The cheat probes of a task; default: its system's (:mod:`proofgym.envs.systems`).
        probe_verifier: Passed to a probe built from the task (Dafny's reads the program's symbols).
        concurrency: Tasks validated at once (each one's checks stay in order).
        false_rejection: Which CHEATING verdicts on a reference are the integrity checks refusing honest
            text (default: every one; Coq's: only its precheck's, as its kernel audit's are real findings).
        progress: Called with one line per task (``[3/40] id: kept``).

    A harness failure drops the task with its boundary as the reason (``task``: the context does not
    load); it is never taken for a verdict.
    """
    validating = _Validating(pool, probes or _system_probes, probe_verifier, false_rejection, SuiteValidation())
    out = validating.out
    done = 0
    with ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="proofgym-validate") as executor:
        for task, (reason, detail) in zip(tasks, executor.map(validating.task, tasks), strict=True):
            done += 1
            if reason is None:
                out.kept.append(task)
            else:
                out.excluded[reason] += 1
                out.reasons[task.id] = reason
                out.rejected[task.id] = detail or reason
            if progress is not None:
                progress(f"[{done}/{len(tasks)}] {task.id}: {'kept' if reason is None else 'excluded'}")
    return out
