"""What the pytest plugin shares with the pytest-benchmark adapter through ``config.stash``, so
that the adapter (:mod:`pytest_gpuperf.plugin.benchmark_compat`, imported by the plugin) never
imports the plugin or its session module.

* :data:`SESSION_KEY`: the session's :class:`~pytest_gpuperf.plugin.session.GpuPerfSession`
  (its ``settings``, ``options_for(item)``, ``make_gpu_bench(request, measurer, device)`` and
  ``warn(message)`` are what the adapter uses);
* :data:`BENCH_KEY`: a test item's :class:`~pytest_gpuperf.plugin.bench.GpuBench` (one per test, shared
  by ``gpu_bench`` and ``benchmark``; released when the test's teardown is reported, so that a test
  run again gets a new one).
"""

from __future__ import annotations

from typing import Any

import pytest

SESSION_KEY = pytest.StashKey[Any]()
BENCH_KEY = pytest.StashKey[Any]()
