"""``proofgym train sft|grpo|expert-iteration``: run a training config, with one-line errors and a summary at the end.

Exit codes follow ``proofgym``'s: 0 done, 2 bad input (config, model, suite, split),
3 a verifier that cannot run, 130 interrupted (a checkpoint was saved).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

ALGOS = ("sft", "grpo", "expert-iteration")


def _die(code: int, message: str) -> int:
    print(f"proofgym: error: {message}", file=sys.stderr)
    return code


def run(algo: str, argv: Sequence[str]) -> int:
    """Parse ``argv`` (``--config FILE.yaml`` and ``--field value`` flags) and train; the exit code."""
    from proofgym.envs.errors import DependencyNotInstalled, ProofgymError, VerifierError

    if algo not in ALGOS:
        return _die(2, f"unknown training algorithm {algo!r}; use {', '.join(ALGOS)}")
    try:
        if algo == "sft":
            from proofgym.training.sft import main
        elif algo == "expert-iteration":
            from proofgym.training.expert_iteration import main
        else:
            from proofgym.training.grpo import main
    except ImportError as exc:
        return _die(2, f"training needs the train extra: pip install 'proofgym[train]' ({exc})")
    try:
        result = main(list(argv))
    except KeyboardInterrupt:
        return 130
    except DependencyNotInstalled as exc:
        return _die(2, str(exc))
    except VerifierError as exc:
        return _die(3, f"{exc} (run `proofgym doctor`)")
    except ProofgymError as exc:
        return _die(2, str(exc))
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


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print("usage: proofgym train {sft,grpo,expert-iteration} [--config FILE.yaml] [--field value ...]\n"
              "  proofgym train grpo --help   lists every field with its help text")
        return 0 if args else 2
    return run(args[0], args[1:])


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
