"""scripts/bench.py's real-workload helpers (fast tier): the GRPO batch's draw and attempts, the load rows'
busy loops, and writing one block of BENCHMARKS.md without erasing the others. No timings are asserted."""

from __future__ import annotations

import importlib.util
import os
import sys
from collections import Counter
from pathlib import Path

import pytest

from proofgym.envs.types import Task

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "bench.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("proofgym_bench_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _tasks(files: int, per_file: int) -> list[Task]:
    return [Task(id=f"t.{f}.{k}", system="coq", context="", statement=f"Lemma l{f}_{k} : True.",
                 reference_proof="Proof. exact I. Qed.", metadata={"file": f"F{f}.v"})
            for f in range(files) for k in range(per_file)]


def test_a_batch_takes_one_task_per_file_while_files_last(bench):
    batch = bench.grpo_tasks(_tasks(10, 3), 6, seed=1)
    assert len(batch) == 6 and len({t.metadata["file"] for t in batch}) == 6
    assert [t.id for t in batch] == [t.id for t in bench.grpo_tasks(_tasks(10, 3), 6, seed=1)]  # seeded
    larger = bench.grpo_tasks(_tasks(3, 2), 5, seed=0)  # more prompts than files: files repeat
    assert len(larger) == 5 and len({t.metadata["file"] for t in larger}) == 3


def test_a_group_holds_the_reference_a_cheat_a_failing_variant_and_repeats(bench):
    task = _tasks(1, 1)[0]
    group = bench.grpo_attempts(task, 8)
    counts = Counter(group)
    assert len(group) == 8 and counts[task.reference_proof] == 4
    assert counts["Proof. Admitted."] == 2 and counts[bench.COQ_WRONG] == 2
    dafny = Task(id="d", system="dafny", context="", statement="method M()\n",
                 reference_proof="method M() ensures true\n{\n}\n")
    ref, cheat, failing = bench.grpo_attempts(dafny, 3)
    assert ref == dafny.reference_proof and "assume false" in cheat and "assert false" in failing
    assert [t for t, _ in bench.with_attempts([task], 3)] == [task] * 3


def test_busy_loops_are_started_and_all_killed(bench):
    with bench.BusyLoops(1) as loops:
        pids = [p.pid for p in loops.procs]
        assert len(pids) == (os.cpu_count() or 1) and all(p.poll() is None for p in loops.procs)
    assert all(p.returncode is not None for p in loops.procs)


def test_each_row_set_writes_its_own_block(bench, tmp_path: Path):
    page = tmp_path / "BENCHMARKS.md"
    page.write_text("# Benchmarks\n\nintro\n\n" + bench.BEGIN + "\nold table\n" + bench.END + "\n\n## Soak\nkept\n")
    begin, end = bench.markers(["load"])
    bench.write_block(page, f"{begin}\nload table\n{end}", begin, end)
    bench.write_block(page, f"{bench.BEGIN}\nnew table\n{bench.END}")
    text = page.read_text()
    assert "new table" in text and "load table" in text and "old table" not in text
    assert text.index("new table") < text.index("load table") < text.index("## Soak") and "kept" in text
    bench.write_block(page, f"{begin}\nload table 2\n{end}", begin, end)
    assert page.read_text().count("load table") == 1 and "load table 2" in page.read_text()
    assert bench.markers(["grpo", "core"]) == (bench.BEGIN, bench.END)


def test_the_core_rows_alone_write_the_default_block(bench):
    assert bench.markers(["core"]) == (bench.BEGIN, bench.END)
    assert bench.markers(["hol"])[0] != bench.BEGIN


def test_a_flip_row_counts_decided_verdicts_that_differ(bench):
    task = _tasks(1, 1)[0]
    checks = [(task, "a", "honest"), (task, "b", "cheat"), (task, "c", "near timeout"), (task, "d", "failing")]
    notes: dict = {}
    row = bench._flip_row("coq", checks, ["OK", "CHEATING", "OK", "ERROR"], ["OK", "CHEATING", "TIMEOUT", "ERROR"],
                          notes, "test")
    # OK -> TIMEOUT is a flip (decided in one phase); ERROR in both is not decided, so not counted
    assert row.a == "1 of 3" and row.met is False
    assert notes["load_flips"] == ["t.0.0 (near timeout): OK -> TIMEOUT"]
    assert notes["load_verdicts"]["coq"]["near timeout"] == "OK->TIMEOUT"
    same = bench._flip_row("coq", checks[:2], ["OK", "CHEATING"], ["OK", "CHEATING"], {}, "test")
    assert same.a == "0 of 2" and same.met is True


def test_growth_per_check_is_the_least_squares_slope(bench):
    assert bench._slope([0, 100, 200, 300], [10, 10, 10, 10]) == 0
    assert bench._slope([0, 100, 200, 300], [0, 2048, 4096, 6144]) == 20.48
    assert bench._slope([5], [7]) == 0.0
