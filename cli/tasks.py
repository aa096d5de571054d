"""`proofgym tasks`: list a suite's tasks."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from proofgym.cli.common import EXIT_BAD_INPUT, die


def run(args: argparse.Namespace) -> int:
    from proofgym.envs.errors import ProofgymError
    from proofgym.envs.tasks.suites import load_tasks

    try:
        tasks = load_tasks(args.suite)
    except ProofgymError as exc:
        return die(EXIT_BAD_INPUT, str(exc))
    if args.category:
        tasks = [t for t in tasks if t.category == args.category]
    if args.grep:
        tasks = [t for t in tasks if args.grep in t.id]
    if args.json:
        for task in tasks:
            print(json.dumps({"id": task.id, "system": task.system, "category": task.category,
                              "statement": task.statement}, ensure_ascii=False))
        return 0
    for task in tasks:
        print(f"{task.id}\t{task.system}\t{task.category}")
    print(f"{len(tasks)} tasks", file=sys.stderr)
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("tasks", help="list a suite's task ids (with system and category)",
                       description="List the tasks of a suite: id, system, category (tab-separated).")
    p.add_argument("suite", help="a built suite name (coq-stdlib) or a .jsonl path")
    p.add_argument("--category", help="only this category (P1, P2, P3, D, ...)")
    p.add_argument("--grep", help="only ids that contain this text")
    p.add_argument("--json", action="store_true", help="one JSON object a line, with the statement")
    p.set_defaults(func=run)

