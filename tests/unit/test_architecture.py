"""Architecture contract (issue 23, first step): the package's internal imports form no cycle.

The graph counts every ``from . import``/``from .x import`` of ``pytest_gpuperf``, including the
imports inside functions (most of the package's imports are there, to keep torch and numpy out of
start-up; a cycle through them is still a cycle). The plugin and the pytest-benchmark
adapter share state through ``pytest_gpuperf.keys`` (stash keys and the plugin's fixture
functions), so the adapter never imports the plugin; any cycle fails here, naming it.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "pytest_gpuperf"
#: Cycles allowed for now, each with the step that removes it (none left).
KNOWN: dict[frozenset[str], str] = {}


def import_graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports (module level and inside functions)."""
    modules = {p.stem for p in PACKAGE.glob("*.py")}
    graph: dict[str, set[str]] = {}
    for path in PACKAGE.glob("*.py"):
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level == 1:
                names = [node.module.split(".")[0]] if node.module else [a.name for a in node.names]
            elif node.level == 0 and node.module and node.module.split(".")[0] == "pytest_gpuperf":
                parts = node.module.split(".")
                names = [parts[1]] if len(parts) > 1 else [a.name for a in node.names]
            else:
                continue
            deps.update(n for n in names if n in modules and n != path.stem)
        graph[path.stem] = deps
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
    assert {"gate", "compare", "plugin", "testing", "trace"} <= set(graph)
    assert "compare" in graph["gate"] and "trace" in graph["counting"]


def test_no_import_cycles():
    found = cycles(import_graph())
    unknown = [sorted(c) for c in found if c not in KNOWN]
    assert not unknown, f"import cycles in pytest_gpuperf (break them; see tests/unit/test_architecture.py): {unknown}"


def test_the_cycles_of_issue_23_are_gone():
    # ab <-> compare (ab_summary now lives with Comparison), counting <-> profiling (the profiler's
    # events are in pytest_gpuperf.trace, below both), benchmark_compat <-> plugin (pytest_gpuperf.keys)
    graph = import_graph()
    assert "ab" not in graph["compare"] and "profiling" not in graph["counting"]
    assert "plugin" not in graph["benchmark_compat"] and "keys" in graph["benchmark_compat"]
