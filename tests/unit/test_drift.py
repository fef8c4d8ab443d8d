"""Unit tests for pytest_gpuperf.measure.drift: drift ratios, the reference a benchmark is normalized by,
normalization and the drift warning (pure), plus one real measurement of the CPU references."""

from __future__ import annotations

import math

import pytest
import torch

from pytest_gpuperf.measure.drift import measure_reference
from pytest_gpuperf.verdict.machine import DRIFT_WARN, cpu_drift_ratio, drift_agrees, drift_ratios, drift_warning, normalize, ratio_for

PREFIX = "machine speed drift since the baseline was recorded (reference workloads now/then): "


# --------------------------------------------------------------------------------------------
# drift_ratios
# --------------------------------------------------------------------------------------------


def test_drift_ratios_now_over_then():
    now = {"matmul_ms": 10.0, "copy_ms": 4.0, "matmul": "512x512 float32 matmul"}
    then = {"matmul_ms": 8.0, "copy_ms": 5.0, "copy": "64 MiB copy"}
    assert drift_ratios(now, then) == {"matmul": pytest.approx(1.25), "copy": pytest.approx(0.8)}


def test_drift_ratios_accepts_ints():
    r = drift_ratios({"matmul_ms": 3, "copy_ms": 2}, {"matmul_ms": 2, "copy_ms": 2})
    assert r == {"matmul": 1.5, "copy": 1.0}
    assert all(isinstance(v, float) for v in r.values())


@pytest.mark.parametrize("current, baseline", [
    (None, {"matmul_ms": 1.0, "copy_ms": 1.0}),
    ({"matmul_ms": 1.0, "copy_ms": 1.0}, None),
    ({}, {"matmul_ms": 1.0, "copy_ms": 1.0}),
    ({"matmul_ms": 1.0, "copy_ms": 1.0}, {}),
    (None, None),
])
def test_drift_ratios_none_without_a_side(current, baseline):
    assert drift_ratios(current, baseline) is None


def test_drift_ratios_key_missing_on_one_side_is_left_out():
    now = {"matmul_ms": 2.0, "copy_ms": 3.0}
    assert drift_ratios(now, {"matmul_ms": 1.0}) == {"matmul": 2.0}
    assert drift_ratios({"copy_ms": 3.0}, {"matmul_ms": 1.0, "copy_ms": 1.5}) == {"copy": 2.0}
    assert drift_ratios({"matmul_ms": 1.0}, {"copy_ms": 1.0}) is None


@pytest.mark.parametrize("bad", [0, 0.0, -1.0, None, "1.0", float("nan")])
def test_drift_ratios_non_positive_or_non_numeric_is_left_out(bad):
    ok = {"copy_ms": 2.0}
    assert drift_ratios({"matmul_ms": bad, **ok}, {"matmul_ms": 1.0, "copy_ms": 1.0}) == {"copy": 2.0}
    assert drift_ratios({"matmul_ms": 1.0, **ok}, {"matmul_ms": bad, "copy_ms": 1.0}) == {"copy": 2.0}
    assert drift_ratios({"matmul_ms": bad}, {"matmul_ms": 1.0}) is None


# --------------------------------------------------------------------------------------------
# ratio_for
# --------------------------------------------------------------------------------------------

RATIOS = {"matmul": 1.1, "copy": 0.9}


def test_ratio_for_compute_uses_matmul():
    assert ratio_for(RATIOS, "compute") == ("matmul", 1.1)


@pytest.mark.parametrize("kind", ["memory", "latency", "launch", "unknown", None, ""])
def test_ratio_for_anything_else_uses_copy(kind):
    assert ratio_for(RATIOS, kind) == ("copy", 0.9)


def test_ratio_for_missing():
    assert ratio_for(None, "compute") is None
    assert ratio_for({}, "memory") is None
    assert ratio_for({"copy": 0.9}, "compute") is None
    assert ratio_for({"matmul": 1.1}, "memory") is None
    assert ratio_for({"matmul": 1.1}, None) is None


# --------------------------------------------------------------------------------------------
# normalize
# --------------------------------------------------------------------------------------------


def test_normalize_divides():
    assert normalize([1.0, 2.0, 4.0], 2.0) == [0.5, 1.0, 2.0]
    assert normalize((1.1, 2.2), 1.1) == pytest.approx([1.0, 2.0])
    assert normalize([], 1.5) == []
    out = normalize([3, 6], 3)
    assert out == [1.0, 2.0] and all(isinstance(x, float) for x in out)


def test_normalize_by_one_is_identity():
    xs = [0.123, 4.56, 7.89]
    assert normalize(xs, 1.0) == xs


@pytest.mark.parametrize("ratio", [0, 0.0, -0.5, -1, float("nan")])
def test_normalize_rejects_non_positive_ratio(ratio):
    with pytest.raises(ValueError, match="drift ratio must be > 0"):
        normalize([1.0, 2.0], ratio)


def test_normalize_does_not_mutate_input():
    xs = [2.0, 4.0]
    normalize(xs, 2.0)
    assert xs == [2.0, 4.0]


# --------------------------------------------------------------------------------------------
# drift_warning
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("ratios", [
    None,
    {},
    {"matmul": 1.0, "copy": 1.0},
    {"matmul": 1.049, "copy": 0.951},
    {"matmul": 1.03},
])
def test_drift_warning_none_within_5_percent(ratios):
    assert drift_warning(ratios) is None


def test_drift_warning_message_with_signed_percentages():
    msg = drift_warning({"matmul": 1.072, "copy": 0.99})
    assert msg == PREFIX + "matmul +7.2%, copy -1.0%"


def test_drift_warning_slower_copy_only():
    msg = drift_warning({"matmul": 1.01, "copy": 0.88})
    assert msg is not None
    assert "copy -12.0%" in msg and "matmul +1.0%" in msg


def test_reference_workloads_that_disagree_are_not_called_a_drift_of_the_machine():
    # Issue 24: "matmul -20.6%, copy +15.4%" on one machine minutes apart is the workloads' noise
    ratios = {"matmul": 0.794, "copy": 1.154}
    assert drift_agrees(ratios) is False
    msg = drift_warning(ratios)
    assert msg is not None and not msg.startswith(PREFIX)
    assert "disagree" in msg and "matmul -20.6%, copy +15.4%" in msg and "not a change of the machine's speed" in msg


@pytest.mark.parametrize("ratios, agrees", [
    ({"matmul": 1.2, "copy": 1.1}, True),      # both slower
    ({"matmul": 0.8, "copy": 0.9}, True),      # both faster
    ({"matmul": 1.2, "copy": 0.97}, True),     # copy within 5%: one workload moved
    ({"matmul": 1.2, "copy": 0.9}, False),     # one slower, one faster
    (None, True),
])
def test_drift_agrees_when_the_workloads_beyond_5_percent_move_the_same_way(ratios, agrees):
    assert drift_agrees(ratios) is agrees


def test_drift_warning_single_key():
    assert drift_warning({"copy": 1.2}) == PREFIX + "copy +20.0%"


def test_drift_warning_just_above_threshold():
    assert drift_warning({"matmul": 1.0 + DRIFT_WARN + 1e-6}) is not None
    assert drift_warning({"matmul": 1.0 - DRIFT_WARN - 1e-6}) is not None


@pytest.mark.parametrize("ratio", [1.05, 0.95])
def test_drift_warning_exactly_5_percent_is_within(ratio):
    assert drift_warning({"matmul": ratio}) is None


def test_drift_pipeline():
    # a machine 10% slower at copies than when the baseline was recorded: a memory-bound
    # benchmark's samples are divided by the copy ratio, and the drift is reported
    now = {"matmul_ms": 10.0, "copy_ms": 5.5}
    then = {"matmul_ms": 10.0, "copy_ms": 5.0}
    ratios = drift_ratios(now, then)
    key, r = ratio_for(ratios, "memory")
    assert key == "copy" and r == pytest.approx(1.1)
    assert normalize([1.1, 2.2], r) == pytest.approx([1.0, 2.0])
    assert drift_warning(ratios) == PREFIX + "matmul +0.0%, copy +10.0%"


# --------------------------------------------------------------------------------------------
# measure_reference (real, CPU; about 0.3 s warm, under ~1 s with first-use costs)
# --------------------------------------------------------------------------------------------


def test_measure_reference_cpu():
    ref = measure_reference(torch.device("cpu"))
    for key in ("matmul_ms", "copy_ms"):
        assert isinstance(ref[key], float) and math.isfinite(ref[key]) and ref[key] > 0, key
    assert ref["matmul"] == "512x512 float32 matmul"
    assert ref["copy"] == "64 MiB copy"
    # the CPU's single-thread reference: a pure-Python loop's thread CPU time
    assert isinstance(ref["python_cpu_ms"], float) and ref["python_cpu_ms"] > 0
    assert ref["python_cpu"] == "pure-Python loop, thread CPU time"
    assert cpu_drift_ratio(ref, ref) == 1.0
    # a measurement drifts from itself by exactly 1
    assert drift_ratios(ref, ref) == {"matmul": 1.0, "copy": 1.0}
