"""Summary statistics of timing samples (pure: numpy and scipy only, no torch, no pytest).

Every function takes per-call times in milliseconds (a 1-D sequence of floats, length n) and
returns plain floats in milliseconds unless its name says otherwise.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

#: Percentiles reported for every benchmark (linear interpolation, numpy's default method).
PERCENTILES = (5, 25, 50, 75, 90, 95, 99)

#: At most this many raw samples are stored in baselines and reports (see :func:`thin`).
MAX_STORED_SAMPLES = 2000


@dataclass(frozen=True)
class Outliers:
    """Tukey-fence outlier counts. Outliers are reported, never dropped from the statistics.

    ``low``/``high``: samples below Q1 - 1.5 IQR / above Q3 + 1.5 IQR (mild or worse).
    ``severe``: samples beyond the 3 IQR fences on either side (a subset of low + high).
    Source: J. W. Tukey, *Exploratory Data Analysis* (1977), the box-plot fences.
    """

    low: int = 0
    high: int = 0
    severe: int = 0

    @property
    def total(self) -> int:
        return self.low + self.high


@dataclass(frozen=True)
class Summary:
    """Summary statistics of n per-call times, all in milliseconds.

    ``std_ms`` is the sample standard deviation (ddof=1; 0.0 for n == 1).
    ``median_ci_ms`` is the 95% confidence interval of the median by the distribution-free
    order-statistic (binomial) method, or ``None`` when n < 6 (no pair of order statistics
    reaches 95% coverage).
    """

    n: int
    mean_ms: float
    std_ms: float
    min_ms: float
    max_ms: float
    median_ms: float
    p5_ms: float
    p25_ms: float
    p75_ms: float
    p90_ms: float
    p95_ms: float
    p99_ms: float
    iqr_ms: float
    median_ci_ms: tuple[float, float] | None
    outliers: Outliers


#: The scalar statistics (ms) of :class:`Summary`, in its order: the names every report and
#: baseline entry uses (``stats`` objects, :class:`~pytest_gpuperf.verdict.result.BenchResult` fields).
STAT_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(Summary)
                                     if f.name not in ("n", "median_ci_ms", "outliers"))


def _as_array(samples_ms: Sequence[float]) -> np.ndarray:
    x = np.asarray(samples_ms, dtype=np.float64)
    if x.ndim != 1 or x.size == 0:
        raise ValueError(f"samples must be a non-empty 1-D sequence, got shape {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError("samples contain NaN or infinite values")
    return x


def median_ci(samples_ms: Sequence[float], confidence: float = 0.95) -> tuple[float, float] | None:
    """Distribution-free confidence interval of the median from order statistics.

    The exact binomial method, as ``scipy.stats.quantile_test(x, p=0.5).confidence_interval``
    computes it (:func:`median_ci_ranks`): the interval [x_(r), x_(n-r+1)] whose coverage is at
    least ``confidence`` for any continuous distribution. Returns ``None`` when n is too small for
    that coverage (n < 6 at 95%). Units follow the input (ms).
    """
    x = _as_array(samples_ms)
    if x.size < 2:
        return None
    low, high = median_ci_ranks(int(x.size), confidence)
    if low < 0 or high >= x.size:
        return None
    ordered = np.sort(x)
    return (float(ordered[low]), float(ordered[high]))


def median_ci_ranks(n: int, confidence: float = 0.95) -> tuple[int, int]:
    """The 0-based positions ``(low, high)`` in the sorted sample of n values of
    :func:`median_ci`'s bounds; ``low < 0`` or ``high >= n`` when n is too small for ``confidence``.

    The same positions as ``scipy.stats.quantile_test(..., p=0.5).confidence_interval(confidence)``
    (two-sided): ``binom(n, 0.5).ppf(a) - 1`` and ``binom(n, 0.5).isf(a)`` with ``a = (1 -
    confidence) / 2``, from the binomial quantile functions scipy's ``binom`` uses
    (``scipy.special``'s Boost-based ``_binom_ppf``/``_binom_isf``, a private name: without them,
    ``scipy.stats.binom`` itself). Not importing ``scipy.stats`` saves a worker process about 1.8 s
    of start-up; ``tests/unit/test_stats.py`` checks the positions against ``quantile_test``.
    Source: W. J. Conover, *Practical Nonparametric Statistics* (3rd ed., 1999), the confidence
    interval for a quantile. Raises ``ValueError`` for ``confidence`` outside (0, 1).
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence={confidence!r}: expected a number between 0 and 1")
    a = (1 - confidence) / 2
    try:
        from scipy.special._ufuncs import _binom_isf, _binom_ppf
    except ImportError:  # another scipy layout: the public distribution (imports scipy.stats)
        from scipy.stats import binom

        return int(binom.ppf(a, n, 0.5)) - 1, int(binom.isf(a, n, 0.5))
    return int(_binom_ppf(a, n, 0.5)) - 1, int(_binom_isf(a, n, 0.5))


def tukey_outliers(samples_ms: Sequence[float]) -> Outliers:
    """Count samples outside the Tukey fences (1.5 IQR mild, 3 IQR severe)."""
    x = _as_array(samples_ms)
    q1, q3 = np.percentile(x, [25, 75])
    iqr = q3 - q1
    low = int(np.count_nonzero(x < q1 - 1.5 * iqr))
    high = int(np.count_nonzero(x > q3 + 1.5 * iqr))
    severe = int(np.count_nonzero((x < q1 - 3 * iqr) | (x > q3 + 3 * iqr)))
    return Outliers(low=low, high=high, severe=severe)


def summarize(samples_ms: Sequence[float]) -> Summary:
    """Compute :class:`Summary` for per-call times (ms).

    Raises ``ValueError`` for an empty sequence or non-finite values.
    """
    x = _as_array(samples_ms)
    p5, p25, p50, p75, p90, p95, p99 = (float(v) for v in np.percentile(x, PERCENTILES))
    return Summary(
        n=int(x.size),
        mean_ms=float(np.mean(x)),
        std_ms=float(np.std(x, ddof=1)) if x.size > 1 else 0.0,
        min_ms=float(np.min(x)),
        max_ms=float(np.max(x)),
        median_ms=p50,
        p5_ms=p5,
        p25_ms=p25,
        p75_ms=p75,
        p90_ms=p90,
        p95_ms=p95,
        p99_ms=p99,
        iqr_ms=p75 - p25,
        median_ci_ms=median_ci(x),
        outliers=tukey_outliers(x),
    )


def ci_half_width_fraction(samples_ms: Sequence[float]) -> float:
    """Half-width of the 95% CI of the median as a fraction of the median (inf if undefined).

    This is the stopping criterion behind the ``target_precision`` option.
    """
    x = _as_array(samples_ms)
    ci = median_ci(x)
    med = float(np.median(x))
    if ci is None or med <= 0:
        return math.inf
    return (ci[1] - ci[0]) / 2.0 / med


def thin(samples_ms: Sequence[float], limit: int = MAX_STORED_SAMPLES) -> list[float]:
    """Deterministically thin a sample sequence to at most ``limit`` values.

    Keeps evenly spaced samples in measurement order (indices ``round(linspace(0, n-1, limit))``),
    so the time structure of the run survives and the same input always gives the same output.
    """
    x = list(map(float, samples_ms))
    if len(x) <= limit:
        return x
    idx = np.unique(np.round(np.linspace(0, len(x) - 1, limit)).astype(int))
    return [x[i] for i in idx]


def geometric_mean_ci(values_ms: Sequence[float], alpha: float = 0.01) -> tuple[float, float, float] | None:
    """``(geometric mean, low, high)`` (ms) of replicate values such as per-process medians: the
    two-sided ``1 - alpha`` Student-t interval of the mean of their logs, exponentiated (the
    interval the replicated timing gate uses for each side; Kalibera & Jones 2013 replicate at the
    process level). None for fewer than 2 values; raises ``ValueError`` for non-positive values."""
    if len(values_ms) < 2:
        return None
    if any(not v > 0 for v in values_ms):
        raise ValueError("geometric_mean_ci: values must be > 0 ms")
    from scipy import stats as sps

    logs = np.log(np.asarray(values_ms, dtype=float))
    mean = float(np.mean(logs))
    half = float(sps.t.ppf(1 - alpha / 2, len(logs) - 1)) * float(np.std(logs, ddof=1)) / math.sqrt(len(logs))
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)
