"""Unit tests for pytest_gpuperf.verdict.compare: the regression decision rule on seeded synthetic data."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pytest_gpuperf.verdict.compare import (
    Comparison,
    Verdict,
    decide,
    hodges_lehmann_ratio,
    median_ratio_ci,
)
from pytest_gpuperf.core.units import format_ms
from pytest_gpuperf.reporting.messages import comparison_message

BASE_MEDIAN_MS = 2.0


def lognormal(seed: int, n: int, *, sigma: float = 0.1, factor: float = 1.0) -> np.ndarray:
    """n per-call times (ms), log-normal with median BASE_MEDIAN_MS * factor."""
    return np.random.default_rng(seed).lognormal(math.log(BASE_MEDIAN_MS * factor), sigma, n)


# --------------------------------------------------------------------------------------------
# decide: verdicts
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(8))
def test_a_a_same_distribution_is_unchanged(seed):
    cur = lognormal(100 + seed, 200)
    base = lognormal(200 + seed, 200)
    c = decide(cur, base)
    # A/A never fails; when the 99% CI straddles both 1 and 1+T the honest answer is inconclusive
    assert c.verdict in (Verdict.UNCHANGED, Verdict.INCONCLUSIVE)
    assert not c.failed and not c.fails(strict=False)
    if c.verdict is Verdict.INCONCLUSIVE:
        assert c.ratio_ci[0] < 1.0 < 1.05 < c.ratio_ci[1]
    assert c.ratio == pytest.approx(1.0, abs=0.05)
    assert c.ratio_ci[0] <= 1.0 <= c.ratio_ci[1] or c.note is not None


def test_identical_samples_are_unchanged():
    x = lognormal(1, 100)
    c = decide(x, x)
    assert c.verdict is Verdict.UNCHANGED
    assert c.ratio == pytest.approx(1.0)
    assert c.note is None


def test_regression_plus_20_percent():
    cur = lognormal(1, 200, factor=1.2)
    base = lognormal(2, 200)
    c = decide(
        cur,
        base,
        benchmark_id="tests/perf/test_mm.py::test_matmul[1024]",
        baseline_file="baselines/cpu-x/tests__perf__test_mm.json",
    )
    assert isinstance(c, Comparison)
    assert c.verdict is Verdict.REGRESSED
    assert c.failed is True
    assert c.ratio == pytest.approx(1.2, rel=0.03)
    assert c.ratio_ci[0] > 1.0
    assert c.p_slower < c.alpha
    assert c.current_median_ms == pytest.approx(float(np.median(cur)))
    assert c.baseline_median_ms == pytest.approx(float(np.median(base)))

    msg = comparison_message(c)
    assert "tests/perf/test_mm.py::test_matmul[1024]" in msg
    assert format_ms(c.baseline_median_ms) in msg
    assert format_ms(c.current_median_ms) in msg
    assert "ratio" in msg
    assert "p=" in msg
    assert "+5%" in msg  # the default threshold
    assert "tests__perf__test_mm.json" in msg
    assert msg.startswith("regressed ")  # the verdict first (issue 24)


def test_improvement_minus_20_percent():
    c = decide(lognormal(3, 200, factor=0.8), lognormal(4, 200), benchmark_id="bm")
    assert c.verdict is Verdict.IMPROVED
    assert c.failed is False
    assert c.ratio == pytest.approx(0.8, rel=0.03)
    assert c.ratio_ci[1] < 1.0
    assert c.p_faster < c.alpha
    assert comparison_message(c).startswith("improved ")
    assert "bm" in comparison_message(c)


def test_regression_and_improvement_are_mirror_images():
    a, b = lognormal(5, 150, factor=1.3), lognormal(6, 150)
    forward, backward = decide(a, b), decide(b, a)
    assert forward.verdict is Verdict.REGRESSED
    assert backward.verdict is Verdict.IMPROVED
    assert forward.ratio * backward.ratio == pytest.approx(1.0)
    assert forward.p_slower == pytest.approx(backward.p_faster)


def test_tiny_but_significant_shift_is_unchanged_with_note():
    cur = lognormal(7, 2000, sigma=0.01, factor=1.02)
    base = lognormal(8, 2000, sigma=0.01)
    c = decide(cur, base, benchmark_id="tiny")
    assert c.verdict is Verdict.UNCHANGED
    assert not c.failed
    assert c.p_slower < c.alpha  # the shift is real ...
    assert c.ratio_ci[0] > 1.0
    assert c.ratio == pytest.approx(1.02, abs=0.005)  # ... but below the 5% threshold
    assert c.note is not None and "significant" in c.note
    assert "significant" in comparison_message(c)


@pytest.mark.parametrize(
    "threshold, expected",
    [(0.10, Verdict.UNCHANGED), (0.05, Verdict.REGRESSED), (0.0, Verdict.REGRESSED)],
)
def test_threshold_gate_on_clear_plus_8_percent(threshold, expected):
    cur = lognormal(9, 300, sigma=0.02, factor=1.08)
    base = lognormal(10, 300, sigma=0.02)
    c = decide(cur, base, threshold=threshold)
    assert c.ratio == pytest.approx(1.08, abs=0.01)
    assert c.p_slower < 1e-10 and c.ratio_ci[0] > 1.0  # the shift itself is unambiguous
    assert c.verdict is expected
    assert c.threshold == threshold
    if expected is Verdict.UNCHANGED:
        assert "significant" in (c.note or "")
        assert "+10%" in comparison_message(c)


def test_threshold_gate_mirrors_for_improvement():
    cur = lognormal(11, 300, sigma=0.02, factor=1 / 1.08)
    base = lognormal(12, 300, sigma=0.02)
    assert decide(cur, base, threshold=0.10).verdict is Verdict.UNCHANGED
    assert decide(cur, base, threshold=0.05).verdict is Verdict.IMPROVED


def test_alpha_gate_noisy_small_samples():
    # 5 vs 5 samples: the smallest one-sided Mann-Whitney p is 1/252 ~ 0.004, so the rank test
    # cannot pass alpha=0.001; but the CI of the ratio lies wholly above 1+T, which is never
    # "unchanged" (issue 21): regressed at both levels. A 3% shift is not.
    base = [1.0, 1.01, 0.99, 1.02, 0.98]
    cur = [2.0, 2.02, 1.98, 2.04, 1.96]
    assert decide(cur, base, alpha=0.001).verdict is Verdict.REGRESSED
    assert decide(cur, base, alpha=0.01).verdict is Verdict.REGRESSED
    assert decide([v * 1.03 for v in base], base, alpha=0.001).verdict is not Verdict.REGRESSED


def test_too_few_samples_is_unchanged_with_note():
    c = decide([2.0], [1.0])
    assert c.verdict is Verdict.UNCHANGED
    assert c.ratio == pytest.approx(2.0)
    assert "too few samples" in (c.note or "")
    assert c.p_slower is None and c.ratio_ci is None
    assert "p=-" in comparison_message(c)


def test_more_samples_than_decision_cap():
    cur = lognormal(13, 5000, factor=1.2)
    base = lognormal(14, 5000)
    c = decide(cur, base)
    assert c.verdict is Verdict.REGRESSED
    # The reported medians are of the full samples, not of the thinned ones.
    assert c.current_median_ms == pytest.approx(float(np.median(cur)))
    assert c.baseline_median_ms == pytest.approx(float(np.median(base)))


def test_decide_accepts_lists_and_arrays_alike():
    cur, base = lognormal(15, 80, factor=1.25), lognormal(16, 80)
    a = decide(cur, base)
    b = decide(list(cur), tuple(base))
    assert a == b


def test_decide_is_reproducible():
    cur, base = lognormal(17, 120, factor=1.03), lognormal(18, 120)
    assert decide(cur, base) == decide(cur, base)


# --------------------------------------------------------------------------------------------
# decide: no baseline
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("baseline", [None, [], np.array([])])
def test_no_baseline(baseline):
    cur = lognormal(19, 50)
    c = decide(cur, baseline, benchmark_id="mod.py::test_x", baseline_file="b/dev/mod.json")
    assert c.verdict is Verdict.NO_BASELINE
    assert not c.failed
    assert c.current_median_ms == pytest.approx(float(np.median(cur)))
    assert c.baseline_median_ms is None and c.ratio is None
    msg = comparison_message(c)
    assert "mod.py::test_x" in msg
    assert "no baseline" in msg
    assert "b/dev/mod.json" in msg
    assert "--gpuperf-update-baselines" in msg


def test_no_baseline_message_without_file():
    msg = comparison_message(decide([1.0, 2.0], None, benchmark_id="x"))
    assert "--gpuperf-update-baselines" in msg
    assert " in None" not in msg


def test_no_baseline_still_validates_current():
    with pytest.raises(ValueError):
        decide([1.0, -1.0], None)


# --------------------------------------------------------------------------------------------
# Hodges-Lehmann ratio and the bootstrap CI
# --------------------------------------------------------------------------------------------


def test_hodges_lehmann_ratio_of_scaled_samples():
    x = lognormal(20, 300, sigma=0.3)
    assert hodges_lehmann_ratio(x * 1.5, x) == pytest.approx(1.5, rel=1e-9)
    assert hodges_lehmann_ratio(x, x * 1.5) == pytest.approx(1 / 1.5, rel=1e-9)
    assert hodges_lehmann_ratio(x, x) == pytest.approx(1.0)


def test_hodges_lehmann_ratio_independent_samples():
    assert hodges_lehmann_ratio(lognormal(21, 400, factor=1.5), lognormal(22, 400)) == pytest.approx(
        1.5, rel=0.03
    )


def test_hodges_lehmann_ratio_is_robust_to_outliers():
    x = lognormal(23, 200)
    y = x.copy() * 1.1
    y[:5] = 1000.0  # a few huge hiccups
    assert hodges_lehmann_ratio(y, x) == pytest.approx(1.1, rel=0.05)


def test_median_ratio_ci_is_reproducible_and_contains_true_ratio():
    cur = lognormal(24, 200, factor=1.3)
    base = lognormal(25, 200)
    ci1 = median_ratio_ci(cur, base)
    ci2 = median_ratio_ci(cur, base)
    assert ci1 == ci2
    lo, hi = ci1
    assert lo < hi
    assert lo <= 1.3 <= hi
    assert hi / lo < 1.2  # informative, not vacuous


def test_median_ratio_ci_seed_and_confidence():
    cur, base = lognormal(26, 100, factor=1.1), lognormal(27, 100)
    assert median_ratio_ci(cur, base, seed=1) == median_ratio_ci(cur, base, seed=1)
    assert median_ratio_ci(cur, base, seed=1) != median_ratio_ci(cur, base, seed=2)
    lo99, hi99 = median_ratio_ci(cur, base, confidence=0.99)
    lo80, hi80 = median_ratio_ci(cur, base, confidence=0.80)
    assert lo99 <= lo80 < hi80 <= hi99


def test_median_ratio_ci_too_few_samples():
    assert median_ratio_ci([1.0], [1.0, 2.0]) is None
    assert median_ratio_ci([1.0, 2.0], [1.0]) is None


def test_decide_ci_is_median_ratio_ci():
    cur, base = lognormal(28, 100, factor=1.2), lognormal(29, 100)
    assert decide(cur, base).ratio_ci == median_ratio_ci(cur, base)


# --------------------------------------------------------------------------------------------
# bad input
# --------------------------------------------------------------------------------------------

GOOD = [1.0, 1.1, 0.9, 1.05, 0.95, 1.02]

BAD_SAMPLES = [
    pytest.param([1.0, -1.0, 2.0], id="negative"),
    pytest.param([1.0, 0.0, 2.0], id="zero"),
    pytest.param([1.0, float("nan")], id="nan"),
    pytest.param([1.0, float("inf")], id="inf"),
    pytest.param([], id="empty"),
    pytest.param([[1.0, 2.0]], id="2-d"),
]


@pytest.mark.parametrize("bad", BAD_SAMPLES)
def test_decide_bad_current(bad):
    with pytest.raises(ValueError):
        decide(bad, GOOD)


@pytest.mark.parametrize("bad", [p for p in BAD_SAMPLES if p.id != "empty"])
def test_decide_bad_baseline(bad):
    with pytest.raises(ValueError):
        decide(GOOD, bad)


@pytest.mark.parametrize("func", [hodges_lehmann_ratio, median_ratio_ci])
@pytest.mark.parametrize("bad", BAD_SAMPLES)
def test_estimators_bad_input(func, bad):
    with pytest.raises(ValueError):
        func(bad, GOOD)
    with pytest.raises(ValueError):
        func(GOOD, bad)


@pytest.mark.parametrize("alpha", [0.0, 1.0, 1.5, -0.1, float("nan")])
def test_decide_alpha_out_of_range(alpha):
    with pytest.raises(ValueError, match="alpha"):
        decide(GOOD, GOOD, alpha=alpha)


@pytest.mark.parametrize("threshold", [-0.01, -1.0, float("nan")])
def test_decide_negative_threshold(threshold):
    with pytest.raises(ValueError, match="threshold"):
        decide(GOOD, GOOD, threshold=threshold)


def test_verdict_values():
    assert Verdict.REGRESSED.value == "regressed"
    assert Verdict.IMPROVED.value == "improved"
    assert Verdict.UNCHANGED.value == "unchanged"
    assert Verdict.NO_BASELINE.value == "no-baseline"
    assert [v for v in Verdict if Comparison(v, "x", 1.0).failed] == [Verdict.REGRESSED]


def test_a_a_false_alarm_rate_is_bounded_even_without_threshold():
    """With threshold 0 only the statistics guard against noise: across many seeded A/A pairs
    a significant verdict (either way) stays around the alpha level."""
    trials = 100
    flagged = 0
    for seed in range(trials):
        c = decide(lognormal(5000 + seed, 40, sigma=0.2), lognormal(9000 + seed, 40, sigma=0.2),
                   threshold=0.0)
        flagged += c.verdict in (Verdict.REGRESSED, Verdict.IMPROVED)
    assert flagged <= 4
