"""Peak-memory measurement: CUDA allocator statistics on a GPU, profiler memory events on the CPU.

* **CUDA**: ``torch.cuda.synchronize``, ``reset_peak_memory_stats``, ``memory_allocated``,
  ``max_memory_allocated`` and ``max_memory_reserved`` on the device. Counts every tensor the
  caching allocator hands out on that device, from any code.
* **CPU**: torch's CPU allocations are invisible to ``tracemalloc``, so the block runs under
  ``torch.profiler.profile(profile_memory=True)``; its ``[memory]`` events carry the signed size of
  every allocation and free, and the running sum in time order gives the peak. Only allocations
  made through torch's CPU allocator inside the block are counted: memory held by numpy, Python
  objects or other libraries is not, and nor is what was allocated before the block.

torch is imported only inside the functions. No pytest here.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from pytest_gpuperf.core.units import byte_unit_for, format_bytes, parse_size


@dataclass(frozen=True)
class MemoryReport:
    """Memory used by a block of code on one device. All sizes in bytes.

    ``peak_bytes``: peak allocated inside the block minus what was allocated before it.
    ``peak_total_bytes``: the absolute peak (CUDA); on the CPU equal to ``peak_bytes``.
    ``leaked_bytes``: still allocated after the block minus allocated before it (may be negative
    when the block freed older memory). ``reserved_peak_bytes``: CUDA caching-allocator peak
    reservation (``None`` on CPU). ``fragmentation``: reserved / allocated at peak (``None`` on
    CPU or when nothing was allocated); the tracker empties the allocator's unused cache on entry,
    so memory cached by earlier code does not count. ``allocated_before_bytes``: allocated at block entry
    (``None`` on CPU, where it is not tracked). ``budget_bytes``: the budget, if any.
    """

    device: str
    peak_bytes: int
    peak_total_bytes: int
    leaked_bytes: int
    reserved_peak_bytes: int | None = None
    fragmentation: float | None = None
    budget_bytes: int | None = None
    allocated_before_bytes: int | None = None


class MemoryLimitError(AssertionError):
    """A memory budget or leak limit was exceeded, or the device ran out of memory.

    ``report`` is the :class:`MemoryReport` (or ``None``); ``details`` extra text for the test
    report (e.g. ``torch.cuda.memory_summary()``).
    """

    def __init__(self, message: str, report: MemoryReport | None = None, details: str | None = None) -> None:
        super().__init__(message)
        self.report = report
        self.details = details


def is_oom(exc: BaseException | None) -> bool:
    """True for ``torch.OutOfMemoryError`` (CUDA out of memory; ``torch.cuda.OutOfMemoryError`` on
    torch < 2.5, which has no ``torch.OutOfMemoryError``), without importing torch first."""
    if exc is None:
        return False
    import sys

    torch = sys.modules.get("torch")
    if torch is None:
        return False
    # torch.OutOfMemoryError exists from torch 2.5; torch.cuda.OutOfMemoryError before it (and is it since)
    kinds = tuple(k for k in (getattr(torch, "OutOfMemoryError", None),
                              getattr(getattr(torch, "cuda", None), "OutOfMemoryError", None))
                  if isinstance(k, type))
    return bool(kinds) and isinstance(exc, kinds)


def oom_message(where: str, device: Any, budget: str, peak_bytes: int | None, exc: BaseException) -> str:
    """The one-line message of an out-of-memory error: where, on which device, the budget (text,
    e.g. ``"max_memory 2 GiB"``), the peak so far (bytes; None where not tracked) and the error."""
    from pytest_gpuperf.core.units import format_bytes

    peak = format_bytes(peak_bytes) if peak_bytes is not None else "not tracked on the CPU"
    first = str(exc).splitlines()[0] if str(exc) else ""
    return f"out of memory {where} on {device}: {budget}, peak so far {peak} ({type(exc).__name__}: {first})"


def free_cached_memory(device: Any) -> None:
    """Collect garbage and return cached CUDA blocks, so the next test starts clean after an OOM."""
    gc.collect()
    if getattr(device, "type", "cpu") == "cuda":
        import torch

        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()


def cpu_peak_from_events(events: Iterable[tuple[int, int]]) -> tuple[int, int]:
    """Peak and final net allocation from ``(timestamp, signed bytes)`` allocator events.

    Returns ``(peak_bytes, net_bytes)``: the largest running sum in time order (never below 0)
    and the sum of all events. Pure function, used on the profiler's CPU memory events.
    """
    running = peak = 0
    for _, nbytes in sorted(events, key=lambda e: e[0]):
        running += nbytes
        peak = max(peak, running)
    return peak, running


def _profiler_memory_events(prof: Any) -> list[tuple[int, int]]:
    """CPU ``[memory]`` events (start ns, signed bytes) from a finished ``torch.profiler.profile``."""
    out: list[tuple[int, int]] = []
    results = getattr(getattr(prof, "profiler", None), "kineto_results", None)
    if results is not None:
        for e in results.events():
            if e.name() == "[memory]" and str(e.device_type()).endswith("CPU"):
                out.append((e.start_ns(), int(e.nbytes())))
        return out
    # Fallback for profilers without kineto results: self memory of each function event.
    for e in prof.events():  # pragma: no cover - depends on the torch build
        if e.self_cpu_memory_usage:
            out.append((int(e.time_range.start * 1000), int(e.self_cpu_memory_usage)))
    return out


class MemoryTracker:
    """Context manager measuring the memory a block allocates on ``device`` (a ``torch.device``).

    After the block (also when it raised), ``report`` holds a :class:`MemoryReport`.
    """

    def __init__(self, device: Any, budget_bytes: int | None = None) -> None:
        self.device = device
        self.budget_bytes = budget_bytes
        self.report: MemoryReport | None = None
        self._prof: Any = None
        self._before = 0

    @property
    def is_cuda(self) -> bool:
        return getattr(self.device, "type", "cpu") == "cuda"

    def __enter__(self) -> "MemoryTracker":
        import torch

        if self.is_cuda:
            torch.cuda.synchronize(self.device)
            # release the allocator's unused cache first (an L2-flush buffer, a calibration copy...):
            # the peak reservation, and so the fragmentation, is then the block's own
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(self.device)
            self._before = torch.cuda.memory_allocated(self.device)
        else:
            from torch.profiler import ProfilerActivity, profile

            from pytest_gpuperf.measure.trace import quiet_kineto

            self._prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
            with quiet_kineto():  # only its start and stop: the user's block writes as it likes
                self._prof.__enter__()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        import torch

        dev = str(self.device)
        if self.is_cuda:
            try:
                torch.cuda.synchronize(self.device)
            except Exception:  # a failed kernel must not hide the block's own error
                pass
            peak_total = torch.cuda.max_memory_allocated(self.device)
            after = torch.cuda.memory_allocated(self.device)
            reserved = torch.cuda.max_memory_reserved(self.device)
            self.report = MemoryReport(
                device=dev,
                peak_bytes=max(0, peak_total - self._before),
                peak_total_bytes=peak_total,
                leaked_bytes=after - self._before,
                reserved_peak_bytes=reserved,
                fragmentation=(reserved / peak_total) if peak_total > 0 else None,
                budget_bytes=self.budget_bytes,
                allocated_before_bytes=self._before,
            )
        else:
            from pytest_gpuperf.measure.trace import quiet_kineto

            with quiet_kineto():
                self._prof.__exit__(None, None, None)
            peak, net = cpu_peak_from_events(_profiler_memory_events(self._prof))
            self._prof = None
            self.report = MemoryReport(
                device=dev, peak_bytes=peak, peak_total_bytes=peak, leaked_bytes=net,
                budget_bytes=self.budget_bytes,
            )


def measure_peak(fn: Any, args: tuple, kwargs: dict, device: Any) -> tuple[MemoryReport, Any]:
    """Call ``fn(*args, **kwargs)`` once under a :class:`MemoryTracker`; returns (report, value)."""
    tracker = MemoryTracker(device)
    with tracker:
        value = fn(*args, **kwargs)
    assert tracker.report is not None
    return tracker.report, value


def cuda_memory_summary(device: Any) -> str | None:
    """``torch.cuda.memory_summary(device)`` or None on the CPU / when it fails."""
    if getattr(device, "type", "cpu") != "cuda":
        return None
    try:
        import torch

        return torch.cuda.memory_summary(device, abbreviated=True)
    except Exception:
        return None


def budget_message(report: MemoryReport) -> str:
    """``memory budget exceeded: peak 1.72 GiB > budget 1.50 GiB on cuda:0 (allocated before the block: 0.31 GiB)``."""
    assert report.budget_bytes is not None
    unit, _ = byte_unit_for(report.budget_bytes)
    before = (
        format_bytes(report.allocated_before_bytes, unit)
        if report.allocated_before_bytes is not None
        else "not tracked on the CPU"
    )
    return (
        f"memory budget exceeded: peak {format_bytes(report.peak_bytes, unit)} > budget "
        f"{format_bytes(report.budget_bytes, unit)} on {report.device} (allocated before the block: {before})"
    )


def leak_message(report: MemoryReport, max_leak_bytes: int) -> str:
    """``memory leak: 12.0 MiB still allocated after the block on cpu > max_leak 1.00 MiB``."""
    unit, _ = byte_unit_for(max(max_leak_bytes, 1))
    return (
        f"memory leak: {format_bytes(report.leaked_bytes, unit)} still allocated after the block on "
        f"{report.device} > max_leak {format_bytes(max_leak_bytes, unit)}"
    )


class MemoryBudget:
    """``with memory_budget("1.5 GiB", max_leak="1 MiB") as mem: ...`` (see the fixture).

    Fails (raises :class:`MemoryLimitError`) on exit when the block's peak exceeds the budget, when
    more than ``max_leak`` is still allocated after it, or when it ran out of device memory. Inside
    and after the block, ``mem.report`` and the report's fields (``mem.peak_bytes`` ...) are
    available once the block has ended. Raises ``ValueError`` for a bad size.
    """

    def __init__(
        self,
        budget: int | str,
        *,
        device: Any,
        max_leak: int | str | None = None,
        on_report: Any = None,
        snapshot: Any = None,
    ) -> None:
        # private names: the public attributes of the `as` target are the MemoryReport's fields
        self._budget_bytes = parse_size(budget)
        self._max_leak_bytes = None if max_leak is None else parse_size(max_leak)
        self._device = device
        self._tracker = MemoryTracker(device, self._budget_bytes)
        self._on_report = on_report
        self._snapshot = snapshot  # optional SnapshotRecorder (CUDA)

    @property
    def report(self) -> MemoryReport | None:
        return self._tracker.report

    def __getattr__(self, name: str) -> Any:
        if name in MemoryReport.__dataclass_fields__:
            if self._tracker.report is None:
                raise AttributeError(f"{name} is known only after the memory_budget block has ended")
            return getattr(self._tracker.report, name)
        raise AttributeError(name)

    def __enter__(self) -> "MemoryBudget":
        if self._snapshot is not None:
            self._snapshot.start()
        self._tracker.__enter__()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        __tracebackhide__ = True  # pytest: the failure points at the user's `with` line
        self._tracker.__exit__(exc_type, exc, tb)
        report = self._tracker.report
        assert report is not None
        if self._on_report is not None:
            self._on_report(report)
        failure: str | None = None
        details: str | None = None
        if is_oom(exc):
            failure = oom_message("inside the memory_budget block", report.device,
                                  f"budget {format_bytes(self._budget_bytes)}", report.peak_bytes, exc)
            details = cuda_memory_summary(self._device)
            free_cached_memory(self._device)
        elif exc_type is None and report.peak_bytes > self._budget_bytes:
            failure = budget_message(report)
        elif (
            exc_type is None
            and self._max_leak_bytes is not None
            and report.leaked_bytes > self._max_leak_bytes
        ):
            failure = leak_message(report, self._max_leak_bytes)
        if self._snapshot is not None:
            if failure is not None:
                extra = self._snapshot.save()
                if extra:
                    failure += "\n" + extra
            else:
                self._snapshot.discard()
        if failure is None:
            return False  # propagate the block's own exception, if any
        raise MemoryLimitError(failure, report, details) from exc


# ----------------------------------------------------------------------------- CUDA snapshots


def largest_at_peak(trace: Sequence[dict[str, Any]], top: int = 5) -> tuple[int, list[dict[str, Any]]]:
    """Replay a CUDA allocator trace and list the ``top`` largest blocks live at the peak.

    ``trace`` is one device's list from ``torch.cuda.memory._snapshot()["device_traces"]``: dicts
    with ``action`` (``alloc``, ``free_requested``, ``free_completed``...), ``addr``, ``size`` and
    ``frames`` (``filename``, ``line``, ``name``). Returns ``(peak_bytes, blocks)``, the blocks
    sorted by size, largest first. Pure function.
    """
    live: dict[int, dict[str, Any]] = {}
    total = peak = 0
    at_peak: list[dict[str, Any]] = []
    for ev in trace:
        action, addr, size = ev.get("action"), ev.get("addr"), int(ev.get("size", 0))
        if action == "alloc":
            live[addr] = ev
            total += size
            if total > peak:
                peak = total
                at_peak = list(live.values())
        elif action in ("free_requested", "free") and addr in live:
            total -= int(live.pop(addr).get("size", 0))
    at_peak.sort(key=lambda e: int(e.get("size", 0)), reverse=True)
    return peak, at_peak[:top]


def format_blocks(blocks: Sequence[dict[str, Any]], frames: int = 3) -> str:
    """Text listing of allocations with their innermost Python frames."""
    lines = []
    for b in blocks:
        py = [f for f in b.get("frames", []) if str(f.get("filename", "")).endswith(".py")]
        where = "; ".join(f"{f.get('filename')}:{f.get('line')} in {f.get('name')}" for f in py[:frames]) or "(no Python frame)"
        lines.append(f"  {format_bytes(int(b.get('size', 0)))}  {where}")
    return "\n".join(lines)


class SnapshotRecorder:
    """Records the CUDA allocation history of a block and saves it when a memory check fails.

    Uses ``torch.cuda.memory._record_memory_history`` and ``_snapshot`` (the pickle format the
    PyTorch memory visualizer, pytorch.org/memory_viz, reads). ``save()`` returns text for the
    failure message: the file's path and the five largest live allocations at the peak.
    """

    def __init__(self, device: Any, path: Any) -> None:
        self.device = device
        self.path = path

    def start(self) -> None:
        """Start recording, with Python stacks only: ``stacks="all"`` (torch's default) also
        symbolizes C++ frames at every allocation, which slows the recorded block down many times.
        A torch whose ``_record_memory_history`` has no ``stacks`` keyword records its default."""
        import torch

        record = torch.cuda.memory._record_memory_history
        try:
            record(max_entries=200_000, device=self.device, stacks="python")
        except TypeError:  # an older signature
            record(max_entries=200_000, device=self.device)

    def discard(self) -> None:
        import torch

        torch.cuda.memory._record_memory_history(enabled=None, device=self.device)

    def save(self) -> str:
        import pickle
        from pathlib import Path

        import torch

        try:
            snap = torch.cuda.memory._snapshot(self.device)
        finally:
            self.discard()
        p = Path(self.path)
        p.parent.mkdir(parents=True, exist_ok=True)
        with open(p, "wb") as fh:
            pickle.dump(snap, fh)
        index = getattr(self.device, "index", 0) or 0
        traces = snap.get("device_traces") or []
        trace = traces[index] if index < len(traces) else []
        peak, blocks = largest_at_peak(trace)
        return (
            f"memory snapshot: {p} (open it at https://pytorch.org/memory_viz)\n"
            f"largest live allocations at the recorded peak ({format_bytes(peak)}):\n{format_blocks(blocks)}"
        )
