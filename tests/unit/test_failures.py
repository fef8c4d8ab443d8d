"""Unit tests for ``BenchResult.failures``: the single pass/fail decision of a benchmark.

A timing regression fails (an inconclusive comparison only under ``strict``); a memory
regression fails; a peak over ``max_memory`` fails; a misclassified bottleneck fails. While
baselines are being updated only the hard checks (``max_memory``, ``expect_bottleneck``) count.
Comparisons are built from seeded samples or by hand; nothing is measured.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from pytest_gpuperf.verdict.bottleneck import Bottleneck, Evidence, classify
from pytest_gpuperf.verdict.compare import Comparison, MemoryComparison, Verdict, decide, decide_memory
from pytest_gpuperf.verdict.result import BenchResult
from pytest_gpuperf.reporting.messages import comparison_message, failure_messages, fit_first_line as F, gate_messages, labelled

BID = "tests/perf/test_m.py::test_t[2]"
MiB = 1 << 20
TRACE = "artifacts/tests__perf__test_m.py__test_t.trace.json"


def samples(seed: int, n: int = 60, median: float = 1.0, sigma: float = 0.02) -> list[float]:
    return [float(v) for v in np.random.default_rng(seed).lognormal(math.log(median), sigma, n)]


def result(comparison: Comparison | None = None, *, memory: MemoryComparison | None = None,
           bottleneck: Bottleneck | None = None, expect: tuple[str, ...] | None = None,
           trace_path: str | None = None) -> BenchResult:
    s = tuple(samples(9, 20, 1.3))
    return BenchResult.from_samples(
        s, name="test_t[2]", device="cpu", rounds=len(s), calls_per_round=1, warmup_calls=3,
        benchmark_id=BID, comparison=comparison, memory_comparison=memory, bottleneck=bottleneck,
        trace_path=trace_path, options={"expect_bottleneck": expect},
        peak_memory_bytes=memory.current_bytes if memory else None,
    )


def regressed() -> Comparison:
    c = decide(samples(1, median=1.3), samples(2), benchmark_id=BID, baseline_file="b.json")
    assert c.verdict is Verdict.REGRESSED
    return c


def inconclusive() -> Comparison:
    c = decide(samples(5, 6, 1.04, sigma=0.1), samples(105, 6, 1.0, sigma=0.1), benchmark_id=BID)
    assert c.verdict is Verdict.INCONCLUSIVE
    return c


def overhead_bound() -> Bottleneck:
    e = Evidence(device_type="cuda", calls=1, wall_s=4.1e-3, busy_s=0.23 * 4.1e-3, idle_s=0.77 * 4.1e-3,
                 host_wait_s=0.71 * 4.1e-3, kernel_count=1840, kernel_median_s=3.1e-6)
    b = classify(e)
    assert b.kind == "overhead"
    return b


MISMATCH = ("expected compute-bound, measured overhead-bound: device busy 23% of 4.1 ms; "
            "1,840 kernels, median 3.1 µs; host-wait gaps 71%")


def test_passing_results_have_no_failures():
    for c in (None, decide(samples(1), samples(2), benchmark_id=BID),
              decide(samples(1, median=0.7), samples(2), benchmark_id=BID),
              decide(samples(1), None, benchmark_id=BID)):
        r = result(c)
        for strict in (False, True):
            for updating in (False, True):
                assert failure_messages(r, strict=strict, updating=updating) == []


# --------------------------------------------------------------------------------------------
# timing
# --------------------------------------------------------------------------------------------


def test_regression_fails():
    c = regressed()
    r = result(c)
    assert failure_messages(r) == [comparison_message(c)]
    assert failure_messages(r, strict=True) == [comparison_message(c)]
    assert failure_messages(r)[0].startswith("regressed ") and f"\n  {BID}: " in failure_messages(r)[0]


def test_regression_does_not_fail_while_updating():
    r = result(regressed())
    assert failure_messages(r, updating=True) == []
    assert failure_messages(r, updating=True, strict=True) == []


def test_inconclusive_fails_only_when_strict():
    c = inconclusive()
    r = result(c)
    assert failure_messages(r) == []
    assert failure_messages(r, strict=True) == [comparison_message(c)]
    assert failure_messages(r, strict=True, updating=True) == []


def test_hand_made_comparisons():
    base = dict(benchmark_id=BID, current_median_ms=1.2, baseline_median_ms=1.0, ratio=1.2, ratio_ci=(1.1, 1.3),
                p_slower=1e-9, p_faster=1.0)
    for verdict, fails, fails_strict in [(Verdict.REGRESSED, True, True), (Verdict.INCONCLUSIVE, False, True),
                                         (Verdict.UNCHANGED, False, False), (Verdict.IMPROVED, False, False)]:
        r = result(Comparison(verdict=verdict, **base))
        assert bool(failure_messages(r)) is fails, verdict
        assert bool(failure_messages(r, strict=True)) is fails_strict, verdict


# --------------------------------------------------------------------------------------------
# memory
# --------------------------------------------------------------------------------------------


def test_memory_regression_fails_but_not_while_updating():
    m = decide_memory(20 * MiB, 10 * MiB, benchmark_id=BID, device="cpu", baseline_file="b.json")
    assert m.verdict is Verdict.REGRESSED and not m.over_budget
    r = result(decide(samples(1), samples(2), benchmark_id=BID), memory=m)
    assert failure_messages(r) == gate_messages(m)
    assert len(failure_messages(r)) == 1 and failure_messages(r)[0].startswith("memory regressed ") and f"\n  {BID}" in failure_messages(r)[0]
    assert failure_messages(r, updating=True) == []


def test_over_max_memory_fails_also_while_updating():
    m = decide_memory(20 * MiB, None, max_memory_bytes=16 * MiB, benchmark_id=BID, device="cpu")
    assert m.verdict is Verdict.NO_BASELINE and m.over_budget
    r = result(None, memory=m)
    msg = f"memory budget exceeded: peak 20.0 MiB > max_memory 16.0 MiB on cpu\n  {BID}"
    assert failure_messages(r) == [msg]
    assert failure_messages(r, updating=True) == [msg]
    assert failure_messages(r, updating=True, strict=True) == [msg]


def test_memory_regression_and_budget_while_updating_keeps_only_the_budget():
    m = decide_memory(40 * MiB, 10 * MiB, max_memory_bytes=32 * MiB, benchmark_id=BID, device="cpu")
    assert m.verdict is Verdict.REGRESSED and m.over_budget
    r = result(None, memory=m)
    both = failure_messages(r)
    assert len(both) == 2
    assert both[0].startswith("memory regressed") and both[1].startswith("memory budget exceeded")
    assert failure_messages(r, updating=True) == [both[1]]


def test_memory_snapshot_is_appended_to_failing_memory_messages():
    m = MemoryComparison(verdict=Verdict.UNCHANGED, benchmark_id=BID, current_bytes=3 * MiB,
                         max_memory_bytes=2 * MiB, device="cuda:0", snapshot="snapshot: s.pickle\n  1.0 MiB at ...")
    r = result(None, memory=m)
    assert failure_messages(r) == [gate_messages(m)[0], "snapshot: s.pickle\n  1.0 MiB at ..."]
    ok = MemoryComparison(verdict=Verdict.UNCHANGED, benchmark_id=BID, current_bytes=MiB, snapshot="x")
    assert failure_messages(result(None, memory=ok)) == []


# --------------------------------------------------------------------------------------------
# bottleneck
# --------------------------------------------------------------------------------------------


def test_misclassification_fails_also_while_updating_with_label_prefix():
    r = result(None, bottleneck=overhead_bound(), expect=("compute",))
    assert r.misclassified
    assert failure_messages(r) == [labelled(BID, MISMATCH)]  # default label: the benchmark id
    assert failure_messages(r, updating=True) == [labelled(BID, MISMATCH)]
    assert failure_messages(r, label="test_t[2]") == [labelled("test_t[2]", MISMATCH)]
    assert failure_messages(r, label="test_t[2]", updating=True, strict=True) == [labelled("test_t[2]", MISMATCH)]


def test_expected_bottleneck_passes():
    for expect in (("overhead",), ("compute", "overhead"), None):
        assert failure_messages(result(None, bottleneck=overhead_bound(), expect=expect)) == []


def test_misclassification_with_trace_names_the_trace_once():
    c = regressed()
    r = result(c, bottleneck=overhead_bound(), expect=("compute",), trace_path=TRACE)
    assert failure_messages(r) == [comparison_message(c), labelled(BID, f"{MISMATCH}; trace: {TRACE}")]
    assert sum(TRACE in f for f in failure_messages(r)) == 1
    assert failure_messages(r, updating=True) == [labelled(BID, f"{MISMATCH}; trace: {TRACE}")]


# --------------------------------------------------------------------------------------------
# trace path
# --------------------------------------------------------------------------------------------


def test_regression_with_trace_adds_the_trace_message():
    c = regressed()
    r = result(c, trace_path=TRACE)
    assert failure_messages(r) == [comparison_message(c), F(f"trace of the profiled calls: {TRACE}\n  {BID}")]
    assert failure_messages(r, label="t") == [comparison_message(c), F(f"trace of the profiled calls: {TRACE}\n  t")]
    assert failure_messages(r, updating=True) == []  # the regression does not count, nor its trace


def test_trace_alone_does_not_fail():
    r = result(decide(samples(1), samples(2), benchmark_id=BID), trace_path=TRACE)
    assert failure_messages(r) == [] and failure_messages(r, strict=True) == []


def test_inconclusive_strict_with_trace():
    c = inconclusive()
    r = result(c, trace_path=TRACE)
    assert failure_messages(r) == []
    assert failure_messages(r, strict=True) == [comparison_message(c), F(f"trace of the profiled calls: {TRACE}\n  {BID}")]


# --------------------------------------------------------------------------------------------
# everything at once: order timing, memory, bottleneck
# --------------------------------------------------------------------------------------------


def test_all_failures_in_order():
    c = regressed()
    m = decide_memory(40 * MiB, 10 * MiB, max_memory_bytes=32 * MiB, benchmark_id=BID, device="cpu")
    r = result(c, memory=m, bottleneck=overhead_bound(), expect=("compute",))
    got = failure_messages(r)
    assert got == [comparison_message(c), *gate_messages(m), labelled(BID, MISMATCH)]
    assert failure_messages(r, updating=True) == [gate_messages(m, include_regression=False)[0], labelled(BID, MISMATCH)]


@pytest.mark.parametrize("strict", [False, True])
def test_failures_is_pure(strict):
    r = result(regressed(), trace_path=TRACE)
    assert failure_messages(r, strict=strict) == failure_messages(r, strict=strict)
    assert r.comparison.verdict is Verdict.REGRESSED  # nothing changed on the result


def test_misclassification_on_a_busy_host_fails_only_strict_or_while_updating():
    busy = {"other_cpu_cores": 0.98, "cpu_count": 2}
    r = BenchResult.from_samples(
        tuple(samples(9, 20, 1.3)), name="test_t[2]", device="cpu", rounds=20, calls_per_round=1,
        warmup_calls=3, benchmark_id=BID, bottleneck=overhead_bound(), options={"expect_bottleneck": ("compute",)},
        telemetry=busy)
    why = labelled(BID, f"{MISMATCH}; measured while host busy: other processes used 0.98 of 2 CPU cores while it ran")
    assert r.misclassified and not r.misclassification_trusted
    assert failure_messages(r) == []
    assert failure_messages(r, strict=True) == [why] and failure_messages(r, updating=True) == [why]
    quiet = BenchResult.from_samples(
        tuple(samples(9, 20, 1.3)), name="test_t[2]", device="cpu", rounds=20, calls_per_round=1,
        warmup_calls=3, benchmark_id=BID, bottleneck=overhead_bound(), options={"expect_bottleneck": ("compute",)},
        telemetry={"other_cpu_cores": 0.1, "cpu_count": 2})
    assert quiet.misclassification_trusted and failure_messages(quiet) == [labelled(BID, MISMATCH)]
