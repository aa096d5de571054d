"""A client for Debian's ``DafnyServer.exe`` (Dafny 2.3), run inside the sandbox.

Why: a warm server answers a check in a few tenths of a second, against about a second for a
fresh ``dafny`` process (mono start-up and JIT dominate). The protocol is line based: a verb
(``verify``, ``symbols``...), then the base64 of a JSON task ``{"args", "filename", "source",
"sourceIsFile"}``, then ``[[DAFNY-CLIENT: EOM]]``. The answer ends with a line that ends with
``[[DAFNY-SERVER: EOM]]``, preceded by ``[SUCCESS]`` or ``[FAILURE]`` -- and ``[SUCCESS]``
comes back even when the program has errors, so the caller must parse the errors.

The server caches verification results by checksum unless it is told ``/verifySnapshots:0``;
:class:`DafnyServer` always sends it. A request that runs past its deadline kills the whole
sandboxed tree (the server, mono's threads and every z3 it started); the next request starts a
fresh server. So does a ``[FATAL]`` answer, after which the server exits by itself.
"""

from __future__ import annotations

import base64
import json
import os
import queue
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from proofgym.envs.errors import VerifierCrashed
from proofgym.envs.verifiers.sandbox import Sandbox, SandboxedProcess

CLIENT_EOM = "[[DAFNY-CLIENT: EOM]]"
SERVER_EOM = "[[DAFNY-SERVER: EOM]]"


class ServerTimeout(Exception):
    """The request did not finish before its deadline; the server was killed."""


class ServerDied(Exception):
    """The server exited (or answered [FATAL]) while a request was in flight."""

    def __init__(self, message: str, output: str = "") -> None:
        super().__init__(message)
        self.output = output


@dataclass(frozen=True)
class ServerReply:
    """One answer: the text before the EOM line, and whether the server said SUCCESS."""

    text: str
    success: bool
    wall_s: float


class DafnyServer:
    """One sandboxed DafnyServer process. Not thread-safe: the verifier serialises requests."""

    def __init__(self, sandbox: Sandbox, workdir: Path, *, mono: str, server_exe: str,
                 start_timeout_s: float = 120.0) -> None:
        self.workdir = workdir
        self._proc: SandboxedProcess = sandbox.popen([mono, server_exe], workdir=workdir)
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read_loop, daemon=True, name="dafny-server-stdout")
        self._reader.start()
        self._err_lines: list[str] = []
        self._err_reader = threading.Thread(target=self._read_stderr, daemon=True, name="dafny-server-stderr")
        self._err_reader.start()
        self.closed = False
        self.requests = 0
        self.started = time.monotonic()
        # A trivial request proves the server (and mono) work before any submission reaches it.
        try:
            reply = self.request("verify", "method selftest() { assert true; }\n", args=("/compile:0",),
                                 timeout_s=start_timeout_s)
        except (ServerTimeout, ServerDied) as exc:
            self.kill()
            raise VerifierCrashed(f"DafnyServer did not start: {exc}; {' '.join(self._err_lines[-3:])}") from None
        if "selftest" not in reply.text or " verified" not in reply.text:
            self.kill()
            raise VerifierCrashed(f"DafnyServer self-test failed: {reply.text.strip()[-300:]}")

    # -- transport ------------------------------------------------------------------------------
    def _read_loop(self) -> None:
        stream = self._proc.proc.stdout
        buf = b""
        try:
            while True:
                chunk = os.read(stream.fileno(), 1 << 16)
                if not chunk:
                    break
                buf += chunk
                *complete, buf = buf.split(b"\n")
                for line in complete:
                    self._lines.put(line.decode("utf-8", errors="replace"))
        except (OSError, ValueError):
            pass
        finally:
            if buf:
                self._lines.put(buf.decode("utf-8", errors="replace"))
            self._lines.put(None)

    def _read_stderr(self) -> None:
        stream = self._proc.proc.stderr
        try:
            for line in iter(stream.readline, b""):
                if len(self._err_lines) < 200:
                    self._err_lines.append(line.decode("utf-8", errors="replace").rstrip())
        except (OSError, ValueError):
            pass

    def request(self, verb: str, source: str, *, args: Sequence[str], timeout_s: float,
                filename: str = "prog.dfy") -> ServerReply:
        """Send one request and wait for its answer.

        Raises:
            ServerTimeout: past ``timeout_s``; the server has been killed.
            ServerDied: the server exited or answered ``[FATAL]``; it has been killed.
        """
        if self.closed:
            raise ServerDied("the server is closed")
        payload = json.dumps({"args": list(args), "filename": filename, "source": source, "sourceIsFile": False})
        blob = base64.b64encode(payload.encode("utf-8")).decode("ascii")
        start = time.monotonic()
        try:
            self._proc.proc.stdin.write(f"{verb}\n{blob}\n{CLIENT_EOM}\n".encode("ascii"))
            self._proc.proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError) as exc:
            self.kill()
            raise ServerDied(f"DafnyServer stdin closed: {exc}") from None
        self.requests += 1
        deadline = start + timeout_s
        out: list[str] = []
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.kill()
                raise ServerTimeout(f"no answer within {timeout_s:.1f} s")
            try:
                line = self._lines.get(timeout=min(remaining, 0.5))
            except queue.Empty:
                continue
            if line is None:
                self.kill()
                raise ServerDied("DafnyServer exited during a request", "\n".join(out))
            if line.rstrip().endswith(SERVER_EOM):
                head = line.rstrip()[: -len(SERVER_EOM)].strip()
                if head.startswith("[FATAL]") or any(x.startswith("[FATAL]") for x in out[-3:]):
                    self.kill()
                    raise ServerDied("DafnyServer answered [FATAL]", "\n".join(out))
                if not head.startswith(("[SUCCESS]", "[FAILURE]")):
                    # Only the server writes this status: anything else means the stream is out of step.
                    self.kill()
                    raise ServerDied(f"unexpected end-of-message line {line.strip()[:80]!r}", "\n".join(out))
                return ServerReply("\n".join(out), head.startswith("[SUCCESS]"), time.monotonic() - start)
            out.append(line)

    # -- lifetime -----------------------------------------------------------------------------
    def alive(self) -> bool:
        return not self.closed and self._proc.alive()

    @property
    def pid(self) -> int:
        """Host pid of the sandbox's outer process (the root of the server's process tree)."""
        return self._proc.pid

    @property
    def cpu_s(self) -> float:
        return self._proc.cpu_s

    def program_pids(self) -> list[int]:
        """Host pids of mono and its children (for memory measurements)."""
        return self._proc.program_pids(wait_s=0.5)

    def kill(self) -> None:
        """Kill the whole sandboxed tree. Idempotent."""
        self.closed = True
        self._proc.close()
