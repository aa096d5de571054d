"""s2n-bignum-bench's query obfuscation, reimplemented with a printer of proofgym's own.

The bench (``run-obfuscation.py``) reprints each query in its context with HOL Light's
``print_types_of_subterms := 2``, so that every variable and constant carries its type, after

- naming the type checker's invented type variables (``?N``) ``bench_arbty0``, ``bench_arbty1`` ...
  (the last in OCaml's order of their names is ``bench_arbty0``);
- renaming each bound variable whose name reads back as a constant (s2n's ``Q1`` is ``QREG 1``);
- tier 2: renaming every bound variable ``v<seed>``, ``v<seed+1>`` ..., with
  ``seed = sha1(problem id) mod 100000``;

and keeps the reprint only if ``parse_term`` reads it back alpha-equivalent (``aconv``); otherwise
the query stays as it was, and is counted. HOL Light 20230128 (Debian's) has no
``print_types_of_subterms``: :file:`hol_obfuscate.ml` prints the types with a user printer for atoms,
which HOL Light's printer consults for every subterm, so the layout is the printer's own and only
atoms change. Fresh bound names also avoid every bound name of the term (the bench's avoid only the
free ones, which can capture in tier 1).

The obfuscation runs in the task's own context, on the task's base: one check per task on the
verifier, whose context is the task's plus :file:`hol_obfuscate.ml`, and whose goal is the variable
``pg_obfuscation_output``. The context prints that variable as the result, so the FAIL of ``ALL_TAC``
brings it back as the remaining goal's text (the verifier has no other channel for a context's output).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from proofgym.envs.types import Task, Verdict

OBFUSCATOR_ML = Path(__file__).with_name("hol_obfuscate.ml")
OUTPUT_GOAL = "`pg_obfuscation_output:bool`"
TIERS = (1, 2)
#: the verifier's cap on one goal's text (boot.ml's pg_text_cap): a longer reprint cannot come back
_TEXT_CAP = 65536


def bench_seed(problem_id: str) -> int:
    """Tier 2's first bound-variable number for a problem, as the bench computes it."""
    return int(hashlib.sha1(problem_id.encode()).hexdigest(), 16) % 100000  # noqa: S324 (the bench's hash)


def probe_task(task: Task, tier: int) -> Task:
    """The check whose remaining goal is ``task``'s obfuscated query (see the module docstring)."""
    if tier not in TIERS:
        raise ValueError(f"obfuscation tier must be one of {TIERS}, not {tier}")
    seed = bench_seed(task.id) if tier >= 2 else 0
    context = (task.context.rstrip("\n") + "\n" + OBFUSCATOR_ML.read_text(encoding="utf-8")
               + f"\npg_obf_result := pg_obfuscate {tier} {seed} ({task.statement});;\n")
    return replace(task, id=f"{task.id}#obfuscate{tier}", context=context, statement=OUTPUT_GOAL,
                   reference_proof="ALL_TAC", timeout_s=60.0)


@dataclass(frozen=True)
class Obfuscation:
    """What the probe brought back: ``status`` is ``OBFUSCATED``, ``ROUNDTRIP`` (it parses to a term
    that is not alpha-equivalent), ``NOPARSE``, ``TOO_LONG`` or ``PROBE_FAILED``."""

    status: str
    text: str  # the reprint (backquoted when OBFUSCATED)
    detail: str = ""


def read_probe(verdict: Verdict, goals: Sequence[str], reasons: Sequence[str] = ()) -> Obfuscation:
    """Decode the probe's result: FAIL with one goal, ``LEN\\nSTATUS\\nTEXT``."""
    if verdict is not Verdict.FAIL or len(goals) != 1:
        return Obfuscation("PROBE_FAILED", "", f"{verdict.value}: {'; '.join(reasons)[:300]}")
    size, _, payload = goals[0].partition("\n")
    if not size.isdigit():
        return Obfuscation("PROBE_FAILED", "", f"unexpected goal text {goals[0][:120]!r}")
    if len(payload) != int(size):
        return Obfuscation("TOO_LONG", "", f"{size} bytes, over the verifier's {_TEXT_CAP} per goal")
    status, _, rest = payload.partition("\n")
    if status == "OBFUSCATED":
        return Obfuscation(status, f"`{rest.strip()}`")
    if status == "NOPARSE":
        why, _, text = rest.partition("\n")
        return Obfuscation(status, text, why)
    if status == "ROUNDTRIP":
        return Obfuscation(status, rest)
    return Obfuscation("PROBE_FAILED", "", f"unexpected status {status[:60]!r}")


@dataclass
class ObfuscationReport:
    """How many queries were obfuscated, and why the others were kept as they were."""

    tier: int
    obfuscated: int = 0
    kept: dict[str, int] = field(default_factory=dict)  # status -> count of queries kept unobfuscated
    kept_ids: dict[str, list[str]] = field(default_factory=dict)
    per_category: dict[str, dict[str, int]] = field(default_factory=dict)

    def render(self) -> str:
        total = self.obfuscated + sum(self.kept.values())
        lines = [f"obfuscation tier {self.tier}: {self.obfuscated} of {total} queries obfuscated"]
        lines += [f"  kept unobfuscated {n:5d}: {why} (e.g. {self.kept_ids[why][0]})"
                  for why, n in sorted(self.kept.items(), key=lambda kv: -kv[1])]
        return "\n".join(lines)


def obfuscate_tasks(tasks: Sequence[Task], verifier: Any, *, tier: int = 1,
                    progress: Callable[[str], None] | None = None) -> tuple[list[Task], ObfuscationReport]:
    """Each task with its query obfuscated (``statement``; the original in ``metadata["query_unobfuscated"]``),
    or unchanged where the reprint does not read back alpha-equivalent; and the counts.

    ``verifier`` is a HOL Light verifier that can load the tasks' contexts (their bases). A reference
    proof that names bound variables may not prove a tier 2 query: the bench's problems are queries,
    not references, and the task's ``metadata["obfuscation"]`` says what was done.
    """
    report = ObfuscationReport(tier)
    out: list[Task] = []
    for i, task in enumerate(tasks):
        result = verifier.check(probe_task(task, tier), "ALL_TAC")
        got = read_probe(result.verdict, [g.conclusion for g in result.remaining_goals], result.reasons)
        row = report.per_category.setdefault(task.category, Counter())
        if got.status == "OBFUSCATED":
            report.obfuscated += 1
            row["obfuscated"] += 1
            out.append(replace(task, statement=got.text, metadata={
                **task.metadata, "query_unobfuscated": task.statement, "obfuscation": f"tier {tier}"}))
        else:
            report.kept[got.status] = report.kept.get(got.status, 0) + 1
            report.kept_ids.setdefault(got.status, []).append(task.id)
            row[got.status] += 1
            out.append(replace(task, metadata={**task.metadata, "obfuscation": f"kept: {got.status} {got.detail}".strip()}))
        if progress is not None and (i + 1) % 25 == 0:
            progress(f"obfuscated {report.obfuscated} of {i + 1} queries ({len(tasks)} in all)")
    report.per_category = {k: dict(v) for k, v in report.per_category.items()}
    return out, report
