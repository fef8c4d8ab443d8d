"""Unit tests of the pytest-benchmark adapter's pure parts: fixed calls per round, extra_info in
JSON, the summary table's columns and sort, ``benchmark.stats``, the device of a call's tensors."""

from __future__ import annotations

import json
import math

import pytest

from pytest_gpuperf.plugin import benchmark_compat as compat
from pytest_gpuperf._testing import ScriptedMeasurer
from pytest_gpuperf.verdict.compare import Comparison, Verdict
from pytest_gpuperf.core.options import BenchOptions
from pytest_gpuperf.reporting.report import COLUMN_KEYS, EXTRA_COLUMNS, json_safe, result_entry, result_from_entry, summary_lines
from pytest_gpuperf.verdict.result import BenchResult

FAST = BenchOptions(warmup_time=0.0, max_time=0.05, target_precision=0.0)


def test_fixed_calls_per_round_times_that_many_calls_per_round() -> None:
    calls = []
    t = ScriptedMeasurer(0.25).measure(lambda: calls.append(1), (), {}, options=FAST, device="cpu", rounds=6,
                                       warmup_calls=0, calls_per_round=4)
    assert t.calls_per_round == 4 and t.rounds == 6
    assert t.samples_ms == pytest.approx((0.25,) * 6)  # each sample is the round's time / 4
    assert len(calls) == t.warmup_calls + 6 * 4


def test_without_fixed_calls_per_round_short_calls_are_batched() -> None:
    t = ScriptedMeasurer(0.002).measure(lambda: None, (), {}, options=FAST, device="cpu", rounds=3)
    assert t.calls_per_round >= 50  # 2 µs calls in rounds of at least 100 µs


@pytest.mark.parametrize("cpr, setup", [(0, None), (2.5, None), (True, None), (2, lambda: None)])
def test_bad_calls_per_round_is_a_clear_error(cpr, setup) -> None:
    with pytest.raises(ValueError, match="calls_per_round="):
        ScriptedMeasurer(1.0).measure(lambda: None, (), {}, options=FAST, device="cpu", setup=setup,
                                      calls_per_round=cpr)


def _result(samples=(1.0, 1.2, 0.9, 1.1, 1.0, 3.0), **extra) -> BenchResult:
    return BenchResult.from_samples(tuple(samples), name="t", device="cpu", rounds=len(samples),
                                    calls_per_round=extra.pop("calls_per_round", 1), warmup_calls=3,
                                    benchmark_id=extra.pop("benchmark_id", "test_t"), **extra)


def test_extra_info_is_stored_json_safe_and_read_back() -> None:
    info = {"flops": 2 ** 40, "ratio": 0.5, "nan": float("nan"), "shape": (3, 4), "obj": object, 7: "int key"}
    entry = result_entry(_result(extra_info=info), environment={}, git_commit=None, timestamp_utc="now")
    text = json.dumps(entry, allow_nan=False)  # what baseline.dumps demands
    stored = json.loads(text)["extra_info"]
    assert stored["flops"] == 2 ** 40 and stored["ratio"] == 0.5 and stored["nan"] == "nan"
    assert stored["shape"] == [3, 4] and stored["obj"].startswith("UNSERIALIZABLE[") and stored["7"] == "int key"
    assert result_from_entry(dict(entry, smoke=False)).extra_info == stored
    assert "extra_info" not in result_entry(_result(), environment={}, git_commit=None, timestamp_utc="now")


def test_json_safe_keeps_plain_values() -> None:
    assert json_safe({"a": [1, "x", None, True, 1.5]}) == {"a": [1, "x", None, True, 1.5]}
    assert json_safe(float("inf")) == "inf"


def test_compat_column_names_are_the_tables() -> None:
    assert set(COLUMN_KEYS) | set(EXTRA_COLUMNS) | {"items", "instr"} == set(compat.TABLE_COLUMNS)
    assert tuple(COLUMN_KEYS) == compat.DEFAULT_COLUMNS
    assert set(compat.PB_COLUMNS) <= set(compat.TABLE_COLUMNS)  # every pytest-benchmark column maps


def test_summary_columns_put_name_first_and_verdict_last() -> None:
    r = _result(comparison=Comparison(verdict=Verdict.UNCHANGED, benchmark_id="test_t", ratio=1.0,
                                      current_median_ms=1.0, baseline_median_ms=1.0), calls_per_round=8)
    lines = summary_lines([("m.py::test_t", r, False)], columns=["min", "ops", "iterations", "verdict", "name"])
    assert lines[0].split() == ["name", "min", "calls/s", "iterations", "verdict"]
    assert lines[2].split() == ["m.py::test_t", "900", "µs", f"{1e3 / r.mean_ms:.4g}/s", "8", "unchanged"]
    with pytest.raises(ValueError, match="bogus"):
        summary_lines([("m.py::test_t", r, False)], columns=["bogus"])


def test_summary_default_table_is_unchanged() -> None:
    r = _result()
    assert summary_lines([("a", r, False)]) == summary_lines([("a", r, False)], columns=None, sort=None)


@pytest.mark.parametrize("key, expected", [("name", ["a", "b", "c"]), ("median", ["c", "a", "b"]),
                                           ("max", ["b", "c", "a"]), ("ratio", ["b", "a", "c"])])
def test_summary_sort_orders_rows_of_a_group(key, expected) -> None:
    def res(ms, top, ratio):
        c = Comparison(verdict=Verdict.UNCHANGED, benchmark_id="t", current_median_ms=ms, ratio=ratio) if ratio else None
        return _result(samples=(ms,) * 5 + (top,), comparison=c)

    items = [("b", res(3.0, 3.0, 0.9), False), ("a", res(2.0, 9.0, 1.0), False), ("c", res(1.0, 5.0, None), False)]
    lines = summary_lines(items, sort=key)
    assert [line.split()[0] for line in lines[2:5]] == expected


def test_benchmark_stats_are_pytest_benchmarks_in_seconds() -> None:
    class Node:
        name, nodeid = "test_t[8]", "m.py::test_t[8]"

        class callspec:  # noqa: N801
            id, params = "8", {"n": 8}

    fixture = compat.BenchmarkFixture(Node(), lambda device: None, group=None, disabled=False)
    fixture.extra_info["k"] = 1
    r = _result(calls_per_round=4)
    s = compat.BenchmarkStats(fixture, r)
    assert s["mean"] == pytest.approx(r.mean_ms / 1e3) and s.stats.median == pytest.approx(r.median_ms / 1e3)
    assert s.min == pytest.approx(0.9e-3) and s.max == pytest.approx(3e-3) and s.rounds == 6
    assert s.iterations == 4 and s.ops == pytest.approx(1 / s.mean) and s.total == pytest.approx(sum(s.data))
    assert s.iqr == pytest.approx(s.q3 - s.q1) and s.iqr_outliers == 1 and s.outliers == f"{s.stddev_outliers};1"
    assert s.hd15iqr == pytest.approx(1.2e-3) and s.ld15iqr == pytest.approx(0.9e-3)
    assert s.param == "8" and s.params == {"n": 8} and s.extra_info == {"k": 1}
    assert s.get("nope", 3) == 3 and s.stats.sorted_data == sorted(s.data) and s.has_error is False
    # pytest-benchmark's Metadata.as_dict(include_data=True, flat=False, stats=True, cprofile=None)
    assert set(s.as_dict()["stats"]) == set(s.fields) | {"data", "iterations"} and s.as_dict()["param"] == "8"
    assert set(s.as_dict(include_data=False, flat=True)) >= set(s.fields) | {"iterations", "name", "options"}
    assert "data" not in s.as_dict(include_data=False, flat=True) and "stats" not in s.as_dict(stats=False)
    assert s.as_dict()["options"]["timer"] == "perf_counter" and s.stats.as_dict() == {f: s[f] for f in s.fields}
    one = compat.BenchmarkStats(fixture, _result(samples=(2.0,)))
    assert one.stddev == 0.0 and one.rounds == 1 and math.isclose(one.ops, 500.0)


def test_tensor_device_reads_the_arguments() -> None:
    torch = pytest.importorskip("torch")
    x = torch.ones(2)
    assert compat.tensor_device(torch.add, (x, x), {}).type == "cpu"
    assert compat.tensor_device(lambda image: image, (), {"image": [x]}).type == "cpu"
    assert compat.tensor_device(torch.nn.Linear(2, 2), (), {}).type == "cpu"
    assert compat.tensor_device(x.sum, (), {}).type == "cpu"  # a bound tensor method
    assert compat.tensor_device(sum, ([1, 2],), {}) is None  # no tensors: the test's device option decides


def test_tensor_device_never_calls_what_a_user_module_overrides() -> None:
    # issue 46: a real suite's module class stores an attribute named `parameters` (None): the
    # device probe called value.parameters() and failed a benchmark pytest-benchmark passes
    torch = pytest.importorskip("torch")

    class Filter(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(2))
            object.__setattr__(self, "parameters", None)  # as the suite's class does
            object.__setattr__(self, "buffers", "not callable")

    class Broken(torch.nn.Module):
        def named_parameters(self, *a, **k):  # torch's parameters() walks this one
            raise RuntimeError("a user override that raises")

    assert compat.tensor_device(Filter(), (), {}).type == "cpu"
    assert compat.tensor_device(lambda m: m, (Broken(),), {}) is None  # tells nothing, never raises


def test_tensor_device_prefers_a_cuda_tensor() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA: a CUDA tensor cannot be made on a CPU-only machine")
    x, y = torch.ones(2), torch.ones(2, device="cuda")
    assert compat.tensor_device(torch.add, (x, y), {}) == torch.device("cuda", y.device.index)


def test_machine_cpu_info_without_py_cpuinfo_has_its_keys_and_values() -> None:
    """pytest-benchmark's ``machine_info["cpu"]`` built from /proc/cpuinfo where py-cpuinfo is not
    installed: its keys, ``[hz, 0]`` lists and "2.4000 GHz" texts, as py-cpuinfo makes them."""
    from pytest_gpuperf.measure.environment import PB_CPU_KEYS, cpu_info_from

    text = ("processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) CPU E5-2680 v4 @ 2.40GHz\n"
            "cpu MHz\t\t: 1200.125\n\nprocessor\t: 1\ncpu MHz\t\t: 3000.000\n")
    info = cpu_info_from(text, "x86_64", 2)
    assert tuple(info) == PB_CPU_KEYS
    assert info["vendor_id_raw"] == "GenuineIntel" and info["arch"] == "X86_64" and info["bits"] == 64
    assert info["hz_advertised"] == [2400000000, 0] and info["hz_advertised_friendly"] == "2.4000 GHz"
    assert info["hz_actual"] == [1200125000, 0] and info["hz_actual_friendly"] == "1.2001 GHz"  # the first CPU's
    assert info["count"] == 2 and info["python_version"].endswith(" bit)")
    bare = cpu_info_from("", "aarch64", None)  # nothing known: the keys all the same (a hook may pop them)
    assert bare["hz_actual"] == [0, 0] and bare["hz_actual_friendly"] == "0.0000 Hz" and bare["arch"] == "ARM_8"
