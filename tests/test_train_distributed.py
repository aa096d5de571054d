"""Multi-process and GPU safety of the training code (issue 13, item 7), against the installed TRL/transformers.

Two-process cases run under ``torch.distributed`` with gloo (two CPU processes on this machine, a tiny
tokenizer built locally): the repair rollout's turns stay in lockstep, and only rank 0 merges and writes
a LoRA model. The rest is single-process: ZeRO-3 detection and the checkpoint-evaluation refusal
(deepspeed is not installed here, so refusing with a message is what can be tested), the PEFT + ZeRO-3
``use_reentrant`` fix landing where transformers 5 reads it, the vLLM per-turn token cap (a stand-in
engine: there is no GPU here), and ``model_init_kwargs`` when proofgym loads the model itself.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("trl")

from proofgym.envs.types import CheckResult, Task, Verdict  # noqa: E402
from proofgym.training import distributed  # noqa: E402
from proofgym.training.common import TrainConfigError, load_model, model_init_kwargs, prepare_run  # noqa: E402
from tests.distributed_common import weights_digest  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    from proofgym.agents.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


# -- two gloo processes ----------------------------------------------------------------------------------
def _spawn(target: Any, tmp_path: Path, *args: Any) -> None:
    import torch.multiprocessing as mp

    mp.spawn(_run_rank, args=(target, str(tmp_path / "rendezvous"), *args), nprocs=2, join=True)


def _run_rank(rank: int, target: Any, *args: Any) -> None:
    """Run one rank's ``target``; once it has returned (its results written, its group destroyed), leave
    without the interpreter's finalisation.

    A clean CI run (2 xdist workers, under load) once lost rank 0 to SIGABRT ("terminate called without an
    active exception") after the rank's work: torch's own teardown of gloo objects during interpreter
    finalisation, which is not the code under test. An exception in ``target`` still propagates, so
    ``mp.spawn`` reports its traceback and the test fails.
    """
    target(rank, *args)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _init(rank: int, rendezvous: str) -> None:
    import datetime

    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=60))


def _finish() -> None:
    """Leave the group together: the barrier lets no rank tear gloo down while the other is still in a
    collective (the last all-reduce's reply may still be in flight to it)."""
    import torch.distributed as dist

    dist.barrier()
    dist.destroy_process_group()


class _RankPool:
    """Stands in for the verifier pool: rank 0's proofs are OK at once, rank 1's always FAIL."""

    def __init__(self, rank: int) -> None:
        self.rank = rank

    def check_batch(self, pairs: list[tuple[Task, str]], timeout: float | None = None) -> list[Any]:
        verdict = Verdict.OK if self.rank == 0 else Verdict.FAIL
        return [SimpleNamespace(result=CheckResult(verdict, messages=("stand-in",)))
                for _ in pairs]


def _rollout_worker(rank: int, rendezvous: str, model_dir: str, out: str) -> None:
    from transformers import AutoTokenizer

    from proofgym.training.data import prompt_messages
    from proofgym.training.rollout import RepairRollout

    _init(rank, rendezvous)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tasks = [Task(id=f"t{i}", system="coq", suite="s", category="P1", statement=f"Lemma t{i} : True.",
                  context="", reference_proof="Proof. auto. Qed.") for i in range(2)]
    reply = tokenizer("```coq\nProof. auto. Qed.\n```", add_special_tokens=False)["input_ids"]
    calls: list[int] = []

    def generate(prompt_ids: Any, max_new_tokens: int) -> tuple[list[list[int]], None]:
        calls.append(len(prompt_ids))
        return [list(reply) for _ in prompt_ids], None

    rollout = RepairRollout(tasks, _RankPool(rank), max_turns=3, context_chars=100, generator=generate)
    trainer = SimpleNamespace(processing_class=tokenizer, args=SimpleNamespace(max_completion_length=16),
                              accelerator=SimpleNamespace(device="cpu"))
    # rank 0 has 2 episodes (both end at turn 1), rank 1 has 3 (all go to turn 3)
    prompts = [prompt_messages(t, context_chars=100) for t in tasks] + ([] if rank == 0 else
                                                                         [prompt_messages(tasks[0], context_chars=100)])
    out_fields = rollout(prompts, trainer)
    Path(out, f"rank{rank}.json").write_text(json.dumps({"calls": calls, "turns": [
        o["turns"] for o in out_fields["rollout_outcomes"]]}))
    _finish()


def test_the_repair_rollout_runs_the_same_turns_with_the_same_width_on_every_rank(tmp_path, tiny_model):
    _spawn(_rollout_worker, tmp_path, str(tiny_model), str(tmp_path))
    r0 = json.loads((tmp_path / "rank0.json").read_text())
    r1 = json.loads((tmp_path / "rank1.json").read_text())
    assert r1["turns"] == [3, 3, 3] and r0["turns"] == [1, 1]  # the episodes themselves are unchanged
    # rank 0 finished at turn 1 but still takes part in turns 2 and 3, padded to rank 1's width
    assert r0["calls"] == r1["calls"] == [3, 3, 3]


class _Recorder:
    def __init__(self, out: str, rank: int, what: str) -> None:
        self.out, self.rank, self.what = out, rank, what

    def save_pretrained(self, path: Any) -> None:
        Path(self.out, f"{self.what}-rank{self.rank}").write_text(str(path))


def _merge_worker(rank: int, rendezvous: str, out: str) -> None:
    import torch.distributed as dist

    from proofgym.training.common import save_final_model

    _init(rank, rendezvous)
    model = SimpleNamespace(merge_and_unload=lambda: _Recorder(out, rank, "merged"))
    trainer = SimpleNamespace(
        args=SimpleNamespace(), save_model=lambda path: Path(out, f"adapter-rank{rank}").write_text(path),
        is_world_process_zero=lambda: rank == 0, processing_class=_Recorder(out, rank, "tokenizer"),
        accelerator=SimpleNamespace(wait_for_everyone=dist.barrier, unwrap_model=lambda m: m), model=model)
    final = save_final_model(trainer, Path(out), peft=True)
    Path(out, f"final-rank{rank}").write_text(str(final))
    _finish()


def test_only_rank_0_merges_and_writes_the_lora_model(tmp_path):
    _spawn(_merge_worker, tmp_path, str(tmp_path))
    written = sorted(p.name for p in tmp_path.iterdir() if p.name != "rendezvous")
    # save_model runs on both (it is the collective that gathers ZeRO-3 shards; transformers writes on rank 0)
    assert written == ["adapter-rank0", "adapter-rank1", "final-rank0", "final-rank1", "merged-rank0",
                       "tokenizer-rank0"]
    assert (tmp_path / "final-rank1").read_text() == str(tmp_path / "merged")


# -- ZeRO-3 ----------------------------------------------------------------------------------------------
def test_zero_stage_is_read_from_the_config_its_file_and_accelerates_environment(tmp_path, monkeypatch):
    for name in ("ACCELERATE_USE_DEEPSPEED", "ACCELERATE_DEEPSPEED_ZERO_STAGE", "ACCELERATE_DEEPSPEED_CONFIG_FILE"):
        monkeypatch.delenv(name, raising=False)
    assert distributed.zero_stage(SimpleNamespace(deepspeed=None)) == 0
    assert distributed.zero_stage(SimpleNamespace(deepspeed={"zero_optimization": {"stage": 3}})) == 3
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"zero_optimization": {"stage": 2}}))
    assert distributed.zero_stage(SimpleNamespace(deepspeed=str(path))) == 2
    assert distributed.zero_stage(SimpleNamespace(deepspeed_plugin=SimpleNamespace(zero_stage=3))) == 3
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "3")
    assert distributed.zero_stage(SimpleNamespace()) == 3


def _grpo_config(tmp_path: Path, model: Path, suite: Path, **overrides: Any) -> Any:
    from proofgym.training.grpo_config import ProofGRPOConfig

    return ProofGRPOConfig(**{**dict(model_name_or_path=str(model), suite=str(suite), output_dir=str(tmp_path / "run"),
                                     report_to="none", max_steps=1, per_device_train_batch_size=2,
                                     num_generations=2), **overrides})


def test_checkpoint_evaluation_under_zero3_is_refused_before_training_with_what_to_do(tmp_path, tiny_model,
                                                                                       tiny_suite):
    cfg = _grpo_config(tmp_path, tiny_model, tiny_suite, checkpoint_eval_at_end=True)
    # set after __post_init__: transformers would import deepspeed (not installed here) to build its plugin
    cfg.deepspeed = {"zero_optimization": {"stage": 3}}
    with pytest.raises(TrainConfigError, match="ZeRO-3.*checkpoint_eval_at_end: false.*proofgym eval"):
        prepare_run(cfg, needs_verifier=False)
    cfg.checkpoint_eval_at_end = False
    prepare_run(cfg, needs_verifier=False)  # no evaluation asked for: ZeRO-3 itself is fine
    cfg.deepspeed = {"zero_optimization": {"stage": 2}}
    cfg.checkpoint_eval_at_end = True
    prepare_run(cfg, needs_verifier=False)


def test_the_peft_zero3_use_reentrant_fix_lands_in_activation_checkpointing_kwargs(tmp_path, tiny_model,
                                                                                   tiny_suite):
    cfg = _grpo_config(tmp_path, tiny_model, tiny_suite, activation_checkpointing=True, use_peft=True)
    assert cfg.activation_checkpointing_kwargs is None  # what TRL 1.16's own fix cannot reach
    assert distributed.fix_reentrant_checkpointing(cfg, peft=True) is False  # not ZeRO-3: untouched
    cfg.deepspeed = {"zero_optimization": {"stage": 3}}
    assert distributed.fix_reentrant_checkpointing(cfg, peft=True) is True
    assert cfg.activation_checkpointing_kwargs == {"use_reentrant": True}  # the dict transformers 5 reads
    assert cfg.gradient_checkpointing_kwargs is cfg.activation_checkpointing_kwargs
    other = _grpo_config(tmp_path, tiny_model, tiny_suite, activation_checkpointing=True,
                         activation_checkpointing_kwargs={"use_reentrant": False, "every_n_layers": 2})
    other.deepspeed = {"zero_optimization": {"stage": 3}}
    assert distributed.fix_reentrant_checkpointing(other, peft=False) is False  # full fine-tuning: no change
    assert distributed.fix_reentrant_checkpointing(other, peft=True) is True
    assert other.activation_checkpointing_kwargs == {"use_reentrant": True, "every_n_layers": 2}


def _layer_checkpointing(model: Any) -> list[tuple[bool, Any]]:
    from transformers.modeling_layers import GradientCheckpointingLayer

    return [(m.gradient_checkpointing, m.__dict__.get("_gradient_checkpointing_func").keywords.get("use_reentrant"))
            for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]


def test_generation_for_the_curriculum_and_repair_keeps_the_checkpointing_setup(tiny_model):
    """TRL's unwrap re-enables checkpointing with defaults after generating: use_reentrant=False on every layer,
    which undid the PEFT + ZeRO-3 reentrant fix (and every_n_layers) after the first curriculum estimate."""
    from transformers import GenerationConfig

    from proofgym.training.common import ResolvedModel
    from proofgym.training.rollout import TrainerGenerator

    model, tokenizer = load_model(ResolvedModel(str(tiny_model), None, "tiny"))
    model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": True}, every_n_layers=2)
    model.train()
    before = _layer_checkpointing(model)
    assert [flag for flag, _ in before] == [True, False] and before[0][1] is True
    trainer = SimpleNamespace(
        use_vllm=False, model_wrapped=model, processing_class=tokenizer, generation_kwargs=None,
        generation_config=GenerationConfig(do_sample=False),
        args=SimpleNamespace(ds3_gather_for_generation=True, gradient_checkpointing_kwargs=None),
        accelerator=SimpleNamespace(unwrap_model=lambda m: m, state=SimpleNamespace(deepspeed_plugin=None)))
    ids, _ = TrainerGenerator(trainer)([[1, 2, 3], [1, 2, 3]], 4)
    assert len(ids) == 2
    assert _layer_checkpointing(model) == before


def test_zero3_settings_that_would_hang_are_refused_before_anything_starts(tmp_path, tiny_model, tiny_suite):
    from proofgym.training.grpo import train_grpo

    cfg = _grpo_config(tmp_path, tiny_model, tiny_suite, checkpoint_eval_at_end=False, ds3_gather_for_generation=False)
    cfg.deepspeed = {"zero_optimization": {"stage": 3}}  # after __post_init__: deepspeed is not installed here
    with pytest.raises(TrainConfigError, match=r"ds3_gather_for_generation: false under DeepSpeed ZeRO-3 without "
                                               r"vLLM would hang.*Keep ds3_gather_for_generation: true"):
        train_grpo(cfg)
    cfg.ds3_gather_for_generation = True
    cfg.warm_start_sft_steps = 2
    with pytest.raises(TrainConfigError, match=r"warm_start_sft_steps under DeepSpeed ZeRO-3.*proofgym train sft"):
        train_grpo(cfg)
    cfg.warm_start_sft_steps = 0
    cfg.ds3_gather_for_generation, cfg.use_vllm = False, True  # vLLM generates: no ZeRO-3 forward passes
    distributed.refuse_hanging_settings(cfg)
    cfg.deepspeed = {"zero_optimization": {"stage": 2}}
    cfg.use_vllm = False
    distributed.refuse_hanging_settings(cfg)


# -- vLLM per-turn cap -----------------------------------------------------------------------------------
class _StandInVLLM:
    """TRL's VLLMGeneration as the rollout sees it: the token budget comes from its max_completion_length."""

    def __init__(self) -> None:
        self.max_completion_length = 256
        self.budgets: list[int] = []

    def generate(self, prompts: list[list[int]], images: Any, num_generations: int) -> tuple:
        self.budgets.append(self.max_completion_length)
        n = self.max_completion_length
        return prompts, [[7] * n for _ in prompts], [[[-0.5]] * n for _ in prompts], None


def test_a_turn_under_vllm_gets_its_own_token_cap_and_the_engine_keeps_its_budget():
    from proofgym.training.rollout import TrainerGenerator

    engine = _StandInVLLM()
    trainer = SimpleNamespace(use_vllm=True, vllm_generation=engine)
    ids, logprobs = TrainerGenerator(trainer)([[1, 2], [3]], 12)
    assert engine.budgets == [12] and [len(c) for c in ids] == [12, 12] and [len(lp) for lp in logprobs] == [12, 12]
    assert engine.max_completion_length == 256


class _SyncingVLLM(_StandInVLLM):
    """Also records when the trainer's weights are pushed to it (TRL's ``sync_weights``)."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[str] = []

    def sync_weights(self) -> None:
        self.events.append("sync")

    def generate(self, prompts: list[list[int]], images: Any, num_generations: int) -> tuple:
        self.events.append("generate")
        return super().generate(prompts, images, num_generations)


def test_a_curriculum_estimate_under_vllm_generates_with_the_trained_weights_synced_first():
    """vLLM starts with the checkpoint it loaded; the step-0 estimate ran before TRL's first sync, so it measured
    the base model instead of the SFT warm start GRPO starts from."""
    from proofgym.training.rollout import TrainerGenerator

    engine = _SyncingVLLM()
    trainer = SimpleNamespace(use_vllm=True, vllm_generation=engine, state=SimpleNamespace(global_step=0),
                              _last_loaded_step=-1)
    generate = TrainerGenerator(trainer)
    generate([[1, 2]], 4)
    generate([[3]], 4)  # the same step: the weights are already there
    assert engine.events == ["sync", "generate", "generate"] and trainer._last_loaded_step == 0
    trainer.state.global_step = 6  # a refresh after step 6: the weights have changed
    generate([[1]], 4)
    assert engine.events[3:] == ["sync", "generate"]


def test_host_memory_is_logged_beside_step_time():
    from proofgym.training.grpo_trainer import host_memory

    memory = host_memory()
    assert 0 < memory["memory/host_rss_gib"] <= memory["memory/host_peak_rss_gib"]


def test_freed_tensors_go_back_to_the_system_after_a_step():
    """What the GRPO process's RSS between steps was (docs/benchmarks.md): tensors freed under glibc's dynamic mmap
    threshold stay in its heap. 800 MB of 4 MB tensors, freed, read as resident until the trim."""
    import subprocess

    code = ("import torch\n"
            "from proofgym.training.callbacks import release_host_memory\n"
            "from proofgym.training.grpo_trainer import host_memory\n"
            "big = torch.ones(30 * 2**20, dtype=torch.uint8)\n"
            "del big  # freeing a 30 MB mapping raises glibc's mmap threshold: 4 MB tensors now come from the heap\n"
            "chunks = [torch.ones(4 * 2**20, dtype=torch.uint8) for _ in range(200)]\n"
            "last = chunks[-1]  # keeps the heap's top in use, so free() alone cannot shrink it\n"
            "del chunks\n"
            "before = host_memory()['memory/host_rss_gib']\n"
            "assert release_host_memory()\n"
            "print(before - host_memory()['memory/host_rss_gib'])\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert float(done.stdout.split()[-1]) > 0.5  # GiB handed back


# -- model_init_kwargs -----------------------------------------------------------------------------------
def test_model_init_kwargs_dtype_and_attn_implementation_are_honoured_when_proofgym_loads_the_model(tiny_model):
    import torch

    from proofgym.training.common import ResolvedModel

    resolved = ResolvedModel(str(tiny_model), None, "tiny")
    model, _ = load_model(resolved, init_kwargs={"dtype": "bfloat16", "attn_implementation": "eager"})
    assert next(model.parameters()).dtype == torch.bfloat16
    assert model.config._attn_implementation == "eager"
    model, _ = load_model(resolved, init_kwargs='{"torch_dtype": "float16"}')
    assert next(model.parameters()).dtype == torch.float16
    model, _ = load_model(resolved)
    assert next(model.parameters()).dtype == torch.float32
    with pytest.raises(TrainConfigError, match="not a torch dtype"):
        model_init_kwargs({"dtype": "bfloat17"})


def test_a_multi_process_run_drops_device_map(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert "device_map" not in model_init_kwargs({"device_map": "auto"})
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert model_init_kwargs({"device_map": "auto"})["device_map"] == "auto"


def test_the_gpu_configs_name_an_attention_implementation_proofgym_now_passes_on():
    import yaml

    for name in ("grpo_gpu.yaml", "sft_gpu.yaml"):
        data = yaml.safe_load((ROOT / "configs" / "train" / name).read_text())
        kwargs = model_init_kwargs(data.get("model_init_kwargs"))
        # fp32 storage, bf16 autocast: tests/test_train_precision.py says why
        assert str(kwargs["dtype"]) == "torch.float32", name
        assert kwargs.get("attn_implementation") == "sdpa", name


# -- a real 2-process run ----------------------------------------------------------------------------------
class RankVerdicts:
    """A verifier whose verdict depends on the training process it serves (pool workers inherit ``RANK``):
    rank 0's proofs are OK, rank 1's FAIL, so rank 0's repair episodes end at turn 1 and rank 1's run on."""

    def __init__(self, system: str = "coq", **kwargs: Any) -> None:
        self.verdict = Verdict.OK if os.environ.get("RANK", "0") == "0" else Verdict.FAIL

    def check(self, task: Task, proof: str) -> CheckResult:
        return CheckResult(self.verdict, messages=("by rank",))

    def close(self) -> None:
        pass


@pytest.mark.slow
def test_two_processes_under_accelerate_train_lora_grpo_with_repair_turns_and_rank_0_merges(tmp_path, tiny_model,
                                                                                           tiny_suite):
    import subprocess
    import sys

    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", "2", "--cpu", "-m",
           "proofgym.training.grpo", "--model_name_or_path", str(tiny_model), "--suite", str(tiny_suite),
           "--output_dir", str(out), "--report_to", "none", "--max_steps", "1", "--per_device_train_batch_size", "2",
           "--num_generations", "2", "--max_completion_length", "12", "--max_turns", "3", "--use_peft", "true",
           "--checkpoint_eval_at_end", "false", "--save_strategy", "no", "--torch_threads", "1",
           "--verifier_workers", "1", "--verifier_factory", "tests.test_train_distributed:RankVerdicts",
           "--heldout_fraction", "0"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert (out / "adapter_config.json").exists() and (out / "merged" / "model.safetensors").exists()
    result = json.loads((out / "train_result.json").read_text())
    assert result["global_step"] == 1 and result["final_checkpoint"] == str(out / "merged")


# -- GRPO with the curriculum and a refresh under torchrun (gloo) ----------------------------------------------
class RecordingHashVerifier:
    """A fake verifier for the mechanics of a multi-process run: OK when the proof's CRC-32 is odd (a verdict
    that varies within a group, the same on every process), and one line ``<training rank> <task id>`` per check
    in ``$PROOFGYM_FAKE_CHECK_LOG/<pid>.log``, so the test counts every check."""

    def __init__(self, system: str = "coq", **kwargs: Any) -> None:
        self.log = Path(os.environ["PROOFGYM_FAKE_CHECK_LOG"]) / f"{os.getpid()}.log"
        self.rank = os.environ.get("RANK", "0")

    def check(self, task: Task, proof: str) -> CheckResult:
        import zlib

        with self.log.open("a", encoding="utf-8") as fh:
            fh.write(f"{self.rank} {task.id}\n")
        return CheckResult(Verdict.OK if zlib.crc32(proof.encode()) % 2 else Verdict.FAIL)

    def close(self) -> None:
        pass


def _grpo_rank(argv: list[str]) -> None:
    """One rank: GRPO's own entry, plus this rank's weights before/after training and its writes under the run
    dir (an audit hook), in ``$PROOFGYM_TEST_RECORD/rank<R>.json``."""
    import proofgym.training.grpo_trainer as grpo_trainer
    from proofgym.training.grpo import main as grpo_main

    out = os.path.realpath(argv[argv.index("--output_dir") + 1])
    writes: set[str] = set()

    def audit(event: str, args: tuple) -> None:
        if event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
            path = os.path.realpath(os.fsdecode(args[0]))
            mode, flags = args[1] or "", args[2] or 0
            if path.startswith(out) and (any(c in mode for c in "wax+") or flags & (os.O_WRONLY | os.O_RDWR)):
                writes.add(os.path.relpath(path, out))

    digests: dict[str, str] = {}

    class Recording(grpo_trainer.ProofGRPOTrainer):
        def train(self, *args: Any, **kwargs: Any) -> Any:
            digests["start"] = weights_digest(self.model)
            done = super().train(*args, **kwargs)
            digests["end"] = weights_digest(self.model)
            return done

    grpo_trainer.ProofGRPOTrainer = Recording  # train_grpo imports it from the module when it runs
    sys.addaudithook(audit)
    result = grpo_main(argv)
    Path(os.environ["PROOFGYM_TEST_RECORD"], f"rank{os.environ['RANK']}.json").write_text(json.dumps(
        {"writes": sorted(writes), "global_step": result.global_step, "plan": result.plan,
         "curriculum_steps": [h["step"] for h in result.curriculum], **digests}))


@pytest.mark.slow
def test_two_ranks_of_grpo_with_a_curriculum_refresh_follow_the_plan_and_stay_identical(tmp_path, tiny_model,
                                                                                       tiny_suite):
    import subprocess

    out, checks, record = tmp_path / "run", tmp_path / "checks", tmp_path / "record"
    checks.mkdir()
    record.mkdir()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "tests.test_train_distributed", "--model_name_or_path", str(tiny_model), "--suite", str(tiny_suite),
           "--output_dir", str(out), "--report_to", "none", "--num_train_epochs", "1",
           "--per_device_train_batch_size", "2", "--num_generations", "2", "--max_completion_length", "8",
           "--learning_rate", "1e-3", "--curriculum", "true", "--curriculum_k", "2", "--curriculum_refreshes", "1",
           "--curriculum_batch_size", "6", "--heldout_fraction", "0", "--checkpoint_eval_at_end", "false",
           "--save_strategy", "no", "--torch_threads", "1", "--verifier_workers", "1", "--verdict_cache_entries",
           "0", "--prompt_context_chars", "60", "--verifier_factory",
           "tests.test_train_distributed:RecordingHashVerifier"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "PROOFGYM_FAKE_CHECK_LOG": str(checks),
           "PROOFGYM_TEST_RECORD": str(record)}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    r0, r1 = (json.loads((record / f"rank{r}.json").read_text()) for r in (0, 1))
    # 2 ranks x 2 per device = 4 completions = 2 prompts per step; 6 tasks: 3 steps, the refresh after step 2
    assert r0["plan"]["total_steps"] == r0["global_step"] == r1["global_step"] == 3
    assert r0["curriculum_steps"] == r1["curriculum_steps"] == [0, 2] and r0["plan"]["refresh_at"] == [2]
    assert r0["start"] == r1["start"] and r0["end"] == r1["end"] and r0["end"] != r0["start"]
    # every completion scored exactly once: 3 steps x 4 completions, and 2 estimates x 6 tasks x k=2
    lines = [line.split() for p in checks.iterdir() for line in p.read_text().splitlines()]
    assert len(lines) == 3 * 4 + 2 * 6 * 2
    assert sum(r == "1" for r, _ in lines) == len(lines) // 2  # each rank checked its own half
    assert r1["writes"] == [] and "train_result.json" in r0["writes"]


if __name__ == "__main__":  # one rank of the torchrun test above
    _grpo_rank(sys.argv[1:])
