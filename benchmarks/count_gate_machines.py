"""Does the count gate give the same verdicts on a machine of another speed? (issue 14)

Records the perf suite's baselines (``tests/perf``) on this machine as it is, then compares:

1. ``quiet``: on the same machine, unchanged;
2. ``loaded``: with ``--load-cores`` busy-loop processes beside it (``noisy_neighbour.py``), a
   stand-in for a slower machine of the pool (on a 2-core VM, 2 burners make every workload
   slower by tens of percent);
3. ``loaded+sync``: loaded, with one ``.item()`` injected into every call of ``--inject``
   (``GPUPERF_INJECT=sync:<test>``, see tests/perf/conftest.py): a structural regression.

and prints, per benchmark, the timing verdict and the count verdict of each run, and the speed
of the loaded machine relative to the recording (ratio of medians). Usage::

    python benchmarks/count_gate_machines.py [--load-cores 2] [--inject test_elementwise] [--out DIR]

Needs the plugin installed in this interpreter (e.g. ``.venv/bin/python``). Takes ~6-10 minutes on
the 2-core VM. The JSON reports stay under ``--out`` (default a temporary folder).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "4294967296", "MALLOC_TRIM_THRESHOLD_": "4294967296"}


def run(out: Path, name: str, *, load_cores: int = 0, inject: str = "", update: bool = False) -> dict:
    """One pytest run of the perf suite; returns its JSON report's benchmarks (or {} for updates)."""
    report = out / f"{name}.json"
    cmd = [sys.executable, "-m", "pytest", "tests/perf", "-q", "-p", "no:cacheprovider",
           f"--gpuperf-baseline-dir={out / 'baselines'}", "--gpuperf-json", str(report)]
    cmd.insert(4, "--gpuperf-update-baselines" if update else "--gpuperf")
    if load_cores:
        cmd = [sys.executable, str(ROOT / "benchmarks" / "noisy_neighbour.py"), "--cores", str(load_cores), "--"] + cmd
    env = dict(ENV, GPUPERF_INJECT=inject) if inject else ENV
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    tail = "\n".join(proc.stdout.splitlines()[-3:])
    print(f"{name}: exit {proc.returncode}\n{tail}", flush=True)
    return json.loads(report.read_text())["benchmarks"] if report.is_file() else {}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--load-cores", type=int, default=2, help="busy-loop processes in the loaded runs (default 2)")
    ap.add_argument("--inject", default="test_elementwise", help="test id part that gets an .item() per call")
    ap.add_argument("--out", type=Path, default=None, help="folder for baselines and reports (default: temporary)")
    args = ap.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="gpuperf-counts-"))
    out.mkdir(parents=True, exist_ok=True)
    run(out, "record-1", update=True)  # twice: a run that failed its expect_bottleneck under load is not recorded
    recorded = run(out, "record", update=True)
    runs = {
        "quiet": run(out, "quiet"),
        "loaded": run(out, "loaded", load_cores=args.load_cores),
        "loaded+sync": run(out, "loaded-sync", load_cores=args.load_cores, inject=f"sync:{args.inject}"),
    }
    print()
    head = ["benchmark", "speed loaded/recorded"] + [f"{k} timing" for k in runs] + [f"{k} counts" for k in runs]
    print(" | ".join(head))
    for bid, entry in sorted(recorded.items()):
        name = bid.split("::", 1)[-1]
        loaded = runs["loaded"].get(bid)
        speed = (f"{loaded['stats']['median_ms'] / entry['stats']['median_ms']:.2f}x" if loaded else "-")
        timing = [(r.get(bid) or {}).get("verdict") or "-" for r in runs.values()]
        counts = [((r.get(bid) or {}).get("count_comparison") or {}).get("verdict", "-") for r in runs.values()]
        print(" | ".join([name, speed] + timing + counts))
    cost = [e["counts"]["cost_ms"] for e in recorded.values() if e.get("counts")]
    if cost:
        print(f"\ncounting call: median {sorted(cost)[len(cost) // 2]:.1f} ms, max {max(cost):.1f} ms per benchmark")
    print(f"reports: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
