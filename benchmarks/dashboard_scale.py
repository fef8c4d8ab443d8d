"""How long ``gpuperf dashboard`` takes, and how large its pages get, for a large history (issue 34:
500 runs × 200 benchmarks in under 30 s, each page under 10 MB).

Usage (pytest-gpuperf and plotly installed; SQLAlchemy's SQLite)::

    python benchmarks/dashboard_scale.py [--runs 500] [--benchmarks 200] [--keep DIR]

It fills a SQLite store in a temporary folder through ``HistoryStore.append`` — ``--runs`` runs
(one commit each, 4 in 5 on ``main``, the rest on ``feature``), each with a row per benchmark (a
median ~ 1 ms with 2% noise and a 10% step at two thirds of the runs for every tenth benchmark,
three process medians, a 95% CI, peak memory and two counts; seeded) — then times
``pytest_gpuperf.cli.main(["dashboard", "--history", DB, "--out", DIR])`` in this process with
``time.perf_counter`` (reading the store, the change points — where this version of
``verdict.changepoints`` has a detection function — and writing the site) and prints the time, the
number of pages, the largest page and the whole folder's size (Plotly's bundle included).
``--keep DIR`` writes the site there instead of a temporary folder. :func:`fill` is also used by
``benchmarks/dashboard_screenshot.py``.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence


def fill(db: Path, n_runs: int, n_benchmarks: int, *, seed: int = 0, step_every: int = 10, step: float = 0.10,
         commits: Sequence[str] | None = None, device: str = "cuda-nvidia-h100-80gb-hbm3") -> None:
    """Append ``n_runs`` synthetic runs of ``n_benchmarks`` benchmarks to the store ``db`` (see the
    module's docstring); ``commits``: the runs' commits (default: seeded random shas)."""
    from pytest_gpuperf.storage.history import HistoryStore, ResultRow, RunRecord

    rnd = random.Random(seed)
    names = [f"tests/perf/test_ops.py::test_op[{kind}-{n}]" for n, kind in
             ((2 ** (6 + i % 8), ("gemm", "conv", "softmax", "layernorm", "attention")[i % 5]) for i in range(n_benchmarks))]
    names = [f"{name}-{i}" if names.count(name) > 1 else name for i, name in enumerate(names)]
    base = [0.2 + 5 * rnd.random() for _ in names]
    with HistoryStore(db) as store:
        for i in range(n_runs):
            sha = commits[i] if commits is not None else f"{rnd.getrandbits(160):040x}"
            run = RunRecord(run_id=f"scale-{seed}-{i:05d}", created_utc=f"2026-{1 + i // 160 % 12:02d}-"
                            f"{1 + i // 6 % 27:02d}T{i % 6 * 4:02d}:00:00+00:00", mode="compare", commit=sha,
                            branch="feature" if i % 5 == 4 else "main", machine="gpu-runner-1", device_key=device)
            rows = []
            for j, name in enumerate(names):
                slow = 1 + step if j % step_every == 0 and i >= 2 * n_runs // 3 else 1.0
                pm = tuple(base[j] * slow * (1 + rnd.gauss(0, 0.02)) for _ in range(3))
                med = sorted(pm)[1]
                rows.append(ResultRow(
                    benchmark=name, median_ms=med, rounds=100, device_key=device, iqr_ms=med * 0.02,
                    ci_low_ms=med * 0.985, ci_high_ms=med * 1.015, process_medians_ms=pm,
                    peak_memory_bytes=int(2 ** 20 * (64 + j)), counts={"kernels": 3, "syncs": 1},
                    verdict="regressed" if slow > 1 and i == 2 * n_runs // 3 else "unchanged", ratio=slow))
            store.append(run, rows)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=500)
    p.add_argument("--benchmarks", type=int, default=200)
    p.add_argument("--keep", default=None, metavar="DIR", help="write the site here (default: a temporary folder)")
    args = p.parse_args(argv)
    from pytest_gpuperf.cli import main as gpuperf

    with tempfile.TemporaryDirectory() as tmp:
        db, out = Path(tmp) / "history.sqlite", Path(args.keep or Path(tmp) / "site")
        t0 = time.perf_counter()
        fill(db, args.runs, args.benchmarks)
        print(f"filled {db.stat().st_size / 1e6:.1f} MB store ({args.runs} runs × {args.benchmarks} benchmarks) "
              f"in {time.perf_counter() - t0:.1f} s")
        t0 = time.perf_counter()
        code = gpuperf(["dashboard", "--history", str(db), "--out", str(out)])
        took = time.perf_counter() - t0
        if code != 0:
            return code
        pages = list(out.rglob("*.html"))
        largest = max(pages, key=lambda f: f.stat().st_size)
        bench = max((f.stat().st_size for f in (out / "bench").glob("*.html")), default=0)
        total = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
        print(f"gpuperf dashboard: {took:.1f} s; {len(pages)} pages; largest page {largest.stat().st_size / 1e6:.2f} MB "
              f"({largest.relative_to(out)}); largest benchmark page {bench / 1e6:.2f} MB; "
              f"site {total / 1e6:.1f} MB with plotly.min.js")
    return 0


if __name__ == "__main__":
    sys.exit(main())
