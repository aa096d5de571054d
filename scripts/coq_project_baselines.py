"""Baselines on a Coq suite, per category: the reference proofs, and the symbolic agent (prover automation).

    .venv/bin/python scripts/coq_project_baselines.py coq-stdpp --agent reference --out ref.json
    .venv/bin/python scripts/coq_project_baselines.py coq-iris --agent symbolic --per-category 10 --seed 0

``reference`` submits each task's own proof (every task must be OK, else the suite is wrong).
``symbolic`` is :class:`proofgym.agents.symbolic.SymbolicAgent` with CoqHammer: one whole proof
``intros; first [solve [timeout 5 trivial] | ... | solve [timeout 5 sauto]]`` per task
(Cobblestone's CoqHammer baseline): plain Coq automation, ``lia``, then CoqHammer's ``sauto``, each
bounded by Coq's ``timeout`` so that a slow candidate fails and the next runs. ``hammer.`` itself
(ATP calls, ~46 s per failure) is left out unless ``--full-hammer``.

CoqHammer is loaded *after* the task's context (``From Hammer Require Import Tactics.`` and
``Lia`` appended to it), never before: imported before a project's sources, it changes how their
own proofs run, so as a prelude it broke the contexts themselves (stdpp's ``fin_maps.v``, under
plain ``coqc`` too: ``elem_of_list_to_map_1'`` fails with "Incorrect number of goals", so the
lemmas after it are missing and every later task's context "does not load"; a ``Require`` of it
without ``Import`` does not do this). After the context it changes nothing the context states; a
``Require`` inside an open Section or Module is allowed (Coq warns that it is fragile).
The price is that each task's context is its own (a file's warm session cannot be extended to the
next lemma), so each task loads its context cold, from the isolation cache where it can.

The suite's load path (a ``--project`` suite's ``metadata.coq_args``) is passed to the verifier.
Each file's first context load is timed and its prover's resident memory read: the cost of a
context. A harness failure (a verifier or context that breaks) is counted on its own, never as
a wrong answer, and left out of the rates. Rates come with Wilson 95% intervals.
Output: a JSON summary (per category, per check, per context) and a markdown table row on stdout.

``--from-eval RUN_DIR...`` writes the same table rows for ``proofgym eval`` runs instead (e.g. the
local SmolLM2 model with ``--strategy selene``): ACC#1 per category with its Wilson interval, and
for a run with a fixing round a second row, after fixing; the cost column is the run's wall time,
tokens per evaluated task and checks per task (the fixing demonstrations' setup included).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import time
from collections import Counter, defaultdict
from dataclasses import replace
from pathlib import Path

from proofgym.agents.symbolic import COQ_HAMMER, HAMMER_POSTLUDE, SymbolicAgent
from proofgym.agents.symbolic import with_hammer_postlude as with_hammer
from proofgym.envs.errors import ProofgymError
from proofgym.envs.tasks.coq_project import suite_load_path
from proofgym.envs.tasks.suites import load_tasks, resolve_suite
from proofgym.envs.verifiers.coq import CoqVerifier
from proofgym.envs.verifiers.sandbox.procfs import rss_bytes

#: The symbolic candidates, cheapest first (a solved goal stops the search): plain Coq automation,
#: lia, then CoqHammer's sauto.
SYMBOLIC_TACTICS = ("trivial.", "auto.", "congruence.", "lia.", "intuition.", "firstorder.", *COQ_HAMMER)


def wilson(ok: int, n: int, z: float = 1.96) -> tuple[float, float] | None:
    """The Wilson score interval of ``ok`` successes in ``n`` (95% by default); None when ``n`` is 0."""
    if n <= 0:
        return None
    p = ok / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return round(max(0.0, centre - half), 3), round(min(1.0, centre + half), 3)


def _sample(tasks: list, per_category: int, seed: int) -> list:
    if per_category <= 0:
        return tasks
    by_category: dict[str, list] = defaultdict(list)
    for task in sorted(tasks, key=lambda t: t.id):
        by_category[task.category].append(task)
    rng = random.Random(f"{seed}:baseline")
    return [t for c in sorted(by_category) for t in rng.sample(by_category[c], min(per_category, len(by_category[c])))]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    p.add_argument("suite", nargs="?", help="a built suite name (coq-stdpp, coq-stdlib, ...) or a .jsonl path")
    p.add_argument("--agent", choices=["reference", "symbolic"], default="reference")
    p.add_argument("--per-category", type=int, default=0, help="check a seeded sample of N tasks per category "
                                                               "(default 0: every task)")
    p.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    p.add_argument("--full-hammer", action="store_true", help="symbolic: also try `hammer.` (slow on failure)")
    p.add_argument("--candidate-timeout", type=int, default=5,
                   help="symbolic: seconds for each candidate tactic (Coq's `timeout`; default 5, 0: none)")
    p.add_argument("--timeout-s", type=float, default=0, help="per-check budget (default: each task's own)")
    p.add_argument("--out", help="write the JSON summary here")
    p.add_argument("--from-eval", nargs="+", metavar="RUN_DIR", help="print the table rows of these `proofgym eval` "
                   "run dirs (their summary.json) instead of running a baseline")
    args = p.parse_args(argv)
    if args.from_eval:
        for run_dir in args.from_eval:
            config = Path(run_dir) / "config.json"  # the strategy's options (sim, fix) are in the run's config
            options: dict = {}
            if config.is_file():
                options = json.loads(config.read_text(encoding="utf-8")).get("config", {}).get("strategy_options") or {}
            for row in eval_rows(json.loads((Path(run_dir) / "summary.json").read_text(encoding="utf-8")), options):
                print(row)
        return 0
    if not args.suite:
        p.error("a suite is needed (or --from-eval RUN_DIR...)")

    tasks = _sample(load_tasks(resolve_suite(args.suite)), args.per_category, args.seed)
    tasks.sort(key=lambda t: (str(t.metadata.get("file", "")), int(t.metadata.get("line", 0))))
    agent = SymbolicAgent("coq", hammer=True, full_hammer=args.full_hammer,
                          tactics=(*SYMBOLIC_TACTICS, *(("hammer.",) if args.full_hammer else ())),
                          candidate_timeout_s=args.candidate_timeout)
    symbolic = agent.whole_proof("coq")
    coq_args = suite_load_path(tasks)
    per_category: dict[str, Counter] = defaultdict(Counter)
    checks: list[dict] = []
    contexts: list[dict] = []
    start = time.monotonic()

    def summarize() -> dict:
        total_s = time.monotonic() - start
        walls = [c["wall_s"] for c in checks]
        ok_all = sum(v["OK"] for v in per_category.values())
        scored_all = sum(_scored(v) for v in per_category.values())
        summary = {
            "suite": args.suite, "agent": args.agent, "tasks": len(tasks), "per_category_sample": args.per_category,
            "seed": args.seed, "proof": None if args.agent == "reference" else symbolic,
            "after_context": HAMMER_POSTLUDE if args.agent == "symbolic" else "",
            "per_category": {c: dict(v) for c, v in sorted(per_category.items())},
            "ok_rate": {c: round(v["OK"] / max(1, _scored(v)), 3) for c, v in sorted(per_category.items())},
            "ok_rate_ci95": {c: wilson(v["OK"], _scored(v)) for c, v in sorted(per_category.items())},
            "overall_ok_rate": round(ok_all / max(1, scored_all), 3),
            "overall_ci95": wilson(ok_all, scored_all),
            "harness_failures": sum(v["harness"] for v in per_category.values()),
            "check_s": {"median": round(statistics.median(walls), 2) if walls else None,
                        "max": max(walls, default=None)},
            "contexts": {"n": len(contexts),
                         "load_s_median": round(statistics.median(c["load_s"] for c in contexts), 2) if contexts else None,
                         "load_s_max": max((c["load_s"] for c in contexts), default=None),
                         "rss_mb_median": statistics.median(c["rss_mb"] for c in contexts) if contexts else None,
                         "rss_mb_max": max((c["rss_mb"] for c in contexts), default=None),
                         "each": contexts},
            "total_s": round(total_s, 1),
            "checks": checks,
        }
        if args.out:  # after every check, so that a run stopped at its deadline leaves what it did
            Path(args.out).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
        return summary

    with CoqVerifier(extra_args=coq_args, max_sessions=2) as verifier:
        last_file = None
        for n, task in enumerate(tasks, 1):
            if args.timeout_s:
                task = replace(task, timeout_s=args.timeout_s)
            if args.agent == "symbolic":
                task = with_hammer(task)
            # A new file's context is loaded cold (so is every symbolic task's: its context is its own).
            if task.metadata.get("file") != last_file or args.agent == "symbolic":
                last_file = task.metadata.get("file")
                for session in list(verifier._sessions.values()):  # noqa: SLF001 - measure a cold load
                    verifier._drop(session)  # noqa: SLF001
                t0 = time.monotonic()
                try:
                    session = verifier._session(task.context)  # noqa: SLF001
                    contexts.append({"file": last_file, "task": task.id, "context_chars": len(task.context),
                                     "load_s": round(time.monotonic() - t0, 2),
                                     "rss_mb": round(rss_bytes(session.ide.program_pids()) / 2**20)})
                except ProofgymError as exc:  # the check below records it for the task
                    print(f"context of {last_file} does not load: {exc}", file=sys.stderr)
            proof = task.reference_proof if args.agent == "reference" else symbolic
            t0 = time.monotonic()
            try:
                result = verifier.check(task, proof)
                verdict, reason = result.verdict.value, (result.reasons or ("",))[0][:120]
            except ProofgymError as exc:  # a harness failure is its own count, never a wrong answer
                verdict, reason = "harness", f"{type(exc).__name__}: {str(exc)[:100]}"
            wall = time.monotonic() - t0
            per_category[task.category][verdict] += 1
            checks.append({"id": task.id, "category": task.category, "verdict": verdict,
                           "wall_s": round(wall, 2), "reason": reason})
            print(f"[{n}/{len(tasks)}] {task.id} {verdict} {wall:.1f}s", file=sys.stderr, flush=True)
            summarize()
    summary = summarize()
    cells = " | ".join(_cell(v["OK"], _scored(v), v["harness"]) for _, v in sorted(per_category.items()))
    ok_all = sum(v["OK"] for v in per_category.values())
    print(f"| {args.suite} | {args.agent} | {cells} | {_cell(ok_all, sum(_scored(v) for v in per_category.values()), summary['harness_failures'])} "
          f"| {summary['total_s']:.0f} s |")
    return 0


def eval_rows(summary: dict, options: dict | None = None) -> list[str]:
    """Markdown rows of one ``proofgym eval`` summary: ACC#1 per category (and after fixing, when the run has
    a fixing round), each with its Wilson interval, and the run's cost. ``options``: the strategy's options
    from the run's ``config.json``; a retrieval run (``sim``) is labelled ``+ sim``."""
    cats = {c: v for c, v in summary["per_category"].items() if c != "all"}
    n_all = summary["per_category"].get("all", {}).get("n", 0)
    cost = summary.get("cost", {})
    setup = cost.get("setup") or {}
    tokens = (cost.get("total_tokens", 0) + setup.get("prompt_tokens", 0) + setup.get("completion_tokens", 0))
    checks = cost.get("verifier_calls", 0) + setup.get("verifier_calls", 0)
    per_task = max(1, n_all)
    cost_cell = (f"{cost.get('run_wall_s', 0):.0f} s, {tokens / per_task:.0f} tok/task, "
                 f"{checks / per_task:.1f} checks/task")
    strategy = summary.get("strategy") or "plain"
    label = f"{summary.get('model') or summary.get('agent')} {strategy}"
    if str((options or {}).get("sim", "")).lower() in ("true", "1", "yes"):
        label += " + sim"
    metrics = [("pass@1", "")] + ([("fix@1", " + fix")] if summary.get("max_attempts", 1) > 1 else [])
    rows = []
    for metric, suffix in metrics:
        cells = []
        for cat in sorted({"P1", "P2", "P3", *cats}):
            v = cats.get(cat)
            # One sample per task: the rate times n is the count of tasks solved.
            cells.append(_cell(round(v.get(metric, 0.0) * v["n"]), v["n"], 0) if v else "-")
        ok_all = sum(round(v.get(metric, 0.0) * v["n"]) for v in cats.values())
        harness = summary.get("harness_failures", 0)
        rows.append(f"| {summary.get('suite')} | {label}{suffix} | {' | '.join(cells)} | "
                    f"{_cell(ok_all, n_all, harness)} | {cost_cell} |")
    return rows


def _scored(verdicts: Counter) -> int:
    """Checks that gave a verdict (a harness failure gives none)."""
    return sum(verdicts.values()) - verdicts["harness"]


def _cell(ok: int, n: int, harness: int) -> str:
    ci = wilson(ok, n)
    text = f"{ok}/{n}" + (f" = {ok / n:.0%} [{ci[0]:.0%}, {ci[1]:.0%}]" if ci else "")
    return text + (f" ({harness} harness)" if harness else "")


if __name__ == "__main__":
    raise SystemExit(main())
