"""The HOL Light verifier: a fork server that loads HOL Light once and forks per context and attempt.

Debian's HOL Light takes about two minutes to load in the OCaml toplevel, so a check cannot start
it. Instead (see ``hol_light/boot.ml`` for the OCaml side):

- **root**: one sandboxed toplevel per (installation, base context) loads HOL Light
  (``use_file_raise_failure := true``: a file that fails to load is an error, never a half-loaded
  context), runs the base's setup, loads the server, re-reads every loaded file to compute the
  identifier whitelist, and only then prints its ready frame. It talks frames on stdin/stdout.
- **zygote**: forked from the root per problem context (the task's ``context``, ML source), kept
  in an LRU within a memory budget. Each zygote counts at its private memory (USS, from
  ``/proc/<pid>/smaps_rollup``): the rest of its RSS is the root's pages, shared copy-on-write and
  paid once (760 MB of RSS on s2n-bignum's arm base, of which 35-234 MB are a zygote's own).
- **worker**: forked from the zygote per attempt. It parses the goal from the task's trusted text
  first, then requires the submission to be exactly one expression of type ``tactic`` whose
  identifiers are whitelisted on the parse tree and on the typed tree (three classes, in one place:
  boot.ml's "the policy": what can make an unproved statement pass is CHEATING with its reason, the
  harmless Stdlib an honest proof uses is run, anything unlisted is ERROR saying what is allowed), drops to its own uid with
  rlimits, ``no_new_privs`` and a seccomp filter (no fork, exec, open, sockets, signals, ptrace),
  runs the tactic, and checks the theorem with closures bound before anything else ran: no
  hypotheses, conclusion alpha-equivalent to the goal, ``axioms()`` unchanged.
- The worker clocks itself (fork to the tactic's start, and the tactic with the theorem's checks) and
  says so in its verdict frame: :meth:`HolLightVerifier.worker_times`. A check's time less the tactic's
  is the fork server's overhead (``scripts/bench.py --rows hol``).
- Recycling: after loading, the root and the zygotes keep their major GC all but off (a collection would
  copy the shared heap into each process). What they allocate while serving is minor-heap churn (a
  zygote's private memory rises once by its minor heap, 32 MB, and stays there) plus, for a large
  verdict (reasons, output, goals over 2 KB), blocks of the major heap that are never collected. So a
  zygote is reloaded once its private memory has grown by ``zygote_max_growth_bytes``, and the root is
  restarted between checks once its RSS has grown by ``server_max_growth_bytes`` (the
  :class:`~proofgym.envs.verifiers.sandbox.warm.WarmProcess` rule); both also by checks served, if configured.
- The verdict travels only on the worker's own pipe; its stdout/stderr are only ever messages.
  The zygote kills the worker at its deadline from outside, and the Python side kills the whole
  server when a reply is late: that attempt is ``ERROR`` and the server restarts.

Task format: ``context`` = ML source run on top of the base context, ``statement`` = the goal in
backquotes, proof = a tactic expression (``ARITH_TAC``, ``REWRITE_TAC[ADD_SYM] THEN ...``).
``metadata.base`` names the base context (default ``plain``).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import itertools
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO

from proofgym.envs.errors import ProverNotFound, TaskFormatError, VerifierCrashed
from proofgym.envs.systems import HOL_LIGHT
from proofgym.envs.types import CheckResult, ErrorCategory, Goal, Task, Verdict
from proofgym.envs.verifiers.base import ContextLoadError, ProverConfig, ProverVerifier, died_under_proof
from proofgym.envs.verifiers.hol_light.proof import goal_text, normalize_proof
from proofgym.envs.verifiers.hol_light.tactic import HolTacticSession
from proofgym.envs.verifiers.sandbox import Sandbox, SandboxedProcess, SandboxLimits
from proofgym.envs.verifiers.sandbox.warm import DeadlinePassed, ProcessDied, WarmProcess

logger = logging.getLogger(__name__)

DEFAULT_HOL_DIR = "/usr/share/hol-light"
SERVER_SOURCES = Path(__file__).resolve().parent  # boot.ml, server.ml, pgsys.ml, pgsys.c

#: Capabilities the root keeps inside bubblewrap (when proofgym runs as root): give each worker its
#: own uid, and signal workers that no longer share its uid. Workers lose all of them at setuid().
_ROOT_CAPS = ("CAP_SETUID", "CAP_SETGID", "CAP_KILL")
_NAMESPACES_WITHOUT_USER = ("--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try")

_CATEGORIES = {
    "none": ErrorCategory.NONE, "logic": ErrorCategory.LOGIC, "syntax": ErrorCategory.SYNTAX,
    "type": ErrorCategory.TYPE, "undefined": ErrorCategory.UNDEFINED, "timeout": ErrorCategory.TIMEOUT,
    "cheating": ErrorCategory.CHEATING, "resource": ErrorCategory.RESOURCE, "other": ErrorCategory.OTHER,
}


@dataclass(frozen=True)
class BaseContext:
    """A named base context, loaded once per server on top of HOL Light.

    Attributes:
        name: e.g. ``plain``, or s2n-bignum's ``arm``/``x86``.
        setup: HOL Light ML run after ``hol.ml``, e.g. ``needs "arm/proofs/base.ml";;``.
        cwd: working directory of the server (bound read-only), e.g. an s2n-bignum checkout.
        prelude: plain OCaml run before ``hol.ml`` (version shims).
        startup_timeout_s: how long loading may take (10 minutes or more: s2n's x86 base takes ~7).
    """

    name: str = "plain"
    setup: str = ""
    cwd: str = ""
    prelude: str = ""
    startup_timeout_s: float = 1200.0


@dataclass(frozen=True)
class HolLightConfig(ProverConfig):
    """Options of :class:`HolLightVerifier`."""

    hol_dir: str = DEFAULT_HOL_DIR  # the installation: hol.ml and its library
    toplevel: str = ""  # the OCaml toplevel to run; default <hol_dir>/ocaml if present, else `ocaml`
    bases: tuple[BaseContext, ...] = (BaseContext(),)
    zygote_budget_bytes: int = 6 * 1024**3  # LRU budget for loaded contexts (each at its private memory)
    worker_memory_bytes: int = 3 * 1024**3  # address space and RSS limit of one attempt
    server_memory_bytes: int = 8 * 1024**3  # address-space limit of the root and zygotes
    max_processes: int = 256  # pids cgroup of the whole server (zygotes + workers)
    context_timeout_s: float = 600.0  # loading one problem context
    grace_s: float = 30.0  # how late a reply may be before the server counts as wedged
    # The clock of timeout_s (README, TIMEOUT policy): "wall" (the default), the worker is killed at its deadline;
    # "cpu", at timeout_s CPU seconds of the worker (user + system, read from /proc by the zygote at least every
    # 50 ms; goal parsing, vetting, compiling and the tactic), with a wall-clock backstop at wall_backstop *
    # timeout_s for a worker that waits without computing. A verdict that must not depend on load takes "cpu".
    timeout_clock: str = "wall"  # with the backstop (ProverConfig.wall_backstop): the checks' Budget
    # Recycling (see HolLightServer.after_check): the root and the zygotes keep their major GC all but off (a
    # collection would copy the shared heap into each process), so what they allocate while serving stays.
    # A zygote is reloaded after zygote_max_checks checks, or once its private memory has grown by more than
    # zygote_max_growth_bytes since it loaded (read every memory_check_every checks on it); the root is
    # restarted (minutes: HOL Light loads again), when no check runs on it, once its RSS has grown by more than
    # server_max_growth_bytes since it was ready, or after server_max_checks checks. 0: no bound.
    zygote_max_checks: int = 0
    zygote_max_growth_bytes: int = 512 * 1024**2
    memory_check_every: int = 500
    server_max_checks: int = 0
    server_max_growth_bytes: int = 2 * 1024**3
    worker_uid_base: int = 700000  # workers run as uid base+1 .. base+60000 (when proofgym runs as root)
    use_bwrap: bool | None = None  # None: bubblewrap when it works here
    # Loading progress on stderr: True every line HOL Light prints, False nothing, None (default) every
    # line on a terminal; in every case but False, a heartbeat line every heartbeat_s while loading, so
    # a log (Jupyter, nohup, slurm, CI) never sits silent for the minutes a base takes.
    progress: bool | None = None
    heartbeat_s: float = 30.0
    build_dir: str = ""  # cache for the compiled C stubs; default $PROOFGYM_CACHE or ~/.cache/proofgym

    def timeout_clock_of(self) -> str:
        return self.timeout_clock


def hol_toplevel(hol_dir: str, toplevel: str = "") -> list[str]:
    """The command that starts the OCaml toplevel of an installation, before the script to run.

    Debian's layout has ``<hol_dir>/ocaml`` (a toplevel with nums); an upstream checkout built with
    ``make`` has ``<hol_dir>/ocaml-hol``, which finds ``hol_loader.cmo`` and ``pa_j.cmo`` with ``-I``.
    """
    if toplevel:
        return [toplevel]
    if Path(hol_dir, "ocaml").is_file():
        return [str(Path(hol_dir, "ocaml"))]
    if Path(hol_dir, "ocaml-hol").is_file():
        return [str(Path(hol_dir, "ocaml-hol")), "-I", hol_dir]
    return ["ocaml"]


def hol_light_installed(hol_dir: str = DEFAULT_HOL_DIR) -> bool:
    """Whether HOL Light (``hol.ml``), an OCaml toplevel and the C-stub tools are here."""
    return (
        Path(hol_dir, "hol.ml").is_file()
        and (hol_toplevel(hol_dir)[0] != "ocaml" or shutil.which("ocaml") is not None)
        and shutil.which("ocamlc") is not None
        and shutil.which("ocamlmklib") is not None
    )


def hol_light_version(hol_dir: str = DEFAULT_HOL_DIR) -> str:
    """The installation's version, e.g. ``20230128-1+b1`` (Debian) or the digest of its hol.ml."""
    if os.path.realpath(hol_dir) == DEFAULT_HOL_DIR and shutil.which("dpkg-query"):
        done = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "hol-light"], capture_output=True, text=True,
                              check=False)
        if done.returncode == 0 and done.stdout.strip():
            return done.stdout.strip()
    try:
        return "hol.ml-" + hashlib.sha256(Path(hol_dir, "hol.ml").read_bytes()).hexdigest()[:12]
    except OSError:
        return "unknown"


def _ocaml_string(text: str) -> str:
    out = ['"']
    for byte in text.encode("utf-8"):
        ch = chr(byte)
        if ch in '"\\':
            out.append("\\" + ch)
        elif 32 <= byte < 127:
            out.append(ch)
        else:
            out.append(f"\\{byte:03d}")
    out.append('"')
    return "".join(out)


def _cache_root(cfg: HolLightConfig) -> Path:
    if cfg.build_dir:
        return Path(cfg.build_dir)
    cache = os.environ.get("PROOFGYM_CACHE")
    return (Path(cache).expanduser() if cache else Path.home() / ".cache" / "proofgym") / "hol_light"


@functools.cache
def _ocaml_version() -> str:
    return subprocess.run(["ocamlc", "-version"], capture_output=True, text=True, check=False).stdout.strip()


def _type_desc_accessor(version: str) -> str:
    """OCaml code that reads a ``Types.type_expr``'s description: a field before 4.14, ``get_desc`` since."""
    try:
        major, minor = (int(x) for x in version.split(".")[:2])
    except ValueError:
        return "Types.get_desc"
    return "(fun t -> (Btype.repr t).Types.desc)" if (major, minor) < (4, 14) else "Types.get_desc"


def build_stubs(cfg: HolLightConfig) -> Path:
    """Compile ``pgsys`` (rlimits, seccomp, ...) with ocamlmklib, once per source and OCaml version."""
    for tool in ("ocamlc", "ocamlmklib"):
        if shutil.which(tool) is None:
            raise ProverNotFound(f"{tool} not found; {HOL_LIGHT.install_hint}")
    version = _ocaml_version()
    digest = hashlib.sha256()
    for name in ("pgsys.c", "pgsys.ml"):
        digest.update((SERVER_SOURCES / name).read_bytes())
    digest.update(version.encode())
    target = _cache_root(cfg) / f"pgsys-{digest.hexdigest()[:16]}"
    if (target / "pgsys.cma").is_file() and (target / "dllpgsys.so").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".pgsys-", dir=target.parent))
    try:
        for name in ("pgsys.c", "pgsys.ml"):
            shutil.copy(SERVER_SOURCES / name, tmp / name)
        for argv in (["ocamlc", "-c", "pgsys.ml"], ["ocamlc", "-c", "-ccopt", "-O2", "pgsys.c"],
                     ["ocamlmklib", "-o", "pgsys", "pgsys.cmo", "pgsys.o"]):
            done = subprocess.run(argv, cwd=tmp, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise VerifierCrashed(f"building the HOL Light server's C stubs failed: {' '.join(argv)}: "
                                      f"{(done.stderr or done.stdout).strip()[:500]}")
        try:
            os.replace(tmp, target)
        except OSError:  # another process built it first
            if not (target / "pgsys.cma").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


class _HolSandbox(Sandbox):
    """The shared :class:`Sandbox`, except that the root keeps the few capabilities it needs to give
    each worker its own uid: no user namespace (it maps a single uid), and CAP_SETUID/SETGID/KILL.
    Workers drop them all at ``setuid``."""

    def __init__(self, *args, keep_caps: bool, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.keep_caps = keep_caps

    def _command(self, argv, workdir, env):  # type: ignore[override]
        cmd = super()._command(argv, workdir, env)
        if not (self.isolated and self.keep_caps):
            return cmd
        cut = cmd.index("--")
        head, tail = cmd[:cut], cmd[cut:]
        if "--unshare-all" in head:
            i = head.index("--unshare-all")
            head[i:i + 1] = list(_NAMESPACES_WITHOUT_USER)
        i = head.index("ALL", head.index("--cap-drop")) + 1
        for cap in reversed(_ROOT_CAPS):
            head[i:i] = ["--cap-add", cap]
        return head + tail


@dataclass
class _Pending:
    event: threading.Event = field(default_factory=threading.Event)
    frame: tuple[str, str, list[bytes]] | None = None
    busy: float = 0.0  # when the root last said BUSY for it (sweeping what a context left): working, not wedged


#: The heap on transparent huge pages where the kernel offers them (``madvise`` mode, Linux's default): glibc's
#: malloc, which OCaml's major heap comes from, madvises its memory MADV_HUGEPAGE. A fork copies the page tables
#: of the parent's private memory, and an exit frees them: for a zygote (hundreds of MB of HOL heap) that was
#: the fork server's overhead, 60-75 ms each for a fork and an exit at 400 MB on this machine under load, and
#: under 1 ms and 8 ms with 2 MB pages. A page written after the fork is still copied 4 KB at a time (the
#: kernel splits a shared huge page on a write). Where THP is off (``never``) or glibc is older than 2.35, the
#: variable changes nothing. glibc reads the kernel's THP mode from ``_THP_SETTINGS``, bound read-only into the
#: sandbox for it (without it, inside bubblewrap, malloc takes THP as off).
_HUGE_PAGES = {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}
_THP_SETTINGS = "/sys/kernel/mm/transparent_hugepage"

#: Reasons of an ERROR that mean a process died under the attempt (the root's words, ``hol_light/boot.ml``).
#: A worker that could not be forked (the pids cgroup was full) is retried too: the root has swept by then.
_DIED_UNDER_ATTEMPT = re.compile(
    r"^(the context's zygote died during the attempt|the worker .* without a verdict|could not start a worker)")


def _death_under_attempt(result: CheckResult) -> str | None:
    """The root's words when ``result`` says a process died under the attempt (a worker, its zygote), else None."""
    if result.verdict is not Verdict.ERROR:
        return None
    return next((r for r in result.reasons if _DIED_UNDER_ATTEMPT.match(r)), None)


class HolLightServer:
    """One sandboxed HOL Light root process for one base context. Thread-safe."""

    def __init__(self, cfg: HolLightConfig, base: BaseContext, stubs: Path, progress: Callable[[str], None] | None,
                 heartbeat: Callable[[str], None] | None = None):
        self.cfg = cfg
        self.base = base
        self.progress = progress
        self.workdir = Path(tempfile.mkdtemp(prefix=f"proofgym-hol-{base.name}-"))
        os.chmod(self.workdir, 0o700)
        self._ids = itertools.count(1)
        self._pending: dict[str, _Pending] = {}
        self._state_lock = threading.Lock()
        self.dead = False
        self.zygotes: OrderedDict[str, int] = OrderedDict()  # context key -> private bytes, LRU order
        self.inflight: Counter = Counter()  # context key -> attempts running there (never evicted then)
        self.uses: Counter = Counter()  # context key -> checks its zygote has served
        self.loaded_private: dict[str, int] = {}  # context key -> its zygote's private bytes when it loaded
        self._loading: dict[str, threading.Lock] = {}
        self.info: dict[str, str] = {}
        self.uid_separation = os.geteuid() == 0
        self._prepare_workdir(stubs)
        ro = [p for p in {cfg.hol_dir, base.cwd} if p and not p.startswith("/usr/")]
        if Path(_THP_SETTINGS).is_dir():  # read-only, where glibc reads whether the kernel offers huge pages
            ro.append(_THP_SETTINGS)
        limits = SandboxLimits(memory_bytes=cfg.server_memory_bytes, cpu_seconds=10**7,
                               max_processes=cfg.max_processes, file_size_bytes=64 * 1024**2, open_files=4096)
        self.sandbox = _HolSandbox(limits, use_bwrap=cfg.use_bwrap, ro_binds=ro, keep_caps=self.uid_separation)
        command = hol_toplevel(cfg.hol_dir, cfg.toplevel)
        toplevel = command[0]
        self.started = time.monotonic()
        self._ready = _Pending()
        self._pending["0"] = self._ready  # before the reader starts: the ready frame may come at once
        try:
            self._warm: WarmProcess[tuple[str, str, list[bytes]]] = WarmProcess(
                self.sandbox, [*command, str(self.workdir / "boot.ml")], workdir=self.workdir,
                env={"HOLLIGHT_DIR": cfg.hol_dir, "OCAMLRUNPARAM": "s=4M", **_HUGE_PAGES,
                     # boot.ml kills strays it finds in /proc only inside bwrap's own pid namespace
                     "PROOFGYM_OWN_PID_NS": "1" if self.sandbox.isolated else "0"},
                name="the HOL Light server", read=self._frames, on_message=self._dispatch,
                on_stderr=self._on_stderr, on_exit=self._on_exit)
        except FileNotFoundError as exc:
            shutil.rmtree(self.workdir, ignore_errors=True)
            raise ProverNotFound(f"{toplevel} not found ({exc}); {HOL_LIGHT.install_hint}") from None
        if not self._wait_ready(heartbeat) or self._ready.frame is None:
            # The reader sets the event when the server's output ends too: say which of the two happened.
            died = self._ready.event.is_set()
            status = self.proc.wait(5) if died else None
            self._warm.join_stderr(5)  # the tail of its output, up to its last line
            tail = self.stderr_tail(15)
            self.close()
            if died:
                raise VerifierCrashed(f"HOL Light base context {base.name!r}: the server died during start-up "
                                      f"(exit status {status}) after {time.monotonic() - self.started:.0f} s; "
                                      f"last output:\n{tail}")
            raise VerifierCrashed(f"HOL Light base context {base.name!r} did not become ready within "
                                  f"{base.startup_timeout_s:.0f} s; last output:\n{tail}")
        tag, _, fields = self._ready.frame
        if tag != "READY" or fields[0].decode() != self.nonce:
            message = fields[0].decode(errors="replace") if fields else "no message"
            tail = self.stderr_tail(15)
            self.close()
            raise VerifierCrashed(f"HOL Light base context {base.name!r} failed to load: {message}\n{tail}")
        names = ("nonce", "hol_version", "ocaml_version", "load_ms", "rss_kb", "whitelist_size", "uid_separation")
        self.info = {k: v.decode() for k, v in zip(names, fields, strict=False)}
        self.load_s = time.monotonic() - self.started
        self.ready_rss = int(self.info.get("rss_kb", "0") or 0) * 1024  # the root's, when it was ready
        try:
            report = (self.workdir / "whitelist.tsv").read_text(encoding="utf-8")
        except OSError:
            report = ""
        #: every name the trusted sources define -> "allowed", "denied" or "tainted by X"
        self.whitelist: dict[str, str] = dict(line.split("\t", 1) for line in report.splitlines() if "\t" in line)

    # -- set-up ---------------------------------------------------------------------------------
    def _prepare_workdir(self, stubs: Path) -> None:
        for name in ("pgsys.cma", "pgsys.cmi", "dllpgsys.so", "libpgsys.a"):
            if (stubs / name).exists():
                shutil.copy(stubs / name, self.workdir / name)
        shutil.copy(SERVER_SOURCES / "server.ml", self.workdir / "server.ml")
        self.nonce = os.urandom(16).hex()
        prelude = setup = ""
        if self.base.prelude:
            prelude = str(self.workdir / "prelude.ml")
            Path(prelude).write_text(self.base.prelude, encoding="utf-8")
        if self.base.setup:
            setup = str(self.workdir / "setup.ml")
            Path(setup).write_text(self.base.setup, encoding="utf-8")
        values = {
            "PG_CONFIG_workdir": _ocaml_string(str(self.workdir)),
            "PG_CONFIG_hol_dir": _ocaml_string(self.cfg.hol_dir),
            "PG_CONFIG_prelude": _ocaml_string(prelude),
            "PG_CONFIG_setup": _ocaml_string(setup),
            "PG_CONFIG_cwd": _ocaml_string(self.base.cwd),
            "PG_CONFIG_server": _ocaml_string(str(self.workdir / "server.ml")),
            "PG_CONFIG_nonce": _ocaml_string(self.nonce),
            "PG_CONFIG_uid_separation": "true" if os.geteuid() == 0 else "false",
            "PG_CONFIG_uid_base": str(int(self.cfg.worker_uid_base)),
            "PG_CONFIG_type_desc": _type_desc_accessor(_ocaml_version()),
        }
        boot = (SERVER_SOURCES / "boot.ml").read_text(encoding="utf-8")
        boot = re.sub(r"PG_CONFIG_\w+", lambda m: values[m.group(0)], boot)
        (self.workdir / "boot.ml").write_text(boot, encoding="utf-8")

    def _wait_ready(self, heartbeat: Callable[[str], None] | None) -> bool:
        """Wait for the ready frame (or the server's end) up to the start-up timeout, saying every
        ``heartbeat_s`` what is loading and for how long. True if the event came."""
        deadline = self.started + self.base.startup_timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if self._ready.event.wait(min(left, self.cfg.heartbeat_s) if heartbeat else left):
                return True
            if heartbeat is not None:
                last = next((line[11:] for line in reversed(self._warm.stderr_lines())
                             if line.startswith("[proofgym] ")), "")
                heartbeat(f"hol_light[{self.base.name}]: loading HOL Light base {self.base.name!r} (about 2 min for "
                          f"plain HOL Light, more for large bases; {time.monotonic() - self.started:.0f} s so far)"
                          + (f"; last: {last}" if last else ""))

    # -- I/O (the WarmProcess's reader threads call these) ------------------------------------------
    @property
    def proc(self) -> SandboxedProcess:
        return self._warm.proc

    def stderr_tail(self, lines: int) -> str:
        """The server's last ``lines`` lines of stderr (HOL Light's own messages)."""
        return self._warm.stderr_tail(lines, "\n")

    def _on_stderr(self, line: str) -> None:
        if line.startswith("[proofgym] "):
            logger.info("hol_light[%s]: %s", self.base.name, line[11:])
            if self.progress is not None:
                self.progress(f"hol_light[{self.base.name}]: {line[11:]}")

    def _frames(self, stream: IO[bytes]) -> Iterator[tuple[str, str, list[bytes]]]:
        """The server's stdout as frames: ``TAG ID COUNT``, then COUNT fields as ``LEN\\nBYTES``."""
        try:
            while True:
                header = stream.readline()
                if not header:
                    return
                tag, ident, count = header.decode().split()
                fields = []
                for _ in range(int(count)):
                    size = int(stream.readline())
                    fields.append(stream.read(size))
                yield tag, ident, fields
        except (ValueError, OSError) as exc:
            logger.warning("hol_light[%s]: bad frame from the server: %s", self.base.name, exc)

    def _on_exit(self) -> None:
        self.dead = True
        with self._state_lock:
            pending = list(self._pending.values())
            self._pending.clear()
        for p in pending:
            p.event.set()

    def _dispatch(self, frame: tuple[str, str, list[bytes]]) -> None:
        tag, ident, fields = frame
        if tag == "BUSY":
            with self._state_lock:
                pending = self._pending.get(ident)
            if pending is not None:
                pending.busy = time.monotonic()
            return
        if tag == "ZDIED":
            key = fields[0].decode()
            with self._state_lock:
                self.zygotes.pop(key, None)
            return
        with self._state_lock:
            pending = self._pending.pop(ident, None)
        if pending is not None:
            pending.frame = (tag, ident, fields)
            pending.event.set()

    # -- requests -------------------------------------------------------------------------------
    def request(self, tag: str, fields: Sequence[str], timeout_s: float) -> tuple[str, list[bytes]]:
        """Send one frame and wait for its reply.

        Raises:
            ProcessDied: the server is not running, or died before the reply.
            DeadlinePassed: the server did not answer in time (it has been killed: a retry would be late too).
        """
        if self.dead:
            raise ProcessDied("the HOL Light server is not running")
        ident = str(next(self._ids))
        pending = _Pending()
        with self._state_lock:
            self._pending[ident] = pending
        data = [f.encode("utf-8") for f in fields]
        frame = f"{tag} {ident} {len(data)}\n".encode() + b"".join(f"{len(d)}\n".encode() + d for d in data)
        try:
            self._warm.send(frame)
        except ProcessDied:
            self.kill()
            raise ProcessDied("the HOL Light server closed its input") from None
        deadline = time.monotonic() + timeout_s
        while not pending.event.wait(max(0.0, deadline - time.monotonic())):
            if pending.busy and time.monotonic() - pending.busy < self.cfg.grace_s:  # the root sweeps for it
                deadline = pending.busy + self.cfg.grace_s
                continue
            break
        if not pending.event.is_set() or pending.frame is None:
            late = not self.dead
            self.kill()
            if late:
                raise DeadlinePassed("the HOL Light server did not answer in time; it was killed")
            raise ProcessDied("the HOL Light server died")
        return pending.frame[0], pending.frame[2]

    # -- problem contexts (zygotes) ---------------------------------------------------------------
    def enter_context(self, context: str, *, timeout_s: float, grace_s: float, budget_bytes: int
                      ) -> tuple[str, int, int]:
        """Make a zygote of ``context`` ready and count one attempt in flight on it (:meth:`leave_context`
        ends it; a zygote with attempts in flight is never evicted). The limits are the caller's: a
        verifier's config may change while its server runs.

        Returns:
            The context's key, how many contexts were loaded for it (0 or 1), and how many idle zygotes
            were evicted to keep the loaded ones within ``budget_bytes``.

        Raises:
            ContextLoadError: the context does not load (or times out): the task is broken.
            ProcessDied, DeadlinePassed: the server broke while loading it.
        """
        key = context_key(context)
        with self._state_lock:
            if key in self.zygotes:
                self.inflight[key] += 1
                return key, 0, 0
            lock = self._loading.setdefault(key, threading.Lock())
        with lock:
            with self._state_lock:
                if key in self.zygotes:
                    self.inflight[key] += 1
                    return key, 0, 0
            tag, fields = self.request("CTX", [key, context, str(int(timeout_s * 1000))], timeout_s + grace_s)
            status = fields[0].decode() if fields else ""
            if tag == "CTX" and status == "timeout":
                raise ContextLoadError(f"the task's context timed out: {fields[1].decode('utf-8', 'replace')} "
                                       f"(context_timeout_s={timeout_s:g})")
            if tag != "CTX" or status != "ok":
                message = fields[1].decode("utf-8", "replace") if len(fields) > 1 else tag
                raise ContextLoadError(f"the task's context does not load in HOL Light: {message.strip()}\n"
                                       f"{self.stderr_tail(10)}")
            rss = int(fields[2]) * 1024
            private = int(fields[3]) * 1024 if len(fields) > 3 and fields[3].isdigit() else 0
            size = zygote_bytes(rss, private)
            with self._state_lock:
                self.zygotes[key] = size
                self.zygotes.move_to_end(key)
                self.inflight[key] += 1
                self.uses[key] = 0
                self.loaded_private[key] = size
            evicted = self._evict(budget_bytes)
        return key, 1, evicted

    def leave_context(self, key: str) -> None:
        """One attempt on the context ``key`` has ended."""
        with self._state_lock:
            self.inflight[key] -= 1

    def touch_context(self, key: str) -> None:
        """The context ``key`` was just used: last in the LRU order."""
        with self._state_lock:
            if key in self.zygotes:
                self.zygotes.move_to_end(key)

    def forget_context(self, key: str) -> None:
        """The server no longer has a zygote for ``key`` (a concurrent check evicted it)."""
        with self._state_lock:
            self.zygotes.pop(key, None)

    def _evict(self, budget_bytes: int) -> int:
        """Drop least recently used idle zygotes until the loaded ones fit the budget (at their private
        memory, read again now: a zygote's own pages grow as it serves); how many.

        A zygote with attempts running is never evicted: the budget may be exceeded while busy.
        """
        # The sizes recorded at load are read again only near the budget, where growth since (a zygote's
        # minor heap, 32 MB, is copied on its first writes) can decide an eviction: no extra request to
        # the root on every load (it may be sweeping what a hostile context left).
        with self._state_lock:
            near = 4 * sum(self.zygotes.values()) > 3 * budget_bytes
        if near:
            sizes = self.stats()
            with self._state_lock:
                for key in self.zygotes:
                    if key in sizes:
                        self.zygotes[key] = zygote_bytes(*sizes[key])
        evicted = 0
        while True:
            with self._state_lock:
                total = sum(self.zygotes.values())
                victims = [k for k in self.zygotes if self.inflight[k] <= 0]
                if total <= budget_bytes or not victims:
                    return evicted
                victim = victims[0]
                self.zygotes.pop(victim)
                evicted += 1
            self.request("EVICT", [victim], 60)

    def after_check(self, key: str, cfg: HolLightConfig) -> str | None:
        """Count a check served on the context ``key``, and replace its zygote if it is worn out: it has
        served ``zygote_max_checks`` checks, or its private memory (read every ``memory_check_every``
        checks on it) has grown by more than ``zygote_max_growth_bytes`` since it loaded. The zygote is
        evicted now, if no other attempt runs on it (else at a later check), and the next check on the
        context loads it again. Returns why it was replaced, or None.
        """
        self._warm.count_use()  # the root's checks, for worn_out()
        with self._state_lock:
            if key not in self.zygotes:
                return None
            self.uses[key] += 1
            uses = self.uses[key]
        why = None
        if cfg.zygote_max_checks and uses >= cfg.zygote_max_checks:
            why = f"its zygote served {uses} checks (zygote_max_checks={cfg.zygote_max_checks})"
        elif cfg.zygote_max_growth_bytes and cfg.memory_check_every and uses % cfg.memory_check_every == 0:
            rss, private = self.stats().get(key, (0, 0))
            grown = zygote_bytes(rss, private) - self.loaded_private.get(key, 0)
            if grown > cfg.zygote_max_growth_bytes:
                why = (f"its zygote's private memory grew by {grown >> 20} MiB in {uses} checks "
                       f"(zygote_max_growth_bytes={cfg.zygote_max_growth_bytes >> 20} MiB)")
        if why is None:
            return None
        with self._state_lock:
            if key not in self.zygotes or self.inflight[key] > 0:
                return None  # another attempt runs there: a later check replaces it
            self.zygotes.pop(key)
        self.request("EVICT", [key], 60)
        logger.info("hol_light[%s]: context %s reloads at its next check: %s", self.base.name, key, why)
        return why

    def worn_out(self, cfg: HolLightConfig) -> str | None:
        """Why the root should be restarted before its next check (the :class:`WarmProcess` rule: checks
        served, RSS over ``server_max_growth_bytes`` above its RSS when it was ready), or None."""
        self._warm.max_uses = cfg.server_max_checks
        self._warm.max_rss_bytes = self.ready_rss + cfg.server_max_growth_bytes if cfg.server_max_growth_bytes else 0
        return self._warm.worn_out()

    def busy(self) -> bool:
        """Whether a request or an attempt is under way (a restart now would cost it a retry)."""
        with self._state_lock:
            return bool(self._pending) or any(n > 0 for n in self.inflight.values()) or any(
                lock.locked() for lock in self._loading.values())

    def stats(self) -> dict[str, tuple[int, int]]:
        """Context key (and ``root``) -> (RSS bytes, private bytes), as the root reads them now."""
        _, fields = self.request("STATS", [], 60)
        out = {}
        for line in fields[0].decode().splitlines():
            key, rss, private = line.split()
            out[key] = (int(rss) * 1024, int(private) * 1024)
        return out

    def kill(self) -> None:
        self.dead = True
        with contextlib.suppress(Exception):
            self._warm.kill()

    def close(self) -> None:
        if not self.dead:
            with contextlib.suppress(ProcessDied):
                self._warm.send(b"QUIT 0 0\n")
        self.kill()
        shutil.rmtree(self.workdir, ignore_errors=True)


def context_key(context: str) -> str:
    return hashlib.sha256(context.encode("utf-8")).hexdigest()[:24]


def zygote_bytes(rss: int, private: int) -> int:
    """What a zygote counts against the budget: its private memory, or its full RSS where the private
    figure cannot be right (0: unreadable, or above the RSS). Fail closed: never 0 for a live zygote."""
    return private if 0 < private <= rss else rss


class HolLightVerifier(ProverVerifier):
    """Checks HOL Light tactic proofs with a fork server; see the module docstring.

    Thread-safe: several threads may call :meth:`check` at once (attempts run in parallel workers).

    Example:
        >>> with HolLightVerifier() as v:  # doctest: +SKIP
        ...     v.check(task, "ARITH_TAC").verdict
        <Verdict.OK: 'OK'>
    """

    system = "hol_light"
    config_class = HolLightConfig
    config: HolLightConfig
    serial = False  # attempts run in parallel workers; the server guards its own state
    audits = False  # no second checker: the kernel's theorem is judged once, in the trusted parent

    def __init__(self, config: HolLightConfig | None = None, **overrides: object) -> None:
        super().__init__(config, **overrides)
        cfg = self.config
        if not Path(cfg.hol_dir, "hol.ml").is_file():
            raise ProverNotFound(f"HOL Light not found at {cfg.hol_dir} (no hol.ml); {HOL_LIGHT.install_hint}")
        self._bases = {b.name: b for b in cfg.bases}
        self._stubs = build_stubs(cfg)
        self.version = hol_light_version(cfg.hol_dir)
        progress = cfg.progress if cfg.progress is not None else sys.stderr.isatty()
        say = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
        self._progress = say if progress else None
        self._heartbeat = say if cfg.progress is not False and cfg.heartbeat_s > 0 else None
        self._servers: dict[str, HolLightServer] = {}
        self.stats.update({"server_starts": 0, "server_deaths": 0, "contexts_loaded": 0, "evictions": 0,
                           "retries": 0, "worker_prep_us": 0, "tactic_us": 0, "zygote_recycles": 0,
                           "server_recycles": 0})
        self._last_times = threading.local()
        self._last_timeline = threading.local()

    # -- lifecycle ----------------------------------------------------------------------------
    def _shutdown(self) -> None:
        with self._lock:
            servers = list(self._servers.values())
            self._servers.clear()
        for server in servers:
            server.close()

    def server(self, base: str = "plain") -> HolLightServer:
        """The running server of ``base``, started (minutes) if needed."""
        with self._lock:
            self.ensure_open()
            if base not in self._bases:
                raise TaskFormatError(f"unknown HOL Light base context {base!r}; configured: {', '.join(self._bases)}")
            server = self._servers.get(base)
            if server is not None and not server.dead:
                worn = server.worn_out(self.config)
                if worn is None or server.busy():
                    return server
                logger.info("hol_light[%s]: restarting the server: %s", base, worn)
                self.stats["server_recycles"] += 1
                server.close()
            elif server is not None:
                self.stats["server_deaths"] += 1
                server.close()
            self.stats["server_starts"] += 1
            server = HolLightServer(self.config, self._bases[base], self._stubs, self._progress, self._heartbeat)
            self._servers[base] = server
            return server

    def prepare(self, task: Task) -> None:
        """Start the server of ``task``'s base (minutes, once): the verifier pool runs this outside a check's deadline."""
        self._task_base(task)
        self.server(str(task.metadata.get("base", "plain")))

    def _task_base(self, task: Task) -> None:
        """Register the base a task defines (s2n-bignum's ``base_setup``/``base_cwd``) and refuse a
        context that reads an object file that is not built (else HOL Light's Sys_error, pages later)."""
        name = str(task.metadata.get("base", "plain"))
        if "base_setup" in task.metadata or "base_cwd" in task.metadata:
            defined = BaseContext(name, setup=str(task.metadata.get("base_setup", "")),
                                  cwd=str(task.metadata.get("base_cwd", "")), startup_timeout_s=3600.0)
            with self._lock:
                known = self._bases.setdefault(name, defined)
            if (known.setup, known.cwd) != (defined.setup, defined.cwd):
                raise TaskFormatError(f"task {task.id} defines base {name!r} unlike the configured one "
                                      f"(cwd {defined.cwd!r} vs {known.cwd!r})")
        cwd = self._bases[name].cwd if name in self._bases else ""
        missing = [o for o in task.metadata.get("objects", ()) if not Path(cwd, o).is_file()]
        if missing:
            arch, *rest = Path(missing[0]).parts
            raise ContextLoadError(f"task {task.id}: object file {', '.join(missing)} is not built in {cwd} "
                                   f"(the context reads it); build it: make -C {Path(cwd, arch)} {Path(*rest)}")

    def _server_version(self, server: HolLightServer) -> str:
        return (f"HOL Light {server.info.get('hol_version', '?')} ({self.version}), "
                f"OCaml {server.info.get('ocaml_version', '?')}")

    # -- checking -------------------------------------------------------------------------------
    def _check_task(self, task: Task) -> None:
        goal_text(task.statement)  # a statement that is not one backquoted term is a broken task
        self._task_base(task)

    def check(self, task: Task, proof: str, *, audit: bool | None = None) -> CheckResult:
        self._last_times.value = self._last_timeline.value = None  # this check's, even where no worker runs
        return super().check(task, proof, audit=audit)

    def _check(self, task: Task, proof: str, audit: bool | None) -> CheckResult:
        """Check a tactic expression against ``task`` (``audit`` is accepted and changes nothing: see ``audits``).

        Raises :class:`ContextLoadError` when the task itself is broken and
        :class:`~proofgym.envs.errors.VerifierError` when the server cannot start.
        """
        goal = goal_text(task.statement)
        base = str(task.metadata.get("base", "plain"))
        proof = normalize_proof(proof)  # an InvalidSubmission is the verdict (ProverVerifier._screen_and_check)
        # A process that dies under the attempt (a worker, its zygote, or the server) may have been killed
        # from outside (an operator, the OOM killer): the attempt is run once more on fresh processes, and
        # only a second death is its verdict (ERROR). A server that is late is not retried: it would be
        # late again.
        died: str | None
        messages: tuple[str, ...]
        for retry in (False, True):
            server = self.server(base)
            version = self._server_version(server)
            try:
                result = self._attempt(server, task, goal, proof)
            except DeadlinePassed as exc:
                with self._lock:
                    self.stats["server_deaths"] += 1
                result = CheckResult(Verdict.ERROR, (f"{exc}; the server restarts for the next check",),
                                     error_category=ErrorCategory.RESOURCE, backend="hol_light-fork")
                break
            except ProcessDied as exc:
                with self._lock:
                    self.stats["server_deaths"] += 1
                died, messages = f"{exc}; the server restarts for the next check", ()
            else:
                died, messages = _death_under_attempt(result), result.messages
                if died is None:
                    break
            if retry:  # the second death: the proof's doing (the one policy, died_under_proof)
                result = died_under_proof(died, backend="hol_light-fork", messages=messages)
                break
            with self._lock:
                self.stats["retries"] += 1
        return replace(result, prover_version=version)

    def open(self, task: Task) -> HolTacticSession:
        """A branching tactic session on ``task``: states are replayed proof trees (see :mod:`.tactic`)."""
        self.require_system(task)
        return HolTacticSession(self, task)

    def _attempt(self, server: HolLightServer, task: Task, goal: str, proof: str) -> CheckResult:
        for _ in range(3):
            cfg = self.config
            key, loaded, evicted = server.enter_context(  # one attempt in flight there
                task.context, timeout_s=cfg.context_timeout_s, grace_s=cfg.grace_s, budget_bytes=cfg.zygote_budget_bytes)
            with self._lock:
                self.stats["contexts_loaded"] += loaded
                self.stats["evictions"] += evicted
            # A CPU-time budget goes as a sixth field; the deadline (the fourth) is then its wall-clock backstop.
            wall_s = cfg.budget.wall_s(task.timeout_s)
            request = [key, goal, proof, str(int(wall_s * 1000)), str(cfg.worker_memory_bytes)]
            if cfg.timeout_clock == "cpu":
                request.append(str(max(1, int(task.timeout_s * 1000))))
            try:
                sent = time.time()
                tag, fields = server.request("CHECK", request, wall_s + cfg.grace_s)
                answered = time.time()
            finally:
                server.leave_context(key)
            if tag != "RESULT":
                raise VerifierCrashed(f"unexpected reply {tag} from the HOL Light server")
            verdict, category, reasons, messages, _wall_ms = (f.decode("utf-8", "replace") for f in fields[:5])
            goals = fields[5]
            self._note_worker_times(fields[6] if len(fields) > 6 else b"", sent, answered)
            if verdict == "ERROR" and reasons.startswith("no zygote for this context"):
                server.forget_context(key)
                continue  # evicted by a concurrent check: load it again
            if verdict == "ERROR" and category == "goal":
                raise ContextLoadError(f"task {task.id}: {reasons}")
            server.touch_context(key)
            try:
                recycled = server.after_check(key, cfg)
            except (ProcessDied, DeadlinePassed):  # the server broke after the verdict: the next check restarts it
                recycled = None
            if recycled is not None:
                with self._lock:
                    self.stats["zygote_recycles"] += 1
            return CheckResult(
                Verdict(verdict),
                tuple(r for r in reasons.split("\n") if r),
                (messages,) if messages.strip() else (),
                _parse_goals(goals),
                _CATEGORIES.get(category, ErrorCategory.OTHER),
                backend="hol_light-fork",
            )
        raise VerifierCrashed("the task's context was evicted three times in a row; raise zygote_budget_bytes")

    def _note_worker_times(self, field: bytes, sent: float, answered: float) -> None:
        """Keep the worker's own clock of this attempt (see :meth:`worker_times`), and the timeline of the
        attempt from the worker's, the zygote's and this process's clocks (see :meth:`worker_timeline`)."""
        self._last_timeline.value = None
        try:
            numbers = [int(x) for x in field.split()]
            prep_us, tactic_us = numbers[:2]
        except ValueError:  # no tactic ran (refused before it, killed, or a process died)
            self._last_times.value = None
            return
        self._last_times.value = (prep_us / 1e6, tactic_us / 1e6)
        if len(numbers) == 8:
            start, replied, before_fork, forked, eof, reaped = (n / 1e6 for n in numbers[2:])
            self._last_timeline.value = {
                "to_zygote": before_fork - sent, "fork": forked - before_fork, "worker_start": start - before_fork,
                "prep": prep_us / 1e6, "tactic": tactic_us / 1e6,
                "reply": replied - start - (prep_us + tactic_us) / 1e6, "exit": eof - replied,
                "reap": reaped - eof, "to_client": answered - reaped}
        with self._lock:
            self.stats["worker_prep_us"] += prep_us
            self.stats["tactic_us"] += tactic_us

    def worker_times(self) -> tuple[float, float] | None:
        """The worker's own clock of this thread's last check: (seconds from its fork to the tactic's start:
        the goal, vetting and compiling the submission; seconds of the tactic and the theorem's checks), or
        None where no tactic ran. A check's ``wall_s`` minus both is the fork server's own cost (fork,
        pipes, frames, the worker's exit); minus the second, what proofgym adds to the tactic."""
        return getattr(self._last_times, "value", None)

    def worker_timeline(self) -> dict[str, float] | None:
        """Where this thread's last check spent its time, in seconds, from the clocks of this process, the
        zygote and the worker (one machine, one wall clock): ``to_zygote`` (the request through the root to
        the zygote's fork), ``fork`` (the zygote's fork call), ``worker_start`` (the fork to the worker's first
        instruction), ``prep`` and ``tactic`` (as :meth:`worker_times`), ``reply`` (the verdict frame written),
        ``exit`` (written to the zygote seeing the verdict pipe close: the worker's exit), ``reap`` (that to
        the zygote's reaping it and answering), ``to_client`` (the answer through the root to this process).
        None where no tactic ran. Informational, never part of a verdict."""
        return getattr(self._last_timeline, "value", None)


def _parse_goals(data: bytes) -> tuple[Goal, ...]:
    """Decode the worker's goals (``hol_light/boot.ml``, ``pg_encode_goals``): ``COUNT SHOWN``, then per
    shown goal its hypothesis count and each text as ``LEN\\nBYTES``. Goals past the size budget are
    counted, not shown: each becomes a placeholder, so that the number of goals stays exact."""
    if not data:
        return ()
    pos = 0

    def line() -> int:
        nonlocal pos
        end = data.index(b"\n", pos)
        value = data[pos:end]
        pos = end + 1
        return int(value)

    def text() -> str:
        nonlocal pos
        size = line()
        if size < 0 or pos + size > len(data):
            raise ValueError("a goal's text runs past the frame")
        out = data[pos:pos + size].decode("utf-8", "replace")
        pos += size
        return out

    try:
        end = data.index(b"\n")
        count, shown = (int(x) for x in data[:end].split())
        pos = end + 1
        goals = []
        for _ in range(shown):
            hyps = tuple(text() for _ in range(line()))
            goals.append(Goal(hyps, text()))
        if pos != len(data) or not 0 <= shown <= count:
            raise ValueError("trailing bytes or bad counts")
    except ValueError as exc:
        raise VerifierCrashed(f"malformed goals from the HOL Light server: {exc}") from None
    hidden = Goal((), f"(not shown: {count - shown} more goal(s) over the size limit of the verdict)")
    return (*goals, *([hidden] * (count - shown)))
