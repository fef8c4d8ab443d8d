"""Study (issue 32): how often "why it got slower" names the right op, and what it costs.

Part 1 — naming. A six-stage CPU function (matmul, softmax, sort, index_select, layer_norm, cumsum;
each stage on its own input, so one stage can change alone). Each trial profiles side A and side B
the way an A/B run does: ``PROFILE_PAIRS`` worker processes per side, A and B in turn, each a fresh
interpreter calling :func:`pytest_gpuperf.measure.opprofile.profile_ops` (``CYCLES`` cycles of
``calls_per_cycle`` calls, after a warmup), then :func:`pytest_gpuperf.verdict.opdiff.diff_profiles`.
Changes injected into B: five stages made larger (the op ~1.5-2.5x slower) and one op added
(an ``exp``); plus A/A trials (B = A). The whole change the ops must explain is each side's timed
per-call median (100 calls outside the profiler, median over the processes), as an A/B verdict
gives it. Reported: per change, the trials whose first named op is the changed one, and the trials
that named an op outside the changed stage (each stage's ops are found by profiling it alone); for
A/A, the trials that named anything.

Part 2 — cost, through the command users run. A two-commit git repository holding the function as
a ``gpu_bench`` test; B makes the sort stage larger. ``pytest --gpuperf-ab HEAD`` with and without
``--gpuperf-no-why``: the wall time of each and the failure message's ``why:`` line.

    python benchmarks/why_study.py --out /tmp/why --trials 10 --aa 20
    python benchmarks/why_study.py --out /tmp/why --cost-only   # or --naming-only, --cuda-only

Part 3 — CUDA control flow on the simulated device (see :func:`cuda_control_flow`).

Not part of the plugin; its figures are in docs/why.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

#: stage -> (its size in A, the op the changed stage names first); sizes chosen so that each stage
#: takes about 0.2-0.7 ms on the study VM and each injected change moves the whole call by >= ~10%
#: (an A/B verdict must say regressed for the diff to run at all)
#: (issue 47: with the profiler's tree the op named is the one the stage calls, top-level, with its
#: whole cost: aten::matmul with its aten::mm inside, aten::softmax with aten::_softmax, ...)
STAGES = {
    "mm": (256, "aten::matmul"),
    "softmax": (800_000, "aten::softmax"),
    "sort": (60_000, "aten::sort"),
    "index_select": (1_200_000, "aten::index_select"),
    "layer_norm": (600_000, "aten::layer_norm"),
    "cumsum": (300_000, "aten::cumsum"),
}
#: injected changes: name -> (stage sizes of B relative to A, an added exp in B, the op expected first)
CHANGES = {
    "mm 1.5x size": ({"mm": 1.5}, False, "aten::matmul"),
    "softmax 2x": ({"softmax": 2.0}, False, "aten::softmax"),
    "sort 2x": ({"sort": 2.0}, False, "aten::sort"),
    "index_select 2x": ({"index_select": 2.0}, False, "aten::index_select"),
    "layer_norm 2x": ({"layer_norm": 2.0}, False, "aten::layer_norm"),
    "new exp": ({}, True, "aten::exp"),
}

#: the op the rule before the tree (every op by self time) names for a stage: the inner op doing the work
SELF_OP = {"aten::matmul": "aten::mm", "aten::softmax": "aten::_softmax", "aten::layer_norm": "aten::native_layer_norm"}

WORKER = textwrap.dedent('''
    import json, sys
    import torch
    from pytest_gpuperf.measure.opprofile import CYCLES, calls_per_cycle, profile_ops
    spec = json.loads(sys.argv[1])
    torch.manual_seed(0)
    s = spec["sizes"]
    n = int(s["mm"])
    a, b = torch.randn(n, n), torch.randn(n, n)
    sm = torch.randn(int(s["softmax"]) // 1000, 1000)
    so = torch.randn(int(s["sort"]) // 100, 100)
    src = torch.randn(int(s["index_select"]) // 100, 100)
    idx = torch.randint(0, src.shape[0], (src.shape[0],))
    ln = torch.randn(int(s["layer_norm"]) // 500, 500)
    cs = torch.randn(int(s["cumsum"]))
    big = torch.randn(1_600_000)
    def f():  # each stage's result is read by indexing, so no op but the stage's own depends on its size
        out = (a @ b)[0, 0] + torch.softmax(sm, 1)[0, 0] + torch.sort(so, 1)[0][0, 0]
        out = out + src.index_select(0, idx)[0, 0] + torch.nn.functional.layer_norm(ln, (500,))[0, 0]
        out = out + cs.cumsum(0)[-1]
        if spec["added"]:
            out = out + big.exp()[0]
        return out
    import statistics, time
    if spec.get("map"):  # which ops each stage runs (self time > 0), each stage alone
        from torch.profiler import profile
        stages = {"mm": lambda: (a @ b)[0, 0], "softmax": lambda: torch.softmax(sm, 1)[0, 0],
                  "sort": lambda: torch.sort(so, 1)[0][0, 0], "index_select": lambda: src.index_select(0, idx)[0, 0],
                  "layer_norm": lambda: torch.nn.functional.layer_norm(ln, (500,))[0, 0],
                  "cumsum": lambda: cs.cumsum(0)[-1], "added": lambda: big.exp()[0]}
        out = {}
        for name, g in stages.items():
            g()
            with profile() as p:
                g()
            out[name] = sorted({e.key for e in p.key_averages() if e.count > 0})  # the stage's ops, all levels
        print(json.dumps(out))
        raise SystemExit(0)
    for _ in range(5):
        f()
    def timed(n):  # the timing a verdict stands on: per-call medians outside the profiler
        out = []
        for _ in range(n):
            t = time.perf_counter(); f(); out.append((time.perf_counter() - t) * 1e3)
        return statistics.median(out)
    call_ms = timed(30)
    calls = calls_per_cycle(spec.get("call_ms") or call_ms)
    got = profile_ops(f, (), {}, torch.device("cpu"), cycles=CYCLES, calls=calls, process=spec["process"])
    print(json.dumps({"call_ms": call_ms, "median_ms": timed(100), "samples": [x.to_dict() for x in got]}))
''')


def profile_side(sizes: dict[str, float], added: bool, process: int, call_ms: float | None) -> dict:
    """One profiling process of one side, in the environment the A/B run's profiling pairs get
    (``pytest_gpuperf.core.allocator.FIXED``: glibc's thresholds fixed, unless set already). Its timed per-call
    median stands for the verdict's (in the plugin that comes from the timed pairs, in the user's
    environment)."""
    sys.path.insert(0, str(ROOT))
    from pytest_gpuperf.core.allocator import FIXED

    env = {**FIXED, **os.environ, "PYTHONPATH": str(ROOT)}
    spec = {"sizes": sizes, "added": added, "process": process, "call_ms": call_ms}
    out = subprocess.run([sys.executable, "-c", WORKER, json.dumps(spec)], capture_output=True, text=True, env=env,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def stage_ops() -> dict[str, list[str]]:
    """Which ops each stage runs (each stage profiled alone): an op of the changed stage may change
    with it (``aten::sort`` copies its values with ``aten::copy_``), any other op did not change."""
    base = {k: float(v[0]) for k, v in STAGES.items()}
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    spec = {"sizes": base, "added": False, "process": 0, "map": True}
    out = subprocess.run([sys.executable, "-c", WORKER, json.dumps(spec)], capture_output=True, text=True, env=env,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def trial(change: tuple[dict[str, float], bool, str] | None, own: set[str] = frozenset()) -> dict:
    """One trial: PROFILE_PAIRS processes per side, A and B in turn; the diff (the whole change from
    each side's timed per-call medians, as the verdict gives it) and what it named. ``own``: the
    ops of the changed stage (named, they are no false cause)."""
    sys.path.insert(0, str(ROOT))
    from pytest_gpuperf.ab.run import MORE_PROFILE_PAIRS, PROFILE_PAIRS
    from dataclasses import replace

    from pytest_gpuperf.verdict.opdiff import OpSample, diff_profiles, why_line

    base = {k: float(v[0]) for k, v in STAGES.items()}
    factors, added, expected = change if change is not None else ({}, False, None)
    sizes_b = {k: base[k] * factors.get(k, 1.0) for k in base}
    a, b = [], []
    medians: dict[str, list[float]] = {"A": [], "B": []}
    call_ms = None
    import statistics

    def pairs(start: int, n: int) -> None:
        nonlocal call_ms
        for p in range(start, start + n):
            first = ("A", "B") if p % 2 == 0 else ("B", "A")
            for side in first:
                got = profile_side(base if side == "A" else sizes_b, added and side == "B", p, call_ms)
                call_ms = call_ms or got["call_ms"]  # the same calls per cycle on both sides, as the A/B workers
                (a if side == "A" else b).extend(OpSample.from_dict(x) for x in got["samples"])
                medians[side].append(got["median_ms"])

    # the whole change, as the verdict gives it: the timed medians of the first pairs (the A/B
    # verdict is decided before the profiling, and more profiling pairs do not change it)
    pairs(0, PROFILE_PAIRS)
    whole = (statistics.median(medians["A"]), statistics.median(medians["B"]))
    d = diff_profiles(a, b, whole_ms=whole)
    first_named = [c.name for c in d.named]
    if not d.named:  # as the A/B run: more pairs where no op explained it
        pairs(PROFILE_PAIRS, MORE_PROFILE_PAIRS)
        d = diff_profiles(a, b, whole_ms=whole)
    named = [c.name for c in d.named]
    line = why_line(d)
    # the rule before the tree (issue 47), on the same cycles: every op by its self time
    flat = diff_profiles([replace(s, tree_ms={}, tree_counts={}) for s in a],
                         [replace(s, tree_ms={}, tree_counts={}) for s in b], whole_ms=whole)
    flat_named = [c.name for c in flat.named]
    # the shares the line prints (named ops, other ops, outside ops): they must add to 100
    shares = [int(x) for pair in re.findall(r"(-?\d+)% of the (?:slowdown|speed-up)|ops [+-][^(;]*\((-?\d+)%\)", line)
              for x in pair if x]
    def per_process(side: list) -> dict[int, float]:  # the expected op's median per profiling process (ms)
        out: dict[int, list[float]] = {}
        for s in side:
            out.setdefault(s.process, []).append(s.tree_ms.get(expected, 0.0) if expected else 0.0)
        return {p: round(statistics.median(v), 4) for p, v in sorted(out.items())}

    return {"named": named, "first": named[0] if named else None, "expected": expected,
            "pairs": len(medians["A"]), "first_pairs_named": first_named,
            "expected_per_process_ms": {"A": per_process(a), "B": per_process(b)},
            "unchanged_named": [n for n in named if n != expected and n not in own], "why": line,
            "total_shift_ms": d.total_shift_ms, "whole_ms": whole, "tree": d.tree, "shares_sum": sum(shares),
            "self_named": flat_named, "self_first": flat_named[0] if flat_named else None,
            "self_expected": SELF_OP.get(expected, expected),
            "self_unchanged_named": [n for n in flat_named if n != SELF_OP.get(expected, expected) and n not in own]}


def naming(opts: argparse.Namespace) -> dict:
    ops = stage_ops()
    out: dict = {"stage_ops": ops}
    for name, change in CHANGES.items():
        if opts.changes and name not in opts.changes:
            continue
        stages = [k for k in change[0]] or ["added"]
        own = {op for k in stages for op in ops.get(k, [])}
        rows = [trial(change, own) for _ in range(opts.trials)]
        out[name] = {"trials": len(rows), "right_first": sum(r["first"] == change[2] for r in rows),
                     "unchanged_named": sum(bool(r["unchanged_named"]) for r in rows),
                     "shares_100": sum(r["shares_sum"] == 100 for r in rows), "tree": sum(r["tree"] for r in rows),
                     "self_right_first": sum(r["self_first"] == r["self_expected"] for r in rows),
                     "self_unchanged_named": sum(bool(r["self_unchanged_named"]) for r in rows),
                     "more_pairs": sum(not r["first_pairs_named"] for r in rows),
                     "rows": rows}
        print(f"{name}: right op first {out[name]['right_first']}/{len(rows)}, "
              f"an unchanged op named {out[name]['unchanged_named']}/{len(rows)}, "
              f"shares add to 100% {out[name]['shares_100']}/{len(rows)} (tree {out[name]['tree']}); "
              f"by self time, same cycles: right first {out[name]['self_right_first']}/{len(rows)}, "
              f"unchanged named {out[name]['self_unchanged_named']}/{len(rows)}; "
              f"profiled in more pairs {out[name]['more_pairs']}/{len(rows)}", flush=True)
        (Path(opts.out) / "naming-rows.json").write_text(json.dumps(out, indent=1))  # so far
    rows = [trial(None) for _ in range(opts.aa)]
    out["A/A"] = {"trials": len(rows), "named_anything": sum(bool(r["named"]) for r in rows),
                  "shares_100": sum(r["shares_sum"] == 100 for r in rows),
                  "self_named_anything": sum(bool(r["self_named"]) for r in rows),
                  "more_pairs": sum(not r["first_pairs_named"] for r in rows), "rows": rows}
    print(f"A/A: named something in {out['A/A']['named_anything']}/{len(rows)}, "
          f"shares add to 100% {out['A/A']['shares_100']}/{len(rows)}; by self time, same cycles: "
          f"named something in {out['A/A']['self_named_anything']}/{len(rows)}", flush=True)
    return out


TEST = '''
import pytest
import torch

torch.manual_seed(0)
a, b = torch.randn(160, 160), torch.randn(160, 160)
sm = torch.randn(400, 1000)
so = torch.randn(@SORT@, 100)

@pytest.mark.gpu_bench(max_time=0.5)
def test_stages(gpu_bench):
    gpu_bench(lambda: (a @ b)[0, 0] + torch.softmax(sm, 1)[0, 0] + torch.sort(so, 1)[0][0, 0])
'''


def cost(opts: argparse.Namespace) -> dict:
    """Two A/B runs of a real regression (the sort stage 2x larger) through pytest, with and without the profiles."""
    repo = Path(tempfile.mkdtemp(prefix="why-study-"))

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)

    git("init", "-q")
    git("config", "user.email", "s@s")
    git("config", "user.name", "s")
    (repo / "test_stages.py").write_text(TEST.replace("@SORT@", "2000"))
    (repo / "pytest.ini").write_text("[pytest]\n")
    git("add", "-A")
    git("commit", "-qm", "A")
    (repo / "test_stages.py").write_text(TEST.replace("@SORT@", "4000"))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = {}
    for label, extra in (("with why", []), ("--gpuperf-no-why", ["--gpuperf-no-why"])):
        start = time.perf_counter()
        res = subprocess.run([sys.executable, "-m", "pytest", "--gpuperf-ab", "HEAD", "-p", "no:cacheprovider",
                              f"--gpuperf-json={repo}/{label.strip('-')}.json", *extra], cwd=repo, env=env,
                             capture_output=True, text=True)
        wall = time.perf_counter() - start
        text = res.stdout
        (Path(opts.out) / f"cost-{label.strip('-')}.log").write_text(text + res.stderr)
        verdict = next((ln for ln in text.splitlines() if ln.startswith(("regressed", "improved", "unchanged",
                                                                         "inconclusive"))), None)
        why = next((ln.strip() for ln in text.splitlines() if ln.strip().startswith("why:")), None)
        out[label] = {"wall_s": wall, "rc": res.returncode, "verdict": verdict, "why": why}
        print(f"{label}: {wall:.1f} s, rc {res.returncode}\n  {verdict}\n  {why}", flush=True)
    return out


#: CUDA control flow (part 3): kernel -> device ms per call in A (simulated: exact, so 1.5x is enough)
KERNELS = {"gemm": 0.8, "softmax_kernel": 0.3, "sort_kernel": 0.4, "gather_kernel": 0.25, "layer_norm_kernel": 0.3}
CUDA_CHANGES = {f"{k} 1.5x": ({k: 1.5}, 0.0, f"kernel: {k}") for k in KERNELS}
CUDA_CHANGES["host wait +5 ms (GPU idle)"] = ({}, 0.005, "GPU idle between kernels")


def cuda_control_flow(opts: argparse.Namespace) -> dict:
    """Part 3 — CUDA control flow on the simulated device (:class:`pytest_gpuperf.testing.SimulatedCuda`):
    a five-kernel step; each change makes one kernel 1.5x longer, or adds a host wait between two
    kernels (the GPU idles); side A and side B are profiled by
    :func:`~pytest_gpuperf.measure.opprofile.profile_ops` with CUDA activities (the kernels' device
    times and the idle time come from the simulated profiler events), ``PROFILE_PAIRS`` "processes"
    per side in turn, and diffed with the whole change the simulated clock gives. It checks that the
    CUDA path names the changed kernel (or the idle time) first, not how well a real GPU's noise is
    handled (that needs a GPU run)."""
    sys.path.insert(0, str(ROOT))
    import statistics

    import pytest
    import torch

    from pytest_gpuperf.ab.run import PROFILE_PAIRS
    from pytest_gpuperf.measure.opprofile import CYCLES, profile_ops
    from pytest_gpuperf.testing import SimulatedCuda
    from pytest_gpuperf.verdict.opdiff import diff_profiles

    mp = pytest.MonkeyPatch()
    sim = SimulatedCuda().install(mp)
    cuda = torch.device("cuda")

    def step(kernels: dict[str, float], wait_s: float) -> None:
        for i, (name, ms) in enumerate(kernels.items()):
            sim.kernel(ms=ms, name=name)
            if i == 1 and wait_s:
                time.sleep(wait_s)

    def whole(kernels: dict[str, float], wait_s: float) -> float:  # the per-call time on the simulated clock
        t0 = sim.clock()
        for _ in range(5):
            step(kernels, wait_s)
        sim.synchronize()
        return (sim.clock() - t0) / 5e6 + wait_s * 1e3

    out = {}
    try:
        for name, (factors, wait_s, expected) in {**CUDA_CHANGES, "A/A": ({}, 0.0, None)}.items():
            b_kernels = {k: v * factors.get(k, 1.0) for k, v in KERNELS.items()}
            rows = []
            for _ in range(opts.trials if expected else opts.aa):
                a, b = [], []
                for p in range(PROFILE_PAIRS):
                    a += profile_ops(step, (KERNELS, 0.0), {}, cuda, cycles=CYCLES, calls=5, process=p)
                    b += profile_ops(step, (b_kernels, wait_s), {}, cuda, cycles=CYCLES, calls=5, process=p)
                d = diff_profiles(a, b, whole_ms=(whole(KERNELS, 0.0), whole(b_kernels, wait_s)))
                rows.append([c.name for c in d.named])
            if expected:
                out[name] = {"trials": len(rows), "right_first": sum(bool(r) and r[0] == expected for r in rows),
                             "other_named": sum(any(n != expected for n in r) for r in rows)}
                print(f"CUDA (simulated) {name}: right first {out[name]['right_first']}/{len(rows)}, "
                      f"another named {out[name]['other_named']}/{len(rows)}", flush=True)
            else:
                out[name] = {"trials": len(rows), "named_anything": sum(bool(r) for r in rows)}
                print(f"CUDA (simulated) A/A: named something in {out[name]['named_anything']}/{len(rows)}", flush=True)
    finally:
        mp.undo()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--trials", type=int, default=10, help="trials per injected change")
    ap.add_argument("--aa", type=int, default=20, help="A/A trials")
    ap.add_argument("--cost-only", action="store_true")
    ap.add_argument("--naming-only", action="store_true")
    ap.add_argument("--cuda-only", action="store_true", help="only part 3 (CUDA control flow, simulated device)")
    ap.add_argument("--changes", type=lambda v: [x.strip() for x in v.split(",")], default=None,
                    help=f"only these injected changes in part 1, comma-separated (of: {', '.join(CHANGES)})")
    ap.add_argument("--no-cuda", action="store_true", help="leave part 3 out of a naming run")
    ap.add_argument("--pairs", type=int, default=None,
                    help="profiling processes per side in parts 1 and 3 (default: the plugin's PROFILE_PAIRS)")
    opts = ap.parse_args()
    if opts.pairs is not None:  # a candidate default, studied before it is the plugin's
        sys.path.insert(0, str(ROOT))
        import pytest_gpuperf.ab.run as ab_run

        ab_run.PROFILE_PAIRS = opts.pairs
    Path(opts.out).mkdir(parents=True, exist_ok=True)
    if opts.cuda_only:
        result = {"cuda_simulated": cuda_control_flow(opts)}
        (Path(opts.out) / "summary-cuda.json").write_text(json.dumps(result, indent=1))
        return
    result = {} if opts.naming_only else {"cost": cost(opts)}
    if not opts.cost_only:
        result["naming"] = naming(opts)
        if not opts.no_cuda:
            result["cuda_simulated"] = cuda_control_flow(opts)
    name = "summary-cost.json" if opts.cost_only else "summary-naming.json" if opts.naming_only else "summary.json"
    (Path(opts.out) / name).write_text(json.dumps(result, indent=1))  # one part's run never overwrites another's


if __name__ == "__main__":
    main()
