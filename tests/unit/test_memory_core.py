"""Unit tests for the pure memory pieces: sizes (units), decide_memory (compare), the memory
helpers that need no device (memory), and the memory options."""

from __future__ import annotations

import dataclasses

import pytest

from pytest_gpuperf.verdict.compare import MEMORY_SLACK_BYTES, MemoryComparison, Verdict, decide_memory
from pytest_gpuperf.measure.memory import (
    MemoryLimitError,
    MemoryReport,
    budget_message,
    cpu_peak_from_events,
    format_blocks,
    largest_at_peak,
    leak_message,
)
from pytest_gpuperf.core.options import BenchOptions, OptionError, resolve
from pytest_gpuperf.core.units import SIZE_UNITS, byte_unit_for, format_bytes, parse_size
from pytest_gpuperf.reporting.messages import gate_messages

KiB, MiB, GiB, TiB = 2**10, 2**20, 2**30, 2**40

# --------------------------------------------------------------------------------------------
# parse_size
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, expected",
    [
        # int: bytes
        (0, 0),
        (1536, 1536),
        (10**15, 10**15),
        # IEC units (powers of 1024)
        ("1.5 GiB", 1610612736),
        ("64 KiB", 65536),
        ("3 TiB", 3 * TiB),
        ("2 GiB", 2 * GiB),
        (".5 MiB", 524288),
        ("1. MiB", MiB),
        ("2.75 GiB", 2952790016),
        # SI units (powers of 1000), no space needed
        ("800MB", 800_000_000),
        ("2kB", 2000),
        ("1TB", 10**12),
        ("1 GB", 10**9),
        ("0.1 GB", 100_000_000),  # decimal arithmetic: no float error
        ("1.2345 MB", 1_234_500),
        # bytes
        ("12 B", 12),
        ("0 B", 0),
        ("+1 KiB", 1024),
        # exponents
        ("1e3 B", 1000),
        ("1E2 kB", 100_000),
        ("1e-3 kB", 1),
        ("2.5e1 MiB", 25 * MiB),
        # surrounding whitespace
        ("  7 MiB  ", 7 * MiB),
        ("\t5MB\n", 5_000_000),
        # fractional bytes round to the nearest byte (no ties here)
        ("0.0001 B", 0),
        ("1.4 B", 1),
        ("1.6 B", 2),
        ("1.0000001 kB", 1000),
        ("1.5e-3 KiB", 2),  # 1.536 B
        ("0.999 KiB", 1023),  # 1022.976 B
        ("33.3 MiB", 34917581),  # 34917580.8 B
        ("4.2 TiB", 4617948836659),  # 4617948836659.2 B
    ],
)
def test_parse_size_good(value, expected):
    got = parse_size(value)
    assert got == expected
    assert type(got) is int


@pytest.mark.parametrize(
    "value",
    [
        "12",  # no unit
        "1.5",  # no unit
        "-1 MiB",  # negative
        "-0.5 GiB",
        "1 mb",  # units are case-sensitive
        "1 KB",
        "1 kib",
        "1 GIB",
        "abc",
        "",
        "   ",
        "MiB",  # no number
        "1 GiB GiB",
        "1 2 MiB",
        "1,5 GiB",
        "1_000 B",
        "0x10 B",
        "nan MiB",
        "inf GiB",
        "1e MiB",
        "- 1 MiB",
        1.5,  # float
        2.0,
        True,  # bool is not an int here
        False,
        -3,  # negative int
        None,
        b"1 MiB",
        [1],
    ],
)
def test_parse_size_bad(value):
    with pytest.raises(ValueError) as info:
        parse_size(value)
    msg = str(info.value)
    assert "KiB" in msg and "MB" in msg  # the accepted units are listed
    assert "GiB" in msg and "kB" in msg
    assert repr(value) in msg  # the offending value is named


def test_parse_size_bad_messages_say_why():
    with pytest.raises(ValueError, match="no unit"):
        parse_size("12")
    with pytest.raises(ValueError, match="negative"):
        parse_size("-1 MiB")
    with pytest.raises(ValueError, match="negative"):
        parse_size(-3)
    with pytest.raises(ValueError, match="unknown unit 'mb'"):
        parse_size("1 mb")
    with pytest.raises(ValueError, match=r"\(float\)"):
        parse_size(1.5)


def test_size_units_table():
    assert SIZE_UNITS == {"B": 1, "kB": 1000, "MB": 10**6, "GB": 10**9, "TB": 10**12,
                          "KiB": KiB, "MiB": MiB, "GiB": GiB, "TiB": TiB}
    for unit, scale in SIZE_UNITS.items():
        assert parse_size(f"1 {unit}") == scale
        assert parse_size(f"1{unit}") == scale


def test_parse_size_huge_exponent_raises_value_error():
    with pytest.raises(ValueError, match="KiB"):
        parse_size("1e1000000 B")


# --------------------------------------------------------------------------------------------
# format_bytes / byte_unit_for
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "n, expected",
    [
        (851443712, "812 MiB"),
        (1.72 * GiB, "1.72 GiB"),
        (512, "512 B"),
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1.00 KiB"),
        (1536, "1.50 KiB"),
        (10 * MiB, "10.0 MiB"),
        (12.34 * MiB, "12.3 MiB"),
        (99.9 * MiB, "99.9 MiB"),
        (100 * MiB, "100 MiB"),
        (999 * GiB, "999 GiB"),
        (3 * TiB, "3.00 TiB"),
        (2**50, "1024 TiB"),  # no unit above TiB
        (-2 * MiB, "-2.00 MiB"),
        (None, "-"),
    ],
)
def test_format_bytes(n, expected):
    assert format_bytes(n) == expected


@pytest.mark.parametrize(
    "n, unit, expected",
    [
        (0.31 * GiB, "GiB", "0.31 GiB"),
        (1.72 * GiB, "GiB", "1.72 GiB"),
        (1.5 * GiB, "GiB", "1.50 GiB"),
        (0, "GiB", "0.00 GiB"),
        (MiB, "KiB", "1024 KiB"),
        (5 * 10**6, "MB", "5.00 MB"),
        (1536, "B", "1536 B"),
        (None, "GiB", "-"),
    ],
)
def test_format_bytes_forced_unit(n, unit, expected):
    assert format_bytes(n, unit) == expected


@pytest.mark.parametrize(
    "n, expected",
    [(0, ("B", 1)), (1023, ("B", 1)), (1024, ("KiB", KiB)), (MiB - 1, ("KiB", KiB)), (MiB, ("MiB", MiB)),
     (GiB, ("GiB", GiB)), (5 * TiB, ("TiB", TiB)), (-3 * MiB, ("MiB", MiB))],
)
def test_byte_unit_for(n, expected):
    assert byte_unit_for(n) == expected


@pytest.mark.parametrize("n", [1, 1000, 4097, 851443712, 1.72 * GiB, 3 * TiB + 12345, 7 * MiB + 1])
def test_format_bytes_parses_back_within_rounding(n):
    # What format_bytes prints is a valid size, within its three significant digits of n.
    assert parse_size(format_bytes(n)) == pytest.approx(n, rel=0.005, abs=0.5)


@pytest.mark.parametrize(
    "n, expected",
    [(MiB - 1, "1.00 MiB"), (100 * MiB - 1, "100 MiB"), (10 * GiB - MiB, "10.0 GiB")],
)
def test_format_bytes_rounding_at_unit_boundary(n, expected):
    assert format_bytes(n) == expected


# --------------------------------------------------------------------------------------------
# decide_memory / MemoryComparison
# --------------------------------------------------------------------------------------------


def test_memory_slack_is_one_mib():
    assert MEMORY_SLACK_BYTES == MiB


def test_decide_memory_boundaries_exact():
    # threshold 0.25 is exact in binary: the gates are exactly 126 MiB and 74 MiB.
    base = 100 * MiB
    upper = 125 * MiB + MEMORY_SLACK_BYTES
    lower = 75 * MiB - MEMORY_SLACK_BYTES
    assert decide_memory(upper, base, threshold=0.25).verdict is Verdict.UNCHANGED
    assert decide_memory(upper + 1, base, threshold=0.25).verdict is Verdict.REGRESSED
    assert decide_memory(lower, base, threshold=0.25).verdict is Verdict.UNCHANGED
    assert decide_memory(lower - 1, base, threshold=0.25).verdict is Verdict.IMPROVED
    assert decide_memory(base, base, threshold=0.25).verdict is Verdict.UNCHANGED


def test_decide_memory_default_threshold():
    base = 1000 * MiB  # gates: 1021 MiB and 979 MiB
    m = decide_memory(1021 * MiB - KiB, base)
    assert m.verdict is Verdict.UNCHANGED and m.threshold == 0.02
    assert decide_memory(1021 * MiB + KiB, base).verdict is Verdict.REGRESSED
    assert decide_memory(979 * MiB + KiB, base).verdict is Verdict.UNCHANGED
    assert decide_memory(979 * MiB - KiB, base).verdict is Verdict.IMPROVED


def test_decide_memory_slack_dominates_small_peaks():
    # 0 -> 1 MiB: within the slack; 0 -> 1 MiB + 1: regressed.
    assert decide_memory(MiB, 0).verdict is Verdict.UNCHANGED
    assert decide_memory(MiB + 1, 0).verdict is Verdict.REGRESSED
    # 1 MiB -> 0 is within the slack; 2 MiB -> 0 drops below 2 MiB * 0.98 - 1 MiB.
    assert decide_memory(0, MiB).verdict is Verdict.UNCHANGED
    assert decide_memory(0, 2 * MiB).verdict is Verdict.IMPROVED
    # With slack 0 and threshold 0, any byte counts.
    assert decide_memory(1001, 1000, threshold=0.0, slack_bytes=0).verdict is Verdict.REGRESSED
    assert decide_memory(999, 1000, threshold=0.0, slack_bytes=0).verdict is Verdict.IMPROVED
    assert decide_memory(1000, 1000, threshold=0.0, slack_bytes=0).verdict is Verdict.UNCHANGED


def test_decide_memory_no_baseline():
    m = decide_memory(5 * GiB, None, benchmark_id="x")
    assert m.verdict is Verdict.NO_BASELINE
    assert m.baseline_bytes is None and m.change is None
    assert not m.failed and gate_messages(m) == []


def test_decide_memory_fields():
    m = decide_memory(3 * MiB, 2 * MiB, threshold=0.1, max_memory_bytes=4 * MiB, benchmark_id="m.py::t",
                      device="cuda:1", baseline_file="b.json")
    assert isinstance(m, MemoryComparison)
    assert (m.current_bytes, m.baseline_bytes, m.threshold, m.max_memory_bytes) == (3 * MiB, 2 * MiB, 0.1, 4 * MiB)
    assert (m.benchmark_id, m.device, m.baseline_file, m.snapshot) == ("m.py::t", "cuda:1", "b.json", None)
    assert m.change == pytest.approx(0.5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.current_bytes = 0  # type: ignore[misc]


def test_decide_memory_over_budget():
    m = decide_memory(901 * MiB, None, max_memory_bytes=900 * MiB)
    assert m.verdict is Verdict.NO_BASELINE and m.over_budget and m.failed
    at = decide_memory(900 * MiB, None, max_memory_bytes=900 * MiB)
    assert not at.over_budget and not at.failed  # at the budget is fine
    assert not decide_memory(901 * MiB, None).over_budget  # no budget
    # Over the budget fails even when unchanged against the baseline, and even when improved.
    assert decide_memory(901 * MiB, 901 * MiB, max_memory_bytes=900 * MiB).failed
    improved = decide_memory(901 * MiB, 2000 * MiB, max_memory_bytes=900 * MiB)
    assert improved.verdict is Verdict.IMPROVED and improved.failed
    # A budget of 0 bytes: anything allocated is over it.
    assert decide_memory(1, None, max_memory_bytes=0).over_budget
    assert not decide_memory(0, None, max_memory_bytes=0).over_budget


@pytest.mark.parametrize(
    "current, baseline, failed",
    [(200 * MiB, 100 * MiB, True), (50 * MiB, 100 * MiB, False), (100 * MiB, 100 * MiB, False),
     (100 * MiB, None, False)],
)
def test_memory_comparison_failed(current, baseline, failed):
    assert decide_memory(current, baseline).failed is failed


def test_memory_regression_message():
    base = 812 * MiB
    cur = int(812 * MiB * 1.11)  # 901.32 MiB
    m = decide_memory(cur, base, benchmark_id="m.py::test_attn[1024]")
    assert m.verdict is Verdict.REGRESSED
    assert m.change == pytest.approx(0.11, abs=1e-6)
    (msg,) = gate_messages(m)
    assert msg.startswith("memory regressed +11.0%: 812 MiB -> 901 MiB")  # the reason first (issue 24)
    assert msg == ("memory regressed +11.0%: 812 MiB -> 901 MiB, allowed +2% + 1.00 MiB\n"
                   "  m.py::test_attn[1024]; if the change is intended, re-record with "
                   "`pytest --gpuperf-update-baselines`")
    m = decide_memory(cur, base, benchmark_id="t", baseline_file="gpuperf/b.json", threshold=0.05)
    assert gate_messages(m) == ["memory regressed +11.0%: 812 MiB -> 901 MiB, allowed +5% + 1.00 MiB\n  t; "
                                "baseline: gpuperf/b.json; if the change is intended, re-record with "
                                "`pytest --gpuperf-update-baselines`"]


def test_memory_budget_message_names_max_memory_and_device():
    m = decide_memory(int(812 * MiB * 1.11), None, max_memory_bytes=850 * MiB, benchmark_id="t",
                      device="cuda:0")
    assert gate_messages(m) == ["memory budget exceeded: peak 901 MiB > max_memory 850 MiB on cuda:0\n  t"]
    both = decide_memory(int(812 * MiB * 1.11), 812 * MiB, max_memory_bytes=850 * MiB, benchmark_id="t",
                         device="cpu")
    msgs = gate_messages(both)
    assert len(msgs) == 2
    assert msgs[0].startswith("memory regressed +11.0%: 812 MiB -> 901 MiB")
    assert msgs[1] == "memory budget exceeded: peak 901 MiB > max_memory 850 MiB on cpu\n  t"


def test_memory_messages_empty_when_passing_and_snapshot_only_on_failure():
    ok = dataclasses.replace(decide_memory(100 * MiB, 100 * MiB), snapshot="memory snapshot: s.pickle")
    assert not ok.failed and gate_messages(ok) == []
    improved = decide_memory(10 * MiB, 100 * MiB)
    assert improved.verdict is Verdict.IMPROVED and gate_messages(improved) == []
    bad = dataclasses.replace(decide_memory(300 * MiB, 100 * MiB), snapshot="memory snapshot: s.pickle")
    msgs = gate_messages(bad)
    assert len(msgs) == 2 and msgs[-1] == "memory snapshot: s.pickle"


@pytest.mark.parametrize(
    "kwargs",
    [dict(current_bytes=-1, baseline_bytes=0), dict(current_bytes=0, baseline_bytes=-1),
     dict(current_bytes=1, baseline_bytes=1, threshold=-0.01)],
)
def test_decide_memory_rejects_negative(kwargs):
    with pytest.raises(ValueError):
        decide_memory(**kwargs)


def test_decide_memory_negative_threshold_message():
    with pytest.raises(ValueError, match="memory threshold must be >= 0"):
        decide_memory(1, 1, threshold=-1.0)
    with pytest.raises(ValueError, match="bytes"):
        decide_memory(-5, None)


def test_memory_regression_message_from_zero_baseline_does_not_claim_zero_change():
    m = decide_memory(5 * MiB, 0, benchmark_id="t")
    assert m.verdict is Verdict.REGRESSED
    (msg,) = gate_messages(m)
    assert "0 B -> 5.00 MiB" in msg
    assert "+0.0%" not in msg


def test_decide_memory_rejects_nan_threshold():
    with pytest.raises(ValueError):
        decide_memory(5 * MiB, MiB, threshold=float("nan"))


# --------------------------------------------------------------------------------------------
# cpu_peak_from_events
# --------------------------------------------------------------------------------------------


def test_cpu_peak_sorts_by_time():
    events = [(3, -50), (1, 100), (4, 20), (2, 30)]
    # In time order: +100 -> 100, +30 -> 130, -50 -> 80, +20 -> 100.
    assert cpu_peak_from_events(events) == (130, 100)
    # Same events in time order give the same answer.
    assert cpu_peak_from_events(sorted(events)) == (130, 100)
    assert cpu_peak_from_events(reversed(events)) == (130, 100)


def test_cpu_peak_free_first_never_below_zero():
    # The block frees older memory first: the running sum goes negative; the peak stays >= 0.
    assert cpu_peak_from_events([(0, -100), (1, 40)]) == (0, -60)
    assert cpu_peak_from_events([(5, 40), (0, -100)]) == (0, -60)  # same, out of order
    assert cpu_peak_from_events([(0, -100), (1, 150), (2, -20)]) == (50, 30)


def test_cpu_peak_empty_and_generators():
    assert cpu_peak_from_events([]) == (0, 0)
    assert cpu_peak_from_events(iter([])) == (0, 0)
    gen = ((t, n) for t, n in [(10, 4096), (20, -4096), (30, 1024)])
    assert cpu_peak_from_events(gen) == (4096, 1024)


def test_cpu_peak_alloc_free_pairs():
    # 10 tensors of 1 MiB allocated and freed one after the other: peak 1 MiB, net 0.
    events = []
    for i in range(10):
        events += [(2 * i, MiB), (2 * i + 1, -MiB)]
    assert cpu_peak_from_events(events[::-1]) == (MiB, 0)
    # All allocated, then all freed: peak 10 MiB.
    events = [(i, MiB) for i in range(10)] + [(10 + i, -MiB) for i in range(10)]
    assert cpu_peak_from_events(events[::-1]) == (10 * MiB, 0)


# --------------------------------------------------------------------------------------------
# largest_at_peak / format_blocks
# --------------------------------------------------------------------------------------------


def _frames(*where):
    return [{"filename": f, "line": ln, "name": n} for f, ln, n in where]


def _alloc(addr, size, *where):
    return {"action": "alloc", "addr": addr, "size": size, "frames": _frames(*where)}


def _free(addr, size, action="free_requested"):
    return {"action": action, "addr": addr, "size": size, "frames": []}


def _trace():
    sizes = {1: 10, 2: 700, 3: 30, 4: 500, 5: 20, 6: 600, 7: 40}  # MiB
    trace = [
        # freeing a block allocated before recording started is ignored
        _free(999, 5000 * MiB), _free(999, 5000 * MiB, "free_completed"),
        {"action": "segment_alloc", "addr": 0, "size": 4096 * MiB, "frames": []},
    ]
    for addr, mib in sizes.items():
        trace.append(_alloc(addr, mib * MiB, ("model.py", 10 + addr, "forward"), ("train.py", 40, "step")))
    # peak here: 1900 MiB; then free the 700 MiB block and allocate 650 MiB (1850 MiB < peak)
    trace += [_free(2, 700 * MiB), _free(2, 700 * MiB, "free_completed"),
              _alloc(8, 650 * MiB, ("model.py", 99, "backward"))]
    return trace


def test_largest_at_peak_top5_at_the_peak():
    peak, blocks = largest_at_peak(_trace())
    assert peak == 1900 * MiB
    assert [b["size"] for b in blocks] == [700 * MiB, 600 * MiB, 500 * MiB, 40 * MiB, 30 * MiB]
    assert [b["addr"] for b in blocks] == [2, 6, 4, 7, 3]
    # Not the blocks live at the end (which would include the 650 MiB one).
    assert 8 not in [b["addr"] for b in blocks]


def test_largest_at_peak_top_and_empty():
    peak, blocks = largest_at_peak(_trace(), top=2)
    assert peak == 1900 * MiB and [b["addr"] for b in blocks] == [2, 6]
    assert largest_at_peak([]) == (0, [])
    only_frees = [_free(1, 100), _free(1, 100, "free_completed")]
    assert largest_at_peak(only_frees) == (0, [])


def test_largest_at_peak_later_higher_peak_and_free_action():
    trace = [_alloc(1, 100), _alloc(2, 200), {"action": "free", "addr": 1, "size": 100, "frames": []},
             _alloc(3, 150), _alloc(4, 50)]
    # 100, 300, 200, 350, 400: the peak is at the end.
    peak, blocks = largest_at_peak(trace)
    assert peak == 400
    assert [b["addr"] for b in blocks] == [2, 3, 4]


def test_largest_at_peak_address_reuse():
    trace = [_alloc(1, 100), _free(1, 100), _free(1, 100, "free_completed"), _alloc(1, 80), _alloc(2, 30)]
    peak, blocks = largest_at_peak(trace)
    assert peak == 110
    assert [(b["addr"], b["size"]) for b in blocks] == [(1, 80), (2, 30)]


def test_format_blocks_python_frames():
    frames = [
        {"filename": "/usr/lib/libtorch_cuda.so", "line": 0, "name": "c10::cuda::alloc"},
        {"filename": "model.py", "line": 12, "name": "forward"},
        {"filename": "??", "line": 0, "name": "at::empty"},
        {"filename": "train.py", "line": 40, "name": "step"},
        {"filename": "a.py", "line": 1, "name": "f"},
        {"filename": "b.py", "line": 2, "name": "g"},
    ]
    blocks = [{"size": 700 * MiB, "frames": frames}, {"size": 512, "frames": frames[:1]}, {"size": 2 * GiB}]
    text = format_blocks(blocks)
    assert text.splitlines() == [
        "  700 MiB  model.py:12 in forward; train.py:40 in step; a.py:1 in f",  # 3 innermost Python frames
        "  512 B  (no Python frame)",
        "  2.00 GiB  (no Python frame)",
    ]
    assert format_blocks(blocks[:1], frames=1) == "  700 MiB  model.py:12 in forward"
    assert format_blocks([]) == ""


def test_format_blocks_of_largest_at_peak():
    _, blocks = largest_at_peak(_trace(), top=2)
    assert format_blocks(blocks).splitlines() == [
        "  700 MiB  model.py:12 in forward; train.py:40 in step",
        "  600 MiB  model.py:16 in forward; train.py:40 in step",
    ]


# --------------------------------------------------------------------------------------------
# MemoryReport / messages / MemoryLimitError
# --------------------------------------------------------------------------------------------


def _report(**kw):
    base = dict(device="cuda:0", peak_bytes=round(1.72 * GiB), peak_total_bytes=round(2.03 * GiB),
                leaked_bytes=0, budget_bytes=1610612736, allocated_before_bytes=round(0.31 * GiB))
    base.update(kw)
    return MemoryReport(**base)


def test_memory_report_defaults_and_frozen():
    r = MemoryReport(device="cpu", peak_bytes=10, peak_total_bytes=10, leaked_bytes=-4)
    assert r.reserved_peak_bytes is None and r.fragmentation is None
    assert r.budget_bytes is None and r.allocated_before_bytes is None
    assert r.leaked_bytes == -4
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.peak_bytes = 0  # type: ignore[misc]


def test_budget_message_cuda():
    assert budget_message(_report()) == (
        "memory budget exceeded: peak 1.72 GiB > budget 1.50 GiB on cuda:0 "
        "(allocated before the block: 0.31 GiB)"
    )


def test_budget_message_uses_the_budget_unit_for_all_sizes():
    r = _report(peak_bytes=600 * MiB, budget_bytes=512 * MiB, allocated_before_bytes=2 * GiB)
    assert budget_message(r) == (
        "memory budget exceeded: peak 600 MiB > budget 512 MiB on cuda:0 "
        "(allocated before the block: 2048 MiB)"
    )


def test_budget_message_cpu_says_not_tracked():
    r = _report(device="cpu", peak_bytes=2 * GiB, peak_total_bytes=2 * GiB, allocated_before_bytes=None)
    assert budget_message(r) == (
        "memory budget exceeded: peak 2.00 GiB > budget 1.50 GiB on cpu "
        "(allocated before the block: not tracked on the CPU)"
    )


def test_leak_message():
    r = _report(device="cpu", leaked_bytes=12 * MiB)
    assert leak_message(r, MiB) == (
        "memory leak: 12.0 MiB still allocated after the block on cpu > max_leak 1.00 MiB"
    )
    msg = leak_message(_report(leaked_bytes=3 * GiB), 512 * MiB)
    assert msg == "memory leak: 3072 MiB still allocated after the block on cuda:0 > max_leak 512 MiB"
    assert "max_leak 0 B" in leak_message(_report(leaked_bytes=100), 0)


def test_memory_limit_error():
    r = _report()
    e = MemoryLimitError("budget exceeded", r, "summary text")
    assert isinstance(e, AssertionError)
    assert str(e) == "budget exceeded"
    assert e.report is r and e.details == "summary text"
    e2 = MemoryLimitError("x")
    assert e2.report is None and e2.details is None
    with pytest.raises(AssertionError, match="budget exceeded"):
        raise e


# --------------------------------------------------------------------------------------------
# options: memory_threshold, max_memory
# --------------------------------------------------------------------------------------------


def test_memory_option_defaults():
    opts = resolve()
    assert opts.memory_threshold == 0.02 and opts.max_memory is None
    assert BenchOptions().to_dict()["max_memory"] is None


@pytest.mark.parametrize(
    "value, expected",
    [("2 GiB", 2 * GiB), ("1.5 GiB", 1610612736), ("800MB", 800_000_000), (4096, 4096), (0, 0), (None, None)],
)
def test_max_memory_option(value, expected):
    assert resolve({"max_memory": value}).max_memory == expected


def test_max_memory_sources():
    assert resolve(ini={"max_memory": "1 GiB"}).max_memory == GiB
    assert resolve({"max_memory": "2 GiB"}, ini={"max_memory": "1 GiB"}).max_memory == 2 * GiB
    assert resolve(ini={"max_memory": None}).max_memory is None


@pytest.mark.parametrize("value", ["2 gb", "12", "-1 MiB", 1.5, True, -1, "lots"])
def test_max_memory_bad(value):
    with pytest.raises(OptionError) as info:
        resolve({"max_memory": value})
    msg = str(info.value)
    assert "max_memory" in msg
    assert "gpu_bench marker" in msg
    assert "KiB" in msg  # the size help is carried over
    assert isinstance(info.value, ValueError)


def test_max_memory_bad_in_ini_names_source():
    with pytest.raises(OptionError, match="ini max_memory"):
        resolve(ini={"max_memory": "2048"})  # ini strings need a unit too


def test_max_memory_huge_exponent_is_option_error():
    with pytest.raises(OptionError, match="max_memory"):
        resolve({"max_memory": "1e1000000 B"})


@pytest.mark.parametrize("value, expected", [(0.1, 0.1), ("0.1", 0.1), (0, 0.0), (" 0.5 ", 0.5), (3, 3.0)])
def test_memory_threshold_option(value, expected):
    assert resolve({"memory_threshold": value}).memory_threshold == expected


@pytest.mark.parametrize("value", [-0.01, "-1", float("nan"), "abc", True, None])
def test_memory_threshold_bad(value):
    with pytest.raises(OptionError, match="memory_threshold"):
        resolve({"memory_threshold": value})


def test_snapshot_recorder_records_python_stacks_only(monkeypatch):
    """C++ stack symbolization (torch's default ``stacks="all"``) is slow: record Python stacks
    (issue 11, item 9); a torch without the keyword gets its default."""
    import torch

    from pytest_gpuperf.measure.memory import SnapshotRecorder

    calls = []

    def record(**kwargs):
        calls.append(kwargs)

    monkeypatch.setattr(torch.cuda.memory, "_record_memory_history", record)
    SnapshotRecorder("cuda:0", "snap.pickle").start()
    assert calls == [{"max_entries": 200_000, "device": "cuda:0", "stacks": "python"}]

    def old_record(max_entries=None, device=None):
        calls.append({"max_entries": max_entries, "device": device})

    calls.clear()
    monkeypatch.setattr(torch.cuda.memory, "_record_memory_history", old_record)
    SnapshotRecorder("cuda:0", "snap.pickle").start()
    assert calls == [{"max_entries": 200_000, "device": "cuda:0"}]


def test_cuda_tracker_empties_the_cache_first_so_fragmentation_is_the_blocks(monkeypatch):
    """Cache left by earlier code (the L2-flush buffer, the calibration copy) must not count as
    the block's fragmentation (issue 11, item 8): the tracker releases it before resetting the peaks."""
    import torch

    from pytest_gpuperf.measure.memory import MemoryTracker

    calls = []
    state = {"allocated": 100, "peak": 100, "reserved": 1_000}  # 900 B of stale cache

    def empty_cache():
        calls.append("empty_cache")
        state["reserved"] = state["allocated"]

    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append("sync"))
    monkeypatch.setattr(torch.cuda, "empty_cache", empty_cache)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device=None: calls.append("reset"))
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: state["allocated"])
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: state["peak"])
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda device=None: state["reserved"])

    class Dev:
        type = "cuda"

    with MemoryTracker(Dev()) as t:
        state.update(peak=300, reserved=400)  # the block: 200 B at peak in a 300 B segment
    assert calls[:3] == ["sync", "empty_cache", "reset"]
    r = t.report
    assert r.peak_bytes == 200 and r.reserved_peak_bytes == 400
    assert r.fragmentation == pytest.approx(400 / 300)


def test_a_peak_that_varies_between_calls_is_gated_beyond_twice_its_spread():
    # issue 31: a data collector whose peak varies (37.3 MiB -> 43.2 MiB on an unchanged rerun)
    from pytest_gpuperf.verdict.compare import decide_memory as decide

    mib = 1 << 20
    base_low, base = 35 * mib, 40 * mib  # the update run saw 35..40 MiB between its calls
    aa = decide(43 * mib, base, current_low_bytes=37 * mib, baseline_low_bytes=base_low)
    # spreads relative to the highest: 37/43 now (14%), 35/40 stored (12.5%), applied to the baseline's 40 MiB
    assert aa.verdict is Verdict.UNCHANGED and aa.spread_bytes == int((6 / 43) * 40 * mib) and not aa.failed
    # exactly reproduced: never a spread
    assert decide(40 * mib, 40 * mib).spread_bytes is None
    # a real regression clears the limit with this run's lowest peak
    big = decide(100 * mib, base, current_low_bytes=90 * mib, baseline_low_bytes=base_low)
    assert big.verdict is Verdict.REGRESSED
    # the limit: baseline high * (1 + threshold) + slack + 2 x spread
    limit = 40 * mib * 1.02 + mib + 2 * 5 * mib  # 5/40 of 40 MiB
    assert decide(int(limit) + 1, base, baseline_low_bytes=base_low).verdict is Verdict.REGRESSED
    assert decide(int(limit) - 1, base, baseline_low_bytes=base_low).verdict is Verdict.UNCHANGED
    assert decide(mib, base, current_low_bytes=mib, baseline_low_bytes=base_low).verdict is Verdict.IMPROVED
    # a budget still applies to the highest peak
    assert decide(43 * mib, base, current_low_bytes=37 * mib, baseline_low_bytes=base_low,
                  max_memory_bytes=42 * mib).over_budget
