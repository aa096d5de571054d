"""proofgym as a verifiers taskset and its env: ``vf-eval proofgym-verifiers``; both are proofgym's own."""

from proofgym.training.integrations.verifiers_env import ProofgymRepairEnv, ProofgymTaskset, load_environment

__all__ = ["ProofgymRepairEnv", "ProofgymTaskset", "load_environment"]
