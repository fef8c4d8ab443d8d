"""Issue 49: the SM clock beside the time (pure rules, scripted clocks and samples; no GPU)."""

from __future__ import annotations

import pytest

from pytest_gpuperf.verdict.compare import Verdict, decide
from pytest_gpuperf.verdict.gpuclock import (CLOCK_DIFFERS, clocks_differ, decide_with_cycles, kcycles, kept_rounds,
                                             median_clock, throttled_rounds)

BOOST, CAPPED = 1980.0, 1425.0  # the H100's SM clock at boost and after 30 s of matmuls at 689 W


def rounds(ms: float, n: int = 60, spread: float = 0.004) -> list[float]:
    return [ms * (1 + spread * ((i * 7) % 11 - 5) / 5) for i in range(n)]


def test_cycles_per_call_are_time_times_clock() -> None:
    assert kcycles([0.1815, 0.194], [BOOST, None]) == [pytest.approx(359.37), None]
    with pytest.raises(ValueError, match="one per round"):
        kcycles([1.0], [])


def test_throttled_rounds_by_reason_or_else_by_clock() -> None:
    # idle; none at a low clock; none; SW power cap at the H200's power-capped GEMM clock
    # (2026-11-29: 1455 MHz, 73% of 1980); SW thermal; HW slowdown; HW power brake; HW thermal
    clocks = [1980, 1400, 1500, 1455, None, 1980, 1980, 1980]
    reasons = [0x1, 0x0, 0x0, 0x4, 0x20, 0x8, 0x80, 0x40 | 0x4]
    assert throttled_rounds(clocks, reasons, default_clock_mhz=1980) == [False, False, False, False, True, True,
                                                                          True, True]
    # without the reasons, the clock decides (nvbench's 75% of the default clock)
    assert throttled_rounds(clocks, None, default_clock_mhz=1980) == [False, True, False, True, False, False,
                                                                      False, False]
    assert throttled_rounds(clocks, [None, None], default_clock_mhz=1980)[:3] == [False, True, False]
    assert throttled_rounds(clocks, None, default_clock_mhz=None) == [False] * 8
    with pytest.raises(ValueError, match="fraction"):
        throttled_rounds(clocks, None, 1980, fraction=0)


def test_throttled_rounds_are_dropped_unless_most_were() -> None:
    kept = kept_rounds([1.0, 1.3, 1.0, 1.0], [1980, 1400, 1980, 1980], [False, True, False, False])
    assert kept.samples_ms == (1.0, 1.0, 1.0) and kept.dropped == 1 and not kept.note
    kept = kept_rounds([1.3, 1.3, 1.0], [1400, 1400, 1980], [True, True, False])
    assert kept.samples_ms == (1.3, 1.3, 1.0) and kept.dropped == 0 and "throttled in 2 of 3 rounds" in kept.note
    assert median_clock([None, 1980, 1425, 1500]) == 1500 and median_clock([None]) is None
    assert clocks_differ(BOOST, CAPPED) and not clocks_differ(BOOST, BOOST * (1 + CLOCK_DIFFERS / 2))
    assert not clocks_differ(None, BOOST)


def _both(base_ms: float, base_mhz: float, cur_ms: float, cur_mhz: float):
    b, c = rounds(base_ms), rounds(cur_ms)
    timing = decide(c, b, threshold=0.05, benchmark_id="t")
    cycles = decide([v * cur_mhz for v in c], [v * base_mhz for v in b], threshold=0.05, benchmark_id="t")
    return timing, cycles


def test_a_slowdown_of_the_clock_alone_is_never_a_regression() -> None:
    """The H100's matmul: 181.5 µs at 1980 MHz, 194 µs (+6.9%) at 1425 MHz: fewer cycles, so the
    clock made it slower; inconclusive with both clocks named, not regressed."""
    timing, cycles = _both(0.1815, BOOST, 0.194, CAPPED)
    assert timing.verdict is Verdict.REGRESSED
    got = decide_with_cycles(timing, cycles, BOOST, CAPPED)
    assert got.verdict is Verdict.INCONCLUSIVE
    assert got.note == "no regression in cycles per call (x0.769); SM clock 1425 vs 1980 MHz: the clock, not the code, made it slower"
    assert got.ratio == timing.ratio  # the timing evidence is kept


def test_a_real_regression_fails_at_any_clock() -> None:
    timing, cycles = _both(0.1815, BOOST, 0.1815 * 1.30, BOOST)  # same clock: the timing verdict stands
    assert decide_with_cycles(timing, cycles, BOOST, BOOST) is timing and timing.verdict is Verdict.REGRESSED
    timing, cycles = _both(0.1815, 1600.0, 0.1815 * 1.40, 1500.0)  # clock 6% lower, cycles +31%
    got = decide_with_cycles(timing, cycles, 1600.0, 1500.0)
    assert got.verdict is Verdict.REGRESSED and "cycles per call regressed too" in got.note
    unchanged, cyc = _both(0.1815, BOOST, 0.1815, CAPPED)
    assert decide_with_cycles(unchanged, cyc, BOOST, CAPPED) is unchanged  # only a regression is checked
    assert decide_with_cycles(timing, None, 1600.0, 1500.0) is timing  # no clock read on one side
