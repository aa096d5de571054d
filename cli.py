"""The ``proofgym`` command line.

    proofgym doctor                                   which provers are here, and what to install
    proofgym check TASK.json --proof FILE [--json]    one verdict for one proof
    proofgym build coq-stdlib                         build + validate the default Coq suite
    proofgym eval --suite coq-stdlib --agent reference --k 1 --workers 2

Exit codes: 0 a verdict was reached (whatever it is), 2 bad input, 3 the verifier
or a prover is broken or missing, 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

EXIT_BAD_INPUT = 2
EXIT_VERIFIER = 3

EPILOG_CHECK = """\
The task file is one JSON object with the keys id, system, context, statement,
reference_proof, category and timeout_s (see the README's "Task format").
The proof is the text after the statement, e.g. "Proof. intros. lia. Qed.";
a bare tactic script is wrapped in Proof/Qed.

examples:
  proofgym check task.json --proof proof.v
  proofgym check task.json --proof - --json < proof.v
  proofgym check task.json --reference          # check the task's own reference proof
"""

EPILOG_EVAL = """\
Results are appended to --out as JSONL while the run goes; run the same command
again to resume a killed run (finished checks are not redone).

examples:
  proofgym eval --suite coq-stdlib --agent reference --k 1 --workers 2
  proofgym eval --suite my_tasks.jsonl --agent reference --out runs/mine.jsonl --json
"""


def _die(code: int, message: str) -> int:
    print(f"proofgym: error: {message}", file=sys.stderr)
    return code


def _read_proof(arg: str) -> str:
    from proofgym.envs.errors import InvalidSubmission
    from proofgym.envs.verifiers.base import MAX_PROOF_BYTES, validate_submission

    if arg == "-":
        data = sys.stdin.buffer.read(MAX_PROOF_BYTES + 1)
    else:
        path = Path(arg)
        if not path.is_file():
            raise InvalidSubmission(f"proof file {arg} does not exist")
        size = path.stat().st_size
        if size > MAX_PROOF_BYTES:
            raise InvalidSubmission(f"proof file {arg} is {size} bytes; the limit is {MAX_PROOF_BYTES} bytes")
        data = path.read_bytes()
    if b"\x00" in data:
        raise InvalidSubmission(f"proof {arg} is binary (contains NUL bytes); send plain text")
    return validate_submission(data)


def _load_task(path: str):
    from proofgym.envs.errors import TaskFormatError
    from proofgym.envs.types import Task

    p = Path(path)
    if not p.is_file():
        raise TaskFormatError(f"task file {path} does not exist")
    try:
        raw = json.loads(p.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise TaskFormatError(f"{path}: not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise TaskFormatError(f"{path}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    return Task.from_dict(raw, source=path)


def cmd_check(args: argparse.Namespace) -> int:
    from proofgym.envs.errors import InvalidSubmission, TaskFormatError, VerifierError
    from proofgym.envs.verifiers.base import make_verifier

    try:
        task = _load_task(args.task)
        proof = task.reference_proof if args.reference else _read_proof(args.proof)
    except (TaskFormatError, InvalidSubmission) as exc:
        return _die(EXIT_BAD_INPUT, str(exc))
    kwargs: dict[str, Any] = {}
    if args.audit:
        kwargs["audit"] = args.audit
    try:
        with make_verifier(task.system, **kwargs) as verifier:
            result = verifier.check(task, proof)
    except TaskFormatError as exc:
        return _die(EXIT_BAD_INPUT, str(exc))
    except VerifierError as exc:
        return _die(EXIT_VERIFIER, f"{exc} (run `proofgym doctor`)")
    if args.json:
        print(json.dumps({"task_id": task.id, **result.to_dict()}, ensure_ascii=False))
    else:
        from rich.console import Console

        console = Console()
        style = {"OK": "bold green", "CHEATING": "bold red"}.get(result.verdict.value, "bold yellow")
        console.print(f"[{style}]{result.verdict.value}[/]  {task.id}  ({result.wall_s:.3f} s, {result.backend}"
                      f"{', audited' if result.audited else ''})")
        for reason in result.reasons:
            console.print(f"  reason: {reason}", markup=False)
        for message in result.messages:
            console.print("  " + message.replace("\n", "\n  "), markup=False)
        for goal in result.remaining_goals[:3]:
            console.print("  remaining goal:\n    " + goal.pretty().replace("\n", "\n    "), markup=False)
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from proofgym.envs.errors import ProofgymError
    from proofgym.envs.tasks.suites import load_tasks
    from proofgym.training.evaluate import AGENTS, print_summary, run_eval

    if args.agent not in AGENTS:
        return _die(EXIT_BAD_INPUT, f"unknown agent {args.agent!r}; available here: {', '.join(AGENTS)}")
    if args.k < 1 or args.workers < 1:
        return _die(EXIT_BAD_INPUT, "--k and --workers must be >= 1")
    try:
        tasks = load_tasks(args.suite)
    except ProofgymError as exc:
        return _die(EXIT_BAD_INPUT, str(exc))
    if args.limit:
        tasks = tasks[: args.limit]
    suite_name = Path(str(args.suite)).stem
    out = Path(args.out) if args.out else Path("runs") / "eval" / f"{suite_name}__{args.agent}__k{args.k}.jsonl"
    try:
        summary = run_eval(tasks, agent=AGENTS[args.agent](), k=args.k, out=out, workers=args.workers,
                           progress=not args.no_progress and sys.stderr.isatty() or args.progress)
    except ProofgymError as exc:
        return _die(EXIT_BAD_INPUT, str(exc))
    except KeyboardInterrupt:
        print(f"interrupted; results so far are in {out}; rerun the same command to resume", file=sys.stderr)
        return 130
    if args.json:
        print(json.dumps({**summary.to_dict(), "out": str(out)}))
    else:
        print_summary(summary)
        print(f"results: {out}")
    return 0


def cmd_build(args: argparse.Namespace) -> int:
    from proofgym.envs.errors import ProofgymError
    from proofgym.envs.tasks.build import build_coq_stdlib

    if args.name != "coq-stdlib":
        return _die(EXIT_BAD_INPUT, f"unknown suite {args.name!r}; buildable here: coq-stdlib")
    try:
        report = build_coq_stdlib(out=Path(args.out) if args.out else None, seed=args.seed, workers=args.workers,
                                  validate=not args.no_validate, limit=args.limit, progress=not args.no_progress)
    except ProofgymError as exc:
        return _die(EXIT_VERIFIER, str(exc))
    print(report.render())
    return 0


def _version(cmd: list[str]) -> str | None:
    if shutil.which(cmd[0]) is None:
        return None
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return "present, but did not answer --version"
    text = (out.stdout + out.stderr).strip().splitlines()
    return text[0] if text else "present"


def cmd_doctor(args: argparse.Namespace) -> int:
    from proofgym.envs.verifiers.sandbox import bwrap_available
    from rich.console import Console
    from rich.table import Table

    rows = [
        ("coq", "coqc", _version(["coqc", "--version"]), "apt-get install coq"),
        ("coq", "coqidetop.opt", "present" if shutil.which("coqidetop.opt") else None, "apt-get install coq"),
        ("coq", "coqchk", "present" if shutil.which("coqchk") else None, "apt-get install coq"),
        ("coq", "CoqHammer", "present" if Path("/usr/libexec/coq-hammer").exists() else None,
         "apt-get install libcoq-hammer"),
        ("hol_light", "hol-light", "present" if shutil.which("hol-light") or Path("/usr/share/hol-light").exists()
         else None, "apt-get install hol-light libnum-ocaml-dev"),
        ("dafny", "dafny", _version(["dafny", "/version"]), "apt-get install dafny z3"),
        ("isabelle", "isabelle", _version(["isabelle", "version"]), "install Isabelle from its site (optional)"),
        ("sandbox", "bwrap", "works" if bwrap_available() else None, "apt-get install bubblewrap"),
    ]
    table = Table(title="proofgym doctor")
    for col in ("system", "tool", "status", "to install"):
        table.add_column(col)
    for system, tool, status, install in rows:
        table.add_row(system, tool, f"[green]{status}[/]" if status else "[red]missing[/]", "" if status else install)
    Console().print(table)
    wired = {"coq"}
    print(f"verifiers wired in this version: {', '.join(sorted(wired))}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="proofgym",
        description="Gymnasium environments for proof generation, with real provers as the dynamics.",
        epilog="Start with `proofgym doctor`, then `proofgym build coq-stdlib` and `proofgym eval --suite coq-stdlib`.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("check", help="check one proof of one task and print the verdict", epilog=EPILOG_CHECK,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("task", help="task file (.json, one object)")
    group = p.add_mutually_exclusive_group(required=True)
    group.add_argument("--proof", help="file with the proof text, or - for stdin")
    group.add_argument("--reference", action="store_true", help="check the task's reference proof")
    p.add_argument("--json", action="store_true", help="print one JSON object (verdict, reasons, messages, ...)")
    p.add_argument("--audit", choices=["always", "sample", "never"],
                   help="independent coqc+coqchk re-check of an OK (default: sample, always for VM proofs)")
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("eval", help="evaluate an agent on a suite: pass@k per category", epilog=EPILOG_EVAL,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", required=True, help="a built suite name (coq-stdlib) or a .jsonl path")
    p.add_argument("--agent", default="reference", help="agent name (default: reference)")
    p.add_argument("--k", type=int, default=1, help="samples per task; pass@k is reported (default 1)")
    p.add_argument("--workers", type=int, default=1, help="parallel verifier processes (default 1)")
    p.add_argument("--out", help="results JSONL (default runs/eval/<suite>__<agent>__k<k>.jsonl)")
    p.add_argument("--limit", type=int, default=0, help="only the first N tasks")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--progress", action="store_true", help="force the progress bar even when not a terminal")
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("build", help="build and validate a suite into the cache dir",
                       description="Extract lemmas from the installed sources, sample Selene's 160/120/80 "
                                   "P1/P2/P3 split with a seed, and keep only tasks whose reference proof "
                                   "verifies in isolation and whose Admitted / exact-original cheats are rejected.")
    p.add_argument("name", help="suite to build: coq-stdlib")
    p.add_argument("--out", help="output JSONL (default $PROOFGYM_CACHE/suites/<name>.jsonl)")
    p.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    p.add_argument("--workers", type=int, default=2, help="parallel validation workers (default 2)")
    p.add_argument("--limit", type=int, default=0, help="validate only the first N sampled tasks (for a quick try)")
    p.add_argument("--no-validate", action="store_true", help="skip validation (not recommended)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_build)

    p = sub.add_parser("doctor", help="which provers are installed, their versions, and what to install")
    p.set_defaults(func=cmd_doctor)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
