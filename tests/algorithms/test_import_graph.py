"""trl_ext's modules import one another without a circle, and the data layer imports none of the layers above it.

The graph is read from the source, without importing anything: every `import` and `from ... import` statement
(relative ones resolved; those inside functions and under `if TYPE_CHECKING` included), every literal module path
handed to `importlib.import_module` / `__import__`, and every string constant that names a trl_ext module
(`"trl_ext.scripts.grpo"`) or an object in one (`"trl_ext.trainers.grpo.config:GRPOFamilyConfig"`): a module named
by a string is loaded by name somewhere, which ties the two as an import does. A package's `__init__` is an edge
only where it is imported itself (`from . import trainers`, `from ..losses import POLICY_LOSSES`), not as the parent
of every module under it. A circle is listed module by module (`a -> b -> a`), with the statements that tie it.
"""

from __future__ import annotations

import ast
import itertools
import pathlib
import re
import textwrap
from collections import deque
from functools import cache

import pytest

PACKAGE_DIR = pathlib.Path(__file__).resolve().parents[2] / "trl_ext"
_NAMED = re.compile(r"(?P<module>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)(?::(?P<name>[A-Za-z_]\w*))?")
_LOADERS = {"import_module", "__import__"}


def module_files(package_dir: pathlib.Path) -> dict[str, pathlib.Path]:
    """Every module of the package under `package_dir`, by dotted name (a package by its `__init__.py`)."""
    root = package_dir.parent
    return {
        ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__"): path
        for path in sorted(package_dir.rglob("*.py"))
    }


def _loaded_path(node: ast.Call) -> str | None:
    """The literal module path a call `importlib.import_module("x")` / `import_module("x")` / `__import__("x")`
    loads, else None (a path computed at run time is not followed)."""
    func = node.func
    called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    if called not in _LOADERS or not node.args:
        return None
    first = node.args[0]
    return first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else None


def imports_of(module: str, path: pathlib.Path, modules: dict[str, pathlib.Path]) -> dict[str, int]:
    """The package's modules that `module` imports or names by a string, each with the first line that does."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: dict[str, int] = {}

    def add(target: str, line: int) -> None:
        while target and target not in modules:  # `import pkg.mod.Name`-like paths: the module that holds it
            target = target.rpartition(".")[0]
        if target and target != module:
            found.setdefault(target, line)

    def absolute(name: str, level: int) -> str:
        base = package.rsplit(".", level - 1)[0] if level > 1 else package
        return f"{base}.{name}" if name else base

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            source = absolute(node.module or "", node.level) if node.level else node.module or ""
            for alias in node.names:  # `from pkg import mod` imports the module; `from pkg import Name`, pkg
                add(f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules else source, node.lineno)
        elif isinstance(node, ast.Call) and (loaded := _loaded_path(node)) is not None:
            relative = len(loaded) - len(loaded.lstrip("."))
            add(absolute(loaded.lstrip("."), relative) if relative else loaded, node.lineno)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            named = _NAMED.fullmatch(node.value) if "." in node.value or ":" in node.value else None
            if named and named["module"] in modules:  # "trl_ext.scripts.grpo", "trl_ext.trainers.x:Class"
                add(named["module"], node.lineno)
    return found


@cache
def import_graph(package_dir: pathlib.Path = PACKAGE_DIR) -> dict[str, dict[str, int]]:
    """`{module: {imported module: line}}` over the package under `package_dir`."""
    modules = module_files(package_dir)
    return {module: imports_of(module, path, modules) for module, path in modules.items()}


def import_cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The circles of the graph, each `[a, b, ..., a]`: the shortest one through each module that is on one (found
    by a breadth-first search inside its group of modules that reach one another, Tarjan's strongly connected
    components), each circle once."""
    cycles, seen = [], set()
    for group in _tied_groups(graph):
        for start in group:
            cycle = _shortest_cycle(graph, start, set(group))
            edges = frozenset(itertools.pairwise(cycle))
            if edges not in seen:
                seen.add(edges)
                cycles.append(cycle)
    return cycles


def _tied_groups(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The groups of two or more modules that all reach one another (Tarjan's strongly connected components)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return sorted(groups)


def _shortest_cycle(graph: dict[str, dict[str, int]], start: str, members: set[str]) -> list[str]:
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        if start in graph[node]:
            path = [node]
            while path[-1] != start:
                path.append(came_from[path[-1]])
            return [*reversed(path), start]
        for target in sorted(graph[node]):
            if target in members and target not in came_from and target != start:
                came_from[target] = node
                queue.append(target)
    raise AssertionError(f"{start} is on no circle")  # a member of a strongly connected group always is


def describe(cycle: list[str], graph: dict[str, dict[str, int]]) -> str:
    ties = [f"    {a} -> {b} (line {graph[a][b]})" for a, b in itertools.pairwise(cycle)]
    return " -> ".join(cycle) + "\n" + "\n".join(ties)


def test_trl_ext_has_no_import_cycle():
    graph = import_graph()
    assert len(graph) > 50 and "trl_ext.algorithms" in graph["trl_ext.trainers.core.classes"]  # the graph was read
    cycles = import_cycles(graph)
    assert not cycles, "import cycle(s) in trl_ext:\n" + "\n".join(describe(c, graph) for c in cycles)


def test_the_data_layer_imports_nothing_above_it():
    """The records, the families and the components (and all they import) reach none of the trainers, the scripts
    or the command line: the classes built from a record are above it."""
    graph = import_graph()
    above = ("trl_ext.trainers", "trl_ext.scripts", "trl_ext.cli")
    for module in ("trl_ext.algorithms", "trl_ext.families", "trl_ext.components"):
        seen, todo = set(), [module]
        while todo:  # everything it imports, transitively
            for target in set(graph[todo.pop()]) - seen:
                seen.add(target)
                todo.append(target)
        assert not sorted(m for m in seen if m.startswith(above)), module


def _package(tmp_path: pathlib.Path, files: dict[str, str]) -> pathlib.Path:
    for name, text in files.items():
        path = tmp_path / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return tmp_path / "pkg"


@pytest.mark.parametrize(
    "tie",
    [
        "def load():\n    from .upper import Upper\n",  # an import inside a function
        "import importlib\n\ndef load():\n    return importlib.import_module('pkg.upper')\n",  # loaded by name
        "from importlib import import_module\n\ndef load():\n    return import_module('.upper', __package__)\n",
        "BASE = 'pkg.upper:Upper'\n",  # a `module:Class` string, loaded elsewhere
        "SCRIPT = 'pkg.upper'\n",  # a module path in a record
    ],
)
def test_a_circle_is_found_through_each_kind_of_tie(tmp_path, tie):
    package = _package(
        tmp_path,
        {"__init__.py": "", "lower.py": tie, "upper.py": "from .lower import load\n\nclass Upper: ...\n"},
    )
    graph = import_graph(package)
    assert import_cycles(graph) == [["pkg.lower", "pkg.upper", "pkg.lower"]]
    assert describe(import_cycles(graph)[0], graph).startswith("pkg.lower -> pkg.upper -> pkg.lower\n")


def test_no_circle_where_imports_run_one_way(tmp_path):
    """A submodule is not tied to its package's `__init__` by being under it; `from . import mod` imports `mod`."""
    package = _package(
        tmp_path,
        {
            "__init__.py": "from . import upper\n",
            "sub/__init__.py": "from .leaf import VALUE\n",
            "sub/leaf.py": "VALUE = 'pkg.sub.leaf is named in prose, not as a path'\n",
            "upper.py": "from .sub import VALUE\nfrom .sub.leaf import VALUE as SAME\n",
        },
    )
    graph = import_graph(package)
    assert graph == {
        "pkg": {"pkg.upper": 1},
        "pkg.sub": {"pkg.sub.leaf": 1},
        "pkg.sub.leaf": {},
        "pkg.upper": {"pkg.sub": 1, "pkg.sub.leaf": 2},
    }
    assert import_cycles(graph) == []
