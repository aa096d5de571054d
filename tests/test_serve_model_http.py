"""The ``serve-model`` HTTP layer with a scripted agent behind it (no torch): routes, errors, batching, retries."""

from __future__ import annotations

import hmac
import http.client
import json
import threading

import pytest

from proofgym.agents import ModelUnavailable, Request, ScriptedAgent
from proofgym.agents.serve import ModelServer

openai = pytest.importorskip("openai")


@pytest.fixture
def server():
    agent = ScriptedAgent(lambda request: f"echo: {request.messages[-1]['content']}", model="scripted")
    server = ModelServer(agent, port=0, model_name="m", max_tokens=64, batch_size=4)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def _post(conn: http.client.HTTPConnection, path: str, payload: object, headers: dict | None = None):
    body = json.dumps(payload).encode()
    conn.request("POST", path, body=body, headers={"Content-Type": "application/json", **(headers or {})})
    response = conn.getresponse()
    return response.status, json.loads(response.read()), dict(response.getheaders())


def test_chat_completions_with_n_and_usage(server):
    client = openai.OpenAI(base_url=server.url, api_key="x")
    reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], n=3,
                                           temperature=0)
    assert [c.message.content for c in reply.choices] == ["echo: hi"] * 3
    assert reply.usage.completion_tokens == 3 * (len("echo: hi") // 4)  # the scripted agent's rough count
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens


def test_errors_are_json_in_the_providers_shape_and_keep_the_connection_usable(server):
    host, port = server.server_address[:2]
    conn = http.client.HTTPConnection(host, port, timeout=30)
    status, body, _ = _post(conn, "/v1/nope", {"model": "m"})
    assert status == 404 and "no route" in body["error"]["message"]
    status, body, _ = _post(conn, "/v1/chat/completions", {"model": "other", "messages": [{"role": "user",
                                                                                          "content": "x"}]})
    assert status == 404 and "serves 'm'" in body["error"]["message"]
    status, body, _ = _post(conn, "/v1/chat/completions", {"model": "m", "messages": []})
    assert status == 400 and "messages" in body["error"]["message"]
    status, body, _ = _post(conn, "/v1/chat/completions", {"model": "m", "stream": True,
                                                            "messages": [{"role": "user", "content": "x"}]})
    assert status == 400 and "streaming" in body["error"]["message"]
    status, body, _ = _post(conn, "/v1/messages", {"model": "m", "messages": [{"role": "user", "content": "x"}]})
    assert status == 400 and body["type"] == "error" and "max_tokens" in body["error"]["message"]
    # After all those errors, the same keep-alive connection still serves a good request.
    status, body, _ = _post(conn, "/v1/chat/completions", {"model": "m", "messages": [{"role": "user",
                                                                                      "content": "ok"}]})
    assert status == 200 and body["choices"][0]["message"]["content"] == "echo: ok"
    conn.request("GET", "/v1/models")
    models = json.loads(conn.getresponse().read())
    conn.close()
    assert [m["id"] for m in models["data"]] == ["m"]


def test_fail_first_answers_429_with_retry_after(server):
    server.fail_first = 1
    host, port = server.server_address[:2]
    conn = http.client.HTTPConnection(host, port, timeout=30)
    payload = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
    status, body, headers = _post(conn, "/v1/chat/completions", payload)
    assert status == 429 and headers.get("Retry-After") == "0"
    assert _post(conn, "/v1/chat/completions", payload)[0] == 200
    conn.close()


def test_anthropic_messages_shape(server):
    anthropic = pytest.importorskip("anthropic")
    client = anthropic.Anthropic(base_url=server.url.removesuffix("/v1"), api_key="x")
    reply = client.messages.create(model="m", max_tokens=10, system="be brief",
                                   messages=[{"role": "user", "content": [{"type": "text", "text": "yo"}]}])
    assert reply.content[0].text == "echo: yo" and reply.stop_reason == "end_turn"


def test_api_key_is_enforced_when_set(server):
    from proofgym.agents.api import OpenAIAgent

    server.api_key = "k"
    request = Request(({"role": "user", "content": "x"},))
    with pytest.raises(ModelUnavailable, match="rejected the API key"):
        OpenAIAgent("m", base_url=server.url, api_key="wrong").generate([request])
    assert OpenAIAgent("m", base_url=server.url, api_key="k").generate([request])[0].text == "echo: x"


def test_api_key_is_compared_in_constant_time(server, monkeypatch):
    compared = []
    real = hmac.compare_digest
    monkeypatch.setattr(hmac, "compare_digest", lambda a, b: compared.append((a, b)) or real(a, b))
    server.api_key = "the-key"
    host, port = server.server_address[:2]
    conn = http.client.HTTPConnection(host, port, timeout=30)
    payload = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
    for given in (b"the-kex", "ключ".encode()):  # a non-ASCII key is a 401 too, never a 500
        status, body, _ = _post(conn, "/v1/chat/completions", payload, {"x-api-key": given})
        assert status == 401 and body["error"]["type"] == "authentication_error"
    assert len(compared) == 2
    assert _post(conn, "/v1/chat/completions", payload, {"Authorization": "Bearer the-key"})[0] == 200
    conn.close()


def test_concurrent_requests_are_batched(server):
    from proofgym.agents.api import OpenAIAgent

    seen_batches = []
    inner = server.batcher.agent.generate

    def spy(requests):
        seen_batches.append(len(requests))
        return inner(requests)

    server.batcher.agent.generate = spy
    agent = OpenAIAgent("m", base_url=server.url, concurrency=8)
    gens = agent.generate([Request(({"role": "user", "content": str(i)},)) for i in range(8)])
    assert [g.text for g in gens] == [f"echo: {i}" for i in range(8)]
    assert sum(seen_batches) == 8 and max(seen_batches) <= 4  # batch_size caps a batch
