"""CPU generation as the learning experiment uses it: plain ``generate`` vs each prompt prefilled once.

    python scripts/bench_generation.py                        # SmolLM2-135M, 2 prompts x 4 samples, 96 tokens
    python scripts/bench_generation.py --threads 2 --repeats 3
    python scripts/bench_generation.py --profile              # torch profiler's top ops, one batch per path

One generation batch as a GRPO step (``--prompts`` distinct prompts x ``--group`` completions,
sampled at T=1) or a curriculum estimate makes it: the real zero-shot prompts of the suite's
first tasks (``--context-chars`` as the experiment), the model as the experiment loads it
(fp32). Three paths run in the same process, alternating, ``--repeats`` times each: plain
``generate``; the shared prefill with the growing cache (what proofgym uses); and the shared prefill
with transformers' concatenating cache, which separates the two changes. Each with
``--threads`` torch threads; it prints seconds per batch, new tokens per second and the
ratio. It also times the prefill alone (``max_new_tokens=1``) of each path, which is where the
difference is. A second check runs greedy decoding on both paths and says whether they agree.
Timings depend on the machine's load, which it prints before and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2", help="smollm2 (default), tiny, or a checkpoint dir")
    p.add_argument("--suite", default="coq-stdlib", help="suite whose first tasks give the prompts")
    p.add_argument("--prompts", type=int, default=2, help="distinct prompts per batch (default 2)")
    p.add_argument("--group", type=int, default=4, help="samples per prompt (GRPO's num_generations; default 4)")
    p.add_argument("--max-new-tokens", type=int, default=96)
    p.add_argument("--context-chars", type=int, default=200)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=2, help="batches per path (alternating)")
    p.add_argument("--profile", action="store_true", help="print the torch profiler's top ops for one batch each")
    args = p.parse_args(argv)

    import torch
    from transformers import GenerationConfig

    from proofgym.agents.generation import generate_shared_prefix
    from proofgym.envs.tasks.suites import load_tasks, resolve_suite
    from proofgym.training.common import load_model, resolve_model
    from proofgym.training.data import prompt_messages
    from proofgym.training.rollout import render_chat, token_ids

    torch.set_num_threads(args.threads)
    cache = os.environ.get("PROOFGYM_CACHE", str(ROOT / ".cache" / "proofgym"))
    model, tok = load_model(resolve_model(args.model, cache_dir=cache))
    model.eval()
    tasks = load_tasks(resolve_suite(args.suite))[: args.prompts]
    if not tasks:
        raise SystemExit(f"suite {args.suite} has no tasks (is it built?)")
    distinct = [token_ids(tok, render_chat(tok, prompt_messages(t, context_chars=args.context_chars),
                                           generation_prompt=True)) for t in tasks]
    batch = [p for p in distinct for _ in range(args.group)]
    pad = tok.pad_token_id
    eos = tok.eos_token_id
    print(f"model {args.model}, {args.prompts} prompts ({', '.join(str(len(p)) for p in distinct)} tokens) x "
          f"{args.group} samples, {args.max_new_tokens} new tokens, {torch.get_num_threads()} thread(s), "
          f"attention {model.config._attn_implementation}; load average {os.getloadavg()}", flush=True)

    def config(new: int, sample: bool) -> GenerationConfig:
        if sample:
            return GenerationConfig(max_new_tokens=new, do_sample=True, temperature=1.0, top_p=1.0, top_k=0,
                                    pad_token_id=pad, eos_token_id=eos, disable_compile=True)
        return GenerationConfig(max_new_tokens=new, do_sample=False, pad_token_id=pad, eos_token_id=eos,
                                disable_compile=True)

    def plain(cfg: GenerationConfig) -> torch.Tensor:
        width = max(len(q) for q in batch)
        ids = torch.tensor([[pad] * (width - len(q)) + q for q in batch])
        mask = torch.tensor([[0] * (width - len(q)) + [1] * len(q) for q in batch])
        return model.generate(input_ids=ids, attention_mask=mask, generation_config=cfg)[:, width:]

    def shared(cfg: GenerationConfig) -> torch.Tensor:
        width = max(len(q) for q in batch)
        return generate_shared_prefix(model, batch, cfg, pad_token_id=pad)[:, width:]

    def shared_concat(cfg: GenerationConfig) -> torch.Tensor:
        width = max(len(q) for q in batch)
        return generate_shared_prefix(model, batch, cfg, pad_token_id=pad, growing=False)[:, width:]

    paths = {"plain": plain, "shared": shared, "shared-concat": shared_concat}

    def timed(fn, cfg) -> tuple[float, int]:
        start = time.perf_counter()
        with torch.no_grad():
            out = fn(cfg)
        seconds = time.perf_counter() - start
        new = int(sum(next((i + 1 for i, t in enumerate(row) if t == eos), len(row)) for row in out.tolist()))
        return seconds, new

    with torch.no_grad():  # warm up both paths (first-call allocations), 4 tokens
        for fn in paths.values():
            fn(config(4, True))
    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        for name, fn in paths.items():
            with profile(activities=[ProfilerActivity.CPU]) as prof, torch.no_grad():
                fn(config(args.max_new_tokens, True))
            print(f"\n--- torch profiler, {name} path, one batch ---")
            print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))
    prefill = {name: [] for name in paths}
    full = {name: [] for name in paths}
    for _ in range(args.repeats):
        for name, fn in paths.items():
            prefill[name].append(timed(fn, config(1, True))[0])
            full[name].append(timed(fn, config(args.max_new_tokens, True)))
    print(f"\n{'path':14} {'prefill s':>10} {'batch s':>9} {'new tokens':>11} {'tokens/s':>9}")
    rate = {}
    for name in paths:
        seconds = statistics.median(s for s, _ in full[name])
        tokens = sum(n for _, n in full[name]) / len(full[name])
        rate[name] = sum(n for _, n in full[name]) / sum(s for s, _ in full[name])
        print(f"{name:14} {statistics.median(prefill[name]):10.2f} {seconds:9.2f} {tokens:11.0f} {rate[name]:9.1f}")
    print(f"\nshared-concat (shared prefill, transformers' concatenating cache) / plain tokens/s: "
          f"{rate['shared-concat'] / rate['plain']:.2f}x")
    print(f"shared / plain tokens/s: {rate['shared'] / rate['plain']:.2f}x; prefill "
          f"{statistics.median(prefill['plain']) / statistics.median(prefill['shared']):.2f}x faster")
    with torch.no_grad():
        a, b = plain(config(args.max_new_tokens, False)), shared(config(args.max_new_tokens, False))
    same = a.shape == b.shape and bool((a == b).all())
    print(f"greedy: the two paths' tokens are {'identical' if same else 'DIFFERENT'} "
          f"({a.shape[0]} rows x {a.shape[1]} tokens)")
    print(f"load average after: {os.getloadavg()}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
