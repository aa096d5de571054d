"""Build and validate the ``dafny-nl`` suite: natural-language-to-Dafny tasks, shipped as JSONL.

``load_tasks("dafny-nl")`` reads the packaged ``envs/tasks/data/dafny-nl.jsonl``; this module
writes it from :mod:`proofgym.envs.tasks.dafny_nl_tasks` (``python -m
proofgym.envs.tasks.dafny_nl --write``) and validates it (``--validate``): a task belongs to
the suite only if its reference program verifies (OK) and its ``assume false`` variant is
refused as CHEATING (STYLE 10: every suite validates itself).

Task format (the foundation's): ``system`` "dafny"; ``statement`` = the headers to implement
(signatures, ``requires``/``ensures``, bodies missing); ``context`` = code the program must
keep; ``reference_proof`` = the whole reference program; ``metadata.description`` = the
natural-language description; ``category`` = simple/medium/hard.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proofgym.envs.tasks.dafny_nl_tasks import TASKS, DafnyTaskSource
from proofgym.envs.tasks.suites import write_tasks
from proofgym.envs.types import Task
from proofgym.envs.verifiers.dafny.integrity import declaration_views
from proofgym.envs.verifiers.pool.inprocess import InProcessPool
from proofgym.envs.verifiers.validation import validate_suite

SUITE = "dafny-nl"
DATA_PATH = Path(__file__).resolve().parent / "data" / f"{SUITE}.jsonl"
TIMEOUT_S = 30.0
CATEGORIES = ("simple", "medium", "hard")
#: SkillForge's difficulty split (62 simple, 71 medium, 45 hard of 178).
SKILLFORGE_SPLIT = {"simple": 62, "medium": 71, "hard": 45}


def to_task(src: DafnyTaskSource) -> Task:
    """The :class:`Task` of one authored source: the reference is the context followed by the solution."""
    reference = (src.context + "\n" + src.solution) if src.context else src.solution
    return Task(
        id=f"dafny.nl.{src.name}",
        system="dafny",
        context=src.context,
        statement=src.statement,
        reference_proof=reference,
        category=src.category,
        timeout_s=TIMEOUT_S,
        suite=SUITE,
        metadata={"description": src.description, "source": "proofgym-authored"},
    )


def build_tasks() -> list[Task]:
    """Every task of the suite, in authoring order."""
    return [to_task(s) for s in TASKS]


def write_suite(path: Path = DATA_PATH, tasks: list[Task] | None = None) -> Path:
    """Write the suite's JSONL (what ``load_tasks("dafny-nl")`` reads)."""
    return write_tasks(path, tasks if tasks is not None else build_tasks())


def assume_false_variant(task: Task, verifier: Any) -> str:
    """The reference program with every target's body replaced by ``{ assume false; }``.

    Such a program verifies, so it is a cheat the verifier must name. Functions have expression
    bodies; when a task has no method or lemma to gut, an ``assume false`` lemma that proves
    ``false`` is added instead.
    """
    program = task.reference_proof
    symbols = verifier.symbols(program)
    if symbols is None:
        raise ValueError(f"{task.id}: the reference does not resolve")
    stmt_symbols = verifier.symbols(task.context + "\n" + task.statement if task.context else task.statement) or []
    targets = {(s.module, s.parent, s.name) for s in stmt_symbols if s.kind == "Method"}
    edits = []
    for view in declaration_views(program, symbols):
        if view.symbol.key in targets and view.body_offsets is not None:
            edits.append(view.body_offsets)
    if not edits:
        return program + "\nlemma ProofgymCheat()\n  ensures false\n{\n  assume false;\n}\n"
    for open_at, close_at in sorted(edits, reverse=True):
        program = program[: open_at + 1] + "\n  assume false;\n" + program[close_at:]
    return program


@dataclass
class ValidationReport:
    """What :func:`validate` found, per task and in total."""

    ok: list[str] = field(default_factory=list)
    failures: dict[str, str] = field(default_factory=dict)  # task id -> why it is not in the suite
    per_category: Counter = field(default_factory=Counter)
    seconds: float = 0.0

    def render(self) -> str:
        lines = [f"dafny-nl: {len(self.ok)} valid tasks, {len(self.failures)} rejected ({self.seconds:.1f} s)"]
        lines.append("  per category: " + ", ".join(f"{c} {self.per_category[c]}" for c in CATEGORIES))
        for tid, why in self.failures.items():
            lines.append(f"  REJECTED {tid}: {why}")
        return "\n".join(lines)


def validate(tasks: list[Task], verifier: Any) -> ValidationReport:
    """Reference OK and ``assume false`` variant CHEATING, for every task (the one suite validator, on a pool
    over ``verifier``: :func:`proofgym.envs.verifiers.validation.validate_suite`)."""

    start = time.monotonic()
    with InProcessPool({"dafny": verifier}) as pool:
        checked = validate_suite(tasks, pool, probe_verifier=verifier)
    report = ValidationReport()
    report.ok = [task.id for task in checked.kept]
    report.failures = dict(checked.rejected)
    for task in checked.kept:
        report.per_category[task.category] += 1
    report.seconds = time.monotonic() - start
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write and validate the dafny-nl suite.")
    parser.add_argument("--write", action="store_true", help=f"write {DATA_PATH}")
    parser.add_argument("--validate", action="store_true", help="check every reference and its cheat variant")
    parser.add_argument("--only", nargs="*", help="task names (without dafny.nl.) to validate")
    args = parser.parse_args(argv)
    tasks = build_tasks()
    if args.only:
        tasks = [t for t in tasks if t.id.removeprefix("dafny.nl.") in set(args.only)]
    counts = Counter(t.category for t in tasks)
    print(json.dumps({"tasks": len(tasks), **{c: counts[c] for c in CATEGORIES}}))
    if args.validate:
        from proofgym.envs.verifiers.dafny import DafnyVerifier

        with DafnyVerifier(audit="never") as verifier:
            report = validate(tasks, verifier)
        print(report.render())
        if report.failures:
            return 1
    if args.write:
        print(f"wrote {write_suite(tasks=tasks if not args.only else None)}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
