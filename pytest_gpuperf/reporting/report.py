"""Reports: the terminal summary table, the Markdown summary and the JSON report's entries (the
result codec, :mod:`pytest_gpuperf.storage.codec`, with the verdicts' messages added); pure: no
torch, no pytest."""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable, Sequence

from pytest_gpuperf.reporting.messages import (MACHINE_DIFFERS_HINT, comparison_message, comparison_note,
                                               gate_messages, pure_note)
from pytest_gpuperf.storage.codec import (  # noqa: F401 - json_safe: read here by older callers
    comparison_to_dict, count_comparison_to_dict, decode_result, encode_result, json_safe,
    memory_comparison_to_dict)
from pytest_gpuperf.reporting.columns import DEFAULT_COLUMNS, EXTRA_COLUMN_KEYS
from pytest_gpuperf.verdict.compare import Comparison, MemoryComparison
from pytest_gpuperf.verdict.result import BenchResult
from pytest_gpuperf.core.units import (  # noqa: F401 - shorten_middle: read here by older callers
    format_bytes, format_ms, format_pct, format_ratio, format_si, shorten_middle, shorten_name, si_scaled)

#: The header of the instructions column (shown when a benchmark was counted: ``--gpuperf-instructions``).
INSTR_HEADER = "instr/call"
COLUMNS = ("name", "device", "median", "CPU", "p95", "IQR", "rounds", "baseline", "ratio", "peak mem", "ops/kern",
           "syncs", "FLOP/s", "B/s", "bottleneck", "verdict")

#: Longest benchmark name in the terminal table; longer ones are cut in the middle (JSON keeps them whole).
MAX_NAME_WIDTH = 70
#: The shortest a name is cut to when the table must fit a narrow terminal.
MIN_NAME_WIDTH = 24
#: When the default table is wider than the terminal, its columns are dropped in this order (first
#: dropped first) until it fits; name, median, ratio and verdict always stay (then names are cut in
#: the middle). ``--gpuperf-columns`` is shown as asked; the JSON and Markdown reports hold everything.
DROP_ORDER = ("B/s", "FLOP/s", "device", "p95", "rounds", "syncs", "ops/kern", "IQR", "CPU", "bottleneck",
              "peak mem", INSTR_HEADER, "baseline")

#: The legend under the terminal table, in parts (issue 47: the legend explains the columns shown
#: only): each mode's parts as ``(column headers, text)``, printed, in order, when the fitted table
#: shows any of the headers (``"verdict"``: always).
_COUNT_PART = (("ops/kern", "syncs"), "ops/kern, syncs = aten ops (/CUDA kernels) and host-device syncs per call "
               "(exact counts, gated)")
_INSTR_PART = ((INSTR_HEADER,), "instr/call = the host's instructions per call under valgrind's callgrind "
               "(--gpuperf-instructions; gated, with the change against the baseline's)")
LEGEND_PARTS: dict[str, tuple[tuple[tuple[str, ...], str], ...]] = {
    "stored": (
        (("baseline",), "baseline = median of the stored runs' medians (under 3 runs: the newest run's; `gpuperf "
                        "show --runs` lists each run)"),
        (("ratio",), "ratio = median / baseline, the ratio the verdict's message, the JSON report and the history "
                     "show (the gate's Hodges-Lehmann estimate, after any --gpuperf-normalize, is in the message's "
                     "evidence)"),
        (("CPU",), "CPU = the calling thread's median CPU time per call"),
        _COUNT_PART,
        _INSTR_PART,
        (("FLOP/s", "B/s"), "FLOP/s, B/s = counted FLOPs and minimum-traffic bytes per call at the median time (% of "
                            "the calibrated peak when classified)"),
    ),
    "replicates": (
        (("median",), "median = geometric mean of this run's per-process medians (a process a slow period disturbed "
                      "set aside: the verdict's note names it; the median of all rounds pooled is the JSON report's "
                      "stats.median_ms)"),
        (("baseline",), "baseline = that of the baseline's"),
        (("ratio",), "ratio = median / baseline, the estimate the verdict is decided on"),
        (("CPU",), "CPU = the calling thread's CPU time per call, the same statistic"),
        _COUNT_PART,
        _INSTR_PART,
        (("FLOP/s", "B/s"), "FLOP/s, B/s = counted FLOPs and minimum-traffic bytes per call at the median time"),
    ),
    "ab": (
        (("median",), "A/B: median = of B's (the working tree's) samples"),
        (("baseline",), "baseline = of REF's (A's) samples"),
        (("ratio",), "ratio = the verdict's Hodges-Lehmann estimate of B/A over the paired blocks [99% CI of the "
                     "median block ratio], as in its message"),
        (("peak mem", "ops/kern", "syncs"), "memory and counts are B's, compared with A's"),
    ),
}
#: The footnote of each mark a verdict cell may carry (issue 47: every mark has one), as
#: ``(pattern found in the table, text)``; the compact forms are :func:`compact_verdict`'s.
MARK_NOTES: tuple[tuple[str, str], ...] = (
    (r" on CPU time|\[cpu\]", "a verdict 'on CPU time' ([cpu]) was decided on the calling thread's CPU time, and "
                              "its median, baseline and ratio are CPU time's"),
    (r"\w\+\w", "a+b (compact verdict) = a, and b (memory, counts, instr: instructions, scaling) regressed or "
                 "over its budget too"),
    (r"misclassified\?", "misclassified? = misclassified while the host was busy: not trusted"),
    (r"\[upd\]", "[upd] = baseline updated"),
    (r"  new\b", "new = no baseline"),
    (r"\(machine [+-]", "(machine +N%) = the machine differs: N% slower on the machine-speed probe"),
    (r"\d~", "~ after a count or peak: it differed between calls, gated only beyond twice that spread"),
    (r"\w\*", "* = a note, under * notes: below"),
)


#: The footnote of a ratio cell with its CI in brackets in the default mode (an A/B confirmation).
CONFIRMED_CI_NOTE = ("rows with [CI]: confirmed by A/B against the baselines' commit on this machine: median = B's, "
                     "baseline = that commit's (A's) median, ratio = the verdict's estimate of B/A [99% CI]")


def _joined(mode: str) -> str:
    """Every legend part of ``mode``, joined: the whole legend (every column shown)."""
    return "; ".join([text for _, text in LEGEND_PARTS[mode]] + ([CONFIRMED_CI_NOTE] if mode == "replicates" else []))


#: What the summary's columns hold (stored baselines, one process); all of it.
LEGEND = _joined("stored")
#: The legend in the default mode (``--gpuperf-processes`` >= 2); all of it.
REPLICATES_LEGEND = _joined("replicates")
#: What the columns hold in A/B mode (``--gpuperf-ab``); all of it.
AB_LEGEND = _joined("ab")


def table_headers(lines: Sequence[str]) -> set[str]:
    """The column headers of the tables in ``lines`` (:func:`summary_lines`' output): each line
    above a rule of dashes, split where two spaces part its cells."""
    import re

    return {h for above, rule in zip(lines, lines[1:]) if rule.startswith("-") and set(rule) <= {"-", " "}
            for h in re.split(r"\s{2,}", above.strip())}


def legend(mode: str, lines: Sequence[str], *, columns: bool = True) -> str:
    """The legend for the table ``lines`` as printed (issue 47): the parts of ``mode``'s legend
    (``"stored"``, ``"replicates"``, ``"ab"``; :data:`LEGEND_PARTS`) whose columns the table shows
    (none with ``columns=False``: a table without ratios), and the footnote of each mark its cells
    carry (:data:`MARK_NOTES`), joined by ``"; "`` (``""``: nothing to explain)."""
    import re

    shown = table_headers(lines)
    cells = "\n".join(ln for ln in lines if ln and not set(ln) <= {"-", " "} and not ln.startswith("group: ")
                      and set(re.split(r"\s{2,}", ln.strip())) - shown)
    parts = [text for keys, text in LEGEND_PARTS[mode] if columns and shown & set(keys)]
    if mode == "replicates" and re.search(r"\dx \[\d", cells):  # a ratio with its CI: an A/B confirmation
        parts.append(CONFIRMED_CI_NOTE)
    parts += [text for pattern, text in MARK_NOTES if re.search(pattern, cells)]
    return "; ".join(dict.fromkeys(parts))


def comparison_dict(c: Comparison | None) -> dict[str, Any] | None:
    """A :class:`Comparison` as a JSON-ready dict (:func:`~pytest_gpuperf.storage.codec.comparison_to_dict`)
    with its ``message``, and its ``note`` worded with its advice, as reports carry them."""
    d = comparison_to_dict(c)
    if d is not None:
        assert c is not None
        _add_words(d, c)
    return d


def _add_words(d: dict[str, Any], c: Comparison) -> None:
    """A report's comparison dict gets the ``message`` and, in ``note``, the note as people read it
    (:func:`~pytest_gpuperf.reporting.messages.comparison_note`: with its advice worded; the
    ``advice`` codes stay, and :func:`result_from_entry` reads the note back without the words)."""
    d["message"] = comparison_message(c)
    d["note"] = comparison_note(c) or None


def memory_comparison_dict(m: MemoryComparison | None) -> dict[str, Any] | None:
    """A :class:`MemoryComparison` as a JSON-ready dict with its failure ``messages``."""
    d = memory_comparison_to_dict(m)
    if d is not None:
        d["messages"] = gate_messages(m)
    return d


def count_comparison_dict(cc: Any) -> dict[str, Any] | None:
    """A :class:`~pytest_gpuperf.verdict.counts.CountComparison` as a JSON-ready dict, with its
    failure messages."""
    if cc is None:
        return None
    return dict(count_comparison_to_dict(cc), messages=gate_messages(cc))


def result_entry(result: BenchResult, **fields: Any) -> dict[str, Any]:
    """The JSON entry of one benchmark (:func:`~pytest_gpuperf.storage.codec.encode_result`, with its
    keywords: ``environment``, ``git_commit``, ``timestamp_utc``, ``with_comparison``; a file keeps
    at most ``max_samples`` samples, by default :data:`~pytest_gpuperf.verdict.stats.MAX_STORED_SAMPLES`)
    with the verdicts' messages added to its comparisons and the timing note worded with its advice,
    as the JSON report carries them."""
    from pytest_gpuperf.verdict.stats import MAX_STORED_SAMPLES

    entry = encode_result(result, **{"max_samples": MAX_STORED_SAMPLES, **fields})
    if entry.get("comparison") is not None:
        assert result.comparison is not None
        _add_words(entry["comparison"], result.comparison)
    for key, gate in (("memory_comparison", result.memory_comparison), ("count_comparison", result.count_comparison)):
        if entry.get(key) is not None:
            entry[key]["messages"] = gate_messages(gate)
    return entry


def result_from_entry(entry: dict[str, Any]) -> BenchResult:
    """A JSON report's entry (:func:`result_entry`) as a :class:`BenchResult`
    (:func:`~pytest_gpuperf.storage.codec.decode_result`), its timing note as the verdict layer
    wrote it: without the worded advice :func:`result_entry` added (the ``advice`` codes say it)."""
    import dataclasses

    r = decode_result(entry)
    c = r.comparison
    if c is None or not c.advice:
        return r
    return r.replace(comparison=dataclasses.replace(c, note=pure_note(c)))


def _verdict_text(r: BenchResult, updated: bool) -> str:
    if r.smoke:
        return "smoke"
    text = r.comparison.verdict.value if r.comparison else "-"
    if r.comparison is not None and comparison_note(r.comparison) and r.comparison.verdict.value == "unchanged":
        text += "*"
    if r.comparison is not None:  # the clock that decided, where not the wall clock (verdict.cputime)
        text += {"cpu": " on CPU time", "ref": " speed-normalized"}.get(r.comparison.clock or "", "")
    m = r.memory_comparison
    if m is not None and m.verdict.value in ("regressed", "improved"):
        text += f", memory {m.verdict.value}"
    if m is not None and m.over_budget:
        text += ", over max_memory"
    cc = r.count_comparison
    if cc is not None and cc.verdict.value in ("regressed", "improved"):
        text += f", counts {cc.verdict.value}"
    if cc is not None and cc.over_budget:
        text += ", over count budget"
    if r.misclassified:
        text += ", misclassified" if r.misclassification_trusted else ", misclassified (host busy: not trusted)"
    if r.scaling is not None and r.scaling.failed:
        text += ", below min_scaling_efficiency"
    ic = r.instruction_comparison
    if ic is not None and ic.verdict.value in ("regressed", "improved"):
        text += f", instructions {ic.verdict.value}"
    if r.comparison is not None and r.comparison.machine_differs and r.comparison.machine_ratio is not None:
        text += f" (machine differs: {(r.comparison.machine_ratio - 1) * 100:+.0f}%)"
    elif r.comparison is not None and r.comparison.confirmed is True:
        text += " (confirmed)"
    elif r.comparison is not None and r.comparison.confirmed is False:
        text += " (not confirmed)"
    if updated:
        text += " (baseline updated)"
    return text


def _memory_text(r: BenchResult) -> str:
    if r.peak_memory_bytes is None:
        return "-"
    text = format_bytes(r.peak_memory_bytes) + (VARIES if r.peak_memory_low_bytes is not None else "")
    change = r.memory_comparison.change if r.memory_comparison is not None else None
    if change is not None and abs(change) >= 0.0005:
        text += f" ({format_pct(change)})"
    return text


def _bottleneck_text(r: BenchResult) -> str:
    if r.bottleneck is None:
        return "-"
    expected = r.options.expect_bottleneck
    if r.misclassified:
        return f"{r.bottleneck.kind} (expected {'/'.join(expected)})"
    return r.bottleneck.kind


def _count_change(r: BenchResult, name: str) -> str:
    """`` (+10)`` when the count gate saw ``name`` change against the baseline, else ``""``."""
    cc = r.count_comparison
    change = next((c for c in cc.changes if c.name == name), None) if cc is not None else None
    if change is None or change.status not in ("regressed", "improved") or change.high is None:
        return ""
    return f" ({change.current - change.high:+d})"


def ops_text(r: BenchResult) -> str:
    """``212`` (CPU) or ``212/40`` (ops/CUDA kernels) per call, with the change when gated."""
    k = r.counts
    if k is None:
        return "-"
    text = f"{k.ops}{_varies(k, 'ops')}{_count_change(r, 'ops')}"
    if k.kernels is not None:
        text += f"/{k.kernels}{_varies(k, 'kernels')}{_count_change(r, 'kernels')}"
    return text


#: Marks a count or peak that differed between the calls measured (gated beyond twice its spread).
VARIES = "~"


def _varies(counts: Any, name: str) -> str:
    return VARIES if name in counts.varied else ""


def syncs_text(r: BenchResult) -> str:
    """Host-device syncs per call, with the change when gated."""
    return "-" if r.counts is None else f"{r.counts.syncs}{_varies(r.counts, 'syncs')}{_count_change(r, 'syncs')}"


def _rate_text(rates: dict[str, float] | None, key: str, unit: str) -> str:
    if not rates or key not in rates:
        return "-"
    text = format_si(rates[key], unit)
    pct = rates.get("pct_of_peak_" + ("flops" if key == "flops_per_s" else "bytes"))
    return text + (f" ({pct:.0f}%)" if pct is not None else "")


def instructions_text(r: BenchResult) -> str:
    """``8.75k`` instructions per call, with the change against the baseline's (``9.54k +9.1%``), else ``-``."""
    if r.instructions is None:
        return "-"
    scaled, prefix = si_scaled(r.instructions.per_call)
    text = f"{scaled:.3g}{prefix}"
    ic = r.instruction_comparison
    if ic is not None and ic.ratio is not None and ic.verdict.value != "inconclusive":
        text += f" {format_pct(round(ic.ratio - 1, 3) or 0.0)}"
    return text


def items_text(r: BenchResult) -> str:
    """``1.23k samples/s`` with ``items_per_call``, else ``-``."""
    rates = r.rates()
    if not rates or "items_per_s" not in rates:
        return "-"
    scaled, prefix = si_scaled(rates["items_per_s"])
    return f"{scaled:.3g}{prefix} {r.options.items}/s"


def bus_cells(r: BenchResult) -> tuple[str, str]:
    """The ``algbw`` and ``busbw`` cells (``12.3 GB/s``) of a bare collective
    (:meth:`~pytest_gpuperf.verdict.result.BenchResult.bus_bandwidth`), else ``-``."""
    bus = r.bus_bandwidth() if not r.smoke else {}
    if not bus:
        return "-", "-"
    return f"{bus['algbw_gb_per_s']:.3g} GB/s", f"{bus['busbw_gb_per_s']:.3g} GB/s"


#: Headers of the bus-bandwidth columns (shown when a benchmark declares ``collective=``).
BUS_COLUMNS = ("algbw", "busbw")


def time_text(ms: float | None, time_unit: tuple[str, float] | None = None) -> str:
    """A time cell: ``ms`` with a unit chosen for it (:func:`~pytest_gpuperf.core.units.format_ms`),
    or, with ``time_unit`` = ``(prefix, scale)`` (pytest-benchmark's ``pytest_benchmark_scale_unit``),
    the time in seconds times ``scale`` followed by ``prefix + "s"``."""
    if ms is None or time_unit is None:
        return format_ms(ms)
    prefix, scale = time_unit
    return f"{ms / 1e3 * scale:.4g} {prefix}s"


def summary_row(label: str, r: BenchResult, updated: bool = False, *, items: bool = False,
                bus: bool = False, time_unit: tuple[str, float] | None = None, instr: bool = False) -> tuple[str, ...]:
    """One row of the summary table; each time gets a unit chosen for it (ns/µs/ms/s), or the one
    ``time_unit`` gives (:func:`time_text`).

    ``items``: add the items/s cell (the table has the column when a benchmark declares
    ``items_per_call``), just before the verdict; ``bus``: then the algbw and busbw cells (a
    benchmark declares ``collective=`` and ``bytes_per_call=`` under torchrun); ``instr``: then the
    instructions cell (:func:`instructions_text`; a benchmark was counted)."""
    c = r.comparison
    iqr = f"{r.iqr_fraction * 100:.1f}%" if not r.smoke else "-"
    rates = r.rates()
    row = (
        label,
        r.device,
        time_text(_centre_ms(r), time_unit),
        time_text(r.cpu_estimate_ms, time_unit),
        time_text(r.p95_ms, time_unit) if not r.smoke else "-",
        iqr,
        str(r.rounds),
        time_text(c.baseline_median_ms, time_unit) if c and c.baseline_median_ms is not None else "-",
        _ratio_cell(c, r),
        _memory_text(r),
        ops_text(r),
        syncs_text(r),
        _rate_text(rates, "flops_per_s", "FLOP/s"),
        _rate_text(rates, "bytes_per_s", "B/s"),
        _bottleneck_text(r),
    )
    return (row + ((items_text(r),) if items else ()) + (bus_cells(r) if bus else ())
            + ((instructions_text(r),) if instr else ()) + (_verdict_text(r, updated),))


def _footnotes(ordered: list[tuple[str, BenchResult]]) -> list[str]:
    """The Markdown report's footnote for its ``unchanged*`` verdicts (every mark gets one, issue
    47): each such benchmark with its note."""
    starred = [(label, r.comparison) for label, r in ordered if _verdict_text(r, False).split(" ")[0].endswith("*")]
    if not starred:
        return []
    return ["", "\\* unchanged, with a note:", ""] + [
        f"- `{label.replace('|', chr(92) + '|')}`: {comparison_note(c)}" for label, c in starred]


def _centre_ms(r: BenchResult) -> float:
    """The table's "median" cell (ms): the run's median as the verdict decided on it
    (:attr:`~pytest_gpuperf.verdict.result.BenchResult.estimate_ms`: the geometric mean of the
    worker processes' medians, or the median of the rounds in one process); for a verdict decided
    on CPU time, CPU time's (the verdict cell says so)."""
    c = r.comparison
    if c is not None and c.clock == "cpu" and c.current_median_ms and not r.smoke:
        return c.current_median_ms
    return r.estimate_ms


def table_ratio(r: BenchResult) -> float | None:
    """The table's ratio: the verdict's own estimate of current / baseline
    (:attr:`~pytest_gpuperf.verdict.compare.Comparison.shown_ratio`), the one its message, the JSON
    report and the history show (issue 47); None without one."""
    c = r.comparison
    if c is None or r.smoke:
        return None
    return c.shown_ratio


def _ratio_cell(c: Comparison | None, r: BenchResult | None = None) -> str:
    """The ratio column: the verdict's ratio (:attr:`~pytest_gpuperf.verdict.compare.Comparison.shown_ratio`);
    in A/B mode with the paired estimate's 99% CI, ``1.12x [1.08x, 1.16x]``, as the message gives it."""
    if c is None or c.shown_ratio is None:
        return "-"
    if c.ab is not None and c.ratio_ci:
        return f"{format_ratio(c.shown_ratio)} [{format_ratio(c.ratio_ci[0])}, {format_ratio(c.ratio_ci[1])}]"
    return format_ratio(c.shown_ratio)


#: Columns of the summary table that hold numbers (right-aligned).
NUMERIC_COLUMNS = frozenset({"median", "CPU", "p95", "IQR", "rounds", "baseline", "ratio", "peak mem", "ops/kern",
                             "syncs", "FLOP/s", "B/s", "items/s"})


def format_table(
    rows: Sequence[Sequence[str]],
    header: Sequence[str] = COLUMNS,
    numeric: Iterable[str] = NUMERIC_COLUMNS,
) -> list[str]:
    """Left-align text columns and right-align the columns named in ``numeric``; returns the lines."""
    all_rows = [tuple(header)] + [tuple(r) for r in rows]
    widths = [max(len(row[i]) for row in all_rows) for i in range(len(header))]
    numeric = set(numeric)
    right = {i for i, name in enumerate(header) if name in numeric}
    lines = []
    for k, row in enumerate(all_rows):
        cells = [cell.rjust(w) if i in right else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths))]
        lines.append("  ".join(cells).rstrip())
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    return lines


def _format_ops(ms: float) -> str:
    """Calls per second of a call taking ``ms`` milliseconds: ``8.25K/s``."""
    if not ms > 0:
        return "-"
    scaled, prefix = si_scaled(1e3 / ms)
    return f"{scaled:.4g}{prefix.upper()}/s"


#: Extra columns of the summary table (``--gpuperf-columns``): key -> (header, cell of a result).
EXTRA_COLUMNS: dict[str, tuple[str, Any]] = {
    "min": ("min", lambda r: format_ms(r.min_ms)),
    "max": ("max", lambda r: format_ms(r.max_ms)),
    "mean": ("mean", lambda r: format_ms(r.mean_ms)),
    "stddev": ("stddev", lambda r: format_ms(r.std_ms) if not r.smoke else "-"),
    "outliers": ("outliers", lambda r: f"{r.outliers.low};{r.outliers.high}" if not r.smoke else "-"),
    "ops": ("calls/s", lambda r: _format_ops(r.mean_ms)),  # pytest-benchmark's OPS
    "iterations": ("iterations", lambda r: str(r.calls_per_round)),
}
#: ``--gpuperf-columns`` keys of the default columns, in :data:`COLUMNS` order.
COLUMN_KEYS = DEFAULT_COLUMNS
assert len(COLUMN_KEYS) == len(COLUMNS) and set(EXTRA_COLUMNS) | {"items", "instr"} == set(EXTRA_COLUMN_KEYS)

_SORT: dict[str, Any] = {
    "name": lambda label, r: (0, label),
    "ratio": lambda label, r: ((1, 0.0) if r.comparison is None or r.comparison.ratio is None
                               else (0, table_ratio(r) or r.comparison.ratio)),
    "rounds": lambda label, r: (0, r.rounds),
    "iqr": lambda label, r: (0, r.iqr_ms),
    "stddev": lambda label, r: (0, r.std_ms),
}


def _sort_key(key: str) -> Any:
    if key in _SORT:
        return _SORT[key]
    if key in ("median", "mean", "min", "max", "p95"):
        return lambda label, r: (0, getattr(r, f"{key}_ms"))
    raise ValueError(f"unknown sort key {key!r}")


def summary_lines(
    items: Iterable[tuple[str, BenchResult, bool]],
    columns: Sequence[str] | None = None,
    sort: str | None = None,
    width: int | None = None,
    time_unit: tuple[str, float] | None = None,
) -> list[str]:
    """The terminal summary: a table per group of (label, result, baseline-updated) triples.

    ``columns``: the column keys to show (:data:`COLUMN_KEYS` and :data:`EXTRA_COLUMNS`; ``name``
    always first and ``verdict`` always last; None: the default table). ``sort``: order the rows of
    each group by ``name`` (the default), ``median``, ``mean``, ``min``, ``max``, ``p95``,
    ``stddev``, ``iqr``, ``rounds`` or ``ratio``, ascending. An items/s column (named after the
    unit, e.g. ``samples/s``) comes before the verdict when a benchmark declares ``items_per_call``.
    ``width``: the terminal's width in characters (None: no limit); the default table then drops
    columns (:data:`DROP_ORDER`) and cuts names in the middle until it fits (see :func:`fit_table`).
    ``time_unit``: ``(prefix, scale)`` for every time cell (:func:`time_text`); None: each its own.
    Raises ``ValueError`` for an unknown key.
    """
    items = list(items)
    with_items, rate_column, with_bus, with_instr = _optional_columns([r for _, r, _ in items])
    all_keys = (COLUMN_KEYS[:-1] + (("items",) if with_items else ()) + (BUS_COLUMNS if with_bus else ())
                + (("instr",) if with_instr else ()) + COLUMN_KEYS[-1:])
    all_headers = (COLUMNS[:-1] + ((rate_column,) if with_items else ()) + (BUS_COLUMNS if with_bus else ())
                   + ((INSTR_HEADER,) if with_instr else ()) + COLUMNS[-1:])
    keys = None
    if columns is not None:
        unknown = [c for c in columns if c not in COLUMN_KEYS and c not in EXTRA_COLUMNS and c not in ("items", "instr")]
        if unknown:
            raise ValueError(f"unknown column(s) {', '.join(unknown)}")
        keys = ["name"] + [c for c in columns if c not in ("name", "verdict") and (c != "items" or with_items)
                           and (c != "instr" or with_instr)]
        keys += ["verdict"]
    order = _sort_key(sort) if sort else None
    groups: dict[str, list[tuple[str, BenchResult, bool]]] = defaultdict(list)
    for label, r, updated in items:
        groups[r.group or ""].append((label, r, updated))
    lines: list[str] = []
    for group in sorted(groups):
        members = groups[group]
        if order is not None:
            members = sorted(members, key=lambda m: order(m[0], m[1]))
        rows = [summary_row(shorten_name(label, MAX_NAME_WIDTH), r, updated, items=with_items, bus=with_bus,
                            time_unit=time_unit, instr=with_instr) for label, r, updated in members]
        header: Sequence[str] = all_headers
        if keys is not None:
            full = [dict(zip(all_keys, row)) for row in rows]
            rows = [tuple(f[k] if k in f else EXTRA_COLUMNS[k][1](m[1]) for k in keys) for f, m in zip(full, members)]
            header = [all_headers[all_keys.index(k)] if k in all_keys else EXTRA_COLUMNS[k][0] for k in keys]
        if group or len(groups) > 1:
            lines.append(f"group: {group or '(none)'}")
        numeric = (NUMERIC_COLUMNS | {h for h, _ in EXTRA_COLUMNS.values()} | {rate_column} | set(BUS_COLUMNS)
                   | {INSTR_HEADER})
        if width is not None and keys is None:
            lines.extend(fit_table(rows, header, numeric, width, [label for label, _, _ in members]))
        else:
            lines.extend(format_table(rows, header, numeric))
        lines.append("")
    return lines


def _optional_columns(results: Sequence[BenchResult]) -> tuple[bool, str, bool, bool]:
    """Which optional columns the table shows: (items/s, its header, the bus bandwidths, instr/call)."""
    units = {r.options.items for r in results if r.options.items_per_call}
    rate_column = f"{units.pop()}/s" if len(units) == 1 else "items/s"
    return (any(r.options.items_per_call for r in results), rate_column,
            any(not r.smoke and r.bus_bandwidth() for r in results), any(r.instructions is not None for r in results))


def fit_table(rows: Sequence[Sequence[str]], header: Sequence[str], numeric: Iterable[str], width: int,
              names: Sequence[str]) -> list[str]:
    """:func:`format_table` of the default table, made to fit ``width`` characters (issue 47: the
    baseline outlives a long verdict cell): columns are dropped in :data:`DROP_ORDER` but its last
    (``baseline``) until it fits; then the names (first column; ``names`` are the full ones) are
    cut at their separators (:func:`~pytest_gpuperf.core.units.shorten_name`), to twice
    :data:`MIN_NAME_WIDTH` at the shortest, and if that is not enough the verdict cells take their
    compact form (:func:`compact_verdict`) and the names are cut to :data:`MIN_NAME_WIDTH` at the
    shortest; only then the baseline goes, and the names are cut again for what is left."""
    numeric = set(numeric)
    keep = list(range(len(header)))
    cells = [tuple(r) for r in rows]

    def table(name_width: int | None = None) -> list[str]:
        body = [tuple(shorten_name(names[k], name_width) if i == 0 and name_width else row[i] for i in keep)
                for k, row in enumerate(cells)]
        return format_table(body, [header[i] for i in keep], numeric)

    def excess(lines: list[str]) -> int:
        return max(map(len, lines)) - width

    def cut_names(shortest: int = MIN_NAME_WIDTH) -> list[str]:
        lines = table()
        if excess(lines) > 0:
            shown = max((len(row[0]) for row in cells), default=0)  # as cut to MAX_NAME_WIDTH
            lines = table(max(shortest, shown - excess(lines)))
        return lines

    lines = table()
    for column in DROP_ORDER:
        if excess(lines) <= 0:
            return lines
        if column == DROP_ORDER[-1]:
            lines = cut_names(2 * MIN_NAME_WIDTH)
            if excess(lines) > 0 and "verdict" in header:  # the compact verdict ("regressed+counts")
                v = header.index("verdict")
                cells = [tuple(compact_verdict(c) if i == v else c for i, c in enumerate(row)) for row in cells]
                lines = cut_names()
            if excess(lines) <= 0:
                return lines
        if column in header:
            keep.remove(header.index(column))
            lines = table()
    return cut_names()


#: The compact forms of a verdict cell's parts (:func:`compact_verdict`); each mark they leave has
#: its footnote in the legend (:data:`MARK_NOTES`).
_COMPACT = ((r", misclassified \(host busy: not trusted\)", "+misclassified?"),
            (r", (memory|counts) regressed", r"+\1"), (r", instructions regressed", "+instr"), (r", over ", "+over "), (r", misclassified", "+misclassified"),
            (r", below min_scaling_efficiency", "+scaling"), (r" on CPU time", " [cpu]"),
            (r" \(baseline updated\)", " [upd]"), (r" \(machine differs: ", " (machine "), (r"^no-baseline", "new"))


def compact_verdict(text: str) -> str:
    """A summary verdict cell in its compact form, for a terminal too narrow for the full one: a
    failing check after the first verdict becomes ``+<check>`` (``"regressed, counts regressed"``
    -> ``"regressed+counts"``, ``, over …`` -> ``+over …``, ``+scaling``, ``+misclassified``, with
    ``?`` when the host was busy), ``on CPU time`` becomes ``[cpu]``, ``(baseline updated)``
    ``[upd]``, ``(machine differs: +12%)`` ``(machine +12%)`` and ``no-baseline`` ``new``; the legend
    gives each mark's footnote."""
    import re

    for pattern, repl in _COMPACT:
        text = re.sub(pattern, repl, text)
    return text


def machine_differs_line(results: Iterable[BenchResult]) -> str | None:
    """The summary line when any benchmark was inconclusive because the machine differs (its
    interleaved probe, or for a baseline without one the reference workload, ran slower than when
    the baselines were recorded), else None."""
    hit = [r for r in results if r.comparison is not None and r.comparison.machine_differs]
    if not hit:
        return None
    ratios = sorted(r.comparison.machine_ratio for r in hit if r.comparison is not None and r.comparison.machine_ratio)
    span = (f"{(ratios[0] - 1) * 100:+.0f}%" if ratios[0] == ratios[-1] else
            f"{(ratios[0] - 1) * 100:+.0f}% to {(ratios[-1] - 1) * 100:+.0f}%") if ratios else "slower"
    return (f"{len(hit)} benchmark(s) inconclusive because this machine is slower than the one that recorded the "
            f"baselines ({span} on the machine-speed probe, or the session-start reference workloads where a "
            f"baseline has no probe): {MACHINE_DIFFERS_HINT}")


_ORDER = {"regressed": 0, "inconclusive": 1, "improved": 2, "unchanged": 3, "no-baseline": 4, None: 5}
_MARK = {"regressed": "[REGRESSED]", "inconclusive": "[INCONCLUSIVE]", "improved": "[improved]",
         "unchanged": "[ok]", "no-baseline": "[new]"}


def _failing(r: BenchResult, strict: bool) -> bool:
    return bool(r.failing(strict=strict))


#: IQR/median at or above which a recorded baseline is called noisy (torch.utils.benchmark's threshold).
NOISY_IQR = 0.10


def _cpu_iqr_fraction(r: BenchResult) -> float | None:
    """IQR / median of the thread CPU time samples (None without CPU time)."""
    if r.cpu is None or len(r.cpu.samples_ms) < 4:
        return None
    import statistics

    q1, _, q3 = statistics.quantiles(r.cpu.samples_ms, n=4)
    return (q3 - q1) / r.cpu.median_ms


def busy_baseline_warning(label: str, r: BenchResult) -> str | None:
    """The warning for a baseline recorded while other processes competed for its cores
    (:attr:`~pytest_gpuperf.verdict.result.BenchResult.host_busy`), else None: it says so, with
    the wall clock's and CPU time's IQR, and that the CPU time recorded beside it stays valid."""
    busy = r.host_busy if not r.smoke else None
    if busy is None:
        return None
    cpu_iqr = _cpu_iqr_fraction(r)
    cpu = (f"; its CPU time (IQR {cpu_iqr * 100:.1f}%) was recorded too and stays valid where the call does not "
           f"wait (a later run on a busy host decides on it)" if cpu_iqr is not None else
           "; no CPU time was recorded beside it")
    return (f"{label}: baseline recorded on a busy host ({busy}): the wall clock (IQR {r.iqr_fraction * 100:.1f}% of "
            f"the median) counts the time they took{cpu}; re-record on a quiet machine for a wall-clock baseline")


def noisy_baseline_warning(label: str, r: BenchResult) -> str | None:
    """The warning for a baseline recorded from a noisy run (IQR/median >= :data:`NOISY_IQR`), else None;
    on a busy host, :func:`busy_baseline_warning`'s."""
    busy = busy_baseline_warning(label, r)
    if busy is not None:
        return busy
    if r.smoke or not r.iqr_fraction >= NOISY_IQR:
        return None
    max_time = r.options.max_time
    longer = f"a longer max_time (now {max_time:g} s)" if isinstance(max_time, (int, float)) else "a longer max_time"
    return (
        f"{label}: noisy baseline recorded: IQR {r.iqr_fraction * 100:.1f}% of the median "
        f"(>= {NOISY_IQR * 100:g}%), so later comparisons will be imprecise; to record a steadier one use "
        f"{longer}, a quieter machine (no other jobs, fixed clocks), MALLOC_* settings for CPU training "
        f"steps (e.g. MALLOC_ARENA_MAX=1 MALLOC_MMAP_THRESHOLD_=<bytes>), or more rounds (min_rounds, "
        f"pedantic rounds=...)"
    )


def median_ratio_text(c: Comparison | None, r: BenchResult | None = None) -> str:
    """``0.738x (0.730x-0.746x)``: the verdict's ratio (:func:`table_ratio`) with its 99% CI, as its
    message gives them."""
    if c is None or c.shown_ratio is None:
        return "-"
    text = format_ratio(c.shown_ratio)
    if c.ratio_ci:
        text += f" ({format_ratio(c.ratio_ci[0])}-{format_ratio(c.ratio_ci[1])})"
    return text


def _normalized_mark(c: Comparison | None) -> str:
    """`` (normalized)`` after a ratio that ``--gpuperf-normalize`` rescaled, else nothing."""
    return " (normalized)" if c is not None and c.ratio is not None and c.normalization is not None else ""


#: Markdown modes: (baseline column header, ratio column header, legend).
_MARKDOWN_MODES = {
    "stored": ("baseline (history median)", "median ratio",
               "baseline (history median): median of the stored runs' medians (3+ runs; else the newest run's "
               "median). median: of this run's rounds. ratio: median / baseline with its 99% CI, as in the "
               "verdict's message (marked when --gpuperf-normalize rescaled it); the gate also tests the "
               "Hodges-Lehmann ratio, in the message's evidence."),
    "replicates": ("baseline (process medians)", "ratio",
                   "baseline (process medians): geometric mean of the baseline's per-process medians; median: that "
                   "of this run's process medians (a process a slow period disturbed set aside, as the verdict's "
                   "note says); ratio: the one over the other, with its Student-t 99% CI (the gate's evidence). "
                   "Where an A/B confirmation against the baselines' commit decided, baseline is that commit's "
                   "median on this machine and ratio the B/A estimate (the A/B lines below)."),
    "ab": ("baseline (REF's median)", "Hodges-Lehmann ratio B/A",
           "baseline (REF's median): median of side A's samples; ratio: Hodges-Lehmann estimate of B/A over the "
           "paired blocks; the 99% CI is of the median block ratio (the A/B lines below)."),
}


def _ab_and_why_markdown(ordered: Sequence[tuple[str, BenchResult]]) -> list[str]:
    """The Markdown summary's A/B lines and, for each decision that moved, why, op by op (issue 32)."""
    from pytest_gpuperf.reporting.messages import ab_summary

    lines: list[str] = []
    ab_lines = [f"- `{label}`: {ab_summary(r.comparison)} ({r.comparison.verdict.value})" for label, r in ordered
                if r.comparison is not None and ab_summary(r.comparison)]
    if ab_lines:
        lines += ["", "A/B (B = the working tree, A = the revision; ratio B/A with its 99% CI):", ""] + ab_lines
    diffs = [(label, r) for label, r in ordered if r.op_diff is not None]
    if diffs:
        from pytest_gpuperf.verdict.opdiff import table as op_table, why_lines

        lines += ["", "Why it moved, op by op (profiles of both sides: per call, B - A, Hodges-Lehmann shift and 99% CI):"]
        for label, r in diffs:
            why, *traces = why_lines(r.op_diff)
            lines += ["", f"`{label}`: {why}", *[x for t in traces for x in ("", t)], "", op_table(r.op_diff)]
    return lines


def markdown(
    items: Sequence[tuple[str, BenchResult]],
    *,
    devices: Sequence[str],
    strict: bool = False,
    warnings: Sequence[str] = (),
    mode: str = "stored",
) -> str:
    """A Markdown summary for a CI step summary or a PR comment.

    ``mode`` names what the baseline column holds, in its header and the legend: ``"stored"`` (the
    history median of single-process runs), ``"replicates"`` (the default pipeline: geometric
    mean of process medians, or REF's median where an A/B confirmation decided) or ``"ab"``
    (``--gpuperf-ab``: REF's median). Raises ``ValueError`` for another mode.

    A header line with the device(s) and the verdict counts, then one table: regressions first,
    then inconclusive, improvements and the rest; each row with the baseline (history median) and
    median (:func:`_centre_ms`), the verdict's ratio with its 99% CI, verdict, peak memory
    and bottleneck; a legend line under it. Plain-text markers (``[REGRESSED]``...), no emoji.
    """
    if mode not in _MARKDOWN_MODES:
        raise ValueError(f"mode={mode!r}: expected one of {', '.join(_MARKDOWN_MODES)}")
    column, ratio_name, legend = _MARKDOWN_MODES[mode]

    def verdict(r: BenchResult) -> str | None:
        return r.comparison.verdict.value if r.comparison is not None else None

    counts: dict[str, int] = defaultdict(int)
    for _, r in items:
        counts[verdict(r) or "smoke"] += 1
    failing = sum(_failing(r, strict) for _, r in items)
    head = ", ".join(f"{n} {k}" for k, n in sorted(counts.items(), key=lambda kv: _ORDER.get(kv[0], 9)))
    lines = [
        "## pytest-gpuperf results",
        "",
        f"**{'FAILED' if failing else 'PASSED'}**: {len(items)} benchmark(s) on {', '.join(devices) or '-'}: "
        f"{head}; {failing} failing.",
        "",
        f"| | benchmark | {column} | median | {ratio_name} (99% CI) "
        "| verdict | peak memory | ops/kernels | syncs | FLOP/s | B/s | bottleneck |",
        "| --- | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    ordered = sorted(items, key=lambda it: (not _failing(it[1], strict), _ORDER.get(verdict(it[1]), 5), it[0]))
    for label, r in ordered:
        c = r.comparison
        mark = "[FAIL]" if _failing(r, strict) else _MARK.get(verdict(r) or "", "")
        name = label.replace("|", "\\|")
        lines.append(
            f"| {mark} | `{name}` | {format_ms(c.baseline_median_ms) if c and c.baseline_median_ms else '-'} | "
            f"{format_ms(_centre_ms(r))} | {median_ratio_text(c, r)}{_normalized_mark(c)} | "
            f"{_verdict_text(r, False)} | {_memory_text(r)} | {ops_text(r)} | {syncs_text(r)} | "
            f"{_rate_text(r.rates(), 'flops_per_s', 'FLOP/s')} | {_rate_text(r.rates(), 'bytes_per_s', 'B/s')} | "
            f"{_bottleneck_text(r)} |"
        )
    lines += _footnotes(ordered) + _ab_and_why_markdown(ordered)
    lines += ["", legend + " ops/kernels and syncs are exact counts per call (the count gate); FLOP/s and B/s are "
              "the counted FLOPs and minimum-traffic bytes per call at the median time."]
    if warnings:
        lines += ["", "Warnings:", ""] + [f"- {w}" for w in warnings]
    return "\n".join(lines) + "\n"
