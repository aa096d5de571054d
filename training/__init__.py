"""Training with TRL (SFT, GRPO). Requires the ``train`` extra: ``pip install 'proofgym[train]'``."""
