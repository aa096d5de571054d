"""Evaluation: pass@k against hand-computed values, the summary's metrics, the engine, run dirs, resume, W&B."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from proofgym.agents import Generation, ScriptedAgent
from proofgym.agents.strategies import PlainStrategy
from proofgym.envs.errors import ProofgymError
from proofgym.envs.types import Task
from proofgym.training.evaluate import (
    EvalConfig,
    EvalOptions,
    evaluate,
    failure_type,
    pass_at_k,
    print_summary,
    read_results,
    reported_ks,
    run_eval,
    summarize,
)
from tests.test_eval_fakes import FAKE


def _task(tid: str, cat: str = "P1") -> Task:
    return Task(id=tid, system="coq", context="", statement=f"Lemma {tid.replace('.', '_')} : True.",
                reference_proof="Proof. exact I. Qed.", category=cat)


TASKS = [_task("a", "P1"), _task("b", "P1"), _task("c", "P2"), _task("d", "P2")]


# -- pass@k ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n, c, k, expected", [
    (5, 2, 2, 1 - 3 / 10),          # 1 - C(3,2)/C(5,2)
    (10, 3, 5, 1 - 21 / 252),       # 1 - C(7,5)/C(10,5)
    (4, 1, 1, 0.25),                # pass@1 is the fraction correct
    (4, 0, 3, 0.0),
    (3, 3, 2, 1.0),
    (6, 2, 5, 1.0),                 # n - c < k: every draw of 5 holds a correct one
    (20, 4, 10, 1 - 8008 / 184756),  # C(16,10)/C(20,10)
])
def test_pass_at_k_matches_hand_computed_values(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected)


def test_pass_at_k_needs_enough_samples():
    with pytest.raises(ValueError):
        pass_at_k(2, 1, 3)


def test_reported_ks():
    assert reported_ks(1) == [1]
    assert reported_ks(5) == [1, 2, 3, 4, 5]
    assert reported_ks(100, 32) == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 20, 32, 50, 100]


def test_failure_taxonomy_mapping():
    assert [failure_type(c) for c in ("logic", "undefined", "syntax", "type", "timeout", "cheating", None)] == \
        ["logic", "undefined", "syntax", "other", "other", "other", "other"]


# -- summarize ---------------------------------------------------------------------------------------------
def _attempt(verdict: str, cat: str = "none", reasons=(), **extra) -> dict:
    return {"verdict": verdict, "error_category": cat, "reasons": list(reasons), "wall_s": 0.5, "cpu_s": 0.25,
            "prompt_tokens": 100, "completion_tokens": 10, **extra}


def _row(tid: str, sample: int, *attempts: dict, cat: str = "P1", segment: str = "s1", elapsed: float = 1.0) -> dict:
    return {"task_id": tid, "sample": sample, "category": cat, "verdict": attempts[-1]["verdict"],
            "reasons": attempts[-1]["reasons"], "attempts": list(attempts), "segment": segment, "elapsed_s": elapsed}


def test_summarize_counts_first_attempts_fixes_verdicts_failures_and_cost():
    rows = [
        _row("a", 0, _attempt("FAIL", "logic"), _attempt("OK")),            # fixed in round two
        _row("a", 1, _attempt("OK")),
        _row("b", 0, _attempt("CHEATING", "cheating", ["forbidden: Admitted"]), _attempt("FAIL", "undefined")),
        _row("b", 1, _attempt("ERROR", "syntax"), _attempt("ERROR", "syntax")),
        _row("c", 0, _attempt("FAIL", "undefined"), _attempt("OK"), cat="P2"),
        _row("c", 1, _attempt("FAIL", "logic"), _attempt("FAIL", "logic"), cat="P2", segment="s2", elapsed=4.0),
        _row("c", 1, _attempt("OK"), cat="P2"),                              # a duplicate: never counted
        _row("zzz", 0, _attempt("OK")),                                      # not in the suite
        _row("a", 7, _attempt("OK")),                                        # beyond n
        {"task_id": "d", "sample": 0, "category": "P2", "verdict": "TIMEOUT", "reasons": ["timeout"],
         "error_category": "timeout"},                                       # first-format row, one attempt
    ]
    s = summarize(rows, TASKS, k=2, max_attempts=2)
    assert s.n_results == 7 and s.n_tasks == 4
    assert dict(s.verdicts) == {"OK": 3, "FAIL": 2, "ERROR": 1, "TIMEOUT": 1}  # final attempts
    assert dict(s.attempt_verdicts) == {"FAIL": 5, "OK": 3, "CHEATING": 1, "ERROR": 2, "TIMEOUT": 1}
    # a: first attempts 1 OK of 2; b: 0 of 2; c: 0 of 2 (fixed once); d: incomplete (1 of 2 samples) -> unscored
    all_ = s.per_category["all"]
    assert all_["n"] == 3
    assert all_["pass@1"] == pytest.approx((0.5 + 0 + 0) / 3)
    assert all_["pass@2"] == pytest.approx((1 + 0 + 0) / 3) == all_["acc#2"]
    assert all_["fix@1"] == pytest.approx((1.0 + 0 + 0.5) / 3)
    assert all_["fix#2"] == pytest.approx((1 + 0 + 1) / 3)
    assert s.per_category["P2"] == {"n": 1, "pass@1": 0.0, "pass@2": 0.0, "acc#2": 0.0, "fix@1": 0.5, "fix@2": 1.0,
                                    "fix#2": 1.0}
    assert s.cheat_reasons == {"forbidden": 1}
    # failed first attempts: a0 logic, b0 cheating->other, b1 syntax, c0 undefined, c1 logic, d0 timeout->other
    assert s.failure_taxonomy["all"] == {"failures": 6, "logic": 2, "undefined": 1, "syntax": 1, "other": 2}
    assert s.failure_taxonomy["P2"] == {"failures": 3, "logic": 1, "undefined": 1, "syntax": 0, "other": 1}
    assert s.cost["verifier_calls"] == 12 and s.cost["prompt_tokens"] == 1100
    assert s.cost["verifier_cpu_s"] == pytest.approx(11 * 0.25)
    assert s.cost["run_wall_s"] == pytest.approx(1.0 + 4.0)  # the longest row of each segment
    assert s.cost["solved_tasks"] == 2
    assert s.cost["per_solved_task"]["verifier_calls"] == 6.0
    assert s.rates["cheat_rate"] == pytest.approx(1 / 12)
    metrics = s.metrics()
    assert metrics["proof/pass@1"] == all_["pass@1"] and metrics["category/P2/fix@1"] == 0.5
    assert metrics["verdict/TIMEOUT"] == 1 and metrics["failures/logic"] == 2


def test_replies_cut_at_the_token_limit_get_a_note_when_they_are_half_or_more():
    cut = {"finish_reason": "length"}
    half = [_row("a", 0, _attempt("ERROR", "syntax", **cut), _attempt("OK", finish_reason="stop")),
            _row("b", 0, _attempt("ERROR", "syntax", finish_reason="max_tokens"), _attempt("FAIL", "logic"))]
    (note,) = summarize(half, TASKS, k=1, max_attempts=2).notes
    assert note.startswith("2 of 4 replies stopped at the token limit") and "--max-tokens" in note
    fewer = [_row("a", 0, _attempt("ERROR", "syntax", **cut), _attempt("OK")), _row("b", 0, _attempt("OK"))]
    assert summarize(fewer, TASKS, k=1, max_attempts=2).notes == []


def test_summary_table_shows_fixing_and_notes():
    from rich.console import Console

    s = summarize([_row("a", 0, _attempt("FAIL", "logic"), _attempt("OK"))], TASKS[:1], k=1, max_attempts=2)
    s.notes = ["an upper bound"]
    console = Console(record=True, width=120)
    print_summary(s, console=console)
    text = console.export_text()
    assert "fix@1" in text and "100.0%" in text and "note: an upper bound" in text and "Table 3" in text


# -- the engine with a fake verifier -------------------------------------------------------------------------
SCRIPT = {"a": "```coq\ngood\n```", "b": "cheat", "c": "garbage", "d": "unknown_lemma"}


def test_eval_options_are_checked_once_when_made():
    # A run's options are one frozen value, checked when made: a bad one never starts a pool.
    with pytest.raises(ProofgymError, match="need 1 <= k <= n, got k=2, n=1"):
        EvalOptions(k=2, n=1)
    with pytest.raises(ProofgymError, match="batch_size >= 1"):
        EvalOptions(batch_size=0)  # no batch could start: the run would wait forever
    assert EvalOptions(k=2).samples == 2 and EvalOptions(k=1, n=4).samples == 4


def test_run_eval_counts_verdicts_and_cheats(tmp_path):
    rows = []
    summary = run_eval(TASKS, agent=ScriptedAgent(SCRIPT), out=tmp_path / "r.jsonl",
                       options=EvalOptions(k=1, workers=2, verifier=FAKE, progress=False), on_result=rows.append)
    assert dict(summary.verdicts) == {"OK": 1, "CHEATING": 1, "ERROR": 1, "FAIL": 1}
    assert summary.cheat_reasons == {"forbidden": 1}
    assert summary.failure_taxonomy["all"] == {"failures": 3, "logic": 0, "undefined": 1, "syntax": 1, "other": 1}
    written = read_results(tmp_path / "r.jsonl")
    assert sorted(r["task_id"] for r in written) == ["a", "b", "c", "d"] == sorted(r["task_id"] for r in rows)
    a = next(r for r in written if r["task_id"] == "a")
    assert a["proof"] == "good" and a["attempts"][0]["raw"] == "```coq\ngood\n```"
    assert a["prompt_tokens"] > 0 and a["attempts"][0]["cpu_s"] == 0.02


class FlakyAgent(ScriptedAgent):
    """Fails the requests of listed tasks (as an API would after its retries)."""

    def __init__(self, script, failing):
        super().__init__(script)
        self.failing = set(failing)

    def generate(self, requests):
        gens = super().generate(requests)
        return [Generation("", error="RateLimitError: still 429") if r.task.id in self.failing else g
                for r, g in zip(requests, gens, strict=True)]


def test_agent_and_harness_failures_are_not_scored_and_are_redone(tmp_path):
    out = tmp_path / "r.jsonl"
    script = {**SCRIPT, "c": "crash"}  # the fake verifier raises VerifierError on "crash"
    first = run_eval(TASKS, agent=FlakyAgent(script, {"b"}), out=out,
                     options=EvalOptions(k=1, verifier=FAKE, progress=False))
    assert first.agent_failures == 1 and first.harness_failures == 1
    assert sorted(r["task_id"] for r in read_results(out)) == ["a", "d"]
    assert first.per_category["all"]["n"] == 2  # b and c have no result: not scored as wrong
    again = ScriptedAgent(SCRIPT)
    second = run_eval(TASKS, agent=again, out=out, options=EvalOptions(k=1, verifier=FAKE, progress=False))
    assert sorted(r.task.id for r in again.calls) == ["b", "c"]  # only the missing ones
    assert second.agent_failures == 0 and dict(second.verdicts) == {"OK": 1, "CHEATING": 1, "ERROR": 1, "FAIL": 1}


class Interrupting(ScriptedAgent):
    def __init__(self, script, after):
        super().__init__(script)
        self.after = after

    def generate(self, requests):
        if len(self.calls) >= self.after:
            raise KeyboardInterrupt
        return super().generate(requests)


def test_interrupted_run_resumes_to_identical_totals(tmp_path):
    tasks = [_task(f"t{i}", "P1" if i % 2 else "P2") for i in range(8)]
    script = {f"t{i}": ("good" if i % 3 else "nope") for i in range(8)}
    full = run_eval(tasks, agent=ScriptedAgent(script), out=tmp_path / "full.jsonl",
                    options=EvalOptions(k=2, verifier=FAKE, batch_size=1, progress=False))
    part = tmp_path / "part.jsonl"
    with pytest.raises(KeyboardInterrupt):
        run_eval(tasks, agent=Interrupting(script, after=5), out=part,
                 options=EvalOptions(k=2, verifier=FAKE, batch_size=1, progress=False))
    assert 0 < len(read_results(part)) < 16
    resumed = run_eval(tasks, agent=ScriptedAgent(script), out=part,
                       options=EvalOptions(k=2, verifier=FAKE, progress=False))
    assert resumed.per_category == full.per_category and resumed.verdicts == full.verdicts
    assert resumed.n_results == full.n_results == 16
    assert len({(r["task_id"], r["sample"]) for r in read_results(part)}) == 16


def test_legacy_agents_with_act_still_work(tmp_path):
    class Legacy:
        def act(self, task, sample):
            return "good"

    summary = run_eval(TASKS[:2], agent=Legacy(), out=tmp_path / "r.jsonl",
                       options=EvalOptions(k=1, verifier=FAKE, progress=False))
    assert summary.verdicts == {"OK": 2}


def test_repair_rounds_count_in_fix_not_pass(tmp_path):
    agent = ScriptedAgent({"a": ["nope", "good"], "*": "good"})
    summary = run_eval(TASKS, agent=agent, out=tmp_path / "r.jsonl",
                       options=EvalOptions(k=1, verifier=FAKE, progress=False), strategy=PlainStrategy(attempts=2))
    assert summary.per_category["P1"]["pass@1"] == 0.5 and summary.per_category["P1"]["fix@1"] == 1.0
    repair = next(r for r in agent.calls if r.task.id == "a" and r.attempt == 1)
    assert "goals remain" in repair.messages[-1]["content"]  # the verifier's feedback


# -- run directories, config.json, summary.json, resume --------------------------------------------------------
@pytest.fixture
def suite_file(tmp_path) -> Path:
    path = tmp_path / "mini.jsonl"
    path.write_text("".join(t.to_json() + "\n" for t in TASKS))
    return path


@pytest.fixture
def script_file(tmp_path) -> Path:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(SCRIPT))
    return path


def test_default_run_dir_holds_results_config_and_summary(suite_file, script_file, tmp_path):
    cfg = EvalConfig(suite=str(suite_file), agent="scripted", script=str(script_file), verifier=FAKE,
                     runs_dir=str(tmp_path / "runs"))
    summary, paths = evaluate(cfg)
    assert paths.run_dir.parent == tmp_path / "runs"
    assert paths.run_dir.name.startswith("mini__scripted__k1__")
    stored = json.loads(paths.summary.read_text())
    assert stored["verdicts"] == dict(summary.verdicts) == {"OK": 1, "CHEATING": 1, "ERROR": 1, "FAIL": 1}
    config = json.loads(paths.config.read_text())
    assert config["identity"]["agent"] == "scripted" and len(config["segments"]) == 1
    # --resume finds the same run and has nothing left to do
    again, paths2 = evaluate(EvalConfig(**{**cfg.__dict__, "resume": True}))
    assert paths2.run_dir == paths.run_dir and again.per_category == summary.per_category
    assert len(json.loads(paths.config.read_text())["segments"]) == 2
    assert len(read_results(paths.results)) == 4


def test_a_run_dir_of_another_configuration_is_refused(suite_file, script_file, tmp_path):
    out = tmp_path / "run"
    evaluate(EvalConfig(suite=str(suite_file), agent="scripted", script=str(script_file), verifier=FAKE, out=str(out)))
    with pytest.raises(ProofgymError, match="another configuration.*agent"):
        evaluate(EvalConfig(suite=str(suite_file), agent="reference", verifier=FAKE, out=str(out)))


def test_out_jsonl_puts_summary_next_to_it(suite_file, script_file, tmp_path):
    out = tmp_path / "somewhere" / "results_a.jsonl"
    _, paths = evaluate(EvalConfig(suite=str(suite_file), agent="scripted", script=str(script_file), verifier=FAKE,
                                   out=str(out)))
    assert paths.results == out and (out.parent / "summary.json").is_file()


def run_cli(*args: str, env: dict | None = None, timeout: float = 120):
    return subprocess.run([sys.executable, "-m", "proofgym.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def test_cli_json_is_the_summary_and_matches_summary_json(suite_file, script_file, tmp_path):
    out = tmp_path / "run"
    proc = run_cli("eval", "--suite", str(suite_file), "--agent", "scripted", "--script", str(script_file),
                   "--verifier", FAKE, "--out", str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    printed = json.loads(proc.stdout)  # stdout is exactly one JSON document
    stored = json.loads((out / "summary.json").read_text())
    for key in ("verdicts", "per_category", "cheat_reasons", "n_results", "failure_taxonomy", "k"):
        assert printed[key] == stored[key]
    assert printed["verdicts"] == {"OK": 1, "CHEATING": 1, "ERROR": 1, "FAIL": 1}
    assert printed["summary_path"] == str(out / "summary.json")


def test_cli_model_errors_exit_4_with_one_line(suite_file, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    proc = run_cli("eval", "--suite", str(suite_file), "--agent", "openai", "--model", "gpt-x",
                   "--out", str(tmp_path / "r"), env=env)
    assert proc.returncode == 4 and "OPENAI_API_KEY" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    proc = run_cli("eval", "--suite", str(suite_file), "--agent", "nope", "--out", str(tmp_path / "r2"))
    assert proc.returncode == 2 and "unknown agent 'nope'" in proc.stderr


def test_every_eval_config_file_loads():
    from proofgym.agents.strategies import make_strategy
    from proofgym.training.evaluate import load_config_file

    files = sorted((Path(__file__).parent.parent / "configs" / "eval").glob("*.yaml"))
    assert len(files) >= 5
    for path in files:
        cfg = EvalConfig.from_mapping(load_config_file(path), source=str(path))
        make_strategy(cfg.strategy, **cfg.strategy_options)


# -- W&B ---------------------------------------------------------------------------------------------------------
def test_wandb_offline_run_holds_the_metrics(suite_file, script_file, tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    from proofgym.training.logging import read_offline_run

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    cfg = EvalConfig(suite=str(suite_file), agent="scripted", script=str(script_file), verifier=FAKE,
                     out=str(tmp_path / "run"), wandb=True, wandb_project="proofgym-test")
    summary, paths = evaluate(cfg)
    wandb_dir = Path(json.loads(paths.config.read_text())["wandb_dir"])
    assert wandb_dir.parent == paths.run_dir / "wandb" and wandb_dir.name.startswith("offline-run-")
    logged = read_offline_run(wandb_dir)
    assert logged["finished"]
    assert logged["summary"]["proof/pass@1"] == summary.per_category["all"]["pass@1"] == 0.25
    assert logged["summary"]["verdict/CHEATING"] == 1 and logged["summary"]["verdict/OK"] == 1
    assert logged["config"]["identity"]["agent"] == "scripted"
    done = [h["eval/done"] for h in logged["history"] if "eval/done" in h]
    assert done == [1, 2, 3, 4]
    assert any("attempts.sha256" in h or any(k.startswith("attempts") for k in h) for h in logged["history"])
    table = next(iter((wandb_dir / "files" / "media" / "table").glob("attempts_*.table.json")))
    data = json.loads(table.read_text())
    assert data["columns"][:6] == ["task_id", "category", "sample", "attempt", "proof", "verdict"]
    assert sorted(row[5] for row in data["data"]) == ["CHEATING", "ERROR", "FAIL", "OK"]


def test_cli_config_file_and_set_options(suite_file, script_file, tmp_path):
    config = tmp_path / "eval.yaml"
    config.write_text(f"suite: {suite_file}\nagent: scripted\nscript: {script_file}\nstrategy: selene\n"
                      "strategy_options:\n  n_demos: 1\n  fix: error\n")
    out = tmp_path / "run"
    proc = run_cli("eval", "--config", str(config), "--set", "fix=retry", "--set", "fixing_demos=false",
                   "--verifier", FAKE, "--out", str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    stored = json.loads((out / "config.json").read_text())
    assert stored["identity"]["strategy"]["fix"] == "retry" and stored["identity"]["strategy"]["n_demos"] == 1
    assert stored["config"]["strategy_options"] == {"n_demos": 1, "fix": "retry", "fixing_demos": False}
    assert sum(len(ids) for ids in stored["demonstrations"].values()) >= 1
    assert json.loads(proc.stdout)["max_attempts"] == 2
    bad = run_cli("eval", "--config", str(config), "--set", "colour=red", "--out", str(tmp_path / "r2"))
    assert bad.returncode == 2 and "bad option for strategy 'selene'" in bad.stderr


def test_a_limit_rerun_into_a_run_dir_keeps_the_summary_of_every_task_there(suite_file, script_file, tmp_path):
    out = tmp_path / "run"
    full, _ = evaluate(EvalConfig(suite=str(suite_file), agent="scripted", script=str(script_file), verifier=FAKE,
                                  out=str(out)))
    again, paths = evaluate(EvalConfig(suite=str(suite_file), agent="scripted", script=str(script_file),
                                       verifier=FAKE, out=str(out), limit=1))
    assert again.n_tasks == full.n_tasks == len(TASKS) and again.n_results == full.n_results
    assert json.loads(paths.summary.read_text())["n_tasks"] == len(TASKS)  # not rewritten to the 1 of --limit
    assert again.per_category == full.per_category
