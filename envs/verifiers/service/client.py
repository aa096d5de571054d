"""Clients of the verifier service (``proofgym serve-verifier``), standard library only.

- :class:`VerifierServiceClient`: ``check`` a batch, read ``health`` and ``metrics``.
- :class:`ServiceVerifier`: the service as one system's :class:`~proofgym.envs.verifiers.base.Verifier`.
  It pickles to a URL and a token, so ``gymnasium.vector.AsyncVectorEnv`` sub-processes can all
  share one warm pool instead of each starting its own provers.
- :func:`service_reward_function`: a TRL-style reward function ``(prompts, completions, task_id,
  **columns) -> list[float | None]`` that scores a batch with one request (``None`` for a harness
  failure, which TRL leaves out of the loss).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

from proofgym.envs.errors import TaskFormatError, VerifierCrashed
from proofgym.envs.types import CheckResult, Task

__all__ = ["ServiceVerifier", "VerifierServiceClient", "result_from_dict", "service_reward_function"]



#: The longest ``Retry-After`` a client waits in one go, whatever the service asks.
MAX_RETRY_AFTER_S = 30.0


def _retry_after(exc: urllib.error.HTTPError) -> float | None:
    """Seconds a busy answer asks the client to wait (``Retry-After`` in seconds), capped; None without one."""
    value = exc.headers.get("Retry-After") if exc.headers is not None else None
    try:
        return min(max(float(value), 0.0), MAX_RETRY_AFTER_S) if value is not None else None
    except ValueError:
        return None


def result_from_dict(row: dict[str, Any]) -> CheckResult:
    """The :class:`CheckResult` of a ``/check`` result row: :meth:`CheckResult.from_dict`."""
    return CheckResult.from_dict(row)


class VerifierServiceClient:
    """Talks to one verifier service. Connection errors and non-2xx answers raise :class:`VerifierCrashed`."""

    def __init__(self, url: str, *, token: str | None = None, timeout_s: float = 3600.0,
                 busy_retries: int = 5) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s
        self.busy_retries = busy_retries
        self.busy_waits = 0  # how many times a busy service (429/503 with Retry-After) was waited for

    def _call(self, method: str, path: str, payload: Any = None) -> Any:
        """One request. A busy answer (429 or 503 with ``Retry-After``: the queue is full, or a batch met a
        harness failure) is waited for as the service asks, up to ``busy_retries`` times (each wait at most
        :data:`MAX_RETRY_AFTER_S`), then raised like any other failure."""
        data = None if payload is None else json.dumps(payload, ensure_ascii=False).encode("utf-8")
        for attempt in range(self.busy_retries + 1):
            request = urllib.request.Request(self.url + path, data=data, method=method)
            request.add_header("Content-Type", "application/json")
            if self.token:
                request.add_header("Authorization", f"Bearer {self.token}")
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as response:  # noqa: S310 - http(s) URL
                    return json.loads(response.read().decode("utf-8"))
            except urllib.error.HTTPError as exc:
                try:
                    detail = json.loads(exc.read().decode("utf-8")).get("error", "")
                except (ValueError, AttributeError):
                    detail = ""
                wait = _retry_after(exc) if exc.code in (429, 503) else None
                if wait is None or attempt == self.busy_retries:
                    raise VerifierCrashed(f"verifier service {self.url}{path} answered {exc.code}: {detail}"
                                          + (f" (after {attempt} waits)" if wait is not None else "")) from None
                self.busy_waits += 1
                time.sleep(wait)
            except (urllib.error.URLError, OSError) as exc:
                raise VerifierCrashed(f"verifier service {self.url} unreachable: {exc}") from None
        raise AssertionError("unreachable: the last attempt returns or raises")

    def check(self, requests: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """``POST /check``: result rows in input order (``verdict: None`` + ``harness_error`` for a harness failure)."""
        return self._call("POST", "/check", {"requests": list(requests)})["results"]

    def health(self) -> dict[str, Any]:
        return self._call("GET", "/health")

    def metrics(self) -> dict[str, Any]:
        return self._call("GET", "/metrics")


class ServiceVerifier:
    """One system's :class:`~proofgym.envs.verifiers.base.Verifier`, answered by a verifier service.

    ``gym.make("proofgym/WholeProof-v0", tasks=..., verifier=ServiceVerifier(url))`` inside each
    ``AsyncVectorEnv`` sub-process: the envs share the service's warm workers.
    """

    def __init__(self, url: str, system: str = "coq", *, token: str | None = None,
                 timeout_s: float = 3600.0) -> None:
        self.url, self.system, self.token, self.timeout_s = url, system, token, timeout_s
        self._client = VerifierServiceClient(url, token=token, timeout_s=timeout_s)

    def __getstate__(self) -> dict[str, Any]:
        return {"url": self.url, "system": self.system, "token": self.token, "timeout_s": self.timeout_s}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.url, self.system, self.token, self.timeout_s = (state["url"], state["system"], state["token"],
                                                             state["timeout_s"])
        self._client = VerifierServiceClient(self.url, token=self.token, timeout_s=self.timeout_s)

    def check(self, task: Task, proof: str) -> CheckResult:
        if task.system != self.system:
            raise TaskFormatError(f"task {task.id} is for {task.system!r}, not {self.system}")
        row = self._client.check([{"task": task.to_dict(), "proof": proof}])[0]
        if row.get("verdict") is None:
            raise VerifierCrashed(f"{row.get('error_kind')}: {row.get('harness_error')}")
        return result_from_dict(row)

    def close(self) -> None:
        pass

    def __enter__(self) -> ServiceVerifier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def service_reward_function(url: str, *, token: str | None = None, parse: bool = True, timeout_s: float = 3600.0):
    """A TRL reward function scored by the verifier service (started with ``--suite``).

    The dataset needs a ``task_id`` column. Completions may be strings or chat messages.

    >>> reward = service_reward_function("http://127.0.0.1:8000")  # doctest: +SKIP
    >>> reward(prompts=["..."], completions=["```coq\\nProof. lia. Qed.\\n```"], task_id=["tiny.lia"])  # doctest: +SKIP
    [1.0]
    """
    client = VerifierServiceClient(url, token=token, timeout_s=timeout_s)

    def proofgym_verifier_reward(prompts: list[Any], completions: list[Any], task_id: list[str],
                                 **columns: Any) -> list[float | None]:
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        rows = client.check([{"task_id": t, "proof": text, "parse": parse} for t, text in
                             zip(task_id, texts, strict=True)])
        return [row["reward"] for row in rows]

    return proofgym_verifier_reward
