"""The sandbox contains what a hostile submission tries: reads, writes, network, fork/memory/CPU/file bombs.

Tests marked ``prover`` need a working bubblewrap; the others run the unisolated fallback
(rlimits, own session, pids cgroup) and run everywhere that fallback can.
"""

from __future__ import annotations

import os
import selectors
import signal
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from proofgym.envs.errors import SandboxError
from proofgym.envs.verifiers.sandbox import (
    MAX_CAPTURED_BYTES,
    Sandbox,
    SandboxedProcess,
    SandboxLimits,
    bwrap_available,
)
from proofgym.envs.verifiers.sandbox import bwrap as sandbox_module

PYTHON = "python3"  # the system interpreter: inside bwrap only /usr etc. exist, not the test venv

needs_bwrap = pytest.mark.skipif(
    not bwrap_available(),
    reason="bubblewrap (bwrap) missing or cannot create namespaces here: apt-get install bubblewrap",
)


def _require_python3() -> None:
    if not any(os.access(os.path.join(d, PYTHON), os.X_OK) for d in ("/usr/local/bin", "/usr/bin", "/bin")):
        pytest.skip("no system python3 on the sandbox PATH")


def _require_cgroup(box: Sandbox) -> None:
    if box.process_limit != "cgroup":
        pytest.skip(f"no writable pids cgroup here ({'; '.join(box.warnings)})")


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    return work


@pytest.fixture
def marker() -> Iterator[str]:
    """A unique token put into a job's argv/env; no process carrying it may outlive the test."""
    token = f"PROOFGYM_SANDBOX_TEST_{uuid.uuid4().hex}"
    yield token
    assert _processes_with(token) == [], "a sandboxed process outlived its job"


def _processes_with(token: str) -> list[int]:
    """Live host processes whose argv or environment contains ``token``."""
    needle = token.encode()
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        for part in ("cmdline", "environ"):
            try:
                with open(f"/proc/{entry.name}/{part}", "rb") as f:
                    if needle in f.read():
                        found.append(int(entry.name))
                        break
            except OSError:
                continue
    return found


def _marker_env(token: str) -> dict[str, str]:
    return {"PROOFGYM_TEST_MARKER": token}


def _read_until(job: SandboxedProcess, needle: bytes, timeout_s: float = 10.0) -> bytes:
    """Read the job's stdout until ``needle`` appears (or EOF / timeout), without blocking forever."""
    assert job.proc.stdout is not None
    fd = job.proc.stdout.fileno()
    buf = b""
    deadline = time.monotonic() + timeout_s
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while needle not in buf and time.monotonic() < deadline:
            if sel.select(deadline - time.monotonic()):
                chunk = os.read(fd, 4096)
                if not chunk:
                    break
                buf += chunk
    return buf


def _wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    """Poll ``condition`` until it holds; fail loudly, naming ``what``, after a generous ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout_s:.0f} s")
        time.sleep(0.01)


# ---------------------------------------------------------------------------------------------
# construction and command line


def test_use_bwrap_true_without_bwrap_raises_with_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sandbox_module, "_bwrap_probe", (None, "bwrap is not on PATH"))
    assert not bwrap_available()
    with pytest.raises(SandboxError, match="apt-get install bubblewrap"):
        Sandbox(use_bwrap=True)
    fallback = Sandbox()
    assert not fallback.isolated
    assert any("not isolated" in w for w in fallback.warnings)


def test_limits_are_validated() -> None:
    with pytest.raises(ValueError, match="memory_bytes"):
        SandboxLimits(memory_bytes=0)
    with pytest.raises(ValueError, match="tmp_bytes"):
        SandboxLimits(tmp_bytes=-1)
    with pytest.raises(ValueError, match="ro_binds"):
        Sandbox(use_bwrap=False, ro_binds=["relative/path"])


@pytest.mark.parametrize("network", [False, True])
@pytest.mark.prover
@needs_bwrap
def test_command_line_shape(workdir: Path, network: bool) -> None:
    box = Sandbox(network=network)
    assert box.isolated
    cmd = box.command(["coqc", "-q", "A.v"], workdir)
    assert os.path.basename(cmd[0]) == "bwrap"
    assert cmd[-4:] == ["--", "coqc", "-q", "A.v"]
    for flag in ("--unshare-all", "--unshare-pid", "--die-with-parent", "--new-session", "--clearenv"):
        assert flag in cmd
    assert ("--share-net" in cmd) is network
    bind = cmd.index("--bind")
    assert cmd[bind + 1 : bind + 3] == [str(workdir), str(workdir)]
    assert cmd.count("--bind") == 1, "the workdir must be the only writable host path"
    tmp = cmd.index("/tmp")  # the private /tmp is sized: --size applies to the --tmpfs right after it
    assert cmd[tmp - 3 : tmp] == ["--size", str(box.limits.tmp_bytes), "--tmpfs"]


def test_unisolated_command_is_argv(workdir: Path) -> None:
    box = Sandbox(use_bwrap=False)
    assert not box.isolated
    assert box.command(["true"], workdir) == ["true"]


def test_missing_program_raises_file_not_found(workdir: Path) -> None:
    with pytest.raises(FileNotFoundError):
        Sandbox(use_bwrap=False).run(["proofgym-no-such-program"], workdir=workdir, timeout_s=5)


def test_nonexistent_workdir_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(SandboxError, match="workdir"):
        Sandbox(use_bwrap=False).run(["true"], workdir=tmp_path / "missing", timeout_s=5)


# ---------------------------------------------------------------------------------------------
# filesystem


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    """A file outside the workdir that a job must not read."""
    secret_dir = tmp_path / "secret"
    secret_dir.mkdir()
    path = secret_dir / "key.txt"
    path.write_text(f"TOPSECRET-{uuid.uuid4().hex}\n")
    return path


@pytest.mark.prover
@needs_bwrap
def test_reading_outside_workdir_is_contained(workdir: Path, secret: Path) -> None:
    box = Sandbox()
    token = secret.read_text().strip()
    for path in (str(secret), f"/proc/1/root{secret}", f"/proc/self/root{secret}"):
        run = box.run(["cat", path], workdir=workdir, timeout_s=10)
        assert run.returncode != 0, path
        assert token not in run.stdout + run.stderr
    listing = box.run(["ls", "-a", "/root"], workdir=workdir, timeout_s=10)
    assert listing.returncode != 0
    if os.path.isfile("/etc/shadow"):
        shadow = box.run(["cat", "/etc/shadow"], workdir=workdir, timeout_s=10)
        assert "root:" not in shadow.stdout


@pytest.mark.prover
@needs_bwrap
def test_ro_binds_are_readable_but_not_writable(workdir: Path, secret: Path) -> None:
    """Positive control for the read test: the same ``cat`` succeeds once the dir is bound."""
    box = Sandbox(ro_binds=[str(secret.parent)])
    run = box.run(["cat", str(secret)], workdir=workdir, timeout_s=10)
    assert run.returncode == 0 and run.stdout == secret.read_text()
    write = box.run(["sh", "-c", f"echo x > {secret.parent}/new"], workdir=workdir, timeout_s=10)
    assert write.returncode != 0
    assert not (secret.parent / "new").exists()


@pytest.mark.prover
@needs_bwrap
def test_writing_outside_workdir_is_contained(workdir: Path, secret: Path) -> None:
    name = f"proofgym-escape-{uuid.uuid4().hex}"
    targets = [f"/usr/{name}", f"/etc/{name}", f"/tmp/{name}", str(secret.parent / name)]
    script = "".join(f'echo pwned > "{t}" && echo "WROTE {t}"; ' for t in targets)
    script += f'mkdir -p "{secret.parent}" && echo pwned > "{secret.parent}/{name}.2"; echo ok > inside.txt'
    planted = [Path(t) for t in targets] + [secret.parent / f"{name}.2"]
    try:
        run = Sandbox().run(["sh", "-c", script], workdir=workdir, timeout_s=10)
        for path in planted:
            assert not path.exists(), f"{path} escaped the sandbox"
        assert "WROTE /usr/" not in run.stdout and "WROTE /etc/" not in run.stdout  # read-only, even inside
        assert (workdir / "inside.txt").read_text() == "ok\n", "writes inside the workdir must reach the host"
    finally:
        for path in planted:  # only ever files this test named; present only if the sandbox is broken
            path.unlink(missing_ok=True)


def test_host_environment_does_not_leak(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROOFGYM_FAKE_API_KEY", "sk-should-not-leak")
    for box in [Sandbox(use_bwrap=False)] + ([Sandbox()] if bwrap_available() else []):
        run = box.run(["env"], workdir=workdir, timeout_s=10, env={"EXTRA": "1"})
        assert "sk-should-not-leak" not in run.stdout
        env = dict(line.split("=", 1) for line in run.stdout.splitlines() if "=" in line)
        assert env["HOME"] == str(workdir) and env["EXTRA"] == "1" and env["LANG"] == "C.UTF-8"


# ---------------------------------------------------------------------------------------------
# network


class _Listener:
    """A TCP listener on 127.0.0.1 (ephemeral port) that counts accepted connections."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._peers: list[tuple[str, int]] = []  # in the order accept() returned them
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, peer = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            conn.close()
            with self._changed:
                self.accepted += 1
                self._peers.append(peer)
                self._changed.notify_all()

    def accepted_before_probe(self, timeout_s: float = 60.0) -> int:
        """How many connections reached the listener before a probe connection of the test's own.

        The kernel hands out queued connections in arrival order, so once the probe has been accepted every
        connection made before it (a sandboxed program's, which has exited by then) has been counted: no sleep
        to let a late one arrive. The probe being accepted is also the positive control that the listener counts.
        """
        with socket.create_connection(("127.0.0.1", self.port), timeout=timeout_s) as probe:
            me = probe.getsockname()[:2]
            with self._changed:
                if not self._changed.wait_for(lambda: me in self._peers, timeout=timeout_s):
                    raise AssertionError(f"the listener never accepted the probe connection within {timeout_s:.0f} s")
                return self._peers.index(me)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()


@pytest.fixture
def listener() -> Iterator[_Listener]:
    srv = _Listener()
    yield srv
    srv.close()


def _connect_script(port: int) -> str:
    # Only ever 127.0.0.1: the listener this test owns.
    return f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=3)\nprint('CONNECTED')\n"


@pytest.mark.prover
@needs_bwrap
def test_network_is_contained(workdir: Path, listener: _Listener) -> None:
    _require_python3()
    run = Sandbox().run([PYTHON, "-c", _connect_script(listener.port)], workdir=workdir, timeout_s=10)
    assert run.returncode != 0
    assert "CONNECTED" not in run.stdout
    assert listener.accepted_before_probe() == 0


@pytest.mark.prover
@needs_bwrap
def test_network_true_reaches_the_host_listener(workdir: Path, listener: _Listener) -> None:
    """Positive control for the network test: with network=True the same connection succeeds."""
    _require_python3()
    run = Sandbox(network=True).run([PYTHON, "-c", _connect_script(listener.port)], workdir=workdir, timeout_s=10)
    assert run.returncode == 0 and "CONNECTED" in run.stdout, run.stderr
    assert listener.accepted_before_probe() == 1


# ---------------------------------------------------------------------------------------------
# resource bombs

FORK_BOMB = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
SHELL_FORK_BOMB = "bomb() { bomb | bomb & }; bomb; wait"


def _sandboxes(isolated: bool) -> Sandbox:
    if isolated and not bwrap_available():
        pytest.skip("bubblewrap (bwrap) missing or cannot create namespaces here: apt-get install bubblewrap")
    return Sandbox(SandboxLimits(max_processes=32, memory_bytes=512 * 1024**2), use_bwrap=isolated)


ISOLATION = [pytest.param(True, marks=pytest.mark.prover, id="bwrap"), pytest.param(False, id="unisolated")]


@pytest.mark.parametrize("isolated", ISOLATION)
def test_fork_bomb_is_bounded_and_fully_killed(workdir: Path, marker: str, isolated: bool) -> None:
    _require_python3()
    box = _sandboxes(isolated)
    _require_cgroup(box)
    timeout = 2.0
    run = box.run([PYTHON, "-c", FORK_BOMB, marker], workdir=workdir, timeout_s=timeout, env=_marker_env(marker))
    # The deadline is the sandbox's: timed_out says the job was killed there (no wall-clock threshold here).
    assert run.timed_out and run.returncode is None and run.signal == signal.SIGKILL
    assert _processes_with(marker) == []
    if run.peak_processes is not None:
        assert run.peak_processes <= box.limits.max_processes
        assert run.peak_processes > 8, "the bomb should have forked up to the limit"


@pytest.mark.prover
@needs_bwrap
def test_shell_fork_bomb_is_fully_killed(workdir: Path, marker: str) -> None:
    box = _sandboxes(True)
    _require_cgroup(box)
    # The shell itself returns at once (`wait` waits only for the first pipeline): what matters is that the
    # bombs it left running die with the job.
    run = box.run(["sh", "-c", SHELL_FORK_BOMB, marker], workdir=workdir, timeout_s=2, env=_marker_env(marker))
    assert _processes_with(marker) == []
    if run.peak_processes is not None:
        assert run.peak_processes <= box.limits.max_processes


@pytest.mark.parametrize("isolated", ISOLATION)
def test_memory_bomb_fails_under_the_address_space_limit(workdir: Path, isolated: bool) -> None:
    _require_python3()
    box = _sandboxes(isolated)
    bomb = "chunks = []\nwhile True:\n    chunks.append(bytearray(1024**3))\n"
    run = box.run([PYTHON, "-c", bomb], workdir=workdir, timeout_s=20)
    assert not run.timed_out
    assert run.returncode != 0
    assert "MemoryError" in run.stderr or run.signal is not None


#: A busy loop that prints its own CPU seconds (time.process_time) every 10 ms of CPU, until it is killed.
REPORTING_BUSY_LOOP = (
    "import time\n"
    "while True:\n"
    "    start = time.process_time()\n"
    "    print(start, flush=True)\n"
    "    while time.process_time() - start < 0.01:\n"
    "        pass\n"
)


@pytest.mark.parametrize("isolated", ISOLATION)
def test_busy_loop_is_killed_at_the_deadline(workdir: Path, marker: str, isolated: bool) -> None:
    _require_python3()
    box = _sandboxes(isolated)
    run = box.run([PYTHON, "-c", REPORTING_BUSY_LOOP, marker], workdir=workdir, timeout_s=2, env=_marker_env(marker))
    assert run.timed_out and run.returncode is None
    # The CPU the loop said it had burnt before it was killed is counted (not a threshold: however little CPU a
    # loaded machine gave it). A last line without its newline was cut by the kill; cgroups count microseconds.
    reported = [float(line) for line in run.stdout.split("\n")[:-1]]
    assert reported, f"the loop never reported its CPU time: {run.stdout!r} {run.stderr!r}"
    assert run.cpu_s >= reported[-1] - 1e-3, (run.cpu_s, reported[-1])
    assert _processes_with(marker) == []


@pytest.mark.parametrize("isolated", ISOLATION)
def test_background_children_do_not_outlive_the_run(workdir: Path, marker: str, isolated: bool) -> None:
    box = _sandboxes(isolated)
    # setsid escapes the process group; only the cgroup (or the pid namespace) still holds it.
    script = (
        "setsid sh -c 'echo $$ > bg.pid; exec sleep 60' & sleep 60 & while [ ! -s bg.pid ]; do :; done; echo started"
    )
    run = box.run(["sh", "-c", script, marker], workdir=workdir, timeout_s=10, env=_marker_env(marker))
    assert run.returncode == 0 and "started" in run.stdout
    if box.process_limit == "cgroup" or box.isolated:
        assert _processes_with(marker) == []


@pytest.mark.parametrize("isolated", ISOLATION)
def test_cpu_rlimit_applies(workdir: Path, isolated: bool) -> None:
    box = Sandbox(SandboxLimits(cpu_seconds=1), use_bwrap=isolated) if not isolated or bwrap_available() else None
    if box is None:
        pytest.skip("bubblewrap (bwrap) missing or cannot create namespaces here: apt-get install bubblewrap")
    run = box.run(["sh", "-c", "while :; do :; done"], workdir=workdir, timeout_s=15)
    assert not run.timed_out, "RLIMIT_CPU should end the loop long before the wall deadline"
    assert run.signal in (signal.SIGXCPU, signal.SIGKILL)


@pytest.mark.parametrize("isolated", ISOLATION)
def test_file_size_limit(workdir: Path, isolated: bool) -> None:
    if isolated and not bwrap_available():
        pytest.skip("bubblewrap (bwrap) missing or cannot create namespaces here: apt-get install bubblewrap")
    box = Sandbox(SandboxLimits(file_size_bytes=1024**2), use_bwrap=isolated)
    run = box.run(["dd", "if=/dev/zero", "of=big.bin", "bs=1M", "count=10"], workdir=workdir, timeout_s=10)
    assert run.returncode != 0
    assert run.signal == signal.SIGXFSZ  # dd itself, not a shell, is killed: the signal is reported as such
    assert (workdir / "big.bin").stat().st_size <= 1024**2


@pytest.mark.prover
@needs_bwrap
def test_filling_the_temp_dir_stops_at_its_cap(workdir: Path) -> None:
    """Many files, each under the per-file limit, stop at the tmpfs size; the host's /tmp never sees them."""
    cap = 8 * 1024**2
    box = Sandbox(SandboxLimits(tmp_bytes=cap, file_size_bytes=4 * 1024**2))
    prefix = f"proofgym-fill-{uuid.uuid4().hex}"
    script = (f'i=0; while [ $i -lt 6 ]; do dd if=/dev/zero of=/tmp/{prefix}-$i bs=1M count=3 2>>err.txt || break; '
              f'i=$((i+1)); done; echo "files=$i"; cat /tmp/{prefix}-* | wc -c')
    run = box.run(["sh", "-c", script], workdir=workdir, timeout_s=20)
    assert run.returncode == 0, run.stderr
    assert "No space left on device" in (workdir / "err.txt").read_text()
    files, written = run.stdout.split()
    assert files != "files=6", "18 MiB fitted in an 8 MiB /tmp"
    assert cap - 1024**2 <= int(written) <= cap, "it should fill up to the cap, and no further"
    assert not [p for p in Path("/tmp").iterdir() if p.name.startswith(prefix)], "the host's /tmp was written"
    # the next job gets an empty /tmp again
    again = box.run(["sh", "-c", f"ls /tmp | grep -c {prefix} || true"], workdir=workdir, timeout_s=10)
    assert again.stdout.strip() == "0"


@pytest.mark.parametrize("isolated", ISOLATION)
def test_huge_output_is_capped_without_hanging(workdir: Path, isolated: bool) -> None:
    if isolated and not bwrap_available():
        pytest.skip("bubblewrap (bwrap) missing or cannot create namespaces here: apt-get install bubblewrap")
    box = Sandbox(use_bwrap=isolated)
    run = box.run(["sh", "-c", "head -c 20000000 /dev/zero; echo done >&2"], workdir=workdir, timeout_s=20)
    assert run.returncode == 0 and not run.timed_out
    assert len(run.stdout) == MAX_CAPTURED_BYTES and run.output_truncated
    assert run.stderr == "done\n"


def test_stdin_is_fed(workdir: Path) -> None:
    data = "∀ n : ℕ, n + 0 = n\n" * 50_000  # larger than a pipe buffer
    run = Sandbox(use_bwrap=False).run(["cat"], workdir=workdir, timeout_s=10, input=data)
    assert run.returncode == 0 and run.stdout == data


# ---------------------------------------------------------------------------------------------
# live processes


INT_SCRIPT = (
    "import signal, sys, time\n"
    "count = 0\n"
    "def on_int(*_):\n"
    "    global count\n"
    "    count += 1\n"
    "    print(f'INT{count}', flush=True)\n"
    "    if count == 2:\n"
    "        sys.exit(0)\n"
    "signal.signal(signal.SIGINT, on_int)\n"
    "print('READY', flush=True)\n"
    "while True:\n"
    "    time.sleep(30)\n"
)


@pytest.mark.parametrize("isolated", ISOLATION)
def test_interrupt_reaches_the_program_without_killing_it(workdir: Path, isolated: bool) -> None:
    _require_python3()
    if isolated and not bwrap_available():
        pytest.skip("bubblewrap (bwrap) missing or cannot create namespaces here: apt-get install bubblewrap")
    with Sandbox(use_bwrap=isolated).popen([PYTHON, "-u", "-c", INT_SCRIPT], workdir=workdir) as job:
        assert b"READY" in _read_until(job, b"READY")
        assert job.interrupt()
        assert b"INT1" in _read_until(job, b"INT1")
        assert job.alive(), "SIGINT must interrupt the program, not kill bwrap or the job"
        assert job.interrupt()
        assert b"INT2" in _read_until(job, b"INT2")
        assert job.wait(timeout=10) == 0  # the handler exited cleanly
        assert not job.alive()
        assert not job.interrupt()


@pytest.mark.parametrize("isolated", ISOLATION)
def test_relative_program_runs_from_the_workdir(workdir: Path, isolated: bool) -> None:
    if isolated and not bwrap_available():
        pytest.skip("bubblewrap (bwrap) missing or cannot create namespaces here: apt-get install bubblewrap")
    script = workdir / "prog.sh"
    script.write_text('#!/bin/sh\necho "hi from $(pwd)"\n')
    script.chmod(0o755)
    run = Sandbox(use_bwrap=isolated).run(["./prog.sh"], workdir=workdir, timeout_s=10)
    assert run.returncode == 0 and run.stdout == f"hi from {workdir}\n"


@pytest.mark.parametrize("isolated", ISOLATION)
def test_context_manager_kills_and_close_is_idempotent(workdir: Path, marker: str, isolated: bool) -> None:
    if isolated and not bwrap_available():
        pytest.skip("bubblewrap (bwrap) missing or cannot create namespaces here: apt-get install bubblewrap")
    box = Sandbox(use_bwrap=isolated)
    with box.popen(["sh", "-c", "sleep 60 & sleep 60", marker], workdir=workdir, env=_marker_env(marker)) as job:
        expected = 2 + (2 if isolated else 0)  # sh and its sleep (+ the two bwrap processes)
        _wait_for(lambda: len(_processes_with(marker)) >= expected, f"the job's {expected} processes are running")
        assert job.alive()
        assert _processes_with(marker), "the job should be running"
    assert not job.alive()
    assert job.proc.returncode is not None
    job.close()
    job.kill()
    if box.process_limit == "cgroup" or isolated:
        assert _processes_with(marker) == []


@pytest.mark.parametrize("isolated", ISOLATION)
def test_without_a_cgroup_it_degrades_with_a_warning(
    workdir: Path, marker: str, isolated: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if isolated and not bwrap_available():
        pytest.skip("bubblewrap (bwrap) missing or cannot create namespaces here: apt-get install bubblewrap")
    monkeypatch.setattr(sandbox_module, "_cgroup_layout", sandbox_module._CgroupLayout(None, None, False, "test"))
    box = Sandbox(use_bwrap=isolated)
    assert box.process_limit == ("none" if os.geteuid() == 0 else "rlimit")
    assert any("max_processes" in w for w in box.warnings)
    run = box.run(
        ["sh", "-c", "sleep 60 & echo started", marker], workdir=workdir, timeout_s=10, env=_marker_env(marker)
    )
    assert run.returncode == 0 and run.stdout == "started\n" and run.peak_processes is None
    busy = box.run(["sh", "-c", "while :; do :; done", marker], workdir=workdir, timeout_s=1, env=_marker_env(marker))
    assert busy.timed_out  # killed at the deadline, by the sandbox's own report
    assert _processes_with(marker) == []


def test_cgroup_is_removed_after_the_job(workdir: Path) -> None:
    box = Sandbox(use_bwrap=False)
    _require_cgroup(box)
    job = box.popen(["sleep", "60"], workdir=workdir)
    cgroups = job._cgroups
    assert cgroups is not None and cgroups.pids_dir.is_dir()
    assert job.pid in cgroups.members()
    job.close()
    assert not cgroups.pids_dir.exists()



def test_a_job_is_one_scheduling_group_where_the_cpu_controller_allows(workdir: Path) -> None:
    """With a v1 cpu controller of its own, every task of a job is in the job's cpu cgroup, so a fork bomb's
    hundreds of spinning children share one group's CPU weight instead of starving the rest of the machine."""
    box = Sandbox(use_bwrap=False)
    _require_cgroup(box)
    v1, _ = sandbox_module._cgroup_mounts()
    if "cpu" not in v1 or v1["cpu"] == v1.get("cpuacct"):
        pytest.skip("no separate v1 cpu controller here (cgroup2, or cpu co-mounted with cpuacct)")
    if sandbox_module._cgroups().sched_parent is None:
        pytest.skip("the v1 cpu controller is not writable here")
    job = box.popen(["sh", "-c", "sleep 60 & sleep 60"], workdir=workdir)
    try:
        cgroups = job._cgroups
        assert cgroups is not None and cgroups.sched_dir is not None and cgroups.sched_dir.is_dir()
        _wait_for(lambda: len(cgroups.members()) >= 2, "both of the job's processes are in its cgroup")
        scheduled = [int(p) for p in (cgroups.sched_dir / "cgroup.procs").read_text().split()]
        assert sorted(scheduled) == sorted(cgroups.members()) and len(scheduled) >= 2
    finally:
        job.close()
    assert not cgroups.sched_dir.exists()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
