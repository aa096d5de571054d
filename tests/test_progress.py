"""Progress: a live bar on a terminal, plain timed lines in a log (CI, `make eval > log`)."""

from __future__ import annotations

import io
import threading

from rich.console import Console

from proofgym.envs.progress import ProgressBar


def test_plain_lines_when_not_on_a_terminal():
    log = io.StringIO()
    with ProgressBar("validate", 4, every_s=0.0, stream=log) as bar:
        assert not bar.live
        bar.advance(description="kept 1")
        bar.advance(2, description="kept 3")
    lines = log.getvalue().splitlines()
    assert lines[0].startswith("[validate] 0/4 (0%) 0:00:00 elapsed")
    assert "[validate] 3/4 (75%)" in lines[2] and "left" in lines[2] and lines[2].endswith("kept 3")
    assert lines[-1].startswith("[validate] 3/4") and lines[-1].endswith("done")


def test_plain_lines_are_rate_limited():
    log = io.StringIO()
    with ProgressBar("eval", 1000, every_s=3600, stream=log) as bar:
        for _ in range(1000):
            bar.advance()
    assert len(log.getvalue().splitlines()) == 2  # the start and the end, nothing between within the hour
    assert "1000/1000 (100%)" in log.getvalue().splitlines()[-1]


def test_a_resumed_run_starts_from_what_was_done():
    log = io.StringIO()
    with ProgressBar("eval", 10, completed=6, every_s=0.0, stream=log) as bar:
        bar.advance()
    assert log.getvalue().splitlines()[0].startswith("[eval] 6/10 (60%)")
    assert "7/10" in log.getvalue().splitlines()[-1]


def test_live_bar_on_a_terminal_and_nothing_when_disabled():
    screen = io.StringIO()
    console = Console(file=screen, force_terminal=True, width=100)
    with ProgressBar("eval", 2, console=console) as bar:
        assert bar.live
        bar.advance(description="pass 1/1")
        bar.advance(description="pass 2/2")
    assert "eval" in screen.getvalue() and "2/2" in screen.getvalue() and "pass 2/2" in screen.getvalue()
    quiet = io.StringIO()
    with ProgressBar("eval", 2, enabled=False, stream=quiet) as bar:
        bar.advance()
    assert quiet.getvalue() == "" and bar.completed == 1


class _Lines(io.StringIO):
    """A log that tells when a line with some text has been written."""

    def __init__(self, wanted: str) -> None:
        super().__init__()
        self.wanted = wanted
        self.seen = threading.Event()

    def write(self, text: str) -> int:
        if self.wanted in text:
            self.seen.set()
        return super().write(text)


def test_a_heartbeat_says_what_is_going_on_while_nothing_finishes():
    log = _Lines("generating 8 replies")
    with ProgressBar("eval", 24, every_s=0.01, stream=log) as bar:
        bar.activity("generating 8 replies")
        assert log.seen.wait(60), log.getvalue()  # no advance() at all: the heartbeat wrote it
        bar.activity("")
    beat = next(line for line in log.getvalue().splitlines() if "generating" in line)
    assert beat.startswith("[eval] 0/24 (0%)") and "so far)" in beat
    assert "generating" not in log.getvalue().splitlines()[-1]  # the activity ended before the last line
