"""Evidence about the machine rather than the code (pure: stdlib only).

* **Reference workloads** (measured by :mod:`pytest_gpuperf.measure.drift`): the drift ratios
  "this machine now / when the baseline was recorded", the one that normalizes a benchmark, and
  normalization by it (``--gpuperf-normalize``).
* **The interleaved probe** (measured by :mod:`pytest_gpuperf.measure.probe`):
  :class:`ProbeEvidence`, what :func:`pytest_gpuperf.verdict.gate.judge` uses to tell "the machine
  differs" from "the code got slower".
* **Machine state** (sampled by :mod:`pytest_gpuperf.measure.telemetry`): :func:`host_busy` and
  :func:`throttle_verdict`, the reasons a timing is not trusted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence


#: Relative drift of a reference workload above which the summary warns.
DRIFT_WARN = 0.05


def _ratio(current: Mapping[str, Any] | None, baseline: Mapping[str, Any] | None, key: str) -> float | None:
    """``current[key] / baseline[key]`` when both are positive numbers, else None. Pure."""
    now, then = (current or {}).get(key), (baseline or {}).get(key)
    if isinstance(now, (int, float)) and isinstance(then, (int, float)) and now > 0 and then > 0:
        return float(now) / float(then)
    return None


def drift_ratios(current: Mapping[str, Any] | None, baseline: Mapping[str, Any] | None) -> dict[str, float] | None:
    """``{"matmul": now/then, "copy": now/then}`` from two ``environment.reference`` dicts. Pure.

    Returns None when either side lacks the reference medians.
    """
    out = {key: r for key in ("matmul", "copy") if (r := _ratio(current, baseline, f"{key}_ms")) is not None}
    return out or None


def cpu_drift_ratio(current: Mapping[str, Any] | None, baseline: Mapping[str, Any] | None) -> float | None:
    """The CPU's single-thread speed now/then: the ratio of two ``environment.reference`` dicts'
    ``python_cpu_ms`` (the thread CPU time of a pure-Python loop,
    :func:`pytest_gpuperf.measure.probe.python_loop`; > 1: this CPU runs slower now). None when
    either side lacks it (baselines recorded before it, CUDA). Pure."""
    return _ratio(current, baseline, "python_cpu_ms")


def median_reference(references: Sequence[Mapping[str, Any] | None]) -> dict[str, Any] | None:
    """The reference workloads of a run measured in several worker processes (each process's
    ``environment.reference``, in process order): each workload's median over the processes that
    timed it (``matmul_ms``, ``copy_ms``, ``python_cpu_ms``, ms) with the first one's names. None when no process timed
    them. Pure."""
    import statistics

    given = [r for r in references if r]
    if not given:
        return None
    out: dict[str, Any] = {k: v for k, v in given[0].items() if not k.endswith("_ms")}
    for key in ("matmul_ms", "copy_ms", "python_cpu_ms"):
        values = [float(r[key]) for r in given if isinstance(r.get(key), (int, float)) and r[key] > 0]
        if values:
            out[key] = statistics.median(values)
    return out if any(k.endswith("_ms") for k in out) else None


def ratio_for(ratios: Mapping[str, float] | None, bottleneck_kind: str | None) -> tuple[str, float] | None:
    """The reference that normalizes a benchmark: the matmul ratio for compute-bound ones, else copy."""
    if not ratios:
        return None
    key = "matmul" if bottleneck_kind == "compute" else "copy"
    if key not in ratios:
        return None
    return key, ratios[key]


def normalize(samples_ms: Sequence[float], ratio: float) -> list[float]:
    """Divide per-call times by a machine-speed ratio (now/then). Pure."""
    if not ratio > 0:
        raise ValueError(f"drift ratio must be > 0, got {ratio!r}")
    return [float(x) / ratio for x in samples_ms]


def drift_agrees(ratios: Mapping[str, float] | None) -> bool:
    """Whether the reference workloads that moved by more than :data:`DRIFT_WARN` all moved the same
    way (all slower or all faster). When one ran faster and another slower, that is the reference
    workloads' own noise, not a change of the machine's speed, and dividing by either ratio
    (``--gpuperf-normalize``) corrects nothing. Pure."""
    big = [r for r in (ratios or {}).values() if abs(r - 1) > DRIFT_WARN + 1e-9]
    return all(r > 1 for r in big) or all(r < 1 for r in big)


def drift_warning(ratios: Mapping[str, float] | None) -> str | None:
    """``"machine speed drift since the baseline: matmul +7.2%, copy -1.0%"`` above 5%, else None.
    When the workloads disagree (:func:`drift_agrees` is False) the line says so instead of calling
    it a drift of the machine's speed (issue 24: no contradictory drift lines)."""
    if not ratios or all(abs(r - 1) <= DRIFT_WARN + 1e-9 for r in ratios.values()):  # "above 5%"
        return None
    parts = ", ".join(f"{k} {(r - 1) * 100:+.1f}%" for k, r in ratios.items())
    if not drift_agrees(ratios):
        return (f"the reference workloads disagree since the baseline was recorded (now/then): {parts}; one ran "
                f"slower and another faster, which is their own run-to-run noise, not a change of the machine's "
                f"speed")
    return f"machine speed drift since the baseline was recorded (reference workloads now/then): {parts}"


@dataclass(frozen=True)
class ProbeEvidence:
    """What :func:`pytest_gpuperf.verdict.gate.judge` needs to know of the probe (pure, no torch).

    ``now_ms``: this run's per-probe times (ms, measurement order; probe j ran after rounds
    ``j*every .. (j+1)*every - 1``, so round i belongs to probe ``i // every``). ``baseline_ms``:
    the stored probe level to compare with (ms; the median of the stored runs' probe medians,
    see :meth:`pytest_gpuperf.storage.baseline.BaselineEntry.probe_level_ms`), None when the baseline
    has none (then the probe only reports, never changes a verdict). ``name``: the probe's name.
    ``every``: rounds per probe (>= 1).
    """

    now_ms: tuple[float, ...]
    baseline_ms: float | None
    name: str
    every: int = 1

    @classmethod
    def of(cls, timing: Any, baseline_ms: float | None, name: str) -> "ProbeEvidence":
        """From a :class:`~pytest_gpuperf.measure.timing.Timing` (its ``probe_ms`` and ``probe_every``;
        no probe times when it has none)."""
        return cls(tuple(getattr(timing, "probe_ms", ()) or ()), baseline_ms, name,
                   int(getattr(timing, "probe_every", 1) or 1))

    @property
    def median_ms(self) -> float | None:
        """Median of ``now_ms`` (ms), None when empty."""
        if not self.now_ms:
            return None
        import statistics

        return float(statistics.median(self.now_ms))

    @property
    def machine_ratio(self) -> float | None:
        """m = median(now) / baseline (> 1: this machine is slower now), None without both."""
        med = self.median_ms
        if med is None or not self.baseline_ms or self.baseline_ms <= 0:
            return None
        return med / self.baseline_ms

    def factors(self, rounds: int) -> list[float] | None:
        """Per-round machine factors ``probe_j / baseline`` for ``rounds`` rounds (None when the
        probes do not cover them or there is no baseline level)."""
        if self.machine_ratio is None or self.every < 1 or len(self.now_ms) * self.every < rounds:
            return None
        assert self.baseline_ms is not None
        return [self.now_ms[i // self.every] / self.baseline_ms for i in range(rounds)]


#: Clocks-event reason bits (nvml.h ``nvmlClocksEventReason*``) and their names.
REASONS = {
    0x1: "GPU idle",
    0x2: "applications clocks setting",
    0x4: "SW power cap",
    0x8: "HW slowdown",
    0x10: "sync boost",
    0x20: "SW thermal",
    0x40: "HW thermal",
    0x80: "HW power brake",
    0x100: "display clock setting",
}


#: The "GPU idle" clocks-event reason: samples with it are left out of the low-clock share.
GPU_IDLE = 0x1


#: Reasons that make a timing untrustworthy (thermal, power brake, hardware slowdown).
THROTTLE_REASONS = frozenset({0x8, 0x20, 0x40, 0x80})


#: A run is throttled when a throttle reason was active in more than this share of samples...
THROTTLE_SHARE = 0.10


#: ...or when the SM clock was below this fraction of its maximum in more than THROTTLE_SHARE.
LOW_CLOCK_FRACTION = 0.75


#: A CPU run is "host busy" when other processes (plus steal time) used more than this many CPU
#: cores on average while it ran: half a core of a neighbour is enough to slow torch's intra-op
#: thread pool, which waits for its slowest thread (measured on this project's 2-core VMs: a
#: neighbour burning one core doubled a 2-thread training step and turned a DataLoader-bound epoch
#: compute-bound).
HOST_BUSY_CORES = 0.5


def host_busy(telemetry: dict[str, Any] | None) -> str | None:
    """``"host busy: other processes used 0.98 of 2 CPU cores while it ran"`` when the CPU
    telemetry's ``other_cpu_cores`` (:class:`HostLoadMeter`) exceed :data:`HOST_BUSY_CORES`, else
    None. Pure."""
    other = (telemetry or {}).get("other_cpu_cores")
    if not isinstance(other, (int, float)) or other <= HOST_BUSY_CORES:
        return None
    cores = telemetry.get("cpu_count")  # type: ignore[union-attr]
    of = f" of {cores}" if cores else ""
    return f"host busy: other processes used {other:.2f}{of} CPU cores while it ran"


#: Two host loads (other processes' CPU cores) are alike when they differ by at most this much:
#: a neighbour that took that share of a core from both sides' blocks slowed them alike.
HOST_ALIKE_CORES = 0.25


def busy_alike(a: dict[str, Any] | None, b: dict[str, Any] | None) -> str | None:
    """``"A 0.74, B 0.77 of 2 CPU cores"`` when the telemetries of an A/B run's two sides
    (:class:`~pytest_gpuperf.measure.telemetry.HostLoadMeter` over each side's blocks) both read
    ``other_cpu_cores``, at least one is busy (:func:`host_busy`) and they differ by at most
    :data:`HOST_ALIKE_CORES`; else None. Pure."""
    loads = [(t or {}).get("other_cpu_cores") for t in (a, b)]
    if not all(isinstance(x, (int, float)) for x in loads) or max(loads) <= HOST_BUSY_CORES:
        return None
    if abs(loads[0] - loads[1]) > HOST_ALIKE_CORES:
        return None
    cores = (b or {}).get("cpu_count") or (a or {}).get("cpu_count")
    return f"A {loads[0]:.2f}, B {loads[1]:.2f}" + (f" of {cores}" if cores else "") + " CPU cores"


def throttle_verdict(telemetry: dict[str, Any] | None) -> str | None:
    """``"throttled: HW thermal 34% of samples"`` when a run was throttled, else None. Pure.

    Throttled: a thermal, power-brake or hardware-slowdown reason active in more than 10% of
    samples, or - only where the reasons could not be read - the SM clock under 75% of its maximum
    in more than 10% of samples (a power-capped GPU sits below that by design, its "SW power cap"
    reason is not throttling). On the CPU backend, the :func:`host_busy` reason.
    """
    if not telemetry:
        return None
    busy = host_busy(telemetry)
    if busy:
        return busy
    reasons = telemetry.get("reasons") or {}
    bad = {REASONS[b]: reasons.get(REASONS[b], 0.0) for b in THROTTLE_REASONS}
    worst = max(bad.items(), key=lambda kv: kv[1])
    if worst[1] > THROTTLE_SHARE:
        return f"throttled: {worst[0]} {worst[1] * 100:.0f}% of samples"
    low = telemetry.get("low_clock_share")
    # the clock rule stands in for the reasons only where NVML could not read them: with reasons
    # read and none of ours active, a low clock is the GPU's normal state (a power-capped T4 or L4
    # runs at its "SW power cap" below 75% of its max clock on every run)
    reasons_read = telemetry.get("throttle_share") is not None
    if not reasons_read and isinstance(low, (int, float)) and low > THROTTLE_SHARE:
        return f"throttled: SM clock below {LOW_CLOCK_FRACTION * 100:.0f}% of max in {low * 100:.0f}% of samples"
    return None
