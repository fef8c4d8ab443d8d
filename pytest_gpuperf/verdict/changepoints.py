"""Change points in a benchmark's history (issue 34): where a series of runs stepped up or down.

The ``gpuperf changes`` command and the dashboard share this module. Pure: numpy and scipy only,
imported inside the functions (no torch, no pytest).

**Method.** E-divisive means (Matteson & James 2014, "A Nonparametric Approach for Multiple Change
Point Analysis of Multivariate Data", JASA 109(505):334-345, arXiv:1306.4933) finds each candidate:
within a segment ``Z[0:n]`` of the series it maximizes the scaled energy statistic (alpha = 1)

    q(tau, kappa) = tau (kappa - tau) / kappa * E(Z[0:tau], Z[tau:kappa])
    E(X, Y) = 2 mean|X - Y| - mean|X - X'| - mean|Y - Y'|

over the split ``tau`` and the end ``kappa`` of the second part (the within-means over distinct
pairs), in O(n^2) time and memory from one cumulative-sum table of the pairwise distances
(:func:`energy_candidate`). Each part holds at least ``min_runs`` runs. A significant candidate
splits its segment and both halves are searched again (binary segmentation, recursively); a
segment whose candidate is not significant is left whole.

**Significance test.** As Apache Otava (formerly DataStax Hunter) does it -- Fleming et al. 2023,
"Hunter: Using Change Point Detection to Hunt for Performance Regressions", ICPE '23,
doi:10.1145/3578244.3583719, arXiv:2301.03034 -- Student's two-sample t-test (pooled variance)
between the two sides of a candidate replaces the original paper's permutation test of q: fast
and deterministic (no random permutations; a permutation test of q costs O(R n^2) per candidate,
an estimated 200 s for 200 benchmarks of 500 runs with R = 199). The null hypothesis is "no
change": both sides from one distribution, so one variance, which the pooled test assumes.
(Welch's test was tried and dropped: a 3-run side whose spread happens to be small takes its degrees of
freedom from the other side, and a flat series got p = 1e-12 at its first three runs.) One
change to what Otava does, measured in ``benchmarks/changepoint_study.py`` (docs/history.md,
"Change points"):

* **The p-value is adjusted for choosing the split** (Bonferroni over the ``n - 2 min_runs + 1``
  places the split could take in its segment of n runs): the split is the one that makes the two
  sides look most different, so the raw t-test's p-value is too small: with raw p-values (p <
  0.001) flat series of 200 runs got 0.17 false changes per 100 runs (0.18 with the tests of
  issue 47; quiet model; Otava 0.09), adjusted none. The adjustment is conservative: the splits'
  tests are strongly correlated.

As in Otava, candidates are first kept at a 10x looser level (the split step; there the test is
between ``Z[0:tau]`` and ``Z[tau:kappa]``, the parts the statistic compared, so a step up and
back down is not hidden by what follows it), then every change is re-tested between its
neighbouring changes and the weakest one above the level dropped, one at a time, until all pass
(the merge step); the reported p-value is this last test's. Two changes of issue 47, so that a
2x step with 3 runs on each side is found at the default level (before: three runs at 80 ms,
three at 250, three at 90 gave no change; p 0.012 and 0.015 at 0.05):

* **The tests see log values.** Timing noise is multiplicative (a benchmark twice as slow varies
  about twice as much in ms): on ms, the slow side's spread swamped the pooled variance. On logs
  the sides share one spread, which the pooled t-test assumes, and a change is a ratio.
* **The merge step's variance is the whole series'** (the residual variance of the step model
  over every segment, n - K degrees of freedom for K segments: one-way ANOVA's contrast test),
  never less than the two sides' own: a 3-vs-3 test alone has 4 degrees of freedom, where
  p < 0.001 needs t > 8.61 (5.96 with 6, 3.46 with 60).

The default level stays 0.001: a study of flat noisy series (false changes) and short stepped
ones (power) in ``benchmarks/changepoint_study.py`` (docs/history.md, "Change points") found
that 0.002 and above add false changes and 0.001 keeps the earlier figures. Unlike Otava there
are no sliding windows (its 50 runs): the whole series is searched, the end ``kappa`` already
confines a comparison to the runs near its split.

**Series.** One value per run: the median of its process medians (``process_medians_ms``, each
worker process's median, ms; a row without them counts with its ``median_ms``), so a change
falls only between runs. The process medians of one run share that run's machine, load, clocks,
driver and build: pooled as if independent they understate how much a run's level varies from
run to run (pseudo-replication), and run-to-run jitter becomes "significant". The spread of the
per-run values holds both the between-process noise the gate models and the run-level noise a
history has besides. The medians reported before and after a change are the median of all the
process medians of each side (ms).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

#: The default significance level of a change (adjusted p-value), Otava's default level.
DEFAULT_PVALUE = 0.001
#: The default fewest runs on each side of a change (a single odd run is never a change).
DEFAULT_MIN_RUNS = 3
#: The split step keeps candidates at this many times the level (Otava's "weak change points").
SPLIT_LEVEL_FACTOR = 10.0
#: Rows of the (split x end) table computed at a time (bounds the temporary arrays' memory).
_BLOCK = 32


@dataclass(frozen=True)
class ChangePoint:
    """One change in one benchmark's series (one device key, one branch).

    ``index``: the position, in the series' runs (oldest first, 0-based), of the first run after
    the change; ``before_commit`` / ``after_commit``: the commits (full shas, None when a run has
    none) of the last run before and the first run after; ``before_run`` / ``after_run``: their
    run ids; ``median_before_ms`` / ``median_after_ms``: the median of the process medians (ms) of
    the segment before and the segment after (each bounded by the neighbouring change points);
    ``change_pct``: ``(after / before - 1) * 100``; ``pvalue``: the significance test's p-value
    (Student's t-test between the logs of the two segments' per-run values, the variance of the
    whole series' segments, adjusted for the choice of the split: see the module's docstring);
    ``runs_before`` / ``runs_after``: how many runs the two segments hold."""

    benchmark: str
    device_key: str | None
    index: int
    before_commit: str | None
    after_commit: str | None
    before_run: str
    after_run: str
    median_before_ms: float
    median_after_ms: float
    change_pct: float
    pvalue: float
    runs_before: int = 0
    runs_after: int = 0

    @property
    def slower(self) -> bool:
        """True when the series got slower at this change (``median_after_ms > median_before_ms``)."""
        return self.median_after_ms > self.median_before_ms


@dataclass(frozen=True)
class RunPoint:
    """One run of one benchmark's series: ``run_id``, ``commit`` (None when not recorded),
    ``created_utc``, ``process_medians_ms`` (ms, at least one, finite) and ``value_ms`` (their
    median: the value the change points are found on)."""

    run_id: str
    commit: str | None
    created_utc: str | None
    process_medians_ms: tuple[float, ...]
    value_ms: float


def _check(pvalue: float, min_runs: int) -> None:
    if not (isinstance(pvalue, (int, float)) and 0.0 < pvalue < 1.0):
        raise ValueError(f"pvalue={pvalue!r}: expected a significance level between 0 and 1 (e.g. 0.001)")
    if isinstance(min_runs, bool) or not isinstance(min_runs, int) or min_runs < 2:
        raise ValueError(f"min_runs={min_runs!r}: expected a whole number >= 2 (runs on each side of a change)")


def energy_candidate(values: Sequence[float], min_runs: int = DEFAULT_MIN_RUNS) -> tuple[int, int, float] | None:
    """The e-divisive candidate of one segment: ``(tau, kappa, q)`` maximizing the scaled energy
    statistic q-hat (alpha = 1) of Matteson & James 2014 between ``values[:tau]`` and
    ``values[tau:kappa]``, both at least ``min_runs`` long; ``tau`` is the index of the first value
    after the change. None when the segment is shorter than ``2 * min_runs``. Ties go to the
    smallest ``tau``, then ``kappa``.

    ``values``: a 1-D sequence of n floats (any unit). O(n^2) time; memory: one (n+1)^2 table of
    float64 (2 MB for 500 runs) and a few ``32 x n`` blocks."""
    import numpy as np

    x = np.asarray(values, dtype=np.float64)
    n, m = int(x.size), int(min_runs)
    if n < 2 * m:
        return None
    # C[a, b] = sum |x_i - x_j| over i < a, j < b: every sum the statistic needs is read from it.
    c = np.zeros((n + 1, n + 1))
    np.subtract(x[:, None], x[None, :], out=c[1:, 1:])
    np.abs(c, out=c)
    c.cumsum(axis=0, out=c)
    c.cumsum(axis=1, out=c)
    d = np.diagonal(c).copy()  # d[a] = 2 * (sum over pairs within x[:a])
    best = (-math.inf, 0, 0)
    for t0 in range(m, n - m + 1, _BLOCK):
        tau = np.arange(t0, min(t0 + _BLOCK, n - m + 1))
        kap = np.arange(t0 + m, n + 1)  # the ends any split of this block can have (kappa >= tau + min_runs)
        t = tau[:, None].astype(np.float64)
        kf = kap[None, :].astype(np.float64)
        r = kf - t  # the length of the second part
        ctk = c[tau[0]:tau[-1] + 1, t0 + m:n + 1]  # c[tau, kappa]
        dt = d[tau][:, None]
        g = t / np.maximum(r - 1.0, 0.5)
        # q = (2 / kappa) [B - r WL / (tau - 1) - tau WR / (r - 1)] with the sums of |x_i - x_j| between
        # the parts B = c[tau, kappa] - d[tau] and over the pairs within them, WL = d[tau] / 2 and
        # WR = (d[kappa] - 2 c[tau, kappa] + d[tau]) / 2; rearranged to read c[tau, kappa] once:
        q = ctk * (1.0 + g) - dt * (1.0 + r / (2.0 * (t - 1.0)) + 0.5 * g) - 0.5 * d[t0 + m:n + 1][None, :] * g
        q *= 2.0 / kf
        q[r < m] = -np.inf
        i = int(np.argmax(q))
        if q.flat[i] > best[0]:
            best = (float(q.flat[i]), int(tau[i // q.shape[1]]), int(kap[i % q.shape[1]]))
    return best[1], best[2], best[0]


def ttest_pvalue(before: Sequence[float], after: Sequence[float]) -> float:
    """Two-sided p-value of Student's two-sample t-test (pooled variance, ``na + nb - 2`` degrees
    of freedom; what ``scipy.stats.ttest_ind`` computes) that ``before`` and ``after`` (1-D, at
    least 2 values each) have the same mean. Two constant sides: 1.0 when equal, 0.0 when not.
    Raises ``ValueError`` for a side of fewer than 2 values."""
    import numpy as np
    from scipy.special import stdtr

    a, b = np.asarray(before, dtype=np.float64), np.asarray(after, dtype=np.float64)
    if a.size < 2 or b.size < 2:
        raise ValueError(f"the t-test needs at least 2 values on each side, got {a.size} and {b.size}")
    df = a.size + b.size - 2
    pooled = (float(a.var(ddof=1)) * (a.size - 1) + float(b.var(ddof=1)) * (b.size - 1)) / df
    diff = float(b.mean() - a.mean())
    se2 = pooled * (1.0 / a.size + 1.0 / b.size)
    if not se2 > 0.0 or not math.isfinite(se2):
        return 1.0 if diff == 0.0 else 0.0
    return float(min(1.0, 2.0 * stdtr(df, -abs(diff) / math.sqrt(se2))))


def split_pvalue(values: Sequence[float], lo: int, tau: int, hi: int, min_runs: int = DEFAULT_MIN_RUNS,
                 end: int | None = None, adjust: bool = True) -> float:
    """The adjusted p-value of a change at ``tau`` in the segment ``values[lo:hi]``: the t-test's
    p-value (:func:`ttest_pvalue`) between ``values[lo:tau]`` and ``values[tau:end]`` (``end``:
    ``hi`` unless given) times the number of places the split could take in the segment
    (``hi - lo - 2 min_runs + 1``, Bonferroni), at most 1; ``adjust=False``: the raw p-value."""
    places = max(1, (hi - lo) - 2 * min_runs + 1) if adjust else 1
    return min(1.0, ttest_pvalue(values[lo:tau], values[tau:hi if end is None else end]) * places)


def segments_pvalue(values: Sequence[float], bounds: Sequence[int], i: int, min_runs: int = DEFAULT_MIN_RUNS,
                    adjust: bool = True, pooled: bool = True) -> float:
    """The merge step's p-value of the change between the segments ``values[bounds[i]:bounds[i+1]]``
    and ``values[bounds[i+1]:bounds[i+2]]`` (``bounds``: 0, the changes' indices, ``len(values)``).

    ``pooled`` (the default): Student's t statistic of the two segments' means with the variance
    of every segment of the series (the residual variance of the step model, ``n - K`` degrees of
    freedom for K segments of n values: the contrast test of a one-way analysis of variance), but
    never less than the two segments' own pooled variance (a segment of outlier runs is not judged
    by the quiet rest of the series). So a 3-run segment borrows its degrees of freedom from the
    whole series instead of 6 values (4 degrees of freedom, where p < 0.001 needs t > 8.6).
    ``pooled=False``: :func:`ttest_pvalue` between the two segments alone. Then adjusted as
    :func:`split_pvalue` (times ``bounds[i+2] - bounds[i] - 2 min_runs + 1``, at most 1) unless
    ``adjust=False``."""
    import numpy as np
    from scipy.special import stdtr

    x = np.asarray(values, dtype=np.float64)
    lo, tau, hi = bounds[i], bounds[i + 1], bounds[i + 2]
    if not pooled:
        return split_pvalue(x, lo, tau, hi, min_runs, adjust=adjust)
    ss = sum(float(np.sum((seg - seg.mean()) ** 2)) for seg in (x[a:b] for a, b in zip(bounds, bounds[1:])))
    df = int(bounds[-1] - bounds[0]) - (len(bounds) - 1)
    before, after = x[lo:tau], x[tau:hi]
    own = (float(np.sum((before - before.mean()) ** 2)) + float(np.sum((after - after.mean()) ** 2))) / (hi - lo - 2)
    diff = float(after.mean() - before.mean())
    se2 = max(ss / df, own) * (1.0 / (tau - lo) + 1.0 / (hi - tau)) if df > 0 else 0.0
    if not se2 > 0.0 or not math.isfinite(se2):
        p = 1.0 if diff == 0.0 else 0.0
    else:
        p = 2.0 * float(stdtr(df, -abs(diff) / math.sqrt(se2)))
    places = max(1, (hi - lo) - 2 * min_runs + 1) if adjust else 1
    return min(1.0, p * places)


def detect(values: Sequence[float], *, pvalue: float = DEFAULT_PVALUE, min_runs: int = DEFAULT_MIN_RUNS,
           min_change_pct: float = 0.0, adjust: bool = True, log: bool = True,
           pooled: bool = True) -> list[tuple[int, float]]:
    """The change points of one series: ``[(index, adjusted p-value), ...]`` by index, ``index``
    the first value after the change. ``values``: 1-D floats (ms), oldest first.

    ``log`` (the default): the tests see the natural logarithms of the values (timing noise is
    multiplicative: a run twice as slow varies twice as much in ms, so on ms a slow segment's
    spread would swamp a fast one's; on logs the segments share one spread, as the pooled tests
    assume); a series with a value <= 0 is tested on its values. Split: e-divisive candidates
    (:func:`energy_candidate`) tested at ``SPLIT_LEVEL_FACTOR x pvalue`` between the two parts the
    statistic compared (:func:`split_pvalue`), recursively. Merge (Otava's): re-test each change
    between its neighbours (:func:`segments_pvalue`; ``pooled``: the variance of all segments);
    drop the weakest above ``pvalue``, or, when all pass, the smallest change (relative change of
    the two sides' medians) under ``min_change_pct`` percent; repeat. ``adjust=False`` tests the
    raw p-values, as Otava does; ``log=False, pooled=False`` is the method before issue 47 (both
    for the study ``benchmarks/changepoint_study.py``). Raises ``ValueError`` for a ``pvalue``
    outside (0, 1) or ``min_runs`` < 2."""
    import numpy as np

    _check(pvalue, min_runs)
    v = np.asarray(values, dtype=np.float64)
    x = np.log(v) if log and v.size and bool(np.all(v > 0)) else v
    first = min(0.5, pvalue * SPLIT_LEVEL_FACTOR)
    found: list[int] = []
    stack = [(0, int(x.size))]
    while stack:
        lo, hi = stack.pop()
        cand = energy_candidate(x[lo:hi], min_runs)
        if cand is None:
            continue
        tau = lo + cand[0]
        if split_pvalue(x, lo, tau, hi, min_runs, end=lo + cand[1], adjust=adjust) <= first:
            found.append(tau)
            stack += [(lo, tau), (tau, hi)]
    found.sort()
    while found:
        bounds = [0, *found, int(x.size)]
        ps = [segments_pvalue(x, bounds, i, min_runs, adjust, pooled) for i in range(len(found))]
        weakest = max(range(len(found)), key=lambda i: ps[i])
        if ps[weakest] <= pvalue:
            if min_change_pct <= 0:
                return list(zip(found, ps))
            sizes = [abs(float(np.median(v[bounds[i + 1]:bounds[i + 2]])) / float(np.median(v[bounds[i]:bounds[i + 1]]))
                         - 1.0) * 100.0 for i in range(len(found))]
            weakest = min(range(len(found)), key=lambda i: sizes[i])
            if sizes[weakest] >= min_change_pct:
                return list(zip(found, ps))
        del found[weakest]
    return []


def run_series(rows: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str | None], list[RunPoint]]:
    """The rows of :meth:`pytest_gpuperf.storage.history.HistoryStore.series` (dicts in run order,
    oldest first; all benchmarks) as one series per ``(benchmark, device_key)``, in the order first
    seen: a :class:`RunPoint` per run (rows of one run and key pooled). A row's values are its
    ``process_medians_ms``, else ``(median_ms,)``; non-finite values are left out and a row left
    with none is skipped."""
    pooled: dict[tuple[str, str | None], dict[str, tuple[str | None, str | None, list[float]]]] = {}
    for r in rows:
        pm = r.get("process_medians_ms") or (r.get("median_ms"),)
        try:
            usable = all(map(math.isfinite, pm))  # the usual case, at C speed: 100,000 rows in a blink
        except TypeError:
            usable = False
        if not usable:
            pm = [float(v) for v in pm if isinstance(v, (int, float)) and math.isfinite(v)]
            if not pm:
                continue
        elif not isinstance(pm[0], float):
            pm = [float(v) for v in pm]
        runs = pooled.setdefault((str(r["benchmark"]), r.get("device_key")), {})
        entry = runs.get(r.get("run_id"))
        if entry is None:
            runs[r.get("run_id")] = (r.get("commit"), r.get("created_utc"), list(pm))
        else:
            entry[2].extend(pm)
    return {key: [RunPoint(str(run_id), commit, created, tuple(vals), _median(vals))
                  for run_id, (commit, created, vals) in runs.items()]
            for key, runs in pooled.items()}


def _median(vals: Sequence[float]) -> float:
    s = sorted(vals)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


def series_change_points(benchmark: str, device_key: str | None, runs: Sequence[RunPoint], *,
                         pvalue: float = DEFAULT_PVALUE, min_runs: int = DEFAULT_MIN_RUNS,
                         min_change_pct: float = 0.0) -> list[ChangePoint]:
    """The :class:`ChangePoint` records of one series (``runs``: oldest first, see
    :func:`run_series`), by index; see :func:`detect` for the method and the errors raised."""
    found = detect([p.value_ms for p in runs], pvalue=pvalue, min_runs=min_runs, min_change_pct=min_change_pct)
    bounds = [0, *(i for i, _ in found), len(runs)]
    out = []
    for k, (i, p) in enumerate(found):
        before = [v for run in runs[bounds[k]:i] for v in run.process_medians_ms]
        after = [v for run in runs[i:bounds[k + 2]] for v in run.process_medians_ms]
        mb, ma = _median(before), _median(after)
        out.append(ChangePoint(
            benchmark=benchmark, device_key=device_key, index=i, before_commit=runs[i - 1].commit,
            after_commit=runs[i].commit, before_run=runs[i - 1].run_id, after_run=runs[i].run_id,
            median_before_ms=mb, median_after_ms=ma, change_pct=(ma / mb - 1.0) * 100.0 if mb else math.inf,
            pvalue=p, runs_before=i - bounds[k], runs_after=bounds[k + 2] - i))
    return out


def find_change_points(rows: Iterable[Mapping[str, Any]], *, pvalue: float = DEFAULT_PVALUE,
                       min_runs: int = DEFAULT_MIN_RUNS, min_change_pct: float = 0.0) -> list[ChangePoint]:
    """The change points of every ``(benchmark, device_key)`` series in ``rows`` (the dicts of
    :meth:`pytest_gpuperf.storage.history.HistoryStore.series`, run order, oldest first), grouped
    per series in the order first seen, by index within one. A series with no significant change
    contributes none. Raises ``ValueError`` for a ``pvalue`` outside (0, 1) or ``min_runs`` < 2."""
    _check(pvalue, min_runs)
    out: list[ChangePoint] = []
    for (bench, key), runs in run_series(rows).items():
        out.extend(series_change_points(bench, key, runs, pvalue=pvalue, min_runs=min_runs,
                                        min_change_pct=min_change_pct))
    return out
