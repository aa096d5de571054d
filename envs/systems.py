"""One spec per proof system: every per-system fact proofgym uses, in one place.

A :class:`SystemSpec` says which verifier checks the system (an import path, so that
reading a spec imports no prover), what an answer is and how prompts fence it, whether
the reply parser removes a repeated statement, which hammers a search tries first,
which cheats a suite's validation sends with every reference proof, how ``proofgym
doctor`` finds the prover and which apt package installs it, and which suites
``proofgym build`` makes for it. The task format, the verifier registry, the prompts,
the parser, the pool's routing, Cobblestone, ``doctor`` and ``build`` read it here.

Adding a system is adding a spec (and its verifier): nothing else holds a list of systems.
"""

from __future__ import annotations

import importlib
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from proofgym.envs.errors import TaskFormatError


def load_object(target: str) -> Any:
    """The object ``"package.module:attr"`` names (imported now, not when a spec is read)."""
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


@dataclass(frozen=True)
class InstallProbe:
    """How ``proofgym doctor`` finds one tool of a system, and what installs it.

    Attributes:
        tool: The name shown (a binary on ``PATH`` unless ``paths`` or ``version`` say otherwise).
        install: What to run when it is missing (``apt-get install coq``).
        version: A command whose first output line is the version (``None``: presence is enough).
        paths: Files or folders that count as the tool being present when it is not on ``PATH``.
    """

    tool: str
    install: str
    version: tuple[str, ...] | None = None
    paths: tuple[str, ...] = ()

    def status(self) -> str | None:
        """The version or ``"present"``; ``None`` when the tool is missing."""
        if self.version is not None:
            return _version(list(self.version))
        if shutil.which(self.tool) or any(Path(p).exists() for p in self.paths):
            return "present"
        return None


def _version(cmd: list[str]) -> str | None:
    if shutil.which(cmd[0]) is None:
        return None
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)  # noqa: S603 - a fixed probe
    except (OSError, subprocess.TimeoutExpired):
        return "present, but did not answer --version"
    text = (out.stdout + out.stderr).strip().splitlines()
    return text[0] if text else "present"


@dataclass(frozen=True)
class CheatProbe:
    """A submission that must not pass, sent with every reference proof when a suite is validated.

    Attributes:
        name: What the cheat is, for the exclusion reasons (``Admitted``).
        text: The submission, when it is the same for every task.
        build: ``"module:function"`` of ``(task, verifier) -> str`` when it depends on the task.
        must_be: The verdict it must get (``"CHEATING"``); ``None``: anything but ``OK``.
    """

    name: str
    text: str | None = None
    build: str | None = None
    must_be: str | None = None

    def submission(self, task: Any, verifier: Any) -> str:
        if self.text is not None:
            return self.text
        if self.build is None:
            raise ValueError(f"cheat probe {self.name!r} has neither text nor build")
        return load_object(self.build)(task, verifier)


@dataclass(frozen=True)
class SystemSpec:
    """Everything proofgym knows about one proof system (see the module docstring).

    Attributes:
        name: The ``system`` of a task (``coq``, ``hol_light``...).
        display: The name people read (``HOL Light``).
        verifier: ``"module:Class"`` of the whole-proof verifier; ``None`` while none is wired.
        fence: The code-fence tag prompts ask for (``ocaml`` for HOL Light).
        answer: What an answer is, as a prompt says it.
        forbidden: What an answer must not use, as a prompt says it.
        parser_strips_statement: Whether the reply parser removes a repeated statement. Not for
            Dafny (the answer is the whole program, which starts with the spec) nor Coq (its
            verifier normalises a repeated statement itself, with one rule for every path).
        hammers: Tactics a search tries first on a goal (Cobblestone), in order.
        cheats: What suite validation sends besides the reference proof.
        probes: What ``proofgym doctor`` looks for.
        builds: Suites ``proofgym build NAME`` makes: ``(name, "module:function")`` pairs.
        session_per_file: Whether tasks of one source file (``metadata.file``) share one warm
            session that extends along the file (the pool routes them to one worker).
        has_tactic_mode: Whether the verifier opens tactic sessions (``Tactic-v0``, Cobblestone).
        install_note: What else a working install needs, said after the apt line of :attr:`install_hint`.
    """

    name: str
    display: str
    verifier: str | None
    fence: str
    answer: str
    forbidden: str
    parser_strips_statement: bool = True
    hammers: tuple[str, ...] = ()
    cheats: tuple[CheatProbe, ...] = ()
    probes: tuple[InstallProbe, ...] = ()
    builds: tuple[tuple[str, str], ...] = ()
    session_per_file: bool = False
    has_tactic_mode: bool = False
    install_note: str = ""

    @property
    def wired(self) -> bool:
        return self.verifier is not None

    @property
    def install_hint(self) -> str:
        """What to do when the prover is missing: every ``ProverNotFound`` raise ends its message with this.

        Built from the first probe's install line (what ``proofgym doctor`` shows), so the
        package is named in one place: ``install Coq: apt-get install coq, or run `make setup```.
        """
        if not self.probes:
            return f"install {self.display}"
        install = self.probes[0].install
        if not install.startswith("apt-get "):
            return install
        note = f" ({self.install_note})" if self.install_note else ""
        return f"install {self.display}: {install}{note}, or run `make setup`"

    def verifier_class(self) -> type:
        """The verifier class (imported now)."""
        if self.verifier is None:
            raise TaskFormatError(f"no verifier for system {self.name!r} yet; available: {', '.join(wired_systems())}")
        return load_object(self.verifier)

    def builder(self, suite: str) -> Callable[..., Any]:
        """The function that builds ``suite`` (imported now)."""
        return load_object(dict(self.builds)[suite])


COQ = SystemSpec(
    name="coq",
    display="Coq",
    verifier="proofgym.envs.verifiers.coq:CoqVerifier",
    fence="coq",
    answer="the proof script that follows the statement, from `Proof.` to `Qed.`",
    forbidden="`Admitted`, `admit`, `Abort`, new axioms or any other vernacular command",
    parser_strips_statement=False,
    hammers=("sauto.",),  # needs the verifier's HAMMER_PRELUDE
    cheats=(CheatProbe("Admitted", text="Proof. Admitted."),),
    probes=(
        InstallProbe("coqc", "apt-get install coq", version=("coqc", "--version")),
        InstallProbe("coqidetop.opt", "apt-get install coq"),
        InstallProbe("coqchk", "apt-get install coq"),
        InstallProbe("CoqHammer", "apt-get install libcoq-hammer", paths=("/usr/libexec/coq-hammer",)),
    ),
    builds=(("coq-stdlib", "proofgym.envs.tasks.build:build_coq_stdlib"),
            ("coq-project", "proofgym.envs.tasks.coq_project:build_from_cli")),
    session_per_file=True,
    has_tactic_mode=True,
)

HOL_LIGHT = SystemSpec(
    name="hol_light",
    display="HOL Light",
    verifier="proofgym.envs.verifiers.hol_light:HolLightVerifier",
    fence="ocaml",
    answer="one OCaml expression of type `tactic` (for example `ARITH_TAC` or "
           "`REWRITE_TAC[ADD_SYM] THEN ARITH_TAC`)",
    forbidden="`CHEAT_TAC`, `mk_thm`, `new_axiom` and anything outside tactics",
    hammers=("MESON_TAC[]", "ARITH_TAC", "ASM_MESON_TAC[]"),
    cheats=(CheatProbe("CHEAT_TAC", text="CHEAT_TAC", must_be="CHEATING"),),
    probes=(InstallProbe("hol-light", "apt-get install hol-light libnum-ocaml-dev", paths=("/usr/share/hol-light",)),),
    builds=(("hol-light", "proofgym.envs.tasks.hol_build:build_hol_light"),
            ("s2n-bignum", "proofgym.envs.tasks.hol_s2n:build_s2n")),
    has_tactic_mode=True,
)

DAFNY = SystemSpec(
    name="dafny",
    display="Dafny",
    verifier="proofgym.envs.verifiers.dafny:DafnyVerifier",
    fence="dafny",
    answer="the complete program: the given signatures and specifications, unchanged, "
           "with bodies, loop invariants and proofs",
    forbidden="`assume`, `{:axiom}`, `{:verify false}`, `{:extern}` and bodyless lemmas or methods",
    parser_strips_statement=False,
    cheats=(CheatProbe("assume false", build="proofgym.envs.tasks.dafny_nl:assume_false_variant",
                       must_be="CHEATING"),),
    probes=(InstallProbe("dafny", "apt-get install dafny z3", version=("dafny", "/version")),),
    install_note="then pip install z3-solver==4.8.5.0",
)

ISABELLE = SystemSpec(
    name="isabelle",
    display="Isabelle",
    verifier=None,
    fence="isabelle",
    answer="the proof that follows the statement (`by ...`, `apply ... done` or `proof ... qed`)",
    forbidden="`sorry`, `oops` and new axioms",
    probes=(InstallProbe("isabelle", "install Isabelle from its site (optional)", version=("isabelle", "version")),),
)

SPECS: MappingProxyType = MappingProxyType({s.name: s for s in (COQ, HOL_LIGHT, DAFNY, ISABELLE)})
"""Every system a task may name, by name."""

SYSTEM_NAMES: tuple[str, ...] = tuple(SPECS)

#: What doctor checks besides the provers: every check runs in this sandbox.
SANDBOX_PROBE = InstallProbe("bwrap", "apt-get install bubblewrap")


def spec(system: str) -> SystemSpec:
    """The spec of ``system``.

    Raises:
        TaskFormatError: an unknown system (the message lists the known ones).
    """
    try:
        return SPECS[system]
    except KeyError:
        raise TaskFormatError(f"unknown system {system!r}; known systems: {', '.join(SYSTEM_NAMES)}") from None


def wired_systems() -> list[str]:
    """The systems that have a verifier, sorted."""
    return sorted(s.name for s in SPECS.values() if s.wired)


def buildable_suites() -> dict[str, SystemSpec]:
    """Suite name -> the spec of the system ``proofgym build NAME`` makes it for."""
    return {suite: s for s in SPECS.values() for suite, _ in s.builds}
