"""End-to-end: a pytest-benchmark suite runs unmodified (issue 16), through ``pytester``.

Every run that asserts a verdict takes its timings from ``timings.json`` (tests/scripted.py): the
benchmarked torch ops really run, but their per-call time is scripted, so the answer is the same
on any machine. pytest-benchmark itself is not installed here; the coexistence tests use a stand-in
with its plugin module name and option names, and the real package when one is available.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
from pathlib import Path

import pytest

from cuda_marks import needs_cuda
from scripted import script_timings, set_timings

pytest_plugins = ["pytester"]

RUN = ("-p", "no:cacheprovider")
STEADY = {"ms": 1.0, "cv": 0.02, "seed": 1}
RERUN = {"ms": 1.0, "cv": 0.02, "seed": 2}
TWICE_AS_SLOW = {"ms": 2.0, "cv": 0.02, "seed": 3}

# The user's own conftest fixtures (device, dtype), as a pytest-benchmark project would have them.
USER_CONFTEST = """
import pytest
import torch

@pytest.fixture(params=["cpu"])
def device(request):
    return torch.device(request.param)

@pytest.fixture(params=[torch.float32, torch.float64], ids=["fp32", "fp64"])
def dtype(request):
    return request.param
"""

# A pytest-benchmark suite of torch ops, unmodified.
SUITE = """
import pytest
import torch

SIZES = [32, 64]


def blur(image):
    return torch.nn.functional.avg_pool2d(image, 3, stride=1, padding=1)


@pytest.mark.parametrize("size", SIZES)
def test_matmul(benchmark, device, dtype, size):
    data = torch.randn(size, size, device=device, dtype=dtype)
    out = benchmark(torch.matmul, data, data)
    assert out.shape == (size, size)


@pytest.mark.parametrize("size", SIZES)
def test_blur(benchmark, device, dtype, size):
    data = torch.randn(1, 3, size, size, device=device, dtype=dtype)
    benchmark.group = "filters"
    out = benchmark(blur, image=data)
    assert out.shape == data.shape
    benchmark.extra_info["pixels"] = size * size


@pytest.mark.benchmark(group="reductions", min_rounds=12, warmup=False)
def test_sum_pedantic(benchmark, device):
    data = torch.randn(1000, device=device)

    def setup():
        return (data.clone(),), {}

    total = benchmark.pedantic(torch.sum, setup=setup, rounds=15, warmup_rounds=2)
    assert total.shape == ()


@pytest.mark.benchmark(group="reductions")
def test_cumsum_iterations(benchmark, device):
    data = torch.randn(1000, device=device)
    out = benchmark.pedantic(torch.cumsum, args=(data,), kwargs={"dim": 0}, rounds=12, iterations=4)
    assert out.shape == data.shape


def test_plain_correctness():
    assert torch.ones(2).sum() == 2
"""
N_BENCH = 10  # 4 matmul + 4 blur + 2 pedantic
# Shorter measurements (project settings, not the suite's): the scripted clock makes them exact.
INI = "[pytest]\ngpuperf_max_time = 0.2\ngpuperf_warmup_time = 0.01\n"


def _suite(pytester: pytest.Pytester, timings=STEADY) -> None:
    pytester.makeini(INI)
    pytester.makepyfile(test_ops=SUITE)
    script_timings(pytester, timings, conftest=USER_CONFTEST)


def _baselines(pytester: pytest.Pytester) -> dict:
    (path,) = sorted(pytester.path.joinpath("baselines").rglob("test_ops.json"))
    return json.loads(path.read_text())["benchmarks"]


def _groups(out: str) -> list[str]:
    return re.findall(r"^group: (.+)$", out, flags=re.M)


def test_pytest_benchmark_suite_runs_unmodified_records_compares_and_gates(pytester: pytest.Pytester) -> None:
    _suite(pytester)
    smoke = pytester.runpytest(*RUN)  # plain pytest: each benchmark runs once, as a correctness test
    smoke.assert_outcomes(passed=N_BENCH + 1)
    smoke.stdout.fnmatch_lines([f"*gpuperf: {N_BENCH} benchmark(s) ran once (smoke mode)*"])

    pytester.runpytest("--gpuperf-update-baselines", *RUN).assert_outcomes(passed=N_BENCH + 1)
    stored = _baselines(pytester)
    assert sorted(stored) == sorted(
        [f"test_matmul[cpu-{t}-{n}]" for t in ("fp32", "fp64") for n in (32, 64)]
        + [f"test_blur[cpu-{t}-{n}]" for t in ("fp32", "fp64") for n in (32, 64)]
        + ["test_sum_pedantic[cpu]", "test_cumsum_iterations[cpu]"])
    assert stored["test_blur[cpu-fp32-64]"]["extra_info"] == {"pixels": 4096}  # set after the call
    assert stored["test_blur[cpu-fp32-64]"]["group"] == "filters"  # benchmark.group set in the test
    assert stored["test_sum_pedantic[cpu]"]["rounds"] == 15 and stored["test_sum_pedantic[cpu]"]["group"] == "reductions"
    assert stored["test_sum_pedantic[cpu]"]["options"]["min_rounds"] == 12  # from the benchmark marker
    assert stored["test_sum_pedantic[cpu]"]["options"]["warmup_time"] == 0.0  # warmup=False
    assert stored["test_cumsum_iterations[cpu]"]["calls_per_round"] == 4  # iterations

    set_timings(pytester, RERUN)
    rerun = pytester.runpytest("--gpuperf", *RUN)
    rerun.assert_outcomes(passed=N_BENCH + 1)
    out = rerun.stdout.str()
    assert _groups(out) == ["(none)", "filters", "reductions"]  # pytest-benchmark's groups: marker/attribute
    assert out.count(" unchanged") == N_BENCH and "regressed" not in out

    set_timings(pytester, RERUN, test_matmul=TWICE_AS_SLOW)  # the gate: a 2x slower op fails its tests
    slow = pytester.runpytest("--gpuperf", *RUN)
    slow.assert_outcomes(passed=N_BENCH + 1 - 4, failed=4)
    assert len(re.findall(r"(?m)^regressed .*\n  test_ops\.py::test_matmul\[", slow.stdout.str())) == 4


@pytest.mark.parametrize("group_by, groups", [
    ("param:size", ["(none)", "size=32", "size=64"]),
    ("func", ["test_blur", "test_cumsum_iterations", "test_matmul", "test_sum_pedantic"]),
    ("group,param:dtype", ["dtype=torch.float32", "dtype=torch.float64", "filters dtype=torch.float32",
                           "filters dtype=torch.float64", "reductions"]),
])
def test_benchmark_group_by_groups_the_summary_as_pytest_benchmark(pytester: pytest.Pytester, group_by: str,
                                                                   groups: list[str]) -> None:
    _suite(pytester)
    rec = pytester.runpytest("--gpuperf", f"--benchmark-group-by={group_by}", *RUN)
    rec.assert_outcomes(passed=N_BENCH + 1)
    assert _groups(rec.stdout.str()) == groups


PEDANTIC = """
import sys

import pytest

log = []

def fn(k):
    log.append(("call", k))
    return 2 * k

def test_setup_teardown(benchmark):
    # with torch.compile's machinery loaded (the count gate loads it) a benchmark makes one
    # untimed call before its warmup, to tell a first compile from recompilations
    first = int("torch._dynamo.eval_frame" in sys.modules)
    state = {"n": 0}

    def setup():
        state["n"] += 1
        log.append(("setup", state["n"]))
        return (state["n"],), {}

    def teardown(k):
        log.append(("teardown", k))

    out = benchmark.pedantic(fn, setup=setup, teardown=teardown, rounds=5, warmup_rounds=2)
    calls = [k for what, k in log if what == "call"]
    # each round: setup, one call with its arguments, teardown with the same arguments
    assert log == [e for k in range(1, len(calls) + 1) for e in (("setup", k), ("call", k), ("teardown", k))]
    if benchmark.enabled:  # 2 warmup + 5 timed rounds + 1 call for peak memory + 1 that counts ops
        assert len(calls) == 9 + first and out == 2 * (7 + first)
        assert benchmark.stats.rounds == 5 and benchmark.result.warmup_calls == 2
        assert benchmark.stats.iterations == 1
    else:  # smoke mode: once
        assert calls == [1] and out == 2

def test_iterations(benchmark):
    first = int("torch._dynamo.eval_frame" in sys.modules)
    log.clear()
    out = benchmark.pedantic(fn, args=(3,), rounds=4, iterations=5, warmup_rounds=1)
    assert out == 6
    if benchmark.enabled:  # 1 x 5 warmup, 4 x 5 timed, 1 for peak memory, 1 that counts (+1, see above)
        assert len(log) == 27 + first and benchmark.stats.iterations == 5 and benchmark.result.calls_per_round == 5
        assert benchmark.stats.mean == pytest.approx(0.002)  # per call: the round's time / 5

def test_setup_with_iterations_is_an_error(benchmark):
    with pytest.raises(ValueError, match="Can't use more than 1 `iterations` with a `setup` function."):
        benchmark.pedantic(fn, setup=lambda: None, iterations=2)

def test_setup_returning_arguments_with_arguments_is_an_error(benchmark):
    with pytest.raises(TypeError, match="Can't use `args` or `kwargs` if `setup` returns the arguments."):
        benchmark.pedantic(fn, args=(1,), setup=lambda: ((2,), {}))

@pytest.mark.parametrize("bad", [dict(rounds=0), dict(iterations=1.5), dict(warmup_rounds=-1)])
def test_bad_counts_are_errors(benchmark, bad):
    with pytest.raises(ValueError, match="Must have positive int"):
        benchmark.pedantic(fn, args=(1,), **bad)

def test_second_call_is_pytest_benchmarks_error(benchmark):
    from pytest_gpuperf.plugin.benchmark_compat import FixtureAlreadyUsed

    assert benchmark(fn, 4) == 8
    with pytest.raises(FixtureAlreadyUsed, match=r"Fixture can only be used once. Previously it was used in "
                                                 r"benchmark\\(...\\) mode."):
        benchmark.pedantic(fn, args=(1,))
"""


@pytest.mark.parametrize("measuring", [False, True], ids=["smoke", "gpuperf"])
def test_pedantic_has_pytest_benchmarks_meaning(pytester: pytest.Pytester, measuring: bool) -> None:
    pytester.makepyfile(test_pedantic=PEDANTIC)
    script_timings(pytester, {"ms": 2.0, "cv": 0.0})
    rec = pytester.runpytest(*(["--gpuperf"] if measuring else []), *RUN)
    rec.assert_outcomes(passed=8)


def test_pedantic_with_too_few_rounds_for_the_gate_warns(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_p(benchmark):\n    benchmark.pedantic(sum, args=([1],))\n")
    script_timings(pytester, STEADY)
    rec = pytester.runpytest("--gpuperf", *RUN)
    rec.assert_outcomes(passed=1)
    rec.stdout.fnmatch_lines(["warning: *::test_p: benchmark.pedantic(rounds=1) gives the regression gate too few "
                              "samples to see a change (pytest-benchmark's default is 1 round); pass rounds=10 or more"])
    assert "pedantic(rounds=" not in pytester.runpytest(*RUN).stdout.str()  # smoke mode: no gate, no warning


def test_stats_result_and_attributes(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.parametrize("n", [100])
        def test_stats(benchmark, n):
            assert benchmark.name == "test_stats[100]" and benchmark.fullname.endswith(".py::test_stats[100]")
            assert benchmark.param == "100" and benchmark.params == {"n": 100} and benchmark.group is None
            assert benchmark.stats is None
            assert benchmark(sum, range(n)) == sum(range(n))  # fn's return value, not a result
            s = benchmark.stats
            assert s.mean == pytest.approx(0.002) and s["median"] == pytest.approx(0.002)
            assert s.stats.min == pytest.approx(0.002) and s.ops == pytest.approx(500.0) and s.stddev < 1e-9
            assert s.rounds == benchmark.result.rounds >= 10 and s.as_dict()["stats"]["iterations"] == 1
            assert benchmark.result.comparison.verdict.value == "no-baseline"
        """
    )
    script_timings(pytester, {"ms": 2.0, "cv": 0.0})
    pytester.runpytest("--gpuperf", *RUN).assert_outcomes(passed=1)


def test_extra_info_goes_to_the_json_report_and_baselines_for_both_fixtures(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        def test_bm(benchmark):
            benchmark.extra_info["before"] = 1
            benchmark(sum, [1, 2])
            benchmark.extra_info["after"] = [1, 2]

        def test_bm_assigned(benchmark):
            benchmark.extra_info = {"model": "resnet"}
            benchmark(sum, [1, 2])

        @pytest.mark.gpu_bench
        def test_gb(gpu_bench):
            gpu_bench.extra_info["flops"] = 2 ** 30
            r = gpu_bench(sum, [1, 2])
            assert r.extra_info == {"flops": 2 ** 30}

        def test_none(benchmark):
            benchmark(sum, [1])
        """
    )
    script_timings(pytester, STEADY)
    pytester.runpytest("--gpuperf-update-baselines", "--benchmark-json", "report.json", *RUN).assert_outcomes(passed=4)
    report = json.loads(pytester.path.joinpath("report.json").read_text())["benchmarks"]
    prefix = "test_extra_info_goes_to_the_json_report_and_baselines_for_both_fixtures.py::"
    assert report[prefix + "test_bm"]["extra_info"] == {"before": 1, "after": [1, 2]}
    assert report[prefix + "test_bm_assigned"]["extra_info"] == {"model": "resnet"}
    assert report[prefix + "test_gb"]["extra_info"] == {"flops": 2 ** 30}
    assert "extra_info" not in report[prefix + "test_none"]
    (path,) = pytester.path.joinpath("baselines").rglob("*.json")
    stored = json.loads(path.read_text())["benchmarks"]
    assert stored["test_bm"]["extra_info"] == {"before": 1, "after": [1, 2]}
    from pytest_gpuperf.storage.schema import validate

    validate(json.loads(path.read_text()), "baseline")
    validate(json.loads(pytester.path.joinpath("report.json").read_text()), "report")


def test_benchmark_and_gpu_bench_in_one_test_share_one_measurement_set(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_both(benchmark, gpu_bench):
            gpu_bench.named("first")(sum, [1])
            assert benchmark(sum, [1, 2]) == 3
            assert [r.benchmark_id for r in gpu_bench.results] == ["test_both::first", "test_both"]
        """
    )
    script_timings(pytester, STEADY)
    rec = pytester.runpytest("--gpuperf", *RUN)
    rec.assert_outcomes(passed=1)
    rec.stdout.fnmatch_lines(["*gpuperf: 2 benchmark(s), mode: compare*"])


def test_gpu_bench_pedantic_fixes_calls_per_round(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        def test_cpr(gpu_bench):
            r = gpu_bench.pedantic(sum, args=([1],), rounds=6, calls_per_round=7)
            assert r.calls_per_round == 7 and r.rounds == 6 and r.median_ms == pytest.approx(0.5)

        def test_cpr_with_setup(gpu_bench):
            with pytest.raises(ValueError, match="calls_per_round=2 with a setup function"):
                gpu_bench.pedantic(sum, setup=lambda: (([1],), {}), calls_per_round=2)
        """
    )
    script_timings(pytester, {"ms": 0.5, "cv": 0.0})
    pytester.runpytest("--gpuperf", *RUN).assert_outcomes(passed=2)


@needs_cuda
def test_benchmark_times_on_the_device_of_its_tensors(pytester: pytest.Pytester) -> None:
    """Real CUDA timing (asserts only what cannot flip): CUDA tensors are timed with CUDA events on
    their GPU, CPU tensors on the CPU even where CUDA is the default device."""
    pytester.makepyfile(
        """
        import pytest, torch

        @pytest.mark.parametrize("device", ["cuda", "cpu"])
        def test_add(benchmark, device):
            a = torch.randn(1 << 16, device=device)
            out = benchmark(torch.add, a, a)
            assert out.device.type == device
            assert benchmark.result.device.startswith(device) and benchmark.stats.mean > 0

        def test_iterations_on_cuda(benchmark):
            a = torch.randn(1 << 16, device="cuda")
            benchmark.pedantic(torch.mul, args=(a, a), rounds=10, iterations=8)
            assert benchmark.result.device.startswith("cuda") and benchmark.result.calls_per_round == 8
        """
    )
    pytester.runpytest("--gpuperf", "--gpuperf-max-time", "0.2", *RUN).assert_outcomes(passed=3)


# ----------------------------------------------------------------------------- the marker


def test_benchmark_marker_maps_ignores_with_a_note_and_rejects(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import time
        import pytest

        @pytest.mark.benchmark(group="g", min_rounds=20000, max_time=0.3, precision=0.01, warmup=False,
                               timer=time.process_time, disable_gc=True, min_time=0.1, calibration_precision=5,
                               warmup_iterations=10, confidence=0.9, cprofile=True)
        def test_all(benchmark):
            benchmark.pedantic(sum, args=([1],), rounds=3)
            o = benchmark.result.options.to_dict()
            assert (o["group"], o["min_rounds"], o["max_rounds"], o["max_time"]) == ("g", 20000, 20000, 0.3)
            assert o["target_precision"] == 0.01 and o["warmup_time"] == 0.0
            assert benchmark.group == "g"

        @pytest.mark.benchmark(group="g")
        @pytest.mark.gpu_bench(group="ours", threshold=0.2)
        def test_gpu_bench_marker_wins(benchmark):
            benchmark.pedantic(sum, args=([1],), rounds=3)
            assert benchmark.result.options.group == "ours" and benchmark.result.options.threshold == 0.2
        """
    )
    script_timings(pytester, STEADY)
    rec = pytester.runpytest("--gpuperf", *RUN)
    rec.assert_outcomes(passed=2)
    out = rec.stdout.str()
    for key in ("timer", "disable_gc", "min_time", "calibration_precision", "warmup_iterations", "confidence",
                "cprofile"):
        assert out.count(f"warning: @pytest.mark.benchmark({key}=...) is accepted and ignored: ") == 1, key


@pytest.mark.parametrize("marker, needles", [
    ("benchmark(rounds=3)", ["unknown keyword 'rounds'", "accepted: group, min_rounds, max_time", "gpu_bench"]),
    ("benchmark(threshold=0.1)", ["unknown keyword 'threshold'"]),
    ("benchmark(5)", ["keyword arguments only"]),
    ("benchmark(min_rounds=0)", ["min_rounds=0", "an integer >= 1"]),
    ("benchmark(max_time='soon')", ["max_time='soon'", "seconds"]),
])
def test_bad_benchmark_marker_errors_its_test(pytester: pytest.Pytester, marker: str, needles: list[str]) -> None:
    pytester.makepyfile(f"import pytest\n\n@pytest.mark.{marker}\ndef test_m(benchmark):\n    benchmark(sum, [1])\n")
    rec = pytester.runpytest(*RUN)
    rec.assert_outcomes(errors=1)
    err = rec.stdout.str()
    assert "test_m" in err and "@pytest.mark.benchmark" in err
    for needle in needles:
        assert needle in err, needle


# ----------------------------------------------------------------------------- the flags

SELECTION = """
import pytest

def test_bm(benchmark):
    benchmark(sum, [1])

def test_gb(gpu_bench):
    gpu_bench(sum, [1])

@pytest.mark.gpu_bench
def test_marked(gpu_bench):
    gpu_bench(sum, [1])

def test_plain():
    pass
"""


@pytest.mark.parametrize("flag, skipped_reason, passed", [
    ("--benchmark-skip", "benchmark test skipped (--benchmark-skip)", 1),
    ("--gpuperf-skip", "benchmark test skipped (--gpuperf-skip)", 1),
    ("--benchmark-only", "not a benchmark test (--benchmark-only)", 3),
    ("--gpuperf-only", "not a benchmark test (--gpuperf-only)", 3),
])
def test_only_and_skip_select_benchmark_tests(pytester: pytest.Pytester, flag: str, skipped_reason: str,
                                             passed: int) -> None:
    pytester.makepyfile(test_sel=SELECTION)
    script_timings(pytester, STEADY)
    rec = pytester.runpytest(flag, "-rs", *RUN)
    rec.assert_outcomes(passed=passed, skipped=4 - passed)
    rec.stdout.fnmatch_lines([f"SKIPPED*{skipped_reason}*"])


def test_benchmark_only_overrides_benchmark_skip_as_in_pytest_benchmark(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_sel=SELECTION)
    pytester.runpytest("--benchmark-only", "--benchmark-skip", *RUN).assert_outcomes(passed=3, skipped=1)


@pytest.mark.parametrize("args, needles", [
    (["--gpuperf-only", "--gpuperf-skip"], ["--gpuperf-only and --gpuperf-skip"]),
    (["--benchmark-only", "--benchmark-disable"], ["--benchmark-disable and --benchmark-only"]),
    (["--gpuperf-update-baselines", "--benchmark-disable"], ["--benchmark-disable", "--gpuperf-update-baselines"]),
    (["--benchmark-sort", "fastest"], ["--benchmark-sort", "'fastest'", "min, max, mean, stddev, name, fullname"]),
    (["--gpuperf-sort", "fastest"], ["--gpuperf-sort", "name, median, mean"]),
    (["--benchmark-columns", "min,p95"], ["--benchmark-columns", "p95", "min, max, mean, stddev, median, iqr"]),
    (["--gpuperf-columns", "min,bogus"], ["--gpuperf-columns", "bogus", "peak-mem"]),
    (["--benchmark-group-by", "module"], ["--benchmark-group-by", "'module'", "param:NAME"]),
    (["--benchmark-min-rounds", "0"], ["--benchmark-min-rounds", "min_rounds=", "integer >= 1"]),
    (["--benchmark-max-time", "-1"], ["--benchmark-max-time", "max_time=", "seconds > 0"]),
    (["--benchmark-warmup=sometimes"], ["--benchmark-warmup", "'sometimes'", "on, off, auto"]),
    (["--benchmark-json", "a.json", "--gpuperf-json", "b.json"], ["--benchmark-json a.json", "--gpuperf-json b.json"]),
])
def test_bad_flags_are_usage_errors_naming_what_is_accepted(pytester: pytest.Pytester, args: list[str],
                                                            needles: list[str]) -> None:
    pytester.makepyfile("def test_nothing():\n    pass\n")
    rec = pytester.runpytest(*args, *RUN)
    assert rec.ret == pytest.ExitCode.USAGE_ERROR
    for needle in needles:
        assert needle in rec.stderr.str(), needle


def test_benchmark_disable_is_smoke_mode_and_enable_overrides_it(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_sel=SELECTION)
    script_timings(pytester, STEADY)
    off = pytester.runpytest("--gpuperf", "--benchmark-disable", *RUN)
    off.assert_outcomes(passed=4)
    off.stdout.fnmatch_lines(["*gpuperf: 3 benchmark(s) ran once (smoke mode)*"])
    on = pytester.runpytest("--gpuperf", "--benchmark-disable", "--benchmark-enable", *RUN)
    on.assert_outcomes(passed=4)
    on.stdout.fnmatch_lines(["*gpuperf: 3 benchmark(s), mode: compare*"])


OPTIONS_PROBE = """
def test_probe(benchmark):
    benchmark(sum, [1])
    o = benchmark.result.options.to_dict()
    print("OPTIONS", o["min_rounds"], o["max_rounds"], o["max_time"], o["warmup_time"])
"""


@pytest.mark.parametrize("args, expected", [
    ([], "OPTIONS 10 10000 1.0 0.025"),
    (["--benchmark-min-rounds", "13"], "OPTIONS 13 10000 1.0 0.025"),
    (["--benchmark-min-rounds=20000"], "OPTIONS 20000 20000 1.0 0.025"),
    (["--benchmark-max-time", "0.05"], "OPTIONS 10 10000 0.05 0.025"),
    (["--benchmark-max-time", "0.05", "--gpuperf-max-time", "0.07"], "OPTIONS 10 10000 0.07 0.025"),
    (["--benchmark-warmup=off"], "OPTIONS 10 10000 1.0 0.0"),
    (["--benchmark-warmup"], "OPTIONS 10 10000 1.0 0.025"),
])
def test_measurement_flags_map_to_options(pytester: pytest.Pytester, args: list[str], expected: str) -> None:
    pytester.makepyfile(test_probe=OPTIONS_PROBE)
    script_timings(pytester, {"ms": 20.0, "cv": 0.0})  # 20 ms calls: a few rounds reach max_time fast
    rec = pytester.runpytest("--gpuperf", "-s", *args, *RUN)
    rec.assert_outcomes(passed=1)
    rec.stdout.fnmatch_lines([f"*{expected}*"])


def test_ignored_flags_are_accepted_with_one_line_each(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_probe=OPTIONS_PROBE)
    script_timings(pytester, STEADY)
    rec = pytester.runpytest("--gpuperf", "--benchmark-timer=time.process_time", "--benchmark-disable-gc",
                             "--benchmark-min-time=0.001", "--benchmark-calibration-precision=3",
                             "--benchmark-warmup-iterations=5", "--benchmark-compare", "--benchmark-autosave",
                             "--benchmark-save=x", "--benchmark-compare-fail", "mean:5%", "--", *RUN)
    rec.assert_outcomes(passed=1)
    out = rec.stdout.str()
    for flag in ("timer", "disable-gc", "min-time", "calibration-precision", "warmup-iterations", "compare",
                 "autosave", "save", "compare-fail"):
        assert out.count(f"pytest-gpuperf: --benchmark-{flag} is accepted and ignored: ") == 1, flag
    assert "the statistical gate decides" in out


def test_json_columns_and_sort_flags(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.parametrize("n", [1, 2, 3])
        def test_op(benchmark, n):
            benchmark(sum, [n])
        """
    )
    pytester.makeconftest(__import__("pytest_gpuperf._testing", fromlist=["x"]).SCRIPTED_CONFTEST)
    set_timings(pytester, {"ms": 3.0, "cv": 0.0}, **{"test_op[1]": {"ms": 2.0, "cv": 0.0},
                                                      "test_op[2]": {"ms": 1.0, "cv": 0.0}})
    rec = pytester.runpytest("--gpuperf", "--benchmark-json", "out/bench.json", "--benchmark-sort", "mean",
                             "--benchmark-columns", "min,mean,ops,iterations", *RUN)
    rec.assert_outcomes(passed=3)
    lines = rec.stdout.str().splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("name "))
    assert lines[head].split() == ["name", "min", "mean", "calls/s", "iterations", "verdict"]
    rows = [line.split()[0] for line in lines[head + 2:head + 5]]
    assert rows == [f"test_json_columns_and_sort_flags.py::test_op[{n}]" for n in (2, 1, 3)]  # by mean
    report = json.loads(pytester.path.joinpath("out", "bench.json").read_text())
    assert report["kind"] == "report" and len(report["benchmarks"]) == 3
    by_name = pytester.runpytest("--gpuperf", "--gpuperf-sort=name", "--gpuperf-columns=median,rounds", *RUN)
    lines = by_name.stdout.str().splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("name "))
    assert lines[head].split() == ["name", "median", "rounds", "verdict"]
    assert [line.split()[0][-10:] for line in lines[head + 2:head + 5]] == ["test_op[1]", "test_op[2]", "test_op[3]"]


def test_benchmark_fixture_measures_under_xdist(pytester: pytest.Pytester) -> None:
    """pytest-benchmark switches itself off under pytest-xdist; here the measurements stay (one
    device lock serializes them) and the summary merges the workers' results."""
    pytest.importorskip("xdist")
    _suite(pytester)
    rec = pytester.runpytest_subprocess("-n", "2", "--gpuperf", "--benchmark-group-by=param:size", *RUN)
    rec.assert_outcomes(passed=N_BENCH + 1)
    out = rec.stdout.str()
    assert _groups(out) == ["(none)", "size=32", "size=64"]
    assert f"gpuperf: {N_BENCH} benchmark(s), mode: compare" in out and "results of 2 worker(s) merged" in out


# ----------------------------------------------------------------------------- coexistence

# A stand-in for pytest-benchmark 5.3.1: its plugin module name, its options (names, defaults and
# parsed types) and its refusal of any other object as ``benchmark`` (its makereport check).
STAND_IN = '''
import pytest

__version__ = "5.3.1-stand-in"

def pytest_addoption(parser):
    group = parser.getgroup("benchmark")
    for flag in ("--benchmark-skip", "--benchmark-only", "--benchmark-disable", "--benchmark-enable",
                 "--benchmark-disable-gc", "--benchmark-autosave"):
        group.addoption(flag, action="store_true", default=False)
    group.addoption("--benchmark-min-rounds", type=int, default=5)
    group.addoption("--benchmark-max-time", default="1.0")
    group.addoption("--benchmark-min-time", default="0.000005")
    group.addoption("--benchmark-warmup", nargs="?", default=False, type=lambda s: s != "off")
    group.addoption("--benchmark-warmup-iterations", type=int, default=100000)
    group.addoption("--benchmark-calibration-precision", type=int, default=10)
    group.addoption("--benchmark-timer", default="time.perf_counter")
    group.addoption("--benchmark-sort", default="min")
    group.addoption("--benchmark-group-by", default="group")
    group.addoption("--benchmark-columns", default=None, type=lambda s: s.split(","))
    group.addoption("--benchmark-json", default=None)
    group.addoption("--benchmark-save", default=None)
    group.addoption("--benchmark-compare", nargs="?", default=[], const=True)
    group.addoption("--benchmark-compare-fail", nargs="+", default=None)

def pytest_configure(config):
    config.addinivalue_line("markers", "benchmark: stand-in")
    config._stand_in_configured = True

class StandInFixture:
    def __call__(self, fn, *args, **kwargs):
        return ("stand-in", fn(*args, **kwargs))

@pytest.fixture
def benchmark():
    return StandInFixture()

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    yield
    fixture = getattr(item, "funcargs", {}).get("benchmark")
    if fixture is not None and not isinstance(fixture, StandInFixture):
        raise TypeError("unexpected type for `benchmark` in funcargs")
'''

COEXIST = """
import pytest

def test_bm(benchmark):
    out = benchmark(sum, [1, 2])
    print("OWNER", type(benchmark).__module__, out)
    if type(benchmark).__module__ == "pytest_gpuperf.plugin.benchmark_fixture":
        o = benchmark.result.options.to_dict()
        print("OPTIONS", o["min_rounds"], o["max_time"], o["warmup_time"])

@pytest.mark.gpu_bench
def test_gb(gpu_bench):
    gpu_bench(sum, [1])
"""


def _stand_in(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [m for m in sys.modules if m == "pytest_benchmark" or m.startswith("pytest_benchmark.")]:
        monkeypatch.delitem(sys.modules, name)  # a real one loaded here: the inner session imports the stand-in
    pkg = pytester.mkpydir("pytest_benchmark")
    pkg.joinpath("__init__.py").write_text('__version__ = "5.3.1-stand-in"\n')
    pkg.joinpath("plugin.py").write_text(STAND_IN)
    pytester.syspathinsert()
    pytester.makepyfile(test_coexist=COEXIST)
    script_timings(pytester, STEADY)


def test_with_pytest_benchmark_loaded_a_plain_run_leaves_it_alone(pytester: pytest.Pytester,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    _stand_in(pytester, monkeypatch)
    rec = pytester.runpytest("-p", "pytest_benchmark.plugin", "-s", "--benchmark-columns=min", *RUN)
    rec.assert_outcomes(passed=2)
    out = rec.stdout.str()
    assert "OWNER pytest_benchmark.plugin ('stand-in', 3)" in out  # its fixture, its flags (no clash)
    assert "taken over" not in out
    rec.stdout.fnmatch_lines(["*gpuperf: 1 benchmark(s) ran once (smoke mode)*"])  # gpu_bench is ours still


@pytest.mark.parametrize("mode", ["--gpuperf", "--gpuperf-update-baselines"])
def test_with_pytest_benchmark_loaded_gpuperf_takes_over_for_the_session(pytester: pytest.Pytester,
                                                                         monkeypatch: pytest.MonkeyPatch,
                                                                         mode: str) -> None:
    _stand_in(pytester, monkeypatch)
    rec = pytester.runpytest("-p", "pytest_benchmark.plugin", mode, "-s", "--benchmark-columns=min,max",
                             "--benchmark-max-time=0.2", "--benchmark-timer=x", *RUN)
    rec.assert_outcomes(passed=2)
    out = rec.stdout.str()
    assert out.count("pytest-gpuperf: pytest-benchmark 5.3.1-stand-in is taken over for this session: its "
                     "benchmark fixture, marker and --benchmark-* flags are served by pytest-gpuperf") == 1
    assert "OWNER pytest_gpuperf.plugin.benchmark_fixture 3" in out
    assert "OPTIONS 10 0.2 0.025" in out  # its flags are read; at their defaults (min_rounds 5) they change nothing
    assert "pytest-gpuperf: --benchmark-timer is accepted and ignored" in out
    head = next(line for line in out.splitlines() if line.startswith("name "))
    assert head.split() == ["name", "min", "max", "verdict"]


def _real_pytest_benchmark() -> tuple[dict[str, str], list[str]] | None:
    """(environment, extra pytest args) to run the real pytest-benchmark, or None when it is absent.

    It is taken from ``GPUPERF_PYTEST_BENCHMARK_PATH`` (a folder holding the ``pytest_benchmark``
    package, e.g. an unzipped wheel) or from this environment; installed with its ``.dist-info`` it
    loads through its entry point, else through ``-p pytest_benchmark.plugin``.
    """
    env = dict(os.environ)
    path = os.environ.get("GPUPERF_PYTEST_BENCHMARK_PATH")
    if path:
        if not Path(path, "pytest_benchmark", "plugin.py").is_file():
            pytest.fail(f"GPUPERF_PYTEST_BENCHMARK_PATH={path}: no pytest_benchmark/plugin.py there")
        env["PYTHONPATH"] = os.pathsep.join([path, *filter(None, [env.get("PYTHONPATH")])])
        has_dist_info = any(Path(path).glob("pytest_benchmark-*.dist-info"))
        return env, ([] if has_dist_info else ["-p", "pytest_benchmark.plugin"])
    if importlib.util.find_spec("pytest_benchmark") is not None:
        return env, []
    return None


def test_real_pytest_benchmark_coexists(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    real = _real_pytest_benchmark()
    if real is None:
        pytest.skip("pytest-benchmark is not installed here (the suite must run without it); set "
                    "GPUPERF_PYTEST_BENCHMARK_PATH to a folder holding it (e.g. an unzipped wheel) to run this test")
    env, args = real
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD")  # the real pytest-benchmark loads as users have it
    monkeypatch.delenv("PYTEST_PLUGINS")
    for key in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(key, raising=False)  # this suite's own xdist worker: pytest-benchmark would switch off
    pytester.makepyfile(test_coexist=COEXIST)
    script_timings(pytester, STEADY)
    plain = pytester.runpytest_subprocess(*args, "-s", "--benchmark-max-time=0.01", *RUN)
    plain.assert_outcomes(passed=2)
    out = plain.stdout.str()
    assert "OWNER pytest_benchmark.fixture 3" in out and "taken over" not in out
    assert re.search(r"benchmark: 1 tests", out)  # pytest-benchmark's own table
    took = pytester.runpytest_subprocess(*args, "--gpuperf", "-s", "--benchmark-max-time=0.2",
                                         "--benchmark-columns=min,max", "-n", "2", *RUN)
    took.assert_outcomes(passed=2)
    out = took.stdout.str()
    assert re.search(r"pytest-gpuperf: pytest-benchmark \S+ is taken over for this session", out)
    assert "gpuperf: 2 benchmark(s), mode: compare" in out and "results of 2 worker(s) merged" in out
    assert "benchmark: 1 tests" not in out  # its table is gone with it
    head = next(line for line in out.splitlines() if line.startswith("name "))
    assert head.split() == ["name", "min", "max", "verdict"]


def test_plain_session_with_the_adapter_imports_nothing_heavy(pytester: pytest.Pytester) -> None:
    """The adapter's options, marker translation and selection load no torch or numpy."""
    pytester.makepyfile(
        """
        import sys
        import pytest

        @pytest.mark.benchmark(group="g", timer=None)
        def test_plain():
            assert "pytest_gpuperf.plugin.benchmark_compat" in sys.modules
            assert "torch" not in sys.modules and "numpy" not in sys.modules
        """
    )
    rec = pytester.runpytest_subprocess("--benchmark-only", "--benchmark-group-by=param:size",
                                        "--gpuperf-columns=min", *RUN)
    rec.assert_outcomes(skipped=1)
    rec = pytester.runpytest_subprocess("--benchmark-group-by=param:size", "--gpuperf-columns=min", *RUN)
    rec.assert_outcomes(passed=1)
    assert sys.modules.get("pytest_gpuperf.plugin.benchmark_compat") is not None
