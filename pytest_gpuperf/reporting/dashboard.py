"""The performance history as a static web site (``gpuperf dashboard``; issue 34).

:func:`write_site` takes what the history store returns — the runs
(:meth:`~pytest_gpuperf.storage.history.HistoryStore.runs`) and the result rows
(:meth:`~pytest_gpuperf.storage.history.HistoryStore.series`) — and the change points found in them
(:class:`~pytest_gpuperf.verdict.changepoints.ChangePoint`), and writes into a folder:

* ``index.html``: a row per benchmark, device key and branch: runs, the latest median, the trend
  (the median of the last :data:`TREND_RUNS` runs' medians against the median of the
  :data:`TREND_RUNS` before them, and a sparkline of the last :data:`SPARK_RUNS` medians), the last
  change point and the latest verdict; names wrap at their path separators (``/``, ``::``, ``[``),
  and the table fits a 1280-pixel window;
* ``bench/<name>.html``: per benchmark and device key, the median over the runs (each run's
  ``estimate_ms``, the value its verdict decided on and the terminal showed; x: run order,
  labelled by commit) with, for a run measured in one process, its 95% confidence interval as a
  band, and each worker process's median as points (hover: commit, subject, date, machine,
  branch, verdict), each change point a dashed line labelled with its commit range, change and
  p-value, and below a table of the change points with the ``gpuperf bisect`` command for each;
  peak memory over the runs and each count per call (ops, syncs, FLOPs, bytes...) in a small plot
  of its own, when recorded, a count that changed between runs highlighted with the change
  (:func:`count_steps`); the latest 30 runs;
* ``regressions.html``: the change points that made a benchmark slower and the runs whose
  verdict was ``regressed``, newest first;
* ``assets/``: Plotly's JavaScript (``plotly.min.js``, written once and shared by every page:
  nothing is loaded from the network, so the site works from a CI artifact, a file:// URL or
  GitHub Pages), the site's own ``dashboard.js`` and ``dashboard.css``.

Filters by device key and branch run in the page (selects that hide table rows and redraw the
plots; the choice is kept in the URL's query, ``?branch=main``). Plots are drawn by Plotly
(plotly.js, the ``dashboard`` extra: ``pip install "pytest-gpuperf[dashboard]"``); each page carries
its data as JSON. Every name is HTML-escaped (benchmark ids hold ``[``, quotes, ``<``).
"""

from __future__ import annotations

import hashlib
import html
import json
import math
import re
import shlex
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence
from urllib.parse import quote

#: Message of :class:`DashboardError` when plotly is not installed.
INSTALL_HINT = 'gpuperf dashboard needs plotly: pip install "pytest-gpuperf[dashboard]"'
#: How many characters of a commit's sha the pages show.
SHORT = 9
#: What a ratio's cell adds for the clock its verdict was decided on (the wall clock: nothing).
_CLOCK_SUFFIX = {"cpu": " on CPU time", "ref": " relative to the reference probe"}
#: The index's trend: the median of the last this many runs' medians against the median of as
#: many before them (fewer when the series is shorter than twice this: half of it each).
TREND_RUNS = 5
#: The index's sparkline: the last so many medians.
SPARK_RUNS = 40
#: The regressions page lists at most this many regressed runs (the newest).
MAX_REGRESSED_RUNS = 1000
ALL = "*"
ASSETS = ("dashboard.js", "dashboard.css")


class DashboardError(RuntimeError):
    """The site cannot be written: plotly is missing (the message says how to install it) or the
    output folder cannot be written (the message names it)."""


@dataclass(frozen=True)
class Site:
    """What :func:`write_site` wrote: into the folder ``out``, ``pages`` (the HTML files) and
    ``largest_page_bytes`` (the size of the largest one, bytes; the shared ``assets/plotly.min.js``
    is not a page)."""

    out: Path
    pages: tuple[Path, ...]
    largest_page_bytes: int


def plotly_js() -> str:
    """Plotly's JavaScript bundle (``plotly.offline.get_plotlyjs()``, minified, about 4.8 MB for plotly 7.1).
    Raises :class:`DashboardError` with :data:`INSTALL_HINT` when plotly is not installed."""
    try:
        from plotly.offline import get_plotlyjs
    except ImportError:
        raise DashboardError(INSTALL_HINT) from None
    return get_plotlyjs()


def node_id(benchmark: str) -> str:
    """The pytest node id that runs ``benchmark`` (a stored name, ``module::test_id``, where a
    measurement named in the test adds ``::name``): the module, then the path's class segments
    (capitalised, as pytest's ``Test*`` classes) and the test function; a bracketed parameter id is
    kept whole even when it holds ``::``."""
    parts, depth, cur = [], 0, ""
    i = 0
    while i < len(benchmark):  # split on "::" outside brackets
        ch = benchmark[i]
        depth += (ch == "[") - (ch == "]") if ch in "[]" else 0
        if depth == 0 and benchmark.startswith("::", i):
            parts.append(cur)
            cur, i = "", i + 2
            continue
        cur, i = cur + ch, i + 1
    parts.append(cur)
    keep = parts[:1]
    for seg in parts[1:]:
        keep.append(seg)
        if not seg[:1].isupper():  # the function: a named measurement after it is not a node
            break
    return "::".join(keep)


def bisect_command(change: Any) -> str | None:
    """``gpuperf bisect BEFORE AFTER -- NODE_ID`` for a :class:`~pytest_gpuperf.verdict.changepoints.ChangePoint`
    (short shas; the node id shell-quoted: it may hold ``[`` or spaces), or None when a side has
    no commit."""
    if not change.before_commit or not change.after_commit:
        return None
    return (f"gpuperf bisect {change.before_commit[:SHORT]} {change.after_commit[:SHORT]} -- "
            f"{shlex.quote(node_id(change.benchmark))}")


def count_steps(values: Sequence[Any], tolerance: float = 0.0) -> list[dict[str, Any]]:
    """Where a count per call changed between runs: ``[{"pos", "from", "to"}, ...]``, ``pos`` the
    index in ``values`` (one count per run, oldest first; None where a run did not record it) of
    the first run with the new value, ``from`` the previous recorded value. Counts are exact
    (the count check's default tolerance is 0), so any change is one the check would report;
    instructions per call (``tolerance``: the instruction gate's) change only beyond it. The
    stored rows hold the counts, not the count check's outcome: a run whose count differed from
    its baseline but not from the run before is not marked."""
    out: list[dict[str, Any]] = []
    last = None
    for i, v in enumerate(values):
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
            continue
        if last is not None and abs(v - last) > tolerance * abs(last):
            out.append({"pos": i, "from": last, "to": v})
            last = v
        elif last is None:
            last = v
    return out


def wrap_name(name: str) -> str:
    """``name`` HTML-escaped, with a ``<wbr>`` (a place the line may break) after each ``/`` and
    ``::`` and before each ``[``: a long benchmark id wraps at its path separators, not mid-word."""
    return re.sub(r"(/|::)|(?=\[)", lambda m: (m.group(1) or "") + "<wbr>", _e(name)) if name else ""


def commit_range(change: Any) -> str:
    """``abc123456..def789012``: a change point's commits (short; ``?`` where a run has none)."""
    return f"{(change.before_commit or '?')[:SHORT]}..{(change.after_commit or '?')[:SHORT]}"


# ----------------------------------------------------------------------------- small helpers

def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _num(x: Any, digits: int = 6) -> float | None:
    """A float rounded to ``digits`` significant digits (smaller pages); None for None/NaN/inf."""
    if x is None:
        return None
    x = float(x)
    return float(f"{x:.{digits}g}") if math.isfinite(x) else None


def _json_script(element_id: str, obj: Any) -> str:
    """``obj`` as JSON in a ``<script type="application/json">``: ``<``, ``>``, ``&`` escaped so no
    name can close the element."""
    text = json.dumps(obj, separators=(",", ":"), allow_nan=False)
    for ch, sub in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(ch, sub)
    return f'<script type="application/json" id="{element_id}">{text}</script>'


def _ms(x: float | None) -> str:
    from pytest_gpuperf.core.units import format_ms

    return format_ms(x)


def _label(value: str | None) -> str:
    return "(none)" if value is None or value == "" else value


def page_name(benchmark: str, device_key: str | None) -> str:
    """The file name (``bench/`` relative) of a benchmark's page on one device key: ASCII, safe on
    every file system, distinct for distinct ``(benchmark, device key)`` (a digest of both)."""
    stem = re.sub(r"[^A-Za-z0-9]+", "_", benchmark).strip("_")[:80].rstrip("_") or "benchmark"
    digest = hashlib.sha1(f"{benchmark}\0{device_key}".encode("utf-8", "surrogatepass")).hexdigest()[:10]
    return f"{stem}-{digest}.html"


def _page(title: str, body: str, *, depth: int, nav: str = "") -> str:
    up = "../" * depth
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<title>{_e(title)}</title><link rel="icon" href="data:,">'
            f'<link rel="stylesheet" href="{up}assets/dashboard.css"></head><body>'
            f'<header><a class="brand" href="{up}index.html">pytest-gpuperf</a>'
            f'<a href="{up}index.html">Benchmarks</a><a href="{up}regressions.html">Regressions</a>{nav}</header>'
            f'<main>{body}</main>'
            f'<script src="{up}assets/dashboard.js"></script></body></html>\n')


def _select(name: str, label: str, values: Iterable[str | None], selected: str = ALL) -> str:
    opts = [f'<option value="{ALL}">all</option>']
    for v in sorted({v or "" for v in values}):
        sel = " selected" if v == selected else ""
        opts.append(f'<option value="{_e(v)}"{sel}>{_e(_label(v))}</option>')
    return f'<label>{label}<select data-filter="{name}">{"".join(opts)}</select></label>'


def _filters(devices: Iterable[str | None], branches: Iterable[str | None], table: str, *, text: bool = False) -> str:
    parts = [_select("device", "Device key", devices), _select("branch", "Branch", branches)]
    if text:
        parts.append('<label>Benchmark<input data-filter="text" type="search" placeholder="name contains"></label>')
    parts.append(f'<span class="muted" data-count-for="{table}"></span>')
    return f'<div class="filters">{"".join(parts)}</div>'


def _spark(values: Sequence[float]) -> str:
    """An inline SVG sparkline of ``values`` (120 × 24 px)."""
    vals = [v for v in values if v is not None]
    if len(vals) < 2:
        return ""
    lo, hi = min(vals), max(vals)
    span = (hi - lo) or 1.0
    pts = " ".join(f"{i * 118 / (len(vals) - 1) + 1:.1f},{23 - (v - lo) / span * 22:.1f}" for i, v in enumerate(vals))
    return (f'<svg class="spark" width="120" height="24" viewBox="0 0 120 24" aria-hidden="true">'
            f'<polyline fill="none" stroke="#1f77b4" stroke-width="1.5" points="{pts}"/></svg>')


def _ratio(ratio: float | None) -> str:
    from pytest_gpuperf.core.units import format_ratio

    return format_ratio(ratio)


def _pct(change: Any) -> str:
    cls = "slower" if change.slower else "faster"
    return f'<span class="{cls}">{change.change_pct:+.1f}%</span>'


# ----------------------------------------------------------------------------- the model

@dataclass
class _Series:
    """One benchmark on one device key: its rows (run order) and change points."""

    benchmark: str
    device_key: str | None
    rows: list[Mapping[str, Any]]
    changes: list[Any]
    _branches: list[str] | None = None

    @property
    def file(self) -> str:
        return page_name(self.benchmark, self.device_key)

    def branches(self) -> list[str]:
        if self._branches is None:
            self._branches = sorted({r.get("branch") or "" for r in self.rows})
        return self._branches


def _series(rows: Sequence[Mapping[str, Any]], changes: Sequence[Any]) -> list[_Series]:
    groups: dict[tuple[str, str | None], _Series] = {}
    for r in rows:
        key = (r["benchmark"], r.get("device_key"))
        if key not in groups:
            groups[key] = _Series(key[0], key[1], [], [])
        groups[key].rows.append(r)
    for c in changes:
        s = groups.get((c.benchmark, c.device_key))
        if s is not None:
            s.changes.append(c)
    return sorted(groups.values(), key=lambda s: (s.benchmark, s.device_key or ""))


class _Runs:
    """The runs by id: their order (oldest first) and branch."""

    def __init__(self, runs: Sequence[Mapping[str, Any]], rows: Sequence[Mapping[str, Any]]) -> None:
        self.order: dict[str, int] = {}
        self.info: dict[str, Mapping[str, Any]] = {}
        for source in (runs, rows):  # a row's run missing from ``runs`` (a partial read) goes last
            for r in source:
                if r["run_id"] not in self.info:
                    self.order[r["run_id"]] = len(self.order)
                    self.info[r["run_id"]] = r

    def branch(self, run_id: str) -> str:
        return (self.info.get(run_id) or {}).get("branch") or ""

    def when(self, run_id: str) -> str:
        return str((self.info.get(run_id) or {}).get("created_utc") or "")


# ----------------------------------------------------------------------------- benchmark pages

def _col(values: Iterable[Any]) -> list[float | None]:
    """Numbers rounded to 6 significant digits (smaller pages); None for None, NaN, infinities and
    anything not a number."""
    out = [float("%.6g" % v) if isinstance(v, (int, float)) else None for v in values]
    return [v if v is None or math.isfinite(v) else None for v in out]


def _median(row: Mapping[str, Any]) -> float:
    """A stored row's median as its run's verdict and terminal gave it (``estimate_ms``,
    :meth:`pytest_gpuperf.storage.history.HistoryStore.series` fills it for older rows too; a row
    without it: its ``median_ms``)."""
    value = row.get("estimate_ms")
    return float(value) if value is not None else float(row["median_ms"])


def _series_data(s: _Series, subjects: Mapping[str, str]) -> dict[str, Any]:
    """A benchmark page's JSON: the runs column-wise, counts by name, the commits' subjects and
    the change points at their position (index of the first run after) in the series."""
    rows = s.rows
    cols: dict[str, list[Any]] = {k: [] for k in ("commit", "date", "machine", "branch", "median", "lo", "hi",
                                                  "verdict", "clock", "pm", "mem")}
    counts: dict[str, list[Any]] = {}
    for i, r in enumerate(rows):
        for key, field in (("commit", "commit"), ("date", "created_utc"), ("machine", "machine"),
                           ("lo", "ci_low_ms"), ("hi", "ci_high_ms"), ("verdict", "verdict"), ("clock", "clock")):
            cols[key].append(r.get(field))
        cols["median"].append(_median(r))
        if len(r.get("process_medians_ms") or ()) >= 2:  # the stored CI is the pooled median's, not this median's
            cols["lo"][-1] = cols["hi"][-1] = None
        cols["branch"].append(r.get("branch") or "")
        cols["pm"].append(_col(r["process_medians_ms"]) if r.get("process_medians_ms") else None)
        mem = r.get("peak_memory_bytes")
        cols["mem"].append(None if mem is None else mem / 2 ** 20)
        for name, value in _counts_of(r).items():
            counts.setdefault(name, [None] * len(rows))[i] = value
    for key in ("median", "lo", "hi", "mem"):
        cols[key] = _col(cols[key])
    if all(v is None for v in cols["mem"]):
        del cols["mem"]
    where = {r["run_id"]: i for i, r in enumerate(rows)}
    changes = [{"pos": where.get(c.after_run), "range": commit_range(c), "pct": _num(c.change_pct, 4),
                "p": _num(c.pvalue, 2), "slower": c.slower, "bisect": bisect_command(c)} for c in s.changes]
    return {"benchmark": s.benchmark, "device": s.device_key, "runs": cols,
            "counts": {n: _col(v) for n, v in sorted(counts.items())},
            "countSteps": {n: count_steps(v, _tolerance(n)) for n, v in sorted(counts.items())},
            "subjects": {c: subjects[c] for c in set(cols["commit"]) if c in subjects}, "changes": changes}


def _changes_table(changes: Sequence[Any], runs: _Runs, table: str, *, link: Mapping[Any, str] | None = None) -> str:
    """A table of change points, newest first: when, (benchmark), device key, branch, commit range,
    median before -> after, change, p-value, bisect command."""
    head = "<th>When</th>" + ("<th>Benchmark</th>" if link is not None else "") + (
        "<th>Device key</th><th>Branch</th><th>Commits</th><th>Median before → after</th>"
        '<th data-sort="num">Change</th><th>p-value</th><th>Bisect</th>')
    body = []
    for c in sorted(changes, key=lambda c: runs.order.get(c.after_run, -1), reverse=True):
        branch = runs.branch(c.after_run)
        name = ""
        if link is not None:
            name = f'<td class="name"><a href="{_e(link[(c.benchmark, c.device_key)])}" data-keep-branch>{wrap_name(c.benchmark)}</a></td>'
        cmd = bisect_command(c)
        body.append(
            f'<tr data-device="{_e(c.device_key or "")}" data-branch="{_e(branch)}" data-name="{_e(c.benchmark.lower())}">'
            f'<td>{_e(runs.when(c.after_run)[:19].replace("T", " "))}</td>{name}<td>{_e(_label(c.device_key))}</td>'
            f'<td>{_e(_label(branch))}</td><td class="mono">{_e(commit_range(c))}</td>'
            f'<td class="num">{_e(_ms(c.median_before_ms))} → {_e(_ms(c.median_after_ms))}</td>'
            f'<td class="num" data-v="{c.change_pct:.6g}">{_pct(c)}</td><td class="num">{c.pvalue:.2g}</td>'
            f'<td>{f"<code class=cmd>{_e(cmd)}</code>" if cmd else "<span class=muted>no commits recorded</span>"}</td></tr>')
    return (f'<table id="{table}" data-filtered><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>')


#: The name of the host's instructions per call among a page's counts (``--gpuperf-instructions``).
INSTRUCTIONS = "instructions"


def _counts_of(row: Mapping[str, Any]) -> dict[str, Any]:
    """A stored row's counts per call, with its instructions per call when counted (issue 48)."""
    out = dict(row.get("counts") or {})
    if row.get(INSTRUCTIONS) is not None:
        out[INSTRUCTIONS] = row[INSTRUCTIONS]
    return out


def _tolerance(name: str) -> float:
    """How much a count may move between runs before the page marks it: 0 (exact), the instruction gate's for instructions."""
    if name != INSTRUCTIONS:
        return 0.0
    from pytest_gpuperf.verdict.instructions import DEFAULT_TOLERANCE

    return DEFAULT_TOLERANCE


def _counts_section(rows: Sequence[Mapping[str, Any]]) -> str:
    """The counts' plots: one small plot per count (``#gp-count-<k>``, k in name order), each
    titled with its name; a count that changed between runs is highlighted (class ``changed``,
    ``up`` for a rise: what the count check fails on) and says how it changed and at which run."""
    names = sorted({n for r in rows for n in _counts_of(r)})
    cells = []
    for k, name in enumerate(names):
        values = [_counts_of(r).get(name) for r in rows]
        steps = count_steps(values, _tolerance(name))
        note, cls = "", "count"
        if steps:
            last = steps[-1]
            commit = (rows[last["pos"]].get("commit") or "")[:SHORT]
            cls += " changed" + (" up" if any(st["to"] > st["from"] for st in steps) else "")
            note = (f' <span class="note">changed {len(steps)}×, last {last["from"]:.6g} → {last["to"]:.6g}'
                    f'{" at " + _e(commit) if commit else ""}</span>')
        cells.append(f'<div class="{cls}" data-metric="{_e(name)}"><h3>{_e(name)} per call{note}</h3>'
                     f'<div id="gp-count-{k}" class="plot small"></div></div>')
    return f'<div id="gp-counts" class="counts">{"".join(cells)}</div>'


def _bench_page(s: _Series, runs: _Runs, subjects: Mapping[str, str], others: Sequence[_Series]) -> str:
    has_mem = any(r.get("peak_memory_bytes") is not None for r in s.rows)
    has_counts = any(_counts_of(r) for r in s.rows)
    also = "".join(f' <a href="{_e(o.file)}" data-keep-branch>{_e(_label(o.device_key))}</a>' for o in others)
    parts = [
        f"<h1>{_e(s.benchmark)}</h1>",
        f'<p class="meta">Device key <b>{_e(_label(s.device_key))}</b> · {len(s.rows)} run(s) · pytest node id '
        f'<code>{_e(node_id(s.benchmark))}</code>{" · also measured on:" + also if also else ""}</p>',
        f'<div class="filters">{_select("branch", "Branch", s.branches())}</div>',
        "<h2>Time per call</h2>",
        '<p class="meta">Median of each run (line), its 95% confidence interval (band) and each worker process\'s '
        "median (points); dashed lines: change points, labelled with the last commit before and the first after.</p>",
        '<div id="gp-time" class="plot"></div>',
    ]
    parts.append("<h2>Change points</h2>")
    parts.append(_changes_table(s.changes, runs, "gp-changes") if s.changes
                 else '<p class="muted">No change point in this series.</p>')
    if has_mem:
        parts += ["<h2>Peak memory</h2>", '<div id="gp-memory" class="plot"></div>']
    if has_counts:
        parts += ["<h2>Counts per call</h2>", _counts_section(s.rows)]
    parts.append('<h2>Latest runs</h2><table id="gp-runs"><thead><tr><th>When</th><th>Commit</th><th>Subject</th>'
                 "<th>Branch</th><th>Machine</th><th>Median (ms)</th><th>95% CI (ms)</th><th>Verdict</th></tr></thead>"
                 "<tbody></tbody></table>")
    parts.append(_json_script("gp-data", _series_data(s, subjects)))
    parts.append('<script src="../assets/plotly.min.js"></script>')
    return _page(f"{s.benchmark} · {_label(s.device_key)}", "".join(parts), depth=1)


# ----------------------------------------------------------------------------- index and regressions

def trend(medians: Sequence[float], k: int = TREND_RUNS) -> float | None:
    """The index's trend, in %: the median of the last ``k`` values of ``medians`` (ms, oldest
    first) against the median of the ``k`` before them (a series shorter than ``2 k``: half of it
    each, the odd one out left out); None for fewer than 2 values or a reference <= 0. Medians of
    several runs, so one odd run moves it little."""
    k = min(k, len(medians) // 2)
    if k < 1:
        return None
    ref = statistics.median(medians[-2 * k:-k])
    return (statistics.median(medians[-k:]) / ref - 1) * 100 if ref > 0 else None


def _index_row(s: _Series, branch: str, rows: Sequence[Mapping[str, Any]], runs: _Runs) -> str:
    medians = [_median(r) for r in rows]
    last = rows[-1]
    change_pct = trend(medians)
    mine = [c for c in s.changes if runs.branch(c.after_run) == branch]
    change = max(mine, key=lambda c: runs.order.get(c.after_run, -1), default=None)
    href = f"bench/{s.file}" + (f"?branch={_e(quote(branch, safe=''))}" if branch else "")
    verdict = last.get("verdict") or "-"
    cp_range = _e(commit_range(change)).replace("..", "..<wbr>") if change is not None else ""
    return (f'<tr data-device="{_e(s.device_key or "")}" data-branch="{_e(branch)}" data-name="{_e(s.benchmark.lower())}">'
            f'<td class="name"><a href="{href}">{wrap_name(s.benchmark)}</a></td>'
            f'<td class="key">{_e(_label(s.device_key)).replace("-", "-<wbr>")}</td>'
            f'<td class="key">{wrap_name(_label(branch))}</td><td class="num">{len(rows)}</td>'
            f'<td class="num" data-v="{_median(last):.6g}">{_e(_ms(_median(last)))}</td>'
            f'<td class="num" data-v="{change_pct if change_pct is not None else 0:.4g}">'
            f'{"-" if change_pct is None else f"{change_pct:+.1f}%"}</td><td>{_spark(medians[-SPARK_RUNS:])}</td>'
            f'<td data-v="{runs.order.get(change.after_run, -1) if change else -1}">'
            f'{"-" if change is None else f"<span class=mono>{cp_range}</span> {_pct(change)}"}</td>'
            f'<td class="verdict-{_e(verdict)}">{_e(verdict)}</td>'
            f'<td class="mono">{_e((last.get("commit") or "-")[:SHORT])}</td></tr>')


def _index_page(series: Sequence[_Series], runs: _Runs, n_runs: int) -> str:
    if not series:
        body = ('<h1>Performance history</h1><div class="empty"><p><b>No runs in the history store yet.</b></p>'
                "<p>Runs are recorded by <code>pytest --gpuperf</code> (or imported with <code>gpuperf history "
                "import</code>); run <code>gpuperf dashboard</code> again afterwards.</p></div>")
        return _page("pytest-gpuperf: performance history", body, depth=0)
    trs = []
    for s in series:
        by_branch: dict[str, list[Mapping[str, Any]]] = {}
        for r in s.rows:
            by_branch.setdefault(r.get("branch") or "", []).append(r)
        trs += [_index_row(s, b, rows, runs) for b, rows in sorted(by_branch.items())]
    devices = {s.device_key for s in series}
    branches = {b for s in series for b in s.branches()}
    head = ('<th data-sort="text">Benchmark</th><th data-sort="text">Device key</th><th data-sort="text">Branch</th>'
            '<th data-sort="num">Runs</th><th data-sort="num">Latest median</th>'
            f'<th data-sort="num" title="the median of the last {TREND_RUNS} runs against the median of the '
            f'{TREND_RUNS} before them">'
            f'Trend</th><th>Last {SPARK_RUNS} runs</th><th data-sort="num">Last change point</th>'
            '<th data-sort="text">Latest verdict</th><th>Latest commit</th>')
    body = (f"<h1>Performance history</h1><p class=\"meta\">{n_runs} run(s) · {len(series)} benchmark series · "
            f"device keys: {_e(', '.join(_label(d) for d in sorted(devices, key=lambda d: d or '')))}</p>"
            + _filters(devices, branches, "gp-index", text=True)
            + f'<table id="gp-index" data-filtered><thead><tr>{head}</tr></thead><tbody>{"".join(trs)}</tbody></table>')
    return _page("pytest-gpuperf: performance history", body, depth=0)


def _regressed_runs_table(series: Sequence[_Series], runs: _Runs) -> str:
    hits = [(runs.order.get(r["run_id"], -1), s, r) for s in series for r in s.rows if r.get("verdict") == "regressed"]
    hits.sort(key=lambda h: h[0], reverse=True)
    more = len(hits) - MAX_REGRESSED_RUNS
    trs = [f'<tr data-device="{_e(s.device_key or "")}" data-branch="{_e(r.get("branch") or "")}" '
           f'data-name="{_e(s.benchmark.lower())}"><td>{_e(str(r.get("created_utc") or "")[:19].replace("T", " "))}</td>'
           f'<td class="name"><a href="bench/{_e(s.file)}" data-keep-branch>{wrap_name(s.benchmark)}</a></td>'
           f'<td>{_e(_label(s.device_key))}</td><td>{_e(_label(r.get("branch")))}</td>'
           f'<td class="mono">{_e((r.get("commit") or "-")[:SHORT])}</td><td>{_e(r.get("machine") or "-")}</td>'
           f'<td class="num">{_e(_ms(_median(r)))}</td>'
           f'<td class="num">{_ratio(r.get("ratio"))}{_CLOCK_SUFFIX.get(r.get("clock") or "", "")}</td></tr>'
           for _, s, r in hits[:MAX_REGRESSED_RUNS]]
    if not trs:
        return '<p class="muted">No run was judged regressed.</p>'
    note = f'<p class="muted">The newest {MAX_REGRESSED_RUNS} shown; {more} older not shown.</p>' if more > 0 else ""
    return (note + '<table id="gp-regressed" data-filtered><thead><tr><th>When</th><th>Benchmark</th><th>Device key</th>'
            "<th>Branch</th><th>Commit</th><th>Machine</th><th>Median</th><th>Ratio to baseline</th></tr></thead>"
            f'<tbody>{"".join(trs)}</tbody></table>')


def _regressions_page(series: Sequence[_Series], runs: _Runs) -> str:
    slower = [c for s in series for c in s.changes if c.slower]
    links = {(s.benchmark, s.device_key): f"bench/{s.file}" for s in series}
    devices = {s.device_key for s in series}
    branches = {b for s in series for b in s.branches()}
    body = ["<h1>Regressions</h1>", _filters(devices, branches, "gp-slower"),
            "<h2>Change points that made a benchmark slower</h2>",
            '<p class="meta">Newest first. Each names the last commit before and the first after the change; the '
            "bisect command finds the commit between them that did it.</p>",
            _changes_table(slower, runs, "gp-slower", link=links) if slower
            else '<p class="muted">No change point made a benchmark slower.</p>',
            "<h2>Runs judged regressed</h2>",
            '<p class="meta">Runs whose verdict against their baseline was <b>regressed</b>, newest first.</p>',
            _regressed_runs_table(series, runs)]
    return _page("pytest-gpuperf: regressions", "".join(body), depth=0)


# ----------------------------------------------------------------------------- writing

def _write(path: Path, text: str, written: list[Path]) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise DashboardError(f"gpuperf dashboard: cannot write {path}: {exc}") from None
    written.append(path)


def _assets(out: Path, js: str) -> None:
    from importlib.resources import files

    src = files("pytest_gpuperf.reporting").joinpath("dashboard_assets")
    try:
        (out / "assets").mkdir(parents=True, exist_ok=True)
        (out / "bench").mkdir(exist_ok=True)
        target = out / "assets" / "plotly.min.js"
        if not target.is_file() or target.stat().st_size != len(js.encode("utf-8")):
            target.write_text(js, encoding="utf-8")
        for name in ASSETS:
            (out / "assets" / name).write_text(src.joinpath(name).read_text(encoding="utf-8"), encoding="utf-8")
    except OSError as exc:
        raise DashboardError(f"gpuperf dashboard: cannot write the site into {out}: {exc}") from None


def write_site(out: str | Path, runs: Sequence[Mapping[str, Any]], rows: Sequence[Mapping[str, Any]],
               changes: Sequence[Any] = (), *, subjects: Mapping[str, str] | None = None,
               js: str | None = None) -> Site:
    """Write the dashboard of ``runs`` (dicts as :meth:`HistoryStore.runs` returns, oldest first) and
    ``rows`` (dicts as :meth:`HistoryStore.series` returns, run order; times in ms, peak memory in
    bytes), with ``changes`` (:class:`~pytest_gpuperf.verdict.changepoints.ChangePoint`; each drawn
    on the series of its ``benchmark`` and ``device_key`` at the run ``after_run``), into the folder
    ``out`` (created; pages of benchmarks no longer in ``rows`` are removed from ``out/bench``).
    ``subjects``: commit -> subject line, for the hover (missing: no subject shown); ``js``: Plotly's
    bundle (default :func:`plotly_js`). Returns the :class:`Site`. Raises :class:`DashboardError`
    when plotly is missing or ``out`` cannot be written."""
    out = Path(out)
    js = plotly_js() if js is None else js
    _assets(out, js)
    table = _Runs(runs, rows)
    series = _series(rows, changes)
    subjects = subjects or {}
    written: list[Path] = []
    by_name: dict[str, list[_Series]] = {}
    for s in series:
        by_name.setdefault(s.benchmark, []).append(s)
    for s in series:
        others = [o for o in by_name[s.benchmark] if o is not s]
        _write(out / "bench" / s.file, _bench_page(s, table, subjects, others), written)
    keep = {p.name for p in written}
    for old in (out / "bench").glob("*.html"):
        if old.name not in keep:
            old.unlink(missing_ok=True)
    _write(out / "index.html", _index_page(series, table, len(runs)), written)
    _write(out / "regressions.html", _regressions_page(series, table), written)
    return Site(out, tuple(written), max(p.stat().st_size for p in written))
