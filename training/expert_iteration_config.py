"""The expert-iteration config: the SFT config plus the sampling rounds, with CPU-friendly defaults.

Every field has help text (``proofgym train expert-iteration --help``); YAML files in
``configs/train/`` set them with ``--config``, and flags override the file (TRL's ``TrlParser``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from proofgym.training.sft_config import ProofSFTConfig


@dataclass
class ProofExpertIterationConfig(ProofSFTConfig):
    """Expert iteration: sample k proofs per training task, keep the verified ones, SFT on them, repeat.

    The SFT fields (``learning_rate``, ``num_train_epochs``, ``per_device_train_batch_size``...)
    apply to each round's fine-tuning. ``output_dir`` defaults to ``runs/train/<run_name>`` and
    ``run_name`` to ``{suite}__expert-iteration__{model}__{seed}__{time}``.
    """

    algo: ClassVar[str] = "expert-iteration"

    rounds: int = field(default=3, metadata={"help": "Rounds of sample -> keep verified proofs -> SFT."})
    samples_per_task: int = field(
        default=8, metadata={"help": "Attempts sampled per training task in each round (k)."})
    sample_temperature: float = field(
        default=1.0, metadata={"help": "Sampling temperature of the attempts (> 0: expert iteration needs variety)."})
    sample_top_p: float = field(default=1.0, metadata={"help": "Nucleus sampling of the attempts (1: off)."})
    sample_max_tokens: int = field(default=256, metadata={"help": "Tokens per sampled attempt."})
    sample_batch_size: int = field(default=16, metadata={"help": "Prompts generated together while sampling."})
    max_proofs_per_task: int = field(
        default=4, metadata={"help": "Distinct verified proofs kept per task (the first found); 0: all."})
    accumulate: bool = field(
        default=True, metadata={"help": "Fine-tune each round on every proof verified so far (as DeepSeek-Prover "
                                        "and Goedel-Prover do); false: only on this round's."})
    eval_every_round: bool = field(
        default=False, metadata={"help": "Evaluate on the held-out split after every round, not only at the end."})
    num_train_epochs: float = field(
        default=1.0, metadata={"help": "SFT epochs over the kept proofs in each round."})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.rounds < 1 or self.samples_per_task < 1 or self.sample_batch_size < 1 or self.sample_max_tokens < 1:
            raise ValueError("rounds, samples_per_task, sample_batch_size and sample_max_tokens must be >= 1")
        if self.sample_temperature <= 0:
            raise ValueError(f"sample_temperature must be > 0, got {self.sample_temperature}")
        if self.max_proofs_per_task < 0:
            raise ValueError(f"max_proofs_per_task must be >= 0, got {self.max_proofs_per_task}")
