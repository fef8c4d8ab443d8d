"""The GPU's SM clock beside the time: cycles per call, throttled rounds, and a verdict that knows
the clock (issue 49; pure: stdlib only).

On an H100 the same bf16 4096 matmul read 181.5 µs at the plugin's default stop (about 55 ms of
calls, the GPU still at its boost clock) and 194 µs after 30 s of matmuls (SM clock 1980 -> 1425
MHz at 689 W): a 4-7% swing from the clock alone, beyond the default 5% threshold. So, per timed
round, the SM clock read around it (NVML) goes beside the time, and:

* **cycles per call** = time x SM clock (ms x MHz = thousands of cycles, :func:`kcycles`): what the
  call costs at any clock, for work whose speed follows the SM clock;
* **throttled rounds** (:func:`throttled_rounds`): a round during which NVML named a throttle
  reason (hardware slowdown, software or hardware thermal, hardware power brake: the telemetry's
  :data:`~pytest_gpuperf.verdict.machine.THROTTLE_REASONS`) or, where its reasons were not read,
  whose clock was below :data:`THROTTLED_FRACTION` of the GPU's default application clock, is
  flagged, and dropped (:func:`kept_rounds`) unless that would leave fewer than :data:`MIN_KEPT`
  of the rounds — then all are kept and the verdict's note says the clock was capped throughout.
  The software power cap is no throttle: it is a GPU's designed state at its power limit (on an
  H200, 2026-11-29, a sustained bf16 GEMM ran at 1440-1500 MHz, 73-76% of its 1980 MHz, at the
  700 W cap; flagging it marked 89-100% of the rounds throttled);
* **the verdict** (:func:`decide_with_cycles`): where the baseline's and this run's median clocks
  differ by more than :data:`CLOCK_DIFFERS`, a timing regression is checked in cycle space too:
  cycles per call that did not regress mean the clock, not the code, made the call slower, and the
  verdict is ``inconclusive`` with a note naming both clocks — never ``regressed`` on the clock
  alone; cycles that regressed too keep ``regressed``, decided on both. At the same clock the
  timing verdict stands as it is.

Cycles assume the call's speed follows the SM clock: for memory-bound kernels (the memory clock
does not follow it) a lower SM clock overstates the cycles' drop, so the rule only ever *withholds*
a regression (inconclusive), never makes one.

Sources: nvbench reads the SM clock per sample, discards samples below 75% of the default clock
("throttle detection", ``nvbench::detail::measure_cold``; nvbench issue #231; here the clock
threshold stands in only where NVML's reasons were not read, as in the telemetry's rule), and its robust
compare checks a gap in cycle space; NVML ``nvmlDeviceGetClockInfo(NVML_CLOCK_SM)``,
``nvmlDeviceGetDefaultApplicationsClock`` and ``nvmlDeviceGetCurrentClocksEventReasons``.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Sequence

from pytest_gpuperf.verdict.machine import THROTTLE_REASONS

#: Where a round's clocks-event reasons were not read: its SM clock below this fraction of the
#: default application clock makes it throttled (nvbench's default: 75%).
THROTTLED_FRACTION = 0.75
#: Throttled rounds are dropped only while at least this share of the rounds is kept.
MIN_KEPT = 0.5
#: Median SM clocks that differ by more than this (relative) make the verdict look at cycles.
CLOCK_DIFFERS = 0.02
#: NVML clocks-event reasons that throttle a round: HW slowdown 0x8, SW thermal 0x20, HW thermal
#: 0x40, HW power brake 0x80 (the telemetry's rule, one definition). GPU idle, the
#: application-clock setting, the SW power cap, sync boost and the display clock do not.
THROTTLING = sum(THROTTLE_REASONS)  # distinct bits: their sum is their OR


def kcycles(samples_ms: Sequence[float], clock_mhz: Sequence[float | None]) -> list[float | None]:
    """Thousands of SM cycles per call of each round: ``ms x MHz`` (None where the clock was not
    read). Raises ``ValueError`` when the sequences differ in length."""
    if len(samples_ms) != len(clock_mhz):
        raise ValueError(f"{len(samples_ms)} samples but {len(clock_mhz)} clock readings: expected one per round")
    return [float(t) * float(c) if c is not None and c > 0 else None for t, c in zip(samples_ms, clock_mhz)]


def throttled_rounds(clock_mhz: Sequence[float | None], reasons: Sequence[int | None] | None,
                     default_clock_mhz: float | None, fraction: float = THROTTLED_FRACTION) -> list[bool]:
    """Per round: throttled (a clocks-event reason in :data:`THROTTLING`; where the round's reasons
    were not read, its clock below ``fraction`` x ``default_clock_mhz``). A round without a reading
    is not flagged. ``reasons``: the NVML bitmask per round (None: not read). Raises
    ``ValueError`` for a fraction outside (0, 1]."""
    if not 0 < fraction <= 1:
        raise ValueError(f"throttled fraction {fraction!r}: expected a fraction in (0, 1]")
    low = fraction * default_clock_mhz if default_clock_mhz else None
    out = []
    for i, c in enumerate(clock_mhz):
        r = reasons[i] if reasons is not None and i < len(reasons) else None
        if r is not None:
            out.append(bool(r & THROTTLING))
        else:
            out.append(low is not None and c is not None and c < low)
    return out


@dataclass(frozen=True)
class KeptRounds:
    """The rounds a verdict uses after throttled ones are dropped (:func:`kept_rounds`): their times
    (ms) and clocks (MHz), how many were dropped, a note when throttled rounds were kept, and
    ``indices``: the positions of the kept rounds among all (to keep what is aligned with them)."""

    samples_ms: tuple[float, ...]
    clock_mhz: tuple[float | None, ...]
    dropped: int
    note: str = ""
    indices: tuple[int, ...] = ()


def kept_rounds(samples_ms: Sequence[float], clock_mhz: Sequence[float | None], throttled: Sequence[bool],
                min_kept: float = MIN_KEPT) -> KeptRounds:
    """Drop the throttled rounds, as nvbench does, unless fewer than ``min_kept`` of them would be
    left: then keep all, with a note (the GPU was capped for most of the run: its time is the
    capped clock's). Raises ``ValueError`` for sequences of different lengths."""
    if not len(samples_ms) == len(clock_mhz) == len(throttled):
        raise ValueError("samples, clocks and throttle flags: expected one of each per round")
    keep = [i for i, t in enumerate(throttled) if not t]
    every = tuple(range(len(samples_ms)))
    if len(keep) == len(samples_ms):
        return KeptRounds(tuple(samples_ms), tuple(clock_mhz), 0, indices=every)
    if len(keep) < min_kept * len(samples_ms):
        return KeptRounds(tuple(samples_ms), tuple(clock_mhz), 0,
                          f"the GPU was throttled in {len(samples_ms) - len(keep)} of {len(samples_ms)} rounds: "
                          f"all kept, so this time is the capped clock's", every)
    return KeptRounds(tuple(samples_ms[i] for i in keep), tuple(clock_mhz[i] for i in keep),
                      len(samples_ms) - len(keep), indices=tuple(keep))


def median_clock(clock_mhz: Sequence[float | None]) -> float | None:
    """The median of the clock readings (MHz), None without any."""
    vals = [float(c) for c in clock_mhz if c is not None and c > 0]
    return statistics.median(vals) if vals else None


def clocks_differ(baseline_mhz: float | None, current_mhz: float | None, limit: float = CLOCK_DIFFERS) -> bool:
    """Whether two median clocks differ by more than ``limit`` (relative to the baseline's)."""
    if not baseline_mhz or not current_mhz:
        return False
    return abs(current_mhz / baseline_mhz - 1) > limit


def decide_with_cycles(timing: Any, cycles: Any, baseline_mhz: float | None, current_mhz: float | None) -> Any:
    """The timing verdict ``timing`` (a :class:`~pytest_gpuperf.verdict.compare.Comparison`) checked
    in cycle space where the clocks differ (see the module doc). ``cycles``: the same decision made
    on cycles per call (:func:`kcycles` of both sides; None where the clock was not read on both).
    Returns ``timing`` unchanged at the same clock, without cycles, or when it is not ``regressed``;
    a regression whose cycles did not regress becomes ``inconclusive`` with the note ``same cycles
    per call (x1.01); SM clock 1425 vs 1980 MHz: the clock, not the code`` (the timing evidence
    kept); one whose cycles regressed too stays ``regressed``, noted as decided on both."""
    if cycles is None or timing is None or not clocks_differ(baseline_mhz, current_mhz):
        return timing
    if getattr(timing.verdict, "value", None) != "regressed":
        return timing
    from pytest_gpuperf.verdict.compare import Verdict, with_note

    clock = f"SM clock {current_mhz:.0f} vs {baseline_mhz:.0f} MHz"
    ratio = f"x{cycles.ratio:.3f}" if getattr(cycles, "ratio", None) is not None else "unchanged"
    if cycles.verdict is Verdict.REGRESSED:
        return with_note(timing, f"cycles per call regressed too ({ratio}; {clock}): a change of the code, not only "
                                 f"of the clock")
    same = "same" if cycles.verdict is Verdict.UNCHANGED else "no regression in"
    return with_note(timing, f"{same} cycles per call ({ratio}); {clock}: the clock, not the code, made it slower",
                     verdict=Verdict.INCONCLUSIVE)


@dataclass(frozen=True)
class GpuClock:
    """The SM clock of one benchmark's timed rounds (issue 49): ``mhz``, the clock (MHz) of each
    round, aligned with the timing's ``samples_ms`` (same rounds, same order; on CUDA read once per
    block of rounds, after the block's synchronize, so every round of a block has the block's
    reading); ``default_mhz``, the GPU's default application clock (MHz; None: not read);
    ``dropped``, the throttled rounds left out before these (:func:`kept_rounds`); ``throttled``,
    the throttled rounds kept among these (when dropping them would leave too few);
    ``process_medians_mhz``: with several worker processes, each one's median clock (process order).

    Cycles per call (thousands of cycles, ``ms x MHz``) are :meth:`kcycles` of the wall samples.
    """

    mhz: tuple[float, ...]
    default_mhz: float | None = None
    dropped: int = 0
    throttled: int = 0
    process_medians_mhz: tuple[float, ...] | None = None

    @property
    def median_mhz(self) -> float:
        """The median SM clock of the rounds (MHz)."""
        return float(statistics.median(self.mhz))

    def kcycles(self, samples_ms: Sequence[float]) -> tuple[float, ...] | None:
        """Thousands of SM cycles per call of each round (:func:`kcycles`), or None when
        ``samples_ms`` is not aligned with these readings (another length)."""
        if len(samples_ms) != len(self.mhz) or not self.mhz:
            return None
        return tuple(c for c in kcycles(samples_ms, self.mhz) if c is not None)

    def groups(self, samples_ms: Sequence[float], counts: Sequence[int]) -> list[tuple[float, ...]] | None:
        """:meth:`kcycles` cut into consecutive groups of ``counts`` rounds (each worker process's)."""
        cycles = self.kcycles(samples_ms)
        if cycles is None or sum(counts) != len(cycles):
            return None
        out, i = [], 0
        for n in counts:
            out.append(cycles[i:i + n])
            i += n
        return out

    def to_dict(self, max_samples: int | None = None, samples_ms: Sequence[float] | None = None) -> dict[str, Any]:
        """The JSON form (the key ``gpu_clock`` of report and baseline entries): the median clock,
        the default clock, the rounds dropped and kept throttled, and the per-round clocks, at most
        ``max_samples`` of them, thinned as the wall samples are (the same rounds for the same count);
        with the aligned ``samples_ms`` (ms), ``median_kcycles``: the median cycles per call
        (thousands), beside the median time."""
        mhz = list(self.mhz)
        cycles = self.kcycles(samples_ms) if samples_ms is not None else None
        if max_samples is not None:
            from pytest_gpuperf.verdict.stats import thin

            mhz = thin(mhz, max_samples)
        d: dict[str, Any] = {"median_mhz": self.median_mhz, "mhz": mhz, "default_mhz": self.default_mhz,
                             "dropped_rounds": self.dropped, "throttled_rounds": self.throttled}
        if cycles:
            d["median_kcycles"] = float(statistics.median(cycles))
        if self.process_medians_mhz is not None:
            d["process_medians_mhz"] = list(self.process_medians_mhz)
        return d

    @classmethod
    def from_dict(cls, d: Any) -> "GpuClock | None":
        """From the JSON form; None when absent or malformed (a result reads without its clock)."""
        from pytest_gpuperf.verdict.cputime import positive_floats

        if not isinstance(d, dict):
            return None
        mhz = positive_floats(d.get("mhz"))
        if mhz is None:
            return None
        default = positive_floats([d.get("default_mhz")])
        return cls(mhz, default[0] if default else None, int(d.get("dropped_rounds") or 0),
                   int(d.get("throttled_rounds") or 0), positive_floats(d.get("process_medians_mhz")))

    @classmethod
    def merged(cls, parts: Sequence["GpuClock | None"]) -> "GpuClock | None":
        """The clock of several worker processes' results, in process order (readings concatenated,
        ``process_medians_mhz`` each one's median); None unless every part has one."""
        if not parts or any(p is None for p in parts):
            return None
        ps = [p for p in parts if p is not None]
        defaults = [p.default_mhz for p in ps if p.default_mhz]
        return cls(tuple(v for p in ps for v in p.mhz), defaults[0] if defaults else None,
                   sum(p.dropped for p in ps), sum(p.throttled for p in ps),
                   tuple(p.median_mhz for p in ps) if len(ps) >= 2 else None)

