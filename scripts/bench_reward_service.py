"""How long a GRPO step waits for the verifier: a pool per rank vs one shared service per node with async rewards.

A benchmark, not a test (issue 29, "Measured"). Four arms in one run, each a fresh ``torchrun`` of
proofgym's own GRPO entry on CPU (gloo), same tiny model, tasks, seed and settings, real Coq rewards:

- ``pool``: every rank starts its own verifier pool of ``--workers`` workers and calls the reward
  synchronously (proofgym's default);
- ``service``: ``verifier_service: node``: local rank 0 starts one verifier service with ``--workers``
  x ranks workers and one verdict cache; every rank's reward is async and its batch is sent as soon as
  TRL has decoded it;

each with 1 and 2 processes. The policy is a tiny Llama taught the tiny suite's reference proofs
(``agents/tiny_model.py``), so Coq sees real proofs (OK) beside the model's slips. ``--beta`` > 0
(default 0.04) gives TRL a reference-model pass between generation and reward, the pass that
verification can overlap (under vLLM it is the importance-sampling pass; with ``beta: 0`` and aligned
steps there is none, and the async reward can only save the per-rank pools' duplication).

Per arm, over the steps after the first (the first pays model load and worker start): mean step
time (TRL's ``step_time``: generation, scoring and the backward pass), mean time the step waited for
its rewards (``verifier/wait_seconds`` for the async reward, ``verifier/batch_seconds`` for the
synchronous one: the wall seconds of the reward call), their ratio (the share of step time spent
waiting), and the peak resident memory of rank 0's training process. Then the ratios service / pool.

    .venv/bin/python scripts/bench_reward_service.py --steps 6 --out runs/bench/reward_service.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SUITE = ROOT / "tests" / "data" / "tiny_suite.jsonl"
CONTEXT_CHARS = 120


def build_policy(path: Path) -> Path:
    """The tiny model, taught to answer each tiny-suite prompt with its reference proof."""
    from proofgym.agents.tiny_model import build_tiny_model
    from proofgym.envs.tasks.suites import load_tasks
    from proofgym.training.data import prompt_messages, reference_completion

    tasks = load_tasks(SUITE)
    teach = [(prompt_messages(t, context_chars=CONTEXT_CHARS), reference_completion(t)) for t in tasks]
    return build_tiny_model(path, teach=teach, teach_steps=300)


def worker(args: argparse.Namespace) -> None:
    """One rank of one arm (under torchrun): proofgym's GRPO; rank 0 writes what it logged."""
    from proofgym.training.grpo import train_grpo
    from proofgym.training.grpo_config import ProofGRPOConfig

    cfg = ProofGRPOConfig(
        model_name_or_path=args.model, suite=str(SUITE), output_dir=args.run_dir, report_to="none",
        max_steps=args.steps, per_device_train_batch_size=args.batch, num_generations=args.generations,
        max_completion_length=args.max_tokens, temperature=1.0, learning_rate=1e-5, beta=args.beta,
        torch_threads=1, prompt_context_chars=CONTEXT_CHARS, heldout_fraction=0, verifier_workers=args.workers,
        checkpoint_eval_at_end=False, save_strategy="no", seed=0, logging_steps=1,
        verifier_service="node" if args.mode == "service" else None)
    result = train_grpo(cfg)
    if os.environ.get("RANK", "0") == "0":
        Path(args.record).write_text(json.dumps({"log_history": result.log_history,
                                                 "reward_totals": dict(result.reward_totals)}))


def summarise(record: dict[str, Any], mode: str) -> dict[str, float]:
    rows = [r for r in record["log_history"] if "step_time" in r][1:]  # the first step pays the start-up
    wait_key = "verifier/wait_seconds" if mode == "service" else "verifier/batch_seconds"
    step = sum(r["step_time"] for r in rows)
    wait = sum(r[wait_key] for r in rows)
    return {"steps": len(rows), "step_s": step / len(rows), "wait_s": wait / len(rows),
            "wait_share": wait / step if step else 0.0,
            "check_s": sum(r.get("verifier/seconds", 0.0) for r in rows) / len(rows),
            "peak_rss_gib": max(r.get("memory/host_peak_rss_gib", 0.0) for r in rows),
            "samples": record["reward_totals"].get("samples", 0),
            "ok": record["reward_totals"].get("OK", 0),
            "harness_failures": record["reward_totals"].get("HARNESS_FAILURE", 0)}


def run_arm(args: argparse.Namespace, model: Path, mode: str, procs: int, scratch: Path) -> dict[str, Any]:
    record = scratch / f"{mode}-{procs}.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(procs),
           str(Path(__file__).resolve()), "--worker", "--mode", mode, "--model", str(model),
           "--run-dir", str(scratch / f"run-{mode}-{procs}"), "--record", str(record),
           "--steps", str(args.steps), "--batch", str(args.batch), "--generations", str(args.generations),
           "--max-tokens", str(args.max_tokens), "--workers", str(args.workers), "--beta", str(args.beta)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    env.pop("PROOFGYM_VERIFIER_SERVICE", None)
    print(f"[bench] {mode} x {procs} process(es) ...", file=sys.stderr, flush=True)
    begin = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=scratch, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{mode} x {procs} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}")
    return {"mode": mode, "procs": procs, "wall_s": time.monotonic() - begin,
            **summarise(json.loads(record.read_text()), mode)}


def table(arms: list[dict[str, Any]]) -> str:
    lines = ["| processes | rewards | step (s) | waiting for the verifier (s) | share of the step | "
             "check (s, mean) | peak RSS rank 0 (GiB) | samples | OK | harness failures |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for a in arms:
        label = "pool per rank, sync" if a["mode"] == "pool" else "node service, async"
        lines.append(f"| {a['procs']} | {label} | {a['step_s']:.2f} | {a['wait_s']:.2f} | {a['wait_share']:.1%} | "
                     f"{a['check_s']:.3f} | {a['peak_rss_gib']:.2f} | {a['samples']} | {a['ok']} | "
                     f"{a['harness_failures']} |")
    lines.append("")
    for a in arms:
        if a["harness_failures"]:
            lines.append(f"- **{a['mode']} x {a['procs']}: {a['harness_failures']} harness failures**: its wait is not "
                         f"the time of real checks; fix the verifier (or the service) and run again")
    for procs in sorted({a["procs"] for a in arms}):
        pool = next(a for a in arms if a["procs"] == procs and a["mode"] == "pool")
        service = next(a for a in arms if a["procs"] == procs and a["mode"] == "service")
        lines.append(f"- {procs} process(es), service / pool: step time x{service['step_s'] / pool['step_s']:.2f}, "
                     f"wait x{service['wait_s'] / max(pool['wait_s'], 1e-9):.2f}, share of the step "
                     f"{pool['wait_share']:.1%} -> {service['wait_share']:.1%}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=6, help="GRPO steps per arm (the first is left out).")
    parser.add_argument("--batch", type=int, default=8, help="Completions per rank per step.")
    parser.add_argument("--generations", type=int, default=4, help="Completions per prompt (GRPO group).")
    parser.add_argument("--max-tokens", type=int, default=48, help="Longest completion.")
    parser.add_argument("--workers", type=int, default=1, help="Verifier workers per rank (the service gets "
                                                               "this x ranks).")
    parser.add_argument("--beta", type=float, default=0.04, help="KL coefficient (> 0: a reference-model pass).")
    parser.add_argument("--procs", default="1,2", help="Process counts, comma-separated.")
    parser.add_argument("--out", type=Path, help="Also write the arms as JSON here.")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--mode", choices=("pool", "service"), help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--run-dir", help=argparse.SUPPRESS)
    parser.add_argument("--record", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    with tempfile.TemporaryDirectory(prefix="bench-reward-service-") as tmp:
        scratch = Path(tmp)
        print("[bench] building the tiny policy ...", file=sys.stderr, flush=True)
        model = build_policy(scratch / "model")
        load = [os.getloadavg()[0]]
        arms = []
        for procs in (int(p) for p in args.procs.split(",")):
            for mode in ("pool", "service"):
                arms.append(run_arm(args, model, mode, procs, scratch))
                load.append(os.getloadavg()[0])
    header = (f"{platform.node()}: {os.cpu_count()} CPUs, load average (1 min) {min(load):.1f}-{max(load):.1f} "
              f"while it ran; {args.steps} steps per arm ({args.steps - 1} measured), {args.batch} completions "
              f"per rank per step in groups of {args.generations}, <= {args.max_tokens} tokens, beta {args.beta}, "
              f"{args.workers} Coq worker(s) per rank (the service: that x ranks)")
    print(header + "\n\n" + table(arms))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"header": header, "arms": arms}, indent=1))


if __name__ == "__main__":
    main()
