"""Training configs, splits and the checks that run before any training (fast tier: no model, no prover).

Needs the ``train`` extra (TRL); skipped without it.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

pytest.importorskip("trl")

from proofgym.cli import main as proofgym_main  # noqa: E402
from proofgym.envs.tasks.suites import load_tasks  # noqa: E402
from proofgym.training.common import TrainConfigError, parse_config, prepare_run, run_name  # noqa: E402
from proofgym.training.data import (  # noqa: E402
    NoTrainSplit,
    grpo_rows,
    prompt_key,
    select,
    sft_rows,
    split_tasks,
)
from proofgym.training.expert_iteration_config import ProofExpertIterationConfig  # noqa: E402
from proofgym.training.grpo_config import ProofGRPOConfig  # noqa: E402
from proofgym.training.sft_config import ProofSFTConfig  # noqa: E402
from tests.conftest import requires_coq  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TRAIN_CONFIGS = sorted((ROOT / "configs" / "train").glob("*.yaml"))


def _config_class(path: Path) -> type:
    if path.name.startswith("expert_iteration"):
        return ProofExpertIterationConfig
    return ProofSFTConfig if path.name.startswith("sft") or "_sft" in path.name else ProofGRPOConfig


@pytest.mark.parametrize("path", TRAIN_CONFIGS, ids=lambda p: p.name)
def test_every_shipped_config_loads(path, tmp_path):
    # GPU configs ask for bf16 and vLLM, which TrainingArguments checks against this machine: load them on CPU.
    cls = _config_class(path)
    cpu = ["--use_cpu", "true"] if "gpu" in path.name else []
    cpu += ["--use_vllm", "false"] if cpu and cls is ProofGRPOConfig else []
    cfg = parse_config(cls, ["--config", str(path), "--output_dir", str(tmp_path), *cpu])
    assert cfg.output_dir == str(tmp_path)
    assert cfg.run_name.count("__") == 4


def test_flags_override_the_file_and_cpu_defaults_hold(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("suite: tests/data/tiny_suite.jsonl\nmax_steps: 3\nlearning_rate: 0.001\n")
    cfg = parse_config(ProofGRPOConfig, ["--config", str(path), "--max_steps", "5", "--output_dir", str(tmp_path)])
    assert (cfg.max_steps, cfg.learning_rate) == (5, 0.001)
    assert cfg.bf16 is False and not cfg.gradient_checkpointing and cfg.use_cpu is True
    sft = ProofSFTConfig(output_dir=str(tmp_path))
    assert sft.bf16 is False and not sft.gradient_checkpointing and sft.use_cpu is True


@pytest.mark.parametrize("cls", [ProofGRPOConfig, ProofSFTConfig, ProofExpertIterationConfig])
def test_every_field_has_help_text(cls):
    missing = [f.name for f in dataclasses.fields(cls) if not f.metadata.get("help")]
    assert not missing


def test_a_broken_config_key_is_a_clear_error(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("suite: coq-stdlib\nmax_turn: 2\n")
    with pytest.raises(TrainConfigError, match=r"unknown key.*'max_turn'.*did you mean 'max_turns'"):
        parse_config(ProofGRPOConfig, ["--config", str(path)])
    path.write_text("- a list\n")
    with pytest.raises(TrainConfigError, match="mapping"):
        parse_config(ProofGRPOConfig, ["--config", str(path)])
    with pytest.raises(TrainConfigError, match="cannot read"):
        parse_config(ProofGRPOConfig, ["--config", str(tmp_path / "nope.yaml")])


def test_bad_values_are_clear_errors(tmp_path):
    with pytest.raises(TrainConfigError, match="turn_discount"):
        parse_config(ProofGRPOConfig, ["--turn_discount", "1.5", "--output_dir", str(tmp_path)])


def test_curriculum_flags_and_their_checks(tmp_path):
    cfg = parse_config(ProofGRPOConfig, ["--curriculum", "true", "--curriculum_k", "4", "--curriculum_refresh_steps",
                                         "5", "--output_dir", str(tmp_path)])
    assert (cfg.curriculum, cfg.curriculum_k, cfg.curriculum_refresh_steps) == (True, 4, 5)
    assert parse_config(ProofGRPOConfig, ["--output_dir", str(tmp_path)]).curriculum is False  # off by default
    with pytest.raises(TrainConfigError, match="curriculum_k"):
        parse_config(ProofGRPOConfig, ["--curriculum_k", "1", "--output_dir", str(tmp_path)])


def test_shaping_is_off_by_default_and_a_reward_policy_that_punishes_honest_misses_is_refused(tmp_path):
    from proofgym.training.grpo import train_grpo

    assert parse_config(ProofGRPOConfig, ["--output_dir", str(tmp_path)]).format_bonus == 0.0
    with pytest.raises(TrainConfigError, match="honest miss"):
        train_grpo(_cfg(tmp_path, verdict_rewards={"ERROR": -1.0}))
    with pytest.raises(TrainConfigError, match="format_bonus"):
        train_grpo(_cfg(tmp_path, format_bonus=1.5))


def test_the_cli_reports_a_broken_config_in_one_line(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text("suite: coq-stdlib\nlerning_rate: 0.1\n")
    assert proofgym_main(["train", "grpo", "--config", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "lerning_rate" in err[0] and "learning_rate" in err[0]


def test_expert_iteration_is_a_train_subcommand(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text("suite: coq-stdlib\nround: 2\n")
    assert proofgym_main(["train", "expert-iteration", "--config", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'round'" in err[0] and "'rounds'" in err[0] and "expert-iteration --help" in err[0]
    cfg = parse_config(ProofExpertIterationConfig, ["--rounds", "3", "--output_dir", str(tmp_path)])
    assert cfg.rounds == 3 and cfg.run_name.split("__")[1] == "expert-iteration"
    with pytest.raises(TrainConfigError, match="sample_temperature"):
        parse_config(ProofExpertIterationConfig, ["--sample_temperature", "0", "--output_dir", str(tmp_path)])


def test_run_name_has_the_run_identity():
    name = run_name("/x/coq-stdlib.jsonl", "grpo", "/models/SmolLM2.gguf", 7, when=0)
    suite, algo, model, seed, stamp = name.split("__")
    assert (suite, algo, model, seed) == ("coq-stdlib", "grpo", "SmolLM2", "7")
    assert len(stamp) == len("19700101-000000")


# -- splits and rows -------------------------------------------------------------------------------------
def _tasks(tiny_suite):
    return load_tasks(tiny_suite)


def test_the_hash_split_is_stratified_deterministic_and_disjoint(tiny_suite):
    tasks = _tasks(tiny_suite)
    splits = split_tasks(tasks, heldout_fraction=0.25, seed=0)
    assert splits == split_tasks(tasks, heldout_fraction=0.25, seed=0)
    train, held = {t.id for t in splits["train"]}, {t.id for t in splits["heldout"]}
    assert train and held and not train & held and train | held == {t.id for t in tasks}
    assert {t.category for t in splits["heldout"]} == {"P1"}  # P2/P3 have one task each: never held out
    assert split_tasks(tasks, heldout_fraction=0.25, seed=1) != splits or len(held) == 1


def test_metadata_split_wins_and_no_train_split_is_a_clear_error(tiny_suite):
    tasks = [dataclasses.replace(t, metadata={**t.metadata, "split": "test"}) for t in _tasks(tiny_suite)]
    with pytest.raises(NoTrainSplit, match=r"no 'train' tasks.*test \(6\)"):
        select(tasks, split="train", suite="mine")
    assert len(select(tasks, split="test")) == 6
    with pytest.raises(NoTrainSplit, match="categories"):
        select(_tasks(tiny_suite), split="train", categories=["P9"])


def test_rows_are_trl_conversational_formats(tiny_suite):
    tasks = _tasks(tiny_suite)
    rows = grpo_rows(tasks, context_chars=100)
    assert rows[0]["prompt"][0]["role"] == "system" and rows[0]["prompt"][-1]["role"] == "user"
    assert rows[0]["task_id"] == tasks[0].id and rows[0]["system"] == "coq"
    assert len({prompt_key(r["prompt"]) for r in rows}) == len(rows)
    sft = sft_rows(tasks)
    assert sft[0]["completion"] == [{"role": "assistant", "content": f"```coq\n{tasks[0].reference_proof}\n```"}]


# -- checks before training ----------------------------------------------------------------------------
def _cfg(tmp_path, **overrides):
    model = tmp_path / "model"  # resolve_model only looks for config.json; nothing is loaded here
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text("{}")
    base = dict(suite=str(Path(__file__).parent / "data" / "tiny_suite.jsonl"), model_name_or_path=str(model),
                output_dir=str(tmp_path / "out"), report_to="none")
    return ProofGRPOConfig(**{**base, **overrides})


def test_a_missing_model_dir_fails_before_training(tmp_path):
    with pytest.raises(TrainConfigError, match="does not exist"):
        prepare_run(_cfg(tmp_path, model_name_or_path=str(tmp_path / "no-such-model")))
    (tmp_path / "empty").mkdir()
    with pytest.raises(TrainConfigError, match="no config.json"):
        prepare_run(_cfg(tmp_path, model_name_or_path=str(tmp_path / "empty")))


def test_a_suite_without_train_split_fails_before_training(tmp_path, tiny_suite):
    suite = tmp_path / "eval_only.jsonl"
    rows = [json.loads(line) for line in tiny_suite.read_text().splitlines() if line.strip()]
    suite.write_text("".join(json.dumps({**r, "metadata": {"split": "test"}}) + "\n" for r in rows))
    with pytest.raises(NoTrainSplit, match="no 'train' tasks"):
        prepare_run(_cfg(tmp_path, suite=str(suite)))
    with pytest.raises(TrainConfigError, match="not built|does not exist"):
        prepare_run(_cfg(tmp_path, suite=str(tmp_path / "missing.jsonl")))


def test_a_verifier_that_is_not_installed_fails_before_training(tmp_path, monkeypatch):
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    from proofgym.envs.errors import ProverNotFound
    from proofgym.training.cli import run

    with pytest.raises(ProverNotFound, match="coq verifier cannot run.*apt-get install coq"):
        prepare_run(_cfg(tmp_path))
    # the command says so with exit 3 (a prover is missing), as the README and `proofgym check` do
    assert run("grpo", ["--suite", str(Path(__file__).parent / "data" / "tiny_suite.jsonl"),
                        "--output_dir", str(tmp_path / "out"), "--report_to", "none", "--model_name_or_path",
                        "tiny"]) == 3


@requires_coq
def test_prepare_run_writes_the_heldout_split(tmp_path):
    prepared = prepare_run(_cfg(tmp_path, heldout_fraction=0.25))
    assert prepared.heldout_path and prepared.heldout_path.exists()
    held = {t.id for t in load_tasks(prepared.heldout_path)}
    assert held == {t.id for t in prepared.eval_tasks} and not held & {t.id for t in prepared.train_tasks}


@pytest.mark.parametrize("path", sorted((ROOT / "configs" / "accelerate").glob("*.yaml")), ids=lambda p: p.name)
def test_accelerate_configs_load(path):
    from accelerate.commands.config.config_args import load_config_from_file

    config = load_config_from_file(str(path))
    expected = {"cpu.yaml": ("NO", 1, True), "single_gpu.yaml": ("NO", 1, False),
                "multi_gpu.yaml": ("MULTI_GPU", 8, False), "deepspeed_zero2.yaml": ("DEEPSPEED", 8, False),
                "deepspeed_zero3.yaml": ("DEEPSPEED", 8, False)}[path.name]
    assert (config.distributed_type.value, config.num_processes, config.use_cpu) == expected
    if "zero" in path.name:
        assert config.deepspeed_config["zero_stage"] == int(path.stem[-1])


def test_train_help_lists_proofgyms_fields_first_without_importing_trl():
    import subprocess
    import sys

    code = ("import sys\nfrom proofgym.training.cli import main\nmain(['grpo', '--help'])\n"
            "print('IMPORTED', 'trl' in sys.modules, 'torch' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    out = proc.stdout
    assert proc.returncode == 0 and out.startswith("usage: proofgym train grpo"), proc.stderr
    for name in ("--curriculum ", "--verdict_rewards", "--format_bonus", "--verifier_workers", "--max_turns"):
        assert name in out
    assert "--help-all" in out and len(out.splitlines()) < 300
    assert "IMPORTED False False" in out  # the answer needs neither TRL nor torch
