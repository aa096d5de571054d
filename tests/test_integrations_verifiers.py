"""The verifiers taskset (``training/integrations/verifiers_env.py``) through verifiers' own loaders and CLI.

The Hub package (``examples/integrations/verifiers``) is loaded by id, as ``vf-eval`` and
``prime env install`` load it; ``vf-validate`` (verifiers' model-free validator) runs its gold and
untouched-scoring checks against the real Coq verifier; and a scripted reply is scored by
``Task.score`` on a ``vf.Trace``, the call a rollout ends with.

Why no full rollout: a verifiers 0.4 rollout runs the model through a harness program (the ``null``
harness's chat program, a PEP 723 script) that the runtime prepares when it starts: it installs uv with
its installer script from the uv project's own site when uv is missing, then ``uv sync --script``
downloads the program's dependencies (openai, mcp 2.0.0, httpx, httpx2, tenacity, certifi). A test
has no network for that; loading, scoring and validation are the library's own code paths without it.
The repair env (``ProofgymRepairEnv``, the Env verifiers' loader finds in the Hub package) runs its real
``run(task, agents)`` with ``FakeAgents``, a fake seat whose interaction plays scripted replies on a real
``vf.Trace`` and scores the task when the exchange ends, as a real rollout does.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest

vf = pytest.importorskip("verifiers.v1", reason="pip install 'proofgym[verifiers]'")

from proofgym.envs.errors import VerifierError  # noqa: E402
from proofgym.envs.verifiers.pool.inprocess import InProcessPool  # noqa: E402
from proofgym.training.integrations import verifiers_env  # noqa: E402
from proofgym.training.integrations.core import ProofScorer, use_scorer  # noqa: E402
from tests.conftest import requires_coq  # noqa: E402
from tests.integrations_common import CHEAT_REPLY, FAIL_REPLY, OK_REPLY, TASK, FakeBrokenVerifier  # noqa: E402

PACKAGE = Path(__file__).resolve().parent.parent / "examples" / "integrations" / "verifiers"


@pytest.fixture
def hub_package(monkeypatch) -> Iterator[None]:
    """The Hub package importable by its id, as ``pip install examples/integrations/verifiers`` makes it."""
    monkeypatch.syspath_prepend(str(PACKAGE))
    yield


@contextmanager
def scoring_with(verifier: Any) -> Iterator[ProofScorer]:
    """Tasks of coq-tiny scored on ``verifier`` in this process (what ``scorer_for`` would otherwise make)."""
    with InProcessPool({"coq": verifier}) as pool:
        scorer = ProofScorer("coq-tiny", pool=pool)
        use_scorer("coq-tiny", scorer)
        try:
            yield scorer
        finally:
            use_scorer("coq-tiny", None)


def _task(task_id: str) -> Any:
    """The task ``task_id`` as verifiers' own loader builds it from the Hub package's id."""
    from verifiers.v1.utils.loaders import load_taskset, taskset_config_type

    config = taskset_config_type(verifiers_env.TASKSET_ID)(id=verifiers_env.TASKSET_ID)
    return next(t for t in load_taskset(config) if t.data.task_id == task_id)


def _scored(task: Any, reply: str) -> Any:
    """``Task.score`` on a trace whose agent replied ``reply`` (the trace a rollout hands to scoring)."""
    trace = _trace(task)
    trace.root_reply = reply
    try:
        asyncio.run(task.score(trace))
    except vf.TaskError as exc:
        trace.info["error"] = exc
    return trace


@requires_coq
@pytest.mark.prover
def test_the_reward_scores_ok_fail_and_cheating_with_real_coq(hub_package, coq_verifier):
    with scoring_with(coq_verifier):
        task = _task(TASK)
        assert "lt_le" in task.data.prompt_text
        rewards = [_scored(task, reply).rewards["proof"].score for reply in (OK_REPLY, FAIL_REPLY, CHEAT_REPLY)]
    assert rewards == [1.0, 0.0, -1.0]


def test_a_harness_failure_is_the_rollouts_error_and_no_reward(hub_package):
    with scoring_with(FakeBrokenVerifier()):
        trace = _scored(_task(TASK), OK_REPLY)
    assert trace.rewards["proof"] is None  # verifiers' "scoring didn't run", never a 0
    assert "fake: coqidetop died" in str(trace.info["error"])


@requires_coq
@pytest.mark.prover
def test_the_pages_example_vf_validate_passes_the_hub_package_with_real_coq(hub_package, coq_verifier, tmp_path,
                                                                            monkeypatch):
    from tests.test_integrations_docs import doc_example

    monkeypatch.setenv("VF_RUN_ID", "proofgym-test")  # validate.main sets it for its run; keep it to this test
    monkeypatch.chdir(tmp_path)
    with scoring_with(coq_verifier):
        exec(compile(doc_example("verifiers"), "docs/integrations/verifiers.md", "exec"), {})  # noqa: S102
    (summary,) = tmp_path.glob("vf-validate-runs/*/summary.json")
    checks = json.loads(summary.read_text())["checks"]
    # gold: every reference proof verifies; noop: an untouched rollout (no reply) is not solved
    assert (checks["gold"]["valid"], checks["noop"]["valid"]) == (5, 5)


def test_load_environment_builds_verifiers_env_over_the_suite(hub_package):
    with scoring_with(FakeBrokenVerifier()):
        env = verifiers_env.load_environment("coq-tiny")
    assert isinstance(env, vf.Env)
    assert env.config.taskset.id == verifiers_env.TASKSET_ID and env.config.taskset.task.suite == "coq-tiny"


class FakeInteraction:
    """A fake of verifiers' ``Interaction`` (a real one runs the model through a harness program; see the module
    docstring): each ``turn`` answers the next scripted reply as a real ``vf.Segment``, on a real ``vf.Trace``."""

    def __init__(self, task: Any, replies: list[str]) -> None:
        self.trace = _trace(task)
        self.replies = iter(replies)
        self.user_turns: list[str] = []

    async def turn(self, message: str | None = None) -> Any:
        from verifiers.v1.types import AssistantMessage

        if message is not None:
            self.user_turns.append(message)
        reply = next(self.replies, None)
        if reply is None:
            return vf.Segment(messages=[], terminated=True)
        self.trace.root_reply = reply
        return vf.Segment(messages=[AssistantMessage(content=reply)], root_reply=reply)


class FakeAgents:
    """A fake of verifiers' ``Agents`` with the one ``agent`` seat: its interaction plays scripted replies and, when
    the exchange ends, scores the task on the trace (what a real rollout does as it closes)."""

    def __init__(self, replies: list[str]) -> None:
        self.agent = self
        self.replies = replies
        self.interactions: list[FakeInteraction] = []

    @asynccontextmanager
    async def interaction(self, task: Any) -> AsyncIterator[FakeInteraction]:
        interaction = FakeInteraction(task, self.replies)
        self.interactions.append(interaction)
        yield interaction
        await task.score(interaction.trace)


def _trace(task: Any) -> Any:
    from verifiers.v1.state import state_cls
    from verifiers.v1.trace import Trace, TraceTask

    return Trace(task=TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
                 state=state_cls(type(task))(), agent=vf.AgentInfo(config=vf.AgentConfig(), name="scripted"))


def run_episode(env: Any, replies: list[str]) -> FakeInteraction:
    """One rollout of the task ``TASK`` through the env verifiers' loader built (``Env.run``)."""
    agents = FakeAgents(replies)
    asyncio.run(env.run(_task(TASK), agents))
    return agents.interactions[0]


@requires_coq
@pytest.mark.prover
def test_the_repair_env_verifiers_loads_repairs_cheats_and_spends_its_budget_with_real_coq(hub_package, coq_verifier):
    with scoring_with(coq_verifier):
        env = verifiers_env.load_environment("coq-tiny", max_turns=3)
        assert isinstance(env, verifiers_env.ProofgymRepairEnv)  # the Hub package's Env, found by verifiers' loader
        repaired = run_episode(env, [FAIL_REPLY, OK_REPLY])
        cheat = run_episode(env, [CHEAT_REPLY])
        spent = run_episode(env, [FAIL_REPLY] * 3)
        one_turn = run_episode(verifiers_env.load_environment("coq-tiny"), [FAIL_REPLY, OK_REPLY])
    assert (repaired.trace.rewards["proof"].score, repaired.trace.info["proofgym_turns"]) == (1.0, ["FAIL", "OK"])
    assert len(repaired.user_turns) == 1 and "Coq" in repaired.user_turns[0]  # the verifier's feedback
    assert (cheat.trace.rewards["proof"].score, cheat.trace.info["proofgym_turns"]) == (-1.0, ["CHEATING"])
    assert (spent.trace.rewards["proof"].score, spent.trace.info["proofgym_turns"]) == (0.0, ["FAIL"] * 3)
    assert len(spent.user_turns) == 2  # the budget: three replies, two feedback turns
    assert (one_turn.trace.rewards["proof"].score, one_turn.user_turns) == (0.0, [])  # max_turns=1: one answer


def test_a_harness_failure_in_a_repair_episode_is_raised_to_the_rollout(hub_package):
    with scoring_with(FakeBrokenVerifier()), pytest.raises(VerifierError, match="fake: coqidetop died"):
        run_episode(verifiers_env.load_environment("coq-tiny", max_turns=3), [OK_REPLY])
