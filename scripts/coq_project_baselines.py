"""Baselines on a Coq suite, per category: the reference proofs, and the symbolic agent (prover automation).

    .venv/bin/python scripts/coq_project_baselines.py coq-stdpp --agent reference --out ref.json
    .venv/bin/python scripts/coq_project_baselines.py coq-iris --agent symbolic --per-category 10 --seed 0

``reference`` submits each task's own proof (every task must be OK, else the suite is wrong).
``symbolic`` is :class:`proofgym.agents.symbolic.SymbolicAgent` with CoqHammer: one whole proof
``intros; first [solve [sauto] | solve [lia] | solve [auto] | ...]`` per task, checked with the
verifier's ``prelude`` loading CoqHammer's tactics and ``Lia`` (Cobblestone's CoqHammer baseline).
``hammer.`` itself (ATP calls, ~46 s per failure) is left out unless ``--full-hammer``.

Tasks are checked in file order in one verifier, so the warm session of a file's prefix is loaded
once and extended lemma by lemma, as validation does. Each file's first context load is timed and
its prover's resident memory read: the cost of a context. Output: a JSON summary (per category,
per check, per context) and a markdown table row on stdout.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

from proofgym.agents.symbolic import COQ_HAMMER, COQ_PLAIN, SymbolicAgent
from proofgym.envs.errors import ProofgymError
from proofgym.envs.tasks.suites import load_tasks, resolve_suite
from proofgym.envs.verifiers.coq import HAMMER_PRELUDE, CoqVerifier
from proofgym.envs.verifiers.procfs import rss_bytes

#: The symbolic candidates: CoqHammer's sauto, then lia, then plain Coq automation.
SYMBOLIC_TACTICS = (*COQ_HAMMER, "lia.", *COQ_PLAIN)
LIA_PRELUDE = "From Coq Require Import Lia."


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
    p.add_argument("suite", help="a built suite name (coq-stdpp, coq-stdlib, ...) or a .jsonl path")
    p.add_argument("--agent", choices=["reference", "symbolic"], default="reference")
    p.add_argument("--per-category", type=int, default=0, help="check a seeded sample of N tasks per category "
                                                               "(default 0: every task)")
    p.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    p.add_argument("--full-hammer", action="store_true", help="symbolic: also try `hammer.` (slow on failure)")
    p.add_argument("--timeout-s", type=float, default=0, help="per-check budget (default: each task's own)")
    p.add_argument("--out", help="write the JSON summary here")
    args = p.parse_args(argv)

    tasks = _sample(load_tasks(resolve_suite(args.suite)), args.per_category, args.seed)
    tasks.sort(key=lambda t: (str(t.metadata.get("file", "")), int(t.metadata.get("line", 0))))
    agent = SymbolicAgent("coq", hammer=True, full_hammer=args.full_hammer,
                          tactics=(*SYMBOLIC_TACTICS[:1], *(("hammer.",) if args.full_hammer else ()),
                                   *SYMBOLIC_TACTICS[1:]))
    symbolic = agent.whole_proof("coq")
    prelude = HAMMER_PRELUDE + "\n" + LIA_PRELUDE if args.agent == "symbolic" else ""
    coq_args = tuple(tasks[0].metadata.get("coq_args", ())) if tasks else ()
    per_category: dict[str, Counter] = defaultdict(Counter)
    checks: list[dict] = []
    contexts: list[dict] = []
    start = time.monotonic()

    def summarize() -> dict:
        total_s = time.monotonic() - start
        walls = [c["wall_s"] for c in checks]
        summary = {
            "suite": args.suite, "agent": args.agent, "tasks": len(tasks), "per_category_sample": args.per_category,
            "seed": args.seed, "proof": None if args.agent == "reference" else symbolic, "prelude": prelude,
            "per_category": {c: dict(v) for c, v in sorted(per_category.items())},
            "ok_rate": {c: round(v["OK"] / max(1, sum(v.values()) - v["harness"]), 3)
                        for c, v in sorted(per_category.items())},
            "overall_ok_rate": round(sum(v["OK"] for v in per_category.values())
                                     / max(1, sum(sum(v.values()) - v["harness"] for v in per_category.values())), 3),
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

    with CoqVerifier(prelude=prelude, extra_args=coq_args, max_sessions=2) as verifier:
        last_file = None
        for n, task in enumerate(tasks, 1):
            if args.timeout_s:
                task = type(task).from_dict({**task.to_dict(), "timeout_s": args.timeout_s})
            if task.metadata.get("file") != last_file:  # a new file: its context is loaded cold
                last_file = task.metadata.get("file")
                for session in list(verifier._sessions.values()):  # noqa: SLF001 - measure a cold load
                    verifier._drop(session)  # noqa: SLF001
                t0 = time.monotonic()
                try:
                    session = verifier._session(verifier._with_prelude(task).context)  # noqa: SLF001
                    contexts.append({"file": last_file, "context_chars": len(task.context),
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
    total_s = summary["total_s"]
    cells = " | ".join(f"{c} {v['OK']}/{sum(v.values())}" for c, v in sorted(per_category.items()))
    print(f"| {args.suite} | {args.agent} | {cells} | {summary['overall_ok_rate']:.1%} | {total_s:.0f} s |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
