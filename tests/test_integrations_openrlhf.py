"""The OpenRLHF agent file (``examples/integrations/openrlhf/agent_func.py``) through OpenRLHF's own executors.

OpenRLHF 0.11.2 as a whole does not install on this CPU machine (it pins flash-attn 2.8.3, whose build
needs CUDA, and deepspeed, transformers 5.15 and ray 2.55); its agent module (``openrlhf.utils.agent``)
needs only torch, transformers, sympy and pylatexenc, so setup installs the package without its
dependencies and the test runs OpenRLHF's real ``MultiTurnAgentExecutor``/``SingleTurnAgentExecutor``
code, loading the file as its vLLM engine does. A scripted engine stands in for vLLM; the verdicts come
from the real Coq verifier on the packaged ``coq-tiny`` suite.
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

agent = pytest.importorskip("openrlhf.utils.agent", reason="pip install --no-deps openrlhf==0.11.2 pylatexenc")

from proofgym.envs.episode import TaskSet  # noqa: E402
from proofgym.envs.errors import VerifierError  # noqa: E402
from proofgym.envs.verifiers.pool.inprocess import InProcessPool  # noqa: E402
from proofgym.envs.verifiers.service import ServiceConfig, VerifierService  # noqa: E402
from tests.conftest import requires_coq  # noqa: E402
from tests.integrations_common import CHEAT_REPLY, FAIL_REPLY, OK_REPLY, TASK, FakeBrokenVerifier, coq_tiny_scored_on  # noqa: E402

PROMPT = "Prove: Theorem lt_le (a b : nat) : a < b -> a <= b.\n"
AGENT_FILE = Path(__file__).resolve().parent.parent / "examples" / "integrations" / "openrlhf" / "agent_func.py"


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Any:
    from transformers import AutoTokenizer

    from proofgym.agents.tiny_model import build_tiny_model

    return AutoTokenizer.from_pretrained(build_tiny_model(tmp_path_factory.mktemp("tiny") / "model"))


class ScriptedEngine:
    """Stands in for OpenRLHF's vLLM engine: answers each ``generate`` with the next scripted reply."""

    def __init__(self, tokenizer: Any, replies: list[str]) -> None:
        self.tokenizer = tokenizer
        self.replies = iter(replies)

    async def generate(self, prompt_token_ids: list[int], sampling_params: Any, multi_modal_data: Any = None) -> Any:
        text = next(self.replies)
        ids = self.tokenizer(text=text, add_special_tokens=False)["input_ids"]
        return SimpleNamespace(outputs=[SimpleNamespace(token_ids=ids, text=text, finish_reason="stop", logprobs=None)])


def load_agent_file() -> ModuleType:
    """The file as OpenRLHF's vLLM engine loads ``--agent_func_path`` (``_load_agent_executor``)."""
    spec = importlib.util.spec_from_file_location("agent_module", AGENT_FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert issubclass(module.AgentExecutor, agent.AgentExecutorBase)
    return module


def run(executor: Any, tokenizer: Any, replies: list[str], label: str = TASK) -> dict[str, Any]:
    params = SimpleNamespace(max_tokens=None, logprobs=None)
    return asyncio.run(executor.execute(PROMPT, label, params, 4096, tokenizer, ScriptedEngine(tokenizer, replies)))


@contextmanager
def scoring_with(verifier: Any, monkeypatch: Any) -> Iterator[None]:
    """``PROOFGYM_SUITE=coq-tiny`` checked on ``verifier`` in this process (what the env would otherwise make)."""
    monkeypatch.setenv("PROOFGYM_SUITE", "coq-tiny")
    monkeypatch.delenv("PROOFGYM_VERIFIER_URL", raising=False)
    with coq_tiny_scored_on(verifier):
        yield


@requires_coq
@pytest.mark.prover
def test_openrlhfs_multi_turn_executor_runs_repair_episodes_with_real_coq(tokenizer, coq_verifier, monkeypatch):
    with scoring_with(coq_verifier, monkeypatch):
        executor = load_agent_file().AgentExecutor()
        repaired = run(executor, tokenizer, [FAIL_REPLY, OK_REPLY])
        cheat = run(executor, tokenizer, [CHEAT_REPLY])
        spent = run(executor, tokenizer, [FAIL_REPLY] * 3)
    assert (repaired["reward"], repaired["scores"].item(), len(repaired["action_ranges"])) == (1.0, 1.0, 2)
    text = tokenizer.decode(repaired["observation_tokens"])
    assert "<|im_start|>user" in text  # the verifier's feedback went back as a user turn between the replies
    assert (cheat["reward"], len(cheat["action_ranges"])) == (-1.0, 1)
    assert (spent["reward"], len(spent["action_ranges"])) == (0.0, 3)  # the turn budget (PROOFGYM_MAX_TURNS 3)


@requires_coq
@pytest.mark.prover
def test_openrlhfs_single_turn_executor_scores_with_the_file_and_the_service(tokenizer, coq_verifier, monkeypatch):
    replies = [OK_REPLY, FAIL_REPLY, CHEAT_REPLY]
    with scoring_with(coq_verifier, monkeypatch):
        by_file = agent.SingleTurnAgentExecutor(remote_rm_url=str(AGENT_FILE))
        assert [run(by_file, tokenizer, [r])["reward"].item() for r in replies] == [1.0, 0.0, -1.0]
    with InProcessPool({"coq": coq_verifier}) as pool, \
            VerifierService(pool, ServiceConfig(port=0), tasks=TaskSet("coq-tiny").by_id) as service:
        by_http = agent.SingleTurnAgentExecutor(remote_rm_url=f"{service.url}/reward")  # the service's endpoint
        assert [run(by_http, tokenizer, [r])["reward"] for r in replies] == [[1.0], [0.0], [-1.0]]  # JSON lists


@requires_coq
@pytest.mark.prover
def test_the_pages_example_writes_the_dataset_and_scores_a_reply(coq_verifier, monkeypatch, tmp_path, capsys):
    from tests.test_integrations_docs import doc_example

    monkeypatch.chdir(tmp_path)
    with scoring_with(coq_verifier, monkeypatch):
        exec(compile(doc_example("openrlhf"), "docs/integrations/openrlhf.md", "exec"), {})  # noqa: S102
    assert capsys.readouterr().out.strip() == "tensor([1.])"
    assert len((tmp_path / "coq-tiny.jsonl").read_text().splitlines()) == 5


def test_a_harness_failure_leaves_no_reward(tokenizer, monkeypatch):
    with scoring_with(FakeBrokenVerifier(), monkeypatch):
        one_turn = run(agent.SingleTurnAgentExecutor(remote_rm_url=str(AGENT_FILE)), tokenizer, [OK_REPLY])
        assert one_turn["reward"] is None  # OpenRLHF's own "no reward" for a reward_func that raised
        with pytest.raises(VerifierError, match="fake: coqidetop died"):  # multi-turn has no such value: stop
            run(load_agent_file().AgentExecutor(), tokenizer, [OK_REPLY])


@requires_coq
@pytest.mark.prover
def test_openrlhfs_agent_steps_concurrent_sessions_apart_and_stops_at_the_turn_limit(tokenizer, coq_verifier,
                                                                                   monkeypatch):
    monkeypatch.setenv("PROOFGYM_MAX_TURNS", "2")
    with scoring_with(coq_verifier, monkeypatch):
        module = load_agent_file()

        async def two_sessions() -> list[dict[str, Any]]:
            # OpenRLHF's engine runs many samples at once, one AgentInstance each: their episodes must not mix
            executor = module.AgentExecutor()
            params = SimpleNamespace(max_tokens=None, logprobs=None)
            return await asyncio.gather(*(
                executor.execute(PROMPT, TASK, params, 4096, tokenizer, ScriptedEngine(tokenizer, script))
                for script in ([FAIL_REPLY, OK_REPLY], [FAIL_REPLY, FAIL_REPLY])))

        repaired, spent = asyncio.run(two_sessions())

        # the instance's own reset/step, with the states OpenRLHF's multi-turn executor passes
        instance = module.AgentInstance()
        assert asyncio.run(instance.reset({"observation": PROMPT, "label": TASK})) == {"observation": PROMPT}
        states = {"observation_text": PROMPT, "label": TASK, "sampling_params": None}
        first = asyncio.run(instance.step({**states, "action_text": FAIL_REPLY}))
        second = asyncio.run(instance.step({**states, "action_text": FAIL_REPLY}))
        with pytest.raises(RuntimeError, match="is over"):  # past the limit: start another episode
            asyncio.run(instance.step({**states, "action_text": OK_REPLY}))
    assert (repaired["reward"], len(repaired["action_ranges"])) == (1.0, 2)
    assert (spent["reward"], len(spent["action_ranges"])) == (0.0, 2)  # PROOFGYM_MAX_TURNS=2
    assert (first["done"], first["rewards"].item()) == (False, 0.0)
    assert first["environment_feedback"].startswith("<|im_end|>\n<|im_start|>user\n")  # the prover's feedback turn
    assert "Unable to unify \"b\" with \"a\"." in first["environment_feedback"]  # Coq's own message
    assert (second["done"], second["rewards"].item(), second["environment_feedback"]) == (True, 0.0, "")
