"""Tactic-v0 and fail-safe localization on the real Coq."""

from __future__ import annotations

import itertools
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import proofgym  # noqa: F401 - registers the ids
from proofgym.envs.tactic_env import TacticEnv, parse_action
from proofgym.envs.types import CheckResult, Goal, Task, Verdict
from proofgym.envs.verifiers.coq.tactic import _block_ends, localize
from proofgym.envs.verifiers.tactic_state import StepResult, TacticState
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


# ---------------------------------------------------------------------------------------------
# goal_closed shaping cannot be farmed: a fake tactic backend, many random step sequences


class FakeTacticSession:
    """Proof states as goal lists. Tactics: ``split`` (first goal -> two), ``close`` (first goal done),
    ``assert`` (a new goal in front, never seen before), ``shelve``/``unshelve``, ``focus`` (the rest
    to the background), ``unfocus``, ``admit-all`` (finished, the whole check says CHEATING),
    ``wrong-all`` (finished, the whole check says FAIL); anything else fails."""

    def __init__(self, root_goals: int) -> None:
        self._fresh = itertools.count()
        self._states = {0: TacticState(0, tuple(Goal((), f"G{i}") for i in range(root_goals)))}
        self._paths: dict[int, list[str]] = {0: []}
        self.root = 0

    def state(self, state_id: int) -> TacticState:
        if state_id not in self._states:
            raise KeyError(f"unknown state id {state_id}")
        return self._states[state_id]

    def proof_script(self, state_id: int) -> str:
        return " ".join(self._paths[state_id])

    def run(self, tactic: str, state_id: int) -> StepResult:
        s = self._states[state_id]
        goals, background, shelved = list(s.goals), list(s.background), s.shelved
        if tactic == "split" and goals:
            goals[:1] = [Goal(goals[0].hypotheses, goals[0].conclusion + ".1"),
                         Goal(goals[0].hypotheses, goals[0].conclusion + ".2")]
        elif tactic == "close" and goals:
            goals.pop(0)
        elif tactic == "assert" and goals:
            n = next(self._fresh)
            goals[:1] = [Goal((), f"A{n}"), Goal((*goals[0].hypotheses, f"H{n}"), goals[0].conclusion)]
        elif tactic == "shelve" and goals:
            goals.pop(0)
            shelved += 1
        elif tactic == "unshelve" and shelved:
            goals.append(Goal((), f"S{next(self._fresh)}"))
            shelved -= 1
        elif tactic == "focus" and len(goals) > 1:
            goals, background = goals[:1], goals[1:] + background
        elif tactic == "unfocus" and not goals and background:
            goals, background = background[:1], background[1:]
        elif tactic in ("admit-all", "wrong-all"):
            goals, background, shelved = [], [], 0
        else:
            return StepResult(False, s, error=f"{tactic} failed", verdict=Verdict.FAIL)
        new_id = len(self._states)
        finished = not (goals or background or shelved)
        self._states[new_id] = TacticState(new_id, tuple(goals), tuple(background), shelved, finished)
        self._paths[new_id] = [*self._paths[state_id], tactic]
        return StepResult(True, self._states[new_id])

    def close(self) -> None:
        pass


class FakeTacticVerifier:
    system = "coq"

    def __init__(self, root_goals: int = 1) -> None:
        self.root_goals = root_goals

    def open(self, task: Task) -> FakeTacticSession:
        return FakeTacticSession(self.root_goals)

    def check(self, task: Task, proof: str) -> CheckResult:
        if "admit-all" in proof:
            return CheckResult(Verdict.CHEATING, ("admitted",))
        return CheckResult(Verdict.FAIL if "wrong-all" in proof else Verdict.OK)

    def close(self) -> None:
        pass


FAKE_TASK = {"id": "fake.tactic", "system": "coq", "context": "", "statement": "Lemma t : True.",
             "reference_proof": "", "category": "P1", "timeout_s": 5}
TACTICS = ["split", "close", "assert", "shelve", "unshelve", "focus", "unfocus", "admit-all", "wrong-all", "nope"]


def _fake_env(root_goals: int = 1, g: float = 0.05, max_steps: int = 40) -> TacticEnv:
    return TacticEnv([FAKE_TASK], max_steps=max_steps, reward_map={"goal_closed": g},
                     verifier=FakeTacticVerifier(root_goals))


def test_the_issues_farm_no_longer_pays():
    """Closing the same goal again and again from one old state id paid g each time: 30 steps beat a proof."""
    env = _fake_env()
    env.reset(seed=0)
    total = env.step("split")[1]
    split_state = env.state_id
    for _ in range(30):
        total += env.step(f"@{split_state} close")[1]
    assert total == pytest.approx(0.0)  # split cost g, the first close repaid it; the 29 others pay nothing
    # The proof itself: split, close, close -> OK; shaping adds g for the one root goal.
    env.reset(seed=0)
    rewards = [env.step(t)[1] for t in ("split", "close", "close")]
    assert sum(rewards) == pytest.approx(1.05) and env.unwrapped.session.state(env.state_id).finished


@pytest.mark.parametrize("root_goals", [1, 2, 3])
def test_no_sequence_of_steps_earns_more_than_a_proof_without_finishing_it(root_goals):
    """Random sequences (old state ids, failed steps, unknown ids, asserted goals, rejected finishes included):
    unless a step is accepted as a proof, the episode's total is at most g * (root goals - 1) < the OK reward."""
    g, ok = 0.05, 1.0
    rng = np.random.default_rng(12)
    proofs = 0
    for _ in range(300):
        env = _fake_env(root_goals, g)
        env.reset(seed=0)
        total, finished_ok = 0.0, False
        for _ in range(int(rng.integers(1, 40))):
            tactic = TACTICS[int(rng.integers(len(TACTICS)))]
            known = len(env.unwrapped.session._states)  # noqa: SLF001 - the fake's own bookkeeping
            where = int(rng.integers(-1, known + 1))  # -1: the current state; known: an unknown id
            action = tactic if where < 0 else {"tactic": tactic, "state_id": where}
            _, reward, terminated, truncated, _ = env.step(action)
            total += reward
            if terminated:
                finished_ok = True
                break
            if truncated:
                break
        if finished_ok:
            proofs += 1
            assert total <= ok + g * root_goals + 1e-9
        else:
            assert total <= g * (root_goals - 1) + 1e-9, total
            assert total < ok
    assert proofs > 0  # the sequences do reach proofs too: the bound is not vacuous


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


@pytest.mark.prover
@requires_coq
def test_goal_closed_shaping_cannot_be_farmed_on_real_coq():
    """The issue's farm on real Coq: after ``induction n``, close the base case 30 times from the same state id.
    It used to pay 0.05 each time (1.5 in all, more than the proof); now the total stays below a proof's reward."""
    env = gym.make("proofgym/Tactic-v0", tasks=TASKS, max_steps=40, disable_env_checker=True,
                   reward_map={"goal_closed": 0.05}, verifier_kwargs={"audit": "never"})
    try:
        env.reset(options={"task_id": "tac.plus0"})
        total = env.step("induction n.")[1]
        after_induction = env.unwrapped.state_id
        for _ in range(30):
            obs, reward, terminated, _, _ = env.step(f"@{after_induction} - reflexivity.")
            assert not terminated
            total += reward
        assert total < 1.0 and total <= 0.0 + 1e-9, total
        # Finishing the proof still pays a proof's reward (plus the root goal's shaping).
        env.reset(options={"task_id": "tac.plus0"})
        rewards = [env.step(t)[1] for t in ("induction n.", "- reflexivity.", "- simpl. rewrite IHn. reflexivity.")]
        assert sum(rewards) == pytest.approx(1.05)
    finally:
        env.close()


@pytest.mark.prover
def test_resetting_and_closing_leak_no_pipe():
    """Every Tactic-v0 reset used to leave three pipes to the garbage collector (ResourceWarning)."""
    from tests.conftest import have_coq

    if not have_coq():
        pytest.skip("Coq is not installed")
    code = (
        "import gc, gymnasium as gym, proofgym\n"
        "env = gym.make('proofgym/Tactic-v0', tasks='coq-tiny', max_steps=5)\n"
        "for _ in range(3):\n"
        "    env.reset(options={'task_id': 'coq.tiny.add_0_r'})\n"
        "    env.step('induction n.')\n"
        "env.close()\n"
        "gc.collect()\n"
        "print('done')\n"
    )
    proc = subprocess.run([sys.executable, "-W", "always::ResourceWarning", "-c", code], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0 and "done" in proc.stdout, proc.stderr[-2000:]
    assert "ResourceWarning" not in proc.stderr, proc.stderr[-2000:]
