"""How precisely one worker process needs its median: the rounds a process spends, given the
spread between processes (issue 45, "no process that cannot help", for the rounds inside one).

A replicated comparison decides on process medians (:mod:`pytest_gpuperf.verdict.compare`): each
side's estimate is the mean of P log medians, whose variance is ``(s_b^2 + s_w^2 / n) / P`` with
``s_b`` the spread between processes (their speed modes) and ``s_w / sqrt(n)`` the error of one
process's median over its n rounds. This is two-stage sampling, and its cost-optimal allocation
(Cochran, *Sampling Techniques*, 3rd ed. 1977, section 10.6) stops adding rounds to a process once
``s_w^2 / n`` is small beside ``s_b^2``: past that point the rounds buy nothing the next process
would not. A timed round loop already stops early once the 95% CI half-width of its median is below
``target_precision`` (0.5% by default); that is far finer than needed where processes differ by
10-50% (kornia's torch.compile'd suite: 6-30% between-process SD at its median benchmark, its
processes' medians within about 1% each; docs/verdicts.md, "Two more suites: kornia and pint").

:func:`process_precision` gives the half-width a worker process aims at for one benchmark:
``BETWEEN_SHARE`` of the between-process SD its baseline stored (the smaller of the wall clock's and the
CPU time's process medians: either may decide), so the
process median's own error adds at most 1/(1.96/BETWEEN_SHARE)^2 (under 2%) to the variance of a
process median, never looser than ``THRESHOLD_SHARE`` of the threshold (a wide spread recorded once
does not make every process sloppy) and never finer than ``target_precision``. It only moves the
early stop: ``max_time``, ``min_rounds`` and ``max_rounds`` bound the rounds as before, and a
``target_precision`` of 0 (stop early never) stays 0. Pure.
"""

from __future__ import annotations

from typing import Sequence

from pytest_gpuperf.verdict.escalation import log_sd

#: A process's 95% CI half-width may be this share of the baseline's between-process SD (of the
#: log process medians): its variance is then (0.25 / 1.96)^2 = 1.6% of the between-process one.
BETWEEN_SHARE = 0.25
#: ...but never more than this share of the gate's threshold.
THRESHOLD_SHARE = 0.25


def between_sd(replicate_medians_ms: Sequence[float]) -> float | None:
    """The sample SD of the log process medians (a fraction, e.g. 0.17:
    :func:`~pytest_gpuperf.verdict.escalation.log_sd`), None for fewer than 3 positive ones (2 give a
    spread on one degree of freedom: too rough to act on)."""
    positive = [v for v in replicate_medians_ms if isinstance(v, (int, float)) and v > 0]
    return log_sd(positive) if len(positive) >= 3 else None


def process_precision(target_precision: float, threshold: float,
                      *process_medians_ms: Sequence[float] | None) -> float:
    """The 95% CI half-width (fraction of the median) at which a worker process stops timing one
    benchmark early: ``max(target_precision, min(BETWEEN_SHARE * s_b, THRESHOLD_SHARE * threshold))``
    with ``s_b`` the baseline's between-process SD (:func:`between_sd`), the smallest of those of
    ``process_medians_ms`` (each clock's stored process medians, ms: the wall clock's and the CPU
    time's, whichever may decide); ``target_precision`` itself where it is 0 (early stop off) or no
    spread is known. Raises ``ValueError`` for a negative ``target_precision`` or ``threshold``."""
    if target_precision < 0 or threshold < 0:
        raise ValueError(f"target_precision and threshold must be >= 0, got {target_precision!r}, {threshold!r}")
    spreads = [sd for medians in process_medians_ms if medians and (sd := between_sd(medians)) is not None]
    if target_precision == 0 or not spreads:
        return target_precision
    return max(target_precision, min(BETWEEN_SHARE * min(spreads), THRESHOLD_SHARE * threshold))
