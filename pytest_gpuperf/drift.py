"""Machine-speed drift: fixed reference workloads per device, and normalization by them.

Once per session and device (when the first measured benchmark runs there), two fixed reference
workloads are timed with the plugin's own timing, about 0.1 s each: a compute-bound matmul and a
bandwidth-bound copy. Their medians go into ``environment.reference`` of results and baselines.
When comparing, the ratio "this machine now / when the baseline was recorded" tells whether the
machine itself got slower (another CPU model behind the same name, clocks, a noisy neighbour):
above :data:`DRIFT_WARN` it is reported, and with ``--gpuperf-normalize`` the current samples are
divided by the matching ratio before deciding (compute-bound benchmarks by the matmul ratio, all
others by the copy ratio).
"""

from __future__ import annotations

from typing import Any, Callable, ContextManager, Mapping, Sequence

#: Relative drift of a reference workload above which the summary warns.
DRIFT_WARN = 0.05


def measure_reference(device: Any) -> dict[str, Any]:
    """Time the reference workloads on ``device``; returns ``{"matmul_ms", "copy_ms", ...}`` (medians, ms).

    matmul: 4096^2 bf16 on CUDA, 512^2 fp32 on the CPU; copy: 512 MiB on CUDA, 64 MiB on the CPU.
    """
    import torch

    from .options import BenchOptions
    from .stats import summarize
    from .timing import measure

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
    return {
        "matmul_ms": summarize(mm.samples_ms).median_ms,
        "copy_ms": summarize(cp.samples_ms).median_ms,
        "matmul": f"{n}x{n} {str(dt).removeprefix('torch.')} matmul",
        "copy": f"{numel * 4 // 2**20} MiB copy",
    }


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

        from .baseline import write_atomic

        path = Path(folder, f"reference-{str(device).replace(':', '_')}.json")
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):  # not measured yet (or unreadable): measure it now
            pass
        reference = measure(device)
        write_atomic(path, json.dumps(reference))
        return reference


def drift_ratios(current: Mapping[str, Any] | None, baseline: Mapping[str, Any] | None) -> dict[str, float] | None:
    """``{"matmul": now/then, "copy": now/then}`` from two ``environment.reference`` dicts. Pure.

    Returns None when either side lacks the reference medians.
    """
    if not current or not baseline:
        return None
    out = {}
    for key in ("matmul", "copy"):
        now, then = current.get(f"{key}_ms"), baseline.get(f"{key}_ms")
        if isinstance(now, (int, float)) and isinstance(then, (int, float)) and now > 0 and then > 0:
            out[key] = float(now) / float(then)
    return out or None


def ratio_for(ratios: Mapping[str, float] | None, bottleneck_kind: str | None) -> tuple[str, float] | None:
    """The reference that normalizes a benchmark: the matmul ratio for compute-bound ones, else copy."""
    if not ratios:
        return None
    key = "matmul" if bottleneck_kind == "compute" else "copy"
    if key not in ratios:
        return None
    return key, ratios[key]


def normalize(samples_ms: Sequence[float], ratio: float) -> list[float]:
    """Divide per-call times by a machine-speed ratio (now/then). Pure."""
    if not ratio > 0:
        raise ValueError(f"drift ratio must be > 0, got {ratio!r}")
    return [float(x) / ratio for x in samples_ms]


def drift_warning(ratios: Mapping[str, float] | None) -> str | None:
    """``"machine speed drift since the baseline: matmul +7.2%, copy -1.0%"`` above 5%, else None."""
    if not ratios or all(abs(r - 1) <= DRIFT_WARN + 1e-9 for r in ratios.values()):  # "above 5%"
        return None
    parts = ", ".join(f"{k} {(r - 1) * 100:+.1f}%" for k, r in ratios.items())
    return f"machine speed drift since the baseline was recorded (reference workloads now/then): {parts}"
