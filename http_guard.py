"""The request guard every proofgym server runs first: ``serve-verifier``, ``serve-model`` and the OpenEnv app.

``serve-verifier`` and ``serve-model`` are stdlib ``http.server`` servers and call :class:`RequestGuard`
and :func:`read_json_body` from their handlers; OpenEnv's FastAPI app (HTTP and WebSocket, served by
uvicorn) runs inside :class:`GuardedApp`, the same rules as ASGI middleware. One set of rules, two
server stacks: see docs/integrations/openenv.md for why ``serve-verifier`` stays on the stdlib.

Why: a server on loopback without a token is still reachable from every web page the operator
opens. A page can send a CORS "simple" request (``POST`` with ``text/plain``, no preflight) to
``http://127.0.0.1:8000/check``, and a DNS-rebinding page (``attacker.example`` re-pointed at
127.0.0.1) can even read the answers, because to the browser they are same-origin. So, before
anything else, every request must pass:

- **Host**: the ``Host`` header must name this server: a loopback name (``localhost``,
  127.0.0.0/8, ``::1``), the address it is bound to, this machine's host name when it is bound
  beyond loopback, any IP address when it is bound to every interface (an IP literal cannot be
  rebound), or a name given with ``--allow-host``. A rebinding page always sends its own name:
  421 Misdirected Request. A request without a ``Host`` header: 400.
- **Origin**: browsers send ``Origin`` on every cross-origin request that could matter (and on
  same-origin ``POST``s); proofgym's clients (urllib, http.client, openai, anthropic, curl) never
  do. A request that carries one is refused (403) unless it is listed with ``--allow-origin``; so is
  one whose ``Sec-Fetch-Site`` says a browser sent it from another site.
- **Content-Type**: a ``POST`` body must be ``application/json`` (415 otherwise). Browsers cannot
  send that cross-origin without a preflight (``OPTIONS``), which is answered only for an allowed
  origin.

Bodies: :func:`read_json_body` (and :class:`GuardedApp`) read at most ``max_bytes`` (413 unread
beyond), need a ``Content-Length`` (411), and refuse JSON nested deeper than :data:`MAX_JSON_DEPTH`
(400; the stdlib parser would raise ``RecursionError``, a 500, at about 1,000 levels). Tokens:
:func:`check_token` (401), the same for every server that has one.
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import ipaddress
import json
import socket
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from email.message import Message
from typing import Any, Protocol
from urllib.parse import urlsplit

from proofgym.envs.errors import ProofgymError
from proofgym.envs.types import nesting_depth

__all__ = [
    "MAX_JSON_DEPTH",
    "GuardConfigError",
    "GuardedApp",
    "RequestGuard",
    "RequestRefused",
    "body_length",
    "check_token",
    "headers_message",
    "is_loopback_host",
    "normalize_origin",
    "read_json_body",
]

#: Deepest JSON nesting a request body may have. Real bodies are about 6 levels deep
#: (``{"requests": [{"task": {"metadata": {...}}}]}``); the stdlib parser breaks near 1,000.
MAX_JSON_DEPTH = 64


class GuardConfigError(ProofgymError, ValueError):
    """An ``--allow-origin`` or ``--allow-host`` value that is not an origin or a host name."""


class RequestRefused(Exception):
    """A request the guard refuses: an HTTP status, a message that says why, extra response headers."""

    def __init__(self, status: int, message: str, headers: Mapping[str, str] | None = None, *,
                 close: bool = False) -> None:
        super().__init__(message)
        self.status = int(status)
        self.message = message
        self.headers = dict(headers or {})
        self.close = close  # the body was left unread: the connection cannot be reused


def _strip_host(host: str) -> str:
    host = host.strip().lower()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host[:-1] if host.endswith(".") else host


def _ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        address = ipaddress.ip_address(_strip_host(host))
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def is_loopback_host(host: str) -> bool:
    """Whether ``host`` (a bind address or a Host header's name) means this machine only.

    ``localhost``, 127.0.0.0/8 and ``::1`` (also as ``::ffff:127.0.0.1``) are; ``0.0.0.0`` and
    ``::`` are not: bound to them, a server listens on every interface. ``*.localhost`` is not
    either: outside browsers, such a name goes to DNS like any other.
    """
    if _strip_host(host) == "localhost":
        return True
    address = _ip(host)
    return address is not None and address.is_loopback


def _is_wildcard(host: str) -> bool:
    address = _ip(host)
    return _strip_host(host) == "" or (address is not None and address.is_unspecified)


def _host_header_name(value: str) -> str | None:
    """The name in a ``Host`` header (``name``, ``name:port``, ``[v6]:port``), lowercased; None if malformed."""
    value = value.strip()
    if not value or any(c in value for c in "/?#@ \t\\"):
        return None
    if value.startswith("["):
        end = value.find("]")
        if end < 0 or (value[end + 1:] and not (value[end + 1] == ":" and value[end + 2:].isdigit())):
            return None
        return _strip_host(value[: end + 1])
    name, sep, port = value.rpartition(":") if value.count(":") == 1 else (value, "", "")
    if sep and not port.isdigit():
        return None
    return _strip_host(name if sep else value) or None


def normalize_origin(origin: str) -> str:
    """``scheme://host[:port]`` in lower case, as browsers send ``Origin``; GuardConfigError for anything else."""
    text = origin.strip().rstrip("/")
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path or parts.query \
            or parts.fragment or parts.username or parts.password:
        raise GuardConfigError(f"{origin!r} is not an origin: give scheme://host[:port], e.g. http://localhost:3000")
    try:
        port = parts.port
    except ValueError:
        raise GuardConfigError(f"{origin!r} has a bad port") from None
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{parts.scheme}://{host}" + (f":{port}" if port is not None else "")


@dataclass(frozen=True)
class RequestGuard:
    """Host, Origin and Content-Type rules for one server; see the module docstring.

    Args:
        bound_host: The address the server listens on (as given to ``bind``).
        allowed_origins: Origins (``scheme://host[:port]``) whose browser requests are served.
        allowed_hosts: Extra names clients may use in ``Host`` (e.g. a DNS name of this machine).
    """

    bound_host: str
    allowed_origins: frozenset[str] = frozenset()
    allowed_hosts: frozenset[str] = frozenset()
    _names: frozenset[str] = field(default=frozenset(), repr=False)

    @classmethod
    def create(cls, bound_host: str, *, allowed_origins: Iterable[str] = (),
               allowed_hosts: Iterable[str] = ()) -> RequestGuard:
        """A guard for a server bound to ``bound_host``; :class:`GuardConfigError` for a bad origin or host name."""
        origins = frozenset(normalize_origin(o) for o in allowed_origins)
        hosts = set()
        for name in allowed_hosts:
            parsed = _host_header_name(name)
            if parsed is None:
                raise GuardConfigError(f"{name!r} is not a host name: give the name clients put in Host, e.g. node3")
            hosts.add(parsed)
        names = {_strip_host(bound_host)}
        if not is_loopback_host(bound_host):
            # Bound beyond loopback (a token is required there): clients on other machines call it by name.
            names.add(_strip_host(socket.gethostname()))
        return cls(bound_host, origins, frozenset(hosts), frozenset(names - {""}))

    # -- the checks ---------------------------------------------------------------------------
    def check(self, method: str, headers: Message, *, local_address: str | None = None) -> None:
        """Raise :class:`RequestRefused` unless the request's Host, Origin and (for POST) Content-Type pass.

        ``local_address``: the address the connection came in on, when the server knows it (an ASGI
        server's ``scope["server"]``); that IP literal, and this machine's name when it is not loopback,
        are names of this server too.
        """
        self._check_host(headers, local_address)
        self._check_origin(headers)
        if method.upper() == "POST":
            check_json_content_type(headers)

    def _check_host(self, headers: Message, local_address: str | None = None) -> None:
        values = headers.get_all("Host") or []
        if len(values) != 1:
            raise RequestRefused(400, "send exactly one Host header" if values else "a Host header is required",
                                 close=True)
        name = _host_header_name(values[0])
        if name is None:
            raise RequestRefused(400, f"malformed Host header {values[0][:100]!r}", close=True)
        if self.host_allowed(name) or (local_address is not None and _names_local_address(name, local_address)):
            return
        raise RequestRefused(
            421, f"Host {name[:100]!r} does not name this server (it answers to localhost, 127.0.0.1, ::1 and the "
            f"address it is bound to): a page that re-points its own name here (DNS rebinding) is refused; "
            f"to call it by another name, start it with --allow-host NAME", close=True)

    def host_allowed(self, name: str) -> bool:
        if is_loopback_host(name) or name in self._names or name in self.allowed_hosts:
            return True
        # Bound to every interface, any address that reached it is one of this machine's, and an IP
        # literal cannot be re-pointed by DNS.
        return _is_wildcard(self.bound_host) and _ip(name) is not None

    def _check_origin(self, headers: Message) -> None:
        origin = headers.get("Origin")
        if origin is not None:
            if self.origin_allowed(origin):
                return
            raise RequestRefused(
                403, f"request from the web page origin {origin[:100]!r} refused: this server does not serve "
                f"browsers (a page could drive it); to allow one origin, start it with --allow-origin ORIGIN",
                close=True)
        site = (headers.get("Sec-Fetch-Site") or "").strip().lower()
        if site and site not in ("same-origin", "none"):
            raise RequestRefused(403, f"request sent by a browser from another site (Sec-Fetch-Site: {site}) "
                                      "refused: this server does not serve browsers", close=True)

    def origin_allowed(self, origin: str) -> bool:
        try:
            return normalize_origin(origin) in self.allowed_origins
        except ValueError:
            return False  # "null" (sandboxed frames, file://) and anything malformed

    # -- CORS for allowed origins -------------------------------------------------------------
    def cors_headers(self, headers: Message) -> dict[str, str]:
        """Response headers that let an allowed origin's page read the answer (nothing otherwise)."""
        origin = headers.get("Origin")
        if origin is None or not self.origin_allowed(origin):
            return {}
        return {"Access-Control-Allow-Origin": origin.strip(), "Vary": "Origin"}

    def preflight(self, headers: Message, methods: str = "GET, POST", *,
                  local_address: str | None = None) -> dict[str, str]:
        """The headers of a 204 answer to an allowed origin's ``OPTIONS`` preflight; RequestRefused otherwise."""
        self._check_host(headers, local_address)
        origin = headers.get("Origin")
        if origin is None or not self.origin_allowed(origin):
            raise RequestRefused(403, "OPTIONS is answered only for an origin allowed with --allow-origin")
        wanted = headers.get("Access-Control-Request-Headers", "")
        return {**self.cors_headers(headers), "Access-Control-Allow-Methods": methods,
                "Access-Control-Allow-Headers": wanted[:1000] or "Content-Type, Authorization",
                "Access-Control-Max-Age": "600"}


def _names_local_address(name: str, local_address: str) -> bool:
    """Whether a Host name is the address the connection came in on (or this machine's name, off loopback)."""
    address, named = _ip(local_address), _ip(name)
    if address is not None and named is not None:
        return address == named
    return not is_loopback_host(local_address) and name == _strip_host(socket.gethostname())


def check_token(headers: Message, token: str | None) -> None:
    """Refuse (401) a request without ``token`` when one is set.

    Sent as ``Authorization: Bearer <token>``, ``X-Proofgym-Token: <token>``, or as the password of
    HTTP Basic (``http://user:<token>@host/``: clients that cannot set headers, e.g. OpenEnv's
    WebSocket client, send a URL's user info that way). Compared in constant time.
    """
    if not token:
        return
    header = headers.get("Authorization", "")
    scheme, _, credentials = header.strip().partition(" ")
    if scheme.lower() == "bearer":
        given = credentials.strip()
    elif scheme.lower() == "basic":
        try:
            given = base64.b64decode(credentials.strip(), validate=True).decode("utf-8").partition(":")[2]
        except (ValueError, UnicodeDecodeError):
            given = ""
    else:
        given = headers.get("X-Proofgym-Token", "")
    if not hmac.compare_digest(given.encode("utf-8", "surrogateescape"), token.encode("utf-8", "surrogateescape")):
        raise RequestRefused(401, "missing or wrong token: send 'Authorization: Bearer <token>' (or put it in "
                                  "the URL as http://user:<token>@host/)", {"WWW-Authenticate": "Bearer"})


def check_json_content_type(headers: Message) -> None:
    """Refuse (415) a body that is not ``application/json`` (a ``charset`` parameter other than UTF-8 too)."""
    value = headers.get("Content-Type") or ""
    media, _, params = value.partition(";")
    charset = ""
    for param in params.split(";"):
        key, _, val = param.partition("=")
        if key.strip().lower() == "charset":
            charset = val.strip().strip('"').lower()
    if media.strip().lower() != "application/json" or charset not in ("", "utf-8", "utf8"):
        raise RequestRefused(415, f"send the body as JSON with 'Content-Type: application/json' "
                                  f"(got {value[:100]!r})", close=True)


class _Handler(Protocol):
    headers: Message
    rfile: Any
    close_connection: bool


def read_json_body(handler: _Handler, max_bytes: int, *, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """Read and decode the JSON body of ``handler``'s request; :class:`RequestRefused` says what is wrong.

    A body that is refused unread (no length, too long) also closes the connection: its bytes
    would otherwise be read as the next request.
    """
    try:
        length = body_length(handler.headers, max_bytes)
    except RequestRefused:
        handler.close_connection = True
        raise
    raw = handler.rfile.read(length)
    return parse_json(raw, max_depth=max_depth)


def body_length(headers: Message, max_bytes: int) -> int:
    """The body's ``Content-Length``, at most ``max_bytes``; :class:`RequestRefused` (411, 400, 413) otherwise."""
    if headers.get("Transfer-Encoding", "").strip().lower() not in ("", "identity"):
        raise RequestRefused(411, "send a Content-Length; chunked bodies are not accepted", close=True)
    length_text = headers.get("Content-Length")
    if length_text is None:
        raise RequestRefused(411, "a Content-Length header is required", close=True)
    try:
        length = int(length_text)
    except ValueError:
        raise RequestRefused(400, "Content-Length is not a number", close=True) from None
    if length < 0 or length > max_bytes:
        raise RequestRefused(413, f"body is {length} bytes; the limit is {max_bytes} bytes", close=True)
    return length


def parse_json(raw: bytes, *, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``raw`` as UTF-8 JSON nested at most ``max_depth`` deep; :class:`RequestRefused` (400) otherwise."""
    try:
        value = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RequestRefused(400, f"body is not UTF-8 JSON: {exc}") from None
    except RecursionError:
        value = None
        depth = max_depth + 1
    else:
        depth = nesting_depth(value, max_depth)
    if depth > max_depth:
        raise RequestRefused(400, f"the JSON body is nested more than {max_depth} levels deep; "
                                  f"real requests need fewer than 10")
    return value


# -- the same guard in front of an ASGI app (OpenEnv's FastAPI server) ------------------------------

_Scope = dict[str, Any]
_Receive = Callable[[], Awaitable[dict[str, Any]]]
_Send = Callable[[dict[str, Any]], Awaitable[None]]
_ASGIApp = Callable[[_Scope, _Receive, _Send], Awaitable[None]]

_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


def headers_message(raw: Iterable[tuple[bytes, bytes]]) -> Message:
    """An ASGI scope's header list as the :class:`~email.message.Message` the guard reads (repeats kept)."""
    message = Message()
    for key, value in raw:
        message[key.decode("latin-1")] = value.decode("latin-1")
    return message


class GuardedApp:
    """An ASGI app (HTTP and WebSocket) behind the request guard, with the stdlib servers' body limits.

    Before the wrapped app sees a request: Host, Origin and ``Sec-Fetch-Site`` as :meth:`RequestGuard.check`
    (on a WebSocket handshake too: browsers let any page open a WebSocket to 127.0.0.1, and only its
    ``Origin`` tells), the token (every path but ``open_paths``), and for a body: ``application/json``, a
    ``Content-Length`` of at most ``max_body_bytes``, the whole body within ``body_timeout_s`` (a client
    that stops sending is cut off: 408) and JSON nested at most ``max_depth`` deep. The body is read
    here and handed on unchanged. An ``OPTIONS`` preflight is answered here, for allowed origins only.
    Without a token, a connection that came in on an address beyond loopback is refused (403), as
    ``serve-verifier`` refuses to listen there without one. A refusal is JSON ``{"error": why}`` and
    closes the connection; a refused WebSocket handshake gets the same status and body (or a 1008
    close where the server cannot send an HTTP answer).

    Args:
        app: The ASGI app to guard (lifespan events pass through).
        guard: Host and Origin rules (``RequestGuard.create(bind_address, ...)``).
        token: Shared secret; see :func:`check_token`.
        open_paths: Paths served without the token (liveness for load balancers).
    """

    def __init__(self, app: _ASGIApp, guard: RequestGuard, *, token: str | None = None,
                 max_body_bytes: int = 16 * 1024 * 1024, max_depth: int = MAX_JSON_DEPTH,
                 body_timeout_s: float = 120.0, open_paths: Iterable[str] = ("/health",)) -> None:
        if token is not None and len(token) < 16:
            raise GuardConfigError("the token is too short: use at least 16 characters (e.g. `openssl rand -hex 24`)")
        self.app = app
        self.guard = guard
        self.token = token
        self.max_body_bytes = int(max_body_bytes)
        self.max_depth = int(max_depth)
        self.body_timeout_s = float(body_timeout_s)
        self.open_paths = frozenset(open_paths)

    @property
    def state(self) -> Any:
        """The wrapped app's ``state`` (Starlette's ``app.state``), so that its owner finds what it kept there."""
        return getattr(self.app, "state", None)

    async def __call__(self, scope: _Scope, receive: _Receive, send: _Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = headers_message(scope.get("headers") or ())
        local = (scope.get("server") or (None,))[0]
        method = "GET" if scope["type"] == "websocket" else str(scope["method"]).upper()
        try:
            if method == "OPTIONS":
                await _respond(send, 204, b"", self.guard.preflight(headers, local_address=local), "text/plain")
                return
            self.guard.check(method, headers, local_address=local)
            self._authorize(scope, headers, local)
            if method in _BODY_METHODS or "Content-Length" in headers or "Transfer-Encoding" in headers:
                receive = await self._read_body(headers, receive)  # any body: bounded, whatever the method
        except RequestRefused as error:
            if scope["type"] == "websocket":
                await _refuse_websocket(scope, receive, send, error)
            else:
                await _respond(send, error.status, json.dumps({"error": error.message}).encode(),
                               {**error.headers, "Connection": "close"})
            return
        cors = self.guard.cors_headers(headers)
        await self.app(scope, receive, _with_headers(send, cors) if cors and scope["type"] == "http" else send)

    def _authorize(self, scope: _Scope, headers: Message, local: str | None) -> None:
        if scope.get("path") in self.open_paths:
            return
        if not self.token and local is not None and not is_loopback_host(local):
            raise RequestRefused(403, f"this server has no token and the request came in on {local}, beyond "
                                      "loopback: start it with a token (anyone who can reach it could run "
                                      "checks), or listen on 127.0.0.1")
        check_token(headers, self.token)

    async def _read_body(self, headers: Message, receive: _Receive) -> _Receive:
        length = body_length(headers, self.max_body_bytes)

        async def read() -> bytes:
            chunks: list[bytes] = []
            size = 0
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise RequestRefused(400, "the client went away before its body arrived", close=True)
                chunk = bytes(message.get("body", b""))
                size += len(chunk)
                if size > length:
                    raise RequestRefused(400, "the body is longer than its Content-Length", close=True)
                chunks.append(chunk)
                if not message.get("more_body", False):
                    return b"".join(chunks)

        try:
            raw = await asyncio.wait_for(read(), self.body_timeout_s)
        except asyncio.TimeoutError:
            raise RequestRefused(408, f"the body did not arrive within {self.body_timeout_s:g} s", close=True) from None
        if raw:
            parse_json(raw, max_depth=self.max_depth)
        pending = [{"type": "http.request", "body": raw, "more_body": False}]

        async def replay() -> dict[str, Any]:
            return pending.pop() if pending else await receive()

        return replay


async def _respond(send: _Send, status: int, body: bytes, headers: Mapping[str, str],
                   content_type: str = "application/json") -> None:
    fields = [(b"content-type", content_type.encode()), (b"content-length", str(len(body)).encode())]
    fields += [(key.lower().encode("latin-1"), value.encode("latin-1")) for key, value in headers.items()]
    await send({"type": "http.response.start", "status": status, "headers": fields})
    await send({"type": "http.response.body", "body": body})


async def _refuse_websocket(scope: _Scope, receive: _Receive, send: _Send, error: RequestRefused) -> None:
    await receive()  # the handshake ("websocket.connect"), answered below
    if "websocket.http.response" in (scope.get("extensions") or {}):
        body = json.dumps({"error": error.message}).encode()
        fields = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        fields += [(key.lower().encode("latin-1"), value.encode("latin-1")) for key, value in error.headers.items()]
        await send({"type": "websocket.http.response.start", "status": error.status, "headers": fields})
        await send({"type": "websocket.http.response.body", "body": body})
    else:
        await send({"type": "websocket.close", "code": 1008, "reason": error.message[:120]})


def _with_headers(send: _Send, extra: Mapping[str, str]) -> _Send:
    fields = [(key.lower().encode("latin-1"), value.encode("latin-1")) for key, value in extra.items()]

    async def sending(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), *fields]}
        await send(message)

    return sending
