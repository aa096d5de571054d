"""The README and the manual in docs/ work as written: every Python block runs, every ``proofgym`` line parses.

A newcomer pastes the pages' snippets. Each Python block is run as its own script, in a fresh
folder with a fresh ``$PROOFGYM_CACHE`` (so only what ships with proofgym, like the ``coq-tiny`` and
``dafny-nl`` suites, is there), on the real provers. Each ``proofgym ...`` line of a shell block is
parsed by the real argument parser, so a renamed flag or subcommand fails here before a user finds it.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from proofgym.cli import build_parser
from tests.conftest import requires_coq

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
#: The README and the manual: every page a user pastes from (docs/integrations/ runs in test_integrations_docs,
#: with each trainer's library).
PAGES = [README, *sorted(p for p in (ROOT / "docs").rglob("*.md") if "integrations" not in p.parts)]
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>\w*)\n(?P<body>.*?)^(?P=indent)```", re.MULTILINE | re.DOTALL)


def _blocks(lang: str) -> list[tuple[str, int, str]]:
    """``(page, line number, dedented code)`` of every fenced block of ``lang`` in the README and docs/."""
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        name = page.relative_to(ROOT).as_posix()
        found += [(name, text.count("\n", 0, m.start()) + 1, textwrap.dedent(m.group("body")))
                  for m in FENCE.finditer(text) if m.group("lang") == lang]
    return found


def blocks(lang: str) -> list[tuple[str, str]]:
    """``("page:line", code)`` of every fenced block of ``lang``: the id says where to look."""
    return [(f"{page}:{line}", code) for page, line, code in _blocks(lang)]


def proofgym_commands() -> list[tuple[str, list[str]]]:
    """The ``proofgym`` command lines of the shell blocks, each with its ``page:line``.

    Lines are split as a shell would: a quoted string may span lines, ``\\`` continues a line, ``#``
    starts a comment, and ``&&``, ``;``, ``|`` and ``&`` separate commands.
    """
    commands = []
    for page, line_no, body in _blocks("bash"):
        buffer, start = "", ""
        for offset, line in enumerate(body.splitlines()):
            if not buffer:
                start = f"{page}:{line_no + 1 + offset}"
            buffer += line + "\n"
            if buffer.endswith("\\\n"):
                continue
            try:
                words = shlex.split(buffer, comments=True)
            except ValueError:  # an open quote: the command goes on on the next line
                continue
            buffer = ""
            command: list[str] = []
            for word in [*words, ";"]:
                if word not in ("&&", ";", "|", "&", "||"):
                    command.append(word.rstrip(";&"))
                    continue
                while command and "=" in command[0] and not command[0].startswith("-"):  # VAR=value proofgym
                    command = command[1:]
                if command and command[0] in ("proofgym", ".venv/bin/proofgym"):
                    commands.append((start, command[1:]))
                command = []
    return commands


def test_the_readme_has_the_blocks_this_test_checks():
    assert len(blocks("python")) >= 5
    assert len(proofgym_commands()) >= 15


@pytest.mark.parametrize("line, argv", proofgym_commands(), ids=[line for line, _ in proofgym_commands()])
def test_every_proofgym_command_line_parses(line, argv):
    parser = build_parser()
    try:
        parser.parse_args(argv)
    except SystemExit as exc:
        pytest.fail(f"{line}: `proofgym {' '.join(argv)}` does not parse (exit {exc.code})")


@requires_coq
@pytest.mark.prover
@pytest.mark.parametrize("line, code", blocks("python"), ids=[line for line, _ in blocks("python")])
def test_every_python_block_runs_as_written(line, code, tmp_path):
    script = tmp_path / "snippet.py"
    script.write_text(code, encoding="utf-8")
    env = {**os.environ, "PROOFGYM_CACHE": str(tmp_path / "cache"), "WANDB_MODE": "disabled"}
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, f"{line}:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"


LINK = re.compile(r"!?\[[^\]]*\]\((?P<target>[^)\s]+)\)")


def test_the_root_holds_no_page_but_the_readme():
    """The manual lives in docs/, result files in docs/results/: a page or a plot at the root is a misplaced one."""
    stray = sorted(p.name for p in ROOT.iterdir() if p.suffix.lower() in (".md", ".png", ".svg") and p != README)
    assert stray == [], f"move {stray} under docs/ (results under docs/results/) and fix the links to them"


def test_every_relative_link_on_the_pages_resolves():
    """A moved page breaks no link: every relative link or image of the README and docs/ names a file that is there."""
    broken = []
    for page in [README, *sorted((ROOT / "docs").rglob("*.md"))]:
        text = FENCE.sub("", page.read_text(encoding="utf-8"))
        for m in LINK.finditer(text):
            target = m.group("target").split("#", 1)[0]
            if not target or re.match(r"^[a-z][a-z0-9+.-]*:", target):  # an anchor on the page, or a URL
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT).as_posix()}: {m.group('target')}")
    assert broken == []
