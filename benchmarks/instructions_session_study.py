"""Study (issue 48): ``--gpuperf-instructions`` through the command users run.

A scratch project of 13 benchmarks (small torch ops, a matmul chain, an MLP forward, a chain of 20
adds whose length ``CHAIN`` sets, pure-Python work, and two tests of pytest-benchmark's
``benchmark`` fixture served by the drop-in) is recorded once with
``pytest --gpuperf-update-baselines --gpuperf-instructions``, then compared with ``pytest --gpuperf
--gpuperf-instructions`` in fresh sessions:

* ``--aa N``: N unchanged runs (each a new valgrind worker against the update run's counts: an A/A
  across N + 1 processes and two launch commands);
* ``--changed N``: N runs with the chain one add longer (``CHAIN=21``, about +5% host work on that
  benchmark; the others unchanged, so they are A/A comparisons too);
* ``--busy``: the A/A runs again with one core kept busy (``benchmarks/noisy_neighbour.py --cores 1``).

Reported per run from its JSON report and output: each benchmark's instructions per call and the
gate's verdict and ratio, the function the why named, the instruction worker's wall time and the
session's. The timing part is cut short (``--gpuperf-processes 2 --gpuperf-max-processes 2
--gpuperf-max-time 0.1``, no A/B, no why): the instruction worker's cost does not depend on it.

    python benchmarks/instructions_session_study.py --out /tmp/instr-session --aa 5 --changed 5 --busy
    python benchmarks/instructions_session_study.py --out /tmp/instr-one --aa 2 --changed 0 --select "torch and add"

Not part of the plugin; its figures are in docs/instructions.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

PROJECT = '''
import json
import os

import pytest
import torch

torch.manual_seed(0)
A, B = torch.randn(64), torch.randn(64)
M, M64, BIG = torch.randn(16, 16), torch.randn(64, 64), torch.randn(1024)
MLP = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU()) for _ in range(6)])
X16 = torch.randn(4, 16)
DATA = {f"k{i}": [i, str(i), {"v": i * 0.5}] for i in range(50)}
CHAIN = int(os.environ.get("CHAIN", "20"))


def chain(n):
    y = A
    for _ in range(n):
        y = y + B
    return y


def matmul_chain():
    y = M64
    for _ in range(8):
        y = y @ M64
    return y


CASES = {
    "add": lambda: torch.add(A, B),
    "mul_": lambda: A.clone().mul_(2.0),
    "sum": lambda: BIG.sum(),
    "matmul16": lambda: M @ M,
    "relu": lambda: torch.relu(BIG),
    "cat": lambda: torch.cat([A, B]),
    "softmax": lambda: torch.softmax(M, 1),
    "slice": lambda: BIG[::4].contiguous(),
    "matmul_chain": matmul_chain,
    "mlp": lambda: MLP(X16),
    "chain": lambda: chain(CHAIN),
}


@pytest.mark.gpu_bench(device="cpu")
@pytest.mark.parametrize("case", sorted(CASES))
def test_torch(gpu_bench, case):
    gpu_bench(CASES[case])


def test_sorted_dropin(benchmark):  # pytest-benchmark's fixture, served by the drop-in
    benchmark(lambda: sorted(i * 7 % 101 for i in range(200)))


def test_json_dropin(benchmark):
    benchmark(json.dumps, DATA)
'''

ARGS = ("-p", "no:cacheprovider", "--gpuperf-instructions", "--gpuperf-processes=2", "--gpuperf-max-processes=2",
        "--gpuperf-max-time=0.1", "--gpuperf-no-why", "--gpuperf-no-ab-confirm")


def session(project: Path, out: Path, name: str, mode: str, env: dict[str, str], busy: bool,
            select: str | None = None) -> dict:
    """One pytest session in ``project``: its JSON report's instruction fields and its times."""
    report = out / f"{name}.json"
    cmd = [sys.executable, "-m", "pytest", mode, f"--gpuperf-json={report}", *ARGS, *(["-k", select] if select else [])]
    if busy:
        cmd = [sys.executable, str(HERE / "noisy_neighbour.py"), "--cores", "1", "--seconds", "1800", "--", *cmd]
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=project, env={**os.environ, **env, "PYTHONPATH": str(ROOT)}, capture_output=True,
                          text=True)
    wall = time.monotonic() - start
    (out / f"{name}.log").write_text(proc.stdout + proc.stderr)
    worker = re.search(r"instruction worker done \((\d+) benchmark\(s\), (\d+) s\)", proc.stdout)
    got = {"name": name, "mode": mode, "busy": busy, "env": env, "returncode": proc.returncode, "wall_s": wall,
           "worker_s": int(worker.group(2)) if worker else None, "benchmarks": {}}
    try:
        data = json.loads(report.read_text())
    except (OSError, ValueError):
        return got
    for key, e in data["benchmarks"].items():
        inst, comp = e.get("instructions") or {}, e.get("instruction_comparison") or {}
        got["benchmarks"][key] = {"per_call": inst.get("per_call"), "verdict": comp.get("verdict"),
                                  "ratio": comp.get("ratio"), "why": comp.get("why", "")}
    return got


def analyse(runs: list[dict]) -> dict:
    """A/A spread over every process (the update's and the compare runs'), false verdicts, the +5% catches."""
    keys = sorted(runs[0]["benchmarks"])
    spread = {}
    for k in keys:
        vals = [r["benchmarks"].get(k, {}).get("per_call") for r in runs]
        vals = [v for v in vals if v]
        spread[k] = {"n": len(vals), "min": min(vals), "max": max(vals), "spread": max(vals) / min(vals) - 1} if vals else None
    compares = [r for r in runs if r["mode"] == "--gpuperf"]
    aa = [(r["name"], k, b["verdict"]) for r in compares for k, b in r["benchmarks"].items()
          if not (r["env"].get("CHAIN") and k.endswith("[chain]"))]
    changed = [(r["name"], b["verdict"], b["ratio"], b["why"][:160]) for r in compares if r["env"].get("CHAIN")
               for k, b in r["benchmarks"].items() if k.endswith("[chain]")]
    return {"spread": spread, "aa_comparisons": len(aa), "aa_not_unchanged": [x for x in aa if x[2] != "unchanged"],
            "changed": changed, "caught": sum(v == "regressed" for _, v, _, _ in changed),
            "worker_s": {r["name"]: r["worker_s"] for r in runs}, "wall_s": {r["name"]: round(r["wall_s"]) for r in runs}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--aa", type=int, default=5)
    ap.add_argument("--changed", type=int, default=5)
    ap.add_argument("--busy", action="store_true", help="the A/A runs again with one core kept busy")
    ap.add_argument("--select", help="only these benchmarks (pytest -k), e.g. 'add' for the worker's fixed cost")
    opts = ap.parse_args()
    out = opts.out.resolve()
    project = out / "project"
    shutil.rmtree(project, ignore_errors=True)
    project.mkdir(parents=True)
    (project / "test_host.py").write_text(PROJECT)
    plan = [("update", "--gpuperf-update-baselines", {}, False)]
    plan += [(f"aa-{i}", "--gpuperf", {}, False) for i in range(opts.aa)]
    plan += [(f"changed-{i}", "--gpuperf", {"CHAIN": "21"}, False) for i in range(opts.changed)]
    plan += [(f"busy-aa-{i}", "--gpuperf", {}, True) for i in range(opts.aa if opts.busy else 0)]
    runs = []
    for name, mode, env, busy in plan:
        runs.append(session(project, out, name, mode, env, busy, opts.select))
        print(f"{name}: exit {runs[-1]['returncode']}, {runs[-1]['wall_s']:.0f} s, instruction worker "
              f"{runs[-1]['worker_s']} s", flush=True)
        (out / "runs.json").write_text(json.dumps(runs, indent=1))
    summary = analyse(runs)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps({k: v for k, v in summary.items() if k != "spread"}, indent=1))
    for k, v in summary["spread"].items():
        print(f"{k}: {v}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
