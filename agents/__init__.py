"""Policies that map observations to actions (reference, scripted; API and local models in later issues)."""
