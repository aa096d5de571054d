"""A tiny local model behind ``serve-model``, through the real ``openai`` and ``anthropic`` clients; checkpoint eval.

The model is built here (no download): a locally trained byte-level BPE
tokenizer and a two-layer Llama, taught four replies to the zero-shot prompts
of four tasks of the tiny suite, so that greedy decoding gives known proofs:
one right (OK), one ``Admitted`` (CHEATING), one wrong (FAIL), one that does
not parse (ERROR).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("openai")

from proofgym.agents import ModelUnavailable, Request, SamplingParams  # noqa: E402
from proofgym.agents.api import AnthropicAgent, OpenAIAgent, RetryPolicy  # noqa: E402
from proofgym.agents.strategies import PlainStrategy  # noqa: E402
from proofgym.envs.tasks.suites import load_tasks  # noqa: E402
from tests.conftest import requires_coq  # noqa: E402

pytestmark = pytest.mark.slow

REPLIES = {
    "tiny.add_0_r": "```coq\nProof. induction n; simpl; [reflexivity | now rewrite IHn]. Qed.\n```",
    "tiny.and_comm": "```coq\nProof. Admitted.\n```",
    "tiny.lia": "Proof. reflexivity. Qed.",
    "tiny.app_nil": "```coq\nProof. induction l as [|a l IH] Qed.\n```",
}
EXPECTED_VERDICTS = {"OK": 1, "CHEATING": 1, "FAIL": 1, "ERROR": 1}


@pytest.fixture(scope="module")
def tasks(tiny_suite):
    return {t.id: t for t in load_tasks(tiny_suite) if t.id in REPLIES}


@pytest.fixture(scope="module")
def suite4(tiny_suite, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("suite") / "tiny4.jsonl"
    path.write_text("".join(t.to_json() + "\n" for t in load_tasks(tiny_suite) if t.id in REPLIES))
    return path


def _request(task) -> Request:
    return PlainStrategy().request(task, 0, [])


@pytest.fixture(scope="module")
def checkpoint(tasks, tmp_path_factory) -> Path:
    from proofgym.agents.tiny_model import build_tiny_model

    teach = [(list(_request(tasks[tid]).messages), reply) for tid, reply in REPLIES.items()]
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny-coq", teach=teach)


@pytest.fixture(scope="module")
def local_agent(checkpoint):
    from proofgym.agents.hf import LocalAgent

    agent = LocalAgent(str(checkpoint), sampling=SamplingParams(max_tokens=48), batch_size=4, threads=1)
    yield agent
    agent.close()


def _serve(agent, **kwargs):
    from proofgym.agents.serve import ModelServer

    server = ModelServer(agent, port=0, model_name="tiny", **kwargs)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def server(local_agent):
    server = _serve(local_agent)
    yield server
    server.shutdown()
    server.server_close()


def test_local_agent_batches_and_counts_tokens(local_agent, tasks):
    requests = [_request(tasks[tid]) for tid in REPLIES]
    gens = local_agent.generate(requests)
    assert [g.text for g in gens] == list(REPLIES.values())
    assert all(g.prompt_tokens > 50 and 0 < g.completion_tokens < 48 and g.finish_reason == "stop" for g in gens)
    actions, _ = local_agent.act([{"task_id": "tiny.lia", "statement": tasks["tiny.lia"].statement,
                                   "context": tasks["tiny.lia"].context, "feedback": "", "attempt": 0}])
    assert actions == ["Proof. reflexivity. Qed."]


def test_openai_client_gets_replies_with_usage(server, tasks):
    agent = OpenAIAgent("tiny", base_url=server.url, sampling=SamplingParams(max_tokens=48), concurrency=4)
    requests = [_request(tasks[tid]) for tid in REPLIES]
    gens = agent.generate(requests)
    assert [g.text for g in gens] == list(REPLIES.values())
    assert all(g.error is None and g.prompt_tokens > 50 and g.completion_tokens > 0 and g.retries == 0 for g in gens)


def test_429_then_retry(local_agent, tasks):
    server = _serve(local_agent, fail_first=1)
    try:
        agent = OpenAIAgent("tiny", base_url=server.url, sampling=SamplingParams(max_tokens=48),
                            retry=RetryPolicy(max_retries=3, base_delay=0.01))
        (gen,) = agent.generate([_request(tasks["tiny.lia"])])
        assert gen.text == REPLIES["tiny.lia"] and gen.retries == 1 and gen.error is None
        assert server.requests_seen == 2 and agent.requests_sent == 2
        # With no retry left, the 429 is this request's failure (not a verdict, not a crash).
        server.fail_first = server.requests_seen + 1
        no_retry = OpenAIAgent("tiny", base_url=server.url, retry=RetryPolicy(max_retries=0))
        (failed,) = no_retry.generate([_request(tasks["tiny.lia"])])
        assert failed.error is not None and "RateLimitError" in failed.error and failed.text == ""
    finally:
        server.shutdown()
        server.server_close()


def test_anthropic_client_against_the_same_server(server, tasks):
    pytest.importorskip("anthropic")
    agent = AnthropicAgent("tiny", base_url=server.url.removesuffix("/v1"), sampling=SamplingParams(max_tokens=48))
    (gen,) = agent.generate([_request(tasks["tiny.add_0_r"])])
    assert gen.error is None and gen.prompt_tokens > 50 and gen.completion_tokens > 0
    assert gen.text.startswith("```coq")


def test_server_errors_become_clear_agent_errors(local_agent, tasks):
    import openai

    server = _serve(local_agent, api_key="secret")
    try:
        client = openai.OpenAI(base_url=server.url, api_key="secret")
        assert [m.id for m in client.models.list().data] == ["tiny"]
        with pytest.raises(ModelUnavailable, match="rejected the API key"):
            OpenAIAgent("tiny", base_url=server.url, api_key="wrong").generate([_request(tasks["tiny.lia"])])
        with pytest.raises(ModelUnavailable, match="does not serve model 'gpt-9'"):
            OpenAIAgent("gpt-9", base_url=server.url, api_key="secret").generate([_request(tasks["tiny.lia"])])
        # A base URL without /v1 is tried as given, then with /v1.
        bare = OpenAIAgent("tiny", base_url=server.url.removesuffix("/v1"), api_key="secret",
                           sampling=SamplingParams(max_tokens=48))
        assert bare.generate([_request(tasks["tiny.lia"])])[0].text == REPLIES["tiny.lia"]
        assert bare.base_url == server.url
    finally:
        server.shutdown()
        server.server_close()


def _start_cli_server(checkpoint: Path, *extra: str):
    proc = subprocess.Popen([sys.executable, "-m", "proofgym.cli", "serve-model", str(checkpoint), "--port", "0",
                             "--served-model-name", "tiny", "--threads", "1", *extra], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()  # "serving tiny on http://127.0.0.1:PORT/v1 (...)"
    if "http://" not in line:
        proc.kill()
        raise AssertionError(f"serve-model did not start: {line!r} {proc.communicate(timeout=30)[1][-2000:]}")
    return proc, line.split()[3]


def _eval(*args: str, timeout: float = 300):
    return subprocess.run([sys.executable, "-m", "proofgym.cli", "eval", *args], capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.prover
@requires_coq
def test_eval_openai_agent_against_serve_model_counts_verdicts_and_cheats(checkpoint, suite4, tmp_path):
    proc, url = _start_cli_server(checkpoint, "--fail-first", "1")
    try:
        assert url.startswith("http://127.0.0.1:")
        out = tmp_path / "run"
        result = _eval("--suite", str(suite4), "--agent", "openai", "--base-url", url, "--model", "tiny",
                       "--max-tokens", "48", "--workers", "2", "--out", str(out), "--price-in", "1",
                       "--price-out", "2", "--json")
        assert result.returncode == 0, result.stderr
        summary = json.loads(result.stdout)
        assert summary["verdicts"] == EXPECTED_VERDICTS
        assert summary["cheat_reasons"] and summary["n_results"] == 4 and summary["agent_failures"] == 0
        assert summary["per_category"]["all"]["pass@1"] == 0.25
        assert summary["failure_taxonomy"]["all"]["failures"] == 3
        cost = summary["cost"]
        assert cost["prompt_tokens"] > 200 and cost["completion_tokens"] > 0
        assert cost["cost_usd"] == pytest.approx((cost["prompt_tokens"] + 2 * cost["completion_tokens"]) / 1e6)
        assert json.loads((out / "summary.json").read_text())["verdicts"] == EXPECTED_VERDICTS
        rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
        assert sum(r["attempts"][0]["retries"] for r in rows) == 1  # the one 429 was retried
    finally:
        proc.terminate()
        proc.communicate(timeout=30)  # waits, and closes the server's pipes (a ResourceWarning fails the test)


@pytest.mark.prover
@requires_coq
def test_checkpoint_evaluation_with_the_local_agent(checkpoint, suite4, tmp_path):
    result = _eval("--suite", str(suite4), "--agent", "local", "--model", str(checkpoint), "--max-tokens", "48",
                   "--threads", "1", "--out", str(tmp_path / "run"), "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["verdicts"] == EXPECTED_VERDICTS
    assert summary["cost"]["completion_tokens"] > 0


def test_missing_checkpoint_is_a_clear_error(tmp_path):
    from proofgym.agents.hf import LocalAgent

    with pytest.raises(ModelUnavailable, match="nothing is downloaded here"):
        LocalAgent(str(tmp_path / "no-such-model"))
    with pytest.raises(ModelUnavailable, match="not in the local Hugging Face cache"):
        LocalAgent("some-org/some-model-that-is-not-cached")
