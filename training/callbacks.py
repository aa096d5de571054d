"""Trainer callbacks: checkpoint evaluation on the held-out split, and Ctrl-C that saves a checkpoint.

:class:`CheckpointEvalCallback` evaluates saved checkpoints with the same engine and agent as
``proofgym eval --agent local --model CHECKPOINT`` (:func:`proofgym.training.evaluate.evaluate`):
every ``every_steps`` steps it makes the trainer save a checkpoint and evaluates it; at the
start (optional) it saves and evaluates the initial model; the training script evaluates the
final model with :meth:`CheckpointEvalCallback.evaluate_checkpoint`. Each evaluation writes an
eval run dir (``<output_dir>/checkpoint_evals/step-N``) and logs pass@k per category to the
training's W&B run (``heldout/proof/pass@1``, ``heldout/category/P1/pass@1``...).

:class:`GracefulInterrupt` turns the first Ctrl-C into "save a checkpoint after this step and
stop"; a second Ctrl-C interrupts at once (the training script then saves what it has).
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from proofgym.envs.errors import ProofgymError


def announce(message: str) -> None:
    """A progress line on stderr, ``[proofgym] ...``."""
    print(f"[proofgym] {message}", file=sys.stderr, flush=True)


class CheckpointEvalCallback(TrainerCallback):
    """Evaluate checkpoints on a held-out suite and log pass@k per category to the same W&B run.

    Args:
        suite_path: The held-out tasks (JSONL).
        every_steps: Evaluate every N optimizer steps (0: only when asked, e.g. at the end).
        on_start: Evaluate the initial model too (saved as ``checkpoint-0``).
        k: pass@k to report.
        n: Samples per task (default ``k``).
        workers: Verifier processes of the evaluation.
        engine: The evaluation's verifier pool engine (``local`` or ``ray``), as training's.
        max_tokens: Tokens per reply.
        temperature: Sampling temperature (default: 0 for one sample, else 0.5).
        batch_size: Prompts generated together.
        context_chars: Task context shown in the prompt (as in training).
        audit: Coq audit mode (``None``: the verifier's default).
        device: Where the evaluated checkpoint runs (``auto``: CUDA when present).
        seed: Generation seed.
        out_dir: Where eval run dirs go (``<out_dir>/checkpoint_evals/step-N``; default: the trainer's output dir).
    """

    def __init__(self, suite_path: str | Path, *, every_steps: int = 0, on_start: bool = False, k: int = 1,
                 n: int | None = None, workers: int = 2, engine: str = "local", max_tokens: int = 256, temperature: float | None = None,
                 batch_size: int = 8, context_chars: int = 2000, audit: str | None = None, device: str = "auto",
                 seed: int | None = None, out_dir: str | Path | None = None,
                 announce: Callable[[str], None] = announce) -> None:
        self.suite_path = Path(suite_path)
        self.every_steps = int(every_steps)
        self.on_start = on_start
        self.options = dict(k=k, n=n, workers=workers, engine=engine, max_tokens=max_tokens, temperature=temperature,
                            batch_size=batch_size, audit=audit, device=device, seed=seed,
                            strategy_options={"context_chars": context_chars})
        self.announce = announce
        self.out_dir = Path(out_dir) if out_dir is not None else None
        self.history: list[dict[str, Any]] = []
        self._wanted: set[int] = set()
        self._done: set[int] = set()
        self._report_to: list[str] = []

    # -- trainer events ------------------------------------------------------------------------------
    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, processing_class: Any = None,
                       **kwargs: Any) -> None:
        self._report_to = list(args.report_to or [])
        self.out_dir = self.out_dir or Path(args.output_dir)
        if self.on_start and state.global_step == 0 and state.is_world_process_zero:
            path = Path(args.output_dir) / "checkpoint-0"
            save_model(model, processing_class, path)
            self.evaluate_checkpoint(path, 0)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.every_steps and state.global_step % self.every_steps == 0:
            self._wanted.add(state.global_step)
            control.should_save = True

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        step = state.global_step
        if step in self._wanted and step not in self._done and state.is_world_process_zero:
            path = Path(args.output_dir) / f"checkpoint-{step}"
            if (path / "config.json").exists() or (path / "adapter_config.json").exists():
                self.evaluate_checkpoint(path, step)

    # -- evaluation -----------------------------------------------------------------------------------
    def evaluate_checkpoint(self, checkpoint: str | Path, step: int) -> dict[str, Any]:
        """Evaluate ``checkpoint`` on the held-out suite; log to W&B (when the run has it) and remember it."""
        from proofgym.training.evaluate import EvalConfig, evaluate

        checkpoint = Path(checkpoint)
        root = self.out_dir or checkpoint.parent
        out = root / "checkpoint_evals" / f"step-{step}"
        self.announce(f"evaluating {checkpoint} on {self.suite_path.name} (step {step}) ...")
        start = time.monotonic()
        cfg = EvalConfig(suite=str(self.suite_path), agent="local", model=str(checkpoint), out=str(out),
                         **self.options)
        try:
            summary, paths = evaluate(cfg, progress=True)
        except ProofgymError as exc:
            self.announce(f"checkpoint evaluation of step {step} failed: {exc}")
            record = {"step": step, "checkpoint": str(checkpoint), "error": str(exc)}
            self.history.append(record)
            self._done.add(step)
            return record
        metrics = {f"heldout/{name}": value for name, value in summary.metrics().items()}
        record = {"step": step, "checkpoint": str(checkpoint), "run_dir": str(paths.run_dir),
                  "per_category": summary.per_category, "verdicts": dict(summary.verdicts),
                  "harness_failures": summary.harness_failures, "metrics": metrics,
                  "seconds": round(time.monotonic() - start, 1)}
        self.history.append(record)
        self._done.add(step)
        self._log_wandb(step, metrics)
        (root / "checkpoint_evals.json").write_text(json.dumps(self.history, indent=2) + "\n",
                                                                   encoding="utf-8")
        k = self.options["k"]
        cats = ", ".join(f"{cat} {100 * s.get(f'pass@{k}', 0.0):.1f}%" for cat, s in summary.per_category.items())
        self.announce(f"step {step}: pass@{k} {cats}; verdicts {dict(summary.verdicts)} "
                      f"({record['seconds']:.0f} s, {paths.run_dir})")
        return record

    def _log_wandb(self, step: int, metrics: dict[str, float]) -> None:
        if "wandb" not in self._report_to:
            return
        try:
            import wandb
        except ImportError:
            return
        if wandb.run is None:
            return
        k = self.options["k"]
        rows = [[r["step"], cat, s.get("pass@1", 0.0), s.get(f"pass@{k}", 0.0), s.get("n", 0)]
                for r in self.history if "per_category" in r for cat, s in r["per_category"].items()]
        table = wandb.Table(columns=["step", "category", "pass@1", f"pass@{k}", "tasks"], data=rows)
        wandb.log({**metrics, "heldout/pass_at_k": table, "train/global_step": step})


class MetricsPrinter(TrainerCallback):
    """One line per logging step with the proof metrics, for logs that are not a terminal."""

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if not logs or not state.is_world_process_zero or "loss" not in logs:
            return

        def num(key: str, fmt: str = ".3f", scale: float = 1.0) -> str | None:
            value = logs.get(key)
            return None if not isinstance(value, (int, float)) else f"{scale * value:{fmt}}"

        parts = [f"step {state.global_step}/{state.max_steps}"]
        for key, label, fmt, scale, unit in (
                ("loss", "loss", ".4f", 1.0, ""), ("reward", "reward", ".3f", 1.0, ""),
                ("proof/ok_rate", "ok", ".0f", 100.0, "%"), ("proof/cheat_rate", "cheat", ".0f", 100.0, "%"),
                ("verifier/error_rate", "error", ".0f", 100.0, "%"),
                ("verifier/timeout_rate", "timeout", ".0f", 100.0, "%"),
                ("verifier/harness_failures", "harness failures", ".0f", 1.0, ""),
                ("step_time", "s/step", ".0f", 1.0, "")):
            text = num(key, fmt, scale)
            if text is not None:
                parts.append(f"{text} {label}" if label == "s/step" else f"{label} {text}{unit}")
        announce(" | ".join(parts))


def save_model(model: Any, processing_class: Any, path: str | Path) -> Path:
    """``save_pretrained`` of a model (unwrapped) and its tokenizer: a checkpoint ``proofgym eval`` loads."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    inner = getattr(model, "module", model)
    inner.save_pretrained(path)
    if processing_class is not None:
        processing_class.save_pretrained(path)
    return path


class GracefulInterrupt(TrainerCallback):
    """First Ctrl-C: save a checkpoint at the end of the current step and stop. Second: interrupt now."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: Any = None

    def install(self) -> GracefulInterrupt:
        """Take over SIGINT (main thread only; elsewhere this does nothing)."""
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def uninstall(self) -> None:
        if self._previous is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        announce("Ctrl-C: saving a checkpoint after this step, then stopping (Ctrl-C again to stop at once)")

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.requested:
            control.should_save = True
            control.should_training_stop = True
