"""Bottleneck classification from a profiler trace and roofline figures (pure: no torch, no pytest).

Classes (the field's standard terms):

* ``compute``  — math throughput: arithmetic intensity at or above the ridge point;
* ``memory``   — DRAM bandwidth: arithmetic intensity below the ridge point;
* ``overhead`` — host-side launch, Python and dispatcher overhead: the device idles between many
  short kernels (GPU), or per-op overhead dominates the wall time (CPU);
* ``sync``     — host–device synchronisation stalls inside the region (``.item()``, ``.cpu()``,
  ``torch.cuda.synchronize``, blocking copies) explain the device's idle time;
* ``transfer`` — host↔device copies dominate;
* ``data``     — time inside ``DataLoader`` iteration dominates.

Decision, in order (thresholds in :class:`Thresholds`, all overridable):

1. ``data_fraction >= data`` → data;
2. ``copy_fraction >= transfer`` → transfer;
3. GPU: ``idle_fraction >= idle`` → sync if ``sync_s >= sync_share * idle_s`` (time inside
   synchronizing calls) or ``sync_idle_s >= sync_share * idle_s`` (idle gaps in which a
   synchronizing call returned: after ``.item()`` the wait can be microseconds while the gap
   that follows is Python and launch time the sync caused), else overhead;
   CPU: ``overhead_fraction >= cpu_overhead`` → overhead;
4. roofline: ``flops / bytes >= peak_flops / peak_bytes_per_s`` (the ridge point) → compute, else memory.

Method after H. He, "Making Deep Learning Go Brrrr From First Principles" (the compute / memory /
overhead triad), HolisticTraceAnalysis's idle-time and host-wait definitions
(facebookresearch/HolisticTraceAnalysis, ``breakdown_analysis.py``), and the roofline model
(Williams, Waterman & Patterson, CACM 2009).
"""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from pytest_gpuperf.core.options import CLASSES, check_expected  # noqa: F401 (the class names options validate)
from pytest_gpuperf.core.units import format_ms


#: Runtime/driver calls that block the host until the device catches up.
SYNC_CALLS = frozenset({
    "cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaMemcpy",
    "cudaMemcpy2D", "cudaMemcpyFromSymbol", "cudaMemcpyToSymbol", "cuStreamSynchronize",
    "cuCtxSynchronize", "cuEventSynchronize", "cuMemcpyDtoH_v2", "cuMemcpyHtoD_v2",
})
#: Annotation prefix torch's profiler gives each DataLoader step.
DATALOADER_PREFIX = "enumerate(DataLoader)"
#: Annotation prefix of ``gpu_bench.phase(name)`` regions.
PHASE_PREFIX = "gpuperf::phase::"
#: Annotation around the profiled calls.
REGION_NAME = "gpuperf::region"
#: Annotation around the plugin's own closing synchronize (not counted as a sync stall).
FINAL_SYNC_NAME = "gpuperf::final_sync"


@dataclass(frozen=True)
class Thresholds:
    """Decision thresholds (fractions of the region's wall time unless said otherwise).

    ``data``: DataLoader share that makes a region data-bound (0.5).
    ``transfer``: host↔device copy share that makes it transfer-bound (0.5).
    ``idle``: device-idle share above which a GPU region is sync- or overhead-bound (0.5).
    ``sync_share``: share of the idle time that synchronising calls must cover for ``sync`` (0.5).
    ``cpu_overhead``: share of wall time spent in per-op overhead (Python between ops plus the
    calibrated fixed cost of each top-level op) that makes a CPU region overhead-bound (0.5).
    """

    data: float = 0.5
    transfer: float = 0.5
    idle: float = 0.5
    sync_share: float = 0.5
    cpu_overhead: float = 0.5

    @classmethod
    def parse(cls, text: str) -> "Thresholds":
        """Parse ``"idle=0.6, data=0.4"`` (the ``gpuperf_bottleneck_thresholds`` ini value).

        Raises ``ValueError`` naming an unknown key or a value outside (0, 1].
        """
        values: dict[str, float] = {}
        names = [f.name for f in dataclasses.fields(cls)]
        for part in filter(None, (p.strip() for p in text.replace("\n", ",").split(","))):
            key, sep, val = part.partition("=")
            key = key.strip()
            if not sep or key not in names:
                raise ValueError(f"bottleneck threshold {part!r}: expected NAME=FRACTION with NAME in {', '.join(names)}")
            try:
                v = float(val)
            except ValueError:
                raise ValueError(f"bottleneck threshold {part!r}: {val.strip()!r} is not a number") from None
            if not 0 < v <= 1:
                raise ValueError(f"bottleneck threshold {part!r}: expected a fraction in (0, 1]")
            values[key] = v
        return cls(**values)


@dataclass(frozen=True)
class TraceEvent:
    """One profiler event, reduced to what the analysis needs. Times in ns.

    ``kind``: ``cpu_op``, ``annotation``, ``kernel``, ``memcpy``, ``memset``, ``runtime`` or ``other``.
    ``correlation`` links a kernel/memcpy to the runtime call that launched it (0: none).
    """

    name: str
    kind: str
    start_ns: int
    end_ns: int
    correlation: int = 0

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


@dataclass(frozen=True)
class Evidence:
    """What a profiled region did, per call. Times in seconds, fractions of ``wall_s``.

    GPU: ``busy_s`` is the union of device activity (kernels, memsets, device-to-device copies),
    ``copy_s`` of host↔device copies, ``idle_s = wall_s - union(busy, copies)``; ``kernel_count``
    and ``kernel_median_s`` describe the kernels; ``host_wait_s`` sums the idle gaps in which the
    next kernel's launch started after the previous kernel ended (HTA's host-wait); ``sync_s`` is
    the time inside synchronizing calls and ``sync_idle_s`` the idle gaps in which one returned.
    CPU: ``busy_s`` is the union of top-level op time, ``kernel_count`` counts top-level ops and
    ``overhead_s`` estimates Python plus per-op dispatch cost.
    Roofline: ``flops`` and ``bytes`` per call, ``peak_flops_per_s``/``peak_bytes_per_s`` the
    calibrated ceilings (FLOP/s, bytes/s), ``dtype`` the dtype the FLOP peak was measured for.
    """

    device_type: str
    calls: int
    wall_s: float
    busy_s: float = 0.0
    copy_s: float = 0.0
    idle_s: float = 0.0
    data_s: float = 0.0
    sync_s: float = 0.0
    host_wait_s: float = 0.0
    overhead_s: float = 0.0
    kernel_count: int = 0
    kernel_median_s: float = 0.0
    flops: float | None = None
    bytes: float | None = None
    peak_flops_per_s: float | None = None
    peak_bytes_per_s: float | None = None
    dtype: str | None = None
    phases: dict[str, float] = field(default_factory=dict)
    #: GPU: device-idle time in the gaps during which a synchronizing call returned (the queue
    #: had drained because the host waited; what follows until the next kernel is the cost of
    #: that sync, even when the blocking call itself took microseconds).
    sync_idle_s: float = 0.0

    def fraction(self, seconds: float) -> float:
        return seconds / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def arithmetic_intensity(self) -> float | None:
        """FLOPs per byte moved (None without both counts)."""
        if self.flops is None or not self.bytes:
            return None
        return self.flops / self.bytes

    @property
    def ridge_point(self) -> float | None:
        """Peak FLOP/s over peak bytes/s: the intensity where a kernel turns compute-bound."""
        if not self.peak_flops_per_s or not self.peak_bytes_per_s:
            return None
        return self.peak_flops_per_s / self.peak_bytes_per_s

    @property
    def compute_time_s(self) -> float:
        """The time the roofline rates are computed over: device busy time, else the wall time."""
        return self.busy_s if self.busy_s > 0 else self.wall_s

    @property
    def achieved_flops_per_s(self) -> float | None:
        """FLOPs per second of device-busy time (None without a count or a measured time)."""
        t = self.compute_time_s
        return None if self.flops is None or t <= 0 else self.flops / t

    @property
    def achieved_bytes_per_s(self) -> float | None:
        """Bytes per second of device-busy time (None without a count or a measured time)."""
        t = self.compute_time_s
        return None if self.bytes is None or t <= 0 else self.bytes / t

    @property
    def pct_of_peak_flops(self) -> float | None:
        a = self.achieved_flops_per_s
        return None if a is None or not self.peak_flops_per_s else 100.0 * a / self.peak_flops_per_s

    @property
    def pct_of_peak_bandwidth(self) -> float | None:
        a = self.achieved_bytes_per_s
        return None if a is None or not self.peak_bytes_per_s else 100.0 * a / self.peak_bytes_per_s

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict including the derived roofline figures."""
        d = dataclasses.asdict(self)
        d.update(
            arithmetic_intensity=self.arithmetic_intensity,
            ridge_point=self.ridge_point,
            achieved_flops_per_s=self.achieved_flops_per_s,
            achieved_bytes_per_s=self.achieved_bytes_per_s,
            pct_of_peak_flops=self.pct_of_peak_flops,
            pct_of_peak_bandwidth=self.pct_of_peak_bandwidth,
            busy_fraction=self.fraction(self.busy_s),
            idle_fraction=self.fraction(self.idle_s),
            data_fraction=self.fraction(self.data_s),
            copy_fraction=self.fraction(self.copy_s),
            host_wait_fraction=self.fraction(self.host_wait_s),
            overhead_fraction=self.fraction(self.overhead_s),
        )
        return d


@dataclass(frozen=True)
class Bottleneck:
    """A classification: ``kind`` (one of :data:`CLASSES`), the ``evidence``, and the rule that fired."""

    kind: str
    evidence: Evidence
    reason: str

    def describe(self) -> str:
        """The evidence in one line, e.g. ``device busy 23% of 4.1 ms; 1,840 kernels, median 3.1 µs; host-wait gaps 71%``."""
        return describe(self.evidence, self.kind)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "reason": self.reason, "summary": self.describe(), "evidence": self.evidence.to_dict()}


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def describe(e: Evidence, kind: str | None = None) -> str:
    """Human-readable evidence, leading with what decided ``kind``."""
    parts: list[str] = []
    if kind == "data":
        parts.append(f"DataLoader iteration {_pct(e.fraction(e.data_s))} of {format_ms(e.wall_s * 1e3)}")
    elif kind == "transfer":
        parts.append(f"host-device copies {_pct(e.fraction(e.copy_s))} of {format_ms(e.wall_s * 1e3)}")
    if e.device_type == "cuda":
        parts.append(f"device busy {_pct(e.fraction(e.busy_s))} of {format_ms(e.wall_s * 1e3)}")
        parts.append(f"{e.kernel_count:,} kernels, median {format_ms(e.kernel_median_s * 1e3)}")
        parts.append(f"host-wait gaps {_pct(e.fraction(e.host_wait_s))}")
        if e.sync_s > 0 or kind == "sync":
            parts.append(f"synchronizing calls {_pct(e.fraction(e.sync_s))}")
    else:
        parts.append(f"per-op overhead {_pct(e.fraction(e.overhead_s))} of {format_ms(e.wall_s * 1e3)}")
        parts.append(f"{e.kernel_count:,} ops, median {format_ms(e.kernel_median_s * 1e3)}")
    ai, ridge = e.arithmetic_intensity, e.ridge_point
    if ai is not None and ridge is not None:
        parts.append(f"arithmetic intensity {ai:.3g} FLOP/B vs ridge point {ridge:.3g} FLOP/B")
    if e.pct_of_peak_flops is not None and e.achieved_flops_per_s is not None:
        parts.append(f"{e.achieved_flops_per_s / 1e12:.3g} TFLOP/s ({e.pct_of_peak_flops:.0f}% of peak)")
    if e.pct_of_peak_bandwidth is not None and e.achieved_bytes_per_s is not None:
        parts.append(f"{e.achieved_bytes_per_s / 1e9:.3g} GB/s ({e.pct_of_peak_bandwidth:.0f}% of peak)")
    return "; ".join(parts)


def classify(e: Evidence, thresholds: Thresholds = Thresholds()) -> Bottleneck:
    """Decide the bottleneck class of a region from its :class:`Evidence` (see the module doc)."""
    t = thresholds
    if e.fraction(e.data_s) >= t.data:
        return Bottleneck("data", e, f"DataLoader share {_pct(e.fraction(e.data_s))} >= {_pct(t.data)}")
    if e.fraction(e.copy_s) >= t.transfer:
        return Bottleneck("transfer", e, f"copy share {_pct(e.fraction(e.copy_s))} >= {_pct(t.transfer)}")
    if e.device_type == "cuda":
        if e.fraction(e.idle_s) >= t.idle:
            if e.idle_s > 0 and e.sync_s >= t.sync_share * e.idle_s:
                return Bottleneck("sync", e, f"device idle {_pct(e.fraction(e.idle_s))}, synchronizing calls cover {_pct(min(1.0, e.sync_s / e.idle_s))} of it")
            if e.idle_s > 0 and e.sync_idle_s >= t.sync_share * e.idle_s:
                return Bottleneck("sync", e, f"device idle {_pct(e.fraction(e.idle_s))}, {_pct(min(1.0, e.sync_idle_s / e.idle_s))} of it in gaps where a synchronizing call returned")
            return Bottleneck("overhead", e, f"device idle {_pct(e.fraction(e.idle_s))} >= {_pct(t.idle)}, not explained by synchronization")
    elif e.fraction(e.overhead_s) >= t.cpu_overhead:
        return Bottleneck("overhead", e, f"per-op overhead {_pct(e.fraction(e.overhead_s))} >= {_pct(t.cpu_overhead)}")
    ai, ridge = e.arithmetic_intensity, e.ridge_point
    if ai is None or ridge is None:
        if e.flops == 0 or (e.flops is None and e.bytes):
            return Bottleneck("memory", e, "no FLOPs counted: the region only moves data")
        return Bottleneck("memory", e, "no roofline figures; defaulting to memory")
    if ai >= ridge:
        return Bottleneck("compute", e, f"arithmetic intensity {ai:.3g} >= ridge point {ridge:.3g} FLOP/B")
    return Bottleneck("memory", e, f"arithmetic intensity {ai:.3g} < ridge point {ridge:.3g} FLOP/B")


def mismatch_message(expected: Sequence[str], got: Bottleneck) -> str:
    """``expected compute-bound, measured overhead-bound: device busy 23% of 4.1 ms; ...``."""
    want = " or ".join(f"{k}-bound" for k in expected)
    return f"expected {want}, measured {got.kind}-bound: {got.describe()}"


# ----------------------------------------------------------------------------- trace analysis


def union_ns(intervals: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Merge overlapping ``(start, end)`` intervals (ns); returns them sorted and disjoint."""
    out: list[tuple[int, int]] = []
    for s, e in sorted(intervals):
        if e <= s:
            continue
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def total_ns(intervals: Iterable[tuple[int, int]]) -> int:
    return sum(e - s for s, e in union_ns(intervals))


def _gaps_with_returns(active: list[tuple[int, int]], lo: int, hi: int, returns_ns: Sequence[int]) -> int:
    """Total length (ns) of the gaps of [lo, hi] outside ``active`` (sorted, disjoint) that
    contain one of ``returns_ns`` (the end times of synchronizing calls)."""
    gaps, at = [], lo
    for s, e in active:
        if s > at:
            gaps.append((at, min(s, hi)))
        at = max(at, e)
    if at < hi:
        gaps.append((at, hi))
    return sum(g1 - g0 for g0, g1 in gaps if g1 > g0 and any(g0 <= r <= g1 for r in returns_ns))


def _clip(intervals: Iterable[tuple[int, int]], lo: int, hi: int) -> list[tuple[int, int]]:
    return [(max(s, lo), min(e, hi)) for s, e in intervals if e > lo and s < hi]


def _is_host_device_copy(name: str) -> bool:
    n = name.replace(" ", "").lower()
    return "htod" in n or "dtoh" in n


def _top_level(ops: Sequence[TraceEvent]) -> list[TraceEvent]:
    """CPU ops not nested inside another CPU op (ops are nested intervals on one thread)."""
    out: list[TraceEvent] = []
    end = -1
    for op in sorted(ops, key=lambda o: (o.start_ns, -o.end_ns)):
        if op.start_ns >= end:
            out.append(op)
            end = op.end_ns
    return out


def analyze(
    events: Sequence[TraceEvent],
    *,
    device_type: str,
    calls: int = 1,
    region: tuple[int, int] | None = None,
    cpu_op_floor_s: float = 0.0,
) -> Evidence:
    """Reduce a trace of ``calls`` calls to per-call :class:`Evidence`.

    ``region`` bounds the analysis (ns; default: the ``gpuperf::region`` annotation, else the
    trace's extent). ``cpu_op_floor_s`` is the calibrated fixed cost of one top-level op on the
    CPU (seconds), counted as overhead for every top-level op. The device's timeline is read by
    :func:`_analyze_cuda` (kernels, copies, syncs) or :func:`_analyze_cpu` (top-level ops).
    """
    calls = max(1, calls)
    lo, hi = region if region is not None else _region(events)
    data_ns = total_ns(_clip(((e.start_ns, e.end_ns) for e in events
                              if e.kind == "annotation" and e.name.startswith(DATALOADER_PREFIX)), lo, hi))
    phases_spans: dict[str, list[tuple[int, int]]] = {}
    for e in events:
        if e.kind == "annotation" and e.name.startswith(PHASE_PREFIX):
            phases_spans.setdefault(e.name[len(PHASE_PREFIX):], []).append((e.start_ns, e.end_ns))
    if device_type == "cuda":
        return _analyze_cuda(events, calls, lo, hi, data_ns, phases_spans)
    return _analyze_cpu(events, calls, lo, hi, data_ns, phases_spans, cpu_op_floor_s)


def _region(events: Sequence[TraceEvent]) -> tuple[int, int]:
    """The analysed span (ns): the ``gpuperf::region`` annotations' extent, else the trace's."""
    marks = [e for e in events if e.kind == "annotation" and e.name == REGION_NAME]
    if marks:
        return min(m.start_ns for m in marks), max(m.end_ns for m in marks)
    if events:
        return min(e.start_ns for e in events), max(e.end_ns for e in events)
    return 0, 0


def _host_wait_ns(ordered: Sequence[TraceEvent], launches: Mapping[int, int]) -> int:
    """Device idle time (ns) that ends with work launched after the device went idle: the device
    waited for the host (``ordered``: device work by start time; ``launches``: correlation id ->
    the launch's start ns)."""
    host_wait = 0
    frontier = None
    for k in ordered:
        if frontier is not None and k.start_ns > frontier:
            launch = launches.get(k.correlation)
            if launch is not None and launch > frontier:
                host_wait += k.start_ns - frontier
        frontier = k.end_ns if frontier is None else max(frontier, k.end_ns)
    return host_wait


def _analyze_cuda(events: Sequence[TraceEvent], calls: int, lo: int, hi: int, data_ns: int,
                  phases_spans: Mapping[str, list[tuple[int, int]]]) -> Evidence:
    """Per-call evidence from a CUDA timeline: kernels and device-to-device copies keep the device
    busy, host-device copies are transfer, runtime syncs (not our final one) are sync time."""
    per_call = 1.0 / calls / 1e9
    wall_ns = max(0, hi - lo)
    kernels = [e for e in events if e.kind in ("kernel", "memset") and e.end_ns > lo and e.start_ns < hi]
    copies = [e for e in events if e.kind == "memcpy" and e.end_ns > lo and e.start_ns < hi]
    d2d = [c for c in copies if not _is_host_device_copy(c.name)]
    h2d = [c for c in copies if _is_host_device_copy(c.name)]
    busy = _clip([(k.start_ns, k.end_ns) for k in kernels + d2d], lo, hi)
    copy = _clip([(c.start_ns, c.end_ns) for c in h2d], lo, hi)
    busy_ns, copy_ns = total_ns(busy), total_ns(copy)
    active_ns = total_ns(busy + copy)
    ours = [(e.start_ns, e.end_ns) for e in events if e.kind == "annotation" and e.name == FINAL_SYNC_NAME]
    syncs = [e for e in events if e.kind == "runtime" and e.name in SYNC_CALLS
             and not any(s <= e.start_ns < t for s, t in ours)]
    sync_ns = total_ns(_clip(((e.start_ns, e.end_ns) for e in syncs), lo, hi))
    sync_idle_ns = _gaps_with_returns(union_ns(busy + copy), lo, hi, [e.end_ns for e in syncs])
    launches = {e.correlation: e.start_ns for e in events if e.kind == "runtime" and e.correlation}
    host_wait = _host_wait_ns(sorted(kernels + d2d + h2d, key=lambda k: k.start_ns), launches)
    durations = [k.duration_ns for k in kernels]
    # a kernel belongs to the phase its launch happened in
    phases = _phase_ns([(launches.get(k.correlation, k.start_ns), k) for k in kernels], phases_spans, lo, hi)
    return Evidence(
        device_type="cuda",
        calls=calls,
        wall_s=wall_ns * per_call,
        busy_s=busy_ns * per_call,
        copy_s=copy_ns * per_call,
        idle_s=max(0, wall_ns - active_ns) * per_call,
        data_s=data_ns * per_call,
        sync_s=sync_ns * per_call,
        sync_idle_s=sync_idle_ns * per_call,
        host_wait_s=host_wait * per_call,
        kernel_count=len(kernels) // calls,
        kernel_median_s=(statistics.median(durations) / 1e9) if durations else 0.0,
        phases=_shares(phases),
    )


def _analyze_cpu(events: Sequence[TraceEvent], calls: int, lo: int, hi: int, data_ns: int,
                 phases_spans: Mapping[str, list[tuple[int, int]]], cpu_op_floor_s: float) -> Evidence:
    """Per-call evidence from a CPU timeline: top-level ops are busy time; Python time between
    them (outside DataLoader iteration, counted as data) plus a fixed cost per op is overhead."""
    per_call = 1.0 / calls / 1e9
    wall_ns = max(0, hi - lo)
    ops = [e for e in events if e.kind == "cpu_op" and e.end_ns > lo and e.start_ns < hi]
    top = _top_level(ops)
    busy = _clip([(o.start_ns, o.end_ns) for o in top], lo, hi)
    busy_ns = total_ns(busy)
    data_spans = [(e.start_ns, e.end_ns) for e in events if e.kind == "annotation" and e.name.startswith(DATALOADER_PREFIX)]
    outside = total_ns(busy + _clip(data_spans, lo, hi))
    python_gap_ns = max(0, wall_ns - outside)
    top_outside_data = [o for o in top if not any(s <= o.start_ns < e for s, e in data_spans)]
    overhead_ns = min(wall_ns, python_gap_ns + int(len(top_outside_data) * cpu_op_floor_s * 1e9))
    durations = [o.duration_ns for o in top]
    phases = _phase_ns([(o.start_ns, o) for o in top], phases_spans, lo, hi)
    return Evidence(
        device_type="cpu",
        calls=calls,
        wall_s=wall_ns * per_call,
        busy_s=busy_ns * per_call,
        data_s=data_ns * per_call,
        overhead_s=overhead_ns * per_call,
        kernel_count=len(top) // calls,
        kernel_median_s=(statistics.median(durations) / 1e9) if durations else 0.0,
        phases=_shares(phases),
    )


def _phase_ns(
    anchored: Sequence[tuple[int, TraceEvent]], spans: Mapping[str, list[tuple[int, int]]], lo: int, hi: int
) -> dict[str, int]:
    """Busy ns per phase: each (anchor time, event) counts for the phase whose span holds its anchor."""
    return {
        name: total_ns(_clip([(ev.start_ns, ev.end_ns) for t, ev in anchored
                              if any(s <= t < e for s, e in phase_spans)], lo, hi))
        for name, phase_spans in spans.items()
    }


def _shares(times: Mapping[str, int]) -> dict[str, float]:
    """Each phase's share of the device time attributed to any phase (fractions summing to 1)."""
    total = sum(times.values())
    return {k: (v / total if total else 0.0) for k, v in sorted(times.items())}


def with_roofline(
    e: Evidence,
    *,
    flops: float | None,
    bytes_moved: float | None,
    peak_flops_per_s: float | None,
    peak_bytes_per_s: float | None,
    dtype: str | None,
) -> Evidence:
    """Return ``e`` with per-call FLOPs/bytes and the calibrated peaks filled in."""
    return dataclasses.replace(
        e, flops=flops, bytes=bytes_moved, peak_flops_per_s=peak_flops_per_s,
        peak_bytes_per_s=peak_bytes_per_s, dtype=dtype,
    )


