"""SkillForge's skill prompt templates (after its appendix A) and output post-processing (appendix B.3).

Each template is a ``str.format`` string over the fields the harness fills in: ``description``,
``context``, ``spec``, ``program``, ``category``, ``line``, ``suggestion``, ``errors``. The
wording keeps the paper's contracts: SYNTHBODY must not modify the signature or weaken the
postcondition, REPAIRCODE makes minimal edits, GENINVARIANT's invariants hold on entry, are
preserved, and with the negated guard imply the postcondition, STRENGTHENSPEC only touches
requires/ensures clauses of helpers (the task's own headers are anchored).
"""

from __future__ import annotations

import re
import unicodedata

from proofgym.envs.verifiers.dafny.lexer import DafnyLexError, tokenize

DAFNY_VERSION_NOTE = (
    "Target Dafny 2.3: use `function method` for compiled functions, no `by` blocks, no `expect`, "
    "no `assume`, no `{:verify false}`/`{:axiom}`/`{:extern}`, no `decreases *`."
)

INFER_SPEC = """You are an expert in Dafny formal specification.
Read the task and write ONLY the specification skeleton (no bodies).
For each declaration give: type (method, function, predicate or lemma), name, parameters,
returns, and its requires/ensures clauses. Infer implicit domain constraints
(e.g. "non-negative integer" becomes `requires x >= 0` or type `nat`).
{version_note}

Task: {description}

Code that the program must keep (already given, do not repeat it):
```dafny
{context}
```

Answer with the Dafny headers only, in a ```dafny block.
"""

SYNTH_BODY = """You are an expert Dafny programmer.
Write a complete Dafny program that implements the specification below and verifies.
Rules:
- Do NOT modify the signature or specification (requires/ensures/modifies/reads) of any declaration in it.
- Do NOT weaken the postcondition.
- Keep the given code unchanged; add helper lemmas or functions (with bodies) if needed.
- Give loops invariants and, where needed, decreases clauses.
{version_note}

Task: {description}

Code to keep:
```dafny
{context}
```

Specification to implement:
```dafny
{spec}
```
{feedback}
Answer with the whole program in a ```dafny block.
"""

GEN_INVARIANT = """You are an expert in Dafny loop invariants.
The program below fails to verify because of a loop (error category: {category}, line {line}).
Propose loop invariants that
(1) hold on entry to the loop,
(2) are preserved by one iteration of the loop body, and
(3) together with the negated loop guard imply what is needed after the loop (the postcondition).
Insert them and change nothing else. Do NOT modify any requires/ensures clause.
{version_note}

Verifier errors:
{errors}

Program:
```dafny
{program}
```

Answer with the whole program in a ```dafny block.
"""

DIAGNOSE_ERROR = """You are an expert in Dafny verification errors.
Classify the FIRST error below into exactly one category:
- spec_gap: a postcondition cannot be established
- invariant_missing: a loop invariant is missing, too weak, or not maintained
- body_error: an assertion, termination, precondition, division or index problem in the code
- type_error: a name or type problem (unresolved identifier, type mismatch)
- parse_error: the program does not parse
Answer on three lines:
category: <one category>
line: <line number>
suggestion: <one sentence>

Errors:
{errors}

Program:
```dafny
{program}
```
"""

REPAIR_CODE = """You are an expert Dafny programmer.
Fix the program with MINIMAL edits at the failure site. Do not rewrite it and do not change any
requires/ensures clause of the specification.
Category: {category}
Line: {line}
Suggestion: {suggestion}
{version_note}

Verifier errors:
{errors}

Program:
```dafny
{program}
```

Answer with the whole program in a ```dafny block.
"""

STRENGTHEN_SPEC = """You are an expert in Dafny specifications.
A postcondition cannot be proved (line {line}). Strengthen what the proof relies on: add
requires/ensures clauses to HELPER lemmas or functions (or add a helper lemma) so that the
target's postcondition follows. Only modify requires/ensures clauses of helpers; the headers of
the specification below must stay exactly as they are, and the original intent must be preserved.
{version_note}

Specification (anchored, do not change):
```dafny
{spec}
```

Verifier errors:
{errors}

Program:
```dafny
{program}
```

Answer with the whole program in a ```dafny block.
"""

TEMPLATES = {
    "infer_spec": INFER_SPEC,
    "synth_body": SYNTH_BODY,
    "gen_invariant": GEN_INVARIANT,
    "diagnose_error": DIAGNOSE_ERROR,
    "repair_code": REPAIR_CODE,
    "strengthen_spec": STRENGTHEN_SPEC,
}

_FENCE_RE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)```", re.S)
_UNICODE_FIXES = {
    "\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u2212": "-", "\u2013": "-", "\u2014": "-",
    "\u2264": "<=", "\u2265": ">=", "\u2260": "!=", "\u2192": "->", "\u21d2": "==>", "\u21d4": "<==>",
    "\u2227": "&&", "\u2228": "||", "\u00a0": " ", "\u200b": "",
}


def render(skill: str, **fields: object) -> str:
    """The prompt of ``skill`` with ``fields`` filled in (missing fields are empty)."""
    template = TEMPLATES[skill]
    names = set(re.findall(r"\{(\w+)\}", template))
    values = {name: "" for name in names}
    values["version_note"] = DAFNY_VERSION_NOTE
    values.update({k: "" if v is None else str(v) for k, v in fields.items() if k in names})
    return template.format(**values)


def extract_program(text: str) -> str:
    """The program in a model's answer (appendix B.3).

    Strips markdown fences and language tags (the last ``dafny`` block wins, else the last block,
    else the whole text), normalises Unicode look-alikes to Dafny's ASCII operators, and trims
    trailing whitespace and blank lines.
    """
    blocks = _FENCE_RE.findall(text)
    if blocks:
        dafny = [body for lang, body in blocks if lang.lower() in ("dafny", "dfy")]
        text = (dafny or [body for _, body in blocks])[-1]
    text = unicodedata.normalize("NFC", text)
    for bad, good in _UNICODE_FIXES.items():
        text = text.replace(bad, good)
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    while lines and not lines[0]:
        lines.pop(0)
    return "\n".join(lines) + "\n" if lines else ""


def braces_balanced(program: str) -> bool:
    """Whether ``{``/``}``, ``(``/``)`` and ``[``/``]`` match outside comments and strings."""
    try:
        tokens = tokenize(program)
    except DafnyLexError:
        return False
    pairs = {")": "(", "]": "[", "}": "{"}
    stack: list[str] = []
    for t in tokens:
        if t.text in "([{":
            stack.append(t.text)
        elif t.text in pairs:
            if not stack or stack.pop() != pairs[t.text]:
                return False
    return not stack


def parse_diagnosis(text: str) -> tuple[str, int | None, str]:
    """``(category, line, suggestion)`` from a DIAGNOSEERROR answer; category ``unknown`` if unreadable."""
    cat = re.search(r"category\s*:\s*([a-z_]+)", text, re.I)
    line = re.search(r"line\s*:\s*(\d+)", text, re.I)
    sug = re.search(r"suggestion\s*:\s*(.+)", text, re.I)
    category = cat.group(1).lower() if cat else "unknown"
    if category not in ("spec_gap", "invariant_missing", "body_error", "type_error", "parse_error"):
        category = "unknown"
    return category, int(line.group(1)) if line else None, sug.group(1).strip() if sug else ""
