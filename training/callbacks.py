"""Trainer callbacks: checkpoint evaluation, Ctrl-C that saves a checkpoint, warnings, per-task pass rates.

:class:`CheckpointEvalCallback` evaluates saved checkpoints with the same engine and agent as
``proofgym eval --agent local --model CHECKPOINT`` (:func:`proofgym.training.evaluate.evaluate`):
every ``every_steps`` steps it makes the trainer save a checkpoint and evaluates it; at the
start (optional) it saves and evaluates the initial model. Those evaluations run in a process of
their own that no training rank waits for (:mod:`proofgym.training.checkpoint_eval`); the training
script waits for them once training is over (:meth:`CheckpointEvalCallback.wait_pending`) and
evaluates the final model with :meth:`CheckpointEvalCallback.evaluate_checkpoint`. Each evaluation writes an
eval run dir (``<output_dir>/checkpoint_evals/step-N``) and logs pass@k per category to the
training's W&B run (``heldout/proof/pass@1``, ``heldout/category/P1/pass@1``...).

:class:`GracefulInterrupt` turns the first Ctrl-C into "save a checkpoint after this step and
stop"; a second Ctrl-C interrupts at once (the training script then saves what it has).

:class:`TrainingHealthCallback` warns when a GRPO step cannot teach: every group had zero
reward variance, or most completions were cut at ``max_completion_length``.

:class:`TaskPassRateCallback` records each training task's pass rate over training (from the
reward's verdicts, and from the curriculum's estimates when there is one):
``<output_dir>/task_pass_rates.jsonl`` while training runs; at the end, a W&B table
(``task_pass_rate``), a W&B line plot (``charts/task_pass_rate``) and
``<output_dir>/task_pass_rates.png``.
"""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from proofgym.envs.errors import ProofgymError


def announce(message: str) -> None:
    """A progress line on stderr, ``[proofgym] ...``."""
    print(f"[proofgym] {message}", file=sys.stderr, flush=True)


def visible_gpus() -> int:
    """GPUs this process sees (0 without CUDA, or without torch)."""
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


#: Environment variables of a ``torchrun``/``accelerate`` rank that an evaluation process must not inherit (it
#: is not a member of the training's process group).
RANK_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                  "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR", "MASTER_PORT",
                  "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
                  "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_ERROR_FILE", "ACCELERATE_PROCESS_ID")


@dataclass
class PendingEvaluation:
    """A checkpoint evaluation running in its own process (see :class:`CheckpointEvalCallback`)."""

    step: int
    checkpoint: Path
    process: subprocess.Popen
    record: Path
    log: Path
    started: float
    snapshot: Path | None = None
    """The snapshot it evaluates (:func:`~proofgym.training.checkpoint_eval.snapshot_checkpoint`), deleted once
    its record has landed."""


class CheckpointEvalCallback(TrainerCallback):
    """Evaluate checkpoints on a held-out suite and log pass@k per category to the same W&B run.

    During training (the step-0 model and every ``every_steps`` checkpoint) an evaluation runs in its own
    process (``python -m proofgym.training.checkpoint_eval``), started by the main process right after the
    save and awaited by no rank: training goes on while it runs, and its result is logged (W&B,
    ``checkpoint_evals.json``) at the first step after it lands, or at the latest when the training script
    calls :meth:`wait_pending` at the end. Each process writes ``checkpoint_evals/step-N.log``. It evaluates a
    hard-linked snapshot of the checkpoint (``checkpoint_evals/snapshots/step-N``, deleted once its record has
    landed), so ``save_total_limit`` may rotate the checkpoint out while it runs.
    :meth:`evaluate_checkpoint` evaluates in this process (the final model, once training is over).

    Args:
        suite_path: The held-out tasks (JSONL).
        every_steps: Evaluate every N optimizer steps (0: only when asked, e.g. at the end).
        on_start: Evaluate the initial model too (step 0). It is evaluated where it already is on disk
            (``start_checkpoint``), never saved again; without one it is saved as ``checkpoint-0``.
        start_checkpoint: The initial model's checkpoint dir or ``.gguf`` file: what the trainer
            loaded (or the warm start), unchanged until the first step.
        k: pass@k to report.
        n: Samples per task (default ``k``).
        workers: Verifier processes of the evaluation.
        engine: The evaluation's verifier pool engine (``local`` or ``ray``), as training's.
        max_tokens: Tokens per reply.
        temperature: Sampling temperature (default: 0 for one sample, else 0.5).
        batch_size: Prompts generated together.
        context_chars: Task context shown in the prompt (as in training).
        audit: Coq audit mode (``None``: the verifier's default).
        device: Where the evaluated checkpoint runs: ``auto``, ``cpu`` or ``cuda:N``. An evaluation process
            with ``auto`` takes a GPU that no training rank of this node uses, when there is one, else shares
            one and says so (:func:`~proofgym.training.checkpoint_eval.place_evaluation`); in this process
            (:meth:`evaluate_checkpoint`) ``auto`` is CUDA when present.
        seed: Generation seed.
        out_dir: Where eval run dirs go (``<out_dir>/checkpoint_evals/step-N``; default: the trainer's output dir).
        report_to: Where results are logged (``wandb``...) when no trainer says so (the trainer's
            ``report_to`` wins when training starts).
        verifier: ``module:factory`` of a custom verifier for the evaluation (``None``: the real one).
        background: Evaluate during training in a process of its own (default); ``False`` evaluates in
            the main process, which holds the other ranks at their next collective until it is done.
    """

    def __init__(self, suite_path: str | Path, *, every_steps: int = 0, on_start: bool = False, k: int = 1,
                 n: int | None = None, workers: int = 2, engine: str = "local", max_tokens: int = 256, temperature: float | None = None,
                 batch_size: int = 8, context_chars: int = 2000, audit: str | None = None, device: str = "auto",
                 seed: int | None = None, out_dir: str | Path | None = None,
                 report_to: Sequence[str] | str | None = None, announce: Callable[[str], None] = announce,
                 start_checkpoint: str | Path | None = None, verifier: str | None = None,
                 background: bool = True) -> None:
        from proofgym.training.checkpoint_eval import check_eval_device

        check_eval_device(device)
        self.suite_path = Path(suite_path)
        self.start_checkpoint = Path(start_checkpoint) if start_checkpoint is not None else None
        self.every_steps = int(every_steps)
        self.on_start = on_start
        self.options: dict[str, Any] = dict(k=k, n=n, workers=workers, engine=engine, max_tokens=max_tokens, temperature=temperature,
                            batch_size=batch_size, audit=audit, device=device, seed=seed, verifier=verifier,
                            strategy_options={"context_chars": context_chars})
        self.announce = announce
        self.out_dir = Path(out_dir) if out_dir is not None else None
        self.background = background
        self.history: list[dict[str, Any]] = []
        self.pending: list[PendingEvaluation] = []
        self._wanted: set[int] = set()
        self._done: set[int] = set()
        self._report_to: list[str] = [report_to] if isinstance(report_to, str) else list(report_to or [])

    # -- trainer events ------------------------------------------------------------------------------
    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, processing_class: Any = None,
                       **kwargs: Any) -> None:
        self._report_to = list(args.report_to or [])
        self.out_dir = self.out_dir or Path(args.output_dir)
        if state.is_world_process_zero:  # snapshots left by a run that crashed: nothing evaluates them now
            self.remove_stale_snapshots()
        if state.global_step > 0:  # resumed from a checkpoint: the evaluations made before it are the run's too
            self.restore_history(state.global_step)
        if self.on_start and state.global_step == 0 and state.is_world_process_zero:
            path = self.start_checkpoint
            if path is None:  # nothing on disk holds the initial weights: save them once
                path = save_model(model, processing_class, Path(args.output_dir) / "checkpoint-0")
            self._evaluate_during_training(path, 0)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.every_steps and state.global_step % self.every_steps == 0:
            self._wanted.add(state.global_step)
            control.should_save = True
        if state.is_world_process_zero and self.pending:
            self.collect()

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        step = state.global_step
        if step in self._wanted and step not in self._done and state.is_world_process_zero:
            path = Path(args.output_dir) / f"checkpoint-{step}"
            if (path / "config.json").exists() or (path / "adapter_config.json").exists():
                self._evaluate_during_training(path, step)

    def _evaluate_during_training(self, checkpoint: Path, step: int) -> None:
        if self.background:
            self.start_evaluation(checkpoint, step)
        else:
            self.evaluate_checkpoint(checkpoint, step)

    def restore_history(self, step: int) -> list[dict[str, Any]]:
        """The records of ``checkpoint_evals.json`` up to ``step`` (a run resumed there), kept as this run's
        history, so that the file and the report go on from them instead of starting again."""
        path = (self.out_dir or Path(".")) / "checkpoint_evals.json"
        try:
            records = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return []
        kept = [r for r in records if isinstance(r, dict) and isinstance(r.get("step"), int) and r["step"] <= step]
        self.history = sorted(kept, key=lambda r: r["step"])
        self._done.update(r["step"] for r in kept)
        if kept:
            self.announce(f"resumed at step {step}: {len(kept)} earlier checkpoint evaluation(s) kept from {path}")
        return kept

    def remove_stale_snapshots(self) -> list[Path]:
        """Delete the snapshots in ``checkpoint_evals/snapshots`` that no pending evaluation reads (a crashed or
        killed run's); returns them."""
        folder = (self.out_dir or Path(".")) / "checkpoint_evals" / "snapshots"
        reading = {p.snapshot for p in self.pending}
        stale = [path for path in sorted(folder.glob("step-*")) if path not in reading] if folder.is_dir() else []
        from proofgym.training.checkpoint_eval import remove_snapshot

        for path in stale:
            remove_snapshot(path)
        if stale:
            self.announce(f"deleted {len(stale)} snapshot(s) left by an earlier run in {folder}")
        return stale

    # -- evaluation -----------------------------------------------------------------------------------
    def _eval_config(self, checkpoint: Path, out: Path) -> Any:
        from proofgym.training.evaluate import EvalConfig

        return EvalConfig(suite=str(self.suite_path), agent="local", model=str(checkpoint), out=str(out),
                          **self.options)

    def start_evaluation(self, checkpoint: str | Path, step: int) -> PendingEvaluation:
        """Start evaluating ``checkpoint`` in its own process and return at once (see the class docstring)."""
        import dataclasses
        import os

        from proofgym.training.checkpoint_eval import evaluation_environment, snapshot_checkpoint, write_request

        checkpoint = Path(checkpoint)
        folder = (self.out_dir or checkpoint.parent) / "checkpoint_evals"
        record, log = folder / f"step-{step}.record.json", folder / f"step-{step}.log"
        record.unlink(missing_ok=True)
        # The trainer's save_total_limit may delete the checkpoint while the process reads it: it reads a snapshot.
        snapshot = snapshot_checkpoint(checkpoint, folder / "snapshots" / f"step-{step}")
        placement = self.placement()
        config = dataclasses.asdict(self._eval_config(snapshot, folder / f"step-{step}"))
        config["device"] = placement.device
        request = write_request(folder / f"step-{step}.request.json", step=step, checkpoint=checkpoint,
                                config=config, record=record)
        env = evaluation_environment(placement, os.environ, RANK_VARIABLES)
        with log.open("w", encoding="utf-8") as out:
            process = subprocess.Popen([sys.executable, "-m", "proofgym.training.checkpoint_eval", str(request)],
                                       stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env)
        pending = PendingEvaluation(step, checkpoint, process, record, log, time.monotonic(),
                                    snapshot if snapshot != checkpoint else None)
        self.pending.append(pending)
        self._done.add(step)
        self.announce(f"evaluating {checkpoint} on {self.suite_path.name} (step {step}) in process {process.pid} "
                      f"{placement.note}; training goes on (log: {log})")
        return pending

    def placement(self) -> Any:
        """Where an evaluation process runs (:func:`~proofgym.training.checkpoint_eval.place_evaluation` of this
        callback's ``device``, the GPUs this process sees and the node's training processes)."""
        import os

        from proofgym.training.checkpoint_eval import place_evaluation

        return place_evaluation(self.options["device"], gpus=visible_gpus(),
                                local_ranks=int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1),
                                visible=os.environ.get("CUDA_VISIBLE_DEVICES"))

    def collect(self, *, wait: bool = False) -> list[dict[str, Any]]:
        """The records of the evaluation processes that have ended (all of them with ``wait``), logged now."""
        landed = []
        for pending in list(self.pending):
            code = pending.process.wait() if wait else pending.process.poll()
            if code is None:
                continue
            self.pending.remove(pending)
            try:
                record = json.loads(pending.record.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                record = {"step": pending.step, "checkpoint": str(pending.checkpoint),
                          "error": f"the evaluation process exited with code {code} and no result; see {pending.log}"}
            landed.append(self._land(record))
            from proofgym.training.checkpoint_eval import remove_snapshot

            remove_snapshot(pending.snapshot)
        return landed

    def wait_pending(self) -> list[dict[str, Any]]:
        """Wait for every evaluation still running and log them (the end of training: no rank waits on this)."""
        if self.pending:
            self.announce(f"waiting for {len(self.pending)} checkpoint evaluation(s) still running: "
                          + ", ".join(f"step {p.step}" for p in self.pending))
        return self.collect(wait=True)

    def close(self) -> None:
        """Stop the evaluation processes still running (a run that ends with an error: nobody will read them)."""
        from proofgym.training.checkpoint_eval import remove_snapshot

        for pending in self.pending:
            if pending.process.poll() is None:
                pending.process.kill()
                pending.process.wait()
            remove_snapshot(pending.snapshot)
        self.pending.clear()

    def evaluate_checkpoint(self, checkpoint: str | Path, step: int) -> dict[str, Any]:
        """Evaluate ``checkpoint`` on the held-out suite in this process; log to W&B (when the run has it) and
        remember it."""
        from proofgym.training.checkpoint_eval import summary_record
        from proofgym.training.evaluate import evaluate

        checkpoint = Path(checkpoint)
        root = self.out_dir or checkpoint.parent
        self.announce(f"evaluating {checkpoint} on {self.suite_path.name} (step {step}) ...")
        start = time.monotonic()
        try:
            summary, paths = evaluate(self._eval_config(checkpoint, root / "checkpoint_evals" / f"step-{step}"),
                                      progress=True)
        except ProofgymError as exc:
            return self._land({"step": step, "checkpoint": str(checkpoint), "error": str(exc)})
        return self._land(summary_record(step, checkpoint, summary, paths.run_dir, time.monotonic() - start))

    def _land(self, record: dict[str, Any]) -> dict[str, Any]:
        """Keep, write and log one evaluation's record."""
        step = int(record["step"])
        self.history.append(record)
        self.history.sort(key=lambda r: r["step"])
        self._done.add(step)
        if "error" in record:
            self.announce(f"checkpoint evaluation of step {step} failed: {record['error']}")
            return record
        root = self.out_dir or Path(record["checkpoint"]).parent
        self._log_wandb(step, record["metrics"])
        (root / "checkpoint_evals.json").write_text(json.dumps(self.history, indent=2) + "\n", encoding="utf-8")
        k = self.options["k"]
        cats = ", ".join(f"{cat} {100 * s.get(f'pass@{k}', 0.0):.1f}%" for cat, s in record["per_category"].items())
        self.announce(f"step {step}: pass@{k} {cats}; verdicts {record['verdicts']} "
                      f"({record['seconds']:.0f} s, {record['run_dir']})")
        return record

    def _log_wandb(self, step: int, metrics: dict[str, float]) -> None:
        from proofgym.training.logging import log_heldout

        log_heldout(self._report_to, step, metrics, self.history, self.options["k"])


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
                ("frac_reward_zero_std", "zero-variance groups", ".0f", 100.0, "%"),
                ("curriculum/kept", "curriculum kept", ".0f", 1.0, ""),
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


class CheckpointSettingsCallback(TrainerCallback):
    """Write the run's prompt and sampling settings into every ``checkpoint-N`` the trainer saves.

    ``proofgym eval --agent local --model checkpoint-N`` then evaluates it with the prompt it was
    trained on (:data:`proofgym.training.eval_runs.CHECKPOINT_SETTINGS`).
    """

    def __init__(self, settings: Mapping[str, Any]) -> None:
        self.settings = dict(settings)

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        from proofgym.training.eval_runs import write_checkpoint_settings

        path = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if state.is_world_process_zero and path.is_dir():
            write_checkpoint_settings(path, self.settings)


def release_host_memory() -> bool:
    """Give the C heap's free pages back to the system (glibc's ``malloc_trim(0)``); False where there is none.

    Measured (docs/benchmarks.md, issue 29): a CPU GRPO step on SmolLM2-135M needs ~7 GiB of transient tensors
    (the backward over the whole batch), and glibc keeps 3-4 GiB of them in its heap once they are freed (their
    sizes fall under its dynamic mmap threshold), so RSS between steps read 5.4-6.5 GiB for 2.1 GiB of live
    state and looked like a leak; trimmed after each step it stays at the live 2.1 GiB.
    """
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    try:
        return bool(ctypes.CDLL(name).malloc_trim(0)) if name else False
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to trim this way
        return False


class ReleaseHostMemory(TrainerCallback):
    """:func:`release_host_memory` after every optimizer step (cost: milliseconds; steps on CPU take seconds)."""

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        release_host_memory()


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


class TrainingHealthCallback(TrainerCallback):
    """Warn at a logging step that cannot teach (GRPO's own metrics say so).

    - ``frac_reward_zero_std`` = 1: every group's completions scored alike, so every advantage
      is 0 and the step changed nothing (bar a KL term);
    - ``completions/clipped_ratio`` above ``clipped_threshold``: most replies hit
      ``max_completion_length``, so their proofs are cut off and the verifier says ERROR.

    Args:
        clipped_threshold: Share of clipped completions above which to warn.
        announce: Where warnings go (default: a ``[proofgym]`` line on stderr).
    """

    def __init__(self, clipped_threshold: float = 0.5, announce: Callable[[str], None] = announce) -> None:
        self.clipped_threshold = float(clipped_threshold)
        self.announce = announce
        self.warnings: list[str] = []

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if not logs or not state.is_world_process_zero:
            return
        zero = logs.get("frac_reward_zero_std")
        if isinstance(zero, (int, float)) and zero >= 1.0:
            self._warn(f"step {state.global_step}: every group had zero reward variance (all completions of each "
                       f"prompt scored alike), so this step taught nothing. Start from a policy with p > 0 (an SFT "
                       f"warm start), turn on the curriculum (curriculum: true), or sample more (num_generations, "
                       f"temperature)")
        clipped = logs.get("completions/clipped_ratio")
        if isinstance(clipped, (int, float)) and clipped > self.clipped_threshold:
            self._warn(f"step {state.global_step}: {100 * clipped:.0f}% of completions were cut at "
                       f"max_completion_length ({getattr(args, 'max_completion_length', '?')} tokens); a cut proof is "
                       f"an ERROR: raise max_completion_length")

    def _warn(self, text: str) -> None:
        self.warnings.append(text)
        self.announce(f"warning: {text}")


class TaskPassRateCallback(TrainerCallback):
    """Each task's pass rate over training (see the module docstring).

    Args:
        reward: The reward function whose :meth:`~proofgym.training.rewards.VerifierReward.drain_task_outcomes`
            gives the verdicts of each logging window.
        tasks: The training tasks (for categories).
        max_plot_tasks: Tasks drawn in the plots (the most sampled ones); the table has all.
    """

    COLUMNS = ["step", "task_id", "category", "source", "ok", "n", "pass_rate"]

    def __init__(self, reward: Any, tasks: Sequence[Any], *, max_plot_tasks: int = 40) -> None:
        self.reward = reward
        self.category = {t.id: t.category for t in tasks}
        self.max_plot_tasks = int(max_plot_tasks)
        self.rows: list[dict[str, Any]] = []
        self.category_rows: list[dict[str, Any]] = []
        """Per logging step: :func:`~proofgym.training.eval_metrics.category_metrics` of its window."""
        self._out: Path | None = None
        self.plot_path: Path | None = None

    def add(self, step: int, counts: Mapping[str, tuple[int, int]], source: str) -> None:
        """Record ``{task_id: (OK, samples with a verdict)}`` at ``step`` (source: ``training`` or ``curriculum``)."""
        new = [{"step": step, "task_id": task_id, "category": self.category.get(task_id, ""), "source": source,
                "ok": ok, "n": n, "pass_rate": ok / n if n else None}
               for task_id, (ok, n) in sorted(counts.items())]
        self.rows += new
        if self._out is not None and new:
            with self._out.open("a", encoding="utf-8") as fh:
                fh.writelines(json.dumps(r) + "\n" for r in new)

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.is_world_process_zero:
            self._out = Path(args.output_dir) / "task_pass_rates.jsonl"
            self._out.parent.mkdir(parents=True, exist_ok=True)
            self._out.write_text("".join(json.dumps(r) + "\n" for r in self.rows), encoding="utf-8")

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if not logs or "reward" not in logs:  # a training logging step (every process gets it: gathers match)
            return
        outcomes = self.reward.drain_task_outcomes()
        from accelerate import PartialState

        if PartialState().num_processes > 1:
            from accelerate.utils import gather_object

            outcomes = [pair for part in gather_object([outcomes]) for pair in part]
        ok: dict[str, int] = defaultdict(int)
        n: dict[str, int] = defaultdict(int)
        for task_id, verdict in outcomes:
            if verdict is not None:
                n[task_id] += 1
                ok[task_id] += verdict == "OK"
        if state.is_world_process_zero and n:
            self.add(state.global_step, {t: (ok[t], n[t]) for t in n}, "training")
            self._log_categories(args, state, outcomes)

    def _log_categories(self, args: Any, state: Any, outcomes: Sequence[tuple[str, str | None]]) -> None:
        """Reward, OK rate and pass@1..num_generations per category of this window: into the log history's last
        row and W&B (``train/category/<c>/...``, ``train/proof/pass@k``)."""
        from proofgym.training.eval_metrics import category_metrics
        from proofgym.training.logging import log_training_categories

        metrics = category_metrics(outcomes, self.category, reward_of=self._reward_of,
                                   max_k=getattr(args, "num_generations", None))
        if not metrics:
            return
        self.category_rows.append({"step": state.global_step, **metrics})
        if state.log_history and state.log_history[-1].get("step") == state.global_step:
            state.log_history[-1].update({f"train/{k}": v for k, v in metrics.items()})
        log_training_categories(args.report_to, state.global_step, metrics)

    def _reward_of(self, verdict: str) -> float | None:
        """The reward of a verdict as the reward function maps it (before any repair-turn discount)."""
        from proofgym.envs.types import CheckResult, Verdict
        from proofgym.training.rewards import shaped_reward

        reward_map = getattr(self.reward, "reward_map", None)
        if reward_map is None:
            return None
        return shaped_reward(CheckResult(Verdict(verdict)), reward_map, getattr(self.reward, "format_bonus", 0.0))

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not state.is_world_process_zero:
            return
        if self.category_rows:
            from proofgym.training.logging import log_pass_at_k_curves

            log_pass_at_k_curves(args.report_to, self.category_rows)
        if not self.rows:
            return
        self.plot_path = self.plot(Path(args.output_dir) / "task_pass_rates.png")
        from proofgym.training.logging import log_task_pass_rates

        steps, series = self.series("training")
        log_task_pass_rates(args.report_to, self.COLUMNS, [[r[c] for c in self.COLUMNS] for r in self.rows],
                            steps, series, self.plot_path)

    def series(self, source: str) -> tuple[list[int], dict[str, list[float]]]:
        """Steps and, per task (the most sampled ``max_plot_tasks``), its pass rate at each step.

        A step at which a task was not sampled carries its last rate forward (its first rate back).
        """
        rows = [r for r in self.rows if r["source"] == source and r["pass_rate"] is not None]
        steps = sorted({r["step"] for r in rows})
        seen: dict[str, int] = defaultdict(int)
        for r in rows:
            seen[r["task_id"]] += r["n"]
        chosen = sorted(seen, key=lambda t: (-seen[t], t))[: self.max_plot_tasks]
        at = {(r["task_id"], r["step"]): r["pass_rate"] for r in rows}
        series: dict[str, list[float]] = {}
        for task_id in chosen:
            values = [at.get((task_id, s), math.nan) for s in steps]
            first = next(v for v in values if not math.isnan(v))
            last, filled = first, []
            for v in values:
                last = last if math.isnan(v) else v
                filled.append(last)
            series[task_id] = filled
        return steps, series

    def plot(self, path: Path) -> Path | None:
        """A PNG of the pass rate per task over training (and the curriculum's estimates, when any)."""
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            return None
        sources = [s for s in ("training", "curriculum") if any(r["source"] == s for r in self.rows)]
        fig, axes = plt.subplots(1, len(sources), figsize=(6.5 * len(sources), 3.8), squeeze=False)
        for ax, source in zip(axes[0], sources, strict=True):
            steps, series = self.series(source)
            for task_id, values in series.items():
                ax.plot(steps, values, marker=".", linewidth=1, label=task_id)
            ax.set_ylim(-0.05, 1.05)
            ax.set_xlabel("step")
            ax.set_ylabel("pass rate")
            ax.set_title(f"per-task pass rate ({source})")
            if len(series) <= 12:
                ax.legend(fontsize=6)
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)
        return path
