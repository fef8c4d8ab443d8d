"""The suite's spread as a prior for each benchmark's (issue 45: pytest_gpuperf.verdict.moderation).

Pure: process medians are given, nothing is timed. The calibration tests draw seeded log-normal
process medians, so what they assert is the same on every machine.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from pytest_gpuperf.verdict.advice import Advice
from pytest_gpuperf.verdict.compare import Verdict, decide_replicates
from pytest_gpuperf.verdict.escalation import noninferior_upper
from pytest_gpuperf.verdict.moderation import (MAX_PRIOR_DF, MIN_BENCHMARKS, Prior, fit_prior, moderate, moderated,
                                               spread)


def _spreads(sds: list[float], df: int, seed: int) -> list[tuple[float, int]]:
    """Observed SDs on ``df`` degrees of freedom around the true ``sds`` (chi-square sampling)."""
    rng = np.random.default_rng(seed)
    return [(sd * math.sqrt(rng.chisquare(df) / df), df) for sd in sds]


def test_one_spread_shared_by_the_suite_gives_a_strong_prior_and_differing_ones_a_weak_one():
    same = fit_prior(_spreads([0.02] * 200, 4, seed=1))
    assert same is not None and same.benchmarks == 200
    assert same.df > 10 and same.sd == pytest.approx(0.02, rel=0.15)
    rng = np.random.default_rng(2)
    differing = fit_prior(_spreads(list(np.exp(rng.normal(math.log(0.02), 1.0, 200))), 4, seed=3))
    assert differing is not None and differing.df < 3  # little is borrowed where the spreads differ
    assert fit_prior([(0.01, 4)] * MIN_BENCHMARKS).df == MAX_PRIOR_DF  # identical: capped, not infinite


def test_too_few_spreads_give_no_prior_and_exact_zeros_are_left_out():
    assert fit_prior(_spreads([0.02] * (MIN_BENCHMARKS - 1), 4, seed=4)) is None
    # scripted timings: identical process medians have no log variance
    assert fit_prior([(0.0, 4)] * 30 + _spreads([0.02] * (MIN_BENCHMARKS - 1), 4, seed=5)) is None
    assert fit_prior([(0.0, 4)] * 30 + _spreads([0.02] * MIN_BENCHMARKS, 4, seed=5)).benchmarks == MIN_BENCHMARKS
    assert fit_prior([(0.02, 0)] * 30) is None  # no degree of freedom


def test_moderated_spread_is_smyths_posterior():
    prior = Prior(df=6.0, sd=0.01, benchmarks=40)
    sd, df = moderated(0.04, 4, prior)
    assert df == 10.0 and sd == pytest.approx(math.sqrt((6 * 0.01 ** 2 + 4 * 0.04 ** 2) / 10))
    assert spread([1.0, 1.02, 0.99], [1.0, 1.01]) == (pytest.approx(0.0131, abs=1e-3), 3)
    assert spread([1.0, 1.01, 1.6], [1.0, 1.01])[1] == 2  # the slow period's process is set aside first
    assert spread([1.0], [1.0]) is None
    # the bound on the moderated spread's degrees of freedom (escalation's, which takes them)
    assert noninferior_upper(1.0, 0.01, 3, 3, df=1e9) == pytest.approx(math.exp(1.959964 * 0.01 * math.sqrt(2 / 3)),
                                                                       rel=1e-5)
    assert noninferior_upper(1.0, 0.01, 3, 3, df=4) == noninferior_upper(1.0, 0.01, 3, 3)


def _comparison(cur: list[float], base: list[float]):
    return decide_replicates([[m] * 5 for m in cur], base)


def test_an_unchanged_benchmark_whose_own_spread_came_out_wide_passes_with_the_suites():
    wide = _comparison([0.975, 1.03, 1.0], [1.0, 1.035])  # SD 2.6% on 3 df: its 99% CI 0.85x-1.13x
    assert wide.verdict is Verdict.INCONCLUSIVE and Advice.MORE_PROCESSES not in wide.advice
    prior = Prior(df=20.0, sd=0.011, benchmarks=12)
    m = moderate(wide, prior)
    assert m.verdict is Verdict.UNCHANGED and not m.failed
    assert m.ratio == wide.ratio and m.ratio_ci == wide.ratio_ci  # the figures shown stay the benchmark's
    assert m.note.startswith("not slower by more than 5.0%: the one-sided 97.5% upper bound 1.0")
    assert "with the spread moderated by this run's 12 benchmarks (SD of log process medians 2.6% -> 1.4% on " \
           "23.0 df; prior 1.1% on 20.0 df; Smyth 2004)" in m.note
    assert "not enough evidence" not in m.note
    # the advice to measure more processes goes with the verdict it was for
    advised = type(wide)(**{**wide.__dict__, "advice": (Advice.MORE_PROCESSES,)})
    assert moderate(advised, prior).advice == ()
    # a set-aside note stays
    aside = _comparison([0.975, 1.03, 1.0], [1.0, 1.035, 1.03, 1.6])
    assert "process 4 of 4 set aside" in moderate(aside, prior).note


def test_what_the_prior_never_does():
    prior = Prior(df=20.0, sd=0.011, benchmarks=12)
    slower = _comparison([1.04 * f for f in (0.975, 1.03, 1.0)], [1.0, 1.035])  # +4%, wide: the bound is above 1+T
    assert slower.verdict is Verdict.INCONCLUSIVE and moderate(slower, prior) is slower
    regressed = _comparison([1.3, 1.31, 1.29], [1.0, 1.01])
    assert regressed.verdict is Verdict.REGRESSED and moderate(regressed, prior) is regressed
    wide = _comparison([0.975, 1.03, 1.0], [1.0, 1.035])
    assert moderate(wide, None) is wide
    assert moderate(None, prior) is None


def test_each_clock_is_read_with_its_own_prior_in_the_evaluation():
    # A busy host: CPU time decides over the worker processes' CPU-time medians. Those came out 2.6%
    # apart by chance (inconclusive alone); with the session's CPU-time spread they pass unchanged.
    # The wall clock's prior is not CPU time's: with it alone the CPU-time verdict stays inconclusive.
    from pytest_gpuperf.core.options import BenchOptions
    from pytest_gpuperf.storage.baseline import BaselineEntry
    from pytest_gpuperf.storage.codec import encode_result
    from pytest_gpuperf.verdict.cputime import CpuTime
    from pytest_gpuperf.verdict.gate import Evidence, Reference, evaluate
    from pytest_gpuperf.verdict.moderation import Priors, fit_priors
    from pytest_gpuperf.verdict.result import BenchResult

    def groups(medians, stretch=(1.0, 1.0, 1.0)):
        return tuple(tuple(m * f for _ in range(40)) for m, f in zip(medians, stretch))

    base_groups = groups((1.0, 1.035))
    flat = tuple(v for g in base_groups for v in g)
    base = BenchResult.from_samples(flat, name="t", device="cpu", rounds=len(flat), calls_per_round=1, warmup_calls=3,
                                    benchmark_id="m.py::t", process_medians_ms=(1.0, 1.035),
                                    cpu=CpuTime.merged([CpuTime(g, g) for g in base_groups]))
    entry = BaselineEntry.from_json("m.py::t", encode_result(base, environment={}, git_commit=None, timestamp_utc=""))
    cpu_groups = groups((0.975, 1.03, 1.0))
    wall_groups = groups((0.975, 1.03, 1.0), stretch=(1.0, 2.2, 1.4))  # the neighbour stretches the wall clock
    busy = "host busy: other processes used 0.98 of 2 CPU cores while it ran"
    evidence = Evidence(samples_ms=tuple(v for g in wall_groups for v in g), process_samples_ms=wall_groups,
                        cpu=CpuTime.merged([CpuTime(g, g) for g in cpu_groups]), host_busy=busy, throttle=busy,
                        device="cpu")
    opts, ref = BenchOptions(), Reference.stored(entry, "b.json")
    alone = evaluate(evidence, ref, opts, benchmark_id="m.py::t").comparison
    assert (alone.verdict, alone.clock) == (Verdict.INCONCLUSIVE, "cpu")
    suite = Prior(df=20.0, sd=0.011, benchmarks=40)
    read = evaluate(evidence, ref, opts, benchmark_id="m.py::t", priors=Priors(cpu=suite)).comparison
    assert (read.verdict, read.clock) == (Verdict.UNCHANGED, "cpu")
    assert "with the spread moderated by this run's 40 benchmarks" in read.note and "decided on CPU time" in read.note
    wall_only = evaluate(evidence, ref, opts, benchmark_id="m.py::t", priors=Priors(wall=suite)).comparison
    assert wall_only.verdict is Verdict.INCONCLUSIVE
    # fit_priors: one per clock, from (this run's, the baseline's) process medians
    pairs = [((1.0, 1.01 + 0.001 * i, 0.99), (1.0, 1.012)) for i in range(12)]
    both = fit_priors(pairs, pairs[:5])
    assert both.wall is not None and both.wall.benchmarks == 12 and both.cpu is None and both
    assert not fit_priors(pairs[:5])


@pytest.mark.parametrize("true_sd", [0.01, 0.03])
def test_a_slowdown_at_the_threshold_is_passed_by_the_prior_at_most_at_the_one_sided_level(true_sd: float):
    # Calibration under the model's assumption (one spread for the suite): 1000 benchmarks, 3
    # processes a side, each exactly 5% slower (at 1 + T). Of those its own spread left
    # inconclusive, the moderated bound passes as unchanged at most about 2.5% of all (the one-sided
    # level; a ratio at or under 1 + T may already be "unchanged" on its own: shift_verdict's rule),
    # while an A/A suite with the same spread is decided more often than on each one's own spread
    # and never fails.
    rng = np.random.default_rng(11)

    def suite(effect: float, n: int = 1000) -> list:
        return [_comparison(list(np.exp(rng.normal(math.log(effect), true_sd, 3))),
                            list(np.exp(rng.normal(0.0, true_sd, 3)))) for _ in range(n)]

    slow = suite(1.05)
    prior = fit_prior([(c.run_sd, 4) for c in slow])
    passed = sum(c.verdict is Verdict.INCONCLUSIVE and moderate(c, prior).verdict is Verdict.UNCHANGED for c in slow)
    assert passed <= 0.025 * 1000 + 3 * math.sqrt(0.025 * 0.975 * 1000)  # 2.5% + 3 SD of a binomial
    aa = suite(1.0, 300)
    prior = fit_prior([(c.run_sd, 4) for c in aa])
    own = sum(c.verdict is not Verdict.INCONCLUSIVE for c in aa)
    pooled = sum(moderate(c, prior).verdict is not Verdict.INCONCLUSIVE for c in aa)
    assert pooled > own and all(moderate(c, prior).failed == c.failed for c in aa)  # no failure added or removed
