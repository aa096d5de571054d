"""Run untrusted prover jobs in a sandbox: no network, read-only system, one writable dir, hard limits.

Every check a verifier runs goes through :class:`Sandbox`. With bubblewrap (``bwrap``) the job gets
its own mount, pid, network, IPC and UTS namespaces: ``/usr``, ``/etc`` and the other system dirs
are bound read-only, ``/tmp`` is a private tmpfs of at most ``tmp_bytes``, and the task's ``workdir``
is the only writable host path. Resource limits are rlimits (address space, CPU seconds, file size,
open files) plus a pids cgroup that bounds the number of tasks of the whole tree (fork bombs). The deadline is
enforced from outside: the trusted parent SIGKILLs the process group and every member of the
cgroup, so nothing a submission starts outlives its run.

Without bubblewrap, :class:`Sandbox` can still run jobs rlimited and in their own session and
cgroup (``isolated`` is then ``False``); :attr:`Sandbox.warnings` lists every protection that is
missing on this machine.

Example::

    sandbox = Sandbox(SandboxLimits(memory_bytes=2 * 1024**3), ro_binds=["/opt/coq"])
    result = sandbox.run(["coqc", "Proof.v"], workdir=task_dir, timeout_s=60)
    if result.timed_out: ...
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import logging
import os
import resource
import select
import selectors
import shutil
import signal as signal_module
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal

from proofgym.envs.errors import SandboxError
from proofgym.envs.verifiers.sandbox.procfs import children, descendants

__all__ = [
    "DEFAULT_LIMITS",
    "MAX_CAPTURED_BYTES",
    "Sandbox",
    "SandboxLimits",
    "SandboxRun",
    "SandboxedProcess",
    "bwrap_available",
]

logger = logging.getLogger(__name__)

#: Most bytes kept per stream by :meth:`Sandbox.run`; the rest is read and dropped so the job never blocks.
MAX_CAPTURED_BYTES = 8 * 1024**2

#: System directories bound read-only into the sandbox (those that exist; symlinks are recreated as symlinks).
SYSTEM_RO_PATHS = ("/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/etc")

#: Secrets under /etc hidden inside the sandbox. The job runs as uid 0 (without capabilities) and owns them.
MASKED_FILES = ("/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-")
MASKED_DIRS = ("/etc/ssh", "/etc/ssl/private")

SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"

#: How long kill() keeps sweeping a cgroup that is still spawning before it gives up.
_KILL_SWEEP_S = 5.0
#: After the job ends, how long run() keeps reading pipes still held open by escaped writers.
_DRAIN_GRACE_S = 1.0
_CGROUP_PREFIX = "proofgym-"


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of one sandboxed job.

    Attributes:
        memory_bytes: address-space limit (``RLIMIT_AS``) of every process in the job, bwrap included.
        cpu_seconds: CPU-time limit (``RLIMIT_CPU``) per process; SIGXCPU at this, SIGKILL 5 s later.
            The wall-clock deadline of :meth:`Sandbox.run` is separate and usually hits first.
        max_processes: most tasks (processes *and threads*, bwrap's two included) alive at once in the
            job's pids cgroup; ``RLIMIT_NPROC`` (per user, not per job) where no cgroup is writable.
        file_size_bytes: largest file the job may write (``RLIMIT_FSIZE``).
        open_files: most open file descriptors per process (``RLIMIT_NOFILE``).
        tmp_bytes: size of the job's private ``/tmp`` (a tmpfs, so it is memory while it lasts); writing
            more fails with ``ENOSPC``. ``RLIMIT_FSIZE`` bounds one file, this bounds all of them.
    """

    memory_bytes: int = 4 * 1024**3
    cpu_seconds: int = 900
    max_processes: int = 64
    file_size_bytes: int = 256 * 1024**2
    open_files: int = 1024
    tmp_bytes: int = 256 * 1024**2

    def __post_init__(self) -> None:
        for name in ("memory_bytes", "cpu_seconds", "max_processes", "file_size_bytes", "open_files", "tmp_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"SandboxLimits.{name} must be a positive int, got {value!r}")


DEFAULT_LIMITS = SandboxLimits()


@dataclass(frozen=True)
class SandboxRun:
    """What a finished (or killed) sandboxed job did.

    Attributes:
        returncode: exit status as :class:`subprocess.Popen` reports it (negative: killed by that
            signal). With bwrap, a job killed by a signal exits ``128 + signal`` (shell convention),
            and :attr:`signal` is filled in. ``None`` when the job was killed at its deadline.
        stdout: captured standard output (UTF-8, undecodable bytes replaced), at most
            :data:`MAX_CAPTURED_BYTES` of it.
        stderr: captured standard error, likewise.
        wall_s: wall-clock seconds from start to the end of the job.
        cpu_s: user + system CPU seconds of the whole sandboxed tree (the larger of the child's
            ``wait4`` rusage and the cpuacct cgroup's usage, which also counts killed processes).
        timed_out: the deadline passed and the job was killed from outside.
        signal: the signal that ended the job, if one did (``SIGKILL`` after a timeout).
        output_truncated: stdout or stderr exceeded :data:`MAX_CAPTURED_BYTES` and was cut.
        peak_processes: most tasks alive at once in the job's pids cgroup, when the kernel reports it.
    """

    returncode: int | None
    stdout: str
    stderr: str
    wall_s: float
    cpu_s: float
    timed_out: bool
    signal: int | None
    output_truncated: bool = False
    peak_processes: int | None = None


# --------------------------------------------------------------------------------------------
# bubblewrap detection


_probe_lock = threading.Lock()
_bwrap_probe: tuple[str | None, str] | None = None  # (absolute bwrap path or None, reason when None)


def _system_mount_args() -> list[str]:
    """bwrap arguments that recreate the host's read-only system dirs (symlinks stay symlinks)."""
    args: list[str] = []
    for path in SYSTEM_RO_PATHS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    for path in MASKED_FILES:
        if os.path.isfile(path):
            args += ["--ro-bind", "/dev/null", path]
    for path in MASKED_DIRS:
        if os.path.isdir(path) and not os.path.islink(path):
            args += ["--size", "4096", "--tmpfs", path, "--remount-ro", path]  # an empty read-only mask
    return args


def _probe_bwrap() -> tuple[str | None, str]:
    global _bwrap_probe
    with _probe_lock:
        if _bwrap_probe is None:
            _bwrap_probe = _run_bwrap_probe()
        return _bwrap_probe


def _run_bwrap_probe() -> tuple[str | None, str]:
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return None, "bwrap is not on PATH"
    bwrap = os.path.realpath(bwrap)
    argv = [
        bwrap,
        "--unshare-all",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        *_system_mount_args(),
        "--size",
        str(DEFAULT_LIMITS.tmp_bytes),
        "--tmpfs",
        "/tmp",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--",
        "true",
    ]
    try:
        done = subprocess.run(argv, capture_output=True, timeout=30, env={"PATH": SANDBOX_PATH}, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"running bwrap failed: {exc}"
    if done.returncode != 0:
        reason = done.stderr.decode("utf-8", "replace").strip().replace("\n", " ") or f"exit {done.returncode}"
        return None, f"bwrap cannot create a sandbox here: {reason}"
    return bwrap, ""


def bwrap_available() -> bool:
    """Whether bubblewrap is installed and can create namespaces here (probed once, then cached)."""
    return _probe_bwrap()[0] is not None


# --------------------------------------------------------------------------------------------
# pids / cpuacct cgroups


@dataclass(frozen=True)
class _CgroupLayout:
    """Where this process may create per-job cgroups (discovered and probed once)."""

    pids_parent: Path | None
    cpu_parent: Path | None  # cpuacct (v1) or the same dir as pids (v2)
    v2: bool
    reason: str  # why pids_parent is None
    # v1 "cpu" controller: the job's tasks are one scheduling group, so a fork bomb of hundreds of spinning
    # children gets one group's share of the CPU instead of hundreds of shares (which starve the machine).
    # None where the controller is absent or shared with cpuacct (then cpu_parent's group is the same thing).
    sched_parent: Path | None = None


def _own_cgroup_paths() -> dict[str, str]:
    """Controller name (``""`` for cgroup2) -> this process's cgroup path in that hierarchy."""
    paths: dict[str, str] = {}
    with contextlib.suppress(OSError), open("/proc/self/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for name in controllers.split(",") if controllers else [""]:
                paths[name] = path
    return paths


def _cgroup_mounts() -> tuple[dict[str, str], str | None]:
    """v1 controller -> mount point, and the cgroup2 mount point (if any)."""
    v1: dict[str, str] = {}
    v2: str | None = None
    with contextlib.suppress(OSError), open("/proc/self/mounts") as f:
        for line in f:
            fields = line.split()
            if len(fields) < 4:
                continue
            mount_point = fields[1].replace("\\040", " ")
            if fields[2] == "cgroup":
                for option in fields[3].split(","):
                    v1.setdefault(option, mount_point)
            elif fields[2] == "cgroup2" and v2 is None:
                v2 = mount_point
    return v1, v2


def _writable_child_parent(parent: Path, probe_file: str) -> bool:
    """Whether we can make a child cgroup under ``parent`` that has ``probe_file`` (e.g. pids.max)."""
    probe = parent / f"{_CGROUP_PREFIX}probe-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        probe.mkdir()
    except OSError:
        return False
    try:
        if probe_file == "pids.max":
            (probe / "pids.max").write_text("max")
        return (probe / probe_file).exists()
    except OSError:
        return False
    finally:
        with contextlib.suppress(OSError):
            probe.rmdir()


def _discover_cgroups() -> _CgroupLayout:
    v1, v2_mount = _cgroup_mounts()
    own = _own_cgroup_paths()
    pids_parent = cpu_parent = sched_parent = None
    v2 = False
    if "pids" in v1 and "pids" in own:
        parent = Path(v1["pids"] + own["pids"])
        if _writable_child_parent(parent, "pids.max"):
            pids_parent = parent
        if "cpuacct" in v1 and "cpuacct" in own:
            cpu = Path(v1["cpuacct"] + own["cpuacct"])
            if _writable_child_parent(cpu, "cpuacct.usage"):
                cpu_parent = cpu
        if "cpu" in v1 and "cpu" in own and v1["cpu"] != v1.get("cpuacct"):
            sched = Path(v1["cpu"] + own["cpu"])
            if _writable_child_parent(sched, "cpu.shares"):
                sched_parent = sched
    if pids_parent is None and v2_mount is not None and "" in own:
        parent = Path(v2_mount + own[""])
        if _writable_child_parent(parent, "pids.max"):
            pids_parent = cpu_parent = parent
            v2 = True
    if pids_parent is None:
        return _CgroupLayout(None, None, False, "no writable pids cgroup (v1 pids controller or cgroup2 with pids)")
    # Creating a group is not enough: a child must also be allowed to move itself into it. The scheduling
    # group is an addition: where a child cannot join it, jobs still get their pids (and cpuacct) groups.
    for layout in ([_CgroupLayout(pids_parent, cpu_parent, v2, "", sched_parent)] if sched_parent else []) \
            + [_CgroupLayout(pids_parent, cpu_parent, v2, "")]:
        group = _JobCgroups(layout, max_processes=4)
        try:
            subprocess.run(["true"], preexec_fn=group.join_in_child, env={"PATH": SANDBOX_PATH}, check=True,
                           timeout=30)
            return layout
        except (OSError, subprocess.SubprocessError) as exc:
            failure = exc
        finally:
            group.remove()
    return _CgroupLayout(None, None, False, f"cannot move a process into a pids cgroup: {failure}")


_cgroup_layout: _CgroupLayout | None = None


def _cgroups() -> _CgroupLayout:
    global _cgroup_layout
    with _probe_lock:
        if _cgroup_layout is None:
            _cgroup_layout = _discover_cgroups()
            for parent in (_cgroup_layout.pids_parent, _cgroup_layout.cpu_parent, _cgroup_layout.sched_parent):
                if parent is not None:
                    _remove_stale_cgroups(parent)
        return _cgroup_layout


def _remove_stale_cgroups(parent: Path) -> None:
    """rmdir empty job cgroups left by proofgym processes that died without cleaning up."""
    with contextlib.suppress(OSError):
        for child in parent.iterdir():
            if not child.name.startswith(_CGROUP_PREFIX):
                continue
            owner = child.name[len(_CGROUP_PREFIX) :].split("-", 1)[0]
            if owner.isdigit() and not os.path.exists(f"/proc/{owner}"):
                with contextlib.suppress(OSError):
                    child.rmdir()


_group_counter = itertools.count()
_logged_warnings: set[str] = set()


class _JobCgroups:
    """The pids (and cpuacct) cgroup of one sandboxed job."""

    def __init__(self, layout: _CgroupLayout, max_processes: int) -> None:
        if layout.pids_parent is None:
            raise SandboxError("no writable pids cgroup on this machine")
        name = f"{_CGROUP_PREFIX}{os.getpid()}-{next(_group_counter)}-{uuid.uuid4().hex[:8]}"
        self.pids_dir = layout.pids_parent / name
        self.cpu_dir = layout.cpu_parent / name if layout.cpu_parent is not None else None
        self.v2 = layout.v2
        self.peak: int | None = None
        self._cpu_s: float | None = None
        self.sched_dir = layout.sched_parent / name if layout.sched_parent is not None else None
        self._dirs = [self.pids_dir] + [d for d in (self.cpu_dir, self.sched_dir) if d not in (None, self.pids_dir)]
        made: list[Path] = []
        try:
            for d in self._dirs:
                d.mkdir()
                made.append(d)
            (self.pids_dir / "pids.max").write_text(str(max_processes))
        except OSError as exc:
            for d in made:
                with contextlib.suppress(OSError):
                    d.rmdir()
            raise SandboxError(f"cannot create the job's pids cgroup under {layout.pids_parent}: {exc}") from None
        # Encoded now: the preexec hook must not allocate much or import anything after fork().
        self._procs_files = [os.fsencode(d / "cgroup.procs") for d in self._dirs]

    def join_in_child(self) -> None:
        """Runs in the forked child before exec: move it (and so all it spawns) into the job's cgroups."""
        pid = str(os.getpid()).encode()
        for path in self._procs_files:
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, pid)
            finally:
                os.close(fd)

    def members(self) -> list[int]:
        try:
            text = (self.pids_dir / "cgroup.procs").read_text()
        except OSError:
            return []
        return [int(p) for p in text.split()]

    def kill_all(self, timeout_s: float = _KILL_SWEEP_S) -> bool:
        """SIGKILL every member until none is left (pids.max bounds how fast a bomb can refill)."""
        deadline = time.monotonic() + timeout_s
        delay = 0.001
        while True:
            members = self.members()
            if not members:
                return True
            for pid in members:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal_module.SIGKILL)
            if time.monotonic() > deadline:
                return False
            time.sleep(delay)
            delay = min(delay * 2, 0.05)

    def read_stats(self) -> None:
        """Record peak task count and CPU time before the groups are removed."""
        with contextlib.suppress(OSError, ValueError):
            self.peak = int((self.pids_dir / "pids.peak").read_text().split()[0])
        if self.cpu_dir is None:
            return
        with contextlib.suppress(OSError, ValueError):
            if self.v2:
                for line in (self.cpu_dir / "cpu.stat").read_text().splitlines():
                    key, _, value = line.partition(" ")
                    if key == "usage_usec":
                        self._cpu_s = int(value) / 1e6
            else:
                self._cpu_s = int((self.cpu_dir / "cpuacct.usage").read_text()) / 1e9

    @property
    def cpu_s(self) -> float | None:
        return self._cpu_s

    def remove(self, timeout_s: float = 2.0) -> bool:
        """rmdir the groups; waits briefly for exiting tasks to be released."""
        deadline = time.monotonic() + timeout_s
        left = list(self._dirs)
        while left:
            for d in list(left):
                try:
                    d.rmdir()
                    left.remove(d)
                except FileNotFoundError:
                    left.remove(d)
                except OSError:
                    pass
            if not left or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        if left:
            logger.warning("could not remove sandbox cgroup(s) %s; they are removed by a later run", left)
        return not left


# --------------------------------------------------------------------------------------------
# /proc helpers


def _stat_ppid_pgid(pid: int) -> tuple[int, int] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2 :].split()  # the comm field may itself contain spaces and ')'
    try:
        return int(fields[1]), int(fields[2])
    except (IndexError, ValueError):
        return None


def _findable(program: str, workdir: Path, path: str) -> bool:
    """Whether ``program`` resolves as the job would resolve it (PATH lookup; a relative path from ``workdir``)."""
    if os.sep in program:
        return os.access(workdir / program, os.X_OK)  # an absolute ``program`` replaces workdir
    return shutil.which(program, path=path) is not None


def _exe(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return None


# --------------------------------------------------------------------------------------------
# processes


class SandboxedProcess:
    """A running sandboxed job; owns its whole process tree and cgroup. Use it as a context manager.

    ``proc`` is the :class:`subprocess.Popen` of the outermost process (``bwrap`` when isolated),
    in binary mode; write to ``proc.stdin`` (and flush) and read ``proc.stdout`` as with any Popen.
    Reap it through :meth:`wait` (not ``proc.wait()``), which keeps the rusage for CPU accounting.
    """

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        *,
        cgroups: _JobCgroups | None,
        isolated: bool,
        bwrap_path: str | None,
    ) -> None:
        self.proc = proc
        self.pid = proc.pid
        self.isolated = isolated
        self._cgroups = cgroups
        self._bwrap_path = bwrap_path
        self._lock = threading.RLock()
        self._rusage: resource.struct_rusage | None = None
        self._killed = False
        self._pidfd: int | None = None
        self._program: tuple[int, list[int]] | None = None  # (bwrap's pid-namespace init, program pids)
        with contextlib.suppress(AttributeError, OSError):
            self._pidfd = os.pidfd_open(proc.pid)

    # -- lifetime -------------------------------------------------------------------------

    def __enter__(self) -> SandboxedProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _try_reap(self, block: bool = False) -> bool:
        """Reap the outer process with wait4 (keeping its rusage); True once it is gone."""
        with self._lock:
            if self.proc.returncode is not None:
                return True
            try:
                pid, status, rusage = os.wait4(self.pid, 0 if block else os.WNOHANG)
            except ChildProcessError:  # someone else reaped it (e.g. proc.wait()); rusage is lost
                self.proc.poll()
                if self.proc.returncode is None:
                    self.proc.returncode = 0
                return True
            if pid == 0:
                return False
            self._rusage = rusage
            self.proc.returncode = os.waitstatus_to_exitcode(status)
            return True

    def alive(self) -> bool:
        """Whether the outer process has not exited yet."""
        return not self._try_reap()

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait for the outer process to exit; its return code, or ``None`` if ``timeout`` passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 0.001
        while not self._try_reap():
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return None
            pidfd = self._pidfd
            if pidfd is not None:
                # Short slices: kill() in another thread may close the pidfd under us.
                poller = select.poll()
                poller.register(pidfd, select.POLLIN)
                poller.poll(max(1, int(1000 * min(0.1, 0.1 if remaining is None else remaining))))
            else:
                time.sleep(delay if remaining is None else min(delay, remaining))
                delay = min(delay * 2, 0.05)
        return self.proc.returncode

    @property
    def cpu_s(self) -> float:
        """CPU seconds (user + sys) of the tree so far as known: cgroup accounting, else the reaped rusage."""
        rusage_s = 0.0 if self._rusage is None else self._rusage.ru_utime + self._rusage.ru_stime
        cgroup_s = None if self._cgroups is None else self._cgroups.cpu_s
        return max(rusage_s, cgroup_s or 0.0)

    @property
    def peak_processes(self) -> int | None:
        """Most tasks alive at once in the job's pids cgroup (known after :meth:`kill`)."""
        return None if self._cgroups is None else self._cgroups.peak

    def kill(self) -> None:
        """SIGKILL the whole tree (process group, every cgroup member), reap it, remove the cgroup.

        Idempotent and safe to call from another thread than the one reading the pipes.
        """
        with self._lock:
            if self._killed:
                return
            # Without a cgroup, remember the tree before killing: orphans are reparented away from us.
            strays = [] if self._cgroups is not None or not self.alive() else descendants(self.pid)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal_module.SIGKILL)  # start_new_session: pgid == pid
            if not self._try_reap():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid, signal_module.SIGKILL)
            for pid in strays:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal_module.SIGKILL)
            if self._cgroups is not None:
                if not self._cgroups.kill_all():
                    logger.error("sandbox cgroup %s still has members after SIGKILL sweeps", self._cgroups.pids_dir)
            self._try_reap(block=True)
            if self._cgroups is not None:
                self._cgroups.read_stats()
                self._cgroups.remove()
            if self._pidfd is not None:
                os.close(self._pidfd)
                self._pidfd = None
            self._killed = True

    def close(self) -> None:
        """:meth:`kill`, then close our ends of the pipes. Idempotent."""
        self.kill()
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()

    # -- signals --------------------------------------------------------------------------

    def program_pids(self, wait_s: float = 1.0) -> list[int]:
        """Host pids of the sandboxed program itself (not bwrap), waiting up to ``wait_s`` for it to exec."""
        if not self.isolated:
            return [self.pid] if self.alive() else []
        if self._program is not None:  # still the children of the same init: no /proc scan needed
            init, cached = self._program
            live = [p for p in cached if (_stat_ppid_pgid(p) or (0, 0))[0] == init]
            if live:
                return live
        # outer bwrap (host) -> bwrap as pid 1 of the new pid namespace -> the program (pid 2).
        deadline = time.monotonic() + wait_s
        while True:
            for init in children(self.pid):
                started = [p for p in children(init) if _exe(p) not in (None, self._bwrap_path)]
                if started:
                    self._program = (init, started)
                    return started
            if time.monotonic() > deadline or not self.alive():
                return []
            time.sleep(0.005)

    def send_signal(self, sig: int) -> bool:
        """Send ``sig`` to the sandboxed program (inside bwrap: to the program, not bwrap)."""
        delivered = False
        for pid in self.program_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
                delivered = True
        return delivered

    def interrupt(self) -> bool:
        """SIGINT the sandboxed program (e.g. to stop a coqidetop computation without killing it).

        Returns whether a process received it (``False`` if the program already exited).
        """
        return self.send_signal(signal_module.SIGINT)

    # -- one-shot runs -----------------------------------------------------------------------

    def communicate_until(self, data: bytes | None, deadline: float) -> tuple[bytes, bytes, bool, bool]:
        """Feed ``data``, collect output until the outer process exits or ``deadline`` (monotonic) passes.

        Returns (stdout, stderr, timed_out, truncated), then kills what is left of the job. Reads the
        pipes' file descriptors directly: call it before anything else reads ``proc.stdout``/``stderr``.
        """
        chunks: dict[int, list[bytes]] = {}
        sizes: dict[int, int] = {}
        truncated = False
        sel = selectors.DefaultSelector()
        streams: list[IO[bytes]] = [s for s in (self.proc.stdout, self.proc.stderr) if s is not None]
        for stream in streams:
            os.set_blocking(stream.fileno(), False)
            sel.register(stream.fileno(), selectors.EVENT_READ)
            chunks[stream.fileno()], sizes[stream.fileno()] = [], 0
        pending = memoryview(data or b"")
        stdin = self.proc.stdin
        stdin_fd = stdin.fileno() if stdin is not None else -1
        if stdin is not None:
            if pending:
                os.set_blocking(stdin.fileno(), False)
                sel.register(stdin.fileno(), selectors.EVENT_WRITE)
            else:
                stdin.close()
        if self._pidfd is not None:
            sel.register(self._pidfd, selectors.EVENT_READ)

        def pump(timeout: float) -> None:
            nonlocal pending, truncated
            for key, _ in sel.select(timeout):
                fd = key.fd
                if fd == self._pidfd:
                    continue
                if stdin is not None and fd == stdin_fd:
                    try:
                        pending = pending[os.write(fd, pending[:65536]) :]
                    except BlockingIOError:
                        continue
                    except OSError:  # the job closed its stdin
                        pending = memoryview(b"")
                    if not pending:
                        sel.unregister(fd)
                        stdin.close()
                    continue
                try:
                    block = os.read(fd, 65536)
                except BlockingIOError:
                    continue
                if not block:
                    sel.unregister(fd)
                    continue
                room = MAX_CAPTURED_BYTES - sizes[fd]
                if len(block) > room:
                    truncated = True
                    block = block[:room]
                if block:
                    chunks[fd].append(block)
                    sizes[fd] += len(block)

        def readers_open() -> bool:
            return any(s.fileno() in sel.get_map() for s in streams if not s.closed)

        timed_out = False
        try:
            while not self._try_reap():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    timed_out = True
                    break
                pump(min(remaining, 0.05 if self._pidfd is None or not readers_open() else 0.1))
                if self._pidfd is None and not readers_open():
                    time.sleep(min(0.005, max(0.0, deadline - time.monotonic())))
            # The job is over (or is about to be killed); keep what it already wrote.
            self.kill()
            grace_end = time.monotonic() + _DRAIN_GRACE_S
            while readers_open() and time.monotonic() < grace_end:
                pump(0.05)
        finally:
            sel.close()
        out = b"".join(chunks.get(self.proc.stdout.fileno(), [])) if self.proc.stdout is not None else b""
        err = b"".join(chunks.get(self.proc.stderr.fileno(), [])) if self.proc.stderr is not None else b""
        return out, err, timed_out, truncated


# --------------------------------------------------------------------------------------------
# the sandbox


class Sandbox:
    """Runs commands under bubblewrap (when available) with rlimits and a pids cgroup.

    Args:
        limits: resource limits of every job.
        use_bwrap: ``True`` requires bubblewrap (raises :class:`SandboxError` without it), ``False``
            runs jobs unisolated (rlimits, own session, cgroup only), ``None`` uses it when
            :func:`bwrap_available`.
        ro_binds: extra host paths bound read-only at the same place inside (prover installs, caches).
        network: give the job the host network (default: a private network namespace with no interfaces up).

    Attributes:
        isolated: bubblewrap is in use.
        process_limit: how ``max_processes`` is enforced: ``"cgroup"``, ``"rlimit"`` or ``"none"``.
        warnings: one line per protection this machine cannot give (empty when fully sandboxed).
    """

    def __init__(
        self,
        limits: SandboxLimits = DEFAULT_LIMITS,
        *,
        use_bwrap: bool | None = None,
        ro_binds: Sequence[str] = (),
        network: bool = False,
    ) -> None:
        self.limits = limits
        self.network = network
        self.ro_binds: tuple[str, ...] = tuple(os.fspath(p) for p in ro_binds)
        for path in self.ro_binds:
            if not os.path.isabs(path):
                raise ValueError(f"ro_binds must be absolute paths, got {path!r}")
        warnings: list[str] = []
        bwrap_path, reason = _probe_bwrap() if use_bwrap is not False else (None, "disabled by use_bwrap=False")
        if use_bwrap and bwrap_path is None:
            raise SandboxError(
                f"bubblewrap is required but unusable ({reason}); install it: apt-get install bubblewrap"
            )
        self._bwrap_path = bwrap_path
        self.isolated = bwrap_path is not None
        if not self.isolated:
            warnings.append(f"not isolated: {reason}; install bubblewrap (apt-get install bubblewrap)")
        layout = _cgroups()
        self._cgroup_layout = layout if layout.pids_parent is not None else None
        if self._cgroup_layout is not None:
            self.process_limit: Literal["cgroup", "rlimit", "none"] = "cgroup"
        elif os.geteuid() != 0:
            self.process_limit = "rlimit"
            warnings.append(f"max_processes is a per-user RLIMIT_NPROC, not per job: {layout.reason}")
        else:
            self.process_limit = "none"
            warnings.append(f"max_processes is not enforced (root ignores RLIMIT_NPROC): {layout.reason}")
        if self.isolated and self._cgroup_layout is None:
            warnings.append("CPU accounting misses processes killed at the deadline (no cpuacct cgroup)")
        self.warnings: tuple[str, ...] = tuple(warnings)
        for line in self.warnings:
            if line not in _logged_warnings:  # once per process, not once per Sandbox
                _logged_warnings.add(line)
                logger.warning("sandbox: %s", line)
        self._rlimits = self._compute_rlimits()

    def __repr__(self) -> str:
        return (
            f"Sandbox(isolated={self.isolated}, process_limit={self.process_limit!r}, "
            f"network={self.network}, limits={self.limits})"
        )

    def _compute_rlimits(self) -> list[tuple[int, tuple[int, int]]]:
        """(resource, (soft, hard)) pairs, clamped to our own hard limits (an unprivileged user cannot raise them)."""
        lim = self.limits
        wanted = [
            (resource.RLIMIT_AS, lim.memory_bytes, lim.memory_bytes),
            (resource.RLIMIT_CPU, lim.cpu_seconds, lim.cpu_seconds + 5),
            (resource.RLIMIT_FSIZE, lim.file_size_bytes, lim.file_size_bytes),
            (resource.RLIMIT_NOFILE, lim.open_files, lim.open_files),
            (resource.RLIMIT_CORE, 0, 0),
        ]
        if self.process_limit == "rlimit":
            wanted.append((resource.RLIMIT_NPROC, lim.max_processes, lim.max_processes))
        out = []
        for res, soft, hard in wanted:
            _, current_hard = resource.getrlimit(res)
            if current_hard != resource.RLIM_INFINITY:
                hard = min(hard, current_hard)
                soft = min(soft, hard)
            out.append((res, (soft, hard)))
        return out

    # -- argv and environment -----------------------------------------------------------------

    @staticmethod
    def _workdir(workdir: Path | str) -> Path:
        path = Path(workdir).resolve()
        if not path.is_dir():
            raise SandboxError(f"sandbox workdir {path} is not a directory; create it before running")
        if path == Path("/"):
            raise SandboxError("the sandbox workdir cannot be /; give each job its own directory")
        return path

    def command(self, argv: Sequence[str], workdir: Path) -> list[str]:
        """The full argv that runs ``argv`` in the sandbox: ``bwrap ... -- argv`` (``argv`` itself when unisolated).

        Inside bwrap the environment is PATH, HOME=workdir and LANG=C.UTF-8 only. Rlimits and the
        pids cgroup are applied by :meth:`popen`/:meth:`run`, not by this argv: prefer those.
        """
        workdir = self._workdir(workdir)
        return self._command(argv, workdir, self._env(workdir, None))

    def _env(self, workdir: Path, env: Mapping[str, str] | None) -> dict[str, str]:
        merged = {"PATH": SANDBOX_PATH, "HOME": str(workdir), "LANG": "C.UTF-8"}
        for key, value in (env or {}).items():
            if not key or "=" in key or "\0" in key or "\0" in value:
                raise ValueError(f"invalid environment entry {key!r}")
            merged[key] = value
        return merged

    def _command(self, argv: Sequence[str], workdir: Path, env: Mapping[str, str]) -> list[str]:
        argv = [os.fspath(a) for a in argv]
        if not argv:
            raise ValueError("argv is empty")
        if not self.isolated:
            return argv
        if self._bwrap_path is None:
            raise SandboxError("isolated sandbox without a bwrap path")
        cmd = [self._bwrap_path, "--unshare-all", "--unshare-pid"]
        if self.network:
            cmd.append("--share-net")
        cmd += ["--die-with-parent", "--new-session", "--cap-drop", "ALL", *_system_mount_args()]
        # --size applies to the next --tmpfs only (bwrap >= 0.5)
        cmd += ["--size", str(self.limits.tmp_bytes), "--tmpfs", "/tmp", "--proc", "/proc", "--dev", "/dev"]
        for path in self.ro_binds:
            if not os.path.exists(path):
                raise SandboxError(f"read-only bind {path} does not exist on this machine")
            cmd += ["--ro-bind", path, path]
        cmd += ["--bind", str(workdir), str(workdir), "--chdir", str(workdir), "--clearenv"]
        for key, value in env.items():
            cmd += ["--setenv", key, value]
        return [*cmd, "--", *argv]

    def _preexec(self, cgroups: _JobCgroups | None) -> Callable[[], None]:
        rlimits = self._rlimits
        join = cgroups.join_in_child if cgroups is not None else None

        def preexec() -> None:  # runs between fork and exec: no imports, no locks
            if join is not None:
                join()
            for res, pair in rlimits:
                resource.setrlimit(res, pair)

        return preexec

    # -- running ------------------------------------------------------------------------------

    def popen(
        self,
        argv: Sequence[str],
        *,
        workdir: Path,
        env: Mapping[str, str] | None = None,
        stdin: Any = subprocess.PIPE,
        stdout: Any = subprocess.PIPE,
        stderr: Any = subprocess.PIPE,
    ) -> SandboxedProcess:
        """Start ``argv`` in the sandbox and return the live job (binary pipes). Close it when done.

        ``env`` adds to (or overrides) PATH, HOME=workdir and LANG=C.UTF-8; nothing else of the host's
        environment is passed. Raises :class:`FileNotFoundError` when ``argv[0]`` is not on that PATH.
        """
        workdir = self._workdir(workdir)
        full_env = self._env(workdir, env)
        program = os.fspath(argv[0]) if argv else ""
        if program and not _findable(program, workdir, full_env["PATH"]):
            raise FileNotFoundError(errno.ENOENT, f"{program!r} not found on the sandbox PATH {full_env['PATH']}")
        cmd = self._command(argv, workdir, full_env)
        cgroups = (
            _JobCgroups(self._cgroup_layout, self.limits.max_processes) if self._cgroup_layout is not None else None
        )
        try:
            proc = subprocess.Popen(
                cmd,
                stdin=stdin,
                stdout=stdout,
                stderr=stderr,
                cwd=workdir,
                env=full_env if not self.isolated else {"PATH": SANDBOX_PATH},
                start_new_session=True,
                preexec_fn=self._preexec(cgroups),
                close_fds=True,
            )
        except subprocess.SubprocessError as exc:  # the preexec hook failed (cgroup join, setrlimit)
            if cgroups is not None:
                cgroups.remove()
            raise SandboxError(f"could not start the sandboxed process: {exc}") from None
        except BaseException:
            if cgroups is not None:
                cgroups.remove()
            raise
        return SandboxedProcess(proc, cgroups=cgroups, isolated=self.isolated, bwrap_path=self._bwrap_path)

    def run(
        self,
        argv: Sequence[str],
        *,
        workdir: Path,
        timeout_s: float,
        input: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> SandboxRun:
        """Run ``argv`` to completion or to ``timeout_s`` (wall clock), then kill whatever is left of it.

        Output is captured (at most :data:`MAX_CAPTURED_BYTES` per stream). Nothing the job started
        survives this call.
        """
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        start = time.monotonic()
        job = self.popen(
            argv, workdir=workdir, env=env, stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL
        )
        with job:
            out, err, timed_out, truncated = job.communicate_until(
                None if input is None else input.encode("utf-8"), start + timeout_s
            )
            end = time.monotonic()
        code = job.proc.returncode
        sig: int | None = None
        if timed_out:
            code, sig = None, int(signal_module.SIGKILL)
        elif code is not None and code < 0:
            sig = -code
        elif self.isolated and code is not None and 128 < code < 128 + signal_module.NSIG:
            sig = code - 128
        return SandboxRun(
            returncode=code,
            stdout=out.decode("utf-8", "replace"),
            stderr=err.decode("utf-8", "replace"),
            wall_s=end - start,
            cpu_s=job.cpu_s,
            timed_out=timed_out,
            signal=sig,
            output_truncated=truncated,
            peak_processes=job.peak_processes,
        )
