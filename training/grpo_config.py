"""The GRPO config: TRL's ``GRPOConfig`` plus proofgym's fields, with CPU-friendly defaults.

Every field has help text (``proofgym train grpo --help``); YAML files in ``configs/train/``
set them with ``--config``, and flags override the file (TRL's ``TrlParser``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from trl import GRPOConfig

from proofgym.training.common import ProofgymArguments, agree_on_run_identity, proofgym_post_init


@dataclass
class ProofGRPOConfig(ProofgymArguments, GRPOConfig):
    """GRPO with verifier rewards on a suite's training split, optionally with multi-turn repair.

    Defaults differ from TRL's where TRL's assume a GPU: ``bf16=False``,
    ``gradient_checkpointing=False``, ``use_cpu=True`` (a GPU config sets them back, and
    turns on ``use_vllm`` with ``vllm_mode: colocate``). ``output_dir`` defaults to
    ``runs/train/<run_name>`` and ``run_name`` to ``{suite}__grpo__{model}__{seed}__{time}``.
    """

    algo: ClassVar[str] = "grpo"
    _VALID_DICT_FIELDS = GRPOConfig._VALID_DICT_FIELDS + ["verdict_rewards"]

    max_turns: int = field(
        default=1, metadata={"help": "Attempts per episode: 1 is single-turn; above 1, a rollout_func shows the "
                                     "verifier's feedback and lets the policy retry (feedback tokens masked)."})
    turn_discount: float = field(
        default=1.0, metadata={"help": "A positive reward earned at turn t is multiplied by turn_discount**(t-1)."})
    feedback_chars: int = field(
        default=1000, metadata={"help": "Longest verifier feedback shown to the policy in a repair turn."})
    repair_generation_chunk: int = field(
        default=0, metadata={"help": "With max_turns > 1: episodes per generate call within a turn, each chunk's "
                                     "proofs checked while the next chunk generates (0: the whole turn in one "
                                     "call, checked after it). Smaller chunks overlap more, but generate in "
                                     "smaller batches."})
    verdict_rewards: dict | str | None = field(
        default=None, metadata={"help": "Verdict -> reward overrides, e.g. {\"CHEATING\": -2} (default: OK 1, "
                                        "CHEATING -1, FAIL/TIMEOUT/ERROR 0: malformed output is ERROR, 0). Refused unless "
                                        "CHEATING < FAIL, TIMEOUT, ERROR < OK. A harness failure is never scored."})
    format_bonus: float = field(
        default=0.0, metadata={"help": "Optional format shaping, off by default (0): added to the reward of a FAIL or "
                                       "TIMEOUT verdict (the verifier ran a well-formed proof script that did not "
                                       "prove the goal), to get a policy at p = 0 writing proofs. Never paid on "
                                       "CHEATING or ERROR, and refused unless FAIL + bonus < OK, so only a proof "
                                       "earns the top reward; an empty script earns it too, so keep it small (0.1) "
                                       "and use it only to get off the ground."})
    warm_start_sft_steps: int = field(
        default=0, metadata={"help": "SFT warm start: this many SFT steps on the training split's reference proofs "
                                     "before GRPO (0: none), so that GRPO starts from a policy that solves some tasks "
                                     "(from p = 0 every group has zero reward variance and nothing is learned). The "
                                     "warm-started model is saved once, to output_dir/warm-start, and is what the "
                                     "step-0 evaluation measures."})
    warm_start_sft_learning_rate: float = field(
        default=1e-4, metadata={"help": "Learning rate of the SFT warm start (linear decay over its steps)."})
    warm_start_sft_batch_size: int = field(
        default=4, metadata={"help": "Examples per SFT warm-start step."})
    warm_start_sft_max_length: int = field(
        default=512, metadata={"help": "Longest tokenized prompt + reference proof in the SFT warm start."})
    curriculum: bool = field(
        default=False, metadata={"help": "Pass-rate curriculum: before training and every curriculum_refresh_steps "
                                         "steps, sample curriculum_k attempts per training task with the current "
                                         "policy, check them on the verifier pool, and train only on tasks with "
                                         "0 < p_hat < 1 (the others give zero-variance groups: no gradient). Logs "
                                         "curriculum/kept, too_easy, too_hard."})
    curriculum_k: int = field(
        default=8, metadata={"help": "Attempts per task in each curriculum estimate of p_hat (>= 2)."})
    curriculum_refresh_steps: int = field(
        default=20, metadata={"help": "Re-estimate p_hat every N optimizer steps (0: only before training). Each "
                                      "refresh generates curriculum_k replies for every training task."})
    curriculum_refreshes: int = field(
        default=0, metadata={"help": "Refresh p_hat this many times, spread evenly over the planned optimizer steps "
                                     "(the plan printed at start says after which); wins over curriculum_refresh_steps, "
                                     "so a recipe means the same on 1 or 8 GPUs (0: use curriculum_refresh_steps)."})
    curriculum_batch_size: int = field(
        default=16, metadata={"help": "Prompts per generation call in a curriculum estimate."})
    curriculum_max_tokens: int = field(
        default=0, metadata={"help": "Tokens per reply in a curriculum estimate (0: max_completion_length)."})
    control_permute_rewards: bool = field(
        default=False, metadata={"help": "Negative control for experiments: shuffle the verifier's rewards across "
                                         "each batch before GRPO sees them (same reward distribution, no relation "
                                         "to the completions). Metrics stay the true ones. Never for real training."})
    control_within_groups: bool = field(
        default=False, metadata={"help": "With control_permute_rewards: shuffle within each group of "
                                         "num_generations completions instead of across the batch, so every group "
                                         "keeps its advantage magnitudes (the matched-scale control)."})
    tool_env: bool = field(
        default=False, metadata={"help": "Give the policy a check_proof tool (TRL environment_factory): it may test "
                                         "proofs before answering; the final answer is rewarded. Needs a chat "
                                         "template TRL parses tool calls from (see chat_template_path)."})
    tool_max_calls: int = field(default=4, metadata={"help": "check_proof calls allowed per answer (tool_env)."})
    chat_template_path: str | None = field(
        default=None, metadata={"help": "A Jinja chat template file to use instead of the tokenizer's, e.g. TRL's "
                                        "trl/chat_templates/qwen3.jinja for tool_env."})
    verifier_service: str | None = field(
        default=None, metadata={"help": "Where rewards are checked: unset, a verifier pool per rank (or "
                                        "$PROOFGYM_VERIFIER_SERVICE); 'node', one verifier service per node, "
                                        "started by local rank 0 with verifier_workers x LOCAL_WORLD_SIZE workers "
                                        "and one verdict cache, shared by the node's ranks; or the URL of a "
                                        "running `proofgym serve-verifier` (token in $PROOFGYM_VERIFIER_TOKEN). "
                                        "With a service the reward is async and a batch is sent as soon as it "
                                        "is decoded (docs/scale.md)."})
    reward_timeout_s: float | None = field(
        default=None, metadata={"help": "Longest wait for one batch of checks; unfinished checks count as "
                                        "harness failures (default: no limit beyond the verifier's own)."})

    output_dir: str | None = field(
        default=None, metadata={"help": "Where checkpoints, the final model and logs go (default: "
                                        "runs/train/<run_name>)."})
    run_name: str | None = field(
        default=None, metadata={"help": "Run name, also W&B's (default: {suite}__grpo__{model}__{seed}__{time})."})
    report_to: None | str | list[str] = field(
        default="wandb", metadata={"help": "Where to log: wandb (offline unless configured), none, ..."})
    logging_steps: float = field(default=1, metadata={"help": "Log every N optimizer steps."})
    bf16: bool | None = field(
        default=False, metadata={"help": "bf16 mixed precision (GPU configs turn it on; off on CPU)."})
    gradient_checkpointing: bool = field(
        default=False, metadata={"help": "Recompute activations in the backward pass (saves GPU memory)."})
    use_cpu: bool = field(default=True, metadata={"help": "Train on CPU even when a GPU is present."})
    log_completions: bool = field(
        default=True, metadata={"help": "Log a table of prompts, completions, verdicts, rewards and reasons at "
                                        "each logging step (W&B table and output_dir/completions/*.parquet)."})
    num_completions_to_print: int | None = field(
        default=0, metadata={"help": "Completions printed to the console at each logging step (0: none)."})

    def __post_init__(self) -> None:
        generated = proofgym_post_init(self, self.algo)
        super().__post_init__()
        agree_on_run_identity(self, generated)
        if self.max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {self.max_turns}")
        if not 0 < self.turn_discount <= 1:
            raise ValueError(f"turn_discount must be in (0, 1], got {self.turn_discount}")
        if self.repair_generation_chunk < 0:
            raise ValueError(f"repair_generation_chunk must be >= 0 (0: the whole turn), got "
                             f"{self.repair_generation_chunk}")
        if self.curriculum_k < 2 or self.curriculum_refresh_steps < 0 or self.curriculum_batch_size < 1 \
                or self.curriculum_max_tokens < 0 or self.curriculum_refreshes < 0:
            raise ValueError("curriculum_k must be >= 2, curriculum_batch_size >= 1, curriculum_refresh_steps, "
                             "curriculum_refreshes and curriculum_max_tokens >= 0")
        if self.warm_start_sft_steps < 0 or self.warm_start_sft_batch_size < 1 or self.warm_start_sft_max_length < 1:
            raise ValueError("warm_start_sft_steps must be >= 0, warm_start_sft_batch_size and "
                             "warm_start_sft_max_length >= 1")
        if self.tool_env and self.max_turns > 1:
            raise ValueError("tool_env and max_turns > 1 are two kinds of multi-turn training: pick one")
