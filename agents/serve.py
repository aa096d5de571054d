"""``proofgym serve-model``: a small OpenAI-compatible (and Anthropic-compatible) server for a local checkpoint.

For users without vLLM: it serves one :class:`~proofgym.agents.hf.LocalAgent`
on ``127.0.0.1`` with

- ``POST /v1/chat/completions`` (OpenAI chat completions: ``messages``, ``n``,
  ``temperature``, ``top_p``, ``max_tokens``/``max_completion_tokens``, ``seed``,
  ``stop``; token ``usage`` in the reply; no streaming);
- ``POST /v1/messages`` (Anthropic messages: ``system``, ``messages``, ``max_tokens``...);
- ``GET /v1/models`` and ``GET /health``.

Concurrent requests are batched: a worker thread takes what is waiting (up to
``batch_size`` prompts) and generates it in one pass. Errors are JSON in the
providers' shape, so that the official clients raise their usual exceptions:
400 bad request, 401 wrong key (when the server has one), 404 unknown model or
path, 429 when ``fail_first`` says so (to exercise clients' retries in tests).

Every request first passes the request guard the verifier service uses
(``proofgym.http_guard``): a ``Host`` that is not this server gets 421
(DNS rebinding), a request with an ``Origin`` gets 403 unless ``allowed_origins`` lists it,
and a ``POST`` body that is not ``application/json`` gets 415. So no web page can spend
the model or read its answers. The key is compared in constant time, and a server bound
beyond loopback warns (``RuntimeWarning``): anyone who reaches it can use the model.
"""

from __future__ import annotations

import hmac
import json
import queue
import sys
import threading
import time
import uuid
import warnings
from collections.abc import Iterable, Sequence
from concurrent.futures import Future
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from proofgym.agents.base import Agent, Generation, Request, SamplingParams
from proofgym.agents.hf import LocalAgent
from proofgym.http_guard import RequestGuard, RequestRefused, is_loopback_host, read_json_body

MAX_BODY = 8 * 1024 * 1024


class HTTPError(Exception):
    def __init__(self, status: int, message: str, kind: str = "invalid_request_error",
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.kind, self.headers = status, message, kind, headers or {}


class _Batcher:
    """Collects concurrent requests and generates them in batches on one thread."""

    def __init__(self, agent: Agent, batch_size: int, wait_s: float = 0.01) -> None:
        self.agent, self.batch_size, self.wait_s = agent, max(1, batch_size), wait_s
        self._queue: queue.Queue[tuple[Request, Future] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="proofgym-serve-batcher", daemon=True)
        self._thread.start()

    def submit(self, requests: Sequence[Request]) -> list[Generation]:
        futures = []
        for request in requests:
            fut: Future = Future()
            self._queue.put((request, fut))
            futures.append(fut)
        return [f.result() for f in futures]

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            batch = [item]
            deadline = time.monotonic() + self.wait_s
            while len(batch) < self.batch_size:
                try:
                    nxt = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    break
                if nxt is None:
                    self._queue.put(None)
                    break
                batch.append(nxt)
            try:
                gens = self.agent.generate([r for r, _ in batch])
                for (_, fut), gen in zip(batch, gens, strict=True):
                    fut.set_result(gen)
            except Exception as exc:  # noqa: BLE001 - reported to each waiting request as a 500
                for _, fut in batch:
                    fut.set_exception(exc)

    def close(self) -> None:
        self._queue.put(None)


class ModelServer(ThreadingHTTPServer):
    """The HTTP server. ``url`` is its base URL (``http://127.0.0.1:PORT/v1``).

    Args:
        agent: What generates (normally a :class:`~proofgym.agents.hf.LocalAgent`).
        host: Address to bind (loopback by default).
        port: Port (0: any free port).
        model_name: The name clients must send as ``model`` (default: the agent's model).
        api_key: When set, requests must carry it (``Authorization: Bearer`` or ``x-api-key``).
        max_tokens: Cap and default of ``max_tokens`` per request.
        batch_size: Prompts generated together.
        fail_first: Answer the first N generation requests with 429 (for testing clients' retries).
        allowed_origins: Web page origins whose requests are served (others that send ``Origin``: 403).
        allowed_hosts: Extra names clients may send in ``Host`` (see ``http_guard.RequestGuard``).
    """

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, agent: Agent, *, host: str = "127.0.0.1", port: int = 0, model_name: str | None = None,
                 api_key: str | None = None, max_tokens: int = 1024, batch_size: int = 8, fail_first: int = 0,
                 verbose: bool = False, allowed_origins: Iterable[str] = (), allowed_hosts: Iterable[str] = ()) -> None:
        self.guard = RequestGuard.create(host, allowed_origins=allowed_origins, allowed_hosts=allowed_hosts)
        super().__init__((host, port), _Handler)
        if not is_loopback_host(host):
            warnings.warn(f"serve-model: listening on {host}, not only on this machine: anyone who can reach it "
                          f"can use the model{'' if api_key else ' (no --api-key is set)'}", RuntimeWarning,
                          stacklevel=2)
        self.agent = agent
        self.model_name = model_name or agent.model or "local"
        self.api_key = api_key
        self.max_tokens = int(max_tokens)
        self.fail_first = int(fail_first)
        self.verbose = verbose
        self.requests_seen = 0
        self._count_lock = threading.Lock()
        self.batcher = _Batcher(agent, batch_size)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host if isinstance(host, str) else host.decode()}:{port}/v1"

    def take_ticket(self) -> int:
        with self._count_lock:
            self.requests_seen += 1
            return self.requests_seen

    def server_close(self) -> None:
        self.batcher.close()
        super().server_close()


class _Handler(BaseHTTPRequestHandler):
    server: ModelServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        if self.server.verbose:
            sys.stderr.write("serve-model: " + (format % args) + "\n")

    # -- plumbing ---------------------------------------------------------------------------------
    def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for key, value in {**self.server.guard.cors_headers(self.headers), **(headers or {})}.items():
            self.send_header(key, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def _error(self, err: HTTPError, anthropic: bool) -> None:
        if anthropic:
            payload = {"type": "error", "error": {"type": err.kind, "message": err.message}}
        else:
            payload = {"error": {"message": err.message, "type": err.kind, "param": None, "code": err.status}}
        self._send(err.status, payload, err.headers)

    def _guard(self, method: str) -> None:
        try:
            self.server.guard.check(method, self.headers)
        except RequestRefused as refused:
            raise _refusal(refused, self) from None

    def _body(self) -> dict[str, Any]:
        try:
            data = read_json_body(self, MAX_BODY)
        except RequestRefused as refused:
            raise _refusal(refused, self) from None
        if not isinstance(data, dict):
            raise HTTPError(400, "the request body must be a JSON object")
        return data

    def _check_key(self) -> None:
        key = self.server.api_key
        if not key:
            return
        given = self.headers.get("x-api-key") or self.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        # Constant time: how long a wrong key takes to refuse must not tell how much of it was right.
        if not hmac.compare_digest(given.encode("utf-8", "surrogateescape"), key.encode("utf-8", "surrogateescape")):
            raise HTTPError(401, "invalid API key", "authentication_error")

    def _check_model(self, data: dict[str, Any]) -> None:
        model = data.get("model")
        if model != self.server.model_name:
            raise HTTPError(404, f"model {model!r} is not served here; this server serves "
                                 f"{self.server.model_name!r}", "not_found_error")

    def _maybe_fail(self) -> None:
        if self.server.take_ticket() <= self.server.fail_first:
            raise HTTPError(429, "rate limited (serve-model --fail-first)", "rate_limit_error",
                            {"Retry-After": "0"})

    # -- routes ---------------------------------------------------------------------------------
    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        path = self.path.split("?")[0].rstrip("/")
        try:
            self._guard("GET")
        except HTTPError as err:
            self._error(err, anthropic=False)
            return
        if path in ("/health", "/v1/health"):
            self._send(200, {"status": "ok", "model": self.server.model_name})
        elif path == "/v1/models":
            self._send(200, {"object": "list", "data": [{"id": self.server.model_name, "object": "model",
                                                          "created": 0, "owned_by": "proofgym"}]})
        else:
            self._error(HTTPError(404, f"no route {self.path}", "not_found_error"), anthropic=False)

    def do_POST(self) -> None:  # noqa: N802
        path = self.path.split("?")[0].rstrip("/")
        anthropic = path == "/v1/messages"
        try:
            self._guard("POST")  # before the body is read: a refused page's request is not looked at
            data = self._body()  # read first: an unread body would corrupt the next request on this connection
            if path not in ("/v1/chat/completions", "/v1/messages"):
                raise HTTPError(404, f"no route {self.path}", "not_found_error")
            self._check_key()
            self._check_model(data)
            self._maybe_fail()
            payload = self._anthropic(data) if anthropic else self._openai(data)
        except HTTPError as err:
            self._error(err, anthropic)
            return
        except Exception as exc:  # noqa: BLE001 - a 500 the client may retry
            self._error(HTTPError(500, f"generation failed: {type(exc).__name__}: {exc}", "server_error"), anthropic)
            return
        self._send(200, payload)

    def do_OPTIONS(self) -> None:  # noqa: N802 - http.server's naming
        # A CORS preflight: answered only for an origin the operator allowed.
        try:
            headers = self.server.guard.preflight(self.headers)
        except RequestRefused as refused:
            self._error(_refusal(refused, self), anthropic=False)
            return
        self.send_response(204)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _sampling(self, data: dict[str, Any], max_tokens: Any) -> SamplingParams:
        try:
            cap = self.server.max_tokens
            tokens = cap if max_tokens is None else min(int(max_tokens), cap)
            stop = data.get("stop") or data.get("stop_sequences") or ()
            stop = (stop,) if isinstance(stop, str) else tuple(str(s) for s in stop)
            temperature, top_p = data.get("temperature"), data.get("top_p")
            return SamplingParams(temperature=1.0 if temperature is None else float(temperature),
                                  top_p=1.0 if top_p is None else float(top_p),
                                  max_tokens=max(1, tokens), seed=data.get("seed"), stop=stop)
        except (TypeError, ValueError) as exc:
            raise HTTPError(400, f"bad sampling parameter: {exc}") from None

    @staticmethod
    def _messages(raw: Any, system: Any = None) -> tuple[dict[str, str], ...]:
        if not isinstance(raw, list) or not raw:
            raise HTTPError(400, "'messages' must be a non-empty list")
        out = []
        if system:
            out.append({"role": "system", "content": _text(system)})
        for m in raw:
            if not isinstance(m, dict) or "role" not in m:
                raise HTTPError(400, "each message needs a 'role' and 'content'")
            out.append({"role": str(m["role"]), "content": _text(m.get("content", ""))})
        return tuple(out)

    def _openai(self, data: dict[str, Any]) -> dict[str, Any]:
        if data.get("stream"):
            raise HTTPError(400, "streaming is not supported by proofgym serve-model; send stream=false")
        messages = self._messages(data.get("messages"))
        sampling = self._sampling(data, data.get("max_completion_tokens", data.get("max_tokens")))
        n = data.get("n") or 1
        if not isinstance(n, int) or not 1 <= n <= 64:
            raise HTTPError(400, "'n' must be an integer from 1 to 64")
        requests = [Request(messages, sample=i, sampling=replace(sampling, seed=None if sampling.seed is None
                                                                 else sampling.seed + i)) for i in range(n)]
        gens = self.server.batcher.submit(requests)
        prompt_tokens = gens[0].prompt_tokens
        completion_tokens = sum(g.completion_tokens for g in gens)
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "object": "chat.completion", "created": int(time.time()),
            "model": self.server.model_name,
            "choices": [{"index": i, "message": {"role": "assistant", "content": g.text},
                         "finish_reason": g.finish_reason or "stop", "logprobs": None} for i, g in enumerate(gens)],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
        }

    def _anthropic(self, data: dict[str, Any]) -> dict[str, Any]:
        if data.get("stream"):
            raise HTTPError(400, "streaming is not supported by proofgym serve-model")
        if data.get("max_tokens") is None:
            raise HTTPError(400, "max_tokens: field required")
        messages = self._messages(data.get("messages"), data.get("system"))
        sampling = self._sampling(data, data.get("max_tokens"))
        gen = self.server.batcher.submit([Request(messages, sampling=sampling)])[0]
        return {
            "id": f"msg_{uuid.uuid4().hex[:24]}", "type": "message", "role": "assistant",
            "model": self.server.model_name, "content": [{"type": "text", "text": gen.text}],
            "stop_reason": "max_tokens" if gen.finish_reason == "length" else "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": gen.prompt_tokens, "output_tokens": gen.completion_tokens},
        }


_REFUSAL_KINDS = {401: "authentication_error", 403: "permission_error", 413: "request_too_large"}


def _refusal(refused: RequestRefused, handler: _Handler) -> HTTPError:
    """A guard refusal in the providers' error shape (closing the connection when the body stays unread)."""
    if refused.close:
        handler.close_connection = True
    return HTTPError(refused.status, refused.message, _REFUSAL_KINDS.get(refused.status, "invalid_request_error"),
                     refused.headers)


def _text(content: Any) -> str:
    """Message content as text: a string, or a list of ``{"type": "text", "text": ...}`` parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    raise HTTPError(400, "message content must be a string or a list of text parts")


def serve(checkpoint: str, *, host: str = "127.0.0.1", port: int = 8000, model_name: str | None = None,
          api_key: str | None = None, device: str = "auto", dtype: str = "auto", batch_size: int = 8,
          max_tokens: int = 1024, fail_first: int = 0, verbose: bool = False, threads: int | None = None,
          allowed_origins: Iterable[str] = (), allowed_hosts: Iterable[str] = ()) -> None:
    """Load ``checkpoint`` and serve it until interrupted (prints the base URL on stdout first)."""
    RequestGuard.create(host, allowed_origins=allowed_origins, allowed_hosts=allowed_hosts)  # bad flags: fail before loading
    agent = LocalAgent(checkpoint, device=device, dtype=dtype, batch_size=batch_size, threads=threads)
    server = ModelServer(agent, host=host, port=port, model_name=model_name, api_key=api_key,
                         max_tokens=max_tokens, batch_size=batch_size, fail_first=fail_first, verbose=verbose,
                         allowed_origins=allowed_origins, allowed_hosts=allowed_hosts)
    print(f"serving {server.model_name} on {server.url} ({agent.device}, {agent.torch_dtype})", flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()
        agent.close()
