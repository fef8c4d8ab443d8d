"""The pytest plugin: command-line and ini options, the ``gpu_bench`` marker and fixtures.

Registered through the ``pytest11`` entry point. At configure time it resolves the session's
:class:`~pytest_gpuperf.plugin.settings.SessionSettings` once and registers one
:class:`~pytest_gpuperf.plugin.session.GpuPerfSession`, which owns the session's state and
hooks. At import and configure time it imports neither torch nor numpy: those load when a
``gpu_bench`` test first runs.

PYTEST_DONT_REWRITE (as in the package's ``__init__``): an A/B worker imports this module before
pytest starts, and pytest's "cannot be rewritten" warning is an error where a project's config says so.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterator

import pytest

from pytest_gpuperf.core import flags, options as opts
from pytest_gpuperf.measure.distributed import DEFAULT_TIMEOUT_S as RANK_TIMEOUT_S
from pytest_gpuperf.plugin import benchmark_compat
from pytest_gpuperf.plugin.keys import SESSION_KEY  # shared with benchmark_compat
from pytest_gpuperf.plugin.session import GpuPerfSession
from pytest_gpuperf.plugin.settings import BISECT_TIMEOUT_S, WHY_MAX, ProcessLimits, resolve_settings

#: the defaults the help texts give, each stated once where it is owned (issue 33)
_LIMITS = ProcessLimits()


def session_of(config: pytest.Config) -> GpuPerfSession:
    """The session object of ``config`` (set at configure time)."""
    return config.stash[SESSION_KEY]


# ----------------------------------------------------------------------------- options


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("gpuperf", "GPU performance benchmarks (pytest-gpuperf)")
    defaults = dict(max_processes=_LIMITS.max_processes,
                    worker_timeout_s=_LIMITS.worker_timeout_s, bisect_timeout_s=BISECT_TIMEOUT_S,
                    rank_timeout_s=RANK_TIMEOUT_S, why_max=WHY_MAX,
                    columns=", ".join(benchmark_compat.TABLE_COLUMNS), sort_keys=", ".join(benchmark_compat.SORT_KEYS),
                    default_sort=benchmark_compat.DEFAULT_SORT)
    for flag in flags.PLUGIN_FLAGS:  # declared once, with whether a worker process gets each (core/flags.py)
        group.addoption(flag.name, **flag.kwargs(**defaults))
    _ini_values(parser)


def _ini_values(parser: pytest.Parser) -> None:
    """The ini values (each option's ``gpuperf_*`` twin, and the ``gpu_bench`` defaults)."""
    parser.addini("gpuperf_baseline_dir", "folder of baseline files, relative to the rootdir", default="")
    parser.addini("gpuperf_history_url", "the history store each measuring run is appended to (sqlite:///PATH, a path "
                  "relative to the rootdir, or postgresql://...; off: none); default .gpuperf/history.sqlite", default="")
    parser.addini("gpuperf_ab_pythonpath", "A/B: import roots of the code under test, relative to the repository's "
                  "top (space- or comma-separated), e.g. src", default="")
    parser.addini("gpuperf_ab_confirm", "confirm a stored-baseline regression by A/B against the baseline's git "
                  "commit on this machine (default true)", type="bool", default=True)
    parser.addini("gpuperf_why", "profile both sides of an A/B decision that comes out regressed or improved and "
                  "name the ops that changed (default true)", type="bool", default=True)
    parser.addini("gpuperf_why_max", "profile the ops of at most N verdicts that moved in a run, the largest "
                  f"changes first (default {WHY_MAX}; 0: none)", default="")
    parser.addini("gpuperf_seed", "seed the global random generators before each benchmark from its test id where "
                  "the plugin measures (default true)", type="bool", default=True)
    parser.addini("gpuperf_bisect_on_regression", "after a confirmed regression, bisect from the baselines' commit "
                  "to HEAD for at most N regressed benchmarks (default 0: off)", default="")
    parser.addini("gpuperf_nproc", "measure every worker process as a torchrun launch of N ranks on this node "
                  "(default: off)", default="")
    parser.addini("gpuperf_max_processes", "measure inconclusive benchmarks in more worker processes, up to N in "
                  f"all (default {_LIMITS.max_processes})", default="")
    parser.addini("gpuperf_more_processes_time", "the worker processes added for inconclusive benchmarks may take "
                  "this many seconds in all (default: as long as the first gpuperf_processes took)", default="")
    parser.addini("gpuperf_settle_time", "the A/B that settles inconclusive comparisons may take about this many "
                  "seconds; regressions are always confirmed (default: no limit)", default="")
    parser.addini("gpuperf_allocator", "glibc's allocator thresholds in the processes that time: fixed (MALLOC_MMAP_"
                  "THRESHOLD_ and MALLOC_TRIM_THRESHOLD_ at 4 GiB for the worker processes where unset, mallopt's "
                  "in the one process of --gpuperf-processes 1, so no process runs its large allocations in another mode) "
                  "or inherit (the environment as it is); default fixed", default="")
    parser.addini("gpuperf_worker_timeout", "stop a worker process still running after this many seconds "
                  f"(default {_LIMITS.worker_timeout_s:g})", default="")
    parser.addini("gpuperf_rank_timeout", "under torchrun: how long a rank waits for the others in their setup, "
                  f"and the timeout of the process group the plugin creates (default {RANK_TIMEOUT_S:g})", default="")
    parser.addini("gpuperf_bisect_timeout", f"bisection: start no step after this many seconds (default "
                  f"{BISECT_TIMEOUT_S:g})", default="")
    parser.addini("gpuperf_host_load", "CPU backend: measure other processes' CPU load while benchmarks run "
                  "(the busy-host guard; default true)", type="bool", default=True)
    parser.addini("gpuperf_bottleneck_thresholds",
                  "overrides of the classification thresholds, e.g. 'idle=0.6, data=0.4'", default="")
    for name in opts.OPTION_NAMES:
        parser.addini(f"gpuperf_{name}", f"gpu_bench default: {opts.OPTION_HELP[name]}", default="")


@pytest.hookimpl(hookwrapper=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser) -> Iterator[None]:
    """After every plugin and the initial conftests are loaded: serve ``--benchmark-*`` unless
    pytest-benchmark is loaded (then its own flags stay, see :mod:`pytest_gpuperf.plugin.benchmark_compat`)."""
    yield
    benchmark_compat.add_benchmark_options(parser, early_config.pluginmanager)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """Under --gpuperf, take pytest-benchmark's place for the session (before anything configures)."""
    benchmark_compat.take_over(config)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "gpu_bench(**options): a performance benchmark measured by the gpu_bench fixture; options: "
        + ", ".join(opts.OPTION_NAMES),
    )
    benchmark_compat.declare_hooks(config.pluginmanager)  # before collection checks conftests' hooks
    compat = benchmark_compat.configure(config)  # the benchmark fixture and --benchmark-* flags (usage errors)
    session = GpuPerfSession(config, resolve_settings(config, compat))
    config.stash[SESSION_KEY] = session
    config.pluginmanager.register(session, "gpuperf-session")
    from pytest_gpuperf.plugin.reports import ReportWriter, TerminalSummary

    ranks = session.settings.ranks  # under torchrun (WORLD_SIZE > 1): rank 0 alone reports and writes
    writer = ranks is None or ranks.is_writer
    if ranks is not None:
        from pytest_gpuperf.plugin.distributed import DistributedSession, PhaseWatchdog, RaisedOnAnyRank

        distributed = DistributedSession(session.settings, ranks)
        config.pluginmanager.register(distributed, "gpuperf-distributed")
        config.pluginmanager.register(RaisedOnAnyRank(distributed), "gpuperf-distributed-raised")
        config.pluginmanager.register(PhaseWatchdog(ranks), "gpuperf-distributed-watchdog")
    if session.settings.nproc is not None:  # the user's session under --gpuperf-nproc: its tests need a group
        from pytest_gpuperf.plugin.distributed import WorldOfOne

        config.pluginmanager.register(WorldOfOne(session.settings), "gpuperf-world-of-one")
    if session.settings.worker_id is None and writer:
        config.pluginmanager.register(TerminalSummary(session), "gpuperf-summary")
    s = session.settings
    if s.measuring and not s.replicated and s.replicate_slot is None and not s.in_ab_worker and s.ab is None \
            and s.bisect is None and ranks is None:  # this one process times: glibc's thresholds pinned here too
        from pytest_gpuperf.core.allocator import fix_in_process

        fix_in_process(s.limits.allocator)
    if s.replicate is not None and s.replicate.then is not None:  # a timed worker that makes the extras after its timing
        from pytest_gpuperf.plugin.extras_pass import ExtrasPass

        config.pluginmanager.register(ExtrasPass(session), "gpuperf-extras-pass")
    if s.replicate is not None and s.replicate.dumps:  # the instruction worker under valgrind (issue 48)
        from pytest_gpuperf.measure.instructions import set_dump_folder

        set_dump_folder(s.replicate.dumps)
    if s.measuring and s.worker_id is None and s.replicate_slot is None and not s.in_ab_worker and ranks is None:
        from pytest_gpuperf.plugin.stopping import SigtermInterrupts

        config.pluginmanager.register(SigtermInterrupts(session), "gpuperf-sigterm")
    if s.measuring:
        from pytest_gpuperf.plugin.seeding import register_seeding

        register_seeding(config)
    if ReportWriter.wanted(session.settings) and writer:
        config.pluginmanager.register(ReportWriter(session), "gpuperf-reports")
    from pytest_gpuperf.plugin.history import HistoryRecorder, history_url

    url = history_url(config, session.settings)  # None: not measuring, a worker process, or history off
    if url is not None and writer:
        config.pluginmanager.register(HistoryRecorder(session, url), "gpuperf-history")


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Never collect the A/B worktrees (``.gpuperf/`` under the rootdir)."""
    if collection_path.name == ".gpuperf" and collection_path.parent == config.rootpath:
        return True
    return None


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    benchmark_compat.select(config, items)  # --gpuperf-only/--gpuperf-skip (and --benchmark-only/-skip)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A bad ``gpu_bench``/``benchmark`` marker value errors its own test at setup, with the reason
    (issue 46): the other tests run, and a deselected test's marker is never read."""
    if item.get_closest_marker("gpu_bench") is None and not benchmark_compat.owns_marker(item):
        return
    try:
        session_of(item.config).options_for(item)
    except opts.OptionError as exc:
        pytest.fail(f"pytest-gpuperf: {exc}", pytrace=False)


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture
def _gpuperf_measurer() -> Any:
    """The timing backend of ``gpu_bench`` (a :class:`pytest_gpuperf.measure.timing.Measurer`).

    Not public API: the plugin's own tests override this fixture in an inner conftest to inject
    scripted timings (``pytest_gpuperf._testing.ScriptedMeasurer``).
    """
    from pytest_gpuperf.testing import active
    from pytest_gpuperf.measure.timing import Measurer

    sim = active()
    return Measurer() if sim is None else Measurer(clock=sim.clock)  # a simulated device: its host clock


@pytest.fixture
def gpu_bench(request: pytest.FixtureRequest, _gpuperf_measurer: Any) -> Iterator[Any]:
    """Benchmark a callable: ``gpu_bench(fn, *args, **kwargs) -> BenchResult``.

    See :class:`pytest_gpuperf.plugin.bench.GpuBench`. Skips when the requested device is absent;
    errors (naming the file) when the module's baseline file is unusable.
    """
    yield session_of(request.config).make_gpu_bench(request, _gpuperf_measurer)


@pytest.fixture
def gpuperf_simulated_cuda(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Install a simulated CUDA device: ``sim = gpuperf_simulated_cuda(devices=2)``.

    Returns the installed :class:`pytest_gpuperf.testing.SimulatedCuda` (this process's
    ``torch.cuda``, NVML and profiler events), and adds ``-p pytest_gpuperf.testing
    --gpuperf-simulated-cuda=N`` to ``PYTEST_ADDOPTS`` for the test, so ``pytester`` sessions it
    runs - in process or in subprocesses, their worker processes and pytest-xdist workers included -
    measure on the same kind of simulated device. Undone after the test. Raises ``ValueError`` for
    ``devices`` outside 1-64.
    """
    import shlex

    from pytest_gpuperf.testing import MAX_DEVICES, SimulatedCuda, session_args

    def install(devices: int = 1) -> Any:
        if not 1 <= devices <= MAX_DEVICES:
            raise ValueError(f"devices={devices!r}: expected 1 to {MAX_DEVICES} simulated CUDA devices")
        addopts = os.environ.get("PYTEST_ADDOPTS", "")  # pytester's own fixture clears it: read it now
        monkeypatch.setenv("PYTEST_ADDOPTS", f"{addopts} {shlex.join(session_args(devices))}".strip())
        return SimulatedCuda(devices=devices).install(monkeypatch)

    return install


@pytest.fixture
def memory_budget(request: pytest.FixtureRequest) -> Any:
    """Fail the test when a block allocates more than a budget: ``with memory_budget("1.5 GiB") as mem:``.

    ``memory_budget(budget, *, max_leak=None, device=None)``: ``budget`` and ``max_leak`` are sizes
    (int bytes or strings such as ``"512 MiB"``, ``"2GB"``); ``device`` defaults to the test's
    benchmark device (marker ``device=``, ``--gpuperf-device``, else CUDA when available). After
    the block ``mem`` carries the :class:`pytest_gpuperf.measure.memory.MemoryReport` fields.
    """
    from pytest_gpuperf.measure.memory import MemoryBudget, SnapshotRecorder
    from pytest_gpuperf.measure.timing import DeviceUnavailable, resolve_device, use_device

    gpuperf = session_of(request.config)
    item = request.node
    try:
        default_device = gpuperf.options_for(item).device
    except opts.OptionError as exc:
        raise pytest.fail.Exception(str(exc), pytrace=False) from None  # the reason once, without the chained traceback
    blocks = 0

    def factory(budget: int | str, *, max_leak: int | str | None = None, device: Any = None) -> MemoryBudget:
        nonlocal blocks
        try:
            # the fixture's default is the GPU gpu_bench measures (xdist worker k: GPU k), and current
            dev = resolve_device(str(device) if device is not None else default_device,
                                 default_index=gpuperf.settings.device_index)
        except DeviceUnavailable as exc:
            pytest.skip(f"pytest-gpuperf: {exc}")
        if device is None:
            use_device(dev)
        snapshot = None
        if gpuperf.settings.snapshot_dir is not None and dev.type == "cuda":
            from pytest_gpuperf.reporting.plots import safe_filename

            blocks += 1
            safe = safe_filename(item.nodeid)  # bounded and distinct, as trace names
            snapshot = SnapshotRecorder(dev, gpuperf.settings.snapshot_dir / f"{safe}.block{blocks}.pickle")
        return MemoryBudget(budget, device=dev, max_leak=max_leak, snapshot=snapshot)

    return factory
