"""Import s2n-bignum-bench problems from a user's s2n-bignum checkout.

s2n-bignum's proofs need a recent HOL Light (2026); point ``--hol-dir`` at one built from source.
Each architecture is a named base context of the fork server (``needs "arm/proofs/base.ml"``,
about 4 minutes to load; ``x86`` about 7), and each proof file's prefix is a problem context.
On Debian's HOL Light (20230128) the ``arm``/``x86`` bases do not load; only ``common/overlap.ml``
does (base ``s2n-common``: plain HOL Light in the checkout). The report says, per file, why a file
gave no task.

    python -m proofgym.envs.tasks.hol_s2n ~/s2n-bignum --hol-dir ~/hol-light --arch arm --out s2n.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proofgym.envs.errors import VerifierError
from proofgym.envs.tasks.hol_extract import ExtractionReport, TimeoutRule, extract_file
from proofgym.envs.types import Task
from proofgym.envs.verifiers.hol_light import BaseContext

SUITE_NAME = "s2n-bignum"
ARCHS = ("arm", "x86", "common")
BASE_OF = {"arm": "arm", "x86": "x86", "common": "s2n-common"}
#: Files of an architecture's proofs directory that are infrastructure, not problems.
INFRASTRUCTURE = {"base.ml", "instruction.ml", "decode.ml", "simulator.ml", "specifications.ml"}


def s2n_bases(checkout: str | Path, startup_timeout_s: float = 1800.0) -> tuple[BaseContext, ...]:
    """The base contexts of s2n-bignum: ``arm``, ``x86`` and ``s2n-common``, all run in the checkout."""
    root = str(Path(checkout).resolve())
    return (
        BaseContext("arm", setup='needs "arm/proofs/base.ml";;\n', cwd=root, startup_timeout_s=startup_timeout_s),
        BaseContext("x86", setup='needs "x86/proofs/base.ml";;\n', cwd=root, startup_timeout_s=startup_timeout_s),
        BaseContext("s2n-common", cwd=root, startup_timeout_s=startup_timeout_s),
    )


def problem_files(checkout: Path, arch: str) -> list[Path]:
    if arch == "common":
        return sorted(p for p in (checkout / "common").glob("*.ml"))
    return sorted(p for p in (checkout / arch / "proofs").glob("*.ml") if p.name not in INFRASTRUCTURE)


@dataclass
class S2nImportReport:
    checkout: str
    hol_dir: str
    files: dict[str, str] = field(default_factory=dict)  # relative path -> "N tasks" or why none
    kept: dict[str, int] = field(default_factory=dict)
    excluded: dict[str, int] = field(default_factory=dict)
    false_rejections: list[str] = field(default_factory=list)

    def render(self) -> str:
        lines = [f"s2n-bignum import from {self.checkout} with HOL Light at {self.hol_dir}: "
                 f"{sum(self.kept.values())} tasks",
                 "kept per category: " + ", ".join(f"{k} {v}" for k, v in sorted(self.kept.items()))]
        lines += [f"  {rel}: {status}" for rel, status in sorted(self.files.items())]
        lines += [f"  excluded {n:4d}: {why}" for why, n in sorted(self.excluded.items(), key=lambda kv: -kv[1])]
        return "\n".join(lines)


def import_s2n(checkout: str | Path, *, hol_dir: str, archs: Sequence[str] = ARCHS,
               files: Sequence[str] | None = None, validate: bool = True, workers: int = 1,
               rule: TimeoutRule | None = None, verifier: Any = None,
               progress: bool = True) -> tuple[list[Task], S2nImportReport]:
    """Extract (and validate) the problems of ``checkout``; ``files`` restricts to these relative paths."""
    from proofgym.envs.tasks.hol_build import validate_tasks
    from proofgym.envs.verifiers.hol_light import HolLightVerifier

    checkout = Path(checkout).resolve()
    report = S2nImportReport(str(checkout), hol_dir)
    rule = rule or TimeoutRule()
    seen: set[str] = set()
    per_base: dict[str, list[Task]] = {}
    for arch in archs:
        for path in problem_files(checkout, arch):
            rel = str(path.relative_to(checkout))
            if files is not None and rel not in files:
                continue
            extraction = ExtractionReport()
            tasks = extract_file(path, rel=rel, arch=arch, suite=SUITE_NAME, base=BASE_OF[arch],
                                 report=extraction, seen_goals=seen)
            report.files[rel] = f"{len(tasks)} tasks extracted" if tasks else "no prove(`goal`, tactic) phrase"
            per_base.setdefault(BASE_OF[arch], []).extend(tasks)
    if not validate:
        kept = [t for ts in per_base.values() for t in ts]
        report.kept = dict(Counter(t.category for t in kept))
        return kept, report
    owned = verifier is None
    verifier = verifier or HolLightVerifier(hol_dir=hol_dir, bases=s2n_bases(checkout), progress=progress)
    kept: list[Task] = []
    excluded: Counter = Counter()
    say = (lambda line: print(line, file=sys.stderr, flush=True)) if progress else None
    try:
        for base, tasks in per_base.items():
            try:
                verifier.server(base)
            except VerifierError as exc:
                first = next((ln for ln in str(exc).splitlines() if "rror" in ln or "nbound" in ln),
                             str(exc).splitlines()[0])
                why = (f"base context {base!r} does not load on this HOL Light ({first.strip()[:160]}); "
                       "s2n-bignum needs a recent (2026) HOL Light: pass --hol-dir")
                for t in tasks:
                    report.files[t.metadata["source"]] = why
                excluded[f"base {base} does not load"] += len(tasks)
                continue
            before = {t.id for t in kept}
            kept += validate_tasks(tasks, verifier, rule=rule, workers=workers, progress=say, excluded=excluded,
                                   false_rejections=report.false_rejections)
            for rel in {t.metadata["source"] for t in tasks}:
                n = sum(1 for t in kept if t.id not in before and t.metadata["source"] == rel)
                total = sum(1 for t in tasks if t.metadata["source"] == rel)
                report.files[rel] = f"{n}/{total} tasks validated"
    finally:
        if owned:
            verifier.close()
    report.kept = dict(Counter(t.category for t in kept))
    report.excluded = dict(excluded)
    return kept, report


def main(argv: list[str] | None = None) -> int:
    from proofgym.envs.tasks.suites import write_tasks

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkout", help="an s2n-bignum checkout")
    ap.add_argument("--hol-dir", required=True, help="a HOL Light installation new enough for s2n-bignum")
    ap.add_argument("--arch", action="append", choices=ARCHS, help="architectures (default: all)")
    ap.add_argument("--file", action="append", help="only these files (relative to the checkout)")
    ap.add_argument("--out", default=f"{SUITE_NAME}.jsonl")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--k-small", type=float, default=2.0, help="timeout factor when the reference takes < 120 s")
    ap.add_argument("--k-large", type=float, default=5.0)
    ap.add_argument("--no-validate", action="store_true")
    args = ap.parse_args(argv)
    tasks, report = import_s2n(args.checkout, hol_dir=args.hol_dir, archs=args.arch or ARCHS, files=args.file,
                               validate=not args.no_validate, workers=args.workers,
                               rule=TimeoutRule(k_small=args.k_small, k_large=args.k_large))
    write_tasks(args.out, tasks)
    Path(args.out).with_suffix(".report.json").write_text(json.dumps(report.__dict__, indent=2))
    print(report.render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
