"""`proofgym build`: build and validate a suite into the cache dir."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from proofgym.cli.common import EXIT_BAD_INPUT, EXIT_VERIFIER, die


def run(args: argparse.Namespace) -> int:
    from proofgym.envs.errors import ProofgymError
    from proofgym.envs.systems import buildable_suites

    builds = buildable_suites()
    if args.name not in builds:
        return die(EXIT_BAD_INPUT, f"unknown suite {args.name!r}; buildable here: {', '.join(builds)}")
    options: dict[str, Any] = {"out": Path(args.out) if args.out else None, "workers": args.workers,
                               "validate": not args.no_validate, "progress": not args.no_progress}
    if args.name == "hol-light":  # its builder takes no seed (the suite is every theorem) and None for no limit
        options["limit"] = args.limit or None
        if args.hol_dir:
            options["hol_dir"] = args.hol_dir
    elif args.name == "s2n-bignum":  # validation loads s2n's bases (minutes each): only when asked for
        options.update(limit=args.limit or None, checkout=args.checkout, hol_dir=args.hol_dir or "",
                       timeout_map=args.timeout_map, validate=args.validate, objects=args.objects,
                       obfuscate=args.obfuscate or 0)
    elif args.name == "coq-project":  # an installed library or a built project, and Selene's sample sizes
        if bool(args.lib) == bool(args.project):
            return die(EXIT_BAD_INPUT, "coq-project takes one of --lib NAME (an installed library such as stdpp, "
                                        "iris, mathcomp) or --project DIR (a built _CoqProject or dune project)")
        options.update(seed=args.seed, limit=args.limit, lib=args.lib, project=args.project,
                       per_category=args.per_category, budget_s=args.budget_s, order=args.order,
                       retry_excluded=args.retry_excluded)
    else:
        options.update(seed=args.seed, limit=args.limit)
    try:
        report = builds[args.name].builder(args.name)(**options)
    except ProofgymError as exc:
        return die(EXIT_VERIFIER, str(exc))
    print(report.render())
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("build", help="build and validate a suite into the cache dir",
                       description="Extract lemmas from the installed sources, sample Selene's 160/120/80 "
                                   "P1/P2/P3 split with a seed, and keep only tasks whose reference proof "
                                   "verifies in isolation and whose Admitted / exact-original cheats are rejected.")
    p.add_argument("name", help="suite to build: coq-stdlib, coq-project, hol-light or s2n-bignum")
    p.add_argument("--out", help="output JSONL (default $PROOFGYM_CACHE/suites/<name>.jsonl)")
    p.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    p.add_argument("--workers", type=int, default=2, help="parallel validation workers (default 2)")
    p.add_argument("--limit", type=int, default=0, help="validate only the first N sampled tasks (for a quick try)")
    p.add_argument("--no-validate", action="store_true", help="skip validation (not recommended)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--hol-dir", help="HOL Light installation (Debian's /usr/share/hol-light, or an upstream "
                   "checkout with ocaml-hol); s2n-bignum needs a recent one")
    p.add_argument("--checkout", help="s2n-bignum: the s2n-bignum checkout to import")
    p.add_argument("--timeout-map", help="s2n-bignum: the bench's timeout-map.json (its timeouts; ids compared)")
    p.add_argument("--validate", action="store_true", help="s2n-bignum: validate (loads each base: 15-25 min)")
    p.add_argument("--objects", action="store_true", help="s2n-bignum: first build the object files contexts read "
                   "(the checkout's make; arm needs binutils-aarch64-linux-gnu on x86-64)")
    p.add_argument("--obfuscate", type=int, choices=(1, 2), help="s2n-bignum: the bench's query obfuscation "
                   "tier (1: every atom's type; 2: also every bound variable renamed), one check per task")
    p.add_argument("--lib", help="coq-project: an installed Coq library under $(coqc -where)/user-contrib "
                                 "(stdpp, iris, mathcomp, ...); the suite is coq-<lib>")
    p.add_argument("--project", metavar="DIR", help="coq-project: a built project's folder (_CoqProject or dune)")
    p.add_argument("--per-category", default="160,120,80", metavar="P1,P2,P3",
                   help="coq-project: tasks sampled per category (default Selene's 160,120,80)")
    p.add_argument("--budget-s", type=float, default=0, metavar="S",
                   help="coq-project: start no validation round or piece of a file after S seconds; the suite holds "
                        "what was validated and the same command continues it (default 0: all)")
    p.add_argument("--order", choices=("file", "stratified"), default="file",
                   help="coq-project: validate a source file at a time (default: one warm session and one audit "
                        "compile per piece of a file, about 10x faster; a stopped build holds whole files) or in "
                        "seeded rounds whose every prefix is a uniform, category-stratified draw (slower)")
    p.add_argument("--retry-excluded", action="store_true",
                   help="coq-project: validate again the tasks an earlier run of this build excluded (after "
                        "upgrading proofgym or the library); the kept ones stay kept")
    p.set_defaults(func=run)

