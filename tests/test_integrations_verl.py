"""The verl reward (``training/integrations/verl_reward.py``) through verl's published function contract.

verl 0.9.1 does not install beside this project (it pins ``transformers>=5.5.3,<5.11``; the train extra
runs 5.2x), so the test does what verl does: load the function from its file by path and name
(``get_custom_reward_fn``: ``reward.custom_reward_function.path/.name``), merge ``reward_kwargs`` over
the call's keywords, and call it with ``NaiveRewardManager.run_single``'s keywords. The checks go
through the real verifier service (``proofgym serve-verifier``'s ``VerifierService`` on 127.0.0.1)
with the real Coq verifier, on the packaged ``coq-tiny`` suite.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from proofgym.envs.episode import TaskSet
from proofgym.envs.errors import VerifierError
from proofgym.envs.verifiers.inprocess_pool import InProcessPool
from proofgym.envs.verifiers.service import ServiceConfig, VerifierService
from proofgym.training.integrations import verl_reward
from proofgym.training.integrations.core import close_scorers
from tests.conftest import requires_coq
from tests.integrations_common import CHEAT_REPLY, FAIL_REPLY, TASK, FakeBrokenVerifier

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
