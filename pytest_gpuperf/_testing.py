"""Test helpers (not public API): scripted timings for deterministic tests of verdicts.

A :class:`ScriptedMeasurer` runs the real measurement protocol of :mod:`pytest_gpuperf.measure.timing`
(warmup, batching, rounds, early stopping, the ``max_time`` budget) on a :class:`FakeClock` that
advances by a scripted number of milliseconds at every call of the benchmarked function, so a
test of a verdict gives the same answer on any machine, loaded or not. The function itself is
still called (its return value and side effects stay real); only time is scripted.

An inner pytest session (``pytester``) uses it by overriding the plugin's ``_gpuperf_measurer``
fixture in its conftest::

    import pytest
    from pytest_gpuperf._testing import ScriptedMeasurer
    from pytest_gpuperf.plugin.replicates import slot_of

    @pytest.fixture
    def _gpuperf_measurer(request):
        return ScriptedMeasurer.from_file(request.config.rootpath / "timings.json", request.node.name,
                                          slot_of(request.config))

``timings.json`` maps a test name (or ``"*"``) to a spec, see :meth:`ScriptedMeasurer.from_spec`.

**Probes.** A spec may script the interleaved machine-speed probe too (``"probe": {"ms": 0.5}``,
the same spec format); then the plugin's probe is not run, the fake clock advances by the
scripted probe time at each probe call, and ``Timing.probe_ms`` holds those times. Without a
probe script the probe is ignored (``probe_ms`` stays empty), so scripted verdicts do not change.
A spec's ``"machine"`` (a factor, or ``{"every": k, "factors": [...]}``) multiplies both the
benchmark's and the probe's scripted times, a machine state that both follow (correlated).

**Host load.** The CPU sampler's host load (``other_cpu_cores``, see
:class:`pytest_gpuperf.measure.telemetry.CpuSampler`) is not measured under a scripted measurer; a spec's
``"host_load": 0.98`` scripts it (cores used by other processes), e.g. to test "host busy".

**CPU time.** Without a ``"cpu"`` entry a scripted measurer reads no CPU clock (results have no
CPU time, as before). ``"cpu": {"share": 1.0}`` advances the fake thread CPU clock by the call's
scripted wall time times ``share``; ``"cpu": {"ms": 1.0, "cv": 0.02, ...}`` (a spec of the timing's
form) scripts it on its own, untouched by ``"machine"`` and ``"process_factors"``: a neighbour that
stretches the wall clock and not the CPU time. ``"cpu": {..., "parallel": 2.0}``: the process's CPU
time is that many times the thread's (intra-op threads working beside it).
"""

from __future__ import annotations

import json
import math
import os
import random
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from pytest_gpuperf.measure.timing import CpuClocks, Measurer, measure, time_once

#: ``script(i) -> ms``: the duration of the i-th call of the benchmarked function (0-based).
Script = Callable[[int], float]


class FakeClock:
    """A nanosecond clock that only moves when told to (``advance_ms``)."""

    def __init__(self) -> None:
        self.ns = 0

    def __call__(self) -> int:
        return self.ns

    def advance_ms(self, ms: float) -> None:
        self.ns += max(1, int(round(ms * 1e6)))


def noisy(median_ms: float, cv: float = 0.02, seed: int = 0, *, slow_calls: int = 0,
          slow_factor: float = 1.0, stall_every: int = 0, stall_factor: float = 1.0) -> Script:
    """A script of lognormal per-call times: ``median_ms * exp(cv * z_i)``, z_i seeded per call.

    The first ``slow_calls`` calls take ``slow_factor`` times longer (a one-off slow period); every
    ``stall_every``-th call (if > 0) takes ``stall_factor`` times longer (periodic stalls).
    """
    def script(i: int) -> float:
        z = random.Random(seed * 1_000_003 + i).gauss(0.0, 1.0)
        ms = median_ms * math.exp(cv * z)
        if i < slow_calls:
            ms *= slow_factor
        if stall_every and i % stall_every == stall_every - 1:
            ms *= stall_factor
        return ms

    return script


class ScriptedMeasurer(Measurer):
    """A :class:`~pytest_gpuperf.measure.timing.Measurer` whose clock advances ``script(i)`` ms at call i.

    ``script`` is a function of the call index, a sequence (cycled), or a constant (ms). The call
    index runs across warmup, rounds and re-measures of one fixture instance. Always uses the CPU
    protocol (also when the test's device is a GPU), so it is deterministic everywhere.
    """

    def __init__(self, script: Script | Sequence[float] | float,
                 probe_script: Script | Sequence[float] | float | None = None,
                 machine: Script | None = None, host_load: float | None = None,
                 cpu: Mapping[str, Any] | None = None) -> None:
        clock = FakeClock()
        self.fake_thread, self.fake_process = FakeClock(), FakeClock()
        super().__init__(clock, CpuClocks(self.fake_thread, self.fake_process) if cpu is not None else None)
        self.fake = clock
        #: the scripted CPU time (see the module doc): ``share`` of the wall time, or its own script
        self.cpu_share: float | None = float(cpu["share"]) if cpu is not None and "share" in cpu else None
        self.cpu_script: Script | None = (_script_of(cpu) if cpu is not None and self.cpu_share is None
                                          else None)
        self.cpu_parallel = float(cpu.get("parallel", 1.0)) if cpu is not None else 1.0
        self.script: Script = _as_script(script)
        self.probe_script: Script | None = None if probe_script is None else _as_script(probe_script)
        #: ``machine(i) -> factor`` of the i-th event (benchmark call or probe call, counted together).
        self.machine: Script = machine or (lambda _i: 1.0)
        #: the CPU sampler's scripted host load (cores used by other processes; None: not measured)
        self.host_load = host_load
        self.calls = 0
        self.probe_calls = 0
        self.events = 0
        #: op name -> scripted self time per call (ms) of :meth:`profile_ops` (None: profile for real)
        self.ops: dict[str, float] | None = None
        self.ops_seed = 0

    def host_load_meter(self, device: Any, *, measure: bool = True) -> Any:
        """A fixed :class:`~pytest_gpuperf.measure.telemetry.HostLoadMeter` of the scripted
        ``host_load`` on the CPU backend (None: no meter; None on CUDA), whatever ``measure`` says:
        a verdict on scripted timings never depends on what else the test machine runs."""
        if getattr(device, "type", str(device)) != "cpu" or self.host_load is None:
            return None
        from pytest_gpuperf.measure.telemetry import HostLoadMeter

        return HostLoadMeter(fixed_cores=self.host_load)

    def _advance(self, ms: float) -> float:
        wall = ms * self.machine(self.events)
        self.fake.advance_ms(wall)
        self.events += 1
        return wall

    def _timed(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            value = fn(*args, **kwargs)
            wall = self._advance(self.script(self.calls))
            if self.cpu_clocks is not None:
                cpu = wall * self.cpu_share if self.cpu_share is not None else self.cpu_script(self.calls)  # type: ignore[misc]
                self.fake_thread.advance_ms(cpu)
                self.fake_process.advance_ms(cpu * self.cpu_parallel)
            self.calls += 1
            return value

        return call

    def _probe(self) -> None:
        assert self.probe_script is not None
        self._advance(self.probe_script(self.probe_calls))
        self.probe_calls += 1

    def measure(self, fn, args, kwargs, *, options, device, setup=None, rounds=None, warmup_calls=None,
                progress=None, calls_per_round=None, probe=None, lockstep=None):
        probe = self._probe if probe is not None and self.probe_script is not None else None
        return measure(self._timed(fn), args, kwargs, options=options, device="cpu", setup=setup, rounds=rounds,
                       warmup_calls=warmup_calls, progress=progress, clock=self.fake,
                       calls_per_round=calls_per_round, probe=probe, lockstep=lockstep, cpu_clocks=self.cpu_clocks)

    def once(self, fn, args, kwargs, device):
        return time_once(self._timed(fn), args, kwargs, "cpu", clock=self.fake)

    def profile_ops(self, fn, args, kwargs, device, *, cycles, calls, process=0, trace_path=None):
        """With scripted ``ops`` (``{"aten::mm": 0.5, ...}``, ms per call): ``cycles`` synthetic
        :class:`~pytest_gpuperf.verdict.opdiff.OpSample` with 3% seeded noise per op and cycle, the
        call's total the ops' sum plus 5% (and no trace), each op top-level in the profiler's tree
        with nothing inside it (``tree_ms``: ``op`` and ``op > op``); otherwise the real profiler. The function
        is called once (its test's own checks see a real call)."""
        if self.ops is None:
            from pytest_gpuperf.measure.opprofile import profile_ops

            return profile_ops(fn, args, kwargs, device, cycles=cycles, calls=calls, process=process,
                               trace_path=trace_path)
        import random

        from pytest_gpuperf.verdict.opdiff import OpSample

        fn(*args, **kwargs)
        rng = random.Random(self.ops_seed * 7919 + process)
        out = []
        for _ in range(cycles):
            times = {k: v * max(0.5, 1 + rng.gauss(0, 0.03)) for k, v in self.ops.items()}
            tree = {**times, **{f"{k} > {k}": v for k, v in times.items()}}
            out.append(OpSample(times, {k: 1.0 for k in times}, sum(times.values()) * 1.05, None, {}, process,
                                tree, {k: 1.0 for k in tree}))
        return out

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any], slot: tuple[int, int] | None = None) -> "ScriptedMeasurer":
        """From a dict: ``{"ms": 1.0, "cv": 0.02, "seed": 0, "slow_calls": 0, "slow_factor": 1.0,
        "stall_every": 0, "stall_factor": 1.0}`` (see :func:`noisy`), or ``{"sequence": [...]}``;
        optionally ``"probe": <a spec of the same form>`` (the probe's times, ms) and ``"machine"``:
        a factor, or ``{"every": k, "factors": [f0, f1, ...]}`` (events 0..k-1 take f0 times longer,
        the next k f1 times..., cycled) applied to both; ``"host_load"``: the CPU sampler's host load
        (cores used by other processes while it ran); ``"process_factors"``: ``[f0, f1, ...]``, in
        replicate worker process k (``slot`` ``(k, P)``, the process's role) every time is f_k times longer (a
        process-level speed mode). In a worker, the noise seed is offset by 1000 k, so each process
        draws its own noise. ``"rank_factors"``: ``[f0, f1, ...]``, under ``torchrun`` rank r (its
        ``RANK``) takes f_r times longer, and each rank draws its own noise (seed offset by 100 r): a
        straggler rank. ``"world_size_ms"``: ``{"1": 2.0, "2": 1.25, ...}``, the ``ms`` of each world
        size (torchrun's ``WORLD_SIZE``; 1 without it), for scaling tables. ``"ops"``: scripted op
        profiles (:meth:`profile_ops`). ``"cpu"``: the scripted CPU time (see the module doc)."""
        if spec.get("world_size_ms"):
            world = int(os.environ.get("WORLD_SIZE") or 1)
            spec = dict(spec, ms=float(spec["world_size_ms"][str(world)]))
        probe = spec.get("probe")
        machine = _machine_of(spec.get("machine"))
        rank = int(os.environ.get("RANK", "0") or 0) if os.environ.get("WORLD_SIZE") else 0
        if spec.get("rank_factors"):
            rf, inner_m = float(spec["rank_factors"][rank % len(spec["rank_factors"])]), machine
            machine = (lambda i: rf * inner_m(i)) if inner_m is not None else (lambda _i: rf)
        if rank and "sequence" not in spec:
            spec = dict(spec, seed=int(spec.get("seed", 0)) + 100 * rank)
        load = spec.get("host_load")
        k = slot[0] if slot and slot[0] >= 0 else 0  # the extras process (k < 0) times nothing
        factors = spec.get("process_factors")
        if factors:  # worker process k runs factors[k] times slower (a process-level speed mode)
            f, inner = float(factors[k % len(factors)]), machine
            machine = (lambda i: f * inner(i)) if inner is not None else (lambda _i: f)
        if slot and "seed" not in spec and "sequence" not in spec:
            spec = dict(spec, seed=k)  # each worker process its own noise
        elif slot and "seed" in spec:
            spec = dict(spec, seed=int(spec["seed"]) + 1000 * k)
        cpu = spec.get("cpu")
        if cpu is not None and "share" not in cpu and slot and "sequence" not in cpu:
            cpu = dict(cpu, seed=int(cpu.get("seed", 0)) + 1000 * k)  # each worker process its own noise
        measurer = cls(_script_of(spec), None if probe is None else _script_of(probe), machine,
                       None if load is None else float(load), cpu)
        if spec.get("ops"):  # scripted op profiles (issue 32: why it got slower)
            measurer.ops = {str(k): float(v) for k, v in spec["ops"].items()}
            measurer.ops_seed = int(spec.get("seed", 0))
        return measurer

    @classmethod
    def from_file(cls, path: str | Path, test_name: str, slot: tuple[int, int] | None = None) -> "ScriptedMeasurer":
        """The spec for ``test_name`` (else its name without parameters, else ``"*"``) in the JSON
        file at ``path``; ``slot``: the replicate worker's ``(k, P)`` (see :meth:`from_spec`)."""
        specs = json.loads(Path(path).read_text())
        spec = specs.get(test_name, specs.get(test_name.split("[")[0], specs.get("*")))
        if spec is None:
            raise KeyError(f"{path}: no timing spec for {test_name!r} and no '*' entry")
        return cls.from_spec(spec, slot)


def _as_script(script: Script | Sequence[float] | float) -> Script:
    if callable(script):
        return script
    if isinstance(script, (int, float)):
        return lambda _i, v=float(script): v
    values = [float(v) for v in script]
    return lambda i: values[i % len(values)]


def _script_of(spec: Mapping[str, Any]) -> Script:
    if "sequence" in spec:
        return _as_script(list(spec["sequence"]))
    return noisy(float(spec["ms"]), float(spec.get("cv", 0.02)), int(spec.get("seed", 0)),
                 slow_calls=int(spec.get("slow_calls", 0)), slow_factor=float(spec.get("slow_factor", 1.0)),
                 stall_every=int(spec.get("stall_every", 0)), stall_factor=float(spec.get("stall_factor", 1.0)))


def _machine_of(machine: Any) -> Script | None:
    if machine is None:
        return None
    if isinstance(machine, (int, float)):
        return lambda _i, v=float(machine): v
    every = max(1, int(machine.get("every", 1)))
    factors = [float(f) for f in machine["factors"]]
    return lambda i: factors[(i // every) % len(factors)]


#: Conftest text defining ``_gpuperf_script_reference(folder)``, which scripts the process's
#: session-start reference workloads (the real ones are timed on the machine): 1 ms matmul, 1 ms
#: copy and 1 ms of the pure-Python loop's CPU time, or what ``reference.json`` in ``folder`` says
#: (``{"matmul_ms": 1.25, "copy_ms": 1.25}``).
_SCRIPT_REFERENCE = '''
def _gpuperf_script_reference(folder):
    import json
    import pathlib

    from pytest_gpuperf.plugin import session

    path = pathlib.Path(folder, "reference.json")
    session._REFERENCE_CACHE["cpu"] = {"matmul_ms": 1.0, "copy_ms": 1.0, "python_cpu_ms": 1.0, "matmul": "scripted",
                                       "copy": "scripted", "python_cpu": "scripted",
                                       **(json.loads(path.read_text(encoding="utf-8")) if path.exists() else {})}
'''

#: Conftest text that scripts the session-start reference workload too in every process and rank
#: (``_gpuperf_script_reference``), for a scripted test whose verdict reads it (under torchrun a
#: straggler's reference workload says whether its core was slow).
SCRIPTED_REFERENCE = _SCRIPT_REFERENCE + '''
import os as _os

_gpuperf_script_reference(_os.path.dirname(__file__))
'''

#: conftest.py text for an inner pytest session that reads ``timings.json`` in its rootdir; in a
#: worker process (``--gpuperf-processes``) the reference workloads are scripted too
#: (``_gpuperf_script_reference``), so that the machine check of a replicated regression reads no real timing.
SCRIPTED_CONFTEST = _SCRIPT_REFERENCE + '''
import os
import sys

import pytest
from pytest_gpuperf._testing import ScriptedMeasurer
from pytest_gpuperf.plugin.replicates import ROLE_OPTION, slot_of

if any(a.startswith(ROLE_OPTION) for a in sys.argv):  # a worker process
    _gpuperf_script_reference(os.path.dirname(__file__))

@pytest.fixture
def _gpuperf_measurer(request):
    return ScriptedMeasurer.from_file(request.config.rootpath / "timings.json", request.node.name, slot_of(request.config))
'''
