"""Machine-speed drift: fixed reference workloads per device, and normalization by them.

Once per session and device (when the first measured benchmark runs there), two fixed reference
workloads are timed with the plugin's own timing, about 0.1 s each: a compute-bound matmul and a
bandwidth-bound copy. Their medians go into ``environment.reference`` of results and baselines.
When comparing, the ratio "this machine now / when the baseline was recorded" tells whether the
machine itself got slower (another CPU model behind the same name, clocks, a noisy neighbour):
above :data:`~pytest_gpuperf.verdict.machine.DRIFT_WARN` it is reported, and with ``--gpuperf-normalize`` the current samples are
divided by the matching ratio before deciding (compute-bound benchmarks by the matmul ratio, all
others by the copy ratio).

On the CPU a third one, a pure-Python loop in the calling thread, is timed by its thread CPU time
(``python_cpu_ms``): a neighbour that takes the core away leaves it alone, but a CPU that itself runs
slower (a busy SMT sibling, a host that halves a vCPU's throughput) shows in it, as in the CPU time
of the benchmarks decided on CPU time (issue 45: with one core busy, a cattrs rerun read every
CPU-time median about 2x the baseline's, and 16 of its 64 benchmarks failed).
"""

from __future__ import annotations

from typing import Any, Callable, ContextManager


def measure_reference(device: Any) -> dict[str, Any]:
    """Time the reference workloads on ``device``; returns ``{"matmul_ms", "copy_ms", ...}`` (medians, ms).

    matmul: 4096^2 bf16 on CUDA, 512^2 fp32 on the CPU; copy: 512 MiB on CUDA, 64 MiB on the CPU;
    on the CPU also ``python_cpu_ms``: the calling thread's CPU time of :func:`python_loop`
    (median, ms; see the module doc).
    """
    import torch

    from pytest_gpuperf.core.options import BenchOptions
    from pytest_gpuperf.verdict.stats import summarize
    from pytest_gpuperf.measure.timing import measure

    cuda = getattr(device, "type", "cpu") == "cuda"
    opts = BenchOptions(max_time=0.1, warmup_time=0.02, target_precision=0.0, min_rounds=5)
    g = torch.Generator(device=device).manual_seed(0)
    n, dt = (4096, torch.bfloat16) if cuda else (512, torch.float32)
    a = torch.randn(n, n, device=device, generator=g).to(dt)
    mm = measure(torch.matmul, (a, a), {}, options=opts, device=device)
    del a
    numel = (1 << 27) if cuda else (1 << 24)
    src = torch.ones(numel, device=device)
    dst = torch.empty_like(src)
    cp = measure(dst.copy_, (src,), {}, options=opts, device=device)
    out = {
        "matmul_ms": summarize(mm.samples_ms).median_ms,
        "copy_ms": summarize(cp.samples_ms).median_ms,
        "matmul": f"{n}x{n} {str(dt).removeprefix('torch.')} matmul",
        "copy": f"{numel * 4 // 2**20} MiB copy",
    }
    if not cuda:
        from pytest_gpuperf.measure.probe import python_loop
        from pytest_gpuperf.measure.timing import CpuClocks

        py = measure(python_loop, (), {}, options=opts, device=device, cpu_clocks=CpuClocks())
        out["python_cpu_ms"] = summarize(py.cpu_samples_ms).median_ms
        out["python_cpu"] = "pure-Python loop, thread CPU time"
    return out


def shared_reference(device: Any, measure: Callable[[Any], dict[str, Any]], folder: Any,
                     lock: ContextManager[Any]) -> dict[str, Any]:
    """``measure(device)``, taken under ``lock`` and shared through ``folder`` by the run's processes.

    Under pytest-xdist ``lock`` is the device's lock (so no benchmark runs meanwhile) and ``folder``
    the run's shared folder: the first worker to take the lock measures and writes
    ``reference-<device>.json`` there, the others read it, so all workers compare against the same
    reference. ``folder`` None (no xdist): just measure. Exceptions of ``measure`` propagate.
    """
    with lock:
        if folder is None:
            return measure(device)
        import json
        from pathlib import Path

        from pytest_gpuperf.core.files import write_atomic

        path = Path(folder, f"reference-{str(device).replace(':', '_')}.json")
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):  # not measured yet (or unreadable): measure it now
            pass
        reference = measure(device)
        write_atomic(path, json.dumps(reference))
        return reference


