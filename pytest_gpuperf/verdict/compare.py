"""The regression decision: current samples vs a baseline history (pure: numpy and scipy only).

All in log space, so a 2x slowdown and a 2x speedup are mirror images. Inputs: the current
run's per-call times, the newest baseline run's per-call times, and the medians of the last K
stored baseline runs (the history). With T the effect floor (below):

* **regressed** when all hold: the one-sided Mann–Whitney U test (current slower) gives p < ``alpha``;
  the Hodges–Lehmann ratio (median of all pairwise current/baseline ratios) exceeds ``1 + T``;
  the lower bound of a seeded 99% percentile-bootstrap CI of the ratio of medians exceeds 1; and,
  with at least 5 stored runs, the current median lies above the one-sided 99% Student-t
  prediction limit of the log run-medians.
* **improved** is the mirror image (ratio below ``1 / (1 + T)``, CI below 1, below the lower limit).
* **inconclusive** when the ratio's CI spans both 1 and ``1 + T``: the measurement is too imprecise
  to tell either way (passes with a warning; fails under ``--gpuperf-strict``); also when the CI
  lies above 1 and reaches past ``1 + T`` but the test's p is not under ``alpha`` (the two disagree
  on heavy-tailed blocks: an A/B of a +20% slowdown read ``1.209x [1.078x, 1.391x]``, signed-rank
  p=0.037) or the ratio itself is not above ``1 + T``: slower, perhaps by more than T, so never
  "unchanged".
* **unchanged** otherwise, with a note when the shift is significant but inside the floor.
* **no-baseline** when nothing is stored.

**Run-to-run noise.** Samples inside one run share that run's offset (clock state, temperature,
neighbours), so a test on samples alone over-states confidence (Kalibera & Jones, 2013). With
at least 3 stored runs the effect floor becomes ``T = max(threshold, exp(3 * s_run) - 1)``, s_run the
standard deviation of the log run-medians, and the baseline samples are re-centred on the
median of the stored run-medians (their shape is the newest run's, their level the history's).
With fewer runs, ``T = threshold`` and the newest run is the reference.

**Confirmation.** When a first measurement says regressed, the plugin measures again from a fresh
warmup and calls :func:`decide` once more with the re-measures (``confirmation_groups``): the
first measurement and each re-measure are the groups of a two-stage bootstrap CI
(:func:`hierarchical_log_ci`), so a one-off slow measurement widens the CI instead of deciding
alone; the result says whether the regression was confirmed (Pinpoint's "measure more" step).

**A CI wholly beyond the floor** (above 1 + T, or below 1/(1 + T)) is never "unchanged": it is
regressed (improved), or inconclusive when the history's prediction limit holds it back.

**Process-level replicates.** With several worker processes (``--gpuperf-processes``),
:func:`decide_replicates` decides over the processes' medians instead (a Student t,
:func:`process_level_test`): rounds of one process are one replicate.

Sources: Mann & Whitney (1947); Hodges & Lehmann (1963); Efron's percentile bootstrap via
``scipy.stats.bootstrap``; the prediction interval for a new observation of a normal sample
(as Bencher uses); asv's ``factor`` and criterion's noise threshold for the effect floor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import Any, Sequence

import numpy as np

from pytest_gpuperf.core.options import BenchOptions
from pytest_gpuperf.core.units import format_pct, format_ratio
from pytest_gpuperf.verdict.advice import Advice, merge_advice
from pytest_gpuperf.verdict.escalation import NONINFERIORITY, noninferior_upper, smallest_detectable
from pytest_gpuperf.verdict.estimate import OTHERS_AGREE, SLOW_PROCESS, run_estimate_ms, set_aside_slow  # noqa: F401

#: Seed of the bootstrap, fixed so a verdict is reproducible from the stored samples alone.
BOOTSTRAP_SEED = 20251121
#: Bootstrap resamples for the CI of the ratio of medians.
BOOTSTRAP_RESAMPLES = 2000
#: Confidence level of the bootstrap CI of the ratio of medians.
RATIO_CONFIDENCE = 0.99
#: Each side is thinned to at most this many samples before the pairwise Hodges–Lehmann estimate
#: (n*m pairwise ratios) and the bootstrap, bounding the decision's time and memory.
MAX_DECISION_SAMPLES = 2000
#: Stored runs needed before the effect floor uses the run-to-run spread.
MIN_RUNS_FOR_FLOOR = 3
#: Multiple of the run-to-run SD (log run-medians) that the effect floor is at least.
FLOOR_SDS = 3.0
#: Stored runs needed before the prediction limit is also required.
MIN_RUNS_FOR_PREDICTION = 5
#: Defaults of the gate options, from the one place options are defined.
DEFAULT_THRESHOLD = BenchOptions.threshold
DEFAULT_ALPHA = BenchOptions.alpha
#: Peak-memory growth that fails a test by default (BenchOptions.memory_threshold, stated once there).
DEFAULT_MEMORY_THRESHOLD = BenchOptions.memory_threshold
#: One-sided confidence of the upper bound that decides "not slower by more than T" over process
#: medians (:func:`decide_replicates`): the non-inferiority question, at the level of a two-sided 95%
#: CI's upper bound, as non-inferiority trials read it (ICH E9, 1998; FDA, *Non-Inferiority Clinical
#: Trials*, 2016). It decides only "unchanged" where the 99% CI spans 1 and 1 + T; a regression still
#: needs the 99% evidence. The bound is :func:`pytest_gpuperf.verdict.escalation.noninferior_upper`'s,
#: which the escalation's predictions use too.
NONINFERIORITY_CONFIDENCE = NONINFERIORITY
#: How the note of a CI that spans both 1 and 1 + T ends (:func:`shift_verdict`; a later step
#: that decides the verdict drops that part: :func:`pytest_gpuperf.verdict.moderation.moderate`).
NOT_ENOUGH_EVIDENCE = "not enough evidence either way"

#: One-sided confidence of the Student-t prediction limit of the log run-medians.
PREDICTION_CONFIDENCE = 0.99


class Verdict(str, Enum):
    """Outcome of comparing a benchmark with its baseline. ``REGRESSED`` fails a test;
    ``INCONCLUSIVE`` fails it only in strict mode."""

    REGRESSED = "regressed"
    IMPROVED = "improved"
    UNCHANGED = "unchanged"
    INCONCLUSIVE = "inconclusive"
    NO_BASELINE = "no-baseline"

    def __str__(self) -> str:  # pragma: no cover - trivial
        return self.value


@dataclass(frozen=True)
class ABEvidence:
    """The evidence of an A/B comparison (``--gpuperf-ab``, the A/B confirmation;
    :mod:`pytest_gpuperf.verdict.paired`): ``ref`` names the revision (``"origin/main (3f2a1c9)"``,
    side A; the working tree is side B), ``pairs`` the number of paired blocks, ``process_ratios``
    the median B/A ratio per pair of worker processes, ``blocks`` every block as ``(side, process
    pair, position, median ms)`` (the raw evidence, in schedule order; None until recorded)."""

    ref: str
    pairs: int | None = None
    process_ratios: tuple[float, ...] | None = None
    blocks: tuple[tuple[str, int, int, float], ...] | None = None


@dataclass(frozen=True)
class Normalization:
    """How a comparison's samples were normalized before deciding (``--gpuperf-normalize``):
    ``by`` names the divisor (``"copy x1.072"``: a reference workload's drift; ``"probe compute:
    ... per round, median x1.290, Spearman rho 0.8"``: the interleaved probe) and ``raw_ratio`` is
    the Hodges–Lehmann ratio of the samples before normalization."""

    by: str
    raw_ratio: float


@dataclass(frozen=True)
class Comparison:
    """Verdict plus the evidence behind it.

    ``ratio`` is the Hodges–Lehmann estimate of current/baseline time (> 1 means slower; the
    estimate the gate uses); ``median_ratio`` is median(current)/``baseline_median_ms``, the
    estimate whose 99% percentile-bootstrap CI ``ratio_ci`` is (the two can differ: a CI is only
    ever printed next to ``median_ratio``). ``baseline_median_ms`` is the centre of the stored
    history (median of the stored run medians) with 3+ runs, else the newest run's median;
    ``p_slower``/``p_faster`` the one-sided Mann–Whitney U p-values. ``floor`` is the effect floor
    T actually used (>= ``threshold``), ``runs`` the number of stored baseline runs, ``run_sd``
    the SD of their log medians (None under 2 runs), ``prediction_limit`` the upper 99%
    prediction limit as a ratio to the history's centre (None under 5 runs). ``confirmed`` is
    None when no re-measure happened, else whether the pooled re-measure kept the regression.
    An A/B comparison carries its :class:`ABEvidence` in ``ab`` (None otherwise); its baseline is A
    (the revision), its current B (the working tree) and ``runs`` the number of process pairs.
    ``normalization`` (:class:`Normalization`, None when the samples were not normalized) says how
    ``--gpuperf-normalize`` divided the samples (see :func:`pytest_gpuperf.verdict.gate.judge`) and
    the ratio before that. The JSON form (:func:`pytest_gpuperf.reporting.report.comparison_dict`)
    keeps both flat, under the keys ``ab_ref``, ``ab_pairs``, ``ab_process_ratios``, ``ab_blocks``,
    ``normalized_by`` and ``raw_ratio``. ``machine_ratio`` is the interleaved probe's
    median now / its stored level (> 1: the machine is slower; None without a probe on both
    sides) and :attr:`machine_differs` True when that turned a regression into an inconclusive
    verdict ("machine differs"). ``ab_confirmation``: where an A/B against the baselines' commit
    re-measured a stored-baseline verdict (a regression to confirm, an inconclusive comparison to
    settle), what the stored comparison said and what the A/B made of it (None: no such A/B). Times in ms.

    ``note`` is the decision steps' short notes, without the command line; ``advice`` the
    :class:`~pytest_gpuperf.verdict.advice.Advice` codes of what the reader can do for a firmer
    verdict (strict mode, more worker processes...), which
    :func:`pytest_gpuperf.reporting.messages.comparison_note` words with the options' names.

    ``clock`` names the clock the verdict was decided on: ``"wall"`` or ``"cpu"`` (the calling
    thread's CPU time, :mod:`pytest_gpuperf.verdict.cputime`); None where the question did not
    arise (no baseline, CUDA events, a result stored before CPU time was read). With ``"cpu"``, the
    medians, ratio and CI are CPU time's. ``"ref"`` (A/B only): the wall clock read relative to the
    reference probe timed beside each round (:func:`pytest_gpuperf.verdict.gate.ab_with_reference`);
    its ratio and CI are that reading's, its medians the wall clock's.
    """

    verdict: Verdict
    benchmark_id: str
    current_median_ms: float
    baseline_median_ms: float | None = None
    ratio: float | None = None
    ratio_ci: tuple[float, float] | None = None
    p_slower: float | None = None
    p_faster: float | None = None
    threshold: float = DEFAULT_THRESHOLD
    alpha: float = DEFAULT_ALPHA
    baseline_file: str | None = None
    note: str | None = None
    floor: float | None = None
    runs: int = 1
    run_sd: float | None = None
    prediction_limit: float | None = None
    confirmed: bool | None = None
    normalization: Normalization | None = None
    median_ratio: float | None = None
    ab: ABEvidence | None = None
    machine_ratio: float | None = None
    processes: int | None = None
    baseline_processes: int | None = None
    resolution: float | None = None
    ab_confirmation: str | None = None
    advice: tuple[Advice, ...] = ()
    clock: str | None = None

    @property
    def shown_ratio(self) -> float | None:
        """The ratio every surface shows for this verdict, beside ``ratio_ci`` (issue 47: the
        message's first line, the tables, the JSON report's ``shown_ratio``, JUnit, the history): the
        estimator the CI belongs to. Over worker processes, ``ratio`` (the quotient of the two
        geometric means); in A/B, ``ratio`` (the Hodges-Lehmann estimate of B/A over the paired
        blocks); against a stored single-process baseline, ``median_ratio`` (current median /
        baseline median; the Hodges-Lehmann ``ratio`` the gate also tests is in the message's
        evidence). None without a baseline."""
        if self.ratio is None:
            return None
        if self.ab is not None or self.processes is not None:
            return self.ratio
        if self.median_ratio is not None:
            return self.median_ratio
        if self.baseline_median_ms:  # a report written before the field existed
            return self.current_median_ms / self.baseline_median_ms
        return self.ratio

    @property
    def machine_differs(self) -> bool:
        """True when the "machine differs" rule turned a regression into an inconclusive verdict
        (:func:`pytest_gpuperf.verdict.gate.machine_rule`): the one step that gives the advice
        :attr:`~pytest_gpuperf.verdict.advice.Advice.UPDATE_OR_AB`, so the advice says it."""
        return Advice.UPDATE_OR_AB in self.advice

    @property
    def cannot_fail(self) -> bool:
        """True when only a slowdown above :data:`UNDETECTABLE_SLOWDOWN` (+50%) could fail this
        benchmark: its effect floor or its process-level resolution is that wide (a noisy baseline)."""
        floor = self.resolution if self.resolution is not None else self.floor
        return floor is not None and floor > UNDETECTABLE_SLOWDOWN

    @property
    def failed(self) -> bool:
        """True when this comparison fails the test (a regression; see ``fails`` for strict mode)."""
        return self.verdict is Verdict.REGRESSED

    def fails(self, strict: bool = False) -> bool:
        """True when the test should fail: a regression, or (strict) an inconclusive result or a
        benchmark that cannot fail (:attr:`cannot_fail`)."""
        return self.verdict is Verdict.REGRESSED or (strict and (self.verdict is Verdict.INCONCLUSIVE
                                                                  or self.cannot_fail))


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


# ----------------------------------------------------------------------------- the steps of decide
# Each step is a small pure function (as asv's statistics.py keeps each test); decide() composes them.


def hodges_lehmann_ratio(current_ms: Sequence[float], baseline_ms: Sequence[float]) -> float:
    """Hodges–Lehmann ratio: exp(median over all pairs (i, j) of log c_i - log b_j).

    A robust estimate of how many times slower current is than baseline (dimensionless).
    Source: Hodges & Lehmann (1963), the shift estimator paired with the Mann–Whitney U test.
    Raises ``ValueError`` on empty or non-positive samples.
    """
    lc = _log_samples(current_ms, "current")
    lb = _log_samples(baseline_ms, "baseline")
    return float(np.exp(np.median(np.subtract.outer(lc, lb))))


def _bootstrap_log_ci(lc: np.ndarray, lb: np.ndarray, confidence: float, seed: int, n_resamples: int) -> tuple[float, float]:
    from scipy import stats as sps

    def stat(c: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.median(c, axis=axis) - np.median(b, axis=axis)

    res = sps.bootstrap(
        (lc, lb), stat, n_resamples=n_resamples, batch=200, vectorized=True, paired=False,
        confidence_level=confidence, method="percentile", rng=np.random.default_rng(seed),
    )
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def median_ratio_ci(
    current_ms: Sequence[float],
    baseline_ms: Sequence[float],
    confidence: float = RATIO_CONFIDENCE,
    seed: int = BOOTSTRAP_SEED,
    n_resamples: int = BOOTSTRAP_RESAMPLES,
) -> tuple[float, float] | None:
    """Seeded percentile-bootstrap CI of median(current) / median(baseline) (dimensionless).

    Resamples each side independently (``scipy.stats.bootstrap``, ``method="percentile"``; Efron's
    percentile bootstrap). Returns ``None`` when either side has fewer than 2 samples.
    """
    lc = _log_samples(current_ms, "current")
    lb = _log_samples(baseline_ms, "baseline")
    if lc.size < 2 or lb.size < 2:
        return None
    lo, hi = _bootstrap_log_ci(lc, lb, confidence, seed, n_resamples)
    return (math.exp(lo), math.exp(hi))


#: Samples drawn per group and resample in the two-stage bootstrap (each group is resampled to
#: this size, so every group weighs the same: it is the unit of replication).
GROUP_RESAMPLE_SIZE = 256


def _two_stage_draws(groups: Sequence[np.ndarray], rng: np.random.Generator, n_resamples: int) -> np.ndarray:
    """``(n_resamples, G * m)`` draws of a two-stage bootstrap: G groups drawn with replacement,
    then m values drawn with replacement inside each drawn group."""
    m = min(GROUP_RESAMPLE_SIZE, max(g.size for g in groups))
    table = np.stack([g[np.round(np.linspace(0, g.size - 1, m)).astype(int)] if g.size >= m
                      else g[np.arange(m) % g.size] for g in groups])  # (G, m), each group at size m
    G = len(groups)
    picked = rng.integers(0, G, size=(n_resamples, G))  # stage 1: groups
    inner = rng.integers(0, m, size=(n_resamples, G, m), dtype=np.int32)  # stage 2: values within each picked group
    return table[picked[:, :, None], inner].reshape(n_resamples, G * m)


def hierarchical_log_ci(
    groups: Sequence[Sequence[float]],
    baseline_groups: Sequence[Sequence[float]] | None = None,
    confidence: float = RATIO_CONFIDENCE,
    seed: int = BOOTSTRAP_SEED,
    n_resamples: int = BOOTSTRAP_RESAMPLES,
) -> tuple[float, float]:
    """Seeded two-stage (hierarchical) percentile-bootstrap CI of a median, for grouped data.

    ``groups``: values (already in log space) grouped by the unit that was replicated: one group
    per measurement, process or process pair. Each resample draws the groups with replacement,
    then values with replacement inside each drawn group, so the CI carries the spread *between*
    groups, which a bootstrap of the pooled values hides (pseudo-replication: values of one process
    share its speed mode). Without ``baseline_groups`` it is the CI of the median of the pooled
    draws; with them, of median(groups) - median(baseline_groups) (a log ratio). Source: Davison &
    Hinkley, *Bootstrap Methods and their Application* (1997), sec. 3.8 (hierarchical data);
    Saravanan et al., "Application of the hierarchical bootstrap to multi-level data in
    neuroscience" (2020). Raises ``ValueError`` for an empty group.
    """
    rng = np.random.default_rng(seed)
    cur = [np.asarray(g, dtype=np.float64) for g in groups]
    if not cur or any(g.size == 0 for g in cur):
        raise ValueError("every group needs at least one value")
    stat = np.median(_two_stage_draws(cur, rng, n_resamples), axis=1)
    if baseline_groups is not None:
        base = [np.asarray(g, dtype=np.float64) for g in baseline_groups]
        if not base or any(g.size == 0 for g in base):
            raise ValueError("every baseline group needs at least one value")
        stat = stat - np.median(_two_stage_draws(base, rng, n_resamples), axis=1)
    tail = (1 - confidence) / 2 * 100
    lo, hi = np.percentile(stat, [tail, 100 - tail])
    return float(lo), float(hi)


def rank_test(current_ms: Sequence[float], baseline_ms: Sequence[float]) -> tuple[float, float]:
    """One-sided Mann–Whitney U p-values ``(p_slower, p_faster)`` of current vs baseline times.

    ``p_slower`` tests "current is stochastically slower", ``p_faster`` the mirror image
    (``scipy.stats.mannwhitneyu``; Mann & Whitney, 1947). Needs >= 2 samples a side.
    """
    from scipy import stats as sps

    lc = _log_samples(current_ms, "current")
    lb = _log_samples(baseline_ms, "baseline")
    return (float(sps.mannwhitneyu(lc, lb, alternative="greater").pvalue),
            float(sps.mannwhitneyu(lc, lb, alternative="less").pvalue))


@dataclass(frozen=True)
class RunStats:
    """What the history says about run-to-run noise (log space)."""

    runs: int
    center: float | None  # median of log run-medians (>= 3 runs)
    sd: float | None  # SD of log run-medians (>= 2 runs)
    upper_limit: float | None  # one-sided 99% t prediction limit, log (>= 5 runs)
    lower_limit: float | None


def run_stats(run_medians_ms: Sequence[float] | None) -> RunStats:
    """Centre, spread and 99% prediction limits of stored run medians (ms), in log space.

    Prediction limit for a new run: mean ± t(0.99, k-1) · s · sqrt(1 + 1/k) (one-sided each),
    the Student-t prediction interval of a new observation (as Bencher uses).
    """
    if run_medians_ms is None or len(run_medians_ms) == 0:
        return RunStats(0, None, None, None, None)
    raw = np.asarray(run_medians_ms, dtype=np.float64)
    if not np.all(np.isfinite(raw)) or np.any(raw <= 0):
        raise ValueError("run medians must be finite and positive (ms)")
    x = np.log(raw)
    k = int(x.size)
    sd = float(np.std(x, ddof=1)) if k >= 2 else None
    center = float(np.median(x)) if k >= MIN_RUNS_FOR_FLOOR else None
    upper = lower = None
    if k >= MIN_RUNS_FOR_PREDICTION and sd is not None:
        from scipy import stats as sps

        half = float(sps.t.ppf(PREDICTION_CONFIDENCE, k - 1)) * sd * math.sqrt(1 + 1 / k)
        upper, lower = float(np.mean(x)) + half, float(np.mean(x)) - half
    return RunStats(k, center, sd, upper, lower)


def effect_floor(threshold: float, hist: RunStats) -> float:
    """The effect floor T: ``max(threshold, exp(3 * s_run) - 1)`` with >= 3 stored runs, else ``threshold``.

    An effect above run-to-run noise (asv's ``factor``, criterion's noise threshold); dimensionless.
    """
    if hist.runs >= MIN_RUNS_FOR_FLOOR and hist.sd is not None:
        return max(threshold, math.expm1(FLOOR_SDS * hist.sd))
    return threshold


def recentred_baseline(baseline_ms: Sequence[float], hist: RunStats) -> tuple[np.ndarray, float]:
    """The baseline samples (ms) to compare with, and their median (ms).

    With >= 3 stored runs the newest run's samples are moved (in log space) so that their median
    is the history's centre: their shape is the newest run's, their level the history's.
    """
    lb = _log_samples(baseline_ms, "baseline")
    if hist.center is not None:
        return np.exp(lb - float(np.median(lb)) + hist.center), math.exp(hist.center)
    return np.exp(lb), float(np.median(np.asarray(baseline_ms, dtype=np.float64)))


def within_prediction_limits(current_median_ms: float, hist: RunStats) -> tuple[bool, bool]:
    """``(above_upper, below_lower)``: is the current median beyond the history's 99% limits?

    Both are True when the history is too short (< 5 runs) for a prediction limit.
    """
    x = math.log(current_median_ms)
    return (hist.upper_limit is None or x > hist.upper_limit,
            hist.lower_limit is None or x < hist.lower_limit)


def shift_verdict(
    ratio: float,
    ci: tuple[float, float],
    p_slower: float,
    p_faster: float,
    *,
    floor: float,
    alpha: float,
    above_limit: bool = True,
    below_limit: bool = True,
    test: str = "rank test",
) -> tuple[Verdict, str | None]:
    """The verdict and its note from the evidence (pure; see the module doc for the rule).

    ``ratio`` is the Hodges–Lehmann ratio, ``ci`` the CI of the median ratio, ``floor`` the
    effect floor T (fraction), ``above_limit``/``below_limit`` from :func:`within_prediction_limits`;
    ``test``: the test that gave the p-values, as the note names it (``"rank test"``,
    ``"t test"`` over process medians, ``"signed-rank test"`` over paired blocks).
    """
    lo, hi = math.log(ci[0]), math.log(ci[1])
    up_gate, down_gate = math.log1p(floor), -math.log1p(floor)
    log_ratio = math.log(ratio)
    # A CI wholly beyond 1+T (or 1/(1+T)) is decisive on its own: never "unchanged".
    slower = p_slower < alpha and log_ratio > up_gate and lo > 0 or lo > up_gate
    faster = p_faster < alpha and log_ratio < down_gate and hi < 0 or hi < down_gate
    if slower and above_limit:
        return Verdict.REGRESSED, None
    if faster and below_limit:
        return Verdict.IMPROVED, None
    if lo > up_gate or hi < down_gate:
        return Verdict.INCONCLUSIVE, (
            f"the ratio's 99% CI {format_ratio(ci[0])}-{format_ratio(ci[1])} lies beyond the effect floor, but the "
            f"median is within the history's 99% prediction limit (run-to-run noise)"
        )
    if lo < 0 < hi and hi > up_gate:
        return Verdict.INCONCLUSIVE, (
            f"the ratio's 99% CI {format_ratio(ci[0])}-{format_ratio(ci[1])} spans both 1 and "
            f"1+T={format_ratio(1 + floor)}: {NOT_ENOUGH_EVIDENCE}"
        )
    if lo >= 0 and hi > up_gate and not slower:  # slower, perhaps by more than T: not "unchanged" (issue 45)
        but = (f"the {test} p={p_slower:.2g} is not under alpha {alpha:g}" if not p_slower < alpha
               else f"the ratio {format_ratio(ratio)} itself is not above 1+T")
        return Verdict.INCONCLUSIVE, (
            f"the ratio's 99% CI {format_ratio(ci[0])}-{format_ratio(ci[1])} lies above 1 and reaches past "
            f"1+T={format_ratio(1 + floor)}, but {but}: slower, perhaps by more than T; {NOT_ENOUGH_EVIDENCE}"
        )
    if slower:
        return Verdict.UNCHANGED, "above the effect floor but within the history's 99% prediction limit (run-to-run noise)"
    if faster:
        return Verdict.UNCHANGED, "beyond the effect floor but within the history's 99% prediction limit (run-to-run noise)"
    if (p_slower < alpha and lo > 0) or (p_faster < alpha and hi < 0):
        return Verdict.UNCHANGED, (
            f"significant but within the effect floor: {format_pct(ratio - 1)} is inside ±{floor * 100:.1f}%"
        )
    if p_slower < alpha or p_faster < alpha:
        return Verdict.UNCHANGED, f"{test} significant but the CI of the ratio includes 1"
    return Verdict.UNCHANGED, None


def decide(
    current_ms: Sequence[float],
    baseline_ms: Sequence[float] | None,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    alpha: float = DEFAULT_ALPHA,
    benchmark_id: str = "benchmark",
    baseline_file: str | None = None,
    run_medians_ms: Sequence[float] | None = None,
    confirmation_ms: Sequence[float] | None = None,
    confirmation_groups: Sequence[Sequence[float]] | None = None,
) -> Comparison:
    """Compare per-call times of the current run (ms) with the baseline (see the module doc).

    ``baseline_ms``: the newest stored run's per-call times (ms). ``run_medians_ms``: medians of
    the stored runs, oldest first, the newest included (None: a single-run baseline).
    ``confirmation_ms``: samples of a re-measure (``confirmation_groups``: of several, one
    sequence each); when given, the decision uses the pooled current + confirmation samples, its CI
    treats the first measurement and each re-measure as groups (:func:`hierarchical_log_ci`), and
    ``confirmed`` says whether a regression held.
    ``threshold`` is the smallest relative slowdown that may fail a test (0.05 = 5%); ``alpha``
    the significance level of the one-sided Mann–Whitney U tests. Pure and deterministic (seeded
    bootstrap). Raises ``ValueError`` for empty, non-finite or non-positive samples or bad options.
    Prefer :func:`pytest_gpuperf.verdict.gate.judge`, which adds confirmation, normalization and telemetry.
    """
    if not threshold >= 0:
        raise ValueError(f"threshold must be >= 0, got {threshold!r}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    _log_samples(current_ms, "current")
    cur = np.asarray(current_ms, dtype=np.float64)
    if confirmation_groups is not None:
        confirmation_groups = [list(g) for g in confirmation_groups if len(g)]
        confirmation_ms = [v for g in confirmation_groups for v in g]
    elif confirmation_ms is not None:
        confirmation_groups = [list(confirmation_ms)]
    if confirmation_ms is not None:
        _log_samples(confirmation_ms, "confirmation")
        cur = np.concatenate([cur, np.asarray(confirmation_ms, dtype=np.float64)])
    cur_med = float(np.median(cur))
    common: dict = dict(benchmark_id=benchmark_id, current_median_ms=cur_med, threshold=threshold,
                        alpha=alpha, baseline_file=baseline_file)
    if baseline_ms is None or len(baseline_ms) == 0:
        return Comparison(verdict=Verdict.NO_BASELINE, runs=0, **common)
    hist = run_stats(run_medians_ms)
    base, base_med = recentred_baseline(baseline_ms, hist)
    floor = effect_floor(threshold, hist)
    common.update(
        baseline_median_ms=base_med, ratio=hodges_lehmann_ratio(cur, base), median_ratio=cur_med / base_med,
        floor=floor,
        runs=max(1, hist.runs), run_sd=hist.sd,
        prediction_limit=(math.exp(hist.upper_limit - hist.center)
                          if hist.upper_limit is not None and hist.center is not None else None),
    )
    if cur.size < 2 or base.size < 2:
        return Comparison(verdict=Verdict.UNCHANGED, note="too few samples for a statistical test",
                          advice=(Advice.RUN_MEASURED,), **common)
    p_slower, p_faster = rank_test(cur, base)
    if confirmation_ms is not None:
        # the first measurement and the re-measure are two groups (each from its own warmup): the CI
        # carries the difference between them, so a one-off slow measurement cannot decide alone
        assert confirmation_groups is not None
        lo, hi = hierarchical_log_ci([_log_samples(current_ms, "current")]
                                     + [_log_samples(g, "confirmation") for g in confirmation_groups],
                                     [_log_samples(base, "baseline")])
        ci = (math.exp(lo), math.exp(hi))
    else:
        ci = median_ratio_ci(cur, base)
    assert ci is not None
    above, below = within_prediction_limits(float(np.exp(np.median(_log_samples(cur, "current")))), hist)
    verdict, note = shift_verdict(common["ratio"], ci, p_slower, p_faster, floor=floor, alpha=alpha,
                                  above_limit=above, below_limit=below)
    return Comparison(verdict=verdict, ratio_ci=ci, p_slower=p_slower, p_faster=p_faster, note=note,
                      confirmed=(verdict is Verdict.REGRESSED) if confirmation_ms is not None else None,
                      **common)


#: A benchmark whose decision cannot fail a slowdown below this (fraction) says so in the summary
#: and fails under ``--gpuperf-strict`` (a +50% slowdown that passes is no test).
UNDETECTABLE_SLOWDOWN = 0.5


def process_level_test(current_medians_ms: Sequence[float], baseline_medians_ms: Sequence[float],
                       confidence: float = RATIO_CONFIDENCE) -> tuple[float, tuple[float, float], float, float, int, float]:
    """Student-t comparison of per-process medians (ms): ``(ratio, ci, p_slower, p_faster, df, sd)``.

    Each worker process is one replicate (pyperf's and JMH's forks; Kalibera & Jones, 2013: repeat
    at the level where the variance is): with c_i, b_j the log medians of the current and the
    baseline processes, ``ratio`` = exp(mean c - mean b) (the ratio of geometric means), ``sd`` the
    pooled SD of the log medians around their side's mean (df = P + Q - 2; a side with one process
    adds no degree of freedom), ``ci`` the two-sided ``confidence`` t interval of the ratio and the
    p-values one-sided Student-t tests. Raises ``ValueError`` without a degree of freedom (one
    process on both sides) or for non-positive medians.
    """
    from scipy import stats as sps

    c = np.log(np.asarray(current_medians_ms, dtype=np.float64))
    b = np.log(np.asarray(baseline_medians_ms, dtype=np.float64))
    if c.size == 0 or b.size == 0 or not (np.all(np.isfinite(c)) and np.all(np.isfinite(b))):
        raise ValueError("process medians must be finite and positive (ms)")
    df = int(c.size + b.size - 2)
    if df < 1:
        raise ValueError("a process-level test needs two processes on at least one side")
    ss = float(np.sum((c - c.mean()) ** 2) + np.sum((b - b.mean()) ** 2))
    sd = math.sqrt(ss / df)
    se = sd * math.sqrt(1 / c.size + 1 / b.size)
    d = float(c.mean() - b.mean())
    if se == 0:
        se = 1e-12  # identical processes (scripted timings): the difference is exact
    t = d / se
    half = float(sps.t.ppf(0.5 + confidence / 2, df)) * se
    return (math.exp(d), (math.exp(d - half), math.exp(d + half)), float(sps.t.sf(t, df)), float(sps.t.cdf(t, df)),
            df, sd)


#: How a note names the side whose process :func:`set_aside_slow` left out (:func:`processes_decided_on` reads it).
SET_ASIDE_SIDES = ("this run's", "the baseline's")


def processes_decided_on(c: Comparison) -> tuple[int | None, int | None]:
    """A replicated comparison's process counts the decision used, (this run's, the baseline's):
    ``processes`` and ``baseline_processes`` less one for each side :func:`decide_replicates` set a
    process aside on (its note names it)."""
    import re

    note = c.note or ""
    cur, base = (re.search(rf"{side} process \d+ of \d+ set aside", note) is not None for side in SET_ASIDE_SIDES)
    return (None if c.processes is None else c.processes - cur,
            None if c.baseline_processes is None else c.baseline_processes - base)


def _set_aside_note(side: str, index: int, medians: Sequence[float], kept: Sequence[float]) -> str:
    return (f"{side} process {index + 1} of {len(medians)} set aside: {medians[index] / float(np.median(kept)):.2f}x "
            f"the others' median, which agree within {OTHERS_AGREE:.0%} (a slow period of the machine; "
            "interference only slows)")


def untrusted_improvement(ratio: float) -> str:
    """The note of an improvement that :func:`decide_replicates` does not trust: it showed only once
    a slow process was set aside (:func:`set_aside_slow`), so the benchmark's processes ran at
    different speeds and the kept ones' agreement understates the spread between processes. On
    tensordict's suite (2026-11-29) unchanged code read ``improved`` 0.67x-0.75x in 3 of 28 A/A
    benchmark-runs this way: this run's two kept processes in one speed mode, the baseline's in a
    slower one, a third process of each slower still. A regression so decided is confirmed by an
    A/B anyway; an improvement is left inconclusive, for the A/B to settle where it runs."""
    return (f"faster ({format_ratio(ratio)}) only once a slow process was set aside: its processes ran at different "
            "speeds, so an improvement is not trusted from them (an A/B run against the baseline's commit decides it)")


def noninferior(decided: tuple[Verdict, str | None], ratio: float, ci: tuple[float, float], sd: float,
                processes: tuple[int, int], threshold: float) -> tuple[Verdict, str | None]:
    """The non-inferiority reading of a process-level verdict (:func:`decide_replicates`): an
    ``INCONCLUSIVE`` ``decided`` whose one-sided :data:`NONINFERIORITY_CONFIDENCE` upper bound
    (:func:`~pytest_gpuperf.verdict.escalation.noninferior_upper` of ``ratio``, the pooled SD ``sd``
    of the log process medians and the ``processes`` (current, baseline) decided on) lies under
    1 + ``threshold`` becomes ``UNCHANGED`` with a note naming that bound and the 99% CI ``ci``
    that spans both; any other verdict is returned as is."""
    if decided[0] is not Verdict.INCONCLUSIVE:
        return decided
    upper = noninferior_upper(ratio, sd, *processes)
    if not upper < 1 + threshold:
        return decided
    return Verdict.UNCHANGED, noninferior_note(threshold, upper, ci)


def noninferior_note(threshold: float, upper: float, ci: tuple[float, float], spread: str = "") -> str:
    """The note of an "unchanged" decided by non-inferiority (:func:`noninferior`,
    :func:`pytest_gpuperf.verdict.moderation.moderate`): the one-sided upper bound ``upper`` under
    1 + ``threshold``, the 99% CI ``ci`` that spans both, and ``spread``, how the bound's spread was
    read (empty: the benchmark's own)."""
    return (f"not slower by more than {threshold * 100:.1f}%: the one-sided {NONINFERIORITY_CONFIDENCE:.1%} upper bound "
            f"{format_ratio(upper)} is under 1+T={format_ratio(1 + threshold)}{spread} (non-inferiority; the 99% CI "
            f"{format_ratio(ci[0])}-{format_ratio(ci[1])} spans both)")


def decide_replicates(
    current_groups_ms: Sequence[Sequence[float]],
    baseline_medians_ms: Sequence[float] | None,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    alpha: float = DEFAULT_ALPHA,
    benchmark_id: str = "benchmark",
    baseline_file: str | None = None,
    baseline_runs: int = 1,
) -> Comparison:
    """The stored-baseline decision on process-level replicates (``--gpuperf-processes`` >= 2).

    ``current_groups_ms``: this run's per-call times (ms), one sequence per worker process;
    ``baseline_medians_ms``: the baseline's per-process medians (ms: the newest stored run's, or,
    for a baseline recorded one process per run, the stored runs' medians); ``baseline_runs`` the
    number of stored runs (reported). The evidence is :func:`process_level_test` over the process
    medians, never the pooled rounds (thousands of rounds of one process are one replicate), after
    each side's process disturbed by a slow period is set aside (:func:`set_aside_slow`; the note
    names it); the verdict is :func:`shift_verdict`'s with T = ``threshold``, read as non-inferiority
    (:func:`noninferior`: "slower by more than T?"). ``current_median_ms``
    and ``baseline_median_ms`` are the geometric means of the process medians decided on, so
    ``ratio`` is exactly their quotient. Raises ``ValueError`` for empty groups, bad options, or one process on both
    sides (no between-process spread to decide on: :func:`pytest_gpuperf.verdict.gate.judge_replicates`
    then decides on the samples).
    """
    if not threshold >= 0:
        raise ValueError(f"threshold must be >= 0, got {threshold!r}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    groups = [list(g) for g in current_groups_ms]
    if not groups or any(not g for g in groups):
        raise ValueError("every process needs at least one sample")
    for g in groups:
        _log_samples(g, "current")
    cur_all = [float(np.median(np.asarray(g, dtype=np.float64))) for g in groups]  # as a result's process_medians_ms
    cur_geo = run_estimate_ms(cur_all[0], cur_all)
    common: dict = dict(benchmark_id=benchmark_id, threshold=threshold, alpha=alpha, baseline_file=baseline_file,
                        processes=len(groups))
    if not baseline_medians_ms:
        return Comparison(verdict=Verdict.NO_BASELINE, current_median_ms=cur_geo, runs=0, **common)
    base_all = [float(v) for v in baseline_medians_ms]
    cur, cur_out = set_aside_slow(cur_all)
    base, base_out = set_aside_slow(base_all)
    set_aside = [_set_aside_note(side, i, xs, kept) for side, i, xs, kept in
                 ((SET_ASIDE_SIDES[0], cur_out, cur_all, cur), (SET_ASIDE_SIDES[1], base_out, base_all, base))
                 if i is not None]
    ratio, ci, p_slower, p_faster, _df, sd = process_level_test(cur, base)
    verdict, note = noninferior(shift_verdict(ratio, ci, p_slower, p_faster, floor=threshold, alpha=alpha,
                                              test="t test"), ratio, ci, sd, (len(cur), len(base)), threshold)
    if set_aside and verdict is Verdict.IMPROVED:
        verdict, note = Verdict.INCONCLUSIVE, untrusted_improvement(ratio)
    if set_aside:
        note = "; ".join([*set_aside, *([note] if note else [])])
    resolution = smallest_detectable(sd, len(cur), len(base), alpha, threshold)
    base_geo = run_estimate_ms(base_all[0], base_all)  # of the processes decided on: ratio = their quotient
    return Comparison(verdict=verdict, current_median_ms=cur_geo, baseline_median_ms=base_geo, ratio=ratio,
                      median_ratio=ratio, ratio_ci=ci, p_slower=p_slower, p_faster=p_faster, note=note,
                      floor=threshold, runs=baseline_runs, run_sd=sd, baseline_processes=len(base_all),
                      resolution=resolution, **common)


def downgrade_throttled(c: Comparison, reason: str | None, *, strict_hint: bool = True) -> Comparison:
    """A regression measured while the device was throttled becomes inconclusive (pure).

    ``reason`` comes from :func:`pytest_gpuperf.verdict.machine.throttle_verdict`
    (``"throttled: HW thermal 34% of samples"``); other verdicts are returned unchanged. The
    advice says it fails in strict mode (:attr:`~pytest_gpuperf.verdict.advice.Advice.STRICT`)
    unless ``strict_hint`` is False (update runs, which never fail on timing).
    """
    if reason is None or c.verdict is not Verdict.REGRESSED:
        return c
    return with_note(c, f"{reason}; the regression is not trusted", advice=(Advice.STRICT,) if strict_hint else (),
                     verdict=Verdict.INCONCLUSIVE)


def with_note(c: Comparison, note: str, *, advice: tuple[Advice, ...] = (), **changes: Any) -> Comparison:
    """``c`` with ``note`` put before its own note and ``advice`` before its own advice (and
    ``changes`` applied). Pure."""
    import dataclasses

    return dataclasses.replace(c, note=note if not c.note else f"{note}; {c.note}",
                               advice=merge_advice(advice, c.advice), **changes)


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
    threshold: float = DEFAULT_MEMORY_THRESHOLD
    max_memory_bytes: int | None = None
    device: str = ""
    baseline_file: str | None = None
    snapshot: str | None = None  # CUDA memory-snapshot text (path, largest blocks), when recorded
    max_memory_text: str | None = None  # the budget as its author wrote it ("100 kB"), for messages
    spread_bytes: int | None = None  # how much the peak differed between calls (now or stored); None: it did not

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


def decide_memory(
    current_bytes: int,
    baseline_bytes: int | None,
    *,
    threshold: float = DEFAULT_MEMORY_THRESHOLD,
    max_memory_bytes: int | None = None,
    benchmark_id: str = "benchmark",
    device: str = "",
    baseline_file: str | None = None,
    slack_bytes: int = MEMORY_SLACK_BYTES,
    max_memory_text: str | None = None,
    current_low_bytes: int | None = None,
    baseline_low_bytes: int | None = None,
) -> MemoryComparison:
    """Compare a peak-memory figure (bytes) with the baseline's.

    Peak memory of a fixed program on a fixed allocator is deterministic, so no statistics are
    needed: **regressed** when ``current > baseline * (1 + threshold) + slack_bytes``, **improved**
    when ``current < baseline * (1 - threshold) - slack_bytes``, else **unchanged**. A peak that
    differed between the calls measured (``current_low_bytes``/``baseline_low_bytes``: the lowest
    peak seen when it did; ``current_bytes``/``baseline_bytes`` are the highest) is not
    deterministic — a data collector, a buffer that grows — so it is gated with twice the widest
    spread seen on top of that (the spread relative to its highest peak, applied to the baseline's
    peak: ``spread_bytes``): regressed only when this run's *lowest* peak exceeds the limit,
    improved only when its highest is below the baseline's lowest by as much. Raises ``ValueError`` for negative sizes or threshold. ``max_memory_text``
    is the budget as written (``"100 kB"``), used only to report it in that unit.
    """
    if current_bytes < 0 or (baseline_bytes is not None and baseline_bytes < 0):
        raise ValueError("memory sizes must be >= 0 bytes")
    if not threshold >= 0:  # also rejects NaN
        raise ValueError(f"memory threshold must be >= 0, got {threshold!r}")
    if max_memory_bytes is not None and max_memory_bytes < 0:
        raise ValueError(f"max_memory must be >= 0 bytes, got {max_memory_bytes!r}")
    # relative spreads (so that ten times the data does not widen its own allowance), applied to the baseline
    fractions = [(high - low) / high for high, low in ((current_bytes, current_low_bytes),
                                                        (baseline_bytes, baseline_low_bytes))
                 if high is not None and low is not None and high > low]
    spread = int(max(fractions) * (baseline_bytes or current_bytes)) if fractions else 0
    now_low = current_bytes if current_low_bytes is None else min(current_low_bytes, current_bytes)
    base_low = baseline_bytes if baseline_low_bytes is None or baseline_bytes is None else \
        min(baseline_low_bytes, baseline_bytes)
    if baseline_bytes is None:
        verdict = Verdict.NO_BASELINE
    elif now_low > baseline_bytes * (1 + threshold) + slack_bytes + 2 * spread:
        verdict = Verdict.REGRESSED
    elif current_bytes < base_low * (1 - threshold) - slack_bytes - 2 * spread:
        verdict = Verdict.IMPROVED
    else:
        verdict = Verdict.UNCHANGED
    return MemoryComparison(
        verdict=verdict, benchmark_id=benchmark_id, current_bytes=int(current_bytes),
        baseline_bytes=None if baseline_bytes is None else int(baseline_bytes), threshold=threshold,
        max_memory_bytes=max_memory_bytes, device=device, baseline_file=baseline_file,
        max_memory_text=max_memory_text if isinstance(max_memory_text, str) else None,
        spread_bytes=spread or None,
    )
