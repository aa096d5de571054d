"""Quick start 2: evaluate your own agent with the engine of ``proofgym eval`` (pass@k, rows as they land).

    python examples/evaluate_agent.py [RESULTS.jsonl]

An agent is a class with ``generate(requests) -> generations``: each request is a chat (the prompt
``proofgym eval`` builds for the task) and each generation the raw reply, from which the proof is parsed.
This one is no model: it answers every task with one tactic script. Put a model call in ``generate`` (or
use ``proofgym eval --agent openai|anthropic|local``) to score a real policy. It runs on ``coq-tiny``
(ships with proofgym; needs ``coqc``) and writes one row per task and sample to RESULTS.jsonl (default: a
temporary file); a rerun on the same file skips the rows already there.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from proofgym.agents.base import Agent, Generation, Request
from proofgym.envs.tasks import load_tasks
from proofgym.training.eval_engine import EvalOptions, run_eval
from proofgym.training.eval_runs import read_results


class OneScriptAgent(Agent):
    """Replies to every request with the same proof script (a stand-in for a model)."""

    name = "one-script"

    def generate(self, requests: Sequence[Request]) -> list[Generation]:
        return [Generation(text="```coq\nProof. intros; try lia; auto. Qed.\n```") for _ in requests]


def main(argv: Sequence[str]) -> None:
    tasks = load_tasks("coq-tiny")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(argv[0]) if argv else Path(tmp) / "results.jsonl"
        summary = run_eval(tasks, OneScriptAgent(), out, EvalOptions(k=1, workers=1, progress=False))
        for row in sorted(read_results(out), key=lambda r: r["task_id"]):
            print(f"{row['task_id']}: {row['verdict']}")
        for category, scores in summary.per_category.items():
            print(f"pass@1 {category}: {scores['pass@1']:.2f} over {scores['n']} task(s)")


if __name__ == "__main__":
    main(sys.argv[1:])
