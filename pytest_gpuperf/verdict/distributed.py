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

Faults (a rank that crashes or hangs) are bounded by time: :func:`collective_budget` is how long
each of a benchmark's collectives after its first may wait (s), :func:`roll_call_timeout` how
long the roll call after a failed collective waits for the ranks, :func:`missing_ranks_of` reads
the ranks that did not answer out of ``torch.distributed.monitored_barrier``'s error and
:func:`roll_call_text` says it in a failure message, and :func:`fault_text` heads that message
with the ranks whose test raised (:func:`exception_line`: type, message, innermost frame).
"""

from __future__ import annotations

import dataclasses
import re
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
    (dimensionless, >= 1). ``reference_ms``: each rank's session-start reference workload (the
    compute one, :func:`pytest_gpuperf.measure.drift.measure_reference`'s ``matmul_ms``, ms), the
    speed of its core in that session; None where not read. ``cpu_ms``: each rank's median CPU time
    per call (the calling thread's, ms), which a neighbour taking the core does not stretch; None
    where a rank did not read it. Build with :meth:`of`.
    """

    medians_ms: tuple[float, ...]
    slowest_rank: int
    imbalance: float
    reference_ms: tuple[float, ...] | None = None
    cpu_ms: tuple[float, ...] | None = None

    @property
    def world_size(self) -> int:
        """How many ranks measured it."""
        return len(self.medians_ms)

    @classmethod
    def of(cls, medians_ms: Sequence[float], reference_ms: Sequence[Any] | None = None,
           cpu_ms: Sequence[Any] | None = None) -> "RankTiming":
        """From each rank's median (ms, rank order) and, optionally, each rank's reference workload
        and median CPU time per call (ms; each kept only when every rank has a positive one). Raises
        ``ValueError`` for fewer than one rank or a median that is not a positive finite number."""
        medians = tuple(float(m) for m in medians_ms)
        if not medians or any(not (m > 0 and m < float("inf")) for m in medians):
            raise ValueError(f"rank medians {medians!r}: expected one positive finite median (ms) per rank")
        slowest = max(range(len(medians)), key=lambda r: medians[r])
        return cls(medians, slowest, medians[slowest] / min(medians), _per_rank(reference_ms, len(medians)),
                   _per_rank(cpu_ms, len(medians)))

    def on_cpu(self) -> "RankTiming | None":
        """The same ranks timed by their CPU time (``cpu_ms`` as the medians; no reference
        workload, which is wall-clock), or None where a rank did not read it."""
        return RankTiming.of(self.cpu_ms) if self.cpu_ms is not None else None

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
        d = {"world_size": self.world_size, "medians_ms": list(self.medians_ms),
             "slowest_rank": self.slowest_rank, "imbalance": self.imbalance}
        if self.reference_ms is not None:
            d["reference_ms"] = list(self.reference_ms)
        if self.cpu_ms is not None:
            d["cpu_medians_ms"] = list(self.cpu_ms)
        return d

    @classmethod
    def from_dict(cls, d: Any) -> "RankTiming | None":
        """An entry's ``ranks`` (see :meth:`to_dict`); None when absent or unreadable."""
        if not isinstance(d, Mapping):
            return None
        try:
            refs, cpu = d.get("reference_ms"), d.get("cpu_medians_ms")
            return cls.of(d["medians_ms"], refs if isinstance(refs, list) else None,
                          cpu if isinstance(cpu, list) else None)
        except (KeyError, TypeError, ValueError):
            return None


def _per_rank(values: Sequence[Any] | None, n: int) -> tuple[float, ...] | None:
    """``values`` as floats when there is one positive finite number per rank (``n``), else None."""
    vals = tuple(values) if values is not None else ()
    ok = len(vals) == n and all(isinstance(v, (int, float)) and 0 < v < float("inf") for v in vals)
    return tuple(float(v) for v in vals) if ok else None


#: Against one stored run, a straggler carries a regression only when its own shift is at least
#: this many times the other ranks' (each rank against its stored level, :func:`rank_shifts`;
#: without the baseline's rank timing, its median over theirs). On this project's 2-core VM (2 gloo
#: ranks, ``benchmarks/distributed_aa.py``, docs/distributed.md) the A/A regressions that a straggler
#: failed read 1.22-1.45 (a 10 µs sum's rank 0 1.37x and 1.45x, its CPU time too, for a whole
#: benchmark and its re-measure; a matmul 1.29x), while twice the work on rank 1 read 1.56-2.78 in 41
#: of 42 sessions, quiet and with one core busy, and 1.38 in one (2026-11-28); on shared cores that
#: extra work takes CPU from the other ranks too (+8% to +76%), so the bar is on the shift over
#: theirs, not on their level.
ONE_RUN_STRAGGLER_RATIO = 1.5

#: In an in-step re-measure the straggler holds when the same rank is at least this many times the
#: others' median again (a passing disturbance reads about 1.0: in an A/A study, 1.27x first and
#: 1.00x in the re-measure).
REMEASURE_STRAGGLER_RATIO = 1.25


#: A rank's slowness over the session needs at least this many earlier benchmarks to explain a
#: straggler (:func:`session_rank_slowness`).
SESSION_RANK_BENCHMARKS = 2


def rank_shifts(current: RankTiming | None, stored: RankTiming | None) -> tuple[float, ...] | None:
    """Each rank's median this run over its own stored median (rank order), or None without both or
    at another world size: how much each rank moved against the baseline."""
    if current is None or stored is None or current.world_size != stored.world_size or current.world_size < 2:
        return None
    return tuple(c / s for c, s in zip(current.medians_ms, stored.medians_ms))


def _relative(shift: Sequence[float], rank: int) -> float:
    """``rank``'s shift over the median of the other ranks' shifts."""
    return shift[rank] / statistics.median([v for r, v in enumerate(shift) if r != rank])


def session_rank_slowness(earlier: Sequence[Sequence[float]], rank: int) -> tuple[float, int] | None:
    """How much slower ``rank`` ran than the other ranks in the session's earlier benchmarks, each
    against its own stored level: the median over those benchmarks of its shift over the others'
    (:func:`rank_shifts`), and how many benchmarks that is; None with fewer than
    :data:`SESSION_RANK_BENCHMARKS` of the same world size (pure; issue 45)."""
    usable = [s for s in earlier if len(s) > rank and len(s) >= 2]
    if len(usable) < SESSION_RANK_BENCHMARKS:
        return None
    return float(statistics.median(_relative(s, rank) for s in usable)), len(usable)


def _own_shift(now: Straggler, current: RankTiming, stored: RankTiming | None) -> float:
    """The straggler's shift over the other ranks' shifts (each against its stored level,
    :func:`rank_shifts`); its contrast with the other ranks this run when the baseline has no rank
    timing of the same world size."""
    shift = rank_shifts(current, stored)
    return _relative(shift, now.rank) if shift is not None else now.median_ms / now.others_ms


_CORE = " (each against its stored level): its core in this session, not this benchmark's code"


def _slow_core(c: Any, rank: int, current: RankTiming, stored: RankTiming | None,
               earlier: Sequence[Sequence[float]]) -> str | None:
    """Why ``rank``'s straggling in this benchmark is its core's in this session (see
    :func:`one_stored_run`), or None: its shift over the other ranks' here is within 1 +
    ``c.threshold`` of how much slower it ran in the session's earlier benchmarks
    (:func:`session_rank_slowness`) or in its session-start reference workload
    (``RankTiming.reference_ms``, this run's and the baseline's)."""
    shift = rank_shifts(current, stored)
    if shift is None:
        return None
    here = _relative(shift, rank) / (1 + c.threshold)
    session = session_rank_slowness(earlier, rank)
    if session is not None and session[0] >= here:
        return (f"it ran {session[0]:.2f}x slower than the other ranks in the {session[1]} earlier benchmarks of "
                f"this session too{_CORE}")
    if stored is not None and current.reference_ms is not None and stored.reference_ms is not None:
        ref = _relative(tuple(a / b for a, b in zip(current.reference_ms, stored.reference_ms)), rank)
        if ref >= here:
            return f"its session-start reference workload ran {ref:.2f}x slower than the other ranks' too{_CORE}"
    return None


def one_stored_run(c: Any, stored_runs: int, current: RankTiming | None, stored: RankTiming | None,
                   earlier: Sequence[Sequence[float]] = (), remeasured: Sequence[RankTiming | None] = ()) -> Any:
    """Under torchrun (in step, one session), a regression against a baseline of one stored run
    stands only when a rank carries it (pure; issue 45).

    ``c``: the timing comparison (:class:`~pytest_gpuperf.verdict.compare.Comparison`);
    ``stored_runs``: the baseline's stored runs; ``current``/``stored``: this run's and the
    baseline's :class:`RankTiming`. With one stored run the gate knows nothing of how much a whole
    session moves from one launch to the next, and on shared cores it moves a lot: on this
    project's 2-core VM, A/A sessions of 2 gloo ranks against one recorded run read a bare
    all-reduce 1.57x-2.80x and a 5 µs sum 1.09x, 4 false failures in 40 benchmark-runs with nothing
    else running (docs/distributed.md). A straggler is a contrast inside one session (one rank
    slower than the others in the same rounds), which a shift of the whole session does not make:
    a regression with a straggler this run (:data:`STRAGGLER_RATIO`) that the baseline did not
    have (another rank, or none), whose own shift is at least :data:`ONE_RUN_STRAGGLER_RATIO` times
    the other ranks' (each against its stored level), still fails, whether or not the other ranks
    kept the baseline's level (on shared cores a rank's extra work takes CPU from the others: the
    note then says how much they moved); a smaller one ends ``inconclusive`` naming the rank. (A rank waiting in a
    collective for a slow one is slow too: in the same study, all-reduces whose ranks were 1.1-1.3x
    apart had both ranks about 2x the baseline's.) Any other regression becomes ``inconclusive``, saying why, with the advice to
    record more update runs (it fails under ``--gpuperf-strict``). So does an ``improved`` one, by the
    same argument (an A/A study's sessions read a 5 µs sum improved in 13 of 20 against one recorded
    run: a slow recording session, not faster code). Other verdicts, and baselines of 2 or more
    stored runs (the gate then has the spread between sessions), are returned unchanged.

    ``earlier`` and ``remeasured``: see :func:`_straggler_verdict`.

    A verdict decided on CPU time (``c.clock``, a busy host: :func:`~pytest_gpuperf.verdict.gate.with_cpu_time`)
    reads the ranks by their CPU time too (:meth:`RankTiming.on_cpu`, this run's, the baseline's and
    the re-measures'; not the session's wall-clock shifts): a neighbour that takes one rank's core
    stretches its wall clock, not its CPU time, while twice the work doubles both."""
    from pytest_gpuperf.verdict.advice import Advice
    from pytest_gpuperf.verdict.compare import Verdict, with_note
    from pytest_gpuperf.verdict.cputime import CPU

    if c is None or stored_runs >= 2 or current is None:
        return c
    if c.verdict is Verdict.IMPROVED:
        return with_note(c, "one stored run under torchrun: how much a whole session moves from one launch to the "
                            "next is not known, so this session's speed-up is not told from the code's; record the "
                            "baseline in 2 more update runs to decide", advice=(Advice.STRICT,),
                         verdict=Verdict.INCONCLUSIVE)
    if c.verdict is not Verdict.REGRESSED:
        return c
    on_cpu = current.on_cpu() if c.clock == CPU else None
    if on_cpu is not None:  # a busy host: the ranks on the clock that decided
        current, stored = on_cpu, stored.on_cpu() if stored is not None else None
        remeasured = tuple(r.on_cpu() if r is not None else None for r in remeasured)
        earlier = ()  # the session's wall-clock shifts, which the neighbour stretched
    now = current.straggler()
    before = stored.straggler() if stored is not None else None
    level = statistics.median(stored.medians_ms) if stored is not None else c.baseline_median_ms
    if now is not None and (before is None or before.rank != now.rank) and level:
        return _straggler_verdict(c, now, current, stored, level, earlier, remeasured)
    return with_note(c, "one stored run under torchrun: how much a whole session moves from one launch to the "
                        "next is not known, and no rank carries this slowdown (no straggler); record the baseline "
                        "in 2 more update runs to decide", advice=(Advice.STRICT,), verdict=Verdict.INCONCLUSIVE)


def _straggler_verdict(c: Any, now: Straggler, current: RankTiming, stored: RankTiming | None, level: float,
                       earlier: Sequence[Sequence[float]], remeasured: Sequence[RankTiming | None]) -> Any:
    """:func:`one_stored_run`'s verdict of a regression with a straggler this run that the baseline
    did not have (``level``: the baseline's level, ms): it stands (with a note when the other ranks
    moved) when the rank's own shift reaches :data:`ONE_RUN_STRAGGLER_RATIO`, holds in the
    re-measures and is not its core's; else ``inconclusive``, saying which.

    ``earlier``: the :func:`rank_shifts` of the session's earlier benchmarks. A straggler that the
    same rank was in them too -- its slowness over the session (:func:`session_rank_slowness`), times
    1 + ``c.threshold``, at least its shift over the others in this benchmark -- or in its
    session-start reference workload (``RankTiming.reference_ms`` of this run against the
    baseline's: the first benchmark has no earlier ones) is the rank's core in this session, not
    this benchmark's code (in the study above, rank 0 ran 1.29x slower in every
    benchmark of one A/A session, and its matmul failed): ``inconclusive``, saying so. A rank whose
    work doubled in this benchmark alone is far beyond its session's slowness and still fails.

    ``remeasured``: the rank timings of the in-step re-measures of this regression (``confirm``).
    The straggler must hold in each of them (the same rank, at :data:`REMEASURE_STRAGGLER_RATIO`): in
    the study, an A/A matmul's rank 0 ran 1.27x slower for its first measurement and at the
    others' speed in the re-measure, and the pooled samples still read regressed."""
    from pytest_gpuperf.verdict.advice import Advice
    from pytest_gpuperf.verdict.compare import Verdict, with_note

    moved = now.others_ms / level  # the other ranks against the baseline's level
    own = _own_shift(now, current, stored)
    others = (f", which ran {moved:.2f}x the baseline's level" if moved > 1 + c.threshold else "")
    if own < ONE_RUN_STRAGGLER_RATIO:
        return with_note(c, f"rank {now.rank} is the straggler, but its own shift is only {own:.2f}x the other "
                            f"ranks' (each against its stored level{others}; against one stored run at least "
                            f"{ONE_RUN_STRAGGLER_RATIO:g}x carries a slowdown); record the baseline in 2 more "
                            f"update runs to decide", advice=(Advice.STRICT,), verdict=Verdict.INCONCLUSIVE)
    gone = [r for r in remeasured
            if r is not None and getattr(r.straggler(REMEASURE_STRAGGLER_RATIO), "rank", None) != now.rank]
    why = (f"it ran at the other ranks' speed in the re-measure ({gone[0].imbalance:.2f}x apart, against "
           f"{current.imbalance:.2f}x first): a passing disturbance, not this benchmark's code" if gone
           else _slow_core(c, now.rank, current, stored, earlier))
    if why is not None:
        return with_note(c, f"rank {now.rank} is the straggler, but {why}; record the baseline in 2 more update "
                            f"runs to decide", advice=(Advice.STRICT,), verdict=Verdict.INCONCLUSIVE)
    return with_note(c, f"rank {now.rank} carries it: its own shift is {own:.2f}x the other ranks' (each "
                        f"against its stored level{others})") if others else c


def combine_cpu_rounds(per_rank: Sequence[Sequence[float]], rounds: int) -> tuple[float, ...]:
    """Each round's CPU time per call, the highest of the ranks' (ms), like :func:`combine_rounds`
    for the wall clock; ``()`` unless every rank read it for all ``rounds`` rounds (then no CPU time
    decides)."""
    if not per_rank or any(len(s) != rounds for s in per_rank) or rounds == 0:
        return ()
    return combine_rounds(per_rank)


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


def rank_timing(per_rank: Sequence[Sequence[float]], reference_ms: Sequence[Any] | None = None,
                cpu_per_rank: Sequence[Sequence[float]] | None = None) -> RankTiming:
    """:class:`RankTiming` of each rank's samples (ms): their medians, the slowest rank, the
    imbalance; ``reference_ms`` each rank's session-start reference workload (ms), when read;
    ``cpu_per_rank`` each rank's CPU time per call of the same rounds (ms; the medians kept only when
    every rank read it)."""
    cpu = ([statistics.median(s) if s else None for s in cpu_per_rank] if cpu_per_rank is not None else None)
    return RankTiming.of([statistics.median(s) for s in per_rank], reference_ms, cpu)


def merged_ranks(timings: Sequence[RankTiming | None]) -> RankTiming | None:
    """The per-rank timing of several torchrun launches of one benchmark (``--gpuperf-nproc``
    replicates, or one A/B side's launches): each rank's median the median of its medians (ms) in
    the launches. None when there is none, one is None (a worker process is no launch) or the world
    sizes differ."""
    import statistics

    if not timings or any(t is None for t in timings) or len({t.world_size for t in timings}) != 1:  # type: ignore[union-attr]
        return None
    return RankTiming.of([statistics.median(t.medians_ms[k] for t in timings)  # type: ignore[union-attr]
                          for k in range(timings[0].world_size)])  # type: ignore[union-attr]


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
    """One rank's outcome of a test's phase (call, setup or teardown): ``outcome`` (``"passed"``, ``"failed"``,
    ``"skipped"``), ``raised`` (the test raised: an error of this rank's own, not a verdict),
    ``text`` (why it failed or skipped, shortened) and ``summary`` (the exception it raised in one
    line, :func:`exception_line`; ``""`` when it raised none)."""

    outcome: str
    raised: bool = False
    text: str = ""
    summary: str = ""


def exception_line(type_name: str, message: str, path: str, line: int, function: str) -> str:
    """A rank's exception in one line, as the other ranks' failure messages name it: ``"ValueError:
    <message's first line> (at test_d.py:10 in f)"``; ``path``, ``line`` and ``function``: its
    innermost frame (issue 46)."""
    first = (str(message).strip().splitlines() or [""])[0][:300]
    return f"{type_name}{': ' + first if first else ''} (at {path}:{line} in {function})"


def _named(rank: int, o: RankOutcome) -> str:
    """``"rank 1 raised <summary>\n<text>"`` (``"rank 1 failed: <text>"`` without a summary)."""
    return f"rank {rank} raised {o.summary}\n{o.text}" if o.summary else f"rank {rank} failed: {o.text}"


def agreed_outcome(per_rank: Sequence[RankOutcome]) -> tuple[str, str]:
    """The one outcome every rank reports for a test: ``(outcome, why)``.

    Rank 0 judges (its verdict, pass or fail, is everyone's: the ranks measured the same combined
    samples, but only rank 0's judgement counts); a test that raised on another rank while rank 0
    passed fails everywhere, naming the first such rank (``"rank 1 raised ValueError: ... (at
    test_d.py:10 in f)"``, then its text; ``"rank 1 failed: ..."`` without a summary), and one that
    raised on rank 0 names rank 0 the same way. Raises ``ValueError`` for no ranks.
    """
    if not per_rank:
        raise ValueError("no rank outcomes to agree on")
    first = per_rank[0]
    if first.outcome == "failed":
        return "failed", _named(0, first) if first.raised else first.text
    for rank, o in enumerate(per_rank[1:], start=1):
        if o.outcome == "failed" and o.raised:
            return "failed", _named(rank, o)
    return first.outcome, first.text


def agreed_phase(per_rank: Sequence[RankOutcome]) -> tuple[str, str]:
    """The one outcome every rank reports for a test's setup or teardown: ``(outcome, why)``.

    Unlike the call (:func:`agreed_outcome`), no rank judges: a setup or teardown that failed on
    any rank fails on every rank, naming the first such rank (``"setup: rank 1 raised ..."`` is
    worded by the caller from ``why`` = ``"rank 1 raised <its summary>\n<its text>"``, or ``"rank 1
    failed: <its text>"`` without a summary); else one that skipped on
    any rank skips on every rank (a rank that ran the call alone would wait in its benchmark's
    collectives for ranks that never come); else every rank's own outcome stands. Raises
    ``ValueError`` for no ranks."""
    if not per_rank:
        raise ValueError("no rank outcomes to agree on")
    for kind in ("failed", "skipped"):
        for rank, o in enumerate(per_rank):
            if o.outcome == kind:
                return kind, _named(rank, o) if kind == "failed" else f"rank {rank} {kind}: {o.text}"
    return per_rank[0].outcome, per_rank[0].text


# ----------------------------------------------------------------------------- faults: how long to wait

#: The shortest wait (s) of a benchmark's collectives after its first: enough for a slow rank's
#: round, extra calls or profile on a busy machine, whatever the benchmark's own time.
MIN_BUDGET_S = 30.0
#: A benchmark's collectives after its first wait up to this many times its own time
#: (``warmup_time + max_time``): the ranks are in step then, and a wait that long is a fault.
BUDGET_FACTOR = 4.0
#: The longest wait (s) of the roll call after a failed collective (the ranks that are still
#: there arrive within moments of each other).
ROLL_CALL_S = 10.0


def collective_budget(warmup_time_s: float, max_time_s: float, rank_timeout_s: float) -> float:
    """How long (s) each collective of a benchmark after its first may wait for the other ranks:
    ``min(rank_timeout_s, max(MIN_BUDGET_S, BUDGET_FACTOR * (warmup_time_s + max_time_s)))``.

    ``warmup_time_s``/``max_time_s``: the benchmark's ``warmup_time`` and ``max_time`` (s);
    ``rank_timeout_s``: ``--gpuperf-rank-timeout`` (s), which also bounds the first collective
    (the ranks may still be in their own setup then) and is never exceeded. Raises ``ValueError``
    for a negative time or a ``rank_timeout_s`` that is not > 0."""
    if not (warmup_time_s >= 0 and max_time_s >= 0 and rank_timeout_s > 0):
        raise ValueError(f"collective_budget({warmup_time_s!r}, {max_time_s!r}, {rank_timeout_s!r}): expected times "
                         f">= 0 s and a rank timeout > 0 s")
    return min(float(rank_timeout_s), max(MIN_BUDGET_S, BUDGET_FACTOR * (warmup_time_s + max_time_s)))


def roll_call_timeout(rank_timeout_s: float) -> float:
    """How long (s) rank 0's roll call after a failed collective waits for the others:
    ``min(ROLL_CALL_S, rank_timeout_s)``."""
    return min(ROLL_CALL_S, float(rank_timeout_s))


_MONITORED = re.compile(r"\bRanks?\s+(\d+(?:\s*,\s*\d+)*)\s+failed to pass monitoredBarrier")


def missing_ranks_of(text: str) -> tuple[int, ...] | None:
    """The ranks that ``torch.distributed.monitored_barrier``'s error on rank 0 names, sorted:
    ``"[Rank 0]: Ranks 2, 3 failed to pass monitoredBarrier in 5000 ms"`` gives ``(2, 3)`` (torch
    also writes ``"Rank 2 failed ..."`` for one rank, and logs one such line per rank before the
    summary: every line counts). None when the text names no rank this way (another error: the
    caller keeps the text)."""
    found = {int(n) for m in _MONITORED.finditer(text) for n in re.split(r"\s*,\s*", m.group(1))}
    return tuple(sorted(found)) if found else None


def _seconds(s: float) -> str:
    return f"{s:.3g} s"


def roll_call_text(missing: Sequence[int] | None, waited_s: float | None, *, text: str = "",
                   caller_answered: bool = True, roll_call_s: float | None = None,
                   watchdog_dir: str | None = None, raised: Sequence[int] = ()) -> str:
    """What a failure message says of the ranks that did not answer (after a failed collective).

    ``missing``: the ranks that did not answer rank 0's roll call (empty: every rank answered;
    None: not known, then ``text``, the roll call's own error, is shown); ``waited_s``: how long
    the failed collective waited (s; None: the process group's own timeout, not known here);
    ``caller_answered``: False when rank 0, which calls the roll, sent no result to this rank
    within ``roll_call_s`` s (it crashed or hung itself); ``watchdog_dir``: the folder on this node
    where each rank's hung-rank traceback goes (:func:`watchdog_path`; None: to each rank's own
    output); ``raised``: the ranks whose test raised (their notes in that folder): when every rank
    answered, one of them left the collectives, none was late. Without the folder a rank's raise
    is not known here, and the text says that one was late or raised.
    """
    within = f" within {_seconds(waited_s)}" if waited_s is not None else ""
    if not caller_answered:
        late = f" within {_seconds(roll_call_s)}" if roll_call_s is not None else ""
        return (f"rank 0, which calls the roll of the ranks, sent no answer{late}: rank 0 crashed or hung "
                f"(if it hung, its traceback (faulthandler) is in its output)")
    if missing is None:
        first = (text.strip().splitlines() or ["no text"])[0][:300]
        return f"the roll call of the ranks failed: {first}"
    if not missing and raised:
        return f"every rank answered the roll call afterwards: {_ranks(raised)} raised, none was gone"
    if not missing:
        maybe = " or raised (its own failure says which)" if watchdog_dir is None else ""
        return (f"every rank answered the roll call afterwards: one was late{within}{maybe}, not gone (a longer "
                f"rank timeout or max_time gives a late one more time)")
    if len(missing) == 1:
        where = "its output" if watchdog_dir is None else watchdog_path(watchdog_dir, missing[0])
        return (f"rank {missing[0]} did not answer{within} (crashed, hung, or still running): if it hung, its "
                f"traceback (faulthandler) is in {where}")
    names = ", ".join(str(r) for r in missing)
    where = "their output" if watchdog_dir is None else watchdog_path(watchdog_dir, "<rank>")
    return (f"ranks {names} did not answer{within} (crashed, hung, or still running): if they hung, their "
            f"tracebacks (faulthandler) are in {where}")


def _ranks(ranks: Sequence[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(str(r) for r in sorted(ranks))


def _in_a_collective(summary: str) -> bool:
    """The exception's innermost frame is in ``torch.distributed``: a collective that failed
    because another rank left it, not the fault itself."""
    where = summary.rsplit(" (at ", 1)[-1].replace("\\", "/")
    return "/torch/distributed/" in "/" + where


def fault_text(rank: int, world_size: int, name: str, error: str, roll: str,
               raised: Mapping[int, str] | None = None) -> str:
    """Why the session is broken, as every later failure message repeats it: this ``rank`` (of
    ``world_size``)'s collective ``name`` failed with ``error`` (``"Type: message"``), then
    ``roll``, what the roll call found (:func:`roll_call_text`).

    ``raised``: rank -> its exception's one line (:func:`exception_line`) for the ranks whose test
    raised before they left the collectives (issue 46). Then that is the headline, not the
    collective: ``"rank 1 raised ValueError: ... (at test_d.py:10 in f); so rank 0 of 2: broadcast
    failed: ..."``. A rank whose own exception is a collective that failed in ``torch.distributed``
    (the user's ``all_reduce`` that waited for the rank that raised) comes after the others; then
    rank order."""
    if not raised:
        return f"rank {rank} of {world_size}: {name} failed, a rank crashed or hung: {error}; {roll}"
    order = sorted(raised, key=lambda r: (_in_a_collective(raised[r]), r))
    headline = "; ".join(f"rank {r} raised {raised[r]}" for r in order)
    return f"{headline}; so rank {rank} of {world_size}: {name} failed: {error}; {roll}"


#: Lines of a hung rank's traceback quoted in the other ranks' failure messages.
TRACEBACK_LINES = 20


def watchdog_path(folder: str, rank: int | str) -> str:
    """The file (in ``folder``, shared by the ranks of one node) where ``rank``'s hung-rank
    traceback goes: ``<folder>/rank<rank>.txt``."""
    return f"{folder.rstrip('/')}/rank{rank}.txt"


def raised_path(folder: str, rank: int | str) -> str:
    """The file (in the same ``folder``) where ``rank`` leaves why its test raised, for the other
    ranks' failure messages: ``<folder>/rank<rank>-raised.txt``."""
    return f"{folder.rstrip('/')}/rank{rank}-raised.txt"


def last_dump(text: str, lines: int = TRACEBACK_LINES) -> str:
    """The last traceback dump of ``faulthandler.dump_traceback_later`` in ``text`` (from its last
    ``Timeout (…)!`` line), cut to its first ``lines`` lines (faulthandler writes the innermost
    frame first; a cut says how many lines it left out); ``""`` when ``text`` has none."""
    start = text.rfind("Timeout (")
    if start < 0:
        return ""
    dump = text[start:].rstrip().splitlines()
    if len(dump) > lines:
        dump = dump[:lines] + [f"... ({len(dump) - lines} more lines)"]
    return "\n".join(dump)


def hung_rank_tracebacks(tracebacks: Mapping[int, str]) -> str:
    """What the other ranks' failure messages quote of the hung ranks' tracebacks
    (``tracebacks``: rank -> :func:`last_dump` of its watchdog file; empty ones left out): each
    under a line naming the rank, indented; ``""`` when there is none."""
    parts = [f"\nrank {r}'s traceback (faulthandler, when it did not reach the next collective in time):\n"
             + "\n".join("    " + line for line in tb.splitlines())
             for r, tb in sorted(tracebacks.items()) if tb]
    return "".join(parts)


def watchdog_delay(wait_s: float, rank_timeout_s: float) -> float:
    """When (s after one of the plugin's collectives starts, during a benchmark) a rank that has
    not started the next one writes every thread's traceback (``faulthandler``): ``wait_s`` (that
    collective's wait) plus half the roll call's (:func:`roll_call_timeout`). So a rank that only
    waits in a collective fails it first (and disarms), and a rank hung in its own code writes
    its traceback before the other ranks' roll call ends and they exit (torchrun then stops it)."""
    return float(wait_s) + roll_call_timeout(rank_timeout_s) / 2


def launched_result(result: Any, baseline: Any, reference: tuple[int, float, str] | None, folder: str,
                    world_size: int) -> tuple[Any, str | None]:
    """``--gpuperf-nproc N``: a benchmark's result decided from its torchrun launches, with what a
    rank of a launch the user started adds to it, and the note to give. Its scaling efficiency
    against ``reference`` (``(world size, stored median ms, file as shown)``: the benchmark's
    baseline at the smallest smaller world size, :class:`~pytest_gpuperf.storage.scaling.ScalingReference`; ``folder``: the
    world-size-1 folder as shown) by :func:`~pytest_gpuperf.verdict.scaling.scaling_of`; and its
    communication's change against ``baseline`` (a
    :class:`~pytest_gpuperf.storage.baseline.BaselineEntry` or None;
    :func:`~pytest_gpuperf.verdict.communication.change_text`). Raises ``ValueError`` as
    :class:`~pytest_gpuperf.verdict.scaling.ScalingCheck` does."""
    from pytest_gpuperf.verdict.scaling import scaling_of

    options = result.options
    check, note = scaling_of(options.scaling, options.min_scaling_efficiency, world_size, result.median_ms,
                             reference, folder)
    if check is not None:
        result = result.replace(scaling=check)
    if result.communication is not None and baseline is not None:
        from pytest_gpuperf.verdict.communication import Communication, change_text

        then = Communication.from_dict(baseline.data.get("communication"))
        result = result.replace(communication=dataclasses.replace(result.communication,
                                                                  change=change_text(then, result.communication)))
    return result, note
