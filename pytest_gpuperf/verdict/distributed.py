"""Benchmarks under ``torchrun``: the pure logic of combining ranks (no torch, no pytest; issue 35).

Every rank of a distributed benchmark times the same rounds (the rounds are aligned: rank 0
decides when to stop and tells the others before each round, see
:mod:`pytest_gpuperf.measure.distributed`). At the end each rank's per-round samples are gathered
once, and:

* the benchmark's time of round ``i`` is the **slowest rank's** time of round ``i``
  (:func:`combine_rounds`): a synchronous training step costs what its slowest rank costs;
* each rank's median, the **imbalance** (slowest median / fastest median) and the **slowest rank**
  are kept with the result (:class:`RankTiming`);
* a rank whose median is well above the others' is the **straggler** (:meth:`RankTiming.straggler`),
  named in a regression's message. Holistic Trace Analysis calls the same per-rank comparison
  "straggler" detection (its temporal breakdown per rank); the threshold here is
  :data:`STRAGGLER_RATIO`.

The collection check (:func:`first_mismatch`) is here too: all ranks must run the same tests in
the same order, or the collectives of the round loop would pair different benchmarks.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

#: A rank is the straggler when its median is at least this many times the median of the other
#: ranks' medians (1.10: 10% slower). Below that, per-rank noise on a quiet machine (a few %) would
#: name a rank at random.
STRAGGLER_RATIO = 1.10


@dataclass(frozen=True)
class Straggler:
    """The rank that carries a slowdown: ``rank``, its median ``median_ms`` (ms) and the median
    of the other ranks' medians ``others_ms`` (ms)."""

    rank: int
    median_ms: float
    others_ms: float


@dataclass(frozen=True)
class RankTiming:
    """Per-rank timing of one distributed benchmark.

    ``medians_ms``: each rank's median per-call time (ms), in rank order (``len == world_size``);
    ``slowest_rank``: the rank of the highest median; ``imbalance``: slowest median / fastest median
    (dimensionless, >= 1). Build with :meth:`of`.
    """

    medians_ms: tuple[float, ...]
    slowest_rank: int
    imbalance: float

    @property
    def world_size(self) -> int:
        """How many ranks measured it."""
        return len(self.medians_ms)

    @classmethod
    def of(cls, medians_ms: Sequence[float]) -> "RankTiming":
        """From each rank's median (ms, rank order). Raises ``ValueError`` for fewer than one rank or
        a median that is not a positive finite number."""
        medians = tuple(float(m) for m in medians_ms)
        if not medians or any(not (m > 0 and m < float("inf")) for m in medians):
            raise ValueError(f"rank medians {medians!r}: expected one positive finite median (ms) per rank")
        slowest = max(range(len(medians)), key=lambda r: medians[r])
        return cls(medians, slowest, medians[slowest] / min(medians))

    def straggler(self, ratio: float = STRAGGLER_RATIO) -> Straggler | None:
        """The slowest rank when its median is at least ``ratio`` times the median of the other
        ranks' medians, else None (also with one rank)."""
        if len(self.medians_ms) < 2:
            return None
        others = [m for r, m in enumerate(self.medians_ms) if r != self.slowest_rank]
        others_ms = statistics.median(others)
        slowest_ms = self.medians_ms[self.slowest_rank]
        if slowest_ms < ratio * others_ms:
            return None
        return Straggler(self.slowest_rank, slowest_ms, others_ms)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (the entry's ``ranks`` key): ``{"world_size", "medians_ms", "slowest_rank",
        "imbalance"}``."""
        return {"world_size": self.world_size, "medians_ms": list(self.medians_ms),
                "slowest_rank": self.slowest_rank, "imbalance": self.imbalance}

    @classmethod
    def from_dict(cls, d: Any) -> "RankTiming | None":
        """An entry's ``ranks`` (see :meth:`to_dict`); None when absent or unreadable."""
        if not isinstance(d, Mapping):
            return None
        try:
            return cls.of(d["medians_ms"])
        except (KeyError, TypeError, ValueError):
            return None


def combine_rounds(per_rank: Sequence[Sequence[float]]) -> tuple[float, ...]:
    """The benchmark's per-call time of each round: the slowest rank's time of that round (ms).

    ``per_rank[r][i]``: rank r's time of round i (ms). The rounds are aligned, so every rank has
    the same number; raises ``ValueError`` when they differ (naming the counts) or none are given.
    """
    if not per_rank:
        raise ValueError("no ranks to combine")
    counts = [len(s) for s in per_rank]
    if len(set(counts)) != 1 or counts[0] == 0:
        raise ValueError(f"ranks timed different numbers of rounds {counts}: the rounds must be aligned")
    return tuple(max(values) for values in zip(*per_rank))


def rank_timing(per_rank: Sequence[Sequence[float]]) -> RankTiming:
    """:class:`RankTiming` of each rank's samples (ms): their medians, the slowest rank, the imbalance."""
    return RankTiming.of([statistics.median(s) for s in per_rank])


def first_mismatch(per_rank: Sequence[Sequence[str]]) -> tuple[int, int, str | None, str | None] | None:
    """Where the ranks' collected tests first differ: ``(position, rank, rank 0's test there, that
    rank's test there)`` (a test None: that rank's list ended), or None when every rank collected the
    same tests in the same order. ``per_rank[r]``: rank r's node ids in order."""
    reference = list(per_rank[0]) if per_rank else []
    for rank, ids in enumerate(per_rank[1:], start=1):
        ids = list(ids)
        for i in range(max(len(reference), len(ids))):
            a = reference[i] if i < len(reference) else None
            b = ids[i] if i < len(ids) else None
            if a != b:
                return i, rank, a, b
    return None


@dataclass(frozen=True)
class RankOutcome:
    """One rank's outcome of a test's call phase: ``outcome`` (``"passed"``, ``"failed"``,
    ``"skipped"``), ``raised`` (the test raised: an error of this rank's own, not a verdict) and
    ``text`` (why it failed or skipped, shortened)."""

    outcome: str
    raised: bool = False
    text: str = ""


def agreed_outcome(per_rank: Sequence[RankOutcome]) -> tuple[str, str]:
    """The one outcome every rank reports for a test: ``(outcome, why)``.

    Rank 0 judges (its verdict, pass or fail, is everyone's: the ranks measured the same combined
    samples, but only rank 0's judgement counts); a test that raised on another rank while rank 0
    passed fails everywhere, naming the first such rank (``"rank 1 failed: ..."``). Raises
    ``ValueError`` for no ranks.
    """
    if not per_rank:
        raise ValueError("no rank outcomes to agree on")
    first = per_rank[0]
    if first.outcome == "failed":
        return "failed", first.text
    for rank, o in enumerate(per_rank[1:], start=1):
        if o.outcome == "failed" and o.raised:
            return "failed", f"rank {rank} failed: {o.text}"
    return first.outcome, first.text
