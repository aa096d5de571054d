"""HOL Light's start-up is never silent in a log, and a server that dies at start-up says so.

A real base takes minutes to load, so these tests stand a shell script in for the OCaml toplevel
(outside bubblewrap): it prints one of boot.ml's progress lines, waits, and exits. What is tested is
the Python side: the heartbeat while waiting for the ready frame, and the error when the process ends.
"""

from __future__ import annotations

import shutil
import threading

import pytest

from proofgym.envs.errors import VerifierCrashed
from proofgym.envs.types import Task
from proofgym.envs.verifiers.hol_light import BaseContext, HolLightConfig, HolLightVerifier

pytestmark = pytest.mark.skipif(shutil.which("ocamlc") is None or shutil.which("ocamlmklib") is None,
                                reason="the HOL Light server's C stubs need ocamlc (apt-get install hol-light)")


def _fake_hol(tmp_path):
    hol_dir = tmp_path / "hol"
    hol_dir.mkdir()
    (hol_dir / "hol.ml").write_text("(* a stand-in *)\n")
    gate = tmp_path / "gate"
    toplevel = tmp_path / "toplevel.sh"
    # Waits for the test to open the gate (no timing assumption), then dies as a broken start-up would.
    toplevel.write_text("#!/bin/sh\necho '[proofgym] loading hol.ml (0 s)' >&2\n"
                        f"while [ ! -e {gate} ]; do sleep 0.05; done\necho 'Fatal error: exception Stack_overflow' >&2\n"
                        "exit 3\n")
    toplevel.chmod(0o755)
    return hol_dir, toplevel, gate


def test_loading_says_every_heartbeat_what_it_is_doing_and_a_death_says_it_died(tmp_path, capsys):
    hol_dir, toplevel, gate = _fake_hol(tmp_path)
    cfg = HolLightConfig(hol_dir=str(hol_dir), toplevel=str(toplevel), use_bwrap=False, progress=None,
                         heartbeat_s=0.05, build_dir=str(tmp_path / "build"),
                         bases=(BaseContext(startup_timeout_s=600),))
    task = Task(id="hb", system="hol_light", context="", statement="`T`", reference_proof="ALL_TAC",
                category="P1", timeout_s=10)
    with HolLightVerifier(cfg) as verifier:
        seen = threading.Event()

        def open_gate_after_a_heartbeat() -> None:
            while not seen.is_set():
                if "so far" in capsys.readouterr().err:
                    seen.set()
            gate.write_text("go")

        opener = threading.Thread(target=open_gate_after_a_heartbeat, daemon=True)
        opener.start()
        with pytest.raises(VerifierCrashed) as info:
            verifier.check(task, "ALL_TAC")
        opener.join(timeout=60)
    assert seen.is_set()  # stderr is not a terminal here, and a heartbeat still came
    message = str(info.value)
    assert "died during start-up" in message and "exit status 3" in message
    assert "Stack_overflow" in message  # the tail of its output
    assert "did not become ready" not in message
