"""The one verdict pipeline: current samples + a stored baseline -> :class:`~.compare.Comparison`.

Pure: knows nothing of pytest or torch. The plugin (``bench.py``), the ``gpuperf compare``
command and the power study (``benchmarks/stat_power.py``) all call :func:`judge`, so a verdict
is the same wherever it is computed; the count gate, independent of timing, is
:func:`judge_counts`. The timing steps, in order:

1. **normalize** (``--gpuperf-normalize``): divide the current samples by the machine-speed
   ratio of the matching reference workload (``drift``);
2. **decide** (:func:`pytest_gpuperf.compare.decide`): rank test, Hodges–Lehmann ratio, bootstrap
   CI, effect floor and prediction limit against the baseline's history;
3. **confirm**: when step 2 says regressed and ``options.confirm`` > 0, re-measure that many
   times (``remeasure``) and decide again (Chromium Pinpoint's "measure more"): the regression is
   confirmed only when both the pooled samples and the re-measure on its own say regressed;
   otherwise the verdict is unchanged with ``confirmed=False`` (a transient);
4. **raw ratio**: with normalization, the ratio before it is kept for the report;
5. **hint**: an inconclusive verdict says how to measure more precisely;
6. **throttle**: a regression measured while the device was throttled becomes inconclusive.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Callable, Sequence

from .baseline import BaselineEntry
from .compare import (Comparison, Verdict, decide, downgrade_throttled, hodges_lehmann_ratio, recentred_baseline,
                      run_stats)
from .options import BenchOptions

if TYPE_CHECKING:
    from .counts import CountComparison, Counts

#: ``remeasure()`` -> per-call times (ms) of one fresh measurement (fresh warmup).
Remeasure = Callable[[], Sequence[float]]


def _normalized(samples_ms: Sequence[float], drift: tuple[str, float] | None) -> list[float]:
    if drift is None:
        return list(samples_ms)
    from .drift import normalize

    return normalize(samples_ms, drift[1])


def judge(
    samples_ms: Sequence[float],
    baseline: BaselineEntry | None,
    options: BenchOptions,
    *,
    benchmark_id: str = "benchmark",
    baseline_file: str | None = None,
    remeasure: Remeasure | None = None,
    drift: tuple[str, float] | None = None,
    throttle: str | None = None,
    fixed_rounds: bool = False,
    can_fail: bool = True,
) -> Comparison:
    """Decide whether ``samples_ms`` (per-call times of this run, ms) regressed against ``baseline``.

    ``options`` supplies ``threshold``, ``alpha`` and ``confirm``. ``remeasure`` is called up to
    ``options.confirm`` times when the first decision says regressed (None: no confirmation).
    ``drift`` is ``(reference name, now/then ratio)`` to divide the samples by (see
    :mod:`pytest_gpuperf.drift`), ``throttle`` the throttle reason from telemetry (None: not
    throttled). ``fixed_rounds`` says the rounds were fixed (``pedantic(rounds=...)``), which
    changes the hint of an inconclusive verdict. ``can_fail`` False (an update run, which never fails
    on timing) leaves strict-mode hints out of the notes. Raises ``ValueError`` for empty, non-finite or
    non-positive samples. Deterministic for given inputs (seeded bootstrap).
    """
    args = dict(
        threshold=options.threshold, alpha=options.alpha, benchmark_id=benchmark_id,
        baseline_file=baseline_file,
        run_medians_ms=list(baseline.run_medians_ms) if baseline is not None else None,
    )
    base = list(baseline.samples_ms) if baseline is not None else None
    current = _normalized(samples_ms, drift)
    comparison = decide(current, base, **args)
    extra: list[float] = []
    if comparison.verdict is Verdict.REGRESSED and remeasure is not None and options.confirm > 0:
        for _ in range(options.confirm):
            extra.extend(remeasure())
        first_ratio = comparison.ratio
        comparison = decide(current, base, confirmation_ms=_normalized(extra, drift), **args)
        # Confirmed only when the pooled evidence AND the re-measure on its own say regressed:
        # pooled alone, an equally sized re-measure at baseline level cannot outvote a one-off
        # slow first measurement above ~2x the floor.
        alone = decide(_normalized(extra, drift), base, **args) if comparison.verdict is Verdict.REGRESSED else None
        if alone is not None and alone.verdict is not Verdict.REGRESSED:
            comparison = dataclasses.replace(
                comparison, verdict=Verdict.UNCHANGED, confirmed=False,
                note=(f"the first measurement said regressed (ratio {first_ratio:.3f}x) but the re-measure "
                      f"alone did not (ratio {alone.ratio:.3f}x, {alone.verdict.value}): a transient"),
            )
    if drift is not None and comparison.ratio is not None and base is not None:
        # the same Hodges-Lehmann estimate decide made, on the samples before normalization
        recentred, _ = recentred_baseline(base, run_stats(args["run_medians_ms"]))
        raw = hodges_lehmann_ratio(list(samples_ms) + extra, recentred)
        comparison = dataclasses.replace(comparison, raw_ratio=raw, normalized_by=f"{drift[0]} x{drift[1]:.3f}")
    if comparison.verdict is Verdict.INCONCLUSIVE:
        hint = ("more rounds (pedantic rounds=...)" if fixed_rounds else
                f"measure longer (max_time, now {options.max_time:g} s)")
        comparison = dataclasses.replace(comparison, note=f"{comparison.note}; to decide, {hint}")
    return downgrade_throttled(comparison, throttle, strict_hint=can_fail)


def judge_counts(
    counts: "Counts",
    baseline: BaselineEntry | None,
    options: BenchOptions,
    *,
    benchmark_id: str = "benchmark",
    baseline_file: str | None = None,
) -> "CountComparison":
    """The count gate: ``counts`` (this run's, per call) against the counts stored with
    ``baseline``'s runs, with ``options.count_tolerance`` and the declared budgets
    (``max_ops``, ``max_kernels``, ``max_syncs``, ``max_recompiles``). See
    :func:`pytest_gpuperf.counts.decide_counts`; independent of the timing verdict.
    """
    from .counts import BUDGETS, decide_counts

    return decide_counts(
        counts,
        baseline.count_history if baseline is not None else None,
        baseline.counts if baseline is not None else None,
        tolerance=options.count_tolerance,
        budgets={name: getattr(options, name) for name in BUDGETS},
        benchmark_id=benchmark_id,
        baseline_file=baseline_file,
    )
