"""The SkillForge harness: deterministic routing, budget, stagnation, rollback, never an unverified
program; a fake environment for the mechanics, the real Dafny for the predicted route."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import pytest

from proofgym.agents.strategies.skillforge import (
    RESYNTH_TEMPERATURE,
    ROUTES,
    ScriptedSkillAgent,
    SkillForge,
    declaration_has_loop,
)
from proofgym.envs.types import CheckResult, ErrorCategory, Task, Verdict
from tests.test_dafny_common import dafny_verifier, requires_dafny

TASK = Task(id="sf.t", system="dafny", context="", statement="method M() returns (r: int)\n  ensures r == 1\n",
            reference_proof="method M() returns (r: int)\n  ensures r == 1\n{\n  r := 1;\n}\n", category="simple",
            metadata={"description": "Return one."})


def _fail(category: ErrorCategory, n: int = 1, line: int = 3) -> CheckResult:
    return CheckResult(Verdict.FAIL, ("x",), tuple(f"line {line}, col 1: Error: e{k}" for k in range(n)),
                       error_category=category)


OK = CheckResult(Verdict.OK)
TYPE_ERR = CheckResult(Verdict.ERROR, ("x",), ("line 2, col 1: Error: unresolved identifier: z",),
                       error_category=ErrorCategory.TYPE_ERROR)
CHEAT = CheckResult(Verdict.CHEATING, ("assume statement at line 3",), error_category=ErrorCategory.CHEATING)


class FakeEnv:
    """Answers each program with a scripted CheckResult (like WholeProof-v0's step info)."""

    def __init__(self, results: dict[str, CheckResult], max_attempts: int = 5) -> None:
        self.results = results
        self.max_attempts = max_attempts
        self.steps: list[str] = []

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        self.steps = []
        return {}, {}

    def step(self, program: str):
        self.steps.append(program)
        result = self.results[program.strip()]
        terminated = result.verdict is Verdict.OK
        truncated = not terminated and len(self.steps) >= self.max_attempts
        return {}, float(terminated), terminated, truncated, {"result": result}


def _prog(tag: str, loop: bool = False) -> str:
    body = "  while true\n  {\n  }\n" if loop else "  r := 1;\n"
    return f"method M() returns (r: int)\n  ensures r == 1\n{{\n  // {tag}\n{body}}}"


def test_routes_follow_skillforge_equation_5() -> None:
    assert ROUTES[ErrorCategory.INVARIANT_MISSING] == "gen_invariant"
    assert ROUTES[ErrorCategory.SPEC_GAP] == "strengthen_spec"
    assert ROUTES[ErrorCategory.BODY_ERROR] == "repair_code"
    assert ROUTES[ErrorCategory.TYPE_ERROR] == "synth_body"
    assert ErrorCategory.UNKNOWN not in ROUTES  # never routed silently


def test_predicted_route_with_a_fake_env() -> None:
    p1, p2, p3, p4 = _prog("typo"), _prog("weak", loop=True), _prog("assert"), _prog("good")
    env = FakeEnv({p1.strip(): TYPE_ERR, p2.strip(): _fail(ErrorCategory.SPEC_GAP, line=5),
                   p3.strip(): _fail(ErrorCategory.BODY_ERROR), p4.strip(): OK})
    agent = ScriptedSkillAgent({"synth_body": [p1, p2], "gen_invariant": [p3], "repair_code": [p4]})
    result = SkillForge(agent, env, budget=5).solve(TASK)
    assert result.verified and result.program == p4 + "\n" and result.iterations == 4
    assert [(s.category, s.skill) for s in result.route[:3]] == [
        ("type_error", "synth_body"), ("invariant_missing", "gen_invariant"), ("body_error", "repair_code")]
    assert result.route[1].raw_category == "spec_gap"  # a weak invariant shows as a postcondition error
    table = result.stats.table()
    assert table["gen_invariant"] == {"invocations": 1, "successes": 1, "success_rate": 1.0}
    assert table["diagnose_error"]["invocations"] == 3 and table["synth_body"]["invocations"] == 2


def test_spec_gap_without_a_loop_goes_to_strengthen_spec() -> None:
    p1, p2 = _prog("nolooping"), _prog("fixed")
    env = FakeEnv({p1.strip(): _fail(ErrorCategory.SPEC_GAP, line=5), p2.strip(): OK})
    agent = ScriptedSkillAgent({"synth_body": [p1], "strengthen_spec": [p2]})
    result = SkillForge(agent, env, budget=3).solve(TASK)
    assert result.verified and result.route[0].skill == "strengthen_spec"


def test_unchanged_program_triggers_resynthesis_at_higher_temperature() -> None:
    p1, p2 = _prog("bad"), _prog("good")
    env = FakeEnv({p1.strip(): _fail(ErrorCategory.BODY_ERROR), p2.strip(): OK})
    agent = ScriptedSkillAgent({"synth_body": [p1, p2], "repair_code": [p1]})
    result = SkillForge(agent, env, budget=3).solve(TASK)
    assert result.verified and result.resyntheses == 1
    resynth = [c for c in agent.calls if c.skill == "synth_body"][1]
    assert resynth.temperature == RESYNTH_TEMPERATURE > agent.calls[0].temperature
    assert result.stats.table()["repair_code"]["successes"] == 0


def test_rising_errors_roll_back_to_the_best_candidate() -> None:
    best, worse, worst, fixed = _prog("best"), _prog("worse"), _prog("worst"), _prog("fixed")
    env = FakeEnv({best.strip(): _fail(ErrorCategory.BODY_ERROR, 1), worse.strip(): _fail(ErrorCategory.BODY_ERROR, 2),
                   worst.strip(): _fail(ErrorCategory.BODY_ERROR, 3), fixed.strip(): OK})
    agent = ScriptedSkillAgent({"synth_body": [best], "repair_code": [worse, worst, fixed]})
    result = SkillForge(agent, env, budget=5).solve(TASK)
    assert result.rollbacks == 1 and "rollback" in result.route[2].note
    # After the rollback the repair prompt shows the best candidate, not the worst one.
    assert "// best" in agent.calls[-1].prompt and "// worst" not in agent.calls[-1].prompt
    assert result.verified


def test_budget_exhausted_returns_no_program() -> None:
    bad = _prog("bad")
    env = FakeEnv({bad.strip(): _fail(ErrorCategory.BODY_ERROR)})
    agent = ScriptedSkillAgent({"synth_body": [bad], "repair_code": [bad]})
    result = SkillForge(agent, env, budget=3).solve(TASK)
    assert not result.verified and result.program is None
    assert result.iterations == result.verifier_calls == 3 == len(env.steps)
    assert result.route[-1].note == "budget exhausted" and result.best_errors == 1


def test_a_cheat_is_never_returned() -> None:
    cheat = _prog("cheat")
    env = FakeEnv({cheat.strip(): CHEAT})
    agent = ScriptedSkillAgent({"synth_body": [cheat]})
    result = SkillForge(agent, env, budget=3).solve(TASK)
    assert not result.verified and result.program is None
    assert result.route[0].category == "cheating" and result.route[0].skill == "synth_body"


def test_unknown_goes_through_the_agents_diagnosis() -> None:
    odd, fixed = _prog("odd"), _prog("fixed")
    unknown = CheckResult(Verdict.ERROR, ("x",), ("line 3, col 1: Error: never seen",),
                          error_category=ErrorCategory.UNKNOWN)
    env = FakeEnv({odd.strip(): unknown, fixed.strip(): OK})
    agent = ScriptedSkillAgent({"synth_body": [odd], "diagnose_error": ["category: body_error\nline: 3\nsuggestion: s"],
                                "repair_code": [fixed]})
    result = SkillForge(agent, env, budget=3).solve(TASK)
    assert result.verified and [c.skill for c in agent.calls] == ["synth_body", "diagnose_error", "repair_code"]
    assert "Suggestion: s" in agent.calls[-1].prompt
    # An agent that cannot classify either: re-synthesis, with the reason in the route.
    agent = ScriptedSkillAgent({"synth_body": [odd], "diagnose_error": ["I am not sure"]})
    result = SkillForge(agent, FakeEnv({odd.strip(): unknown}), budget=2).solve(TASK)
    assert "unknown after diagnosis" in result.route[0].note and not result.verified


def test_any_proofgym_agent_drives_it() -> None:
    from proofgym.agents.scripted import ScriptedAgent

    good = _prog("good")
    seen = []

    def reply(request) -> str:
        seen.append(request.messages[0]["content"])
        return f"```dafny\n{good}\n```"

    result = SkillForge(ScriptedAgent(reply), FakeEnv({good.strip(): OK}), budget=2).solve(TASK)
    assert result.verified and result.first_pass and seen == ["SkillForge skill: synth_body"]


def test_loop_detection_reads_the_failing_declaration() -> None:
    program = ("method A()\n{\n  var i := 0;\n  while i < 3\n  {\n    i := i + 1;\n  }\n}\n"
               "method B() returns (r: int)\n  ensures r == 1\n{\n  r := 0;\n}\n")
    assert declaration_has_loop(program, 8) and not declaration_has_loop(program, 12)


@pytest.mark.prover
@requires_dafny
def test_predicted_route_on_real_dafny_then_verified_and_equivalent() -> None:
    """A scripted agent makes a known sequence of mistakes on dafny-nl's array_sum:
    a type error (-> synth_body), a missing invariant that Dafny reports as a postcondition error
    (-> gen_invariant), a false assertion (-> repair_code), then the fix."""
    from proofgym.envs.tasks.dafny_nl import build_tasks

    task = next(t for t in build_tasks() if t.id == "dafny.nl.array_sum")
    ref = task.reference_proof
    mistakes = {
        "synth_body": ["```dafny\n" + ref.replace("s := 0;", "s := true;") + "```",
                       ref.replace("    invariant s == Sum(a[..i])\n", "")],
        "gen_invariant": [ref.replace("    s := s + a[i];\n", "    assert s >= 0;\n    s := s + a[i];\n")],
        "repair_code": [ref],
    }
    verifier = dafny_verifier()
    env = gym.make("proofgym/WholeProof-v0", tasks=[task], verifier=verifier, max_attempts=5)
    forge = SkillForge(ScriptedSkillAgent(mistakes), env.unwrapped, budget=5, verifier=verifier, equivalence=True)
    result = forge.solve(task)
    assert [(s.raw_category, s.skill) for s in result.route[:3]] == [
        ("type_error", "synth_body"), ("spec_gap", "gen_invariant"), ("body_error", "repair_code")]
    assert result.verified and result.iterations == 4 and result.equivalent and result.program == ref
    summary = forge.run([task])
    assert summary["VR"] == 1.0 and summary["skills"]["gen_invariant"]["invocations"] == 2


@pytest.mark.prover
@requires_dafny
def test_failure_within_budget_on_real_dafny() -> None:
    from proofgym.envs.tasks.dafny_nl import build_tasks

    task = next(t for t in build_tasks() if t.id == "dafny.nl.abs")
    wrong = task.reference_proof.replace("y := -x;", "y := x;")
    verifier = dafny_verifier()
    env = gym.make("proofgym/WholeProof-v0", tasks=[task], verifier=verifier, max_attempts=2)
    cheat = task.reference_proof.replace("{\n  if", "{\n  assume false;\n  if", 1)
    agent = ScriptedSkillAgent({"synth_body": [wrong, cheat], "strengthen_spec": [wrong]})
    result = SkillForge(agent, env.unwrapped, budget=2, verifier=verifier).solve(task)
    assert not result.verified and result.program is None and result.verifier_calls == 2
    assert result.route[0].raw_category == "spec_gap" and result.route[0].skill == "strengthen_spec"


def _attempt(proof: str, result: CheckResult):
    from proofgym.agents.strategies.base import Attempt

    return Attempt(proof=proof, raw=proof, result=result)


def test_evaluation_strategy_takes_the_same_decisions() -> None:
    from proofgym.agents.strategies import make_strategy

    strategy = make_strategy("skillforge", budget=4)
    assert strategy.max_attempts == 4 and strategy.next_skill([])[0] == "synth_body"
    loop = _prog("weak", loop=True)
    step = strategy.next_skill([_attempt(loop, _fail(ErrorCategory.SPEC_GAP, line=5))])
    assert step[0] == "gen_invariant" and step[2] == loop
    same = [_attempt(loop, _fail(ErrorCategory.BODY_ERROR)), _attempt(loop, _fail(ErrorCategory.BODY_ERROR))]
    assert strategy.next_skill(same)[:2] == ("synth_body", RESYNTH_TEMPERATURE)
    rising = [_attempt(_prog(f"p{n}"), _fail(ErrorCategory.BODY_ERROR, n)) for n in (1, 2, 3)]
    skill, _, program, _, note = strategy.next_skill(rising)
    assert (skill, note) == ("repair_code", "rollback to the best candidate") and "// p1" in program
    unknown = CheckResult(Verdict.ERROR, ("x",), ("line 3, col 1: Error: odd",), error_category=ErrorCategory.UNKNOWN)
    assert strategy.next_skill([_attempt(loop, unknown)])[4].startswith("unknown category")
    request = strategy.request(TASK, 0, [_attempt(loop, _fail(ErrorCategory.SPEC_GAP, line=5))])
    assert request.messages[0]["content"] == "SkillForge skill: gen_invariant" and request.sampling.temperature == 0
    assert strategy.request(TASK, 0, [_attempt(loop, OK)]) is None


def test_infer_spec_is_checked_by_resolution() -> None:
    from proofgym.envs.verifiers.dafny.output import DafnyOutput, Diagnostic

    class Resolver:
        def __init__(self, ok: bool) -> None:
            self.ok = ok

        def resolve(self, program: str) -> DafnyOutput:
            bad = Diagnostic("error", 1, 1, "", "unresolved identifier: q", category=ErrorCategory.TYPE_ERROR)
            return DafnyOutput(() if self.ok else (bad,))

    good = _prog("good")
    for ok in (True, False):
        agent = ScriptedSkillAgent({"infer_spec": ["method M() returns (r: int)\n  ensures r == 1\n"],
                                    "synth_body": [good]})
        result = SkillForge(agent, FakeEnv({good.strip(): OK}), budget=2, verifier=Resolver(ok),
                            infer_spec=True).solve(TASK)
        assert result.verified and result.stats.table()["infer_spec"]["successes"] == int(ok)
        synth_prompt = agent.calls[1].prompt
        assert "ensures r == 1" in synth_prompt  # the inferred (or, when it fails, the task's) spec
