"""Burst against sustained clocks on a GPU: why the plugin's median of a bf16 4096 matmul read
0.89-0.92x the bare ``measure()`` in ``gpu_validate.py`` (docs/timing.md, "Measured on an NVIDIA H100").

Usage (repository root, plugin installed, on an NVIDIA GPU)::

    python benchmarks/gpu_burst_vs_sustained.py

Prints one JSON object: the bare ``measure()`` (``target_precision=0``: the whole 1 s of
``max_time``) of the same seeded matmul cold, after 30 s of matmuls (hot), in a fresh process and at
the end, each as (median us, samples, calls per round); the kernels cuBLAS ran; the plugin's own
single-process update session of the same test (median us, rounds); and the SM clock, temperature
and power from nvidia-smi at each stage. Not a test: the figures depend on the GPU.
"""
import json, os, subprocess, sys, tempfile, time, statistics
from pathlib import Path
import torch

def clocks():
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,temperature.gpu,power.draw", "--format=csv,noheader"],
                              capture_output=True, text=True).stdout.strip()
    except Exception as e:
        return str(e)

def ours(a, max_time=1.0):
    from pytest_gpuperf.core.options import BenchOptions
    from pytest_gpuperf.measure.timing import measure
    t = measure(lambda: torch.matmul(a, a), (), {}, options=BenchOptions(max_time=max_time, target_precision=0.0), device=torch.device("cuda"))
    return statistics.median(t.samples_ms) * 1e3, len(t.samples_ms), t.calls_per_round

def kernels(a):
    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        torch.matmul(a, a); torch.cuda.synchronize()
    return sorted({e.name[:90] for e in p.events() if e.device_type.name == "CUDA"})

mode = sys.argv[1] if len(sys.argv) > 1 else "main"
g = torch.Generator(device="cuda").manual_seed(0)
a = torch.randn(4096, 4096, device="cuda", generator=g).to(torch.bfloat16)
if mode == "fresh":
    print(json.dumps({"fresh_ours_us": ours(a), "kernels": kernels(a), "clocks": clocks()}), flush=True)
    sys.exit(0)
out = {"clocks_start": clocks()}
out["cold_ours"] = ours(a)
out["kernels_main"] = kernels(a)
t0 = time.time()
while time.time() - t0 < 30:   # 30 s of matmuls: a hot GPU
    for _ in range(200):
        torch.matmul(a, a)
    torch.cuda.synchronize()
out["clocks_hot"] = clocks()
out["hot_ours"] = ours(a)
out["fresh_process"] = subprocess.run([sys.executable, __file__, "fresh"], capture_output=True, text=True).stdout.strip()
bench = '''
import pytest, torch
@pytest.mark.gpu_bench(device="cuda")
def test_matmul(gpu_bench):
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(4096, 4096, device="cuda", generator=g).to(torch.bfloat16)
    gpu_bench(torch.matmul, a, a)
'''
with tempfile.TemporaryDirectory() as tmp:
    Path(tmp, "test_bench.py").write_text(bench); Path(tmp, "pytest.ini").write_text("[pytest]\n")
    for label, flags in (("update1", ["--gpuperf-update-baselines", "--gpuperf-processes", "1", "--gpuperf-json=u.json"]),):
        t1 = time.time()
        p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *flags], cwd=tmp, capture_output=True, text=True)
        e = json.loads(Path(tmp, "u.json").read_text())["benchmarks"]["test_bench.py::test_matmul"] if Path(tmp, "u.json").exists() else {}
        out[label] = {"exit": p.returncode, "s": round(time.time() - t1, 1), "median_us": (e.get("stats") or {}).get("median_ms", 0) * 1e3,
                      "rounds": e.get("rounds"), "calls_per_round": e.get("calls_per_round"), "tail": (p.stdout + p.stderr)[-600:] if p.returncode else ""}
out["clocks_end"] = clocks()
out["after_ours"] = ours(a)
print(json.dumps(out, indent=1), flush=True)
