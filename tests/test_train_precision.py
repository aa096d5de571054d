"""Weights that train: mixed precision is bf16 autocast over fp32 weights, never bf16 storage without masters.

Issue 29's first defect: the GPU configs loaded the model in bf16 under plain DDP, where nothing keeps an
fp32 master copy, so most AdamW updates at a learning rate of 1e-6 round away. These tests run on CPU
(bf16 autocast works there): the premise measured on a small model, the config loader's refusal, the
shipped GPU configs, and a real SFT run whose configured precision (``bf16: true``) moves the weights.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("trl")

from proofgym.training.common import (  # noqa: E402
    ResolvedModel,
    TrainConfigError,
    keep_fp32_masters,
    load_model,
    model_init_kwargs,
    prepare_run,
)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    from proofgym.agents.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def _moved(before: dict[str, Any], model: Any) -> float:
    """Share of the weights' elements that differ from ``before``."""
    changed = total = 0
    for name, param in model.named_parameters():
        changed += int((param.detach().float() != before[name].float()).sum())
        total += param.numel()
    return changed / total


def _snapshot(model: Any) -> dict[str, Any]:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def test_at_a_small_learning_rate_bf16_storage_rounds_updates_away_and_autocast_over_fp32_does_not(tiny_model):
    """The premise of the refusal, measured: 10 AdamW steps at 1e-6 on the same batch."""
    import torch

    results = {}
    for storage in ("bfloat16", "float32"):
        torch.manual_seed(0)
        model, tokenizer = load_model(ResolvedModel(str(tiny_model), None, "tiny"),
                                      init_kwargs={"dtype": storage})
        before = _snapshot(model)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6, weight_decay=0.0)
        batch = tokenizer(["Proof. induction n; simpl; auto. Qed."] * 2, return_tensors="pt")
        for _ in range(10):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(**batch, labels=batch["input_ids"]).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        results[storage] = _moved(before, model)
    assert results["bfloat16"] < 0.5 < 0.99 < results["float32"]


def _cfg(tmp_path: Path, model: Path, suite: Path, **overrides: Any) -> Any:
    from proofgym.training.sft_config import ProofSFTConfig

    return ProofSFTConfig(**{**dict(model_name_or_path=str(model), suite=str(suite), output_dir=str(tmp_path / "run"),
                                    report_to="none", checkpoint_eval_at_end=False, heldout_fraction=0.0),
                             **overrides})


def test_the_config_loader_refuses_bf16_storage_without_fp32_masters_and_says_what_to_do(tmp_path, tiny_model,
                                                                                        tiny_suite):
    cfg = _cfg(tmp_path, tiny_model, tiny_suite, model_init_kwargs={"dtype": "bfloat16"}, learning_rate=1e-6)
    with pytest.raises(TrainConfigError, match=r"bfloat16 with no fp32 master.*1e-06.*Drop dtype.*bf16: true"):
        prepare_run(cfg, needs_verifier=False)
    cfg.model_init_kwargs = {"dtype": "float16"}
    with pytest.raises(TrainConfigError, match="float16 with no fp32 master"):
        prepare_run(cfg, needs_verifier=False)
    # LoRA trains fp32 adapters over a frozen half-precision base; DeepSpeed's optimizer keeps fp32 masters
    prepare_run(_cfg(tmp_path, tiny_model, tiny_suite, model_init_kwargs={"dtype": "bfloat16"}, use_peft=True),
                needs_verifier=False)
    cfg = _cfg(tmp_path, tiny_model, tiny_suite, model_init_kwargs={"dtype": "bfloat16"})
    cfg.deepspeed = {"zero_optimization": {"stage": 2}}  # after __post_init__: deepspeed is not installed here
    prepare_run(cfg, needs_verifier=False)


def test_a_half_precision_checkpoint_loaded_as_auto_is_upcast_for_full_fine_tuning(tmp_path, tiny_model, tiny_suite):
    import torch

    half, tokenizer = load_model(ResolvedModel(str(tiny_model), None, "tiny"), init_kwargs={"dtype": "bfloat16"})
    half.save_pretrained(tmp_path / "bf16")
    tokenizer.save_pretrained(tmp_path / "bf16")
    model, _ = load_model(ResolvedModel(str(tmp_path / "bf16"), None, "bf16"), init_kwargs={"dtype": "auto"})
    assert next(model.parameters()).dtype == torch.bfloat16  # what `auto` gives: the checkpoint's dtype
    cfg = _cfg(tmp_path, tiny_model, tiny_suite)
    assert {p.dtype for p in keep_fp32_masters(model, cfg).parameters()} == {torch.float32}
    lora = _cfg(tmp_path, tiny_model, tiny_suite, use_peft=True)
    model, _ = load_model(ResolvedModel(str(tmp_path / "bf16"), None, "bf16"), init_kwargs={"dtype": "auto"})
    assert next(keep_fp32_masters(model, lora).parameters()).dtype == torch.bfloat16  # the frozen base may stay


@pytest.mark.parametrize("name", ["grpo_gpu.yaml", "sft_gpu.yaml", "grpo_repair_gpu.yaml",
                                  "expert_iteration_gpu.yaml"])
def test_the_gpu_configs_train_in_bf16_autocast_over_fp32_weights(name):
    import torch
    import yaml

    data = yaml.safe_load((ROOT / "configs" / "train" / name).read_text())
    assert data["bf16"] is True
    assert model_init_kwargs(data.get("model_init_kwargs"))["dtype"] == torch.float32


def test_sft_with_bf16_autocast_on_cpu_moves_the_weights_at_a_gpu_learning_rate(tmp_path, tiny_model, tiny_suite):
    """The configured precision of the GPU recipes (bf16: true, fp32 weights), through the real SFT entry."""
    import torch

    from proofgym.training.sft import train_sft

    start, _ = load_model(ResolvedModel(str(tiny_model), None, "tiny"))
    before = _snapshot(start)
    cfg = _cfg(tmp_path, tiny_model, tiny_suite, bf16=True, use_cpu=True, learning_rate=1e-6, max_steps=3,
               per_device_train_batch_size=2, lr_scheduler_type="constant", warmup_steps=0, save_strategy="no",
               torch_threads=1)
    result = train_sft(cfg)
    assert result.global_step == 3
    trained, _ = load_model(ResolvedModel(str(result.final_checkpoint), None, "trained"), init_kwargs={"dtype": "auto"})
    assert {p.dtype for p in trained.parameters()} == {torch.float32}
    assert _moved(before, trained) > 0.99
