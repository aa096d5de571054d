"""`proofgym doctor`: which provers are installed, their versions, and what to install."""

from __future__ import annotations

import argparse
from typing import Any


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from proofgym.envs.systems import SANDBOX_PROBE, SPECS, wired_systems
    from proofgym.envs.verifiers.sandbox import bwrap_available

    rows = [(spec.name, probe.tool, probe.status(), probe.install) for spec in SPECS.values() for probe in spec.probes]
    rows.append(("sandbox", SANDBOX_PROBE.tool, "works" if bwrap_available() else None, SANDBOX_PROBE.install))
    table = Table(title="proofgym doctor")
    for col in ("system", "tool", "status", "to install"):
        table.add_column(col)
    for system, tool, status, install in rows:
        table.add_row(system, tool, f"[green]{status}[/]" if status else "[red]missing[/]", "" if status else install)
    Console().print(table)
    print(f"verifiers wired in this version: {', '.join(wired_systems())}")
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("doctor", help="which provers are installed, their versions, and what to install")
    p.set_defaults(func=run)

