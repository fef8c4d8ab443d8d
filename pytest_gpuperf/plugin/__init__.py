"""The pytest plugin: options, marker, the ``gpu_bench`` fixture, verdicts, baselines, summary.

Registered through the ``pytest11`` entry point. At import and configure time it imports
neither torch nor numpy: those load when a ``gpu_bench`` test first runs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

import pytest

from pytest_gpuperf.plugin import benchmark_compat
from pytest_gpuperf.core import options as opts
from pytest_gpuperf.plugin.keys import BENCH_KEY, FIXTURES_KEY, STATE_KEY, SessionFixtures  # shared with benchmark_compat

if TYPE_CHECKING:
    from pytest_gpuperf.storage.baseline import BaselineFile


@dataclass
class Recorded:
    """One measurement of the session, with where it came from."""

    nodeid: str
    module: str
    result: Any  # BenchResult
    baseline_path: str | None
    device_key: str | None
    environment: dict[str, Any] | None
    updated: bool = False


@dataclass
class GpuPerfState:
    """Per-session state of the plugin (stored in ``config.stash``)."""

    measuring: bool
    updating: bool
    baseline_dir: Path
    json_path: Path | None
    snapshot_dir: Path | None
    classify: bool
    strict: bool
    normalize: bool
    host_load: bool
    artifacts_dir: Path
    thresholds: Any  # bottleneck.Thresholds from the ini, or None for the built-in ones
    options: opts.BenchOptions  # the session's defaults: command line over ini over the built-in ones
    rootpath: Path
    recorded: list[Recorded] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    worker_id: str | None = None  # "gw3" inside a pytest-xdist worker
    xdist_dir: Path | None = None  # shared folder of the run's locks and worker results
    owns_xdist_dir: bool = False
    markdown_path: Path | None = None
    plot_dir: Path | None = None
    verbose: int = 0
    workers_seen: int = 0
    errors: dict[str, str] = field(default_factory=dict)  # report path -> why it could not be written
    ab: Any = None  # --gpuperf-ab: the abrun.Revision to compare with (controller)
    ab_processes: int = 2
    ab_roots: tuple[str, ...] = ()
    ab_worker: Any = None  # in an A/B worker process: its abrun.WorkerClient
    ab_results: dict[str, Any] | None = None  # the user's session: full id -> finished A/B BenchResult
    ab_removed: list[str] = field(default_factory=list)
    ab_confirm: bool = True  # confirm a stored regression by A/B against the baseline's commit
    processes: int = 1  # worker processes per benchmark (--gpuperf-processes; 1: measured in this process)
    replicate_slot: tuple[int, int] | None = None  # in a replicate worker: (k, P)
    _git: tuple[str | None, bool | None] | None = None
    _baselines: dict[str, "BaselineFile | None"] = field(default_factory=dict)
    _environments: dict[str, dict[str, Any]] = field(default_factory=dict)

    def environment(self, device: Any) -> dict[str, Any]:
        """Fingerprint of ``device`` with its reference-workload medians (once per session)."""
        key = str(device)
        if key not in self._environments:
            from pytest_gpuperf.measure.drift import measure_reference
            from pytest_gpuperf.measure.environment import fingerprint

            env = fingerprint(device)
            env["reference"] = _reference_for(device, measure_reference, self.xdist_dir, self.device_lock(device))
            self._environments[key] = env
            if device.type == "cuda":
                from pytest_gpuperf.measure.telemetry import handle_for, nvml_status, other_processes, other_processes_warning

                status = nvml_status()
                if status:
                    self.notes.append(status)
                warning = other_processes_warning(other_processes(handle_for(device.index or 0)), device)
                if warning:
                    self.warnings.append(warning)
        return self._environments[key]

    def baseline(self, path: Path) -> "BaselineFile | None":
        """Load (once per session) the baseline file at ``path``; raises BaselineError."""
        key = str(path)
        if key not in self._baselines:
            from pytest_gpuperf.storage.baseline import load

            self._baselines[key] = load(path)
        return self._baselines[key]

    @property
    def replicated(self) -> bool:
        """This session measures through replicate worker processes (``--gpuperf-processes`` >= 2)."""
        return (self.measuring and self.processes >= 2 and self.ab is None and self.ab_worker is None
                and self.replicate_slot is None)

    def git_state(self) -> tuple[str | None, bool | None]:
        """``(commit, dirty)`` of the checkout, once per session (before any baseline is written; the
        baseline folder's own changes do not make it dirty)."""
        if self._git is None:
            from pytest_gpuperf.measure.environment import git_commit, git_dirty

            self._git = (git_commit(str(self.rootpath)), git_dirty(str(self.rootpath), ignore=str(self.baseline_dir)))
        return self._git

    @property
    def worker_index(self) -> int | None:
        return int(self.worker_id[2:]) if self.worker_id and self.worker_id[2:].isdigit() else None

    def device_lock(self, device: Any) -> Any:
        """Under pytest-xdist, a file lock serializing measurements on one device across workers."""
        if self.xdist_dir is None:
            import contextlib

            return contextlib.nullcontext()
        from filelock import FileLock

        return FileLock(str(self.xdist_dir / f"device-{str(device).replace(':', '_')}.lock"))

    def relpath(self, path: Path) -> str:
        try:
            return os.path.relpath(path, self.rootpath)
        except ValueError:  # another drive on Windows
            return str(path)


_REFERENCE_CACHE: dict[str, dict[str, Any]] = {}


def _reference_for(device: Any, measure: Any, shared_dir: Path | None = None, lock: Any = None) -> dict[str, Any] | None:
    """Reference-workload medians of ``device`` (about 0.3 s), measured once per process, under the
    device's lock; under pytest-xdist once per run, shared through ``shared_dir`` (see
    :func:`pytest_gpuperf.measure.drift.shared_reference`)."""
    import contextlib

    from pytest_gpuperf.measure.drift import shared_reference

    key = str(device)
    if key not in _REFERENCE_CACHE:
        try:
            _REFERENCE_CACHE[key] = shared_reference(device, measure, shared_dir, lock or contextlib.nullcontext())
        except Exception as exc:  # a failing reference must not take the session down
            return {"error": f"{type(exc).__name__}: {exc}"}
    return _REFERENCE_CACHE[key]


# ----------------------------------------------------------------------------- options


def _help(name: str) -> str:
    """An option's help for argparse (which formats ``%``, so it is escaped)."""
    return opts.OPTION_HELP[name].replace("%", "%%")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("gpuperf", "GPU performance benchmarks (pytest-gpuperf)")
    group.addoption("--gpuperf", action="store_true", default=False,
                    help="measure gpu_bench tests and compare them with the stored baselines")
    group.addoption("--gpuperf-update-baselines", action="store_true", default=False,
                    help="measure and write baselines for the tests that pass (implies --gpuperf)")
    group.addoption("--gpuperf-baseline-dir", metavar="DIR", default=None,
                    help="folder of baseline files (ini gpuperf_baseline_dir; default: baselines/ under the rootdir)")
    group.addoption("--gpuperf-device", metavar="DEVICE", default=None, help=_help("device"))
    group.addoption("--gpuperf-json", metavar="PATH", default=None,
                    help="write this run's results (baseline schema plus verdicts) to PATH")
    group.addoption("--gpuperf-memory-snapshot", metavar="DIR", default=None,
                    help="CUDA: when a memory check fails, save an allocation-history snapshot "
                         "(PyTorch memory visualizer pickle) under DIR")
    group.addoption("--gpuperf-classify", action="store_true", default=False,
                    help="classify every measured benchmark's bottleneck (compute/memory/overhead/sync/transfer/data)")
    group.addoption("--gpuperf-artifacts", metavar="DIR", default=None,
                    help="where chrome traces of regressed or misclassified benchmarks go (default .gpuperf/artifacts/)")
    group.addoption("--gpuperf-confirm", metavar="N", default=None, help=_help("confirm"))
    group.addoption("--gpuperf-no-host-load", action="store_true", default=False,
                    help="CPU backend: do not measure other processes' CPU load while benchmarks run (the "
                         "busy-host guard; also ini gpuperf_host_load = false or GPUPERF_HOST_LOAD=0)")
    group.addoption("--gpuperf-strict", action="store_true", default=False,
                    help="fail inconclusive comparisons too (default: they pass with a warning)")
    group.addoption("--gpuperf-normalize", action="store_true", default=False,
                    help="divide current times by the machine-speed drift of the reference workloads before deciding")
    group.addoption("--gpuperf-markdown", metavar="PATH", default=None,
                    help="write a Markdown summary (for a CI step summary or a PR comment) to PATH")
    group.addoption("--gpuperf-plot", metavar="DIR", default=None,
                    help="write PNG plots (per benchmark and a suite forest plot) under DIR; needs pytest-gpuperf[plot]")
    group.addoption("--gpuperf-threshold", metavar="FRACTION", default=None, help=_help("threshold"))
    group.addoption("--gpuperf-alpha", metavar="P", default=None, help=_help("alpha"))
    group.addoption("--gpuperf-max-time", metavar="SECONDS", default=None, help=_help("max_time"))
    group.addoption("--gpuperf-no-counts", action="store_true", default=False,
                    help="do not count ops/kernels/syncs/copies/FLOPs/bytes per call, so no count gate "
                         "(same as ini gpuperf_counts = false)")
    group.addoption("--gpuperf-processes", metavar="N", default=None,
                    help="measure every benchmark in N fresh worker processes, one after another, and decide on "
                         "the spread between them (ini gpuperf_processes, env GPUPERF_PROCESSES; default 3; 1: in "
                         "this process only, which cannot see run-to-run spread)")
    group.addoption("--gpuperf-no-ab-confirm", action="store_true", default=False,
                    help="do not confirm a stored-baseline regression by A/B against the baseline's own git commit "
                         "on this machine (ini gpuperf_ab_confirm = false)")
    group.addoption("--gpuperf-ab", metavar="REF", default=None,
                    help="A/B: measure the benchmarks of the working tree (B) and of git revision REF (A, e.g. "
                         "origin/main) on this machine, interleaved, and decide on the paired evidence (no stored "
                         "baseline needed)")
    group.addoption("--gpuperf-ab-processes", metavar="N", default=None,
                    help="A/B: pairs of worker processes (one A, one B each), run one pair after another "
                         "(default 2; blocks of one process share its speed mode)")
    group.addoption("--gpuperf-ab-pythonpath", metavar="PATHS", default=None,
                    help="A/B: import roots of the code under test, relative to the repository's top (e.g. src), "
                         "put first on each side's PYTHONPATH (ini gpuperf_ab_pythonpath)")
    benchmark_compat.add_gpuperf_options(group)  # --gpuperf-only/-skip/-columns/-sort
    parser.addini("gpuperf_baseline_dir", "folder of baseline files, relative to the rootdir", default="")
    parser.addini("gpuperf_ab_pythonpath", "A/B: import roots of the code under test, relative to the repository's "
                  "top (space- or comma-separated), e.g. src", default="")
    parser.addini("gpuperf_ab_confirm", "confirm a stored-baseline regression by A/B against the baseline's git "
                  "commit on this machine (default true)", type="bool", default=True)
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


def _cli_values(config: pytest.Config) -> dict[str, Any]:
    values = {name: config.getoption(f"--gpuperf-{name.replace('_', '-')}") for name in opts.CLI_OPTIONS}
    if config.getoption("--gpuperf-no-counts"):
        values["counts"] = False
    return values


def _ini_values(config: pytest.Config) -> dict[str, Any]:
    out = {}
    for name in opts.OPTION_NAMES:
        if name == "processes":  # the session's number (with --gpuperf-processes, GPUPERF_PROCESSES): not a default
            continue
        value = config.getini(f"gpuperf_{name}")
        if isinstance(value, str) and value.strip():
            out[name] = value.strip()
    return out


def _check_baseline_dir_form(config: pytest.Config, cli_dir: str | None) -> None:
    """``--gpuperf-baseline-dir DIR`` (space form) with DIR outside the invocation folder is a
    usage error: pytest picks the rootdir before plugins add their options, so it reads DIR as a
    test path and moves the rootdir to a common ancestor (every id changes, nothing matches its
    baseline, and the gate is silently off). ``--gpuperf-baseline-dir=DIR`` is safe."""
    if not cli_dir:
        return
    args = list(config.invocation_params.args)
    spaced = any(a == "--gpuperf-baseline-dir" and i + 1 < len(args) and args[i + 1] == cli_dir
                 for i, a in enumerate(args))
    where = Path(config.invocation_params.dir, cli_dir).resolve()
    here = Path(config.invocation_params.dir).resolve()
    if spaced and here != where and here not in where.parents:
        raise pytest.UsageError(
            f"pytest-gpuperf: write --gpuperf-baseline-dir={cli_dir} (with '='): with a space, pytest "
            f"reads {cli_dir} as a test path when it picks the rootdir, which then moves to a common "
            f"ancestor of {here} and {where} and every baseline is missed"
        )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "gpu_bench(**options): a performance benchmark measured by the gpu_bench fixture; options: "
        + ", ".join(opts.OPTION_NAMES),
    )
    compat = benchmark_compat.configure(config)  # the benchmark fixture and --benchmark-* flags (usage errors)
    if os.environ.get("GPUPERF_SIMULATED_CUDA", "").strip():  # pytest_gpuperf.testing: a simulated CUDA device
        from pytest_gpuperf.testing import install_from_env

        try:
            installed = install_from_env()
        except ValueError as exc:
            raise pytest.UsageError(f"pytest-gpuperf: {exc}") from None
        if installed is not None:
            config.add_cleanup(installed[1].undo)
    try:
        session_options = opts.resolve_session({**compat.cli_options, **{
            k: v for k, v in _cli_values(config).items() if v is not None}}, _ini_values(config))
    except opts.OptionError as exc:
        raise pytest.UsageError(f"pytest-gpuperf: {exc}") from None
    updating = bool(config.getoption("--gpuperf-update-baselines"))
    cli_dir = config.getoption("--gpuperf-baseline-dir")
    ini_dir = config.getini("gpuperf_baseline_dir")
    _check_baseline_dir_form(config, cli_dir)
    if cli_dir:
        baseline_dir = Path(config.invocation_params.dir, cli_dir)
    elif ini_dir:
        ini_base = config.inipath.parent if config.inipath else config.rootpath
        baseline_dir = Path(ini_base, ini_dir)
    else:
        baseline_dir = config.rootpath / "baselines"
    plot_opt = config.getoption("--gpuperf-plot")
    if plot_opt:
        from pytest_gpuperf.reporting.plots import require_matplotlib

        try:
            require_matplotlib()
        except ImportError as exc:
            raise pytest.UsageError(f"pytest-gpuperf: {exc}") from None
    md_opt = config.getoption("--gpuperf-markdown")
    worker_id = getattr(config, "workerinput", {}).get("workerid")
    xdist_dir, owns = None, False
    if worker_id is not None:
        xdist_dir = Path(os.environ["GPUPERF_XDIST_DIR"]) if os.environ.get("GPUPERF_XDIST_DIR") else None
    elif getattr(config.option, "numprocesses", None) or getattr(config.option, "dist", "no") != "no":
        import tempfile

        xdist_dir, owns = Path(tempfile.mkdtemp(prefix="gpuperf-xdist-")), True
        os.environ["GPUPERF_XDIST_DIR"] = str(xdist_dir)  # inherited by the workers it spawns
    json_opt = config.getoption("--gpuperf-json") or compat.json_path
    snap_opt = config.getoption("--gpuperf-memory-snapshot")
    art_opt = config.getoption("--gpuperf-artifacts")
    thresholds = None  # the built-in classification thresholds
    if config.getini("gpuperf_bottleneck_thresholds"):
        from pytest_gpuperf.verdict.bottleneck import Thresholds

        try:
            thresholds = Thresholds.parse(config.getini("gpuperf_bottleneck_thresholds"))
        except ValueError as exc:
            raise pytest.UsageError(f"pytest-gpuperf: ini gpuperf_bottleneck_thresholds: {exc}") from None
    _check_device_option(config, session_options)
    if worker_id is None:  # the controller writes the reports: fail now, not after every benchmark ran
        for option, value in (("--gpuperf-json", json_opt), ("--gpuperf-markdown", md_opt)):
            if value:
                _check_output_path(option, Path(config.invocation_params.dir, value))
    config.stash[FIXTURES_KEY] = SessionFixtures(options_for=_options_for, make_gpu_bench=make_gpu_bench)
    config.stash[STATE_KEY] = GpuPerfState(
        measuring=(bool(config.getoption("--gpuperf")) or updating) and not compat.disabled,
        updating=updating,
        baseline_dir=baseline_dir.resolve(),
        json_path=Path(config.invocation_params.dir, json_opt) if json_opt else None,
        snapshot_dir=Path(config.invocation_params.dir, snap_opt) if snap_opt else None,
        classify=bool(config.getoption("--gpuperf-classify")),
        strict=bool(config.getoption("--gpuperf-strict")),
        normalize=bool(config.getoption("--gpuperf-normalize")),
        host_load=_host_load_enabled(config),
        artifacts_dir=Path(config.invocation_params.dir, art_opt) if art_opt else config.rootpath / ".gpuperf" / "artifacts",
        thresholds=thresholds,
        options=session_options,
        rootpath=config.rootpath,
        worker_id=worker_id,
        xdist_dir=xdist_dir,
        owns_xdist_dir=owns,
        markdown_path=Path(config.invocation_params.dir, md_opt) if md_opt else None,
        plot_dir=Path(config.invocation_params.dir, plot_opt) if plot_opt else None,
        verbose=config.getoption("verbose", 0) or 0,
    )
    _configure_replicates(config, config.stash[STATE_KEY])
    _configure_ab(config, config.stash[STATE_KEY])


def _configure_replicates(config: pytest.Config, state: GpuPerfState) -> None:
    """Resolve ``--gpuperf-processes`` (usage error when bad); in a replicate worker, its slot."""
    from pytest_gpuperf.plugin.replicates import default_processes, worker_slot

    try:
        state.processes = default_processes(config.getoption("--gpuperf-processes"),
                                            config.getini("gpuperf_processes") or None)
        state.replicate_slot = worker_slot() if state.worker_id is None else None
    except ValueError as exc:
        raise pytest.UsageError(f"pytest-gpuperf: {exc}") from None
    state.ab_confirm = not config.getoption("--gpuperf-no-ab-confirm") and bool(config.getini("gpuperf_ab_confirm"))
    if state.replicate_slot is not None:
        state.measuring, state.updating = True, False


def _host_load_enabled(config: pytest.Config) -> bool:
    """Whether the CPU backend measures the host load (the busy-host guard): off with
    ``--gpuperf-no-host-load``, ini ``gpuperf_host_load = false`` or ``GPUPERF_HOST_LOAD=0``."""
    env = os.environ.get("GPUPERF_HOST_LOAD", "").strip().lower()
    if env in ("0", "false", "no", "off"):
        return False
    return not config.getoption("--gpuperf-no-host-load") and bool(config.getini("gpuperf_host_load"))


def _configure_ab(config: pytest.Config, state: GpuPerfState) -> None:
    """``--gpuperf-ab REF``: check it now (usage errors); in an A/B worker process connect to the
    coordinator. The measuring itself starts at session start (:func:`pytest_sessionstart`)."""
    import re

    if os.environ.get("GPUPERF_AB_ADDRESS") and state.worker_id is None:
        from pytest_gpuperf.ab.run import WorkerClient

        state.ab_worker = WorkerClient.from_environment()
        state.measuring = True
        return
    ref = config.getoption("--gpuperf-ab")
    roots = config.getoption("--gpuperf-ab-pythonpath") or config.getini("gpuperf_ab_pythonpath") or ""
    state.ab_roots = tuple(r for r in re.split(r"[\s,]+", roots) if r)
    if not ref:
        return
    if state.updating:
        raise pytest.UsageError("pytest-gpuperf: --gpuperf-ab compares with a git revision and stores nothing; "
                                "it cannot be combined with --gpuperf-update-baselines")
    n = config.getoption("--gpuperf-ab-processes")
    if n is not None:
        if not str(n).isdigit() or int(n) < 1:
            raise pytest.UsageError(f"pytest-gpuperf: --gpuperf-ab-processes {n}: expected an integer >= 1")
        state.ab_processes = int(n)
    state.measuring = True
    if state.worker_id is not None:  # a pytest-xdist worker: the controller measured; read its results
        state.ab = ref
        return
    from pytest_gpuperf.ab.run import ABError, resolve_revision

    try:
        state.ab = resolve_revision(Path(config.invocation_params.dir), ref)
    except ABError as exc:
        raise pytest.UsageError(f"pytest-gpuperf: {exc}") from None
    for r in state.ab_roots:
        if not (state.ab.repo / r).is_dir():
            raise pytest.UsageError(f"pytest-gpuperf: gpuperf_ab_pythonpath / --gpuperf-ab-pythonpath: {r!r} is not "
                                    f"a folder under the repository's top {state.ab.repo}")


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """``--gpuperf-ab``: run the whole A/B measurement before the tests (and before pytest-xdist
    starts its workers); the tests then pick up their finished results."""
    state: GpuPerfState | None = session.config.stash.get(STATE_KEY, None)
    if state is None or state.worker_id is not None or state.ab_worker is not None:
        return
    if state.replicated:
        from pytest_gpuperf.plugin.replicates import ReplicateError

        try:
            _run_replicates(session.config, state)
        except ReplicateError as exc:
            pytest.exit(f"pytest-gpuperf: {exc}", returncode=pytest.ExitCode.INTERNAL_ERROR)
        return
    if state.ab is None:
        return
    from pytest_gpuperf.ab.run import ABError

    try:
        _run_ab(session.config, state)
    except ABError as exc:
        pytest.exit(f"pytest-gpuperf: {exc}", returncode=pytest.ExitCode.USAGE_ERROR)


def _say(config: pytest.Config) -> Any:
    tr = config.pluginmanager.getplugin("terminalreporter")
    return (lambda line: tr.write_line(line)) if tr is not None else (lambda line: None)


def _run_replicates(config: pytest.Config, state: GpuPerfState) -> None:
    """Measure every selected benchmark in ``state.processes`` worker processes, decide each against
    its baseline and keep the finished results for the tests (see :mod:`pytest_gpuperf.plugin.replicates`)."""
    import tempfile

    from pytest_gpuperf.ab.results import options_from_entry
    from pytest_gpuperf.ab.run import worker_args
    from pytest_gpuperf.plugin.replicates import missing_message, run_workers

    say = _say(config)
    args = worker_args(config.invocation_params.args)
    if config.pluginmanager.hasplugin("xdist"):
        args += ["-n", "0"]
    from pytest_gpuperf.core.files import ensure_output_dir

    logs = state.rootpath / ".gpuperf" / "replicates"
    try:
        ensure_output_dir(logs)
    except OSError:
        logs = Path(tempfile.mkdtemp(prefix="gpuperf-replicates-"))
    say(f"gpuperf: measuring in {state.processes} worker processes, one after another (--gpuperf-processes)")
    runs = run_workers(args, Path(config.invocation_params.dir), state.processes, logs, progress=say)
    finished: dict[str, Any] = {}
    commits: dict[str, tuple[str | None, bool | None]] = {}  # key -> its baseline's (commit, dirty)
    for key in dict.fromkeys(k for r in runs for k in r.entries):
        first = next(r.entries[key] for r in runs if key in r.entries)
        mine = runs[:_worker_count(options_from_entry(first), len(runs))]  # marker processes=N: the first N
        problem = missing_message(key, mine)
        if problem is not None:
            finished[key] = problem
            continue
        finished[key] = _decide_replicated(state, key, [r.entries[key] for r in mine], commits)
    for r in runs:
        if r.error:
            state.warnings.append(f"{r.error}; its output: {r.log}")
    if state.ab_confirm and not state.updating:
        _confirm_by_ab(config, state, finished, commits)
    state.ab_results = finished
    if state.xdist_dir is not None:
        from pytest_gpuperf.ab.results import dump_results

        dump_results(state.xdist_dir / "ab-results.json", finished)


def _confirm_by_ab(config: pytest.Config, state: GpuPerfState, finished: dict[str, Any],
                   commits: dict[str, tuple[str | None, bool | None]]) -> None:
    """Re-measure every stored-baseline regression in ``finished`` by A/B against the commit its
    baseline was recorded at, on this machine (a worktree of that commit is side A, the working tree
    side B; :mod:`pytest_gpuperf.ab.run`), and make the A/B verdict the final one (Chromium Pinpoint
    confirms a dashboard alert the same way). A baseline recorded from uncommitted changes, a commit
    that is not in this clone, or a side A that cannot run keeps the stored verdict, with a note."""
    import dataclasses

    from pytest_gpuperf.ab.run import ABError, resolve_revision
    from pytest_gpuperf.plugin.replicates import with_ab_confirmation

    suspects = [k for k, r in finished.items()
                if not isinstance(r, str) and r.comparison is not None and r.comparison.verdict.value == "regressed"]
    by_commit: dict[str, list[str]] = {}
    for key in suspects:
        commit, dirty = commits.get(key, (None, None))
        if commit is None or dirty:
            why = ("the baseline was recorded from uncommitted changes" if dirty else
                   "the baseline records no git commit")
            finished[key] = with_ab_confirmation(finished[key], None, "its commit", why)
            continue
        by_commit.setdefault(commit, []).append(key)
    say = _say(config)
    for commit, keys in by_commit.items():
        label = commit[:7]
        try:
            rev = dataclasses.replace(resolve_revision(Path(config.invocation_params.dir), commit),
                                      ref="the baselines' commit")
            label = rev.label
            say(f"gpuperf: {len(keys)} regression(s): confirming by A/B against {label} on this machine")
            results, _ = _measure_ab(config, state, rev, only=set(keys))
        except ABError as exc:
            why = str(exc)
            if "no such commit" in why:
                why = (f"the baselines' commit {commit[:7]} is not in this repository (a shallow clone? fetch the "
                       f"history, e.g. actions/checkout with fetch-depth: 0)")
            for key in keys:
                finished[key] = with_ab_confirmation(finished[key], None, label, why)
            continue
        for key in keys:
            finished[key] = with_ab_confirmation(finished[key], results.get(key), label)


def _decide_replicated(state: GpuPerfState, key: str, entries: list[dict[str, Any]],
                       commits: dict[str, tuple[str | None, bool | None]]) -> Any:
    """The finished result of benchmark ``key`` (``module::id``) from its workers' entries, decided
    against its stored baseline; a string when the baseline file is unusable. ``commits`` gets the
    baseline's ``(git commit, dirty)``."""
    from pytest_gpuperf.ab.results import options_from_entry
    from pytest_gpuperf.storage.baseline import BaselineError, baseline_path, check_module
    from pytest_gpuperf.measure.environment import device_key
    from pytest_gpuperf.plugin.replicates import decide

    module, _, bid = key.partition("::")
    options = options_from_entry(entries[0])  # worker 0's: the test's own options, with max_time split over the workers
    baseline = path = None
    env = entries[0].get("environment") or {}
    if env.get("device_type"):
        path = baseline_path(state.baseline_dir, device_key(env), module)
        try:
            base_file = state.baseline(path)
            check_module(base_file, module)
        except BaselineError as exc:
            return str(exc)
        baseline = base_file.get(bid) if base_file is not None else None
    if baseline is not None:
        commits[key] = (baseline.git_commit, baseline.dirty)
    return decide(key, entries, baseline, options, baseline_file=state.relpath(path) if path else None,
                  can_fail=not state.updating)


def _run_ab(config: pytest.Config, state: GpuPerfState) -> None:
    rev = state.ab
    _say(config)(f"gpuperf: A/B vs {rev.label}: preparing the worktree of {rev.ref}")
    state.ab_results, state.ab_removed = _measure_ab(config, state, rev)
    if state.xdist_dir is not None:
        from pytest_gpuperf.ab.results import dump_results

        dump_results(state.xdist_dir / "ab-results.json", state.ab_results)


def _measure_ab(config: pytest.Config, state: GpuPerfState, rev: Any,
                only: set[str] | None = None) -> tuple[dict[str, Any], list[str]]:
    """Measure the working tree (B) against a worktree of ``rev`` (A) in ``state.ab_processes`` pairs
    of worker processes (``only``: just these benchmarks), then the sequential step: a benchmark that
    says regressed, or whose CI straddles 1+T, is measured by ``confirm`` more pairs and decided again
    on all pairs together. Returns ``(results by full id, ids removed since REF)``; notes go to the
    session's warnings. Raises :class:`~pytest_gpuperf.ab.run.ABError`."""
    from pytest_gpuperf.ab.run import Coordinator, ab_folder, prepare_worktree, side_specs, worker_args
    from pytest_gpuperf.ab.results import ab_results, needs_more_pairs

    worktree = prepare_worktree(rev)
    logs = ab_folder(rev.repo) / "logs"
    logs.mkdir(exist_ok=True)
    specs = side_specs(rev, worktree, Path(config.invocation_params.dir), state.ab_roots)
    args = worker_args(config.invocation_params.args)
    if config.pluginmanager.hasplugin("xdist"):
        args += ["-n", "0"]  # an `addopts = -n N` must not spread a worker's benchmarks over subprocesses
    coordinator = Coordinator(specs, args, state.ab_processes, logs,
                              progress=_say(config) if state.verbose > 0 else (lambda line: None))
    coordinator.only = only
    coordinator.run()
    results, removed, notes = ab_results(coordinator, rev.label)
    suspects = {k: n for k, r in results.items()
                if needs_more_pairs(r.comparison) and (n := int(r.options.get("confirm", opts.DEFAULTS.confirm) or 0)) > 0}
    if suspects:
        coordinator.confirm(set(suspects), max(suspects.values()))
        results, removed, notes = ab_results(coordinator, rev.label)
    state.warnings.extend(coordinator.notes + notes)
    return results, removed


def pytest_collection_finish(session: pytest.Session) -> None:
    """An A/B worker tells the coordinator which tests it collected."""
    state: GpuPerfState | None = session.config.stash.get(STATE_KEY, None)
    if state is not None and state.ab_worker is not None and not state.ab_worker.said_hello:
        state.ab_worker.hello([item.nodeid for item in session.items])


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Never collect the A/B worktrees (``.gpuperf/`` under the rootdir)."""
    if collection_path.name == ".gpuperf" and collection_path.parent == config.rootpath:
        return True
    return None


def _check_device_option(config: pytest.Config, session_options: opts.BenchOptions) -> None:
    """A device given on the command line or in the ini that does not exist here is a usage error
    (a marker's ``device="cuda"`` only skips its test). Imports torch only when such a device is given."""
    source = ("--gpuperf-device" if config.getoption("--gpuperf-device")
              else "ini gpuperf_device" if "device" in _ini_values(config) else None)
    if source is None or session_options.device in (None, "cpu"):
        return
    from pytest_gpuperf.measure.timing import DeviceUnavailable, resolve_device

    try:
        resolve_device(session_options.device)
    except DeviceUnavailable as exc:
        raise pytest.UsageError(
            f"pytest-gpuperf: {source} {session_options.device}: {exc}; use --gpuperf-device cpu or auto"
        ) from None


def _check_output_path(option: str, path: Path) -> None:
    """Raise a usage error naming ``option`` and ``path`` when a report file cannot be written there."""
    def fail(why: str) -> None:
        raise pytest.UsageError(f"pytest-gpuperf: {option} {path}: {why}")

    if path.is_dir():
        fail("is a folder; give a file path")
    folder = path.parent
    while not folder.exists() and folder.parent != folder:  # the folders to create start at the nearest existing one
        folder = folder.parent
    if not folder.is_dir():
        fail(f"{folder} is not a folder (a regular file is in the way)")
    if not os.access(folder, os.W_OK | os.X_OK):
        fail(f"folder {folder} is not writable")


def pytest_unconfigure(config: pytest.Config) -> None:
    state: GpuPerfState | None = config.stash.get(STATE_KEY, None)
    if state is not None and state.owns_xdist_dir and state.xdist_dir is not None:
        import shutil

        shutil.rmtree(state.xdist_dir, ignore_errors=True)
        if os.environ.get("GPUPERF_XDIST_DIR") == str(state.xdist_dir):
            del os.environ["GPUPERF_XDIST_DIR"]


def _marker_options(item: pytest.Item) -> dict[str, Any]:
    """Merge every gpu_bench marker on the item; the closest (function) marker wins."""
    merged: dict[str, Any] = {}
    for mark in reversed(list(item.iter_markers("gpu_bench"))):
        if mark.args:
            raise opts.OptionError(
                f"{item.nodeid}: gpu_bench marker takes keyword options only, got positional {mark.args!r}"
            )
        merged.update(mark.kwargs)
    return merged


OPTIONS_KEY = pytest.StashKey[opts.BenchOptions]()


def _options_for(item: pytest.Item, state: GpuPerfState) -> opts.BenchOptions:
    """The item's options: its markers over the session's; merged once per item (raises OptionError)."""
    if OPTIONS_KEY not in item.stash:
        marker = {**benchmark_compat.marker_options(item, state.options), **_marker_options(item)}
        options = opts.with_marker(state.options, marker, where=f"{item.nodeid}: gpu_bench marker")
        if state.replicate_slot is not None:  # a replicate worker measures its share of max_time
            from pytest_gpuperf.plugin.replicates import worker_options

            options = worker_options(options, state.replicate_slot)
        item.stash[OPTIONS_KEY] = options
    return item.stash[OPTIONS_KEY]


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    state = config.stash[STATE_KEY]
    benchmark_compat.select(config, items)  # --gpuperf-only/--gpuperf-skip (and --benchmark-only/-skip)
    for item in items:
        if item.get_closest_marker("gpu_bench") is None and not benchmark_compat.owns_marker(item):
            continue
        try:
            _options_for(item, state)
        except opts.OptionError as exc:
            raise pytest.UsageError(f"pytest-gpuperf: {exc}") from None


# ----------------------------------------------------------------------------- fixture


def _split_nodeid(nodeid: str) -> tuple[str, str]:
    module, _, rest = nodeid.partition("::")
    return module, rest or module


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
    yield make_gpu_bench(request, _gpuperf_measurer)


def make_gpu_bench(request: pytest.FixtureRequest, _gpuperf_measurer: Any, device: Any = None) -> Any:
    """The test's :class:`~pytest_gpuperf.plugin.bench.GpuBench` (also behind the ``benchmark`` fixture).

    ``device``: a ``torch.device`` to measure on (the ``benchmark`` fixture passes the device of
    the tensors it was given); None resolves the test's ``device`` option. Skips or fails the test
    as the ``gpu_bench`` fixture does.
    """
    from pytest_gpuperf.plugin.bench import BenchContext, GpuBench
    from pytest_gpuperf.measure.timing import DeviceUnavailable, resolve_device, use_device

    state: GpuPerfState = request.config.stash[STATE_KEY]
    item = request.node
    try:
        options = _options_for(item, state)
    except opts.OptionError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        device = resolve_device(options.device, default_index=state.worker_index) if device is None else device
    except DeviceUnavailable as exc:
        pytest.skip(f"pytest-gpuperf: {exc}")
    use_device(device)  # "cuda" in the test's own code now means the GPU measured (xdist worker k: GPU k)
    module, test_id = _split_nodeid(item.nodeid)
    path = env = key = None
    baseline = None
    ab_results = _ab_results(state)
    measuring = state.measuring
    if state.replicate_slot is not None and state.replicate_slot[0] >= _worker_count(options, state.replicate_slot[1]):
        measuring = False  # marker processes=N: this worker only runs the test (one call), the first N measure it
    if measuring and (state.ab_worker is not None or state.ab is not None or state.replicate_slot is not None):
        from pytest_gpuperf.measure.environment import device_key, fingerprint

        env = fingerprint(device)  # A/B or a replicate worker: no stored baseline, no reference workloads
        key = device_key(env)
    elif state.measuring:
        from pytest_gpuperf.measure.environment import device_key, fingerprint

        env = fingerprint(device) if state.replicated else state.environment(device)
        key = device_key(env)
        from pytest_gpuperf.storage.baseline import BaselineError, baseline_path, check_module

        path = baseline_path(state.baseline_dir, key, module)
        try:
            baseline = state.baseline(path)
            check_module(baseline, module)  # a file of another module is neither compared nor written
        except BaselineError as exc:
            pytest.fail(str(exc), pytrace=False)

    def on_result(result: Any) -> None:
        state.recorded.append(
            Recorded(item.nodeid, module, result, str(path) if path else None, key, env)
        )
        if state.replicate_slot is not None and not result.smoke:  # hand it to the coordinator at once
            from pytest_gpuperf.plugin.replicates import report_result

            report_result(f"{module}::{result.benchmark_id}", result, env or {})
        _record_properties(item, result, several=len(bench.results) > 1 or result.name != test_id.split("::")[-1])
        state.warnings.extend(result.notes)
        if state.updating and not result.smoke:
            from pytest_gpuperf.reporting.report import noisy_baseline_warning

            noisy = noisy_baseline_warning(f"{module}::{result.benchmark_id}", result)
            if noisy:
                state.warnings.append(noisy)
        if baseline is not None and env is not None:
            entry = baseline.get(result.benchmark_id)
            c = result.comparison
            if (c is not None and c.verdict.value == "inconclusive" and not state.strict and not state.updating
                    and not c.machine_differs):  # those get one summary line for all
                state.warnings.append(f"{module}::{result.benchmark_id}: inconclusive (passes; fails with --gpuperf-strict): {c.note}")
            if entry is not None:
                from pytest_gpuperf.verdict.machine import drift_ratios, drift_warning

                drift = drift_warning(drift_ratios(env.get("reference"), entry.reference))
                if drift:  # one line per cause: the same drift on one device reads the same for every file and worker
                    state.warnings.append(f"{device}: {drift}" + ("" if state.normalize else " (--gpuperf-normalize corrects for it)"))
                from pytest_gpuperf.measure.environment import differences

                diffs = differences(entry.environment, env)
                if diffs:
                    state.warnings.append(
                        f"{module}::{result.benchmark_id}: environment differs from the baseline's: "
                        + "; ".join(diffs)
                    )

    bench = GpuBench(BenchContext(
        test_id=test_id,
        module=module,
        options=options,
        device=device,
        measuring=measuring,
        baseline=baseline,
        baseline_file=state.relpath(path) if path else None,
        snapshot_dir=str(state.snapshot_dir) if state.snapshot_dir else None,
        classify=state.classify,
        thresholds=state.thresholds,
        artifacts_dir=None if state.updating else str(state.artifacts_dir),  # traces only for failed comparisons
        confirm_regressions=not state.updating,
        reference=(env or {}).get("reference"),
        normalize=state.normalize,
        host_load=state.host_load,
        device_lock=lambda: state.device_lock(device),
        progress=_progress_writer(request.config, item.nodeid) if state.verbose > 0 and state.measuring else None,
        measurer=_gpuperf_measurer,
        max_memory_text=_max_memory_text(item),
        group_of=benchmark_compat.group_of(item),
        ab_worker=state.ab_worker,
        ab_results=ab_results,
        nodeid=item.nodeid,
        fail=lambda message: pytest.fail(message, pytrace=False),
    ), on_result)
    item.stash[BENCH_KEY] = bench
    return bench


def _worker_count(options: opts.BenchOptions, session_processes: int) -> int:
    """How many worker processes measure a benchmark: its ``processes`` option, at most the session's."""
    return min(options.processes or session_processes, session_processes)


def _ab_results(state: GpuPerfState) -> dict[str, Any] | None:
    """The finished results of the A/B or replicate workers (a pytest-xdist worker reads the
    controller's file once); None when this session measures in its own process."""
    if (state.ab is None or state.ab_worker is not None) and not state.replicated:
        return None
    if state.ab_results is None and state.xdist_dir is not None:
        from pytest_gpuperf.ab.results import load_results

        state.ab_results = load_results(state.xdist_dir / "ab-results.json")
    return state.ab_results if state.ab_results is not None else {}


def _max_memory_text(item: pytest.Item) -> str | None:
    """The ``max_memory`` option as its author wrote it (marker, else ini), to report it in that unit."""
    marker = _marker_options(item)
    raw = marker["max_memory"] if "max_memory" in marker else _ini_values(item.config).get("max_memory")
    return raw if isinstance(raw, str) else None


def _record_properties(item: pytest.Item, result: Any, several: bool) -> None:
    """JUnit XML properties of a benchmark (``record_property`` style), for CI dashboards."""
    c, b = result.comparison, result.bottleneck
    props = {
        "median_ms": result.median_ms,
        "baseline_median_ms": c.baseline_median_ms if c is not None else None,
        "ratio": c.ratio if c is not None else None,
        "verdict": (c.verdict.value if c is not None else ("smoke" if result.smoke else None)),
        "peak_memory_bytes": result.peak_memory_bytes,
        "bottleneck": b.kind if b is not None else None,
    }
    k, cc, rates = result.counts, result.count_comparison, result.rates() or {}
    if k is not None:
        props.update(ops=k.ops, kernels=k.kernels, syncs=k.syncs, copies=k.copies, flops=k.flops,
                     traffic_bytes=k.traffic_bytes, recompiles=k.recompiles)
    if cc is not None:
        props["count_verdict"] = cc.verdict.value
    for key in ("flops_per_s", "bytes_per_s", "items_per_s"):
        props[key] = rates.get(key)
    prefix = f"{result.name}." if several else ""
    for name, value in props.items():
        if value is not None:
            item.user_properties.append((f"{prefix}{name}", value))


def _progress_writer(config: pytest.Config, nodeid: str) -> Any:
    """In verbose mode: a callback printing rounds, elapsed time and median of a long benchmark."""
    from pytest_gpuperf.core.units import format_ms

    def write(rounds: int, elapsed_s: float, median_ms: float) -> None:
        tr = config.pluginmanager.getplugin("terminalreporter")
        capman = config.pluginmanager.getplugin("capturemanager")
        if tr is None:
            return
        line = f"  gpuperf {nodeid}: {rounds} rounds, {elapsed_s:.1f} s, median {format_ms(median_ms)}"
        if capman is not None:
            with capman.global_and_fixture_disabled():
                tr.write_line(line)
        else:
            tr.write_line(line)

    return write


@pytest.fixture
def gpuperf_simulated_cuda(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Install a simulated CUDA device: ``sim = gpuperf_simulated_cuda(devices=2)``.

    Returns the installed :class:`pytest_gpuperf.testing.SimulatedCuda` (this process's
    ``torch.cuda``, NVML and profiler events), and sets ``GPUPERF_SIMULATED_CUDA`` for the test, so
    ``pytester`` sessions it runs - in process or in subprocesses, their worker processes and
    pytest-xdist workers included - measure on the same kind of simulated device. Undone after the
    test. Raises ``ValueError`` for ``devices`` outside 1-64.
    """
    from pytest_gpuperf.testing import ENV, SimulatedCuda

    def install(devices: int = 1) -> Any:
        if not 1 <= devices <= 64:
            raise ValueError(f"devices={devices!r}: expected 1 to 64 simulated CUDA devices")
        monkeypatch.setenv(ENV, str(devices))
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

    state: GpuPerfState = request.config.stash[STATE_KEY]
    item = request.node
    try:
        default_device = _options_for(item, state).device
    except opts.OptionError as exc:
        pytest.fail(str(exc), pytrace=False)
    blocks = 0

    def factory(budget: int | str, *, max_leak: int | str | None = None, device: Any = None) -> MemoryBudget:
        nonlocal blocks
        try:
            # the fixture's default is the GPU gpu_bench measures (xdist worker k: GPU k), and current
            dev = resolve_device(str(device) if device is not None else default_device,
                                 default_index=state.worker_index)
        except DeviceUnavailable as exc:
            pytest.skip(f"pytest-gpuperf: {exc}")
        if device is None:
            use_device(dev)
        snapshot = None
        if state.snapshot_dir is not None and dev.type == "cuda":
            from pytest_gpuperf.reporting.plots import safe_filename

            blocks += 1
            safe = safe_filename(item.nodeid)  # bounded and distinct, as trace names
            snapshot = SnapshotRecorder(dev, state.snapshot_dir / f"{safe}.block{blocks}.pickle")
        return MemoryBudget(budget, device=dev, max_leak=max_leak, snapshot=snapshot)

    return factory


# ----------------------------------------------------------------------------- verdicts and baselines


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    details = getattr(call.excinfo.value, "details", None) if call.excinfo is not None else None
    if details and isinstance(details, str):
        report.sections.append(("gpuperf memory", details))
    bench = item.stash.get(BENCH_KEY, None)
    if report.when == "call" and report.passed and (bench is None or not bench.results):
        _warn_if_measured_nothing(item)
    if bench is None or report.when != "call" or not report.passed or not bench.results:
        return
    state: GpuPerfState = item.config.stash[STATE_KEY]
    messages = []
    for r in bench.results:
        messages.extend(r.failures(strict=state.strict, updating=state.updating, label=f"{bench.module}::{r.benchmark_id}"))
        if r.top_ops:
            report.sections.append((f"gpuperf top ops: {r.benchmark_id}", r.top_ops))
    if state.updating:
        # An update never records a benchmark that fails its own hard checks (max_memory, expect_bottleneck).
        problem = ("baseline not updated: " + "\n".join(messages)) if messages else _write_baselines(state, item)
        if problem:
            report.outcome = "failed"
            report.longrepr = problem
        return
    if messages:
        report.outcome = "failed"
        report.longrepr = "\n".join(messages)


def _warn_if_measured_nothing(item: pytest.Item) -> None:
    """A test marked ``gpu_bench`` that passed without measuring anything gets a summary warning."""
    state: GpuPerfState | None = item.config.stash.get(STATE_KEY, None)
    if state is not None and state.measuring and item.get_closest_marker("gpu_bench") is not None:
        state.warnings.append(
            f"{item.nodeid} is marked gpu_bench but measured nothing: call gpu_bench(fn, ...) in the test"
        )


def _write_baselines(state: GpuPerfState, item: pytest.Item) -> str | None:
    """Write the item's measurements into its baseline file; returns an error message or None."""
    from pytest_gpuperf.storage.baseline import BaselineError, update
    from pytest_gpuperf.measure.environment import utc_now
    from pytest_gpuperf.reporting.report import result_entry

    mine = [r for r in state.recorded if r.nodeid == item.nodeid and not r.result.smoke]
    if not mine:
        return None
    stamp, (commit, dirty) = utc_now(), state.git_state()
    by_path: dict[str, list[Recorded]] = {}
    for rec in mine:
        by_path.setdefault(rec.baseline_path or "", []).append(rec)
    for path, recs in by_path.items():
        entries = {
            rec.result.benchmark_id: dict(result_entry(
                rec.result, environment=rec.environment or {}, git_commit=commit, timestamp_utc=stamp
            ), **({} if dirty is None else {"dirty": dirty}))
            for rec in recs
        }
        try:
            update(path, entries, device_key=recs[0].device_key or "", module=recs[0].module)
        except (BaselineError, OSError) as exc:
            return f"pytest-gpuperf: could not write baseline: {exc}"
        for rec in recs:
            rec.updated = True
        state._baselines.pop(path, None)
    return None


# ----------------------------------------------------------------------------- reports


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    state: GpuPerfState | None = config.stash.get(STATE_KEY, None)
    if state is None or state.worker_id is not None:
        return
    tr = terminalreporter
    if not state.recorded:  # nothing measured: only what went wrong
        for w in dict.fromkeys(state.warnings):
            tr.write_line(f"warning: {w}", yellow=True)
        for e in state.errors.values():
            tr.write_line(f"error: {e}", red=True)
        return
    from pytest_gpuperf.reporting.report import LEGEND, summary_lines

    if not state.measuring:
        tr.write_line(
            f"gpuperf: {len(state.recorded)} benchmark(s) ran once (smoke mode); "
            f"run with --gpuperf to measure and compare them"
        )
        return
    mode = "update baselines" if state.updating else "compare"
    if state.replicated:
        mode += f" ({state.processes} worker processes per benchmark)"
    else:
        mode += " (one process: run-to-run spread not measured, --gpuperf-processes 1)"
    if state.ab is not None:
        label = state.ab.label if hasattr(state.ab, "label") else str(state.ab)
        mode = f"A/B vs {label} ({state.ab_processes} pair(s) of worker processes, interleaved ABBA blocks)"
    tr.write_sep("=", f"gpuperf: {len(state.recorded)} benchmark(s), mode: {mode}")
    items = [(f"{rec.module}::{rec.result.benchmark_id}", rec.result, rec.updated) for rec in state.recorded]
    for line in summary_lines(items, **benchmark_compat.table_options(config)):
        tr.write_line(line)
    if any(rec.result.comparison is not None and rec.result.comparison.ratio is not None for rec in state.recorded):
        from pytest_gpuperf.reporting.report import AB_LEGEND, REPLICATES_LEGEND

        tr.write_line(AB_LEGEND if state.ab is not None else REPLICATES_LEGEND if state.replicated else LEGEND)
    if state.ab is None:
        tr.write_line(f"baselines: {state.relpath(state.baseline_dir)}")
    else:
        from pytest_gpuperf.verdict.compare import ab_summary

        for rec in state.recorded:
            c = rec.result.comparison
            line = ab_summary(c) if c is not None else None
            if line:
                tr.write_line(f"{rec.module}::{rec.result.benchmark_id}: {line} ({c.verdict.value})")
        for key in state.ab_removed:
            tr.write_line(f"{key}: removed since {state.ab.label} (measured on side A only; not a failure)")
    keys = sorted({r.device_key for r in state.recorded if r.device_key})
    if keys:
        tr.write_line(f"device key: {', '.join(keys)}")
    notes = [
        f"  {rec.module}::{rec.result.benchmark_id}: {rec.result.comparison.note}"
        for rec in state.recorded
        if rec.result.comparison is not None and rec.result.comparison.note
    ]
    if notes:
        tr.write_line("* notes:")
        for n in notes:
            tr.write_line(n)
    for rec in state.recorded:
        b = rec.result.bottleneck
        if b is not None and b.evidence.phases:
            shares = ", ".join(f"{k} {v * 100:.0f}%" for k, v in b.evidence.phases.items())
            tr.write_line(f"phases of {rec.module}::{rec.result.benchmark_id} (share of device time): {shares}")
    blind = [f"{rec.module}::{rec.result.benchmark_id} (+{(c.resolution if c.resolution is not None else c.floor) * 100:.0f}%)"
             for rec in state.recorded if (c := rec.result.comparison) is not None and c.cannot_fail]
    if blind and not state.updating:
        tr.write_line(f"warning: {len(blind)} benchmark(s) cannot fail a slowdown below the figure shown, their baseline's "
                      f"spread is that wide: {', '.join(blind)}; re-record them on a quiet machine (they fail with "
                      f"--gpuperf-strict)", yellow=True)
    from pytest_gpuperf.reporting.report import machine_differs_line

    machine = machine_differs_line(rec.result for rec in state.recorded)
    if machine:
        tr.write_line(machine, yellow=True)
    missing = sum(
        1 for rec in state.recorded
        if rec.result.comparison is not None and rec.result.comparison.verdict.value == "no-baseline" and not rec.updated
    )
    if missing and not state.updating:
        tr.write_line(
            f"{missing} benchmark(s) have no baseline: record them with `pytest --gpuperf-update-baselines`"
        )
    for n in dict.fromkeys(state.notes):
        tr.write_line(f"telemetry: {n}")
    for w in dict.fromkeys(state.warnings):
        tr.write_line(f"warning: {w}", yellow=True)
    if state.workers_seen:
        tr.write_line(
            f"pytest-xdist: results of {state.workers_seen} worker(s) merged; measurements on the same "
            f"device were serialized with a file lock (never two benchmarks on one device at once)"
        )
    for label, p in (("results", state.json_path), ("Markdown summary", state.markdown_path), ("plots", state.plot_dir)):
        if p is not None and str(p) not in state.errors:
            tr.write_line(f"{label} written to {p}")
    for e in state.errors.values():
        tr.write_line(f"error: {e}", red=True)


def _worker_payload(state: GpuPerfState) -> dict[str, Any]:
    from pytest_gpuperf.measure.environment import utc_now
    from pytest_gpuperf.reporting.report import result_entry

    stamp = utc_now()
    return {
        "records": [
            {
                "nodeid": rec.nodeid, "module": rec.module, "baseline_path": rec.baseline_path,
                "device_key": rec.device_key, "environment": rec.environment, "updated": rec.updated,
                "entry": dict(result_entry(rec.result, environment=rec.environment or {}, git_commit=None,
                                           timestamp_utc=stamp, with_comparison=True), smoke=rec.result.smoke),
            }
            for rec in state.recorded
        ],
        "warnings": state.warnings,
        "notes": state.notes,
    }


def _merge_workers(state: GpuPerfState) -> None:
    """Controller: add every pytest-xdist worker's measurements to this session's."""
    if state.xdist_dir is None:
        return
    import json

    from pytest_gpuperf.reporting.report import result_from_entry
    for path in sorted(state.xdist_dir.glob("worker-*.json")):
        state.workers_seen += 1
        try:
            payload = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            state.warnings.append(f"could not read the results of pytest-xdist worker file {path}: {exc}")
            continue
        for r in payload.get("records", []):
            state.recorded.append(Recorded(
                r["nodeid"], r["module"], result_from_entry(r["entry"]), r.get("baseline_path"),
                r.get("device_key"), r.get("environment"), bool(r.get("updated")),
            ))
        state.warnings.extend(payload.get("warnings", []))
        state.notes.extend(payload.get("notes", []))


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    state: GpuPerfState | None = session.config.stash.get(STATE_KEY, None)
    if state is None:
        return
    if state.ab_worker is not None:
        if not state.ab_worker.said_hello:
            state.ab_worker.hello([])
        state.ab_worker.bye()
        return
    if state.worker_id is not None:
        # A pytest-xdist worker hands its measurements to the controller through the run's folder.
        if state.xdist_dir is not None and (state.recorded or state.warnings):
            from pytest_gpuperf.core.files import write_atomic
            from pytest_gpuperf.storage.baseline import dumps

            write_atomic(state.xdist_dir / f"worker-{state.worker_id}.json", dumps(_worker_payload(state)))
        return
    _merge_workers(state)
    state.recorded.sort(key=lambda rec: (rec.nodeid, rec.result.benchmark_id))
    if state.json_path is not None:
        _write_report(state, "--gpuperf-json", state.json_path, lambda: _write_json(state))
    if state.markdown_path is not None:
        from pytest_gpuperf.core.files import write_atomic
        from pytest_gpuperf.reporting.report import markdown

        items = [(f"{rec.module}::{rec.result.benchmark_id}", rec.result) for rec in state.recorded]
        devices = sorted({rec.result.device for rec in state.recorded})
        _write_report(state, "--gpuperf-markdown", state.markdown_path, lambda: write_atomic(
            state.markdown_path, markdown(items, devices=devices, strict=state.strict,
                                          warnings=list(dict.fromkeys(state.warnings)),
                                          mode="ab" if state.ab is not None else
                                          "replicates" if state.replicated else "stored")))
    if state.plot_dir is not None:
        _write_plots(state)


def _write_report(state: GpuPerfState, option: str, path: Path, write: Any) -> None:
    """Run ``write()``; an OSError becomes one error line of the summary (no traceback after the run)."""
    try:
        write()
    except OSError as exc:
        state.errors[str(path)] = f"could not write {option} {path}: {exc.strerror or exc}"


def _write_plots(state: GpuPerfState) -> None:
    from pytest_gpuperf.storage.baseline import BaselineError, load
    from pytest_gpuperf.reporting.plots import plot_benchmark, plot_forest, safe_filename
    from pytest_gpuperf.reporting.report import comparison_dict

    rows = []
    for rec in state.recorded:
        c = rec.result.comparison
        if c is None or c.ratio is None or not rec.baseline_path:
            continue
        name = f"{rec.module}::{rec.result.benchmark_id}"
        try:
            base = load(rec.baseline_path)
        except BaselineError:
            continue
        entry = base.get(rec.result.benchmark_id) if base else None
        if entry is None:
            continue
        d = comparison_dict(c)
        try:
            plot_benchmark(name, rec.result.samples_ms, entry.samples_ms, d,
                           state.plot_dir / f"{safe_filename(name)}.png")
        except (ValueError, OSError) as exc:  # a plot never takes the session down
            state.warnings.append(f"could not plot {name}: {exc}")
        rows.append(dict(d, name=name))
    if rows:
        try:
            plot_forest(rows, state.plot_dir / "forest.png", threshold=state.options.threshold)
        except (ValueError, OSError) as exc:
            state.warnings.append(f"could not write the forest plot: {exc}")


def _write_json(state: GpuPerfState) -> None:
    from pytest_gpuperf.core.files import write_atomic
    from pytest_gpuperf.storage.baseline import SCHEMA_VERSION, dumps
    from pytest_gpuperf.measure.environment import utc_now
    from pytest_gpuperf.reporting.report import result_entry

    stamp, (commit, _) = utc_now(), state.git_state()
    environments = {rec.device_key: rec.environment for rec in state.recorded if rec.device_key}
    data = {
        "schema_version": SCHEMA_VERSION,
        "kind": "report",
        "created_utc": stamp,
        "git_commit": commit,
        "environments": environments,
        "benchmarks": {
            f"{rec.module}::{rec.result.benchmark_id}": dict(
                result_entry(rec.result, environment=rec.environment or {}, git_commit=commit,
                             timestamp_utc=stamp, with_comparison=True),
                module=rec.module,
                baseline_file=state.relpath(Path(rec.baseline_path)) if rec.baseline_path else None,
                smoke=rec.result.smoke,
            )
            for rec in state.recorded
        },
        "warnings": list(dict.fromkeys(state.warnings)),
    }
    write_atomic(state.json_path, dumps(data))
