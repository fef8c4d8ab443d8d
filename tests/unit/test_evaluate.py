"""Unit tests for pytest_gpuperf.verdict.gate.evaluate, the one evaluation function (issue 21, item 5):
stored single-process, replicated, A/B evidence, memory and counts go through it, and the
summary table's ratio agrees with its own median and baseline columns in every mode.

Seeded synthetic samples (log-normal per-call times, ms): every verdict is reproducible and
independent of the machine.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from pytest_gpuperf.reporting import report
from pytest_gpuperf.verdict.paired import Block, abba_schedule
from pytest_gpuperf.storage.baseline import BaselineEntry
from pytest_gpuperf.verdict.compare import Verdict
from pytest_gpuperf.verdict.counts import Counts
from pytest_gpuperf.verdict.gate import Evidence, Reference, evaluate, judge, judge_replicates
from pytest_gpuperf.core.options import BenchOptions
from pytest_gpuperf.verdict.result import BenchResult
from pytest_gpuperf.core.units import format_ratio

OPTS = BenchOptions()
BUSY = "host busy: other processes used 0.98 of 2 CPU cores while it ran"


def samples(seed: int, n: int = 100, median: float = 1.0, sigma: float = 0.02) -> tuple[float, ...]:
    return tuple(float(v) for v in np.random.default_rng(seed).lognormal(math.log(median), sigma, n))


def ab_blocks(b_factor: float, pairs: int = 2, seed: int = 1) -> tuple[Block, ...]:
    rng = np.random.default_rng(seed)
    return tuple(Block(side, p, pos, tuple(float((b_factor if side == "B" else 1.0) * v)
                                           for v in rng.lognormal(0, 0.01, 5)))
                 for p in range(pairs) for pos, side in enumerate(abba_schedule(4, seed=p)))


def entry(peak: int | None = None, counts: Counts | None = None, process_medians=None) -> BaselineEntry:
    base = BaselineEntry.from_samples("m.py::t", samples(1))
    run = dataclasses.replace(base.history[-1], peak_memory_bytes=peak, counts=counts.totals() if counts else None,
                              process_medians_ms=process_medians)
    return dataclasses.replace(base, history=(run,), peak_memory_bytes=peak, counts=counts)


def test_one_process_is_judged_as_judge_does():
    e = entry()
    for median, verdict in ((1.0, Verdict.UNCHANGED), (1.3, Verdict.REGRESSED)):
        cur = samples(2, median=median)
        got = evaluate(Evidence(samples_ms=cur), Reference.stored(e, "b.json"), OPTS, benchmark_id="m.py::t")
        assert got.comparison == judge(cur, e, OPTS, benchmark_id="m.py::t", baseline_file="b.json")
        assert got.comparison.verdict is verdict and got.memory is None and got.counts is None


def test_worker_processes_are_judged_over_their_medians():
    e = entry(process_medians=(1.0, 1.01, 0.99))
    groups = tuple(samples(10 + k, n=30, median=1.3 * f) for k, f in enumerate((1.0, 1.02, 0.99)))
    got = evaluate(Evidence(process_samples_ms=groups), Reference.stored(e), OPTS, benchmark_id="m.py::t").comparison
    assert got == judge_replicates(groups, e, OPTS, benchmark_id="m.py::t")
    assert got.verdict is Verdict.REGRESSED and got.processes == 3


def test_ab_blocks_are_judged_pairwise_and_a_missing_side_a_is_no_baseline():
    got = evaluate(Evidence(ab_blocks=ab_blocks(1.3)), Reference.ab("main", measured=True), OPTS).comparison
    assert got.verdict is Verdict.REGRESSED and got.ab.ref == "main" and len(got.ab.blocks) == 32
    same = evaluate(Evidence(ab_blocks=ab_blocks(1.0)), Reference.ab("main", measured=True), OPTS).comparison
    assert same.verdict is not Verdict.REGRESSED
    new = evaluate(Evidence(ab_blocks=ab_blocks(1.3)), Reference.ab("main", measured=False, missing_note="new: not in main"),
                   OPTS).comparison
    assert new.verdict is Verdict.NO_BASELINE and new.note == "new: not in main" and not new.fails(strict=True)


@pytest.mark.parametrize("kind", ["samples", "processes", "ab"])
def test_throttle_or_busy_host_makes_a_regression_inconclusive_in_every_path(kind):
    e = entry(process_medians=(1.0, 1.01, 0.99))
    evidence = {"samples": Evidence(samples_ms=samples(3, median=1.3)),
                "processes": Evidence(process_samples_ms=tuple(samples(20 + k, n=30, median=1.3) for k in range(3))),
                "ab": Evidence(ab_blocks=ab_blocks(1.3))}[kind]
    ref = Reference.ab("main", measured=True) if kind == "ab" else Reference.stored(e)
    assert evaluate(evidence, ref, OPTS).comparison.verdict is Verdict.REGRESSED
    got = evaluate(dataclasses.replace(evidence, throttle=BUSY), ref, OPTS).comparison
    assert got.verdict is Verdict.INCONCLUSIVE and BUSY in got.note


def test_memory_and_counts_against_a_stored_baseline_and_against_side_a():
    stored = entry(peak=4 << 20, counts=Counts(ops=10, syncs=0))
    ev = evaluate(Evidence(samples_ms=samples(4), peak_memory_bytes=8 << 20, counts=Counts(ops=12, syncs=0), device="cpu"),
                  Reference.stored(stored, "b.json"), OPTS, benchmark_id="m.py::t")
    assert ev.memory.verdict is Verdict.REGRESSED and ev.memory.baseline_file == "b.json"
    assert ev.counts.verdict is Verdict.REGRESSED
    ab = evaluate(Evidence(ab_blocks=ab_blocks(1.0), peak_memory_bytes=4 << 20, counts=Counts(ops=10, syncs=0)),
                  Reference.ab("main", measured=True, peak_memory_bytes=4 << 20, counts=Counts(ops=10, syncs=0)), OPTS)
    assert ab.memory.verdict is Verdict.UNCHANGED and ab.counts.verdict is Verdict.UNCHANGED
    assert ab.memory.baseline_file == "A/B vs main"
    worse = evaluate(Evidence(ab_blocks=ab_blocks(1.0), counts=Counts(ops=20, syncs=0)),
                     Reference.ab("main", measured=True, counts=Counts(ops=10, syncs=0)), OPTS)
    assert worse.counts.verdict is Verdict.REGRESSED
    # max_memory is checked whatever the reference
    capped = evaluate(Evidence(samples_ms=samples(5), peak_memory_bytes=8 << 20), Reference.stored(None),
                      dataclasses.replace(OPTS, max_memory=1 << 20))
    assert capped.memory.over_budget


def _row_agrees(r: BenchResult) -> None:
    row = report.summary_row("m.py::t", r)
    median_ms, baseline_ms = r.comparison.current_median_ms if r.comparison.processes else r.median_ms, \
        r.comparison.baseline_median_ms
    assert row[report.COLUMNS.index("ratio")].split(" ")[0] == format_ratio(median_ms / baseline_ms)
    assert row[report.COLUMNS.index("median")] == report.format_ms(median_ms)
    assert row[report.COLUMNS.index("baseline")] == report.format_ms(baseline_ms)


def test_the_table_ratio_agrees_with_its_median_and_baseline_columns_in_every_mode():
    e = entry(process_medians=(1.0, 1.01, 0.99))
    cur = samples(6, median=1.3)
    stored = evaluate(Evidence(samples_ms=cur), Reference.stored(e), OPTS).comparison
    groups = tuple(samples(30 + k, n=30, median=1.3 * f) for k, f in enumerate((1.0, 1.1, 0.95)))
    replicated = evaluate(Evidence(process_samples_ms=groups), Reference.stored(e), OPTS).comparison
    blocks = ab_blocks(1.3)
    ab = evaluate(Evidence(ab_blocks=blocks), Reference.ab("main", measured=True), OPTS).comparison
    b_samples = tuple(v for b in blocks if b.side == "B" for v in b.samples_ms)
    for s, c in ((cur, stored), (sum(groups, ()), replicated), (b_samples, ab)):
        r = BenchResult.from_samples(s, name="t", device="cpu", rounds=len(s), calls_per_round=1, warmup_calls=0,
                                     comparison=c)
        _row_agrees(r)
    # the replicated row's median is the geometric mean of the process medians, not the pooled median
    assert report.summary_row("m.py::t", BenchResult.from_samples(
        sum(groups, ()), name="t", device="cpu", rounds=90, calls_per_round=1, warmup_calls=0,
        comparison=replicated))[2] == report.format_ms(replicated.current_median_ms)
