"""scripts/learning_curve.py: statistics, the controls, the first sentence, and resumable arms (tiny model).

The smoke runs use a fake verifier (OK for proofs of even length) so that they run anywhere; they check
the mechanics (arm files, skipping finished arms, budget matching, the report), not the numbers.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "learning_curve.py"


def _script() -> Any:
    spec = importlib.util.spec_from_file_location("proofgym_learning_curve_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_paired_bootstrap_interval():
    from proofgym.training.compare import paired_bootstrap  # the script's bootstrap, shared with proofgym compare

    lc = _script()
    base = {f"t{i}": i % 2 * 1.0 for i in range(40)}
    same = paired_bootstrap(base, base, resamples=500)
    assert (same["delta"], same["lo"], same["hi"], same["tasks"]) == (0.0, 0.0, 0.0, 40)
    shifted = paired_bootstrap({t: v + 0.25 for t, v in base.items()}, base, resamples=500)
    assert shifted["delta"] == pytest.approx(0.25) and shifted["lo"] == pytest.approx(0.25)
    noisy = paired_bootstrap({t: 1.0 - v for t, v in base.items()}, base, resamples=2000, seed=1)
    assert noisy["lo"] < 0 < noisy["hi"] and noisy["delta"] == 0.0
    assert lc.per_task([{"task_id": "a", "verdict": "OK"}, {"task_id": "a", "verdict": "FAIL"},
                        {"task_id": "a", "harness_error": "x", "verdict": None}]) == {"a": (1, 2)}


def test_the_hierarchical_bootstrap_widens_with_seed_variance():
    lc = _script()
    base = {f"t{i}": 0.0 for i in range(30)}
    agreeing = [({t: 0.2 for t in base}, base), ({t: 0.2 for t in base}, base)]
    split = [({t: 0.4 for t in base}, base), ({t: 0.0 for t in base}, base)]
    a = lc.hierarchical_bootstrap(agreeing, resamples=2000)
    b = lc.hierarchical_bootstrap(split, resamples=2000)
    assert a["delta"] == pytest.approx(0.2) == b["delta"] and a["runs"] == 2 and a["tasks"] == 30
    assert a["lo"] == pytest.approx(0.2) and b["lo"] == pytest.approx(0.0) and b["hi"] == pytest.approx(0.4)


def test_pass_at_k_curves_and_the_chosen_temperature():
    lc = _script()
    counts = {"a": [1, 4], "b": [0, 4], "c": [4, 4]}
    curve = lc.pass_at_k_curve(counts, 4)
    assert curve[0] == pytest.approx((0.25 + 0 + 1) / 3) and curve[3] == pytest.approx(2 / 3)
    assert all(x <= y for x, y in zip(curve, curve[1:], strict=False))
    assert lc.pass_at_k_curve({"a": [1, 1], "b": [0, 1]}, 4) == [0.5]  # greedy: k = 1 only, no NaN
    by_t = {"0": {"pass@1": 0.3}, "0.3": {"pass@1": 0.3}, "1": {"pass@1": 0.1}}
    assert lc.choose_temperature(by_t) == 0.0  # a tie goes to the lower temperature


def test_the_shuffled_control_keeps_each_groups_rewards():
    from proofgym.training.rewards import PermutedReward

    rewards = [1.0, 0.0, 0.0, 0.0, 1.0, 1.0, None, 0.0]

    def reward(*args: Any, **kwargs: Any) -> list[float | None]:
        return list(rewards)

    control = PermutedReward(reward, seed=3, group=4)  # type: ignore[arg-type]
    seen = [control() for _ in range(20)]
    for out in seen:
        assert sorted(out[:4]) == sorted(rewards[:4]) and out[6] is None
        assert sorted(x for x in out[4:] if x is not None) == [0.0, 1.0, 1.0]
    assert len({tuple(out[:4]) for out in seen}) > 1  # which completion earns the reward changes


def test_the_first_sentence_claims_no_more_than_was_shown():
    lc = _script()
    assert lc.first_sentence({}, {}, 16).startswith("Not yet shown")
    base = {"heldout-sft-s0": {}}
    assert "no GRPO run has finished" in lc.first_sentence(base, {}, 16)

    def d(lo: float, hi: float) -> dict[str, float]:
        return {"delta": (lo + hi) / 2, "lo": lo, "hi": hi, "tasks": 200, "runs": 1}

    assert lc.first_sentence(base, {"grpo": {"pass@1": d(-0.02, 0.04)}}, 16).startswith("No gain shown")
    sharp = lc.first_sentence(base, {"grpo": {"pass@1": d(0.02, 0.08), "pass@16": d(-0.01, 0.03)}}, 16)
    assert sharp.startswith("Only sharpening shown")
    greedy = {"grpo": {"pass@1": d(0.02, 0.08), "pass@16": None}}  # held-out scored greedily: coverage decides
    covered = lc.first_sentence(base, greedy, 16, (8, {"grpo": {"pass@8": d(-0.03, 0.05)}}))
    assert covered.startswith("Only sharpening shown") and "pass@8 at each arm's best T > 0" in covered
    assert lc.first_sentence(base, greedy, 16).startswith("GRPO raised")  # without coverage: no pass@k claim
    none = lc.first_sentence(base, {"grpo": {"pass@1": d(-0.01, 0.05)}}, 16, (8, {"grpo": {"pass@8": d(0.01, 0.05)}}))
    assert none.startswith("No gain shown") and none.endswith("pass@8 at each arm's best T > 0 (1 run(s), 200 "
                                                              "tasks) +3.0 pp [+1.0, +5.0].")
    assert lc.first_sentence(base, {"grpo": {"pass@1": d(0.02, 0.08), "pass@16": d(0.01, 0.03)}}, 16).startswith(
        "GRPO raised")


def test_help_teaches_the_experiment(capsys):
    lc = _script()
    with pytest.raises(SystemExit) as done:
        lc.parse_args(["--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    for phrase in ("validation", "best temperature", "within the group", "same number of policy samples",
                   "hierarchical bootstrap", "skips every arm", "--sft-seeds", "--seeds", "pass@k"):
        assert phrase in text, phrase


@pytest.mark.slow
def test_arms_write_their_files_and_a_rerun_skips_the_finished_ones(tmp_path, capsys):
    pytest.importorskip("trl")
    lc = _script()
    out = tmp_path / "lc"
    common = ["--smoke", "--out", str(out), "--verifier-factory", "tests.fakes:EvenVerifier",
              "--algos", "grpo,shuffled,expert", "--coverage-k", "4", "--coverage-tasks", "1"]
    assert lc.main(common) == 0
    results = out / "results" / "smoke"
    names = {p.stem for p in results.glob("*.json")}
    assert names == {f"{kind}{arm}" for arm in ("sft-s0", "grpo-s0-r0", "shuffled-s0-r0", "expert-s0-r0")
                     for kind in ("", "sweep-", "heldout-", "coverage-")}
    cover = json.loads((results / "coverage-grpo-s0-r0.json").read_text())
    assert cover["temperature"] > 0 and len(cover["per_task"]) == 1 and len(cover["pass@k_curve"]) == 4
    assert all(n == 4 for _, n in cover["per_task"].values())
    for path in results.glob("*.json"):
        record = json.loads(path.read_text())
        assert record["command"].startswith("python scripts/learning_curve.py --smoke")
        assert len(record["code"]["commit"]) == 40 and str(tmp_path) not in json.dumps(
            {k: v for k, v in record.items() if k != "command"}), path.name  # no absolute paths
    sweep = json.loads((results / "sweep-sft-s0.json").read_text())
    assert set(sweep["temperatures"]) == {"0", "0.3", "0.6", "1"} and sweep["split"] == "validation"
    held = json.loads((results / "heldout-grpo-s0-r0.json").read_text())
    assert held["temperature"] == json.loads((results / "sweep-grpo-s0-r0.json").read_text())["chosen_temperature"]
    assert len(held["pass@k_curve"]) == (1 if held["temperature"] == 0 else 4)  # greedy at T=0: one reply, k=1
    assert set(held["per_task"]) == set(
        json.loads((results / "heldout-sft-s0.json").read_text())["per_task"])
    grpo, expert = (json.loads((results / f"{a}-s0-r0.json").read_text()) for a in ("grpo", "expert"))
    assert expert["grpo_policy_samples"] == grpo["policy_samples"] and expert["budget_from"] == "grpo arm"
    assert abs(expert["policy_samples"] - grpo["policy_samples"]) <= expert["samples_per_task"]
    assert [r["round"] for r in expert["rounds"]] == [1] and expert["rounds"][0]["samples"] > 0  # what it kept
    assert (out / "work" / "LEARNING.md").is_file()

    stamps = {p.name: p.stat().st_mtime_ns for p in results.glob("*.json")}
    (results / "heldout-expert-s0-r0.json").unlink()
    capsys.readouterr()
    assert lc.main(common) == 0
    err = capsys.readouterr().err
    assert "sft-s0: finished before" in err and "heldout-expert-s0-r0: running" in err
    assert err.count(": running") == 1
    again = {p.name: p.stat().st_mtime_ns for p in results.glob("*.json")}
    assert {n for n in again if again[n] != stamps.get(n)} == {"heldout-expert-s0-r0.json"}


def _arm(root: Path, arm: str, **fields: Any) -> dict[str, Any]:
    """An arm file as run coq_p12b's were written on the machine whose checkout was ``root``: absolute paths."""
    command = (f"python scripts/learning_curve.py --run r --results {root}/configs/learning --work "
               f"{root}/runs/learning/r --split {root}/configs/learning/r_split.json --k 4 --only {arm}")
    return {"arm": arm, **fields, "command": command, "code": {"commit": "0" * 40, "dirty": False}, "seconds": 60.0}


def test_relocating_a_run_moves_its_arm_files_and_makes_their_paths_relative(tmp_path):
    lc = _script()
    old, new = tmp_path / "configs" / "learning" / "r", tmp_path / "docs" / "results" / "learning" / "r"
    old.mkdir(parents=True)
    held = _arm(lc.ROOT, "heldout-sft-s0", kind="heldout", of="sft-s0", temperature=0.0, per_task={"a": [1, 1]},
                **{"pass@1": 1.0, "pass@k_curve": [1.0]})
    (old / "heldout-sft-s0.json").write_text(json.dumps(held))
    elsewhere = _arm(Path("/home/someone/proofgym"), "sft-s0", kind="train", checkpoint="sft-s0")
    (old / "sft-s0.json").write_text(json.dumps(elsewhere))
    (old / ".grpo-s0-r0.json.tmp").write_text("{")  # an arm being written: not an arm file yet
    say: list[str] = []
    assert lc.main(["--relocate-results", str(old), str(new), "--old-root", str(lc.ROOT),
                    "--old-root", "/home/someone/proofgym"], say=say.append) == 0
    assert sorted(p.name for p in new.iterdir()) == ["heldout-sft-s0.json", "sft-s0.json"]
    assert sorted(p.name for p in old.iterdir()) == [".grpo-s0-r0.json.tmp"]
    moved = json.loads((new / "heldout-sft-s0.json").read_text())
    assert moved["command"] == (f"python scripts/learning_curve.py --run r --results {new.parent} --work "
                                "runs/learning/r --split configs/learning/r_split.json --k 4 --only heldout-sft-s0")
    assert moved["per_task"] == held["per_task"] and moved["relocated_from"] == str(old / "heldout-sft-s0.json")
    assert "/home/someone" not in (new / "sft-s0.json").read_text()
    assert say[-1] == f"relocated 2 arm file(s) to {new}"
    with pytest.raises(SystemExit, match="already holds"):  # a second move overwrites nothing
        (old / "sft-s0.json").write_text(json.dumps(elsewhere))
        lc.relocate_results(old, new)


def test_new_arm_files_hold_repo_relative_paths(tmp_path):
    lc = _script()
    args = lc.parse_args(["--run", "r", "--results", str(tmp_path), "--work", str(lc.ROOT / "runs" / "learning" / "r"),
                          f"--split={lc.ROOT}/configs/learning/r_split.json", "--k", "4"])
    path = lc.write_arm(args, "sweep-sft-s0", {"kind": "sweep"}, started=0.0)
    assert json.loads(path.read_text())["command"] == (
        f"python scripts/learning_curve.py --run r --results {tmp_path} --work runs/learning/r "
        "--split=configs/learning/r_split.json --k 4")


def test_the_report_finds_a_run_not_yet_relocated(tmp_path, monkeypatch):
    lc = _script()
    monkeypatch.setattr(lc, "RESULTS", tmp_path / "docs" / "results" / "learning")
    monkeypatch.setattr(lc, "LEGACY_RESULTS", tmp_path / "configs" / "learning")
    assert lc.parse_args(["--run", "r", "--report"]).results == str(lc.RESULTS)  # a new run: the new place
    (lc.LEGACY_RESULTS / "r").mkdir(parents=True)
    held = _arm(Path("/work/main"), "heldout-sft-s0", kind="heldout", of="sft-s0", temperature=0.0,
                per_task={"a": [1, 1], "b": [0, 1]}, **{"pass@1": 0.5, "pass@k_curve": [0.5]})
    (lc.LEGACY_RESULTS / "r" / "heldout-sft-s0.json").write_text(json.dumps(held))
    args = lc.parse_args(["--run", "r", "--report", "--work", str(tmp_path / "work")])
    assert args.results == str(lc.LEGACY_RESULTS)  # the old run is read (and resumed) where it is
    assert lc.main(["--run", "r", "--report", "--work", str(tmp_path / "work")], say=lambda _: None) == 0
    assert "| sft-s0 | 0 | 50.0% |" in (tmp_path / "work" / "LEARNING.md").read_text()
    lc.relocate_results(lc.LEGACY_RESULTS / "r", lc.RESULTS / "r", roots=[Path("/work/main")], say=lambda _: None)
    assert lc.parse_args(["--run", "r", "--report"]).results == str(lc.RESULTS)  # once moved: found there


def test_greedy_arms_plot_as_bars_with_an_interval_over_tasks(tmp_path):
    """Arms scored greedily have one pass@k point each (old arm files pad theirs with NaN): the plot draws a bar per
    arm with a seeded 95% interval over tasks, which contains the arm's mean and is the same on every call."""
    pytest.importorskip("matplotlib")
    lc = _script()
    per_task = {f"t{i}": [1 if i < 5 else 0, 1] for i in range(50)}  # 10% solved
    lo, hi = lc.task_interval(per_task)
    assert lo < 0.10 < hi and (lo, hi) == lc.task_interval(per_task)
    assert lc.task_interval({"t": [0, 0]}) == (0.0, 0.0)
    arms = {"heldout-a": {"kind": "heldout", "of": "a", "temperature": 0.0, "pass@1": 0.1, "per_task": per_task,
                          "pass@k_curve": [0.1, float("nan")]},
            "heldout-b": {"kind": "heldout", "of": "b", "temperature": 0.0, "pass@1": 0.1, "per_task": per_task,
                          "pass@k_curve": [0.1]}}
    import matplotlib.axes

    drawn: list[int] = []
    original = matplotlib.axes.Axes.barh

    def barh(self, y, *args, **kwargs):  # records the bars, then draws them
        drawn.append(len(y))
        return original(self, y, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(matplotlib.axes.Axes, "barh", barh)
        out = lc.plot(arms, tmp_path / "curve.png")
    assert out is not None and out.stat().st_size > 0 and drawn == [2]


def test_a_coverage_arm_samples_at_the_best_validation_temperature_above_zero():
    """Every coq_p12b arm chose T=0, so its held-out score is one greedy reply per task: a coverage arm samples
    instead, at the T > 0 whose validation pass@k (k = the sweep's samples) is highest, ties to the lower T."""
    lc = _script()
    sweep = {"of": "sft-s0", "temperatures": {
        "0": {"pass@1": 0.5, "per_task": {"a": [1, 1], "b": [1, 1]}},  # greedy: never a sampling temperature
        "0.3": {"pass@1": 0.25, "per_task": {"a": [1, 2], "b": [0, 2]}},  # pass@2 0.5
        "0.6": {"pass@1": 0.25, "per_task": {"a": [0, 2], "b": [1, 2]}},  # pass@2 0.5: a tie, the lower T wins
        "1": {"pass@1": 0.0, "per_task": {"a": [0, 2], "b": [0, 2]}}}}
    assert lc.sampling_temperature(sweep, 2) == (0.3, 0.5)
    sweep["temperatures"]["1"]["per_task"] = {"a": [1, 2], "b": [2, 2]}  # pass@2 1.0, though pass@1 is lower
    assert lc.sampling_temperature(sweep, 2) == (1.0, 1.0)
    with pytest.raises(SystemExit, match="no T > 0"):
        lc.sampling_temperature({"of": "x", "temperatures": {"0": sweep["temperatures"]["0"]}}, 2)


def test_coverage_arms_score_the_same_seeded_held_out_tasks_in_split_order():
    lc = _script()
    heldout = [f"t{i}" for i in range(40)]
    picked = lc.coverage_tasks(heldout, 10)
    assert len(picked) == 10 == len(set(picked)) and picked == lc.coverage_tasks(list(heldout), 10)
    assert picked == sorted(picked, key=heldout.index) and picked != heldout[:10]
    assert lc.coverage_tasks(heldout, 0) == heldout == lc.coverage_tasks(heldout, 99)
    args = lc.parse_args(["--run", "r", "--seeds", "0", "--algos", "grpo", "--coverage-k", "8"])
    assert lc.plan(args)[-2:] == ["coverage-sft-s0", "coverage-grpo-s0-r0"]  # after every held-out arm
    assert not any(n.startswith("coverage-") for n in lc.plan(lc.parse_args(["--run", "r"])))


def test_the_report_shows_coverage_curves_and_their_paired_delta(tmp_path):
    pytest.importorskip("matplotlib")
    lc = _script()
    results = tmp_path / "results" / "r"
    results.mkdir(parents=True)
    base = {f"t{i}": [1 if i < 2 else 0, 8] for i in range(20)}  # two tasks solved once in 8
    better = {f"t{i}": [4 if i < 2 else (1 if i < 6 else 0), 8] for i in range(20)}  # those two more, and 4 more
    arms = {"sft-s0": {"kind": "train"}, "grpo-s0-r0": {"kind": "train", "start": "sft-s0"},
            "coverage-sft-s0": {"kind": "coverage", "of": "sft-s0", "temperature": 0.3, "per_task": base,
                                "pass@k_curve": lc.pass_at_k_curve(base, 8)},
            "coverage-grpo-s0-r0": {"kind": "coverage", "of": "grpo-s0-r0", "temperature": 0.6, "per_task": better,
                                    "pass@k_curve": lc.pass_at_k_curve(better, 8)}}
    for name, rec in arms.items():
        (results / f"{name}.json").write_text(json.dumps(rec))
    work = tmp_path / "work"
    assert lc.main(["--run", "r", "--results", str(tmp_path / "results"), "--work", str(work), "--report",
                    "--bootstrap", "500"], say=lambda _: None) == 0
    text = (work / "LEARNING.md").read_text()
    assert "| sft-s0 | 0.3 | 1.2%, 2.5%, 5.0%, 10.0% | 2 |" in text
    assert "| grpo-s0-r0 | 0.6 | 7.5%," in text and "| 6 |" in text
    line = next(x for x in text.splitlines() if x.startswith("- coverage, grpo"))
    assert "pass@8 +20.0 pp" in line  # 6 of 20 tasks solved at all, against 2
    assert (work / "learning_curve.png").stat().st_size > 0


def test_head_to_head_pairs_each_run_with_the_other_algorithms_run_of_the_same_seeds():
    lc = _script()
    grpo = {f"t{i}": [1 if i < 6 else 0, 1] for i in range(20)}
    control = {f"t{i}": [1 if i < 4 else 0, 1] for i in range(20)}
    arms = {"heldout-grpo-s0-r0": {"per_task": grpo}, "heldout-grpo-s0-r1": {"per_task": grpo},
            "heldout-shuffled-s0-r0": {"per_task": control}}  # the control's seed 1 has not run
    d = lc.head_to_head(arms, "grpo", "shuffled", 1, 500)
    assert d["runs"] == 1 and d["tasks"] == 20 and d["delta"] == pytest.approx(0.1)
    assert lc.head_to_head(arms, "grpo", "expert", 1, 500) is None
    assert lc.head_to_head(arms, "grpo", "shuffled", 2, 500) is None  # one greedy reply per task: no pass@2
