"""The pass-rate curriculum: p_hat from k sampled attempts, keep 0 < p_hat < 1, refresh, logged counts.

Fast unit tests of the filter and the sampler, and GRPO runs on a tiny local model (slow tier) with a fake
verifier whose verdicts are fixed per task, so what the filter must keep is known.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("trl")

from proofgym.envs.tasks.suites import load_tasks  # noqa: E402
from proofgym.envs.types import CheckResult, Task, Verdict  # noqa: E402
from proofgym.training.callbacks import TrainingHealthCallback  # noqa: E402
from proofgym.training.curriculum import CurriculumSampler, PassRateCurriculum  # noqa: E402

ALWAYS_OK, NEVER_OK = "tiny.lia", "tiny.and_comm"


def test_the_filter_keeps_exactly_the_tasks_with_0_lt_p_lt_1():
    cur = PassRateCurriculum(["easy", "hard", "mixed", "broken", "mixed2"], k=4)
    metrics = cur.update({"easy": (4, 4), "hard": (0, 4), "mixed": (1, 4), "broken": (0, 0), "mixed2": (3, 4)}, 0)
    assert [cur.task_ids[i] for i in cur.active] == ["mixed", "mixed2", "broken"]  # no estimate: kept
    assert metrics == {"curriculum/kept": 2.0, "curriculum/too_easy": 1.0, "curriculum/too_hard": 1.0,
                       "curriculum/unscored": 1.0, "curriculum/mean_p_hat": 0.5, "curriculum/fallback": 0.0,
                       "curriculum/refreshes": 1.0}
    assert cur.p_hat == {"easy": 1.0, "hard": 0.0, "mixed": 0.25, "broken": None, "mixed2": 0.75}
    # nothing kept: the sampler falls back to every task, and says so
    assert cur.update({t: (4, 4) for t in cur.task_ids}, 5)["curriculum/fallback"] == 1.0
    assert cur.active == list(range(5)) and [h["step"] for h in cur.history] == [0, 5]
    with pytest.raises(ValueError, match=">= 2"):
        PassRateCurriculum(["a"], k=1)


def test_the_sampler_draws_only_kept_tasks_re_reads_the_set_and_keeps_trls_layout():
    cur = PassRateCurriculum([f"t{i}" for i in range(6)], k=2)
    cur.update({"t0": (1, 2), "t1": (2, 2), "t2": (0, 2), "t3": (1, 2), "t4": (2, 2), "t5": (0, 2)}, 0)
    kwargs = dict(data_source=list(range(6)), mini_repeat_count=2, batch_size=2, repeat_count=1, seed=3)
    sampler = CurriculumSampler(cur, **kwargs)
    drawn = list(sampler)
    assert len(drawn) == len(sampler) == 12  # the trainer's step accounting is TRL's
    assert set(drawn) == {0, 3}
    assert all(drawn[i] == drawn[i + 1] for i in range(0, 12, 2))  # each prompt num_generations times in a row
    assert drawn == list(CurriculumSampler(cur, **kwargs))  # seeded: every process draws the same prompts

    it = iter(CurriculumSampler(cur, **kwargs))
    first = [next(it) for _ in range(4)]  # one generation batch
    cur.update({f"t{i}": ((1, 2) if i == 5 else (2, 2)) for i in range(6)}, 10)  # a refresh while training runs
    rest = list(it)
    assert set(first) <= {0, 3} and set(rest) == {5}


def test_sampling_shows_progress_only_when_asked_and_counts_what_passed(tmp_path, tiny_suite, capsys):
    """A curriculum estimate or an expert-iteration round is minutes of generation on a CPU: it shows a bar."""
    from transformers import AutoTokenizer

    from proofgym.agents.tiny_model import build_tiny_model
    from proofgym.training.rewards import Outcome
    from proofgym.training.sampling import pass_counts, sample_and_check

    tokenizer = AutoTokenizer.from_pretrained(build_tiny_model(tmp_path / "model"))
    tasks = load_tasks(tiny_suite)[:3]
    capsys.readouterr()  # building the model writes its own bars

    class Checker:  # OK for the first task, FAIL otherwise
        def proof_of(self, text: str, task: Task) -> str:
            return text

        def check(self, batch: list[Task], proofs: list[str]) -> list[Outcome]:
            return [Outcome("OK" if t.id == tasks[0].id else "FAIL", 1.0 if t.id == tasks[0].id else 0.0)
                    for t in batch]

    def generate(prompts: Any, max_new_tokens: int) -> tuple[list[list[int]], None]:
        return [[5, 6, 7] for _ in prompts], None

    quiet = sample_and_check(generate, tokenizer, tasks, Checker(), k=2, max_new_tokens=3, batch_size=4)
    assert capsys.readouterr().err == ""
    shown = sample_and_check(generate, tokenizer, tasks, Checker(), k=2, max_new_tokens=3, batch_size=4,
                             progress="curriculum at step 0")
    err = capsys.readouterr().err
    assert "curriculum at step 0" in err and "6/6" in err and "ok=2" in err
    assert pass_counts(shown) == pass_counts(quiet) == {tasks[0].id: (2, 2), tasks[1].id: (0, 2), tasks[2].id: (0, 2)}


def test_the_health_callback_warns_when_a_step_cannot_teach():
    from types import SimpleNamespace

    said: list[str] = []
    cb = TrainingHealthCallback(announce=said.append)
    state, args = SimpleNamespace(is_world_process_zero=True, global_step=3), SimpleNamespace(max_completion_length=64)
    cb.on_log(args, state, None, logs={"frac_reward_zero_std": 0.5, "completions/clipped_ratio": 0.2})
    assert said == []
    cb.on_log(args, state, None, logs={"frac_reward_zero_std": 1.0, "completions/clipped_ratio": 0.875})
    assert len(said) == 2 and "zero reward variance" in said[0] and "88% of completions" in said[1]


# -- GRPO with the curriculum, on a tiny model ----------------------------------------------------------------
class PerTaskVerifier:
    """Fixed verdicts per task: tiny.lia always OK, tiny.and_comm never, every other task alternates OK/FAIL.

    The alternation counts per task and per process (a pool of one worker), so any two consecutive checks of a
    task hold exactly one OK: with k = 2 every other task has p_hat = 1/2.
    """

    calls: dict[str, int] = defaultdict(int)

    def __init__(self, system: str = "coq", **kwargs: Any) -> None:
        pass

    def check(self, task: Task, proof: str) -> CheckResult:
        PerTaskVerifier.calls[task.id] += 1
        if task.id == ALWAYS_OK:
            return CheckResult(Verdict.OK)
        if task.id == NEVER_OK:
            return CheckResult(Verdict.FAIL, messages=("never",))
        return CheckResult(Verdict.OK if PerTaskVerifier.calls[task.id] % 2 else Verdict.FAIL)

    def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    from proofgym.agents.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("curriculum") / "model", seed=0)


@pytest.mark.slow
def test_grpo_trains_only_on_tasks_the_policy_solves_sometimes_and_logs_the_counts(tmp_path, tiny_model, tiny_suite):
    import pandas as pd

    from proofgym.training.grpo import train_grpo
    from proofgym.training.grpo_config import ProofGRPOConfig

    cfg = ProofGRPOConfig(model_name_or_path=str(tiny_model), suite=str(tiny_suite), output_dir=str(tmp_path / "run"),
                          report_to="none", max_steps=2, per_device_train_batch_size=4, num_generations=2,
                          max_completion_length=12, learning_rate=1e-4, torch_threads=1, prompt_context_chars=120,
                          heldout_fraction=0.0, verifier_workers=1, checkpoint_eval_at_end=False, save_strategy="no",
                          seed=0, verifier_factory="tests.test_curriculum:PerTaskVerifier",
                          curriculum=True, curriculum_k=2, curriculum_refresh_steps=1, curriculum_batch_size=6)
    result = train_grpo(cfg)
    tasks = [t.id for t in load_tasks(tiny_suite)]
    mixed = set(tasks) - {ALWAYS_OK, NEVER_OK}

    assert result.global_step == 2
    # before training, then every step but the last (an estimate after the last step would serve no step)
    assert [h["step"] for h in result.curriculum] == [0, 1]
    assert result.plan["refresh_at"] == [1] and result.plan["total_steps"] == 2
    for estimate in result.curriculum:
        assert estimate["p_hat"][ALWAYS_OK] == 1.0 and estimate["p_hat"][NEVER_OK] == 0.0
        assert {t for t, p in estimate["p_hat"].items() if p is not None and 0 < p < 1} == mixed
        assert (estimate["curriculum/kept"], estimate["curriculum/too_easy"], estimate["curriculum/too_hard"]) == \
            (len(mixed), 1.0, 1.0)

    # the policy was trained on kept tasks only: the all-OK and the all-FAIL task never reached a reward
    table = pd.concat(pd.read_parquet(p) for p in sorted((tmp_path / "run" / "completions").glob("*.parquet")))
    assert set(table["task_id"]) <= mixed and len(table) == 8
    assert {"task_id", "category", "proof", "verdict"} <= set(table.columns)

    logged = [row for row in result.log_history if "proof/ok_rate" in row]
    assert len(logged) == 2 and all(row["curriculum/kept"] == len(mixed) for row in logged)
    assert all(row["curriculum/too_easy"] == 1 and row["curriculum/too_hard"] == 1 for row in logged)

    # each task's pass rate over training: the reward's verdicts and the curriculum's estimates
    import json

    rows = [json.loads(line) for line in (tmp_path / "run" / "task_pass_rates.jsonl").read_text().splitlines()]
    assert {r["source"] for r in rows} == {"training", "curriculum"}
    assert {r["task_id"] for r in rows if r["source"] == "training"} <= mixed
    assert {r["task_id"] for r in rows if r["source"] == "curriculum"} == set(tasks)
    assert (tmp_path / "run" / "task_pass_rates.png").exists()


@pytest.mark.slow
def test_a_resumed_run_goes_on_with_the_checkpoints_curriculum_and_step(tmp_path, tiny_model, tiny_suite):
    from proofgym.training.curriculum import CURRICULUM_FILE
    from proofgym.training.grpo import train_grpo
    from proofgym.training.grpo_config import ProofGRPOConfig

    def config(**overrides):
        return ProofGRPOConfig(**{**dict(
            model_name_or_path=str(tiny_model), suite=str(tiny_suite), output_dir=str(tmp_path / "run"),
            report_to="none", per_device_train_batch_size=4, num_generations=2, max_completion_length=12,
            learning_rate=1e-4, torch_threads=1, prompt_context_chars=120, heldout_fraction=0.0, verifier_workers=1,
            checkpoint_eval_at_end=False, save_strategy="steps", save_steps=1, seed=0,
            verifier_factory="tests.test_curriculum:PerTaskVerifier", curriculum=True, curriculum_k=2,
            curriculum_refresh_steps=1, curriculum_batch_size=6), **overrides})

    first = train_grpo(config(max_steps=2))
    assert [h["step"] for h in first.curriculum] == [0, 1]
    saved = json.loads((tmp_path / "run" / "checkpoint-2" / CURRICULUM_FILE).read_text())
    assert [h["step"] for h in saved["history"]] == [0, 1] and saved["version"] == 2

    resumed = train_grpo(config(max_steps=3, resume_from_checkpoint=str(tmp_path / "run" / "checkpoint-2")))
    assert resumed.global_step == 3
    # no estimate at the start of the resumed run: the checkpoint's two are its history, and its kept set is used
    assert [h["step"] for h in resumed.curriculum] == [0, 1]
    assert resumed.curriculum == first.curriculum
    logged = [row for row in resumed.log_history if "proof/ok_rate" in row]
    # transformers restores the log of steps 1 and 2; step 3 trained with the restored curriculum
    assert [row["step"] for row in logged] == [1, 2, 3] and logged[-1]["curriculum/refreshes"] == 2
