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
fresh server. So does a ``[FATAL]`` answer, after which the server exits by itself. The process,
its reader, deadline and kill are a :class:`~proofgym.envs.verifiers.sandbox.warm.WarmProcess`.
"""

from __future__ import annotations

import base64
import json
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from proofgym.envs.errors import VerifierCrashed
from proofgym.envs.verifiers.sandbox import Sandbox
from proofgym.envs.verifiers.sandbox.warm import DeadlinePassed, ProcessDied, WarmProcess

CLIENT_EOM = "[[DAFNY-CLIENT: EOM]]"
SERVER_EOM = "[[DAFNY-SERVER: EOM]]"


@dataclass(frozen=True)
class ServerReply:
    """One answer: the text before the EOM line, and whether the server said SUCCESS."""

    text: str
    success: bool
    wall_s: float


def read_lines(stream: IO[bytes]) -> Iterator[str]:
    """The server's stdout as lines (the last one even without its newline)."""
    buf = b""
    try:
        while True:
            chunk = os.read(stream.fileno(), 1 << 16)
            if not chunk:
                break
            buf += chunk
            *complete, buf = buf.split(b"\n")
            for line in complete:
                yield line.decode("utf-8", errors="replace")
    except (OSError, ValueError):
        pass
    if buf:
        yield buf.decode("utf-8", errors="replace")


class DafnyServer:
    """One sandboxed DafnyServer process. Not thread-safe: the verifier serialises requests.

    ``max_uses``: :meth:`worn_out` after that many checks (:meth:`count_use`), which bounds the
    server's memory and CPU time.
    """

    def __init__(self, sandbox: Sandbox, workdir: Path, *, mono: str, server_exe: str,
                 start_timeout_s: float = 120.0, max_uses: int = 0) -> None:
        self.workdir = workdir
        self._warm: WarmProcess[str] = WarmProcess(sandbox, [mono, server_exe], workdir=workdir, name="DafnyServer",
                                                   read=read_lines, max_uses=max_uses)
        self.requests = 0
        self.started = self._warm.started
        # A trivial request proves the server (and mono) work before any submission reaches it.
        try:
            reply = self.request("verify", "method selftest() { assert true; }\n", args=("/compile:0",),
                                 timeout_s=start_timeout_s)
        except (DeadlinePassed, ProcessDied) as exc:
            self.kill()
            raise VerifierCrashed(f"DafnyServer did not start: {exc}; {self._warm.stderr_tail(3, ' ')}") from None
        if "selftest" not in reply.text or " verified" not in reply.text:
            self.kill()
            raise VerifierCrashed(f"DafnyServer self-test failed: {reply.text.strip()[-300:]}")

    def request(self, verb: str, source: str, *, args: Sequence[str], timeout_s: float,
                filename: str = "prog.dfy") -> ServerReply:
        """Send one request and wait for its answer.

        Raises:
            DeadlinePassed: past ``timeout_s``; the server has been killed.
            ProcessDied: the server exited or answered ``[FATAL]``; it has been killed.
        """
        payload = json.dumps({"args": list(args), "filename": filename, "source": source, "sourceIsFile": False})
        blob = base64.b64encode(payload.encode("utf-8")).decode("ascii")
        start = time.monotonic()
        self._warm.send(f"{verb}\n{blob}\n{CLIENT_EOM}\n".encode("ascii"))  # ProcessDied: killed
        self.requests += 1
        deadline = start + timeout_s
        out: list[str] = []
        while True:
            try:
                line = self._warm.receive(deadline)
            except DeadlinePassed:
                self.kill()
                raise DeadlinePassed(f"no answer within {timeout_s:.1f} s") from None
            except ProcessDied:
                self.kill()
                raise ProcessDied("DafnyServer exited during a request", "\n".join(out)) from None
            if line.rstrip().endswith(SERVER_EOM):
                head = line.rstrip()[: -len(SERVER_EOM)].strip()
                if head.startswith("[FATAL]") or any(x.startswith("[FATAL]") for x in out[-3:]):
                    self.kill()
                    raise ProcessDied("DafnyServer answered [FATAL]", "\n".join(out))
                if not head.startswith(("[SUCCESS]", "[FAILURE]")):
                    # Only the server writes this status: anything else means the stream is out of step.
                    self.kill()
                    raise ProcessDied(f"unexpected end-of-message line {line.strip()[:80]!r}", "\n".join(out))
                return ServerReply("\n".join(out), head.startswith("[SUCCESS]"), time.monotonic() - start)
            out.append(line)

    # -- lifetime -----------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._warm.closed

    def alive(self) -> bool:
        return self._warm.alive()

    def count_use(self) -> None:
        """Count one check towards the recycling limit."""
        self._warm.count_use()

    def worn_out(self) -> str | None:
        """Why the server should be restarted before the next check (see ``max_uses``), or None."""
        return self._warm.worn_out()

    @property
    def pid(self) -> int:
        """Host pid of the sandbox's outer process (the root of the server's process tree)."""
        return self._warm.pid

    @property
    def cpu_s(self) -> float:
        return self._warm.cpu_s

    def program_pids(self) -> list[int]:
        """Host pids of mono and its children (for memory measurements)."""
        return self._warm.program_pids(wait_s=0.5)

    def kill(self) -> None:
        """Kill the whole sandboxed tree. Idempotent."""
        self._warm.kill()
