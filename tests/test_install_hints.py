"""Install hints: one per system, in its spec (envs/systems.py), read by every ProverNotFound raise and by doctor.

Fast tier: the verifiers are built with a tool that does not exist, so each refuses before any prover starts.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from proofgym.envs import systems
from proofgym.envs.errors import ProverNotFound

ROOT = Path(__file__).resolve().parent.parent
#: The Debian package that installs each wired system's prover (what scripts/setup.sh installs).
APT_PACKAGE = {"coq": "coq", "hol_light": "hol-light", "dafny": "dafny"}


def test_each_wired_systems_hint_names_its_apt_package_and_doctor_shows_the_same_line():
    assert set(APT_PACKAGE) == set(systems.wired_systems())
    for name, package in APT_PACKAGE.items():
        spec = systems.spec(name)
        assert f"apt-get install {package}" in spec.install_hint, spec.install_hint
        assert spec.probes[0].install in spec.install_hint  # doctor's "to install" column is the probe's line
    assert "z3-solver==4.8.5.0" in systems.DAFNY.install_hint  # the pinned z3 Dafny 2.3 is tested with


def _raises_of_prover_not_found() -> list[tuple[Path, ast.Raise]]:
    found = []
    for layer in ("envs", "agents", "training"):
        for path in sorted((ROOT / layer).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) \
                        and getattr(node.exc.func, "id", None) == "ProverNotFound":
                    found.append((path, node))
    return found


def test_every_prover_not_found_raise_reads_the_specs_hint():
    raises = _raises_of_prover_not_found()
    assert len(raises) >= 8  # coq, hol_light, dafny verifiers and the Coq extractor: a walk that finds none passes
    written = [f"{path.relative_to(ROOT)}:{node.lineno}" for path, node in raises
               if not any(isinstance(n, ast.Attribute) and n.attr == "install_hint" for n in ast.walk(node.exc))]
    assert not written, f"install hints written at the raise instead of read from envs/systems.py: {written}"


@pytest.mark.parametrize(("system", "overrides"), [
    ("coq", {"coqidetop": "no-such-coqidetop"}),
    ("hol_light", {"hol_dir": "/no/such/hol-light"}),
    ("dafny", {"mono": "no-such-mono"}),
])
def test_a_missing_prover_says_which_package_installs_it(system: str, overrides: dict[str, str]):
    with pytest.raises(ProverNotFound) as caught:
        systems.spec(system).verifier_class()(**overrides)
    assert systems.spec(system).install_hint in str(caught.value)
    assert f"apt-get install {APT_PACKAGE[system]}" in str(caught.value)
