"""Study (issue 48): A/A spread of instruction counts, 5% detection, and the cost of counting.

Each worker is ONE valgrind process (``valgrind_command``: callgrind, instrumentation off at the
start) that imports torch, sets one intra-op thread, and measures every benchmark below in turn
with :func:`pytest_gpuperf.measure.instructions.measure_many` (``--number`` counted calls after
``--warmup`` uncounted ones, one named dump each). ``--processes`` workers run quiet, then as many
with one core kept busy (``benchmarks/noisy_neighbour.py --cores 1``). Reported:

* A/A: instructions per call of each benchmark in every worker, and the spread ``max/min - 1``
  quiet, busy and over all workers;
* detection: ``chain20`` (20 small adds) against ``chain21`` (one more add, about +5% host work);
  trial i takes ``chain20`` of worker i as the baseline and ``chain21`` of worker i+1 (so no trial
  compares two dumps of one process), gates it at the tolerance and names the function that grew;
* cost: wall time of each worker (start, import, measuring), and per benchmark.

    python benchmarks/instructions_study.py --out /tmp/instr --processes 5

Not part of the plugin; its figures are in docs/instructions.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))


def benchmarks():
    """The worker's benchmarks, (name, zero-argument function) each, built after torch is imported."""
    import json as _json

    import torch

    torch.manual_seed(0)
    a, b = torch.randn(64), torch.randn(64)
    m = torch.randn(16, 16)
    m64 = torch.randn(64, 64)
    big = torch.randn(1024)
    mlp = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU()) for _ in range(6)])
    x16 = torch.randn(4, 16)
    data = {f"k{i}": [i, str(i), {"v": i * 0.5}] for i in range(50)}

    def chain(n):
        def run():
            y = a
            for _ in range(n):
                y = y + b
            return y
        return run

    def matmul_chain():
        y = m64
        for _ in range(8):
            y = y @ m64
        return y

    def python_work(items=tuple(range(200))):  # what a pytest-benchmark drop-in test would benchmark
        return sorted((i * 7919) % 211 for i in items)

    return [
        ("add", lambda: torch.add(a, b)),
        ("mul_", lambda: a.mul_(1.0)),
        ("sum", lambda: big.sum()),
        ("matmul16", lambda: m @ m),
        ("matmul_chain8", matmul_chain),
        ("relu", lambda: torch.relu(big)),
        ("cat", lambda: torch.cat([a, b])),
        ("softmax", lambda: torch.softmax(m, dim=1)),
        ("index", lambda: big[::4]),
        ("mlp_forward", lambda: mlp(x16)),
        ("py_sorted", python_work),
        ("py_json", lambda: _json.dumps(data, sort_keys=True)),
        ("chain20", chain(20)),
        ("chain21", chain(21)),
    ]


def worker(out: Path, number: int, warmup: int) -> None:
    """Runs under valgrind: import torch, measure every benchmark, write timing.json."""
    t0 = time.perf_counter()
    import torch

    torch.set_num_threads(1)
    t_import = time.perf_counter() - t0
    from pytest_gpuperf.measure import instructions as I

    timed: dict[str, float] = {}
    wrapped = benchmarks()
    t1 = time.perf_counter()
    names = []
    count = I.counter()
    assert count.running_on_valgrind(), "not under valgrind"
    count.start_instrumentation()
    for name, fn in [(I.LOOP, lambda: None), *wrapped]:
        s = time.perf_counter()
        I.measure_one(count, name, fn, number=number, warmup=warmup)
        timed[name] = time.perf_counter() - s
        names.append(name)
    (out / f"timing.{os.getpid()}.json").write_text(json.dumps(
        {"pid": os.getpid(), "import_s": t_import, "measure_s": time.perf_counter() - t1, "per_benchmark_s": timed,
         "names": names, "backend": count.backend}))


def run_worker(out: Path, number: int, warmup: int, busy: bool) -> dict:
    """One worker under valgrind (nice 10; with a busy core when ``busy``); its timing and wall seconds."""
    from pytest_gpuperf.measure.instructions import valgrind_command

    out.mkdir(parents=True, exist_ok=True)
    cmd, env = valgrind_command([sys.executable, __file__, "--worker", str(out), "--number", str(number),
                                 "--warmup", str(warmup)], out)
    cmd = ["nice", "-n", "10", *cmd]
    if busy:
        cmd = [sys.executable, str(HERE / "noisy_neighbour.py"), "--cores", "1", "--seconds", "900", "--", *cmd]
    t = time.perf_counter()
    subprocess.run(cmd, check=True, env={**os.environ, **env, "PYTHONPATH": str(ROOT)})
    wall = time.perf_counter() - t
    timing = [json.loads(p.read_text()) for p in out.glob("timing.*.json")]
    (timing_one,) = timing
    return {**timing_one, "wall_s": wall, "busy": busy, "dir": str(out)}


def analyse(runs: list[dict], number: int, tolerance: float) -> dict:
    """Per-call counts, A/A spreads and verdicts, and the +1-add trials with the function named."""
    from pytest_gpuperf.measure.instructions import dump_files
    from pytest_gpuperf.verdict.callgrind import parse_callgrind
    from pytest_gpuperf.verdict.instructions import (decide_instructions, diff_text, function_diff, grown_function,
                                                     per_call_counts, spread)

    profiles = []
    for r in runs:
        files = dump_files(r["dir"], r["pid"])
        ps = {}
        for name, f in zip(r["names"], files):
            p = parse_callgrind(f.read_text())
            assert p.name == name, (p.name, name)
            ps[name] = p
        profiles.append(ps)
        r["per_call"] = per_call_counts(ps, number)
    names = list(runs[0]["per_call"])
    table = {}
    for n in names:
        q = [r["per_call"][n] for r in runs if not r["busy"]]
        b = [r["per_call"][n] for r in runs if r["busy"]]
        table[n] = {"quiet": q, "busy": b, "spread_quiet": spread(q), "spread_busy": spread(b), "spread_all": spread(q + b)}
    trials = []
    k = len(runs)
    for i in range(k):
        j = (i + 1) % k
        base, cur = profiles[i]["chain20"], profiles[j]["chain21"]
        v = decide_instructions(runs[j]["per_call"]["chain21"], runs[i]["per_call"]["chain20"], tolerance=tolerance,
                                benchmark_id="chain20")
        named = grown_function(base, cur, number)
        trials.append({"baseline_worker": Path(runs[i]["dir"]).name, "current_worker": Path(runs[j]["dir"]).name, "verdict": v.verdict.value, "ratio": v.ratio,
                       "message": v.message, "named": named.name if named else None,
                       "diff": diff_text(function_diff(base, cur, number), named)})
    aa = []
    for i in range(k):  # A/A: every benchmark of worker i+1 against worker i: must be unchanged
        j = (i + 1) % k
        for n in names:
            v = decide_instructions(runs[j]["per_call"][n], runs[i]["per_call"][n], tolerance=tolerance, benchmark_id=n)
            aa.append(v.verdict.value)
    return {"table": table, "trials": trials, "aa_verdicts": {v: aa.count(v) for v in set(aa)}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("/tmp/instructions_study"))
    ap.add_argument("--processes", type=int, default=5)
    ap.add_argument("--number", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--tolerance", type=float, default=None)
    ap.add_argument("--no-busy", action="store_true")
    ap.add_argument("--busy-only", action="store_true")
    ap.add_argument("--worker", type=Path)
    ap.add_argument("--analyse-only", action="store_true", help="analyse the finished workers under --out again")
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, args.number, args.warmup)
        return 0
    from pytest_gpuperf.verdict.instructions import DEFAULT_TOLERANCE

    tolerance = DEFAULT_TOLERANCE if args.tolerance is None else args.tolerance
    runs = []
    for d in sorted(args.out.glob("*[0-9]")) if args.analyse_only else []:
        timing = list(d.glob("timing.*.json"))
        if timing:
            runs.append({**json.loads(timing[0].read_text()), "busy": d.name.startswith("busy"), "dir": str(d)})
    phases = [] if args.analyse_only else [False] if args.no_busy else [True] if args.busy_only else [False, True]
    for busy in phases:
        for i in range(args.processes):
            r = run_worker(args.out / f"{'busy' if busy else 'quiet'}{i}", args.number, args.warmup, busy)
            print(f"worker {'busy' if busy else 'quiet'}{i}: {r['wall_s']:.1f} s wall "
                  f"(import {r['import_s']:.1f} s, measuring {r['measure_s']:.1f} s)", flush=True)
            runs.append(r)
    result = analyse(runs, args.number, tolerance)
    result["runs"] = runs
    result["command"] = " ".join(sys.argv)
    (args.out / "result.json").write_text(json.dumps(result, indent=1))
    for n, row in result["table"].items():
        print(f"{n:14s} {min(row['quiet'] + row['busy']):>12,.0f} Ir/call  spread quiet {row['spread_quiet']:.4%}  "
              f"busy {row['spread_busy']:.4%}  all {row['spread_all']:.4%}")
    caught = sum(t["verdict"] == "regressed" for t in result["trials"])
    print(f"+1 add in 20: caught {caught}/{len(result['trials'])}; named: {sorted({t['named'] for t in result['trials']})}")
    print(result["trials"][0]["message"])
    print(result["trials"][0]["diff"])
    print(f"A/A verdicts: {result['aa_verdicts']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
