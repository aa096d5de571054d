"""The class of every Coq command a submission may contain: the one table the normaliser reads.

Every construct falls in one of three classes, and the class decides the verdict (DESIGN.md, "Verdicts must
survive an adversary, and be fair to honest work"):

* :attr:`CommandClass.CHEATING`: the command can make an unproved statement pass (a hole, an assumption, a
  switched-off kernel check, a statement read another way, reading or writing outside the proof, leaving the
  checker). The reason names what it could do.
* :attr:`CommandClass.HARMLESS`: it claims nothing (a query, a display or tactic setting, a hint). It is dropped
  with a note, never sent to Coq, and the proof is checked without it (a proof that needed it may FAIL).
* :attr:`CommandClass.ERROR`: anything else, listed or not (helper definitions, commands that restructure the
  document): reward 0, with feedback that says what to change.

A command has one class wherever it stands: before, inside or after the proof. Commands that the normaliser
rewrites rather than judges (``Proof``, ``Qed``, ``Require``, ``Import``, ``Open Scope``, ``Set``/``Unset``, the
control prefixes ``Time``/``Fail``/``Timeout``..., statements) are not in :data:`COMMANDS`; the normaliser's
module docstring says what each becomes. An option of ``Set``/``Unset`` is judged by :func:`option_class`.

Adding an entry is a visible decision: give the class and the reason, audited against "can this command, alone,
make an unproved statement pass?".
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass


class CommandClass(enum.Enum):
    """What a command is, and so what verdict it gives (CHEATING, a dropped note, or ERROR)."""

    CHEATING = "CHEATING"
    HARMLESS = "HARMLESS"
    ERROR = "ERROR"


@dataclass(frozen=True)
class Rule:
    """A command's class and why: what it could let pass (CHEATING), the note (HARMLESS), or what to change
    (ERROR)."""

    command: str
    cls: CommandClass
    why: str


_CHEAT, _HARMLESS, _ERROR = CommandClass.CHEATING, CommandClass.HARMLESS, CommandClass.ERROR

_QUERY = "a query: it only prints, and nothing a submission writes is sent to Coq as a query"
_SETTING = ("a setting that leaves the kernel alone (which goals tactics see, how terms print or unfold, hint "
            "databases): never sent, the proof is checked without it")
HELPER_WHY = ("adds a declaration: a submission cannot add definitions, lemmas, tactics, instances or sections; the "
           "proof may only use what the task's context defines (inline a helper with `assert`, `pose`, "
           "`set` or `ltac:(...)`), so remove it")
_ASSUMES = "assumes what the task does not give (an unproved fact the proof could use)"
_NOTATION = ("changes how the task's statement reads (a notation can make `1 = 2` mean `1 = 1`), so a weaker "
             "statement could pass for it")

# (command words, class, why). The longest matching prefix of words wins: ``Declare ML Module`` before
# ``Declare``. The first word alone is the default for its family.
_TABLE: tuple[tuple[str, CommandClass, str], ...] = (
    # -- holes and endings that do not prove -----------------------------------------------------------------
    ("Admitted", _CHEAT, "ends the proof without proving it (a hole)"),
    ("Admit", _CHEAT, "admits obligations without proving them (a hole)"),
    ("Give Up", _CHEAT, "ends the proof without proving it (a hole)"),
    # -- assumptions -----------------------------------------------------------------------------------------
    *((w, _CHEAT, _ASSUMES) for w in ("Axiom", "Axioms", "Parameter", "Parameters", "Conjecture", "Conjectures",
                                      "Hypothesis", "Hypotheses", "Variable", "Variables", "Context")),
    ("Declare Instance", _CHEAT, "declares a type-class instance without a proof (an assumption)"),
    ("Declare Module", _CHEAT, "declares a module without an implementation (its fields are assumptions)"),
    # -- code, files and the checker itself ------------------------------------------------------------------
    ("Declare ML Module", _CHEAT, "loads a plugin: OCaml code that runs inside the checker"),
    ("Drop", _CHEAT, "leaves Coq for its OCaml toplevel, where any code runs"),
    ("Quit", _CHEAT, "stops the prover before the proof is checked"),
    ("Load", _CHEAT, "reads and runs a file from outside the proof"),
    ("Add LoadPath", _CHEAT, "adds a directory to the load path, so that Require reads files from outside the proof"),
    ("Add Rec LoadPath", _CHEAT, "adds a directory to the load path, so that Require reads files from outside the "
                                 "proof"),
    ("Add ML Path", _CHEAT, "adds a directory of plugins (OCaml code the checker would run)"),
    ("Redirect", _CHEAT, "writes a file outside the proof"),
    ("Extraction", _CHEAT, "can write files outside the proof"),
    ("Recursive Extraction", _CHEAT, "can write files outside the proof"),
    ("Separate Extraction", _CHEAT, "writes files outside the proof"),
    ("Primitive", _CHEAT, "binds a kernel primitive, whose behaviour the kernel takes on trust"),
    ("Register", _CHEAT, "registers a constant as one the kernel or the standard tactics trust"),
    ("Reset", _CHEAT, "moves the document back before the statement, where the lemma can be stated again (a "
                      "shadow of the task's statement)"),
    ("Back", _CHEAT, "moves the document back, out of the proof (a shadow of the task's statement)"),
    ("BackTo", _CHEAT, "moves the document back, out of the proof (a shadow of the task's statement)"),
    ("Notation", _CHEAT, _NOTATION),
    ("Infix", _CHEAT, _NOTATION),
    ("Number Notation", _CHEAT, _NOTATION),
    ("Numeral Notation", _CHEAT, _NOTATION),
    ("String Notation", _CHEAT, _NOTATION),
    # -- queries ---------------------------------------------------------------------------------------------
    *((w, _HARMLESS, _QUERY) for w in (
        "About", "Check", "Compute", "Eval", "Inspect", "Locate", "Print", "Pwd", "Search", "SearchAbout",
        "SearchHead", "SearchPattern", "SearchRewrite", "Show", "Test", "Guarded", "Validate", "Preterm")),
    # -- settings and hints ----------------------------------------------------------------------------------
    *((w, _HARMLESS, _SETTING) for w in (
        "Hint", "Create HintDb", "Remove Hints", "Arguments", "Opaque", "Transparent", "Strategy", "Typeclasses",
        "Generalizable", "Implicit Types", "Implicit Type", "Comments", "Optimize", "Delimit", "Undelimit",
        "Bind Scope", "Declare Scope")),
    # -- helpers: honest, but the proof may only use the context ---------------------------------------------
    *((w, _ERROR, HELPER_WHY) for w in (
        "Definition", "Fixpoint", "CoFixpoint", "Inductive", "CoInductive", "Record", "Structure", "Class",
        "Variant", "Instance", "Existing", "Ltac", "Ltac2", "Function", "Functional", "Scheme", "Combined",
        "Derive", "Tactic", "Section", "Module", "Include", "Equations", "Let", "Coercion", "Identity",
        "SubClass", "Canonical", "Chapter", "Reserved", "Add", "Declare", "Universe", "Universes", "Constraint",
        "Collection", "Prenex", "Extract", "Inline", "Obligation", "Obligations", "Next", "Solve")),
    # -- document control that proves nothing and breaks nothing ---------------------------------------------
    ("Undo", _ERROR, "undoes a step: send only the final proof, without the steps it takes back"),
    ("Restart", _ERROR, "starts the proof again: send only the final proof, from `Proof.` to `Qed.`"),
    ("Existential", _ERROR, "fills an existential variable by number: write the term with `instantiate` or "
                            "`refine` instead"),
    ("Cd", _ERROR, "changes the prover's directory: a proof has no use for it, so remove it"),
)

#: Every listed command, by its words.
COMMANDS: dict[str, Rule] = {words: Rule(words, cls, why) for words, cls, why in _TABLE}

_WORDS_RE = re.compile(r"[A-Za-z_][\w']*")
_ATTRIBUTES_RE = re.compile(r"^(?:#\[[^\]]*\]\s*)*(?:(?:Local|Global|Export|Polymorphic|Monomorphic|Program|"
                            r"Cumulative|NonCumulative|Private)\s+)*")


def classify_command(code: str) -> Rule | None:
    """The rule of the listed command that ``code`` starts with (after attributes and locality), or None.

    None means the table does not list it: a caller that knows ``code`` to be vernacular treats it as
    :attr:`CommandClass.ERROR` (:func:`unlisted`).
    """
    words = _WORDS_RE.findall(_ATTRIBUTES_RE.sub("", code)[:80])[:3]
    for n in range(len(words), 0, -1):
        rule = COMMANDS.get(" ".join(words[:n]))
        if rule is not None:
            return rule
    return None


def unlisted(command: str) -> Rule:
    """The rule of a vernacular command the table does not list: ERROR (fail closed, never CHEATING)."""
    return Rule(command, _ERROR, "is a Coq command the checker does not know to be harmless: a proof may only "
                                 "hold tactics, so remove it")


def option_class(option: str, switch: str = "Unset") -> Rule:
    """The class of ``Set``/``Unset <option>`` (``switch``): CHEATING for a kernel check's switch (guard,
    positivity, universe checking) and for ``Definitional UIP`` (a conversion rule); otherwise HARMLESS (printing,
    tactics, timing)."""
    if "UIP" in option:
        return Rule(option, _CHEAT, "changes the kernel's conversion rule, so it accepts terms it would refuse")
    if any(w in option for w in ("Checking", "Guard", "Positivity")):
        if switch == "Unset":
            return Rule(option, _CHEAT, "switches a kernel check off, so the kernel accepts what it should refuse")
        # ``Set Guard Checking`` only restores the default, but it is the switch itself: a proof never needs it,
        # and the one table keeps every kernel switch on one side.
        return Rule(option, _CHEAT, "is a kernel check's switch (its Unset form turns the check off); a proof never "
                                    "needs it")
    return Rule(option, _HARMLESS, "an option that leaves the kernel alone: never sent, the proof runs without it")
