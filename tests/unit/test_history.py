"""Unit tests for the baseline history: run-to-run statistics, the effect floor, re-centring,
the prediction limit, inconclusive verdicts, pooled confirmation (pytest_gpuperf.verdict.compare), the
stored history (pytest_gpuperf.storage.baseline) and the ``history``/``confirm`` options.

All data are seeded and synthetic; sample counts are kept small so the module runs in well under
a second.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats as sps

from pytest_gpuperf.storage import baseline as bl
from pytest_gpuperf.verdict import gate
from pytest_gpuperf.storage.baseline import (
    DEFAULT_HISTORY,
    SCHEMA_VERSION,
    BaselineError,
    history_of,
    load,
    merge_entry,
    parse,
    run_record,
    update,
)
from pytest_gpuperf.verdict.compare import (
    FLOOR_SDS,
    MIN_RUNS_FOR_FLOOR,
    MIN_RUNS_FOR_PREDICTION,
    PREDICTION_CONFIDENCE,
    Comparison,
    RunStats,
    Verdict,
    decide,
    run_stats,
)
from pytest_gpuperf.core.options import BenchOptions, OptionError, convert, resolve
from pytest_gpuperf.reporting.messages import comparison_message

DEVICE_KEY = "cpu-test-device"
MODULE = "tests/perf/test_workloads.py"
HISTORY_RECORD_KEYS = {
    "median_ms", "iqr_ms", "rounds", "timestamp_utc", "environment", "git_commit", "peak_memory_bytes",
}


def samples(seed: int, n: int, median: float = 1.0, sigma: float = 0.02) -> np.ndarray:
    """n log-normal per-call times (ms) with the given median."""
    return np.random.default_rng(seed).lognormal(math.log(median), sigma, n)


def run_medians(sd: float, k: int, seed: int = 0, centre: float = 1.0) -> list[float]:
    """k run medians (ms) whose logs have sample SD exactly ``sd`` and median exactly log(centre)."""
    z = np.random.default_rng(seed).standard_normal(k)
    z = (z - z.mean()) / z.std(ddof=1) * sd
    z = z - np.median(z)  # a shift keeps the SD
    return [float(v) for v in centre * np.exp(z)]


def log_sd(medians) -> float:
    return float(np.std(np.log(medians), ddof=1))


# --------------------------------------------------------------------------------------------
# run_stats
# --------------------------------------------------------------------------------------------


def test_run_stats_constants():
    assert (MIN_RUNS_FOR_FLOOR, FLOOR_SDS, MIN_RUNS_FOR_PREDICTION, PREDICTION_CONFIDENCE) == (3, 3.0, 5, 0.99)


@pytest.mark.parametrize("empty", [None, []])
def test_run_stats_empty(empty):
    assert run_stats(empty) == RunStats(0, None, None, None, None)


def test_run_stats_one_run_has_nothing_but_the_count():
    assert run_stats([2.0]) == RunStats(1, None, None, None, None)


def test_run_stats_two_runs_give_sd_only():
    st = run_stats([1.0, 1.1])
    assert st.runs == 2
    assert st.sd == pytest.approx(abs(math.log(1.1)) / math.sqrt(2), rel=1e-12)
    assert st.center is None and st.upper_limit is None and st.lower_limit is None


@pytest.mark.parametrize("k", [3, 4])
def test_run_stats_centre_is_median_of_log_medians_from_three_runs(k):
    meds = [1.3, 0.9, 1.0, 1.1][:k]
    st = run_stats(meds)
    assert st.runs == k
    assert st.center == pytest.approx(float(np.median(np.log(meds))), rel=1e-12)
    if k == 3:
        assert st.center == pytest.approx(0.0, abs=1e-15)  # the median run, not the mean
    assert st.sd == pytest.approx(log_sd(meds), rel=1e-12)
    assert st.upper_limit is None and st.lower_limit is None  # below 5 runs


@pytest.mark.parametrize("k, seed", [(5, 1), (6, 2), (10, 3)])
def test_run_stats_prediction_limits_match_scipy(k, seed):
    meds = list(np.exp(np.random.default_rng(seed).normal(0.5, 0.03, k)))
    x = np.log(meds)
    st = run_stats(meds)
    mean, s = float(np.mean(x)), float(np.std(x, ddof=1))
    half = sps.t.ppf(0.99, k - 1) * s * math.sqrt(1 + 1 / k)
    assert st.runs == k
    assert st.sd == pytest.approx(s, rel=1e-12)
    assert st.center == pytest.approx(float(np.median(x)), rel=1e-12)
    assert st.upper_limit == pytest.approx(mean + half, rel=1e-12)
    assert st.lower_limit == pytest.approx(mean - half, rel=1e-12)
    # The same as scipy's t interval for one new observation (scale s * sqrt(1 + 1/k)).
    lo, hi = sps.t.interval(0.98, k - 1, loc=mean, scale=s * math.sqrt(1 + 1 / k))
    assert (st.lower_limit, st.upper_limit) == pytest.approx((lo, hi), rel=1e-12)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy's log of 0 / negatives
@pytest.mark.parametrize("bad", [[1.0, 0.0, 1.1], [1.0, -1.0, 1.1], [1.0, float("nan")], [float("inf"), 1.0]])
def test_run_stats_rejects_non_positive_or_non_finite_medians(bad):
    with pytest.raises(ValueError, match="positive"):
        run_stats(bad)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_decide_rejects_bad_run_medians():
    with pytest.raises(ValueError):
        decide(samples(1, 20), samples(2, 20), run_medians_ms=[1.0, 0.0, 1.0])


# --------------------------------------------------------------------------------------------
# the effect floor
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("k", [3, 4, 7])
@pytest.mark.parametrize("sd", [0.001, 0.01, 0.02, 0.05])
@pytest.mark.parametrize("threshold", [0.0, 0.05])
def test_floor_is_max_of_threshold_and_three_run_sds(k, sd, threshold):
    meds = run_medians(sd, k, seed=k)
    c = decide(samples(1, 30), samples(2, 30), threshold=threshold, run_medians_ms=meds)
    s = log_sd(meds)
    assert s == pytest.approx(sd, rel=1e-9)
    assert c.floor == pytest.approx(max(threshold, math.expm1(3 * s)), rel=1e-12)
    assert c.floor >= c.threshold
    assert c.runs == k
    assert c.run_sd == pytest.approx(s, rel=1e-12)


@pytest.mark.parametrize("meds", [None, [1.0], [1.0, 1.5]])
def test_floor_is_threshold_below_three_runs(meds):
    c = decide(samples(1, 30), samples(2, 30), threshold=0.05, run_medians_ms=meds)
    assert c.floor == 0.05
    assert c.runs == 1 if meds is None else len(meds)
    if meds is not None and len(meds) == 2:
        assert c.run_sd == pytest.approx(log_sd(meds))  # known, but not used for the floor
    else:
        assert c.run_sd is None
    assert c.prediction_limit is None
    assert "effect floor" not in comparison_message(c) and "+5%" in comparison_message(c)


def test_plus_8_percent_regressed_with_tight_history():
    base, cur = samples(1, 200), samples(2, 200, 1.08)
    meds = run_medians(0.005, 3)
    c = decide(cur, base, run_medians_ms=meds)
    assert c.floor == 0.05  # expm1(0.015) < threshold
    assert c.verdict is Verdict.REGRESSED and c.failed
    assert c.ratio == pytest.approx(1.08, rel=0.01)
    msg = comparison_message(c)
    assert "effect floor" not in msg
    assert "threshold +5%" in msg and "baseline history: 3 run(s)" in msg


def test_plus_8_percent_not_regressed_with_noisy_history():
    base, cur = samples(1, 200), samples(2, 200, 1.08)
    meds = run_medians(0.04, 3)
    c = decide(cur, base, run_medians_ms=meds)
    assert c.floor == pytest.approx(math.expm1(0.12), rel=1e-9)
    assert c.floor == pytest.approx(0.127, abs=0.001)
    assert c.verdict is not Verdict.REGRESSED and not c.failed
    assert c.verdict is Verdict.UNCHANGED
    assert c.ratio_ci[0] > 1.0 and c.p_slower < c.alpha  # the shift itself is real...
    assert "within the effect floor" in c.note  # ...but inside the run-to-run noise
    msg = comparison_message(c)
    assert "effect floor +12.7%" in msg
    assert "3 x run-to-run SD 4.0%" in msg
    assert "threshold +5%" in msg
    # The same samples without the history: the single-run rule calls it a regression.
    assert decide(cur, base).verdict is Verdict.REGRESSED


# --------------------------------------------------------------------------------------------
# re-centring on the history
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("meds", [[1.0, 1.02, 0.9], [1.01, 0.98, 1.0, 1.03, 0.9]])
def test_baseline_level_is_median_of_run_medians_not_newest(meds):
    newest = samples(12, 200, 0.9)  # the newest stored run happened to be 10% fast
    cur = samples(11, 200, 1.0)
    alone = decide(cur, newest)
    assert alone.verdict is Verdict.REGRESSED  # against the newest run alone: "+11%"
    assert alone.baseline_median_ms == pytest.approx(float(np.median(newest)))

    c = decide(cur, newest, run_medians_ms=meds)
    assert c.verdict is not Verdict.REGRESSED and not c.failed
    assert c.verdict is Verdict.UNCHANGED
    centre = run_stats(meds).center
    assert c.baseline_median_ms == math.exp(centre)
    assert c.baseline_median_ms == pytest.approx(1.0, abs=1e-12)
    assert c.ratio == pytest.approx(1.0, abs=0.01)
    assert c.ratio_ci[0] < 1.0 < c.ratio_ci[1]


def test_recentring_keeps_the_newest_runs_shape():
    # Re-centring shifts the newest run's samples in log space: decide(cur, base, history)
    # equals decide(cur, base scaled to the history's centre) without history, except for the
    # history-derived fields.
    base, cur = samples(3, 150, 0.8, sigma=0.05), samples(4, 150, 1.1, sigma=0.05)
    meds = [1.0, 1.0, 1.0]  # SD 0: the floor stays at the threshold
    c = decide(cur, base, run_medians_ms=meds)
    scaled = base / np.median(base)
    ref = decide(cur, scaled)
    assert c.verdict is ref.verdict is Verdict.REGRESSED
    # (rounding of the shifted logs can pick a neighbouring pairwise difference: ~1e-7)
    assert c.ratio == pytest.approx(ref.ratio, rel=1e-5)
    assert c.ratio_ci == pytest.approx(ref.ratio_ci, rel=1e-5)
    assert c.p_slower == pytest.approx(ref.p_slower, rel=1e-6)
    assert c.floor == ref.floor == 0.05


def test_two_runs_use_the_newest_run_as_reference():
    newest = samples(12, 100, 0.9)
    c = decide(samples(11, 100), newest, run_medians_ms=[1.0, 0.9])
    assert c.baseline_median_ms == pytest.approx(float(np.median(newest)))
    assert c.verdict is Verdict.REGRESSED


# --------------------------------------------------------------------------------------------
# the prediction limit
# --------------------------------------------------------------------------------------------

# 5 runs, log SD 2%: floor max(5%, expm1(6%)) = 6.2%; 99% upper prediction limit exp(4.1 * 2%) = 8.6%.
FIVE_RUNS = list(np.exp(0.02 * np.array([0.0, -2.0, 1.0, 2.0, -1.0]) / math.sqrt(2.5)))


def _expected_limit(meds) -> float:
    x = np.log(meds)
    k = len(x)
    upper = np.mean(x) + sps.t.ppf(0.99, k - 1) * np.std(x, ddof=1) * math.sqrt(1 + 1 / k)
    return float(math.exp(upper - np.median(x)))


def test_shift_above_floor_but_inside_prediction_limit_is_not_regressed():
    meds = FIVE_RUNS
    c = decide(samples(7, 200, 1.075, 0.01), samples(8, 200, 1.0, 0.01), run_medians_ms=meds)
    limit = _expected_limit(meds)
    assert c.prediction_limit == pytest.approx(limit, rel=1e-12)
    assert c.prediction_limit == pytest.approx(1.0856, abs=1e-3)
    assert math.log(c.ratio) > math.log1p(c.floor)  # above the effect floor
    assert c.ratio_ci[0] > 1.0 and c.p_slower < c.alpha
    assert c.ratio < c.prediction_limit  # but inside the 99% prediction limit
    # its CI lies wholly above 1+T, so it is not "unchanged" either (issue 21): inconclusive, passes
    assert c.verdict is Verdict.INCONCLUSIVE and not c.failed
    assert "within the history's 99% prediction limit" in c.note
    msg = comparison_message(c)
    assert "99% prediction limit 1.086x" in msg
    assert "baseline history: 5 run(s)" in msg


def test_shift_beyond_prediction_limit_is_regressed():
    c = decide(samples(7, 200, 1.12, 0.01), samples(8, 200, 1.0, 0.01), run_medians_ms=FIVE_RUNS)
    assert c.verdict is Verdict.REGRESSED
    assert c.current_median_ms > c.baseline_median_ms * c.prediction_limit
    assert "99% prediction limit" in comparison_message(c)
    assert c.note is None


def test_prediction_limit_needs_five_runs():
    meds = run_medians(0.02, 4)  # centre 1.0, floor expm1(6%) = 6.2%
    c = decide(samples(7, 200, 1.075, 0.01), samples(8, 200, 1.0, 0.01), run_medians_ms=meds)
    assert c.prediction_limit is None
    assert "prediction limit" not in comparison_message(c)
    assert c.verdict is Verdict.REGRESSED  # 4 runs: floor only, and +7.5% is above it


def test_improvement_beyond_prediction_limit_is_improved():
    c = decide(samples(7, 200, 1 / 1.12, 0.01), samples(8, 200, 1.0, 0.01), run_medians_ms=FIVE_RUNS)
    assert c.verdict is Verdict.IMPROVED and not c.failed


def test_improvement_above_floor_inside_lower_prediction_limit_is_not_improved():
    c = decide(samples(7, 200, 1 / 1.075, 0.01), samples(8, 200, 1.0, 0.01), run_medians_ms=FIVE_RUNS)
    assert c.verdict is Verdict.INCONCLUSIVE and not c.failed  # CI wholly below 1/(1+T): not "unchanged"


def test_improvement_inside_lower_prediction_limit_note_is_truthful():
    c = decide(samples(7, 200, 1 / 1.075, 0.01), samples(8, 200, 1.0, 0.01), run_medians_ms=FIVE_RUNS)
    assert math.log(c.ratio) < -math.log1p(c.floor)  # beyond the floor, downwards
    assert "inside" not in c.note
    assert "prediction limit" in c.note


# --------------------------------------------------------------------------------------------
# inconclusive
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n, seed", [(6, 5), (8, 3), (10, 4)])
def test_few_noisy_samples_are_inconclusive(n, seed):
    cur = samples(seed, n, 1.04, sigma=0.1)
    base = samples(seed + 100, n, 1.0, sigma=0.1)
    c = decide(cur, base)
    assert c.verdict is Verdict.INCONCLUSIVE
    lo, hi = c.ratio_ci
    assert lo < 1.0 < 1.0 + c.floor < hi  # spans both 1 and 1+T
    assert c.failed is False
    assert c.fails() is False and c.fails(strict=False) is False
    assert c.fails(strict=True) is True
    # decide's note says why; the hint how to measure more precisely is added by gate.judge.
    assert "spans both 1 and" in c.note
    assert "measure longer" not in c.note
    assert comparison_message(c).startswith("inconclusive ")  # the verdict first (issue 24)
    j = gate.judge(cur, bl.BaselineEntry.from_samples("b", base), BenchOptions())
    assert j.verdict is Verdict.INCONCLUSIVE
    assert (j.ratio, j.ratio_ci, j.p_slower, j.p_faster, j.floor) == (c.ratio, c.ratio_ci, c.p_slower, c.p_faster, c.floor)
    assert j.note.startswith(c.note)  # decide's reason first ...
    assert "spans both 1 and" in j.note
    assert "measure longer" in j.note  # ... then the hint
    assert f"now {BenchOptions().max_time:g} s" in j.note
    assert j.fails() is False and j.fails(strict=True) is True
    assert "measure longer" in comparison_message(j)


def _comparison(verdict: Verdict) -> Comparison:
    return Comparison(verdict=verdict, benchmark_id="b", current_median_ms=1.0, baseline_median_ms=1.0, ratio=1.0)


@pytest.mark.parametrize(
    "verdict, fails, fails_strict",
    [
        (Verdict.REGRESSED, True, True),
        (Verdict.INCONCLUSIVE, False, True),
        (Verdict.UNCHANGED, False, False),
        (Verdict.IMPROVED, False, False),
        (Verdict.NO_BASELINE, False, False),
    ],
)
def test_only_regressed_fails_unless_strict(verdict, fails, fails_strict):
    c = _comparison(verdict)
    assert c.failed is fails
    assert c.fails() is fails and c.fails(strict=False) is fails
    assert c.fails(strict=True) is fails_strict


# --------------------------------------------------------------------------------------------
# pooled confirmation
# --------------------------------------------------------------------------------------------


def test_slow_first_measurement_not_confirmed_is_noise():
    base = samples(1, 200)
    first = samples(9, 40, 1.3)  # the first measurement hit a slow patch
    second = samples(10, 400, 1.0)  # a normal, larger re-measure
    assert decide(first, base).verdict is Verdict.REGRESSED  # alone it looks like a regression
    c = decide(first, base, confirmation_ms=second)
    assert c.verdict is not Verdict.REGRESSED and not c.failed
    assert c.confirmed is False
    assert c.current_median_ms == pytest.approx(float(np.median(np.concatenate([first, second]))))
    msg = comparison_message(c)
    assert "not confirmed on re-measure (noise)" in msg


def test_genuine_regression_is_confirmed():
    base = samples(1, 200)
    c = decide(samples(9, 100, 1.3), base, confirmation_ms=samples(10, 100, 1.3))
    assert c.verdict is Verdict.REGRESSED and c.failed
    assert c.confirmed is True
    msg = comparison_message(c)
    assert "confirmed on re-measure" in msg
    assert "not confirmed" not in msg
    assert c.ratio == pytest.approx(1.3, rel=0.02)


def test_confirmed_is_none_without_confirmation():
    base = samples(1, 200)
    for cur in (samples(9, 100, 1.3), samples(9, 100, 1.0)):
        c = decide(cur, base)
        assert c.confirmed is None
        assert "re-measure" not in comparison_message(c)


def test_confirmation_of_a_non_regression_is_false():
    # When a re-measure is pooled and the result is not a regression, confirmed is False.
    c = decide(samples(9, 100), samples(1, 200), confirmation_ms=samples(10, 100))
    assert c.verdict is not Verdict.REGRESSED
    assert c.confirmed is False


def test_confirmation_samples_are_validated():
    with pytest.raises(ValueError, match="confirmation"):
        decide(samples(9, 10), samples(1, 10), confirmation_ms=[1.0, -1.0])
    with pytest.raises(ValueError, match="confirmation"):
        decide(samples(9, 10), samples(1, 10), confirmation_ms=[])


def test_confirmation_with_history_pools_and_uses_the_floor():
    meds = run_medians(0.04, 3)
    c = decide(samples(9, 100, 1.08), samples(1, 200), run_medians_ms=meds, confirmation_ms=samples(10, 100, 1.08))
    assert c.floor == pytest.approx(math.expm1(0.12), rel=1e-9)
    assert c.verdict is Verdict.UNCHANGED and c.confirmed is False


# --------------------------------------------------------------------------------------------
# reproducibility
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"run_medians_ms": FIVE_RUNS},
        {"run_medians_ms": [1.0, 1.04, 0.97], "confirmation_ms": list(samples(10, 60, 1.1))},
    ],
    ids=["single-run", "five-runs", "history-and-confirmation"],
)
def test_same_inputs_give_identical_comparisons(kwargs):
    cur, base = list(samples(5, 60, 1.06, sigma=0.05)), list(samples(6, 60, sigma=0.05))
    first = decide(cur, base, **kwargs)
    np.random.seed(12345)  # global RNG state must not matter (the bootstrap is seeded)
    np.random.default_rng().random(10)
    decide(samples(1, 30), samples(2, 30))  # nor an unrelated decision in between
    second = decide(cur, base, **kwargs)
    assert first == second
    assert comparison_message(first) == comparison_message(second)
    # Inputs are not modified.
    assert cur == list(samples(5, 60, 1.06, sigma=0.05)) and base == list(samples(6, 60, sigma=0.05))


def test_verdict_is_a_function_of_the_inputs_only():
    cur, base = samples(7, 200, 1.075, 0.01), samples(8, 200, 1.0, 0.01)
    # The same history as a list or tuple, and the same samples as list or array: same result.
    a = decide(cur, base, run_medians_ms=FIVE_RUNS)
    b = decide(list(cur), tuple(base), run_medians_ms=tuple(FIVE_RUNS))
    assert a == b


def test_run_medians_as_numpy_array():
    cur, base = samples(7, 200, 1.075, 0.01), samples(8, 200, 1.0, 0.01)
    assert decide(cur, base, run_medians_ms=np.array(FIVE_RUNS)) == decide(cur, base, run_medians_ms=FIVE_RUNS)


# --------------------------------------------------------------------------------------------
# the stored history: run_record / history_of / merge_entry / update
# --------------------------------------------------------------------------------------------


def entry(bid: str = "m.py::t", median: float = 1.0, ts: str = "2025-01-01T00:00:00Z", *,
          history: int | None = None, **extra) -> dict:
    """A baseline entry of one run with median ``median`` (ms)."""
    samp = [median * f for f in (0.98, 1.0, 1.02, 0.99, 1.01)]
    options = {"threshold": 0.05}
    if history is not None:
        options["history"] = history
    e = {
        "schema_version": SCHEMA_VERSION,
        "id": bid,
        "group": None,
        "device": "cpu",
        "stats": {"median_ms": median, "iqr_ms": median * 0.02},
        "samples_ms": samp,
        "rounds": 5,
        "calls_per_round": 1,
        "warmup_rounds": 2,
        "peak_memory_bytes": 4096,
        "options": options,
        "environment": {"python": "3.11", "ts": ts},
        "git_commit": f"commit-{ts}",
        "timestamp_utc": ts,
    }
    e.update(extra)
    return e


def schema1_file(**benchmarks) -> dict:
    out = {}
    for bid, e in benchmarks.items():
        e = {k: v for k, v in e.items() if k != "history"}
        e["schema_version"] = 1
        out[bid] = e
    return {"schema_version": 1, "device_key": DEVICE_KEY, "module": MODULE, "benchmarks": out}


def test_run_record_fields():
    e = entry(median=2.5, ts="T1")
    r = run_record(e)
    assert set(r) == HISTORY_RECORD_KEYS
    assert r == {
        "median_ms": 2.5, "iqr_ms": 0.05, "rounds": 5, "timestamp_utc": "T1",
        "environment": {"python": "3.11", "ts": "T1"}, "git_commit": "commit-T1", "peak_memory_bytes": 4096,
    }


@pytest.mark.parametrize("samp, expected", [([3.0, 1.0, 2.0], 2.0), ([4.0, 1.0, 3.0, 2.0], 2.5)])
def test_run_record_median_from_samples_without_stats(samp, expected):
    e = {"samples_ms": samp}
    r = run_record(e)
    assert r["median_ms"] == expected
    assert set(r) == HISTORY_RECORD_KEYS
    assert r["iqr_ms"] is None and r["rounds"] is None


def test_schema1_entry_loads_and_is_a_one_run_history(tmp_path):
    path = tmp_path / "b.json"
    text = json.dumps(schema1_file(a=entry("a", median=1.5, ts="T0")))
    f = parse(path, text)
    e = f.benchmarks["a"].data
    assert "history" not in e
    assert history_of(e) == [run_record(e)]
    assert history_of(e)[0]["median_ms"] == 1.5
    assert f.get("a").history == (bl.RunRecord.from_dict(run_record(e)),)
    assert f.get("a").run_medians_ms == (1.5,)
    assert f.get("missing") is None
    # Written to disk, load() accepts it too; the next update appends to it.
    path.write_text(text, encoding="utf-8")
    assert load(path).get("a").run_medians_ms == (1.5,)
    update(path, {"a": entry("a", median=1.6, ts="T1")}, device_key=DEVICE_KEY, module=MODULE)
    got = load(path).benchmarks["a"]
    assert [r["timestamp_utc"] for r in got.data["history"]] == ["T0", "T1"]
    assert [r["median_ms"] for r in got.data["history"]] == [1.5, 1.6]
    assert [r.timestamp_utc for r in got.history] == ["T0", "T1"]
    assert got.run_medians_ms == (1.5, 1.6)
    assert got.data["schema_version"] == SCHEMA_VERSION
    assert json.loads(path.read_text(encoding="utf-8"))["schema_version"] == SCHEMA_VERSION


def test_history_of_empty_list_falls_back_to_the_entry():
    e = entry(median=3.0)
    e["history"] = []
    assert history_of(e) == [run_record(e)]


def test_history_of_returns_a_copy():
    e = merge_entry(None, entry())
    h = history_of(e)
    h.append({"median_ms": 9.0})
    assert len(history_of(e)) == 1


def test_three_updates_give_three_runs_oldest_first(tmp_path):
    path = tmp_path / "b.json"
    for i, med in enumerate((1.0, 1.1, 0.95)):
        update(path, {"t": entry("t", median=med, ts=f"T{i}")}, device_key=DEVICE_KEY, module=MODULE)
    f = load(path)
    got = f.benchmarks["t"]
    assert [r["timestamp_utc"] for r in got.data["history"]] == ["T0", "T1", "T2"]
    assert f.get("t").run_medians_ms == (1.0, 1.1, 0.95)
    # The newest run's samples and statistics are the top-level fields.
    newest = entry("t", median=0.95, ts="T2")
    assert {k: v for k, v in got.data.items() if k != "history"} == newest
    assert f.get("t").samples_ms == tuple(newest["samples_ms"])
    assert got.data["stats"]["median_ms"] == 0.95
    assert got.stats["median_ms"] == 0.95 and got.median_ms == 0.95
    for rec in got.data["history"]:
        assert set(rec) == HISTORY_RECORD_KEYS
    assert got.data["history"][-1] == run_record(newest)
    assert got.history[-1] == bl.RunRecord.from_dict(run_record(newest))


@pytest.mark.parametrize("keep", [1, 2, 3])
def test_history_option_keeps_the_newest_k_runs(tmp_path, keep):
    path = tmp_path / "b.json"
    for i in range(5):
        update(path, {"t": entry("t", median=1.0 + i / 10, ts=f"T{i}", history=keep)},
               device_key=DEVICE_KEY, module=MODULE)
    got = load(path).benchmarks["t"]
    hist = got.data["history"]
    assert [r["timestamp_utc"] for r in hist] == [f"T{i}" for i in range(5)][-keep:]
    assert [r.timestamp_utc for r in got.history] == [f"T{i}" for i in range(5)][-keep:]


def test_default_history_is_ten(tmp_path):
    assert DEFAULT_HISTORY == 10 == BenchOptions().history
    e = None
    for i in range(13):
        e = merge_entry(e, entry(median=1.0 + i / 100, ts=f"T{i:02d}"))
    assert [r["timestamp_utc"] for r in e["history"]] == [f"T{i:02d}" for i in range(3, 13)]


def test_merge_entry_explicit_keep_and_result():
    old = merge_entry(merge_entry(None, entry(median=1.0, ts="T0")), entry(median=1.1, ts="T1"))
    new = entry(median=1.2, ts="T2", history=10)
    merged = merge_entry(old, new, keep=2)
    assert [r["timestamp_utc"] for r in merged["history"]] == ["T1", "T2"]  # keep overrides options
    assert {k: v for k, v in merged.items() if k != "history"} == new
    assert merged["schema_version"] == SCHEMA_VERSION
    assert "history" not in new  # the input is not modified
    assert len(merge_entry(old, new)["history"]) == 3  # options.history = 10
    assert len(merge_entry(old, new, keep=0)["history"]) == 1  # at least the new run


def test_merge_entry_with_schema1_old():
    old = entry(median=1.0, ts="T0", schema_version=1)
    merged = merge_entry(old, entry(median=1.1, ts="T1"))
    assert [r["median_ms"] for r in merged["history"]] == [1.0, 1.1]
    assert merged["history"][0] == run_record(old)


def test_update_history_feeds_decide(tmp_path):
    # Three stored runs -> decide uses their medians for the floor and the centre.
    path = tmp_path / "b.json"
    for i, med in enumerate((1.0, 1.04, 0.96)):
        update(path, {"t": entry("t", median=med, ts=f"T{i}")}, device_key=DEVICE_KEY, module=MODULE)
    f = load(path)
    meds = f.get("t").run_medians_ms
    assert meds == (1.0, 1.04, 0.96)
    c = decide(samples(1, 50), f.get("t").samples_ms, run_medians_ms=meds)
    assert c.runs == 3
    assert c.baseline_median_ms == pytest.approx(1.0)
    assert c.floor == pytest.approx(max(0.05, math.expm1(3 * log_sd(meds))))


def _file_with_history(history) -> str:
    e = entry("a")
    e["history"] = history
    return json.dumps({"schema_version": SCHEMA_VERSION, "device_key": DEVICE_KEY, "module": MODULE,
                       "benchmarks": {"a": e}})


@pytest.mark.parametrize(
    "history, fragment",
    [
        pytest.param([{"median_ms": 1.0}, {"median_ms": 0.0}], "positive 'median_ms'", id="zero-median"),
        pytest.param([{"median_ms": -1.0}], "positive 'median_ms'", id="negative-median"),
        pytest.param([{"median_ms": "1.0"}], "positive 'median_ms'", id="string-median"),
        pytest.param([{"median_ms": True}], "positive 'median_ms'", id="bool-median"),
        pytest.param([{"iqr_ms": 1.0}], "positive 'median_ms'", id="missing-median"),
        pytest.param([1.0], "positive 'median_ms'", id="run-not-object"),
        pytest.param({"median_ms": 1.0}, "not a list", id="history-is-object"),
        pytest.param("1.0,2.0", "not a list", id="history-is-string"),
        pytest.param(3, "not a list", id="history-is-number"),
    ],
)
def test_bad_history_is_baseline_error_naming_the_file(tmp_path, history, fragment):
    path = tmp_path / "dev" / "tests__perf__test_x.json"
    path.parent.mkdir()
    text = _file_with_history(history)
    path.write_text(text, encoding="utf-8")
    with pytest.raises(BaselineError) as exc:
        load(path)
    assert exc.value.path == str(path)
    assert str(path) in str(exc.value)
    assert fragment in str(exc.value)
    assert "'a'" in str(exc.value)  # and the entry
    with pytest.raises(BaselineError):
        parse(path, text)
    # update refuses to merge into it and leaves the file untouched.
    with pytest.raises(BaselineError):
        update(path, {"a": entry("a")}, device_key=DEVICE_KEY, module=MODULE)
    assert path.read_text(encoding="utf-8") == text


def test_non_finite_history_median_is_baseline_error(tmp_path):
    path = tmp_path / "b.json"
    path.write_text(_file_with_history([{"median_ms": float("nan")}]), encoding="utf-8")  # JSON "NaN"
    with pytest.raises(BaselineError, match="median_ms"):
        load(path)


def test_update_refuses_new_entry_with_bad_history(tmp_path):
    path = tmp_path / "b.json"
    update(path, {"keep": entry("keep")}, device_key=DEVICE_KEY, module=MODULE)
    before = path.read_bytes()
    with pytest.raises(BaselineError) as exc:
        update(path, {"a": {**entry("a"), "history": "nope"}}, device_key=DEVICE_KEY, module=MODULE)
    assert str(path) in str(exc.value)
    assert path.read_bytes() == before


def test_stored_layout_of_history(tmp_path):
    path = tmp_path / "b.json"
    update(path, {"a": entry("a", ts="T0")}, device_key=DEVICE_KEY, module=MODULE)
    update(path, {"a": entry("a", ts="T1")}, device_key=DEVICE_KEY, module=MODULE)
    text = path.read_text(encoding="utf-8")
    assert text == bl.dumps(json.loads(text))  # sorted keys, 2-space indent, trailing newline
    assert text.endswith("}\n")
    hist = text[text.index('"history": ['):]
    assert hist.index('"timestamp_utc": "T0"') < hist.index('"timestamp_utc": "T1"')  # oldest first


# --------------------------------------------------------------------------------------------
# options: history and confirm
# --------------------------------------------------------------------------------------------


def test_history_and_confirm_defaults():
    o = resolve()
    assert (o.history, o.confirm) == (10, 1)


def test_history_and_confirm_from_marker_and_ini_strings():
    o = resolve(marker={"history": "3"}, ini={"confirm": "2"})
    assert (o.history, o.confirm) == (3, 2)
    assert isinstance(o.history, int) and isinstance(o.confirm, int)
    o = resolve(ini={"history": " 20 ", "confirm": "0"})
    assert (o.history, o.confirm) == (20, 0)  # confirm 0 disables the re-measure
    o = resolve(marker={"history": 5, "confirm": 3}, cli={"confirm": 1}, ini={"history": "7"})
    assert (o.history, o.confirm) == (5, 3)  # marker wins
    o = resolve(cli={"confirm": "4"}, ini={"confirm": "2"})
    assert o.confirm == 4  # command line over ini
    assert convert("history", "1") == 1 and convert("confirm", 0) == 0


@pytest.mark.parametrize(
    "name, value",
    [
        ("history", 0),
        ("history", "0"),
        ("history", -3),
        ("history", 1.5),
        ("history", "1.5"),
        ("history", "ten"),
        ("history", True),
        ("confirm", -1),
        ("confirm", "-1"),
        ("confirm", 1.5),
        ("confirm", "1.5"),
        ("confirm", None),
    ],
)
def test_bad_history_or_confirm_is_option_error_naming_them(name, value):
    with pytest.raises(OptionError) as exc:
        resolve(marker={name: value})
    assert name in str(exc.value)
    assert repr(value) in str(exc.value)
    assert isinstance(exc.value, ValueError)


@pytest.mark.parametrize("name, value", [("history", "0"), ("confirm", "-1"), ("history", "1.5")])
def test_bad_ini_history_or_confirm_names_source(name, value):
    with pytest.raises(OptionError) as exc:
        resolve(ini={name: value})
    msg = str(exc.value)
    assert f"ini {name}" in msg and repr(value) in msg


def test_bad_cli_confirm_names_source():
    with pytest.raises(OptionError, match=r"command line confirm.*-1"):
        resolve(cli={"confirm": -1})
