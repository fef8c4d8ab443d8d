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
