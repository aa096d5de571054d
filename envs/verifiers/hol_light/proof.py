"""What a HOL Light submission means: the goal of a statement, and one tactic expression from a sloppy reply.

The server judges whatever this returns exactly as it judges any submission (whitelist, goal,
axioms), so a rewrite here can never let an unproved goal through.
"""

from __future__ import annotations

import re

from proofgym.envs.errors import InvalidSubmission, TaskFormatError
from proofgym.envs.parsing import last_code_block, normalize_unicode
from proofgym.envs.verifiers.hol_light.lexer import split_phrases, strip_comments


def goal_text(statement: str) -> str:
    """The goal inside the statement's backquotes (``\\`!n. n + 0 = n\\``` -> ``!n. n + 0 = n``)."""
    text = statement.strip()
    if len(text) < 3 or not (text.startswith("`") and text.endswith("`")) or "`" in text[1:-1]:
        raise TaskFormatError(f"a hol_light statement must be one term in backquotes, got {statement[:60]!r}")
    return text[1:-1]


#: The goalstack commands LLMs write (HOL Light's tactics.ml): ``g`` / ``set_goal`` state a goal, ``e``
#: applies a tactic to the first goal, ``b()`` undoes a step, ``r n`` rotates the goals; ``top_thm()``,
#: ``p()`` and friends only look.
_GOAL_CMD = re.compile(r"(?:g|set_goal)\s*\(?\s*(?:\[\s*\]\s*,\s*)?`[^`]*`\s*\)?", re.S)
_E_CMD = re.compile(r"e\b\s*(?P<tactic>.+)", re.S)
_B_CMD = re.compile(r"b\s*\(\s*\)")
_R_CMD = re.compile(r"r\s*\(?\s*(?P<n>-?\s*\d+)\s*\)?")
_LOOK_CMD = re.compile(r"(?:let\s+[A-Za-z_][\w']*\s*=\s*)?(?:top_thm|top_goal|p)\s*\(\s*\)")
#: ``prove(`goal`, TAC)`` (or ``let NAME = prove(...)``): the statement repeated around the tactic.
_PROVE_CALL = re.compile(r"(?:let\s+[A-Za-z_][\w']*\s*=\s*)?prove\s*\(\s*`[^`]*`\s*,(?P<tactic>.*)\)", re.S)
#: A phrase that would define or change something if it ran: never rewritten, the server judges it.
_DEFINING = re.compile(r"(?:let|#|open|module|type|exception|external|include|class)\b")
#: A Markdown fence line (never HOL Light: three backquotes are an empty term quotation and a stray one).
_FENCE_LINE = re.compile(r"^[ \t]*(?:```|~~~)[^\n]*$", re.M)
#: A lone final period after an identifier or a bracket (``ARITH_TAC.``, ``REWRITE_TAC[ADD_CLAUSES].``).
_FINAL_PERIOD = re.compile(r"[\w')\]]\.$")
#: An English sentence: plain words and sentence punctuation only, none of OCaml's brackets, operators or quotes.
_PROSE = re.compile(r"[A-Z][A-Za-z']*(?:[ \t\n]+[A-Za-z][A-Za-z'-]*[,:]?)+[ \t]*[.!:]?")


def normalize_proof(proof: str) -> str:
    """The one tactic expression an honest but sloppy submission means; raises :class:`InvalidSubmission`.

    Only unambiguous slips are rewritten; whatever the result, the server checks it like any submission
    (whitelist, goal, axioms), so a rewrite can never let an unproved goal through:

    - comments and empty phrases around the tactic (``ARITH_TAC;; (* done *)``) are dropped, and so are
      English remarks after it (``ARITH_TAC;; This completes the proof.``), a final Coq-style period
      (``ARITH_TAC.``), Markdown fences, a BOM and zero-width or no-break spaces;
    - ``prove(`goal`, TAC)`` and ``let NAME = prove(`goal`, TAC)`` become ``TAC`` (the task's goal is what
      is proved, whatever the text says);
    - a goalstack script (``g `goal`;; e(T1);; e(T2);; b();; r 1;; top_thm();;``) becomes the tactic that
      does exactly what those commands do: ``e`` works on the first goal only, which ``THEN`` does not,
      so the steps are HOL Light's own refinements (``by``, ``rotate``) folded over ``mk_goalstate``.

    A goalstack script with a phrase that is not a goalstack command is :class:`InvalidSubmission` (an
    ERROR that says what to change). Anything else with several phrases (a definition, a directive, two
    tactics) goes to the server unchanged, which refuses it.
    """
    if _FENCE_LINE.search(proof):
        block = last_code_block(proof)[0]
        if not block.strip():  # a closing fence without its opener: the last text between fence lines
            block = next((piece for piece in reversed(_FENCE_LINE.split(proof)) if piece.strip()), "")
        proof = block
    proof = normalize_unicode(proof)  # a BOM, zero-width and no-break spaces, curly quotes: never HOL Light
    phrases = [text for text in (strip_comments(ph.text).strip() for ph in split_phrases(proof)) if text]
    if not phrases:
        return proof
    if len(phrases) > 1 and _is_prose(phrases[-1]):
        while len(phrases) > 1 and _is_prose(phrases[-1]):
            phrases.pop()  # "ARITH_TAC;; This completes the proof.": the tactic, then a remark
        proof = ";;\n".join(phrases)
    if len(phrases) == 1 and _FINAL_PERIOD.search(phrases[0]):
        proof = phrases[0][:-1].rstrip()  # "ARITH_TAC.": Coq's period (no OCaml phrase ends in one)
        phrases = [proof]
    if len(phrases) == 1 and (m := _PROVE_CALL.fullmatch(phrases[0])):
        return m["tactic"].strip()
    commands = [_goalstack_command(text) for text in phrases]
    if not any(c is not None and c[0] in ("goal", "by") for c in commands):
        return phrases[0] if len(phrases) == 1 else proof
    steps: list[str] = []
    for i, (text, command) in enumerate(zip(phrases, commands, strict=True), 1):
        if command is None:
            if _DEFINING.match(text):
                return proof
            raise InvalidSubmission(
                f"phrase {i} of the goalstack script ({text[:60]!r}) is not a goalstack command (g, e, b, r, "
                "top_thm); submit one tactic expression, e.g. TAC1 THEN TAC2, or only g/e/b/r commands")
        kind, arg = command
        if kind == "by":
            steps.append(f"by ({arg})")
        elif kind == "rotate":
            steps.append(f"rotate ({arg})")
        elif kind == "back":
            if not steps:
                raise InvalidSubmission(f"phrase {i}: b() has no step to undo")
            steps.pop()
    if not steps:
        raise InvalidSubmission("the goalstack script has no e(...) step: add the tactics that prove the goal")
    if len(steps) == 1 and steps[0].startswith("by "):  # one e(TAC): just TAC
        return steps[0][4:-1]
    return f"(fun gl -> List.fold_left (fun gs step -> step gs) (mk_goalstate gl) [{'; '.join(steps)}])"


def _is_prose(text: str) -> bool:
    """An English remark (``This completes the proof.``): capitalised plain words, at least four of them.

    An OCaml phrase of plain words alone would be an application of a capitalised name, which HOL Light's
    tactics never are (constructors take their argument in brackets); a misread phrase is dropped, never run.
    """
    return bool(_PROSE.fullmatch(text)) and len(text.split()) >= 4


def _goalstack_command(text: str) -> tuple[str, str] | None:
    if _GOAL_CMD.fullmatch(text) or _LOOK_CMD.fullmatch(text):
        return ("goal" if _GOAL_CMD.fullmatch(text) else "look", "")
    if _B_CMD.fullmatch(text):
        return ("back", "")
    if m := _R_CMD.fullmatch(text):
        return ("rotate", m["n"].replace(" ", ""))
    if (m := _E_CMD.fullmatch(text)) and not _DEFINING.match(text):
        return ("by", m["tactic"].strip())
    return None
