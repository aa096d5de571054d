"""SkillForge (compositional skills, verification in the loop) on any agent, through ``WholeProof-v0``.

Six atomic skills, each a triple of prompt template (:mod:`proofgym.agents.prompts.skillforge`),
tool binding and decidable success check (SkillForge table 1):

============== ============================= ===============================================
skill          tool binding                  success check
============== ============================= ===============================================
infer_spec     Dafny resolution (``symbols``) the skeleton parses and resolves
synth_body     the environment (verify)      the program parses, resolves, is not CHEATING
gen_invariant  the environment (verify)      no loop-invariant error is left (or OK)
diagnose_error regex taxonomy, then the agent a category of the taxonomy, never ``unknown``
repair_code    the environment (verify)      fewer errors than before (or OK)
strengthen_spec the environment (verify)     OK
============== ============================= ===============================================

The loop (algorithm 1 with the section 3.3 (4) rules): synthesise a program; then, up to the
iteration budget, verify it through the environment, return it on OK, remember the candidate
with the fewest errors, diagnose, route *deterministically* by category (:data:`ROUTES`), apply
the skill. A skill that leaves the program unchanged triggers re-synthesis at a higher
temperature; errors that rise two rounds in a row roll back to the best candidate. The harness
returns a program only when the environment's verdict was OK: never an unverified one.

A loop invariant that is too weak surfaces as a *postcondition* error (``spec_gap``); when the
failing declaration has a loop, the router sends it to ``gen_invariant``. ``unknown`` diagnostics
go to the agent's DIAGNOSEERROR stage; if that cannot name a category either, the program is
re-synthesised, and the reason is recorded: nothing is routed silently.

The agent is a :class:`proofgym.agents.base.Agent` (any backend: scripted, API, local), or a
callable ``(SkillCall) -> str``. Per-skill invocations and successes are counted as in
SkillForge's table 6.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from proofgym.agents.base import Request, SamplingParams
from proofgym.agents.prompts import skillforge as prompts
from proofgym.agents.strategies.base import Strategy
from proofgym.envs.types import CheckResult, ErrorCategory, Task, Verdict
from proofgym.envs.verifiers.dafny.lexer import DafnyLexError, tokenize

SKILLS = ("infer_spec", "synth_body", "gen_invariant", "diagnose_error", "repair_code", "strengthen_spec")

#: SkillForge's equation 5, extended to the categories the Dafny taxonomy adds.
ROUTES: Mapping[ErrorCategory, str] = {
    ErrorCategory.INVARIANT_MISSING: "gen_invariant",
    ErrorCategory.SPEC_GAP: "strengthen_spec",
    ErrorCategory.BODY_ERROR: "repair_code",
    ErrorCategory.TYPE_ERROR: "synth_body",
    ErrorCategory.PARSE_ERROR: "synth_body",
    ErrorCategory.SYNTAX: "synth_body",  # an invalid submission (empty, binary, oversized): every system's word
    ErrorCategory.TIMEOUT: "repair_code",
    ErrorCategory.CHEATING: "synth_body",  # the spec was changed or a cheat used: start over, anchored
}

#: Temperatures: the first synthesis, and re-synthesis after a skill changed nothing (SkillForge: 0.3).
BASE_TEMPERATURE = 0.0
RESYNTH_TEMPERATURE = 0.3


@dataclass(frozen=True)
class SkillCall:
    """One request to the agent: which skill, its prompt, and the sampling temperature."""

    skill: str
    prompt: str
    temperature: float
    task: Task
    iteration: int


@dataclass(frozen=True)
class Diagnosis:
    """DIAGNOSEERROR's answer: category, line and a suggestion, and which stage produced it."""

    category: ErrorCategory
    line: int | None = None
    suggestion: str = ""
    stage: str = "regex"  # regex | agent | none


@dataclass(frozen=True)
class RouteStep:
    """One iteration of the loop, for the route log."""

    iteration: int
    verdict: str
    errors: int
    category: str  # after diagnosis (what the route used)
    skill: str
    note: str = ""
    raw_category: str = ""  # the verifier's own category (a spec_gap may be routed as invariant_missing)


@dataclass
class SkillStats:
    """Per-skill invocation and success counts (SkillForge's table 6)."""

    invocations: Counter = field(default_factory=Counter)
    successes: Counter = field(default_factory=Counter)

    def record(self, skill: str, success: bool) -> None:
        self.invocations[skill] += 1
        if success:
            self.successes[skill] += 1

    def merge(self, other: SkillStats) -> None:
        self.invocations.update(other.invocations)
        self.successes.update(other.successes)

    def table(self) -> dict[str, dict[str, float]]:
        return {s: {"invocations": self.invocations[s], "successes": self.successes[s],
                    "success_rate": round(self.successes[s] / self.invocations[s], 3) if self.invocations[s] else 0.0}
                for s in SKILLS}


@dataclass
class SkillForgeResult:
    """What the harness reports for one task. ``program`` is set only when the environment said OK."""

    task_id: str
    verified: bool = False
    program: str | None = None
    first_pass: bool = False
    iterations: int = 0
    verifier_calls: int = 0
    route: list[RouteStep] = field(default_factory=list)
    stats: SkillStats = field(default_factory=SkillStats)
    rollbacks: int = 0
    resyntheses: int = 0
    equivalent: bool | None = None
    equivalence: str = ""
    best_errors: int | None = None
    wall_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id, "verified": self.verified, "first_pass": self.first_pass,
            "iterations": self.iterations, "verifier_calls": self.verifier_calls,
            "route": [step.__dict__ for step in self.route], "skills": self.stats.table(),
            "rollbacks": self.rollbacks, "resyntheses": self.resyntheses, "equivalent": self.equivalent,
            "equivalence": self.equivalence, "wall_s": round(self.wall_s, 3),
        }


def error_score(result: CheckResult) -> int:
    """How bad a result is, for picking the best candidate: errors of a FAIL, far more for ERROR/CHEATING."""
    if result.verdict is Verdict.OK:
        return 0
    n = max(1, sum(1 for m in result.messages if "Error" in m or "Timeout" in m or "resource" in m))
    if result.verdict is Verdict.ERROR:
        return 1000 + n
    if result.verdict is Verdict.CHEATING:
        return 1_000_000
    return n


def declaration_has_loop(program: str, line: int | None) -> bool:
    """Whether the method, lemma or constructor that contains ``line`` has a ``while``/``for`` loop.

    Reads tokens only (no prover): from the last ``method``/``lemma``/``constructor`` keyword at or
    before ``line`` to the next declaration keyword.
    """
    if line is None:
        return False
    try:
        tokens = tokenize(program)
    except DafnyLexError:
        return False
    starts = [k for k, t in enumerate(tokens) if t.kind == "ident"
              and t.text in ("method", "lemma", "constructor", "function", "predicate", "iterator")]
    before = [k for k in starts if tokens[k].line <= line]
    if not before:
        return False
    begin = before[-1]
    end = next((k for k in starts if k > begin), len(tokens))
    return any(t.text in ("while", "for") for t in tokens[begin:end])


def _first_error_line(result: CheckResult) -> int | None:
    for message in result.messages:
        m = re.match(r"line (\d+), col \d+: (?:Error|Timeout|Out of resource)", message)
        if m:
            return int(m.group(1))
    return None


def diagnose_regex(result: CheckResult, program: str) -> Diagnosis:
    """DIAGNOSEERROR stage 1: the verifier's regex taxonomy, with the loop refinement for ``spec_gap``."""
    category = result.error_category
    line = _first_error_line(result)
    if result.verdict is Verdict.CHEATING:
        return Diagnosis(ErrorCategory.CHEATING, line, "; ".join(result.reasons)[:200])
    if category in (ErrorCategory.NONE, ErrorCategory.UNKNOWN, ErrorCategory.OTHER):
        return Diagnosis(ErrorCategory.UNKNOWN, line, "", "none")
    if category is ErrorCategory.SPEC_GAP and declaration_has_loop(program, line):
        return Diagnosis(ErrorCategory.INVARIANT_MISSING, line,
                         "the postcondition fails after a loop: an invariant is missing or too weak")
    return Diagnosis(category, line, "")


def route(diagnosis: Diagnosis) -> str:
    """The skill for a diagnosis (deterministic). ``unknown`` has no route: the caller must diagnose first."""
    if diagnosis.category is ErrorCategory.UNKNOWN:
        raise ValueError("an unknown category is never routed: run DIAGNOSEERROR's agent stage first")
    return ROUTES[diagnosis.category]


class SkillForge:
    """The SkillForge harness. ``env`` is a ``proofgym/WholeProof-v0`` environment holding the tasks
    (its ``max_attempts`` must allow ``budget`` attempts); ``verifier`` (optional) resolves inferred
    specs and checks equivalence against the reference.

    Args:
        agent: an :class:`~proofgym.agents.base.Agent` or a callable ``(SkillCall) -> str``.
        env: the environment the programs are verified through.
        budget: the hard iteration budget N (verifier calls per task; SkillForge uses 5).
        infer_spec: run INFERSPEC from the description instead of using the task's statement.
        equivalence: after OK, check equivalence with the reference (ER), when a verifier is given.
    """

    def __init__(self, agent: Any, env: Any, *, budget: int = 5, verifier: Any | None = None,
                 infer_spec: bool = False, equivalence: bool = False) -> None:
        if budget < 1:
            raise ValueError(f"budget must be >= 1, got {budget}")
        self.agent = agent
        self.env = env
        self.budget = int(budget)
        self.verifier = verifier
        self.infer_spec = infer_spec
        self.equivalence = equivalence
        self.stats = SkillStats()

    # -- the agent ---------------------------------------------------------------------------------
    def _ask(self, skill: str, task: Task, iteration: int, temperature: float, **fields: object) -> str:
        prompt = prompts.render(skill, description=task.metadata.get("description", ""), context=task.context,
                                **fields)
        call = SkillCall(skill, prompt, temperature, task, iteration)
        if callable(self.agent) and not hasattr(self.agent, "generate"):
            return str(self.agent(call))

        request = Request(({"role": "system", "content": f"SkillForge skill: {skill}"},
                           {"role": "user", "content": prompt}),
                          task=task, attempt=iteration, sampling=SamplingParams(temperature=temperature))
        generation = self.agent.generate([request])[0]
        if generation.error:
            from proofgym.agents.base import AgentError

            raise AgentError(f"the agent failed on {skill}: {generation.error}")
        return generation.text

    def _program(self, skill: str, task: Task, iteration: int, temperature: float, **fields: object) -> str:
        return prompts.extract_program(self._ask(skill, task, iteration, temperature, **fields))

    # -- skills with their success checks -------------------------------------------------------------
    def _infer_spec(self, task: Task, result: SkillForgeResult) -> str:
        skeleton = self._program("infer_spec", task, 0, BASE_TEMPERATURE)
        ok = False
        if self.verifier is not None and skeleton.strip():
            program = task.context + "\n" + skeleton if task.context else skeleton
            ok = not self.verifier.resolve(program).errors
        result.stats.record("infer_spec", ok)
        return skeleton if ok else task.statement

    def _diagnose(self, task: Task, res: CheckResult, program: str, iteration: int,
                  result: SkillForgeResult) -> Diagnosis:
        diagnosis = diagnose_regex(res, program)
        if diagnosis.category is not ErrorCategory.UNKNOWN:
            result.stats.record("diagnose_error", True)
            return diagnosis
        answer = self._ask("diagnose_error", task, iteration, BASE_TEMPERATURE, program=program,
                           errors=_errors_text(res))
        category, line, suggestion = prompts.parse_diagnosis(answer)
        cat = ErrorCategory(category)
        if cat is ErrorCategory.SPEC_GAP and declaration_has_loop(program, line or diagnosis.line):
            cat = ErrorCategory.INVARIANT_MISSING
        result.stats.record("diagnose_error", cat is not ErrorCategory.UNKNOWN)
        return Diagnosis(cat, line or diagnosis.line, suggestion, "agent")

    # -- the loop --------------------------------------------------------------------------------------
    def solve(self, task: Task) -> SkillForgeResult:
        """Run the loop on one task (which must be one of the environment's)."""
        start = time.monotonic()
        result = SkillForgeResult(task.id)
        try:
            self._solve(task, result)
        finally:
            result.wall_s = time.monotonic() - start
            self.stats.merge(result.stats)
        return result

    def _solve(self, task: Task, result: SkillForgeResult) -> None:
        self.env.reset(options={"task_id": task.id})
        spec = self._infer_spec(task, result) if self.infer_spec else task.statement
        program = self._program("synth_body", task, 0, BASE_TEMPERATURE, spec=spec)
        pending: tuple[str, int] | None = ("synth_body", 0)  # the skill whose output is about to be verified
        best: tuple[int, str, CheckResult] | None = None
        scores: list[int] = []
        for iteration in range(1, self.budget + 1):
            _, _, terminated, truncated, info = self.env.step(program)
            res: CheckResult = info["result"]
            result.verifier_calls += 1
            result.iterations = iteration
            score = error_score(res)
            if pending is not None:
                self._score_skill(pending[0], res, pending[1], result)
                pending = None
            if res.verdict is Verdict.OK:
                result.verified = True
                result.program = program
                result.first_pass = iteration == 1
                result.route.append(RouteStep(iteration, res.verdict.value, 0, "none", "", "verified"))
                self._check_equivalence(task, program, res, result)
                return
            if best is None or score < best[0]:
                best = (score, program, res)
            result.best_errors = best[0]
            scores.append(score)
            if iteration == self.budget or truncated:
                result.route.append(RouteStep(iteration, res.verdict.value, score, res.error_category.value, "",
                                              "budget exhausted"))
                return
            note = ""
            if len(scores) >= 3 and scores[-1] > scores[-2] > scores[-3]:
                # Errors rose for two rounds: continue from the best candidate so far.
                result.rollbacks += 1
                _, program, res = best
                score = best[0]
                note = "rollback to the best candidate"
            diagnosis = self._diagnose(task, res, program, iteration, result)
            if diagnosis.category is ErrorCategory.UNKNOWN:
                skill, note = "synth_body", (note + "; " if note else "") + "unknown after diagnosis: re-synthesise"
            else:
                skill = route(diagnosis)
            result.route.append(RouteStep(iteration, res.verdict.value, score, diagnosis.category.value, skill, note,
                                          res.error_category.value))
            new = self._apply(skill, task, program, res, diagnosis, spec, iteration)
            if _same(new, program):
                # The skill changed nothing: re-synthesise at a higher temperature instead.
                result.stats.record(skill, False)
                result.resyntheses += 1
                new = self._program("synth_body", task, iteration, RESYNTH_TEMPERATURE, spec=spec,
                                    feedback=_feedback_block(res))
                skill = "synth_body"
                result.route.append(RouteStep(iteration, res.verdict.value, score, diagnosis.category.value,
                                              skill, "skill left the program unchanged: re-synthesis",
                                              res.error_category.value))
            pending = (skill, score)
            program = new

    def _apply(self, skill: str, task: Task, program: str, res: CheckResult, diagnosis: Diagnosis, spec: str,
               iteration: int) -> str:
        fields: dict[str, object] = {"program": program, "errors": _errors_text(res), "spec": spec,
                                     "category": diagnosis.category.value, "line": diagnosis.line or "",
                                     "suggestion": diagnosis.suggestion}
        if skill == "synth_body":
            fields["feedback"] = _feedback_block(res)
        return self._program(skill, task, iteration, BASE_TEMPERATURE, **fields)

    @staticmethod
    def _score_skill(skill: str, res: CheckResult, before: int, result: SkillForgeResult) -> None:
        """Record whether ``skill``'s output met its success check (table 1)."""
        if skill == "synth_body":
            ok = res.verdict in (Verdict.OK, Verdict.FAIL, Verdict.TIMEOUT)
        elif skill == "gen_invariant":
            ok = res.verdict is Verdict.OK or (
                res.verdict is Verdict.FAIL and res.error_category is not ErrorCategory.INVARIANT_MISSING
                and not any("loop invariant" in m for m in res.messages))
        elif skill == "repair_code":
            ok = res.verdict is Verdict.OK or (res.verdict is Verdict.FAIL and error_score(res) < before)
        else:  # strengthen_spec
            ok = res.verdict is Verdict.OK
        result.stats.record(skill, ok)

    def _check_equivalence(self, task: Task, program: str, res: CheckResult, result: SkillForgeResult) -> None:
        if not self.equivalence or self.verifier is None or not task.reference_proof.strip():
            return
        eq = self.verifier.check_equivalence(task, program, result=res)
        result.equivalence = eq.status
        result.equivalent = eq.status == "equivalent"

    # -- many tasks --------------------------------------------------------------------------------------
    def run(self, tasks: Sequence[Task], on_result: Callable[[SkillForgeResult], None] | None = None) -> dict:
        """Solve every task; VR, ER, first-pass rate, per-category VR and the skill table."""
        results = []
        for task in tasks:
            r = self.solve(task)
            results.append((task, r))
            if on_result:
                on_result(r)
        return summarize(results, self.stats)


class ScriptedSkillAgent:
    """An agent that answers each skill from a script: ``{skill: [reply, reply, ...]}``, consumed in order.

    For tests and demos: a known sequence of mistakes makes the harness take a known route. When a
    skill's list runs out, its last reply repeats. ``calls`` records every :class:`SkillCall`.
    """

    def __init__(self, script: Mapping[str, Sequence[str]]) -> None:
        unknown = set(script) - set(SKILLS)
        if unknown:
            raise ValueError(f"unknown skills in the script: {sorted(unknown)}")
        self.script = {k: list(v) for k, v in script.items()}
        self.used: Counter = Counter()
        self.calls: list[SkillCall] = []

    def __call__(self, call: SkillCall) -> str:
        self.calls.append(call)
        replies = self.script.get(call.skill)
        if not replies:
            raise KeyError(f"the script has no reply for skill {call.skill!r}")
        reply = replies[min(self.used[call.skill], len(replies) - 1)]
        self.used[call.skill] += 1
        return reply


def summarize(results: Sequence[tuple[Task, SkillForgeResult]], stats: SkillStats) -> dict[str, Any]:
    """SkillForge's headline numbers: VR, ER (verified and equivalent), first-pass, per category, table 6."""
    n = len(results) or 1
    verified = [r for _, r in results if r.verified]
    per_cat: dict[str, list[bool]] = {}
    for task, r in results:
        per_cat.setdefault(task.category, []).append(r.verified)
    calls = [r.verifier_calls for _, r in results]
    return {
        "tasks": len(results),
        "VR": round(len(verified) / n, 4),
        "ER": round(sum(1 for r in verified if r.equivalent) / n, 4),
        "first_pass": round(sum(1 for _, r in results if r.first_pass) / n, 4),
        "avg_iterations_success": round(sum(r.iterations for r in verified) / len(verified), 3) if verified else 0.0,
        "avg_verifier_calls": round(sum(calls) / n, 3),
        "per_category_VR": {c: round(sum(v) / len(v), 4) for c, v in sorted(per_cat.items())},
        "rollbacks": sum(r.rollbacks for _, r in results),
        "resyntheses": sum(r.resyntheses for _, r in results),
        "skills": stats.table(),
    }


def _same(a: str, b: str) -> bool:
    return " ".join(a.split()) == " ".join(b.split())


def _errors_text(res: CheckResult) -> str:
    lines = [f"Verdict: {res.verdict.value}"] + list(res.reasons) + list(res.messages)
    return "\n".join(lines)[:4000]


def _feedback_block(res: CheckResult) -> str:
    return f"\nThe previous attempt failed ({res.verdict.value}):\n{_errors_text(res)}\n"


class SkillForgeStrategy(Strategy):
    """SkillForge as an evaluation strategy (``proofgym eval --strategy skillforge --set budget=5``).

    The evaluation loop owns batching and verification: each attempt is one skill's program, and
    the next request is decided from the attempts so far by the same deterministic rules as
    :class:`SkillForge` (routing by category, the loop refinement of ``spec_gap``, re-synthesis at
    temperature 0.3 when a skill left the program unchanged, rollback to the best candidate after
    errors rose twice). One difference: an ``unknown`` category cannot get the agent's diagnosis
    here (one request per attempt), so it is re-synthesised with the feedback, and the request says so.
    """

    name = "skillforge"
    upper_bound = False

    def __init__(self, budget: int = 5) -> None:
        if int(budget) < 1:
            raise ValueError(f"budget must be >= 1, got {budget}")
        super().__init__()
        self.max_attempts = int(budget)

    def prepare(self, tasks: Sequence[Task], runtime: Any) -> list[Task]:
        return list(tasks)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "max_attempts": self.max_attempts}

    def next_skill(self, history: Sequence[Any]) -> tuple[str, float, str, CheckResult | None, str]:
        """``(skill, temperature, program, result, note)`` for the next attempt after ``history``."""
        if not history:
            return "synth_body", BASE_TEMPERATURE, "", None, ""
        results = [a.result for a in history]
        scores = [error_score(r) for r in results]
        last, res = history[-1].proof, results[-1]
        best = min(range(len(history)), key=lambda i: scores[i])
        note = ""
        if len(scores) >= 3 and scores[-1] > scores[-2] > scores[-3]:
            last, res, note = history[best].proof, results[best], "rollback to the best candidate"
        if len(history) >= 2 and _same(history[-1].proof, history[-2].proof):
            return "synth_body", RESYNTH_TEMPERATURE, last, res, "unchanged program: re-synthesis"
        diagnosis = diagnose_regex(res, last)
        if diagnosis.category is ErrorCategory.UNKNOWN:
            return "synth_body", BASE_TEMPERATURE, last, res, "unknown category: re-synthesis with the feedback"
        return route(diagnosis), BASE_TEMPERATURE, last, res, note

    def request(self, task: Task, sample: int, history: Sequence[Any]) -> Any:
        if len(history) >= self.max_attempts or (history and history[-1].ok):
            return None
        skill, temperature, program, res, note = self.next_skill(history)
        fields: dict[str, object] = {"spec": task.statement, "program": program}
        if res is not None:
            diagnosis = diagnose_regex(res, program)
            fields.update(errors=_errors_text(res), category=diagnosis.category.value, line=diagnosis.line or "",
                          suggestion=diagnosis.suggestion, feedback=_feedback_block(res))
        prompt = prompts.render(skill, description=task.metadata.get("description", ""), context=task.context,
                                **fields)
        system = f"SkillForge skill: {skill}" + (f" ({note})" if note else "")
        return Request(({"role": "system", "content": system}, {"role": "user", "content": prompt}), task=task,
                       sample=sample, attempt=len(history), sampling=SamplingParams(temperature=temperature))

    def parse(self, task: Task, generation: Any) -> tuple[str, tuple[str, ...]]:
        if generation.is_proof:
            return generation.text, ()
        return prompts.extract_program(generation.text), ("skillforge post-processing",)


#: ``make_strategy("skillforge", budget=5)`` builds the evaluation strategy.
STRATEGY = SkillForgeStrategy
