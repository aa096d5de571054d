"""Evaluation: agents and strategies against verifiers; ACC#k / pass@k, verdicts, failures, cost.

The engine (:func:`run_eval`) runs episodes: a strategy asks an agent for a
proof (batched: API agents send a batch concurrently, local models generate it
in one pass), a pool of verifier processes checks it with back-pressure (a
bounded number of proofs waits for verification), and the strategy may ask
again with the verifier's feedback (Selene's fixing round). Generation runs in
a background thread while verification runs in the pool.

Each finished episode is appended to a JSONL file at once; a rerun with the same
file skips the (task, sample) pairs already there, so a killed run resumes and
ends with the same totals. Failures of the harness are never scored: a verifier
that breaks (``harness_failures``) or a model request that fails after its
retries (``agent_failures``) writes no row, is counted, and is redone by the
next run. A model that cannot be reached at all stops the run
(:class:`~proofgym.agents.base.ModelUnavailable`).

:func:`evaluate` is what ``proofgym eval`` calls: a run directory with
``results.jsonl``, ``config.json`` and ``summary.json``, resumption, and W&B.

Metrics (:func:`summarize`):

- ``pass@j`` for j ≤ n samples, the unbiased estimator over *first attempts*;
  with n == k it is Selene's ACC#k (also reported as ``acc#k``);
- ``fix@j``/``fix#k`` over the final attempt of each episode, when a strategy
  repairs (Selene's "fixing": a proof fixed in round two counts here, not in ACC#1);
- counts per verdict (final attempts) and per attempt, cheat reasons;
- the failure taxonomy of Selene's Table 3 (logic / undefined / syntax / other)
  over failed first attempts, from the verifier's error categories;
- cost: tokens, dollars where prices are known, verifier calls and CPU seconds,
  wall time, and each per solved task.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import re
import shutil
import sys
import threading
import time
import uuid
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from proofgym.agents.base import Agent, Generation, Request
from proofgym.agents.scripted import ReferenceAgent, ScriptedAgent
from proofgym.agents.strategies.base import Attempt, PlainStrategy, Runtime, Strategy
from proofgym.envs.errors import ProofgymError
from proofgym.envs.progress import ProgressBar
from proofgym.envs.types import Task, Verdict
from proofgym.envs.verifiers.base import audit_options
from proofgym.envs.verifiers.pool import PoolResult, make_pool

FAILURE_TYPES = ("logic", "undefined", "syntax", "other")
"""Selene's Table 3 columns."""

AGENT_NAMES = ("reference", "scripted", "openai", "anthropic", "local")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k (Chen et al. 2021): ``1 - C(n-c, k) / C(n, k)``; ACC#k when n == k."""
    if n < k:
        raise ValueError(f"need n >= k samples, got n={n}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def reported_ks(n: int, k: int | None = None) -> list[int]:
    """The j of pass@j to report for n samples: every j up to 10, then 1-2-5 steps, and k and n."""
    ks = {j for j in range(1, min(n, 10) + 1)}
    step = 10
    while step <= n:
        ks.update(j for j in (step, 2 * step, 5 * step) if j <= n)
        step *= 10
    ks.update(j for j in (k, n) if j and j <= n)
    return sorted(ks)


def failure_type(error_category: str | None) -> str:
    """Selene's taxonomy from a verifier error category: logic, undefined, syntax, or other."""
    return error_category if error_category in ("logic", "undefined", "syntax") else "other"


AGENTS: dict[str, Callable[[], Any]] = {"reference": ReferenceAgent}
"""Agents that need no options (kept for callers of the first API); ``build_agent`` makes every kind."""


# -- summary -----------------------------------------------------------------------------------------
@dataclass
class EvalSummary:
    """Totals of an evaluation run, as printed, written to ``summary.json`` and logged to W&B."""

    k: int
    per_category: dict[str, dict[str, float]] = field(default_factory=dict)
    verdicts: Counter = field(default_factory=Counter)
    n_tasks: int = 0
    n_results: int = 0
    harness_failures: int = 0
    cheat_reasons: Counter = field(default_factory=Counter)
    n_samples: int = 0
    max_attempts: int = 1
    agent_failures: int = 0
    attempt_verdicts: Counter = field(default_factory=Counter)
    failure_taxonomy: dict[str, dict[str, int]] = field(default_factory=dict)
    error_categories: Counter = field(default_factory=Counter)
    cost: dict[str, Any] = field(default_factory=dict)
    rates: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    upper_bound: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "k": self.k,
            "per_category": self.per_category,
            "verdicts": dict(self.verdicts),
            "n_tasks": self.n_tasks,
            "n_results": self.n_results,
            "harness_failures": self.harness_failures,
            "cheat_reasons": dict(self.cheat_reasons),
            "n_samples": self.n_samples,
            "max_attempts": self.max_attempts,
            "agent_failures": self.agent_failures,
            "attempt_verdicts": dict(self.attempt_verdicts),
            "failure_taxonomy": self.failure_taxonomy,
            "error_categories": dict(self.error_categories),
            "cost": self.cost,
            "rates": self.rates,
            "upper_bound": self.upper_bound,
            "notes": list(self.notes),
        }

    def metrics(self) -> dict[str, float]:
        """Flat, namespaced metrics for W&B (``proof/pass@1``, ``verdict/OK``, ``category/P1/pass@1``...)."""
        out: dict[str, float] = {}
        for name, value in self.per_category.get("all", {}).items():
            if name != "n":
                out[f"proof/{name}"] = value
        for cat, stats in self.per_category.items():
            if cat != "all":
                for name, value in stats.items():
                    out[f"category/{cat}/{name}"] = value
        out["proof/cheat_rate"] = self.rates.get("cheat_rate", 0.0)
        out["verifier/timeout_rate"] = self.rates.get("timeout_rate", 0.0)
        out["verifier/error_rate"] = self.rates.get("error_rate", 0.0)
        for verdict in Verdict:
            out[f"verdict/{verdict.value}"] = self.verdicts.get(verdict.value, 0)
        for name, value in self.failure_taxonomy.get("all", {}).items():
            out[f"failures/{name}"] = value
        for name, value in self.cost.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                out[f"cost/{name}"] = value
            elif isinstance(value, dict):
                out.update({f"cost/{name}/{k}": v for k, v in value.items() if isinstance(v, (int, float))})
        out["eval/harness_failures"] = self.harness_failures
        out["eval/agent_failures"] = self.agent_failures
        out["eval/n_results"] = self.n_results
        return out


def _attempts_of(row: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    attempts = row.get("attempts")
    return list(attempts) if attempts else [row]  # rows of the first format are one attempt


def summarize(rows: Iterable[Mapping[str, Any]], tasks: Sequence[Task], k: int, *, n: int | None = None,
              max_attempts: int = 1) -> EvalSummary:
    """All the metrics over ``tasks`` from result rows (see the module docstring).

    Args:
        rows: Result rows (one per task and sample; duplicates count once).
        tasks: The evaluated tasks (categories, and which rows count).
        k: The k of pass@k / ACC#k.
        n: Samples per task (default ``k``); a task counts in pass@j once it has all ``n``.
        max_attempts: The strategy's attempts per episode; above 1 the ``fix`` metrics are added.
    """
    n = k if n is None else n
    if n < k:
        raise ValueError(f"need n >= k samples per task, got n={n}, k={k}")
    wanted = {t.id: t for t in tasks}
    by_task: dict[str, dict[int, Mapping[str, Any]]] = defaultdict(dict)
    summary = EvalSummary(k=k, n_tasks=len(tasks), n_samples=n, max_attempts=max_attempts)
    taxonomy: dict[str, Counter] = defaultdict(Counter)
    cost = Counter()
    cost_usd = 0.0
    priced = False
    segments: dict[str, float] = {}
    for row in rows:
        task = wanted.get(row.get("task_id"))
        if task is None or row["sample"] >= n or row["sample"] in by_task[task.id]:
            continue  # another suite's row, a sample beyond n, or a duplicate: never counted twice
        by_task[task.id][row["sample"]] = row
        summary.verdicts[row["verdict"]] += 1
        summary.n_results += 1
        attempts = _attempts_of(row)
        for attempt in attempts:
            summary.attempt_verdicts[attempt["verdict"]] += 1
            if attempt["verdict"] == Verdict.CHEATING.value:
                for reason in attempt.get("reasons", []):
                    summary.cheat_reasons[reason.split(":")[0]] += 1
            cost["prompt_tokens"] += int(attempt.get("prompt_tokens", 0) or 0)
            cost["completion_tokens"] += int(attempt.get("completion_tokens", 0) or 0)
            cost["generation_s"] += float(attempt.get("gen_s", 0.0) or 0.0)
            cost["verifier_calls"] += 1
            cost["verifier_cpu_s"] += float(attempt.get("cpu_s", 0.0) or 0.0)
            cost["verifier_wall_s"] += float(attempt.get("wall_s", 0.0) or 0.0)
            if attempt.get("cost_usd") is not None:
                priced = True
                cost_usd += float(attempt["cost_usd"])
        first = attempts[0]
        if first["verdict"] != Verdict.OK.value:
            kind = failure_type(first.get("error_category"))
            for cat in (task.category or "-", "all"):
                taxonomy[cat]["failures"] += 1
                taxonomy[cat][kind] += 1
            summary.error_categories[first.get("error_category") or "none"] += 1
        if "segment" in row:
            segments[row["segment"]] = max(segments.get(row["segment"], 0.0), float(row.get("elapsed_s", 0.0)))
    ks = reported_ks(n, k)
    cats: dict[str, list[dict[str, float]]] = defaultdict(list)
    solved = 0
    for task in tasks:
        samples = by_task.get(task.id, {})
        if len(samples) < n:
            continue  # incomplete (e.g. a harness failure): not scored, counted in n_results
        first_ok = sum(_attempts_of(r)[0]["verdict"] == Verdict.OK.value for r in samples.values())
        final_ok = sum(r["verdict"] == Verdict.OK.value for r in samples.values())
        scores = {f"pass@{j}": pass_at_k(n, first_ok, j) for j in ks}
        scores[f"acc#{k}"] = pass_at_k(n, first_ok, k)
        if max_attempts > 1:
            scores.update({f"fix@{j}": pass_at_k(n, final_ok, j) for j in ks})
            scores[f"fix#{k}"] = pass_at_k(n, final_ok, k)
        solved += final_ok > 0
        cats[task.category or "-"].append(scores)
        cats["all"].append(scores)
    for cat in sorted(cats, key=lambda c: (c == "all", c)):
        scores = cats[cat]
        summary.per_category[cat] = {"n": len(scores), **{
            name: sum(s[name] for s in scores) / len(scores) for name in scores[0]}}
    summary.failure_taxonomy = {cat: {"failures": c["failures"], **{t: c[t] for t in FAILURE_TYPES}}
                                for cat, c in sorted(taxonomy.items(), key=lambda kv: (kv[0] == "all", kv[0]))}
    attempts_total = sum(summary.attempt_verdicts.values())
    if attempts_total:
        summary.rates = {f"{v.value.lower()}_rate": summary.attempt_verdicts.get(v.value, 0) / attempts_total
                         for v in Verdict}
        summary.rates["cheat_rate"] = summary.rates.pop("cheating_rate")
    wall = sum(segments.values())
    tokens = cost["prompt_tokens"] + cost["completion_tokens"]
    summary.cost = {
        "prompt_tokens": cost["prompt_tokens"], "completion_tokens": cost["completion_tokens"], "total_tokens": tokens,
        "cost_usd": round(cost_usd, 6) if priced else None,
        "generation_s": round(cost["generation_s"], 3), "verifier_calls": cost["verifier_calls"],
        "verifier_cpu_s": round(cost["verifier_cpu_s"], 3), "verifier_wall_s": round(cost["verifier_wall_s"], 3),
        "run_wall_s": round(wall, 3), "solved_tasks": solved,
        "per_solved_task": None if not solved else {
            "tokens": round(tokens / solved, 1), "verifier_calls": round(cost["verifier_calls"] / solved, 2),
            "verifier_cpu_s": round(cost["verifier_cpu_s"] / solved, 3), "wall_s": round(wall / solved, 3),
            "cost_usd": round(cost_usd / solved, 6) if priced else None},
    }
    return summary


# -- results file --------------------------------------------------------------------------------------
def ensure_writable(path: Path, min_free_bytes: int = 10 * 1024 * 1024) -> None:
    """Fail before any work starts if results cannot be written."""
    parent = path.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ProofgymError(f"cannot create results dir {parent}: {exc.strerror}; pass --out somewhere writable") from None
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise ProofgymError(f"results path {path} is not writable; pass --out somewhere writable")
    free = shutil.disk_usage(parent).free
    if free < min_free_bytes:
        raise ProofgymError(f"only {free // 1024} KiB free at {parent}; free some space or pass --out elsewhere")


def read_results(path: Path) -> list[dict[str, Any]]:
    """Results already written; a torn last line (killed mid-write) is ignored."""
    path = Path(path)
    if not path.exists():
        return []
    rows = []
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(row, dict) and "task_id" in row and "sample" in row and "verdict" in row:
                rows.append(row)
    return rows


def _repair_tail(path: Path) -> None:
    """Make sure the file ends with a newline so an append never glues onto a torn line."""
    if path.exists() and path.stat().st_size:
        with path.open("rb+") as fh:
            fh.seek(-1, os.SEEK_END)
            if fh.read(1) != b"\n":
                fh.write(b"\n")


# -- verdicts as rows --------------------------------------------------------------------------------
def _check_row(task: Task, sample: int, outcome: PoolResult) -> dict[str, Any]:
    """A results row's verdict fields from a pool result, or ``{"harness_error": ...}`` when there is no verdict."""
    if outcome.result is None:
        return {"task_id": task.id, "sample": sample, "harness_error": f"{outcome.error_kind}: {outcome.harness_error}"}
    row = {"task_id": task.id, "sample": sample, "category": task.category, "system": task.system}
    row.update(outcome.result.to_dict())
    row["feedback"] = outcome.result.feedback()
    return row


# -- the engine ---------------------------------------------------------------------------------------
class _LegacyAgent(Agent):
    """Wraps an object with ``act(task, sample) -> proof`` (the first evaluation API) as an agent."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = getattr(inner, "name", type(inner).__name__)

    def generate(self, requests: Sequence[Request]) -> list[Generation]:
        return [Generation(self.inner.act(r.task, r.sample), is_proof=True) for r in requests]


def as_agent(agent: Any) -> Agent:
    """``agent`` itself when it can ``generate``; an adapter for objects with ``act(task, sample)``."""
    if callable(getattr(agent, "generate", None)):
        return agent
    if callable(getattr(agent, "act", None)):
        return _LegacyAgent(agent)
    raise TypeError(f"{type(agent).__name__} is not an agent: it needs generate(requests) or act(task, sample)")


@dataclass
class _Episode:
    task: Task
    sample: int
    attempts: list[Attempt] = field(default_factory=list)
    request: Request | None = None


def _background(fn: Callable[[], Any]) -> Future:
    """Run ``fn`` in a daemon thread (a hung model request must not keep the process alive on Ctrl-C)."""
    future: Future = Future()

    def target() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(fn())
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting loop
            future.set_exception(exc)

    threading.Thread(target=target, name="proofgym-generate", daemon=True).start()
    return future


def run_eval(
    tasks: list[Task],
    *,
    agent: Any,
    k: int,
    out: Path,
    workers: int = 1,
    verifier_kwargs: dict[str, Any] | None = None,
    progress: bool = True,
    on_result: Callable[[dict[str, Any]], None] | None = None,
    strategy: Strategy | None = None,
    n: int | None = None,
    batch_size: int = 16,
    verifier: str | None = None,
    cache_dir: Path | None = None,
    console: Any = None,
    engine: str = "local",
    system_kwargs: Mapping[str, Mapping[str, Any]] | None = None,
) -> EvalSummary:
    """Evaluate ``agent`` with ``strategy`` on ``tasks``, ``n`` samples each; append rows to ``out``; return totals.

    Args:
        tasks: The suite's tasks (a strategy may set some aside as demonstrations).
        agent: An :class:`~proofgym.agents.base.Agent` (or an object with ``act(task, sample)``).
        k: pass@k / ACC#k to report.
        out: The results JSONL (appended; rows already there are not redone).
        workers: Verifier processes (per node with ``engine="ray"``).
        verifier_kwargs: Options for every verifier.
        progress: Show a progress bar (on stderr).
        on_result: Called with each row as it is written.
        strategy: Default: one zero-shot attempt (:class:`PlainStrategy`).
        n: Samples per task (default ``k``).
        batch_size: Requests per generation batch.
        verifier: ``"module:factory"`` of the verifier to use instead of the system's (tests, custom checkers).
        cache_dir: Where a strategy may cache what it prepares (default: ``out``'s folder).
        console: A rich console for the progress bar.
        engine: The verifier pool's engine, ``local`` or ``ray`` (see :func:`~proofgym.envs.verifiers.pool.make_pool`).
        system_kwargs: Per-system verifier options, e.g. ``{"coq": {"audit": "always"}}``.

    Checks run on a :class:`~proofgym.envs.verifiers.pool.VerifierPool`, the same one the GRPO reward
    functions, the vector envs and the verifier service use: warm verifiers per worker, a context
    routed to the worker that has it warm, and a check whose worker is killed under it retried once on
    a fresh worker (a second death is a harness failure: no row, counted, redone by the next run).
    """
    n = k if n is None else n
    if k < 1 or n < k:
        raise ProofgymError(f"need 1 <= k <= n, got k={k}, n={n}")
    out = Path(out)
    agent = as_agent(agent)
    strategy = strategy or PlainStrategy()
    ensure_writable(out)
    workers = max(1, workers)
    options: dict[str, Any] = {"verifier_kwargs": dict(verifier_kwargs or {}), "system_kwargs": system_kwargs,
                               "verifier_factory": verifier, "measure_cpu": True}
    if engine == "ray":
        options["systems"] = sorted({t.system for t in tasks}) or ["coq"]
    pool = make_pool(engine, workers=workers, **options)
    harness_failures = 0
    agent_failures = 0
    try:
        def check_now(pairs: Sequence[tuple[Task, str]]) -> list[dict[str, Any]]:
            outcomes = pool.check_batch(list(pairs))
            return [_check_row(task, -1, outcome) for (task, _proof), outcome in zip(pairs, outcomes, strict=True)]

        runtime = Runtime(agent=agent, check=check_now, cache_dir=cache_dir or out.parent)
        eval_tasks = strategy.prepare(tasks, runtime)
        done = {(r["task_id"], r["sample"]) for r in read_results(out)}
        todo = [(t, s) for t in eval_tasks for s in range(n) if (t.id, s) not in done]
        _repair_tail(out)
        segment = uuid.uuid4().hex[:12]
        started = time.monotonic()
        total = len(eval_tasks) * n
        with _Progress(progress, total=total, completed=total - len(todo), console=console) as bar, \
                out.open("a", encoding="utf-8") as fh:
            pending_new = iter(todo)
            exhausted = False
            ready: deque[_Episode] = deque()
            to_check: deque[tuple[_Episode, str, Generation, tuple[str, ...]]] = deque()
            inflight: dict[Future, tuple[_Episode, str, Generation, tuple[str, ...]]] = {}
            gen_future: Future | None = None
            gen_batch: list[_Episode] = []
            limit = workers * 2  # back-pressure: proofs in verification at once

            def finish(ep: _Episode) -> None:
                row = _episode_row(ep, segment, time.monotonic() - started)
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
                fh.flush()
                if on_result:
                    on_result(row)
                bar.advance(row["verdict"], ok=row["verdict"] == Verdict.OK.value)

            def next_step(ep: _Episode) -> None:
                request = strategy.request(ep.task, ep.sample, ep.attempts)
                if request is None:
                    if ep.attempts:
                        finish(ep)
                    return
                ep.request = request
                ready.appendleft(ep) if ep.attempts else ready.append(ep)  # repair rounds first

            while True:
                if gen_future is None:
                    room = limit + batch_size - len(inflight) - len(to_check)
                    while len(ready) < min(batch_size, room) and not exhausted:
                        try:
                            task, sample = next(pending_new)
                        except StopIteration:
                            exhausted = True
                            break
                        next_step(_Episode(task, sample))
                    batch = [ready.popleft() for _ in range(min(len(ready), max(0, min(batch_size, room))))]
                    if batch:
                        requests = [ep.request for ep in batch]
                        gen_future = _background(lambda reqs=requests: agent.generate(reqs))
                        gen_batch = batch
                        bar.activity(f"generating {len(batch)} replies")
                while to_check and len(inflight) < limit:
                    ep, proof, gen, notes = to_check.popleft()
                    fut = pool.submit(ep.task, proof, request_id=(ep.task.id, ep.sample))
                    inflight[fut] = (ep, proof, gen, notes)
                if gen_future is None and not inflight and not to_check and not ready and exhausted:
                    break
                waiting = list(inflight) + ([gen_future] if gen_future is not None else [])
                finished, _ = wait(waiting, return_when=FIRST_COMPLETED)
                if gen_future is not None and gen_future in finished:
                    generations = gen_future.result()  # ModelUnavailable stops the run here
                    gen_future = None
                    bar.activity("")
                    if len(generations) != len(gen_batch):
                        raise ProofgymError(f"{agent.name} returned {len(generations)} replies for "
                                            f"{len(gen_batch)} requests")
                    for ep, gen in zip(gen_batch, generations, strict=True):
                        if gen.error is not None:
                            agent_failures += 1
                            bar.advance(f"agent failure: {gen.error[:60]}", ok=False)
                            continue
                        proof, notes = strategy.parse(ep.task, gen)
                        to_check.append((ep, proof, gen, notes))
                    gen_batch = []
                for fut in finished:
                    if fut not in inflight:
                        continue
                    ep, proof, gen, notes = inflight.pop(fut)
                    result = _check_row(ep.task, ep.sample, fut.result())  # the pool returns failures as values
                    if "harness_error" in result:
                        harness_failures += 1
                        bar.advance(f"harness failure: {result['harness_error'][:60]}", ok=False)
                        continue
                    ep.attempts.append(Attempt(proof=proof, raw=gen.text, result=result, generation=gen.info(),
                                               messages=ep.request.messages if ep.request else (),
                                               parse_notes=notes))
                    next_step(ep)
    finally:
        pool.close()
    summary = summarize(read_results(out), eval_tasks, k, n=n, max_attempts=strategy.max_attempts)
    summary.harness_failures = harness_failures
    summary.agent_failures = agent_failures
    summary.notes = list(strategy.notes)
    summary.upper_bound = strategy.upper_bound
    if any(runtime.setup_cost.values()):
        summary.cost["setup"] = dict(runtime.setup_cost)
    return summary


_RESULT_KEYS = ("verdict", "reasons", "messages", "remaining_goals", "error_category", "wall_s", "cpu_s", "cached",
                "backend", "prover_version", "audited")


def _episode_row(ep: _Episode, segment: str, elapsed: float) -> dict[str, Any]:
    final = ep.attempts[-1]
    attempts = []
    for i, a in enumerate(ep.attempts):
        entry = {"attempt": i, "proof": a.proof, **{key: a.result.get(key) for key in _RESULT_KEYS}, **a.generation}
        if a.raw != a.proof:
            entry["raw"] = a.raw
        if a.parse_notes:
            entry["parse_notes"] = list(a.parse_notes)
        attempts.append(entry)
    costs = [a.generation.get("cost_usd") for a in ep.attempts]
    row = {"task_id": ep.task.id, "sample": ep.sample, "category": ep.task.category, "system": ep.task.system,
           **{key: final.result.get(key) for key in _RESULT_KEYS},
           "proof": final.proof, "first_verdict": ep.attempts[0].verdict, "n_attempts": len(ep.attempts),
           "prompt_tokens": sum(int(a.generation.get("prompt_tokens", 0) or 0) for a in ep.attempts),
           "completion_tokens": sum(int(a.generation.get("completion_tokens", 0) or 0) for a in ep.attempts),
           "cost_usd": None if all(c is None for c in costs) else sum(c or 0.0 for c in costs),
           "attempts": attempts, "segment": segment, "elapsed_s": round(elapsed, 3)}
    return row


class _Progress:
    """The eval's progress (a live bar on a terminal, plain lines in a log) with the pass rate and verdict counts."""

    def __init__(self, enabled: bool, total: int, completed: int, console: Any = None) -> None:
        self.bar = ProgressBar("eval", total, completed=completed, enabled=enabled, console=console)
        self.counts: Counter = Counter()
        self.ok = 0
        self.finished = 0

    def __enter__(self) -> _Progress:
        self.bar.__enter__()
        return self

    def advance(self, label: str, *, ok: bool) -> None:
        self.counts[label.split(":")[0]] += 1
        self.finished += 1
        self.ok += ok
        rate = f"pass {self.ok}/{self.finished} ({100 * self.ok / self.finished:.0f}%)"
        self.bar.advance(description=rate + "  " + " ".join(f"{k}={v}" for k, v in sorted(self.counts.items())))

    def activity(self, text: str) -> None:
        self.bar.activity(text)

    def __exit__(self, *exc: object) -> None:
        self.bar.__exit__(*exc)


# -- configuration, run directories, the whole run -------------------------------------------------------
@dataclass
class EvalConfig:
    """Everything ``proofgym eval`` takes (also from YAML with ``--config``; flags override the file)."""

    suite: str = field(default="", metadata={"help": "a built suite name (coq-stdlib) or a .jsonl path"})
    agent: str = field(default="reference", metadata={"help": f"one of {', '.join(AGENT_NAMES)}"})
    model: str = field(default="", metadata={"help": "model name (API) or checkpoint dir / cached hub id (local)"})
    base_url: str | None = field(default=None, metadata={"help": "OpenAI-compatible server, e.g. "
                                                         "http://127.0.0.1:8000/v1"})
    api_key: str | None = field(default=None, repr=False, metadata={"help": "API key (else OPENAI_API_KEY / "
                                                                    "ANTHROPIC_API_KEY)", "secret": True})
    strategy: str = field(default="plain", metadata={"help": "plain or selene (or another registered strategy)"})
    strategy_options: dict[str, Any] = field(default_factory=dict, metadata={"help": "options of the strategy"})
    k: int = field(default=1, metadata={"help": "pass@k / ACC#k to report"})
    n: int | None = field(default=None, metadata={"help": "samples per task (default k); pass@j for j <= n"})
    temperature: float | None = field(default=None, metadata={"help": "default 0 when n == 1, else 0.5 (Selene)"})
    top_p: float = field(default=0.95, metadata={"help": "nucleus sampling (Selene: 0.95)"})
    max_tokens: int = field(default=2048, metadata={"help": "tokens per reply (Selene: 2,048)"})
    seed: int | None = field(default=None, metadata={"help": "generation seed (sent as seed + sample)"})
    concurrency: int = field(default=8, metadata={"help": "API requests in flight at once"})
    request_timeout: float = field(default=120.0, metadata={"help": "seconds per API request"})
    max_retries: int = field(default=5, metadata={"help": "retries on 429/5xx/timeouts per request"})
    batch_size: int = field(default=16, metadata={"help": "requests per generation batch"})
    workers: int = field(default=1, metadata={"help": "parallel verifier processes (per node with --engine ray)"})
    engine: str = field(default="local", metadata={"help": "verifier pool: local (worker processes here) or ray "
                                                   "(one actor per node and system; needs the ray extra)"})
    limit: int = field(default=0, metadata={"help": "only the first N tasks"})
    out: str | None = field(default=None, metadata={"help": "run dir, or a results .jsonl (summary.json goes next "
                                                    "to it)"})
    runs_dir: str = field(default="runs", metadata={"help": "where default run dirs go"})
    resume: bool = field(default=False, metadata={"help": "continue the latest matching run in runs_dir"})
    price_in: float | None = field(default=None, metadata={"help": "USD per million input tokens"})
    price_out: float | None = field(default=None, metadata={"help": "USD per million output tokens"})
    device: str = field(default="auto", metadata={"help": "local agent: auto, cpu, cuda, cuda:1..."})
    dtype: str = field(default="auto", metadata={"help": "local agent: auto, float32, bfloat16, float16"})
    threads: int | None = field(default=None, metadata={"help": "local agent: CPU threads for torch"})
    script: str | None = field(default=None, metadata={"help": "scripted agent: JSON of task id -> reply(s)"})
    audit: str | None = field(default=None, metadata={"help": "Coq audit: always, sample, never"})
    verifier: str | None = field(default=None, metadata={"help": "module:factory of a custom verifier"})
    wandb: bool = field(default=False, metadata={"help": "log to Weights & Biases (offline unless configured)"})
    wandb_project: str = field(default="proofgym", metadata={"help": "W&B project"})
    wandb_mode: str | None = field(default=None, metadata={"help": "online, offline or disabled"})

    @property
    def samples(self) -> int:
        return self.n or self.k

    def sampling_temperature(self) -> float:
        if self.temperature is not None:
            return self.temperature
        return 0.0 if self.samples == 1 else 0.5

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], *, source: str = "config") -> EvalConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ProofgymError(f"{source}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(names))}")
        return cls(**dict(data))


def load_config_file(path: str | Path) -> dict[str, Any]:
    """An eval config from YAML (``configs/eval/*.yaml``)."""
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ProofgymError(f"cannot read the config {path}: {exc}") from None
    if not isinstance(data, dict):
        raise ProofgymError(f"{path}: an eval config is a mapping of option -> value")
    return data


def build_agent(cfg: EvalConfig) -> Agent:
    """The agent that ``cfg`` names (imports only what that agent needs)."""
    from proofgym.agents.base import Prices, SamplingParams

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
    from proofgym.agents.strategies import make_strategy

    return make_strategy(cfg.strategy, **dict(cfg.strategy_options))


def _slug(text: str, limit: int = 60) -> str:
    if os.sep in text or "/" in text:
        path = Path(text)
        text = path.name if path.exists() else text
    return re.sub(r"[^\w.@+-]+", "-", text).strip("-")[:limit] or "-"


def suite_name(suite: str) -> str:
    return Path(str(suite)).stem if str(suite).endswith((".jsonl", ".json")) else str(suite)


def run_prefix(cfg: EvalConfig) -> str:
    """``<suite>__<agent>[__<model>][__<strategy>]__k<k>`` (then ``__<time>``)."""
    parts = [_slug(suite_name(cfg.suite)), cfg.agent]
    if cfg.model:
        parts.append(_slug(cfg.model))
    if cfg.strategy != "plain":
        parts.append(_slug(cfg.strategy))
    parts.append(f"k{cfg.k}" + (f"n{cfg.n}" if cfg.n and cfg.n != cfg.k else ""))
    return "__".join(parts)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def run_identity(cfg: EvalConfig, suite_sha: str, agent: Agent, strategy: Strategy) -> dict[str, Any]:
    """What must match for a run dir to be resumed by a command (workers, limit, k and n may change)."""
    described = agent.describe()
    return {"suite_sha256": suite_sha, "agent": cfg.agent, "model": described.get("model", cfg.model),
            "strategy": strategy.describe(), "sampling": described.get("sampling")}


@dataclass
class RunPaths:
    """Where one evaluation writes: its folder, the results JSONL, config.json and summary.json."""

    run_dir: Path
    results: Path
    config: Path
    summary: Path

    @classmethod
    def for_out(cls, out: str | Path) -> RunPaths:
        out = Path(out)
        if out.suffix == ".jsonl":
            return cls(out.parent, out, out.parent / "config.json", out.parent / "summary.json")
        return cls(out, out / "results.jsonl", out / "config.json", out / "summary.json")


def find_resumable(cfg: EvalConfig, identity: Mapping[str, Any]) -> Path | None:
    """The newest run dir under ``runs_dir`` made by the same command (same identity), if any."""
    root = Path(cfg.runs_dir)
    if not root.is_dir():
        return None
    prefix = run_prefix(cfg) + "__"
    for candidate in sorted((p for p in root.iterdir() if p.is_dir() and p.name.startswith(prefix)), reverse=True):
        try:
            stored = json.loads((candidate / "config.json").read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue
        if stored.get("identity") == json.loads(json.dumps(identity)):
            return candidate
    return None


def evaluate(cfg: EvalConfig, *, progress: bool = False, console: Any = None,
             on_start: Callable[[RunPaths], None] | None = None) -> tuple[EvalSummary, RunPaths]:
    """A whole ``proofgym eval`` run: load, choose or resume the run dir, evaluate, write, log.

    Returns:
        The summary and the run's paths. ``summary.json`` holds the summary and the paths.
    """
    from proofgym.envs.tasks.suites import load_tasks, resolve_suite

    if cfg.k < 1 or cfg.workers < 1 or cfg.samples < cfg.k:
        raise ProofgymError("--k and --workers must be >= 1, and --n >= --k")
    if cfg.engine not in ("local", "ray"):
        raise ProofgymError(f"--engine must be local or ray, got {cfg.engine!r}")
    suite_path = resolve_suite(cfg.suite)
    tasks = load_tasks(suite_path)
    if cfg.limit:
        tasks = tasks[: cfg.limit]
    agent = build_agent(cfg)
    try:
        strategy = build_strategy(cfg)
        identity = run_identity(cfg, file_sha256(suite_path), agent, strategy)
        if cfg.out:
            paths = RunPaths.for_out(cfg.out)
        else:
            found = find_resumable(cfg, identity) if cfg.resume else None
            if cfg.resume and found is None:
                print(f"proofgym: no run of this command to resume under {cfg.runs_dir}/; starting a new one",
                      file=sys.stderr)
            name = f"{run_prefix(cfg)}__{datetime.now().strftime('%Y%m%d-%H%M%S')}"
            fresh, i = Path(cfg.runs_dir) / name, 1
            while found is None and fresh.exists():  # two runs started in the same second
                i += 1
                fresh = Path(cfg.runs_dir) / f"{name}-{i}"
            paths = RunPaths.for_out(found or fresh)
        ensure_writable(paths.results)
        previous = read_json_object(paths.config)
        if previous and previous.get("identity") and previous.get("results") == paths.results.name \
                and previous["identity"] != json.loads(json.dumps(identity)):
            diff = [key for key in identity if json.loads(json.dumps(identity[key])) != previous["identity"].get(key)]
            raise ProofgymError(f"{paths.run_dir} holds a run of another configuration (differs in: "
                                f"{', '.join(diff)}); pass another --out, or remove it")
        if cfg.limit and paths.results.exists():
            # A --limit rerun into a run dir adds to it; its summary still covers every task already there.
            done = {str(row.get("task_id")) for row in read_results(paths.results)}
            selected = {t.id for t in tasks}
            earlier = [t for t in load_tasks(suite_path) if t.id in done and t.id not in selected]
            if earlier:
                print(f"proofgym: {paths.run_dir} already has results for {len(earlier)} tasks beyond --limit "
                      f"{cfg.limit}; the summary covers them too", file=sys.stderr)
                tasks = tasks + earlier
        segments = list(previous.get("segments", [])) if previous else []
        segments.append({"started": datetime.now().isoformat(timespec="seconds"), "argv": sys.argv[1:]})
        public = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if not f.metadata.get("secret")}
        config = {"config": public, "identity": identity, "agent": agent.describe(), "suite_path": str(suite_path),
                  "results": paths.results.name, "segments": segments, "proofgym": _version()}
        _write_json(paths.config, config)
        if on_start:
            on_start(paths)
        logger = None
        if cfg.wandb:
            from proofgym.training.logging import WandbLogger

            logger = WandbLogger(project=cfg.wandb_project, name=paths.run_dir.name, config=config,
                                 directory=paths.run_dir, mode=cfg.wandb_mode)
        system_kwargs = audit_options(cfg.audit)
        try:
            summary = run_eval(tasks, agent=agent, k=cfg.k, n=cfg.samples, out=paths.results, workers=cfg.workers,
                               engine=cfg.engine, system_kwargs=system_kwargs, progress=progress, strategy=strategy,
                               batch_size=cfg.batch_size, verifier=cfg.verifier, cache_dir=paths.run_dir,
                               on_result=logger.log_result if logger else None, console=console)
        except BaseException:
            if logger:
                logger.finish()
            raise
        if hasattr(strategy, "demo_ids"):
            config["demonstrations"] = strategy.demo_ids()
            _write_json(paths.config, config)
        payload = {**summary.to_dict(), "run_dir": str(paths.run_dir), "results": str(paths.results),
                   "suite": cfg.suite, "agent": cfg.agent, "model": cfg.model, "strategy": cfg.strategy}
        _write_json(paths.summary, payload)
        if logger:
            logger.log_summary(summary, read_results(paths.results))
            config["wandb_dir"] = str(logger.run_dir)
            _write_json(paths.config, config)
            logger.finish()
        return summary, paths
    finally:
        agent.close()


def read_json_object(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``; ``None`` when it is missing, unreadable, or not an object."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("proofgym")
    except Exception:  # noqa: BLE001 - not installed as a distribution
        return "unknown"


# -- the table people read -------------------------------------------------------------------------------
def print_summary(summary: EvalSummary, console: Any = None) -> None:
    """pass@k per category, verdict counts, Selene's failure taxonomy, cost, and notes."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    k = summary.k
    columns = ["pass@1"] + ([f"pass@{k}"] if k > 1 else [])
    if summary.max_attempts > 1:
        columns += ["fix@1"] + ([f"fix#{k}"] if k > 1 else [])
    table = Table(title=f"pass@k per category (ACC#{k} = pass@{k} over first attempts)")
    table.add_column("category")
    table.add_column("tasks", justify="right")
    for col in columns:
        table.add_column(col, justify="right")
    for cat, stats in summary.per_category.items():
        table.add_row(cat, str(stats["n"]), *(f"{100 * stats.get(col, 0.0):.1f}%" for col in columns))
    console.print(table)
    verdicts = Table(title="verdicts" + (" (final attempt of each episode)" if summary.max_attempts > 1 else ""))
    for v in Verdict:
        verdicts.add_column(v.value, justify="right")
    verdicts.add_column("harness failures", justify="right")
    verdicts.add_column("agent failures", justify="right")
    verdicts.add_row(*(str(summary.verdicts.get(v.value, 0)) for v in Verdict), str(summary.harness_failures),
                     str(summary.agent_failures))
    console.print(verdicts)
    if summary.failure_taxonomy:
        failures = Table(title="failed first attempts by error type (Selene Table 3)")
        failures.add_column("category")
        for col in ("failures", *FAILURE_TYPES):
            failures.add_column(col, justify="right")
        for cat, counts in summary.failure_taxonomy.items():
            total = counts["failures"] or 1
            failures.add_row(cat, str(counts["failures"]),
                             *(f"{counts[t]} ({100 * counts[t] / total:.0f}%)" for t in FAILURE_TYPES))
        console.print(failures)
    if summary.cheat_reasons:
        console.print("cheat reasons: " + ", ".join(f"{r} ({n})" for r, n in summary.cheat_reasons.most_common(10)),
                      markup=False)
    c = summary.cost
    if c:
        usd = f", ${c['cost_usd']:.4f}" if c.get("cost_usd") is not None else ""
        line = (f"cost: {c['total_tokens']} tokens{usd}, {c['verifier_calls']} verifier calls, "
                f"{c['verifier_cpu_s']:.1f} verifier CPU-s, {c['run_wall_s']:.1f} s wall")
        per = c.get("per_solved_task")
        if per:
            line += (f"; per solved task: {per['tokens']:.0f} tokens, {per['verifier_calls']} calls, "
                     f"{per['verifier_cpu_s']:.2f} CPU-s, {per['wall_s']:.2f} s")
        console.print(line, markup=False)
    for note in summary.notes:
        console.print(f"note: {note}", style="bold yellow", markup=False)
