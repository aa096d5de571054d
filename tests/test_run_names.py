"""Run names: one slug for eval's run dirs and training's run names, and --resume still finds the old dirs."""

from __future__ import annotations

import json
from pathlib import Path

from proofgym.training.common import run_name
from proofgym.training.eval_runs import EvalConfig, find_resumable, run_prefix, slug

IDENTITY = {"suite_sha256": "abc", "agent": "hf", "model": "/m/SmolLM2.gguf", "strategy": {"name": "plain"},
            "sampling": None}


def test_one_slug_names_files_paths_and_hub_ids():
    assert slug("/x/coq-stdlib.jsonl") == "coq-stdlib"
    assert slug("/models/SmolLM2.gguf") == "SmolLM2"  # a model file, present or not
    assert slug("HuggingFaceTB/SmolLM2-135M-Instruct") == "HuggingFaceTB-SmolLM2-135M-Instruct"  # orgs stay apart
    assert slug("gpt-4o mini") == "gpt-4o-mini"
    assert slug("x" * 100, limit=10) == "x" * 10 and slug("///") == "-"


def test_an_existing_path_gives_its_last_part(tmp_path):
    model = tmp_path / "checkpoints" / "final"
    model.mkdir(parents=True)
    assert slug(str(model)) == "final"
    assert slug(str(tmp_path / "absent" / "final")) != "final"  # not a path here: a name, all of it kept


def test_training_and_eval_name_a_model_the_same_way():
    for model in ("HuggingFaceTB/SmolLM2-135M-Instruct", "/models/SmolLM2.gguf"):
        cfg = EvalConfig(suite="coq-stdlib", agent="hf", model=model, k=1)
        assert run_name("coq-stdlib", "grpo", model, 0).split("__")[2] == run_prefix(cfg).split("__")[2]


def _run_dir(root: Path, name: str, identity: dict) -> Path:
    path = root / name
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"identity": identity}), encoding="utf-8")
    return path


def test_resume_finds_a_run_dir_named_by_the_old_slug(tmp_path):
    cfg = EvalConfig(suite="coq-stdlib", agent="hf", model="/m/SmolLM2.gguf", k=1, runs_dir=str(tmp_path))
    assert run_prefix(cfg) == "coq-stdlib__hf__SmolLM2__k1"
    # eval's old slug kept a model file's suffix (and the whole path when the file was not there)
    old = _run_dir(tmp_path, "coq-stdlib__hf__SmolLM2.gguf__k1__20260101-000000", IDENTITY)
    _run_dir(tmp_path, "coq-stdlib__hf__m-SmolLM2.gguf__k1__20260102-000000", {**IDENTITY, "model": "other"})
    _run_dir(tmp_path, "coq-stdlib__hf__SmolLM2.gguf__k2__20260103-000000", IDENTITY)  # another k: not this command
    assert find_resumable(cfg, IDENTITY) == old
    # a newer new-style dir of the same command wins over the old one
    new = _run_dir(tmp_path, "coq-stdlib__hf__SmolLM2__k1__20260104-000000", IDENTITY)
    assert find_resumable(cfg, IDENTITY) == new
    assert find_resumable(cfg, {**IDENTITY, "suite_sha256": "changed"}) is None
