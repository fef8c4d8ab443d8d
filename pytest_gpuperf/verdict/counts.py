"""Exact counts per call — ops, kernels, syncs, copies, FLOPs, bytes, compiles — and their gate.

Pure: knows nothing of pytest or torch (the torch side is :mod:`pytest_gpuperf.measure.counting`).

Timing verdicts depend on the machine and the minute; most real regressions in PyTorch code are
structural and show up as counts that are the same on every machine and every run: an ``.item()``
that adds a host sync per layer, a ``.to()`` that adds a copy, a float32 tensor that became
float64, a fused op split into ten kernels, a ``torch.compile``'d function that recompiles. The
count gate (:func:`decide_counts`) compares a run's counts with the counts stored with the
baseline's runs:

* a count that was identical in every stored run is **exact**: more than that fails
  (``count_tolerance`` relative slack, default 0); fewer is reported as improved;
* a count that varied across stored runs (data-dependent control flow, autotuning) is
  **variable**: only more than its stored maximum (plus the tolerance) fails;
* declared budgets (``max_syncs``, ``max_kernels``, ``max_ops``, ``max_recompiles``) need no
  baseline: more than the budget fails.

The idea of gating on counts instead of time follows CodSpeed's instruction-count measurement of
CPU benchmarks; the op/kernel/sync vocabulary is torch's profiler's.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from pytest_gpuperf.verdict.compare import Verdict

#: The gated counts (per call of the benchmarked function, except the ``torch.compile`` ones,
#: which are totals over the benchmark's warmup and timed rounds after its first call).
COUNT_FIELDS: tuple[str, ...] = ("ops", "kernels", "syncs", "copies", "copy_bytes", "flops", "traffic_bytes",
                                 "recompiles", "graph_breaks")
#: How each count is named in messages and the summary.
LABELS = {"ops": "ops", "kernels": "kernels", "syncs": "syncs", "copies": "copies", "copy_bytes": "copy bytes",
          "flops": "FLOPs", "traffic_bytes": "bytes", "recompiles": "recompiles", "graph_breaks": "graph breaks"}
#: The family a count belongs to, for the head of a failure message ("op/sync counts regressed").
FAMILY = {"ops": "op", "kernels": "kernel", "syncs": "sync", "copies": "copy", "copy_bytes": "copy",
           "flops": "FLOP", "traffic_bytes": "byte", "recompiles": "compile", "graph_breaks": "compile"}
#: Counts that have per-name breakdowns (the diff of a failure message names what changed).
BY_NAME_FIELDS = ("ops", "kernels", "syncs")
#: Budget option -> the count it limits.
BUDGETS = {"max_ops": "ops", "max_kernels": "kernels", "max_syncs": "syncs", "max_recompiles": "recompiles"}
#: Counts that are totals over the benchmark (the others are per call).
_TOTALS = frozenset({"recompiles", "graph_breaks"})
#: Names shown per count in a diff.
DIFF_NAMES = 4


@dataclass(frozen=True)
class Counts:
    """What one call of the benchmarked function did, counted exactly (never timed).

    ``ops``: aten operators dispatched (after autograd; views included); ``kernels``: CUDA kernels
    launched (None on the CPU); ``syncs``: host-device synchronisations (CUDA: blocking runtime
    calls such as ``cudaStreamSynchronize``; CPU: ops that would block on a GPU, e.g.
    ``aten::_local_scalar_dense`` from ``.item()``); ``copies``/``copy_bytes``: host<->device copies
    and their bytes; ``flops``: FLOP (``torch.utils.flop_counter``); ``traffic_bytes``: the
    minimum-traffic estimate in bytes (inputs plus outputs of every non-view op, the bottleneck
    classifier's figure). ``recompiles``/``graph_breaks``/``unique_graphs``: ``torch.compile``
    counters over the benchmark's warmup and timed rounds after its first call (None when
    ``torch.compile`` was not in use). ``*_by_name`` break ops, kernels and syncs down by name.
    ``cost_ms`` is what the counting call took (ms, wall clock; informative, never gated).
    ``cudnn_benchmark``: the kernels were counted with ``torch.backends.cudnn.benchmark`` on, where
    cuDNN picks each convolution's algorithm by timing them in the process, so the kernel count can
    differ between processes on unchanged code: it is then reported, not gated (the
    ``max_kernels`` budget still applies). ``note`` says how the counting call deviated from the
    usual path (e.g. FLOPs counted without torch's ``FlopCounterMode``, which raised on this
    function); stored, shown as a warning, never gated. ``varied``: the counts that differed between
    the calls counted (a replay buffer's random sampling moves other bytes each call), each
    ``(lowest, highest)``; the count itself is then the highest (:func:`combine_counts`).
    """

    ops: int = 0
    syncs: int = 0
    copies: int = 0
    copy_bytes: int = 0
    flops: int = 0
    traffic_bytes: int = 0
    kernels: int | None = None
    recompiles: int | None = None
    graph_breaks: int | None = None
    unique_graphs: int | None = None
    ops_by_name: Mapping[str, int] = field(default_factory=dict)
    kernels_by_name: Mapping[str, int] = field(default_factory=dict)
    syncs_by_name: Mapping[str, int] = field(default_factory=dict)
    cost_ms: float | None = field(default=None, compare=False)
    cudnn_benchmark: bool = False
    note: str | None = field(default=None, compare=False)
    varied: Mapping[str, tuple[int, int]] = field(default_factory=dict)

    def totals(self) -> dict[str, int]:
        """The gated counts that were measured (``None`` ones left out), by field name."""
        return {f: int(getattr(self, f)) for f in COUNT_FIELDS if getattr(self, f) is not None}

    def by_name(self, name: str) -> Mapping[str, int]:
        """The per-name breakdown of ``name`` (``"ops"``, ``"kernels"`` or ``"syncs"``; else empty)."""
        return getattr(self, f"{name}_by_name", {}) if name in BY_NAME_FIELDS else {}

    def to_dict(self) -> dict[str, Any]:
        """JSON form, as stored in baselines and reports: the totals, ``unique_graphs``,
        ``by_name`` (``{"ops": {...}, ...}``, non-empty ones) and ``cost_ms``."""
        d: dict[str, Any] = self.totals()
        if self.unique_graphs is not None:
            d["unique_graphs"] = int(self.unique_graphs)
        d["by_name"] = {f: dict(sorted(self.by_name(f).items())) for f in BY_NAME_FIELDS if self.by_name(f)}
        if self.cost_ms is not None:
            d["cost_ms"] = float(self.cost_ms)
        if self.cudnn_benchmark:
            d["cudnn_benchmark"] = True
        if self.note:
            d["note"] = self.note
        if self.varied:
            d["varied"] = {f: [int(lo), int(hi)] for f, (lo, hi) in sorted(self.varied.items())}
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Counts":
        """From :meth:`to_dict`'s form (unknown keys ignored; missing counts are None or 0)."""
        by_name = d.get("by_name") if isinstance(d.get("by_name"), Mapping) else {}
        kw: dict[str, Any] = {}
        for f in COUNT_FIELDS + ("unique_graphs",):
            v = d.get(f)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                kw[f] = int(v)
        for f in BY_NAME_FIELDS:
            names = by_name.get(f)
            if isinstance(names, Mapping):
                kw[f"{f}_by_name"] = {str(k): int(v) for k, v in names.items()}
        cost = d.get("cost_ms")
        return cls(**kw, cost_ms=float(cost) if isinstance(cost, (int, float)) and not isinstance(cost, bool) else None,
                   cudnn_benchmark=d.get("cudnn_benchmark") is True,
                   note=d["note"] if isinstance(d.get("note"), str) else None, varied=stored_varied(d))


def stored_varied(d: Any) -> dict[str, tuple[int, int]]:
    """The ``varied`` ranges of a stored ``counts`` record (``{"traffic_bytes": (lo, hi)}``;
    anything malformed is left out)."""
    v = d.get("varied") if isinstance(d, Mapping) else None
    if not isinstance(v, Mapping):
        return {}
    out = {}
    for f, pair in v.items():
        if (f in COUNT_FIELDS and isinstance(pair, (list, tuple)) and len(pair) == 2
                and all(isinstance(x, int) and not isinstance(x, bool) for x in pair)):
            out[f] = (min(pair), max(pair))
    return out


def spread_fraction(low: float, high: float) -> float:
    """How far apart two values seen between calls are, relative to the higher: ``(high - low) / high``
    (0 for equal values or a zero high)."""
    return (high - low) / high if high > 0 else 0.0


def combine_counts(observed: Sequence[Counts]) -> Counts:
    """One :class:`Counts` from several counted calls (of one process or several): each count is
    the highest seen, and a count that differed between them (or was already ``varied`` in one)
    gets its ``(lowest, highest)`` in ``varied``. The per-name breakdowns, note and cost are the
    first call's. Raises ``ValueError`` for no counts."""
    if not observed:
        raise ValueError("combine_counts: no counts")
    first = observed[0]
    changes: dict[str, Any] = {}
    varied: dict[str, tuple[int, int]] = {}
    for f in COUNT_FIELDS:
        values = [getattr(c, f) for c in observed if getattr(c, f) is not None]
        lows = values + [c.varied[f][0] for c in observed if f in c.varied]
        highs = values + [c.varied[f][1] for c in observed if f in c.varied]
        if not values:
            continue
        changes[f] = max(highs)
        if min(lows) != max(highs):
            varied[f] = (min(lows), max(highs))
    return dataclasses.replace(first, **changes, varied=varied,
                               note=next((c.note for c in observed if c.note), None))


def stored_totals(d: Any) -> dict[str, int]:
    """The gated totals of a stored ``counts`` record (anything else -> empty)."""
    if not isinstance(d, Mapping):
        return {}
    return {f: int(d[f]) for f in COUNT_FIELDS
            if isinstance(d.get(f), (int, float)) and not isinstance(d.get(f), bool)}


@dataclass(frozen=True)
class CountChange:
    """One count against its stored runs.

    ``current``: this run's value; ``low``/``high``: the smallest and largest stored value (None:
    never stored); ``runs``: how many stored runs had it; ``variable``: the stored runs disagree
    (gated against ``high`` only); ``limit``: the value above which it fails (``high`` plus the
    tolerance); ``status``: ``regressed``, ``improved``, ``unchanged``, ``new``, ``varies`` (it
    differed between the calls counted, now or when stored: gated only beyond twice that spread,
    see :func:`decide_counts`) or ``not gated``; ``names``: the
    per-name changes against the newest stored run (name, delta), largest increases first.
    """

    name: str
    current: int
    low: int | None
    high: int | None
    runs: int
    variable: bool
    limit: float | None
    status: str
    names: tuple[tuple[str, int], ...] = ()

    def text(self) -> str:
        """``syncs 0 -> 10 per call (aten::_local_scalar_dense +10)``."""
        label = LABELS[self.name]
        per = "" if self.name in _TOTALS else " per call"
        then = _value(self.name, self.high) if not self.variable else \
            f"{_value(self.name, self.low)}..{_value(self.name, self.high)}"
        now = _value(self.name, self.current)
        if now == then and self.high is not None:  # rounded alike: say by how much it changed
            unit = " B" if self.name in ("copy_bytes", "traffic_bytes") else ""
            now += f" ({self.current - self.high:+d}{unit})"
        text = f"{label} {then} -> {now}{per}"
        detail = [f"{n} {d:+d}" for n, d in self.names[:DIFF_NAMES]]
        if len(self.names) > DIFF_NAMES:
            detail.append(f"{len(self.names) - DIFF_NAMES} more")
        if self.variable:
            detail.insert(0, f"over the largest of {self.runs} stored runs, which varied")
        return text + (f" ({', '.join(detail)})" if detail else "")


def _value(name: str, v: float | None) -> str:
    if v is None:
        return "-"
    if name in ("copy_bytes", "traffic_bytes"):
        from pytest_gpuperf.core.units import format_bytes

        return format_bytes(v)
    if name == "flops":
        from pytest_gpuperf.core.units import format_si

        return format_si(v, "FLOP")
    return str(int(v))


@dataclass(frozen=True)
class CountComparison:
    """The count gate's verdict for one benchmark (see :func:`decide_counts`).

    ``verdict``: ``REGRESSED`` when a count exceeds its stored limit, ``IMPROVED`` when one fell
    and none rose, ``UNCHANGED``, or ``NO_BASELINE`` when nothing was stored. ``changes``: one
    :class:`CountChange` per measured count; ``over_budget``: messages of declared budgets
    (``max_syncs``...) exceeded, which fail with or without a baseline.
    """

    benchmark_id: str
    verdict: Verdict
    changes: tuple[CountChange, ...] = ()
    over_budget: tuple[str, ...] = ()
    baseline_file: str | None = None

    @property
    def failed(self) -> bool:
        """True when a count regressed or a budget was exceeded."""
        return self.verdict is Verdict.REGRESSED or bool(self.over_budget)

    def regressions(self) -> list[CountChange]:
        return [c for c in self.changes if c.status == "regressed"]

    def summary(self) -> str:
        """One line for reports: the changed counts, or the verdict."""
        changed = [c for c in self.changes if c.status in ("regressed", "improved")]
        if not changed:
            return self.verdict.value
        return "; ".join(f"{c.text()} [{c.status}]" for c in changed)

    def to_dict(self) -> dict[str, Any]:
        """JSON form (the report adds its failure messages: :func:`pytest_gpuperf.reporting.report.count_comparison_dict`)."""
        d = dataclasses.asdict(self)
        d["verdict"] = self.verdict.value
        d["failed"] = self.failed
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "CountComparison":
        """From :meth:`to_dict`'s form."""
        changes = tuple(
            CountChange(**{**{k: c[k] for k in c if k in _CHANGE_FIELDS},
                           "names": tuple(tuple(n) for n in c.get("names", ()))})
            for c in d.get("changes", ())
        )
        return cls(d["benchmark_id"], Verdict(d["verdict"]), changes, tuple(d.get("over_budget", ())),
                   d.get("baseline_file"))


_CHANGE_FIELDS = {f.name for f in dataclasses.fields(CountChange)}


def name_diff(current: Mapping[str, int], stored: Mapping[str, int]) -> tuple[tuple[str, int], ...]:
    """Per-name changes ``(name, current - stored)``, non-zero ones, largest increase first."""
    deltas = {n: current.get(n, 0) - stored.get(n, 0) for n in set(current) | set(stored)}
    return tuple(sorted(((n, d) for n, d in deltas.items() if d), key=lambda nd: (-nd[1], nd[0])))


def decide_counts(
    current: Counts,
    history: Sequence[Mapping[str, Any]] | None,
    newest: Counts | None = None,
    *,
    tolerance: float = 0.0,
    budgets: Mapping[str, int | None] | None = None,
    benchmark_id: str = "benchmark",
    baseline_file: str | None = None,
) -> CountComparison:
    """Gate ``current`` against the counts stored with a baseline's runs.

    ``history``: the stored runs' ``counts`` records (oldest first; runs without counts are
    skipped; None: no baseline); ``newest``: the newest stored run's :class:`Counts` with its
    per-name breakdowns (for the diff). A count that differed between the calls counted, in this
    run (``current.varied``) or a stored one (its record's ``varied``), is data-dependent, not
    exact: its limit is the stored highest plus the tolerance plus twice the widest range seen
    between calls (relative to the highest, :func:`spread_fraction`, so that ten times the data
    does not widen its own allowance), this run's lowest value is held against it, and within it the status is
    ``"varies"`` (reported, passes). Kernels counted with cuDNN benchmark mode on, now or in the
    newest stored run (:attr:`Counts.cudnn_benchmark`), get the status ``"not gated"``. ``tolerance``: relative slack (0.01 = 1%) above the stored
    value before a count fails. ``budgets``: ``max_ops``/``max_kernels``/``max_syncs``/
    ``max_recompiles`` -> limit (None: none). Raises ``ValueError`` for a negative tolerance or an
    unknown budget name. Deterministic.
    """
    if not tolerance >= 0:
        raise ValueError(f"count_tolerance={tolerance!r}: expected a fraction >= 0")
    stored = [stored_totals(r) for r in (history or ())]
    stored = [s for s in stored if s]
    changes = []
    # kernels counted with cuDNN benchmark mode (either side) depend on the algorithms the process picked
    algorithm_dependent = current.cudnn_benchmark or (newest is not None and newest.cudnn_benchmark)
    stored_ranges = [stored_varied(r) for r in (history or ())]
    for name, value in current.totals().items():
        values = [s[name] for s in stored if name in s]
        if name == "kernels" and algorithm_dependent and values:
            changes.append(CountChange(name, value, min(values), max(values), len(values), min(values) != max(values),
                                       None, "not gated"))
            continue
        if not values:
            changes.append(CountChange(name, value, None, None, 0, False, None, "new"))
            continue
        ranges = [r[name] for r in stored_ranges if name in r]
        low = min(values + [lo for lo, _ in ranges])
        high = max(values + [hi for _, hi in ranges])
        limit = high * (1 + tolerance)
        now_low = current.varied[name][0] if name in current.varied else value
        if ranges or name in current.varied:
            # differs between calls (data-dependent: random sampling, a buffer that fills): not exact.
            # Gated with a tolerance of twice the widest relative range seen between calls, on this run's lowest
            limit += 2 * high * max(spread_fraction(lo, hi) for lo, hi in ranges + [(now_low, value)])
            status = "regressed" if now_low > limit else "improved" if value < low else "varies"
            value = now_low if status == "regressed" else value
        else:
            status = "regressed" if value > limit else "improved" if value < low else "unchanged"
        names: tuple[tuple[str, int], ...] = ()
        if newest is not None and name in BY_NAME_FIELDS and status in ("regressed", "improved"):
            names = name_diff(current.by_name(name), newest.by_name(name))
        changes.append(CountChange(name, value, low, high, len(values), low != high, limit, status, names))
    over = []
    for option, limit in (budgets or {}).items():
        if option not in BUDGETS:
            raise ValueError(f"unknown count budget {option!r}; expected one of {', '.join(BUDGETS)}")
        name = BUDGETS[option]
        value = getattr(current, name)
        if limit is None or value is None or value <= limit:
            continue
        top = sorted(current.by_name(name).items(), key=lambda kv: (-kv[1], kv[0]))[:DIFF_NAMES]
        detail = f" ({', '.join(f'{n} {c}' for n, c in top)})" if top else ""
        per = "" if name in _TOTALS else " per call"
        over.append(f"{benchmark_id}: {value} {LABELS[name]}{per} is over {option}={limit}{detail}")
    statuses = {c.status for c in changes}
    if "regressed" in statuses:
        verdict = Verdict.REGRESSED
    elif not stored:
        verdict = Verdict.NO_BASELINE
    elif "improved" in statuses:
        verdict = Verdict.IMPROVED
    else:
        verdict = Verdict.UNCHANGED
    return CountComparison(benchmark_id, verdict, tuple(changes), tuple(over), baseline_file)


def compile_delta(before: Mapping[str, Mapping[str, int]] | None,
                  after: Mapping[str, Mapping[str, int]] | None) -> dict[str, int] | None:
    """``torch.compile`` counters between two snapshots of ``torch._dynamo.utils.counters``.

    Returns ``{"recompiles", "graph_breaks", "unique_graphs"}``: frames compiled (dynamo's
    ``frames.total``), graph breaks (``graph_break`` reasons, or ``unimplemented`` on torch that
    records them there) and graphs captured (``stats.unique_graphs``) after ``before``; None when
    ``after`` is None (dynamo was never loaded: nothing was compiled). A snapshot is a mapping of
    counter group -> {key: count}; ``before`` None counts from zero.
    """
    if after is None:
        return None
    before = before or {}

    def grew(group: str, key: str | None = None) -> int:
        a, b = after.get(group, {}), before.get(group, {})
        if key is not None:
            return max(0, int(a.get(key, 0)) - int(b.get(key, 0)))
        return max(0, sum(int(v) for v in a.values()) - sum(int(v) for v in b.values()))

    breaks = grew("graph_break") or grew("unimplemented")
    return {"recompiles": grew("frames", "total"), "graph_breaks": breaks,
            "unique_graphs": grew("stats", "unique_graphs")}


def device_counts(events: Iterable[Any], *, sync_calls: Iterable[str], final_sync: str) -> tuple[dict[str, int], dict[str, int]]:
    """CUDA kernels and host-blocking syncs in a profiled call, by name.

    ``events``: :class:`~pytest_gpuperf.verdict.bottleneck.TraceEvent` objects of one call. Kernels are
    named by :func:`kernel_name`; a sync (a ``runtime`` event named in ``sync_calls``) is named by
    the innermost ``cpu_op`` that encloses it (``aten::_local_scalar_dense`` for ``.item()``),
    else by the runtime call; syncs inside the ``final_sync`` annotation (the plugin's own wait)
    and after it (torch's profiler synchronizes the device on exit, while it still records: found
    on the simulated CUDA device) are left out. Returns ``(kernels_by_name, syncs_by_name)``.
    """
    events = list(events)
    ours = [(e.start_ns, e.end_ns) for e in events if e.kind == "annotation" and e.name == final_sync]
    # after our own final sync only the profiler's teardown runs (torch's profiler synchronizes the
    # device on exit, while still recording): not the benchmark's
    done = max((t for _, t in ours), default=None)
    ops = sorted((e for e in events if e.kind == "cpu_op"), key=lambda e: (e.start_ns, -e.end_ns))
    sync_names = set(sync_calls)
    kernels: dict[str, int] = {}
    syncs: dict[str, int] = {}
    for e in events:
        if e.kind == "kernel":
            name = kernel_name(e.name)
            kernels[name] = kernels.get(name, 0) + 1
        elif e.kind == "runtime" and e.name in sync_names:
            if any(s <= e.start_ns and e.end_ns <= t for s, t in ours) or (done is not None and e.start_ns >= done):
                continue
            inner = [o for o in ops if o.start_ns <= e.start_ns and e.end_ns <= o.end_ns]
            name = min(inner, key=lambda o: o.duration_ns).name if inner else e.name
            syncs[name] = syncs.get(name, 0) + 1
    return kernels, syncs


def kernel_name(name: str, width: int = 80) -> str:
    """A CUDA kernel's name without its return type, template and argument lists, at most ``width``
    characters: ``void at::native::vectorized_elementwise_kernel<4, ...>(...)`` ->
    ``at::native::vectorized_elementwise_kernel``."""
    text = name.strip()
    if text.startswith("void "):
        text = text[5:]
    for stop in ("<", "("):
        if stop in text:
            text = text[: text.index(stop)]
    return text.strip()[:width] or name[:width]


def throughput(median_ms: float, counts: Counts | None, items_per_call: float | None = None,
               peak_flops_per_s: float | None = None, peak_bytes_per_s: float | None = None) -> dict[str, float] | None:
    """Achieved rates at the median call time: ``flops_per_s`` (FLOP/s), ``bytes_per_s`` (B/s,
    from the minimum-traffic estimate), ``items_per_s`` (with ``items_per_call``) and their share
    of a calibrated peak (``pct_of_peak_flops``, ``pct_of_peak_bytes``, percent) where one is known.
    None when ``median_ms`` is not positive or there is nothing to report."""
    if not median_ms or median_ms <= 0:
        return None
    seconds = median_ms / 1e3
    out: dict[str, float] = {}
    if counts is not None and counts.flops:
        out["flops_per_s"] = counts.flops / seconds
        if peak_flops_per_s:
            out["pct_of_peak_flops"] = 100.0 * out["flops_per_s"] / peak_flops_per_s
    if counts is not None and counts.traffic_bytes:
        out["bytes_per_s"] = counts.traffic_bytes / seconds
        if peak_bytes_per_s:
            out["pct_of_peak_bytes"] = 100.0 * out["bytes_per_s"] / peak_bytes_per_s
    if items_per_call:
        out["items_per_s"] = items_per_call / seconds
    return out or None
