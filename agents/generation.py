"""Batched generation that prefills each distinct prompt once: the CPU path of GRPO, the curriculum and EI.

GRPO generates a group of G completions per prompt, and the curriculum and expert iteration
sample k attempts per task, so a generation batch holds each prompt several times over.
``model.generate`` (and ``num_return_sequences``, which repeats the inputs before the first
forward pass) prefills every copy: on this project's CPU runs the prompt is ~320 tokens and
the reply ~96, so most of a batch's time went into computing the same prompt's keys and values
G times, plus the left padding of the shorter prompts (``scripts/bench_generation.py``
measures both paths; docs/learning.md has the numbers).

:func:`generate_shared_prefix` instead runs the model once per *distinct* prompt, on that
prompt alone (no padding), up to its last token; lays those key/value caches side by side,
left-padded to the batch's width (the padded positions are masked, as left padding is in
``generate``); copies each distinct prompt's cache to the rows that hold that prompt; and
hands that cache to ``model.generate`` with the full left-padded batch. ``generate`` then
feeds only the last prompt token and decodes as it always does, with the same logits
processors, sampling and stopping, so the completions follow the same distribution (greedy:
the same tokens, up to floating-point rounding; ``tests/test_generation.py`` checks it).

It falls back to a plain ``generate`` call where that reuse does not apply: an encoder-decoder
model, a cache implementation other than the default dynamic one (static, sliding-window or
hybrid layers), or prompts of a single token.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def generate_shared_prefix(model: Any, prompt_ids: Sequence[Sequence[int]], generation_config: Any = None, *,
                           pad_token_id: int, growing: bool = True, **kwargs: Any) -> Any:
    """``model.generate`` on the left-padded ``prompt_ids``, each distinct prompt prefilled once.

    Args:
        model: A decoder-only causal LM.
        prompt_ids: One token-id prompt per output row (repeats allowed, in any order).
        generation_config: What ``generate`` gets (sampling, ``max_new_tokens``, EOS...); None: the model's,
            with ``kwargs`` on top, as ``generate`` does.
        pad_token_id: Left padding (also passed to ``generate``).
        growing: The cache's layers are :class:`GrowingLayer` (False: ``transformers``' concatenating ones).
        **kwargs: More ``generate`` keywords (``max_new_tokens``, ``do_sample``...).

    Returns:
        What ``model.generate`` returns: the padded prompts and the new tokens, one row per prompt,
        in the order of ``prompt_ids``.
    """
    import torch

    width = max(len(p) for p in prompt_ids)
    device = next(model.parameters()).device
    input_ids = torch.tensor([[pad_token_id] * (width - len(p)) + list(p) for p in prompt_ids], device=device)
    attention = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompt_ids], device=device)
    effective = generation_config if generation_config is not None else getattr(model, "generation_config", None)
    reserve = kwargs.get("max_new_tokens") or getattr(effective, "max_new_tokens", None) or 0
    cache = None
    if _reusable(model, kwargs.get("cache_implementation", getattr(effective, "cache_implementation", None))) \
            and min(len(p) for p in prompt_ids) >= 2:
        cache = prefill_cache(model, prompt_ids, width, reserve=int(reserve), growing=growing)
    if cache is not None:
        kwargs["cache"] = cache
    if generation_config is None:
        kwargs["pad_token_id"] = pad_token_id
    return model.generate(input_ids=input_ids, attention_mask=attention, generation_config=generation_config,
                          **kwargs)


def prefill_cache(model: Any, prompt_ids: Sequence[Sequence[int]], width: int, *, reserve: int = 0,
                  growing: bool = True) -> Any:
    """A ``DynamicCache`` of every row's prompt but its last token, left-padded to ``width - 1``, or None.

    Each distinct prompt runs through the model once, alone; rows that repeat it share its keys and values.
    Its layers are :class:`GrowingLayer` with room for ``reserve`` more positions. None when the model's
    cache is not made of plain dynamic layers (then nothing is reused).
    """
    import torch
    from transformers import DynamicCache

    distinct: dict[tuple[int, ...], int] = {}
    rows = [distinct.setdefault(tuple(p), len(distinct)) for p in prompt_ids]
    device = next(model.parameters()).device
    per_prompt = []
    for prompt in distinct:
        cache = DynamicCache(config=model.config)
        ids = torch.tensor([prompt[:-1]], device=device)
        model(input_ids=ids, attention_mask=torch.ones_like(ids), position_ids=torch.arange(ids.shape[1],
              device=device).unsqueeze(0), cache=cache, use_cache=True, logits_to_keep=1)
        if any(type(layer).__name__ != "DynamicLayer" for layer in cache.layers):
            return None
        per_prompt.append(cache)
    index = torch.tensor(rows, device=device)
    shared = DynamicCache(config=model.config)
    if growing:
        shared.layers = [GrowingLayer(reserve=reserve + 1) for _ in per_prompt[0].layers]
    for layer in range(len(per_prompt[0].layers)):
        keys = torch.cat([_left_pad(c.layers[layer].keys, width - 1) for c in per_prompt]).index_select(0, index)
        values = torch.cat([_left_pad(c.layers[layer].values, width - 1) for c in per_prompt]).index_select(0, index)
        shared.update(keys, values, layer)
    return shared


def _growing_layer_class() -> type:
    from transformers.cache_utils import DynamicLayer

    class GrowingLayer(DynamicLayer):
        """A ``DynamicLayer`` whose keys and values live in a buffer with room to grow.

        ``DynamicLayer.update`` concatenates: every decoding step copies the layer's whole cache, which was
        40% of a CPU generation batch's time in the profile (``aten::cat``). This one writes the new
        positions into spare room (``reserve`` positions at a time, doubling when full) and hands out
        views, so a step copies only its own token. Anything that replaces the tensors (beam
        reordering, batch selection, cropping) leaves a plain tensor, adopted as the new buffer.
        """

        def __init__(self, reserve: int = 64, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.reserve = max(1, int(reserve))
            self._kbuf = self._vbuf = None

        def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
            import torch

            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            length = self.get_seq_length()
            new = key_states.shape[-2]
            if (self._kbuf is None or self.keys.data_ptr() != self._kbuf.data_ptr()
                    or length + new > self._kbuf.shape[-2]
                    or key_states.shape[:-2] != self._kbuf.shape[:-2]):
                capacity = max(length + new + self.reserve, 2 * length)
                shape = (*key_states.shape[:-2], capacity, key_states.shape[-1])
                self._kbuf = torch.empty(shape, dtype=key_states.dtype, device=key_states.device)
                self._vbuf = torch.empty((*shape[:-1], value_states.shape[-1]), dtype=value_states.dtype,
                                         device=value_states.device)
                if length:
                    self._kbuf[..., :length, :] = self.keys
                    self._vbuf[..., :length, :] = self.values
            self._kbuf[..., length:length + new, :] = key_states
            self._vbuf[..., length:length + new, :] = value_states
            self.keys = self._kbuf[..., :length + new, :]
            self.values = self._vbuf[..., :length + new, :]
            return self.keys, self.values

    return GrowingLayer


def GrowingLayer(reserve: int = 64) -> Any:  # noqa: N802 - a class, built on first use (transformers is optional)
    """A :class:`DynamicLayer` that grows in place (see ``_growing_layer_class``)."""
    global _GROWING
    if _GROWING is None:
        _GROWING = _growing_layer_class()
    return _GROWING(reserve=reserve)


_GROWING: Any = None


def _left_pad(states: Any, length: int) -> Any:
    """``(1, heads, t, dim)`` states with zeros before them up to ``length`` positions (masked in attention)."""
    import torch

    missing = length - states.shape[-2]
    if missing <= 0:
        return states
    pad = torch.zeros((*states.shape[:-2], missing, states.shape[-1]), dtype=states.dtype, device=states.device)
    return torch.cat([pad, states], dim=-2)


def _reusable(model: Any, cache_implementation: str | None) -> bool:
    config = getattr(model, "config", None)
    if config is None or getattr(config, "is_encoder_decoder", False):
        return False
    if cache_implementation not in (None, "dynamic"):
        return False
    layer_types = getattr(config, "layer_types", None) or ()
    return all(t == "full_attention" for t in layer_types)
