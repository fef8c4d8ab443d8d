"""The machine check of a regression over worker processes that no A/B confirms (issue 45:
pytest_gpuperf.verdict.gate.machine_explains, pytest_gpuperf.verdict.machine.median_reference).

Pure: process medians and reference-workload ratios are given, nothing is timed.
"""

from __future__ import annotations

import dataclasses

import pytest

from pytest_gpuperf.verdict.advice import Advice
from pytest_gpuperf.verdict.compare import Verdict, decide_replicates
from pytest_gpuperf.verdict.gate import machine_explains
from pytest_gpuperf.verdict.machine import median_reference

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


def test_only_a_wall_clock_regression_measured_here_is_read_against_the_machine():
    c = _regressed(1.3)
    ratios = {"matmul": 1.3, "copy": 1.3}
    # CPU time: a neighbour stretches the reference's wall clock, not the benchmark's CPU time
    assert machine_explains(dataclasses.replace(c, clock="cpu"), ratios).verdict is Verdict.REGRESSED
    unchanged = decide_replicates([[m] * 5 for m in (1.0, 1.012, 0.99)], BASE)
    assert machine_explains(unchanged, ratios) is unchanged  # it never moves another verdict


def test_the_runs_reference_is_each_workloads_median_over_its_processes():
    ref = median_reference([{"matmul_ms": 1.0, "copy_ms": 2.0, "matmul": "512x512 float32 matmul"},
                            {"matmul_ms": 1.4, "copy_ms": 2.2, "matmul": "512x512 float32 matmul"},
                            None, {"matmul_ms": 1.1, "copy_ms": 9.0}])
    assert ref == {"matmul_ms": 1.1, "copy_ms": 2.2, "matmul": "512x512 float32 matmul"}
    assert median_reference([None, {}]) is None
    assert median_reference([{"matmul_ms": -1.0, "matmul": "x"}]) is None
