"""Interleaved machine-speed probes: a short workload of the benchmark's class, timed between its rounds.

The session-start reference workloads (:mod:`pytest_gpuperf.measure.drift`) say how fast the machine
was once, for ~0.1 s, at the start of a process. A *probe* follows the machine during each
benchmark: the timing backends (:mod:`pytest_gpuperf.measure.timing`) call it after every k-th timed
round, with the same clock as the rounds (``perf_counter_ns`` on the CPU, CUDA events on a
GPU), choosing k so that the probe takes at most :data:`PROBE_SHARE` of the measuring time.
The per-probe times go into :attr:`pytest_gpuperf.measure.timing.Timing.probe_ms`; their median is
stored with each result and baseline run, and :func:`pytest_gpuperf.verdict.gate.judge` uses them
(see :class:`ProbeEvidence`) to normalize and to tell "the machine differs" from "the code
got slower".

On the CPU backend every benchmark's probe is :func:`reference_probe`, a fixed pure-Python loop
(no torch): the VM's speed modes slow the whole core, and the reference clock
(:mod:`pytest_gpuperf.verdict.refclock`) reads each round over the probe beside it. On a GPU
there is one probe per class (``kind``):

* ``compute``: a 2048x2048 bf16 matmul (~17 GFLOP, tens of µs on a datacenter GPU);
* ``memory``: a 128 MiB device-to-device copy (at least 2x the L2 of current GPUs);
* ``overhead``: 16 ``torch.add`` calls on a 16-element tensor (per-op dispatch and launch latency).

The benchmark's class comes from the first entry of its ``expect_bottleneck`` option
(:func:`probe_kind`); ``sync`` and ``data`` map to ``overhead`` (host-side latency: host-device
round trips, DataLoader Python work), ``transfer`` to ``memory`` (bandwidth-bound copies);
without one, ``memory``. (Until 2026-11-29 the CPU had its own three: a 256x256 fp32 matmul, a
2 MiB copy from a buffer of 4x the last-level cache, and the tiny adds; their costs are measured
in docs/verdicts.md, and ``benchmarks/probe_cost.py`` measures the probe used now.)

Pure at import: torch is imported inside :func:`make_probe` only, and only for a GPU. A GPU probe
is built for each measurement and its buffers are freed with it (the memory probe's are 256 MiB),
so what a later ``memory_budget`` block finds allocated is the code's own: an H200 run
(2026-11-29) read 352 MiB "allocated before the block" where the test had allocated 64 MiB while
the probes were kept for the process.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

#: The probe's share of the measuring time, at most (about): a probe after every k-th round,
#: with k = ceil(probe time / (PROBE_SHARE x round time)).
PROBE_SHARE = 0.10
#: Probe classes.
PROBE_KINDS = ("compute", "memory", "overhead")
#: expect_bottleneck class -> probe class.
KIND_OF_BOTTLENECK = {"compute": "compute", "memory": "memory", "overhead": "overhead",
                      "sync": "overhead", "data": "overhead", "transfer": "memory"}
#: The probe class of a benchmark that declares no ``expect_bottleneck``.
DEFAULT_KIND = "memory"
#: CUDA memory probe: bytes copied per call.
CUDA_COPY_BYTES = 128 << 20
#: Overhead probe: tiny ops per call.
OVERHEAD_OPS = 16


@dataclass(frozen=True)
class Probe:
    """A machine-speed probe: ``fn()`` runs the workload once (no synchronization; the timing
    backend synchronizes or records events around it). ``kind`` is its class (one of
    :data:`PROBE_KINDS`), ``name`` what it runs, e.g. ``"compute: 256x256 fp32 matmul"``
    (stored with results and baselines: only runs of the same probe name are compared)."""

    kind: str
    name: str
    fn: Callable[[], Any] = field(repr=False, compare=False)

    def __call__(self) -> Any:
        return self.fn()


def probe_kind(expect_bottleneck: tuple[str, ...] | None) -> str:
    """The probe class for a benchmark: from the first entry of ``expect_bottleneck`` (see
    :data:`KIND_OF_BOTTLENECK`), else :data:`DEFAULT_KIND`. Pure."""
    if expect_bottleneck:
        return KIND_OF_BOTTLENECK.get(expect_bottleneck[0], DEFAULT_KIND)
    return DEFAULT_KIND


def python_loop(n: int = 20_000) -> int:
    """The CPU's single-thread reference: ``n`` iterations of integer arithmetic and a dict update in
    the interpreter (a median of 3.2-4.7 ms of thread CPU time for the default on this project's
    2-core VM, quiet, 2026-11-29); returns a checksum. The session-start reference of
    :mod:`pytest_gpuperf.measure.drift` and, shorter, the A/B's :func:`reference_probe`."""
    seen: dict[int, int] = {}
    total = 0
    for i in range(n):
        total = (total * 31 + i) & 0xFFFFFFFF
        seen[i & 1023] = total
    return total + len(seen)


#: Iterations of :func:`python_loop` in the reference probe of the
#: A/B's blocks (:func:`reference_probe`): about 0.25-0.5 ms on this project's 2-core VM.
REFERENCE_LOOP_ITERATIONS = 1500


def reference_probe() -> Probe:
    """The CPU's probe (every timed worker process's and the A/B's blocks'): a fixed pure-Python loop
    (:func:`python_loop`, :data:`REFERENCE_LOOP_ITERATIONS`
    iterations; no torch), timed between a block's rounds so that each round can be read relative
    to the machine's speed at that moment (:attr:`pytest_gpuperf.verdict.paired.Block.referenced`).
    Why (issue 45, 2026-11-29): this project's VM runs any code 1.5-2x slower for stretches of tens
    of ms to seconds (CPU time slows too); adjacent blocks of a JSON round trip and of a
    pure-Python loop moved together (correlation of their log times 0.88-0.91), and A/A paired
    ratios of 62-ms blocks normalized by this probe had a log SD of 0.041 against 0.231 raw
    (``benchmarks/speed_modes.py``; docs/verdicts.md)."""
    n = REFERENCE_LOOP_ITERATIONS
    return Probe("python", f"python: {n}-iteration interpreter loop", lambda: python_loop(n))


def make_probe(kind: str, device: Any) -> Probe:
    """The probe of class ``kind`` for ``device`` (a ``torch.device``): on the CPU
    :func:`reference_probe` whatever the class (no torch is imported), on a GPU the class's own
    workload, built anew (its buffers live as long as the returned probe: keep it for one
    measurement).

    Raises ``ValueError`` for an unknown ``kind``. Inputs are seeded (``torch.Generator`` seed 0).
    """
    if kind not in PROBE_KINDS:
        raise ValueError(f"probe kind {kind!r}: expected one of {', '.join(PROBE_KINDS)}")
    if getattr(device, "type", str(device)) == "cpu":
        return reference_probe()
    return _build(kind, device)


def _build(kind: str, device: Any) -> Probe:
    """The GPU probe of class ``kind`` on ``device``, its buffers allocated for it."""
    import torch

    if kind == "compute":
        g = torch.Generator(device=device).manual_seed(0)
        n, dt = 2048, torch.bfloat16
        a = torch.randn(n, n, device=device, generator=g).to(dt)
        b = torch.randn(n, n, device=device, generator=g).to(dt)
        out = torch.empty(n, n, device=device, dtype=dt)
        return Probe(kind, f"compute: {n}x{n} {str(dt).removeprefix('torch.')} matmul",
                     lambda: torch.mm(a, b, out=out))
    if kind == "memory":
        src = torch.ones(CUDA_COPY_BYTES // 4, device=device)
        dst = torch.empty_like(src)
        return Probe(kind, f"memory: {CUDA_COPY_BYTES >> 20} MiB copy", lambda: dst.copy_(src))
    x = torch.ones(16, device=device)
    y = torch.empty_like(x)

    def tiny_ops() -> Any:
        for _ in range(OVERHEAD_OPS):
            torch.add(x, 1, out=y)
        return y

    return Probe(kind, f"overhead: {OVERHEAD_OPS} tiny adds", tiny_ops)


