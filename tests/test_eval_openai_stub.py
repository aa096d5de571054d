"""``proofgym eval --agent openai`` against a bare OpenAI-compatible stub on loopback, with real Coq.

The stub answers like the most minimal compatible server: no ``usage``, no ``id``,
replies chosen by the lemma named in the prompt, a 500 on its first request and
a 429 on its second. The summary must count every verdict, cheats included.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.conftest import requires_coq

pytest.importorskip("openai")

REPLIES = {
    "add_0_r'": "Sure! Here is the proof:\n```coq\nProof. induction n; simpl; [reflexivity | now rewrite IHn]. Qed.\n```",
    "my_app_nil": "```coq\nProof. Admitted.\n```",                                # CHEATING
    "and_comm'": "```coq\nLemma and_comm' (P Q : Prop) : P /\\ Q -> Q /\\ P.\nProof. intros [p q]. split; "
                 "assumption. Qed.\n```",                                         # statement repeated: still OK
    "lt_le": "```coq\nProof. reflexivity. Qed.\n```",                             # FAIL
    "ff": "```coq\nProof. rewrite !f_id reflexivity. Qed.\n```",                  # ERROR (syntax)
    "two": "```coq\nProof. lia. Qed.\nAxiom cheat : False.\n```",                # CHEATING (vernacular)
}
EXPECTED = {"OK": 2, "CHEATING": 2, "FAIL": 1, "ERROR": 1}


class _Stub(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    hits = 0
    lock = threading.Lock()

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with _Stub.lock:
            _Stub.hits += 1
            hit = _Stub.hits
        if hit in (1, 2):
            status = 500 if hit == 1 else 429
            payload = json.dumps({"error": {"message": "try later"}}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            if status == 429:
                self.send_header("Retry-After", "0")
            self.end_headers()
            self.wfile.write(payload)
            return
        prompt = body["messages"][-1]["content"]
        name = re.search(r"(?:Lemma|Theorem) ([\w']+)", prompt.split("Statement:")[-1]).group(1)
        reply = REPLIES.get(name, "no idea")
        payload = json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": reply}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


@pytest.fixture
def stub_url():
    _Stub.hits = 0
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Stub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


@pytest.mark.prover
@requires_coq
def test_eval_against_a_minimal_stub_counts_verdicts_and_cheats(stub_url, tiny_suite, tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "proofgym.cli", "eval", "--agent", "openai", "--base-url", stub_url,
                           "--model", "stub-model", "--suite", str(tiny_suite), "--workers", "2", "--out", str(out),
                           "--json"], capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})  # no OPENAI_API_KEY anywhere
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["verdicts"] == EXPECTED
    assert sum(summary["cheat_reasons"].values()) == 2
    assert summary["n_results"] == 6 and summary["agent_failures"] == 0 and summary["harness_failures"] == 0
    assert summary["per_category"]["all"]["pass@1"] == pytest.approx(2 / 6)
    assert json.loads((out / "summary.json").read_text())["verdicts"] == EXPECTED
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert sum(r["attempts"][0]["retries"] for r in rows) == 2  # the 500 and the 429 were retried
    assert summary["cost"]["prompt_tokens"] == 0  # the stub reports no usage: nothing is made up
