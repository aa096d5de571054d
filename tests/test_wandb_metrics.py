"""Per-category reward and pass@k curves in W&B (issue 29, 'also expected by practitioners').

The unbiased estimator per category is checked by hand; the W&B runs are offline runs read back from their
files once the run has finished (:func:`proofgym.training.logging.read_offline_run` waits for the exit record).
Verdicts come from the real Coq verifier.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from proofgym.envs.tasks.suites import load_tasks
from proofgym.training.eval_metrics import category_metrics, curve_of, pass_at_k
from tests.conftest import requires_coq


def test_category_metrics_are_the_unbiased_pass_at_k_per_category_and_leave_harness_failures_out():
    category = {"a": "P1", "b": "P1", "c": "P2"}
    outcomes = ([("a", "OK"), ("a", "FAIL"), ("a", "OK"), ("a", "FAIL")]  # a: 2 of 4
                + [("b", "CHEATING"), ("b", "FAIL"), ("b", None), ("b", "OK")]  # b: 1 of 3 (one harness failure)
                + [("c", "FAIL")] * 4)
    rewards = {"OK": 1.0, "CHEATING": -1.0}
    metrics = category_metrics(outcomes, category, reward_of=lambda v: rewards.get(v, 0.0), max_k=4)
    p1 = {k: (pass_at_k(4, 2, k) + pass_at_k(3, 1, k)) / 2 for k in (1, 2, 3)}
    assert curve_of(metrics, "category/P1") == pytest.approx({**p1, 4: pass_at_k(4, 2, 4)})  # b has no 4th sample
    assert curve_of(metrics, "category/P2") == {1: 0.0, 2: 0.0, 3: 0.0, 4: 0.0}
    assert metrics["category/P1/ok_rate"] == 3 / 7 and metrics["category/P1/samples"] == 7
    assert metrics["category/P1/reward"] == pytest.approx((1 + 0 + 1 + 0 - 1 + 0 + 1) / 7)
    assert metrics["category/P2/reward"] == 0.0
    assert metrics["proof/pass@1"] == pytest.approx((0.5 + 1 / 3 + 0) / 3)
    assert metrics["proof/reward"] == pytest.approx(2 / 11)
    assert category_metrics([("a", None)], category, reward_of=lambda v: 0.0) == {}


def _offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))


def _table(run_dir: Path, key: str) -> dict:
    folder, _, name = key.rpartition("/")
    (path,) = (run_dir / "files" / "media" / "table" / folder).glob(f"{name}_*.table.json")
    return json.loads(path.read_text())


@requires_coq
@pytest.mark.prover
def test_a_grpo_logging_window_logs_reward_and_pass_at_k_per_category_to_wandb(tmp_path, tiny_suite, monkeypatch):
    """The reward's real Coq verdicts of one window, through the callback GRPO uses, into an offline W&B run."""
    wandb = pytest.importorskip("wandb")
    pytest.importorskip("transformers")
    from proofgym.envs.verifiers.pool import LocalVerifierPool
    from proofgym.training.callbacks import TaskPassRateCallback
    from proofgym.training.data import reference_completion
    from proofgym.training.logging import read_offline_run
    from proofgym.training.rewards import VerifierReward

    _offline(monkeypatch, tmp_path)
    tasks = {t.id: t for t in load_tasks(tiny_suite)}
    # two groups of 3 completions: tiny.lia (P1) right twice, tiny.app_nil (P2) right once; the rest is prose (ERROR)
    wrong = [{"role": "assistant", "content": "I cannot prove this."}]
    right = {i: [{"role": "assistant", "content": reference_completion(tasks[i])}] for i in ("tiny.lia", "tiny.app_nil")}
    ids = ["tiny.lia"] * 3 + ["tiny.app_nil"] * 3
    completions = [right["tiny.lia"], wrong, right["tiny.lia"], wrong, right["tiny.app_nil"], wrong]
    with LocalVerifierPool(1) as pool:
        reward = VerifierReward(tasks, pool)
        rewards = reward([[]] * 6, completions, task_id=ids)
    assert rewards == [1.0, 0.0, 1.0, 0.0, 1.0, 0.0]  # Coq's verdicts: the window's outcomes are real

    run = wandb.init(project="proofgym-test", dir=str(tmp_path), mode="offline")
    callback = TaskPassRateCallback(reward, list(tasks.values()))
    args = SimpleNamespace(report_to=["wandb"], output_dir=str(tmp_path / "run"), num_generations=3)
    state = SimpleNamespace(is_world_process_zero=True, global_step=1, log_history=[{"reward": 0.5, "step": 1}])
    callback.on_train_begin(args, state, None)
    callback.on_log(args, state, None, logs={"reward": 0.5})
    callback.on_train_end(args, state, None)
    run_dir = Path(run.dir).parent
    run.finish()

    logged = read_offline_run(run_dir)
    assert logged["finished"]
    (row,) = [h for h in logged["history"] if "train/category/P1/reward" in h]
    assert row["train/global_step"] == 1
    assert row["train/category/P1/reward"] == pytest.approx(2 / 3) and row["train/category/P2/reward"] == pytest.approx(1 / 3)
    assert row["train/category/P1/ok_rate"] == pytest.approx(2 / 3)
    assert [row[f"train/category/P1/pass@{k}"] for k in (1, 2, 3)] == pytest.approx([2 / 3, 1.0, 1.0])
    assert [row[f"train/category/P2/pass@{k}"] for k in (1, 2, 3)] == pytest.approx([1 / 3, 2 / 3, 1.0])
    assert [row[f"train/proof/pass@{k}"] for k in (1, 2, 3)] == pytest.approx([0.5, 5 / 6, 1.0])
    assert state.log_history[-1]["train/category/P1/pass@2"] == 1.0  # train_result.json's log history has it too
    keys = set().union(*logged["history"])
    assert {"train/pass_at_k._type", "charts/train_pass_at_k_table._type"} <= keys
    table = _table(run_dir, "train/pass_at_k")
    assert table["columns"] == ["step", "category", "k", "pass@k"]
    assert [r[1:3] for r in table["data"]] == [[c, k] for c in ("P1", "P2", "all") for k in (1, 2, 3)]


@requires_coq
@pytest.mark.prover
def test_an_evaluation_logs_the_pass_at_k_curve_per_category(tmp_path, tiny_suite, monkeypatch):
    pytest.importorskip("wandb")
    from proofgym.training.data import reference_completion
    from proofgym.training.evaluate import EvalConfig, evaluate
    from proofgym.training.logging import read_offline_run

    _offline(monkeypatch, tmp_path)
    tasks = load_tasks(tiny_suite)
    script = tmp_path / "script.json"  # the P1 tasks answered with their reference proofs, the rest with prose
    script.write_text(json.dumps({t.id: reference_completion(t) if t.category == "P1" else "no idea" for t in tasks}))
    cfg = EvalConfig(suite=str(tiny_suite), agent="scripted", script=str(script), k=1, n=3, workers=1,
                     out=str(tmp_path / "eval"), wandb=True, wandb_project="proofgym-test")
    summary, paths = evaluate(cfg)
    wandb_dir = Path(json.loads(paths.config.read_text())["wandb_dir"])
    logged = read_offline_run(wandb_dir)
    assert logged["finished"]
    keys = set().union(*logged["history"])
    assert {"pass_at_k._type", "charts/pass_at_k_table._type"} <= keys
    table = _table(wandb_dir, "pass_at_k")
    curve = {(cat, k): value for cat, k, value in table["data"]}
    assert {k for _, k in curve} == {1, 2, 3}
    for k in (1, 2, 3):  # Coq's verdicts: every P1 reference proof checks, prose never does
        assert curve[("P1", k)] == 1.0 and curve[("P2", k)] == 0.0 and curve[("P3", k)] == 0.0
        assert curve[("all", k)] == summary.per_category["all"][f"pass@{k}"] == pytest.approx(4 / 6)
