"""``BenchResult`` in parts (issue 33): timing, extras, evaluation, diagnostics; one assembly
point; flat names still read; samples cross processes whole; a file's thinned samples keep the
statistics of all."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from pytest_gpuperf.core.containment import Unavailable
from pytest_gpuperf.storage.codec import decode_result, encode_result
from pytest_gpuperf.verdict.compare import Comparison, Verdict
from pytest_gpuperf.verdict.result import PARTS, BenchResult, BenchTiming
from pytest_gpuperf.verdict.stats import MAX_STORED_SAMPLES, STAT_FIELDS, summarize

#: The flat field names of BenchResult before the split: every one still reads.
FLAT_NAMES = (
    "name device samples_ms rounds calls_per_round warmup_calls mean_ms std_ms min_ms max_ms median_ms p5_ms "
    "p25_ms p75_ms p90_ms p95_ms p99_ms iqr_ms median_ci_ms outliers comparison peak_memory_bytes "
    "memory_comparison bottleneck trace_path telemetry benchmark_id group smoke options top_ops value notes "
    "counts count_comparison extra_info probe_ms probe process_medians_ms overrun unavailable "
    "peak_memory_low_bytes op_diff op_profile").split()


def _samples(n: int, seed: int = 0) -> tuple[float, ...]:
    return tuple(float(v) for v in np.random.default_rng(seed).lognormal(0.0, 0.1, n))


def _result(samples: tuple[float, ...], **fields) -> BenchResult:
    return BenchResult.from_samples(samples, name="t", device="cpu", rounds=len(samples), calls_per_round=1,
                                    warmup_calls=2, benchmark_id="t", **fields)


def test_the_old_flat_names_all_read() -> None:
    r = _result(_samples(20), peak_memory_bytes=1024, probe_ms=0.5, probe="matmul", notes=("slow",),
                trace_path="t.json", unavailable={"counts": Unavailable("counts", "refused")})
    for name in FLAT_NAMES:
        getattr(r, name)
    assert len(dataclasses.fields(BenchResult)) <= 20
    assert r.peak_memory_bytes == r.extras.peak_memory_bytes == 1024
    assert (r.probe_ms, r.probe) == (r.timing.probe_ms, r.timing.probe) == (0.5, "matmul")
    assert r.notes == r.diagnostics.notes == ("slow",) and r.trace_path == "t.json"
    assert r.unavailable == r.extras.unavailable and "counts" in r.unavailable


def test_the_statistics_are_those_of_the_samples() -> None:
    s = _samples(101)
    r = _result(s)
    want = summarize(s)
    assert r.timing.stats == want
    assert [getattr(r, k) for k in STAT_FIELDS] == [getattr(want, k) for k in STAT_FIELDS]
    assert r.median_ci_ms == want.median_ci_ms and r.outliers == want.outliers
    assert r.median_ms == pytest.approx(float(np.median(s)))


def test_each_flat_name_goes_to_its_part_and_replace_keeps_the_rest() -> None:
    r = _result(_samples(12))
    c = Comparison(verdict=Verdict.UNCHANGED, benchmark_id="t", current_median_ms=1.0, ratio=1.0)
    r2 = r.replace(comparison=c, peak_memory_bytes=7, trace_path="x", group="g", process_medians_ms=(1.0, 1.1))
    assert r2.evaluation.comparison is c and r2.extras.peak_memory_bytes == 7 and r2.diagnostics.trace_path == "x"
    assert r2.group == "g" and r2.timing.process_medians_ms == (1.0, 1.1)
    assert r2.samples_ms == r.samples_ms and r2.timing.stats == r.timing.stats
    assert r.comparison is None and r.peak_memory_bytes is None  # frozen: the original is unchanged
    with pytest.raises(TypeError, match="samples_ms"):
        r.replace(samples_ms=(1.0,))
    with pytest.raises(TypeError):
        r.replace(no_such_field=1)
    with pytest.raises(TypeError):
        _result(_samples(3), no_such_field=1)
    assert set(PARTS) == {f.name for f in dataclasses.fields(BenchResult)} & set(PARTS)


def test_samples_cross_between_processes_whole() -> None:
    """A hand-off (no ``max_samples``) carries every sample: the result read back has the same
    samples and the statistics of those samples."""
    s = _samples(MAX_STORED_SAMPLES * 3 + 7)
    r = _result(s, process_medians_ms=(1.0, 1.01))
    back = decode_result(encode_result(r, environment={}, git_commit=None, timestamp_utc=""))
    assert back.samples_ms == r.samples_ms
    assert back.timing.stats == summarize(back.samples_ms) == r.timing.stats
    assert back.process_medians_ms == (1.0, 1.01)


def test_a_file_keeps_at_most_the_stored_samples_and_the_statistics_of_all() -> None:
    s = _samples(MAX_STORED_SAMPLES * 3 + 7, seed=1)
    r = _result(s)
    entry = encode_result(r, environment={}, git_commit=None, timestamp_utc="", max_samples=MAX_STORED_SAMPLES)
    assert len(entry["samples_ms"]) == MAX_STORED_SAMPLES and entry["samples_total"] == len(s)
    back = decode_result(entry)
    assert back.timing.stats.n == len(s)
    assert back.median_ms == r.median_ms and back.median_ci_ms == r.median_ci_ms
    small = encode_result(_result(s[:50]), environment={}, git_commit=None, timestamp_utc="",
                          max_samples=MAX_STORED_SAMPLES)
    assert "samples_total" not in small and len(small["samples_ms"]) == 50


def test_timing_of_refuses_bad_samples() -> None:
    with pytest.raises(ValueError):
        BenchTiming.of((), rounds=0, calls_per_round=1, warmup_calls=0)
    with pytest.raises(ValueError):
        BenchTiming.of((1.0, float("nan")), rounds=2, calls_per_round=1, warmup_calls=0)
