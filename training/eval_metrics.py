"""Evaluation metrics: ACC#k / pass@k, fix@k, verdicts, Selene's failure taxonomy, cost; the summary table.

:func:`summarize` turns result rows (``results.jsonl``) into an :class:`EvalSummary`:

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

import math
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from proofgym.envs.types import Task, Verdict

FAILURE_TYPES = ("logic", "undefined", "syntax", "other")
"""Selene's Table 3 columns."""
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
        out["verifier/harness_failures"] = self.harness_failures  # the same name as in training (rewards.py)
        out["eval/agent_failures"] = self.agent_failures
        out["eval/n_results"] = self.n_results
        return out


def _attempts_of(row: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    attempts = row.get("attempts")
    return list(attempts) if attempts else [row]  # rows of the first format are one attempt


#: What backends say when a reply stopped at the token limit (OpenAI-style and local ``length``, Anthropic's
#: ``max_tokens``).
CUT_AT_LIMIT = frozenset({"length", "max_tokens"})


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
    cut = 0  # replies the backend stopped at the token limit
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
            cut += attempt.get("finish_reason") in CUT_AT_LIMIT
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
    if attempts_total and cut * 2 >= attempts_total:
        summary.notes.append(
            f"{cut} of {attempts_total} replies stopped at the token limit: their proofs may be cut off (an ERROR "
            "'has no final period' is often one); raise --max-tokens (max_completion_length in training)")
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


# -- training: per category and pass@k of one logging window ------------------------------------------------
def pass_at_k_curve(counts: Mapping[str, tuple[int, int]], ks: Sequence[int]) -> dict[int, float]:
    """Mean unbiased pass@k over tasks, for each k in ``ks``, from ``{task_id: (OK, samples with a verdict)}``.

    A task counts in pass@k once it has at least k samples (a harness failure is no sample); a k that no task
    reaches is left out.
    """
    curve: dict[int, float] = {}
    for k in ks:
        scores = [pass_at_k(n, ok, k) for ok, n in counts.values() if n >= k]
        if scores:
            curve[k] = sum(scores) / len(scores)
    return curve


def category_metrics(outcomes: Iterable[tuple[str, str | None]], category: Mapping[str, str], *,
                     reward_of: Callable[[str], float | None], max_k: int | None = None) -> dict[str, float]:
    """Reward, OK rate and pass@1..``max_k`` per task category and over all, from ``(task_id, verdict)`` pairs.

    What GRPO's reward saw in one logging window (every process's completions): ``category/<c>/reward`` (the
    mean reward of the verdicts), ``category/<c>/ok_rate``, ``category/<c>/samples`` and
    ``category/<c>/pass@k`` for k = 1..``max_k`` (default: the most samples any task had), the unbiased
    estimator over each task's samples; the same over every task as ``proof/pass@k`` and ``proof/reward``.
    A harness failure (verdict ``None``) is left out of all of them, as it is left out of the reward.
    """
    per_task: dict[str, list[int]] = {}
    rewards: dict[str, list[float]] = defaultdict(list)
    for task_id, verdict in outcomes:
        if verdict is None:
            continue
        counts = per_task.setdefault(task_id, [0, 0])
        counts[0] += verdict == Verdict.OK.value
        counts[1] += 1
        value = reward_of(verdict)
        if value is not None:
            for cat in (category.get(task_id) or "-", "all"):
                rewards[cat].append(value)
    if not per_task:
        return {}
    top = max_k or max(n for _, n in per_task.values())
    groups: dict[str, dict[str, tuple[int, int]]] = defaultdict(dict)
    for task_id, (ok, n) in per_task.items():
        groups[category.get(task_id) or "-"][task_id] = (ok, n)
        groups["all"][task_id] = (ok, n)
    out: dict[str, float] = {}
    for cat in sorted(groups, key=lambda c: (c == "all", c)):
        prefix = "proof" if cat == "all" else f"category/{cat}"
        counts = groups[cat]
        samples = sum(n for _, n in counts.values())
        if cat != "all":
            out[f"{prefix}/ok_rate"] = sum(ok for ok, _ in counts.values()) / samples
            out[f"{prefix}/samples"] = float(samples)
        if rewards[cat]:
            out[f"{prefix}/reward"] = sum(rewards[cat]) / len(rewards[cat])
        out.update({f"{prefix}/pass@{k}": v for k, v in pass_at_k_curve(counts, range(1, top + 1)).items()})
    return out


def curve_of(metrics: Mapping[str, float], prefix: str) -> dict[int, float]:
    """``{k: pass@k}`` from flat metrics named ``<prefix>/pass@<k>`` (e.g. ``category/P1``)."""
    curve = {}
    for name, value in metrics.items():
        head, _, k = name.rpartition("/pass@")
        if head == prefix and k.isdigit():
            curve[int(k)] = value
    return dict(sorted(curve.items()))
