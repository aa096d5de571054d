"""What the Coq red-team files share: a task of one statement, and the pre-check's rejection of a proof."""

from __future__ import annotations

import pytest

from proofgym.envs.types import Task
from proofgym.envs.verifiers.base import Rejected
from proofgym.envs.verifiers.coq.proof import normalize_proof

ADD_0 = "Lemma t (n : nat) : n + 0 = n."
IND = "induction n; simpl; congruence."


def coq_task(tid: str, statement: str = ADD_0, context: str = "", qualid: str = "") -> Task:
    metadata: dict[str, object] = {"allowed_axioms": []}
    if qualid:
        metadata["qualid"] = qualid
    return Task(id=f"rt7.{tid}", system="coq", context=context, statement=statement,
                reference_proof=f"Proof. {IND} Qed.", category="P1", timeout_s=20, metadata=metadata)


def rejected(proof: str, statement: str = ADD_0) -> Rejected:
    """The pre-check's rejection of ``proof`` (the test fails if it is not rejected)."""
    with pytest.raises(Rejected) as info:
        normalize_proof(proof, statement)
    return info.value
