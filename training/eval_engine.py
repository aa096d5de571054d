"""The evaluation engine: strategies drive episodes of ``proofgym/WholeProof-v0`` with any agent.

:func:`run_eval` runs episodes, as :class:`EvalOptions` say, scheduled by ``_EvalLoop``: a
strategy asks an agent for a proof (batched: API agents send a batch concurrently, local models
generate it in one pass), the episode's :class:`~proofgym.envs.proof_env.WholeProofEnv` checks it
(its verifier is a pool of verifier processes, with back-pressure: a bounded number of proofs waits
for verification), and the strategy may ask again with the verifier's feedback (Selene's fixing
round). The benchmark is the env users get: ``env.step`` gives every verdict. Generation runs in a
background thread while the env steps run in threads that wait on the pool.

Each finished episode is appended to a JSONL file at once; a rerun with the same file skips
the (task, sample) pairs already there, so a killed run resumes and ends with the same
totals. Failures of the harness are never scored: a verifier that breaks
(``harness_failures``) or a model request that fails after its retries (``agent_failures``)
writes no row, is counted, and is redone by the next run. A model that cannot be reached at
all stops the run (:class:`~proofgym.agents.base.ModelUnavailable`).
"""

from __future__ import annotations

import functools
import json
import threading
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable, Iterator, Mapping, Sequence
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
from proofgym.envs.verifiers.pool import HarnessFailure, PoolResult, construct_verifier, make_pool
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
    if isinstance(outcome.outcome, HarnessFailure):
        return {"task_id": task.id, "sample": sample, "harness_error": str(outcome.outcome)}
    return _result_row(task, sample, outcome.outcome)


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


@dataclass(frozen=True)
class EvalOptions:
    """How :func:`run_eval` runs: how many samples, on which verifier pool, in which generation batches.

    Checks run on a :class:`~proofgym.envs.verifiers.pool.VerifierPool`, the same one the GRPO reward
    functions, the vector envs and the verifier service use: warm verifiers per worker, a context
    routed to the worker that has it warm, and a check whose worker is killed under it retried once on
    a fresh worker (a second death is a harness failure: no row, counted, redone by the next run).
    """

    k: int = 1
    """pass@k / ACC#k to report."""
    n: int | None = None
    """Samples per task (default ``k``)."""
    workers: int = 1
    """Verifier processes (per node with ``engine="ray"``)."""
    engine: str = "local"
    """The verifier pool's engine, ``local`` or ``ray`` (see :func:`~proofgym.envs.verifiers.pool.make_pool`)."""
    verifier: str | None = None
    """``"module:factory"`` of the verifier to use instead of the system's (tests, custom checkers)."""
    verifier_kwargs: Mapping[str, Any] | None = None
    """Options for every verifier."""
    system_kwargs: Mapping[str, Mapping[str, Any]] | None = None
    """Per-system verifier options, e.g. ``{"coq": {"audit": "always"}}``."""
    batch_size: int = 16
    """Requests per generation batch."""
    progress: bool = True
    """Show a progress bar (on stderr)."""
    cache_dir: Path | None = None
    """Where a strategy may cache what it prepares (default: the results file's folder)."""

    def __post_init__(self) -> None:
        if self.k < 1 or self.samples < self.k:
            raise ProofgymError(f"need 1 <= k <= n, got k={self.k}, n={self.samples}")
        if self.batch_size < 1:  # no batch could ever start: the run would wait forever
            raise ProofgymError(f"need batch_size >= 1, got {self.batch_size}")

    @property
    def samples(self) -> int:
        """Samples per task: ``n``, else ``k``."""
        return self.k if self.n is None else self.n


def run_eval(
    tasks: list[Task],
    agent: Any,
    out: Path,
    options: EvalOptions | None = None,
    *,
    strategy: Strategy | None = None,
    on_result: Callable[[dict[str, Any]], None] | None = None,
    console: Any = None,
) -> EvalSummary:
    """Evaluate ``agent`` with ``strategy`` on ``tasks``; append rows to ``out``; return totals.

    Args:
        tasks: The suite's tasks (a strategy may set some aside as demonstrations).
        agent: An :class:`~proofgym.agents.base.Agent` (or an object with ``act(task, sample)``).
        out: The results JSONL (appended; rows already there are not redone).
        options: Samples, the verifier pool, batches and progress (default :class:`EvalOptions()`).
        strategy: Default: one zero-shot attempt (:class:`PlainStrategy`).
        on_result: Called with each row as it is written.
        console: A rich console for the progress bar.
    """
    options = options or EvalOptions()
    out = Path(out)
    agent = as_agent(agent)
    strategy = strategy or PlainStrategy()
    ensure_writable(out)
    pool_options: dict[str, Any] = {"verifier_kwargs": dict(options.verifier_kwargs or {}),
                                    "system_kwargs": options.system_kwargs, "verifier_factory": options.verifier,
                                    "measure_cpu": True}
    if options.engine == "ray":
        pool_options["systems"] = sorted({t.system for t in tasks}) or ["coq"]
    pool = make_pool(options.engine, workers=max(1, options.workers), **pool_options)

    def check_now(pairs: Sequence[tuple[Task, str]]) -> list[dict[str, Any]]:
        outcomes = pool.check_batch(list(pairs))
        return [_check_row(task, -1, outcome) for (task, _proof), outcome in zip(pairs, outcomes, strict=True)]

    runtime = Runtime(agent=agent, check=check_now, cache_dir=options.cache_dir or out.parent,
                      open_verifier=local_verifiers(options.verifier, options.verifier_kwargs, options.system_kwargs))
    try:
        eval_tasks = strategy.prepare(tasks, runtime)
        verifiers = {system: pool.as_verifier(system) for system in {t.system for t in eval_tasks}}
        done = {(r["task_id"], r["sample"]) for r in read_results(out)}
        todo = [(t, s) for t in eval_tasks for s in range(options.samples) if (t.id, s) not in done]
        repair_tail(out)
        total = len(eval_tasks) * options.samples
        with _Progress(options.progress, total=total, completed=total - len(todo), console=console) as bar, \
                out.open("a", encoding="utf-8") as fh:
            loop = _EvalLoop(strategy, runtime, options, bar, eval_tasks, verifiers, write=_RowWriter(fh, on_result))
            loop.run(todo)
    finally:
        runtime.close()
        pool.close()
    summary = summarize(read_results(out), eval_tasks, options.k, n=options.samples,
                        max_attempts=strategy.max_attempts)
    summary.harness_failures = loop.harness_failures
    summary.agent_failures = loop.agent_failures
    summary.notes = list(strategy.notes) + summary.notes
    summary.upper_bound = strategy.upper_bound
    if any(runtime.setup_cost.values()):
        summary.cost["setup"] = dict(runtime.setup_cost)
    return summary


class _RowWriter:
    """Appends each finished episode's row to the results file at once (flushed: a killed run keeps it)."""

    def __init__(self, fh: Any, on_result: Callable[[dict[str, Any]], None] | None) -> None:
        self.fh = fh
        self.on_result = on_result
        self.segment = uuid.uuid4().hex[:12]  # which run of a resumed file wrote the row
        self.started = time.monotonic()

    def __call__(self, ep: _Episode) -> dict[str, Any]:
        row = _episode_row(ep, self.segment, time.monotonic() - self.started)
        self.fh.write(json.dumps(row, ensure_ascii=False) + "\n")
        self.fh.flush()
        if self.on_result:
            self.on_result(row)
        return row


_Pending = tuple[_Episode, str, Generation, tuple[str, ...]]  # an episode, its proof, the reply, parse notes


class _EvalLoop:
    """The scheduling of one run: one generation batch at a time in a background thread, env steps in threads
    that wait on the pool (at most ``2 * workers`` proofs in verification: back-pressure), repair rounds first.

    An episode moves ready (its strategy's request waits for a batch) -> generating -> to check -> in flight ->
    ready again for a repair round, or finished (its row written). A reply the agent failed to give
    (``agent_failures``) or a check the harness failed (``harness_failures``) drops the episode: no row, the next
    run redoes it.
    """

    def __init__(self, strategy: Strategy, runtime: Runtime, options: EvalOptions, bar: _Progress,
                 tasks: Sequence[Task], verifiers: Mapping[str, Any], write: Callable[[_Episode], dict[str, Any]]):
        self.strategy = strategy
        self.runtime = runtime
        self.batch_size = options.batch_size
        self.limit = max(1, options.workers) * 2  # back-pressure: proofs in verification at once
        self.bar = bar
        self.tasks = tasks
        self.verifiers = verifiers
        self.write = write
        self.ready: deque[_Episode] = deque()
        self.to_check: deque[_Pending] = deque()
        self.inflight: dict[Future, _Pending] = {}
        self.generating: Future | None = None
        self.gen_batch: list[_Episode] = []
        self.harness_failures = 0
        self.agent_failures = 0

    @functools.cached_property
    def taskset(self) -> TaskSet:
        """The envs' tasks, one copy for all (made with the first episode: a run may have no task)."""
        return TaskSet(self.tasks)

    def run(self, todo: Sequence[tuple[Task, int]]) -> None:
        pending_new = iter(todo)
        while True:
            if self.generating is None:
                self._start_generation(pending_new)
            while self.to_check and len(self.inflight) < self.limit:
                ep, proof, gen, notes = pending = self.to_check.popleft()
                self.inflight[_background(functools.partial(_step, ep.env, proof), name="proofgym-step")] = pending
            if self.generating is None and not self.inflight and not self.to_check and not self.ready:
                return  # _start_generation found nothing new to start either
            waiting = list(self.inflight) + ([self.generating] if self.generating is not None else [])
            finished, _ = wait(waiting, return_when=FIRST_COMPLETED)
            if self.generating is not None and self.generating in finished:
                self._take_generations(self.generating.result())  # ModelUnavailable stops the run here
            for fut in finished:
                if fut in self.inflight:
                    self._take_check(self.inflight.pop(fut), *fut.result())

    def _start_generation(self, pending_new: Iterator[tuple[Task, int]]) -> None:
        """Start new episodes while there is room, then one batch of requests in the background."""
        room = self.limit + self.batch_size - len(self.inflight) - len(self.to_check)
        while len(self.ready) < min(self.batch_size, room):
            started = next(pending_new, None)
            if started is None:
                break
            self._next_step(self._new_episode(*started))
        batch = [self.ready.popleft() for _ in range(min(len(self.ready), max(0, min(self.batch_size, room))))]
        if batch:
            requests = [ep.request for ep in batch if ep.request is not None]  # every ready episode has one
            self.generating = _background(functools.partial(self.strategy.generate, self.runtime, requests))
            self.gen_batch = batch
            self.bar.activity(f"generating {len(batch)} replies")

    def _new_episode(self, task: Task, sample: int) -> _Episode:
        # The benchmark is the env users get: every verdict of the run comes from WholeProofEnv.step.
        env = WholeProofEnv(self.taskset, max_attempts=self.strategy.max_attempts, verifier=self.verifiers[task.system],
                            context_chars=0)
        env.reset(options={"task_id": task.id})
        return _Episode(task, sample, env)

    def _next_step(self, ep: _Episode) -> None:
        """The strategy's next request for ``ep`` (queued; repair rounds first), or its row when it is done."""
        episode = ep.env.episode
        request = None if episode is not None and episode.done else \
            self.strategy.request(ep.task, ep.sample, ep.attempts)
        if request is None:
            if ep.attempts:
                self._finish(ep)
            return
        ep.request = request
        self.ready.appendleft(ep) if ep.attempts else self.ready.append(ep)  # repair rounds first

    def _finish(self, ep: _Episode) -> None:
        row = self.write(ep)
        self.bar.advance(row["verdict"], ok=row["verdict"] == Verdict.OK.value)
        ep.env.close()

    def _take_generations(self, generations: Sequence[Generation]) -> None:
        self.generating = None
        self.bar.activity("")
        batch, self.gen_batch = self.gen_batch, []
        if len(generations) != len(batch):
            raise ProofgymError(f"{self.runtime.agent.name} returned {len(generations)} replies for "
                                f"{len(batch)} requests")
        for ep, gen in zip(batch, generations, strict=True):
            if gen.error is not None:
                self.agent_failures += 1
                self.bar.advance(f"agent failure: {gen.error[:60]}", ok=False)
                ep.env.close()  # dropped: no row, the next run redoes it
                continue
            proof, notes = self.strategy.parse(ep.task, gen)
            self.to_check.append((ep, proof, gen, notes))

    def _take_check(self, pending: _Pending, checked: CheckResult | None, broke: str) -> None:
        ep, proof, gen, notes = pending
        if checked is None:
            self.harness_failures += 1
            self.bar.advance(f"harness failure: {broke[:60]}", ok=False)
            ep.env.close()  # dropped: no row, the next run redoes it
            return
        ep.attempts.append(Attempt(proof=proof, raw=gen.text, result=checked, generation=gen.info(),
                                   messages=ep.request.messages if ep.request else (), parse_notes=notes))
        self._next_step(ep)


_RESULT_KEYS = ("verdict", "reasons", "messages", "remaining_goals", "error_category", "wall_s", "cpu_s", "cached",
                "backend", "prover_version", "audited")


def _result_fields(result: CheckResult) -> dict[str, Any]:
    """A check result's fields in an episode row (the row is the JSONL edge: the attempts keep the value)."""
    row = result.to_dict()
    return {key: row[key] for key in _RESULT_KEYS}


def _episode_row(ep: _Episode, segment: str, elapsed: float) -> dict[str, Any]:
    final = ep.attempts[-1]
    attempts = []
    for i, a in enumerate(ep.attempts):
        entry = {"attempt": i, "proof": a.proof, **_result_fields(a.result), **a.generation}
        if a.raw != a.proof:
            entry["raw"] = a.raw
        if a.parse_notes:
            entry["parse_notes"] = list(a.parse_notes)
        attempts.append(entry)
    costs = [a.generation.get("cost_usd") for a in ep.attempts]
    row = {"task_id": ep.task.id, "sample": ep.sample, "category": ep.task.category, "system": ep.task.system,
           **_result_fields(final.result),
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
