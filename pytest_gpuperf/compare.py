"""The regression decision: current samples vs baseline samples (pure: numpy and scipy only).

The rule (all in log space, so a 2x slowdown and a 2x speedup are mirror images):

* **regressed** when all three hold: the one-sided Mann–Whitney U test (current slower) gives
  p < ``alpha``; the Hodges–Lehmann ratio (the median of all pairwise current/baseline ratios)
  exceeds ``1 + threshold``; and the lower bound of a seeded 99% percentile-bootstrap confidence
  interval of the ratio of medians exceeds 1.
* **improved** is the mirror image: Mann–Whitney U (current faster) p < ``alpha``, Hodges–Lehmann
  ratio below ``1 / (1 + threshold)``, and the bootstrap CI's upper bound below 1.
* **unchanged** otherwise; when the difference is statistically significant but smaller than the
  threshold the comparison carries a note saying so.
* **no-baseline** when nothing is stored for the benchmark.

Sources: Mann & Whitney (1947); Hodges & Lehmann (1963) shift estimator; Efron's percentile
bootstrap via ``scipy.stats.bootstrap``. The effect floor follows asv's ``factor`` and criterion's
noise threshold (see the project notes on reference tools).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import Sequence

import numpy as np

from .units import format_bytes, format_ms, format_pct, format_ratio

#: Seed of the bootstrap, fixed so a verdict is reproducible from the stored samples alone.
BOOTSTRAP_SEED = 20251121
#: Bootstrap resamples for the CI of the ratio of medians.
BOOTSTRAP_RESAMPLES = 2000
#: Confidence level of the bootstrap CI of the ratio of medians.
RATIO_CONFIDENCE = 0.99
#: Each side is thinned to at most this many samples before the pairwise Hodges–Lehmann estimate
#: (n*m pairwise ratios) and the bootstrap, bounding the decision's time and memory.
MAX_DECISION_SAMPLES = 2000


class Verdict(str, Enum):
    """Outcome of comparing a benchmark with its baseline. Only ``REGRESSED`` fails a test."""

    REGRESSED = "regressed"
    IMPROVED = "improved"
    UNCHANGED = "unchanged"
    NO_BASELINE = "no-baseline"

    def __str__(self) -> str:  # pragma: no cover - trivial
        return self.value


@dataclass(frozen=True)
class Comparison:
    """Verdict plus the evidence behind it.

    ``ratio`` is the Hodges–Lehmann estimate of current/baseline time (dimensionless; > 1 means
    slower); ``ratio_ci`` the 99% percentile-bootstrap CI of median(current)/median(baseline);
    ``p_slower``/``p_faster`` the one-sided Mann–Whitney U p-values. Times are in ms.
    """

    verdict: Verdict
    benchmark_id: str
    current_median_ms: float
    baseline_median_ms: float | None = None
    ratio: float | None = None
    ratio_ci: tuple[float, float] | None = None
    p_slower: float | None = None
    p_faster: float | None = None
    threshold: float = 0.05
    alpha: float = 0.01
    baseline_file: str | None = None
    note: str | None = None

    @property
    def failed(self) -> bool:
        """True when this comparison fails the test (a regression)."""
        return self.verdict is Verdict.REGRESSED

    def message(self) -> str:
        """One paragraph saying what was compared and why the verdict is what it is."""
        if self.verdict is Verdict.NO_BASELINE:
            where = f" in {self.baseline_file}" if self.baseline_file else ""
            return (
                f"{self.benchmark_id}: no baseline{where}; record one with "
                f"`pytest --gpuperf-update-baselines`"
            )
        assert self.ratio is not None and self.baseline_median_ms is not None
        ci = (
            f" (99% CI {format_ratio(self.ratio_ci[0])}-{format_ratio(self.ratio_ci[1])})"
            if self.ratio_ci
            else ""
        )
        p = self.p_slower if self.ratio >= 1 else self.p_faster
        head = {
            Verdict.REGRESSED: "performance regression",
            Verdict.IMPROVED: "performance improvement",
            Verdict.UNCHANGED: "no significant change",
        }[self.verdict]
        text = (
            f"{head} in {self.benchmark_id}: median {format_ms(self.baseline_median_ms)} -> "
            f"{format_ms(self.current_median_ms)}, ratio {format_ratio(self.ratio)} "
            f"({format_pct(self.ratio - 1)}){ci}, Mann-Whitney U p={_fmt_p(p)} "
            f"(alpha {self.alpha:g}), threshold +{self.threshold * 100:g}%"
        )
        if self.baseline_file:
            text += f"; baseline: {self.baseline_file}"
        if self.note:
            text += f"; {self.note}"
        return text


def _fmt_p(p: float | None) -> str:
    return "-" if p is None else f"{p:.2g}"


def _log_samples(samples_ms: Sequence[float], what: str) -> np.ndarray:
    x = np.asarray(samples_ms, dtype=np.float64)
    if x.ndim != 1 or x.size == 0:
        raise ValueError(f"{what} samples must be a non-empty 1-D sequence")
    if not np.all(np.isfinite(x)) or np.any(x <= 0):
        raise ValueError(f"{what} samples must be finite and positive (ms)")
    if x.size > MAX_DECISION_SAMPLES:
        idx = np.unique(np.round(np.linspace(0, x.size - 1, MAX_DECISION_SAMPLES)).astype(int))
        x = x[idx]
    return np.log(x)


def hodges_lehmann_ratio(current_ms: Sequence[float], baseline_ms: Sequence[float]) -> float:
    """Hodges–Lehmann ratio: exp(median over all pairs (i, j) of log c_i - log b_j).

    A robust estimate of how many times slower current is than baseline (dimensionless).
    Raises ``ValueError`` on empty or non-positive samples.
    """
    lc = _log_samples(current_ms, "current")
    lb = _log_samples(baseline_ms, "baseline")
    return float(np.exp(np.median(np.subtract.outer(lc, lb))))


def median_ratio_ci(
    current_ms: Sequence[float],
    baseline_ms: Sequence[float],
    confidence: float = RATIO_CONFIDENCE,
    seed: int = BOOTSTRAP_SEED,
    n_resamples: int = BOOTSTRAP_RESAMPLES,
) -> tuple[float, float] | None:
    """Seeded percentile-bootstrap CI of median(current) / median(baseline) (dimensionless).

    Resamples each side independently (``scipy.stats.bootstrap``, ``method="percentile"``).
    Returns ``None`` when either side has fewer than 2 samples.
    """
    lc = _log_samples(current_ms, "current")
    lb = _log_samples(baseline_ms, "baseline")
    if lc.size < 2 or lb.size < 2:
        return None
    from scipy import stats as sps

    def stat(c: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.median(c, axis=axis) - np.median(b, axis=axis)

    res = sps.bootstrap(
        (lc, lb),
        stat,
        n_resamples=n_resamples,
        batch=200,
        vectorized=True,
        paired=False,
        confidence_level=confidence,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    lo, hi = res.confidence_interval.low, res.confidence_interval.high
    return (float(math.exp(lo)), float(math.exp(hi)))


def decide(
    current_ms: Sequence[float],
    baseline_ms: Sequence[float] | None,
    *,
    threshold: float = 0.05,
    alpha: float = 0.01,
    benchmark_id: str = "benchmark",
    baseline_file: str | None = None,
) -> Comparison:
    """Compare per-call times of the current run (ms) with the baseline's (ms).

    ``threshold`` is the smallest relative slowdown that may fail a test (0.05 = 5%);
    ``alpha`` the significance level of the one-sided Mann–Whitney U tests. Returns a
    :class:`Comparison`; never raises for a regression (the caller decides how to fail).
    Raises ``ValueError`` for empty, non-finite or non-positive samples or bad options.
    """
    if not threshold >= 0:
        raise ValueError(f"threshold must be >= 0, got {threshold!r}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    cur = np.asarray(current_ms, dtype=np.float64)
    _log_samples(cur, "current")
    cur_med = float(np.median(cur))
    if baseline_ms is None or len(baseline_ms) == 0:
        return Comparison(
            verdict=Verdict.NO_BASELINE,
            benchmark_id=benchmark_id,
            current_median_ms=cur_med,
            threshold=threshold,
            alpha=alpha,
            baseline_file=baseline_file,
        )
    base = np.asarray(baseline_ms, dtype=np.float64)
    lc, lb = _log_samples(cur, "current"), _log_samples(base, "baseline")
    base_med = float(np.median(base))
    ratio = float(np.exp(np.median(np.subtract.outer(lc, lb))))
    common = dict(
        benchmark_id=benchmark_id,
        current_median_ms=cur_med,
        baseline_median_ms=base_med,
        ratio=ratio,
        threshold=threshold,
        alpha=alpha,
        baseline_file=baseline_file,
    )
    if lc.size < 2 or lb.size < 2:
        return Comparison(
            verdict=Verdict.UNCHANGED,
            note="too few samples for a statistical test (run with --gpuperf)",
            **common,
        )
    from scipy import stats as sps

    p_slower = float(sps.mannwhitneyu(lc, lb, alternative="greater").pvalue)
    p_faster = float(sps.mannwhitneyu(lc, lb, alternative="less").pvalue)
    ci = median_ratio_ci(cur, base)
    assert ci is not None
    upper_gate, lower_gate = 1.0 + threshold, 1.0 / (1.0 + threshold)
    verdict, note = Verdict.UNCHANGED, None
    if p_slower < alpha and ratio > upper_gate and ci[0] > 1.0:
        verdict = Verdict.REGRESSED
    elif p_faster < alpha and ratio < lower_gate and ci[1] < 1.0:
        verdict = Verdict.IMPROVED
    elif (p_slower < alpha and ci[0] > 1.0) or (p_faster < alpha and ci[1] < 1.0):
        note = (
            f"significant but within the threshold: {format_pct(ratio - 1)} is inside "
            f"±{threshold * 100:g}%"
        )
    elif p_slower < alpha or p_faster < alpha:
        note = "rank test significant but the CI of the ratio includes 1"
    return Comparison(
        verdict=verdict,
        ratio_ci=ci,
        p_slower=p_slower,
        p_faster=p_faster,
        note=note,
        **common,
    )


# ----------------------------------------------------------------------------- memory

#: Absolute slack added to the relative memory threshold (bytes): allocator rounding and small
#: workspace changes below this never fail a test.
MEMORY_SLACK_BYTES = 1 << 20


@dataclass(frozen=True)
class MemoryComparison:
    """Peak memory of the current run vs the baseline's, and vs an optional hard budget (bytes).

    ``verdict`` is regressed / improved / unchanged / no-baseline; ``over_budget`` is True when the
    peak exceeds ``max_memory_bytes``. Either fails the test.
    """

    verdict: Verdict
    benchmark_id: str
    current_bytes: int
    baseline_bytes: int | None = None
    threshold: float = 0.02
    max_memory_bytes: int | None = None
    device: str = ""
    baseline_file: str | None = None
    snapshot: str | None = None  # CUDA memory-snapshot text (path, largest blocks), when recorded

    @property
    def over_budget(self) -> bool:
        return self.max_memory_bytes is not None and self.current_bytes > self.max_memory_bytes

    @property
    def change(self) -> float | None:
        """Relative change of the peak, current / baseline - 1 (None without a baseline or at 0)."""
        if not self.baseline_bytes:
            return None
        return self.current_bytes / self.baseline_bytes - 1.0

    @property
    def failed(self) -> bool:
        return self.verdict is Verdict.REGRESSED or self.over_budget

    def messages(self) -> list[str]:
        """Failure messages (empty when the comparison passes)."""
        out = []
        if self.verdict is Verdict.REGRESSED:
            assert self.baseline_bytes is not None
            change = format_pct(self.change) if self.change is not None else "baseline allocated nothing"
            out.append(
                f"memory regression in {self.benchmark_id}: {format_bytes(self.baseline_bytes)} -> "
                f"{format_bytes(self.current_bytes)} ({change}), allowed "
                f"+{self.threshold * 100:g}% + {format_bytes(MEMORY_SLACK_BYTES)}"
                + (f"; baseline: {self.baseline_file}" if self.baseline_file else "")
            )
        if self.over_budget:
            assert self.max_memory_bytes is not None
            out.append(
                f"memory budget exceeded in {self.benchmark_id}: peak {format_bytes(self.current_bytes)} > "
                f"max_memory {format_bytes(self.max_memory_bytes)} on {self.device}"
            )
        if out and self.snapshot:
            out.append(self.snapshot)
        return out


def decide_memory(
    current_bytes: int,
    baseline_bytes: int | None,
    *,
    threshold: float = 0.02,
    max_memory_bytes: int | None = None,
    benchmark_id: str = "benchmark",
    device: str = "",
    baseline_file: str | None = None,
    slack_bytes: int = MEMORY_SLACK_BYTES,
) -> MemoryComparison:
    """Compare a peak-memory figure (bytes) with the baseline's.

    Peak memory of a fixed program on a fixed allocator is deterministic, so no statistics are
    needed: **regressed** when ``current > baseline * (1 + threshold) + slack_bytes``, **improved**
    when ``current < baseline * (1 - threshold) - slack_bytes``, else **unchanged**. Raises
    ``ValueError`` for negative sizes or threshold.
    """
    if current_bytes < 0 or (baseline_bytes is not None and baseline_bytes < 0):
        raise ValueError("memory sizes must be >= 0 bytes")
    if not threshold >= 0:  # also rejects NaN
        raise ValueError(f"memory threshold must be >= 0, got {threshold!r}")
    if max_memory_bytes is not None and max_memory_bytes < 0:
        raise ValueError(f"max_memory must be >= 0 bytes, got {max_memory_bytes!r}")
    if baseline_bytes is None:
        verdict = Verdict.NO_BASELINE
    elif current_bytes > baseline_bytes * (1 + threshold) + slack_bytes:
        verdict = Verdict.REGRESSED
    elif current_bytes < baseline_bytes * (1 - threshold) - slack_bytes:
        verdict = Verdict.IMPROVED
    else:
        verdict = Verdict.UNCHANGED
    return MemoryComparison(
        verdict=verdict, benchmark_id=benchmark_id, current_bytes=int(current_bytes),
        baseline_bytes=None if baseline_bytes is None else int(baseline_bytes), threshold=threshold,
        max_memory_bytes=max_memory_bytes, device=device, baseline_file=baseline_file,
    )
