"""Extract HOL Light problems from ``.ml`` sources, as s2n-bignum-bench builds them.

- **Extraction**: every toplevel ``let NAME = prove(`goal`, tactic);;``. The problem's setup
  (the task's ``context``) is the file up to that phrase, with every earlier ``prove`` replaced by
  ``CHEAT_TAC`` to save load time (the verifier compares ``axioms()`` before and after the attempt,
  so the context's cheats never let a proof through).
- **Ids**: ``{arch}.{file}.{theorem}``, plus ``.N`` (0-based occurrence) when a file reuses a name.
- **Categories** (the benchmark's rules): goals without backquotes are dropped, and so are names
  with ``_EQUIV``, ``SUBROUTINE_SAFE`` or ``SUBROUTINE_CORRECT``; ``_CORRECT`` with ``ensures`` is
  ``functional_correctness_{arch}``; ``read``/``write``/``:>``/``nonoverlapping*``/``contained*`` is
  ``program_state``; ``word*``/``val`` is ``bit_vector``; everything else ``generic``.
- **De-duplication** by whitespace-normalised goal.
- **Timeouts**: ``min(hi, max(lo, floor(k * t)))`` with ``k = k_small`` when ``t < threshold`` else
  ``k_large``, where ``t`` is the reference proof's measured time (:class:`TimeoutRule`).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from proofgym.envs.types import Task
from proofgym.envs.verifiers.hol_light.lexer import Phrase, skip_string, split_phrases, strip_comments

CHEAT = "CHEAT_TAC"


_PROVE_RE = re.compile(r"^\s*let\s+([A-Za-z_][\w']*)\s*=\s*prove\s*\(\s*", re.S)


@dataclass(frozen=True)
class Extracted:
    """One ``let NAME = prove(`goal`, tactic)`` phrase."""

    name: str
    goal: str  # the text between the backquotes
    tactic: str
    index: int  # phrase index in the file
    line: int


def parse_prove(phrase: str) -> tuple[str, str | None, str] | None:
    """``(name, goal or None, tactic)`` of a ``let NAME = prove(goal, tactic)`` phrase, else None.

    ``goal`` is None when the goal is not a backquoted term (the benchmark drops those).
    """
    text = strip_comments(phrase).strip()
    m = _PROVE_RE.match(text)
    if not m:
        return None
    body = text[m.end():]
    if not body.endswith(")"):
        return None
    body = body[:-1]
    if body.startswith("`"):
        j = body.find("`", 1)
        if j < 0:
            return None
        goal: str | None = body[1:j]
        rest = body[j + 1:].lstrip()
    else:
        goal = None
        rest = _after_top_comma(body)
    if not rest.startswith(","):
        return None if goal is not None else (m.group(1), None, rest)
    tactic = rest[1:].strip()
    if not tactic or _depth_ok(tactic) is False:
        return None
    return m.group(1), goal, tactic


def _after_top_comma(body: str) -> str:
    depth = 0
    for i, c in enumerate(body):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth == 0:
            return body[i:]
    return ""


def _depth_ok(text: str) -> bool:
    depth = 0
    i = 0
    while i < len(text):
        c = text[i]
        if c == '"':
            i = skip_string(text, i) or len(text)
            continue
        if c == "`":
            j = text.find("`", i + 1)
            if j < 0:
                return False
            i = j + 1
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth < 0:
                return False
        i += 1
    return depth == 0


def extract_theorems(source: str) -> tuple[list[Phrase], list[Extracted], Counter]:
    """All ``prove`` phrases of a file; the Counter says what was dropped and why."""
    phrases = split_phrases(source)
    found: list[Extracted] = []
    dropped: Counter = Counter()
    for index, ph in enumerate(phrases):
        parsed = parse_prove(ph.text)
        if parsed is None:
            continue
        name, goal, tactic = parsed
        if goal is None:
            dropped["goal without backquotes"] += 1
            continue
        at = re.search(rf"\blet\s+{re.escape(name)}\b", ph.text)
        line = source.count("\n", 0, ph.start + (at.start() if at else 0)) + 1
        found.append(Extracted(name, goal, tactic, index, line))
    return phrases, found, dropped


def setup_text(source: str, phrases: list[Phrase], upto: int, cheat: bool = True) -> str:
    """The file before phrase ``upto``; with ``cheat``, earlier ``prove`` tactics become ``CHEAT_TAC``."""
    out: list[str] = []
    for ph in phrases[:upto]:
        parsed = parse_prove(ph.text) if cheat else None
        if parsed is not None and parsed[1] is not None:
            out.append(f"let {parsed[0]} = prove\n (`{parsed[1]}`,\n  {CHEAT});;\n")
        else:
            out.append(ph.text.strip("\n") + ";;\n")
    return "".join(out)


_WORD = r"(?<![\w'])({})(?![\w'])"


def category(name: str, goal: str, arch: str) -> str | None:
    """The benchmark's category of a theorem, or None when the benchmark drops it."""
    if any(s in name for s in ("_EQUIV", "SUBROUTINE_SAFE", "SUBROUTINE_CORRECT")):
        return None
    if name.endswith("_CORRECT") and re.search(_WORD.format("ensures"), goal):
        return f"functional_correctness_{arch}"
    if (re.search(_WORD.format("read|write"), goal) or ":>" in goal
            or re.search(r"(?<![\w'])(nonoverlapping\w*|contained\w*)", goal)):
        return "program_state"
    if re.search(r"(?<![\w'])(word\w*|val)(?![\w'])", goal):
        return "bit_vector"
    return "generic"


def normalise_goal(goal: str) -> str:
    return " ".join(goal.split())


@dataclass(frozen=True)
class TimeoutRule:
    """``timeout = min(hi, max(lo, floor(k * t)))``, ``k = k_small`` if ``t < threshold`` else ``k_large``.

    The benchmark's values are the defaults; a bytecode toplevel runs 8-17x slower than its native
    timings, so scale ``k`` (or the bounds) when ``t`` comes from native runs.
    """

    k_small: float = 2.0
    k_large: float = 5.0
    threshold_s: float = 120.0
    lo_s: float = 120.0
    hi_s: float = 10800.0

    def __call__(self, t: float) -> float:
        k = self.k_small if t < self.threshold_s else self.k_large
        return float(min(self.hi_s, max(self.lo_s, math.floor(k * t))))


@dataclass
class ExtractionReport:
    """What extraction kept and dropped, per reason."""

    files: int = 0
    found: int = 0
    kept: int = 0
    dropped: Counter = field(default_factory=Counter)
    categories: Counter = field(default_factory=Counter)


def extract_file(path: Path, *, rel: str, arch: str, suite: str, base: str = "plain",
                 context_prefix: str = "", report: ExtractionReport | None = None,
                 seen_goals: set[str] | None = None, default_timeout_s: float = 120.0) -> list[Task]:
    """Tasks from one ``.ml`` file (unvalidated; ``timeout_s`` is a placeholder until measured).

    Args:
        path: the file.
        rel: its path relative to the library root (``Library/binary.ml``), kept in metadata.
        arch: the id prefix and the suffix of ``functional_correctness_*`` (``hol``, ``arm``, ``x86``).
        context_prefix: ML run before the file's own prefix (e.g. ``needs "Library/floor.ml";;``).
        seen_goals: normalised goals already taken (de-duplication across files); updated.
    """
    report = report if report is not None else ExtractionReport()
    seen_goals = seen_goals if seen_goals is not None else set()
    source = path.read_text(encoding="utf-8", errors="replace")
    phrases, found, dropped = extract_theorems(source)
    report.files += 1
    report.found += len(found) + sum(dropped.values())
    report.dropped.update(dropped)
    stem = path.stem
    counts = Counter(t.name for t in found)
    occurrence: Counter = Counter()
    tasks: list[Task] = []
    for thm in found:
        n = occurrence[thm.name]
        occurrence[thm.name] += 1
        cat = category(thm.name, thm.goal, arch)
        if cat is None:
            report.dropped["name with _EQUIV / SUBROUTINE_SAFE / SUBROUTINE_CORRECT"] += 1
            continue
        key = normalise_goal(thm.goal)
        if key in seen_goals:
            report.dropped["duplicate goal"] += 1
            continue
        seen_goals.add(key)
        ident = f"{arch}.{stem}.{thm.name}" + (f".{n}" if counts[thm.name] > 1 else "")
        context = context_prefix + setup_text(source, phrases, thm.index)
        tasks.append(Task(
            id=ident, system="hol_light", context=context, statement=f"`{thm.goal}`",
            reference_proof=thm.tactic, category=cat, timeout_s=default_timeout_s, suite=suite,
            metadata={"source": rel, "line": thm.line, "theorem": thm.name, "base": base, "arch": arch},
        ))
        report.kept += 1
        report.categories[cat] += 1
    return tasks
