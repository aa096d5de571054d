"""Running one training algorithm as a command: help from the config sources, exit codes, the summary.

A leaf of ``proofgym.training``: it imports no algorithm module, so ``proofgym train`` (:mod:`.cli`)
and each algorithm's ``python -m proofgym.training.grpo`` entry (what ``accelerate launch -m`` runs)
both use it without importing each other. Exit codes follow ``proofgym``'s: 0 done, 2 bad input
(config, model, suite, split), 3 a verifier that cannot run, 130 interrupted (a checkpoint was saved).
"""

from __future__ import annotations

import ast
import sys
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from proofgym.envs.errors import DependencyNotInstalled, ProofgymError, VerifierError

ALGOS = ("sft", "grpo", "expert-iteration")

# (file, class) of each algorithm's config, most specific first; the fields proofgym adds to TRL's config.
_OWN_FIELDS = {
    "sft": [("sft_config.py", "ProofSFTConfig"), ("common.py", "ProofgymArguments")],
    "grpo": [("grpo_config.py", "ProofGRPOConfig"), ("common.py", "ProofgymArguments")],
    "expert-iteration": [("expert_iteration_config.py", "ProofExpertIterationConfig"),
                         ("sft_config.py", "ProofSFTConfig"), ("common.py", "ProofgymArguments")],
}
_TRL_CONFIG = {"sft": "SFTConfig", "grpo": "GRPOConfig", "expert-iteration": "SFTConfig"}


def die(code: int, message: str) -> int:
    print(f"proofgym: error: {message}", file=sys.stderr)
    return code


def own_fields(algo: str) -> list[tuple[str, str, str]]:
    """``(name, default, help)`` of the fields proofgym adds to TRL's config for ``algo``, read from the
    config modules' source: listing them imports neither torch nor TRL, so ``--help`` answers at once."""
    fields: dict[str, tuple[str, str, str]] = {}
    for filename, cls in _OWN_FIELDS[algo]:
        tree = ast.parse((Path(__file__).parent / filename).read_text(encoding="utf-8"))
        node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
        for stmt in node.body:
            if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)) or stmt.value is None:
                continue
            name, default, help_text = stmt.target.id, ast.unparse(stmt.value), ""
            if name.startswith("_") or "ClassVar" in ast.unparse(stmt.annotation):
                continue
            if isinstance(stmt.value, ast.Call) and getattr(stmt.value.func, "id", "") == "field":
                for kw in stmt.value.keywords:
                    if kw.arg == "default":
                        default = ast.unparse(kw.value)
                    elif kw.arg == "default_factory":
                        default = ast.unparse(kw.value) + "()"
                    elif kw.arg == "metadata" and isinstance(kw.value, ast.Dict):
                        for key, value in zip(kw.value.keys, kw.value.values, strict=True):
                            if isinstance(key, ast.Constant) and key.value == "help":
                                help_text = ast.literal_eval(value)
            fields.setdefault(name, (name, default, help_text))  # the most specific class's default wins
    return sorted(fields.values())


def print_help(algo: str) -> None:
    """proofgym's own fields first, each with its help; then where TRL's are."""
    print(f"usage: proofgym train {algo} [--config FILE.yaml] [--FIELD VALUE ...]\n\n"
          f"A config is TRL's {_TRL_CONFIG[algo]} plus the proofgym fields below; YAML in configs/train/ sets them,\n"
          f"flags override the file. Examples:\n"
          f"  proofgym train {algo} --config configs/train/{algo.replace('-', '_')}_cpu.yaml\n"
          f"  proofgym train {algo} --config configs/train/{algo.replace('-', '_')}_cpu.yaml --max_steps 20 "
          f"--report_to none\n\nproofgym's fields:")
    for name, default, help_text in own_fields(algo):
        print(f"  --{name} (default {default})")
        for line in textwrap.wrap(help_text, 96):
            print(f"      {line}")
    print(f"\nTRL's {_TRL_CONFIG[algo]} fields (learning_rate, max_steps, per_device_train_batch_size, "
          f"gradient_accumulation_steps, bf16, report_to, ...) are taken as they are: "
          f"`proofgym train {algo} --help-all` lists all of them with TRL's help (slow: it imports TRL).")


def run_main(algo: str, main: Callable[[list[str]], Any], argv: Sequence[str]) -> int:
    """``main(argv)`` (an algorithm's ``main``) with ``--help`` answered first, errors as one line and an exit code,
    and :func:`print_result` at the end."""
    if any(a in ("-h", "--help") for a in argv):
        print_help(algo)
        return 0
    argv = ["--help" if a == "--help-all" else a for a in argv]
    try:
        result = main(list(argv))
    except KeyboardInterrupt:
        return 130
    except DependencyNotInstalled as exc:
        return die(2, str(exc))
    except VerifierError as exc:
        return die(3, f"{exc} (run `proofgym doctor`)")
    except ProofgymError as exc:
        return die(2, str(exc))
    print_result(result)
    return 130 if result.interrupted else 0


def print_result(result) -> None:  # noqa: ANN001 - TrainResult, imported lazily
    """Where the run went, its last logged metrics, and the checkpoint evaluations."""
    print(f"run {result.run_name}: {result.global_step} steps{' (interrupted)' if result.interrupted else ''}")
    print(f"final model: {result.final_checkpoint}  (proofgym eval --agent local --model {result.final_checkpoint})")
    for row in result.log_history:
        if "expert_iteration/round" in row:
            print(f"  round {row['expert_iteration/round']}: pass rate {100 * row['expert_iteration/pass_rate']:.1f}%, "
                  f"{row['expert_iteration/solved_tasks']} task(s) solved, {row['expert_iteration/kept_proofs']} new "
                  f"verified proof(s), fine-tuned on {row['expert_iteration/train_proofs']}")
    for record in result.checkpoint_evals:
        if "per_category" not in record:
            print(f"  step {record['step']}: evaluation failed: {record.get('error')}")
            continue
        cats = ", ".join(f"{cat} {100 * stats.get('pass@1', 0.0):.1f}% of {stats.get('n', 0)}"
                         for cat, stats in record["per_category"].items())
        print(f"  held-out pass@1 at step {record['step']}: {cats}")
    if result.wandb_dir:
        print(f"W&B run: {result.wandb_dir}  (upload with: wandb sync {result.wandb_dir})")
