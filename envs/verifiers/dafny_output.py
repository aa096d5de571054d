"""The old path of :mod:`proofgym.envs.verifiers.dafny.output` (kept for one release; import from there)."""

from proofgym.envs.verifiers.dafny.output import (
    DafnyOutput,
    Diagnostic,
    Summary,
    categorize,
    parse_output,
    parse_summary,
    primary_category,
    taxonomy_coverage,
)

__all__ = [
    "DafnyOutput",
    "Diagnostic",
    "Summary",
    "categorize",
    "parse_output",
    "parse_summary",
    "primary_category",
    "taxonomy_coverage",
]
