"""`proofgym eval`: evaluate an agent on a suite (pass@k per category), into a run dir."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from proofgym.cli.common import EXIT_BAD_INPUT, EXIT_MODEL, EXIT_VERIFIER, die

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


def run(args: argparse.Namespace) -> int:
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
        return die(EXIT_MODEL, str(exc))
    except VerifierError as exc:
        return die(EXIT_VERIFIER, f"{exc} (run `proofgym doctor`)")
    except ProofgymError as exc:
        return die(EXIT_BAD_INPUT, str(exc))
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
        return die(EXIT_VERIFIER, f"every check failed in the verifier ({summary.harness_failures} harness "
                                   f"failures); run `proofgym doctor`")
    return 0


def add_parser(sub: Any) -> None:
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
    p.set_defaults(func=run)

