"""Shared fixtures. Tiers: fast (no prover), ``prover`` (real provers), ``slow`` (outside ``make test``).

Warm provers are started once per run and shared where a test does not need a fresh one: HOL Light's
server (``hol``; about two minutes to load), the Dafny verifier (``tests/test_dafny_common.py``). Whatever a
test run starts, it stops: after the run, a prover process still below pytest fails the run
(issue 16: three DafnyServer processes outlived their tests by 40 minutes).
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

DATA = Path(__file__).parent / "data"

#: Command names (``/proc/<pid>/comm``) of the processes the verifiers start.
PROVER_COMMANDS = ("coqidetop", "coqidetop.opt", "coqtop", "coqc", "coqchk", "ocaml", "ocamlrun", "mono", "z3",
                   "bwrap", "dafny", "DafnyServer")

_SESSION_OWNED: list[Any] = []


def have_coq() -> bool:
    return all(shutil.which(t) for t in ("coqc", "coqidetop.opt", "coqchk"))


requires_coq = pytest.mark.skipif(not have_coq(), reason="Coq is not installed: run `make setup` (apt-get install coq)")


@pytest.fixture(scope="module")
def audited_coq(tmp_path_factory) -> Iterator[Any]:
    """A Coq verifier shared by one test module: every OK audited (coqc + coqchk), its own isolation cache."""
    if not have_coq():
        pytest.skip("Coq is not installed: run `make setup` (apt-get install coq)")
    from proofgym.envs.verifiers.coq import CoqVerifier

    with CoqVerifier(audit="always", isolation_dir=str(tmp_path_factory.mktemp("iso"))) as verifier:
        yield verifier


def close_at_session_end(owner: Any) -> Any:
    """Register a verifier that a test module shares run-wide (no fixture holds it); closed when the run ends,
    before the leftover-process check. Returns ``owner``."""
    _SESSION_OWNED.append(owner)
    return owner


@pytest.fixture(scope="session", autouse=True)
def _close_session_owned() -> Iterator[None]:
    yield
    # The repository root is a package, so pytest imports this file as ``main.tests.conftest`` while test
    # modules import ``tests.conftest``: two module objects, two registries. Close what either holds.
    copies = {id(m): m for name, m in list(sys.modules.items()) if name.split(".")[-2:] == ["tests", "conftest"]}
    for module in copies.values():
        owned = getattr(module, "_SESSION_OWNED", [])
        while owned:
            owned.pop().close()


def prover_processes_below(pid: int) -> list[str]:
    """``pid comm`` of every live prover process below ``pid`` (zombies left out: they hold no prover)."""
    from proofgym.envs.verifiers.sandbox.procfs import descendants

    found = []
    for child in descendants(pid, zombies=False):
        try:
            comm = Path(f"/proc/{child}/comm").read_text().strip()
        except OSError:
            continue  # it exited while we looked
        if comm.startswith(PROVER_COMMANDS):
            found.append(f"{child} {comm}")
    return found


#: Under pytest-xdist (``make test``: two workers, ``--dist loadfile``) the files that share the run-wide HOL Light
#: server (the ``hol`` fixture, about two minutes to load) are one unit of work, so the server loads once, in one
#: worker; every other file is a unit of its own, so its module fixtures are built once. The HOL Light units are
#: the longest (about 10 minutes, and 7 for test_hol_sandbox with its own server), so they are scheduled first, one
#: per worker, and the other files fill in around them. A new file that uses ``hol`` belongs in this list (the
#: collection hook below warns when one is missing: it would pay a second load in the other worker).
HOL_SERVER_FILES = ("test_hol_light.py", "test_hol_tactic.py", "test_hol_trust.py", "test_hol_memory.py",
                    "test_hol_obfuscate.py", "test_hol_s2n.py", "test_hol_normalize.py", "test_slips.py",
                    "test_hol_light_slips.py", "test_shipped_corpus.py", "test_integrations_hol.py",
                    "test_prover_death.py")
_FIRST_UNITS = ("hol-light", "tests/test_hol_sandbox.py")


def _unit_of(nodeid: str) -> str:
    """The unit of work (scheduled to one xdist worker) a test belongs to: its file, or the HOL Light group."""
    path = nodeid.split("::", 1)[0]
    return "hol-light" if path.rsplit("/", 1)[-1] in HOL_SERVER_FILES else path


@pytest.hookimpl(optionalhook=True)  # xdist's hook: absent under -p no:xdist (TEST_WORKERS=0)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile`` with the HOL Light files as one unit (xdist 3.8's ``loadgroup`` cannot be used:
    it renames ``item._nodeid``, which pytest 9 no longer reads)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class HolLightAsOneUnit(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _unit_of(nodeid)

    return HolLightAsOneUnit(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not hasattr(config, "workerinput"):
        return  # a plain run keeps pytest's order: the units only steer the distribution over workers
    for item in items:
        if "hol" in getattr(item, "fixturenames", ()) and _unit_of(item.nodeid) != "hol-light" \
                and not item.nodeid.startswith("tests/test_hol_sandbox.py"):
            item.warn(pytest.PytestWarning("this test uses the run-wide HOL Light server: add its file to "
                                           "tests/conftest.py's HOL_SERVER_FILES, or its worker loads a second one"))
    rank = {unit: i for i, unit in enumerate(_FIRST_UNITS)}
    items.sort(key=lambda item: rank.get(_unit_of(item.nodeid), len(rank)))  # stable: files keep their order


#: The word each prover's skip reason starts with ("Coq is not installed: ..."), by the name
#: ``PROOFGYM_REQUIRE_PROVERS`` uses.
_PROVER_SKIP_WORDS = {"coq": "Coq ", "dafny": "Dafny ", "hol_light": "HOL Light "}
_missing_prover_skips: dict[str, int] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Count the tests skipped because a prover is not installed (on the controller, for xdist workers too)."""
    if report.skipped and isinstance(report.longrepr, tuple) and "is not installed" in str(report.longrepr[2]):
        reason = str(report.longrepr[2]).removeprefix("Skipped: ")
        for name, word in _PROVER_SKIP_WORDS.items():
            if reason.startswith(word):
                _missing_prover_skips[name] = _missing_prover_skips.get(name, 0) + 1


def required_provers_skipped(required: str) -> dict[str, int]:
    """The provers named in ``required`` (comma-separated) whose tests were skipped as "not installed"."""
    wanted = {name.strip() for name in required.split(",") if name.strip()}
    return {name: n for name, n in _missing_prover_skips.items() if name in wanted}


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run when a prover that set-up installed had its tests skipped as missing
    (``PROOFGYM_REQUIRE_PROVERS=coq,dafny,hol_light``, set by ``.ci/run``: a broken install must not turn the
    prover tier into skips and CI green), and when a prover process outlives it.

    The session's fixtures are torn down before this hook. A process killed by ``close()`` may need a moment
    to be reaped, so the check waits (up to 20 s) for the list to empty; it never passes a process that stays.
    """
    skipped = required_provers_skipped(os.environ.get("PROOFGYM_REQUIRE_PROVERS", ""))
    if skipped and not hasattr(session.config, "workerinput"):  # the controller decides, once
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        message = ("PROOFGYM_REQUIRE_PROVERS: tests were skipped because a required prover is missing or broken ("
                   + ", ".join(f"{name}: {n} tests" for name, n in sorted(skipped.items()))
                   + "): run `make setup` and `proofgym doctor`")
        if reporter is not None:
            reporter.ensure_newline()
            reporter.write_line(message, red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    deadline = time.monotonic() + 20.0
    left = prover_processes_below(os.getpid())
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = prover_processes_below(os.getpid())
    if left:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        message = ("prover processes are still running after the tests (a verifier was not closed: use it as a "
                   "context manager, a fixture, or tests.conftest.close_at_session_end): " + ", ".join(left))
        if reporter is not None:
            reporter.ensure_newline()
            reporter.write_line(message, red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def seeded_sample(tasks: Any, per_category: int, seed: int) -> list[Any]:
    """A fixed draw of ``per_category`` tasks from each category, the same on every run (tests that check a
    sample of a built suite in ``make test``; the whole suite is the slow tier's or the builder's)."""
    import random

    rng = random.Random(seed)
    by_category: dict[str, list[Any]] = {}
    for task in sorted(tasks, key=lambda t: t.id):
        by_category.setdefault(task.category, []).append(task)
    return [t for cat in sorted(by_category) for t in rng.sample(by_category[cat], min(per_category,
                                                                                        len(by_category[cat])))]


@pytest.fixture(scope="session")
def tiny_suite() -> Path:
    return DATA / "tiny_suite.jsonl"


@pytest.fixture(scope="module")
def coq_verifier():
    if not have_coq():
        pytest.skip("Coq is not installed: run `make setup` (apt-get install coq)")
    from proofgym.envs.verifiers.coq import CoqVerifier

    with CoqVerifier(audit="always") as verifier:
        yield verifier


@pytest.fixture(scope="session")
def hol():
    """ONE warm HOL Light verifier for the whole run (Debian's HOL Light takes about two minutes to load).

    Shared by every HOL Light test file (test_hol_light, test_hol_sandbox, test_hol_tactic, test_hol_trust,
    test_slips). A module that needs other settings changes ``hol.config`` for its own tests and restores it
    (test_hol_sandbox: a short context deadline); a test that must kill the server is in the slow tier.
    """
    from proofgym.envs.verifiers.hol_light import HolLightVerifier, hol_light_installed

    if not hol_light_installed():
        pytest.skip("HOL Light is not installed: run `make setup` (apt-get install hol-light libnum-ocaml-dev)")
    with HolLightVerifier(progress=False) as verifier:
        verifier.server("plain")
        yield verifier
