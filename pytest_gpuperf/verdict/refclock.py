"""The reference clock: the wall clock read relative to the reference probe timed beside the rounds
(pure: stdlib only).

On the CPU backend every timed process interleaves a fixed pure-Python loop with the benchmark's
rounds (:func:`pytest_gpuperf.measure.probe.reference_probe`, after every k-th round). Each round's
time divided by the probe's time beside it is a dimensionless multiple of the probe: whatever slowed
the whole machine for a stretch (this project's VM runs all code 1.5-2x slower for tens of ms to
seconds, CPU time included) slows both and cancels; what slowed the benchmark's own code does not,
since the probe is fixed code. Measured (issue 45, 2-core VM, quiet, 2026-11-29,
``benchmarks/speed_modes.py``; docs/verdicts.md): process medians of 8 processes spread 1.73x on
the wall clock and 1.07x on this one; stored 3-vs-3 windows within 10% of each other 40% of the
time raw and 97% normalized. The probe has a spread of its own from one process to the next
(the loop's layout in memory, not the minute): a JSON round trip over the loop beside it had a
log SD of 3.2% over 12 processes where the round trip alone had 1.0%, and cattrs' update read
4.6% on this clock against 0.8% on the wall clock (same VM, 2026-11-29, second session;
docs/verdicts.md). So this clock decides only what the wall clock leaves inconclusive.

The same normalization serves the A/B's blocks (:attr:`pytest_gpuperf.verdict.paired.Block.referenced`)
and the stored stage, where each worker process keeps the median of its normalized rounds
(:attr:`pytest_gpuperf.verdict.result.BenchTiming.ref_medians`) and
:func:`pytest_gpuperf.verdict.gate.with_reference` decides on them where the wall clock (and CPU
time) left the verdict inconclusive.
"""

from __future__ import annotations

import math
from typing import Sequence


def referenced(samples_ms: Sequence[float], probe_ms: Sequence[float], every: int) -> tuple[float, ...] | None:
    """Each round's time over the reference probe's beside it (dimensionless: multiples of the
    probe's time). ``samples_ms``: per-call times of the rounds (ms, measurement order);
    ``probe_ms``: the probe's times (ms), probe j timed right after rounds ``j*every ..
    (j+1)*every - 1`` (the last group maybe shorter). A group of rounds is divided by the geometric
    mean of the probes just before and just after it (the first group has only the one after).
    None when the probes do not cover the rounds (none timed, another count, a non-positive time)."""
    n, every = len(samples_ms), max(1, int(every))
    if not n or len(probe_ms) != -(-n // every) or min(probe_ms) <= 0:
        return None
    p = probe_ms
    level = [p[0] if j == 0 else math.sqrt(p[j - 1] * p[j]) for j in range(len(p))]
    return tuple(v / level[i // every] for i, v in enumerate(samples_ms))

