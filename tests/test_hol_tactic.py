"""HOL Light tactic mode (replayed proof trees), fail-safe localization and Cobblestone.

The parser tests are fast; the rest is the prover tier on the real HOL Light and shares ONE
warm verifier (the session fixture `hol` in conftest.py): Debian's HOL Light takes about two minutes to load.
"""

from __future__ import annotations

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import proofgym  # noqa: F401 - registers the ids
from proofgym.agents.strategies.cobblestone import Cobblestone, CobblestoneConfig
from proofgym.agents.symbolic import SymbolicAgent
from proofgym.envs.types import Goal, Task, Verdict
from proofgym.envs.verifiers.hol_light import hol_light_installed
from proofgym.envs.verifiers.hol_light.tactic import (
    Atom,
    ProofTree,
    TacticSyntaxError,
    Then,
    Thenl,
    graft,
    hol_goal_text,
    localize,
    normalize_tactic,
    parse_tactic,
    render,
)
from tests.test_cobblestone import Scripted

requires_hol = pytest.mark.skipif(
    not hol_light_installed(),
    reason="HOL Light is not installed: run `make setup` (apt-get install hol-light libnum-ocaml-dev)")


def T(goal: str, *, ident: str = "t", timeout: float = 30.0) -> Task:
    return Task(id=ident, system="hol_light", context="", statement=f"`{goal}`", reference_proof="ALL_TAC",
                timeout_s=timeout)


PLUS0 = T("!n. n + 0 = n", ident="hol.plus0")
CONJ = T("1 + 1 = 2 /\\ 2 + 2 = 4", ident="hol.conj")
NESTED = T("(1 + 1 = 2 /\\ 2 + 2 = 4) /\\ (3 + 3 = 6 /\\ (!n. n + 0 = n))", ident="hol.nested")
# Neither MESON (no induction) nor ARITH_TAC (lists) proves this whole goal.
TWO_INDUCTIONS = T("(!n. n + 0 = n) /\\ (!l:A list. APPEND l [] = l)", ident="hol.two")
EASY = T("!x. x + 1 > x", ident="hol.easy")  # MESON_TAC[] fails, ARITH_TAC proves it
#: A tactic that "closes" its goal with a justification returning ``w |- w``: accepted as a step
#: while other goals remain (justifications run only once no goal is left), caught by the final check.
BOGUS = "fun (_, w) -> (null_meta, [], fun _ _ -> ASSUME w)"


# ---------------------------------------------------------------------------------------------
# fast tier: the expression parser and proof trees


def test_parse_then_thenl_left_associative_with_nesting():
    assert parse_tactic("A THEN B THENL [C; D]") == Thenl(Then(Atom("A"), Atom("B")), (Atom("C"), Atom("D")))
    assert parse_tactic("CONJ_TAC THENL [REWRITE_TAC[ADD_SYM] THEN ARITH_TAC; (GEN_TAC THEN X)];;") == Thenl(
        Atom("CONJ_TAC"), (Then(Atom("REWRITE_TAC[ADD_SYM]"), Atom("ARITH_TAC")), Then(Atom("GEN_TAC"), Atom("X"))))
    assert parse_tactic("(A THEN (B THEN C))") == Then(Atom("A"), Then(Atom("B"), Atom("C")))
    # strings, comments, term quotations and brackets hide THEN and ;
    assert parse_tactic('MP_TAC (SPECL [`m:num`; `n:num`] ADD_SYM) THEN X "a THEN b" (* THEN [ *)') == Then(
        Atom("MP_TAC (SPECL [`m:num`; `n:num`] ADD_SYM)"), Atom('X "a THEN b"'))
    assert parse_tactic("A THENL [B; C;]") == Thenl(Atom("A"), (Atom("B"), Atom("C")))


def test_parse_keeps_what_it_cannot_read_as_one_atom():
    assert parse_tactic("A THEN B ORELSE C THEN D") == Then(Atom("A THEN B ORELSE C"), Atom("D"))
    for text in ("let t = ARITH_TAC in t THEN t", "X THENL (map f l)", "A THEN", "A THEN B; C",
                 "DISCH_THEN (fun th -> REWRITE_TAC[th]) o I"):
        assert parse_tactic(text) == Atom(text)
    assert parse_tactic("((* a comment *)) THEN B") == Then(Atom("((* a comment *))"), Atom("B"))
    for bad in ("(A", "A)", '"x', "(* c", "`x", "[A)", ";;", "(* only a comment *)"):
        with pytest.raises(TacticSyntaxError):
            normalize_tactic(bad)


def test_render_and_graft():
    tree = ProofTree("INDUCT_TAC", (None, ProofTree("CONJ_TAC", (None, None))))
    assert render(None) == "ALL_TAC"
    assert render(tree) == "(INDUCT_TAC) THENL [ALL_TAC; (CONJ_TAC)]"
    assert render(tree, {0: "ARITH_TAC", 2: "X"}) == "(INDUCT_TAC) THENL [(ARITH_TAC); (CONJ_TAC) THENL [ALL_TAC; (X)]]"
    assert render(graft(tree, 1, ProofTree("Y"))) == "(INDUCT_TAC) THENL [ALL_TAC; (CONJ_TAC) THENL [(Y); ALL_TAC]]"
    with pytest.raises(IndexError):
        graft(tree, 3, None)
    assert hol_goal_text(Goal(("m = 1", "n = 0"), "m + n = 1")) == "  0 [`n = 0`]\n  1 [`m = 1`]\n?- `m + n = 1`"


# ---------------------------------------------------------------------------------------------
# prover tier


@pytest.fixture(scope="module")
def env(hol):
    env = gym.make("proofgym/Tactic-v0", tasks=[PLUS0, CONJ, EASY], max_steps=20, disable_env_checker=True,
                   verifier=hol)
    yield env
    env.close()


@pytest.mark.prover
@requires_hol
def test_check_env(hol):
    from proofgym.envs.tactic_env import TacticEnv

    # built directly, not by gym.make: check_env re-makes a spec'd env and cannot copy a live verifier
    env = TacticEnv(tasks=[PLUS0, CONJ], verifier=hol, max_steps=5)
    check_env(env, skip_render_check=True)
    env.close()


@pytest.mark.prover
@requires_hol
def test_scripted_agent_solves_step_by_step_with_backtracking(env, hol):
    obs, info = env.reset(options={"task_id": "hol.plus0"})
    root = obs["state_id"]
    assert obs["goals"].endswith("?- `!n. n + 0 = n`")
    obs, reward, terminated, _, info = env.step("GEN_TAC")  # legal, but a dead end for induction
    dead_end = obs["state_id"]
    assert info["verdict"] is None and obs["goals"].endswith("?- `n + 0 = n`") and reward == 0.0
    obs, reward, terminated, _, info = env.step("INDUCT_TAC")  # fails: nothing to induct on
    assert info["verdict"] == "FAIL" and "the tactic failed" in obs["last_error"] and obs["state_id"] == dead_end
    # backtrack to the root and take another route
    obs, _, _, _, info = env.step(f"@{root} INDUCT_TAC")
    assert info["parent_state_id"] == root and obs["state_id"] not in (root, dead_end)
    assert "Goal 1 of 2" in obs["goals"] and "?- `0 + 0 = 0`" in obs["goals"]
    assert "0 [`n + 0 = n`]\n?- `SUC n + 0 = SUC n`" in obs["goals"]
    obs, reward, terminated, _, info = env.step("ARITH_TAC")  # the base case: the first goal
    assert not terminated and reward == 0.0 and obs["goals"].startswith("Goal 1 of 1")
    obs, reward, terminated, truncated, info = env.step({"tactic": "ARITH_TAC", "state_id": obs["state_id"]})
    assert terminated and not truncated and reward == 1.0 and obs["goals"] == "No subgoals."
    # the reward came from the whole-proof check of the assembled expression
    assert info["verdict"] == "OK" and info["result"].verdict is Verdict.OK
    assert info["result"].backend == "hol_light-fork"
    assert info["proof"] == "(INDUCT_TAC) THENL [(ARITH_TAC); (ARITH_TAC)]" and "GEN_TAC" not in info["proof"]
    assert hol.check(PLUS0, info["proof"]).verdict is Verdict.OK
    assert env.unwrapped.session.path(obs["state_id"]) == ["INDUCT_TAC", "ARITH_TAC", "ARITH_TAC"]


@pytest.mark.prover
@requires_hol
def test_cheats_and_garbage_are_refused_observations(env):
    obs, _ = env.reset(options={"task_id": "hol.conj"})
    start = obs["state_id"]
    for cheat in ("CHEAT_TAC", "ACCEPT_TAC(mk_thm([],`F`))", "Obj.magic 0"):
        obs, reward, terminated, _, info = env.step(cheat)
        assert info["verdict"] == "CHEATING" and reward == -1.0 and not terminated, (cheat, info)
        assert obs["state_id"] == start and obs["last_error"]
    obs, reward, _, _, info = env.step("ARITH_TAC) THEN (CHEAT_TAC")  # cannot escape its node
    assert info["verdict"] == "ERROR" and reward == 0.0 and "does not parse" in obs["last_error"]
    obs, _, _, _, info = env.step("NO_SUCH_TAC")
    assert info["verdict"] == "ERROR" and obs["state_id"] == start
    obs, _, _, _, info = env.step("@999 ARITH_TAC")
    assert info["verdict"] == "ERROR" and "unknown state id" in obs["last_error"]
    obs, _, _, _, info = env.step(42)
    assert info["verdict"] == "ERROR"


@pytest.mark.prover
@requires_hol
def test_a_finishing_path_is_judged_by_the_whole_proof_check(env):
    obs, _ = env.reset(options={"task_id": "hol.conj"})
    obs, *_ = env.step("CONJ_TAC")
    # A forged justification is accepted as a step while another goal remains: HOL Light runs
    # justifications only when no goal is left, so tactic mode cannot tell yet ...
    obs, reward, terminated, _, info = env.step(BOGUS)
    assert info["verdict"] is None and reward == 0.0 and obs["goals"].endswith("?- `2 + 2 = 4`")
    forged = obs["state_id"]
    # ... and the step that finishes the path is judged by the full check, which finds the forgery.
    obs, reward, terminated, _, info = env.step("ARITH_TAC")
    assert info["verdict"] == "CHEATING" and reward == -1.0 and not terminated
    assert "hypotheses" in obs["last_error"] and obs["state_id"] == forged


@pytest.mark.prover
@requires_hol
def test_fail_safe_finds_exactly_the_broken_tactic_and_keeps_siblings(hol):
    proof = "CONJ_TAC THENL [CONJ_TAC THEN ARITH_TAC; CONJ_TAC THENL [ARITH_TAC; GEN_TAC THEN DISCH_TAC]]"
    assert hol.check(NESTED, proof).verdict is Verdict.FAIL
    with hol.open(NESTED) as session:
        loc = localize(session, proof)
        assert not loc.rejected and not loc.complete
        assert [h.failed_sentence for h in loc.holes] == ["DISCH_TAC"]
        hole = loc.holes[0]
        assert hole.goal.conclusion == "n + 0 = n" and "DISCH_TAC" in hole.error
        assert session.state(hole.state_id).goals[hole.goal_index] == hole.goal
        # THEN ran its right side on both subgoals of the first conjunct; the siblings are kept
        assert loc.expression() == ("(CONJ_TAC) THENL [(CONJ_TAC) THENL [(ARITH_TAC); (ARITH_TAC)]; "
                                    "(CONJ_TAC) THENL [(ARITH_TAC); (GEN_TAC)]]")
        assert session.proof_script(loc.final_state) == loc.expression()
        fixed = loc.expression({hole.index: "REWRITE_TAC[ADD_CLAUSES]"})
        # a partial proof is never complete: its open goal is an ALL_TAC the check refuses
        assert hol.check(NESTED, loc.expression()).verdict is Verdict.FAIL
    assert "ALL_TAC" not in fixed and hol.check(NESTED, fixed).verdict is Verdict.OK


@pytest.mark.prover
@requires_hol
def test_fail_safe_repairs_thenl_length_and_rejects_cheats(hol):
    with hol.open(NESTED) as session:
        short = localize(session, "CONJ_TAC THENL [CONJ_TAC THEN ARITH_TAC]")
        assert [(h.failed_sentence, h.goal.conclusion) for h in short.holes] == [
            ("", "3 + 3 = 6 /\\ (!n. n + 0 = n)")]
        long = localize(session, "CONJ_TAC THENL [CONJ_TAC THEN ARITH_TAC; ARITH_TAC; NO_TAC]")
        assert long.complete and long.notes and hol.check(NESTED, long.expression()).verdict is Verdict.OK
        cheat = localize(session, "CONJ_TAC THENL [ARITH_TAC; CHEAT_TAC]")
        assert cheat.rejected.startswith("CHEATING") and not cheat.holes
        whole = localize(session, "REPEAT CONJ_TAC THEN ARITH_TAC")  # one check, no stepping needed
        assert whole.complete and whole.expression() == "(REPEAT CONJ_TAC THEN ARITH_TAC)"


BROKEN = "CONJ_TAC THENL [GEN_TAC THEN DISCH_TAC; LIST_INDUCT_TAC THEN ASM_REWRITE_TAC[APPEND]]"


@pytest.mark.prover
@requires_hol
def test_cobblestone_repairs_one_broken_subgoal_by_recursion(hol):
    agent = Scripted(BROKEN, "REWRITE_TAC[ADD_CLAUSES]")
    report = Cobblestone(hol, agent, CobblestoneConfig(hammer_tactics=(), samples=1)).solve(TWO_INDUCTIONS)
    assert report.solved and report.solved_by == "recursion" and report.result.verdict is Verdict.OK
    assert "DISCH_TAC" not in report.proof and "ALL_TAC" not in report.proof
    assert "LIST_INDUCT_TAC" in report.proof  # the sibling branch was kept
    hole_obs = [o for o in agent.seen if o["task_id"].endswith("#hole")]
    assert hole_obs and hole_obs[0]["statement"] == "?- `n + 0 = n`" and "DISCH_TAC" in hole_obs[0]["feedback"]
    assert report.samples_used == 2 and report.holes_seen == 1 and report.max_depth_reached == 1
    assert report.hammer_calls == 0 and hol.check(TWO_INDUCTIONS, report.proof).verdict is Verdict.OK


class TwoLevels(Scripted):
    """The first hole's proof breaks again one level down; the second hole gets a fix."""

    def act(self, observation: dict) -> str:
        self.seen.append(observation)
        if not observation["task_id"].endswith("#hole"):
            return BROKEN
        if observation["statement"] == "?- `n + 0 = n`":
            return "SPEC_TAC(`n:num`,`n:num`) THEN INDUCT_TAC THENL [ARITH_TAC; NO_TAC]"
        return "ASM_REWRITE_TAC[ADD_CLAUSES]"


@pytest.mark.prover
@requires_hol
def test_cobblestone_recursion_two_levels_deep(hol):
    agent = TwoLevels("", "")
    report = Cobblestone(hol, agent, CobblestoneConfig(hammer_tactics=(), samples=1)).solve(TWO_INDUCTIONS)
    assert report.solved and report.solved_by == "recursion" and report.max_depth_reached == 2
    assert report.holes_seen == 2 and report.samples_used == 3 and report.result.verdict is Verdict.OK
    # the inner hole was the step case, with its induction hypothesis, as HOL Light prints it
    assert agent.seen[-1]["statement"] == "  0 [`n + 0 = n`]\n?- `SUC n + 0 = SUC n`"
    assert "NO_TAC" not in report.proof and "ALL_TAC" not in report.proof


@pytest.mark.prover
@requires_hol
def test_cobblestone_hammer_first_on_hol_light(hol):
    # the default HOL hammers cannot do the whole goal, but ARITH_TAC closes the hole, before the agent is asked
    agent = Scripted(BROKEN, "NO_TAC")
    report = Cobblestone(hol, agent, CobblestoneConfig(samples=1, hammer_timeout_s=3)).solve(TWO_INDUCTIONS)
    assert report.solved and report.solved_by == "recursion" and report.result.verdict is Verdict.OK
    assert report.hammer_calls == 3 + 2 and "(ARITH_TAC)" in report.proof
    assert not [o for o in agent.seen if o["task_id"].endswith("#hole")]
    easy = Cobblestone(hol, Scripted("NO_TAC", "NO_TAC"), CobblestoneConfig(hammer_timeout_s=3)).solve(EASY)
    assert easy.solved_by == "hammer" and easy.samples_used == 0 and easy.proof == "ARITH_TAC"


@pytest.mark.prover
@requires_hol
def test_cobblestone_never_accepts_a_cheating_fix(hol):
    report = Cobblestone(hol, Scripted(BROKEN, "CHEAT_TAC"),
                         CobblestoneConfig(hammer_tactics=(), samples=1, invocations=2)).solve(TWO_INDUCTIONS)
    assert not report.solved and report.invocations_used == 2


@pytest.mark.prover
@requires_hol
def test_symbolic_agent_in_tactic_env(env):
    agent = SymbolicAgent("hol_light")
    obs, _ = env.reset(options={"task_id": "hol.easy"})
    tried = []
    for _ in range(5):
        tactic = agent.act(obs)
        tried.append(tactic)
        obs, reward, terminated, _, info = env.step(tactic)
        if terminated:
            break
    assert terminated and reward == 1.0 and info["result"].verdict is Verdict.OK
    assert tried == ["MESON_TAC[]", "ARITH_TAC"]  # MESON failed, the state was kept, the next candidate won
