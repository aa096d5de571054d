"""The SFT config: TRL's ``SFTConfig`` plus proofgym's fields, with CPU-friendly defaults.

Every field has help text (``proofgym train sft --help``); YAML files in ``configs/train/``
set them with ``--config``, and flags override the file (TRL's ``TrlParser``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from trl import SFTConfig

from proofgym.training.common import ProofgymArguments, agree_on_run_identity, proofgym_post_init


@dataclass
class ProofSFTConfig(ProofgymArguments, SFTConfig):
    """Supervised fine-tuning on a suite's reference proofs (prompt: statement and context; completion: proof).

    Defaults differ from TRL's where TRL's assume a GPU: ``bf16=False``,
    ``gradient_checkpointing=False``, ``use_cpu=True`` (a GPU config sets them back).
    ``output_dir`` defaults to ``runs/train/<run_name>`` and ``run_name`` to
    ``{suite}__sft__{model}__{seed}__{time}``.
    """

    algo: ClassVar[str] = "sft"

    output_dir: str | None = field(
        default=None, metadata={"help": "Where checkpoints, the final model and logs go (default: "
                                        "runs/train/<run_name>)."})
    run_name: str | None = field(
        default=None, metadata={"help": "Run name, also W&B's (default: {suite}__sft__{model}__{seed}__{time})."})
    report_to: None | str | list[str] = field(
        default="wandb", metadata={"help": "Where to log: wandb (offline unless configured), none, ..."})
    logging_steps: float = field(default=1, metadata={"help": "Log every N optimizer steps."})
    learning_rate: float = field(default=2e-5, metadata={"help": "Initial AdamW learning rate."})
    bf16: bool | None = field(
        default=False, metadata={"help": "bf16 mixed precision (GPU configs turn it on; off on CPU)."})
    gradient_checkpointing: bool = field(
        default=False, metadata={"help": "Recompute activations in the backward pass (saves GPU memory)."})
    use_cpu: bool = field(default=True, metadata={"help": "Train on CPU even when a GPU is present."})
    max_length: int | None = field(
        default=1024, metadata={"help": "Longest tokenized prompt + completion; longer examples are truncated."})

    def __post_init__(self) -> None:
        generated = proofgym_post_init(self, self.algo)
        super().__post_init__()
        agree_on_run_identity(self, generated)
