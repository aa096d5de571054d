"""Models behind an API: any OpenAI-compatible server (hosted, vLLM, ``proofgym serve-model``) and Anthropic.

Both agents use the official clients (``pip install 'proofgym[api]'``), send a
batch of requests concurrently under a limit, retry rate limits (429), server
errors (5xx), timeouts and lost connections with exponential backoff and
jitter (honouring ``Retry-After``), and count tokens and cost per request.

What stops a run (:class:`~proofgym.agents.base.ModelUnavailable`, with a
message that says what to do): no API key, a server that cannot be reached
after the retries, a rejected key, an unknown model. What fails one request
only (``Generation.error``): a request the server refuses (400, e.g. a prompt
longer than the context), or retries exhausted on 429/5xx/timeouts.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import email.utils
import inspect
import os
import random
import threading
import time
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from proofgym.agents.base import (
    Agent,
    Generation,
    ModelUnavailable,
    Prices,
    Request,
    SamplingParams,
    is_loopback_url,
    require,
)

LOCAL_DUMMY_KEY = "proofgym-local"
"""The key sent to a server on this machine when none is given (local servers ignore it)."""

RETRYABLE_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 529})


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with jitter: ``base * 2**retry`` seconds, at most ``max_delay``.

    A ``Retry-After`` header from the server wins over the computed delay (capped too).
    """

    max_retries: int = 5
    base_delay: float = 0.5
    max_delay: float = 30.0

    def delay(self, retry: int, retry_after: float | None = None, rng: random.Random | None = None) -> float:
        if retry_after is not None:
            return max(0.0, min(self.max_delay, retry_after))
        backoff = min(self.max_delay, self.base_delay * (2 ** retry))
        return backoff * (0.5 + 0.5 * (rng or random).random())


def retry_after_seconds(headers: Any) -> float | None:
    """Seconds to wait from ``retry-after-ms`` / ``retry-after`` (seconds or an HTTP date), if present."""
    if headers is None:
        return None
    try:
        ms = headers.get("retry-after-ms")
        if ms is not None:
            return float(ms) / 1000.0
        value = headers.get("retry-after")
    except AttributeError:
        return None
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(value)
        return None if parsed is None else max(0.0, parsed.timestamp() - time.time())


def run_sync(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run a coroutine to completion from sync code, also when this thread already runs an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # e.g. inside Jupyter
        return pool.submit(asyncio.run, coro).result()


class _ApiAgent(Agent):
    """Concurrency, retries, accounting; subclasses make the client and the call."""

    provider = ""
    key_env = ""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        sampling: SamplingParams | None = None,
        concurrency: int = 8,
        timeout: float = 120.0,
        retry: RetryPolicy | None = None,
        prices: Prices | None = None,
    ) -> None:
        if not model:
            raise ModelUnavailable(f"--model is required for the {self.name} agent (the model name the server serves)")
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        self.model = model
        self.base_url = base_url.rstrip("/") if base_url else None
        self.sampling = sampling or SamplingParams()
        self.concurrency = int(concurrency)
        self.timeout = float(timeout)
        self.retry = retry or RetryPolicy()
        self.prices = prices or Prices()
        self.api_key = self._resolve_key(api_key)
        self.requests_sent = 0
        self.retries_total = 0
        self._reached = False  # has any request got an answer? (a refused first contact is not retried)
        self._lock = threading.Lock()
        self._rng = random.Random(0)

    def _resolve_key(self, api_key: str | None) -> str:
        key = api_key or os.environ.get(self.key_env)
        if key:
            return key
        if is_loopback_url(self.base_url):
            return LOCAL_DUMMY_KEY
        where = f"the server at {self.base_url}" if self.base_url else f"the {self.provider} API"
        raise ModelUnavailable(
            f"no API key for {where}: set {self.key_env} or pass --api-key "
            f"(a server on this machine needs none; for another keyless server pass --api-key EMPTY)"
        )

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "base_url": self.base_url, "concurrency": self.concurrency,
                "timeout_s": self.timeout, "max_retries": self.retry.max_retries,
                "prices_usd_per_mtok": [self.prices.input_per_mtok, self.prices.output_per_mtok]}

    # -- the batch -------------------------------------------------------------------------------
    def generate(self, requests: Sequence[Request]) -> list[Generation]:
        if not requests:
            return []
        return run_sync(self._generate_all(list(requests)))

    async def _generate_all(self, requests: list[Request]) -> list[Generation]:
        client = self._make_client()
        semaphore = asyncio.Semaphore(self.concurrency)

        async def one(request: Request) -> Generation:
            async with semaphore:
                return await self._with_retries(client, request)

        tasks = [asyncio.ensure_future(one(r)) for r in requests]
        try:
            return list(await asyncio.gather(*tasks))
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await client.close()

    async def _with_retries(self, client: Any, request: Request) -> Generation:
        start = time.monotonic()
        retries = 0
        while True:
            with self._lock:
                self.requests_sent += 1
            try:
                gen = await self._call(client, request)
            except Exception as exc:  # noqa: BLE001 - sorted below into retry / stop / this request failed
                action, retry_after = self._classify(exc)
                if action == "again":  # e.g. a parameter switched; not a retry of a transient fault
                    continue
                if action == "stop":
                    raise ModelUnavailable(self._explain(exc)) from None
                if action == "retry" and not self._reached and _refused(exc):
                    # Nothing listens there: retrying a refused first contact only delays the same answer.
                    # Once the server has answered, a refusal may be a restart, and is retried as usual.
                    raise ModelUnavailable(self._explain_refused(exc)) from None
                if action == "retry" and retries < self.retry.max_retries:
                    await asyncio.sleep(self.retry.delay(retries, retry_after, self._rng))
                    retries += 1
                    with self._lock:
                        self.retries_total += 1
                    continue
                if action == "retry" and self._is_connection_error(exc):
                    raise ModelUnavailable(self._explain(exc)) from None
                return Generation("", seconds=time.monotonic() - start, retries=retries,
                                  error=f"{type(exc).__name__}: {_first_line(exc)}")
            self._reached = True
            cost = self.prices.cost(gen.prompt_tokens, gen.completion_tokens)
            return Generation(gen.text, prompt_tokens=gen.prompt_tokens, completion_tokens=gen.completion_tokens,
                              cost_usd=cost, seconds=time.monotonic() - start, retries=retries,
                              finish_reason=gen.finish_reason)

    # -- provider specifics ------------------------------------------------------------------------
    def _make_client(self) -> Any:
        raise NotImplementedError

    async def _call(self, client: Any, request: Request) -> Generation:
        raise NotImplementedError

    def _classify(self, exc: Exception) -> tuple[str, float | None]:
        """``("retry", retry_after)``, ``("stop", None)``, ``("again", None)`` or ``("fail", None)``."""
        raise NotImplementedError

    def _is_connection_error(self, exc: Exception) -> bool:
        raise NotImplementedError

    def _explain(self, exc: Exception) -> str:
        where = self.base_url or f"the {self.provider} API"
        status = getattr(exc, "status_code", None)
        if status in (401, 403):
            return (f"{where} rejected the API key ({status}: {_first_line(exc)}); "
                    f"check {self.key_env} or --api-key")
        if status == 404:
            return (f"{where} does not serve model {self.model!r} or has no such endpoint "
                    f"(404: {_first_line(exc)}); check --model and --base-url")
        if self._is_connection_error(exc):
            hint = " (start one with `proofgym serve-model CHECKPOINT`)" if is_loopback_url(self.base_url) else ""
            return (f"cannot reach {where} after {self.retry.max_retries} retries: {_first_line(exc)}; "
                    f"is the server running{hint}? check --base-url")
        return f"{where}: {type(exc).__name__}: {_first_line(exc)}"


    def _explain_refused(self, exc: Exception) -> str:
        where = self.base_url or f"the {self.provider} API"
        hint = " (start one with `proofgym serve-model CHECKPOINT`)" if is_loopback_url(self.base_url) else ""
        return (f"{where} refused the connection: nothing listens there{hint}; check --base-url "
                f"({_first_line(exc)})")


def _refused(exc: BaseException) -> bool:
    """Whether a connection was refused somewhere in ``exc``'s cause chain (httpx wraps the OSError)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, ConnectionRefusedError):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


class OpenAIAgent(_ApiAgent):
    """Chat completions through the official ``openai`` client, for any OpenAI-compatible server.

    Args:
        model: The model name the server serves.
        base_url: e.g. ``http://127.0.0.1:8000/v1`` (vLLM, ``proofgym serve-model``); ``None``:
            ``OPENAI_BASE_URL``, else OpenAI.
            A URL without a path is tried as given, then with ``/v1`` if the server answers 404.
        api_key: Else ``OPENAI_API_KEY``; for a server on this machine a dummy key is sent.
        sampling: Default sampling parameters. ``seed`` (when set) is sent as ``seed + sample``.
        concurrency: Requests in flight at once.
        timeout: Seconds per request.
        retry: Backoff policy on 429/5xx/timeouts/lost connections.
        prices: USD per million tokens, for the cost in ``info``.
    """

    name = "openai"
    provider = "OpenAI"
    key_env = "OPENAI_API_KEY"

    def __init__(self, model: str, **kwargs: Any) -> None:
        require("openai", "api")
        kwargs["base_url"] = kwargs.get("base_url") or os.environ.get("OPENAI_BASE_URL") or None
        super().__init__(model, **kwargs)
        self._max_tokens_param = "max_tokens"
        self._try_v1 = bool(self.base_url) and urlparse(self.base_url).path in ("", "/")

    def _make_client(self) -> Any:
        import openai

        return _ClientSet(lambda url: openai.AsyncOpenAI(base_url=url, api_key=self.api_key, timeout=self.timeout,
                                                         max_retries=0))

    async def _call(self, clients: Any, request: Request) -> Generation:
        s = request.sampling or self.sampling
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": m["role"], "content": m["content"]} for m in request.messages],
            "temperature": s.temperature,
            "top_p": s.top_p,
            self._max_tokens_param: s.max_tokens,
        }
        if s.seed is not None:
            kwargs["seed"] = s.seed + request.sample
        if s.stop:
            kwargs["stop"] = list(s.stop)
        url = self.base_url
        try:
            response = await clients.get(url).chat.completions.create(**kwargs)
        except Exception as exc:
            exc.proofgym_url = url  # type: ignore[attr-defined]
            raise
        choices = getattr(response, "choices", None) or []
        if not choices:
            raise ValueError("the server's reply has no choices")
        message = choices[0].message
        text = (getattr(message, "content", None) or "") if message is not None else ""
        usage = getattr(response, "usage", None)
        return Generation(
            text,
            prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
            completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
            finish_reason=str(getattr(choices[0], "finish_reason", "") or ""),
        )

    def _classify(self, exc: Exception) -> tuple[str, float | None]:
        import openai

        if isinstance(exc, openai.NotFoundError):
            with self._lock:
                used = getattr(exc, "proofgym_url", self.base_url)
                if used != self.base_url:
                    return "again", None  # another request already moved to /v1
                if self._try_v1:
                    self._try_v1 = False
                    self.base_url = f"{self.base_url}/v1"
                    return "again", None
            return "stop", None
        if isinstance(exc, (openai.AuthenticationError, openai.PermissionDeniedError)):
            return "stop", None
        if isinstance(exc, openai.BadRequestError) and self._max_tokens_param == "max_tokens" \
                and "max_tokens" in str(exc) and "max_completion_tokens" in str(exc):
            self._max_tokens_param = "max_completion_tokens"  # newer OpenAI models refuse max_tokens
            return "again", None
        if isinstance(exc, openai.APIConnectionError):  # includes timeouts
            return "retry", None
        if isinstance(exc, openai.APIStatusError):
            if exc.status_code in RETRYABLE_STATUS or exc.status_code >= 500:
                return "retry", retry_after_seconds(getattr(exc.response, "headers", None))
            return "fail", None
        return "fail", None

    def _is_connection_error(self, exc: Exception) -> bool:
        import openai

        return isinstance(exc, openai.APIConnectionError) and not isinstance(exc, openai.APITimeoutError)


class AnthropicAgent(_ApiAgent):
    """Messages through the official ``anthropic`` client.

    System messages go to ``system``. Of the sampling parameters only ``temperature``
    is sent, and only when the installed SDK still takes it (recent Claude models
    refuse ``temperature`` with ``top_p``, and recent SDKs dropped both). Arguments
    as for :class:`OpenAIAgent`; the key comes from ``ANTHROPIC_API_KEY``.
    """

    name = "anthropic"
    provider = "Anthropic"
    key_env = "ANTHROPIC_API_KEY"

    def __init__(self, model: str, **kwargs: Any) -> None:
        require("anthropic", "api")
        super().__init__(model, **kwargs)

    def _make_client(self) -> Any:
        import anthropic

        return _ClientSet(lambda url: anthropic.AsyncAnthropic(base_url=url, api_key=self.api_key,
                                                               timeout=self.timeout, max_retries=0))

    async def _call(self, clients: Any, request: Request) -> Generation:
        s = request.sampling or self.sampling
        system = "\n\n".join(m["content"] for m in request.messages if m["role"] == "system")
        messages = [{"role": m["role"], "content": m["content"]} for m in request.messages if m["role"] != "system"]
        client = clients.get(self.base_url)
        kwargs: dict[str, Any] = {"model": self.model, "messages": messages, "max_tokens": s.max_tokens}
        if self._sends_temperature(client):
            kwargs["temperature"] = s.temperature
        if system:
            kwargs["system"] = system
        if s.stop:
            kwargs["stop_sequences"] = list(s.stop)
        response = await client.messages.create(**kwargs)
        text = "".join(getattr(block, "text", "") for block in (response.content or [])
                       if getattr(block, "type", "") == "text")
        usage = getattr(response, "usage", None)
        return Generation(text, prompt_tokens=int(getattr(usage, "input_tokens", 0) or 0),
                          completion_tokens=int(getattr(usage, "output_tokens", 0) or 0),
                          finish_reason=str(getattr(response, "stop_reason", "") or ""))

    @staticmethod
    def _sends_temperature(client: Any) -> bool:
        """Whether this SDK's ``messages.create`` takes ``temperature`` (newer ones dropped sampling knobs)."""
        try:
            return "temperature" in inspect.signature(client.messages.create).parameters
        except (TypeError, ValueError):
            return False

    def _classify(self, exc: Exception) -> tuple[str, float | None]:
        import anthropic

        if isinstance(exc, (anthropic.AuthenticationError, anthropic.PermissionDeniedError, anthropic.NotFoundError)):
            return "stop", None
        if isinstance(exc, anthropic.APIConnectionError):
            return "retry", None
        if isinstance(exc, anthropic.APIStatusError):
            if exc.status_code in RETRYABLE_STATUS or exc.status_code >= 500:
                return "retry", retry_after_seconds(getattr(exc.response, "headers", None))
            return "fail", None
        return "fail", None

    def _is_connection_error(self, exc: Exception) -> bool:
        import anthropic

        return isinstance(exc, anthropic.APIConnectionError) and not isinstance(exc, anthropic.APITimeoutError)


class _ClientSet:
    """One async client per base URL within a batch (the URL may move to ``/v1`` mid-batch)."""

    def __init__(self, factory: Any) -> None:
        self._factory = factory
        self._clients: dict[str | None, Any] = {}

    def get(self, url: str | None) -> Any:
        if url not in self._clients:
            self._clients[url] = self._factory(url)
        return self._clients[url]

    async def close(self) -> None:
        for client in self._clients.values():
            await client.close()
