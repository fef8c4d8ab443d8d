"""The op profile of a benchmark, for the per-op diff of "why it got slower" (issue 32).

:func:`profile_ops` profiles ``cycles`` cycles of ``calls`` calls each with ``torch.profiler``
(the activities the bottleneck classification uses: CPU ops, and on CUDA kernels, copies and
runtime calls), one profiler cycle per :class:`~pytest_gpuperf.verdict.opdiff.OpSample`, each
after one discarded warm-up call (``torch.profiler.schedule(wait=0, warmup=1, active=1,
repeat=cycles)``). Per cycle: every op's self CPU time and count from torch's own
``key_averages()`` (public API; the profiler's parent/child tree, so ops on the autograd thread
count right), the same tree folded to the top-level ops (:func:`fold_tree`: each one's total
time, and the self time of each op inside it, from the events' ``cpu_parent``), on CUDA each
kernel's device time by kernel and launching op (:func:`pytest_gpuperf.verdict.opdiff.kernel_times`) and the GPU's idle time between kernels
(:func:`pytest_gpuperf.verdict.bottleneck.analyze`), the whole call's and each phase's time from
the ``gpuperf::region`` and ``gpuperf::phase::*`` annotations. Runs outside the timed rounds;
imports torch lazily.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Any, Callable

from pytest_gpuperf.verdict.bottleneck import FINAL_SYNC_NAME, PHASE_PREFIX, REGION_NAME
from pytest_gpuperf.verdict.opdiff import INSIDE, OpSample, kernel_times

#: Cycles per process and the profiled time per cycle the A/B profile aims at (ms).
CYCLES = 6
CYCLE_MS = 20.0


#: Fewest cycles a process profiles (:func:`cycles_for`): the diff's CI needs more than one.
MIN_CYCLES = 2
#: The budget of one benchmark's op profile in one process (:func:`cycles_for`; issue 45): its
#: profiled calls, each cycle's warm-up step included, take at most this long (ms) ...
PROFILE_BUDGET_MS = 4000.0
#: ... and record at most this many ops (aten ops a call x calls x cycles): torch's profiler spent
#: about 0.3 ms of its own on each recorded op, most of it reading a cycle (``key_averages``): 2
#: cycles of a 134 ms call of 20,000 ``torch.add`` took 23 s on this project's 2-core VM, and a call
#: of 430k ops (ml4gw's waveform generator) took 8 minutes to profile.
PROFILE_BUDGET_OPS = 20_000


def cycles_for(median_ms: float, calls: int, ops: int | None = None, processes: int = 1) -> int:
    """Cycles one of ``processes`` processes profiles of a call of ``median_ms`` (ms) and ``ops``
    aten ops (None: unknown) in cycles of ``calls`` calls. The profile's :data:`CYCLES` and its
    budget are shared by the ``processes`` processes whose cycles are pooled (an update's two
    extras processes: issue 45, where on tensordict's suite those two took 69 s of a 165 s update,
    most of it profiling): each profiles at most ``ceil(CYCLES / processes)``, as many as fit its
    share of :data:`PROFILE_BUDGET_MS` (``calls + 1`` calls a cycle) and of
    :data:`PROFILE_BUDGET_OPS` (``calls * ops`` a cycle); 0 (no profile) when fewer than
    ``ceil(MIN_CYCLES / processes)`` fit. In one process: short calls of a few hundred ops get all
    :data:`CYCLES`; a 1 s call 2; a 3 s call, or one of 10k ops, none."""
    n = max(1, int(processes))
    fit = -(-CYCLES // n)
    if median_ms and median_ms > 0:
        fit = min(fit, int(PROFILE_BUDGET_MS / n / ((max(1, calls) + 1) * median_ms)))
    if ops:
        fit = min(fit, int(PROFILE_BUDGET_OPS / n / (max(1, calls) * ops)))
    return fit if fit >= -(-MIN_CYCLES // n) else 0


def calls_per_cycle(median_ms: float) -> int:
    """Calls per profiled cycle: about :data:`CYCLE_MS` worth, between 1 and 20."""
    if not median_ms or median_ms <= 0:
        return 3
    return max(1, min(20, int(CYCLE_MS / median_ms)))


def _self_cpu_us(e: Any) -> float:
    return float(getattr(e, "self_cpu_time_total", 0.0) or 0.0)


def _cpu_us(e: Any) -> float:
    return float(getattr(e, "cpu_time_total", 0.0) or 0.0)


def _annotation(name: str) -> bool:
    return name.startswith(("gpuperf::", "ProfilerStep")) or name == FINAL_SYNC_NAME


def fold_tree(events: Any, calls: int) -> tuple[dict[str, float], dict[str, float]]:
    """The profiler's CPU event tree folded to the top-level ops (:attr:`OpSample.tree_ms` and
    ``tree_counts``, per call of ``calls``): a top-level op is one whose ``cpu_parent`` chain reaches
    no other op (none, or a ``gpuperf::``/``ProfilerStep`` annotation); key ``op`` gets its
    ``cpu_time_total`` (µs in torch, ms here), key ``op > inner`` the ``self_cpu_time_total`` of
    every event named ``inner`` under it at any depth (``op > op`` its own). ``events``: torch's
    ``FunctionEvent`` list (``prof.events()``); non-CPU events (kernels) are left out."""
    calls = max(1, calls)
    tree: dict[str, float] = {}
    seen: dict[str, int] = {}

    def add(key: str, us: float) -> None:
        tree[key] = tree.get(key, 0.0) + us / 1e3 / calls
        seen[key] = seen.get(key, 0) + 1

    for e in events or ():
        name = str(e.name)
        if getattr(getattr(e, "device_type", None), "name", "CPU") != "CPU" or _annotation(name):
            continue
        top, up = e, getattr(e, "cpu_parent", None)
        while up is not None and not _annotation(str(up.name)):
            top, up = up, getattr(up, "cpu_parent", None)
        if top is e:
            add(name, _cpu_us(e))
        add(f"{top.name}{INSIDE}{name}", _self_cpu_us(e))
    return tree, {k: n / calls for k, n in seen.items()}  # counted whole, then per call: 20/20 is 1


def sample_from(prof: Any, calls: int, cuda: bool, process: int = 0) -> OpSample:
    """One :class:`OpSample` from a finished profiler cycle of ``calls`` calls (times per call, ms)."""
    from pytest_gpuperf.measure.trace import to_trace_events
    from pytest_gpuperf.verdict.bottleneck import analyze

    calls = max(1, calls)
    self_ms: dict[str, float] = {}
    counts: dict[str, float] = {}
    phases: dict[str, float] = {}
    total = 0.0
    for e in prof.key_averages():
        name = str(e.key)
        if name == REGION_NAME:
            total = _cpu_us(e) / 1e3 / calls
        elif name.startswith(PHASE_PREFIX):
            phases[name[len(PHASE_PREFIX):]] = _cpu_us(e) / 1e3 / calls
        elif name.startswith("gpuperf::") or name.startswith("ProfilerStep") or name == FINAL_SYNC_NAME:
            continue
        elif _self_cpu_us(e) > 0 or int(getattr(e, "count", 0) or 0) > 0:
            if getattr(getattr(e, "device_type", None), "name", "CPU") != "CPU":
                continue  # kernels: by kernel_times below
            self_ms[name] = self_ms.get(name, 0.0) + _self_cpu_us(e) / 1e3 / calls
            counts[name] = counts.get(name, 0.0) + int(getattr(e, "count", 0) or 0) / calls
    idle = None
    if cuda:
        events = to_trace_events(prof)
        for key, ms in kernel_times(
                [e for e in events if e.kind != "annotation"], calls).items():
            self_ms[f"kernel: {key}"] = ms
        evidence = analyze(events, device_type="cuda", calls=calls)
        idle = evidence.idle_s * 1e3
        total = total or evidence.wall_s * 1e3
    tree, tree_counts = fold_tree(prof.events(), calls)
    return OpSample(self_ms, counts, total, idle, phases, process, tree, tree_counts)


def profile_ops(fn: Callable[..., Any], args: tuple, kwargs: dict, device: Any, *, cycles: int = CYCLES,
                calls: int = 3, process: int = 0, trace_path: str | None = None) -> list[OpSample]:
    """Profile ``cycles`` cycles of ``calls`` calls of ``fn`` (after the caller's warmup) and return
    one :class:`OpSample` per cycle (see the module doc). ``process`` labels the samples with the
    worker process that took them (the diff's CI groups by it). ``trace_path``: the last cycle's
    chrome trace is written there (Perfetto / chrome://tracing; a trace that cannot be written is
    left out, the samples stand). Raises what ``fn`` or the profiler raise."""
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    from pytest_gpuperf.measure.profiling import _sync
    from pytest_gpuperf.measure.trace import cupti_guard, quiet_kineto, quietly

    cuda = getattr(device, "type", "cpu") == "cuda"
    activities = [ProfilerActivity.CPU]
    if cuda:
        activities.append(ProfilerActivity.CUDA)
        cupti_guard(device)
    samples: list[OpSample] = []

    def ready(p: Any) -> None:
        samples.append(sample_from(p, calls, cuda, process))
        if trace_path and len(samples) == cycles:
            from pytest_gpuperf.measure.profiling import export_trace

            with contextlib.suppress(OSError):
                export_trace(p, trace_path)

    _sync(device)
    with contextlib.ExitStack() as stack:
        # torch 2.11+ warns that a cycle "clears events at the end of each cycle": each cycle is read as it ends
        stack.enter_context(warnings.catch_warnings())
        warnings.filterwarnings("ignore", message="Warning: Profiler clears events", category=UserWarning)
        prof = stack.enter_context(quietly(profile(
            activities=activities, schedule=schedule(wait=0, warmup=1, active=1, repeat=cycles), on_trace_ready=ready)))
        for _ in range(cycles):
            fn(*args, **kwargs)  # the cycle's warm-up step: the profiler's start-up lands here
            _sync(device)
            with quiet_kineto():
                prof.step()
            with record_function(REGION_NAME):
                for _ in range(calls):
                    fn(*args, **kwargs)
                with record_function(FINAL_SYNC_NAME):
                    _sync(device)
            with quiet_kineto():
                prof.step()
    return samples[:cycles]
