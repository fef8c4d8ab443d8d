"""Validate pytest-gpuperf's CUDA measurements against triton and torch.utils.benchmark (issue 11).

Usage (from the repository root, plugin installed, on a machine with an NVIDIA GPU)::

    python benchmarks/gpu_validate.py --out gpu_validate.json [--reps 3]
    python benchmarks/gpu_validate.py --device cpu --quick      # dry run of the script itself

Sections (a table on stdout, every number in the JSON):

* **agreement** — fp32 add of 2^10, 2^20, 2^26 elements; bf16 matmul 4096 and 8192; fp32 matmul
  4096. Ours (default, ``flush_l2``, ``cuda_graph``) against ``triton.testing.do_bench(fn,
  return_mode="median")`` (it flushes L2: compared with our ``flush_l2``),
  ``triton.testing.do_bench_cudagraph`` (with our ``cuda_graph``) and
  ``torch.utils.benchmark.Timer(...).blocked_autorange().median`` (no flush: with our default), in
  the same process, the order of the methods alternating between repetitions; per method the
  median over repetitions. Targets for calls >= 50 us: within 2% of do_bench (flush) and of the
  Timer (default); graph mode within 5% of do_bench_cudagraph.
* **overhead** — on the 2^10 add: our median minus the median of a bare loop of CUDA event pairs
  around the same call (target < 1 us); our median with the NVML telemetry sampler running vs not
  (target < 2% apart).
* **l2_flush** — a 4 MiB add, flush off vs on: on must be slower.
* **cuda_graph** — 200 tiny kernels per call, eager vs ``cuda_graph=True``, against the kernels'
  own device time from the profiler: graph mode should be near it.
* **classification** — the six classes on canonical workloads (bf16 GEMM -> compute, large
  elementwise -> memory, many tiny kernels -> overhead, ``.item()`` per step -> sync, large
  pageable H2D copies -> transfer, a DataLoader whose dataset sleeps -> data), through the
  plugin's own path (:func:`pytest_gpuperf.measure.profiling.classify_call`).
* **counts** — kernels, syncs and copies per call of those workloads
  (:func:`pytest_gpuperf.measure.counting.count_call`), 3 runs each: identical?
* **plugin** — the plugin's default path, as a user runs it: a ``gpu_bench`` test of a matmul (bf16
  4096 on CUDA; ``--quick``/CPU: fp32 256) in a temporary project, ``pytest
  --gpuperf-update-baselines`` then ``pytest --gpuperf`` (worker processes, the interleaved probe,
  the telemetry sampler, the count gate, peak memory; no options changed), each in a fresh
  process: exit codes, the verdict, the median against ``ours()`` of the same call here, whether
  probe times, telemetry, counts and peak memory were recorded, and the wall time of each run.
* **distributed** — 2 ranks (issue 35; needs ``torch.cuda.device_count() >= 2``, else skipped with
  the reason; on ``--device cpu`` the same with gloo and small sizes, a dry run of its code path).
  A temporary project of three benchmarks: a bare all-reduce of 64 MiB of fp32 (``collective=
  "all_reduce"``, ``bytes_per_call``; CPU: 256 KiB), a data-parallel step (a bf16 4096 matmul, then
  an all-reduce of its result; CPU: fp32 128) and the same matmul with no communication. Runs
  ``python -m torch.distributed.run --standalone --nproc-per-node 2 -m pytest
  --gpuperf-update-baselines``, then ``... --gpuperf --gpuperf-json r.json``, then ``python -m
  pytest --gpuperf --gpuperf-nproc 2 --gpuperf-json r2.json`` (the plugin starts the torchrun
  launches; ``--quick``: one timed launch), then a plain torch measurement of the same all-reduce
  (a tiny torchrun child: CUDA events around 20 back-to-back all-reduces, 10 repetitions, each
  repetition's slowest rank, nccl-tests' ``busbw = algbw * 2(n-1)/n``). Records each run's exit
  code and wall time, the backend, per benchmark the verdict, median, per-rank medians, imbalance,
  communication share, overlap and time per call, algbw/busbw of the all-reduce, and the plugin's
  busbw over the plain one (target: within 10%). The CPU version costs about 2-5 minutes on a
  2-core machine (five torchrun launches, each rank importing torch); ``--only`` without it leaves it out.

With ``--device cpu`` (and ``--quick`` for small sizes and short budgets) the script runs what
applies to a CPU — ours vs the Timer, classification of the CPU classes, counts — and records
every CUDA-only comparison as skipped (the distributed section runs with gloo), so it can be
tested without a GPU. Nothing here is a test: the figures depend on the machine; docs/timing.md's
"Accuracy" section quotes a GPU run.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

AGREEMENT_FLUSH = 0.02   # ours (flush_l2) vs do_bench, ours (default) vs Timer
AGREEMENT_GRAPH = 0.05   # ours (cuda_graph) vs do_bench_cudagraph
AGREEMENT_MIN_US = 50.0  # targets apply to calls at least this long
OVERHEAD_US = 1.0
SAMPLER_FRACTION = 0.02


def _skip(why: str) -> dict[str, Any]:
    return {"skipped": why}


def environment(device: Any) -> dict[str, Any]:
    """GPU, driver and torch versions (what the table in docs/timing.md must name)."""
    import torch

    env: dict[str, Any] = {"torch": torch.__version__, "python": platform.python_version(), "device": str(device)}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env.update(gpu=props.name, cuda=torch.version.cuda, sm_count=props.multi_processor_count,
                   memory_bytes=props.total_memory)
        try:
            from pytest_gpuperf.measure.telemetry import gpu_info, handle_for

            info = gpu_info(handle_for(device.index or 0)) or {}
            env.update(driver=info.get("driver_version"), max_sm_clock_mhz=info.get("max_sm_clock_mhz"))
        except Exception as exc:  # NVML is optional
            env["driver"] = f"unknown ({exc})"
        try:
            import triton

            env["triton"] = triton.__version__
        except ImportError:
            env["triton"] = None
    else:
        env["cpu"] = platform.processor() or platform.machine()
    return env


# ----------------------------------------------------------------------------- timing methods


def ours(fn: Callable[[], Any], device: Any, *, max_time: float, flush_l2: bool = False,
         cuda_graph: bool = False) -> float:
    """pytest-gpuperf's median per call (us)."""
    from pytest_gpuperf.core.options import BenchOptions
    from pytest_gpuperf.measure.timing import measure

    opts = BenchOptions(max_time=max_time, flush_l2=flush_l2, cuda_graph=cuda_graph, target_precision=0.0)
    t = measure(fn, (), {}, options=opts, device=device)
    return statistics.median(t.samples_ms) * 1e3


def torch_timer(fn: Callable[[], Any], min_run_time: float) -> float:
    """``torch.utils.benchmark.Timer(...).blocked_autorange().median`` (us), with torch's current
    thread count (the Timer defaults to one thread, which only matters on the CPU)."""
    import torch
    from torch.utils.benchmark import Timer

    timer = Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())
    return timer.blocked_autorange(min_run_time=min_run_time).median * 1e6


def triton_do_bench(fn: Callable[[], Any]) -> float:
    """``triton.testing.do_bench(fn, return_mode="median")`` (us; it flushes L2 before each call)."""
    from triton.testing import do_bench

    return float(do_bench(fn, return_mode="median")) * 1e3


def triton_do_bench_cudagraph(fn: Callable[[], Any]) -> float:
    """``triton.testing.do_bench_cudagraph(fn, return_mode="median")`` (us)."""
    from triton.testing import do_bench_cudagraph

    return float(do_bench_cudagraph(fn, return_mode="median")) * 1e3


def _has_triton() -> bool:
    try:
        import triton.testing  # noqa: F401
    except ImportError:
        return False
    return True


# ----------------------------------------------------------------------------- sections


def agreement_workloads(device: Any, quick: bool) -> dict[str, Callable[[], Any]]:
    """name -> a zero-argument callable, inputs allocated once."""
    import torch

    cuda = device.type == "cuda"
    out: dict[str, Callable[[], Any]] = {}
    adds = (10, 20, 26) if cuda and not quick else (10, 16, 20)
    for p in adds:
        x = torch.randn(1 << p, device=device)
        y = torch.randn(1 << p, device=device)
        out[f"add fp32 2^{p}"] = (lambda x=x, y=y: torch.add(x, y))
    sizes = [("bf16", torch.bfloat16, 4096), ("bf16", torch.bfloat16, 8192), ("fp32", torch.float32, 4096)]
    if not cuda or quick:
        sizes = [("fp32", torch.float32, 256)] + ([("bf16", torch.bfloat16, 256)] if cuda else [])
    for tag, dt, n in sizes:
        a = torch.randn(n, n, device=device, dtype=dt)
        b = torch.randn(n, n, device=device, dtype=dt)
        out[f"matmul {tag} {n}"] = (lambda a=a, b=b: torch.matmul(a, b))
    return out


def agreement(device: Any, reps: int, quick: bool) -> list[dict[str, Any]]:
    """Ours vs the references, alternating the order of methods between repetitions."""
    cuda = device.type == "cuda"
    triton_ok = cuda and _has_triton()
    budget = 0.2 if quick else 1.0
    rows = []
    for name, fn in agreement_workloads(device, quick).items():
        methods: dict[str, Callable[[], float]] = {
            "ours": lambda fn=fn: ours(fn, device, max_time=budget),
            "timer": lambda fn=fn: torch_timer(fn, budget),
        }
        if cuda:
            methods["ours_flush"] = lambda fn=fn: ours(fn, device, max_time=budget, flush_l2=True)
            methods["ours_graph"] = lambda fn=fn: ours(fn, device, max_time=budget, cuda_graph=True)
        if triton_ok:
            methods["do_bench"] = lambda fn=fn: triton_do_bench(fn)
            methods["do_bench_cudagraph"] = lambda fn=fn: triton_do_bench_cudagraph(fn)
        runs: dict[str, list[float]] = {k: [] for k in methods}
        order = list(methods)
        for r in range(reps):
            for k in (order if r % 2 == 0 else order[::-1]):
                runs[k].append(methods[k]())
        med = {k: statistics.median(v) for k, v in runs.items()}
        row: dict[str, Any] = {"workload": name, "median_us": med, "runs_us": runs}
        checks = {}
        if "timer" in med:
            checks["ours/timer"] = (med["ours"] / med["timer"], AGREEMENT_FLUSH)
        if "do_bench" in med:
            checks["ours_flush/do_bench"] = (med["ours_flush"] / med["do_bench"], AGREEMENT_FLUSH)
        if "do_bench_cudagraph" in med:
            checks["ours_graph/do_bench_cudagraph"] = (med["ours_graph"] / med["do_bench_cudagraph"], AGREEMENT_GRAPH)
        row["ratios"] = {k: v for k, (v, _) in checks.items()}
        applies = med["ours"] >= AGREEMENT_MIN_US
        row["target_applies"] = applies
        row["met"] = {k: (abs(v - 1) <= tol) if applies else None for k, (v, tol) in checks.items()}
        if not triton_ok:
            row["skipped"] = "triton comparisons: " + ("no CUDA device" if not cuda else "triton not installed")
        rows.append(row)
    return rows


def overhead(device: Any, quick: bool) -> dict[str, Any]:
    """Our median minus a bare event-pair loop on the 2^10 add; sampler on vs off."""
    if device.type != "cuda":
        return _skip("needs CUDA (event-pair loop, NVML sampler)")
    import torch

    from pytest_gpuperf.measure.telemetry import sampler_for

    x, y = torch.randn(1 << 10, device=device), torch.randn(1 << 10, device=device)
    fn = lambda: torch.add(x, y)  # noqa: E731
    for _ in range(100):
        fn()
    torch.cuda.synchronize(device)
    pairs = []
    for _ in range(2000 if not quick else 200):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        pairs.append((s, e))
    torch.cuda.synchronize(device)
    bare_us = statistics.median(s.elapsed_time(e) for s, e in pairs) * 1e3
    budget = 0.3 if quick else 1.0
    ours_us = ours(fn, device, max_time=budget)
    off, on = [], []
    for r in range(3):
        off.append(ours(fn, device, max_time=budget))
        with sampler_for(device):
            on.append(ours(fn, device, max_time=budget))
    diff = statistics.median(on) / statistics.median(off) - 1
    return {"bare_event_pair_us": bare_us, "ours_us": ours_us, "overhead_us": ours_us - bare_us,
            "overhead_met": (ours_us - bare_us) < OVERHEAD_US, "sampler_off_us": off, "sampler_on_us": on,
            "sampler_change": diff, "sampler_met": abs(diff) < SAMPLER_FRACTION,
            "note": "ours batches calls under 100 us into rounds of 2 ms (CUDA_MIN_ROUND_S); the bare loop is one call per event pair"}


def l2_flush(device: Any, quick: bool) -> dict[str, Any]:
    """A 4 MiB add (fits in L2), flush off vs on: on must be slower."""
    if device.type != "cuda":
        return _skip("needs CUDA (L2 flush)")
    import torch

    n = (4 << 20) // 4 // 3  # three 4-byte tensors in 4 MiB
    x, y = torch.randn(n, device=device), torch.randn(n, device=device)
    fn = lambda: torch.add(x, y)  # noqa: E731
    budget = 0.3 if quick else 1.0
    off, on = ours(fn, device, max_time=budget), ours(fn, device, max_time=budget, flush_l2=True)
    return {"off_us": off, "on_us": on, "met": on > off}


def kernel_device_us(fn: Callable[[], Any], device: Any) -> float:
    """Sum of the kernels' device time of one call (us), from the profiler."""
    from pytest_gpuperf.measure.profiling import profile_calls

    _, events = profile_calls(fn, (), {}, device, 1)
    return sum(e.duration_ns for e in events if e.kind in ("kernel", "memset")) / 1e3


def cuda_graphs(device: Any, quick: bool) -> dict[str, Any]:
    """200 tiny kernels per call: eager (launch-bound) vs cuda_graph=True vs the kernels' own time."""
    if device.type != "cuda":
        return _skip("needs CUDA (graphs)")
    import torch

    x = torch.zeros(16, device=device)

    def tiny() -> None:
        for _ in range(200):
            x.add_(1)

    budget = 0.3 if quick else 1.0
    eager, graph = ours(tiny, device, max_time=budget), ours(tiny, device, max_time=budget, cuda_graph=True)
    kernels = kernel_device_us(tiny, device)
    return {"eager_us": eager, "graph_us": graph, "kernels_device_us": kernels, "graph_over_kernels": graph / kernels}


def canonical_workloads(device: Any, quick: bool) -> dict[str, tuple[str, Callable[[], Any]]]:
    """name -> (expected class, fn). CUDA: all six classes; CPU: those a CPU can show."""
    import torch

    cuda = device.type == "cuda"
    out: dict[str, tuple[str, Callable[[], Any]]] = {}
    n = 4096 if cuda and not quick else 512
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16 if cuda else torch.float32)
    out["gemm"] = ("compute", lambda: a @ a)
    big = torch.randn((1 << 26) if cuda and not quick else (1 << 22), device=device)
    out["large elementwise"] = ("memory", lambda: big.mul(2.0))
    small = torch.zeros(16, device=device)
    out["many tiny kernels"] = ("overhead", lambda: [small.add_(1) for _ in range(200)])
    if cuda:
        # one kernel, then .item(), 64 times: every device-idle gap follows a sync. (A .item() after
        # each of 8 small Linear+ReLU layers measured overhead-bound on an H200, 2026-11-26: the
        # host's launches between the syncs, not the syncs, kept the device idle.)
        h0 = torch.randn(1 << 20, device=device)

        def item_per_step() -> float:
            total = 0.0
            for _ in range(64):
                total += h0.sum().item()  # a host-device sync per step, as a logged loss
            return total

        out[".item() per step"] = ("sync", item_per_step)
        host = torch.randn(1 << 26 if not quick else 1 << 22)  # pageable
        out["pageable H2D copies"] = ("transfer", lambda: host.to(device))

    class Sleepy(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 32

        def __getitem__(self, i: int) -> Any:
            time.sleep(0.002)
            return torch.ones(8)

    loader = torch.utils.data.DataLoader(Sleepy(), batch_size=8, num_workers=0)
    w = torch.randn(8, 8, device=device)
    out["DataLoader, sleeping dataset"] = ("data", lambda: [b.to(device) @ w for b in loader])
    return out


def classification(device: Any, quick: bool) -> list[dict[str, Any]]:
    """Each canonical workload through the plugin's classification path."""
    from pytest_gpuperf.measure.profiling import classify_call

    rows = []
    for name, (expected, fn) in canonical_workloads(device, quick).items():
        median_ms = ours(fn, device, max_time=0.2 if quick else 0.5) / 1e3
        _, b = classify_call(fn, (), {}, device, median_ms)
        rows.append({"workload": name, "expected": expected, "got": b.kind, "met": b.kind == expected,
                     "reason": b.reason, "summary": b.describe()})
    return rows


def counts(device: Any, quick: bool, runs: int = 3) -> list[dict[str, Any]]:
    """Kernels (CUDA) / ops, syncs and copies per call, ``runs`` times: identical?"""
    from pytest_gpuperf.measure.counting import count_call

    rows = []
    for name, (_, fn) in canonical_workloads(device, quick).items():
        seen = []
        for _ in range(runs):
            c, _dtype = count_call(fn, (), {}, device)
            seen.append({k: getattr(c, k, None) for k in ("ops", "kernels", "syncs", "copies", "copy_bytes")})
        rows.append({"workload": name, "runs": seen, "identical": all(s == seen[0] for s in seen)})
    return rows


PLUGIN_BENCH = """
import pytest
import torch

N = {n}
DTYPE = torch.{dtype}

@pytest.mark.gpu_bench(device="{device}")
def test_matmul(gpu_bench):
    g = torch.Generator(device="{device}").manual_seed(0)
    a = torch.randn(N, N, device="{device}", generator=g).to(DTYPE)
    gpu_bench(torch.matmul, a, a)
"""


def plugin(device: Any, quick: bool) -> dict[str, Any]:
    """The plugin's default path end to end (see the module doc): update, then compare."""
    import os
    import subprocess
    import tempfile

    import torch

    cuda = device.type == "cuda"
    n, dtype = (4096, "bfloat16") if cuda and not quick else (256, "float32")
    out: dict[str, Any] = {"workload": f"matmul {dtype} {n}"}
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "test_bench.py").write_text(PLUGIN_BENCH.format(n=n, dtype=dtype, device=str(device)))
        Path(tmp, "pytest.ini").write_text("[pytest]\n")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUPERF_", "PYTEST_"))}
        for step, flags in (("update", ["--gpuperf-update-baselines"]), ("compare", ["--gpuperf", "--gpuperf-json=r.json"])):
            started = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *flags],
                                  cwd=tmp, env=env, capture_output=True, text=True)
            out[f"{step}_exit"] = proc.returncode
            out[f"{step}_s"] = round(time.perf_counter() - started, 1)
            if proc.returncode != 0:
                out[f"{step}_tail"] = (proc.stdout + proc.stderr)[-2000:]
        report = Path(tmp, "r.json")
        if report.exists():
            entry = json.loads(report.read_text())["benchmarks"]["test_bench.py::test_matmul"]
            c = entry.get("comparison") or {}
            out.update(verdict=c.get("verdict"), ratio=c.get("ratio"), median_us=entry["stats"]["median_ms"] * 1e3,
                       processes=len(entry.get("process_medians_ms") or []) or 1,
                       probe=entry.get("probe_ms") is not None, telemetry=bool(entry.get("telemetry")),
                       counts=entry.get("counts") is not None, peak_memory_bytes=entry.get("peak_memory_bytes"))
    g = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, device=device, generator=g).to(getattr(torch, dtype))
    out["ours_us"] = ours(lambda: torch.matmul(a, a), device, max_time=0.2 if quick else 1.0)
    if out.get("median_us") and out["ours_us"]:
        out["plugin/ours"] = out["median_us"] / out["ours_us"]
    return out


# ----------------------------------------------------------------------------- distributed (issue 35)

BUSBW_TARGET = 0.10  # the plugin's busbw of a bare all-reduce vs a plain torch loop of the same calls

DIST_BENCH = '''
import pytest
import torch
import torch.distributed as dist

DEVICE = "{device}"  # "cuda" is cuda:LOCAL_RANK on each rank
ELEMS = {elems}  # float32 elements of the bare all-reduce
N = {n}
DTYPE = torch.{dtype}
BENCH = dict(device=DEVICE{opts})


def _square(device):
    g = torch.Generator(device=device).manual_seed(0)
    return torch.randn(N, N, device=device, generator=g).to(DTYPE)


@pytest.mark.gpu_bench(**BENCH, collective="all_reduce", bytes_per_call=4 * ELEMS)
def test_all_reduce(gpu_bench):
    t = torch.zeros(ELEMS, device=gpu_bench.device)
    gpu_bench(lambda: dist.all_reduce(t))


@pytest.mark.gpu_bench(**BENCH)
def test_step(gpu_bench):
    a = _square(gpu_bench.device)

    def step():
        c = torch.matmul(a, a)
        dist.all_reduce(c)

    gpu_bench(step)


@pytest.mark.gpu_bench(**BENCH)
def test_local(gpu_bench):
    a = _square(gpu_bench.device)
    gpu_bench(torch.matmul, a, a)
'''

#: A plain torch measurement of the same all-reduce, as nccl-tests times it: per repetition, the
#: time of CALLS back-to-back all-reduces divided by CALLS (CUDA events on the GPU, perf_counter
#: after a barrier on the CPU); every rank's figures gathered; rank 0 writes them as JSON.
PLAIN_ALL_REDUCE = '''
import json, os, sys, time
import torch
import torch.distributed as dist

backend, elems, calls, reps, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
cuda = backend == "nccl"
device = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if cuda else torch.device("cpu")
if cuda:
    torch.cuda.set_device(device)
    dist.init_process_group(backend, device_id=device)
else:
    dist.init_process_group(backend)
t = torch.zeros(elems, device=device)
for _ in range(5):
    dist.all_reduce(t)
if cuda:
    torch.cuda.synchronize(device)
per_call = []
for _ in range(reps):
    dist.barrier()
    if cuda:
        torch.cuda.synchronize(device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            dist.all_reduce(t)
        end.record()
        end.synchronize()
        per_call.append(start.elapsed_time(end) / calls)
    else:
        t0 = time.perf_counter()
        for _ in range(calls):
            dist.all_reduce(t)
        per_call.append((time.perf_counter() - t0) * 1e3 / calls)
every = [None] * dist.get_world_size()
dist.all_gather_object(every, per_call)
if dist.get_rank() == 0:
    with open(out, "w") as f:
        json.dump({"backend": dist.get_backend(), "world_size": dist.get_world_size(), "bytes": 4 * elems,
                   "calls": calls, "per_call_ms": every}, f)
dist.destroy_process_group()
'''


def all_reduce_bandwidth(nbytes: int, ms: float, ranks: int) -> dict[str, float]:
    """nccl-tests' figures of an all-reduce of ``nbytes`` taking ``ms``: ``algbw = S / t``,
    ``busbw = algbw * 2(n-1)/n`` (``doc/PERFORMANCE.md`` of NVIDIA/nccl-tests), GB/s = 1e9 B/s."""
    algbw = nbytes / (ms * 1e-3) / 1e9
    return {"algbw_gb_per_s": algbw, "busbw_gb_per_s": algbw * 2 * (ranks - 1) / ranks}


def plain_figures(data: dict[str, Any]) -> dict[str, Any]:
    """The plain measurement's per-call time: each repetition's slowest rank (what the plugin takes
    per round), the median over repetitions; with nccl-tests' bandwidths at that time."""
    per_rank = data["per_call_ms"]
    slowest = [max(rank[i] for rank in per_rank) for i in range(len(per_rank[0]))]
    ms = statistics.median(slowest)
    return {"backend": data.get("backend"), "calls_per_rep": data.get("calls"), "bytes": data["bytes"],
            "per_rank_per_call_ms": per_rank, "slowest_per_rep_ms": slowest, "median_ms": ms,
            **all_reduce_bandwidth(data["bytes"], ms, data["world_size"])}


def bench_figures(entry: dict[str, Any]) -> dict[str, Any]:
    """What the distributed section keeps of one JSON report entry (``--gpuperf-json``)."""
    ranks = entry.get("ranks") or {}
    comm = entry.get("communication") or {}
    rates = entry.get("throughput") or {}
    c = entry.get("comparison") or {}
    out: dict[str, Any] = {
        "verdict": c.get("verdict"), "ratio": c.get("ratio"),
        "median_ms": (entry.get("stats") or {}).get("median_ms"),
        "process_medians_ms": entry.get("process_medians_ms"),
        "rank_medians_ms": ranks.get("medians_ms"), "slowest_rank": ranks.get("slowest_rank"),
        "imbalance": ranks.get("imbalance"),
    }
    if "error" in comm:
        out["communication_error"] = comm["error"]
    out.update(backend=comm.get("backend"), comm_share=comm.get("share"), comm_overlap=comm.get("overlap"),
               comm_per_call_ms=comm.get("per_call_ms"), collectives=comm.get("collectives"))
    if "busbw_gb_per_s" in rates:
        out.update(algbw_gb_per_s=rates.get("algbw_gb_per_s"), busbw_gb_per_s=rates["busbw_gb_per_s"])
    return out


def report_figures(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each benchmark of a JSON report (by its function name) -> :func:`bench_figures`."""
    return {bid.split("::")[-1]: bench_figures(e) for bid, e in sorted(report.get("benchmarks", {}).items())}


def _run_timed(cmd: list[str], cwd: str, env: dict[str, str] | None, timeout: float) -> dict[str, Any]:
    """Run ``cmd``: exit code, wall time (s), the output's tail (the plugin's summary; longer when it
    failed). At the timeout the process gets SIGTERM first (torchrun's agent then stops its ranks,
    which run in sessions of their own), SIGKILL 40 s later."""
    import subprocess

    started = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    timed_out = False
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        proc.terminate()
        try:
            output, _ = proc.communicate(timeout=40)
        except subprocess.TimeoutExpired:
            proc.kill()
            output, _ = proc.communicate()
    out: dict[str, Any] = {"exit": proc.returncode, "s": round(time.perf_counter() - started, 1)}
    if timed_out:
        out["timed_out_after_s"] = timeout
    out["tail"] = (output or "")[-(4000 if proc.returncode != 0 else 2000):]
    return out


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def distributed(device: Any, quick: bool, ranks: int = 2) -> dict[str, Any]:
    """Two ranks under torchrun, then under ``--gpuperf-nproc`` (see the module doc)."""
    import os
    import tempfile

    import torch

    if not torch.distributed.is_available():
        return _skip("torch.distributed is not available in this torch build")
    cuda = device.type == "cuda"
    if cuda:
        found = torch.cuda.device_count()
        if found < ranks:
            return _skip(f"needs {ranks}+ CUDA devices (found {found})")
        backend, elems, n, dtype = "nccl", 16 << 20, 4096, "bfloat16"  # 64 MiB of float32
        calls, reps, timeout = 20, 10, 420.0
    else:  # a dry run of the section: gloo on the CPU, small sizes
        backend, elems, n, dtype = "gloo", 1 << 16, 128, "float32"
        calls, reps, timeout = 20, 5, 300.0
    opts = ", max_time=0.1" if quick else ""
    out: dict[str, Any] = {"backend_expected": backend, "world_size": ranks, "all_reduce_bytes": 4 * elems,
                           "matmul": f"{dtype} {n}", "cuda_devices": torch.cuda.device_count() if cuda else None}
    if not cuda:
        out["note"] = "CPU dry run of the section: 2 ranks with gloo"
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks)]
    pytest_args = ["-q", "-p", "no:cacheprovider"]
    # --quick: one timed launch per benchmark (the default pipeline's 3, more if inconclusive, otherwise)
    nproc_extra = ["--gpuperf-processes", "1", "--gpuperf-max-processes", "1"] if quick else []
    if cuda:  # the children share this process's GPU: give back what earlier sections cached
        torch.cuda.empty_cache()
    with tempfile.TemporaryDirectory() as tmp:
        project = DIST_BENCH.format(device=device.type, elems=elems, n=n, dtype=dtype, opts=opts)
        Path(tmp, "test_dist.py").write_text(project)
        Path(tmp, "pytest.ini").write_text("[pytest]\n")
        Path(tmp, "plain_all_reduce.py").write_text(PLAIN_ALL_REDUCE)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUPERF_", "PYTEST_"))}
        env.setdefault("OMP_NUM_THREADS", "1")  # torchrun's default, said without its warning
        runs = {
            "torchrun_update": [*torchrun, "-m", "pytest", *pytest_args, "--gpuperf-update-baselines"],
            "torchrun_compare": [*torchrun, "-m", "pytest", *pytest_args, "--gpuperf", "--gpuperf-json=r.json"],
            "nproc_compare": [sys.executable, "-m", "pytest", *pytest_args, "--gpuperf", f"--gpuperf-nproc={ranks}",
                              *nproc_extra, "--gpuperf-json=r2.json"],
            "plain": [*torchrun, "plain_all_reduce.py", backend, str(elems), str(calls), str(reps), "plain.json"],
        }
        for name, cmd in runs.items():
            out[name] = _run_timed(cmd, tmp, env, timeout)
            print(f"gpu_validate: distributed: {name} exit {out[name]['exit']} in {out[name]['s']} s", file=sys.stderr)
        for name, file in (("torchrun_compare", "r.json"), ("nproc_compare", "r2.json")):
            report = _read_json(Path(tmp, file))
            if report is not None:
                out[name]["benchmarks"] = report_figures(report)
        plain = _read_json(Path(tmp, "plain.json"))
        if plain is not None:
            out["plain"].update(plain_figures(plain))
    comm = {b.get("backend") for b in out["torchrun_compare"].get("benchmarks", {}).values()} - {None}
    out["backend"] = sorted(comm)[0] if len(comm) == 1 else sorted(comm) or None
    ours_busbw = out["torchrun_compare"].get("benchmarks", {}).get("test_all_reduce", {}).get("busbw_gb_per_s")
    plain_busbw = out["plain"].get("busbw_gb_per_s")
    if ours_busbw and plain_busbw:
        out["busbw_plugin/plain"] = ours_busbw / plain_busbw
        out["busbw_met"] = abs(ours_busbw / plain_busbw - 1) <= BUSBW_TARGET
    return out


def distributed_lines(d: Any) -> list[str]:
    """The table's lines of the distributed section."""
    if not isinstance(d, dict) or "torchrun_compare" not in d:
        return [f"({json.dumps(d, default=str)})"]
    runs = ", ".join(f"{k} exit {d[k].get('exit')} in {d[k].get('s')} s"
                     for k in ("torchrun_update", "torchrun_compare", "nproc_compare", "plain") if k in d)
    lines = [f"{d.get('world_size')} ranks, backend {d.get('backend')}: {runs}", "",
             "| benchmark | verdict | median ms | rank medians ms | imbalance | comm share | overlap | comm ms/call "
             "| busbw GB/s | nproc verdict | nproc rank medians ms |",
             "| --- | --- | ---: | --- | ---: | --- | --- | --- | ---: | --- | --- |"]
    nproc = d.get("nproc_compare", {}).get("benchmarks", {})

    def vec(v: Any) -> str:
        if not isinstance(v, list):
            return _fmt(v)
        return "[" + ", ".join(_fmt(None if x is None else float(x)) for x in v) + "]"

    for name, b in d["torchrun_compare"].get("benchmarks", {}).items():
        p = nproc.get(name, {})
        cells = [name, _fmt(b.get("verdict")), _fmt(b.get("median_ms")), vec(b.get("rank_medians_ms")),
                 _fmt(b.get("imbalance")), vec(b.get("comm_share")), vec(b.get("comm_overlap")),
                 vec(b.get("comm_per_call_ms")), _fmt(b.get("busbw_gb_per_s")), _fmt(p.get("verdict")),
                 vec(p.get("rank_medians_ms"))]
        lines.append("| " + " | ".join(cells) + " |")
    plain = d.get("plain", {})
    lines += ["", f"busbw of the bare all-reduce: plugin / plain torch = {_fmt(d.get('busbw_plugin/plain'))} "
              f"(plain {_fmt(plain.get('busbw_gb_per_s'))} GB/s at {_fmt(plain.get('median_ms'))} ms; "
              f"target within {BUSBW_TARGET:.0%}: {_fmt(d.get('busbw_met'))})"]
    return lines


# ----------------------------------------------------------------------------- report


# ----------------------------------------------------------------------------- issue 49: paths never run on a GPU

TWO_OPS_BENCH = """
import pytest
import torch

SCALE = {scale}  # the softmax's rows: 1.5 makes its kernel 1.5x slower
DEVICE = "{device}"


@pytest.mark.gpu_bench(device=DEVICE, counts=False)
def test_two_ops(gpu_bench):
    g = torch.Generator(device=DEVICE).manual_seed(0)
    a = torch.randn({n}, {n}, device=DEVICE, generator=g)
    b = torch.randn(int({rows} * SCALE), {cols}, device=DEVICE, generator=g)

    def step():
        torch.matmul(a, a)
        torch.softmax(b, 1)

    gpu_bench(step)
"""


def _two_ops(device: Any, quick: bool, scale: float) -> str:
    cuda = device.type == "cuda"
    n, rows, cols = (2048, 8192, 8192) if cuda and not quick else (128, 400, 1000)
    return TWO_OPS_BENCH.format(scale=scale, device=device.type, n=n, rows=rows, cols=cols)


def _clean_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith(("GPUPERF_", "PYTEST_"))}


def ab_bisect(device: Any, quick: bool) -> dict[str, Any]:
    """An A/B where one kernel (the softmax's) is made 1.5x slower, and bisect over 4 commits.

    A temporary git repository: commit 1 the benchmark (a matmul, then a softmax), commit 2 a
    comment, commit 3 the softmax on 1.5x the rows, commit 4 a comment. ``pytest --gpuperf-ab
    <commit 1>`` at commit 4 (caught? does the why name ``aten::softmax``?), then ``gpuperf bisect
    <commit 1> <commit 4>`` (does it name commit 3?)."""
    import subprocess
    import tempfile

    env = _clean_env()
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        def git(*args: str) -> str:
            return subprocess.run(["git", *args], cwd=tmp, check=True, capture_output=True, text=True).stdout.strip()

        git("init", "-q")
        git("config", "user.email", "v@example.com")
        git("config", "user.name", "gpu_validate")
        Path(tmp, "pytest.ini").write_text("[pytest]\n")
        commits = []
        for i, (scale, comment) in enumerate(((1.0, ""), (1.0, "# a comment\n"), (1.5, "# a comment\n"),
                                              (1.5, "# another comment\n"))):
            Path(tmp, "test_bench.py").write_text(comment + _two_ops(device, quick, scale))
            git("add", "-A")
            git("commit", "-q", "-m", f"commit {i + 1}")
            commits.append(git("rev-parse", "HEAD"))
        out["commits"] = commits
        pytest_cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        ab = _run_timed([*pytest_cmd, "--gpuperf-ab", commits[0], "--gpuperf-json=ab.json"], tmp, env, 1200)
        report = _read_json(Path(tmp, "ab.json")) or {}
        entry = (report.get("benchmarks") or {}).get("test_bench.py::test_two_ops") or {}
        c, diff = entry.get("comparison") or {}, entry.get("op_diff") or {}
        named = [x.get("name") for x in diff.get("ops") or []  # named as a cause: OpChange.named's statuses
                 if isinstance(x, dict) and x.get("status") in ("slower", "faster", "new", "removed")]
        out["ab"] = {"exit": ab["exit"], "s": ab["s"], "verdict": c.get("verdict"), "ratio": c.get("ratio"),
                     "named": named, "softmax_named_first": bool(named) and "softmax" in str(named[0]),
                     "tail": ab["tail"][-1500:]}
        bisect = _run_timed([sys.executable, "-m", "pytest_gpuperf", "bisect", commits[0], commits[-1],
                             "--json", "bisect.json", "--", "test_bench.py"], tmp, env, 2400)
        found = _read_json(Path(tmp, "bisect.json")) or {}
        outcome = (found.get("benchmarks") or {}).get("test_bench.py::test_two_ops") or {}
        culprits = outcome.get("culprits") or [{}]
        first_bad = culprits[0].get("first_bad")
        out["bisect"] = {"exit": bisect["exit"], "s": bisect["s"], "status": outcome.get("status"),
                         "first_bad": first_bad, "found_commit_3": first_bad == commits[2],
                         "steps": found.get("steps"), "tail": bisect["tail"][-1500:]}
    return out


OOM_BENCH = """
import pytest
import torch


def test_budget(memory_budget):
    with memory_budget("64 MiB"):
        x = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
        del x


@pytest.mark.gpu_bench(device="cuda", counts=False, max_time=0.1)
def test_oom(gpu_bench):
    total = torch.cuda.get_device_properties(0).total_memory
    gpu_bench(lambda: torch.empty(2 * total, dtype=torch.uint8, device="cuda"))
"""


def oom_snapshot(device: Any, quick: bool) -> dict[str, Any]:
    """A memory budget exceeded and an out-of-memory call with ``--gpuperf-memory-snapshot``: both
    fail, the session goes on, and the snapshot pickles are written (CUDA only)."""
    import tempfile

    if device.type != "cuda":
        return _skip("CUDA only: memory snapshots record the CUDA caching allocator")
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "test_mem.py").write_text(OOM_BENCH)
        Path(tmp, "pytest.ini").write_text("[pytest]\n")
        run = _run_timed([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--gpuperf",
                          "--gpuperf-processes=1", "--gpuperf-memory-snapshot=snaps"], tmp, _clean_env(), 600)
        snaps = sorted(p.name for p in Path(tmp, "snaps").glob("*.pickle")) if Path(tmp, "snaps").exists() else []
    return {"exit": run["exit"], "s": run["s"], "snapshots": snaps,
            # the summary lines (the tail keeps the end of the output; the messages themselves come earlier)
            "budget_failed": "FAILED test_mem.py::test_budget - pytest_gpuperf.measure.memory.MemoryLimit" in run["tail"],
            "oom_reported": "FAILED test_mem.py::test_oom - pytest_gpuperf.measure.memory.MemoryLimit" in run["tail"], "tail": run["tail"][-1500:]}


LAUNCH_BENCH = """
import pytest
import torch

x = torch.ones(1024, device="{device}")


@pytest.mark.gpu_bench(device="{device}", counts=False)
def test_small_add(gpu_bench):
    gpu_bench(torch.add, x, x)
"""


def launch_bound(device: Any, quick: bool) -> dict[str, Any]:
    """The default mode (worker processes, rounds of many calls) on a launch-bound call, a 2^10
    add, against ``torch.utils.benchmark.Timer`` in this process (the issue saw 1.30x)."""
    import tempfile

    import torch

    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "test_add.py").write_text(LAUNCH_BENCH.format(device=device.type))
        Path(tmp, "pytest.ini").write_text("[pytest]\n")
        run = _run_timed([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "--gpuperf-update-baselines", "--gpuperf-json=r.json"], tmp, _clean_env(), 900)
        report = _read_json(Path(tmp, "r.json")) or {}
    entry = (report.get("benchmarks") or {}).get("test_add.py::test_small_add") or {}
    plugin_us = (entry.get("estimate_ms") or (entry.get("stats") or {}).get("median_ms") or 0) * 1e3 or None
    x = torch.ones(1024, device=device)
    timer_us = torch_timer(lambda: torch.add(x, x), 0.2 if quick else 1.0)
    return {"exit": run["exit"], "s": run["s"], "plugin_us": plugin_us, "timer_us": timer_us,
            "calls_per_round": entry.get("calls_per_round"),
            "plugin/timer": plugin_us / timer_us if plugin_us and timer_us else None}


CLOCK_BENCH = """
import pytest
import torch

g = torch.Generator(device="cuda").manual_seed(0)
a = torch.randn({n}, {n}, device="cuda", generator=g).to(torch.bfloat16)


@pytest.mark.gpu_bench(device="cuda", counts=False)
def test_matmul(gpu_bench):
    gpu_bench(torch.matmul, a, a)
"""


def clock_rules(device: Any, quick: bool) -> dict[str, Any]:
    """The clock rules under a clock pulled down by a sustained load (issue 49): in this process the
    bf16 matmul's median and SM clock at the default warmup (burst) and after ``steady_clock=30``
    (sustained); then a baseline recorded at the default and a compare run whose warmup is the
    steady-clock one (ini ``gpuperf_steady_clock``): slower in time, the same cycles per call: the
    verdict must not be ``regressed`` (cycles decide where the clocks differ)."""
    import tempfile

    if device.type != "cuda":
        return _skip("CUDA only: the SM clock is read through NVML")
    import torch

    from collections import Counter

    from pytest_gpuperf.core.options import BenchOptions
    from pytest_gpuperf.measure.gpuclock import drop_throttled, gpu_clock_of
    from pytest_gpuperf.measure.timing import measure

    n = 4096 if quick else 8192
    g = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, device=device, generator=g).to(torch.bfloat16)
    out: dict[str, Any] = {"workload": f"matmul bfloat16 {n}"}
    for name, steady in (("burst", 0.0), ("sustained", 10.0 if quick else 30.0)):
        t = drop_throttled(measure(lambda: torch.matmul(a, a), (), {}, device=device,
                                   options=BenchOptions(max_time=1.0, steady_clock=steady, target_precision=0.0)))
        clock = gpu_clock_of(t)
        median = statistics.median(t.samples_ms)
        # NVML clocks-event reasons per round, counted (which bits flag "throttled")
        reasons = Counter(hex(r) if r is not None else "none" for r in getattr(t, "clock_reasons", None) or ())
        out[name] = {"median_us": median * 1e3, "sm_clock_mhz": clock.median_mhz if clock else None,
                     "default_clock_mhz": getattr(t, "default_clock_mhz", None), "clock_reasons": dict(reasons),
                     "kcycles": median * clock.median_mhz if clock else None,
                     "dropped_rounds": t.throttled_dropped, "notes": list(t.notes)}
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "test_clock.py").write_text(CLOCK_BENCH.format(n=n))
        Path(tmp, "pytest.ini").write_text("[pytest]\n")
        # 3 worker processes at most (no escalation): each process of the compare run warms up for the
        # steady clock's 30 s, and the section must fit a 15-minute GPU lease with the others
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--gpuperf-no-ab-confirm",
               "-o", "gpuperf_max_processes=3"]
        update = _run_timed([*cmd, "--gpuperf-update-baselines"], tmp, _clean_env(), 900)
        compare = _run_timed([*cmd, "--gpuperf", "--gpuperf-json=r.json", "-o",
                              f"gpuperf_steady_clock={10 if quick else 30}"], tmp, _clean_env(), 1800)
        report = _read_json(Path(tmp, "r.json")) or {}
    entry = (report.get("benchmarks") or {}).get("test_clock.py::test_matmul") or {}
    c = entry.get("comparison") or {}
    out["session"] = {"update_exit": update["exit"], "compare_exit": compare["exit"], "verdict": c.get("verdict"),
                      "ratio": c.get("ratio"), "note": c.get("note"),
                      "sm_clock_mhz": (entry.get("gpu_clock") or {}).get("median_mhz"),
                      "not_regressed_on_clock": c.get("verdict") != "regressed", "s": update["s"] + compare["s"]}
    return out


def issue49_lines(result: dict[str, Any]) -> list[str]:
    """The table's lines for the issue 49 sections."""
    lines = ["", "## Issue 49: A/B and bisect, OOM snapshot, launch-bound calls, the clock rules", ""]
    for key in ("ab_bisect", "oom_snapshot", "launch_bound", "clock_rules"):
        v = result.get(key)
        if isinstance(v, dict):  # the output's tails stay in the JSON, not in the table (a copy: not changed)
            v = {k: ("..." if k == "tail" else {**x, "tail": "..."} if isinstance(x, dict) and "tail" in x else x)
                 for k, x in v.items()}
        lines += [f"### {key}", "", "```", json.dumps(v, indent=1, default=str), "```", ""]
    return lines


def _fmt(x: Any) -> str:
    if isinstance(x, bool) or x is None:
        return {True: "yes", False: "NO", None: "-"}[x]
    if isinstance(x, float):
        return f"{x:.4g}"
    return str(x)


def table(result: dict[str, Any]) -> str:
    """The stdout summary (Markdown)."""
    env = result["environment"]
    lines = [f"# gpu_validate: {env.get('gpu') or env.get('cpu')} · driver {env.get('driver', '-')} · "
             f"torch {env['torch']} · CUDA {env.get('cuda', '-')} · triton {env.get('triton', '-')}", ""]
    def rows(key: str) -> list[dict[str, Any]]:
        v = result.get(key)
        if isinstance(v, list):
            return v
        lines.append(f"({key}: {json.dumps(v, default=str)})")
        return []

    lines += ["## Agreement (median us; ratio ours/reference; target met for calls >= 50 us)", "",
              "| workload | ours | ours flush | ours graph | Timer | do_bench | do_bench_cudagraph | ratios | met |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |"]
    for r in rows("agreement"):
        m = r["median_us"]
        ratios = ", ".join(f"{k} {v:.3f}" for k, v in r["ratios"].items())
        met = ", ".join(f"{k} {_fmt(v)}" for k, v in r["met"].items())
        lines.append(f"| {r['workload']} | {_fmt(m.get('ours'))} | {_fmt(m.get('ours_flush'))} | "
                     f"{_fmt(m.get('ours_graph'))} | {_fmt(m.get('timer'))} | {_fmt(m.get('do_bench'))} | "
                     f"{_fmt(m.get('do_bench_cudagraph'))} | {ratios} | {met} |")
    for key in ("overhead", "l2_flush", "cuda_graph"):
        lines += ["", f"## {key}", "", "```", json.dumps(result.get(key), indent=1, default=str), "```"]
    lines += ["", "## Classification", "", "| workload | expected | got | met |", "| --- | --- | --- | --- |"]
    lines += [f"| {r['workload']} | {r['expected']} | {r['got']} | {_fmt(r['met'])} |" for r in rows("classification")]
    lines += ["", "## Counts (3 runs)", "", "| workload | per call | identical |", "| --- | --- | --- |"]
    lines += [f"| {r['workload']} | {r['runs'][0]} | {_fmt(r['identical'])} |" for r in rows("counts")]
    lines += ["", "## The plugin's default path (update, then compare)", "", "```",
              json.dumps(result.get("plugin"), indent=1, default=str), "```"]
    lines += ["", "## Distributed (2 ranks: torchrun, then --gpuperf-nproc)", ""]
    lines += distributed_lines(result.get("distributed"))
    lines += issue49_lines(result)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", help="cuda (default), cuda:N or cpu (a dry run of the script)")
    ap.add_argument("--reps", type=int, default=3, help="repetitions per agreement measurement (default 3)")
    ap.add_argument("--quick", action="store_true", help="small sizes and short budgets (a dry run)")
    ap.add_argument("--only", help="comma-separated sections "
                    "(agreement,overhead,l2_flush,cuda_graph,classification,counts,plugin,distributed,"
                    "ab_bisect,oom_snapshot,launch_bound,clock_rules)")
    ap.add_argument("--out", help="write every number as JSON here")
    args = ap.parse_args(argv)
    import torch

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("gpu_validate: no CUDA device (use --device cpu for a dry run)", file=sys.stderr)
        return 2
    sections: dict[str, Callable[[], Any]] = {
        "agreement": lambda: agreement(device, args.reps, args.quick),
        "overhead": lambda: overhead(device, args.quick),
        "l2_flush": lambda: l2_flush(device, args.quick),
        "cuda_graph": lambda: cuda_graphs(device, args.quick),
        "classification": lambda: classification(device, args.quick),
        "counts": lambda: counts(device, args.quick),
        "plugin": lambda: plugin(device, args.quick),
        "distributed": lambda: distributed(device, args.quick),
        "ab_bisect": lambda: ab_bisect(device, args.quick),
        "oom_snapshot": lambda: oom_snapshot(device, args.quick),
        "launch_bound": lambda: launch_bound(device, args.quick),
        "clock_rules": lambda: clock_rules(device, args.quick),
    }
    only = set(args.only.split(",")) if args.only else set(sections)
    unknown = only - set(sections)
    if unknown:
        ap.error(f"--only: unknown section(s) {sorted(unknown)}; accepted: {', '.join(sections)}")
    result: dict[str, Any] = {"environment": environment(device)}
    for name, run in sections.items():
        started = time.perf_counter()
        try:
            result[name] = run() if name in only else _skip("not selected (--only)")
        except Exception as exc:  # one failing section must not lose the others' figures
            result[name] = {"error": f"{type(exc).__name__}: {exc}"}
        print(f"gpu_validate: {name} done in {time.perf_counter() - started:.1f} s", file=sys.stderr)
        if args.out:  # after every section: a run cut short by a time limit keeps what it measured
            Path(args.out).write_text(json.dumps(result, indent=1, default=str) + "\n")
    print(table(result))
    for k, v in result.items():
        if isinstance(v, dict) and "error" in v:
            print(f"gpu_validate: section {k} failed: {v['error']}", file=sys.stderr)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
