"""Sandbox escapes for Coq, both layers: the whitelist rejects them, and the prover processes are contained.

A Coq proof has little I/O of its own: reading, writing, loading code and running programs are all
vernacular (``Load``, ``Redirect``, ``Extraction``, ``Cd``, ``Add LoadPath``, ``Declare ML
Module``...), which the proof whitelist rejects before any prover runs (layer 1). Layer 2 assumes
that layer 1 failed: hostile ``.v`` files that use those commands, and an OCaml plugin loaded with
``Declare ML Module`` (arbitrary native code inside ``coqc``/``coqidetop``, the strongest thing a
submission could get), run under the verifier's *own* :class:`Sandbox` (same limits, same
read-only binds). Each escape is one test: read or write outside the task dir, connect to
127.0.0.1, a fork bomb, a memory bomb, a loop that ignores signals, and filling the temp dir.

Tactics that pass the whitelist and still attack resources (a VM memory bomb, a VM loop) run in the
verifier's warm ``coqidetop`` and come back as verdicts, with the session still usable afterwards.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from proofgym.envs.types import Task, Verdict
from proofgym.envs.verifiers.sandbox import SandboxLimits, bwrap_available
from tests.conftest import have_coq
from tests.test_faults import descendants
from tests.test_sandbox import _Listener, _processes_with

pytestmark = [
    pytest.mark.prover,
    pytest.mark.skipif(not have_coq(), reason="Coq is not installed: run `make setup` (apt-get install coq)"),
    pytest.mark.skipif(not bwrap_available(), reason="bubblewrap missing or unusable: apt-get install bubblewrap"),
]

PLUGIN = "pg_escape"
#: Native code run inside Coq by `Declare ML Module`. What it does is chosen by PG_MODE; it reports on stderr
#: (stdout is coqidetop's protocol channel).
PLUGIN_SOURCE = r"""
let say s = prerr_endline s; flush stderr
let env k = try Sys.getenv k with Not_found -> ""
let () =
  let mode = env "PG_MODE" in
  say ("PG_PLUGIN " ^ mode);
  match mode with
  | "read" ->
    (try let ic = open_in (env "PG_PATH") in say ("PG_READ " ^ input_line ic); close_in ic
     with e -> say ("PG_DENIED " ^ Printexc.to_string e))
  | "write" ->
    (try let oc = open_out (env "PG_PATH") in output_string oc "pwned\n"; close_out oc; say "PG_WROTE"
     with e -> say ("PG_DENIED " ^ Printexc.to_string e))
  | "connect" ->
    (try
       let s = Unix.socket Unix.PF_INET Unix.SOCK_STREAM 0 in
       Unix.connect s (Unix.ADDR_INET (Unix.inet_addr_loopback, int_of_string (env "PG_PORT")));
       say "PG_CONNECTED"; Unix.close s
     with e -> say ("PG_DENIED " ^ Printexc.to_string e))
  | "fork" -> while true do (try ignore (Unix.fork ()) with _ -> ()) done
  | "memory" ->
    let keep = ref [] in
    while true do
      let b = Bytes.create (64 * 1024 * 1024) in Bytes.fill b 0 (Bytes.length b) 'x'; keep := b :: !keep
    done
  | "loop" ->
    List.iter (fun s -> try Sys.set_signal s Sys.Signal_ignore with _ -> ())
      [Sys.sigint; Sys.sigterm; Sys.sighup; Sys.sigquit; Sys.sigusr1; Sys.sigxcpu];
    say "PG_LOOPING"; while true do () done
  | "filltmp" ->
    let chunk = String.make (1024 * 1024) 'x' in
    let n = ref 0 in
    (try
       while !n < int_of_string (env "PG_FILES") do
         let oc = open_out (Printf.sprintf "/tmp/%s-%d" (env "PG_PREFIX") !n) in
         for _ = 1 to int_of_string (env "PG_MB") do output_string oc chunk done;
         close_out oc; incr n
       done;
       say (Printf.sprintf "PG_FILLED %d" !n)
     with e -> say (Printf.sprintf "PG_STOPPED %d %s" !n (Printexc.to_string e)))
  | _ -> ()
"""

#: Limits of the verifier used here: the defaults, but less memory, smaller files and a smaller /tmp so the
#: bombs end fast.
LIMITS = SandboxLimits(memory_bytes=1024**3, file_size_bytes=8 * 1024**2, max_processes=32, tmp_bytes=32 * 1024**2)


@pytest.fixture(scope="module")
def plugin_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("ocamlfind") is None:
        pytest.skip("ocamlfind is needed to build the hostile Coq plugin (apt-get install ocaml-findlib)")
    path = tmp_path_factory.mktemp("plugin")
    (path / f"{PLUGIN}.ml").write_text(PLUGIN_SOURCE)
    done = subprocess.run(["ocamlfind", "ocamlopt", "-shared", "-package", "coq-core.vernac,unix", "-o",
                           f"{PLUGIN}.cmxs", f"{PLUGIN}.ml"], cwd=path, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        pytest.skip(f"cannot build a Coq plugin here (coq-core development files?): {done.stderr[-300:]}")
    return path


@pytest.fixture(scope="module")
def verifier(plugin_dir: Path):
    """The Coq verifier under test, with the plugin's dir bound read-only (as `extra_args` paths are)."""
    from proofgym.envs.verifiers.coq import CoqVerifier

    # -Q binds the dir read-only, as a user's library would be; the runs below add -I for the ML plugin.
    with CoqVerifier(extra_args=("-Q", str(plugin_dir), "PgPlugin"), limits=LIMITS) as v:
        assert v.sandbox.isolated
        yield v


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    work = tmp_path / "task"
    work.mkdir()
    return work


@pytest.fixture
def marker() -> str:
    token = f"PROOFGYM_COQ_ESCAPE_{uuid.uuid4().hex}"
    yield token
    assert _processes_with(token) == [], "a prover process outlived its job"


def run_coqc(verifier, workdir: Path, source: str, *, env: dict[str, str] | None = None, timeout_s: float = 60,
             plugin_dir: Path | None = None):
    """Compile ``source`` with coqc in the verifier's own sandbox (the whitelist bypassed on purpose)."""
    (workdir / "Hostile.v").write_text(source)
    args = ["coqc", "-q"] + (["-I", str(plugin_dir)] if plugin_dir else []) + ["Hostile.v"]
    return verifier.sandbox.run(args, workdir=workdir, timeout_s=timeout_s, env=env)


def run_plugin(verifier, plugin_dir: Path, workdir: Path, mode: str, timeout_s: float = 30, **env: str):
    return run_coqc(verifier, workdir, f'Declare ML Module "{PLUGIN}:{PLUGIN}".\n', plugin_dir=plugin_dir,
                    env={"PG_MODE": mode, **env}, timeout_s=timeout_s)


def coq_task(statement: str = "Lemma t : True.", timeout_s: float = 10) -> Task:
    return Task(id=f"escape.{uuid.uuid4().hex[:6]}", system="coq", context="", statement=statement,
                reference_proof="Proof. exact I. Qed.", category="P1", timeout_s=timeout_s)


# ---------------------------------------------------------------------------------------------
# layer 1: the whitelist rejects every command that does I/O or loads code, before any prover runs

ESCAPES = {
    "read": ['Load "{secret}".', 'Add LoadPath "{dir}" as Leak.'],
    "write": ['Redirect "{dir}/pwn" Print nat.', 'Extraction "{dir}/pwn.ml" nat.', "Separate Extraction nat."],
    "connect": [f'Declare ML Module "{PLUGIN}:{PLUGIN}".'],
    "fork": ["Extraction TestCompile nat.", f'Declare ML Module "{PLUGIN}:{PLUGIN}".'],
    "memory": [f'Declare ML Module "{PLUGIN}:{PLUGIN}".', "Timeout 1 Redirect \"x\" Print nat."],
    "loop": ["Drop.", f'Declare ML Module "{PLUGIN}:{PLUGIN}".'],
    "filltmp": ['Redirect "/tmp/fill" Print nat.', 'Extraction Library Datatypes.'],
}


@pytest.mark.parametrize("escape", sorted(ESCAPES))
def test_layer1_whitelist_rejects_the_escape_before_any_prover_runs(verifier, tmp_path, escape):
    secret = tmp_path / "secret.v"
    secret.write_text("Definition leaked := 12345.\n")
    for sentence in ESCAPES[escape]:
        text = sentence.format(secret=secret, dir=tmp_path)
        before = verifier.stats["sessions_started"]
        result = verifier.check(coq_task(), f"Proof. {text} exact I. Qed.")
        assert result.verdict is Verdict.CHEATING and result.backend == "precheck", (text, result)
        assert verifier.stats["sessions_started"] == before, f"no prover may start for {text!r}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["secret.v"], "nothing may be written"


@pytest.mark.parametrize(("sentence", "verdict"), [
    # Issue 26: none of these can make an unproved statement pass, and none is ever sent to Coq.
    ('Locate File "{secret}".', Verdict.OK),  # a query: dropped with a note, so it reads nothing
    ('Cd "{dir}".', Verdict.ERROR),  # moves nothing that is sent: ERROR saying to remove it
    ("Require Import Leak.", Verdict.ERROR),  # names no library on the load path (Add LoadPath is never sent)
])
def test_a_file_system_command_that_cannot_cheat_is_not_sent(verifier, tmp_path, sentence, verdict):
    secret = tmp_path / "secret.v"
    secret.write_text("Definition leaked := 12345.\n")
    result = verifier.check(coq_task(), f"Proof. {sentence.format(secret=secret, dir=tmp_path)} exact I. Qed.")
    assert result.verdict is verdict, result
    assert sorted(p.name for p in tmp_path.iterdir()) == ["secret.v"], "nothing may be written"


# ---------------------------------------------------------------------------------------------
# layer 2: the prover processes themselves are contained (whitelist bypassed)


def test_layer2_read_outside_the_task_dir(verifier, plugin_dir, workdir, tmp_path):
    secret_dir = tmp_path / "secret"
    secret_dir.mkdir()
    token = f"TOPSECRET{uuid.uuid4().hex}"
    (secret_dir / "leak.v").write_text(f'Definition leaked := "{token}"%string.\n')
    header = "Require Import String.\nOpen Scope string_scope.\n"
    run = run_coqc(verifier, workdir, f'{header}Load "{secret_dir}/leak".\nPrint leaked.\n')
    assert run.returncode != 0 and token not in run.stdout + run.stderr
    native = run_plugin(verifier, plugin_dir, workdir, "read", PG_PATH=str(secret_dir / "leak.v"))
    assert "PG_DENIED" in native.stderr and token not in native.stdout + native.stderr
    shadow = run_plugin(verifier, plugin_dir, workdir, "read", PG_PATH="/etc/shadow")
    assert "PG_READ" not in shadow.stderr or "root:" not in shadow.stderr
    # Positive control: the same Load works on a file inside the task dir.
    shutil.copy(secret_dir / "leak.v", workdir / "leak.v")
    inside = run_coqc(verifier, workdir, f'{header}Load "leak".\nPrint leaked.\n')
    assert inside.returncode == 0 and token in inside.stdout


def test_layer2_write_outside_the_task_dir(verifier, plugin_dir, workdir, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    name = f"pwn-{uuid.uuid4().hex[:8]}"
    source = (f'Redirect "{outside}/{name}" Print nat.\nRedirect "/tmp/{name}" Print nat.\n'
              f'Require Extraction.\nExtraction "{outside}/{name}.ml" nat.\n')
    run_coqc(verifier, workdir, source)
    native = run_plugin(verifier, plugin_dir, workdir, "write", PG_PATH=f"/usr/{name}")
    native_out = run_plugin(verifier, plugin_dir, workdir, "write", PG_PATH=str(outside / f"{name}.native"))
    try:
        assert list(outside.iterdir()) == [], "nothing may appear outside the task dir"
        assert not Path(f"/tmp/{name}.out").exists() and not Path(f"/usr/{name}").exists()
        assert "PG_DENIED" in native.stderr and "PG_DENIED" in native_out.stderr
    finally:
        Path(f"/tmp/{name}.out").unlink(missing_ok=True)
        Path(f"/usr/{name}").unlink(missing_ok=True)
    # Positive control: writing inside the task dir works (so the failures above are the sandbox's doing).
    inside = run_coqc(verifier, workdir, 'Redirect "inside" Print nat.\n')
    assert inside.returncode == 0 and (workdir / "inside.out").exists()


def test_layer2_connect_to_localhost(verifier, plugin_dir, workdir):
    from proofgym.envs.verifiers.coq.idetop import IdeTop
    from proofgym.envs.verifiers.sandbox import Sandbox

    listener = _Listener()
    try:
        env = {"PG_PORT": str(listener.port)}
        run = run_plugin(verifier, plugin_dir, workdir, "connect", **env)
        assert "PG_PLUGIN connect" in run.stderr and "PG_DENIED" in run.stderr and "PG_CONNECTED" not in run.stderr
        # The warm-session path too: the plugin loaded into the verifier's sandboxed coqidetop.
        ide = IdeTop(verifier.sandbox, workdir, args=("-I", str(plugin_dir)), env={"PG_MODE": "connect", **env})
        try:
            ide.add(f'Declare ML Module "{PLUGIN}:{PLUGIN}".', ide.root_state, timeout_s=60)
            ide.status(timeout_s=60)
        finally:
            ide.kill()
        assert listener.accepted_before_probe() == 0  # every earlier connection is counted once the probe is
        # Positive control: the same plugin in the same sandbox with the network on does connect.
        open_box = Sandbox(LIMITS, ro_binds=[str(plugin_dir)], network=True)
        (workdir / "Hostile.v").write_text(f'Declare ML Module "{PLUGIN}:{PLUGIN}".\n')
        control = open_box.run(["coqc", "-q", "-I", str(plugin_dir), "Hostile.v"], workdir=workdir, timeout_s=60,
                               env={"PG_MODE": "connect", **env})
        assert "PG_CONNECTED" in control.stderr, control.stderr
    finally:
        listener.close()


def test_layer2_fork_bomb(verifier, plugin_dir, workdir, marker):
    run = run_plugin(verifier, plugin_dir, workdir, "fork", timeout_s=3, PROOFGYM_TEST_MARKER=marker)
    assert run.timed_out and run.signal == signal.SIGKILL
    assert _processes_with(marker) == []
    if run.peak_processes is not None:
        assert run.peak_processes <= LIMITS.max_processes


def test_layer2_memory_bomb(verifier, plugin_dir, workdir, marker):
    run = run_plugin(verifier, plugin_dir, workdir, "memory", timeout_s=60, PROOFGYM_TEST_MARKER=marker)
    assert not run.timed_out and run.returncode != 0, "the address-space limit must stop it, not the deadline"
    assert "PG_PLUGIN memory" in run.stderr


def test_layer2_loop_ignoring_signals(verifier, plugin_dir, workdir, marker):
    run = run_plugin(verifier, plugin_dir, workdir, "loop", timeout_s=3, PROOFGYM_TEST_MARKER=marker)
    assert "PG_LOOPING" in run.stderr
    assert run.timed_out and run.signal == signal.SIGKILL  # SIGKILL from outside cannot be ignored
    assert _processes_with(marker) == []


def test_layer2_filling_the_temp_dir(verifier, plugin_dir, workdir, marker):
    prefix = f"pgfill-{uuid.uuid4().hex[:8]}"
    host_tmp_before = shutil.disk_usage("/tmp").used
    # Many files, each under the per-file limit, stop at the size of the job's private /tmp (32 MiB here).
    many = run_plugin(verifier, plugin_dir, workdir, "filltmp", PG_PREFIX=prefix, PG_FILES="16", PG_MB="4",
                      PROOFGYM_TEST_MARKER=marker)
    assert "PG_STOPPED" in many.stderr and "No space left on device" in many.stderr, many.stderr
    # That /tmp vanished with the job: the next one has room again.
    again = run_plugin(verifier, plugin_dir, workdir, "filltmp", PG_PREFIX=prefix, PG_FILES="4", PG_MB="4",
                       PROOFGYM_TEST_MARKER=marker)
    assert "PG_FILLED 4" in again.stderr, again.stderr
    # One file over the per-file limit (RLIMIT_FSIZE, 8 MiB here) is stopped.
    big = run_plugin(verifier, plugin_dir, workdir, "filltmp", PG_PREFIX=prefix, PG_FILES="1", PG_MB="32",
                     PROOFGYM_TEST_MARKER=marker)
    assert big.signal == signal.SIGXFSZ or "PG_STOPPED 0" in big.stderr, big
    assert not any(p.name.startswith(prefix) for p in Path("/tmp").iterdir()), "the host's /tmp is untouched"
    assert all(p.name.startswith(("Hostile.", ".Hostile.")) for p in workdir.iterdir()), list(workdir.iterdir())
    # The ~48 MiB written above are gone with the jobs (other processes share /tmp: allow generous noise).
    assert shutil.disk_usage("/tmp").used - host_tmp_before < 48 * 1024**2


# ---------------------------------------------------------------------------------------------
# tactics that pass the whitelist and attack resources come back as verdicts


def test_whitelisted_vm_memory_bomb_is_a_verdict_and_the_session_survives(verifier):
    task = coq_task("Lemma big : Nat.pow 2 40 = Nat.pow 2 40.", timeout_s=30)
    result = verifier.check(task, "Proof. vm_compute. reflexivity. Qed.")
    assert result.verdict in (Verdict.FAIL, Verdict.TIMEOUT), result
    honest = replace(task, statement="Lemma small : Nat.pow 2 4 = 16.")
    assert verifier.check(honest, "Proof. reflexivity. Qed.").verdict is Verdict.OK


def test_whitelisted_vm_loop_is_a_timeout_and_leaves_no_process(verifier):
    task = coq_task("Lemma spin : N.iter 1000000000000 negb true = true.", timeout_s=3)
    task = replace(task, context="Require Import NArith.\n")
    # Other tests' verifiers may be alive in this process too: only new provers count.
    before = {p for p in descendants(os.getpid()) if "coqidetop" in _exe(p)}
    result = verifier.check(task, "Proof. vm_compute. reflexivity. Qed.")
    assert result.verdict is Verdict.TIMEOUT, result
    assert verifier.check(replace(task, statement="Lemma ok3 : N.iter 4 negb true = true."),
                          "Proof. vm_compute. reflexivity. Qed.").verdict is Verdict.OK
    # The looping prover was killed: every coqidetop left under this process belongs to a live warm session.
    live = {pid for session in verifier._sessions.values() for pid in session.ide.program_pids()}  # noqa: SLF001
    new = {p for p in descendants(os.getpid()) if "coqidetop" in _exe(p)} - before
    assert new <= live, (new, live)


def _exe(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return ""
