"""The Dafny verifier with the real Dafny 2.3: taxonomy on real programs, deadlines, both paths,
``proofgym check`` on Dafny tasks, the environment, and equivalence checking (VR vs ER)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

from proofgym.envs.types import ErrorCategory, Verdict
from tests.redteam.test_dafny_cheats import ABS, ABS_BODY, ABS_STMT, SUM, SUM_IMPL
from tests.test_dafny_common import dafny_verifier, dtask, fail_symbols_requests, requires_dafny

pytestmark = [pytest.mark.prover, requires_dafny]

LOOP_STMT = "method Count(n: nat) returns (s: nat)\n  ensures s == n\n"
LOOP = dtask("loop", LOOP_STMT)


def _loop(invariants: str, body: str = "s := s + 1;\n    i := i + 1;") -> str:
    return LOOP_STMT + "{\n  s := 0;\n  var i := 0;\n  while i < n\n" + invariants + "  {\n    " + body + "\n  }\n}\n"


FALSE = dtask("lemma", "lemma L(x: int)\n  ensures x * 0 == 0\n")

# (name, task, program, verdict, category): one real program per taxonomy class.
TAXONOMY = [
    ("spec_gap", ABS, ABS_STMT + "{\n  y := x;\n}\n", Verdict.FAIL, ErrorCategory.SPEC_GAP),
    ("weak-invariant-is-a-postcondition-error", LOOP, _loop("    invariant 0 <= i <= n\n"), Verdict.FAIL,
     ErrorCategory.SPEC_GAP),
    ("invariant-on-entry", LOOP, _loop("    invariant 0 <= i <= n\n    invariant s == i + 1\n"), Verdict.FAIL,
     ErrorCategory.INVARIANT_MISSING),
    ("invariant-not-maintained", LOOP, _loop("    invariant 0 <= i <= n\n    invariant s == i\n",
                                              "s := s + 2;\n    i := i + 1;"), Verdict.FAIL,
     ErrorCategory.INVARIANT_MISSING),
    ("assertion", ABS, ABS_STMT + ABS_BODY.replace("{\n  if", "{\n  assert x > 0;\n  if", 1), Verdict.FAIL,
     ErrorCategory.BODY_ERROR),
    ("termination", LOOP, LOOP_STMT + "{\n  s := 0;\n  while s != n\n  {\n    s := s + 2;\n  }\n}\n", Verdict.FAIL,
     ErrorCategory.BODY_ERROR),
    ("decreases", FALSE, "lemma L(x: int)\n  ensures x * 0 == 0\n  decreases x\n{\n  L(x - 1);\n}\n", Verdict.FAIL,
     ErrorCategory.BODY_ERROR),
    ("call-precondition", ABS, "method P(x: int)\n  requires x > 0\n{\n}\n" + ABS_STMT
     + ABS_BODY.replace("{\n  if", "{\n  P(x);\n  if", 1), Verdict.FAIL, ErrorCategory.BODY_ERROR),
    ("division", ABS, ABS_STMT + ABS_BODY.replace("y := x;", "y := x / x * x;"), Verdict.FAIL,
     ErrorCategory.BODY_ERROR),
    ("index", dtask("first", "method First(a: array<int>) returns (x: int)\n"),
     "method First(a: array<int>) returns (x: int)\n{\n  x := a[0];\n}\n", Verdict.FAIL, ErrorCategory.BODY_ERROR),
    ("unresolved-identifier", ABS, ABS_STMT + ABS_BODY.replace("y := x;", "y := z;"), Verdict.ERROR,
     ErrorCategory.TYPE_ERROR),
    ("type-mismatch", ABS, ABS_STMT + ABS_BODY.replace("y := x;", "y := true;"), Verdict.ERROR,
     ErrorCategory.TYPE_ERROR),
    ("parse", ABS, ABS_STMT + ABS_BODY.replace("y := x;", "y := x +;"), Verdict.ERROR, ErrorCategory.PARSE_ERROR),
    ("timeout", dtask("fermat", "lemma Fermat(a: int, b: int, c: int)\n  requires a > 0 && b > 0 && c > 0\n"
                                "  ensures a * a * a + b * b * b != c * c * c\n", timeout_s=2),
     "lemma Fermat(a: int, b: int, c: int)\n  requires a > 0 && b > 0 && c > 0\n"
     "  ensures a * a * a + b * b * b != c * c * c\n{\n}\n", Verdict.TIMEOUT, ErrorCategory.TIMEOUT),
    ("unknown-is-not-guessed", ABS, ABS_STMT + ABS_BODY.replace("y := x;", "y := x;\n    break;"), Verdict.ERROR,
     ErrorCategory.UNKNOWN),
]


@pytest.mark.parametrize(("name", "task", "program", "verdict", "category"), TAXONOMY, ids=[t[0] for t in TAXONOMY])
def test_taxonomy_on_real_programs(name, task, program, verdict, category) -> None:
    result = dafny_verifier().check(task, program)
    assert (result.verdict, result.error_category) == (verdict, category), (result.reasons, result.messages)
    if verdict is not Verdict.TIMEOUT:
        assert result.messages  # the diagnostics reach the feedback


def test_taxonomy_covers_every_category() -> None:
    wanted = {ErrorCategory.SPEC_GAP, ErrorCategory.INVARIANT_MISSING, ErrorCategory.BODY_ERROR,
              ErrorCategory.TYPE_ERROR, ErrorCategory.PARSE_ERROR, ErrorCategory.TIMEOUT, ErrorCategory.UNKNOWN}
    assert {t[4] for t in TAXONOMY} == wanted


def test_feedback_carries_category_and_lines() -> None:
    result = dafny_verifier().check(ABS, ABS_STMT + "{\n  y := x;\n}\n")
    feedback = result.feedback()
    assert "Error category: spec_gap" in feedback and "line 4" in feedback and "BP5003" in feedback


def test_outer_kill_at_the_deadline_then_a_fresh_server() -> None:
    """Many slow implementations: /timeLimit alone would allow minutes; the outer kill stops the run."""
    from proofgym.envs.verifiers.dafny import DafnyVerifier

    lemmas = "".join(f"lemma F{k}(a: int, b: int, c: int)\n  requires a > {k} && b > 0 && c > 0\n"
                     f"  ensures a * a * a + b * b * b != c * c * c\n{{\n}}\n" for k in range(8))
    task = dtask("slow", "lemma F0(a: int, b: int, c: int)\n  requires a > 0 && b > 0 && c > 0\n"
                         "  ensures a * a * a + b * b * b != c * c * c\n", timeout_s=2)
    with DafnyVerifier(audit="never", grace_s=1.0) as verifier:
        result = verifier.check(task, lemmas)
        assert result.verdict is Verdict.TIMEOUT and "killed" in result.reasons[0]
        assert verifier.stats["outer_kills"] == 1 and verifier._server is None
        ok = verifier.check(ABS, ABS.reference_proof)  # a fresh server answers the next check
        assert ok.verdict is Verdict.OK and verifier.stats["server_starts"] == 2


def test_cli_backend_agrees_with_the_server() -> None:
    from proofgym.envs.verifiers.dafny import DafnyVerifier

    programs = [ABS.reference_proof, ABS_STMT + "{\n  y := x;\n}\n"]
    server = dafny_verifier()
    with DafnyVerifier(backend="cli", audit="never") as cli:
        for program in programs:
            a, b = server.check(ABS, program), cli.check(ABS, program)
            assert (a.verdict, a.error_category) == (b.verdict, b.error_category), program
            assert b.backend in ("cli", "precheck")


def test_server_results_are_not_reused_between_programs() -> None:
    """/verifySnapshots:0: a cached result for an unchanged body must not survive a changed dependency."""
    verifier = dafny_verifier()
    task = dtask("cache", "method M()\n  ensures F() == 1\n", context="function F(): int\n{\n  1\n}\n")
    good = "function F(): int\n{\n  1\n}\nmethod M()\n  ensures F() == 1\n{\n}\n"
    assert verifier.check(task, good).verdict is Verdict.OK
    other = dtask("cache2", "method M()\n  ensures F() == 1\n", context="function F(): int\n{\n  2\n}\n")
    assert verifier.check(other, good.replace("{\n  1\n}", "{\n  2\n}")).verdict is Verdict.FAIL


def test_broken_task_is_a_task_error_not_a_verdict() -> None:
    from proofgym.envs.errors import TaskFormatError

    broken = dtask("broken", "method M()\n  ensures UnknownFn() == 1\n")
    with pytest.raises(TaskFormatError, match="do not resolve"):
        dafny_verifier().check(broken, "method M()\n{\n}\n")


def test_garbage_submissions_are_error_verdicts() -> None:
    verifier = dafny_verifier()
    # An invalid submission is SYNTAX in every system; text that Dafny's lexer refuses is Dafny's PARSE_ERROR.
    for garbage, category in (("", ErrorCategory.SYNTAX), ("   ", ErrorCategory.SYNTAX),
                              ("\x00binary", ErrorCategory.SYNTAX),
                              ('method M() { var s := "unterminated', ErrorCategory.PARSE_ERROR)):
        result = verifier.check(ABS, garbage)
        assert result.verdict is Verdict.ERROR and result.error_category is category


def _write(tmp_path: Path, task, program: str) -> tuple[Path, Path]:
    (tmp_path / "task.json").write_text(task.to_json(), encoding="utf-8")
    (tmp_path / "prog.dfy").write_text(program, encoding="utf-8")
    return tmp_path / "task.json", tmp_path / "prog.dfy"


def test_proofgym_check_json_tells_cheats_and_honest_programs_apart(tmp_path: Path) -> None:
    """What the held-out acceptance runs: ``proofgym check task.json --proof prog.dfy --json``."""
    cases = [(SUM_IMPL, "OK"), (SUM_IMPL.replace("invariant s == Sum(a[..i])", "invariant true"), "FAIL"),
             (SUM_IMPL.replace("  s := 0;\n", "  s := 0;\n  assume false;\n"), "CHEATING"),
             (SUM_IMPL.replace("ensures s == Sum(a[..])", "ensures true"), "CHEATING")]
    from proofgym.envs.tasks.dafny_nl import build_tasks

    suite_sum = next(t for t in build_tasks() if t.id == "dafny.nl.array_sum")
    for program, verdict in cases:
        task_file, prog_file = _write(tmp_path, suite_sum, suite_sum.context + "\n" + program)
        done = subprocess.run([sys.executable, "-m", "proofgym.cli", "check", str(task_file), "--proof",
                               str(prog_file), "--json"], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        row = json.loads(done.stdout)
        assert row["verdict"] == verdict and row["task_id"] == "dafny.nl.array_sum", row
    assert SUM.statement == suite_sum.statement


def test_proofgym_check_reference_in_process(tmp_path: Path, capsys) -> None:
    from proofgym.cli import main

    task_file, _ = _write(tmp_path, ABS, ABS.reference_proof)
    assert main(["check", str(task_file), "--reference", "--json", "--audit", "always"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["verdict"] == "OK" and row["audited"] is True and row["prover_version"].startswith("dafny 2.3")


def test_whole_proof_env_with_dafny_tasks() -> None:
    from proofgym.envs.tasks.dafny_nl import build_tasks

    tasks = [t for t in build_tasks() if t.id in ("dafny.nl.abs", "dafny.nl.array_sum")]
    # The env makes its own verifier (lazily, so that check_env can copy it first) with make_verifier("dafny").
    env = gym.make("proofgym/WholeProof-v0", tasks=tasks, max_attempts=2, disable_env_checker=True,
                   verifier_kwargs={"audit": "never"})
    check_env(env.unwrapped, skip_render_check=True)
    obs, info = env.reset(seed=0, options={"task_id": "dafny.nl.array_sum"})
    assert obs["description"] == "Return the sum of the elements of an integer array."
    assert obs["statement"].startswith("method ArraySum") and "function Sum" in obs["context"]
    program = tasks[1].reference_proof.replace("    invariant s == Sum(a[..i])\n", "")
    obs, reward, terminated, truncated, info = env.step(program)
    assert info["verdict"] == "FAIL" and "Error category: spec_gap" in obs["feedback"] and reward == 0
    assert not terminated and not truncated
    obs, reward, terminated, truncated, info = env.step(tasks[1].reference_proof)
    assert info["verdict"] == "OK" and reward == 1 and terminated
    obs, _ = env.reset(options={"task_id": "dafny.nl.abs"})
    _, reward, _, _, info = env.step(b"not text")
    assert info["verdict"] == "ERROR"
    env.close()


def test_equivalence_vr_and_er_are_reported_apart() -> None:
    """A verified program that behaves differently: VR counts it, ER does not."""
    from proofgym.envs.tasks.dafny_nl import build_tasks

    verifier = dafny_verifier()
    tasks = {t.id: t for t in build_tasks()}
    search = tasks["dafny.nl.linear_search"]
    last_index = search.reference_proof.replace(
        "  var i := 0;\n  while i < a.Length\n    invariant 0 <= i <= a.Length\n"
        "    invariant forall k :: 0 <= k < i ==> a[k] != key\n  {\n    if a[i] == key {\n      return i;\n    }\n"
        "    i := i + 1;\n  }\n",
        "  var i := a.Length;\n  while i > 0\n    invariant 0 <= i <= a.Length\n"
        "    invariant forall k :: i <= k < a.Length ==> a[k] != key\n  {\n    if a[i - 1] == key {\n"
        "      return i - 1;\n    }\n    i := i - 1;\n  }\n")
    assert last_index != search.reference_proof
    assert verifier.check(search, last_index).verdict is Verdict.OK  # VR: verified
    assert not verifier.check_equivalence(search, last_index).equivalent  # ER: not equivalent
    total = tasks["dafny.nl.all_positive"]
    early_exit = total.reference_proof.replace("    if a[i] <= 0 {\n      return false;\n    }\n    i := i + 1;",
                                               "    if a[i] <= 0 {\n      b := false;\n      return;\n    }\n"
                                               "    i := i + 1;")
    assert early_exit != total.reference_proof
    eq = verifier.check_equivalence(total, early_exit)
    assert eq.status == "equivalent" and "Equiv_AllPositive" in eq.program
    lemma = tasks["dafny.nl.sum_to_lemma"]
    assert verifier.check_equivalence(lemma, lemma.reference_proof).status == "equivalent"  # proof irrelevance
    fn = tasks["dafny.nl.max_function"]
    swapped = fn.reference_proof.replace("if a >= b then a else b", "if b > a then b else a")
    eq = verifier.check_equivalence(fn, swapped)
    assert eq.status == "equivalent" and "ensures PG_Cand.MaxF(a, b) == PG_Ref.MaxF(a, b)" in eq.program
    assert verifier.check_equivalence(search, search.reference_proof.replace("return i;", "return -1;")).status \
        == "unverified"


@pytest.mark.prover
@requires_dafny
def test_a_server_that_dies_once_under_the_symbols_request_costs_a_retry_not_a_verdict(monkeypatch):
    """Fairness: the warm server dying under the declarations request (its own CPU limit over its life, seen
    under xdist load) made an honest program ERROR ("does not resolve"); a fresh server now answers, and a
    deadline there is TIMEOUT."""
    from proofgym.envs.verifiers.sandbox.warm import DeadlinePassed, ProcessDied

    verifier = dafny_verifier()
    task, honest = ABS, ABS.reference_proof
    assert verifier.check(task, honest).verdict is Verdict.OK  # the task's own anchor is read (and kept) first
    failures = fail_symbols_requests(verifier, monkeypatch)
    failures[:] = [ProcessDied]
    assert verifier.check(task, honest).verdict is Verdict.OK
    failures[:] = [DeadlinePassed]
    result = verifier.check(task, honest)
    assert result.verdict is Verdict.TIMEOUT and result.error_category is ErrorCategory.TIMEOUT, result
    failures[:] = [ProcessDied, ProcessDied]  # it dies again on a fresh server: the program is not read
    assert verifier.check(task, honest).verdict is Verdict.ERROR


_UNCLOSED = """
import sys
from proofgym.envs.types import Task
from proofgym.envs.verifiers.base import make_verifier
task = Task(id="unclosed", system="dafny", context="", statement=sys.argv[1], reference_proof="", timeout_s=60)
verifier = make_verifier("dafny")  # never closed, no `with`: what a quick script does
print(verifier.check(task, sys.argv[2]).verdict.value)
print(verifier._root)
"""


def test_a_script_that_never_closes_its_verifier_exits_cleanly_and_leaves_no_temp_dir() -> None:
    """It aborted at exit (rc 134, "Fatal Python error: _enter_buffered_busy"): ``__del__`` closed the verifier during
    finalisation and waited on the server's reader thread, frozen holding its pipe's lock. Open verifiers are now
    closed at exit, while threads still run."""
    done = subprocess.run([sys.executable, "-c", _UNCLOSED, ABS.statement, ABS_STMT + ABS_BODY], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0 and "Fatal Python error" not in done.stderr, done.stderr[-2000:]
    verdict, root = done.stdout.split()
    assert verdict == "OK"
    assert not Path(root).exists()
