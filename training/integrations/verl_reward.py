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

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from proofgym.envs.errors import VerifierError
from proofgym.envs.types import Verdict
from proofgym.training.integrations.core import ProofScorer, scorer_for
from proofgym.training.rewards import Outcome

__all__ = ["DATA_SOURCE_PREFIX", "ProofgymRewardManager", "compute_score", "verl_rows", "write_verl_parquet"]

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
    return _verl_score(str(ground_truth), scorer.score(str(ground_truth), solution_str))


def _verl_score(task_id: str, outcome: Outcome) -> dict[str, float]:
    """verl's dict form of one outcome; a harness failure raises (verl has no "no reward" value)."""
    if outcome.reward is None:
        raise VerifierError(f"harness failure on {task_id}, no reward (verl cannot take none): {outcome.harness_error}")
    return {"score": float(outcome.reward), "acc": float(outcome.verdict == Verdict.OK.value),
            "cheating": float(outcome.verdict == Verdict.CHEATING.value)}



# -- the reward manager: one batch of responses checked in parallel ------------------------------
def _get(config: Any, *path: str) -> Any:
    """``config.a.b`` (a DictConfig, a dict or an object), ``None`` where a key is missing."""
    for key in path:
        if config is None:
            return None
        config = config.get(key) if hasattr(config, "get") else getattr(config, key, None)
    return config


class ProofgymRewardManager:
    """A verl reward manager: the responses of a batch checked in parallel on one scorer per suite.

    verl's per-response path (``compute_score`` under its ``naive`` manager) checks one proof at a time
    per reward worker; this manager hands the whole batch to the pool (or the shared verifier service),
    so its ``workers`` check at once. It keeps both of verl's manager contracts, and imports no verl:

    - the registered manager (``verl/workers/reward_manager``): built as
      ``Manager(tokenizer=, num_examine=, compute_score=, reward_fn_key=, **reward_kwargs)``, called as
      ``manager(data, return_dict=False)`` on a batch ``DataProto``; returns the token-level reward tensor
      (the score on each response's last valid token) or ``{"reward_tensor", "reward_extra_info"}``;
    - the reward loop's manager (verl 0.9, ``reward.reward_manager.source: importlib``, ``module.path``
      this file, ``name: ProofgymRewardManager``): built as ``Manager(config=, tokenizer=, compute_score=)``,
      awaited as ``run_single(data)`` on one sample; returns ``{"reward_score", "reward_extra_info"}``.

    Where to check comes from the keywords, else ``config.reward.reward_kwargs`` (``suite``,
    ``service_url``, ``token``, ``workers``); the suite, unless given, from each row's ``data_source``.
    ``compute_score`` is accepted and not called: the scores are :func:`compute_score`'s (one core).

    Raises:
        VerifierError: a harness failure in the batch (verl has no "no reward" value; see the module docstring).
    """

    def __init__(self, tokenizer: Any = None, num_examine: int = 0, compute_score: Any = None,
                 reward_fn_key: str = "data_source", *, config: Any = None, **reward_kwargs: Any) -> None:
        self.tokenizer = tokenizer
        self.num_examine = int(num_examine)
        self.reward_fn_key = reward_fn_key
        settings = dict(_get(config, "reward", "reward_kwargs") or {})
        settings.update(reward_kwargs)
        self.suite: str | None = settings.get("suite")
        self.service_url: str | None = settings.get("service_url")
        self.token: str | None = settings.get("token")
        self.workers = int(settings.get("workers", 2))

    def score_texts(self, data_sources: Any, responses: list[str], ground_truths: list[str],
                    extra_infos: Any) -> list[dict[str, float]]:
        """verl's score dicts (``score``, ``acc``, ``cheating``) for decoded responses, checked in parallel."""
        by_suite: dict[str, list[int]] = {}
        for i, (source, info) in enumerate(zip(data_sources, extra_infos, strict=True)):
            by_suite.setdefault(_suite_of(str(source), info, self.suite), []).append(i)
        scores: list[dict[str, float]] = [{} for _ in responses]
        for suite, rows in by_suite.items():
            scorer = scorer_for(suite, service_url=self.service_url, token=self.token, workers=self.workers)
            outcomes = scorer.score_many([(str(ground_truths[i]), responses[i]) for i in rows])
            for i, outcome in zip(rows, outcomes, strict=True):
                scores[i] = _verl_score(str(ground_truths[i]), outcome)
        return scores

    def _decoded(self, data: Any) -> tuple[list[str], Any]:
        """Each response's valid tokens decoded, and the valid lengths (verl's attention mask over the response)."""
        prompt_len = data.batch["prompts"].shape[-1]
        lengths = data.batch["attention_mask"][:, prompt_len:].sum(dim=-1)
        responses = data.batch["responses"]
        texts = [self.tokenizer.decode(responses[i][: int(lengths[i])], skip_special_tokens=True)
                 for i in range(len(data))]
        return texts, lengths

    def __call__(self, data: Any, return_dict: bool = False) -> Any:
        """The registered manager's call: the reward tensor of a batch (``return_dict``: with the extra info)."""
        import torch

        texts, lengths = self._decoded(data)
        rows = data.non_tensor_batch
        extra_infos = rows.get("extra_info", [None] * len(data))
        ground_truths = [reward_model["ground_truth"] for reward_model in rows["reward_model"]]
        scores = self.score_texts(rows[self.reward_fn_key], texts, ground_truths, extra_infos)
        reward_tensor = torch.zeros_like(data.batch["responses"], dtype=torch.float32)
        for i, score in enumerate(scores):
            reward_tensor[i, int(lengths[i]) - 1] = score["score"]
        for i in range(min(self.num_examine, len(scores))):
            print(f"[proofgym] {ground_truths[i]}: {scores[i]}\n{texts[i]}")  # verl's num_examine: show a few
        if not return_dict:
            return reward_tensor
        extra = {key: [score[key] for score in scores] for key in ("score", "acc", "cheating")}
        return {"reward_tensor": reward_tensor, "reward_extra_info": extra}

    async def run_single(self, data: Any) -> dict[str, Any]:
        """The reward loop's call: one sample (its last sequence), scored off the event loop."""
        last = data[len(data) - 1:]
        texts, _ = self._decoded(last)
        rows = last.non_tensor_batch
        extra_infos = rows.get("extra_info", [None])
        score = (await asyncio.to_thread(self.score_texts, rows[self.reward_fn_key], texts,
                                         [rows["reward_model"][0]["ground_truth"]], extra_infos))[0]
        return {"reward_score": score["score"], "reward_extra_info": score}
