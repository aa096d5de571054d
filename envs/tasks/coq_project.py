"""Project-level Coq suites: Selene's benchmark on real verification projects (``proofgym build coq-project``).

Selene's lemmas come from a verification project, each isolated against a dependency
session built once. Here the project is an installed Coq library (``--lib stdpp``:
its ``.v`` sources and compiled ``.vo`` files under ``$(coqc -where)/user-contrib``,
where Debian's ``libcoq-*`` packages put them) or a project the user has built
(``--project DIR``: a ``_CoqProject`` or a dune ``coq.theory``). The method is the
stdlib suite's, reused, not copied:

* lemmas are cut by the sentence lexer (:func:`~proofgym.envs.tasks.coq_extract.extract_sources`);
  what cannot be isolated (functor bodies, open module types, Program/mutual/Admitted
  lemmas, ...) is excluded and counted per reason;
* P1/P2/P3 by proof lines, sampled 160/120/80 with a seed (:func:`~proofgym.envs.tasks.coq_extract.sample_suite`);
* a task is kept only if its reference verifies in isolation (warm check plus the
  coqc + coqchk audit) and ``Admitted`` and ``exact <original>`` are rejected
  (:func:`~proofgym.envs.tasks.build.validate_tasks`).

Isolation and the leak rules. The dependency is the project's compiled ``.vo`` files,
found through the project's load path (user-contrib is on Coq's default load path;
a ``_CoqProject``'s ``-Q``/``-R`` are passed to every prover process): they are
built once, by the package or the user, and every task, worker and run reuses them.
The compiled ``.vo`` of the lemma's *own* file is on that load path too, so the
original lemma, and everything after it in its file, is one ``Require`` away. Hence:

* the context is the file's source prefix, replayed by the verifier as its own
  top-level file (``Top``), never a ``Require`` of the file's ``.vo``: the prefix
  states only what comes before the lemma;
* a ``Require`` in a submission may only name a library the context already loads
  (the verifier refuses ``Require <the original file>``: ``ERROR`` before the proof,
  ``CHEATING`` inside it);
* the build asks Coq whether the context itself loads the original file (through a
  chain of ``Require``s, an ``-require`` argument, a project prelude): such a task is
  excluded, counted as ``context loads the original file``;
* the verifier's leak check (proof term read after ``Set Printing All``) refuses the
  original constant and, when its library is loaded, every constant of that file.

What is cached: the ``.vo`` files of the dependencies are the project's own (built once, by
the package or the user). A context's prefix is compiled once by the Coq verifier's isolation
cache (:mod:`proofgym.envs.verifiers.coq.isolation`: up to the first Section still open at the
lemma, under ``$PROOFGYM_CACHE/coq-isolation``, shared by every worker and run), and the warm
``coqidetop`` session per file (loaded once, then extended lemma by lemma along the file) is the
per-worker cache. The audit (``coqc`` + ``coqchk`` of context, statement and proof) compiles
the raw context, never the cache: it is most of a task's validation time.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import shlex
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from proofgym.envs.errors import ProofgymError
from proofgym.envs.tasks.build import BuildReport, validate_tasks
from proofgym.envs.tasks.coq_extract import (
    DEFAULT_SAMPLE_COUNTS,
    ExtractionStats,
    SourceFile,
    coq_where,
    extract_sources,
    sample_suite,
)
from proofgym.envs.tasks.suites import suite_dir, write_tasks
from proofgym.envs.types import Task

#: The Debian package that installs each library this module knows by name.
LIBRARY_PACKAGES: Mapping[str, str] = {
    "stdpp": "libcoq-stdpp",
    "iris": "libcoq-iris",
    "mathcomp": "libcoq-mathcomp-ssreflect",
}



class ProjectError(ProofgymError):
    """A project or library that cannot be read as Coq sources with a load path. The message says what to do."""


@dataclass(frozen=True)
class LoadPath:
    """One ``-Q``/``-R`` binding: the folder of compiled files and its logical name."""

    flag: str  # "-Q" or "-R"
    vo_dir: Path  # where the .vo files are (for dune, under _build/default)
    logical: str
    src_dir: Path  # where the .v sources are (the same folder, except for dune)

    def args(self) -> tuple[str, str, str]:
        return (self.flag, str(self.vo_dir), self.logical)


@dataclass
class CoqProject:
    """A Coq project as the builder sees it: sources, logical names and the prover's load path.

    Attributes:
        name: Short name, e.g. ``stdpp``; the suite is ``coq-<name>``.
        origin: Where it came from, for the report.
        sources: The ``.v`` files, with their logical names.
        coq_args: Extra prover arguments (``-Q``/``-R`` with absolute folders). Empty for an
            installed library: user-contrib is on Coq's default load path.
        ignored_args: ``_CoqProject`` arguments that were not passed on (``-arg``, ``-I``), and why.
        files_excluded: Source files left out, with why (e.g. not compiled).
    """

    name: str
    origin: str
    sources: list[SourceFile]
    coq_args: tuple[str, ...] = ()
    ignored_args: list[str] = field(default_factory=list)
    files_excluded: dict[str, str] = field(default_factory=dict)

    @property
    def suite(self) -> str:
        return f"coq-{self.name}"


# -- finding a project ---------------------------------------------------------------------------------


def user_contrib() -> Path:
    """``$(coqc -where)/user-contrib``, where installed Coq libraries live (Debian's ``libcoq-*`` too)."""
    return coq_where() / "user-contrib"


def installed_library(name: str, *, root: Path | None = None) -> CoqProject:
    """The installed library ``name`` (its folder under user-contrib, logical root ``name``).

    Raises:
        ProjectError: if it is not installed; the message names the apt package.
    """
    if not re.fullmatch(r"[A-Za-z_][\w]*", name):
        raise ProjectError(f"--lib takes a library's logical root such as stdpp, iris or mathcomp, got {name!r}")
    base = user_contrib() if root is None else Path(root)
    folder = base / name
    if not folder.is_dir():
        package = LIBRARY_PACKAGES.get(name)
        have = sorted(p.name for p in base.iterdir() if p.is_dir()) if base.is_dir() else []
        hint = (f"install it: apt-get install -y {package}" if package
                else "install its Debian package (apt-cache search libcoq) or pass --project DIR")
        raise ProjectError(f"Coq library {name!r} is not installed (no {folder}); {hint}. "
                           f"Installed here: {', '.join(have) or 'none'}")
    binding = LoadPath("-R", folder, name, folder)
    project = CoqProject(name=name, origin=f"installed library {folder}", sources=[])
    project.sources = [replace(s, id_stem=s.logical.removeprefix(name + "."))
                       for s in _sources([binding], project.files_excluded, ignore_dune=False)]
    if not project.sources:
        raise ProjectError(f"{folder} has no compiled .v sources (a .v with its .vo beside it); "
                           "reinstall the package, or build the library first")
    return project


def read_project(directory: Path, *, name: str | None = None) -> CoqProject:
    """A project the user has built: its ``_CoqProject``, else its dune ``coq.theory`` stanzas.

    The files are those the ``_CoqProject`` lists, else every ``.v`` under its ``-Q``/``-R``
    folders; each must have been compiled (a ``.vo`` beside it, or in ``_build/default`` for
    dune), since the tasks' contexts ``Require`` them.

    Raises:
        ProjectError: if there is neither, or it binds no folder.
    """
    directory = Path(directory).expanduser().resolve()
    if not directory.is_dir():
        raise ProjectError(f"--project {directory} is not a folder; pass the folder that holds _CoqProject")
    name = name or re.sub(r"\W", "_", directory.name) or "project"
    coq_project = directory / "_CoqProject"
    if coq_project.is_file():
        bindings, files, ignored = _parse_coq_project(coq_project.read_text(encoding="utf-8"), directory)
        project = CoqProject(name=name, origin=f"_CoqProject {coq_project}", sources=[], ignored_args=ignored)
        project.coq_args = tuple(a for b in bindings for a in b.args())
        if files:
            project.sources = _listed_sources(files, bindings, directory, project.files_excluded)
        else:
            project.sources = _sources(bindings, project.files_excluded, ignore_dune=True)
    else:
        bindings = _dune_theories(directory)
        if not bindings:
            raise ProjectError(f"{directory} has no _CoqProject and no dune file with a (coq.theory (name ...)) "
                               "stanza; write a _CoqProject (e.g. `-R theories MyProj` and the .v files)")
        project = CoqProject(name=name, origin=f"dune project {directory}", sources=[])
        project.coq_args = tuple(a for b in bindings for a in b.args())
        project.sources = _sources(bindings, project.files_excluded, ignore_dune=True)
    if not project.sources:
        why = "; ".join(f"{k}: {v}" for k, v in sorted(project.files_excluded.items())[:3])
        raise ProjectError(f"no compiled sources in {directory} ({why or 'no .v files under its load path'}); "
                           "build the project first (make, or dune build), then run this again")
    return project


def _parse_coq_project(text: str, directory: Path) -> tuple[list[LoadPath], list[str], list[str]]:
    """(bindings, listed .v files, what was not passed on) of a ``_CoqProject``."""
    tokens: list[str] = []
    for line in text.splitlines():
        try:
            tokens += shlex.split(line, comments=True)
        except ValueError as exc:
            raise ProjectError(f"_CoqProject line {line!r} does not parse: {exc}") from None
    bindings: list[LoadPath] = []
    files: list[str] = []
    ignored: list[str] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok in ("-Q", "-R"):
            if i + 2 >= len(tokens):
                raise ProjectError(f"_CoqProject: {tok} needs a folder and a logical name")
            folder = (directory / tokens[i + 1]).resolve()
            logical = "" if tokens[i + 2] == '""' else tokens[i + 2]
            bindings.append(LoadPath(tok, folder, logical, folder))
            i += 3
        elif tok == "-I":
            ignored.append(f"-I {tokens[i + 1] if i + 1 < len(tokens) else ''} (OCaml plugin folders are not loaded)")
            i += 2
        elif tok == "-arg":
            # Not passed on: a warning switch changes no verdict (and coqchk, which the audit runs with
            # the same load path, rejects -w), and any other argument could change the logic the tasks
            # are checked in (-type-in-type, -impredicative-set). The report lists them.
            ignored.append(f"-arg {tokens[i + 1] if i + 1 < len(tokens) else ''} (prover arguments are not passed on)")
            i += 2
        elif tok.endswith(".v"):
            files.append(tok)
            i += 1
        else:
            ignored.append(f"{tok} (not understood)")
            i += 1
    if not bindings:
        raise ProjectError("_CoqProject binds no folder; add a line such as `-R theories MyProj`")
    return bindings, files, ignored


def _dune_theories(directory: Path) -> list[LoadPath]:
    """The ``(coq.theory (name X))`` stanzas under ``directory``, bound to their ``_build/default`` copies."""
    out: list[LoadPath] = []
    for dune in sorted(directory.rglob("dune")):
        if "_build" in dune.relative_to(directory).parts or not dune.is_file():
            continue
        text = dune.read_text(encoding="utf-8", errors="replace")
        if "coq.theory" not in text:
            continue
        m = re.search(r"\(\s*name\s+([\w.]+)\s*\)", text[text.index("coq.theory"):])
        if m:
            rel = dune.parent.relative_to(directory)
            out.append(LoadPath("-Q", directory / "_build" / "default" / rel, m.group(1), dune.parent))
    return out


def _logical_name(binding: LoadPath, path: Path) -> tuple[str, str]:
    """(logical name, id stem) of the source ``path`` under ``binding``.

    The stem is the logical name: a project's bindings may have different roots. An installed
    library's ids leave its root out (:func:`installed_library`).
    """
    rel = path.relative_to(binding.src_dir)
    dotted = ".".join((*rel.parts[:-1], rel.stem))
    logical = f"{binding.logical}.{dotted}" if binding.logical else dotted
    return logical, logical


def _vo_of(binding: LoadPath, path: Path) -> Path:
    return binding.vo_dir / path.relative_to(binding.src_dir).with_suffix(".vo")


def _sources(bindings: Sequence[LoadPath], excluded: dict[str, str], *, ignore_dune: bool) -> list[SourceFile]:
    out: list[SourceFile] = []
    seen: set[Path] = set()
    for binding in bindings:
        for path in sorted(binding.src_dir.rglob("*.v"), key=lambda p: p.relative_to(binding.src_dir).as_posix()):
            rel_parts = path.relative_to(binding.src_dir).parts
            if path in seen or (ignore_dune and "_build" in rel_parts):
                continue
            seen.add(path)
            out.append(_source(binding, path, excluded))
    return [s for s in out if s is not None]


def _listed_sources(files: Sequence[str], bindings: Sequence[LoadPath], directory: Path,
                    excluded: dict[str, str]) -> list[SourceFile]:
    out: list[SourceFile] = []
    for name in files:
        path = (directory / name).resolve()
        # The innermost binding that holds the file names it (as coqc does for -R nested in -R).
        holders = [b for b in bindings if path.is_relative_to(b.src_dir)]
        if not path.is_file():
            excluded[name] = "listed in _CoqProject but missing"
            continue
        if not holders:
            excluded[name] = "outside every -Q/-R folder of _CoqProject (no logical name)"
            continue
        binding = max(holders, key=lambda b: len(b.src_dir.parts))
        source = _source(binding, path, excluded)
        if source is not None:
            out.append(source)
    return out


def _source(binding: LoadPath, path: Path, excluded: dict[str, str]) -> SourceFile | None:
    logical, stem = _logical_name(binding, path)
    rel = logical.replace(".", "/") + ".v"
    if not _vo_of(binding, path).is_file():
        excluded[rel] = "not compiled (no .vo): its tasks' contexts could not load what it requires"
        return None
    return SourceFile(path, rel, logical, stem)


# -- extraction and build ------------------------------------------------------------------------------


def extract_project(project: CoqProject, *, progress: bool = False, include_long: bool = False,
                    timeout_s: float = 60.0) -> tuple[list[Task], ExtractionStats]:
    """Every lemma of the project, as tasks of suite ``coq-<name>`` with ids ``coq.<name>.<file>.<lemma>``.

    Each task's metadata also names its original file's logical name (``library``), which the
    build uses to ask Coq whether the context loads it, and the project's load path.
    """
    stats = ExtractionStats(files_excluded=dict(project.files_excluded))
    tasks, stats = extract_sources(project.sources, id_prefix=f"coq.{project.name}", stats=stats,
                                   progress=progress, include_long=include_long, suite=project.suite,
                                   timeout_s=timeout_s, description=f"extracting {project.name}")
    by_file = {s.rel_path: s for s in project.sources}
    out = []
    for task in tasks:
        source = by_file[task.metadata["file"]]
        # source_path: the .v file itself, for retrieval (Selene's sim/dep read the project's sources).
        meta = {**task.metadata, "library": source.logical, "project": project.name,
                "source_path": str(source.path)}
        if project.coq_args:
            meta["coq_args"] = list(project.coq_args)
        out.append(replace(task, metadata=meta))
    return out, stats


def suite_load_path(tasks: Sequence[Task]) -> tuple[str, ...]:
    """The Coq load path a suite's tasks carry (``metadata.coq_args``), for the verifier's ``extra_args``.

    A project suite's tasks carry their project's ``-Q``/``-R`` bindings, so that ``proofgym eval``
    (and the baselines) check them with no load path from the user. Only bindings are accepted
    (``-Q``/``-R``, an absolute folder, a logical name): any other prover argument in a task
    file could change the logic the proofs are checked in, as :func:`_parse_coq_project` says.

    Returns:
        The one load path of the suite's Coq tasks; empty when none carries one (coq-stdlib, or an
        installed library, which is on Coq's default load path).

    Raises:
        ProjectError: the tasks carry different load paths, something other than bindings, or a
            folder that is not here; the message says what to do.
    """
    found: dict[tuple[str, ...], str] = {}
    for task in tasks:
        args = task.metadata.get("coq_args") if task.system == "coq" else None
        if args:
            found.setdefault(tuple(str(a) for a in args), task.id)
    if not found:
        return ()
    if len(found) > 1:
        a, b = list(found.values())[:2]
        raise ProjectError(f"the suite's tasks carry different load paths (metadata.coq_args of {a} and {b}); "
                           "evaluate each project's suite on its own")
    (args,) = found
    if len(args) % 3 or any(args[i] not in ("-Q", "-R") for i in range(0, len(args), 3)):
        raise ProjectError(f"task {found[args]}: metadata.coq_args {list(args)!r} holds more than -Q/-R bindings "
                           "(a folder and a logical name each); only bindings are passed to the prover")
    missing = [args[i + 1] for i in range(0, len(args), 3)
               if not Path(args[i + 1]).is_absolute() or not Path(args[i + 1]).is_dir()]
    if missing:
        raise ProjectError(f"the suite's load path names {', '.join(missing)}, which is not a folder here; "
                           "rebuild the suite on this machine (proofgym build coq-project --project DIR)")
    return args


def parse_counts(text: str) -> dict[str, int]:
    """``"160,120,80"`` -> ``{"P1": 160, "P2": 120, "P3": 80}``; raises ValueError with what is wrong."""
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise ValueError(f"--per-category takes three counts for P1,P2,P3 such as 160,120,80, got {text!r}")
    return dict(zip(("P1", "P2", "P3"), (int(p) for p in parts), strict=True))


@dataclass
class ProjectBuildReport:
    """What ``proofgym build coq-project`` did: the stdlib builder's report and the project's own facts."""

    report: BuildReport
    origin: str
    coq_args: list[str]
    ignored_args: list[str]
    files: dict[str, Any]
    seed: int
    per_category: dict[str, int]
    build_s: float = 0.0
    #: When only a seeded subset of the sample was validated: the full sample's counts per category.
    subset_of: dict[str, int] | None = None
    #: How far validation got: tasks in the sample, validated (kept or excluded), resumed from the ledger,
    #: rounds run now, and the wall seconds of every round so far (this run's and the ledger's).
    validation: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {**self.report.to_dict(), "origin": self.origin, "coq_args": self.coq_args,
                "ignored_args": self.ignored_args, "files": self.files, "seed": self.seed,
                "per_category": self.per_category, "subset_of": self.subset_of, "build_s": self.build_s,
                "validation": self.validation}

    def render(self) -> str:
        files = self.files
        lines = [self.report.render(),
                 f"source: {self.origin}; files {files['scanned']} scanned, {len(files['skipped'])} skipped "
                 f"(lex errors), {len(files['excluded'])} excluded; build {self.build_s} s"]
        v = self.validation
        if v and v["validated"] < v["tasks"]:
            what = ("whole pieces of files, not a uniform draw" if v.get("order", "stratified") == "file"
                    else "a seeded, category-stratified prefix")
            lines.append(f"validated {v['validated']} of the {v['tasks']} sampled tasks so far ({what}): "
                         "run the same command again to continue")
        if self.subset_of:
            lines.append("a seeded subset of the sample " + ", ".join(
                f"{k} {v}" for k, v in sorted(self.subset_of.items())) + " (--subset)")
        if self.coq_args:
            lines.append("load path: " + " ".join(self.coq_args))
        lines += [f"ignored from _CoqProject: {a}" for a in self.ignored_args]
        return "\n".join(lines)


def build_coq_project(
    project: CoqProject,
    *,
    out: Path | None = None,
    seed: int = 0,
    counts: Mapping[str, int] | None = None,
    workers: int = 2,
    validate: bool = True,
    limit: int = 0,
    progress: bool = True,
    subset: Mapping[str, int] | None = None,
    budget_s: float = 0.0,
    round_size: int = 0,
    order: str = "file",
    retry_excluded: bool = False,
) -> ProjectBuildReport:
    """Extract, sample and validate the suite ``coq-<name>``; write it and its ``.report.json`` beside it.

    ``subset`` validates (and keeps) only a seeded subset of the sample, per category: a uniform
    draw from the ``counts`` sample, so that what is measured on it stands for the full-size suite
    when validating all of it costs more time than there is. The report gives both sizes.

    ``order="file"`` (the default) validates what is left a source file at a time, in pieces of at
    most ``round_size`` tasks (default 24) along the file: one warm session and one audit compile per
    piece, instead of one cold load and one compile of the file's prefix per task (about 10× faster
    on stdpp). A build stopped part-way then holds whole pieces of files, not a uniform draw.
    ``order="stratified"`` validates in rounds (``round_size`` tasks, default ``8 * workers``) in a seeded
    order that keeps every prefix stratified by category (:func:`validation_order`): a stopped build
    is a uniform, stratified draw from the sample. ``retry_excluded`` validates again the tasks the
    ledger's rounds excluded (after a fix to the verifier or the library). After each piece or round the
    suite, its report and a ledger (``<suite>.validation.jsonl``: each round's task ids and outcome,
    a kept task as its id, its hash and its allowed axioms: a few KB, which can be carried to another
    machine's cache or kept in a repository) are written, so that a build stopped by ``budget_s`` (no round starts after it), a deadline or
    Ctrl-C leaves a suite of the tasks validated so far, a uniform stratified draw from the sample,
    and the same command run again continues where it stopped (the ledger's rounds are reused
    when the source, seed and sample are the same). The report says how much was validated.
    """
    start = time.monotonic()
    out = Path(out) if out else suite_dir() / f"{project.suite}.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)  # a fresh cache has no suites/ folder yet (the ledger goes first)
    counts = dict(DEFAULT_SAMPLE_COUNTS if counts is None else counts)
    tasks, stats = extract_project(project, progress=progress)
    sampled = sample_suite(tasks, counts, seed=seed)
    full = dict(Counter(t.category for t in sampled))
    if subset:
        sampled = subsample(sampled, subset, seed=seed)
    if limit:
        sampled = sampled[:limit]
    report = BuildReport(project.suite, out)
    report.extracted = dict(stats.categories)
    report.extraction_exclusions = dict(stats.excluded)
    report.sampled = dict(Counter(t.category for t in sampled))
    result = ProjectBuildReport(
        report, project.origin, list(project.coq_args), project.ignored_args,
        {"scanned": stats.files_scanned, "skipped": stats.files_skipped, "excluded": stats.files_excluded},
        seed, counts, 0.0, subset_of=full if subset else None)

    def write(kept: list[Task]) -> None:
        report.kept = dict(Counter(t.category for t in kept))
        write_tasks(out, sorted(kept, key=lambda t: t.id))
        result.build_s = round(time.monotonic() - start, 1)
        out.with_suffix(".report.json").write_text(json.dumps(result.to_dict(), indent=2) + "\n", encoding="utf-8")

    if not validate:
        report.validated = False
        write(sampled)
        return result
    identity = {"origin": project.origin, "coq_args": list(project.coq_args), "seed": seed,
                "sample": sorted(t.id for t in sampled)}
    ledger = out.with_suffix(".validation.jsonl")
    rounds = _read_ledger(ledger, identity)
    if not rounds:
        ledger.write_text(json.dumps({"identity": identity}) + "\n", encoding="utf-8")
    elif any("sha256" not in e for r in rounds for e in r["kept"]):  # written with whole tasks: made compact
        rounds = [_compact_round(r, {t.id: t for t in sampled}) for r in rounds]
        ledger.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n"
                                  for row in [{"identity": identity}, *rounds]), encoding="utf-8")
    kept, stale = _kept_from_ledger(rounds, {t.id: t for t in sampled})
    if retry_excluded and rounds:  # the ledger forgets its exclusions, which are decided again below
        ids = {t.id for t in kept}
        rounds = [{**r, "ids": [i for i in r["ids"] if i in ids], "excluded": {}, "false_rejections": [],
                   "exclusions": {}} for r in rounds]
        ledger.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n"
                                  for row in [{"identity": identity}, *rounds]), encoding="utf-8")
    rounds = [_forget_harness_failures(r) for r in rounds]  # not the task's doing: validated again, never lost
    decided = {i for r in rounds for i in r["ids"]} - stale
    for r in rounds:
        report.excluded.update(r["excluded"])
        report.false_rejections += r["false_rejections"]
        report.exclusions.update(r.get("exclusions", {}))  # a ledger written before issue 26 has only counts
    todo = [t for t in validation_order(sampled, seed=seed) if t.id not in decided]
    if order not in ("file", "stratified"):
        raise ProjectError(f"order must be 'file' or 'stratified', not {order!r}")
    size = max(1, round_size or (24 if order == "file" else 8 * max(1, workers)))
    result.validation = {"tasks": len(sampled), "validated": len(decided), "resumed": len(decided), "rounds": 0,
                         "wall_s": round(sum(r.get("wall_s", 0.0) for r in rounds), 1), "order": order}
    write(kept)

    def over_budget() -> bool:
        return bool(budget_s) and time.monotonic() - start >= budget_s

    def record(row: dict[str, Any], given: Mapping[str, Task]) -> None:  # a round or piece done: ledger, suite, report
        with ledger.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
        kept.extend(_kept_from_ledger([row], given)[0])
        report.excluded.update(row["excluded"])
        report.false_rejections += row["false_rejections"]
        report.exclusions.update(row.get("exclusions", {}))
        result.validation["validated"] += len(row["ids"])
        result.validation["rounds"] += 1
        result.validation["wall_s"] = round(result.validation["wall_s"] + row["wall_s"], 1)
        write(kept)

    if order == "file" and todo and not over_budget():
        _validate_by_file(todo, workers=workers, size=size, progress=progress, coq_args=project.coq_args,
                          record=record, stop=over_budget)
        todo = []
    while todo and not over_budget():
        batch, todo = todo[:size], todo[size:]
        record(_validate_round(batch, workers=workers, progress=progress, coq_args=project.coq_args),
               {t.id: t for t in batch})
        if progress:
            print(f"validated {result.validation['validated']}/{len(sampled)}: kept {len(kept)} "
                  f"({result.build_s} s)", flush=True)
    return result


def _validate_by_file(todo: list[Task], *, workers: int, size: int, progress: bool, coq_args: Sequence[str],
                      record: Callable[[dict[str, Any], Mapping[str, Task]], None], stop: Callable[[], bool]) -> None:
    """Validate ``todo`` a file piece at a time; each piece done is ``record``ed as a round is."""
    given = {t.id: t for t in todo}
    last = [time.monotonic()]
    exclusions: dict[str, str] = {}  # filled by validate_tasks before each on_group call

    def done(ids: list[str], got: list[Task], excluded: Counter, false_rejections: list[str]) -> None:
        now = time.monotonic()
        record({**_ledger_row(ids, got, excluded, false_rejections, given, now - last[0], workers, exclusions),
                "order": "file"}, given)
        last[0] = now

    validate_tasks(todo, workers=workers, progress=progress, verifier_kwargs={"extra_args": tuple(coq_args)},
                   max_group=size, on_group=done, stop=stop, exclusions=exclusions)


def _validate_round(batch: list[Task], *, workers: int, progress: bool, coq_args: Sequence[str]) -> dict[str, Any]:
    start = time.monotonic()
    exclusions: dict[str, str] = {}
    kept, excluded, false_rejections = validate_tasks(batch, workers=workers, progress=progress,
                                                      verifier_kwargs={"extra_args": tuple(coq_args)},
                                                      exclusions=exclusions)
    return _ledger_row([t.id for t in batch], kept, excluded, false_rejections, {t.id: t for t in batch},
                       time.monotonic() - start, workers, exclusions)


def _ledger_row(ids: list[str], kept: Sequence[Task], excluded: Mapping[str, int], false_rejections: list[str],
                given: Mapping[str, Task], wall_s: float, workers: int,
                exclusions: Mapping[str, str] | None = None) -> dict[str, Any]:
    # A kept task is written as its id, the hash of the task as extracted, and what validation added
    # (its allowed axioms): the ledger stays small (a few KB for a whole library, where the tasks'
    # contexts are megabytes), so it can be carried to another machine or session and resumed there.
    entries = [{"id": t.id, "sha256": task_sha256(given[t.id]), "allowed_axioms": list(t.metadata["allowed_axioms"])}
               for t in kept]
    # Every excluded task by id with its reason (issue 26: a report lists them, not only their count).
    listed = {i: exclusions[i] for i in ids if exclusions and i in exclusions}
    return {"ids": ids, "kept": entries, "excluded": dict(excluded), "false_rejections": false_rejections,
            "exclusions": listed, "wall_s": round(wall_s, 1), "workers": workers}


def task_sha256(task: Task) -> str:
    """The hash of a task as extracted (before validation), by which the ledger names a kept task."""
    return hashlib.sha256(json.dumps(task.to_dict(), sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def _compact_round(row: Mapping[str, Any], sampled: Mapping[str, Task]) -> dict[str, Any]:
    """``row`` with each whole kept task as its compact entry; one that is no longer the task as extracted
    now (validation adds only its allowed axioms) leaves the round's ids, so it is validated again."""
    entries, stale = [], set()
    for entry in row["kept"]:
        if "sha256" in entry:
            entries.append(entry)
            continue
        task = Task.from_dict(entry)
        meta = {k: v for k, v in task.metadata.items() if k != "allowed_axioms"}
        now = sampled.get(task.id)
        if now is not None and task_sha256(now) == task_sha256(replace(task, metadata=meta)):
            entries.append({"id": task.id, "sha256": task_sha256(now),
                            "allowed_axioms": list(task.metadata.get("allowed_axioms", []))})
        else:
            stale.add(task.id)
    return {**row, "ids": [i for i in row["ids"] if i not in stale], "kept": entries}


def _forget_harness_failures(row: Mapping[str, Any]) -> dict[str, Any]:
    """A ledger row without the tasks it excluded for a harness failure (the verifier, not the task, failed): they
    leave its ids, its exclusions and its counts, so a rerun validates them again instead of losing them."""
    failed = {i: why for i, why in (row.get("exclusions") or {}).items() if str(why).startswith("harness failure")}
    if not failed:
        return dict(row)
    excluded = Counter(row["excluded"])
    excluded.subtract(Counter(failed.values()))
    return {**row, "ids": [i for i in row["ids"] if i not in failed],
            "exclusions": {i: why for i, why in row["exclusions"].items() if i not in failed},
            "excluded": {why: n for why, n in excluded.items() if n > 0}}


def _kept_from_ledger(rounds: Sequence[Mapping[str, Any]], sampled: Mapping[str, Task]) -> tuple[list[Task], set[str]]:
    """(the kept tasks of ``rounds``, the ids to validate again).

    A kept entry is the task as extracted now with the allowed axioms validation found, if its hash is
    the one validated (else the source changed, and it is validated again); a ledger written before the
    entries were compact holds whole tasks.
    """
    kept: list[Task] = []
    stale: set[str] = set()
    for row in rounds:
        for entry in row["kept"]:
            if "sha256" not in entry:
                kept.append(Task.from_dict(entry))
                continue
            task = sampled.get(entry["id"])
            if task is None or task_sha256(task) != entry["sha256"]:
                stale.add(entry["id"])
                continue
            kept.append(replace(task, metadata={**task.metadata, "allowed_axioms": list(entry["allowed_axioms"])}))
    return kept, stale


def _read_ledger(path: Path, identity: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The rounds of an earlier build of the same sample (empty if there is none, or it was another build)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    rounds: list[dict[str, Any]] = []
    for n, line in enumerate(lines):
        try:
            row = json.loads(line)
        except ValueError:
            break  # a round cut off by a kill: validated again
        if n == 0:
            if row.get("identity") != json.loads(json.dumps(identity)):
                return []
            continue
        if isinstance(row, dict) and {"ids", "kept", "excluded", "false_rejections"} <= row.keys():
            rounds.append(row)
    return rounds


def validation_order(tasks: Sequence[Task], *, seed: int = 0) -> list[Task]:
    """``tasks`` in a seeded order whose every prefix is a uniform draw stratified by category.

    Each category is shuffled by its own generator; a task at position ``i`` of ``n`` in its category
    comes at ``(i + 0.5) / n``, so the first ``k`` tasks hold each category in proportion to its size.
    """
    by_category: dict[str, list[Task]] = {}
    for task in sorted(tasks, key=lambda t: t.id):
        by_category.setdefault(task.category, []).append(task)
    keyed: list[tuple[float, str, Task]] = []
    for category, pool in sorted(by_category.items()):
        random.Random(f"{seed}:order:{category}").shuffle(pool)
        keyed += [((i + 0.5) / len(pool), category, t) for i, t in enumerate(pool)]
    return [t for *_, t in sorted(keyed, key=lambda k: (k[0], k[1]))]


def subsample(tasks: Sequence[Task], counts: Mapping[str, int], *, seed: int = 0) -> list[Task]:
    """A seeded uniform subset of ``tasks``, ``counts[category]`` per category (all of a smaller one), sorted by id.

    Each category has its own generator (``seed``, ``subset``, category), so one category's count
    does not change another's draw.
    """
    by_category: dict[str, list[Task]] = {}
    for task in sorted(tasks, key=lambda t: t.id):
        by_category.setdefault(task.category, []).append(task)
    out: list[Task] = []
    for category, pool in sorted(by_category.items()):
        wanted = counts.get(category, 0)
        out += pool if wanted >= len(pool) else random.Random(f"{seed}:subset:{category}").sample(pool, wanted)
    return sorted(out, key=lambda t: t.id)


def build_from_cli(suite: str = "coq-project", *, lib: str | None = None, project: str | None = None,
                   per_category: str = "160,120,80", subset: str | None = None,
                   **options: Any) -> ProjectBuildReport:
    """``proofgym build coq-project --lib NAME | --project DIR``: the project, then :func:`build_coq_project`.

    Raises:
        ProjectError: for a library that is not installed or a project that cannot be read;
            the message says what to install or build.
    """
    if bool(lib) == bool(project):
        raise ProjectError("coq-project takes one of --lib NAME or --project DIR")
    try:
        counts = parse_counts(per_category)
        chosen = parse_counts(subset) if subset else None
    except ValueError as exc:
        raise ProjectError(str(exc)) from None
    found = installed_library(lib) if lib else read_project(Path(str(project)))
    return build_coq_project(found, counts=counts, subset=chosen, **options)
