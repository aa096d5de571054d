"""What every trainer adapter's test shares: the task, the three replies, a fake broken verifier, verl's batch faked."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

from proofgym.envs.errors import VerifierCrashed
from proofgym.envs.types import CheckResult, Task

TASK = "coq.tiny.lia"  # Theorem lt_le (a b : nat) : a < b -> a <= b.
OK_REPLY = "```coq\nProof. lia. Qed.\n```"
FAIL_REPLY = "```coq\nProof. reflexivity. Qed.\n```"
CHEAT_REPLY = "```coq\nProof. Admitted.\n```"


class FakeBrokenVerifier:
    """A fake verifier (Coq unless told another system) whose prover always crashes: every check is a harness failure."""

    def __init__(self, system: str = "coq") -> None:
        self.system = system

    def check(self, task: Task, proof: str) -> CheckResult:
        raise VerifierCrashed("fake: coqidetop died" if self.system == "coq" else f"fake: the {self.system} prover died")

    def open(self, task: Task) -> Any:
        """Tactic mode: the prover dies opening the task."""
        self.check(task, "")

    def close(self) -> None:
        pass


class FakeDataProto:
    """A fake of verl's ``DataProto`` (verl cannot install here): what its reward managers read of one.

    ``batch`` holds tensors with one row per sample (``prompts``, ``responses``, ``attention_mask``),
    ``non_tensor_batch`` numpy object arrays (``data_source``, ``reward_model``, ``extra_info``);
    ``len``, an int index (one item, as ``DataProtoItem``) and a slice (a smaller ``FakeDataProto``) as verl's.
    """

    def __init__(self, batch: dict[str, Any], non_tensor_batch: dict[str, Any], meta_info: dict[str, Any] | None = None):
        self.batch = batch
        self.non_tensor_batch = non_tensor_batch
        self.meta_info = meta_info or {}

    def __len__(self) -> int:
        return len(next(iter(self.batch.values())))

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return FakeDataProto({k: v[index] for k, v in self.batch.items()},
                                 {k: v[index] for k, v in self.non_tensor_batch.items()}, self.meta_info)
        return SimpleNamespace(batch={k: v[index] for k, v in self.batch.items()},
                               non_tensor_batch={k: v[index] for k, v in self.non_tensor_batch.items()})

    @classmethod
    def from_rows(cls, tokenizer: Any, rows: list[dict[str, Any]], responses: list[str]) -> FakeDataProto:
        """A rollout batch as verl lays it out: prompts left-padded, responses right-padded, one attention mask."""
        import numpy as np
        import torch

        prompts = [tokenizer(str(r["prompt"][-1]["content"]), add_special_tokens=False)["input_ids"] for r in rows]
        answers = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in responses]
        width_p, width_r = max(map(len, prompts)), max(map(len, answers))
        pad = tokenizer.pad_token_id or 0
        prompt_t = torch.tensor([[pad] * (width_p - len(p)) + p for p in prompts])
        response_t = torch.tensor([a + [pad] * (width_r - len(a)) for a in answers])
        mask = torch.tensor([[0] * (width_p - len(p)) + [1] * (len(p) + len(a)) + [0] * (width_r - len(a))
                             for p, a in zip(prompts, answers, strict=True)])

        def column(key: str) -> Any:
            return np.array([r[key] for r in rows], dtype=object)

        return cls({"prompts": prompt_t, "responses": response_t, "attention_mask": mask},
                   {key: column(key) for key in ("data_source", "reward_model", "extra_info")})


# Dafny (the packaged dafny-nl suite): a wrong body, the right one, and a cheat.
DAFNY_TASK = "dafny.nl.abs"
_ABS = "method Abs(x: int) returns (y: int)\n  ensures y >= 0\n  ensures y == x || y == -x\n"
DAFNY_FAIL = f"```dafny\n{_ABS}{{\n  y := x;\n}}\n```"
DAFNY_OK = f"```dafny\n{_ABS}{{\n  if x < 0 {{\n    y := -x;\n  }} else {{\n    y := x;\n  }}\n}}\n```"
DAFNY_CHEAT = f"```dafny\n{_ABS}{{\n  assume false;\n}}\n```"


@contextmanager
def coq_tiny_scored_on(verifier: Any) -> Iterator[None]:
    """coq-tiny checked on ``verifier`` in this process: the scorer an adapter would otherwise make for it."""
    from proofgym.envs.verifiers.pool.inprocess import InProcessPool
    from proofgym.training.integrations.core import ProofScorer, use_scorer

    with InProcessPool({"coq": verifier}) as pool:
        use_scorer("coq-tiny", ProofScorer("coq-tiny", pool=pool))
        try:
            yield
        finally:
            use_scorer("coq-tiny", None)
