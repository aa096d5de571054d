"""One verifier service per node shared by its training ranks, and rewards TRL awaits (issue 29).

Every request goes to 127.0.0.1. The fast tier covers the rendezvous and the masking of harness failures
(a pool of fake verifiers, named as such); the prover tier runs two processes that share one service
started by local rank 0 against real Coq; the slow tier trains one GRPO step on the tiny model with the
service, through TRL's own reward call path.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import socket
from pathlib import Path
from typing import Any

import pytest

from proofgym.envs.tasks.suites import load_tasks
from proofgym.envs.verifiers.pool import Boundary, LocalVerifierPool
from proofgym.envs.verifiers.service import ServiceConfig, VerifierService
from proofgym.training.reward_service import (
    AsyncVerifierReward,
    NodeServiceError,
    NodeVerifierService,
    ServicePool,
    prefetch_rewards,
    service_setting,
)
from proofgym.training.rewards import VerifierReward
from tests.conftest import DATA, prover_processes_below, requires_coq
from tests.test_pool import FakeVerifier, _alive, fake_task

SUITE = DATA / "tiny_suite.jsonl"
#: (task, completion, the single verdict real Coq gives it, its reward)
BATCH = [("tiny.lia", "```coq\nProof. lia. Qed.\n```", "OK", 1.0),
         ("tiny.lia", "Proof. Admitted.", "CHEATING", -1.0),
         ("tiny.and_comm", "```coq\nProof. intros [p q]; split; assumption. Qed.\n```", "OK", 1.0),
         ("tiny.add_0_r", "```coq\nProof. reflexivity. Qed.\n```", "FAIL", 0.0)]


def _free_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"  # closed on return: nothing listens there


def _score(reward: AsyncVerifierReward, batch: list[tuple[str, str]]) -> list[float | None]:
    """One call through the coroutine TRL awaits."""
    return asyncio.run(reward(prompts=["p"] * len(batch), completions=[c for _, c in batch],
                              task_id=[t for t, _ in batch]))


# -- fast tier --------------------------------------------------------------------------------------------
def test_the_setting_is_a_pool_per_rank_node_or_a_url_and_anything_else_says_what_to_write(monkeypatch):
    class Cfg:
        verifier_service = None

    monkeypatch.delenv("PROOFGYM_VERIFIER_SERVICE", raising=False)
    assert service_setting(Cfg()) == ""
    monkeypatch.setenv("PROOFGYM_VERIFIER_SERVICE", "node")
    assert service_setting(Cfg()) == "node"
    Cfg.verifier_service = "http://127.0.0.1:9"
    assert service_setting(Cfg()) == "http://127.0.0.1:9"
    Cfg.verifier_service = "nodes"
    with pytest.raises(NodeServiceError, match="'node' .* or the URL"):
        service_setting(Cfg())


def test_a_joining_rank_ignores_a_stale_announcement_and_stops_within_its_bound_with_what_to_do(tmp_path):
    # an earlier run's ready file: a service that is gone
    (tmp_path / NodeVerifierService.READY).write_text(json.dumps({"url": _free_port_url(), "token": "x" * 32}))

    def never() -> Any:
        raise AssertionError("a joining rank never starts a pool")

    with pytest.raises(NodeServiceError, match="local rank 0 to start this node's verifier service"):
        NodeVerifierService.open(tmp_path, never, rank=1, ranks=2, ready_timeout_s=0.5)


def test_a_service_that_cannot_be_reached_masks_the_batch_and_never_scores_it():
    reward = AsyncVerifierReward(VerifierReward([fake_task(0)], ServicePool(_free_port_url())))
    rewards = _score(reward, [("fake.0", "ok"), ("fake.0", "fail")])
    assert rewards == [None, None]
    assert reward.totals["HARNESS_FAILURE"] == 2 and reward.last_metrics["verifier/harness_failures"] == 2.0
    assert all("verifier service" in o.harness_error for o in reward.last_outcomes)
    reward.pool.close()


def test_a_check_the_service_could_not_run_is_none_and_its_neighbours_keep_their_verdicts(tmp_path):
    """Fake verifiers (tests/test_pool.py's FakeVerifier): ``raise`` crashes the verifier, twice with the retry."""
    tasks = {"fake.0": fake_task(0)}
    with LocalVerifierPool(1, verifier_factory=FakeVerifier, verdict_cache=0) as pool, \
            VerifierService(pool, ServiceConfig(port=0), tasks=tasks) as service:
        reward = AsyncVerifierReward(VerifierReward(tasks, ServicePool(service.url, by_id=True)))
        logged: dict[str, float] = {}
        rewards = asyncio.run(reward(prompts=["p"] * 3, completions=["ok", "raise", "fail"], task_id=["fake.0"] * 3,
                                     log_metric=logged.__setitem__))
        assert rewards == [1.0, None, 0.0]
        assert reward.last_outcomes[1].harness_error.startswith("verifier: ")
        assert logged["verifier/harness_failures"] == 1.0 and "verifier/wait_seconds" in logged
        reward.pool.close()


def test_a_prefetched_batch_is_sent_once_and_the_reward_call_takes_its_answer(tmp_path):
    """The trainer's hook sends the batch as soon as it is decoded; the awaited reward then sends nothing."""
    tasks = {"fake.0": fake_task(0)}
    with LocalVerifierPool(1, verifier_factory=FakeVerifier, verdict_cache=0) as pool, \
            VerifierService(pool, ServiceConfig(port=0), tasks=tasks) as service:
        reward = AsyncVerifierReward(VerifierReward(tasks, ServicePool(service.url, by_id=True)))
        inputs = [{"prompt": "p", "task_id": "fake.0"}] * 2
        assert prefetch_rewards([reward, len], inputs, completions=["ok", "fail"]) == 1
        assert prefetch_rewards([reward], inputs, completions=["ok", "fail"],
                                extra_fields={"rollout_outcomes": [{}, {}]}) == 0  # the rollout checked already
        assert _score(reward, [("fake.0", "ok"), ("fake.0", "fail")]) == [1.0, 0.0]
        assert reward.pool.requests_sent == 1
        assert service.metrics_snapshot()["checks_total"] == 2
        assert _score(reward, [("fake.0", "ok")]) == [1.0]  # nothing prefetched: sent by the call
        assert reward.pool.requests_sent == 2
        # the check_proof tool's one-check path
        assert reward.pool.submit(fake_task(0), "cheat").result().verdict.value == "CHEATING"
        reward.pool.close()


def test_the_starting_rank_closing_on_an_error_does_not_wait_for_the_others(tmp_path, capsys):
    """On the way out of an error the launcher stops the other ranks once this one exits: no goodbye wait."""
    node = NodeVerifierService.open(tmp_path, lambda: LocalVerifierPool(1, verifier_factory=FakeVerifier),
                                    rank=0, ranks=2, close_wait_s=0.2)
    url = node.url
    with pytest.raises(RuntimeError, match="training broke"):
        try:
            raise RuntimeError("training broke")
        finally:
            node.close()
    assert "closing it anyway" not in capsys.readouterr().err
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])),
                                                                         timeout=10):
        pass


def test_closing_the_pool_makes_a_waiting_check_a_closed_harness_failure():
    pool = ServicePool(_free_port_url())
    pool.close()
    (result,) = pool.check_batch([(fake_task(0), "ok")])
    assert result.result is None and result.failure.boundary is Boundary.CLOSED
    assert pool.submit(fake_task(0), "ok").result().failure.boundary is Boundary.CLOSED


# -- prover tier: two ranks, one service ------------------------------------------------------------------
def _rank(rank: int, rendezvous: str, out: str) -> None:
    """One training rank's use of the node's service (run in its own process)."""
    from proofgym.training.reward_service import _wait_for

    tasks = {t.id: t for t in load_tasks(SUITE)}
    done = Path(out)
    node = NodeVerifierService.open(rendezvous, lambda: LocalVerifierPool(1), tasks=tasks, rank=rank, ranks=2,
                                    ready_timeout_s=300, close_wait_s=300)
    reward = AsyncVerifierReward(VerifierReward(tasks, node.pool()))
    batch = [(t, c) for t, c, _, _ in BATCH]
    if rank == 1:  # rank 0's checks are in the node's cache before rank 1 sends the same batch
        _wait_for(lambda: (done / "scored.0").exists(), timeout_s=300, what="rank 0's batch")
    else:
        reward.prefetch([c for _, c in batch], [t for t, _ in batch])
    rewards = _score(reward, batch)
    record: dict[str, Any] = {"url": node.url, "owner": node.owner, "rewards": rewards,
                              "verdicts": [o.verdict for o in reward.last_outcomes],
                              "requests_sent": reward.pool.requests_sent}
    (done / f"scored.{rank}").write_text("1")
    if rank == 1:  # the last to use it: both ranks' requests are in
        record["metrics"] = reward.pool.stats()
    else:
        service_pool = node._service.pool  # noqa: SLF001 - the test looks at what close must free
        record["workers"] = service_pool.worker_pids()
        record["ready_mode"] = (Path(rendezvous) / NodeVerifierService.READY).stat().st_mode & 0o777
    reward.pool.close()
    node.close()  # rank 0 (done first): waits for rank 1's goodbye, then shuts the service and its workers down
    if rank == 0:
        record["workers_alive"] = [p for p in record["workers"] if _alive(p)]
        record["provers_left"] = prover_processes_below(os.getpid())
        record["ready_file_left"] = Path(rendezvous).exists()  # nor the rendezvous directory
    (done / f"rank{rank}.json").write_text(json.dumps(record))


@requires_coq
@pytest.mark.prover
def test_two_ranks_share_one_service_started_by_local_rank_0_with_one_cache_and_it_closes(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_rank, args=(r, str(tmp_path / "node"), str(tmp_path))) for r in (1, 0)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(600)
    assert [p.exitcode for p in procs] == [0, 0]
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert r0["owner"] and not r1["owner"] and r0["url"] == r1["url"]  # one service, started by local rank 0
    expected = [v for _, _, v, _ in BATCH]
    assert r0["verdicts"] == r1["verdicts"] == expected  # real Coq's verdicts, on both ranks
    assert r0["rewards"] == r1["rewards"] == [r for _, _, _, r in BATCH]
    assert r0["requests_sent"] == r1["requests_sent"] == 1  # rank 0's prefetched batch was not sent again
    metrics = r1["metrics"]  # read by rank 1 after rank 0 had gone to close: the service waited for rank 1
    assert metrics["checks_total"] == 2 * len(BATCH)  # every completion of both ranks answered once, here
    assert metrics["requests"]["/check 200"] == 2
    cache = metrics["verdict_cache"]
    assert cache["hits"] + cache.get("coalesced", 0) == len(BATCH)  # rank 1's batch came from rank 0's checks
    # closed by whoever started it: no worker, no prover, no listener, no announcement left
    assert r0["workers"] and r0["workers_alive"] == [] and r0["provers_left"] == []
    assert not r0["ready_file_left"] and r0["ready_mode"] == 0o600  # it holds the token
    host, port = r0["url"].removeprefix("http://").split(":")
    with pytest.raises(ConnectionRefusedError), socket.create_connection((host, int(port)), timeout=10):
        pass


# -- slow tier: TRL's own reward call path ----------------------------------------------------------------
@requires_coq
@pytest.mark.prover
@pytest.mark.slow
def test_grpo_with_the_node_service_awaits_the_reward_and_checks_each_completion_once(tmp_path, monkeypatch):
    pytest.importorskip("trl")
    from proofgym.agents.tiny_model import build_tiny_model
    from proofgym.training import reward_service
    from proofgym.training.grpo import train_grpo
    from proofgym.training.grpo_config import ProofGRPOConfig
    from proofgym.training.grpo_trainer import ProofGRPOTrainer

    seen: dict[str, Any] = {}
    close = reward_service.RewardBackend.close

    def record_then_close(self: reward_service.RewardBackend) -> None:
        seen["stats"] = self.pool.stats()
        seen["owner"] = self.service.owner if self.service else None
        close(self)

    original_init = ProofGRPOTrainer.__init__

    def record_trainer(self: ProofGRPOTrainer, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        seen["async"] = self._has_async_funcs  # noqa: SLF001 - TRL's own decision to await the reward
        seen["reward_funcs"] = [type(f).__name__ for f in self.reward_funcs]

    monkeypatch.setattr(reward_service.RewardBackend, "close", record_then_close)
    monkeypatch.setattr(ProofGRPOTrainer, "__init__", record_trainer)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    model = build_tiny_model(tmp_path / "model")
    cfg = ProofGRPOConfig(model_name_or_path=str(model), suite=str(SUITE), output_dir=str(tmp_path / "run"),
                          report_to="none", max_steps=2, per_device_train_batch_size=4, num_generations=2,
                          max_completion_length=12, torch_threads=1, prompt_context_chars=60, heldout_fraction=0,
                          verifier_workers=1, checkpoint_eval_at_end=False, save_strategy="no", seed=0,
                          verifier_service="node", verdict_cache_entries=0, beta=0.01)
    result = train_grpo(cfg)

    assert seen["async"] and seen["reward_funcs"] == ["AsyncVerifierReward"] and seen["owner"]
    stats = seen["stats"]
    assert result.global_step == 2 and result.reward_totals["samples"] == 8
    assert stats["checks_total"] == 8 and stats["requests_sent"] == 2  # one request per batch, prefetched
    assert sum(stats["verdicts"].values()) + sum(stats["harness_failures"].values()) == 8
    logged = [row for row in result.log_history if "verifier/wait_seconds" in row]
    assert len(logged) == 2


def _grpo_rank(argv: list[str]) -> None:
    """One torchrun rank: GRPO's own entry; what its reward backend saw at close, in ``$PROOFGYM_TEST_RECORD``."""
    from proofgym.training import reward_service
    from proofgym.training.grpo import main as grpo_main

    seen: dict[str, Any] = {}
    close = reward_service.RewardBackend.close

    def record_then_close(self: reward_service.RewardBackend) -> None:
        seen.update(url=self.service.url if self.service else None, owner=bool(self.service and self.service.owner),
                    requests_sent=self.pool.requests_sent, stats=self.pool.stats() if self.service.owner else {})
        close(self)

    reward_service.RewardBackend.close = record_then_close  # type: ignore[method-assign]
    result = grpo_main(argv)
    Path(os.environ["PROOFGYM_TEST_RECORD"], f"rank{os.environ['RANK']}.json").write_text(json.dumps(
        {**seen, "global_step": result.global_step, "totals": dict(result.reward_totals)}))


@requires_coq
@pytest.mark.prover
@pytest.mark.slow
def test_two_torchrun_ranks_of_grpo_score_on_the_one_service_local_rank_0_started(tmp_path):
    pytest.importorskip("trl")
    import subprocess
    import sys

    from proofgym.agents.tiny_model import build_tiny_model

    model = build_tiny_model(tmp_path / "model")
    record = tmp_path / "record"
    record.mkdir()
    steps, batch = 2, 4
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "tests.test_reward_service", "--model_name_or_path", str(model), "--suite", str(SUITE),
           "--output_dir", str(tmp_path / "run"), "--report_to", "none", "--max_steps", str(steps),
           "--per_device_train_batch_size", str(batch), "--num_generations", "2", "--max_completion_length", "12",
           "--beta", "0.01", "--heldout_fraction", "0", "--checkpoint_eval_at_end", "false", "--save_strategy", "no",
           "--torch_threads", "1", "--verifier_workers", "1", "--prompt_context_chars", "60",
           "--verifier_service", "node"]
    root = Path(__file__).resolve().parents[1]
    path = os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1", "PROOFGYM_TEST_RECORD": str(record)}
    env.pop("PROOFGYM_VERIFIER_SERVICE", None)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    r0, r1 = (json.loads((record / f"rank{r}.json").read_text()) for r in (0, 1))
    assert r0["owner"] and not r1["owner"] and r0["url"] == r1["url"]
    assert r0["global_step"] == r1["global_step"] == steps
    for r in (r0, r1):  # each rank's completions scored once each, in one request per step
        assert r["totals"]["samples"] == steps * batch and "HARNESS_FAILURE" not in r["totals"]
        assert r["requests_sent"] == steps
    stats = r0["stats"]
    assert stats["checks_total"] == 2 * steps * batch and stats["requests"]["/check 200"] == 2 * steps
    assert sum(stats["verdicts"].values()) == 2 * steps * batch
    host, port = r0["url"].removeprefix("http://").split(":")
    with pytest.raises(ConnectionRefusedError), socket.create_connection((host, int(port)), timeout=10):
        pass


if __name__ == "__main__":  # one rank of the torchrun test above
    import sys

    _grpo_rank(sys.argv[1:])
