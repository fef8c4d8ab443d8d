"""pytest-benchmark's ``benchmark`` fixture object and its ``stats``, served by the test's ``GpuBench``.

:class:`BenchmarkFixture` is what a test written for pytest-benchmark gets as ``benchmark``;
:class:`BenchmarkStats` (pytest-benchmark's ``Metadata``) and :class:`Stats` are ``benchmark.stats``
and ``benchmark.stats.stats``. Every public attribute and method of pytest-benchmark 5's
``BenchmarkFixture`` (``pytest_benchmark/fixture.py``) and of its ``Metadata``/``Stats``
(``pytest_benchmark/stats.py``) works here, and so do the private attributes of its fixture that
have an equivalent (``_min_rounds``, ``_max_time``, ``_timer``, ``_logger``, ...); any other name
raises an ``AttributeError`` naming it and saying what is accepted. Registered by
:mod:`pytest_gpuperf.plugin.benchmark_compat`.

Imports neither torch nor numpy: the plugin loads this module at start-up.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import time
from typing import Any, Callable, Iterable, Mapping

from pytest_gpuperf.core import options as opts


class FixtureAlreadyUsed(Exception):
    """``benchmark`` was called a second time in one test (pytest-benchmark's error and message)."""


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


class Logger:
    """pytest-benchmark's session logger as its hooks and its fixture's ``_logger`` use it:
    ``warning`` (and ``warn``/``error``) becomes one warning of the session; ``info``/``debug``
    are dropped. Extra arguments (``warner=``, ``bold=``, ...) are accepted and ignored."""

    def __init__(self, warn: Callable[[str], None]) -> None:
        self._warn = warn

    def warning(self, text: Any, *args: Any, **kwargs: Any) -> None:
        """One warning line of the session's summary."""
        self._warn(str(text))

    warn = error = warning

    def info(self, *args: Any, **kwargs: Any) -> None:
        """Dropped (pytest-benchmark prints it at its verbose levels)."""

    debug = info


def _no_attribute(owner: str, name: str, accepted: Iterable[str], why: str | None = None) -> AttributeError:
    """The error for a name that ``owner`` lacks: names it, says why (pytest-benchmark's private
    attribute without an equivalent) and what is accepted."""
    reason = f" (pytest-benchmark's private attribute): {why}" if why else ""
    return AttributeError(f"pytest-gpuperf's {owner} has no {name!r}{reason}; accepted: {', '.join(accepted)}")


def _not_supported(what: str, instead: str) -> NotImplementedError:
    return NotImplementedError(f"pytest-gpuperf: {what} is not supported: {instead}")


class Stats:
    """pytest-benchmark's ``Stats`` (``benchmark.stats.stats``): the measurement's statistics in **seconds**.

    ``min``, ``max``, ``mean``, ``stddev``, ``median``, ``q1``/``q3`` (25th/75th percentiles),
    ``iqr``, ``rounds``, ``ops`` (calls per second), ``total``, ``data`` (per-call times, one per
    round) and ``sorted_data``, ``stddev_outliers``/``iqr_outliers`` and ``outliers``
    (``"<stddev>;<iqr>"``), ``ld15iqr``/``hd15iqr``; ``as_dict()`` holds :attr:`fields`.
    """

    fields = ("min", "max", "mean", "stddev", "rounds", "median", "iqr", "q1", "q3", "iqr_outliers",
              "stddev_outliers", "outliers", "ld15iqr", "hd15iqr", "ops", "total")
    #: the names a suite may read (for the error on any other)
    names = ("fields", *fields, "data", "sorted_data", "as_dict", "update")

    def __init__(self, result: Any) -> None:
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
    def sorted_data(self) -> list[float]:
        """``data``, sorted."""
        return sorted(self.data)

    def __bool__(self) -> bool:
        return bool(self.data)

    def as_dict(self) -> dict[str, Any]:
        """The statistics (:attr:`fields`, seconds) as a dict."""
        return {f: getattr(self, f) for f in self.fields}

    def update(self, duration: float) -> None:
        """Not supported: the statistics are the measurement's (raises ``NotImplementedError``)."""
        raise _not_supported("benchmark.stats.stats.update(...)", "the statistics are pytest-gpuperf's "
                             "measurement, which the regression gate decides on; time with benchmark(fn, *args)")

    def __getattr__(self, name: str) -> Any:
        raise _no_attribute("benchmark.stats.stats", name, self.names)


class BenchmarkStats:
    """``benchmark.stats``: pytest-benchmark's ``Metadata`` of the measurement (its statistics in **seconds**).

    As there: ``name``, ``fullname``, ``group``, ``param``, ``params``, ``extra_info``,
    ``iterations`` (calls per round), ``stats`` (:class:`Stats`), ``options`` (pytest-benchmark's
    option names with this measurement's values), ``fixture``, ``has_error``, ``cprofile_stats``
    (None: pytest-gpuperf runs no cProfile), ``stats["mean"]``/``get("mean")``, ``bool()`` and
    ``as_dict(include_data=True, flat=False, stats=True, cprofile=None)``. Here also: each of
    :class:`Stats`' names read directly (``benchmark.stats.mean``) and ``result``, the underlying
    :class:`~pytest_gpuperf.verdict.result.BenchResult` (milliseconds, verdict).
    """

    names = tuple(dict.fromkeys(("name", "fullname", "group", "param", "params", "extra_info", "iterations", "stats",
                                 "options", "fixture", "has_error", "cprofile_stats", "result", "get", "as_dict",
                                 "update", *Stats.names)))

    def __init__(self, fixture: "BenchmarkFixture", result: Any) -> None:
        self.result = result
        self.fixture = fixture
        self.name, self.fullname, self.group = fixture.name, fixture.fullname, result.group
        self.param, self.params, self.extra_info = fixture.param, fixture.params, fixture.extra_info
        self.cprofile_stats = None
        self.iterations = result.calls_per_round
        self.stats = Stats(result)
        self.options = fixture.options_dict()

    @property
    def has_error(self) -> bool:
        """Whether the benchmarked call raised (the fixture's ``has_error``)."""
        return self.fixture.has_error

    def __bool__(self) -> bool:
        return bool(self.stats)

    def __getitem__(self, key: str) -> Any:
        try:
            return getattr(self.stats, key)
        except AttributeError:
            return getattr(self, key)

    def get(self, key: str, default: Any = None) -> Any:
        """``stats[key]``, else ``default``."""
        try:
            return getattr(self.stats, key)
        except AttributeError:
            return getattr(self, key, default)

    def as_dict(self, include_data: bool = True, flat: bool = False, stats: bool = True,
                cprofile: Any = None) -> dict[str, Any]:
        """pytest-benchmark's dict of the benchmark: ``group``, ``name``, ``fullname``, ``params``,
        ``param``, ``extra_info``, ``options`` (a callable as its name); with ``stats`` the
        statistics (and ``data`` with ``include_data``, and ``iterations``) under ``"stats"``, or
        at the top with ``flat``. ``cprofile`` is accepted (there is no cProfile data here)."""
        out: dict[str, Any] = {
            "group": self.group, "name": self.name, "fullname": self.fullname, "params": self.params,
            "param": self.param, "extra_info": self.extra_info,
            "options": {k: getattr(v, "__name__", str(v)) if callable(v) else v for k, v in self.options.items()},
        }
        if stats:
            values = self.stats.as_dict()
            if include_data:
                values["data"] = self.stats.data
            values["iterations"] = self.iterations
            if flat:
                out.update(values)
            else:
                out["stats"] = values
        return out

    def update(self, duration: float) -> None:
        """Not supported: the statistics are the measurement's (raises ``NotImplementedError``)."""
        raise _not_supported("benchmark.stats.update(...)", "the statistics are pytest-gpuperf's measurement, "
                             "which the regression gate decides on; time with benchmark(fn, *args)")

    def __getattr__(self, name: str) -> Any:
        inner = self.__dict__.get("stats")
        if inner is not None and name in Stats.names:
            return getattr(inner, name)
        raise _no_attribute("benchmark.stats", name, self.names)


class _Setting:
    """A private attribute of pytest-benchmark's fixture with an equivalent here: read from the
    benchmark's options; setting it is an error saying where the option is set."""

    def __init__(self, read: Callable[["BenchmarkFixture"], Any], where: str) -> None:
        self.read, self.where, self.name = read, where, ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        return self if obj is None else self.read(obj)

    def __set__(self, obj: Any, value: Any) -> None:
        raise AttributeError(f"pytest-gpuperf: benchmark.{self.name} (pytest-benchmark's private attribute) is read "
                             f"from the benchmark's options and cannot be set; {self.where}")


def _records_errors(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` sets the fixture's ``has_error`` when it raises, as pytest-benchmark's do."""
    @functools.wraps(method)
    def wrapper(self: "BenchmarkFixture", *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except Exception:
            self.has_error = True
            raise

    return wrapper


_INTERNAL = "pytest-benchmark's own machinery; call benchmark(fn, *args) or benchmark.pedantic(...)"
#: pytest-benchmark 5's private fixture attributes without an equivalent here -> why
NO_EQUIVALENT = {
    "_min_time": "rounds are sized from the warmup (no minimum round time to set)",
    "_calibration_precision": "rounds are sized from the warmup, not calibrated against the timer",
    "_add_stats": "pytest-gpuperf's session records each result itself (see benchmark.stats, benchmark.result)",
    "_precisions": "no timer calibration here (CUDA events on a GPU, time.perf_counter_ns on the CPU)",
    **{name: _INTERNAL for name in ("_get_precision", "_calibrate_timer", "_make_runner", "_make_stats",
                                    "_save_cprofile", "_raw", "_raw_pedantic", "_run_until_precise")},
}


class BenchmarkFixture:
    """pytest-benchmark's ``benchmark`` fixture, served by the test's :class:`~pytest_gpuperf.plugin.bench.GpuBench`.

    ``benchmark(fn, *args, **kwargs)`` and ``benchmark.pedantic(...)`` measure ``fn`` exactly as
    ``gpu_bench`` does (with ``--gpuperf``; otherwise one call, smoke mode) and return ``fn``'s
    return value. The device is that of the tensors passed (CUDA events for CUDA tensors), else the
    test's ``device`` option. After the call ``stats`` holds :class:`BenchmarkStats` (seconds) and
    ``result`` the :class:`~pytest_gpuperf.verdict.result.BenchResult`. ``group`` may be changed before
    the call; ``extra_info`` is stored in the JSON report and the baselines. A second call raises
    :class:`FixtureAlreadyUsed`. ``has_error``: the call raised; ``skipped``: the test's call was
    skipped (set after it); ``cprofile``/``cprofile_loops``/``cprofile_dump``/``cprofile_stats``:
    pytest-benchmark's defaults (no cProfile here). pytest-benchmark's private ``_min_rounds``,
    ``_max_time``, ``_warmup``, ``_precision``, ``_confidence``, ``_disable_gc`` and ``_timer``
    read the benchmark's options; ``_logger`` warns into the summary, ``_warner`` is the test's
    ``warn``, and the callables in ``_cleanup_callbacks`` run at the test's teardown.
    """

    #: the names a suite may use (for the error on any other)
    PUBLIC = ("name", "fullname", "param", "params", "group", "disabled", "enabled", "has_error", "skipped",
              "extra_info", "stats", "result", "cprofile", "cprofile_loops", "cprofile_dump", "cprofile_stats",
              "pedantic", "weave", "patch")
    PRIVATE = ("_min_rounds", "_max_time", "_warmup", "_precision", "_confidence", "_disable_gc", "_timer",
               "_logger", "_warner", "_cleanup_callbacks", "_mode", "_cleanup")

    _min_rounds = _Setting(lambda f: f._options.min_rounds,
                           "set it with @pytest.mark.benchmark(min_rounds=...) or --benchmark-min-rounds")
    _max_time = _Setting(lambda f: float(f._options.max_time),
                         "set it with @pytest.mark.benchmark(max_time=...) or --benchmark-max-time")
    _warmup = _Setting(lambda f: f._options.warmup_time > 0,
                       "set it with @pytest.mark.benchmark(warmup=False) or --benchmark-warmup=off")
    _precision = _Setting(lambda f: f._options.target_precision or None,
                          "set it with @pytest.mark.benchmark(precision=...)")
    _confidence = _Setting(lambda f: 0.95 if f._options.target_precision else None,
                           "early stopping uses the 95% confidence interval of the median")
    _disable_gc = _Setting(lambda f: True, "the garbage collector is always off during timed rounds")
    _timer = _Setting(lambda f: time.perf_counter,
                      "timing uses CUDA events on a GPU and time.perf_counter_ns on the CPU")

    def __init__(self, node: Any, make_bench: Callable[[Any], Any], *, group: str | None, disabled: bool,
                 warn: Callable[[str], None] = lambda _message: None,
                 options: opts.BenchOptions = opts.DEFAULTS) -> None:
        self.name = node.name
        self.fullname = node.nodeid
        callspec = getattr(node, "callspec", None)
        self.param = callspec.id if callspec is not None else None
        self.params = dict(callspec.params) if callspec is not None else None
        self.group = group
        self.disabled = disabled
        self.has_error = False
        self.skipped = False
        self.cprofile, self.cprofile_loops, self.cprofile_dump, self.cprofile_stats = False, None, False, None
        self.stats: BenchmarkStats | None = None
        self.result: Any = None
        self._options = options
        self._logger = Logger(warn)
        self._warner = getattr(node, "warn", None) or (lambda warning: warn(str(warning)))
        self._cleanup_callbacks: list[Callable[[], Any]] = []
        self._make_bench = make_bench
        self._warn = warn
        self._bench: Any = None
        self._extra_info: dict[str, Any] = {}
        self._mode: str | None = None

    def __getattr__(self, name: str) -> Any:  # only for names the fixture lacks
        accepted = (*self.PUBLIC, *self.PRIVATE)
        raise _no_attribute("benchmark fixture", name, accepted, NO_EQUIVALENT.get(name))

    @property
    def enabled(self) -> bool:
        """Not ``disabled`` (smoke mode: one call)."""
        return not self.disabled

    @property
    def extra_info(self) -> dict[str, Any]:
        """The test's own data, stored with the result in the JSON report and the baselines."""
        return self._extra_info

    @extra_info.setter
    def extra_info(self, value: Mapping[str, Any]) -> None:
        from pytest_gpuperf.plugin.bench import assign_extra_info

        assign_extra_info(self._extra_info, value, "benchmark.extra_info")

    def options_dict(self) -> dict[str, Any]:
        """pytest-benchmark's ``stats.options``: its option names with this benchmark's values
        (``min_time`` None: rounds are sized from the warmup)."""
        return {"disable_gc": self._disable_gc, "timer": self._timer, "min_rounds": self._min_rounds,
                "max_time": self._max_time, "min_time": None, "precision": self._precision,
                "confidence": self._confidence, "warmup": self._warmup}

    def _cleanup(self) -> None:
        """At the test's teardown: run the callables in ``_cleanup_callbacks``, last added first."""
        while self._cleanup_callbacks:
            self._cleanup_callbacks.pop()()

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

    @_records_errors
    def __call__(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Benchmark ``fn(*args, **kwargs)``; returns its return value."""
        self._start("benchmark(...)")
        return self._done(self._bench_for(fn, args, kwargs)(fn, *args, **kwargs))

    @_records_errors
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
