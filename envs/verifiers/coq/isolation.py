"""Selene's isolation for warm Coq sessions: a context's prefix compiled once into a ``.vo``.

A cold ``coqidetop`` replays a stdlib file's prefix sentence by sentence, re-checking every
proof in it: seconds per context. Here the prefix is compiled once with ``coqc`` into
``$PROOFGYM_CACHE/coq-isolation/C<key>.vo`` and a cold session loads it instead
(``Require Import PGIso.C<key>.``, milliseconds for the kernel to read it back).

The session runs ``Require PGIso.C<key>.``, the context's leading ``Require``/``Import`` lines, then
``Import PGIso.C<key>.`` (so the context's names shadow the libraries' as they did), then what an import
does not bring back, in the context's order: scopes, options, notations, local hints (:func:`plan`).
The cached text stops before the first Section or Module the context leaves open (the statement
must be checked inside it; a ``.vo`` is a closed module): the rest is replayed verbatim, as without
the cache. An import after the leading run can shadow names defined before it, so the context is cut
there into a chain of segments, one ``.vo`` each (a segment is compiled after what the session runs
before it: the earlier modules, their replays and the imports between them), and the session runs
the imports verbatim between its ``Import``s of the segments, in the file's order. The whole context
is replayed, as before, for a local declaration in the first segment (``Local Definition``, ``Let``,
``#[local] Instance``...: only its qualified name would reach it; in a later one the chain stops
there) and for a segment that does not compile.

Integrity is unchanged, because every check reads the state Coq is in, not the text:
``Print Assumptions`` walks into the cached module (an axiom there is listed as it is today),
its names are mapped back to the ``Top.`` names a replayed context gives them
(:func:`session_name`), so allow-lists mean the same in both modes; the leak rules read the
libraries that the ``Require`` of the cached module loaded (Coq reports each one, transitive
ones included); the audit compiles the raw context, never the cache.

The key is the SHA-256 of the format, the Coq version, the ``coqc`` flags and load path, and
the context text. Builders of one key serialise on a lock file and build in a private temp
dir; the ``.vo`` and its manifest (size and SHA-256) are moved in by atomic renames, the
manifest last, and a ``.vo`` is used only when its manifest matches it byte for byte: a
partial or corrupt entry is rebuilt, never trusted.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from proofgym.envs.verifiers.coq.errors import ContextLoadError
from proofgym.envs.verifiers.coq.idetop import IdeTop
from proofgym.envs.verifiers.coq.lexer import (
    CoqLexError,
    Sentence,
    command_head,
    split_sentences,
    strip_attributes,
    update_blocks,
)
from proofgym.envs.verifiers.sandbox import Sandbox

#: The logical root the cache directory is bound to in a session (``-Q <dir> PGIso``).
LIBRARY = "PGIso"
#: Bumped when what a cache entry holds (or how it is named) changes.
FORMAT = 2
_MODULE_RE = re.compile(rf"^{LIBRARY}\.C[0-9a-f]{{40}}\.")

# Heads (after attributes and Local/Global) replayed after the Require Import, whatever their locality:
# their effect is not exported by a Require Import of the cached module (options, implicit types,
# the context's own Require Import lines), or its order with respect to the imports decides it
# (notations, scopes).
_ALWAYS = re.compile(
    r"^(?:From\s+\S+\s+)?Require\b|^(?:Import|Export)\b|^(?:Open|Close)\s+Scope\b|^(?:Set|Unset)\b"
    r"|^Implicit\s+Types?\b|^Generalizable\b|^Notation\b|^Infix\b|^Arguments\b|^(?:Opaque|Transparent)\b"
    r"|^Strategy\b|^Obligation\s+Tactic\b|^Typeclasses\s+(?:Opaque|Transparent)\b|^Reserved\s+(?:Notation|Infix)\b")
# Heads replayed when local (a non-local one is exported by the Require Import already).
_WHEN_LOCAL = re.compile(
    r"^(?:Hint|Remove\s+Hints|Ltac|Tactic\s+Notation|Coercion|Existing\s+(?:Instance|Instances|Class)"
    r"|Bind\s+Scope|Delimit\s+Scope|Undelimit\s+Scope|Declare\s+Scope"
    r"|Typeclasses\b)")
_LOCAL_ATTR = re.compile(r"#\[(?:[^\]]*[\s,\[])?local\s*[,\]]")
# The context's leading run: libraries and options before anything it defines.
_LEADING_RE = re.compile(r"^(?:From\s+\S+\s+)?Require\b|^(?:Import|Export|Set|Unset)\b|^Declare\s+ML\s+Module\b")
# An import after the leading run: the cut (names it brings shadow what the context defined before it).
_IMPORTING_RE = re.compile(r"^(?:From\s+\S+\s+)?Require\s+(?:Import|Export)\b|^(?:Import|Export)\b"
                           r"|^Module\s+(?:Import|Export)\b")
_EXPORTING_RE = re.compile(r"^(?:#\[[^\]]*\]\s*)*(?:From\s+\S+\s+)?(?:Require\s+)?Export\b")
_EXPORT_WORD = re.compile(r"\bExport\b")
# Replayed heads whose effect a module exports (and its Import brings back): in a later segment's source they are
# written Local, so that importing that segment does not bring an earlier segment's notation or scope back over the
# imports between them (the file's imports would have shadowed it).
_EXPORTED_ON_IMPORT = re.compile(r"^(?:Notation|Infix|Open\s+Scope|Close\s+Scope|Arguments)\b")
_GLOBAL_ATTR = re.compile(r"#\[(?:[^\]]*[\s,\[])?global\s*[,\]]")
# Replayed heads that are global by default inside a Module: one in a closed module outlives it (not replayed).
_GLOBAL_IN_MODULE = re.compile(r"^(?:Arguments|Opaque|Transparent|Strategy|Typeclasses\s+(?:Opaque|Transparent))\b")


def session_name(full: str) -> str:
    """A constant of a cached context as a replayed context names it (``PGIso.C<key>.x`` -> ``Top.x``)."""
    m = _MODULE_RE.match(full)
    return "Top." + full[m.end():] if m else full


@dataclass(frozen=True)
class Segment:
    """One cache entry: ``source`` compiled by ``coqc`` into ``C<key>.vo``, content-addressed by ``key``."""

    key: str
    source: str

    @property
    def module(self) -> str:
        return "C" + self.key[:40]


@dataclass(frozen=True)
class Plan:
    """How a context is loaded from the cache.

    Attributes:
        key: The first entry's content address.
        prefix: The text compiled into the first ``.vo``: the context up to its first cut (see :func:`plan`),
            its leading ``Export``s written as ``Import``s (so that importing the module opens only its own names).
        lead: The context's leading ``Require``/``Import`` lines and options, run before the module is
            imported, so that its names shadow theirs as the context's own definitions did.
        tail: What runs after the first module is imported: its replayed sentences (scopes, options, notations,
            local hints); for each further segment the imports that cut the context before it, then its module's
            ``Require`` and ``Import`` and its replayed sentences; then the rest of the context verbatim.
        whole: Whether the segments hold the whole context (nothing of it is replayed verbatim).
        links: The further segments, in order: each one's source is what the session ran before it (the
            earlier modules, their replays and the imports between, every ``Export`` written as ``Import``)
            followed by its part of the context, so that it is compiled in the state the context was in.
    """

    key: str
    prefix: str
    lead: str
    tail: str
    whole: bool
    links: tuple[Segment, ...] = ()

    @property
    def module(self) -> str:
        return "C" + self.key[:40]

    @property
    def segments(self) -> tuple[Segment, ...]:
        """Every entry the plan loads, the first one first."""
        return (Segment(self.key, self.prefix), *self.links)

    def sentences(self) -> list[Sentence]:
        """Load the module, run the lead, import the module, run the tail: as the session runs them."""
        name = f"{LIBRARY}.{self.module}"
        return split_sentences(f"Require {name}.\n{self.lead}\nImport {name}.\n{self.tail}")


def _is_local(code: str, head: str, attributes: str) -> bool:
    return (bool(_LOCAL_ATTR.search(attributes)) or strip_attributes(code).startswith("Local ")
            or head.startswith("Let "))


def _replayed(sentences: Sequence[Sentence], heads: Sequence[tuple[str, str]]) -> list[Sentence] | str:
    """The sentences of a cached segment that its module's import does not bring back, or why the segment
    cannot be cached (a local declaration: only its qualified name would reach it)."""
    replay: list[Sentence] = []
    blocks: list = []
    for s, (head, attributes) in zip(sentences, heads, strict=True):
        depth = len(blocks)
        if update_blocks(blocks, head):
            continue
        if depth:
            # One that outlives its block is not replayed, so a replayed sentence before it would win over it.
            if _ALWAYS.match(head) and (_GLOBAL_ATTR.search(attributes) or strip_attributes(s.code).startswith("Global ")
                                        or (_GLOBAL_IN_MODULE.match(head) and not _is_local(s.code, head, attributes)
                                            and any(b.kind == "Module" for b in blocks)
                                            and any(_GLOBAL_IN_MODULE.match(r.code) for r in replay))):
                return f"a command in a closed block outlives it and would come before what is replayed: {s.code[:60]!r}"
            continue  # a closed block's local effects end with it; the rest is exported
        local = _is_local(s.code, head, attributes)
        if _ALWAYS.match(head) or (local and _WHEN_LOCAL.match(head)):
            replay.append(s)
        elif local:
            return f"a local declaration would be lost in the .vo: {s.code[:60]!r}"
    return replay


def _kept_local(sentences: Sequence[Sentence]) -> str:
    """Replayed ``sentences`` as a later segment's source runs them: exported effects written ``Local``."""
    return "\n".join("Local " + s.text if _EXPORTED_ON_IMPORT.match(s.code) else s.text for s in sentences)


def _key(coq_version: str, args: Sequence[str], source: str) -> str:
    return hashlib.sha256(json.dumps([FORMAT, coq_version, list(args), source]).encode()).hexdigest()


def _as_imports(sentences: Sequence[Sentence]) -> str:
    """``sentences`` as a module compiles them: an ``Export`` is an ``Import`` (importing the module must open only
    its own names)."""
    return "\n".join(_EXPORT_WORD.sub("Import", s.text, count=1) if _EXPORTING_RE.match(s.code) else s.text
                     for s in sentences)


def _outline(heads: list[tuple[str, str]]) -> tuple[int, list[int], int]:
    """Where the leading ``Require``s end, each sentence's block depth, and where the cached text must stop: the first
    outermost Section or Module still open at the end (else the end)."""
    n = len(heads)
    lead_end = 0
    while lead_end < n and _LEADING_RE.match(heads[lead_end][0]):
        lead_end += 1
    blocks: list = []
    open_at = None
    depths: list[int] = []
    for i, (head, _) in enumerate(heads):
        depth = len(blocks)
        depths.append(depth)
        update_blocks(blocks, head)
        if depth == 0 and blocks:
            open_at = i
        elif not blocks:
            open_at = None
    return lead_end, depths, n if open_at is None else open_at


def plan(context: str, *, coq_version: str, args: Sequence[str]) -> Plan | str:
    """The cache plan for ``context``, or why it cannot use the cache (then the whole context is replayed).

    The cached text stops before the first outermost Section or Module still open at the end. An import in
    the middle of a file (``Require Import``, ``Import``, ``Export`` after the leading ``Require``s) can shadow
    names the file defined before it, which one import of one module cannot reproduce: the context is cut
    there into segments, one ``.vo`` each, and the session imports them in order with the context's imports
    run verbatim between them, so that every name is shadowed as in the file. A ``Module Import`` block, a
    segment with a local declaration, or an import run that reaches the open block ends the chain: from there
    on the context is replayed verbatim, as without the cache.
    """
    try:
        sentences = split_sentences(context)
    except CoqLexError as exc:
        return f"the context cannot be cut into sentences: {exc}"
    heads = [command_head(s.code) for s in sentences]
    n = len(sentences)
    lead_end, depths, end = _outline(heads)

    def next_cut(i: int) -> int:
        while i < end and not (depths[i] == 0 and _IMPORTING_RE.match(heads[i][0])):
            i += 1
        return i

    def offset(i: int) -> int:
        return len(context) if i >= n else sentences[i].start

    stop = next_cut(lead_end)
    if stop <= lead_end:
        return "nothing to cache before the first open block or import"
    first = _replayed(sentences[lead_end:stop], heads[lead_end:stop])
    if isinstance(first, str):
        return first
    pieces, cursor = [], 0
    for s in sentences[:lead_end]:  # the module must not re-export: importing it would reopen those libraries
        if _EXPORTING_RE.match(s.code):
            pieces += [context[cursor:s.start], _EXPORT_WORD.sub("Import", s.text, count=1)]
            cursor = s.start + len(s.text)
    prefix = "".join(pieces) + context[cursor:offset(stop)]
    key = _key(coq_version, args, prefix)
    lead = "\n".join(s.text for s in sentences[:lead_end])
    module = f"{LIBRARY}.C{key[:40]}"
    # What the session runs after the first Import, and what a further segment's compilation runs before its part.
    tail = ["\n".join(s.text for s in first)]
    compiled = [f"Require {module}.", _as_imports(sentences[:lead_end]), f"Import {module}.", _kept_local(first)]
    links: list[Segment] = []
    while stop < end and not heads[stop][0].startswith("Module"):  # a Module Import block ends the chain
        between_end = stop + 1
        while between_end < end and depths[between_end] == 0 and (
                _IMPORTING_RE.match(heads[between_end][0]) or _LEADING_RE.match(heads[between_end][0])) \
                and not heads[between_end][0].startswith("Module"):
            between_end += 1
        seg_end = next_cut(between_end)
        if seg_end <= between_end:
            break  # nothing between this import run and the next cut
        replay = _replayed(sentences[between_end:seg_end], heads[between_end:seg_end])
        if isinstance(replay, str):
            break
        between = sentences[stop:between_end]
        source = "\n".join([*compiled, _as_imports(between), context[offset(between_end):offset(seg_end)]])
        segment = Segment(_key(coq_version, args, source), source)
        name = f"{LIBRARY}.{segment.module}"
        links.append(segment)
        tail += ["\n".join(s.text for s in between), f"Require {name}.", f"Import {name}.",
                 "\n".join(s.text for s in replay)]
        compiled += [_as_imports(between), f"Require {name}.", f"Import {name}.", _kept_local(replay)]
        stop = seg_end
    rest = context[offset(stop):] if stop < n else ""
    return Plan(key, prefix, lead, "\n".join(tail) + "\n" + rest, stop == n, tuple(links))


def load_path_libraries(args: Sequence[str]) -> tuple[tuple[str, int, int], ...]:
    """Every ``.vo`` under a folder the flags bind (``-Q``/``-R``/``-I``): path, size and mtime, read at each call.

    A baseline or a cache entry is about the libraries its source loads; one rebuilt in place (an ``Admitted`` lemma
    more) keeps the flags and the text, so without these in its key a stale baseline would skip ``Print Assumptions``
    (also within one process: red team round 5).
    """
    found: list[tuple[str, int, int]] = []
    for flag, folder in zip(args, args[1:], strict=False):
        if flag in ("-Q", "-R", "-I") and os.path.isdir(folder):
            for vo in sorted(Path(folder).rglob("*.vo")):
                with contextlib.suppress(OSError):
                    st = vo.stat()
                    found.append((str(vo), st.st_size, st.st_mtime_ns))
    return tuple(found)


#: coqc flags that coqchk takes too, with how many values follow each: the load path and the kernel's own options.
_CHECKER_FLAGS = {"-Q": 2, "-R": 2, "-coqlib": 1, "-impredicative-set": 0, "-indices-matter": 0}


def checker_args(args: Sequence[str]) -> tuple[str, ...]:
    """The part of ``coqc``'s flags that ``coqchk`` takes: load path bindings and the kernel options.

    coqchk refuses what it does not know (``-w``, ``-native-compiler``: "Unknown option") and the audit would read
    its refusal as a rejection of the proof. What is left out is coqc's business (warnings, the native compiler,
    timing); a kernel option that changes what is accepted is passed on, and the ``-o`` summary reports the unsafe
    flags a ``.vo`` was compiled under.
    """
    kept: list[str] = []
    i = 0
    while i < len(args):
        n = _CHECKER_FLAGS.get(args[i])
        if n is None:
            i += 1
            continue
        kept.extend(args[i:i + 1 + n])
        i += 1 + n
    return tuple(kept)


def default_directory() -> Path:
    """``$PROOFGYM_CACHE/coq-isolation``, else ``~/.cache/proofgym/coq-isolation`` (read at each call)."""
    cache = os.environ.get("PROOFGYM_CACHE")
    return (Path(cache).expanduser() if cache else Path.home() / ".cache" / "proofgym") / "coq-isolation"


def _sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _move_in(data_from: Path, target: Path) -> None:
    """Copy ``data_from`` next to ``target`` under a private name, flush it, and rename it into place."""
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as out, data_from.open("rb") as src:
            shutil.copyfileobj(src, out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


class IsolationCache:
    """The ``.vo`` cache of one verifier (shared on disk with every worker and run; see the module docstring)."""

    def __init__(self, directory: Path, *, coqc: str, coq_version: str, args: Sequence[str], sandbox: Sandbox,
                 env: dict[str, str], build_timeout_s: float) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / ".locks").mkdir(exist_ok=True)
        self.coqc = coqc
        self.coq_version = coq_version
        self.args = tuple(args)
        self.sandbox = sandbox
        self.env = env
        self.build_timeout_s = build_timeout_s
        self.stats: Counter[str] = Counter()
        self.build_s = 0.0
        self._verified: dict[str, tuple[int, int]] = {}  # module -> (size, mtime_ns) of a checked .vo
        self._failed: set[str] = set()  # keys whose context does not compile on its own (this process)
        self._plans: dict[tuple[str, tuple[tuple[str, int, int], ...]], Plan | str] = {}
        self._lock = threading.Lock()

    @property
    def session_args(self) -> tuple[str, ...]:
        """Extra ``coqidetop`` arguments of a session that loads from the cache."""
        return ("-Q", str(self.directory), LIBRARY)

    def plan(self, context: str) -> Plan | str:
        """:func:`plan` for this cache's Coq, flags and libraries (memoised per context and library state).

        The libraries on the load path are part of every key: a ``.vo`` (and its checker summary) compiled against a
        library that was rebuilt in place since is another entry, never a stale one.
        """
        libraries = load_path_libraries(self.args)
        found = self._plans.get((context, libraries))
        if found is None:
            found = self._plans[(context, libraries)] = plan(
                context, coq_version=self.coq_version, args=(*self.args, *(f"{p}:{n}:{t}" for p, n, t in libraries)))
            if len(self._plans) > 256:
                self._plans.pop(next(iter(self._plans)))
        return found

    def has_summary(self, context: str) -> bool:
        """Whether :meth:`checker_summary` of ``context`` is on disk already (costs nothing to read)."""
        p = self.plan(context)
        return isinstance(p, Plan) and p.whole and not p.links and (self.directory / f"{p.module}.chk.json").is_file()

    # -- environment baselines ----------------------------------------------------------------
    def _baseline_path(self, source: str) -> tuple[str, Path]:
        key = hashlib.sha256(json.dumps([FORMAT, "baseline", self.coq_version, list(self.args),
                                         load_path_libraries(self.args), source]).encode()).hexdigest()
        return key, self.directory / f"B{key[:40]}.chk.json"

    def stored_baseline(self, source: str) -> str | None:
        """``coqchk -o``'s summary of ``source`` compiled on its own, as :meth:`store_baseline` kept it; None if absent.

        The verifier's environment baseline of a context that is not cached whole (its ``.vo`` is not that
        compilation): a ``coqc`` + ``coqchk`` of the whole context, seconds, kept content-addressed (the format,
        Coq's version, the flags and load path, the libraries under it, the exact source) so that a later run reads
        it instead.
        """
        key, path = self._baseline_path(source)
        with contextlib.suppress(OSError, ValueError):
            meta = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(meta, dict) and meta.get("key") == key and isinstance(meta.get("out"), str):
                self.stats["baselines_read"] += 1
                return meta["out"]
        return None

    def has_baseline(self, source: str) -> bool:
        return self._baseline_path(source)[1].is_file()

    def store_baseline(self, source: str, out: str, workdir_parent: Path) -> None:
        """Keep the summary of a compilation that succeeded (coqc and coqchk both exit 0; the caller's rule)."""
        key, path = self._baseline_path(source)
        workdir = Path(tempfile.mkdtemp(prefix="isobase", dir=workdir_parent))
        try:
            (workdir / "chk.json").write_text(json.dumps({"key": key, "out": out}), encoding="utf-8")
            _move_in(workdir / "chk.json", path)  # atomic: a reader sees the whole entry or none
            self.stats["baselines_stored"] += 1
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    # -- entries ------------------------------------------------------------------------------
    def _paths(self, p: Plan | Segment) -> tuple[Path, Path]:
        return self.directory / f"{p.module}.vo", self.directory / f"{p.module}.json"

    def valid(self, p: Plan | Segment) -> bool:
        """Whether the entry of ``p`` is complete: a manifest that matches the ``.vo`` byte for byte."""
        vo, manifest = self._paths(p)
        try:
            st = vo.stat()
            meta = json.loads(manifest.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return False
        if not isinstance(meta, dict) or meta.get("key") != p.key or meta.get("size") != st.st_size:
            return False
        if self._verified.get(p.module) == (st.st_size, st.st_mtime_ns):
            return True
        if meta.get("sha256") != _sha256(vo):
            return False
        self._verified[p.module] = (st.st_size, st.st_mtime_ns)
        return True

    def discard(self, p: Plan) -> None:
        """Forget the entries of a plan Coq refused to load, so that the next session rebuilds them."""
        self.stats["discarded"] += 1
        for segment in p.segments:
            self._verified.pop(segment.module, None)
            for path in (*self._paths(segment), self.directory / f"{segment.module}.chk.json"):
                with contextlib.suppress(OSError):
                    path.unlink()

    def ensure(self, p: Plan | Segment, context: str, workdir_parent: Path, after: Sequence[Segment] = ()) -> bool:
        """Make the entry of ``p`` valid (building ``context`` if needed, with the entries ``after`` it follows,
        valid already, beside it); False when it does not compile."""
        if p.key in self._failed:
            return False
        if self.valid(p):
            self.stats["hits"] += 1
            return True
        lock_path = self.directory / ".locks" / f"{p.module}.lock"
        with self._lock, lock_path.open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another builder of this key (worker, run) finishes first
            try:
                if self.valid(p):
                    self.stats["hits"] += 1
                    return True
                if (self.directory / f"{p.module}.vo").exists():
                    self.stats["rebuilt"] += 1  # partial or corrupt: never trusted
                return self._build(p, context, workdir_parent, after)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def checker_summary(self, context: str, coqchk: str, workdir_parent: Path) -> str | None:
        """``coqchk -o``'s summary of a whole context's cached ``.vo``, its names as the audit file's.

        The verifier's environment baseline (every axiom and unsafe flag the context brings) is this
        summary of the context compiled on its own; the cached ``.vo`` is that compilation, so only
        ``coqchk`` runs, once per entry (the summary is kept beside it). None: no whole-context entry,
        or coqchk refused it (the verifier then compiles the context itself, as without the cache).
        """
        p = self.plan(context)
        if isinstance(p, str) or not p.whole or p.links or not self.ensure(p, p.prefix, workdir_parent):
            return None
        own, audit_name = f"{LIBRARY}.{p.module}", "PG.ProofgymSubmission"
        sidecar = self.directory / f"{p.module}.chk.json"
        with contextlib.suppress(OSError, ValueError):
            meta = json.loads(sidecar.read_text(encoding="utf-8"))
            if isinstance(meta, dict) and meta.get("key") == p.key and isinstance(meta.get("out"), str):
                return meta["out"].replace(own, audit_name)
        workdir = Path(tempfile.mkdtemp(prefix="isochk", dir=workdir_parent))
        try:
            run = self.sandbox.run([coqchk, "-silent", "-o", *checker_args(self.args), "-Q", str(self.directory), LIBRARY,
                                    "-norec", own], workdir=workdir, timeout_s=self.build_timeout_s)
            if run.timed_out or run.returncode != 0:
                return None
            out = run.stdout + run.stderr
            (workdir / "chk.json").write_text(json.dumps({"key": p.key, "out": out}), encoding="utf-8")
            _move_in(workdir / "chk.json", sidecar)
            self.stats["checker_summaries"] += 1
            return out.replace(own, audit_name)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    def _build(self, p: Plan | Segment, context: str, workdir_parent: Path, after: Sequence[Segment] = ()) -> bool:
        start = time.monotonic()
        workdir = Path(tempfile.mkdtemp(prefix="iso", dir=workdir_parent))
        try:
            for earlier in after:  # the segments it Requires, as checked by ensure(), under the same logical root
                shutil.copyfile(self.directory / f"{earlier.module}.vo", workdir / f"{earlier.module}.vo")
            (workdir / f"{p.module}.v").write_text(context, encoding="utf-8")
            run = self.sandbox.run([self.coqc, "-q", *self.args, "-Q", ".", LIBRARY, f"{p.module}.v"],
                                   workdir=workdir, timeout_s=self.build_timeout_s, env=self.env)
            built = workdir / f"{p.module}.vo"
            if run.timed_out or run.returncode != 0 or not built.is_file():
                self.stats["build_failed"] += 1
                self._failed.add(p.key)
                return False
            vo, manifest = self._paths(p)
            _move_in(built, vo)
            meta = {"key": p.key, "size": vo.stat().st_size, "sha256": _sha256(vo), "coq": self.coq_version,
                    "args": list(self.args), "format": FORMAT}
            (workdir / "manifest.json").write_text(json.dumps(meta), encoding="utf-8")
            _move_in(workdir / "manifest.json", manifest)  # last: the entry is complete from here on
            self.stats["builds"] += 1
            return True
        finally:
            self.build_s += time.monotonic() - start
            shutil.rmtree(workdir, ignore_errors=True)


def load_isolated(cache: IsolationCache, context: str, workdir_parent: Path,
                  start: Callable[[tuple[str, ...]], IdeTop],
                  load: Callable[[IdeTop, int, list[Sentence]], tuple[int, set[str]]]) -> tuple[IdeTop, int, set[str]] | None:
    """Start a session that loads ``context`` from the cache: ``(ide, state, loaded)``, or None to replay it.

    ``start(extra_args)`` starts a ``coqidetop`` (an :class:`~.idetop.IdeTop`) and ``load(ide, state,
    sentences)`` is the verifier's ``load_context``. A session whose cached load fails is killed, the entry
    discarded (the next session rebuilds it), and the caller replays the context in a fresh one.
    """
    p = cache.plan(context)
    if isinstance(p, str):
        cache.stats["fallback"] += 1
        return None
    segments = p.segments
    if not all(cache.ensure(segment, segment.source, workdir_parent, segments[:k])
               for k, segment in enumerate(segments)):
        cache.stats["fallback"] += 1
        return None
    ide = start(cache.session_args)
    try:
        state, loaded = load(ide, ide.root_state, p.sentences())
    except ContextLoadError:
        ide.kill()
        cache.discard(p)
        cache.stats["fallback"] += 1
        return None
    except BaseException:
        ide.kill()
        raise
    cache.stats["loaded"] += 1
    return ide, state, loaded
