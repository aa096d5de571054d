"""What every trainer adapter's test shares: the task, the three replies, and a fake broken verifier."""

from __future__ import annotations

from proofgym.envs.errors import VerifierCrashed
from proofgym.envs.types import CheckResult, Task

TASK = "coq.tiny.lia"  # Theorem lt_le (a b : nat) : a < b -> a <= b.
OK_REPLY = "```coq\nProof. lia. Qed.\n```"
FAIL_REPLY = "```coq\nProof. reflexivity. Qed.\n```"
CHEAT_REPLY = "```coq\nProof. Admitted.\n```"


class FakeBrokenVerifier:
    """A fake Coq verifier whose prover always crashes: every check is a harness failure."""

    system = "coq"

    def check(self, task: Task, proof: str) -> CheckResult:
        raise VerifierCrashed("fake: coqidetop died")

    def close(self) -> None:
        pass
