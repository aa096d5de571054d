"""Parse what Dafny 2.3 prints, and the error taxonomy used for repair routing.

Both paths print the same per-implementation trace (the CLI with ``/trace``, DafnyServer always)::

    Verifying Impl$$_module.__default.Abs ...
      [0.299 s, 2 proof obligations]  verified

and the same diagnostics (``prog.dfy(9,0): Error BP5003: A postcondition might not hold ...``).
The CLI adds a summary line, ``Dafny program verifier finished with 1 verified, 0 errors``,
which must be matched *exactly*: ``10 errors`` contains the string ``0 errors``.

The taxonomy follows SkillForge's regex stage (``spec_gap``, ``invariant_missing``,
``body_error``, ``type_error``, plus ``parse_error`` and ``timeout``); a diagnostic that no
pattern matches is ``unknown`` and is never routed silently. :func:`taxonomy_coverage` measures
how many diagnostics the patterns cover.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from proofgym.envs.types import ErrorCategory

__all__ = [
    "DafnyOutput",
    "Diagnostic",
    "Summary",
    "categorize",
    "parse_output",
    "parse_summary",
    "primary_category",
    "taxonomy_coverage",
]

_DIAG_RE = re.compile(
    r"^(?P<file>[^\s()][^()]*)\((?P<line>-?\d+),(?P<col>-?\d+)\): "
    r"(?P<level>Error|Warning|Info|Related location|Related message|Timed out on)"
    r"(?: (?P<code>BP\d+))?(?::\s?(?P<msg>.*))?$"
)
_TIMEOUT_RE = re.compile(r"^(?P<file>[^\s()][^()]*)\((?P<line>-?\d+),(?P<col>-?\d+)\): Verification of '(?P<impl>[^']*)' "
                         r"timed out after (?P<secs>\d+) seconds$")
_RESOURCE_RE = re.compile(r"^(?P<file>[^\s()][^()]*)\((?P<line>-?\d+),(?P<col>-?\d+)\): Verification out of resource "
                          r"\((?P<impl>[^)]*)\)$")
_VERIFYING_RE = re.compile(r"^Verifying (?P<impl>\S+) \.\.\.$")
_OUTCOME_RE = re.compile(r"^  \[(?:[0-9.]+ s, )?(?P<n>\d+) proof obligations?\]\s+(?P<outcome>[a-z][a-z ]*?)\s*$")
_SUMMARY_RE = re.compile(r"^Dafny program verifier finished with (?P<verified>\d+) verified, (?P<errors>\d+) errors?"
                         r"(?P<rest>(?:, \d+ [a-z ]+)*)$")
_SUMMARY_PART_RE = re.compile(r"^(?P<n>\d+) (?P<what>time outs?|inconclusive|out of memory|out of resource)$")
_PHASE_RE = re.compile(r"^(?P<n>\d+) (?P<phase>parse|resolution/type) errors detected in ")


@dataclass(frozen=True)
class Diagnostic:
    """One message of Dafny's about the program.

    Attributes:
        level: ``error``, ``warning``, ``timeout`` or ``resource`` (infos are dropped).
        line, col: where, 1-based line as Dafny prints it.
        code: Boogie's code (``BP5003``...) when Dafny gives one.
        message: the text after ``Error:``.
        related: the ``Related location``/``Related message`` lines that follow it.
        category: its taxonomy class (:func:`categorize`).
    """

    level: str
    line: int
    col: int
    code: str
    message: str
    related: tuple[str, ...] = ()
    category: ErrorCategory = ErrorCategory.UNKNOWN

    def render(self) -> str:
        head = {"error": "Error", "warning": "Warning", "timeout": "Timeout", "resource": "Out of resource"}[self.level]
        code = f" {self.code}" if self.code else ""
        text = f"line {self.line}, col {self.col}: {head}{code}: {self.message}"
        return text + "".join(f"\n  {r}" for r in self.related)


@dataclass(frozen=True)
class Summary:
    """The CLI's final line, parsed exactly."""

    verified: int
    errors: int
    time_outs: int = 0
    inconclusive: int = 0
    out_of_memory: int = 0
    out_of_resource: int = 0


@dataclass(frozen=True)
class DafnyOutput:
    """Everything :func:`parse_output` found in one run's output."""

    diagnostics: tuple[Diagnostic, ...] = ()
    outcomes: tuple[tuple[str, str], ...] = ()  # (Boogie implementation, outcome) in trace order
    summary: Summary | None = None
    summary_lines: int = 0  # how many lines looked like a summary (exactly one is expected from the CLI)
    phase: str = ""  # "parse" / "resolution" when the CLI says so
    prover_errors: tuple[str, ...] = ()
    fatal: bool = False  # DafnyServer answered [FATAL] (it exits after that)
    trace_anomalies: tuple[str, ...] = field(default=())  # trace lines that did not pair up

    @property
    def errors(self) -> tuple[Diagnostic, ...]:
        return tuple(d for d in self.diagnostics if d.level in ("error", "timeout", "resource"))

    @property
    def warnings(self) -> tuple[Diagnostic, ...]:
        return tuple(d for d in self.diagnostics if d.level == "warning")

    def verified_implementations(self) -> list[str]:
        return [impl for impl, outcome in self.outcomes if outcome == "verified"]


def parse_summary(line: str) -> Summary | None:
    """The summary line, or ``None`` if ``line`` is not *exactly* a summary Dafny prints."""
    m = _SUMMARY_RE.match(line.strip("\r"))
    if not m:
        return None
    counts = {"time_outs": 0, "inconclusive": 0, "out_of_memory": 0, "out_of_resource": 0}
    rest = m.group("rest")
    for part in filter(None, rest.split(", ")):
        pm = _SUMMARY_PART_RE.match(part)
        if pm is None:
            return None
        key = {"time out": "time_outs", "time outs": "time_outs", "inconclusive": "inconclusive",
               "out of memory": "out_of_memory", "out of resource": "out_of_resource"}[pm.group("what")]
        counts[key] += int(pm.group("n"))
    return Summary(int(m.group("verified")), int(m.group("errors")), **counts)


def parse_output(text: str, *, filename: str) -> DafnyOutput:
    """Parse one run's output. Only lines about ``filename`` count as diagnostics.

    Info messages (tooltips) and their indented continuation lines are dropped: they echo
    program text, so nothing inside them may be read as a trace or a summary.
    """
    diagnostics: list[Diagnostic] = []
    outcomes: list[tuple[str, str]] = []
    anomalies: list[str] = []
    prover_errors: list[str] = []
    summary: Summary | None = None
    summary_lines = 0
    phase = ""
    fatal = False
    pending_impl: str | None = None
    in_info = False
    lines = text.replace("\r\n", "\n").split("\n")
    for raw in lines:
        line = raw.rstrip()
        if in_info:
            if line.startswith(" ") and not _OUTCOME_RE.match(line):
                continue
            in_info = False
        if not line:
            continue
        if pending_impl is not None:
            m = _OUTCOME_RE.match(line)
            if m:
                outcomes.append((pending_impl, m.group("outcome")))
                pending_impl = None
                continue
        m = _VERIFYING_RE.match(line)
        if m:
            if pending_impl is not None:
                anomalies.append(f"no outcome for {pending_impl}")
            pending_impl = m.group("impl")
            continue
        if _OUTCOME_RE.match(line):
            anomalies.append(f"outcome without implementation: {line.strip()}")
            continue
        if line.startswith("Dafny program verifier finished"):
            summary_lines += 1
            summary = parse_summary(line)
            continue
        m = _PHASE_RE.match(line)
        if m:
            phase = "parse" if m.group("phase") == "parse" else "resolution"
            continue
        if line.startswith("Prover error:"):
            # z3 4.8.12 (Debian's) rejects an option Dafny 2.3 sends: noise, not a verdict. Other
            # prover errors keep an OK from being reached.
            if "model_compress" not in line:
                prover_errors.append(line)
            continue
        if "[FATAL]" in line or "FATAL UNHANDLED EXCEPTION" in line:
            fatal = True
            continue
        m = _TIMEOUT_RE.match(line)
        if m and _same_file(m.group("file"), filename):
            diagnostics.append(Diagnostic("timeout", int(m.group("line")), int(m.group("col")), "",
                                          f"verification of {m.group('impl')} timed out after {m.group('secs')} s",
                                          category=ErrorCategory.TIMEOUT))
            continue
        m = _RESOURCE_RE.match(line)
        if m and _same_file(m.group("file"), filename):
            diagnostics.append(Diagnostic("resource", int(m.group("line")), int(m.group("col")), "",
                                          f"verification of {m.group('impl')} ran out of resource",
                                          category=ErrorCategory.TIMEOUT))
            continue
        m = _DIAG_RE.match(line)
        if m and _same_file(m.group("file"), filename):
            level = m.group("level")
            msg = (m.group("msg") or "").strip()
            code = m.group("code") or ""
            if level == "Info":
                in_info = True
                continue
            if level in ("Related location", "Related message"):
                if diagnostics:
                    last = diagnostics[-1]
                    rel = f"{level} at line {m.group('line')}, col {m.group('col')}" + (f": {msg}" if msg else "")
                    diagnostics[-1] = Diagnostic(last.level, last.line, last.col, last.code, last.message,
                                                 (*last.related, rel), last.category)
                continue
            if level == "Timed out on":
                # The detail of a time out: which obligation was running. Attach it; the category stays timeout.
                if diagnostics and diagnostics[-1].level == "timeout":
                    last = diagnostics[-1]
                    diagnostics[-1] = Diagnostic(last.level, last.line, last.col, last.code, last.message,
                                                 (*last.related, f"timed out on {code} {msg}".strip()), last.category)
                continue
            lvl = "error" if level == "Error" else "warning"
            diagnostics.append(Diagnostic(lvl, int(m.group("line")), int(m.group("col")), code, msg,
                                          category=categorize(msg, code) if lvl == "error" else ErrorCategory.NONE))
            continue
    if pending_impl is not None:
        anomalies.append(f"no outcome for {pending_impl}")
    if phase:
        # The CLI says which phase failed: that beats any guess from the message text.
        fixed = ErrorCategory.PARSE_ERROR if phase == "parse" else ErrorCategory.TYPE_ERROR
        diagnostics = [Diagnostic(d.level, d.line, d.col, d.code, d.message, d.related,
                                  fixed if d.level == "error" and d.category is not fixed
                                  and d.category in (ErrorCategory.UNKNOWN, ErrorCategory.PARSE_ERROR,
                                                     ErrorCategory.TYPE_ERROR) else d.category)
                       for d in diagnostics]
    return DafnyOutput(tuple(diagnostics), tuple(outcomes), summary, summary_lines, phase, tuple(prover_errors),
                       fatal, tuple(anomalies))


def _same_file(printed: str, filename: str) -> bool:
    return printed == filename or printed.endswith("/" + filename)


# -- taxonomy ------------------------------------------------------------------------------------

_PATTERNS: tuple[tuple[ErrorCategory, re.Pattern[str]], ...] = tuple(
    (cat, re.compile(pat, re.I))
    for cat, pat in (
        (ErrorCategory.TIMEOUT, r"timed out|time out|out of resource"),
        (ErrorCategory.INVARIANT_MISSING, r"loop invariant might not (?:hold on entry|be maintained)|"
                                          r"loop invariant violation"),
        (ErrorCategory.SPEC_GAP, r"postcondition might not hold|a postcondition of this .* might not hold"),
        (ErrorCategory.BODY_ERROR,
         r"assertion violation|assertion might not hold|cannot prove termination|decreases expression|"
         r"failure to decrease termination measure|precondition for this call might not hold|"
         r"function precondition|possible division by zero|index out of range|index out of bounds|"
         r"might be null|may be null|modifies clause|insufficient reads clause|"
         r"subset type constraint|subset constraints|newtype constraint|calculation step|"
         r"existence of LHS values|might be uninitialized|element might not be in domain|"
         r"lower bound must not exceed upper bound|upper bound .* length|shift amount|"
         r"postcondition of forall statement|array dimension|might not hold|might violate|"
         r"may not be in domain|might not be in domain|out of range"),
        (ErrorCategory.PARSE_ERROR,
         r"^invalid [A-Za-z]+$|^\S+ expected$|^\"[^\"]*\" expected$|this symbol not expected|^EOF expected|"
         r"cannot declare identifier beginning with underscore|must have a body|unterminated|malformed"),
        (ErrorCategory.TYPE_ERROR,
         r"unresolved identifier|type mismatch|not assignable to|expected to be of type|incorrect type|"
         r"wrong number of|does not exist in|duplicate member|already declared|duplicate|"
         r"ghost variables are allowed only|non-ghost|undeclared|is not a type|must have the same type|"
         r"must be of type|must have a common supertype|must agree|underspecified|ambiguous|"
         r"not allowed in this context|is not allowed in|must denote|must match|found expression|"
         r"requires an array|is not a (?:function|method|predicate|lemma|datatype)|type parameter|"
         r"cannot be called|cannot assign|not a member|is not declared|must be of a|allowed only in|"
         r"must produce a finite set|is not allowed in a|can be applied only to|not a function|"
         r"does not match declaration|does not implement|missing case|undefined or not in scope|"
         r"cycle among|trigger must mention"),
    )
)


def categorize(message: str, code: str = "") -> ErrorCategory:
    """The taxonomy class of one error message (SkillForge's regex stage).

    Boogie codes decide first (BP5003 postcondition, BP5004/BP5005 loop invariant,
    BP5001/BP5002 preconditions); then message patterns; ``unknown`` when nothing matches.
    """
    if code in ("BP5004", "BP5005"):
        return ErrorCategory.INVARIANT_MISSING
    if code == "BP5003":
        return ErrorCategory.SPEC_GAP
    if code in ("BP5001", "BP5002"):
        return ErrorCategory.BODY_ERROR
    for category, pattern in _PATTERNS:
        if pattern.search(message):
            return category
    return ErrorCategory.UNKNOWN


_PRIORITY = (ErrorCategory.PARSE_ERROR, ErrorCategory.TYPE_ERROR)


def primary_category(diagnostics: Iterable[Diagnostic]) -> ErrorCategory:
    """The category that routes repair: a parse or type error first (nothing verifies before they
    are fixed), then the first verification error in Dafny's order."""
    errors = [d for d in diagnostics if d.level in ("error", "timeout", "resource")]
    if not errors:
        return ErrorCategory.NONE
    for cat in _PRIORITY:
        if any(d.category is cat for d in errors):
            return cat
    return errors[0].category


def taxonomy_coverage(diagnostics: Iterable[Diagnostic]) -> tuple[int, int]:
    """(classified, total) over error diagnostics: how much the regex stage covers."""
    errors = [d for d in diagnostics if d.level in ("error", "timeout", "resource")]
    return sum(d.category is not ErrorCategory.UNKNOWN for d in errors), len(errors)
