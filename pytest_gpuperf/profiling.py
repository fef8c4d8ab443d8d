"""torch adapters for bottleneck classification: profiling, FLOP and byte counts, calibration.

* ``profile_calls`` runs a few calls of ``fn`` under ``torch.profiler`` (CPU, plus CUDA activities
  on a GPU) inside a ``gpuperf::region`` annotation and converts the events to
  :class:`pytest_gpuperf.bottleneck.TraceEvent`.
* ``count_flops_and_bytes`` counts FLOPs with ``torch.utils.flop_counter.FlopCounterMode`` and a
  minimum-traffic byte estimate with a small ``TorchDispatchMode`` that sums the sizes of every
  aten op's tensor inputs and outputs (view ops move nothing and are skipped).
* ``calibrate`` measures the device's two ceilings once per session and dtype: a large matmul
  (FLOP/s) and a large copy (bytes read + written per second), as the roofline needs.

Everything imports torch lazily. Profiling has overhead, so all of this runs outside the timed
rounds.
"""

from __future__ import annotations

import math
import statistics
from typing import Any, Callable

from .bottleneck import FINAL_SYNC_NAME, PHASE_PREFIX, REGION_NAME, TraceEvent

_KINDS = {
    "cpu_op": "cpu_op",
    "user_annotation": "annotation",
    "kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "gpu_memset": "memset",
    "cuda_runtime": "runtime",
    "cuda_driver": "runtime",
}

_CALIBRATION: dict[tuple[str, str], tuple[float, float]] = {}
_CPU_OP_FLOOR: list[float] = []


def _sync(device: Any) -> None:
    if getattr(device, "type", "cpu") == "cuda":
        import torch

        torch.cuda.synchronize(device)


def to_trace_events(prof: Any) -> list[TraceEvent]:
    """Convert a finished ``torch.profiler.profile`` into :class:`TraceEvent` objects."""
    out = []
    for e in prof.profiler.kineto_results.events():
        kind = _KINDS.get(str(getattr(e, "activity_type", lambda: "")()), "other")
        if kind == "other":
            continue
        start = int(e.start_ns())
        out.append(TraceEvent(e.name(), kind, start, start + int(e.duration_ns()), int(e.correlation_id() or 0)))
    return out


def profile_calls(fn: Callable[..., Any], args: tuple, kwargs: dict, device: Any, calls: int) -> tuple[Any, list[TraceEvent]]:
    """Profile ``calls`` calls of ``fn`` (after the caller's warmup); returns (profiler, events)."""
    from torch.profiler import ProfilerActivity, profile, record_function

    activities = [ProfilerActivity.CPU]
    if getattr(device, "type", "cpu") == "cuda":
        activities.append(ProfilerActivity.CUDA)
    _sync(device)
    with profile(activities=activities) as prof:
        with record_function(REGION_NAME):
            for _ in range(calls):
                fn(*args, **kwargs)
            with record_function(FINAL_SYNC_NAME):  # our own wait for the queued work: not a stall
                _sync(device)
    return prof, to_trace_events(prof)


def phase(name: str) -> Any:
    """A ``record_function`` labelling a phase of the benchmarked function (``gpuperf::phase::<name>``)."""
    from torch.profiler import record_function

    return record_function(PHASE_PREFIX + name)


def count_flops_and_bytes(fn: Callable[..., Any], args: tuple, kwargs: dict) -> tuple[float, float, str | None]:
    """Run ``fn`` once counting FLOPs and bytes moved; returns ``(flops, bytes, dtype)``.

    ``dtype`` is the dtype of the op that contributed most FLOPs (``None`` without FLOPs): the
    matmul peak is calibrated for it. Bytes are the sum over aten ops of the storage-size of their
    tensor inputs and outputs — a minimum-traffic estimate of unfused eager execution.
    """
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten
    from torch.utils.flop_counter import FlopCounterMode

    class ByteCounter(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.bytes = 0
            self.flop_dtypes: dict[str, int] = {}

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            out = func(*args, **(kwargs or {}))
            if getattr(func, "is_view", False):
                return out
            flat_in, _ = tree_flatten((args, kwargs or {}))
            flat_out, _ = tree_flatten(out)
            seen: set[int] = set()
            for t in flat_in + flat_out:
                if isinstance(t, torch.Tensor) and id(t) not in seen:
                    seen.add(id(t))
                    self.bytes += t.numel() * t.element_size()
            packet = getattr(func, "overloadpacket", None)
            from torch.utils.flop_counter import flop_registry

            if packet in flop_registry:
                first = next((t for t in flat_in if isinstance(t, torch.Tensor)), None)
                if first is not None:
                    key = str(first.dtype).removeprefix("torch.")
                    size = 1
                    for t in flat_in:
                        if isinstance(t, torch.Tensor):
                            size = max(size, t.numel())
                    self.flop_dtypes[key] = self.flop_dtypes.get(key, 0) + size
            return out

    counter = ByteCounter()
    flops = FlopCounterMode(display=False)
    with flops, counter:
        fn(*args, **kwargs)
    total_flops = float(flops.get_total_flops())
    dtype = max(counter.flop_dtypes, key=counter.flop_dtypes.get) if counter.flop_dtypes and total_flops else None
    return total_flops, float(counter.bytes), dtype


def _median_s(fn: Callable[[], Any], device: Any, reps: int) -> float:
    """Median seconds per call of ``fn`` over exactly ``reps`` rounds, timed by the plugin's own backend."""
    from .options import BenchOptions
    from .timing import measure

    opts = BenchOptions(warmup_time=0.0, min_rounds=reps, max_rounds=reps, target_precision=0.0)
    t = measure(fn, (), {}, options=opts, device=device)
    return statistics.median(t.samples_ms) / 1e3


def calibrate(device: Any, dtype: str | None = None) -> tuple[float, float]:
    """Measured ceilings of ``device``: ``(peak FLOP/s for a matmul in dtype, copy bytes/s)``.

    Matmul n = 8192 on CUDA, 1024 on the CPU (2n^3 FLOPs); copy of 1 GiB on CUDA, 256 MiB on the
    CPU (bytes read + written). Measured once per session per (device, dtype) and cached.
    Datasheet peaks are leads only; these are what the device actually delivers here.
    """
    import torch

    dt_name = dtype if dtype and dtype.startswith(("float", "bfloat")) else "float32"
    key = (str(device), dt_name)
    if key in _CALIBRATION:
        return _CALIBRATION[key]
    dt = getattr(torch, dt_name)
    cuda = getattr(device, "type", "cpu") == "cuda"
    n = 8192 if cuda else 1024
    g = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, device=device, generator=g).to(dt)
    b = torch.randn(n, n, device=device, generator=g).to(dt)
    mm_s = _median_s(lambda: torch.matmul(a, b), device, reps=10 if cuda else 3)
    del a, b
    numel = (1 << 28) if cuda else (1 << 26)
    src = torch.empty(numel, dtype=torch.float32, device=device).fill_(1.0)
    dst = torch.empty_like(src)
    cp_s = _median_s(lambda: dst.copy_(src), device, reps=10 if cuda else 5)
    result = (2.0 * n**3 / mm_s, 2.0 * numel * 4 / cp_s)
    _CALIBRATION[key] = result
    return result


def cpu_op_floor_s() -> float:
    """Median duration of a trivial top-level op (1-element in-place add) under the profiler (s).

    The fixed dispatch cost every CPU op pays whatever its size; measured once per session.
    """
    if _CPU_OP_FLOOR:
        return _CPU_OP_FLOOR[0]
    import torch

    from .bottleneck import _top_level

    x = torch.zeros(1)
    for _ in range(50):
        x.add_(1)
    _, events = profile_calls(lambda: [x.add_(1) for _ in range(200)], (), {}, torch.device("cpu"), 1)
    ops = _top_level([e for e in events if e.kind == "cpu_op"])
    floor = statistics.median(o.duration_ns for o in ops) / 1e9 if ops else 0.0
    _CPU_OP_FLOOR.append(floor)
    return floor


def profile_call_count(median_ms: float) -> int:
    """How many calls to profile: about 50 ms worth, between 1 and 10."""
    if not median_ms or not math.isfinite(median_ms):
        return 3
    return max(1, min(10, int(50.0 / median_ms)))


def top_ops_table(prof: Any, device: Any, rows: int = 10) -> str:
    """The top ops by device time (self CUDA time on a GPU, self CPU time on the CPU)."""
    key = "self_cuda_time_total" if getattr(device, "type", "cpu") == "cuda" else "self_cpu_time_total"
    try:
        return prof.key_averages().table(sort_by=key, row_limit=rows)
    except Exception as exc:  # pragma: no cover - table formatting is torch's
        return f"(top ops unavailable: {exc})"


def export_trace(prof: Any, path: Any) -> str:
    """Write the chrome trace (opens in Perfetto / chrome://tracing) and return its path."""
    from pathlib import Path

    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(p))
    return str(p)
