"""How much of sampling's verification hides behind generation: sample_and_check unpipelined vs pipelined.

A benchmark, not a test (issue 29: verification overlapping generation). One run, on CPU: the tiny model taught
the tiny suite's reference proofs (``agents/tiny_model.py``) samples ``--k`` replies per task at temperature 1,
``--batch-size`` prompts per generate call, checked by the real Coq verifier on a pool of ``--workers``; the
curriculum's estimates and expert iteration's sampling are this loop. Two arms, each ``--repeats`` times,
alternating, each with the same sampling seed (so the same samples, which the run checks):

- ``depth 0``: generate a batch, check it, generate the next (the loop before issue 29);
- ``depth 1``: a batch's proofs are checked while the next batch generates (``training/pipeline.py``).

Per arm: wall seconds, seconds spent generating, seconds the checks took (each batch's ``check`` call, from
submission to its last verdict), and the share of the shorter of the two that the overlap hid:
``(generate + check - wall) / min(generate, check)`` (0: none hidden; 1: all of it). The load average is
recorded: on a shared machine the times move with it.

    .venv/bin/python scripts/bench_check_pipeline.py --k 8 --repeats 2 --out runs/bench/check_pipeline.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SUITE = ROOT / "tests" / "data" / "tiny_suite.jsonl"
CONTEXT_CHARS = 120


class Timed:
    """Adds up the seconds spent in a callable (the generator, or the checker's ``check``)."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self.seconds = 0.0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        start = time.monotonic()
        try:
            return self.fn(*args, **kwargs)
        finally:
            self.seconds += time.monotonic() - start


class TimedChecker:
    """A :class:`~proofgym.training.rewards.VerifierReward` whose ``check`` calls are timed."""

    def __init__(self, reward: Any) -> None:
        self.reward = reward
        self.check = Timed(reward.check)
        self.proof_of = reward.proof_of


def arm(depth: int, policy: Path, tasks: Sequence[Any], pool: Any, args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    from proofgym.training.rewards import VerifierReward
    from proofgym.training.rollout import ModelGenerator
    from proofgym.training.sampling import sample_and_check

    tokenizer = AutoTokenizer.from_pretrained(policy)
    model = AutoModelForCausalLM.from_pretrained(policy).eval()
    generate = Timed(ModelGenerator(model, tokenizer, GenerationConfig(do_sample=True, temperature=1.0)))
    checker: Any = TimedChecker(VerifierReward(tasks, pool))  # sample_and_check calls its check and proof_of
    torch.manual_seed(args.seed)
    start = time.monotonic()
    samples = sample_and_check(generate, tokenizer, tasks, checker, k=args.k, max_new_tokens=args.max_tokens,
                               batch_size=args.batch_size, context_chars=CONTEXT_CHARS, pipeline_depth=depth)
    wall = time.monotonic() - start
    gen, check = generate.seconds, checker.check.seconds
    return {"depth": depth, "wall_s": round(wall, 2), "generate_s": round(gen, 2), "check_s": round(check, 2),
            "hidden_share": round(max(0.0, gen + check - wall) / max(min(gen, check), 1e-9), 3),
            "samples": len(samples), "ok": sum(s.ok for s in samples),
            "verdicts": [s.outcome.verdict and s.outcome.verdict.value for s in samples]}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--k", type=int, default=8, help="replies per task")
    parser.add_argument("--batch-size", type=int, default=8, help="prompts per generate call")
    parser.add_argument("--max-tokens", type=int, default=48, help="tokens per reply")
    parser.add_argument("--workers", type=int, default=2, help="Coq workers")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each arm, alternating")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="write the results here as JSON")
    args = parser.parse_args(argv)

    from proofgym.agents.tiny_model import build_tiny_model
    from proofgym.envs.tasks.suites import load_tasks
    from proofgym.envs.verifiers.pool import LocalVerifierPool
    from proofgym.training.data import prompt_messages, reference_completion

    tasks = load_tasks(SUITE)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        print("[bench] teaching the tiny policy the reference proofs ...", file=sys.stderr, flush=True)
        teach = [(prompt_messages(t, context_chars=CONTEXT_CHARS), reference_completion(t)) for t in tasks]
        policy = build_tiny_model(Path(tmp) / "policy", teach=teach, teach_steps=300)
        with LocalVerifierPool(args.workers, verdict_cache=0) as pool:  # no cache: every arm checks every proof
            for repeat in range(args.repeats):
                for depth in (0, 1):
                    row = arm(depth, policy, tasks, pool, args)
                    row["repeat"] = repeat
                    rows.append(row)
                    print(f"[bench] depth {depth} run {repeat}: {row['wall_s']} s (generate {row['generate_s']} s, "
                          f"check {row['check_s']} s, hidden {100 * row['hidden_share']:.0f}%), "
                          f"{row['ok']}/{row['samples']} OK", file=sys.stderr, flush=True)
    same = len({tuple(r["verdicts"]) for r in rows}) == 1
    result = {"rows": [{k: v for k, v in r.items() if k != "verdicts"} for r in rows], "same_verdicts": same,
              "settings": vars(args) | {"out": str(args.out)}, "loadavg": os.getloadavg(),
              "cpus": os.cpu_count(), "python": platform.python_version()}
    text = json.dumps(result, indent=2)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
