"""Prover tier: the HOL Light fork server against real HOL Light.

Every test here shares ONE warm server (the session fixture `hol` in conftest.py, also used by the other
HOL Light test files): Debian's HOL Light takes about two minutes to load, once per test run. The two
tests that need a second load (a killed root, a fresh CLI process) are in the slow tier (`make test-slow`).
Tests never assert on timings.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import pytest

from proofgym.envs.types import Task, Verdict
from proofgym.envs.verifiers.hol_light import hol_light_installed

pytestmark = [
    pytest.mark.prover,
    pytest.mark.skipif(not hol_light_installed(),
                       reason="HOL Light is not installed: run `make setup` (apt-get install hol-light libnum-ocaml-dev)"),
]



def T(goal: str, *, context: str = "", timeout: float = 60.0, ident: str = "t") -> Task:
    return Task(id=ident, system="hol_light", context=context, statement=f"`{goal}`", reference_proof="ALL_TAC",
                timeout_s=timeout)


FALSE = T("1 + 1 = 3")
TRUE = T("1 + 1 = 2")
LEMMA_CONTEXT = "let MY_LEMMA = prove(`!n. n + 0 = n`, CHEAT_TAC);;\nlet MY_TAC = ARITH_TAC;;\n"


def assert_honest_still_right(hol) -> None:
    """After anything hostile: ALL_TAC on a true goal is FAIL, a real proof is OK."""
    assert hol.check(TRUE, "ALL_TAC").verdict is Verdict.FAIL
    assert hol.check(TRUE, "ARITH_TAC").verdict is Verdict.OK


# ---------------------------------------------------------------------------------------------
# honest proofs and bad input


@pytest.mark.parametrize(("task", "proof", "verdict"), [
    (TRUE, "ARITH_TAC", Verdict.OK),
    (T("!n. n + 0 = n"), "REWRITE_TAC[ADD_CLAUSES]", Verdict.OK),
    (T("!n. n + 0 = n"), "GEN_TAC THEN REWRITE_TAC[ADD_CLAUSES]", Verdict.OK),
    (T("!n. n + 0 = n"), "INDUCT_TAC THEN ASM_REWRITE_TAC[ADD_CLAUSES]", Verdict.OK),
    (T("!m n. m + n = n + m"), "REPEAT GEN_TAC THEN MP_TAC (SPECL [`m:num`; `n:num`] ADD_SYM) THEN "
                                "DISCH_THEN (fun th -> ACCEPT_TAC th)", Verdict.OK),
    (T("x * (y + z) = x * z + x * y"),
     "REWRITE_TAC[LEFT_ADD_DISTRIB] THEN GEN_REWRITE_TAC LAND_CONV [ADD_SYM] THEN REFL_TAC", Verdict.OK),
    (T("p /\\ q ==> q /\\ p"), "MESON_TAC[]", Verdict.OK),
    (T("!l:A list. APPEND l [] = l"), "LIST_INDUCT_TAC THEN ASM_REWRITE_TAC[APPEND]", Verdict.OK),
    (T("2 EXP 10 = 1024"), "CONV_TAC NUM_REDUCE_CONV", Verdict.OK),
    (T("1 + 1 = 2"), "ARITH_TAC;;", Verdict.OK),  # a trailing ;; is not a second phrase
    (T("1 + 1 = 2"), "List.fold_left (fun t _ -> t THEN ALL_TAC) ARITH_TAC [1; 2]", Verdict.OK),
    (T("!n. n + 0 = n"), "MATCH_ACCEPT_TAC MY_LEMMA", Verdict.OK),  # see the context below
    (FALSE, "ARITH_TAC", Verdict.FAIL),
    (TRUE, "ALL_TAC", Verdict.FAIL),
    (TRUE, "NO_TAC", Verdict.FAIL),
    (TRUE, "failwith \"OK\"", Verdict.FAIL),
    (TRUE, "ARITH_TAC THEN (", Verdict.ERROR),
    (TRUE, "ADD_SYM", Verdict.ERROR),  # a theorem, not a tactic
    (TRUE, "NO_SUCH_TAC", Verdict.ERROR),
    (TRUE, "fun (asl, w) -> raise Not_found", Verdict.ERROR),  # an unexpected exception
    (TRUE, "let rec f n = 1 + f (n + 1) in (ignore (f 0); ALL_TAC)", Verdict.ERROR),  # stack overflow
])
def test_honest_and_bad_input(hol, task, proof, verdict):
    if "MY_LEMMA" in proof:
        task = replace(task, context=LEMMA_CONTEXT)
    result = hol.check(task, proof)
    assert result.verdict is verdict, result
    assert result.prover_version.startswith("HOL Light")
    if verdict is Verdict.FAIL and proof == "ALL_TAC":
        assert result.remaining_goals and result.remaining_goals[0].conclusion == "1 + 1 = 2"
    if proof == "NO_SUCH_TAC":
        assert result.error_category.value == "undefined"


def test_loop_is_timeout_and_memory_bomb_is_error(hol):
    loop = hol.check(replace(TRUE, timeout_s=3), "let rec f () = try f () with _ -> f () in f ()")
    assert loop.verdict is Verdict.TIMEOUT
    spin = hol.check(replace(TRUE, timeout_s=3), "let rec f n = if n < 0 then ALL_TAC else f (n + 1) in f 0")
    assert spin.verdict is Verdict.TIMEOUT
    # The bomb must reach the worker's memory cap before its deadline: under a loaded CI (bytecode OCaml, 4+ busy
    # processes on 2 cores) 3 GiB took over 120 s once, so this check runs with a 1 GiB cap (the zygote's
    # address space is about 0.3 GiB), the same path to the same verdict.
    saved = hol.config
    hol.config = replace(saved, worker_memory_bytes=1024**3)
    try:
        bomb = hol.check(replace(TRUE, timeout_s=120),
                         "let rec f l = f (List.rev_append l l) in f [1; 2; 3]")
    finally:
        hol.config = saved
    assert bomb.verdict is Verdict.ERROR and bomb.error_category.value == "resource", bomb
    assert_honest_still_right(hol)


def test_a_cpu_bound_loop_hits_the_cpu_budget_and_the_default_clock_is_the_wall(hol):
    """With ``timeout_clock="cpu"`` (README, TIMEOUT policy) a spinning tactic is stopped by the worker's CPU seconds,
    not by the wall-clock backstop (30 x timeout_s here), and says so; honest proofs still pass on the same server."""
    spinning = "let rec f n = if n < 0 then ALL_TAC else f (n + 1) in f 0"
    saved = hol.config
    hol.config = replace(saved, timeout_clock="cpu", wall_backstop=30)
    try:
        result = hol.check(replace(TRUE, timeout_s=1), spinning)
        assert result.verdict is Verdict.TIMEOUT and "CPU seconds" in result.reasons[0], result
        assert hol.check(TRUE, "ARITH_TAC").ok
    finally:
        hol.config = saved
    wall = hol.check(replace(TRUE, timeout_s=1), spinning)
    assert wall.verdict is Verdict.TIMEOUT and "CPU" not in wall.reasons[0], wall
    assert_honest_still_right(hol)


def test_context_names_are_usable_and_context_failures_are_task_errors(hol):
    from proofgym.envs.verifiers.hol_light import ContextLoadError

    task = T("1 + 2 = 3", context=LEMMA_CONTEXT)
    assert hol.check(task, "MY_TAC").verdict is Verdict.OK
    with pytest.raises(ContextLoadError):
        hol.check(T("1 = 1", context="let x = undefined_thing;;"), "REFL_TAC")
    with pytest.raises(ContextLoadError):  # a missing file is an error, never a half-loaded context
        hol.check(T("1 = 1", context='needs "no/such/file.ml";;'), "REFL_TAC")
    with pytest.raises(ContextLoadError):
        hol.check(T("1 + "), "ARITH_TAC")  # the goal does not parse


# ---------------------------------------------------------------------------------------------
# the red team: none of these may be OK


def C(proof: str, verdict: Verdict = Verdict.CHEATING, *, id: str, task: Task = FALSE):
    return pytest.param(task, proof, verdict, id=id)


#: Each pins the ONE verdict the real prover gives (issue 26: CHEATING only where the construct can make an
#: unproved statement pass; a construct that cannot is ERROR, and a harmless one is run: FAIL on a false goal).
CHEATS = [
    C("CHEAT_TAC", id="cheat_tac"),
    C("REWRITE_TAC[] THEN CHEAT_TAC", id="cheat_tac-after-rewrite"),
    C("List.hd [CHEAT_TAC]", id="cheat_tac-in-a-list"),
    C("ACCEPT_TAC (mk_thm([], `1 + 1 = 3`))", id="mk_thm"),
    C("ACCEPT_TAC (new_axiom `1 + 1 = 3`)", id="new_axiom"),
    # the two that fool the benchmark's grader
    C("ACCEPT_TAC (Obj.magic TRUTH)", id="obj-magic-accept"),
    C("ACCEPT_TAC (Stdlib.Obj.magic (ASSUME `T`))", id="stdlib-obj-magic"),
    C('(file_of_string "verdict.txt" "OK"; exit 0)', id="forged-verdict-file"),
    C('(let oc = open_out "verdict.txt" in output_string oc "OK"; close_out oc; exit 0)',
      id="forged-verdict-file-stdlib"),
    # the red team's four holes
    # Debian's camlp5 does not parse a local module with an external: ERROR before any check
    C("let module M = struct external magic : 'a -> 'b = \"%identity\" end in ACCEPT_TAC (M.magic TRUTH)",
      Verdict.ERROR, id="local-external-identity"),
    # the goal is parsed before the proof runs: a changed interface cannot change it (class 3, ERROR)
    C("(override_interface (\"+\", `(*):num->num->num`); ARITH_TAC)", Verdict.ERROR, id="override-interface"),
    C("(parse_as_infix (\"+\", (16, \"right\")); ARITH_TAC)", Verdict.ERROR, id="parse-as-infix"),
    C('(print_string "OK"; exit 0)', id="print-success-and-exit"),
    C('(at_exit (fun () -> print_string "RESULT 1 6\\n2\\nOK\\n"); ALL_TAC)', id="at-exit-marker"),
    C("ALL_TAC;; let prove (t, tac) = TRUTH;; let axioms () = []", id="semicolons-redefine-prove"),
    C("ARITH_TAC;; ARITH_TAC", Verdict.ERROR, id="semicolons-two-phrases"),  # never run: nothing to cheat with
    # module, object and extension syntax
    C("let open Obj in ACCEPT_TAC (magic TRUTH)", id="let-open"),
    C("Obj.(ACCEPT_TAC (magic TRUTH))", id="local-open"),
    C("(object method t = ALL_TAC end)#t", Verdict.ERROR, id="object"),
    C("[%identity ALL_TAC]", Verdict.ERROR, id="extension"),
    C("let module M = (val (Obj.magic 0) : sig val t : tactic end) in M.t", Verdict.ERROR,
      id="first-class-module"),  # camlp5 does not parse it
    C("(ALL_TAC [@ocaml.inline])", Verdict.ERROR, id="attribute"),
    # the process, the toplevel, files
    C('(ignore (Sys.command "echo OK > /tmp/verdict"); ARITH_TAC)', id="sys-command"),
    C('(ignore (Unix.system "kill -9 -1"); ALL_TAC)', id="unix-system"),
    C("ACCEPT_TAC (Marshal.from_string (Marshal.to_string TRUTH []) 0)", id="marshal"),
    C("(ignore (Toploop.execute_phrase false Format.std_formatter (Obj.magic 0)); ALL_TAC)", id="toploop"),
    # printing is harmless (issue 26): the tactic runs, and ALL_TAC leaves the false goal open
    C('(Printf.printf "OK"; ALL_TAC)', Verdict.FAIL, id="printf"),
    C('(Format.printf "OK@."; ALL_TAC)', Verdict.FAIL, id="format"),
    C('(loadt "Library/prime.ml"; ALL_TAC)', id="loadt"),
    C('(needs "Library/prime.ml"; ALL_TAC)', id="needs"),
    C('(use_file "/etc/passwd"; ALL_TAC)', id="use_file"),
    C('(ignore (string_of_file "/etc/passwd"); ALL_TAC)', id="string_of_file"),
    C("(String.unsafe_get \"a\" 5; ALL_TAC)", id="unsafe"),
    C("(the_interface := []; ALL_TAC)", Verdict.ERROR, id="assign-interface"),
    C("(ignore (new_definition `zz = 1`); ALL_TAC)", id="new_definition"),
    # a local binding is the proof's own value, whatever its name: this one is ALL_TAC
    C("let CHEAT_TAC = ALL_TAC in CHEAT_TAC", Verdict.FAIL, id="shadowed-name"),
    # wrong theorems
    C("ACCEPT_TAC (ASSUME `1 + 1 = 3`)", id="theorem-with-hypothesis"),
    C("fun (asl, w) -> (([], null_inst), [], fun _ _ -> ARITH_RULE `1 + 1 = 2`)", id="wrong-conclusion"),
    C("fun (asl, w) -> (([], null_inst), [], fun _ _ -> ASSUME w)", id="forged-justification-hyp"),
    # output that looks like a verdict is never read as one
    C('(report "V 0 5\\n2\\nOK\\n4\\nnone\\n0\\n\\n0\\n\\n0\\n"; remark "OK"; ALL_TAC)', Verdict.FAIL,
      id="printed-verdict-frame"),
    C("(unset_jrh_lexer; ALL_TAC)", Verdict.ERROR, id="jrh-lexer-switch"),
    C("(exec \"let prove = 1;;\"; ALL_TAC)", id="hol-exec"),
]


@pytest.mark.parametrize(("task", "proof", "verdict"), CHEATS)
def test_cheats_are_rejected(hol, task, proof, verdict):
    result = hol.check(task, proof)
    assert result.verdict is verdict, result
    assert result.reasons or verdict is Verdict.FAIL


def test_at_least_25_distinct_cheats():
    assert len({p.values[1] for p in CHEATS}) >= 25


def test_honest_still_right_after_the_red_team(hol):
    for task, proof, _ in (p.values for p in CHEATS):
        hol.check(task, proof)
    assert_honest_still_right(hol)


def test_fun_bound_names_are_not_false_rejections(hol):
    # A whitelist of names alone would reject the parameter `th`; the typed tree knows it is local.
    for proof in ("DISCH_THEN (fun th -> REWRITE_TAC[th])", "DISCH_THEN (fun e -> REWRITE_TAC[e])",
                  "let go th = REWRITE_TAC[th] in DISCH_THEN go"):
        assert hol.check(T("(x = 1) ==> x + 1 = 2"), proof).verdict is Verdict.FAIL, proof  # REWRITE_TAC: 1 + 1 = 2
    assert hol.check(T("(x = 1) ==> x + 1 = 2"), "DISCH_THEN (fun th -> REWRITE_TAC[th] THEN ARITH_TAC)").ok


# ---------------------------------------------------------------------------------------------
# the server: concurrency, zombies, a dying zygote


def _cgroup_pids(hol) -> list[int]:
    job = hol.server("plain").proc
    if job._cgroups is None:  # noqa: SLF001 - the test looks inside on purpose
        pytest.skip("no pids cgroup here")
    return job._cgroups.members()  # noqa: SLF001


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def test_concurrent_attempts_leave_no_zombies(hol):
    jobs = [(TRUE, "ARITH_TAC", Verdict.OK), (FALSE, "ARITH_TAC", Verdict.FAIL),
            (replace(TRUE, timeout_s=3), "let rec f () = f () in f ()", Verdict.TIMEOUT),
            (T("p \\/ ~p"), "MESON_TAC[]", Verdict.OK), (FALSE, "CHEAT_TAC", Verdict.CHEATING),
            (T("!n. n + 0 = n", context=LEMMA_CONTEXT), "MATCH_ACCEPT_TAC MY_LEMMA", Verdict.OK)] * 2
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda j: hol.check(j[0], j[1]), jobs))
    assert [r.verdict for r in results] == [j[2] for j in jobs]
    members = _cgroup_pids(hol)
    assert not [p for p in members if _state(p) == "Z"]
    # what is left: bwrap, the root and one zygote per context, no worker
    server = hol.server("plain")
    assert len(members) <= 3 + len(server.zygotes)


def _status(pid: int) -> dict[str, str]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return fields


def test_a_running_worker_is_isolated(hol):
    """Seen from outside while it loops: its own uid, no capabilities, no_new_privs, seccomp."""
    task = T("1 + 1 = 2", context="let ISOLATION = 1;;", timeout=30)
    assert hol.check(task, "ARITH_TAC").ok
    before = set(_cgroup_pids(hol))
    thread = threading.Thread(target=lambda: hol.check(task, "let rec f () = f () in f ()"))
    thread.start()
    worker = None
    for _ in range(400):
        new = [p for p in set(_cgroup_pids(hol)) - before if _state(p) not in ("gone", "Z")]
        seccomp = [p for p in new if _status(p).get("Seccomp") == "2"]
        if seccomp:
            worker = seccomp[0]
            break
        threading.Event().wait(0.05)
    assert worker is not None, "no worker under seccomp found"
    status = _status(worker)
    assert status["NoNewPrivs"] == "1" and status["CapEff"] == "0000000000000000"
    if os.geteuid() == 0:
        assert status["Uid"].split()[0] != "0"
        root_uid = _status(hol.server("plain").proc.program_pids()[0])["Uid"].split()[0]
        assert root_uid != status["Uid"].split()[0]
    thread.join(120)


def test_a_zygote_killed_under_an_attempt_costs_a_retry_not_a_verdict(hol):
    """SIGKILL the zygote while its worker runs: the attempt reruns on a reloaded zygote and gets its own verdict."""
    server = hol.server("plain")
    task = T("1 + 1 = 2", context="let DYING = 1;;", timeout=20)
    retries = hol.stats["retries"]
    assert hol.check(task, "ARITH_TAC").ok
    before = set(_cgroup_pids(hol))
    out: dict = {}
    thread = threading.Thread(target=lambda: out.setdefault("r", hol.check(task, "let rec f () = f () in f ()")))
    thread.start()
    # find the zygote (a direct child of the root with a child of its own: the looping worker)
    victim = None
    for _ in range(200):
        for pid in set(_cgroup_pids(hol)) - before:
            ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
            if ppid in before and _state(ppid) != "gone":
                victim = ppid
        if victim:
            break
        threading.Event().wait(0.05)
    assert victim is not None
    os.kill(victim, signal.SIGKILL)
    thread.join(120)
    assert out["r"].verdict is Verdict.TIMEOUT, out["r"]  # what the loop gets when nothing kills its zygote
    assert hol.stats["retries"] == retries + 1
    assert not server.dead
    assert hol.check(task, "ARITH_TAC").ok  # the context is loaded again
    assert_honest_still_right(hol)


def test_lru_eviction_under_a_tiny_budget(hol):
    """With room for one zygote, contexts evict each other, also under concurrent checks; verdicts stay right."""
    saved = hol.config
    hol.config = replace(saved, zygote_budget_bytes=1)
    try:
        before = hol.stats["evictions"]
        contexts = [f"let EVICT_{i} = {i};;" for i in range(3)]
        jobs = [(T("1 + 1 = 2", context=c), "ARITH_TAC", Verdict.OK) for c in contexts]
        jobs += [(T("1 + 1 = 2", context=c), "ALL_TAC", Verdict.FAIL) for c in contexts]
        for task, proof, verdict in jobs:
            assert hol.check(task, proof).verdict is verdict
        with ThreadPoolExecutor(max_workers=3) as pool:
            results = list(pool.map(lambda j: hol.check(j[0], j[1]), jobs * 2))
        assert [r.verdict for r in results] == [j[2] for j in jobs * 2]
        assert hol.stats["evictions"] - before >= 2
        assert len(hol.server("plain").zygotes) <= 3
    finally:
        hol.config = saved
    assert_honest_still_right(hol)


@pytest.mark.slow
def test_a_root_killed_under_an_attempt_costs_a_restart_and_a_retry(hol):
    """Slow tier: it pays a second HOL Light load. The attempt reruns on the new server and gets its own verdict."""
    server = hol.server("plain")
    out: dict = {}
    thread = threading.Thread(
        target=lambda: out.setdefault("r", hol.check(replace(TRUE, timeout_s=20), "let rec f () = f () in f ()")))
    thread.start()
    threading.Event().wait(2)
    for pid in server.proc.program_pids():
        os.kill(pid, signal.SIGKILL)
    thread.join(600)
    assert out["r"].verdict is Verdict.TIMEOUT and server.dead, out["r"]
    assert_honest_still_right(hol)  # on a fresh server
    assert hol.server("plain") is not server


# ---------------------------------------------------------------------------------------------
# the default suite, the env, the command line


def test_every_reference_proof_of_the_default_suite_is_accepted(hol):
    from proofgym.envs.tasks.hol_build import DEFAULT_FILES, extract_library
    from proofgym.envs.tasks.suites import SuiteNotFound, load_tasks

    try:
        tasks = load_tasks("hol-light")
    except SuiteNotFound:
        tasks = extract_library("/usr/share/hol-light", DEFAULT_FILES)
    assert len(tasks) >= 20
    rejected = []
    for task in tasks:
        result = hol.check(replace(task, timeout_s=max(task.timeout_s, 600)), task.reference_proof)
        if not result.ok:
            rejected.append(f"{task.id}: {result.verdict.value} {result.reasons}")
    assert not rejected


def test_whole_proof_env_on_hol_light(hol):
    from gymnasium.utils.env_checker import check_env

    from proofgym.envs.proof_env import WholeProofEnv

    tasks = [TRUE, replace(FALSE, id="f")]
    env = WholeProofEnv(tasks=tasks, verifier=hol, max_attempts=2)
    check_env(env, skip_render_check=True)
    obs, _ = env.reset(options={"task_id": "t"})
    assert obs["statement"] == "`1 + 1 = 2`"
    _, reward, terminated, _, info = env.step("ALL_TAC")
    assert info["verdict"] == "FAIL" and not terminated and "1 + 1 = 2" in info["result"].feedback()
    _, reward, terminated, _, info = env.step("ARITH_TAC")
    assert info["verdict"] == "OK" and terminated and reward == 1.0
    obs, _ = env.reset(options={"task_id": "f"})
    _, reward, _, _, info = env.step("CHEAT_TAC")
    assert info["verdict"] == "CHEATING" and reward < 0


def test_cli_check_on_hol_light_on_the_warm_server(hol, tmp_path: Path, monkeypatch, capsys):
    """`proofgym check TASK --proof P --json --strict` on HOL Light, run in-process on the session's server: the
    CLI's task loading, verdict and exit code against the real prover (a fresh CLI process, which pays its own
    HOL Light load, is the slow tier's test below)."""
    import contextlib

    from proofgym import cli
    from proofgym.envs.verifiers import base

    made: list[str] = []

    def the_warm_server(system: str, **kwargs: object):
        made.append(system)
        return contextlib.nullcontext(hol)  # the CLI closes what make_verifier gives it: not the shared server

    monkeypatch.setattr(base, "make_verifier", the_warm_server)
    task = tmp_path / "task.json"
    task.write_text(json.dumps({"id": "demo.hol", "system": "hol_light", "context": "", "statement": "`1 + 1 = 2`",
                                "reference_proof": "ARITH_TAC", "category": "generic", "timeout_s": 60}))
    for proof, verdict, code in (("ACCEPT_TAC (Obj.magic TRUTH)", "CHEATING", cli.EXIT_NOT_OK),
                                 ("ARITH_TAC", "OK", 0)):
        (tmp_path / "proof.ml").write_text(proof)
        assert cli.main(["check", str(task), "--proof", str(tmp_path / "proof.ml"), "--json", "--strict"]) == code
        assert json.loads(capsys.readouterr().out)["verdict"] == verdict
    assert made == ["hol_light", "hol_light"]


def test_prepare_starts_the_tasks_base_and_refuses_an_unknown_one(hol):
    """What the verifier pool runs before a check's deadline starts (tests/test_pool.py): the task's base server,
    started once; an unknown base is a task error at once, not a start-up."""
    from proofgym.envs.errors import TaskFormatError

    starts = hol.stats["server_starts"]
    hol.prepare(TRUE)
    assert hol.stats["server_starts"] == starts and not hol.server("plain").dead
    with pytest.raises(TaskFormatError, match="unknown HOL Light base"):
        hol.prepare(replace(TRUE, metadata={"base": "no-such-base"}))
    assert hol.stats["server_starts"] == starts


@pytest.mark.slow
def test_cli_check_on_hol_light(tmp_path: Path):
    """Slow tier: a fresh `proofgym check` process loads HOL Light itself (about two minutes)."""
    task = tmp_path / "task.json"
    task.write_text(json.dumps({"id": "demo.hol", "system": "hol_light", "context": "", "statement": "`1 + 1 = 2`",
                                "reference_proof": "ARITH_TAC", "category": "generic", "timeout_s": 60}))
    proof = tmp_path / "proof.ml"
    proof.write_text("ACCEPT_TAC (Obj.magic TRUTH)")
    done = subprocess.run([sys.executable, "-m", "proofgym.cli", "check", str(task), "--proof", str(proof), "--json"],
                          capture_output=True, text=True, timeout=1200, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["verdict"] == "CHEATING"
