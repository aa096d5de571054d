"""Extract proof tasks from Coq sources: Selene's procedure, made exact, for Coq.

Selene (zhang2024selene) finds lemmas with a rough parser, drops long proofs and
buckets the rest by proof length: P1 (one line), P2 (2-6 lines), P3 (7-20 lines).
Here the parser is Coq's own sentence structure
(:func:`proofgym.envs.verifiers.coq.lexer.split_sentences`), never a regular
expression over raw text, so that comments, strings, bullets and braces cannot
move a boundary.

Every slice is exact: for a lemma whose statement sentence starts at offset
``s`` and whose proof ends at offset ``e``::

    context + statement + separator + proof == src[:e]

where ``context == src[:s]`` (the whole file before the statement, comments
included) and ``separator`` is the whitespace and comments between the
statement's period and the first proof sentence.

What is a lemma here: a sentence whose code, after attributes (``#[local]``)
and the prefixes ``Local``/``Global``/``Polymorphic``/``Monomorphic``, starts
with one of :data:`THEOREM_KEYWORDS`, followed by its proof, which runs up to
and including the first terminator ``Qed.`` or ``Defined.``; a ``Proof term.``
sentence right after the statement is a complete proof by itself (Coq 8.16:
``exact term. Qed.``). A lemma is *excluded* (and counted, see
:data:`EXCLUSION_REASONS`) when it is a ``Program`` lemma, a mutual statement
(``with``), its proof ends with ``Admitted``/``Abort``/``Save``, its proof does
not end before the next command, or it sits in an open ``Module Type`` or a
functor body (``Module F (X : T).``), where it is not a closed constant that
can be checked.
"""

from __future__ import annotations

import random
import re
import shutil
import subprocess
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from proofgym.envs.errors import ProverNotFound
from proofgym.envs.progress import ProgressBar
from proofgym.envs.systems import COQ
from proofgym.envs.types import Task
from proofgym.envs.verifiers.coq.lexer import (
    Block,
    CoqLexError,
    Sentence,
    command_head,
    is_block_command,
    split_sentences,
    update_blocks,
)

THEOREM_KEYWORDS = ("Theorem", "Lemma", "Fact", "Remark", "Corollary", "Proposition", "Property", "Example")
"""Sentence heads that open a lemma. ``Definition``, ``Instance``, ``Fixpoint`` and ``Goal`` do not."""

CATEGORIES = ("P1", "P2", "P3")
LONG = "long"
"""Category of proofs longer than 20 lines: extracted, but not part of a suite."""

EXCLUSION_REASONS = {
    "definition": "`Example x : T := t.` (a definition by another keyword)",
    "program": "Program lemma (obligations are not a closed proof script)",
    "mutual": "mutual statement (`with`)",
    "admitted": "proof ends with Admitted",
    "aborted": "proof ends with Abort or Save",
    "unterminated": "no Qed/Defined before the next command or the end of the file",
    "empty_proof": "terminator right after the statement",
    "module_type": "inside an open Module Type (not a closed constant)",
    "functor": "inside a functor body (Module F (X : T).)",
}

DEFAULT_SAMPLE_COUNTS: Mapping[str, int] = {"P1": 160, "P2": 120, "P3": 80}
"""Selene's sample sizes per category (Table 1)."""

SUITE_NAME = "coq-stdlib"
EXCLUDED_STDLIB_DIRS = ("Compat",)
"""Stdlib folders left out: ``Compat`` holds version-compatibility shims, not mathematics."""

_IDENT = r"[^\W\d][\w']*"
_THEOREM_RE = re.compile(rf"({'|'.join(THEOREM_KEYWORDS)})\s+({_IDENT})")
# ``Proof.``, ``Proof using ...``, ``Proof with ...`` open a proof; any other
# ``Proof <term>.`` is a whole proof in one sentence.
_PROOF_OPENER_RE = re.compile(r"Proof\s*(?:\.$|(?:using|with)\b)")
_PROOF_TERM_RE = re.compile(r"Proof\b")
_WITH_TOKENS_RE = re.compile(r"\(|\)|\bmatch\b|\bend\b|\bwith\b")
_STRING_RE = re.compile(r'"(?:[^"]|"")*"')


@dataclass(frozen=True)
class ExtractedLemma:
    """One lemma with its proof, as exact slices of the source file.

    Attributes:
        name: The lemma's short name, e.g. ``app_nil_r``.
        keyword: ``Lemma``, ``Theorem``, ...
        qualid: Fully qualified name, e.g. ``Coq.Lists.List.app_nil_r`` (logical
            prefix, then the open modules; sections do not qualify names).
        statement: The statement sentence, exactly as in the source.
        proof: From the first proof sentence to the end of the terminator.
        context: The source before the statement (``src[:statement_start]``).
        separator: Whitespace and comments between statement and proof.
        line: 1-based line of the statement's first character.
        statement_start: Offset of the statement in the source.
        proof_end: Offset just past the proof's terminator.
        sections: Sections open at the statement, outermost first.
        modules: Modules open at the statement, outermost first.
        proof_lines: See :func:`count_proof_lines`.
        category: ``P1``/``P2``/``P3`` or ``long`` (see :func:`proof_category`).
    """

    name: str
    keyword: str
    qualid: str
    statement: str
    proof: str
    context: str
    separator: str
    line: int
    statement_start: int
    proof_end: int
    sections: tuple[str, ...]
    modules: tuple[str, ...]
    proof_lines: int
    category: str


@dataclass(frozen=True)
class FileExtraction:
    """What one source file yields: its lemmas and the count of lemmas excluded, per reason."""

    lemmas: list[ExtractedLemma]
    excluded: Counter[str]


@dataclass
class ExtractionStats:
    """Counts from an extraction run over many files, for the build report."""

    files_scanned: int = 0
    files_skipped: dict[str, str] = field(default_factory=dict)  # relative path -> why it could not be read
    files_excluded: dict[str, str] = field(default_factory=dict)  # relative path -> why it was left out
    categories: Counter[str] = field(default_factory=Counter)  # P1/P2/P3/long over extracted lemmas
    excluded: Counter[str] = field(default_factory=Counter)  # reason -> lemmas excluded
    duplicate_ids: int = 0

    @property
    def lemmas(self) -> int:
        return sum(self.categories.values())

    def summary(self) -> str:
        lines = [
            f"files: {self.files_scanned} scanned, {len(self.files_skipped)} skipped (lex errors), "
            f"{len(self.files_excluded)} excluded",
            "lemmas: " + ", ".join(f"{c} {self.categories.get(c, 0)}" for c in (*CATEGORIES, LONG)),
            "excluded lemmas: "
            + (", ".join(f"{r} {n}" for r, n in sorted(self.excluded.items())) if self.excluded else "none"),
        ]
        if self.duplicate_ids:
            lines.append(f"duplicate ids renamed: {self.duplicate_ids}")
        for path, why in sorted(self.files_skipped.items()):
            lines.append(f"skipped {path}: {why}")
        return "\n".join(lines)


def count_proof_lines(proof: str) -> int:
    """The length of a proof in lines, as Selene's categories measure it.

    The number of lines of ``proof`` that hold code once comments are removed,
    not counting the first line when it is exactly one ``Proof.`` sentence
    (also ``Proof using ...``/``Proof with ...``) and the last line when it is
    exactly the terminator (``Qed.``, ``Defined.``). So
    ``Proof.\\n  auto.\\nQed.`` and ``Proof. auto. Qed.`` both have one line,
    and ``Proof (f x).`` has one line. Never less than 1.
    """
    lines = [line.strip() for line in _blank_comments(proof).split("\n")]
    lines = [line for line in lines if line]
    if len(lines) > 1 and _is_single_sentence(lines[0], _is_proof_opener):
        lines = lines[1:]
    if len(lines) > 1 and _is_single_sentence(lines[-1], lambda code: _terminator(code) is not None):
        lines = lines[:-1]
    return max(1, len(lines))


def proof_category(proof_lines: int) -> str:
    """P1 = 1 line, P2 = 2-6, P3 = 7-20, ``long`` beyond (Selene, Section 3.3)."""
    if proof_lines <= 1:
        return "P1"
    if proof_lines <= 6:
        return "P2"
    if proof_lines <= 20:
        return "P3"
    return LONG


def extract_from_source(src: str, logical_prefix: str) -> FileExtraction:
    """Find the lemmas of one Coq source text (see the module docstring for the rules).

    Args:
        src: The file's text.
        logical_prefix: The file's logical path, e.g. ``Coq.Lists.List``.

    Raises:
        CoqLexError: if the text does not split into sentences.
    """
    sentences = split_sentences(src)
    blocks: list[Block] = []
    lemmas: list[ExtractedLemma] = []
    excluded: Counter[str] = Counter()
    i = 0
    while i < len(sentences):
        sentence = sentences[i]
        if sentence.kind != "sentence":
            i += 1
            continue
        head, attributes = command_head(sentence.code)
        if update_blocks(blocks, head):
            i += 1
            continue
        program = head.startswith("Program ") or "program" in attributes
        match = _THEOREM_RE.match(head.removeprefix("Program ").lstrip())
        if not match:
            i += 1
            continue
        end, outcome = _find_proof_end(sentences, i)
        if outcome == "unterminated" and ":=" in head:
            outcome = "definition"  # ``Example x : T := t.`` defines, it states nothing to prove
        if outcome != "ok":
            excluded[outcome] += 1
        elif program:
            excluded["program"] += 1
        elif _is_mutual(head):
            excluded["mutual"] += 1
        elif any(b.kind == "Module Type" for b in blocks):
            excluded["module_type"] += 1
        elif any(b.functor for b in blocks):
            excluded["functor"] += 1
        else:
            lemmas.append(_make_lemma(src, logical_prefix, sentences, i, end, match, blocks))
        # An unterminated proof stops at the command that interrupted it; scan that command next.
        i = end + 1 if outcome not in ("unterminated", "definition") else end
    return FileExtraction(lemmas, excluded)


def extract_lemmas(path: Path, logical_prefix: str) -> list[ExtractedLemma]:
    """The lemmas of one ``.v`` file. ``logical_prefix`` is its logical path, e.g. ``Coq.Lists.List``.

    Raises:
        CoqLexError: if the file does not split into sentences.
    """
    return extract_from_source(Path(path).read_text(encoding="utf-8"), logical_prefix).lemmas


def coq_where() -> Path:
    """The installed Coq's library folder (``coqc -where``): ``theories/`` and ``user-contrib/`` are in it."""
    coqc = shutil.which("coqc")
    if coqc is None:
        raise ProverNotFound(f"coqc not found on PATH; {COQ.install_hint} (or pass root=)")
    return Path(subprocess.run([coqc, "-where"], capture_output=True, text=True, check=True, timeout=60).stdout.strip())


def stdlib_root() -> Path:
    """The installed stdlib's ``theories`` folder, from ``coqc -where``."""
    return coq_where() / "theories"


def lemma_to_task(
    lemma: ExtractedLemma,
    *,
    task_id: str,
    rel_path: str,
    suite: str = SUITE_NAME,
    timeout_s: float = 30.0,
) -> Task:
    """A :class:`Task` for one extracted lemma (``reference_proof`` is the exact proof slice)."""
    return Task(
        id=task_id,
        system="coq",
        context=lemma.context,
        statement=lemma.statement,
        reference_proof=lemma.proof,
        category=lemma.category,
        timeout_s=timeout_s,
        suite=suite,
        metadata={
            "file": rel_path,
            "line": lemma.line,
            "qualid": lemma.qualid,
            "sections": list(lemma.sections),
            "modules": list(lemma.modules),
            "proof_lines": lemma.proof_lines,
        },
    )


@dataclass(frozen=True)
class SourceFile:
    """One ``.v`` file to extract from, and the names its tasks get.

    Attributes:
        path: The file on disk.
        rel_path: Its path as written into each task's ``metadata["file"]``.
        logical: Its logical name under the load path, e.g. ``Coq.Lists.List`` or
            ``stdpp.list``: the prefix of every lemma's ``qualid``.
        id_stem: The dotted part of task ids after the suite's id prefix, e.g. ``Lists.List``.
    """

    path: Path
    rel_path: str
    logical: str
    id_stem: str


def extract_sources(
    sources: Iterable[SourceFile],
    *,
    id_prefix: str,
    stats: ExtractionStats | None = None,
    progress: bool = False,
    include_long: bool = False,
    suite: str = SUITE_NAME,
    timeout_s: float = 30.0,
    description: str = "extracting",
) -> tuple[list[Task], ExtractionStats]:
    """Tasks for every lemma of ``sources``, in the order given, and the counts of the run.

    Task ids are ``<id_prefix>.<id_stem>.<modules>.<name>``; a repeated id gets
    ``.2``, ``.3``, ... A file that does not lex is recorded in
    ``stats.files_skipped``, not raised. ``stats`` may carry counts from the
    caller (e.g. files it excluded).
    """
    stats = ExtractionStats() if stats is None else stats
    tasks: list[Task] = []
    seen: Counter[str] = Counter()
    files = list(sources)
    with ProgressBar(description, len(files), enabled=progress) as bar:
        for source in files:
            bar.advance()
            stats.files_scanned += 1
            try:
                found = extract_from_source(source.path.read_text(encoding="utf-8"), source.logical)
            except (CoqLexError, UnicodeDecodeError) as exc:
                stats.files_skipped[source.rel_path] = f"{type(exc).__name__}: {exc}"
                continue
            stats.excluded.update(found.excluded)
            for lemma in found.lemmas:
                stats.categories[lemma.category] += 1
                if lemma.category == LONG and not include_long:
                    continue
                base = ".".join((id_prefix, source.id_stem, *lemma.modules, lemma.name))
                seen[base] += 1
                task_id = base if seen[base] == 1 else f"{base}.{seen[base]}"
                stats.duplicate_ids += seen[base] > 1
                tasks.append(lemma_to_task(lemma, task_id=task_id, rel_path=source.rel_path, suite=suite,
                                           timeout_s=timeout_s))
    return tasks, stats


def extract_stdlib(
    root: Path | None = None,
    *,
    progress: bool = False,
    include_long: bool = False,
    suite: str = SUITE_NAME,
    timeout_s: float = 30.0,
) -> tuple[list[Task], ExtractionStats]:
    """Tasks for every lemma of the Coq standard library, sorted by file then position.

    Args:
        root: The ``theories`` folder; by default the one of the installed ``coqc``.
        progress: Show a rich progress bar over files.
        include_long: Keep proofs longer than 20 lines (category ``long``).
        suite: Suite name written into each task.
        timeout_s: Per-check budget written into each task.

    Returns:
        The tasks, with ids ``coq.stdlib.<dirs>.<file>.<modules>.<name>`` (a
        repeated id gets ``.2``, ``.3``, ...), and the counts of the run.
    """
    root = stdlib_root() if root is None else Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"Coq stdlib folder {root} does not exist; pass the `theories` folder of a Coq install")
    files = sorted(root.rglob("*.v"), key=lambda p: p.relative_to(root).as_posix())
    stats = ExtractionStats()
    sources: list[SourceFile] = []
    for path in files:
        rel = path.relative_to(root)
        if rel.parts[0] in EXCLUDED_STDLIB_DIRS:
            stats.files_excluded[rel.as_posix()] = f"under {rel.parts[0]}/"
            continue
        dotted = ".".join((*rel.parts[:-1], rel.stem))
        sources.append(SourceFile(path, rel.as_posix(), f"Coq.{dotted}", dotted))
    return extract_sources(sources, id_prefix="coq.stdlib", stats=stats, progress=progress,
                           include_long=include_long, suite=suite, timeout_s=timeout_s,
                           description=f"extracting {root}")


def sample_suite(
    tasks: Iterable[Task],
    counts: Mapping[str, int] | None = None,
    seed: int = 0,
) -> list[Task]:
    """Sample ``counts[category]`` tasks per category, deterministically, sorted by id.

    Each category draws from its own generator, seeded by ``(seed, category)``,
    over its tasks sorted by id: the sample of one category does not change
    when another category's count does. A category with fewer tasks than asked
    contributes all of them.

    Args:
        tasks: Candidate tasks (e.g. from :func:`extract_stdlib`).
        counts: Tasks wanted per category; default Selene's 160/120/80 for P1/P2/P3.
        seed: Sampling seed.
    """
    counts = DEFAULT_SAMPLE_COUNTS if counts is None else counts
    by_category: dict[str, list[Task]] = {}
    for task in tasks:
        by_category.setdefault(task.category, []).append(task)
    chosen: list[Task] = []
    for category in sorted(counts):
        wanted = counts[category]
        if wanted < 0:
            raise ValueError(f"sample count for {category!r} must be >= 0, got {wanted}")
        pool = sorted(by_category.get(category, []), key=lambda t: t.id)
        rng = random.Random(f"{seed}:{category}")
        chosen.extend(pool if wanted >= len(pool) else rng.sample(pool, wanted))
    return sorted(chosen, key=lambda t: t.id)


# --- parsing helpers -------------------------------------------------------------------------


def _terminator(code: str) -> str | None:
    """The kind of proof terminator ``code`` is (``ok``/``admitted``/``aborted``), or None."""
    word = code.removesuffix(".").strip()
    if word in ("Qed", "Defined"):
        return "ok"
    if word == "Admitted":
        return "admitted"
    if word in ("Abort", "Abort All") or word.startswith("Save ") or word == "Save":
        return "aborted"
    return None


def _is_proof_opener(code: str) -> bool:
    return _PROOF_OPENER_RE.match(code) is not None


def _starts_command(code: str) -> bool:
    """A sentence that cannot occur inside a proof: another lemma or a Section/Module/End."""
    head, _ = command_head(code)
    return bool(
        _THEOREM_RE.match(head.removeprefix("Program ").lstrip())
        or is_block_command(head)
    )


def _find_proof_end(sentences: list[Sentence], i: int) -> tuple[int, str]:
    """Index of the sentence that ends the proof of the statement ``sentences[i]``, and how it ends.

    The outcome is ``ok``, ``admitted``, ``aborted``, ``empty_proof`` or
    ``unterminated`` (then the index is the sentence that interrupted the proof).
    """
    for j in range(i + 1, len(sentences)):
        s = sentences[j]
        if s.kind != "sentence":
            continue
        if j == i + 1 and _PROOF_TERM_RE.match(s.code) and not _is_proof_opener(s.code):
            return j, "ok"  # ``Proof term.``
        kind = _terminator(s.code)
        if kind is not None:
            return j, ("empty_proof" if j == i + 1 else kind)
        if _starts_command(s.code):
            return j, "unterminated"
    return len(sentences), "unterminated"


def _is_mutual(head: str) -> bool:
    """Whether a theorem statement has a ``with`` outside parentheses and ``match ... end``."""
    depth = matches = 0
    for token in _WITH_TOKENS_RE.findall(_STRING_RE.sub('""', head)):
        if token == "(":
            depth += 1
        elif token == ")":
            depth -= 1
        elif token == "match":
            matches += 1
        elif token == "end":
            matches -= 1
        elif depth == 0 and matches <= 0:
            return True
    return False


def _make_lemma(
    src: str,
    logical_prefix: str,
    sentences: list[Sentence],
    i: int,
    end: int,
    match: re.Match[str],
    blocks: list[Block],
) -> ExtractedLemma:
    statement, first, last = sentences[i], sentences[i + 1], sentences[end]
    proof = src[first.start : last.end]
    modules = tuple(b.name for b in blocks if b.kind != "Section")
    proof_lines = count_proof_lines(proof)
    return ExtractedLemma(
        name=match.group(2),
        keyword=match.group(1),
        qualid=".".join((logical_prefix, *modules, match.group(2))),
        statement=src[statement.start : statement.end],
        proof=proof,
        context=src[: statement.start],
        separator=src[statement.end : first.start],
        line=src.count("\n", 0, statement.start) + 1,
        statement_start=statement.start,
        proof_end=last.end,
        sections=tuple(b.name for b in blocks if b.kind == "Section"),
        modules=modules,
        proof_lines=proof_lines,
        category=proof_category(proof_lines),
    )


def _is_single_sentence(line: str, predicate: Callable[[str], bool]) -> bool:
    try:
        sentences = split_sentences(line)
    except CoqLexError:
        return False
    return len(sentences) == 1 and sentences[0].kind == "sentence" and predicate(sentences[0].code)


def _blank_comments(text: str) -> str:
    """``text`` with every comment replaced by spaces, newlines kept (nested, string-aware as in Coq)."""
    out = list(text)
    i, n, depth, start = 0, len(text), 0, 0
    while i < n:
        if text.startswith("(*", i):
            if depth == 0:
                start = i
            depth += 1
            i += 2
        elif depth and text.startswith("*)", i):
            depth -= 1
            i += 2
            if depth == 0:
                out[start:i] = [c if c == "\n" else " " for c in text[start:i]]
        elif text[i] == '"':
            close = text.find('"', i + 1)
            while close != -1 and text.startswith('""', close):
                close = text.find('"', close + 2)
            i = n if close == -1 else close + 1
        else:
            i += 1
    return "".join(out)
