"""The verifier HTTP service: ``proofgym serve-verifier``.

Why a service: a trainer whose generation must not block on verification (TRL, verl, OpenRLHF's
remote reward URL) posts batches of ``{task, proof}`` and gets JSON verdicts back, while the
checks run on a :class:`~proofgym.envs.verifiers.pool.VerifierPool` (local workers or Ray actors)
that keeps every context warm across requests and trainers.

Endpoints (JSON in, JSON out):

- ``POST /check``: ``{"requests": [{"id": any, "task": {...} | "task_id": str, "proof": str,
  "parse": bool}]}`` (or a bare list) -> ``{"results": [...]}`` in input order. Each result has
  ``verdict`` and ``reward``, or ``verdict: null``, ``reward: null`` and ``harness_error`` when
  the verifier broke: a harness failure is never a score. ``task_id`` needs ``--suite``;
  ``parse`` takes the proof out of a model reply (last code fence, see ``envs/parsing.py``).
- ``POST /reward``: OpenRLHF's remote reward model protocol: ``{"query": [...], "prompts": [...],
  "labels": [...]}`` with task ids as labels -> ``{"rewards": [...], "scores": [...], "extra_logs":
  {...}}``. A harness failure answers 503, which OpenRLHF retries, because it cannot take a
  missing reward and 0 would be a lie.
- ``GET /health``: liveness, no token needed (load balancers); 503 when no worker is alive.
- ``GET /metrics``: queue depth, checks per second, verdict and harness-failure counts, workers;
  JSON, or the Prometheus text format with ``?format=prometheus``.

Limits: bodies over ``max_body_bytes`` get 413 before they are read, batches over ``max_batch``
get 413, a task field over its bound (``proofgym.envs.types.TASK_FIELD_LIMITS``) gets 413, and
when more than ``max_queue`` checks are pending a request gets 503 with ``Retry-After``.

Security: a token (``Authorization: Bearer T``) is required for everything but ``/health`` when
one is set, and the service refuses to listen beyond loopback without one. Every request first
passes the request guard (``proofgym/http_guard.py``): a ``Host`` that is not this server (DNS
rebinding) gets 421, a request that carries an ``Origin`` (a web page) gets 403 unless that origin
was allowed (``allowed_origins``, ``--allow-origin``), and a ``POST`` body that is not
``application/json`` (a page's CORS "simple" request) gets 415. So no web page the operator opens
can run checks or read ``/metrics``, with or without a token.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Mapping
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from proofgym.envs.errors import ProofgymError, TaskFormatError, TaskTooLarge
from proofgym.envs.parsing import parse_proof, statement_to_strip
from proofgym.envs.rewards import RewardMap
from proofgym.envs.types import Task
from proofgym.envs.verifiers.pool import HarnessFailure, PoolResult, VerifierPool
from proofgym.http_guard import RequestGuard, RequestRefused, check_token, is_loopback_host, read_json_body

__all__ = ["ServiceConfig", "ServiceConfigError", "VerifierService"]

logger = logging.getLogger(__name__)

TOKEN_ENV = "PROOFGYM_VERIFIER_TOKEN"


class ServiceConfigError(ProofgymError, ValueError):
    """The service cannot start as configured (e.g. beyond loopback without a token)."""


@dataclass(frozen=True)
class ServiceConfig:
    """Options of :class:`VerifierService`.

    Attributes:
        host: Address to listen on. Anything but loopback needs ``token``.
        port: TCP port (0: any free port; see :attr:`VerifierService.url`).
        token: Shared secret clients send as ``Authorization: Bearer <token>``.
        max_body_bytes: Largest request body; larger ones get 413 unread.
        max_batch: Most checks in one request.
        max_queue: Pending checks (all clients) above which requests get 503 + Retry-After.
        client_timeout_s: Socket timeout for a client that stops sending (slow-loris).
        allowed_origins: Web page origins (``scheme://host[:port]``) whose requests are served; any
            other request that carries an ``Origin`` gets 403.
        allowed_hosts: Names besides loopback, the bound address and this machine's host name that
            clients may send in ``Host`` (others get 421).
    """

    host: str = "127.0.0.1"
    port: int = 8000
    token: str | None = None
    max_body_bytes: int = 16 * 1024 * 1024
    max_batch: int = 1024
    max_queue: int = 8192
    client_timeout_s: float = 120.0
    allowed_origins: tuple[str, ...] = ()
    allowed_hosts: tuple[str, ...] = ()


class _Metrics:
    """Counters behind ``/metrics``; checks per second over a sliding minute."""

    WINDOW_S = 60.0

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.started = time.monotonic()
        self.checks = 0
        self.verdicts: Counter[str] = Counter()
        self.harness: Counter[str] = Counter()
        self.requests: Counter[tuple[str, int]] = Counter()
        self.recent: deque[float] = deque()
        self.check_seconds = 0.0

    def record(self, result: PoolResult) -> None:
        now = time.monotonic()
        with self.lock:
            self.checks += 1
            self.check_seconds += result.total_s
            if isinstance(result.outcome, HarnessFailure):
                self.harness[result.outcome.boundary.value] += 1
            else:
                self.verdicts[result.outcome.verdict.value] += 1
            self.recent.append(now)
            self._trim(now)

    def request(self, path: str, status: int) -> None:
        with self.lock:
            self.requests[(path, status)] += 1

    def _trim(self, now: float) -> None:
        while self.recent and self.recent[0] < now - self.WINDOW_S:
            self.recent.popleft()

    def snapshot(self) -> dict[str, Any]:
        now = time.monotonic()
        with self.lock:
            self._trim(now)
            uptime = now - self.started
            window = min(self.WINDOW_S, max(uptime, 1e-9))
            return {
                "uptime_s": round(uptime, 3),
                "checks_total": self.checks,
                "checks_per_s": round(len(self.recent) / window, 4),
                "checks_per_s_lifetime": round(self.checks / max(uptime, 1e-9), 4),
                "mean_check_latency_s": round(self.check_seconds / self.checks, 4) if self.checks else 0.0,
                "verdicts": dict(self.verdicts),
                "harness_failures": dict(self.harness),
                "requests": {f"{path} {status}": n for (path, status), n in sorted(self.requests.items())},
            }


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    service: VerifierService


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    server_version = "proofgym-verifier/1"
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        # Every read of the request (line, headers, body) gives up after this: a client that stops
        # sending (slow-loris) is dropped. (The stdlib's own ``timeout`` is a class attribute.)
        self.request.settimeout(self.server.service.config.client_timeout_s)
        super().setup()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's signature
        logger.debug("%s %s", self.address_string(), format % args)

    # -- plumbing -----------------------------------------------------------------------------
    def _send_json(self, status: int, payload: Any, headers: Mapping[str, str] | None = None) -> None:
        body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        self._send(status, body, "application/json", headers)

    def _send(self, status: int, body: bytes, content_type: str, headers: Mapping[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in {**self.server.service.guard.cors_headers(self.headers), **(headers or {})}.items():
            self.send_header(key, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
        self.server.service.metrics.request(urlsplit(self.path).path, int(status))

    def _fail(self, error: RequestRefused) -> None:
        if error.close:
            self.close_connection = True
        self._send_json(error.status, {"error": error.message}, error.headers)

    def _authorize(self) -> None:
        check_token(self.headers, self.server.service.config.token)

    # -- routes -------------------------------------------------------------------------------
    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        url = urlsplit(self.path)
        service = self.server.service
        try:
            service.guard.check("GET", self.headers)
            if url.path == "/health":
                health = service.health()
                self._send_json(HTTPStatus.OK if health["status"] == "ok" else HTTPStatus.SERVICE_UNAVAILABLE, health)
            elif url.path == "/metrics":
                self._authorize()
                fmt = parse_qs(url.query).get("format", [""])[0]
                if fmt == "prometheus" or (not fmt and "text/plain" in self.headers.get("Accept", "")):
                    body = service.prometheus().encode()
                    self._send(HTTPStatus.OK, body, "text/plain; version=0.0.4; charset=utf-8")
                else:
                    self._send_json(HTTPStatus.OK, service.metrics_snapshot())
            elif url.path in ("/check", "/reward"):
                raise RequestRefused(HTTPStatus.METHOD_NOT_ALLOWED, f"use POST {url.path}", {"Allow": "POST"})
            else:
                raise RequestRefused(HTTPStatus.NOT_FOUND, f"no endpoint {url.path}; see /health /metrics /check /reward")
        except RequestRefused as error:
            self._fail(error)

    def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
        url = urlsplit(self.path)
        service = self.server.service
        try:
            # The guard runs before anything reads the body or looks at the token: a refused page learns nothing.
            service.guard.check("POST", self.headers)
            if url.path not in ("/check", "/reward"):
                raise RequestRefused(HTTPStatus.NOT_FOUND, f"no endpoint POST {url.path}; use /check or /reward",
                                     close=True)
            try:
                self._authorize()
            except RequestRefused as error:
                error.close = True  # the body stays unread
                raise
            payload = read_json_body(self, service.config.max_body_bytes)
            if url.path == "/check":
                self._send_json(HTTPStatus.OK, service.check(payload))
            else:
                self._send_json(HTTPStatus.OK, service.openrlhf_reward(payload))
        except RequestRefused as error:
            self._fail(error)
        except ProofgymError as exc:  # e.g. the pool is closing: the client may retry elsewhere
            self._fail(RequestRefused(HTTPStatus.SERVICE_UNAVAILABLE, f"{type(exc).__name__}: {exc}",
                                      {"Retry-After": "1"}))
        except Exception as exc:  # noqa: BLE001 - one bad request must not take the service down
            logger.exception("verifier service: internal error on %s", url.path)
            self._fail(RequestRefused(HTTPStatus.INTERNAL_SERVER_ERROR,
                                      f"internal error: {type(exc).__name__}: {exc}"))

    def do_OPTIONS(self) -> None:  # noqa: N802 - the stdlib's name
        # A CORS preflight: answered only for an origin the operator allowed.
        try:
            headers = self.server.service.guard.preflight(self.headers)
        except RequestRefused as error:
            self._fail(error)
            return
        self._send(HTTPStatus.NO_CONTENT, b"", "text/plain", headers)


class VerifierService:
    """An HTTP front end for a :class:`VerifierPool`; see the module docstring.

    Args:
        pool: Where checks run. Closed by :meth:`shutdown` when ``owns_pool``.
        config: Address, token and limits.
        tasks: Tasks by id, so that clients can send ``task_id`` instead of the whole task.
        reward_map: Verdict -> reward for the ``reward`` fields.

    Example::

        with LocalVerifierPool(4) as pool:
            VerifierService(pool, ServiceConfig(port=8000)).serve_forever()
    """

    def __init__(self, pool: VerifierPool, config: ServiceConfig | None = None, *,
                 tasks: Mapping[str, Task] | None = None, reward_map: RewardMap | None = None,
                 owns_pool: bool = False) -> None:
        config = config or ServiceConfig()
        self.guard = self.validate(config)
        self.pool = pool
        self.config = config
        self.tasks = dict(tasks or {})
        self.reward_map = reward_map or RewardMap()
        self.owns_pool = owns_pool
        self.metrics = _Metrics()
        self._server = _Server((config.host, config.port), _Handler)
        self._server.service = self
        self._thread: threading.Thread | None = None
        self._stopped = False

    @staticmethod
    def validate(config: ServiceConfig) -> RequestGuard:
        """The request guard for ``config``; :class:`ServiceConfigError` if the service cannot run so."""
        if not is_loopback_host(config.host) and not config.token:
            raise ServiceConfigError(
                f"refusing to listen on {config.host} without a token: anyone who can reach it could run checks; "
                f"pass --token (or set {TOKEN_ENV}), or listen on 127.0.0.1"
            )
        if config.token is not None and len(config.token) < 16:
            raise ServiceConfigError("the token is too short: use at least 16 characters (e.g. `openssl rand -hex 24`)")
        try:
            return RequestGuard.create(config.host, allowed_origins=config.allowed_origins,
                                       allowed_hosts=config.allowed_hosts)
        except ValueError as exc:
            raise ServiceConfigError(f"{exc} (--allow-origin / --allow-host)") from None

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://{'[' + host + ']' if ':' in host else host}:{port}"

    def serve_forever(self) -> None:
        """Serve until :meth:`shutdown` (from another thread) or KeyboardInterrupt."""
        self._server.serve_forever(poll_interval=0.2)

    def start(self) -> VerifierService:
        """Serve from a background thread (tests, notebooks); returns self."""
        self._thread = threading.Thread(target=self.serve_forever, name="proofgym-verifier-http", daemon=True)
        self._thread.start()
        return self

    def shutdown(self) -> None:
        """Stop serving, close the socket (and the pool when owned). Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=30)
        self._server.server_close()
        if self.owns_pool:
            self.pool.close()

    def __enter__(self) -> VerifierService:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # -- the work -----------------------------------------------------------------------------
    def _task(self, item: Mapping[str, Any], index: int) -> Task:
        if "task" in item:
            try:
                return Task.from_dict(item["task"], source=f"requests[{index}].task")
            except TaskTooLarge as exc:
                raise RequestRefused(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, str(exc)) from None
            except TaskFormatError as exc:
                raise RequestRefused(HTTPStatus.BAD_REQUEST, str(exc)) from None
        task_id = item.get("task_id")
        if not isinstance(task_id, str):
            raise RequestRefused(HTTPStatus.BAD_REQUEST, f"requests[{index}] needs 'task' (an object) or 'task_id'")
        if task_id not in self.tasks:
            hint = "" if self.tasks else " (this service has no suite: start it with --suite, or send 'task')"
            raise RequestRefused(HTTPStatus.BAD_REQUEST, f"requests[{index}]: unknown task_id {task_id!r}{hint}")
        return self.tasks[task_id]

    def _run(self, checks: list[tuple[Any, Task, Any]]) -> list[PoolResult]:
        if not checks:
            return []
        if len(checks) > self.config.max_batch:
            raise RequestRefused(HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                             f"{len(checks)} checks in one request; the limit is {self.config.max_batch}")
        if self.pool.pending + len(checks) > self.config.max_queue:
            raise RequestRefused(HTTPStatus.SERVICE_UNAVAILABLE,
                             f"{self.pool.pending} checks are queued; try again shortly", {"Retry-After": "1"})
        futures = [self.pool.submit(task, proof, request_id=rid) for rid, task, proof in checks]
        results = [f.result() for f in futures]
        for result in results:
            self.metrics.record(result)
        return results

    def check(self, payload: Any) -> dict[str, Any]:
        """``POST /check``."""
        items = payload.get("requests") if isinstance(payload, dict) else payload
        if not isinstance(items, list):
            raise RequestRefused(HTTPStatus.BAD_REQUEST, "send {\"requests\": [{\"task\" or \"task_id\", \"proof\"}, ...]}")
        checks = []
        for index, item in enumerate(items):
            if not isinstance(item, dict):
                raise RequestRefused(HTTPStatus.BAD_REQUEST, f"requests[{index}] must be an object")
            task = self._task(item, index)
            proof = item.get("proof")
            if item.get("parse") and isinstance(proof, str):
                proof = _parse_reply(proof, task)
            checks.append((item.get("id", index), task, proof))
        results = self._run(checks)
        out = []
        for result in results:
            row = result.to_dict()
            out.append({"id": row.pop("request_id"), "task_id": row.pop("task_id"), "verdict": row.pop("verdict"),
                        "reward": self.reward_map(result.result), **row})
        return {"results": out}

    def openrlhf_reward(self, payload: Any) -> dict[str, Any]:
        """``POST /reward``: OpenRLHF's ``--remote_rm_url`` protocol, with task ids as ``labels``."""
        if not isinstance(payload, dict) or not isinstance(payload.get("query"), list):
            raise RequestRefused(HTTPStatus.BAD_REQUEST, "send {\"query\": [...], \"prompts\": [...], \"labels\": [...]}")
        queries = payload["query"]
        prompts = payload.get("prompts") or [""] * len(queries)
        labels = payload.get("labels")
        if not isinstance(labels, list) or len(labels) != len(queries) or len(prompts) != len(queries):
            raise RequestRefused(HTTPStatus.BAD_REQUEST, "'labels' (task ids) and 'prompts' must match 'query' in length")
        checks = []
        for index, (query, prompt, label) in enumerate(zip(queries, prompts, labels, strict=True)):
            task = self._task({"task_id": label} if isinstance(label, str) else {"task": label}, index)
            text = query[len(prompt):] if isinstance(query, str) and isinstance(prompt, str) \
                and query.startswith(prompt) else query
            checks.append((index, task, _parse_reply(text, task) if isinstance(text, str) else text))
        results = self._run(checks)
        broken = [r.failure for r in results if r.failure is not None]
        if broken:
            raise RequestRefused(HTTPStatus.SERVICE_UNAVAILABLE,
                             f"{len(broken)} of {len(results)} checks had a harness failure (first: "
                             f"{str(broken[0])[:200]}); retry the batch",
                             {"Retry-After": "1"})
        rewards = [self.reward_map(r.result) for r in results]
        return {"rewards": rewards, "scores": rewards,
                "extra_logs": {"verdict_ok": [float(r.ok) for r in results],
                               "verdict_cheating": [float(r.verdict is not None and r.verdict.value == "CHEATING")
                                                    for r in results]}}

    # -- health and metrics -------------------------------------------------------------------
    def health(self) -> dict[str, Any]:
        stats = self.pool.stats()
        alive = int(stats.get("workers_alive", 0))
        return {"status": "ok" if alive > 0 and not self.pool.closed else "unavailable", "engine": self.pool.engine,
                "workers": stats.get("workers", 0), "workers_alive": alive}

    def metrics_snapshot(self) -> dict[str, Any]:
        stats = self.pool.stats()
        snap = self.metrics.snapshot()
        snap.update(
            engine=self.pool.engine,
            queue_depth=self.pool.pending,
            queued=stats.get("queued", 0),
            running=stats.get("running", 0),
            workers=stats.get("workers", 0),
            workers_alive=stats.get("workers_alive", 0),
            worker_restarts=stats.get("worker_restarts", 0),
            retries=stats.get("retries", 0),
            verdict_cache=stats.get("verdict_cache", {}),
        )
        return snap

    def prometheus(self) -> str:
        """``/metrics?format=prometheus``: the same numbers in Prometheus' text format."""
        snap = self.metrics_snapshot()
        lines: list[str] = []

        def metric(name: str, kind: str, help_text: str, samples: list[tuple[str, float]]) -> None:
            lines.append(f"# HELP proofgym_{name} {help_text}")
            lines.append(f"# TYPE proofgym_{name} {kind}")
            lines.extend(f"proofgym_{name}{labels} {value}" for labels, value in samples)

        metric("queue_depth", "gauge", "Checks submitted and not finished.", [("", snap["queue_depth"])])
        metric("running_checks", "gauge", "Checks running on a worker now.", [("", snap["running"])])
        metric("workers_alive", "gauge", "Verifier worker processes up.", [("", snap["workers_alive"])])
        metric("worker_restarts_total", "counter", "Workers replaced after dying.", [("", snap["worker_restarts"])])
        metric("checks_per_second", "gauge", "Checks finished per second over the last minute.",
               [("", snap["checks_per_s"])])
        metric("checks_total", "counter", "Checks finished, by verdict.",
               [(f'{{verdict="{v}"}}', n) for v, n in sorted(snap["verdicts"].items())] or [('{verdict="OK"}', 0)])
        metric("harness_failures_total", "counter", "Checks with no verdict because the harness broke, by kind.",
               [(f'{{kind="{k}"}}', n) for k, n in sorted(snap["harness_failures"].items())]
               or [('{kind="verifier"}', 0)])
        cache = snap.get("verdict_cache") or {}
        metric("verdict_cache_hits_total", "counter", "Checks answered from the verdict cache (repeats), or by an "
               "identical check running at the time.", [("", cache.get("hits", 0) + cache.get("coalesced", 0))])
        return "\n".join(lines) + "\n"


def _parse_reply(text: str, task: Task) -> str:
    """The proof in a model reply (last fenced block, statement copy removed); see ``envs/parsing.py``."""

    return parse_proof(text, statement=statement_to_strip(task)).proof
