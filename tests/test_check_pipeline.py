"""Verification overlapping generation (issue 29): where proofgym generates (the curriculum's estimates and expert
iteration's sampling through sample_and_check, the repair rollout's turns), a chunk's proofs go to the verifier as
soon as it is decoded, while the next chunk generates.

Fast tier: a fake policy and a fake pool (tests/fakes.py) whose first check waits for an event that only the
policy starting its second chunk sets: it is set only if the first chunk's checks were submitted before the second
chunk was generated. Prover tier: with the real Coq verifier on coq-tiny, the pipelined samples and episodes are
the unpipelined ones.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("transformers")

from proofgym.envs.tasks.suites import load_tasks  # noqa: E402
from proofgym.training.data import prompt_messages  # noqa: E402
from proofgym.training.pipeline import check_while_generating  # noqa: E402
from proofgym.training.rewards import VerifierReward  # noqa: E402
from proofgym.training.rollout import RepairRollout  # noqa: E402
from proofgym.training.sampling import sample_and_check  # noqa: E402
from tests.conftest import requires_coq  # noqa: E402
from tests.fakes import FakeEventGatedPool, FakeScriptedGenerator  # noqa: E402


def replies(tasks) -> list[str]:
    """Per task (three samples each, in task order): its reference proof (OK), a cheat, a wrong proof (FAIL)."""
    return [text for t in tasks for text in (f"```coq\n{t.reference_proof}\n```", "```coq\nProof. Admitted.\n```",
                                             "```coq\nProof. reflexivity. Qed.\n```")]


@pytest.fixture(scope="module")
def tiny_tokenizer(tmp_path_factory):
    from transformers import AutoTokenizer

    from proofgym.agents.tiny_model import build_tiny_model

    return AutoTokenizer.from_pretrained(build_tiny_model(tmp_path_factory.mktemp("tiny") / "model"))


def test_chunk_results_come_back_in_order_with_their_payloads():
    parts = ((i, [], [str(i)] * i) for i in range(5))
    for depth in (0, 1, 3):
        assert list(check_while_generating(parts if depth == 0 else ((i, [], [str(i)] * i) for i in range(5)),
                                           lambda tasks, proofs: list(proofs), depth=depth)) == \
            [(i, [str(i)] * i) for i in range(5)]
    with pytest.raises(ValueError):
        list(check_while_generating([], lambda tasks, proofs: [], depth=-1))


def test_a_generation_error_comes_back_without_waiting_for_the_checks_in_flight():
    """Ctrl-C or a crash while chunk 2 generates reaches the caller at once, not after chunk 1's checks: the check
    below only finishes once the test has seen the error (give_up_s keeps a regression from hanging)."""
    import threading

    seen_error, check_done = threading.Event(), threading.Event()

    def check(tasks, proofs):
        seen_error.wait(60)
        check_done.set()
        return list(proofs)

    def chunks():
        yield 1, [], ["a"]
        raise KeyboardInterrupt  # generating chunk 2

    with pytest.raises(KeyboardInterrupt):
        list(check_while_generating(chunks(), check, depth=1))
    assert not check_done.is_set()  # the error came back while chunk 1 was still being checked
    seen_error.set()


def test_sampling_checks_a_batch_while_the_next_one_generates(tiny_tokenizer):
    tasks = load_tasks("coq-tiny")
    policy = FakeScriptedGenerator(tiny_tokenizer, replies(tasks))
    pool = FakeEventGatedPool(policy.started)
    samples = sample_and_check(policy, tiny_tokenizer, tasks, VerifierReward(tasks, pool), k=2, max_new_tokens=8,
                               batch_size=4)
    assert pool.saw_event_during_first_batch is True  # batch 2 began generating while batch 1 was being checked
    assert [len(b) for b in pool.batches] == [4, 4, 2] and len(samples) == 10
    assert [s.task.id for s in samples] == [t.id for t in tasks for _ in range(2)]


def test_the_repair_rollout_checks_a_chunk_while_the_next_one_generates(tiny_tokenizer):
    tasks = load_tasks("coq-tiny")
    policy = FakeScriptedGenerator(tiny_tokenizer, replies(tasks))
    pool = FakeEventGatedPool(policy.started)
    rollout = RepairRollout(tasks, pool, max_turns=1, context_chars=100, generator=policy, generation_chunk=2)
    trainer = SimpleNamespace(processing_class=tiny_tokenizer, args=SimpleNamespace(max_completion_length=16))
    out = rollout([prompt_messages(t, context_chars=100) for t in tasks], trainer)
    assert pool.saw_event_during_first_batch is True
    assert [len(b) for b in pool.batches] == [2, 2, 1] and len(out["rollout_outcomes"]) == 5


def _samples(tasks, tokenizer, depth: int) -> list[tuple[str, str, str | None, float | None]]:
    from proofgym.envs.verifiers.pool import LocalVerifierPool

    with LocalVerifierPool(2, verdict_cache=0) as pool:
        samples = sample_and_check(FakeScriptedGenerator(tokenizer, replies(tasks)), tokenizer, tasks,
                                   VerifierReward(tasks, pool), k=3, max_new_tokens=8, batch_size=4,
                                   pipeline_depth=depth)
    return [(s.task.id, s.text, s.outcome.verdict and s.outcome.verdict.value, s.outcome.reward) for s in samples]


@pytest.mark.prover
@requires_coq
def test_pipelined_sampling_gives_the_unpipelined_samples_on_coq(tiny_tokenizer):
    tasks = load_tasks("coq-tiny")
    unpipelined = _samples(tasks, tiny_tokenizer, 0)
    assert [verdict for _, _, verdict, _ in unpipelined] == ["OK", "CHEATING", "FAIL"] * len(tasks)
    assert _samples(tasks, tiny_tokenizer, 1) == unpipelined
    assert _samples(tasks, tiny_tokenizer, 2) == unpipelined


@pytest.mark.prover
@requires_coq
def test_a_chunked_pipelined_repair_rollout_gives_the_unchunked_episodes_on_coq(tiny_tokenizer):
    from proofgym.envs.verifiers.pool import LocalVerifierPool

    tasks = load_tasks("coq-tiny")
    prompts = [prompt_messages(t, context_chars=100) for t in tasks] * 2
    trainer = SimpleNamespace(processing_class=tiny_tokenizer, args=SimpleNamespace(max_completion_length=16))
    outs = []
    for chunk in (None, 3):
        with LocalVerifierPool(2, verdict_cache=0) as pool:
            rollout = RepairRollout(tasks, pool, max_turns=2, context_chars=100, generation_chunk=chunk,
                                    generator=FakeScriptedGenerator(tiny_tokenizer, replies(tasks)))
            outs.append(rollout(prompts, trainer))
    for out in outs:  # how long Coq took is the one thing that may differ
        out["rollout_outcomes"] = [{k: v for k, v in o.items() if k != "wall_s"} for o in out["rollout_outcomes"]]
    whole, chunked = outs
    assert {o["verdict"] for o in whole["rollout_outcomes"]} == {"OK", "FAIL", "CHEATING"}
    assert max(o["turns"] for o in whole["rollout_outcomes"]) == 2  # a FAIL got its repair turn
    assert chunked == whole


def test_the_repair_chunk_is_a_grpo_setting(tmp_path):
    pytest.importorskip("trl")
    from proofgym.training.common import TrainConfigError, parse_config
    from proofgym.training.grpo_config import ProofGRPOConfig

    cfg = parse_config(ProofGRPOConfig, ["--output_dir", str(tmp_path), "--repair_generation_chunk", "4"])
    assert cfg.repair_generation_chunk == 4
    assert parse_config(ProofGRPOConfig, ["--output_dir", str(tmp_path)]).repair_generation_chunk == 0
    with pytest.raises(TrainConfigError, match="repair_generation_chunk must be >= 0"):
        parse_config(ProofGRPOConfig, ["--output_dir", str(tmp_path), "--repair_generation_chunk", "-1"])
    with pytest.raises(ValueError, match="generation_chunk must be >= 1"):
        RepairRollout([], None, generation_chunk=0)


@pytest.mark.slow
@pytest.mark.prover
@requires_coq
def test_a_chunked_repair_rollout_on_two_ranks_stays_in_lockstep_and_checks_every_turn_once(tmp_path, tiny_suite):
    """repair_generation_chunk 1 under torchrun --nproc_per_node 2 (gloo) with Coq: each turn is generated one
    episode at a time, checked while the next generates, and a rank with fewer live episodes generates padding
    chunks (checked by nobody) so that both ranks make the same generate calls; the run ends with the same weights
    on both ranks, and every turn of every episode is checked once. The harness is test_train_distributed_more's
    (its ranks, its recording). Whether the weights move depends on the samples (a step whose groups all score
    alike changes nothing), so that is not asserted here."""
    pytest.importorskip("trl")
    from proofgym.agents.tiny_model import build_tiny_model
    from proofgym.training.data import reference_completion
    from tests import test_train_distributed_more as harness
    from tests.distributed_common import check_lines, rank_records, torchrun

    teach = [(prompt_messages(t, context_chars=harness.CONTEXT_CHARS), reference_completion(t))
             for t in load_tasks(tiny_suite)]  # as the harness's taught_model: Coq accepts some samples, not all
    model = build_tiny_model(tmp_path / "taught", teach=teach, teach_steps=400)
    out, checks, record = harness._dirs(tmp_path)
    argv = harness._grpo_argv(model, tiny_suite, out, "--max_turns", "2", "--repair_generation_chunk", "1")
    torchrun(harness.THIS, argv, cwd=tmp_path, timeout=900, env={
        "PROOFGYM_FAKE_CHECK_LOG": str(checks), "PROOFGYM_TEST_RECORD": str(record)})
    r0, r1 = rank_records(record)
    assert r0["global_step"] == r1["global_step"] == 2 and r0["end"] == r1["end"]  # no rank left behind
    table = harness._completions(out)
    lines = check_lines(checks)
    assert len(table) == 2 * 4 and len(lines) == int(table["turns"].sum())
    assert {r for r, _, _ in lines} == {"0", "1"}
