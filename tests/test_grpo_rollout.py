"""The multi-turn repair rollout_func: feedback tokens are masked, episodes end on OK, rewards are discounted.

Slow tier (a tiny model generates) and prover tier (real Coq checks every turn).
"""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest

pytest.importorskip("trl")

from proofgym.envs.tasks.suites import load_tasks  # noqa: E402
from proofgym.envs.verifiers.pool import LocalVerifierPool  # noqa: E402
from proofgym.training.data import prompt_messages, reference_completion, repair_message  # noqa: E402
from proofgym.training.rewards import Outcome  # noqa: E402
from proofgym.training.rollout import ModelGenerator, RepairRollout  # noqa: E402
from tests.conftest import requires_coq  # noqa: E402

CONTEXT_CHARS = 120
WRONG = "```coq\nProof. reflexivity. Qed.\n```"


def test_rewards_are_discounted_per_extra_turn_but_cheats_keep_their_penalty(tiny_suite):
    rollout = RepairRollout(load_tasks(tiny_suite), pool=None, max_turns=3, turn_discount=0.5)
    assert rollout._reward(Outcome("OK", 1.0), 1) == 1.0
    assert rollout._reward(Outcome("OK", 1.0), 3) == 0.25
    assert rollout._reward(Outcome("CHEATING", -1.0), 3) == -1.0
    assert rollout._reward(Outcome(None, None), 2) is None
    with pytest.raises(ValueError):
        RepairRollout([], pool=None, max_turns=0)


@pytest.mark.slow
@pytest.mark.prover
@requires_coq
def test_feedback_tokens_are_masked_and_the_episode_reads_like_evaluations_repair_round(tmp_path, tiny_suite):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from proofgym.agents.tiny_model import build_tiny_model

    tasks = {t.id: t for t in load_tasks(tiny_suite)}
    lia, conj = tasks["tiny.lia"], tasks["tiny.and_comm"]
    teach = [(prompt_messages(lia, context_chars=CONTEXT_CHARS), WRONG),
             (prompt_messages(conj, context_chars=CONTEXT_CHARS), reference_completion(conj))]
    path = build_tiny_model(tmp_path / "model", teach=teach, teach_steps=400)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    trainer = SimpleNamespace(processing_class=tokenizer, args=SimpleNamespace(max_completion_length=40))
    prompts = [prompt_messages(lia, context_chars=CONTEXT_CHARS), prompt_messages(conj, context_chars=CONTEXT_CHARS)]

    with LocalVerifierPool(1) as pool:
        rollout = RepairRollout(list(tasks.values()), pool, max_turns=2, turn_discount=0.5,
                                context_chars=CONTEXT_CHARS, generator=ModelGenerator(model, tokenizer))
        out = rollout(prompts, trainer)

    assert set(out) == {"prompt_ids", "completion_ids", "logprobs", "env_mask", "rollout_outcomes"}
    first, second = (Outcome.from_dict(o) for o in out["rollout_outcomes"])

    # The solved task: one turn, every completion token is the policy's, full reward.
    assert (second.verdict, second.turns, second.reward) == ("OK", 1, 1.0)
    assert out["env_mask"][1] == [1] * len(out["completion_ids"][1])

    # The failed task: reply, feedback (masked), reply.
    assert first.turns == 2 and first.verdict is not None
    ids, mask = out["completion_ids"][0], out["env_mask"][0]
    assert len(ids) == len(mask)
    runs = [(bit, sum(1 for _ in group)) for bit, group in itertools.groupby(mask)]
    assert [bit for bit, _ in runs] == [1, 0, 1]
    reply_len, feedback_len = runs[0][1], runs[1][1]
    reply = tokenizer.decode(ids[:reply_len], skip_special_tokens=True)
    assert reply == WRONG
    feedback = tokenizer.decode(ids[reply_len:reply_len + feedback_len], skip_special_tokens=False)
    assert "rejected that proof" in feedback and "Verdict: FAIL" in feedback and "<|im_start|>user" in feedback

    # Prompt + reply + feedback is exactly the conversation evaluation's repair round renders.
    fail_feedback = feedback.split("rejected that proof:\n", 1)[1].split("\n\nWrite a corrected", 1)[0]
    conversation = [*prompts[0], {"role": "assistant", "content": WRONG}, repair_message("coq", fail_feedback)]
    expected = tokenizer.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True)
    seen = tokenizer.decode(out["prompt_ids"][0] + ids[:reply_len + feedback_len], skip_special_tokens=False)
    assert seen == expected
    assert first.reward in (0.0, 0.5, -1.0)
