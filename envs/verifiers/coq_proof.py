"""Turn a hostile Coq proof text into a whitelisted list of proof-mode sentences.

The submission is cut with :func:`~proofgym.envs.verifiers.coq_lexer.split_sentences`
and every sentence must be one of:

* ``Proof.``, ``Proof using ...``, ``Proof with <tactic>.`` (first only);
  ``Proof <term>.`` becomes ``Proof. exact (<term>). Qed.``;
* a bullet (``-``, ``+``, ``*``, repeated) or a brace, optionally after a goal selector;
* a tactic, optionally after a goal selector (``2:``, ``1-3:``, ``all:``, ``!:``,
  ``par:``, ``[x]:``). It is sent to Coq as ``(<tactic>).`` so that Coq's own
  parser must agree with our cut: a sentence that Coq would end earlier leaves an
  unbalanced parenthesis and fails to parse;
* ``Qed.`` or ``Defined.`` (last only). A bare tactic script gets ``Qed.`` appended.

Anything else is a vernacular command and the submission is ``CHEATING``:
``Admitted``, ``Abort``, ``Unset Guard Checking``, ``Declare ML Module``,
``Redirect``, nested definitions, ending the proof early and restarting...
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from proofgym.envs.verifiers.coq_lexer import CoqLexError, split_sentences

# Tactic names that only ever mean "leave a hole".
HOLE_TACTICS = frozenset({"admit", "give_up"})

#: Tokens after which the kernel may rely on the VM or native compiler; such OKs are always audited.
VM_TOKENS = ("vm_compute", "native_compute", "vm_cast_no_check", "native_cast_no_check", "<:", "<<:")

_SELECTOR = r"(?:\d+(?:\s*-\s*\d+)?(?:\s*,\s*\d+(?:\s*-\s*\d+)?)*|all|!|par|\[\s*[A-Za-z_][\w']*\s*\])"
_SELECTOR_RE = re.compile(rf"^({_SELECTOR})\s*:(?![=>])\s*(.*)$", re.S)
_PROOF_RE = re.compile(r"^Proof\s*\.$")
_PROOF_USING_RE = re.compile(r"^Proof\s+using\b([\sA-Za-z0-9_'*()+\-]*)\.$")
_PROOF_WITH_RE = re.compile(r"^Proof\s+with\b(.*)\.$", re.S)
_PROOF_TERM_RE = re.compile(r"^Proof\s+(.*)\.$", re.S)
_END_RE = re.compile(r"^(Qed|Defined)\s*\.$")
_SCOPE_RE = re.compile(r"^(?:Local\s+)?(?:Open|Close)\s+Scope\s+[A-Za-z_][\w']*\s*\.$")
_CHEAT_END_RE = re.compile(r"^(Admitted|Abort|Save|Give\s+Up)\b")
_WORD_RE = re.compile(r"[A-Za-z_][\w']*(?:\.[A-Za-z_][\w']*)*")
_FIRST_WORD_RE = re.compile(r"^[A-Za-z_][\w']*")


class ProofRejected(Exception):
    """The submission is not a proof script. ``verdict`` is ``"CHEATING"`` or ``"ERROR"``."""

    def __init__(self, verdict: str, reasons: list[str], messages: list[str] | None = None) -> None:
        super().__init__("; ".join(reasons))
        self.verdict = verdict
        self.reasons = reasons
        self.messages = messages or []


@dataclass(frozen=True)
class NormalizedProof:
    """The sentences to send, in order. ``sentences[-1]`` is ``Qed.`` or ``Defined.``."""

    sentences: tuple[str, ...]
    identifiers: frozenset[str]  # identifier tokens used outside comments and strings
    uses_vm: bool

    @property
    def text(self) -> str:
        return "\n".join(self.sentences)


def _strip_strings(code: str) -> str:
    return re.sub(r'"(?:[^"]|"")*"', '""', code)


def _tokens(code: str) -> set[str]:
    return set(_WORD_RE.findall(_strip_strings(code)))


def normalize_proof(proof: str) -> NormalizedProof:
    """Whitelist and normalise a submission.

    Raises:
        ProofRejected: ``CHEATING`` for vernacular, holes and restarts;
            ``ERROR`` when the text cannot be cut into sentences.
    """
    try:
        sentences = split_sentences(proof)
    except CoqLexError as exc:
        raise ProofRejected("ERROR", [f"syntax: {exc}"]) from None
    if not sentences:
        raise ProofRejected("ERROR", ["syntax: the proof has no sentences"])

    out: list[str] = []
    cheats: list[str] = []
    identifiers: set[str] = set()
    ended = False
    for index, sentence in enumerate(sentences):
        code = sentence.code
        if ended:
            cheats.append(f"content after the end of the proof: {_short(code)}")
            break
        if sentence.kind in ("bullet", "brace"):
            out.append(code)
            continue
        first = _first_word(code)
        if first in HOLE_TACTICS or (_tokens(code) & HOLE_TACTICS):
            cheats.append(f"hole tactic ({', '.join(sorted(_tokens(code) & HOLE_TACTICS) or [first])}) leaves the goal unproved")
            continue
        if _END_RE.match(code):
            out.append(_END_RE.match(code).group(1) + ".")
            ended = True
            continue
        if _CHEAT_END_RE.match(code):
            cheats.append(f"{_CHEAT_END_RE.match(code).group(1)} ends the proof without proving it")
            ended = True
            continue
        if first == "Proof":
            if index != 0:
                cheats.append("Proof may only open the proof")
                continue
            if _PROOF_RE.match(code):
                out.append("Proof.")
            elif m := _PROOF_USING_RE.match(code):
                out.append(f"Proof using{m.group(1)}.")
            elif m := _PROOF_WITH_RE.match(code):
                tactic = m.group(1).strip()
                identifiers |= _tokens(tactic)
                out.append(f"Proof with ({tactic}).")
            elif m := _PROOF_TERM_RE.match(code):
                term = m.group(1).strip()
                identifiers |= _tokens(term)
                out.extend(["Proof.", f"exact ({term}).", "Qed."])
                ended = True
            else:  # pragma: no cover - _PROOF_TERM_RE matches any "Proof ... ."
                cheats.append(f"unrecognised Proof command: {_short(code)}")
            continue
        if _SCOPE_RE.match(code):
            out.append(code)  # changes how later sentences parse, never the stated goal or the kernel
            continue
        if code == "Unshelve.":
            out.append(code)  # proof-mode commands that only reorder goals
            continue
        selector, body = _split_selector(code)
        bfirst = _first_word(body)
        if bfirst and bfirst[0].isupper() and bfirst in VERNACULAR:
            cheats.append(f"vernacular command {bfirst!r} is not allowed inside a proof")
            continue
        if body.startswith("#[") or body.startswith("#"):
            cheats.append("attributes are not allowed inside a proof")
            continue
        if body.endswith("..."):
            tactic, terminator = body[:-3].rstrip(), "..."
        elif body.endswith("."):
            tactic, terminator = body[:-1].rstrip(), "."
        else:  # pragma: no cover - the lexer only cuts at periods
            raise ProofRejected("ERROR", [f"syntax: sentence without a period: {_short(code)}"])
        if not tactic:
            raise ProofRejected("ERROR", ["syntax: empty sentence"])
        identifiers |= _tokens(tactic)
        prefix = f"{selector}: " if selector else ""
        out.append(f"{prefix}({tactic}){terminator}")
    if cheats:
        raise ProofRejected("CHEATING", cheats)
    if not ended:
        out.append("Qed.")
    uses_vm = any(tok in " ".join(out) for tok in VM_TOKENS)
    return NormalizedProof(tuple(out), frozenset(identifiers), uses_vm)


def _split_selector(code: str) -> tuple[str, str]:
    m = _SELECTOR_RE.match(code)
    if m:
        return " ".join(m.group(1).split()), m.group(2).strip()
    return "", code


def _first_word(code: str) -> str:
    m = _FIRST_WORD_RE.match(code)
    return m.group(0) if m else ""


def _short(code: str, n: int = 60) -> str:
    return code if len(code) <= n else code[: n - 3] + "..."


# Coq 8.16 vernacular commands and control prefixes (from the reference manual's command
# index). A sentence whose first word is one of these is never a tactic.
VERNACULAR = frozenset(
    """
    Abort About Add Admit Admitted Arguments Axiom Axioms Back BackTo Bind Canonical Cd Check Class
    Close CoFixpoint CoInductive Collection Combined Comments Compute Conjecture Conjectures Constraint
    Context Corollary Create Debug Declare Defined Definition Delimit Derive Drop Eval Example Existential
    Existing Export Extract Extraction Fact Fail Fixpoint Focus Function Functional Generalizable Global
    Goal Grab Guarded Hint Hypotheses Hypothesis Identity Implicit Import Include Inductive Infix Info
    Inline Inspect Instance Instances Lemma Let Load Local Locate Ltac Ltac2 Module Monomorphic Next
    Notation Number Obligation Obligations Opaque Open Optimize Parameter Parameters Polymorphic Prenex
    Preterm Primitive Print Private Program Proof Proposition Pwd Qed Quit Record Recursive Redirect
    Register Remark Remove Require Reserved Reset Restart Save Scheme Search SearchAbout SearchHead
    SearchPattern SearchRewrite Section Separate Set Show Solve Strategy String Structure SubClass
    Succeed Tactic Test Theorem Time Timeout Transparent Typeclasses Undelimit Undo Unfocus Unfocused
    Universe Universes Unset Unshelve Validate Variable Variables Variant Chapter Attributes
    Cumulative NonCumulative Coercion Equations Import Instructions Property Abbreviation Enable
    Disable Drop Initial Primitive Sort Syntax Custom Contextual Inductives Plugin Fail Succeed
    From End Grab Proof Goal Lemma Import Export Include Declare Hint Tactic Ltac
    """.split()
)
