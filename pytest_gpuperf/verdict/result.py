"""``BenchResult``: what one ``gpu_bench`` measurement returns (pure: no torch, no pytest)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

from pytest_gpuperf.core.containment import Unavailable, requested_parts
from pytest_gpuperf.core.options import BenchOptions, options_from_dict
from pytest_gpuperf.verdict.compare import Comparison, MemoryComparison, Verdict
from pytest_gpuperf.verdict.stats import STAT_FIELDS, Outliers, summarize


@dataclass(frozen=True)
class Overrun:
    """A measurement that took far longer than its ``max_time`` because one call is long:
    ``elapsed_s`` (s) against ``max_time_s`` (s), the median call ``call_ms`` (ms), and the
    ``min_rounds`` and ``warmup_calls`` that were still made. Advice for the suite's author; the
    session reports all of them in one line."""

    elapsed_s: float
    max_time_s: float
    call_ms: float
    min_rounds: int
    warmup_calls: int


@dataclass(frozen=True)
class BenchResult:
    """Timing of one benchmark: per-call times and their statistics, all in milliseconds.

    ``samples_ms`` holds one per-call time per round (a round of ``calls_per_round`` calls is
    timed as one interval and divided), in measurement order. ``median_ci_ms`` is the 95% CI of
    the median (order-statistic method; ``None`` under 6 rounds). ``outliers`` counts samples
    outside the Tukey fences; outliers are reported, never dropped. ``comparison`` is the verdict
    against the stored baseline, or ``None`` when not compared (smoke mode).

    ``smoke`` is True when the plugin ran without ``--gpuperf``: ``fn`` was called exactly once,
    ``samples_ms`` holds that single call's synchronized wall time, and there is no CI and no
    comparison. ``peak_memory_bytes`` is the peak memory (bytes) allocated by one extra call of
    ``fn`` made outside the timed rounds (``None`` in smoke mode), and ``memory_comparison`` its
    verdict against the baseline's peak and ``max_memory``. ``bottleneck`` is the
    :class:`~pytest_gpuperf.verdict.bottleneck.Bottleneck` (with ``expect_bottleneck`` or
    ``--gpuperf-classify``), ``trace_path`` the chrome trace saved on a regression or a
    misclassification, ``top_ops`` the profiler's top ops by device time then. ``telemetry`` is
    what the machine did during the timed rounds (GPU: NVML SM clock, throttle reasons,
    utilization, temperature, power; CPU: frequency and load), None where unavailable. ``value`` is the return value of the last call of ``fn`` (handy for correctness
    checks); it is never stored. ``notes`` are remarks on how the measurement went (e.g. it took far
    longer than ``max_time`` because one call is long), shown as warnings in the summary; not stored.
    ``counts`` are the exact counts of one extra call (:class:`~pytest_gpuperf.verdict.counts.Counts`: ops,
    kernels, syncs, copies, FLOPs, bytes, recompiles; None in smoke mode or with ``counts=False``)
    and ``count_comparison`` their gate against the baseline and the declared budgets.
    ``overrun`` (an :class:`Overrun`, not stored) says the measurement took far longer than
    ``max_time``. ``options`` are the benchmark's resolved :class:`~pytest_gpuperf.core.options.BenchOptions`
    (a mapping of option values, as a report stores them, is converted on construction:
    :func:`~pytest_gpuperf.core.options.options_from_dict`). ``extra_info`` is the test's own data (``gpu_bench.extra_info`` / ``benchmark.extra_info``), stored
    in reports and baselines when not empty. ``probe_ms`` is the median time (ms) of the interleaved
    machine-speed probe timed between the rounds and ``probe`` its name (see
    :mod:`pytest_gpuperf.measure.probe`); None when no probe ran (smoke mode, an injected measurer without
    probe support); stored in reports and baselines. ``process_medians_ms`` holds the median (ms)
    of each worker process that measured the benchmark (``--gpuperf-processes`` >= 2; in process
    order, ``samples_ms`` is their samples concatenated in that order), None when one process
    measured it; stored in reports and baselines. ``unavailable`` maps an extra that could not be
    measured (``"counts"``, ``"peak memory"``, ``"bottleneck"``, ``"trace"``, ``"memory snapshot"``)
    to why (:class:`~pytest_gpuperf.core.containment.Unavailable`); the timing and the other checks
    stand, and it is stored in reports and baselines. ``peak_memory_low_bytes``: the lowest peak
    (bytes) when the calls measured for peak memory differed (``peak_memory_bytes`` is then the
    highest); None when they agreed or one call was measured.
    """

    name: str
    device: str
    samples_ms: tuple[float, ...]
    rounds: int
    calls_per_round: int
    warmup_calls: int
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
    comparison: Comparison | None = None
    peak_memory_bytes: int | None = None
    memory_comparison: MemoryComparison | None = None
    bottleneck: Any = None  # pytest_gpuperf.verdict.bottleneck.Bottleneck
    trace_path: str | None = None
    telemetry: dict[str, Any] | None = None
    benchmark_id: str = ""
    group: str | None = None
    smoke: bool = False
    options: BenchOptions = field(default_factory=BenchOptions, compare=False)
    top_ops: str | None = field(default=None, repr=False, compare=False)
    value: Any = field(default=None, repr=False, compare=False)
    notes: tuple[str, ...] = field(default=(), repr=False, compare=False)
    counts: Any = None  # pytest_gpuperf.verdict.counts.Counts
    count_comparison: Any = None  # pytest_gpuperf.verdict.counts.CountComparison
    extra_info: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    probe_ms: float | None = None
    probe: str | None = None
    process_medians_ms: tuple[float, ...] | None = None
    overrun: Overrun | None = field(default=None, repr=False, compare=False)
    unavailable: Mapping[str, Unavailable] = field(default_factory=dict)
    peak_memory_low_bytes: int | None = None
    op_diff: Any = None  # pytest_gpuperf.verdict.opdiff.OpDiff: why an A/B verdict moved, op by op
    #: the op profile's cycles ({"floor_ms", "cycles"}: verdict.opdiff.compact_profile), made for a
    #: baseline while updating, or to diff a stored regression against its baseline's profile
    op_profile: Any = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.options, BenchOptions):  # a mapping of option values (as a report stores them)
            object.__setattr__(self, "options", options_from_dict(self.options))

    def rates(self) -> dict[str, float] | None:
        """Achieved rates at the median: ``flops_per_s`` (FLOP/s), ``bytes_per_s`` (B/s, minimum
        traffic), ``items_per_s`` (with the ``items_per_call`` option) and ``pct_of_peak_flops`` /
        ``pct_of_peak_bytes`` (percent of the calibrated peak, when the benchmark was classified).
        None in smoke mode or when nothing was counted or declared."""
        if self.smoke:
            return None
        from pytest_gpuperf.verdict.counts import throughput

        ev = getattr(self.bottleneck, "evidence", None)
        return throughput(self.median_ms, self.counts, self.options.items_per_call,
                          getattr(ev, "peak_flops_per_s", None), getattr(ev, "peak_bytes_per_s", None))

    @property
    def misclassified(self) -> bool:
        """True when ``expect_bottleneck`` was given and the measured class is not among them."""
        expected = self.options.expect_bottleneck
        return bool(expected) and self.bottleneck is not None and self.bottleneck.kind not in expected

    @property
    def host_busy(self) -> str | None:
        """``"host busy: other processes used 0.98 of 2 CPU cores while it ran"`` when the CPU
        telemetry says other processes competed for this run's cores
        (:func:`pytest_gpuperf.verdict.machine.host_busy`), else None."""
        from pytest_gpuperf.verdict.machine import host_busy

        return host_busy(self.telemetry)

    @property
    def misclassification_trusted(self) -> bool:
        """False when a misclassification was measured on a busy host: other processes slow the
        parts of a workload unequally (torch's intra-op threads wait for their slowest one, a
        single-threaded DataLoader does not), so the class can flip with the load. Such a
        mismatch fails only under ``--gpuperf-strict`` (and while updating baselines)."""
        return self.host_busy is None

    def failing(self, *, strict: bool = False, updating: bool = False) -> tuple[str, ...]:
        """Which checks fail this result's test, in order: ``"timing"``, ``"memory"``, ``"counts"``,
        ``"bottleneck"`` (empty: it passes). :func:`pytest_gpuperf.reporting.messages.failure_messages`
        words them.

        The one place that decides pass or fail, for the plugin and the reports alike: a timing
        regression (or, ``strict``, an inconclusive comparison), a memory regression, a peak over
        ``max_memory``, a count regression (the count gate), a count over a declared budget
        (``max_syncs``...), a misclassified bottleneck (on a busy host only with ``strict``, see
        :attr:`misclassification_trusted`), and an extra the user asked for by an option
        (``max_memory``, a count budget, ``expect_bottleneck``) that could not be measured
        (:attr:`missing_requested`). While ``updating`` baselines only the hard
        checks count (``max_memory``, the count budgets, ``expect_bottleneck``): a new baseline
        may be slower than the old one, but never over its own budget.
        """
        out = []
        c, m, cc = self.comparison, self.memory_comparison, self.count_comparison
        missing = self.missing_requested()
        if c is not None and c.fails(strict) and not updating:
            out.append("timing")
        if (m is not None and ((m.verdict is Verdict.REGRESSED and not updating) or m.over_budget)) or "peak memory" in missing:
            out.append("memory")
        if (cc is not None and ((cc.regressions() and not updating) or cc.over_budget)) or "counts" in missing:
            out.append("counts")
        if (self.misclassified and (strict or updating or self.misclassification_trusted)) or "bottleneck" in missing:
            out.append("bottleneck")
        return tuple(out)

    def missing_requested(self) -> dict[str, str]:
        """The extras this result's options ask for (``{"counts": "max_ops=12"}``, see
        :func:`~pytest_gpuperf.core.containment.requested_parts`) that could not be measured; empty in smoke mode."""
        if self.smoke or not self.unavailable:
            return {}
        return {part: option for part, option in requested_parts(self.options).items() if part in self.unavailable}

    @property
    def iqr_fraction(self) -> float:
        """IQR as a fraction of the median (a relative noise measure, dimensionless)."""
        return self.iqr_ms / self.median_ms if self.median_ms > 0 else float("nan")

    @classmethod
    def from_samples(
        cls,
        samples_ms: tuple[float, ...],
        *,
        name: str,
        device: str,
        rounds: int,
        calls_per_round: int,
        warmup_calls: int,
        **extra: Any,
    ) -> "BenchResult":
        """Build a result, computing every statistic from ``samples_ms`` (ms)."""
        s = summarize(samples_ms)
        stats = {name: getattr(s, name) for name in STAT_FIELDS + ("median_ci_ms", "outliers")}
        return cls(
            name=name,
            device=device,
            samples_ms=tuple(float(v) for v in samples_ms),
            rounds=rounds,
            calls_per_round=calls_per_round,
            warmup_calls=warmup_calls,
            **stats,
            **extra,
        )

    def stats_dict(self) -> dict[str, Any]:
        """The summary statistics as a JSON-ready dict (ms; CI as a 2-list; outlier counts)."""
        out: dict[str, Any] = {k: getattr(self, k) for k in STAT_FIELDS}
        out["median_ci_ms"] = list(self.median_ci_ms) if self.median_ci_ms else None
        out["outliers"] = dataclasses.asdict(self.outliers)
        return out
