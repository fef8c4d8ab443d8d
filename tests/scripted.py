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
