"""``BenchResult``: what one ``gpu_bench`` measurement returns (pure: no torch, no pytest)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from pytest_gpuperf.core.containment import Unavailable, requested_parts
from pytest_gpuperf.core.options import BenchOptions, options_from_dict
from pytest_gpuperf.verdict.compare import Comparison, MemoryComparison, Verdict
from pytest_gpuperf.verdict.stats import STAT_FIELDS, Summary, summarize


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
class BenchTiming:
    """The timed rounds of one benchmark: per-call times and their statistics (ms).

    ``samples_ms`` holds one per-call time per round (a round of ``calls_per_round`` calls is timed
    as one interval and divided), in measurement order; ``stats`` is their
    :class:`~pytest_gpuperf.verdict.stats.Summary`, computed from exactly these samples by
    :meth:`of` (read back from a stored file, the statistics of the samples measured: a file keeps at
    most :data:`~pytest_gpuperf.verdict.stats.MAX_STORED_SAMPLES` of them). ``warmup_calls``:
    untimed calls before the rounds. ``process_medians_ms``: the median (ms) of each worker process
    that measured it (``--gpuperf-processes`` >= 2, in process order; ``samples_ms`` is their
    samples concatenated), None when one process measured it. ``probe_ms``: the median time (ms) of
    the interleaved machine-speed probe named ``probe`` (:mod:`pytest_gpuperf.measure.probe`), None
    when no probe ran. ``ranks``: under ``torchrun``, each rank's median, the slowest rank and the
    imbalance (:class:`~pytest_gpuperf.verdict.distributed.RankTiming`; ``samples_ms`` is then the
    slowest rank's time of each round), None in one process. ``cpu``: the CPU time of the same
    rounds (:class:`~pytest_gpuperf.verdict.cputime.CpuTime`: the calling thread's and the process's,
    aligned with ``samples_ms``), None where it was not read (CUDA, scripted timings without it).
    ``gpu_clock``: on CUDA with NVML, the SM clock of the same rounds
    (:class:`~pytest_gpuperf.verdict.gpuclock.GpuClock`, aligned with ``samples_ms``; throttled
    rounds already left out), None where it was not read. ``ref_medians``: on the reference clock
    (:mod:`pytest_gpuperf.verdict.refclock`), each process's median of its rounds over the reference
    probe beside them (dimensionless: multiples of the time of the probe named ``probe``; process
    order, one per process), None where no reference probe ran (CUDA, torchrun).
    """

    samples_ms: tuple[float, ...]
    rounds: int
    calls_per_round: int
    warmup_calls: int
    stats: Summary
    process_medians_ms: tuple[float, ...] | None = None
    probe_ms: float | None = None
    probe: str | None = None
    ranks: Any = None  # pytest_gpuperf.verdict.distributed.RankTiming
    cpu: Any = None  # pytest_gpuperf.verdict.cputime.CpuTime
    gpu_clock: Any = None  # pytest_gpuperf.verdict.gpuclock.GpuClock
    ref_medians: tuple[float, ...] | None = None

    @classmethod
    def of(cls, samples_ms: Sequence[float], **fields: Any) -> "BenchTiming":
        """The timing of ``samples_ms`` (ms) with its statistics computed from them; ``fields`` are
        the other fields. Raises ``ValueError`` for no samples or a non-finite one."""
        samples = tuple(float(v) for v in samples_ms)
        return cls(samples_ms=samples, stats=summarize(samples), **fields)


@dataclass(frozen=True)
class BenchExtras:
    """What was measured beside the timing, by extra calls of ``fn`` outside the timed rounds.

    ``peak_memory_bytes``: the peak memory (bytes) allocated by a call (the highest when the calls
    measured differed, ``peak_memory_low_bytes`` then the lowest); ``counts``: the exact counts of
    one call (:class:`~pytest_gpuperf.verdict.counts.Counts`: ops, kernels, syncs, copies, FLOPs,
    bytes, recompiles); ``bottleneck``: the :class:`~pytest_gpuperf.verdict.bottleneck.Bottleneck`;
    ``telemetry``: what the machine did during the timed rounds (GPU: NVML SM clock, throttle
    reasons, utilization, temperature, power; CPU: frequency and load); ``communication``: under
    torchrun, each rank's communication per call, its share of the step and its overlap with
    computation (:class:`~pytest_gpuperf.verdict.communication.Communication`); ``instructions``:
    the host's instructions per call under callgrind
    (:class:`~pytest_gpuperf.verdict.instructions.Instructions`). Each None when not measured.
    ``unavailable`` maps an extra that could not be measured (``"counts"``, ``"peak memory"``,
    ``"bottleneck"``, ``"trace"``, ``"memory snapshot"``) to why
    (:class:`~pytest_gpuperf.core.containment.Unavailable`); the timing and the other checks stand.
    """

    peak_memory_bytes: int | None = None
    peak_memory_low_bytes: int | None = None
    counts: Any = None  # pytest_gpuperf.verdict.counts.Counts
    bottleneck: Any = None  # pytest_gpuperf.verdict.bottleneck.Bottleneck
    telemetry: dict[str, Any] | None = None
    unavailable: Mapping[str, Unavailable] = field(default_factory=dict)
    communication: Any = None  # pytest_gpuperf.verdict.communication.Communication
    instructions: Any = None  # pytest_gpuperf.verdict.instructions.Instructions (--gpuperf-instructions)


@dataclass(frozen=True)
class BenchEvaluation:
    """The verdicts on one result: ``comparison`` (timing against the baseline or side A),
    ``memory_comparison`` (peak memory against the baseline's and ``max_memory``),
    ``count_comparison`` (:class:`~pytest_gpuperf.verdict.counts.CountComparison`: the count gate
    and the declared budgets) and ``op_diff`` (:class:`~pytest_gpuperf.verdict.opdiff.OpDiff`: why
    a verdict moved, op by op), ``scaling`` (:class:`~pytest_gpuperf.verdict.scaling.ScalingCheck`:
    under torchrun, the efficiency against the baseline at a smaller world size and the
    ``min_scaling_efficiency`` gate), ``instruction_comparison``
    (:class:`~pytest_gpuperf.verdict.instructions.InstructionVerdict`: the instruction gate). Each
    None when not decided (smoke mode, no baseline for it)."""

    comparison: Comparison | None = None
    memory_comparison: MemoryComparison | None = None
    count_comparison: Any = None  # pytest_gpuperf.verdict.counts.CountComparison
    op_diff: Any = None  # pytest_gpuperf.verdict.opdiff.OpDiff
    scaling: Any = None  # pytest_gpuperf.verdict.scaling.ScalingCheck
    instruction_comparison: Any = None  # pytest_gpuperf.verdict.instructions.InstructionVerdict


@dataclass(frozen=True)
class BenchDiagnostics:
    """What helps a person read a result, beside the verdicts: ``trace_path`` (the chrome trace
    saved on a regression or a misclassification), ``top_ops`` (the profiler's top ops by device
    time then), ``op_profile`` (the op profile's cycles, ``{"floor_ms", "cycles"}``:
    :func:`pytest_gpuperf.verdict.opdiff.compact_profile`, made for a baseline while updating or to
    diff a stored regression), ``notes`` (remarks on how the measurement went, shown as warnings;
    not stored) and ``overrun`` (an :class:`Overrun`, not stored)."""

    trace_path: str | None = None
    top_ops: str | None = None
    op_profile: Any = None
    notes: tuple[str, ...] = ()
    overrun: Overrun | None = None


#: Each part of a :class:`BenchResult` and its type: a flat field name (``comparison=``,
#: ``peak_memory_bytes=``) given to :meth:`BenchResult.from_samples` or :meth:`BenchResult.replace`
#: goes to the part that holds it.
PARTS: dict[str, type] = {"timing": BenchTiming, "extras": BenchExtras, "evaluation": BenchEvaluation,
                          "diagnostics": BenchDiagnostics}
_ROUTE: dict[str, str] = {f.name: part for part, cls in PARTS.items() for f in dataclasses.fields(cls)
                          if f.name != "stats"}


def _by_part(fields: Mapping[str, Any]) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """``fields`` by flat name split into each part's fields (only the parts named) and the
    result's own."""
    parts: dict[str, dict[str, Any]] = {}
    own: dict[str, Any] = {}
    for key, value in fields.items():
        if key in _ROUTE:
            parts.setdefault(_ROUTE[key], {})[key] = value
        else:
            own[key] = value
    return parts, own


def _via(part: str, name: str) -> Any:
    """A read-only property giving ``self.<part>.<name>``: the flat names of results before the
    split (issue 33) stay readable."""
    return property(lambda self: getattr(getattr(self, part), name),
                    doc=f"``{part}.{name}`` (see :class:`{PARTS[part].__name__}`).")


def _stat(name: str) -> Any:
    return property(lambda self: getattr(self.timing.stats, name),
                    doc=f"``timing.stats.{name}`` (ms; see :class:`~pytest_gpuperf.verdict.stats.Summary`).")


@dataclass(frozen=True)
class BenchResult:
    """One benchmark's result, in four parts: :class:`BenchTiming` (``timing``: samples and
    statistics, ms), :class:`BenchExtras` (``extras``: peak memory, counts, bottleneck, telemetry,
    what could not be measured), :class:`BenchEvaluation` (``evaluation``: the verdicts) and
    :class:`BenchDiagnostics` (``diagnostics``: trace, top ops, op profile, notes). Assembled by
    :meth:`from_samples` (the one place a result is built) and changed by :meth:`replace`, both of
    which take the parts' fields by their flat names. Every part's field reads flat too
    (``result.median_ms``, ``result.comparison``, ``result.peak_memory_bytes``).

    ``name``/``benchmark_id``/``group``: the benchmark's display name, full id and group;
    ``device``: where it ran. ``smoke`` is True when the plugin ran without ``--gpuperf``: ``fn``
    was called exactly once, ``samples_ms`` holds that single call's synchronized wall time, and
    there is no CI and no comparison. ``options`` are the benchmark's resolved
    :class:`~pytest_gpuperf.core.options.BenchOptions` (a mapping of option values, as a report
    stores them, is converted on construction: :func:`~pytest_gpuperf.core.options.options_from_dict`).
    ``extra_info`` is the test's own data (``gpu_bench.extra_info`` / ``benchmark.extra_info``),
    stored in reports and baselines when not empty. ``value`` is the return value of the last call
    of ``fn`` (handy for correctness checks); it is never stored.
    """

    name: str
    device: str
    timing: BenchTiming
    extras: BenchExtras = field(default_factory=BenchExtras)
    evaluation: BenchEvaluation = field(default_factory=BenchEvaluation)
    diagnostics: BenchDiagnostics = field(default_factory=BenchDiagnostics, repr=False, compare=False)
    benchmark_id: str = ""
    group: str | None = None
    smoke: bool = False
    options: BenchOptions = field(default_factory=BenchOptions, compare=False)
    extra_info: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    value: Any = field(default=None, repr=False, compare=False)

    samples_ms = _via("timing", "samples_ms")
    rounds = _via("timing", "rounds")
    calls_per_round = _via("timing", "calls_per_round")
    warmup_calls = _via("timing", "warmup_calls")
    process_medians_ms = _via("timing", "process_medians_ms")
    probe_ms = _via("timing", "probe_ms")
    probe = _via("timing", "probe")
    ranks = _via("timing", "ranks")
    cpu = _via("timing", "cpu")
    gpu_clock = _via("timing", "gpu_clock")
    ref_medians = _via("timing", "ref_medians")
    mean_ms = _stat("mean_ms")
    std_ms = _stat("std_ms")
    min_ms = _stat("min_ms")
    max_ms = _stat("max_ms")
    median_ms = _stat("median_ms")
    p5_ms = _stat("p5_ms")
    p25_ms = _stat("p25_ms")
    p75_ms = _stat("p75_ms")
    p90_ms = _stat("p90_ms")
    p95_ms = _stat("p95_ms")
    p99_ms = _stat("p99_ms")
    iqr_ms = _stat("iqr_ms")
    median_ci_ms = _stat("median_ci_ms")
    outliers = _stat("outliers")
    peak_memory_bytes = _via("extras", "peak_memory_bytes")
    peak_memory_low_bytes = _via("extras", "peak_memory_low_bytes")
    counts = _via("extras", "counts")
    bottleneck = _via("extras", "bottleneck")
    telemetry = _via("extras", "telemetry")
    unavailable = _via("extras", "unavailable")
    communication = _via("extras", "communication")
    instructions = _via("extras", "instructions")
    instruction_comparison = _via("evaluation", "instruction_comparison")
    comparison = _via("evaluation", "comparison")
    memory_comparison = _via("evaluation", "memory_comparison")
    count_comparison = _via("evaluation", "count_comparison")
    op_diff = _via("evaluation", "op_diff")
    scaling = _via("evaluation", "scaling")
    trace_path = _via("diagnostics", "trace_path")
    top_ops = _via("diagnostics", "top_ops")
    op_profile = _via("diagnostics", "op_profile")
    notes = _via("diagnostics", "notes")
    overrun = _via("diagnostics", "overrun")

    def __post_init__(self) -> None:
        if not isinstance(self.options, BenchOptions):  # a mapping of option values (as a report stores them)
            object.__setattr__(self, "options", options_from_dict(self.options))

    @property
    def estimate_ms(self) -> float:
        """The run's central value on the wall clock (ms), computed once and shown as its "median" by
        every surface (table, message, JSON ``estimate_ms``, Markdown, JUnit, history, dashboard,
        ``gpuperf show``; issue 47): the timing comparison's ``current_median_ms`` where one was
        decided on the wall clock (what its ratio divides), else
        :func:`~pytest_gpuperf.verdict.estimate.run_estimate_ms` of this run (the geometric mean of
        its worker processes' medians, a slow one set aside, or the median of its rounds in one
        process). The median of all rounds pooled stays ``median_ms`` ("pooled median")."""
        c = self.comparison
        if c is not None and not self.smoke and c.clock != "cpu" and c.current_median_ms:
            return float(c.current_median_ms)
        from pytest_gpuperf.verdict.estimate import run_estimate_ms

        return run_estimate_ms(self.median_ms, self.process_medians_ms)

    @property
    def cpu_estimate_ms(self) -> float | None:
        """The same central value on the calling thread's CPU time (ms; the "CPU" column): the
        comparison's ``current_median_ms`` where CPU time decided, else
        :func:`~pytest_gpuperf.verdict.estimate.run_estimate_ms` of the CPU time's process medians;
        None where CPU time was not read."""
        cpu, c = self.cpu, self.comparison
        if cpu is None or self.smoke:
            return None
        if c is not None and c.clock == "cpu" and c.current_median_ms:
            return float(c.current_median_ms)
        from pytest_gpuperf.verdict.estimate import run_estimate_ms

        return run_estimate_ms(cpu.median_ms, cpu.process_medians_ms)

    def rates(self) -> dict[str, float] | None:
        """Achieved rates at the run's median (:attr:`estimate_ms`): ``flops_per_s`` (FLOP/s), ``bytes_per_s`` (B/s, minimum
        traffic), ``items_per_s`` (with the ``items_per_call`` option), ``pct_of_peak_flops`` /
        ``pct_of_peak_bytes`` (percent of the calibrated peak, when the benchmark was classified)
        and ``algbw_gb_per_s`` / ``busbw_gb_per_s`` (a bare collective: :meth:`bus_bandwidth`).
        None in smoke mode or when nothing was counted or declared."""
        if self.smoke:
            return None
        from pytest_gpuperf.verdict.counts import throughput

        ev = getattr(self.bottleneck, "evidence", None)
        out = throughput(self.estimate_ms, self.counts, self.options.items_per_call,
                         getattr(ev, "peak_flops_per_s", None), getattr(ev, "peak_bytes_per_s", None))
        bus = self.bus_bandwidth()
        return {**(out or {}), **bus} if bus else out

    def bus_bandwidth(self) -> dict[str, float]:
        """``{"algbw_gb_per_s", "busbw_gb_per_s"}`` (GB/s: 1e9 bytes/s) of a bare collective at the
        median call time, with nccl-tests' formulas
        (:func:`~pytest_gpuperf.verdict.communication.bandwidth`), for a benchmark that declares
        ``collective=`` and ``bytes_per_call=`` and ran under torchrun (the ranks: ``ranks``'s world
        size); empty otherwise."""
        o = self.options
        if not (o.collective and o.bytes_per_call and self.ranks is not None and self.estimate_ms > 0):
            return {}
        from pytest_gpuperf.verdict.communication import bandwidth

        algbw, busbw = bandwidth(o.collective, o.bytes_per_call, self.estimate_ms / 1e3, self.ranks.world_size)
        return {"algbw_gb_per_s": algbw, "busbw_gb_per_s": busbw}

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
        ``"bottleneck"``, ``"scaling"``, ``"instructions"`` (empty: it passes). :func:`pytest_gpuperf.reporting.messages.failure_messages`
        words them.

        The one place that decides pass or fail, for the plugin and the reports alike: a timing
        regression (or, ``strict``, an inconclusive comparison), a memory regression, a peak over
        ``max_memory``, a count regression (the count gate), a count over a declared budget
        (``max_syncs``...), a misclassified bottleneck (on a busy host only with ``strict``, see
        :attr:`misclassification_trusted`), and an extra the user asked for by an option
        (``max_memory``, a count budget, ``expect_bottleneck``) that could not be measured
        (:attr:`missing_requested`), a scaling efficiency below ``min_scaling_efficiency`` (under
        torchrun), instructions per call over the baseline's beyond their tolerance (the instruction
        gate, ``--gpuperf-instructions``). While ``updating`` baselines only the hard checks count (``max_memory``, the
        count budgets, ``expect_bottleneck``, ``min_scaling_efficiency``): a new baseline
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
        if self.scaling is not None and self.scaling.failed:
            out.append("scaling")
        if self.instruction_comparison is not None and self.instruction_comparison.failed and not updating:
            out.append("instructions")
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
        samples_ms: Sequence[float],
        *,
        name: str,
        device: str,
        rounds: int,
        calls_per_round: int,
        warmup_calls: int,
        stats: Summary | None = None,
        **fields: Any,
    ) -> "BenchResult":
        """Assemble a result: the one place one is built. ``samples_ms`` (ms) and the statistics
        computed from them (``stats``: a stored file's statistics, when its samples were thinned),
        and ``fields`` by their flat names: a part's field (``comparison=``,
        ``peak_memory_bytes=``, ``probe_ms=``) goes to that part, the others (``benchmark_id=``,
        ``smoke=``, ``options=``…) are the result's own. Raises ``ValueError`` for no samples or a
        non-finite one, ``TypeError`` for a name that is no field."""
        parts, own = _by_part(fields)
        parts = {part: parts.get(part, {}) for part in PARTS}
        t = dict(rounds=rounds, calls_per_round=calls_per_round, warmup_calls=warmup_calls, **parts.pop("timing"))
        samples = tuple(float(v) for v in samples_ms)
        timing = BenchTiming.of(samples, **t) if stats is None else BenchTiming(samples_ms=samples, stats=stats, **t)
        return cls(name=name, device=device, timing=timing,
                   **{part: PARTS[part](**values) for part, values in parts.items()}, **own)

    def replace(self, **changes: Any) -> "BenchResult":
        """This result with ``changes`` by their flat names (see :meth:`from_samples`): a part's
        field changes that part. New samples need :meth:`from_samples` (their statistics), so
        ``samples_ms`` is refused here (``TypeError``), as is a name that is no field."""
        if "samples_ms" in changes:
            raise TypeError("BenchResult.replace cannot change samples_ms: assemble with BenchResult.from_samples")
        parts, own = _by_part(changes)
        for part, values in parts.items():
            own[part] = dataclasses.replace(getattr(self, part), **values)
        return dataclasses.replace(self, **own)

    def stats_dict(self) -> dict[str, Any]:
        """The summary statistics as a JSON-ready dict (ms; CI as a 2-list; outlier counts)."""
        s = self.timing.stats
        out: dict[str, Any] = {k: getattr(s, k) for k in STAT_FIELDS}
        out["median_ci_ms"] = list(s.median_ci_ms) if s.median_ci_ms else None
        out["outliers"] = dataclasses.asdict(s.outliers)
        return out
