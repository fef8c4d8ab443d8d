"""Measure what the pytest-benchmark adapter (the ``benchmark`` fixture) costs over ``gpu_bench``.

Usage (the interpreter must have pytest-gpuperf and torch installed)::

    python benchmarks/benchmark_adapter_overhead.py [--calls 5000] [--runs 5] [--json out.json]

``benchmark(fn, *args)`` is a thin adapter over the test's ``GpuBench``: it finds the device of the
call's tensors, calls ``GpuBench`` once, and turns the result into pytest-benchmark's ``stats``.
None of that runs inside the timed rounds, so it can only add a fixed cost per test. Two parts:

1. **Per test (in-process)**: ``--calls`` times each, interleaved in blocks of 100 (the order flips
   every block), one test's worth of work in smoke mode, where nothing else hides it: a fresh
   ``GpuBench`` calling ``torch.add(a, b)`` (two 1,000-element CPU tensors) once, directly and
   through ``BenchmarkFixture``. Prints the median time of each and the difference in µs per test,
   plus the cost of building ``benchmark.stats`` from a 1,000-round result.
2. **In the timings (end to end)**: ``--runs`` pytest sessions (``--gpuperf``), each with one
   ``gpu_bench`` and one ``benchmark`` test timing the same ``torch.add``, alternating which runs
   first; prints the median over sessions of the ratio of their medians (benchmark / gpu_bench).
   Real timing: expect 1.00 within the machine's run-to-run noise. ``--runs 0`` skips this part.

Exit status 0 whatever the figures, 1 if a pytest session failed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SUITE = """
import pytest
import torch

a, b = torch.ones(1000), torch.ones(1000)

def test_{first}({first_fixture}):
    {first_fixture}(torch.add, a, b)

def test_{second}({second_fixture}):
    {second_fixture}(torch.add, a, b)
"""


class _Node:
    name = "test_add"
    nodeid = "test_overhead.py::test_add"


def per_test(calls: int) -> dict[str, float]:
    """Median seconds per test of a direct GpuBench call and of the same through the adapter."""
    import torch

    from pytest_gpuperf.plugin.bench import BenchContext, GpuBench
    from pytest_gpuperf.plugin.benchmark_compat import BenchmarkFixture, BenchmarkStats
    from pytest_gpuperf.core.options import BenchOptions
    from pytest_gpuperf.verdict.result import BenchResult

    ctx = BenchContext(test_id="test_add", options=BenchOptions(), device=torch.device("cpu"), measuring=False)
    a, b = torch.ones(1000), torch.ones(1000)

    def direct() -> None:
        GpuBench(ctx)(torch.add, a, b)

    def adapter() -> None:
        BenchmarkFixture(_Node(), lambda device: GpuBench(ctx), group=None, disabled=True)(torch.add, a, b)

    times: dict[str, list[float]] = {"gpu_bench": [], "benchmark": []}
    for _ in range(200):  # warm up both paths
        direct()
        adapter()
    block = 100
    for i in range(max(1, calls // block)):
        order = [("gpu_bench", direct), ("benchmark", adapter)]
        for label, fn in order if i % 2 == 0 else reversed(order):
            for _ in range(block):
                t0 = time.perf_counter()
                fn()
                times[label].append(time.perf_counter() - t0)
    result = BenchResult.from_samples(tuple(1.0 + (k % 7) * 0.01 for k in range(1000)), name="t", device="cpu",
                                      rounds=1000, calls_per_round=1, warmup_calls=3)
    fixture = BenchmarkFixture(_Node(), lambda device: None, group=None, disabled=False)
    stats_s = []
    for _ in range(200):
        t0 = time.perf_counter()
        BenchmarkStats(fixture, result)
        stats_s.append(time.perf_counter() - t0)
    return {"gpu_bench_s": statistics.median(times["gpu_bench"]), "benchmark_s": statistics.median(times["benchmark"]),
            "stats_1000_rounds_s": statistics.median(stats_s), "calls": len(times["gpu_bench"])}


def end_to_end(runs: int) -> tuple[list[float], bool]:
    """Per session: median(benchmark) / median(gpu_bench) of the same op, from --gpuperf-json."""
    ratios, ok = [], True
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS")}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "pytest.ini").write_text("[pytest]\n")
        for i in range(runs):
            first, second = (("gb", "bm") if i % 2 == 0 else ("bm", "gb"))
            fixture = {"gb": "gpu_bench", "bm": "benchmark"}
            (root / "test_overhead.py").write_text(SUITE.format(first=first, first_fixture=fixture[first],
                                                                second=second, second_fixture=fixture[second]))
            out = root / "r.json"
            proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--gpuperf",
                                   "--gpuperf-device", "cpu", "--gpuperf-json", str(out)],
                                  cwd=root, env=env, capture_output=True, text=True)
            if proc.returncode != 0:
                print(proc.stdout[-3000:], proc.stderr[-3000:], file=sys.stderr)
                ok = False
                continue
            bench = json.loads(out.read_text())["benchmarks"]
            med = {k.rsplit("::", 1)[1]: v["stats"]["median_ms"] for k, v in bench.items()}
            ratios.append(med["test_bm"] / med["test_gb"])
            print(f"  session {i + 1}: gpu_bench {med['test_gb'] * 1e3:.2f} µs, benchmark {med['test_bm'] * 1e3:.2f} µs, "
                  f"ratio {ratios[-1]:.3f}")
    return ratios, ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=5000, help="tests' worth of work per variant (part 1)")
    parser.add_argument("--runs", type=int, default=5, help="pytest sessions (part 2; 0 skips it)")
    parser.add_argument("--json", type=Path, default=None, help="write the raw figures here")
    args = parser.parse_args(argv)
    fig = per_test(args.calls)
    extra_us = (fig["benchmark_s"] - fig["gpu_bench_s"]) * 1e6
    print(f"per test, smoke mode, {fig['calls']} tests each: gpu_bench {fig['gpu_bench_s'] * 1e6:.1f} µs, "
          f"benchmark {fig['benchmark_s'] * 1e6:.1f} µs -> adapter +{extra_us:.1f} µs per test (median)")
    print(f"benchmark.stats from a 1,000-round result: {fig['stats_1000_rounds_s'] * 1e6:.1f} µs (median)")
    ratios, ok = end_to_end(args.runs) if args.runs > 0 else ([], True)
    if ratios:
        print(f"in the timings: median ratio benchmark/gpu_bench {statistics.median(ratios):.3f} "
              f"over {len(ratios)} sessions (min {min(ratios):.3f}, max {max(ratios):.3f})")
    if args.json is not None:
        args.json.write_text(json.dumps({**fig, "adapter_extra_us": extra_us, "session_ratios": ratios}, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
