"""The machine check of a regression over worker processes that no A/B confirms (issue 45:
pytest_gpuperf.verdict.gate.machine_explains, pytest_gpuperf.verdict.machine.median_reference and
cpu_drift_ratio).

Pure: process medians and reference-workload ratios are given, nothing is timed.
"""

from __future__ import annotations

import dataclasses

import pytest

from pytest_gpuperf.verdict.advice import Advice
from pytest_gpuperf.verdict.compare import Verdict, decide_replicates
from pytest_gpuperf.verdict.gate import machine_explains
from pytest_gpuperf.verdict.machine import cpu_drift_ratio, median_reference

BASE = [1.0, 1.01, 0.99]


def _regressed(factor: float):
    """A wall-clock regression of ``factor`` over 3 processes a side (spread about 1%)."""
    c = decide_replicates([[factor * m] * 5 for m in (1.0, 1.012, 0.99)], BASE)
    assert c.verdict is Verdict.REGRESSED
    return c


def test_a_regression_the_machines_own_slowdown_explains_is_not_trusted():
    c = _regressed(1.3)
    out = machine_explains(c, {"matmul": 1.36, "copy": 1.3})  # the machine: the smaller of the two, x1.30
    assert out.verdict is Verdict.INCONCLUSIVE and out.machine_ratio == pytest.approx(1.3)
    assert out.note.startswith("machine differs: reference workloads matmul +36%, copy +30% (session-start, median "
                               "of this run's worker processes, now/baseline): the regression (x1.30, 99% CI down "
                               "to x1.")
    assert "is within what the machine's own slowdown (x1.30) explains" in out.note
    assert Advice.UPDATE_OR_AB in out.advice
    assert out.ratio == c.ratio and out.ratio_ci == c.ratio_ci  # the figures stay the measured ones


def test_a_regression_beyond_the_machines_slowdown_stays_and_one_workload_alone_is_no_slower_machine():
    assert machine_explains(_regressed(1.6), {"matmul": 1.3, "copy": 1.3}).verdict is Verdict.REGRESSED
    c = _regressed(1.3)
    assert machine_explains(c, {"matmul": 1.04, "copy": 1.04}) is c  # within the threshold (5%)
    # one workload alone: a quiet VM's 64 MiB copy moved 13-18% between runs while the matmul held
    assert machine_explains(c, {"matmul": 0.97, "copy": 1.3}) is c
    assert machine_explains(c, {"matmul": 2.2, "copy": 1.02}) is c
    assert machine_explains(c, None) is c  # no reference on one side
    assert machine_explains(c, {"matmul": 1.3}) is c  # not both


def test_a_cpu_time_regression_is_read_against_the_cpus_own_speed_not_the_wall_clocks():
    c = dataclasses.replace(_regressed(1.3), clock="cpu")
    ratios = {"matmul": 1.3, "copy": 1.3}
    # a neighbour stretches the reference's wall clock, not the benchmark's CPU time: no CPU reference, no change
    assert machine_explains(c, ratios) is c
    assert machine_explains(c, ratios, cpu_ratio=1.02) is c  # the CPU itself runs at the baseline's speed
    # the CPU itself slower (a busy SMT sibling): the pure-Python loop's thread CPU time read 1.3x
    out = machine_explains(c, {"matmul": 0.9, "copy": 1.0}, cpu_ratio=1.3)
    assert out.verdict is Verdict.INCONCLUSIVE and out.machine_ratio == pytest.approx(1.3)
    assert out.note.startswith("machine differs: reference CPU time +30% (a pure-Python loop's, session-start, "
                               "median of this run's worker processes, now/baseline): the regression (x1.30, ")
    assert Advice.UPDATE_OR_AB in out.advice
    big = dataclasses.replace(_regressed(2.0), clock="cpu")
    assert machine_explains(big, ratios, cpu_ratio=1.3) is big  # beyond what x1.30 explains
    # a wall-clock regression ignores the CPU reference
    wall = _regressed(1.3)
    assert machine_explains(wall, {"matmul": 1.0, "copy": 1.0}, cpu_ratio=1.5) is wall
    unchanged = decide_replicates([[m] * 5 for m in (1.0, 1.012, 0.99)], BASE)
    assert machine_explains(unchanged, ratios, cpu_ratio=1.5) is unchanged  # it never moves another verdict


def test_the_cpu_drift_ratio_needs_both_sides():
    assert cpu_drift_ratio({"python_cpu_ms": 2.0}, {"python_cpu_ms": 1.0}) == 2.0
    assert cpu_drift_ratio({"python_cpu_ms": 2.0}, {"matmul_ms": 1.0}) is None  # a baseline recorded before it
    assert cpu_drift_ratio(None, {"python_cpu_ms": 1.0}) is None
    assert cpu_drift_ratio({"python_cpu_ms": 0.0}, {"python_cpu_ms": 1.0}) is None


def test_the_runs_reference_is_each_workloads_median_over_its_processes():
    ref = median_reference([{"matmul_ms": 1.0, "copy_ms": 2.0, "matmul": "512x512 float32 matmul"},
                            {"matmul_ms": 1.4, "copy_ms": 2.2, "matmul": "512x512 float32 matmul"},
                            None, {"matmul_ms": 1.1, "copy_ms": 9.0, "python_cpu_ms": 3.0}])
    assert ref == {"matmul_ms": 1.1, "copy_ms": 2.2, "python_cpu_ms": 3.0, "matmul": "512x512 float32 matmul"}
    assert median_reference([None, {}]) is None
    assert median_reference([{"matmul_ms": -1.0, "matmul": "x"}]) is None
