"""Unit tests for the small pure steps that ``compare.decide`` is composed of: ``effect_floor``,
``recentred_baseline``, ``within_prediction_limits``, ``shift_verdict`` (every branch and its
note), ``rank_test``, ``hodges_lehmann_ratio``, ``run_stats``, and that ``decide`` is exactly their
composition. Inputs are hand-made or seeded; nothing depends on the machine.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from pytest_gpuperf.verdict.compare import (
    FLOOR_SDS,
    MIN_RUNS_FOR_FLOOR,
    MIN_RUNS_FOR_PREDICTION,
    RunStats,
    Verdict,
    decide,
    effect_floor,
    hodges_lehmann_ratio,
    median_ratio_ci,
    rank_test,
    recentred_baseline,
    run_stats,
    shift_verdict,
    within_prediction_limits,
)
from pytest_gpuperf.reporting.messages import comparison_message


def samples(seed: int, n: int = 60, median: float = 1.0, sigma: float = 0.02) -> np.ndarray:
    return np.random.default_rng(seed).lognormal(math.log(median), sigma, n)


def hist(runs: int, sd: float | None = None, center: float | None = None,
         upper: float | None = None, lower: float | None = None) -> RunStats:
    return RunStats(runs, center, sd, upper, lower)


# --------------------------------------------------------------------------------------------
# effect_floor
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("runs", [0, 1, 2])
def test_effect_floor_below_three_runs_is_the_threshold(runs):
    assert MIN_RUNS_FOR_FLOOR == 3
    assert effect_floor(0.05, hist(runs, sd=0.5 if runs >= 2 else None)) == 0.05
    assert effect_floor(0.0, hist(runs, sd=0.5 if runs >= 2 else None)) == 0.0


@pytest.mark.parametrize("runs", [3, 5, 10])
def test_effect_floor_from_three_runs_follows_the_run_spread(runs):
    sd = 0.1
    assert effect_floor(0.05, hist(runs, sd=sd)) == pytest.approx(math.expm1(FLOOR_SDS * sd))
    assert effect_floor(0.05, hist(runs, sd=sd)) > 0.05
    # A quiet history never lowers the floor below the threshold.
    assert effect_floor(0.05, hist(runs, sd=0.001)) == 0.05
    assert effect_floor(0.05, hist(runs, sd=0.0)) == 0.05
    # Exactly at the boundary: the larger of the two.
    sd_eq = math.log1p(0.05) / FLOOR_SDS
    assert effect_floor(0.05, hist(runs, sd=sd_eq)) == pytest.approx(0.05)


def test_effect_floor_without_sd_is_the_threshold():
    assert effect_floor(0.07, hist(4, sd=None)) == 0.07


def test_effect_floor_from_run_stats():
    meds = [1.0, 1.2, 0.85]
    sd = float(np.std(np.log(meds), ddof=1))
    assert effect_floor(0.05, run_stats(meds)) == pytest.approx(math.expm1(3 * sd))
    assert effect_floor(0.05, run_stats(meds[:2])) == 0.05
    assert effect_floor(0.05, run_stats(None)) == 0.05


# --------------------------------------------------------------------------------------------
# recentred_baseline
# --------------------------------------------------------------------------------------------


def test_recentred_baseline_without_centre_is_the_samples():
    b = [1.0, 3.0, 2.0, 4.0]
    out, med = recentred_baseline(b, hist(2, sd=0.1))
    assert np.allclose(out, b, rtol=1e-12)
    assert list(np.argsort(out)) == list(np.argsort(b))  # measurement order kept
    assert med == 2.5  # the plain median of the samples (ms)


def test_recentred_baseline_moves_the_level_to_the_history_centre():
    b = samples(3, 41, median=2.0, sigma=0.05)
    centre = math.log(1.5)
    out, med = recentred_baseline(b, hist(3, sd=0.1, center=centre))
    assert med == pytest.approx(1.5)
    assert float(np.median(out)) == pytest.approx(1.5)  # level: the history's
    # Shape: the newest run's (log differences unchanged, order unchanged).
    assert np.allclose(np.diff(np.log(out)), np.diff(np.log(b)))
    assert np.allclose(out / b, out[0] / b[0])  # one common factor
    assert out[0] / b[0] == pytest.approx(1.5 / float(np.median(b)))


def test_recentred_baseline_from_run_stats():
    b = samples(3, 40)
    meds = [1.0, 1.1, 1.2, 0.9]
    out, med = recentred_baseline(b, run_stats(meds))
    expected = math.exp(float(np.median(np.log(meds))))
    assert med == pytest.approx(expected)
    assert float(np.median(out)) == pytest.approx(expected)


def test_recentred_baseline_rejects_bad_samples():
    for bad in ([], [1.0, 0.0], [1.0, float("inf")]):
        with pytest.raises(ValueError):
            recentred_baseline(bad, hist(0))


# --------------------------------------------------------------------------------------------
# within_prediction_limits
# --------------------------------------------------------------------------------------------


def test_within_prediction_limits_short_history_is_no_obstacle():
    for h in (hist(0), hist(3, sd=0.1, center=0.0), hist(4, sd=0.1, center=0.0)):
        assert within_prediction_limits(1.0, h) == (True, True)
        assert within_prediction_limits(100.0, h) == (True, True)


def test_within_prediction_limits_with_limits():
    h = hist(5, sd=0.02, center=0.0, upper=math.log(1.1), lower=math.log(0.9))
    assert within_prediction_limits(1.2, h) == (True, False)  # above the upper limit
    assert within_prediction_limits(0.8, h) == (False, True)  # below the lower limit
    assert within_prediction_limits(1.0, h) == (False, False)  # inside
    assert within_prediction_limits(1.09, h) == (False, False)
    assert within_prediction_limits(0.91, h) == (False, False)
    # Just inside / just beyond each limit.
    assert within_prediction_limits(math.exp(h.upper_limit - 1e-9), h) == (False, False)
    assert within_prediction_limits(math.exp(h.upper_limit + 1e-9), h) == (True, False)
    assert within_prediction_limits(math.exp(h.lower_limit + 1e-9), h) == (False, False)
    assert within_prediction_limits(math.exp(h.lower_limit - 1e-9), h) == (False, True)


def test_within_prediction_limits_from_run_stats():
    meds = [1.0, 1.01, 0.99, 1.02, 0.98]
    h = run_stats(meds)
    assert h.runs == MIN_RUNS_FOR_PREDICTION and h.upper_limit is not None
    assert within_prediction_limits(1.5, h) == (True, False)
    assert within_prediction_limits(1 / 1.5, h) == (False, True)
    assert within_prediction_limits(1.0, h) == (False, False)


# --------------------------------------------------------------------------------------------
# shift_verdict: every branch
# --------------------------------------------------------------------------------------------

T, A = 0.05, 0.01


def test_shift_verdict_regressed():
    assert shift_verdict(1.2, (1.1, 1.3), 0.001, 0.999, floor=T, alpha=A) == (Verdict.REGRESSED, None)


def test_shift_verdict_improved():
    assert shift_verdict(1 / 1.2, (1 / 1.3, 1 / 1.1), 0.999, 0.001, floor=T, alpha=A) == (Verdict.IMPROVED, None)


def test_shift_verdict_inconclusive_note():
    v, note = shift_verdict(1.04, (0.9, 1.2), 0.2, 0.8, floor=T, alpha=A)
    assert v is Verdict.INCONCLUSIVE
    assert note == ("the ratio's 99% CI 0.900x-1.200x spans both 1 and 1+T=1.050x: "
                    "not enough evidence either way")
    assert "measure longer" not in note  # the hint is gate.judge's


def test_shift_verdict_inconclusive_uses_the_floor():
    v, note = shift_verdict(1.04, (0.9, 1.2), 0.2, 0.8, floor=0.1, alpha=A)
    assert v is Verdict.INCONCLUSIVE and "1+T=1.100x" in note
    # The CI no longer reaches 1+T: not inconclusive, just unchanged.
    assert shift_verdict(1.04, (0.9, 1.2), 0.2, 0.8, floor=0.25, alpha=A) == (Verdict.UNCHANGED, None)


def test_shift_verdict_ci_spanning_one_inside_the_floor_is_unchanged():
    assert shift_verdict(1.01, (0.98, 1.04), 0.3, 0.7, floor=T, alpha=A) == (Verdict.UNCHANGED, None)


def test_shift_verdict_regression_needs_the_ci_above_one():
    # Significant and a large ratio, but the CI reaches below 1 and above 1+T: inconclusive.
    v, _ = shift_verdict(1.2, (0.99, 1.4), 0.001, 0.999, floor=T, alpha=A)
    assert v is Verdict.INCONCLUSIVE


def test_shift_verdict_regression_needs_significance_and_without_it_a_ci_past_the_floor_is_not_unchanged():
    # CI above 1 and reaching past 1+T, the rank test not significant: no regression, and not
    # "unchanged" either (issue 45: an A/B of a real +20% slowdown read 1.209x [1.078x, 1.391x],
    # signed-rank p=0.037, and passed as unchanged): slower, perhaps by more than T.
    v, note = shift_verdict(1.2, (1.01, 1.3), 0.05, 0.95, floor=T, alpha=A)
    assert v is Verdict.INCONCLUSIVE
    assert "lies above 1 and reaches past 1+T" in note and "p=0.05 is not under alpha 0.01" in note
    assert shift_verdict(1.2, (1.01, 1.3), A, 0.95, floor=T, alpha=A)[0] is Verdict.INCONCLUSIVE  # p == alpha
    # wholly inside 1..1+T and not significant: unchanged, as before
    assert shift_verdict(1.02, (1.001, 1.04), 0.05, 0.95, floor=T, alpha=A) == (Verdict.UNCHANGED, None)
    # significant, but the ratio itself at or under 1+T: the note says so, not that p is too large
    v, note = shift_verdict(1.04, (1.02, 1.07), 1e-5, 1.0, floor=T, alpha=A)
    assert v is Verdict.INCONCLUSIVE and "the ratio 1.040x itself is not above 1+T" in note and "alpha" not in note


def test_shift_verdict_ci_wholly_beyond_the_floor_is_never_unchanged():
    # Issue 21: the whole CI above 1+T decides, whatever the rank test says (mirror: below 1/(1+T)).
    assert shift_verdict(1.2, (1.1, 1.3), 0.05, 0.95, floor=T, alpha=A) == (Verdict.REGRESSED, None)
    assert shift_verdict(1 / 1.2, (1 / 1.3, 1 / 1.1), 0.95, 0.05, floor=T, alpha=A) == (Verdict.IMPROVED, None)


def test_shift_verdict_regression_needs_the_ratio_above_the_floor():
    v, note = shift_verdict(1.049, (1.02, 1.049), 0.001, 0.999, floor=T, alpha=A)  # just inside 1+T
    assert v is Verdict.UNCHANGED
    assert note == "significant but within the effect floor: +4.9% is inside ±5.0%"
    assert shift_verdict(1.051, (1.02, 1.049), 0.001, 0.999, floor=T, alpha=A) == (Verdict.REGRESSED, None)


def test_shift_verdict_slower_within_prediction_limit():
    v, note = shift_verdict(1.2, (1.01, 1.3), 0.001, 0.999, floor=T, alpha=A, above_limit=False)
    assert v is Verdict.UNCHANGED
    assert note == "above the effect floor but within the history's 99% prediction limit (run-to-run noise)"
    # a CI wholly above 1+T within the prediction limit is inconclusive, never unchanged
    v, note = shift_verdict(1.2, (1.1, 1.3), 0.001, 0.999, floor=T, alpha=A, above_limit=False)
    assert v is Verdict.INCONCLUSIVE and "prediction limit" in note
    # The lower limit does not matter for a slowdown.
    assert shift_verdict(1.2, (1.1, 1.3), 0.001, 0.999, floor=T, alpha=A, below_limit=False) == (
        Verdict.REGRESSED, None)


def test_shift_verdict_faster_within_prediction_limit():
    v, note = shift_verdict(1 / 1.2, (1 / 1.3, 1 / 1.01), 0.999, 0.001, floor=T, alpha=A, below_limit=False)
    assert v is Verdict.UNCHANGED
    assert note == "beyond the effect floor but within the history's 99% prediction limit (run-to-run noise)"
    assert "inside" not in note
    assert shift_verdict(1 / 1.2, (1 / 1.3, 1 / 1.1), 0.999, 0.001, floor=T, alpha=A, above_limit=False) == (
        Verdict.IMPROVED, None)


def test_shift_verdict_significant_within_floor_slower_and_faster():
    v, note = shift_verdict(1.03, (1.01, 1.045), 0.001, 0.999, floor=T, alpha=A)
    assert v is Verdict.UNCHANGED
    assert note == "significant but within the effect floor: +3.0% is inside ±5.0%"
    v, note = shift_verdict(0.97, (0.955, 0.99), 0.999, 0.001, floor=T, alpha=A)
    assert v is Verdict.UNCHANGED
    assert note == "significant but within the effect floor: -3.0% is inside ±5.0%"
    v, note = shift_verdict(1.03, (1.01, 1.045), 0.001, 0.999, floor=0.123, alpha=A)
    assert note.endswith("inside ±12.3%")


def test_shift_verdict_rank_test_significant_but_ci_includes_one():
    v, note = shift_verdict(1.01, (0.99, 1.03), 0.001, 0.999, floor=T, alpha=A)
    assert v is Verdict.UNCHANGED
    assert note == "rank test significant but the CI of the ratio includes 1"
    assert shift_verdict(0.99, (0.97, 1.01), 0.999, 0.001, floor=T, alpha=A) == (Verdict.UNCHANGED, note)
    # issue 47: the note names the test that decided (a t test over process medians, not a rank test)
    assert shift_verdict(1.01, (0.99, 1.03), 0.001, 0.999, floor=T, alpha=A, test="t test")[1] == \
        "t test significant but the CI of the ratio includes 1"


def test_shift_verdict_nothing_to_say():
    assert shift_verdict(1.0, (0.99, 1.01), 0.5, 0.5, floor=T, alpha=A) == (Verdict.UNCHANGED, None)


def test_shift_verdict_is_a_mirror_image():
    for ratio, ci, ps in [(1.2, (1.1, 1.3), (0.001, 0.999)), (1.03, (1.01, 1.045), (0.001, 0.999))]:
        up = shift_verdict(ratio, ci, *ps, floor=T, alpha=A)
        down = shift_verdict(1 / ratio, (1 / ci[1], 1 / ci[0]), ps[1], ps[0], floor=T, alpha=A)
        flip = {Verdict.REGRESSED: Verdict.IMPROVED, Verdict.UNCHANGED: Verdict.UNCHANGED}
        assert down[0] is flip[up[0]]


# --------------------------------------------------------------------------------------------
# rank_test, hodges_lehmann_ratio, median_ratio_ci
# --------------------------------------------------------------------------------------------


def test_rank_test_symmetry():
    a, b = samples(1, 40, 1.1), samples(2, 50, 1.0)
    p_slower, p_faster = rank_test(a, b)
    assert p_slower < 1e-6 < 0.5 < p_faster
    q_slower, q_faster = rank_test(b, a)
    assert q_slower == pytest.approx(p_faster, rel=1e-12)
    assert q_faster == pytest.approx(p_slower, rel=1e-12)


def test_rank_test_is_scale_invariant_and_same_for_lists_and_arrays():
    a, b = samples(1, 30, 1.02), samples(2, 30)
    assert rank_test(a, b) == rank_test(list(a), list(b))
    assert rank_test(a * 7.0, b * 7.0) == pytest.approx(rank_test(a, b), rel=1e-12)


def test_rank_test_same_distribution_is_not_significant():
    p_slower, p_faster = rank_test(samples(1), samples(2))
    assert p_slower > 0.01 and p_faster > 0.01


def test_rank_test_rejects_bad_samples():
    with pytest.raises(ValueError):
        rank_test([], [1.0, 2.0])
    with pytest.raises(ValueError):
        rank_test([1.0, 2.0], [1.0, -2.0])


def test_hodges_lehmann_ratio_exact_and_symmetric():
    assert hodges_lehmann_ratio([2.0], [1.0]) == pytest.approx(2.0)
    # Pairwise ratios of [2, 4] vs [1, 2]: 2, 1, 4, 2 -> median 2.
    assert hodges_lehmann_ratio([2.0, 4.0], [1.0, 2.0]) == pytest.approx(2.0)
    a, b = samples(1, 31, 1.2), samples(2, 29)
    assert hodges_lehmann_ratio(a, b) == pytest.approx(1 / hodges_lehmann_ratio(b, a))
    assert hodges_lehmann_ratio(3 * a, b) == pytest.approx(3 * hodges_lehmann_ratio(a, b))


def test_median_ratio_ci_is_seeded():
    a, b = samples(1, 30, 1.1), samples(2, 30)
    ci = median_ratio_ci(a, b)
    assert ci == median_ratio_ci(list(a), list(b))
    assert ci[0] < 1.1 < ci[1]
    assert median_ratio_ci(a, b, seed=1) != ci
    assert median_ratio_ci([1.0], b) is None and median_ratio_ci(a, [1.0]) is None


# --------------------------------------------------------------------------------------------
# run_stats
# --------------------------------------------------------------------------------------------


def test_run_stats_fields_by_history_length():
    assert run_stats([]) == RunStats(0, None, None, None, None)
    one = run_stats([1.0])
    assert (one.runs, one.center, one.sd, one.upper_limit) == (1, None, None, None)
    two = run_stats([1.0, 1.1])
    assert two.sd is not None and two.center is None and two.upper_limit is None
    three = run_stats([1.0, 1.1, 0.9])
    assert three.center == pytest.approx(0.0) and three.upper_limit is None
    five = run_stats([1.0, 1.1, 0.9, 1.05, 0.95])
    assert five.upper_limit > 0 > five.lower_limit
    assert five.upper_limit + five.lower_limit == pytest.approx(2 * float(np.mean(np.log([1.0, 1.1, 0.9, 1.05, 0.95]))))


# --------------------------------------------------------------------------------------------
# decide is the composition of the steps
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("median, meds", [
    (1.3, None),
    (1.3, [1.0, 1.2, 0.85, 1.1]),
    (1.08, [1.0, 1.01, 0.99, 1.02, 0.98, 1.0]),
    (0.8, [1.0, 1.01, 0.99, 1.02, 0.98]),
    (1.0, [1.0, 1.05, 0.95]),
])
def test_decide_is_the_composition_of_the_steps(median, meds):
    cur, base = samples(7, 80, median), samples(8, 80)
    c = decide(cur, base, run_medians_ms=meds)
    h = run_stats(meds)
    b, b_med = recentred_baseline(base, h)
    floor = effect_floor(0.05, h)
    ratio = hodges_lehmann_ratio(cur, b)
    ci = median_ratio_ci(cur, b)
    p_slower, p_faster = rank_test(cur, b)
    above, below = within_prediction_limits(math.exp(float(np.median(np.log(cur)))), h)
    verdict, note = shift_verdict(ratio, ci, p_slower, p_faster, floor=floor, alpha=0.01,
                                  above_limit=above, below_limit=below)
    assert (c.verdict, c.note) == (verdict, note)
    assert c.ratio == pytest.approx(ratio, rel=1e-12)
    assert c.ratio_ci == pytest.approx(ci, rel=1e-12)
    assert (c.p_slower, c.p_faster) == pytest.approx((p_slower, p_faster), rel=1e-12)
    assert c.floor == floor
    assert c.baseline_median_ms == pytest.approx(b_med)
    assert c.runs == max(1, h.runs) and c.run_sd == h.sd


def test_hierarchical_log_ci_carries_the_spread_between_groups():
    import numpy as np

    from pytest_gpuperf.verdict.compare import hierarchical_log_ci

    rng = np.random.default_rng(3)
    same = [np.log(rng.lognormal(0, 0.02, 200)) for _ in range(3)]
    apart = [g + shift for g, shift in zip(same, (0.0, 0.15, 0.30))]  # three process levels
    lo, hi = hierarchical_log_ci(same)
    lo2, hi2 = hierarchical_log_ci(apart)
    assert hi - lo < 0.02 and hi2 - lo2 > 0.15  # pooled values would give a narrow CI for both
    assert hierarchical_log_ci(same) == (lo, hi)  # seeded
    d_lo, d_hi = hierarchical_log_ci([g + 0.2 for g in same], same)  # two-sample: a log ratio
    assert d_lo < 0.2 < d_hi and d_lo > 0.15
    with pytest.raises(ValueError):
        hierarchical_log_ci([[]])


def test_process_level_decision_and_a_baseline_too_noisy_to_fail():
    from pytest_gpuperf.verdict.compare import decide_replicates

    base = [1.00, 1.01, 0.99]
    slower = [[1.30 * m] * 20 for m in (1.0, 1.01, 0.995)]
    c = decide_replicates(slower, base)
    assert c.verdict is Verdict.REGRESSED and c.processes == 3 and c.baseline_processes == 3
    assert c.ratio == pytest.approx(c.current_median_ms / c.baseline_median_ms)  # the table's columns agree
    one_slow_process = [[m] * 500 for m in (1.0, 1.25, 1.0)]  # 1500 rounds, but three replicates
    assert decide_replicates(one_slow_process, base).verdict is not Verdict.REGRESSED
    noisy = decide_replicates([[1.0] * 5, [1.0] * 5], [0.5, 2.0])  # the baseline's processes 4x apart
    assert noisy.cannot_fail and noisy.fails(strict=True) and not noisy.fails()
    assert "cannot fail" in comparison_message(noisy)
    assert not c.cannot_fail


def test_a_process_a_slow_period_disturbed_is_set_aside_and_the_note_says_so():
    # issue 45: one process of three 1.5x slower (a slow period of the machine, seen in every
    # benchmark it timed then) made the t test's CI 0.3x-3x: inconclusive. Interference only slows:
    # the slowest process is set aside when the others agree; a faster one never is.
    from pytest_gpuperf.verdict.compare import decide_replicates, set_aside_slow

    assert set_aside_slow([0.8, 0.81, 1.2]) == ([0.8, 0.81], 2)
    assert set_aside_slow([1.2, 1.0, 1.01]) == ([1.0, 1.01], 0)
    assert set_aside_slow([1.0, 1.0, 0.6]) == ([1.0, 1.0, 0.6], None)  # faster: never
    assert set_aside_slow([1.0, 1.2, 1.5]) == ([1.0, 1.2, 1.5], None)  # the others disagree: not a slow period
    assert set_aside_slow([1.0, 1.08, 1.0]) == ([1.0, 1.08, 1.0], None)  # within 10%
    assert set_aside_slow([1.0, 1.5]) == ([1.0, 1.5], None)  # two: nothing to tell which is right
    base = [0.80, 0.81, 1.23]  # the baseline's third process ran in a slow period
    same = [[m] * 50 for m in (0.80, 0.805, 0.81)]
    c = decide_replicates(same, base)
    assert c.verdict is Verdict.UNCHANGED and c.baseline_processes == 3
    assert "the baseline's process 3 of 3 set aside: 1.53x the others' median" in c.note
    assert c.baseline_median_ms == pytest.approx(math.sqrt(0.80 * 0.81))  # of the processes decided on
    assert c.ratio == pytest.approx(c.current_median_ms / c.baseline_median_ms)
    assert "geometric mean of 3 process medians" in comparison_message(c)
    assert "of the baseline's 2 of 3" in comparison_message(c)
    slower = decide_replicates([[1.3 * m] * 50 for m in (0.80, 0.805, 0.81)], base)  # a real +30%: caught
    assert slower.verdict is Verdict.REGRESSED


def test_an_improvement_seen_only_once_a_slow_process_is_set_aside_is_not_trusted():
    # tensordict's suite, unchanged code (2026-11-29): this run's processes 0.67, 0.67, 1.13 (one set
    # aside), the baseline's 1.0, 1.0, 2.4 (one set aside): its kept processes ran in a slower mode
    # than this run's, and the kept ones' agreement read "improved 0.67x". The processes run at
    # different speeds: inconclusive (an A/B settles it), with both set-aside notes and the reason.
    from pytest_gpuperf.verdict.compare import decide_replicates

    c = decide_replicates([[m] * 50 for m in (0.67, 0.672, 1.13)], [1.0, 1.01, 2.4])
    assert c.verdict is Verdict.INCONCLUSIVE and c.ratio == pytest.approx(0.67, abs=0.01)
    assert c.note.startswith("this run's process 3 of 3 set aside: 1.68x the others' median")
    assert "the baseline's process 3 of 3 set aside" in c.note
    assert c.note.endswith("faster (0.668x) only once a slow process was set aside: its processes ran at different "
                           "speeds, so an improvement is not trusted from them (an A/B run against the baseline's "
                           "commit decides it)")
    # the same improvement with no process set aside stands; a regression so decided stays one (an A/B confirms it)
    assert decide_replicates([[m] * 50 for m in (0.67, 0.672, 0.671)], [1.0, 1.01, 1.005]).verdict is Verdict.IMPROVED
    assert decide_replicates([[m] * 50 for m in (1.5, 1.51, 2.6)], [1.0, 1.01, 2.4]).verdict is Verdict.REGRESSED


def test_an_unchanged_benchmark_passes_decided_once_its_noninferiority_bound_is_under_1_plus_t():
    # issue 45, item 3: the gate asks "slower by more than T?" (one-sided); an A/A whose 99% CI
    # spans 1 and 1+T is unchanged once the one-sided 97.5% upper bound lies under 1+T
    import math

    from scipy import stats as sps

    from pytest_gpuperf.verdict import escalation
    from pytest_gpuperf.verdict.compare import NONINFERIORITY_CONFIDENCE, decide_replicates, process_level_test

    assert NONINFERIORITY_CONFIDENCE == 0.975
    base = [1.000, 1.020, 0.985]
    cur = [1.010, 0.990, 1.020]  # process medians 1.5% apart: the 99% CI reaches past 1.05
    ratio, ci, _, _, df, sd = process_level_test(cur, base)
    upper = math.exp(math.log(ratio) + sps.t.ppf(0.975, df) * sd * math.sqrt(2 / 3))
    assert ci[0] < 1 < 1.05 < ci[1] and upper < 1.05  # the case this rule decides
    c = decide_replicates([[m] * 20 for m in cur], base)
    assert c.verdict is Verdict.UNCHANGED and not c.failed
    assert c.note.startswith("not slower by more than 5.0%: the one-sided 97.5% upper bound 1.043x is under 1+T=1.050x")
    assert "(non-inferiority; the 99% CI" in c.note and c.ratio_ci == ci  # the 99% CI is still the one shown
    wider = [1.00, 1.04, 0.97]  # 3% apart: even the one-sided bound reaches past 1.05
    assert decide_replicates([[m] * 20 for m in wider], base).verdict is Verdict.INCONCLUSIVE
    # never a regression passed: +8% with the same spread is not unchanged (its bound is above 1+T)
    assert decide_replicates([[1.08 * m] * 20 for m in cur], base).verdict is not Verdict.UNCHANGED
    # and the escalation predicts the same: one more process is not needed where this decides
    pred = escalation.predict(c, 0.05, 10)
    assert pred is not None and pred.decides
    assert escalation.straddles(ci, 0.05) and not escalation.straddles(ci, 0.05, upper)
