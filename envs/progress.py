"""Progress on long work, for people at a terminal and for logs.

On a terminal it is a rich progress bar (count, elapsed, time left, a live description). Where
stderr is a pipe or a file (CI, ``make eval > log``, ``nohup``) a bar cannot redraw, and rich would
print nothing until the end; there it writes one plain line at the start, then one every
``every_s`` seconds (a heartbeat, even while nothing finishes: a model generating, a prover
loading), and one at the end. :meth:`ProgressBar.activity` says what is going on meanwhile::

    [validate] 120/360 (33%) 0:02:41 elapsed, ~0:05:20 left  kept 118, excluded 2
    [eval] 0/24 (0%) 0:01:00 elapsed  generating 8 replies (0:01:00 so far)
"""

from __future__ import annotations

import sys
import threading
import time
from typing import IO, Any


def _clock(seconds: float) -> str:
    seconds = int(max(0.0, seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class ProgressBar:
    """``with ProgressBar("eval", total=n) as bar: ... bar.advance(description="pass 3/4")``.

    Args:
        label: What the work is (``eval``, ``validate``...).
        total: Units of work (``None`` when unknown).
        completed: Units already done (a resumed run).
        enabled: ``False`` shows nothing.
        console: A rich console to draw on (default: stderr); a terminal console means a live bar.
        every_s: Seconds between plain lines when not on a terminal.
        stream: Where plain lines go (default: stderr).
    """

    def __init__(self, label: str, total: int | None, *, completed: int = 0, enabled: bool = True,
                 console: Any = None, every_s: float = 30.0, stream: IO[str] | None = None) -> None:
        self.label = label
        self.total = total
        self.completed = completed
        self.enabled = enabled
        self.every_s = every_s
        self.description = ""
        self._stream = stream
        self._console = console
        self._rich: Any = None
        self._task: Any = None
        self._started = 0.0
        self._last_line = 0.0
        self._done_at_start = completed
        self._activity = ""
        self._activity_since = 0.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._heartbeat: threading.Thread | None = None

    @property
    def live(self) -> bool:
        """Whether this draws a live bar (a terminal) rather than plain lines."""
        return self._rich is not None

    def __enter__(self) -> ProgressBar:
        self._started = self._last_line = time.monotonic()
        if not self.enabled:
            return self
        stream = self._out()
        on_terminal = self._console.is_terminal if self._console is not None else stream.isatty()
        if on_terminal:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._rich = Progress(TextColumn(f"[bold]{self.label}"), BarColumn(), MofNCompleteColumn(),
                                  TimeElapsedColumn(), TimeRemainingColumn(), TextColumn("{task.description}"),
                                  console=self._console or Console(stderr=True), transient=False)
            self._rich.start()
            self._task = self._rich.add_task("", total=self.total, completed=self.completed)
        else:
            self._line()
            if self.every_s > 0:  # every_s=0: a line at every advance, and no heartbeat is needed
                self._heartbeat = threading.Thread(target=self._beat, name=f"progress-{self.label}", daemon=True)
                self._heartbeat.start()
        return self

    def activity(self, text: str) -> None:
        """What is happening while no unit finishes (``generating 8 replies``); "" when nothing is."""
        with self._lock:
            if text != self._activity:
                self._activity, self._activity_since = text, time.monotonic()
        if self._rich is not None:
            self._rich.update(self._task, description=self._description())

    def advance(self, n: int = 1, *, description: str | None = None) -> None:
        self.completed += n
        if description is not None:
            self.description = description
        if not self.enabled:
            return
        if self._rich is not None:
            self._rich.update(self._task, advance=n, description=self._description())
        elif time.monotonic() - self._last_line >= self.every_s:
            self._line()

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._heartbeat is not None:
            self._heartbeat.join()
            self._heartbeat = None
        if not self.enabled:
            return
        if self._rich is not None:
            self._rich.stop()
        else:
            self._line(final=True)

    def line(self) -> str:
        """The plain progress line as it stands now."""
        elapsed = time.monotonic() - self._started
        parts = [f"[{self.label}]"]
        if self.total:
            parts.append(f"{self.completed}/{self.total} ({100 * self.completed / self.total:.0f}%)")
        else:
            parts.append(str(self.completed))
        timing = f"{_clock(elapsed)} elapsed"
        done_here = self.completed - self._done_at_start
        if self.total and 0 < done_here and self.completed < self.total:
            timing += f", ~{_clock(elapsed / done_here * (self.total - self.completed))} left"
        parts.append(timing)
        description = self._description()
        if description:
            parts.append(" " + description)
        return " ".join(parts)

    def _description(self) -> str:
        with self._lock:
            activity, since = self._activity, self._activity_since
        if not activity:
            return self.description
        now = f"{activity} ({_clock(time.monotonic() - since)} so far)"
        return f"{self.description}  {now}" if self.description else now

    def _beat(self) -> None:
        while not self._stop.wait(min(1.0, self.every_s)):  # every_s > 0 here
            if time.monotonic() - self._last_line >= self.every_s:
                self._line()

    def _out(self) -> IO[str]:
        if self._stream is not None:
            return self._stream
        return getattr(self._console, "file", None) or sys.stderr

    def _line(self, final: bool = False) -> None:
        with self._lock:
            self._last_line = time.monotonic()
        print(self.line() + (" done" if final else ""), file=self._out(), flush=True)
