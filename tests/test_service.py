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
import time
from typing import Any

import pytest

from proofgym.envs.errors import VerifierError
from proofgym.envs.types import Verdict
from proofgym.envs.verifiers.pool import LocalVerifierPool
from proofgym.envs.verifiers.service import ServiceConfig, ServiceConfigError, VerifierService
from proofgym.envs.verifiers.service_client import (
    ServiceVerifier,
    VerifierServiceClient,
    result_from_dict,
    service_reward_function,
)
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


def request(svc: VerifierService, method: str, path: str, body: Any = None, headers: dict | None = None,
            raw: bytes | None = None) -> tuple[int, dict[str, str], Any]:
    host, port = svc.address
    conn = http.client.HTTPConnection(host, port, timeout=60)
    try:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        conn.request(method, path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
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


def test_a_full_queue_answers_503(pool):
    with VerifierService(pool, ServiceConfig(port=0, max_queue=1)) as svc:
        busy = pool.submit(fake_task(0), "sleep:1.5")
        status, headers, _ = request(svc, "POST", "/check", [{"task": fake_task(1).to_dict(), "proof": "ok"}])
        assert status == 503 and headers["retry-after"] == "1"
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
