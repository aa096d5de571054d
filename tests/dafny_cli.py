"""Dafny's own answer on a program, with none of proofgym's rules: the Dafny CLI run directly.

The trust tests use it to show why a rule is proofgym's (Dafny 2.3 itself accepts the cheat); the
verifier has no way to run a program unjudged, on purpose.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from proofgym.envs.verifiers.dafny import DafnyConfig, find_z3
from proofgym.envs.verifiers.dafny.output import DafnyOutput, parse_output


def dafny_itself(program: str, *, time_limit_s: int = 60) -> DafnyOutput:
    """``program`` verified by ``dafny /compile:0 /noCheating:1 /trace`` with the verifier's z3, as Dafny reports it."""
    config = DafnyConfig()
    z3, _ = find_z3(config.z3)
    argv = [shutil.which(config.mono) or config.mono, os.path.join(config.dafny_dir, "Dafny.exe"), "/compile:0",
            f"/z3exe:{z3}", f"/timeLimit:{time_limit_s}", "/noCheating:1", "/trace", config.filename]
    with tempfile.TemporaryDirectory(prefix="proofgym-dafny-itself-") as tmp:
        Path(tmp, config.filename).write_text(program, encoding="utf-8")
        run = subprocess.run(argv, cwd=tmp, capture_output=True, text=True, timeout=time_limit_s + 60)  # noqa: S603
    return parse_output(run.stdout + "\n" + run.stderr, filename=config.filename)
