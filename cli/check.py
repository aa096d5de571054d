"""`proofgym check`: one verdict for one proof (a task file, or a task of a suite; locally or on a service)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from proofgym.cli.common import EXIT_BAD_INPUT, EXIT_NOT_OK, EXIT_VERIFIER, die

if TYPE_CHECKING:
    from proofgym.envs.types import CheckResult

EPILOG_CHECK = """\
The task file is one JSON object with the keys id, system, context, statement,
reference_proof, category and timeout_s (see the README's "Task format").
The proof is the text after the statement, e.g. "Proof. intros. lia. Qed.";
a bare tactic script is wrapped in Proof/Qed.

Each call starts its prover cold: fine for Coq and Dafny (seconds), slow for HOL
Light (loading it takes minutes). For many checks, keep a service warm and send
them there with --server (or PROOFGYM_VERIFIER_URL):

  proofgym serve-verifier --port 8000 &
  proofgym check hol_task.json --proof tactic.ml --server http://127.0.0.1:8000

examples:
  proofgym check task.json --proof proof.v
  proofgym check task.json --proof - --json < proof.v
  proofgym check task.json --reference          # check the task's own reference proof
"""


def _read_proof(arg: str) -> str:
    from proofgym.envs.errors import InvalidSubmission
    from proofgym.envs.verifiers.base import MAX_PROOF_BYTES, validate_submission

    if arg == "-":
        data = sys.stdin.buffer.read(MAX_PROOF_BYTES + 1)
        where = "on stdin"
    else:
        path = Path(arg)
        if not path.exists() or path.is_dir():
            raise InvalidSubmission(f"proof file {arg} does not exist")
        with path.open("rb") as fh:  # also a pipe such as <(...): read at most one byte past the limit
            data = fh.read(MAX_PROOF_BYTES + 1)
        where = f"in {arg}"
    if len(data) > MAX_PROOF_BYTES:
        raise InvalidSubmission(f"the proof {where} is more than {MAX_PROOF_BYTES} bytes, the limit")
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
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise TaskFormatError(f"{path}: not UTF-8 text") from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        lines = [line for line in text.splitlines() if line.strip()]
        if len(lines) > 1 and all(line.lstrip().startswith("{") for line in lines[:2]):
            raise TaskFormatError(
                f"{path} looks like a suite ({len(lines)} JSON lines), not one task: "
                f"use `proofgym check --suite {path} --task-id ID ...` (list the ids with `proofgym tasks {path}`)"
            ) from None
        raise TaskFormatError(f"{path}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    if isinstance(raw, list):
        raise TaskFormatError(f"{path} holds a list of {len(raw)} tasks, not one: use `proofgym check --suite "
                              f"{path} --task-id ID ...` (list the ids with `proofgym tasks {path}`)")
    return Task.from_dict(raw, source=path)


def _suite_task(suite: str, task_id: str):
    from proofgym.envs.tasks.suites import load_tasks, unknown_task_message

    tasks = load_tasks(suite)
    for task in tasks:
        if task.id == task_id:
            return task
    raise LookupError(unknown_task_message(task_id, [t.id for t in tasks], suite))


def run(args: argparse.Namespace) -> int:
    from proofgym.envs.errors import InvalidSubmission, TaskFormatError, VerifierError
    from proofgym.envs.tasks.suites import SuiteNotFound
    from proofgym.envs.verifiers.base import make_verifier

    def fail(code: int, message: str) -> int:
        if args.json:  # a script reading stdout gets an answer too
            print(json.dumps({"error": message, "exit_code": code}, ensure_ascii=False))
        return die(code, message)

    try:
        if args.suite and args.task_id:
            task = _suite_task(args.suite, args.task_id)
        elif args.task and not (args.suite or args.task_id):
            task = _load_task(args.task)
        else:
            return fail(EXIT_BAD_INPUT, "name the task either as a task file (`proofgym check TASK.json ...`) or "
                                        "as --suite SUITE --task-id ID (both flags)")
        proof = task.reference_proof if args.reference else _read_proof(args.proof)
    except (TaskFormatError, InvalidSubmission, LookupError, SuiteNotFound) as exc:
        return fail(EXIT_BAD_INPUT, str(exc).strip("'\""))
    kwargs: dict[str, Any] = {}
    if args.audit:
        kwargs["audit"] = args.audit
    if args.hol_dir and task.system == "hol_light":
        kwargs["hol_dir"] = args.hol_dir
    server = args.server or os.environ.get("PROOFGYM_VERIFIER_URL")
    try:
        if server:
            from proofgym.envs.verifiers.service.client import ServiceVerifier

            verifier_cm: Any = ServiceVerifier(server, task.system, token=os.environ.get("PROOFGYM_VERIFIER_TOKEN"))
        else:
            verifier_cm = make_verifier(task.system, **kwargs)
        with verifier_cm as verifier, _still_waiting(server or "", every_s=30.0):
            result = verifier.check(task, proof)
    except TaskFormatError as exc:
        return fail(EXIT_BAD_INPUT, str(exc))
    except VerifierError as exc:
        return fail(EXIT_VERIFIER, f"{exc} (run `proofgym doctor`)")
    if args.json:
        print(json.dumps({"task_id": task.id, **result.to_dict()}, ensure_ascii=False))
    else:
        _print_result(task.id, result)
    if args.strict and result.verdict.value != "OK":
        return EXIT_NOT_OK
    return 0


def _print_result(task_id: str, result: CheckResult) -> None:
    """The verdict for a person: the verdict in colour, its reasons, the prover's messages, the first goals left."""
    from rich.console import Console

    console = Console()
    style = {"OK": "bold green", "CHEATING": "bold red"}.get(result.verdict.value, "bold yellow")
    console.print(f"[{style}]{result.verdict.value}[/]  {task_id}  ({result.wall_s:.3f} s, {result.backend}"
                  f"{', audited' if result.audited else ''})")
    for reason in result.reasons:
        console.print(f"  reason: {reason}", markup=False)
    for message in result.messages:
        console.print("  " + message.replace("\n", "\n  "), markup=False)
    for goal in result.remaining_goals[:3]:
        console.print("  remaining goal:\n    " + goal.pretty().replace("\n", "\n    "), markup=False)


@contextlib.contextmanager
def _still_waiting(server: str, every_s: float) -> Any:
    """While a check on a verifier service is unanswered, say so on stderr every ``every_s`` seconds
    (its first HOL Light check waits minutes for the base to load; silence looks like a hang)."""
    if not server:
        yield
        return
    done = threading.Event()
    start = time.monotonic()

    def beat() -> None:
        while not done.wait(every_s):
            print(f"proofgym: still waiting for the verifier service at {server} "
                  f"({time.monotonic() - start:.0f} s so far; a HOL Light base loads for minutes on first use; "
                  f"its log says how far it is)", file=sys.stderr, flush=True)

    thread = threading.Thread(target=beat, daemon=True, name="check-heartbeat")
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def add_parser(sub: Any) -> None:
    p = sub.add_parser("check", help="check one proof of one task and print the verdict", epilog=EPILOG_CHECK,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("task", nargs="?", help="task file (.json, one object); or name it with --suite and --task-id")
    p.add_argument("--suite", help="a suite (name or .jsonl) holding the task; with --task-id")
    p.add_argument("--task-id", dest="task_id", help="the task's id in --suite (list them: `proofgym tasks SUITE`)")
    group = p.add_mutually_exclusive_group(required=True)
    group.add_argument("--proof", help="file with the proof text, or - for stdin")
    group.add_argument("--reference", action="store_true", help="check the task's reference proof")
    p.add_argument("--json", action="store_true", help="print one JSON object (verdict, reasons, messages, ...); "
                   "on bad input {\"error\": ..., \"exit_code\": ...}")
    p.add_argument("--strict", action="store_true", help="exit 1 unless the verdict is OK (for scripts and CI)")
    p.add_argument("--audit", choices=["always", "sample", "never"],
                   help="independent coqc+coqchk re-check of an OK (default: sample, always for VM proofs)")
    p.add_argument("--server", metavar="URL", help="check on a running `proofgym serve-verifier` (warm provers) "
                   "instead of starting one; default: $PROOFGYM_VERIFIER_URL (token: $PROOFGYM_VERIFIER_TOKEN)")
    p.add_argument("--hol-dir", help="HOL Light installation: Debian's /usr/share/hol-light (default) or an "
                   "upstream checkout built with make (it has ocaml-hol)")
    p.set_defaults(func=run)

