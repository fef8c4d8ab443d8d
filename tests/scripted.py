"""Scripted timings for end-to-end tests: a test that asserts a verdict times nothing for real.

``script_timings(pytester, {"ms": 1.0})`` makes the inner pytest session take every
``gpu_bench`` timing from ``timings.json`` (see ``pytest_gpuperf._testing``): the benchmarked
function still runs, but its per-call time is the scripted one, so the verdict is the same on
any machine, loaded or not. ``set_timings`` changes the script between two inner runs.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from pytest_gpuperf._testing import SCRIPTED_CONFTEST


def set_timings(pytester: pytest.Pytester, default: dict[str, Any] | None = None, **per_test: dict[str, Any]) -> None:
    """Write ``timings.json``: a spec per test name, ``default`` for the others (``"*"``)."""
    data: dict[str, Any] = dict(per_test)
    if default is not None:
        data["*"] = default
    pytester.path.joinpath("timings.json").write_text(json.dumps(data))


def script_timings(pytester: pytest.Pytester, default: dict[str, Any] | None = None, *, conftest: str = "",
                   **per_test: dict[str, Any]) -> None:
    """Install the scripted measurer in the inner session's conftest (plus ``conftest`` text) and
    write the timings."""
    pytester.makeconftest(SCRIPTED_CONFTEST + "\n" + conftest)
    set_timings(pytester, default, **per_test)


#: Twelve benchmarks' process medians (baseline: 2 processes, this run: 3), in tests/test_cli.py
#: and tests/test_replicates_e2e.py: the suite's spreads are about 1%, test_p0's own came out
#: 2.6% (its 99% CI 0.85x-1.13x: inconclusive alone), test_p1 is 30% slower, test_p2 4% slower and as
#: wide as test_p0.
SUITE_BASE = [(1.0, 1.035), (1.0, 0.99), (1.0, 1.035), (1.0, 1.008), (1.0, 0.992), (1.0, 1.01), (1.0, 0.985),
              (1.0, 1.005), (1.0, 1.013), (1.0, 0.995), (1.0, 1.02), (1.0, 1.01)]
SUITE_CURRENT = [(0.975, 1.03, 1.0), (1.3 * 0.99, 1.3, 1.3 * 1.012), (1.04 * 0.975, 1.04 * 1.03, 1.04),
                 (1.005, 0.99, 1.0), (1.012, 1.0, 0.995), (0.99, 1.005, 1.01), (1.0, 0.993, 1.008), (1.01, 1.0, 0.99),
                 (0.995, 1.01, 1.0), (1.0, 1.012, 0.99), (1.0, 0.99, 1.01), (1.0, 1.0, 1.0)]
