"""The history store from a user's pytest run (issue 34): every measuring run is recorded by the
session the user started, nothing by smoke runs or worker processes; an unreachable store is a
warning (an error under --gpuperf-strict) and never fails the tests or loses the reports.
Timings are scripted (tests/scripted.py)."""

from __future__ import annotations

import json

import pytest

from scripted import script_timings

pytest_plugins = ["pytester"]

BODY = """
import pytest

@pytest.mark.gpu_bench(max_time=0.05, warmup_time=0.0, device="cpu", counts=False)
def test_a(gpu_bench):
    gpu_bench(sum, range(10))

@pytest.mark.gpu_bench(max_time=0.05, warmup_time=0.0, device="cpu", counts=False)
def test_b(gpu_bench):
    gpu_bench(sum, range(20))
"""
ONE = ("-p", "no:cacheprovider", "--gpuperf-processes=1")
STEADY = {"ms": 1.0, "cv": 0.02, "seed": 1}


def _store(pytester: pytest.Pytester):
    from pytest_gpuperf.storage.history import HistoryStore

    return HistoryStore(pytester.path / ".gpuperf" / "history.sqlite")


def test_each_measuring_run_is_recorded_with_its_rows(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_bench=BODY)
    script_timings(pytester, STEADY)
    pytester.runpytest("--gpuperf-update-baselines", *ONE).assert_outcomes(passed=2)
    pytester.runpytest("--gpuperf", *ONE).assert_outcomes(passed=2)
    pytester.runpytest(*ONE).assert_outcomes(passed=2)  # smoke mode: not recorded
    with _store(pytester) as store:
        runs = store.runs()
        assert [r["mode"] for r in runs] == ["update", "compare"] and [r["benchmarks"] for r in runs] == [2, 2]
        assert runs[0]["device_key"].startswith("cpu-") and runs[0]["torch_version"]
        assert runs[1]["options"]["processes"] == 1 and runs[0]["commit"] is None  # not a git checkout
        rows = store.series("test_bench.py::test_a")
        assert [r["verdict"] for r in rows] == ["no-baseline", "unchanged"]
        assert all(0.9 < r["median_ms"] < 1.1 and r["rounds"] >= 1 for r in rows)
        assert rows[1]["ratio"] == pytest.approx(1.0, abs=0.1)
    assert pytester.path.joinpath(".gpuperf", ".gitignore").read_text().splitlines()[-1] == "*"  # never committed


def test_history_off_records_nothing(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_bench=BODY)
    script_timings(pytester, STEADY)
    pytester.runpytest("--gpuperf", "--gpuperf-no-history", *ONE).assert_outcomes(passed=2)
    pytester.makeini("[pytest]\ngpuperf_history_url = off\n")
    pytester.runpytest("--gpuperf", *ONE).assert_outcomes(passed=2)
    assert not (pytester.path / ".gpuperf" / "history.sqlite").exists()


def test_a_store_given_by_url_and_by_ini(pytester: pytest.Pytester) -> None:
    from pytest_gpuperf.storage.history import HistoryStore

    pytester.makepyfile(test_bench=BODY)
    script_timings(pytester, STEADY)
    pytester.runpytest("--gpuperf", f"--gpuperf-history=sqlite:///{pytester.path}/h1.sqlite", *ONE
                       ).assert_outcomes(passed=2)
    pytester.makeini("[pytest]\ngpuperf_history_url = stores/h2.sqlite\n")
    pytester.runpytest("--gpuperf", *ONE).assert_outcomes(passed=2)
    for name in ("h1.sqlite", "stores/h2.sqlite"):
        with HistoryStore(pytester.path / name) as store:
            assert len(store.runs()) == 1
    assert not (pytester.path / ".gpuperf" / "history.sqlite").exists()


def test_an_unreachable_store_warns_and_loses_no_report_strict_fails(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_bench=BODY)
    script_timings(pytester, STEADY)
    url = "postgresql://ci:hunter2-secret@127.0.0.1:1/perf"
    rec = pytester.runpytest("--gpuperf", f"--gpuperf-history={url}", "--gpuperf-json=r.json", *ONE)
    rec.assert_outcomes(passed=2)
    assert rec.ret == 0
    out = rec.stdout.str()
    assert "not recorded in the history" in out and "postgresql://ci:***@127.0.0.1:1/perf" in out
    assert "hunter2-secret" not in out + rec.stderr.str()
    report = json.loads((pytester.path / "r.json").read_text())
    assert len(report["benchmarks"]) == 2 and "hunter2-secret" not in json.dumps(report)
    strict = pytester.runpytest("--gpuperf", "--gpuperf-strict", f"--gpuperf-history={url}", *ONE)
    strict.assert_outcomes(passed=2)
    assert strict.ret == 1 and "an error under --gpuperf-strict" in strict.stdout.str()
    assert "hunter2-secret" not in strict.stdout.str()


STOPS_THE_SERVER = """
import json, os, subprocess
import pytest

@pytest.mark.gpu_bench(max_time=0.05, warmup_time=0.0, device="cpu", counts=False)
def test_a(gpu_bench):
    gpu_bench(sum, range(10))

def test_the_server_goes_away():  # an administrator stops it while the session runs
    subprocess.run(json.loads(os.environ["STOP_SERVER"]), check=True, capture_output=True, timeout=120)
"""


def test_a_server_stopped_mid_session_warns_keeps_the_reports_and_stores_no_partial_run(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, pg) -> None:
    """A real PostgreSQL server that is up when the session starts (the run before is stored) and
    stopped during its tests: the session's run is not recorded, with the warning (the password
    never shown); the tests and the JSON report stand; once the server is back, the store holds
    the earlier run whole and nothing of the one it lost."""
    from pytest_gpuperf.storage.history import HistoryStore

    url = pg.database("stopped")
    password = url.split(":")[2].split("@")[0]
    pytester.makepyfile(test_bench=STOPS_THE_SERVER)
    script_timings(pytester, STEADY)
    monkeypatch.setenv("STOP_SERVER", json.dumps(["true"]))
    pytester.runpytest("--gpuperf-update-baselines", f"--gpuperf-history={url}", *ONE).assert_outcomes(passed=2)
    monkeypatch.setenv("STOP_SERVER", json.dumps(pg.pause_command()))
    try:
        rec = pytester.runpytest("--gpuperf", f"--gpuperf-history={url}", "--gpuperf-json=r.json", *ONE)
        rec.assert_outcomes(passed=2)
        out = rec.stdout.str() + rec.stderr.str()
        assert rec.ret == 0 and "not recorded in the history" in out and "***" in out
        assert password not in out and "INTERNALERROR" not in out
        report = json.loads((pytester.path / "r.json").read_text())
        assert report["benchmarks"]["test_bench.py::test_a"]["verdict"] == "unchanged"
    finally:
        pg.resume()
    with HistoryStore(url) as store:
        runs = store.runs()
        assert [r["mode"] for r in runs] == ["update"] and runs[0]["benchmarks"] == 1
        assert [r["verdict"] for r in store.series("test_bench.py::test_a")] == ["no-baseline"]


def test_a_corrupt_store_is_named_and_left_untouched(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_bench=BODY)
    script_timings(pytester, STEADY)
    path = pytester.path / ".gpuperf" / "history.sqlite"
    path.parent.mkdir()
    path.write_bytes(b"not a database\n" * 100)
    rec = pytester.runpytest("--gpuperf", *ONE)
    rec.assert_outcomes(passed=2)
    assert "history.sqlite" in rec.stdout.str() and "left untouched" in rec.stdout.str()
    assert path.read_bytes() == b"not a database\n" * 100


def test_a_url_of_another_scheme_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_bench=BODY)
    rec = pytester.runpytest("--gpuperf", "--gpuperf-history=mysql://root:pw@db/x", *ONE)
    assert rec.ret == pytest.ExitCode.USAGE_ERROR
    rec.stderr.fnmatch_lines(["*'mysql' is not accepted*sqlite:///PATH*--gpuperf-history*"])
    assert ":pw@" not in rec.stderr.str()


def test_under_xdist_the_controller_records_one_run(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    pytester.makepyfile(test_bench=BODY)
    script_timings(pytester, STEADY)
    pytester.runpytest_subprocess("--gpuperf", "-n", "2", *ONE).assert_outcomes(passed=2)
    with _store(pytester) as store:
        runs = store.runs()
        assert len(runs) == 1 and runs[0]["benchmarks"] == 2
