"""Host load on the CPU backend: other processes' CPU time while a benchmark runs (pure parts).

``/proc/stat`` is given as text and the sampler's readers and clock are injected: nothing here
depends on what else the test machine runs.
"""

from __future__ import annotations

import os

import pytest

from pytest_gpuperf.measure import telemetry
from pytest_gpuperf.measure.telemetry import CpuSampler, HostLoadMeter, proc_stat_busy_s
from pytest_gpuperf.verdict.machine import HOST_BUSY_CORES, host_busy, throttle_verdict

HZ = os.sysconf("SC_CLK_TCK")
STAT = """cpu  700 10 200 5000 40 5 5 30 0 0
cpu0 300 5 100 2500 20 2 3 10 0 0
cpu1 400 5 100 2500 20 3 2 20 0 0
intr 12345
"""


def test_proc_stat_sums_busy_ticks_of_the_allowed_cpus():
    # busy = user + nice + system + irq + softirq + steal; idle and iowait are not busy
    busy, steal = proc_stat_busy_s(STAT, cpus={0, 1})
    assert busy == pytest.approx(950 / HZ) and steal == pytest.approx(30 / HZ)
    busy1, steal1 = proc_stat_busy_s(STAT, cpus={1})
    assert busy1 == pytest.approx(530 / HZ) and steal1 == pytest.approx(20 / HZ)
    # no affinity mask known: the aggregate line
    assert proc_stat_busy_s(STAT, cpus=None) == (pytest.approx(950 / HZ), pytest.approx(30 / HZ))


def test_proc_stat_unreadable_is_none():
    assert proc_stat_busy_s("", cpus={0}) is None
    assert proc_stat_busy_s("intr 1 2 3\n", cpus={0}) is None
    assert proc_stat_busy_s("cpu0 a b c d e f g\n", cpus={0}) is None
    assert proc_stat_busy_s(STAT, cpus={7}) is None  # none of the allowed CPUs listed


class Readers:
    """A clock and /proc/stat and own-CPU readers that return scripted values in turn."""

    def __init__(self, wall, busy, own):
        self.wall, self.busy, self.own = list(wall), list(busy), list(own)

    def sampler(self) -> CpuSampler:
        return CpuSampler(HostLoadMeter(stat=lambda: (self.busy.pop(0), 0.1), own=lambda: self.own.pop(0),
                                        clock=lambda: self.wall.pop(0)))


def test_sampler_other_cores_is_machine_busy_minus_own_per_wall_second(monkeypatch):
    monkeypatch.setattr(telemetry, "_cpu_count", lambda: 2)
    # 2 s of wall time: the CPUs were busy 3.9 s, 2.0 s of it this process -> 0.95 other cores
    s = Readers(wall=[10.0, 12.0], busy=[100.0, 103.9], own=[5.0, 7.0]).sampler()
    with s:
        pass
    out = s.summary()
    assert out["other_cpu_cores"] == pytest.approx(0.95) and out["cpu_count"] == 2
    assert out["steal_cpu_cores"] == 0.0
    assert throttle_verdict(out) == "host busy: other processes used 0.95 of 2 CPU cores while it ran"


def test_sampler_quiet_machine_is_not_busy_and_never_negative():
    s = Readers(wall=[0.0, 1.0], busy=[50.0, 50.9], own=[1.0, 2.0]).sampler()  # own > busy: clamped
    with s:
        pass
    assert s.summary()["other_cpu_cores"] == 0.0 and throttle_verdict(s.summary()) is None


def test_sampler_skips_runs_too_short_to_count_and_missing_proc_stat():
    s = Readers(wall=[0.0, 0.1], busy=[50.0, 60.0], own=[0.0, 0.0]).sampler()
    with s:
        pass
    assert "other_cpu_cores" not in s.summary()
    no_stat = CpuSampler(HostLoadMeter(stat=lambda: None))
    with no_stat:
        pass
    assert "other_cpu_cores" not in no_stat.summary()


def test_sampler_scripted_and_disabled_host_load():
    fixed = CpuSampler(HostLoadMeter(fixed_cores=1.2))
    with fixed:
        pass
    assert fixed.summary()["other_cpu_cores"] == 1.2 and throttle_verdict(fixed.summary()).startswith("host busy")
    assert host_busy(fixed.summary()) == throttle_verdict(fixed.summary())
    off = CpuSampler()
    with off:
        pass
    assert "other_cpu_cores" not in off.summary()


def test_threshold_is_strict():
    assert throttle_verdict({"other_cpu_cores": HOST_BUSY_CORES}) is None
    assert host_busy({"other_cpu_cores": HOST_BUSY_CORES}) is None and host_busy(None) is None
    assert throttle_verdict({"other_cpu_cores": HOST_BUSY_CORES + 0.01}) == (
        f"host busy: other processes used {HOST_BUSY_CORES + 0.01:.2f} CPU cores while it ran")


def test_bench_measures_host_load_only_with_the_real_clock():
    import time

    from pytest_gpuperf.plugin.bench import _sampler
    from pytest_gpuperf.measure.timing import Measurer

    from pytest_gpuperf._testing import ScriptedMeasurer

    def Scripted():  # noqa: N802 (a scripted measurer with a fixed host load)
        return ScriptedMeasurer(1.0, host_load=0.9)

    class FakeClock(Measurer):
        pass

    class Dev:
        type = "cpu"

    make = lambda _device: CpuSampler(HostLoadMeter())  # noqa: E731
    real = _sampler(Measurer(), Dev(), make).meter
    assert isinstance(real, HostLoadMeter) and real.fixed_cores is None
    assert _sampler(Scripted(), Dev(), make).meter.fixed_cores == 0.9
    assert _sampler(FakeClock(clock=lambda: 0), Dev(), make).meter is None
    assert _sampler(Measurer(), Dev(), make, measure=False).meter is None
    assert Measurer().clock is time.perf_counter_ns


def test_meter_pools_several_spans():
    """Blocks of an A/B worker: other processes' CPU time over all spans / their wall time."""
    from pytest_gpuperf.measure.telemetry import HostLoadMeter

    wall, busy, own = [0.0, 0.3, 5.0, 5.4], [10.0, 10.5, 20.0, 20.5], [1.0, 1.3, 2.0, 2.4]
    m = HostLoadMeter(stat=lambda: (busy.pop(0), 0.0), own=lambda: own.pop(0), clock=lambda: wall.pop(0))
    with m.span():
        pass
    assert m.summary() == {}  # 0.3 s so far: too short to count
    with m.span():
        pass
    # (0.5 - 0.3) + (0.5 - 0.4) = 0.3 core-seconds of others over 0.7 s
    assert m.summary()["other_cpu_cores"] == pytest.approx(0.3 / 0.7, abs=1e-3)
    broken = HostLoadMeter(stat=lambda: None)
    with broken.span():
        pass
    assert broken.summary() == {}


def test_a_benchmark_too_short_to_count_reads_its_process_s_host_load():
    """Issue 45: a benchmark that stops after a few rounds times too little for /proc/stat's ticks; its
    host load is then the process's over every benchmark it timed so far (a neighbour that runs for
    minutes shows there), marked so."""
    from pytest_gpuperf.measure.telemetry import HostLoadMeter, ProcessLoad

    process = ProcessLoad()

    def meter(wall_s: float, other_s: float) -> HostLoadMeter:
        wall, busy, own = [0.0, wall_s], [10.0, 10.0 + other_s + 0.1], [1.0, 1.1]
        return HostLoadMeter(stat=lambda: (busy.pop(0), 0.0), own=lambda: own.pop(0), clock=lambda: wall.pop(0),
                             process=process)

    first = meter(0.2, 0.2)
    with first.span():
        pass
    assert first.summary() == {}  # 0.2 s in this process so far: nothing to go on
    long = meter(0.6, 0.6)
    with long.span():
        pass
    assert long.summary()["other_cpu_cores"] == pytest.approx(1.0) and "host_load_scope" not in long.summary()
    short = meter(0.05, 0.0)  # its own span saw no neighbour tick
    with short.span():
        pass
    got = short.summary()
    assert got["host_load_scope"] == "process" and got["other_cpu_cores"] == pytest.approx(0.8 / 0.85, abs=1e-3)
    assert host_busy(got) is not None
    alone = HostLoadMeter(stat=lambda: (1.0, 0.0), own=lambda: 0.0, clock=lambda: 0.0)  # no process totals: as before
    with alone.span():
        pass
    assert alone.summary() == {}
