"""Policies that map observations to actions, in batches.

- :mod:`~proofgym.agents.base`: requests, generations, sampling, the :class:`Agent` base class;
- :mod:`~proofgym.agents.scripted`: the reference agent and scripted replies (no model);
- :mod:`~proofgym.agents.api`: OpenAI-compatible servers and Anthropic (``pip install 'proofgym[api]'``);
- :mod:`~proofgym.agents.hf`: local checkpoints with ``transformers`` (``pip install 'proofgym[train]'``);
- :mod:`~proofgym.agents.serve`: ``proofgym serve-model``, an OpenAI-compatible server for a checkpoint;
- :mod:`~proofgym.envs.parsing`: from a reply to a proof (last fenced block, Unicode normalised);
- :mod:`~proofgym.agents.prompts`: prompt families per system; :mod:`~proofgym.agents.retrieval`: BM25;
- :mod:`~proofgym.agents.strategies`: the seeds' harnesses (plain, Selene...) on any agent.

Heavy or optional dependencies are imported only by the modules that need them.
"""

from proofgym.agents.base import (
    Agent,
    AgentError,
    Generation,
    ModelUnavailable,
    Prices,
    Request,
    SamplingParams,
)
from proofgym.agents.scripted import ReferenceAgent, ScriptedAgent
from proofgym.envs.parsing import ParsedProof, parse_proof

__all__ = [
    "Agent", "AgentError", "Generation", "ModelUnavailable", "ParsedProof", "Prices", "ReferenceAgent", "Request",
    "SamplingParams", "ScriptedAgent", "parse_proof",
]
