"""Machine state while benchmarks run: NVML telemetry on GPUs, frequency and load on CPUs.

Every NVML call is optional and guarded: no ``pynvml`` module, no driver, an NVML error or a call
a driver does not support leaves the corresponding field ``None`` and never raises. NVML comes
from the ``nvidia-ml-py`` distribution (``import pynvml``).

* :func:`gpu_info` — static facts of a GPU at session start (name, UUID, driver and CUDA driver
  versions, compute capability, memory size, max clocks, power limit, persistence and MIG mode,
  ECC, PCIe generation and width); the environment adds SM count and L2 size from torch.
* :class:`Sampler` — a bounded background thread reading, every ~20 ms, the SM clock, the
  clocks-event (throttle) reasons, temperature, power and utilization while a benchmark runs.
* :func:`summarize` — reduces the samples to what a result keeps (``BenchResult.telemetry``).
* :func:`throttle_verdict` — whether a run was throttled enough to make a regression verdict
  inconclusive (nvbench discards samples under 75% of the default clock; we do the same test on
  the share of samples).
* :func:`cpu_info` — CPU model, frequency governor, current/max frequency, load average.
* :class:`CpuSampler` — the CPU backend's telemetry, including the **host load**: the CPU time
  other processes (and the hypervisor, as steal time) took while a benchmark ran, from
  ``/proc/stat`` minus this process's own CPU time; :func:`throttle_verdict` calls a run with more
  than :data:`~pytest_gpuperf.verdict.machine.HOST_BUSY_CORES` of other load "host busy".
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from pytest_gpuperf.verdict.machine import GPU_IDLE, LOW_CLOCK_FRACTION, REASONS, THROTTLE_REASONS

#: Sampling interval of the background sampler (s).
SAMPLE_INTERVAL_S = 0.02
#: The sampler keeps at most this many samples (older ones are thinned away by halving).
MAX_SAMPLES = 50_000
#: Host load is only measured over at least this long a run (s): /proc/stat counts in clock ticks
#: (usually 10 ms), too coarse for shorter runs.
HOST_LOAD_MIN_S = 0.5


def _nvml() -> Any | None:
    """The initialised ``pynvml`` module, or None when NVML is unusable here."""
    try:
        import pynvml
    except Exception:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:
        return None
    return pynvml


def _call(fn: Callable[[], Any]) -> Any:
    try:
        v = fn()
    except Exception:
        return None
    return v.decode() if isinstance(v, bytes) else v


def nvml_status() -> str | None:
    """None when NVML works, else a one-line reason (for the summary)."""
    try:
        import pynvml
    except Exception:
        return "NVML unavailable: the pynvml module (nvidia-ml-py) is not installed; GPU telemetry is off"
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        return f"NVML unavailable ({type(exc).__name__}: {exc}); GPU telemetry is off"
    return None


def nvml_uuid(uuid: Any) -> str | None:
    """NVML's form of a CUDA device's UUID (``torch.cuda.get_device_properties(i).uuid``):
    ``"GPU-58d5a7e1-..."`` (a MIG instance's ``"MIG-..."`` kept as it is); None when unknown."""
    text = str(uuid or "").strip()
    if not text or text.strip("0-") == "":
        return None
    return text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}"


def handle_for(index: int) -> Any | None:
    """The NVML handle of CUDA device ``index``, or None.

    CUDA's index is not NVML's: ``CUDA_VISIBLE_DEVICES`` renumbers the GPUs a process sees (and
    CUDA orders them fastest first by default, NVML by PCI bus). So the handle comes by the
    device's UUID (``props.uuid``, exact, MIG instances included), else by its PCI bus id, and only
    where torch can tell neither (a CPU build) by the index."""
    nv = _nvml()
    if nv is None:
        return None
    uuid = bus_id = None
    try:
        import torch

        props = torch.cuda.get_device_properties(index)
    except Exception:
        props = None
    if props is not None:
        uuid = nvml_uuid(getattr(props, "uuid", None))
        try:
            bus_id = "{:08X}:{:02X}:{:02X}.0".format(
                getattr(props, "pci_domain_id", 0), props.pci_bus_id, props.pci_device_id)
        except Exception:
            bus_id = None
    if uuid is not None and hasattr(nv, "nvmlDeviceGetHandleByUUID"):
        h = _call(lambda: nv.nvmlDeviceGetHandleByUUID(uuid))
        if h is not None:
            return h
    if bus_id is not None:
        h = _call(lambda: nv.nvmlDeviceGetHandleByPciBusId(bus_id))
        if h is not None:
            return h
    return _call(lambda: nv.nvmlDeviceGetHandleByIndex(index))


def gpu_info(handle: Any) -> dict[str, Any] | None:
    """Static facts of a GPU (None without NVML). Sizes in bytes, clocks in MHz, power in W."""
    nv = _nvml()
    if nv is None or handle is None:
        return None
    cc = _call(lambda: nv.nvmlDeviceGetCudaComputeCapability(handle))
    mem = _call(lambda: nv.nvmlDeviceGetMemoryInfo(handle))
    limit_mw = _call(lambda: nv.nvmlDeviceGetEnforcedPowerLimit(handle))
    ecc = _call(lambda: nv.nvmlDeviceGetEccMode(handle))
    mig = _call(lambda: nv.nvmlDeviceGetMigMode(handle))
    cuda_drv = _call(nv.nvmlSystemGetCudaDriverVersion)
    return {
        "name": _call(lambda: nv.nvmlDeviceGetName(handle)),
        "uuid": _call(lambda: nv.nvmlDeviceGetUUID(handle)),
        "driver_version": _call(nv.nvmlSystemGetDriverVersion),
        "cuda_driver_version": f"{cuda_drv // 1000}.{cuda_drv % 1000 // 10}" if isinstance(cuda_drv, int) else None,
        "compute_capability": f"{cc[0]}.{cc[1]}" if cc else None,
        "memory_total_bytes": getattr(mem, "total", None),
        "max_sm_clock_mhz": _call(lambda: nv.nvmlDeviceGetMaxClockInfo(handle, nv.NVML_CLOCK_SM)),
        "max_memory_clock_mhz": _call(lambda: nv.nvmlDeviceGetMaxClockInfo(handle, nv.NVML_CLOCK_MEM)),
        "power_limit_w": limit_mw / 1000.0 if isinstance(limit_mw, (int, float)) else None,
        "persistence_mode": _call(lambda: nv.nvmlDeviceGetPersistenceMode(handle)),
        "mig_mode": mig[0] if isinstance(mig, (list, tuple)) else mig,
        "ecc_mode": ecc[0] if isinstance(ecc, (list, tuple)) else ecc,
        "pcie_generation": _call(lambda: nv.nvmlDeviceGetCurrPcieLinkGeneration(handle)),
        "pcie_width": _call(lambda: nv.nvmlDeviceGetCurrPcieLinkWidth(handle)),
    }


def own_pids(status: str | None = None) -> set[int]:
    """This process's PIDs: ``os.getpid()`` and every PID of the ``NSpid:`` line of
    ``/proc/self/status`` (``status``: its text, for tests) — its PID in each nested PID namespace
    that this procfs can see."""
    pids = {os.getpid()}
    text = _read("/proc/self/status") if status is None else status
    for line in (text or "").splitlines():
        if line.startswith("NSpid:"):
            pids.update(int(v) for v in line.split()[1:] if v.isdigit())
    return pids


#: Environment variables that mark a worker process of this test session (pytest-xdist, an A/B
#: side, a rank that torchrun started): its parent and siblings are the same session, not other users.
#: torchrun sets it in every rank's environment (torch.distributed.elastic).
TORCHRUN_ENV = "TORCHELASTIC_RUN_ID"
WORKER_ENV = ("PYTEST_XDIST_WORKER", "GPUPERF_AB_WORKER", TORCHRUN_ENV)
#: The argument that marks a process replicate (``plugin.replicates.ROLE_OPTION``; named here, below the plugin layer).
WORKER_ARG = "--gpuperf-role"


def _stat_fields(pid: int, proc: str = "/proc") -> list[str]:
    """The fields of ``/proc/PID/stat`` after the command name (field 3, the state, first); empty
    when the process is gone or the file unreadable."""
    text = _read(f"{proc}/{pid}/stat")
    return text.rsplit(")", 1)[1].split() if text and ")" in text else []


def _ppid(pid: int, proc: str = "/proc") -> int | None:
    fields = _stat_fields(pid, proc)
    return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else None


def session_pids(environ: Any = None, proc: str = "/proc", argv: Sequence[str] | None = None) -> set[int]:
    """The PIDs of this test session as seen from this process: its own (:func:`own_pids`), its
    children (A/B and replicate workers) and, in a worker process (:data:`WORKER_ENV`, or ``argv``
    holding :data:`WORKER_ARG`), its parent
    and the parent's other children (sibling pytest-xdist or A/B workers). Their use of the GPU is
    the session's own, not a disturbance (Linux ``/proc``; elsewhere only :func:`own_pids`)."""
    env = os.environ if environ is None else environ
    pids = own_pids()
    me = os.getpid()
    worker = any(env.get(k) for k in WORKER_ENV) or any(
        a.startswith(WORKER_ARG) for a in (sys.argv if argv is None else argv))
    parent = _ppid(me, proc) if worker else None
    try:
        entries = [int(p.name) for p in Path(proc).iterdir() if p.name.isdigit()]
    except OSError:
        return pids
    for pid in entries:
        pp = _ppid(pid, proc)
        if pp == me or (parent is not None and pp == parent):
            pids.add(pid)
    if parent is not None:
        pids.add(parent)
    return pids


def other_processes(handle: Any, own_pid: int | None = None,
                    visible: Callable[[int], bool] | None = None) -> list[dict[str, Any]] | None:
    """Other compute processes on the GPU: ``[{"pid", "used_memory_bytes"}]`` (None without NVML).

    This process and the rest of its test session are recognised by :func:`session_pids`
    (``own_pid`` replaces them, for tests): sibling pytest-xdist workers and the A/B or replicate
    workers use the GPU too, and are not "other" processes. NVML
    reports PIDs of the host's PID namespace; in a container none of them is this process's PID
    and none exists under this namespace's ``/proc`` (``visible(pid)``, default: ``/proc/<pid>``
    exists). Then this process is among them and cannot be told apart: every entry gets
    ``"foreign_pid_namespace": True`` and callers should count one fewer other process.
    """
    nv = _nvml()
    if nv is None or handle is None:
        return None
    procs = _call(lambda: nv.nvmlDeviceGetComputeRunningProcesses(handle))
    if procs is None:
        return None
    own = session_pids() if own_pid is None else {own_pid}
    listed = [{"pid": getattr(p, "pid", None), "used_memory_bytes": getattr(p, "usedGpuMemory", None)} for p in procs]
    others = [p for p in listed if p["pid"] not in own]
    seen = visible or (lambda pid: Path(f"/proc/{pid}").exists())
    if others and len(others) == len(listed) and not any(seen(p["pid"]) for p in others if p["pid"] is not None):
        for p in others:
            p["foreign_pid_namespace"] = True
    return others


def other_processes_warning(others: list[dict[str, Any]] | None, device: Any) -> str | None:
    """The summary warning for :func:`other_processes`' result on ``device`` (None: nothing to say)."""
    if not others:
        return None
    from pytest_gpuperf.core.units import format_bytes

    foreign = all(p.get("foreign_pid_namespace") for p in others)
    n = len(others) - (1 if foreign else 0)
    if n < 1:
        return None
    mem = format_bytes(sum(p["used_memory_bytes"] or 0 for p in others))
    pids = ", ".join(str(p["pid"]) for p in others)
    if foreign:
        return (f"{n} other compute process(es) on {device}: timings may be disturbed ({n + 1} processes using "
                f"{mem}, this one among them; pids {pids} are of another PID namespace, so this process "
                f"cannot be told apart)")
    return f"{n} other compute process(es) on {device} using {mem}: timings may be disturbed (pids {pids})"


def _reasons_reader(nv: Any, handle: Any) -> Callable[[], int | None]:
    """``nvmlDeviceGetCurrentClocksEventReasons``, falling back to the older throttle-reasons call."""
    new = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
    old = getattr(nv, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
    state = {"fn": new if new is not None else old}  # an old nvidia-ml-py has only the older call

    def read() -> int | None:
        fn = state["fn"]
        if fn is not None:
            try:
                return int(fn(handle))
            except Exception:
                state["fn"] = None if fn is old else old  # an old driver: try the older call once
                fn = state["fn"]
                if fn is None:
                    return None
                try:
                    return int(fn(handle))
                except Exception:
                    state["fn"] = None
        return None

    return read


@dataclass
class Sampler:
    """Background NVML sampler: ``with Sampler(handle) as s: run(); s.samples``.

    A daemon thread reads every ``interval_s`` (default 20 ms) and keeps at most
    :data:`MAX_SAMPLES` samples; it stops cleanly on exit even when the block raised, and an
    exception inside the thread ends sampling (recorded in ``error``) without affecting the
    benchmark. Each sample: ``t``, ``sm_clock_mhz``, ``reasons`` (bitmask), ``temperature_c``,
    ``power_w``, ``gpu_util_pct``, ``memory_util_pct`` (any may be None).
    """

    handle: Any
    interval_s: float = SAMPLE_INTERVAL_S
    samples: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _read(self, nv: Any, reasons: Callable[[], int | None]) -> dict[str, Any]:
        h = self.handle
        util = _call(lambda: nv.nvmlDeviceGetUtilizationRates(h))
        power = _call(lambda: nv.nvmlDeviceGetPowerUsage(h))
        return {
            "t": time.monotonic(),
            "sm_clock_mhz": _call(lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)),
            "reasons": reasons(),
            "temperature_c": _call(lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)),
            "power_w": power / 1000.0 if isinstance(power, (int, float)) else None,
            "gpu_util_pct": getattr(util, "gpu", None),
            "memory_util_pct": getattr(util, "memory", None),
        }

    def _run(self, nv: Any) -> None:
        reasons = _reasons_reader(nv, self.handle)
        try:
            while not self._stop.is_set():
                self.samples.append(self._read(nv, reasons))
                if len(self.samples) >= MAX_SAMPLES:
                    del self.samples[::2]  # bounded: thin by half, keep the time span
                self._stop.wait(self.interval_s)
        except Exception as exc:  # the sampler must never take the benchmark down
            self.error = f"{type(exc).__name__}: {exc}"

    def __enter__(self) -> "Sampler":
        nv = _nvml()
        if nv is not None and self.handle is not None:
            self._thread = threading.Thread(target=self._run, args=(nv,), name="gpuperf-nvml", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
            self._thread = None


def summarize(samples: list[dict[str, Any]], max_sm_clock_mhz: float | None) -> dict[str, Any] | None:
    """Reduce sampler output to a result's ``telemetry`` (None when there are no samples).

    Keys: ``samples``, ``sm_clock_min_mhz``, ``sm_clock_median_mhz``, ``sm_clock_pct_of_max``
    (median / max), ``low_clock_share`` (share of the samples *not* flagged "GPU idle" that were
    under 75% of max; None when every sample was idle), ``reasons`` (reason
    name -> share of samples it was active), ``gpu_util_mean_pct``, ``memory_util_mean_pct``,
    ``temperature_max_c``, ``power_mean_w``. Pure.
    """
    if not samples:
        return None

    def vals(key: str) -> list[float]:
        return [s[key] for s in samples if isinstance(s.get(key), (int, float))]

    clocks = vals("sm_clock_mhz")
    # the low-clock rule looks at busy samples only: an idle GPU (clocks-event reason "GPU idle")
    # clocks down by design, and a data- or host-bound benchmark leaves it idle between kernels
    busy_clocks = [s["sm_clock_mhz"] for s in samples if isinstance(s.get("sm_clock_mhz"), (int, float))
                   and not (isinstance(s.get("reasons"), int) and s["reasons"] & GPU_IDLE)]
    n = len(samples)
    reason_share: dict[str, float] = {}
    with_reasons = [s["reasons"] for s in samples if isinstance(s.get("reasons"), int)]
    for bit, name in REASONS.items():
        share = sum(1 for r in with_reasons if r & bit) / len(with_reasons) if with_reasons else 0.0
        if share > 0:
            reason_share[name] = share
    mean = lambda xs: sum(xs) / len(xs) if xs else None  # noqa: E731
    med_clock = statistics.median(clocks) if clocks else None
    return {
        "samples": n,
        "sm_clock_min_mhz": min(clocks) if clocks else None,
        "sm_clock_median_mhz": med_clock,
        "sm_clock_pct_of_max": (100.0 * med_clock / max_sm_clock_mhz) if med_clock and max_sm_clock_mhz else None,
        "low_clock_share": (
            sum(1 for c in busy_clocks if c < LOW_CLOCK_FRACTION * max_sm_clock_mhz) / len(busy_clocks)
            if busy_clocks and max_sm_clock_mhz else None
        ),
        "reasons": reason_share,
        "throttle_share": (
            sum(1 for r in with_reasons if any(r & b for b in THROTTLE_REASONS)) / len(with_reasons)
            if with_reasons else None
        ),
        "gpu_util_mean_pct": mean(vals("gpu_util_pct")),
        "memory_util_mean_pct": mean(vals("memory_util_pct")),
        "temperature_max_c": max(vals("temperature_c")) if vals("temperature_c") else None,
        "power_mean_w": mean(vals("power_w")),
    }


# ----------------------------------------------------------------------------- CPU


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def cpu_info() -> dict[str, Any]:
    """CPU facts where readable (Linux sysfs/procfs), else None fields.

    Keys: ``governor``, ``cur_freq_mhz``, ``max_freq_mhz``, ``load_average`` (1, 5, 15 min).
    """
    gov = _read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")
    cur = _read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq")
    mx = _read("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
    if cur is None:
        for line in (_read("/proc/cpuinfo") or "").splitlines():
            if line.lower().startswith("cpu mhz"):
                cur = str(float(line.split(":", 1)[1]) * 1000)
                break
    try:
        load = list(os.getloadavg())
    except OSError:
        load = None
    return {
        "governor": gov,
        "cur_freq_mhz": float(cur) / 1000.0 if cur else None,
        "max_freq_mhz": float(mx) / 1000.0 if mx else None,
        "load_average": load,
    }


def proc_stat_busy_s(text: str | None = None, cpus: set[int] | None = None) -> tuple[float, float] | None:
    """``(busy_s, steal_s)``: CPU time since boot (s) of the CPUs this process may run on, from the
    ``cpuN`` lines of ``/proc/stat`` (``text``: its content, for tests; ``cpus``: the CPU numbers,
    default the process's affinity mask; the aggregate ``cpu`` line where no mask is known).
    Busy = user + nice + system + irq + softirq + steal (guest time is already inside user); idle
    and iowait are not busy. None where ``/proc/stat`` is missing or unreadable (not Linux)."""
    if text is None:
        text = _read("/proc/stat")
    if not text:
        return None
    if cpus is None:
        try:
            cpus = set(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            cpus = None
    hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    busy = steal = 0
    found = False
    for line in text.splitlines():
        f = line.split()
        if not f or not f[0].startswith("cpu") or len(f) < 8:
            continue
        name = f[0][3:]
        if (cpus is None and name != "") or (cpus is not None and (not name.isdigit() or int(name) not in cpus)):
            continue
        try:
            user, nice, system, _idle, _iowait, irq, softirq = (int(v) for v in f[1:8])
            st = int(f[8]) if len(f) > 8 else 0
        except ValueError:
            return None
        busy += user + nice + system + irq + softirq + st
        steal += st
        found = True
    return (busy / hz, steal / hz) if found else None


def own_cpu_s() -> float:
    """CPU time of this process, all its threads, user + system (s)."""
    t = os.times()
    return t.user + t.system


def process_cpu_s(pid: int, proc: str = "/proc") -> float | None:
    """CPU time of process ``pid``, user + system (s), from ``/proc/PID/stat`` (fields 14 and 15,
    in clock ticks); None when it is gone or unreadable."""
    fields = _stat_fields(pid, proc)
    try:
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (IndexError, ValueError, OSError):
        return None


def job_cpu_reader(environ: Any = None, proc: str = "/proc") -> Callable[[], float]:
    """What :class:`HostLoadMeter` subtracts as this job's own CPU time (s): this process's
    (:func:`own_cpu_s`), plus, under ``torchrun`` (``TORCHELASTIC_RUN_ID`` set), that of the other
    processes of the launch on this node (the launcher's other ranks, found once as in
    :func:`session_pids`): on the CPU the ranks share the cores, and a rank computing beside this one
    is the benchmark's own load, not another user's. Outside torchrun: :func:`own_cpu_s` itself."""
    env = os.environ if environ is None else environ
    if not env.get(TORCHRUN_ENV):
        return own_cpu_s
    others = sorted(session_pids(env, proc) - own_pids())

    def job_cpu_s() -> float:
        return own_cpu_s() + sum(process_cpu_s(pid, proc) or 0.0 for pid in others)

    return job_cpu_s


class ProcessLoad:
    """The timed spans of every benchmark this process measured so far, added up (s): ``wall_s``,
    ``other_s`` (other processes' busy CPU time on this process's cores) and ``steal_s``. A
    benchmark that stops early (a few rounds of a short call) times too little for ``/proc/stat``'s
    clock ticks on its own (:data:`HOST_LOAD_MIN_S`); its host load is then this process's over
    all its timed spans so far (a neighbour that runs for minutes shows there). Measured on this
    project's 2-core VM with one core kept busy (issue 45): in an A/A run of a real 64-benchmark
    suite only 8 were found busy; 9 of the first 10 had timed 14-51 ms in their first worker and
    read no host load at all."""

    def __init__(self) -> None:
        self.wall_s = self.other_s = self.steal_s = 0.0

    def add(self, wall_s: float, other_s: float, steal_s: float) -> None:
        self.wall_s += wall_s
        self.other_s += other_s
        self.steal_s += steal_s

    def summary(self) -> dict[str, Any]:
        """``other_cpu_cores``/``steal_cpu_cores`` over the spans so far, with ``host_load_scope``
        ``"process"``; empty under :data:`HOST_LOAD_MIN_S` in all."""
        if self.wall_s < HOST_LOAD_MIN_S:
            return {}
        return {"other_cpu_cores": round(max(0.0, self.other_s) / self.wall_s, 3),
                "steal_cpu_cores": round(max(0.0, self.steal_s) / self.wall_s, 3), "cpu_count": _cpu_count(),
                "host_load_scope": "process"}


#: This process's :class:`ProcessLoad` (the meters of :func:`sampler_for` and of the CPU measurer add to it).
PROCESS_LOAD = ProcessLoad()


class HostLoadMeter:
    """Other processes' CPU load over one or more measured spans (CPU backend).

    ``with meter.span(): ...`` around each span; :meth:`summary` gives ``other_cpu_cores`` (the
    busy CPU time of the cores this process may run on, :func:`proc_stat_busy_s`, minus this
    process's own, :func:`own_cpu_s`, per second of the spans together), ``steal_cpu_cores`` (the
    hypervisor's share of it) and ``cpu_count``; an empty dict for spans shorter than
    :data:`HOST_LOAD_MIN_S` in all or where ``/proc/stat`` is unreadable. ``fixed_cores`` replaces
    the measurement with that figure (scripted measurers: a verdict on scripted timings must not
    depend on the machine the tests run on). ``stat``/``own``/``clock`` are injectable readers (tests).
    ``process``: a :class:`ProcessLoad` its spans are added to, whose figure :meth:`summary` gives
    when its own spans are too short (None: none).
    """

    def __init__(self, *, fixed_cores: float | None = None,
                 stat: Callable[[], tuple[float, float] | None] = proc_stat_busy_s,
                 own: Callable[[], float] = own_cpu_s, clock: Callable[[], float] = time.perf_counter,
                 process: ProcessLoad | None = None) -> None:
        self.fixed_cores = fixed_cores
        self._stat, self._own, self._clock = stat, own, clock
        self.wall_s = self.other_s = self.steal_s = 0.0
        self.failed = False
        self.process = process

    @contextlib.contextmanager
    def span(self) -> Iterator[None]:
        if self.fixed_cores is not None:
            yield
            return
        t0, stat0, own0 = self._clock(), self._stat(), self._own()
        try:
            yield
        finally:
            wall, stat1, own1 = self._clock() - t0, self._stat(), self._own()
            if stat0 is None or stat1 is None:
                self.failed = True
            else:
                other, steal = (stat1[0] - stat0[0]) - (own1 - own0), stat1[1] - stat0[1]
                self.wall_s += wall
                self.other_s += other
                self.steal_s += steal
                if self.process is not None:
                    self.process.add(wall, other, steal)

    def spans(self) -> dict[str, float]:
        """The raw totals, ``{"host_wall_s": ..., "host_other_s": ...}`` (s; empty with a fixed figure
        or an unreadable ``/proc/stat``), kept even for spans too short to count, so that the spans of
        several worker processes can be pooled (:func:`pooled_host_load`)."""
        if self.fixed_cores is not None or self.failed or self.wall_s <= 0:
            return {}
        return {"host_wall_s": round(self.wall_s, 4), "host_other_s": round(max(0.0, self.other_s), 4)}

    def summary(self) -> dict[str, Any]:
        if self.fixed_cores is not None:
            return {"other_cpu_cores": float(self.fixed_cores), "steal_cpu_cores": 0.0, "cpu_count": _cpu_count()}
        if self.failed:
            return {}
        if self.wall_s < HOST_LOAD_MIN_S:
            return self.process.summary() if self.process is not None else {}
        return {"other_cpu_cores": round(max(0.0, self.other_s) / self.wall_s, 3),
                "steal_cpu_cores": round(max(0.0, self.steal_s) / self.wall_s, 3), "cpu_count": _cpu_count()}


class CpuSampler:
    """The CPU backend's per-benchmark telemetry: frequency and load average read at the end of
    the run, and, with a ``meter`` (:class:`HostLoadMeter`; :func:`sampler_for` gives it one), the
    host load during it: the summary's ``other_cpu_cores``, ``steal_cpu_cores``, ``cpu_count``.
    """

    def __init__(self, meter: HostLoadMeter | None = None) -> None:
        self.samples: list[dict[str, Any]] = []
        self.error: str | None = None
        self.meter = meter
        self._span: Any = None

    def __enter__(self) -> "CpuSampler":
        if self.meter is not None:
            self._span = self.meter.span()
            self._span.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.samples.append(cpu_info())
        if self._span is not None:
            self._span.__exit__(None, None, None)
            self._span = None

    def summary(self) -> dict[str, Any] | None:
        if not self.samples:
            return None
        last = self.samples[-1]
        load = {**self.meter.spans(), **self.meter.summary()} if self.meter is not None else {}
        return {"cur_freq_mhz": last.get("cur_freq_mhz"), "load_average": last.get("load_average"), **load}


def pooled_host_load(telemetries: list[dict[str, Any] | None]) -> float | None:
    """Other processes' CPU load (cores) over the timed spans of several worker processes together:
    the sum of their ``host_other_s`` over the sum of their ``host_wall_s``, when those add up to
    :data:`HOST_LOAD_MIN_S` (each worker alone may time less); else the highest ``other_cpu_cores``
    any reported (None when none did). Pure."""
    wall = sum(float(t.get("host_wall_s") or 0.0) for t in telemetries if t)
    other = sum(float(t.get("host_other_s") or 0.0) for t in telemetries if t)
    if wall >= HOST_LOAD_MIN_S:
        return round(other / wall, 3)
    loads = [t.get("other_cpu_cores") for t in telemetries if t]
    loads = [v for v in loads if isinstance(v, (int, float))]
    return max(loads) if loads else None


def _cpu_count() -> int | None:
    """Cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count()


class GpuSampler(Sampler):
    """:class:`Sampler` plus its summary against the device's maximum SM clock."""

    max_sm_clock_mhz: float | None = None

    def summary(self) -> dict[str, Any] | None:
        out = summarize(self.samples, self.max_sm_clock_mhz)
        if self.error:
            out = dict(out or {"samples": 0}, sampler_error=self.error)
        return out


def sampler_for(device: Any) -> Any:
    """A context manager sampling the machine while a benchmark runs on ``device``.

    CUDA: an NVML :class:`GpuSampler` (summary None without NVML); CPU: a :class:`CpuSampler`.
    Its ``summary()`` after the block is the result's ``telemetry``.
    """
    if getattr(device, "type", "cpu") != "cuda":
        return CpuSampler(HostLoadMeter(own=job_cpu_reader(), process=PROCESS_LOAD))
    index = device.index or 0
    handle = handle_for(index)
    s = GpuSampler(handle)
    info = gpu_info(handle) if handle is not None else None
    s.max_sm_clock_mhz = (info or {}).get("max_sm_clock_mhz")
    return s
