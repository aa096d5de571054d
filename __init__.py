"""proofgym: Gymnasium environments for proof generation with real verifiers as the dynamics.

``import proofgym`` registers the environments (``proofgym/WholeProof-v0``) and
nothing else: no prover is started and no environment variable is read.
"""

from proofgym.envs import register_envs as _register_envs

__version__ = "0.1.0"

_register_envs()
