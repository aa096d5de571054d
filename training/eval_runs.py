"""Run directories of ``proofgym eval``: the configuration, the results file, names, identity, resumption.

A run dir holds ``results.jsonl`` (one row per finished episode, appended as it finishes),
``config.json`` (the configuration, the run's identity and its segments) and ``summary.json``.
A rerun with the same ``--out`` (or ``--resume``, which finds the newest run dir of the same
command by its identity) continues it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proofgym.agents.base import Agent
from proofgym.agents.strategies.base import Strategy
from proofgym.envs.errors import ProofgymError

AGENT_NAMES = ("reference", "scripted", "openai", "anthropic", "local")


# -- results file --------------------------------------------------------------------------------------
def ensure_writable(path: Path, min_free_bytes: int = 10 * 1024 * 1024) -> None:
    """Fail before any work starts if results cannot be written."""
    parent = path.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ProofgymError(f"cannot create results dir {parent}: {exc.strerror}; pass --out somewhere writable") from None
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise ProofgymError(f"results path {path} is not writable; pass --out somewhere writable")
    free = shutil.disk_usage(parent).free
    if free < min_free_bytes:
        raise ProofgymError(f"only {free // 1024} KiB free at {parent}; free some space or pass --out elsewhere")


def read_results(path: Path) -> list[dict[str, Any]]:
    """Results already written; a torn last line (killed mid-write) is ignored."""
    path = Path(path)
    if not path.exists():
        return []
    rows = []
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(row, dict) and "task_id" in row and "sample" in row and "verdict" in row:
                rows.append(row)
    return rows


def repair_tail(path: Path) -> None:
    """Make sure the file ends with a newline so an append never glues onto a torn line."""
    if path.exists() and path.stat().st_size:
        with path.open("rb+") as fh:
            fh.seek(-1, os.SEEK_END)
            if fh.read(1) != b"\n":
                fh.write(b"\n")


# -- configuration, run directories, the whole run -------------------------------------------------------
@dataclass
class EvalConfig:
    """Everything ``proofgym eval`` takes (also from YAML with ``--config``; flags override the file)."""

    suite: str = field(default="", metadata={"help": "a built suite name (coq-stdlib) or a .jsonl path"})
    agent: str = field(default="reference", metadata={"help": f"one of {', '.join(AGENT_NAMES)}"})
    model: str = field(default="", metadata={"help": "model name (API) or checkpoint dir / cached hub id (local)"})
    base_url: str | None = field(default=None, metadata={"help": "OpenAI-compatible server, e.g. "
                                                         "http://127.0.0.1:8000/v1"})
    api_key: str | None = field(default=None, repr=False, metadata={"help": "API key (else OPENAI_API_KEY / "
                                                                    "ANTHROPIC_API_KEY)", "secret": True})
    strategy: str = field(default="plain", metadata={"help": "plain or selene (or another registered strategy)"})
    strategy_options: dict[str, Any] = field(default_factory=dict, metadata={"help": "options of the strategy"})
    k: int = field(default=1, metadata={"help": "pass@k / ACC#k to report"})
    n: int | None = field(default=None, metadata={"help": "samples per task (default k); pass@j for j <= n"})
    temperature: float | None = field(default=None, metadata={"help": "default 0 when n == 1, else 0.5 (Selene)"})
    top_p: float = field(default=0.95, metadata={"help": "nucleus sampling (Selene: 0.95)"})
    max_tokens: int = field(default=2048, metadata={"help": "tokens per reply (Selene: 2,048)"})
    seed: int | None = field(default=None, metadata={"help": "generation seed (sent as seed + sample)"})
    concurrency: int = field(default=8, metadata={"help": "API requests in flight at once"})
    request_timeout: float = field(default=120.0, metadata={"help": "seconds per API request"})
    max_retries: int = field(default=5, metadata={"help": "retries on 429/5xx/timeouts per request"})
    batch_size: int = field(default=16, metadata={"help": "requests per generation batch"})
    workers: int = field(default=1, metadata={"help": "parallel verifier processes (per node with --engine ray)"})
    engine: str = field(default="local", metadata={"help": "verifier pool: local (worker processes here) or ray "
                                                   "(one actor per node and system; needs the ray extra)"})
    limit: int = field(default=0, metadata={"help": "only the first N tasks"})
    out: str | None = field(default=None, metadata={"help": "run dir, or a results .jsonl (summary.json goes next "
                                                    "to it)"})
    runs_dir: str = field(default="runs", metadata={"help": "where default run dirs go"})
    resume: bool = field(default=False, metadata={"help": "continue the latest matching run in runs_dir"})
    price_in: float | None = field(default=None, metadata={"help": "USD per million input tokens"})
    price_out: float | None = field(default=None, metadata={"help": "USD per million output tokens"})
    device: str = field(default="auto", metadata={"help": "local agent: auto, cpu, cuda, cuda:1..."})
    dtype: str = field(default="auto", metadata={"help": "local agent: auto, float32, bfloat16, float16"})
    threads: int | None = field(default=None, metadata={"help": "local agent: CPU threads for torch"})
    script: str | None = field(default=None, metadata={"help": "scripted agent: JSON of task id -> reply(s)"})
    audit: str | None = field(default=None, metadata={"help": "Coq audit: always, sample, never"})
    verifier: str | None = field(default=None, metadata={"help": "module:factory of a custom verifier"})
    wandb: bool = field(default=False, metadata={"help": "log to Weights & Biases (offline unless configured)"})
    wandb_project: str = field(default="proofgym", metadata={"help": "W&B project"})
    wandb_mode: str | None = field(default=None, metadata={"help": "online, offline or disabled"})

    @property
    def samples(self) -> int:
        return self.n or self.k

    def sampling_temperature(self) -> float:
        if self.temperature is not None:
            return self.temperature
        return 0.0 if self.samples == 1 else 0.5

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], *, source: str = "config") -> EvalConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ProofgymError(f"{source}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(names))}")
        return cls(**dict(data))


def load_config_file(path: str | Path) -> dict[str, Any]:
    """An eval config from YAML (``configs/eval/*.yaml``)."""
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ProofgymError(f"cannot read the config {path}: {exc}") from None
    if not isinstance(data, dict):
        raise ProofgymError(f"{path}: an eval config is a mapping of option -> value")
    return data


def slug(text: str, limit: int = 60) -> str:
    """``text`` as a piece of a run name (eval's run dirs, training's run names).

    A suite or model file gives its stem (``/x/coq-stdlib.jsonl`` -> ``coq-stdlib``, ``m.gguf`` -> ``m``),
    an existing path its last part; anything else, a hub id included, keeps all of it
    (``org/model`` -> ``org-model``: two orgs' models of one name stay apart).
    """
    path = Path(text)
    if path.suffix in (".jsonl", ".json", ".gguf"):
        text = path.stem
    elif (os.sep in text or "/" in text) and path.exists():
        text = path.name
    return re.sub(r"[^\w.@+-]+", "-", text).strip("-")[:limit] or "-"


def suite_name(suite: str) -> str:
    return Path(str(suite)).stem if str(suite).endswith((".jsonl", ".json")) else str(suite)


def run_prefix(cfg: EvalConfig) -> str:
    """``<suite>__<agent>[__<model>][__<strategy>]__k<k>`` (then ``__<time>``)."""
    parts = [slug(suite_name(cfg.suite)), cfg.agent]
    if cfg.model:
        parts.append(slug(cfg.model))
    if cfg.strategy != "plain":
        parts.append(slug(cfg.strategy))
    parts.append(f"k{cfg.k}" + (f"n{cfg.n}" if cfg.n and cfg.n != cfg.k else ""))
    return "__".join(parts)


def file_sha256(path: Path) -> str:
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def run_identity(cfg: EvalConfig, suite_sha: str, agent: Agent, strategy: Strategy) -> dict[str, Any]:
    """What must match for a run dir to be resumed by a command (workers, limit, k and n may change)."""
    described = agent.describe()
    return {"suite_sha256": suite_sha, "agent": cfg.agent, "model": described.get("model", cfg.model),
            "strategy": strategy.describe(), "sampling": described.get("sampling")}


@dataclass
class RunPaths:
    """Where one evaluation writes: its folder, the results JSONL, config.json and summary.json."""

    run_dir: Path
    results: Path
    config: Path
    summary: Path

    @classmethod
    def for_out(cls, out: str | Path) -> RunPaths:
        out = Path(out)
        if out.suffix == ".jsonl":
            return cls(out.parent, out, out.parent / "config.json", out.parent / "summary.json")
        return cls(out, out / "results.jsonl", out / "config.json", out / "summary.json")


def _named_like(name: str, cfg: EvalConfig) -> bool:
    """Whether run dir ``name`` has this command's run prefix, the model's part aside.

    Before the one :func:`slug`, a model file kept its suffix in eval's dir names (``m.gguf``, now
    ``m``): such a run is still found, and the identity in its config.json (which names the model)
    decides whether it is the same command.
    """
    if name.startswith(run_prefix(cfg) + "__"):
        return True
    if not cfg.model:
        return False
    parts, want = name.split("__")[:-1], run_prefix(cfg).split("__")
    return len(parts) == len(want) and parts[:2] == want[:2] and parts[3:] == want[3:]


def find_resumable(cfg: EvalConfig, identity: Mapping[str, Any]) -> Path | None:
    """The newest run dir under ``runs_dir`` made by the same command (same identity), if any."""
    root = Path(cfg.runs_dir)
    if not root.is_dir():
        return None
    # newest first by the start time that ends the name (an old-style name sorts apart from a new one otherwise)
    named = [p for p in root.iterdir() if p.is_dir() and _named_like(p.name, cfg)]
    for candidate in sorted(named, key=lambda p: p.name.rsplit("__", 1)[-1], reverse=True):
        try:
            stored = json.loads((candidate / "config.json").read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue
        if stored.get("identity") == json.loads(json.dumps(identity)):
            return candidate
    return None


def read_json_object(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``; ``None`` when it is missing, unreadable, or not an object."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def write_json(path: Path, data: Any) -> None:
    """Write ``data`` as JSON atomically (a killed run never leaves half a file)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def version() -> str:
    """proofgym's installed version, for config.json."""
    try:
        from importlib.metadata import version

        return version("proofgym")
    except Exception:  # noqa: BLE001 - not installed as a distribution
        return "unknown"


# -- a checkpoint's own prompt and sampling settings ------------------------------------------------------
CHECKPOINT_SETTINGS = "proofgym_eval_settings.json"
"""The file a training run writes beside every checkpoint's weights: how that checkpoint was prompted and sampled.

A checkpoint scored with another prompt than the one it was trained on scores differently (issue 27: the
same warm start, same 16 tasks and seed, 14.1% pass@1 with eval's 2,000 characters of context against 21.9%
with the run's 200), so ``proofgym eval --agent local --model CHECKPOINT`` takes these as its defaults.
The chat template travels with the tokenizer files the checkpoint already holds.
"""

SETTING_FLAGS = {"strategy": "--strategy", "max_tokens": "--max-tokens", "temperature": "--temperature",
                 "top_p": "--top-p", "seed": "--seed", "batch_size": "--batch-size"}
"""The EvalConfig fields a checkpoint's settings give defaults for, and the flag that overrides each
(``context_chars`` is a strategy option: ``--set context_chars=N`` overrides it)."""


def checkpoint_settings(cfg: Any) -> dict[str, Any]:
    """The settings of a training config (any ``ProofgymArguments``) that its checkpoints are evaluated with.

    These are the run's own checkpoint evaluation's settings (the same prompt as training's, through
    ``prompt_context_chars``); ``training`` records how the run itself sampled (GRPO's temperature and
    completion length, expert iteration's), for the record only.
    """
    training = {name: getattr(cfg, name) for name in ("temperature", "top_p", "max_completion_length",
                                                      "sample_temperature", "sample_top_p", "sample_max_tokens")
                if isinstance(getattr(cfg, name, None), (int, float))}
    settings: dict[str, Any] = {
        "format": 1, "run_name": getattr(cfg, "run_name", None), "strategy": "plain",
        "strategy_options": {"context_chars": int(cfg.prompt_context_chars)},
        "max_tokens": int(cfg.checkpoint_eval_max_tokens), "top_p": EvalConfig.top_p,
        "seed": getattr(cfg, "seed", None), "batch_size": int(cfg.checkpoint_eval_batch_size), "training": training}
    if cfg.checkpoint_eval_temperature is not None:  # else eval's own rule (0 for one sample, else 0.5) applies
        settings["temperature"] = float(cfg.checkpoint_eval_temperature)
    return settings


def write_checkpoint_settings(directory: str | Path, settings: Mapping[str, Any]) -> Path:
    """Write ``settings`` beside a checkpoint's weights (``directory`` must exist)."""
    path = Path(directory) / CHECKPOINT_SETTINGS
    write_json(path, dict(settings))
    return path


def read_checkpoint_settings(model: str | Path) -> tuple[dict[str, Any], Path] | None:
    """The settings saved with a checkpoint dir (or the dir of a ``.gguf`` file), and their file; else None."""
    path = Path(model).expanduser()
    folder = path.parent if path.is_file() else path
    found = folder / CHECKPOINT_SETTINGS
    data = read_json_object(found) if found.is_file() else None
    return (data, found) if data is not None else None


def apply_checkpoint_settings(values: Mapping[str, Any], explicit: Mapping[str, Any],
                              saved: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """``values`` (an EvalConfig mapping) with the checkpoint's ``saved`` settings as defaults.

    ``explicit`` holds what the user gave (flags, a config file, ``--set`` options): those win, and
    each one that differs from the saved value gets a note. Returns the values and the notes.
    """
    merged = dict(values)
    notes: list[str] = []
    for name, flag in SETTING_FLAGS.items():
        if name not in saved:
            continue
        if name in explicit:
            if explicit[name] != saved[name]:
                notes.append(f"{flag} {explicit[name]} overrides the checkpoint's {name} {saved[name]!r}")
        else:
            merged[name] = saved[name]
    options = dict(merged.get("strategy_options") or {})
    given = dict(explicit.get("strategy_options") or {})
    if merged.get("strategy") == saved.get("strategy"):  # another strategy's options are its own
        for key, value in (saved.get("strategy_options") or {}).items():
            if key in given:
                if given[key] != value:
                    notes.append(f"--set {key}={given[key]} overrides the checkpoint's {key} {value!r}")
            else:
                options[key] = value
    merged["strategy_options"] = options
    return merged, notes
