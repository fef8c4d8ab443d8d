"""Why it got slower: the per-op diff of two sides' profiles, as a decision (pure).

Each side (A: the old code, B: the new) is profiled in several *cycles* (a few calls each, in more
than one process); a cycle is one :class:`OpSample`: per benchmark call, each op's self time (CPU:
aten-level self time; CUDA: kernel device time keyed by kernel and launching op), each op's count,
the whole call's time, on CUDA the GPU's idle time between kernels, and the time per phase
(``gpu_bench.phase`` regions), and the profiler's parent/child tree folded to the top-level ops
(each one's total time, and the self time of each op inside it). :func:`diff_profiles` compares A
and B op by op — with the tree, the top-level ops by their total time (the op the benchmark called
is named with its whole cost, what ran inside it under it, never as a cause of its own):

* the change of an op is the **Hodges–Lehmann shift** B − A of its per-call times over the cycles,
  with the distribution-free confidence interval that goes with the Mann–Whitney test (Hodges &
  Lehmann 1963; Lehmann, *Nonparametrics*, 1975, §2.6; the normal approximation of the order
  statistic's index as in Hollander, Wolfe & Chicken, *Nonparametric Statistical Methods*, 3rd ed.,
  2014, §4.3) — :func:`hodges_lehmann_shift`; when each side was profiled in two or more processes
  the CI is a two-stage bootstrap over processes and their cycles instead (:func:`shift_ci`), so
  that a process's speed is not taken for a change;
* the change to explain is the whole call's as the timing verdict measured it (its medians of A and
  B); without one, the profiles' own, and then nothing is named while its CI includes 0 (there is
  nothing to explain, and with some 30 ops a call one of them would pass a 99% test by chance);
* an op is **named as a cause** only when its CI excludes 0 (its change is outside its noise), the
  change holds in every pair of profiling processes, or in all but one of five or more
  (:func:`holds_across_pairs`: a process-level fluke is no cause), it is at least :data:`MIN_RELATIVE` of its own time, it goes the way the
  whole call went, and it explains at least :data:`MIN_SHARE` of the whole change (:func:`op_status`);
* an op present in every cycle of one side and in none of the other is **new** or **removed**;
* the parts add up: named ops + new + removed + the **rest** (the other ops' change, and the time
  outside ops: Python overhead between them, profiler noise) = the change of the whole call, so the
  shares add to 100%, and the rest is shown, not hidden.

Holistic Trace Analysis' ``TraceDiff`` compares op frequencies and durations between two sets of
traces (with pandas, on trace files); it has no uncertainty, so it would name noise. The rule here
is ours, with the sources above. A diagnosis never changes a verdict. No torch, no I/O.
"""

from __future__ import annotations

import math
from statistics import median as _median
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Mapping, Sequence

from pytest_gpuperf.core.units import format_ms, format_pct

#: An op is named only if its change explains at least this share of the whole call's change.
MIN_SHARE = 0.10
#: ... and is at least this fraction of its own per-call time (a tiny but steady shift of a big op
#: is not a cause).
MIN_RELATIVE = 0.05
#: Confidence of each op's Hodges–Lehmann CI (two-sided).
CONFIDENCE = 0.99
#: With at least this many pairs of profiling processes, an op's change may fail to hold in one of
#: them (:func:`holds_across_pairs`); with fewer it must hold in every pair. The why study
#: (docs/why.md) saw a 2x larger gather run as fast as the smaller one in one process of three
#: (glibc's mmap threshold had adapted there, so its output was not page-faulted in): the change
#: was real, the every-pair rule named nothing. The A/B run then profiles more pairs.
DISSENT_FROM_PAIRS = 5
#: The name under which the GPU's idle time between kernels is diffed like an op (CUDA only).
IDLE = "GPU idle between kernels"


@dataclass(frozen=True)
class OpSample:
    """One profiled cycle of one side, per benchmark call (times in ms, counts per call).

    ``self_ms``: op name -> self time per call (ms); ``counts``: op name -> occurrences per call;
    ``total_ms``: the whole call's time per call under the profiler (ms); ``idle_ms``: on CUDA the
    GPU's idle time between kernels per call (ms), None on the CPU; ``phase_ms``: phase name -> time
    per call (ms) of each ``gpu_bench.phase`` region. ``process``: which worker process profiled it.

    ``tree_ms`` (the profiler's parent/child tree, folded to the ops the benchmark called; empty in a
    profile recorded before it was kept, which is then diffed by self times): key ``op`` -> the
    total (self + everything under it) time per call (ms) of a *top-level* op (one no other op
    encloses: its ``cpu_parent`` is none or a ``gpuperf::`` annotation; torch's ``cpu_time_total``),
    key ``op > inner`` -> the self time per call (ms) of the ops named ``inner`` that ran inside the
    top-level ``op``, at any depth (``op > op``: the top-level op's own self time; the ``op > *``
    entries of a cycle add up to its ``op`` entry); ``tree_counts``: the same keys, occurrences per call.
    """

    self_ms: Mapping[str, float]
    counts: Mapping[str, float]
    total_ms: float
    idle_ms: float | None = None
    phase_ms: Mapping[str, float] = field(default_factory=dict)
    process: int = 0
    tree_ms: Mapping[str, float] = field(default_factory=dict)
    tree_counts: Mapping[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = {"self_ms": dict(self.self_ms), "counts": dict(self.counts), "total_ms": self.total_ms,
             "idle_ms": self.idle_ms, "phase_ms": dict(self.phase_ms), "process": self.process}
        if self.tree_ms:  # absent from a profile without the tree (and from the profiles stored before it)
            d.update(tree_ms=dict(self.tree_ms), tree_counts=dict(self.tree_counts))
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "OpSample":
        """Raises ``ValueError`` naming the field when ``d`` is not an op sample's dict. A dict without
        ``tree_ms`` (a profile stored before the tree was kept) loads with an empty tree."""
        def floats(m: Any) -> dict[str, float]:
            return {str(k): float(v) for k, v in (m or {}).items()}

        try:
            return cls(floats(d["self_ms"]), floats(d.get("counts")), float(d["total_ms"]),
                       None if d.get("idle_ms") is None else float(d["idle_ms"]), floats(d.get("phase_ms")),
                       int(d.get("process", 0)), floats(d.get("tree_ms")), floats(d.get("tree_counts")))
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise ValueError(f"not an op profile sample ({type(exc).__name__}: {exc}); expected self_ms, total_ms, "
                             f"counts, idle_ms, phase_ms") from None


@dataclass(frozen=True)
class OpChange:
    """One op's change from A to B, per call. Times in ms; ``shift_ms`` the Hodges–Lehmann shift
    B − A with its ``ci_ms``; ``a_ms``/``b_ms`` the sides' medians; ``a_count``/``b_count`` the
    median occurrences per call; ``share`` the shift as a fraction of the whole call's change;
    ``status``: ``slower``/``faster`` (named as a cause), ``new``/``removed``, ``offset`` (a
    decided change against the whole's direction), ``unchanged`` (within its noise or too small)."""

    name: str
    status: str
    a_ms: float
    b_ms: float
    shift_ms: float
    ci_ms: tuple[float, float] | None
    share: float | None
    a_count: float = 0.0
    b_count: float = 0.0

    @property
    def named(self) -> bool:
        return self.status in ("slower", "faster", "new", "removed")


@dataclass(frozen=True)
class OpDiff:
    """The diff of two sides' profiles (:func:`diff_profiles`). Times in ms per call.

    ``total_*``: the whole call (medians, Hodges–Lehmann shift and CI); ``ops``: every op's change,
    largest first; ``phases``: the same per ``gpu_bench.phase`` region; ``named_ms``/``new_ms``/
    ``removed_ms``/``rest_ms``: the accounting (they sum to ``total_shift_ms``); ``cycles``: the
    profiled cycles per side; ``processes``: processes per side; ``source``: where side A's
    profile came from (``"A/B"``, or a stored baseline's profile: another process, time and maybe machine);
    ``whole_from``: where the whole call's change came from (``"timing"``: the verdict's medians;
    ``"profile"``: the profiled cycles); ``traces``: the chrome traces of side A and side B (paths),
    when they were saved.

    ``tree``: True when both sides carried the profiler's tree (:attr:`OpSample.tree_ms`): ``ops``
    are then the top-level ops by their total time (the op the benchmark called, with everything
    it ran), and ``inside`` the changes of what ran inside each named one (``op > inner``, self
    times; ``op > op`` its own self time; share: of that op's change). False (a profile without the
    tree, e.g. a baseline's stored before it was kept): ``ops`` by self time, ``inside`` empty.
    ``other_ms``: the summed change of the ops not named; ``outside_ms``: the whole change less
    every op's change (time outside any op: Python between ops, waits, what the timing saw and the
    profiler did not). ``rest_ms`` = ``other_ms`` + ``outside_ms``, so named + new + removed +
    other + outside = ``total_shift_ms`` exactly, and the shares add to 100%.
    """

    total_a_ms: float
    total_b_ms: float
    total_shift_ms: float
    total_ci_ms: tuple[float, float] | None
    ops: tuple[OpChange, ...]
    phases: tuple[OpChange, ...]
    named_ms: float
    new_ms: float
    removed_ms: float
    rest_ms: float
    cycles: tuple[int, int]
    processes: tuple[int, int]
    source: str = "A/B"
    whole_from: str = "profile"
    traces: tuple[str, ...] = ()
    tree: bool = False
    inside: tuple[OpChange, ...] = ()
    other_ms: float | None = None
    outside_ms: float | None = None

    @property
    def named(self) -> tuple[OpChange, ...]:
        return tuple(c for c in self.ops if c.named)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (the report's ``op_diff``)."""
        d = asdict(self)
        d["ops"] = [asdict(c) for c in self.ops]
        d["phases"] = [asdict(c) for c in self.phases]
        d["inside"] = [asdict(c) for c in self.inside]
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "OpDiff":
        def change(c: Mapping[str, Any]) -> OpChange:
            ci = c.get("ci_ms")
            return OpChange(**{**c, "ci_ms": tuple(ci) if ci is not None else None})

        ci = d.get("total_ci_ms")
        return cls(**{**d, "ops": tuple(change(c) for c in d.get("ops", ())),
                      "phases": tuple(change(c) for c in d.get("phases", ())),
                      "inside": tuple(change(c) for c in d.get("inside", ())),
                      "total_ci_ms": tuple(ci) if ci is not None else None,
                      "cycles": tuple(d.get("cycles", (0, 0))), "processes": tuple(d.get("processes", (0, 0))),
                      "traces": tuple(d.get("traces") or ())})


def hodges_lehmann_shift(a: Sequence[float], b: Sequence[float],
                         confidence: float = CONFIDENCE) -> tuple[float, tuple[float, float] | None]:
    """The Hodges–Lehmann shift of ``b`` against ``a`` (median of all differences b_j − a_i, in the
    samples' unit) and its distribution-free ``confidence`` interval: the k-th smallest and k-th
    largest of the n·m differences, k = ⌊nm/2 − z·√(nm(n+m+1)/12)⌋ (the Mann–Whitney critical value,
    normal approximation; Hollander, Wolfe & Chicken 2014, §4.3). The CI is None when the samples
    are too few for that confidence (k < 1). Raises ``ValueError`` on an empty side.
    """
    if not a or not b:
        raise ValueError("each side needs at least one sample")
    diffs = sorted(y - x for y in b for x in a)
    n, m = len(a), len(b)
    shift = _median(diffs)
    from statistics import NormalDist

    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    k = math.floor(n * m / 2 - z * math.sqrt(n * m * (n + m + 1) / 12))
    if k < 1:
        return shift, None
    return shift, (diffs[k - 1], diffs[n * m - k])


def op_status(shift_ms: float, ci_ms: tuple[float, float] | None, own_ms: float, total_shift_ms: float,
              replicated: bool = True) -> str:
    """``slower``/``faster`` when an op's change is a cause of the whole's (see the module doc),
    ``offset`` when it is decided but goes against the whole's direction, else ``unchanged``.
    ``own_ms``: the op's larger per-call time of the two sides (ms); ``replicated``: whether the
    change holds across the pairs of profiling processes (:func:`holds_across_pairs`)."""
    if ci_ms is None or ci_ms[0] <= 0 <= ci_ms[1] or shift_ms == 0 or not replicated:
        return "unchanged"
    if abs(shift_ms) < MIN_RELATIVE * own_ms:
        return "unchanged"
    if total_shift_ms == 0:
        return "unchanged"  # the whole did not change beyond its noise: nothing is a cause
    if (shift_ms > 0) != (total_shift_ms > 0):
        return "offset"
    if abs(shift_ms) < MIN_SHARE * abs(total_shift_ms):
        return "unchanged"
    return "slower" if shift_ms > 0 else "faster"


def shift_ci(a: Sequence[float], b: Sequence[float], a_process: Sequence[int], b_process: Sequence[int],
             confidence: float = CONFIDENCE) -> tuple[float, tuple[float, float] | None]:
    """The Hodges–Lehmann shift B − A (:func:`hodges_lehmann_shift`) and a CI that carries the
    spread between processes: when each side was profiled in two or more processes, the seeded
    two-stage bootstrap CI of median(B) − median(A) with the cycles grouped by process
    (:func:`pytest_gpuperf.verdict.compare.hierarchical_log_ci`, applied to the values themselves:
    cycles of one process share its speed, so their pooled CI would be too narrow); otherwise the
    Hodges–Lehmann CI over the cycles. ``a_process``/``b_process``: each cycle's process."""
    shift, ci = hodges_lehmann_shift(a, b, confidence)
    if len(set(a_process)) >= 2 and len(set(b_process)) >= 2:
        from pytest_gpuperf.verdict.compare import hierarchical_log_ci

        def grouped(values: Sequence[float], procs: Sequence[int]) -> list[list[float]]:
            return [[v for v, q in zip(values, procs) if q == p] for p in sorted(set(procs))]

        ci = hierarchical_log_ci(grouped(b, b_process), grouped(a, a_process), confidence=confidence)
    return shift, ci


def holds_across_pairs(a: Sequence[float], b: Sequence[float], a_process: Sequence[int], b_process: Sequence[int],
                       shift: float, own: float) -> bool:
    """Whether an op's change is replicated: in every pair of profiling processes (A's process p and
    B's process p ran one after the other) — or, with :data:`DISSENT_FROM_PAIRS` pairs or more, in
    all but one — the median of B's cycles minus the median of A's has the sign of ``shift`` and is
    at least :data:`MIN_RELATIVE` of ``own`` (ms). A process-level fluke (one process's op ran slow
    throughout) then cannot be named. True when no process is on both sides."""
    pairs = sorted(set(a_process) & set(b_process))
    dissent = 0
    for p in pairs:
        d = (_median([v for v, q in zip(b, b_process) if q == p]) - _median([v for v, q in zip(a, a_process) if q == p]))
        if (d > 0) != (shift > 0) or abs(d) < MIN_RELATIVE * own:
            dissent += 1
    return dissent == 0 or (len(pairs) >= DISSENT_FROM_PAIRS and dissent == 1)


def _changes(a: Sequence[Mapping[str, float]], b: Sequence[Mapping[str, float]],
             a_counts: Sequence[Mapping[str, float]], b_counts: Sequence[Mapping[str, float]],
             total_shift: float, a_process: Sequence[int], b_process: Sequence[int]) -> list[OpChange]:
    names = sorted({k for s in (*a, *b) for k in s})
    out = []
    for name in names:
        xa = [s.get(name, 0.0) for s in a]
        xb = [s.get(name, 0.0) for s in b]
        in_a = sum(name in s for s in a)
        in_b = sum(name in s for s in b)
        ca = _median([c.get(name, 0.0) for c in a_counts]) if a_counts else 0.0
        cb = _median([c.get(name, 0.0) for c in b_counts]) if b_counts else 0.0
        ma, mb = _median(xa), _median(xb)
        shift, ci = shift_ci(xa, xb, a_process, b_process)
        share = shift / total_shift if total_shift else None
        if in_a == 0 and in_b == len(b):
            status = "new" if share is not None and share >= MIN_SHARE else "unchanged"
        elif in_b == 0 and in_a == len(a):
            status = "removed" if share is not None and share >= MIN_SHARE else "unchanged"
        else:
            status = op_status(shift, ci, max(ma, mb), total_shift,
                               holds_across_pairs(xa, xb, a_process, b_process, shift, max(ma, mb)))
        out.append(OpChange(name, status, ma, mb, shift, ci, share, ca, cb))
    return out


#: The separator of a tree key: ``op > inner`` is what ran inside the top-level ``op``.
INSIDE = " > "


def _top_level(side: Sequence[OpSample], tree: bool,
               cuda: bool) -> tuple[list[dict[str, float]], list[dict[str, float]]]:
    """Per cycle, what the diff attributes the call to (ms per call) and the counts: with the tree,
    the top-level ops' total times, the kernels (CUDA: device time, no CPU parent) and the GPU's idle
    time; without it, every op's self time (and the idle time)."""
    times, counts = [], []
    for s in side:
        if tree:
            t = {k: v for k, v in s.tree_ms.items() if INSIDE not in k}
            t.update({k: v for k, v in s.self_ms.items() if k.startswith("kernel: ")})
            c = {k: v for k, v in s.tree_counts.items() if INSIDE not in k}
        else:
            t, c = dict(s.self_ms), dict(s.counts)
        if cuda and s.idle_ms is not None:
            t[IDLE] = float(s.idle_ms)
        times.append(t)
        counts.append(c)
    return times, counts


def _inside(a: Sequence[OpSample], b: Sequence[OpSample], parents: Sequence[OpChange]) -> list[OpChange]:
    """The changes of what ran inside each of ``parents`` (tree keys ``op > inner``, self times;
    each one's share and status against its parent's change), largest first per parent."""
    pa, pb = [s.process for s in a], [s.process for s in b]
    out: list[OpChange] = []
    for parent in parents:
        prefix = parent.name + INSIDE

        def under(side: Sequence[OpSample], m: str) -> list[dict[str, float]]:
            return [{k: v for k, v in getattr(s, m).items() if k.startswith(prefix)} for s in side]

        got = _changes(under(a, "tree_ms"), under(b, "tree_ms"), under(a, "tree_counts"), under(b, "tree_counts"),
                       parent.shift_ms, pa, pb)
        out += sorted(got, key=lambda c: (-abs(c.shift_ms), c.name))
    return out


def diff_profiles(a: Sequence[OpSample], b: Sequence[OpSample], source: str = "A/B", *,
                  whole_ms: tuple[float, float] | None = None) -> OpDiff:
    """Diff side B's profiled cycles against side A's (see the module doc). ``a``, ``b``: the
    cycles of each side (several per side, from more than one process where possible).
    ``whole_ms``: the whole call's per-call median of each side (A, B) as the timing verdict
    measured it (ms; the A/B comparison's medians): when given, it is the change the ops must
    explain (its direction, the shares and the rest), and it is taken as decided — the verdict
    decided it, with the paired timing design, far more precisely than the profiled cycles can.
    Without it the profiles' own whole-call change is used, and nothing is named while its CI
    includes 0. When every cycle of both sides carries the profiler's tree (:attr:`OpSample.tree_ms`)
    the ops diffed are the top-level ones by total time, and what ran inside each named one is
    diffed under it (``OpDiff.inside``); else every op by self time. On CUDA (samples with
    ``idle_ms``) the GPU's idle time between kernels is diffed as the op :data:`IDLE`. Pure and
    deterministic. Raises ``ValueError`` when a side has no cycle."""
    if not a or not b:
        raise ValueError("each side needs at least one profiled cycle")
    ta, tb = [s.total_ms for s in a], [s.total_ms for s in b]
    pa, pb = [s.process for s in a], [s.process for s in b]
    total_shift, total_ci = shift_ci(ta, tb, pa, pb)
    total_a, total_b = _median(ta), _median(tb)
    if whole_ms is not None:
        total_a, total_b = float(whole_ms[0]), float(whole_ms[1])
        total_shift, total_ci, decided = total_b - total_a, None, True
    else:  # nothing to explain while the whole call's own change is within its noise
        decided = total_ci is not None and not total_ci[0] <= 0 <= total_ci[1]
    cuda = all(s.idle_ms is not None for s in (*a, *b))
    tree = all(s.tree_ms for s in (*a, *b))
    (xa, ca), (xb, cb) = _top_level(a, tree, cuda), _top_level(b, tree, cuda)
    ops = _changes(xa, xb, ca, cb, total_shift if decided else 0.0, pa, pb)
    ops.sort(key=lambda c: (-abs(c.shift_ms), c.name))
    phases = _changes([s.phase_ms for s in a], [s.phase_ms for s in b], [], [], total_shift if decided else 0.0,
                      pa, pb)
    phases.sort(key=lambda c: (-abs(c.shift_ms), c.name))
    named = sum(c.shift_ms for c in ops if c.status in ("slower", "faster"))
    new = sum(c.shift_ms for c in ops if c.status == "new")
    removed = sum(c.shift_ms for c in ops if c.status == "removed")
    other = sum(c.shift_ms for c in ops if not c.named)
    inside = _inside(a, b, [c for c in ops if c.named]) if tree else []
    return OpDiff(total_a, total_b, total_shift, total_ci, tuple(ops), tuple(phases), named, new, removed,
                  total_shift - named - new - removed, (len(a), len(b)),
                  (len({s.process for s in a}), len({s.process for s in b})), source,
                  "timing" if whole_ms is not None else "profile", tree=tree, inside=tuple(inside),
                  other_ms=other, outside_ms=total_shift - named - new - removed - other)


#: A stored op profile keeps the ops whose median self time is at least this share of the call ...
STORED_FLOOR_SHARE = 0.01
#: ... and at most this many of them (the largest).
STORED_MAX_OPS = 40


def _sig(x: float) -> float:
    return float(f"{x:.4g}")


def compact_profile(samples: Sequence[OpSample], floor_share: float = STORED_FLOOR_SHARE,
                    max_ops: int | None = STORED_MAX_OPS) -> dict[str, Any]:
    """The op profile a baseline stores (a few KB, JSON-ready): every cycle, with only the ops whose
    median self time over the cycles is at least ``floor_share`` of the call's median time (at most
    ``max_ops``, the largest; None: no limit), times to 4 significant digits, and ``floor_ms``: the smallest time
    an op had to have to be kept (an op of a later run that is not stored and stays under it was
    there, too small to keep). The profiler's tree (:attr:`OpSample.tree_ms`) is kept the same way:
    the top-level ops whose median total time is at least the floor (at most ``max_ops``) and, inside
    each kept one, the ops whose median self time there is. Raises ``ValueError`` when ``samples`` is empty."""
    if not samples:
        raise ValueError("no profiled cycle to store")
    total = _median([s.total_ms for s in samples])
    names = {k for s in samples for k in s.self_ms}
    med = {k: _median([s.self_ms.get(k, 0.0) for s in samples]) for k in names}
    floor = floor_share * total
    kept = sorted((k for k in names if med[k] >= floor), key=lambda k: (-med[k], k))[:max_ops]
    if max_ops is not None and len(kept) == max_ops and kept:
        floor = max(floor, med[kept[-1]])
    keep = set(kept) | _kept_tree(samples, floor, max_ops)
    cycles = [OpSample({k: _sig(v) for k, v in s.self_ms.items() if k in keep},
                       {k: _sig(v) for k, v in s.counts.items() if k in keep}, _sig(s.total_ms),
                       None if s.idle_ms is None else _sig(s.idle_ms), {k: _sig(v) for k, v in s.phase_ms.items()},
                       s.process, {k: _sig(v) for k, v in s.tree_ms.items() if k in keep},
                       {k: _sig(v) for k, v in s.tree_counts.items() if k in keep}).to_dict() for s in samples]
    return {"floor_ms": _sig(floor), "cycles": cycles}


def _kept_tree(samples: Sequence[OpSample], floor: float, max_ops: int | None) -> set[str]:
    """The tree keys a stored profile keeps: the top-level ops with a median total time of at least
    ``floor`` (ms; at most ``max_ops``, the largest), and under each the ``op > inner`` keys with a
    median self time of at least ``floor``."""
    names = {k for s in samples for k in s.tree_ms}
    med = {k: _median([s.tree_ms.get(k, 0.0) for s in samples]) for k in names}
    tops = sorted((k for k in names if INSIDE not in k and med[k] >= floor), key=lambda k: (-med[k], k))[:max_ops]
    keep = set(tops)
    return keep | {k for k in names if INSIDE in k and k.split(INSIDE, 1)[0] in keep and med[k] >= floor}


def stored_samples(d: Any) -> tuple[list[OpSample], float]:
    """A stored op profile (:func:`compact_profile`) read back: ``(cycles, floor_ms)``. Raises
    ``ValueError`` naming what is wrong when ``d`` is not one."""
    if not isinstance(d, Mapping) or not isinstance(d.get("cycles"), list) or not d["cycles"]:
        raise ValueError("not a stored op profile: expected {'floor_ms': ..., 'cycles': [...]} with cycles")
    try:
        floor = float(d.get("floor_ms") or 0.0)
    except (TypeError, ValueError):
        raise ValueError(f"not a stored op profile: floor_ms {d.get('floor_ms')!r} is not a number") from None
    return [OpSample.from_dict(c) for c in d["cycles"]], floor


def diff_against_stored(stored: Any, b: Sequence[OpSample], *, whole_ms: tuple[float, float] | None,
                        source: str) -> OpDiff:
    """Diff side B's profiled cycles against a baseline's stored op profile (:func:`compact_profile`,
    side A: recorded in other processes, at another time, maybe on another machine — ``source``
    says which, and the why line shows it). B's ops that the stored profile lacks and that stay
    under its ``floor_ms`` are dropped (A had them too, below what was kept); one above it is
    ``new`` (new, or grown from under the floor). The CIs and the every-pair rule group by process
    within each side only, as the stored side's processes never ran beside B's. Otherwise as
    :func:`diff_profiles` (a stored profile without the profiler's tree, recorded before it was kept:
    both sides by self time). Raises ``ValueError`` for an unreadable stored profile or no cycles."""
    a, floor = stored_samples(stored)
    stored_names = {k for s in a for k in (*s.self_ms, *s.tree_ms)}
    if a and all(s.idle_ms is not None for s in a):
        stored_names.add(IDLE)

    def over(times: Mapping[str, float], counts: Mapping[str, float]) -> tuple[dict[str, float], dict[str, float]]:
        keep = {k for k, v in times.items() if k in stored_names or v >= floor}
        return {k: times[k] for k in keep}, {k: v for k, v in counts.items() if k in keep}

    def kept(s: OpSample) -> OpSample:
        (self_ms, counts), (tree_ms, tree_counts) = over(s.self_ms, s.counts), over(s.tree_ms, s.tree_counts)
        return replace(s, self_ms=self_ms, counts=counts, tree_ms=tree_ms, tree_counts=tree_counts,
                       process=s.process + 1_000_000)  # never paired with a stored process
    return diff_profiles(a, [kept(s) for s in b], source=source, whole_ms=whole_ms)


def _count(c: OpChange) -> str:
    n = round(c.b_count if c.status != "removed" else c.a_count, 2)
    return f" ×{n:g}" if n and n != 1 else ""


def _signed_ms(ms: float) -> str:
    return ("+" if ms >= 0 else "-") + format_ms(abs(ms))


def percent_shares(parts: Sequence[float], whole: float) -> list[int]:
    """``parts`` (ms) as whole percentages of ``whole`` (ms) that add to exactly 100 when the parts
    add to ``whole`` (largest-remainder rounding: each share rounded down, the points left given to
    the largest remainders). Signed: a part against the whole's direction has a negative share.
    Raises ``ValueError`` when ``whole`` is 0."""
    if not whole:
        raise ValueError("no change to share")
    exact = [100.0 * p / whole for p in parts]
    out = [math.floor(x) for x in exact]
    left = round(100 - sum(out)) if abs(sum(exact) - 100) < 1e-6 else 0
    for i in sorted(range(len(exact)), key=lambda i: -(exact[i] - out[i]))[:max(0, left)]:
        out[i] += 1
    return out


def _inner(d: OpDiff, c: OpChange, most: int = 3) -> str:
    """``, of which self +x, inside: aten::copy_ ×7 +y, …``: a named top-level op's own self time's
    change and the inner ops named against its change (at most ``most``); empty without any."""
    prefix = c.name + INSIDE
    rows = [x for x in d.inside if x.name.startswith(prefix)]
    own = next((x for x in rows if x.name == prefix + c.name), None)
    inner = [x for x in rows if x.named and x is not own][:most]
    if not inner:
        return ""
    head = f"self {_signed_ms(own.shift_ms)}, " if own is not None else ""
    return ", of which " + head + "inside: " + ", ".join(
        f"{x.name[len(prefix):]}{_count(x)} {_signed_ms(x.shift_ms)}" for x in inner)


def _causes(d: OpDiff, shares: Sequence[int], whole: str) -> list[str]:
    parts = []
    for c, pct in zip(d.named, shares):
        share = f", {pct}% of the {whole}"
        if c.status in ("slower", "faster"):
            rel = f"{format_pct(c.shift_ms / c.a_ms)}" if c.a_ms > 0 else "new"
            parts.append(f"{c.name}{_count(c)} {_signed_ms(c.shift_ms)}/call ({rel}{share}){_inner(d, c)}")
        else:
            parts.append(f"{c.status}: {c.name}{_count(c)} ({_signed_ms(c.shift_ms)}{share}){_inner(d, c)}")
    return parts


def why_line(d: OpDiff, unchanged: int = 3) -> str:
    """The failure message's ``why:`` line, causes first, each a top-level op with its whole cost
    (with the profiler's tree) and what inside it changed: ``why: aten::sort ×3 +156.9 ms/call
    (+195%, 92% of the slowdown), of which self +94.14 ms, inside: aten::copy_ ×7 +39.74 ms;
    new: aten::clone ×3 (+0.10 ms, 8% of the slowdown); unchanged: aten::mm, aten::softmax; rest:
    other ops +0.05 ms (2%), outside ops +0.23 ms (20%); ×N: calls per benchmark call``. The
    shares add to exactly 100% (named + new + removed + other ops + outside ops). When nothing is
    named, it says so (the change is spread over many ops, or within noise). With
    ``gpu_bench.phase`` regions, the phases that moved follow: ``in phase backward +1.2 ms/call (91%)``."""
    whole = "slowdown" if d.total_shift_ms > 0 else "speed-up"
    split = d.other_ms is not None and d.outside_ms is not None  # a diff read from an older report: one rest
    rest = [d.other_ms or 0.0, d.outside_ms or 0.0] if split else [d.rest_ms]
    shares = (percent_shares([c.shift_ms for c in d.named] + rest, d.total_shift_ms) if d.total_shift_ms
              and all(c.share is not None for c in d.named) else [])
    parts = _causes(d, shares, whole)
    if not parts:
        parts.append("no single op explains the change (each op's change is within its noise or under "
                     f"{MIN_SHARE * 100:.0f}% of the whole)")
    moved = [c for c in d.phases if c.status in ("slower", "faster")]
    if moved:  # gpu_bench.phase regions: where in the call it moved
        parts.append("in phase " + ", ".join(
            f"{c.name} {_signed_ms(c.shift_ms)}/call" + (f" ({c.share * 100:.0f}%)" if c.share is not None else "")
            for c in moved))
    same = [c.name for c in sorted(d.ops, key=lambda c: -max(c.a_ms, c.b_ms))
            if c.status == "unchanged" and c.name != IDLE][:unchanged]
    if same:
        parts.append("unchanged: " + ", ".join(same))
    pct = [f" ({p}%)" for p in shares[len(d.named):]] if shares else ["", ""]
    parts.append(f"rest: other ops {_signed_ms(rest[0])}{pct[0]}, outside ops {_signed_ms(rest[1])}{pct[1]}" if split
                 else f"rest {_signed_ms(d.rest_ms)}{pct[0]}")
    if "×" in "".join(parts):  # say what the counts shown count
        parts.append("×N: calls per benchmark call")
    where = "" if d.source == "A/B" else f" [against {d.source}]"
    return "why: " + "; ".join(parts) + where


#: How the reason of a verdict left unprofiled on purpose begins (``--gpuperf-why-max``, an op-free profile).
NOT_PROFILED = "not profiled: "
#: The reason of a benchmark whose op profile held no torch op (:func:`op_free`).
OP_FREE = (NOT_PROFILED + "its op profile holds no torch op (all its time is outside torch's ops, e.g. pure "
           "Python), so an op-by-op diff cannot name one")


def op_free(cycles: Sequence[Any] | None) -> bool:
    """Whether an op profile's ``cycles`` (:class:`OpSample` or their ``to_dict()`` form, e.g. a
    stored ``op_profile["cycles"]`` or an A/B side's profiles) hold no torch op at all: at least one
    cycle, and none with an op's self time or count. Then the benchmark's whole time is outside
    torch's ops (a pure-Python benchmark, e.g. a pydantic-core or cattrs suite), and more profiling
    cannot name an op: the why of such a verdict is not profiled (issue 45: on pydantic-core's suite
    5 profiling pairs, about 190 s, gave one unchanged rerun's false alarm the why "no single op
    explains the change ... outside ops 100%"). False for no cycles (unknown). Pure."""
    if not cycles:
        return False

    def ops(c: Any) -> bool:
        if isinstance(c, OpSample):
            return bool(c.self_ms or c.counts)
        return bool((c or {}).get("self_ms") or (c or {}).get("counts"))

    return not any(ops(c) for c in cycles)


def why_lines(d: OpDiff | None, missing: str = "") -> list[str]:
    """The lines a diagnosis adds under a verdict: :func:`why_line` and, when they were saved, the
    sides' chrome traces (``trace A: <path>``, ``trace B: <path>``); without a diff but with
    ``missing`` (why the profiles failed), ``why: no diagnosis (the op profiles failed: …)``, or
    for one not profiled on purpose (``missing`` starts with :data:`NOT_PROFILED`) ``why: not
    profiled: …``; else none."""
    if d is not None:
        return [why_line(d), *(f"trace {side}: {path}" for side, path in zip("AB", d.traces))]
    if missing.startswith(NOT_PROFILED):
        return [f"why: {missing}"]
    return [f"why: no diagnosis (the op profiles failed: {missing})"] if missing else []


def table(d: OpDiff, rows: int = 15) -> str:
    """The diff as a plain-text table (Markdown-compatible), largest changes first: op, A and B per
    call (ms), the shift with its 99% CI, the share of the whole change and the status; with the
    profiler's tree the ops are the top-level ones by total time, each named one followed by what
    ran inside it (``└ self``: its own self time, ``└ aten::copy_``: an inner op's self time; share:
    of that op's change, ``39% of op``); then each ``gpu_bench.phase`` region (``phase forward``) and the whole call."""
    head = "| op | A ms/call | B ms/call | change (99% CI) | share | status |\n| --- | ---: | ---: | --- | ---: | --- |"
    lines = [head]

    def row(c: OpChange, of: str = "") -> str:
        ci = (f" [{_signed_ms(c.ci_ms[0])}, {_signed_ms(c.ci_ms[1])}]" if c.ci_ms is not None else "")
        share = f"{c.share * 100:.0f}%{of}" if c.share is not None else ""
        return (f"| {c.name}{_count(c)} | {format_ms(c.a_ms)} | {format_ms(c.b_ms)} | {_signed_ms(c.shift_ms)}{ci} "
                f"| {share} | {c.status} |")

    for c in d.ops[:rows]:  # with the tree: under each named op, what ran inside it (└ inner)
        lines.append(row(c))
        prefix = c.name + INSIDE
        parts = [x for x in d.inside if x.name.startswith(prefix)]
        if any(x.name != prefix + c.name for x in parts):  # an op with nothing inside is its own self time
            lines += [row(replace(x, name="└ " + ("self" if x.name == prefix + c.name else x.name[len(prefix):])),
                          " of op") for x in parts[:5]]
    if len(d.ops) > rows:
        lines.append(f"| … {len(d.ops) - rows} more | | | | | |")
    lines += [row(replace(c, name=f"phase {c.name}", a_count=0.0, b_count=0.0)) for c in d.phases]
    lines.append(f"| whole call | {format_ms(d.total_a_ms)} | {format_ms(d.total_b_ms)} | "
                 f"{_signed_ms(d.total_shift_ms)} | 100% | named {_signed_ms(d.named_ms)}, new {_signed_ms(d.new_ms)}, "
                 f"removed {_signed_ms(d.removed_ms)}, " + (
                     f"other ops {_signed_ms(d.other_ms)}, outside ops {_signed_ms(d.outside_ms)} |"
                     if d.other_ms is not None and d.outside_ms is not None else f"rest {_signed_ms(d.rest_ms)} |"))
    return "\n".join(lines)


def kernel_times(events: Sequence[Any], calls: int) -> dict[str, float]:
    """CUDA: each kernel's (and device copy's) device time per call (ms), keyed ``<kernel> (<op>)``
    by the kernel's name and the innermost CPU op whose runtime call launched it (linked by the
    profiler's correlation id; ``<kernel>`` alone where no op encloses the launch). ``events``:
    :class:`~pytest_gpuperf.verdict.bottleneck.TraceEvent` of ``calls`` calls (times in ns)."""
    calls = max(1, calls)
    ops = sorted((e for e in events if e.kind == "cpu_op"), key=lambda e: (e.start_ns, -e.end_ns))
    launches = {e.correlation: e.start_ns for e in events if e.kind == "runtime" and e.correlation}

    def launcher(at: int | None) -> str | None:
        if at is None:
            return None
        inner = None
        for op in ops:  # the innermost op that contains the launch
            if op.start_ns > at:
                break
            if op.start_ns <= at < op.end_ns and (inner is None or op.start_ns >= inner.start_ns):
                inner = op
        return inner.name if inner is not None else None

    out: dict[str, float] = {}
    for e in events:
        if e.kind not in ("kernel", "memcpy", "memset"):
            continue
        op = launcher(launches.get(e.correlation)) if e.correlation else None
        key = f"{e.name} ({op})" if op else e.name
        out[key] = out.get(key, 0.0) + e.duration_ns / 1e6 / calls
    return out
