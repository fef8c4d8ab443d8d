"""Unit tests for pytest_gpuperf.verdict.stats (pure numpy/scipy statistics of timing samples)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binom

from pytest_gpuperf.verdict.stats import (
    MAX_STORED_SAMPLES,
    PERCENTILES,
    Outliers,
    Summary,
    ci_half_width_fraction,
    median_ci,
    summarize,
    thin,
    tukey_outliers,
)


def _exact_median_ci_ranks(n: int, confidence: float = 0.95) -> tuple[int, int] | None:
    """1-based ranks (r, n - r + 1) of the narrowest symmetric order-statistic interval whose
    exact binomial coverage 1 - 2 * P(Bin(n, 1/2) <= r - 1) is at least ``confidence``."""
    ok = [r for r in range(1, n // 2 + 1) if 1 - 2 * binom.cdf(r - 1, n, 0.5) >= confidence]
    if not ok:
        return None
    r = max(ok)
    return r, n - r + 1


KNOWN_ARRAYS = [
    pytest.param([3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0, 5.0, 3.0, 5.0], id="pi-digits"),
    pytest.param([0.5, 0.25], id="two"),
    pytest.param(list(np.random.default_rng(1).lognormal(0.0, 0.3, 1000)), id="lognormal-1000"),
    pytest.param(list(np.random.default_rng(2).normal(10.0, 2.0, 37)), id="normal-37"),
]


# --------------------------------------------------------------------------------------------
# summarize
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("samples", KNOWN_ARRAYS)
def test_summarize_matches_numpy(samples):
    x = np.asarray(samples, dtype=np.float64)
    s = summarize(samples)

    assert isinstance(s, Summary)
    assert s.n == x.size
    assert s.mean_ms == pytest.approx(np.mean(x), rel=1e-12)
    assert s.std_ms == pytest.approx(np.std(x, ddof=1), rel=1e-12)
    assert s.min_ms == np.min(x)
    assert s.max_ms == np.max(x)

    expected = np.percentile(x, [5, 25, 50, 75, 90, 95, 99], method="linear")
    got = [s.p5_ms, s.p25_ms, s.median_ms, s.p75_ms, s.p90_ms, s.p95_ms, s.p99_ms]
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    assert s.median_ms == pytest.approx(np.median(x), rel=1e-12)
    assert s.iqr_ms == pytest.approx(expected[3] - expected[1], rel=1e-12)

    # The embedded CI and outlier counts are those of the standalone functions.
    assert s.median_ci_ms == median_ci(samples)
    assert s.outliers == tukey_outliers(samples)


def test_summarize_hand_computed_values():
    # 1..10: mean 5.5, sample std sqrt(82.5/9), linear percentiles at 1 + p/100 * 9.
    s = summarize([float(v) for v in range(10, 0, -1)])  # order must not matter
    assert s.n == 10
    assert s.mean_ms == 5.5
    assert s.std_ms == pytest.approx(math.sqrt(82.5 / 9))
    assert (s.min_ms, s.max_ms) == (1.0, 10.0)
    assert s.median_ms == 5.5
    assert s.p5_ms == pytest.approx(1.45)
    assert s.p25_ms == pytest.approx(3.25)
    assert s.p75_ms == pytest.approx(7.75)
    assert s.p90_ms == pytest.approx(9.1)
    assert s.p95_ms == pytest.approx(9.55)
    assert s.p99_ms == pytest.approx(9.91)
    assert s.iqr_ms == pytest.approx(4.5)
    assert s.median_ci_ms == (2.0, 9.0)
    assert s.outliers == Outliers(0, 0, 0)


def test_summarize_returns_plain_floats():
    s = summarize(np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]))
    for name in ("mean_ms", "std_ms", "min_ms", "max_ms", "median_ms", "p5_ms", "p25_ms",
                 "p75_ms", "p90_ms", "p95_ms", "p99_ms", "iqr_ms"):
        assert type(getattr(s, name)) is float, name
    assert type(s.n) is int
    assert all(type(v) is float for v in s.median_ci_ms)


def test_summarize_single_sample():
    s = summarize([2.5])
    assert s.n == 1
    assert s.std_ms == 0.0
    assert s.mean_ms == s.median_ms == s.min_ms == s.max_ms == 2.5
    assert s.p5_ms == s.p99_ms == 2.5
    assert s.iqr_ms == 0.0
    assert s.median_ci_ms is None
    assert s.outliers == Outliers(0, 0, 0)


def test_percentiles_constant():
    assert PERCENTILES == (5, 25, 50, 75, 90, 95, 99)


# --------------------------------------------------------------------------------------------
# median_ci
# --------------------------------------------------------------------------------------------


def test_median_ci_n10_is_second_and_ninth_order_statistic():
    assert median_ci([float(v) for v in range(1, 11)]) == (2.0, 9.0)
    # Input order does not matter: it is an order-statistic interval.
    shuffled = np.random.default_rng(0).permutation(np.arange(1.0, 11.0))
    assert median_ci(shuffled) == (2.0, 9.0)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_median_ci_none_below_six(n):
    assert median_ci([float(v) for v in range(1, n + 1)]) is None


def test_median_ci_n6_is_full_range():
    # 1 - 2 / 2**6 = 0.96875 >= 0.95, the smallest n with a 95% interval.
    assert median_ci([6.0, 1.0, 5.0, 2.0, 4.0, 3.0]) == (1.0, 6.0)


def test_median_ci_matches_exact_binomial_interval_for_many_n():
    rng = np.random.default_rng(7)
    for n in range(1, 121):
        x = np.sort(rng.lognormal(0.0, 0.5, n))
        ranks = _exact_median_ci_ranks(n)
        got = median_ci(x)
        if ranks is None:
            assert got is None, n
        else:
            r, s = ranks
            assert got == (x[r - 1], x[s - 1]), n


def test_median_ci_other_confidence_level():
    x = np.arange(1.0, 41.0)
    r, s = _exact_median_ci_ranks(40, 0.99)
    assert median_ci(x, confidence=0.99) == (x[r - 1], x[s - 1])
    r, s = _exact_median_ci_ranks(40, 0.80)
    assert median_ci(x, confidence=0.80) == (x[r - 1], x[s - 1])


@pytest.mark.parametrize("n", [10, 25, 31])
def test_median_ci_coverage_on_normal_data(n):
    """Distribution-free: the 95% interval covers the true median in >= 95% of trials."""
    trials = 400
    true_median = 10.0
    covered = 0
    for seed in range(trials):
        x = np.random.default_rng(1000 * n + seed).normal(true_median, 1.0, n)
        lo, hi = median_ci(x)
        assert lo <= np.median(x) <= hi
        covered += lo <= true_median <= hi
    assert covered / trials >= 0.95


# --------------------------------------------------------------------------------------------
# tukey_outliers
# --------------------------------------------------------------------------------------------


def test_tukey_outliers_handcrafted():
    # 20 values 10..29 plus four extra points: sorted length 24.
    base = list(range(10, 30))
    x = [float(v) for v in base + [-40, 0, 45, 200]]
    q1, q3 = np.percentile(x, [25, 75])
    # Hand-computed linear percentiles of the 24 sorted values (-40, 0, 10..29, 45, 200) at
    # positions 5.75 and 17.25: 13 + 0.75 and 25 + 0.25.
    assert (q1, q3) == pytest.approx((13.75, 25.25))
    # IQR 11.5: mild fences -3.5 / 42.5, severe fences -20.75 / 59.75.
    # low: -40 (severe); 0 is inside. high: 45 (mild), 200 (severe).
    assert tukey_outliers(x) == Outliers(low=1, high=2, severe=2)
    assert tukey_outliers(x).total == 3


def test_tukey_outliers_fence_is_exclusive():
    # 1..5: quartiles 2.0 and 4.0 (IQR 2), fences -1 and 7.
    x = [1.0, 2.0, 3.0, 4.0, 5.0]
    assert tukey_outliers(x) == Outliers(0, 0, 0)
    # Replace the max by exactly the upper mild fence of the remaining quartiles; with 9 values
    # the quartiles are 3 and 7 (IQR 4), fences -3 / 13 and -9 / 19.
    y = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 13.0]
    q1, q3 = np.percentile(y, [25, 75])
    assert (q1, q3) == (3.0, 7.0)
    assert tukey_outliers(y) == Outliers(0, 0, 0)  # 13 sits on the fence: not an outlier
    y[-1] = 13.5
    assert tukey_outliers(y) == Outliers(0, 1, 0)
    y[-1] = 19.5
    assert tukey_outliers(y) == Outliers(0, 1, 1)


def test_tukey_outliers_constant_data_has_none():
    assert tukey_outliers([1.0] * 50) == Outliers(0, 0, 0)


def test_outliers_total_and_defaults():
    assert Outliers().total == 0
    assert Outliers(low=2, high=3, severe=1).total == 5


# --------------------------------------------------------------------------------------------
# thin
# --------------------------------------------------------------------------------------------


def test_thin_short_input_unchanged():
    data = [3.0, 1.0, 2.0]
    out = thin(data)
    assert out == data
    assert isinstance(out, list)
    assert thin((1, 2, 3)) == [1.0, 2.0, 3.0]
    assert all(type(v) is float for v in thin((1, 2, 3)))
    # Exactly at the limit: unchanged too.
    exact = [float(i) for i in range(MAX_STORED_SAMPLES)]
    assert thin(exact) == exact
    assert thin([5.0, 6.0], limit=2) == [5.0, 6.0]


@pytest.mark.parametrize("n", [MAX_STORED_SAMPLES + 1, 2 * MAX_STORED_SAMPLES + 7, 10_000, 123_457])
def test_thin_long_input(n):
    data = [float(i) for i in range(n)]
    out = thin(data)
    assert 0 < len(out) <= MAX_STORED_SAMPLES
    assert out[0] == data[0]
    assert out[-1] == data[-1]
    # A subsequence in measurement order (strictly increasing indices here).
    assert all(b > a for a, b in zip(out, out[1:]))
    assert set(out) <= set(data)
    # Deterministic.
    assert thin(data) == out
    assert thin(np.asarray(data)) == out


def test_thin_is_evenly_spaced():
    assert thin([float(i) for i in range(100)], limit=10) == [
        0.0, 11.0, 22.0, 33.0, 44.0, 55.0, 66.0, 77.0, 88.0, 99.0
    ]
    out = thin([float(i) for i in range(10_000)])
    gaps = np.diff(out)
    assert gaps.min() >= 4 and gaps.max() <= 6  # ~ 9999 / 1999 = 5.0


def test_thin_does_not_mutate_input():
    data = [float(i) for i in range(5000)]
    before = list(data)
    thin(data, limit=100)
    assert data == before


# --------------------------------------------------------------------------------------------
# ci_half_width_fraction
# --------------------------------------------------------------------------------------------


def test_ci_half_width_fraction_known():
    # 1..10: CI (2, 9), median 5.5 -> (9 - 2) / 2 / 5.5
    x = [float(v) for v in range(1, 11)]
    assert ci_half_width_fraction(x) == pytest.approx(3.5 / 5.5)


def test_ci_half_width_fraction_scale_invariant_and_shrinks_with_n():
    rng = np.random.default_rng(3)
    x = rng.lognormal(0.0, 0.2, 200)
    f = ci_half_width_fraction(x)
    assert ci_half_width_fraction(x * 1000.0) == pytest.approx(f)
    big = rng.lognormal(0.0, 0.2, 5000)
    assert 0 < ci_half_width_fraction(big) < f


def test_ci_half_width_fraction_undefined_is_inf():
    assert ci_half_width_fraction([1.0, 2.0, 3.0]) == math.inf  # n < 6: no CI
    assert ci_half_width_fraction([0.0] * 10) == math.inf  # median 0


def test_ci_half_width_fraction_constant_is_zero():
    assert ci_half_width_fraction([2.0] * 20) == 0.0


# --------------------------------------------------------------------------------------------
# input validation
# --------------------------------------------------------------------------------------------


BAD_INPUTS = [
    pytest.param([], id="empty"),
    pytest.param(np.array([]), id="empty-array"),
    pytest.param([1.0, float("nan"), 2.0], id="nan"),
    pytest.param([1.0, float("inf")], id="inf"),
    pytest.param([1.0, -float("inf")], id="-inf"),
    pytest.param([[1.0, 2.0], [3.0, 4.0]], id="2-d"),
]


@pytest.mark.parametrize("func", [summarize, median_ci, tukey_outliers, ci_half_width_fraction])
@pytest.mark.parametrize("bad", BAD_INPUTS)
def test_bad_input_raises_value_error(func, bad):
    with pytest.raises(ValueError):
        func(bad)


def test_nan_error_message():
    with pytest.raises(ValueError, match="NaN"):
        summarize([1.0, float("nan")])
    with pytest.raises(ValueError, match="non-empty"):
        summarize([])


@pytest.mark.parametrize("confidence", [0.95, 0.9, 0.99])
def test_median_ci_is_scipys_quantile_test_interval_without_importing_scipy_stats(confidence: float) -> None:
    """median_ci gives exactly ``scipy.stats.quantile_test(x, p=0.5).confidence_interval`` (its
    bounds, and None where that has a NaN bound) for every n up to 400 and some large ones, while
    computing it from scipy.special (a worker process need not import scipy.stats)."""
    import numpy as np
    from scipy import stats as sps

    from pytest_gpuperf.verdict.stats import median_ci

    rng = np.random.default_rng(7)
    for n in [*range(2, 401), 1000, 4999, 65536]:
        x = rng.lognormal(size=n)
        ci = sps.quantile_test(x, q=float(np.median(x)), p=0.5).confidence_interval(confidence)
        expected = None if np.isnan(ci.low) or np.isnan(ci.high) else (float(ci.low), float(ci.high))
        assert median_ci(x, confidence) == expected, n


def test_median_ci_ranks_need_no_scipy_stats() -> None:
    import subprocess
    import sys

    code = ("import sys; from pytest_gpuperf.verdict.stats import median_ci_ranks; "
            "print(median_ci_ranks(100), 'scipy.stats' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "(39, 60) False"
