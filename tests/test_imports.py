"""The import graph stays a layered house: no cycles, none even through an import inside a function,
and no wrong-way imports (``envs`` never imports ``agents`` or ``training``; the verifiers never import
the suite builders in ``envs/tasks``).

Every module of the package is read with ``ast`` (nothing is imported), so an import anywhere in a
module, a function-level or ``TYPE_CHECKING`` one included, is an edge. Importing a module runs its
parent packages' ``__init__`` too; those implicit edges are left out, since a package's own modules
always run inside its import.
"""

from __future__ import annotations

import ast
import functools
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the repository root is the package ``proofgym``
PACKAGE = "proofgym"
LAYERS = ("cli", "envs", "agents", "training")

#: (importer prefix, imported prefix, why not)
WRONG_WAY = (
    ("proofgym.envs", "proofgym.agents", "envs/ is the bottom layer: agents/ build on it, not the other way"),
    ("proofgym.envs", "proofgym.training", "envs/ is the bottom layer: training/ builds on it"),
    ("proofgym.envs.verifiers", "proofgym.envs.tasks", "suite builders use the verifiers, not the other way"),
)


def _module_files() -> Iterator[tuple[str, Path]]:
    for path in sorted(ROOT.glob("*.py")):
        yield (PACKAGE if path.stem == "__init__" else f"{PACKAGE}.{path.stem}"), path
    for layer in LAYERS:
        for path in sorted((ROOT / layer).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            yield ".".join((PACKAGE, *parts)), path


MODULES: dict[str, Path] = dict(_module_files())


def _resolve(importer: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = importer if MODULES[importer].name == "__init__.py" else importer.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{node.module}" if node.module else package


def _targets(importer: str, node: ast.AST) -> Iterator[str]:
    """The package's modules that ``node`` imports (a name imported from a package may be a submodule)."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.name in MODULES:
                yield alias.name
    elif isinstance(node, ast.ImportFrom):
        base = _resolve(importer, node)
        if base not in MODULES:
            return
        for alias in node.names:
            sub = f"{base}.{alias.name}"
            yield sub if sub in MODULES else base


@functools.cache
def import_graph() -> dict[str, dict[str, int]]:
    """importer -> {imported module: the first line that imports it}."""
    graph: dict[str, dict[str, int]] = defaultdict(dict)
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            for target in _targets(module, node):
                if target != module:
                    graph[module].setdefault(target, node.lineno)
    return graph


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = iter(range(1 << 30))

    def visit(start: str) -> None:
        # iterative Tarjan: the graph is a few hundred modules, but recursion limits are not worth the risk
        work = [(start, iter(graph.get(start, {})))]
        index[start] = low[start] = next(counter)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = next(counter)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph.get(child, {}))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))

    for module in sorted(set(graph) | {t for targets in graph.values() for t in targets}):
        if module not in index:
            visit(module)
    return sorted(found)


def _describe(component: list[str], graph: dict[str, dict[str, int]]) -> str:
    members = set(component)
    edges = [f"{a} -> {b} (line {line})" for a in component for b, line in sorted(graph.get(a, {}).items())
             if b in members]
    return "{" + ", ".join(component) + "}: " + "; ".join(edges)


def test_the_walk_sees_the_package():
    # a walk that finds nothing would pass every check below
    assert {"proofgym.envs.types", "proofgym.envs.proof_env", "proofgym.agents.base",
            "proofgym.training.evaluate", "proofgym.cli"} <= set(MODULES)
    graph = import_graph()
    assert "proofgym.envs.types" in graph["proofgym.envs.proof_env"]


def test_the_cycle_finder_finds_a_function_level_cycle():
    graph = {"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 9}, "d": {"a": 1}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b": 1}, "b": {}}) == []


def test_no_import_cycles():
    graph = import_graph()
    found = cycles(graph)
    assert not found, "import cycles (an import inside a function counts):\n" + "\n".join(
        _describe(c, graph) for c in found)


def test_no_wrong_way_imports():
    graph = import_graph()
    wrong = [f"{importer} imports {target} (line {line}): {why}"
             for importer, targets in sorted(graph.items()) for target, line in sorted(targets.items())
             for src, dst, why in WRONG_WAY
             if (importer == src or importer.startswith(src + ".")) and (target == dst or target.startswith(dst + "."))]
    assert not wrong, "\n".join(wrong)
