"""Architecture contract (issue 23, first step): the package's internal imports form no cycle.

The graph counts every ``from . import``/``from .x import`` of ``pytest_gpuperf``, including the
imports inside functions (most of the package's imports are there, to keep torch and numpy out of
start-up; a cycle through them is still a cycle). The plugin and the pytest-benchmark
adapter share state through ``pytest_gpuperf.plugin.keys`` (stash keys and the plugin's fixture
functions), so the adapter never imports the plugin; any cycle fails here, naming it.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "pytest_gpuperf"
#: Cycles allowed for now, each with the step that removes it (none left).
KNOWN: dict[frozenset[str], str] = {}


def module_name(path: Path) -> str:
    """``pytest_gpuperf/verdict/gate.py`` -> ``"verdict.gate"``; a package's ``__init__.py`` -> the package."""
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts) or "__init__"


def import_graph() -> dict[str, set[str]]:
    """Module (dotted, below ``pytest_gpuperf``) -> the package modules it imports, at module level
    and inside functions; ``from pytest_gpuperf.verdict import gate`` counts as importing
    ``verdict.gate``."""
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:
                base = package.split(".") if package and package != "__init__" else []
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            elif node.module and node.module.split(".")[0] == "pytest_gpuperf":
                target = node.module.partition(".")[2]
            else:
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}" if target else alias.name
                dep = sub if sub in paths else target
                if dep in paths and dep != name:
                    deps.add(dep)
        graph[name] = deps
    return graph


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components with more than one module (Tarjan, 1972)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[frozenset[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(frozenset(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_scan_sees_the_package():
    graph = import_graph()
    assert {"verdict.gate", "verdict.compare", "plugin", "testing", "measure.trace"} <= set(graph)
    assert "verdict.compare" in graph["verdict.gate"] and "measure.trace" in graph["measure.counting"]


def test_no_import_cycles():
    found = cycles(import_graph())
    unknown = [sorted(c) for c in found if c not in KNOWN]
    assert not unknown, f"import cycles in pytest_gpuperf (break them; see tests/unit/test_architecture.py): {unknown}"


def test_the_cycles_of_issue_23_are_gone():
    # ab <-> compare (ab_summary now lives with Comparison), counting <-> profiling (the profiler's
    # events are in pytest_gpuperf.measure.trace, below both), benchmark_compat <-> plugin (pytest_gpuperf.plugin.keys)
    graph = import_graph()
    assert "verdict.paired" not in graph["verdict.compare"] and "measure.profiling" not in graph["measure.counting"]
    assert "plugin" not in graph["plugin.benchmark_compat"] and "plugin.keys" in graph["plugin.benchmark_compat"]


def test_every_internal_import_names_a_module_that_exists():
    # imports inside functions run only when their code path does: a moved module must not leave a
    # dangling import behind in a branch no other test reaches
    modules = {module_name(p) for p in PACKAGE.rglob("*.py")}
    dangling = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                    and node.module.split(".")[0] == "pytest_gpuperf":
                target = node.module.partition(".")[2] or "__init__"
                if target not in modules:
                    dangling.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.module}")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("pytest_gpuperf.") and alias.name.partition(".")[2] not in modules:
                        dangling.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {alias.name}")
    assert not dangling, f"imports of modules that do not exist: {dangling}"
