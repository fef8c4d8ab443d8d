"""``gpuperf history import / runs / export`` (issue 34): past runs brought in from a real
pytest-benchmark saved run and from this plugin's JSON report, each stored once; a file that is
neither is refused by name and stores nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_gpuperf.cli import main
from scripted import script_timings

pytest_plugins = ["pytester"]

PB_TEST = """
def test_sum(benchmark):
    benchmark(sum, range(100))
"""
GP_TEST = """
import pytest

@pytest.mark.gpu_bench(max_time=0.05, warmup_time=0.0, device="cpu", counts=False)
def test_a(gpu_bench):
    gpu_bench(sum, range(10))
"""


def _runs(db: Path) -> list[dict]:
    from pytest_gpuperf.storage.history import HistoryStore

    with HistoryStore(db) as store:
        return store.runs()


def test_a_pytest_benchmark_saved_run_is_imported_once(pytester: pytest.Pytester, capsys,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("pytest_benchmark")
    monkeypatch.setenv("PYTEST_PLUGINS", "pytest_benchmark.plugin")  # pytest-benchmark itself saves the run
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)  # (it turns itself off inside an xdist worker)
    pytester.makepyfile(test_pb=PB_TEST)
    pytester.runpytest_subprocess("-p", "no:cacheprovider", "--benchmark-autosave",
                       "--benchmark-max-time=0.05").assert_outcomes(passed=1)
    saved = sorted(pytester.path.joinpath(".benchmarks").rglob("*.json"))
    assert len(saved) == 1
    data = json.loads(saved[0].read_text())
    db = pytester.path / "h.sqlite"
    assert main(["history", "import", str(saved[0]), "--history", str(db), "--branch", "main"]) == 0
    assert "1 benchmark(s) imported" in capsys.readouterr().out
    assert main(["history", "import", str(saved[0]), "--history", str(db)]) == 0
    assert "already in the store" in capsys.readouterr().out
    runs = _runs(db)
    assert len(runs) == 1 and runs[0]["mode"] == "import" and runs[0]["benchmarks"] == 1
    assert main(["history", "export", "--history", str(db), "-k", "test_sum"]) == 0
    exported = json.loads(capsys.readouterr().out)
    (row,) = exported["results"]
    assert row["median_ms"] == pytest.approx(data["benchmarks"][0]["stats"]["median"] * 1e3)
    assert row["rounds"] == data["benchmarks"][0]["stats"]["rounds"] and "test_sum" in row["benchmark"]


def test_a_gpuperf_report_is_imported_with_its_verdicts(pytester: pytest.Pytester, capsys) -> None:
    pytester.makepyfile(test_bench=GP_TEST)
    script_timings(pytester, {"ms": 1.0, "cv": 0.02, "seed": 1})
    pytester.runpytest("--gpuperf-update-baselines", "--gpuperf-processes=1", "--gpuperf-no-history",
                       "-p", "no:cacheprovider").assert_outcomes(passed=1)
    pytester.runpytest("--gpuperf", "--gpuperf-processes=1", "--gpuperf-no-history", "--gpuperf-json=r.json",
                       "-p", "no:cacheprovider").assert_outcomes(passed=1)
    db = pytester.path / "h.sqlite"
    assert main(["history", "import", str(pytester.path / "r.json"), "--history", str(db)]) == 0
    assert main(["history", "runs", "--history", str(db)]) == 0
    out = capsys.readouterr().out
    assert "import" in out and "1 benchmark(s)" in out
    assert main(["history", "export", "--history", str(db)]) == 0
    (row,) = json.loads(capsys.readouterr().out)["results"]
    assert row["benchmark"] == "test_bench.py::test_a" and row["verdict"] == "unchanged"
    assert 0.9 < row["median_ms"] < 1.1 and row["device_key"].startswith("cpu-")


def test_a_file_that_is_neither_is_refused_by_name_and_stores_nothing(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "notes.json"
    bad.write_text(json.dumps({"hello": 1}))
    db = tmp_path / "h.sqlite"
    assert main(["history", "import", str(bad), "--history", str(db)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "pytest-benchmark saved run" in err
    assert not db.exists()
    assert main(["history", "runs", "--history", "mysql://u:pw@x/y"]) == 2
    err = capsys.readouterr().err
    assert "not accepted" in err and ":pw@" not in err
