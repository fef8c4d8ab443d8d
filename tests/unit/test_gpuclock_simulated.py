"""The GPU's clock beside the time (issue 49) on the simulated CUDA device: per-round SM clock
readings, throttled rounds left out, the steady-clock warmup, and the verdict that checks cycle
space where the clock moved. The simulated NVML's clock is scripted on the simulated host clock
and its kernels follow the clock (``kernels_follow_clock``), so every figure here is exact."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pytest_gpuperf.core.options import BenchOptions  # noqa: E402
from pytest_gpuperf.measure import timing  # noqa: E402
from pytest_gpuperf.measure.gpuclock import drop_throttled, gpu_clock_of, steady_clock_warmup  # noqa: E402
from pytest_gpuperf.storage.baseline import BaselineEntry  # noqa: E402
from pytest_gpuperf.storage.codec import decode_result, encode_result  # noqa: E402
from pytest_gpuperf.testing import SimulatedCuda  # noqa: E402
from pytest_gpuperf.verdict.compare import Verdict  # noqa: E402
from pytest_gpuperf.verdict.gate import Evidence, Reference, evaluate  # noqa: E402
from pytest_gpuperf.verdict.result import BenchResult  # noqa: E402

CUDA0 = torch.device("cuda", 0)
HW_THERMAL = 0x40
HW_SLOWDOWN = 0x8
SW_POWER_CAP = 0x4


@pytest.fixture
def sim(monkeypatch: pytest.MonkeyPatch) -> SimulatedCuda:
    s = SimulatedCuda(devices=1).install(monkeypatch)
    s.nvml.kernels_follow_clock = True
    return s


def measure(sim: SimulatedCuda, ms: float = 1.0, **options):
    opts = BenchOptions(**{"max_time": 0.3, "target_precision": 0, **options})
    t = timing.Measurer(clock=sim.clock).measure(lambda: sim.kernel(ms=ms), (), {}, options=opts, device=CUDA0)
    return drop_throttled(t)


def test_every_round_gets_its_blocks_clock_and_cycles_stay_when_the_clock_falls(sim: SimulatedCuda) -> None:
    """The clock falls from 1980 to 1425 MHz 0.15 simulated seconds in: the rounds after it read
    1425 MHz and take 1980/1425 times as long, and their cycles per call are the same as before."""
    t0 = sim.host_ns
    sim.nvml.clock_script = lambda ns: 1980 if ns - t0 < 150_000_000 else 1425
    t = measure(sim)
    clock = gpu_clock_of(t)
    assert clock is not None and len(clock.mhz) == len(t.samples_ms) == t.rounds
    assert set(clock.mhz) == {1980.0, 1425.0} and clock.default_mhz == 1980.0
    assert sim.nvml.calls["nvmlDeviceGetClockInfo"] < t.rounds  # one reading per block, not per round
    fast = [s for s, c in zip(t.samples_ms, clock.mhz) if c == 1980.0]
    slow = [s for s, c in zip(t.samples_ms, clock.mhz) if c == 1425.0]
    assert max(slow) / min(fast) > 1.3
    kc = clock.kcycles(t.samples_ms)
    # a block's reading comes after its synchronize: the block that straddles the fall mixes both
    assert sorted(kc)[len(kc) // 2] == pytest.approx(1980.0 * (1.0 + sim.launch_ns / 1e6), rel=0.01)


def test_throttled_rounds_are_left_out_and_kept_when_they_are_most(sim: SimulatedCuda) -> None:
    t0 = sim.host_ns
    # a HW thermal slowdown for a window of the run: those blocks' rounds are left out
    sim.nvml.clock_script = lambda ns: (1980, HW_THERMAL) if 100e6 <= ns - t0 < 160e6 else (1980, 0)
    t = measure(sim)
    clock = gpu_clock_of(t)
    assert t.throttled_dropped > 0 and clock.dropped == t.throttled_dropped and clock.throttled == 0
    assert len(t.samples_ms) == len(clock.mhz) == t.rounds
    assert any("throttled" in n and "left out" in n for n in t.notes)
    # a hardware slowdown for the whole run: nothing would be left, so all are kept
    sim.nvml.clock_script = lambda ns: (1000, HW_SLOWDOWN)
    t = measure(sim)
    assert t.throttled_dropped == 0 and gpu_clock_of(t).throttled == t.rounds
    assert any("all kept" in n for n in t.notes)
    # the power-capped clock of a sustained GEMM (an H200, 2026-11-29: 73% of its maximum, SW power
    # cap): the GPU's normal state at its power limit, no throttle, nothing left out, no note
    sim.nvml.clock_script = lambda ns: (1455, SW_POWER_CAP)
    t = measure(sim)
    assert t.throttled_dropped == 0 and gpu_clock_of(t).throttled == 0
    assert not any("throttled" in n for n in t.notes)


def test_the_steady_clock_warmup_waits_for_the_clock_within_its_bound(sim: SimulatedCuda) -> None:
    """A clock that falls for the first simulated second then holds: the warmup calls until three
    readings 0.2 s apart agree (or its bound), and says which."""
    t0 = sim.host_ns
    sim.nvml.clock_script = lambda ns: max(1425, int(1980 - (ns - t0) / 1e9 * 600))
    t = measure(sim, steady_clock=5.0)
    assert any("settled at 1425 MHz" in n for n in t.notes)
    assert set(gpu_clock_of(t).mhz) == {1425.0}  # timed at the sustained clock
    assert sim.host_ns - t0 > 1e9
    t0 = sim.host_ns
    t = measure(sim, steady_clock=0.3)
    assert any("still moved after 0.3 s" in n for n in t.notes)
    with pytest.raises(ValueError, match="steady_clock"):
        steady_clock_warmup(lambda: None, lambda: None, lambda: 1.0, lambda: 0.0, -1)


def _recorded(sim: SimulatedCuda, mhz: int, ms: float = 1.0) -> BenchResult:
    sim.nvml.clock_script = lambda ns: mhz
    t = measure(sim, ms)
    return BenchResult.from_samples(t.samples_ms, rounds=t.rounds, calls_per_round=t.calls_per_round,
                                    warmup_calls=t.warmup_calls, name="k", device="cuda:0", benchmark_id="k",
                                    gpu_clock=gpu_clock_of(t))


def _encoded(result: BenchResult) -> dict:
    return encode_result(result, environment={}, git_commit=None, timestamp_utc="2026-11-27T00:00:00Z",
                         max_samples=100)


def _verdict(sim: SimulatedCuda, base: BenchResult, mhz: int, ms: float = 1.0):
    sim.nvml.clock_script = lambda ns: mhz
    t = measure(sim, ms)
    entry = BaselineEntry.from_json("k", _encoded(base))
    return evaluate(Evidence(samples_ms=t.samples_ms, device="cuda:0", gpu_clock=gpu_clock_of(t)),
                    Reference.stored(entry, "b.json"), BenchOptions()).comparison


def test_a_slower_clock_is_not_a_regression_and_slower_code_at_any_clock_is(sim: SimulatedCuda) -> None:
    base = _recorded(sim, 1980)
    entry = decode_result(_encoded(base))  # the clock survives the JSON form, thinned like the samples
    assert len(base.samples_ms) > 100 and len(entry.gpu_clock.mhz) == len(entry.samples_ms) == 100
    assert entry.gpu_clock.median_mhz == 1980.0 and _encoded(base)["gpu_clock"]["median_mhz"] == 1980.0
    clock = _verdict(sim, base, 1425)  # the same kernel at 1425 MHz: 1.39x the time, the same cycles
    assert clock.verdict is Verdict.INCONCLUSIVE and clock.ratio > 1.3
    assert "cycles per call" in clock.note and "SM clock 1425 vs 1980 MHz: the clock, not the code" in clock.note
    code = _verdict(sim, base, 1980, ms=1.5)  # slower code at the same clock: the timing verdict stands
    assert code.verdict is Verdict.REGRESSED and "cycles" not in (code.note or "")
    both = _verdict(sim, base, 1425, ms=1.5)  # slower code at a lower clock: regressed in cycles too
    assert both.verdict is Verdict.REGRESSED and "cycles per call regressed too" in both.note
    same = _verdict(sim, base, 1980)
    assert same.verdict is Verdict.UNCHANGED


def test_over_worker_processes_the_clock_is_merged_and_cycles_decide_from_process_medians() -> None:
    """Three worker processes a side (scripted): the baseline's at 1980 MHz, this run's at 1425 MHz
    and 1980/1425 times slower; the processes' clocks merge in process order, and the cycles of
    the process medians show the same work: inconclusive, not regressed."""
    from pytest_gpuperf.verdict.gpuclock import GpuClock

    def side(ms: float, mhz: float) -> tuple[list[tuple[float, ...]], GpuClock]:
        groups = [tuple(ms * (1 + 0.002 * ((i * 7 + p) % 5 - 2)) for i in range(20)) for p in range(3)]
        return groups, GpuClock.merged([GpuClock((mhz,) * 20, 1980.0) for _ in groups])

    base_groups, base_clock = side(1.0, 1980.0)
    assert base_clock.process_medians_mhz == (1980.0,) * 3 and len(base_clock.mhz) == 60
    flat = [v for g in base_groups for v in g]
    medians = tuple(sorted(g)[10] for g in base_groups)
    base = BenchResult.from_samples(flat, rounds=60, calls_per_round=1, warmup_calls=3, name="k", device="cuda:0",
                                    benchmark_id="k", process_medians_ms=medians, gpu_clock=base_clock)
    entry = BaselineEntry.from_json("k", _encoded(base))
    assert entry.cycles_view() is not None and entry.cycles_view().history[-1].process_medians_ms is not None
    groups, clock = side(1980 / 1425, 1425.0)
    c = evaluate(Evidence(process_samples_ms=tuple(groups), device="cuda:0", gpu_clock=clock),
                 Reference.stored(entry, "b.json"), BenchOptions()).comparison
    assert c.verdict is Verdict.INCONCLUSIVE and "the clock, not the code" in c.note
    groups, clock = side(1.5, 1980.0)
    c = evaluate(Evidence(process_samples_ms=tuple(groups), device="cuda:0", gpu_clock=clock),
                 Reference.stored(entry, "b.json"), BenchOptions()).comparison
    assert c.verdict is Verdict.REGRESSED


def test_gpuperf_compare_reads_the_reports_clock_per_round_or_per_process() -> None:
    """``gpuperf compare`` decides over worker processes on their medians: the clock evidence is
    then one reading per process, each its median clock (None when the report lacks them)."""
    from pytest_gpuperf.cli.reports import _clock_evidence
    from pytest_gpuperf.verdict.gpuclock import GpuClock

    per_round = GpuClock((1980.0, 1600.0, 1600.0), 1980.0)
    assert _clock_evidence(per_round, None) is per_round and _clock_evidence(None, 3) is None
    merged = GpuClock.merged([GpuClock((1980.0,) * 4), GpuClock((1600.0,) * 4), GpuClock((1600.0,) * 4)])
    assert _clock_evidence(merged, 3).mhz == (1980.0, 1600.0, 1600.0)
    assert _clock_evidence(merged, 2) is None and _clock_evidence(per_round, 3) is None
