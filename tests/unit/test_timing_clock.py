"""Unit tests of the CPU measurement protocol (pytest_gpuperf.measure.timing) on a fake clock.

Every test injects a clock that only moves when the benchmarked function is called (a
:class:`pytest_gpuperf._testing.FakeClock`, directly or through a ``ScriptedMeasurer``), so the
warmup, batching, round budget, early stopping and progress reports are checked exactly and do
not depend on the speed or load of the machine.
"""

from __future__ import annotations

import gc
import json
import math

import pytest

from pytest_gpuperf.measure import timing
from pytest_gpuperf._testing import FakeClock, ScriptedMeasurer, noisy
from pytest_gpuperf.core.options import BenchOptions
from pytest_gpuperf.measure.timing import CPU_MIN_ROUND_S, LONG_CALL_S, MIN_WARMUP_CALLS, Measurer, Timing

#: Options whose only stopping rule is the max_time budget (no early stopping).
BUDGET = BenchOptions(target_precision=0.0)


class Counting:
    """A benchmarked function that counts its calls and records what ran (and in which phase)."""

    def __init__(self) -> None:
        self.calls = 0
        self.log: list[str] = []
        self.gc_during: list[bool] = []

    def __call__(self, *args, **kwargs):
        self.calls += 1
        self.log.append("fn")
        self.gc_during.append(gc.isenabled())
        return ("value", self.calls, args, kwargs)


def scripted(ms, fn=None, *, options=BUDGET, **kw) -> tuple[Timing, ScriptedMeasurer, Counting]:
    """Measure ``fn`` (default: a :class:`Counting`) with calls scripted to take ``ms`` (ms)."""
    fn = fn or Counting()
    m = ScriptedMeasurer(ms)
    t = m.measure(fn, (), {}, options=options, device="cpu", **kw)
    return t, m, fn


# --------------------------------------------------------------------------------------------
# the fake clock itself
# --------------------------------------------------------------------------------------------


def test_fake_clock_moves_only_when_told():
    c = FakeClock()
    assert c() == 0 and c() == 0
    c.advance_ms(1.5)
    assert c() == 1_500_000
    c.advance_ms(0.0)  # never stands still on an advance: at least 1 ns
    assert c() == 1_500_001
    c.advance_ms(0.01)
    assert c() == 1_510_001


def test_measure_with_an_injected_clock_directly():
    # timing.measure(..., clock=) on the CPU: the function advances the clock by 2 ms per call.
    clock = FakeClock()
    calls = []

    def fn(x, *, y):
        calls.append((x, y))
        clock.advance_ms(2.0)
        return x + y

    t = timing.measure(fn, (1,), {"y": 2}, options=BenchOptions(min_rounds=5, max_time=0.02, target_precision=0),
                       device="cpu", clock=clock)
    assert t.value == 3 and set(calls) == {(1, 2)}
    assert t.samples_ms == (2.0,) * t.rounds  # per-call times in ms, exact on the fake clock
    assert t.calls_per_round == 1
    assert t.rounds == 10  # 20 ms budget of 2 ms rounds
    assert t.warmup_calls == math.ceil(0.025 / 0.002)  # default warmup_time of fake time
    assert len(calls) == t.warmup_calls + t.rounds


def test_measurer_uses_its_clock():
    clock = FakeClock()

    def fn():
        clock.advance_ms(4.0)
        return "done"

    m = Measurer(clock)
    assert m.clock is clock
    t = m.measure(fn, (), {}, options=BenchOptions(min_rounds=3, max_rounds=3), device="cpu")
    assert t.samples_ms == (4.0, 4.0, 4.0) and t.value == "done"
    once = m.once(fn, (), {}, "cpu")
    assert once.samples_ms == (4.0,)


# --------------------------------------------------------------------------------------------
# warmup
# --------------------------------------------------------------------------------------------


def test_warmup_runs_until_warmup_time_of_fake_time():
    t, m, fn = scripted(1.0, options=BenchOptions(warmup_time=0.025, target_precision=0, max_rounds=10,
                                                   min_rounds=10))
    assert t.warmup_calls == 25  # 25 calls of 1 ms = 0.025 s
    assert fn.calls == m.calls == 25 + t.rounds * t.calls_per_round


def test_warmup_runs_at_least_min_warmup_calls():
    assert MIN_WARMUP_CALLS == 3
    for warmup_time in (0.0, 0.001):
        t, _, _ = scripted(10.0, options=BenchOptions(warmup_time=warmup_time, min_rounds=1, max_rounds=1))
        assert t.warmup_calls == MIN_WARMUP_CALLS
    # Calls longer than the warmup time but shorter than LONG_CALL_S: still 3.
    t, _, _ = scripted(50.0, options=BenchOptions(warmup_time=0.025, min_rounds=1, max_rounds=1))
    assert t.warmup_calls == MIN_WARMUP_CALLS


def test_a_long_call_is_warmed_up_by_one_call():
    """Issue 45: a call of LONG_CALL_S or more is warmed up by one call (no second call to estimate
    it either); the warmup time still holds, and a shorter call keeps the floor of 3."""
    assert LONG_CALL_S == pytest.approx(0.1)
    t, m, fn = scripted(LONG_CALL_S * 1e3 * 1.5, options=BenchOptions(warmup_time=0.025, min_rounds=4, max_rounds=4))
    assert t.warmup_calls == 1 and t.rounds == 4 and fn.calls == 1 + 4
    t, _, _ = scripted(LONG_CALL_S * 1e3 * 1.5, options=BenchOptions(warmup_time=0.4, min_rounds=1, max_rounds=1))
    assert t.warmup_calls == 3  # 0.4 s of warmup asked for: three 0.15 s calls
    t, _, _ = scripted(LONG_CALL_S * 1e3 * 0.9, options=BenchOptions(warmup_time=0.025, min_rounds=1, max_rounds=1))
    assert t.warmup_calls == MIN_WARMUP_CALLS


@pytest.mark.parametrize("ms, warmup_time, expected", [(1.0, 0.1, 100), (2.0, 0.01, 5), (0.5, 0.004, 8)])
def test_warmup_length_follows_fake_time(ms, warmup_time, expected):
    t, _, _ = scripted(ms, options=BenchOptions(warmup_time=warmup_time, min_rounds=1, max_rounds=1))
    assert t.warmup_calls == expected


@pytest.mark.parametrize("warmup_rounds", [2, 5, 40])
def test_exactly_warmup_rounds_calls_when_given(warmup_rounds):
    # warmup_time says 100 calls; warmup_rounds wins.
    opts = BenchOptions(warmup_time=0.1, min_rounds=4, max_rounds=4)
    t, m, fn = scripted(1.0, options=opts, warmup_calls=warmup_rounds)
    assert t.warmup_calls == warmup_rounds
    assert fn.calls == warmup_rounds + 4 * t.calls_per_round


@pytest.mark.parametrize("warmup_rounds, estimate_calls", [(0, 2), (1, 1)])
def test_warmup_rounds_below_two_adds_counted_estimate_calls(warmup_rounds, estimate_calls):
    # The per-call estimate needs two calls: they are made and counted as warmup, so the
    # reported warmup_rounds is what the function really ran before the timed rounds.
    opts = BenchOptions(min_rounds=4, max_rounds=4)
    t, _, fn = scripted(1.0, options=opts, warmup_calls=warmup_rounds)
    assert t.warmup_calls == warmup_rounds + estimate_calls == 2
    assert fn.calls == t.warmup_calls + 4


def test_gc_enabled_in_warmup_and_disabled_in_rounds():
    assert gc.isenabled()
    t, _, fn = scripted(1.0, options=BenchOptions(min_rounds=5, max_rounds=5), warmup_calls=3)
    assert fn.gc_during == [True] * 3 + [False] * 5
    assert gc.isenabled()  # restored


# --------------------------------------------------------------------------------------------
# batching
# --------------------------------------------------------------------------------------------


def test_short_calls_are_batched():
    t, m, fn = scripted(0.01, options=BenchOptions(min_rounds=20, max_rounds=20))
    cpr = math.ceil(CPU_MIN_ROUND_S / 1e-5)
    assert cpr >= 10
    assert t.calls_per_round == cpr
    assert t.rounds == 20 == len(t.samples_ms)
    assert all(s == pytest.approx(0.01, rel=1e-9) for s in t.samples_ms)  # per call, not per round
    assert fn.calls == t.warmup_calls + 20 * cpr


def test_batch_size_tracks_the_warmup_estimate():
    # 0.025 ms calls: 4 per 100 µs round.
    t, _, _ = scripted(0.025, options=BenchOptions(min_rounds=5, max_rounds=5))
    assert t.calls_per_round == math.ceil(CPU_MIN_ROUND_S / 25e-6)
    assert all(s == pytest.approx(0.025, rel=1e-9) for s in t.samples_ms)


@pytest.mark.parametrize("ms", [2.0, 0.1, 0.5])
def test_calls_of_at_least_the_minimum_round_are_not_batched(ms):
    t, _, fn = scripted(ms, options=BenchOptions(min_rounds=7, max_rounds=7))
    assert t.calls_per_round == 1
    assert t.samples_ms == pytest.approx((ms,) * 7, rel=1e-9)
    assert fn.calls == t.warmup_calls + 7


def test_estimate_uses_the_late_half_of_the_warmup():
    # Cold first calls (10x slower) do not prevent batching of a 0.01 ms function.
    script = noisy(0.01, cv=0.0, slow_calls=3, slow_factor=10.0)
    t, _, _ = scripted(script, options=BenchOptions(min_rounds=5, max_rounds=5), warmup_calls=10)
    assert t.calls_per_round == math.ceil(CPU_MIN_ROUND_S / 1e-5)


# --------------------------------------------------------------------------------------------
# setup
# --------------------------------------------------------------------------------------------


def test_setup_forces_one_call_per_round_and_runs_before_every_call():
    fn = Counting()

    def setup():
        fn.log.append("setup")
        return None

    t, _, _ = scripted(0.01, fn, options=BenchOptions(min_rounds=6, max_rounds=6), setup=setup, warmup_calls=3)
    assert t.calls_per_round == 1  # 0.01 ms would be batched without setup
    assert t.rounds == 6
    assert fn.log == ["setup", "fn"] * (3 + 6)


def test_setup_can_replace_the_arguments_and_is_untimed():
    fn = Counting()
    counter = iter(range(1000))
    m = ScriptedMeasurer(1.0)

    def setup():
        m.fake.advance_ms(100.0)  # a slow setup: must not show in the samples
        return ((next(counter),), {"k": "v"})

    t = m.measure(fn, ("ignored",), {}, options=BenchOptions(min_rounds=4, max_rounds=4), device="cpu", setup=setup,
                  warmup_calls=2)
    assert t.value == ("value", 6, (5,), {"k": "v"})  # 2 warmup + 4 rounds, fresh args each time
    assert t.samples_ms == (1.0,) * 4  # setup is untimed


def test_setup_with_a_bad_return_value_raises():
    with pytest.raises(TypeError, match="setup must return"):
        scripted(1.0, setup=lambda: 42)


# --------------------------------------------------------------------------------------------
# how many rounds: max_time, min_rounds, max_rounds, target_precision, fixed rounds
# --------------------------------------------------------------------------------------------


def test_max_time_budget_stops_rounds():
    t, _, _ = scripted(1.0, options=BenchOptions(max_time=0.05, target_precision=0.0))
    assert 50 <= t.rounds <= 51  # 50 ms of 1 ms rounds
    assert t.rounds >= BenchOptions().min_rounds


@pytest.mark.parametrize("max_time, expected", [(0.2, 100), (0.5, 250)])
def test_max_time_budget_scales(max_time, expected):
    t, _, _ = scripted(2.0, options=BenchOptions(max_time=max_time, target_precision=0.0))
    assert expected <= t.rounds <= expected + 1


def test_min_rounds_beat_the_budget():
    t, _, _ = scripted(10.0, options=BenchOptions(max_time=0.001, min_rounds=12, target_precision=0.0))
    assert t.rounds == 12


def test_max_rounds_caps():
    t, _, _ = scripted(1.0, options=BenchOptions(max_time=1000.0, min_rounds=10, max_rounds=30, target_precision=0.0))
    assert t.rounds == 30 == len(t.samples_ms)


def test_early_stop_when_samples_are_constant():
    opts = BenchOptions(max_time=10.0, min_rounds=10, target_precision=0.005)
    t, _, _ = scripted(1.0, options=opts)
    assert t.rounds == 10  # the first precision check, at min_rounds, succeeds


def test_no_early_stop_with_target_precision_zero():
    t, _, _ = scripted(1.0, options=BenchOptions(max_time=0.2, min_rounds=10, target_precision=0.0))
    assert 200 <= t.rounds <= 201  # runs the whole budget


def test_noisy_samples_need_more_rounds_for_precision():
    opts = BenchOptions(max_time=10.0, min_rounds=10, max_rounds=5000, target_precision=0.005)
    quiet, _, _ = scripted(noisy(1.0, cv=0.001, seed=1), options=opts)
    loud, _, _ = scripted(noisy(1.0, cv=0.05, seed=1), options=opts)
    assert quiet.rounds == 10
    assert 10 * quiet.rounds < loud.rounds < 5000  # stopped by precision, not by a cap
    # Checks happen at n = 10, 20, ..., 40, then every n // 4 rounds: the stop is at a check.
    checks, n = [], 10
    while n <= loud.rounds:
        checks.append(n)
        n += max(10, n // 4)
    assert loud.rounds in checks
    # With a 5x looser target the same script stops earlier.
    looser, _, _ = scripted(noisy(1.0, cv=0.05, seed=1), options=BenchOptions(
        max_time=10.0, min_rounds=10, max_rounds=5000, target_precision=0.025))
    assert looser.rounds < loud.rounds
    assert looser.samples_ms == loud.samples_ms[:looser.rounds]  # same script, same samples


@pytest.mark.parametrize("rounds", [1, 7, 25])
def test_fixed_rounds_are_exact(rounds):
    # Fixed rounds ignore max_time, min_rounds and early stopping.
    opts = BenchOptions(max_time=0.001, min_rounds=10, target_precision=0.5)
    t, _, fn = scripted(1.0, options=opts, rounds=rounds, warmup_calls=2)
    assert t.rounds == rounds == len(t.samples_ms)
    assert fn.calls == 2 + rounds * t.calls_per_round


def test_fixed_rounds_beyond_max_rounds():
    t, _, _ = scripted(1.0, options=BenchOptions(min_rounds=1, max_rounds=5), rounds=12)
    assert t.rounds == 12


# --------------------------------------------------------------------------------------------
# progress
# --------------------------------------------------------------------------------------------


def test_progress_is_called_with_fake_elapsed_seconds():
    seen = []
    t, _, _ = scripted(10.0, options=BenchOptions(max_time=3.5, target_precision=0.0),
                       progress=lambda n, elapsed, med: seen.append((n, elapsed, med)))
    assert 350 <= t.rounds <= 351
    assert len(seen) == 3  # about once a second of (fake) time
    for k, (n, elapsed, med) in enumerate(seen, start=1):
        assert n in (100 * k, 100 * k + 1)  # rounds done
        assert elapsed == pytest.approx(n * 0.010)  # seconds since the rounds started
        assert elapsed == pytest.approx(float(k), abs=0.011)
        assert med == pytest.approx(10.0)  # median so far, ms


def test_no_progress_in_short_runs_and_none_is_fine():
    seen = []
    scripted(1.0, options=BenchOptions(max_time=0.5, target_precision=0.0), progress=lambda *a: seen.append(a))
    assert seen == []
    t, _, _ = scripted(1.0, options=BenchOptions(max_time=0.5, target_precision=0.0), progress=None)
    assert t.rounds >= 500


# --------------------------------------------------------------------------------------------
# determinism, units, smoke mode
# --------------------------------------------------------------------------------------------


def test_same_script_gives_identical_samples():
    opts = BenchOptions(max_time=0.2, target_precision=0.01)
    a, _, _ = scripted(noisy(1.0, cv=0.05, seed=7), options=opts)
    b, _, _ = scripted(noisy(1.0, cv=0.05, seed=7), options=opts)
    assert a.samples_ms == b.samples_ms
    assert (a.rounds, a.calls_per_round, a.warmup_calls) == (b.rounds, b.calls_per_round, b.warmup_calls)
    c, _, _ = scripted(noisy(1.0, cv=0.05, seed=8), options=opts)
    assert c.samples_ms != a.samples_ms


def test_samples_are_the_scripted_times_in_ms():
    script = noisy(3.0, cv=0.1, seed=2)
    t, _, _ = scripted(script, options=BenchOptions(min_rounds=20, max_rounds=20), warmup_calls=4)
    assert t.calls_per_round == 1
    expected = [round(script(i) * 1e6) / 1e6 for i in range(4, 24)]  # the clock has ns resolution
    assert list(t.samples_ms) == pytest.approx(expected, rel=1e-12)
    assert all(isinstance(s, float) for s in t.samples_ms)


def test_call_index_runs_across_warmup_and_rounds():
    t, m, _ = scripted([1.0, 3.0], options=BenchOptions(min_rounds=6, max_rounds=6), warmup_calls=2)
    assert t.calls_per_round == 1
    assert t.samples_ms == (1.0, 3.0, 1.0, 3.0, 1.0, 3.0)
    assert m.calls == 8


def test_once_returns_one_scripted_sample():
    fn = Counting()
    m = ScriptedMeasurer(2.5)
    t = m.once(fn, (1,), {"a": 2}, "cpu")
    assert t.samples_ms == (2.5,)
    assert (t.rounds, t.calls_per_round, t.warmup_calls) == (1, 1, 0)
    assert t.value == ("value", 1, (1,), {"a": 2})
    assert fn.calls == 1 and m.calls == 1
    assert m.once(fn, (), {}, "cuda").samples_ms == (2.5,)  # always the CPU protocol


def test_scripted_measurer_ignores_the_device():
    t, _, _ = scripted(2.0, options=BenchOptions(min_rounds=3, max_rounds=3))
    m = ScriptedMeasurer(2.0)
    u = m.measure(Counting(), (), {}, options=BenchOptions(min_rounds=3, max_rounds=3), device="cuda:0")
    assert u.samples_ms == t.samples_ms


def test_exceptions_from_fn_propagate():
    def boom():
        raise ZeroDivisionError("inside the benchmark")

    with pytest.raises(ZeroDivisionError, match="inside the benchmark"):
        ScriptedMeasurer(1.0).measure(boom, (), {}, options=BUDGET, device="cpu")
    assert gc.isenabled()


# --------------------------------------------------------------------------------------------
# scripts and specs
# --------------------------------------------------------------------------------------------


def test_noisy_script():
    s = noisy(2.0, cv=0.0)
    assert [s(i) for i in range(3)] == [2.0, 2.0, 2.0]
    s = noisy(1.0, cv=0.0, slow_calls=2, slow_factor=3.0, stall_every=4, stall_factor=5.0)
    assert [s(i) for i in range(9)] == [3.0, 3.0, 1.0, 5.0, 1.0, 1.0, 1.0, 5.0, 1.0]
    a, b = noisy(1.0, 0.05, seed=1), noisy(1.0, 0.05, seed=2)
    assert [a(i) for i in range(5)] == [noisy(1.0, 0.05, seed=1)(i) for i in range(5)]
    assert [a(i) for i in range(5)] != [b(i) for i in range(5)]
    assert all(v > 0 for v in map(a, range(100)))


def test_from_spec_and_from_file(tmp_path):
    seq = ScriptedMeasurer.from_spec({"sequence": [1.0, 2.0]})
    assert [seq.script(i) for i in range(4)] == [1.0, 2.0, 1.0, 2.0]
    const = ScriptedMeasurer.from_spec({"ms": 4.0, "cv": 0.0})
    assert [const.script(i) for i in range(3)] == [4.0, 4.0, 4.0]
    spec = {"ms": 1.0, "cv": 0.1, "seed": 3, "slow_calls": 1, "slow_factor": 2.0}
    got = ScriptedMeasurer.from_spec(spec)
    want = noisy(1.0, 0.1, 3, slow_calls=1, slow_factor=2.0)
    assert [got.script(i) for i in range(5)] == [want(i) for i in range(5)]

    path = tmp_path / "timings.json"
    path.write_text(json.dumps({"test_a": {"ms": 2.0, "cv": 0}, "test_b": {"sequence": [3.0]},
                                "*": {"ms": 9.0, "cv": 0}}))
    assert ScriptedMeasurer.from_file(path, "test_a").script(0) == 2.0
    assert ScriptedMeasurer.from_file(path, "test_b[1-x]").script(0) == 3.0  # parameters stripped
    assert ScriptedMeasurer.from_file(path, "test_other").script(0) == 9.0  # the "*" entry
    path.write_text(json.dumps({"test_a": {"ms": 2.0}}))
    with pytest.raises(KeyError, match="test_other"):
        ScriptedMeasurer.from_file(path, "test_other")


def test_graph_mode_with_l2_flush_captures_one_call_per_replay():
    """One flush per round (eager) or replay (graph mode): with several calls per round all but
    the first would run with a warm L2 (issue 11, item 6). Without a flush, short calls are
    batched to fill the minimum round; calls of CUDA_BATCH_BELOW_S or more are timed one per round."""
    from pytest_gpuperf.measure.timing import CUDA_BATCH_BELOW_S, CUDA_MIN_ROUND_S, cuda_calls_per_round

    short = CUDA_BATCH_BELOW_S / 10
    assert cuda_calls_per_round(short, setup_given=False, flush_l2=False) == math.ceil(CUDA_MIN_ROUND_S / short)
    assert cuda_calls_per_round(CUDA_BATCH_BELOW_S, setup_given=False, flush_l2=False) == 1
    assert cuda_calls_per_round(short, setup_given=False, flush_l2=True) == 1
    assert cuda_calls_per_round(short, setup_given=True, flush_l2=False) == 1
    assert cuda_calls_per_round(CUDA_MIN_ROUND_S * 3, setup_given=False, flush_l2=False) == 1
    assert cuda_calls_per_round(short, setup_given=False, flush_l2=True, calls_per_round=4) == 4
