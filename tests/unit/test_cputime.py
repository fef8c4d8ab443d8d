"""Unit tests for CPU time beside the wall clock (issue 45): pytest_gpuperf.verdict.cputime (the
clock rule), its step in pytest_gpuperf.verdict.gate.evaluate (one process and worker processes),
the codec's ``cpu_time`` and the CPU backend reading the CPU clocks around every round.

Seeded synthetic samples (ms): every verdict is reproducible and independent of the machine.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from pytest_gpuperf.core.options import BenchOptions
from pytest_gpuperf.storage.baseline import BaselineEntry
from pytest_gpuperf.storage.codec import decode_result, encode_result
from pytest_gpuperf.verdict.compare import Verdict
from pytest_gpuperf.verdict.cputime import (CPU, WALL, ClockSide, CpuTime, cpu_time_invalid, decide_clock)
from pytest_gpuperf.verdict.gate import Evidence, Reference, evaluate
from pytest_gpuperf.verdict.result import BenchResult

OPTS = BenchOptions()
BUSY = "host busy: other processes used 0.98 of 2 CPU cores while it ran"


def draw(seed: int, n: int = 100, median: float = 1.0, sigma: float = 0.02) -> tuple[float, ...]:
    return tuple(float(v) for v in np.random.default_rng(seed).lognormal(math.log(median), sigma, n))


def neighbour(seed: int, n: int = 100) -> tuple[float, ...]:
    """Wall-clock stretch factors of a bursty neighbour: a quarter of the rounds untouched, the rest 1.5-3x."""
    rng = np.random.default_rng(seed)
    return tuple(float(v) for v in rng.choice([1.0, 1.5, 2.5, 3.0], size=n))


def result(wall, thread, process=None, *, process_medians=None, telemetry=None) -> BenchResult:
    cpu = CpuTime(tuple(thread), tuple(process if process is not None else thread))
    return BenchResult.from_samples(tuple(wall), name="t", device="cpu", rounds=len(wall), calls_per_round=1,
                                    warmup_calls=3, benchmark_id="m.py::t", cpu=cpu, telemetry=telemetry,
                                    process_medians_ms=process_medians)


def stored(r: BenchResult) -> BaselineEntry:
    """The baseline entry an update run would store for ``r`` (through the codec)."""
    return BaselineEntry.from_json("m.py::t", encode_result(r, environment={}, git_commit=None, timestamp_utc=""))


# ----------------------------------------------------------------------------- CpuTime


def test_share_is_a_high_quantile_of_the_per_round_ratios():
    wall = (1.0,) * 7 + (3.0,) * 3  # a neighbour stretched 3 of 10 rounds
    cpu = CpuTime((1.0,) * 10, (1.0,) * 10)
    assert cpu.share(wall) == pytest.approx(1.0)  # its least disturbed rounds: no waiting
    assert CpuTime((0.5,) * 10, (0.5,) * 10).share((1.0,) * 10) == pytest.approx(0.5)  # a wait in every round
    assert cpu.share((1.0,) * 9) is None  # not aligned with these rounds
    assert CpuTime((1.0,) * 4, (2.0,) * 4).parallelism == pytest.approx(2.0)


def test_json_form_round_trips_and_rejects_what_is_not_aligned():
    cpu = CpuTime(draw(1, 10), draw(2, 10), (1.0, 1.1))
    assert CpuTime.from_dict(cpu.to_dict()) == cpu
    assert CpuTime.from_dict({"samples_ms": [1.0], "process_samples_ms": [1.0, 2.0]}) is None
    assert CpuTime.from_dict({"samples_ms": [1.0, -1.0], "process_samples_ms": [1.0, 2.0]}) is None
    assert CpuTime.from_dict(None) is None
    thinned = CpuTime(draw(1, 5000), draw(2, 5000)).to_dict(max_samples=2000)
    assert len(thinned["samples_ms"]) == len(thinned["process_samples_ms"]) == 2000


def test_merged_keeps_process_order_and_each_process_median():
    a, b = CpuTime((1.0, 3.0), (1.0, 3.0)), CpuTime((5.0, 7.0), (5.0, 7.0))
    m = CpuTime.merged([a, b])
    assert m.samples_ms == (1.0, 3.0, 5.0, 7.0) and m.process_medians_ms == (2.0, 6.0)
    assert m.groups([2, 2]) == [(1.0, 3.0), (5.0, 7.0)]
    assert CpuTime.merged([a, None]) is None


def test_codec_carries_cpu_time_and_thins_it_with_the_samples():
    r = result(draw(1, 3000), draw(2, 3000))
    back = decode_result(encode_result(r, environment={}, git_commit=None, timestamp_utc=""))
    assert back.cpu == r.cpu
    entry = encode_result(r, environment={}, git_commit=None, timestamp_utc="", max_samples=2000)
    assert len(entry["cpu_time"]["samples_ms"]) == len(entry["samples_ms"]) == 2000
    assert entry["cpu_time"]["median_ms"] == pytest.approx(r.cpu.median_ms)  # of all the samples
    assert decode_result(entry).cpu is not None
    plain = BenchResult.from_samples((1.0, 2.0), name="t", device="cpu", rounds=2, calls_per_round=1, warmup_calls=0)
    assert "cpu_time" not in encode_result(plain, environment={}, git_commit=None, timestamp_utc="")


def test_baseline_entry_cpu_view_uses_the_history_of_cpu_medians_when_every_run_has_one():
    e = stored(result(draw(1), draw(2, median=0.5)))
    view = e.cpu_view()
    assert view.samples_ms == e.cpu_time.samples_ms and view.run_medians_ms == (pytest.approx(e.cpu_time.median_ms),)
    assert e.history[-1].cpu_median_ms == pytest.approx(e.cpu_time.median_ms)
    plain = BaselineEntry.from_samples("m.py::t", draw(1))
    assert plain.cpu_time is None and plain.cpu_view() is None and plain.host_busy is None
    assert stored(result(draw(1), draw(1), telemetry={"other_cpu_cores": 0.98, "cpu_count": 2})).host_busy == BUSY


# ----------------------------------------------------------------------------- the rule


@pytest.mark.parametrize("current, baseline, why", [
    (ClockSide(1.0, 1.0), ClockSide(None, None), "has no CPU time"),
    (ClockSide(1.0, 2.0), ClockSide(1.0, 1.0), "other threads work"),
    (ClockSide(1.0, 1.0), ClockSide(1.0, 1.8), "other threads work"),  # lost parallelism: the baseline had it
    (ClockSide(0.5, 1.0), ClockSide(1.0, 1.0), "the call waits"),  # a sleep, a read
    (ClockSide(0.92, 1.0), ClockSide(1.0, 1.0), "waits more than the baseline's"),  # 8% more waiting, quiet
])
def test_cpu_time_is_not_used_where_the_call_waits_or_other_threads_work(current, baseline, why):
    assert why in cpu_time_invalid(current, baseline, 0.05)


def test_cpu_time_is_used_for_single_threaded_work_that_does_not_wait():
    assert cpu_time_invalid(ClockSide(0.99, 1.0), ClockSide(1.0, 1.02), 0.05) is None
    # on a busy host the share is lowered by the neighbour, so the two sides' shares are not compared
    assert cpu_time_invalid(ClockSide(0.92, 1.0, BUSY), ClockSide(1.0, 1.0), 0.05) is None


class _C:
    def __init__(self, verdict: str) -> None:
        self.verdict = Verdict(verdict)


@pytest.mark.parametrize("wall, cpu, invalid, busy, clock", [
    ("regressed", "unchanged", None, None, WALL),  # quiet: a slowdown only the wall clock sees fails
    ("unchanged", "regressed", None, None, WALL),  # quiet: the wall clock's decision stands
    ("inconclusive", "unchanged", None, None, CPU),  # quiet: CPU time decides what the wall clock could not
    ("inconclusive", "inconclusive", None, None, WALL),
    ("inconclusive", "unchanged", None, BUSY, CPU),  # busy: CPU time decides
    ("inconclusive", "regressed", None, BUSY, CPU),
    ("inconclusive", "unchanged", "the call waits", BUSY, WALL),  # busy, but the call waits: no decision
])
def test_decide_clock(wall, cpu, invalid, busy, clock):
    w, c = _C(wall), _C(cpu)
    chosen, name = decide_clock(w, c, invalid, busy)
    assert name == clock and chosen is (c if clock == CPU else w)
    assert decide_clock(w, None, None, busy) == (w, WALL)


# ----------------------------------------------------------------------------- in evaluate


def _evaluate(base: BenchResult, wall, thread, process=None, busy=None, groups=None):
    e = stored(base)
    cpu = CpuTime(tuple(thread), tuple(process if process is not None else thread))
    ev = Evidence(samples_ms=tuple(wall), process_samples_ms=groups, cpu=cpu, host_busy=busy, throttle=busy,
                  device="cpu")
    return evaluate(ev, Reference.stored(e, "b.json"), OPTS, benchmark_id="m.py::t").comparison


def test_one_process_on_a_busy_host_a_neighbour_is_not_a_regression_and_a_slowdown_is():
    base = result(draw(1), draw(1))
    stretch = neighbour(5)
    wall = [c * s for c, s in zip(draw(3), stretch)]
    c = _evaluate(base, wall, draw(3), busy=BUSY)
    assert (c.verdict, c.clock) == (Verdict.UNCHANGED, CPU) and "decided on CPU time" in c.note
    slow = [2 * c * s for c, s in zip(draw(3), stretch)]
    c = _evaluate(base, slow, [2 * v for v in draw(3)], busy=BUSY)
    assert (c.verdict, c.clock) == (Verdict.REGRESSED, CPU) and c.ratio == pytest.approx(2.0, rel=0.03)
    # without CPU time the same busy host leaves it inconclusive, as before
    e = stored(base)
    c = evaluate(Evidence(samples_ms=tuple(slow), throttle=BUSY, host_busy=BUSY), Reference.stored(e), OPTS).comparison
    assert c.verdict is Verdict.INCONCLUSIVE and c.clock is None


def test_one_process_on_a_quiet_host_the_wall_clock_decides_a_sleep():
    base = result(draw(1), draw(1))
    c = _evaluate(base, [2 * v for v in draw(3)], draw(3))  # half of each call asleep: CPU time unchanged
    assert (c.verdict, c.clock) == (Verdict.REGRESSED, WALL)
    c = _evaluate(base, draw(3), draw(3))
    assert (c.verdict, c.clock) == (Verdict.UNCHANGED, WALL)


def test_worker_processes_on_a_busy_host_are_decided_over_their_cpu_time_medians():
    medians = (1.0, 1.01, 0.99)
    base_groups = [draw(10 + k, 40, m) for k, m in enumerate(medians)]
    base = result([v for g in base_groups for v in g], [v for g in base_groups for v in g],
                  process_medians=medians)
    base = base.replace(cpu=CpuTime.merged([CpuTime(g, g) for g in base_groups]))
    cpu_groups = [draw(20 + k, 40, m) for k, m in enumerate((1.0, 1.005, 0.995))]
    # each process stretched differently by the neighbour: 1x, 2.2x, 1.4x on most rounds
    wall_groups = tuple(tuple(v * (f if i % 4 else 1.0) for i, v in enumerate(g))
                        for g, f in zip(cpu_groups, (1.0, 2.2, 1.4)))
    thread = [v for g in cpu_groups for v in g]
    c = _evaluate(base, [v for g in wall_groups for v in g], thread, busy=BUSY, groups=wall_groups)
    assert (c.verdict, c.clock) == (Verdict.UNCHANGED, CPU) and c.processes == 3
    slow = tuple(tuple(1.3 * v for v in g) for g in wall_groups)
    c = _evaluate(base, [v for g in slow for v in g], [1.3 * v for v in thread], busy=BUSY, groups=slow)
    assert (c.verdict, c.clock) == (Verdict.REGRESSED, CPU)


# ----------------------------------------------------------------------------- the CPU backend


def test_scripted_cpu_backend_reads_the_cpu_clocks_around_every_round():
    from pytest_gpuperf._testing import ScriptedMeasurer

    m = ScriptedMeasurer.from_spec({"ms": 1.0, "cv": 0.0, "machine": 2.0, "cpu": {"ms": 1.0, "cv": 0.0,
                                                                                "parallel": 3.0}})
    t = m.measure(sum, (range(10),), {}, options=BenchOptions(max_time=0.05, warmup_time=0.0), device="cpu")
    assert len(t.cpu_samples_ms) == len(t.process_cpu_samples_ms) == len(t.samples_ms) > 0
    assert all(w == pytest.approx(2.0) for w in t.samples_ms)  # the neighbour stretched the wall clock...
    assert all(c == pytest.approx(1.0) for c in t.cpu_samples_ms)  # ...not the thread's CPU time
    assert all(p == pytest.approx(3.0) for p in t.process_cpu_samples_ms)
    assert ScriptedMeasurer.from_spec({"ms": 1.0}).cpu_clocks is None  # no CPU time unless scripted


def test_real_cpu_backend_reads_cpu_time_for_every_round():
    from pytest_gpuperf.measure.timing import Measurer

    t = Measurer().measure(sum, (range(1000),), {}, options=BenchOptions(max_time=0.05, warmup_time=0.01),
                           device="cpu")
    assert len(t.cpu_samples_ms) == len(t.samples_ms) and all(v > 0 for v in t.cpu_samples_ms)


def _ab_blocks(b_cpu_factor: float, b_stretch: float, pairs: int = 2) -> tuple:
    """A/B blocks (ABBA per process pair) whose thread CPU time is A's x1 and B's x ``b_cpu_factor``,
    with B's wall clock stretched ``b_stretch``-fold in 3 of every 4 rounds (a neighbour that hit
    B's blocks, as the scheduler does)."""
    from pytest_gpuperf.verdict.paired import Block, abba_schedule

    out = []
    for p in range(pairs):
        for pos, side in enumerate(abba_schedule(4, seed=p)):
            cpu = draw(100 * p + pos, 20, b_cpu_factor if side == "B" else 1.0, 0.01)
            wall = tuple(v * (b_stretch if side == "B" and i % 4 else 1.0) for i, v in enumerate(cpu))
            out.append(Block(side, p, pos, wall, cpu, cpu))
    return tuple(out)


def test_ab_on_a_busy_host_decides_on_cpu_time():
    ref = Reference.ab("main", measured=True)
    for factor, verdict in ((1.0, Verdict.UNCHANGED), (2.0, Verdict.REGRESSED)):
        c = evaluate(Evidence(ab_blocks=_ab_blocks(factor, 400.0), throttle=BUSY, host_busy=BUSY), ref,
                     OPTS).comparison
        assert (c.verdict, c.clock) == (verdict, CPU), c
        assert c.ratio == pytest.approx(factor, rel=0.03) and "decided on CPU time" in c.note
    # a quiet host: the wall clock decides (here B's stretch is B's own waiting: a regression)
    c = evaluate(Evidence(ab_blocks=_ab_blocks(1.0, 2.0)), ref, OPTS).comparison
    assert (c.verdict, c.clock) == (Verdict.REGRESSED, WALL)


def _threaded_ab_blocks(b_factors: tuple[float, ...]) -> tuple:
    """A/B blocks of a call with intra-op threads (process CPU time twice the thread's, so CPU time
    cannot decide and the wall clock does): B's blocks ``b_factors[p]`` times A's in process pair p."""
    from pytest_gpuperf.verdict.paired import Block, abba_schedule

    out = []
    for p, factor in enumerate(b_factors):
        for pos, side in enumerate(abba_schedule(4, seed=p)):
            wall = draw(100 * p + pos, 20, factor if side == "B" else 1.0, 0.01)
            out.append(Block(side, p, pos, wall, wall, tuple(2 * v for v in wall)))
    return tuple(out)


def test_a_busy_ab_regression_stands_only_when_both_sides_were_alike_and_every_pair_regressed():
    # issue 45: with one core busy, tensordict's true +50% slowdowns of threaded calls read 1.24x-18.9x
    # in every A/B pair and were passed as inconclusive ("host busy: the regression is not trusted")
    from pytest_gpuperf.verdict.machine import busy_alike

    ref = Reference.ab("main", measured=True)
    alike = busy_alike({"other_cpu_cores": 0.74, "cpu_count": 2}, {"other_cpu_cores": 0.77, "cpu_count": 2})
    assert alike == "A 0.74, B 0.77 of 2 CPU cores"

    def judged(factors: tuple[float, ...], both: str | None):
        return evaluate(Evidence(ab_blocks=_threaded_ab_blocks(factors), throttle=BUSY, host_busy=BUSY,
                                 busy_alike=both), ref, OPTS).comparison

    c = judged((1.5, 1.6, 1.5), alike)
    assert (c.verdict, c.clock) == (Verdict.REGRESSED, WALL), c
    assert "alike on both sides (A 0.74, B 0.77 of 2 CPU cores): the regression stands" in c.note
    assert "CPU time cannot decide" in c.note
    # the neighbour took more from one side's blocks (a neighbour that hit B's): not trusted
    c = judged((1.5, 1.6, 1.5), busy_alike({"other_cpu_cores": 0.2}, {"other_cpu_cores": 0.95}))
    assert c.verdict is Verdict.INCONCLUSIVE and "the regression is not trusted" in c.note
    # alike, but one pair at 1.02x (under 1+T = 1.05x): a process's speed mode may carry it, not trusted
    c = judged((1.5, 1.02, 1.5), alike)
    assert c.verdict is Verdict.INCONCLUSIVE, c
    # alike and unchanged code: nothing to trust, nothing fails
    assert judged((1.0, 1.0, 1.0), alike).verdict is not Verdict.REGRESSED


def test_two_host_loads_are_alike_only_when_read_close_and_busy():
    from pytest_gpuperf.verdict.machine import busy_alike

    assert busy_alike({"other_cpu_cores": 0.2}, {"other_cpu_cores": 0.3}) is None  # quiet: nothing to lift
    assert busy_alike({"other_cpu_cores": 0.6}, {"other_cpu_cores": 0.9}) is None  # 0.3 apart
    assert busy_alike({"other_cpu_cores": 0.7}, {"other_cpu_cores": 0.9}) == "A 0.70, B 0.90 CPU cores"
    assert busy_alike(None, {"other_cpu_cores": 0.9}) is None and busy_alike({}, {}) is None


def test_a_baseline_recorded_on_a_busy_host_says_so_and_that_its_cpu_time_stays_valid():
    from pytest_gpuperf.reporting.report import noisy_baseline_warning

    busy = {"other_cpu_cores": 0.98, "cpu_count": 2}
    wall = [c * s for c, s in zip(draw(3), neighbour(5))]
    text = noisy_baseline_warning("m.py::t", result(wall, draw(3), telemetry=busy))
    assert text.startswith("m.py::t: baseline recorded on a busy host (host busy: other processes used 0.98 of 2")
    assert "its CPU time (IQR" in text and "stays valid" in text
    quiet = noisy_baseline_warning("m.py::t", result(wall, draw(3), telemetry={"other_cpu_cores": 0.1}))
    assert quiet.startswith("m.py::t: noisy baseline recorded")  # noisy for another reason: the generic warning
    assert noisy_baseline_warning("m.py::t", result(draw(3), draw(3))) is None


def test_on_cuda_the_host_cpu_time_is_shown_and_never_decides():
    base = result(draw(1), draw(1))
    e = stored(base)
    slow = [2 * c * s for c, s in zip(draw(3), neighbour(5))]
    ev = Evidence(samples_ms=tuple(slow), cpu=CpuTime(draw(3), draw(3)), host_busy=BUSY, throttle=BUSY, device="cuda:0")
    c = evaluate(ev, Reference.stored(e), OPTS).comparison
    assert c.clock is None and c.verdict is Verdict.INCONCLUSIVE  # the events' verdict and the guard, as before
