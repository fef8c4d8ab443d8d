"""A/A false alarms of distributed benchmarks under torchrun, on the CPU with gloo (issue 35).

Usage (run from a checkout; the children get it first on PYTHONPATH)::

    python benchmarks/distributed_aa.py [--runs 20] [--ranks 2] [--updates 1] [--launches P] [--straggler K] [--out DIR]

A throw-away project with four real CPU benchmarks is measured under
``python -m torch.distributed.run --standalone --nproc-per-node N -m pytest``:

* ``test_matmul``: a 128x128 matmul (no communication);
* ``test_sum``: a sum of 10^5 floats (no communication);
* ``test_all_reduce``: a bare gloo all-reduce of 256 KiB (``collective="all_reduce"``);
* ``test_step``: a small data-parallel step: a 256x256 matmul, then an all-reduce of its result.

With ``--launches P`` each session is instead ``python -m pytest --gpuperf-nproc N
--gpuperf-processes P``: the plugin runs P whole torchrun launches of N ranks per benchmark (and
more for an inconclusive one) and decides on the spread between them, as replicate worker
processes do outside torchrun.

``--straggler K``: then K sessions in which rank 1 does twice ``test_matmul``'s work (the
environment variable ``GPUPERF_AA_STRAGGLER=1``): is it caught, and is rank 1 named?

``--updates`` ``--gpuperf-update-baselines`` sessions record the baselines (each appends a run to
every entry: with 2 or more the gate counts the stored runs as replicates and knows the spread
from one session to the next), then ``--runs`` sessions with
``--gpuperf`` (nothing changed: an A/A rerun) compare with them, each writing its JSON report.
A test that fails in an A/A rerun (pytest's ``-rf`` summary) is a false alarm. It prints, per benchmark, the verdicts over the
runs and the false alarms, the total rate (false alarms / benchmark-runs), the session wall times
(median, min, max) and the host's load average at each run's start, and writes every figure to
``DIR/summary.json`` (with ``--out``; otherwise a temporary folder, removed).

Exit status 0 whatever the figures; 1 if the update failed or a session crashed (exit code other
than 0 or 1). Stdlib only in this process.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

BENCHES = '''
import os

import pytest
import torch
import torch.distributed as dist

A = torch.randn(128, 128)
B = torch.randn(256, 256)
X = torch.randn(100_000)
T = torch.ones(2**16)  # 256 KiB of float32


STRAGGLER = os.environ.get("GPUPERF_AA_STRAGGLER") == os.environ.get("RANK")  # --straggler runs: rank 1


def mm():
    out = torch.mm(A, A)
    if STRAGGLER:  # twice the work on one rank
        out = torch.mm(A, A)
    return out


@pytest.mark.gpu_bench(max_time=0.5)
def test_matmul(gpu_bench):
    gpu_bench(mm)


@pytest.mark.gpu_bench(max_time=0.5)
def test_sum(gpu_bench):
    gpu_bench(torch.sum, X)


@pytest.mark.gpu_bench(max_time=0.5, collective="all_reduce", bytes_per_call=4 * 2**16)
def test_all_reduce(gpu_bench):
    gpu_bench(lambda: dist.all_reduce(T))


@pytest.mark.gpu_bench(max_time=0.5)
def test_step(gpu_bench):
    def step():
        g = torch.mm(B, B)
        dist.all_reduce(g)
    gpu_bench(step)
'''


def load_average() -> float | None:
    """The host's 1-minute load average (None where the OS has none)."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=20, help="A/A reruns after the update (default 20)")
    ap.add_argument("--ranks", type=int, default=2, help="ranks per session (default 2)")
    ap.add_argument("--updates", type=int, default=1, help="update sessions before the A/A reruns (default 1)")
    ap.add_argument("--launches", type=int, default=None,
                    help="sessions of --gpuperf-nproc RANKS --gpuperf-processes LAUNCHES instead of torchrun sessions")
    ap.add_argument("--out", help="keep the project, the reports and summary.json here")
    ap.add_argument("--straggler", type=int, default=0,
                    help="then this many sessions in which rank 1 does twice test_matmul's work (caught, rank named?)")
    args = ap.parse_args()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    env.pop("PYTEST_ADDOPTS", None)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(args.ranks),
                "-m", "pytest", "-q", "-rf", "-p", "no:cacheprovider"]
    if args.launches is not None:  # the plugin starts the torchrun launches itself
        torchrun = [sys.executable, "-m", "pytest", "-q", "-rf", "-p", "no:cacheprovider",
                    f"--gpuperf-nproc={args.ranks}", f"--gpuperf-processes={args.launches}"]
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="dist-aa-"))
    project = out / "project"
    shutil.rmtree(project, ignore_errors=True)
    project.mkdir(parents=True)
    (project / "pytest.ini").write_text("[pytest]\n")
    (project / "test_dist.py").write_text(BENCHES)
    try:
        for u in range(args.updates):
            t0 = time.perf_counter()
            update = subprocess.run([*torchrun, "--gpuperf-update-baselines"], cwd=project, env=env,
                                    capture_output=True, text=True)
            update_s = time.perf_counter() - t0
            print(f"update {u + 1}/{args.updates}: exit {update.returncode} in {update_s:.1f} s", flush=True)
            if update.returncode != 0:
                print(update.stdout[-4000:], update.stderr[-4000:], sep="\n")
                return 1
        verdicts: dict[str, list[str]] = collections.defaultdict(list)
        failed: dict[str, int] = collections.Counter()
        walls, loads, exits = [], [], []
        for i in range(args.runs):
            report = out / f"run{i:02d}.json"
            loads.append(load_average())
            t0 = time.perf_counter()
            run = subprocess.run([*torchrun, "--gpuperf", f"--gpuperf-json={report}"], cwd=project, env=env,
                                 capture_output=True, text=True)
            walls.append(time.perf_counter() - t0)
            exits.append(run.returncode)
            if run.returncode not in (0, 1) or not report.exists():
                print(run.stdout[-4000:], run.stderr[-4000:], sep="\n")
                return 1
            benches = json.loads(report.read_text())["benchmarks"]
            failing = {line.split()[1] for line in run.stdout.splitlines() if line.startswith("FAILED ")}
            line = []
            for bid, b in sorted(benches.items()):
                verdict = (b.get("comparison") or {}).get("verdict", "-")
                verdicts[bid].append(verdict)
                if bid in failing:  # pytest's short summary (-rf): every rank prints it, counted once
                    failed[bid] += 1
                line.append(f"{bid.split('::')[-1]}={verdict}")
            print(f"run {i + 1}/{args.runs}: exit {run.returncode} in {walls[-1]:.1f} s (load {loads[-1]}): "
                  + ", ".join(line), flush=True)
        total = sum(len(v) for v in verdicts.values())
        alarms = sum(failed.values())
        print(f"\n{'benchmark':<34} {'verdicts over ' + str(args.runs) + ' runs':<60} false alarms")
        for bid, vs in sorted(verdicts.items()):
            counts = ", ".join(f"{k} {n}" for k, n in collections.Counter(vs).most_common())
            print(f"{bid:<34} {counts:<60} {failed[bid]}")
        print(f"\nfalse alarms: {alarms} of {total} benchmark-runs ({100 * alarms / max(total, 1):.1f}%); "
              f"sessions that failed: {exits.count(1)} of {args.runs}")
        print(f"session wall time: median {statistics.median(walls):.1f} s, min {min(walls):.1f}, max {max(walls):.1f}; "
              f"update {update_s:.1f} s; load average at start: {min(l for l in loads if l is not None):.2f}"
              f" to {max(l for l in loads if l is not None):.2f}")
        stragglers = _straggler_runs(args.straggler, torchrun, project, env, out)
        (out / "summary.json").write_text(json.dumps({"straggler_runs": stragglers,
            "runs": args.runs, "ranks": args.ranks, "updates": args.updates, "launches": args.launches, "verdicts": verdicts, "false_alarms": dict(failed),
            "benchmark_runs": total, "failed_sessions": exits.count(1), "wall_s": walls, "update_s": update_s,
            "load_average": loads}, indent=1))
        return 0
    finally:
        if not args.out:
            shutil.rmtree(out, ignore_errors=True)


def _straggler_runs(n: int, torchrun: list[str], project: Path, env: dict[str, str], out: Path) -> list[dict]:
    """``n`` sessions in which rank 1 does twice ``test_matmul``'s work: each one's verdict, whether
    the test failed and whether its message names rank 1 as the straggler."""
    got = []
    for i in range(n):
        report = out / f"straggler{i:02d}.json"
        run = subprocess.run([*torchrun, "--gpuperf", f"--gpuperf-json={report}"], cwd=project,
                             env=dict(env, GPUPERF_AA_STRAGGLER="1"), capture_output=True, text=True)
        b = json.loads(report.read_text())["benchmarks"]["test_dist.py::test_matmul"] if report.exists() else {}
        c = b.get("comparison") or {}
        failed = any(line.startswith("FAILED test_dist.py::test_matmul") for line in run.stdout.splitlines())
        named = "rank 1 is the straggler" in (run.stdout + run.stderr)
        got.append({"verdict": c.get("verdict"), "ratio": c.get("ratio"), "failed": failed, "rank_named": named})
        print(f"straggler run {i + 1}/{n}: test_matmul {c.get('verdict')} {c.get('ratio')}, failed {failed}, "
              f"rank 1 named {named}", flush=True)
    return got


if __name__ == "__main__":
    sys.exit(main())
