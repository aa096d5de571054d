"""Core value types shared by envs, verifiers, rewards, evaluation and logging.

Prover outcomes are values (:class:`CheckResult` with one :class:`Verdict`);
infrastructure failures are exceptions (see :mod:`proofgym.envs.errors`).
"""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from proofgym.envs.errors import TaskFormatError, TaskTooLarge
from proofgym.envs.systems import SYSTEM_NAMES as SYSTEMS  # the systems a task may name (envs/systems.py)

REQUIRED_TASK_KEYS = ("id", "system", "context", "statement", "reference_proof", "category", "timeout_s")

#: The most characters (code points) each text field of a :class:`Task` may hold. A task over a
#: bound raises :class:`~proofgym.envs.errors.TaskTooLarge` when it is made (the verifier service
#: answers 413), because every check pays for its fields: a 64 MiB context once tied a worker up
#: for 297 s. The bounds are generous: the largest context in the suites proofgym builds is a
#: file prefix, at most the largest source file (HOL Light's ``Multivariate/topology.ml``,
#: 1.7 MB; s2n-bignum's ``x86/proofs/p384_montjscalarmul_alt.ml``, 0.8 MB; Coq's stdlib, 0.14 MB).
TASK_FIELD_LIMITS: Mapping[str, int] = MappingProxyType({
    "id": 4096,
    "system": 4096,
    "suite": 4096,
    "category": 4096,
    "statement": 1 << 20,
    "reference_proof": 4 << 20,
    "context": 8 << 20,
})
#: Metadata bounds: characters of its JSON text, and how deeply it may nest (suites use 2 levels).
MAX_METADATA_CHARS = 1 << 20
MAX_METADATA_DEPTH = 32


def nesting_depth(value: Any, limit: int) -> int:
    """How deeply dicts, lists and tuples nest in ``value`` (0 for a scalar), counted up to ``limit + 1``.

    Iterative, so that a hostile value cannot exhaust the stack; stops past ``limit``, so that a
    cyclic value ends too.
    """
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            children: Any = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        if deepest > limit:
            return deepest
        stack.extend((child, depth + 1) for child in children)
    return deepest


def _check_bounds(fields: Mapping[str, Any], metadata: Any, source: str) -> None:
    """Raise :class:`TaskTooLarge` for a text field or metadata beyond its bound."""
    for name, limit in TASK_FIELD_LIMITS.items():
        value = fields.get(name)
        if isinstance(value, str) and len(value) > limit:
            raise TaskTooLarge(f"{source}: {name!r} has {len(value)} characters; the limit is {limit} "
                               f"(proofgym.envs.types.TASK_FIELD_LIMITS)")
    if nesting_depth(metadata, MAX_METADATA_DEPTH) > MAX_METADATA_DEPTH:
        raise TaskTooLarge(f"{source}: 'metadata' nests more than {MAX_METADATA_DEPTH} levels deep")
    try:
        size = len(json.dumps(metadata, ensure_ascii=False, default=str))
    except (TypeError, ValueError, RecursionError) as exc:
        raise TaskFormatError(f"{source}: 'metadata' is not JSON data: {exc}") from None
    if size > MAX_METADATA_CHARS:
        raise TaskTooLarge(f"{source}: 'metadata' is {size} characters as JSON; the limit is {MAX_METADATA_CHARS}")


class Verdict(str, enum.Enum):
    """The s2n-bignum-bench verdict taxonomy, used everywhere in proofgym.

    ``ERROR`` means the submission could not be run (parse, type or syntax
    error). It is recorded like any other verdict, never dropped. A broken
    verifier is *not* a verdict: it raises :class:`~proofgym.envs.errors.VerifierError`.
    """

    OK = "OK"
    FAIL = "FAIL"
    CHEATING = "CHEATING"
    TIMEOUT = "TIMEOUT"
    ERROR = "ERROR"


class ErrorCategory(str, enum.Enum):
    """Why a proof failed, parsed from the prover's messages (for repair routing)."""

    NONE = "none"
    UNDEFINED = "undefined"  # unknown reference / unbound identifier (Selene's "undefined")
    LOGIC = "logic"  # a tactic failed or goals remain (Selene's "logic")
    SYNTAX = "syntax"  # the prover could not parse the text
    TYPE = "type"  # ill-typed term
    TIMEOUT = "timeout"
    CHEATING = "cheating"
    RESOURCE = "resource"  # memory / process limits hit
    OTHER = "other"
    # Dafny's taxonomy (SkillForge's regex stage); TIMEOUT above is shared.
    SPEC_GAP = "spec_gap"  # a postcondition might not hold (BP5003)
    INVARIANT_MISSING = "invariant_missing"  # a loop invariant fails on entry or is not maintained (BP5004/BP5005)
    BODY_ERROR = "body_error"  # assertion, termination, call precondition, division, index...
    TYPE_ERROR = "type_error"  # unresolved identifier, type mismatch (resolution)
    PARSE_ERROR = "parse_error"  # the program does not parse
    UNKNOWN = "unknown"  # no pattern matched: never routed silently


@dataclass(frozen=True)
class Task:
    """One proof obligation, as stored in a suite's JSONL file.

    Attributes:
        id: Stable identifier, e.g. ``coq.stdlib.Lists.List.app_nil_r``.
        system: One of :data:`SYSTEMS`.
        context: Source text that comes before the statement (for Coq: the
            original file up to the lemma, including ``Require``s).
        statement: The statement as the prover sees it, e.g.
            ``Lemma foo (n : nat) : n + 0 = n.``
        reference_proof: The text after the statement, normally ``Proof. ... Qed.``
        category: e.g. ``P1``/``P2``/``P3``/``D``.
        timeout_s: Wall-clock budget for one check of this task.
        suite: Name of the suite the task came from ("" if none).
        metadata: Free-form extras (source file, line, original qualified name...).

    Every text field and the metadata are bounded (:data:`TASK_FIELD_LIMITS`,
    :data:`MAX_METADATA_CHARS`): a larger task raises :class:`~proofgym.envs.errors.TaskTooLarge`.
    """

    id: str
    system: str
    context: str
    statement: str
    reference_proof: str
    category: str = ""
    timeout_s: float = 30.0
    suite: str = ""
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_bounds({name: getattr(self, name) for name in TASK_FIELD_LIMITS}, self.metadata,
                      f"task {self.id[:200]!r}" if isinstance(self.id, str) else "task")

    @classmethod
    def from_dict(cls, raw: Any, *, source: str = "<task>") -> Task:
        """Build a task from a decoded JSON object, with errors that say what is wrong."""
        if not isinstance(raw, dict):
            raise TaskFormatError(f"{source}: a task must be a JSON object, got {type(raw).__name__}")
        missing = [k for k in REQUIRED_TASK_KEYS if k not in raw]
        if missing:
            raise TaskFormatError(
                f"{source}: missing required key(s) {', '.join(missing)}; "
                f"a task needs {', '.join(REQUIRED_TASK_KEYS)}"
            )
        for key in ("id", "system", "context", "statement", "reference_proof", "category"):
            if not isinstance(raw[key], str):
                raise TaskFormatError(f"{source}: key {key!r} must be a string, got {type(raw[key]).__name__}")
        if not raw["id"].strip():
            raise TaskFormatError(f"{source}: key 'id' is empty")
        if raw["system"] not in SYSTEMS:
            raise TaskFormatError(
                f"{source}: unknown system {raw['system']!r}; known systems: {', '.join(SYSTEMS)}"
            )
        if not raw["statement"].strip():
            raise TaskFormatError(f"{source}: key 'statement' is empty")
        timeout = raw["timeout_s"]
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not (0 < timeout <= 86400):
            raise TaskFormatError(f"{source}: 'timeout_s' must be a number of seconds in (0, 86400], got {timeout!r}")
        metadata = raw.get("metadata", {})
        if not isinstance(metadata, dict):
            raise TaskFormatError(f"{source}: 'metadata' must be an object")
        known = set(REQUIRED_TASK_KEYS) | {"suite", "metadata"}
        extras = {k: v for k, v in raw.items() if k not in known}
        # __post_init__ checks them too; here the message names where the task came from.
        _check_bounds(raw, {**extras, **metadata}, source)
        return cls(
            id=raw["id"],
            system=raw["system"],
            context=raw["context"],
            statement=raw["statement"],
            reference_proof=raw["reference_proof"],
            category=raw["category"],
            timeout_s=float(timeout),
            suite=str(raw.get("suite", "")),
            metadata={**extras, **metadata},
        )

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["metadata"] = dict(self.metadata)
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False)


@dataclass(frozen=True)
class Goal:
    """One open goal: hypotheses and conclusion as the prover prints them."""

    hypotheses: tuple[str, ...]
    conclusion: str

    def pretty(self) -> str:
        hyps = "\n".join(self.hypotheses)
        return f"{hyps}\n{'=' * 28}\n{self.conclusion}" if hyps else f"{'=' * 28}\n{self.conclusion}"


@dataclass(frozen=True)
class CheckResult:
    """The verifier's answer for one submission.

    Attributes:
        verdict: The single verdict.
        reasons: Why (cheat reasons, failure summary). Stable short strings.
        messages: Prover messages, verbatim (errors, warnings).
        remaining_goals: Goals left open where the prover reports them.
        error_category: Parsed error kind, for repair routing.
        wall_s: Wall-clock seconds of the check.
        cpu_s: CPU seconds of the prover processes, where measured.
        cached: Whether this result came from a cache.
        backend: Which path produced the verdict (e.g. ``coqidetop``, ``coqc``).
        prover_version: Version string of the prover that produced the verdict.
        audited: Whether an independent audit (e.g. ``coqchk``) confirmed an OK.
    """

    verdict: Verdict
    reasons: tuple[str, ...] = ()
    messages: tuple[str, ...] = ()
    remaining_goals: tuple[Goal, ...] = ()
    error_category: ErrorCategory = ErrorCategory.NONE
    # Measurements and provenance do not take part in equality: two checks of the same
    # proof are equal results even if they took different times or one was audited.
    wall_s: float = field(default=0.0, compare=False)
    cpu_s: float = field(default=0.0, compare=False)
    cached: bool = field(default=False, compare=False)
    backend: str = field(default="", compare=False)
    prover_version: str = ""
    audited: bool = field(default=False, compare=False)

    @property
    def ok(self) -> bool:
        return self.verdict is Verdict.OK

    def feedback(self, max_chars: int = 2000) -> str:
        """A compact, prover-style feedback string for the next attempt's prompt."""
        parts = [f"Verdict: {self.verdict.value}"]
        if self.error_category is not ErrorCategory.NONE:
            parts.append(f"Error category: {self.error_category.value}")
        if self.reasons:
            parts.append("Reasons: " + "; ".join(self.reasons))
        if self.messages:
            parts.append("\n".join(self.messages))
        if self.remaining_goals:
            parts.append("Remaining goals:\n" + "\n\n".join(g.pretty() for g in self.remaining_goals[:3]))
        text = "\n".join(parts)
        return text if len(text) <= max_chars else text[: max_chars - 3] + "..."

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict.value,
            "reasons": list(self.reasons),
            "messages": list(self.messages),
            "remaining_goals": [g.pretty() for g in self.remaining_goals],
            "error_category": self.error_category.value,
            "wall_s": round(self.wall_s, 4),
            "cpu_s": round(self.cpu_s, 4),
            "cached": self.cached,
            "backend": self.backend,
            "prover_version": self.prover_version,
            "audited": self.audited,
            # the same goals, structured: a hypothesis may span lines, so the text above is not parsed back
            "goals": [{"hypotheses": list(g.hypotheses), "conclusion": g.conclusion} for g in self.remaining_goals],
        }

    @classmethod
    def from_dict(cls, row: Mapping[str, Any]) -> CheckResult:
        """The inverse of :meth:`to_dict` (a service answer, a results row).

        Goals come from ``goals`` when present, else from the ``remaining_goals`` text (hypotheses
        above a rule of ``=``, the conclusion below). An unknown ``error_category`` (a newer writer)
        reads as ``unknown``; an unknown verdict raises :class:`~proofgym.envs.errors.TaskFormatError`.
        """

        try:
            verdict = Verdict(row["verdict"])
        except (KeyError, ValueError):
            raise TaskFormatError(f"not a check result: verdict {row.get('verdict')!r}") from None
        try:
            category = ErrorCategory(row.get("error_category", "none"))
        except ValueError:
            category = ErrorCategory.UNKNOWN
        if isinstance(row.get("goals"), list):
            goals = tuple(Goal(tuple(g.get("hypotheses", ())), str(g.get("conclusion", ""))) for g in row["goals"])
        else:
            parsed = []
            for text in row.get("remaining_goals", ()):
                hyps, rule, concl = str(text).rpartition("\n" + "=" * 28 + "\n")
                if not rule:
                    hyps, _, concl = str(text).rpartition("=" * 28)
                parsed.append(Goal(tuple(h for h in hyps.strip("\n").split("\n") if h), concl.strip("\n")))
            goals = tuple(parsed)
        return cls(verdict=verdict, reasons=tuple(row.get("reasons", ())), messages=tuple(row.get("messages", ())),
                   remaining_goals=goals, error_category=category, wall_s=float(row.get("wall_s", 0.0) or 0.0),
                   cpu_s=float(row.get("cpu_s", 0.0) or 0.0), cached=bool(row.get("cached", False)),
                   backend=str(row.get("backend", "")), prover_version=str(row.get("prover_version", "")),
                   audited=bool(row.get("audited", False)))

    def with_timing(self, wall_s: float, cpu_s: float | None = None) -> CheckResult:
        return dataclasses.replace(self, wall_s=wall_s, cpu_s=self.cpu_s if cpu_s is None else cpu_s)
