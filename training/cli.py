"""``proofgym train sft|grpo|expert-iteration``: run a training config, with one-line errors and a summary at the end.

Exit codes follow ``proofgym``'s: 0 done, 2 bad input (config, model, suite, split),
3 a verifier that cannot run, 130 interrupted (a checkpoint was saved). The work is in
:mod:`proofgym.training.runner`; this module only picks the algorithm (imported lazily, so
``--help`` answers without importing TRL or torch).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from proofgym.training.runner import ALGOS, die, own_fields, print_help, print_result, run_main

__all__ = ["ALGOS", "main", "own_fields", "print_help", "print_result", "run"]


def run(algo: str, argv: Sequence[str]) -> int:
    """Parse ``argv`` (``--config FILE.yaml`` and ``--field value`` flags) and train; the exit code."""
    if algo not in ALGOS:
        return die(2, f"unknown training algorithm {algo!r}; use {', '.join(ALGOS)}")
    if any(a in ("-h", "--help") for a in argv):
        print_help(algo)
        return 0
    try:
        if algo == "sft":
            from proofgym.training.sft import main
        elif algo == "expert-iteration":
            from proofgym.training.expert_iteration import main
        else:
            from proofgym.training.grpo import main
    except ImportError as exc:
        return die(2, f"training needs the train extra: pip install 'proofgym[train]' ({exc})")
    return run_main(algo, main, argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print("usage: proofgym train {sft,grpo,expert-iteration} [--config FILE.yaml] [--field value ...]\n"
              "  proofgym train grpo --help   lists every field with its help text")
        return 0 if args else 2
    return run(args[0], args[1:])


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
