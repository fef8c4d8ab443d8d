"""The A/B's spread between process pairs lent across its benchmarks (issue 45:
pytest_gpuperf.verdict.moderation.moderate_ab, applied by pytest_gpuperf.ab.results.moderated_results).

Pure: block medians and pair ratios are given, nothing is timed. The calibration test draws seeded
normal log ratios, so what it asserts is the same on every machine.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from pytest_gpuperf.verdict.advice import Advice
from pytest_gpuperf.verdict.compare import ABEvidence, Comparison, Verdict
from pytest_gpuperf.verdict.moderation import MIN_BENCHMARKS, Priors, ab_spread, fit_ab_priors, moderate_ab


def _ab(pairs: tuple[float, ...], verdict: Verdict = Verdict.INCONCLUSIVE, clock: str = "wall",
        ci: tuple[float, float] = (0.9, 1.15), threshold: float = 0.1) -> Comparison:
    return Comparison(benchmark_id="m.py::t", current_median_ms=1.0, verdict=verdict, ratio=math.exp(float(np.mean(np.log(pairs)))), ratio_ci=ci, threshold=threshold,
                      clock=clock, ab=ABEvidence("main (3f2a9c1)", pairs=8 * len(pairs), process_ratios=pairs),
                      note="the ratio's 99% CI 0.900x-1.150x spans both 1 and 1+T=1.100x: not enough evidence either way",
                      advice=(Advice.MORE_AB_PROCESSES,))


#: an A/A suite whose pairs agree within about 2% (12 benchmarks, 3 pairs each)
SUITE = [_ab((1.0 + 0.01 * math.sin(i), 1.0 - 0.012 * math.cos(i), 1.0 + 0.008 * math.sin(2 * i)),
             Verdict.UNCHANGED) for i in range(12)]


def test_the_spread_is_the_pairs_and_none_under_two_pairs_or_without_an_ab():
    sd, df = ab_spread(_ab((1.0, 1.02, 0.99)))
    assert df == 2 and sd == pytest.approx(float(np.std(np.log([1.0, 1.02, 0.99]), ddof=1)))
    assert ab_spread(_ab((1.03,))) is None
    assert ab_spread(Comparison(benchmark_id="t", current_median_ms=1.0, verdict=Verdict.INCONCLUSIVE, ratio=1.0,
                                ratio_ci=(0.9, 1.2))) is None
    assert not fit_ab_priors(SUITE[: MIN_BENCHMARKS - 1])  # too few benchmarks: no prior


def test_an_inconclusive_ab_whose_pairs_agree_is_unchanged_with_the_suite_spread_and_a_far_pair_is_not():
    priors = fit_ab_priors(SUITE)
    assert priors.wall is not None and priors.wall.benchmarks == 12 and priors.cpu is None
    # tensordict-like: pairs within 3%, the two-stage bootstrap's CI wide with the blocks' noise
    agreed = _ab((0.996, 1.015, 1.027))
    read = moderate_ab(agreed, priors)
    assert read.verdict is Verdict.UNCHANGED and Advice.MORE_AB_PROCESSES not in read.advice
    assert "not slower by more than 10.0%" in read.note and "over the 3 pairs' median ratios" in read.note
    assert "moderated by this A/B's 12 benchmarks" in read.note and "Smyth 2004" in read.note
    assert "not enough evidence" not in read.note
    # one pair 1.33x: the bound is not under 1 + T, whatever the suite lends
    assert moderate_ab(_ab((0.919, 1.331, 0.985)), priors).verdict is Verdict.INCONCLUSIVE
    # a regression, an improvement and another clock's comparison are left as they are
    for c in (_ab((1.3, 1.31, 1.29), Verdict.REGRESSED), _ab((0.996, 1.015, 1.027), Verdict.IMPROVED),
              _ab((0.996, 1.015, 1.027), clock="cpu")):
        assert moderate_ab(c, priors) is c
    assert moderate_ab(agreed, Priors()) is agreed


@pytest.mark.parametrize("pair_sd", [0.01, 0.03])
def test_a_slowdown_at_the_threshold_is_passed_at_most_at_the_one_sided_level(pair_sd: float):
    # Calibration under the model's assumption (one spread for the A/B): 1000 benchmarks of 3
    # pairs, each exactly 10% slower (at 1 + T). Inconclusive ones passed as unchanged are at most
    # about 2.5% of all, and an A/A suite with the same spread is decided more often, never failed.
    rng = np.random.default_rng(7)

    def suite(effect: float, n: int = 1000) -> list[Comparison]:
        return [_ab(tuple(float(x) for x in np.exp(rng.normal(math.log(effect), pair_sd, 3)))) for _ in range(n)]

    slow = suite(1.1)
    priors = fit_ab_priors(slow)
    passed = sum(moderate_ab(c, priors).verdict is Verdict.UNCHANGED for c in slow)
    assert passed <= 0.025 * 1000 + 3 * math.sqrt(0.025 * 0.975 * 1000)  # 2.5% + 3 SD of a binomial
    aa = suite(1.0, 300)
    priors = fit_ab_priors(aa)
    decided = sum(moderate_ab(c, priors).verdict is Verdict.UNCHANGED for c in aa)  # all 300 inconclusive alone
    assert decided > (270 if pair_sd == 0.01 else 30)
    assert all(not moderate_ab(c, priors).failed for c in aa)
