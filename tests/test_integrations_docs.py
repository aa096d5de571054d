"""Every trainer page under ``docs/integrations/`` has a copy-paste example, and a test runs it."""

from __future__ import annotations

import re
from pathlib import Path

DOCS = Path(__file__).resolve().parent.parent / "docs" / "integrations"
PAGES = ("trl", "openenv", "verifiers", "verl", "openrlhf")
_EXAMPLE = re.compile(r"<!-- example:[^>]*-->\s*```python\n(.*?)^```[ \t]*$", re.S | re.M)  # a fence at a line start


def doc_example(page: str) -> str:
    """The code of the block marked ``<!-- example: ... -->`` in ``docs/integrations/<page>.md``."""
    found = _EXAMPLE.findall((DOCS / f"{page}.md").read_text(encoding="utf-8"))
    if len(found) != 1:
        raise AssertionError(f"docs/integrations/{page}.md must have exactly one marked example, found {len(found)}")
    return found[0]


def test_every_trainer_page_has_one_marked_example_that_compiles():
    present = [page for page in PAGES if (DOCS / f"{page}.md").exists()]
    assert present, "no trainer pages"
    for page in present:
        compile(doc_example(page), f"docs/integrations/{page}.md", "exec")


def test_every_proofgym_command_line_on_the_pages_parses():
    import shlex

    from proofgym.cli import build_parser

    fence = re.compile(r"^```bash\n(.*?)^```", re.S | re.M)
    lines = [(page, line) for page in PAGES if (DOCS / f"{page}.md").exists()
             for block in fence.findall((DOCS / f"{page}.md").read_text(encoding="utf-8"))
             for line in block.splitlines() if line.startswith("proofgym ")]
    assert lines, "no proofgym command on the trainer pages"
    for page, line in lines:
        try:
            build_parser().parse_args(shlex.split(line, comments=True)[1:])
        except SystemExit as exc:  # argparse's answer to an option the CLI does not have
            raise AssertionError(f"docs/integrations/{page}.md: {line!r} does not parse") from exc
