"""One warm prover process: what coqidetop, DafnyServer and the HOL Light fork server have in common.

A prover that takes seconds (Dafny's mono start-up) or minutes (HOL Light's load) to start is
kept running and asked many questions. :class:`WarmProcess` owns such a process inside the
sandbox: a reader thread that turns its stdout into protocol messages (the protocol's own
``read`` generator: XML elements, lines, frames), a stderr tail for error messages, a per-call
deadline, a whole-tree kill, and the recycling rule (by uses and by memory). The clients keep
only their protocol.

Two things can go wrong with a warm process, and each is one exception here:
:class:`ProcessDied` (it exited, closed its input, or spoke out of step) and
:class:`DeadlinePassed` (it did not answer in time). They are signals between a client and its
verifier, never verdicts: the verifier decides what an attempt that met one of them is worth.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import IO, Generic, TypeVar

from proofgym.envs.verifiers.sandbox import Sandbox, SandboxedProcess
from proofgym.envs.verifiers.sandbox.procfs import rss_bytes

logger = logging.getLogger(__name__)

M = TypeVar("M")

_EOF = object()  # what the reader queues when the process's output ends


class ProcessDied(Exception):
    """The warm process exited, closed its input or spoke out of step; ``output`` is what it said first."""

    def __init__(self, message: str, output: str = "") -> None:
        super().__init__(message)
        self.output = output


class DeadlinePassed(Exception):
    """A call to the warm process did not answer before its deadline."""


class WarmProcess(Generic[M]):
    """A long-lived sandboxed process spoken to through stdin/stdout (see the module docstring).

    Args:
        sandbox: where the process runs.
        argv: the command line.
        workdir: its working directory (writable).
        name: for messages (``coqidetop``, ``DafnyServer``, ``the HOL Light server``).
        read: turns the stdout stream into messages; it returns when the stream ends.
        on_message: where each message goes; by default a queue that :meth:`receive` reads. A
            protocol that multiplexes requests (HOL Light's frames) dispatches them itself.
        on_stderr: called with each stderr line (progress, logging), after it joins the tail.
        on_exit: called once, from the reader thread, when the output has ended.
        stderr_lines: how many of the last stderr lines are kept for messages.
        max_uses: :meth:`worn_out` after this many :meth:`count_use` calls (0: never).
        max_rss_bytes: :meth:`worn_out` when the program's resident memory is above this (0: never).

    Raises:
        FileNotFoundError: the program is not there.
    """

    def __init__(self, sandbox: Sandbox, argv: Sequence[str], *, workdir: Path, name: str,
                 read: Callable[[IO[bytes]], Iterable[M]], env: dict[str, str] | None = None,
                 on_message: Callable[[M], None] | None = None, on_stderr: Callable[[str], None] | None = None,
                 on_exit: Callable[[], None] | None = None, stderr_lines: int = 200, max_uses: int = 0,
                 max_rss_bytes: int = 0) -> None:
        self.name = name
        self.max_uses = max_uses
        self.max_rss_bytes = max_rss_bytes
        self.uses = 0
        self.closed = False
        self._read = read
        self._on_message = on_message
        self._on_stderr = on_stderr
        self._on_exit = on_exit
        self._messages: queue.Queue[object] = queue.Queue()
        self._stderr: deque[str] = deque(maxlen=stderr_lines)
        self._write_lock = threading.Lock()
        self.proc: SandboxedProcess = sandbox.popen(list(argv), workdir=workdir, env=env)
        self.started = time.monotonic()
        self._readers = [threading.Thread(target=self._pump_stderr, daemon=True, name=f"{name}-stderr"),
                         threading.Thread(target=self._pump_stdout, daemon=True, name=f"{name}-stdout")]
        for reader in self._readers:
            reader.start()

    # -- reading --------------------------------------------------------------------------------
    def _pump_stdout(self) -> None:
        stream = self.proc.proc.stdout
        assert stream is not None  # noqa: S101 - popen gives pipes
        try:
            for message in self._read(stream):
                if self._on_message is not None:
                    self._on_message(message)
                else:
                    self._messages.put(message)
        except (OSError, ValueError):
            pass  # the pipe was closed under the reader: the same as the end of the output
        finally:
            self._messages.put(_EOF)
            if self._on_exit is not None:
                self._on_exit()

    def _pump_stderr(self) -> None:
        stream = self.proc.proc.stderr
        assert stream is not None  # noqa: S101
        try:
            for raw in iter(stream.readline, b""):
                line = raw.decode("utf-8", errors="replace").rstrip()
                self._stderr.append(line)
                if self._on_stderr is not None:
                    self._on_stderr(line)
        except (OSError, ValueError):
            pass

    def stderr_tail(self, lines: int = 5, sep: str = " | ") -> str:
        """The last ``lines`` lines the process wrote on stderr."""
        return sep.join(list(self._stderr)[-lines:])

    def stderr_lines(self) -> list[str]:
        """Every stderr line still kept (the last ``stderr_lines``)."""
        return list(self._stderr)

    def join_stderr(self, timeout_s: float = 5.0) -> None:
        """Wait for the stderr reader to reach the end (after the process ended: its last lines)."""
        self._readers[0].join(timeout=timeout_s)

    # -- calls ----------------------------------------------------------------------------------
    def send(self, data: bytes) -> None:
        """Write ``data`` to the process's stdin.

        Raises:
            ProcessDied: the process is closed, or its input is (it has then been killed).
        """
        if self.closed:
            raise ProcessDied(f"{self.name} is closed")
        stdin = self.proc.proc.stdin
        try:
            with self._write_lock:
                assert stdin is not None  # noqa: S101
                stdin.write(data)
                stdin.flush()
        except (OSError, ValueError) as exc:  # BrokenPipeError, or a pipe closed by kill()
            self.kill()
            raise ProcessDied(f"{self.name} closed its input: {exc}") from None

    def receive(self, deadline: float) -> M:
        """The next message, waiting until ``deadline`` (``time.monotonic()``).

        Raises:
            DeadlinePassed: nothing came in time (the process is left running: the caller decides).
            ProcessDied: the output ended (the process is marked closed).
        """
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise DeadlinePassed(f"{self.name} did not answer in time")
            try:
                message = self._messages.get(timeout=min(remaining, 0.5))
            except queue.Empty:
                continue
            if message is _EOF:
                self._messages.put(_EOF)  # every later receive sees the end too
                self.closed = True
                tail = self.stderr_tail()
                raise ProcessDied(f"{self.name} exited{': ' + tail if tail else ''}")
            return message  # type: ignore[return-value]

    def interrupt(self) -> bool:
        """SIGINT the program (stops a computation without killing the process); whether it was delivered."""
        return self.proc.interrupt()

    # -- recycling ------------------------------------------------------------------------------
    def count_use(self) -> None:
        """Count one use (a check) towards ``max_uses``."""
        self.uses += 1

    def program_pids(self, wait_s: float = 0.0) -> list[int]:
        """Pids of the program itself (inside the sandbox), for memory accounting."""
        try:
            return list(self.proc.program_pids(wait_s=wait_s)) or [self.proc.pid]
        except Exception:  # noqa: BLE001 - accounting must never break a check
            return [self.proc.pid]

    def rss(self) -> int:
        """Resident bytes of the program's processes."""
        return rss_bytes(self.program_pids())

    def worn_out(self) -> str | None:
        """Why the process should be replaced before its next use (too many uses, too much memory), or None."""
        if self.max_uses and self.uses >= self.max_uses:
            return f"{self.name} served {self.uses} checks (the limit is {self.max_uses})"
        if self.max_rss_bytes:
            rss = self.rss()
            if rss > self.max_rss_bytes:
                return f"{self.name} holds {rss >> 20} MiB (the limit is {self.max_rss_bytes >> 20} MiB)"
        return None

    # -- lifetime -------------------------------------------------------------------------------
    def alive(self) -> bool:
        return not self.closed and self.proc.alive()

    @property
    def pid(self) -> int:
        """Host pid of the sandbox's outer process (the root of the process tree)."""
        return self.proc.pid

    @property
    def cpu_s(self) -> float:
        return self.proc.cpu_s

    def kill(self) -> None:
        """Kill the whole tree, let the readers see the end, close our pipe ends. Idempotent, any thread."""
        self.closed = True
        self.proc.kill()
        for reader in self._readers:
            if reader is not threading.current_thread():
                reader.join(timeout=5.0)  # the tree is dead, so EOF is immediate unless a stray holds the pipe
        self.proc.close()  # no pipe is left for the garbage collector (ResourceWarning)
