"""Change points in a benchmark's history (issue 34): where a series of runs stepped up or down.

Interface stated first so the ``gpuperf changes`` command and the dashboard share it; the method is
e-divisive means with a significance test (Matteson & James 2014, "A Nonparametric Approach for
Multiple Change Point Analysis of Multivariate Data", JASA 109(505); as Apache Otava / Hunter
implement it: Fleming et al. 2023, "Hunter: Using Change Point Detection to Hunt for Performance
Regressions", ICPE).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ChangePoint:
    """One change in one benchmark's series (one device key, one branch).

    ``index``: the position, in the series' runs (oldest first, 0-based), of the first run after
    the change; ``before_commit`` / ``after_commit``: the commits (full shas, None when a run has
    none) of the last run before and the first run after; ``before_run`` / ``after_run``: their
    run ids; ``median_before_ms`` / ``median_after_ms``: the median of the process medians (ms) of
    the segment before and the segment after (each bounded by the neighbouring change points);
    ``change_pct``: ``(after / before - 1) * 100``; ``pvalue``: the significance test's p-value."""

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

    @property
    def slower(self) -> bool:
        """True when the series got slower at this change (``median_after_ms > median_before_ms``)."""
        return self.median_after_ms > self.median_before_ms
