"""The SM clock read beside CUDA's timed rounds (issue 49): one NVML reading per block of rounds,
after the block's synchronize, and the warmup that waits for a steady clock.

* :class:`RoundClock` — ``nvmlDeviceGetClockInfo(NVML_CLOCK_SM)`` and the clocks-event reasons
  (``nvmlDeviceGetCurrentClocksEventReasons``) once per block of the eager CUDA loop (a block is
  about :data:`~pytest_gpuperf.measure.timing.CUDA_BLOCK_S` of rounds; reading per round would put
  an NVML call, tens of µs, between rounds), so every round of a block gets the block's reading;
  the default application clock (``nvmlDeviceGetDefaultApplicationsClock``) once. The timing's
  rounds, their clocks and the throttled rounds dropped (:func:`drop_throttled`) then go to the
  verdict (:mod:`pytest_gpuperf.verdict.gpuclock`).
* :func:`steady_clock_warmup` — after the usual warmup, calls until the SM clock stops moving
  (``steady_clock`` seconds at most): sustained rather than burst speed.

Without NVML (no ``pynvml``, no driver, an unsupported call) nothing is read and nothing changes:
every reader here returns None instead of raising. Source of the method: nvbench reads the SM
clock per sample and discards throttled samples (``nvbench::detail::measure_cold``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

#: The steady-clock warmup: the clock is steady when :data:`STEADY_READS` readings
#: :data:`STEADY_EVERY_S` apart stay within :data:`STEADY_WITHIN` of each other (relative).
STEADY_READS = 3
STEADY_EVERY_S = 0.2
STEADY_WITHIN = 0.01


class RoundClock:
    """NVML's SM clock (MHz) and clocks-event reasons, read once per block of timed rounds.

    ``read()`` returns ``(mhz, reasons)`` (each None where the call failed); :meth:`after_block`
    records the reading for the block's ``n`` rounds; :meth:`fields` gives the
    :class:`~pytest_gpuperf.measure.timing.Timing` fields (``sm_clock_mhz``, ``clock_reasons``,
    ``default_clock_mhz``). Build one with :meth:`for_device` (None without NVML)."""

    def __init__(self, read: Callable[[], tuple[float | None, int | None]], default_mhz: float | None) -> None:
        self.read = read
        self.default_mhz = default_mhz
        self.mhz: list[float | None] = []
        self.reasons: list[int | None] = []

    @classmethod
    def for_device(cls, device: Any) -> "RoundClock | None":
        """The reader of CUDA ``device``'s clock (a ``torch.device``), or None without NVML."""
        from pytest_gpuperf.measure.telemetry import _call, _nvml, _reasons_reader, handle_for

        nv = _nvml()
        handle = handle_for(getattr(device, "index", None) or 0) if nv is not None else None
        if handle is None:
            return None
        reasons = _reasons_reader(nv, handle)

        def read() -> tuple[float | None, int | None]:
            mhz = _call(lambda: nv.nvmlDeviceGetClockInfo(handle, nv.NVML_CLOCK_SM))
            return (float(mhz) if isinstance(mhz, (int, float)) and mhz > 0 else None), reasons()

        default = _call(lambda: nv.nvmlDeviceGetDefaultApplicationsClock(handle, nv.NVML_CLOCK_SM))
        return cls(read, float(default) if isinstance(default, (int, float)) and default > 0 else None)

    def after_block(self, n: int) -> None:
        """Read the clock once for the ``n`` rounds just synchronized."""
        mhz, reasons = self.read()
        self.mhz.extend([mhz] * n)
        self.reasons.extend([reasons] * n)

    def fields(self) -> dict[str, Any]:
        """The :class:`~pytest_gpuperf.measure.timing.Timing` fields of what was read."""
        return {"sm_clock_mhz": tuple(self.mhz), "clock_reasons": tuple(self.reasons),
                "default_clock_mhz": self.default_mhz}


def _every_round_read(t: Any) -> bool:
    """Whether the timing ``t`` has a positive SM-clock reading for every round."""
    mhz = t.sm_clock_mhz
    return bool(mhz) and len(mhz) == len(t.samples_ms) and all(c is not None and c > 0 for c in mhz)


def drop_throttled(t: Any) -> Any:
    """The :class:`~pytest_gpuperf.measure.timing.Timing` ``t`` without its throttled rounds
    (:func:`pytest_gpuperf.verdict.gpuclock.kept_rounds`, as nvbench drops them; the CPU time and
    clock readings of the same rounds with them), ``throttled_dropped`` counting them and a note
    saying so (or that they were kept: too many to drop). Unchanged without a clock reading for
    every round, and with a machine-speed probe (its readings belong to blocks of rounds)."""
    from pytest_gpuperf.verdict.gpuclock import kept_rounds, throttled_rounds

    mhz = t.sm_clock_mhz
    if not _every_round_read(t) or t.probe_ms:
        return t
    kept = kept_rounds(t.samples_ms, mhz, throttled_rounds(mhz, t.clock_reasons or None, t.default_clock_mhz))
    if kept.note:
        return dataclasses.replace(t, notes=t.notes + (kept.note,))
    if not kept.dropped:
        return t

    def pick(xs: tuple) -> tuple:
        return tuple(xs[i] for i in kept.indices) if len(xs) == len(t.samples_ms) else xs

    note = (f"{kept.dropped} of {len(t.samples_ms)} rounds ran while the GPU was throttled (a thermal, power-brake "
            f"or hardware slowdown; without NVML's reasons, an SM clock below 75% of its default): left out, as "
            f"nvbench does")
    return dataclasses.replace(t, samples_ms=kept.samples_ms, rounds=len(kept.samples_ms), notes=t.notes + (note,),
                               cpu_samples_ms=pick(t.cpu_samples_ms),
                               process_cpu_samples_ms=pick(t.process_cpu_samples_ms),
                               sm_clock_mhz=pick(mhz), clock_reasons=pick(t.clock_reasons),
                               throttled_dropped=t.throttled_dropped + kept.dropped)


def gpu_clock_of(t: Any) -> Any:
    """The :class:`~pytest_gpuperf.verdict.gpuclock.GpuClock` of a timing's rounds (after
    :func:`drop_throttled`), or None: no clock reading for every round."""
    from pytest_gpuperf.verdict.gpuclock import GpuClock, throttled_rounds

    mhz = t.sm_clock_mhz
    if not _every_round_read(t):
        return None
    flags = throttled_rounds(mhz, t.clock_reasons or None, t.default_clock_mhz)
    return GpuClock(tuple(float(c) for c in mhz), t.default_clock_mhz, t.throttled_dropped, sum(flags))


def steady_clock_warmup(call: Callable[[], None], sync: Callable[[], None], read: Callable[[], float | None],
                        clock_s: Callable[[], float], limit_s: float, calls_per_sync: int = 1) -> tuple[int, str]:
    """Call ``call`` until ``read()`` (the SM clock, MHz) gives :data:`STEADY_READS` readings
    :data:`STEADY_EVERY_S` apart within :data:`STEADY_WITHIN` of each other, or ``limit_s`` seconds
    passed on ``clock_s`` (seconds), synchronizing (``sync``) after every ``calls_per_sync`` calls so
    that the host never runs far ahead of the GPU. Returns ``(calls made, note)``; the note says
    whether the clock settled and at what. Raises ``ValueError`` for a negative ``limit_s``."""
    if limit_s < 0:
        raise ValueError(f"steady_clock={limit_s!r}: expected seconds >= 0")
    start = clock_s()
    last = None
    readings: list[float] = []
    calls = 0
    while True:
        for _ in range(max(1, calls_per_sync)):
            call()
        calls += max(1, calls_per_sync)
        sync()
        now = clock_s()
        if last is None or now - last >= STEADY_EVERY_S:
            mhz = read()
            last = now
            if mhz is None:
                return calls, "steady-clock warmup: the SM clock cannot be read here; not waited for"
            readings = (readings + [mhz])[-STEADY_READS:]
            if len(readings) == STEADY_READS and max(readings) <= min(readings) * (1 + STEADY_WITHIN):
                return calls, (f"steady-clock warmup: the SM clock settled at {readings[-1]:.0f} MHz after "
                               f"{now - start:.1f} s")
        if now - start >= limit_s:
            return calls, (f"steady-clock warmup: the SM clock still moved after {limit_s:g} s "
                           f"({', '.join(f'{r:.0f}' for r in readings)} MHz): timed as it was")
