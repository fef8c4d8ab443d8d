"""A pytest plugin for studies on unmodified suites: slow every benchmarked call down by a fraction.

``-p inject_plugin`` (with ``benchmarks/`` on ``PYTHONPATH``) and ``GPUPERF_STUDY_SLOWDOWN=0.2``
make every function a benchmark hands to ``gpu_bench``/``benchmark`` take 20% longer: after each
call it busy-waits 0.2 x that call's own duration. The suite's files are not touched, so a real
library's pytest-benchmark suite can be studied as it is (``benchmarks/real_suite_study.py``).
The worker processes of ``--gpuperf-processes`` get the same ``-p`` and environment, so the
slowdown applies where the timing happens. Not part of the plugin.
"""

from __future__ import annotations

import functools
import os
import time


def _slowed(fn, fraction: float):
    @functools.wraps(fn)
    def call(*args, **kwargs):
        start = time.perf_counter()
        out = fn(*args, **kwargs)
        spent = time.perf_counter() - start
        until = time.perf_counter() + fraction * spent
        while time.perf_counter() < until:
            pass
        return out

    return call


def pytest_configure(config) -> None:  # noqa: ANN001
    fraction = float(os.environ.get("GPUPERF_STUDY_SLOWDOWN") or 0.0)
    if fraction <= 0:
        return
    from pytest_gpuperf.plugin.bench import GpuBench

    original = GpuBench._run

    def run(self, fn, args, kwargs, **kw):  # noqa: ANN001
        return original(self, _slowed(fn, fraction), args, kwargs, **kw)

    GpuBench._run = run
