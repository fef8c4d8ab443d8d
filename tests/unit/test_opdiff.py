"""The per-op diff rule (issue 32) on seeded synthetic profiles: one op slower, one op added,
noise only (nothing named), GPU idle time growing (CUDA), phases; the parts add up."""

from __future__ import annotations

import random

import pytest

from pytest_gpuperf.verdict.opdiff import (IDLE, OpDiff, OpSample, diff_profiles, hodges_lehmann_shift, op_status,
                                           table, why_line)

OPS = {"aten::mm": 1.0, "aten::softmax": 0.4, "aten::sort": 0.3, "aten::add": 0.05}


def side(seed: int, ops: dict[str, float] = OPS, *, cycles: int = 8, processes: int = 2, cv: float = 0.03,
         idle: float | None = None, overhead: float = 0.1, phases: dict[str, list[str]] | None = None) -> list[OpSample]:
    """Cycles of one side: each op's per-call time with a multiplicative noise (cv), per process a
    small common factor (process-level noise), the call's total the ops' sum plus overhead."""
    rng = random.Random(seed)
    factors = [1 + rng.gauss(0, cv / 2) for _ in range(processes)]
    out = []
    for i in range(cycles):
        proc = i % processes
        pf = factors[proc]
        times = {k: v * pf * max(0.5, 1 + rng.gauss(0, cv)) for k, v in ops.items()}
        gap = None if idle is None else idle * max(0.5, 1 + rng.gauss(0, cv))
        total = sum(times.values()) + overhead + (gap or 0.0)
        ph = {p: sum(times[o] for o in names) for p, names in (phases or {}).items()}
        out.append(OpSample(times, {k: 1.0 for k in ops}, total, gap, ph, process=proc))
    return out


def test_hodges_lehmann_shift_and_its_ci() -> None:
    shift, ci = hodges_lehmann_shift([1.0, 1.1, 0.9, 1.05, 0.95] * 2, [2.0, 2.1, 1.9, 2.05, 1.95] * 2)
    assert shift == pytest.approx(1.0) and ci is not None and ci[0] > 0.8 and ci[1] < 1.2
    assert hodges_lehmann_shift([1.0], [2.0])[1] is None  # too few samples for a 99% CI
    with pytest.raises(ValueError, match="at least one sample"):
        hodges_lehmann_shift([], [1.0])


def test_one_op_made_slower_is_named_first_and_the_others_unchanged() -> None:
    a = side(1)
    b = side(2, dict(OPS, **{"aten::sort": 0.9}))  # 3x slower sort: +0.6 ms of +0.6
    d = diff_profiles(a, b)
    assert [c.name for c in d.named] == ["aten::sort"]
    sort = d.named[0]
    assert sort.status == "slower" and sort.shift_ms == pytest.approx(0.6, rel=0.1) and sort.share > 0.8
    assert {c.status for c in d.ops if c.name != "aten::sort"} == {"unchanged"}
    assert d.named_ms + d.new_ms + d.removed_ms + d.rest_ms == pytest.approx(d.total_shift_ms)
    line = why_line(d)
    assert line.startswith("why: aten::sort +") and "/call (+" in line and "of the slowdown" in line
    assert "unchanged: aten::mm, aten::softmax" in line and "; rest: other ops " in line and ", outside ops " in line
    assert d.processes == (2, 2) and d.cycles == (8, 8)


def test_an_added_op_is_new_and_a_dropped_one_removed() -> None:
    d = diff_profiles(side(3), side(4, dict(OPS, **{"aten::clone": 0.5})))
    assert [(c.name, c.status) for c in d.named] == [("aten::clone", "new")]
    assert d.new_ms == pytest.approx(0.5, rel=0.1)
    assert "new: aten::clone (+" in why_line(d)
    faster = diff_profiles(side(5, dict(OPS, **{"aten::clone": 0.5})), side(6))
    assert [(c.name, c.status) for c in faster.named] == [("aten::clone", "removed")]
    assert faster.removed_ms < 0


@pytest.mark.parametrize("seed", range(20))
def test_noise_alone_names_nothing(seed: int) -> None:
    d = diff_profiles(side(100 + seed), side(200 + seed))
    assert d.named == ()
    assert why_line(d).startswith("why: no single op explains the change")


def test_a_small_steady_shift_of_a_big_op_is_not_a_cause() -> None:
    assert op_status(0.02, (0.01, 0.03), own_ms=1.0, total_shift_ms=0.05) == "unchanged"  # 2% of its own time
    assert op_status(0.2, (0.1, 0.3), own_ms=1.0, total_shift_ms=0.5) == "slower"
    assert op_status(-0.2, (-0.3, -0.1), own_ms=1.0, total_shift_ms=0.5) == "offset"
    assert op_status(0.2, (-0.1, 0.3), own_ms=1.0, total_shift_ms=0.5) == "unchanged"  # CI includes 0
    assert op_status(0.2, None, own_ms=1.0, total_shift_ms=0.5) == "unchanged"


def test_gpu_idle_time_growth_is_named_on_cuda() -> None:
    # host-bound: the kernels did not change, the gaps between them did
    d = diff_profiles(side(7, idle=0.2), side(8, idle=1.0))
    assert [c.name for c in d.named] == [IDLE]
    assert d.named[0].shift_ms == pytest.approx(0.8, rel=0.1)
    assert "unchanged: aten::mm" in why_line(d)


def test_phases_are_diffed_too() -> None:
    phases = {"forward": ["aten::mm", "aten::softmax"], "backward": ["aten::sort", "aten::add"]}
    d = diff_profiles(side(9, phases=phases), side(10, dict(OPS, **{"aten::sort": 0.9}), phases=phases))
    assert [(c.name, c.status) for c in d.phases] == [("backward", "slower"), ("forward", "unchanged")]
    assert "; in phase backward +" in why_line(d) and "forward" not in why_line(d)
    assert "| phase backward | " in table(d) and "| phase forward | " in table(d)


def test_the_diff_round_trips_and_tabulates() -> None:
    d = diff_profiles(side(11), side(12, dict(OPS, **{"aten::sort": 0.9})), source="the stored profile")
    again = OpDiff.from_dict(d.to_dict())
    assert again == d
    assert OpSample.from_dict(side(1)[0].to_dict()) == side(1)[0]
    with pytest.raises(ValueError, match="not an op profile sample"):
        OpSample.from_dict({"self_ms": 3})
    text = table(d)
    assert text.splitlines()[2].startswith("| aten::sort | ") and "| slower |" in text
    assert "whole call" in text.splitlines()[-1]
    assert why_line(d).endswith("[against the stored profile]")
    with pytest.raises(ValueError, match="profiled cycle"):
        diff_profiles([], side(1))


def test_kernel_times_group_by_kernel_and_launching_op() -> None:
    from pytest_gpuperf.verdict.bottleneck import TraceEvent
    from pytest_gpuperf.verdict.opdiff import kernel_times

    events = [
        TraceEvent("aten::mm", "cpu_op", 0, 100), TraceEvent("cudaLaunchKernel", "runtime", 10, 20, 1),
        TraceEvent("aten::sort", "cpu_op", 100, 300), TraceEvent("aten::copy_", "cpu_op", 150, 200),
        TraceEvent("cudaLaunchKernel", "runtime", 160, 170, 2), TraceEvent("cudaLaunchKernel", "runtime", 250, 260, 3),
        TraceEvent("gemm_kernel", "kernel", 30, 2_000_030, 1),
        TraceEvent("copy_kernel", "kernel", 2_000_100, 2_500_100, 2),
        TraceEvent("sort_kernel", "kernel", 2_600_000, 6_600_000, 3),
        TraceEvent("orphan_kernel", "kernel", 7_000_000, 8_000_000, 0),
    ]
    times = kernel_times(events, calls=2)
    assert times == pytest.approx({"gemm_kernel (aten::mm)": 1.0, "copy_kernel (aten::copy_)": 0.25,
                                   "sort_kernel (aten::sort)": 2.0, "orphan_kernel": 0.5})


def test_profile_ops_on_the_cpu(tmp_path) -> None:
    # real profiler, structure only (nothing here depends on the machine's speed)
    import json

    torch = pytest.importorskip("torch")
    from pytest_gpuperf.measure.opprofile import calls_per_cycle, profile_ops

    x = torch.randn(64, 64)

    def f() -> object:
        return torch.sort(torch.softmax(x @ x, 1), 1)[0].sum()

    trace = tmp_path / "t.A.trace.json"
    samples = profile_ops(f, (), {}, torch.device("cpu"), cycles=3, calls=2, process=1, trace_path=str(trace))
    names = {e.get("name") for e in json.loads(trace.read_text())["traceEvents"]}  # the last cycle's chrome trace
    assert {"aten::sort", "gpuperf::region"} <= names
    assert len(samples) == 3 and all(s.process == 1 and s.idle_ms is None for s in samples)
    for s in samples:
        assert {"aten::mm", "aten::sort", "aten::sum"} <= set(s.self_ms)
        assert s.counts["aten::sort"] == 1.0 and s.total_ms > 0
        assert not any(k.startswith(("gpuperf::", "ProfilerStep")) for k in s.self_ms)
        # the tree: the op called (matmul) is top-level with its mm inside; the parts add to its total
        tops = {k for k in s.tree_ms if " > " not in k}
        assert {"aten::matmul", "aten::sort", "aten::sum"} <= tops and "aten::mm" not in tops
        assert "aten::matmul > aten::mm" in s.tree_ms and s.tree_counts["aten::sort"] == 1.0
        for top in tops:
            inner = sum(v for k, v in s.tree_ms.items() if k.startswith(top + " > "))
            assert inner == pytest.approx(s.tree_ms[top], rel=1e-6, abs=1e-9)
        assert not any(k.startswith(("gpuperf::", "ProfilerStep")) for k in s.tree_ms)
    assert calls_per_cycle(0.5) == 20 and calls_per_cycle(100.0) == 1 and calls_per_cycle(0.0) == 3


def test_failure_messages_wrap_one_clause_per_line_and_the_table_holds_its_width() -> None:
    from pytest_gpuperf.reporting.report import compact_verdict, fit_table
    from pytest_gpuperf.reporting.terminal import wrap_message

    message = ("regressed 1.497x [1.470x, 1.521x]: median 998.5 µs -> 1.493 ms (A/B vs HEAD (b1b19dd)) and more words\n"
               "  why: aten::sort +492.7 µs/call (+249.8%, 95% of the slowdown); unchanged: aten::mm, aten::softmax; "
               "rest +26.1 µs\n  m.py::t: " + "; ".join(f"clause number {i} of the evidence" for i in range(8)))
    lines = wrap_message(message, 80).splitlines()
    assert lines[0] == message.splitlines()[0]  # the verdict line stays whole (pytest's short summary)
    assert all(len(x) <= 80 for x in lines[1:])
    assert lines[1] == "  why: aten::sort +492.7 µs/call (+249.8%, 95% of the slowdown);"
    assert lines[2] == "    unchanged: aten::mm, aten::softmax;" and lines[3] == "    rest +26.1 µs"
    assert wrap_message(message, None) == message
    assert compact_verdict("regressed, counts regressed") == "regressed+counts"
    header = ("name", "median", "verdict")
    rows = [("test_x.py::test_a_rather_long_benchmark_name", "1.493 ms", "regressed, counts regressed (confirmed)")]
    fitted = fit_table(rows, header, {"median"}, 70, [rows[0][0]])  # the name at its shortest is not enough
    assert max(map(len, fitted)) <= 70 and "regressed+counts" in fitted[-1]


def test_the_verdicts_whole_change_lets_a_small_stage_be_named_under_a_noisy_one() -> None:
    # a noisy op (cumsum) hides a +0.25 ms softmax change in the profiles' own total; the timing
    # verdict measured the whole change (+0.25 ms on 3 ms) precisely, so the softmax is named
    ops = {"aten::sort": 2.0, "aten::_softmax": 0.25, "aten::cumsum": 0.6}
    rng = random.Random(5)

    def noisy(seed: int, softmax: float) -> list[OpSample]:
        out = []
        for i in range(12):
            times = {k: v * (1 + random.Random(seed * 100 + i).gauss(0, 0.02)) for k, v in ops.items()}
            times["aten::_softmax"] = softmax * (1 + rng.gauss(0, 0.03))
            times["aten::cumsum"] = 0.6 * (1 + abs(rng.gauss(0, 0.8)))  # 0.6-1.6 ms: swamps the total
            out.append(OpSample(times, {k: 1.0 for k in times}, sum(times.values()), process=i % 2))
        return out

    a, b = noisy(1, 0.25), noisy(2, 0.5)
    d = diff_profiles(a, b, whole_ms=(3.0, 3.25))
    assert [c.name for c in d.named] == ["aten::_softmax"] and d.whole_from == "timing"
    assert d.total_shift_ms == pytest.approx(0.25) and d.total_ci_ms is None
    assert d.named_ms + d.new_ms + d.removed_ms + d.rest_ms == pytest.approx(0.25)


def test_a_change_must_hold_in_every_pair_of_profiling_processes() -> None:
    from pytest_gpuperf.verdict.opdiff import holds_across_pairs

    a = [1.0, 1.01, 0.99, 1.0]
    procs = [0, 0, 1, 1]
    assert holds_across_pairs(a, [1.5, 1.52, 1.49, 1.51], procs, procs, shift=0.5, own=1.5)
    # one process's op ran slow throughout (a fluke of that process): no cause
    assert not holds_across_pairs(a, [1.0, 1.01, 1.6, 1.61], procs, procs, shift=0.3, own=1.6)
    assert op_status(0.3, (0.1, 0.5), own_ms=1.6, total_shift_ms=0.3, replicated=False) == "unchanged"


def test_with_five_pairs_one_may_dissent_but_not_two() -> None:
    """A 2x larger gather ran as fast as the smaller one in one process of three (the why study):
    with 5 pairs or more one pair may disagree, with fewer none, and never two."""
    from pytest_gpuperf.verdict.opdiff import DISSENT_FROM_PAIRS, holds_across_pairs

    def sides(b_values: list[float]) -> tuple[list[float], list[float], list[int]]:
        procs = [p for p in range(len(b_values)) for _ in range(2)]
        return [1.0] * len(procs), [v for v in b_values for _ in range(2)], procs

    a, b, procs = sides([2.0, 1.0, 2.0, 2.1, 1.9])
    assert DISSENT_FROM_PAIRS == 5 and holds_across_pairs(a, b, procs, procs, shift=1.0, own=2.0)
    a, b, procs = sides([2.0, 1.0, 2.0])  # 3 pairs: every one must hold
    assert not holds_across_pairs(a, b, procs, procs, shift=1.0, own=2.0)
    a, b, procs = sides([2.0, 1.0, 2.0, 1.0, 1.9])  # two dissent
    assert not holds_across_pairs(a, b, procs, procs, shift=1.0, own=2.0)


def test_profile_ops_on_the_simulated_cuda_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CUDA path of the op profile (kernels by name, device time, GPU idle between kernels) on
    the simulated device, on its simulated clock (no real time: the same numbers under any machine
    load). A kernel made 3x slower is named first; host work added between the kernels (20 ms of
    simulated host time per call against 1.5 ms of kernels) grows the GPU's idle time, which is
    named, while the kernels stay unchanged."""
    torch = pytest.importorskip("torch")
    from pytest_gpuperf.measure.opprofile import profile_ops
    from pytest_gpuperf.testing import SimulatedCuda

    sim = SimulatedCuda().install(monkeypatch)  # launch_us=5: each launch takes 5 µs of host time
    cuda = torch.device("cuda")

    def step(gemm_ms: float, host_ms: float = 0.0) -> None:
        sim.kernel(ms=gemm_ms, name="gemm")
        sim.host(host_ms)  # simulated host time (a data loader, Python): the device drains its queue meanwhile
        sim.kernel(ms=0.5, name="softmax_kernel")

    def side(gemm_ms: float, host_ms: float = 0.0) -> list[OpSample]:
        return [s for p in (0, 1) for s in profile_ops(step, (gemm_ms, host_ms), {}, cuda, cycles=3, calls=2,
                                                      process=p)]

    def exact(samples: list[OpSample]) -> set[tuple[float, float, float]]:
        return {(round(s.self_ms["kernel: gemm"], 9), round(s.total_ms, 9), round(s.idle_ms, 9)) for s in samples}

    a = side(1.0)
    assert len(a) == 6 and all(s.idle_ms is not None for s in a)
    assert a[0].self_ms["kernel: gemm"] == pytest.approx(1.0) and a[0].self_ms["kernel: softmax_kernel"] == 0.5
    # per call of a 2-call region: the kernels back to back after the first launch's 5 µs
    assert exact(a) == {(1.0, 1.5025, 0.0025)}
    b = side(3.0)
    assert exact(b) == {(3.0, 3.5025, 0.0025)}
    slower = diff_profiles(a, b, whole_ms=(1.5, 3.5))  # the A/B verdict's medians on the device
    assert [(c.name, c.status) for c in slower.named] == [("kernel: gemm", "slower")]
    assert slower.named[0].shift_ms == pytest.approx(2.0)
    assert {c.name: c.status for c in slower.ops}[IDLE] == "unchanged"
    w = side(1.0, host_ms=20.0)
    # idle per call: the first launch (5 µs), call 1's 20 ms wait less its gemm (19 ms + 5 µs of the
    # softmax launch), call 2's wait less the queued softmax and gemm (18.5 ms + 10 µs): 37.52 ms / 2
    assert exact(w) == {(1.0, 20.26, 18.76)}
    waits = diff_profiles(a, w)  # the profiles' own whole-call change: 18.7575 ms, all of it idle
    assert waits.total_shift_ms == pytest.approx(18.7575)
    assert [(c.name, c.status) for c in waits.named] == [(IDLE, "slower")]
    assert waits.named[0].shift_ms == pytest.approx(18.7575) and waits.named[0].share == pytest.approx(1.0)
    assert {c.name: c.status for c in waits.ops}["kernel: gemm"] == "unchanged"
    assert IDLE in why_line(waits)


def test_a_stored_profile_is_compact_and_a_run_diffs_against_it() -> None:
    """Without the old commit (issue 32): the baseline keeps a compact profile (the ops over 1% of
    the call); a later run's cycles are diffed against it. An op the stored profile lacks that stays
    under its floor is no cause (it was there, too small to keep); one above it is new."""
    from pytest_gpuperf.verdict.opdiff import compact_profile, diff_against_stored, stored_samples

    tiny = dict(OPS, **{"aten::view": 0.001})  # 0.05% of the call: not stored
    stored = compact_profile(side(21, tiny))
    assert {k for c in stored["cycles"] for k in c["self_ms"]} == set(OPS)
    assert 0 < stored["floor_ms"] < 0.05 and len(str(stored)) < 4000
    b = side(22, dict(tiny, **{"aten::sort": 0.9, "aten::exp": 0.3, "aten::expand": 0.002}))
    d = diff_against_stored(stored, b, whole_ms=(1.85, 2.75), source="the baseline's op profile (2026-11-20)")
    named = {c.name: c.status for c in d.named}
    assert named == {"aten::sort": "slower", "aten::exp": "new"}
    assert {c.name for c in d.ops}.isdisjoint({"aten::view", "aten::expand"})  # under the floor: dropped
    assert why_line(d).startswith("why: aten::sort +") and why_line(d).endswith("[against the baseline's op profile (2026-11-20)]")
    with pytest.raises(ValueError, match="not a stored op profile"):
        stored_samples({"cycles": []})
    with pytest.raises(ValueError, match="floor_ms 'x' is not a number"):
        stored_samples({"cycles": [stored["cycles"][0]], "floor_ms": "x"})


def test_profiled_cycles_fit_a_budget():
    """Issue 45: a process profiles as many of CYCLES cycles as fit PROFILE_BUDGET_MS (warm-up steps
    included) and PROFILE_BUDGET_OPS; none when fewer than MIN_CYCLES fit."""
    from pytest_gpuperf.measure.opprofile import (CYCLES, MIN_CYCLES, PROFILE_BUDGET_MS, PROFILE_BUDGET_OPS,
                                                  calls_per_cycle, cycles_for)

    assert (CYCLES, MIN_CYCLES, PROFILE_BUDGET_MS, PROFILE_BUDGET_OPS) == (6, 2, 4000.0, 20_000)
    for ms in (0.01, 0.5, 5.0, 20.0, 80.0, 300.0):
        assert cycles_for(ms, calls_per_cycle(ms)) == CYCLES
        assert cycles_for(ms, calls_per_cycle(ms), ops=100) == CYCLES
    assert cycles_for(500.0, 1) == 4 and cycles_for(1000.0, 1) == MIN_CYCLES
    assert cycles_for(3000.0, 1) == 0 and cycles_for(16_000.0, 1) == 0  # not even two fit: no profile
    assert cycles_for(0.0, 3) == CYCLES  # unknown: all
    assert cycles_for(10.0, 2, ops=2500) == 4 and cycles_for(10.0, 2, ops=5000) == MIN_CYCLES
    assert cycles_for(100.0, 1, ops=430_000) == 0  # ml4gw's waveform generator: 8 min of profile before
    for ms in (1.0, 30.0, 100.0, 250.0, 400.0, 900.0):  # whatever is profiled stays within the budget
        for ops in (None, 10, 1000, 9000):
            n = calls_per_cycle(ms)
            c = cycles_for(ms, n, ops)
            assert c == 0 or (MIN_CYCLES <= c <= CYCLES and c * (n + 1) * ms <= PROFILE_BUDGET_MS
                              and c * n * (ops or 0) <= PROFILE_BUDGET_OPS)


def test_processes_that_share_the_profile_split_its_cycles_and_budget():
    """Issue 45: an update's two extras processes share the op profile (pooled): each profiles half
    the cycles within half the budget, so the pair costs what one process did; one process as before."""
    from pytest_gpuperf.measure.opprofile import CYCLES, MIN_CYCLES, calls_per_cycle, cycles_for

    for ms in (0.01, 0.5, 5.0, 80.0):
        assert cycles_for(ms, calls_per_cycle(ms), processes=2) == CYCLES // 2
        assert cycles_for(ms, calls_per_cycle(ms), processes=1) == cycles_for(ms, calls_per_cycle(ms)) == CYCLES
    assert cycles_for(1000.0, 1, processes=2) == 1  # 2 in one process: 1 each, the pair's MIN_CYCLES
    assert 2 * cycles_for(1000.0, 1, processes=2) == MIN_CYCLES
    assert cycles_for(3000.0, 1, processes=2) == 0  # not even the pair's two fit
    assert cycles_for(10.0, 2, ops=2500, processes=2) == 2 and cycles_for(10.0, 2, ops=5000, processes=2) == 1
    assert cycles_for(10.0, 2, ops=12_000, processes=2) == 0
    assert cycles_for(0.0, 3, processes=4) == 2  # ceil(6 / 4)


def test_op_free_means_cycles_without_any_op():
    """Issue 45: a profile whose cycles hold no op (a pure-Python benchmark) cannot name one; an
    unknown profile (no cycles) is not called op-free, one op in one cycle is enough."""
    from pytest_gpuperf.verdict.opdiff import OpSample, op_free

    empty = {"self_ms": {}, "counts": {}, "total_ms": 0.004, "idle_ms": None, "phase_ms": {}, "process": 1}
    assert op_free([empty, empty])
    assert op_free([OpSample.from_dict(empty)])
    assert not op_free([]) and not op_free(None)
    assert not op_free([empty, {**empty, "counts": {"aten::add": 1.0}}])
    assert not op_free([OpSample(self_ms={"aten::add": 0.001}, counts={}, total_ms=0.002)])
