"""The evaluation engine: strategies drive episodes of ``proofgym/WholeProof-v0`` with any agent.

:func:`run_eval` runs episodes: a strategy asks an agent for a proof (batched: API agents
send a batch concurrently, local models generate it in one pass), the episode's
:class:`~proofgym.envs.proof_env.WholeProofEnv` checks it (its verifier is a pool of
verifier processes, with back-pressure: a bounded number of proofs waits for verification),
and the strategy may ask again with the verifier's feedback (Selene's fixing round). The
benchmark is the env users get: ``env.step`` gives every verdict. Generation runs in a
background thread while the env steps run in threads that wait on the pool.

Each finished episode is appended to a JSONL file at once; a rerun with the same file skips
the (task, sample) pairs already there, so a killed run resumes and ends with the same
totals. Failures of the harness are never scored: a verifier that breaks
(``harness_failures``) or a model request that fails after its retries (``agent_failures``)
writes no row, is counted, and is redone by the next run. A model that cannot be reached at
all stops the run (:class:`~proofgym.agents.base.ModelUnavailable`).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proofgym.agents.base import Agent, Generation, Request
from proofgym.agents.strategies.base import Attempt, PlainStrategy, Runtime, Strategy
from proofgym.envs.episode import TaskSet
from proofgym.envs.errors import ProofgymError, VerifierError
from proofgym.envs.progress import ProgressBar
from proofgym.envs.proof_env import WholeProofEnv
from proofgym.envs.systems import load_object
from proofgym.envs.types import CheckResult, Task, Verdict
from proofgym.envs.verifiers.base import make_verifier
from proofgym.envs.verifiers.pool import PoolResult, construct_verifier, make_pool
from proofgym.training.eval_metrics import EvalSummary, summarize
from proofgym.training.eval_runs import ensure_writable, read_results, repair_tail


# -- verdicts as rows --------------------------------------------------------------------------------
def _result_row(task: Task, sample: int, result: CheckResult) -> dict[str, Any]:
    """A results row's verdict fields: the check result, with the feedback the next attempt is shown."""
    row = {"task_id": task.id, "sample": sample, "category": task.category, "system": task.system}
    row.update(result.to_dict())
    row["feedback"] = result.feedback()
    return row


def _check_row(task: Task, sample: int, outcome: PoolResult) -> dict[str, Any]:
    """A results row's verdict fields from a pool result, or ``{"harness_error": ...}`` when there is no verdict."""
    if outcome.result is None:
        return {"task_id": task.id, "sample": sample, "harness_error": f"{outcome.error_kind}: {outcome.harness_error}"}
    return _result_row(task, sample, outcome.result)


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
    """One (task, sample): the env it runs in, the strategy's view of its attempts, and the pending request."""

    task: Task
    sample: int
    env: WholeProofEnv
    attempts: list[Attempt] = field(default_factory=list)
    request: Request | None = None


def _step(env: WholeProofEnv, proof: str) -> tuple[CheckResult | None, str]:
    """``env.step(proof)``: the result, or ``(None, what broke)`` for a harness failure (the pool's retry spent)."""
    try:
        _obs, _reward, _terminated, _truncated, info = env.step(proof)
    except VerifierError as exc:
        return None, str(exc)
    return info["result"], ""


def _background(fn: Callable[[], Any], name: str = "proofgym-generate") -> Future:
    """Run ``fn`` in a daemon thread (a hung model request or check must not keep the process alive on Ctrl-C)."""
    future: Future = Future()

    def target() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(fn())
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting loop
            future.set_exception(exc)

    threading.Thread(target=target, name=name, daemon=True).start()
    return future


def local_verifiers(verifier: str | None, verifier_kwargs: Mapping[str, Any] | None,
                    system_kwargs: Mapping[str, Mapping[str, Any]] | None) -> Callable[[str], Any]:
    """``system -> verifier`` in this process, made as the pool's workers make theirs (same factory and options).

    A strategy that searches on tactic sessions (Cobblestone) needs a verifier here: a session
    cannot cross the pool's process boundary. Its final proof is still checked by the env.
    """

    def make(system: str) -> Any:
        kwargs = {**dict(verifier_kwargs or {}), **dict((system_kwargs or {}).get(system, {}))}
        return construct_verifier(make_verifier if verifier is None else load_object(verifier), system, kwargs)

    return make


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

    def check_now(pairs: Sequence[tuple[Task, str]]) -> list[dict[str, Any]]:
        outcomes = pool.check_batch(list(pairs))
        return [_check_row(task, -1, outcome) for (task, _proof), outcome in zip(pairs, outcomes, strict=True)]

    runtime = Runtime(agent=agent, check=check_now, cache_dir=cache_dir or out.parent,
                      open_verifier=local_verifiers(verifier, verifier_kwargs, system_kwargs))
    try:
        eval_tasks = strategy.prepare(tasks, runtime)
        taskset = TaskSet(eval_tasks) if eval_tasks else None
        verifiers = {system: pool.as_verifier(system) for system in {t.system for t in eval_tasks}}

        def new_episode(task: Task, sample: int) -> _Episode:
            # The benchmark is the env users get: every verdict of the run comes from WholeProofEnv.step.
            env = WholeProofEnv(taskset, max_attempts=strategy.max_attempts, verifier=verifiers[task.system],
                                context_chars=0)
            env.reset(options={"task_id": task.id})
            return _Episode(task, sample, env)

        done = {(r["task_id"], r["sample"]) for r in read_results(out)}
        todo = [(t, s) for t in eval_tasks for s in range(n) if (t.id, s) not in done]
        repair_tail(out)
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
                ep.env.close()

            def next_step(ep: _Episode) -> None:
                episode = ep.env.episode
                request = None if episode is not None and episode.done else \
                    strategy.request(ep.task, ep.sample, ep.attempts)
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
                        next_step(new_episode(task, sample))
                    batch = [ready.popleft() for _ in range(min(len(ready), max(0, min(batch_size, room))))]
                    if batch:
                        requests = [ep.request for ep in batch]
                        gen_future = _background(lambda reqs=requests: strategy.generate(runtime, reqs))
                        gen_batch = batch
                        bar.activity(f"generating {len(batch)} replies")
                while to_check and len(inflight) < limit:
                    ep, proof, gen, notes = to_check.popleft()
                    fut = _background(lambda env=ep.env, proof=proof: _step(env, proof), name="proofgym-step")
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
                            ep.env.close()  # dropped: no row, the next run redoes it
                            continue
                        proof, notes = strategy.parse(ep.task, gen)
                        to_check.append((ep, proof, gen, notes))
                    gen_batch = []
                for fut in finished:
                    if fut not in inflight:
                        continue
                    ep, proof, gen, notes = inflight.pop(fut)
                    checked, broke = fut.result()
                    if checked is None:
                        harness_failures += 1
                        bar.advance(f"harness failure: {broke[:60]}", ok=False)
                        ep.env.close()  # dropped: no row, the next run redoes it
                        continue
                    result = _result_row(ep.task, ep.sample, checked)
                    ep.attempts.append(Attempt(proof=proof, raw=gen.text, result=result, generation=gen.info(),
                                               messages=ep.request.messages if ep.request else (),
                                               parse_notes=notes))
                    next_step(ep)
    finally:
        runtime.close()
        pool.close()
    summary = summarize(read_results(out), eval_tasks, k, n=n, max_attempts=strategy.max_attempts)
    summary.harness_failures = harness_failures
    summary.agent_failures = agent_failures
    summary.notes = list(strategy.notes) + summary.notes
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
