"""Counting one call of a benchmarked function: ops, syncs, copies, FLOPs, bytes (and, on CUDA,
kernels and runtime syncs from the profiler), plus ``torch.compile``'s counters.

The torch side of :mod:`pytest_gpuperf.verdict.counts`. One call runs under a ``TorchDispatchMode`` that
counts aten ops by name (after autograd; what torch's dispatcher runs), cross-device copies and
their bytes, scalar reads that block the host, and the minimum-traffic byte estimate, nested in
``torch.utils.flop_counter.FlopCounterMode`` for FLOPs. On CUDA the same call is profiled
(``torch.profiler``, CPU + CUDA activities) for kernel launches and blocking runtime calls.
torch is imported only inside these functions.
"""

from __future__ import annotations

import contextlib
import sys
import time
import warnings
from typing import Any, Callable, Mapping

from pytest_gpuperf.verdict.counts import Counts, device_counts

#: aten ops that read a device value on the host (block until the GPU catches up): counted as
#: syncs on every device, so a CPU run catches the ``.item()`` a GPU run would wait on. Ops whose
#: output shape depends on data (``nonzero``...) sync on CUDA too.
HOST_SYNC_OPS = frozenset({
    "aten::_local_scalar_dense", "aten::equal", "aten::nonzero", "aten::masked_select", "aten::_unique2",
    "aten::unique_dim", "aten::unique_consecutive",
})
#: aten ops that copy between devices (the direction comes from the tensors' devices).
COPY_OPS = frozenset({"aten::_to_copy", "aten::copy_", "aten::_copy_from", "aten::_copy_from_and_resize"})


def op_name(func: Any) -> str:
    """``aten::mm`` for the OpOverload ``aten.mm.default`` (namespace::packet name)."""
    packet = getattr(func, "overloadpacket", None)
    return f"{getattr(func, 'namespace', None) or 'aten'}::{getattr(packet, '__name__', None) or func}"


def copy_direction(src: str, dst: str) -> str | None:
    """``"H2D"``, ``"D2H"`` or None (same side) for a copy from device type ``src`` to ``dst``."""
    host = ("cpu", "meta")
    if src in host and dst not in host:
        return "H2D"
    if src not in host and dst in host:
        return "D2H"
    return None


def _copy_ends(name: str, args: tuple, kwargs: Mapping[str, Any], out: Any) -> tuple[Any, Any] | None:
    """(source tensor, destination tensor or device) of a copy op, or None."""
    import torch

    if name == "aten::_to_copy":
        src = args[0] if args else kwargs.get("self")
        return (src, out) if isinstance(src, torch.Tensor) and isinstance(out, torch.Tensor) else None
    if name in ("aten::copy_", "aten::_copy_from", "aten::_copy_from_and_resize"):
        if len(args) < 2:
            return None
        dst, src = (args[0], args[1]) if name == "aten::copy_" else (args[1], args[0])
        return (src, dst) if isinstance(src, torch.Tensor) and isinstance(dst, torch.Tensor) else None
    return None


class _Counter:
    """The dispatch-mode state: op names, syncs, copies, bytes and the FLOP dtypes."""

    def __init__(self) -> None:
        self.ops: dict[str, int] = {}
        self.syncs: dict[str, int] = {}
        self.copies = 0
        self.copy_bytes = 0
        self.traffic_bytes = 0
        self.flop_dtypes: dict[str, int] = {}
        self.flops = 0  # counted here only without FlopCounterMode (count_flops=True)


def _counting_mode(counter: _Counter, count_flops: bool = False) -> Any:
    """The ``TorchDispatchMode`` that fills ``counter``; with ``count_flops`` it also adds up FLOPs
    from torch's own per-op formulas (``torch.utils.flop_counter.flop_registry``, what
    ``FlopCounterMode`` applies), for when ``FlopCounterMode`` itself cannot run."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten
    from torch.utils.flop_counter import flop_registry

    class CountingMode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            name = op_name(func)
            counter.ops[name] = counter.ops.get(name, 0) + 1
            if name in HOST_SYNC_OPS:
                counter.syncs[name] = counter.syncs.get(name, 0) + 1
            if name in COPY_OPS:
                ends = _copy_ends(name, tuple(args), kwargs, out)
                if ends is not None and copy_direction(ends[0].device.type, ends[1].device.type):
                    counter.copies += 1
                    counter.copy_bytes += ends[0].numel() * ends[0].element_size()
            if getattr(func, "is_view", False):
                return out
            flat_in, _ = tree_flatten((args, kwargs))
            flat_out, _ = tree_flatten(out)
            seen: set[int] = set()
            for t in flat_in + flat_out:
                if isinstance(t, torch.Tensor) and id(t) not in seen:
                    seen.add(id(t))
                    counter.traffic_bytes += t.numel() * t.element_size()
            if getattr(func, "overloadpacket", None) in flop_registry:
                if count_flops:
                    counter.flops += int(flop_registry[func.overloadpacket](*args, **kwargs, out_val=out))
                tensors = [t for t in flat_in if isinstance(t, torch.Tensor)]
                if tensors:
                    key = str(tensors[0].dtype).removeprefix("torch.")
                    counter.flop_dtypes[key] = counter.flop_dtypes.get(key, 0) + max(t.numel() for t in tensors)
            return out

    return CountingMode()


def count_call(fn: Callable[..., Any], args: tuple, kwargs: dict, device: Any) -> tuple[Counts, str | None]:
    """Run ``fn(*args, **kwargs)`` once, counting; returns ``(counts, dtype)``.

    ``counts`` holds everything but the ``torch.compile`` counters (see :func:`compile_snapshot`);
    ``dtype`` is the dtype of the ops that contributed most FLOPs (None without FLOPs): the
    bottleneck classifier calibrates its matmul peak for it. On CUDA ``kernels`` and the syncs come
    from the profiler (blocking runtime calls, named by the aten op around them); elsewhere syncs
    are :data:`HOST_SYNC_OPS`. ``cost_ms`` is the wall time of the whole counting call (ms).
    When torch's ``FlopCounterMode`` raises on ``fn`` (its module tracker calls ``__bool__``/
    ``__eq__``/``__hash__`` on the modules entered), ``fn`` is counted once more without it, FLOPs
    from the same per-op formulas, and ``counts.note`` says so. Exceptions of ``fn`` (or of the
    second call) propagate: the caller contains them (:mod:`pytest_gpuperf.core.containment`).
    """
    from pytest_gpuperf.verdict.bottleneck import FINAL_SYNC_NAME, SYNC_CALLS

    cuda = getattr(device, "type", "cpu") == "cuda"
    start = time.perf_counter()
    note = None
    try:
        counter, prof, total_flops = _counted_call(fn, args, kwargs, device, cuda, flop_counter=True)
    except Exception as exc:
        # torch's FlopCounterMode tracks modules (torch.utils.module_tracker), whose hooks compare
        # and hash the modules a call enters: a module whose __bool__/__eq__ raises (parameters held
        # in a tensordict) breaks it. Count again without it: FLOPs from the same per-op formulas.
        from pytest_gpuperf.core.containment import describe

        error, where = describe(exc)
        counter, prof, total_flops = _counted_call(fn, args, kwargs, device, cuda, flop_counter=False)
        note = (f"FLOPs counted without torch's FlopCounterMode, which raised {error}"
                + (f" (at {where})" if where else "") + "; ops, bytes and FLOPs are counted all the same")
    kernels = syncs = None
    if prof is not None:
        from pytest_gpuperf.measure.trace import to_trace_events

        kernels, syncs = device_counts(to_trace_events(prof), sync_calls=SYNC_CALLS, final_sync=FINAL_SYNC_NAME)
    dtype = max(counter.flop_dtypes, key=counter.flop_dtypes.get) if counter.flop_dtypes and total_flops else None
    syncs = counter.syncs if syncs is None else syncs
    counts = Counts(
        ops=sum(counter.ops.values()), syncs=sum(syncs.values()), copies=counter.copies,
        copy_bytes=counter.copy_bytes, flops=total_flops, traffic_bytes=counter.traffic_bytes,
        kernels=sum(kernels.values()) if kernels is not None else None,
        cudnn_benchmark=bool(cuda and _cudnn_benchmark()),
        ops_by_name=counter.ops, kernels_by_name=kernels or {}, syncs_by_name=syncs,
        cost_ms=(time.perf_counter() - start) * 1e3, note=note,
    )
    return counts, dtype


def _counted_call(fn: Callable[..., Any], args: tuple, kwargs: dict, device: Any, cuda: bool, *,
                  flop_counter: bool) -> tuple[_Counter, Any, int]:
    """One call of ``fn`` under the counting mode (nested in ``FlopCounterMode`` when
    ``flop_counter``, else counting FLOPs itself): ``(counter, CUDA profiler or None, FLOPs)``."""
    from torch.utils.flop_counter import FlopCounterMode

    from pytest_gpuperf.verdict.bottleneck import FINAL_SYNC_NAME

    counter = _Counter()
    flops = FlopCounterMode(display=False) if flop_counter else contextlib.nullcontext()
    with contextlib.ExitStack() as stack:
        prof = _cuda_profiler(stack, device) if cuda else None
        with flops, _counting_mode(counter, count_flops=not flop_counter):
            fn(*args, **kwargs)
        if prof is not None:
            import torch
            from torch.profiler import record_function

            with record_function(FINAL_SYNC_NAME):
                torch.cuda.synchronize(device)
    total = int(flops.get_total_flops()) if flop_counter else counter.flops
    return counter, prof, total


def _cudnn_benchmark() -> bool:
    """Whether cuDNN benchmark mode is on (``torch.backends.cudnn.benchmark``)."""
    import torch

    return bool(getattr(torch.backends.cudnn, "benchmark", False))


def _cuda_profiler(stack: contextlib.ExitStack, device: Any) -> Any:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from pytest_gpuperf.measure.trace import cupti_guard, quietly

    cupti_guard(device)
    torch.cuda.synchronize(device)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Warning: Profiler clears events", category=UserWarning)
        return stack.enter_context(quietly(profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])))


def compile_snapshot() -> dict[str, dict[str, int]] | None:
    """A copy of ``torch._dynamo.utils.counters`` (group -> {key: count}), or None when
    ``torch._dynamo`` was never imported (so nothing was compiled; this never imports it)."""
    utils = sys.modules.get("torch._dynamo.utils")
    counters = getattr(utils, "counters", None)
    if counters is None:
        return None
    out: dict[str, dict[str, int]] = {}
    for group, values in list(counters.items()):
        try:
            out[str(group)] = {str(k): int(v) for k, v in dict(values).items()}
        except (TypeError, ValueError):
            continue
    return out
