"""How long the history store takes to append one large run (issue 34: a 1,000-benchmark run in
under 1 s on SQLite and on PostgreSQL).

Usage (from the repository root; pytest-gpuperf, SQLAlchemy and, for PostgreSQL, psycopg 3 and
Debian's PostgreSQL server installed)::

    python benchmarks/history_append.py [--benchmarks 1000] [--runs 5] [--postgresql URL | --no-postgresql]

For each store it appends ``--runs`` runs of ``--benchmarks`` rows each (a row as the plugin
records it: median, IQR, CI, three process medians, peak memory, two counts, verdict, ratio;
seeded) through ``HistoryStore.append`` — the call the plugin makes at the end of a session, one
transaction per run — and prints the median and the slowest of the append times (``time.perf_counter``;
the store opened once before, as the plugin opens it once per session; the open is timed too). The
SQLite store is a file in a temporary folder (WAL mode, as by default). PostgreSQL: ``--postgresql
URL``, else a throwaway cluster started as the tests start it (``tests/pgcluster.py``: initdb into a
temporary folder, a free loopback port, fsync off) and stopped at the end.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

ROOT = Path(__file__).resolve().parents[1]


def rows(n: int, seed: int) -> list:
    """``n`` synthetic result rows (see the module's docstring)."""
    from pytest_gpuperf.storage.history import ResultRow

    rnd = random.Random(seed)
    out = []
    for j in range(n):
        pm = tuple(1 + j / n + rnd.gauss(0, 0.02) for _ in range(3))
        med = sorted(pm)[1]
        out.append(ResultRow(benchmark=f"tests/perf/test_ops.py::test_op[{j}]", median_ms=med, rounds=100,
                             device_key="cuda-nvidia-h100-80gb-hbm3", iqr_ms=med * 0.02, ci_low_ms=med * 0.98,
                             ci_high_ms=med * 1.02, process_medians_ms=pm, peak_memory_bytes=2 ** 20 * (1 + j),
                             counts={"kernels": 3, "syncs": 1}, verdict="unchanged", ratio=1.0))
    return out


def time_store(url: str, n_benchmarks: int, n_runs: int) -> tuple[float, list[float]]:
    """``(seconds to open, [seconds per append])`` for ``n_runs`` runs appended to the store ``url``."""
    from pytest_gpuperf.storage.history import HistoryStore, RunRecord

    t0 = time.perf_counter()
    store = HistoryStore(url)
    opened = time.perf_counter() - t0
    times = []
    try:
        for i in range(n_runs):
            batch = rows(n_benchmarks, seed=i)
            run = RunRecord(run_id=f"append-{i}-{time.time_ns()}", created_utc="2026-11-26T12:00:00+00:00",
                            mode="compare", commit=f"{i:040x}", branch="main", machine="box",
                            device_key="cuda-nvidia-h100-80gb-hbm3", options={"threshold": 0.05})
            t0 = time.perf_counter()
            store.append(run, batch)
            times.append(time.perf_counter() - t0)
    finally:
        store.close()
    return opened, times


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--benchmarks", type=int, default=1000)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--postgresql", default=None, metavar="URL", help="an existing PostgreSQL store's URL")
    p.add_argument("--no-postgresql", action="store_true", help="SQLite only")
    args = p.parse_args(argv)
    stores: list[tuple[str, str]] = []
    cluster = None
    with tempfile.TemporaryDirectory() as tmp:
        stores.append(("SQLite (WAL)", str(Path(tmp) / "history.sqlite")))
        if not args.no_postgresql:
            if args.postgresql:
                stores.append(("PostgreSQL", args.postgresql))
            else:
                sys.path.insert(0, str(ROOT / "tests"))
                from pgcluster import Cluster, bindir

                if bindir() is None:
                    print("no PostgreSQL server installed: SQLite only", file=sys.stderr)
                else:
                    cluster = Cluster()
                    stores.append(("PostgreSQL 15 (throwaway cluster, loopback)", cluster.url))
        try:
            for label, url in stores:
                opened, times = time_store(url, args.benchmarks, args.runs)
                print(f"{label}: open {opened:.3f} s; append of a {args.benchmarks}-benchmark run: median "
                      f"{statistics.median(times):.3f} s, slowest {max(times):.3f} s ({args.runs} runs)")
        finally:
            if cluster is not None:
                cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
