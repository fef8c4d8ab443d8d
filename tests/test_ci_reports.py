"""End-to-end: CI reports (JSON Schema, Markdown, plots, JUnit properties) and pytest-xdist."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from pytest_gpuperf.storage.schema import validate
from scripted import script_timings, set_timings

pytest_plugins = ["pytester"]

RUN = ("-p", "no:cacheprovider")

# Timings are scripted (tests/scripted.py): only test_slows_down gets slower (3x), and every
# verdict below is the same on any machine. test_matmul's class comes from a real profile: a 256x256
# matmul is compute-bound on a quiet machine and overhead-bound on a loaded one (its arithmetic
# intensity is far above the ridge point, so never memory-bound), and either is expected here.
SUITE = """
import pytest
import torch

FAST = dict(max_time=0.1, warmup_time=0.01, device="cpu", confirm=0)

@pytest.mark.gpu_bench(**FAST)
def test_steady(gpu_bench):
    gpu_bench(sum, range(100))

@pytest.mark.gpu_bench(**FAST)
def test_slows_down(gpu_bench):
    gpu_bench(sum, range(100))

@pytest.mark.gpu_bench(expect_bottleneck=("compute", "overhead"), **FAST)
def test_matmul(gpu_bench):
    a = torch.randn(256, 256)
    gpu_bench(torch.matmul, a, a)

@pytest.mark.gpu_bench(group="named", **FAST)
def test_two_things(gpu_bench):
    gpu_bench.pedantic(sum, args=(range(100),), name="small")
    gpu_bench.pedantic(lambda: torch.ones(1 << 18).sum(), name="alloc")
"""
STEADY = {"ms": 1.0, "cv": 0.02, "seed": 1}
RERUN = {"ms": 1.0, "cv": 0.02, "seed": 2}


def _setup(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite=SUITE)
    script_timings(pytester, STEADY)
    pytester.runpytest("--gpuperf-update-baselines", *RUN).assert_outcomes(passed=4)
    set_timings(pytester, RERUN, test_slows_down={"ms": 3.0, "cv": 0.02, "seed": 3})


def test_json_report_and_baselines_are_schema_valid(pytester: pytest.Pytester) -> None:
    _setup(pytester)
    rec = pytester.runpytest("--gpuperf", "--gpuperf-json", "out/r.json", *RUN)
    rec.assert_outcomes(passed=3, failed=1)
    report = json.loads(pytester.path.joinpath("out", "r.json").read_text())
    validate(report, "report")
    assert len(report["benchmarks"]) == 5
    assert report["benchmarks"]["test_suite.py::test_slows_down"]["verdict"] == "regressed"
    assert report["benchmarks"]["test_suite.py::test_matmul"]["bottleneck"]["kind"] in ("compute", "overhead")
    for path in pytester.path.joinpath("baselines").rglob("*.json"):
        validate(json.loads(path.read_text()), "baseline")
    with pytest.raises(Exception):
        validate({"schema_version": 2, "kind": "report"}, "report")


def test_markdown_summary_lists_regressions_first(pytester: pytest.Pytester) -> None:
    _setup(pytester)
    rec = pytester.runpytest("--gpuperf", "--gpuperf-markdown", "summary.md", *RUN)
    rec.assert_outcomes(passed=3, failed=1)
    text = pytester.path.joinpath("summary.md").read_text()
    lines = text.splitlines()
    assert lines[0] == "## pytest-gpuperf results"
    assert lines[2].startswith("**FAILED**: 5 benchmark(s) on cpu: 1 regressed") and "1 failing" in lines[2]
    rows = [ln for ln in lines if ln.startswith("| [")]
    assert len(rows) == 5
    assert rows[0].startswith("| [FAIL] | `test_suite.py::test_slows_down`") and "regressed" in rows[0]
    assert any(("compute" in r or "overhead" in r) and "test_matmul" in r for r in rows)
    assert any("test_two_things::alloc" in r and "MiB" in r for r in rows)
    assert all(ord(ch) < 0x2000 or ch in "µ±" for ch in text)  # plain text markers, no emoji


def test_plots_are_valid_pngs(pytester: pytest.Pytester) -> None:
    pytest.importorskip("matplotlib")
    import matplotlib.image

    _setup(pytester)
    rec = pytester.runpytest("--gpuperf", "--gpuperf-plot", "plots", *RUN)
    rec.assert_outcomes(passed=3, failed=1)
    pngs = sorted(pytester.path.joinpath("plots").glob("*.png"))
    assert len(pngs) == 6  # 5 benchmarks with a baseline + the forest plot
    assert any(p.name == "forest.png" for p in pngs)
    for p in pngs:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        img = matplotlib.image.imread(p)
        assert img.ndim == 3 and img.shape[0] > 100 and img.shape[1] > 100


def test_plot_option_without_matplotlib_fails_at_startup(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    pytester.makepyfile("def test_x(): pass")
    rec = pytester.runpytest("--gpuperf-plot", "plots", *RUN)
    assert rec.ret == pytest.ExitCode.USAGE_ERROR
    assert "pip install pytest-gpuperf[plot]" in rec.stderr.str()


def test_junit_xml_carries_benchmark_properties(pytester: pytest.Pytester) -> None:
    _setup(pytester)
    rec = pytester.runpytest("--gpuperf", "--junitxml", "junit.xml", *RUN)
    rec.assert_outcomes(passed=3, failed=1)
    root = ET.parse(pytester.path.joinpath("junit.xml")).getroot()
    props = {
        case.get("name"): {p.get("name"): p.get("value") for p in case.iter("property")}
        for case in root.iter("testcase")
    }
    slow = props["test_slows_down"]
    assert {"median_ms", "baseline_median_ms", "ratio", "verdict", "peak_memory_bytes"} <= set(slow)
    assert slow["verdict"] == "regressed" and float(slow["ratio"]) > 1.3 and float(slow["median_ms"]) > 0
    assert props["test_matmul"]["bottleneck"] in ("compute", "overhead")
    assert {"small.median_ms", "alloc.median_ms", "alloc.peak_memory_bytes"} <= set(props["test_two_things"])


def test_xdist_four_workers_lose_no_baseline_and_summarize_everything(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    pytester.makepyfile(
        test_many="""
        import pytest

        @pytest.mark.gpu_bench(max_time=0.05, warmup_time=0.0, threshold=1.0, device="cpu")
        @pytest.mark.parametrize("n", range(12))
        def test_b(gpu_bench, n):
            gpu_bench(sum, range(100 * (n + 1)))
        """
    )
    # each xdist worker measures and hands its results over itself (no replicate worker processes:
    # they would measure every benchmark before the tests, in the controller's pipeline)
    rec = pytester.runpytest_subprocess("-n", "4", "--gpuperf-update-baselines", "--gpuperf-json", "r.json",
                                        "--gpuperf-processes=1", *RUN)
    rec.assert_outcomes(passed=12)
    (path,) = pytester.path.joinpath("baselines").rglob("test_many.json")
    stored = json.loads(path.read_text())["benchmarks"]
    assert sorted(stored) == sorted(f"test_b[{n}]" for n in range(12))
    validate(json.loads(path.read_text()), "baseline")
    out = rec.stdout.str()
    assert all(f"test_many.py::test_b[{n}]" in out for n in range(12))
    assert "pytest-xdist: results of 4 worker(s) merged" in out
    report = json.loads(pytester.path.joinpath("r.json").read_text())
    assert len(report["benchmarks"]) == 12
    validate(report, "report")
    # a second update from 4 workers appends a run to every entry, again losing nothing
    pytester.runpytest_subprocess("-n", "4", "--gpuperf-update-baselines", "--gpuperf-processes=1",
                                  *RUN).assert_outcomes(passed=12)
    stored = json.loads(path.read_text())["benchmarks"]
    assert sorted(len(e["history"]) for e in stored.values()) == [2] * 12
    assert not list(pytester.path.joinpath("baselines").rglob("*.lock"))


def test_verbose_mode_shows_progress_of_long_benchmarks(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.gpu_bench(max_time=2.5, max_rounds=10**6, warmup_time=0.0, target_precision=0, device="cpu")
        def test_long(gpu_bench):
            gpu_bench(sum, range(20))
        """
    )
    script_timings(pytester, STEADY)  # 2.5 s of scripted time: progress lines at 1 s and 2 s
    rec = pytester.runpytest("--gpuperf", "-v", *RUN)
    rec.assert_outcomes(passed=1)
    rec.stdout.fnmatch_lines(["*gpuperf test_*::test_long: * rounds, *s, median *"])
    quiet = pytester.runpytest("--gpuperf", *RUN)
    assert " rounds, " not in quiet.stdout.str()
