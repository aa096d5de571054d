"""proofgym: Gymnasium environments for proof generation with real verifiers as the dynamics.

``import proofgym`` registers the environments (``proofgym/WholeProof-v0``) and
nothing else: no prover is started and no environment variable is read.
"""

import proofgym.envs  # noqa: F401 - importing it registers the environment ids (once)

__version__ = "0.1.0"
