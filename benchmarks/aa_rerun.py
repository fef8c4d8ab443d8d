"""A/A check of the perf suite: rerun it unchanged in N separate processes against the stored baselines.

Usage (from the repository root, in an environment with the plugin installed)::

    python benchmarks/aa_rerun.py --runs 8 [--out aa.md] [-- extra pytest args]

Each run is a fresh ``pytest --gpuperf tests/perf`` process writing ``--gpuperf-json``; the
script prints, per benchmark, the range of medians and of current/baseline ratios over the runs
and how often each verdict came up. With nothing changed, every ``regressed`` is a false alarm.
It also counts misclassified bottlenecks and runs measured on a busy host (CPU telemetry
``other_cpu_cores`` > 0.5: other processes competing for the cores, which makes a regression or a
misclassification inconclusive).
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
import tempfile
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=8, help="separate pytest processes (default 8)")
    ap.add_argument("--suite", default="tests/perf", help="test path (default tests/perf)")
    ap.add_argument("--out", help="also write the table as Markdown to this file")
    ap.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = ap.parse_args(argv)
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.runs):
            path = Path(tmp, f"run{i}.json")
            cmd = [sys.executable, "-m", "pytest", "--gpuperf", args.suite, "-q", "-p", "no:cacheprovider",
                   "--gpuperf-json", str(path), *args.pytest_args]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if not path.exists():
                print(proc.stdout[-3000:], proc.stderr[-3000:], sep="\n")
                raise SystemExit(f"run {i}: no JSON report written (exit {proc.returncode})")
            runs.append(json.loads(path.read_text()))
            print(f"run {i + 1}/{args.runs}: exit {proc.returncode}", file=sys.stderr)
    per: dict[str, list[dict]] = collections.defaultdict(list)
    for run in runs:
        for key, entry in run["benchmarks"].items():
            per[key.split("::", 1)[1]].append(entry)
    failing_runs = sum(
        any(e["verdict"] == "regressed" for e in run["benchmarks"].values()) for run in runs
    )
    lines = [
        f"{len(runs)} A/A runs; runs with at least one (false) regression: {failing_runs}",
        "",
        "| benchmark | baseline median (ms) | baseline runs | effect floor T | run medians (ms) | ratio range | regressed | improved | inconclusive | unchanged | misclassified | host busy (other cores) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, entries in per.items():
        meds = [e["stats"]["median_ms"] for e in entries]
        ratios = [e["comparison"]["ratio"] for e in entries if e["comparison"]["ratio"] is not None]
        base = entries[0]["comparison"]["baseline_median_ms"]
        count = collections.Counter(e["verdict"] for e in entries)
        comp = entries[0]["comparison"]
        floor = comp.get("floor")
        loads = [(e.get("telemetry") or {}).get("other_cpu_cores") for e in entries]
        loads = [x for x in loads if isinstance(x, (int, float))]
        busy = (f"{sum(x > 0.5 for x in loads)} ({min(loads):.2f}-{max(loads):.2f})" if loads else "-")
        miscl = sum(bool((e.get("options") or {}).get("expect_bottleneck")) and bool(e.get("bottleneck"))
                    and e["bottleneck"]["kind"] not in e["options"]["expect_bottleneck"] for e in entries)
        lines.append(
            f"| {name} | {base:.4g} | {comp.get('runs', 1)} | "
            f"{'-' if floor is None else f'{floor * 100:.1f}%'} | {min(meds):.4g}-{max(meds):.4g} | "
            f"{min(ratios):.3f}-{max(ratios):.3f} | {count['regressed']} | {count['improved']} | "
            f"{count['inconclusive']} | {count['unchanged']} | {miscl} | {busy} |"
            if ratios and base
            else f"| {name} | - | 0 | - | {min(meds):.4g}-{max(meds):.4g} | - | - | - | - | {count['no-baseline']} no-baseline | {miscl} | {busy} |"
        )
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
