"""A seeded synthetic performance history for the dashboard's tests: runs and rows shaped as
:meth:`HistoryStore.runs` and :meth:`HistoryStore.series` return them, and the change points of a
known step."""

from __future__ import annotations

import random
from typing import Any, Sequence

from pytest_gpuperf.verdict.changepoints import ChangePoint

DEVICE = "cuda-nvidia-h100-80gb-hbm3"
NAMES = ("tests/perf/test_gemm.py::test_gemm[fp16-4096]", "tests/perf/test_conv.py::TestConv::test_conv2d",
         "tests/perf/test_odd.py::test_odd[<b>-\"q\"-&]")


def history(n_runs: int = 30, names: Sequence[str] = NAMES, *, step_at: int = 20, step: float = 0.15,
            seed: int = 0, branches: Sequence[str] = ("main",), device: str | None = DEVICE,
            memory: bool = True, counts: bool = True) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[ChangePoint]]:
    """``(runs, rows, changes)``: ``n_runs`` runs (round-robin over ``branches``), a row per name
    and run (median ~ 1 ms × (position + 1) with 1% noise, three process medians, a CI of ±1%),
    the first name ``step`` slower from run ``step_at`` on (that run's verdict ``regressed``), and
    that step as a :class:`ChangePoint` (``step_at=0``: no step)."""
    rnd = random.Random(seed)
    runs, rows = [], []
    for i in range(n_runs):
        sha = f"{rnd.getrandbits(160):040x}"
        run = {"run_id": f"run{i:04d}", "created_utc": f"2026-03-{1 + i % 28:02d}T{i % 24:02d}:00:00+00:00",
               "mode": "compare", "commit": sha, "branch": branches[i % len(branches)], "dirty": False,
               "machine": "gpu-runner-1", "device_key": device, "options": {}, "benchmarks": len(names)}
        runs.append(run)
        for j, name in enumerate(names):
            stepped, hit = j == 0 and 0 < step_at <= i, j == 0 and 0 < step_at == i
            base = (j + 1.0) * (1 + step if stepped else 1.0)
            pm = tuple(base * (1 + rnd.gauss(0, 0.01)) for _ in range(3))
            med = sorted(pm)[1]
            rows.append({
                "benchmark": name, "device_key": device, "median_ms": med, "iqr_ms": med * 0.01,
                "ci_low_ms": med * 0.99, "ci_high_ms": med * 1.01, "rounds": 50, "process_medians_ms": pm,
                "peak_memory_bytes": (64 + j) * 2 ** 20 if memory else None,
                "counts": {"kernels": 3 + j, "syncs": 1} if counts else None,
                "verdict": "regressed" if hit else "unchanged", "ratio": 1 + step if hit else 1.0,
                "run_id": run["run_id"], "created_utc": run["created_utc"], "commit": sha, "branch": run["branch"],
                "mode": "compare", "machine": run["machine"]})
    changes = []
    if 0 < step_at < n_runs:
        changes.append(ChangePoint(
            benchmark=names[0], device_key=device, index=step_at, before_commit=runs[step_at - 1]["commit"],
            after_commit=runs[step_at]["commit"], before_run=runs[step_at - 1]["run_id"],
            after_run=runs[step_at]["run_id"], median_before_ms=1.0, median_after_ms=1 + step,
            change_pct=step * 100, pvalue=0.001))
    return runs, rows, changes
