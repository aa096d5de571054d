"""`proofgym compare`: eval runs against a base run, paired bootstrap over tasks."""

from __future__ import annotations

import argparse
import json
from typing import Any

from proofgym.cli.common import EXIT_BAD_INPUT, die


def run(args: argparse.Namespace) -> int:
    from proofgym.envs.errors import ProofgymError
    from proofgym.training.compare import compare_runs

    try:
        rows = compare_runs(args.base, args.runs, resamples=args.resamples, seed=args.seed)
    except ProofgymError as exc:
        return die(EXIT_BAD_INPUT, str(exc))
    if args.json:
        print(json.dumps({"base": args.base, "comparisons": rows}, ensure_ascii=False))
        return 0
    for row in rows:
        print(f"{row['label']}: pass@1 {row['pass@1']:.1%} vs base {row['base_pass@1']:.1%} on {row['tasks']} shared "
              f"tasks: delta {100 * row['delta']:+.1f} pp, 95% paired-bootstrap interval "
              f"[{100 * row['lo']:+.1f}, {100 * row['hi']:+.1f}]")
        if row["only_in_run"] or row["only_in_base"]:
            print(f"  left out: {row['only_in_run']} tasks only in the run, {row['only_in_base']} only in the base")
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("compare", help="did a checkpoint get better? eval runs against a base, paired bootstrap",
                       description="Compare eval runs on the same tasks with a base run: per-task pass@1 (the share of "
                       "a task's samples that got OK), the difference and its 95% paired-bootstrap interval over tasks.",
                       epilog="Examples:\n  proofgym eval --suite S --agent local --model base --k 4 --out runs/base\n"
                       "  proofgym eval --suite S --agent local --model ckpt --k 4 --out runs/ckpt\n"
                       "  proofgym compare runs/base runs/ckpt", formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("base", help="the base run's folder (an eval run dir or its results.jsonl)")
    p.add_argument("runs", nargs="+", help="the runs to compare with it")
    p.add_argument("--resamples", type=int, default=10000, help="bootstrap resamples (default 10,000)")
    p.add_argument("--seed", type=int, default=0, help="seed of the bootstrap draws")
    p.add_argument("--json", action="store_true", help="one JSON object with every comparison")
    p.set_defaults(func=run)

