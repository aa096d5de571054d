"""From a model's reply to a proof: SkillForge's post-processing (App. B.3), for every system.

The steps, in order:

1. drop ``<think>...</think>`` reasoning blocks;
2. take the *last* fenced code block (```` ``` ```` or ``~~~``, any language tag);
   an unterminated last fence (a reply cut at the token limit) counts as a block;
   without any fence the whole reply is used, minus a wrapping pair of backticks;
3. normalise Unicode: NFC, typographic look-alikes that models emit in code
   (no-break and thin spaces, zero-width characters, curly quotes, the minus
   sign U+2212) become their ASCII forms. Not NFKC: it would also rewrite
   symbols that provers read as notation (``ℕ`` would become ``N``);
4. remove a repeated copy of the task's statement at the start ("duplicate
   signatures"): the action is the text *after* the statement, and the verifier
   states the statement itself. Not for Coq: its verifier normalises a repeated
   statement (and prose, a stray ``Require``...) itself, with one rule for every
   path, ``proofgym check`` of a raw reply included
   (:func:`~proofgym.envs.verifiers.coq.proof.normalize_proof`);
5. trim trailing whitespace and blank lines; CRLF becomes LF.

Nothing else is rewritten: markdown such as ``**`` is left alone because it is
also code (Coq's second-level bullet). What the verifier gets is what the model
wrote, less the wrapping.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Any

from proofgym.envs.systems import SPECS

_THINK_RE = re.compile(r"<think>.*?</think>", re.S | re.I)
#: A Markdown fence: a line that starts with one (``` ```coq ```, ``~~~``), or one that ends a line after text
#: (``Sure: ```coq``, ``Qed.```​``): models open and close fences mid-line, and a fence read as text made the
#: whole reply one empty block (an honest proof scored 0). A run of backquotes inside code (``idtac "```".``)
#: is neither: it is not at a line's start nor at its end.
_FENCE_RE = re.compile(r"^[ \t]*(?P<line>```+|~~~+)[ \t]*(?P<line_tag>[\w+#.-]*)[^\n]*$"
                       r"|(?<=[ \t:.,;!?)])(?P<end>```+|~~~+)(?P<end_tag>[\w+#.-]*)[ \t]*$", re.M)

_TRANSLATE = str.maketrans({
    "\u00a0": " ", "\u2007": " ", "\u202f": " ", "\u2000": " ", "\u2001": " ", "\u2002": " ", "\u2003": " ",
    "\u2004": " ", "\u2005": " ", "\u2006": " ", "\u2008": " ", "\u2009": " ", "\u200a": " ", "\u3000": " ",
    "\u200b": None, "\u200c": None, "\u200d": None, "\u2060": None, "\ufeff": None,
    "\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201b": "'", "\u2032": "'",
    "\u201c": '"', "\u201d": '"', "\u201e": '"', "\u201f": '"',
    "\u2212": "-",
})


@dataclass(frozen=True)
class ParsedProof:
    """The proof to submit, and what the parser did to get it.

    Attributes:
        proof: The text for the verifier.
        fenced: Whether it came from a fenced code block.
        notes: Short notes (``unterminated fence``, ``removed repeated statement``...).
    """

    proof: str
    fenced: bool
    notes: tuple[str, ...] = ()


def normalize_unicode(text: str) -> str:
    """NFC plus ASCII forms of typographic look-alikes (see the module docstring)."""
    return unicodedata.normalize("NFC", text).translate(_TRANSLATE)


def last_code_block(text: str) -> tuple[str, bool, bool]:
    """The content of the last fenced block: ``(content, found, terminated)``.

    The one fence rule of every prover and every way in (the reply parser, ``proofgym check``, ``env.step``,
    the service): fences pair in order, a closer being a later bare fence of the same character at least as
    long as its opener; a lone last opener (a reply cut at the token limit) opens an unterminated block. Where
    that lone last fence is bare and nothing follows it, it closes a block that had no opener
    (``Proof. auto. Qed.\\n```\\n``): the last non-blank text between fences is the code.
    """
    fences = [(m.start(), m.end(), m.group("line") or m.group("end"), m.group("line_tag") or m.group("end_tag") or "")
              for m in _FENCE_RE.finditer(text)]
    if not fences:
        return text, False, True
    # Pair fences in order: opener, closer, opener, closer... A lone last opener is unterminated.
    # By index, each fence looked at once: a reply of a few thousand fence lines (a policy's) took seconds to
    # minutes when each opener copied the rest of the list and searched it again (red team round 6).
    blocks: list[tuple[int, int | None]] = []
    i = 0
    while i < len(fences):
        _, opener_end, run, tag = fences[i]
        j = next((k for k in range(i + 1, len(fences)) if fences[k][2][0] == run[0]
                  and len(fences[k][2]) >= len(run) and not fences[k][3]), None)
        if j is None:
            blocks.append((opener_end, None))
            break
        blocks.append((opener_end, fences[j][0]))
        i = j + 1
    start, end = blocks[-1]
    body = text[start:end] if end is not None else text[start:]
    if body.strip() or end is not None or tag:  # a block, if empty: the model fenced nothing
        return body.removeprefix("\n"), True, end is not None
    edges = [0, *(edge for fence in fences for edge in fence[:2]), len(text)]
    pieces = (text[edges[k]:edges[k + 1]] for k in range(len(edges) - 2, -1, -2))
    last = next((piece for piece in pieces if piece.strip()), "")
    return last.removeprefix("\n"), True, bool(last) or end is not None


def _strip_statement(code: str, statement: str) -> tuple[str, bool]:
    words = statement.split()
    if not words:
        return code, False
    pattern = re.compile(r"\s*" + r"\s+".join(re.escape(w) for w in words))
    match = pattern.match(code)
    if not match:
        return code, False
    return code[match.end():], True


def statement_to_strip(task: Any) -> str:
    """The statement a reply may repeat before its proof, for this parser to remove; "" for none.

    For Dafny the submission is the whole program, which legitimately starts with the
    spec: stripping it would delete the target's header. Coq's verifier removes a
    repeated statement itself (in any layout, under another name), so the parser leaves
    it to that one rule.
    """
    known = SPECS.get(getattr(task, "system", ""))
    strips = known.parser_strips_statement if known is not None else True
    return getattr(task, "statement", "") if strips else ""


def parse_proof(reply: str, *, statement: str = "") -> ParsedProof:
    """The proof in a model's ``reply`` (see the module docstring for the steps).

    Args:
        reply: The model's raw text.
        statement: The task's statement; a copy of it at the start of the code is removed.

    >>> parse_proof("Sure:\\n```coq\\nProof. auto. Qed.\\n```\\nDone.").proof
    'Proof. auto. Qed.'
    """
    notes: list[str] = []
    text = reply.replace("\r\n", "\n").replace("\r", "\n")
    without_think = _THINK_RE.sub("", text)
    if without_think != text:
        notes.append("removed reasoning block")
    text = without_think
    code, fenced, terminated = last_code_block(text)
    if fenced and not terminated:
        notes.append("unterminated fence")
    if not fenced:
        stripped = code.strip()
        if len(stripped) > 1 and stripped.startswith("`") and stripped.endswith("`") and "\n" not in stripped:
            code = stripped.strip("`")
            notes.append("removed inline backticks")
    normalized = normalize_unicode(code)
    if normalized != code:
        notes.append("normalized unicode")
    code = normalized
    if statement:
        code, removed = _strip_statement(code, normalize_unicode(statement))
        if removed:
            notes.append("removed repeated statement")
    lines = [line.rstrip() for line in code.split("\n")]
    while lines and not lines[0].strip():
        lines.pop(0)
    while lines and not lines[-1].strip():
        lines.pop()
    return ParsedProof("\n".join(lines), fenced, tuple(notes))
