"""The performance history store (issue 34): every measuring run appended to a database, SQLite by
default (``.gpuperf/history.sqlite`` under the rootdir) or PostgreSQL for a team whose CI jobs share
one store.

A run is one row of ``runs`` (commit, branch, dirty flag, time, machine and device key, torch/CUDA/
driver versions, options, mode) and a row per benchmark in ``results`` (process medians, median,
IQR, CI, rounds, peak memory, counts, verdict and ratio). A run's rows are written in one
transaction, after the run: a run killed while writing leaves no partial run. SQLite runs in WAL
mode with a busy timeout, so several writers at once (shards, xdist workers, parallel CI jobs) wait
for each other instead of failing; PostgreSQL's transactions do the same. The schema has a version
(table ``gpuperf_schema``); a store written by a newer plugin is refused (:class:`HistoryError`).

The database layer is SQLAlchemy Core (``sqlalchemy``; PostgreSQL through psycopg 3, the
``postgresql`` extra), imported only when a store is opened. URLs: ``sqlite:///path/to/file`` (a
bare path means SQLite) or ``postgresql://user:password@host:port/db``. Messages name a URL with its
password hidden (:func:`redact`); credentials are never printed.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from pytest_gpuperf.core.secrets import redact  # every URL shown here goes through it

#: The schema this plugin writes. A store with a higher version was written by a newer plugin.
SCHEMA_VERSION = 6

#: The schema's migrations: version -> the statements that bring a store of the version before to it
#: (plain SQL that SQLite and PostgreSQL both run; applied in order, in the transaction that opens
#: the store, so a store is never left half migrated). Version 1 -> 2: each run's commit subject
#: and committer date, which the dashboard shows without a git checkout.
MIGRATIONS: dict[int, tuple[str, ...]] = {
    2: ("ALTER TABLE gpuperf_runs ADD COLUMN subject VARCHAR(500)",
        "ALTER TABLE gpuperf_runs ADD COLUMN commit_time VARCHAR(40)"),
    # version 2 -> 3: each result's median CPU time and the clock its verdict was decided on (issue 45)
    3: ("ALTER TABLE gpuperf_results ADD COLUMN cpu_median_ms FLOAT",
        "ALTER TABLE gpuperf_results ADD COLUMN clock VARCHAR(8)"),
    # version 3 -> 4: each result's median as its verdict decided on it (issue 47; the rows before
    # it are read with the same value computed from their median and process medians)
    4: ("ALTER TABLE gpuperf_results ADD COLUMN estimate_ms FLOAT",),
    # version 4 -> 5: each result's host instructions per call under callgrind (issue 48; None: not counted)
    5: ("ALTER TABLE gpuperf_results ADD COLUMN instructions FLOAT",),
    # version 5 -> 6: each result's median SM clock while it was timed (issue 49; None: not read)
    6: ("ALTER TABLE gpuperf_results ADD COLUMN sm_clock_mhz FLOAT",),
}
#: SQLite: how long (ms) a writer waits for another writer's transaction before giving up.
SQLITE_BUSY_TIMEOUT_MS = 30_000
#: The store's file under the rootdir when no URL is given.
DEFAULT_PATH = Path(".gpuperf") / "history.sqlite"
#: What ``--gpuperf-history`` accepts (for messages).
ACCEPTED = "sqlite:///PATH, a bare file path (SQLite), or postgresql://USER[:PASSWORD]@HOST[:PORT]/DB"


class HistoryError(RuntimeError):
    """The store cannot be used: unreachable, unwritable, corrupt, of a newer schema, or a URL that is
    not accepted. The message names the URL (password hidden) and says why."""


@dataclass(frozen=True)
class RunRecord:
    """One measuring run. ``mode``: ``"compare"`` (``--gpuperf``), ``"update"``
    (``--gpuperf-update-baselines``), ``"ab"`` (side B of ``--gpuperf-ab``) or ``"import"`` (``gpuperf
    history import``); ``created_utc``: ISO
    8601 UTC; ``machine``: the host's name; ``device_key``: the baselines' machine key
    (``cpu-amd-epyc``, ``cuda-nvidia-h100-...``); ``options``: the session's options as JSON-ready
    values; ``run_id``: a unique id (the caller makes it, so a retried write cannot add a run twice);
    ``subject`` and ``commit_time``: the commit's subject line and its ISO 8601 committer date."""

    run_id: str
    created_utc: str
    mode: str
    commit: str | None = None
    branch: str | None = None
    dirty: bool | None = None
    machine: str | None = None
    device_key: str | None = None
    torch_version: str | None = None
    cuda_version: str | None = None
    driver_version: str | None = None
    plugin_version: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    subject: str | None = None
    commit_time: str | None = None


@dataclass(frozen=True)
class ResultRow:
    """One benchmark of a run: ``benchmark`` (``module::id``), times in ms (``estimate_ms``: the
    run's median as its verdict decided on it and every surface shows it,
    :attr:`~pytest_gpuperf.verdict.result.BenchResult.estimate_ms`; ``median_ms``: the pooled median
    of all its rounds; ``iqr_ms``, the pooled median's 95% CI ``ci_low_ms``/``ci_high_ms``,
    ``process_medians_ms``: each worker process's median), ``rounds``, ``peak_memory_bytes``
    (bytes), ``counts`` (name -> count per call), ``verdict`` (``regressed``, ``unchanged``...; None
    when not compared) and ``ratio`` (the verdict's ratio as its message shows it,
    :attr:`~pytest_gpuperf.verdict.compare.Comparison.shown_ratio`); ``cpu_median_ms`` the calling
    thread's CPU time per call, the same statistic as ``estimate_ms`` (None: not read), and ``clock``
    the clock the verdict was decided on (``"wall"``, ``"cpu"``, ``"ref"``; None: not asked). ``estimate_ms``
    None (a row written before schema 4): read as
    :func:`~pytest_gpuperf.verdict.estimate.run_estimate_ms` of ``median_ms`` and
    ``process_medians_ms``. ``instructions``: the host's instructions per call under callgrind
    (``--gpuperf-instructions``; None: not counted). ``sm_clock_mhz``: on CUDA, the median SM clock
    of the rounds timed (MHz; None: not read)."""

    benchmark: str
    median_ms: float
    rounds: int
    device_key: str | None = None
    iqr_ms: float | None = None
    ci_low_ms: float | None = None
    ci_high_ms: float | None = None
    process_medians_ms: tuple[float, ...] | None = None
    peak_memory_bytes: int | None = None
    counts: dict[str, Any] | None = None
    verdict: str | None = None
    ratio: float | None = None
    cpu_median_ms: float | None = None
    clock: str | None = None
    estimate_ms: float | None = None
    instructions: float | None = None
    sm_clock_mhz: float | None = None


def shown(url: str) -> str:
    """A store URL as messages show it: the password hidden (:func:`redact`), the driver left out."""
    return redact(str(url).replace("postgresql+psycopg://", "postgresql://"))


#: libpq's connection keywords: a text that starts with ``KEYWORD=`` is a key=value DSN, not a path.
_LIBPQ_KEYWORDS = frozenset({"host", "hostaddr", "port", "dbname", "user", "password", "passfile", "sslmode",
                             "sslpassword", "service", "connect_timeout", "application_name", "options"})


def normalize_url(url: str | os.PathLike[str], root: Path | None = None) -> str:
    """The SQLAlchemy URL for ``url``: a bare path (relative to ``root``) becomes ``sqlite:///ABS``;
    ``postgresql://`` and ``postgres://`` use psycopg 3 (``postgresql+psycopg://``), an unencoded
    ``@`` in the password written ``%40`` (:func:`_quote_password`). Raises :class:`HistoryError`
    for another scheme, naming it and what is accepted, and for a libpq key=value DSN (``host=db
    password=…``; it would be taken for a SQLite file's name, the password in it), shown redacted."""
    text = os.fspath(url).strip()
    if not text:
        raise HistoryError(f"pytest-gpuperf: empty history URL; accepted: {ACCEPTED}")
    scheme = text.split("://", 1)[0].lower() if "://" in text else None
    keyword = re.match(r"([A-Za-z_]+)\s*=", text)
    if scheme is None and keyword and keyword.group(1).lower() in _LIBPQ_KEYWORDS:
        raise HistoryError(f"pytest-gpuperf: history URL {redact(text)!r} is a libpq key=value connection string, "
                           f"which is not accepted: write it as postgresql://USER:PASSWORD@HOST:PORT/DB; "
                           f"accepted: {ACCEPTED}")
    if scheme is None:
        path = Path(text).expanduser()
        return f"sqlite:///{(root / path if root is not None and not path.is_absolute() else path).resolve()}"
    if scheme == "sqlite":
        rest = text.split("://", 1)[1]
        if rest.startswith("/") and not rest.startswith("//") and root is not None:  # sqlite:///relative
            return f"sqlite:///{(root / rest[1:]).resolve()}"
        return text
    if scheme in ("postgresql", "postgres"):
        return "postgresql+psycopg://" + _quote_password(text.split("://", 1)[1])
    if scheme.startswith("postgresql+"):
        return text.split("://", 1)[0] + "://" + _quote_password(text.split("://", 1)[1])
    raise HistoryError(f"pytest-gpuperf: history URL {redact(text)!r}: scheme {scheme!r} is not accepted; "
                       f"accepted: {ACCEPTED}")


def _quote_password(rest: str) -> str:
    """``rest`` (a PostgreSQL URL after ``scheme://``) with each ``@`` of its userinfo's password
    written ``%40``: libpq and users write ``postgresql://ci:p@ss/w@db/perf``, which SQLAlchemy
    would read as password ``p`` on host ``ss`` (and the driver's error would quote that piece of
    the password). The userinfo ends at the last ``@`` before which no query (``?name=``) starts
    (``?user=a@b.example`` is a query's); one without a ``:`` (no password) is left as it is."""
    for at in (i for i in range(len(rest) - 1, -1, -1) if rest[i] == "@"):
        userinfo = rest[:at]
        if re.search(r"\?[\w.\-]*=", userinfo):
            continue
        user, colon, password = userinfo.partition(":")
        return f"{user}:{password.replace('@', '%40')}{rest[at:]}" if colon else rest
    return rest


def _tables(meta: Any) -> dict[str, Any]:
    import sqlalchemy as sa

    schema = sa.Table("gpuperf_schema", meta, sa.Column("version", sa.Integer, nullable=False))
    runs = sa.Table(
        "gpuperf_runs", meta,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.String(64), nullable=False, unique=True),
        sa.Column("created_utc", sa.String(40), nullable=False),
        sa.Column("mode", sa.String(16), nullable=False),
        sa.Column("git_commit", sa.String(64)), sa.Column("branch", sa.String(255)), sa.Column("dirty", sa.Boolean),
        sa.Column("machine", sa.String(255)), sa.Column("device_key", sa.String(255)),
        sa.Column("torch_version", sa.String(64)), sa.Column("cuda_version", sa.String(64)),
        sa.Column("driver_version", sa.String(64)), sa.Column("plugin_version", sa.String(64)),
        sa.Column("options", sa.Text),
        sa.Column("subject", sa.String(500)), sa.Column("commit_time", sa.String(40)),  # version 2
    )
    results = sa.Table(
        "gpuperf_results", meta,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("run", sa.Integer, sa.ForeignKey("gpuperf_runs.id", ondelete="CASCADE"), nullable=False,
                  index=True),
        sa.Column("benchmark", sa.String(1000), nullable=False, index=True),
        sa.Column("device_key", sa.String(255)),
        sa.Column("median_ms", sa.Float, nullable=False), sa.Column("iqr_ms", sa.Float),
        sa.Column("ci_low_ms", sa.Float), sa.Column("ci_high_ms", sa.Float),
        sa.Column("rounds", sa.Integer, nullable=False), sa.Column("process_medians_ms", sa.Text),
        sa.Column("peak_memory_bytes", sa.BigInteger), sa.Column("counts", sa.Text),
        sa.Column("verdict", sa.String(32)), sa.Column("ratio", sa.Float),
        sa.Column("cpu_median_ms", sa.Float), sa.Column("clock", sa.String(8)),  # version 3
        sa.Column("estimate_ms", sa.Float),  # version 4
        sa.Column("instructions", sa.Float),  # version 5
        sa.Column("sm_clock_mhz", sa.Float),  # version 6
    )
    return {"schema": schema, "runs": runs, "results": results}


def _wal(cur: Any, timeout_s: float = SQLITE_BUSY_TIMEOUT_MS / 1000) -> None:
    """``PRAGMA journal_mode = WAL`` on a new SQLite connection, retried while the file is locked.

    Switching a new database file to WAL takes an exclusive lock, and SQLite returns "database is
    locked" at once there instead of calling the busy handler: several writers opening a new store
    at the same moment (CI shards, ``tests/test_history_store.py``'s four writers) failed to open it.
    Waits up to ``timeout_s`` (the busy timeout), then raises the driver's error."""
    import sqlite3
    import time

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            cur.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


#: SQLite's errors for a read-only connection whose WAL (``-wal``) or WAL index (``-shm``) it
#: cannot open or create: a read-only filesystem, a folder or file it may not write.
_WAL_UNOPENABLE = ("unable to open database file", "attempt to write a readonly database")


def read_only_uri(path: str) -> str:
    """The SQLite URI that opens the existing store file ``path`` read-only: ``file:PATH?mode=ro``,
    or ``file:PATH?mode=ro&immutable=1`` when a ``mode=ro`` connection cannot read it because its
    WAL files cannot be opened or created (SQLite says "unable to open database file" on a read-only
    filesystem, "attempt to write a readonly database" in a folder it may not write): ``immutable``
    tells SQLite the file cannot change, so it uses no WAL, lock or ``-shm`` file and creates
    nothing. Such a reader does not see what a ``-wal`` file left by a writer that did not finish
    holds (a cleanly closed store has none: its last connection folds the WAL into the file) and
    must not be used while a writer writes. Any other error is left to the caller's connection,
    which reports it. Opens one short connection to find out; raises nothing."""
    import sqlite3
    from urllib.parse import quote

    uri = f"file:{quote(path)}?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True, timeout=SQLITE_BUSY_TIMEOUT_MS / 1000)
        try:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        finally:
            conn.close()
    except sqlite3.OperationalError as exc:
        if any(m in str(exc) for m in _WAL_UNOPENABLE):
            return uri + "&immutable=1"
    except sqlite3.Error:
        pass  # not a database, a damaged one...: the store's own connection says so
    return uri


class HistoryStore:
    """A history store at ``url`` (see :func:`normalize_url`; ``root``: where a relative SQLite path
    starts). Opening creates the tables when the store is new (a SQLite file's folder too) and
    checks the schema version. Raises :class:`HistoryError` (URL with the password hidden) when the
    store is unreachable, unwritable or corrupt (a corrupt SQLite file is named and left untouched),
    was written by a newer plugin, or SQLAlchemy (or psycopg, for PostgreSQL) is not installed.

    ``read_only`` (the reading commands, issue 46): nothing is created or migrated, a SQLite file is
    opened with ``mode=ro`` (on a read-only filesystem or folder, where its WAL files cannot be
    created, with ``immutable=1``: :func:`read_only_uri`) and a PostgreSQL session with
    ``default_transaction_read_only``; a store that does not exist, is not one, or has an older
    schema version raises :class:`HistoryError` saying so.

    Use as a context manager, or call :meth:`close`."""

    def __init__(self, url: str | os.PathLike[str], root: Path | None = None, *, read_only: bool = False) -> None:
        self.url = normalize_url(url, root)
        self.shown = shown(self.url)
        self.read_only = read_only
        try:
            import sqlalchemy as sa
        except ImportError:
            raise HistoryError(f"pytest-gpuperf: the history store {self.shown} needs SQLAlchemy: "
                               "pip install 'sqlalchemy>=2'") from None
        self._sa = sa
        self.engine = self._engine()
        self.meta = sa.MetaData()
        self.t = _tables(self.meta)
        self._open()

    def _engine(self) -> Any:
        sa = self._sa
        if self.url.startswith("sqlite"):
            path = self.url.split(":///", 1)[1] if ":///" in self.url else ""
            if self.read_only:
                return self._sqlite_read_only(path)
            if path and path != ":memory:":
                try:  # in a .gpuperf folder it gets a .gitignore of "*", as the other outputs there do
                    from pytest_gpuperf.core.files import ensure_output_dir

                    ensure_output_dir(Path(path).parent)
                except OSError as exc:
                    raise HistoryError(f"pytest-gpuperf: history store {self.shown}: cannot create its folder: "
                                       f"{exc}") from None
            engine = sa.create_engine(self.url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000})

            @sa.event.listens_for(engine, "connect")
            def _pragmas(dbapi_conn: Any, _record: Any) -> None:  # WAL: readers never block the writer
                dbapi_conn.isolation_level = None  # transactions are begun below, not by the driver
                cur = dbapi_conn.cursor()
                cur.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
                _wal(cur)
                cur.execute("PRAGMA foreign_keys = ON")
                cur.close()

            @sa.event.listens_for(engine, "begin")
            def _begin(conn: Any) -> None:
                # IMMEDIATE: a transaction takes the write lock when it starts, waiting up to the busy
                # timeout for another writer; a deferred one that reads first and then writes fails at
                # once when another writer got there meanwhile (SQLite cannot wait there: deadlock)
                conn.exec_driver_sql("BEGIN IMMEDIATE")

            return engine
        read_only = {"options": "-c default_transaction_read_only=on"} if self.read_only else {}
        try:
            return sa.create_engine(self.url, pool_pre_ping=True, connect_args={"connect_timeout": 10, **read_only})
        except ImportError as exc:
            raise HistoryError(f"pytest-gpuperf: the history store {self.shown} needs psycopg 3: "
                               f"pip install 'pytest-gpuperf[postgresql]' ({exc})") from None
        except self._sa.exc.ArgumentError as exc:
            raise HistoryError(f"pytest-gpuperf: history URL {self.shown} is not valid: {exc}; "
                               f"accepted: {ACCEPTED}") from None

    def _sqlite_read_only(self, path: str) -> Any:
        """An engine on the existing SQLite file ``path``, opened read-only (:func:`read_only_uri`:
        ``mode=ro``, or ``immutable=1`` where its WAL cannot be opened). Raises
        :class:`HistoryError` when there is no such file."""
        if not path or path == ":memory:" or not Path(path).is_file():
            raise HistoryError(f"pytest-gpuperf: no history store at {self.shown} (runs are recorded by "
                               "pytest --gpuperf, or brought in with gpuperf history import)")
        engine = self._sa.create_engine(f"sqlite:///{read_only_uri(path)}&uri=true",
                                        connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000})

        @self._sa.event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.isolation_level = None
            dbapi_conn.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")

        @self._sa.event.listens_for(engine, "begin")
        def _begin(conn: Any) -> None:
            conn.exec_driver_sql("BEGIN")  # a reader takes no write lock

        return engine

    def _fail(self, what: str, exc: BaseException) -> HistoryError:
        lines = str(getattr(exc, "orig", None) or exc).strip().splitlines()  # the driver's message, first line
        detail = lines[0] if lines else type(exc).__name__
        return HistoryError(f"pytest-gpuperf: history store {self.shown}: {what}: {redact(detail)}")

    def _open(self) -> None:
        sa = self._sa
        schema = self.t["schema"]
        try:
            found = self._read_versions(schema) if self.read_only else self._create_or_read(schema)
            if found is None:
                return
        except sa.exc.DatabaseError as exc:
            hint = (" (not a SQLite database, or a damaged one: it was left untouched; move it away to start "
                    "a new history)") if self.url.startswith("sqlite") and "not a database" in str(exc) else ""
            raise self._fail(f"cannot open it{hint}", exc) from None
        except sa.exc.SQLAlchemyError as exc:
            raise self._fail("cannot open it", exc) from None
        version = max(found)
        if version > SCHEMA_VERSION:
            raise HistoryError(f"pytest-gpuperf: history store {self.shown} has schema version {version}, written by a "
                               f"newer pytest-gpuperf; this one reads version {SCHEMA_VERSION}: upgrade "
                               "pytest-gpuperf (the store was left untouched)")

    def _read_versions(self, schema: Any) -> list[int]:
        """A read-only store's schema versions. Raises :class:`HistoryError` when it has no schema
        table (not a store) or an older version (the reading commands do not migrate)."""
        sa = self._sa
        with self.engine.begin() as conn:
            if not sa.inspect(conn).has_table(schema.name):
                raise HistoryError(f"pytest-gpuperf: {self.shown} is not a pytest-gpuperf history store "
                                   f"(no {schema.name} table); it was left untouched")
            found = self._versions(conn.execute(sa.select(schema.c.version)).scalars().all())
        if not found:
            raise HistoryError(f"pytest-gpuperf: history store {self.shown} has no schema version row: a damaged "
                               "store (it was left untouched)")
        if max(found) < SCHEMA_VERSION:
            raise HistoryError(f"pytest-gpuperf: history store {self.shown} has schema version {max(found)}, older "
                               f"than this pytest-gpuperf's {SCHEMA_VERSION}: the next pytest --gpuperf run (or gpuperf "
                               "history import) brings it up to date; a reading command opens it read-only")
        return found

    def _create_or_read(self, schema: Any) -> list[int] | None:
        """Create the tables of a new store (and its version row; None) or read the stored versions.
        Two writers opening a new PostgreSQL store at once may both try to create a table: the one
        that loses retries and then finds it."""
        sa = self._sa
        for attempt in range(3):
            try:
                with self.engine.begin() as conn:
                    self.meta.create_all(conn, checkfirst=True)
                    # FOR UPDATE (PostgreSQL; SQLite's IMMEDIATE transaction holds the lock already):
                    # two sessions opening an older store at once migrate it once
                    found = self._versions(conn.execute(sa.select(schema.c.version).with_for_update()).scalars().all())
                    if not found:
                        conn.execute(schema.insert().values(version=SCHEMA_VERSION))
                        return None
                    if max(found) < SCHEMA_VERSION:
                        self._migrate(conn, max(found))
                        return [SCHEMA_VERSION]
                    return found
            except (sa.exc.ProgrammingError, sa.exc.IntegrityError):
                if attempt == 2:
                    raise
        return None  # pragma: no cover - the loop returns or raises

    def _versions(self, raw: Iterable[Any]) -> list[int]:
        """The stored schema versions as whole numbers. Raises :class:`HistoryError` for one that is
        not (a row written by hand, another tool's table): the store is left untouched."""
        versions = list(raw)
        for v in versions:
            if not isinstance(v, int) or isinstance(v, bool):
                raise HistoryError(f"pytest-gpuperf: history store {self.shown}: its schema version is {v!r}, "
                                   "not a whole number: not a store written by pytest-gpuperf, or a damaged one "
                                   "(it was left untouched)")
        return versions

    def _migrate(self, conn: Any, version: int) -> None:
        """Bring a store of schema ``version`` to :data:`SCHEMA_VERSION` with :data:`MIGRATIONS`, in
        the caller's transaction (an error rolls the whole migration back)."""
        for target in range(version + 1, SCHEMA_VERSION + 1):
            for statement in MIGRATIONS.get(target, ()):
                conn.exec_driver_sql(statement)
        conn.execute(self.t["schema"].update().values(version=SCHEMA_VERSION))

    def __enter__(self) -> "HistoryStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the store's connections."""
        self.engine.dispose()

    def append(self, run: RunRecord, rows: Iterable[ResultRow]) -> bool:
        """Write ``run`` and its ``rows`` in one transaction: all or nothing. Returns False (and
        writes nothing) when a run with the same ``run_id`` is already stored. Raises
        :class:`HistoryError` when the store cannot be written (nothing of the run is then stored)."""
        sa = self._sa
        runs, results = self.t["runs"], self.t["results"]
        values = {"run_id": run.run_id, "created_utc": run.created_utc, "mode": run.mode, "git_commit": run.commit,
                  "branch": run.branch, "dirty": run.dirty, "machine": run.machine, "device_key": run.device_key,
                  "torch_version": run.torch_version, "cuda_version": run.cuda_version,
                  "driver_version": run.driver_version, "plugin_version": run.plugin_version,
                  "options": json.dumps(run.options, sort_keys=True, default=str),
                  "subject": (run.subject or "")[:500] or None, "commit_time": run.commit_time}
        try:
            with self.engine.begin() as conn:
                key = conn.execute(runs.insert().values(**values)).inserted_primary_key[0]
                batch = [_row_values(key, r) for r in rows]
                if batch:
                    conn.execute(results.insert(), batch)
        except sa.exc.IntegrityError as exc:  # the run_id is stored already (unique), or a bad row
            if self._has_run(run.run_id):
                return False
            raise self._fail("cannot write the run (nothing of it was stored)", exc) from None
        except sa.exc.SQLAlchemyError as exc:
            raise self._fail("cannot write the run (nothing of it was stored)", exc) from None
        return True

    def _read(self, query: Any) -> list[dict[str, Any]]:
        """The rows of ``query`` as dicts; :class:`HistoryError` when the store cannot be read."""
        try:
            with self.engine.connect() as conn:
                return [dict(r._mapping) for r in conn.execute(query)]
        except self._sa.exc.SQLAlchemyError as exc:
            raise self._fail("cannot read it", exc) from None

    def _has_run(self, run_id: str) -> bool:
        runs = self.t["runs"]
        try:
            return bool(self._read(self._sa.select(runs.c.id).where(runs.c.run_id == run_id)))
        except HistoryError:
            return False

    def runs(self, *, branch: str | None = None, limit: int | None = None) -> list[dict[str, Any]]:
        """The stored runs, oldest first (each a dict of :class:`RunRecord`'s fields, ``options``
        decoded, plus ``benchmarks``: how many rows it has); ``branch`` filters, ``limit`` keeps
        the newest so many. Raises :class:`HistoryError` when the store cannot be read."""
        sa = self._sa
        runs, results = self.t["runs"], self.t["results"]
        n = sa.func.count(results.c.id).label("benchmarks")
        q = sa.select(runs, n).select_from(runs.outerjoin(results, results.c.run == runs.c.id)).group_by(runs.c.id)
        if branch is not None:
            q = q.where(runs.c.branch == branch)
        q = q.order_by(runs.c.id.desc())
        if limit is not None:
            q = q.limit(limit)
        got = self._read(q)
        for r in got:
            r["options"] = json.loads(r["options"]) if r.get("options") else {}
            r["commit"] = r.pop("git_commit")
        return got[::-1]

    def series(self, benchmark: str | None = None, *, device_key: str | None = None,
               branch: str | None = None) -> list[dict[str, Any]]:
        """Result rows joined with their run, in run order (oldest first): each a dict of
        :class:`ResultRow`'s fields plus the run's ``run_id``, ``created_utc``, ``commit``,
        ``branch``, ``mode``, ``machine``, ``subject`` and ``commit_time``; filtered by ``benchmark``, ``device_key`` (the row's)
        and ``branch``. Raises :class:`HistoryError` when the store cannot be read."""
        sa = self._sa
        runs, results = self.t["runs"], self.t["results"]
        q = (sa.select(results, runs.c.run_id, runs.c.created_utc, runs.c.git_commit, runs.c.branch, runs.c.mode,
                       runs.c.machine, runs.c.subject, runs.c.commit_time)
             .select_from(results.join(runs, results.c.run == runs.c.id)).order_by(runs.c.id, results.c.id))
        if benchmark is not None:
            q = q.where(results.c.benchmark == benchmark)
        if device_key is not None:
            q = q.where(results.c.device_key == device_key)
        if branch is not None:
            q = q.where(runs.c.branch == branch)
        got = self._read(q)
        for r in got:
            r.pop("id"), r.pop("run")
            r["commit"] = r.pop("git_commit")
            pm = r.get("process_medians_ms")
            r["process_medians_ms"] = tuple(json.loads(pm)) if pm else None
            r["counts"] = json.loads(r["counts"]) if r.get("counts") else None
            if r.get("estimate_ms") is None:  # a row written before schema 4
                r["estimate_ms"] = _estimate_of(r["median_ms"], r["process_medians_ms"])
        return got


def _estimate_of(median_ms: float, process_medians_ms: Sequence[float] | None) -> float:
    """A stored row's run estimate (ms) from its pooled median and process medians (rows written
    before schema 4); the pooled median when those are not usable."""
    from pytest_gpuperf.verdict.estimate import run_estimate_ms

    try:
        return run_estimate_ms(median_ms, process_medians_ms)
    except (ValueError, TypeError):
        return float(median_ms)


def _row_values(run_key: int, r: ResultRow) -> dict[str, Any]:
    return {"run": run_key, "benchmark": r.benchmark, "device_key": r.device_key, "median_ms": float(r.median_ms),
            "iqr_ms": r.iqr_ms, "ci_low_ms": r.ci_low_ms, "ci_high_ms": r.ci_high_ms, "rounds": int(r.rounds),
            "process_medians_ms": json.dumps(list(r.process_medians_ms)) if r.process_medians_ms else None,
            "peak_memory_bytes": r.peak_memory_bytes,
            "counts": json.dumps(r.counts, sort_keys=True) if r.counts else None,
            "verdict": r.verdict, "ratio": r.ratio, "cpu_median_ms": r.cpu_median_ms, "clock": r.clock,
            "estimate_ms": r.estimate_ms, "instructions": r.instructions, "sm_clock_mhz": r.sm_clock_mhz}


def rows_of(results: Sequence[tuple[str, Any, str | None]]) -> list[ResultRow]:
    """History rows of measured results: ``(benchmark, BenchResult, device_key)`` triples, smoke
    results left out."""
    out = []
    for name, r, key in results:
        if r.smoke:
            continue
        ci = r.median_ci_ms
        counts = r.counts.totals() if r.counts is not None else None
        out.append(ResultRow(
            benchmark=name, median_ms=r.median_ms, rounds=r.rounds, device_key=key, iqr_ms=r.iqr_ms,
            ci_low_ms=ci[0] if ci else None, ci_high_ms=ci[1] if ci else None,
            process_medians_ms=r.process_medians_ms, peak_memory_bytes=r.peak_memory_bytes,
            counts=counts, verdict=r.comparison.verdict.value if r.comparison is not None else None,
            ratio=r.comparison.shown_ratio if r.comparison is not None else None,
            cpu_median_ms=r.cpu_estimate_ms,
            clock=r.comparison.clock if r.comparison is not None else None, estimate_ms=r.estimate_ms,
            instructions=r.instructions.per_call if r.instructions is not None else None,
            sm_clock_mhz=r.gpu_clock.median_mhz if r.gpu_clock is not None else None))
    return out
