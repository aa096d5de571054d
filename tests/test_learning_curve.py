"""scripts/learning_curve.py: the twin-free split, the paired bootstrap, --help, and the smoke run (tiny model).

The smoke run uses a fake verifier (OK for proofs of even length) so that it runs anywhere in about a minute;
it checks the pipeline (split, SFT, GRPO + curriculum, control, expert iteration, evaluation, report), not
the numbers.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("trl")

from proofgym.envs.types import CheckResult, Task, Verdict  # noqa: E402

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "learning_curve.py"


def _script() -> Any:
    spec = importlib.util.spec_from_file_location("proofgym_learning_curve_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _task(task_id: str, statement: str) -> Task:
    return Task(id=task_id, system="coq", suite="s", category="P1", statement=statement, context="",
                reference_proof="Proof. auto. Qed.")


def test_nat_n_z_twins_never_straddle_the_split_and_the_heldout_size_holds():
    lc = _script()
    tasks = []
    for i in range(30):
        for mod, ty in (("Arith.PeanoNat.Nat", "nat"), ("NArith.BinNat.N", "N"), ("ZArith.BinInt.Z", "Z")):
            tasks.append(_task(f"coq.stdlib.{mod}.lemma{i}", f"Lemma lemma{i} (a b : {ty}) : a + b = b + a."))
    tasks += [_task(f"coq.stdlib.Lists.List.only{i}", f"Lemma only{i} : True.") for i in range(20)]
    # a statement twin under another name: Nat.add_le_mono and its N. copy named differently
    tasks += [_task("coq.stdlib.Arith.PeanoNat.Nat.mono", "Lemma mono n m : Nat.le n m -> Nat.le n (S m)."),
              _task("coq.stdlib.NArith.BinNat.N.mono_N", "Lemma mono_N n m : N.le n m -> N.le n (S m).")]
    train, heldout = lc.fixed_split(tasks, heldout_size=25, seed=0)
    assert len(heldout) >= 25 and len(train) + len(heldout) == len(tasks)
    assert lc.twins_across(train, heldout) == []
    groups = {frozenset(t.id for t in g) for g in lc.twin_groups(tasks)}
    assert frozenset({"coq.stdlib.Arith.PeanoNat.Nat.mono", "coq.stdlib.NArith.BinNat.N.mono_N"}) in groups
    assert lc.fixed_split(tasks, heldout_size=25, seed=0) == (train, heldout)  # fixed
    # a per-task hash split (what the old script used) would separate twins; the check finds them
    assert lc.twins_across(tasks[:1], tasks[1:2]) != []


def test_the_paired_bootstrap_interval():
    lc = _script()
    base = {f"t{i}": i % 2 * 1.0 for i in range(40)}
    same = lc.paired_bootstrap(base, base, resamples=500)
    assert (same["delta"], same["lo"], same["hi"], same["tasks"]) == (0.0, 0.0, 0.0, 40)
    shifted = lc.paired_bootstrap({t: v + 0.25 for t, v in base.items()}, base, resamples=500)
    assert shifted["delta"] == pytest.approx(0.25) and shifted["lo"] == pytest.approx(0.25)
    noisy = lc.paired_bootstrap({t: 1.0 - v for t, v in base.items()}, base, resamples=2000, seed=1)
    assert noisy["lo"] < 0 < noisy["hi"] and noisy["delta"] == 0.0
    assert lc.per_task([{"task_id": "a", "verdict": "OK"}, {"task_id": "a", "verdict": "FAIL"},
                        {"task_id": "a", "harness_error": "x"}]) == {"a": (1, 2)}


def test_the_verdict_credits_grpo_only_when_the_control_does_not_rise():
    lc = _script()

    def d(lo: float, hi: float) -> dict[str, float]:
        return {"delta": (lo + hi) / 2, "lo": lo, "hi": hi, "tasks": 60}

    assert "GRPO learned" in lc.verdict_text({"grpo": d(0.02, 0.10), "control": d(-0.05, 0.04)})
    falling = lc.verdict_text({"grpo": d(0.02, 0.10), "control": d(-0.12, -0.02)})
    assert "GRPO learned" in falling and "lies below 0" in falling  # a control that falls cannot explain a gain
    rising = lc.verdict_text({"grpo": d(0.02, 0.10), "control": d(0.01, 0.08)})
    assert "inconclusive" in rising and "lies above 0" in rising
    assert "no measurable learning" in lc.verdict_text({"grpo": d(-0.01, 0.08), "control": d(-0.05, 0.04)})
    assert "covers 0)" in lc.verdict_text({"grpo": d(0.02, 0.10), "control": d(-0.05, 0.04)})
    assert "the control fell" in falling
    assert "GRPO beat it" in lc.verdict_text({"grpo": d(0.02, 0.10)}, d(0.01, 0.05))
    assert "cannot tell them apart" in lc.verdict_text({"grpo": d(0.02, 0.10)}, d(-0.01, 0.05))


def test_help_teaches_the_experiment(capsys):
    lc = _script()
    with pytest.raises(SystemExit) as done:
        lc.parse_args(["--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    for phrase in ("twin", "paired bootstrap", "shuffled", "--smoke",
                   "constant learning rate", "Success is", "--heldout-size", "expert iteration"):
        assert phrase in text, phrase


class EvenVerifier:
    """OK for a proof of even length, FAIL for odd: a fixed, content-dependent verdict without a prover."""

    def __init__(self, system: str = "coq", **kwargs: Any) -> None:
        pass

    def check(self, task: Task, proof: str) -> CheckResult:
        return CheckResult(Verdict.OK if len(proof) % 2 == 0 else Verdict.FAIL)

    def close(self) -> None:
        pass


@pytest.mark.slow
def test_the_smoke_run_goes_through_every_arm_and_writes_the_report(tmp_path):
    lc = _script()
    out = tmp_path / "lc"
    assert lc.main(["--smoke", "--out", str(out), "--verifier-factory", "tests.test_learning_curve:EvenVerifier"]) == 0
    data = json.loads((out / "learning_curve.json").read_text())
    assert set(data["results"]) == {"sft", "grpo", "control", "expert"}
    assert data["split"]["twins_across"] == 0 and data["split"]["heldout"] >= 2
    for arm, delta in data["deltas"].items():
        assert delta["lo"] <= delta["delta"] <= delta["hi"] and delta["tasks"] == data["split"]["heldout"], arm
    for arm, r in data["results"].items():
        assert set(r["sampled"]) == set(r["per_task_pass@1"]) and all(n == 2 for _, n in r["sampled"].values()), arm
        assert 0.0 <= r["pass@1"] <= r["pass@2"] <= 1.0 and "greedy_pass@1" in r
    report = (out / "LEARNING.md").read_text()
    assert "| grpo |" in report and "| control |" in report and "Result:" in report
    assert (out / "learning_curve.png").exists() and (out / "split.json").exists()
    assert [r["step"] for r in data["logs"]["control"] if "reward" in r] == [1]  # the control arm trained too


@pytest.mark.slow
def test_a_rerun_reuses_finished_arms_and_phases_split_the_work(tmp_path, capsys):
    """--phase train then --phase eval: the second run trains nothing (the arms' checkpoints are reused), and
    an arm that was never trained is refused in --phase eval rather than trained behind the user's back."""
    lc = _script()
    out = tmp_path / "lc"
    common = ["--smoke", "--out", str(out), "--verifier-factory", "tests.test_learning_curve:EvenVerifier"]
    assert lc.main([*common, "--arms", "sft,control", "--phase", "train"]) == 0
    assert not (out / "LEARNING.md").exists() and (out / "control" / "train_result.json").is_file()
    stamp = (out / "control" / "train_result.json").stat().st_mtime_ns
    capsys.readouterr()
    assert lc.main([*common, "--arms", "sft,control", "--phase", "eval"]) == 0
    err = capsys.readouterr().err
    assert "sft: reusing the finished run" in err and "control: reusing the finished run" in err
    assert (out / "control" / "train_result.json").stat().st_mtime_ns == stamp
    data = json.loads((out / "learning_curve.json").read_text())
    assert set(data["results"]) == {"sft", "control"}
    with pytest.raises(SystemExit, match="'grpo' is not trained"):
        lc.main([*common, "--arms", "sft,grpo", "--phase", "eval"])
