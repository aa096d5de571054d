"""Does GRPO with verifier rewards learn here? A controlled experiment with error bars.

    python scripts/learning_curve.py                 # the full experiment: hours on 2 CPU cores (LEARNING.md)
    python scripts/learning_curve.py --smoke         # the whole pipeline on a tiny model and suite, ~1 min
    python scripts/learning_curve.py --grpo-steps 80 --k 8 --out runs/learning/long     # longer, tighter

What it does, in order (every arm starts from the same warm start and is evaluated the same way):

1. A fixed held-out split: at least --heldout-size tasks (default 60) of the suite's --category
   tasks (default P1 of coq-stdlib), chosen by a seeded hash of *twin groups*, never of single
   tasks. Tasks that share a lemma name or whose statements agree once module qualifiers are
   dropped (the Nat./N./Z./Pos. versions of one lemma) form one group and land on the same side,
   so a held-out task never has its near-duplicate twin in training. The split is written to
   <out>/split.json (reuse it with --split) and checked: the report states the twins across it (0).
2. sft: an SFT warm start on the training split's reference proofs, so the policy starts with
   p > 0 on some tasks (GRPO learns nothing from tasks it never solves).
3. grpo: GRPO from the warm start with the real verifier as reward, the pass-rate curriculum
   (train on tasks with 0 < p_hat < 1, refreshed as training goes) and a constant learning rate,
   for --grpo-steps steps.
4. control: the same GRPO run with the rewards shuffled across each batch
   (control_permute_rewards): same reward distribution, no relation to the proofs. If this arm
   "improves" as much as grpo, the improvement is not learning from the verifier.
5. expert: expert iteration from the warm start (sample, keep verified proofs, SFT, repeat), the
   baseline GRPO must beat, with a similar sampling budget.
6. Evaluation of every arm on the held-out split: --k samples per task at temperature 1 (mean
   pass@1 = mean over tasks of c/n, and unbiased pass@k), and greedy pass@1.
7. Statistics: for each arm, Δ mean pass@1 against sft with a paired bootstrap over held-out
   tasks (--bootstrap resamples, 95% percentile interval). Paired: the same tasks in both arms,
   so task difficulty cancels and the interval is far tighter than two separate ones.

Success is a grpo Δ whose 95% interval lies above 0 while the control's does not: a control that rises
would mean the gain comes from updating as such, not from the verifier (one that falls is reported as
falling). Greedy pass@1 gets the same paired interval. The report says which happened, with the
numbers; a negative result is reported as one.

Writes <out>/LEARNING.md (the report, with plots), <out>/learning_curve.png,
<out>/learning_curve.json (every number, per task), <out>/split.json, and each arm's training
and evaluation runs under <out>/. Copy LEARNING.md and the PNG to the repository root to
commit a result. The report records the machine's load average before and after: on a shared
machine, timings (not results) depend on it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ARMS = ("sft", "grpo", "control", "expert")
_QUALIFIER = re.compile(r"\b(?:Nat|N|Z|Pos|BinNat|BinInt|BinPos|Pnat|PeanoNat|NArith|ZArith)\.")
_HEADER = re.compile(r"^\s*(?:Lemma|Theorem|Corollary|Proposition|Fact|Remark|Example)\s+[\w']+\s*", re.S)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_argument_group("model, suite and split")
    g.add_argument("--model", default="smollm2", help="policy to start from (default smollm2; `tiny` without it)")
    g.add_argument("--suite", default="coq-stdlib", help="suite name or .jsonl (default coq-stdlib; build it first)")
    g.add_argument("--category", action="append", help="categories used (default P1; repeatable; `all` for all)")
    g.add_argument("--heldout-size", type=int, default=60, help="held-out tasks, at least (default 60)")
    g.add_argument("--split-seed", type=int, default=0, help="seed of the twin-group hash that picks the split")
    g.add_argument("--split", help="reuse a split.json written by an earlier run (same suite)")
    g.add_argument("--max-train-tasks", type=int, default=0, help="train on at most N tasks (0: the whole split)")
    g.add_argument("--context-chars", type=int, default=200, help="task context shown in prompts")
    g = p.add_argument_group("SFT warm start")
    g.add_argument("--sft-epochs", type=float, default=1.0, help="SFT epochs over the training split")
    g.add_argument("--sft-steps", type=int, default=0, help="SFT steps instead of epochs (0: use --sft-epochs)")
    g.add_argument("--sft-lr", type=float, default=1e-4, help="SFT learning rate")
    g = p.add_argument_group("GRPO (grpo and control arms)")
    g.add_argument("--grpo-steps", type=int, default=40, help="GRPO optimizer steps")
    g.add_argument("--grpo-lr", type=float, default=1e-5, help="GRPO learning rate, constant (no decay to 0)")
    g.add_argument("--generations", type=int, default=4, help="completions per prompt (the GRPO group)")
    g.add_argument("--prompts-per-step", type=int, default=2, help="prompts per GRPO step")
    g.add_argument("--completion-tokens", type=int, default=96, help="tokens per GRPO completion")
    g.add_argument("--temperature", type=float, default=1.0, help="GRPO sampling temperature")
    g.add_argument("--curriculum-k", type=int, default=4, help="samples per task in each curriculum estimate")
    g.add_argument("--curriculum-refresh", type=int, default=10, help="re-estimate p_hat every N steps")
    g.add_argument("--no-curriculum", action="store_true", help="GRPO on every training task")
    g = p.add_argument_group("expert iteration (expert arm)")
    g.add_argument("--ei-rounds", type=int, default=2, help="rounds of sample, keep verified, SFT")
    g.add_argument("--ei-samples", type=int, default=2, help="samples per training task per round")
    g.add_argument("--ei-lr", type=float, default=5e-5, help="SFT learning rate of each round")
    g = p.add_argument_group("evaluation and statistics")
    g.add_argument("--k", type=int, default=4, help="samples per held-out task at T=1 (pass@1 mean, pass@k)")
    g.add_argument("--eval-max-tokens", type=int, default=96, help="tokens per reply in evaluation")
    g.add_argument("--no-greedy", action="store_true", help="skip the greedy evaluation")
    g.add_argument("--bootstrap", type=int, default=10000, help="paired bootstrap resamples")
    g.add_argument("--arms", default=",".join(ARMS), help=f"arms to run (default {','.join(ARMS)}; sft is needed)")
    g.add_argument("--eval-arms", help="evaluate only these of the arms (comma-separated; default: all of --arms); "
                   "the report then covers the arms evaluated in this run")
    g.add_argument("--phase", choices=("all", "train", "eval"), default="all",
                   help="train: only train the arms; eval: only evaluate them (and write the report); all: both. "
                        "Arms already trained or evaluated under --out are reused, so a killed run resumes, and "
                        "two processes with disjoint --arms (sft shared) can train on two cores at once")
    g = p.add_argument_group("machine")
    g.add_argument("--out", help="output dir (default runs/learning_curve/<time>)")
    g.add_argument("--threads", type=int, default=1, help="torch CPU threads (1 on a shared machine)")
    g.add_argument("--workers", type=int, default=2, help="verifier worker processes")
    g.add_argument("--report-to", default="none", help="none, or wandb (offline unless configured) for every run")
    g.add_argument("--verifier-factory", help="module:callable verifier instead of the system's (tests)")
    g.add_argument("--seed", type=int, default=0, help="seed of training, sampling and the bootstrap")
    g.add_argument("--smoke", action="store_true",
                   help="the whole pipeline in about a minute: tiny model, tests/data/tiny_suite.jsonl, 2 held-out "
                        "tasks, 1-2 steps per arm, k=2 (checks the plumbing; its numbers mean nothing)")
    args = p.parse_args(argv)
    if args.smoke:
        args.model, args.suite, args.category = "tiny", str(ROOT / "tests" / "data" / "tiny_suite.jsonl"), ["all"]
        args.heldout_size, args.sft_steps, args.grpo_steps, args.generations, args.prompts_per_step = 2, 2, 1, 2, 2
        args.completion_tokens, args.eval_max_tokens, args.k, args.curriculum_k, args.curriculum_refresh = \
            12, 12, 2, 2, 0
        args.ei_rounds, args.ei_samples, args.bootstrap, args.workers = 1, 2, 200, 1
    args.arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = set(args.arms) - set(ARMS)
    if unknown or "sft" not in args.arms:
        p.error(f"--arms takes some of {', '.join(ARMS)}, sft included (got {args.arms})")
    return args


# -- the split ---------------------------------------------------------------------------------------
def twin_keys(task: Any) -> set[str]:
    """Keys that make two tasks twins: the lemma's short name, and its statement without name and qualifiers."""
    name = task.id.rsplit(".", 1)[-1]
    body = _QUALIFIER.sub("", _HEADER.sub("", task.statement))
    return {f"name:{name}", "stmt:" + " ".join(body.split())}


def twin_groups(tasks: Sequence[Any]) -> list[list[Any]]:
    """Tasks joined (transitively) by any shared :func:`twin_keys` key, in suite order."""
    parent = list(range(len(tasks)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first: dict[str, int] = {}
    for i, task in enumerate(tasks):
        for key in twin_keys(task):
            if key in first:
                parent[find(i)] = find(first[key])
            else:
                first[key] = i
    groups: dict[int, list[Any]] = defaultdict(list)
    for i, task in enumerate(tasks):
        groups[find(i)].append(task)
    return list(groups.values())


def fixed_split(tasks: Sequence[Any], *, heldout_size: int, seed: int = 0) -> tuple[list[Any], list[Any]]:
    """``(train, heldout)``: whole twin groups, in seeded-hash order, until ``heldout_size`` tasks are held out."""
    if heldout_size >= len(tasks):
        raise SystemExit(f"--heldout-size {heldout_size} leaves no training task out of {len(tasks)}")

    def rank(group: list[Any]) -> str:
        return hashlib.blake2b(f"{seed}:{min(t.id for t in group)}".encode(), digest_size=8).hexdigest()

    held: set[str] = set()
    for group in sorted(twin_groups(tasks), key=rank):
        if len(held) >= heldout_size:
            break
        held.update(t.id for t in group)
    return [t for t in tasks if t.id not in held], [t for t in tasks if t.id in held]


def twins_across(train: Iterable[Any], heldout: Iterable[Any]) -> list[tuple[str, str]]:
    """Pairs (held-out id, training id) that share a twin key: should be none."""
    by_key: dict[str, list[str]] = defaultdict(list)
    for task in train:
        for key in twin_keys(task):
            by_key[key].append(task.id)
    return sorted({(t.id, other) for t in heldout for key in twin_keys(t) for other in by_key.get(key, [])})


# -- statistics ----------------------------------------------------------------------------------------
def paired_bootstrap(arm: Mapping[str, float], base: Mapping[str, float], *, resamples: int = 10000, seed: int = 0,
                     level: float = 0.95) -> dict[str, float]:
    """Δ = mean over shared tasks of ``arm - base`` and its percentile bootstrap interval (tasks resampled)."""
    import numpy as np

    ids = sorted(set(arm) & set(base))
    if not ids:
        return {"delta": float("nan"), "lo": float("nan"), "hi": float("nan"), "tasks": 0}
    diffs = np.array([arm[t] - base[t] for t in ids], dtype=float)
    rng = np.random.default_rng(seed)
    means = diffs[rng.integers(0, len(ids), size=(resamples, len(ids)))].mean(axis=1)
    lo, hi = np.quantile(means, [(1 - level) / 2, 1 - (1 - level) / 2])
    return {"delta": float(diffs.mean()), "lo": float(lo), "hi": float(hi), "tasks": len(ids)}


def per_task(rows: Iterable[Mapping[str, Any]]) -> dict[str, tuple[int, int]]:
    """``{task_id: (OK, samples with a verdict)}`` from an evaluation's results (harness failures left out)."""
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for row in rows:
        if row.get("verdict") is None:
            continue
        counts[row["task_id"]][1] += 1
        counts[row["task_id"]][0] += row["verdict"] == "OK"
    return {t: (c, n) for t, (c, n) in counts.items()}


def arm_stats(sampled: Mapping[str, tuple[int, int]], greedy: Mapping[str, tuple[int, int]] | None, k: int
              ) -> dict[str, Any]:
    """Mean pass@1 (mean of c/n), unbiased pass@k (tasks with n >= k) and greedy pass@1 of one arm."""
    from proofgym.training.evaluate import pass_at_k

    p1 = {t: c / n for t, (c, n) in sampled.items() if n}
    pk = [pass_at_k(n, c, k) for c, n in sampled.values() if n >= k]
    out: dict[str, Any] = {"pass@1": sum(p1.values()) / len(p1) if p1 else 0.0, f"pass@{k}": sum(pk) / len(pk)
                           if pk else 0.0, "tasks": len(p1), "per_task_pass@1": p1}
    if greedy is not None:
        g = {t: c / n for t, (c, n) in greedy.items() if n}
        out["greedy_pass@1"] = sum(g.values()) / len(g) if g else 0.0
        out["per_task_greedy"] = g
    return out


# -- the arms --------------------------------------------------------------------------------------------
def common(args: argparse.Namespace, suite: Path, out: Path, name: str) -> dict[str, Any]:
    fields: dict[str, Any] = dict(suite=str(suite), output_dir=str(out / name), run_name=f"{out.name}__{name}",
                                  prompt_context_chars=args.context_chars, torch_threads=args.threads,
                                  verifier_workers=args.workers, checkpoint_eval_at_end=False,
                                  report_to=args.report_to, save_strategy="no", seed=args.seed, logging_steps=1,
                                  max_train_tasks=args.max_train_tasks)
    if args.verifier_factory:
        fields["verifier_factory"] = args.verifier_factory
    return fields


def finished_arm(out: Path, arm: str) -> Any | None:
    """The arm's TrainResult (as a namespace) when an earlier run under ``out`` finished it, else None.

    A run that was interrupted, or whose final checkpoint is gone, is not finished: it is trained again.
    """
    path = out / arm / "train_result.json"
    if not path.is_file():
        return None
    record = json.loads(path.read_text(encoding="utf-8"))
    final = record.get("final_checkpoint")
    if record.get("interrupted") or not final or not (Path(final) / "config.json").is_file():
        return None
    record.setdefault("curriculum", [])
    record.setdefault("log_history", [])
    return argparse.Namespace(**record)


def run_sft(args: argparse.Namespace, suite: Path, out: Path) -> Any:
    from proofgym.training.sft import train_sft
    from proofgym.training.sft_config import ProofSFTConfig

    extra = {"max_steps": args.sft_steps} if args.sft_steps else {"num_train_epochs": args.sft_epochs}
    return train_sft(ProofSFTConfig(model_name_or_path=args.model, learning_rate=args.sft_lr,
                                    per_device_train_batch_size=4, max_length=512, **extra,
                                    **common(args, suite, out, "sft")))


def run_grpo(args: argparse.Namespace, suite: Path, out: Path, start: Path, *, control: bool) -> Any:
    from proofgym.training.grpo import train_grpo
    from proofgym.training.grpo_config import ProofGRPOConfig

    return train_grpo(ProofGRPOConfig(
        model_name_or_path=str(start), max_steps=args.grpo_steps, learning_rate=args.grpo_lr,
        lr_scheduler_type="constant", warmup_steps=0, num_generations=args.generations,
        per_device_train_batch_size=args.generations * args.prompts_per_step,
        max_completion_length=args.completion_tokens, temperature=args.temperature,
        curriculum=not args.no_curriculum, curriculum_k=args.curriculum_k,
        curriculum_refresh_steps=args.curriculum_refresh, control_permute_rewards=control,
        **common(args, suite, out, "control" if control else "grpo")))


def run_expert(args: argparse.Namespace, suite: Path, out: Path, start: Path) -> Any:
    from proofgym.training.expert_iteration import train_expert_iteration
    from proofgym.training.expert_iteration_config import ProofExpertIterationConfig

    return train_expert_iteration(ProofExpertIterationConfig(
        model_name_or_path=str(start), rounds=args.ei_rounds, samples_per_task=args.ei_samples,
        sample_temperature=1.0, sample_max_tokens=args.completion_tokens, sample_batch_size=8,
        learning_rate=args.ei_lr, per_device_train_batch_size=4, max_length=512, **common(args, suite, out, "expert")))


def evaluate_arm(args: argparse.Namespace, heldout: Path, checkpoint: Path, out: Path, name: str) -> dict[str, Any]:
    """k samples at T=1 and (unless --no-greedy) greedy, on the held-out split; per-task counts."""
    from proofgym.training.evaluate import EvalConfig, evaluate, read_results

    options = dict(suite=str(heldout), agent="local", model=str(checkpoint), max_tokens=args.eval_max_tokens,
                   workers=args.workers, device="cpu", threads=args.threads, seed=args.seed, batch_size=8,
                   strategy_options={"context_chars": args.context_chars}, verifier=args.verifier_factory)
    _, paths = evaluate(EvalConfig(k=args.k, n=args.k, temperature=1.0, top_p=1.0,
                                   out=str(out / "eval" / f"{name}-sampled"), **options), progress=True)
    sampled = per_task(read_results(paths.results))
    greedy = None
    if not args.no_greedy:
        _, gpaths = evaluate(EvalConfig(k=1, n=1, temperature=0.0, out=str(out / "eval" / f"{name}-greedy"),
                                        **options), progress=True)
        greedy = per_task(read_results(gpaths.results))
    return {"sampled": sampled, "greedy": greedy, **arm_stats(sampled, greedy, args.k)}


# -- the report ------------------------------------------------------------------------------------------
def _pct(x: float) -> str:
    return "-" if x != x else f"{100 * x:.1f}%"


def _interval(d: Mapping[str, float]) -> str:
    return f"{100 * d['delta']:+.1f} pp [{100 * d['lo']:+.1f}, {100 * d['hi']:+.1f}]"


def verdict_text(deltas: Mapping[str, Mapping[str, float]], vs_expert: Mapping[str, float] | None = None) -> str:
    """What the intervals say, against the success criterion in the module docstring.

    ``vs_expert``: GRPO's paired Δ against expert iteration, the baseline it must beat.
    """
    if "grpo" not in deltas:
        return "No GRPO arm was run."
    g = deltas["grpo"]
    lines = [f"GRPO vs the SFT warm start: Δ mean pass@1 {_interval(g)} (95% paired bootstrap over "
             f"{g['tasks']} held-out tasks)."]
    up = g["lo"] > 0
    control_ok = True
    if "control" in deltas:
        c = deltas["control"]
        # The control rules out a gain from updating as such (format, length): only a control that *rises*
        # could explain a GRPO gain. One that falls is reported as such.
        control_ok = c["lo"] <= 0
        lines.append(f"Permuted-reward control: Δ {_interval(c)}; " + (
            "its interval covers 0, as it should." if c["lo"] <= 0 <= c["hi"] else
            "its interval lies below 0: updates with rewards unrelated to the proofs made the policy worse, so a "
            "gain is not from updating as such." if c["hi"] < 0 else
            "its interval lies above 0: something besides the verifier's signal moves the score."))
    if "expert" in deltas:
        lines.append(f"Expert iteration: Δ {_interval(deltas['expert'])}.")
    if vs_expert is not None:
        lines.append(f"GRPO vs expert iteration (the baseline): Δ {_interval(vs_expert)}; " + (
            "GRPO beat it." if vs_expert["lo"] > 0 else "expert iteration did better." if vs_expert["hi"] < 0
            else "the interval covers 0: this run cannot tell them apart."))
    if up and control_ok:
        lines.append("**Result: GRPO learned.** The GRPO interval lies above 0 and the control's does not ("
                     + ("it lies below 0: the control fell" if "control" in deltas and deltas["control"]["hi"] < 0
                        else "it covers 0") + ").")
    elif up:
        lines.append("**Result: inconclusive.** GRPO's interval is above 0, but the control's excludes 0 too: the "
                     "gain cannot be credited to the verifier's signal.")
    else:
        lines.append("**Result: no measurable learning.** The GRPO interval does not lie above 0: this run does "
                     "not show that GRPO improved the held-out pass rate.")
    return "\n\n".join(lines)


def plot(results: Mapping[str, Any], runs: Mapping[str, Any], k: int, path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    arms = [a for a in ARMS if a in results]
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
    ax = axes[0]
    means = [100 * results[a]["pass@1"] for a in arms]
    errs = [[100 * (results[a]["pass@1"] - results[a]["ci"]["lo"]) for a in arms],
            [100 * (results[a]["ci"]["hi"] - results[a]["pass@1"]) for a in arms]]
    ax.bar(range(len(arms)), means, yerr=errs, capsize=4, label="mean pass@1 (T=1), 95% CI")
    greedy = [100 * results[a].get("greedy_pass@1", float("nan")) for a in arms]
    ax.plot(range(len(arms)), greedy, "kx", label="greedy pass@1")
    ax.set_xticks(range(len(arms)), arms)
    ax.set_ylabel("held-out %")
    ax.set_title("held-out pass@1 per arm")
    ax.legend(fontsize=7)
    ax = axes[1]
    for name in ("grpo", "control"):
        if name in runs:
            rows = [r for r in runs[name].log_history if r.get("reward") is not None]
            ax.plot([r["step"] for r in rows], [r["reward"] for r in rows], marker=".", label=f"{name} reward")
            ax.plot([r["step"] for r in rows], [r.get("proof/ok_rate", 0) for r in rows], linestyle="--",
                    label=f"{name} OK rate")
    ax.set_xlabel("GRPO step")
    ax.set_title("training reward (true verdicts)")
    ax.legend(fontsize=7)
    ax = axes[2]
    if "grpo" in runs and runs["grpo"].curriculum:
        hist = runs["grpo"].curriculum
        for key in ("kept", "too_easy", "too_hard"):
            ax.plot([h["step"] for h in hist], [h[f"curriculum/{key}"] for h in hist], marker="o", label=key)
        ax.legend(fontsize=7)
    ax.set_xlabel("GRPO step")
    ax.set_title("curriculum: training tasks by p_hat")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_report(out: Path, args: argparse.Namespace, split: Mapping[str, Any], results: Mapping[str, Any],
                 deltas: Mapping[str, Any], runs: Mapping[str, Any], machine: Mapping[str, Any],
                 image: Path | None, greedy_deltas: Mapping[str, Any] | None = None,
                 vs_expert: Mapping[str, float] | None = None) -> Path:
    k = args.k
    greedy_deltas = greedy_deltas or {}
    lines = [f"# Learning curve: {args.model} on {args.suite} ({', '.join(args.category or ['P1'])})", "",
             verdict_text(deltas, vs_expert), "", "## Arms on the held-out split", "",
             f"| arm | mean pass@1 (T=1, k={k}) [95% CI] | pass@{k} | greedy pass@1 | Δ pass@1 vs sft [95% CI] "
             "| Δ greedy vs sft [95% CI] |",
             "|---|---|---|---|---|---|"]
    for arm in (a for a in ARMS if a in results):
        r = results[arm]
        ci = f"{_pct(r['pass@1'])} [{_pct(r['ci']['lo'])}, {_pct(r['ci']['hi'])}]"
        delta = _interval(deltas[arm]) if arm in deltas else "-"
        greedy_delta = _interval(greedy_deltas[arm]) if arm in greedy_deltas else "-"
        lines.append(f"| {arm} | {ci} | {_pct(r[f'pass@{k}'])} | {_pct(r.get('greedy_pass@1', float('nan')))} | "
                     f"{delta} | {greedy_delta} |")
    estimates = {arm: runs[arm].curriculum for arm in ("grpo", "control") if arm in runs and runs[arm].curriculum}
    if estimates:
        lines += ["", f"Training tasks, as the curriculum measured them ({args.curriculum_k} samples per training "
                  "task at each estimate; mean p̂ over all of them, and how many were kept, too easy, too hard):", "",
                  "| arm | step | mean p̂ | kept | too easy | too hard |", "|---|---|---|---|---|---|"]
        for arm, history in estimates.items():
            lines += [f"| {arm} | {h['step']} | {h['curriculum/mean_p_hat']:.3f} | {h['curriculum/kept']:.0f} | "
                      f"{h['curriculum/too_easy']:.0f} | {h['curriculum/too_hard']:.0f} |" for h in history]
    grpo_samples = args.grpo_steps * args.prompts_per_step * args.generations
    sft_length = f"{args.sft_steps} steps" if args.sft_steps else f"{args.sft_epochs:g} epoch(s)"
    lines += ["", "## Setup", "",
              f"- split: {split['train']} training and {split['heldout']} held-out tasks, whole twin groups "
              f"(seed {split['seed']}); twins across the split: {split['twins_across']}; `split.json`",
              f"- sft: {sft_length} on "
              f"reference proofs, lr {args.sft_lr}",
              f"- grpo / control: {args.grpo_steps} steps x {args.prompts_per_step} prompts x {args.generations} "
              f"completions ({grpo_samples} completions), constant lr {args.grpo_lr}, T={args.temperature}, "
              f"{args.completion_tokens} tokens; curriculum "
              + ("off" if args.no_curriculum else f"k={args.curriculum_k}, " + (
                  f"refreshed every {args.curriculum_refresh} steps" if args.curriculum_refresh
                  else "estimated once before training")) + "; control: rewards shuffled across each batch",
              f"- expert: {args.ei_rounds} round(s) x {args.ei_samples} samples per training task, lr {args.ei_lr}",
              f"- evaluation: {k} samples per held-out task at T=1 (mean pass@1, unbiased pass@{k})"
              + ("" if args.no_greedy else " and greedy") + f", {args.eval_max_tokens} tokens; paired bootstrap, "
              f"{args.bootstrap} resamples",
              f"- machine: {machine['cpus']} CPUs, load average {machine['load_before']} before and "
              f"{machine['load_after']} after; wall time {machine['wall_min']:.1f} min"]
    if "grpo" in runs:
        rows = [r for r in runs["grpo"].log_history if r.get("reward") is not None]
        if rows:
            lines += ["", "GRPO per step (reward, OK rate, zero-variance groups): " + ", ".join(
                f"{r['step']}: {r['reward']:.2f} / {100 * (r.get('proof/ok_rate') or 0):.0f}% / "
                f"{100 * (r.get('frac_reward_zero_std') or 0):.0f}%" for r in rows)]
    if image is not None:
        lines += ["", f"![learning curve]({image.name})"]
    path = out / "LEARNING.md"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def write_split(out: Path, args: argparse.Namespace) -> tuple[Path, Path, dict[str, Any]]:
    """The suite with ``metadata.split`` set (train/heldout), the held-out tasks alone, and the split's record."""
    import dataclasses

    from proofgym.envs.tasks.suites import load_tasks, resolve_suite, write_tasks

    tasks = load_tasks(resolve_suite(args.suite))
    cats = args.category or ["P1"]
    if "all" not in cats:
        tasks = [t for t in tasks if t.category in cats]
    if args.split:
        saved = json.loads(Path(args.split).read_text(encoding="utf-8"))
        held_ids = set(saved["heldout_ids"])
        train = [t for t in tasks if t.id not in held_ids]
        heldout = [t for t in tasks if t.id in held_ids]
    else:
        train, heldout = fixed_split(tasks, heldout_size=args.heldout_size, seed=args.split_seed)
    across = twins_across(train, heldout)
    held_ids = {t.id for t in heldout}
    labelled = [dataclasses.replace(t, metadata={**t.metadata, "split": "heldout" if t.id in held_ids else "train"})
                for t in tasks]
    suite = write_tasks(out / "split_suite.jsonl", labelled)
    held = write_tasks(out / "heldout.jsonl", [t for t in labelled if t.metadata["split"] == "heldout"])
    record = {"suite": args.suite, "categories": cats, "seed": args.split_seed, "train": len(train),
              "heldout": len(heldout), "twins_across": len(across), "twin_pairs": across[:20],
              "heldout_ids": [t.id for t in heldout], "train_ids": [t.id for t in train]}
    (out / "split.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return suite, held, record


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    start = time.monotonic()
    load_before = [round(x, 2) for x in os.getloadavg()]
    out = Path(args.out or Path("runs") / "learning_curve" / time.strftime("%Y%m%d-%H%M%S")).resolve()
    out.mkdir(parents=True, exist_ok=True)

    def say(text: str) -> None:
        print(f"\n=== [{time.monotonic() - start:6.0f} s] {text}", file=sys.stderr, flush=True)

    suite, heldout, split = write_split(out, args)
    say(f"split: {split['train']} train / {split['heldout']} held-out tasks, {split['twins_across']} twins across")
    runs: dict[str, Any] = {}
    checkpoints: dict[str, Path] = {}

    def arm(name: str, title: str, train: Any) -> None:
        done = finished_arm(out, name)
        if done is not None:
            say(f"{name}: reusing the finished run in {out / name}")
            runs[name] = done
        elif args.phase == "eval":
            raise SystemExit(f"--phase eval: arm {name!r} is not trained under {out}; run --phase train first")
        else:
            say(title)
            runs[name] = train()
        checkpoints[name] = Path(runs[name].final_checkpoint)

    arm("sft", "sft: the warm start", lambda: run_sft(args, suite, out))
    for name in ("grpo", "control"):
        if name in args.arms:
            arm(name, f"{name}: GRPO from the warm start" + (" with shuffled rewards" if name == "control" else ""),
                lambda control=name == "control": run_grpo(args, suite, out, checkpoints["sft"], control=control))
    if "expert" in args.arms:
        arm("expert", "expert: expert iteration from the warm start",
            lambda: run_expert(args, suite, out, checkpoints["sft"]))
    if args.phase == "train":
        say(f"trained: {', '.join(checkpoints)} (evaluate with --phase eval)")
        return 0
    results: dict[str, Any] = {}
    chosen = [a.strip() for a in args.eval_arms.split(",") if a.strip()] if args.eval_arms else list(checkpoints)
    for name, checkpoint in checkpoints.items():
        if name not in chosen:
            continue
        say(f"evaluating {name} on the held-out split")
        results[name] = evaluate_arm(args, heldout, checkpoint, out, name)
        zeros = dict.fromkeys(results[name]["per_task_pass@1"], 0.0)
        results[name]["ci"] = paired_bootstrap(results[name]["per_task_pass@1"], zeros, resamples=args.bootstrap,
                                               seed=args.seed)
    if "sft" not in results:
        say(f"evaluated: {', '.join(results)} (the report needs sft: rerun with it among --eval-arms)")
        return 0
    base = results["sft"]["per_task_pass@1"]
    deltas = {arm: paired_bootstrap(r["per_task_pass@1"], base, resamples=args.bootstrap, seed=args.seed)
              for arm, r in results.items() if arm != "sft"}
    greedy_deltas = {arm: paired_bootstrap(r["per_task_greedy"], results["sft"]["per_task_greedy"],
                                           resamples=args.bootstrap, seed=args.seed)
                     for arm, r in results.items() if arm != "sft" and "per_task_greedy" in r
                     and "per_task_greedy" in results["sft"]}
    vs_expert = (paired_bootstrap(results["grpo"]["per_task_pass@1"], results["expert"]["per_task_pass@1"],
                                  resamples=args.bootstrap, seed=args.seed)
                 if "grpo" in results and "expert" in results else None)
    machine = {"cpus": os.cpu_count(), "load_before": load_before,
               "load_after": [round(x, 2) for x in os.getloadavg()], "wall_min": (time.monotonic() - start) / 60}
    image = plot(results, runs, args.k, out / "learning_curve.png")
    report = write_report(out, args, split, results, deltas, runs, machine, image, greedy_deltas, vs_expert)
    (out / "learning_curve.json").write_text(json.dumps(
        {"args": vars(args), "split": {k: v for k, v in split.items() if not k.endswith("_ids")},
         "results": {a: {k: v for k, v in r.items() if k not in ("sampled", "greedy")} | {
             "sampled": {t: list(cn) for t, cn in r["sampled"].items()}} for a, r in results.items()},
         "deltas": deltas, "greedy_deltas": greedy_deltas, "grpo_vs_expert": vs_expert, "machine": machine,
         "logs": {a: run.log_history for a, run in runs.items()},
         "curriculum": runs["grpo"].curriculum if "grpo" in runs else []}, indent=2, default=str) + "\n",
        encoding="utf-8")
    print(report.read_text(encoding="utf-8"))
    print(f"written: {report}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
