"""The one verdict pipeline: current samples + a stored baseline -> :class:`~.compare.Comparison`.

Pure: knows nothing of pytest or torch. A benchmark measured by several worker processes (the
default, ``--gpuperf-processes``) is decided by :func:`judge_replicates`, over the processes'
medians, by the plugin (:mod:`pytest_gpuperf.plugin.replicates`) and by ``gpuperf compare`` alike; one
measured in a single process by :func:`judge`, which the plugin (``bench.py``), ``gpuperf compare``
and the power study (``benchmarks/stat_power.py``) all call, so a verdict is the same wherever it
is computed; the count gate, independent of timing, is :func:`judge_counts`. 
**Entry point: :func:`evaluate`.** Every verdict of a benchmark - stored single-process, stored
replicated (worker processes), A/B, and a stored alarm re-decided by A/B against the baseline's
commit - with its memory verdict and count gate, comes from :func:`evaluate`: the plugin
(``bench.py`` for one process, :mod:`pytest_gpuperf.plugin.replicates` for several, :mod:`pytest_gpuperf.ab.results`
for A/B), ``gpuperf compare`` and the studies (``benchmarks/stat_power.py``, ``benchmarks/ab_study.py``,
``benchmarks/verdict_study.py`` through the plugin) call it; what was measured is an
:class:`Evidence`, what it is compared with a :class:`Reference`, and the answer an
:class:`Evaluation`. Pass or fail is then decided in one place,
:meth:`pytest_gpuperf.verdict.result.BenchResult.failing`. :func:`judge`, :func:`judge_replicates`,
:func:`judge_ab` and :func:`judge_counts` are its steps. The timing steps of :func:`judge`, in order:

1. **normalize** (only with ``--gpuperf-normalize``, ``normalize=True``): when the interleaved
   probe (``probe``, :mod:`pytest_gpuperf.measure.probe`) has a stored level and its per-block times
   correlate positively with the benchmark's within this run (one-sided Spearman p <
   :data:`PROBE_CORRELATION_ALPHA`, at least :data:`MIN_PROBE_PAIRS` pairs), divide each round's
   sample by its probe time / the stored probe level; otherwise divide the current samples by the
   machine-speed ratio of the matching session-start reference workload (``drift``). Off by
   default: on this project's machines the probe's level moved with its own process (a "49%
   faster machine" on the same machine a minute later), turning raw ratios of 1.00x into 2-3x
   "regressions" (issue 21);
2. **decide** (:func:`pytest_gpuperf.verdict.compare.decide`): rank test, Hodges–Lehmann ratio, bootstrap
   CI, effect floor and prediction limit against the baseline's history;
3. **confirm**: when step 2 says regressed and ``options.confirm`` > 0, re-measure that many
   times (``remeasure``) and decide once more on all the evidence: the first measurement and each
   re-measure are groups of a two-stage bootstrap CI (:func:`~pytest_gpuperf.verdict.compare.hierarchical_log_ci`),
   so a one-off slow measurement widens the CI instead of deciding alone (Chromium Pinpoint's
   "measure more"); ``confirmed`` says whether the regression held;
4. **raw ratio**: with normalization, the ratio before it is kept for the report;
5. **hint**: an inconclusive verdict says how to measure more precisely;
6. **machine differs** (:func:`machine_rule`): with m = median(probe now) / stored probe level
   (or, for a baseline stored without a probe, the session-start reference workload's now/then
   ratio of the benchmark's class) and T the effect floor, a note says when this machine looks
   slower or faster than the baselines' by more than T. Only with ``--gpuperf-normalize`` does a
   regression measured while m > 1 + T become inconclusive ("machine differs: probe +29%"): by
   default a real verdict on another machine comes from the A/B confirmation against the
   baseline's commit, not from a probe;
7. **throttle**: a regression measured while the device was throttled becomes inconclusive.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable, Sequence

from pytest_gpuperf.verdict.history import BaselineEntry
from pytest_gpuperf.verdict.compare import (ABEvidence, Comparison, MemoryComparison, Normalization, Verdict, decide, decide_memory, downgrade_throttled,
                      hodges_lehmann_ratio, recentred_baseline, run_stats, with_note)
from pytest_gpuperf.core.options import BenchOptions
from pytest_gpuperf.verdict.advice import Advice, merge_advice

if TYPE_CHECKING:
    from pytest_gpuperf.verdict.cputime import CpuTime
    from pytest_gpuperf.verdict.gpuclock import GpuClock
    from pytest_gpuperf.verdict.paired import Block
    from pytest_gpuperf.verdict.counts import CountComparison, Counts
    from pytest_gpuperf.verdict.machine import ProbeEvidence
    from pytest_gpuperf.verdict.moderation import Prior, Priors

#: ``remeasure()`` -> per-call times (ms) of one fresh measurement (fresh warmup), or an object
#: with ``samples_ms``, ``probe_ms`` and ``probe_every`` (a :class:`~pytest_gpuperf.measure.timing.Timing`),
#: whose probe times then normalize its samples as the first measurement's do.
Remeasure = Callable[[], Any]

#: Probe/benchmark pairs (one per probe call) needed before the correlation test (fewer: no normalization).
MIN_PROBE_PAIRS = 10
#: One-sided significance of the Spearman rank correlation that turns probe normalization on.
PROBE_CORRELATION_ALPHA = 0.05


def probe_correlation(samples_ms: Sequence[float], probe: "ProbeEvidence") -> tuple[float, float] | None:
    """Spearman's rho and its one-sided p-value (rho > 0) between the probe times and the
    benchmark's per-block median times (block j: the rounds probe j followed), within one run.

    None when there are fewer than :data:`MIN_PROBE_PAIRS` pairs, the probes do not cover the
    rounds, or either side is constant (``scipy.stats.spearmanr``; Spearman, 1904). Pure.
    """
    import statistics

    every = max(1, probe.every)
    blocks = [statistics.median(samples_ms[j * every:(j + 1) * every]) for j in range(len(probe.now_ms))
              if samples_ms[j * every:(j + 1) * every]]
    if len(blocks) < MIN_PROBE_PAIRS or len(blocks) != len(probe.now_ms):
        return None
    if len(set(blocks)) < 2 or len(set(probe.now_ms)) < 2:
        return None
    import warnings

    from scipy import stats as sps

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = sps.spearmanr(blocks, probe.now_ms, alternative="greater")
    rho, p = float(res.statistic), float(res.pvalue)
    if rho != rho or p != p:  # NaN
        return None
    return rho, p


def _probe_normalized(samples_ms: Sequence[float], factors: Sequence[float]) -> list[float]:
    return [float(x) / f for x, f in zip(samples_ms, factors)]


def _probe_normalized_remeasure(measured: Any, samples: list[float], probe: "ProbeEvidence") -> list[float]:
    """A re-measure's ``samples`` normalized like the first measurement's: by its own probe times,
    else (none of its own) by the first measurement's machine ratio."""
    from pytest_gpuperf.verdict.machine import ProbeEvidence

    own = ProbeEvidence.of(measured, probe.baseline_ms, probe.name)
    factors = own.factors(len(samples))
    if factors is None:  # no probes of its own: the first measurement's machine ratio
        m = probe.machine_ratio or 1.0
        factors = [m] * len(samples)
    return _probe_normalized(samples, factors)


def machine_rule(c: Comparison, probe: "ProbeEvidence | None", *, strict_hint: bool = True,
                 reference: tuple[str, float] | None = None, downgrade: bool = True) -> Comparison:
    """The "machine differs" step of :func:`judge` (pure; see the module doc, step 6).

    m is ``probe.machine_ratio`` (this run's probe median / the stored level) or, when that is
    unknown (a baseline stored without a probe), ``reference``: ``(name, now/then)`` of the
    session-start reference workload of the benchmark's class (:mod:`pytest_gpuperf.measure.drift`).
    With T = ``c.floor`` (else ``c.threshold``) and ``downgrade`` (``--gpuperf-normalize``): a REGRESSED verdict with m > 1 + T becomes
    INCONCLUSIVE (note ``machine differs: probe +29% ...``; advice
    :attr:`~pytest_gpuperf.verdict.advice.Advice.STRICT`, unless ``strict_hint`` is False, and
    :attr:`~pytest_gpuperf.verdict.advice.Advice.UPDATE_OR_AB`, how to get a real verdict, which
    makes ``machine_differs`` True): how much slower a benchmark runs on another machine is not a
    multiple of any probe (instruction sets, caches and memory differ per workload: on this project's VMs a
    machine 8x slower on an fp32 matmul was 500x slower on a bf16 one), so no slowdown measured on
    a slower machine is trusted. A regression on a machine that is not slower (m <= 1 + T) stays
    one. Without ``downgrade`` (the default) and for any other verdict, |m - 1| > T only adds an
    informational note (the probe's level also moves with its own process). ``machine_ratio`` is set
    whenever m is known; without it ``c`` is returned unchanged.
    """
    m = probe.machine_ratio if probe is not None else None
    if m is not None:
        assert probe is not None
        source = f"probe {{pct}} ({probe.name}, now/baseline)"
    elif reference is not None and reference[1] > 0:
        m = reference[1]
        source = f"reference {reference[0]} {{pct}} (session-start reference workload, now/baseline)"
    else:
        return c
    c = dataclasses.replace(c, machine_ratio=m)
    floor = c.floor if c.floor is not None else c.threshold
    what = "machine differs: " + source.format(pct=f"{(m - 1) * 100:+.0f}%")

    if downgrade and c.verdict is Verdict.REGRESSED and m > 1 + floor:
        raw = c.normalization.raw_ratio if c.normalization is not None else c.ratio
        advice = (Advice.STRICT, Advice.UPDATE_OR_AB) if strict_hint else (Advice.UPDATE_OR_AB,)
        return with_note(c, f"{what}: the regression (x{raw:.2f}) is not trusted", advice=advice,
                         verdict=Verdict.INCONCLUSIVE)
    if abs(m - 1) > floor and c.verdict is not Verdict.NO_BASELINE:
        side = "slower" if m > 1 else "faster"
        return with_note(c, f"{what}: this machine is {side} than the baselines' (informational)")
    return c


def machine_explains(c: Comparison, ratios: "dict[str, float] | None", cpu_ratio: float | None = None) -> Comparison:
    """A regression over worker processes that no A/B will confirm, read against the machine's own
    speed (issue 45: on a VM whose speed moves for minutes, one unchanged rerun read 1.1-1.6x slower
    in every process, and 5 of tensordict's 28 benchmarks failed). ``ratios``: the session-start
    reference workloads now/then (:func:`~pytest_gpuperf.verdict.machine.drift_ratios` of this run's
    median over its timed worker processes and the baseline's; ``{"matmul": r, "copy": r}``), timed
    before any benchmark, so the code under test does not move them. The machine counts as slower
    only when both workloads say so, by the smaller of the two: m = min(matmul, copy) (on this
    project's VM the copy alone read 1.13-1.18x in 3 quiet reruns whose matmul read 0.93-0.97x).
    A regression decided on CPU time is read against ``cpu_ratio`` instead
    (:func:`~pytest_gpuperf.verdict.machine.cpu_drift_ratio`: the thread CPU time of a pure-Python
    loop now/then, m = that ratio): a neighbour that only takes the core away stretches the
    workloads' wall clock, not this, while a CPU that runs slower itself (a busy SMT sibling; with
    one core busy a cattrs rerun read every CPU-time median about 2x the baseline's) slows both.
    With T the threshold: when m > 1 + T and the regression's 99% CI reaches down to m x (1 + T)
    (the machine's own slowdown explains it), ``regressed`` becomes ``inconclusive`` with a note
    naming m and advice :attr:`~pytest_gpuperf.verdict.advice.Advice.UPDATE_OR_AB`. A regression
    beyond that stays one. Any other comparison, one decided by A/B, or one whose clock has no
    ratio here is returned as it is. Pure."""
    if c.verdict is not Verdict.REGRESSED or c.ab is not None or c.ratio_ci is None:
        return c
    if c.clock == "cpu":
        if cpu_ratio is None:
            return c
        m, what = cpu_ratio, f"reference CPU time {(cpu_ratio - 1) * 100:+.0f}% (a pure-Python loop's, "
    elif ratios and {"matmul", "copy"} <= set(ratios):
        m = min(ratios["matmul"], ratios["copy"])
        what = (f"reference workloads matmul {(ratios['matmul'] - 1) * 100:+.0f}%, copy "
                f"{(ratios['copy'] - 1) * 100:+.0f}% (")
    else:
        return c
    if not (m > 1 + c.threshold and c.ratio_ci[0] <= m * (1 + c.threshold)):
        return c
    return with_note(c, f"machine differs: {what}session-start, median of this run's worker processes, "
                        f"now/baseline): the regression (x{c.ratio:.2f}, 99% CI down to x{c.ratio_ci[0]:.2f}) is "
                        f"within what the machine's own slowdown (x{m:.2f}) explains, so it is not trusted",
                     advice=(Advice.UPDATE_OR_AB,), verdict=Verdict.INCONCLUSIVE, machine_ratio=m)


def _normalized(samples_ms: Sequence[float], drift: tuple[str, float] | None) -> list[float]:
    if drift is None:
        return list(samples_ms)
    from pytest_gpuperf.verdict.machine import normalize

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
    probe: "ProbeEvidence | None" = None,
    machine_reference: tuple[str, float] | None = None,
    normalize: bool = False,
) -> Comparison:
    """Decide whether ``samples_ms`` (per-call times of this run, ms) regressed against ``baseline``.

    ``options`` supplies ``threshold``, ``alpha`` and ``confirm``. ``remeasure`` is called up to
    ``options.confirm`` times when the first decision says regressed (None: no confirmation).
    ``drift`` is ``(reference name, now/then ratio)`` to divide the samples by (see
    :mod:`pytest_gpuperf.measure.drift`), ``throttle`` the throttle reason from telemetry (None: not
    throttled). ``fixed_rounds`` says the rounds were fixed (``pedantic(rounds=...)``), which
    changes the hint of an inconclusive verdict. ``can_fail`` False (an update run, which never fails
    on timing) leaves the strict-mode advice out. ``probe``: the interleaved machine-speed
    probe of this run and its stored level (:class:`~pytest_gpuperf.verdict.machine.ProbeEvidence`; None or
    no stored level: as before), used to normalize (step 1) and for the "machine differs" rule
    (step 6); ``machine_reference`` the session-start reference workload's ``(name, now/then)``
    for the "machine differs" rule when the baseline has no probe level. ``normalize``
    (``--gpuperf-normalize``): normalize by the probe or the reference workloads and let "machine
    differs" downgrade a regression (steps 1 and 6); off, both only inform. Raises ``ValueError`` for empty, non-finite or non-positive samples. Deterministic
    for given inputs (seeded bootstrap).
    """
    args = dict(
        threshold=options.threshold, alpha=options.alpha, benchmark_id=benchmark_id,
        baseline_file=baseline_file,
        run_medians_ms=list(baseline.run_medians_ms) if baseline is not None else None,
    )
    base = list(baseline.samples_ms) if baseline is not None else None
    factors = probe.factors(len(samples_ms)) if normalize and probe is not None and base is not None else None
    correlation = probe_correlation(samples_ms, probe) if factors is not None and probe is not None else None
    by_probe = factors is not None and correlation is not None and correlation[1] < PROBE_CORRELATION_ALPHA
    if by_probe:
        assert factors is not None
        current = _probe_normalized(samples_ms, factors)
        drift = None  # the interleaved probe wins over the session-start reference workloads
    else:
        current = _normalized(samples_ms, drift)
    comparison = decide(current, base, **args)
    extra: list[float] = []
    extra_normalized: list[list[float]] = []  # one group per re-measure
    if comparison.verdict is Verdict.REGRESSED and remeasure is not None and options.confirm > 0:
        for _ in range(options.confirm):
            measured = remeasure()
            raw_more = [float(v) for v in getattr(measured, "samples_ms", measured)]
            extra.extend(raw_more)
            extra_normalized.append(_probe_normalized_remeasure(measured, raw_more, probe) if by_probe and probe
                                    else _normalized(raw_more, drift))
        # One decision on all the evidence: the first measurement and the re-measures are groups of
        # a two-stage bootstrap CI (see compare.decide), never two tests that must both be significant.
        comparison = decide(current, base, confirmation_groups=extra_normalized, **args)
    if (drift is not None or by_probe) and comparison.ratio is not None and base is not None:
        # the same Hodges-Lehmann estimate decide made, on the samples before normalization
        recentred, _ = recentred_baseline(base, run_stats(args["run_medians_ms"]))
        raw = hodges_lehmann_ratio(list(samples_ms) + extra, recentred)
        if by_probe:
            assert probe is not None and correlation is not None
            by = (f"probe {probe.name} per round, median x{probe.machine_ratio:.3f}, "
                  f"Spearman rho {correlation[0]:.2f}")
        else:
            assert drift is not None
            by = f"{drift[0]} x{drift[1]:.3f}"
        comparison = dataclasses.replace(comparison, normalization=Normalization(by, raw))
    if comparison.verdict is Verdict.INCONCLUSIVE:
        hint = ("more rounds (pedantic rounds=...)" if fixed_rounds else
                f"measure longer (max_time, now {options.max_time:g} s)")
        comparison = dataclasses.replace(comparison, note=f"{comparison.note}; to decide, {hint}")
    comparison = machine_rule(comparison, probe, strict_hint=can_fail, reference=machine_reference,
                              downgrade=normalize)
    return downgrade_throttled(comparison, throttle, strict_hint=can_fail)


def judge_replicates(
    groups_ms: Sequence[Sequence[float]],
    baseline: BaselineEntry | None,
    options: BenchOptions,
    *,
    benchmark_id: str = "benchmark",
    baseline_file: str | None = None,
    throttle: str | None = None,
    can_fail: bool = True,
    prior: "Prior | None" = None,
) -> Comparison:
    """The timing verdict of a benchmark measured in several worker processes (``--gpuperf-processes``).

    ``groups_ms``: per-call times (ms), one sequence per worker process. The decision is
    :func:`pytest_gpuperf.verdict.compare.decide_replicates` on the process medians against
    ``baseline.replicate_medians_ms`` (the newest stored run's process medians, or for a baseline
    recorded one process per run its runs' medians), with ``options.threshold``/``alpha``; then the
    advice of an inconclusive verdict (:attr:`~pytest_gpuperf.verdict.advice.Advice.MORE_PROCESSES`)
    and the ``throttle`` downgrade as in :func:`judge`. ``prior``: the session's spread on this clock
    (:class:`~pytest_gpuperf.verdict.moderation.Prior`), which an inconclusive verdict is read with
    (:func:`~pytest_gpuperf.verdict.moderation.moderate`: "unchanged" only). No probe
    normalization and no in-process re-measure: the processes are the replicates, and a regression
    is confirmed by A/B against the baseline's commit (:mod:`pytest_gpuperf.plugin.replicates`). Raises
    ``ValueError`` for empty groups or non-positive times.
    """
    from pytest_gpuperf.verdict.compare import decide_replicates

    if len(groups_ms) == 1 and baseline is not None and len(baseline.replicate_medians_ms) < 2:
        # one process on each side (a `processes=1` marker): no between-process spread, so the
        # single-process decision on the samples, with a note
        c = judge(groups_ms[0], baseline, dataclasses.replace(options, confirm=0), benchmark_id=benchmark_id,
                  baseline_file=baseline_file, throttle=throttle, can_fail=can_fail)
        return with_note(c, "one process on each side: run-to-run spread not measured")
    c = decide_replicates(
        groups_ms, baseline.replicate_medians_ms if baseline is not None else None, threshold=options.threshold,
        alpha=options.alpha, benchmark_id=benchmark_id, baseline_file=baseline_file,
        baseline_runs=len(baseline.history) if baseline is not None else 0)
    if prior is not None:
        from pytest_gpuperf.verdict.moderation import moderate

        c = moderate(c, prior)
    if c.verdict is Verdict.INCONCLUSIVE:  # to decide, measure in more worker processes (now c.processes)
        c = dataclasses.replace(c, advice=merge_advice(c.advice, (Advice.MORE_PROCESSES,)))
    return downgrade_throttled(c, throttle, strict_hint=can_fail)


def judge_counts(
    counts: "Counts",
    baseline: BaselineEntry | None,
    options: BenchOptions,
    *,
    benchmark_id: str = "benchmark",
    baseline_file: str | None = None,
    ab_counts: "Counts | None" = None,
    ab: bool = False,
) -> "CountComparison":
    """The count gate: ``counts`` (this run's, per call) against the counts stored with
    ``baseline``'s runs - or, with ``ab``, against side A's ``ab_counts`` (None: A was not
    counted) - with ``options.count_tolerance`` and the declared budgets (``max_ops``,
    ``max_kernels``, ``max_syncs``, ``max_recompiles``). See
    :func:`pytest_gpuperf.verdict.counts.decide_counts`; independent of the timing verdict.
    """
    from pytest_gpuperf.verdict.counts import BUDGETS, decide_counts

    if ab:
        history = [ab_counts.totals()] if ab_counts is not None else None
        stored = ab_counts
    else:
        history = baseline.count_history if baseline is not None else None
        stored = baseline.counts if baseline is not None else None
    return decide_counts(
        counts,
        history,
        stored,
        tolerance=options.count_tolerance,
        budgets={name: getattr(options, name) for name in BUDGETS},
        benchmark_id=benchmark_id,
        baseline_file=baseline_file,
    )


# ----------------------------------------------------------------------------- the one entry point


@dataclasses.dataclass(frozen=True)
class Evidence:
    """What was measured of one benchmark, for :func:`evaluate` (pure data; units in the names).

    Exactly one kind of timing evidence decides: ``ab_blocks`` (an A/B run: the timed blocks of
    both sides, :class:`~pytest_gpuperf.verdict.paired.Block`), else ``process_samples_ms`` (per-call times,
    ms, one tuple per worker process, in process order), else ``samples_ms`` (per-call times of one
    process, ms). ``peak_memory_bytes`` and ``counts`` (:class:`~pytest_gpuperf.verdict.counts.Counts`) are
    the memory verdict's and the count gate's inputs (None: not measured, no verdict);
    ``peak_memory_low_bytes`` the lowest peak when the calls measured differed (None: they did not).
    ``throttle`` says why a regression measured now is not trusted (a throttled GPU, a busy host;
    None: nothing). ``device`` names the device in memory messages. ``cpu``: the CPU time of the
    same rounds (:class:`~pytest_gpuperf.verdict.cputime.CpuTime`, aligned with the wall samples;
    None: not read), ``host_busy`` the busy-host reason while they ran
    (:func:`~pytest_gpuperf.verdict.machine.host_busy`; None: quiet or not measured): with both, CPU
    time may decide (:func:`with_cpu_time`). ``gpu_clock``: on CUDA, the SM clock of the same rounds
    (:class:`~pytest_gpuperf.verdict.gpuclock.GpuClock`; None: not read): where the baseline's clock
    differs, a regression is checked in cycles per call too (:func:`with_gpu_clock`).
    ``ref_medians``: on the CPU backend, each worker process's level on the reference clock
    (:mod:`~pytest_gpuperf.verdict.refclock`; multiples of the time of the probe named ``probe``,
    whose median time over the processes is ``probe_ms``; None: not timed): where the wall clock
    left the verdict inconclusive it may decide (:func:`with_reference`). ``busy_alike``: in an A/B
    run on a busy host, the two sides' host loads over their blocks where they were alike
    (:func:`~pytest_gpuperf.verdict.machine.busy_alike`; None: not alike, quiet or not read): then a
    wall-clock regression beyond 1 + T in every pair stands (:func:`judge_ab`).
    """

    samples_ms: tuple[float, ...] = ()
    process_samples_ms: tuple[tuple[float, ...], ...] | None = None
    ab_blocks: "tuple[Block, ...] | None" = None
    peak_memory_bytes: int | None = None
    counts: "Counts | None" = None
    throttle: str | None = None
    device: str = ""
    peak_memory_low_bytes: int | None = None
    cpu: "CpuTime | None" = None
    host_busy: str | None = None
    gpu_clock: "GpuClock | None" = None
    ref_medians: tuple[float, ...] | None = None
    probe: str | None = None
    probe_ms: float | None = None
    busy_alike: str | None = None


@dataclasses.dataclass(frozen=True)
class Reference:
    """What :class:`Evidence` is compared with: a stored baseline entry or side A of an A/B run.

    Build one with :meth:`stored` or :meth:`ab`. ``label`` names it in messages (the baseline
    file, or ``"A/B vs REF"``).
    """

    baseline: BaselineEntry | None = None
    label: str | None = None
    ab_ref: str | None = None
    ab_measured: bool = False
    ab_peak_memory_bytes: int | None = None
    ab_counts: "Counts | None" = None
    ab_missing_note: str | None = None

    @classmethod
    def stored(cls, baseline: BaselineEntry | None, baseline_file: str | None = None) -> "Reference":
        """The stored baseline ``baseline`` (None: the benchmark has none yet) read from ``baseline_file``."""
        return cls(baseline=baseline, label=baseline_file)

    @classmethod
    def ab(cls, ref: str, *, measured: bool, peak_memory_bytes: int | None = None, counts: "Counts | None" = None,
           missing_note: str | None = None) -> "Reference":
        """Side A of an A/B run against git revision ``ref``: ``measured`` False when A has no
        result for the benchmark (``missing_note`` says why: new in the working tree, A failed)."""
        return cls(label=f"A/B vs {ref}", ab_ref=ref, ab_measured=measured, ab_peak_memory_bytes=peak_memory_bytes,
                   ab_counts=counts, ab_missing_note=missing_note)


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """The verdicts of one benchmark: timing (``comparison``), peak memory (``memory``, None when
    not measured) and the count gate (``counts``, None when not counted)."""

    comparison: Comparison
    memory: MemoryComparison | None = None
    counts: "CountComparison | None" = None


def evaluate(
    evidence: Evidence,
    reference: Reference,
    options: BenchOptions,
    *,
    benchmark_id: str = "benchmark",
    can_fail: bool = True,
    remeasure: Remeasure | None = None,
    confirm_from: int | None = None,
    probe: "ProbeEvidence | None" = None,
    drift: tuple[str, float] | None = None,
    machine_reference: tuple[str, float] | None = None,
    normalize: bool = False,
    fixed_rounds: bool = False,
    max_memory_text: str | None = None,
    priors: "Priors | None" = None,
) -> Evaluation:
    """Every verdict of one benchmark: the one evaluation function (see the module doc).

    Timing: A/B blocks -> :func:`judge_ab` (``confirm_from``: the first process pair of a
    confirmation re-measure); worker processes -> :func:`judge_replicates`; one process ->
    :func:`judge` (``remeasure``, ``probe``, ``drift``, ``machine_reference``, ``normalize`` and
    ``fixed_rounds`` are its arguments; ``priors``: the session's spreads per clock,
    :mod:`~pytest_gpuperf.verdict.moderation`). Then ``evidence.throttle`` turns a regression into
    inconclusive (:func:`~pytest_gpuperf.verdict.compare.downgrade_throttled`). Memory:
    :func:`~pytest_gpuperf.verdict.compare.decide_memory` against the reference's peak with
    ``options.memory_threshold`` and ``options.max_memory`` (``max_memory_text``: the budget as
    written). Counts: :func:`judge_counts` against the reference's counts. ``can_fail`` False (an
    update run) leaves the strict-mode advice out. Raises ``ValueError`` for empty,
    non-finite or non-positive times and bad options. Pure and deterministic (seeded bootstraps).
    """
    label = reference.label
    if evidence.ab_blocks is not None:
        comparison = _ab_timing(evidence, reference, options, benchmark_id=benchmark_id, confirm_from=confirm_from)
        base_peak = reference.ab_peak_memory_bytes
    else:
        if evidence.process_samples_ms is not None:
            comparison = judge_replicates(evidence.process_samples_ms, reference.baseline, options,
                                          benchmark_id=benchmark_id, baseline_file=label, throttle=evidence.throttle,
                                          can_fail=can_fail, prior=priors.wall if priors else None)
        else:
            comparison = judge(evidence.samples_ms, reference.baseline, options, benchmark_id=benchmark_id,
                               baseline_file=label, remeasure=remeasure, drift=drift, throttle=evidence.throttle,
                               fixed_rounds=fixed_rounds, can_fail=can_fail, probe=probe,
                               machine_reference=machine_reference, normalize=normalize)
        comparison = with_cpu_time(comparison, evidence, reference.baseline, options, benchmark_id=benchmark_id,
                                   baseline_file=label, can_fail=can_fail, prior=priors.cpu if priors else None)
        comparison = with_reference(comparison, evidence, reference.baseline, options, benchmark_id=benchmark_id,
                                    baseline_file=label, can_fail=can_fail, prior=priors.ref if priors else None)
        comparison = with_gpu_clock(comparison, evidence, reference.baseline, options, benchmark_id=benchmark_id,
                                    baseline_file=label)
        base_peak = reference.baseline.peak_memory_bytes if reference.baseline is not None else None
    memory = _memory_verdict(evidence, reference, options, base_peak, benchmark_id, max_memory_text)
    counts = None
    if evidence.counts is not None:
        counts = judge_counts(evidence.counts, reference.baseline, options, benchmark_id=benchmark_id,
                              baseline_file=label, ab_counts=reference.ab_counts,
                              ab=reference.ab_ref is not None)
    return Evaluation(comparison=comparison, memory=memory, counts=counts)


def _cpu_backend(device: str) -> bool:
    """Whether ``device`` (``Evidence.device``: ``"cpu"``, ``"cuda:0"``; empty: unknown, taken as
    the CPU) times with the wall clock, where CPU time may decide; on CUDA, events time the device
    and the host's CPU time is only shown."""
    return not device or device.split(":")[0] == "cpu"


def _memory_verdict(evidence: Evidence, reference: Reference, options: BenchOptions, base_peak: int | None,
                    benchmark_id: str, max_memory_text: str | None) -> MemoryComparison | None:
    """The memory step of :func:`evaluate` (None when no peak was measured)."""
    if evidence.peak_memory_bytes is None:
        return None
    base_low = reference.baseline.peak_memory_low_bytes if reference.baseline is not None else None
    return decide_memory(evidence.peak_memory_bytes, base_peak, threshold=options.memory_threshold,
                         max_memory_bytes=options.max_memory, benchmark_id=benchmark_id, device=evidence.device,
                         baseline_file=reference.label, max_memory_text=max_memory_text,
                         current_low_bytes=evidence.peak_memory_low_bytes, baseline_low_bytes=base_low)


def with_cpu_time(wall: Comparison, evidence: Evidence, baseline: BaselineEntry | None, options: BenchOptions, *,
                  benchmark_id: str = "benchmark", baseline_file: str | None = None,
                  can_fail: bool = True, prior: "Prior | None" = None) -> Comparison:
    """The stored-baseline timing verdict with CPU time in it (a step of :func:`evaluate`; the rule
    is :mod:`pytest_gpuperf.verdict.cputime`'s). ``wall`` is the wall clock's verdict (busy-host
    downgrade included). Where this run and the baseline both have CPU time, the same decision
    (:func:`judge_replicates` over the worker processes' CPU-time medians, else :func:`judge` on
    the samples, without re-measure or normalization; over processes read with ``prior``, the
    session's CPU-time spread) is made on CPU time, and
    :func:`~pytest_gpuperf.verdict.cputime.decide_clock` says which stands. The result's ``clock``
    names the clock ("wall" whenever CPU time was there to compare, None otherwise), and its note
    says why CPU time decided (with the wall clock's ratio) or, on a busy host, why it could not."""
    from pytest_gpuperf.verdict.cputime import ClockSide, cpu_time_invalid

    cpu_base = baseline.cpu_view() if baseline is not None else None
    if (evidence.cpu is None or cpu_base is None or wall.verdict is Verdict.NO_BASELINE or baseline is None
            or not _cpu_backend(evidence.device)):
        return wall
    wall_samples = (tuple(v for g in evidence.process_samples_ms for v in g)
                    if evidence.process_samples_ms is not None else evidence.samples_ms)
    # a report read again (gpuperf compare): each process as its median, the CPU time per round as
    # stored, aligned with the report's rounds: the share from those rounds, as the plugin read it
    n = len(evidence.cpu.samples_ms)
    rounds = len(wall_samples) != n and len(evidence.samples_ms) == n
    current = ClockSide.of(evidence.cpu, evidence.samples_ms if rounds else wall_samples, evidence.host_busy)
    stored = ClockSide.of(baseline.cpu_time, baseline.samples_ms, baseline.host_busy)
    invalid = cpu_time_invalid(current, stored, options.threshold)
    cpu = None
    if invalid is None:
        if evidence.process_samples_ms is not None:
            groups = ([(m,) for m in evidence.cpu.process_medians_ms or ()] if rounds
                      else evidence.cpu.groups([len(g) for g in evidence.process_samples_ms]))
            cpu = judge_replicates(groups, cpu_base, options, benchmark_id=benchmark_id,
                                   baseline_file=baseline_file, can_fail=can_fail, prior=prior)
        else:
            cpu = judge(evidence.cpu.samples_ms, cpu_base, dataclasses.replace(options, confirm=0),
                        benchmark_id=benchmark_id, baseline_file=baseline_file, can_fail=can_fail)
    return _clock_chosen(wall, cpu, invalid, evidence.host_busy)


def with_reference(c: Comparison, evidence: Evidence, baseline: BaselineEntry | None, options: BenchOptions, *,
                   benchmark_id: str = "benchmark", baseline_file: str | None = None, can_fail: bool = True,
                   prior: "Prior | None" = None) -> Comparison:
    """The stored-baseline timing verdict read on the reference clock where the wall clock (and CPU
    time) left it inconclusive (a step of :func:`evaluate`, after :func:`with_cpu_time`; the
    stored stage's counterpart of :func:`ab_with_reference`): on the CPU backend, on a quiet host,
    with two or more worker processes on each side measured with the same reference probe,
    :func:`judge_replicates` on this run's ``evidence.ref_medians`` against the baseline's
    (:meth:`~pytest_gpuperf.verdict.history.BaselineEntry.ref_view`), both in ms at this run's
    median probe time (the time per call at this run's median speed), read with ``prior`` (the
    session's spread on this clock). A decisive verdict there stands, labelled ``clock`` ``"ref"``
    with a note giving the wall clock's reading; otherwise ``c`` is returned as it is. A regression
    decided here is confirmed by A/B like any other (:mod:`pytest_gpuperf.plugin.replicates`). Why
    (issue 45): the VM's speed modes move whole processes' medians (8 processes: 1.73x apart on the
    wall clock, 1.07x on this one; docs/verdicts.md)."""
    from pytest_gpuperf.verdict.cputime import REF

    ref, level = evidence.ref_medians, evidence.probe_ms
    if (c.verdict is not Verdict.INCONCLUSIVE or evidence.host_busy or baseline is None or not ref or len(ref) < 2
            or evidence.probe is None or not level or evidence.process_samples_ms is None
            or not _cpu_backend(evidence.device)):
        return c
    view = baseline.ref_view(evidence.probe, level)
    if view is None:
        return c
    r = judge_replicates([(m * level,) for m in ref], view, options, benchmark_id=benchmark_id,
                         baseline_file=baseline_file, can_fail=can_fail, prior=prior)
    if r.verdict is Verdict.INCONCLUSIVE:
        return c
    return dataclasses.replace(_on_reference(r, c, "decided"), clock=REF)


def _on_reference(r: Comparison, c: Comparison, what: str) -> Comparison:
    """``r`` (read on the reference clock) with the note saying it was ``what`` ("decided", …)
    there and what ``c``'s clock (inconclusive) read."""
    from pytest_gpuperf.core.units import format_ratio
    from pytest_gpuperf.verdict.cputime import CLOCK_NAMES, WALL

    said = f"{CLOCK_NAMES[c.clock or WALL]} inconclusive" + (f" {format_ratio(c.ratio)}" if c.ratio else "")
    return with_note(r, f"{what} on the wall clock relative to the reference probe timed beside each round ({said})")


def with_gpu_clock(timing: Comparison, evidence: Evidence, baseline: BaselineEntry | None, options: BenchOptions, *,
                   benchmark_id: str = "benchmark", baseline_file: str | None = None) -> Comparison:
    """The stored-baseline timing verdict checked in cycle space where the GPU's clock moved (a step
    of :func:`evaluate`; the rule is :func:`pytest_gpuperf.verdict.gpuclock.decide_with_cycles`):
    a ``regressed`` verdict whose baseline and this run both read the SM clock, at median clocks
    more than :data:`~pytest_gpuperf.verdict.gpuclock.CLOCK_DIFFERS` apart, is decided again on
    cycles per call (time x clock; :func:`judge_replicates` over the worker processes, else
    :func:`judge` without re-measure) against the baseline's
    (:meth:`~pytest_gpuperf.verdict.history.BaselineEntry.cycles_view`). Cycles that did not regress
    make it ``inconclusive`` (the clock, not the code); every other verdict is returned as it is."""
    from pytest_gpuperf.verdict.gpuclock import clocks_differ, decide_with_cycles

    clock = evidence.gpu_clock
    base = baseline.gpu_clock if baseline is not None else None
    if (timing.verdict is not Verdict.REGRESSED or clock is None or base is None
            or not clocks_differ(base.median_mhz, clock.median_mhz)):
        return timing
    view = baseline.cycles_view() if baseline is not None else None
    if view is None:
        return timing
    if evidence.process_samples_ms is not None:
        flat = tuple(v for g in evidence.process_samples_ms for v in g)
        groups = clock.groups(flat, [len(g) for g in evidence.process_samples_ms])
        cycles = (judge_replicates(groups, view, options, benchmark_id=benchmark_id, baseline_file=baseline_file)
                  if groups is not None else None)
    else:
        kc = clock.kcycles(evidence.samples_ms)
        cycles = (judge(kc, view, dataclasses.replace(options, confirm=0), benchmark_id=benchmark_id,
                        baseline_file=baseline_file) if kc is not None else None)
    return decide_with_cycles(timing, cycles, base.median_mhz, clock.median_mhz)


def _clock_chosen(wall: Comparison, cpu: Comparison | None, invalid: str | None, busy: str | None) -> Comparison:
    """The comparison :func:`~pytest_gpuperf.verdict.cputime.decide_clock` keeps, labelled with its
    ``clock`` and a note saying why CPU time decided (with the wall clock's verdict) or, on a busy
    host, why it could not."""
    from pytest_gpuperf.core.units import format_ratio
    from pytest_gpuperf.verdict.cputime import CPU, WALL, decide_clock

    chosen, clock = decide_clock(wall, cpu, invalid, busy)
    if clock == CPU:
        assert cpu is not None
        why = f"{busy}: decided on CPU time" if busy else "decided on CPU time, the wall clock being inconclusive"
        wall_said = f"wall clock {wall.verdict.value}" + (f" {format_ratio(wall.ratio)}" if wall.ratio else "")
        # the wall clock's own notes and advice (busy downgrade, measure longer) do not apply
        return dataclasses.replace(with_note(cpu, f"{why} ({wall_said})"), clock=CPU)
    if busy and invalid is not None:
        return dataclasses.replace(with_note(wall, f"CPU time cannot decide: {invalid}"), clock=WALL)
    return dataclasses.replace(wall, clock=WALL)


def ab_with_cpu_time(wall: Comparison, evidence: Evidence, reference: Reference, options: BenchOptions, *,
                     benchmark_id: str = "benchmark", confirm_from: int | None = None) -> Comparison:
    """The A/B timing verdict with CPU time in it (a step of :func:`evaluate`): where every block of
    both sides read CPU time, :func:`judge_ab` on the blocks' thread CPU time too, and the clock rule
    of :mod:`pytest_gpuperf.verdict.cputime` (A and B ran interleaved, so both sides share this
    run's ``evidence.host_busy``). Unchanged (``clock`` None) without CPU time or without side A."""
    from pytest_gpuperf.verdict.cputime import ClockSide, CpuTime, cpu_time_invalid

    blocks = evidence.ab_blocks or ()
    cpu_blocks = [b.cpu for b in blocks]
    if (wall.verdict is Verdict.NO_BASELINE or not blocks or any(b is None for b in cpu_blocks)
            or not _cpu_backend(evidence.device)):
        return wall

    def side(name: str) -> ClockSide:
        mine = [b for b in blocks if b.side == name]
        thread = tuple(v for b in mine for v in b.cpu_samples_ms)
        cpu = CpuTime(thread, tuple(v for b in mine for v in b.process_cpu_samples_ms))
        return ClockSide.of(cpu, tuple(v for b in mine for v in b.samples_ms), evidence.host_busy)

    invalid = cpu_time_invalid(side("B"), side("A"), options.threshold)
    cpu = None
    if invalid is None:
        cpu = judge_ab([b for b in cpu_blocks if b is not None], reference, options, benchmark_id=benchmark_id,
                       confirm_from=confirm_from)
    return _clock_chosen(wall, cpu, invalid, evidence.host_busy)


def _ab_timing(evidence: Evidence, reference: Reference, options: BenchOptions, *, benchmark_id: str,
               confirm_from: int | None) -> Comparison:
    """The A/B timing verdict of :func:`evaluate`: :func:`judge_ab` on the wall clock, then
    :func:`ab_with_cpu_time` and :func:`ab_with_reference` (which clock decides)."""
    assert evidence.ab_blocks is not None
    comparison = judge_ab(evidence.ab_blocks, reference, options, benchmark_id=benchmark_id,
                          confirm_from=confirm_from, throttle=evidence.throttle, busy_alike=evidence.busy_alike)
    comparison = ab_with_cpu_time(comparison, evidence, reference, options, benchmark_id=benchmark_id,
                                  confirm_from=confirm_from)
    return ab_with_reference(comparison, evidence, reference, options, benchmark_id=benchmark_id,
                             confirm_from=confirm_from)


def ab_with_reference(c: Comparison, evidence: Evidence, reference: Reference, options: BenchOptions, *,
                      benchmark_id: str = "benchmark", confirm_from: int | None = None) -> Comparison:
    """The A/B timing verdict read on the reference-normalized clock where the wall clock (and CPU
    time) left it inconclusive (a step of :func:`evaluate`, after :func:`ab_with_cpu_time`): with
    every block of both sides carrying its reference probe (:attr:`~pytest_gpuperf.verdict.paired.Block.referenced`),
    on a quiet host, :func:`judge_ab` on the normalized blocks; a decisive verdict there stands,
    labelled ``clock`` ``"ref"`` with a note giving the other clock's reading (an inconclusive one
    too where its CI is narrower, so that the A/B's moderated reading,
    :func:`~pytest_gpuperf.verdict.moderation.moderate_ab`, reads its pairs); its medians are the
    speed-normalized ones in ms (each side's median of rounds over probe, times the median probe
    time of the A/B: the time per call at this run's median speed), its recorded blocks the wall
    clock's. Why (issue 45): the VM's speed modes (1.5-2x,
    lasting tens of ms to seconds, CPU time slowed as much) fall between adjacent blocks and widen
    the A/B's CI; the probe timed beside each round moves with them (docs/verdicts.md). Unchanged
    on a busy host (CPU time's rule stands), without probes, without side A, or when already decided."""
    from pytest_gpuperf.verdict.cputime import REF

    blocks = evidence.ab_blocks or ()
    if c.verdict is not Verdict.INCONCLUSIVE or evidence.host_busy or not blocks or not _cpu_backend(evidence.device):
        return c
    normalized = [b.referenced for b in blocks]
    if any(b is None for b in normalized):
        return c
    r = judge_ab([b for b in normalized if b is not None], reference, options, benchmark_id=benchmark_id,
                 confirm_from=confirm_from)
    if r.ab is None or c.ab is None or (r.verdict is Verdict.INCONCLUSIVE and not _narrower(r, c)):
        return c
    r = _on_reference(r, c, "decided" if r.verdict is not Verdict.INCONCLUSIVE else "read, with a narrower CI,")
    import statistics

    level = statistics.median(p for b in blocks for p in b.probe_ms)  # ms: the probe at this run's median speed
    return dataclasses.replace(r, clock=REF, current_median_ms=(r.current_median_ms or 0.0) * level or None,
                               baseline_median_ms=(r.baseline_median_ms or 0.0) * level or None,
                               ab=dataclasses.replace(r.ab, blocks=c.ab.blocks))


def _narrower(a: Comparison, b: Comparison) -> bool:
    """Whether ``a``'s ratio CI is narrower than ``b``'s (in log ratio)."""
    import math

    if a.ratio_ci is None or b.ratio_ci is None or min(*a.ratio_ci, *b.ratio_ci) <= 0:
        return False
    return math.log(a.ratio_ci[1] / a.ratio_ci[0]) < math.log(b.ratio_ci[1] / b.ratio_ci[0])


def judge_ab(
    blocks: "Sequence[Block]",
    reference: Reference,
    options: BenchOptions,
    *,
    benchmark_id: str = "benchmark",
    confirm_from: int | None = None,
    throttle: str | None = None,
    busy_alike: str | None = None,
) -> Comparison:
    """The A/B timing verdict (a step of :func:`evaluate`): :func:`pytest_gpuperf.verdict.paired.decide_ab`
    on all ``blocks`` of both sides at once - the first process pairs and those of a confirmation
    (process pairs from ``confirm_from`` on) are decided together, once (the CI is over process
    pairs, so more pairs narrow it; no rule asks two separate tests to be significant).
    ``confirmed`` is None without confirmation blocks, else whether the pooled verdict is
    regressed. ``ab_blocks`` records (side, process, position, block median ms) for the report.
    ``throttle`` (e.g. a busy host: other processes slow A's and B's processes unequally) turns a
    regression into inconclusive, unless ``busy_alike`` (the two sides' host loads, alike:
    :func:`~pytest_gpuperf.verdict.machine.busy_alike`) and the regression is beyond 1 + T at the
    CI's lower end and in every one of 2 or more process pairs (:func:`beyond_in_every_pair`): the
    neighbour then slowed both sides' blocks alike, and no pair's speed mode explains the change
    (issue 45: on tensordict with one core busy, 7 of 28 true +50% slowdowns read so, pair ratios
    1.24x-18.9x, and were passed as inconclusive). Without A (``reference.ab_measured`` False) the verdict is
    ``no-baseline`` with ``reference.ab_missing_note``. Raises ``ValueError`` for no B blocks.
    """
    import statistics

    from pytest_gpuperf.verdict.paired import decide_ab, paired_ratios

    ref = reference.ab_ref or "REF"
    a = [v for b in blocks if b.side == "A" for v in b.samples_ms]
    b = [v for b in blocks if b.side == "B" for v in b.samples_ms]
    if not b:
        raise ValueError(f"{benchmark_id}: no B (working tree) blocks to decide on")
    if not reference.ab_measured or not a:
        return Comparison(verdict=Verdict.NO_BASELINE, benchmark_id=benchmark_id,
                          current_median_ms=statistics.median(b), runs=0, ab=ABEvidence(ref),
                          note=reference.ab_missing_note or f"new: not in {ref}",
                          threshold=options.threshold, alpha=options.alpha)
    c = decide_ab(paired_ratios(blocks), a_median_ms=statistics.median(a), b_median_ms=statistics.median(b),
                  ref=ref, threshold=options.threshold, alpha=options.alpha, benchmark_id=benchmark_id)
    extra = {x.side for x in blocks if confirm_from is not None and x.process >= confirm_from}
    if extra == {"A", "B"}:
        c = dataclasses.replace(c, confirmed=c.verdict is Verdict.REGRESSED)
    recorded = tuple((blk.side, blk.process, blk.position, statistics.median(blk.samples_ms)) for blk in blocks)
    assert c.ab is not None  # decide_ab always sets it
    c = dataclasses.replace(c, ab=dataclasses.replace(c.ab, blocks=recorded))
    if throttle is not None and busy_alike is not None and beyond_in_every_pair(c, options.threshold):
        return with_note(c, f"{throttle}, alike on both sides ({busy_alike}): the regression stands, beyond "
                            f"1+T={1 + options.threshold:.3f}x at the CI's lower end and in every pair of worker processes")
    return downgrade_throttled(c, throttle)


def beyond_in_every_pair(c: Comparison, threshold: float) -> bool:
    """Whether the A/B comparison ``c`` is a regression beyond ``1 + threshold`` at its CI's lower
    end and in each of its 2 or more process pairs' median ratios (``c.ab.process_ratios``). Pure."""
    ratios = c.ab.process_ratios if c.ab is not None else ()
    return (c.verdict is Verdict.REGRESSED and c.ratio_ci is not None and c.ratio_ci[0] > 1 + threshold
            and len(ratios) >= 2 and min(ratios) > 1 + threshold)
