"""Every attribute and method of pytest-benchmark's ``benchmark`` fixture and of its ``stats`` that
a suite can touch works through pytest-gpuperf's drop-in, or raises an error naming it (pytester,
in-process, smoke mode, pytest-benchmark unloaded with ``-p no:benchmark``)."""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

RUN = ("-p", "no:benchmark", "-p", "no:cacheprovider", "-rs")
NUMBER = "isinstance(value, (int, float)) and value >= 0"
NOT_HERE = "(pytest-benchmark's private attribute)"

#: pytest-benchmark 5.3.1's surface, in the order a test touches it: ``BenchmarkFixture``
#: (pytest_benchmark/fixture.py: its __init__'s attributes, its properties and methods, the private
#: ones included) and ``Metadata``/``Stats`` (pytest_benchmark/stats.py), which are
#: ``benchmark.stats``/``benchmark.stats.stats``. Each row: an expression on ``benchmark`` and
#: either an expression on its ``value`` that must hold, or ``(error type, words its message
#: has)``. The test is ``@pytest.mark.benchmark(min_rounds=12, max_time=0.5, warmup=False)``.
SURFACE: list[tuple[str, str | tuple[str, str]]] = [
    # -- the fixture, before the call
    ("benchmark.name", "value == 'test_surface'"),
    ("benchmark.fullname", "value == 'test_surface.py::test_surface'"),
    ("benchmark.param", "value is None"),
    ("benchmark.params", "value is None"),
    ("benchmark.group", "value is None"),
    ("setattr(benchmark, 'group', 'g')", "benchmark.group == 'g'"),
    ("benchmark.disabled", "value is True"),  # smoke mode: one call
    ("benchmark.enabled", "value is False"),
    ("benchmark.has_error", "value is False"),
    ("benchmark.skipped", "value is False"),
    ("benchmark.extra_info", "value == {}"),
    ("setattr(benchmark, 'extra_info', {'k': 1})", "benchmark.extra_info == {'k': 1}"),
    ("benchmark.stats", "value is None"),
    ("benchmark.cprofile", "value is False"),
    ("benchmark.cprofile_loops", "value is None"),
    ("benchmark.cprofile_dump", "value is False"),
    ("benchmark.cprofile_stats", "value is None"),
    # its private attributes with an equivalent: the benchmark's options
    ("benchmark._timer()", "isinstance(value, float)"),
    ("benchmark._min_rounds", "value == 12"),
    ("benchmark._max_time", "value == 0.5"),
    ("benchmark._warmup", "value is False"),
    ("benchmark._disable_gc", "value is True"),
    ("benchmark._precision", "value == 0.005"),
    ("benchmark._confidence", "value == 0.95"),
    ("setattr(benchmark, '_min_rounds', 3)", ("AttributeError", "benchmark._min_rounds (pytest-benchmark's private "
                                                                "attribute) is read from the benchmark's options")),
    ("benchmark._logger.warning('from the logger', warner=None, suspend=True)", "value is None"),
    ("benchmark._logger.debug('dropped', yellow=True, bold=True)", "value is None"),
    ("benchmark._logger.info('dropped', bold=True)", "value is None"),
    ("benchmark._logger.error", "callable(value)"),
    ("benchmark._warner(pytest.PytestWarning('from the warner'))", "value is None"),
    ("benchmark._cleanup_callbacks.append(lambda: open('cleanup.txt', 'w').write(str(benchmark.skipped)))",
     "value is None"),
    ("benchmark._cleanup", "callable(value)"),
    ("benchmark._mode", "value is None"),
    # its private attributes without an equivalent: an error naming each
    ("benchmark._min_time", ("AttributeError", f"'_min_time' {NOT_HERE}: rounds are sized from the warmup")),
    ("benchmark._calibration_precision", ("AttributeError", f"'_calibration_precision' {NOT_HERE}")),
    ("benchmark._add_stats", ("AttributeError", f"'_add_stats' {NOT_HERE}")),
    ("benchmark._precisions", ("AttributeError", f"'_precisions' {NOT_HERE}")),
    ("benchmark._get_precision", ("AttributeError", f"'_get_precision' {NOT_HERE}")),
    ("benchmark._calibrate_timer", ("AttributeError", f"'_calibrate_timer' {NOT_HERE}")),
    ("benchmark._make_runner", ("AttributeError", f"'_make_runner' {NOT_HERE}")),
    ("benchmark._make_stats", ("AttributeError", f"'_make_stats' {NOT_HERE}")),
    ("benchmark._save_cprofile", ("AttributeError", f"'_save_cprofile' {NOT_HERE}")),
    ("benchmark._raw", ("AttributeError", f"'_raw' {NOT_HERE}: pytest-benchmark's own machinery; call benchmark(")),
    ("benchmark._raw_pedantic", ("AttributeError", f"'_raw_pedantic' {NOT_HERE}")),
    ("benchmark._run_until_precise", ("AttributeError", f"'_run_until_precise' {NOT_HERE}")),
    ("benchmark.pedantc", ("AttributeError", "benchmark fixture has no 'pedantc'; accepted: name, fullname,")),
    ("benchmark.weave(len)", ("NotImplementedError", "benchmark.weave/benchmark.patch (aspectlib) is not supported")),
    ("benchmark.patch(len)", ("NotImplementedError", "call benchmark(fn, *args) instead")),
    # -- the call
    ("benchmark(sum, [1, 2])", "value == 3"),
    ("benchmark._mode", "value == 'benchmark(...)'"),
    # -- benchmark.stats: pytest-benchmark's Metadata
    ("benchmark.stats.name", "value == 'test_surface'"),
    ("benchmark.stats.fullname", "value == 'test_surface.py::test_surface'"),
    ("benchmark.stats.group", "value == 'g'"),
    ("benchmark.stats.param", "value is None"),
    ("benchmark.stats.params", "value is None"),
    ("benchmark.stats.extra_info", "value == {'k': 1}"),
    ("benchmark.stats.cprofile_stats", "value is None"),
    ("benchmark.stats.iterations", "value == 1"),
    ("benchmark.stats.options", "value == {'disable_gc': True, 'timer': benchmark._timer, 'min_rounds': 12, "
                                "'max_time': 0.5, 'min_time': None, 'precision': 0.005, 'confidence': 0.95, "
                                "'warmup': False}"),
    ("benchmark.stats.fixture", "value is benchmark"),
    ("benchmark.stats.has_error", "value is False"),
    ("bool(benchmark.stats)", "value is True"),
    ("benchmark.stats.get('mean')", "value == benchmark.stats.stats.mean"),
    ("benchmark.stats.get('no_such_key', 3)", "value == 3"),
    ("benchmark.stats['mean']", "value == benchmark.stats.stats.mean"),
    ("benchmark.stats['name']", "value == 'test_surface'"),
    ("benchmark.stats.as_dict()", "value['name'] == 'test_surface' and value['stats']['data'] == benchmark.stats.stats.data "
                                  "and value['stats']['iterations'] == 1 and value['options']['timer'] == 'perf_counter'"),
    ("benchmark.stats.as_dict(include_data=False)", "'data' not in value['stats'] and 'mean' in value['stats']"),
    ("benchmark.stats.as_dict(flat=True)", "value['mean'] == benchmark.stats.stats.mean and 'stats' not in value"),
    ("benchmark.stats.as_dict(stats=False)", "'stats' not in value and 'mean' not in value and value['group'] == 'g'"),
    ("benchmark.stats.as_dict(include_data=False, stats=True, flat=True, cprofile=('cumtime', 25))",
     "'cprofile' not in value and 'data' not in value"),
    ("benchmark.stats.update(1.0)", ("NotImplementedError", "benchmark.stats.update(...) is not supported")),
    ("benchmark.stats.no_such", ("AttributeError", "benchmark.stats has no 'no_such'; accepted: name,")),
    ("benchmark.stats.mean", "value == benchmark.stats.stats.mean"),  # here also: the statistics directly
    # -- benchmark.stats.stats: pytest-benchmark's Stats (seconds)
    ("benchmark.stats.stats.fields", "'ops' in value and len(value) == 16"),
    ("benchmark.stats.stats.data", "len(value) == benchmark.stats.stats.rounds >= 1"),
    ("benchmark.stats.stats.sorted_data", "value == sorted(benchmark.stats.stats.data)"),
    ("bool(benchmark.stats.stats)", "value is True"),
    ("benchmark.stats.stats.as_dict()", "set(value) == set(benchmark.stats.stats.fields)"),
    ("benchmark.stats.stats.update(1.0)", ("NotImplementedError", "benchmark.stats.stats.update(...) is not supported")),
    ("benchmark.stats.stats.no_such", ("AttributeError", "benchmark.stats.stats has no 'no_such'; accepted: fields")),
    ("benchmark.stats.stats.total", NUMBER),
    ("benchmark.stats.stats.min", NUMBER),
    ("benchmark.stats.stats.max", "value >= benchmark.stats.stats.min"),
    ("benchmark.stats.stats.mean", NUMBER),
    ("benchmark.stats.stats.stddev", NUMBER),
    ("benchmark.stats.stats.stddev_outliers", "isinstance(value, int)"),
    ("benchmark.stats.stats.rounds", "isinstance(value, int)"),
    ("benchmark.stats.stats.median", NUMBER),
    ("benchmark.stats.stats.ld15iqr", NUMBER),
    ("benchmark.stats.stats.hd15iqr", NUMBER),
    ("benchmark.stats.stats.q1", NUMBER),
    ("benchmark.stats.stats.q3", NUMBER),
    ("benchmark.stats.stats.iqr", NUMBER),
    ("benchmark.stats.stats.iqr_outliers", "isinstance(value, int)"),
    ("benchmark.stats.stats.outliers", "re.fullmatch(r'\\d+;\\d+', value)"),
    ("benchmark.stats.stats.ops", NUMBER),
    # -- a second call: pytest-benchmark's error, and has_error
    ("benchmark.pedantic(sum, args=([1],))", ("FixtureAlreadyUsed", "Previously it was used in benchmark(...) mode.")),
    ("benchmark.has_error", "value is True"),
    ("benchmark.stats.has_error", "value is True"),
]

INNER = '''
import re

import pytest

SURFACE = {surface!r}


@pytest.mark.benchmark(min_rounds=12, max_time=0.5, warmup=False)
def test_surface(benchmark):
    wrong = []
    for expression, check in SURFACE:
        try:
            value = eval(expression, {{"benchmark": benchmark, "pytest": pytest}})
        except Exception as exc:
            got = f"{{type(exc).__name__}}: {{exc}}"
            if not (isinstance(check, tuple) and type(exc).__name__ == check[0] and check[1] in str(exc)):
                wrong.append(f"{{expression}} raised {{got}}")
            continue
        if isinstance(check, tuple):
            wrong.append(f"{{expression}} gave {{value!r}}, not {{check[0]}}")
        elif not eval(check, {{"benchmark": benchmark, "value": value, "re": re}}):
            wrong.append(f"{{expression}} gave {{value!r}}: not {{check}}")
    assert not wrong, "\\n".join(wrong)


def test_skipped(benchmark):
    benchmark(sum, [1])
    benchmark._cleanup_callbacks.append(lambda: open("skipped.txt", "w").write(str(benchmark.skipped)))
    pytest.skip("the test skips itself after its benchmark")


def test_raising_call_sets_has_error(benchmark):
    with pytest.raises(ZeroDivisionError):
        benchmark(lambda: 1 / 0)
    assert benchmark.has_error is True


def test_weave(benchmark_weave):
    pass
'''


def test_every_attribute_of_pytest_benchmarks_fixture_and_stats_works_or_names_itself(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_surface=INNER.format(surface=SURFACE))
    rec = pytester.runpytest(*RUN)
    rec.assert_outcomes(passed=2, skipped=1, errors=1)
    rec.stdout.fnmatch_lines(["*ERROR at setup of test_weave*", "*pytest-gpuperf: the benchmark_weave fixture "
                              "(pytest-benchmark's benchmark.weave, which patches a function with aspectlib so that "
                              "every call is benchmarked) is not supported; request the benchmark fixture and call "
                              "benchmark(fn, *args) instead"])
    assert "from the warner" in rec.stdout.str()  # _warner is the test's warn: pytest's warnings summary
    # _cleanup_callbacks run at teardown, after the call's outcome set `skipped`
    assert pytester.path.joinpath("cleanup.txt").read_text() == "False"
    assert pytester.path.joinpath("skipped.txt").read_text() == "True"


def _names(source: str, classes: dict[str, bool]) -> set[str]:
    """The attribute and method names of ``classes`` (name -> whether its private names count) in
    ``source``: their methods, class attributes and the ``self.X = ...`` of their methods (dunder
    names aside)."""
    names: set[str] = set()
    for node in ast.parse(source).body:
        if not (isinstance(node, ast.ClassDef) and node.name in classes):
            continue
        found = {item.name for item in node.body if isinstance(item, ast.FunctionDef)}
        for item in node.body:
            if isinstance(item, (ast.Assign, ast.AnnAssign)):
                targets = item.targets if isinstance(item, ast.Assign) else [item.target]
                found.update(t.id for t in targets if isinstance(t, ast.Name))
        found.update(n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)
                     and isinstance(n.value, ast.Name) and n.value.id == "self")
        names |= {n for n in found if not n.startswith("__") and (classes[node.name] or not n.startswith("_"))}
    return names


def test_the_surface_table_covers_every_name_of_the_installed_pytest_benchmark() -> None:
    """Where pytest-benchmark is installed, every name its fixture (private ones included),
    ``Metadata`` and ``Stats`` define (read from its source, not imported) is one that
    :data:`SURFACE` touches."""
    spec = importlib.util.find_spec("pytest_benchmark")
    if spec is None or spec.origin is None:
        pytest.skip("pytest-benchmark is not installed: nothing to compare the table with")
    package = Path(spec.origin).parent
    fixture = _names((package / "fixture.py").read_text(), {"BenchmarkFixture": True})
    stats = _names((package / "stats.py").read_text(), {"Metadata": False, "Stats": False})
    touched = {name for expression, _ in SURFACE for pair in re.findall(r"\.(\w+)|'(\w+)'", expression)
               for name in pair if name}
    assert len(fixture) > 30 and len(stats) > 25  # the source was read
    assert sorted(fixture - touched) == [] and sorted(stats - touched) == []
