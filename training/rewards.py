"""Reward functions for TRL from real verifier verdicts.

:class:`VerifierReward` is a reward function in TRL's form::

    reward(prompts, completions, completion_ids=None, *, task_id, **columns) -> list[float | None]

It takes the proof out of each completion (:func:`~proofgym.envs.parsing.parse_proof`),
checks the whole batch in parallel on a :class:`~proofgym.envs.verifiers.pool.VerifierPool`,
and maps each verdict to a reward (:class:`~proofgym.envs.rewards.RewardMap`: OK 1,
CHEATING -1, the rest 0). A harness failure (the verifier broke, a worker died) is
``None``: TRL leaves it out of the advantage, and it is counted
(``verifier/harness_failures``), never scored 0. If the whole pool fails, every
sample of the batch is ``None`` and training goes on.

The reward policy (what GRPO learns from):

- **A proof the kernel accepts is the only way up.** OK earns the most.
- **Malformed output earns 0, like any honest miss.** Prose, prose before ``Proof.``, a reply
  cut at the token limit: the verifier normalises an unambiguous slip and checks what is left
  (prose before ``Proof.`` is dropped, so a correct proof after it is OK and a wrong one FAIL)
  and calls the rest ERROR (the verdict policy of the Trust round 3 issue); ERROR, FAIL and
  TIMEOUT all earn 0. If malformed attempts scored below pure prose, group normalisation would
  push the policy away from writing proofs at all.
- **-1 is kept for exploits**: CHEATING (a hole, an axiom, a checker-changing command, a
  changed statement) is the one verdict below 0.
  :func:`check_reward_policy` refuses a ``verdict_rewards`` override that breaks that order
  (CHEATING < FAIL, TIMEOUT, ERROR < OK), so a config cannot make an honest slip cost as much
  as a cheat.
- **Optional shaping, off by default** (``format_bonus``, :func:`shaped_reward`): a bonus for a
  submission the verifier *ran* (verdict FAIL or TIMEOUT: it was a well-formed proof script
  that did not prove the goal), to teach the format to a policy that starts from p = 0. It
  cannot be farmed into a proof's reward: it is paid only on a verifier's verdict (never on
  the parser's say-so), never on CHEATING or ERROR, and :func:`check_reward_policy` caps it
  so that FAIL + bonus stays strictly below OK. Its cost is known: a policy can earn it with
  an empty script (``Proof. Qed.`` is a FAIL), so turn it on only to get off the ground and
  keep it small (0.1). Partial-progress shaping (fewer remaining goals) is deliberately not
  offered: a remaining-goal count does not measure progress (``exfalso`` leaves one goal,
  ``False``, as hard as any), so a bonus for fewer goals would pay for such moves.

With TRL >= 1.16 the trainer passes ``log_metric`` and ``log_extra``; the reward then logs,
per batch, ``proof/ok_rate``, ``proof/cheat_rate`` and ``proof/cheat/<reason>``,
``verifier/timeout_rate``, ``verifier/error_rate``, ``verifier/seconds`` (mean wall
seconds of a check), ``verifier/batch_seconds`` and ``verifier/harness_failure_rate``,
``repair/turns`` and ``repair/fixed_rate``, and adds ``task_id``, ``category``, ``proof``
(the parsed proof that was checked), ``verdict`` and ``reasons`` columns to TRL's completions
table. Every metric is logged in every batch, zeros included: TRL averages a metric over the
batches that logged it, so a rate logged only when non-zero would read high. A cheat reason
seen once is logged (as 0 when absent) in every later batch, and
:class:`~proofgym.training.grpo_trainer.ProofGRPOTrainer` counts the batches of a logging
window that came before its first appearance as zeros. Without
them (another trainer, a direct call) the same numbers are in :attr:`VerifierReward.last_metrics`
and the running :attr:`VerifierReward.totals`.

When a multi-turn ``rollout_func`` (:class:`~proofgym.training.rollout.RepairRollout`) has
already checked every turn, it passes its outcomes as the ``rollout_outcomes`` column and
the reward uses them instead of checking again.
"""

from __future__ import annotations

import random
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from proofgym.envs.errors import ProofgymError, VerifierError
from proofgym.envs.parsing import parse_proof, statement_to_strip
from proofgym.envs.rewards import RewardMap
from proofgym.envs.types import CheckResult, Task, Verdict
from proofgym.envs.verifiers.pool import Boundary, HarnessFailure, PoolClosed, PoolResult, classify_failure

HARNESS = "HARNESS_FAILURE"
"""What the completions table shows in the ``verdict`` column for a harness failure."""


@dataclass(frozen=True)
class Outcome:
    """What became of one completion.

    Attributes:
        verdict: The final :class:`Verdict` (a verdict's name is read as one), or ``None`` for a harness failure;
            its name only where a row is written (:meth:`to_dict`, the TRL columns, the totals).
        reward: The reward (``None`` for a harness failure).
        reasons: The verifier's reasons (cheat reasons, failure summary).
        wall_s: Wall seconds of the verifier's checks of this completion.
        harness_error: What broke, for a harness failure.
        turns: Attempts made (multi-turn repair), 1 for a single-turn completion.
        proof: The proof that was checked last.
        feedback: The verifier's feedback on it (``CheckResult.feedback``), for a repair turn.
    """

    verdict: Verdict | None
    reward: float | None
    reasons: tuple[str, ...] = ()
    wall_s: float = 0.0
    harness_error: str = ""
    turns: int = 1
    proof: str = ""
    feedback: str = ""

    def __post_init__(self) -> None:
        if self.verdict is not None and not isinstance(self.verdict, Verdict):
            object.__setattr__(self, "verdict", Verdict(self.verdict))

    @property
    def verdict_name(self) -> str:
        """The verdict's name, or :data:`HARNESS` for a harness failure (what a row or a column shows)."""
        return self.verdict.value if self.verdict is not None else HARNESS

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "verdict": None if self.verdict is None else self.verdict.value,
                "reasons": list(self.reasons)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Outcome:
        return cls(verdict=data.get("verdict"), reward=data.get("reward"), reasons=tuple(data.get("reasons", ())),
                   wall_s=float(data.get("wall_s", 0.0)), harness_error=str(data.get("harness_error", "")),
                   turns=int(data.get("turns", 1)), proof=str(data.get("proof", "")),
                   feedback=str(data.get("feedback", "")))


def completion_text(completion: Any) -> str:
    """The text of a completion: a string, or the last assistant message of a conversational one.

    With tools the conversation goes assistant, tool, assistant...: the answer is the last assistant turn.
    """
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Mapping):
        return str(completion.get("content") or "")
    if isinstance(completion, Sequence) and completion:
        said = [m for m in completion if isinstance(m, Mapping) and m.get("role", "assistant") == "assistant"]
        return completion_text(said[-1] if said else completion[-1])
    return ""


def reason_key(reason: str) -> str:
    """A metric-safe short name of a cheat reason (its part before ``:``)."""
    head = reason.split(":", 1)[0].strip().lower()
    return re.sub(r"[^\w.-]+", "_", head).strip("_")[:48] or "other"


def check_reward_policy(reward_map: RewardMap, format_bonus: float = 0.0) -> None:
    """Refuse rewards that would teach the wrong thing (see the module docstring; :meth:`RewardMap.check_policy`).

    The order CHEATING < FAIL, TIMEOUT, ERROR < OK must hold, and ``format_bonus`` must be >= 0
    and small enough that FAIL or TIMEOUT plus the bonus stays strictly below OK.

    Raises:
        ValueError: with what to change.
    """
    replace(reward_map, format_bonus=float(format_bonus)).check_policy()


def harness_error(result: PoolResult) -> str:
    """One line for a pool result's harness failure: its boundary, then what broke (``verifier: VerifierCrashed: ...``)."""
    return str(result.outcome) if isinstance(result.outcome, HarnessFailure) else ""


def pool_failure(exc: BaseException) -> HarnessFailure:
    """The harness failure of a batch the pool could not check at all (closed, past the batch's wait, broken)."""
    if isinstance(exc, PoolClosed):
        boundary = Boundary.CLOSED
    elif isinstance(exc, TimeoutError):
        boundary = Boundary.WATCHDOG
    else:
        boundary = Boundary(classify_failure(exc))
    return HarnessFailure(boundary, f"{type(exc).__name__}: {exc}")


def shaped_reward(result: CheckResult | None, reward_map: RewardMap, format_bonus: float = 0.0) -> float | None:
    """The verdict's reward under ``reward_map`` with ``format_bonus`` for FAIL and TIMEOUT (never for CHEATING,
    ERROR or OK): :class:`RewardMap` computes it. ``None`` (a harness failure) stays ``None``."""
    return replace(reward_map, format_bonus=float(format_bonus))(result)


def batch_metrics(outcomes: Sequence[Outcome], *, batch_seconds: float | None = None,
                  cheat_reasons: Iterable[str] = ()) -> dict[str, float]:
    """The per-batch metrics named in the module docstring (rates over samples with a verdict).

    Every name is present whatever the batch held (zeros included); ``cheat_reasons`` are reason
    keys seen in earlier batches, logged as 0 when this batch has none of them.
    """
    scored = [o for o in outcomes if o.verdict is not None]
    n, failures = len(scored), len(outcomes) - len(scored)
    counts = Counter(o.verdict for o in scored)
    rate = (lambda c: c / n) if n else (lambda c: 0.0)
    metrics = {
        "proof/ok_rate": rate(counts[Verdict.OK]),
        "proof/cheat_rate": rate(counts[Verdict.CHEATING]),
        "proof/fail_rate": rate(counts[Verdict.FAIL]),
        "verifier/timeout_rate": rate(counts[Verdict.TIMEOUT]),
        "verifier/error_rate": rate(counts[Verdict.ERROR]),
        "verifier/harness_failures": float(failures),
        "verifier/harness_failure_rate": failures / len(outcomes) if outcomes else 0.0,
        "verifier/seconds": sum(o.wall_s for o in scored) / n if n else 0.0,
        "repair/turns": sum(o.turns for o in outcomes) / len(outcomes) if outcomes else 0.0,
        "repair/fixed_rate": rate(sum(o.turns > 1 and o.verdict is Verdict.OK for o in scored)),
    }
    reasons = Counter(reason_key(r) for o in scored if o.verdict is Verdict.CHEATING for r in o.reasons)
    for key in set(cheat_reasons) | set(reasons):
        metrics[f"proof/cheat/{key}"] = rate(reasons[key])
    if batch_seconds is not None:
        metrics["verifier/batch_seconds"] = batch_seconds
    return metrics


class VerifierReward:
    """A TRL reward function whose reward is the verifier's verdict on each completion.

    Args:
        tasks: The tasks that ``task_id`` names (a sequence, or a mapping of id -> task).
        pool: The verifier pool that checks the proofs (the caller owns and closes it).
        reward_map: Verdict -> reward (default OK 1, CHEATING -1, FAIL/TIMEOUT/ERROR 0).
        name: The name TRL logs the reward under (``rewards/<name>/mean``).
        timeout_s: Longest wait for one batch; past it the unfinished samples are harness failures.
        feedback_chars: Longest feedback text kept in an :class:`Outcome` (for repair turns).
        format_bonus: Optional shaping (default 0: off): added to the reward of a FAIL or TIMEOUT
            verdict; see the module docstring for why it cannot be farmed into a proof's reward.

    Example (the real Coq verifier; ``tests/data/tiny_suite.jsonl``)::

        >>> from proofgym.envs.verifiers.pool import LocalVerifierPool
        >>> with LocalVerifierPool(2) as pool:
        ...     reward = VerifierReward(load_tasks("tests/data/tiny_suite.jsonl"), pool)
        ...     reward(prompts=[[{"role": "user", "content": "..."}]] * 3,
        ...            completions=[[{"role": "assistant", "content": "```coq\\nProof. lia. Qed.\\n```"}],
        ...                         [{"role": "assistant", "content": "Proof. Admitted."}],
        ...                         [{"role": "assistant", "content": "no idea"}]],
        ...            task_id=["tiny.lia"] * 3)
        [1.0, -1.0, 0.0]
    """

    def __init__(self, tasks: Iterable[Task] | Mapping[str, Task], pool: Any = None, *,
                 reward_map: RewardMap | Mapping[str, float] | None = None, name: str = "verifier",
                 timeout_s: float | None = None, feedback_chars: int = 2000, format_bonus: float = 0.0) -> None:
        self.tasks: dict[str, Task] = dict(tasks) if isinstance(tasks, Mapping) else {t.id: t for t in tasks}
        self.pool = pool
        given = reward_map if isinstance(reward_map, RewardMap) else RewardMap.from_mapping(reward_map)
        self.reward_map = replace(given, format_bonus=float(format_bonus))  # what scores every verdict here
        self.reward_map.check_policy()
        self.format_bonus = self.reward_map.format_bonus
        self.__name__ = name
        self.timeout_s = timeout_s
        self.feedback_chars = int(feedback_chars)
        self.last_metrics: dict[str, float] = {}
        self.last_outcomes: list[Outcome] = []
        self.totals: Counter[str] = Counter()
        self.seen_reasons: set[str] = set()
        self.task_outcomes: list[tuple[str, str | None]] = []
        """``(task_id, verdict)`` of every completion since the last :meth:`drain_task_outcomes`."""

    def drain_task_outcomes(self) -> list[tuple[str, str | None]]:
        """The ``(task_id, verdict)`` pairs recorded since the last call (for per-task pass rates)."""
        drained, self.task_outcomes = self.task_outcomes, []
        return drained

    def task(self, task_id: str) -> Task:
        try:
            return self.tasks[task_id]
        except KeyError:
            raise ProofgymError(f"reward got task_id {task_id!r}, which is not among its {len(self.tasks)} tasks") from None

    def proof_of(self, completion: Any, task: Task) -> str:
        """The proof to check: the completion's last fenced block, its statement copy removed."""
        return parse_proof(completion_text(completion), statement=statement_to_strip(task)).proof

    def check_results(self, tasks: Sequence[Task], proofs: Sequence[str]) -> list[PoolResult]:
        """The pool's result for each proof, checked in parallel: a :class:`CheckResult` or a harness failure.

        A pool that cannot check the batch at all (closed, past ``timeout_s``, broken) gives every
        proof a :class:`~proofgym.envs.verifiers.pool.HarnessFailure`; nothing is raised.
        """
        if self.pool is None:
            raise ProofgymError("VerifierReward needs a verifier pool to check proofs")
        try:
            return list(self.pool.check_batch(list(zip(tasks, proofs, strict=True)), timeout=self.timeout_s))
        except (VerifierError, TimeoutError, OSError) as exc:
            failure = pool_failure(exc)
            return [PoolResult(None, t.id, t.system, failure) for t in tasks]

    def reward_of(self, result: CheckResult) -> float | None:
        """The reward of one verdict: the reward map's (``format_bonus`` included, where it applies)."""
        return self.reward_map(result)

    def outcome(self, result: Any, proof: str) -> Outcome:
        """The :class:`Outcome` of one pool result (see :meth:`check_results`) for ``proof``."""
        checked = result.result
        if checked is None:
            return Outcome(None, None, harness_error=harness_error(result), proof=proof)
        return Outcome(checked.verdict, self.reward_of(checked), checked.reasons, checked.wall_s, proof=proof,
                       feedback=checked.feedback(self.feedback_chars))

    def check(self, tasks: Sequence[Task], proofs: Sequence[str]) -> list[Outcome]:
        """Check ``proofs`` in parallel on the pool; a broken pool makes every outcome a harness failure."""
        results = self.check_results(tasks, proofs)
        return [self.outcome(result, proof) for result, proof in zip(results, proofs, strict=True)]

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], completion_ids: Any = None, *,
                 task_id: Sequence[str], trainer_state: Any = None, log_metric: Callable[[str, float], None] | None = None,
                 log_extra: Callable[[str, list], None] | None = None,
                 rollout_outcomes: Sequence[Mapping[str, Any]] | None = None, **columns: Any) -> list[float | None]:
        start = time.monotonic()
        tasks = [self.task(t) for t in task_id]
        if rollout_outcomes is not None:
            outcomes = [Outcome.from_dict(o) for o in rollout_outcomes]
        else:
            proofs = [self.proof_of(c, t) for c, t in zip(completions, tasks, strict=True)]
            outcomes = self.check(tasks, proofs)
        metrics = batch_metrics(outcomes, batch_seconds=None if rollout_outcomes is not None
                                else time.monotonic() - start, cheat_reasons=self.seen_reasons)
        self.seen_reasons.update(k.removeprefix("proof/cheat/") for k in metrics if k.startswith("proof/cheat/"))
        self.last_outcomes, self.last_metrics = outcomes, metrics
        self.totals["samples"] += len(outcomes)
        self.totals.update(o.verdict_name for o in outcomes)
        self.task_outcomes.extend((t.id, o.verdict and o.verdict.value) for t, o in zip(tasks, outcomes, strict=True))
        if log_metric is not None:
            for name, value in metrics.items():
                log_metric(name, value)
        if log_extra is not None:
            log_extra("task_id", [t.id for t in tasks])
            log_extra("category", [t.category for t in tasks])
            log_extra("proof", [o.proof for o in outcomes])
            log_extra("verdict", [o.verdict_name for o in outcomes])
            log_extra("reasons", ["; ".join(o.reasons) or o.harness_error for o in outcomes])
            log_extra("turns", [o.turns for o in outcomes])
        return [o.reward for o in outcomes]


class PermutedReward:
    """A negative control: the wrapped reward's values, shuffled before GRPO sees them.

    Every completion still gets checked and every metric is the true one (the wrapped reward logs
    them), but which completion earns which reward is random, so the rewards keep their
    distribution and lose their relation to what was written. A learning curve that rises under
    this control measures something other than learning from the verifier (noise, the warm start,
    the evaluation). Harness failures (``None``) stay where they are.

    Two scopes. Across the batch (``group=None``) changes each group's mean and spread, so the
    advantages' scale changes too (in session 15 it broke the policy rather than standing still).
    Within each group (``group=G``: TRL scores a batch as consecutive groups of G completions of one
    prompt) every group keeps its rewards, hence its mean, spread and advantage magnitudes, exactly:
    an update of GRPO's scale without the verifier's direction, the matched-scale control.

    Args:
        reward: The reward function to wrap (a :class:`VerifierReward`).
        seed: Seed of the shuffles.
        group: Shuffle within consecutive groups of this size; ``None``: across the whole batch.
    """

    def __init__(self, reward: VerifierReward, *, seed: int = 0, group: int | None = None) -> None:
        if group is not None and group < 1:
            raise ValueError(f"group must be a positive group size or None (the whole batch), not {group}")
        self.reward = reward
        self.__name__ = reward.__name__
        self.group = group
        self._rng = random.Random(seed)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["reward"], name)

    def __call__(self, *args: Any, **kwargs: Any) -> list[float | None]:
        out = list(self.reward(*args, **kwargs))
        size = self.group or max(1, len(out))
        for start in range(0, len(out), size):
            scored = [i for i in range(start, min(start + size, len(out))) if out[i] is not None]
            values = [out[i] for i in scored]
            self._rng.shuffle(values)
            for i, value in zip(scored, values, strict=True):
                out[i] = value
        return out
