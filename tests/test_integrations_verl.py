"""The verl reward (``training/integrations/verl_reward.py``) through verl's published function contract.

verl 0.9.1 does not install beside this project (it pins ``transformers>=5.5.3,<5.11``; the train extra
runs 5.2x), so the test does what verl does: load the function from its file by path and name
(``get_custom_reward_fn``: ``reward.custom_reward_function.path/.name``), merge ``reward_kwargs`` over
the call's keywords, and call it with ``NaiveRewardManager.run_single``'s keywords. The checks go
through the real verifier service (``proofgym serve-verifier``'s ``VerifierService`` on 127.0.0.1)
with the real Coq verifier, on the packaged ``coq-tiny`` suite.

The reward manager and the agent loop are driven the same way, by contract: the manager class loaded
from its file as verl's ``load_extern_object`` does (``reward.reward_manager.source: importlib``), built
with the keywords each of verl's two manager paths passes, and called on a batch laid out as verl's
``DataProto`` (``FakeDataProto``, a fake: verl's own needs verl); the agent loop built with the keywords
verl's ``hydra.utils.instantiate`` passes and run against a scripted ``server_manager`` (the policy).
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from proofgym.envs.episode import TaskSet
from proofgym.envs.errors import VerifierError
from proofgym.envs.verifiers.pool.inprocess import InProcessPool
from proofgym.envs.verifiers.service import ServiceConfig, VerifierService
from proofgym.training.integrations import verl_reward
from proofgym.training.integrations.core import close_scorers
from tests.conftest import requires_coq
from tests.integrations_common import (
    CHEAT_REPLY,
    FAIL_REPLY,
    TASK,
    FakeBrokenVerifier,
    FakeDataProto,
    coq_tiny_scored_on,
)

OK_REPLY = "Since a < b, lia closes it.\n```coq\nProof. lia. Qed.\n```"


def _call_with_kwargs(raw_fn: Callable[..., Any], extra_kwargs: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
    return raw_fn(*args, **{**kwargs, **extra_kwargs})  # verl's merge: reward_kwargs win


def verl_custom_reward_fn(path: Path, name: str, reward_kwargs: dict[str, Any]) -> Callable[..., Any]:
    """What verl's ``get_custom_reward_fn`` returns for ``custom_reward_function: {path, name, reward_kwargs}``."""
    spec = importlib.util.spec_from_file_location("custom_module", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return partial(_call_with_kwargs, getattr(module, name), reward_kwargs)


def naive_manager_call(compute_score: Callable[..., Any], row: dict[str, Any], response: str) -> Any:
    """One response scored as ``NaiveRewardManager.run_single`` calls the function."""
    extra_info = dict(row.get("extra_info", {}))
    extra_info.update(num_turns=None, rollout_reward_scores={})
    return compute_score(data_source=row["data_source"], solution_str=response,
                         ground_truth=row["reward_model"]["ground_truth"], extra_info=extra_info)


@contextmanager
def verifier_service(verifier: Any) -> Iterator[str]:
    with InProcessPool({"coq": verifier}) as pool, \
            VerifierService(pool, ServiceConfig(port=0), tasks=TaskSet("coq-tiny").by_id) as service:  # serving
        try:
            yield service.url
        finally:
            close_scorers()  # the scorer compute_score made for this URL


def _row() -> dict[str, Any]:
    return next(r for r in verl_reward.verl_rows("coq-tiny") if r["reward_model"]["ground_truth"] == TASK)


@requires_coq
@pytest.mark.prover
def test_verls_call_scores_ok_fail_and_cheating_on_the_verifier_service(coq_verifier):
    with verifier_service(coq_verifier) as url:
        compute_score = verl_custom_reward_fn(Path(verl_reward.__file__), "compute_score", {"service_url": url})
        scored = [naive_manager_call(compute_score, _row(), reply) for reply in (OK_REPLY, FAIL_REPLY, CHEAT_REPLY)]
    assert [s["score"] for s in scored] == [1.0, 0.0, -1.0]
    assert [(s["acc"], s["cheating"]) for s in scored] == [(1.0, 0.0), (0.0, 0.0), (0.0, 1.0)]


@requires_coq
@pytest.mark.prover
def test_the_pages_example_runs_against_a_verifier_service(coq_verifier, tmp_path, monkeypatch, capsys):
    from tests.test_integrations_docs import doc_example

    monkeypatch.chdir(tmp_path)
    with verifier_service(coq_verifier) as url:
        code = doc_example("verl").replace("http://127.0.0.1:8000", url)
        exec(compile(code, "docs/integrations/verl.md", "exec"), {})  # noqa: S102 - the page's own example
    assert capsys.readouterr().out.strip() == "{'score': 1.0, 'acc': 1.0, 'cheating': 0.0}"
    assert (tmp_path / "data" / "coq-tiny" / "train.parquet").is_file()


def test_a_harness_failure_raises_instead_of_scoring_zero():
    with verifier_service(FakeBrokenVerifier()) as url:
        compute_score = verl_custom_reward_fn(Path(verl_reward.__file__), "compute_score", {"service_url": url})
        with pytest.raises(VerifierError, match="harness failure on coq.tiny.lia") as caught:
            naive_manager_call(compute_score, _row(), OK_REPLY)
    assert "fake: coqidetop died" in str(caught.value)


def test_the_rows_are_verls_dataset_format_and_round_trip_through_parquet(tmp_path):
    pandas = pytest.importorskip("pandas")
    rows = verl_reward.verl_rows("coq-tiny")
    assert len(rows) == 5 and {r["data_source"] for r in rows} == {"proofgym/coq-tiny"}
    row = _row()
    assert row["prompt"][-1]["role"] == "user" and row["extra_info"]["suite"] == "coq-tiny"
    back = pandas.read_parquet(verl_reward.write_verl_parquet("coq-tiny", tmp_path / "train.parquet"))
    assert list(back["reward_model"].map(lambda r: r["ground_truth"])) == [r["reward_model"]["ground_truth"]
                                                                          for r in rows]


def test_a_row_from_elsewhere_is_refused_with_what_to_pass():
    with pytest.raises(ValueError, match="pass suite= in reward_kwargs"):
        verl_reward.compute_score("openai/gsm8k", "42", "42", {})


# -- the reward manager and the agent loop, by contract -----------------------------------------
@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Any:
    from transformers import AutoTokenizer

    from proofgym.agents.tiny_model import build_tiny_model

    return AutoTokenizer.from_pretrained(build_tiny_model(tmp_path_factory.mktemp("tiny") / "model"))


scoring_with = coq_tiny_scored_on  # coq-tiny checked on a given verifier in this process


def manager_class() -> type:
    """What verl's ``load_extern_object(module_path=this file, object_name=...)`` returns."""
    spec = importlib.util.spec_from_file_location("custom_module", verl_reward.__file__)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ProofgymRewardManager


@requires_coq
@pytest.mark.prover
def test_the_reward_manager_scores_a_batch_on_both_of_verls_manager_paths(tokenizer, coq_verifier):
    replies = [OK_REPLY, FAIL_REPLY, CHEAT_REPLY]
    data = FakeDataProto.from_rows(tokenizer, [_row()] * 3, replies)
    lengths = data.batch["attention_mask"][:, data.batch["prompts"].shape[-1]:].sum(dim=-1)
    with scoring_with(coq_verifier):
        # the registered manager's path: tokenizer, num_examine, compute_score, reward_fn_key; manager(data, return_dict)
        legacy = manager_class()(tokenizer=tokenizer, num_examine=0, compute_score=None, reward_fn_key="data_source")
        out = legacy(data, return_dict=True)
        # the reward loop's path (verl 0.9): config, tokenizer, compute_score; await run_single(one sample)
        looped = manager_class()(config={"reward": {"reward_kwargs": {}}}, tokenizer=tokenizer, compute_score=None)
        singles = [asyncio.run(looped.run_single(data[i:i + 1])) for i in range(3)]
    tensor = out["reward_tensor"]
    assert [tensor[i, int(lengths[i]) - 1].item() for i in range(3)] == [1.0, 0.0, -1.0]
    assert tensor.sum(dim=-1).tolist() == [1.0, 0.0, -1.0]  # the score on the last valid token only
    assert (out["reward_extra_info"]["acc"], out["reward_extra_info"]["cheating"]) == ([1.0, 0.0, 0.0], [0.0, 0.0, 1.0])
    assert [s["reward_score"] for s in singles] == [1.0, 0.0, -1.0]


def test_the_reward_manager_raises_on_a_harness_failure(tokenizer):
    data = FakeDataProto.from_rows(tokenizer, [_row()], [OK_REPLY])
    with scoring_with(FakeBrokenVerifier()), pytest.raises(VerifierError, match="fake: coqidetop died"):
        manager_class()(tokenizer=tokenizer, num_examine=0, compute_score=None)(data)


class ScriptedServerManager:
    """Stands in for verl's LLM server client: answers each ``generate`` with the next scripted reply."""

    def __init__(self, tokenizer: Any, replies: list[str]) -> None:
        self.tokenizer = tokenizer
        self.replies = iter(replies)
        self.prompts: list[list[int]] = []

    async def generate(self, *, request_id: str, prompt_ids: list[int], sampling_params: dict[str, Any],
                       **kwargs: Any) -> Any:
        from types import SimpleNamespace

        self.prompts.append(list(prompt_ids))
        return SimpleNamespace(token_ids=self.tokenizer(next(self.replies), add_special_tokens=False)["input_ids"],
                               log_probs=None)


def run_agent_loop(tokenizer: Any, replies: list[str], **loop_kwargs: Any) -> tuple[Any, ScriptedServerManager]:
    """One sample through the loop, built with the keywords verl's hydra instantiate passes."""
    from proofgym.training.integrations.verl_agent import ProofRepairAgentLoop

    server = ScriptedServerManager(tokenizer, replies)
    config = SimpleNamespace(config={"actor_rollout_ref": {"rollout": {"response_length": 2048,
                                                                      "multi_turn": {"max_assistant_turns": 3}}}})
    loop = ProofRepairAgentLoop(trainer_config=config, server_manager=server, tokenizer=tokenizer, processor=None,
                                dataset_cls=None, data_config=SimpleNamespace(config={}), **loop_kwargs)
    row = _row()
    output = asyncio.run(loop.run({"temperature": 1.0}, raw_prompt=row["prompt"], data_source=row["data_source"],
                                  reward_model=row["reward_model"], extra_info=row["extra_info"],
                                  agent_name="proofgym_repair"))
    return output, server


@requires_coq
@pytest.mark.prover
def test_the_agent_loop_repairs_cheats_and_spends_its_turn_budget_with_real_coq(tokenizer, coq_verifier):
    with scoring_with(coq_verifier):
        repaired, server = run_agent_loop(tokenizer, [FAIL_REPLY, OK_REPLY])
        cheat, _ = run_agent_loop(tokenizer, [CHEAT_REPLY])
        spent, _ = run_agent_loop(tokenizer, [FAIL_REPLY] * 3)
    assert (repaired.reward_score, repaired.extra_fields["verdicts"], repaired.num_turns) == (1.0, ["FAIL", "OK"], 4)
    mask = repaired.response_mask
    feedback = tokenizer.decode([t for t, m in zip(repaired.response_ids, mask, strict=True) if m == 0])
    assert "<|im_start|>user" in feedback and "Coq" in feedback  # the verifier's feedback, out of the loss
    assert len(server.prompts) == 2 and server.prompts[1][:len(server.prompts[0])] == server.prompts[0]
    assert (cheat.reward_score, cheat.extra_fields["verdicts"]) == (-1.0, ["CHEATING"])
    assert (spent.reward_score, spent.extra_fields["verdicts"]) == (0.0, ["FAIL"] * 3)  # max_assistant_turns 3


def test_the_agent_loop_raises_on_a_harness_failure(tokenizer):
    with scoring_with(FakeBrokenVerifier()), pytest.raises(VerifierError, match="fake: coqidetop died"):
        run_agent_loop(tokenizer, [OK_REPLY])
