"""The dashboard in a real browser (issue 34): Debian's ``chromium``, headless, driven by playwright,
opening the pages from file:// (no server, no network): no console error, every benchmark's plot
drawn, a change point's marker labelled with its commit range and p-value, the filters hiding rows;
at 1280 px the index does not overflow and each count has a plot of its own (issue 47).

Skipped, saying why, where ``/usr/bin/chromium``, playwright or plotly is missing."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterator

import pytest

from dashboard_history import DEVICE, NAMES, history
from pytest_gpuperf.reporting.dashboard import commit_range, page_name, write_site

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]

pytestmark = pytest.mark.skipif(not os.access(CHROMIUM, os.X_OK), reason=f"no browser: {CHROMIUM} is missing "
                                "(Debian: apt-get install chromium)")
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)")
pytest.importorskip("plotly", reason="plotly is not installed (pip install \"pytest-gpuperf[dashboard]\")")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    out = tmp_path_factory.mktemp("dashboard")
    runs, rows, changes = history(30, step_at=20, branches=("main", "main", "feature/x"))
    subjects = {runs[20]["commit"]: "gemm: <tile> & 'split' change"}
    write_site(out, runs, rows, changes, subjects=subjects)
    return out, changes[0]


@pytest.fixture(scope="module")
def page(site: tuple[Path, Any]) -> Iterator[Any]:
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        pg = browser.new_page(viewport={"width": 1280, "height": 900})
        pg.errors = []  # type: ignore[attr-defined]
        pg.on("console", lambda m: pg.errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
        pg.on("pageerror", lambda e: pg.errors.append(f"page error: {e}"))
        pg.on("requestfailed", lambda r: pg.errors.append(f"request failed: {r.url}"))
        pg.on("request", lambda r: pg.errors.append(f"network request: {r.url}")
              if not r.url.startswith(("file://", "data:")) else None)
        yield pg
        browser.close()


def _open(page: Any, path: Path, query: str = "") -> None:
    page.errors.clear()
    page.goto(path.as_uri() + query)
    page.wait_for_load_state("load")


def test_the_index_loads_and_its_filters_hide_rows(site: tuple[Path, Any], page: Any) -> None:
    out, change = site
    _open(page, out / "index.html")
    rows = page.locator("#gp-index tbody tr")
    assert rows.count() == 2 * len(NAMES)  # a row per benchmark and branch
    assert page.locator("#gp-index tbody tr:visible").count() == 2 * len(NAMES)
    page.select_option('[data-filter="branch"]', "feature/x")
    assert page.locator("#gp-index tbody tr:visible").count() == len(NAMES)
    page.fill('[data-filter="text"]', "gemm")
    assert page.locator("#gp-index tbody tr:visible").count() == 1
    assert "1 of 6 shown" in page.inner_text('[data-count-for="gp-index"]')
    assert commit_range(change) in page.inner_text("#gp-index")
    assert page.errors == []


def test_every_benchmark_page_draws_its_plots(site: tuple[Path, Any], page: Any) -> None:
    out, _ = site
    for name in NAMES:
        _open(page, out / "bench" / page_name(name, DEVICE))
        page.wait_for_selector("#gp-time.js-plotly-plot .main-svg")
        for plot in ("#gp-time", "#gp-memory", "#gp-count-0", "#gp-count-1"):
            assert page.locator(f"{plot}.js-plotly-plot .main-svg").count() >= 1, (name, plot)
        assert page.locator("#gp-time .scatterlayer .trace").count() == 4  # CI band (2), process medians, median
        assert page.locator("#gp-time .scatterlayer .point").count() == 30 * 4  # 30 medians + 3 × 30 process medians
        assert page.locator("#gp-runs tbody tr").count() == 30
        assert page.errors == [], name


def test_a_change_point_is_marked_with_its_commit_range(site: tuple[Path, Any], page: Any) -> None:
    out, change = site
    _open(page, out / "bench" / page_name(NAMES[0], DEVICE))
    page.wait_for_selector("#gp-time .annotation")
    notes = [t for t in page.locator("#gp-time .annotation").all_text_contents()]
    assert notes == [f"{commit_range(change)} +15.0% p=0.0010"]
    assert page.locator("#gp-time .shapelayer path").count() == 1  # the dashed line
    assert "gpuperf bisect" in page.inner_text("#gp-changes")
    # the hover of the first run after the change: short sha, subject (as text, not markup), date, machine
    page.evaluate("Plotly.Fx.hover('gp-time', [{curveNumber: 3, pointNumber: 20}])")
    hover = " ".join(page.locator("#gp-time .hoverlayer text").all_text_contents())
    for part in (change.after_commit[:9], "gemm: <tile> & 'split' change", "2026-03-21T20:00:00+00:00", "gpu-runner-1"):
        assert part in hover, (part, hover)
    assert "gemm: <tile> & 'split' change" in page.inner_text("#gp-runs")
    # on a branch without the change, the change is not drawn
    page.select_option('[data-filter="branch"]', "main")
    assert page.locator("#gp-time .annotation").count() == 0
    assert page.locator("#gp-runs tbody tr").count() == 20
    assert page.errors == []


def test_the_regressions_page_loads(site: tuple[Path, Any], page: Any) -> None:
    out, change = site
    _open(page, out / "regressions.html")
    assert commit_range(change) in page.inner_text("#gp-slower")
    assert page.locator("#gp-regressed tbody tr").count() == 1
    page.click("#gp-slower a")  # the benchmark's page, keeping the branch filter
    page.wait_for_selector("#gp-time.js-plotly-plot .main-svg")
    assert page.errors == []


LONG = ("tests/perf/transformer_blocks/test_attention_kernels.py::TestFlashAttention::test_forward_backward"
        "[bf16-causal-seq8192-heads32]", "tests/perf/test_gemm.py::test_gemm[fp16-4096]",
        "benchmarks/suites/vision/test_resnet50_training_throughput.py::test_train_step[channels_last-amp]")


def test_at_1280_px_the_index_fits_and_each_count_has_its_own_plot(tmp_path: Path, page: Any) -> None:
    runs, rows, changes = history(30, LONG, step_at=20, branches=("main", "feature/a-long-branch-name"))
    for i, r in enumerate(rows):
        if r["benchmark"] == LONG[1]:  # an op count that failed its check (2 -> 4) beside 10 M bytes
            r["counts"] = {"ops": 2 if i < 20 * 3 else 4, "syncs": 1, "flops": 1.4e11, "bytes": 10_000_000}
    write_site(tmp_path, runs, rows, changes)
    assert page.viewport_size["width"] == 1280
    _open(page, tmp_path / "index.html")
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280
    assert page.evaluate("document.getElementById('gp-index').getBoundingClientRect().right") <= 1280
    # names break only at their separators: every line of a name ends at "/", "::" or before "["
    text = page.inner_text("#gp-index tbody tr:first-child td.name")
    assert all(line.endswith(("/", "::")) or nxt.startswith("[") or line.endswith("-")
               for line, nxt in zip(text.split("\n"), text.split("\n")[1:])), text
    _open(page, tmp_path / "bench" / page_name(LONG[1], DEVICE))
    page.wait_for_selector("#gp-count-3.js-plotly-plot .main-svg")
    metrics = page.eval_on_selector_all("#gp-counts [data-metric]", "els => els.map(e => e.dataset.metric)")
    assert metrics == ["bytes", "flops", "ops", "syncs"]
    for k in range(4):  # one plot each, one trace each
        assert page.locator(f"#gp-count-{k}.js-plotly-plot .scatterlayer .trace").count() == 1
    assert page.locator("#gp-counts .changed.up").evaluate("e => e.dataset.metric") == "ops"
    assert page.locator("#gp-count-2 .shapelayer path").count() == 1  # the run where ops went 2 -> 4
    ticks = page.locator("#gp-count-2 .ytick text").all_text_contents()
    assert "4" in ticks and "2" in ticks  # its own axis: 2 -> 4 is not flat at zero under 10 M
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280
    assert page.errors == []
