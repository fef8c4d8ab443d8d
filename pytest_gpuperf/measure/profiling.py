"""torch adapters for bottleneck classification: profiling, FLOP and byte counts, calibration.

* ``profile_calls`` runs a few calls of ``fn`` under ``torch.profiler`` (CPU, plus CUDA activities
  on a GPU) inside a ``gpuperf::region`` annotation and converts the events to
  :class:`pytest_gpuperf.verdict.bottleneck.TraceEvent` (:mod:`pytest_gpuperf.measure.trace`, which the count
  gate's counting shares).
* ``count_flops_and_bytes`` counts FLOPs with ``torch.utils.flop_counter.FlopCounterMode`` and a
  minimum-traffic byte estimate with a small ``TorchDispatchMode`` that sums the sizes of every
  aten op's tensor inputs and outputs (view ops move nothing and are skipped).
* ``calibrate`` measures the device's two ceilings once per session and dtype: a large matmul
  (FLOP/s) and a large copy (bytes read + written per second), as the roofline needs.

Everything imports torch lazily. Profiling has overhead, so all of this runs outside the timed
rounds.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import warnings
from typing import Any, Callable

from pytest_gpuperf.verdict.bottleneck import FINAL_SYNC_NAME, PHASE_PREFIX, REGION_NAME, TraceEvent
# the profiler's events as TraceEvents live in pytest_gpuperf.measure.trace (counting uses them too)
from pytest_gpuperf.measure.trace import cupti_guard, quiet_kineto, quietly, to_trace_events

_CALIBRATION: dict[tuple[str, str], tuple[float, float]] = {}
_CPU_OP_FLOOR: list[float] = []


def _sync(device: Any) -> None:
    if getattr(device, "type", "cpu") == "cuda":
        import torch

        torch.cuda.synchronize(device)


def profile_calls(fn: Callable[..., Any], args: tuple, kwargs: dict, device: Any, calls: int,
                  warmup: bool = True) -> tuple[Any, list[TraceEvent]]:
    """Profile ``calls`` calls of ``fn`` (after the caller's warmup); returns (profiler, events).

    With ``warmup`` the profiler runs a schedule of one warm-up step (one more call of ``fn``,
    traced and discarded: the profiler's own start-up — CUPTI and kineto initialisation, the first
    buffers — lands there instead of inflating the idle and host-wait time of the recorded calls)
    and one active step with the ``calls`` calls, as ``torch.profiler.schedule(warmup=1, active=1)``
    recommends.
    """
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    activities = [ProfilerActivity.CPU]
    if getattr(device, "type", "cpu") == "cuda":
        activities.append(ProfilerActivity.CUDA)
        cupti_guard(device)
    _sync(device)
    with contextlib.ExitStack() as stack:
        with warnings.catch_warnings():
            # torch 2.11 warns on every fresh profiler that it "clears events at the end of each
            # cycle" (a one-cycle profile like this loses nothing): keep it out of the user's session
            warnings.filterwarnings("ignore", message="Warning: Profiler clears events", category=UserWarning)
            extra = {"schedule": schedule(wait=0, warmup=1, active=1, repeat=1)} if warmup else {}
            prof = stack.enter_context(quietly(profile(activities=activities, **extra)))  # no kineto lines
        if warmup:
            fn(*args, **kwargs)
            _sync(device)
            with quiet_kineto():  # the schedule starts kineto here
                prof.step()  # warm-up step over: the next one is recorded
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
    tensor inputs and outputs — a minimum-traffic estimate of unfused eager execution. The
    counting is :func:`pytest_gpuperf.measure.counting.count_call`'s (the count gate's), on the CPU side.
    """
    from pytest_gpuperf.measure.counting import count_call

    counts, dtype = count_call(fn, args, kwargs, None)
    return float(counts.flops), float(counts.traffic_bytes), dtype


def _median_s(fn: Callable[[], Any], device: Any, reps: int) -> float:
    """Median seconds per call of ``fn`` over exactly ``reps`` rounds, timed by the plugin's own backend."""
    from pytest_gpuperf.core.options import BenchOptions
    from pytest_gpuperf.measure.timing import measure

    opts = BenchOptions(warmup_time=0.0, min_rounds=reps, max_rounds=reps, target_precision=0.0)
    t = measure(fn, (), {}, options=opts, device=device)
    return statistics.median(t.samples_ms) / 1e3


def uses_tf32(dtype: str | None, *, device_type: str, has_conv: bool, matmul_tf32: bool, cudnn_tf32: bool) -> bool:
    """Whether the fp32 FLOPs of a workload run on TF32 tensor cores, so that its compute peak is
    the TF32 matmul's (pure). CUDA and float32 only: convolutions follow
    ``torch.backends.cudnn.allow_tf32`` (True by default), matmuls
    ``torch.backends.cuda.matmul.allow_tf32`` (False by default; ``set_float32_matmul_precision``
    "high"/"medium" sets it). ``has_conv``: the workload runs a convolution."""
    if device_type != "cuda" or (dtype or "float32") != "float32":
        return False
    return matmul_tf32 or (has_conv and cudnn_tf32)


def tf32_settings() -> tuple[bool, bool]:
    """``(matmul allow_tf32, cudnn allow_tf32)`` in force now."""
    import torch

    return bool(torch.backends.cuda.matmul.allow_tf32), bool(torch.backends.cudnn.allow_tf32)


def calibrate(device: Any, dtype: str | None = None, *, tf32: bool = False) -> tuple[float, float]:
    """Measured ceilings of ``device``: ``(peak FLOP/s for a matmul in dtype, copy bytes/s)``.

    Matmul n = 8192 on CUDA, 1024 on the CPU (2n^3 FLOPs); copy of 1 GiB on CUDA, 256 MiB on the
    CPU (bytes read + written). Measured once per session per (device, dtype, tf32) and cached.
    ``tf32`` (CUDA float32 only, see :func:`uses_tf32`): calibrate the matmul with TF32 allowed,
    the ceiling of a workload whose fp32 FLOPs run on TF32 tensor cores (a cuDNN convolution by
    default) — without it such a workload can show more than 100% of the fp32 peak.
    Datasheet peaks are leads only; these are what the device actually delivers here.
    """
    import torch

    dt_name = dtype if dtype and dtype.startswith(("float", "bfloat")) else "float32"
    cuda = getattr(device, "type", "cpu") == "cuda"
    tf32 = bool(tf32 and cuda and dt_name == "float32")
    key = (str(device), dt_name + ("+tf32" if tf32 else ""))
    if key in _CALIBRATION:
        return _CALIBRATION[key]
    dt = getattr(torch, dt_name)
    n = 8192 if cuda else 1024
    g = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, device=device, generator=g).to(dt)
    b = torch.randn(n, n, device=device, generator=g).to(dt)
    saved = torch.backends.cuda.matmul.allow_tf32
    if cuda and dt_name == "float32":
        torch.backends.cuda.matmul.allow_tf32 = tf32  # the ceiling of the math mode the workload runs in
    try:
        mm_s = _median_s(lambda: torch.matmul(a, b), device, reps=10 if cuda else 3)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved
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

    from pytest_gpuperf.verdict.bottleneck import _top_level

    x = torch.zeros(1)
    for _ in range(50):
        x.add_(1)
    _, events = profile_calls(lambda: [x.add_(1) for _ in range(200)], (), {}, torch.device("cpu"), 1)
    ops = _top_level([e for e in events if e.kind == "cpu_op"])
    floor = statistics.median(o.duration_ns for o in ops) / 1e9 if ops else 0.0
    _CPU_OP_FLOOR.append(floor)
    return floor


def classify_call(fn: Callable[..., Any], args: tuple, kwargs: dict, device: Any, median_ms: float, *,
                  counted: tuple[float, float, str | None] | None = None, thresholds: Any = None) -> tuple[Any, Any]:
    """Classify the bottleneck of ``fn(*args, **kwargs)`` on ``device``; returns ``(profiler, Bottleneck)``.

    Profiles :func:`profile_call_count` calls (``median_ms``: one call's median time, ms), counts
    FLOPs and bytes (``counted``: ``(flops, bytes, dtype)`` already counted), calibrates the
    device's peaks (:func:`calibrate`, TF32 where :func:`uses_tf32`) and applies
    :func:`pytest_gpuperf.verdict.bottleneck.classify` with ``thresholds`` (default
    :class:`~pytest_gpuperf.verdict.bottleneck.Thresholds`). The one classification path of the plugin
    and of ``benchmarks/gpu_validate.py``.
    """
    from pytest_gpuperf.verdict.bottleneck import Thresholds, analyze, classify, with_roofline

    dev_type = getattr(device, "type", "cpu")
    floor = cpu_op_floor_s() if dev_type == "cpu" else 0.0
    calls = profile_call_count(median_ms)
    prof, events = profile_calls(fn, args, kwargs, device, calls)
    evidence = analyze(events, device_type=dev_type, calls=calls, cpu_op_floor_s=floor)
    flops, nbytes, dtype = counted if counted is not None else count_flops_and_bytes(fn, args, kwargs)
    matmul_tf32, cudnn_tf32 = tf32_settings()
    tf32 = uses_tf32(dtype, device_type=dev_type, matmul_tf32=matmul_tf32, cudnn_tf32=cudnn_tf32,
                     has_conv=any(e.kind == "cpu_op" and "convolution" in e.name for e in events))
    peak_flops, peak_bw = calibrate(device, dtype, tf32=tf32)
    evidence = with_roofline(evidence, flops=flops, bytes_moved=nbytes, peak_flops_per_s=peak_flops,
                             peak_bytes_per_s=peak_bw, dtype=dtype or "float32")
    return prof, classify(evidence, thresholds or Thresholds())


def profile_call_count(median_ms: float) -> int:
    """How many calls to profile: about 50 ms worth, between 1 and 10."""
    if not median_ms or not math.isfinite(median_ms):
        return 3
    return max(1, min(10, int(50.0 / median_ms)))


def top_ops_table(prof: Any, device: Any, rows: int = 10) -> str:
    """The top ops by device time (self CUDA time on a GPU, self CPU time on the CPU)."""
    key = "self_device_time_total" if getattr(device, "type", "cpu") == "cuda" else "self_cpu_time_total"
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
