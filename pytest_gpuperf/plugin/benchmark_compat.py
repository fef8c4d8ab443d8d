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

import dataclasses
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

import pytest

from pytest_gpuperf.core import options as opts
from pytest_gpuperf.core.flags import BENCHMARK_FLAGS
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


class FixtureAlreadyUsed(Exception):
    """``benchmark`` was called a second time in one test (pytest-benchmark's error and message)."""


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
    that raised (contained: the report is written without that hook's part)."""
    import platform

    problems: list[str] = []
    machine = {"node": platform.node(), "machine": platform.machine(), "system": platform.system(),
               "release": platform.release(), "python_implementation": platform.python_implementation(),
               "python_version": platform.python_version()}
    commit_info = {"id": commit, "dirty": dirty, "branch": branch}
    machine = _call_hook(config, "pytest_benchmark_generate_machine_info", problems, config=config) or machine
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


class _Logger:
    """pytest-benchmark's session logger as its hooks use it: ``warning`` (and ``warn``/``error``)
    becomes one warning of the session; ``info``/``debug`` are dropped."""

    def __init__(self, warn: Callable[[str], None]) -> None:
        self._warn = warn

    def warning(self, text: Any, *args: Any, **kwargs: Any) -> None:
        self._warn(str(text))

    warn = error = warning

    def info(self, *args: Any, **kwargs: Any) -> None:
        pass

    debug = info


class _BenchmarkSession:
    """What a ``pytest_benchmark_compare_machine_info`` implementation uses of pytest-benchmark's
    session: ``logger`` (:class:`_Logger`) and ``storage.location`` (the baseline file compared)."""

    def __init__(self, warn: Callable[[str], None], location: str) -> None:
        import types

        self.logger = _Logger(warn)
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


def tensor_device(fn: Any, args: Iterable[Any], kwargs: Mapping[str, Any]) -> Any:
    """The ``torch.device`` the call works on: the first CUDA device among the tensors (and
    ``nn.Module`` parameters) in ``args``/``kwargs`` (one level into lists, tuples and dicts) and a
    module ``fn`` or its bound ``self``; else ``cpu`` when tensors were found; else None (unknown).
    Imports nothing: without torch loaded there can be no tensor."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    found: list[Any] = []

    def visit(value: Any, depth: int = 0) -> None:
        if isinstance(value, torch.Tensor):
            found.append(value.device)
        elif isinstance(value, torch.nn.Module):
            # torch's own methods, unbound: a user class may store an attribute named `parameters`
            # (issue 46: TypeError: 'NoneType' object is not callable); a module torch cannot walk
            # tells nothing, it never fails the benchmark
            try:
                first = next(iter(torch.nn.Module.parameters(value)), None)
                first = first if first is not None else next(iter(torch.nn.Module.buffers(value)), None)
            except Exception:  # noqa: BLE001 - a probe of a user object never fails a benchmark
                first = None
            if first is not None:
                found.append(first.device)
        elif depth == 0 and isinstance(value, (list, tuple)):
            for v in value:
                visit(v, 1)
        elif depth == 0 and isinstance(value, dict):
            for v in value.values():
                visit(v, 1)

    for v in (fn, getattr(fn, "__self__", None), *args, *kwargs.values()):
        visit(v)
    devices = [d for d in found if d.type in ("cuda", "cpu")]
    cuda = [d for d in devices if d.type == "cuda"]
    if cuda:
        return cuda[0] if cuda[0].index is not None else torch.device("cuda", torch.cuda.current_device())
    return devices[0] if devices else None


class BenchmarkStats:
    """``benchmark.stats``: pytest-benchmark's statistics of the measurement, in **seconds**.

    Attributes (and ``stats["mean"]``, ``stats.stats.mean``, ``as_dict()`` as there): ``min``,
    ``max``, ``mean``, ``stddev``, ``median``, ``q1``/``q3`` (25th/75th percentiles), ``iqr``,
    ``rounds``, ``iterations`` (calls per round), ``ops`` (calls per second), ``total``,
    ``data`` (per-call times, one per round), ``stddev_outliers``/``iqr_outliers`` and
    ``outliers`` (``"<stddev>;<iqr>"``), ``ld15iqr``/``hd15iqr``. ``result`` is the underlying
    :class:`~pytest_gpuperf.verdict.result.BenchResult` (milliseconds, verdict).
    """

    fields = ("min", "max", "mean", "stddev", "rounds", "median", "iqr", "q1", "q3", "iqr_outliers",
              "stddev_outliers", "outliers", "ld15iqr", "hd15iqr", "ops", "total")

    def __init__(self, fixture: "BenchmarkFixture", result: Any) -> None:
        self.result = result
        self.name, self.fullname, self.group = fixture.name, fixture.fullname, result.group
        self.param, self.params, self.extra_info = fixture.param, fixture.params, fixture.extra_info
        self.iterations = result.calls_per_round
        self.data = [ms / 1e3 for ms in result.samples_ms]
        self.min, self.max, self.mean = result.min_ms / 1e3, result.max_ms / 1e3, result.mean_ms / 1e3
        self.stddev = result.std_ms / 1e3 if len(self.data) > 1 else 0.0
        self.median, self.q1, self.q3 = result.median_ms / 1e3, result.p25_ms / 1e3, result.p75_ms / 1e3
        self.iqr = self.q3 - self.q1
        self.rounds = len(self.data)
        self.total = sum(self.data)
        self.ops = self.rounds / self.total if self.total else 0.0
        lo, hi = self.mean - self.stddev, self.mean + self.stddev
        self.stddev_outliers = sum(1 for v in self.data if v < lo or v > hi)
        fence_lo, fence_hi = self.q1 - 1.5 * self.iqr, self.q3 + 1.5 * self.iqr
        self.iqr_outliers = result.outliers.total  # the result's Tukey counts, same fences
        self.outliers = f"{self.stddev_outliers};{self.iqr_outliers}"
        inside = sorted(v for v in self.data if fence_lo <= v <= fence_hi) or sorted(self.data)
        self.ld15iqr, self.hd15iqr = inside[0], inside[-1]

    @property
    def stats(self) -> "BenchmarkStats":
        """pytest-benchmark's ``benchmark.stats.stats`` (the same object here)."""
        return self

    def __getitem__(self, key: str) -> Any:
        return getattr(self, key)

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key, default)

    def as_dict(self) -> dict[str, Any]:
        """The statistics (seconds) and ``iterations`` as a dict."""
        return {**{f: getattr(self, f) for f in self.fields}, "iterations": self.iterations}


class BenchmarkFixture:
    """pytest-benchmark's ``benchmark`` fixture, served by the test's :class:`~pytest_gpuperf.plugin.bench.GpuBench`.

    ``benchmark(fn, *args, **kwargs)`` and ``benchmark.pedantic(...)`` measure ``fn`` exactly as
    ``gpu_bench`` does (with ``--gpuperf``; otherwise one call, smoke mode) and return ``fn``'s
    return value. The device is that of the tensors passed (CUDA events for CUDA tensors), else the
    test's ``device`` option. After the call ``stats`` holds :class:`BenchmarkStats` (seconds) and
    ``result`` the :class:`~pytest_gpuperf.verdict.result.BenchResult`. ``group`` may be changed before
    the call; ``extra_info`` is stored in the JSON report and the baselines. A second call raises
    :class:`FixtureAlreadyUsed`.
    """

    def __init__(self, node: Any, make_bench: Callable[[Any], Any], *, group: str | None, disabled: bool,
                 warn: Callable[[str], None] = lambda _message: None) -> None:
        self.name = node.name
        self.fullname = node.nodeid
        callspec = getattr(node, "callspec", None)
        self.param = callspec.id if callspec is not None else None
        self.params = dict(callspec.params) if callspec is not None else None
        self.group = group
        self.disabled = disabled
        self.stats: BenchmarkStats | None = None
        self.result: Any = None
        self._make_bench = make_bench
        self._warn = warn
        self._bench: Any = None
        self._extra_info: dict[str, Any] = {}
        self._mode: str | None = None

    @property
    def enabled(self) -> bool:
        return not self.disabled

    @property
    def extra_info(self) -> dict[str, Any]:
        """The test's own data, stored with the result in the JSON report and the baselines."""
        return self._extra_info

    @extra_info.setter
    def extra_info(self, value: Mapping[str, Any]) -> None:
        from pytest_gpuperf.plugin.bench import assign_extra_info

        assign_extra_info(self._extra_info, value, "benchmark.extra_info")

    def _start(self, mode: str) -> None:
        if self._mode:
            raise FixtureAlreadyUsed(f"Fixture can only be used once. Previously it was used in {self._mode} mode.")
        self._mode = mode

    def _bench_for(self, fn: Any, args: Iterable[Any], kwargs: Mapping[str, Any]) -> Any:
        """The GpuBench, made at the first call on the device of its tensors; ``group`` applied."""
        if self._bench is None:
            bench = self._make_bench(tensor_device(fn, args, kwargs))
            bench.extra_info.update(self._extra_info)
            self._extra_info = bench.extra_info  # one dict: later changes reach the stored result
            self._bench = bench
        bench = self._bench
        if self.group != bench.options.group:
            ctx = bench.context
            bench.context = dataclasses.replace(ctx, options=dataclasses.replace(ctx.options, group=self.group))
        return bench

    def _done(self, result: Any) -> Any:
        self.result = result
        self.stats = BenchmarkStats(self, result)
        return result.value

    def __call__(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Benchmark ``fn(*args, **kwargs)``; returns its return value."""
        self._start("benchmark(...)")
        return self._done(self._bench_for(fn, args, kwargs)(fn, *args, **kwargs))

    def pedantic(self, target: Callable[..., Any], args: tuple = (), kwargs: dict[str, Any] | None = None,
                 setup: Callable[[], Any] | None = None, teardown: Callable[..., Any] | None = None,
                 rounds: int = 1, warmup_rounds: int = 0, iterations: int = 1) -> Any:
        """pytest-benchmark's explicit mode: ``rounds`` timed rounds of ``iterations`` calls each
        (timed together; the sample is their mean), after ``warmup_rounds`` untimed rounds.
        ``setup`` runs before every round and may return ``(args, kwargs)``; ``teardown(*args,
        **kwargs)`` after every round. Returns ``target``'s return value. Raises ``ValueError`` as
        pytest-benchmark does (counts, ``setup`` with ``iterations > 1``)."""
        self._start("benchmark.pedantic(...)")
        if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 1:
            raise ValueError("Must have positive int for `iterations`.")
        if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
            raise ValueError("Must have positive int for `rounds`.")
        if isinstance(warmup_rounds, bool) or not isinstance(warmup_rounds, int) or warmup_rounds < 0:
            raise ValueError("Must have positive int for `warmup_rounds`.")
        if iterations > 1 and setup:
            raise ValueError("Can't use more than 1 `iterations` with a `setup` function.")
        if iterations > 1 and teardown:
            raise ValueError("pytest-gpuperf: benchmark.pedantic cannot use a `teardown` function with "
                             f"iterations={iterations}: teardown runs after every round, so use iterations=1")
        kwargs = dict(kwargs or {})
        has_args = bool(args or kwargs)
        pending: list[tuple[tuple, dict]] = []

        def finish_round() -> None:
            if teardown is not None and pending:
                a, k = pending.pop()
                teardown(*a, **k)
            pending.clear()

        def round_setup() -> tuple[tuple, dict]:  # pytest-benchmark's setup semantics, teardown of the last round
            finish_round()
            a, k = args, kwargs
            if setup is not None:
                maybe = setup()
                if maybe:
                    if has_args:
                        raise TypeError("Can't use `args` or `kwargs` if `setup` returns the arguments.")
                    a, k = maybe
            pending.append((tuple(a), dict(k)))
            return tuple(a), dict(k)

        if rounds < opts.DEFAULTS.min_rounds and not self.disabled:
            self._warn(f"{self.fullname}: benchmark.pedantic(rounds={rounds}) gives the regression gate too few "
                       f"samples to see a change (pytest-benchmark's default is 1 round); pass "
                       f"rounds={opts.DEFAULTS.min_rounds} or more")
        bench = self._bench_for(target, args, kwargs)
        try:
            result = bench.pedantic(target, args=tuple(args), kwargs=kwargs,
                                    setup=round_setup if (setup or teardown) else None, rounds=rounds,
                                    warmup_rounds=warmup_rounds * iterations, calls_per_round=iterations)
        finally:
            finish_round()
        return self._done(result)

    def weave(self, target: Any, **kwargs: Any) -> None:
        """Not supported (pytest-benchmark's aspectlib integration): raises ``NotImplementedError``."""
        raise NotImplementedError("pytest-gpuperf: benchmark.weave/benchmark.patch (aspectlib) is not supported; "
                                  "call benchmark(fn, *args) instead")

    patch = weave


class BenchmarkPlugin:
    """Registered for the session when ``benchmark`` is served here: the fixture and the header line."""

    def __init__(self, settings: CompatSettings) -> None:
        self.settings = settings

    @pytest.fixture
    def benchmark(self, request: pytest.FixtureRequest, _gpuperf_measurer: Any) -> Any:
        """pytest-benchmark's ``benchmark`` fixture, measured by pytest-gpuperf (see :class:`BenchmarkFixture`)."""
        from pytest_gpuperf.plugin.keys import BENCH_KEY, SESSION_KEY

        gpuperf = request.config.stash[SESSION_KEY]  # the plugin's session object, set at configure
        item = request.node
        try:
            group = gpuperf.options_for(item).group
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

        return BenchmarkFixture(item, make_bench, group=group, disabled=not gpuperf.settings.measuring,
                                warn=gpuperf.warn)

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        s = self.settings
        lines = []
        if s.taken_over is not None:
            lines.append(f"pytest-gpuperf: pytest-benchmark {s.taken_over} is taken over for this session: its "
                         f"benchmark fixture, marker and --benchmark-* flags are served by pytest-gpuperf")
        lines.extend(f"pytest-gpuperf: {note}" for note in s.notes)
        return lines
