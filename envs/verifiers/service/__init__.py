"""The verifier pool behind HTTP, and its clients.

- :mod:`~proofgym.envs.verifiers.service.server`: ``proofgym serve-verifier``, a pool (local workers or Ray
  actors) that many trainers and env processes share, behind the request guard;
- :mod:`~proofgym.envs.verifiers.service.client`: standard-library clients: a batch client, the service as one
  system's verifier (it pickles to a URL and a token) and a TRL-style reward function.
"""

from __future__ import annotations

from proofgym.envs.verifiers.service.client import (
    ServiceVerifier,
    VerifierServiceClient,
    result_from_dict,
    service_reward_function,
)
from proofgym.envs.verifiers.service.server import TOKEN_ENV, ServiceConfig, ServiceConfigError, VerifierService

__all__ = [
    "TOKEN_ENV",
    "ServiceConfig",
    "ServiceConfigError",
    "ServiceVerifier",
    "VerifierService",
    "VerifierServiceClient",
    "result_from_dict",
    "service_reward_function",
]
