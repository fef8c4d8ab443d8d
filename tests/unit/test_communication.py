"""Communication of a distributed benchmark (issue 35, item 4): interval arithmetic, HTA's overlap,
nccl-tests' bus bandwidth, event classification, the JSON form and the regression's evidence line."""

from __future__ import annotations

import pytest

from pytest_gpuperf.core.options import COLLECTIVES, OptionError, convert
from pytest_gpuperf.verdict.communication import (
    BUS_FACTORS, Classified, Communication, ProfEvent, RankCommunication, bandwidth, bus_factor, change_text, classify,
    collective_of, intersection_length, length, merge, rank_communication,
)


def test_merge_and_length_of_overlapping_nested_and_touching_intervals() -> None:
    assert merge([(5, 7), (0, 2), (1, 3), (3, 4), (6, 6.5), (9, 8)]) == [(0, 4), (5, 7)]
    assert length([(5, 7), (0, 2), (1, 3), (3, 4)]) == 6
    assert length([]) == 0


def test_intersection_length_of_two_unions() -> None:
    comm = [(0, 10), (20, 30)]
    comp = [(5, 25), (28, 40)]
    assert intersection_length(comm, comp) == 5 + 5 + 2
    assert intersection_length(comm, []) == 0
    assert intersection_length([(0, 4), (2, 6)], [(1, 2), (1, 3)]) == 2  # each side merged first


def test_rank_communication_share_and_hta_overlap() -> None:
    """Two calls in a 100 us span: communication 0-20 and 50-80 (50 us), computation 10-60:
    overlap 10 + 10 = 20 us of 50 -> 0.4; share 50/100; per call 0.025 ms of 0.05 ms."""
    c = Classified(((0, 20), (50, 80), (60, 70)), ((10, 60),), {"all_reduce": 2})
    r = rank_communication(c, (0, 100), calls=2)
    assert r.comm_ms == pytest.approx(0.025) and r.step_ms == pytest.approx(0.05)
    assert r.share == pytest.approx(0.5) and r.overlap == pytest.approx(0.4)
    assert r.collectives == {"all_reduce": 1.0}


def test_rank_communication_clips_to_the_span_and_has_no_overlap_without_communication() -> None:
    c = Classified(((-50, 10), (90, 150)), ((0, 100),))
    r = rank_communication(c, (0, 100), calls=1)
    assert r.share == pytest.approx(0.2) and r.overlap == pytest.approx(1.0)
    none = rank_communication(Classified((), ((0, 100),)), (0, 100), calls=1)
    assert none.share == 0 and none.overlap is None and none.comm_ms == 0
    with pytest.raises(ValueError, match="expected end > start and calls >= 1"):
        rank_communication(c, (5, 5), calls=1)


@pytest.mark.parametrize("collective, n, factor", [
    ("all_reduce", 2, 1.0), ("all_reduce", 8, 1.75), ("all_gather", 4, 0.75), ("reduce_scatter", 8, 0.875),
    ("all_to_all", 2, 0.5), ("broadcast", 8, 1.0), ("reduce", 8, 1.0), ("send_recv", 2, 1.0),
])
def test_bus_factor_is_nccl_tests(collective: str, n: int, factor: float) -> None:
    assert bus_factor(collective, n) == pytest.approx(factor)


def test_bandwidth_in_gb_per_s() -> None:
    """1 GiB all-reduced in 10 ms on 8 ranks: algbw = 2^30 / 0.01 / 1e9 = 107.374 GB/s, busbw x 1.75."""
    algbw, busbw = bandwidth("all_reduce", 2**30, 0.01, 8)
    assert algbw == pytest.approx(107.3741824) and busbw == pytest.approx(107.3741824 * 1.75)
    with pytest.raises(ValueError, match="collective='allreduce': expected one of all_reduce, all_gather"):
        bandwidth("allreduce", 1, 1, 2)
    with pytest.raises(ValueError, match="expected both > 0"):
        bandwidth("all_reduce", 1, 0, 2)


def test_the_option_accepts_exactly_the_collectives_with_a_bus_factor() -> None:
    assert set(COLLECTIVES) == set(BUS_FACTORS)
    assert convert("collective", "all-reduce") == "all_reduce"
    assert convert("bytes_per_call", "1 MiB") == 2**20
    with pytest.raises(OptionError, match=r"collective='allreduce': expected one of all_reduce, all_gather"):
        convert("collective", "allreduce")
    with pytest.raises(OptionError, match=r"bytes_per_call=0: expected a size > 0"):
        convert("bytes_per_call", 0)


@pytest.mark.parametrize("name, collective", [
    ("gloo:all_reduce", "all_reduce"), ("c10d::allreduce_", "all_reduce"), ("c10d::_allgather_base_", "all_gather"),
    ("gloo:broadcast", "broadcast"), ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "all_reduce"),
    ("ncclKernel_ReduceScatter_RING_LL_Sum_float", "reduce_scatter"), ("ncclDevKernel_SendRecv", "send_recv"),
    ("record_param_comms", None), ("gloo:barrier", None),
])
def test_collective_of_names(name: str, collective: str | None) -> None:
    assert collective_of(name) == collective


def test_classify_gloo_events_as_torch_2_13_records_them() -> None:
    """c10d's op on the calling thread (1) and gloo's on its worker thread (3), with an aten copy
    under it there: communication; the matmul on thread 1: computation; the copy on gloo's thread: neither."""
    events = [
        ProfEvent("aten::mm", "cpu", 0, 40, thread=1),
        ProfEvent("c10d::allreduce_", "cpu", 40, 42, thread=1),
        ProfEvent("gloo:all_reduce", "cpu", 43, 90, thread=3, kind="annotation"),
        ProfEvent("aten::copy_", "cpu", 50, 60, thread=3),
        ProfEvent("gpuperf::phase::x", "cpu", 0, 100, thread=1, kind="annotation"),
    ]
    c = classify(events, cuda=False)
    assert c.communication == ((40, 42), (43, 90)) and c.computation == ((0, 40),)
    assert c.collectives == {"all_reduce": 1}


def test_classify_cuda_kernels_as_hta_does() -> None:
    """NCCL kernels against the other kernels; copies, memsets and CPU ops are neither."""
    events = [
        ProfEvent("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "cuda", 10, 50, kind="kernel"),
        ProfEvent("ampere_sgemm_128x64_tn", "cuda", 0, 30, kind="kernel"),
        ProfEvent("Memcpy DtoD (Device -> Device)", "cuda", 30, 60, kind="memcpy"),
        ProfEvent("c10d::allreduce_", "cpu", 0, 1, thread=1),
        ProfEvent("aten::mm", "cpu", 0, 1, thread=1),
    ]
    c = classify(events, cuda=True)
    assert c.communication == ((10, 50),) and c.computation == ((0, 30),)
    assert c.collectives == {"all_reduce": 1}
    r = rank_communication(c, (0, 60), calls=1)
    assert r.overlap == pytest.approx(0.5) and r.share == pytest.approx(40 / 60)


def _comm(share: list[float], overlap: list[float | None]) -> Communication:
    per_rank = [RankCommunication(s * 2.0, 2.0, s, o, {"all_reduce": 1.0}) for s, o in zip(share, overlap)]
    return Communication.of(per_rank, backend="gloo", bytes_per_call=1024, collective="all_reduce")


def test_json_form_round_trips() -> None:
    c = _comm([0.12, 0.2], [0.5, None])
    d = c.to_dict()
    assert d == {"per_call_ms": [0.24, 0.4], "share": [0.12, 0.2], "overlap": [0.5, None],
                 "mean_share": pytest.approx(0.16), "backend": "gloo",
                 "collectives": {"all_reduce": {"calls": 1.0, "bytes": 1024.0}}}
    assert Communication.from_dict(d) == c
    assert Communication.from_dict({"share": [0.1]}) is None and Communication.from_dict(None) is None
    assert Communication.from_dict({"share": [0.1, 0.2], "per_call_ms": [1.0]}) is None


def test_change_text_names_share_and_overlap_moves_of_ten_points() -> None:
    then, now = _comm([0.12, 0.12], [0.8, 0.8]), _comm([0.41, 0.41], [0.35, 0.35])
    assert change_text(then, now) == ("communication share 12% -> 41% of the step (gloo all_reduce); "
                                      "communication overlap with compute 80% -> 35%")
    assert change_text(then, _comm([0.2, 0.2], [0.75, 0.75])) is None  # 8 and 5 points
    assert change_text(None, now) is None


def test_a_timing_failure_message_carries_the_communication_line() -> None:
    import dataclasses

    from pytest_gpuperf.reporting.messages import with_communication

    class R:
        communication = dataclasses.replace(_comm([0.41], [None]), change="communication share 12% -> 41% of the step")

    assert with_communication("regressed 1.5x\nrest", R()) == ("regressed 1.5x\n  communication share 12% -> 41% "
                                                               "of the step\nrest")
    R.communication = None
    assert with_communication("regressed 1.5x", R()) == "regressed 1.5x"
