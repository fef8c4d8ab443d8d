"""What the pytest plugin shares with the pytest-benchmark adapter through ``config.stash``, so
that neither imports the other's internals (the adapter, :mod:`pytest_gpuperf.plugin.benchmark_compat`,
is imported by the plugin, :mod:`pytest_gpuperf.plugin`, never the other way round).

* :data:`STATE_KEY`: the session's :class:`~pytest_gpuperf.plugin.GpuPerfState`;
* :data:`BENCH_KEY`: a test item's :class:`~pytest_gpuperf.plugin.bench.GpuBench` (one per test, shared
  by ``gpu_bench`` and ``benchmark``);
* :data:`FIXTURES_KEY`: :class:`SessionFixtures`, the plugin's functions the ``benchmark``
  fixture calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import pytest

STATE_KEY = pytest.StashKey["Any"]()
BENCH_KEY = pytest.StashKey["Any"]()
FIXTURES_KEY = pytest.StashKey["SessionFixtures"]()


@dataclass(frozen=True)
class SessionFixtures:
    """The plugin's functions behind the ``benchmark`` fixture: ``options_for(item, state)`` ->
    the test's resolved :class:`~pytest_gpuperf.core.options.BenchOptions` (raises
    :class:`~pytest_gpuperf.core.options.OptionError`), and ``make_gpu_bench(request, measurer,
    device)`` -> the test's :class:`~pytest_gpuperf.plugin.bench.GpuBench`."""

    options_for: Callable[[Any, Any], Any]
    make_gpu_bench: Callable[..., Any]
