"""Selene's retrieval: BM25 over source chunks split at blank lines, and dependency-fact excerpts.

The library is built from *the suite's source files*: for each task, the file
named by ``metadata.source_path`` or ``metadata.file`` (relative to a source
root; for Coq the installed stdlib's ``theories`` by default). A task without a
readable file contributes its own text instead (context, statement, reference
proof). Files are cut into chunks at blank lines (Selene §5.1) and indexed
with BM25 (``bm25s``).

*The target's own proof is withheld*: a chunk that overlaps the target's
statement or reference proof in its file, or that contains the statement or
(when it is not a trivial one) the reference proof anywhere, is never returned
for that target.

Dependency facts (Selene §5.1): identifiers used by the reference proof that
are defined somewhere in the library; for each, the first lines from its
definition. They come from the ground-truth proof, so results that use them
are an *upper bound* (the paper's words), and the evaluation summary says so.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from proofgym.envs.types import Task

_IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_']*(?:\.[A-Za-z_][A-Za-z0-9_']*)*")
_OP_RE = re.compile(r"[-+*/<>=~^&|@%!:]{2,3}")

DEFINITION_PATTERNS: Mapping[str, re.Pattern[str]] = {
    "coq": re.compile(
        r"^\s*(?:#\[[^\]]*\]\s*)?(?:(?:Local|Global|Polymorphic|Monomorphic|Program|Private)\s+)*"
        r"(?:Theorem|Lemma|Fact|Remark|Corollary|Proposition|Property|Example|Definition|Fixpoint|CoFixpoint|"
        r"Inductive|CoInductive|Variant|Record|Structure|Class|Instance|Let|Axiom|Parameter|Hypothesis|"
        r"Variable|Conjecture|Function)\s+([A-Za-z_][\w']*)"
    ),
    "isabelle": re.compile(
        r"^\s*(?:lemma|theorem|corollary|proposition|definition|fun|function|primrec|abbreviation|datatype|"
        r"inductive|record|type_synonym|locale|lemmas)\s+(?:\([^)]*\)\s*)?\"?([A-Za-z_][\w']*)"
    ),
    "hol_light": re.compile(r"^\s*let\s+(?:rec\s+)?([A-Za-z_][\w']*)\s*="),
    "dafny": re.compile(
        r"^\s*(?:(?:ghost|static|opaque|twostate)\s+)*(?:lemma|function|method|predicate|datatype|class|const|"
        r"type|codatatype|trait)\s+(?:\{[^}]*\}\s*)*([A-Za-z_][\w']*)"
    ),
}


def code_tokens(text: str) -> list[str]:
    """BM25 tokens of code: identifiers (lower-cased; ``Nat.add_comm`` also as ``nat``, ``add``, ``comm``) and operators."""
    tokens: list[str] = []
    for match in _IDENT_RE.finditer(text):
        word = match.group(0).lower()
        tokens.append(word)
        parts = [p for p in re.split(r"[._']+", word) if p]
        if len(parts) > 1:
            tokens.extend(parts)
    tokens.extend(_OP_RE.findall(text))
    return tokens


@dataclass(frozen=True)
class Chunk:
    """A run of non-blank lines of one source document (lines are 1-based, inclusive)."""

    text: str
    doc: str
    start_line: int
    end_line: int

    def head(self, n_lines: int) -> str:
        return "\n".join(self.text.split("\n")[:n_lines])


def split_chunks(text: str, doc: str) -> list[Chunk]:
    """Cut ``text`` at blank lines (Selene's chunking)."""
    chunks: list[Chunk] = []
    current: list[str] = []
    start = 0
    for lineno, line in enumerate(text.split("\n"), start=1):
        if line.strip():
            if not current:
                start = lineno
            current.append(line)
        elif current:
            chunks.append(Chunk("\n".join(current), doc, start, lineno - 1))
            current = []
    if current:
        chunks.append(Chunk("\n".join(current), doc, start, start + len(current) - 1))
    return chunks


def _squash(text: str) -> str:
    return " ".join(text.split())


@dataclass(frozen=True)
class Fact:
    """A dependency fact: its name, where it is defined, and the first lines from there."""

    name: str
    doc: str
    line: int
    excerpt: str


class SourceLibrary:
    """BM25 over chunks of source documents, with per-target withholding and a definition index.

    Args:
        docs: Document name -> text.
        system: The documents' system (chooses the definition pattern).
        own_docs: Task id -> the document that holds the task (for exact withholding).
    """

    def __init__(self, docs: Mapping[str, str], *, system: str = "coq",
                 own_docs: Mapping[str, str] | None = None) -> None:
        import bm25s
        self.system = system
        self.docs = dict(docs)
        self.own_docs = dict(own_docs or {})
        self._doc_lines = {name: text.split("\n") for name, text in self.docs.items()}
        unique: dict[str, int] = {}
        self.chunks: list[Chunk] = []
        self.occurrences: list[list[tuple[str, int, int]]] = []
        for name, text in self.docs.items():
            for chunk in split_chunks(text, name):
                idx = unique.get(chunk.text)
                if idx is None:
                    idx = unique[chunk.text] = len(self.chunks)
                    self.chunks.append(chunk)
                    self.occurrences.append([])
                self.occurrences[idx].append((chunk.doc, chunk.start_line, chunk.end_line))
        self._index = None
        if self.chunks:
            self._index = bm25s.BM25()
            self._index.index([code_tokens(c.text) or ["<empty>"] for c in self.chunks], show_progress=False)
        pattern = DEFINITION_PATTERNS.get(system)
        self.definitions: dict[str, list[tuple[str, int]]] = {}
        if pattern is not None:
            for name, lines in self._doc_lines.items():
                for i, line in enumerate(lines):
                    m = pattern.match(line)
                    if m:
                        self.definitions.setdefault(m.group(1), []).append((name, i + 1))

    # -- construction from a suite ------------------------------------------------------------------
    @classmethod
    def from_tasks(cls, tasks: Sequence[Task], *, source_root: str | Path | None = None) -> SourceLibrary:
        """The library of the suite's source files (see the module docstring)."""
        system = tasks[0].system if tasks else "coq"
        roots = _source_roots(tasks, source_root)
        docs: dict[str, str] = {}
        own: dict[str, str] = {}
        for task in tasks:
            path = _task_file(task, roots)
            if path is not None:
                name = str(path)
                if name not in docs:
                    docs[name] = path.read_text(encoding="utf-8", errors="replace")
            else:
                name = f"task:{task.id}"
                docs[name] = f"{task.context}{task.statement}\n{task.reference_proof}\n"
            own[task.id] = name
        return cls(docs, system=system, own_docs=own)

    # -- withholding ----------------------------------------------------------------------------
    def target_spans(self, task: Task) -> list[tuple[str, int, int]]:
        """Line spans (doc, first, last) of the task's statement and reference proof in its own document."""
        name = self.own_docs.get(task.id)
        text = self.docs.get(name or "")
        if not text or not task.statement.strip():
            return []
        spans = []
        pos = text.find(task.statement)
        while pos != -1:
            end = pos + len(task.statement)
            if task.reference_proof.strip():
                q = text.find(task.reference_proof, end)
                if q != -1 and q - end <= 2000:
                    end = q + len(task.reference_proof)
            spans.append((name, text.count("\n", 0, pos) + 1, text.count("\n", 0, end) + 1))
            pos = text.find(task.statement, pos + 1)
        return spans

    def is_withheld(self, idx: int, task: Task, spans: Sequence[tuple[str, int, int]] | None = None) -> bool:
        """Whether chunk ``idx`` would show the target's own statement or proof."""
        spans = self.target_spans(task) if spans is None else spans
        for doc, first, last in spans:
            for odoc, start, end in self.occurrences[idx]:
                if odoc == doc and start <= last and end >= first:
                    return True
        squashed = _squash(self.chunks[idx].text)
        statement = _squash(task.statement)
        if statement and statement in squashed:
            return True
        proof = _squash(task.reference_proof)
        return len(proof) >= 40 and proof in squashed

    # -- queries --------------------------------------------------------------------------------
    def search(self, query: str, k: int = 5, *, withhold: Task | None = None) -> list[tuple[Chunk, float]]:
        """The ``k`` best chunks for ``query`` by BM25, none of ``withhold``'s own proof."""
        if self._index is None:
            return []
        tokens = code_tokens(query)
        if not tokens:
            return []
        scores = np.asarray(self._index.get_scores(tokens))
        order = np.argsort(-scores, kind="stable")
        spans = self.target_spans(withhold) if withhold is not None else []
        out = []
        for idx in order:
            if scores[idx] <= 0 or len(out) >= k:
                break
            if withhold is not None and self.is_withheld(int(idx), withhold, spans):
                continue
            out.append((self.chunks[int(idx)], float(scores[idx])))
        return out

    def similar(self, task: Task, n_lines: int = 10) -> str:
        """The first ``n_lines`` lines of the chunk closest to the task's statement ("" if none)."""
        found = self.search(task.statement, k=1, withhold=task)
        return found[0][0].head(n_lines) if found else ""

    def dependencies(self, task: Task, n_lines: int = 5, max_facts: int = 6) -> list[Fact]:
        """Facts the reference proof uses that the library defines, with the first ``n_lines`` of each definition.

        A definition inside the target's own statement or proof is skipped, and so
        is one later in the target's own file (the proof cannot have used it).
        """
        spans = self.target_spans(task)
        own = self.own_docs.get(task.id)
        target_line = min((first for _, first, _ in spans), default=None)
        imported = _imported_modules(task.context)
        facts: list[Fact] = []
        seen: set[str] = set()
        for name in _identifiers(task.reference_proof, self.system):
            if len(facts) >= max_facts:
                break
            qualifiers = [q.lower() for q in name.split(".")[:-1]]
            for candidate in (name, name.rsplit(".", 1)[-1]):
                if candidate in seen or candidate not in self.definitions:
                    continue
                site = self._pick_definition(candidate, own, target_line, spans, qualifiers, imported)
                if site is None:
                    continue
                seen.add(candidate)
                doc, line = site
                last = line - 1 + n_lines
                for span_doc, first, _ in spans:  # the excerpt stops before the target's own text
                    if span_doc == doc and line < first:
                        last = min(last, first - 1)
                excerpt = "\n".join(self._doc_lines[doc][line - 1: last]).rstrip()
                if _squash(task.statement) and _squash(task.statement) in _squash(excerpt):
                    continue
                facts.append(Fact(candidate, doc, line, excerpt))
                break
        return facts

    def _pick_definition(self, name: str, own: str | None, target_line: int | None,
                         spans: Sequence[tuple[str, int, int]], qualifiers: Sequence[str] = (),
                         imported: frozenset[str] = frozenset()) -> tuple[str, int] | None:
        """Where ``name`` most likely comes from (origins cannot always be located precisely, Selene §5.1).

        The nearest earlier definition in the target's own file; else one in a file whose
        name matches the identifier's qualifier (``Nat.`` -> ``PeanoNat.v``); else one in a
        file the target's context imports; else the first one found.
        """
        sites = self.definitions.get(name, [])
        before = [(d, ln) for d, ln in sites if d == own and target_line is not None and ln < target_line]
        if before:
            return before[-1]
        inside = {(d, ln) for d, ln in sites for sd, first, last in spans if d == sd and first <= ln <= last}
        others = [(d, ln) for d, ln in sites if d != own and (d, ln) not in inside]
        if not others:
            return None

        def rank(site: tuple[str, int]) -> int:
            stem = Path(site[0]).stem.lower()
            if qualifiers and any(q in stem for q in qualifiers):
                return 0
            return 1 if stem in imported else 2

        return min(others, key=rank)


# Words of proof scripts that are not facts (tactics, keywords), per system. A name that
# is both (ssreflect defines ``apply``) is a tactic in a proof.
_NOT_FACTS: Mapping[str, frozenset[str]] = {
    "coq": frozenset("""
        Proof Qed Defined Admitted using with in at as by from to intro intros apply eapply exact eexact rewrite
        erewrite simpl auto eauto trivial reflexivity symmetry transitivity induction destruct case elim split
        left right exists eexists assumption eassumption unfold fold red hnf cbn cbv compute vm_compute lia lra
        nia nra psatz omega ring ring_simplify field field_simplify congruence discriminate injection inversion
        inversion_clear subst replace generalize specialize assert enough pose set clear revert now try repeat
        first solve do progress idtac fail intuition tauto firstorder constructor econstructor absurd
        contradiction contradict exfalso f_equal change pattern remember cut easy done refine apply_all
        dependent decide setoid_rewrite autorewrite autounfold unshelve shelve cycle swap exact_no_check
        forall fun let match end if then else return fix cofix Type Prop Set core arith real zarith
        rename move have suff wlog elimtype destruct_all rewrite_all instantiate evar lazy simple notypeclasses
        Some None true false nat bool list
    """.split()),
    "isabelle": frozenset("by apply auto simp blast force fastforce metis arith linarith presburger induct "
                          "cases rule erule drule frule intro elim unfolding using done proof qed show have "
                          "thus hence obtain where and assume fix from then also finally moreover ultimately "
                          "next case of OF THEN sym subst clarsimp clarify safe smt".split()),
    "hol_light": frozenset("THEN THENL ORELSE REPEAT TRY ALL_TAC NO_TAC REWRITE_TAC ASM_REWRITE_TAC SIMP_TAC "
                           "ASM_SIMP_TAC MESON_TAC ASM_MESON_TAC ARITH_TAC ASM_ARITH_TAC GEN_TAC STRIP_TAC "
                           "DISCH_TAC CONJ_TAC EXISTS_TAC MATCH_MP_TAC INDUCT_TAC REAL_ARITH_TAC let in fun".split()),
    "dafny": frozenset("assert calc forall exists var if then else match case requires ensures decreases "
                       "invariant reads modifies returns true false".split()),
}


def _identifiers(text: str, system: str = "coq") -> Iterable[str]:
    skip = _NOT_FACTS.get(system, frozenset())
    seen: set[str] = set()
    for match in _IDENT_RE.finditer(text):
        word = match.group(0)
        if word in seen or word in skip or len(word) <= 2 or re.fullmatch(r"(?:IH|H)[A-Za-z]{0,4}\d*'*", word):
            continue
        seen.add(word)
        yield word


_IMPORT_RE = re.compile(r"\b(?:Require\s+(?:Import|Export)?|Import|Export|imports)\s+([\w.'\s]+?)\.(?:\s|$)")


def _imported_modules(context: str) -> frozenset[str]:
    """Lower-cased last components of the modules a context ``Require``s/``Import``s (for ranking origins)."""
    names = set()
    for match in _IMPORT_RE.finditer(context):
        names.update(word.rsplit(".", 1)[-1].lower() for word in match.group(1).split())
    return frozenset(names)


def _source_roots(tasks: Sequence[Task], source_root: str | Path | None) -> list[Path]:
    roots = [Path(source_root).expanduser()] if source_root else []
    if any(t.system == "coq" and t.metadata.get("file") for t in tasks):
        try:
            from proofgym.envs.tasks.coq_extract import stdlib_root

            roots.append(stdlib_root())
            # An installed library's suite (coq-stdpp: metadata.file ``stdpp/list.v``) names its
            # files under user-contrib; a suite built since carries metadata.source_path too.
            roots.append(stdlib_root().parent / "user-contrib")
        except Exception:  # noqa: BLE001 - no coqc here: files resolve against other roots or not at all
            pass
    return roots


def _task_file(task: Task, roots: Sequence[Path]) -> Path | None:
    for key in ("source_path", "file"):
        value = task.metadata.get(key)
        if not isinstance(value, str) or not value:
            continue
        candidates = [Path(value)] if Path(value).is_absolute() else [root / value for root in roots]
        for path in candidates:
            if path.is_file():
                return path
    return None
