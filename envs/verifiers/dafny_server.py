"""The old path of :mod:`proofgym.envs.verifiers.dafny.server` (kept for one release; import from there)."""

from proofgym.envs.verifiers.dafny.server import (
    CLIENT_EOM,
    SERVER_EOM,
    DafnyServer,
    ServerDied,
    ServerReply,
    ServerTimeout,
)

__all__ = [
    "CLIENT_EOM",
    "DafnyServer",
    "SERVER_EOM",
    "ServerDied",
    "ServerReply",
    "ServerTimeout",
]
