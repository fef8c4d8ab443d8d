"""Unit tests for pytest_gpuperf.core.units, pytest_gpuperf.reporting.report and BenchResult."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from pytest_gpuperf.reporting import report
from pytest_gpuperf.storage.baseline import SCHEMA_VERSION, dumps, load, run_record, update
from pytest_gpuperf.verdict.bottleneck import Bottleneck, Evidence, classify
from pytest_gpuperf.verdict.compare import MEMORY_SLACK_BYTES, Comparison, Verdict, decide, decide_memory
from pytest_gpuperf.core.options import DEFAULTS
from pytest_gpuperf.verdict.result import BenchResult
from pytest_gpuperf.verdict.stats import MAX_STORED_SAMPLES, Outliers, summarize, thin
from pytest_gpuperf.core.units import format_bytes, format_ms, format_pct, format_ratio, time_unit_for
from pytest_gpuperf.reporting.messages import bottleneck_message, comparison_message, gate_messages

MiB = 2**20
BOTTLENECK = 14  # report.COLUMNS.index("bottleneck"), checked in test_columns
VERDICT = 15  # report.COLUMNS.index("verdict")
MEM = 9  # report.COLUMNS.index("peak mem")

# --------------------------------------------------------------------------------------------
# units
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "ms, expected",
    [
        (1500.0, "1.5 s"),
        (1000.0, "1 s"),
        (12_345.6, "12.35 s"),
        (999.0, "999 ms"),
        (2.5, "2.5 ms"),
        (1.0, "1 ms"),
        (1.23456, "1.235 ms"),
        (0.5, "500 µs"),
        (0.0031, "3.1 µs"),
        (0.001, "1 µs"),
        (0.0005, "500 ns"),
        (2.5e-6, "2.5 ns"),
        (1e-6, "1 ns"),
        (1e-7, "0.1 ns"),  # below 1 ns stays in ns
        (0, "0 ms"),
        (0.0, "0 ms"),
        (-2.0, "-2 ms"),
        (-0.002, "-2 µs"),
    ],
)
def test_format_ms_picks_unit(ms, expected):
    assert format_ms(ms) == expected


def test_format_ms_digits_and_missing():
    assert format_ms(1.23456, digits=2) == "1.2 ms"
    assert format_ms(0.0123456, digits=6) == "12.3456 µs"
    assert format_ms(None) == "-"
    assert format_ms(float("nan")) == "-"
    assert format_ms(np.float64("nan")) == "-"
    assert format_ms(float("inf")) == "inf ms"
    assert format_ms(np.float64(2.5)) == "2.5 ms"


@pytest.mark.parametrize(
    "ms, unit, scale",
    [(2000.0, "s", 1e3), (5.0, "ms", 1.0), (0.05, "µs", 1e-3), (5e-5, "ns", 1e-6), (1e-9, "ns", 1e-6),
     (0.0, "ms", 1.0), (float("inf"), "ms", 1.0), (float("nan"), "ms", 1.0)],
)
def test_time_unit_for(ms, unit, scale):
    assert time_unit_for(ms) == (unit, scale)


@pytest.mark.parametrize(
    "ratio, expected",
    [(1.0, "1.000x"), (1.0434, "1.043x"), (0.5, "0.500x"), (12.3456, "12.346x"), (None, "-"),
     (float("nan"), "-")],
)
def test_format_ratio(ratio, expected):
    assert format_ratio(ratio) == expected


@pytest.mark.parametrize(
    "fraction, expected",
    [(0.043, "+4.3%"), (0.0, "+0.0%"), (-0.2, "-20.0%"), (1.0, "+100.0%"), (0.2049, "+20.5%"),
     (-0.0004, "-0.0%")],
)
def test_format_pct(fraction, expected):
    assert format_pct(fraction) == expected


# --------------------------------------------------------------------------------------------
# BenchResult
# --------------------------------------------------------------------------------------------


def make_result(samples, *, name="test_x", device="cpu", group=None, comparison=None, smoke=False,
                benchmark_id=None, options=None, peak_memory_bytes=None,
                memory_comparison=None, bottleneck=None, trace_path=None, top_ops=None) -> BenchResult:
    samples = tuple(float(v) for v in samples)
    return BenchResult.from_samples(
        samples,
        name=name,
        device=device,
        rounds=len(samples),
        calls_per_round=4,
        warmup_calls=3,
        benchmark_id=benchmark_id or name,
        group=group,
        comparison=comparison,
        smoke=smoke,
        options=options if options is not None else {"threshold": 0.05, "device": None},
        peak_memory_bytes=peak_memory_bytes,
        memory_comparison=memory_comparison,
        bottleneck=bottleneck,
        trace_path=trace_path,
        top_ops=top_ops,
    )


def lognormal(seed, n, factor=1.0, sigma=0.1):
    return np.random.default_rng(seed).lognormal(math.log(2.0 * factor), sigma, n)


def test_from_samples_computes_statistics():
    samples = lognormal(1, 101)
    r = make_result(samples, group="g", benchmark_id="m.py::t[1]")
    s = summarize(samples)
    assert r.samples_ms == tuple(float(v) for v in samples)
    assert isinstance(r.samples_ms, tuple)
    assert r.median_ms == s.median_ms and r.mean_ms == s.mean_ms and r.std_ms == s.std_ms
    assert (r.min_ms, r.max_ms) == (s.min_ms, s.max_ms)
    assert (r.p5_ms, r.p25_ms, r.p75_ms, r.p90_ms, r.p95_ms, r.p99_ms) == (
        s.p5_ms, s.p25_ms, s.p75_ms, s.p90_ms, s.p95_ms, s.p99_ms)
    assert r.iqr_ms == s.iqr_ms
    assert r.median_ci_ms == s.median_ci_ms
    assert r.outliers == s.outliers
    assert r.iqr_fraction == pytest.approx(s.iqr_ms / s.median_ms)
    assert (r.rounds, r.calls_per_round, r.warmup_calls) == (101, 4, 3)
    assert r.benchmark_id == "m.py::t[1]" and r.group == "g" and r.name == "test_x"
    assert r.comparison is None and r.smoke is False
    assert r.peak_memory_bytes is None and r.memory_comparison is None
    assert r.bottleneck is None and r.trace_path is None and r.top_ops is None
    assert r.misclassified is False and bottleneck_message(r) is None


def test_from_samples_rejects_bad_samples():
    with pytest.raises(ValueError):
        make_result([])
    with pytest.raises(ValueError):
        make_result([1.0, float("nan")])


def test_stats_dict():
    r = make_result([float(v) for v in range(1, 11)])
    d = r.stats_dict()
    assert set(d) == {"mean_ms", "std_ms", "min_ms", "max_ms", "median_ms", "p5_ms", "p25_ms",
                      "p75_ms", "p90_ms", "p95_ms", "p99_ms", "iqr_ms", "median_ci_ms", "outliers"}
    assert d["median_ms"] == 5.5
    assert d["median_ci_ms"] == [2.0, 9.0]
    assert d["outliers"] == {"low": 0, "high": 0, "severe": 0}
    assert make_result([1.0, 2.0]).stats_dict()["median_ci_ms"] is None
    json.dumps(d, allow_nan=False)  # JSON-ready


# --------------------------------------------------------------------------------------------
# result_entry
# --------------------------------------------------------------------------------------------

REQUIRED_KEYS = {"schema_version", "id", "stats", "samples_ms", "rounds", "options", "environment",
                 "git_commit", "timestamp_utc"}


def test_result_entry_keys_and_values():
    r = make_result(lognormal(2, 50), benchmark_id="m.py::test_a", group="g")
    env = {"python": "3.11", "torch": "2.5"}
    e = report.result_entry(r, environment=env, git_commit="deadbeef", timestamp_utc="2025-01-02T03:04:05Z")
    assert REQUIRED_KEYS <= set(e)
    assert set(e) == REQUIRED_KEYS | {"name", "group", "device", "calls_per_round", "warmup_rounds",
                                      "peak_memory_bytes", "bottleneck", "telemetry", "counts", "throughput",
                                      "estimate_ms"}
    assert e["counts"] is None and e["throughput"] is None  # not counted
    assert e["estimate_ms"] == e["stats"]["median_ms"]  # one process: the run's median is its rounds' median
    assert e["schema_version"] == SCHEMA_VERSION
    assert e["id"] == "m.py::test_a"
    assert e["name"] == "test_x" and e["group"] == "g" and e["device"] == "cpu"
    assert e["stats"] == r.stats_dict()
    assert e["samples_ms"] == list(r.samples_ms)
    assert e["rounds"] == 50 and e["calls_per_round"] == 4 and e["warmup_rounds"] == 3
    # a result carries typed BenchOptions: its entry stores every option (the ones given, the rest defaults)
    assert e["options"] == {**DEFAULTS.to_dict(), "threshold": 0.05, "device": None}
    assert e["options"] is not r.options  # a copy
    assert e["environment"] == env
    assert e["git_commit"] == "deadbeef"
    assert e["timestamp_utc"] == "2025-01-02T03:04:05Z"
    assert e["peak_memory_bytes"] is None  # not measured
    assert e["bottleneck"] is None  # not classified
    assert "comparison" not in e and "verdict" not in e and "memory_comparison" not in e
    assert "trace_path" not in e  # only in report entries (with_comparison)
    json.loads(dumps(e))  # serializable the way the project writes JSON


def test_result_entry_records_peak_memory():
    r = make_result(lognormal(2, 20), peak_memory_bytes=851443712)
    e = report.result_entry(r, environment={}, git_commit=None, timestamp_utc="t")
    assert e["peak_memory_bytes"] == 851443712
    assert isinstance(e["peak_memory_bytes"], int)
    assert json.loads(dumps(e))["peak_memory_bytes"] == 851443712


def test_result_entry_thins_samples():
    samples = lognormal(3, 7777)
    r = make_result(samples)
    e = report.result_entry(r, environment={}, git_commit=None, timestamp_utc="t")
    assert len(e["samples_ms"]) <= MAX_STORED_SAMPLES
    assert e["samples_ms"] == thin(samples)
    assert e["samples_ms"][0] == samples[0] and e["samples_ms"][-1] == samples[-1]
    assert e["rounds"] == 7777  # rounds still says how many were measured
    assert e["git_commit"] is None
    # Stats are of all samples, not of the thinned ones.
    assert e["stats"]["median_ms"] == pytest.approx(float(np.median(samples)))


def test_result_entry_with_comparison():
    base = lognormal(4, 100)
    cur = lognormal(5, 100, factor=1.3)
    c = decide(cur, base, benchmark_id="m.py::t", baseline_file="b.json")
    r = make_result(cur, comparison=c)
    e = report.result_entry(r, environment={}, git_commit=None, timestamp_utc="t", with_comparison=True)
    assert e["verdict"] == "regressed"
    comp = e["comparison"]
    assert comp["verdict"] == "regressed"
    assert comp["ratio"] == c.ratio
    assert comp["ratio_ci"] == list(c.ratio_ci)
    assert comp["message"] == comparison_message(c)
    assert comp["baseline_file"] == "b.json"
    assert e["memory_comparison"] is None  # no memory measured
    assert set(e) == REQUIRED_KEYS | {"name", "group", "device", "calls_per_round", "warmup_rounds",
                                      "peak_memory_bytes", "bottleneck", "telemetry", "comparison", "verdict",
                                      "memory_comparison", "trace_path", "counts", "throughput",
                                      "count_comparison", "estimate_ms"}
    # issue 47: the run's median and the ratio as the verdict shows them (its message's first line)
    assert e["estimate_ms"] == c.current_median_ms and comp["shown_ratio"] == c.median_ratio
    assert format_ratio(comp["shown_ratio"]) in comp["message"].splitlines()[0]
    assert e["trace_path"] is None and e["bottleneck"] is None and e["count_comparison"] is None
    json.loads(dumps(e))

    smoke = make_result([1.0], smoke=True)
    e2 = report.result_entry(smoke, environment={}, git_commit=None, timestamp_utc="t", with_comparison=True)
    assert e2["comparison"] is None and e2["verdict"] is None
    assert e2["memory_comparison"] is None and e2["peak_memory_bytes"] is None
    assert e2["trace_path"] is None and e2["bottleneck"] is None
    json.loads(dumps(e2))


def test_result_entry_with_memory_comparison():
    m = decide_memory(1000 * MiB, 800 * MiB, threshold=0.02, max_memory_bytes=900 * MiB,
                      benchmark_id="m.py::t", device="cuda:0", baseline_file="b.json")
    c = decide(lognormal(4, 30), lognormal(5, 30), benchmark_id="m.py::t")
    r = make_result(lognormal(4, 30), comparison=c, peak_memory_bytes=1000 * MiB, memory_comparison=m)
    e = report.result_entry(r, environment={}, git_commit=None, timestamp_utc="t", with_comparison=True)
    assert e["peak_memory_bytes"] == 1000 * MiB
    mc = e["memory_comparison"]
    assert mc["verdict"] == "regressed"
    assert mc["over_budget"] is True
    assert mc["current_bytes"] == 1000 * MiB and mc["baseline_bytes"] == 800 * MiB
    assert mc["max_memory_bytes"] == 900 * MiB and mc["threshold"] == 0.02
    assert mc["device"] == "cuda:0" and mc["baseline_file"] == "b.json"
    assert mc["messages"] == gate_messages(m) and len(mc["messages"]) == 2
    # The verdict of the timing comparison is not changed by the memory one.
    assert e["verdict"] == c.verdict.value
    assert json.loads(dumps(e))["memory_comparison"] == mc


def test_memory_comparison_dict():
    assert report.memory_comparison_dict(None) is None
    m = decide_memory(100 * MiB, None, benchmark_id="x")
    d = report.memory_comparison_dict(m)
    assert d["verdict"] == "no-baseline" and isinstance(d["verdict"], str)
    assert d["over_budget"] is False and d["messages"] == []
    assert d["baseline_bytes"] is None and d["snapshot"] is None
    json.dumps(d, allow_nan=False)


def test_comparison_dict():
    assert report.comparison_dict(None) is None
    c = decide([1.0, 2.0], None, benchmark_id="x")
    d = report.comparison_dict(c)
    assert d["verdict"] == "no-baseline"
    assert d["ratio_ci"] is None
    assert "--gpuperf-update-baselines" in d["message"]


def test_result_entry_is_a_valid_baseline_entry(tmp_path):
    r = make_result(lognormal(6, 3000), benchmark_id="m.py::t")
    e = report.result_entry(r, environment={"k": "v"}, git_commit="c", timestamp_utc="t")
    path = tmp_path / "b.json"
    update(path, {e["id"]: e}, device_key="cpu-x", module="m.py")
    loaded = load(path)
    got = loaded.benchmarks["m.py::t"].data
    assert {k: v for k, v in got.items() if k != "history"} == e  # every field preserved
    assert got["history"] == [run_record(e)]  # plus the run it describes, as a 1-run history
    assert got["history"][0]["median_ms"] == pytest.approx(r.median_ms)
    assert got["history"][0]["iqr_ms"] == pytest.approx(r.iqr_ms)
    assert got["history"][0]["rounds"] == r.rounds == 3000
    assert (got["history"][0]["environment"], got["history"][0]["git_commit"],
            got["history"][0]["timestamp_utc"]) == ({"k": "v"}, "c", "t")
    assert loaded.get("m.py::t").samples_ms == tuple(thin(r.samples_ms))
    assert loaded.get("m.py::t").median_ms == pytest.approx(r.median_ms)
    assert (loaded.get("m.py::t").environment, loaded.get("m.py::t").git_commit) == ({"k": "v"}, "c")


# --------------------------------------------------------------------------------------------
# format_table / summary_row / summary_lines
# --------------------------------------------------------------------------------------------


def _column_spans(separator: str) -> list[tuple[int, int]]:
    spans, i = [], 0
    for dashes in separator.split("  "):
        spans.append((i, i + len(dashes)))
        i += len(dashes) + 2
    return spans


def _cells(line: str, separator: str) -> list[str]:
    """The stripped cells of a table line, cut at the separator line's column spans."""
    padded = line.ljust(len(separator))
    return [padded[start:end].strip() for start, end in _column_spans(separator)]


def test_columns():
    assert report.COLUMNS == ("name", "device", "median", "CPU", "p95", "IQR", "rounds", "baseline", "ratio",
                              "peak mem", "ops/kern", "syncs", "FLOP/s", "B/s", "bottleneck", "verdict")
    assert report.COLUMNS.index("peak mem") == 9
    assert report.COLUMNS.index("bottleneck") == BOTTLENECK
    assert report.COLUMNS.index("verdict") == VERDICT


def test_format_table_aligns_columns():
    rows = [
        ("short", "cpu", "1.5 ms", "1.4 ms", "2 ms", "3.0%", "10", "1.4 ms", "1.071x", "812 MiB (+11.0%)",
         "212", "0", "1.2 TFLOP/s", "3 GB/s", "compute", "unchanged"),
        ("a_much_longer_benchmark_name[1024]", "cuda:0", "123.4 µs", "-", "130 µs", "12.5%", "10000",
         "-", "-", "-", "232 (+20)/40", "10 (+10)", "-", "-", "memory (expected compute)",
         "no-baseline, memory regressed, misclassified"),
    ]
    lines = report.format_table(rows)
    assert len(lines) == 2 + len(rows)  # header, separator, rows
    header, sep = lines[0], lines[1]
    assert set(sep) <= {"-", " "}
    assert _cells(header, sep) == list(report.COLUMNS)
    for line, row in zip(lines[2:], rows):
        assert _cells(line, sep) == list(row)
    spans = _column_spans(sep)
    assert len(spans) == len(report.COLUMNS)
    for (start, end), col in zip(spans, report.COLUMNS):
        width = end - start
        assert width == max(len(col), *(len(r[report.COLUMNS.index(col)]) for r in rows))

    right = {"median", "CPU", "p95", "IQR", "rounds", "baseline", "ratio", "peak mem", "ops/kern", "syncs", "FLOP/s", "B/s"}
    for line, cells in zip(lines[2:] + [header], rows + [tuple(report.COLUMNS)]):
        padded = line.ljust(spans[-1][1])
        for (start, end), col, cell in zip(spans, report.COLUMNS, cells):
            field = padded[start:end]
            if col in right:
                assert field == cell.rjust(end - start), (col, field)
            else:
                assert field == cell.ljust(end - start), (col, field)
            # Two spaces separate columns.
            assert padded[end:end + 2].strip() == ""
        assert line == line.rstrip()  # no trailing whitespace


def test_format_table_exact_small():
    lines = report.format_table([("a", "1")], header=("name", "device"))
    assert lines == ["name  device", "----  ------", "a     1"]
    lines = report.format_table([("xx", "d", "1 ms")], header=("n", "dev", "median"))
    assert lines == ["n   dev  median", "--  ---  ------", "xx  d      1 ms"]


def test_format_table_no_rows():
    lines = report.format_table([])
    assert len(lines) == 2
    assert _cells(lines[0], lines[1]) == list(report.COLUMNS)
    assert lines[0].split() == ("name device median CPU p95 IQR rounds baseline ratio peak mem ops/kern syncs "
                                "FLOP/s B/s bottleneck verdict").split()


def test_format_table_right_aligns_peak_mem_and_left_aligns_bottleneck_and_verdict():
    rows = [("a", "cpu", "1 ms", "1 ms", "1 ms", "1.0%", "10", "-", "-", "812 MiB (+11.0%)", "overhead", "regressed"),
            ("b", "cpu", "1 ms", "-", "1 ms", "1.0%", "10", "-", "-", "512 B", "memory (expected compute)", "-")]
    header = report.COLUMNS[:10] + report.COLUMNS[-2:]  # without the count and rate columns
    lines = report.format_table(rows, header=header)
    (mem_start, mem_end), (bn_start, bn_end), (verdict_start, _) = _column_spans(lines[1])[9:12]
    assert mem_end - mem_start == len("812 MiB (+11.0%)")
    assert lines[0][mem_start:mem_end] == "peak mem".rjust(mem_end - mem_start)
    assert lines[3][mem_start:mem_end] == "512 B".rjust(mem_end - mem_start)
    assert bn_start == mem_end + 2
    assert bn_end - bn_start == len("memory (expected compute)")
    assert lines[0][bn_start:bn_end] == "bottleneck".ljust(bn_end - bn_start)
    assert lines[2][bn_start:bn_end] == "overhead".ljust(bn_end - bn_start)
    assert lines[3][bn_start:bn_end] == "memory (expected compute)"
    assert verdict_start == bn_end + 2
    assert lines[2][verdict_start:] == "regressed"
    assert lines[3][verdict_start:] == "-"  # trailing padding stripped


def test_summary_row_values():
    base = lognormal(7, 100)
    cur = lognormal(8, 100, factor=1.3)
    c = decide(cur, base)
    r = make_result(cur, comparison=c, device="cuda:0")
    row = report.summary_row("m.py::t", r)
    assert len(row) == len(report.COLUMNS)
    assert row[0] == "m.py::t" and row[1] == "cuda:0"
    assert row[2] == format_ms(r.median_ms) and row[4] == format_ms(r.p95_ms)
    assert row[3] == "-"  # no CPU time read
    assert row[5] == f"{r.iqr_fraction * 100:.1f}%"
    assert row[6] == "100"
    assert row[7] == format_ms(c.baseline_median_ms)
    assert row[8] == format_ratio(r.median_ms / c.baseline_median_ms)  # the row's own columns agree (raw)
    assert row[MEM] == "-"  # no peak memory measured
    assert row[BOTTLENECK] == "-"  # not classified
    assert row[VERDICT] == "regressed"
    assert report.summary_row("m.py::t", r, updated=True)[VERDICT] == "regressed (baseline updated)"


def test_summary_row_smoke_and_no_comparison():
    smoke = make_result([1.5], smoke=True)
    row = report.summary_row("t", smoke)
    assert len(row) == len(report.COLUMNS)
    assert row[3] == "-" and row[4] == "-" and row[5] == "-" and row[7] == "-" and row[8] == "-"
    assert row[MEM] == "-"  # smoke mode measures no memory
    assert row[BOTTLENECK] == "-"
    assert row[VERDICT] == "smoke"
    plain = make_result(lognormal(9, 20))
    assert report.summary_row("t", plain)[MEM:] == ("-",) * 7


def test_summary_row_marks_unchanged_with_note():
    c = decide(lognormal(10, 2000, factor=1.02, sigma=0.01), lognormal(11, 2000, sigma=0.01))
    assert c.verdict is Verdict.UNCHANGED and c.note
    r = make_result([2.0, 2.1, 2.05], comparison=c)
    assert report.summary_row("t", r)[VERDICT] == "unchanged*"


def _memory_result(current, baseline, *, max_memory_bytes=None, comparison=None, threshold=0.02):
    m = None
    if current is not None:
        m = decide_memory(current, baseline, threshold=threshold, max_memory_bytes=max_memory_bytes,
                          benchmark_id="t", device="cuda:0")
    return make_result([2.0, 2.1, 2.05], comparison=comparison, peak_memory_bytes=current,
                       memory_comparison=m)


def _unchanged_comparison():
    x = lognormal(1, 200, sigma=0.01)
    c = decide(x, x)  # identical, precise samples: unchanged
    assert c.verdict is Verdict.UNCHANGED and not c.note
    return c


def test_summary_row_memory_text_with_baseline():
    current = 851443712  # 812 MiB
    baseline = round(current / 1.11)
    r = _memory_result(current, baseline, comparison=_unchanged_comparison())
    assert r.memory_comparison.verdict is Verdict.REGRESSED
    row = report.summary_row("t", r)
    assert row[MEM] == "812 MiB (+11.0%)"
    assert row[VERDICT] == "unchanged, memory regressed"
    assert report.summary_row("t", r, updated=True)[VERDICT] == "unchanged, memory regressed (baseline updated)"


def test_summary_row_memory_text_decrease_and_tiny_change():
    # A decrease shows a negative change.
    r = _memory_result(400 * MiB, 500 * MiB, comparison=_unchanged_comparison())
    row = report.summary_row("t", r)
    assert row[MEM] == "400 MiB (-20.0%)"
    assert row[VERDICT] == "unchanged, memory improved"
    # A change below 0.05% is not shown (it would read +0.0%), and the verdict is unchanged.
    r = _memory_result(1000 * MiB + 100, 1000 * MiB, comparison=_unchanged_comparison())
    assert report.summary_row("t", r)[MEM] == "1000 MiB"
    assert report.summary_row("t", r)[VERDICT] == "unchanged"
    # Exactly equal: no change text.
    r = _memory_result(3 * 2**30, 3 * 2**30)
    assert report.summary_row("t", r)[MEM] == "3.00 GiB"


def test_summary_row_memory_text_without_baseline_or_comparison():
    r = _memory_result(851443712, None)
    assert r.memory_comparison.verdict is Verdict.NO_BASELINE
    row = report.summary_row("t", r)
    assert row[MEM] == "812 MiB"
    assert row[VERDICT] == "-"  # no timing comparison; no-baseline memory adds nothing
    # peak measured but never compared
    r = make_result([1.0, 1.1], peak_memory_bytes=512)
    assert report.summary_row("t", r)[MEM] == "512 B"
    # a baseline of 0 bytes has no relative change
    r = _memory_result(0, 0)
    assert report.summary_row("t", r)[MEM] == "0 B"


def test_summary_row_memory_dash_when_peak_is_none():
    # Even with a memory comparison attached, a missing peak prints "-".
    m = decide_memory(100 * MiB, 50 * MiB)
    r = make_result([1.0, 1.1], peak_memory_bytes=None, memory_comparison=m)
    assert report.summary_row("t", r)[MEM] == "-"
    assert report.summary_row("t", make_result([1.0, 1.1]))[MEM] == "-"


def test_summary_row_verdict_over_max_memory():
    c = _unchanged_comparison()
    # Over the budget but unchanged against the baseline.
    r = _memory_result(1000 * MiB, 1000 * MiB, max_memory_bytes=900 * MiB, comparison=c)
    assert r.memory_comparison.verdict is Verdict.UNCHANGED and r.memory_comparison.over_budget
    row = report.summary_row("t", r)
    assert row[MEM] == "1000 MiB"
    assert row[VERDICT] == "unchanged, over max_memory"
    # Regressed and over the budget: both, in that order, before "(baseline updated)".
    r = _memory_result(1000 * MiB, 500 * MiB, max_memory_bytes=900 * MiB, comparison=c)
    assert report.summary_row("t", r, updated=True)[VERDICT] == (
        "unchanged, memory regressed, over max_memory (baseline updated)")
    # Exactly at the budget is not over it.
    r = _memory_result(900 * MiB, 900 * MiB, max_memory_bytes=900 * MiB, comparison=c)
    assert report.summary_row("t", r)[VERDICT] == "unchanged"
    # No baseline, over the budget.
    r = _memory_result(1000 * MiB, None, max_memory_bytes=900 * MiB, comparison=c)
    assert report.summary_row("t", r)[VERDICT] == "unchanged, over max_memory"


def test_summary_row_verdict_unchanged_note_then_memory():
    c = decide(lognormal(10, 2000, factor=1.02, sigma=0.01), lognormal(11, 2000, sigma=0.01))
    assert c.verdict is Verdict.UNCHANGED and c.note
    r = _memory_result(300 * MiB, 100 * MiB, comparison=c)
    assert report.summary_row("t", r)[VERDICT] == "unchanged*, memory regressed"


def test_summary_lines_show_memory_column():
    r = _memory_result(851443712, round(851443712 / 1.11), comparison=_unchanged_comparison())
    lines = report.summary_lines([("m.py::t", r, False), ("m.py::u", make_result([1.0, 2.0]), False)])
    header, sep = lines[0], lines[1]
    assert _cells(lines[2], sep)[MEM:] == ["812 MiB (+11.0%)"] + ["-"] * 5 + ["unchanged, memory regressed"]
    assert _cells(lines[3], sep)[MEM:] == ["-"] * 7
    assert lines[2].endswith("812 MiB (+11.0%)         -      -       -    -  -           unchanged, memory regressed")


def test_summary_lines_groups_by_group_name():
    items = [
        ("m.py::b1", make_result([1.0, 1.1, 1.2], group="beta"), False),
        ("m.py::a1", make_result([2.0, 2.1, 2.2], group="alpha"), False),
        ("m.py::n1", make_result([3.0, 3.1, 3.2], group=None), True),
        ("m.py::a2", make_result([4.0, 4.1, 4.2], group="alpha"), False),
    ]
    lines = report.summary_lines(items)
    headers = [ln for ln in lines if ln.startswith("group: ")]
    assert headers == ["group: (none)", "group: alpha", "group: beta"]

    def block(title):
        start = lines.index(title) + 1
        end = lines.index("", start)
        return lines[start:end]

    alpha = block("group: alpha")
    assert [ln.split()[0] for ln in alpha[2:]] == ["m.py::a1", "m.py::a2"]  # input order kept
    assert _cells(alpha[0], alpha[1]) == list(report.COLUMNS)
    assert [ln.split()[0] for ln in block("group: beta")[2:]] == ["m.py::b1"]
    none_block = block("group: (none)")
    assert [ln.split()[0] for ln in none_block[2:]] == ["m.py::n1"]
    assert none_block[2].endswith("(baseline updated)")
    assert lines[-1] == ""


def test_summary_lines_single_ungrouped_table_has_no_group_header():
    items = [("t1", make_result([1.0, 2.0]), False), ("t2", make_result([3.0, 4.0]), False)]
    lines = report.summary_lines(items)
    assert not any(ln.startswith("group:") for ln in lines)
    assert _cells(lines[0], lines[1]) == list(report.COLUMNS)
    assert [ln.split()[0] for ln in lines[2:4]] == ["t1", "t2"]
    assert lines[4:] == [""]


def test_summary_lines_single_named_group_has_header():
    lines = report.summary_lines([("t", make_result([1.0, 2.0], group="mm"), False)])
    assert lines[0] == "group: mm"


def test_summary_lines_empty():
    assert report.summary_lines([]) == []


# --------------------------------------------------------------------------------------------
# bottleneck: BenchResult fields, result entries, the summary's bottleneck column
# --------------------------------------------------------------------------------------------


def _memory_bound() -> Bottleneck:
    """A CUDA region busy 90% of the time whose arithmetic intensity (1 FLOP/B) is below the ridge (100)."""
    e = Evidence(device_type="cuda", calls=1, wall_s=1e-3, busy_s=0.9e-3, idle_s=0.1e-3, kernel_count=4,
                 kernel_median_s=0.2e-3, flops=1e9, bytes=1e9, peak_flops_per_s=1e14,
                 peak_bytes_per_s=1e12, dtype="float32")
    b = classify(e)
    assert b.kind == "memory"
    return b


def _overhead_bound() -> Bottleneck:
    e = Evidence(device_type="cuda", calls=1, wall_s=4.1e-3, busy_s=0.23 * 4.1e-3, idle_s=0.77 * 4.1e-3,
                 host_wait_s=0.71 * 4.1e-3, kernel_count=1840, kernel_median_s=3.1e-6)
    b = classify(e)
    assert b.kind == "overhead"
    return b


def test_misclassified_property():
    mem = _memory_bound()
    assert make_result([1.0, 2.0], bottleneck=mem,
                       options={"expect_bottleneck": ("compute",)}).misclassified is True
    assert make_result([1.0, 2.0], bottleneck=mem,
                       options={"expect_bottleneck": ("compute", "memory")}).misclassified is False
    # No expectation (absent, None or empty): never misclassified.
    assert make_result([1.0, 2.0], bottleneck=mem).misclassified is False
    assert make_result([1.0, 2.0], bottleneck=mem, options={"expect_bottleneck": None}).misclassified is False
    assert make_result([1.0, 2.0], bottleneck=mem, options={"expect_bottleneck": ()}).misclassified is False
    # An expectation but no classification: not misclassified either.
    assert make_result([1.0, 2.0], options={"expect_bottleneck": ("compute",)}).misclassified is False
    # A list (as read back from JSON) works like a tuple.
    assert make_result([1.0, 2.0], bottleneck=mem,
                       options={"expect_bottleneck": ["compute"]}).misclassified is True


def test_bottleneck_message():
    b = _overhead_bound()
    r = make_result([1.0, 2.0], bottleneck=b, options={"expect_bottleneck": ("compute",)})
    assert bottleneck_message(r) == (
        "expected compute-bound, measured overhead-bound: device busy 23% of 4.1 ms; "
        "1,840 kernels, median 3.1 µs; host-wait gaps 71%")
    r = make_result([1.0, 2.0], bottleneck=b, options={"expect_bottleneck": ("compute", "memory")},
                    trace_path="artifacts/m.py__t.trace.json")
    assert bottleneck_message(r) == (
        "expected compute-bound or memory-bound, measured overhead-bound: device busy 23% of 4.1 ms; "
        "1,840 kernels, median 3.1 µs; host-wait gaps 71%; trace: artifacts/m.py__t.trace.json")
    # As expected, or nothing expected: no message.
    assert bottleneck_message(make_result([1.0, 2.0], bottleneck=b,
                       options={"expect_bottleneck": ("overhead",)})) is None
    assert bottleneck_message(make_result([1.0, 2.0], bottleneck=b, trace_path="x.json")) is None


def test_result_entry_records_bottleneck_and_trace_path():
    b = _memory_bound()
    opts = {"threshold": 0.05, "expect_bottleneck": ("compute", "memory")}
    c = decide(lognormal(4, 30, factor=1.5), lognormal(5, 30), benchmark_id="m.py::t")
    r = make_result(lognormal(4, 30, factor=1.5), comparison=c, bottleneck=b, options=opts,
                    trace_path="artifacts/t.trace.json", top_ops="(table)")
    e = report.result_entry(r, environment={}, git_commit=None, timestamp_utc="t", with_comparison=True)
    assert e["bottleneck"] == b.to_dict()
    assert e["bottleneck"]["kind"] == "memory"
    assert e["bottleneck"]["reason"] == b.reason
    assert e["bottleneck"]["summary"] == b.describe()
    assert e["bottleneck"]["evidence"]["arithmetic_intensity"] == 1.0
    assert e["trace_path"] == "artifacts/t.trace.json"
    assert "top_ops" not in e  # the table is for the terminal, not the JSON
    # The expected classes are a JSON list; the result's own options are left as a tuple.
    assert e["options"]["expect_bottleneck"] == ["compute", "memory"]
    assert r.options.expect_bottleneck == ("compute", "memory")
    assert e["options"]["threshold"] == 0.05
    back = json.loads(dumps(e))
    assert back["bottleneck"] == e["bottleneck"]
    assert back["options"]["expect_bottleneck"] == ["compute", "memory"]
    # Baseline entries (no comparison) carry the bottleneck but no trace path.
    e2 = report.result_entry(r, environment={}, git_commit=None, timestamp_utc="t")
    assert e2["bottleneck"] == b.to_dict() and "trace_path" not in e2


def test_result_entry_options_without_expectation_unchanged():
    r = make_result([1.0, 2.0], options={"expect_bottleneck": None, "threshold": 0.05})
    e = report.result_entry(r, environment={}, git_commit=None, timestamp_utc="t")
    assert e["options"] == {**DEFAULTS.to_dict(), "expect_bottleneck": None, "threshold": 0.05}


def test_result_entry_with_bottleneck_is_a_valid_baseline_entry(tmp_path):
    r = make_result(lognormal(6, 50), benchmark_id="m.py::t", bottleneck=_overhead_bound(),
                    options={"expect_bottleneck": ("overhead",)})
    e = report.result_entry(r, environment={}, git_commit="c", timestamp_utc="t")
    path = tmp_path / "b.json"
    update(path, {e["id"]: e}, device_key="cpu-x", module="m.py")
    loaded = load(path).benchmarks["m.py::t"].data
    assert loaded["bottleneck"]["kind"] == "overhead"
    assert loaded["options"]["expect_bottleneck"] == ["overhead"]
    assert loaded == json.loads(dumps({**e, "history": [run_record(e)]}))
    assert len(loaded["history"]) == 1


def test_summary_row_bottleneck_cell():
    mem = _memory_bound()
    c = _unchanged_comparison()
    # Not classified.
    assert report.summary_row("t", make_result([2.0, 2.1], comparison=c))[BOTTLENECK] == "-"
    # Classified (--gpuperf-classify), nothing expected: the kind.
    row = report.summary_row("t", make_result([2.0, 2.1], comparison=c, bottleneck=mem))
    assert row[BOTTLENECK] == "memory"
    assert row[VERDICT] == "unchanged"
    # As expected: the kind, and the verdict says nothing more.
    r = make_result([2.0, 2.1], comparison=c, bottleneck=mem, options={"expect_bottleneck": ("compute", "memory")})
    assert report.summary_row("t", r)[BOTTLENECK] == "memory"
    assert report.summary_row("t", r)[VERDICT] == "unchanged"
    # Misclassified: the kind and what was expected.
    r = make_result([2.0, 2.1], comparison=c, bottleneck=mem, options={"expect_bottleneck": ("compute",)})
    row = report.summary_row("t", r)
    assert row[BOTTLENECK] == "memory (expected compute)"
    assert row[VERDICT] == "unchanged, misclassified"
    # Several expected classes are joined with "/".
    r = make_result([2.0, 2.1], comparison=c, bottleneck=_overhead_bound(),
                    options={"expect_bottleneck": ("compute", "memory")})
    assert report.summary_row("t", r)[BOTTLENECK] == "overhead (expected compute/memory)"


def test_summary_row_verdict_misclassified_order():
    mem = _memory_bound()
    opts = {"expect_bottleneck": ("compute",)}
    # Without a timing comparison.
    r = make_result([2.0, 2.1], bottleneck=mem, options=opts)
    assert report.summary_row("t", r)[VERDICT] == "-, misclassified"
    # After the memory parts, before "(baseline updated)".
    m = decide_memory(1000 * MiB, 500 * MiB, threshold=0.02, max_memory_bytes=900 * MiB, benchmark_id="t")
    r = make_result([2.0, 2.1], comparison=_unchanged_comparison(), bottleneck=mem, options=opts,
                    peak_memory_bytes=1000 * MiB, memory_comparison=m)
    assert report.summary_row("t", r, updated=True)[VERDICT] == (
        "unchanged, memory regressed, over max_memory, misclassified (baseline updated)")
    # A regression and a misclassification.
    c = decide(lognormal(8, 100, factor=1.3), lognormal(7, 100))
    r = make_result(lognormal(8, 100, factor=1.3), comparison=c, bottleneck=mem, options=opts)
    assert report.summary_row("t", r)[VERDICT] == "regressed, misclassified"


def test_summary_lines_show_bottleneck_column():
    c = _unchanged_comparison()
    r1 = make_result([2.0, 2.1], comparison=c, bottleneck=_memory_bound(),
                     options={"expect_bottleneck": ("compute",)})
    r2 = make_result([2.0, 2.1], comparison=c, bottleneck=_overhead_bound())
    lines = report.summary_lines([("m.py::t", r1, False), ("m.py::u", r2, False),
                                  ("m.py::v", make_result([1.0, 2.0]), False)])
    header, sep = lines[0], lines[1]
    assert _cells(header, sep)[BOTTLENECK:] == ["bottleneck", "verdict"]
    assert _cells(lines[2], sep)[BOTTLENECK:] == ["memory (expected compute)", "unchanged, misclassified"]
    assert _cells(lines[3], sep)[BOTTLENECK:] == ["overhead", "unchanged"]
    assert _cells(lines[4], sep)[BOTTLENECK:] == ["-", "-"]
    assert lines[2].endswith("-  memory (expected compute)  unchanged, misclassified")


def test_the_ab_and_normalization_records_are_stored_flat_and_read_back():
    # Comparison keeps its A/B and normalization evidence in records of their own; the JSON form keeps
    # the flat keys of report schema 2 (ab_ref, ab_pairs, ab_process_ratios, ab_blocks, normalized_by,
    # raw_ratio), so files written before and after read the same.
    import dataclasses

    from pytest_gpuperf.verdict.compare import ABEvidence, Comparison, Normalization, Verdict

    c = Comparison(Verdict.REGRESSED, "m.py::t", 1.3, 1.0, ratio=1.3, ratio_ci=(1.2, 1.4), runs=2,
                   ab=ABEvidence("main (abc1234)", pairs=16, process_ratios=(1.25, 1.31),
                                 blocks=(("A", 0, 0, 1.0), ("B", 0, 1, 1.3))),
                   normalization=Normalization("copy x1.100", 1.43))
    entry = json.loads(json.dumps(report.result_entry(make_result([1.3] * 10, benchmark_id="m.py::t", comparison=c),
                                                      environment={}, git_commit=None, timestamp_utc="t",
                                                      with_comparison=True)))
    stored = entry["comparison"]
    assert (stored["ab_ref"], stored["ab_pairs"], stored["ab_process_ratios"]) == ("main (abc1234)", 16, [1.25, 1.31])
    assert stored["ab_blocks"] == [["A", 0, 0, 1.0], ["B", 0, 1, 1.3]]
    assert (stored["normalized_by"], stored["raw_ratio"]) == ("copy x1.100", 1.43)
    assert "ab" not in stored and "normalization" not in stored
    assert report.result_from_entry(entry).comparison == c
    plain = dataclasses.replace(c, ab=None, normalization=None)
    entry = json.loads(json.dumps(report.result_entry(make_result([1.3] * 10, benchmark_id="m.py::t", comparison=plain),
                                                      environment={}, git_commit=None, timestamp_utc="t",
                                                      with_comparison=True)))
    assert entry["comparison"]["ab_ref"] is None and entry["comparison"]["raw_ratio"] is None
    assert report.result_from_entry(entry).comparison == plain


@pytest.mark.parametrize("width", [80, 120, 200])
def test_the_default_table_fits_the_terminal_by_priority(width):
    # Issue 24: columns are dropped in DROP_ORDER (name, median, ratio and verdict always stay), then
    # names are cut in the middle; every line fits the width pytest reports with.
    c = decide(lognormal(3, 200, 1.3), lognormal(4, 200), benchmark_id="m.py::t")
    long_name = "tests/perf/test_workloads.py::test_transformer_layer_fwd_bwd[bf16-seq2048]"
    items = [(long_name, make_result(lognormal(3, 50), comparison=c), False),
             ("tests/a.py::test_b", make_result(lognormal(5, 50)), True)]
    lines = report.summary_lines(items, width=width)
    table = [ln for ln in lines if ln]
    assert all(len(ln) <= width for ln in table), [len(ln) for ln in table]
    header = table[0].split()
    for kept in ("name", "median", "ratio", "verdict"):
        assert kept in header
    full = report.summary_lines(items)  # no width: every column, names up to MAX_NAME_WIDTH
    assert max(map(len, full)) > width  # 205 characters here
    if width == 200:  # only the first columns of DROP_ORDER went
        dropped = [h for h in full[0].split() if h not in header]
        assert dropped and set(dropped) == set(report.DROP_ORDER[:len(dropped)])
    if width == 80:
        assert "device" not in header and "B/s" not in header  # dropped first
        assert any("..." in ln for ln in table[2:])  # the long name cut in the middle
        assert any(ln.startswith("tests/a.py::test_b") for ln in table)  # a short one kept whole
    if width == 120:  # dropping columns was enough: the name is cut only to MAX_NAME_WIDTH, as without a width
        assert any(ln.startswith(report.shorten_name(long_name, report.MAX_NAME_WIDTH) + " ") for ln in table)


def test_explicit_columns_are_shown_as_asked_and_the_legend_wraps():
    from pytest_gpuperf.reporting.terminal import Row, SessionSummary, summary

    c = decide(lognormal(3, 200, 1.3), lognormal(4, 200), benchmark_id="m.py::t")
    items = [("m.py::t", make_result(lognormal(3, 50), comparison=c), False)]
    asked = report.summary_lines(items, columns=["name", "device", "median", "p95", "bytes", "verdict"], width=40)
    assert asked[0].split() == ["name", "device", "median", "p95", "B/s", "verdict"]  # --gpuperf-columns wins
    lines = [text for kind, text, _ in summary(SessionSummary(rows=[Row("m.py::t", items[0][1])], width=80))]
    legend = [ln for ln in lines if ln.startswith("baseline = ") or ln.startswith("run's; ")]
    assert legend and all(len(ln) <= 80 for ln in lines if not ln.startswith("gpuperf:"))
