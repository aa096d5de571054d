"""`proofgym report`: a Markdown/HTML report with plots of eval runs."""

from __future__ import annotations

import argparse
from typing import Any

from proofgym.cli.common import EXIT_BAD_INPUT, die


def run(args: argparse.Namespace) -> int:
    from proofgym.envs.errors import ProofgymError
    from proofgym.training.report import write_report

    try:
        path = write_report(args.runs, out=args.out, fmt=args.format)
    except ProofgymError as exc:
        return die(EXIT_BAD_INPUT, str(exc))
    print(path)
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("report", help="Markdown/HTML report with plots of one run, or runs side by side",
                       description="Tables and matplotlib plots (pass@k against k, per-category bars, verdicts, "
                                   "failure taxonomy, cheat reasons, cost) from eval run dirs.")
    p.add_argument("runs", nargs="+", metavar="RUN_DIR", help="an eval run dir (two or more to compare)")
    p.add_argument("--out", help="output folder (default RUN_DIR/report)")
    p.add_argument("--format", choices=["md", "html"], default="md", help="md (default) or html (self-contained)")
    p.set_defaults(func=run)

