"""`proofgym redteam`: run a prover's cheat and fairness corpus; report cheat/* and fair/*."""

from __future__ import annotations

import argparse
import contextlib
import json
from typing import Any

from proofgym.cli.common import EXIT_BAD_INPUT, EXIT_NOT_OK, EXIT_VERIFIER, die


def run(args: argparse.Namespace) -> int:
    from proofgym.envs.errors import TaskFormatError, VerifierError
    from proofgym.envs.progress import ProgressBar
    from proofgym.envs.tasks.redteam import CORPORA, corpus_metrics, load_corpus, run_corpus
    from proofgym.envs.verifiers.base import make_verifier

    try:
        cases = load_corpus(args.corpus or args.prover)
    except (TaskFormatError, LookupError) as exc:
        return die(EXIT_BAD_INPUT, str(exc).strip("'\""))
    if args.side:
        cases = [case for case in cases if case.side == args.side]
    systems = sorted({case.task.system for case in cases})
    missed = []
    try:
        with contextlib.ExitStack() as stack:
            verifiers = {system: stack.enter_context(make_verifier(system)) for system in systems}
            bar = stack.enter_context(ProgressBar("redteam", total=len(cases), enabled=not args.json))

            def landed(outcome: Any) -> None:
                bar.advance(description=f"{outcome.case.id}: {outcome.result.verdict.value}")
                if not outcome.as_expected:
                    missed.append(outcome)

            results = run_corpus(cases, lambda task, proof: verifiers[task.system].check(task, proof), landed)
    except VerifierError as exc:
        return die(EXIT_VERIFIER, f"{exc} (run `proofgym doctor`)")
    metrics = corpus_metrics(results)
    if args.json:
        rows = [{"id": r.case.id, "side": r.case.side, "construct": r.case.construct,
                 "expected": r.case.expected.value, "verdict": r.result.verdict.value,
                 "reasons": list(r.result.reasons)} for r in results]
        print(json.dumps({"corpus": args.corpus or CORPORA.get(args.prover, args.prover), "metrics": metrics,
                          "cases": rows}, ensure_ascii=False))
    else:
        for name, value in metrics.items():
            print(f"{name}\t{value:.3f}" if not name.endswith("/cases") else f"{name}\t{value:.0f}")
        for outcome in missed:
            print(f"NOT AS EXPECTED  {outcome.case.id} ({outcome.case.construct}): expected "
                  f"{outcome.case.expected.value}, got {outcome.result.verdict.value}: "
                  f"{'; '.join(outcome.result.reasons)[:300]}")
    return EXIT_NOT_OK if missed else 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("redteam", help="run a prover's cheat and fairness corpus; report cheat/* and fair/*",
                       description="Check every case of a shipped corpus (redteam-coq, redteam-dafny, redteam-hol) "
                       "on the installed prover: cheats must be refused, honest work with a harmless construct must "
                       "not be punished. Exit 1 when a case gets another verdict than the one recorded.",
                       epilog="Examples:\n  proofgym redteam coq\n  proofgym redteam dafny --side fair --json\n"
                       "  proofgym tasks redteam-coq      # the cases, by id", formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("prover", nargs="?", default="coq", choices=["coq", "dafny", "hol_light"],
                   help="whose corpus (default: coq)")
    p.add_argument("--corpus", help="a corpus file of your own in the same format instead")
    p.add_argument("--side", choices=["cheat", "fair"], help="only the cheats, or only the honest cases")
    p.add_argument("--json", action="store_true", help="one JSON object: metrics and every case's verdict")
    p.set_defaults(func=run)

