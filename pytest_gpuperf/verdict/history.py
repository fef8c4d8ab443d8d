"""A benchmark's stored history, typed: :class:`RunRecord` per stored run and :class:`BaselineEntry`
per benchmark (pure: stdlib only).

These records are what the verdict pipeline (:mod:`pytest_gpuperf.verdict.gate`) compares with;
:mod:`pytest_gpuperf.storage.baseline` reads and writes them as JSON files (schema version 2, see
``pytest_gpuperf/storage/schema/baseline.schema.json``). A schema-1 entry (no ``history``) is a
history of one run.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence


@dataclass(frozen=True)
class RunRecord:
    """One stored baseline run in an entry's history: its median (ms) and where it came from.

    ``iqr_ms`` in ms, ``peak_memory_bytes`` in bytes; ``environment`` is the fingerprint of the
    machine that recorded it (with the reference-workload medians under ``"reference"``).
    ``counts``: the run's gated counts per call (``{"ops": 212, "syncs": 0, ...}``, with
    ``"varied": {"traffic_bytes": [lo, hi]}`` for counts that differed between its calls; see
    :mod:`pytest_gpuperf.verdict.counts`), None when the run was recorded without them. ``probe_ms``: the
    median time (ms) of the interleaved machine-speed probe during the run, ``probe`` its name
    (``"compute: 256x256 float32 matmul"``); None when recorded without a probe. ``ref_medians``:
    on the reference clock, each process's median of its rounds over that probe beside them
    (dimensionless; :mod:`pytest_gpuperf.verdict.refclock`), None when recorded without.
    """

    median_ms: float
    iqr_ms: float | None = None
    rounds: int | None = None
    timestamp_utc: str | None = None
    environment: Mapping[str, Any] | None = None
    git_commit: str | None = None
    peak_memory_bytes: int | None = None
    counts: Mapping[str, int] | None = None
    probe_ms: float | None = None
    probe: str | None = None
    process_medians_ms: tuple[float, ...] | None = None
    dirty: bool | None = None
    cpu_median_ms: float | None = None
    cpu_process_medians_ms: tuple[float, ...] | None = None
    ref_medians: tuple[float, ...] | None = None

    @property
    def estimate_ms(self) -> float:
        """This run's median as a verdict decides on it and every surface shows it (ms; issue 47):
        :func:`~pytest_gpuperf.verdict.estimate.run_estimate_ms` of ``median_ms`` (the pooled
        median of its rounds) and ``process_medians_ms``."""
        from pytest_gpuperf.verdict.estimate import run_estimate_ms

        return run_estimate_ms(self.median_ms, self.process_medians_ms)

    @property
    def cpu_estimate_ms(self) -> float | None:
        """The same statistic of its CPU time per call (ms), None when recorded without CPU time."""
        if self.cpu_median_ms is None:
            return None
        from pytest_gpuperf.verdict.estimate import run_estimate_ms

        return run_estimate_ms(self.cpu_median_ms, self.cpu_process_medians_ms)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "RunRecord":
        """From a stored history record (unknown keys are ignored)."""
        kw = {f: d.get(f) for f in _RUN_FIELDS
              if f not in ("median_ms", "counts", "probe_ms", "probe", "process_medians_ms", "dirty",
                           "cpu_median_ms", "cpu_process_medians_ms", "ref_medians")}
        probe_ms = d.get("probe_ms")
        probe_ms = float(probe_ms) if _positive_number(probe_ms) else None
        probe = d.get("probe") if isinstance(d.get("probe"), str) else None
        dirty = d.get("dirty") if isinstance(d.get("dirty"), bool) else None
        cpu = d.get("cpu_median_ms")
        return cls(**kw, median_ms=float(d["median_ms"]), counts=_run_counts(d.get("counts")),
                   probe_ms=probe_ms, probe=probe, process_medians_ms=process_medians(d), dirty=dirty,
                   cpu_median_ms=float(cpu) if _positive_number(cpu) else None,
                   cpu_process_medians_ms=process_medians(d, "cpu_process_medians_ms"),
                   ref_medians=process_medians(d, "ref_medians") if probe else None)


def process_medians(d: Mapping[str, Any], key: str = "process_medians_ms") -> tuple[float, ...] | None:
    """An entry's or run's ``process_medians_ms`` (or ``key``; positive finite numbers, ms), else None."""
    v = d.get(key)
    if isinstance(v, list) and v and all(_positive_number(x) for x in v):
        return tuple(float(x) for x in v)
    return None


def _positive_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0


_RUN_FIELDS = ("median_ms", "iqr_ms", "rounds", "timestamp_utc", "environment", "git_commit", "peak_memory_bytes",
               "counts", "probe_ms", "probe", "process_medians_ms", "dirty", "cpu_median_ms", "cpu_process_medians_ms",
               "ref_medians")


@dataclass(frozen=True)
class BaselineEntry:
    """One benchmark's stored baseline, typed (what every reader uses instead of the raw JSON).

    ``samples_ms``: per-call times of the newest stored run (ms, measurement order, at most 2,000);
    ``history``: the stored runs, oldest first, the newest included (a schema-1 entry is a history
    of one run); ``environment``, ``options``, ``peak_memory_bytes`` (bytes), ``stats`` (summary
    statistics, ms), ``git_commit`` and ``counts`` (a :class:`~pytest_gpuperf.verdict.counts.Counts` with
    its per-name breakdowns; None when recorded without) are the newest run's. ``data`` is the
    entry as stored (kept so that an update rewrites exactly what was read).
    """

    benchmark_id: str
    samples_ms: tuple[float, ...]
    history: tuple[RunRecord, ...]
    environment: Mapping[str, Any] | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    peak_memory_bytes: int | None = None
    stats: Mapping[str, Any] | None = None
    git_commit: str | None = None
    counts: Any = None  # pytest_gpuperf.verdict.counts.Counts
    data: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def count_history(self) -> tuple[Mapping[str, int], ...]:
        """The gated counts of the stored runs that have them, oldest first."""
        return tuple(r.counts for r in self.history if r.counts)

    @property
    def peak_memory_low_bytes(self) -> int | None:
        """The lowest peak (bytes) the newest run saw when its calls' peaks differed, else None."""
        v = self.data.get("peak_memory_low_bytes")
        return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None

    @property
    def unavailable(self) -> dict[str, Any]:
        """The extras the newest run could not measure (part -> :class:`~pytest_gpuperf.core.containment.Unavailable`)."""
        from pytest_gpuperf.core.containment import from_dict

        return from_dict(self.data.get("unavailable"))

    @property
    def run_medians_ms(self) -> tuple[float, ...]:
        """Medians (ms) of the stored runs, oldest first."""
        return tuple(r.median_ms for r in self.history)

    @property
    def median_ms(self) -> float:
        """Median (ms) of the newest stored run."""
        return self.history[-1].median_ms

    @property
    def replicate_medians_ms(self) -> tuple[float, ...]:
        """The baseline's process-level replicates (ms), what a replicated run is compared with: the
        newest run's per-process medians when it was measured by two or more worker processes; for a
        baseline recorded one process per run (before ``--gpuperf-processes``), the stored runs'
        medians, each run a single-process replicate."""
        newest = self.history[-1].process_medians_ms
        if newest is not None and len(newest) >= 2:
            return newest
        return self.run_medians_ms

    @property
    def cpu_time(self) -> Any:
        """The newest run's CPU time (:class:`~pytest_gpuperf.verdict.cputime.CpuTime`, its samples
        aligned with ``samples_ms``), None when it was recorded without."""
        from pytest_gpuperf.verdict.cputime import CpuTime

        cpu = CpuTime.from_dict(self.data.get("cpu_time"))
        return cpu if cpu is not None and len(cpu.samples_ms) == len(self.samples_ms) else None

    @property
    def gpu_clock(self) -> Any:
        """The newest run's SM clock (:class:`~pytest_gpuperf.verdict.gpuclock.GpuClock`, its readings
        aligned with ``samples_ms``), None when it was recorded without (the CPU, no NVML)."""
        from pytest_gpuperf.verdict.gpuclock import GpuClock

        clock = GpuClock.from_dict(self.data.get("gpu_clock"))
        return clock if clock is not None and len(clock.mhz) == len(self.samples_ms) else None

    def cycles_view(self) -> "BaselineEntry | None":
        """This entry in cycles per call (thousands of SM cycles, ms x MHz; issue 49): the newest
        run's samples times their clocks, and one run whose median is theirs and whose process
        medians are each process's median time times its median clock. None without a clock.
        What :func:`pytest_gpuperf.verdict.gate.with_gpu_clock` compares this run's cycles with."""
        clock = self.gpu_clock
        cycles = clock.kcycles(self.samples_ms) if clock is not None else None
        if clock is None or cycles is None:
            return None
        ms, mhz = self.history[-1].process_medians_ms, clock.process_medians_mhz
        medians = (tuple(a * b for a, b in zip(ms, mhz))
                   if ms is not None and mhz is not None and len(ms) == len(mhz) >= 2 else None)
        return BaselineEntry(self.benchmark_id, cycles, (RunRecord(float(statistics.median(cycles)),
                                                                   process_medians_ms=medians),),
                             options=self.options)

    @property
    def host_busy(self) -> str | None:
        """Why the newest run's host was busy while it was measured
        (:func:`~pytest_gpuperf.verdict.machine.host_busy` of its telemetry), None: quiet or unknown."""
        from pytest_gpuperf.verdict.machine import host_busy

        telemetry = self.data.get("telemetry")
        return host_busy(telemetry) if isinstance(telemetry, Mapping) else None

    def cpu_view(self) -> "BaselineEntry | None":
        """This entry on the CPU-time clock: the newest run's thread CPU samples, and a history of the
        stored runs' CPU-time medians (process medians too) when every run has them, else of the
        newest run alone. None when the newest run has no CPU time. What
        :func:`pytest_gpuperf.verdict.gate.with_cpu_time` compares this run's CPU time with."""
        cpu = self.cpu_time
        if cpu is None:
            return None
        if all(r.cpu_median_ms for r in self.history):
            runs = tuple(RunRecord(float(r.cpu_median_ms), process_medians_ms=r.cpu_process_medians_ms)  # type: ignore[arg-type]
                         for r in self.history)
        else:
            runs = (RunRecord(cpu.median_ms, process_medians_ms=cpu.process_medians_ms),)
        return BaselineEntry(self.benchmark_id, cpu.samples_ms, runs, options=self.options)

    def ref_view(self, probe: str, level_ms: float) -> "BaselineEntry | None":
        """This entry on the reference clock (:mod:`pytest_gpuperf.verdict.refclock`) in ms at the
        probe time ``level_ms``: one run whose process medians are the newest run's ``ref_medians``
        times ``level_ms`` (its median theirs). None unless the newest run was measured with the
        probe named ``probe`` by two or more processes. What
        :func:`pytest_gpuperf.verdict.gate.with_reference` compares this run's reference clock with."""
        newest = self.history[-1]
        if newest.probe != probe or newest.ref_medians is None or len(newest.ref_medians) < 2 or level_ms <= 0:
            return None
        medians = tuple(m * level_ms for m in newest.ref_medians)
        return BaselineEntry(self.benchmark_id, medians, (RunRecord(float(statistics.median(medians)),
                                                                    process_medians_ms=medians),),
                             options=self.options)

    @property
    def dirty(self) -> bool | None:
        """Whether the newest run was recorded from uncommitted changes to tracked files (baseline
        files aside): True, False, or None when unknown (recorded before this was stored)."""
        return self.history[-1].dirty

    def probe_level_ms(self, probe: str) -> float | None:
        """The stored level (ms) of the interleaved probe named ``probe``, what this run's probe is
        compared with: with 3+ stored runs (when the comparison uses the history's centre), the
        median of the probe medians of the runs measured with that probe; else the newest run's
        probe median when it used that probe. None when no such run is stored (an older baseline,
        or one recorded with another probe)."""
        if len(self.history) >= 3:
            levels = [r.probe_ms for r in self.history if r.probe == probe and r.probe_ms]
            return float(statistics.median(levels)) if levels else None
        newest = self.history[-1]
        return newest.probe_ms if newest.probe == probe and newest.probe_ms else None

    @property
    def reference(self) -> Mapping[str, Any] | None:
        """The reference-workload medians recorded with the newest run (``environment.reference``)."""
        ref = (self.environment or {}).get("reference")
        return ref if isinstance(ref, Mapping) else None

    @classmethod
    def from_samples(cls, benchmark_id: str, samples_ms: Sequence[float],
                     run_medians_ms: Sequence[float] | None = None) -> "BaselineEntry":
        """An entry built from samples alone (studies, tests): a history of the given run medians
        (default: one run whose median is that of ``samples_ms``)."""
        samples = tuple(float(v) for v in samples_ms)
        medians = list(run_medians_ms) if run_medians_ms else [float(statistics.median(samples))]
        return cls(benchmark_id, samples, tuple(RunRecord(float(m)) for m in medians))

    @classmethod
    def from_json(cls, benchmark_id: str, d: Mapping[str, Any]) -> "BaselineEntry":
        """From a stored entry that :func:`_check_entry` accepted."""
        peak = d.get("peak_memory_bytes")
        counts = None
        if isinstance(d.get("counts"), Mapping):
            from pytest_gpuperf.verdict.counts import Counts

            counts = Counts.from_dict(d["counts"])
        return cls(
            benchmark_id=str(benchmark_id),
            samples_ms=tuple(float(v) for v in d["samples_ms"]),
            history=tuple(RunRecord.from_dict(r) for r in history_of(d)),
            environment=d.get("environment") if isinstance(d.get("environment"), Mapping) else None,
            options=dict(d.get("options") or {}),
            peak_memory_bytes=peak if isinstance(peak, int) and not isinstance(peak, bool) else None,
            stats=d.get("stats"),
            git_commit=d.get("git_commit"),
            counts=counts,
            data=d,
        )


def run_record(entry: Mapping[str, Any]) -> dict[str, Any]:
    """The history record of the run an entry describes (its newest run)."""
    stats = entry.get("stats") or {}
    median = stats.get("median_ms")
    if not isinstance(median, (int, float)) or isinstance(median, bool):
        median = statistics.median(entry["samples_ms"])
    record = {
        "median_ms": float(median),
        "iqr_ms": stats.get("iqr_ms"),
        "rounds": entry.get("rounds"),
        "timestamp_utc": entry.get("timestamp_utc"),
        "environment": entry.get("environment"),
        "git_commit": entry.get("git_commit"),
        "peak_memory_bytes": entry.get("peak_memory_bytes"),
    }
    if _positive_number(entry.get("probe_ms")) and isinstance(entry.get("probe"), str):
        record["probe_ms"] = float(entry["probe_ms"])
        record["probe"] = entry["probe"]
        ref = process_medians(entry, "ref_medians")
        if ref is not None:
            record["ref_medians"] = list(ref)
    medians = process_medians(entry)
    if medians is not None:
        record["process_medians_ms"] = list(medians)
    if isinstance(entry.get("dirty"), bool):
        record["dirty"] = entry["dirty"]
    cpu = entry.get("cpu_time")
    if isinstance(cpu, Mapping) and _positive_number(cpu.get("median_ms")):
        record["cpu_median_ms"] = float(cpu["median_ms"])
        cpu_medians = process_medians(cpu)
        if cpu_medians is not None:
            record["cpu_process_medians_ms"] = list(cpu_medians)
    counts = _run_counts(entry.get("counts"))
    if counts:
        record["counts"] = counts
    return record


def _run_counts(counts: Any) -> dict[str, Any] | None:
    """The gated totals of an entry's ``counts`` with their ``varied`` ranges (no per-name
    breakdown: that is kept for the newest run only), or None."""
    from pytest_gpuperf.verdict.counts import stored_totals, stored_varied

    totals: dict[str, Any] = stored_totals(counts)
    varied = stored_varied(counts)
    if totals and varied:
        totals["varied"] = {f: list(r) for f, r in varied.items()}
    return totals or None


def history_of(entry: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The stored runs of an entry, oldest first; a schema-1 entry is a history of one run."""
    hist = entry.get("history")
    if isinstance(hist, list) and hist:
        return list(hist)
    return [run_record(entry)]
