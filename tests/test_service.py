"""The verifier HTTP service: batch checks, JSON verdicts, health and metrics, limits, tokens, OpenRLHF.

Every request goes to 127.0.0.1 on a port the OS picked. The fast tier runs the service over a
pool of fake verifiers; the prover tier starts ``proofgym serve-verifier`` and checks real Coq.
"""

from __future__ import annotations

import http.client
import json
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
import warnings
from typing import Any, NamedTuple

import pytest

from proofgym.agents import ScriptedAgent
from proofgym.agents.serve import ModelServer
from proofgym.envs.errors import VerifierError
from proofgym.envs.tasks.suites import load_tasks
from proofgym.envs.types import TASK_FIELD_LIMITS, Verdict
from proofgym.envs.verifiers.pool import LocalVerifierPool
from proofgym.envs.verifiers.service import ServiceConfig, ServiceConfigError, VerifierService
from proofgym.envs.verifiers.service.client import (
    ServiceVerifier,
    VerifierServiceClient,
    result_from_dict,
    service_reward_function,
)
from proofgym.http_guard import is_loopback_host
from tests.conftest import requires_coq
from tests.test_faults import descendants
from tests.test_pool import FakeVerifier, _alive, fake_task

TOKEN = "t0ken-for-tests-only-0123456789"


@pytest.fixture(scope="module")
def pool():
    with LocalVerifierPool(2, verifier_factory=FakeVerifier) as p:
        yield p


@pytest.fixture(scope="module")
def service(pool):
    tasks = {t.id: t for t in (fake_task(0), fake_task(1, "other"))}
    with VerifierService(pool, ServiceConfig(port=0, max_body_bytes=64 * 1024, max_batch=8), tasks=tasks) as svc:
        yield svc


def request(svc: VerifierService | tuple[str, int], method: str, path: str, body: Any = None,
            headers: dict | None = None, raw: bytes | None = None) -> tuple[int, dict[str, str], Any]:
    """One request to 127.0.0.1; a header given as None is not sent (``Host`` included)."""
    host, port = svc if isinstance(svc, tuple) else svc.address
    conn = http.client.HTTPConnection(host, port, timeout=60)
    try:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        sent = {"Content-Type": "application/json", **(headers or {})}
        conn.putrequest(method, path, skip_host="Host" in sent, skip_accept_encoding=True)
        for key, value in sent.items():
            if value is not None:
                conn.putheader(key, value)
        if data is not None:
            conn.putheader("Content-Length", str(len(data)))
        conn.endheaders(data)
        resp = conn.getresponse()
        payload = resp.read()
        kind = resp.getheader("Content-Type", "")
        parsed = json.loads(payload) if kind.startswith("application/json") else payload.decode()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, parsed
    finally:
        conn.close()


def test_check_returns_verdicts_in_input_order(service):
    body = {"requests": [{"id": "a", "task": fake_task(0).to_dict(), "proof": "sleep:0.3"},
                         {"id": "b", "task_id": "fake.1", "proof": "fail"},
                         {"task_id": "fake.0", "proof": "raise"},
                         {"task_id": "fake.0", "proof": "```coq\ncheat\n```", "parse": True}]}
    status, _, out = request(service, "POST", "/check", body)
    assert status == 200
    results = out["results"]
    assert [r["id"] for r in results] == ["a", "b", 2, 3]
    assert results[0]["verdict"] == "OK" and results[0]["reward"] == 1.0
    assert results[1]["verdict"] == "FAIL" and results[1]["reward"] == 0.0 and results[1]["task_id"] == "fake.1"
    assert results[2]["verdict"] is None and results[2]["reward"] is None  # a harness failure is never a score
    assert results[2]["error_kind"] == "verifier" and "crashed" in results[2]["harness_error"]
    assert results[3]["verdict"] == "CHEATING" and results[3]["reward"] == -1.0  # parsed out of the fence


def test_health_and_metrics(service):
    request(service, "POST", "/check", [{"task_id": "fake.0", "proof": "ok"}])
    # The pool answers as soon as one worker is up; the second may still be starting (it reports as it comes up).
    assert service.pool.wait_ready(60), "the pool's second worker never came up"
    status, _, health = request(service, "GET", "/health")
    assert status == 200 and health["status"] == "ok" and health["workers_alive"] == 2
    status, _, metrics = request(service, "GET", "/metrics")
    assert status == 200
    for key in ("queue_depth", "checks_per_s", "checks_total", "verdicts", "harness_failures", "workers_alive"):
        assert key in metrics
    assert metrics["checks_total"] >= 1 and metrics["verdicts"]["OK"] >= 1 and metrics["checks_per_s"] > 0
    status, headers, text = request(service, "GET", "/metrics?format=prometheus")
    assert status == 200 and headers["content-type"].startswith("text/plain")
    assert "proofgym_queue_depth 0" in text and 'proofgym_checks_total{verdict="OK"}' in text


@pytest.mark.parametrize("method, path, body, status", [
    ("GET", "/nowhere", None, 404),
    ("GET", "/check", None, 405),
    ("POST", "/check", {"requests": "x"}, 400),
    ("POST", "/check", {"requests": [{"task_id": "nope", "proof": "ok"}]}, 400),
    ("POST", "/check", {"requests": [{"task": {"id": "x"}, "proof": "ok"}]}, 400),
    ("POST", "/check", {"requests": [{"task_id": "fake.0", "proof": "ok"}] * 9}, 413),  # max_batch=8
])
def test_bad_requests_get_clear_errors(service, method, path, body, status):
    got, _, out = request(service, method, path, body)
    assert got == status and out["error"]


def test_oversized_body_is_refused_unread(service):
    status, headers, out = request(service, "POST", "/check", raw=b"[" + b" " * (100 * 1024) + b"]")
    assert status == 413 and "limit" in out["error"] and headers.get("connection") == "close"
    bad_json = request(service, "POST", "/check", raw=b"{not json")
    assert bad_json[0] == 400


def test_a_full_queue_answers_503(pool, tmp_path):
    release = tmp_path / "release"  # the busy check holds the queue's one place until the 503 has been seen
    with VerifierService(pool, ServiceConfig(port=0, max_queue=1)) as svc:
        busy = pool.submit(fake_task(0), f"wait:{release}")
        status, headers, _ = request(svc, "POST", "/check", [{"task": fake_task(1).to_dict(), "proof": "ok"}])
        assert status == 503 and headers["retry-after"] == "1"
        release.touch()
        busy.result(timeout=30)
        assert request(svc, "POST", "/check", [{"task": fake_task(1).to_dict(), "proof": "ok"}])[0] == 200


def test_token_is_required_when_set(pool):
    with VerifierService(pool, ServiceConfig(port=0, token=TOKEN)) as svc:
        body = [{"task": fake_task(0).to_dict(), "proof": "ok"}]
        assert request(svc, "POST", "/check", body)[0] == 401
        assert request(svc, "POST", "/check", body, {"Authorization": "Bearer wrong"})[0] == 401
        assert request(svc, "GET", "/metrics")[0] == 401
        assert request(svc, "GET", "/health")[0] == 200  # liveness stays open for load balancers
        assert request(svc, "POST", "/check", body, {"Authorization": f"Bearer {TOKEN}"})[0] == 200
        client = VerifierServiceClient(svc.url, token=TOKEN)
        assert client.check(body)[0]["verdict"] == "OK"


def test_refuses_to_listen_beyond_loopback_without_a_token(pool):
    with pytest.raises(ServiceConfigError, match="token"):
        VerifierService(pool, ServiceConfig(host="0.0.0.0", port=0))
    with pytest.raises(ServiceConfigError, match="short"):
        VerifierService(pool, ServiceConfig(port=0, token="short"))
    proc = subprocess.run([sys.executable, "-m", "proofgym.cli", "serve-verifier", "--host", "0.0.0.0", "--port", "0"],
                          capture_output=True, text=True, timeout=60, env={**os.environ, "PROOFGYM_VERIFIER_TOKEN": ""})
    assert proc.returncode == 2 and "without a token" in proc.stderr and "Traceback" not in proc.stderr


def test_a_deeply_nested_body_is_400_not_500(service):
    for depth in (100, 30_000):  # the second breaks the stdlib parser (RecursionError)
        status, _, out = request(service, "POST", "/check", raw=b"[" * depth + b"]" * depth)
        assert status == 400 and "nested" in out["error"], (depth, status, out)
    # Nested inside a task's metadata, below the body limit: the same answer, and nothing reached a worker.
    task = fake_task(0).to_dict()
    task["metadata"] = {"x": json.loads("[" * 80 + "]" * 80)}
    assert request(service, "POST", "/check", [{"task": task, "proof": "ok"}])[0] == 400


def test_a_client_that_stops_sending_is_dropped(pool):
    """Slow-loris: a connection that sends half its headers, then nothing, is closed after client_timeout_s.

    (The guarantee uvicorn cannot give before the headers are complete; docs/integrations/openenv.md.)
    """
    import socket

    with VerifierService(pool, ServiceConfig(port=0, client_timeout_s=0.5)) as svc, \
            socket.create_connection(svc.address, timeout=60) as conn:  # 60 s: a bound, not a timing
        conn.sendall(b"POST /check HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        assert conn.recv(1024) == b""  # the server closed it


def test_a_task_field_over_its_bound_is_413(pool):
    with VerifierService(pool, ServiceConfig(port=0, max_body_bytes=4 << 20)) as svc:
        task = {**fake_task(0).to_dict(), "statement": "x" * (TASK_FIELD_LIMITS["statement"] + 1)}
        status, _, out = request(svc, "POST", "/check", [{"task": task, "proof": "ok"}])
        assert status == 413 and "'statement'" in out["error"] and "limit" in out["error"]
        assert svc.metrics_snapshot()["checks_total"] == 0


def test_a_check_past_its_deadline_comes_back_timeout():
    """The service answers at the pool's deadline (timeout_s + context allowance), never with a late OK."""
    import dataclasses

    with LocalVerifierPool(1, verifier_factory=FakeVerifier, context_allowance_s=0.0) as slow_pool, \
            VerifierService(slow_pool, ServiceConfig(port=0)) as svc:
        task = dataclasses.replace(fake_task(0), timeout_s=0.2).to_dict()
        status, _, out = request(svc, "POST", "/check", [{"task": task, "proof": "sleep:3"}])
        assert status == 200 and out["results"][0]["verdict"] == "TIMEOUT" and out["results"][0]["reward"] == 0.0


def test_openrlhf_remote_reward_protocol(service):
    prompt = "Prove: True.\n"
    body = {"query": [prompt + "```coq\nok\n```", prompt + "fail"], "prompts": [prompt, prompt],
            "labels": ["fake.0", "fake.1"]}
    status, _, out = request(service, "POST", "/reward", body)
    assert status == 200 and out["rewards"] == [1.0, 0.0] and out["scores"] == out["rewards"]
    body["query"][1] = prompt + "raise"
    status, headers, out = request(service, "POST", "/reward", body)
    assert status == 503 and "harness failure" in out["error"]  # OpenRLHF retries; never a 0 reward


def test_service_verifier_and_reward_function(service):
    verifier = ServiceVerifier(service.url)
    assert len(pickle.dumps(verifier)) < 512  # what AsyncVectorEnv sends to each sub-process
    clone = pickle.loads(pickle.dumps(verifier))
    result = clone.check(fake_task(0), "ok")
    assert result.verdict is Verdict.OK and result.backend == "fake"
    with pytest.raises(VerifierError):
        clone.check(fake_task(0), "raise")
    reward = service_reward_function(service.url)
    assert reward(prompts=["p", "p"], completions=["```coq\nok\n```", [{"role": "assistant", "content": "fail"}]],
                  task_id=["fake.0", "fake.1"]) == [1.0, 0.0]
    assert reward(prompts=["p"], completions=["raise"], task_id=["fake.0"]) == [None]
    with pytest.raises(VerifierError, match="unreachable"):
        ServiceVerifier("http://127.0.0.1:9", timeout_s=5).check(fake_task(0), "ok")


def test_result_round_trip():
    from proofgym.envs.types import CheckResult, ErrorCategory, Goal

    original = CheckResult(Verdict.FAIL, ("r",), ("m",), (Goal(("n : nat",), "n = n"),), ErrorCategory.LOGIC)
    assert result_from_dict(original.to_dict()) == original


# ---------------------------------------------------------------------------------------------
# the request guard, the same on every server (serve-verifier, serve-model, the OpenEnv app)


class Guarded(NamedTuple):
    """A server with the default guard: where it listens, a POST that it serves, and a GET path."""

    name: str
    address: tuple[str, int]
    path: str
    body: Any
    get_path: str


@pytest.fixture(scope="module", params=["serve-verifier", "serve-model", "openenv"])
def guarded(request, pool):
    """Each server with the default guard; all must refuse the same things.

    The OpenEnv app is OpenEnv's own FastAPI server under uvicorn, inside ``proofgym.http_guard.GuardedApp``.
    """
    if request.param == "serve-verifier":
        with VerifierService(pool, ServiceConfig(port=0)) as svc:
            yield Guarded("serve-verifier", svc.address, "/check", [{"task": fake_task(0).to_dict(), "proof": "ok"}],
                          "/metrics")
    elif request.param == "serve-model":
        server = ModelServer(ScriptedAgent(lambda r: "echo", model="m"), port=0, model_name="m")
        threading.Thread(target=server.serve_forever, daemon=True).start()
        yield Guarded("serve-model", server.server_address[:2], "/v1/chat/completions",
                      {"model": "m", "messages": [{"role": "user", "content": "x"}]}, "/v1/models")
        server.shutdown()
        server.server_close()
    else:
        pytest.importorskip("openenv.core", reason="pip install 'proofgym[openenv]'")
        from proofgym.training.integrations.openenv_env import make_app
        from tests.test_integrations_openenv import serving

        with serving(make_app("coq-tiny", pool=pool)) as url:  # reset runs no check: the fake pool is enough
            yield Guarded("openenv", ("127.0.0.1", int(url.rsplit(":", 1)[1])), "/reset", {"task_id": "coq.tiny.lia"},
                          "/state")


def test_guard_serves_its_own_clients(guarded):
    address, path, body = guarded.address, guarded.path, guarded.body
    port = address[1]
    for host in ("127.0.0.1", f"127.0.0.1:{port}", f"localhost:{port}", "LOCALHOST", f"[::1]:{port}"):
        status, _, out = request(address, "POST", path, body, {"Host": host})
        assert status == 200, (host, out)


@pytest.mark.parametrize("headers, status, says", [
    ({"Content-Type": "text/plain"}, 415, "application/json"),  # a page's CORS "simple" request
    ({"Content-Type": "application/x-www-form-urlencoded"}, 415, "application/json"),
    ({"Content-Type": None}, 415, "application/json"),
    ({"Content-Type": "application/json; charset=latin-1"}, 415, "application/json"),
    ({"Host": "attacker.example:8000"}, 421, "DNS rebinding"),  # a rebinding page sends its own name
    ({"Host": "localhost.attacker.example"}, 421, "--allow-host"),
    ({"Host": "127.0.0.1.nip.io"}, 421, "--allow-host"),
    ({"Host": "evil.localhost"}, 421, "--allow-host"),
    ({"Host": None}, 400, "Host"),
    ({"Host": "127.0.0.1:x"}, 400, "Host"),
    ({"Origin": "http://attacker.example"}, 403, "--allow-origin"),
    ({"Origin": "null"}, 403, "--allow-origin"),
    ({"Origin": "http://127.0.0.1:3000"}, 403, "--allow-origin"),  # loopback pages are web pages too
    ({"Sec-Fetch-Site": "cross-site"}, 403, "another site"),
])
def test_guard_refuses_what_a_web_page_can_send(guarded, headers, status, says):
    address, path, body, get_path = guarded.address, guarded.path, guarded.body, guarded.get_path
    if guarded.name == "openenv" and headers == {"Host": None}:
        # HTTP/1.1 needs a Host: uvicorn (h11) answers 400 itself before any app runs, and closes at once (so a
        # POST's unsent body can reset the connection before its answer is read: asked with a GET).
        assert request(address, "GET", get_path, headers=headers)[0] == 400
        return
    got, response_headers, out = request(address, "POST", path, body, headers)
    message = out["error"] if isinstance(out["error"], str) else out["error"]["message"]
    assert got == status and says in message, (got, out)
    assert "access-control-allow-origin" not in response_headers
    if status != 415:  # GET too: a rebinding page must not read /metrics or the model list
        assert request(address, "GET", get_path, headers=headers)[0] == status


def test_guard_answers_deeply_nested_json_with_400(guarded):
    address, path = guarded.address, guarded.path
    for depth in (100, 100_000):
        status, _, out = request(address, "POST", path, raw=b"[" * depth + b"]" * depth)
        message = out["error"] if isinstance(out["error"], str) else out["error"]["message"]
        assert status == 400 and "nested" in message, (depth, status, out)


def test_an_allowed_origin_gets_cors_headers_and_a_preflight(pool):
    origin = "http://localhost:3000"
    config = ServiceConfig(port=0, allowed_origins=(origin + "/",), allowed_hosts=("verifier.internal",))
    with VerifierService(pool, config) as svc:
        body = [{"task": fake_task(0).to_dict(), "proof": "ok"}]
        status, headers, _ = request(svc, "POST", "/check", body, {"Origin": origin})
        assert status == 200 and headers["access-control-allow-origin"] == origin
        status, headers, _ = request(svc, "OPTIONS", "/check", headers={
            "Origin": origin, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type"})
        assert status == 204 and headers["access-control-allow-origin"] == origin
        assert "POST" in headers["access-control-allow-methods"]
        assert request(svc, "OPTIONS", "/check", headers={"Origin": "http://attacker.example"})[0] == 403
        assert request(svc, "POST", "/check", body, {"Origin": "http://localhost:3001"})[0] == 403
        assert request(svc, "GET", "/health", headers={"Host": "verifier.internal:80"})[0] == 200
    with pytest.raises(ServiceConfigError, match="not an origin"):
        VerifierService(pool, ServiceConfig(port=0, allowed_origins=("localhost:3000",)))


@pytest.mark.parametrize("host, loopback", [
    ("127.0.0.1", True), ("127.1.2.3", True), ("localhost", True), ("::1", True), ("[::1]", True),
    ("::ffff:127.0.0.1", True), ("0.0.0.0", False), ("::", False), ("", False), ("10.0.0.5", False),
    ("evil.localhost", False), ("example.com", False),
])
def test_both_servers_share_one_loopback_rule(pool, monkeypatch, host, loopback):
    """serve-verifier refuses, and serve-model warns, exactly for the binds beyond loopback (0.0.0.0 included)."""
    assert is_loopback_host(host) is loopback
    if loopback:
        return
    with pytest.raises(ServiceConfigError, match="without a token"):
        VerifierService(pool, ServiceConfig(host=host, port=0))
    # Nothing is bound for real: only 127.0.0.1 is ever listened on in the tests.
    monkeypatch.setattr(ModelServer, "server_bind", lambda self: None)
    monkeypatch.setattr(ModelServer, "server_activate", lambda self: None)
    with pytest.warns(RuntimeWarning, match="anyone who can reach it"):
        server = ModelServer(ScriptedAgent(lambda r: "x", model="m"), host=host, port=0)
    server.server_close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ModelServer(ScriptedAgent(lambda r: "x", model="m"), host="127.0.0.1", port=0).server_close()


def test_cli_refuses_a_bad_allow_origin():
    proc = subprocess.run([sys.executable, "-m", "proofgym.cli", "serve-verifier", "--port", "0",
                           "--allow-origin", "not an origin"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "not an origin" in proc.stderr and "Traceback" not in proc.stderr


# ---------------------------------------------------------------------------------------------
# the command, on real Coq


@pytest.mark.prover
@requires_coq
def test_serve_verifier_command_on_real_coq(tiny_suite):
    proc = subprocess.Popen([sys.executable, "-m", "proofgym.cli", "serve-verifier", "--port", "0", "--workers", "2",
                             "--suite", str(tiny_suite)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        line = proc.stdout.readline()
        assert "http://127.0.0.1:" in line, proc.stderr.read() if proc.poll() is not None else line
        url = line.split()[4]
        client = VerifierServiceClient(url)
        assert client.health()["status"] == "ok"
        rows = client.check([{"task_id": "tiny.lia", "proof": "Proof. lia. Qed."},
                             {"task_id": "tiny.lia", "proof": "Proof. Admitted."},
                             {"task_id": "tiny.and_comm", "proof": "```coq\nintros [p q]; split; assumption.\n```",
                              "parse": True},
                             {"task_id": "tiny.wrong_ref", "proof": "Proof. intros. reflexivity. Qed."}])
        assert [r["verdict"] for r in rows] == ["OK", "CHEATING", "OK", "FAIL"]
        assert [r["reward"] for r in rows] == [1.0, -1.0, 1.0, 0.0]
        metrics = client.metrics()
        assert metrics["checks_total"] == 4 and metrics["verdicts"] == {"OK": 2, "CHEATING": 1, "FAIL": 1}
        # No web page can drive it, and nothing it refuses reaches a prover.
        address = (url.split("//")[1].split(":")[0], int(url.rsplit(":", 1)[1]))
        body = [{"task_id": "tiny.lia", "proof": "Proof. lia. Qed."}]
        assert request(address, "POST", "/check", body, {"Content-Type": "text/plain"})[0] == 415
        assert request(address, "POST", "/check", body, {"Origin": "http://attacker.example"})[0] == 403
        assert request(address, "GET", "/metrics", headers={"Host": "attacker.example"})[0] == 421
        assert request(address, "POST", "/check", raw=b"[" * 50_000 + b"]" * 50_000)[0] == 400
        task = {**load_tasks(tiny_suite)[0].to_dict(), "context": "(*" + " " * TASK_FIELD_LIMITS["context"] + "*)"}
        assert request(address, "POST", "/check", [{"task": task, "proof": "Proof. lia. Qed."}])[0] == 413
        assert client.metrics()["checks_total"] == 4
        tree = descendants(proc.pid)
        assert tree, "the service's workers and provers should be running"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(_alive(p) for p in tree):
            time.sleep(0.1)
        assert not any(_alive(p) for p in tree), "SIGTERM must stop every worker and prover"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()


def test_the_client_waits_for_a_busy_service_as_it_asks_then_gives_up(pool, tmp_path):
    """Backpressure end to end: a full queue answers 503 + Retry-After; the client waits and sends again."""
    import threading
    import time as _time

    release = tmp_path / "release"
    body = [{"task": fake_task(1).to_dict(), "proof": "ok"}]
    with VerifierService(pool, ServiceConfig(port=0, max_queue=1)) as svc:
        busy = pool.submit(fake_task(0), f"wait:{release}")
        impatient = VerifierServiceClient(svc.url, busy_retries=1)
        with pytest.raises(VerifierError, match=r"answered 503: .*queued.*\(after 1 waits\)"):
            impatient.check(body)
        assert impatient.busy_waits == 1
        patient = VerifierServiceClient(svc.url, busy_retries=50)
        answers: list = []
        waiter = threading.Thread(target=lambda: answers.append(patient.check(body)))
        waiter.start()
        deadline = _time.monotonic() + 120
        while patient.busy_waits < 1:  # the client has met the full queue and is waiting as asked
            assert _time.monotonic() < deadline, "the client never met the full queue"
            _time.sleep(0.01)
        release.touch()
        busy.result(timeout=60)
        waiter.join(timeout=120)
    assert answers and answers[0][0]["verdict"] == "OK"


def test_serve_verifier_passes_ray_placement_to_the_ray_pool_and_refuses_it_without_ray(monkeypatch, capsys,
                                                                                          tiny_suite):
    """--ray-node-resource/--ray-node/--ray-share reach RayVerifierPool (via make_pool); without --engine ray
    they are a usage error (exit 2) instead of being dropped."""
    from proofgym.cli import main
    from proofgym.envs.errors import ProofgymError
    from proofgym.envs.verifiers import pool as pool_module

    seen: dict[str, Any] = {}

    def fake_make_pool(engine: str, **kwargs: Any) -> Any:  # a fake: records the call, starts nothing
        seen.update(kwargs, engine=engine)
        raise ProofgymError("fake make_pool: stop here")

    monkeypatch.setattr(pool_module, "make_pool", fake_make_pool)
    flags = ["--ray-node-resource", "prover", "--ray-node", "local", "--ray-share", "pg"]
    assert main(["serve-verifier", "--port", "0", "--suite", str(tiny_suite), *flags]) == 2
    assert "--ray-node-resource, --ray-node, --ray-share need --engine ray" in capsys.readouterr().err
    assert not seen
    assert main(["serve-verifier", "--port", "0", "--suite", str(tiny_suite), "--engine", "ray", *flags]) == 3
    assert (seen["engine"], seen["node_resource"], seen["node"], seen["share"]) == ("ray", "prover", "local", "pg")
