"""A pytest plugin for studies on unmodified suites: slow every benchmarked call down by a fraction.

``-p inject_plugin`` (with ``benchmarks/`` on ``PYTHONPATH``) and ``GPUPERF_STUDY_SLOWDOWN=0.2``
(or a file ``.gpuperf-study-slowdown`` at the rootdir that holds ``0.2``)
make every function a benchmark hands to ``gpu_bench``/``benchmark`` do 20% more work: after each
call it busy-waits until the calling thread has run 0.2 x that call's own CPU time more
(``time.thread_time``: more work, as slower code is, which a neighbour's preemption neither adds to
nor takes from; on a quiet host, for a call that does not wait, 20% more wall time too). The suite's files are not touched, so a real
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
        start = time.thread_time()
        out = fn(*args, **kwargs)
        spent = time.thread_time() - start
        until = time.thread_time() + fraction * spent
        while time.thread_time() < until:
            pass
        return out

    return call


#: In a study with git history (``real_suite_study.py --git``) the slowdown is a change of the working
#: tree, so that an A/B against the baselines' commit runs side A without it: this file at the
#: rootdir, untracked, holds the fraction.
SLOWDOWN_FILE = ".gpuperf-study-slowdown"


def pytest_configure(config) -> None:  # noqa: ANN001
    in_tree = config.rootpath / SLOWDOWN_FILE
    fraction = float(os.environ.get("GPUPERF_STUDY_SLOWDOWN")
                     or (in_tree.read_text().strip() if in_tree.is_file() else "") or 0.0)
    if fraction <= 0:
        return
    from pytest_gpuperf.plugin.bench import GpuBench

    original = GpuBench._run

    def run(self, fn, args, kwargs, **kw):  # noqa: ANN001
        return original(self, _slowed(fn, fraction), args, kwargs, **kw)

    GpuBench._run = run
