"""A tiny causal LM and tokenizer built locally, for tests and demos without any download.

Nothing can be fetched from a model hub here, so tests build their own model: a
byte-level BPE tokenizer trained on a few proof-like sentences, a two-layer Llama
with random weights, and a ChatML-style chat template. It loads with
``AutoTokenizer``/``AutoModelForCausalLM`` like any checkpoint directory.

:func:`build_tiny_model` can also *teach* the model a few replies (a few hundred
optimizer steps on CPU, about a second) so that greedy decoding gives a known,
checkable answer: a test of checkpoint evaluation then sees real ``OK`` verdicts.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from proofgym.agents.base import require

CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL_TOKENS = ["<|pad|>", "<|im_start|>", "<|im_end|>"]

_CORPUS = [
    "Proof. intros. induction n; simpl; auto. Qed.",
    "Proof. intros [p q]; split; assumption. Qed.",
    "Proof. lia. Qed. Proof. reflexivity. Qed. Proof. now rewrite IHn. Qed.",
    "Lemma add_0_r (n : nat) : n + 0 = n. Theorem lt_le (a b : nat) : a < b -> a <= b.",
    "Write a proof of the following statement. Reply with the proof in one ```coq fenced block.",
    "You are an expert in Coq, Isabelle, HOL Light and Dafny. The statement, the context, the error.",
    "system user assistant ```coq\nProof.\n  auto.\nQed.\n```",
]


def build_tiny_model(
    path: str | Path,
    *,
    seed: int = 0,
    vocab_size: int = 512,
    hidden_size: int = 64,
    layers: int = 2,
    teach: Sequence[tuple[Sequence[dict[str, str]], str]] = (),
    teach_steps: int = 300,
) -> Path:
    """Write a tiny Llama checkpoint with a locally trained tokenizer to ``path``.

    Args:
        path: Output folder (created).
        seed: Seed of the weights (and of teaching).
        vocab_size: BPE vocabulary size (special tokens included).
        hidden_size: Model width.
        layers: Number of decoder layers.
        teach: ``(chat messages, reply)`` pairs to fit, so that greedy decoding of
            the messages with the chat template gives the reply.
        teach_steps: Adam steps of that fit.

    Returns:
        ``path``, loadable with ``AutoModelForCausalLM.from_pretrained``.
    """
    require("torch", "train")
    require("transformers", "train")
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    corpus = list(_CORPUS) + [m["content"] for msgs, _ in teach for m in msgs] + [r for _, r in teach]
    raw.train_from_iterator(corpus, trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=raw, pad_token="<|pad|>", eos_token="<|im_end|>",
                                        bos_token="<|im_start|>")
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.padding_side = "left"
    tokenizer.save_pretrained(path)

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=2 * hidden_size,
        num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    model = LlamaForCausalLM(config)
    if teach:
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # a tiny model trains fastest on one thread, and shares a busy machine best
        try:
            _teach(model, tokenizer, teach, steps=teach_steps)
        finally:
            torch.set_num_threads(threads)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(path)
    return path


def _teach(model, tokenizer, pairs, *, steps: int) -> None:
    """Fit ``reply + eos`` after each chat prompt (loss on the reply tokens only)."""
    import torch

    rows = []
    for messages, reply in pairs:
        prompt = tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
        p_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        r_ids = tokenizer(reply, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        rows.append((p_ids + r_ids, [-100] * len(p_ids) + r_ids))
    width = max(len(ids) for ids, _ in rows)
    pad = tokenizer.pad_token_id
    input_ids = torch.tensor([[pad] * (width - len(ids)) + ids for ids, _ in rows])
    labels = torch.tensor([[-100] * (width - len(lab)) + lab for _, lab in rows])
    attention = (torch.arange(width)[None, :] >= torch.tensor([width - len(ids) for ids, _ in rows])[:, None]).long()
    # Positions as generate() computes them under left padding, so that teaching and decoding agree.
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    target = labels[:, 1:]
    answer = target != -100
    model.train()
    for step in range(steps):
        out = model(input_ids=input_ids, attention_mask=attention, position_ids=positions, labels=labels)
        optimizer.zero_grad()
        out.loss.backward()
        optimizer.step()
        if step % 5 == 4:
            # Stop once greedy decoding under teacher forcing reproduces every reply token.
            with torch.no_grad():
                logits = model(input_ids=input_ids, attention_mask=attention, position_ids=positions).logits
            if bool((logits[:, :-1].argmax(-1) == target)[answer].all()):
                break
    model.eval()
