"""proofgym as a verifiers taskset: ``vf-eval proofgym-verifiers``; the taskset is proofgym's own."""

from proofgym.training.integrations.verifiers_env import ProofgymTaskset, load_environment

__all__ = ["ProofgymTaskset", "load_environment"]
