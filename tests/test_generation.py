"""Generation that prefills each distinct prompt once (proofgym.agents.generation).

On a tiny Llama built here (float64, so rounding cannot flip an argmax): greedy tokens are those
of a plain ``model.generate`` on the same left-padded batch; the prompt is run through the model
once per distinct prompt, never once per row; the growing cache layer holds what the
concatenating one holds; and the batch generators hand back one completion per requested row.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig  # noqa: E402

from proofgym.agents.generation import GrowingLayer, generate_shared_prefix  # noqa: E402
from proofgym.agents.tiny_model import build_tiny_model  # noqa: E402
from proofgym.training.rollout import ModelGenerator  # noqa: E402


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", seed=0)
    model = AutoModelForCausalLM.from_pretrained(path).to(torch.float64).eval()
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


def _prompts(tokenizer):
    a = tokenizer("Lemma add_0_r (n : nat) : n + 0 = n. Proof.", add_special_tokens=False)["input_ids"]
    b = tokenizer("Theorem t : forall l : list nat, l ++ nil = l.", add_special_tokens=False)["input_ids"]
    assert len(a) != len(b)  # left padding is exercised
    return [a, a, b, a, b, b]  # repeats, interleaved


def _plain(model, prompts, config, pad):
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    with torch.no_grad():
        return model.generate(input_ids=ids, attention_mask=mask, generation_config=config)


def test_greedy_tokens_match_plain_generate(tiny):
    model, tok = tiny
    prompts = _prompts(tok)
    config = GenerationConfig(max_new_tokens=12, do_sample=False, pad_token_id=tok.pad_token_id,
                              eos_token_id=tok.eos_token_id)
    expected = _plain(model, prompts, config, tok.pad_token_id)
    with torch.no_grad():
        got = generate_shared_prefix(model, prompts, config, pad_token_id=tok.pad_token_id)
    assert got.shape == expected.shape
    assert got.tolist() == expected.tolist()


def test_each_distinct_prompt_is_prefilled_once(tiny):
    model, tok = tiny
    prompts = _prompts(tok)
    seen: list[tuple[int, int]] = []
    hook = model.register_forward_pre_hook(lambda _m, _a, kw: seen.append(tuple(kw["input_ids"].shape)),
                                           with_kwargs=True)
    try:
        with torch.no_grad():
            generate_shared_prefix(model, prompts, GenerationConfig(max_new_tokens=4, do_sample=False,
                                                                   pad_token_id=tok.pad_token_id),
                                   pad_token_id=tok.pad_token_id)
    finally:
        hook.remove()
    prefills = [shape for shape in seen if shape[1] > 1]
    # two distinct prompts, one forward each, alone and without their last token; then one token per row a step
    assert sorted(prefills) == sorted({(1, len(p) - 1) for p in prompts})
    assert all(shape == (len(prompts), 1) for shape in seen if shape[1] == 1)
    assert sum(shape[0] * shape[1] for shape in prefills) < sum(len(p) for p in prompts) / 2


def test_growing_layer_holds_what_concatenation_holds():
    from transformers.cache_utils import DynamicLayer

    grow, plain = GrowingLayer(reserve=2), DynamicLayer()
    gen = torch.Generator().manual_seed(0)
    for length in (5, 1, 1, 1, 3, 1):  # past the reserve: the buffer is reallocated and keeps its contents
        k, v = torch.randn(2, 3, length, 4, generator=gen), torch.randn(2, 3, length, 4, generator=gen)
        gk, gv = grow.update(k, v)
        pk, pv = plain.update(k, v)
        assert torch.equal(gk, pk) and torch.equal(gv, pv)
    assert grow.get_seq_length() == plain.get_seq_length() == 12
    grow.batch_select_indices(torch.tensor([1, 1, 0]))  # replaced tensors become the new buffer
    plain.batch_select_indices(torch.tensor([1, 1, 0]))
    k, v = torch.randn(3, 3, 1, 4, generator=gen), torch.randn(3, 3, 1, 4, generator=gen)
    assert torch.equal(grow.update(k, v)[0], plain.update(k, v)[0])


def test_sampling_gives_one_completion_per_row(tiny):
    model, tok = tiny
    prompts = _prompts(tok)
    config = GenerationConfig(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, eos_token_id=tok.eos_token_id)
    torch.manual_seed(0)
    completions, logprobs = ModelGenerator(model, tok, config)(prompts, 10)
    assert logprobs is None
    assert len(completions) == len(prompts)
    assert all(1 <= len(c) <= 10 for c in completions)


def test_the_grpo_trainer_generates_a_group_with_one_prefill_per_prompt(tiny, monkeypatch):
    """ProofGRPOTrainer's transformers path: TRL's batch (each prompt num_generations times) through the shared path."""
    from types import SimpleNamespace

    from accelerate import Accelerator

    from proofgym.agents import generation
    from proofgym.training import grpo_trainer
    from proofgym.training.grpo_trainer import ProofGRPOTrainer

    model, tok = tiny
    prompts = _prompts(tok)
    calls = []
    real = generation.generate_shared_prefix
    assert grpo_trainer.generate_shared_prefix is real  # the trainer's name is the shared path; patched where it is used
    monkeypatch.setattr(grpo_trainer, "generate_shared_prefix", lambda *a, **kw: calls.append(a[1]) or real(*a, **kw))
    config = GenerationConfig(max_new_tokens=12, do_sample=False, pad_token_id=tok.pad_token_id,
                              eos_token_id=tok.eos_token_id)
    accelerator = Accelerator(cpu=True)
    stand_in = SimpleNamespace(
        use_vllm=False, use_transformers_continuous_batching=False, _is_vlm=False, pad_to_multiple_of=None,
        model_wrapped=model, accelerator=accelerator, generation_kwargs={}, generation_config=config,
        args=SimpleNamespace(ds3_gather_for_generation=True, gradient_checkpointing_kwargs=None, report_to=[]),
        state=SimpleNamespace(global_step=0), _tokenizer=tok, eos_token_ids=[tok.eos_token_id],
        _dist=SimpleNamespace(summon_full_params=lambda *_a, **_k: __import__("contextlib").nullcontext()))
    completions, logprobs = ProofGRPOTrainer._generate_single_turn(stand_in, prompts, None, {}, 2)
    assert calls == [prompts] and logprobs is None
    expected = _plain(model, prompts, config, tok.pad_token_id)[:, max(len(p) for p in prompts):].tolist()
    for got, row in zip(completions, expected, strict=True):  # TRL's cut: through the first EOS
        end = next((i + 1 for i, t in enumerate(row) if t == tok.eos_token_id), len(row))
        assert got == row[:end]
