"""proofgym for OpenRLHF: ``--agent_func_path`` (multi-turn repair) or ``--remote_rm_url`` (one turn) this file.

Labels are proofgym task ids; ``PROOFGYM_SUITE`` names the suite and ``PROOFGYM_VERIFIER_URL`` a
running ``proofgym serve-verifier`` (see docs/integrations/openrlhf.md).
"""

from proofgym.training.integrations.openrlhf_agent import AgentExecutor, AgentInstance, reward_func

__all__ = ["AgentExecutor", "AgentInstance", "reward_func"]
