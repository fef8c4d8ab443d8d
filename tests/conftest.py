"""Test-suite setup.

In-process ``pytester`` runs restore ``sys.modules`` after each inner session, and numpy's and
torch's C extensions cannot be imported twice in one process; importing them here, in the
outer session, keeps them loaded across inner sessions. (The plugin itself imports them lazily:
``test_plain_session_does_not_import_torch`` checks that in a subprocess.)
"""

import os

from pathlib import Path

# On a machine with a GPU the suite runs as on CI's CPU-only machines: its tests that mean the CPU
# leave the device out (the plugin then picks cuda:0 where there is one), so the GPU is hidden at
# configure time, before anything initializes CUDA. `GPUPERF_TEST_CUDA=1 pytest tests` runs the
# CUDA-only tests instead (those marked needs_cuda, on the real GPU; the rest are deselected), and
# the bundled perf suite (`pytest --gpuperf tests/perf`, the main job) keeps the GPU.
# docs/development.md.
CUDA_RUN = os.environ.get("GPUPERF_TEST_CUDA") == "1"
PERF_SUITE = Path(__file__).resolve().parent / "perf"

import numpy  # noqa: F401,E402
import scipy.stats  # noqa: F401,E402
import torch  # noqa: F401,E402
import torch.profiler  # noqa: E402

# The CPU memory measurement runs torch.profiler, which imports more of torch on first use
# (some modules register operator libraries that must not be registered twice): run it once here.
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True):
    torch.ones(1)

# the history store's database layer (written after every measuring inner session): loaded once too
import sqlalchemy  # noqa: F401,E402
import sqlalchemy.dialects.sqlite  # noqa: F401,E402

try:  # PostgreSQL's driver (the test extra): its exception classes must stay the ones SQLAlchemy wraps
    import psycopg  # noqa: F401
    import sqlalchemy.dialects.postgresql.psycopg  # noqa: F401
except ImportError:  # pragma: no cover
    pass

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
    # inner sessions load this plugin and pytest-xdist only, not whatever else the machine has
    # installed (pytest-benchmark would own the benchmark marker in smoke mode; other plugins
    # import numpy at start-up, which the start-up tests check is not this plugin's doing)
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.setenv("PYTEST_PLUGINS", "pytest_gpuperf.plugin,xdist.plugin,xdist.looponfail")


@pytest.fixture(scope="module")
def pg():
    """A throwaway PostgreSQL cluster for a test module (``tests/pgcluster.py``: initdb into a
    temporary folder, a free loopback port), stopped after it; skips where no server is installed."""
    from pgcluster import Cluster, bindir

    pytest.importorskip("psycopg")
    if bindir() is None:
        pytest.skip("no PostgreSQL server installed (initdb, pg_ctl)")
    cluster = Cluster()
    yield cluster
    cluster.stop()


def pytest_configure(config: pytest.Config) -> None:
    """Hide the GPU from the suite (see the top of this file), not from the perf suite alone; the
    ``subprocess`` marker."""
    config.addinivalue_line("markers", "subprocess: the test's work runs in a child process, which in-process "
                                       "coverage does not see (benchmarks/cuda_coverage.py leaves it out)")
    targets = [Path(config.invocation_params.dir, str(a).split("::")[0]).resolve() for a in config.args]
    perf_only = bool(targets) and all(t == PERF_SUITE or PERF_SUITE in t.parents for t in targets)
    if not CUDA_RUN and not perf_only:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""


#: The modules of the longest tests (worker processes, A/B pairs, bisect steps) with their rough
#: cost in seconds on CI's 2-core machine (--durations, docs/development.md). pytest-xdist's
#: worksteal scheduler gives each worker a contiguous share of the tests and an idle worker steals
#: the *back* half of another's queue: so that the long tests do not end up queued behind each other
#: on one worker (or run last, with the other worker idle), :func:`_spread_slow_modules` splits
#: these modules between the workers' shares and starts each share with its own. The order
#: changes no outcome.
SLOW_MODULES = {
    "test_replicates_e2e.py": 650, "test_simulated_cuda_e2e.py": 300, "test_why_e2e.py": 340,
    "test_ab_confirm_e2e.py": 320, "test_bisect_e2e.py": 300, "test_ab_e2e.py": 275, "test_ci_reports.py": 195,
    "test_benchmark_compat.py": 170, "test_distributed_e2e.py": 330, "test_user_rough_edges.py": 105,
    "test_extras_process_e2e.py": 70, "test_scaling_e2e.py": 90, "test_multinode_e2e.py": 55,
}


def _spread_slow_modules(items: list[pytest.Item], workers: int) -> list[pytest.Item]:
    """``items`` reordered for ``workers`` xdist workers: the :data:`SLOW_MODULES` dealt into one
    group per worker (longest first, each to the group with the least so far), and worker k's
    contiguous share (worksteal hands out ``len(pending) // workers_left`` tests in turn) starting
    with group k, then short tests; whole modules stay together, every other test keeps its order.
    The same in every worker (they must collect one order)."""
    def module(item: pytest.Item) -> str | None:
        name = item.path.name
        return name if name in SLOW_MODULES and item.path.parent.name == "tests" else None

    slow: dict[str, list[pytest.Item]] = {}
    rest = []
    for item in items:
        m = module(item)
        (slow.setdefault(m, []) if m else rest).append(item)
    if workers < 2 or not slow:
        return [i for m in sorted(slow, key=lambda m: -SLOW_MODULES[m]) for i in slow[m]] + rest
    groups: list[list[pytest.Item]] = [[] for _ in range(workers)]
    load = [0] * workers
    for m in sorted(slow, key=lambda m: (-SLOW_MODULES[m], m)):
        k = load.index(min(load))
        groups[k].extend(slow[m])
        load[k] += SLOW_MODULES[m]
    out: list[pytest.Item] = []
    left = len(items)
    for k in range(workers):
        share = left // (workers - k)  # what worksteal sends worker k first
        fill = max(0, share - len(groups[k]))
        out += groups[k] + rest[:fill]
        rest = rest[fill:]
        left -= len(groups[k]) + fill
    return out + rest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longest modules spread over the xdist workers (:func:`_spread_slow_modules`);
    ``GPUPERF_TEST_CUDA=1``: keep only the tests that need a CUDA GPU."""
    items[:] = _spread_slow_modules(items, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    if not CUDA_RUN:
        return
    def needs_cuda(item: pytest.Item) -> bool:
        return any("CUDA GPU" in str(m.kwargs.get("reason", "")) for m in item.iter_markers("skipif"))
    keep = [i for i in items if needs_cuda(i)]
    config.hook.pytest_deselected(items=[i for i in items if not needs_cuda(i)])
    items[:] = keep
