"""The profiler's events as :class:`~pytest_gpuperf.verdict.bottleneck.TraceEvent` objects, for bottleneck
classification (:mod:`pytest_gpuperf.measure.profiling`) and the count gate (:mod:`pytest_gpuperf.measure.counting`).

Each event is classified by its profiler activity type (the chrome trace's ``cat``): read
directly where torch exposes it (``_KinetoEvent.activity_type``, torch >= 2.12), otherwise
inferred from what every supported torch has (device type, ``record_function`` scope, event
names); see :func:`event_activity`. :func:`cupti_guard` turns CUPTI's teardown off before CUDA
is profiled in a process that captured its own CUDA graphs. torch is never imported here.
"""

from __future__ import annotations

import contextlib
import os
import re
from typing import Any, Iterable, Iterator, Sequence

from pytest_gpuperf.verdict.bottleneck import TraceEvent

#: Profiler activity types (the chrome trace's ``cat``) -> :class:`TraceEvent` kinds. Anything
#: else is ``other`` and dropped: ``gpu_user_annotation`` (``record_function`` ranges mirrored on
#: the GPU timeline: not kernels), ``cuda_sync``, ``overhead``, ``cpu_instant_event``, ...
_KINDS = {
    "cpu_op": "cpu_op",
    "user_annotation": "annotation",
    "kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "gpu_memset": "memset",
    "cuda_runtime": "runtime",
    "cuda_driver": "runtime",
}

# Inference of the activity type where ``_KinetoEvent.activity_type`` is missing (torch < 2.12).
#: ``at::RecordScope::USER_SCOPE``: the scope of ``torch.profiler.record_function`` ranges.
_USER_SCOPE = 7
#: CUDA (and HIP) runtime and driver API calls: ``cudaLaunchKernel``, ``cudaMemcpyAsync``,
#: ``cudaStreamSynchronize``, ``cuLaunchKernel``, ``hipLaunchKernel``, ``__cudaPushCallConfiguration``.
_RUNTIME_NAME = re.compile(r"^_*(?:cuda|hip)[A-Z]")
_DRIVER_NAME = re.compile(r"^_*cu[A-Z]")
#: Names of events that are neither ops, kernels nor copies: CUPTI synchronization records,
#: CUPTI overhead records (kineto's ``overhead`` activity) and the allocator's instant events.
_DEVICE_SYNC_NAMES = frozenset({"Event Sync", "Stream Sync", "Stream Wait Event", "Context Sync", "Unknown Sync"})
_OVERHEAD_NAMES = frozenset({
    "Activity Buffer Request", "Buffer Flush", "Command Buffer Full", "Driver Compiler",
    "Instrumentation", "Lazy Function Loading", "Resource", "Runtime Triggered Module Loading",
    "UVM Activity Init",
})
_INSTANT_NAMES = frozenset({"[memory]", "[OutOfMemory]"})


def _call(e: Any, method: str) -> Any:
    """``e.method()``, or None where this torch's event has no such method."""
    m = getattr(e, method, None)
    return m() if callable(m) else None


_DEVICE_NAMES: dict[Any, str] = {}


def _device(e: Any) -> str:
    """``"cpu"``, ``"cuda"``, ... from ``e.device_type()`` (a ``DeviceType`` enum or its name).

    Cached per value: ``str()`` of torch's enum costs microseconds, and traces hold 100k events."""
    dt = e.device_type()
    try:
        return _DEVICE_NAMES[dt]
    except (KeyError, TypeError):
        name = str(dt).rpartition(".")[2].lower()
        if len(_DEVICE_NAMES) < 64:
            try:
                _DEVICE_NAMES[dt] = name
            except TypeError:  # unhashable look-alike
                pass
        return name


def _is_cpu_annotation(e: Any) -> bool:
    user = _call(e, "is_user_annotation")  # torch >= 2.5; else the record_function scope
    return bool(user) if user is not None else _call(e, "scope") == _USER_SCOPE


def event_activity(e: Any, cpu_annotations: frozenset[str] | set[str] = frozenset()) -> str:
    """The profiler activity type of one event (``_KinetoEvent`` or a look-alike).

    ``e.activity_type()`` where this torch has it (>= 2.12). Otherwise inferred from
    ``device_type()``, ``is_user_annotation()`` (torch >= 2.5) or ``scope()``, and the name:

    * on the CPU: CUDA/HIP runtime and driver calls by name (``cudaLaunchKernel``,
      ``cudaStreamSynchronize``, ``cuMemcpyDtoH_v2``...), ``record_function`` ranges as
      ``user_annotation``, allocator records as ``cpu_instant_event``, the rest ``cpu_op``;
    * on CUDA: ``Memcpy ...`` as ``gpu_memcpy``, ``Memset ...`` as ``gpu_memset``, CUPTI sync and
      overhead records by name, ``record_function`` ranges mirrored on the GPU timeline as
      ``gpu_user_annotation`` (flagged by ``is_user_annotation()``, or, on a torch without it,
      named like a CPU-side annotation of the same trace: ``cpu_annotations``), the rest ``kernel``.

    Returns ``""`` for events of other devices.
    """
    activity = getattr(e, "activity_type", None)
    if callable(activity):
        return str(activity())
    return _infer_activity(e, str(e.name()), cpu_annotations)


def _infer_activity(e: Any, name: str, cpu_annotations: frozenset[str] | set[str]) -> str:
    device = _device(e)
    if device == "cpu":
        if _RUNTIME_NAME.match(name):
            return "cuda_runtime"
        if _DRIVER_NAME.match(name):
            return "cuda_driver"
        if name in _INSTANT_NAMES:
            return "cpu_instant_event"
        if _is_cpu_annotation(e):
            return "user_annotation"
        return "overhead" if name in _OVERHEAD_NAMES else "cpu_op"
    if device == "cuda":
        user = _call(e, "is_user_annotation")
        if user or (user is None and name in cpu_annotations):
            return "gpu_user_annotation"
        if name in _OVERHEAD_NAMES:
            return "overhead"
        if name.startswith("Memcpy"):
            return "gpu_memcpy"
        if name.startswith("Memset"):
            return "gpu_memset"
        if name in _DEVICE_SYNC_NAMES:
            return "cuda_sync"
        return "kernel"
    return ""


def event_kind(activity: str) -> str:
    """The :class:`TraceEvent` kind of a profiler activity type (:data:`_KINDS`; ``"other"`` for the rest)."""
    return _KINDS.get(activity, "other")


def _cpu_annotation_names(events: Iterable[Any]) -> frozenset[str]:
    """Names of the CPU-side ``record_function`` ranges (only needed where neither
    ``activity_type`` nor ``is_user_annotation`` tells the GPU-side copies apart)."""
    return frozenset(str(e.name()) for e in events if _device(e) == "cpu" and _is_cpu_annotation(e))


class _FunctionEventView:
    """A public ``FunctionEvent`` (``prof.events()``) with the ``_KinetoEvent`` methods used here."""

    def __init__(self, fe: Any) -> None:
        self._fe = fe

    def name(self) -> str:
        return getattr(self._fe, "trace_name", None) or self._fe.name

    def device_type(self) -> Any:
        return self._fe.device_type

    def is_user_annotation(self) -> Any:
        return getattr(self._fe, "is_user_annotation", None)

    def scope(self) -> Any:
        return getattr(self._fe, "scope", None)

    def start_ns(self) -> int:
        return round(self._fe.time_range.start * 1000)

    def duration_ns(self) -> int:
        return round(self._fe.time_range.end * 1000) - self.start_ns()

    def correlation_id(self) -> int:
        return int(getattr(self._fe, "id", 0) or 0)


def raw_events(prof: Any) -> list[Any]:
    """The profiler's events: ``prof.profiler.kineto_results.events()`` (torch's private but
    long-stable ``_KinetoEvent`` list: ns timestamps, correlation ids), else the public
    ``prof.events()`` viewed through the same methods (us timestamps relative to the trace start)."""
    results = getattr(getattr(prof, "profiler", None), "kineto_results", None)
    if results is not None and callable(getattr(results, "events", None)):
        return list(results.events())
    return [_FunctionEventView(fe) for fe in prof.events()]


def to_trace_events(prof: Any) -> list[TraceEvent]:
    """Convert a finished ``torch.profiler.profile`` into :class:`TraceEvent` objects."""
    return trace_events_from(raw_events(prof))


def trace_events_from(events: Sequence[Any]) -> list[TraceEvent]:
    """Classify ``_KinetoEvent``-like objects (see :func:`event_activity`), dropping ``other``."""
    events = list(events)
    if not events:
        return []
    native = callable(getattr(events[0], "activity_type", None))
    # GPU-side annotations are told apart by name only on a torch without is_user_annotation (2.4)
    by_name = not native and _call(events[0], "is_user_annotation") is None
    cpu_annotations = _cpu_annotation_names(events) if by_name else frozenset()
    out = []
    for e in events:
        name = str(e.name())
        if name.startswith("ProfilerStep#"):  # the schedule's own step annotation (profile_calls' warm-up)
            continue
        activity = str(e.activity_type()) if native else _infer_activity(e, name, cpu_annotations)
        kind = event_kind(activity)
        if kind == "other":
            continue
        start = int(e.start_ns())
        out.append(TraceEvent(name, kind, start, start + int(e.duration_ns()), int(e.correlation_id() or 0)))
    return out


#: What torch's profiler sets itself when inductor's CUDA graphs are on (torch/profiler/profiler.py:
#: "CUDA Graph does not work well with CUPTI teardown ... crashes on ... re-init after teardown").
CUPTI_GRAPH_ENV = {"DISABLE_CUPTI_LAZY_REINIT": "1", "TEARDOWN_CUPTI": "0"}


def cupti_guard(device: Any, environ: Any = None) -> bool:
    """Before profiling CUDA in a process that captured its own CUDA graphs (``cuda_graph=True``),
    turn CUPTI's teardown off as torch's profiler does for inductor's CUDA graphs (it only knows of
    those): set :data:`CUPTI_GRAPH_ENV` where not set. Returns whether it applied. Nothing on the CPU."""
    from pytest_gpuperf.measure.timing import graph_captured

    if getattr(device, "type", "cpu") != "cuda" or not graph_captured():
        return False
    env = os.environ if environ is None else environ
    for key, value in CUPTI_GRAPH_ENV.items():
        env.setdefault(key, value)
    return True


#: A line kineto writes to the process's stderr when a profiler starts or stops
#: (``USDT:2026-11-25 08:32:33 16798:16798 SyncActivityProfilerHandler.cpp:52] profiler_start``).
KINETO_LINE = re.compile(r"^USDT:|ActivityProfiler\w*\.cpp:\d+\]")


@contextlib.contextmanager
def quiet_kineto() -> Iterator[None]:
    """Keep kineto's own lines (:data:`KINETO_LINE`) out of the user's output while a profiler
    starts or stops: file descriptor 2 goes to a temporary file meanwhile (kineto writes there from
    C++, below Python's ``sys.stderr``); afterwards every other line it received is written back to
    it, in order. Where file descriptor 2 cannot be duplicated, it stays as it is. Also
    :func:`no_lazy_inductor` meanwhile (every start, step and stop of the plugin's profilers runs here)."""
    import tempfile

    try:
        saved = os.dup(2)
    except OSError:
        with no_lazy_inductor():
            yield
        return
    with tempfile.TemporaryFile() as tmp, no_lazy_inductor():
        _flush_stderr()
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            _flush_stderr()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            kept = [line for line in tmp.read().decode(errors="replace").splitlines(keepends=True)
                    if not KINETO_LINE.search(line)]
            if kept:
                os.write(2, "".join(kept).encode())


@contextlib.contextmanager
def no_lazy_inductor() -> Iterator[None]:
    """While a profiler starts, steps or stops: keep ``torch.profiler.profile`` from importing
    ``torch._inductor``. Its ``prepare_trace`` asks ``hasattr(torch, "_inductor")`` (to read inductor's
    CUDA-graph setting), and torch's lazy module attribute imports the package to answer, with
    ``torch._dynamo`` and sympy: some 2 s of CPU in every process that profiles (the extras
    processes, the op profiles, the A/B workers that measure peak memory). Where nothing imported it,
    nothing was compiled by inductor and the setting is moot (the profiler's default, no CUDA graphs,
    stands): ``_inductor`` leaves torch's set of lazy modules meanwhile and is put back after.
    Nothing changes where torch is not loaded, the package is imported already, or torch keeps no
    such set."""
    import sys

    lazy = getattr(sys.modules.get("torch"), "_lazy_modules", None)
    if "torch._inductor" in sys.modules or not isinstance(lazy, set) or "_inductor" not in lazy:
        yield
        return
    lazy.discard("_inductor")
    try:
        yield
    finally:
        lazy.add("_inductor")


def _flush_stderr() -> None:
    import sys

    try:
        sys.stderr.flush()
    except (AttributeError, OSError, ValueError):  # replaced or closed by the caller
        pass


@contextlib.contextmanager
def quietly(profiler: Any) -> Iterator[Any]:
    """Enter and exit a ``torch.profiler.profile`` (or any context manager) under
    :func:`quiet_kineto`; what runs inside is not redirected."""
    with quiet_kineto():
        value = profiler.__enter__()
    exc: tuple[Any, Any, Any] = (None, None, None)
    try:
        yield value
    except BaseException:
        import sys

        exc = sys.exc_info()
        raise
    finally:
        with quiet_kineto():
            profiler.__exit__(*exc)
