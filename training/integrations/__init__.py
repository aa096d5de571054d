"""Adapters that put proofgym inside each trainer's environment interface (TRL, OpenEnv, verifiers, verl, OpenRLHF).

Each module is a thin shape over :mod:`proofgym.training.integrations.core`; a library that is not
installed is imported only when its adapter is used.
"""
