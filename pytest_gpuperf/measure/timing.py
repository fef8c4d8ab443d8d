"""Timing backends: CUDA events on the GPU, ``time.perf_counter_ns`` on the CPU.

Both backends share one protocol (after Triton's ``do_bench`` and ``torch.utils.benchmark``):

1. **warmup**: call ``fn`` until ``warmup_time`` seconds have passed and at least
   :data:`MIN_WARMUP_CALLS` calls were made, or on the CPU one call when every call so far took
   :data:`LONG_CALL_S` or more (or ``warmup_calls`` calls when given; with fewer
   than 2 shorter calls, one or two more calls are made to estimate a call's time, and counted as warmup);
   this also lets clocks ramp up and autotuners (cuDNN benchmark, ``torch.compile``) settle.
   On CUDA (:func:`_warmup_cuda`) two lone synchronized calls come first, then calls back to back
   between CUDA event pairs, synchronized once per ~5 ms chunk, so the GPU does not idle between
   short kernels (as in Triton's ``do_bench``);
2. **estimate** one call from the warmup and size a round: calls shorter than the backend's
   minimum round are batched ``calls_per_round`` per timed interval and reported per call. On
   CUDA the estimate is the back-to-back time (events see the device time, or the launch spacing
   when the host is slower), so no extra calls are made for it. A call whose lone synchronized
   wall time is long while events on the current stream see almost none of it runs its work on
   another stream or device (:func:`off_stream`): its rounds are timed by the host clock between
   device-wide synchronizations instead, with a note (:attr:`Timing.notes`);
3. **rounds**: time rounds until ``max_time`` seconds of rounds were spent (at least
   ``min_rounds``, at most ``max_rounds``), stopping early once the 95% CI half-width of the
   median is below ``target_precision`` of the median. Python's GC is disabled meanwhile.
4. **probe** (optional, ``probe=``): a machine-speed probe (:mod:`pytest_gpuperf.measure.probe`) is
   timed with the same clock after every k-th round (and once after a last partial block), k
   sized from the warmup so that the probe takes at most ``PROBE_SHARE`` (10%) of the rounds'
   time; its times are :attr:`Timing.probe_ms`. The probe's time counts against ``max_time``.
   On CUDA the default probe (a 128 MiB copy) evicts the L2, so one untimed call of the benchmark
   follows each probe (unless ``flush_l2`` flushes before every round anyway): no round starts
   colder than the others.

CUDA rounds run on the device the caller made current (:func:`use_device`, which the plugin calls
for the measured device, so a test's ``device="cuda"`` tensors are on it). In CUDA graph mode
the captured calls use what ``setup`` returns (replays reuse those tensors).

torch is imported only inside these functions.
"""

from __future__ import annotations

import gc
import math
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Protocol

from pytest_gpuperf.core.options import BenchOptions
from pytest_gpuperf.measure.gpuclock import RoundClock, steady_clock_warmup
from pytest_gpuperf.verdict.stats import ci_half_width_fraction

#: At least this many warmup calls, whatever ``warmup_time`` says.
MIN_WARMUP_CALLS = 3
#: A call at least this long (s) is warmed up by one call: the floor of :data:`MIN_WARMUP_CALLS`
#: yields once every warmup call made so far took this long (CPU backend; issue 45). Three warmup
#: calls of a 4 s call in each of 3 worker processes cost more than pytest-benchmark's whole run
#: of it (by default no warmup, one calibration call, 5 rounds); what a first call warms
#: (allocations, caches, lazy initialisation) is small beside 0.1 s, and the rounds' median
#: outvotes a round that is still warming.
LONG_CALL_S = 0.1
#: CPU: a timed round lasts at least this long (s). Reading perf_counter_ns took ~61 ns here
#: (2-core EPYC VM, 20 x 200,000 reads); two reads per round are ~0.12% of 100 µs.
CPU_MIN_ROUND_S = 100e-6
#: Under torchrun (a lockstep), the CPU loop asks rank 0 whether to stop about once per this many
#: seconds of rounds (each ask is a broadcast: ~0.4 ms with gloo on a loaded 2-core VM), at most
#: every :data:`LOCKSTEP_MAX_EVERY` rounds; the rounds in between are decided by their count alone.
LOCKSTEP_EVERY_S = 5e-3
LOCKSTEP_MAX_EVERY = 100
#: CUDA: calls shorter than this (s) are batched per event pair (events resolve ~0.5 µs). Each
#: round costs the host an event pair and the loop around it: measured on an H200 (torch 2.11,
#: 2026-11-26), a 2^10-element add timed 10.1 µs per call with 20 µs rounds, 6.8 µs with 2 ms
#: rounds, against 6.4 µs from torch.utils.benchmark's Timer (docs/timing.md, "Accuracy").
CUDA_MIN_ROUND_S = 2e-3
#: CUDA: calls at least this long (s) are timed one per event pair: the host runs ahead of them, so
#: the round's own cost is hidden, and more rounds give more samples.
CUDA_BATCH_BELOW_S = 100e-6
#: CUDA: rounds are recorded in blocks of about this many seconds between synchronizations.
CUDA_BLOCK_S = 0.05
#: CUDA: a call whose synchronized wall time is over this (s) while CUDA events on the current stream
#: see less than :data:`OFF_STREAM_SHARE` of it runs its work on another stream (or device): its rounds
#: are timed by the synchronized wall clock instead of events.
OFF_STREAM_MIN_S = 1e-3
OFF_STREAM_SHARE = 0.1

Setup = Callable[[], Any]
#: A monotonic clock in nanoseconds (default ``time.perf_counter_ns``); tests inject a fake one.
Clock = Callable[[], int]
#: ``progress(rounds_done, elapsed_s, current_median_ms)``, called about every PROGRESS_EVERY_S.
Progress = Callable[[int, float, float], None]
#: Interval of progress reports in verbose mode (s).
PROGRESS_EVERY_S = 1.0


class DeviceUnavailable(RuntimeError):
    """The requested device cannot be used here (the message says why); the test should skip."""


@dataclass(frozen=True)
class CpuClocks:
    """The CPU-time clocks read around every CPU round, beside the wall clock (integer ns each):
    ``thread``, the calling thread's CPU time (``time.thread_time_ns``, ``CLOCK_THREAD_CPUTIME_ID``),
    and ``process``, the whole process's, intra-op threads included (``time.process_time_ns``,
    ``CLOCK_PROCESS_CPUTIME_ID``). CPU time counts only the time the thread (process) ran: a
    neighbour that takes the core away stretches the wall clock, not these (issue 45; measured:
    a 160x160 matmul chain with one core kept busy read wall IQR 52-56% of the median, thread CPU
    time 5.2-5.7%). Tests inject scripted ones (``pytest_gpuperf._testing``)."""

    thread: Clock = time.thread_time_ns
    process: Clock = time.process_time_ns


@dataclass(frozen=True)
class Timing:
    """Raw output of a backend: per-call times (ms, one per round, in measurement order).

    ``probe_ms``: with a probe, the time of each probe call (ms, measurement order); probe j
    ran right after rounds ``j*probe_every .. (j+1)*probe_every - 1`` (the last block may be
    shorter), so ``len(probe_ms) == ceil(rounds / probe_every)``; empty without a probe.
    ``notes``: remarks on how the measurement went that the user should read (e.g. the work ran
    on another CUDA stream than the current one, so rounds were timed by the synchronized wall clock).
    ``cpu_samples_ms``/``process_cpu_samples_ms``: with :class:`CpuClocks` (CPU backend), the
    calling thread's and the process's CPU time per call of each round (ms, one per round, like
    ``samples_ms``); empty where not read. ``sm_clock_mhz``/``clock_reasons``: on CUDA's eager loop
    with NVML, the SM clock (MHz) and the NVML clocks-event reasons of each round (one reading per
    block of rounds, :class:`~pytest_gpuperf.measure.gpuclock.RoundClock`; None where a read
    failed), ``default_clock_mhz`` the GPU's default application clock; empty/None where not read;
    ``throttled_dropped``: throttled rounds left out of these
    (:func:`~pytest_gpuperf.measure.gpuclock.drop_throttled`).
    """

    samples_ms: tuple[float, ...]
    rounds: int
    calls_per_round: int
    warmup_calls: int
    value: Any = None
    probe_ms: tuple[float, ...] = ()
    probe_every: int = 1
    notes: tuple[str, ...] = ()
    cpu_samples_ms: tuple[float, ...] = ()
    process_cpu_samples_ms: tuple[float, ...] = ()
    sm_clock_mhz: tuple[float | None, ...] = ()
    clock_reasons: tuple[int | None, ...] = ()
    default_clock_mhz: float | None = None
    throttled_dropped: int = 0


@contextmanager
def gc_disabled() -> Iterator[None]:
    """Disable Python's cyclic GC inside the block, restoring its previous state after."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def resolve_device(requested: str | None, default_index: int | None = None) -> Any:
    """Map ``None``/``"auto"``/``"cpu"``/``"cuda"``/``"cuda:N"`` to a ``torch.device``.

    ``None`` or ``"auto"`` picks CUDA when available. ``default_index`` (a pytest-xdist worker's
    number k) picks GPU ``k mod device_count`` when no index is given, so workers spread over the
    GPUs. Raises :class:`DeviceUnavailable` when CUDA (or device N) is asked for where it is absent.
    """
    import torch

    def pick() -> int:
        if default_index is not None:
            return default_index % torch.cuda.device_count()
        return torch.cuda.current_device()

    if requested in (None, "auto"):
        return torch.device("cuda", pick()) if torch.cuda.is_available() else torch.device("cpu")
    dev = torch.device(requested)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise DeviceUnavailable(f"device {requested!r} requested but CUDA is not available here")
        index = dev.index if dev.index is not None else pick()
        if index >= torch.cuda.device_count():
            raise DeviceUnavailable(
                f"device {requested!r} requested but only {torch.cuda.device_count()} CUDA device(s) exist"
            )
        return torch.device("cuda", index)
    return dev


def use_device(device: Any) -> None:
    """Make ``device`` the current CUDA device (``torch.cuda.set_device``) when it is one, so a
    test's ``device="cuda"`` tensors, ``torch.cuda.synchronize()`` and the CUDA events of the timing
    backend all mean the GPU it is measured on (a pytest-xdist worker k measures GPU k); nothing
    for the CPU."""
    if getattr(device, "type", "cpu") == "cuda":
        import torch

        torch.cuda.set_device(device)


def prepare_call(fn: Callable[..., Any], args: tuple, kwargs: dict, setup: Setup | None) -> tuple[tuple, dict]:
    """Run ``setup`` (if any) and return the arguments for the next call.

    ``setup`` may return ``None`` (keep the arguments) or ``(args, kwargs)`` to replace them.
    """
    if setup is None:
        return args, kwargs
    out = setup()
    if out is None:
        return args, kwargs
    if isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], dict):
        return tuple(out[0]), dict(out[1])
    raise TypeError("setup must return None or a tuple (args, kwargs)")


class Lockstep(Protocol):
    """What keeps the ranks of a ``torchrun`` session in step while they time one benchmark
    (:class:`pytest_gpuperf.measure.distributed.Ranks`): rank 0's decision and numbers, on every rank.
    Each call is a collective, so every rank makes the same calls in the same order."""

    def decide(self, local: bool) -> bool: ...

    def choose(self, local: int) -> int: ...


class _RoundLoop:
    """Decides when to stop timing rounds (shared by both backends). With a ``lockstep`` (under
    torchrun) rank 0's decision is every rank's, sent before each round or block of rounds: the
    rounds stay aligned and the collective is the barrier before each timed block, never inside it."""

    def __init__(self, options: BenchOptions, fixed_rounds: int | None, progress: Progress | None = None,
                 clock: Clock = time.perf_counter_ns, lockstep: Lockstep | None = None) -> None:
        from pytest_gpuperf.verdict.stats import median_ci_ranks

        median_ci_ranks(10)  # its scipy import here, so that it never eats the time budget

        self.lockstep = lockstep
        self.every = 1  # under a lockstep: ask rank 0 every this many rounds (the same on every rank)
        self.o = options
        self.fixed = fixed_rounds
        self.clock = clock
        self.start = self.now()
        self.next_check = options.min_rounds
        self.progress = progress
        self.next_progress = self.start + PROGRESS_EVERY_S

    def now(self) -> float:
        """The clock in seconds."""
        return self.clock() / 1e9

    def done(self, samples: list[float]) -> bool:
        """Whether to stop timing. Under a lockstep, what the round count decides (fixed rounds,
        ``max_rounds``, ``min_rounds``) is decided on every rank alike, and the rest (the time
        budget, the precision) is rank 0's answer, asked every :attr:`every` rounds."""
        if self.lockstep is None:
            return self._done(samples)
        n = len(samples)
        if self.fixed is not None:
            return n >= self.fixed
        if n >= self.o.max_rounds:
            return True
        if n < self.o.min_rounds or (n - self.o.min_rounds) % self.every:
            return False
        return self.lockstep.decide(self._done(samples))

    def agree(self, n: int) -> int:
        """``n`` (a block's rounds), rank 0's under a lockstep."""
        return n if self.lockstep is None else self.lockstep.choose(n)

    def _done(self, samples: list[float]) -> bool:
        n = len(samples)
        if self.progress is not None and n and self.now() >= self.next_progress:
            import statistics

            now = self.now()
            self.progress(n, now - self.start, statistics.median(samples))
            self.next_progress = now + PROGRESS_EVERY_S
        if self.fixed is not None:
            return n >= self.fixed
        if n >= self.o.max_rounds:
            return True
        if n < self.o.min_rounds:
            return False
        if self.now() - self.start >= self.o.max_time:
            return True
        if self.o.target_precision > 0 and n >= self.next_check:
            self.next_check = n + max(self.o.min_rounds, n // 4)
            return ci_half_width_fraction(samples) < self.o.target_precision
        return False

    def remaining(self, n: int) -> int:
        if self.fixed is not None:
            return self.fixed - n
        return self.o.max_rounds - n


def _warmup(
    fn: Callable[..., Any],
    args: tuple,
    kwargs: dict,
    setup: Setup | None,
    warmup_time: float,
    warmup_calls: int | None,
    sync: Callable[[], None],
    clock: Clock = time.perf_counter_ns,
    lockstep: Lockstep | None = None,
) -> tuple[int, float, Any]:
    """Warm up; return (calls made, estimated seconds per call, last return value). Under a
    ``lockstep`` every rank makes rank 0's number of calls."""
    calls, value = 0, None
    t0 = clock()
    per_call: list[float] = []

    def timed_call() -> Any:
        a, k = prepare_call(fn, args, kwargs, setup)
        sync()
        s = clock()
        out = fn(*a, **k)
        sync()
        per_call.append((clock() - s) / 1e9)
        return out

    while True:
        if warmup_calls is not None:
            stop = calls >= warmup_calls
        else:
            stop = (calls >= MIN_WARMUP_CALLS or (calls > 0 and min(per_call) >= LONG_CALL_S)) \
                and (clock() - t0) / 1e9 >= warmup_time
        if lockstep is not None and warmup_calls is None:
            stop = lockstep.decide(stop)
        if stop:
            break
        value = timed_call()
        calls += 1
    while len(per_call) < 2 and sum(per_call) < LONG_CALL_S:  # estimate from two more calls when warmup was (nearly) skipped
        value = timed_call()
        calls += 1  # counted: the function really ran these extra times
    # the later half of the warmup is the best guide to steady state (first calls are cold)
    late = sorted(per_call[len(per_call) // 2:])
    estimate = late[len(late) // 2]
    return calls, max(estimate, 1e-9), value


@dataclass(frozen=True)
class CudaWarmup:
    """What the CUDA warmup learned (seconds): ``calls`` made; ``wall_s`` and ``event_s``, one
    lone synchronized call's wall time and the time CUDA events on the current stream saw of it
    (:func:`off_stream` compares them); ``per_call_s``/``device_s``, a call's wall and event time
    back to back (the later half's median); ``value``, the last call's return value."""

    calls: int
    wall_s: float
    event_s: float
    per_call_s: float
    device_s: float
    value: Any = None


#: CUDA warmup: calls are launched back to back in chunks of about this many seconds between
#: synchronizations (so the GPU never idles between short kernels, as in Triton's do_bench, and a
#: long kernel never queues up far beyond the warmup time).
CUDA_WARMUP_CHUNK_S = 5e-3


def _warmup_cuda(fn: Callable[..., Any], args: tuple, kwargs: dict, setup: Setup | None, warmup_time: float,
                 warmup_calls: int | None, sync: Callable[[], None], clock: Clock = time.perf_counter_ns,
                 lockstep: Lockstep | None = None) -> CudaWarmup:
    """Warm up on CUDA: two lone synchronized calls (wall and event time of one call), then calls
    back to back, each between an event pair, synchronized once per chunk of about
    :data:`CUDA_WARMUP_CHUNK_S`, until ``warmup_time`` (at least :data:`MIN_WARMUP_CALLS` calls) or
    ``warmup_calls`` calls in all. Under a ``lockstep`` every rank makes rank 0's chunks and stops
    when rank 0 does."""
    import torch

    def events() -> tuple[Any, Any]:
        return torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    t0 = clock()
    lone_wall: list[float] = []
    lone_event: list[float] = []
    value = None
    for _ in range(2):  # lone calls: what one call costs, and whether events on this stream see it
        a, k = prepare_call(fn, args, kwargs, setup)
        sync()
        s = clock()
        start, end = events()
        start.record()
        value = fn(*a, **k)
        end.record()
        sync()
        lone_wall.append(max(clock() - s, 1) / 1e9)
        lone_event.append(max(start.elapsed_time(end) / 1e3, 1e-9))
    calls = 2
    chunk = max(1, int(CUDA_WARMUP_CHUNK_S / lone_wall[-1]))
    chunk = lockstep.choose(chunk) if lockstep is not None else chunk
    per_call: list[float] = []
    device: list[float] = []

    def more() -> bool:
        if warmup_calls is not None:
            return calls < warmup_calls
        going = calls < MIN_WARMUP_CALLS or (clock() - t0) / 1e9 < warmup_time
        return going if lockstep is None else not lockstep.decide(not going)

    while more():
        n = chunk if warmup_calls is None else min(chunk, warmup_calls - calls)
        pairs = []
        s = clock()
        for _ in range(n):
            a, k = prepare_call(fn, args, kwargs, setup)
            start, end = events()
            start.record()
            value = fn(*a, **k)
            end.record()
            pairs.append((start, end))
        sync()
        per_call.append(max(clock() - s, 1) / 1e9 / n)
        device.extend(max(x.elapsed_time(y) / 1e3, 1e-9) for x, y in pairs)
        calls += n
    return CudaWarmup(calls, lone_wall[-1], lone_event[-1], _later_median(per_call, lone_wall[-1]),
                      _later_median(device, lone_event[-1]), value)


def _later_median(xs: list[float], default: float) -> float:
    """The median of the later half of ``xs`` (steady state: first calls are cold), else ``default``."""
    late = sorted(xs[len(xs) // 2:])
    return late[len(late) // 2] if late else default


#: Probe calls made (untimed, after the benchmark's warmup) to warm the probe up and estimate its time.
PROBE_WARMUP_CALLS = 3


def probe_every(probe_s: float, round_s: float, share: float | None = None) -> int:
    """Rounds per probe call, k >= 1, so that the probe takes at most ``share`` (default
    :data:`pytest_gpuperf.measure.probe.PROBE_SHARE`) of the rounds' time: ``ceil(probe_s / (share * round_s))``
    (both in seconds)."""
    if share is None:
        from pytest_gpuperf.measure.probe import PROBE_SHARE

        share = PROBE_SHARE
    return max(1, math.ceil(probe_s / (share * max(round_s, 1e-9))))


def _probe_estimate_s(probe: Callable[[], Any], sync: Callable[[], None], clock: Clock) -> float:
    """Warm the probe up (:data:`PROBE_WARMUP_CALLS` synchronized calls); seconds per call (the last ones' median)."""
    times = []
    for _ in range(PROBE_WARMUP_CALLS):
        sync()
        t0 = clock()
        probe()
        sync()
        times.append((clock() - t0) / 1e9)
    late = sorted(times[1:])
    return max(late[len(late) // 2], 1e-9)


def time_once(fn: Callable[..., Any], args: tuple, kwargs: dict, device: Any,
              clock: Clock = time.perf_counter_ns) -> Timing:
    """Smoke mode: call ``fn`` exactly once (synchronized wall time, no warmup, no statistics)."""
    sync = _sync_for(device)
    sync()
    t0 = clock()
    value = fn(*args, **kwargs)
    sync()
    ms = (clock() - t0) / 1e6
    return Timing(samples_ms=(max(ms, 1e-6),), rounds=1, calls_per_round=1, warmup_calls=0, value=value)


def _sync_for(device: Any) -> Callable[[], None]:
    if getattr(device, "type", "cpu") == "cuda":
        import torch

        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def measure(
    fn: Callable[..., Any],
    args: tuple,
    kwargs: dict,
    *,
    options: BenchOptions,
    device: Any,
    setup: Setup | None = None,
    rounds: int | None = None,
    warmup_calls: int | None = None,
    progress: Progress | None = None,
    clock: Clock = time.perf_counter_ns,
    calls_per_round: int | None = None,
    probe: Callable[[], Any] | None = None,
    lockstep: Lockstep | None = None,
    cpu_clocks: CpuClocks | None = None,
) -> Timing:
    """Time ``fn(*args, **kwargs)`` on ``device`` (a ``torch.device``) and return per-call times (ms).

    ``rounds``/``warmup_calls`` fix those counts (pedantic mode); ``setup`` runs untimed before
    every round and forces one call per round. ``calls_per_round`` fixes the calls timed together
    in each round (pytest-benchmark's ``iterations``; None: sized from the warmup); with ``setup``
    it must be 1. ``progress`` is called about once a second with
    (rounds done, elapsed s, current median ms). ``clock`` (ns) times CPU rounds and every time
    budget (warmup, ``max_time``); CUDA rounds are timed with CUDA events. ``probe`` (a
    :class:`pytest_gpuperf.measure.probe.Probe` or any callable; None: none) is timed interleaved with
    the rounds, with the rounds' clock (``Timing.probe_ms``, see the module doc). ``lockstep``
    (under torchrun, a :class:`Lockstep`): every rank makes rank 0's warmup calls, calls per round
    and rounds (on CUDA also its warmup chunks, blocks of rounds and timing loop). Exceptions from
    ``fn`` (or ``probe``) propagate unchanged. ``cpu_clocks`` (:class:`CpuClocks`; None: none):
    on the CPU backend, read around every round beside ``clock``: ``Timing.cpu_samples_ms`` and
    ``process_cpu_samples_ms`` (CUDA rounds read none).
    """
    if calls_per_round is not None and (isinstance(calls_per_round, bool) or not isinstance(calls_per_round, int)
                                        or calls_per_round < 1 or (setup is not None and calls_per_round > 1)):
        raise ValueError(f"calls_per_round={calls_per_round!r}: expected an integer >= 1 (1 with a setup function)")
    if getattr(device, "type", "cpu") == "cuda":
        return _measure_cuda(fn, args, kwargs, options, device, setup, rounds, warmup_calls, progress, clock,
                             calls_per_round, probe, lockstep, cpu_clocks)
    return _measure_cpu(fn, args, kwargs, options, setup, rounds, warmup_calls, progress, clock, calls_per_round,
                        probe, lockstep, cpu_clocks)


class Measurer:
    """The fixture's timing backend, and the interface every timing backend implements.

    The plugin takes it from the ``_gpuperf_measurer`` fixture, which a test suite may override
    with a subclass (the plugin's own tests inject scripted timings this way; see
    ``pytest_gpuperf._testing.ScriptedMeasurer``). The interface:

    * ``clock``: the clock of the time budgets (``max_time``, warmup), integer ns;
    * :meth:`measure`: warm up and time rounds (per-call times in ms), with the interleaved
      machine-speed ``probe`` when :attr:`supports_probe`;
    * :meth:`once`: smoke mode, one synchronized call;
    * :meth:`host_load_meter`: how the CPU backend's busy-host guard measures other processes'
      load while this backend times;
    * optionally ``profile_ops(fn, args, kwargs, device, *, cycles, calls, process)``: the op profile
      of "why it got slower" (without it, :func:`pytest_gpuperf.measure.opprofile.profile_ops`).

    This default times for real (``time.perf_counter_ns`` on the CPU, CUDA events on a GPU).
    """

    #: Whether :meth:`measure` takes the ``probe`` keyword (a backend without it is never given a probe).
    supports_probe: bool = True

    def __init__(self, clock: Clock = time.perf_counter_ns, cpu_clocks: CpuClocks | None = None) -> None:
        self.clock = clock
        #: the CPU-time clocks read beside ``clock`` on the CPU backend (:class:`CpuClocks`): the
        #: real ones when timing with the real clock, else only those given (another clock's times
        #: are not this machine's)
        self.cpu_clocks = cpu_clocks if cpu_clocks is not None else (
            CpuClocks() if clock is time.perf_counter_ns else None)

    def host_load_meter(self, device: Any, *, measure: bool = True) -> Any:
        """The :class:`~pytest_gpuperf.measure.telemetry.HostLoadMeter` of a measurement on
        ``device`` (the timed rounds, or an A/B worker's blocks): a measuring one on the CPU backend
        when timing with the real clock; None on CUDA, with another clock (its times are not this
        machine's), or with ``measure`` False (``--gpuperf-no-host-load``)."""
        if getattr(device, "type", str(device)) != "cpu" or not measure or self.clock is not time.perf_counter_ns:
            return None
        from pytest_gpuperf.measure.telemetry import PROCESS_LOAD, HostLoadMeter, job_cpu_reader

        # under torchrun the launch's other ranks share the cores: their CPU time is this job's own
        # load, not another user's (before, every torchrun benchmark's host load counted them, and a
        # real neighbour could not be told from them)
        return HostLoadMeter(own=job_cpu_reader(), process=PROCESS_LOAD)

    def measure(self, fn: Callable[..., Any], args: tuple, kwargs: dict, *, options: BenchOptions, device: Any,
                setup: Setup | None = None, rounds: int | None = None, warmup_calls: int | None = None,
                progress: Progress | None = None, calls_per_round: int | None = None,
                probe: Callable[[], Any] | None = None, lockstep: Lockstep | None = None) -> Timing:
        """Warm up and time rounds of ``fn`` (see :func:`measure`); per-call times in ms. ``probe``:
        a machine-speed probe timed interleaved with the rounds (``Timing.probe_ms``; None: none);
        ``lockstep``: under torchrun, what keeps the ranks' rounds aligned (a backend whose
        ``measure`` has no ``lockstep`` keyword cannot time under torchrun)."""
        return measure(fn, args, kwargs, options=options, device=device, setup=setup, rounds=rounds,
                       warmup_calls=warmup_calls, progress=progress, clock=self.clock,
                       calls_per_round=calls_per_round, probe=probe, lockstep=lockstep,
                       cpu_clocks=getattr(self, "cpu_clocks", None))

    def once(self, fn: Callable[..., Any], args: tuple, kwargs: dict, device: Any) -> Timing:
        """Smoke mode: one synchronized call (see :func:`time_once`)."""
        return time_once(fn, args, kwargs, device, clock=self.clock)


def _measure_cpu(fn, args, kwargs, options, setup, rounds, warmup_calls, progress=None,
                 clock: Clock = time.perf_counter_ns, calls_per_round: int | None = None,
                 probe: Callable[[], Any] | None = None, lockstep: Lockstep | None = None,
                 cpu_clocks: CpuClocks | None = None) -> Timing:
    n_warm, est, value = _warmup(fn, args, kwargs, setup, options.warmup_time, warmup_calls, lambda: None, clock,
                                 lockstep)
    cpr = 1 if setup is not None else max(1, math.ceil(CPU_MIN_ROUND_S / est))
    cpr = calls_per_round or cpr
    if lockstep is not None and calls_per_round is None:
        cpr = lockstep.choose(cpr)
    every = probe_every(_probe_estimate_s(probe, lambda: None, clock), est * cpr) if probe is not None else 1
    probes: list[float] = []

    def time_probe() -> None:
        assert probe is not None
        t0 = clock()
        probe()
        probes.append(max(clock() - t0, 1) / 1e6)

    loop = _RoundLoop(options, rounds, progress, clock, lockstep)
    if lockstep is not None:  # rank 0's: ask it about once per LOCKSTEP_EVERY_S of rounds
        loop.every = lockstep.choose(max(1, min(LOCKSTEP_MAX_EVERY, math.ceil(LOCKSTEP_EVERY_S / (est * cpr)))))
    samples: list[float] = []
    cpu = _RoundCpu(cpu_clocks, cpr)  # read outside the wall clock's interval: it never includes their reads
    with gc_disabled():
        while not loop.done(samples):
            a, k = prepare_call(fn, args, kwargs, setup)
            cpu.start()
            if cpr == 1:
                t0 = clock()
                value = fn(*a, **k)
                t1 = clock()
            else:
                t0 = clock()
                for _ in range(cpr):
                    value = fn(*a, **k)
                t1 = clock()
            cpu.stop()
            samples.append(max(t1 - t0, 1) / cpr / 1e6)
            if probe is not None and len(samples) % every == 0:
                time_probe()
        if probe is not None and len(samples) % every:
            time_probe()  # the last, partial block gets its probe too
    return Timing(tuple(samples), len(samples), cpr, n_warm, value, tuple(probes), every, **cpu.fields())


def _measure_cuda(fn, args, kwargs, options, device, setup, rounds, warmup_calls, progress=None,
                  clock: Clock = time.perf_counter_ns, calls_per_round: int | None = None,
                  probe: Callable[[], Any] | None = None, lockstep: Lockstep | None = None,
                  cpu_clocks: CpuClocks | None = None) -> Timing:
    import torch

    with torch.cuda.device(device):
        sync = lambda: torch.cuda.synchronize(device)  # noqa: E731
        if options.cuda_graph:
            return _measure_cuda_graph(fn, args, kwargs, options, device, setup, rounds, warmup_calls, progress,
                                       clock, calls_per_round, probe, lockstep)
        w = _warmup_cuda(fn, args, kwargs, setup, options.warmup_time, warmup_calls, sync, clock, lockstep)
        n_warm, value = w.calls, w.value
        gpu_clock = RoundClock.for_device(device)
        steady = _steady_clock(fn, args, kwargs, setup, options, sync, clock, gpu_clock, lockstep, w.per_call_s)
        n_warm += steady[0]
        wall_timed = off_stream(w.wall_s, w.event_s)
        if lockstep is not None:  # rank 0 says which loop every rank runs
            wall_timed = bool(lockstep.choose(int(wall_timed)))
        if wall_timed:
            return _measure_wall_synchronized(fn, args, kwargs, options, setup, rounds, progress, clock, sync,
                                              n_warm, value, w.wall_s, w.event_s, device, lockstep)
        # a call's time back to back: events see the device time, or the launch spacing when the
        # host is slower (the synchronized wall time of a lone call adds ~10-20 µs of overhead)
        est = min(w.per_call_s, w.device_s) if setup is None and not options.flush_l2 else w.per_call_s
        cpr = cuda_calls_per_round(est, setup_given=setup is not None, flush_l2=options.flush_l2,
                                   calls_per_round=calls_per_round)
        cpr = lockstep.choose(cpr) if lockstep is not None else cpr
        flush = _l2_flusher(device) if options.flush_l2 else None
        prober = _CudaProber(probe, sync, clock, est * cpr)
        if probe is not None and flush is None:  # the probe's warmup evicted the L2: re-warm (see below)
            ra, rk = prepare_call(fn, args, kwargs, setup)
            fn(*ra, **rk)
        block = max(1, int(CUDA_BLOCK_S / (est * cpr)))
        loop = _RoundLoop(options, rounds, progress, clock, lockstep)
        samples: list[float] = []
        host = _RoundCpu(cpu_clocks, cpr)  # the host's CPU time of issuing each round (not the device's time)
        with gc_disabled():
            while not loop.done(samples):
                n = loop.agree(min(block, max(1, loop.remaining(len(samples)))))
                pairs, value = _cuda_block(n, fn, args, kwargs, setup, flush, cpr, host, prober, len(samples), value)
                sync()  # one synchronize per block of rounds
                samples.extend(s.elapsed_time(e) / cpr for s, e in pairs)
                if gpu_clock is not None:  # the block's SM clock, for each of its rounds
                    gpu_clock.after_block(len(pairs))
                prober.collect()
            prober.finish(len(samples))
        return Timing(tuple(samples), len(samples), cpr, n_warm, value, prober.times(), prober.every,
                      notes=steady[1], **host.fields(), **(gpu_clock.fields() if gpu_clock is not None else {}))


def _cuda_block(n, fn, args, kwargs, setup, flush, cpr, host, prober, done, value) -> tuple[list, Any]:
    """Launch ``n`` timed rounds of ``cpr`` calls, each between a CUDA event pair (``done``: rounds
    timed before; nothing synchronizes): ``(event pairs, the last call's value)``."""
    import torch

    pairs = []
    for _ in range(n):
        a, k = prepare_call(fn, args, kwargs, setup)
        if flush is not None:
            flush()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        host.start()
        start.record()
        for _ in range(cpr):
            value = fn(*a, **k)
        end.record()
        host.stop()
        pairs.append((start, end))
        if prober.after_round(done + len(pairs)) and flush is None:
            # the probe (a 128 MiB copy by default) evicted the L2: one untimed call puts
            # the benchmark's data back, so the next round starts as warm as the others
            ra, rk = prepare_call(fn, args, kwargs, setup)
            fn(*ra, **rk)
    return pairs, value


def _steady_clock(fn, args, kwargs, setup, options, sync, clock, gpu_clock, lockstep,
                  per_call_s: float) -> tuple[int, tuple[str, ...]]:
    """The steady-clock warmup (``options.steady_clock`` seconds at most; 0: none) where the SM
    clock can be read, synchronizing about every :data:`CUDA_BLOCK_S` of calls (``per_call_s``:
    the warmup's time per call): ``(calls made, notes)``. Not under torchrun (each rank's GPU
    would settle at its own time; ``lockstep`` set)."""
    if not options.steady_clock or gpu_clock is None or lockstep is not None:
        return 0, ()

    def call() -> None:
        a, k = prepare_call(fn, args, kwargs, setup)
        fn(*a, **k)

    calls, note = steady_clock_warmup(call, sync, lambda: gpu_clock.read()[0], lambda: clock() / 1e9,
                                      options.steady_clock, max(1, int(CUDA_BLOCK_S / max(per_call_s, 1e-6))))
    return calls, (note,)


class _RoundCpu:
    """The CPU time of each timed round (ms per call; nothing without ``clocks``): the calling
    thread's and the process's, read in the order thread, process ... process, thread so that each
    CPU interval holds the other's read and the wall clock's interval, read between them, neither.
    On the CPU backend it is the work's own CPU time (:func:`pytest_gpuperf.verdict.gate.with_cpu_time`
    may decide on it); on CUDA, what issuing the work costs the host beside the device time CUDA
    events give (shown, never a verdict's clock)."""

    def __init__(self, clocks: CpuClocks | None, cpr: int) -> None:
        self.clocks, self.cpr = clocks, cpr
        self.thread_ms: list[float] = []
        self.process_ms: list[float] = []
        self._c0 = self._p0 = 0

    def start(self) -> None:
        if self.clocks is not None:
            self._c0 = self.clocks.thread()
            self._p0 = self.clocks.process()

    def stop(self) -> None:
        if self.clocks is not None:
            p1 = self.clocks.process()
            c1 = self.clocks.thread()
            self.thread_ms.append(max(c1 - self._c0, 1) / self.cpr / 1e6)
            self.process_ms.append(max(p1 - self._p0, 1) / self.cpr / 1e6)

    def fields(self) -> dict[str, tuple[float, ...]]:
        """The :class:`Timing` fields of what was read."""
        return {"cpu_samples_ms": tuple(self.thread_ms), "process_cpu_samples_ms": tuple(self.process_ms)}


#: Set once this process captured a CUDA graph (``cuda_graph=True``): profiling CUDA afterwards
#: needs CUPTI's teardown off (see :func:`pytest_gpuperf.measure.trace.cupti_guard`).
_GRAPH_CAPTURED = [False]


def graph_captured() -> bool:
    """True once this process captured a CUDA graph to time a benchmark."""
    return _GRAPH_CAPTURED[0]


def off_stream(wall_s: float, event_s: float) -> bool:
    """True when a call's synchronized wall time (s) is long (over :data:`OFF_STREAM_MIN_S`) but
    CUDA events on the current stream see less than :data:`OFF_STREAM_SHARE` of it: its work runs
    on another stream (or device) that events on the current stream do not time. Pure."""
    return wall_s > OFF_STREAM_MIN_S and event_s < OFF_STREAM_SHARE * wall_s


def _measure_wall_synchronized(fn, args, kwargs, options, setup, rounds, progress, clock, sync, n_warm, value,
                               wall_s, event_s, device, lockstep: Lockstep | None = None) -> Timing:
    """Rounds of one call each, timed by the host clock between device-wide synchronizations:
    for work that CUDA events on the current stream cannot see (see :func:`off_stream`)."""
    loop = _RoundLoop(options, rounds, progress, clock, lockstep)
    samples: list[float] = []
    with gc_disabled():
        while not loop.done(samples):
            a, k = prepare_call(fn, args, kwargs, setup)
            sync()
            t0 = clock()
            value = fn(*a, **k)
            sync()
            samples.append(max(clock() - t0, 1) / 1e6)
    note = (f"CUDA events on the current stream of {device} saw {event_s * 1e3:.3g} ms of a call that took "
            f"{wall_s * 1e3:.3g} ms: its work runs on another stream or device, so each round was timed by the "
            f"host clock between device-wide synchronizations (includes launch and synchronize overhead); to time "
            f"it with events, make the current stream wait for that work (`torch.cuda.current_stream()."
            f"wait_stream(side)`) or launch it on the current stream")
    return Timing(tuple(samples), len(samples), 1, n_warm, value, notes=(note,))


def _cuda_event_estimate(fn: Callable[..., Any], args: tuple, kwargs: dict, calls: int = 10) -> float:
    """Device-side seconds per call: one event pair around ``calls`` back-to-back calls.

    The warmup's synchronized wall time includes launch and synchronize overhead (~10-20 µs), which
    would hide that a 5 µs kernel needs batching; this estimate does not.
    """
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        fn(*args, **kwargs)
    end.record()
    end.synchronize()
    return max(start.elapsed_time(end) / calls / 1e3, 1e-9)


def _l2_flusher(device: Any) -> Callable[[], None]:
    """A callable that overwrites a buffer twice the device's L2 size (evicting L2 before a call)."""
    import torch

    l2 = int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 0)
    nbytes = max(2 * l2, 64 * 2**20)
    buf = torch.empty(nbytes, dtype=torch.int8, device=device)
    return buf.zero_


class _CudaProber:
    """Times a probe with CUDA events after every ``every``-th round (nothing when ``probe`` is None)."""

    def __init__(self, probe: Callable[[], Any] | None, sync: Callable[[], None], clock: Clock,
                 round_s: float) -> None:
        self.probe = probe
        self.every = 1
        self._pending: list[tuple[Any, Any]] = []
        self._times: list[float] = []
        if probe is not None:
            est = _probe_estimate_s(probe, sync, clock)
            est = min(est, _cuda_event_estimate(lambda: probe(), (), {}, calls=3))
            self.every = probe_every(est, round_s)

    def after_round(self, rounds_done: int) -> bool:
        """Record the probe between events when ``rounds_done`` completes a block; True when it ran."""
        if self.probe is not None and rounds_done % self.every == 0:
            self._record()
            return True
        return False

    def _record(self) -> None:
        import torch

        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        self.probe()  # type: ignore[misc]
        end.record()
        self._pending.append((start, end))

    def collect(self) -> None:
        """After a synchronize: read the recorded probe times (ms)."""
        self._times.extend(max(s.elapsed_time(e), 1e-6) for s, e in self._pending)
        self._pending.clear()

    def finish(self, rounds: int) -> None:
        """The last, partial block gets its probe too (synchronizes)."""
        if self.probe is not None and rounds % self.every:
            self._record()
            self._pending[-1][1].synchronize()
        self.collect()

    def times(self) -> tuple[float, ...]:
        return tuple(self._times)


def cuda_calls_per_round(est_s: float, *, setup_given: bool, flush_l2: bool,
                         calls_per_round: int | None = None) -> int:
    """Calls per timed CUDA round (eager: between one event pair; graph mode: captured per
    replay). Enough calls to fill :data:`CUDA_MIN_ROUND_S` given a per-call estimate ``est_s``
    (s); exactly 1 for calls of :data:`CUDA_BATCH_BELOW_S` or more, with a ``setup`` function or with ``flush_l2`` — the flush runs once per
    round, so a round of several calls would time all but the first with a warm L2. An explicit
    ``calls_per_round`` wins."""
    if calls_per_round:
        return calls_per_round
    if setup_given or flush_l2 or est_s >= CUDA_BATCH_BELOW_S:
        return 1
    return max(1, math.ceil(CUDA_MIN_ROUND_S / max(est_s, 1e-12)))


def _measure_cuda_graph(fn, args, kwargs, options, device, setup, rounds, warmup_calls, progress=None,
                        clock: Clock = time.perf_counter_ns, calls_per_round: int | None = None,
                        probe: Callable[[], Any] | None = None, lockstep: Lockstep | None = None) -> Timing:
    """Capture ``calls_per_round`` calls in one CUDA graph on a side stream and time replays."""
    import torch

    sync = lambda: torch.cuda.synchronize(device)  # noqa: E731
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):  # warm up on a side stream, as capture requires
        w = _warmup_cuda(fn, args, kwargs, setup, options.warmup_time, warmup_calls, sync, clock, lockstep)
        n_warm, value = w.calls, w.value
        est = min(w.per_call_s, w.device_s) if setup is None else w.per_call_s
    torch.cuda.current_stream(device).wait_stream(side)
    sync()
    cpr = cuda_calls_per_round(est, setup_given=setup is not None, flush_l2=options.flush_l2,
                               calls_per_round=calls_per_round)
    if lockstep is not None:
        cpr = lockstep.choose(cpr)
    graph = torch.cuda.CUDAGraph()
    # the captured calls use what setup returns, as the warmup's calls did (replays reuse those
    # tensors: a per-round setup may only refill them in place)
    ca, ck = prepare_call(fn, args, kwargs, setup)
    _GRAPH_CAPTURED[0] = True
    with gc_disabled():
        with torch.cuda.graph(graph, stream=side):
            for _ in range(cpr):
                value = fn(*ca, **ck)
    sync()
    graph.replay()  # one untimed replay: first replays upload the graph
    sync()
    flush = _l2_flusher(device) if options.flush_l2 else None
    prober = _CudaProber(probe, sync, clock, est * cpr)
    if probe is not None and flush is None:
        graph.replay()  # untimed: the probe's warmup evicted the L2 (see _measure_cuda)
    block = max(1, int(CUDA_BLOCK_S / (est * cpr)))
    loop = _RoundLoop(options, rounds, progress, clock, lockstep)
    samples: list[float] = []
    with gc_disabled():
        while not loop.done(samples):
            n = loop.agree(min(block, max(1, loop.remaining(len(samples)))))
            pairs = []
            for _ in range(n):
                if setup is not None:
                    setup()  # in graph mode setup may only mutate captured inputs in place
                if flush is not None:
                    flush()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                graph.replay()
                end.record()
                pairs.append((start, end))
                if prober.after_round(len(samples) + len(pairs)) and flush is None:
                    graph.replay()  # untimed: the probe evicted the L2 (see _measure_cuda)
            sync()
            samples.extend(s.elapsed_time(e) / cpr for s, e in pairs)
            prober.collect()
        prober.finish(len(samples))
    return Timing(tuple(samples), len(samples), cpr, n_warm, value, prober.times(), prober.every)
