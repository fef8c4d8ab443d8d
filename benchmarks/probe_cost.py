"""What the interleaved machine-speed probe costs, and how well it follows the benchmark.

Usage (from the repository root, in an environment with the plugin installed; CPU)::

    python benchmarks/probe_cost.py [--repeats 5] [--max-time 1.0]

For three workloads (a small matmul, a large elementwise add, a loop of tiny ops) it measures the
workload with the CPU's probe interleaved (``make_probe`` on the CPU: the reference clock's
pure-Python loop, whatever the class; ``pytest_gpuperf.measure.timing.measure``, ``probe=``)
``--repeats`` times and prints: rounds per probe call (k), the probe's share of the
measuring time (sum of probe times / (sum of round times + sum of probe times)), the probe's
median (ms), and the within-run Spearman rho and one-sided p between the per-block benchmark
medians and the probe times (what ``gate.judge`` tests before it normalizes).
"""

from __future__ import annotations

import argparse
import statistics


def main(argv: list[str] | None = None) -> int:
    import torch

    from pytest_gpuperf.verdict.gate import probe_correlation
    from pytest_gpuperf.core.options import BenchOptions
    from pytest_gpuperf.measure.probe import make_probe, probe_kind
    from pytest_gpuperf.verdict.machine import ProbeEvidence
    from pytest_gpuperf.measure.timing import measure

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5, help="measurements per workload and probe (default 5)")
    ap.add_argument("--max-time", type=float, default=1.0, help="max_time of each measurement, s (default 1)")
    args = ap.parse_args(argv)
    cpu = torch.device("cpu")
    g = torch.Generator().manual_seed(0)
    a = torch.randn(512, 512, generator=g)
    big = torch.ones(1 << 24)
    small = torch.ones(16)

    def tiny() -> None:
        for _ in range(50):
            small.add_(1)

    workloads = {"512x512 matmul": (torch.mm, (a, a)), "64 MiB add": (torch.add, (big, 1.0)),
                 "50 tiny adds": (tiny, ())}
    opts = BenchOptions(max_time=args.max_time, target_precision=0.0)
    print("| workload | probe | k (rounds/probe) | probe share of time | probe median | Spearman rho | p |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    probe = make_probe(probe_kind(None), cpu)  # the CPU's one probe, whatever the class
    for wname, (fn, fargs) in workloads.items():
        for _ in range(args.repeats):
            t = measure(fn, fargs, {}, options=opts, device=cpu, probe=probe)
            rounds_ms = sum(t.samples_ms) * t.calls_per_round
            share = sum(t.probe_ms) / (rounds_ms + sum(t.probe_ms))
            corr = probe_correlation(t.samples_ms, ProbeEvidence(t.probe_ms, 1.0, probe.name, t.probe_every))
            rho, p = (f"{corr[0]:.2f}", f"{corr[1]:.2g}") if corr else ("-", "-")
            print(f"| {wname} | {probe.name} | {t.probe_every} | {share * 100:.1f}% | "
                  f"{statistics.median(t.probe_ms):.3f} ms | {rho} | {p} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
