"""Equivalence checking (SkillForge section 3.4, appendix F): is a verified program the reference's twin?

A program can verify against a weak statement and still compute something else than the
reference does; SkillForge reports VR (verified) and ER (verified *and* equivalent) apart, and
the gap measures that. Here the statement is anchored, so the pre- and postconditions of the
candidate and the reference are the task's own (stages 1 and 2 of appendix F hold by
construction); stage 3, behaviour, is a wrapper that Dafny must verify::

    module PG_Ctx   { <the task's context> }
    module PG_Cand  { import opened PG_Ctx  <candidate without the context> }
    module PG_Ref   { import opened PG_Ctx  <reference without the context> }
    module PG_Equiv {
      import opened PG_Ctx
      import PG_Cand
      import PG_Ref
      method Equiv_M(x: int) requires P(x) {       // a method target
        var c := PG_Cand.M(x);
        var r := PG_Ref.M(x);
        assert c == r;                              // arrays: c[..] == r[..]
      }
      lemma Equiv_F(x: int) requires P(x) ensures PG_Cand.F(x) == PG_Ref.F(x) {}   // a function target
    }

A method is opaque to its callers, so its wrapper proves equality only when the postcondition
determines the result: a sound but incomplete check, like the paper's. Lemma targets are
equivalent by proof irrelevance. Methods that modify the heap, class members and generic
declarations are reported ``not_applicable`` rather than guessed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proofgym.envs.types import Task
from proofgym.envs.verifiers.dafny.integrity import Target, trusted_ranges
from proofgym.envs.verifiers.dafny.lexer import CLAUSE_KEYWORDS, matching_close, tokenize

__all__ = ["LEMMA_NOTE", "EquivalenceResult", "equivalence_program"]

#: The note of a lemma target: equivalent by proof irrelevance (its statement is anchored).
LEMMA_NOTE = "a lemma (any proof of the anchored statement is equivalent)"


@dataclass(frozen=True)
class EquivalenceResult:
    """Outcome of one equivalence check.

    Attributes:
        status: ``equivalent`` (every applicable target proven equal), ``not_proven`` (a wrapper
            failed: behaviour differs, or the spec does not pin it down), ``not_applicable``
            (no target this check can compare), ``unverified`` (the candidate is not OK).
        reasons: per-target notes.
        messages: Dafny's errors on the wrapper program.
        program: the wrapper program that was verified ("" when none).
    """

    status: str
    reasons: tuple[str, ...] = ()
    messages: tuple[str, ...] = ()
    program: str = ""

    @property
    def equivalent(self) -> bool:
        return self.status == "equivalent"


@dataclass(frozen=True)
class _Sig:
    name: str
    params: list[tuple[str, str]]  # (name, type text)
    outs: list[tuple[str, str]]
    requires: list[str]
    generic: bool


def _signature(target: Target) -> _Sig | None:
    text = target.header_text
    tokens = tokenize(text)
    name = target.symbol.name
    k = next((i for i, t in enumerate(tokens) if t.text == name), -1)
    if k == -1 or k + 1 >= len(tokens):
        return None
    generic = tokens[k + 1].text == "<"
    j = k + 1
    if generic:
        return _Sig(name, [], [], [], True)
    if tokens[j].text != "(":
        return None
    close = matching_close(tokens, j)
    params = _params(text, tokens, j, close)
    outs: list[tuple[str, str]] = []
    j = close + 1
    if j < len(tokens) and tokens[j].text == "returns":
        oc = matching_close(tokens, j + 1)
        outs = _params(text, tokens, j + 1, oc)
        j = oc + 1
    requires: list[str] = []
    depth = 0
    current: list[int] | None = None
    for i in range(j, len(tokens)):
        t = tokens[i]
        if depth == 0 and t.text in CLAUSE_KEYWORDS:
            if current is not None:
                requires.append(text[tokens[current[0]].start:tokens[i - 1].end])
            current = [i + 1] if t.text == "requires" else None
            continue
        if t.text in ("(", "[", "{"):
            depth += 1
        elif t.text in (")", "]", "}"):
            depth -= 1
    if current is not None and current[0] < len(tokens):
        requires.append(text[tokens[current[0]].start:tokens[-1].end])
    return _Sig(name, params, outs, requires, False)


def _params(text: str, tokens: list, open_i: int, close_i: int) -> list[tuple[str, str]]:
    out = []
    start = open_i + 1
    depth = 0
    for i in range(open_i + 1, close_i + 1):
        t = tokens[i].text
        if t in ("(", "[", "{", "<"):
            depth += 1
        elif t in (")", "]", "}", ">") and i != close_i:
            depth -= 1
        if (t == "," and depth == 0) or i == close_i:
            part = tokens[start:i]
            words = [p.text for p in part]
            while words and words[0] in ("ghost", "nameonly"):
                part, words = part[1:], words[1:]
            if len(part) >= 3 and part[1].text == ":":
                out.append((part[0].text, text[part[2].start:part[-1].end]))
            start = i + 1
    return out


def _strip_context(task: Task, anchor: Any, program: str) -> str | None:
    tokens = tokenize(program)
    ranges, missing = trusted_ranges(anchor, tokens)
    if missing:
        return None
    spans = sorted((tokens[a].start, tokens[b - 1].end) for a, b in ranges if b > a)
    out, cursor = [], 0
    for s, e in spans:
        out.append(program[cursor:s])
        cursor = e
    out.append(program[cursor:])
    return "".join(out)


def _indent(text: str) -> str:
    return "\n".join(("  " + line) if line.strip() else line for line in text.splitlines())


def equivalence_program(task: Task, anchor: Any, candidate: str) -> tuple[str, list[str], list[str]]:
    """The wrapper program, the wrapper names it verifies, and notes on targets it cannot compare."""
    cand = _strip_context(task, anchor, candidate)
    ref = _strip_context(task, anchor, task.reference_proof)
    if cand is None or ref is None:
        return "", [], ["the context is not kept verbatim"]
    wrappers: list[str] = []
    names: list[str] = []
    notes: list[str] = []
    for target in anchor.targets:
        sym = target.symbol
        words = set(target.kind_words)
        label = sym.label
        if sym.parent not in ("_default", "") or sym.module not in ("_module", ""):
            notes.append(f"{label}: a class or module member (not compared)")
            continue
        if words & {"lemma", "colemma", "inductive", "twostate"} or ("ghost" in words and "method" in words):
            notes.append(f"{label}: {LEMMA_NOTE}")
            continue
        sig = _signature(target)
        if sig is None or sig.generic:
            notes.append(f"{label}: generic or unreadable signature (not compared)")
            continue
        params = ", ".join(f"{n}: {t}" for n, t in sig.params)
        args = ", ".join(n for n, _ in sig.params)
        req = "".join(f"\n  requires {r}" for r in sig.requires)
        wname = f"Equiv_{sanitize_name(sig.name)}"
        if sym.kind == "Method":
            if target.header.modifies:
                notes.append(f"{label}: modifies the heap (not compared)")
                continue
            if not sig.outs:
                notes.append(f"{label}: returns nothing (not compared)")
                continue
            cs = ", ".join(f"c{i}" for i in range(len(sig.outs)))
            rs = ", ".join(f"r{i}" for i in range(len(sig.outs)))
            eqs = " && ".join(
                f"c{i}[..] == r{i}[..]" if t.replace(" ", "").startswith("array<") else f"c{i} == r{i}"
                for i, (_, t) in enumerate(sig.outs))
            # Snapshots of the arrays read: after each call, the array still holds the snapshot, which
            # gives z3 the ground facts that carry one call's postcondition over to the other's heap.
            arrays = [n for n, t in sig.params if t.replace(" ", "").startswith("array<")]
            snap = "".join(f"  ghost var pg_{n} := {n}[..];\n" for n in arrays)
            keep = "".join(f"  assert {n}[..] == pg_{n};\n" for n in arrays)
            wrappers.append(f"method {wname}({params}){req}\n{{\n{snap}  var {cs} := PG_Cand.{sig.name}({args});\n"
                            f"{keep}  var {rs} := PG_Ref.{sig.name}({args});\n{keep}  assert {eqs};\n}}\n")
        else:
            wrappers.append(f"lemma {wname}({params}){req}\n  ensures PG_Cand.{sig.name}({args}) == "
                            f"PG_Ref.{sig.name}({args})\n{{\n}}\n")
        names.append(wname)
    if not wrappers:
        return "", [], notes
    ctx_import = "  import opened PG_Ctx\n" if task.context.strip() else ""
    parts = []
    if task.context.strip():
        parts.append(f"module PG_Ctx {{\n{_indent(task.context)}\n}}\n")
    parts.append(f"module PG_Cand {{\n{ctx_import}{_indent(cand)}\n}}\n")
    parts.append(f"module PG_Ref {{\n{ctx_import}{_indent(ref)}\n}}\n")
    body = "".join(_indent(w) + "\n" for w in wrappers)
    parts.append(f"module PG_Equiv {{\n{ctx_import}  import PG_Cand\n  import PG_Ref\n{body}}}\n")
    return "\n".join(parts), names, notes


def sanitize_name(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name)
