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
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

from proofgym.envs.errors import TaskFormatError, VerifierCrashed
from proofgym.envs.types import CheckResult, Task

__all__ = ["ServiceVerifier", "VerifierServiceClient", "result_from_dict", "service_reward_function"]



def result_from_dict(row: dict[str, Any]) -> CheckResult:
    """The :class:`CheckResult` of a ``/check`` result row: :meth:`CheckResult.from_dict`."""
    return CheckResult.from_dict(row)


class VerifierServiceClient:
    """Talks to one verifier service. Connection errors and non-2xx answers raise :class:`VerifierCrashed`."""

    def __init__(self, url: str, *, token: str | None = None, timeout_s: float = 3600.0) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s

    def _call(self, method: str, path: str, payload: Any = None) -> Any:
        data = None if payload is None else json.dumps(payload, ensure_ascii=False).encode("utf-8")
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
            raise VerifierCrashed(f"verifier service {self.url}{path} answered {exc.code}: {detail}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise VerifierCrashed(f"verifier service {self.url} unreachable: {exc}") from None

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
        self.__init__(state["url"], state["system"], token=state["token"], timeout_s=state["timeout_s"])

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
