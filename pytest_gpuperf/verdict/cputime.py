"""CPU time beside the wall clock, and which of the two clocks decides a verdict (pure: stdlib only).

On the CPU backend every timed round also reads the calling thread's CPU time and the process's
(:class:`pytest_gpuperf.measure.timing.CpuClocks`). CPU time counts only the time the thread ran, so
a neighbour that takes the core away stretches the wall clock and not the CPU time: on this
project's 2-core VM with other jobs running, a 160x160 matmul chain (one intra-op thread) read wall
clock IQR 52-56% of the median and thread CPU time 5.2-5.7% (issue 45). But CPU time misses what
the call spends not running: sleeps, I/O, waiting for other threads or processes, lost
parallelism. So CPU time stands in for the wall clock only where the call does no such waiting,
which the rule below checks on both sides (baseline and this run) before it trusts it:

* **single-threaded work**: the process's CPU time is at most :data:`MAX_PARALLELISM` times the
  calling thread's (other threads that work beside it, intra-op or a pool, may wait for each other
  under a neighbour: their spinning is CPU time too);
* **no waiting**: in its least disturbed rounds the thread ran for at least :data:`MIN_CPU_SHARE`
  of the wall time (the :data:`SHARE_QUANTILE` quantile of the per-round thread CPU time / wall
  time: a neighbour preempts some rounds, a sleep or a read is in every one);
* **the same waiting as the baseline** where both sides ran on a quiet host: this run's share is
  not lower than the baseline's by more than the threshold (a sleep that adds 8% to every call).

Then (:func:`decide_clock`): on a quiet host the **wall clock decides** and CPU time decides only
what the wall clock left inconclusive (so a slowdown that only the wall clock sees still fails);
on a busy host (:func:`pytest_gpuperf.verdict.machine.host_busy`) **CPU time decides**, where it is
valid, instead of every regression becoming inconclusive. Every comparison names its clock
(:attr:`pytest_gpuperf.verdict.compare.Comparison.clock`).

Sources: the thread CPU clock is POSIX ``CLOCK_THREAD_CPUTIME_ID`` (Python's ``time.thread_time_ns``);
Google Benchmark reports CPU time beside real time for the same reason, and pyperf warns when a
run's CPU time and wall time disagree (its "system load" check).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

#: The thread ran for at least this share of the wall time in its least disturbed rounds, or the
#: call waits (sleep, I/O, other threads or processes) and only the wall clock sees all of it.
MIN_CPU_SHARE = 0.9
#: The per-round share (thread CPU / wall) read at this quantile: a neighbour preempts some rounds,
#: a wait is in every round.
SHARE_QUANTILE = 0.9
#: Process CPU time over thread CPU time above this: other threads of the process work beside the
#: calling one (intra-op threads), and CPU time is not used to decide.
MAX_PARALLELISM = 1.1

WALL = "wall"
CPU = "cpu"
#: The A/B's wall clock read relative to the reference probe timed beside each round
#: (:attr:`pytest_gpuperf.verdict.paired.Block.referenced`, :func:`pytest_gpuperf.verdict.gate.ab_with_reference`).
REF = "ref"
#: How each clock is named in messages.
CLOCK_NAMES = {WALL: "wall clock", CPU: "CPU time", REF: "wall clock relative to the reference probe"}


def positive_floats(values: Any) -> tuple[float, ...] | None:
    """``values`` (a stored list) as floats when it is a non-empty list or tuple of positive finite
    numbers, else None: how a stored clock's readings are read back (CPU time here, the GPU's SM
    clock in :mod:`pytest_gpuperf.verdict.gpuclock`)."""
    if not isinstance(values, (list, tuple)) or not values:
        return None
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            return None
        out.append(float(v))
    return tuple(out)


@dataclass(frozen=True)
class CpuTime:
    """The CPU time of one benchmark's timed rounds (ms per call).

    ``samples_ms``: the calling thread's CPU time per call, one per round, aligned with the wall
    clock's ``samples_ms`` (same rounds, same order); ``process_samples_ms``: the whole process's
    (intra-op threads included), aligned the same way; ``process_medians_ms``: with several worker
    processes, each one's median of ``samples_ms`` (process order), else None.
    """

    samples_ms: tuple[float, ...]
    process_samples_ms: tuple[float, ...]
    process_medians_ms: tuple[float, ...] | None = None

    @property
    def median_ms(self) -> float:
        """Median thread CPU time per call (ms)."""
        return float(statistics.median(self.samples_ms))

    @property
    def process_median_ms(self) -> float:
        """Median process CPU time per call (ms)."""
        return float(statistics.median(self.process_samples_ms))

    @property
    def parallelism(self) -> float:
        """Process CPU time over the calling thread's (medians): 1.0 for single-threaded work."""
        return self.process_median_ms / self.median_ms

    @property
    def replicates_ms(self) -> tuple[float, ...] | None:
        """The process-level replicates of the thread CPU time (ms): ``process_medians_ms`` when two
        or more processes measured it, else None."""
        pm = self.process_medians_ms
        return pm if pm is not None and len(pm) >= 2 else None

    def share(self, wall_samples_ms: Sequence[float]) -> float | None:
        """The :data:`SHARE_QUANTILE` quantile of the per-round thread CPU / wall time ratios, or
        None when the wall samples are not aligned with these (another length)."""
        if len(wall_samples_ms) != len(self.samples_ms) or not self.samples_ms:
            return None
        ratios = sorted(c / w for c, w in zip(self.samples_ms, wall_samples_ms) if w > 0)
        if not ratios:
            return None
        return ratios[min(len(ratios) - 1, int(SHARE_QUANTILE * len(ratios)))]

    def groups(self, counts: Sequence[int]) -> list[tuple[float, ...]]:
        """``samples_ms`` cut into consecutive groups of ``counts`` samples (each worker process's)."""
        out, i = [], 0
        for n in counts:
            out.append(self.samples_ms[i:i + n])
            i += n
        return out

    def to_dict(self, max_samples: int | None = None) -> dict[str, Any]:
        """The JSON form (the key ``cpu_time`` of report and baseline entries): the medians of all
        samples, and the samples, at most ``max_samples`` of them, thinned as the wall clock's are
        (:func:`pytest_gpuperf.verdict.stats.thin`: the same rounds for the same count)."""
        thread, process = list(self.samples_ms), list(self.process_samples_ms)
        if max_samples is not None:
            from pytest_gpuperf.verdict.stats import thin

            thread, process = thin(thread, max_samples), thin(process, max_samples)
        d: dict[str, Any] = {"median_ms": self.median_ms, "process_median_ms": self.process_median_ms,
                             "samples_ms": thread, "process_samples_ms": process}
        if self.process_medians_ms is not None:
            d["process_medians_ms"] = list(self.process_medians_ms)
        return d

    @classmethod
    def from_dict(cls, d: Any) -> "CpuTime | None":
        """From the JSON form; None when absent or malformed (a result reads without its CPU time)."""
        if not isinstance(d, Mapping):
            return None
        thread, process = positive_floats(d.get("samples_ms")), positive_floats(d.get("process_samples_ms"))
        if thread is None or process is None or len(thread) != len(process):
            return None
        return cls(thread, process, positive_floats(d.get("process_medians_ms")))

    @classmethod
    def merged(cls, parts: Sequence["CpuTime | None"]) -> "CpuTime | None":
        """The CPU time of several worker processes' results, in process order (samples concatenated,
        ``process_medians_ms`` each one's median); None unless every part has one."""
        if not parts or any(p is None for p in parts):
            return None
        ps = [p for p in parts if p is not None]
        return cls(tuple(v for p in ps for v in p.samples_ms), tuple(v for p in ps for v in p.process_samples_ms),
                   tuple(p.median_ms for p in ps) if len(ps) >= 2 else None)


@dataclass(frozen=True)
class ClockSide:
    """What the clock rule reads of one side (the baseline or this run): ``share`` (see
    :meth:`CpuTime.share`), ``parallelism`` (:attr:`CpuTime.parallelism`), ``busy`` (the host-busy
    reason while it was measured, None: quiet or unknown)."""

    share: float | None
    parallelism: float | None
    busy: str | None = None

    @classmethod
    def of(cls, cpu: CpuTime | None, wall_samples_ms: Sequence[float], busy: str | None) -> "ClockSide":
        if cpu is None:
            return cls(None, None, busy)
        return cls(cpu.share(wall_samples_ms), cpu.parallelism, busy)


def cpu_time_invalid(current: ClockSide, baseline: ClockSide, threshold: float) -> str | None:
    """Why CPU time cannot stand in for the wall clock in this comparison, or None when it can
    (the rule of the module doc). Pure."""
    for side, name in ((baseline, "the baseline"), (current, "this run")):
        if side.share is None or side.parallelism is None:
            return f"{name} has no CPU time"
        if side.parallelism > MAX_PARALLELISM:
            return (f"other threads work beside the calling one ({name}: process CPU time {side.parallelism:.2f}x "
                    f"the thread's)")
        if side.share < MIN_CPU_SHARE:
            return (f"the call waits ({name}: the thread ran {side.share * 100:.0f}% of the wall time in its least "
                    f"disturbed rounds, under {MIN_CPU_SHARE * 100:.0f}%)")
    assert current.share is not None and baseline.share is not None
    if current.busy is None and baseline.busy is None and current.share < baseline.share / (1 + threshold):
        return (f"the call waits more than the baseline's (the thread ran {current.share * 100:.0f}% of the wall "
                f"time, the baseline's {baseline.share * 100:.0f}%)")
    return None


def decide_clock(wall: Any, cpu: Any, invalid: str | None, busy: str | None) -> tuple[Any, str]:
    """Which comparison stands: ``(comparison, why)``, ``wall`` and ``cpu`` being
    :class:`~pytest_gpuperf.verdict.compare.Comparison` of the same benchmark on each clock (``cpu``
    None: no CPU time), ``invalid`` what :func:`cpu_time_invalid` said, ``busy`` the host-busy reason
    of this run (None: quiet). ``wall`` must be the verdict *before* a busy host downgraded it.

    * no valid CPU time: the wall clock's;
    * busy host: CPU time's (the wall clock's ratio in the note);
    * quiet host: the wall clock's, unless it is inconclusive and CPU time's is decisive.

    Pure; the comparison returned is not yet labelled (:func:`pytest_gpuperf.verdict.gate.with_clock`
    sets ``clock`` and the note)."""
    if cpu is None or invalid is not None:
        return wall, WALL
    if busy is not None:
        return cpu, CPU
    if wall.verdict.value == "inconclusive" and cpu.verdict.value in ("regressed", "improved", "unchanged"):
        return cpu, CPU
    return wall, WALL
