"""The history store (issue 34, storage/history.py) on real databases: SQLite files and a
throwaway PostgreSQL cluster (tests/pgcluster.py). A run is all or nothing, concurrent writers lose
no row, a newer or corrupt store is refused and left untouched, credentials are never shown."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

sqlalchemy = pytest.importorskip("sqlalchemy")

from pytest_gpuperf.storage import history as h  # noqa: E402

HERE = Path(__file__).resolve().parent


def _run(i: int, mode: str = "compare", **kw) -> h.RunRecord:
    return h.RunRecord(run_id=f"run-{i}", created_utc=f"2026-11-26T10:{i:02d}:00Z", mode=mode, commit=f"{i:040x}",
                       branch="main", dirty=False, machine="host", device_key="cpu-x", torch_version="2.13.0",
                       options={"threshold": 0.05}, **kw)


def _rows(n: int, base: float = 1.0) -> list[h.ResultRow]:
    return [h.ResultRow(benchmark=f"m.py::t{k}", median_ms=base + k, rounds=50, device_key="cpu-x", iqr_ms=0.01,
                        ci_low_ms=base + k - 0.01, ci_high_ms=base + k + 0.01, process_medians_ms=(base + k,) * 3,
                        peak_memory_bytes=1024 * k, counts={"ops": k}, verdict="unchanged", ratio=1.0)
            for k in range(n)]


def test_a_run_and_its_rows_read_back(tmp_path: Path) -> None:
    with h.HistoryStore(tmp_path / "h.sqlite") as store:
        assert store.append(_run(1), _rows(3))
        assert store.append(_run(2, mode="update"), _rows(3, base=2.0))
        runs = store.runs()
        assert [r["run_id"] for r in runs] == ["run-1", "run-2"] and [r["benchmarks"] for r in runs] == [3, 3]
        assert runs[0]["options"] == {"threshold": 0.05} and runs[1]["mode"] == "update"
        assert runs[0]["commit"] == f"{1:040x}" and runs[0]["dirty"] is False
        s = store.series("m.py::t1")
        assert [r["median_ms"] for r in s] == [2.0, 3.0] and s[0]["process_medians_ms"] == (2.0, 2.0, 2.0)
        assert s[1]["counts"] == {"ops": 1} and s[1]["run_id"] == "run-2" and s[1]["branch"] == "main"
        assert store.series("m.py::t1", device_key="other") == []
        assert store.runs(limit=1)[0]["run_id"] == "run-2"


def test_a_bare_path_is_sqlite_under_the_root_and_its_folder_is_made(tmp_path: Path) -> None:
    url = h.normalize_url(".gpuperf/history.sqlite", tmp_path)
    assert url == f"sqlite:///{tmp_path.resolve()}/.gpuperf/history.sqlite"
    with h.HistoryStore(".gpuperf/history.sqlite", root=tmp_path) as store:
        store.append(_run(1), _rows(1))
    assert (tmp_path / ".gpuperf" / "history.sqlite").is_file()
    assert h.normalize_url("postgres://u:p@db/x") == "postgresql+psycopg://u:p@db/x"


def test_the_same_run_is_stored_once(tmp_path: Path) -> None:
    with h.HistoryStore(tmp_path / "h.sqlite") as store:
        assert store.append(_run(1), _rows(2))
        assert not store.append(_run(1), _rows(2))
        assert len(store.runs()) == 1 and len(store.series()) == 2


def test_a_run_that_cannot_be_written_whole_leaves_nothing(tmp_path: Path) -> None:
    bad = _rows(3)
    bad[2] = h.ResultRow(benchmark=None, median_ms=1.0, rounds=1)  # type: ignore[arg-type] - NOT NULL
    with h.HistoryStore(tmp_path / "h.sqlite") as store:
        store.append(_run(1), _rows(1))
        with pytest.raises(h.HistoryError, match="nothing of it was stored"):
            store.append(_run(2), bad)
        assert [r["run_id"] for r in store.runs()] == ["run-1"] and len(store.series()) == 1


KILLED_WRITER = textwrap.dedent("""
    import os, signal, sys
    sys.path.insert(0, {tests!r})
    from pytest_gpuperf.storage import history as h
    from test_history_store import _rows, _run
    real, seen = h._row_values, []
    def dying(key, row):
        seen.append(row)
        if len(seen) == 3:  # the run's row is inserted, its results half made: killed mid-transaction
            os.kill(os.getpid(), signal.SIGKILL)
        return real(key, row)
    h._row_values = dying
    h.HistoryStore({path!r}).append(_run(2), _rows(5))
""")


def test_a_killed_writer_leaves_no_partial_run(tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite"
    with h.HistoryStore(path) as store:
        store.append(_run(1), _rows(2))
    proc = subprocess.run([sys.executable, "-c", KILLED_WRITER.format(tests=str(HERE), path=str(path))],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    with h.HistoryStore(path) as store:
        assert [r["run_id"] for r in store.runs()] == ["run-1"] and len(store.series()) == 2


def _writer(url: str, first: int, runs: int) -> None:
    with h.HistoryStore(url) as store:
        for i in range(first, first + runs):
            assert store.append(_run(i), _rows(4))


def _concurrent(url: str, writers: int = 4, runs: int = 5) -> None:
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(url, w * runs, runs)) for w in range(writers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    with h.HistoryStore(url) as store:
        assert len(store.runs()) == writers * runs
        assert len(store.series()) == writers * runs * 4
        assert all(r["benchmarks"] == 4 for r in store.runs())


def test_writers_at_once_lose_no_row_sqlite(tmp_path: Path) -> None:
    _concurrent(str(tmp_path / "h.sqlite"))


def test_a_store_of_a_newer_plugin_is_refused_and_untouched(tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite"
    with h.HistoryStore(path) as store:
        store.append(_run(1), _rows(1))
        with store.engine.begin() as conn:
            conn.execute(store.t["schema"].update().values(version=h.SCHEMA_VERSION + 1))
    before = path.read_bytes()
    with pytest.raises(h.HistoryError, match=rf"schema version {h.SCHEMA_VERSION + 1}.*newer pytest-gpuperf"):
        h.HistoryStore(path)
    assert path.read_bytes() == before


def _as_version_1(store: h.HistoryStore) -> None:
    """Make ``store`` what schema version 1 wrote: no subject and commit_time columns (nor version
    3's cpu_median_ms and clock, version 4's estimate_ms, version 5's instructions, version 6's
    sm_clock_mhz)."""
    with store.engine.begin() as conn:
        for column in ("subject", "commit_time"):
            conn.exec_driver_sql(f"ALTER TABLE gpuperf_runs DROP COLUMN {column}")
        for column in ("cpu_median_ms", "clock", "estimate_ms", "instructions", "sm_clock_mhz"):
            conn.exec_driver_sql(f"ALTER TABLE gpuperf_results DROP COLUMN {column}")
        conn.execute(store.t["schema"].update().values(version=1))


def _migrates_keeping_the_runs(url: str) -> None:
    with h.HistoryStore(url) as store:
        store.append(_run(1), _rows(2))
        _as_version_1(store)
    with h.HistoryStore(url) as store:  # opening migrates to the current version, in one transaction
        with store.engine.connect() as conn:
            assert conn.execute(store._sa.select(store.t["schema"].c.version)).scalars().all() == [h.SCHEMA_VERSION]
        assert store.append(_run(2, subject="Faster conv", commit_time="2026-11-26T10:00:00+00:00"), _rows(2))
        s = store.series("m.py::t1")
        assert [r["run_id"] for r in s] == ["run-1", "run-2"] and [r["subject"] for r in s] == [None, "Faster conv"]
        # a row from before schema 4 reads with its run's median computed as the verdict computes it (issue 47)
        from pytest_gpuperf.verdict.estimate import run_estimate_ms

        assert s[0]["estimate_ms"] == run_estimate_ms(s[0]["median_ms"], s[0]["process_medians_ms"])
        assert s[0]["instructions"] is None  # not counted before schema 5 (issue 48)
        assert s[0]["sm_clock_mhz"] is None  # not read before schema 6 (issue 49)
        assert store.runs()[1]["commit_time"] == "2026-11-26T10:00:00+00:00"


def test_a_version_1_store_is_migrated_keeping_its_runs_sqlite(tmp_path: Path) -> None:
    _migrates_keeping_the_runs(str(tmp_path / "h.sqlite"))


def test_a_migration_that_fails_leaves_the_store_as_it_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "h.sqlite"
    with h.HistoryStore(path) as store:
        store.append(_run(1), _rows(1))
        _as_version_1(store)
    monkeypatch.setitem(h.MIGRATIONS, 2, h.MIGRATIONS[2] + ("ALTER TABLE no_such_table ADD COLUMN x INTEGER",))
    with pytest.raises(h.HistoryError, match="cannot open it"):
        h.HistoryStore(path)
    monkeypatch.undo()
    with h.HistoryStore(path) as store:  # still version 1 with its run: the failed migration rolled back whole
        assert [r["run_id"] for r in store.runs()] == ["run-1"]


def test_a_corrupt_sqlite_file_is_named_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite"
    path.write_bytes(b"this is not a database\n" * 200)
    before = path.read_bytes()
    with pytest.raises(h.HistoryError) as err:
        h.HistoryStore(path)
    assert str(path) in str(err.value) and "left untouched" in str(err.value)
    assert path.read_bytes() == before


def test_an_unknown_scheme_names_what_is_accepted() -> None:
    with pytest.raises(h.HistoryError, match=r"'mysql'.*accepted: sqlite:///PATH") as err:
        h.normalize_url("mysql://root:hunter2@db/x")
    assert "hunter2" not in str(err.value)


@pytest.mark.parametrize(("given", "password", "host", "query"), [
    ("postgresql://ci:p@ss/w@db:5432/perf", "p@ss/w", "db", {}),
    ("postgres://ci:p@ss@db/perf?user=a@b.example", "p@ss", "db", {"user": "a@b.example"}),
    ("postgresql://db/perf?user=a@b.example", None, "db", {"user": "a@b.example"}),
    ("postgresql+psycopg://ci:a%40b@db/perf", "a@b", "db", {}),
])
def test_a_password_with_an_unencoded_at_is_read_whole(given: str, password: str | None, host: str,
                                                       query: dict[str, str]) -> None:
    url = sqlalchemy.engine.make_url(h.normalize_url(given))
    assert (url.password, url.host, url.database, dict(url.query)) == (password, host, "perf", query)


def test_a_libpq_key_value_dsn_is_refused_with_its_password_hidden(tmp_path: Path) -> None:
    with pytest.raises(h.HistoryError, match="key=value connection string") as err:
        h.normalize_url("host=db user=ci password=hunter2,x dbname=perf", tmp_path)
    assert "hunter2" not in str(err.value) and "password=***" in str(err.value)
    assert list(tmp_path.iterdir()) == []  # no SQLite file named after it


def test_a_read_only_store_is_immutable_only_where_its_wal_cannot_be_opened(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    with h.HistoryStore(db) as store:
        store.append(_run(1), _rows(2))
    wal = Path(f"{db}-wal")
    wal.mkdir()  # as on a read-only filesystem: "unable to open database file"
    assert h.read_only_uri(str(db)) == f"file:{db}?mode=ro&immutable=1"
    with h.HistoryStore(db, read_only=True) as store:
        assert [r["run_id"] for r in store.runs()] == ["run-1"]
    wal.rmdir()
    assert h.read_only_uri(str(db)) == f"file:{db}?mode=ro"
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"not a database" * 100)
    assert h.read_only_uri(str(junk)) == f"file:{junk}?mode=ro"  # left to the store's connection to report


@pytest.mark.parametrize(("error", "immutable"), [("unable to open database file", True),
                                                  ("attempt to write a readonly database", True),
                                                  ("database is locked", False), ("disk I/O error", False)])
def test_read_only_uri_falls_back_on_the_errors_of_an_unwritable_wal_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: str, immutable: bool) -> None:
    import sqlite3

    def refuse(*args: object, **kw: object) -> None:
        raise sqlite3.OperationalError(error)

    monkeypatch.setattr(sqlite3, "connect", refuse)
    assert h.read_only_uri("/data/h.sqlite").endswith("&immutable=1") is immutable


def test_redact_hides_the_password_only() -> None:
    assert h.redact("postgresql://ci:pa55@db:5432/perf") == "postgresql://ci:***@db:5432/perf"
    assert h.redact("postgresql://ci@db/perf") == "postgresql://ci@db/perf"
    assert h.redact("sqlite:////tmp/h.sqlite") == "sqlite:////tmp/h.sqlite"


# ------------------------------------------------------------------ PostgreSQL (a real server)


# the `pg` fixture (a throwaway cluster per module): tests/conftest.py


def test_postgresql_runs_read_back_and_writers_at_once_lose_no_row(pg) -> None:
    with h.HistoryStore(pg.url) as store:
        assert store.append(_run(100), _rows(2))
        assert not store.append(_run(100), _rows(2))
        assert store.series("m.py::t1")[0]["median_ms"] == 2.0
        with store.engine.begin() as conn:  # the concurrency check below counts from an empty store
            conn.execute(store.t["results"].delete())
            conn.execute(store.t["runs"].delete())
    _concurrent(pg.url)


def test_a_version_1_store_is_migrated_keeping_its_runs_postgresql(pg) -> None:
    _migrates_keeping_the_runs(pg.database("migrate"))


def test_postgresql_bad_password_and_unreachable_server_never_show_the_password(pg) -> None:
    from pgcluster import PASSWORD

    wrong = pg.url.replace(PASSWORD, "not-the-password")
    with pytest.raises(h.HistoryError) as err:
        h.HistoryStore(wrong)
    assert "not-the-password" not in str(err.value) and PASSWORD not in str(err.value)
    assert f"127.0.0.1:{pg.port}" in str(err.value) and "***" in str(err.value)
    closed = pg.url.replace(f":{pg.port}/", ":1/")
    with pytest.raises(h.HistoryError, match="cannot open it") as err:
        h.HistoryStore(closed)
    assert PASSWORD not in str(err.value)
