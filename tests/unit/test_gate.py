"""Unit tests for pytest_gpuperf.verdict.gate.judge, the one verdict pipeline: normalize, decide, confirm,
raw ratio, inconclusive hint, throttle downgrade.

All samples are seeded and synthetic (log-normal per-call times in ms), so every verdict is
reproducible and independent of the machine's speed.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from pytest_gpuperf.verdict import gate
from pytest_gpuperf.storage.baseline import BaselineEntry, RunRecord
from pytest_gpuperf.verdict.compare import Comparison, Verdict, decide, downgrade_throttled
from pytest_gpuperf.verdict.gate import judge
from pytest_gpuperf.core.options import BenchOptions
from pytest_gpuperf.reporting.messages import comparison_message

OPTS = BenchOptions()
THROTTLE = "throttled: HW thermal 34% of samples"


def samples(seed: int, n: int = 100, median: float = 1.0, sigma: float = 0.02) -> list[float]:
    """n log-normal per-call times (ms) around ``median``."""
    return [float(v) for v in np.random.default_rng(seed).lognormal(math.log(median), sigma, n)]


BASE = samples(1)
ENTRY = BaselineEntry.from_samples("m.py::t", BASE)


class Remeasure:
    """A ``remeasure`` callback that counts its calls and returns scripted samples."""

    def __init__(self, median: float, n: int = 100, seed: int = 50) -> None:
        self.median, self.n, self.seed = median, n, seed
        self.calls = 0

    def __call__(self) -> list[float]:
        self.calls += 1
        return samples(self.seed + self.calls, self.n, self.median)


# --------------------------------------------------------------------------------------------
# judge == decide without the extra steps
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("median, verdict", [
    pytest.param(1.0, Verdict.UNCHANGED, id="unchanged"),
    pytest.param(1.3, Verdict.REGRESSED, id="regressed"),
    pytest.param(0.7, Verdict.IMPROVED, id="improved"),
])
def test_judge_equals_decide_without_remeasure_drift_or_throttle(median, verdict):
    cur = samples(2, median=median)
    c = decide(cur, BASE, threshold=OPTS.threshold, alpha=OPTS.alpha, benchmark_id="m.py::t",
               baseline_file="b.json", run_medians_ms=list(ENTRY.run_medians_ms))
    assert c.verdict is verdict
    j = judge(cur, ENTRY, OPTS, benchmark_id="m.py::t", baseline_file="b.json")
    assert j == c
    assert j.confirmed is None and j.normalization is None


def test_judge_passes_threshold_and_alpha_from_options():
    cur = samples(2, median=1.08)
    strict = BenchOptions(threshold=0.05, alpha=0.01)
    loose = BenchOptions(threshold=0.2, alpha=0.001)
    assert judge(cur, ENTRY, strict).verdict is Verdict.REGRESSED
    j = judge(cur, ENTRY, loose)
    assert (j.threshold, j.alpha) == (0.2, 0.001)
    assert j.verdict is Verdict.UNCHANGED
    assert j == decide(cur, BASE, threshold=0.2, alpha=0.001, run_medians_ms=list(ENTRY.run_medians_ms))


def test_judge_with_remeasure_but_no_regression_equals_decide():
    cur = samples(2)
    r = Remeasure(1.5)
    assert judge(cur, ENTRY, OPTS, remeasure=r) == decide(cur, BASE)
    assert r.calls == 0


# --------------------------------------------------------------------------------------------
# confirmation
# --------------------------------------------------------------------------------------------


def test_regression_with_baseline_like_remeasure_is_not_confirmed():
    # 8% slower at first; the re-measure (as many samples) is at the baseline's level: the pooled
    # samples no longer show a regression above the 5% threshold.
    cur = samples(2, median=1.08)
    assert judge(cur, ENTRY, OPTS).verdict is Verdict.REGRESSED
    r = Remeasure(1.0)
    c = judge(cur, ENTRY, OPTS, remeasure=r)
    assert r.calls == 1 == OPTS.confirm
    assert c.confirmed is False
    assert c.verdict is not Verdict.REGRESSED and not c.failed
    assert "not confirmed on re-measure (noise)" in comparison_message(c)


def test_large_transient_is_not_confirmed_when_remeasures_dominate():
    # A 30% slow first measurement, then three baseline-like re-measures (confirm=3).
    cur = samples(2, median=1.3)
    r = Remeasure(1.0)
    c = judge(cur, ENTRY, BenchOptions(confirm=3), remeasure=r)
    assert r.calls == 3
    assert c.confirmed is False and not c.failed


@pytest.mark.parametrize("first", [1.3, 2.0])
def test_one_off_transient_is_not_confirmed_with_the_default_single_remeasure(first):
    # A 30% or 2x slow first measurement and one baseline-level re-measure are decided together: the
    # two measurements are the groups of the CI, which then reaches back to the baseline's level, so
    # the one-off slow measurement cannot fail the test on its own (no second "alone" test needed).
    cur = samples(2, median=first)
    c = judge(cur, ENTRY, OPTS, remeasure=Remeasure(1.0))
    assert c.confirmed is False and not c.failed
    assert c.ratio_ci[0] < 1 + OPTS.threshold < c.ratio_ci[1]
    assert "not confirmed on re-measure" in comparison_message(c)


def test_a_confirmed_slowdown_is_decided_on_all_the_evidence():
    # Issue 21: a 1.40x first measurement and a 1.38x re-measure: one joint decision says regressed
    # (the old rule required the re-measure alone to be significant as well, squaring the power away).
    c = judge(samples(2, median=1.40), ENTRY, OPTS, remeasure=Remeasure(1.38))
    assert c.verdict is Verdict.REGRESSED and c.confirmed is True
    assert c.ratio_ci[0] > 1 + OPTS.threshold


def test_regression_with_slow_remeasure_is_confirmed():
    cur = samples(2, median=1.3)
    r = Remeasure(1.3)
    c = judge(cur, ENTRY, OPTS, remeasure=r)
    assert r.calls == 1
    assert c.verdict is Verdict.REGRESSED and c.failed
    assert c.confirmed is True
    assert "confirmed on re-measure" in comparison_message(c)
    # The verdict is decided on the pooled samples.
    pooled = decide(cur, BASE, confirmation_ms=samples(51, 100, 1.3), run_medians_ms=list(ENTRY.run_medians_ms))
    assert c == pooled


@pytest.mark.parametrize("confirm", [1, 2, 3, 5])
def test_remeasure_is_called_exactly_confirm_times(confirm):
    r = Remeasure(1.3, n=20)
    c = judge(samples(2, median=1.3), ENTRY, BenchOptions(confirm=confirm), remeasure=r)
    assert r.calls == confirm
    assert c.confirmed is True


def test_no_remeasure_when_confirm_is_zero():
    r = Remeasure(1.0)
    cur = samples(2, median=1.3)
    c = judge(cur, ENTRY, BenchOptions(confirm=0), remeasure=r)
    assert r.calls == 0
    assert c.verdict is Verdict.REGRESSED and c.confirmed is None
    assert c == judge(cur, ENTRY, BenchOptions(confirm=0))


@pytest.mark.parametrize("median", [1.0, 0.7, 1.02])
def test_no_remeasure_when_first_verdict_is_not_regressed(median):
    r = Remeasure(1.3)
    c = judge(samples(2, median=median), ENTRY, BenchOptions(confirm=3), remeasure=r)
    assert r.calls == 0
    assert c.verdict is not Verdict.REGRESSED and c.confirmed is None


def test_no_remeasure_for_an_inconclusive_first_verdict():
    r = Remeasure(1.3)
    cur, base = samples(5, 6, 1.04, sigma=0.1), samples(105, 6, 1.0, sigma=0.1)
    c = judge(cur, BaselineEntry.from_samples("b", base), OPTS, remeasure=r)
    assert c.verdict is Verdict.INCONCLUSIVE
    assert r.calls == 0


def test_remeasure_errors_propagate():
    def boom() -> list[float]:
        raise RuntimeError("device lost")

    with pytest.raises(RuntimeError, match="device lost"):
        judge(samples(2, median=1.3), ENTRY, OPTS, remeasure=boom)


# --------------------------------------------------------------------------------------------
# drift normalization
# --------------------------------------------------------------------------------------------


def test_drift_normalization_turns_machine_slowdown_into_unchanged():
    raw = [v * 1.3 for v in samples(2)]  # 1.3x slower only because the machine is
    assert judge(raw, ENTRY, OPTS).verdict is Verdict.REGRESSED
    r = Remeasure(1.3)
    c = judge(raw, ENTRY, OPTS, drift=("copy", 1.3), remeasure=r)
    assert c.verdict is Verdict.UNCHANGED and not c.failed
    assert c.ratio == pytest.approx(1.0, abs=0.02)
    assert c.normalization.raw_ratio == pytest.approx(1.3, rel=0.02)
    assert c.normalization.by == "copy x1.300"
    assert c.current_median_ms == pytest.approx(float(np.median(raw)) / 1.3)
    assert r.calls == 0  # not regressed after normalization: no confirmation
    assert "normalized by machine-speed drift (copy x1.300), raw ratio 1.30" in comparison_message(c)


def test_drift_normalization_keeps_a_real_regression():
    # 1.3x slower on a machine 1.1x slower: still a regression of ~1.18x after normalization.
    raw = [v * 1.3 for v in samples(2)]
    r = Remeasure(1.3)
    c = judge(raw, ENTRY, OPTS, drift=("matmul", 1.1), remeasure=r)
    assert c.verdict is Verdict.REGRESSED and c.confirmed is True
    assert r.calls == 1
    assert c.ratio == pytest.approx(1.3 / 1.1, rel=0.02)
    assert c.normalization.raw_ratio == pytest.approx(1.3, rel=0.02)
    assert c.normalization.by == "matmul x1.100"


def test_drift_of_one_changes_nothing_but_the_annotation():
    cur = samples(2, median=1.02)
    c = judge(cur, ENTRY, OPTS, drift=("copy", 1.0))
    plain = judge(cur, ENTRY, OPTS)
    assert dataclasses.replace(c, normalization=None) == plain
    assert c.normalization.raw_ratio == plain.ratio
    assert c.normalization.by == "copy x1.000"


def test_bad_drift_ratio_is_rejected():
    with pytest.raises(ValueError, match="drift ratio"):
        judge(samples(2), ENTRY, OPTS, drift=("copy", 0.0))


# --------------------------------------------------------------------------------------------
# throttle
# --------------------------------------------------------------------------------------------


def test_throttle_downgrades_a_regression_to_inconclusive():
    cur = samples(2, median=1.3)
    plain = judge(cur, ENTRY, OPTS)
    assert plain.verdict is Verdict.REGRESSED
    c = judge(cur, ENTRY, OPTS, throttle=THROTTLE)
    assert c.verdict is Verdict.INCONCLUSIVE
    assert not c.failed and c.fails(strict=True)
    assert c.note.startswith(THROTTLE)
    assert "not trusted" in c.note
    assert c == downgrade_throttled(plain, THROTTLE)
    assert dataclasses.replace(c, verdict=plain.verdict, note=plain.note, advice=plain.advice) == plain  # evidence kept


def test_throttle_downgrades_a_confirmed_regression_too():
    r = Remeasure(1.3)
    c = judge(samples(2, median=1.3), ENTRY, OPTS, throttle=THROTTLE, remeasure=r)
    assert r.calls == 1  # confirmation ran before the downgrade
    assert c.verdict is Verdict.INCONCLUSIVE and c.confirmed is True


@pytest.mark.parametrize("median", [1.0, 0.7])
def test_throttle_leaves_other_verdicts_alone(median):
    cur = samples(2, median=median)
    assert judge(cur, ENTRY, OPTS, throttle=THROTTLE) == judge(cur, ENTRY, OPTS)


def test_throttle_leaves_inconclusive_and_no_baseline_alone():
    cur, base = samples(5, 6, 1.04, sigma=0.1), samples(105, 6, 1.0, sigma=0.1)
    e = BaselineEntry.from_samples("b", base)
    assert judge(cur, e, OPTS, throttle=THROTTLE) == judge(cur, e, OPTS)
    assert judge(cur, None, OPTS, throttle=THROTTLE) == judge(cur, None, OPTS)


# --------------------------------------------------------------------------------------------
# inconclusive hint
# --------------------------------------------------------------------------------------------


def _inconclusive_inputs() -> tuple[list[float], BaselineEntry]:
    return samples(5, 6, 1.04, sigma=0.1), BaselineEntry.from_samples("b", samples(105, 6, 1.0, sigma=0.1))


@pytest.mark.parametrize("max_time, shown", [(1.0, "1"), (2.5, "2.5"), (0.05, "0.05")])
def test_inconclusive_hint_measure_longer(max_time, shown):
    cur, e = _inconclusive_inputs()
    c = judge(cur, e, BenchOptions(max_time=max_time))
    d = decide(cur, list(e.samples_ms))
    assert c.verdict is d.verdict is Verdict.INCONCLUSIVE
    assert "measure longer" not in d.note
    assert c.note == f"{d.note}; to decide, measure longer (max_time, now {shown} s)"
    assert "pedantic" not in c.note


def test_inconclusive_hint_more_rounds_with_fixed_rounds():
    cur, e = _inconclusive_inputs()
    c = judge(cur, e, OPTS, fixed_rounds=True)
    d = decide(cur, list(e.samples_ms))
    assert c.note == f"{d.note}; to decide, more rounds (pedantic rounds=...)"
    assert "max_time" not in c.note
    assert dataclasses.replace(c, note=d.note) == d


@pytest.mark.parametrize("median", [1.0, 1.3, 0.7])
def test_no_hint_for_conclusive_verdicts(median):
    for fixed in (False, True):
        c = judge(samples(2, median=median), ENTRY, OPTS, fixed_rounds=fixed)
        assert "to decide" not in (c.note or "")


# --------------------------------------------------------------------------------------------
# no baseline
# --------------------------------------------------------------------------------------------


def test_no_baseline():
    r = Remeasure(1.3)
    cur = samples(2, median=1.3)
    c = judge(cur, None, OPTS, benchmark_id="m.py::t", baseline_file="b.json", remeasure=r, drift=("copy", 1.3),
              fixed_rounds=True)
    assert c.verdict is Verdict.NO_BASELINE and not c.failed and not c.fails(strict=True)
    assert r.calls == 0
    assert c.runs == 0 and c.ratio is None and c.baseline_median_ms is None
    assert c.normalization is None  # nothing to normalize a ratio of
    assert c.note is None
    assert "no baseline in b.json" in comparison_message(c)
    assert judge(cur, None, OPTS) == decide(cur, None)


def test_judge_rejects_bad_samples():
    for bad in ([], [1.0, -1.0], [1.0, float("nan")]):
        with pytest.raises(ValueError):
            judge(bad, ENTRY, OPTS)


def test_judge_is_deterministic():
    cur = samples(2, median=1.3)
    a = judge(cur, ENTRY, OPTS, remeasure=Remeasure(1.0), drift=("copy", 1.1))
    b = judge(cur, ENTRY, OPTS, remeasure=Remeasure(1.0), drift=("copy", 1.1))
    assert a == b


# --------------------------------------------------------------------------------------------
# BaselineEntry.from_samples and the history floor
# --------------------------------------------------------------------------------------------


def test_from_samples_defaults_to_a_one_run_history():
    e = BaselineEntry.from_samples("x", [3, 1, 2, 4])
    assert e.benchmark_id == "x"
    assert e.samples_ms == (3.0, 1.0, 2.0, 4.0) and all(type(v) is float for v in e.samples_ms)
    assert e.history == (RunRecord(2.5),)
    assert e.run_medians_ms == (2.5,) and e.median_ms == 2.5
    assert e.environment is None and e.reference is None and e.options == {}


def test_from_samples_with_run_medians():
    e = BaselineEntry.from_samples("x", BASE, [1.0, 1.2, 0.85, 1.1])
    assert e.run_medians_ms == (1.0, 1.2, 0.85, 1.1)
    assert e.median_ms == 1.1  # the newest run's
    assert e.samples_ms == tuple(BASE)


def test_noisy_history_raises_the_floor_and_absorbs_a_slowdown():
    cur = samples(2, median=1.3)
    meds = [1.0, 1.2, 0.85, 1.1]
    one = judge(cur, ENTRY, OPTS)
    assert one.floor == OPTS.threshold and one.runs == 1 and one.verdict is Verdict.REGRESSED
    noisy = judge(cur, BaselineEntry.from_samples("m.py::t", BASE, meds), OPTS)
    sd = float(np.std(np.log(meds), ddof=1))
    assert noisy.runs == 4
    assert noisy.run_sd == pytest.approx(sd)
    assert noisy.floor == pytest.approx(math.expm1(3 * sd))
    assert noisy.floor > 0.3 > OPTS.threshold
    assert noisy.verdict is Verdict.UNCHANGED  # a 1.3x shift is inside run-to-run noise
    assert noisy.baseline_median_ms == pytest.approx(math.exp(float(np.median(np.log(meds)))))  # history centre


def test_quiet_history_keeps_the_threshold_as_floor():
    meds = [1.0, 1.001, 0.999, 1.0005]
    c = judge(samples(2, median=1.3), BaselineEntry.from_samples("t", BASE, meds), OPTS)
    assert c.runs == 4 and c.floor == OPTS.threshold
    assert c.verdict is Verdict.REGRESSED


def test_two_run_history_does_not_raise_the_floor():
    c = judge(samples(2, median=1.3), BaselineEntry.from_samples("t", BASE, [0.7, 1.3]), OPTS)
    assert c.runs == 2 and c.floor == OPTS.threshold and c.run_sd is not None


def test_gate_module_has_the_one_pipeline():
    assert gate.judge is judge
    assert isinstance(judge(samples(2), ENTRY, OPTS), Comparison)
