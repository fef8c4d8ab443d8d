"""``gpuperf changes`` (issue 34): a store filled through ``HistoryStore.append`` with a step at a
known run; the output names the commit range and the ``gpuperf bisect`` command for it, ``--json``
says the same for machines, and an unusable store is exit code 2."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest

from pytest_gpuperf.cli import main
from pytest_gpuperf.cli.changes import pytest_node_id
from pytest_gpuperf.storage.history import HistoryError, HistoryStore, ResultRow, RunRecord

STEP = "tests/perf/test_w.py::test_gemm[64-fp16]"
FLAT = "tests/perf/test_w.py::TestConv::test_conv::forward"


def sha(i: int) -> str:
    return hashlib.sha1(f"commit {i}".encode()).hexdigest()


def _fill(url: str | Path, runs: int = 10, step_at: int = 5, step: float = 1.2, seed: int = 0,
          branch: str = "main", key: str = "cpu-x", first: int = 0) -> None:
    """``runs`` runs (commits ``sha(first + i)``), each with three process medians per benchmark
    (between-process CV 2%); STEP is ``step`` times slower from run ``step_at`` (0-based) on."""
    rng = np.random.default_rng(seed)
    with HistoryStore(url) as store:
        for i in range(runs):
            rows = []
            for bench, level in ((STEP, step if i >= step_at else 1.0), (FLAT, 2.0)):
                pm = tuple(float(level * (1 + rng.normal(0, 0.02))) for _ in range(3))
                rows.append(ResultRow(benchmark=bench, median_ms=float(np.median(pm)), rounds=20, device_key=key,
                                      process_medians_ms=pm))
            run = RunRecord(run_id=f"{branch}-{key}-{first + i}", created_utc=f"2025-02-{first + i + 1:02d}T00:00:00Z",
                            mode="compare", commit=sha(first + i), branch=branch, device_key=key)
            assert store.append(run, rows)


def test_a_step_at_run_6_names_its_commit_range_and_the_bisect_command(tmp_path: Path, capsys) -> None:
    db = tmp_path / "h.sqlite"
    _fill(db)
    assert main(["changes", "--history", str(db)]) == 0
    out = capsys.readouterr().out
    assert STEP in out and FLAT not in out  # the flat benchmark prints nothing
    assert f"commits {sha(4)[:12]}..{sha(5)[:12]}" in out and "slower +" in out and "from run 6 of 10" in out
    assert f"gpuperf bisect {sha(4)[:12]} {sha(5)[:12]} -- '{STEP}'" in out
    assert "1 change(s) in 1 of 2 series" in out


def test_json_says_the_same_for_machines(tmp_path: Path, capsys) -> None:
    db = tmp_path / "h.sqlite"
    _fill(db)
    assert main(["changes", "--history", str(db), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["series"] == 2 and data["pvalue"] == 0.001 and data["min_runs"] == 3
    (c,) = data["changes"]
    assert (c["benchmark"], c["device_key"], c["index"], c["runs"]) == (STEP, "cpu-x", 5, 10)
    assert (c["before_commit"], c["after_commit"]) == (sha(4), sha(5))
    assert (c["before_run"], c["after_run"]) == ("main-cpu-x-4", "main-cpu-x-5")
    assert c["slower"] and 15 < c["change_pct"] < 25 and c["pvalue"] < 0.001
    assert c["median_after_ms"] / c["median_before_ms"] == pytest.approx(1 + c["change_pct"] / 100)
    assert c["bisect"] == f"gpuperf bisect {sha(4)[:12]} {sha(5)[:12]} -- '{STEP}'" and c["no_bisect_because"] is None


def test_no_change_says_so_and_a_speedup_has_no_bisect_command(tmp_path: Path, capsys) -> None:
    db = tmp_path / "h.sqlite"
    _fill(db, step=1.0)
    assert main(["changes", "--history", str(db)]) == 0
    out = capsys.readouterr().out
    assert "no change in 2 series" in out and STEP not in out
    faster = tmp_path / "f.sqlite"
    _fill(faster, step=0.7)
    assert main(["changes", "--history", str(faster)]) == 0
    out = capsys.readouterr().out
    assert "faster -" in out and "gpuperf bisect searches for slowdowns" in out and "gpuperf bisect " + sha(4)[:12] not in out


def test_branch_device_and_k_select_the_series(tmp_path: Path, capsys) -> None:
    db = tmp_path / "h.sqlite"
    _fill(db, step=1.0, key="cpu-x")
    _fill(db, key="cuda-y", first=20)  # the step is on cuda-y only
    _fill(db, branch="feature", step=3.0, key="cuda-y", first=40, seed=1)
    assert main(["changes", "--history", str(db), "--json", "--branch", "main"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["series"] == 4 and [(c["device_key"], c["index"]) for c in data["changes"]] == [("cuda-y", 5)]
    assert main(["changes", "--history", str(db), "--json", "--branch", "main", "--device", "cpu-x"]) == 0
    assert json.loads(capsys.readouterr().out)["changes"] == []
    assert main(["changes", "--history", str(db), "--json", "--branch", "main", "-k", "TestConv"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["series"] == 2 and data["changes"] == []
    assert main(["changes", "--history", str(db), "-k", "no_such_benchmark"]) == 0
    assert "no benchmark in the store matches" in capsys.readouterr().err


def test_min_change_and_min_runs_and_pvalue_options(tmp_path: Path, capsys) -> None:
    db = tmp_path / "h.sqlite"
    _fill(db)
    assert main(["changes", "--history", str(db), "--min-change", "50"]) == 0
    assert "no change in 2 series" in capsys.readouterr().out
    assert main(["changes", "--history", str(db), "--min-runs", "6"]) == 0  # 5 runs after the step: too few
    assert "no change" in capsys.readouterr().out
    assert main(["changes", "--history", str(db), "--pvalue", "1e-30"]) == 0
    assert "no change" in capsys.readouterr().out
    for bad in (["--pvalue", "0"], ["--pvalue", "x"], ["--min-runs", "1"], ["--min-change", "-1"]):
        assert main(["changes", "--history", str(db), *bad]) == 2
        assert bad[0] in capsys.readouterr().err


def test_an_unusable_store_or_url_is_exit_code_2(tmp_path: Path, capsys) -> None:
    assert main(["changes", "--history", str(tmp_path / "missing.sqlite")]) == 2
    err = capsys.readouterr().err
    assert "no history store at" in err and "missing.sqlite" in err
    assert not (tmp_path / "missing.sqlite").exists()  # reading never creates a store
    assert main(["changes", "--history", "ftp://host/x"]) == 2
    assert "scheme 'ftp' is not accepted" in capsys.readouterr().err
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"not a database at all" * 100)
    assert main(["changes", "--history", str(junk)]) == 2
    assert "junk.sqlite" in capsys.readouterr().err


def test_the_default_store_is_found_as_git_finds_its_repository_and_never_created(tmp_path: Path, capsys,
                                                                                   monkeypatch) -> None:
    # issue 46: a reading command in a folder without a store created one (and a .gitignore) and exited 0
    monkeypatch.chdir(tmp_path)
    for command in (["changes"], ["history", "runs"], ["history", "export"], ["dashboard", "--out", "site"]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert f"looked for .gpuperf/history.sqlite in {tmp_path} and its parents" in err, command
    assert not (tmp_path / ".gpuperf").exists() and not (tmp_path / "site").exists()
    store = tmp_path / ".gpuperf" / "history.sqlite"
    _fill(store)
    before = store.read_bytes()
    sub = tmp_path / "pkg" / "tests"
    sub.mkdir(parents=True)
    monkeypatch.chdir(sub)  # from a subfolder: the project's store
    assert main(["changes"]) == 0
    assert "1 change(s)" in capsys.readouterr().out
    assert main(["history", "runs"]) == 0
    assert capsys.readouterr().out.count("compare") == 10
    assert not (sub / ".gpuperf").exists() and not (tmp_path / "pkg" / ".gpuperf").exists()
    assert store.read_bytes() == before  # opened read-only


def _project(tmp_path: Path) -> Path:
    """A project whose ``.gpuperf/history.sqlite`` holds ten runs (a step at run 6), closed (its WAL
    folded into the file) and without the ``.gitignore`` the writer put beside it."""
    store = tmp_path / ".gpuperf" / "history.sqlite"
    _fill(store)
    (store.parent / ".gitignore").unlink()
    return store


def _listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def _read_with_both_commands(project: Path, capsys, monkeypatch) -> None:
    """``gpuperf history runs`` and ``gpuperf changes`` in ``project`` (its default store) read all of it."""
    monkeypatch.chdir(project)
    assert main(["history", "runs"]) == 0, capsys.readouterr().err
    assert capsys.readouterr().out.count("compare") == 10
    assert main(["changes"]) == 0, capsys.readouterr().err
    assert "1 change(s)" in capsys.readouterr().out


def test_reading_commands_read_a_store_whose_wal_cannot_be_created_and_create_nothing(tmp_path: Path, capsys,
                                                                                      monkeypatch) -> None:
    # a WAL store on a read-only filesystem: mode=ro cannot create its -wal ("unable to open database
    # file"; history runs and changes exited 2). A -wal that is a folder fails the same way, root or not.
    store = _project(tmp_path)
    Path(f"{store}-wal").mkdir()
    before, content = _listing(tmp_path), store.read_bytes()
    _read_with_both_commands(tmp_path, capsys, monkeypatch)
    assert _listing(tmp_path) == before  # no .gitignore, no -shm, nothing
    assert store.read_bytes() == content


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0,
                    reason="root writes into a folder of mode 0o555 (the test above fails the WAL for root too)")
def test_reading_commands_read_a_store_in_a_read_only_folder(tmp_path: Path, capsys, monkeypatch) -> None:
    # mode=ro in a folder it may not write: "attempt to write a readonly database"
    store = _project(tmp_path)
    before, content = _listing(tmp_path), store.read_bytes()
    folders = [store.parent, tmp_path]
    store.chmod(0o444)
    for f in folders:
        f.chmod(0o555)
    try:
        _read_with_both_commands(tmp_path, capsys, monkeypatch)
    finally:
        for f in folders:
            f.chmod(0o755)
    assert _listing(tmp_path) == before and store.read_bytes() == content


def test_a_store_whose_schema_version_is_text_is_a_clear_error_and_left_untouched(tmp_path: Path, capsys) -> None:
    import sqlite3

    db = tmp_path / "h.sqlite"
    _fill(db, runs=2)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE gpuperf_schema SET version = 'three'")
    before = db.read_bytes()
    for command in (["history", "runs", "--history", str(db)], ["changes", "--history", str(db)]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert "its schema version is 'three', not a whole number" in err and "Traceback" not in err
    with pytest.raises(HistoryError, match="schema version is 'three'"):
        HistoryStore(db)  # the writer too
    assert db.read_bytes() == before


@pytest.mark.parametrize("name, node", [
    ("tests/perf/test_w.py::test_gemm", "tests/perf/test_w.py::test_gemm"),
    ("tests/perf/test_w.py::test_gemm::forward", "tests/perf/test_w.py::test_gemm"),
    ("tests/perf/test_w.py::TestConv::test_conv[3-a::b]::fwd", "tests/perf/test_w.py::TestConv::test_conv[3-a::b]"),
    ("tests/perf/test_w.py::TestOuter::TestInner::test_x", "tests/perf/test_w.py::TestOuter::TestInner::test_x"),
    ("tests/perf/test_w.py", "tests/perf/test_w.py"),
])
def test_a_benchmark_name_maps_to_the_pytest_node_id_that_selects_it(name: str, node: str) -> None:
    assert pytest_node_id(name) == node


# ------------------------------------------------------------------ PostgreSQL (a real server)


# the `pg` fixture (a throwaway cluster per module): tests/conftest.py


def test_postgresql_store_gives_the_same_change_and_hides_its_password(pg, capsys) -> None:
    from pgcluster import PASSWORD

    _fill(pg.url)
    assert main(["changes", "--history", pg.url, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [(c["benchmark"], c["index"], c["after_commit"]) for c in data["changes"]] == [(STEP, 5, sha(5))]
    assert PASSWORD not in data["history"] and "***" in data["history"]
    assert main(["changes", "--history", pg.url.replace(PASSWORD, "wrong-pw")]) == 2
    err = capsys.readouterr().err
    assert "wrong-pw" not in err and PASSWORD not in err


def test_three_runs_at_80_250_and_90_ms_are_two_changes_at_the_default_level(tmp_path: Path, capsys) -> None:
    # issue 47: the history a user saw: no change at the default level before, both steps at --pvalue 0.05
    db = tmp_path / "h.sqlite"
    levels = [78.0, 86.0, 80.0, 190.0, 255.0, 330.0, 84.0, 100.0, 88.0]  # ms, one value per run
    with HistoryStore(db) as store:
        for i, ms in enumerate(levels):
            pm = (ms * 0.99, ms, ms * 1.01)  # the run's value is the median of its process medians: ms
            store.append(RunRecord(run_id=f"r{i}", created_utc=f"2025-03-{i + 1:02d}T00:00:00Z", mode="compare",
                                   commit=sha(i), branch="main", device_key="cpu-x"),
                         [ResultRow(benchmark=STEP, median_ms=ms, rounds=20, device_key="cpu-x", process_medians_ms=pm)])
    assert main(["changes", "--history", str(db), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["pvalue"] == 0.001
    assert [(c["index"], c["slower"], c["before_commit"], c["after_commit"]) for c in data["changes"]] == [
        (3, True, sha(2), sha(3)), (6, False, sha(5), sha(6))]
    assert all(c["pvalue"] < 0.001 and c["runs_before"] == c["runs_after"] == 3 for c in data["changes"])
    assert 150 < data["changes"][0]["change_pct"] < 250 and -75 < data["changes"][1]["change_pct"] < -50
