"""The old path of :mod:`proofgym.envs.verifiers.coq.idetop` (kept for one release; import from there).

``CallTimeout`` is now :class:`~proofgym.envs.verifiers.warm.DeadlinePassed`, and ``ProcessDied`` is
:class:`~proofgym.envs.verifiers.warm.ProcessDied`: one pair of exceptions for every warm prover.
"""

from proofgym.envs.verifiers.coq.idetop import GoalSnapshot, IdeTop, Reply, richpp_text
from proofgym.envs.verifiers.warm import DeadlinePassed as CallTimeout
from proofgym.envs.verifiers.warm import ProcessDied

__all__ = ["CallTimeout", "GoalSnapshot", "IdeTop", "ProcessDied", "Reply", "richpp_text"]
