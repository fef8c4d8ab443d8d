"""A run's central value: the one statistic its timing verdict decides on (issue 47). Pure: no
numpy, no torch, no pytest, so the history store and the reports read it without either.

With worker processes (``--gpuperf-processes`` >= 2) each process is one replicate and a run's
value is the geometric mean of their medians (pyperf's and JMH's forks; Kalibera & Jones, "Rigorous
Benchmarking in Reasonable Time", ISMM 2013), after a process that a slow period of the machine
disturbed is set aside (:func:`set_aside_slow`); in one process, the median of its rounds.
:func:`pytest_gpuperf.verdict.compare.decide_replicates` compares two such values, so its ratio is
their quotient, and every surface shows the same value as the run's "median".
"""

from __future__ import annotations

import math
import statistics
from typing import Sequence

#: A process median more than this fraction above the median of its side's other processes is set
#: aside as disturbed (:func:`set_aside_slow`) ...
SLOW_PROCESS = 0.10
#: ... when those others agree within this fraction (largest / smallest).
OTHERS_AGREE = 0.05


def set_aside_slow(medians_ms: Sequence[float]) -> tuple[list[float], int | None]:
    """One side's process medians (ms) without a process that a slow period of the machine
    disturbed: with 3 or more, the slowest is set aside when it lies more than
    :data:`SLOW_PROCESS` above the median of the others and those agree within
    :data:`OTHERS_AGREE`. Returns ``(kept medians, index set aside or None)``. Pure.

    Timing noise from interference is one-sided: other work, a slower core or a host's other
    tenants only ever make a call slower (Chen & Revels, "Robust benchmarking in noisy
    environments", 2016, arXiv:1608.04295, which argue for the minimum for that reason). On this
    project's VMs a quiet machine has slow periods of a few seconds in which every benchmark of one
    worker process runs 1.3-1.9x slower (issue 45's study, docs/verdicts.md); one such process of
    three makes the Student t's CI 0.3x-3x wide. A process faster than the others is never set
    aside, and a slowdown that shows in one process of three only is not decided on."""
    xs = [float(v) for v in medians_ms]
    if len(xs) < 3:
        return xs, None
    i = max(range(len(xs)), key=xs.__getitem__)
    rest = xs[:i] + xs[i + 1:]
    if rest[0] > 0 and xs[i] > (1 + SLOW_PROCESS) * statistics.median(rest) and max(rest) / min(rest) < 1 + OTHERS_AGREE:
        return rest, i
    return xs, None


def run_estimate_ms(median_ms: float, process_medians_ms: Sequence[float] | None = None) -> float:
    """A run's central value (ms): the one statistic its timing verdict decides on and every surface
    shows as its "median" (issue 47). With 2 or more worker processes, the geometric mean of their
    medians after :func:`set_aside_slow` (what :func:`~pytest_gpuperf.verdict.compare.decide_replicates` compares, so its ratio is
    the quotient of two such values); in one process, ``median_ms``, the median of its rounds. The
    median of all rounds pooled (``stats.median_ms``) is another statistic: the "pooled median".
    Pure. Raises ``ValueError`` for a non-positive or non-finite value."""
    values = [float(median_ms)] if not process_medians_ms or len(process_medians_ms) < 2 else \
        [float(v) for v in process_medians_ms]
    if not all(math.isfinite(v) and v > 0 for v in values):
        raise ValueError(f"run_estimate_ms: medians must be finite and > 0 ms, got {values!r}")
    if len(values) == 1:
        return values[0]
    kept, _ = set_aside_slow(values)
    return math.exp(sum(math.log(v) for v in kept) / len(kept))
