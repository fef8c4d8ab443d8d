"""Unit tests for pytest_gpuperf.verdict.bottleneck (pure: synthetic Evidence and synthetic traces)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from pytest_gpuperf.verdict.bottleneck import (
    CLASSES,
    DATALOADER_PREFIX,
    PHASE_PREFIX,
    REGION_NAME,
    SYNC_CALLS,
    Bottleneck,
    Evidence,
    Thresholds,
    TraceEvent,
    analyze,
    check_expected,
    classify,
    describe,
    mismatch_message,
    total_ns,
    union_ns,
    with_roofline,
)

US = 1_000  # ns
MS = 1_000_000  # ns


def cuda(**kw) -> Evidence:
    kw.setdefault("wall_s", 1e-3)
    return Evidence(device_type="cuda", calls=1, **kw)


def cpu(**kw) -> Evidence:
    kw.setdefault("wall_s", 1e-3)
    return Evidence(device_type="cpu", calls=1, **kw)


#: Roofline figures: ridge point 100 FLOP/B.
PEAKS = {"peak_flops_per_s": 100e12, "peak_bytes_per_s": 1e12}


# --------------------------------------------------------------------------------------------
# classify: every class
# --------------------------------------------------------------------------------------------


def test_classes():
    assert CLASSES == ("compute", "memory", "overhead", "sync", "transfer", "data")


def test_classify_data():
    b = classify(cuda(data_s=0.6e-3, busy_s=0.3e-3, idle_s=0.7e-3))
    assert b.kind == "data"
    assert b.reason == "DataLoader share 60% >= 50%"
    # exactly at the threshold counts
    assert classify(cuda(data_s=0.5e-3, busy_s=0.9e-3)).kind == "data"
    assert classify(cpu(data_s=0.5e-3)).kind == "data"
    assert classify(cuda(data_s=0.49e-3, busy_s=0.95e-3, flops=1e6, bytes=1e3, **PEAKS)).kind == "compute"


def test_classify_transfer():
    b = classify(cuda(copy_s=0.7e-3, busy_s=0.2e-3, idle_s=0.1e-3))
    assert b.kind == "transfer"
    assert b.reason == "copy share 70% >= 50%"
    assert classify(cuda(copy_s=0.5e-3, busy_s=0.5e-3)).kind == "transfer"
    assert classify(cuda(copy_s=0.49e-3, busy_s=0.51e-3)).kind != "transfer"


def test_classify_sync_when_sync_covers_half_the_idle_time():
    b = classify(cuda(busy_s=0.2e-3, idle_s=0.8e-3, sync_s=0.6e-3))
    assert b.kind == "sync"
    assert b.reason == "device idle 80%, synchronizing calls cover 75% of it"
    # exactly half of the idle time is enough
    assert classify(cuda(busy_s=0.2e-3, idle_s=0.8e-3, sync_s=0.4e-3)).kind == "sync"
    # the covered share is capped at 100% in the reason
    assert classify(cuda(busy_s=0.4e-3, idle_s=0.6e-3, sync_s=0.9e-3)).reason.endswith("cover 100% of it")


def test_classify_overhead_when_idle_not_explained_by_sync():
    b = classify(cuda(busy_s=0.2e-3, idle_s=0.8e-3, sync_s=0.39e-3, host_wait_s=0.7e-3))
    assert b.kind == "overhead"
    assert b.reason == "device idle 80% >= 50%, not explained by synchronization"
    assert classify(cuda(busy_s=0.5e-3, idle_s=0.5e-3)).kind == "overhead"  # at the threshold
    assert classify(cuda(busy_s=0.51e-3, idle_s=0.49e-3)).kind == "memory"  # below: roofline


def test_classify_cpu_overhead():
    b = classify(cpu(busy_s=0.4e-3, overhead_s=0.6e-3, kernel_count=300, kernel_median_s=1e-6))
    assert b.kind == "overhead"
    assert b.reason == "per-op overhead 60% >= 50%"
    assert classify(cpu(overhead_s=0.5e-3)).kind == "overhead"
    assert classify(cpu(overhead_s=0.49e-3, flops=1e9, bytes=1e6, **PEAKS)).kind == "compute"


def test_classify_compute_and_memory_by_roofline():
    # intensity 1000 FLOP/B >= ridge 100
    b = classify(cuda(busy_s=0.95e-3, idle_s=0.05e-3, flops=1e9, bytes=1e6, **PEAKS))
    assert b.kind == "compute"
    assert b.reason == "arithmetic intensity 1e+03 >= ridge point 100 FLOP/B"
    # exactly at the ridge point is compute-bound
    assert classify(cuda(busy_s=1e-3, flops=1e8, bytes=1e6, **PEAKS)).kind == "compute"
    # intensity 2 FLOP/B < ridge 100
    b = classify(cuda(busy_s=0.95e-3, idle_s=0.05e-3, flops=2e6, bytes=1e6, **PEAKS))
    assert b.kind == "memory"
    assert b.reason == "arithmetic intensity 2 < ridge point 100 FLOP/B"
    # the CPU uses the same rule once overhead is ruled out
    assert classify(cpu(busy_s=1e-3, flops=1e9, bytes=1e6, **PEAKS)).kind == "compute"
    assert classify(cpu(busy_s=1e-3, flops=1e6, bytes=1e6, **PEAKS)).kind == "memory"


def test_classify_no_flops_is_memory():
    b = classify(cuda(busy_s=1e-3, flops=0.0, bytes=None))
    assert b.kind == "memory"
    assert b.reason == "no FLOPs counted: the region only moves data"
    # bytes but no FLOP count at all
    assert classify(cuda(busy_s=1e-3, flops=None, bytes=1e6)).reason == "no FLOPs counted: the region only moves data"
    # zero FLOPs with full roofline figures: intensity 0 is below any ridge point
    b = classify(cuda(busy_s=1e-3, flops=0.0, bytes=1e6, **PEAKS))
    assert b.kind == "memory" and "0 < ridge point 100" in b.reason
    # nothing known at all: memory by default
    b = classify(cuda(busy_s=1e-3))
    assert b.kind == "memory" and b.reason == "no roofline figures; defaulting to memory"
    # counts without calibrated peaks
    assert classify(cuda(busy_s=1e-3, flops=1e9, bytes=1e6)).reason == "no roofline figures; defaulting to memory"


def test_classify_every_class_is_reachable():
    kinds = {
        classify(cuda(data_s=0.9e-3)).kind,
        classify(cuda(copy_s=0.9e-3)).kind,
        classify(cuda(idle_s=0.9e-3, sync_s=0.9e-3)).kind,
        classify(cuda(idle_s=0.9e-3)).kind,
        classify(cuda(busy_s=1e-3, flops=1e9, bytes=1e6, **PEAKS)).kind,
        classify(cuda(busy_s=1e-3, flops=1e6, bytes=1e6, **PEAKS)).kind,
    }
    assert kinds == set(CLASSES)


def test_classify_returns_bottleneck_with_the_evidence():
    e = cuda(idle_s=0.9e-3)
    b = classify(e)
    assert isinstance(b, Bottleneck) and b.evidence is e


# --------------------------------------------------------------------------------------------
# classify: decision order
# --------------------------------------------------------------------------------------------


def test_data_beats_transfer_beats_idle_beats_roofline():
    everything = dict(data_s=0.9e-3, copy_s=0.9e-3, idle_s=0.9e-3, sync_s=0.9e-3, busy_s=1e-3,
                      flops=1e9, bytes=1e6, **PEAKS)
    assert classify(cuda(**everything)).kind == "data"
    assert classify(cuda(**{**everything, "data_s": 0.0})).kind == "transfer"
    assert classify(cuda(**{**everything, "data_s": 0.0, "copy_s": 0.0})).kind == "sync"
    assert classify(cuda(**{**everything, "data_s": 0.0, "copy_s": 0.0, "sync_s": 0.0})).kind == "overhead"
    assert classify(cuda(**{**everything, "data_s": 0.0, "copy_s": 0.0, "idle_s": 0.0})).kind == "compute"


def test_cpu_order_data_transfer_overhead_roofline():
    everything = dict(data_s=0.9e-3, copy_s=0.9e-3, overhead_s=0.9e-3, busy_s=1e-3, flops=1e9, bytes=1e6, **PEAKS)
    assert classify(cpu(**everything)).kind == "data"
    assert classify(cpu(**{**everything, "data_s": 0.0})).kind == "transfer"
    assert classify(cpu(**{**everything, "data_s": 0.0, "copy_s": 0.0})).kind == "overhead"
    assert classify(cpu(**{**everything, "data_s": 0.0, "copy_s": 0.0, "overhead_s": 0.0})).kind == "compute"


def test_idle_rule_is_gpu_only_and_overhead_rule_cpu_only():
    # A CPU region's idle_s/sync_s are not used ...
    assert classify(cpu(idle_s=0.9e-3, sync_s=0.9e-3, busy_s=1e-3, flops=1e9, bytes=1e6, **PEAKS)).kind == "compute"
    # ... nor is a GPU region's overhead_s.
    assert classify(cuda(overhead_s=0.9e-3, busy_s=1e-3, flops=1e9, bytes=1e6, **PEAKS)).kind == "compute"


# --------------------------------------------------------------------------------------------
# classify: thresholds
# --------------------------------------------------------------------------------------------


def test_thresholds_defaults():
    assert Thresholds() == Thresholds(data=0.5, transfer=0.5, idle=0.5, sync_share=0.5, cpu_overhead=0.5)


def test_custom_thresholds_change_outcomes():
    e = cuda(data_s=0.3e-3, busy_s=1e-3, flops=1e9, bytes=1e6, **PEAKS)
    assert classify(e).kind == "compute"
    b = classify(e, Thresholds(data=0.25))
    assert b.kind == "data" and b.reason == "DataLoader share 30% >= 25%"

    e = cuda(copy_s=0.4e-3, busy_s=0.6e-3, flops=1e9, bytes=1e6, **PEAKS)
    assert classify(e).kind == "compute"
    assert classify(e, Thresholds(transfer=0.4)).kind == "transfer"

    e = cuda(busy_s=0.4e-3, idle_s=0.6e-3, sync_s=0.2e-3, flops=1e9, bytes=1e6, **PEAKS)
    assert classify(e).kind == "overhead"
    assert classify(e, Thresholds(idle=0.7)).kind == "compute"
    b = classify(e, Thresholds(sync_share=0.3))
    assert b.kind == "sync"
    b = classify(e, Thresholds(idle=0.6))
    assert b.kind == "overhead" and b.reason == "device idle 60% >= 60%, not explained by synchronization"

    e = cpu(overhead_s=0.3e-3, busy_s=1e-3, flops=1e6, bytes=1e6, **PEAKS)
    assert classify(e).kind == "memory"
    b = classify(e, Thresholds(cpu_overhead=0.3))
    assert b.kind == "overhead" and b.reason == "per-op overhead 30% >= 30%"


def test_zero_wall_time_classifies_without_dividing_by_zero():
    e = cuda(wall_s=0.0)
    assert e.fraction(1.0) == 0.0
    assert classify(e).kind == "memory"


# --------------------------------------------------------------------------------------------
# describe / mismatch_message
# --------------------------------------------------------------------------------------------

WALL = 4.1e-3


def _overhead_evidence(**kw) -> Evidence:
    return Evidence(device_type="cuda", calls=1, wall_s=WALL, busy_s=0.23 * WALL, idle_s=0.77 * WALL,
                    host_wait_s=0.71 * WALL, kernel_count=1840, kernel_median_s=3.1e-6, **kw)


def test_mismatch_message_exact():
    b = classify(_overhead_evidence())
    assert b.kind == "overhead"
    assert mismatch_message(("compute",), b) == (
        "expected compute-bound, measured overhead-bound: device busy 23% of 4.1 ms; "
        "1,840 kernels, median 3.1 µs; host-wait gaps 71%")
    assert b.describe() == "device busy 23% of 4.1 ms; 1,840 kernels, median 3.1 µs; host-wait gaps 71%"


def test_mismatch_message_several_expected():
    b = classify(_overhead_evidence())
    msg = mismatch_message(("compute", "memory"), b)
    assert msg.startswith("expected compute-bound or memory-bound, measured overhead-bound: device busy 23%")
    assert mismatch_message(["sync", "data", "transfer"], b).startswith(
        "expected sync-bound or data-bound or transfer-bound, measured overhead-bound: ")


def test_mismatch_message_with_roofline_and_sync():
    e = _overhead_evidence(sync_s=0.1 * WALL, flops=2e9, bytes=1e8, **PEAKS)
    b = classify(e)
    parts = mismatch_message(("compute",), b).split(": ", 1)[1].split("; ")
    assert parts[:4] == ["device busy 23% of 4.1 ms", "1,840 kernels, median 3.1 µs", "host-wait gaps 71%",
                         "synchronizing calls 10%"]
    assert parts[4] == "arithmetic intensity 20 FLOP/B vs ridge point 100 FLOP/B"
    # 2e9 FLOP over 0.943 ms busy = 2.12 TFLOP/s = 2% of 100 TFLOP/s
    assert parts[5] == "2.12 TFLOP/s (2% of peak)"
    # 1e8 B over 0.943 ms = 106 GB/s = 11% of 1 TB/s
    assert parts[6] == "106 GB/s (11% of peak)"
    assert len(parts) == 7


def test_describe_leads_with_the_deciding_figure():
    e = cuda(wall_s=2e-3, data_s=1.2e-3, busy_s=0.5e-3, kernel_count=3, kernel_median_s=0.1e-3)
    assert describe(e, "data").startswith("DataLoader iteration 60% of 2 ms; device busy 25% of 2 ms")
    e = cuda(wall_s=2e-3, copy_s=1.5e-3, busy_s=0.5e-3)
    assert describe(e, "transfer").startswith("host-device copies 75% of 2 ms; device busy 25%")
    # sync always shows the synchronizing share, even when it is 0
    assert "synchronizing calls 0%" in describe(cuda(idle_s=0.9e-3), "sync")
    assert "synchronizing" not in describe(cuda(idle_s=0.9e-3), "overhead")
    # the CPU reads per-op overhead and ops instead of device figures
    e = cpu(wall_s=10e-3, overhead_s=6e-3, kernel_count=2500, kernel_median_s=2e-6)
    assert describe(e, "overhead") == "per-op overhead 60% of 10 ms; 2,500 ops, median 2 µs"
    assert classify(e).describe() == describe(e, "overhead")


# --------------------------------------------------------------------------------------------
# Evidence derived figures, Bottleneck.to_dict
# --------------------------------------------------------------------------------------------


def test_evidence_roofline_figures():
    e = cuda(wall_s=2e-3, busy_s=1e-3, flops=4e9, bytes=2e8, **PEAKS)
    assert e.arithmetic_intensity == pytest.approx(20.0)
    assert e.ridge_point == pytest.approx(100.0)
    assert e.compute_time_s == 1e-3  # busy time, not wall time
    assert e.achieved_flops_per_s == pytest.approx(4e12)
    assert e.achieved_bytes_per_s == pytest.approx(2e11)
    assert e.pct_of_peak_flops == pytest.approx(4.0)
    assert e.pct_of_peak_bandwidth == pytest.approx(20.0)


def test_evidence_rates_over_wall_time_without_busy_time():
    e = cpu(wall_s=2e-3, busy_s=0.0, flops=4e9, bytes=2e8, **PEAKS)
    assert e.compute_time_s == 2e-3
    assert e.achieved_flops_per_s == pytest.approx(2e12)
    assert e.achieved_bytes_per_s == pytest.approx(1e11)


def test_evidence_missing_figures_are_none():
    e = cuda(busy_s=1e-3)
    assert e.arithmetic_intensity is None and e.ridge_point is None
    assert e.achieved_flops_per_s is None and e.achieved_bytes_per_s is None
    assert e.pct_of_peak_flops is None and e.pct_of_peak_bandwidth is None
    # zero bytes: no intensity (not a division by zero)
    assert cuda(busy_s=1e-3, flops=1e6, bytes=0.0).arithmetic_intensity is None
    # counts without peaks: rates, but no percentage of peak
    e = cuda(busy_s=1e-3, flops=1e6, bytes=1e6)
    assert e.achieved_flops_per_s == pytest.approx(1e9) and e.pct_of_peak_flops is None
    assert e.pct_of_peak_bandwidth is None and e.ridge_point is None
    assert cuda(peak_flops_per_s=1e12).ridge_point is None
    assert cuda(peak_bytes_per_s=1e12, peak_flops_per_s=0.0).ridge_point is None


def test_evidence_fraction():
    e = cuda(wall_s=4e-3)
    assert e.fraction(1e-3) == 0.25
    assert cuda(wall_s=0.0).fraction(1e-3) == 0.0


def test_evidence_to_dict():
    e = cuda(wall_s=2e-3, busy_s=1e-3, copy_s=0.2e-3, idle_s=0.8e-3, data_s=0.1e-3, sync_s=0.3e-3,
             host_wait_s=0.4e-3, kernel_count=7, kernel_median_s=1e-5, flops=4e9, bytes=2e8, dtype="bfloat16",
             phases={"backward": 0.6, "forward": 0.4}, **PEAKS)
    d = e.to_dict()
    fields = {f.name for f in dataclasses.fields(Evidence)}
    derived = {"arithmetic_intensity", "ridge_point", "achieved_flops_per_s", "achieved_bytes_per_s",
               "pct_of_peak_flops", "pct_of_peak_bandwidth", "busy_fraction", "idle_fraction", "data_fraction",
               "copy_fraction", "host_wait_fraction", "overhead_fraction"}
    assert set(d) == fields | derived
    assert d["device_type"] == "cuda" and d["calls"] == 1 and d["dtype"] == "bfloat16"
    assert d["phases"] == {"backward": 0.6, "forward": 0.4}
    assert d["arithmetic_intensity"] == pytest.approx(20.0)
    assert d["ridge_point"] == pytest.approx(100.0)
    assert d["pct_of_peak_flops"] == pytest.approx(4.0)
    assert d["busy_fraction"] == pytest.approx(0.5)
    assert d["idle_fraction"] == pytest.approx(0.4)
    assert d["data_fraction"] == pytest.approx(0.05)
    assert d["copy_fraction"] == pytest.approx(0.1)
    assert d["host_wait_fraction"] == pytest.approx(0.2)
    assert d["overhead_fraction"] == 0.0
    json.dumps(d, allow_nan=False)
    # without roofline figures the derived ones are None, still JSON-ready
    d = cpu().to_dict()
    assert d["arithmetic_intensity"] is None and d["pct_of_peak_bandwidth"] is None
    json.dumps(d, allow_nan=False)


def test_bottleneck_to_dict():
    e = _overhead_evidence()
    b = classify(e)
    d = b.to_dict()
    assert set(d) == {"kind", "reason", "summary", "evidence"}
    assert d["kind"] == "overhead"
    assert d["reason"] == b.reason
    assert d["summary"] == b.describe() == describe(e, "overhead")
    assert d["evidence"] == e.to_dict()
    json.dumps(d, allow_nan=False)


def test_zero_time_evidence_with_counts_can_be_described():
    e = with_roofline(analyze([], device_type="cuda"), flops=1e9, bytes_moved=1e6, peak_flops_per_s=1e14,
                      peak_bytes_per_s=1e12, dtype="float32")
    b = classify(e)
    assert b.to_dict()["kind"] == b.kind
    assert isinstance(b.describe(), str)


def test_with_roofline():
    e = cuda(busy_s=1e-3)
    r = with_roofline(e, flops=1e9, bytes_moved=1e7, peak_flops_per_s=1e13, peak_bytes_per_s=1e12,
                      dtype="float16")
    assert (r.flops, r.bytes, r.peak_flops_per_s, r.peak_bytes_per_s, r.dtype) == (1e9, 1e7, 1e13, 1e12, "float16")
    assert r.busy_s == e.busy_s and r.device_type == "cuda"
    assert e.flops is None  # a new Evidence; the original is unchanged
    assert classify(r).kind == "compute"  # 100 FLOP/B >= 10 FLOP/B


# --------------------------------------------------------------------------------------------
# Thresholds.parse
# --------------------------------------------------------------------------------------------


def test_thresholds_parse():
    assert Thresholds.parse("idle=0.6, data=0.4") == Thresholds(idle=0.6, data=0.4)
    assert Thresholds.parse("") == Thresholds()
    assert Thresholds.parse("  ") == Thresholds()
    assert Thresholds.parse("transfer = 0.3,\nsync_share=1\ncpu_overhead=0.25,") == Thresholds(
        transfer=0.3, sync_share=1.0, cpu_overhead=0.25)
    assert Thresholds.parse("idle=0.6, idle=0.7").idle == 0.7


def test_thresholds_parse_unknown_key():
    with pytest.raises(ValueError, match="'gpu=0.5'") as exc:
        Thresholds.parse("idle=0.6, gpu=0.5")
    assert "data, transfer, idle, sync_share, cpu_overhead" in str(exc.value)
    with pytest.raises(ValueError, match="NAME=FRACTION"):
        Thresholds.parse("idle")


@pytest.mark.parametrize("text", ["idle=abc", "idle=", "data=50%"])
def test_thresholds_parse_not_a_number(text):
    with pytest.raises(ValueError, match="is not a number"):
        Thresholds.parse(text)


@pytest.mark.parametrize("text", ["idle=0", "idle=-0.1", "data=1.5", "data=nan", "data=inf"])
def test_thresholds_parse_out_of_range(text):
    with pytest.raises(ValueError, match=r"expected a fraction in \(0, 1\]") as exc:
        Thresholds.parse(text)
    assert repr(text) in str(exc.value)


def test_thresholds_parse_bounds():
    assert Thresholds.parse("idle=1").idle == 1.0
    assert Thresholds.parse("idle=1e-9").idle == 1e-9


# --------------------------------------------------------------------------------------------
# check_expected
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, expected",
    [
        ("compute", ("compute",)),
        (("compute", "memory"), ("compute", "memory")),
        (["sync", "data"], ("sync", "data")),
        ("compute,memory", ("compute", "memory")),
        (" compute , memory ", ("compute", "memory")),
        ("Compute-bound", ("compute",)),
        ("MEMORY-BOUND", ("memory",)),
        (("overhead-bound", "Transfer"), ("overhead", "transfer")),
    ],
)
def test_check_expected_accepts(value, expected):
    assert check_expected(value) == expected


def test_check_expected_every_class():
    assert check_expected(CLASSES) == CLASSES
    assert check_expected(",".join(CLASSES)) == CLASSES


@pytest.mark.parametrize("value", ["gpu", 3, [], "", ("compute", "gpu"), None, "compute,"])
def test_check_expected_rejects_naming_the_value(value):
    with pytest.raises(ValueError) as exc:
        check_expected(value)
    msg = str(exc.value)
    assert msg.startswith(f"expect_bottleneck={value!r}: ")
    assert "compute, memory, overhead, sync, transfer, data" in msg


def test_check_expected_names_the_bad_item_and_the_option():
    with pytest.raises(ValueError, match="unknown class 'gpu'"):
        check_expected(("compute", "gpu"))
    with pytest.raises(ValueError, match=r"^marker expect_bottleneck='gpu': "):
        check_expected("gpu", "marker expect_bottleneck")


# --------------------------------------------------------------------------------------------
# union_ns / total_ns
# --------------------------------------------------------------------------------------------


def test_union_ns():
    assert union_ns([]) == []
    assert union_ns([(5, 10), (0, 3)]) == [(0, 3), (5, 10)]  # sorted
    assert union_ns([(0, 10), (5, 15), (20, 30)]) == [(0, 15), (20, 30)]  # overlaps merged
    assert union_ns([(0, 10), (10, 20)]) == [(0, 20)]  # touching intervals merged
    assert union_ns([(0, 100), (10, 20), (30, 40)]) == [(0, 100)]  # contained
    assert union_ns([(5, 5), (7, 3), (0, 1)]) == [(0, 1)]  # empty and reversed dropped
    assert union_ns(iter([(3, 4), (1, 2)])) == [(1, 2), (3, 4)]  # any iterable


def test_total_ns():
    assert total_ns([]) == 0
    assert total_ns([(0, 10), (5, 15), (20, 30)]) == 25
    assert total_ns([(0, 10), (0, 10)]) == 10
    assert total_ns([(10, 0)]) == 0


# --------------------------------------------------------------------------------------------
# analyze: synthetic GPU traces
# --------------------------------------------------------------------------------------------


def region(start, end):
    return TraceEvent(REGION_NAME, "annotation", start, end)


def launch(corr, start, dur=1 * US):
    return TraceEvent("cudaLaunchKernel", "runtime", start, start + dur, corr)


def kernel(corr, start, end, name="void gemm_kernel<float>()"):
    return TraceEvent(name, "kernel", start, end, corr)


def htod(corr, start, end):
    return TraceEvent("Memcpy HtoD (Pageable -> Device)", "memcpy", start, end, corr)


def sync(start, end, name="cudaStreamSynchronize"):
    return TraceEvent(name, "runtime", start, end)


def dataloader(start, end):
    return TraceEvent(DATALOADER_PREFIX + "#_SingleProcessDataLoaderIter.__next__", "annotation", start, end)


def phase(name, start, end):
    return TraceEvent(PHASE_PREFIX + name, "annotation", start, end)


def test_trace_event_duration():
    assert kernel(1, 100, 350).duration_ns == 250
    assert TraceEvent("x", "other", 0, 1).correlation == 0


def test_region_names():
    assert REGION_NAME == "gpuperf::region"
    assert DATALOADER_PREFIX == "enumerate(DataLoader)"
    assert PHASE_PREFIX == "gpuperf::phase::"
    assert "cudaStreamSynchronize" in SYNC_CALLS and "cudaDeviceSynchronize" in SYNC_CALLS
    assert "cudaLaunchKernel" not in SYNC_CALLS and "cudaMemcpyAsync" not in SYNC_CALLS


def test_analyze_gpu_busy_is_union_of_kernels():
    events = [
        region(0, 10 * US),
        launch(1, 0), kernel(1, 1 * US, 3 * US),
        launch(2, 500), kernel(2, 2 * US, 4 * US),  # overlaps kernel 1 (another stream)
        launch(3, 1 * US), kernel(3, 6 * US, 7 * US),
    ]
    e = analyze(events, device_type="cuda")
    assert e.device_type == "cuda" and e.calls == 1
    assert e.wall_s == pytest.approx(10e-6)
    assert e.busy_s == pytest.approx(4e-6)  # [1, 4] + [6, 7] us
    assert e.copy_s == 0.0
    assert e.idle_s == pytest.approx(6e-6)
    assert e.kernel_count == 3
    assert e.kernel_median_s == pytest.approx(2e-6)  # durations 2, 2, 1 us
    assert e.sync_s == 0.0 and e.data_s == 0.0 and e.overhead_s == 0.0


def test_analyze_gpu_copies_and_idle_is_wall_minus_union():
    events = [
        region(0, 10 * US),
        launch(1, 0), kernel(1, 1 * US, 4 * US),
        launch(2, 0), htod(2, 3 * US, 5 * US),  # overlaps the kernel by 1 us
        launch(3, 0), htod(3, 8 * US, 9 * US),
        launch(4, 0), TraceEvent("Memcpy DtoD (Device -> Device)", "memcpy", 6 * US, 7 * US, 4),
        launch(5, 0), TraceEvent("Memset (Device)", "memset", 7 * US, 7 * US + 500, 5),
    ]
    e = analyze(events, device_type="cuda")
    # device-to-device copies and memsets are device work, not transfers
    assert e.busy_s == pytest.approx((3 + 1 + 0.5) * 1e-6)
    assert e.copy_s == pytest.approx(3e-6)  # HtoD only
    # active = [1, 5] + [6, 7.5] + [8, 9] = 6.5 us (the overlap counted once)
    assert e.idle_s == pytest.approx(3.5e-6)
    assert e.busy_s + e.copy_s + e.idle_s > e.wall_s  # not wall - busy - copy


def test_analyze_gpu_dtoh_is_a_transfer():
    events = [region(0, 10 * US), TraceEvent("Memcpy DtoH (Device -> Pinned)", "memcpy", 0, 6 * US, 1)]
    e = analyze(events, device_type="cuda")
    assert e.copy_s == pytest.approx(6e-6) and e.busy_s == 0.0


def test_analyze_gpu_host_wait_counts_only_late_launches():
    events = [
        region(0, 20 * US),
        launch(1, 0), kernel(1, 1 * US, 2 * US),
        # launched at 4 us, after kernel 1 ended at 2 us: the 3 us gap is host wait
        launch(2, 4 * US), kernel(2, 5 * US, 6 * US),
        # launched early (at 1 us, while kernel 1 ran) but started late: the 4 us gap is not host wait
        launch(3, 1 * US), kernel(3, 10 * US, 11 * US),
        # no launch event known: the 2 us gap is not counted
        kernel(0, 13 * US, 14 * US),
        # launched at 12 us, after kernel 3 ended but while the unlaunched kernel ran: not counted
        launch(4, 12 * US), kernel(4, 15 * US, 16 * US),
        # launched at 17 us, after everything ended (16 us): 2 us host wait
        launch(5, 17 * US), kernel(5, 18 * US, 20 * US),
    ]
    e = analyze(events, device_type="cuda")
    assert e.host_wait_s == pytest.approx(5e-6)  # 3 + 2 us
    assert e.idle_s == pytest.approx(13e-6)  # 20 - 7 us of kernels
    assert e.kernel_count == 6


def test_analyze_gpu_host_wait_uses_the_furthest_kernel_end():
    events = [
        region(0, 20 * US),
        launch(1, 0), kernel(1, 1 * US, 10 * US),  # long kernel on stream A
        launch(2, 0), kernel(2, 2 * US, 3 * US),   # short kernel on stream B
        # launched at 5 us: after kernel 2 ended but while kernel 1 still ran: no gap, no host wait
        launch(3, 5 * US), kernel(3, 10 * US, 11 * US),
        # launched at 12 us, after everything ended at 11 us: 4 us host wait
        launch(4, 12 * US), kernel(4, 15 * US, 16 * US),
    ]
    assert analyze(events, device_type="cuda").host_wait_s == pytest.approx(4e-6)


def test_analyze_gpu_host_wait_includes_copies():
    events = [
        region(0, 10 * US),
        launch(1, 0), htod(1, 0, 2 * US),
        TraceEvent("cudaMemcpyAsync", "runtime", 3 * US, 4 * US, 2), htod(2, 5 * US, 6 * US),
    ]
    e = analyze(events, device_type="cuda")
    assert e.host_wait_s == pytest.approx(3e-6)
    assert e.kernel_count == 0 and e.kernel_median_s == 0.0


def test_analyze_gpu_sync_time():
    events = [
        region(0, 10 * US),
        launch(1, 0), kernel(1, 1 * US, 2 * US),
        sync(2 * US, 6 * US),
        sync(5 * US, 7 * US, "cudaDeviceSynchronize"),  # overlapping sync calls counted once
        TraceEvent("cudaLaunchKernel", "runtime", 7 * US, 8 * US),  # not a sync call
        sync(9 * US, 15 * US),  # clipped to the region's end
    ]
    e = analyze(events, device_type="cuda")
    assert e.sync_s == pytest.approx(6e-6)


def test_analyze_gpu_dataloader_time():
    events = [
        region(10 * US, 30 * US),
        dataloader(0, 12 * US),   # 2 us inside the region
        dataloader(15 * US, 20 * US),
        dataloader(18 * US, 22 * US),  # overlapping: counted once
        dataloader(40 * US, 50 * US),  # outside
    ]
    e = analyze(events, device_type="cuda")
    assert e.wall_s == pytest.approx(20e-6)
    assert e.data_s == pytest.approx(9e-6)


def test_analyze_gpu_divides_by_calls():
    events = [
        region(0, 40 * US),
        launch(1, 0), kernel(1, 1 * US, 3 * US),
        launch(2, 5 * US), kernel(2, 10 * US, 14 * US),
        launch(3, 6 * US), htod(3, 20 * US, 30 * US),
        sync(30 * US, 36 * US),
        dataloader(36 * US, 40 * US),
    ]
    one = analyze(events, device_type="cuda")
    two = analyze(events, device_type="cuda", calls=2)
    assert two.calls == 2
    for name in ("wall_s", "busy_s", "copy_s", "idle_s", "sync_s", "data_s", "host_wait_s"):
        assert getattr(two, name) == pytest.approx(getattr(one, name) / 2), name
    assert one.wall_s == pytest.approx(40e-6) and two.wall_s == pytest.approx(20e-6)
    assert one.host_wait_s == pytest.approx(7e-6)  # kernel 2: launched at 5 us, after kernel 1 ended; the copy was not
    assert one.kernel_count == 2 and two.kernel_count == 1
    assert two.kernel_median_s == one.kernel_median_s == pytest.approx(3e-6)  # per kernel, not per call
    # calls below 1 count as 1
    assert analyze(events, device_type="cuda", calls=0) == one


def test_analyze_gpu_region_bounds():
    events = [
        TraceEvent("aten::warmup", "cpu_op", 0, 1 * US),
        launch(1, 0), kernel(1, 0, 5 * US),  # half before the region
        region(2 * US, 12 * US),
        launch(2, 3 * US), kernel(2, 20 * US, 25 * US),  # after the region: ignored
    ]
    e = analyze(events, device_type="cuda")
    assert e.wall_s == pytest.approx(10e-6)
    assert e.busy_s == pytest.approx(3e-6)  # clipped to [2, 5] us
    assert e.kernel_count == 1
    # several region annotations: from the first start to the last end
    e = analyze(events + [region(14 * US, 22 * US)], device_type="cuda")
    assert e.wall_s == pytest.approx(20e-6)
    assert e.kernel_count == 2
    # an explicit region wins
    e = analyze(events, device_type="cuda", region=(0, 30 * US))
    assert e.wall_s == pytest.approx(30e-6) and e.busy_s == pytest.approx(10e-6)
    # no region annotation: the trace's extent
    no_mark = [ev for ev in events if ev.name != REGION_NAME]
    assert analyze(no_mark, device_type="cuda").wall_s == pytest.approx(25e-6)


def test_analyze_empty_trace():
    for device_type in ("cuda", "cpu"):
        e = analyze([], device_type=device_type)
        assert e.wall_s == 0.0 and e.busy_s == 0.0 and e.kernel_count == 0 and e.kernel_median_s == 0.0
        assert e.phases == {}
        assert classify(e).kind == "memory"


def test_analyze_gpu_phases_by_launch_time():
    events = [
        region(0, 20 * US),
        phase("forward", 0, 5 * US),
        phase("backward", 5 * US, 10 * US),
        launch(1, 1 * US), kernel(1, 1 * US, 2 * US),   # forward, 1 us
        # launched in forward, runs during backward's span: still forward, 1 us
        launch(2, 4 * US), kernel(2, 6 * US, 7 * US),
        launch(3, 6 * US), kernel(3, 7 * US, 10 * US),  # backward, 3 us
        launch(4, 12 * US), kernel(4, 12 * US, 15 * US),  # no phase
    ]
    e = analyze(events, device_type="cuda")
    assert e.phases == pytest.approx({"backward": 0.6, "forward": 0.4})
    assert list(e.phases) == ["backward", "forward"]  # sorted
    assert sum(e.phases.values()) == pytest.approx(1.0)


def test_analyze_gpu_phases_several_spans_and_no_kernels():
    events = [
        region(0, 20 * US),
        phase("forward", 0, 2 * US), phase("forward", 10 * US, 12 * US),
        phase("optimizer", 15 * US, 16 * US),
        launch(1, 1 * US), kernel(1, 1 * US, 2 * US),
        launch(2, 11 * US), kernel(2, 11 * US, 14 * US),
    ]
    e = analyze(events, device_type="cuda")
    assert e.phases == {"forward": 1.0, "optimizer": 0.0}


# --------------------------------------------------------------------------------------------
# analyze + classify: GPU traces of each kind
# --------------------------------------------------------------------------------------------


def _tiny_kernels_launched_late(n=200, period=5 * US, kernel_ns=800):
    """n tiny kernels, each launched by the host after the previous one finished (eager overhead)."""
    events = [region(0, n * period)]
    for i in range(n):
        t = i * period
        events.append(launch(i + 1, t, dur=3 * US))
        events.append(kernel(i + 1, t + 3 * US + 200, t + 3 * US + 200 + kernel_ns, name="elementwise_kernel"))
    return events


def test_classify_gpu_trace_overhead():
    e = analyze(_tiny_kernels_launched_late(), device_type="cuda")
    assert e.kernel_count == 200
    assert e.kernel_median_s == pytest.approx(0.8e-6)
    assert e.busy_s / e.wall_s == pytest.approx(0.16)
    assert e.host_wait_s / e.wall_s > 0.8
    assert e.sync_s == 0.0
    b = classify(with_roofline(e, flops=1e9, bytes_moved=1e6, dtype="float32", **PEAKS))  # even "compute" math
    assert b.kind == "overhead"
    assert "device idle 84%" in b.reason
    assert mismatch_message(("compute",), b).startswith(
        "expected compute-bound, measured overhead-bound: device busy 16% of 1 ms; 200 kernels, median 800 ns; "
        "host-wait gaps 8")


def test_classify_gpu_trace_launched_early_is_not_host_wait():
    # the same kernels, all launched up front (e.g. queued behind a stream wait): no host wait
    events = [region(0, 1 * MS)]
    for i in range(200):
        events += [launch(i + 1, i * 100), kernel(i + 1, i * 5 * US, i * 5 * US + 800)]
    e = analyze(events, device_type="cuda")
    assert e.host_wait_s == 0.0
    assert e.idle_s / e.wall_s == pytest.approx(0.84)


def test_classify_gpu_trace_sync():
    # a kernel, then the host blocks in cudaStreamSynchronize (.item()) while the device idles
    events = [
        region(0, 1 * MS),
        launch(1, 0), kernel(1, 5 * US, 200 * US),
        sync(10 * US, 700 * US),
        launch(2, 950 * US), kernel(2, 960 * US, 1 * MS),
    ]
    e = analyze(events, device_type="cuda")
    assert e.idle_s == pytest.approx(765e-6)
    assert e.sync_s == pytest.approx(690e-6)
    b = classify(e)
    assert b.kind == "sync"
    assert b.reason == "device idle 76%, synchronizing calls cover 90% of it"
    assert "synchronizing calls 69%" in b.describe()


def test_classify_gpu_trace_transfer():
    events = [
        region(0, 1 * MS),
        TraceEvent("cudaMemcpyAsync", "runtime", 0, 10 * US, 1), htod(1, 10 * US, 800 * US),
        launch(2, 20 * US), kernel(2, 800 * US, 950 * US),
    ]
    e = analyze(events, device_type="cuda")
    assert e.copy_s / e.wall_s == pytest.approx(0.79)
    b = classify(e)
    assert b.kind == "transfer"
    assert b.reason == "copy share 79% >= 50%"
    assert b.describe().startswith("host-device copies 79% of 1 ms; device busy 15% of 1 ms")


def test_classify_gpu_trace_data():
    events = [region(0, 1 * MS), dataloader(0, 700 * US)]
    for i in range(3):
        events += [launch(i + 1, 700 * US + i * 100 * US), kernel(i + 1, 700 * US + i * 100 * US + 5 * US,
                                                               700 * US + (i + 1) * 100 * US)]
    e = analyze(events, device_type="cuda")
    assert e.data_s == pytest.approx(700e-6)
    b = classify(e)
    assert b.kind == "data"
    assert b.reason == "DataLoader share 70% >= 50%"


def test_classify_gpu_trace_busy_goes_to_roofline():
    events = [region(0, 1 * MS)]
    for i in range(10):
        events += [launch(i + 1, i * 10 * US), kernel(i + 1, i * 100 * US + 2 * US, (i + 1) * 100 * US)]
    e = analyze(events, device_type="cuda")
    assert e.busy_s / e.wall_s == pytest.approx(0.98)
    assert classify(with_roofline(e, flops=1e10, bytes_moved=1e7, peak_flops_per_s=1e14,
                                  peak_bytes_per_s=1e12, dtype="float16")).kind == "compute"
    assert classify(with_roofline(e, flops=1e7, bytes_moved=1e7, peak_flops_per_s=1e14,
                                  peak_bytes_per_s=1e12, dtype="float16")).kind == "memory"


# --------------------------------------------------------------------------------------------
# analyze: synthetic CPU traces
# --------------------------------------------------------------------------------------------


def op(name, start, end):
    return TraceEvent(name, "cpu_op", start, end)


def _cpu_trace():
    return [
        region(0, 100 * US),
        op("aten::linear", 10 * US, 40 * US),
        op("aten::addmm", 12 * US, 38 * US),   # nested
        op("aten::mm", 14 * US, 36 * US),      # nested twice
        op("aten::relu", 50 * US, 60 * US),
        dataloader(70 * US, 90 * US),
        op("aten::stack", 72 * US, 80 * US),   # top level, inside DataLoader iteration
        op("aten::cat", 73 * US, 79 * US),     # nested
    ]


def test_analyze_cpu_counts_top_level_ops_only():
    e = analyze(_cpu_trace(), device_type="cpu")
    assert e.device_type == "cpu"
    assert e.kernel_count == 3  # linear, relu, stack
    assert e.kernel_median_s == pytest.approx(10e-6)  # durations 30, 10, 8 us
    assert e.busy_s == pytest.approx(48e-6)
    assert e.wall_s == pytest.approx(100e-6)
    assert e.data_s == pytest.approx(20e-6)
    # the GPU figures stay empty
    assert e.copy_s == e.idle_s == e.sync_s == e.host_wait_s == 0.0


def test_analyze_cpu_overhead_is_python_gaps_plus_op_floor():
    # Python gaps: 100 - union(ops, DataLoader) = 100 - (30 + 10 + 20) = 40 us
    assert analyze(_cpu_trace(), device_type="cpu").overhead_s == pytest.approx(40e-6)
    # plus 1 us per top-level op outside DataLoader iteration (linear, relu; not stack)
    e = analyze(_cpu_trace(), device_type="cpu", cpu_op_floor_s=1e-6)
    assert e.overhead_s == pytest.approx(42e-6)
    # per call
    e2 = analyze(_cpu_trace(), device_type="cpu", cpu_op_floor_s=1e-6, calls=2)
    assert e2.overhead_s == pytest.approx(21e-6)
    assert e2.wall_s == pytest.approx(50e-6) and e2.busy_s == pytest.approx(24e-6)
    assert e2.data_s == pytest.approx(10e-6)
    assert e2.kernel_count == 1  # 3 // 2
    # never more than the wall time
    assert analyze(_cpu_trace(), device_type="cpu", cpu_op_floor_s=1.0).overhead_s == pytest.approx(100e-6)


def test_analyze_cpu_ops_in_dataloader_are_not_overhead():
    events = [region(0, 100 * US), dataloader(0, 100 * US)]
    events += [op("aten::add", i * 2 * US, i * 2 * US + 1 * US) for i in range(50)]
    e = analyze(events, device_type="cpu", cpu_op_floor_s=1e-6)
    assert e.kernel_count == 50
    assert e.overhead_s == 0.0
    assert classify(e).kind == "data"


def test_analyze_cpu_nested_op_with_equal_bounds_and_back_to_back_ops():
    events = [
        region(0, 10 * US),
        op("aten::outer", 0, 4 * US), op("aten::inner", 0, 4 * US),  # same span: nested
        op("aten::next", 4 * US, 10 * US),  # starts where the last ended: top level
    ]
    e = analyze(events, device_type="cpu")
    assert e.kernel_count == 2
    assert e.busy_s == pytest.approx(10e-6) and e.overhead_s == 0.0


def test_analyze_cpu_phases_by_op_start():
    events = [
        region(0, 100 * US),
        phase("forward", 0, 50 * US), phase("backward", 50 * US, 100 * US),
        op("aten::linear", 10 * US, 40 * US), op("aten::mm", 12 * US, 38 * US),
        op("aten::mm", 45 * US, 55 * US),  # starts in forward
        op("aten::sum", 60 * US, 70 * US),
    ]
    e = analyze(events, device_type="cpu")
    assert e.phases == pytest.approx({"backward": 0.2, "forward": 0.8})


def test_classify_cpu_trace_overhead():
    # 500 tiny ops (0.5 us) with 1.5 us of Python in between, plus a 0.4 us op floor
    events = [region(0, 1 * MS)]
    events += [op("aten::add_", i * 2 * US, i * 2 * US + 500) for i in range(500)]
    e = analyze(events, device_type="cpu", cpu_op_floor_s=0.4e-6)
    assert e.kernel_count == 500
    assert e.overhead_s / e.wall_s == pytest.approx(0.75 + 0.2, abs=1e-5)  # floor rounded down to whole ns
    b = classify(e)
    assert b.kind == "overhead" and b.reason == "per-op overhead 95% >= 50%"
    assert b.describe() == "per-op overhead 95% of 1 ms; 500 ops, median 500 ns"


def test_classify_cpu_trace_one_big_op_goes_to_roofline():
    events = [region(0, 1 * MS), op("aten::mm", 10 * US, 990 * US)]
    e = analyze(events, device_type="cpu", cpu_op_floor_s=1e-6)
    assert e.overhead_s == pytest.approx(21e-6)
    assert classify(with_roofline(e, flops=2e9, bytes_moved=12e6, peak_flops_per_s=1e12,
                                  peak_bytes_per_s=1e10, dtype="float32")).kind == "compute"


def test_plugin_final_synchronize_is_not_counted_as_a_sync_stall():
    # the profiled region ends with the plugin's own cudaDeviceSynchronize, annotated
    # gpuperf::final_sync; only the user's synchronizing calls count
    from pytest_gpuperf.verdict.bottleneck import FINAL_SYNC_NAME

    events = [
        TraceEvent("gpuperf::region", "annotation", 0, 10_000),
        TraceEvent("cudaLaunchKernel", "runtime", 100, 200, correlation=1),
        TraceEvent("gemm", "kernel", 300, 9_000, correlation=1),
        TraceEvent("cudaStreamSynchronize", "runtime", 250, 1_250),  # the user's .item(): 1 us
        TraceEvent(FINAL_SYNC_NAME, "annotation", 1_300, 9_100),
        TraceEvent("cudaDeviceSynchronize", "runtime", 1_310, 9_050),  # ours: 7.74 us, ignored
    ]
    e = analyze(events, device_type="cuda")
    assert e.sync_s == pytest.approx(1_000e-9)


def test_item_per_layer_is_sync_although_each_wait_is_short():
    """The seed example (issue 11, item 2): ``.item()`` after every layer. Each blocking wait is a
    few µs (the kernel is nearly done), but the device then idles through the Python and launch
    time until the next layer: gaps in which a synchronizing call returned are the sync's cost."""
    events = [region(0, 10 * 100 * US)]
    for i in range(10):
        t0 = i * 100 * US
        events += [launch(i + 1, t0), kernel(i + 1, t0 + 5 * US, t0 + 25 * US),
                   sync(t0 + 21 * US, t0 + 26 * US)]  # returns 1 µs after the kernel ends
    e = analyze(events, device_type="cuda")
    assert e.sync_s == pytest.approx(10 * 5e-6) and e.idle_s == pytest.approx(10 * 80e-6)
    assert e.sync_idle_s == pytest.approx(10 * 80e-6 - 5e-6)  # all gaps but the first (0-5 µs)
    b = classify(e)
    assert b.kind == "sync"
    assert b.reason == "device idle 80%, 99% of it in gaps where a synchronizing call returned"


def test_launch_bound_without_syncs_stays_overhead_and_one_trailing_sync_does_not_flip_it():
    events = [region(0, 1 * MS)]
    for i in range(50):
        t0 = i * 20 * US
        events += [launch(i + 1, t0), kernel(i + 1, t0 + 8 * US, t0 + 10 * US)]
    assert classify(analyze(events, device_type="cuda")).kind == "overhead"
    events.append(sync(985 * US, 990 * US))  # one .item() at the end (a logged loss)
    e = analyze(events, device_type="cuda")
    assert 0 < e.sync_idle_s < 0.05 * e.idle_s
    assert classify(e).kind == "overhead"
