"""A/A false failures and power of A/B mode (``--gpuperf-ab``) on the perf suite's real workloads.

Usage (from the repository root, plugin installed, working tree clean so that A/A is true)::

    python benchmarks/ab_study.py collect --runs 4 --data ab_data.json [--neighbour-cores 1] [-- pytest args]
    python benchmarks/ab_study.py analyze --data ab_data.json [--trials 2000] [--out ab_study.md]

**collect** runs ``pytest --gpuperf --gpuperf-ab HEAD tests/perf`` ``--runs`` times, one after
another (each run: 2 pairs of worker processes, 16 paired blocks per benchmark), with the perf
suite's ``MALLOC_*`` settings, optionally under a bounded noisy neighbour
(``benchmarks/noisy_neighbour.py --cores N`` burning N cores meanwhile), and appends every
benchmark's blocks (side, process pair, position, block median ms: the JSON report's
``comparison.ab_blocks``) and verdict to ``--data``. Both sides run the same commit: every
``regressed`` verdict of a collected run is a false failure, and it is counted as such.

**analyze** re-decides from the stored blocks. The unit that carries a process's speed mode is a
pair of worker processes, so a trial draws 2 distinct process pairs (seeded) from all the
collected ones of that benchmark (any run, any condition in the file) and calls
:func:`pytest_gpuperf.verdict.gate.evaluate` (what the plugin ships; its A/B step is
:func:`pytest_gpuperf.verdict.paired.decide_ab`) on their paired blocks; for power, side B's block medians are
multiplied by ``1 + delta`` first (delta = +5%, +10%, +20%; the same draws for every delta). With
P collected process pairs there are only P(P-1)/2 distinct draws: the tables say P, and a rate
under 1 / (P(P-1)/2) cannot be resolved.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DELTAS = (0.0, 0.05, 0.10, 0.20)


def collect(args: argparse.Namespace) -> int:
    data_path = Path(args.data)
    data = json.loads(data_path.read_text()) if data_path.exists() else {"runs": []}
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="4294967296", MALLOC_TRIM_THRESHOLD_="4294967296")
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "pytest_gpuperf", "tests/perf"],
                           capture_output=True, text=True).stdout.strip()
    if dirty:
        print(f"warning: the working tree differs from HEAD, so this is not an A/A comparison:\n{dirty}")
    for i in range(args.runs):
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp, "ab.json")
            cmd = [sys.executable, "-m", "pytest", "--gpuperf", "tests/perf", "-q", "-p", "no:cacheprovider",
                   "--gpuperf-ab", args.ref, f"--gpuperf-json={out}", *args.pytest_args]
            if args.neighbour_cores:
                cmd = [sys.executable, "benchmarks/noisy_neighbour.py", "--cores", str(args.neighbour_cores),
                       "--seconds", "1800", "--", *cmd]
            t0 = time.monotonic()
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
            seconds = time.monotonic() - t0
            if not out.exists():
                print(proc.stdout[-3000:], proc.stderr[-3000:], sep="\n")
                return 1
            report = json.loads(out.read_text())
        run = {"condition": f"neighbour {args.neighbour_cores} core(s)" if args.neighbour_cores else "quiet",
               "seconds": round(seconds, 1), "exit": proc.returncode, "benchmarks": {}}
        for name, entry in report["benchmarks"].items():
            c = entry.get("comparison") or {}
            run["benchmarks"][name.split("::", 1)[-1]] = {
                "verdict": c.get("verdict"), "ratio": c.get("ratio"), "ratio_ci": c.get("ratio_ci"),
                "blocks": c.get("ab_blocks") or []}
        data["runs"].append(run)
        data_path.write_text(json.dumps(data, indent=1))
        verdicts = {k: v["verdict"] for k, v in run["benchmarks"].items()}
        print(f"run {i + 1}/{args.runs} ({run['condition']}): exit {proc.returncode}, {seconds:.0f} s, {verdicts}")
    return 0


def _pairs(data: dict, name: str) -> list[list[tuple[str, int, float]]]:
    """Every collected process pair of benchmark ``name``: its blocks as (side, position, median ms)."""
    out = []
    for run in data["runs"]:
        blocks = run["benchmarks"].get(name, {}).get("blocks") or []
        for p in sorted({b[1] for b in blocks}):
            out.append([(b[0], b[2], b[3]) for b in blocks if b[1] == p])
    return out


def _decide(pairs: list[list[tuple[str, int, float]]], delta: float) -> str:
    from pytest_gpuperf.verdict.paired import Block
    from pytest_gpuperf.verdict.gate import Evidence, Reference, evaluate
    from pytest_gpuperf.core.options import DEFAULTS

    blocks = tuple(Block(side, p, pos, (ms * (1 + delta) if side == "B" else ms,))
                   for p, pair in enumerate(pairs) for side, pos, ms in pair)
    # what the plugin ships: gate.evaluate on the paired blocks, as abresults.ab_result calls it
    c = evaluate(Evidence(ab_blocks=blocks), Reference.ab("study", measured=True), DEFAULTS).comparison
    return c.verdict.value


def analyze(args: argparse.Namespace) -> int:
    data = json.loads(Path(args.data).read_text())
    if args.condition:
        data["runs"] = [r for r in data["runs"] if r["condition"] == args.condition]
    names = sorted({n for run in data["runs"] for n in run["benchmarks"]})
    conditions = sorted({run["condition"] for run in data["runs"]})
    per_condition = ", ".join(f"{sum(r['condition'] == c for r in data['runs'])} {c}" for c in conditions)
    seconds = statistics.median(r["seconds"] for r in data["runs"])
    lines = [f"{len(data['runs'])} A/A runs of `pytest --gpuperf --gpuperf-ab HEAD tests/perf` ({per_condition}); "
             f"median run time {seconds:.0f} s.", ""]
    lines += ["Verdicts of the collected runs themselves (both sides the same commit: `regressed` is a false failure):",
              "", "| benchmark | regressed | inconclusive | improved | unchanged | A/B ratio range |",
              "| --- | ---: | ---: | ---: | ---: | --- |"]
    for name in names:
        v = [run["benchmarks"][name] for run in data["runs"] if name in run["benchmarks"]]
        count = {k: sum(x["verdict"] == k for x in v) for k in ("regressed", "inconclusive", "improved", "unchanged")}
        ratios = [x["ratio"] for x in v if x["ratio"]]
        rng = f"{min(ratios):.3f}x-{max(ratios):.3f}x" if ratios else "-"
        lines.append(f"| {name} | {count['regressed']} | {count['inconclusive']} | {count['improved']} | "
                     f"{count['unchanged']} | {rng} |")
    lines += ["", f"Re-decided from the stored blocks: {args.trials} draws of {args.pairs} process pairs per benchmark "
              f"(share of draws that fail, i.e. `regressed`; delta multiplies side B's block medians):", "",
              "| benchmark | process pairs (distinct draws) | A/A false failures | A/A inconclusive | power +5% | power +10% | power +20% |",
              "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    rng = random.Random(args.seed)
    for name in names:
        pool = _pairs(data, name)
        if len(pool) < args.pairs:
            continue
        draws = [rng.sample(range(len(pool)), args.pairs) for _ in range(args.trials)]
        cells = []
        for delta in DELTAS:
            verdicts = [_decide([pool[i] for i in d], delta) for d in draws]
            share = sum(v == "regressed" for v in verdicts) / len(verdicts)
            cells.append(f"{share * 100:.1f}%")
            if delta == 0:
                cells.append(f"{sum(v == 'inconclusive' for v in verdicts) / len(verdicts) * 100:.1f}%")
        distinct = math.comb(len(pool), args.pairs)
        lines.append(f"| {name} | {len(pool)} ({distinct}) | " + " | ".join(cells) + " |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect", help="run A/A A/B runs of the perf suite and store their blocks")
    c.add_argument("--runs", type=int, default=4)
    c.add_argument("--data", default="ab_data.json")
    c.add_argument("--ref", default="HEAD")
    c.add_argument("--neighbour-cores", type=int, default=0, help="run under a noisy neighbour burning N cores")
    c.add_argument("pytest_args", nargs="*")
    a = sub.add_parser("analyze", help="false failures and power re-decided from the stored blocks")
    a.add_argument("--data", default="ab_data.json")
    a.add_argument("--trials", type=int, default=2000)
    a.add_argument("--pairs", type=int, default=2, help="process pairs per draw (as --gpuperf-ab-processes)")
    a.add_argument("--condition", help="only the runs of this condition (e.g. quiet)")
    a.add_argument("--seed", type=int, default=20251121)
    a.add_argument("--out")
    args = ap.parse_args(argv)
    return collect(args) if args.cmd == "collect" else analyze(args)


if __name__ == "__main__":
    raise SystemExit(main())
