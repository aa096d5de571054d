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
from tests.distributed_common import weights_digest  # noqa: E402

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


@pytest.mark.slow
def test_round_evaluations_run_in_processes_of_their_own_and_land_in_order(tmp_path, taught_model, tiny_suite):
    """Issue 29: the initial model's and each round's evaluation run in a process of their own (a request file,
    a log, a record), so no rank waits for them; they land before the final model's, which runs after training.
    The evaluations use the run's verifier (the fake), not the real prover."""
    from proofgym.training.expert_iteration import train_expert_iteration
    from proofgym.training.expert_iteration_config import ProofExpertIterationConfig

    cfg = ProofExpertIterationConfig(
        model_name_or_path=str(taught_model), suite=str(tiny_suite), output_dir=str(tmp_path / "run"),
        report_to="none", rounds=2, samples_per_task=2, sample_temperature=0.7, sample_max_tokens=48,
        sample_batch_size=8, per_device_train_batch_size=2, learning_rate=1e-3, prompt_context_chars=CONTEXT_CHARS,
        heldout_fraction=0.34, verifier_workers=1, checkpoint_eval_on_start=True, eval_every_round=True,
        checkpoint_eval_at_end=True, checkpoint_eval_max_tokens=48, save_strategy="no", torch_threads=1,
        max_length=512, seed=0, verifier_factory="tests.test_expert_iteration:ReferenceVerifier")
    result = train_expert_iteration(cfg)

    evals = result.checkpoint_evals
    assert [e["step"] for e in evals] == [0, 1, 2] and not any("error" in e for e in evals), evals
    folder = tmp_path / "run" / "checkpoint_evals"
    for step in (0, 1):  # started with start_evaluation: a process of its own, its request, log and record
        request = json.loads((folder / f"step-{step}.request.json").read_text())
        assert request["config"]["verifier"] == "tests.test_expert_iteration:ReferenceVerifier"
        assert (folder / f"step-{step}.log").exists()
        assert json.loads((folder / f"step-{step}.record.json").read_text()) == evals[step]
    assert not (folder / "step-2.request.json").exists()  # the final model's: in this process, training over
    heldout = sum(evals[0]["verdicts"].values())
    assert heldout >= 1 and all(sum(e["verdicts"].values()) == heldout for e in evals)


# -- two ranks under torchrun (gloo) ---------------------------------------------------------------------------
class RecordingOKVerifier:
    """A fake verifier for the mechanics of a multi-process run: OK for any non-empty proof, and one line
    ``<training rank> <task id>`` per check in ``$PROOFGYM_FAKE_CHECK_LOG/<pid>.log`` (pool workers inherit the
    training process's ``RANK``), so the test counts who checked what."""

    def __init__(self, system: str = "coq", **kwargs: Any) -> None:
        import os

        self.log = Path(os.environ["PROOFGYM_FAKE_CHECK_LOG"]) / f"{os.getpid()}.log"
        self.rank = os.environ.get("RANK", "0")

    def check(self, task: Task, proof: str) -> CheckResult:
        with self.log.open("a", encoding="utf-8") as fh:
            fh.write(f"{self.rank} {task.id}\n")
        return CheckResult(Verdict.OK if proof.strip() else Verdict.FAIL)

    def close(self) -> None:
        pass


def _ranked_run(argv: list[str]) -> None:
    """One rank of the torchrun test: expert iteration's own entry, plus a record of this rank's weights before
    and after fine-tuning and of every file it opened for writing under the run's output dir (an audit hook)."""
    import os
    import sys

    import trl

    from proofgym.training.expert_iteration import main as expert_iteration_main

    out = str(Path(argv[argv.index("--output_dir") + 1]).resolve())
    writes: set[str] = set()

    def audit(event: str, args: tuple) -> None:
        if event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
            path, mode, flags = args
            writing = any(c in (mode or "") for c in "wax+") or bool((flags or 0) & (os.O_WRONLY | os.O_RDWR))
            if writing and os.path.abspath(os.fsdecode(path)).startswith(out):
                writes.add(os.path.relpath(os.path.abspath(os.fsdecode(path)), out))

    digests: dict[str, str] = {}

    class DigestingSFTTrainer(trl.SFTTrainer):
        def train(self, *args: Any, **kwargs: Any) -> Any:
            digests.setdefault("start", weights_digest(self.model))
            done = super().train(*args, **kwargs)
            digests["end"] = weights_digest(self.model)
            return done

    trl.SFTTrainer = DigestingSFTTrainer  # expert iteration imports it from trl when it runs
    sys.addaudithook(audit)
    result = expert_iteration_main(argv)
    record = Path(os.environ["PROOFGYM_TEST_RECORD"]) / f"rank{os.environ['RANK']}.json"
    record.write_text(json.dumps({"writes": sorted(writes), "global_step": result.global_step, **digests}))


@pytest.fixture(scope="module")
def untrained_model(tmp_path_factory) -> Path:
    from proofgym.agents.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("ei-ranks") / "model")


@pytest.mark.slow
def test_two_ranks_share_the_tasks_train_identical_weights_and_only_rank_0_writes(tmp_path, untrained_model,
                                                                                  tiny_suite):
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    out, checks, record = tmp_path / "run", tmp_path / "checks", tmp_path / "record"
    checks.mkdir()
    record.mkdir()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "tests.test_expert_iteration", "--model_name_or_path", str(untrained_model), "--suite",
           str(tiny_suite), "--output_dir", str(out), "--report_to", "none", "--rounds", "1", "--samples_per_task",
           "2", "--sample_max_tokens", "8", "--sample_batch_size", "4", "--per_device_train_batch_size", "2",
           "--learning_rate", "1e-3", "--max_proofs_per_task", "2", "--max_length", "512", "--heldout_fraction", "0",
           "--checkpoint_eval_at_end", "false", "--save_strategy", "no", "--torch_threads", "1",
           "--verifier_workers", "1", "--verdict_cache_entries", "0",
           "--verifier_factory", "tests.test_expert_iteration:RecordingOKVerifier"]
    env = {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1", "PROOFGYM_FAKE_CHECK_LOG": str(checks),
           "PROOFGYM_TEST_RECORD": str(record)}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]

    tasks = [t.id for t in load_tasks(tiny_suite)]
    lines = [line.split() for p in checks.iterdir() for line in p.read_text().splitlines()]
    # each rank sampled its own share, and every sample was checked exactly once
    assert sorted(t for r, t in lines if r == "0") == sorted(tasks[0::2] * 2)
    assert sorted(t for r, t in lines if r == "1") == sorted(tasks[1::2] * 2)
    rounds = [json.loads(line) for line in (out / "rounds.jsonl").read_text().splitlines()]
    assert rounds[0]["expert_iteration/samples"] == 2 * len(tasks)  # rank 0 logs every rank's samples

    r0, r1 = (json.loads((record / f"rank{r}.json").read_text()) for r in (0, 1))
    assert r0["end"] == r1["end"] and r0["start"] == r1["start"] and r0["end"] != r0["start"]
    assert r0["global_step"] == r1["global_step"] == rounds[0]["expert_iteration/sft_steps"] >= 1
    assert r1["writes"] == []
    assert {"rounds.jsonl", "round-1/kept.jsonl", "train_result.json", "config.json"} <= set(r0["writes"])


if __name__ == "__main__":  # one rank of the torchrun test above
    import sys

    _ranked_run(sys.argv[1:])
