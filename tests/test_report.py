"""``proofgym report``: Markdown/HTML with plots, for one run or two side by side."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from proofgym.agents import ScriptedAgent
from proofgym.agents.strategies import PlainStrategy
from proofgym.envs.types import Task
from proofgym.training.evaluate import EvalConfig, EvalOptions, evaluate, run_eval
from tests.test_eval_fakes import FAKE

pytest.importorskip("matplotlib")

from proofgym.training.report import load_run, write_report  # noqa: E402

TASKS = [Task(id=f"t{i}", system="coq", context="", statement=f"Lemma t{i} : True.", reference_proof="p",
              category=("P1", "P2", "P3")[i % 3]) for i in range(9)]


@pytest.fixture
def suite(tmp_path):
    path = tmp_path / "mini.jsonl"
    path.write_text("".join(t.to_json() + "\n" for t in TASKS))
    return path


def _run(tmp_path, suite, name: str, script: dict, k: int = 1) -> object:
    script_path = tmp_path / f"{name}.json"
    script_path.write_text(json.dumps(script))
    _, paths = evaluate(EvalConfig(suite=str(suite), agent="scripted", script=str(script_path), verifier=FAKE,
                                   out=str(tmp_path / name), k=k))
    return paths.run_dir


def _is_png(path) -> bool:
    return path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5000


def test_markdown_report_of_one_run(tmp_path, suite):
    script = {"t0": "good", "t1": "cheat", "t2": "garbage", "t3": ["nope", "good"], "*": "unknown_lemma"}
    run = _run(tmp_path, suite, "a", script, k=2)
    report = write_report([run])
    assert report == run / "report" / "report.md"
    text = report.read_text()
    for section in ("## Runs", "## Headline", "## Per category", "## Verdicts", "Selene Table 3", "## Cheat reasons",
                    "## Cost"):
        assert section in text
    assert "| CHEATING | 2 |" in text and "| forbidden | 2 |" in text  # two samples of t1 cheated
    assert "| pass@1 | 11.1% |" in text  # t0 solved of 9 tasks
    for png in ("pass_at_k.png", "categories.png", "verdicts.png", "failures.png", "cheat_reasons.png"):
        assert f"]({png})" in text and _is_png(run / "report" / png)


def test_html_comparison_of_two_runs(tmp_path, suite):
    a = _run(tmp_path, suite, "a", {"*": "good", "t1": "cheat"})
    b = _run(tmp_path, suite, "b", {"*": "nope"})
    report = write_report([a, b], fmt="html", out=tmp_path / "cmp")
    html = report.read_text()
    assert html.startswith("<!doctype html>") and html.count("data:image/png;base64,") >= 4
    runs = [load_run(a), load_run(b)]
    assert runs[0].label != runs[1].label and runs[0].label in html and runs[1].label in html
    assert "<td>88.9%</td><td>0.0%</td>" in html  # pass@1 side by side: 8/9 against 0/9


def test_report_recomputes_a_killed_runs_summary(tmp_path, suite):
    out = tmp_path / "killed" / "results.jsonl"
    run_eval(TASKS, agent=ScriptedAgent({"*": "good"}), out=out,
             options=EvalOptions(k=1, verifier=FAKE, progress=False), strategy=PlainStrategy())
    assert not (out.parent / "summary.json").exists()
    run = load_run(out.parent)
    assert run.summary["per_category"]["all"]["pass@1"] == 1.0 and run.summary["verdicts"] == {"OK": 9}


def test_cli_report(tmp_path, suite):
    run = _run(tmp_path, suite, "a", {"*": "good"})
    proc = subprocess.run([sys.executable, "-m", "proofgym.cli", "report", str(run), "--format", "html"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(run / "report" / "report.html")
    proc = subprocess.run([sys.executable, "-m", "proofgym.cli", "report", str(tmp_path / "nope")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "does not exist" in proc.stderr


def test_report_shows_example_attempts_and_labels_summed_times(tmp_path, suite):
    run = _run(tmp_path, suite, "ex", {"t0": "good", "t1": "cheat", "*": "unknown_lemma"}, k=1)
    text = write_report([run]).read_text()
    examples = text[text.index("## Example attempts"):]
    assert "`t0` (P1): 1/1 OK" in examples and "**OK**" in examples  # a solved task, with its proof
    assert "**CHEATING**" in examples or "**ERROR**" in examples or "**FAIL**" in examples  # and how others failed
    assert examples.count("```") >= 4  # proofs are shown as code
    assert "generation_s (summed over requests" in text


def test_the_pass_at_k_plot_keeps_its_title_and_legend(tmp_path, suite):
    from PIL import Image

    run = _run(tmp_path, suite, "png", {"t0": "good", "*": "unknown_lemma"}, k=2)
    write_report([run])
    with Image.open(run / "report" / "pass_at_k.png") as image:  # closed: the run fails on a ResourceWarning
        width, height = image.size
    # figsize 7.2 x 4.0 at dpi 110 is 792 x 440; with bbox_inches="tight" the legend outside the axes is
    # inside the image, not cut at its right edge (nor the title at its left)
    assert (width, height) != (792, 440)
