"""A client for ``coqidetop``'s XML protocol (Coq 8.16), run inside the sandbox.

One :class:`IdeTop` is one long-lived prover process. Calls are synchronous;
feedback messages that arrive before a call's ``<value>`` are collected with it.
A read deadline guards every call (a missing final ``.`` or a looping tactic
otherwise blocks forever); at the deadline the computation is interrupted with
SIGINT, and the process is killed if it does not answer. A call can also be given a
CPU budget (``cpu_until``: the prover's CPU seconds, :meth:`IdeTop.cpu_s`), checked
every :data:`CPU_POLL_S` while it waits: a deadline that does not move when the machine
is busy. The process, its reader,
stderr tail and kill are a :class:`~proofgym.envs.verifiers.sandbox.warm.WarmProcess`.

What a proof prints is the proof's to choose (``do 100000 idtac "<10 KB>"``), so a call keeps at most
:data:`MESSAGE_BYTES` of message text and counts the rest (:attr:`Reply.dropped`): the verifier's memory stays
bounded whatever the proof prints, and a reader that needs every message (a query it judges by) knows when
some are missing.
"""

from __future__ import annotations

import os
import re
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO
from xml.sax.saxutils import escape

from proofgym.envs.errors import VerifierCrashed
from proofgym.envs.types import Goal
from proofgym.envs.verifiers.sandbox import Sandbox
from proofgym.envs.verifiers.sandbox.procfs import program_tree_cpu_s
from proofgym.envs.verifiers.sandbox.warm import DeadlinePassed, WarmProcess

_ENTITIES = {"&nbsp;": " "}
#: How often a call with a CPU budget reads the prover's CPU time while it waits (a check that answers sooner
#: never reads it).
CPU_POLL_S = 0.05
#: Message text one call keeps (the rest is counted in ``Reply.dropped``). Red team round 6: without a bound,
#: a proof printing 600 MB made the verifier hold 650 MB for one check, and a pool's worst case is that per worker.
MESSAGE_BYTES = 16 << 20
_INVALID_XML = re.compile("[^\x09\x0a\x0d\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


@dataclass
class Reply:
    """The answer to one call."""

    good: bool
    value: ET.Element
    messages: list[tuple[str, str]] = field(default_factory=list)  # (level, text) feedback messages
    error: str = ""  # text of a failed call
    loaded: list[str] = field(default_factory=list)  # libraries loaded during the call
    dropped: int = 0  # characters of message text past MESSAGE_BYTES, not kept


def richpp_text(elem: ET.Element | None) -> str:
    if elem is None:
        return ""
    return "".join(elem.itertext())


def read_elements(stream: IO[bytes]) -> Iterator[ET.Element]:
    """coqidetop's stdout as its top-level XML elements (``<value>``, ``<feedback>``, ``<message>``)."""
    parser = ET.XMLPullParser(events=("start", "end"))
    parser.feed("<root>")
    depth = 0
    root: ET.Element | None = None
    pending = ""
    try:
        while True:
            chunk = os.read(stream.fileno(), 1 << 16)
            if not chunk:
                break
            pending += chunk.decode("utf-8", errors="replace")
            # Hold back a possibly split entity.
            amp = pending.rfind("&")
            if amp != -1 and ";" not in pending[amp:]:
                text, pending = pending[:amp], pending[amp:]
            else:
                text, pending = pending, ""
            for ent, rep in _ENTITIES.items():
                text = text.replace(ent, rep)
            # coqidetop echoes characters that XML forbids (a proof can print U+FFFF): replace them.
            text = _INVALID_XML.sub("\uFFFD", text)
            parser.feed(text)
            for event, elem in parser.read_events():
                if event == "start":
                    if depth == 0:
                        root = elem
                    depth += 1
                    continue
                depth -= 1
                if depth == 1:
                    yield elem
                    root.remove(elem)  # keep memory flat over a long session
    except ET.ParseError:
        pass  # garbage on the protocol channel: the same as the end of the output


class IdeTop:
    """One sandboxed ``coqidetop`` process.

    ``max_rss_bytes``: :meth:`worn_out` once the prover holds more resident memory than this.
    """

    def __init__(self, sandbox: Sandbox, workdir: Path, *, binary: str = "coqidetop.opt",
                 args: tuple[str, ...] = (), start_timeout_s: float = 60.0,
                 env: dict[str, str] | None = None, max_rss_bytes: int = 0) -> None:
        self.workdir = workdir
        self._warm: WarmProcess[ET.Element] = WarmProcess(
            sandbox, [binary, "-main-channel", "stdfds", "-async-proofs", "off", *args], workdir=workdir,
            env=env, name="coqidetop", read=read_elements, max_rss_bytes=max_rss_bytes)
        init = self.call('<call val="Init"><option val="none"/></call>', timeout_s=start_timeout_s)
        if not init.good:
            raise VerifierCrashed(f"coqidetop refused Init: {init.error}")
        self.root_state = int(init.value.find("state_id").get("val"))

    @property
    def closed(self) -> bool:
        return self._warm.closed

    # -- transport ---------------------------------------------------------------------------
    def cpu_s(self) -> float:
        """CPU seconds (user + system) the prover and the processes it starts (CoqHammer's ATPs) have used so far."""
        return program_tree_cpu_s(self.program_pids())

    def call(self, xml: str, *, timeout_s: float, cpu_until: float | None = None) -> Reply:
        """Send one call; collect feedback until its ``<value>``.

        ``timeout_s`` is a wall-clock deadline; ``cpu_until`` (optional) a CPU one: the call is interrupted
        once :meth:`cpu_s` passes it, whichever comes first.

        Raises:
            DeadlinePassed: no answer by the deadline (or within the CPU budget); the computation was
                interrupted (``self.closed`` is True if the process had to be killed).
            ProcessDied: the process exited.
        """
        self._warm.send(xml.encode("utf-8"))
        deadline = time.monotonic() + timeout_s
        messages: list[tuple[str, str]] = []
        kept = dropped = 0
        loaded: list[str] = []
        interrupted = ""

        def keep(level: str, text: str) -> None:
            nonlocal kept, dropped
            if kept + len(text) > MESSAGE_BYTES:
                dropped += len(text)
                return
            kept += len(text)
            messages.append((level, text))
        while True:
            polling = cpu_until is not None and not interrupted
            wait_until = min(deadline, time.monotonic() + CPU_POLL_S) if polling else deadline
            try:
                elem = self._warm.receive(wait_until)
            except DeadlinePassed:
                if interrupted:
                    self.kill()
                    raise DeadlinePassed("coqidetop did not answer an interrupt; killed") from None
                if polling and wait_until < deadline and self.cpu_s() <= cpu_until:  # type: ignore[operator]
                    continue  # the CPU budget is not spent yet
                interrupted = "the CPU budget" if polling and wait_until < deadline else "the deadline"
                self._warm.interrupt()
                deadline = time.monotonic() + 2.0
                continue
            if elem.tag == "feedback":
                content = elem.find("feedback_content")
                kind = content.get("val") if content is not None else ""
                if kind == "message":
                    msg = content.find("message")
                    keep(msg.find("message_level").get("val"), richpp_text(msg.find("richpp")).strip())
                elif kind == "fileloaded":
                    strings = content.findall("string")
                    if strings:
                        loaded.append(strings[0].text or "")
                continue
            if elem.tag == "message":  # old-style out-of-band message
                level_elem = elem.find("message_level")
                keep(level_elem.get("val") if level_elem is not None else "notice",
                     richpp_text(elem.find("richpp")).strip())
                continue
            if elem.tag != "value":
                continue
            good = elem.get("val") == "good"
            error = "" if good else richpp_text(elem.find("richpp")).strip()
            if interrupted:
                raise DeadlinePassed(f"interrupted at {interrupted}")
            return Reply(good, elem, messages, error, loaded, dropped)

    # -- protocol ----------------------------------------------------------------------------
    def add(self, sentence: str, state: int, *, timeout_s: float,
            cpu_until: float | None = None) -> tuple[int | None, Reply]:
        """Parse ``sentence`` after ``state``. Returns the new state id (None on a parse error)."""
        xml = (
            '<call val="Add"><pair><pair><pair><pair>'
            f"<string>{escape(sentence)}</string><int>-1</int></pair>"
            f'<pair><state_id val="{state}"/><bool val="false"/></pair></pair>'
            "<int>0</int></pair><pair><int>0</int><int>0</int></pair></pair></call>"
        )
        reply = self.call(xml, timeout_s=timeout_s, cpu_until=cpu_until)
        if not reply.good:
            return None, reply
        sid = reply.value.find("pair/state_id")
        return int(sid.get("val")), reply

    def goal_snapshot(self, *, timeout_s: float, cpu_until: float | None = None) -> tuple[GoalSnapshot | None, Reply]:
        """Execute up to the tip; all goal lists (None when not in proof mode)."""
        reply = self.call('<call val="Goal"><unit/></call>', timeout_s=timeout_s, cpu_until=cpu_until)
        if not reply.good:
            return None, reply
        opt = reply.value.find("option")
        if opt is None or opt.get("val") == "none":
            return None, reply
        lists = opt.find("goals").findall("list")
        fg = tuple(_parse_goal(g) for g in lists[0].findall("goal")) if lists else ()
        bg = tuple(_parse_goal(g) for g in lists[1].findall(".//goal")) if len(lists) > 1 else ()
        shelved = tuple(_parse_goal(g) for g in lists[2].findall("goal")) if len(lists) > 2 else ()
        given_up = tuple(_parse_goal(g) for g in lists[3].findall("goal")) if len(lists) > 3 else ()
        return GoalSnapshot(fg, bg, shelved, given_up), reply

    def goals(self, *, timeout_s: float, cpu_until: float | None = None) -> tuple[list[Goal] | None, Reply]:
        """The focused goals; when none are focused, the unfocused and shelved ones (what remains)."""
        snap, reply = self.goal_snapshot(timeout_s=timeout_s, cpu_until=cpu_until)
        if snap is None:
            return None, reply
        return list(snap.foreground or (snap.background + snap.shelved)), reply

    def status(self, *, timeout_s: float, cpu_until: float | None = None) -> Reply:
        return self.call('<call val="Status"><bool val="true"/></call>', timeout_s=timeout_s, cpu_until=cpu_until)

    def edit_at(self, state: int, *, timeout_s: float) -> Reply:
        return self.call(f'<call val="Edit_at"><state_id val="{state}"/></call>', timeout_s=timeout_s)

    def query(self, command: str, state: int, *, timeout_s: float) -> Reply:
        xml = (
            '<call val="Query"><pair><route_id val="0"/><pair>'
            f'<string>{escape(command)}</string><state_id val="{state}"/></pair></pair></call>'
        )
        return self.call(xml, timeout_s=timeout_s)

    def kill(self) -> None:
        """Kill the prover's whole tree, let the readers see EOF, and close our pipe ends. Idempotent."""
        self._warm.kill()

    close = kill

    def worn_out(self) -> str | None:
        """Why this prover should be replaced before its next check (too much memory), or None."""
        return self._warm.worn_out()

    def program_pids(self) -> list[int]:
        """Pids of the prover itself (inside the sandbox), for memory accounting."""
        return self._warm.program_pids()

    @property
    def pid(self) -> int:
        return self._warm.pid


@dataclass(frozen=True)
class GoalSnapshot:
    """Coq's goal lists at one state."""

    foreground: tuple[Goal, ...]
    background: tuple[Goal, ...]  # unfocused (e.g. the other bullets' goals)
    shelved: tuple[Goal, ...]
    given_up: tuple[Goal, ...]

    @property
    def finished(self) -> bool:
        return not (self.foreground or self.background or self.shelved or self.given_up)


def _parse_goal(elem: ET.Element) -> Goal:
    hyps_list = elem.find("list")
    hyps = tuple(" ".join(richpp_text(h).split()) for h in (hyps_list if hyps_list is not None else []))
    richpps = elem.findall("richpp")
    concl = richpp_text(richpps[-1]).strip() if richpps else ""
    return Goal(hyps, re.sub(r"[ \t]+", " ", concl))
