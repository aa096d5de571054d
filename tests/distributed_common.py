"""What the multi-process training tests share: launching ``torchrun``, the weights digest, the audit of a rank's
writes, and verifiers that record every check they make.

A torchrun test runs ``python -m torch.distributed.run --standalone --nproc_per_node 2 -m <test module> ...``;
each rank runs the test module's ``__main__``, which calls the training entry point and writes
``$PROOFGYM_TEST_RECORD/rank<R>.json`` (its weights digest before and after training, the files it opened for
writing under the run dir, what the run returned). The verifiers below write one line per check into
``$PROOFGYM_FAKE_CHECK_LOG/<pid>.log`` (pool workers inherit the training process's ``RANK``), so a test counts
who checked what.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from proofgym.envs.types import CheckResult, Task

ROOT = Path(__file__).resolve().parents[1]


def weights_digest(model: Any) -> str:
    """SHA-256 over a model's state dict (names and bytes, in name order): equal digests, equal weights."""
    import hashlib

    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def audit_writes(out_dir: str | os.PathLike) -> set[str]:
    """Record, from now on, every file this process opens for writing under ``out_dir`` (relative paths, in the
    returned set; an audit hook cannot be removed, so call it once per process)."""
    out = os.path.realpath(out_dir)
    writes: set[str] = set()

    def audit(event: str, args: tuple) -> None:
        if event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
            path = os.path.realpath(os.fsdecode(args[0]))
            mode, flags = args[1] or "", args[2] or 0
            writing = any(c in mode for c in "wax+") or bool(flags & (os.O_WRONLY | os.O_RDWR))
            if writing and (path == out or path.startswith(out + os.sep)):
                writes.add(os.path.relpath(path, out))

    sys.addaudithook(audit)
    return writes


def torchrun(module: str, argv: Sequence[str], *, cwd: Path, env: dict[str, str], timeout: float) -> None:
    """Run ``module`` on two gloo ranks under torchrun; fail with both ranks' output tails if it does not end
    well within ``timeout`` seconds (a hang is a failure, not a stuck test run)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m", module,
           *argv]
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **env}
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=full_env)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"torchrun did not end within {timeout} s: {exc.stdout!s:.2000} {exc.stderr!s:.4000}") from None
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-6000:]


def rank_records(record: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """Rank 0's and rank 1's ``rank<R>.json``."""
    r0, r1 = (json.loads((record / f"rank{r}.json").read_text()) for r in (0, 1))
    return r0, r1


def check_lines(checks: Path) -> list[list[str]]:
    """Every check the recording verifiers logged: ``[rank, task id, verdict]`` each."""
    return [line.split() for p in checks.iterdir() for line in p.read_text().splitlines()]


class RecordingCoqVerifier:
    """The real verifier (Coq for the tiny suite), plus one line ``<training rank> <task id> <verdict>`` per check
    in ``$PROOFGYM_FAKE_CHECK_LOG/<pid>.log``. Not a fake: the verdicts are the prover's."""

    def __init__(self, system: str = "coq", **kwargs: Any) -> None:
        from proofgym.envs.verifiers.base import make_verifier

        self.inner = make_verifier(system, **kwargs)
        self.log = Path(os.environ["PROOFGYM_FAKE_CHECK_LOG"]) / f"{os.getpid()}.log"
        self.rank = os.environ.get("RANK", "-")

    def check(self, task: Task, proof: str) -> CheckResult:
        result = self.inner.check(task, proof)
        with self.log.open("a", encoding="utf-8") as fh:
            fh.write(f"{self.rank} {task.id} {result.verdict.value}\n")
        return result

    def close(self) -> None:
        self.inner.close()


class GatedCoqVerifier(RecordingCoqVerifier):
    """:class:`RecordingCoqVerifier` that checks nothing until the file ``$PROOFGYM_TEST_GATE`` exists (a test's
    event: written once training has gone past a given step). No gate within ``GATE_WAIT_S``: the check raises (a
    harness failure in the results), so a run whose training waits for this check fails its test instead of
    hanging."""

    GATE_WAIT_S = 180.0

    def check(self, task: Task, proof: str) -> CheckResult:
        gate = Path(os.environ["PROOFGYM_TEST_GATE"])
        deadline = time.monotonic() + self.GATE_WAIT_S
        while not gate.exists():  # waiting for an event another process writes (no ordering by sleeping)
            if time.monotonic() > deadline:
                raise RuntimeError(f"the gate {gate} was not opened within {self.GATE_WAIT_S} s")
            time.sleep(0.2)
        return super().check(task, proof)


def on_rank_0_step(step: int, action: Callable[[], None]) -> Any:
    """A TrainerCallback that runs ``action`` once, on rank 0, at the end of optimizer step ``step``."""
    from transformers import TrainerCallback

    class AtStep(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.global_step == step and state.is_world_process_zero:
                action()

    return AtStep()
