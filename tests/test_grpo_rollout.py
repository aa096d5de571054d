"""The multi-turn repair rollout_func: feedback tokens are masked, episodes end on OK, rewards are discounted.

Fast tier: the rollout drives one Episode per prompt against a stand-in pool (a tiny tokenizer, no
model). Slow tier (a tiny model generates) and prover tier (real Coq checks every turn).
"""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest

pytest.importorskip("trl")

from proofgym.envs.tasks.suites import load_tasks  # noqa: E402
from proofgym.envs.types import CheckResult, Task, Verdict  # noqa: E402
from proofgym.envs.verifiers.pool import Boundary, HarnessFailure, LocalVerifierPool, PoolResult  # noqa: E402
from proofgym.training.data import prompt_messages, reference_completion, repair_message  # noqa: E402
from proofgym.training.rewards import Outcome, VerifierReward  # noqa: E402
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


# -- the episode loop, with a stand-in pool (fast tier: a tokenizer is built, no model runs) ---------------
class _ScriptPool:
    """Stands in for the verifier pool: a proof names its verdict (``fail``, ``ok``...); ``broken`` breaks it."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []

    def check_batch(self, pairs: list[tuple[Task, str]], timeout: float | None = None) -> list[PoolResult]:
        self.batches.append([proof for _, proof in pairs])
        return [PoolResult(None, task.id, task.system,
                           HarnessFailure(Boundary.WORKER_DIED, "the worker died") if proof == "broken"
                           else CheckResult(Verdict[proof.upper()], (f"said {proof}",), wall_s=0.5))
                for task, proof in pairs]


@pytest.fixture(scope="module")
def tiny_tokenizer(tmp_path_factory):
    from transformers import AutoTokenizer

    from proofgym.agents.tiny_model import build_tiny_model

    return AutoTokenizer.from_pretrained(build_tiny_model(tmp_path_factory.mktemp("tiny") / "model"))


def test_each_prompt_is_an_episode_and_only_live_episodes_generate(tiny_tokenizer):
    tasks = [Task(id=f"t{i}", system="coq", suite="s", category="P1", statement=f"Lemma t{i} : True.",
                  context="", reference_proof="Proof. auto. Qed.") for i in range(4)]
    # what each task's policy answers, turn after turn
    script = {"t0": ["fail", "ok"], "t1": ["cheating"], "t2": ["broken"], "t3": ["fail", "timeout", "fail"]}
    widths: list[int] = []

    def generate(prompt_ids, max_new_tokens):
        widths.append(len(prompt_ids))
        replies = []
        for ids in prompt_ids:
            text = tiny_tokenizer.decode(ids, skip_special_tokens=False)
            task = next(t for t in script if f"Lemma {t} :" in text)
            turn = text.count("rejected that proof")  # one repair turn per earlier reply
            replies.append(tiny_tokenizer(f"```coq\n{script[task][turn]}\n```<|im_end|>",
                                          add_special_tokens=False)["input_ids"])
        return replies, None

    pool = _ScriptPool()
    rollout = RepairRollout(tasks, pool, max_turns=3, turn_discount=0.5, context_chars=100, generator=generate)
    trainer = SimpleNamespace(processing_class=tiny_tokenizer, args=SimpleNamespace(max_completion_length=32))
    out = rollout([prompt_messages(t, context_chars=100) for t in tasks], trainer)

    assert widths == [4, 2, 1]  # a finished episode (OK, CHEATING, a harness failure, the budget) stops generating
    assert pool.batches == [["fail", "cheating", "broken", "fail"], ["ok", "timeout"], ["fail"]]
    fixed, cheat, broken, spent = (Outcome.from_dict(o) for o in out["rollout_outcomes"])
    assert (fixed.verdict, fixed.turns, fixed.reward, fixed.wall_s, fixed.proof) == ("OK", 2, 0.5, 1.0, "ok")
    assert (cheat.verdict, cheat.turns, cheat.reward) == ("CHEATING", 1, -1.0)  # a cheat keeps its full penalty
    assert (broken.verdict, broken.reward, broken.turns) == (None, None, 1)  # never scored 0
    assert broken.harness_error == "worker_died: the worker died"
    assert (spent.verdict, spent.turns, spent.reward) == ("FAIL", 3, 0.0) and "said fail" in spent.feedback
    masks = [[bit for bit, _ in itertools.groupby(mask)] for mask in out["env_mask"]]
    assert masks == [[1, 0, 1], [1], [1], [1, 0, 1, 0, 1]]  # the feedback between replies is masked


def test_the_reward_hands_out_the_pool_results_it_got(tiny_suite):
    tasks = load_tasks(tiny_suite)
    pool = _ScriptPool()
    reward = VerifierReward(tasks, pool, format_bonus=0.1)
    results = reward.check_results(tasks[:2], ["fail", "broken"])
    assert results[0].result.verdict is Verdict.FAIL and results[1].failure.boundary is Boundary.WORKER_DIED
    assert reward.reward_of(results[0].result) == 0.1  # the shaped reward, as the outcome has it
    assert [o.reward for o in reward.check(tasks[:2], ["fail", "broken"])] == [0.1, None]

    closed = LocalVerifierPool(1, verifier_factory="tests.test_rewards_trl:ScriptVerifier")
    closed.close()
    failed = VerifierReward(tasks, closed).check_results(tasks[:2], ["ok", "ok"])
    assert [r.failure.boundary for r in failed] == [Boundary.CLOSED, Boundary.CLOSED] and all(r.result is None for r in failed)


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
