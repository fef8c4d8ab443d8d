"""Can more worker processes decide it? The prediction behind escalating a benchmark (pure: stdlib,
scipy.stats inside functions).

After the first P worker processes the coordinator measures a benchmark whose evidence is thin in
more processes (:func:`pytest_gpuperf.plugin.replicates.needs_more`). More processes help only
where the spread between processes is small enough for the processes still allowed to decide it:
on a noisy suite (process medians 20-30% apart) 10 processes leave almost every inconclusive verdict
inconclusive, and the time they cost buys no decision. This module predicts, from the spread seen
so far, what a CI would be with more processes.

The model is the process-level test's (:func:`pytest_gpuperf.verdict.compare.process_level_test`;
Kalibera & Jones 2013, "Rigorous benchmarking in reasonable time": replicate at the level where
the variance is, here the process): with ``sd`` the pooled SD of the log process medians, the
two-sided ``confidence`` CI of the log ratio of geometric means is ``d ± t(df) * sd * sqrt(1/n +
1/m)``, n current and m baseline processes, df = n + m - 2 (Student 1908). The prediction keeps
the centre ``d`` and ``sd`` as observed and grows n: the CI shrinks with t(df) and sqrt(1/n + 1/m),
and never below ``t * sd * sqrt(1/m)``, the baseline's own share, however many current processes
run.

How good the prediction is: with 3 processes a side (df = 4) the observed SD lies, 95% of the time,
between 0.60x and 2.9x the true SD (chi-square, df = 4; with df = 2, 0.52x-6.3x), and the centre
moves too. So the prediction reads the spread optimistically (:func:`optimistic_sd`: the lower
one-sided :data:`OPTIMISM` confidence bound of the SD, 0.65x the observed one at df = 4): a
benchmark is left without more processes only when not even that smaller spread could be decided
(its note says why). Replayed on a real suite's A/A and +20% runs (cattrs, 64 benchmarks, one core
busy, where the plugin before this rule escalated every thin benchmark to up to 10 processes, 2026-11-27):
with the observed SD, 33 of the 80 thin comparisons were predicted undecidable and 5 of those had
been decided by more processes; with the optimistic SD, 28 and 1
(``python benchmarks/replay_decisions.py <study> --escalation``; docs/verdicts.md has the figures).

Ratios are current/baseline times (> 1: slower); SDs are of natural-log times (about the CV for
small spreads); thresholds and slowdowns are fractions (0.05 = 5%).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

#: Two-sided confidence of the process-level CI (the value of
#: :data:`pytest_gpuperf.verdict.compare.RATIO_CONFIDENCE`).
CONFIDENCE = 0.99
#: One-sided confidence of the upper bound that decides "unchanged"
#: (:data:`pytest_gpuperf.verdict.compare.NONINFERIORITY_CONFIDENCE` is this value; see there why).
NONINFERIORITY = 0.975
#: Predictions look no further than this many processes ("not even 1000 processes would").
MAX_PREDICTED = 1000
#: One-sided confidence of the lower bound of the SD that predictions use (:func:`optimistic_sd`).
OPTIMISM = 0.95


def optimistic_sd(sd_log: float, df: int, confidence: float = OPTIMISM) -> float:
    """The lower one-sided ``confidence`` bound of a normal SD observed as ``sd_log`` with ``df``
    degrees of freedom: ``sd * sqrt(df / chi2.ppf(confidence, df))`` (the chi-square interval of a
    variance). A prediction from it stops escalating only what even a smaller true spread could
    not decide. Raises ``ValueError`` for df < 1."""
    if df < 1:
        raise ValueError(f"df must be >= 1, got {df}")
    from scipy import stats as sps

    return sd_log * math.sqrt(df / float(sps.chi2.ppf(confidence, df)))


def _t(p: float, df: float) -> float:
    from scipy import stats as sps

    return float(sps.t.ppf(p, df))


def half_width(sd_log: float, n_current: int, n_baseline: int, confidence: float = CONFIDENCE,
               df: float | None = None) -> float:
    """Half-width (log space) of the two-sided ``confidence`` t interval of the difference of the
    mean log medians of ``n_current`` and ``n_baseline`` processes whose pooled SD is ``sd_log``:
    ``t(1/2 + confidence/2, df) * sd * sqrt(1/n + 1/m)`` (Student 1908), df = n + m - 2 unless
    given (a moderated SD has more: :mod:`pytest_gpuperf.verdict.moderation`). Raises
    ``ValueError`` for a side without processes or no degree of freedom (one process a side)."""
    if n_current < 1 or n_baseline < 1 or n_current + n_baseline < 3:
        raise ValueError(f"needs a process on each side and two on one ({n_current}, {n_baseline})")
    if not sd_log >= 0:
        raise ValueError(f"sd_log must be >= 0, got {sd_log!r}")
    df = n_current + n_baseline - 2 if df is None else df
    return _t(0.5 + confidence / 2, df) * sd_log * math.sqrt(1 / n_current + 1 / n_baseline)


def predicted_ci(ratio: float, sd_log: float, n_current: int, n_baseline: int,
                 confidence: float = CONFIDENCE) -> tuple[float, float]:
    """``(lo, hi)``: the ``confidence`` CI of the ratio (current/baseline) that ``n_current`` and
    ``n_baseline`` processes would give if their geometric means had the ratio ``ratio`` and their
    pooled SD of log medians were ``sd_log`` (:func:`half_width`, exponentiated as
    :func:`~pytest_gpuperf.verdict.compare.process_level_test` does)."""
    if not ratio > 0:
        raise ValueError(f"ratio must be > 0, got {ratio!r}")
    d, h = math.log(ratio), half_width(sd_log, n_current, n_baseline, confidence)
    return math.exp(d - h), math.exp(d + h)


def noninferior_upper(ratio: float, sd_log: float, n_current: int, n_baseline: int,
                      confidence: float = NONINFERIORITY, df: float | None = None) -> float:
    """The one-sided ``confidence`` upper bound of the ratio that ``n_current`` and ``n_baseline``
    processes with pooled SD ``sd_log`` would give (``exp(d + t(confidence, df) * sd * sqrt(1/n + 1/m))``,
    ``df`` as in :func:`half_width`): under 1 + T it decides "unchanged"
    (:func:`pytest_gpuperf.verdict.compare.decide_replicates`)."""
    if not ratio > 0:
        raise ValueError(f"ratio must be > 0, got {ratio!r}")
    return math.exp(math.log(ratio) + half_width(sd_log, n_current, n_baseline, 2 * confidence - 1, df))


def straddles(ci: tuple[float, float], threshold: float, upper: float | None = None) -> bool:
    """Whether a ratio CI leaves the verdict ``inconclusive`` by the rule of
    :func:`~pytest_gpuperf.verdict.compare.shift_verdict`: it spans 1 and reaches above
    1 + ``threshold`` (lower than that it is ``unchanged``; wholly above 1 with the ratio above
    1 + T ``regressed``, with the ratio under it ``unchanged``), and the one-sided non-inferiority
    bound ``upper`` (:func:`noninferior_upper`; None: not read) does not lie under 1 + T either."""
    lo, hi = ci
    return lo < 1 < hi and hi > 1 + threshold and (upper is None or upper >= 1 + threshold)


def processes_to_decide(ratio: float, sd_log: float, n_baseline: int, threshold: float, *, start: int = 1,
                        confidence: float = CONFIDENCE, limit: int = MAX_PREDICTED) -> int | None:
    """The fewest current processes, from ``start`` to ``limit``, at which :func:`predicted_ci`
    (same ``ratio`` and ``sd_log``, ``n_baseline`` baseline processes) no longer
    :func:`straddles` 1 and 1 + ``threshold``; None when not even ``limit`` would (the
    baseline's spread alone, ``t * sd / sqrt(m)``, may keep it undecided for any number)."""
    start = max(start, 1, 3 - n_baseline)

    return _first(lambda n: not straddles(predicted_ci(ratio, sd_log, n, n_baseline, confidence), threshold,
                                          noninferior_upper(ratio, sd_log, n, n_baseline)),
                  start, limit)


def _first(ok: Callable[[int], bool], start: int, limit: int) -> int | None:
    """The smallest n in ``start..limit`` with ``ok(n)``, for an ``ok`` that stays true once true
    (a CI that narrows as n grows); None when ``ok(limit)`` is false."""
    if start > limit or not ok(limit):
        return None
    lo, hi = start, limit
    while lo < hi:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def smallest_detectable(sd_log: float, n_current: int, n_baseline: int, alpha: float = 0.01,
                        threshold: float = 0.0) -> float:
    """The smallest slowdown (fraction, 0.25 = +25%) that ``n_current`` against ``n_baseline``
    processes with pooled SD ``sd_log`` could call a regression: ``exp(max(t(1 - alpha, df) * sd *
    sqrt(1/n + 1/m), log(1 + threshold))) - 1``, the ``resolution`` of
    :func:`~pytest_gpuperf.verdict.compare.decide_replicates` (a slowdown at or under the
    threshold is never one)."""
    if n_current < 1 or n_baseline < 1 or n_current + n_baseline < 3:
        raise ValueError(f"needs a process on each side and two on one ({n_current}, {n_baseline})")
    se = sd_log * math.sqrt(1 / n_current + 1 / n_baseline)
    return math.expm1(max(_t(1 - alpha, n_current + n_baseline - 2) * se, math.log1p(threshold)))


@dataclass(frozen=True)
class Prediction:
    """What ``processes_max`` current processes would give a comparison (:func:`predict`): ``ci``
    the predicted ratio CI, ``decides`` whether it no longer straddles 1 and 1 + T, ``needed`` the
    fewest processes that would decide it (None: not even :data:`MAX_PREDICTED`), ``detectable``
    the smallest slowdown (fraction) this run's processes could detect and ``detectable_max`` the
    one ``processes_max`` could; ``baseline_processes`` the baseline's (fixed) count."""

    processes_max: int
    ci: tuple[float, float]
    decides: bool
    needed: int | None
    detectable: float
    detectable_max: float
    baseline_processes: int


def predict(comparison: Any, threshold: float, processes_max: int,
            confidence: float = CONFIDENCE) -> Prediction | None:
    """The :class:`Prediction` for a process-level comparison (a
    :class:`~pytest_gpuperf.verdict.compare.Comparison` of
    :func:`~pytest_gpuperf.verdict.compare.decide_replicates`: its ``ratio``, ``run_sd`` the pooled
    SD of log medians, ``processes`` and ``baseline_processes``) measured in up to
    ``processes_max`` current processes; None when it has no process-level spread to predict from
    (no ratio, SD or process counts, one process a side)."""
    c = comparison
    n, m, sd, ratio = c.processes, c.baseline_processes, c.run_sd, c.ratio
    if n is None or m is None or sd is None or ratio is None or not ratio > 0 or n < 1 or m < 1 or n + m < 3:
        return None
    n_max = max(int(processes_max), n)
    low = optimistic_sd(sd, n + m - 2)  # the spread read optimistically: see the module doc
    ci = predicted_ci(ratio, low, n_max, m, confidence)
    upper = noninferior_upper(ratio, low, n_max, m)
    return Prediction(processes_max=n_max, ci=ci, decides=not straddles(ci, threshold, upper),
                      needed=processes_to_decide(ratio, low, m, threshold, start=n, confidence=confidence),
                      detectable=smallest_detectable(sd, n, m, c.alpha, threshold),
                      detectable_max=smallest_detectable(sd, n_max, m, c.alpha, threshold), baseline_processes=m)


def can_decide(comparison: Any, threshold: float, processes_max: int, confidence: float = CONFIDENCE) -> bool:
    """Whether measuring ``comparison``'s benchmark in up to ``processes_max`` current processes
    could decide it, by :func:`predict` (same centre ratio, the pooled SD read optimistically); True when there is no
    process-level spread to predict from (then only measuring tells)."""
    p = predict(comparison, threshold, processes_max, confidence)
    return p is None or p.decides


# ----------------------------------------------------------------------------- update runs


def log_sd(values_ms: Sequence[float]) -> float | None:
    """SD (ddof=1) of the logs of replicate values (ms), None under 2 values; raises ``ValueError``
    for a non-positive value."""
    if len(values_ms) < 2:
        return None
    if any(not v > 0 for v in values_ms):
        raise ValueError("values must be > 0 ms")
    logs = [math.log(v) for v in values_ms]
    mean = sum(logs) / len(logs)
    return math.sqrt(sum((x - mean) ** 2 for x in logs) / (len(logs) - 1))


def geometric_mean_width(sd_log: float, n: int, alpha: float = 0.01) -> float:
    """The relative width ``high / low - 1`` of the two-sided ``1 - alpha`` CI of the geometric mean
    of ``n`` process medians whose log SD is ``sd_log``: ``exp(2 t(1 - alpha/2, n - 1) * sd /
    sqrt(n)) - 1`` (:func:`pytest_gpuperf.verdict.stats.geometric_mean_ci`'s interval). Raises
    ``ValueError`` under 2 processes."""
    if n < 2:
        raise ValueError(f"a geometric mean's CI needs 2 processes, got {n}")
    return math.expm1(2 * _t(1 - alpha / 2, n - 1) * sd_log / math.sqrt(n))


@dataclass(frozen=True)
class BaselinePrediction:
    """What ``processes_max`` processes would give a new baseline (:func:`predict_baseline`):
    ``width`` the predicted relative width of its CI (high/low - 1), ``narrows`` whether that is at
    most the ``limit`` asked for, ``needed`` the fewest processes that would reach it (None: not
    even :data:`MAX_PREDICTED`)."""

    processes_max: int
    width: float
    limit: float
    narrows: bool
    needed: int | None


def predict_baseline(process_medians_ms: Sequence[float], limit: float, processes_max: int,
                     alpha: float = 0.01) -> BaselinePrediction | None:
    """Whether more processes, up to ``processes_max`` in all, can bring a baseline's CI of the
    geometric mean of its process medians (ms) to a relative width (high/low - 1) of at most
    ``limit`` (the update run's ``BASELINE_WIDTH x threshold``), with the log SD read optimistically
    (:func:`optimistic_sd`); None under 2 medians. The CI's width falls as t(n - 1) / sqrt(n), so some number always would."""
    sd = log_sd(process_medians_ms)
    if sd is None:
        return None
    n = len(process_medians_ms)
    sd = optimistic_sd(sd, n - 1)  # the spread read optimistically: see the module doc
    n_max = max(int(processes_max), n)
    width = geometric_mean_width(sd, n_max, alpha)
    needed = _first(lambda k: geometric_mean_width(sd, k, alpha) <= limit, n, MAX_PREDICTED)
    return BaselinePrediction(processes_max=n_max, width=width, limit=limit, narrows=width <= limit, needed=needed)


# ----------------------------------------------------------------------------- the time budget


@dataclass(frozen=True)
class TimeBudget:
    """The time more worker processes may take, and what one is expected to cost (issue 45: "no
    process that cannot help"). ``seconds``: the whole budget (``--gpuperf-more-processes-time``;
    by default as long as the first P timed processes took together, so that the processes added
    for thin evidence at most double the timing); ``per_process_s``: the expected wall time of one
    more process, at first the mean of the first P (an added process runs fewer benchmarks, so
    this reads it pessimistically), then the mean of the last batch of added ones. On a suite
    whose processes spend much of their time starting (torch and tensordict imported: about 6.5 s
    of a 20 s process on this project's VM, 2026-11-28) an added process costs almost as much as a first one;
    on one whose processes time many benchmarks it costs a fraction.

    How many more processes the time left allows is :meth:`processes`; the escalation predicts
    at that count, not at ``--gpuperf-max-processes``, whether more processes can decide a
    benchmark (:func:`predict`), so it starts none that the time left cannot turn into a decision."""

    seconds: float
    per_process_s: float

    @classmethod
    def of(cls, first_s: Sequence[float], seconds: float | None = None) -> "TimeBudget":
        """The budget after the first processes took ``first_s`` (s each): ``seconds`` when given,
        else their sum; one process is expected to take their mean. Raises ``ValueError`` when
        ``first_s`` is empty or holds a negative value, or ``seconds`` is not > 0."""
        if not first_s or any(not s >= 0 for s in first_s):
            raise ValueError(f"needs the first processes' non-negative times, got {list(first_s)!r}")
        if seconds is not None and not seconds > 0:
            raise ValueError(f"the budget must be > 0 s, got {seconds!r}")
        total = float(sum(first_s))
        return cls(seconds=total if seconds is None else float(seconds), per_process_s=total / len(first_s))

    def processes(self, spent_s: float) -> int:
        """How many more processes fit in the time left after ``spent_s`` seconds of them
        (``floor((seconds - spent_s) / per_process_s)``, at least 0, at most :data:`MAX_PREDICTED`,
        which a per-process time of 0 gives). By default, before any is added, that is P: as many
        as the first processes, whatever this machine's speed."""
        left = self.seconds - spent_s
        if left <= 0:
            return 0
        if self.per_process_s <= 0:
            return MAX_PREDICTED
        return min(MAX_PREDICTED, int(left / self.per_process_s + 1e-9))  # P of P processes' time: P, not P - 1

    def after(self, batch_s: Sequence[float]) -> "TimeBudget":
        """This budget with the expected per-process time of the batch of added processes that
        took ``batch_s`` (s each; unchanged when empty): the next ones run about the same tests."""
        if not batch_s:
            return self
        return TimeBudget(self.seconds, float(sum(batch_s)) / len(batch_s))
