"""What a 2-rank gloo session under torchrun costs against one process, on the CPU (issue 35).

Usage (run from a checkout; the children get it first on PYTHONPATH)::

    python benchmarks/distributed_overhead.py [--runs 3] [--ranks 2] [--rounds 2000]

Two measurements:

1. **Session wall time.** A throw-away project with two real CPU benchmarks (a 64x64 matmul and a
   sum of 10^5 floats, ``max_time=0.3`` each) is run ``--runs`` times each way, interleaved:
   ``python -m pytest --gpuperf --gpuperf-processes 1`` (one process) and
   ``python -m torch.distributed.run --standalone --nproc-per-node N -m pytest --gpuperf`` (N ranks,
   each measuring in its own process). Timed with ``time.perf_counter`` around ``subprocess.run``;
   the table gives the median and min of each and the median of the paired differences.
2. **Per-round cost of the lockstep.** Under torchrun (N ranks), ``--rounds`` calls of
   ``Ranks.decide`` (the broadcast of rank 0's stop decision before each round, outside the timed
   block): the median µs per call on rank 0.

Exit status 0 whatever the figures, 1 if a run failed. Stdlib only in this process.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

BENCHES = '''
import pytest
import torch

A = torch.randn(64, 64)
X = torch.randn(100_000)

@pytest.mark.gpu_bench(max_time=0.3)
def test_matmul(gpu_bench):
    gpu_bench(torch.mm, A, A)

@pytest.mark.gpu_bench(max_time=0.3)
def test_sum(gpu_bench):
    gpu_bench(torch.sum, X)
'''

LOCKSTEP = '''
import statistics, sys, time
from pytest_gpuperf.measure.distributed import Ranks
r = Ranks.from_environment()
r.start("cpu")
times = []
for i in range({rounds}):
    t0 = time.perf_counter_ns()
    r.decide(i % 2 == 0)
    times.append((time.perf_counter_ns() - t0) / 1e3)
if r.rank == 0:
    print(f"lockstep: {{statistics.median(times):.1f}} us per round (median of {rounds}, rank 0)")
r.stop()
'''


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2000)
    args = ap.parse_args()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
               GPUPERF_HOST_LOAD="0")
    env.pop("PYTEST_ADDOPTS", None)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(args.ranks)]
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp)
        (project / "pytest.ini").write_text("[pytest]\n")
        (project / "test_dist.py").write_text(BENCHES)
        pytest_args = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "--gpuperf", "--gpuperf-history", "off"]
        variants = {"one process": [sys.executable, *pytest_args, "--gpuperf-processes", "1"],
                    f"torchrun {args.ranks} ranks": [*torchrun, *pytest_args]}
        times: dict[str, list[float]] = {k: [] for k in variants}
        for i in range(args.runs):
            for name in (list(variants) if i % 2 == 0 else list(reversed(variants))):
                t0 = time.perf_counter()
                done = subprocess.run(variants[name], cwd=project, env=env, capture_output=True, text=True)
                times[name].append(time.perf_counter() - t0)
                if done.returncode != 0:
                    print(done.stdout[-3000:], done.stderr[-3000:], sep="\n")
                    return 1
        print(f"{'variant':<20} {'median s':>9} {'min s':>7}")
        for name, ts in times.items():
            print(f"{name:<20} {statistics.median(ts):>9.2f} {min(ts):>7.2f}")
        one, many = times.values()
        print(f"torchrun adds {statistics.median(b - a for a, b in zip(one, many)):+.2f} s per session "
              f"(median of {args.runs} paired runs)")
        (project / "lockstep.py").write_text(LOCKSTEP.format(rounds=args.rounds))
        done = subprocess.run([*torchrun, str(project / "lockstep.py")], cwd=project, env=env, capture_output=True,
                              text=True)
        print("\n".join(line for line in done.stdout.splitlines() if line.startswith("lockstep")))
        return 0 if done.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
