"""The OpenEnv environment (``training/integrations/openenv_env.py``) served by OpenEnv's own ``create_app``.

A uvicorn server on 127.0.0.1 runs the app; OpenEnv's generic WebSocket client (``GenericEnvClient``,
what a user of any OpenEnv environment has) plays scripted episodes against the real Coq verifier on
the packaged ``coq-tiny`` suite, and OpenEnv's own runtime validator checks the server.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("openenv.core", reason="pip install 'proofgym[openenv]'")
uvicorn = pytest.importorskip("uvicorn")

from openenv.core import GenericEnvClient  # noqa: E402

from proofgym.envs.verifiers.pool.inprocess import InProcessPool  # noqa: E402
from proofgym.training.integrations.core import ProofScorer  # noqa: E402
from proofgym.training.integrations.openenv_env import ProofAction, ProofgymEnvironment, make_app  # noqa: E402
from tests.conftest import requires_coq  # noqa: E402
from tests.integrations_common import CHEAT_REPLY, FAIL_REPLY, OK_REPLY, TASK, FakeBrokenVerifier  # noqa: E402

PACKAGE = Path(__file__).resolve().parent.parent / "examples" / "integrations" / "openenv"


class _Server(uvicorn.Server):
    """uvicorn on a free loopback port that says when it listens (an event, not a sleep)."""

    def __init__(self, app: Any) -> None:
        super().__init__(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", ws="websockets-sansio"))
        self.listening = threading.Event()
        self.port = 0

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        self.port = self.servers[0].sockets[0].getsockname()[1]
        self.listening.set()


@contextmanager
def serving(app: Any) -> Iterator[str]:
    server = _Server(app)
    thread = threading.Thread(target=server.run, name="openenv-test-server", daemon=True)
    thread.start()
    try:
        assert server.listening.wait(30), "the OpenEnv server did not start"
        yield f"http://127.0.0.1:{server.port}"
    finally:
        server.should_exit = True
        thread.join(30)


@requires_coq
@pytest.mark.prover
def test_openenvs_client_gets_ok_fail_cheating_and_a_repair_from_real_coq(coq_verifier):
    with InProcessPool({"coq": coq_verifier}) as pool, serving(make_app("coq-tiny", pool=pool)) as url, \
            GenericEnvClient(base_url=url).sync() as env:
        first = env.reset(task_id=TASK)
        assert first.reward is None and not first.done
        assert "lt_le" in first.observation["prompt"][-1]["content"]

        failed = env.step({"proof": FAIL_REPLY})  # a wrong proof: FAIL, and the feedback turn to repair with
        assert (failed.reward, failed.done, failed.observation["verdict"]) == (0.0, False, "FAIL")
        assert failed.observation["prompt"][-1]["role"] == "user" and failed.observation["feedback"]
        repaired = env.step({"proof": OK_REPLY})
        assert (repaired.reward, repaired.done, repaired.observation["verdict"]) == (1.0, True, "OK")
        assert env.state()["verdicts"] == ["FAIL", "OK"]

        env.reset(task_id=TASK)
        cheat = env.step({"proof": CHEAT_REPLY})
        assert (cheat.reward, cheat.done, cheat.observation["verdict"]) == (-1.0, True, "CHEATING")


@requires_coq
@pytest.mark.prover
def test_the_pages_example_runs_against_a_served_app(coq_verifier, capsys):
    from tests.test_integrations_docs import doc_example

    with InProcessPool({"coq": coq_verifier}) as pool, serving(make_app("coq-tiny", pool=pool)) as url:
        code = doc_example("openenv").replace("http://127.0.0.1:8000", url)
        exec(compile(code, "docs/integrations/openenv.md", "exec"), {})  # noqa: S102 - the page's own example
    assert capsys.readouterr().out.splitlines()[-2:] == ["FAIL 0.0 False", "OK 1.0 True"]


@requires_coq
@pytest.mark.prover
def test_a_probe_with_openenvs_generic_client_gets_proofgym_checks_verdicts(coq_verifier, tmp_path, capsys):
    """The issue's acceptance probe: the generic client's verdicts are the ones ``proofgym check`` gives."""
    import json

    from proofgym.cli import main

    cli_verdicts = []
    for reply in (OK_REPLY, FAIL_REPLY, CHEAT_REPLY):
        proof = tmp_path / "proof.v"
        proof.write_text(reply.split("\n", 1)[1].rsplit("\n```", 1)[0])  # the fenced proof, as a user would save it
        main(["check", "--suite", "coq-tiny", "--task-id", TASK, "--proof", str(proof), "--json"])
        cli_verdicts.append(json.loads(capsys.readouterr().out)["verdict"])
    with InProcessPool({"coq": coq_verifier}) as pool, serving(make_app("coq-tiny", pool=pool)) as url:
        env_verdicts = []
        for reply in (OK_REPLY, FAIL_REPLY, CHEAT_REPLY):
            with GenericEnvClient(base_url=url).sync() as env:
                env.reset(task_id=TASK)
                env_verdicts.append(env.step({"proof": reply}).observation["verdict"])
    assert env_verdicts == cli_verdicts == ["OK", "FAIL", "CHEATING"]


@pytest.mark.prover
def test_a_dafny_repair_episode_over_the_websocket():
    """The same env on another prover: Dafny (dafny-nl, packaged), a failed body repaired, then a cheat."""
    from tests.test_dafny_common import dafny_verifier

    signature = "method Abs(x: int) returns (y: int)\n  ensures y >= 0\n  ensures y == x || y == -x\n"
    wrong = f"```dafny\n{signature}{{\n  y := x;\n}}\n```"
    right = f"```dafny\n{signature}{{\n  if x < 0 {{\n    y := -x;\n  }} else {{\n    y := x;\n  }}\n}}\n```"
    cheat = f"```dafny\n{signature}{{\n  assume false;\n}}\n```"
    with InProcessPool({"dafny": dafny_verifier()}) as pool, serving(make_app("dafny-nl", pool=pool)) as url, \
            GenericEnvClient(base_url=url).sync() as env:
        env.reset(task_id="dafny.nl.abs")
        steps = [env.step({"proof": reply}) for reply in (wrong, right)]
        env.reset(task_id="dafny.nl.abs")
        steps.append(env.step({"proof": cheat}))
    assert [(s.observation["verdict"], s.reward, s.done) for s in steps] == [
        ("FAIL", 0.0, False), ("OK", 1.0, True), ("CHEATING", -1.0, True)]


def test_a_harness_failure_is_no_reward_over_the_websocket():
    with InProcessPool({"coq": FakeBrokenVerifier()}) as pool, serving(make_app("coq-tiny", pool=pool)) as url, \
            GenericEnvClient(base_url=url).sync() as env:
        env.reset(task_id=TASK)
        broken = env.step({"proof": OK_REPLY})
        assert (broken.reward, broken.done, broken.observation["verdict"]) == (None, True, None)
        assert broken.observation["harness_error"] == "verifier: VerifierCrashed: fake: coqidetop died"


def test_openenvs_runtime_validator_passes_the_server():
    from openenv.cli._validation import validate_running_environment

    with InProcessPool({"coq": FakeBrokenVerifier()}) as pool, serving(make_app("coq-tiny", pool=pool)) as url:
        report = validate_running_environment(url, timeout_s=30)
    assert report["passed"], [c for c in report["criteria"] if not c["passed"]]


def test_reset_draws_a_task_from_the_seed_and_step_before_reset_is_an_observation():
    with InProcessPool({"coq": FakeBrokenVerifier()}) as pool:
        scorer = ProofScorer("coq-tiny", pool=pool)
        env = ProofgymEnvironment(scorer)
        lost = env.step(ProofAction(proof=OK_REPLY))
        assert lost.done and lost.reward is None and "reset()" in lost.harness_error
        drawn = {env.reset(seed=3).task_id for _ in range(2)}
        assert len(drawn) == 1  # the same seed draws the same task


def test_the_hub_package_passes_openenvs_local_validator():
    from openenv.cli._validation import validate_multi_mode_deployment

    assert validate_multi_mode_deployment(PACKAGE) == (True, [])


def test_the_hub_packages_lock_file_is_current(tmp_path):
    """``uv lock --check --offline``: uv.lock still resolves both pyprojects (this package's and proofgym's).

    Offline and with an empty cache, uv compares the lock with the requirements and sends nothing anywhere;
    a changed requirement fails here until someone runs ``uv lock`` in the package (that needs the index).
    """
    import shutil
    import subprocess
    import sys

    uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not installed: pip install 'proofgym[dev]'")
    proc = subprocess.run([uv, "lock", "--check", "--offline", "--cache-dir", str(tmp_path)], cwd=PACKAGE,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"uv.lock is stale: run `uv lock` in {PACKAGE}\n{proc.stderr}"


def test_the_hub_packages_server_serves_the_suite_it_is_told(monkeypatch):
    import importlib.util

    from openenv.cli._validation import validate_running_environment

    monkeypatch.setenv("PROOFGYM_SUITE", "coq-tiny")
    spec = importlib.util.spec_from_file_location("proofgym_openenv_server_app", PACKAGE / "server" / "app.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    try:
        assert callable(module.main)
        with serving(module.app) as url:
            report = validate_running_environment(url, timeout_s=30)
            with GenericEnvClient(base_url=url).sync() as env:
                assert env.reset(task_id=TASK).observation["task_id"] == TASK
        assert report["passed"], [c for c in report["criteria"] if not c["passed"]]
    finally:
        module.app.state.proofgym.close()  # no check ran, so no worker was started: close() is still the contract


def tactic_app(scorer: ProofScorer, **guard: Any) -> Any:
    """Tactic-v0 on OpenEnv's own ``create_app`` behind the request guard, as docs/integrations/openenv.md serves it."""
    from proofgym.training.integrations.openenv_tactic import make_tactic_app

    return make_tactic_app(scorer, max_concurrent_envs=2, **guard)


def test_the_tactic_app_is_behind_the_request_guard():
    """A page on another origin (or a DNS-rebinding Host) cannot open a tactic session; the token is asked for."""
    import http.client

    token = "t" * 24
    with ProofScorer("coq-tiny", tactic_verifier=FakeBrokenVerifier()) as scorer, \
            serving(tactic_app(scorer, token=token)) as url:
        port = int(url.rsplit(":", 1)[1])

        def status(headers: dict[str, str]) -> int:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            try:
                conn.request("POST", "/reset", body=b"{}", headers={"Content-Type": "application/json", **headers})
                return conn.getresponse().status
            finally:
                conn.close()

        auth = {"Authorization": f"Bearer {token}"}
        assert status({**auth, "Origin": "http://attacker.example"}) == 403
        assert status({**auth, "Host": "attacker.example"}) == 421
        assert status({}) == 401
        assert status(auth) == 200


@requires_coq
@pytest.mark.prover
def test_openenvs_client_proves_a_task_tactic_by_tactic_with_real_coq(coq_verifier):
    with ProofScorer("coq-tiny", tactic_verifier=coq_verifier) as scorer, serving(tactic_app(scorer)) as url, \
            GenericEnvClient(base_url=url).sync() as env:
        first = env.reset(task_id=TASK)
        assert (first.reward, first.done, first.observation["state_id"]) == (None, False, 0)
        assert "a < b -> a <= b" in first.observation["goals"]
        steps = [env.step({"tactic": t}) for t in ("reflexivity.", "intros.", "Admitted.")]
        done = env.step({"tactic": "lia.", "state_id": steps[1].observation["state_id"]})  # named state
        state = env.state()
    assert [(s.observation["verdict"], s.reward, s.done) for s in steps] == [
        ("FAIL", 0.0, False), (None, 0.0, False), ("CHEATING", -1.0, False)]
    assert "Unable to unify" in steps[0].observation["last_error"]  # the prover's error, the state unchanged
    assert steps[0].observation["state_id"] == 0 and "H : a < b" in steps[1].observation["goals"]
    assert (done.observation["verdict"], done.reward, done.done) == ("OK", 1.0, True)  # the whole proof re-checked
    assert state["episode_return"] == 0.0  # the cheat's -1 and the proof's 1


def test_a_broken_prover_in_a_tactic_session_is_no_reward_over_the_websocket():
    with ProofScorer("coq-tiny", tactic_verifier=FakeBrokenVerifier()) as scorer, \
            serving(tactic_app(scorer)) as url, GenericEnvClient(base_url=url).sync() as env:
        broken = env.reset(task_id=TASK)
        after = env.step({"tactic": "intros."})
    assert (broken.reward, broken.done) == (None, True)
    assert broken.observation["harness_error"] == "VerifierCrashed: fake: coqidetop died"
    assert (after.reward, after.done) == (None, True)


@requires_coq
@pytest.mark.prover
def test_two_tactic_sessions_on_one_server_keep_their_own_proof_states(coq_verifier):
    with ProofScorer("coq-tiny", tactic_verifier=coq_verifier) as scorer, serving(tactic_app(scorer)) as url, \
            GenericEnvClient(base_url=url).sync() as first, GenericEnvClient(base_url=url).sync() as second:
        first.reset(task_id=TASK)
        moved = first.step({"tactic": "intros."})
        fresh = second.reset(task_id=TASK)  # another WebSocket session: its own episode, from the root
        rejected = second.step({"tactic": "lia"})  # no period: not a sentence, Coq's error, in that session only
        finished = first.step({"tactic": "lia."})
        other = second.step({"tactic": "lia."})
    assert "H : a < b" in moved.observation["goals"] and "H : a < b" not in fresh.observation["goals"]
    assert rejected.observation["last_error"] and not rejected.done
    assert [(s.observation["verdict"], s.reward, s.done) for s in (finished, other)] == [
        ("OK", 1.0, True), ("OK", 1.0, True)]
