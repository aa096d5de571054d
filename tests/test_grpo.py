"""GRPO with verifier rewards on a tiny local model (slow tier; the real-Coq tests are also the prover tier).

The policy is a tiny Llama built and taught here (agents/tiny_model.py) to answer the tiny suite's
prompts with their reference proofs, so GRPO sees real OK verdicts from Coq.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("trl")

from proofgym.envs.errors import VerifierCrashed  # noqa: E402
from proofgym.envs.tasks.suites import load_tasks  # noqa: E402
from proofgym.envs.types import CheckResult, Task, Verdict  # noqa: E402
from proofgym.training.data import prompt_messages, reference_completion  # noqa: E402
from proofgym.training.grpo import train_grpo  # noqa: E402
from proofgym.training.grpo_config import ProofGRPOConfig  # noqa: E402
from proofgym.training.grpo_trainer import ProofGRPOTrainer  # noqa: E402
from tests.conftest import requires_coq  # noqa: E402

pytestmark = pytest.mark.slow
CONTEXT_CHARS = 120


@pytest.fixture(scope="module")
def taught_model(tmp_path_factory, tiny_suite) -> Path:
    """A tiny model that answers each tiny-suite prompt with the task's reference proof (greedy)."""
    from proofgym.agents.tiny_model import build_tiny_model

    tasks = load_tasks(tiny_suite)
    teach = [(prompt_messages(t, context_chars=CONTEXT_CHARS), reference_completion(t)) for t in tasks]
    return build_tiny_model(tmp_path_factory.mktemp("policy") / "model", teach=teach, teach_steps=400)


def grpo_config(tmp_path: Path, model: Path, suite: Path, **overrides: Any) -> ProofGRPOConfig:
    base = dict(model_name_or_path=str(model), suite=str(suite), output_dir=str(tmp_path / "run"),
                report_to="none", max_steps=2, per_device_train_batch_size=4, num_generations=2,
                max_completion_length=48, learning_rate=1e-4, temperature=0.7, torch_threads=1,
                prompt_context_chars=CONTEXT_CHARS, heldout_fraction=0.25, verifier_workers=1,
                checkpoint_eval_at_end=False, checkpoint_eval_max_tokens=48, save_strategy="no", seed=0)
    return ProofGRPOConfig(**{**base, **overrides})


# The two stateful verifiers below count checks, so their tests turn the verdict cache off
# (verdict_cache_entries=0): a group's identical completions would otherwise be checked once, and the count would
# depend on how often the tiny model repeats itself (it did, under TRL 1.16 / transformers 5.24: 1 harness failure
# instead of 2, a cheat rate of 0.375 instead of 0.5).
class FlakyVerifier:
    """Per worker process: crashes twice in a row, then says FAIL twice, and so on.

    The pool retries a crashed check once on a rebuilt verifier, so every other check crashes twice
    (a harness failure) and the next one passes. The count is per process, kept across rebuilds.
    """

    calls = 0

    def __init__(self, system: str = "coq", **kwargs: Any) -> None:
        pass

    def check(self, task: Task, proof: str) -> CheckResult:
        FlakyVerifier.calls += 1
        if FlakyVerifier.calls % 4 in (1, 2):
            raise VerifierCrashed("the flaky prover crashed")
        return CheckResult(Verdict.FAIL, messages=("flaky",))

    def close(self) -> None:
        pass


class LateCheater:
    """Per worker process: FAIL for the first four checks (the first step's batch), then CHEATING."""

    calls = 0

    def __init__(self, system: str = "coq", **kwargs: Any) -> None:
        pass

    def check(self, task: Task, proof: str) -> CheckResult:
        LateCheater.calls += 1
        if LateCheater.calls <= 4:
            return CheckResult(Verdict.FAIL)
        return CheckResult(Verdict.CHEATING, ("admitted: the proof ends with Admitted",))

    def close(self) -> None:
        pass


def test_a_cheat_reason_absent_from_a_batch_counts_as_zero_in_the_logged_average(tmp_path, taught_model, tiny_suite):
    """TRL averages a metric over the batches that logged it: a reason first seen in the second of two batches
    of one logging window would read 1.0 instead of 0.5."""
    cfg = grpo_config(tmp_path, taught_model, tiny_suite, max_steps=2, logging_steps=2,
                      verifier_factory="tests.test_grpo:LateCheater", verdict_cache_entries=0)
    result = train_grpo(cfg)
    (row,) = [r for r in result.log_history if "proof/cheat_rate" in r]
    assert row["proof/cheat_rate"] == 0.5 and row["proof/cheat/admitted"] == 0.5
    assert row["proof/fail_rate"] == 0.5


def script_one_completion_per_group(monkeypatch: pytest.MonkeyPatch, tasks: list[Task]) -> list[str]:
    """Make the first completion of each GRPO group its task's reference proof; returns the tasks so scripted.

    The tiny model samples (temperature 0.7) the reference in about half its completions, and which ones depends on
    the sampler's stream (torch's version, the CPU): with one scripted sample in each group, every step's batch holds
    a proof Coq accepts, whatever the model samples. The rest of each group is the model's own samples.
    """
    original = ProofGRPOTrainer._generate_single_turn  # noqa: SLF001 - the one place TRL's completions come from
    scripted: list[str] = []

    def generate(self: ProofGRPOTrainer, prompt_ids: Any, *args: Any, **kwargs: Any) -> Any:
        completions, extra = original(self, prompt_ids, *args, **kwargs)
        tokenizer = self._tokenizer  # noqa: SLF001
        seen: set[tuple[int, ...]] = set()
        for i, ids in enumerate(prompt_ids):  # TRL repeats each prompt num_generations times, in a row
            if tuple(ids) in seen:
                continue
            seen.add(tuple(ids))
            (task,) = [t for t in tasks if t.statement in tokenizer.decode(ids)]
            reference = tokenizer(reference_completion(task), add_special_tokens=False)["input_ids"]
            completions[i] = [*reference, tokenizer.eos_token_id]
            scripted.append(task.id)
        return completions, extra

    monkeypatch.setattr(ProofGRPOTrainer, "_generate_single_turn", generate)
    return scripted


@requires_coq
@pytest.mark.prover
@pytest.mark.train_smoke
def test_grpo_two_steps_real_coq_wandb_offline_and_checkpoint_eval(tmp_path, taught_model, tiny_suite, monkeypatch):
    from proofgym.cli import main as proofgym_main
    from proofgym.training.logging import read_offline_run

    scripted = script_one_completion_per_group(monkeypatch, load_tasks(tiny_suite))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_PROJECT", "proofgym-test")
    monkeypatch.setenv("WANDB_SILENT", "true")
    cfg = grpo_config(tmp_path, taught_model, tiny_suite, report_to="wandb", checkpoint_eval_at_end=True,
                      save_strategy="steps", save_steps=2)
    result = train_grpo(cfg)

    assert result.global_step == 2 and not result.interrupted
    logged = [row for row in result.log_history if "proof/ok_rate" in row]
    assert len(logged) == 2
    assert all(row["verifier/harness_failures"] == 0 for row in logged)
    assert result.reward_totals["samples"] == 8  # 2 steps x 2 prompts x 2 generations
    assert sum(result.reward_totals.get(v, 0) for v in ("OK", "FAIL", "ERROR", "CHEATING", "TIMEOUT")) == 8
    import pandas as pd

    table = pd.concat(pd.read_parquet(p) for p in sorted((tmp_path / "run" / "completions").glob("*.parquet")))
    assert {"prompt", "completion", "verdict", "reasons", "verifier"} <= set(table.columns)
    assert ((table["verdict"] == "OK") == (table["verifier"] == 1.0)).all()
    # Coq accepted a proof in every step, and its reward reached training: each step's two prompts are different
    # tasks, at most one of them tiny.wrong_ref (whose reference Coq refuses), so each step has a scripted OK.
    assert len(scripted) == 4 and all(row["proof/ok_rate"] > 0 for row in logged), (scripted, logged)
    assert result.reward_totals["OK"] >= 2 and (table["verifier"] == 1.0).sum() >= 2
    assert all(table.groupby("step")["verifier"].max() == 1.0)

    # the final model was evaluated on the held-out split, with the same engine as `proofgym eval`
    (record,) = result.checkpoint_evals
    assert record["step"] == 2 and record["per_category"]["all"]["n"] >= 1
    assert Path(record["run_dir"], "results.jsonl").read_text().strip()

    # the W&B offline run holds the training metrics, the held-out pass@k and the full config
    run = read_offline_run(result.wandb_dir)
    keys = set().union(*run["history"])
    assert {"train/reward", "train/proof/ok_rate", "train/verifier/seconds", "heldout/proof/pass@1"} <= keys
    # each task's pass rate over training: a table and a plot
    assert {"task_pass_rate._type", "charts/task_pass_rate_table._type", "charts/task_pass_rate_image._type"} <= keys
    assert {"task_id", "category", "proof"} <= set(table.columns)
    assert set(table["task_id"]) <= {t.id for t in load_tasks(tiny_suite)}
    assert any(k.startswith("heldout/category/") for k in keys)
    assert run["config"]["suite"] == str(tiny_suite) and run["config"]["max_turns"] == 1

    # a saved Trainer checkpoint evaluates with the CLI's local agent
    out = tmp_path / "cli-eval"
    code = proofgym_main(["eval", "--suite", str(tmp_path / "run" / "heldout.jsonl"), "--agent", "local",
                          "--model", str(tmp_path / "run" / "checkpoint-2"), "--max-tokens", "32", "--out", str(out),
                          "--json", "--no-progress", "--device", "cpu"])
    assert code == 0
    assert json.loads((out / "summary.json").read_text())["n_results"] == record["per_category"]["all"]["n"]


def test_a_crashing_verifier_gives_none_rewards_and_training_goes_on(tmp_path, taught_model, tiny_suite):
    cfg = grpo_config(tmp_path, taught_model, tiny_suite, max_steps=1,
                      verifier_factory="tests.test_grpo:FlakyVerifier", verdict_cache_entries=0)
    result = train_grpo(cfg)
    assert result.global_step == 1
    (row,) = [r for r in result.log_history if "verifier/harness_failures" in r]
    assert row["verifier/harness_failures"] == 2 and row["verifier/harness_failure_rate"] == 0.5
    assert result.reward_totals == {"samples": 4, "HARNESS_FAILURE": 2, "FAIL": 2}


@requires_coq
@pytest.mark.prover
def test_grpo_trains_with_the_multi_turn_repair_rollout(tmp_path, taught_model, tiny_suite):
    cfg = grpo_config(tmp_path, taught_model, tiny_suite, max_steps=1, max_turns=2, turn_discount=0.5,
                      temperature=1.5, max_completion_length=24)
    result = train_grpo(cfg)
    assert result.global_step == 1
    (row,) = [r for r in result.log_history if "proof/ok_rate" in r]
    assert row["verifier/harness_failures"] == 0 and row["repair/turns"] > 1  # some episodes were repaired
    assert result.reward_totals["samples"] == 4
