"""What every agent shares: requests, generations, sampling parameters, errors, and ``act``.

An agent turns a batch of chat requests into a batch of generations
(:meth:`Agent.generate`). A *strategy* (:mod:`proofgym.agents.strategies`)
decides what to ask (prompts, demonstrations, repair rounds) and parses the
answers into proofs; :meth:`Agent.act` is the plain Gymnasium-side use: a batch of
``WholeProof-v0`` observations in, a batch of proofs out.

Failures of the model side are exceptions, like verifier failures: a
:class:`ModelUnavailable` stops a run (no server, bad key, unknown model); a
single request that fails after its retries comes back as a
:class:`Generation` with ``error`` set, and evaluation records it as an agent
failure, never as a wrong proof.
"""

from __future__ import annotations

import importlib
import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from proofgym.agents.prompts import prompts_for
from proofgym.agents.prompts.base import Message  # noqa: F401 - also a public name here (prompts build them)
from proofgym.envs.errors import DependencyNotInstalled, ProofgymError
from proofgym.envs.parsing import parse_proof, statement_to_strip
from proofgym.envs.types import Task


class AgentError(ProofgymError):
    """The model side broke (not a verdict, never scored 0)."""


class ModelUnavailable(AgentError):
    """The model cannot be used at all: no server, a rejected key, an unknown model. Stops a run."""


def require(module: str, extra: str) -> Any:
    """Import an optional dependency, or raise :class:`DependencyNotInstalled` naming the extra."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise DependencyNotInstalled(
            f"{module} is not installed; install it with: pip install 'proofgym[{extra}]'"
        ) from None


def is_loopback_url(url: str | None) -> bool:
    """Whether ``url`` points at this machine (127.0.0.0/8, ::1, localhost, 0.0.0.0)."""
    if not url:
        return False
    host = urlparse(url if "//" in url else f"//{url}").hostname or ""
    if host in ("localhost", "0.0.0.0") or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class SamplingParams:
    """How to sample. Selene: top-p 0.95, temperature 0 for ACC#1 and 0.5 for ACC#5, 2,048 tokens."""

    temperature: float = 0.0
    top_p: float = 0.95
    max_tokens: int = 2048
    seed: int | None = None
    stop: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")


@dataclass(frozen=True)
class Request:
    """One chat request. ``task``/``sample``/``attempt`` say what it is for (reference and scripted agents use them)."""

    messages: tuple[Message, ...]
    task: Task | None = None
    sample: int = 0
    attempt: int = 0
    sampling: SamplingParams | None = None  # overrides the agent's default


@dataclass(frozen=True)
class Generation:
    """The model's answer to one request, with its cost.

    Attributes:
        text: The raw reply.
        is_proof: The text is already a proof (reference/scripted agents): the parser leaves it alone.
        prompt_tokens: Input tokens, as the backend counts them (0 when it does not say).
        completion_tokens: Output tokens.
        cost_usd: Price of the request when the agent knows its prices, else ``None``.
        seconds: Wall seconds of the request, retries and waits included.
        retries: Retries after rate limits, 5xx answers, timeouts or lost connections.
        finish_reason: ``stop``, ``length``, ... when the backend says.
        error: Set when this request failed after its retries; ``text`` is then empty.
    """

    text: str
    is_proof: bool = False
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = None
    seconds: float = 0.0
    retries: int = 0
    finish_reason: str = ""
    error: str | None = None

    def info(self) -> dict[str, Any]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cost_usd": self.cost_usd,
            "gen_s": round(self.seconds, 4),
            "retries": self.retries,
            "finish_reason": self.finish_reason,
        }


@dataclass(frozen=True)
class Prices:
    """USD per million input and output tokens (``None``: unknown, cost not reported)."""

    input_per_mtok: float | None = None
    output_per_mtok: float | None = None

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float | None:
        if self.input_per_mtok is None and self.output_per_mtok is None:
            return None
        return (prompt_tokens * (self.input_per_mtok or 0.0) + completion_tokens * (self.output_per_mtok or 0.0)) / 1e6


class Agent:
    """Base class of agents: ``generate`` a batch of requests; ``act`` on a batch of observations.

    Subclasses implement :meth:`generate`. ``name`` identifies the kind of agent
    (``openai``, ``local``...), ``model`` the model it runs (``""`` for none), and
    ``sampling`` the default sampling parameters (a request may override them).
    """

    name: str = "agent"
    model: str = ""
    sampling: SamplingParams = SamplingParams()

    def generate(self, requests: Sequence[Request]) -> list[Generation]:
        raise NotImplementedError

    def act(
        self,
        observations: Sequence[Mapping[str, Any]] | Mapping[str, Any],
        *,
        system: str = "coq",
        tasks: Mapping[str, Task] | None = None,
    ) -> Any:
        """Proofs for a batch of ``WholeProof-v0`` observations (zero-shot prompt, repair with feedback).

        Args:
            observations: Observations from ``WholeProof-v0`` (``task_id``, ``statement``,
                ``context``, ``feedback``...). A single observation (a mapping) gets a single proof back.
            system: The prover of these tasks when an observation has no ``system`` key, for the prompt.
            tasks: Tasks by id, when the agent needs them (reference and scripted agents).

        Returns:
            For a batch: the proofs and, per proof, an info dict (tokens, cost, raw reply, parse notes).
            For one observation: its proof.
        """
        if isinstance(observations, Mapping):
            actions, _ = self.act([observations], system=system, tasks=tasks)
            return actions[0]
        requests = []
        for obs in observations:
            obs_system = str(obs.get("system") or system)
            prompts = prompts_for(obs_system)
            task = (tasks or {}).get(str(obs.get("task_id", ""))) or _task_from_observation(obs, obs_system)
            messages = prompts.messages(task, context=str(obs.get("context", "")))
            if obs.get("feedback"):
                messages = [*messages, {"role": "user", "content": prompts.repair(str(obs["feedback"]))}]
            requests.append(Request(tuple(messages), task=task, attempt=int(obs.get("attempt", 0))))
        actions, infos = [], []
        for request, gen in zip(requests, self.generate(requests), strict=True):
            proof = gen.text if gen.is_proof else parse_proof(gen.text, statement=statement_to_strip(request.task)).proof
            actions.append(proof)
            infos.append({**gen.info(), "raw": gen.text, "error": gen.error})
        return actions, infos

    def describe(self) -> dict[str, Any]:
        """What goes into a run's config.json (never secrets)."""
        return {"agent": self.name, "model": self.model, "sampling": _sampling_dict(self.sampling)}

    def close(self) -> None:
        """Release what the agent holds (clients, models). Idempotent."""

    def __enter__(self) -> Agent:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _sampling_dict(s: SamplingParams) -> dict[str, Any]:
    return {"temperature": s.temperature, "top_p": s.top_p, "max_tokens": s.max_tokens, "seed": s.seed,
            "stop": list(s.stop)}


def _task_from_observation(obs: Mapping[str, Any], system: str) -> Task:
    return Task(id=str(obs.get("task_id", "task")), system=system, context=str(obs.get("context", "")),
                statement=str(obs.get("statement", "")), reference_proof="",
                metadata={"description": str(obs.get("description", ""))})
