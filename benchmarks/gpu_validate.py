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

With ``--device cpu`` (and ``--quick`` for small sizes and short budgets) the script runs what
applies to a CPU — ours vs the Timer, classification of the CPU classes, counts — and records
every CUDA-only comparison as skipped, so it can be tested without a GPU. Nothing here is a test:
the figures depend on the machine; docs/timing.md's "Accuracy" section quotes a GPU run.
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


# ----------------------------------------------------------------------------- report


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
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", help="cuda (default), cuda:N or cpu (a dry run of the script)")
    ap.add_argument("--reps", type=int, default=3, help="repetitions per agreement measurement (default 3)")
    ap.add_argument("--quick", action="store_true", help="small sizes and short budgets (a dry run)")
    ap.add_argument("--only", help="comma-separated sections "
                    "(agreement,overhead,l2_flush,cuda_graph,classification,counts,plugin)")
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
