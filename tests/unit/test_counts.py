"""The count gate's pure core (pytest_gpuperf.verdict.counts): exact and variable counts, budgets, diffs,
torch.compile counter deltas, CUDA kernel/sync counting on synthetic profiler events, rates."""

from __future__ import annotations

import json

import pytest

from pytest_gpuperf.verdict.bottleneck import FINAL_SYNC_NAME, SYNC_CALLS, TraceEvent
from pytest_gpuperf.verdict.compare import Verdict
from pytest_gpuperf.verdict.counts import (CountComparison, Counts, compile_delta, decide_counts, device_counts, kernel_name,
                                   name_diff, stored_totals, throughput)
from pytest_gpuperf.core.units import format_si
from pytest_gpuperf.reporting.messages import gate_messages
from pytest_gpuperf.reporting.report import count_comparison_dict

BASE = Counts(ops=212, syncs=0, copies=0, copy_bytes=0, flops=1_000_000, traffic_bytes=4096,
              ops_by_name={"aten::mm": 2, "aten::relu": 210})


def with_item(c: Counts, n: int = 10) -> Counts:
    ops = dict(c.ops_by_name)
    ops["aten::max"] = ops.get("aten::max", 0) + n
    ops["aten::_local_scalar_dense"] = ops.get("aten::_local_scalar_dense", 0) + n
    return Counts(ops=c.ops + 2 * n, syncs=c.syncs + n, flops=c.flops, traffic_bytes=c.traffic_bytes,
                  ops_by_name=ops, syncs_by_name={"aten::_local_scalar_dense": n})


def history(*counts: Counts) -> list[dict]:
    return [c.totals() for c in counts]


def test_an_added_item_per_layer_fails_with_the_sync_and_op_diff() -> None:
    cur = with_item(BASE)
    c = decide_counts(cur, history(BASE, BASE), BASE, benchmark_id="test_x.py::test_step", baseline_file="b.json")
    assert c.verdict is Verdict.REGRESSED and c.failed
    (msg,) = gate_messages(c)
    assert msg == ("op/sync counts regressed: ops 212 -> 232 per call "
                   "(aten::_local_scalar_dense +10, aten::max +10); syncs 0 -> 10 per call "
                   "(aten::_local_scalar_dense +10)\n  test_x.py::test_step; baseline: b.json")
    assert [ch.name for ch in c.regressions()] == ["ops", "syncs"]


def test_unchanged_counts_pass_and_fewer_is_improved() -> None:
    same = decide_counts(BASE, history(BASE), BASE)
    assert same.verdict is Verdict.UNCHANGED and not same.failed and gate_messages(same) == []
    fewer = Counts(ops=200, flops=BASE.flops, traffic_bytes=BASE.traffic_bytes, ops_by_name={"aten::mm": 2})
    c = decide_counts(fewer, history(BASE), BASE)
    assert c.verdict is Verdict.IMPROVED and not c.failed and gate_messages(c) == []
    assert "ops 212 -> 200 per call" in c.summary() and "[improved]" in c.summary()


def test_no_baseline_and_runs_without_counts() -> None:
    c = decide_counts(BASE, None)
    assert c.verdict is Verdict.NO_BASELINE and not c.failed
    assert {ch.status for ch in c.changes} == {"new"}
    # stored runs recorded before counts existed are skipped
    assert decide_counts(BASE, [{}, {"median_ms": 1.0}]).verdict is Verdict.NO_BASELINE


def test_a_count_that_varied_is_gated_against_its_stored_maximum() -> None:
    runs = [{"ops": 10, "syncs": 1}, {"ops": 12, "syncs": 1}, {"ops": 11, "syncs": 1}]
    within = decide_counts(Counts(ops=12, syncs=1), runs)
    assert within.verdict is Verdict.UNCHANGED
    ops = next(ch for ch in within.changes if ch.name == "ops")
    assert ops.variable and (ops.low, ops.high, ops.runs) == (10, 12, 3)
    above = decide_counts(Counts(ops=13, syncs=1), runs)
    assert above.failed
    assert "ops 10..12 -> 13 per call (over the largest of 3 stored runs, which varied)" in gate_messages(above)[0]
    # the exact count next to it is still gated exactly
    assert decide_counts(Counts(ops=11, syncs=2), runs).failed


def test_count_tolerance_is_relative_slack() -> None:
    big = Counts(ops=1000, flops=10**9)
    assert not decide_counts(Counts(ops=1009, flops=10**9), history(big), tolerance=0.01).failed
    assert decide_counts(Counts(ops=1011, flops=10**9), history(big), tolerance=0.01).failed
    with pytest.raises(ValueError, match="count_tolerance"):
        decide_counts(big, history(big), tolerance=-0.1)


def test_float64_inputs_fail_on_bytes() -> None:
    f64 = Counts(ops=BASE.ops, flops=BASE.flops, traffic_bytes=2 * BASE.traffic_bytes, ops_by_name=BASE.ops_by_name)
    (msg,) = gate_messages(decide_counts(f64, history(BASE), BASE, benchmark_id="t"))
    assert msg == "byte counts regressed: bytes 4.00 KiB -> 8.00 KiB per call\n  t"


def test_a_change_hidden_by_rounding_is_spelled_out() -> None:
    big = Counts(traffic_bytes=402653184)
    (msg,) = gate_messages(decide_counts(Counts(traffic_bytes=402653188), history(big), big, benchmark_id="t"))
    assert msg == "byte counts regressed: bytes 384 MiB -> 384 MiB (+4 B) per call\n  t"


def test_budgets_need_no_baseline_and_name_the_offenders() -> None:
    cur = with_item(BASE, 3)
    c = decide_counts(cur, None, budgets={"max_syncs": 0, "max_ops": 1000, "max_kernels": 0}, benchmark_id="t")
    assert c.failed and c.verdict is Verdict.NO_BASELINE
    assert c.over_budget == ("t: 3 syncs per call is over max_syncs=0 (aten::_local_scalar_dense 3)",)
    # kernels are not counted on the CPU: a kernel budget cannot fail there
    assert decide_counts(cur, None, budgets={"max_kernels": 0}).over_budget == ()
    # budgets still fail while updating baselines; regressions do not
    c2 = decide_counts(cur, history(BASE), BASE, budgets={"max_syncs": 0}, benchmark_id="t")
    assert len(gate_messages(c2)) == 2 and gate_messages(c2, include_regression=False) == [
        "3 syncs per call is over max_syncs=0 (aten::_local_scalar_dense 3)\n  t"]  # the reason first (issue 47)
    with pytest.raises(ValueError, match="max_bytes"):
        decide_counts(cur, None, budgets={"max_bytes": 1})


def test_recompiles_are_totals_not_per_call() -> None:
    cur = Counts(ops=1, recompiles=4, graph_breaks=0)
    c = decide_counts(cur, [{"ops": 1, "recompiles": 0, "graph_breaks": 0}], budgets={"max_recompiles": 0},
                      benchmark_id="t")
    assert gate_messages(c)[0] == "compile counts regressed: recompiles 0 -> 4\n  t"
    assert c.over_budget == ("t: 4 recompiles is over max_recompiles=0",)


def test_name_diff_orders_by_increase() -> None:
    assert name_diff({"a": 3, "b": 1, "c": 5}, {"a": 1, "b": 1, "d": 2}) == (("c", 5), ("a", 2), ("d", -2))


def test_diff_lists_at_most_four_names() -> None:
    cur = Counts(ops=20, ops_by_name={f"aten::op{i}": 2 for i in range(10)})
    old = Counts(ops=10, ops_by_name={f"aten::op{i}": 1 for i in range(10)})
    text = gate_messages(decide_counts(cur, history(old), old))[0]
    assert text.count("+1") == 4 and "6 more" in text


def test_counts_json_round_trip() -> None:
    c = Counts(ops=5, syncs=1, kernels=7, recompiles=0, graph_breaks=1, unique_graphs=2, flops=10, traffic_bytes=64,
               ops_by_name={"aten::add": 5}, kernels_by_name={"k": 7}, syncs_by_name={"cudaStreamSynchronize": 1},
               cost_ms=1.5)
    d = json.loads(json.dumps(c.to_dict()))
    assert d["by_name"]["kernels"] == {"k": 7} and d["unique_graphs"] == 2 and d["cost_ms"] == 1.5
    assert Counts.from_dict(d) == c
    assert stored_totals(d) == c.totals() and "unique_graphs" not in stored_totals(d)
    assert stored_totals(None) == {} and stored_totals({"ops": True, "syncs": "1"}) == {}
    cpu = Counts(ops=1)
    assert "kernels" not in cpu.totals() and "recompiles" not in cpu.totals()


def test_count_comparison_round_trip() -> None:
    c = decide_counts(with_item(BASE), history(BASE), BASE, budgets={"max_syncs": 0}, benchmark_id="t",
                      baseline_file="b.json")
    d = json.loads(json.dumps(count_comparison_dict(c)))  # the report's JSON form
    assert d["failed"] is True and d["verdict"] == "regressed" and d["messages"] == gate_messages(c)
    assert CountComparison.from_dict(d) == c


def test_compile_delta() -> None:
    before = {"frames": {"total": 2, "ok": 2}, "stats": {"unique_graphs": 2}}
    after = {"frames": {"total": 5, "ok": 5}, "stats": {"unique_graphs": 4}, "unimplemented": {"reason": 1}}
    assert compile_delta(before, after) == {"recompiles": 3, "graph_breaks": 1, "unique_graphs": 2}
    # older torch counts graph breaks under "graph_break"
    old = {"frames": {"total": 1}, "graph_break": {"a": 2, "b": 1}, "unimplemented": {"x": 9}}
    assert compile_delta({}, old)["graph_breaks"] == 3
    assert compile_delta(None, None) is None  # dynamo never loaded: nothing compiled
    assert compile_delta(None, {"frames": {"total": 1}})["recompiles"] == 1
    assert compile_delta(after, after) == {"recompiles": 0, "graph_breaks": 0, "unique_graphs": 0}


def ev(name: str, kind: str, start: int, end: int) -> TraceEvent:
    return TraceEvent(name, kind, start, end)


def test_device_counts_on_synthetic_cuda_events() -> None:
    """An .item() per layer: cudaStreamSynchronize inside aten::_local_scalar_dense, counted per call
    and named by that op; the plugin's own final sync is left out; kernels by short name."""
    events = [
        ev("aten::mm", "cpu_op", 0, 10),
        ev("cudaLaunchKernel", "runtime", 2, 4),
        ev("void at::native::gemm_kernel<float, 128>(float*, int)", "kernel", 5, 50),
        ev("aten::item", "cpu_op", 60, 100),
        ev("aten::_local_scalar_dense", "cpu_op", 61, 99),
        ev("cudaMemcpyAsync", "runtime", 62, 70),
        ev("cudaStreamSynchronize", "runtime", 71, 98),
        ev("Memcpy DtoH (Device -> Pageable)", "memcpy", 72, 80),
        ev("cudaDeviceSynchronize", "runtime", 110, 120),  # a torch.cuda.synchronize() of the user
        ev(FINAL_SYNC_NAME, "annotation", 200, 300),
        ev("cudaDeviceSynchronize", "runtime", 210, 290),  # ours
        ev("void at::native::gemm_kernel<float, 64>(float*, int)", "kernel", 120, 150),
    ]
    kernels, syncs = device_counts(events, sync_calls=SYNC_CALLS, final_sync=FINAL_SYNC_NAME)
    assert kernels == {"at::native::gemm_kernel": 2}
    assert syncs == {"aten::_local_scalar_dense": 1, "cudaDeviceSynchronize": 1}


def test_kernel_name() -> None:
    assert kernel_name("void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float> >(int)") \
        == "at::native::vectorized_elementwise_kernel"
    assert kernel_name("ampere_sgemm_128x64_nn") == "ampere_sgemm_128x64_nn"
    assert len(kernel_name("x" * 300)) == 80


def test_throughput_and_format_si() -> None:
    r = throughput(2.0, Counts(flops=2 * 10**12, traffic_bytes=10**9), items_per_call=64,
                   peak_flops_per_s=2e15, peak_bytes_per_s=None)
    assert r == pytest.approx({"flops_per_s": 1e15, "pct_of_peak_flops": 50.0, "bytes_per_s": 5e11,
                               "items_per_s": 32000.0})
    assert throughput(0.0, BASE) is None and throughput(1.0, Counts()) is None
    assert format_si(712e12, "FLOP/s") == "712 TFLOP/s" and format_si(5.0, "B/s") == "5 B/s"


# ----------------------------------------------------------------- counts that vary between calls (issue 31)

def test_combine_counts_keeps_the_highest_and_the_range_of_what_differed() -> None:
    from pytest_gpuperf.verdict.counts import combine_counts

    a = Counts(ops=10, traffic_bytes=5000, flops=100, ops_by_name={"aten::mm": 10})
    b = Counts(ops=10, traffic_bytes=5060, flops=100)
    c = combine_counts([a, b])
    assert (c.ops, c.traffic_bytes, c.flops) == (10, 5060, 100)
    assert c.varied == {"traffic_bytes": (5000, 5060)} and c.ops_by_name == {"aten::mm": 10}
    # a range already seen in one process widens with the other's
    d = combine_counts([c, Counts(ops=10, traffic_bytes=4990, flops=100)])
    assert d.varied == {"traffic_bytes": (4990, 5060)}
    assert Counts.from_dict(d.to_dict()).varied == d.varied
    assert combine_counts([a, a]).varied == {}
    with pytest.raises(ValueError):
        combine_counts([])


def test_a_count_that_varies_between_calls_is_reported_not_gated_exactly() -> None:
    from pytest_gpuperf.verdict.counts import combine_counts

    recorded = combine_counts([Counts(ops=10, traffic_bytes=5000), Counts(ops=10, traffic_bytes=5060)])
    history = [dict(recorded.totals(), varied={"traffic_bytes": [5000, 5060]})]
    # the false alarm: a replay buffer's sampling moves slightly other bytes in the rerun
    rerun = combine_counts([Counts(ops=10, traffic_bytes=5090), Counts(ops=10, traffic_bytes=5080)])
    c = decide_counts(rerun, history, recorded)
    assert c.verdict is Verdict.UNCHANGED and not c.failed
    change = {ch.name: ch for ch in c.changes}
    assert change["traffic_bytes"].status == "varies" and change["ops"].status == "unchanged"
    # beyond twice the spread it is a regression (this run's lowest held against the limit)
    big = combine_counts([Counts(ops=10, traffic_bytes=5300), Counts(ops=10, traffic_bytes=5400)])
    c = decide_counts(big, history, recorded)
    assert c.verdict is Verdict.REGRESSED and {ch.name for ch in c.regressions()} == {"traffic_bytes"}
    # an exact count next to it stays exact: one more op fails
    c = decide_counts(combine_counts([Counts(ops=11, traffic_bytes=5010), Counts(ops=11, traffic_bytes=5020)]),
                      history, recorded)
    assert {ch.name for ch in c.regressions()} == {"ops"}


def test_a_count_that_varies_only_now_is_not_gated_exactly_either() -> None:
    from pytest_gpuperf.verdict.counts import combine_counts

    history = [Counts(ops=10, traffic_bytes=5000).totals()]  # a baseline recorded from one call
    now = combine_counts([Counts(ops=10, traffic_bytes=5000), Counts(ops=10, traffic_bytes=5040)])
    c = decide_counts(now, history, None)
    assert not c.failed and {ch.name: ch.status for ch in c.changes}["traffic_bytes"] == "varies"
