"""Unit tests for pytest_gpuperf.reporting.plots (PNG plots; matplotlib's Agg renderer, no display)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

matplotlib = pytest.importorskip("matplotlib")

from pytest_gpuperf.reporting import plots  # noqa: E402
from pytest_gpuperf.verdict.compare import decide  # noqa: E402
from pytest_gpuperf.reporting.report import comparison_dict  # noqa: E402

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
VERDICTS = ("regressed", "improved", "inconclusive", "unchanged")


def _check_png(path, min_h: int = 100, min_w: int = 300) -> np.ndarray:
    """The file exists, is a PNG and loads as an RGB(A) image of a sensible size (pixels)."""
    import matplotlib.image as mpimg

    with open(path, "rb") as f:
        assert f.read(8) == PNG_SIGNATURE
    img = mpimg.imread(path)
    assert img.ndim == 3 and img.shape[2] in (3, 4)
    assert min_h <= img.shape[0] <= 20000 and min_w <= img.shape[1] <= 5000
    assert float(img[..., :3].std()) > 0  # something was drawn
    return img


def _samples(seed: int, median_ms: float, n: int, sigma: float = 0.05) -> np.ndarray:
    return np.random.default_rng(seed).lognormal(np.log(median_ms), sigma, n)


def _rows(n: int, seed: int = 7) -> list[dict]:
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        r = float(np.exp(rng.normal(0, 0.1)))
        rows.append({
            "name": f"tests/perf/test_workloads.py::test_case_{i}[p{i}]",
            "ratio": r,
            "ratio_ci": [r * 0.97, r * 1.04] if i % 3 else None,
            "verdict": VERDICTS[i % 4],
            "floor": 0.05 if i % 5 else 0.12,
            "threshold": 0.05,
        })
    return rows


# ----------------------------------------------------------------------------- safe_filename


@pytest.mark.parametrize(
    "name, expected",
    [
        ("tests/perf/test_x.py::test_gemm[fp32]", "tests_perf_test_x.py__test_gemm_fp32"),
        ("test_a.py::TestC::test_b[1-2]", "test_a.py__TestC__test_b_1-2"),
        ("tests\\win\\t.py::t[a b]", "tests_win_t.py__t_a_b"),
        ("t.py::t[caf\u00e9-\u00b5s]", "t.py__t_cafe-s"),
        ("../../etc/passwd", "etc_passwd"),
        ("", "benchmark"),
        ("::", "benchmark"),
        ("CON", "_CON"),
        ("nul.txt", "_nul.txt"),
    ],
)
def test_safe_filename(name, expected):
    import hashlib

    digest = hashlib.sha1(name.encode()).hexdigest()[:8]
    assert plots.safe_filename(name) == f"{expected}-{digest}"  # lossy: the digest keeps ids distinct


def test_safe_filename_keeps_a_clean_name_and_separates_lossy_ones():
    assert plots.safe_filename("test_x.py") == "test_x.py"
    stems = {plots.safe_filename(n) for n in ("a::b", "a/b", "a b", "a__b", "a_b")}
    assert len(stems) == 5


def test_safe_filename_is_ascii_and_bounded():
    names = ["x" * 500 + "[a]", "x" * 500 + "[b]", "\u65e5\u672c::\u8a9e", "a" + "/" * 50 + "b"]
    stems = [plots.safe_filename(n) for n in names]
    for s in stems:
        assert s.isascii() and s
        assert len(s) <= plots.MAX_STEM
        assert all(c.isalnum() or c in "._-" for c in s)
        assert not s.startswith((".", "-"))
    assert stems[0] != stems[1]  # long ids stay distinct through the hash suffix


# ----------------------------------------------------------------------------- require_matplotlib


def test_require_matplotlib_passes_when_installed():
    plots.require_matplotlib()


def test_require_matplotlib_hint_when_hidden(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ImportError, match=r"pip install pytest-gpuperf\[plot\]") as exc:
        plots.require_matplotlib()
    assert str(exc.value) == "--gpuperf-plot needs matplotlib: pip install pytest-gpuperf[plot]"


# ----------------------------------------------------------------------------- plot_benchmark


def test_plot_benchmark_with_real_comparison(tmp_path):
    base = _samples(1, 0.13, 400)
    cur = _samples(2, 0.15, 300, sigma=0.06)
    comp = comparison_dict(decide(cur, base, benchmark_id="t", run_medians_ms=[0.12, 0.125, 0.13, 0.128, 0.131]))
    assert comp is not None and comp["ratio_ci"] is not None
    out = tmp_path / "new" / "sub" / (plots.safe_filename("tests/perf/test_x.py::test_gemm[fp32]") + ".png")
    written = plots.plot_benchmark("tests/perf/test_x.py::test_gemm[fp32]", cur, base, comp, out)
    assert written == str(out)
    _check_png(out, min_h=300, min_w=500)


@pytest.mark.parametrize("verdict", VERDICTS)
def test_plot_benchmark_each_verdict(tmp_path, verdict):
    comp = {"ratio": 1.08, "ratio_ci": [1.02, 1.15], "verdict": verdict, "floor": 0.05, "threshold": 0.05,
            "baseline_median_ms": 2.0, "confirmed": True if verdict == "regressed" else None}
    out = plots.plot_benchmark("b", _samples(3, 2.2, 50), _samples(4, 2.0, 50), comp, tmp_path / "b.png")
    _check_png(out)


def test_plot_benchmark_small_samples_no_ci(tmp_path):
    # n < 6 on both sides: median_ci is None; constant samples: zero spread.
    out = plots.plot_benchmark("tiny", [1.0, 1.1, 1.2], [1.0, 1.0, 1.0], None, tmp_path / "tiny.png")
    _check_png(out)
    out = plots.plot_benchmark("one", [0.5], [0.5], {"ratio": 1.0, "ratio_ci": None, "verdict": "unchanged"},
                               tmp_path / "one.png")
    _check_png(out)


def test_plot_benchmark_without_baseline(tmp_path):
    out = plots.plot_benchmark("nob", _samples(5, 0.01, 80), [], {"verdict": "no-baseline", "ratio": None},
                               str(tmp_path / "nob.png"))
    _check_png(out)


def test_plot_benchmark_wide_range_and_long_name(tmp_path):
    cur = np.concatenate([_samples(6, 0.002, 30), _samples(7, 5.0, 30)])  # ~4 decades
    out = plots.plot_benchmark("t.py::" + "very_long_name_" * 12, cur, _samples(8, 0.5, 30), None,
                               tmp_path / "wide.png")
    _check_png(out)


@pytest.mark.parametrize("bad", [[], [1.0, -1.0], [1.0, float("nan")], [0.0]])
def test_plot_benchmark_rejects_bad_current(tmp_path, bad):
    with pytest.raises(ValueError):
        plots.plot_benchmark("bad", bad, [1.0], None, tmp_path / "bad.png")
    assert not (tmp_path / "bad.png").exists()


# ----------------------------------------------------------------------------- plot_forest


def test_plot_forest_1_5_40_rows_height_scales(tmp_path):
    heights = {}
    for n in (1, 5, 40):
        out = tmp_path / "plots" / f"forest{n}.png"
        written = plots.plot_forest(_rows(n), out)
        assert written == str(out)
        heights[n] = _check_png(out).shape[0]
    assert heights[1] < heights[5] < heights[40]
    assert heights[40] > heights[1] + 39 * 20  # at least ~20 px per extra row


def test_plot_forest_skips_rows_without_ratio(tmp_path):
    import matplotlib.image as mpimg

    rows = _rows(3)
    extra = [
        {"name": "no_baseline", "ratio": None, "verdict": "no-baseline"},
        {"name": "missing"},
        {"name": "nan", "ratio": float("nan"), "verdict": "unchanged"},
        {"name": "zero", "ratio": 0.0, "verdict": "unchanged"},
    ]
    both = mpimg.imread(plots.plot_forest(rows + extra, tmp_path / "both.png"))
    only = mpimg.imread(plots.plot_forest(rows, tmp_path / "only.png"))
    assert both.shape == only.shape  # the skipped rows take no space


def test_plot_forest_no_rows_and_odd_values(tmp_path):
    _check_png(plots.plot_forest([], tmp_path / "empty.png"), min_w=200)
    _check_png(plots.plot_forest([{"name": "all", "ratio": None}], tmp_path / "none.png"), min_w=200)
    rows = [
        {"name": "bad_ci", "ratio": 1.5, "ratio_ci": [float("nan"), 2.0], "verdict": "weird"},
        {"name": "no_floor", "ratio": 0.5, "verdict": "improved", "floor": None, "threshold": 0.3},
        {"ratio": 1.0, "ratio_ci": (1.0, 1.0), "verdict": "unchanged"},
    ]
    _check_png(plots.plot_forest(rows, tmp_path / "odd.png", threshold=0.1))


# ----------------------------------------------------------------------------- global state


def test_plotting_leaves_matplotlib_global_state_alone(tmp_path):
    backend = matplotlib.get_backend(auto_select=False)
    had_pyplot = "matplotlib.pyplot" in sys.modules
    fignums = sys.modules["matplotlib.pyplot"].get_fignums() if had_pyplot else None
    plots.plot_benchmark("g", _samples(9, 1.0, 20), _samples(10, 1.0, 20), None, tmp_path / "g.png")
    plots.plot_forest(_rows(2), tmp_path / "gf.png")
    assert matplotlib.get_backend(auto_select=False) == backend
    assert ("matplotlib.pyplot" in sys.modules) == had_pyplot  # pyplot never imported by plots
    if had_pyplot:
        assert sys.modules["matplotlib.pyplot"].get_fignums() == fignums
