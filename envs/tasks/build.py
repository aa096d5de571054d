"""Build and validate suites (``proofgym build coq-stdlib``).

A task enters a suite only if (STYLE.md #10, Selene's correctness check):
1. its reference proof verifies in isolation: warm check plus the coqc + coqchk audit;
2. ``Admitted.`` is rejected;
3. ``exact <the original lemma>`` is rejected (the stdlib must not leak through ``Require``).
Every exclusion is counted with its reason and listed by task id (:func:`exclusion_reason`,
:func:`render_exclusions`: one wording for every builder), and the report is written beside the suite.
A reference proof from a library is honest by construction: one that the checks refuse is *excluded*
with what it relies on, never called CHEATING.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proofgym.envs.errors import ProofgymError, VerifierError
from proofgym.envs.progress import ProgressBar
from proofgym.envs.systems import SPECS, CheatProbe
from proofgym.envs.tasks.coq_extract import extract_stdlib, sample_suite
from proofgym.envs.tasks.suites import suite_dir, write_tasks
from proofgym.envs.types import Task, Verdict
from proofgym.envs.verifiers.coq.verifier import CoqVerifier
from proofgym.envs.verifiers.pool.inprocess import InProcessPool
from proofgym.envs.verifiers.validation import SuiteValidation, validate_suite


def exclusion_reason(verdict: str, reasons: Sequence[str] = ()) -> str:
    """How a build report names an excluded task whose reference proof was refused: a library's proof is honest by
    construction, so a refusal says what it relies on that the task does not allow, never "CHEATING".

    >>> exclusion_reason("CHEATING", ["relies on axiom A outside the allow-list"])
    'excluded: relies on what the task does not allow (relies on axiom A outside the allow-list)'
    >>> exclusion_reason("TIMEOUT", ["no verdict within timeout_s=10"])
    'excluded: reference proof TIMEOUT (no verdict within timeout_s=10)'
    """
    detail = "; ".join(r for r in reasons if r)[:300]
    head = _RELIES if verdict == "CHEATING" else f"reference proof {verdict}"
    return f"excluded: {head} ({detail})" if detail else f"excluded: {head}"


_RELIES = "relies on what the task does not allow"


def exclusion_key(reason: str) -> str:
    """The group an exclusion is counted under in a report's summary (whose lines say "excluded N:" already): an
    :func:`exclusion_reason` (also after an ``audit: `` prefix) without its ``excluded:`` and its detail; any
    other reason as it is."""
    audit, bare = ("audit: ", reason[len("audit: "):]) if reason.startswith("audit: ") else ("", reason)
    if bare.startswith("excluded: "):
        return audit + bare[len("excluded: "):].split(" (", 1)[0]
    return reason


def render_exclusions(exclusions: Mapping[str, str]) -> list[str]:
    """One line per excluded task, by id: ``  <id>: <reason>`` (a build report lists every one)."""
    return [f"  {task_id}: {reason}" for task_id, reason in sorted(exclusions.items())]


@dataclass
class BuildReport:
    """What ``proofgym build`` did: counts, exclusions and where the suite is."""

    suite: str
    out: Path
    extracted: dict[str, int] = field(default_factory=dict)
    extraction_exclusions: dict[str, int] = field(default_factory=dict)
    sampled: dict[str, int] = field(default_factory=dict)
    kept: dict[str, int] = field(default_factory=dict)
    excluded: Counter = field(default_factory=Counter)
    false_rejections: list[str] = field(default_factory=list)
    validated: bool = True
    exclusions: dict[str, str] = field(default_factory=dict)  # task id -> why it was excluded

    def render(self) -> str:
        lines = [f"suite {self.suite}: {sum(self.kept.values())} tasks -> {self.out}"]
        lines.append("extracted per category: " + ", ".join(f"{k} {v}" for k, v in sorted(self.extracted.items())))
        if self.extraction_exclusions:
            lines.append("excluded at extraction: " + ", ".join(
                f"{k} {v}" for k, v in sorted(self.extraction_exclusions.items())))
        lines.append("sampled: " + ", ".join(f"{k} {v}" for k, v in sorted(self.sampled.items())))
        lines.append("kept after validation: " + ", ".join(f"{k} {v}" for k, v in sorted(self.kept.items())))
        if not self.validated:
            lines.append("NOT validated (--no-validate)")
        for reason, n in self.excluded.most_common():
            lines.append(f"  excluded {n:4d}: {reason}")
        if self.false_rejections:
            lines.append(f"reference proofs rejected by the whitelist (false rejections): {len(self.false_rejections)}")
        if self.exclusions:
            lines.append(f"excluded tasks ({len(self.exclusions)}):")
            lines += render_exclusions(self.exclusions)
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["out"] = str(self.out)
        d["excluded"] = dict(self.excluded)
        return d


def _original_cheat(task: Task) -> str:
    qualid = str(task.metadata.get("qualid") or "")
    return f"Proof. intros; first [exact {qualid} | apply {qualid} | eapply {qualid}]. Qed."


# -- worker --------------------------------------------------------------------------------------------
_VERIFIER: dict[str, Any] = {}


def _validate_group(task_dicts: list[dict[str, Any]], verifier_kwargs: dict[str, Any] | None = None
                    ) -> list[tuple[dict[str, Any], str | None, bool]]:
    """Validate tasks of one source file in order (one warm session extends along the file).

    The reference and the cheats (``Admitted``; ``exact`` the original lemma, when the task names it) go
    through the one suite validator (:func:`proofgym.envs.verifiers.validation.validate_suite`) on a
    pool over this worker's verifier. A kept task whose metadata names its original file (``library``,
    as project suites do) is also refused when Coq says its context loads that file: the original
    lemma and what follows it would then be reachable. The kernel audit of the references (``coqc`` +
    ``coqchk``) runs once the warm checks are done, one compile for the group's file where it can
    (:meth:`~proofgym.envs.verifiers.coq.CoqVerifier.audit_references`).
    """
    kwargs = {"audit": "always", "max_sessions": 2, **(verifier_kwargs or {})}
    # The references' kernel audit runs after the warm checks, one compile per file where it can
    # (CoqVerifier.audit_references): the warm checks themselves are not audited one by one.
    audit = kwargs["audit"] != "never"
    kwargs["audit"] = "never"
    if "coq" not in _VERIFIER:
        _VERIFIER["coq"] = CoqVerifier(**kwargs)
    verifier = _VERIFIER["coq"]
    tasks = [Task.from_dict(raw) for raw in task_dicts]
    with InProcessPool({"coq": verifier}) as pool:
        checked = validate_suite(tasks, pool, probes=_coq_probes, false_rejection=lambda ref: ref.backend == "precheck")
        for task_id, ref in checked.references.items():
            # A refused library reference says what it relies on (issue 26: never "reference proof CHEATING").
            if checked.reasons.get(task_id, "").startswith("reference proof") and ref.verdict is not Verdict.OK:
                checked.reasons[task_id] = exclusion_reason(ref.verdict.value, ref.reasons)
        audited: dict[str, str | None] = {}
        if audit:
            passed = [t for t in tasks if checked.reasons.get(t.id) is None]
            try:
                for task_id, result in verifier.audit_references(passed).items():
                    audited[task_id] = None if result is None else \
                        "audit: " + exclusion_reason(result.verdict.value, result.reasons)
            except (VerifierError, OSError) as exc:  # a broken verifier is rebuilt for the next group
                audited = {t.id: f"harness failure: {type(exc).__name__}" for t in passed}
                verifier = _rebuilt(kwargs)
        # The extras run while the pool is open: its thread started the prover sessions, and a
        # sandboxed prover dies with the thread that started it (bwrap --die-with-parent).
        return _group_rows(task_dicts, tasks, checked, audited, verifier, kwargs)


def _rebuilt(kwargs: dict[str, Any]) -> CoqVerifier:
    """A fresh verifier for what follows, in place of a broken one."""
    _VERIFIER.pop("coq").close()
    _VERIFIER["coq"] = CoqVerifier(**kwargs)
    return _VERIFIER["coq"]


def _coq_probes(task: Task) -> list[CheatProbe]:
    """The cheats a Coq task must refuse: the system's, and ``exact`` the original lemma when the task names it."""
    cheats = list(SPECS["coq"].cheats)
    if task.metadata.get("qualid"):
        cheats.append(CheatProbe("exact <original lemma>", text=_original_cheat(task)))
    return cheats


def _group_rows(task_dicts: list[dict[str, Any]], tasks: list[Task], checked: SuiteValidation,
                audited: dict[str, str | None], verifier: CoqVerifier, kwargs: dict[str, Any]
                ) -> list[tuple[dict[str, Any], str | None, bool]]:
    """``(task row, why it is excluded or None, whether a false rejection)`` per task; a kept task is refused when its
    context loads its original file (``metadata.library``), and carries its allow-list (``allowed_axioms``)."""
    out: list[tuple[dict[str, Any], str | None, bool]] = []
    for raw, task in zip(task_dicts, tasks, strict=True):
        reason = checked.reasons.get(task.id)
        if reason is not None:
            whitelist = task.id in checked.false_rejected
            out.append((raw, "false rejection: " + reason if whitelist else reason, whitelist))
            if reason.startswith("harness failure"):  # a broken verifier is rebuilt for the next task
                verifier = _rebuilt(kwargs)
            continue
        if audited.get(task.id) is not None:
            out.append((raw, audited[task.id], False))
            continue
        try:
            library = str(task.metadata.get("library") or "")
            if library and verifier.context_loads_library(task, library):
                out.append((raw, "context loads the original file (leak through Require)", False))
                continue
            allowed = sorted(verifier.allowed_axioms(task))
            raw = {**raw, "metadata": {**raw.get("metadata", {}), "allowed_axioms": allowed}}
            out.append((raw, None, False))
        except (VerifierError, OSError) as exc:
            out.append((raw, f"harness failure: {type(exc).__name__}", False))
            verifier = _rebuilt(kwargs)
        except ProofgymError as exc:
            out.append((raw, f"task does not load: {str(exc)[:80]}", False))
    return out


def validate_tasks(tasks: list[Task], *, workers: int = 2, progress: bool = True,
                   verifier_kwargs: dict[str, Any] | None = None, max_group: int = 0,
                   on_group: Callable[[list[str], list[Task], Counter, list[str]], None] | None = None,
                   stop: Callable[[], bool] | None = None,
                   exclusions: dict[str, str] | None = None) -> tuple[list[Task], Counter, list[str]]:
    """Validate tasks in parallel; returns (kept, exclusion reasons, false-rejection ids).

    Tasks go to the workers a source file at a time, in file order (one warm session extends along
    the file, one audit compile covers it), in pieces of at most ``max_group`` tasks (0: whole files).
    ``verifier_kwargs`` are :class:`~proofgym.envs.verifiers.coq.CoqConfig` options for every
    worker's verifier, e.g. a project's load path as ``extra_args``. ``on_group(ids, kept, excluded,
    false_rejections)`` is called as each piece is done (a build writes its ledger there); once ``stop()``
    is true, no piece that has not started yet is validated. ``exclusions``, when given, gets every excluded
    task's id and full reason (the counter groups them by :func:`exclusion_key`).
    """
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for t in sorted(tasks, key=lambda t: (str(t.metadata.get("file", "")), int(t.metadata.get("line", 0)))):
        groups[str(t.metadata.get("file", t.id))].append(t.to_dict())
    pieces = [group[i:i + max_group] if max_group else group for group in groups.values()
              for i in range(0, len(group), max_group or len(group))]
    pieces.sort(key=len, reverse=True)  # the longest first: two workers finish together
    kept: list[Task] = []
    excluded: Counter = Counter()
    false_rejections: list[str] = []
    bar = ProgressBar("validate", len(tasks), enabled=progress)
    with bar, ProcessPoolExecutor(max_workers=max(1, workers)) as pool:
        futures = {pool.submit(_validate_group, piece, verifier_kwargs): piece for piece in pieces}
        for fut in as_completed(futures):
            piece = futures[fut]
            if fut.cancelled():
                continue
            got_kept: list[Task] = []
            got_excluded: Counter = Counter()
            got_false: list[str] = []
            try:
                results = fut.result()
            except Exception as exc:  # noqa: BLE001 - a dead worker loses its group, not the build
                got_excluded[f"harness failure: {type(exc).__name__}"] += len(piece)
                if exclusions is not None:
                    exclusions.update((raw["id"], f"harness failure: {type(exc).__name__}") for raw in piece)
                bar.advance(len(piece))
                results = []
            for raw, reason, whitelist in results:
                if reason is None:
                    got_kept.append(Task.from_dict(raw))
                else:
                    if exclusions is not None:
                        exclusions[raw["id"]] = reason
                    loads = reason.startswith(("task does not load", "context does not load"))
                    got_excluded[reason.split(":")[0] if loads else exclusion_key(reason)] += 1
                    if whitelist:
                        got_false.append(raw["id"])
                bar.advance(description=f"kept {len(kept) + len(got_kept)}, "
                                        f"excluded {sum(excluded.values()) + sum(got_excluded.values())}")
            kept += got_kept
            excluded.update(got_excluded)
            false_rejections += got_false
            if on_group is not None:
                on_group([raw["id"] for raw in piece], got_kept, got_excluded, got_false)
            if stop is not None and stop():
                for other in futures:
                    other.cancel()  # only those not started yet: a running piece finishes and is kept
    kept.sort(key=lambda t: t.id)
    return kept, excluded, sorted(false_rejections)


def build_coq_stdlib(*, out: Path | None = None, seed: int = 0, workers: int = 2, validate: bool = True,
                     limit: int = 0, progress: bool = True) -> BuildReport:
    """Extract, sample (160/120/80) and validate the Coq standard library suite."""

    out = out or suite_dir() / "coq-stdlib.jsonl"
    tasks, stats = extract_stdlib(progress=progress)
    sampled = sample_suite(tasks, seed=seed)
    if limit:
        sampled = sampled[:limit]
    report = BuildReport("coq-stdlib", out)
    report.extracted = {**dict(stats.categories)}
    report.extraction_exclusions = dict(getattr(stats, "excluded", {}) or {})
    report.sampled = dict(Counter(t.category for t in sampled))
    if validate:
        kept, excluded, false_rejections = validate_tasks(sampled, workers=workers, progress=progress,
                                                          exclusions=report.exclusions)
        report.excluded, report.false_rejections = excluded, false_rejections
    else:
        kept, report.validated = sampled, False
    report.kept = dict(Counter(t.category for t in kept))
    write_tasks(out, kept)
    out.with_suffix(".report.json").write_text(json.dumps(report.to_dict(), indent=2) + "\n", encoding="utf-8")
    return report
