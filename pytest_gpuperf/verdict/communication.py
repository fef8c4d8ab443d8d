"""Communication of a distributed benchmark: the pure logic (stdlib only; issue 35, item 4).

From the profiler's events of a few profiled calls on each rank
(:mod:`pytest_gpuperf.measure.communication` reads them):

* **which events are communication** (:func:`classify`): on CUDA the NCCL kernels
  (``ncclKernel*``, ``ncclDevKernel*``: Holistic Trace Analysis's ``is_comm_kernel``,
  ``hta/utils/utils.py``), the other kernels being computation (copies and memsets are neither,
  as in HTA); on the CPU with gloo, the collective ops torch records (``gloo:all_reduce`` on gloo's
  worker thread, ``c10d::allreduce_`` where it is called, ``record_param_comms``), the other CPU
  ops on the threads that ran no gloo op being computation;
* **interval arithmetic** (:func:`merge`, :func:`length`, :func:`intersection_length`): the
  communication time of a call is the length of the union of its communication intervals, its
  **share** the part of the step (the profiled call's time) it covers, and its **overlap** the
  fraction of that communication time during which computation ran too. This is HTA's
  "communication computation overlap" (``CommunicationAnalysis.get_comm_comp_overlap`` in
  ``hta/analyzers/communication_analysis.py``): communication and computation kernels are merged
  separately, and the overlap is the time both run divided by the merged communication time;
* **bus bandwidth** of a bare collective (:func:`bandwidth`), with nccl-tests' formulas
  (``doc/PERFORMANCE.md`` of NVIDIA/nccl-tests): ``algbw = S / t`` and ``busbw = algbw × factor``,
  the factor ``2(n-1)/n`` for all-reduce, ``(n-1)/n`` for all-gather, reduce-scatter and
  all-to-all, ``1`` for broadcast, reduce and send/receive; GB/s there are 1e9 bytes/s;
* what a regression's message says when the share or overlap moved (:func:`change_text`).

Times are in µs inside the interval arithmetic (the profiler's unit), ms per call in
:class:`Communication`.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

Interval = tuple[float, float]

#: busbw / algbw per collective for ``n`` ranks (nccl-tests ``doc/PERFORMANCE.md``, "Summary").
BUS_FACTORS: dict[str, Any] = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "send_recv": lambda n: 1.0,
}
#: The accepted values of the ``collective`` option (also the names the report uses).
COLLECTIVES: tuple[str, ...] = tuple(BUS_FACTORS)

#: A share or an overlap that moved by at least this much (fraction: 0.10 is 10 percentage points)
#: is named in a timing regression's message.
CHANGE_POINTS = 0.10

#: Name prefixes of the CPU-side communication ops (gloo). torch 2.13 with gloo records, for one
#: ``dist.all_reduce(t)``: ``c10d::allreduce_`` on the calling thread (~0.1 ms: it queues the
#: work) and ``gloo:all_reduce`` on gloo's worker thread (the collective itself, waiting for the
#: peers included; aten ops under it, e.g. the copies of an all-gather, run on that thread); the
#: same for ``c10d::broadcast_``/``gloo:broadcast``, ``c10d::_allgather_base_``/``gloo:all_gather``.
#: No ``record_param_comms`` on gloo there; older torch and nccl's CPU side record that name.
CPU_COMM_PREFIXES: tuple[str, ...] = ("gloo:", "c10d::", "nccl:", "record_param_comms")
#: On CUDA (torch 2.11, NCCL 2.28.9, one H100, WORLD_SIZE 1) one ``dist.all_reduce`` records
#: ``c10d::allreduce_``, ``record_param_comms`` and ``nccl:all_reduce`` on the CPU and, with one
#: rank, no NCCL kernel at all: the kernel names below are from HTA and NCCL, not yet seen here.
#: Name prefixes of NCCL's kernels (``ncclKernel_AllReduce_RING_LL_Sum_float``; NCCL >= 2.19:
#: ``ncclDevKernel_AllReduce_Sum_f32_RING_LL``).
CUDA_COMM_PREFIXES: tuple[str, ...] = ("ncclKernel", "ncclDevKernel")


def merge(intervals: Iterable[Interval]) -> list[Interval]:
    """The union of ``intervals`` (start, end; any unit) as sorted disjoint intervals; empty or
    reversed intervals are dropped."""
    out: list[list[float]] = []
    for start, end in sorted((float(s), float(e)) for s, e in intervals if e > s):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return [(s, e) for s, e in out]


def length(intervals: Iterable[Interval]) -> float:
    """The length of the union of ``intervals`` (the unit of the intervals)."""
    return sum(e - s for s, e in merge(intervals))


def intersection_length(a: Iterable[Interval], b: Iterable[Interval]) -> float:
    """How long the union of ``a`` and the union of ``b`` run at the same time (the unit of the
    intervals)."""
    ma, mb = merge(a), merge(b)
    i = j = 0
    total = 0.0
    while i < len(ma) and j < len(mb):
        lo, hi = max(ma[i][0], mb[j][0]), min(ma[i][1], mb[j][1])
        if hi > lo:
            total += hi - lo
        if ma[i][1] < mb[j][1]:
            i += 1
        else:
            j += 1
    return total


@dataclass(frozen=True)
class ProfEvent:
    """One profiler event, as the classification needs it: ``name``, ``device`` (``"cpu"`` or
    ``"cuda"``), ``start_us``/``end_us`` (µs), ``thread`` (the CPU thread; 0 when unknown) and
    ``kind`` (``"cpu_op"``, ``"kernel"``, ``"memcpy"``, ``"memset"``, ``"annotation"``...)."""

    name: str
    device: str
    start_us: float
    end_us: float
    thread: int = 0
    kind: str = "cpu_op"


@dataclass(frozen=True)
class Classified:
    """The intervals (µs) of one profiled span: ``communication``, ``computation``, and the
    collectives seen (``{"all_reduce": calls}``, from the gloo op names or the NCCL kernel names)."""

    communication: tuple[Interval, ...]
    computation: tuple[Interval, ...]
    collectives: Mapping[str, int] = field(default_factory=dict)


def collective_of(name: str) -> str | None:
    """The collective an event's name is of (``"gloo:all_reduce"``, ``"c10d::allreduce_"``,
    ``"ncclDevKernel_AllReduce_Sum_f32_RING_LL"`` -> ``"all_reduce"``), None when not one of
    :data:`COLLECTIVES` (``record_param_comms``, ``barrier``)."""
    key = name.lower().replace("_", "").replace(":", " ")
    for c in ("reducescatter", "allreduce", "allgather", "alltoall", "broadcast", "reduce", "sendrecv", "send", "recv"):
        if c in key:
            return {"reducescatter": "reduce_scatter", "allreduce": "all_reduce", "allgather": "all_gather",
                    "alltoall": "all_to_all", "sendrecv": "send_recv", "send": "send_recv",
                    "recv": "send_recv"}.get(c, c)
    return None


def is_communication(e: ProfEvent) -> bool:
    """Whether ``e`` is communication: an NCCL kernel on CUDA, a collective op on the CPU."""
    if e.device == "cuda":
        return e.kind == "kernel" and e.name.startswith(CUDA_COMM_PREFIXES)
    # gloo's ``gloo:all_reduce`` is a record_function range (a user annotation), c10d's a cpu op
    return e.kind in ("cpu_op", "annotation") and e.name.startswith(CPU_COMM_PREFIXES)


def classify(events: Sequence[ProfEvent], cuda: bool) -> Classified:
    """Communication and computation intervals (µs) of ``events``.

    ``cuda``: the GPU's timeline decides (NCCL kernels against the other kernels, as HTA);
    else the CPU's: collective ops against the CPU ops of the threads that ran no ``gloo:`` op
    (the ops under a gloo collective run on its worker thread and are part of it). Collectives
    are counted by their ``gloo:``/``nccl:`` op or NCCL kernel (one per call, not the
    ``c10d::`` wrapper too)."""
    comm: list[Interval] = []
    comp: list[Interval] = []
    collectives: dict[str, int] = {}
    if cuda:
        for e in events:
            if e.device != "cuda" or e.kind != "kernel":
                continue
            if is_communication(e):
                comm.append((e.start_us, e.end_us))
                c = collective_of(e.name)
                if c:
                    collectives[c] = collectives.get(c, 0) + 1
            else:
                comp.append((e.start_us, e.end_us))
        return Classified(tuple(comm), tuple(comp), collectives)
    comm_threads = {e.thread for e in events if e.device == "cpu" and e.name.startswith("gloo:")}
    for e in events:
        if e.device != "cpu":
            continue
        if is_communication(e):
            comm.append((e.start_us, e.end_us))
            if e.name.startswith(("gloo:", "nccl:")):
                c = collective_of(e.name.partition(":")[2])
                if c:
                    collectives[c] = collectives.get(c, 0) + 1
        elif e.kind == "cpu_op" and e.thread not in comm_threads:
            comp.append((e.start_us, e.end_us))
    return Classified(tuple(comm), tuple(comp), collectives)


@dataclass(frozen=True)
class RankCommunication:
    """One rank's communication per call: ``comm_ms`` (ms of communication per call, the union of
    its intervals), ``step_ms`` (ms per profiled call), ``share`` (comm / step, 0..1),
    ``overlap`` (fraction of the communication time that computation overlapped, 0..1; None
    without communication), ``collectives`` (calls per call of the function, by collective)."""

    comm_ms: float
    step_ms: float
    share: float
    overlap: float | None
    collectives: Mapping[str, float] = field(default_factory=dict)


def rank_communication(c: Classified, span: Interval, calls: int) -> RankCommunication:
    """The per-call figures of ``calls`` profiled calls that ran during ``span`` (µs): only the
    parts of the intervals inside ``span`` count. Raises ``ValueError`` for an empty span or no calls."""
    start, end = span
    if not end > start or calls < 1:
        raise ValueError(f"profiled span {span!r} of {calls} call(s): expected end > start and calls >= 1")

    def clip(iv: Iterable[Interval]) -> list[Interval]:
        return [(max(s, start), min(e, end)) for s, e in iv if min(e, end) > max(s, start)]

    comm, comp = clip(c.communication), clip(c.computation)
    comm_us = length(comm)
    step_us = end - start
    overlap = intersection_length(comm, comp) / comm_us if comm_us > 0 else None
    return RankCommunication(comm_us / 1e3 / calls, step_us / 1e3 / calls, min(1.0, comm_us / step_us), overlap,
                             {k: v / calls for k, v in sorted(c.collectives.items())})


def bus_factor(collective: str, ranks: int) -> float:
    """busbw / algbw of ``collective`` on ``ranks`` ranks (nccl-tests' correction factor).
    Raises ``ValueError`` naming the accepted collectives, or for fewer than one rank."""
    if collective not in BUS_FACTORS:
        raise ValueError(f"collective={collective!r}: expected one of {', '.join(COLLECTIVES)}")
    if ranks < 1:
        raise ValueError(f"{ranks} ranks: expected at least 1")
    return float(BUS_FACTORS[collective](ranks))


def bandwidth(collective: str, size_bytes: float, seconds: float, ranks: int) -> tuple[float, float]:
    """``(algbw, busbw)`` in GB/s (1e9 bytes/s, as nccl-tests reports them) of one call of
    ``collective`` moving ``size_bytes`` bytes (nccl-tests' S: the whole array; for all-gather and
    reduce-scatter the gathered size, ``count × element size × n``) in ``seconds`` s on ``ranks``
    ranks. Raises ``ValueError`` for a time or size that is not positive."""
    if not seconds > 0 or not size_bytes > 0:
        raise ValueError(f"{size_bytes!r} bytes in {seconds!r} s: expected both > 0")
    algbw = size_bytes / seconds / 1e9
    return algbw, algbw * bus_factor(collective, ranks)


@dataclass(frozen=True)
class Communication:
    """A distributed benchmark's communication, per rank (rank order): ``per_call_ms`` (ms of
    communication per call), ``share`` (of the call's time, 0..1), ``overlap`` (with computation,
    0..1; None on a rank without communication), ``collectives`` (``{"all_reduce": {"calls": k,
    "bytes": b}}``: calls per call of the function, on rank 0; ``bytes`` with the
    ``bytes_per_call`` option), ``backend`` (``"gloo"``, ``"nccl"``). ``change``: the evidence
    line against the baseline's (:func:`change_text`), set while measuring; not stored."""

    per_call_ms: tuple[float, ...]
    share: tuple[float, ...]
    overlap: tuple[float | None, ...]
    collectives: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    backend: str = ""
    change: str | None = field(default=None, compare=False)

    @property
    def mean_share(self) -> float:
        """The ranks' mean share (0..1)."""
        return statistics.fmean(self.share)

    @property
    def mean_overlap(self) -> float | None:
        """The ranks' mean overlap (0..1), None when no rank communicated."""
        values = [o for o in self.overlap if o is not None]
        return statistics.fmean(values) if values else None

    @classmethod
    def of(cls, per_rank: Sequence[RankCommunication], backend: str = "",
           bytes_per_call: float | None = None, collective: str | None = None) -> "Communication":
        """From each rank's figures (rank order); the collectives are rank 0's, with ``bytes``
        (``bytes_per_call``) on the declared ``collective``. Raises ``ValueError`` for no ranks."""
        if not per_rank:
            raise ValueError("no ranks' communication to combine")
        colls: dict[str, dict[str, float]] = {k: {"calls": v} for k, v in per_rank[0].collectives.items()}
        if collective and bytes_per_call:
            colls.setdefault(collective, {"calls": 0.0})["bytes"] = float(bytes_per_call)
        return cls(tuple(r.comm_ms for r in per_rank), tuple(r.share for r in per_rank),
                   tuple(r.overlap for r in per_rank), colls, backend)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (the entry's ``communication`` key)."""
        return {"per_call_ms": list(self.per_call_ms), "share": list(self.share), "overlap": list(self.overlap),
                "mean_share": self.mean_share, "collectives": {k: dict(v) for k, v in self.collectives.items()},
                "backend": self.backend}

    @classmethod
    def from_dict(cls, d: Any) -> "Communication | None":
        """An entry's ``communication`` (see :meth:`to_dict`); None when absent or unreadable."""
        if not isinstance(d, Mapping):
            return None
        try:
            share = tuple(float(s) for s in d["share"])
            per_call = tuple(float(v) for v in d["per_call_ms"])
            overlap = tuple(None if o is None else float(o) for o in d.get("overlap") or [None] * len(share))
            if not share or len(per_call) != len(share) or len(overlap) != len(share):
                return None
            colls = {str(k): {str(a): float(b) for a, b in v.items()}
                     for k, v in (d.get("collectives") or {}).items() if isinstance(v, Mapping)}
            return cls(per_call, share, overlap, colls, str(d.get("backend") or ""))
        except (KeyError, TypeError, ValueError, AttributeError):
            return None


def change_text(then: Communication | None, now: Communication | None, points: float = CHANGE_POINTS) -> str | None:
    """The evidence line of a regression when communication moved: ``"communication share 12% ->
    41% of the step (gloo all_reduce)"`` when the mean share changed by at least ``points``
    (fraction), ``"communication overlap with compute 80% -> 35%"`` when the mean overlap dropped
    by at least ``points``; both joined with ``"; "``. None when neither moved or a side is missing."""
    if then is None or now is None:
        return None
    what = " ".join(x for x in (now.backend, ", ".join(now.collectives)) if x)
    parts = []
    if abs(now.mean_share - then.mean_share) >= points:
        parts.append(f"communication share {then.mean_share * 100:.0f}% -> {now.mean_share * 100:.0f}% of the step"
                     + (f" ({what})" if what else ""))
    a, b = then.mean_overlap, now.mean_overlap
    if a is not None and b is not None and a - b >= points:
        parts.append(f"communication overlap with compute {a * 100:.0f}% -> {b * 100:.0f}%")
    return "; ".join(parts) or None
