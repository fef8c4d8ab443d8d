"""Add the perf suite's exact counts to committed baselines without re-timing them.

Counts (ops, syncs, copies, FLOPs, bytes) depend on the torch version and the inputs, not on the
machine's speed or CPU model, so they can be recorded on any machine with the same torch and
added to baselines whose timings were recorded elsewhere. Runs ``pytest --gpuperf tests/perf
--gpuperf-json`` here, then writes each benchmark's ``counts`` into the matching entry of
``baselines/<device key>/`` (the entry and its newest history run; older runs are left as they
were). Timings are not touched. Usage::

    python benchmarks/record_counts.py cpu-amd-epyc [--baseline-dir baselines]

Refuses a device key of another device type (CUDA counts need a GPU run). Needs the plugin
installed in this interpreter.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("device_key", help="folder under the baseline dir, e.g. cpu-amd-epyc")
    ap.add_argument("--baseline-dir", type=Path, default=ROOT / "baselines")
    args = ap.parse_args()
    if not args.device_key.startswith("cpu"):
        print(f"{args.device_key}: only CPU baselines can take counts measured here", file=sys.stderr)
        return 2
    folder = args.baseline_dir / args.device_key
    files = sorted(folder.glob("*.json"))
    if not files:
        print(f"no baseline files in {folder}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp, "r.json")
        subprocess.run([sys.executable, "-m", "pytest", "tests/perf", "--gpuperf", "-q", "-p", "no:cacheprovider",
                        f"--gpuperf-baseline-dir={tmp}", "--gpuperf-json", str(report)], cwd=ROOT, check=False)
        measured = json.loads(report.read_text())["benchmarks"]
    by_id = {key.split("::", 1)[1]: e["counts"] for key, e in measured.items() if e.get("counts")}
    from pytest_gpuperf.core.files import write_atomic
    from pytest_gpuperf.storage.baseline import dumps, load

    for path in files:
        load(path)  # refuses an unusable file before anything is written
        data = json.loads(path.read_text())
        changed = 0
        for bid, entry in data["benchmarks"].items():
            counts = by_id.get(bid)
            if counts is None:
                print(f"{path}: {bid}: not measured here, left as it was")
                continue
            entry["counts"] = {k: v for k, v in counts.items() if k != "cost_ms"}  # cost_ms is this machine's
            entry["history"][-1]["counts"] = {k: v for k, v in counts.items() if k not in ("by_name", "cost_ms")}
            changed += 1
        write_atomic(path, dumps(data))
        load(path)  # what was written loads again
        print(f"{path}: counts added to {changed} benchmark(s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
