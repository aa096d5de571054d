"""`proofgym export`: a suite as a Hugging Face dataset (Parquet splits and a card)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from proofgym.cli.common import EXIT_BAD_INPUT, die


def run(args: argparse.Namespace) -> int:
    from proofgym.envs.errors import ProofgymError
    from proofgym.envs.tasks.export import export_suite
    from proofgym.envs.tasks.suites import load_tasks
    from proofgym.training.data import split_tasks

    try:
        tasks = load_tasks(args.suite)
        if args.category:
            tasks = [t for t in tasks if t.category in args.category]
        splits = split_tasks(tasks, heldout_fraction=args.heldout_fraction, seed=args.split_seed)
        out = Path(args.out or Path(args.suite).stem)
        counts = export_suite(splits, out, name=out.name)
    except (ProofgymError, ValueError) as exc:
        return die(EXIT_BAD_INPUT, str(exc))
    except ImportError:
        return die(EXIT_BAD_INPUT, "export needs the datasets package: pip install -e '.[train]'")
    print(f"wrote {', '.join(f'{split} {n}' for split, n in counts.items())} rows to {out}/ "
          f"(load with datasets.load_dataset(\"parquet\", data_dir=\"{out}\"))")
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("export", help="write a suite as a Hugging Face dataset (Parquet splits + card)",
                       description="Export a suite with the splits training uses (metadata.split, else the stratified "
                       "hash split of `proofgym train`): train and test (held out) Parquet files and a dataset card.",
                       epilog="Examples:\n  proofgym export coq-stdlib --out coq-stdlib-hf\n"
                       "  proofgym export dafny-nl --heldout-fraction 0.3\n"
                       "  python -c \"import datasets; print(datasets.load_dataset('parquet', data_dir='coq-stdlib-hf'))\"",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("suite", help="a built suite name (coq-stdlib), a packaged one (coq-tiny, dafny-nl) or a .jsonl path")
    p.add_argument("--out", help="the dataset folder (default: the suite's name, here)")
    p.add_argument("--category", action="append", help="only this category (repeat for several)")
    p.add_argument("--heldout-fraction", type=float, default=0.2,
                   help="share of each category held out as test, as `proofgym train` does (default 0.2)")
    p.add_argument("--split-seed", type=int, default=0, help="seed of the held-out hash, as train's split_seed")
    p.set_defaults(func=run)

