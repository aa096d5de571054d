"""Two ranks under ``torchrun --nproc_per_node 2`` (gloo) with the tiny model and the real Coq verifier (issue 29):
SFT whose checkpoints are evaluated outside the training ranks, GRPO with the repair rollout, and GRPO with the
tool environment (``check_proof``).

Each test asserts that the run ends within a bound (no hang), that the weights are identical across ranks after
training and differ from the start, that every completion was checked exactly once, and that only rank 0 writes
shared files (rank 1 opens no file under the run dir for writing). Verdicts are Coq's
(:class:`tests.distributed_common.RecordingCoqVerifier` records each check the real verifier makes).
"""

from __future__ import annotations

import functools
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("trl")

from proofgym.envs.tasks.suites import load_tasks  # noqa: E402
from tests.conftest import requires_coq  # noqa: E402
from tests.distributed_common import (  # noqa: E402
    audit_writes,
    check_lines,
    on_rank_0_step,
    rank_records,
    torchrun,
    weights_digest,
)

pytestmark = [pytest.mark.slow, pytest.mark.prover, requires_coq]
THIS = "tests.test_train_distributed_more"
GATE_STEP = 3
CONTEXT_CHARS = 60


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    from proofgym.agents.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", seed=0)


@pytest.fixture(scope="module")
def taught_model(tmp_path_factory, tiny_suite) -> Path:
    """A tiny model taught to answer each tiny-suite prompt with the task's reference proof: sampled at T=1 it
    writes the proof Coq accepts in some completions and not in others, so GRPO's advantages are not all 0."""
    from proofgym.agents.tiny_model import build_tiny_model
    from proofgym.training.data import prompt_messages, reference_completion

    teach = [(prompt_messages(t, context_chars=CONTEXT_CHARS), reference_completion(t)) for t in load_tasks(tiny_suite)]
    return build_tiny_model(tmp_path_factory.mktemp("taught") / "model", teach=teach, teach_steps=400)


def _dirs(tmp_path: Path) -> tuple[Path, Path, Path]:
    out, checks, record = tmp_path / "run", tmp_path / "checks", tmp_path / "record"
    checks.mkdir()
    record.mkdir()
    return out, checks, record


def _common(model: Path, suite: Path, out: Path) -> list[str]:
    return ["--model_name_or_path", str(model), "--suite", str(suite), "--output_dir", str(out), "--report_to", "none",
            "--learning_rate", "1e-3", "--torch_threads", "1", "--verifier_workers", "1", "--save_strategy", "no",
            "--prompt_context_chars", str(CONTEXT_CHARS), "--seed", "0"]


# -- SFT, its checkpoints evaluated in a process of their own ----------------------------------------------------
def test_sft_on_two_ranks_goes_on_training_while_its_checkpoints_are_evaluated_in_their_own_process(
        tmp_path, tiny_model, tiny_suite):
    """The step-2 evaluation's verifier checks nothing until rank 0 has finished step 3 (the gate): it can only
    succeed if no rank waited for it. Evaluated on Coq once the gate is open."""
    out, checks, record = _dirs(tmp_path)
    argv = ["sft", *_common(tiny_model, tiny_suite, out), "--max_steps", "4", "--per_device_train_batch_size", "1",
            "--max_length", "512", "--heldout_fraction", "0.34", "--checkpoint_eval_steps", "2",
            "--checkpoint_eval_at_end", "false", "--checkpoint_eval_max_tokens", "12"]
    torchrun(THIS, argv, cwd=tmp_path, timeout=900, env={
        "PROOFGYM_FAKE_CHECK_LOG": str(checks), "PROOFGYM_TEST_RECORD": str(record),
        "PROOFGYM_TEST_GATE": str(tmp_path / "gate")})
    r0, r1 = rank_records(record)
    assert r0["global_step"] == r1["global_step"] == 4
    assert r0["start"] == r1["start"] and r0["end"] == r1["end"] and r0["end"] != r0["start"]
    assert (tmp_path / "gate").read_text() == str(GATE_STEP)  # opened by rank 0 at the end of step 3

    heldout = [t.id for t in load_tasks(out / "heldout.jsonl")]
    evals = json.loads((out / "checkpoint_evals.json").read_text())
    assert [e["step"] for e in evals] == [2, 4] and r0["checkpoint_evals"] == [2, 4]
    for e in evals:  # every held-out task got Coq's verdict: the step-2 checks ran after step 3, none failed
        assert e["harness_failures"] == 0 and sum(e["verdicts"].values()) == len(heldout), e
        rows = [json.loads(line) for line in Path(e["run_dir"], "results.jsonl").read_text().splitlines()]
        assert sorted(r["task_id"] for r in rows) == sorted(heldout)  # each completion scored exactly once
    lines = check_lines(checks)
    assert sorted(t for _, t, _ in lines) == sorted(heldout * 2) and {r for r, _, _ in lines} == {"-"}

    assert r1["writes"] == []  # (its RNG state in each checkpoint is torch's C++ writer, not a Python open)
    assert "train_result.json" in r0["writes"] and "checkpoint_evals.json" in r0["writes"]
    # the evaluation's own files are the evaluation process's: rank 0 only asked for it and read its record
    assert not [w for w in r0["writes"] if w.startswith("checkpoint_evals/step-")
                and not w.endswith((".request.json", ".log"))], r0["writes"]


# -- GRPO: the repair rollout and the tool environment --------------------------------------------------------
def _grpo_argv(model: Path, suite: Path, out: Path, *extra: str) -> list[str]:
    return ["grpo", *_common(model, suite, out), "--max_steps", "2", "--per_device_train_batch_size", "2",
            "--num_generations", "2", "--max_completion_length", "48", "--temperature", "1.0",
            "--heldout_fraction", "0", "--checkpoint_eval_at_end", "false", "--verdict_cache_entries", "0",
            "--verifier_factory", "tests.distributed_common:RecordingCoqVerifier", *extra]


def _completions(out: Path) -> Any:
    import pandas as pd

    return pd.concat(pd.read_parquet(p) for p in sorted((out / "completions").glob("*.parquet")))


def _assert_grpo_ranks(record: Path, out: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    r0, r1 = rank_records(record)
    assert r0["global_step"] == r1["global_step"] == 2
    assert r0["start"] == r1["start"] and r0["end"] == r1["end"] and r0["end"] != r0["start"]
    assert r1["writes"] == [] and "train_result.json" in r0["writes"]
    # the per-category pass@k of each logging window holds both ranks' completions (2 ranks x 2 = 4 a step)
    windows = [row for row in json.loads((out / "train_result.json").read_text())["log_history"]
               if "train/proof/pass@1" in row]
    assert len(windows) == 2 and all(sum(v for k, v in row.items() if k.endswith("/samples")) == 4
                                     for row in windows), windows
    return r0, r1


def test_grpo_with_the_repair_rollout_on_two_ranks_checks_every_turn_once(tmp_path, taught_model, tiny_suite):
    out, checks, record = _dirs(tmp_path)
    argv = _grpo_argv(taught_model, tiny_suite, out, "--max_turns", "2")
    torchrun(THIS, argv, cwd=tmp_path, timeout=900, env={
        "PROOFGYM_FAKE_CHECK_LOG": str(checks), "PROOFGYM_TEST_RECORD": str(record)})
    _assert_grpo_ranks(record, out)
    table = _completions(out)
    assert len(table) == 2 * 4  # 2 steps x 2 ranks x 2 completions, gathered on rank 0
    lines = check_lines(checks)
    # one Coq check per turn of every episode: the reward reuses the rollout's verdicts, no check twice
    assert len(lines) == int(table["turns"].sum()) and 8 <= len(lines) <= 16
    assert {r for r, _, _ in lines} == {"0", "1"}  # each rank checked its own episodes


def test_grpo_with_the_tool_environment_on_two_ranks_checks_every_answer_once(tmp_path, taught_model, tiny_suite):
    import trl

    out, checks, record = _dirs(tmp_path)
    template = Path(trl.__file__).parent / "chat_templates" / "qwen3.jinja"
    argv = _grpo_argv(taught_model, tiny_suite, out, "--tool_env", "true", "--chat_template_path", str(template))
    torchrun(THIS, argv, cwd=tmp_path, timeout=900, env={
        "PROOFGYM_FAKE_CHECK_LOG": str(checks), "PROOFGYM_TEST_RECORD": str(record)})
    _assert_grpo_ranks(record, out)
    table = _completions(out)
    assert len(table) == 2 * 4
    lines = check_lines(checks)
    r0, r1 = rank_records(record)
    assert r0["tool_calls"] == r1["tool_calls"] == 2  # one scripted check_proof call per group, 2 steps
    assert len(lines) == len(table) + 4  # each final answer once, and each check_proof call once
    assert {r for r, _, _ in lines} == {"0", "1"}


# -- one rank of the torchrun tests above -------------------------------------------------------------------------
FEEDBACK_MARKS = ("rejected", "<tool_response>")
"""Text of a later turn's prompt (the repair rollout's feedback, a tool's reply): those turns are the model's own."""


def scripted(generate: Any, tokenizer_of: Any, tasks: list[Any], *, tool_call: bool = False) -> Any:
    """``generate`` (a generator method: prompt ids in, ``(completion ids, extra)`` out), with the first completion of
    each group of two (TRL repeats each prompt ``num_generations`` = 2 times in a row) of a first turn replaced by
    the task's reference proof. Every group then holds a proof Coq accepts beside the model's own sample (what the
    tiny model samples is near-deterministic per task: alone, whole groups scored alike and GRPO moved nothing).
    With ``tool_call`` the second completion of each group is a ``check_proof`` call (Qwen3's format) of the
    reference proof, so the tool is called once per group; the turn after the tool's reply is the model's."""
    from proofgym.training.data import reference_completion

    @functools.wraps(generate)
    def wrapper(self: Any, prompt_ids: Any, *args: Any, **kwargs: Any) -> Any:
        completions, extra = generate(self, prompt_ids, *args, **kwargs)
        tokenizer = tokenizer_of(self)
        for i in range(0, len(prompt_ids), 2):
            text = tokenizer.decode(list(prompt_ids[i]))
            found = [t for t in tasks if t.statement in text]
            if found and not any(mark in text for mark in FEEDBACK_MARKS):
                ids = tokenizer(reference_completion(found[0]), add_special_tokens=False)["input_ids"]
                completions[i] = [*ids, tokenizer.eos_token_id]
                if tool_call and i + 1 < len(completions):
                    call = json.dumps({"name": "check_proof", "arguments": {"proof": found[0].reference_proof}})
                    ids = tokenizer(f"<tool_call>\n{call}\n</tool_call>", add_special_tokens=False)["input_ids"]
                    completions[i + 1] = [*ids, tokenizer.eos_token_id]
        return completions, extra

    return wrapper


def _run_rank(argv: list[str]) -> None:
    """Train as ``argv`` says (``sft ...`` or ``grpo ...``), recording this rank's weights before and after training,
    its writes under the run dir, and (SFT) opening the evaluation gate at the end of step ``GATE_STEP``."""
    kind, argv = argv[0], argv[1:]
    writes = audit_writes(argv[argv.index("--output_dir") + 1])
    digests: dict[str, str] = {}
    extra_callbacks: list[Any] = []
    tool_calls: list[int] = []
    if kind == "sft":
        import trl

        import proofgym.training.sft as sft
        from proofgym.training.sft import main

        gate = Path(os.environ["PROOFGYM_TEST_GATE"])
        extra_callbacks.append(on_rank_0_step(GATE_STEP, lambda: gate.write_text(str(GATE_STEP))))
        make_evaluator = sft.checkpoint_evaluator

        def gated_evaluator(*args: Any, **kwargs: Any) -> Any:
            evaluator = make_evaluator(*args, **kwargs)
            if evaluator is not None:  # the evaluation process checks on Coq once the gate is open
                evaluator.options["verifier"] = "tests.distributed_common:GatedCoqVerifier"
            return evaluator

        sft.checkpoint_evaluator = gated_evaluator
        base = trl.SFTTrainer
    else:
        import proofgym.training.environment as environment
        import proofgym.training.grpo_trainer as grpo_trainer
        from proofgym.training.grpo import main

        base = grpo_trainer.ProofGRPOTrainer
        original_check = environment.CheckProofEnv.check_proof

        @functools.wraps(original_check)  # TRL reads the tool's signature and docstring
        def check_proof(self: Any, proof: str) -> str:
            tool_calls.append(1)
            return original_check(self, proof)

        environment.CheckProofEnv.check_proof = check_proof  # type: ignore[method-assign]
        import proofgym.training.rollout as rollout
        from proofgym.envs.tasks.suites import load_tasks as tasks_of

        tasks = tasks_of(argv[argv.index("--suite") + 1])
        rollout.TrainerGenerator.__call__ = scripted(  # type: ignore[method-assign]
            rollout.TrainerGenerator.__call__, lambda gen: gen.trainer.processing_class, tasks)
        base._generate_single_turn = scripted(  # type: ignore[method-assign]
            base._generate_single_turn, lambda trainer: trainer.processing_class, tasks, tool_call=True)

    class Recording(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            for callback in extra_callbacks:
                self.add_callback(callback)

        def train(self, *args: Any, **kwargs: Any) -> Any:
            digests["start"] = weights_digest(self.model)
            done = super().train(*args, **kwargs)
            digests["end"] = weights_digest(self.model)
            return done

    if kind == "sft":
        trl.SFTTrainer = Recording  # train_sft imports it from trl when it runs
    else:
        grpo_trainer.ProofGRPOTrainer = Recording  # train_grpo imports it from the module when it runs
    result = main(argv)
    Path(os.environ["PROOFGYM_TEST_RECORD"], f"rank{os.environ['RANK']}.json").write_text(json.dumps(
        {"writes": sorted(writes), "global_step": result.global_step, "tool_calls": len(tool_calls),
         "checkpoint_evals": [e["step"] for e in result.checkpoint_evals], **digests}))


if __name__ == "__main__":
    _run_rank(sys.argv[1:])
