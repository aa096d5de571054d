"""The ``proofgym`` command line: one module per command, each with ``add_parser(sub)`` and ``run(args)``.

    proofgym doctor                                   which provers are here, and what to install
    proofgym check TASK.json --proof FILE [--json]    one verdict for one proof
    proofgym check --suite S --task-id ID --proof F   the same for a task of a suite
    proofgym tasks SUITE [--category P1]              list a suite's task ids
    proofgym build coq-stdlib                         build + validate the default Coq suite
    proofgym build coq-project --lib stdpp            the same for an installed Coq library (or --project DIR)
    proofgym build s2n-bignum --checkout DIR --hol-dir DIR [--validate]   import s2n-bignum-bench's problems
    proofgym eval --suite coq-stdlib --agent reference --k 1 --workers 2
    proofgym eval --suite coq-stdlib --agent openai --base-url http://127.0.0.1:8000/v1 --model NAME --json
    proofgym serve-model CHECKPOINT [--port 8000]     an OpenAI-compatible server for a local checkpoint
    proofgym report RUN_DIR [RUN_DIR2]                Markdown/HTML report with plots
    proofgym serve-verifier [--port 8000] [--workers W] HTTP verifier service for trainers (batch checks)
    proofgym train sft|grpo|expert-iteration --config configs/train/grpo_cpu.yaml [...]  train with TRL

Exit codes: 0 a verdict was reached (whatever it is; `check --strict`: 1 unless it is OK),
2 bad input, 3 the verifier or a prover is broken or missing, 4 the model cannot be used
(no server, bad key, unknown model), 130 interrupted.

The command modules import only the standard library at the top; what a command needs is imported when it
runs, so that ``proofgym --help`` and ``proofgym tasks`` start fast.
"""

from __future__ import annotations

import argparse
import os
import sys

from proofgym.cli import (
    build,
    check,
    compare,
    doctor,
    export,
    redteam,
    report,
    serve_model,
    serve_verifier,
    tasks,
    train,
)
from proofgym.cli import eval as eval_command
from proofgym.cli.common import EXIT_BAD_INPUT, EXIT_MODEL, EXIT_NOT_OK, EXIT_VERIFIER

__all__ = ["EXIT_BAD_INPUT", "EXIT_MODEL", "EXIT_NOT_OK", "EXIT_VERIFIER", "build_parser", "main"]

#: The commands in the order ``proofgym --help`` lists them.
COMMANDS = (tasks, check, eval_command, serve_model, report, build, serve_verifier, train, export, compare, redteam,
            doctor)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="proofgym",
        description="Gymnasium environments for proof generation, with real provers as the dynamics.",
        epilog="Start with `proofgym doctor`, then `proofgym build coq-stdlib` and `proofgym eval --suite coq-stdlib`.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    from proofgym import __version__

    parser.add_argument("--version", action="version", version=f"proofgym {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `proofgym tasks coq-stdlib | head`: the reader has what it wanted
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so that the interpreter's final flush does not raise again
        return 0
