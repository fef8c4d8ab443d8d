"""pytest-gpuperf: GPU performance tests for pytest.

Public API: the ``gpu_bench`` fixture and ``@pytest.mark.gpu_bench`` marker (see the README and docs/writing-benchmarks.md),
and the names in ``__all__``. Exports load lazily: importing this package (which pytest does at
start-up through the ``pytest11`` entry point) imports neither torch nor numpy.

PYTEST_DONT_REWRITE: an A/B worker imports this package before pytest starts (from the
coordinator's copy, never the worktree's), and pytest's warning that it cannot rewrite an imported
plugin's asserts then stopped every A/B worker of a project whose config turns warnings into
errors (``filterwarnings = error``, as pydantic-core's does). Nothing here asserts for pytest.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "BenchOptions": "core.options",
    "OptionError": "core.options",
    "BenchResult": "verdict.result",
    "Comparison": "verdict.compare",
    "Verdict": "verdict.compare",
    "decide": "verdict.compare",
    "Outliers": "verdict.stats",
    "parse_size": "core.units",
    "format_bytes": "core.units",
    "MemoryReport": "measure.memory",
    "MemoryLimitError": "measure.memory",
    "MemoryComparison": "verdict.compare",
    "decide_memory": "verdict.compare",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
