"""proofgym in verl: a custom reward function and the dataset rows it reads.

verl loads a reward function from a file (``reward.custom_reward_function.path`` and ``.name``) and
calls it once per response, in its reward workers, as::

    compute_score(data_source=..., solution_str=..., ground_truth=..., extra_info=..., **reward_kwargs)

Here ``ground_truth`` is the proofgym task id (the rows :func:`verl_rows` writes put it in
``reward_model.ground_truth``), ``solution_str`` is the decoded response, and ``reward_kwargs``
(``reward.custom_reward_function.reward_kwargs``) say where to check: ``service_url`` (a running
``proofgym serve-verifier``, which every reward worker then shares) or nothing (local worker
processes, one pool per reward worker). The result is verl's dict form: ``score`` (OK 1.0,
FAIL/TIMEOUT/ERROR 0.0, CHEATING -1.0) plus ``acc`` and ``cheating`` for its metrics.

A harness failure: verl's reward contract has no "no reward" value (the score goes into a tensor),
and a 0 would teach the policy that a correct proof can be worth nothing; so this function raises
:class:`~proofgym.envs.errors.VerifierError`, which stops the step loudly instead.

verl itself is never imported here: verl 0.9 pins ``transformers<5.11`` (this project trains on
5.2x with TRL 1.16) and brings Ray, vLLM-era pins and tensordict, so it is not installed beside
proofgym; the function contract above is what verl calls (``verl/trainer/ppo/reward.py``,
``get_custom_reward_fn``, and ``NaiveRewardManager.run_single``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from proofgym.envs.errors import VerifierError
from proofgym.envs.types import Verdict
from proofgym.training.integrations.core import ProofScorer, scorer_for

__all__ = ["DATA_SOURCE_PREFIX", "compute_score", "verl_rows", "write_verl_parquet"]

#: ``data_source`` of proofgym rows: ``proofgym/<suite>``; the suite is read back from it.
DATA_SOURCE_PREFIX = "proofgym/"


def verl_rows(suite: str, *, context_chars: int = 2000, scorer: ProofScorer | None = None) -> list[dict[str, Any]]:
    """verl's RL dataset rows for a suite: ``data_source``, ``prompt`` (chat), ``ability``, ``reward_model``,
    ``extra_info`` (``task_id``, ``suite``, ``index``)."""
    scorer = scorer or ProofScorer(suite)
    return [{"data_source": f"{DATA_SOURCE_PREFIX}{suite}", "prompt": scorer.prompt(task, context_chars=context_chars),
             "ability": f"theorem-proving/{task.system}",
             "reward_model": {"style": "rule", "ground_truth": task.id},
             "extra_info": {"task_id": task.id, "suite": suite, "index": index}}
            for index, task in enumerate(scorer.tasks)]


def write_verl_parquet(suite: str, path: str | Path, **options: Any) -> Path:
    """Write :func:`verl_rows` to a parquet file for ``data.train_files`` / ``data.val_files``."""
    import pandas as pd

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(verl_rows(suite, **options)).to_parquet(path)
    return path


def _suite_of(data_source: str, extra_info: Mapping[str, Any] | None, suite: str | None) -> str:
    if suite:
        return suite
    if extra_info and extra_info.get("suite"):
        return str(extra_info["suite"])
    if data_source.startswith(DATA_SOURCE_PREFIX):
        return data_source[len(DATA_SOURCE_PREFIX):]
    raise ValueError(f"data_source {data_source!r} is not a proofgym row ({DATA_SOURCE_PREFIX}<suite>); "
                     f"pass suite= in reward_kwargs")


def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: Mapping[str, Any] | None = None,
                  *, suite: str | None = None, service_url: str | None = None, token: str | None = None,
                  workers: int = 2, **_: Any) -> dict[str, float]:
    """verl's custom reward: the real prover's verdict on the proof in ``solution_str`` for task ``ground_truth``.

    Example (``reward_kwargs`` as verl merges them)::

        >>> compute_score("proofgym/coq-tiny", "```coq\\nProof. lia. Qed.\\n```", "coq.tiny.lia")  # doctest: +SKIP
        {'score': 1.0, 'acc': 1.0, 'cheating': 0.0}

    Raises:
        VerifierError: a harness failure (no verdict; see the module docstring).
    """
    scorer = scorer_for(_suite_of(data_source, extra_info, suite), service_url=service_url, token=token,
                        workers=workers)
    outcome = scorer.score(str(ground_truth), solution_str)
    if outcome.reward is None:
        raise VerifierError(f"harness failure on {ground_truth}, no reward (verl cannot take none): "
                            f"{outcome.harness_error}")
    return {"score": float(outcome.reward), "acc": float(outcome.verdict == Verdict.OK.value),
            "cheating": float(outcome.verdict == Verdict.CHEATING.value)}

