"""Build and validate HOL Light suites (``proofgym build hol-light``).

The default suite comes from the HOL Light library Debian installs (``/usr/share/hol-light``):
a few files that load fast on top of plain HOL, extracted by :mod:`proofgym.envs.tasks.hol_extract`.
A task enters the suite only if (STYLE.md #10):

1. its reference proof is ``OK`` (and its measured time sets the timeout, :class:`TimeoutRule`);
2. ``CHEAT_TAC`` is ``CHEATING``.

A reference proof that comes back ``CHEATING`` is a false rejection of the whitelist: it is
counted (the report's ``false_rejections``) and the task is left out. The report lists every task left
out by id with its reason (:func:`proofgym.envs.tasks.build.exclusion_reason`): a library's proof is
honest by construction, so an exclusion says what the proof relies on that the task does not allow, and
is never called CHEATING.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from proofgym.envs.errors import ProofgymError, TaskFormatError
from proofgym.envs.tasks.build import exclusion_key, exclusion_reason, render_exclusions
from proofgym.envs.tasks.hol_extract import ExtractionReport, TimeoutRule, extract_file
from proofgym.envs.tasks.suites import suite_dir, write_tasks
from proofgym.envs.types import Task
from proofgym.envs.verifiers.hol_light import HolLightVerifier, hol_light_version
from proofgym.envs.verifiers.pool.inprocess import InProcessPool
from proofgym.envs.verifiers.validation import validate_suite

SUITE_NAME = "hol-light"

#: Library files of the default suite: no ``needs``, quick to load, proofs that run in seconds.
DEFAULT_FILES = ("100/arithmetic.ml", "100/cantor.ml", "100/subsequence.ml", "Library/binary.ml")


@dataclass
class HolBuildReport:
    """What ``proofgym build hol-light`` did."""

    suite: str
    out: str
    hol_dir: str
    files: list[str]
    hol_light_version: str = ""
    extracted: int = 0
    extraction_dropped: dict[str, int] = field(default_factory=dict)
    kept: dict[str, int] = field(default_factory=dict)
    excluded: dict[str, int] = field(default_factory=dict)
    false_rejections: list[str] = field(default_factory=list)
    exclusions: dict[str, str] = field(default_factory=dict)  # task id -> why it was left out
    references_checked: int = 0
    validated: bool = True
    seconds: float = 0.0

    @property
    def false_rejection_rate(self) -> float:
        return len(self.false_rejections) / self.references_checked if self.references_checked else 0.0

    def render(self) -> str:
        lines = [f"suite {self.suite}: {sum(self.kept.values())} tasks -> {self.out}",
                 f"from {len(self.files)} files of {self.hol_dir} (HOL Light {self.hol_light_version}); "
                 f"{self.extracted} extracted",
                 "kept per category: " + ", ".join(f"{k} {v}" for k, v in sorted(self.kept.items()))]
        for reason, n in sorted(self.extraction_dropped.items()):
            lines.append(f"  dropped at extraction {n:4d}: {reason}")
        for reason, n in sorted(self.excluded.items(), key=lambda kv: -kv[1]):
            lines.append(f"  excluded {n:4d}: {reason}")
        lines += render_exclusions(self.exclusions)
        if not self.validated:
            lines.append("NOT validated (--no-validate)")
        else:
            lines.append(f"whitelist false rejections of reference proofs: {len(self.false_rejections)}/"
                         f"{self.references_checked} ({100 * self.false_rejection_rate:.1f}%)")
        lines.append(f"took {self.seconds:.0f} s")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["false_rejection_rate"] = self.false_rejection_rate
        return d


def extract_library(hol_dir: str | Path, files: Sequence[str], *, arch: str = "hol", suite: str = SUITE_NAME,
                    report: ExtractionReport | None = None) -> list[Task]:
    """Unvalidated tasks from library files (paths relative to ``hol_dir``), de-duplicated across files."""
    hol_dir = Path(hol_dir)
    seen: set[str] = set()
    tasks: list[Task] = []
    for rel in files:
        path = hol_dir / rel
        if not path.is_file():
            raise TaskFormatError(f"{path} does not exist; is HOL Light installed at {hol_dir}?")
        tasks += extract_file(path, rel=rel, arch=arch, suite=suite, report=report, seen_goals=seen)
    return tasks


def validate_tasks(tasks: Sequence[Task], verifier: Any, *, rule: TimeoutRule, workers: int = 1,
                   check_timeout_s: float = 900.0, progress: Callable[[str], None] | None = None,
                   excluded: Counter | None = None, false_rejections: list[str] | None = None,
                   exclusions: dict[str, str] | None = None) -> list[Task]:
    """Keep the tasks whose reference proof is OK and whose CHEAT_TAC is CHEATING; set their timeouts.

    The checks run through the one suite validator (:func:`proofgym.envs.verifiers.validation.validate_suite`)
    on a pool over ``verifier``, with ``check_timeout_s`` for each; a kept task's timeout is ``rule`` of its
    reference proof's measured time. Each task left out goes into ``exclusions`` (id -> reason, never
    "CHEATING": :func:`~proofgym.envs.tasks.build.exclusion_reason`) and is counted in ``excluded`` under
    that reason's group.
    """
    excluded = excluded if excluded is not None else Counter()
    false_rejections = false_rejections if false_rejections is not None else []
    probes = [replace(task, timeout_s=check_timeout_s) for task in tasks]
    with InProcessPool({"hol_light": verifier}, workers=max(1, workers)) as pool:
        checked = validate_suite(probes, pool, concurrency=max(1, workers), progress=progress)
    for task_id, reason in hol_exclusions(checked).items():
        excluded[exclusion_key(reason)] += 1
        if exclusions is not None:
            exclusions[task_id] = reason
    false_rejections.extend(checked.false_rejections)
    kept_ids = {task.id for task in checked.kept}
    kept: list[Task] = []
    for task in tasks:
        if task.id not in kept_ids:
            continue
        ref = checked.references[task.id]
        kept.append(replace(task, timeout_s=rule(ref.wall_s),
                            metadata={**task.metadata, "reference_s": round(ref.wall_s, 3),
                                      "prover_version": ref.prover_version}))
    return kept


def hol_exclusions(checked: Any) -> dict[str, str]:
    """Task id -> why validation left it out, worded by :func:`~proofgym.envs.tasks.build.exclusion_reason`.

    ``checked`` is a :class:`~proofgym.envs.verifiers.validation.SuiteValidation`. A refused reference proof is
    named by what it relies on (its verdict's reasons); a cheat probe that was not refused or a harness failure
    keeps the validator's own words.
    """
    out: dict[str, str] = {}
    for task_id, reason in checked.reasons.items():
        ref = checked.references.get(task_id)
        if ref is not None and ref.verdict.value != "OK":
            out[task_id] = exclusion_reason(ref.verdict.value, list(ref.reasons))
        else:
            detail = (checked.rejected.get(task_id) or reason).splitlines()[0][:200] if checked.rejected.get(task_id) \
                else reason
            out[task_id] = f"excluded: {reason}" if detail == reason else f"excluded: {reason} ({detail})"
    return out


def build_hol_light(out: Path | None = None, *, hol_dir: str = "/usr/share/hol-light",
                    files: Sequence[str] = DEFAULT_FILES, validate: bool = True, workers: int = 1,
                    rule: TimeoutRule | None = None, limit: int | None = None, progress: bool = True,
                    verifier: Any = None) -> HolBuildReport:
    """Extract, validate and write the default HOL Light suite (``<suite_dir>/hol-light.jsonl``)."""
    start = time.monotonic()
    out = Path(out) if out is not None else suite_dir() / f"{SUITE_NAME}.jsonl"
    rule = rule or TimeoutRule()
    extraction = ExtractionReport()
    tasks = extract_library(hol_dir, files, report=extraction)
    if limit:
        tasks = tasks[:limit]
    report = HolBuildReport(suite=SUITE_NAME, out=str(out), hol_dir=str(hol_dir), files=list(files),
                            hol_light_version=hol_light_version(hol_dir), extracted=len(tasks),
                            extraction_dropped=dict(extraction.dropped), validated=validate)
    say = (lambda line: print(line, file=sys.stderr, flush=True)) if progress else None
    if validate:
        excluded: Counter = Counter()
        owned = verifier is None
        verifier = verifier or HolLightVerifier(hol_dir=hol_dir, progress=progress)
        try:
            verifier.server("plain")  # start-up is not part of any reference proof's time
            kept = validate_tasks(tasks, verifier, rule=rule, workers=workers, progress=say, excluded=excluded,
                                  false_rejections=report.false_rejections, exclusions=report.exclusions)
        except ProofgymError:
            raise
        finally:
            if owned:
                verifier.close()
        report.excluded = dict(excluded)
        report.references_checked = len(tasks) - sum(v for k, v in excluded.items() if "context does not load" in k)
    else:
        kept = [replace(t, timeout_s=rule.lo_s) for t in tasks]
    report.kept = dict(Counter(t.category for t in kept))
    write_tasks(out, kept)
    report.seconds = time.monotonic() - start
    out.with_name(f"{SUITE_NAME}.report.json").write_text(json.dumps(report.to_dict(), indent=2), encoding="utf-8")
    return report
