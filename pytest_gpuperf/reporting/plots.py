"""PNG plots of benchmark results (``--gpuperf-plot DIR``; needs ``pytest-gpuperf[plot]``).

Two kinds of figure:

* :func:`plot_benchmark`: one benchmark, baseline vs current per-call times (ms) on a log time
  axis: histograms of the fraction of samples per log-spaced bin, a strip plot of every sample,
  each side's median and its distribution-free 95% CI (:func:`pytest_gpuperf.verdict.stats.median_ci`),
  and the ratio, its 99% bootstrap CI and the verdict in the title.
* :func:`plot_forest`: the whole suite, one row per benchmark: the current/baseline ratio
  (dimensionless, log axis) with its 99% CI, the line at 1 and the band of the effect floor.

matplotlib is imported lazily, inside the functions, and only through its object-oriented API
(:class:`matplotlib.figure.Figure` drawn by ``FigureCanvasAgg``): pyplot is never imported, so
plotting neither changes the global backend nor leaves figures open, and it works without a
display. Figures are written at 100 dpi; file names are ASCII (see :func:`safe_filename`).
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import textwrap
import unicodedata
from pathlib import Path
from typing import Any, Sequence

#: Message of the ImportError raised when matplotlib is missing.
INSTALL_HINT = "--gpuperf-plot needs matplotlib: pip install pytest-gpuperf[plot]"

#: Resolution of the written PNGs (dots per inch).
DPI = 100

#: Longest stem :func:`safe_filename` returns (characters, before any ``.png``).
MAX_STEM = 100

# Okabe-Ito colours (distinguishable with the common colour-vision deficiencies); every
# colour is paired with a line style or a marker shape and a word, so the plots also read in grey.
_BASELINE_COLOR = "#0072B2"  # blue
_CURRENT_COLOR = "#D55E00"  # vermillion

#: Verdict -> (colour, marker, legend text). The marker shapes alone tell the verdicts apart:
#: ``>`` slower (regressed), ``<`` faster (improved), ``D`` inconclusive, ``o`` unchanged.
VERDICT_STYLES: dict[str, tuple[str, str, str]] = {
    "regressed": ("#D55E00", ">", "> regressed (slower)"),
    "improved": ("#009E73", "<", "< improved (faster)"),
    "inconclusive": ("#E69F00", "D", "<> inconclusive (CI spans 1 and 1+T)"),
    "unchanged": ("#444444", "o", "o unchanged"),
}
_OTHER_STYLE = ("#000000", "x", "x other")

_WINDOWS_RESERVED = {"CON", "PRN", "AUX", "NUL", *(f"COM{i}" for i in range(1, 10)),
                     *(f"LPT{i}" for i in range(1, 10))}


# ----------------------------------------------------------------------------- helpers


def require_matplotlib() -> None:
    """Check that matplotlib and its Agg renderer can be imported.

    Raises ``ImportError`` with :data:`INSTALL_HINT` otherwise (the plugin calls this at
    start-up when ``--gpuperf-plot`` is given, so a missing extra fails before any benchmark runs).
    """
    try:
        import matplotlib  # noqa: F401
        import matplotlib.backends.backend_agg  # noqa: F401
        import matplotlib.figure  # noqa: F401
    except ImportError as exc:
        raise ImportError(INSTALL_HINT) from exc


def safe_filename(name: str) -> str:
    """A file-system-safe ASCII stem for a benchmark id (no extension added).

    ``"tests/perf/test_x.py::test_gemm[fp32]"`` -> ``"tests_perf_test_x.py__test_gemm_fp32-<8 hex>"``.
    Accents are stripped (``é`` -> ``e``); ``::`` becomes ``__``; every other run of characters
    outside ``[A-Za-z0-9._-]`` becomes one ``_``; leading and trailing ``._-`` are removed (no
    hidden files, no ``..``). Windows device names (``CON``, ``NUL``, ...) get a leading ``_``.
    Whenever the stem is not the name itself (any character replaced, or longer than
    :data:`MAX_STEM` characters and cut), it ends in ``-`` plus 8 hex digits of the SHA-1 of the
    full name, so distinct ids (``a::b``, ``a/b``, ``a b``) get distinct stems. Never empty.
    """
    ascii_name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode("ascii")
    parts = [re.sub(r"[^A-Za-z0-9._-]+", "_", p) for p in ascii_name.split("::")]
    stem = "__".join(parts).strip("._-")
    stem = re.sub(r"\.{2,}", ".", stem)
    if not stem:
        stem = "benchmark"
    if stem.split(".")[0].upper() in _WINDOWS_RESERVED:
        stem = "_" + stem
    if stem != name or len(stem) > MAX_STEM:  # lossy: the digest keeps distinct ids distinct
        digest = hashlib.sha1(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]
        stem = stem[: MAX_STEM - 9].rstrip("._-") + "-" + digest
    return stem


def _positive_samples(samples_ms: Sequence[float] | None, what: str) -> Any:
    import numpy as np

    if samples_ms is None:
        return np.empty(0)
    x = np.asarray(samples_ms, dtype=np.float64).ravel()
    if not np.all(np.isfinite(x)) or np.any(x <= 0):
        raise ValueError(f"{what} samples must be finite and positive (ms)")
    return x


def _log_ticks(ax: Any, lo: float, hi: float, suffix: str = "") -> None:
    """Readable ticks on a log x axis spanning [lo, hi] (labels as plain numbers + ``suffix``)."""
    from matplotlib import ticker

    fmt = ticker.FuncFormatter(lambda v, _pos: f"{v:.4g}{suffix}")
    if hi / lo < 20:  # less than ~1.3 decades: linear "nice" values read better than powers of 10
        values = [v for v in ticker.MaxNLocator(nbins=6).tick_values(lo, hi) if lo <= v <= hi and v > 0]
        if len(values) < 2:
            values = [lo, hi]
        ax.xaxis.set_major_locator(ticker.FixedLocator(values))
    else:
        ax.xaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(fmt)
    ax.xaxis.set_minor_locator(ticker.NullLocator())
    ax.xaxis.set_minor_formatter(ticker.NullFormatter())


def _new_figure(width_in: float, height_in: float) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width_in, height_in), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Any, path: str | os.PathLike[str]) -> str:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png", dpi=DPI)
    return str(out)


def _fmt_ratio(r: float | None) -> str:
    return "-" if r is None or not math.isfinite(r) else f"{r:.3f}x"


def _ratio_ok(r: Any) -> bool:
    return isinstance(r, (int, float)) and not isinstance(r, bool) and math.isfinite(r) and r > 0


def _ci_ok(ci: Any) -> bool:
    return (isinstance(ci, (list, tuple)) and len(ci) == 2 and all(_ratio_ok(v) for v in ci)
            and ci[0] <= ci[1])


def _wrap(text: str, width: int) -> str:
    return "\n".join(textwrap.wrap(text, width, break_long_words=True, break_on_hyphens=False)) or text


def _shorten(text: str, width: int) -> str:
    return text if len(text) <= width else "..." + text[-(width - 3):]


# ----------------------------------------------------------------------------- one benchmark


def _comparison_line(comparison: dict[str, Any] | None) -> str:
    if not comparison:
        return "no baseline comparison"
    from pytest_gpuperf.verdict.compare import RATIO_CONFIDENCE

    parts = []
    ratio = comparison.get("ratio")
    if _ratio_ok(ratio):
        text = f"ratio {_fmt_ratio(ratio)}"
        ci = comparison.get("ratio_ci")
        if _ci_ok(ci):
            text += f" ({RATIO_CONFIDENCE:.0%} CI {_fmt_ratio(ci[0])}-{_fmt_ratio(ci[1])})"
        parts.append(text)
    floor = comparison.get("floor")
    if floor is None:
        floor = comparison.get("threshold")
    if isinstance(floor, (int, float)) and math.isfinite(floor):
        parts.append(f"effect floor +{floor * 100:.1f}%")
    verdict = comparison.get("verdict") or "-"
    if comparison.get("confirmed") is True:
        verdict += " (confirmed)"
    elif comparison.get("confirmed") is False:
        verdict += " (not confirmed)"
    parts.append(f"verdict: {verdict}")
    return ", ".join(parts)


def _draw_side(ax_hist: Any, ax_strip: Any, row: int, side: tuple[str, Any, str, str], span: tuple[float, float],
               edges: Any, rng: Any) -> None:
    """One side (``(label, samples_ms, color, linestyle)``) of :func:`plot_benchmark`: its histogram,
    median and median CI in the top panel, its jittered samples and median bar in row ``row`` below."""
    import numpy as np

    from pytest_gpuperf.verdict.stats import median_ci

    label, x, color, style = side
    lo, hi = span
    med = float(np.median(x))
    ci = median_ci(x) if x.size >= 2 else None
    ci_text = f", 95% CI {ci[0]:.4g}-{ci[1]:.4g} ms" if ci else ", no 95% CI (n < 6)"
    weights = np.full(x.size, 1.0 / x.size)
    ax_hist.hist(np.clip(x, lo, hi), bins=edges, weights=weights, histtype="stepfilled",
                 color=color, alpha=0.18)
    ax_hist.hist(np.clip(x, lo, hi), bins=edges, weights=weights, histtype="step", color=color,
                 linestyle=style, linewidth=1.6, label=f"{label}: n={x.size}, median {med:.4g} ms{ci_text}")
    ax_hist.axvline(med, color=color, linestyle=style, linewidth=2.0)
    if ci:
        ax_hist.axvspan(ci[0], ci[1], color=color, alpha=0.22, linewidth=0)
    y = row + rng.uniform(-0.22, 0.22, x.size)
    ax_strip.scatter(x, y, s=7 if x.size > 200 else 16, color=color, alpha=0.35 if x.size > 200 else 0.6, linewidths=0,
                     marker="o" if label == "current" else "s")
    xerr = None if ci is None else [[med - ci[0]], [ci[1] - med]]
    ax_strip.errorbar([med], [row], xerr=xerr, fmt="|", markersize=22, markeredgewidth=2.5,
                      color="black", ecolor="black", elinewidth=3, capsize=5, zorder=3)


def _benchmark_axes(ax_hist: Any, ax_strip: Any, xlim: tuple[float, float], labels: list[str]) -> None:
    """:func:`plot_benchmark`'s axes: the log time axis over ``xlim`` (ms), labels, legend and grids."""
    xlo, xhi = xlim
    ax_hist.set_xscale("log")
    ax_hist.set_xlim(xlo, xhi)
    ax_hist.set_ylabel("fraction of samples per bin")
    ax_hist.legend(loc="upper right", fontsize=8, frameon=True)
    ax_hist.grid(True, axis="y", alpha=0.3)
    _log_ticks(ax_strip, xlo, xhi)
    ax_hist.tick_params(labelbottom=False)
    ax_strip.set_yticks(range(len(labels)), labels)
    ax_strip.set_ylim(-0.6, len(labels) - 0.4)
    ax_strip.set_xlabel("time per call (ms, log scale); bar: median and its 95% CI")
    ax_strip.grid(True, axis="x", alpha=0.3)


def plot_benchmark(
    name: str,
    current_ms: Sequence[float],
    baseline_ms: Sequence[float],
    comparison: dict[str, Any] | None,
    path: str | os.PathLike[str],
) -> str:
    """Write one PNG comparing a benchmark's baseline and current per-call times; return its path.

    ``current_ms`` / ``baseline_ms``: per-call times in milliseconds (the baseline may be empty:
    only the current run is drawn). ``comparison``: a dict as
    :func:`pytest_gpuperf.reporting.report.comparison_dict` returns (keys used: ``ratio``, ``ratio_ci``,
    ``verdict``, ``floor``/``threshold``, ``confirmed``, ``baseline_median_ms``) or None.

    Top panel: per side, the fraction of samples in each log-spaced bin (baseline dashed, current
    solid), its median as a vertical line and the 95% CI of that median shaded (no shading when
    n < 6, where no order-statistic interval reaches 95%). When the comparison's baseline level
    (``baseline_median_ms``, re-centred on the stored history) differs from the newest baseline
    run's median it is drawn as a dotted line. Bottom panel: every sample as a jittered point per
    side, with the median and its 95% CI as an error bar. The time axis is logarithmic, in ms.
    The title gives ``name``, the ratio (current/baseline) with its 99% CI, the effect floor and
    the verdict. Parent folders of ``path`` are created. Raises ``ValueError`` when
    ``current_ms`` is empty or a sample is not finite and positive.
    """
    import numpy as np

    cur = _positive_samples(current_ms, "current")
    base = _positive_samples(baseline_ms, "baseline")
    if cur.size == 0:
        raise ValueError("current samples must not be empty")
    sides = [(label, x, color, style) for label, x, color, style in (
        ("baseline", base, _BASELINE_COLOR, "--"),
        ("current", cur, _CURRENT_COLOR, "-"),
    ) if x.size]

    all_x = np.concatenate([x for _, x, _, _ in sides])
    lo, hi = float(all_x.min()), float(all_x.max())
    base_level = (comparison or {}).get("baseline_median_ms")
    if _ratio_ok(base_level):
        lo, hi = min(lo, base_level), max(hi, base_level)
    if hi / lo < 1.02:  # (nearly) constant samples: widen to +-1% so bins and ticks exist
        mid = math.sqrt(lo * hi)
        lo, hi = mid / 1.01, mid * 1.01
    pad = (hi / lo) ** 0.05
    xlo, xhi = lo / pad, hi * pad
    n_bins = int(min(60, max(8, math.ceil(2 * max(x.size for _, x, _, _ in sides) ** (1 / 3)))))
    edges = np.geomspace(lo, hi, n_bins + 1)

    fig = _new_figure(8.0, 5.6)
    ax_hist, ax_strip = fig.subplots(2, 1, sharex=True, height_ratios=(3, 1.6))
    rng = np.random.default_rng(0)  # jitter only; fixed so the same input gives the same image
    for row, side in enumerate(sides):
        _draw_side(ax_hist, ax_strip, row, side, (lo, hi), edges, rng)
    if _ratio_ok(base_level) and base.size and abs(math.log(base_level / float(np.median(base)))) > 1e-3:
        ax_hist.axvline(base_level, color=_BASELINE_COLOR, linestyle=":", linewidth=2.0,
                        label=f"baseline level from the stored history: {base_level:.4g} ms")

    _benchmark_axes(ax_hist, ax_strip, (xlo, xhi), [s[0] for s in sides])
    fig.suptitle(_wrap(name, 90) + "\n" + _comparison_line(comparison), fontsize=10)
    return _save(fig, path)


# ----------------------------------------------------------------------------- forest plot


def _row_floor(row: dict[str, Any], threshold: float) -> float:
    for key in ("floor", "threshold"):
        v = row.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0:
            return float(v)
    return threshold


def _forest_row(ax: Any, i: int, row: dict[str, Any], threshold: float, values: list[float],
                seen: dict[str, tuple[str, str, str]]) -> tuple[bool, bool]:
    """Row ``i`` of :func:`plot_forest`: the ratio's marker, its CI bar, the row's own effect floor
    when it differs from ``threshold`` and the label at the right edge. Appends the x values drawn
    to ``values`` and the verdict's style to ``seen``; returns (a CI was drawn, an own floor was drawn)."""
    ratio = float(row["ratio"])
    values.append(ratio)
    verdict = str(row.get("verdict") or "")
    color, marker, label = VERDICT_STYLES.get(verdict, _OTHER_STYLE)
    seen.setdefault(verdict if verdict in VERDICT_STYLES else "other", (color, marker, label))
    ci = row.get("ratio_ci")
    has_ci = _ci_ok(ci)
    if has_ci:
        lo, hi = float(ci[0]), float(ci[1])
        values += [lo, hi]
        ax.errorbar([ratio], [i], xerr=[[max(ratio - lo, 0.0)], [max(hi - ratio, 0.0)]], fmt="none",
                    ecolor=color, elinewidth=1.6, capsize=3, zorder=2)
    ax.plot([ratio], [i], linestyle="none", marker=marker, markersize=8, color=color,
            markeredgecolor="black", markeredgewidth=0.6, zorder=3)
    t_row = _row_floor(row, threshold)
    note = ""
    own_floor = not math.isclose(t_row, threshold, rel_tol=1e-9, abs_tol=1e-12)
    if own_floor:
        values += [1.0 / (1.0 + t_row), 1.0 + t_row]
        ax.plot([1.0 / (1.0 + t_row), 1.0 + t_row], [i, i], linestyle="none", marker="|",
                markersize=12, markeredgewidth=2.0, color="#555555", zorder=2)
        note = f"  T={t_row * 100:.1f}%"
    ax.annotate(f"{_fmt_ratio(ratio)} {verdict or '-'}{note}", xy=(1.0, i), xycoords=("axes fraction", "data"),
                xytext=(6, 0), textcoords="offset points", va="center", ha="left", fontsize=8)
    return has_ci, own_floor


def _forest_legend(fig: Any, seen: dict[str, tuple[str, str, str]], any_ci: bool, any_floor: bool,
                   threshold: float) -> None:
    """The forest plot's legend: the verdicts drawn, the CI bar, the band and the rows' own floors."""
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], linestyle="none", marker=m, color=c, markeredgecolor="black",
                      markeredgewidth=0.6, markersize=8, label=lab)
               for key, (c, m, lab) in sorted(seen.items(), key=lambda kv: list(VERDICT_STYLES).index(kv[0])
                                               if kv[0] in VERDICT_STYLES else 99)]
    if any_ci:
        handles.append(Line2D([], [], color="#444444", linewidth=1.6, label="|--| 99% CI of the ratio"))
    handles.append(Line2D([], [], color="#BBBBBB", linewidth=8, alpha=0.7,
                          label=f"band: effect floor +-{threshold * 100:g}%"))
    if any_floor:
        handles.append(Line2D([], [], linestyle="none", marker="|", markersize=12, markeredgewidth=2.0,
                              color="#555555", label="| | this row's own effect floor T"))
    fig.legend(handles=handles, loc="outside lower center", ncols=min(3, len(handles)), fontsize=8,
               frameon=False)


def plot_forest(rows: Sequence[dict[str, Any]], path: str | os.PathLike[str], threshold: float | None = None) -> str:
    """Write the suite's forest plot of current/baseline ratios as a PNG; return its path.

    ``rows``: one dict per benchmark with ``name`` and the keys of
    :func:`pytest_gpuperf.reporting.report.comparison_dict` (``ratio``, ``ratio_ci``, ``verdict``, ``floor``,
    ``threshold``). Rows whose ``ratio`` is missing, not finite or not positive (no baseline) are
    skipped; with none left the figure says so. Rows are drawn top to bottom in the given order.

    Each row: a point at the ratio (Hodges-Lehmann, current/baseline, dimensionless, > 1 slower),
    marked by verdict (``>`` regressed, ``<`` improved, diamond inconclusive, ``o`` unchanged;
    Okabe-Ito colours), a horizontal error bar for the 99% CI ``ratio_ci`` when present, and at
    the right edge the ratio and the verdict in words. The x axis is logarithmic, so a 2x slowdown
    and a 2x speedup are equally far from the vertical line at 1.

    The grey band is [1/(1+T), 1+T] for T = ``threshold`` (fraction: 0.05 = 5%; default the plugin's). A row whose own
    effect floor (``floor``, else its ``threshold``) differs from it gets ``[`` and ``]`` marks at
    its own 1/(1+T_row) and 1+T_row, and ``T=...%`` in its right-hand label. The figure is 0.3 in
    taller per row (width grows with the longest name, which is cut from the left beyond 70
    characters). Parent folders of ``path`` are created.
    """
    kept = [r for r in rows if _ratio_ok(r.get("ratio"))]
    n = len(kept)
    names = [_shorten(str(r.get("name") or r.get("id") or "?"), 70) for r in kept]
    longest = max((len(s) for s in names), default=10)
    width = min(20.0, 6.5 + 0.065 * longest)
    height = min(600.0, 1.9 + 0.3 * max(n, 1))
    fig = _new_figure(width, height)
    ax = fig.subplots()

    if threshold is None:
        from pytest_gpuperf.core.options import DEFAULTS

        threshold = DEFAULTS.threshold
    band_lo, band_hi = 1.0 / (1.0 + threshold), 1.0 + threshold
    ax.axvspan(band_lo, band_hi, color="#BBBBBB", alpha=0.45, linewidth=0, zorder=0)
    ax.axvline(1.0, color="black", linewidth=1.0, zorder=1)

    values = [band_lo, band_hi, 1.0]
    seen: dict[str, tuple[str, str, str]] = {}
    any_ci = any_floor = False
    for i, row in enumerate(kept):
        has_ci, own_floor = _forest_row(ax, i, row, threshold, values, seen)
        any_ci, any_floor = any_ci or has_ci, any_floor or own_floor

    lo, hi = min(values), max(values)
    pad = (hi / lo) ** 0.06 if hi > lo else 1.05
    ax.set_xscale("log")
    ax.set_xlim(lo / pad, hi * pad)
    _log_ticks(ax, lo / pad, hi * pad, suffix="x")
    ax.set_yticks(range(n), names, fontsize=8)
    ax.set_ylim(n - 0.5 if n else 0.5, -0.5)  # first row on top
    ax.grid(True, axis="x", alpha=0.3)
    ax.set_xlabel("current / baseline time (ratio, log scale; > 1 slower)")
    if n == 0:
        ax.text(0.5, 0.5, "no benchmark has a baseline comparison", transform=ax.transAxes,
                ha="center", va="center")

    _forest_legend(fig, seen, any_ci, any_floor, threshold)
    fig.suptitle(f"current / baseline ratio per benchmark ({n} with a baseline)", fontsize=10)
    return _save(fig, path)
