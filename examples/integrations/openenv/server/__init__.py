"""The OpenEnv server of proofgym."""
