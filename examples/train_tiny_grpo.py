"""Quick start 3: GRPO with the real Coq verifier as the reward, on a tiny model, in a few minutes on a CPU.

    python examples/train_tiny_grpo.py [OUTPUT_DIR]

The config is the one ``proofgym train grpo --config F.yaml`` reads (``ProofGRPOConfig``: TRL's
``GRPOConfig`` plus the suite, the verifier pool, the curriculum and checkpoint evaluation). Each
completion is checked by Coq in a warm worker; its verdict is the reward (OK 1, CHEATING -1, else 0) and
a verifier that breaks gives no reward (``None``), never 0. The tiny model is built locally, at random:
an SFT warm start on the training tasks' reference proofs comes first (from p = 0 no GRPO group has a
reward to compare), so GRPO's groups meet proofs that Coq accepts. A run this small shows the plumbing,
not learning (``configs/train/grpo_cpu.yaml`` and docs/training.md are a run that can). Needs the
``train`` extra and ``coqc``.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Sequence

from proofgym.training.grpo import train_grpo
from proofgym.training.grpo_config import ProofGRPOConfig


def main(argv: Sequence[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        cfg = ProofGRPOConfig(
            model_name_or_path="tiny",        # or a checkpoint dir, a hub id, "smollm2"
            suite="coq-tiny",                 # ships with proofgym; "coq-stdlib" once built
            output_dir=argv[0] if argv else f"{tmp}/run",
            warm_start_sft_steps=150, warm_start_sft_learning_rate=3e-3,
            max_steps=2, per_device_train_batch_size=8, num_generations=4, max_completion_length=48,
            temperature=1.0, learning_rate=1e-4, verifier_workers=1, torch_threads=1, seed=0,
            report_to="none", save_strategy="no", checkpoint_eval_at_end=False)
        result = train_grpo(cfg)
        for row in result.log_history:
            if "reward" in row:
                print(f"step {row['step']}: mean reward {row['reward']:.2f}, OK rate {row['proof/ok_rate']:.2f}, "
                      f"groups with a reward to compare {1 - row['frac_reward_zero_std']:.0%}")
        samples = result.reward_totals.pop("samples")
        print(f"verdicts of the {samples} completions: {dict(sorted(result.reward_totals.items()))}")
        print(f"trained {result.global_step} steps; the model is saved in {cfg.output_dir}")


if __name__ == "__main__":
    main(sys.argv[1:])
