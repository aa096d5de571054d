"""Evaluation, the public entry: ``proofgym eval`` is :func:`evaluate`; every evaluation name is here.

The work is in three modules, re-exported here so that ``from proofgym.training.evaluate import ...``
keeps working:

- :mod:`~proofgym.training.eval_engine`: :func:`run_eval`, strategies driving episodes of
  ``proofgym/WholeProof-v0`` with any agent on a verifier pool;
- :mod:`~proofgym.training.eval_metrics`: :func:`summarize` (ACC#k / pass@k, fix@k, verdicts,
  Selene's failure taxonomy, cost) and :func:`print_summary`;
- :mod:`~proofgym.training.eval_runs`: :class:`EvalConfig` and the run directory
  (``results.jsonl``, ``config.json``, ``summary.json``, names, identity, resumption).

:func:`evaluate` is a whole run: load the suite, choose or resume the run dir, build the agent
and the strategy, run, write the summary, log to W&B.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from proofgym.agents.base import Agent, Prices, SamplingParams
from proofgym.agents.scripted import ReferenceAgent, ScriptedAgent
from proofgym.agents.strategies import make_strategy
from proofgym.agents.strategies.base import Strategy
from proofgym.envs.errors import ProofgymError
from proofgym.envs.tasks.coq_project import suite_load_path
from proofgym.envs.tasks.suites import load_tasks, resolve_suite
from proofgym.envs.types import Task
from proofgym.envs.verifiers.base import audit_options
from proofgym.training.eval_engine import EvalOptions, as_agent, run_eval
from proofgym.training.eval_metrics import (
    FAILURE_TYPES,
    EvalSummary,
    failure_type,
    pass_at_k,
    print_summary,
    reported_ks,
    summarize,
)
from proofgym.training.eval_runs import (
    AGENT_NAMES,
    EvalConfig,
    RunPaths,
    ensure_writable,
    file_sha256,
    find_resumable,
    load_config_file,
    read_json_object,
    read_results,
    run_identity,
    run_prefix,
    suite_name,
    version,
    write_json,
)
from proofgym.training.logging import WandbLogger

__all__ = [
    "AGENT_NAMES", "FAILURE_TYPES", "EvalConfig", "EvalOptions", "EvalSummary", "ReferenceAgent", "RunPaths",
    "ScriptedAgent",
    "as_agent", "build_agent", "build_strategy", "ensure_writable", "evaluate", "failure_type", "file_sha256",
    "find_resumable", "load_config_file", "pass_at_k", "print_summary", "read_json_object", "read_results",
    "reported_ks", "run_eval", "run_identity", "run_prefix", "suite_name", "summarize",
]


def build_agent(cfg: EvalConfig) -> Agent:
    """The agent that ``cfg`` names (imports only what that agent needs)."""

    sampling = SamplingParams(temperature=cfg.sampling_temperature(), top_p=cfg.top_p, max_tokens=cfg.max_tokens,
                              seed=cfg.seed)
    if cfg.agent == "reference":
        return ReferenceAgent()
    if cfg.agent == "scripted":
        if not cfg.script:
            raise ProofgymError("the scripted agent needs --script FILE.json (task id -> reply or list of replies)")
        return ScriptedAgent.from_file(cfg.script)
    if cfg.agent in ("openai", "anthropic"):
        from proofgym.agents.api import AnthropicAgent, OpenAIAgent, RetryPolicy

        cls = OpenAIAgent if cfg.agent == "openai" else AnthropicAgent
        return cls(cfg.model, base_url=cfg.base_url, api_key=cfg.api_key, sampling=sampling,
                   concurrency=cfg.concurrency, timeout=cfg.request_timeout,
                   retry=RetryPolicy(max_retries=cfg.max_retries), prices=Prices(cfg.price_in, cfg.price_out))
    if cfg.agent in ("local", "hf"):
        from proofgym.agents.hf import LocalAgent

        if not cfg.model:
            raise ProofgymError("the local agent needs --model CHECKPOINT (a checkpoint dir, a .gguf, or a cached hub id)")
        return LocalAgent(cfg.model, sampling=sampling, device=cfg.device, dtype=cfg.dtype,
                          batch_size=cfg.batch_size, threads=cfg.threads)
    raise ProofgymError(f"unknown agent {cfg.agent!r}; available: {', '.join(AGENT_NAMES)}")


def build_strategy(cfg: EvalConfig) -> Strategy:
    return make_strategy(cfg.strategy, **dict(cfg.strategy_options))


def evaluate(cfg: EvalConfig, *, progress: bool = False, console: Any = None,
             on_start: Callable[[RunPaths], None] | None = None) -> tuple[EvalSummary, RunPaths]:
    """A whole ``proofgym eval`` run: load, choose or resume the run dir, evaluate, write, log.

    Returns:
        The summary and the run's paths. ``summary.json`` holds the summary and the paths.
    """

    _check_options(cfg)
    suite_path = resolve_suite(cfg.suite)
    tasks = load_tasks(suite_path)
    if cfg.limit:
        tasks = tasks[: cfg.limit]
    load_path = suite_load_path(tasks)  # a project suite's -Q/-R bindings (metadata.coq_args), checked here
    agent = build_agent(cfg)
    try:
        strategy = build_strategy(cfg)
        identity = run_identity(cfg, file_sha256(suite_path), agent, strategy)
        paths = _run_paths(cfg, identity)
        ensure_writable(paths.results)
        previous = read_json_object(paths.config)
        _refuse_another_configuration(paths, previous, identity)
        if cfg.limit and paths.results.exists():
            tasks = tasks + _earlier_tasks(cfg, paths, load_tasks(suite_path), tasks)
        config = _run_config(cfg, paths, previous, identity, agent, suite_path)
        write_json(paths.config, config)
        if on_start:
            on_start(paths)
        logger = _wandb_logger(cfg, paths, config)
        try:
            options = EvalOptions(k=cfg.k, n=cfg.samples, workers=cfg.workers, engine=cfg.engine,
                                  verifier=cfg.verifier, system_kwargs=_system_kwargs(cfg, load_path),
                                  batch_size=cfg.batch_size, progress=progress, cache_dir=paths.run_dir)
            summary = run_eval(tasks, agent, paths.results, options, strategy=strategy,
                               on_result=logger.log_result if logger else None, console=console)
        except BaseException:
            if logger:
                logger.finish()
            raise
        _write_outcome(cfg, paths, config, strategy, summary, logger)
        return summary, paths
    finally:
        agent.close()


def _check_options(cfg: EvalConfig) -> None:
    if cfg.k < 1 or cfg.workers < 1 or cfg.samples < cfg.k:
        raise ProofgymError("--k and --workers must be >= 1, and --n >= --k")
    if cfg.engine not in ("local", "ray"):
        raise ProofgymError(f"--engine must be local or ray, got {cfg.engine!r}")


def _run_paths(cfg: EvalConfig, identity: dict[str, Any]) -> RunPaths:
    """The run dir: ``--out``, the run of this command to resume (``--resume``), or a new one under ``runs_dir``."""
    if cfg.out:
        return RunPaths.for_out(cfg.out)
    found = find_resumable(cfg, identity) if cfg.resume else None
    if cfg.resume and found is None:
        print(f"proofgym: no run of this command to resume under {cfg.runs_dir}/; starting a new one",
              file=sys.stderr)
    name = f"{run_prefix(cfg)}__{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    fresh, i = Path(cfg.runs_dir) / name, 1
    while found is None and fresh.exists():  # two runs started in the same second
        i += 1
        fresh = Path(cfg.runs_dir) / f"{name}-{i}"
    return RunPaths.for_out(found or fresh)


def _refuse_another_configuration(paths: RunPaths, previous: dict[str, Any] | None, identity: dict[str, Any]) -> None:
    """A run dir holding results of another configuration is not added to."""
    if previous and previous.get("identity") and previous.get("results") == paths.results.name \
            and previous["identity"] != json.loads(json.dumps(identity)):
        diff = [key for key in identity if json.loads(json.dumps(identity[key])) != previous["identity"].get(key)]
        raise ProofgymError(f"{paths.run_dir} holds a run of another configuration (differs in: "
                            f"{', '.join(diff)}); pass another --out, or remove it")


def _earlier_tasks(cfg: EvalConfig, paths: RunPaths, suite: list[Task], selected: list[Task]) -> list[Task]:
    """A ``--limit`` rerun into a run dir adds to it: the tasks it already has results for beyond the limit, which its
    summary still covers."""
    done = {str(row.get("task_id")) for row in read_results(paths.results)}
    chosen = {t.id for t in selected}
    earlier = [t for t in suite if t.id in done and t.id not in chosen]
    if earlier:
        print(f"proofgym: {paths.run_dir} already has results for {len(earlier)} tasks beyond --limit "
              f"{cfg.limit}; the summary covers them too", file=sys.stderr)
    return earlier


def _run_config(cfg: EvalConfig, paths: RunPaths, previous: dict[str, Any] | None, identity: dict[str, Any],
                agent: Agent, suite_path: Path) -> dict[str, Any]:
    """What ``config.json`` holds: the public settings, the identity, the agent, and one segment per (re)start."""
    segments = list(previous.get("segments", [])) if previous else []
    segments.append({"started": datetime.now().isoformat(timespec="seconds"), "argv": sys.argv[1:]})
    public = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if not f.metadata.get("secret")}
    return {"config": public, "identity": identity, "agent": agent.describe(), "suite_path": str(suite_path),
            "results": paths.results.name, "segments": segments, "proofgym": version()}


def _wandb_logger(cfg: EvalConfig, paths: RunPaths, config: dict[str, Any]) -> Any:
    """The run's W&B logger (``--wandb``), else None."""
    if not cfg.wandb:
        return None

    return WandbLogger(project=cfg.wandb_project, name=paths.run_dir.name, config=config, directory=paths.run_dir,
                       mode=cfg.wandb_mode)


def _system_kwargs(cfg: EvalConfig, load_path: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """The verifiers' settings per system: the audit option, and a project suite's load path for Coq."""
    system_kwargs = audit_options(cfg.audit)
    if load_path:
        system_kwargs = {**system_kwargs, "coq": {**system_kwargs.get("coq", {}), "extra_args": load_path}}
    return system_kwargs


def _write_outcome(cfg: EvalConfig, paths: RunPaths, config: dict[str, Any], strategy: Strategy,
                   summary: EvalSummary, logger: Any) -> None:
    """``summary.json``, the demonstrations and the W&B run dir in ``config.json``, the W&B summary."""
    if hasattr(strategy, "demo_ids"):
        config["demonstrations"] = strategy.demo_ids()
        write_json(paths.config, config)
    payload = {**summary.to_dict(), "run_dir": str(paths.run_dir), "results": str(paths.results),
               "suite": cfg.suite, "agent": cfg.agent, "model": cfg.model, "strategy": cfg.strategy}
    write_json(paths.summary, payload)
    if logger:
        logger.log_summary(summary, read_results(paths.results))
        config["wandb_dir"] = str(logger.run_dir)
        write_json(paths.config, config)
        logger.finish()
