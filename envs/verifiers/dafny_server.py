"""The old path of :mod:`proofgym.envs.verifiers.dafny.server` (kept for one release; import from there).

``ServerTimeout`` is now :class:`~proofgym.envs.verifiers.warm.DeadlinePassed`, and ``ServerDied`` is
:class:`~proofgym.envs.verifiers.warm.ProcessDied`: one pair of exceptions for every warm prover.
"""

from proofgym.envs.verifiers.dafny.server import CLIENT_EOM, SERVER_EOM, DafnyServer, ServerReply
from proofgym.envs.verifiers.warm import DeadlinePassed as ServerTimeout
from proofgym.envs.verifiers.warm import ProcessDied as ServerDied

__all__ = ["CLIENT_EOM", "SERVER_EOM", "DafnyServer", "ServerDied", "ServerReply", "ServerTimeout"]
