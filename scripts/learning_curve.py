"""Does GRPO with verifier rewards teach, or only sharpen? A resumable experiment with error bars.

    python scripts/learning_curve.py --run coq_p12b --split configs/learning/coq_p12b_split.json
    python scripts/learning_curve.py --run coq_p12b ... --report         # the report from finished arms only
    python scripts/learning_curve.py --smoke --out /tmp/lc               # every arm on a tiny model, ~2 min
    python scripts/learning_curve.py --relocate-results configs/learning/coq_p12b docs/results/learning/coq_p12b

The experiment is a list of *arms*. Each arm, when it ends, writes its per-task results, its exact
command and the git commit it ran at to ``docs/results/learning/<run>/<arm>.json`` (``--results``); a
rerun skips every arm whose file is there, so a killed run continues from the last finished arm. Paths in
an arm file (its command included) are relative to the repository root, so a result reads the same on any
machine. A run that an older version wrote under ``configs/learning/<run>/`` is still found there (read,
resumed, reported); ``--relocate-results OLD NEW`` moves its arm files and makes their paths relative.
Checkpoints and evaluation run dirs go under ``--work`` (not committed). For each SFT seed s and training
seed r:

Training arms and their validation sweeps run first; every held-out evaluation runs at the end.

1. ``sft-s<s>``: the SFT warm start on the split's training tasks (reference proofs).
2. ``sweep-sft-s<s>``: the warm start on the *validation* split at each temperature of --temperatures
   (default 0, 0.3, 0.6, 1.0): the temperature with the highest mean pass@1 there is its chosen one.
3. ``heldout-sft-s<s>``: the warm start on the held-out split at its chosen temperature, --k samples
   per task (pass@k curves for k = 1..--k). The held-out split is scored once per arm, at the end.
4. ``grpo-s<s>-r<r>``: GRPO from the warm start with the real verifier as reward, the pass-rate
   curriculum and a constant learning rate. Then ``sweep-grpo-…`` and ``heldout-grpo-…`` as for the
   warm start: GRPO is compared at its own best temperature.
5. ``shuffled-…``: the matched-scale control. The same GRPO run, with each group's rewards shuffled
   *within the group*: every group keeps its rewards, so its advantages keep their magnitudes (the
   same scale as GRPO's), but which completion earns which is random. It updates as much as GRPO
   without the verifier's direction.
6. ``permuted-…``: the old control, rewards shuffled across the batch (it changes each group's
   variance; in session 15 it broke the policy rather than standing still).
7. ``expert-…``: expert iteration from the warm start with the *same number of policy samples* as
   GRPO (its training completions plus its curriculum estimates), the baseline GRPO must beat.
8. ``coverage-…`` (only with ``--coverage-k K``): when an arm's chosen temperature is 0, its held-out
   score is one greedy reply per task and says nothing of coverage. A coverage arm samples K replies
   per held-out task (``--coverage-tasks N``: the same seeded N tasks for every arm, so arms pair by
   task) at the arm's best *sampling* temperature: the T > 0 with the highest validation pass@k at
   k = --sweep-k (ties: the lower T), read from its sweep. Its pass@k curve for k = 1..K answers
   "does the warm start catch up at large k?". It runs after every held-out arm.

Statistics: every Δ is paired by task against the warm start each run started from, with a
hierarchical bootstrap (training runs resampled, then held-out tasks), so the interval covers seed
variance as well as task and sampling noise; with one seed it covers tasks only, and the report
says so. Success is a GRPO Δ whose 95% interval lies above 0 against the warm start at its best
temperature, while the shuffled control's does not rise; a negative result is reported as one.
``--report`` writes ``<work>/LEARNING.md`` and ``<work>/learning_curve.png`` from the arm files.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from proofgym.training.compare import hierarchical_bootstrap  # the one bootstrap (proofgym compare)

ROOT = Path(__file__).resolve().parents[1]
ALGOS = ("grpo", "shuffled", "permuted", "expert")
DEFAULT_TEMPERATURES = (0.0, 0.3, 0.6, 1.0)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_argument_group("run, split and model")
    g.add_argument("--run", default="coq_p12", help="the run's name: arm files go to <results>/<run>/")
    g.add_argument("--results", help="where arm files go (committed; default docs/results/learning, or "
                   "configs/learning where an older run's arm files are)")
    g.add_argument("--work", help="checkpoints and eval run dirs (default runs/learning/<run>; not committed)")
    g.add_argument("--split", help="a split file (python -m proofgym.training.splits): train/validation/held-out ids")
    g.add_argument("--suite", help="the suite the split's ids come from (default: the split file's)")
    g.add_argument("--model", default="smollm2", help="policy to start from (default smollm2)")
    g.add_argument("--max-train-tasks", type=int, default=96, help="train on the split's first N training tasks")
    g.add_argument("--max-validation-tasks", type=int, default=0, help="at most N validation tasks (0: all)")
    g.add_argument("--max-heldout-tasks", type=int, default=0, help="at most N held-out tasks (0: all)")
    g.add_argument("--context-chars", type=int, default=200, help="task context shown in prompts (train and eval)")
    g = p.add_argument_group("arms and seeds")
    g.add_argument("--algos", default=",".join(ALGOS), help=f"trained arms besides the warm start ({','.join(ALGOS)})")
    g.add_argument("--sft-seeds", default="0", help="SFT warm-start seeds (comma-separated)")
    g.add_argument("--seeds", default="0", help="training seeds of each algorithm, per warm start (comma-separated)")
    g.add_argument("--only", help="run only arms whose names start with one of these (comma-separated)")
    g.add_argument("--report", action="store_true", help="run no arm: write the report from the finished ones")
    g.add_argument("--relocate-results", nargs=2, metavar=("OLD", "NEW"),
                   help="run nothing: move a run's arm files from folder OLD to folder NEW, their absolute paths "
                        "under this checkout (or --old-root) made relative to the repository root")
    g.add_argument("--old-root", action="append", default=[],
                   help="with --relocate-results: the repository root of the machine that wrote the arm files, "
                        "if not this checkout (repeatable)")
    g = p.add_argument_group("SFT warm start")
    g.add_argument("--sft-epochs", type=float, default=1.0, help="SFT epochs over the training tasks")
    g.add_argument("--sft-steps", type=int, default=0, help="SFT steps instead of epochs (0: use --sft-epochs)")
    g.add_argument("--sft-lr", type=float, default=1e-4, help="SFT learning rate")
    g = p.add_argument_group("GRPO (grpo, shuffled and permuted arms)")
    g.add_argument("--grpo-steps", type=int, default=24, help="GRPO optimizer steps")
    g.add_argument("--grpo-lr", type=float, default=2e-5, help="GRPO learning rate, constant (no decay to 0)")
    g.add_argument("--generations", type=int, default=4, help="completions per prompt (the GRPO group)")
    g.add_argument("--prompts-per-step", type=int, default=2, help="prompts per GRPO step")
    g.add_argument("--completion-tokens", type=int, default=96, help="tokens per GRPO completion")
    g.add_argument("--train-temperature", type=float, default=1.0, help="GRPO and expert sampling temperature")
    g.add_argument("--curriculum-k", type=int, default=4, help="samples per task in each curriculum estimate")
    g.add_argument("--curriculum-refresh", type=int, default=16, help="re-estimate p_hat every N steps")
    g.add_argument("--no-curriculum", action="store_true", help="GRPO on every training task")
    g = p.add_argument_group("expert iteration (expert arm)")
    g.add_argument("--ei-rounds", type=int, default=2, help="rounds of sample, keep verified, SFT")
    g.add_argument("--ei-lr", type=float, default=5e-5, help="SFT learning rate of each round")
    g = p.add_argument_group("evaluation and statistics")
    g.add_argument("--temperatures", default=",".join(map(str, DEFAULT_TEMPERATURES)),
                   help="temperatures swept on validation (default 0,0.3,0.6,1.0)")
    g.add_argument("--sweep-k", type=int, default=2, help="samples per validation task at each T > 0")
    g.add_argument("--k", type=int, default=16, help="samples per held-out task (pass@k curves for k=1..K)")
    g.add_argument("--eval-max-tokens", type=int, default=96, help="tokens per reply in evaluation")
    g.add_argument("--coverage-k", type=int, default=0,
                   help="add coverage-<arm> arms: K samples per held-out task at the arm's best T > 0 (0: none)")
    g.add_argument("--coverage-tasks", type=int, default=0,
                   help="coverage arms score a seeded sample of N held-out tasks, the same for every arm (0: all)")
    g.add_argument("--bootstrap", type=int, default=10000, help="bootstrap resamples")
    g = p.add_argument_group("machine")
    g.add_argument("--threads", type=int, default=1, help="torch CPU threads (1 on a shared machine)")
    g.add_argument("--workers", type=int, default=1, help="verifier worker processes")
    g.add_argument("--verifier-factory", help="module:callable verifier instead of the system's (tests: a fake)")
    g.add_argument("--smoke", action="store_true",
                   help="every arm on a tiny model and tests/data/tiny_suite.jsonl, 1-2 steps each (checks the "
                        "plumbing; its numbers mean nothing); needs --out")
    g.add_argument("--out", help="with --smoke: results and work both go here")
    args = p.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    if args.smoke:
        if not args.out:
            p.error("--smoke needs --out DIR")
        args.model, args.suite = "tiny", str(ROOT / "tests" / "data" / "tiny_suite.jsonl")
        args.results, args.work, args.run = str(Path(args.out) / "results"), str(Path(args.out) / "work"), "smoke"
        args.sft_steps, args.grpo_steps, args.generations, args.prompts_per_step = 2, 1, 2, 2
        args.completion_tokens, args.eval_max_tokens, args.k, args.sweep_k = 12, 12, 4, 2
        args.curriculum_k, args.curriculum_refresh, args.ei_rounds, args.bootstrap = 2, 0, 1, 200
    args.algos = [a for a in args.algos.split(",") if a]
    if set(args.algos) - set(ALGOS):
        p.error(f"--algos takes some of {', '.join(ALGOS)}")
    args.sft_seeds = [int(s) for s in str(args.sft_seeds).split(",") if s != ""]
    args.seeds = [int(s) for s in str(args.seeds).split(",") if s != ""]
    args.temperatures = [float(t) for t in str(args.temperatures).split(",") if t != ""]
    args.work = str(Path(args.work or ROOT / "runs" / "learning" / args.run).resolve())
    args.results = str(results_root(args.results, args.run))
    return args


RESULTS = ROOT / "docs" / "results" / "learning"
LEGACY_RESULTS = ROOT / "configs" / "learning"  # where arm files went before they held relative paths


def results_root(given: str | None, run: str) -> Path:
    """Where the run's arm files are: ``--results`` if given; else docs/results/learning, unless the run's arm
    files are only in configs/learning (an older run, not yet relocated): then there, so it resumes in place."""
    if given:
        return Path(given)
    if not any((RESULTS / run).glob("*.json")) and any((LEGACY_RESULTS / run).glob("*.json")):
        return LEGACY_RESULTS
    return RESULTS


# -- the split -------------------------------------------------------------------------------------------
def smoke_split(tasks: Sequence[Any]) -> dict[str, Any]:
    """The tiny suite's split for --smoke: two held-out, one validation, the rest training (P3 left out)."""
    ids = [t.id for t in tasks if t.category != "P3"]
    return {"suite": str(ROOT / "tests" / "data" / "tiny_suite.jsonl"), "heldout_ids": ids[:2],
            "validation_ids": ids[2:3], "train_ids": ids[3:]}


def load_split(args: argparse.Namespace) -> tuple[dict[str, list[Any]], Path]:
    """``{"train", "validation", "heldout"}`` tasks (each trimmed to its --max-*), and the suite file they are in.

    The suite file (``<work>/suite.jsonl``) holds the three sides with ``metadata.split`` set, which is what
    training's ``train_split``/``eval_split`` read.
    """
    import dataclasses

    from proofgym.envs.tasks.suites import write_tasks
    from proofgym.training.splits import load_suite_tasks

    if args.split:
        record = json.loads(Path(args.split).read_text(encoding="utf-8"))
        tasks = load_suite_tasks(args.suite or record["suite"])
    else:
        tasks = load_suite_tasks(args.suite)
        record = smoke_split(tasks)
    by_id = {t.id: t for t in tasks}
    missing = [i for key in ("train_ids", "validation_ids", "heldout_ids") for i in record[key] if i not in by_id]
    if missing:
        raise SystemExit(f"{len(missing)} split ids are not in the suite (first: {missing[0]}): another suite?")
    limits = {"train": args.max_train_tasks, "validation": args.max_validation_tasks,
              "heldout": args.max_heldout_tasks}
    sides = {}
    for side, limit in limits.items():
        ids = record[f"{side}_ids"]
        sides[side] = [dataclasses.replace(by_id[i], metadata={**by_id[i].metadata, "split": side})
                       for i in (ids[:limit] if limit else ids)]
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    suite = write_tasks(work / "suite.jsonl", [t for side in sides.values() for t in side])
    for side, side_tasks in sides.items():
        write_tasks(work / f"{side}.jsonl", side_tasks)
    return sides, suite


# -- arm files -------------------------------------------------------------------------------------------
def git_commit() -> dict[str, Any]:
    """The code version an arm ran at: the commit, and whether the tree had uncommitted changes."""
    def git(*cmd: str) -> str:
        try:
            return subprocess.run(["git", *cmd], cwd=ROOT, capture_output=True, text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    return {"commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}


def arm_path(args: argparse.Namespace, arm: str) -> Path:
    return Path(args.results) / args.run / f"{arm}.json"


def read_arm(args: argparse.Namespace, arm: str) -> dict[str, Any] | None:
    path = arm_path(args, arm)
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def write_arm(args: argparse.Namespace, arm: str, record: Mapping[str, Any], started: float) -> Path:
    """The arm's file: its results plus the exact command, the code version, and when it ran (written last)."""
    path = arm_path(args, arm)
    path.parent.mkdir(parents=True, exist_ok=True)
    full = {"arm": arm, **record, "command": "python scripts/learning_curve.py " + shlex.join(
                repo_relative_argv(args.argv)),
            "code": git_commit(), "seconds": round(time.monotonic() - started, 1),
            "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "load_average": list(os.getloadavg())}
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(full, indent=1, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)  # a killed run never leaves a half-written arm that a rerun would skip
    return path


def relative(path: Path | str, base: Path | str) -> str:
    """``path`` relative to ``base`` (arm files hold no absolute paths)."""
    return os.path.relpath(path, base)


def repo_relative(text: str, roots: Sequence[Path] = (ROOT,)) -> str:
    """``text`` with every absolute path under one of ``roots`` written relative to that root (in a command
    line too: ``--split /root/a.json`` and ``--x=/root/a``). Paths outside them are kept as they are."""
    for root in roots:
        text = text.replace(str(Path(root).resolve()).rstrip("/") + "/", "")
    return text


def repo_relative_argv(argv: Sequence[str], roots: Sequence[Path] = (ROOT,)) -> list[str]:
    """The command line with its paths relative to the repository root (the command is run from there)."""
    out = []
    for word in argv:
        path = Path(word)
        if path.is_absolute() and path.resolve() == Path(roots[0]).resolve():
            out.append(".")
            continue
        out.append(repo_relative(word, roots))
    return out


def _relativized(value: Any, roots: Sequence[Path]) -> Any:
    if isinstance(value, str):
        return repo_relative(value, roots)
    if isinstance(value, list):
        return [_relativized(v, roots) for v in value]
    if isinstance(value, dict):
        return {k: _relativized(v, roots) for k, v in value.items()}
    return value


def relocate_results(old: Path, new: Path, roots: Sequence[Path] = (ROOT,),
                     say: Callable[[str], None] = print) -> list[Path]:
    """Move a run's arm files from ``old`` to ``new`` with their paths relative to the repository root.

    The command's ``--results`` names the new place (so the recorded command resumes the run there) and the file
    says where it came from (``relocated_from``). Refuses to overwrite an arm file already at ``new``; a file is
    written there before the old one is removed, so an interrupted move is rerun safely.
    """
    files = sorted(p for p in old.glob("*.json") if not p.name.startswith("."))
    if not files:
        raise SystemExit(f"no arm files (*.json) in {old}: nothing to relocate")
    clash = [p.name for p in files if (new / p.name).exists()]
    if clash:
        raise SystemExit(f"{new} already holds {', '.join(clash)}: remove them or choose another folder")
    new.mkdir(parents=True, exist_ok=True)
    results = repo_relative(str(new.resolve().parent))  # absolute only where it is outside the repository
    moved = []
    for path in files:
        record = _relativized(json.loads(path.read_text(encoding="utf-8")), roots)
        if isinstance(record.get("command"), str):
            words = shlex.split(record["command"])
            for i, word in enumerate(words[:-1]):
                if word == "--results":
                    words[i + 1] = results
            record["command"] = shlex.join(words)
        record["relocated_from"] = repo_relative(str(path.resolve()))
        target = new / path.name
        tmp = target.with_name(f".{target.name}.tmp")
        tmp.write_text(json.dumps(record, indent=1, default=str) + "\n", encoding="utf-8")
        os.replace(tmp, target)
        path.unlink()
        moved.append(target)
        say(f"{path} -> {target}")
    if old.is_dir() and not any(old.iterdir()):
        old.rmdir()
    return moved


# -- training arms -----------------------------------------------------------------------------------------
def common(args: argparse.Namespace, suite: Path, out: Path, seed: int) -> dict[str, Any]:
    fields: dict[str, Any] = dict(suite=str(suite), output_dir=str(out), run_name=out.name, train_split="train",
                                  categories=None, prompt_context_chars=args.context_chars,
                                  torch_threads=args.threads, verifier_workers=args.workers,
                                  checkpoint_eval_at_end=False, checkpoint_eval_max_tokens=args.eval_max_tokens,
                                  report_to="none", save_strategy="no", seed=seed, logging_steps=1)
    if args.verifier_factory:
        fields["verifier_factory"] = args.verifier_factory
    return fields


def run_sft(args: argparse.Namespace, suite: Path, out: Path, seed: int) -> Any:
    from proofgym.training.sft import train_sft
    from proofgym.training.sft_config import ProofSFTConfig

    extra = {"max_steps": args.sft_steps} if args.sft_steps else {"num_train_epochs": args.sft_epochs}
    return train_sft(ProofSFTConfig(model_name_or_path=args.model, learning_rate=args.sft_lr,
                                    per_device_train_batch_size=4, max_length=512, **extra,
                                    **common(args, suite, out, seed)))


def run_grpo(args: argparse.Namespace, suite: Path, out: Path, start: Path, seed: int, algo: str) -> Any:
    from proofgym.training.grpo import train_grpo
    from proofgym.training.grpo_config import ProofGRPOConfig

    cfg = ProofGRPOConfig(
        model_name_or_path=str(start), max_steps=args.grpo_steps, learning_rate=args.grpo_lr,
        lr_scheduler_type="constant", warmup_steps=0, num_generations=args.generations,
        per_device_train_batch_size=args.generations * args.prompts_per_step,
        max_completion_length=args.completion_tokens, temperature=args.train_temperature,
        curriculum=not args.no_curriculum, curriculum_k=args.curriculum_k,
        curriculum_refresh_steps=args.curriculum_refresh, control_permute_rewards=algo != "grpo",
        control_within_groups=algo == "shuffled", **common(args, suite, out, seed))
    return train_grpo(cfg)


def grpo_samples(result: Any, args: argparse.Namespace, n_train: int) -> int:
    """Policy samples a GRPO run drew: its training completions plus every curriculum estimate."""
    completions = int(result.global_step) * args.prompts_per_step * args.generations
    estimates = len(result.curriculum or [])
    return completions + estimates * args.curriculum_k * n_train


def run_expert(args: argparse.Namespace, suite: Path, out: Path, start: Path, seed: int, per_task: int) -> Any:
    from proofgym.training.expert_iteration import train_expert_iteration
    from proofgym.training.expert_iteration_config import ProofExpertIterationConfig

    return train_expert_iteration(ProofExpertIterationConfig(
        model_name_or_path=str(start), rounds=args.ei_rounds, samples_per_task=per_task,
        sample_temperature=args.train_temperature, sample_max_tokens=args.completion_tokens, sample_batch_size=8,
        learning_rate=args.ei_lr, per_device_train_batch_size=4, max_length=512, **common(args, suite, out, seed)))


def train_record(result: Any, work: Path, **extra: Any) -> dict[str, Any]:
    losses = [r["loss"] for r in result.log_history if isinstance(r, dict) and "loss" in r]
    rows = [r for r in result.log_history if isinstance(r, dict) and r.get("reward") is not None]
    rounds = [{k.removeprefix("expert_iteration/"): v for k, v in r.items()} for r in result.log_history
              if isinstance(r, dict) and "expert_iteration/round" in r]  # expert iteration: what each round kept
    if rounds:
        extra = {"rounds": rounds, **extra}
    return {"kind": "train", "checkpoint": relative(result.final_checkpoint, work), "steps": result.global_step,
            "loss": losses, "interrupted": result.interrupted,
            "per_step": [{k: r.get(k) for k in ("step", "reward", "proof/ok_rate", "entropy",
                                                 "completions/mean_length", "frac_reward_zero_std")} for r in rows],
            "curriculum": [{k: v for k, v in h.items() if k != "p_hat"} for h in (getattr(result, "curriculum", None)
                                                                                  or [])], **extra}


# -- evaluation arms ---------------------------------------------------------------------------------------
def per_task(rows: Iterable[Mapping[str, Any]]) -> dict[str, tuple[int, int]]:
    """``{task_id: (OK, samples with a verdict)}`` from an evaluation's results (harness failures left out)."""
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for row in rows:
        if row.get("verdict") is None:
            continue
        counts[row["task_id"]][1] += 1
        counts[row["task_id"]][0] += row["verdict"] == "OK"
    return {t: (c, n) for t, (c, n) in counts.items()}


def evaluate_on(args: argparse.Namespace, tasks_file: Path, checkpoint: Path, out: Path, *, temperature: float,
                n: int) -> dict[str, list[int]]:
    """``n`` samples per task at ``temperature`` (one, greedy, at T=0), with the prompt the model was trained on."""
    from proofgym.training.evaluate import EvalConfig, evaluate, read_results

    n = 1 if temperature == 0 else n
    cfg = EvalConfig(suite=str(tasks_file), agent="local", model=str(checkpoint), max_tokens=args.eval_max_tokens,
                     workers=args.workers, device="cpu", threads=args.threads, seed=0, batch_size=8, k=1, n=n,
                     temperature=temperature, top_p=1.0, strategy_options={"context_chars": args.context_chars},
                     verifier=args.verifier_factory, out=str(out))
    _, paths = evaluate(cfg, progress=True)
    return {t: [c, m] for t, (c, m) in per_task(read_results(paths.results)).items()}


def arm_stats(sampled: Mapping[str, tuple[int, int]], greedy: Mapping[str, tuple[int, int]] | None, k: int
              ) -> dict[str, Any]:
    """Mean pass@1 (mean of c/n), unbiased pass@k (tasks with n >= k) and greedy pass@1 of one evaluation
    (scripts/main_job.py reports its checkpoints with it)."""
    from proofgym.training.eval_metrics import pass_at_k

    p1 = {t: c / n for t, (c, n) in sampled.items() if n}
    pk = [pass_at_k(n, c, k) for c, n in sampled.values() if n >= k]
    out: dict[str, Any] = {"pass@1": sum(p1.values()) / len(p1) if p1 else 0.0, f"pass@{k}": sum(pk) / len(pk)
                           if pk else 0.0, "tasks": len(p1), "per_task_pass@1": p1}
    if greedy is not None:
        g = {t: c / n for t, (c, n) in greedy.items() if n}
        out["greedy_pass@1"] = sum(g.values()) / len(g) if g else 0.0
        out["per_task_greedy"] = g
    return out


def mean_pass1(counts: Mapping[str, Sequence[int]]) -> float:
    rates = [c / n for c, n in counts.values() if n]
    return sum(rates) / len(rates) if rates else 0.0


def choose_temperature(by_t: Mapping[str, Mapping[str, Any]]) -> float:
    """The temperature with the highest validation mean pass@1 (ties: the lower one)."""
    return float(min(by_t, key=lambda t: (-by_t[t]["pass@1"], float(t))))


# -- statistics --------------------------------------------------------------------------------------------
def pass_at_k_curve(counts: Mapping[str, Sequence[int]], k_max: int) -> list[float]:
    """Mean unbiased pass@k over tasks, k = 1..k_max (tasks with fewer samples than k left out of that k). The
    curve stops at the last k some task has samples for (a greedy evaluation: k = 1 only), so the arm file holds
    no NaN (not JSON)."""
    from proofgym.training.eval_metrics import pass_at_k

    curve = []
    for k in range(1, k_max + 1):
        vals = [pass_at_k(n, c, k) for c, n in counts.values() if n >= k]
        if not vals:
            break
        curve.append(sum(vals) / len(vals))
    return curve


def task_scores(counts: Mapping[str, Sequence[int]], k: int = 1) -> dict[str, float]:
    """Per task unbiased pass@k (k=1: c/n)."""
    from proofgym.training.eval_metrics import pass_at_k

    return {t: pass_at_k(n, c, k) for t, (c, n) in counts.items() if n >= k}


# -- the plan ----------------------------------------------------------------------------------------------
def plan(args: argparse.Namespace) -> list[str]:
    """Every arm, in the order they run: training and validation sweeps first, the held-out split last (it is
    scored once, when every choice has been made on validation); an arm's inputs always come before it."""
    trained: list[str] = []
    for s in args.sft_seeds:
        trained.append(f"sft-s{s}")
        trained += [f"{algo}-s{s}-r{r}" for r in args.seeds for algo in args.algos]
    names = [name for arm in trained for name in (arm, f"sweep-{arm}")] + [f"heldout-{arm}" for arm in trained]
    if args.coverage_k:
        names += [f"coverage-{arm}" for arm in trained]
    if args.only:
        prefixes = tuple(p for p in args.only.split(",") if p)
        names = [n for n in names if n.startswith(prefixes)]
    return names


def checkpoint_of(args: argparse.Namespace, trained: str) -> Path:
    record = read_arm(args, trained)
    if record is None:
        raise SystemExit(f"arm {trained} has not finished: run it first")
    path = Path(args.work) / record["checkpoint"]
    if not (path / "config.json").is_file():
        raise SystemExit(f"{trained}'s checkpoint {path} is gone: remove {arm_path(args, trained)} to train it again")
    return path


def run_arm(args: argparse.Namespace, arm: str, sides: Mapping[str, list[Any]], suite: Path) -> dict[str, Any]:
    """Run one arm and return its record (the caller writes it)."""
    work = Path(args.work)
    if arm.startswith("sft-s"):
        seed = int(arm.removeprefix("sft-s"))
        result = run_sft(args, suite, work / arm, seed)
        return train_record(result, work, seed=seed, train_tasks=len(sides["train"]))
    if arm.startswith("sweep-"):
        trained = arm.removeprefix("sweep-")
        by_t = {}
        for t in args.temperatures:
            counts = evaluate_on(args, work / "validation.jsonl", checkpoint_of(args, trained),
                                 work / "eval" / f"{arm}-T{t:g}", temperature=t, n=args.sweep_k)
            by_t[f"{t:g}"] = {"pass@1": mean_pass1(counts), "per_task": counts}
        return {"kind": "sweep", "of": trained, "split": "validation", "temperatures": by_t,
                "chosen_temperature": choose_temperature(by_t)}
    if arm.startswith("heldout-"):
        trained = arm.removeprefix("heldout-")
        sweep = read_arm(args, f"sweep-{trained}")
        if sweep is None:
            raise SystemExit(f"sweep-{trained} has not finished: its temperature is chosen there")
        t = float(sweep["chosen_temperature"])
        counts = evaluate_on(args, work / "heldout.jsonl", checkpoint_of(args, trained), work / "eval" / arm,
                             temperature=t, n=args.k)
        return {"kind": "heldout", "of": trained, "split": "heldout", "temperature": t, "per_task": counts,
                "pass@1": mean_pass1(counts), "pass@k_curve": pass_at_k_curve(counts, args.k)}
    if arm.startswith("coverage-"):
        return run_coverage(args, arm.removeprefix("coverage-"), sides["heldout"])
    algo, s, r = arm.split("-")
    start = checkpoint_of(args, f"sft-{s}")
    seed = int(r.removeprefix("r"))
    if algo == "expert":
        grpo = read_arm(args, f"grpo-{s}-{r}")
        budget = grpo["policy_samples"] if grpo else planned_grpo_samples(args, len(sides["train"]))
        per_task_samples = max(1, round(budget / (args.ei_rounds * len(sides["train"]))))
        result = run_expert(args, suite, work / arm, start, seed, per_task_samples)
        return train_record(result, work, seed=seed, start=f"sft-{s}", samples_per_task=per_task_samples,
                            policy_samples=per_task_samples * args.ei_rounds * len(sides["train"]),
                            grpo_policy_samples=budget, budget_from="grpo arm" if grpo else "plan")
    result = run_grpo(args, suite, work / arm, start, seed, algo)
    return train_record(result, work, seed=seed, start=f"sft-{s}", algo=algo,
                        policy_samples=grpo_samples(result, args, len(sides["train"])))


def sampling_temperature(sweep: Mapping[str, Any], k: int) -> tuple[float, float]:
    """The T > 0 with the highest validation pass@k (k = the sweep's samples per task; ties: the lower T), and
    that pass@k: the temperature a coverage arm samples at, chosen on validation like every other choice."""
    scored = {}
    for t, rec in sweep["temperatures"].items():
        if float(t) > 0:
            scores = task_scores(rec["per_task"], k)
            scored[float(t)] = sum(scores.values()) / len(scores) if scores else 0.0
    if not scored:
        raise SystemExit(f"sweep-{sweep['of']} sampled at no T > 0: a coverage arm has no temperature to use")
    best = min(scored, key=lambda t: (-scored[t], t))
    return best, scored[best]


def coverage_tasks(heldout: Sequence[Any], n: int) -> list[Any]:
    """The held-out tasks coverage arms score: all, or a seeded sample of ``n`` in split order (the same tasks
    for every arm and every rerun, so coverage arms pair by task)."""
    import random

    if not n or n >= len(heldout):
        return list(heldout)
    keep = set(random.Random(0).sample(range(len(heldout)), n))
    return [t for i, t in enumerate(heldout) if i in keep]


def run_coverage(args: argparse.Namespace, trained: str, heldout: Sequence[Any]) -> dict[str, Any]:
    from proofgym.envs.tasks.suites import write_tasks

    sweep = read_arm(args, f"sweep-{trained}")
    if sweep is None:
        raise SystemExit(f"sweep-{trained} has not finished: the coverage temperature is chosen there")
    t, val = sampling_temperature(sweep, args.sweep_k)
    tasks = coverage_tasks(heldout, args.coverage_tasks)
    work = Path(args.work)
    tasks_file = write_tasks(work / f"coverage-{len(tasks)}.jsonl", tasks)
    counts = evaluate_on(args, tasks_file, checkpoint_of(args, trained), work / "eval" / f"coverage-{trained}",
                         temperature=t, n=args.coverage_k)
    return {"kind": "coverage", "of": trained, "split": "heldout", "temperature": t,
            "chosen_by": f"validation pass@{args.sweep_k} {val:.4f}, best of T > 0 (ties: the lower T)",
            "heldout_tasks": len(heldout), "per_task": counts, "pass@1": mean_pass1(counts),
            "pass@k_curve": pass_at_k_curve(counts, args.coverage_k)}


def planned_grpo_samples(args: argparse.Namespace, n_train: int) -> int:
    """GRPO's policy samples as planned (before a GRPO arm has run): completions plus curriculum estimates."""
    estimates = 0 if args.no_curriculum else 1 + (
        (args.grpo_steps - 1) // args.curriculum_refresh if args.curriculum_refresh else 0)
    return args.grpo_steps * args.prompts_per_step * args.generations + estimates * args.curriculum_k * n_train


# -- the report --------------------------------------------------------------------------------------------
def _pct(x: float) -> str:
    return "-" if x != x else f"{100 * x:.1f}%"


def _interval(d: Mapping[str, float]) -> str:
    return f"{100 * d['delta']:+.1f} pp [{100 * d['lo']:+.1f}, {100 * d['hi']:+.1f}]"


def collect(args: argparse.Namespace) -> dict[str, Any]:
    """Every finished arm of the run, by name."""
    folder = Path(args.results) / args.run
    return {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in sorted(folder.glob("*.json"))}


def comparisons(arms: Mapping[str, Any], k: int, resamples: int, *, kind: str = "heldout") -> dict[str, Any]:
    """Per algorithm: Δ pass@1 and Δ pass@k against the warm start each run came from (held-out, chosen T's;
    ``kind="coverage"``: the coverage arms, each at its best sampling temperature)."""
    out: dict[str, Any] = {}
    for algo in ALGOS:
        pairs1, pairsk = [], []
        for name, rec in arms.items():
            if not name.startswith(f"{kind}-{algo}-"):
                continue
            start = arms.get(rec["of"], {}).get("start")
            base = arms.get(f"{kind}-{start}") if start else None
            if base is None:
                continue
            pairs1.append((task_scores(rec["per_task"]), task_scores(base["per_task"])))
            if all(n >= k for _, n in rec["per_task"].values()) and all(n >= k for _, n in base["per_task"].values()):
                pairsk.append((task_scores(rec["per_task"], k), task_scores(base["per_task"], k)))
        if pairs1:
            out[algo] = {"pass@1": hierarchical_bootstrap(pairs1, resamples=resamples),
                         f"pass@{k}": hierarchical_bootstrap(pairsk, resamples=resamples) if pairsk else None}
    return out


def head_to_head(arms: Mapping[str, Any], algo: str, other: str, k: int, resamples: int, *,
                 kind: str = "heldout") -> dict[str, float] | None:
    """Δ pass@k of ``algo`` against ``other``, each run paired with the other's run of the same SFT and training
    seed (GRPO seed 0 against the control seed 0: the same warm start, curriculum and batches), by task."""
    pairs = []
    for name, rec in sorted(arms.items()):
        if not name.startswith(f"{kind}-{algo}-"):
            continue
        twin = arms.get(name.replace(f"{kind}-{algo}-", f"{kind}-{other}-", 1))
        if twin is None:
            continue
        mine, theirs = task_scores(rec["per_task"], k), task_scores(twin["per_task"], k)
        if len(mine) == len(rec["per_task"]) and len(theirs) == len(twin["per_task"]):  # every task has k samples
            pairs.append((mine, theirs))
    return hierarchical_bootstrap(pairs, resamples=resamples) if pairs else None


def first_sentence(arms: Mapping[str, Any], deltas: Mapping[str, Any], k: int,
                   coverage: tuple[int, Mapping[str, Any]] | None = None) -> str:
    """What was shown, in one sentence: the claim the report may make and no more. ``coverage`` is (K, the
    coverage arms' deltas): when the held-out arms were scored greedily (no pass@k), coverage's pass@K is what
    tells sharpening from more tasks solved."""
    bases = [n for n in arms if n.startswith("heldout-sft-")]
    if not bases:
        return "Not yet shown: no warm start has been scored on the held-out split."
    if "grpo" not in deltas:
        return (f"Not yet shown: the warm start is scored ({len(bases)} SFT seed(s)), but no GRPO run has finished, "
                "so whether GRPO teaches or only sharpens is not measured yet.")
    g = deltas["grpo"]["pass@1"]
    seeds = f"{g['runs']} training seed(s), {g['tasks']} held-out tasks"
    gk, label = deltas["grpo"].get(f"pass@{k}"), f"pass@{k}"
    if gk is None and coverage is not None and coverage[1].get("grpo", {}).get(f"pass@{coverage[0]}"):
        kc, cov = coverage
        gk = cov["grpo"][f"pass@{kc}"]
        label = f"pass@{kc} at each arm's best T > 0 ({gk['runs']} run(s), {gk['tasks']} tasks)"
    if g["lo"] <= 0:
        return (f"No gain shown: GRPO against the warm start at its best validation temperature, Δ mean pass@1 "
                f"{_interval(g)} ({seeds})" + (f"; {label} {_interval(gk)}." if gk else "."))
    if gk is not None and gk["lo"] <= 0:
        return (f"Only sharpening shown: GRPO raised mean pass@1 by {_interval(g)} over the warm start at its best "
                f"validation temperature ({seeds}), but not {label} ({_interval(gk)}): no more tasks are solved.")
    return (f"GRPO raised held-out mean pass@1 by {_interval(g)} over the warm start at its best validation "
            f"temperature ({seeds})" + (f", and {label} by {_interval(gk)}." if gk else "."))


def write_report(args: argparse.Namespace) -> Path:
    arms = collect(args)
    deltas = comparisons(arms, args.k, args.bootstrap)
    coverage = {n: r for n, r in arms.items() if r.get("kind") == "coverage"}
    kc = min((len(r["pass@k_curve"]) for r in coverage.values()), default=0)
    covered = (kc, comparisons(arms, kc, args.bootstrap, kind="coverage")) if kc else None
    lines = [f"# Learning curve `{args.run}`", "", first_sentence(arms, deltas, args.k, covered), "",
             "| arm | chosen T (validation) | held-out mean pass@1 | pass@k curve (k=1,2,4,8,16) | tasks |",
             "|---|---|---|---|---|"]
    for rec in arms.values():
        if rec.get("kind") != "heldout":
            continue
        curve = rec.get("pass@k_curve") or []
        picks = ", ".join(_pct(curve[k - 1]) for k in (1, 2, 4, 8, 16) if k <= len(curve)
                          and curve[k - 1] == curve[k - 1])  # older arm files pad a greedy curve with NaN
        lines.append(f"| {rec['of']} | {rec['temperature']:g} | {_pct(rec['pass@1'])} | {picks} | "
                     f"{len(rec['per_task'])} |")
    if covered:
        lines += ["", f"Coverage (held-out, {len(next(iter(coverage.values()))['per_task'])} tasks, each arm at its "
                  f"best validation T > 0):", "", "| arm | T | pass@k (k=1,2,4,8,16) | tasks solved at all |",
                  "|---|---|---|---|"]
        for rec in coverage.values():
            picks = ", ".join(_pct(rec["pass@k_curve"][k - 1]) for k in (1, 2, 4, 8, 16)
                              if k <= len(rec["pass@k_curve"]))
            solved = sum(1 for c, _ in rec["per_task"].values() if c)
            lines.append(f"| {rec['of']} | {rec['temperature']:g} | {picks} | {solved} |")
        for algo, d in covered[1].items():
            dk = d.get(f"pass@{kc}")
            lines.append(f"- coverage, {algo} against its warm start: pass@1 {_interval(d['pass@1'])}"
                         + (f"; pass@{kc} {_interval(dk)}" if dk else "") + f" ({d['pass@1']['runs']} run(s))")
    lines += ["", "Validation sweeps (mean pass@1 per temperature):", ""]
    for rec in arms.values():
        if rec.get("kind") == "sweep":
            temps = ", ".join(f"T={t}: {_pct(v['pass@1'])} ({len(v['per_task'])} tasks)"
                              for t, v in rec["temperatures"].items())
            lines.append(f"- {rec['of']}: {temps}; chosen T={rec['chosen_temperature']:g}")
    if deltas:
        lines += ["", "Δ against the warm start each run came from (hierarchical bootstrap over runs and tasks):", ""]
        for algo, d in deltas.items():
            dk = d.get(f"pass@{args.k}")
            lines.append(f"- {algo}: pass@1 {_interval(d['pass@1'])} ({d['pass@1']['runs']} run(s))"
                         + (f"; pass@{args.k} {_interval(dk)}" if dk else ""))
    rivals = [(a, b) for a in ("grpo",) for b in ALGOS if b != a]
    duels = [(f"{a} against {b}, pass@1", head_to_head(arms, a, b, 1, args.bootstrap)) for a, b in rivals]
    if covered:
        duels += [(f"{a} against {b}, coverage pass@{covered[0]}",
                   head_to_head(arms, a, b, covered[0], args.bootstrap, kind="coverage")) for a, b in rivals]
    if any(d for _, d in duels):
        lines += ["", "Head to head (each run paired with the other algorithm's run of the same seeds, by task):", ""]
        lines += [f"- {what}: {_interval(d)} ({d['runs']} run pair(s), {d['tasks']} tasks)" for what, d in duels if d]
    lines += ["", "Arms finished: " + ", ".join(f"{n} ({arms[n].get('seconds', 0) / 60:.0f} min)" for n in arms)]
    out = Path(args.work) / "LEARNING.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    plot(arms, Path(args.work) / "learning_curve.png")
    return out


def task_interval(per_task: Mapping[str, Any], *, resamples: int = 2000, seed: int = 0) -> tuple[float, float]:
    """A 95% bootstrap interval (over tasks, seeded: the same every time) of an arm's mean pass@1."""
    rates = {task: ok / n for task, (ok, n) in per_task.items() if n}
    if not rates:
        return (0.0, 0.0)
    # the one bootstrap (proofgym compare), against a base that solves nothing: the interval of the mean itself
    out = hierarchical_bootstrap([(rates, dict.fromkeys(rates, 0.0))], resamples=resamples, seed=seed)
    return out["lo"], out["hi"]


def _plot_pass1_bars(ax: Any, held: Mapping[str, Any]) -> None:
    """Greedy arms have one point each (k=1): a bar per arm with its interval over tasks reads better than dots."""
    names = sorted(held, key=lambda n: held[n]["pass@1"])
    values = [100 * held[n]["pass@1"] for n in names]
    lows, highs = zip(*(task_interval(held[n]["per_task"]) for n in names), strict=True)
    errors = [[v - 100 * lo for v, lo in zip(values, lows, strict=True)],
              [100 * hi - v for v, hi in zip(values, highs, strict=True)]]
    ax.barh(range(len(names)), values, xerr=errors, color="tab:blue", alpha=0.7, capsize=3)
    ax.set_yticks(range(len(names)), [f"{held[n]['of']} (T={held[n]['temperature']:g})" for n in names],
                  fontsize=8)
    ax.set_xlabel("held-out pass@1 % (95% interval over tasks)")
    ax.set_title("held-out pass@1 at each arm's chosen temperature")


def _plot_coverage(ax: Any, coverage: Mapping[str, Any]) -> None:
    """pass@k against k (log scale) for each coverage arm: does the warm start catch up at large k?"""
    for rec in coverage.values():
        curve = rec["pass@k_curve"]
        ax.plot(range(1, len(curve) + 1), [100 * c for c in curve], marker=".",
                label=f"{rec['of']} (T={rec['temperature']:g})")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("k (samples per task)")
    ax.set_ylabel("held-out pass@k %")
    ax.set_title(f"coverage on {len(next(iter(coverage.values()))['per_task'])} held-out tasks")


def plot(arms: Mapping[str, Any], path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    held = {n: r for n, r in arms.items() if r.get("kind") == "heldout" and r.get("pass@k_curve")}
    sweeps = {n: r for n, r in arms.items() if r.get("kind") == "sweep"}
    coverage = {n: r for n, r in arms.items() if r.get("kind") == "coverage" and r.get("pass@k_curve")}
    if not held and not sweeps and not coverage:
        return None
    fig, axes = plt.subplots(1, 3 if coverage else 2, figsize=(16 if coverage else 11, 3.8))
    if coverage:
        _plot_coverage(axes[2], coverage)
    if held and all(sum(c is not None and c == c for c in rec["pass@k_curve"]) == 1 for rec in held.values()):  # NaN != NaN
        _plot_pass1_bars(axes[0], held)
    else:
        for rec in held.values():
            curve = rec["pass@k_curve"]
            axes[0].plot(range(1, len(curve) + 1), [100 * c for c in curve], marker=".",
                         label=f"{rec['of']} (T={rec['temperature']:g})")
        axes[0].set_xlabel("k")
        axes[0].set_ylabel("held-out pass@k %")
        axes[0].set_title("pass@k at each arm's chosen temperature")
    for rec in sweeps.values():
        ts = sorted(rec["temperatures"], key=float)
        axes[1].plot([float(t) for t in ts], [100 * rec["temperatures"][t]["pass@1"] for t in ts], marker="o",
                     label=rec["of"])
    axes[1].set_xlabel("temperature")
    axes[1].set_ylabel("validation mean pass@1 %")
    axes[1].set_title("temperature sweep (validation)")
    for ax in axes:
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# -- main --------------------------------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None, *, say: Callable[[str], None] | None = None) -> int:
    args = parse_args(argv)
    start = time.monotonic()

    def announce(text: str) -> None:
        print(f"\n=== [{time.monotonic() - start:6.0f} s] {text}", file=sys.stderr, flush=True)

    say = say or announce
    if args.relocate_results:
        old, new = (Path(p) for p in args.relocate_results)
        roots = [Path(r) for r in args.old_root] or [ROOT]
        say(f"relocated {len(relocate_results(old, new, roots, say=say))} arm file(s) to {new}")
        return 0
    if args.report:
        say(f"report: {write_report(args)}")
        return 0
    sides, suite = load_split(args)
    say(f"split: {len(sides['train'])} train / {len(sides['validation'])} validation / {len(sides['heldout'])} "
        f"held-out tasks")
    for arm in plan(args):
        if read_arm(args, arm) is not None:
            say(f"{arm}: finished before ({arm_path(args, arm)}); skipped")
            continue
        say(f"{arm}: running")
        began = time.monotonic()
        record = run_arm(args, arm, sides, suite)
        say(f"{arm}: done, {write_arm(args, arm, record, began)}")
    say(f"report: {write_report(args)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
