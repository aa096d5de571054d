"""Sandbox escapes for HOL Light, on the real fork server: each one is refused, or contained where it runs.

Three places HOL Light code can come from, and what holds each (see ``envs/verifiers/hol_light.py``):

- **a submitted tactic** is parsed and type-checked first; a name outside the whitelist (``open_in``,
  ``Unix``, ``Sys``, ``file_of_string`` ...) is ``CHEATING`` before any of it runs (layer 1).
- **a task's context** is ML that the zygote runs with the whole toplevel, ``Unix`` included (boot.ml
  loads ``unix.cma``). It is trusted-author code, but it runs inside the server's bubblewrap sandbox:
  private mount, pid and network namespaces, rlimits, the server's pids cgroup, a capped ``/tmp``.
  The contexts below attack from there (layer 2, zygote).
- **the worker** runs the tactic after dropping to its own uid, with rlimits, ``no_new_privs`` and
  seccomp. To put arbitrary code there the hostile context below hides a closure in a ``Hashtbl``
  (the context's taint analysis tracks ``:=``, not container writes; contexts are trusted, so it does
  not need to) behind an innocent-looking ``ESCAPE_TAC``, which the whitelist then lets a submission
  name: the code runs in the worker, whitelist bypassed on purpose (layer 2, worker).

Each escape is one test, covering the layers that apply: read or write outside the task dir, connect
to 127.0.0.1 (a listener this test owns; nothing else is ever contacted), a fork bomb, a memory bomb,
a loop that ignores signals, and filling the temp dir. After each, the server still gives honest
verdicts, was not restarted, and holds no process beyond its root and zygotes.

One HOL Light load (about two minutes) is shared by the whole module; it is not the run's server.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from proofgym.envs.types import CheckResult, Task, Verdict
from proofgym.envs.verifiers.hol_light import ContextLoadError, HolLightVerifier, hol_light_installed
from proofgym.envs.verifiers.sandbox import bwrap_available
from tests.test_hol_light import _cgroup_pids, _state
from tests.test_sandbox import _Listener

pytestmark = [
    pytest.mark.prover,
    pytest.mark.skipif(not hol_light_installed(),
                       reason="HOL Light is not installed: run `make setup` (apt-get install hol-light libnum-ocaml-dev)"),
    pytest.mark.skipif(not bwrap_available(), reason="bubblewrap missing or unusable: apt-get install bubblewrap"),
]

#: How long a context may load here (the default is 10 minutes); the looping contexts below run into it.
CONTEXT_TIMEOUT_S = 15.0

#: The hostile code: ``say`` reports a line, ``mode`` picks the attack, ``arg`` is its target.
#: Plain OCaml in HOL Light syntax (no backquotes: they are term quotations there).
HOSTILE = r"""
(fun (say : string -> unit) (mode : string) (arg : string) ->
  let attempt what f =
    try f (); say (what ^ " SUCCEEDED") with e -> say (what ^ " DENIED " ^ Printexc.to_string e) in
  match mode with
  | "read" -> attempt "read" (fun () -> let ic = open_in arg in say ("READ " ^ input_line ic); close_in ic)
  | "write" -> attempt "write" (fun () -> let oc = open_out arg in output_string oc "pwned\n"; close_out oc)
  | "connect" ->
      (* HOL Light's lexer reads all-capital names (PF_INET, ADDR_INET) as values: take the address from
         getaddrinfo (numeric, no lookup) and the constant constructors by their representation *)
      attempt "connect" (fun () ->
        let stream = (Obj.magic 0 : Unix.socket_type) in
        let ai = List.find (fun a -> a.Unix.ai_socktype = stream) (Unix.getaddrinfo "127.0.0.1" arg []) in
        let s = Unix.socket ai.Unix.ai_family stream 0 in
        Unix.connect s ai.Unix.ai_addr;
        Unix.close s)
  | "fork" ->
      (* every child forks forever; the caller counts its own forks, then returns *)
      let forked = ref 0 and refused = ref 0 in
      let full e = Unix.error_message e = "Resource temporarily unavailable" in
      say "FORKING";
      (try
         for _ = 1 to int_of_string arg do
           match (try Some (Unix.fork ()) with Unix.Unix_error (e, _, _) when full e -> None) with
           | Some 0 -> while true do (try ignore (Unix.fork ()) with _ -> ()) done
           | Some _ -> incr forked
           | None -> incr refused
         done
       with e -> say ("fork DENIED " ^ Printexc.to_string e));
      say (Printf.sprintf "FORKED %d REFUSED %d" !forked !refused)
  | "memory" ->
      (* address space, not RSS: Bytes.create leaves the pages untouched, which spares the shared
         test machine; the address-space limit bounds RSS too *)
      say "MEMORY";
      let keep = ref [] in
      while true do keep := Bytes.create (256 * 1024 * 1024) :: !keep done
  | "loop" ->
      List.iter (fun s -> try Sys.set_signal s Sys.Signal_ignore with _ -> ())
        [Sys.sigint; Sys.sigterm; Sys.sighup; Sys.sigquit; Sys.sigalrm; Sys.sigxcpu; Sys.sigusr1; Sys.sigusr2];
      say "LOOPING";
      while true do () done
  | "filltmp" ->
      let chunk = String.make (1024 * 1024) 'x' and files = ref 0 in
      (try
         for i = 0 to 63 do
           let oc = open_out (Printf.sprintf "/tmp/%s-%d" arg i) in
           for _ = 1 to 16 do output_string oc chunk done;
           close_out oc; incr files
         done;
         say (Printf.sprintf "FILLED %d" !files)
       with e -> say (Printf.sprintf "STOPPED %d %s" !files (Printexc.to_string e)))
  | _ -> say ("unknown mode " ^ mode))
"""

#: A context that loads fine and hands the hostile code to the worker through ``ESCAPE_TAC mode arg``.
WORKER_CONTEXT = f"""
let escape_stash : (int, string -> string -> unit) Hashtbl.t = Hashtbl.create 1;;
(* Stdlib's stdout (HOL Light's print_string goes to Format's buffer, which the worker never flushes) *)
Hashtbl.replace escape_stash 0
  ({HOSTILE} (fun s -> output_string Stdlib.stdout ("PG " ^ s ^ "\\n"); flush Stdlib.stdout));;
let ESCAPE_TAC mode arg = fun g -> ((Hashtbl.find escape_stash 0) mode arg; ALL_TAC g);;
"""


def T(goal: str = "1 + 1 = 2", *, context: str = "", timeout: float = 30.0) -> Task:
    return Task(id=f"escape.{uuid.uuid4().hex[:6]}", system="hol_light", context=context, statement=f"`{goal}`",
                reference_proof="ARITH_TAC", timeout_s=timeout)


@pytest.fixture(scope="module")
def hol() -> Iterator[HolLightVerifier]:
    """A server of this module's own: a fork bomb fills its pids cgroup and a temp-dir filler its /tmp, so
    sharing the run's server (tried: one load less) let one attack's leftovers fail another module's tests
    and made the bomb's context miss its deadline on a loaded machine."""
    with HolLightVerifier(progress=False, context_timeout_s=CONTEXT_TIMEOUT_S) as verifier:
        server = verifier.server("plain")
        assert server.sandbox.isolated
        yield verifier


def assert_contained_and_honest(hol: HolLightVerifier, starts: int) -> None:
    """The server was not restarted, keeps no stray process, and still gives the right verdicts."""
    server = hol.server("plain")
    assert hol.stats["server_starts"] == starts, "the attack cost a server restart"
    # No waiting: the root sweeps before it answers, so by the time a check has returned, what a context left
    # (zombies included: they hold pids slots) is gone. Left: bwrap (two), the root, one zygote per context.
    left = [p for p in _cgroup_pids(hol) if _state(p) != "gone"]
    assert len(left) <= 3 + len(server.zygotes), f"stray processes: {len(left)} left, {len(server.zygotes)} zygotes"
    assert hol.check(T(), "ALL_TAC").verdict is Verdict.FAIL
    assert hol.check(T(), "ARITH_TAC").verdict is Verdict.OK
    assert hol.stats["server_starts"] == starts


def in_context(hol: HolLightVerifier, mode: str, arg: str = "") -> tuple[list[str], Exception | None]:
    """Run the hostile code in a zygote, as a task's context; returns its report and the load error if any."""
    report = hol.server("plain").workdir / f"report-{uuid.uuid4().hex}.txt"
    context = (f"let say s = let oc = open_out_gen [Open_append; Open_creat; Open_wronly] 0o600 {_ml(str(report))} "
               f'in output_string oc (s ^ "\\n"); close_out oc;;\n'
               f"let () = {HOSTILE} say {_ml(mode)} {_ml(arg)};;\n")
    error: Exception | None = None
    try:
        result = hol.check(T(context=context), "ARITH_TAC")
        assert result.verdict is Verdict.OK, result  # the context loaded: the task still checks
    except ContextLoadError as exc:
        error = exc
    try:
        lines = report.read_text().splitlines()
    except FileNotFoundError:
        lines = []
    report.unlink(missing_ok=True)
    return lines, error


def in_worker(hol: HolLightVerifier, mode: str, arg: str = "", *, timeout: float = 30.0) -> CheckResult:
    """Run the hostile code in a worker (after the whitelist, under seccomp and its own uid)."""
    return hol.check(T(context=WORKER_CONTEXT, timeout=timeout), f"ESCAPE_TAC {_ml(mode)} {_ml(arg)}")


def _ml(text: str) -> str:
    assert '"' not in text and "\\" not in text
    return f'"{text}"'


def _said(result: CheckResult) -> list[str]:
    return [line[3:] for m in result.messages for line in m.splitlines() if line.startswith("PG ")]


def refused(hol: HolLightVerifier, proof: str) -> None:
    """Layer 1: the whitelist refuses the tactic before any of it runs."""
    result = hol.check(T(), proof)
    assert result.verdict is Verdict.CHEATING and result.reasons, (proof, result)


# ---------------------------------------------------------------------------------------------


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "secret" / "key.txt"
    path.parent.mkdir()
    path.write_text(f"TOPSECRET-{uuid.uuid4().hex}\n")
    return path


def test_read_outside_the_task_dir(hol, secret):
    starts = hol.stats["server_starts"]
    token = secret.read_text().strip()
    for proof in (f'(ignore (open_in {_ml(str(secret))}); ALL_TAC)',
                  f'(ignore (string_of_file {_ml(str(secret))}); ALL_TAC)',
                  f'(ignore (Stdlib.open_in {_ml(str(secret))}); ALL_TAC)',
                  f'(ignore (Unix.openfile {_ml(str(secret))} [] 0); ALL_TAC)'):
        refused(hol, proof)
    for path in (str(secret), f"/proc/1/root{secret}", "/etc/shadow"):
        said, error = in_context(hol, "read", path)
        assert error is None and len(said) == 1 and said[0].startswith("read DENIED"), (path, said, error)
        assert token not in " ".join(said)
        result = in_worker(hol, "read", path)
        assert _said(result) and _said(result)[0].startswith("read DENIED"), result
        assert token not in str(result)
    # Positive control: the same code reads a file that is inside the sandbox.
    said, _ = in_context(hol, "read", str(hol.server("plain").workdir / "boot.ml"))
    assert said[0].startswith("READ (* proofgym"), said
    assert_contained_and_honest(hol, starts)


def test_write_outside_the_task_dir(hol, tmp_path):
    starts = hol.stats["server_starts"]
    outside = tmp_path / "outside"
    outside.mkdir()
    name = f"pwn-{uuid.uuid4().hex[:8]}"
    targets = [outside / name, Path("/usr") / name, Path("/tmp") / name, Path("/etc") / name]
    try:
        for proof in (f'(let oc = open_out {_ml(str(outside / name))} in close_out oc; ALL_TAC)',
                      f'(file_of_string {_ml(str(outside / name))} "pwned"; ALL_TAC)',
                      f'(ignore (Sys.command "touch {outside / name}"); ALL_TAC)'):
            refused(hol, proof)
        for target in targets:
            said, error = in_context(hol, "write", str(target))
            assert error is None and len(said) == 1, (target, said, error)
            # /tmp is the sandbox's own tmpfs: writing there succeeds and stays inside
            assert said[0].startswith("write DENIED") or target.parent == Path("/tmp"), (target, said)
            result = in_worker(hol, "write", str(target))
            assert _said(result) and _said(result)[0].startswith("write DENIED"), result
        for target in targets:
            assert not target.exists(), f"{target} escaped the sandbox"
        assert list(outside.iterdir()) == []
        # Positive control: the zygote may write inside its task dir (the server's workdir).
        inside = hol.server("plain").workdir / name
        said, _ = in_context(hol, "write", str(inside))
        assert said == ["write SUCCEEDED"] and inside.read_text() == "pwned\n"
        inside.unlink()
    finally:
        for target in targets:  # only ever files this test named; present only if the sandbox is broken
            target.unlink(missing_ok=True)
    assert_contained_and_honest(hol, starts)


def test_connect_to_localhost(hol):
    starts = hol.stats["server_starts"]
    listener = _Listener()  # 127.0.0.1 only
    try:
        port = str(listener.port)
        refused(hol, "(ignore (Unix.socket Unix.PF_INET Unix.SOCK_STREAM 0); ALL_TAC)")
        refused(hol, f'(ignore (Sys.command "nc 127.0.0.1 {port}"); ALL_TAC)')
        said, error = in_context(hol, "connect", port)
        assert error is None and len(said) == 1 and said[0].startswith("connect DENIED"), (said, error)
        result = in_worker(hol, "connect", port)
        assert _said(result) and _said(result)[0].startswith("connect DENIED"), result
        # Every earlier connection is counted once the test's own probe is; the probe is the positive control.
        assert listener.accepted_before_probe() == 0
    finally:
        listener.close()
    assert_contained_and_honest(hol, starts)


def test_fork_bomb(hol):
    starts = hol.stats["server_starts"]
    refused(hol, "(ignore (Unix.fork ()); ALL_TAC)")
    refused(hol, '(ignore (Sys.command "f() { f | f & }; f"); ALL_TAC)')
    result = in_worker(hol, "fork", "64")
    said = _said(result)
    assert said[1].startswith("fork DENIED") and "EPERM" in said[1], result  # seccomp
    assert said[2:] == ["FORKED 0 REFUSED 0"], result
    # In a zygote, forks succeed until the server's pids cgroup is full; every child keeps forking.
    # With two cores shared by a few hundred forking children the zygote may not finish its own count
    # before the context's deadline; either way the bomb stays within the cgroup and dies with the load.
    said, error = in_context(hol, "fork", "1000")
    assert said[0] == "FORKING", said
    if error is None:
        forked, refused_ = int(said[-1].split()[1]), int(said[-1].split()[3])
        assert 0 < forked < hol.config.max_processes and refused_ > 0, said
    else:
        assert isinstance(error, ContextLoadError) and "timed out" in str(error), error
    assert_contained_and_honest(hol, starts)


def test_a_fork_bomb_that_outlives_its_context_is_gone_before_the_next_check(hol):
    """The context forks until its deadline, every child forking forever: the pids cgroup is full when the
    zygote is killed. The root stops the whole bomb (SIGSTOP: a stopped process cannot fork and keeps its
    slot), then kills it, before it answers: the checks after it all start a worker, none is retried."""
    starts = hol.stats["server_starts"]
    said, error = in_context(hol, "fork", "1000000000")
    assert said[:1] == ["FORKING"], said
    assert isinstance(error, ContextLoadError) and "timed out" in str(error), error
    assert "zygote died" not in str(error) and "signal" not in str(error), error
    retries = hol.stats["retries"]
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda _: hol.check(T(), "ARITH_TAC"), range(8)))
    assert [r.verdict for r in results] == [Verdict.OK] * 8, [r.reasons for r in results]
    assert hol.stats["retries"] == retries
    assert_contained_and_honest(hol, starts)


def test_memory_bomb(hol):
    starts = hol.stats["server_starts"]
    # issue 26: Bytes is not on the allow-list (ERROR, nothing runs); Array is (memo tables), so its bomb runs and
    # meets the worker's memory limit (ERROR resource) instead of the whitelist (both were CHEATING)
    unlisted = hol.check(T(), "(ignore (Bytes.create max_int); ALL_TAC)")
    assert unlisted.verdict is Verdict.ERROR and "not on the allow-list" in " ".join(unlisted.reasons), unlisted
    array = hol.check(T(), "(ignore (Array.make 1000000000 0); ALL_TAC)")
    assert array.verdict is Verdict.ERROR and array.error_category.value == "resource", array
    result = in_worker(hol, "memory", timeout=60)
    assert result.verdict is Verdict.ERROR and result.error_category.value == "resource", result
    said, error = in_context(hol, "memory")
    assert said == ["MEMORY"] and isinstance(error, ContextLoadError), (said, error)
    assert_contained_and_honest(hol, starts)


def test_loop_ignoring_signals(hol):
    starts = hol.stats["server_starts"]
    refused(hol, "(Sys.set_signal Sys.sigterm Sys.Signal_ignore; ALL_TAC)")
    refused(hol, "(ignore (Unix.alarm 0); ALL_TAC)")
    result = in_worker(hol, "loop", timeout=3)
    assert result.verdict is Verdict.TIMEOUT and _said(result) == ["LOOPING"], result
    # A context that ignores every catchable signal (the zygote's own alarm among them) and loops: the root
    # kills it at its deadline, and says that it timed out.
    said, error = in_context(hol, "loop")
    assert said == ["LOOPING"] and isinstance(error, ContextLoadError), (said, error)
    assert "timed out" in str(error) and "signal" not in str(error), error
    # The same without ignoring anything: the zygote's own alarm ends it (OCaml's signal -2), also "timed out".
    with pytest.raises(ContextLoadError, match="timed out") as plain:
        hol.check(T(context="let () = while true do () done;;"), "ARITH_TAC")
    assert "signal" not in str(plain.value), plain.value
    assert_contained_and_honest(hol, starts)


def _empty_sandbox_tmp(hol: HolLightVerifier, prefix: str) -> None:
    """Remove the files named ``prefix*`` from the server sandbox's own /tmp, through a (trusted) context."""
    context = (f'let () = Array.iter (fun f -> if String.length f >= {len(prefix)} && '
               f'String.sub f 0 {len(prefix)} = {_ml(prefix)} then Sys.remove ("/tmp/" ^ f)) (Sys.readdir "/tmp");;\n')
    assert hol.check(T(context=context), "ARITH_TAC").verdict is Verdict.OK


def test_filling_the_temp_dir(hol):
    starts = hol.stats["server_starts"]
    prefix = f"pgfill-{uuid.uuid4().hex[:8]}"
    host_tmp_before = shutil.disk_usage("/tmp").used
    refused(hol, f'(file_of_string "/tmp/{prefix}" (String.make 1000000 (Char.chr 120)); ALL_TAC)')
    result = in_worker(hol, "filltmp", prefix)
    assert _said(result) and _said(result)[0].startswith("STOPPED 0"), result  # no open() under seccomp
    # 64 files of 16 MiB (each under the server's per-file limit) stop at the sandbox's /tmp cap.
    try:
        said, error = in_context(hol, "filltmp", prefix)
    finally:
        _empty_sandbox_tmp(hol, prefix)  # the server is the run's: the tests after this one need its /tmp
    assert error is None and said[0].startswith("STOPPED") and "No space left on device" in said[0], (said, error)
    assert 0 < int(said[0].split()[1]) < 64
    assert not any(p.name.startswith(prefix) for p in Path("/tmp").iterdir()), "the host's /tmp was written"
    # other processes share the host's /tmp: allow generous noise, well under the ~256 MiB written inside
    assert shutil.disk_usage("/tmp").used - host_tmp_before < 128 * 1024**2
    assert_contained_and_honest(hol, starts)
