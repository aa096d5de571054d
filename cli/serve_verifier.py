"""`proofgym serve-verifier`: the HTTP verifier service for trainers (batch checks, JSON verdicts)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from proofgym.cli.common import EXIT_BAD_INPUT, EXIT_VERIFIER, add_guard_flags, die

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
  # one service per node of a Ray cluster, each checking on its own node's actor (docs/scale.md):
  proofgym serve-verifier --engine ray --ray-address auto --ray-share prover --ray-node local
"""


def run(args: argparse.Namespace) -> int:
    import signal

    from proofgym.envs.errors import ProofgymError
    from proofgym.envs.tasks.suites import load_task_index
    from proofgym.envs.verifiers.base import audit_options
    from proofgym.envs.verifiers.pool import make_pool
    from proofgym.envs.verifiers.service import TOKEN_ENV, ServiceConfig, ServiceConfigError, VerifierService

    if args.workers < 1:
        return die(EXIT_BAD_INPUT, "--workers must be >= 1")
    if args.context_allowance_s is not None and args.context_allowance_s < 0:
        return die(EXIT_BAD_INPUT, "--context-allowance-s must be >= 0")
    ray_options = _ray_options(args)
    if ray_options and args.engine != "ray":
        return die(EXIT_BAD_INPUT, f"{', '.join(_ray_flags(ray_options))} need --engine ray (they place Ray actors)")
    token = args.token or os.environ.get(TOKEN_ENV) or None
    if args.token_file:
        try:
            token = Path(args.token_file).read_text(encoding="utf-8").strip()
        except OSError as exc:
            return die(EXIT_BAD_INPUT, f"cannot read --token-file {args.token_file}: {exc.strerror or exc}")
    config = ServiceConfig(host=args.host, port=args.port, token=token, max_body_bytes=int(args.max_body_mb * 2**20),
                           max_batch=args.max_batch, max_queue=args.max_queue,
                           allowed_origins=tuple(args.allow_origin), allowed_hosts=tuple(args.allow_host))
    try:
        VerifierService.validate(config)
    except ServiceConfigError as exc:
        return die(EXIT_BAD_INPUT, str(exc))
    try:
        tasks = load_task_index(args.suite)
    except ProofgymError as exc:
        return die(EXIT_BAD_INPUT, str(exc))
    system_kwargs = audit_options(args.audit)
    if args.hol_dir:
        system_kwargs = {**system_kwargs, "hol_light": {**system_kwargs.get("hol_light", {}), "hol_dir": args.hol_dir}}
    try:
        allowance = {} if args.context_allowance_s is None else {"context_allowance_s": args.context_allowance_s}
        pool = make_pool(args.engine, workers=args.workers, system_kwargs=system_kwargs, address=args.ray_address,
                         verdict_cache=args.verdict_cache, **allowance, **ray_options)
    except ProofgymError as exc:
        return die(EXIT_VERIFIER, str(exc))
    try:
        service = VerifierService(pool, config, tasks=tasks, owns_pool=True)
    except ServiceConfigError as exc:
        pool.close()
        return die(EXIT_BAD_INPUT, str(exc))
    except OSError as exc:
        pool.close()
        return die(EXIT_BAD_INPUT, f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}")

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


def _ray_options(args: argparse.Namespace) -> dict[str, str]:
    """The Ray placement flags given, as RayVerifierPool's keyword arguments (node_resource, node, share)."""
    given = {"node_resource": args.ray_node_resource, "node": args.ray_node, "share": args.ray_share}
    return {key: value for key, value in given.items() if value}


def _ray_flags(options: dict[str, str]) -> list[str]:
    return ["--ray-" + key.replace("_", "-") for key in options]


def add_parser(sub: Any) -> None:
    p = sub.add_parser("serve-verifier", help="an HTTP verifier service for trainers: batch checks, JSON verdicts",
                       epilog=EPILOG_SERVE_VERIFIER, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; others need a token)")
    p.add_argument("--port", type=int, default=8000, help="TCP port (default 8000; 0 picks a free one)")
    p.add_argument("--workers", type=int, default=2, help="verifier worker processes (per node with --engine ray)")
    p.add_argument("--engine", choices=["local", "ray"], default="local", help="verifier pool engine (default local)")
    p.add_argument("--ray-address", default=None,
                   help="Ray cluster to join ('auto': one started with `ray start` here; default: $RAY_ADDRESS, "
                        "else a new local instance listening on 127.0.0.1 only)")
    p.add_argument("--ray-node-resource", metavar="R", default=None,
                   help="with --engine ray: put an actor only on the nodes started with this custom resource "
                        "(`ray start --resources '{\"R\": 1}'`), e.g. the machines that run provers")
    p.add_argument("--ray-node", metavar="ID", default=None,
                   help="with --engine ray: send every check to the actor on this node while it is up ('local': "
                        "the node this service runs on), so a node's service checks on its own node's provers")
    p.add_argument("--ray-share", metavar="NAME", default=None,
                   help="with --engine ray: name the actors in the cluster; every pool or service started with the "
                        "same name uses the same actors, one per node (the first one started owns them)")
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
    add_guard_flags(p)
    p.set_defaults(func=run)

