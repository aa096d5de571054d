"""Tactic-v0 and fail-safe localization on the real Coq."""

from __future__ import annotations

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import proofgym  # noqa: F401 - registers the ids
from proofgym.envs.tactic_env import parse_action
from proofgym.envs.verifiers.coq_tactic import _block_ends, localize
from tests.conftest import requires_coq

TASKS = [
    {"id": "tac.plus0", "system": "coq", "context": "", "statement": "Lemma plus0 (n : nat) : n + 0 = n.",
     "reference_proof": "Proof. induction n. - reflexivity. - simpl. rewrite IHn. reflexivity. Qed.",
     "category": "P2", "timeout_s": 20},
    {"id": "tac.leak", "system": "coq", "context": "Require Import List.\n",
     "statement": "Lemma app_nil_r (A : Type) (l : list A) : l ++ nil = l.",
     "reference_proof": "Proof. induction l; simpl; congruence. Qed.", "category": "P1", "timeout_s": 20,
     "metadata": {"qualid": "Coq.Lists.List.app_nil_r"}},
    {"id": "tac.split", "system": "coq", "context": "",
     "statement": "Lemma sp (n : nat) : (n = n /\\ 0 + n = n) /\\ (True \\/ False).",
     "reference_proof": "Proof. split. - split. + reflexivity. + reflexivity. - left. exact I. Qed.",
     "category": "P2", "timeout_s": 20},
]


def test_parse_action_forms():
    assert parse_action("intros.") == ("intros.", None)
    assert parse_action("@3 intros n.") == ("intros n.", 3)
    assert parse_action({"tactic": "auto.", "state_id": 2}) == ("auto.", 2)
    assert parse_action(None) == (None, None)


def test_block_ends_respect_nesting():
    s = ["(split).", "-", "(a).", "+", "(b).", "+", "(c).", "-", "(d).", "{", "(e).", "}"]
    ends = _block_ends(s)
    assert ends[4] == 5  # failure in the first + block resumes at the sibling +
    assert ends[6] == 7  # last + block: resume at the outer -
    assert ends[10] == 11  # inside braces: resume at the closing brace
    assert ends[0] == len(s)  # top level, no bullet: nothing to resume


@pytest.fixture(scope="module")
def env():
    env = gym.make("proofgym/Tactic-v0", tasks=TASKS, max_steps=20, disable_env_checker=True,
                   verifier_kwargs={"audit": "always"})
    yield env
    env.close()


@pytest.mark.prover
@requires_coq
def test_check_env(env):
    check_env(env.unwrapped, skip_render_check=True)


@pytest.mark.prover
@requires_coq
def test_scripted_agent_solves_step_by_step_with_backtracking(env):
    obs, info = env.reset(options={"task_id": "tac.plus0"})
    root = obs["state_id"]
    assert "n + 0 = n" in obs["goals"]
    obs, reward, terminated, truncated, info = env.step("induction n.")
    after_induction = obs["state_id"]
    assert "Goal 2" in obs["goals"] and reward == 0.0
    obs, reward, _, _, info = env.step("- simpl. reflexivity.")  # the base case
    assert info["verdict"] is None and obs["state_id"] != after_induction
    wrong = env.step("- discriminate.")  # a wrong step: the state is unchanged and the error is observed
    assert wrong[0]["last_error"] and wrong[0]["state_id"] == obs["state_id"] and wrong[4]["verdict"] == "FAIL"
    # backtrack to the root and take another route
    obs, _, _, _, info = env.step(f"@{root} induction n as [|k IH].")
    assert obs["state_id"] not in (root, after_induction) and "IH : k + 0 = k" in obs["goals"]
    obs, _, _, _, _ = env.step("- reflexivity.")
    obs, _, _, _, _ = env.step("- simpl.")
    obs, reward, terminated, truncated, info = env.step("rewrite IH. reflexivity.")
    assert terminated and reward == 1.0 and info["verdict"] == "OK"
    assert info["result"].audited
    assert "(induction n as [|k IH])." in info["proof"] and "discriminate" not in info["proof"]


@pytest.mark.prover
@requires_coq
def test_finished_path_with_a_cheat_is_rejected_by_the_whole_proof_check(env):
    obs, _ = env.reset(options={"task_id": "tac.leak"})
    obs, reward, terminated, truncated, info = env.step("exact (app_nil_r l).")
    assert obs["goals"] == "No more goals."  # tactic mode thinks it is done
    assert not terminated and info["verdict"] == "CHEATING" and reward == -1.0
    assert "original" in " ".join(info["reasons"])


@pytest.mark.prover
@requires_coq
def test_cheat_steps_and_garbage_are_observations(env):
    obs, _ = env.reset(options={"task_id": "tac.plus0"})
    start = obs["state_id"]
    obs, reward, terminated, _, info = env.step("Admitted.")
    assert info["verdict"] == "CHEATING" and reward == -1.0 and obs["state_id"] == start and not terminated
    obs, reward, _, _, info = env.step("intros; (")
    assert info["verdict"] in ("ERROR", "FAIL") and obs["last_error"]
    obs, _, _, _, info = env.step("@999 auto.")
    assert info["verdict"] == "ERROR" and "unknown state id" in obs["last_error"]


@pytest.mark.prover
@requires_coq
def test_fail_safe_keeps_sibling_bullets_and_finds_the_broken_sentence(coq_verifier):
    from proofgym.envs.types import Task

    task = Task.from_dict(TASKS[2])
    proof = ("Proof. split.\n- split.\n  + reflexivity.\n  + simpl. discriminate.\n  + reflexivity.\n"  # 3rd + is extra
             "- left. { exact I. }\nQed.")
    with coq_verifier.open(task) as session:
        loc = localize(session, proof)
        assert [h.failed_sentence for h in loc.holes] == ["(discriminate)."]
        assert "n = n" in loc.holes[0].goal.conclusion
        # the outer "- left." bullet and its brace were kept, not swallowed
        assert loc.sentences[-5:] == ["-", "(left).", "{", "(exact I).", "}"]
        assert loc.sentences.count("+") == 2 and loc.sentences.count("-") == 2 and loc.final_state is not None
        # splice a fix into the hole: the proof then checks with no placeholder left
        fixed = loc.script({loc.holes[0].index: ["(reflexivity)."]})
        assert "admit" not in fixed
    assert coq_verifier.check(task, fixed).verdict.value == "OK"


@pytest.mark.prover
@requires_coq
def test_fail_safe_repairs_bullet_count_mismatch(coq_verifier):
    from proofgym.envs.types import Task

    task = Task.from_dict(TASKS[2])
    with coq_verifier.open(task) as session:
        # too few bullets: the second conjunct is never proved
        loc = localize(session, "Proof. split. - split; reflexivity. Qed.")
        assert len(loc.holes) == 1 and loc.holes[0].failed_sentence == ""
        assert "True \\/ False" in loc.holes[0].goal.conclusion
        # too many bullets: the extra one is skipped with its block
        loc = localize(session, "Proof. split. - split; reflexivity. - left; exact I. - auto. Qed.")
        assert not loc.holes and loc.final_state is not None
