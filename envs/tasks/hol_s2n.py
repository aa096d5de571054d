"""Import s2n-bignum-bench's problems from an s2n-bignum checkout, as the benchmark builds them.

s2n-bignum-bench (``collect-problems.py`` over the theorems of every inlined proof file that
``make build_proofs`` builds) defines the problem set; this module reimplements its rules on the
checkout's sources (see :mod:`proofgym.envs.tasks.hol_inline` for the inlining):

- **Files.** For each architecture (``arm``, then ``x86``), every proof file the Makefile builds
  (``proofs/<object>.ml`` for each object of ``OBJ``, by name), inlined with ``needs`` semantics.
  A theorem's id comes from the file that *defines* it (``common/misc.ml`` gives ``common.misc.*``),
  so ``instruction.ml``, ``decode.ml`` and every ``needs``-loaded s2n file give problems too; HOL
  Light's own library files give none.
- **Theorems.** ``let NAME = prove(goal, proof)`` and ``let NAME = time prove(goal, proof)``, each
  binding of a ``let ... and ...``; ``let _ = prove(...)`` binds no name and is no problem.
- **Ids** ``{arch}.{file}.{theorem}``; a second *distinct* theorem of the same name in the same file
  makes the first ``.0`` and itself ``.1`` (``.2`` ...), unless the first was dropped.
- **De-duplication** by whitespace-normalised goal text, first come first kept, in the walk order
  (architectures, then proof files, then inlining order); a goal equal to a dropped one is dropped.
- **Categories** (:func:`bench_category`): names with ``_EQUIV``, ``SUBROUTINE_SAFE`` or
  ``SUBROUTINE_CORRECT`` and goals that are not a quotation are dropped; ``_CORRECT`` with ``ensures``
  is ``functional_correctness_{arm,x86}``; then ``program_state``, ``bit_vector``, ``generic`` by
  keywords that count at a space or parenthesis boundary, before or after (``read`` matches
  ``read s``, ``(read``, ``bytes_read)`` and ``readme``: the bench's rule, kept as it is).
- **Timeouts**: the bench's ``timeout-map.json`` when given (its rule on its native times, which
  :class:`~proofgym.envs.tasks.hol_extract.TimeoutRule` reproduces), else the rule on the reference
  time measured at validation.

**Contexts.** A problem's context is what the bench's setup runs before the theorem: the inlined
prefix of its file, every earlier proof replaced by ``CHEAT_TAC`` (``needs``-loaded s2n files
included). A context runs on a base that the fork server loads once:

- ``arm`` / ``x86`` (``needs "<arch>/proofs/base.ml"``, real proofs) for a theorem of a file the base
  does not load: the context is that file's prefix;
- ``arm-lib`` / ``x86-lib`` (the HOL Light libraries ``base.ml`` loads before its first s2n file) for
  a theorem of a file the base loads (``arm.ml``, ``instruction.ml``, ``common/misc.ml`` ...): the
  context is ``base.ml``'s inlined prefix up to the theorem, so nothing is loaded twice.

Contexts stay small: the cheated files are written once into ``<checkout>/.proofgym-contexts/<base>/``
(``needs``/``loadt`` between them keep HOL Light's semantics: ``needs`` knows a file by basename and
digest), and a context is a list of ``loadt`` lines of those pieces.

    python -m proofgym.envs.tasks.hol_s2n ~/s2n-bignum --hol-dir ~/hol-light --timeout-map timeout-map.json
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from proofgym.envs.errors import TaskFormatError, VerifierError
from proofgym.envs.tasks.build import render_exclusions
from proofgym.envs.tasks.hol_build import validate_tasks
from proofgym.envs.tasks.hol_extract import CHEAT, TimeoutRule
from proofgym.envs.tasks.hol_inline import SourceFile, SourceTree, Theorem, blank_comments
from proofgym.envs.tasks.hol_obfuscate import ObfuscationReport, obfuscate_tasks
from proofgym.envs.tasks.suites import suite_dir, write_tasks
from proofgym.envs.types import Task
from proofgym.envs.verifiers.hol_light import BaseContext

SUITE_NAME = "s2n-bignum"
ARCHS = ("arm", "x86")
CATEGORIES = ("functional_correctness_arm", "functional_correctness_x86", "program_state", "bit_vector", "generic")
CONTEXTS_DIR = ".proofgym-contexts"
#: the assembler each architecture's Makefile uses on an x86-64 Linux host (its objects are what
#: define_assert_from_elf reads); arm's ``unopt`` objects are a separate target
TOOLCHAIN = {"arm": "aarch64-linux-gnu-as: apt-get install binutils-aarch64-linux-gnu gcc",
             "x86": "the native as: apt-get install binutils gcc"}
ALL_OBJECTS = {"arm": "libs2nbignum.a unopt", "x86": "libs2nbignum.a"}


def object_build_command(checkout: str | Path, objects: Sequence[str]) -> str:
    """The ``make`` command that builds these object files (paths relative to the checkout) of one arch."""
    arch = _toplevel(objects[0])
    targets = " ".join(str(Path(o).relative_to(arch)) for o in objects)
    return f"make -C {Path(checkout) / arch} {targets}  ({TOOLCHAIN.get(arch, 'binutils')})"


# --------------------------------------------------------------------------------------------
# the bench's rules


def _contains_keyword(keywords: Sequence[str], text: str) -> bool:
    """The bench's keyword test: ``kw`` after a space or ``(``, or before a space or ``)``;
    ``kw*`` only after a space."""
    for kw in keywords:
        if kw.endswith("*"):
            if f" {kw[:-1]}" in text:
                return True
        elif f" {kw}" in text or f"{kw} " in text or f"({kw}" in text or f"{kw})" in text:
            return True
    return False


def bench_category(name: str, query: str, arch: str) -> tuple[bool, str]:
    """``(dropped, category or why)`` of a theorem, by s2n-bignum-bench's rules (module docstring)."""
    goal = query.strip()
    first, last = goal.find("`"), goal.rfind("`")
    if first == -1 or first == last:
        return True, "the goal is evaluated at runtime"
    goal = goal[first:last + 1]
    if "_EQUIV" in name or "SUBROUTINE_SAFE" in name:
        return True, "not a proof related to functional correctness"
    if "SUBROUTINE_CORRECT" in name:
        return True, "a top-level subroutine that just uses the _CORRECT of the core part"
    text = f" {goal.replace(chr(10), ' ')} "
    if "_CORRECT" in name and _contains_keyword(["ensures"], text):
        if arch in ARCHS:
            return False, f"functional_correctness_{arch}"
        return True, f"unknown_arch:{arch}"
    if _contains_keyword(["read", "write", ":>", "nonoverlapping", "nonoverlapping_modulo", "contained",
                          "contained_modulo"], text):
        return False, "program_state"
    if _contains_keyword(["word_*", "word", "val"], text):
        return False, "bit_vector"
    return False, "generic"


_VAR = re.compile(r"^([A-Z_][A-Z0-9_]*)\s*[:+]?=\s*(.*)$")
_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def makefile_objects(makefile: Path) -> list[str]:
    """The words of ``OBJ`` in a Makefile (plain ``VAR = ...`` assignments with ``\\`` continuations)."""
    values: dict[str, str] = {}
    text = makefile.read_text(encoding="utf-8", errors="replace").replace("\\\n", " ")
    for line in text.splitlines():
        m = _VAR.match(line)
        if m:
            values[m.group(1)] = m.group(2).split("#", 1)[0]

    def expand(value: str, depth: int = 0) -> str:
        return value if depth > 20 else _REF.sub(lambda r: expand(values.get(r.group(1), ""), depth + 1), value)

    return expand(values.get("OBJ", "")).split()


def proof_files(tree: SourceTree, arch: str) -> list[str]:
    """The proof files ``make build_proofs`` builds for ``arch``, in the order the bench reads their dumps.

    The bench walks its dump directory with ``os.walk``, whose file order is the file system's; by
    name is the one order that does not depend on the machine. Without a Makefile (a trimmed
    checkout), every ``<arch>/proofs/*.ml`` the base does not load.
    """
    makefile = tree.root / arch / "Makefile"
    if makefile.is_file():
        stems = {Path(o).stem for o in makefile_objects(makefile) if o.endswith(".o")}
        rels = [f"{arch}/proofs/{s}.ml" for s in stems]
        return sorted((r for r in rels if (tree.root / r).is_file()), key=lambda r: Path(r).name)
    base = f"{arch}/proofs/base.ml"
    in_base = set(tree.closure(base)) if (tree.root / base).is_file() else set()
    return sorted(str(p.relative_to(tree.root)) for p in (tree.root / arch / "proofs").glob("*.ml")
                  if str(p.relative_to(tree.root)) not in in_base)


@dataclass
class BenchProblem:
    """One problem as the bench collects it."""

    id: str
    theorem: str
    source: str  # the file that defines it, relative to the checkout
    phrase: int  # its phrase index in that file
    line: int
    query: str  # the goal's source text
    category: str
    walk_arch: str  # the architecture whose proof files reached it first: its context's base
    timed: bool
    proof: str

    @property
    def legacy_id(self) -> str:
        return f"{_toplevel(self.source)}.{Path(self.source).stem}.{self.line}.{self.theorem}"


def _toplevel(rel: str) -> str:
    return Path(rel).parts[0]


@dataclass
class Collection:
    """What :func:`collect_problems` found: the problems in insertion order, and what it dropped."""

    problems: dict[str, BenchProblem] = field(default_factory=dict)
    dropped: dict[str, str] = field(default_factory=dict)  # id -> why
    merged: int = 0  # goals equal to an earlier one's (the bench merges them)
    reordered: int = 0  # equal goals where the bench's ids say it met a later one first
    files: list[str] = field(default_factory=list)  # the proof files walked


def collect_problems(tree: SourceTree, archs: Sequence[str] = ARCHS, prefer: frozenset[str] = frozenset()) -> Collection:
    """The bench's problems of the checkout (its ids, de-duplication and categories; module docstring).

    Args:
        prefer: the bench's own ids (its ``timeout-map.json``). The bench keeps the first of equal goals
            in its ``os.walk`` order, which is its file system's directory order and cannot be had
            from the checkout; where a later equal goal has one of these ids and the first has not,
            the later one is kept instead (counted in ``Collection.reordered``).
    """
    out = Collection()
    query_to_key: dict[str, str] = {}
    dropped_queries: set[str] = set()
    name_keys: dict[str, list[str]] = {}
    # A theorem met again (from another proof file's inlining) is always a no-op for the bench, so
    # each file is walked once: `once` shares the loaded set across every proof file and architecture.
    loaded: set[tuple[str, str]] = set()
    walk_arch = ""

    def take(src: SourceFile, index: int, thm: Theorem) -> None:
        top = _toplevel(src.rel)
        base_name = f"{top}.{Path(src.rel).stem}.{thm.name}"
        normalised = " ".join(thm.goal.split())
        keys = name_keys.setdefault(base_name, [])
        candidate = base_name if not keys else f"{base_name}.{len(keys)}"
        owner = query_to_key.get(normalised)
        if owner is not None or normalised in dropped_queries:
            # the bench's first of two distinct theorems of one name ends up as NAME.0
            bench_has = candidate in prefer or (not keys and f"{candidate}.0" in prefer)
            if not (bench_has and (owner is None or owner not in prefer)):
                out.merged += owner is not None
                return
            out.reordered += 1  # the bench met this one first
            if owner is not None:
                del out.problems[owner]
                out.merged += 1
            dropped_queries.discard(normalised)
        if not keys:
            key = base_name
        else:
            if len(keys) == 1 and keys[0] in out.problems:  # the second distinct one: the first becomes .0
                first = out.problems.pop(keys[0])
                first.id = f"{base_name}.0"
                out.problems[first.id] = first
                query_to_key[" ".join(first.query.split())] = first.id
                keys[0] = first.id
            key = f"{base_name}.{len(keys)}"
        keys.append(key)
        drop, category = bench_category(thm.name, thm.goal, top)
        if drop:
            out.dropped[key] = category
            dropped_queries.add(normalised)
            return
        out.problems[key] = BenchProblem(key, thm.name, src.rel, index, src.line_of(index), thm.goal, category,
                                         walk_arch, thm.timed, thm.proof)
        query_to_key[normalised] = key

    def visit(src: SourceFile, index: int) -> None:
        for thm in src.theorems.get(index, ()):
            take(src, index, thm)

    for arch in archs:
        walk_arch = arch
        for rel in proof_files(tree, arch):
            out.files.append(rel)
            fileid = tree.file(rel).fileid
            if fileid in loaded:
                continue
            tree.walk(rel, loaded, visit, once=True)
            loaded.add(fileid)
    return out


# --------------------------------------------------------------------------------------------
# contexts


@dataclass(frozen=True)
class S2nBase:
    """A base context of the import and the checkout files it has loaded."""

    name: str
    arch: str
    setup: str
    loaded: frozenset[str]  # checkout files (relative) the base loads: never loaded again by a context
    lib: bool = False  # a lib base: contexts run base.ml's s2n part from `start` on
    start: int = 0


def s2n_bases(checkout: str | Path, startup_timeout_s: float = 3600.0,
              tree: SourceTree | None = None) -> tuple[BaseContext, ...]:
    """The fork-server bases of an s2n-bignum checkout: ``arm``, ``x86``, ``arm-lib``, ``x86-lib``."""
    tree = tree or SourceTree(checkout)
    return tuple(BaseContext(b.name, setup=b.setup, cwd=str(tree.root), startup_timeout_s=startup_timeout_s)
                 for b in _bases(tree))


def _bases(tree: SourceTree) -> list[S2nBase]:
    out = []
    for arch in ARCHS:
        base_ml = f"{arch}/proofs/base.ml"
        if not (tree.root / base_ml).is_file():
            continue
        out.append(S2nBase(arch, arch, f'needs "{base_ml}";;\n', frozenset(tree.closure(base_ml))))
        src = tree.file(base_ml)
        first = next((i for i in range(len(src.phrases)) if (ld := src.loads.get(i)) and ld.target), len(src.phrases))
        setup = "".join(_phrase_text(src.phrases[i].text) for i in range(first))
        out.append(S2nBase(f"{arch}-lib", arch, setup, frozenset(), lib=True, start=first))
    return out


def _phrase_text(text: str) -> str:
    """A phrase as a line of a context: its text and ``;;``, or nothing for a phrase of comments only
    (a file's trailing comment): camlp5 refuses an empty phrase before ``;;`` ("[use_file] expected")."""
    if not blank_comments(text).strip():
        return ""
    return text.strip("\n") + ";;\n"


class ContextWriter:
    """Writes the cheated pieces of a base's contexts under ``<dir>/<base>/`` and says how to load them."""

    def __init__(self, tree: SourceTree, base: S2nBase, directory: Path) -> None:
        self.tree = tree
        self.base = base
        self.dir = directory / base.name
        self._written: set[Path] = set()
        self.bytes = 0

    def _loaded_ids(self) -> set[tuple[str, str]]:
        return {self.tree.file(r).fileid for r in self.base.loaded}

    def render(self, src: SourceFile, start: int, stop: int) -> str:
        """Phrases ``[start, stop)`` of ``src``: proofs cheated, loads of s2n files as loads of their pieces."""
        out: list[str] = []
        for i in range(start, stop):
            load = src.loads.get(i)
            if load is not None and load.target is not None:
                if load.kind == "needs" and load.target in self.base.loaded:
                    continue  # the base has loaded it: a no-op
                out.append(f'{load.kind} "{self.whole(load.target)}";;\n')
                continue
            if load is not None and load.kind == "loads" and load.path == "update_database.ml":
                continue  # inline_load omits it too: it only indexes theorems for search
            text = src.phrases[i].text
            for thm in sorted(src.cheats.get(i, ()), key=lambda t: -t.proof_span[0]):
                text = text[:thm.proof_span[0]] + CHEAT + text[thm.proof_span[1]:]
            out.append(_phrase_text(text))
        return "".join(out)

    def _write(self, path: Path, text: str) -> Path:
        if path not in self._written:
            path.parent.mkdir(parents=True, exist_ok=True)
            if not path.is_file() or path.read_text(encoding="utf-8") != text:
                path.write_text(text, encoding="utf-8")
            self._written.add(path)
            self.bytes += len(text)
        return path

    def whole(self, rel: str) -> Path:
        """The cheated copy of a whole file (written once, with the copies of what it loads)."""
        path = self.dir / rel
        if path in self._written:
            return path
        self._written.add(path)  # before rendering: a load cycle must not recurse forever
        src = self.tree.file(rel)
        text = self.render(src, 0, len(src.phrases))
        self._written.discard(path)
        return self._write(path, text)

    def piece(self, rel: str, start: int, stop: int) -> Path:
        src = self.tree.file(rel)
        return self._write(self.dir / f"{rel}.ctx" / f"{start:05d}-{stop:05d}.ml", self.render(src, start, stop))

    def route(self, target: str) -> list[tuple[str, int, int]]:
        """The pieces ``(file, start, stop)`` that load everything before ``target``'s first phrase.

        On an architecture base the target is its own root. On a lib base the root is ``base.ml``
        from the base's start: the walk descends into the load that first reaches the target file.
        """
        if not self.base.lib:
            return []
        base_ml = f"{self.base.arch}/proofs/base.ml"
        pieces: list[tuple[str, int, int]] = []
        loaded: set[tuple[str, str]] = set()

        def descend(rel: str, start: int) -> bool:
            src = self.tree.file(rel)
            cut = start
            for i in range(start, len(src.phrases)):
                load = src.loads.get(i)
                if load is None or load.target is None:
                    continue
                fileid = self.tree.file(load.target).fileid
                if load.kind == "needs" and fileid in loaded:
                    continue
                if target == load.target or target in self.tree.closure(load.target, set(loaded)):
                    pieces.append((rel, cut, i))
                    if load.target == target:
                        return True
                    return descend(load.target, 0)
                self.tree.walk(load.target, loaded, lambda _s, _i: None)
                loaded.add(fileid)
            return False

        if not descend(base_ml, self.base.start):
            raise TaskFormatError(f"{target} is not loaded by {base_ml}")
        return pieces

    def contexts(self, rel: str, phrases: Sequence[int]) -> dict[int, str]:
        """The contexts of the problems at ``phrases`` of ``rel``: ``loadt`` of each piece before each.

        The file is cut at those phrases only, so that a file with n problems costs n pieces, and the
        context of its k-th problem is the route and its first k pieces.
        """
        route = [f'loadt "{self.piece(r, a, b)}";;\n' for r, a, b in self.route(rel) if b > a]
        out: dict[int, str] = {}
        lines, cut = route, 0
        for phrase in sorted(set(phrases)):
            if phrase > cut:
                lines = [*lines, f'loadt "{self.piece(rel, cut, phrase)}";;\n']
                cut = phrase
            out[phrase] = "".join(lines)
        return out


# --------------------------------------------------------------------------------------------
# the import


def task_statement(query: str) -> str | None:
    """The query as a task statement (one backquoted term), or None when it is an ML expression."""
    text = query.strip()
    while text.startswith("(") and text.endswith(")"):
        text = text[1:-1].strip()
    if len(text) >= 3 and text.startswith("`") and text.endswith("`") and "`" not in text[1:-1]:
        return text
    return None


@dataclass
class S2nImportReport:
    """What the import did: counts per architecture and category, and why problems gave no task."""

    checkout: str
    hol_dir: str
    proof_files: int = 0
    collected: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    merged: int = 0
    reordered: int = 0  # duplicate goals kept under the bench's id rather than the first met here
    per_arch_category: dict[str, dict[str, int]] = field(default_factory=dict)
    not_a_term: list[str] = field(default_factory=list)  # queries that are ML expressions: no task
    bases: dict[str, int] = field(default_factory=dict)  # base -> tasks on it
    contexts_dir: str = ""
    contexts_bytes: int = 0
    missing_objects: dict[str, list[str]] = field(default_factory=dict)  # object -> task ids needing it
    bench: dict[str, Any] = field(default_factory=dict)  # the comparison with timeout-map.json
    kept: dict[str, int] = field(default_factory=dict)
    excluded: dict[str, int] = field(default_factory=dict)
    false_rejections: list[str] = field(default_factory=list)
    exclusions: dict[str, str] = field(default_factory=dict)  # task id -> why validation left it out
    validated: bool = False
    obfuscation: dict[str, Any] = field(default_factory=dict)  # ObfuscationReport's fields, when obfuscated
    seconds: float = 0.0

    def render(self) -> str:
        lines = [f"s2n-bignum from {self.checkout}: {self.collected} problems from {self.proof_files} proof files "
                 f"({self.merged} duplicate goals merged, {sum(self.dropped.values())} dropped"
                 + (f", {self.reordered} duplicates kept under the bench's id" if self.reordered else "") + ")"]
        cats = [c for c in CATEGORIES if any(c in row for row in self.per_arch_category.values())]
        lines.append(f"  {'':8s}" + "".join(f"{c:>28s}" for c in cats) + f"{'total':>8s}")
        for arch, row in sorted(self.per_arch_category.items()):
            lines.append(f"  {arch:8s}" + "".join(f"{row.get(c, 0):28d}" for c in cats) + f"{sum(row.values()):8d}")
        for why, n in sorted(self.dropped.items(), key=lambda kv: -kv[1]):
            lines.append(f"  dropped {n:5d}: {why}")
        if self.not_a_term:
            lines.append(f"  {len(self.not_a_term)} goals are ML expressions, not one quotation: no task "
                         f"(e.g. {self.not_a_term[0]})")
        lines.append("  tasks per base: " + ", ".join(f"{b} {n}" for b, n in sorted(self.bases.items())))
        lines.append(f"  contexts: {self.contexts_bytes / 2**20:.1f} MiB of cheated pieces in {self.contexts_dir}")
        for arch in sorted({_toplevel(o) for o in self.missing_objects}):
            objs = sorted(o for o in self.missing_objects if _toplevel(o) == arch)
            n = len({i for o in objs for i in self.missing_objects[o]})
            lines.append(f"  {len(objs)} {arch} object files are not built ({n} tasks read them, e.g. {objs[0]}); "
                         f"build them all: make -C {Path(self.checkout) / arch} {ALL_OBJECTS.get(arch, '')}  "
                         f"({TOOLCHAIN.get(arch, 'binutils')})")
        if self.bench:
            b = self.bench
            lines.append(f"  against the bench's timeout-map.json ({b['bench_total']} ids): {b['matched']} matched, "
                         f"{b['missing']} missing, {b['extra']} extra")
        if self.validated:
            lines.append("kept per category: " + ", ".join(f"{k} {v}" for k, v in sorted(self.kept.items())))
            lines += [f"  excluded {n:4d}: {why}" for why, n in sorted(self.excluded.items(), key=lambda kv: -kv[1])]
            lines += render_exclusions(self.exclusions)
            lines.append(f"whitelist false rejections of reference proofs: {len(self.false_rejections)}")
        else:
            lines.append("NOT validated (pass --validate with a HOL Light new enough for s2n-bignum)")
        if self.obfuscation:
            from proofgym.envs.tasks.hol_obfuscate import ObfuscationReport

            lines.append(ObfuscationReport(**self.obfuscation).render())
        lines.append(f"took {self.seconds:.0f} s")
        return "\n".join(lines)


def compare_with_bench(tasks_ids: Sequence[str], categories: dict[str, str], bench_ids: Sequence[str]) -> dict:
    """Matched / missing / extra ids per architecture and category (missing ones by their id's arch)."""
    ours, theirs = set(tasks_ids), set(bench_ids)
    table: dict[str, dict[str, int]] = {}
    for pid in ours:
        row = table.setdefault(f"{pid.split('.')[0]} {categories[pid]}", Counter())
        row["matched" if pid in theirs else "extra"] += 1
    for pid in theirs - ours:
        table.setdefault(f"{pid.split('.')[0]} (missing)", Counter())["missing"] += 1
    return {"bench_total": len(theirs), "matched": len(ours & theirs), "missing": len(theirs - ours),
            "extra": len(ours - theirs), "per_arch_category": {k: dict(v) for k, v in sorted(table.items())},
            "missing_ids": sorted(theirs - ours), "extra_ids": sorted(ours - theirs)}


#: every reader of an object file (``define_from_elf``, ``define_assert_from_elf``,
#: ``define_assert_relocs_from_elf``, ``define_coda_from_elf`` ...), then each of its arguments: a string
#: (the ``.o`` ones are the objects), a number, or a label (``~map_symbol_name:(function ...)``, 14 uses in
#: s2n's arm proofs and tutorials), whose value is skipped
_ELF_READER = re.compile(r"\b[a-z_]*from_elf\b")
_ELF_ARG = re.compile(r'\s+(?:"([^"]*)"|[0-9][0-9a-fA-Fx]*\b|~[a-z_][A-Za-z0-9_\']*(:)?)')
_ATOM = re.compile(r"\s*[A-Za-z0-9_.\']+")


def _skip_value(text: str, pos: int) -> int:
    """The end of the OCaml value at ``pos`` (comments blanked): a parenthesised or bracketed group, with
    the strings in it, or one word."""
    i = pos
    while i < len(text) and text[i].isspace():
        i += 1
    if i >= len(text) or text[i] not in "([":
        atom = _ATOM.match(text, pos)
        return atom.end() if atom else pos
    depth = 0
    while i < len(text):
        c = text[i]
        if c == '"':
            i += 1
            while i < len(text) and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
        elif c in "([":
            depth += 1
        elif c in ")]":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return i


def elf_reader_strings(text: str) -> list[str]:
    """The string arguments of every object-file reader in ``text`` (OCaml, comments blanked), in order."""
    found: list[str] = []
    for reader in _ELF_READER.finditer(text):
        pos = reader.end()
        while arg := _ELF_ARG.match(text, pos):
            if arg.group(1) is not None:
                found.append(arg.group(1))
            pos = _skip_value(text, arg.end()) if arg.group(2) else arg.end()
    return found


def import_s2n(checkout: str | Path, *, hol_dir: str, archs: Sequence[str] = ARCHS,
               timeout_map: str | Path | None = None, contexts_dir: str | Path | None = None,
               validate: bool = False, workers: int = 1, rule: TimeoutRule | None = None,
               verifier: Any = None, limit: int | None = None, obfuscate: int = 0,
               progress: bool = True) -> tuple[list[Task], S2nImportReport]:
    """The tasks of an s2n-bignum checkout, and the import's report (validated when ``validate``).

    Args:
        timeout_map: the bench's ``timeout-map.json``: its timeouts are the tasks', and the report
            compares its ids with the import's.
        contexts_dir: where the cheated context pieces go; inside the checkout (the HOL Light
            sandbox binds only the checkout), default ``<checkout>/.proofgym-contexts``.
        limit: validate only the first N tasks of each base (a quick try).
        obfuscate: the bench's obfuscation tier (1 or 2; 0: none), after validation, in each task's
            context (:mod:`proofgym.envs.tasks.hol_obfuscate`): one check per task.
    """
    start_time = time.monotonic()
    tree = SourceTree(checkout)
    if not (tree.root / "arm").is_dir() and not (tree.root / "x86").is_dir():
        raise TaskFormatError(f"{tree.root} is not an s2n-bignum checkout (no arm/ or x86/ directory)")
    cdir = Path(contexts_dir).resolve() if contexts_dir else tree.root / CONTEXTS_DIR
    if not cdir.is_relative_to(tree.root):
        raise TaskFormatError(f"--contexts-dir {cdir} must be inside the checkout {tree.root}: the HOL Light "
                              "sandbox can read only the checkout")
    report = S2nImportReport(str(tree.root), hol_dir, contexts_dir=str(cdir))
    bench: dict[str, dict] = {}
    if timeout_map:
        bench = {e["problem_id"]: e for e in json.loads(Path(timeout_map).read_text(encoding="utf-8"))}
    collection = collect_problems(tree, archs, prefer=frozenset(bench))
    report.proof_files = len(collection.files)
    report.collected = len(collection.problems)
    report.merged = collection.merged
    report.dropped = dict(Counter(collection.dropped.values()))
    report.reordered = collection.reordered
    bases = {b.name: b for b in _bases(tree)}
    writers = {name: ContextWriter(tree, b, cdir) for name, b in bases.items()}
    contexts: BaseContext | None = None
    base_defs = {b.name: b for b in s2n_bases(tree.root, tree=tree)}
    def base_of(problem: BenchProblem) -> str:
        return problem.walk_arch + ("-lib" if problem.source in bases[problem.walk_arch].loaded else "")

    cuts: dict[tuple[str, str], list[int]] = {}
    for problem in collection.problems.values():
        cuts.setdefault((base_of(problem), problem.source), []).append(problem.phrase)
    contexts_of = {key: writers[key[0]].contexts(key[1], phrases) for key, phrases in cuts.items()}
    tasks: list[Task] = []
    for problem in collection.problems.values():
        report.per_arch_category.setdefault(problem.id.split(".")[0], Counter())[problem.category] += 1
        statement = task_statement(problem.query)
        if statement is None:
            report.not_a_term.append(problem.id)
            continue
        base_name = base_of(problem)
        context = contexts_of[(base_name, problem.source)][problem.phrase]
        timeout = float(bench[problem.id]["timeout_sec"]) if problem.id in bench else TimeoutRule().lo_s
        contexts = base_defs[base_name]
        metadata: dict[str, Any] = {
            "source": problem.source, "line": problem.line, "theorem": problem.theorem, "base": base_name,
            "arch": problem.walk_arch, "legacy_id": problem.legacy_id, "timed": problem.timed,
            "base_setup": contexts.setup, "base_cwd": contexts.cwd}
        if problem.id in bench:
            metadata["bench_prove_s"] = bench[problem.id]["prove_secs"]
        objects = _objects_needed(tree, problem)
        if objects:
            metadata["objects"] = objects
            for obj in objects:
                if not (tree.root / obj).is_file():
                    report.missing_objects.setdefault(obj, []).append(problem.id)
        tasks.append(Task(id=problem.id, system="hol_light", context=context, statement=statement,
                          reference_proof=problem.proof, category=problem.category, timeout_s=timeout,
                          suite=SUITE_NAME, metadata=metadata))
    report.per_arch_category = {k: dict(v) for k, v in report.per_arch_category.items()}
    report.bases = dict(Counter(t.metadata["base"] for t in tasks))
    report.contexts_bytes = sum(w.bytes for w in writers.values())
    if bench:
        report.bench = compare_with_bench(list(collection.problems),
                                          {p.id: p.category for p in collection.problems.values()}, list(bench))
    if validate or obfuscate:
        from proofgym.envs.verifiers.hol_light import HolLightVerifier

        owned = verifier is None
        verifier = verifier or HolLightVerifier(hol_dir=hol_dir, bases=s2n_bases(tree.root, tree=tree),
                                                progress=progress)
        try:
            if validate:
                tasks = _validate(tasks, report, tree=tree, workers=workers, rule=rule, verifier=verifier,
                                  limit=limit, progress=progress, timed_by_bench=bool(bench))
            if obfuscate:
                tasks = _obfuscate(tasks, report, tree=tree, tier=obfuscate, verifier=verifier, progress=progress)
        finally:
            if owned:
                verifier.close()
    report.seconds = time.monotonic() - start_time
    return tasks, report


def _obfuscate(tasks: list[Task], report: S2nImportReport, *, tree: SourceTree, tier: int, verifier: Any,
               progress: bool) -> list[Task]:
    """The tasks with their queries obfuscated, one base at a time (a task whose object files are not
    built cannot load its context: kept as it is, and counted)."""
    say = (lambda line: print(line, file=sys.stderr, flush=True)) if progress else None
    total = ObfuscationReport(tier)
    done: dict[str, Task] = {}
    by_base: dict[str, list[Task]] = {}
    for task in tasks:
        if missing_object_message(task, str(tree.root)):
            total.kept["NO_OBJECT"] = total.kept.get("NO_OBJECT", 0) + 1
            total.kept_ids.setdefault("NO_OBJECT", []).append(task.id)
            done[task.id] = task
        else:
            by_base.setdefault(task.metadata["base"], []).append(task)
    for base, group in sorted(by_base.items()):
        if say:
            say(f"obfuscating {len(group)} queries on base {base} (tier {tier})")
        out, part = obfuscate_tasks(group, verifier, tier=tier, progress=say)
        done.update((t.id, t) for t in out)
        total.obfuscated += part.obfuscated
        for why, n in part.kept.items():
            total.kept[why] = total.kept.get(why, 0) + n
            total.kept_ids.setdefault(why, []).extend(part.kept_ids[why])
        for cat, row in part.per_category.items():
            mine = total.per_category.setdefault(cat, {})
            for k, n in row.items():
                mine[k] = mine.get(k, 0) + n
    report.obfuscation = asdict(total)
    return [done[t.id] for t in tasks]


def _objects_needed(tree: SourceTree, problem: BenchProblem) -> list[str]:
    """The object files the problem's context reads (``*from_elf`` in its file before it, outside comments)."""
    src = tree.file(problem.source)
    found = []
    for ph in src.phrases[:problem.phrase]:
        found += [a for a in elf_reader_strings(blank_comments(ph.text)) if a.endswith(".o")]
    return list(dict.fromkeys(found))


def missing_object_message(task: Task, checkout: str) -> str | None:
    """One line naming the object files a task's context reads that are not built, and how to build them."""
    missing = [o for o in task.metadata.get("objects", ()) if not (Path(checkout) / o).is_file()]
    if not missing:
        return None
    return (f"object file {', '.join(missing)} is not built (its context reads it); build it: "
            f"{object_build_command(checkout, missing)}")


def build_objects(checkout: str | Path, objects: Sequence[str], *, jobs: int = 2) -> dict[str, str]:
    """Run the checkout's own Makefiles for these object files (paths relative to the checkout).

    Returns arch -> "ok" or the tail of make's output. Each architecture's objects are one ``make``
    call in ``<checkout>/<arch>`` (its ``%.o : %.S`` rule; arm cross-assembles on an x86-64 host).
    """
    done: dict[str, str] = {}
    for arch in sorted({_toplevel(o) for o in objects}):
        mine = sorted(o for o in objects if _toplevel(o) == arch)
        argv = ["make", "-C", str(Path(checkout) / arch), f"-j{max(1, jobs)}",
                *(str(Path(o).relative_to(arch)) for o in mine)]
        print(f"building {len(mine)} {arch} object files: {' '.join(argv[:4])} ...", file=sys.stderr, flush=True)
        run = subprocess.run(argv, capture_output=True, text=True, check=False)
        done[arch] = "ok" if run.returncode == 0 else (
            f"make failed ({TOOLCHAIN.get(arch, 'binutils')}): " + (run.stderr or run.stdout).strip()[-600:])
    return done


def _validate(tasks: list[Task], report: S2nImportReport, *, tree: SourceTree, workers: int,
              rule: TimeoutRule | None, verifier: Any, limit: int | None, progress: bool,
              timed_by_bench: bool) -> list[Task]:

    rule = rule or TimeoutRule()
    excluded: Counter = Counter()
    say = (lambda line: print(line, file=sys.stderr, flush=True)) if progress else None
    runnable: dict[str, list[Task]] = {}
    for task in tasks:
        why = missing_object_message(task, str(tree.root))
        if why:
            excluded[why.split(" (")[0]] += 1
            report.exclusions[task.id] = f"excluded: {why}"
            continue
        runnable.setdefault(task.metadata["base"], []).append(task)
    kept: list[Task] = []
    for base, group in sorted(runnable.items()):
        group = group[:limit] if limit else group
        try:
            verifier.server(base)
        except VerifierError as exc:
            first = str(exc).splitlines()[0]
            excluded[f"base {base} does not load ({first[:160]})"] += len(group)
            report.exclusions.update({t.id: f"excluded: base {base} does not load ({first[:160]})" for t in group})
            continue
        done = validate_tasks(group, verifier, rule=rule, workers=workers, progress=say, excluded=excluded,
                              false_rejections=report.false_rejections, exclusions=report.exclusions)
        if timed_by_bench:  # the bench's timeouts stand; the measured time is metadata
            by_id = {t.id: t for t in group}
            done = [replace(t, timeout_s=by_id[t.id].timeout_s) for t in done]
        kept += done
    report.validated = True
    report.kept = dict(Counter(t.category for t in kept))
    report.excluded = dict(excluded)
    return kept


def build_s2n(out: Path | None = None, *, checkout: str | None = None, hol_dir: str = "",
              timeout_map: str | None = None, validate: bool = False, workers: int = 1, limit: int | None = None,
              progress: bool = True, objects: bool = False, obfuscate: int = 0, **_: Any) -> S2nImportReport:
    """``proofgym build s2n-bignum --checkout DIR --hol-dir DIR [--validate]``: write the suite and its report.

    With ``objects``, the object files the contexts read are built first (the checkout's Makefiles).
    """
    if not checkout:
        raise TaskFormatError("name the s2n-bignum checkout: proofgym build s2n-bignum --checkout DIR --hol-dir DIR")
    out = Path(out) if out is not None else suite_dir() / f"{SUITE_NAME}.jsonl"
    if objects:
        _, first = import_s2n(checkout, hol_dir=hol_dir, progress=False)
        for arch, status in build_objects(checkout, list(first.missing_objects), jobs=workers).items():
            if status != "ok":
                print(f"{arch}: {status}", file=sys.stderr, flush=True)
    tasks, report = import_s2n(checkout, hol_dir=hol_dir, timeout_map=timeout_map, validate=validate,
                               workers=workers, limit=limit, obfuscate=obfuscate or 0, progress=progress)
    write_tasks(out, tasks)
    out.with_name(out.stem + ".report.json").write_text(json.dumps(asdict(report), indent=2), encoding="utf-8")
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkout", help="an s2n-bignum checkout")
    ap.add_argument("--hol-dir", default="", help="a HOL Light installation new enough for s2n-bignum (--validate)")
    ap.add_argument("--timeout-map", help="the bench's timeout-map.json: its timeouts, and an id comparison")
    ap.add_argument("--out", default=f"{SUITE_NAME}.jsonl")
    ap.add_argument("--validate", action="store_true", help="keep a task only if its reference is OK and "
                    "CHEAT_TAC is CHEATING (loads the bases: 15-25 minutes each on 2 cores)")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--limit", type=int, default=0, help="validate only the first N tasks of each base")
    ap.add_argument("--objects", action="store_true", help="first build the object files the contexts read "
                    "(make in <checkout>/arm and /x86; arm needs binutils-aarch64-linux-gnu on x86-64)")
    ap.add_argument("--obfuscate", type=int, choices=(1, 2), help="the bench's query obfuscation tier "
                    "(1: every atom's type; 2: also every bound variable renamed), one check per task")
    args = ap.parse_args(argv)
    report = build_s2n(Path(args.out), checkout=args.checkout, hol_dir=args.hol_dir, timeout_map=args.timeout_map,
                       validate=args.validate, workers=args.workers, limit=args.limit or None, objects=args.objects,
                       obfuscate=args.obfuscate or 0)
    print(report.render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
