"""pytest-benchmark compatibility: its ``benchmark`` fixture, marker and ``--benchmark-*`` flags.

A suite written for pytest-benchmark (``def test_x(benchmark): benchmark(op, data)``) runs
unmodified: ``benchmark`` is a thin adapter (:class:`BenchmarkFixture`) over the test's
:class:`~pytest_gpuperf.plugin.bench.GpuBench`, so it is the same measurement as ``gpu_bench`` (timing
backends, baselines, gate, reports). ``@pytest.mark.benchmark(...)`` and the ``--benchmark-*``
flags are translated into pytest-gpuperf's options.

Coexistence: with pytest-benchmark not loaded, the fixture, marker and flags come from here.
With it loaded, a plain run leaves it alone; under ``--gpuperf`` (or
``--gpuperf-update-baselines``) it is unregistered before anything configures
(:func:`take_over`; pytest-codspeed does the same for ``--codspeed``), its flags (still parsed by
its own options) are read here, and the report header says so in one line.

Imports neither torch nor numpy: the plugin loads this module at start-up.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

import pytest

from pytest_gpuperf.core import options as opts
from pytest_gpuperf.core.flags import BENCHMARK_FLAGS
# the fixture object and its stats (re-exported: this module has served them)
from pytest_gpuperf.plugin.benchmark_fixture import (BenchmarkFixture, BenchmarkStats, FixtureAlreadyUsed,  # noqa: F401
                                                     Logger, Stats, tensor_device)
# the summary table's column and sort keys, stated once (read here for the options and their help)
from pytest_gpuperf.reporting.columns import DEFAULT_COLUMNS, DEFAULT_SORT, SORT_KEYS, TABLE_COLUMNS  # noqa: F401

#: The module pytest-benchmark registers as its plugin (entry point ``benchmark``, or ``-p``).
PB_PLUGIN_MODULE = "pytest_benchmark.plugin"

#: pytest-benchmark's ``--benchmark-sort`` / ``--benchmark-columns`` / ``--benchmark-group-by`` values.
PB_SORT_KEYS = ("min", "max", "mean", "stddev", "name", "fullname")
PB_COLUMNS = ("min", "max", "mean", "stddev", "median", "iqr", "outliers", "ops", "rounds", "iterations")
PB_GROUP_BY = ("group", "name", "fullname", "func", "fullfunc", "param", "param:NAME")

#: ``@pytest.mark.benchmark`` keys with a meaning here -> the option they set.
MARKER_MAP = {"group": "group", "min_rounds": "min_rounds", "max_time": "max_time", "precision": "target_precision"}
#: ``@pytest.mark.benchmark`` keys accepted and ignored, with why (``warmup`` is handled on its own).
MARKER_IGNORED = {
    "min_time": "rounds are sized from the warmup to at least 100 µs (CPU) / 20 µs (CUDA)",
    "timer": "timing uses CUDA events on a GPU and time.perf_counter_ns on the CPU",
    "disable_gc": "the garbage collector is always off during timed rounds",
    "calibration_precision": "rounds are sized from the warmup",
    "warmup_iterations": "the warmup lasts warmup_time seconds (at least 3 calls)",
    "confidence": "early stopping uses the 95% confidence interval of the median (target_precision)",
    "cprofile": "pytest-gpuperf does not run cProfile (--gpuperf-classify profiles with torch.profiler)",
}
MARKER_KEYS = (*MARKER_MAP, "warmup", *MARKER_IGNORED)

#: pytest-benchmark's flags served here when it is not loaded: their help (their shapes, and whether a
#: worker process gets each: :data:`pytest_gpuperf.core.flags.BENCHMARK_FLAGS`).
_FLAGS: dict[str, str] = {
    "--benchmark-skip": "skip the benchmark tests (as --gpuperf-skip)",
    "--benchmark-only": "run only the benchmark tests (as --gpuperf-only)",
    "--benchmark-disable": "run each benchmark once, as a correctness test (smoke mode), even with --gpuperf",
    "--benchmark-enable": "override --benchmark-disable",
    "--benchmark-json": "as --gpuperf-json PATH (pytest-gpuperf's report format)",
    "--benchmark-group-by": "group the summary by: " + ", ".join(PB_GROUP_BY) + " (comma-separated; default group)",
    "--benchmark-sort": "sort the summary by: " + ", ".join(PB_SORT_KEYS),
    "--benchmark-columns": "summary columns: " + ", ".join(PB_COLUMNS),
    "--benchmark-min-rounds": "as the min_rounds option",
    "--benchmark-max-time": "as --gpuperf-max-time",
    "--benchmark-warmup": "on, off or auto: off sets warmup_time=0 (3 warmup calls remain); on and auto keep the warmup",
}
#: pytest-benchmark's flags accepted and ignored here (one line each says why).
IGNORED_FLAGS: dict[str, str] = {
    "--benchmark-min-time": MARKER_IGNORED["min_time"],
    "--benchmark-timer": MARKER_IGNORED["timer"],
    "--benchmark-disable-gc": MARKER_IGNORED["disable_gc"],
    "--benchmark-calibration-precision": MARKER_IGNORED["calibration_precision"],
    "--benchmark-warmup-iterations": MARKER_IGNORED["warmup_iterations"],
    "--benchmark-compare": "every --gpuperf run compares with the stored baselines",
    "--benchmark-compare-fail": "the statistical gate decides (--gpuperf-threshold, --gpuperf-alpha)",
    "--benchmark-save": "baselines are written by --gpuperf-update-baselines",
    "--benchmark-autosave": "baselines are written by --gpuperf-update-baselines",
}
#: pytest-benchmark's defaults, as its parsed options hold them: a flag at its default counts as
#: not given when pytest-benchmark's own options are read (so installing it changes nothing).
PB_DEFAULTS: dict[str, Any] = {
    "benchmark_sort": "min", "benchmark_group_by": "group", "benchmark_min_rounds": 5,
    "benchmark_max_time": "1.0", "benchmark_warmup": False, "benchmark_min_time": "0.000005",
    "benchmark_timer": "time.perf_counter", "benchmark_calibration_precision": 10,
    "benchmark_warmup_iterations": 100000,
}

COMPAT_KEY = pytest.StashKey["CompatSettings"]()


@dataclass(frozen=True)
class CompatSettings:
    """The session's pytest-benchmark compatibility, resolved once by :func:`configure`.

    ``active``: the ``benchmark`` fixture, marker and flags are served here; ``taken_over``: the
    version of pytest-benchmark taken over for the session (None: none); ``only``/``skip``: select
    the benchmark tests (``--gpuperf-only``/``--gpuperf-skip`` or their ``--benchmark-*`` names);
    ``disabled``: ``--benchmark-disable`` (smoke mode); ``json_path``: ``--benchmark-json``;
    ``group_by``: ``--benchmark-group-by`` parts; ``columns``/``sort``: the summary table's
    (None: the default); ``cli_options``: option values from ``--benchmark-*`` flags (seconds,
    counts), below ``--gpuperf-*``; ``notes``: one line per flag accepted and ignored.
    """

    active: bool = False
    taken_over: str | None = None
    only: str | None = None
    skip: str | None = None
    disabled: bool = False
    json_path: str | None = None
    group_by: tuple[str, ...] | None = None
    columns: tuple[str, ...] | None = None
    sort: str | None = None
    cli_options: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


# ----------------------------------------------------------------------------- options


def find_pytest_benchmark(pluginmanager: Any) -> Any:
    """pytest-benchmark's plugin module when it is registered, else None (imports nothing)."""
    for plugin in pluginmanager.get_plugins():
        if getattr(plugin, "__name__", None) == PB_PLUGIN_MODULE:
            return plugin
    return None


def declare_hooks(pluginmanager: Any) -> None:
    """pytest-benchmark's hook specifications (:mod:`pytest_gpuperf.plugin.benchmark_hooks`), when
    no plugin declared them (pytest-benchmark not installed, or not loaded), so that a conftest
    written for it loads: pytest checks a conftest's hooks against the declared ones when it
    collects. Called at configure time, once every plugin is registered."""
    caller = getattr(pluginmanager.hook, "pytest_benchmark_update_json", None)
    if caller is not None and caller.spec is not None:  # (a conftest's implementation alone makes a caller)
        return  # pytest-benchmark declared them (its hooks stay declared when it is taken over)
    from pytest_gpuperf.plugin import benchmark_hooks

    pluginmanager.add_hookspecs(benchmark_hooks)


def add_benchmark_options(parser: Any, pluginmanager: Any) -> None:
    """Register pytest-benchmark's flags (the mapped and the ignored ones) unless pytest-benchmark
    is loaded, whose own options would clash. Called once every plugin and initial conftest is in."""
    if find_pytest_benchmark(pluginmanager) is not None:
        return
    group = parser.getgroup("benchmark", "pytest-benchmark compatibility (served by pytest-gpuperf)")
    for flag in BENCHMARK_FLAGS:
        text = _FLAGS.get(flag.name) or f"accepted and ignored: {IGNORED_FLAGS[flag.name]}"
        group.addoption(flag.name, **{**flag.kwargs(), "default": None, "help": text})


def take_over(config: pytest.Config) -> None:
    """Under ``--gpuperf``/``--gpuperf-update-baselines``, unregister pytest-benchmark for the session.

    Runs from ``pytest_cmdline_main`` (first), before any plugin configures, so pytest-benchmark
    neither configures nor contributes its fixture or hooks; its options stay parsed and are read
    by :func:`configure`. A plain run leaves it alone.
    """
    if not (config.getoption("--gpuperf", False) or config.getoption("--gpuperf-update-baselines", False)):
        return
    plugin = find_pytest_benchmark(config.pluginmanager)
    if plugin is None:
        return
    package = sys.modules.get(PB_PLUGIN_MODULE.rpartition(".")[0])
    version = str(getattr(package, "__version__", "") or "?")
    config.pluginmanager.unregister(plugin)
    config.pluginmanager.set_blocked("pytest-benchmark")  # its session object, should anything register it
    config.stash[_TAKEN_OVER_KEY] = version


_TAKEN_OVER_KEY = pytest.StashKey[str]()


def _split(value: Any) -> list[str]:
    if isinstance(value, (list, tuple)):
        return [str(v).strip().lower() for v in value if str(v).strip()]
    return [part.strip().lower() for part in str(value).split(",") if part.strip()]


def _bad(flag: str, value: Any, accepted: Iterable[str]) -> pytest.UsageError:
    return pytest.UsageError(f"pytest-gpuperf: {flag} {value!r}: expected one of: {', '.join(accepted)}")


def _columns(flag: str, value: Any, accepted: Iterable[str]) -> tuple[str, ...]:
    accepted = tuple(accepted)
    cols = _split(value)
    bad = [c for c in cols if c not in accepted]
    if bad or not cols:
        raise pytest.UsageError(f"pytest-gpuperf: {flag} {value!r}: unknown column(s) {', '.join(bad) or '(none)'}; "
                                f"expected a comma-separated list of: {', '.join(accepted)}")
    return tuple(dict.fromkeys(cols))


def _group_by(value: Any) -> tuple[str, ...]:
    parts = _split(value) if not isinstance(value, str) else [p.strip() for p in value.split(",") if p.strip()]
    for p in parts:
        if not (p in PB_GROUP_BY[:-1] or (p.startswith("param:") and len(p) > len("param:"))):
            raise _bad("--benchmark-group-by", value, PB_GROUP_BY)
    if not parts:
        raise _bad("--benchmark-group-by", value, PB_GROUP_BY)
    return tuple(parts)


def _warmup(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("auto",):
        return True  # pytest-benchmark: on PyPy only; here the warmup stays (it is part of the protocol)
    if text in ("on", "true", "yes", ""):
        return True
    if text in ("off", "false", "no"):
        return False
    raise _bad("--benchmark-warmup", value, ("on", "off", "auto"))


def _selection(config: pytest.Config, value: Callable[[str], Any]) -> tuple[str | None, str | None, bool]:
    """``(only, skip, disabled)``: the flag that selects only benchmarks or skips them (ours or
    pytest-benchmark's; ``value`` reads a --benchmark-* flag) and whether --benchmark-disable holds.
    Raises ``pytest.UsageError`` for flags that exclude each other."""
    only = "--gpuperf-only" if config.getoption("--gpuperf-only") else None
    skip = "--gpuperf-skip" if config.getoption("--gpuperf-skip") else None
    if only and skip:
        raise pytest.UsageError("pytest-gpuperf: --gpuperf-only and --gpuperf-skip exclude each other; give one")
    only = only or ("--benchmark-only" if value("benchmark_only") else None)
    skip = None if only else skip or ("--benchmark-skip" if value("benchmark_skip") else None)  # only wins, as there
    disabled = bool(value("benchmark_disable")) and not value("benchmark_enable")
    if disabled and only:
        raise pytest.UsageError("pytest-gpuperf: --benchmark-disable and --benchmark-only exclude each other "
                                "(as in pytest-benchmark); give one")
    if disabled and config.getoption("--gpuperf-update-baselines", False):
        raise pytest.UsageError("pytest-gpuperf: --benchmark-disable (run each benchmark once) contradicts "
                                "--gpuperf-update-baselines (measure and record); give one")
    return only, skip, disabled


def _cli_options(value: Callable[[str], Any]) -> dict[str, Any]:
    """The benchmark options that pytest-benchmark's flags set (``min_rounds``, ``max_time``,
    ``warmup_time``). Raises ``pytest.UsageError`` naming a bad flag's value."""
    cli: dict[str, Any] = {}
    for dest, flag, name in (("benchmark_min_rounds", "--benchmark-min-rounds", "min_rounds"),
                             ("benchmark_max_time", "--benchmark-max-time", "max_time")):
        v = value(dest)
        if v is not None:
            try:
                cli[name] = opts.convert(name, v, flag)
            except opts.OptionError as exc:
                raise pytest.UsageError(f"pytest-gpuperf: {exc}") from None
    if "min_rounds" in cli:
        cli["max_rounds"] = max(cli["min_rounds"], opts.DEFAULTS.max_rounds)  # pytest-benchmark has no cap
    warm = value("benchmark_warmup")
    if warm is not None and not _warmup(warm):
        cli["warmup_time"] = 0.0
    return cli


def _sort_and_columns(config: pytest.Config, value: Callable[[str], Any]) -> tuple[str | None, tuple[str, ...] | None]:
    """The summary table's sort key and columns (``--gpuperf-*`` win over ``--benchmark-*``).
    Raises ``pytest.UsageError`` naming a bad value and what is accepted."""
    sort = config.getoption("--gpuperf-sort")
    if sort is not None:
        if sort.strip().lower() not in SORT_KEYS:
            raise _bad("--gpuperf-sort", sort, SORT_KEYS)
        sort = sort.strip().lower()
    elif value("benchmark_sort") is not None:
        pb_sort = str(value("benchmark_sort")).strip().lower()
        if pb_sort not in PB_SORT_KEYS:
            raise _bad("--benchmark-sort", pb_sort, PB_SORT_KEYS)
        sort = "name" if pb_sort == "fullname" else pb_sort
    columns = None
    if config.getoption("--gpuperf-columns") is not None:
        columns = _columns("--gpuperf-columns", config.getoption("--gpuperf-columns"), TABLE_COLUMNS)
    elif value("benchmark_columns") is not None:
        columns = _columns("--benchmark-columns", value("benchmark_columns"), PB_COLUMNS)
    return sort, columns


def configure(config: pytest.Config) -> CompatSettings:
    """Resolve the session's :class:`CompatSettings` (raises ``pytest.UsageError`` naming a bad
    flag and what it accepts) and, when the ``benchmark`` fixture is served here, register it."""
    pm = config.pluginmanager
    active = find_pytest_benchmark(pm) is None
    taken_over = config.stash.get(_TAKEN_OVER_KEY, None)

    def value(dest: str) -> Any:
        """A --benchmark-* flag's value, None when not given (or, with pytest-benchmark's own
        options, at its default)."""
        if not active:
            return None
        v = getattr(config.option, dest, None)
        if v is None or v is False or v == [] or v == "":
            return None
        if taken_over is not None and dest in PB_DEFAULTS and v == PB_DEFAULTS[dest]:
            return None
        return v

    only, skip, disabled = _selection(config, value)
    cli = _cli_options(value)

    json_path = value("benchmark_json")
    ours = config.getoption("--gpuperf-json")
    if json_path is not None and ours and str(json_path) != ours:
        raise pytest.UsageError(f"pytest-gpuperf: --benchmark-json {json_path} and --gpuperf-json {ours} name "
                                f"different files; give one")
    group_by = _group_by(value("benchmark_group_by")) if value("benchmark_group_by") is not None else None

    sort, columns = _sort_and_columns(config, value)

    notes = tuple(f"{flag} is accepted and ignored: {why}" for flag, why in IGNORED_FLAGS.items()
                  if value(flag[2:].replace("-", "_")) is not None)
    settings = CompatSettings(active=active, taken_over=taken_over, only=only, skip=skip, disabled=disabled,
                              json_path=str(json_path) if json_path is not None else None, group_by=group_by,
                              columns=columns, sort=sort, cli_options=cli, notes=notes)
    config.stash[COMPAT_KEY] = settings
    if active:
        config.addinivalue_line(
            "markers", "benchmark(group, min_rounds, max_time, ...): pytest-benchmark's settings of a benchmark "
                       "test (served by pytest-gpuperf)")
        pm.register(BenchmarkPlugin(settings), "gpuperf-benchmark-compat")
    return settings


def _settings(config: pytest.Config) -> CompatSettings:
    return config.stash.get(COMPAT_KEY, None) or CompatSettings()


def report_info(config: pytest.Config, commit: str | None, dirty: bool | None,
                branch: str | None) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """The JSON report's ``machine_info`` and ``commit_info`` as pytest-benchmark's hooks make them
    (:mod:`pytest_gpuperf.plugin.benchmark_hooks`): ``pytest_benchmark_generate_*_info`` (first
    result; else this machine's ``platform`` fields, and ``id``/``dirty``/``branch`` of the
    checkout), then ``pytest_benchmark_update_*_info`` in place. Returns them and a warning per hook
    that raised (contained: the report is written without that hook's part). This machine's
    ``machine_info`` has pytest-benchmark's ``cpu`` dict
    (:func:`~pytest_gpuperf.measure.environment.pb_cpu_info`: py-cpuinfo's, else from
    ``/proc/cpuinfo``), which conftests' hooks read (``info["cpu"].pop("hz_actual")``)."""
    import platform

    from pytest_gpuperf.measure.environment import pb_cpu_info

    problems: list[str] = []
    machine = _call_hook(config, "pytest_benchmark_generate_machine_info", problems, config=config) or {
        "node": platform.node(), "machine": platform.machine(), "system": platform.system(),
        "release": platform.release(), "python_implementation": platform.python_implementation(),
        "python_version": platform.python_version(), "cpu": pb_cpu_info()}
    commit_info = {"id": commit, "dirty": dirty, "branch": branch}
    _call_hook(config, "pytest_benchmark_update_machine_info", problems, config=config, machine_info=machine)
    commit_info = _call_hook(config, "pytest_benchmark_generate_commit_info", problems, config=config) or commit_info
    _call_hook(config, "pytest_benchmark_update_commit_info", problems, config=config, commit_info=commit_info)
    return machine, commit_info, problems


def session_machine_info(session: Any) -> tuple[dict[str, Any], list[str]]:
    """:func:`report_info`'s ``machine_info`` of ``session`` (the
    :class:`~pytest_gpuperf.plugin.session.GpuPerfSession`: its checkout's commit and branch), and
    a line per hook that raised: what a baseline entry keeps and a compare run hands to
    ``pytest_benchmark_compare_machine_info``."""
    from pytest_gpuperf.core.git import current_branch

    commit, dirty = session.git_state()
    machine_info, _, problems = report_info(session.config, commit, dirty, current_branch(session.settings.rootpath))
    return machine_info, problems


def update_json(config: pytest.Config, results: list[Any], data: dict[str, Any]) -> list[str]:
    """pytest-benchmark's ``pytest_benchmark_update_json(config, benchmarks, output_json)``: a
    conftest changes the report ``data`` in place before it is written; ``results``: the session's
    :class:`~pytest_gpuperf.verdict.result.BenchResult`. Returns a warning when it raised."""
    problems: list[str] = []
    _call_hook(config, "pytest_benchmark_update_json", problems, config=config, benchmarks=results, output_json=data)
    return problems


def _call_hook(cfg: pytest.Config, name: str, problems: list[str], *,
               without: str = "the JSON report was written without its part", **kwargs: Any) -> Any:
    """Call pytest-benchmark's hook ``name`` where it is declared; an exception of an
    implementation is one line in ``problems`` (the hook's result is then None), ending with
    ``without`` (what was done without it)."""
    hook = getattr(cfg.hook, name, None)
    if hook is None:
        return None
    try:
        return hook(**kwargs)
    except Exception as exc:  # a conftest's hook never takes the report down
        problems.append(f"{name} (a pytest-benchmark hook) raised {type(exc).__name__}: {exc}; {without}")
        return None


def implemented(config: pytest.Config, name: str) -> bool:
    """True when the ``benchmark`` fixture is served here (pytest-benchmark absent, or taken over:
    its own implementations are gone with it) and a conftest or plugin implements
    pytest-benchmark's hook ``name`` (pytest-gpuperf implements none of them itself)."""
    hook, s = getattr(config.hook, name, None), _settings(config)
    return (s.active or s.taken_over is not None) and hook is not None and bool(hook.get_hookimpls())


#: pytest-benchmark's statistics of a benchmark (seconds), as its hooks see them (``as_dict(flat=True)``).
_PB_STATS = {"min": "min_ms", "max": "max_ms", "mean": "mean_ms", "stddev": "std_ms", "median": "median_ms",
             "iqr": "iqr_ms", "q1": "p25_ms", "q3": "p75_ms"}


def bench_dicts(rows: Sequence[tuple[str, Any]]) -> list[dict[str, Any]]:
    """pytest-benchmark's flat benchmark dicts of the summary's ``(label, BenchResult)`` rows, for
    its display hooks: ``name`` (the test's name with its parameters), ``fullname`` (the label,
    ``module::id``), ``group``, ``param`` (the id in brackets, else None), ``params`` (empty: not
    kept), its statistics in seconds (``min``, ``max``, ``mean``, ``stddev``, ``median``, ``iqr``,
    ``q1``, ``q3``; ``median`` is the run's median as its verdict decided on it), ``rounds`` and
    ``ops`` (calls per second at the median)."""
    out = []
    for label, r in rows:
        name = label.rsplit("::", 1)[-1]
        param = name[name.index("[") + 1:-1] if "[" in name and name.endswith("]") else None
        d: dict[str, Any] = {"name": name, "fullname": label, "group": r.group, "param": param, "params": {}}
        for key, attr in _PB_STATS.items():
            value = r.estimate_ms if key == "median" and not r.smoke else getattr(r, attr)
            d[key] = value / 1e3 if isinstance(value, (int, float)) else None
        d["rounds"] = r.rounds
        d["ops"] = 1.0 / d["median"] if d["median"] else None
        out.append(d)
    return out


def group_stats(config: pytest.Config, rows: Sequence[tuple[str, Any]], problems: list[str]) -> dict[str, Any] | None:
    """pytest-benchmark's ``pytest_benchmark_group_stats(config, benchmarks, group_by)``, where a
    conftest implements it: the summary's groups as it returns them (``[(group, [bench, ...]),
    ...]``, :func:`bench_dicts`), as ``{fullname: group}``; None when none implements it, it
    returned nothing or something else (a line in ``problems`` then), or raised (likewise). A
    benchmark it leaves out keeps its own group. Only the terminal table is regrouped."""
    if not implemented(config, "pytest_benchmark_group_stats"):
        return None
    group_by = ",".join(_settings(config).group_by or ("group",))
    got = _call_hook(config, "pytest_benchmark_group_stats", problems, without="the summary keeps its own groups",
                     config=config, benchmarks=bench_dicts(rows), group_by=group_by)
    if got is None:
        return None
    try:
        return {bench["fullname"]: group for group, benches in got for bench in benches}
    except (TypeError, ValueError, KeyError) as exc:
        problems.append(f"pytest_benchmark_group_stats (a pytest-benchmark hook) returned {type(got).__name__}, not "
                        f"[(group, [benchmark dict, ...]), ...] ({exc}); the summary keeps its own groups")
        return None


def scale_unit(config: pytest.Config, rows: Sequence[tuple[str, Any]], problems: list[str]) -> tuple[str, float] | None:
    """pytest-benchmark's ``pytest_benchmark_scale_unit(config, unit, benchmarks, best, worst,
    sort)``, where a conftest implements it: ``(prefix, scale)`` for the summary table's times
    (a time in seconds is shown as ``time * scale`` followed by ``prefix + "s"``), called with
    ``unit="seconds"``, ``best``/``worst`` the smallest and largest of each statistic over the
    benchmarks (seconds) and ``sort`` the table's sort key. None when none implements it, or it
    raised or returned something else (a line in ``problems``): each time then gets its own unit."""
    if not implemented(config, "pytest_benchmark_scale_unit"):
        return None
    benches = bench_dicts(rows)
    best, worst = {}, {}
    for key in _PB_STATS:
        values = [b[key] for b in benches if b[key] is not None]
        if values:
            best[key], worst[key] = min(values), max(values)
    got = _call_hook(config, "pytest_benchmark_scale_unit", problems, without="each time keeps its own unit",
                     config=config, unit="seconds", benchmarks=benches, best=best, worst=worst,
                     sort=_settings(config).sort or "name")
    if got is None:
        return None
    if (isinstance(got, tuple) and len(got) == 2 and isinstance(got[0], str)
            and isinstance(got[1], (int, float)) and not isinstance(got[1], bool) and got[1] > 0):
        return got[0], float(got[1])
    problems.append(f"pytest_benchmark_scale_unit (a pytest-benchmark hook) returned {got!r}, not (prefix, scale) "
                    "with a scale > 0; each time keeps its own unit")
    return None


class _BenchmarkSession:
    """What a ``pytest_benchmark_compare_machine_info`` implementation uses of pytest-benchmark's
    session: ``logger`` (:class:`~pytest_gpuperf.plugin.benchmark_fixture.Logger`) and ``storage.location`` (the baseline file compared)."""

    def __init__(self, warn: Callable[[str], None], location: str) -> None:
        import types

        self.logger = Logger(warn)
        self.storage = types.SimpleNamespace(location=location)


def compare_machine_info(config: pytest.Config, machine_info: Mapping[str, Any],
                         baselines: Mapping[str, Mapping[str, Any]], warn: Callable[[str], None]) -> list[str]:
    """pytest-benchmark's ``pytest_benchmark_compare_machine_info(config, benchmarksession,
    machine_info, compared_benchmark)``, where a conftest implements it: called once per baseline
    file compared against, with this session's ``machine_info`` (:func:`report_info`) and, as
    ``compared_benchmark``, ``{"machine_info", "commit_info", "datetime"}`` of the run that recorded
    it (``baselines``: file shown -> one of its entries, which holds the ``machine_info`` its update
    run made with the same hooks). Its ``benchmarksession.logger.warning(...)`` becomes a warning
    of the session (``warn``). A baseline recorded before baselines kept ``machine_info`` is not
    compared. Returns a line per implementation that raised."""
    if not implemented(config, "pytest_benchmark_compare_machine_info"):
        return []
    problems: list[str] = []
    for path, entry in baselines.items():
        stored = entry.get("machine_info")
        if not isinstance(stored, Mapping):
            continue
        compared = {"machine_info": dict(stored), "datetime": entry.get("timestamp_utc"),
                    "commit_info": {"id": entry.get("git_commit"), "dirty": entry.get("dirty")}}
        _call_hook(config, "pytest_benchmark_compare_machine_info", problems,
                   without=f"the machine of {path} was not compared", config=config,
                   benchmarksession=_BenchmarkSession(warn, path), machine_info=dict(machine_info),
                   compared_benchmark=compared)
    return problems


def table_options(config: pytest.Config) -> dict[str, Any]:
    """Keyword arguments of :func:`pytest_gpuperf.reporting.report.summary_lines`: ``columns`` and ``sort``."""
    s = _settings(config)
    return {"columns": s.columns, "sort": s.sort}


# ----------------------------------------------------------------------------- selection, marker, groups


def is_benchmark_test(item: pytest.Item) -> bool:
    """A test that uses the ``gpu_bench`` or ``benchmark`` fixture or carries a ``gpu_bench`` marker."""
    names = getattr(item, "fixturenames", ()) or ()
    return "gpu_bench" in names or "benchmark" in names or item.get_closest_marker("gpu_bench") is not None


def select(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Apply ``--gpuperf-only``/``--gpuperf-skip`` (or ``--benchmark-only``/``--benchmark-skip``):
    the other tests are skipped with a reason naming the flag, as pytest-benchmark does."""
    s = _settings(config)
    if not (s.only or s.skip):
        return
    for item in items:
        bench = is_benchmark_test(item)
        if s.only and not bench:
            item.add_marker(pytest.mark.skip(reason=f"pytest-gpuperf: not a benchmark test ({s.only})"))
        elif s.skip and bench:
            item.add_marker(pytest.mark.skip(reason=f"pytest-gpuperf: benchmark test skipped ({s.skip})"))


def owns_marker(item: pytest.Item) -> bool:
    """True when the item has a ``benchmark`` marker that is read here (pytest-benchmark not active)."""
    return _settings(item.config).active and item.get_closest_marker("benchmark") is not None


def marker_options(item: pytest.Item, session: opts.BenchOptions) -> dict[str, Any]:
    """The options ``@pytest.mark.benchmark(...)`` sets on ``item`` (empty when pytest-benchmark
    owns its marker). ``session`` holds the session's options (``max_rounds`` is raised to a larger
    ``min_rounds``, as pytest-benchmark has no cap). Keys that mean nothing here are accepted with
    one warning line each; others raise :class:`~pytest_gpuperf.core.options.OptionError` naming them."""
    if not owns_marker(item):
        return {}
    mark = item.get_closest_marker("benchmark")
    where = f"{item.nodeid}: @pytest.mark.benchmark"
    if mark.args:
        raise opts.OptionError(f"{where} takes keyword arguments only, got positional {mark.args!r}")
    out: dict[str, Any] = {}
    ignored = []
    for key, value in mark.kwargs.items():
        if key in MARKER_MAP:
            out[MARKER_MAP[key]] = opts.convert(MARKER_MAP[key], value, f"{where}({key}=...)")
        elif key == "warmup":
            if not value:
                out["warmup_time"] = 0.0
        elif key in MARKER_IGNORED:
            ignored.append(key)
        else:
            raise opts.OptionError(f"{where}: unknown keyword {key!r}; accepted: {', '.join(MARKER_KEYS)} "
                                   f"(pytest-gpuperf's own options go in @pytest.mark.gpu_bench)")
    if "min_rounds" in out and out["min_rounds"] > session.max_rounds:
        out["max_rounds"] = out["min_rounds"]
    if ignored:
        from pytest_gpuperf.plugin.keys import SESSION_KEY  # the plugin's session object

        gpuperf = item.config.stash.get(SESSION_KEY, None)
        if gpuperf is not None:
            for key in ignored:
                gpuperf.warn(f"@pytest.mark.benchmark({key}=...) is accepted and ignored: {MARKER_IGNORED[key]}")
    return out


def group_of(item: pytest.Item) -> Callable[[str | None], str | None] | None:
    """``--benchmark-group-by``: maps a benchmark's ``group`` option to the group it is shown and
    stored under (pytest-benchmark's grouping keys, joined by spaces); None when not grouping."""
    s = _settings(item.config)
    if not s.group_by or s.group_by == ("group",):
        return None
    name, fullname = item.name, item.nodeid
    callspec = getattr(item, "callspec", None)
    param = callspec.id if callspec is not None else None
    params = dict(callspec.params) if callspec is not None else {}
    parts_of = s.group_by

    def key(group: str | None) -> str | None:
        parts: list[Any] = []
        for part in parts_of:
            if part == "group":
                parts.append(group)
            elif part == "name":
                parts.append(name)
            elif part == "func":
                parts.append(name.split("[")[0])
            elif part == "fullname":
                parts.append(fullname)
            elif part == "fullfunc":
                parts.append(fullname.split("[")[0])
            elif part == "param":
                parts.append(param)
            else:
                pname = part[len("param:"):]
                parts.append(f"{pname}={params[pname]}" if pname in params else None)
        return " ".join(str(p) for p in parts if p) or None

    return key


# ----------------------------------------------------------------------------- the fixture


class BenchmarkPlugin:
    """Registered for the session when ``benchmark`` is served here: the ``benchmark`` and
    ``benchmark_weave`` fixtures, the fixture's ``skipped`` and the header line."""

    def __init__(self, settings: CompatSettings) -> None:
        self.settings = settings

    @pytest.fixture
    def benchmark(self, request: pytest.FixtureRequest, _gpuperf_measurer: Any) -> Any:
        """pytest-benchmark's ``benchmark`` fixture, measured by pytest-gpuperf (see :class:`BenchmarkFixture`);
        its ``_cleanup_callbacks`` run at teardown."""
        from pytest_gpuperf.plugin.keys import BENCH_KEY, SESSION_KEY

        gpuperf = request.config.stash[SESSION_KEY]  # the plugin's session object, set at configure
        item = request.node
        try:
            options = gpuperf.options_for(item)
        except opts.OptionError as exc:
            raise pytest.fail.Exception(str(exc), pytrace=False) from None  # the reason once, without the chained traceback

        def make_bench(device: Any) -> Any:
            existing = item.stash.get(BENCH_KEY, None)  # the test also uses gpu_bench: one GpuBench
            if existing is not None:
                return existing
            bench = gpuperf.make_gpu_bench(request, _gpuperf_measurer, device)
            # pytest-benchmark times a generator's creation: a warning here, not a failure
            bench.lazy_value = gpuperf.warn
            return bench

        fixture = BenchmarkFixture(item, make_bench, group=options.group, disabled=not gpuperf.settings.measuring,
                                   warn=gpuperf.warn, options=options)
        yield fixture
        fixture._cleanup()

    @pytest.fixture
    def benchmark_weave(self) -> Any:
        """pytest-benchmark's ``benchmark_weave`` (its ``benchmark.weave``, aspectlib): not supported;
        a test that requests it errors, saying so and what to use instead."""
        raise pytest.fail.Exception(
            "pytest-gpuperf: the benchmark_weave fixture (pytest-benchmark's benchmark.weave, which patches a "
            "function with aspectlib so that every call is benchmarked) is not supported; request the benchmark "
            "fixture and call benchmark(fn, *args) instead", pytrace=False)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[Any]) -> Any:
        """``benchmark.skipped``: the test's call was skipped (as pytest-benchmark sets it)."""
        outcome = yield
        fixture = getattr(item, "funcargs", {}).get("benchmark")
        if call.when == "call" and isinstance(fixture, BenchmarkFixture):
            fixture.skipped = outcome.get_result().outcome == "skipped"

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        s = self.settings
        lines = []
        if s.taken_over is not None:
            lines.append(f"pytest-gpuperf: pytest-benchmark {s.taken_over} is taken over for this session: its "
                         f"benchmark fixture, marker and --benchmark-* flags are served by pytest-gpuperf")
        lines.extend(f"pytest-gpuperf: {note}" for note in s.notes)
        return lines
