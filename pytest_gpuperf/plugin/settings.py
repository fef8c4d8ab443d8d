"""The session's settings, resolved once at configure time: :class:`SessionSettings` (frozen).

:func:`resolve_settings` reads the command line, the ini file and the environment once, checks
them (a bad value is a ``pytest.UsageError`` naming the option and what it accepts) and returns
the settings every part of the session reads: the plugin's session object
(:class:`~pytest_gpuperf.plugin.session.GpuPerfSession`), the fixtures and the pytest-benchmark
adapter. The benchmark options' own precedence (marker > command line > ini > default) is
:mod:`pytest_gpuperf.core.options`; their session defaults are :attr:`SessionSettings.options`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from pytest_gpuperf.core import options as opts
from pytest_gpuperf.plugin.replicates import WORKER_TIMEOUT_S

#: Values that turn a setting off (``GPUPERF_HOST_LOAD``, ini ``gpuperf_history_url``).
OFF_WORDS = ("0", "false", "no", "off")
#: Seconds after which a bisection starts no more steps (``--gpuperf-bisect-timeout``), by default.
BISECT_TIMEOUT_S = 1800.0
#: Verdicts that moved whose ops are profiled for the why in a run (``--gpuperf-why-max``), by
#: default: a suite slowed as a whole (146 of pydantic-core's 163 benchmarks at +20%) got 146
#: profiles in 5 process pairs, about 370 s of that run's 1118 s.
WHY_MAX = 10
#: The :class:`ProcessLimits` fields among the options :func:`_bisect` reads.
_LIMITS = ("max_processes", "more_time_s", "worker_timeout_s", "why_max", "settle_time_s")


@dataclass(frozen=True)
class ProcessLimits:
    """Limits on the worker processes a session starts (command line, else ini, else these defaults).

    ``max_processes``: worker processes a benchmark may get in all when its evidence is thin
    (``--gpuperf-max-processes``); ``more_time_s``: seconds they may take in all
    (``--gpuperf-more-processes-time``; None, the default: as long as the first P timed processes took,
    :class:`~pytest_gpuperf.verdict.escalation.TimeBudget`); ``worker_timeout_s``: seconds a replicate or extras worker
    process may run before it is stopped, its unfinished benchmarks then failing with its output
    (``--gpuperf-worker-timeout``); ``nproc``: each worker process is a torchrun launch of that many
    ranks on this node (``--gpuperf-nproc``, N >= 2; None: a plain pytest process); ``why_max``: the
    verdicts that moved whose ops the profiling processes of a run (an A/B, then the diff against
    stored op profiles) profile for the why, at most (``--gpuperf-why-max``; the largest first);
    ``settle_time_s``: seconds the A/B that settles inconclusive comparisons may take, about
    (``--gpuperf-settle-time``; None: no limit; :func:`~pytest_gpuperf.ab.run.measure_ab`);
    ``allocator``: glibc's allocator thresholds in every worker process the session starts (and,
    by ``mallopt``, in a process that times in itself), one of
    :data:`~pytest_gpuperf.core.allocator.MODES` (ini ``gpuperf_allocator``; ``"fixed"``, the
    default, or ``"inherit"``: :mod:`pytest_gpuperf.core.allocator`)."""

    max_processes: int = 10
    more_time_s: float | None = None
    worker_timeout_s: float = WORKER_TIMEOUT_S
    nproc: int | None = None
    why_max: int = WHY_MAX
    settle_time_s: float | None = None
    allocator: str = "fixed"


@dataclass(frozen=True)
class SessionSettings:
    """What the session was asked to do (frozen; :func:`resolve_settings` builds it).

    ``measuring``: ``--gpuperf`` (or an update, an A/B run, a worker process), else smoke mode;
    ``updating``: ``--gpuperf-update-baselines``; ``baseline_dir``: the baseline folder (absolute);
    ``json_path``/``markdown_path``/``plot_dir``/``snapshot_dir``/``artifacts_dir``: report and
    artifact locations (None: not written); ``classify``, ``strict``, ``normalize``,
    ``host_load``: the flags of those names; ``thresholds``: classification thresholds from the ini
    (a :class:`~pytest_gpuperf.verdict.bottleneck.Thresholds`, None: the built-in ones);
    ``options``: the benchmark options' session defaults (command line over ini over built-in);
    ``rootpath``/``invocation_dir``: pytest's rootdir and where it was invoked; ``verbose``: ``-v``
    count. Processes: ``worker_id`` (``"gw3"`` in a pytest-xdist worker), ``xdist_dir`` (the run's
    shared folder under pytest-xdist; ``owns_xdist_dir``: this process made it and removes it),
    ``processes`` (worker processes per benchmark), ``replicate`` (a replicate worker's
    :class:`~pytest_gpuperf.plugin.replicates.WorkerRole`, from the hidden ``--gpuperf-role``; its
    ``(k, P)`` as ``replicate_slot``), ``ab_confirm`` (confirm a stored regression by A/B), ``why`` (profile both sides of an
    A/B decision that moved: the per-op diff; how many: ``limits.why_max``). A/B: ``ab`` (the
    :class:`~pytest_gpuperf.ab.run.Revision` to compare with; in a pytest-xdist worker the REF
    string), ``ab_processes`` (pairs of worker processes), ``ab_roots`` (import roots),
    ``in_ab_worker`` (this process is an A/B worker that the coordinator drives). Bisection:
    ``bisect`` (``(GOOD, BAD)`` of ``--gpuperf-bisect``: the session bisects instead of testing),
    ``bisect_on_regression`` (bisect at most N confirmed regressions; 0: off), ``bisect_timeout_s``.
    ``limits``: how many worker processes a benchmark may get in all and for how long
    (:class:`ProcessLimits`);
    ``select_file`` (a worker: the node ids it runs, one per line; hidden ``--gpuperf-select``);
    ``op_profile`` (an extras process: profile the ops too, as one of that many processes that share the
    profile's cycles; 0: not told to; hidden ``--gpuperf-op-profile N``).
    ``ranks``: under ``torchrun`` (``WORLD_SIZE`` > 1), this process's
    :class:`~pytest_gpuperf.measure.distributed.Ranks`; then ``processes`` is 1 (a launch started by
    the user measures once; replicates are whole launches, ``nproc``), and pytest-xdist,
    ``--gpuperf-ab`` and ``--gpuperf-bisect`` are refused. None in every other session.
    ``nproc``: ``--gpuperf-nproc N`` (N >= 2) in the session the user started: each worker process
    is a whole torchrun launch of N ranks (:func:`~pytest_gpuperf.core.launch.launcher`);
    None otherwise (also inside those launches). :attr:`world_size` is N there, the launch's size
    under torchrun, else 1.
    """

    measuring: bool
    updating: bool
    baseline_dir: Path
    rootpath: Path
    options: opts.BenchOptions
    invocation_dir: Path = Path(".")
    json_path: Path | None = None
    markdown_path: Path | None = None
    plot_dir: Path | None = None
    snapshot_dir: Path | None = None
    artifacts_dir: Path = Path(".gpuperf/artifacts")
    classify: bool = False
    strict: bool = False
    normalize: bool = False
    host_load: bool = True
    thresholds: Any = None
    verbose: int = 0
    worker_id: str | None = None
    xdist_dir: Path | None = None
    processes: int = 1
    replicate: Any = None
    ab_confirm: bool = True
    why: bool = True
    ab: Any = None
    ab_processes: int = 2
    ab_roots: tuple[str, ...] = ()
    in_ab_worker: bool = False
    bisect: tuple[str, str] | None = None
    bisect_on_regression: int = 0
    bisect_timeout_s: float = BISECT_TIMEOUT_S
    bisect_processes: int = 1
    limits: ProcessLimits = field(default_factory=ProcessLimits)
    select_file: Path | None = None
    op_profile: int = 0
    ranks: Any = None

    @property
    def nproc(self) -> int | None:
        """``--gpuperf-nproc N`` in the session the user started (``limits.nproc``), else None."""
        return self.limits.nproc

    @property
    def world_size(self) -> int:
        """The ranks one measurement runs on: torchrun's ``WORLD_SIZE`` in a rank, ``--gpuperf-nproc``
        in the session that starts the launches, else 1 (baselines of world size N > 1 live in a
        device key's ``-wsN`` folder)."""
        if self.ranks is not None:
            return self.ranks.world_size
        return self.nproc or 1

    @property
    def replicate_slot(self) -> tuple[int, int] | None:
        """``(k, P)`` in a replicate worker (its :class:`~pytest_gpuperf.plugin.replicates.WorkerRole`), else None."""
        return None if self.replicate is None else self.replicate.slot

    @property
    def replicated(self) -> bool:
        """This session measures through replicate worker processes (``--gpuperf-processes`` >= 2, or
        any number of torchrun launches with ``--gpuperf-nproc``)."""
        return (self.measuring and (self.processes >= 2 or self.nproc is not None) and self.ab is None
                and not self.in_ab_worker and self.replicate_slot is None)

    @property
    def owns_xdist_dir(self) -> bool:
        """This process made the run's shared folder (the pytest-xdist controller) and removes it."""
        return self.xdist_dir is not None and self.worker_id is None

    @property
    def device_index(self) -> int | None:
        """The GPU index a benchmark's ``"cuda"`` means when it names none: ``LOCAL_RANK`` under
        torchrun, the pytest-xdist worker's number k otherwise (None: the current device)."""
        return self.ranks.local_rank if self.ranks is not None else self.worker_index

    @property
    def worker_index(self) -> int | None:
        """k of pytest-xdist worker ``gwk`` (its default GPU), else None."""
        return int(self.worker_id[2:]) if self.worker_id and self.worker_id[2:].isdigit() else None

    def relpath(self, path: Path) -> str:
        """``path`` relative to the rootdir, for messages."""
        try:
            return os.path.relpath(path, self.rootpath)
        except ValueError:  # another drive on Windows
            return str(path)


def resolve_settings(config: pytest.Config, compat: Any) -> SessionSettings:
    """The session's settings from ``config`` (command line, ini) and the environment, resolved once.

    ``compat``: the pytest-benchmark adapter's settings (its ``--benchmark-*`` options, JSON path
    and whether it disables benchmarks). Raises ``pytest.UsageError`` naming the option for a bad
    value, a device that does not exist here, a report path that cannot be written, or a bad
    combination. Under pytest-xdist the controller creates the run's shared folder (and exports
    it to its workers through pytest-xdist's ``workerinput``).
    """
    try:
        session_options = opts.resolve_session({**compat.cli_options, **{
            k: v for k, v in cli_values(config).items() if v is not None}}, ini_values(config))
    except opts.OptionError as exc:
        raise pytest.UsageError(f"pytest-gpuperf: {exc}") from None
    _check_spaced_paths(config)
    invocation_dir = Path(config.invocation_params.dir)
    updating = bool(config.getoption("--gpuperf-update-baselines"))
    baseline_dir = _baseline_dir(config).resolve()
    thresholds = _thresholds(config)
    paths = _output_paths(config, compat, invocation_dir)
    worker_id = getattr(config, "workerinput", {}).get("workerid")
    _check_device_option(config, session_options)
    if worker_id is None:  # the controller writes the reports: fail now, not after every benchmark ran
        for option, value in (("--gpuperf-json", paths["json_path"]), ("--gpuperf-markdown", paths["markdown_path"])):
            if value:
                _check_output_path(option, value)
    processes, replicate = _processes(config, worker_id)
    ranks = _ranks(config)
    if ranks is not None:
        processes = 1  # a launch the user started measures once; replicates are whole launches (--gpuperf-nproc)
    measuring = (bool(config.getoption("--gpuperf")) or updating) and not compat.disabled
    if replicate is not None:
        measuring, updating = True, False
    ab_fields = _ab(config, worker_id, updating)
    if ab_fields.get("in_ab_worker") or ab_fields.get("ab") is not None:
        measuring = True
    in_worker = worker_id is not None or replicate is not None or bool(ab_fields.get("in_ab_worker"))
    nproc = _nproc(config, ranks, in_worker)
    bisect_fields = _bisect(config, in_worker, updating, ab_fields)
    if nproc is not None:  # the shape of the worker processes, beside their limits
        bisect_fields["limits"] = replace(bisect_fields.get("limits", ProcessLimits()), nproc=nproc)
    xdist_dir = _xdist_dir(config, worker_id)  # last: nothing after it raises
    return SessionSettings(
        measuring=measuring,
        updating=updating,
        baseline_dir=baseline_dir,
        rootpath=config.rootpath,
        options=session_options,
        invocation_dir=invocation_dir,
        thresholds=thresholds,
        worker_id=worker_id,
        xdist_dir=xdist_dir,
        processes=processes,
        replicate=replicate,
        ranks=ranks,
        **paths,
        **_switches(config),
        **ab_fields,
        **bisect_fields,
    )


def _output_paths(config: pytest.Config, compat: Any, invocation_dir: Path) -> dict[str, Path | None]:
    """The report, plot, snapshot and artifact locations of :class:`SessionSettings` (relative to
    ``invocation_dir``; the artifacts default to ``<rootdir>/.gpuperf/artifacts``). Raises
    ``pytest.UsageError`` for ``--gpuperf-plot`` without matplotlib."""
    plot_opt = config.getoption("--gpuperf-plot")
    if plot_opt:
        from pytest_gpuperf.reporting.plots import require_matplotlib

        try:
            require_matplotlib()
        except ImportError as exc:
            raise pytest.UsageError(f"pytest-gpuperf: {exc}") from None
    md_opt = config.getoption("--gpuperf-markdown")
    json_opt = config.getoption("--gpuperf-json") or compat.json_path
    snap_opt = config.getoption("--gpuperf-memory-snapshot")
    art_opt = config.getoption("--gpuperf-artifacts")
    return {
        "json_path": invocation_dir / json_opt if json_opt else None,
        "markdown_path": invocation_dir / md_opt if md_opt else None,
        "plot_dir": invocation_dir / plot_opt if plot_opt else None,
        "snapshot_dir": invocation_dir / snap_opt if snap_opt else None,
        "artifacts_dir": invocation_dir / art_opt if art_opt else config.rootpath / ".gpuperf" / "artifacts",
    }


def _switches(config: pytest.Config) -> dict[str, Any]:
    """The on/off fields of :class:`SessionSettings` (and the hidden worker options), from the command
    line and the ini file."""
    select = config.getoption("--gpuperf-select")
    return {
        "classify": bool(config.getoption("--gpuperf-classify")),
        "strict": bool(config.getoption("--gpuperf-strict")),
        "normalize": bool(config.getoption("--gpuperf-normalize")),
        "host_load": host_load_enabled(config),
        "verbose": config.getoption("verbose", 0) or 0,
        "select_file": Path(select) if select else None,
        "op_profile": _op_profile_share(config.getoption("--gpuperf-op-profile")),
        "ab_confirm": not config.getoption("--gpuperf-no-ab-confirm") and bool(config.getini("gpuperf_ab_confirm")),
        "why": not config.getoption("--gpuperf-no-why") and bool(config.getini("gpuperf_why")),
    }


def cli_values(config: pytest.Config) -> dict[str, Any]:
    """The benchmark options given on the command line (``--gpuperf-<name>``; None: not given)."""
    values = {name: config.getoption(f"--gpuperf-{name.replace('_', '-')}") for name in opts.CLI_OPTIONS}
    if config.getoption("--gpuperf-no-counts"):
        values["counts"] = False
    if config.getoption("--gpuperf-instructions"):
        values["instructions"] = True
    return values


def ini_values(config: pytest.Config) -> dict[str, Any]:
    """The benchmark options set in the ini file (``gpuperf_<name>``), as written."""
    out = {}
    for name in opts.OPTION_NAMES:
        if name == "processes":  # the session's number (with --gpuperf-processes, GPUPERF_PROCESSES): not a default
            continue
        value = config.getini(f"gpuperf_{name}")
        if isinstance(value, str) and value.strip():
            out[name] = value.strip()
    return out


def host_load_enabled(config: pytest.Config) -> bool:
    """Whether the CPU backend measures the host load (the busy-host guard): off with
    ``GPUPERF_HOST_LOAD=0``, ``--gpuperf-no-host-load`` or ini ``gpuperf_host_load = false``."""
    if os.environ.get("GPUPERF_HOST_LOAD", "").strip().lower() in OFF_WORDS:
        return False
    return not config.getoption("--gpuperf-no-host-load") and bool(config.getini("gpuperf_host_load"))


def _baseline_dir(config: pytest.Config) -> Path:
    """``--gpuperf-baseline-dir`` (from the invocation folder), else ini ``gpuperf_baseline_dir``
    (from the ini file's folder), else ``baselines/`` under the rootdir."""
    cli_dir = config.getoption("--gpuperf-baseline-dir")
    ini_dir = config.getini("gpuperf_baseline_dir")
    if cli_dir:
        return Path(config.invocation_params.dir, cli_dir)
    if ini_dir:
        return Path(config.inipath.parent if config.inipath else config.rootpath, ini_dir)
    return config.rootpath / "baselines"


def _check_spaced_paths(config: pytest.Config) -> None:
    """A plugin flag that takes a value (``--gpuperf-baseline-dir DIR``, ``--gpuperf-history PATH``,
    ``--gpuperf-json PATH``, ``--benchmark-json PATH``...) written with a space, whose value is an
    existing path outside the invocation folder, is a usage error, on the command line or in
    ``PYTEST_ADDOPTS`` (issue 46; ini ``addopts`` are read after the rootdir is chosen).

    pytest picks the rootdir before plugins add their options: it reads such a value as a test path
    and moves the rootdir to a common ancestor of the invocation folder and that path, so every
    benchmark id changes, nothing matches its baseline, and the gate is silently off. The ``=`` form
    (``--gpuperf-history=PATH``) is safe; so is a value inside the invocation folder or one that does
    not exist yet (pytest ignores those), or any value when ``--rootdir`` is given."""
    from pytest_gpuperf.core.flags import BENCHMARK_FLAGS, PLUGIN_FLAGS, SIMULATED_CUDA

    import os
    import shlex

    takes_value = {f.name for f in (*PLUGIN_FLAGS, *BENCHMARK_FLAGS, SIMULATED_CUDA)
                   if f.metavar is not None and f.nargs is None}
    try:  # pytest reads PYTEST_ADDOPTS before it picks the rootdir, as the command line (ini addopts after)
        env = shlex.split(os.environ.get("PYTEST_ADDOPTS", ""))
    except ValueError:
        env = []  # pytest itself reports an unparsable PYTEST_ADDOPTS
    sources = [("PYTEST_ADDOPTS", env), ("the command line", [str(a) for a in config.invocation_params.args])]
    if any(a == "--rootdir" or a.startswith("--rootdir=") for _, args in sources for a in args):
        return  # the rootdir was given: pytest does not derive it from the paths
    here = Path(config.invocation_params.dir).resolve()
    for source, args in sources:
        for i, flag in enumerate(args[:-1]):
            if flag not in takes_value:
                continue
            value = args[i + 1]
            where = Path(here, value.split("::")[0]).resolve()
            if not where.exists() or where == here or here in where.parents:
                continue
            raise pytest.UsageError(
                f"pytest-gpuperf: write {flag}={value} (with '=') in {source}: with a space, pytest reads "
                f"{value} as a test path when it picks the rootdir, which then moves to a common ancestor "
                f"of {here} and {where} and every baseline is missed"
            )


def _thresholds(config: pytest.Config) -> Any:
    """Ini ``gpuperf_bottleneck_thresholds`` parsed (None: the built-in thresholds)."""
    if not config.getini("gpuperf_bottleneck_thresholds"):
        return None
    from pytest_gpuperf.verdict.bottleneck import Thresholds

    try:
        return Thresholds.parse(config.getini("gpuperf_bottleneck_thresholds"))
    except ValueError as exc:
        raise pytest.UsageError(f"pytest-gpuperf: ini gpuperf_bottleneck_thresholds: {exc}") from None


#: pytest-xdist ``workerinput`` key with the run's shared folder (the controller sets it per worker).
XDIST_DIR_KEY = "gpuperf_xdist_dir"


def _xdist_dir(config: pytest.Config, worker_id: str | None) -> Path | None:
    """The run's shared folder under pytest-xdist: a worker reads it from its ``workerinput``
    (:data:`XDIST_DIR_KEY`); the controller makes it (and owns it: ``SessionSettings.owns_xdist_dir``)
    and hands it to each worker it starts (``pytest_configure_node``)."""
    if worker_id is not None:
        folder = getattr(config, "workerinput", {}).get(XDIST_DIR_KEY)
        return Path(folder) if folder else None
    if getattr(config.option, "numprocesses", None) or getattr(config.option, "dist", "no") != "no":
        import tempfile

        return Path(tempfile.mkdtemp(prefix="gpuperf-xdist-"))
    return None


def _ranks(config: pytest.Config) -> Any:
    """Under torchrun (``WORLD_SIZE`` > 1) this process's :class:`~pytest_gpuperf.measure.distributed.Ranks`
    (with ``--gpuperf-rank-timeout``, ini ``gpuperf_rank_timeout``, s), else None. Raises
    ``pytest.UsageError`` for a rank timeout that is not a finite number of seconds > 0 (in every
    session), torchrun's variables that are unusable, and for what does not run under torchrun
    yet: pytest-xdist, ``--gpuperf-ab``, ``--gpuperf-bisect``."""
    from pytest_gpuperf.measure.distributed import RankEnvironmentError, Ranks

    rank_timeout = _number_option(config, "--gpuperf-rank-timeout", "gpuperf_rank_timeout", float, finite=True)
    try:
        ranks = Ranks.from_environment()
    except RankEnvironmentError as exc:
        raise pytest.UsageError(f"pytest-gpuperf under torchrun: {exc}") from None
    if ranks is None:
        return None
    if rank_timeout is not None:
        ranks.rank_timeout_s = rank_timeout
    asked = [flag for flag, on in (
        ("pytest-xdist (-n/--dist)", getattr(config.option, "numprocesses", None)
         or getattr(config.option, "dist", "no") != "no"),
        ("--gpuperf-ab", config.getoption("--gpuperf-ab", None)),
        ("--gpuperf-bisect", config.getoption("--gpuperf-bisect", None))) if on]
    if asked:
        raise pytest.UsageError(f"pytest-gpuperf under torchrun (WORLD_SIZE={ranks.world_size}): "
                                f"{', '.join(asked)} cannot be used there yet; run them without torchrun")
    return ranks


def _nproc(config: pytest.Config, ranks: Any, in_worker: bool) -> int | None:
    """``--gpuperf-nproc`` (else ini ``gpuperf_nproc``): the ranks of the torchrun launch each worker
    process is, or None (not given, 1, or this process is a worker: a rank of such a launch reads
    the same ini file). Raises ``pytest.UsageError`` for a value that is not a whole number >= 1,
    under torchrun (the option starts torchrun itself) and with pytest-xdist. With ``--gpuperf-ab``
    and ``--gpuperf-bisect`` each side's worker is a torchrun launch too."""
    cli = config.getoption("--gpuperf-nproc")
    raw, where = (cli, "--gpuperf-nproc") if cli is not None else (config.getini("gpuperf_nproc") or None, "ini gpuperf_nproc")
    if raw is None or in_worker or (cli is None and ranks is not None):  # the ini file is read by every rank too
        return None
    if not str(raw).strip().isdigit() or int(raw) < 1:
        raise pytest.UsageError(f"pytest-gpuperf: {where} {raw!r}: expected a whole number of ranks >= 1 "
                                f"(torchrun's --nproc-per-node; 1: measure without torchrun)")
    n = int(raw)
    if n == 1:
        return None
    if ranks is not None:
        raise pytest.UsageError(f"pytest-gpuperf: {where} {n} starts torchrun itself, but this session already runs "
                                f"under torchrun (WORLD_SIZE={ranks.world_size}): give either torchrun or {where}")
    if getattr(config.option, "numprocesses", None) or getattr(config.option, "dist", "no") != "no":
        raise pytest.UsageError(f"pytest-gpuperf: {where} {n}: pytest-xdist (-n/--dist) cannot be used with it "
                                f"(each torchrun launch has the node's GPUs); run without -n")
    return n


def _processes(config: pytest.Config, worker_id: str | None) -> tuple[int, Any]:
    """``--gpuperf-processes`` (ini, env) resolved, and in a replicate worker its role (hidden ``--gpuperf-role``)."""
    from pytest_gpuperf.plugin.replicates import ROLE_OPTION, default_processes, worker_role

    try:
        processes = default_processes(config.getoption("--gpuperf-processes"), config.getini("gpuperf_processes") or None)
        return processes, (worker_role(config.getoption(ROLE_OPTION)) if worker_id is None else None)
    except ValueError as exc:
        raise pytest.UsageError(f"pytest-gpuperf: {exc}") from None


def _ab(config: pytest.Config, worker_id: str | None, updating: bool) -> dict[str, Any]:
    """The A/B fields of :class:`SessionSettings`: ``--gpuperf-ab REF`` checked (usage errors) and
    resolved to a revision, ``--gpuperf-ab-processes`` (the pairs of ``--gpuperf-ab`` and of the A/B
    confirmation of stored regressions); in an A/B worker process (its coordinator's address in
    :data:`~pytest_gpuperf.core.environ.AB_CONNECT`) ``in_ab_worker``."""
    from pytest_gpuperf.core.environ import AB_CONNECT

    if os.environ.get(AB_CONNECT) and worker_id is None:
        return {"in_ab_worker": True}
    ref = config.getoption("--gpuperf-ab")
    roots = config.getoption("--gpuperf-ab-pythonpath") or config.getini("gpuperf_ab_pythonpath") or ""
    out: dict[str, Any] = {"ab_roots": tuple(r for r in re.split(r"[\s,]+", roots) if r)}
    n = config.getoption("--gpuperf-ab-processes")  # --gpuperf-ab's pairs, and the A/B confirmation's
    if n is not None:
        if not str(n).isdigit() or int(n) < 1:
            raise pytest.UsageError(f"pytest-gpuperf: --gpuperf-ab-processes {n}: expected an integer >= 1")
        out["ab_processes"] = int(n)
    if not ref:
        return out
    if updating:
        raise pytest.UsageError("pytest-gpuperf: --gpuperf-ab compares with a git revision and stores nothing; "
                                "it cannot be combined with --gpuperf-update-baselines")
    if worker_id is not None:  # a pytest-xdist worker: the controller measured; read its results
        out["ab"] = ref
        return out
    from pytest_gpuperf.ab.run import ABError, resolve_revision

    try:
        rev = resolve_revision(Path(config.invocation_params.dir), ref)
    except ABError as exc:
        raise pytest.UsageError(f"pytest-gpuperf: {exc}") from None
    for r in out["ab_roots"]:
        if not (rev.repo / r).is_dir():
            raise pytest.UsageError(f"pytest-gpuperf: gpuperf_ab_pythonpath / --gpuperf-ab-pythonpath: {r!r} is not "
                                    f"a folder under the repository's top {rev.repo}")
    out["ab"] = rev
    return out


def _bisect(config: pytest.Config, in_worker: bool, updating: bool, ab_fields: dict[str, Any]) -> dict[str, Any]:
    """The bisection fields of :class:`SessionSettings` and the limits of its worker processes
    (``limits``, a :class:`ProcessLimits`); usage errors name the option and what it accepts."""
    out: dict[str, Any] = {}
    if in_worker:
        return out  # a worker process (xdist, replicate, A/B) measures; only the session the user started bisects
    limits: dict[str, Any] = {}
    for option, ini, key, kind in (("--gpuperf-bisect-on-regression", "gpuperf_bisect_on_regression",
                                    "bisect_on_regression", int),
                                   ("--gpuperf-bisect-timeout", "gpuperf_bisect_timeout", "bisect_timeout_s", float),
                                   ("--gpuperf-why-max", "gpuperf_why_max", "why_max", int),
                                   ("--gpuperf-settle-time", "gpuperf_settle_time", "settle_time_s", float),
                                   ("--gpuperf-max-processes", "gpuperf_max_processes", "max_processes", int),
                                   ("--gpuperf-more-processes-time", "gpuperf_more_processes_time", "more_time_s", float),
                                   ("--gpuperf-worker-timeout", "gpuperf_worker_timeout", "worker_timeout_s", float)):
        value = _number_option(config, option, ini, kind)
        if value is not None:
            (limits if key in _LIMITS else out)[key] = value
    from pytest_gpuperf.core.allocator import parse_mode

    try:
        limits["allocator"] = parse_mode(config.getini("gpuperf_allocator"))
    except ValueError as exc:
        raise pytest.UsageError(f"pytest-gpuperf: {exc}") from None
    out["limits"] = ProcessLimits(**limits)
    n = config.getoption("--gpuperf-ab-processes")
    if n is not None and str(n).isdigit() and int(n) >= 1:
        out["bisect_processes"] = int(n)  # pairs of worker processes per step (default 1)
    spec = config.getoption("--gpuperf-bisect")
    if not spec:
        return out
    good, sep, bad = spec.partition("..")
    if not sep or not good or not bad or bad.startswith("."):
        raise pytest.UsageError(f"pytest-gpuperf: --gpuperf-bisect {spec}: expected GOOD..BAD, two git revisions "
                                f"(e.g. v1.4..HEAD or 3f2a9c1..main)")
    if updating or ab_fields.get("ab") is not None:
        raise pytest.UsageError("pytest-gpuperf: --gpuperf-bisect runs its own A/B steps between commits; it cannot "
                                "be combined with --gpuperf-update-baselines or --gpuperf-ab")
    out["bisect"] = (good, bad)
    return out


def _op_profile_share(raw: Any) -> int:
    """The hidden ``--gpuperf-op-profile [N]`` (the coordinator adds it to extras processes): the
    number of processes that share the op profile's cycles (1 without a value), 0 when absent.
    Raises ``pytest.UsageError`` for a value that is not a whole number >= 1."""
    if raw is None:
        return 0
    text = str(raw)
    if not text.isdigit() or int(text) < 1:
        raise pytest.UsageError(f"pytest-gpuperf: --gpuperf-op-profile {text}: expected a whole number >= 1 "
                                "(the processes that share the op profile)")
    return int(text)


def _number_option(config: pytest.Config, option: str, ini: str, kind: type, *, finite: bool = False) -> Any:
    """The number of ``option`` (command line), else of ini ``ini``, else None; ``kind`` ``int``:
    a whole number >= 0, ``float``: a number of seconds > 0 (``finite``: not ``inf`` nor ``nan``
    either). Raises ``pytest.UsageError`` naming the option (or the ini) and what it accepts."""
    raw = config.getoption(option)
    source = option
    if raw is None:
        raw, source = (config.getini(ini) or "").strip() or None, f"ini {ini}"
    if raw is None:
        return None
    try:
        value = kind(raw)
    except ValueError:
        value = -1
    if value < 0 or (kind is float and value == 0) or (finite and not 0 <= value < float("inf")):
        raise pytest.UsageError(f"pytest-gpuperf: {source} {raw}: expected " + (
            "a whole number >= 0" if kind is int else f"a {'finite ' if finite else ''}number of seconds > 0"))
    return value


def _check_device_option(config: pytest.Config, session_options: opts.BenchOptions) -> None:
    """A device given on the command line or in the ini that does not exist here is a usage error
    (a marker's ``device="cuda"`` only skips its test). Imports torch only when such a device is given."""
    source = ("--gpuperf-device" if config.getoption("--gpuperf-device")
              else "ini gpuperf_device" if "device" in ini_values(config) else None)
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
