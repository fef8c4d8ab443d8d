"""Issue 48: the callgrind reader and the instruction-count gate (pure; no valgrind needed)."""

from __future__ import annotations

import pytest

from pytest_gpuperf.verdict.callgrind import Profile, parse_callgrind
from pytest_gpuperf.verdict.compare import Verdict
from pytest_gpuperf.verdict.instructions import (decide_instructions, diff_text, function_diff, grown_function,
                                                 per_call, per_call_counts, spread)

# main -> work (x calls), work -> leaf; own costs: main 10, work 100 per call, leaf 50 per call
SAMPLE = """# callgrind format
version: 1
creator: callgrind-3.19.0
pid: 42
cmd:  python bench.py
part: 2

desc: I1 cache: 
desc: Timerange: Basic block 10 - 20
desc: Trigger: Client Request: chain20

positions: line
events: Ir
summary: {total}


ob=(1) /lib/libpython.so
fl=(1) ceval.c
fn=(1) main
0 10
cfl=(1)
cfn=(2) work
calls={calls} 0
0 {work_incl}

fn=(2)
0 {work_self}
cfn=(3) at::_ops::add_Tensor::call(at::Tensor const&)
calls={calls} 0
0 {leaf}

fn=(3)
0 {leaf}

totals: {total}
"""


def sample(calls: int) -> str:
    work_self, leaf = 100 * calls, 50 * calls
    return SAMPLE.format(calls=calls, work_incl=work_self + leaf, work_self=work_self, leaf=leaf,
                         total=10 + work_self + leaf)


def test_parse_totals_trigger_and_per_function_counts() -> None:
    p = parse_callgrind(sample(20))
    assert p.total == 10 + 3000 and p.name == "chain20"
    assert p.self_cost == {"main": 10, "work": 2000, "at::_ops::add_Tensor::call(at::Tensor const&)": 1000}
    assert p.inclusive["main"] == 3010 and p.inclusive["work"] == 3000
    assert p.calls == {"work": 20, "at::_ops::add_Tensor::call(at::Tensor const&)": 20}


def test_parse_rejects_what_is_not_callgrind_output() -> None:
    with pytest.raises(ValueError, match="events"):
        parse_callgrind("hello\nworld\n")
    with pytest.raises(ValueError, match="Ir"):
        parse_callgrind("events: Dr Ir\n")
    with pytest.raises(ValueError, match=r"\(7\)"):
        parse_callgrind("events: Ir\nfn=(7)\n0 1\n")


def test_parse_without_totals_sums_own_costs_and_reads_lines() -> None:
    p = parse_callgrind(iter(["events: Ir\n", "fn=(1) f\n", "0 5\n", "+2 7\n", "fn=(2) g\n", "* 3\n"]))
    assert p.total == 15 and p.self_cost == {"f": 12, "g": 3} and p.name == ""


def test_per_call_subtracts_the_empty_loop() -> None:
    assert per_call(2100, 100, 20) == 100.0
    assert per_call(Profile(50), Profile(100), 20) == 0.0
    assert per_call_counts({"__loop__": Profile(100), "a": Profile(300)}, 10) == {"a": 20.0}
    with pytest.raises(ValueError):
        per_call(1, 0, 0)
    with pytest.raises(KeyError):
        per_call_counts({"a": Profile(1)}, 1)


def test_spread() -> None:
    assert spread([100.0, 100.0]) == 0.0 and spread([100.0]) == 0.0 and spread([]) == 0.0
    assert spread([100.0, 101.0, 100.5]) == pytest.approx(0.01)


@pytest.mark.parametrize("current, verdict", [(105.0, Verdict.REGRESSED), (100.9, Verdict.UNCHANGED),
                                              (99.2, Verdict.UNCHANGED), (95.0, Verdict.IMPROVED)])
def test_gate_at_the_tolerance(current: float, verdict: Verdict) -> None:
    v = decide_instructions(current, 100.0, tolerance=0.01, benchmark_id="chain20")
    assert v.verdict is verdict and v.failed == (verdict is Verdict.REGRESSED)


def test_gate_message_names_counts_and_ratio() -> None:
    v = decide_instructions(210_399, [200_038, 200_040], tolerance=0.01, benchmark_id="chain20")
    assert v.verdict is Verdict.REGRESSED
    assert v.message == ("chain20: instructions per call 200,038..200,040 -> 210,399 (x1.0518, regressed; "
                         "tolerance 1.0%)")
    assert v.stored == 200_040 and v.limit == pytest.approx(202_040.4)


def test_gate_without_baseline_and_bad_input() -> None:
    assert decide_instructions(5.0, None).verdict is Verdict.NO_BASELINE
    assert decide_instructions(5.0, []).verdict is Verdict.NO_BASELINE
    with pytest.raises(ValueError, match="tolerance"):
        decide_instructions(5.0, 4.0, tolerance=-0.1)
    with pytest.raises(ValueError):
        decide_instructions(-1.0, 4.0)


def test_diff_names_the_function_that_grew() -> None:
    before, after = parse_callgrind(sample(20)), parse_callgrind(sample(21))
    diff = function_diff(before, after, 20)
    assert [c.name for c in diff] == ["main", "work", "at::_ops::add_Tensor::call(at::Tensor const&)"]
    named = grown_function(before, after, 20)
    assert named is not None and named.name == "work"  # the deepest function carrying >= half the growth
    assert named.calls_delta == pytest.approx(0.05) and named.delta == pytest.approx(7.5)
    text = diff_text(diff, named)
    assert text.startswith("the function that grew: work (+8 Ir/call, +0.05 calls); grew most (inclusive): main")
    assert grown_function(after, before, 20) is None  # it shrank


def test_the_default_tolerance_passes_the_studied_aa_spread_and_catches_5_percent() -> None:
    # docs/instructions.md: A/A within 2.86%, one more add in 20: x1.0335 at least
    assert decide_instructions(11_489 * 1.0286, 11_489).verdict is Verdict.UNCHANGED
    assert decide_instructions(214_260 * 1.0335, 214_260).verdict is Verdict.REGRESSED
