"""Test-suite setup.

In-process ``pytester`` runs restore ``sys.modules`` after each inner session, and numpy's and
torch's C extensions cannot be imported twice in one process; importing them here, in the
outer session, keeps them loaded across inner sessions. (The plugin itself imports them lazily:
``test_plain_session_does_not_import_torch`` checks that in a subprocess.)
"""

import numpy  # noqa: F401
import scipy.stats  # noqa: F401
import torch  # noqa: F401
import torch.profiler

# The CPU memory measurement runs torch.profiler, which imports more of torch on first use
# (some modules register operator libraries that must not be registered twice): run it once here.
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True):
    torch.ones(1)

try:  # optional (pytest-gpuperf[plot]); keep its modules loaded across inner sessions too
    import matplotlib  # noqa: F401
    import matplotlib.backends.backend_agg  # noqa: F401
    import matplotlib.figure  # noqa: F401
    import matplotlib.gridspec  # noqa: F401
    import matplotlib.image  # noqa: F401
except ImportError:  # pragma: no cover
    pass

# Real-timing tests (those without scripted timings) must not depend on what else the machine
# runs: the busy-host guard (CPU host load) would make a misclassification or a regression
# inconclusive on a loaded CI runner. Off for every inner session of this suite; the guard's own
# tests script the host load (ScriptedMeasurer "host_load") or inject /proc/stat readers.
# Inner sessions also measure in their own process (--gpuperf-processes 1) unless a test asks for
# worker processes: each worker imports torch (seconds), and most tests check what happens inside
# one process; the replicate tests pass --gpuperf-processes.
# Set per test (not at import): the outer session -- e.g. the bundled perf suite, `pytest --gpuperf
# tests/perf`, which this conftest also covers -- keeps its defaults.
import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _inner_session_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUPERF_HOST_LOAD", "0")
    monkeypatch.setenv("GPUPERF_PROCESSES", "1")
    # the summary table fits the terminal and its notes and warnings wrap to it (issue 24): inner
    # sessions get a very wide one, so tests that read table cells see every column and tests that
    # match a warning see it on one line; the width tests set COLUMNS themselves
    monkeypatch.setenv("COLUMNS", "1000")
