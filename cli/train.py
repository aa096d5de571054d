"""`proofgym train`: SFT, GRPO or expert iteration with TRL (the work is in proofgym.training.cli)."""

from __future__ import annotations

import argparse
from typing import Any

EPILOG_TRAIN = """\
Every field of the config (TRL's SFTConfig/GRPOConfig plus proofgym's) can be set in the
YAML file or as a flag; flags override the file. `proofgym train grpo --help` lists them.

examples:
  proofgym train grpo --config configs/train/grpo_cpu.yaml
  proofgym train grpo --config configs/train/grpo_cpu.yaml --max_steps 10 --model_name_or_path ./ckpt
  proofgym train sft --config configs/train/sft_cpu.yaml --report_to none
  proofgym train grpo --config configs/train/grpo_cpu.yaml --curriculum true --curriculum_k 4
  proofgym train expert-iteration --config configs/train/expert_iteration_cpu.yaml --model_name_or_path ./sft-ckpt
  accelerate launch --config_file configs/accelerate/single_gpu.yaml -m proofgym.training.grpo \\
      --config configs/train/grpo_gpu.yaml
"""


def run(args: argparse.Namespace) -> int:
    from proofgym.training.cli import run

    return run(args.algo, args.args)


def add_parser(sub: Any) -> None:
    p = sub.add_parser("train", help="train a policy with TRL: SFT on reference proofs, GRPO with verifier rewards, "
                                     "expert iteration",
                       epilog=EPILOG_TRAIN, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("algo", choices=["sft", "grpo", "expert-iteration"], help="sft, grpo or expert-iteration")
    p.add_argument("args", nargs=argparse.REMAINDER, help="--config FILE.yaml and --field value overrides")
    p.set_defaults(func=run)

