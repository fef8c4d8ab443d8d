"""Unit tests of issue 13's labels and helpers: the median ratio beside its CI, the regression hint,
sizes in the budget's unit, truncated names, trace names, the shared reference, .gitignore, lazy values."""

from __future__ import annotations

import hashlib

import json
import threading
import time

import numpy as np
import pytest

from pytest_gpuperf.reporting import report
from pytest_gpuperf.core.files import ensure_output_dir
from pytest_gpuperf.plugin.bench import BenchContext, GpuBench, GpuBenchUsageError, _lazy_kind
from pytest_gpuperf.verdict.compare import Verdict, decide, decide_memory
from pytest_gpuperf.measure.drift import shared_reference
from pytest_gpuperf.core.options import BenchOptions
from pytest_gpuperf.verdict.result import BenchResult
from pytest_gpuperf.core.units import format_ms, format_ratio, shorten_middle, size_unit
from pytest_gpuperf.reporting.messages import INTENDED_HINT, comparison_message, gate_messages


def lognormal(seed: int, n: int, median: float = 1.0, sigma: float = 0.05) -> np.ndarray:
    return median * np.exp(np.random.default_rng(seed).normal(0.0, sigma, n))


def result(samples, **extra) -> BenchResult:
    return BenchResult.from_samples(tuple(samples), name="t", device="cpu", rounds=len(samples), calls_per_round=1,
                                    warmup_calls=3, benchmark_id="t", **extra)


# ----------------------------------------------------------------------------- I: median ratio and its CI


def test_decide_stores_the_median_ratio_whose_ci_it_reports():
    cur, base = lognormal(1, 200, 1.3), lognormal(2, 200)
    c = decide(cur, base)
    assert c.median_ratio == pytest.approx(c.current_median_ms / c.baseline_median_ms)
    assert c.median_ratio == pytest.approx(float(np.median(cur)) / float(np.median(base)))
    assert c.ratio_ci[0] <= c.median_ratio <= c.ratio_ci[1]
    assert decide(cur, None).median_ratio is None  # no baseline, no ratio


def test_regression_message_prints_the_ci_next_to_the_median_ratio():
    c = decide(lognormal(3, 200, 1.3), lognormal(4, 200), benchmark_id="m.py::t")
    assert c.verdict is Verdict.REGRESSED
    msg = comparison_message(c)
    lo, hi = c.ratio_ci
    assert (f"median ratio {format_ratio(c.median_ratio)}, 99% CI {format_ratio(lo)}-{format_ratio(hi)}; "
            f"Hodges-Lehmann ratio {format_ratio(c.ratio)}") in msg


def test_skewed_samples_the_hodges_lehmann_ratio_lies_outside_the_ci_but_is_labelled():
    # Bimodal samples on both sides: the pairwise (HL) ratio and the median ratio differ a lot,
    # so a CI printed next to the HL ratio would look wrong (issue 13: "0.760x (0.730x-0.746x)").
    cur = np.concatenate([lognormal(6, 195, 0.74, 0.005), lognormal(7, 105, 1.0, 0.005)])
    base = np.concatenate([lognormal(8, 200, 1.0, 0.005), lognormal(9, 100, 0.8, 0.005)])
    c = decide(cur, base)
    assert not c.ratio_ci[0] <= c.ratio <= c.ratio_ci[1]  # the HL ratio is outside the median ratio's CI
    assert c.ratio_ci[0] <= c.median_ratio <= c.ratio_ci[1]
    text = report.median_ratio_text(c)
    assert text == f"{format_ratio(c.median_ratio)} ({format_ratio(c.ratio_ci[0])}-{format_ratio(c.ratio_ci[1])})"
    msg = comparison_message(c)
    assert f"median ratio {format_ratio(c.median_ratio)}, 99% CI" in msg
    assert f"Hodges-Lehmann ratio {format_ratio(c.ratio)}" in msg


def test_median_ratio_round_trips_through_report_entries_and_is_schema_valid():
    from pytest_gpuperf.storage.schema import validate

    c = decide(lognormal(8, 100, 1.2), lognormal(9, 100), benchmark_id="m.py::t")
    r = result(lognormal(8, 100, 1.2), comparison=c)
    d = report.comparison_dict(c)
    assert d["median_ratio"] == pytest.approx(c.median_ratio)
    entry = report.result_entry(r, environment={}, git_commit=None, timestamp_utc="2025-01-01T00:00:00Z",
                                with_comparison=True)
    back = report.result_from_entry(json.loads(json.dumps(entry)))
    assert back.comparison.median_ratio == pytest.approx(c.median_ratio)
    validate({"schema_version": entry["schema_version"], "kind": "report", "created_utc": "x", "git_commit": None,
              "environments": {}, "warnings": [],
              "benchmarks": {"m.py::t": dict(entry, module="m.py", baseline_file=None, smoke=False)}}, "report")


def test_message_of_an_old_report_without_median_ratio_still_names_it():
    import dataclasses

    c = dataclasses.replace(decide(lognormal(3, 200, 1.3), lognormal(4, 200)), median_ratio=None)
    assert f"median ratio {format_ratio(c.current_median_ms / c.baseline_median_ms)}" in comparison_message(c)


def test_markdown_labels_the_baseline_and_shows_the_messages_ratio():
    # issue 47: one ratio with one interval on every surface: the Markdown row's is the message's
    c = decide(lognormal(10, 200, 1.3), lognormal(11, 200), benchmark_id="m.py::t")
    r = result(lognormal(10, 200, 1.3), comparison=c)
    text = report.markdown([("m.py::t", r)], devices=["cpu"])
    header = next(ln for ln in text.splitlines() if ln.startswith("| | benchmark"))
    assert "baseline (history median)" in header and "median ratio (99% CI)" in header
    assert "Hodges-Lehmann ratio" not in header  # a second ratio beside the CI's is no longer shown
    row = next(ln for ln in text.splitlines() if ln.startswith("| [FAIL]"))
    cells = [x.strip() for x in row.split("|")]
    shown = cells[header.split("|").index(" median ratio (99% CI) ")]
    assert shown == report.median_ratio_text(c, r)
    assert shown.startswith(format_ratio(c.shown_ratio))
    assert c.shown_ratio == pytest.approx(c.current_median_ms / c.baseline_median_ms)  # its own columns' ratio
    first = comparison_message(c).splitlines()[0]
    assert shown.split(" ")[0] in first and format_ratio(c.ratio_ci[0]) in first  # the message's ratio and CI
    assert cells[header.split("|").index(" median ")] == format_ms(c.current_median_ms)
    assert "median of the stored runs' medians" in text


def test_markdown_gives_every_starred_verdict_its_footnote():
    # issue 47: the Markdown report showed `unchanged*` with no footnote
    import dataclasses

    c = dataclasses.replace(decide(lognormal(10, 200), lognormal(11, 200), benchmark_id="m.py::t"),
                            verdict=Verdict.UNCHANGED, note="significant but within the effect floor: +1.0% is inside ±5.0%")
    r = result(lognormal(10, 200), comparison=c)
    text = report.markdown([("m.py::t", r)], devices=["cpu"])
    assert "unchanged*" in text
    assert "\\* unchanged, with a note:" in text
    assert "- `m.py::t`: significant but within the effect floor: +1.0% is inside ±5.0%" in text


def test_legend_says_what_baseline_and_ratio_are():
    assert "median of the stored runs' medians" in report.LEGEND and "Hodges-Lehmann" in report.LEGEND
    assert "gpuperf show" in report.LEGEND


# ----------------------------------------------------------------------------- F: what to do when intended


def test_regression_messages_say_how_to_rerecord_and_others_do_not():
    assert comparison_message(decide(lognormal(3, 200, 1.3), lognormal(4, 200))).endswith(INTENDED_HINT)
    assert INTENDED_HINT not in comparison_message(decide(lognormal(3, 200), lognormal(4, 200)))
    assert INTENDED_HINT not in comparison_message(decide(lognormal(3, 200, 0.7), lognormal(4, 200)))
    mem = decide_memory(100 << 20, 50 << 20, benchmark_id="t")
    assert gate_messages(mem)[0].endswith(INTENDED_HINT)
    assert "--gpuperf-update-baselines" in INTENDED_HINT


# ----------------------------------------------------------------------------- L: units and widths


@pytest.mark.parametrize("text, unit", [("100 kB", "kB"), ("1.5GiB", "GiB"), (" 2 MB ", "MB"), ("12 B", "B"),
                                        (1000, None), ("100 kb", None), (None, None), ("lots", None)])
def test_size_unit(text, unit):
    assert size_unit(text) == unit


def test_budget_is_reported_in_the_unit_it_was_written_in():
    m = decide_memory(123_456, None, max_memory_bytes=100_000, max_memory_text="100 kB", benchmark_id="t",
                      device="cpu")
    (msg,) = gate_messages(m)
    assert msg == "memory budget exceeded: peak 123 kB > max_memory 100 kB on cpu\n  t"
    plain = decide_memory(123_456, None, max_memory_bytes=100_000, benchmark_id="t", device="cpu")
    assert "max_memory 97.7 KiB" in gate_messages(plain)[0]  # an int budget: IEC units as before


def test_shorten_middle():
    assert shorten_middle("short", 70) == "short"
    long = "tests/test_x.py::test_y[" + "p" * 300 + "]"
    cut = shorten_middle(long, 70)
    assert len(cut) == 70 and cut.startswith("tests/test_x.py::test_y[ppp") and cut.endswith("pp]")
    assert "..." in cut


def test_summary_table_cuts_long_names_in_the_middle():
    label = "m.py::test_x[" + "a" * 300 + "]"
    lines = report.summary_lines([(label, result([1.0, 1.1, 1.2]), False)])
    assert max(len(ln) for ln in lines) < 200
    assert shorten_middle(label, report.MAX_NAME_WIDTH) in lines[2]


# ----------------------------------------------------------------------------- E: trace and snapshot names


def _bench(module: str = "tests/test_m.py") -> GpuBench:
    return GpuBench(BenchContext(options=BenchOptions(), device=None, measuring=False,
                                 nodeid=f"{module}::t"))


def test_trace_names_are_bounded_and_distinct():
    b = _bench()
    assert b._safe_id("t[a::b]") != b._safe_id("t[a/b]")
    long1, long2 = "t[" + "x" * 300 + "1]", "t[" + "x" * 300 + "2]"
    assert len(b._safe_id(long1)) <= 100 and len(b._safe_id(long2)) <= 100
    assert b._safe_id(long1) != b._safe_id(long2)
    assert b._safe_id("t") == "tests_test_m.py__t-" + hashlib.sha1(b"tests/test_m.py::t").hexdigest()[:8]
    assert b._safe_id("t[a b]") != b._safe_id("t[a/b]")  # any lossy id gets its digest


@pytest.mark.subprocess
def test_plots_module_does_not_import_matplotlib_at_import_time():
    import subprocess
    import sys

    code = "import sys, pytest_gpuperf.reporting.plots; assert 'matplotlib' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# ----------------------------------------------------------------------------- G: .gitignore in .gpuperf/


def test_output_dir_in_dot_gpuperf_gets_a_gitignore(tmp_path):
    ensure_output_dir(tmp_path / ".gpuperf" / "artifacts")
    assert (tmp_path / ".gpuperf" / "artifacts").is_dir()
    assert (tmp_path / ".gpuperf" / ".gitignore").read_text().splitlines()[-1] == "*"
    ensure_output_dir(tmp_path / "arts")  # a folder the user chose: left alone
    assert not (tmp_path / "arts" / ".gitignore").exists()


# ----------------------------------------------------------------------------- A: one reference per run


def test_shared_reference_is_measured_once_for_two_workers(tmp_path):
    from filelock import FileLock

    calls = []

    def fake_measure(device):
        calls.append(device)
        time.sleep(0.2)  # the second "worker" waits on the lock meanwhile
        return {"matmul_ms": 1.25, "copy_ms": 0.5, "matmul": "512x512 float32 matmul", "copy": "64 MiB copy"}

    got = [None, None]

    def worker(i: int) -> None:
        got[i] = shared_reference("cuda:1", fake_measure, tmp_path, FileLock(str(tmp_path / "device-cuda_1.lock")))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert calls == ["cuda:1"]
    assert got[0] == got[1] == fake_measure("x")
    assert json.loads((tmp_path / "reference-cuda_1.json").read_text()) == got[0]


def test_without_a_shared_folder_the_reference_is_just_measured():
    import contextlib

    calls = []
    ref = shared_reference("cpu", lambda d: calls.append(d) or {"copy_ms": 1.0}, None, contextlib.nullcontext())
    assert ref == {"copy_ms": 1.0} and calls == ["cpu"]


# ----------------------------------------------------------------------------- J: noisy baselines


def test_noisy_baseline_warning_names_benchmark_iqr_and_fixes():
    noisy = result([1.0, 1.0, 1.0, 3.0] * 10, options={"max_time": 0.5})
    w = report.noisy_baseline_warning("m.py::t", noisy)
    assert w.startswith("m.py::t: noisy baseline recorded: IQR ")
    assert f"IQR {noisy.iqr_fraction * 100:.1f}%" in w
    assert "max_time (now 0.5 s)" in w and "quieter machine" in w and "MALLOC_" in w and "rounds" in w
    assert report.noisy_baseline_warning("m.py::t", result(lognormal(1, 100, sigma=0.01))) is None
    assert report.noisy_baseline_warning("m.py::t", result([1.0], smoke=True)) is None


# ----------------------------------------------------------------------------- D: lazy return values


def test_lazy_kinds():
    def gen():
        yield 1

    async def coro():
        return 1

    async def agen():
        yield 1

    assert _lazy_kind(gen()) == "generator"
    assert _lazy_kind(coro()) == "coroutine"  # closed: no "never awaited" warning
    assert _lazy_kind(agen()) == "async generator"
    assert _lazy_kind([1]) is None and _lazy_kind(None) is None


def test_benchmarking_a_generator_function_is_an_error_saying_what_was_timed():
    def numbers():
        yield from range(10)

    with pytest.raises(GpuBenchUsageError, match=r"numbers\(\) returned a generator.*only its creation was timed"
                                                 r".*lambda: list\(numbers\(\.\.\.\)\)"):
        _bench()(numbers)


@pytest.mark.parametrize("mode, column, legend", [
    ("replicates", "baseline (process medians)", "geometric mean of the baseline's per-process medians"),
    ("ab", "baseline (REF's median)", "median of side A's samples"),
])
def test_markdown_header_and_legend_follow_the_mode(mode, column, legend):
    c = decide(lognormal(10, 200, 1.3), lognormal(11, 200), benchmark_id="m.py::t")
    text = report.markdown([("m.py::t", result(lognormal(10, 200, 1.3), comparison=c))], devices=["cpu"], mode=mode)
    header = next(ln for ln in text.splitlines() if ln.startswith("| | benchmark"))
    assert column in header and "history median" not in text and legend in text
    with pytest.raises(ValueError, match="mode='x'"):
        report.markdown([], devices=["cpu"], mode="x")
