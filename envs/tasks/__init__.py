"""Task suites: the JSONL format, loading, and the builders (``proofgym build``)."""

from proofgym.envs.tasks.suites import known_suites, load_tasks, resolve_suite, write_tasks

__all__ = ["known_suites", "load_tasks", "resolve_suite", "write_tasks"]
