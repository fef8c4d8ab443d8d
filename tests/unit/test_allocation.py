"""The rounds one worker process spends: its early stop aims at the spread between processes
(pytest_gpuperf.verdict.allocation, issue 45)."""

from __future__ import annotations

import json
import math

import pytest

from pytest_gpuperf.verdict.allocation import BETWEEN_SHARE, between_sd, process_precision


def test_the_between_process_sd_is_that_of_the_log_medians_and_needs_three() -> None:
    assert between_sd([1.0, 1.0, 1.0]) == 0.0
    logs = [math.log(v) for v in (1.0, 1.3, 0.8)]
    mean = sum(logs) / 3
    assert between_sd([1.0, 1.3, 0.8]) == pytest.approx(math.sqrt(sum((x - mean) ** 2 for x in logs) / 2))
    assert between_sd([1.0, 1.3]) is None  # one degree of freedom: too rough to act on
    assert between_sd([1.0, 0.0, -1.0, 2.0]) is None  # non-positive medians are not replicates


def test_a_wide_spread_between_processes_loosens_the_early_stop_up_to_a_share_of_the_threshold() -> None:
    wide = [1.0, 1.3, 0.8]  # SD of the logs about 24%
    assert process_precision(0.005, 0.10, wide) == pytest.approx(0.025)  # capped: a quarter of the 10% threshold
    assert process_precision(0.005, 0.50, wide) == pytest.approx(BETWEEN_SHARE * between_sd(wide))
    steady = [1.0, 1.01, 0.99]  # about 1%: a quarter of it is finer than the default 0.5%
    assert process_precision(0.005, 0.10, steady) == 0.005
    # the CPU time steadier than the wall clock (a neighbour stretched the wall clock): the aim
    # follows the steadier clock, which may be the one that decides
    assert process_precision(0.005, 0.50, wide, [1.0, 1.1, 0.92]) == pytest.approx(
        BETWEEN_SHARE * between_sd([1.0, 1.1, 0.92]))
    assert process_precision(0.005, 0.10, wide, steady) == 0.005
    assert process_precision(0.005, 0.10, wide, None) == pytest.approx(0.025)


def test_no_spread_known_or_the_early_stop_off_leaves_the_target_as_it_is() -> None:
    assert process_precision(0.005, 0.10, None) == 0.005
    assert process_precision(0.005, 0.10, [1.0, 2.0]) == 0.005
    assert process_precision(0.0, 0.10, [1.0, 1.3, 0.8]) == 0.0  # target_precision=0: the whole max_time
    with pytest.raises(ValueError, match="target_precision and threshold must be >= 0"):
        process_precision(-0.1, 0.1, [1.0, 1.3, 0.8])


def test_a_worker_reads_the_spreads_from_the_baseline_file_as_it_is_and_forgives_a_bad_one(tmp_path) -> None:
    from pytest_gpuperf.storage.baseline import process_spreads

    path = tmp_path / "test_x.json"
    path.write_text(json.dumps({"benchmarks": {
        "test_a": {"process_medians_ms": [1.0, 1.3, 0.8],
                   "history": [{"cpu_process_medians_ms": [0.5]}, {"cpu_process_medians_ms": [0.9, 1.0, 0.95]}]},
        "test_b": {"process_medians_ms": [1.0, "x", 2.0]},  # not numbers: nothing to aim with
        "test_c": {"process_medians_ms": [2.0, 2.1, 1.9]}}}))
    assert process_spreads(str(path)) == {"test_a": ((1.0, 1.3, 0.8), (0.9, 1.0, 0.95)), "test_c": ((2.0, 2.1, 1.9),)}
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert process_spreads(str(bad)) == {} == process_spreads(str(tmp_path / "missing.json"))
    assert bad.read_text() == "{not json"  # never writes


def test_a_baseline_file_written_again_is_read_again(tmp_path) -> None:
    from pytest_gpuperf.storage.baseline import process_spreads

    path = tmp_path / "test_x.json"
    path.write_text(json.dumps({"benchmarks": {"test_a": {"process_medians_ms": [1.0, 1.3, 0.8]}}}))
    assert process_spreads(str(path)) == {"test_a": ((1.0, 1.3, 0.8),)}
    path.write_text(json.dumps({"benchmarks": {"test_a": {"process_medians_ms": [2.0, 2.0, 2.0, 2.1]}}}))
    assert process_spreads(str(path)) == {"test_a": ((2.0, 2.0, 2.0, 2.1),)}
