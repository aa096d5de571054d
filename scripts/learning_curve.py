"""Does learning work? SFT then GRPO on P1 Coq tasks with SmolLM2-135M on CPU; pass@k before and after.

    python scripts/learning_curve.py                      # about 30 minutes on a 2-core CPU
    python scripts/learning_curve.py --quick              # a few minutes: fewer tasks and steps
    python scripts/learning_curve.py --k 4 --sft-epochs 2 --grpo-steps 20 --eval-limit 0   # longer

Three held-out evaluations of the same tasks (``heldout`` split of the P1 tasks of
``coq-stdlib``, never trained on): the base model, after SFT on the reference proofs of the
training split, and after GRPO with the real Coq verifier as reward, starting from the SFT
model. Writes ``<out>/learning_curve.md`` (the table), ``<out>/learning_curve.png`` (pass@k per
stage, SFT loss, GRPO reward) and ``<out>/learning_curve.json``. The numbers are what they are:
a 135M model on CPU for half an hour.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2", help="model to start from (default smollm2; `tiny` without it)")
    p.add_argument("--suite", default="coq-stdlib", help="suite (default coq-stdlib; build it first)")
    p.add_argument("--category", action="append", help="categories to use (default P1; repeatable)")
    p.add_argument("--out", default=None, help="output dir (default runs/learning_curve/<time>)")
    p.add_argument("--k", type=int, default=1, help="pass@k (k samples per task; 1: greedy)")
    p.add_argument("--eval-limit", type=int, default=24, help="held-out tasks evaluated (0: all)")
    p.add_argument("--eval-max-tokens", type=int, default=80, help="tokens per reply in evaluation")
    p.add_argument("--context-chars", type=int, default=200, help="task context shown in prompts")
    p.add_argument("--sft-epochs", type=float, default=1.0, help="SFT epochs over the training split")
    p.add_argument("--sft-lr", type=float, default=1e-4, help="SFT learning rate")
    p.add_argument("--grpo-steps", type=int, default=8, help="GRPO steps")
    p.add_argument("--grpo-lr", type=float, default=1e-5, help="GRPO learning rate")
    p.add_argument("--generations", type=int, default=4, help="GRPO samples per prompt")
    p.add_argument("--prompts-per-step", type=int, default=2, help="GRPO prompts per step")
    p.add_argument("--completion-tokens", type=int, default=80, help="GRPO tokens per completion")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (1 on a shared machine)")
    p.add_argument("--workers", type=int, default=2, help="verifier workers")
    p.add_argument("--report-to", default="wandb", help="wandb (offline unless configured) or none")
    p.add_argument("--quick", action="store_true", help="a short version: 8 eval tasks, 0.25 epoch, 2 GRPO steps")
    args = p.parse_args(argv)
    if args.quick:
        args.eval_limit, args.sft_epochs, args.grpo_steps = 8, 0.25, 2
    return args


def common_fields(args: argparse.Namespace, out: Path, name: str) -> dict[str, Any]:
    return dict(suite=args.suite, categories=args.category or ["P1"], output_dir=str(out / name),
                run_name=f"{out.name}__{name}", prompt_context_chars=args.context_chars, torch_threads=args.threads,
                verifier_workers=args.workers, checkpoint_eval_k=args.k,
                checkpoint_eval_temperature=0.0 if args.k == 1 else 0.5, checkpoint_eval_limit=args.eval_limit,
                checkpoint_eval_max_tokens=args.eval_max_tokens, checkpoint_eval_at_end=True,
                report_to=args.report_to, save_strategy="no", seed=0, logging_steps=1)


def stage_rows(result: Any, labels: dict[int, str], k: int) -> list[dict[str, Any]]:
    rows = []
    for record in result.checkpoint_evals:
        stats = record.get("per_category", {}).get("all", {})
        rows.append({"stage": labels.get(record["step"], f"step {record['step']}"), "step": record["step"],
                     "pass@1": stats.get("pass@1"), f"pass@{k}": stats.get(f"pass@{k}"), "tasks": stats.get("n", 0),
                     "verdicts": record.get("verdicts", {}), "run_dir": record.get("run_dir"),
                     "error": record.get("error")})
    return rows


def plot(rows: list[dict[str, Any]], sft: Any, grpo: Any, k: int, path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    names = [r["stage"] for r in rows]
    for key, offset in (("pass@1", -0.2), (f"pass@{k}", 0.2)) if k > 1 else (("pass@1", 0.0),):
        axes[0].bar([i + offset for i in range(len(rows))], [100 * (r.get(key) or 0) for r in rows],
                    width=0.4 if k > 1 else 0.6, label=key)
    axes[0].set_xticks(range(len(rows)), names)
    axes[0].set_ylabel("held-out %")
    axes[0].set_title("held-out pass@k per stage")
    axes[0].legend()
    loss = [(r["step"], r["loss"]) for r in sft.log_history if "loss" in r and r.get("loss") is not None]
    axes[1].plot([s for s, _ in loss], [v for _, v in loss], marker=".")
    axes[1].set_title("SFT loss")
    axes[1].set_xlabel("step")
    reward = [(r["step"], r["reward"]) for r in grpo.log_history if r.get("reward") is not None]
    ok = [(r["step"], r["proof/ok_rate"]) for r in grpo.log_history if r.get("proof/ok_rate") is not None]
    axes[2].plot([s for s, _ in reward], [v for _, v in reward], marker=".", label="mean reward")
    axes[2].plot([s for s, _ in ok], [v for _, v in ok], marker="x", label="OK rate")
    axes[2].set_title("GRPO (verifier reward)")
    axes[2].set_xlabel("step")
    axes[2].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    start = time.monotonic()
    out = Path(args.out or Path("runs") / "learning_curve" / time.strftime("%Y%m%d-%H%M%S"))
    out.mkdir(parents=True, exist_ok=True)
    from proofgym.training.cli import print_result
    from proofgym.training.grpo import train_grpo
    from proofgym.training.grpo_config import ProofGRPOConfig
    from proofgym.training.sft import train_sft
    from proofgym.training.sft_config import ProofSFTConfig

    def say(text: str) -> None:
        print(f"\n=== [{time.monotonic() - start:6.0f} s] {text}", file=sys.stderr, flush=True)

    say(f"1/3 SFT on reference proofs ({args.sft_epochs} epochs), with held-out evaluation before and after")
    sft_cfg = ProofSFTConfig(model_name_or_path=args.model, num_train_epochs=args.sft_epochs,
                             learning_rate=args.sft_lr, per_device_train_batch_size=4, max_length=512,
                             checkpoint_eval_on_start=True, **common_fields(args, out, "sft"))
    sft = train_sft(sft_cfg)
    print_result(sft)
    sft_seconds = time.monotonic() - start
    say(f"2/3 GRPO from the SFT model ({args.grpo_steps} steps, verifier rewards), held-out evaluation at the end")
    grpo_cfg = ProofGRPOConfig(model_name_or_path=str(sft.final_checkpoint), max_steps=args.grpo_steps,
                               learning_rate=args.grpo_lr, num_generations=args.generations,
                               per_device_train_batch_size=args.generations * args.prompts_per_step,
                               max_completion_length=args.completion_tokens, temperature=0.8,
                               **common_fields(args, out, "grpo"))
    grpo = train_grpo(grpo_cfg)
    print_result(grpo)
    say("3/3 table and plot")
    rows = stage_rows(sft, {0: "base", sft.global_step: "after SFT"}, args.k)
    rows += stage_rows(grpo, {grpo.global_step: "after SFT+GRPO"}, args.k)
    image = plot(rows, sft, grpo, args.k, out / "learning_curve.png")
    total = time.monotonic() - start
    lines = [f"# Learning curve: {args.model} on {args.suite} {', '.join(args.category or ['P1'])}", "",
             f"Held-out tasks: {rows[0]['tasks'] if rows else 0} (same tasks at every stage, never trained on); "
             f"training tasks: SFT {args.sft_epochs} epochs ({sft.global_step} steps), GRPO {grpo.global_step} steps "
             f"x {args.prompts_per_step} prompts x {args.generations} samples. Wall time {total / 60:.1f} min "
             f"(SFT incl. two evaluations {sft_seconds / 60:.1f} min).", "",
             f"| stage | pass@1 | pass@{args.k} | tasks | verdicts |" if args.k > 1 else
             "| stage | pass@1 | tasks | verdicts |", "|---|---|---|---|---|" if args.k > 1 else "|---|---|---|---|"]
    for r in rows:
        p1 = "error" if r["error"] else f"{100 * (r['pass@1'] or 0):.1f}%"
        cells = [r["stage"], p1] + ([f"{100 * (r[f'pass@{args.k}'] or 0):.1f}%"] if args.k > 1 else [])
        lines.append("| " + " | ".join(cells + [str(r["tasks"]), str(r["verdicts"])]) + " |")
    grpo_rows = [r for r in grpo.log_history if r.get("reward") is not None]
    if grpo_rows:
        lines += ["", "GRPO per step: " + ", ".join(
            f"{r['step']}: reward {r['reward']:.2f} ok {100 * (r.get('proof/ok_rate') or 0):.0f}%" for r in grpo_rows)]
    if image:
        lines += ["", f"![learning curve]({image.name})"]
    (out / "learning_curve.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (out / "learning_curve.json").write_text(json.dumps({"args": vars(args), "rows": rows, "wall_s": total,
                                                         "sft_log": sft.log_history, "grpo_log": grpo.log_history},
                                                        indent=2, default=str) + "\n", encoding="utf-8")
    print("\n".join(lines))
    print(f"\nwritten: {out / 'learning_curve.md'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
