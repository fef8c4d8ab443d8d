"""The dashboard's site writer (``pytest_gpuperf.reporting.dashboard``, issue 34) on a seeded
synthetic history: the files, nothing loaded from the network, Plotly's JavaScript written once,
small pages, every name escaped, the filters, change points with their commit range and bisect
command, the regressions page, an empty store. (The pages in a real browser:
``test_dashboard_browser.py``.)"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from dashboard_history import DEVICE, NAMES, history
from pytest_gpuperf.reporting import dashboard
from pytest_gpuperf.reporting.dashboard import (TREND_RUNS, DashboardError, bisect_command, commit_range,
                                                count_steps, node_id, page_name, trend, wrap_name, write_site)
from pytest_gpuperf.verdict.changepoints import ChangePoint

STUB_JS = "/* plotly stub */"


def _data(page: Path) -> dict:
    """The JSON a benchmark page carries."""
    m = re.search(r'<script type="application/json" id="gp-data">(.*?)</script>', page.read_text(encoding="utf-8"), re.S)
    assert m is not None
    return json.loads(m.group(1))


def test_the_site_works_offline_with_plotly_written_once(tmp_path: Path) -> None:
    pytest.importorskip("plotly")
    runs, rows, changes = history()
    site = write_site(tmp_path, runs, rows, changes)
    assert (tmp_path / "index.html").is_file() and (tmp_path / "regressions.html").is_file()
    pages = sorted((tmp_path / "bench").glob("*.html"))
    assert [p.name for p in pages] == sorted(page_name(n, DEVICE) for n in NAMES)
    assert set(site.pages) == set(pages) | {tmp_path / "index.html", tmp_path / "regressions.html"}
    bundles = [p for p in tmp_path.rglob("*") if p.is_file() and "plotly" in p.name]
    assert [p.relative_to(tmp_path).as_posix() for p in bundles] == ["assets/plotly.min.js"]
    assert bundles[0].stat().st_size > 1_000_000  # the real bundle, not a reference to one
    for page in site.pages:
        text = page.read_text(encoding="utf-8")
        assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text), page  # nothing from the network
        assert "cdn" not in text.lower()
        assert page.stat().st_size < 200_000  # the bundle is shared, not inlined
    for page in pages:
        assert '<script src="../assets/plotly.min.js"></script>' in page.read_text(encoding="utf-8")
    assert site.largest_page_bytes == max(p.stat().st_size for p in site.pages)


def test_a_page_of_500_runs_stays_small(tmp_path: Path) -> None:
    runs, rows, changes = history(500, NAMES[:1], step_at=300)
    site = write_site(tmp_path, runs, rows, changes, js=STUB_JS)
    assert site.largest_page_bytes < 500_000
    assert len(_data(tmp_path / "bench" / page_name(NAMES[0], DEVICE))["runs"]["median"]) == 500


def test_every_name_is_escaped(tmp_path: Path) -> None:
    evil = 'tests/x.py::test_a[</script><script>alert("x")</script>-\'q\'&]'
    runs, rows, changes = history(6, (evil,), step_at=3, device='dev"<key>')
    subjects = {runs[3]["commit"]: "make it </script> & slower"}
    write_site(tmp_path, runs, rows, changes, subjects=subjects, js=STUB_JS)
    for page in [tmp_path / "index.html", tmp_path / "regressions.html", *(tmp_path / "bench").glob("*.html")]:
        text = page.read_text(encoding="utf-8")
        assert "<script>alert" not in text and 'dev"<key>' not in text, page
        assert text.count("</script>") == text.count("<script"), page  # no name closes or opens a script
    page = next((tmp_path / "bench").glob("*.html"))
    assert "&lt;/script&gt;&lt;script&gt;alert(&quot;x&quot;)" in page.read_text(encoding="utf-8")
    data = _data(page)
    assert data["benchmark"] == evil and data["device"] == 'dev"<key>'  # the JSON decodes to the names
    assert data["subjects"] == subjects


def test_an_empty_store_gets_an_index_saying_so(tmp_path: Path) -> None:
    site = write_site(tmp_path, [], [], js=STUB_JS)
    assert "No runs in the history store yet" in (tmp_path / "index.html").read_text(encoding="utf-8")
    assert "No change point made a benchmark slower" in (tmp_path / "regressions.html").read_text(encoding="utf-8")
    assert list((tmp_path / "bench").glob("*.html")) == [] and len(site.pages) == 2


def test_filters_by_device_key_and_branch(tmp_path: Path) -> None:
    runs_a, rows_a, _ = history(6, NAMES[:1], step_at=0, branches=("main", "feature/x"), device="cpu-x")
    runs_b, rows_b, _ = history(4, NAMES[:1], step_at=0, seed=1, device="cuda-y")
    for r in runs_b + rows_b:
        r["run_id"] = "b-" + r["run_id"]
    write_site(tmp_path, runs_a + runs_b, rows_a + rows_b, js=STUB_JS)
    index = (tmp_path / "index.html").read_text(encoding="utf-8")
    for name in ("device", "branch", "text"):
        assert f'data-filter="{name}"' in index
    assert re.findall(r'<option value="([^"]*)"', index) == ["*", "cpu-x", "cuda-y", "*", "feature/x", "main"]
    rows = re.findall(r'<tr data-device="([^"]*)" data-branch="([^"]*)"', index)
    assert sorted(rows) == [("cpu-x", "feature/x"), ("cpu-x", "main"), ("cuda-y", "main")]  # a row per series and branch
    assert f'href="bench/{page_name(NAMES[0], "cpu-x")}?branch=feature%2Fx"' in index  # the row's branch kept
    page = (tmp_path / "bench" / page_name(NAMES[0], "cpu-x")).read_text(encoding="utf-8")
    assert 'data-filter="branch"' in page and page_name(NAMES[0], "cuda-y") in page  # the other device's page linked


def test_a_change_point_is_drawn_with_its_range_and_bisect_command(tmp_path: Path) -> None:
    runs, rows, (change,) = history(30, step_at=20)
    faster = ChangePoint(benchmark=NAMES[1], device_key=DEVICE, index=10, before_commit=runs[9]["commit"],
                         after_commit=runs[10]["commit"], before_run="run0009", after_run="run0010",
                         median_before_ms=2.0, median_after_ms=1.5, change_pct=-25.0, pvalue=0.01)
    write_site(tmp_path, runs, rows, [change, faster], js=STUB_JS)
    page = tmp_path / "bench" / page_name(NAMES[0], DEVICE)
    (drawn,) = _data(page)["changes"]
    assert drawn["pos"] == 20 and drawn["slower"] and drawn["pct"] == pytest.approx(15.0)
    assert drawn["range"] == f"{runs[19]['commit'][:9]}..{runs[20]['commit'][:9]}" == commit_range(change)
    cmd = f"gpuperf bisect {runs[19]['commit'][:9]} {runs[20]['commit'][:9]} -- 'tests/perf/test_gemm.py::test_gemm[fp16-4096]'"
    assert drawn["bisect"] == bisect_command(change) == cmd
    assert cmd.replace("'", "&#x27;") in page.read_text(encoding="utf-8")  # the change-point table
    index = (tmp_path / "index.html").read_text(encoding="utf-8")
    # the index may break a range after its ".." (the table fits 1280 px)
    assert all(commit_range(c).replace("..", "..<wbr>") in index for c in (change, faster))
    regressions = (tmp_path / "regressions.html").read_text(encoding="utf-8")
    assert commit_range(change) in regressions and commit_range(faster) not in regressions  # only slower ones
    assert regressions.count("<tr data-device") == 2  # the change point and the run judged regressed


def test_regressed_runs_are_listed_newest_first(tmp_path: Path) -> None:
    runs, rows, _ = history(12, NAMES[:1], step_at=0)
    for i in (3, 7, 5):
        rows[i]["verdict"] = "regressed"
    rows[5]["clock"] = "cpu"  # issue 45: a verdict decided on CPU time says so on the dashboard too
    write_site(tmp_path, runs, rows, js=STUB_JS)
    text = (tmp_path / "regressions.html").read_text(encoding="utf-8")
    shown = re.findall(r'<td class="mono">([0-9a-f]{9})</td>', text)
    assert shown == [runs[i]["commit"][:9] for i in (7, 5, 3)]
    assert text.count(" on CPU time</td>") == 1
    clocks = _data(tmp_path / "bench" / page_name(NAMES[0], DEVICE))["runs"]["clock"]
    assert clocks[5] == "cpu" and clocks.count("cpu") == 1  # the page's hover and run table read it


def test_memory_and_counts_plots_only_when_recorded(tmp_path: Path) -> None:
    runs, rows, _ = history(5, NAMES[:1], step_at=0)
    write_site(tmp_path / "with", runs, rows, js=STUB_JS)
    page = tmp_path / "with" / "bench" / page_name(NAMES[0], DEVICE)
    data = _data(page)
    assert data["runs"]["mem"] == [64.0] * 5 and data["counts"] == {"kernels": [3.0] * 5, "syncs": [1.0] * 5}
    assert 'id="gp-memory"' in page.read_text() and 'id="gp-counts"' in page.read_text()
    runs, rows, _ = history(5, NAMES[:1], step_at=0, memory=False, counts=False)
    write_site(tmp_path / "without", runs, rows, js=STUB_JS)
    text = (tmp_path / "without" / "bench" / page_name(NAMES[0], DEVICE)).read_text()
    assert 'id="gp-memory"' not in text and 'id="gp-counts"' not in text and 'id="gp-time"' in text


def test_pages_of_benchmarks_gone_from_the_store_are_removed(tmp_path: Path) -> None:
    runs, rows, _ = history(3, step_at=0)
    write_site(tmp_path, runs, rows, js=STUB_JS)
    assert len(list((tmp_path / "bench").glob("*.html"))) == 3
    write_site(tmp_path, runs, [r for r in rows if r["benchmark"] == NAMES[0]], js=STUB_JS)
    assert [p.name for p in (tmp_path / "bench").glob("*.html")] == [page_name(NAMES[0], DEVICE)]


def test_an_unwritable_folder_is_named(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(DashboardError, match=re.escape(str(blocker))):
        write_site(blocker, [], [], js=STUB_JS)


def test_without_plotly_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "plotly.offline", None)  # import fails
    with pytest.raises(DashboardError, match=re.escape('pip install "pytest-gpuperf[dashboard]"')):
        dashboard.plotly_js()


@pytest.mark.parametrize("name, expected", [
    ("tests/a.py::test_x", "tests/a.py::test_x"),
    ("tests/a.py::test_x[fp16-4096]", "tests/a.py::test_x[fp16-4096]"),
    ("tests/a.py::test_x::forward", "tests/a.py::test_x"),  # a named measurement is no node
    ("tests/a.py::TestConv::test_x[a::b]::backward", "tests/a.py::TestConv::test_x[a::b]"),
])
def test_node_id_of_a_stored_name(name: str, expected: str) -> None:
    assert node_id(name) == expected


def test_page_names_are_safe_and_distinct() -> None:
    names = {page_name(n, d) for n in ("a.py::t[x]", "a.py::t[X]", "a.py::t x", "a.py/t[x]") for d in ("cpu", None)}
    assert len(names) == 8
    assert all(re.fullmatch(r"[A-Za-z0-9_.-]+\.html", n) for n in names)


def test_odd_values_do_not_break_a_page(tmp_path: Path) -> None:
    runs, rows, _ = history(3, NAMES[:1], step_at=0)
    rows[0].update(median_ms=float("nan"), ci_low_ms=float("-inf"), counts={"kernels": "many"}, process_medians_ms=None)
    rows[1].update(branch=None, commit=None, machine=None)
    write_site(tmp_path, runs, rows, js=STUB_JS)
    data = _data(tmp_path / "bench" / page_name(NAMES[0], DEVICE))
    assert data["runs"]["median"][0] is None and data["runs"]["lo"][0] is None and data["runs"]["pm"][0] is None
    assert data["counts"]["kernels"] == [None, 3.0, 3.0] and data["runs"]["branch"][1] == ""


def test_the_trend_is_the_median_of_the_last_runs_against_the_runs_before() -> None:
    # issue 47: "latest against the 10 before" read +3832% when the latest run alone was an outlier
    assert TREND_RUNS == 5
    flat_then_odd = [1.0, 1.1, 0.9, 1.0, 1.05, 0.95, 1.0, 1.02, 0.98, 40.0]
    assert trend(flat_then_odd) == pytest.approx((1.0 / 1.0 - 1) * 100)  # median(0.95..40) = 1.0
    stepped = [1.0] * 5 + [2.0] * 5
    assert trend(stepped) == pytest.approx(100.0) and trend([1.0] * 20 + [2.0] * 5) == pytest.approx(100.0)
    assert trend([1.0, 3.0]) == pytest.approx(200.0) and trend([1.0, 2.0, 3.0]) == pytest.approx(50.0)  # k = n // 2
    assert trend([1.0]) is None and trend([]) is None and trend([0.0, 1.0]) is None


def test_the_index_shows_the_trend_and_breaks_names_at_their_separators(tmp_path: Path) -> None:
    runs, rows, _ = history(12, NAMES[:1], step_at=0)
    for r in rows[-5:]:
        r["median_ms"] *= 2
    rows[-1]["median_ms"] = 1000.0  # one odd run moves the median of five little
    write_site(tmp_path, runs, rows, js=STUB_JS)
    index = (tmp_path / "index.html").read_text(encoding="utf-8")
    got = float(re.search(r'<td class="num" data-v="([-0-9.e+]+)">[-+0-9.]+%</td>', index).group(1))
    assert got == pytest.approx(trend([r["median_ms"] for r in rows]), rel=1e-3) and 90 < got < 110
    assert "tests/<wbr>perf/<wbr>test_gemm.py::<wbr>test_gemm<wbr>[fp16-4096]" in index
    assert wrap_name("a/b::c[<x>]") == "a/<wbr>b::<wbr>c<wbr>[&lt;x&gt;]" and wrap_name("") == ""


def test_a_change_point_carries_its_p_value_to_the_plot(tmp_path: Path) -> None:
    runs, rows, (change,) = history(30, step_at=20)
    write_site(tmp_path, runs, rows, [change], js=STUB_JS)
    (drawn,) = _data(tmp_path / "bench" / page_name(NAMES[0], DEVICE))["changes"]
    assert drawn["p"] == pytest.approx(change.pvalue) and drawn["range"] == commit_range(change)


def test_count_steps_are_where_a_count_changed_between_runs() -> None:
    assert count_steps([2, 2, None, 4, 4, 3]) == [{"pos": 3, "from": 2, "to": 4}, {"pos": 5, "from": 4, "to": 3}]
    assert count_steps([1, 1, 1]) == [] and count_steps([None, "many", float("nan"), 5]) == []


def test_each_count_has_its_own_plot_and_a_changed_count_is_highlighted(tmp_path: Path) -> None:
    runs, rows, _ = history(10, NAMES[:1], step_at=0)
    for i, r in enumerate(rows):  # an op count that failed its check (2 -> 4) beside 10 M bytes
        r["counts"] = {"ops": 2 if i < 6 else 4, "syncs": 1, "bytes": 10_000_000, "flops": 3e12}
    write_site(tmp_path, runs, rows, js=STUB_JS)
    page = (tmp_path / "bench" / page_name(NAMES[0], DEVICE)).read_text(encoding="utf-8")
    cells = re.findall(r'<div class="([a-z ]+)" data-metric="(\w+)"><h3>(.*?)</h3><div id="(gp-count-\d)"', page)
    assert [(c[1], c[3]) for c in cells] == [("bytes", "gp-count-0"), ("flops", "gp-count-1"), ("ops", "gp-count-2"),
                                             ("syncs", "gp-count-3")]
    classes = {c[1]: c[0] for c in cells}
    assert classes["ops"] == "count changed up" and classes["bytes"] == classes["syncs"] == "count"
    ops_title = next(c[2] for c in cells if c[1] == "ops")
    assert "2 → 4" in ops_title and runs[6]["commit"][:9] in ops_title
    assert _data(tmp_path / "bench" / page_name(NAMES[0], DEVICE))["countSteps"]["ops"] == [{"pos": 6, "from": 2, "to": 4}]


def test_instructions_per_call_are_plotted_with_the_counts_and_marked_beyond_the_gates_tolerance(tmp_path: Path) -> None:
    """Issue 48: a history row's instructions per call get a small plot of their own; their A/A
    spread (under 3%) is not a change, a 6% step is."""
    assert count_steps([10_000, 10_150, 9_900, 10_600], tolerance=0.03) == [{"pos": 3, "from": 10_000, "to": 10_600}]
    runs, rows, _ = history(10, NAMES[:1], step_at=0)
    for i, r in enumerate(rows):
        r["instructions"] = (10_000 if i < 6 else 10_600) + (i % 2) * 150
    write_site(tmp_path, runs, rows, js=STUB_JS)
    page = (tmp_path / "bench" / page_name(NAMES[0], DEVICE)).read_text(encoding="utf-8")
    cells = re.findall(r'<div class="([a-z ]+)" data-metric="(\w+)"><h3>(.*?)</h3>', page)
    assert {c[1]: c[0] for c in cells}["instructions"] == "count changed up"
    data = _data(tmp_path / "bench" / page_name(NAMES[0], DEVICE))
    assert data["countSteps"]["instructions"] == [{"pos": 6, "from": 10_000, "to": 10_600}]
