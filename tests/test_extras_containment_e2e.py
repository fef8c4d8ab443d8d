"""End-to-end: every auxiliary measurement is contained (issue 31).

Timings are scripted (tests/scripted.py), so the timing verdict cannot flip; the extras are real.
A module whose ``__eq__`` result cannot be converted to bool (what a module whose parameters
live in a tensordict does) breaks torch's ``FlopCounterMode`` (its module tracker compares the
modules it enters): the counts are still taken, with a note. A function whose counting raises
whatever the counter (it refuses to run under any dispatch mode) is recorded and compared with a
note saying the counts are unavailable; with ``max_ops`` asked for, the test fails with the
reason. Peak memory and the bottleneck classification are contained the same way.
"""

from __future__ import annotations

import json

import pytest

from scripted import script_timings

pytest_plugins = ["pytester"]

RUN = ("-p", "no:cacheprovider")
STEADY = {"ms": 1.0, "cv": 0.02, "seed": 3}

WEIRD_MODULE = """
import pytest, torch


class Refuses:
    def __bool__(self):
        raise RuntimeError("Converting a weird module to boolean value is not permitted")


class WeirdLinear(torch.nn.Linear):
    # like a module whose parameters are held in a tensordict: == gives an object that refuses bool()
    def __eq__(self, other):
        return Refuses()

    __hash__ = torch.nn.Module.__hash__


@pytest.mark.gpu_bench(max_time=0.05, warmup_time=0.0, device="cpu"{marker})
def test_weird(gpu_bench):
    torch.manual_seed(0)
    model = torch.nn.Sequential(WeirdLinear(16, 16), torch.nn.ReLU(), WeirdLinear(16, 16))
    x = torch.randn(8, 16)
    gpu_bench(model, x)
"""

REFUSES_DISPATCH_MODES = """
import pytest, torch
from torch.utils._python_dispatch import _get_current_dispatch_mode


def step(x):
    if _get_current_dispatch_mode() is not None:
        raise RuntimeError("this function refuses to run under a dispatch mode")
    return (x @ x).relu()


@pytest.mark.gpu_bench(max_time=0.05, warmup_time=0.0, device="cpu"{marker})
def test_step(gpu_bench):
    gpu_bench(step, torch.randn(16, 16))
"""


def broken(module: str, name: str, message: str) -> str:
    """Inner conftest text: ``module.name`` raises ``RuntimeError(message)`` during each inner test
    (a monkeypatch fixture, undone after it: the inner session shares this process's modules)."""
    return f"""
import importlib, pytest

def _broken(*args, **kwargs):
    raise RuntimeError({message!r})

@pytest.fixture(autouse=True)
def _break_it(monkeypatch):
    monkeypatch.setattr(importlib.import_module({module!r}), {name!r}, _broken)
"""


def _entry(pytester: pytest.Pytester, name: str) -> dict:
    (path,) = pytester.path.joinpath("baselines").rglob("*.json")
    return json.loads(path.read_text())["benchmarks"][name]


def test_a_module_that_breaks_the_flop_counter_is_still_counted(pytester: pytest.Pytester) -> None:
    script_timings(pytester, STEADY)
    pytester.makepyfile(test_weird=WEIRD_MODULE.format(marker=""))
    rec = pytester.runpytest("--gpuperf-update-baselines", *RUN)
    rec.assert_outcomes(passed=1)
    out = rec.stdout.str()
    assert "FLOPs counted without torch's FlopCounterMode, which raised RuntimeError: Converting a weird" in out
    entry = _entry(pytester, "test_weird")
    # 2 linear layers, 8x16 @ 16x16: 2*8*16*16 FLOP each
    assert entry["counts"]["flops"] == 2 * 2 * 8 * 16 * 16
    assert entry["counts"]["by_name"]["ops"]["aten::addmm"] == 2
    assert "unavailable" not in entry
    rec = pytester.runpytest("--gpuperf", "--gpuperf-json", "r.json", *RUN)
    rec.assert_outcomes(passed=1)
    report = json.loads(pytester.path.joinpath("r.json").read_text())
    (bench,) = report["benchmarks"].values()
    assert bench["count_comparison"]["verdict"] == "unchanged"


def test_counts_that_cannot_be_taken_leave_the_timing_and_say_why(pytester: pytest.Pytester) -> None:
    script_timings(pytester, STEADY)
    pytester.makepyfile(test_step=REFUSES_DISPATCH_MODES.format(marker=""))
    rec = pytester.runpytest("--gpuperf-update-baselines", *RUN)
    rec.assert_outcomes(passed=1)
    out = rec.stdout.str()
    assert ("test_step.py::test_step: counts unavailable: RuntimeError: this function refuses to run under a "
            "dispatch mode (at ") in out and "test_step.py:7 in step)" in out
    assert "the timing and the other checks stand" in out
    entry = _entry(pytester, "test_step")
    assert entry["counts"] is None and entry["samples_ms"] and entry["peak_memory_bytes"] is not None
    assert entry["unavailable"]["counts"]["error"].startswith("RuntimeError: this function refuses")
    assert "in step" in entry["unavailable"]["counts"]["where"]
    # a later compare passes on timing, and says the counts are missing
    rec = pytester.runpytest("--gpuperf", "--gpuperf-json", "r.json", *RUN)
    rec.assert_outcomes(passed=1)
    assert "counts unavailable: RuntimeError: this function refuses" in rec.stdout.str()
    (bench,) = json.loads(pytester.path.joinpath("r.json").read_text())["benchmarks"].values()
    assert bench["verdict"] == "unchanged" and bench["count_comparison"] is None
    assert "counts" in bench["unavailable"]


def test_counts_missing_from_the_baseline_are_named_in_a_later_compare(pytester: pytest.Pytester) -> None:
    script_timings(pytester, STEADY)
    pytester.makepyfile(test_step=REFUSES_DISPATCH_MODES.format(marker=""))
    pytester.runpytest("--gpuperf-update-baselines", *RUN).assert_outcomes(passed=1)
    # the function is fixed: counts are taken now, and the baseline has none to compare with
    pytester.makepyfile(test_step=REFUSES_DISPATCH_MODES.format(marker="").replace(
        "raise RuntimeError", "pass  #"))
    rec = pytester.runpytest("--gpuperf", *RUN)
    rec.assert_outcomes(passed=1)
    assert ("test_step.py::test_step: counts not compared: unavailable when its baseline was recorded "
            "(RuntimeError: this function refuses") in rec.stdout.str()


def test_an_asked_for_count_budget_fails_with_the_reason(pytester: pytest.Pytester) -> None:
    script_timings(pytester, STEADY)
    pytester.makepyfile(test_step=REFUSES_DISPATCH_MODES.format(marker=", max_ops=100"))
    rec = pytester.runpytest("--gpuperf", *RUN)
    rec.assert_outcomes(failed=1)
    out = rec.stdout.str()
    words = " ".join(out.split())  # the first line is cut within 80 characters (issue 47)
    assert ("counts unavailable: RuntimeError: this function refuses to run under a dispatch mode" in words
            and "max_ops=100 needs it, so this check fails" in words)
    # an update run refuses to record it, for the same reason
    rec = pytester.runpytest("--gpuperf-update-baselines", *RUN)
    rec.assert_outcomes(failed=1)
    assert "baseline not updated" in rec.stdout.str() and "max_ops=100 needs it" in rec.stdout.str()


def test_a_failing_classification_fails_only_an_expectation(pytester: pytest.Pytester) -> None:
    conftest = broken("pytest_gpuperf.measure.profiling", "classify_call", "the profiler is not available here")
    script_timings(pytester, STEADY, conftest=conftest)
    pytester.makepyfile(test_step=REFUSES_DISPATCH_MODES.format(marker="").replace(
        "raise RuntimeError", "pass  #"))
    rec = pytester.runpytest("--gpuperf", "--gpuperf-classify", *RUN)
    rec.assert_outcomes(passed=1)
    assert "bottleneck unavailable: RuntimeError: the profiler is not available here" in rec.stdout.str()
    pytester.makepyfile(test_step=REFUSES_DISPATCH_MODES.format(marker=", expect_bottleneck='compute'").replace(
        "raise RuntimeError", "pass  #"))
    rec = pytester.runpytest("--gpuperf", *RUN)
    rec.assert_outcomes(failed=1)
    assert "expect_bottleneck=compute needs it, so this check fails" in rec.stdout.str()


def test_a_failing_peak_memory_measurement_is_contained(pytester: pytest.Pytester) -> None:
    conftest = broken("pytest_gpuperf.measure.memory", "measure_peak", "no allocator events")
    script_timings(pytester, STEADY, conftest=conftest)
    pytester.makepyfile(test_step=REFUSES_DISPATCH_MODES.format(marker="").replace(
        "raise RuntimeError", "pass  #"))
    rec = pytester.runpytest("--gpuperf-update-baselines", *RUN)
    rec.assert_outcomes(passed=1)
    entry = _entry(pytester, "test_step")
    assert entry["peak_memory_bytes"] is None and entry["counts"]["ops"] > 0
    assert entry["unavailable"]["peak memory"]["error"] == "RuntimeError: no allocator events"
    pytester.makepyfile(test_step=REFUSES_DISPATCH_MODES.format(marker=", max_memory='1 GiB'").replace(
        "raise RuntimeError", "pass  #"))
    rec = pytester.runpytest("--gpuperf", *RUN)
    rec.assert_outcomes(failed=1)
    assert "peak memory unavailable: RuntimeError: no allocator events" in rec.stdout.str()
