"""``gpuperf dashboard`` (issue 34): a store filled through ``HistoryStore.append`` becomes a site;
a bad URL or a missing plotly is exit code 2 naming what to do; the change points come from
``verdict.changepoints.find_change_points``; commit subjects from the store, else ``git log``."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from gitrepo import commit, init
from pytest_gpuperf.cli import main
from pytest_gpuperf.reporting.dashboard import page_name
from pytest_gpuperf.storage.history import HistoryStore, ResultRow, RunRecord

pytest.importorskip("plotly")

NAMES = ("tests/perf/test_a.py::test_mm[64]", "tests/perf/test_a.py::test_add")


def _fill(db: Path, commits: list[str | None], device: str = "cpu-x") -> None:
    with HistoryStore(db) as store:
        for i, sha in enumerate(commits):
            run = RunRecord(run_id=f"run{i}", created_utc=f"2026-01-0{i + 1}T00:00:00+00:00", mode="compare",
                            commit=sha, branch="main", machine="box", device_key=device)
            rows = [ResultRow(benchmark=n, median_ms=1.0 + j + (0.2 if i >= 2 else 0.0), rounds=10, device_key=device,
                              ci_low_ms=0.9 + j, ci_high_ms=1.1 + j, process_medians_ms=(1.0 + j, 1.01 + j),
                              peak_memory_bytes=2 ** 20, counts={"kernels": 2}, verdict="unchanged", ratio=1.0)
                    for j, n in enumerate(NAMES)]
            assert store.append(run, rows)


def _data(page: Path) -> dict:
    m = re.search(r'id="gp-data">(.*?)</script>', page.read_text(encoding="utf-8"), re.S)
    assert m is not None
    return json.loads(m.group(1))


def test_the_store_becomes_a_site(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # not a git checkout: no subjects, no failure
    db, out = tmp_path / "h.sqlite", tmp_path / "site"
    _fill(db, ["a" * 40, "b" * 40, "c" * 40, None])
    assert main(["dashboard", "--history", str(db), "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert "4 page(s) from 4 run(s)" in said and str(out / "index.html") in said
    largest = max(p.stat().st_size for p in out.rglob("*.html"))
    assert f"largest page {largest / 1e3:,.1f} KB" in said and " MB" not in said  # issue 47: 0.00 MB said nothing
    assert (out / "index.html").is_file() and (out / "regressions.html").is_file()
    assert (out / "assets" / "plotly.min.js").stat().st_size > 1_000_000
    data = _data(out / "bench" / page_name(NAMES[0], "cpu-x"))
    assert data["runs"]["commit"] == ["a" * 40, "b" * 40, "c" * 40, None] and data["subjects"] == {}
    assert data["runs"]["pm"][0] == [1.0, 1.01] and data["runs"]["mem"] == [1.0] * 4
    assert main(["dashboard", "--history", str(db), "--out", str(out), "--limit", "2"]) == 0
    assert _data(out / "bench" / page_name(NAMES[0], "cpu-x"))["runs"]["commit"] == ["c" * 40, None]


def test_a_bad_url_is_exit_code_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dashboard", "--history", "mysql://u:secret@db/perf", "--out", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err
    assert "mysql" in err and "accepted" in err and "secret" not in err
    assert not (tmp_path / "s").exists()


def test_without_plotly_it_names_the_extra(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "plotly.offline", None)
    assert main(["dashboard", "--history", str(tmp_path / "h.sqlite"), "--out", str(tmp_path / "s")]) == 2
    assert 'pip install "pytest-gpuperf[dashboard]"' in capsys.readouterr().err


def test_an_unwritable_out_is_exit_code_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_gpuperf.storage.history import HistoryStore

    HistoryStore(tmp_path / "h.sqlite").close()  # a store (empty): reading commands never create one
    (tmp_path / "f").write_text("x")
    assert main(["dashboard", "--history", str(tmp_path / "h.sqlite"), "--out", str(tmp_path / "f")]) == 2
    assert str(tmp_path / "f") in capsys.readouterr().err


def test_change_points_and_subjects_reach_the_pages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real detector (verdict.changepoints.find_change_points) finds the +20% step of both
    benchmarks at the sixth of 10 runs; its commit range, bisect command and the subjects (from the
    store where the run recorded one, else from the checkout's git log) reach the pages."""
    repo = tmp_path / "repo"
    repo.mkdir()
    init(repo)
    shas = []
    for i in range(10):
        (repo / "f.txt").write_text(str(i))
        shas.append(commit(repo, f"change {i} <x>"))
    monkeypatch.chdir(repo)
    db, out = tmp_path / "h.sqlite", tmp_path / "site"
    with HistoryStore(db) as store:
        for i, sha in enumerate(shas):
            run = RunRecord(run_id=f"run{i}", created_utc=f"2026-01-{i + 1:02d}T00:00:00+00:00", mode="compare",
                            commit=sha, branch="main", machine="box", device_key="cpu-x",
                            subject="recorded subject" if i == 0 else None)
            level = (1.2 if i >= 5 else 1.0) * (1 + 0.004 * ((i * 7) % 5 - 2))  # +20% from run 5; jitter
            rows = [ResultRow(benchmark=n, median_ms=level * (1 + j), rounds=10, device_key="cpu-x",
                              process_medians_ms=tuple(level * (1 + j) * (1 + 0.003 * k) for k in (-1, 0, 1)))
                    for j, n in enumerate(NAMES)]
            assert store.append(run, rows)
    assert main(["dashboard", "--history", str(db), "--out", str(out)]) == 0
    data = _data(out / "bench" / page_name(NAMES[0], "cpu-x"))
    assert data["subjects"] == {s: "recorded subject" if i == 0 else f"change {i} <x>" for i, s in enumerate(shas)}
    (c,) = data["changes"]
    assert c["pos"] == 5 and c["range"] == f"{shas[4][:9]}..{shas[5][:9]}" and c["slower"]
    assert f"gpuperf bisect {shas[4][:9]} {shas[5][:9]} -- " in c["bisect"]
    assert f"{shas[4][:9]}..{shas[5][:9]}" in (out / "regressions.html").read_text(encoding="utf-8")


def test_the_80_250_90_ms_history_is_marked_with_both_changes_and_their_p_values(tmp_path: Path,
                                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 47: three runs at about 80 ms, three at 250, three at 90: the page said "No change point
    in this series" under a plot that showed the step; now both steps are marked, with p < 0.001."""
    monkeypatch.chdir(tmp_path)
    db, out = tmp_path / "h.sqlite", tmp_path / "site"
    with HistoryStore(db) as store:
        for i, ms in enumerate([78.0, 86.0, 80.0, 190.0, 255.0, 330.0, 84.0, 100.0, 88.0]):
            run = RunRecord(run_id=f"run{i}", created_utc=f"2026-01-{i + 1:02d}T00:00:00+00:00", mode="compare",
                            commit=f"{i:x}" * 40, branch="main", machine="box", device_key="cpu-x")
            assert store.append(run, [ResultRow(benchmark=NAMES[0], median_ms=ms, rounds=10, device_key="cpu-x",
                                                process_medians_ms=(ms * 0.99, ms, ms * 1.01))])
    assert main(["dashboard", "--history", str(db), "--out", str(out)]) == 0
    page = out / "bench" / page_name(NAMES[0], "cpu-x")
    changes = _data(page)["changes"]
    assert [(c["pos"], c["slower"], c["range"]) for c in changes] == [(3, True, "222222222..333333333"),
                                                                      (6, False, "555555555..666666666")]
    assert all(0 < c["p"] < 0.001 for c in changes)
    assert "No change point in this series" not in page.read_text(encoding="utf-8")
