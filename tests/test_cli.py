"""The ``proofgym`` command: verdicts, exit codes, one-line errors, resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from proofgym.training.evaluate import read_results
from tests.conftest import requires_coq

TASK = {"id": "cli.plus0", "system": "coq", "context": "", "statement": "Lemma plus0 (n : nat) : n + 0 = n.",
        "reference_proof": "Proof. induction n; simpl; congruence. Qed.", "category": "P1", "timeout_s": 20}


def run(*args: str, stdin: str | None = None, env: dict | None = None, timeout: float = 180):
    return subprocess.run([sys.executable, "-m", "proofgym.cli", *args], input=stdin, capture_output=True,
                          text=True, timeout=timeout, env=env)


@pytest.fixture
def task_file(tmp_path: Path) -> Path:
    path = tmp_path / "task.json"
    path.write_text(json.dumps(TASK))
    return path


def write(tmp_path: Path, name: str, data: str | bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return path


def test_help_teaches():
    out = run("--help").stdout
    for word in ("check", "eval", "build", "doctor"):
        assert word in out
    check_help = run("check", "--help").stdout
    assert "examples:" in check_help and "--json" in check_help


@pytest.mark.prover
@requires_coq
@pytest.mark.parametrize("proof, verdict", [
    ("Proof. induction n; simpl; congruence. Qed.", "OK"),
    ("Proof. Admitted.", "CHEATING"),
    ("Proof. reflexivity. Qed.", "FAIL"),
    ("Proof. induction n; simpl; congruence Qed.", "ERROR"),
])
def test_check_json_verdicts(tmp_path, task_file, proof, verdict):
    proc = run("check", str(task_file), "--proof", str(write(tmp_path, "p.v", proof)), "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["verdict"] == verdict and isinstance(out["reasons"], list)
    if verdict == "CHEATING":
        assert out["reasons"]


@pytest.mark.prover
@requires_coq
def test_check_human_output(tmp_path, task_file):
    proc = run("check", str(task_file), "--proof", str(write(tmp_path, "p.v", "Proof. Admitted. Qed.")))
    assert proc.returncode == 0 and "CHEATING" in proc.stdout and "reason:" in proc.stdout


@pytest.mark.parametrize("name, content, message", [
    ("bad.json", "{not json", "invalid JSON"),
    ("keys.json", json.dumps({"id": "x", "system": "coq"}), "missing required key"),
    ("sys.json", json.dumps({**TASK, "system": "lean4"}), "unknown system"),
])
def test_bad_task_files_get_one_line_errors(tmp_path, name, content, message):
    proof = write(tmp_path, "p.v", "Proof. auto. Qed.")
    proc = run("check", str(write(tmp_path, name, content)), "--proof", str(proof))
    assert proc.returncode == 2
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("content, message", [
    ("", "empty"),
    (b"\x00\x01\x02binary", "binary"),
    ("(* big *)" + "x" * (10 * 1024 * 1024), "limit"),
])
def test_bad_proofs_get_one_line_errors(tmp_path, task_file, content, message):
    proc = run("check", str(task_file), "--proof", str(write(tmp_path, "p.v", content)))
    assert proc.returncode == 2, proc.stdout
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_missing_prover_is_a_clear_error(tmp_path, task_file):
    env = {**os.environ, "PATH": str(tmp_path)}  # no coqc anywhere
    proc = run("check", str(task_file), "--proof", str(write(tmp_path, "p.v", "Proof. auto. Qed.")), env=env)
    assert proc.returncode == 3
    assert "apt-get install coq" in proc.stderr and "Traceback" not in proc.stderr


def test_doctor_lists_provers():
    proc = run("doctor")
    assert proc.returncode == 0 and "coqc" in proc.stdout and "dafny" in proc.stdout


def test_eval_refuses_unwritable_results_dir(tiny_suite, tmp_path):
    blocker = write(tmp_path, "file", "x")
    proc = run("eval", "--suite", str(tiny_suite), "--out", str(blocker / "sub" / "r.jsonl"))
    assert proc.returncode == 2 and "cannot create results dir" in proc.stderr


@pytest.mark.prover
@requires_coq
def test_eval_killed_and_resumed_gives_same_totals(tiny_suite, tmp_path):
    full = tmp_path / "full.jsonl"
    proc = run("eval", "--suite", str(tiny_suite), "--k", "2", "--workers", "2", "--out", str(full), "--json")
    assert proc.returncode == 0, proc.stderr
    expected = json.loads(proc.stdout)
    assert expected["n_results"] == 12
    assert expected["per_category"]["all"]["n"] == 6
    assert expected["verdicts"] == {"OK": 10, "FAIL": 2}  # tiny.wrong_ref's reference proof is wrong

    part = tmp_path / "part.jsonl"
    child = subprocess.Popen([sys.executable, "-m", "proofgym.cli", "eval", "--suite", str(tiny_suite), "--k", "2",
                              "--workers", "1", "--out", str(part)], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(read_results(part)) < 3:
        time.sleep(0.05)
    os.killpg(child.pid, signal.SIGKILL)
    child.wait()
    written = len(read_results(part))
    assert 3 <= written < 12, "the run should have been killed part-way"
    with part.open("a") as fh:
        fh.write('{"task_id": "tiny.lia", "sam')  # a torn line, as a kill mid-write leaves
    proc = run("eval", "--suite", str(tiny_suite), "--k", "2", "--workers", "2", "--out", str(part), "--json")
    assert proc.returncode == 0, proc.stderr
    resumed = json.loads(proc.stdout)
    for key in ("n_results", "verdicts", "per_category"):
        assert resumed[key] == expected[key]
    ids = [(r["task_id"], r["sample"]) for r in read_results(part)]
    assert len(ids) == len(set(ids)) == 12


def test_check_on_a_running_verifier_service(tmp_path, task_file):
    """``--server URL``: the verdict comes from the service's warm pool (here fake verifiers that say their pid)."""
    from proofgym.envs.verifiers.pool import LocalVerifierPool
    from proofgym.envs.verifiers.service import ServiceConfig, VerifierService
    from tests.test_pool import FakeVerifier

    with LocalVerifierPool(1, verifier_factory=FakeVerifier) as pool, \
            VerifierService(pool, ServiceConfig(port=0)) as service:
        worker = pool.worker_pids()[0]
        verdicts = {}
        for proof in ("ok", "cheat", "fail"):
            proc = run("check", str(task_file), "--proof", str(write(tmp_path, "p.v", proof)), "--json",
                       "--server", service.url)
            assert proc.returncode == 0, proc.stderr
            out = json.loads(proc.stdout)
            verdicts[proof] = out["verdict"]
            assert out["messages"][0] == str(worker), "checked by the service's worker, not a local prover"
        assert verdicts == {"ok": "OK", "cheat": "CHEATING", "fail": "FAIL"}
        broken = run("check", str(task_file), "--proof", str(write(tmp_path, "p.v", "raise")),
                     env={**os.environ, "PROOFGYM_VERIFIER_URL": service.url})
        assert broken.returncode != 0 and "crashed" in broken.stderr and "Traceback" not in broken.stderr
    gone = run("check", str(task_file), "--reference", "--server", "http://127.0.0.1:9")
    assert gone.returncode != 0 and "unreachable" in gone.stderr and "Traceback" not in gone.stderr


def test_version_and_tasks_listing(tiny_suite):
    assert run("--version").stdout.strip().startswith("proofgym ")
    proc = run("tasks", str(tiny_suite), "--category", "P2")
    assert proc.returncode == 0
    assert [line.split("\t")[0] for line in proc.stdout.splitlines()] == ["tiny.app_nil"]
    rows = [json.loads(line) for line in run("tasks", str(tiny_suite), "--json").stdout.splitlines()]
    assert {r["id"] for r in rows} >= {"tiny.add_0_r", "tiny.lia"} and all(r["statement"] for r in rows)


def test_unknown_suite_lists_what_there_is(tmp_path):
    proc = run("tasks", "no-such-suite", env={**os.environ, "PROOFGYM_CACHE": str(tmp_path)})
    assert proc.returncode == 2
    assert "dafny-nl" in proc.stderr and "coq-stdlib" in proc.stderr and "proofgym build" in proc.stderr


def test_a_suite_given_as_the_task_says_to_use_suite_and_task_id(tiny_suite):
    proc = run("check", str(tiny_suite), "--reference")
    assert proc.returncode == 2
    assert "--suite" in proc.stderr and "--task-id" in proc.stderr and "invalid JSON" not in proc.stderr


def test_json_on_bad_input_prints_a_json_error(tmp_path, tiny_suite):
    proc = run("check", "--suite", str(tiny_suite), "--task-id", "tiny.add_0", "--reference", "--json")
    assert proc.returncode == 2
    answer = json.loads(proc.stdout)
    assert answer["exit_code"] == 2 and "tiny.add_0_r" in answer["error"] and "proofgym tasks" in answer["error"]
    proc = run("check", str(write(tmp_path, "bad.json", "{not json")), "--reference", "--json")
    assert proc.returncode == 2 and "invalid JSON" in json.loads(proc.stdout)["error"]


def test_an_oversized_proof_is_not_reported_with_a_wrong_size(tmp_path, task_file):
    big = "x" * (5 * 1024 * 1024)
    for proc in (run("check", str(task_file), "--proof", str(write(tmp_path, "p.v", big))),
                 run("check", str(task_file), "--proof", "-", stdin=big)):
        assert proc.returncode == 2
        assert "more than 262144 bytes" in proc.stderr and "262145" not in proc.stderr


@requires_coq
@pytest.mark.prover
def test_check_a_suite_task_by_id_and_strict_exit_codes(tmp_path, tiny_suite):
    ok = run("check", "--suite", str(tiny_suite), "--task-id", "tiny.lia", "--reference", "--strict", "--json")
    assert ok.returncode == 0 and json.loads(ok.stdout)["verdict"] == "OK"
    admitted = write(tmp_path, "p.v", "Proof. Admitted.")
    lax = run("check", "--suite", str(tiny_suite), "--task-id", "tiny.lia", "--proof", str(admitted))
    strict = run("check", "--suite", str(tiny_suite), "--task-id", "tiny.lia", "--proof", str(admitted), "--strict")
    assert lax.returncode == 0 and "CHEATING" in lax.stdout
    assert strict.returncode == 1 and "CHEATING" in strict.stdout


def test_eval_with_a_missing_prover_says_so_before_the_run(tmp_path, tiny_suite):
    env = {**os.environ, "PATH": str(tmp_path)}  # no coqc anywhere
    proc = run("eval", "--suite", str(tiny_suite), "--agent", "reference", "--out", str(tmp_path / "run"),
               "--no-progress", env=env)
    assert proc.returncode == 3
    assert "apt-get install coq" in proc.stderr and "harness failures" not in proc.stderr
    assert not (tmp_path / "run" / "results.jsonl").exists()  # nothing ran


def test_check_on_a_service_says_it_is_still_waiting(capsys):
    from proofgym.cli.check import _still_waiting

    with _still_waiting("http://127.0.0.1:8000", every_s=0.01):
        for _ in range(6000):  # until the first heartbeat has been written (no timing assumption)
            if "still waiting" in capsys.readouterr().err:
                break
            time.sleep(0.01)
        else:
            pytest.fail("no heartbeat while waiting")
    with _still_waiting("", every_s=0.01):  # a local check: no heartbeat thread at all
        pass


def test_check_of_an_unknown_suite_is_bad_input_with_a_json_answer(tmp_path):
    proc = run("check", "--suite", "coq-stdlb", "--task-id", "x", "--proof", str(write(tmp_path, "p.v", "auto.")),
               "--json")
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    answer = json.loads(proc.stdout)
    assert answer["exit_code"] == 2 and "coq-stdlb" in answer["error"]


def test_a_listing_into_a_closed_pipe_ends_quietly():
    # `proofgym tasks SUITE | head`: the reader went away; a BrokenPipeError traceback helps nobody.
    script = ("import os, sys\nfrom proofgym.cli import main\nr, w = os.pipe()\nos.close(r)\n"
              "os.dup2(w, sys.stdout.fileno())\ncode = main(['tasks', 'dafny-nl', '--json'])\n"
              "sys.stderr.write(f'exit {code}\\n')\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip().endswith("exit 0"), proc.stderr


def test_a_suite_built_into_another_cache_is_named_with_the_variable_to_set(tmp_path, monkeypatch):
    from proofgym.envs.tasks.suites import SuiteNotFound, resolve_suite

    built = tmp_path / "checkout" / ".cache" / "proofgym" / "suites"
    built.mkdir(parents=True)
    (built / "coq-stdlib.jsonl").write_text("")
    monkeypatch.chdir(tmp_path / "checkout")
    monkeypatch.setenv("PROOFGYM_CACHE", str(tmp_path / "elsewhere"))
    with pytest.raises(SuiteNotFound, match=r"a build of it is at .*PROOFGYM_CACHE="):
        resolve_suite("coq-stdlib")
