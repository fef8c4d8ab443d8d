"""The suite's spread lends each benchmark degrees of freedom: a moderated non-inferiority pass
(pure: numpy, scipy.special and scipy.stats inside functions).

Over worker processes a benchmark's spread is the pooled SD of its log process medians
(:func:`pytest_gpuperf.verdict.compare.process_level_test`), estimated from 3 processes a side:
4 degrees of freedom, so the observed SD lies between 0.6x and 2.9x the true one 95% of the time,
and an unchanged benchmark whose SD came out high by chance stays ``inconclusive``. But a suite
measures tens of benchmarks in the same processes on the same machine, and their spreads are alike.
Smyth's moderated t (Smyth 2004, "Linear models and empirical Bayes methods for assessing
differential expression in microarray experiments", Stat. Appl. Genet. Mol. Biol. 3(1), the
``limma`` package's ``squeezeVar``) is the standard answer for many features measured with few
replicates: the variances s_g^2 (d_g degrees of freedom each) are taken as drawn from a scaled
inverse chi-square prior with d0 degrees of freedom and scale s0^2, both estimated from all the
features by moments of log s_g^2 (:func:`fit_prior`); each feature's posterior variance is then
``(d0 * s0^2 + d_g * s_g^2) / (d0 + d_g)`` on ``d0 + d_g`` degrees of freedom (:func:`moderated`).
Where the suite's spreads differ a lot, d0 comes out small and little changes.

The plugin reads the moderated spread for one question only: "not slower by more than T?"
(:func:`moderate`), with one prior per clock (:class:`Priors`: the wall clock's process medians,
and CPU time's, which decides on a busy host), fitted after the session's first decisions. A benchmark left ``inconclusive`` by its own spread passes ``unchanged`` when
the one-sided 97.5% upper bound of its ratio, with the moderated spread, lies under 1 + T. A
regression still needs its own 99% evidence, so the moderated spread can never fail a test, and
an A/A run cannot fail more often. Replayed on four real suites' A/A runs (cattrs, tensordict,
pydantic, pydantic-core: 1240 benchmark-runs, quiet, 2026-11-27; docs/verdicts.md) it decided 71%
where the benchmark's own spread decided 62%, with the same regressions caught and one more +20%
slowdown at a 10% threshold passed as unchanged
(``python benchmarks/replay_decisions.py <study> --thresholds 0.05,0.1``).

The same-machine A/B reads its comparisons the same way (:func:`fit_ab_priors`, :func:`moderate_ab`):
there a benchmark's spread is that of its 2-3 pairs of worker processes' median ratios B/A, and
the prior is fitted to the spreads of the A/B's other benchmarks.

SDs are of natural-log times (about the CV for small spreads); thresholds are fractions.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

#: Fewest benchmarks with a process-level spread that a prior is estimated from; under it each
#: benchmark decides on its own spread (a prior's d0 from a handful of variances is itself noise).
MIN_BENCHMARKS = 10
#: The prior's degrees of freedom are capped here: where the suite's spreads look like one variance
#: (the moment estimate says infinite), a benchmark still keeps its own share, and t(0.975, 24) is
#: 2.06 against the normal's 1.96, so more would buy almost nothing.
MAX_PRIOR_DF = 20.0


@dataclass(frozen=True)
class Prior:
    """The suite's spread as a prior (:func:`fit_prior`): ``df`` its degrees of freedom (d0, at
    most :data:`MAX_PRIOR_DF`), ``sd`` its scale s0 (an SD of log process medians), ``benchmarks``
    how many benchmarks' spreads it was estimated from."""

    df: float
    sd: float
    benchmarks: int


@dataclass(frozen=True)
class Priors:
    """A session's priors, one per clock (:func:`fit_priors`): ``wall`` for the wall clock's (or CUDA
    events') process medians, ``cpu`` for the calling thread's CPU-time ones; None where too few
    benchmarks have that spread; ``ref`` for the reference clock's (:mod:`pytest_gpuperf.verdict.refclock`).
    :func:`pytest_gpuperf.verdict.gate.evaluate` reads each clock's verdict with its own."""

    wall: Prior | None = None
    cpu: Prior | None = None
    ref: Prior | None = None

    def __bool__(self) -> bool:
        return self.wall is not None or self.cpu is not None or self.ref is not None


def fit_priors(wall: Sequence[tuple[Sequence[float], Sequence[float]]],
               cpu: Sequence[tuple[Sequence[float], Sequence[float]]] = (),
               ref: Sequence[tuple[Sequence[float], Sequence[float]]] = ()) -> Priors:
    """Each clock's prior (:func:`fit_prior` of :func:`spread`) from the session's benchmarks'
    ``(this run's, the baseline's)`` process medians (ms) on that clock."""
    def fit(pairs: Sequence[tuple[Sequence[float], Sequence[float]]]) -> Prior | None:
        return fit_prior([x for x in (spread(c, b) for c, b in pairs if c and b) if x is not None])

    return Priors(fit(wall), fit(cpu), fit(ref))


def session_priors(sides: Iterable[tuple[Any, ...]]) -> Priors:
    """:func:`fit_priors` of a session's (or a compared file's) benchmarks, each given as ``(this
    run's process medians, this run's CPU-time process medians or None, its baseline entry, this
    run's reference clock as (probe name or None, ref_medians or None))`` (ms; a
    :class:`~pytest_gpuperf.verdict.history.BaselineEntry`): the wall clock's pairs where this run
    has 2 or more processes and the baseline replicate medians, CPU time's where both have CPU-time
    process medians (:meth:`~pytest_gpuperf.verdict.history.BaselineEntry.cpu_view`), the reference
    clock's where both have its levels with the same probe
    (:meth:`~pytest_gpuperf.verdict.history.BaselineEntry.ref_view`; the spread of log levels is
    scale-free, so at level 1)."""
    wall, cpu, ref = [], [], []
    for medians, cpu_medians, base, (probe, levels) in sides:
        if base is None or len(medians or ()) < 2 or not base.replicate_medians_ms:
            continue
        wall.append((medians, base.replicate_medians_ms))
        view = base.cpu_view()
        if cpu_medians and view is not None:
            cpu.append((cpu_medians, view.replicate_medians_ms))
        ref_view = base.ref_view(probe, 1.0) if probe and levels and len(levels) >= 2 else None
        if ref_view is not None:
            ref.append((levels, ref_view.replicate_medians_ms))
    return fit_priors(wall, cpu, ref)


def spread(current_medians_ms: Sequence[float], baseline_medians_ms: Sequence[float]) -> tuple[float, int] | None:
    """One benchmark's ``(sd, df)`` as its process-level decision reads it: each side's process a slow
    period disturbed set aside (:func:`pytest_gpuperf.verdict.estimate.set_aside_slow`), then the
    pooled SD of the log process medians (ms) and its degrees of freedom (P + Q - 2). None where there
    is none (one process a side, non-positive medians)."""
    from pytest_gpuperf.verdict.compare import process_level_test
    from pytest_gpuperf.verdict.estimate import set_aside_slow

    cur, _ = set_aside_slow(current_medians_ms)
    base, _ = set_aside_slow(baseline_medians_ms)
    try:
        _ratio, _ci, _ps, _pf, df, sd = process_level_test(cur, base)
    except ValueError:
        return None
    return sd, df


def fit_prior(spreads: Sequence[tuple[float, int]]) -> Prior | None:
    """The prior (d0, s0) of the ``(sd, df)`` spreads of a suite's benchmarks, by Smyth's (2004)
    method of moments on log variances (``limma::fitFDist``): with z = log s^2 and e = z -
    digamma(d/2) + log(d/2), ``trigamma(d0/2)`` = var(e) - mean(trigamma(d/2)) and
    ``log s0^2`` = mean(e) + digamma(d0/2) - log(d0/2); where var(e) is no larger than the
    sampling variance alone, d0 is infinite (capped at :data:`MAX_PRIOR_DF`). Spreads of exactly 0
    (identical process medians: scripted timings) carry no log variance and are left out. None under
    :data:`MIN_BENCHMARKS` usable spreads."""
    import numpy as np
    from scipy import optimize, special

    kept = [(float(sd), int(df)) for sd, df in spreads if df >= 1 and sd > 0 and math.isfinite(sd)]
    if len(kept) < MIN_BENCHMARKS:
        return None
    s2 = np.array([sd * sd for sd, _ in kept])
    d = np.array([df for _, df in kept], dtype=np.float64)
    e = np.log(s2) - special.digamma(d / 2) + np.log(d / 2)
    excess = float(np.var(e, ddof=1) - np.mean(special.polygamma(1, d / 2)))
    if excess > float(special.polygamma(1, MAX_PRIOR_DF / 2)):
        half = optimize.brentq(lambda x: float(special.polygamma(1, x)) - excess, 1e-8, MAX_PRIOR_DF / 2)
        d0 = 2 * half
    else:
        d0 = MAX_PRIOR_DF
    s0 = math.sqrt(math.exp(float(np.mean(e)) + float(special.digamma(d0 / 2)) - math.log(d0 / 2)))
    return Prior(df=d0, sd=s0, benchmarks=len(kept))


def moderated(sd: float, df: int, prior: Prior) -> tuple[float, float]:
    """``(sd, df)`` of one benchmark moderated by the suite's ``prior``: the posterior SD
    ``sqrt((d0 * s0^2 + df * sd^2) / (d0 + df))`` on ``d0 + df`` degrees of freedom (Smyth 2004,
    eq. 5)."""
    total = prior.df + df
    return math.sqrt((prior.df * prior.sd ** 2 + df * sd * sd) / total), total


def moderate(comparison: Any, prior: Prior | None) -> Any:
    """``comparison`` (a :class:`~pytest_gpuperf.verdict.compare.Comparison` over worker processes,
    :func:`~pytest_gpuperf.verdict.compare.decide_replicates`), read with the suite's ``prior``:
    an ``inconclusive`` verdict whose one-sided 97.5% upper bound, with the
    moderated spread (:func:`moderated`, :func:`~pytest_gpuperf.verdict.escalation.noninferior_upper`
    with its degrees of freedom), lies under 1 + T becomes
    ``unchanged``, with a note naming the bound, both spreads and the prior, and without the advice
    to measure more processes. ``prior`` must be the one of the clock ``comparison`` was decided on
    (:class:`Priors`). Any other comparison (a regression, A/B, one process a side, no ``prior``) is
    returned as it is."""
    from pytest_gpuperf.verdict.advice import Advice
    from pytest_gpuperf.verdict.compare import Verdict, noninferior_note, processes_decided_on
    from pytest_gpuperf.verdict.escalation import noninferior_upper

    c = comparison
    if (prior is None or c is None or c.verdict is not Verdict.INCONCLUSIVE or c.ab is not None
            or c.run_sd is None or c.ratio is None or not c.ratio > 0 or c.ratio_ci is None):
        return c
    n, m = processes_decided_on(c)
    if n is None or m is None or n < 1 or m < 1 or n + m < 3:
        return c
    sd, df = moderated(c.run_sd, n + m - 2, prior)
    upper = noninferior_upper(c.ratio, sd, n, m, df=df)
    if not upper < 1 + c.threshold:
        return c
    note = noninferior_note(c.threshold, upper, c.ratio_ci, (
        f" with the spread moderated by this run's {prior.benchmarks} benchmarks (SD of log process medians "
        f"{c.run_sd:.1%} -> {sd:.1%} on {df:.1f} df; prior {prior.sd:.1%} on {prior.df:.1f} df; Smyth 2004)"))
    return _passed(c, note, Advice.MORE_PROCESSES)


def ab_spread(comparison: Any) -> tuple[float, int] | None:
    """An A/B comparison's spread between pairs of worker processes: ``(SD of the log per-pair
    median ratios B/A, pairs - 1)`` (:attr:`~pytest_gpuperf.verdict.compare.ABEvidence.process_ratios`);
    None under 2 pairs, or for a comparison that is not an A/B one."""
    import statistics

    ab = getattr(comparison, "ab", None)
    ratios = ab.process_ratios if ab is not None else None
    if not ratios or len(ratios) < 2 or not all(r > 0 and math.isfinite(r) for r in ratios):
        return None
    return statistics.stdev(math.log(r) for r in ratios), len(ratios) - 1


def fit_ab_priors(comparisons: Iterable[Any]) -> Priors:
    """Each clock's prior (:func:`fit_prior`) from the :func:`ab_spread` of one A/B's comparisons
    (``clock`` ``"cpu"``: CPU time's; any other: the wall clock's). Same-machine A/B (issue 45): the
    pairs of one A/B run on the same machine in the same minutes, so their spreads are alike."""
    wall, cpu = [], []
    for c in comparisons:
        s = ab_spread(c)
        if s is not None:
            (cpu if getattr(c, "clock", None) == "cpu" else wall).append(s)
    return Priors(fit_prior(wall), fit_prior(cpu))


def moderate_ab(comparison: Any, priors: Priors) -> Any:
    """An A/B ``comparison`` (:func:`~pytest_gpuperf.verdict.paired.decide_ab`) read with its A/B's
    spread between process pairs (``priors``, :func:`fit_ab_priors`), for "not slower by more than
    T?" only, as :func:`moderate` reads the stored stage: an ``inconclusive`` one whose one-sided
    97.5% upper bound ``exp(mean + t(0.975, d0 + P - 1) * s / sqrt(P))`` lies under 1 + T is
    ``unchanged`` (mean and s of the P pairs' log median ratios, s moderated by :func:`moderated`).

    Why: the A/B's 99% CI is a two-stage bootstrap over 2-3 process pairs and the blocks inside
    each; on a VM whose speed jumps by up to 2x between blocks (docs/verdicts.md, "The CPU's
    default threshold") it spans 1 + T for an A/A comparison whose pairs agree within 3%. Each
    pair's median ratio already carries its blocks' noise, and the session's other benchmarks lend
    the degrees of freedom that 2-3 pairs lack. A regression still needs the A/B's own evidence,
    so this never fails a test. Any other comparison is returned as it is."""
    import statistics

    from scipy import stats

    from pytest_gpuperf.verdict.advice import Advice
    from pytest_gpuperf.verdict.compare import NONINFERIORITY_CONFIDENCE, Verdict, noninferior_note

    c = comparison
    prior = priors.cpu if getattr(c, "clock", None) == "cpu" else priors.wall
    own = ab_spread(c)
    if prior is None or own is None or c.verdict is not Verdict.INCONCLUSIVE or c.ratio_ci is None:
        return c
    logs = [math.log(r) for r in c.ab.process_ratios]
    sd, df = moderated(own[0], own[1], prior)
    upper = math.exp(statistics.fmean(logs) + float(stats.t.ppf(NONINFERIORITY_CONFIDENCE, df)) * sd / math.sqrt(len(logs)))
    if not upper < 1 + c.threshold:
        return c
    note = noninferior_note(c.threshold, upper, c.ratio_ci, (
        f" over the {len(logs)} pairs' median ratios, their spread moderated by this A/B's {prior.benchmarks} "
        f"benchmarks (SD of log pair ratios {own[0]:.1%} -> {sd:.1%} on {df:.1f} df; prior {prior.sd:.1%} on "
        f"{prior.df:.1f} df; Smyth 2004)"))
    return _passed(c, note, Advice.MORE_AB_PROCESSES)


def _passed(c: Any, note: str, more: Any) -> Any:
    """``c`` passed ``unchanged`` by a moderated non-inferiority reading (:func:`moderate`,
    :func:`moderate_ab`): its "not enough evidence" note replaced by ``note``, the advice ``more``
    (more processes, more A/B pairs) dropped."""
    from pytest_gpuperf.verdict.compare import NOT_ENOUGH_EVIDENCE, Verdict

    kept = [part for part in (c.note or "").split("; ") if part and not part.endswith(NOT_ENOUGH_EVIDENCE)]
    return dataclasses.replace(c, verdict=Verdict.UNCHANGED, note="; ".join([*kept, note]),
                               advice=tuple(a for a in c.advice if a is not more))
