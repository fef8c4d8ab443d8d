"""Public testing helpers: a **simulated CUDA device** for testing benchmark code without a GPU.

:class:`SimulatedCuda` stands in for ``torch.cuda`` on a machine without a GPU: per-device streams
on a simulated device clock, launch costs, :class:`~SimulatedCuda.Event` timestamps, device-wide
and per-stream synchronization, ``set_device``/``device``/``current_stream``/``stream``, CUDA
graph capture and replay (a synchronization during capture raises, as in CUDA), an allocator with
the memory-statistics API, ``memory._record_memory_history``/``_snapshot``, device properties, NVML
(:class:`SimulatedNVML`) and profiler events (:class:`SimKinetoEvent`: kernels, copies and runtime
calls that join the real profiler's, for the count gate, the bottleneck classification and the op
profile; a profile that records CUDA reads them on the simulated clock:
:meth:`SimulatedCuda.on_simulated_clock`). Host time is simulated too: :meth:`SimulatedCuda.clock`
is a nanosecond clock that advances by the launch cost of every kernel, by the host time a workload
spends (:meth:`SimulatedCuda.host`) and jumps to the device's completion time at a
synchronization, so a measurement on the simulated device is deterministic and takes no real time.

It checks control flow, API use, synchronization order, stream and device routing and capture
rules, **not numbers**: how fast a real kernel runs, what L2 or clocks do, is for a real GPU run
of ``benchmarks/gpu_validate.py``.

Use it in a test with pytest's ``monkeypatch``::

    from pytest_gpuperf.testing import SimulatedCuda

    def test_my_benchmark_code(monkeypatch):
        sim = SimulatedCuda(devices=2).install(monkeypatch)
        work = lambda: sim.kernel(ms=1.0)          # a 1 ms kernel on the current stream
        ...

or for a whole pytest session, load this module as a plugin with its flag::

    pytest -p pytest_gpuperf.testing --gpuperf-simulated-cuda=2 --gpuperf ...

(or ini ``gpuperf_simulated_cuda = 2`` with ``-p pytest_gpuperf.testing`` in ``addopts``). It
installs the simulator when the session configures, before the plugin resolves its devices, and
uninstalls it at the end; the session times with its clock, its tests reach it as :func:`active`
(``pytest_gpuperf.testing.active()``), and the worker processes the session starts (replicates,
A/B sides, bisect steps, pytest-xdist workers) get the same two arguments. The plugin's fixture
``gpuperf_simulated_cuda`` installs it for one test and puts the two arguments in
``PYTEST_ADDOPTS`` for the ``pytester`` sessions the test runs. Simulated CUDA tensors are
:class:`SimBuffer` objects (``torch.empty/zeros/ones(..., device="cuda")`` return one while the
simulator is installed; ``torch.tensor(data, device="cuda")`` one holding its values); a workload
launches kernels with :meth:`SimulatedCuda.kernel`.

Under ``torchrun`` (issue 35) the simulator is also the nccl the ranks lack (:class:`SimulatedNccl`):
``init_process_group("nccl")`` creates a gloo group underneath that ``get_backend`` calls ``"nccl"``,
and ``all_reduce``/``broadcast`` of a simulated tensor really run between the ranks (gloo) and launch
an NCCL-named kernel (:meth:`SimulatedCuda.collective`, of a latency + bytes / bus bandwidth cost
model: :meth:`SimulatedCuda.collective_ms`), which the plugin's communication profile reads on the
simulated clock. Give each rank ``--gpuperf-simulated-cuda=N`` with N >= ranks per node: rank r
measures ``cuda:LOCAL_RANK``.
"""

from __future__ import annotations

import bisect
import collections
import contextlib
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import pytest

#: The simulator keeps the profiler events of this many recent launches and waits.
KINETO_EVENTS = 200_000
#: The plugin argument that installs the simulator for a session: ``-p`` this module.
PLUGIN = __name__
#: Most simulated devices.
MAX_DEVICES = 64

_ACTIVE: "SimulatedCuda | None" = None


def active() -> "SimulatedCuda | None":
    """The installed simulator (None when the real ``torch.cuda`` is in use)."""
    return _ACTIVE


#: NCCL's name of each collective in its kernel names (``all_to_all`` and send/receive run its
#: ``SendRecv`` kernel); the keys are :data:`pytest_gpuperf.verdict.communication.COLLECTIVES`.
NCCL_FUNCTIONS = {"all_reduce": "AllReduce", "broadcast": "Broadcast", "reduce": "Reduce", "all_gather": "AllGather",
                  "reduce_scatter": "ReduceScatter", "all_to_all": "SendRecv", "send_recv": "SendRecv"}
#: NCCL's data type names in its kernel names, by torch dtype name.
NCCL_TYPES = {"int8": "i8", "uint8": "u8", "bool": "u8", "int32": "i32", "uint32": "u32", "int64": "i64",
              "uint64": "u64", "float16": "f16", "float32": "f32", "float64": "f64", "bfloat16": "bf16",
              "float8_e4m3fn": "f8e4m3", "float8_e5m2": "f8e5m2"}
#: NCCL's reduction names in its kernel names, by ``torch.distributed.ReduceOp`` name (``AVG``:
#: ``PreMulSum`` on floating types, ``SumPostDiv`` on integers, as NCCL implements ``ncclAvg``).
NCCL_OPS = {"SUM": "Sum", "PRODUCT": "Prod", "MIN": "MinMax", "MAX": "MinMax", "PREMUL_SUM": "PreMulSum"}


def nccl_kernel_name(collective: str, dtype: Any = None, op: Any = "SUM") -> str:
    """The name NCCL >= 2.19 gives the kernel of ``collective`` (a key of :data:`NCCL_FUNCTIONS`)
    with its default ring algorithm and LL protocol: for the reducing collectives
    ``ncclDevKernel_<Func>_<Op>_<type>_RING_LL`` (``ncclDevKernel_AllReduce_Sum_f32_RING_LL``), for
    the others ``ncclDevKernel_<Func>_RING_LL`` (``ncclDevKernel_Broadcast_RING_LL``), and
    ``ncclDevKernel_SendRecv`` for all-to-all and send/receive. ``dtype``: a torch dtype or its name (None: float32, the default
    of a simulated buffer); ``op``: a ``torch.distributed.ReduceOp`` or its name. Raises
    ``ValueError`` for another collective."""
    func = NCCL_FUNCTIONS.get(collective)
    if func is None:
        raise ValueError(f"collective={collective!r}: expected one of {', '.join(NCCL_FUNCTIONS)}")
    if func == "SendRecv":
        return "ncclDevKernel_SendRecv"
    if collective not in ("all_reduce", "reduce", "reduce_scatter"):
        return f"ncclDevKernel_{func}_RING_LL"
    type_name = str(dtype if dtype is not None else "float32").rpartition(".")[2]
    nccl_type = NCCL_TYPES.get(type_name, type_name)
    op_name = (getattr(op, "name", None) or str(op).rpartition(".")[2]).upper()
    if op_name == "AVG":
        reduction = "PreMulSum" if nccl_type.startswith(("f", "bf")) else "SumPostDiv"
    else:
        reduction = NCCL_OPS.get(op_name, op_name.title())
    return f"ncclDevKernel_{func}_{reduction}_{nccl_type}_RING_LL"


class SimulatedCudaError(RuntimeError):
    """A CUDA rule broken on the simulated device (the message says which, as CUDA would)."""


@dataclass
class SimStream:
    """A stream of a simulated device: work runs in order; ``busy_until_ns`` is when the last
    enqueued work completes (device clock, ns)."""

    sim: "SimulatedCuda"
    device: int
    busy_until_ns: int = 0
    priority: int = 0
    name: str = "stream"

    def wait_stream(self, stream: "SimStream") -> None:
        """Later work on this stream waits for what ``stream`` has enqueued so far."""
        self.sim._log("wait_stream", self.name, stream.name)
        self.busy_until_ns = max(self.busy_until_ns, stream.busy_until_ns)

    def synchronize(self) -> None:
        """Block the host until this stream's work is done."""
        self.sim._check_not_capturing("Stream.synchronize")
        self.sim._log("stream_synchronize", self.name)
        self.sim._wait("cudaStreamSynchronize", max(self.sim.host_ns, self.busy_until_ns))

    def query(self) -> bool:
        return self.sim.host_ns >= self.busy_until_ns


class SimEvent:
    """``torch.cuda.Event`` on the simulated device: ``record`` timestamps the point its stream
    reaches (after all work enqueued there so far); ``elapsed_time`` raises unless both events
    were recorded with ``enable_timing`` and have completed, as CUDA does."""

    def __init__(self, sim: "SimulatedCuda", enable_timing: bool = False, blocking: bool = False,
                 interprocess: bool = False, external: bool = False) -> None:
        self.sim = sim
        self.enable_timing = enable_timing
        self.time_ns: int | None = None
        self.stream: SimStream | None = None

    def record(self, stream: Any = None) -> None:
        s = stream if stream is not None else self.sim.current_stream()
        self.stream = s
        self.time_ns = max(self.sim.host_ns, s.busy_until_ns)
        self.sim._log("event_record", s.name)

    def query(self) -> bool:
        return self.time_ns is not None and self.sim.host_ns >= self.time_ns

    def synchronize(self) -> None:
        self.sim._check_not_capturing("Event.synchronize")
        if self.time_ns is not None:
            self.sim._wait("cudaEventSynchronize", max(self.sim.host_ns, self.time_ns))
        self.sim._log("event_synchronize")

    def wait(self, stream: Any = None) -> None:
        s = stream if stream is not None else self.sim.current_stream()
        if self.time_ns is not None:
            s.busy_until_ns = max(s.busy_until_ns, self.time_ns)

    def elapsed_time(self, end_event: "SimEvent") -> float:
        """Milliseconds from this event to ``end_event`` (float)."""
        if not (self.enable_timing and end_event.enable_timing):
            raise SimulatedCudaError("Both events must be created with argument 'enable_timing=True'.")
        if self.time_ns is None or end_event.time_ns is None:
            raise SimulatedCudaError("Both events must be recorded before calculating elapsed time.")
        if not (self.query() and end_event.query()):
            raise SimulatedCudaError("CUDA error: device not ready")
        return (end_event.time_ns - self.time_ns) / 1e6


class SimKinetoEvent:
    """A profiler event of the simulated device, shaped like torch's ``_KinetoEvent`` (the methods
    :mod:`pytest_gpuperf.measure.trace` reads): CUDA runtime calls on the CPU timeline (``cudaLaunchKernel``,
    ``cudaDeviceSynchronize``...) and kernels, copies and memsets on the device timeline, with
    wall-clock (epoch) nanosecond timestamps like kineto's. Runtime calls take the real time the
    simulator call took, so they nest inside the real profiler's CPU ops and ``record_function``
    ranges; device events take the simulated durations. ``sim_start_ns``: a device event's start on
    the simulated device clock (ns; None for runtime calls), for the analyses that need the
    simulated timeline itself (the communication overlap: :meth:`SimulatedCuda.install`);
    ``host_span_ns``: a runtime call's span on the simulated host clock (ns; None for device
    events), for the profile on the simulated clock (:meth:`SimulatedCuda.on_simulated_clock`)."""

    def __init__(self, name: str, activity: str, start_ns: int, duration_ns: int, correlation: int,
                 sim_start_ns: int | None = None, host_span_ns: tuple[int, int] | None = None) -> None:
        self._name, self._activity = name, activity
        self._start, self._duration, self._correlation = int(start_ns), max(0, int(duration_ns)), correlation
        self.sim_start_ns = sim_start_ns
        self.host_span_ns = host_span_ns

    def name(self) -> str:
        return self._name

    def activity_type(self) -> str:
        return self._activity

    def device_type(self) -> Any:
        from torch.autograd import DeviceType

        return DeviceType.CPU if self._activity == "cuda_runtime" else DeviceType.CUDA

    def is_user_annotation(self) -> bool:
        return False

    def scope(self) -> int:
        return 0

    def start_ns(self) -> int:
        return self._start

    def duration_ns(self) -> int:
        return self._duration

    def end_ns(self) -> int:
        return self._start + self._duration

    def correlation_id(self) -> int:
        return self._correlation


class SimClockEvent:
    """A profiler event (a real ``_KinetoEvent`` or a :class:`SimKinetoEvent`) seen on the simulated
    clock: ``start_ns``/``duration_ns``/``end_ns`` are ``start_ns``/``end_ns`` (simulated ns), every
    other method is the event's own (see :meth:`SimulatedCuda.on_simulated_clock`)."""

    def __init__(self, event: Any, start_ns: int, end_ns: int) -> None:
        self._event, self._start, self._end = event, int(start_ns), max(int(start_ns), int(end_ns))

    def start_ns(self) -> int:
        return self._start

    def duration_ns(self) -> int:
        return self._end - self._start

    def end_ns(self) -> int:
        return self._end

    def __getattr__(self, name: str) -> Any:
        return getattr(self._event, name)


class SimGraph:
    """``torch.cuda.CUDAGraph``: kernels launched on the capturing stream during capture are
    recorded, not run; :meth:`replay` enqueues them all on the current stream for one launch cost."""

    def __init__(self, sim: "SimulatedCuda", keep_graph: bool = False) -> None:
        self.sim = sim
        self.kernels: list[tuple[str, int]] = []
        self.captured = False

    def replay(self) -> None:
        if not self.captured:
            raise SimulatedCudaError("CUDAGraph.replay: the graph was never captured")
        s = self.sim.current_stream()
        self.sim.host_ns += self.sim.launch_ns
        start = max(self.sim.host_ns, s.busy_until_ns)
        s.busy_until_ns = start + sum(ns for _, ns in self.kernels)
        self.sim._log("graph_replay", s.name, len(self.kernels))

    def reset(self) -> None:
        self.kernels, self.captured = [], False


@dataclass(frozen=True)
class SimDeviceProperties:
    """``torch.cuda.get_device_properties`` of a simulated device (the fields the plugin reads)."""

    name: str
    total_memory: int
    L2_cache_size: int
    multi_processor_count: int
    major: int
    minor: int
    uuid: str
    pci_bus_id: int
    pci_device_id: int
    pci_domain_id: int


@dataclass
class _Device:
    index: int
    default: SimStream
    current: SimStream
    allocated: int = 0
    peak: int = 0
    reserved: int = 0
    peak_reserved: int = 0
    history: list[dict[str, Any]] | None = None
    trace: list[dict[str, Any]] = field(default_factory=list)


class SimBuffer:
    """A simulated CUDA tensor: ``nbytes`` of device memory; ``zero_``/``fill_``/``copy_`` launch
    a memory-bound kernel (bytes / ``bandwidth_bytes_per_s``). Freed with :meth:`free` (or when
    garbage-collected).

    ``host``: its values, a CPU tensor, for a buffer made by ``torch.tensor(data, device="cuda")``
    (None for ``torch.empty/zeros/ones``: bytes only). A collective on the simulated nccl group
    moves them between the ranks (:class:`SimulatedNccl`) and :meth:`tolist` reads them."""

    def __init__(self, sim: "SimulatedCuda", nbytes: int, device: int, dtype: Any = None, host: Any = None) -> None:
        self.sim, self.nbytes, self.device_index, self.dtype, self.host = sim, int(nbytes), device, dtype, host
        self.addr = sim._alloc(self.nbytes, device)
        self.freed = False

    @property
    def device(self) -> Any:
        import torch

        return torch.device("cuda", self.device_index)

    def numel(self) -> int:
        return self.nbytes

    def element_size(self) -> int:
        return 1

    def _touch(self, name: str) -> "SimBuffer":
        self.sim.kernel(ms=self.nbytes / self.sim.bandwidth_bytes_per_s * 1e3, device=self.device_index, name=name,
                        bytes_written=self.nbytes)
        return self

    def zero_(self) -> "SimBuffer":
        return self._touch("zero_")

    def fill_(self, value: Any) -> "SimBuffer":
        return self._touch("fill_")

    def copy_(self, other: Any, non_blocking: bool = False) -> "SimBuffer":
        return self._touch("copy_")

    def tolist(self) -> Any:
        """The values (``host``), after the host waited for the buffer's device's current stream,
        as a device-to-host copy does. Raises :class:`SimulatedCudaError` for a buffer without values."""
        if self.host is None:
            raise SimulatedCudaError("this simulated buffer holds no values (only torch.tensor(data, device='cuda') "
                                     "makes one with values)")
        self.sim._check_not_capturing("Tensor.tolist")
        s = self.sim.current_stream(self.device_index)
        self.sim._wait("cudaStreamSynchronize", max(self.sim.host_ns, s.busy_until_ns))
        return self.host.tolist()

    def free(self) -> None:
        if not self.freed:
            self.freed = True
            self.sim._free(self.nbytes, self.device_index, self.addr)

    def __del__(self) -> None:  # pragma: no cover - timing of GC
        try:
            self.free()
        except Exception:
            pass


class SimulatedCuda:
    """A simulated ``torch.cuda`` with ``devices`` GPUs (see the module doc).

    ``launch_us``: host time of one kernel launch (µs; the host clock advances by it, and a kernel
    starts no earlier than its launch ends); ``sync_us``: host time of a synchronize call;
    ``total_memory_bytes``/``l2_bytes``/``sm_count``/``name``: the device properties;
    ``bandwidth_bytes_per_s``: speed of :class:`SimBuffer` writes; ``nccl_latency_us`` (µs) and
    ``nccl_bus_gb_per_s`` (GB/s, 1e9 bytes/s): the cost model of a collective's NCCL kernel
    (:meth:`collective_ms`). ``calls`` logs the API calls (name, args) in order, for tests of
    synchronization order and routing.
    """

    def __init__(self, devices: int = 1, *, launch_us: float = 5.0, sync_us: float = 10.0,
                 total_memory_bytes: int = 80 << 30, l2_bytes: int = 50 << 20, sm_count: int = 132,
                 name: str = "Simulated GPU", bandwidth_bytes_per_s: float = 2e12, nccl_latency_us: float = 10.0,
                 nccl_bus_gb_per_s: float = 100.0) -> None:
        if devices < 1:
            raise ValueError(f"devices={devices!r}: expected an integer >= 1")
        #: (real time, simulated host time) of every change of the simulated host clock, in order
        #: (epoch ns, ns; the last :data:`KINETO_EVENTS`): what the host clock read at a real instant
        #: (:meth:`host_ns_at`), for the profile on the simulated clock
        self.host_history: collections.deque[tuple[int, int]] = collections.deque(
            [(time.time_ns(), 0)], maxlen=KINETO_EVENTS)
        self._host_ns = 0
        self.launch_ns = int(launch_us * 1e3)
        self.sync_ns = int(sync_us * 1e3)
        self.total_memory_bytes = int(total_memory_bytes)
        self.l2_bytes = int(l2_bytes)
        self.sm_count = sm_count
        self.name = name
        self.bandwidth_bytes_per_s = float(bandwidth_bytes_per_s)
        self.nccl_latency_ns = int(nccl_latency_us * 1e3)
        self.nccl_bus_bytes_per_s = float(nccl_bus_gb_per_s) * 1e9
        self._nccl_streams: dict[int, SimStream] = {}  # NCCL's internal stream per device (async collectives)
        #: the simulated nccl side of ``torch.distributed`` (:class:`SimulatedNccl`; set by :meth:`install`)
        self.nccl: SimulatedNccl | None = None
        self._devices = []
        for i in range(devices):
            default = SimStream(self, i, name=f"cuda:{i}/default")
            self._devices.append(_Device(i, default, default))
        self.current_index = 0
        self.capturing: tuple[SimGraph, SimStream] | None = None
        self.calls: list[tuple[Any, ...]] = []
        self.kernels_launched = 0
        self.l2_epoch = [0] * devices  # bumped by writes of >= L2 bytes (they evict the L2)
        self._addr = 1 << 20
        self._warm: dict[tuple[int, str], int] = {}
        self._streams: dict[int, list[SimStream]] = {}  # side streams per device (torch.cuda.Stream())
        #: the profiler events of the last :data:`KINETO_EVENTS` launches and waits (see :class:`SimKinetoEvent`)
        self.kineto: collections.deque[SimKinetoEvent] = collections.deque(maxlen=KINETO_EVENTS)
        self._corr = 0

    # ------------------------------------------------------------------ workload side

    @property
    def host_ns(self) -> int:
        """The simulated host clock (ns); every change is kept in :attr:`host_history`."""
        return self._host_ns

    @host_ns.setter
    def host_ns(self, ns: int) -> None:
        if ns != self._host_ns:
            self._host_ns = ns
            self.host_history.append((time.time_ns(), ns))

    def host_ns_at(self, wall_ns: int) -> int:
        """What the simulated host clock read at real (epoch) time ``wall_ns``: its value after the
        last change at or before then (real time between the simulator's calls takes no simulated
        time). Before the kept history: its oldest value."""
        history = self.host_history
        i = bisect.bisect_right(history, (wall_ns, sys.maxsize)) - 1
        return history[max(0, i)][1]

    def clock(self) -> int:
        """The simulated host clock (ns): pass it as a measurer's clock."""
        return self.host_ns

    def host(self, ms: float) -> None:
        """Spend ``ms`` of host time (Python overhead, a data loader...)."""
        self.host_ns += int(ms * 1e6)

    def kernel(self, ms: float, *, device: Any = None, stream: Any = None, name: str = "kernel",
               bytes_written: int = 0, cold_ms: float | None = None) -> None:
        """Launch a kernel of ``ms`` device time on ``stream`` (default: the current stream of
        ``device``, default the current device). During graph capture on that stream it is
        recorded into the graph instead. ``cold_ms``: its time when the L2 was evicted since this
        kernel (by ``name``) last ran on the device (a write of at least ``l2_bytes``, e.g. an L2
        flush or a large copy); ``bytes_written`` >= ``l2_bytes`` evicts the L2."""
        s = stream if stream is not None else self.current_stream(device)
        if cold_ms is not None:
            key = (s.device, name)
            if self._warm.get(key) != self.l2_epoch[s.device]:
                ms = cold_ms
            self._warm[key] = self.l2_epoch[s.device]
        self._launch(s, max(1, int(ms * 1e6)), name, bytes_written)

    def _launch(self, s: SimStream, ns: int, name: str, bytes_written: int = 0) -> None:
        """Enqueue a kernel of ``ns`` device time on stream ``s`` (see :meth:`kernel`)."""
        self.kernels_launched += 1
        if bytes_written >= self.l2_bytes:
            self.l2_epoch[s.device] += 1
        if self.capturing is not None and self.capturing[1] is s:
            self.capturing[0].kernels.append((name, ns))
            self._log("kernel_captured", name, s.name)
            return
        wall, host = time.time_ns(), self.host_ns
        self.host_ns += self.launch_ns
        start = max(self.host_ns, s.busy_until_ns)
        nvml = getattr(self, "nvml", None)
        if nvml is not None and nvml.kernels_follow_clock:  # compute-bound: slower at a lower SM clock
            ns = max(1, round(ns * nvml.max_sm_clock_mhz / max(1, nvml.clock_at(start)[0])))
        s.busy_until_ns = start + ns
        self._log("kernel", name, s.name)
        self._corr += 1
        device_name = ("Memcpy DtoD (Device -> Device)" if name == "copy_" else
                       "Memset (Device)" if name in ("zero_", "fill_") else name)
        activity = "gpu_memcpy" if name == "copy_" else "gpu_memset" if name in ("zero_", "fill_") else "kernel"
        self.kineto.append(SimKinetoEvent("cudaLaunchKernel", "cuda_runtime", wall, time.time_ns() - wall, self._corr,
                                          host_span_ns=(host, self.host_ns)))
        # at the launch's real time: a simulated queue delay mapped onto the real clock would put a
        # kernel of an earlier block inside a later profile's window
        self.kineto.append(SimKinetoEvent(device_name, activity, wall, ns, self._corr, sim_start_ns=start))

    def collective_ms(self, collective: str, nbytes: int, world_size: int) -> float:
        """The device time (ms) of one collective's NCCL kernel, the simulator's cost model:
        ``nccl_latency_us`` + ``nbytes`` × factor(``world_size``) / ``nccl_bus_gb_per_s``, the
        factor being nccl-tests' bus factor (``2(n-1)/n`` for ``all_reduce``, ``(n-1)/n`` for
        ``all_gather`` and ``reduce_scatter``, 1 for ``broadcast`` and ``reduce``:
        :data:`pytest_gpuperf.verdict.communication.BUS_FACTORS`), so that a bare collective's
        measured bus bandwidth is about ``nccl_bus_gb_per_s``. ``nbytes``: nccl-tests' size, the
        whole array (for all-gather and reduce-scatter the gathered size). A stand-in, not NCCL's
        tuning model (no algorithm or protocol choice, no topology)."""
        return self._collective_ns(collective, nbytes, world_size) / 1e6

    def _collective_ns(self, collective: str, nbytes: int, world_size: int) -> int:
        from pytest_gpuperf.verdict.communication import BUS_FACTORS

        if collective not in NCCL_FUNCTIONS:
            raise ValueError(f"collective={collective!r}: expected one of {', '.join(NCCL_FUNCTIONS)}")
        factor = BUS_FACTORS[collective](world_size)
        return self.nccl_latency_ns + round(int(nbytes) * factor / self.nccl_bus_bytes_per_s * 1e9)

    def collective(self, collective: str, nbytes: int, *, world_size: int, dtype: Any = None, op: Any = "SUM",
                   device: Any = None, stream: Any = None) -> None:
        """Launch the NCCL kernel of one collective of ``nbytes`` bytes among ``world_size`` ranks
        on ``stream`` (default: the current stream of ``device``, default the current device): named
        as NCCL >= 2.19 names it (:func:`nccl_kernel_name` of ``collective``, ``dtype`` and the
        reduction ``op``, e.g. ``ncclDevKernel_AllReduce_Sum_f32_RING_LL``), of
        :meth:`collective_ms`' device time, one launch cost of host time. With one rank there is
        no kernel (NCCL launches none there). Only the kernel: no data moves (the simulated
        ``torch.distributed`` collectives move it: :class:`SimulatedNccl`)."""
        if world_size < 2:
            self._log("collective_one_rank", collective)
            return
        ns = self._collective_ns(collective, nbytes, world_size)
        s = stream if stream is not None else self.current_stream(device)
        self._launch(s, ns, nccl_kernel_name(collective, dtype, op))

    def nccl_stream(self, device: Any = None) -> SimStream:
        """NCCL's internal stream of ``device`` (default: the current one), where an
        ``async_op=True`` collective runs (created on first use; ``synchronize`` waits for it)."""
        i = self._index(device)
        if i not in self._nccl_streams:
            s = self.Stream(i)
            s.name = f"cuda:{i}/nccl"
            self._nccl_streams[i] = s
        return self._nccl_streams[i]

    # ------------------------------------------------------------------ torch.cuda API

    def is_available(self) -> bool:
        return True

    def is_initialized(self) -> bool:
        return True

    def device_count(self) -> int:
        return len(self._devices)

    def current_device(self) -> int:
        return self.current_index

    def _index(self, device: Any = None) -> int:
        if device is None:
            return self.current_index
        if isinstance(device, int) and not isinstance(device, bool):
            index = device
        else:
            import torch

            d = torch.device(device) if not isinstance(device, torch.device) else device
            if d.type != "cuda":
                raise ValueError(f"Expected a cuda device, but got: {d}")
            index = d.index if d.index is not None else self.current_index
        if not 0 <= index < len(self._devices):
            raise SimulatedCudaError(f"CUDA error: invalid device ordinal {index} ({len(self._devices)} device(s))")
        return index

    def set_device(self, device: Any) -> None:
        self.current_index = self._index(device)
        self._log("set_device", self.current_index)

    def device(self, device: Any) -> Any:
        """``with torch.cuda.device(d):`` the current device inside the block."""
        sim = self

        @contextlib.contextmanager
        def ctx() -> Iterator[None]:
            before = sim.current_index
            if device is not None and not (isinstance(device, int) and device < 0):
                sim.current_index = sim._index(device)
            try:
                yield
            finally:
                sim.current_index = before

        return ctx()

    def synchronize(self, device: Any = None) -> None:
        """Block the host until every stream of ``device`` (default: the current one) is done."""
        self._check_not_capturing("torch.cuda.synchronize")
        i = self._index(device)
        streams = self._streams.get(i, [])
        done = max([self._devices[i].default.busy_until_ns] + [s.busy_until_ns for s in streams])
        self._wait("cudaDeviceSynchronize", max(self.host_ns + self.sync_ns, done))
        self._log("synchronize", i)

    def current_stream(self, device: Any = None) -> SimStream:
        return self._devices[self._index(device)].current

    def default_stream(self, device: Any = None) -> SimStream:
        return self._devices[self._index(device)].default

    def Stream(self, device: Any = None, priority: int = 0, **kwargs: Any) -> SimStream:  # noqa: N802 (torch's name)
        i = self._index(device)
        s = SimStream(self, i, priority=priority, name=f"cuda:{i}/side{len(self._streams.get(i, []))}")
        self._streams.setdefault(i, []).append(s)
        return s

    def stream(self, stream: Any) -> Any:
        """``with torch.cuda.stream(s):`` ``s`` is the current stream of its device (and its
        device the current device) inside the block; ``None`` does nothing."""
        sim = self

        @contextlib.contextmanager
        def ctx() -> Iterator[None]:
            if stream is None:
                yield
                return
            before_dev = sim.current_index
            before = sim._devices[stream.device].current
            sim.current_index = stream.device
            sim._devices[stream.device].current = stream
            try:
                yield
            finally:
                sim._devices[stream.device].current = before
                sim.current_index = before_dev

        return ctx()

    def Event(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False,  # noqa: N802
              external: bool = False) -> SimEvent:
        return SimEvent(self, enable_timing, blocking, interprocess, external)

    def CUDAGraph(self, keep_graph: bool = False) -> SimGraph:  # noqa: N802
        return SimGraph(self, keep_graph)

    def graph(self, cuda_graph: SimGraph, pool: Any = None, stream: Any = None, capture_error_mode: str = "global",
              **kwargs: Any) -> Any:
        """``with torch.cuda.graph(g, stream=s):`` capture the kernels launched on ``s`` (a new
        side stream when None) into ``g``. Like torch it synchronizes first; a synchronize during
        capture raises."""
        sim = self

        @contextlib.contextmanager
        def ctx() -> Iterator[None]:
            sim.synchronize()
            s = stream if stream is not None else sim.Stream()
            if s is sim.default_stream(s.device):
                raise SimulatedCudaError("CUDA graphs must be captured on a non-default stream.")
            if sim.capturing is not None:
                raise SimulatedCudaError("CUDA error: a graph capture is already in progress")
            cuda_graph.reset()
            sim.capturing = (cuda_graph, s)
            sim._log("capture_begin", s.name)
            try:
                with sim.stream(s):
                    yield
            finally:
                sim.capturing = None
                cuda_graph.captured = True
                sim._log("capture_end", s.name)

        return ctx()

    def is_current_stream_capturing(self) -> bool:
        return self.capturing is not None and self.capturing[1] is self.current_stream()

    def get_device_properties(self, device: Any = None) -> SimDeviceProperties:
        i = self._index(device)
        return SimDeviceProperties(
            name=self.name, total_memory=self.total_memory_bytes, L2_cache_size=self.l2_bytes,
            multi_processor_count=self.sm_count, major=9, minor=0, uuid=f"5a1b0000-0000-4000-8000-{i:012d}",
            pci_bus_id=i + 1, pci_device_id=0, pci_domain_id=0)

    def get_device_name(self, device: Any = None) -> str:
        return self.name

    def get_device_capability(self, device: Any = None) -> tuple[int, int]:
        return (9, 0)

    # memory statistics ------------------------------------------------

    def _alloc(self, nbytes: int, device: int) -> int:
        d = self._devices[device]
        if d.allocated + nbytes > self.total_memory_bytes:
            raise _oom_error()(f"CUDA out of memory. Tried to allocate {nbytes} bytes on simulated device {device}")
        d.allocated += nbytes
        d.peak = max(d.peak, d.allocated)
        d.reserved = max(d.reserved, d.allocated)
        d.peak_reserved = max(d.peak_reserved, d.reserved)
        self._addr += max(nbytes, 512)
        if d.history is not None:
            d.trace.append({"action": "alloc", "addr": self._addr, "size": nbytes,
                            "frames": [{"filename": "simulated.py", "line": 1, "name": "alloc"}]})
        return self._addr

    def _free(self, nbytes: int, device: int, addr: int) -> None:
        d = self._devices[device]
        d.allocated -= nbytes
        if d.history is not None:
            d.trace.append({"action": "free_requested", "addr": addr, "size": nbytes, "frames": []})

    def alloc(self, nbytes: int, device: Any = None) -> SimBuffer:
        """Allocate ``nbytes`` on ``device`` (a :class:`SimBuffer`; raises ``torch.OutOfMemoryError``
        beyond the device's memory)."""
        return SimBuffer(self, nbytes, self._index(device))

    def memory_allocated(self, device: Any = None) -> int:
        return self._devices[self._index(device)].allocated

    def max_memory_allocated(self, device: Any = None) -> int:
        return self._devices[self._index(device)].peak

    def memory_reserved(self, device: Any = None) -> int:
        return self._devices[self._index(device)].reserved

    def max_memory_reserved(self, device: Any = None) -> int:
        return self._devices[self._index(device)].peak_reserved

    def reset_peak_memory_stats(self, device: Any = None) -> None:
        d = self._devices[self._index(device)]
        d.peak, d.peak_reserved = d.allocated, d.reserved

    def empty_cache(self) -> None:
        for d in self._devices:
            d.reserved = d.allocated

    def memory_summary(self, device: Any = None, abbreviated: bool = False) -> str:
        d = self._devices[self._index(device)]
        return f"simulated device {d.index}: allocated {d.allocated} B, peak {d.peak} B, reserved {d.reserved} B"

    def _record_memory_history(self, enabled: Any = "all", context: Any = "all", stacks: str = "all",
                               max_entries: int = 2**63 - 1, device: Any = None, clear_history: bool = False,
                               **kwargs: Any) -> None:
        d = self._devices[self._index(device)]
        if enabled is None:
            d.history = None
        else:
            d.history, d.trace = [], []

    def _snapshot(self, device: Any = None, augment_with_fx_traces: bool = False) -> dict[str, Any]:
        return {"segments": [], "device_traces": [list(d.trace) for d in self._devices]}

    # ------------------------------------------------------------------ installing

    def _wait(self, call: str, until_ns: int) -> None:
        """The host blocks in runtime call ``call`` until simulated time ``until_ns``."""
        wall, host = time.time_ns(), self.host_ns
        self.host_ns = max(self.host_ns, until_ns)
        self._corr += 1
        # on the real CPU timeline, so it nests in the real profiler's ops and annotations
        self.kineto.append(SimKinetoEvent(call, "cuda_runtime", wall, time.time_ns() - wall, self._corr,
                                          host_span_ns=(host, self.host_ns)))

    def on_simulated_clock(self, events: Any) -> list[SimClockEvent]:
        """Profiler events on the simulated clock, one timeline as a real GPU's trace has (views,
        :class:`SimClockEvent`): kernels, copies and memsets at their start on the simulated device
        clock, the simulator's runtime calls over their span on the simulated host clock, and the
        real profiler's events (CPU ops, ``record_function`` ranges) from what the simulated host
        clock read at their real start and end (:meth:`host_ns_at`). So host time a workload spends
        between launches (:meth:`host`) is host time in the trace, the device idles through it once
        its queue has drained, and the region a profile analyses spans the simulated time its calls
        took, whatever the real machine's speed or load. ``events``: epoch-ns stamped (kineto's)."""
        history = list(self.host_history)
        walls = [w for w, _ in history]

        def host_at(wall_ns: int) -> int:
            return history[max(0, bisect.bisect_right(walls, wall_ns) - 1)][1]

        out = []
        for e in events:
            if isinstance(e, SimKinetoEvent) and e.sim_start_ns is not None:
                out.append(SimClockEvent(e, e.sim_start_ns, e.sim_start_ns + e.duration_ns()))
            elif isinstance(e, SimKinetoEvent) and e.host_span_ns is not None:
                out.append(SimClockEvent(e, *e.host_span_ns))
            else:
                start = int(e.start_ns())
                out.append(SimClockEvent(e, host_at(start), host_at(start + int(e.duration_ns()))))
        return out

    def kineto_events(self, start_ns: int, end_ns: int) -> list[SimKinetoEvent]:
        """The simulated profiler events (runtime calls, kernels, copies) that began in the wall-clock
        window ``[start_ns, end_ns]`` (epoch ns, kineto's clock)."""
        return [e for e in self.kineto if start_ns <= e.start_ns() <= end_ns]

    def _check_not_capturing(self, what: str) -> None:
        if self.capturing is not None:
            raise SimulatedCudaError(f"CUDA error: operation not permitted when stream is capturing ({what})")

    def _log(self, *call: Any) -> None:
        self.calls.append(call)

    #: ``torch.cuda`` attributes replaced by :meth:`install`.
    API = ("is_available", "is_initialized", "device_count", "current_device", "set_device", "device", "synchronize",
           "current_stream", "default_stream", "Stream", "stream", "Event", "CUDAGraph", "graph",
           "is_current_stream_capturing", "get_device_properties", "get_device_name", "get_device_capability",
           "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
           "reset_peak_memory_stats", "empty_cache", "memory_summary")
    MEMORY_API = ("_record_memory_history", "_snapshot")
    FACTORIES = ("empty", "zeros", "ones", "empty_like")

    def install(self, monkeypatch: Any, *, nvml: bool = True) -> "SimulatedCuda":
        """Replace ``torch.cuda``'s device API (:data:`API`), ``torch.cuda.memory``'s snapshot API
        and ``torch.empty/zeros/ones/empty_like`` for CUDA devices (-> :class:`SimBuffer`) with this
        simulator, the profiler's events (the simulated kernels, copies and runtime calls join
        the real ones: :class:`SimKinetoEvent`), the bottleneck classification's device ceilings
        (:data:`PEAK_FLOPS_PER_S`, :data:`PEAK_BYTES_PER_S`), the CUDA probes' builder, the op
        profile's whole-call and phase times (on the simulated clock, like its kernels and idle
        time: :meth:`on_simulated_clock`, :meth:`_sample_from`), and with
        ``nvml`` the ``pynvml`` module with a :class:`SimulatedNVML` of the same devices (:attr:`nvml`), through ``monkeypatch`` (pytest's fixture, or any object with
        ``setattr``/``setitem``); undone with it. Returns ``self``.

        For ``torchrun`` sessions: ``torch.tensor(data, device="cuda")`` (a :class:`SimBuffer` with
        its values), ``torch.distributed``'s nccl-facing functions (:class:`SimulatedNccl`, as
        :attr:`nccl`; where ``torch.distributed`` is available) and the communication profile's
        events (:func:`pytest_gpuperf.measure.communication.profile_communication`): a profile
        that records CUDA gets the simulated device's kernels, copies and memsets on the simulated
        clock, and its span is the simulated host clock from the profile's start to its stop
        (before the profiler's own closing synchronize). Real CPU events are left out there (the
        CUDA classification reads the GPU's timeline only, and they are on the real clock); in
        ``profile_communication`` nothing simulated runs between the profile's start and its
        ``gpuperf::region``, nor between the region's final synchronize and the profile's stop (the
        alignment barrier is gloo's), so that span is the region's."""
        import torch

        if nvml:
            self.nvml = SimulatedNVML(self)
            monkeypatch.setitem(sys.modules, "pynvml", self.nvml)

        for name in self.API:
            monkeypatch.setattr(torch.cuda, name, getattr(self, name))
        for name in self.MEMORY_API:
            monkeypatch.setattr(torch.cuda.memory, name, getattr(self, name))
        for name in self.FACTORIES:
            monkeypatch.setattr(torch, name, self._factory(getattr(torch, name)))
        monkeypatch.setattr(torch, "tensor", self._tensor_factory(torch.tensor))
        self._install_nccl(monkeypatch)
        import importlib

        # by sys.modules (not the package's attributes, which can outlive a module pytester's
        # in-process runs dropped from sys.modules): the modules the plugin will import
        probe, trace, profiling, communication, opprofile = (
            importlib.import_module(f"{__package__}.measure.{m}")
            for m in ("probe", "trace", "profiling", "communication", "opprofile"))
        monkeypatch.setattr(probe, "_build", self._probe_builder(probe._build))
        monkeypatch.setattr(trace, "raw_events", self._raw_events(trace.raw_events))
        monkeypatch.setattr(profiling, "calibrate", self._calibrate(profiling.calibrate))
        monkeypatch.setattr(communication, "_events", self._communication_events(communication._events))
        monkeypatch.setattr(opprofile, "sample_from", self._sample_from(opprofile.sample_from))
        self._install_profile_stamps(monkeypatch)
        monkeypatch.setattr(sys.modules[__name__], "_ACTIVE", self)
        return self

    def _install_nccl(self, monkeypatch: Any) -> None:
        """``torch.distributed``'s nccl-facing functions (:class:`SimulatedNccl`, as :attr:`nccl`) and
        ``torch.cuda.nccl.version``, where ``torch.distributed`` is available (see :meth:`install`)."""
        import torch.distributed as dist

        if not dist.is_available():
            return
        self.nccl = SimulatedNccl(self)
        for name, fn in self.nccl.functions({n: getattr(dist, n) for n in SimulatedNccl.API}).items():
            monkeypatch.setattr(dist, name, fn)
        import torch.cuda.nccl

        monkeypatch.setattr(torch.cuda.nccl, "version", self.nccl.version)

    def _install_profile_stamps(self, monkeypatch: Any) -> None:
        """``torch.profiler.profile.start``/``stop`` that stamp when each profile started and stopped,
        on kineto's (epoch) clock and the simulated host clock (stop: before the profiler's own
        closing synchronize); the communication profile's span (see :meth:`install`)."""
        import torch

        real_start, real_stop = torch.profiler.profile.start, torch.profiler.profile.stop
        sim = self

        def start(prof: Any) -> Any:
            prof._gpuperf_sim_started_ns = time.time_ns()
            prof._gpuperf_sim_host_start_ns = sim.host_ns
            return real_start(prof)

        def stop(prof: Any) -> Any:
            prof._gpuperf_sim_stopped_ns = time.time_ns()
            prof._gpuperf_sim_host_stop_ns = sim.host_ns
            return real_stop(prof)

        monkeypatch.setattr(torch.profiler.profile, "start", start)
        monkeypatch.setattr(torch.profiler.profile, "stop", stop)

    #: The ceilings the bottleneck classification's roofline uses on a simulated device (stand-ins:
    #: the real calibration computes a large matmul and copy on the device).
    PEAK_FLOPS_PER_S = 1.0e15
    PEAK_BYTES_PER_S = 3.0e12

    def _calibrate(self, real: Any) -> Any:
        sim = self

        def calibrate(device: Any, dtype: str | None = None, *, tf32: bool = False) -> tuple[float, float]:
            if getattr(device, "type", "cpu") != "cuda":
                return real(device, dtype, tf32=tf32)
            return sim.PEAK_FLOPS_PER_S, sim.PEAK_BYTES_PER_S

        return calibrate

    def _communication_events(self, real: Any) -> Any:
        """``measure.communication._events`` on the simulated clock for a profile that records CUDA
        (see :meth:`install`): the simulated device events of the profile's window (kernels,
        copies, memsets; µs on the simulated device clock) and the span from the profile's start
        to its stop on the simulated host clock (µs); otherwise (the CPU, or no region) torch's."""
        sim = self

        def events(prof: Any) -> tuple[list[Any], tuple[float, float] | None]:
            from torch.profiler import ProfilerActivity

            from pytest_gpuperf.measure.trace import event_kind
            from pytest_gpuperf.verdict.communication import ProfEvent

            out, span = real(prof)
            stamps = [getattr(prof, f"_gpuperf_sim_{k}", None) for k in ("started_ns", "stopped_ns", "host_start_ns",
                                                                         "host_stop_ns")]
            if span is None or None in stamps or ProfilerActivity.CUDA not in (getattr(prof, "activities", None) or ()):
                return out, span
            lo, hi, host_start, host_stop = stamps
            device = [ProfEvent(e.name(), "cuda", e.sim_start_ns / 1e3, (e.sim_start_ns + e.duration_ns()) / 1e3, 0,
                                event_kind(e.activity_type()))
                      for e in sim.kineto_events(lo, hi) if e.sim_start_ns is not None]
            return device, (host_start / 1e3, host_stop / 1e3)

        return events

    def _raw_events(self, real: Any) -> Any:
        """``trace.raw_events`` with the simulated device's events of the profiled window added:
        what kineto would have recorded of the simulated kernels, copies and runtime calls. A
        profile that records CUDA gets them all on the simulated clock (:meth:`on_simulated_clock`:
        the bottleneck classification's and the op profile's idle time, the count gate's syncs);
        the window is chosen on the real clock."""
        sim = self

        def raw_events(prof: Any) -> list[Any]:
            from torch.profiler import ProfilerActivity

            events = list(real(prof))
            results = getattr(getattr(prof, "profiler", None), "kineto_results", None)
            lo = getattr(prof, "_gpuperf_sim_started_ns", None)  # stamped by the patched profile.start
            if lo is None:
                start = getattr(results, "trace_start_ns", None)
                lo = int(start()) if callable(start) else min((int(e.start_ns()) for e in events), default=None)
            # a scheduled profile keeps its recorded step only (kineto drops the warm-up step's events)
            steps = [int(e.start_ns()) for e in events if str(e.name()).startswith("ProfilerStep#")]
            lo = max(steps) if steps else lo
            if lo is None:
                return events
            # the window ends now: the profile has stopped (torch's profiling_end_time_ns is on another clock)
            events += sim.kineto_events(lo, time.time_ns())
            return sim.on_simulated_clock(events) if _simulated_clock(prof) else events

        return raw_events

    def _sample_from(self, real: Any) -> Any:
        """``opprofile.sample_from`` whose whole call's and phases' times are, for a profile on the
        simulated clock (:meth:`on_simulated_clock`), the ``gpuperf::region`` and phase ranges' spans
        on that clock, like its kernels and idle time; torch's ``key_averages`` (what the real one
        reads them from: the same ranges' spans, as a real GPU's trace has them) has them on the
        real clock only. Otherwise (the CPU) the real one's."""

        def sample_from(prof: Any, calls: int, cuda: bool, process: int = 0) -> Any:
            import dataclasses as dc

            from pytest_gpuperf.measure.trace import to_trace_events
            from pytest_gpuperf.verdict.bottleneck import PHASE_PREFIX, REGION_NAME

            sample = real(prof, calls, cuda, process)
            if not cuda or not _simulated_clock(prof):
                return sample
            spans: dict[str, float] = {}
            for e in to_trace_events(prof):
                if e.kind == "annotation" and (e.name == REGION_NAME or e.name.startswith(PHASE_PREFIX)):
                    spans[e.name] = spans.get(e.name, 0.0) + e.duration_ns / 1e6 / max(1, calls)
            total = spans.pop(REGION_NAME, None)
            phases = {name[len(PHASE_PREFIX):]: ms for name, ms in spans.items()}
            return dc.replace(sample, total_ms=sample.total_ms if total is None else total, phase_ms=phases)

        return sample_from

    def _probe_builder(self, real: Any) -> Any:
        """The interleaved probes on a simulated device: the ``memory`` probe (the default) is the
        real code (a 128 MiB device copy between simulated buffers; it evicts the L2, as the real one
        does); ``compute`` (a 30 µs kernel) and ``overhead`` (16 tiny kernels), whose real code
        computes on CUDA tensors, are stand-ins with the real names; the CPU's probes are real."""
        sim = self

        def build(kind: str, device: Any) -> Any:
            from pytest_gpuperf.measure.probe import OVERHEAD_OPS, Probe

            if getattr(device, "type", "cpu") != "cuda" or kind == "memory":
                return real(kind, device)
            index = sim._index(device)
            if kind == "compute":
                return Probe(kind, "compute: 2048x2048 bfloat16 matmul",
                             lambda: sim.kernel(ms=0.03, device=index, name="probe_matmul"))
            return Probe(kind, f"overhead: {OVERHEAD_OPS} tiny adds",
                         lambda: [sim.kernel(ms=0.001, device=index, name="probe_add") for _ in range(OVERHEAD_OPS)])

        return build

    def _factory(self, real: Any) -> Any:
        sim = self

        def factory(*size: Any, dtype: Any = None, device: Any = None, **kwargs: Any) -> Any:
            import torch

            if len(size) == 1 and isinstance(size[0], SimBuffer):  # empty_like(a simulated buffer)
                like = size[0]
                return SimBuffer(sim, like.nbytes, like.device_index, like.dtype)
            if device is not None and torch.device(device).type == "cuda":
                dims = size[0] if len(size) == 1 and isinstance(size[0], (tuple, list)) else size
                n = 1
                for s in dims:
                    n *= int(s)
                width = torch.empty((), dtype=dtype).element_size() if dtype is not None else 4
                return SimBuffer(sim, n * width, sim._index(device), dtype)
            return real(*size, dtype=dtype, device=device, **kwargs)

        factory.__wrapped__ = real  # type: ignore[attr-defined]
        return factory

    def _tensor_factory(self, real: Any) -> Any:
        """``torch.tensor``: on a CUDA device a :class:`SimBuffer` holding the values (a CPU tensor,
        ``host``), e.g. the small tensors a collective sends; elsewhere torch's."""
        sim = self

        def tensor(data: Any, *, dtype: Any = None, device: Any = None, **kwargs: Any) -> Any:
            import torch

            if device is not None and torch.device(device).type == "cuda":
                host = real(data, dtype=dtype)
                return SimBuffer(sim, host.numel() * host.element_size(), sim._index(device), host.dtype, host=host)
            return real(data, dtype=dtype, device=device, **kwargs)

        tensor.__wrapped__ = real  # type: ignore[attr-defined]
        return tensor


def _simulated_clock(prof: Any) -> bool:
    """Whether a profile's events are read on the simulated clock (:meth:`SimulatedCuda.on_simulated_clock`):
    it records CUDA, and its events are kineto's, epoch-ns stamped (not ``prof.events()``' relative ones)."""
    from torch.profiler import ProfilerActivity

    results = getattr(getattr(prof, "profiler", None), "kineto_results", None)
    return (ProfilerActivity.CUDA in (getattr(prof, "activities", None) or ())
            and callable(getattr(results, "events", None)))


class SimWork:
    """The ``Work`` of an ``async_op=True`` collective on the simulated nccl group: :meth:`wait`
    waits for gloo's work underneath (the data), then makes the current stream of the buffer's
    device wait for NCCL's stream (as ``ProcessGroupNCCL``'s ``Work.wait`` does: it does not block
    the host for the kernel). Anything else is gloo's work's."""

    def __init__(self, work: Any, sim: "SimulatedCuda", device: int, stream: SimStream) -> None:
        self._work, self._sim, self._device, self._stream = work, sim, device, stream

    def wait(self, *args: Any, **kwargs: Any) -> bool:
        done = self._work.wait(*args, **kwargs) if self._work is not None else True
        self._sim.current_stream(self._device).wait_stream(self._stream)
        return bool(done) if done is not None else True

    def __getattr__(self, name: str) -> Any:
        return getattr(self._work, name)


class SimulatedNccl:
    """``torch.distributed``'s nccl-facing bits on a simulated device, for a ``torchrun`` session
    without NCCL or GPUs (installed with :meth:`SimulatedCuda.install`; the names are :data:`API`):

    * ``init_process_group`` with backend ``"nccl"`` (or a ``cuda:nccl`` part, or no backend and
      a CUDA ``device_id``) creates a **gloo** group underneath, so collectives really run between
      the ranks' processes (the data moves as on the CPU); any other backend is torch's own;
    * ``get_backend`` says ``"nccl"`` for that group (the default group only: groups made with
      ``new_group`` are gloo's), and ``monitored_barrier`` on it raises torch's ``ValueError``
      (``monitored_barrier is only implemented for GLOO backend.``), as on a real nccl group,
      although gloo underneath could run it;
    * ``all_reduce`` and ``broadcast`` of a simulated CUDA tensor (:class:`SimBuffer`) run gloo's
      collective on its values (``torch.tensor(data, device="cuda")`` buffers: the results are
      real) or, for a buffer of bytes only, on a one-element stand-in (the ranks meet, no bytes
      move), then launch NCCL's kernel on the simulated device (:meth:`SimulatedCuda.collective`:
      named as NCCL names it, of the cost model's duration). As ``ProcessGroupNCCL`` does since
      torch 2.8 (pytorch/pytorch#150398): ``async_op=False`` launches it on the current stream of
      the buffer's device; ``async_op=True`` on NCCL's own stream of that device
      (:meth:`SimulatedCuda.nccl_stream`), after the current stream's work, and returns a
      :class:`SimWork` whose ``wait`` makes the current stream wait for it. Other tensors (CPU
      ones) go to gloo unchanged, with no kernel.

    * ``torch.cuda.nccl.version`` is :data:`VERSION` (torch's profiler asks for it when the
      default group's backend is nccl).

    Object collectives (``all_gather_object``, ``broadcast_object_list``) and ``barrier`` are
    gloo's, with no simulated kernel (NCCL's would launch small ones). ``groups``: the process
    groups created here as nccl.
    """

    #: ``torch.distributed`` functions replaced while the simulator is installed.
    API = ("init_process_group", "get_backend", "monitored_barrier", "all_reduce", "broadcast")
    #: The simulated NCCL's version (``torch.cuda.nccl.version()``): one that names its kernels
    #: ``ncclDevKernel_*`` (>= 2.19).
    VERSION = (2, 27, 5)

    def version(self) -> tuple[int, ...]:
        """``torch.cuda.nccl.version()``: :data:`VERSION`."""
        return self.VERSION

    def __init__(self, sim: "SimulatedCuda") -> None:
        self.sim = sim
        self.groups: list[Any] = []

    def owns(self, group: Any = None) -> bool:
        """Whether ``group`` (None: the default group) is a process group created here as nccl."""
        import torch.distributed as dist

        pg = group if group is not None else (dist.group.WORLD if dist.is_initialized() else None)
        return pg is not None and any(pg is g for g in self.groups)

    @staticmethod
    def is_nccl(backend: Any, device_id: Any = None) -> bool:
        """Whether ``init_process_group(backend, device_id=...)`` asks for NCCL: ``"nccl"``, a
        ``"cuda:nccl"`` part (``"cpu:gloo,cuda:nccl"``), or no backend and a CUDA ``device_id``."""
        if backend is None:
            return device_id is not None and not isinstance(device_id, int) and getattr(device_id, "type", "") == "cuda"
        spec = str(backend).lower().replace(" ", "")
        return spec == "nccl" or "cuda:nccl" in spec.split(",")

    def functions(self, real: Any) -> dict[str, Any]:
        """The replacements of :data:`API`, around ``real`` (name -> torch's function), with
        torch's parameters (names, kinds, defaults: the drift guard compares them)."""
        import torch
        import torch.distributed as dist

        nccl, sim = self, self.sim
        SUM = dist.ReduceOp.SUM  # noqa: N806 (torch's default)

        def init_process_group(backend=None, init_method=None, timeout=None, world_size=-1, rank=-1,  # type: ignore[no-untyped-def]
                               store=None, group_name="", pg_options=None, device_id=None, **kwargs):
            if not nccl.is_nccl(backend, device_id):
                return real["init_process_group"](backend=backend, init_method=init_method, timeout=timeout,
                                                  world_size=world_size, rank=rank, store=store, group_name=group_name,
                                                  pg_options=pg_options, device_id=device_id, **kwargs)
            if device_id is not None:
                sim._index(device_id)  # a device the simulator has (else CUDA's invalid-ordinal error)
            # gloo underneath: NCCL's options and device binding mean nothing to it
            out = real["init_process_group"](backend="gloo", init_method=init_method, timeout=timeout,
                                             world_size=world_size, rank=rank, store=store, group_name=group_name,
                                             **kwargs)
            nccl.groups.append(dist.group.WORLD)
            sim._log("init_process_group", "nccl", "gloo")
            return out

        def get_backend(group=None):  # type: ignore[no-untyped-def]
            return dist.Backend.NCCL if nccl.owns(group) else real["get_backend"](group)

        def monitored_barrier(group=None, timeout=None, wait_all_ranks=False):  # type: ignore[no-untyped-def]
            if nccl.owns(group):  # torch's check, which sees gloo underneath
                raise ValueError("monitored_barrier is only implemented for GLOO backend.")
            return real["monitored_barrier"](group=group, timeout=timeout, wait_all_ranks=wait_all_ranks)

        def all_reduce(tensor, op=SUM, group=None, async_op=False):  # type: ignore[no-untyped-def]
            if not isinstance(tensor, SimBuffer):
                return real["all_reduce"](tensor, op=op, group=group, async_op=async_op)
            work = real["all_reduce"](nccl._payload(tensor, torch), op=op, group=group, async_op=async_op)
            return nccl._launch("all_reduce", tensor, op, group, async_op, work)

        def broadcast(tensor, src=None, group=None, async_op=False, group_src=None):  # type: ignore[no-untyped-def]
            if not isinstance(tensor, SimBuffer):
                return real["broadcast"](tensor, src=src, group=group, async_op=async_op, group_src=group_src)
            work = real["broadcast"](nccl._payload(tensor, torch), src=src, group=group, async_op=async_op,
                                     group_src=group_src)
            return nccl._launch("broadcast", tensor, "SUM", group, async_op, work)

        made = {"init_process_group": init_process_group, "get_backend": get_backend,
                "monitored_barrier": monitored_barrier, "all_reduce": all_reduce, "broadcast": broadcast}
        for name, fn in made.items():
            fn.__wrapped__ = real[name]  # type: ignore[attr-defined]
        return made

    @staticmethod
    def _payload(buf: SimBuffer, torch: Any) -> Any:
        """What gloo moves for a simulated buffer: its values, else a one-element stand-in."""
        return buf.host if buf.host is not None else torch.zeros(1)

    def _launch(self, collective: str, buf: SimBuffer, op: Any, group: Any, async_op: bool, work: Any) -> Any:
        """NCCL's kernel of a collective on ``buf`` that gloo has run (``work``: gloo's, with
        ``async_op``): on the current stream of ``buf``'s device, or on NCCL's stream after it
        (``async_op``; returns a :class:`SimWork`)."""
        import torch.distributed as dist

        sim, device = self.sim, buf.device_index
        stream = sim.current_stream(device)
        if async_op:
            nccl_stream = sim.nccl_stream(device)
            nccl_stream.wait_stream(stream)  # the collective reads what the current stream wrote
            stream = nccl_stream
        sim.collective(collective, buf.nbytes, world_size=dist.get_world_size(group), dtype=buf.dtype, op=op,
                       stream=stream)
        return SimWork(work, sim, device, stream) if async_op else work


def _oom_error() -> type[BaseException]:
    import torch

    return getattr(torch.cuda, "OutOfMemoryError", None) or getattr(torch, "OutOfMemoryError", RuntimeError)


class NVMLError(Exception):
    """What the simulated NVML raises (``pynvml.NVMLError``'s role)."""


class SimulatedNVML:
    """``pynvml`` for the simulated GPUs of a :class:`SimulatedCuda` (install with
    :meth:`SimulatedCuda.install` ``(nvml=True)``): handles by UUID, PCI bus id or index for the
    same devices, static facts (name, UUID, memory, max clocks, power limit...) and a scriptable
    state read by the telemetry sampler: ``sm_clock_mhz``, ``reasons`` (the clocks-event reason
    bits, e.g. ``0x40`` HW thermal, ``0x4`` SW power cap), ``temperature_c``, ``power_w``,
    ``utilization_pct`` and ``processes`` (``[(pid, used bytes)]``, what
    ``nvmlDeviceGetComputeRunningProcesses`` lists). ``calls`` counts the calls by name.

    Per-round clocks (issue 49): ``clock_script``, a function of the simulated host clock (ns) that
    returns the SM clock (MHz) or ``(MHz, reasons)`` at that instant, overrides ``sm_clock_mhz`` and
    ``reasons`` (e.g. a clock that falls from 1980 to 1425 MHz after 2 simulated seconds of work);
    with ``kernels_follow_clock`` the simulated kernels run ``max_sm_clock_mhz / clock`` times their
    nominal time (compute-bound work at a lower clock). ``default_sm_clock_mhz`` is the default
    application clock (``nvmlDeviceGetDefaultApplicationsClock``)."""

    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_TEMPERATURE_GPU = 0
    NVMLError = NVMLError

    def __init__(self, sim: "SimulatedCuda", *, max_sm_clock_mhz: int = 1980, max_memory_clock_mhz: int = 2619,
                 power_limit_w: float = 700.0) -> None:
        self.sim = sim
        self.max_sm_clock_mhz = max_sm_clock_mhz
        self.max_memory_clock_mhz = max_memory_clock_mhz
        self.power_limit_w = power_limit_w
        self.sm_clock_mhz = max_sm_clock_mhz
        self.default_sm_clock_mhz = max_sm_clock_mhz
        self.reasons = 0
        self.clock_script: Callable[[int], Any] | None = None
        self.kernels_follow_clock = False
        self.temperature_c = 60
        self.power_w = 300.0
        self.utilization_pct = 90
        self.processes: list[tuple[int, int | None]] = []
        self.calls: dict[str, int] = {}

    def _count(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1

    def _handle(self, index: int) -> tuple[str, int]:
        if not 0 <= index < self.sim.device_count():
            raise NVMLError("NVML_ERROR_INVALID_ARGUMENT")
        return ("nvml-handle", index)

    def nvmlInit(self) -> None:  # noqa: N802 (NVML's names)
        self._count("nvmlInit")

    def nvmlShutdown(self) -> None:  # noqa: N802
        pass

    def nvmlSystemGetDriverVersion(self) -> str:  # noqa: N802
        return "550.54.15"

    def nvmlSystemGetCudaDriverVersion(self) -> int:  # noqa: N802
        return 12040

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return self.sim.device_count()

    def nvmlDeviceGetHandleByIndex(self, index: int) -> tuple[str, int]:  # noqa: N802
        self._count("nvmlDeviceGetHandleByIndex")
        return self._handle(index)

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> tuple[str, int]:  # noqa: N802
        self._count("nvmlDeviceGetHandleByUUID")
        for i in range(self.sim.device_count()):
            if uuid == f"GPU-{self.sim.get_device_properties(i).uuid}":
                return self._handle(i)
        raise NVMLError("NVML_ERROR_NOT_FOUND")

    def nvmlDeviceGetHandleByPciBusId(self, bus_id: str) -> tuple[str, int]:  # noqa: N802
        self._count("nvmlDeviceGetHandleByPciBusId")
        for i in range(self.sim.device_count()):
            p = self.sim.get_device_properties(i)
            if bus_id == f"{p.pci_domain_id:08X}:{p.pci_bus_id:02X}:{p.pci_device_id:02X}.0":
                return self._handle(i)
        raise NVMLError("NVML_ERROR_NOT_FOUND")

    def nvmlDeviceGetName(self, h: Any) -> str:  # noqa: N802
        return self.sim.name

    def nvmlDeviceGetUUID(self, h: Any) -> str:  # noqa: N802
        return f"GPU-{self.sim.get_device_properties(h[1]).uuid}"

    def nvmlDeviceGetCudaComputeCapability(self, h: Any) -> tuple[int, int]:  # noqa: N802
        return self.sim.get_device_capability(h[1])

    def nvmlDeviceGetMemoryInfo(self, h: Any, version: Any = None) -> Any:  # noqa: N802
        from types import SimpleNamespace

        used = self.sim.memory_reserved(h[1])
        return SimpleNamespace(total=self.sim.total_memory_bytes, used=used, free=self.sim.total_memory_bytes - used)

    def nvmlDeviceGetMaxClockInfo(self, h: Any, kind: int) -> int:  # noqa: N802
        return self.max_sm_clock_mhz if kind == self.NVML_CLOCK_SM else self.max_memory_clock_mhz

    def clock_at(self, host_ns: int) -> tuple[int, int]:
        """The SM clock (MHz) and clocks-event reasons at simulated host time ``host_ns``."""
        if self.clock_script is None:
            return self.sm_clock_mhz, self.reasons
        got = self.clock_script(host_ns)
        return (int(got[0]), int(got[1])) if isinstance(got, tuple) else (int(got), 0)

    def nvmlDeviceGetClockInfo(self, h: Any, kind: int) -> int:  # noqa: N802
        self._count("nvmlDeviceGetClockInfo")
        return self.clock_at(self.sim.host_ns)[0] if kind == self.NVML_CLOCK_SM else self.max_memory_clock_mhz

    def nvmlDeviceGetDefaultApplicationsClock(self, h: Any, kind: int) -> int:  # noqa: N802
        return self.default_sm_clock_mhz if kind == self.NVML_CLOCK_SM else self.max_memory_clock_mhz

    def nvmlDeviceGetEnforcedPowerLimit(self, h: Any) -> int:  # noqa: N802
        return int(self.power_limit_w * 1000)

    def nvmlDeviceGetPersistenceMode(self, h: Any) -> int:  # noqa: N802
        return 1

    def nvmlDeviceGetMigMode(self, h: Any) -> list[int]:  # noqa: N802
        return [0, 0]

    def nvmlDeviceGetEccMode(self, h: Any) -> list[int]:  # noqa: N802
        return [1, 1]

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: Any) -> int:  # noqa: N802
        return 5

    def nvmlDeviceGetCurrPcieLinkWidth(self, h: Any) -> int:  # noqa: N802
        return 16

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: Any) -> int:  # noqa: N802
        self._count("nvmlDeviceGetCurrentClocksEventReasons")
        return self.clock_at(self.sim.host_ns)[1]

    def nvmlDeviceGetTemperature(self, h: Any, sensor: int) -> int:  # noqa: N802
        return self.temperature_c

    def nvmlDeviceGetPowerUsage(self, h: Any) -> int:  # noqa: N802
        return int(self.power_w * 1000)

    def nvmlDeviceGetUtilizationRates(self, h: Any) -> Any:  # noqa: N802
        from types import SimpleNamespace

        return SimpleNamespace(gpu=self.utilization_pct, memory=self.utilization_pct // 2)

    def nvmlDeviceGetComputeRunningProcesses(self, h: Any) -> list[Any]:  # noqa: N802
        from types import SimpleNamespace

        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in self.processes]


_MISSING = object()


class _Patcher:
    """A minimal ``monkeypatch`` for installing the simulator for a whole session
    (``--gpuperf-simulated-cuda``); ``undo`` restores every attribute."""

    def __init__(self) -> None:
        self._saved: list[tuple[Any, str, Any]] = []

    def setattr(self, target: Any, name: str, value: Any) -> None:
        self._saved.append((target, name, getattr(target, name, None)))
        setattr(target, name, value)

    def setitem(self, mapping: Any, key: str, value: Any) -> None:
        self._saved.append((mapping, key, mapping.get(key, _MISSING)))
        mapping[key] = value

    def undo(self) -> None:
        for target, name, value in reversed(self._saved):
            if isinstance(target, dict):
                if value is _MISSING:
                    target.pop(name, None)
                else:
                    target[name] = value
            else:
                setattr(target, name, value)
        self._saved.clear()


def session_args(devices: int) -> list[str]:
    """The pytest arguments that install ``devices`` simulated CUDA devices for a session (and its workers)."""
    from pytest_gpuperf.core.flags import SIMULATED_CUDA

    return ["-p", PLUGIN, f"{SIMULATED_CUDA.name}={devices}"]


def install_devices(raw: Any, source: str) -> tuple["SimulatedCuda", _Patcher] | None:
    """Install a simulator of ``raw`` devices (1-64, a number or its text; empty: None) for a whole session;
    returns ``(simulator, patcher)`` (``patcher.undo()`` uninstalls). Raises ``ValueError`` naming
    ``source`` (the flag or ini value) for another value."""
    raw = str(raw if raw is not None else "").strip()
    if not raw:
        return None
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if not 1 <= n <= MAX_DEVICES:
        raise ValueError(f"{source}={raw!r}: expected a number of simulated CUDA devices, 1 to {MAX_DEVICES}")
    patcher = _Patcher()
    sim = SimulatedCuda(devices=n).install(patcher)
    return sim, patcher


# ----------------------------------------------------------------------------- the pytest plugin (-p pytest_gpuperf.testing)


def pytest_addoption(parser: Any) -> None:
    from pytest_gpuperf.core.flags import SIMULATED_CUDA

    parser.getgroup("gpuperf").addoption(SIMULATED_CUDA.name, **SIMULATED_CUDA.kwargs())
    parser.addini("gpuperf_simulated_cuda", "number of simulated CUDA devices (1-64) installed for the session "
                  "(pytest_gpuperf.testing)", default="")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: Any) -> None:
    """Install the simulator before the plugin's own ``pytest_configure`` resolves the session's devices."""
    from pytest_gpuperf.core.flags import SIMULATED_CUDA

    flag = config.getoption(SIMULATED_CUDA.name)
    raw, source = (flag, SIMULATED_CUDA.name) if flag is not None else (config.getini("gpuperf_simulated_cuda"),
                                                                        "gpuperf_simulated_cuda")
    try:
        installed = install_devices(raw, source)
    except ValueError as exc:
        raise pytest.UsageError(f"pytest-gpuperf: {exc}") from None
    if installed is not None:
        config.add_cleanup(installed[1].undo)
