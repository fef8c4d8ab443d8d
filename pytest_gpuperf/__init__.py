"""pytest-gpuperf: GPU performance tests for pytest.

Public API: the ``gpu_bench`` fixture and ``@pytest.mark.gpu_bench`` marker (see the README),
and the names in ``__all__``. Exports load lazily: importing this package (which pytest does at
start-up through the ``pytest11`` entry point) imports neither torch nor numpy.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "BenchOptions": "options",
    "OptionError": "options",
    "BenchResult": "result",
    "Comparison": "compare",
    "Verdict": "compare",
    "decide": "compare",
    "Outliers": "stats",
    "parse_size": "units",
    "format_bytes": "units",
    "MemoryReport": "memory",
    "MemoryLimitError": "memory",
    "MemoryComparison": "compare",
    "decide_memory": "compare",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
