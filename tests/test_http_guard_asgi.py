"""The request guard as ASGI middleware (``proofgym.http_guard.GuardedApp``), the OpenEnv app's guard.

The rules themselves (Host, Origin, Content-Type, JSON depth) are tested on every server at once in
``tests/test_service.py`` (the ``guarded`` fixture). Here: what only the ASGI side has, the WebSocket
handshake (OpenEnv's client plays over ``/ws``) and the token in the URL, served by uvicorn on
127.0.0.1; and, called in-process with a scripted ``receive``, the body rules and the address rules a
loopback test cannot reach (a connection that came in beyond loopback).
"""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import pytest

from proofgym.http_guard import GuardedApp, RequestGuard
from tests.test_service import request

TOKEN = "t0ken-for-tests-only-0123456789"
UPGRADE = {"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
           "Sec-WebSocket-Key": base64.b64encode(b"0123456789abcdef").decode(), "Content-Type": None}


async def _echo(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """A stand-in app: answers 200 with the body it was given."""
    body = b""
    if scope["type"] == "http" and scope["method"] in ("POST", "PUT"):
        message = await receive()
        body = message["body"]
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body or b"{}"})


def call(app: GuardedApp, method: str = "POST", body: bytes | None = b"{}", headers: dict[str, str] | None = None,
         server: tuple[str, int] = ("127.0.0.1", 8000), path: str = "/step") -> tuple[int, dict[str, str], Any, int]:
    """One HTTP request through ``app`` in-process: (status, headers, JSON body, times ``receive`` was called).

    ``body=None`` sends headers and then nothing more: the client that stops sending.
    """
    sent_headers = {"host": f"{server[0]}:{server[1]}", "content-type": "application/json",
                    **({} if body is None else {"content-length": str(len(body))}), **(headers or {})}
    scope = {"type": "http", "method": method, "path": path, "server": server,
             "headers": [(k.lower().encode(), v.encode()) for k, v in sent_headers.items()]}
    messages: list[dict[str, Any]] = []
    received = 0

    async def receive() -> dict[str, Any]:
        nonlocal received
        received += 1
        if body is None:
            await asyncio.Event().wait()  # never set: the client sends nothing more
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        messages.append(message)

    asyncio.run(asyncio.wait_for(app(scope, receive, send), 60))  # a bound, not a timing: the guard answers first
    start, payload = messages[0], messages[1]["body"]
    response_headers = {k.decode(): v.decode() for k, v in start["headers"]}
    return start["status"], response_headers, json.loads(payload) if payload else None, received


def guarded(**kwargs: Any) -> GuardedApp:
    return GuardedApp(_echo, RequestGuard.create("127.0.0.1"), **kwargs)


@pytest.mark.parametrize("headers, status, says", [
    ({"content-length": str(1 << 20)}, 413, "limit"),
    ({"transfer-encoding": "chunked"}, 411, "Content-Length"),
    ({"content-length": "x"}, 400, "not a number"),
])
def test_a_body_refused_by_its_headers_is_never_read(headers, status, says):
    for method in ("POST", "DELETE"):  # a body is bounded whatever the method
        got, response_headers, out, received = call(guarded(max_body_bytes=1024), method=method, headers=headers)
        assert (got, received) == (status, 0) and says in out["error"], method
        assert response_headers["connection"] == "close"


def test_a_client_that_stops_sending_its_body_is_cut_off_with_408():
    status, headers, out, _ = call(guarded(body_timeout_s=0.05), body=None, headers={"content-length": "10"})
    assert status == 408 and "did not arrive" in out["error"] and headers["connection"] == "close"


def test_beyond_loopback_a_token_is_required():
    """As ``serve-verifier`` refuses to listen beyond loopback without a token, the app refuses such requests."""
    outside = ("10.0.0.5", 8000)
    status, _, out, received = call(guarded(), server=outside)
    assert (status, received) == (403, 0) and "no token" in out["error"]
    assert call(guarded(), server=outside, path="/health", method="GET", body=b"")[0] == 200  # liveness stays open
    app = guarded(token=TOKEN)
    assert call(app, server=outside)[0] == 401
    assert call(app, server=outside, headers={"authorization": f"Bearer {TOKEN}"})[0] == 200
    basic = base64.b64encode(f"anyone:{TOKEN}".encode()).decode()
    assert call(app, server=outside, headers={"authorization": f"Basic {basic}"})[0] == 200
    # The address the client came in on is a name of this server; a DNS name is not, but for this machine's own.
    assert call(app, server=outside, headers={"host": "10.0.0.6:8000", "authorization": f"Bearer {TOKEN}"})[0] == 421


def test_an_allowed_origin_gets_cors_headers_and_its_preflight():
    app = GuardedApp(_echo, RequestGuard.create("127.0.0.1", allowed_origins=["http://localhost:3000"]))
    body = {"action": {"proof": "Proof. lia. Qed."}}
    status, headers, out, _ = call(app, body=json.dumps(body).encode(), headers={"origin": "http://localhost:3000"})
    assert status == 200 and headers["access-control-allow-origin"] == "http://localhost:3000"
    assert out == body  # read by the guard, handed on unchanged
    status, headers, _, _ = call(app, method="OPTIONS", body=b"", headers={
        "origin": "http://localhost:3000", "access-control-request-method": "POST"})
    assert status == 204 and "POST" in headers["access-control-allow-methods"]
    assert call(app, method="OPTIONS", body=b"", headers={"origin": "http://attacker.example"})[0] == 403


# ---------------------------------------------------------------------------------------------
# the OpenEnv app under uvicorn on 127.0.0.1


@pytest.fixture(scope="module")
def openenv_url():
    pytest.importorskip("openenv.core", reason="pip install 'proofgym[openenv]'")
    from proofgym.envs.verifiers.pool.inprocess import InProcessPool
    from proofgym.training.integrations.openenv_env import make_app
    from tests.integrations_common import FakeBrokenVerifier
    from tests.test_integrations_openenv import serving

    with InProcessPool({"coq": FakeBrokenVerifier()}) as pool:
        app = make_app("coq-tiny", pool=pool, token=TOKEN)
        try:
            with serving(app) as url:
                yield url
        finally:
            app.state.proofgym.close()


@pytest.mark.parametrize("headers, status", [
    ({"Origin": "http://attacker.example"}, 403),  # any page may open a WebSocket to 127.0.0.1: its Origin tells
    ({"Host": "attacker.example"}, 421),  # a DNS-rebinding page
    ({"Sec-Fetch-Site": "cross-site"}, 403),
    ({}, 401),  # no token
])
def test_a_websocket_handshake_passes_the_guard_first(openenv_url, headers, status):
    address = ("127.0.0.1", int(openenv_url.rsplit(":", 1)[1]))
    got, _, out, = request(address, "GET", "/ws", headers={**UPGRADE, **headers})[:3]
    assert got == status and out["error"], out


def test_openenvs_client_plays_with_the_token_in_its_url(openenv_url):
    from openenv.core import GenericEnvClient

    from tests.integrations_common import TASK

    with_token = openenv_url.replace("http://", f"http://proofgym:{TOKEN}@")
    with GenericEnvClient(base_url=with_token).sync() as env:
        assert env.reset(task_id=TASK).observation["task_id"] == TASK
    with pytest.raises(ConnectionError, match="401"), GenericEnvClient(base_url=openenv_url).sync() as env:
        env.reset(task_id=TASK)
    address = ("127.0.0.1", int(openenv_url.rsplit(":", 1)[1]))
    assert request(address, "GET", "/health")[0] == 200  # liveness needs no token
    assert request(address, "POST", "/reset", {"task_id": TASK})[0] == 401
    assert request(address, "POST", "/reset", {"task_id": TASK}, {"Authorization": f"Bearer {TOKEN}"})[0] == 200


def test_the_hub_server_refuses_to_listen_beyond_loopback_without_a_token(monkeypatch):
    import importlib.util
    from pathlib import Path

    pytest.importorskip("openenv.core", reason="pip install 'proofgym[openenv]'")
    monkeypatch.delenv("PROOFGYM_OPENENV_TOKEN", raising=False)
    path = Path(__file__).resolve().parent.parent / "examples" / "integrations" / "openenv" / "server" / "app.py"
    spec = importlib.util.spec_from_file_location("proofgym_openenv_server_app_h7", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    try:
        with pytest.raises(SystemExit, match="without a token"):
            module.main("0.0.0.0", 0)  # refused before anything is bound
    finally:
        module.app.state.proofgym.close()
