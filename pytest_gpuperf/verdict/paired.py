"""Same-machine A/B: the interleaving schedule and the paired decision (pure: numpy and scipy only).

``pytest --gpuperf --gpuperf-ab REF`` measures every benchmark of the working tree (B) and of git
revision REF (A) on the same machine, interleaved in blocks, and decides on the *paired* evidence:
each A block is paired with the B block next to it in time, so whatever the machine did during
that stretch (clock state, a neighbour's load) cancels in the ratio of the two. This module holds
the parts that know nothing of pytest, git or torch: the randomized ABBA schedule, the pairing
of blocks, and :func:`decide_ab`, which turns the paired block ratios into the same
:class:`~pytest_gpuperf.verdict.compare.Comparison` (and verdict names) as the stored-baseline gate.

**Schedule.** Within one pair of worker processes (one per side), a benchmark gets ``groups``
groups of four blocks, each group ``ABBA`` or ``BAAB`` at random (seeded): the order inside a
pair of adjacent blocks alternates, so a steady drift during the measurement does not favour a
side, and the random choice keeps a periodic disturbance from lining up with one side
(randomized multiple interleaved trials: Abedi & Brecht, ICPE 2017; ``asv continuous`` and
Chromium Pinpoint measure A and B in one job too).

**Decision.** With r_i = log(median(B block) / median(A block)) for the n adjacent pairs:

* ratio: the Hodges–Lehmann one-sample estimate exp(median of the Walsh averages (r_i + r_j) / 2);
* p-values: one-sided Wilcoxon signed-rank tests of the r_i (``scipy.stats.wilcoxon``);
* CI: a seeded 99% percentile-bootstrap CI of the median of the r_i; with two or more pairs of
  worker processes a two-stage bootstrap (process pairs, then blocks within each;
  :func:`~pytest_gpuperf.verdict.compare.hierarchical_log_ci`), so the CI carries the spread between
  process pairs (blocks of one process share its speed mode);
* **regressed** when p_slower < ``alpha``, ratio > 1 + ``threshold`` and the CI's lower bound > 1
  (``shift_verdict``, shared with the stored-baseline gate) *and* the median ratio of every pair
  of worker processes is above 1 + ``threshold``/2: blocks of one process share that process's
  speed mode, so a slowdown carried by some process pairs only is reported ``inconclusive``, not
  ``regressed`` (improved: the mirror image);
* **improved**, **inconclusive**, **unchanged**: as in :func:`pytest_gpuperf.verdict.compare.shift_verdict`,
  and read as non-inferiority, as the stored stage reads it (issue 45): an ``inconclusive`` whose
  one-sided 97.5% upper bound (the upper end of the same bootstrap's 95% CI) lies under
  1 + ``threshold`` is **unchanged**, since the gate asks "slower by more than the threshold?".

Sources: Wilcoxon (1945); Hodges & Lehmann (1963); Efron's percentile bootstrap; Abedi & Brecht,
"Conducting Repeatable Experiments in Highly Variable Cloud Computing Environments" (ICPE 2017).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Sequence

from pytest_gpuperf.verdict.compare import (BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, DEFAULT_ALPHA, DEFAULT_THRESHOLD,  # noqa: F401
                      NONINFERIORITY_CONFIDENCE, RATIO_CONFIDENCE, ABEvidence, Comparison, Verdict,
                      hierarchical_log_ci, noninferior_note, shift_verdict)
from pytest_gpuperf.core.units import format_ratio
from pytest_gpuperf.verdict.advice import Advice

#: Sides of an A/B comparison: A is the git revision, B the working tree.
SIDES = ("A", "B")


def abba_schedule(groups: int, seed: int) -> list[str]:
    """The order of ``4 * groups`` blocks: each group ``ABBA`` or ``BAAB``, chosen at random.

    ``seed`` makes it reproducible (the coordinator derives it from the benchmark's id and the
    process pair). Blocks ``2k`` and ``2k + 1`` form the k-th pair (one A, one B, adjacent in time).
    Raises ``ValueError`` for ``groups < 1``.
    """
    if groups < 1:
        raise ValueError(f"groups={groups!r}: expected an integer >= 1")
    rng = random.Random(seed)
    out: list[str] = []
    for _ in range(groups):
        out.extend("ABBA" if rng.random() < 0.5 else "BAAB")
    return out


@dataclass(frozen=True)
class Block:
    """One timed block: its side ("A" or "B"), the worker-process pair that measured it (0-based),
    its position in that pair's schedule, and its per-call times (ms); ``cpu_samples_ms`` and
    ``process_cpu_samples_ms`` the calling thread's and the process's CPU time per call of the same
    rounds (ms, aligned with ``samples_ms``; empty where not read: CUDA, torchrun launches);
    ``probe_ms`` the times of the reference probe timed between its rounds (ms; probe j right after
    rounds ``j*probe_every .. (j+1)*probe_every - 1``, the last group maybe shorter;
    :func:`pytest_gpuperf.measure.probe.reference_probe`; empty where not timed)."""

    side: str
    process: int
    position: int
    samples_ms: tuple[float, ...]
    cpu_samples_ms: tuple[float, ...] = ()
    process_cpu_samples_ms: tuple[float, ...] = ()
    probe_ms: tuple[float, ...] = ()
    probe_every: int = 1

    @property
    def referenced(self) -> "Block | None":
        """This block on the reference-normalized clock: each round's time over the reference
        probe's beside it (the geometric mean of the probes just before and just after its group of
        rounds; the first group has only the one after), a dimensionless multiple of the probe's
        time. None when the probes do not cover the rounds (not timed, or misaligned). Whatever
        slowed the whole machine for a stretch (the VM's speed modes) slows both and cancels;
        what slowed the benchmark's own code does not (the probe is fixed code)."""
        from pytest_gpuperf.verdict.refclock import referenced

        r = referenced(self.samples_ms, self.probe_ms, self.probe_every)
        return None if r is None else Block(self.side, self.process, self.position, r)

    @property
    def cpu(self) -> "Block | None":
        """This block on the CPU-time clock (its samples the thread's CPU time), None when its
        CPU time was not read for every round."""
        n = len(self.samples_ms)
        if not n or len(self.cpu_samples_ms) != n or len(self.process_cpu_samples_ms) != n:
            return None
        return Block(self.side, self.process, self.position, self.cpu_samples_ms)


@dataclass(frozen=True)
class PairedRatio:
    """log(median B / median A) of two adjacent blocks, with the process pair that measured them."""

    process: int
    log_ratio: float


def _median(values: Sequence[float]) -> float:
    s = sorted(values)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def paired_ratios(blocks: Sequence[Block]) -> list[PairedRatio]:
    """Pair blocks ``2k`` and ``2k + 1`` of each process pair's schedule (one A, one B) into ratios.

    Blocks are matched by ``(process, position // 2)``; a pair missing a side (a worker that
    stopped) is left out. Raises ``ValueError`` for an empty block or non-positive times.
    """
    slots: dict[tuple[int, int], dict[str, Block]] = {}
    for b in blocks:
        if not b.samples_ms or min(b.samples_ms) <= 0:
            raise ValueError(f"block {b.side}{b.process}:{b.position} has no positive samples")
        slots.setdefault((b.process, b.position // 2), {})[b.side] = b
    out = []
    for (process, _), pair in sorted(slots.items()):
        if "A" in pair and "B" in pair:
            out.append(PairedRatio(process, math.log(_median(pair["B"].samples_ms) / _median(pair["A"].samples_ms))))
    return out


def min_pairs(alpha: float) -> int:
    """The fewest pairs with which a one-sided exact signed-rank test can give p < ``alpha``
    (its smallest p-value is 2^-n)."""
    return max(2, math.floor(math.log2(1 / alpha)) + 1)


def hodges_lehmann_one_sample(x: Sequence[float]) -> float:
    """The median of the Walsh averages (x_i + x_j) / 2, i <= j: the Hodges–Lehmann estimate of
    the centre of a symmetric distribution, the estimator paired with the signed-rank test."""
    import numpy as np

    a = np.asarray(x, dtype=np.float64)
    i, j = np.triu_indices(a.size)
    return float(np.median((a[i] + a[j]) / 2))


def signed_rank_pvalues(x: Sequence[float]) -> tuple[float, float]:
    """One-sided Wilcoxon signed-rank p-values ``(p_greater, p_less)`` of ``x`` against 0.

    (1.0, 1.0) when every value is 0 (no evidence either way). ``scipy.stats.wilcoxon``.
    """
    from scipy import stats as sps

    if all(v == 0 for v in x):
        return 1.0, 1.0
    return (float(sps.wilcoxon(x, alternative="greater").pvalue),
            float(sps.wilcoxon(x, alternative="less").pvalue))


def median_ci(x: Sequence[float], confidence: float = RATIO_CONFIDENCE, seed: int = BOOTSTRAP_SEED) -> tuple[float, float]:
    """Seeded percentile-bootstrap CI of the median of ``x`` (same units as ``x``); needs >= 2 values."""
    import numpy as np
    from scipy import stats as sps

    a = np.asarray(x, dtype=np.float64)
    if a.size < 2:
        raise ValueError("a bootstrap CI needs at least 2 values")
    res = sps.bootstrap((a,), np.median, n_resamples=BOOTSTRAP_RESAMPLES, vectorized=True,
                        confidence_level=confidence, method="percentile", rng=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def log_ratios_by_process(ratios: Sequence[PairedRatio]) -> list[list[float]]:
    """The log ratios grouped by the process pair that measured them, in process order."""
    by: dict[int, list[float]] = {}
    for r in ratios:
        by.setdefault(r.process, []).append(r.log_ratio)
    return [v for _, v in sorted(by.items())]


def per_process_ratios(ratios: Sequence[PairedRatio]) -> tuple[float, ...]:
    """The median ratio (B/A, not log) of each process pair, in process order."""
    return tuple(math.exp(_median(v)) for v in log_ratios_by_process(ratios))


def _noninferior(decided: tuple[Verdict, str | None], logs: Sequence[float], by_process: Sequence[Sequence[float]],
                 threshold: float, ci: tuple[float, float]) -> tuple[Verdict, str | None]:
    """The non-inferiority reading of an A/B verdict (issue 45; the stored stage's is
    :func:`pytest_gpuperf.verdict.compare.noninferior`): an ``INCONCLUSIVE`` ``decided`` whose
    one-sided :data:`~pytest_gpuperf.verdict.compare.NONINFERIORITY_CONFIDENCE` upper bound of the
    ratio B/A (the upper end of the two-sided CI at 2 x that - 1, 95%, by the same bootstrap as the
    99% CI ``ci``: two-stage over process pairs when there are two or more) lies under
    1 + ``threshold`` becomes ``UNCHANGED``, with the note that says so; any other is returned as is."""
    if decided[0] is not Verdict.INCONCLUSIVE:
        return decided
    confidence = 2 * NONINFERIORITY_CONFIDENCE - 1
    if len(by_process) >= 2:
        upper = math.exp(hierarchical_log_ci(by_process, confidence=confidence)[1])
    else:
        upper = math.exp(median_ci(logs, confidence)[1])
    return (Verdict.UNCHANGED, noninferior_note(threshold, upper, ci)) if upper < 1 + threshold else decided


def decide_ab(
    ratios: Sequence[PairedRatio],
    *,
    a_median_ms: float,
    b_median_ms: float,
    ref: str,
    threshold: float = DEFAULT_THRESHOLD,
    alpha: float = DEFAULT_ALPHA,
    benchmark_id: str = "benchmark",
    confirmed: bool | None = None,
) -> Comparison:
    """The A/B verdict from paired block ratios (see the module doc for the rule).

    ``a_median_ms``/``b_median_ms``: medians (ms) of all A and all B samples, for the report;
    ``ref``: how A is named (``"origin/main (3f2a1c9)"``). The returned comparison has
    ``baseline_median_ms`` = A's median, ``current_median_ms`` = B's, ``ratio`` the
    Hodges–Lehmann estimate of B/A, ``ratio_ci`` the CI of the median ratio, ``runs`` the number
    of process pairs and its :class:`~pytest_gpuperf.verdict.compare.ABEvidence` (``ab``) set. With fewer pairs than
    :func:`min_pairs` (``alpha`` 0.01: 7), no signed-rank test can reach ``alpha``: ``inconclusive``.
    That verdict, and one the pairs of worker processes disagree on, carries the advice
    :attr:`~pytest_gpuperf.verdict.advice.Advice.MORE_AB_PROCESSES`. Raises ``ValueError`` for bad ``threshold``/``alpha``. Deterministic (seeded bootstrap).
    """
    if not threshold >= 0:
        raise ValueError(f"threshold must be >= 0, got {threshold!r}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    logs = [r.log_ratio for r in ratios]
    per_process = per_process_ratios(ratios)
    common: dict = dict(
        benchmark_id=benchmark_id, current_median_ms=b_median_ms, baseline_median_ms=a_median_ms,
        threshold=threshold, alpha=alpha, floor=threshold, runs=len(per_process),
        ab=ABEvidence(ref, pairs=len(logs), process_ratios=per_process), confirmed=confirmed,
        median_ratio=math.exp(_median(logs)) if logs else None,
    )
    if len(logs) < min_pairs(alpha):
        return Comparison(verdict=Verdict.INCONCLUSIVE, ratio=math.exp(hodges_lehmann_one_sample(logs)) if logs else None,
                          note=f"only {len(logs)} paired block(s); a signed-rank test needs {min_pairs(alpha)} to reach "
                               f"alpha {alpha:g}", advice=(Advice.MORE_AB_PROCESSES,), **common)
    ratio = math.exp(hodges_lehmann_one_sample(logs))
    by_process = log_ratios_by_process(ratios)
    if len(by_process) >= 2:  # process pairs are the replicated unit: a two-stage bootstrap over them
        lo, hi = hierarchical_log_ci(by_process)
    else:
        lo, hi = median_ci(logs)
    ci = (math.exp(lo), math.exp(hi))
    p_slower, p_faster = signed_rank_pvalues(logs)
    verdict, note = shift_verdict(ratio, ci, p_slower, p_faster, floor=threshold, alpha=alpha, test="signed-rank test")
    verdict, note = _noninferior((verdict, note), logs, by_process, threshold, ci)
    disagree, half, advice = None, 1 + threshold / 2, ()
    if verdict is Verdict.REGRESSED and min(per_process) <= half:
        disagree = "slower"
    elif verdict is Verdict.IMPROVED and max(per_process) >= 1 / half:
        disagree = "faster"
    if disagree:
        verdict = Verdict.INCONCLUSIVE
        note = (f"B is {disagree} overall but not by half the threshold in every pair of worker processes (per pair "
                f"{', '.join(format_ratio(v) for v in per_process)}): a process-level speed mode can explain it")
        advice = (Advice.MORE_AB_PROCESSES,)
    return Comparison(verdict=verdict, ratio=ratio, ratio_ci=ci, p_slower=p_slower, p_faster=p_faster, note=note,
                      advice=advice, **common)

