"""Expert iteration on a tiny local model: 2 rounds, verified proofs only, parameters changed (slow tier).

The policy is taught to answer most tiny-suite tasks with their reference proof and one task with a cheat; a
fake verifier says OK for the reference proof, CHEATING for ``Admitted`` and FAIL otherwise, so which sampled
proofs may be trained on is known exactly.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("trl")

from proofgym.envs.parsing import parse_proof, statement_to_strip  # noqa: E402
from proofgym.envs.tasks.suites import load_tasks  # noqa: E402
from proofgym.envs.types import CheckResult, Task, Verdict  # noqa: E402
from proofgym.training.data import prompt_messages, reference_completion  # noqa: E402
from proofgym.training.expert_iteration import kept_proofs  # noqa: E402
from proofgym.training.rewards import Outcome  # noqa: E402
from proofgym.training.sampling import Sample  # noqa: E402

CONTEXT_CHARS = 120
CHEATER = "tiny.and_comm"
CHEAT = "```coq\nProof. Admitted.\n```"


class ReferenceVerifier:
    """OK exactly for the task's reference proof, CHEATING for ``Admitted``, FAIL for anything else."""

    def __init__(self, system: str = "coq", **kwargs: Any) -> None:
        pass

    def check(self, task: Task, proof: str) -> CheckResult:
        if "Admitted" in proof:
            return CheckResult(Verdict.CHEATING, ("admitted: the proof ends with Admitted",))
        return CheckResult(Verdict.OK if proof.strip() == task.reference_proof.strip() else Verdict.FAIL)

    def close(self) -> None:
        pass


def test_only_ok_proofs_are_kept_never_cheats_and_duplicates_once(tiny_suite):
    task = load_tasks(tiny_suite)[0]
    samples = [Sample(task, "", Outcome(v, 0.0, proof=p)) for v, p in
               [("OK", "a"), ("CHEATING", "b"), ("OK", "a"), ("FAIL", "c"), (None, "d"), ("OK", "e"), ("OK", "f")]]
    kept: dict[str, list[str]] = {}
    assert kept_proofs(samples, kept, limit=2) == 2
    assert kept == {task.id: ["a", "e"]}


@pytest.fixture(scope="module")
def taught_model(tmp_path_factory, tiny_suite) -> Path:
    from proofgym.agents.tiny_model import build_tiny_model

    teach = [(prompt_messages(t, context_chars=CONTEXT_CHARS), CHEAT if t.id == CHEATER else reference_completion(t))
             for t in load_tasks(tiny_suite)]
    return build_tiny_model(tmp_path_factory.mktemp("ei") / "model", teach=teach, teach_steps=400)


def _weights(path: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    return load_file(str(path / "model.safetensors"))


@pytest.mark.slow
def test_two_rounds_train_on_verified_proofs_only_and_change_the_parameters(tmp_path, taught_model, tiny_suite):
    from proofgym.training.expert_iteration import train_expert_iteration
    from proofgym.training.expert_iteration_config import ProofExpertIterationConfig

    cfg = ProofExpertIterationConfig(
        model_name_or_path=str(taught_model), suite=str(tiny_suite), output_dir=str(tmp_path / "run"),
        report_to="none", rounds=2, samples_per_task=3, sample_temperature=0.7, sample_max_tokens=48,
        sample_batch_size=9, per_device_train_batch_size=2, learning_rate=1e-3, prompt_context_chars=CONTEXT_CHARS,
        heldout_fraction=0.0, verifier_workers=1, checkpoint_eval_at_end=False, save_strategy="no", torch_threads=1,
        max_length=512, seed=0, verifier_factory="tests.test_expert_iteration:ReferenceVerifier")
    result = train_expert_iteration(cfg)
    tasks = {t.id: t for t in load_tasks(tiny_suite)}

    rounds = [row for row in result.log_history if "expert_iteration/round" in row]
    assert [r["expert_iteration/round"] for r in rounds] == [1, 2]
    for r in rounds:
        assert r["expert_iteration/samples"] == 3 * len(tasks)
        assert 0 < r["expert_iteration/pass_rate"] < 1 and r["expert_iteration/sft_steps"] >= 1
        assert r["expert_iteration/verdict/CHEATING"] > 0  # the cheat was sampled, so leaving it out means something
    assert rounds[0]["expert_iteration/kept_proofs"] > 0
    logged = [json.loads(line) for line in (tmp_path / "run" / "rounds.jsonl").read_text().splitlines()]
    assert [r["expert_iteration/round"] for r in logged] == [1, 2]

    # every example fine-tuned on, in both rounds, is a proof the verifier says OK; none is the cheater's
    for n in (1, 2):
        rows = [json.loads(line) for line in (tmp_path / "run" / f"round-{n}" / "kept.jsonl").read_text().splitlines()]
        assert rows and len(rows) == rounds[n - 1]["expert_iteration/train_proofs"]
        for row in rows:
            task = tasks[row["task_id"]]
            proof = parse_proof(row["completion"][0]["content"], statement=statement_to_strip(task)).proof
            assert ReferenceVerifier().check(task, proof).verdict is Verdict.OK
            assert row["task_id"] != CHEATER and row["prompt"] == prompt_messages(task, context_chars=CONTEXT_CHARS)

    before, after = _weights(taught_model), _weights(result.final_checkpoint)
    assert any(not before[name].equal(after[name]) for name in before)
    assert result.global_step == sum(r["expert_iteration/sft_steps"] for r in rounds)
