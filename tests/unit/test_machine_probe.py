"""Unit tests of the interleaved machine-speed probe: the pure rule in gate.judge (normalize when
correlated, "machine differs"), ProbeEvidence, the class mapping, the scripted probe times and
the probe fields of baselines and reports.

All samples are seeded and synthetic (log-normal per-call times in ms, scripted clocks): no
verdict depends on this machine's speed or noise.
"""

from __future__ import annotations

import json
import math
import statistics

import numpy as np
import pytest

from pytest_gpuperf.verdict import gate
from pytest_gpuperf._testing import ScriptedMeasurer
from pytest_gpuperf.storage.baseline import BaselineEntry, RunRecord, merge_entry, parse
from pytest_gpuperf.verdict.compare import Comparison, Verdict
from pytest_gpuperf.verdict.gate import judge, machine_rule, probe_correlation
from pytest_gpuperf.core.options import BenchOptions
from pytest_gpuperf.measure.probe import DEFAULT_KIND, probe_kind
from pytest_gpuperf.verdict.machine import ProbeEvidence
from pytest_gpuperf.measure.timing import probe_every
from pytest_gpuperf.reporting.messages import comparison_message, comparison_note

OPTS = BenchOptions()
PROBE = "compute: 256x256 float32 matmul"


def lognormal(seed: int, n: int = 100, median: float = 1.0, sigma: float = 0.02) -> np.ndarray:
    return np.random.default_rng(seed).lognormal(math.log(median), sigma, n)


def judge_n(*args, **kwargs):
    """judge with --gpuperf-normalize: probe normalization and the "machine differs" downgrade on."""
    return judge(*args, normalize=True, **kwargs)


BASE = [float(v) for v in lognormal(1)]
ENTRY = BaselineEntry.from_samples("m.py::t", BASE)


def machine_run(seed: int, machine: float, slowdown: float = 1.0, n: int = 100, shared_sd: float = 0.0,
                probe_level: float = 0.5) -> tuple[list[float], ProbeEvidence]:
    """Benchmark samples and probe times (one probe per round) of a run on a machine ``machine``
    times slower; ``shared_sd`` > 0 gives both a common per-round machine state (correlated)."""
    rng = np.random.default_rng(seed)
    state = np.exp(rng.normal(0.0, shared_sd, n)) if shared_sd else np.ones(n)
    bench = lognormal(seed + 1000, n) * machine * slowdown * state
    probe = lognormal(seed + 2000, n, median=probe_level) * machine * state
    return [float(v) for v in bench], ProbeEvidence(tuple(float(v) for v in probe), probe_level, PROBE)


# ----------------------------------------------------------------------------- the class mapping


@pytest.mark.parametrize("expected, kind", [
    (("compute",), "compute"), (("memory", "compute"), "memory"), (("overhead",), "overhead"),
    (("sync",), "overhead"), (("data",), "overhead"), (("transfer",), "memory"), (None, DEFAULT_KIND),
])
def test_probe_class_comes_from_the_first_expected_bottleneck(expected, kind):
    assert probe_kind(expected) == kind
    assert DEFAULT_KIND == "memory"


def test_probe_every_keeps_the_probe_under_a_tenth_of_the_rounds():
    assert probe_every(0.05e-3, 1e-3) == 1  # 50 µs probe, 1 ms rounds: every round (5%)
    assert probe_every(0.8e-3, 0.1e-3) == 80  # 800 µs probe, 100 µs rounds: every 80th round
    k = probe_every(0.3e-3, 0.7e-3)
    assert 0.3 / (k * 0.7) <= 0.10 and 0.3 / ((k - 1) * 0.7) > 0.10


def test_probe_evidence_ratio_and_per_round_factors():
    ev = ProbeEvidence((1.0, 2.0, 3.0), 2.0, PROBE, every=2)
    assert ev.median_ms == 2.0 and ev.machine_ratio == 1.0
    assert ev.factors(5) == [0.5, 0.5, 1.0, 1.0, 1.5]
    assert ev.factors(7) is None  # 3 probes of 2 rounds cover 6 rounds at most
    assert ProbeEvidence((1.0,), None, PROBE).machine_ratio is None
    assert ProbeEvidence((), 1.0, PROBE).machine_ratio is None


# ----------------------------------------------------------------------------- machine differs


def test_machine_slower_and_benchmark_as_slow_is_inconclusive_with_the_note():
    cur, probe = machine_run(3, machine=1.29)
    assert judge(cur, ENTRY, OPTS).verdict is Verdict.REGRESSED  # without the probe: a regression
    c = judge_n(cur, ENTRY, OPTS, probe=probe)
    assert c.verdict is Verdict.INCONCLUSIVE and c.machine_differs
    assert c.machine_ratio == pytest.approx(1.29, rel=0.01)
    assert "machine differs: probe +29%" in c.note
    assert "--gpuperf-update-baselines" in comparison_note(c) and "--gpuperf-ab REF" in comparison_note(c)
    assert not c.fails(strict=False) and c.fails(strict=True)
    assert c.normalization is None  # uncorrelated: not normalized
    assert "machine differs: probe +29%" in comparison_message(c)


def test_by_default_the_probe_neither_rescales_nor_downgrades():
    # Issue 21: the probe's level moved with its own process on this project's machines, so without
    # --gpuperf-normalize a correlated probe does not rescale the samples and a slower probe does not
    # excuse a slowdown: the verdict is the raw one, with an informational note.
    cur, probe = machine_run(3, machine=1.29)
    c = judge(cur, ENTRY, OPTS, probe=probe)
    raw = judge(cur, ENTRY, OPTS)
    assert c.verdict is Verdict.REGRESSED and not c.machine_differs
    assert c.ratio == raw.ratio and c.normalization is None
    assert "(informational)" in c.note
    correlated, probe = machine_run(5, machine=1.0, slowdown=1.0, shared_sd=0.2)
    assert judge(correlated, ENTRY, OPTS, probe=probe).ratio == judge(correlated, ENTRY, OPTS).ratio


def test_machine_same_and_benchmark_slower_is_regressed():
    cur, probe = machine_run(4, machine=1.0, slowdown=1.3)
    c = judge_n(cur, ENTRY, OPTS, probe=probe)
    assert c.verdict is Verdict.REGRESSED and not c.machine_differs
    assert c.machine_ratio == pytest.approx(1.0, abs=0.01)


def test_machine_faster_but_benchmark_slower_stays_regressed():
    cur, probe = machine_run(5, machine=0.8, slowdown=1.6)  # raw 1.28x on a machine 20% faster
    c = judge_n(cur, ENTRY, OPTS, probe=probe)
    assert c.verdict is Verdict.REGRESSED and not c.machine_differs
    assert "machine differs: probe -20%" in c.note and "faster" in c.note


def test_no_slowdown_on_a_slower_machine_is_trusted():
    """How much slower a workload runs on another machine is not a multiple of the probe's (bf16
    on a host without bf16 instructions): a 2.6x raw slowdown on a machine 30% slower is not trusted."""
    cur, probe = machine_run(6, machine=1.3, slowdown=2.0)
    c = judge_n(cur, ENTRY, OPTS, probe=probe)
    assert c.verdict is Verdict.INCONCLUSIVE and c.machine_differs
    assert "machine differs: probe +3" in c.note and c.fails(strict=True)


def test_reference_workloads_stand_in_for_a_baseline_without_probe():
    from pytest_gpuperf.verdict.machine import ProbeEvidence

    cur, probe = machine_run(7, machine=1.0, slowdown=1.4)
    no_level = ProbeEvidence(probe.now_ms, None, probe.name, probe.every)
    c = judge_n(cur, ENTRY, OPTS, probe=no_level, machine_reference=("matmul", 1.5))
    assert c.verdict is Verdict.INCONCLUSIVE and c.machine_differs and c.machine_ratio == 1.5
    assert "machine differs: reference matmul +50% (session-start reference workload" in c.note
    same = judge_n(cur, ENTRY, OPTS, probe=no_level, machine_reference=("matmul", 1.01))
    assert same.verdict is Verdict.REGRESSED


def test_update_runs_leave_the_strict_hint_out():
    cur, probe = machine_run(3, machine=1.29)
    c = judge_n(cur, ENTRY, OPTS, probe=probe, can_fail=False)
    assert c.verdict is Verdict.INCONCLUSIVE and "--gpuperf-strict" not in comparison_note(c)


def test_machine_rule_leaves_other_verdicts_alone_and_needs_both_probe_sides():
    c = Comparison(Verdict.UNCHANGED, "t", 1.0, baseline_median_ms=1.0, ratio=1.0, floor=0.05)
    assert machine_rule(c, None) is c
    assert machine_rule(c, ProbeEvidence((1.0,), None, PROBE)) is c
    same = machine_rule(c, ProbeEvidence((1.02,), 1.0, PROBE))
    assert same.verdict is Verdict.UNCHANGED and same.note is None and same.machine_ratio == pytest.approx(1.02)
    slower = machine_rule(c, ProbeEvidence((1.5,), 1.0, PROBE))
    assert slower.verdict is Verdict.UNCHANGED and "machine differs: probe +50%" in slower.note


# ----------------------------------------------------------------------------- normalization


def test_correlated_probe_normalizes_and_reports_the_raw_ratio():
    # machine 1.3x slower, both following a common per-round machine state (10% SD)
    cur, probe = machine_run(7, machine=1.3, shared_sd=0.10)
    rho_p = probe_correlation(cur, probe)
    assert rho_p is not None and rho_p[0] > 0.5 and rho_p[1] < gate.PROBE_CORRELATION_ALPHA
    c = judge_n(cur, ENTRY, OPTS, probe=probe)
    assert c.verdict is Verdict.UNCHANGED  # normalized: the benchmark is as fast as the machine allows
    assert c.ratio == pytest.approx(1.0, abs=0.03)
    assert c.normalization.raw_ratio == pytest.approx(1.3, rel=0.05)
    assert c.normalization.by.startswith(f"probe {PROBE} per round, median x") and "Spearman rho" in c.normalization.by
    assert c.machine_ratio == pytest.approx(1.3, rel=0.05)
    assert "machine differs: probe +" in c.note  # informational: the verdict stays
    assert not c.machine_differs


def test_correlated_probe_keeps_a_real_regression_that_is_then_inconclusive_on_a_slower_machine():
    cur, probe = machine_run(8, machine=1.3, slowdown=1.3, shared_sd=0.10)
    c = judge_n(cur, ENTRY, OPTS, probe=probe)
    assert c.normalization is not None and c.ratio == pytest.approx(1.3, rel=0.05)
    assert c.verdict is Verdict.INCONCLUSIVE and c.machine_differs  # raw 1.69x < 1.3^2 x 1.05


def test_uncorrelated_probe_does_not_normalize():
    cur, probe = machine_run(9, machine=1.0, slowdown=1.0)
    corr = probe_correlation(cur, probe)
    assert corr is None or corr[1] >= gate.PROBE_CORRELATION_ALPHA
    c = judge_n(cur, ENTRY, OPTS, probe=probe)
    assert c.normalization is None
    assert c == judge_n(cur, ENTRY, OPTS, probe=probe)  # deterministic


def test_too_few_probe_pairs_do_not_normalize():
    cur, probe = machine_run(10, machine=1.0, n=9, shared_sd=0.3)
    assert probe_correlation(cur, probe) is None


def test_probe_normalization_wins_over_drift():
    cur, probe = machine_run(7, machine=1.3, shared_sd=0.10)
    c = judge_n(cur, ENTRY, OPTS, probe=probe, drift=("copy", 2.0))
    assert c.normalization.by.startswith("probe ") and c.ratio == pytest.approx(1.0, abs=0.03)


def test_confirmation_samples_are_normalized_by_their_own_probes():
    cur, probe = machine_run(11, machine=1.0, slowdown=1.3, shared_sd=0.10)

    class Timing:  # what bench.py's remeasure returns: samples with their probe times
        def __init__(self, seed):
            self.samples_ms, ev = machine_run(seed, machine=1.0, slowdown=1.3, shared_sd=0.10)
            self.probe_ms, self.probe_every = ev.now_ms, 1

    c = judge_n(cur, ENTRY, OPTS, probe=probe, remeasure=lambda: Timing(12))
    assert c.verdict is Verdict.REGRESSED and c.confirmed is True


# ----------------------------------------------------------------------------- old baselines


def test_old_baseline_without_probe_behaves_as_before():
    cur, probe = machine_run(3, machine=1.29)
    no_level = ProbeEvidence(probe.now_ms, ENTRY.probe_level_ms(PROBE), PROBE)
    assert ENTRY.probe_level_ms(PROBE) is None
    assert judge(cur, ENTRY, OPTS, probe=no_level) == judge(cur, ENTRY, OPTS)


def test_probe_level_is_the_newest_run_or_the_history_median_of_the_same_probe():
    runs = (RunRecord(1.0, probe_ms=0.5, probe=PROBE), RunRecord(1.0, probe_ms=0.7, probe="memory: x"))
    entry = BaselineEntry("t", (1.0,), runs)
    assert entry.probe_level_ms(PROBE) is None  # the newest run used another probe
    assert entry.probe_level_ms("memory: x") == 0.7
    runs += (RunRecord(1.0, probe_ms=0.6, probe=PROBE), RunRecord(1.0))
    entry = BaselineEntry("t", (1.0,), runs)
    assert entry.probe_level_ms(PROBE) == pytest.approx(0.55)  # median of 0.5 and 0.6


# ----------------------------------------------------------------------------- storage


def _entry(**extra):
    return {"schema_version": 2, "id": "t", "device": "cpu", "stats": {"median_ms": 1.0, "mean_ms": 1.0,
            "p95_ms": 1.1, "iqr_ms": 0.1}, "samples_ms": [1.0, 1.1], "rounds": 2, "options": {},
            "environment": {}, "timestamp_utc": "2026-01-01T00:00:00Z", **extra}


def test_baseline_round_trip_stores_the_probe_and_old_files_load():
    new = merge_entry(None, _entry(probe_ms=0.42, probe=PROBE))
    assert new["history"][-1]["probe_ms"] == 0.42 and new["history"][-1]["probe"] == PROBE
    newer = merge_entry(new, _entry(probe_ms=0.5, probe=PROBE))
    doc = {"schema_version": 2, "benchmarks": {"t": newer}}
    loaded = parse("b.json", json.dumps(doc)).get("t")
    assert [(r.probe_ms, r.probe) for r in loaded.history] == [(0.42, PROBE), (0.5, PROBE)]
    assert loaded.probe_level_ms(PROBE) == 0.5
    old = {"schema_version": 2, "benchmarks": {"t": merge_entry(None, _entry())}}
    loaded = parse("b.json", json.dumps(old)).get("t")
    assert loaded.history[-1].probe_ms is None and loaded.probe_level_ms(PROBE) is None
    assert "probe_ms" not in old["benchmarks"]["t"]["history"][-1]


def test_report_entry_round_trip_keeps_the_probe():
    from pytest_gpuperf.reporting.report import machine_differs_line, result_entry, result_from_entry
    from pytest_gpuperf.verdict.result import BenchResult

    cur, probe = machine_run(3, machine=1.29)
    c = judge_n(cur, ENTRY, OPTS, probe=probe)
    r = BenchResult.from_samples(tuple(cur), name="t", device="cpu", rounds=len(cur), calls_per_round=1,
                                 warmup_calls=0, comparison=c, probe_ms=probe.median_ms, probe=PROBE,
                                 benchmark_id="t")
    entry = json.loads(json.dumps(result_entry(r, environment={}, git_commit=None, timestamp_utc="x",
                                               with_comparison=True)))
    back = result_from_entry(entry)
    assert back.probe_ms == pytest.approx(probe.median_ms) and back.probe == PROBE
    assert back.comparison.machine_differs and back.comparison.machine_ratio == pytest.approx(c.machine_ratio)
    line = machine_differs_line([back])
    assert line.startswith("1 benchmark(s) inconclusive because this machine is slower") and "+29%" in line
    assert "--gpuperf-ab REF" in line
    assert machine_differs_line([]) is None


# ----------------------------------------------------------------------------- scripted probe times


def test_scripted_measurer_scripts_probe_times_and_ignores_the_probe_without_a_script():
    spec = {"ms": 1.0, "probe": {"ms": 0.5, "cv": 0.0}}
    t = ScriptedMeasurer.from_spec(spec).measure(lambda: None, (), {}, options=OPTS, device="cpu", probe=object())
    assert t.probe_every == 5 and len(t.probe_ms) == math.ceil(t.rounds / 5)
    assert statistics.median(t.probe_ms) == pytest.approx(0.5)
    t = ScriptedMeasurer.from_spec({"ms": 1.0}).measure(lambda: None, (), {}, options=OPTS, device="cpu",
                                                         probe=object())
    assert t.probe_ms == ()


def test_scripted_machine_factor_slows_benchmark_and_probe_together():
    spec = {"ms": 1.0, "cv": 0.0, "probe": {"ms": 0.5, "cv": 0.0}, "machine": 1.3}
    t = ScriptedMeasurer.from_spec(spec).measure(lambda: None, (), {}, options=OPTS, device="cpu", probe=object())
    assert statistics.median(t.samples_ms) == pytest.approx(1.3, rel=1e-3)
    assert statistics.median(t.probe_ms) == pytest.approx(0.65, rel=1e-3)


# ----------------------------------------------------------------------------- gpuperf compare


def test_gpuperf_compare_reports_the_machine_ratio_of_stored_probes(tmp_path, capsys):
    from pytest_gpuperf.cli.reports import main

    def stored(median: float, probe_ms: float | None) -> dict:
        e = _entry(samples_ms=[float(v) for v in lognormal(21 if median == 1.0 else 22, 200, median)],
                   stats={"median_ms": median, "mean_ms": median, "p95_ms": median, "iqr_ms": 0.01})
        if probe_ms is not None:
            e.update(probe_ms=probe_ms, probe=PROBE)
        return e

    def write(name: str, e: dict) -> str:
        path = tmp_path / name
        path.write_text(json.dumps({"schema_version": 2, "benchmarks": {"t": e}}))
        return str(path)

    base = write("base.json", stored(1.0, 0.5))
    # as the plugin by default: a slower probe informs but does not excuse the slowdown (issue 21)
    assert main(["compare", base, write("slower_machine.json", stored(1.3, 0.65))]) == 1
    out = capsys.readouterr().out
    assert "regressed" in out and "machine differs: probe +30%" in out and "(informational)" in out
    assert main(["compare", base, write("slower_code.json", stored(1.3, 0.5))]) == 1
    assert main(["compare", base, write("old.json", stored(1.3, None))]) == 1  # no probe: as before


# ----------------------------------------------------------------------------- the timing loop


def test_cpu_backend_interleaves_the_probe_every_kth_round_and_after_a_partial_block():
    from pytest_gpuperf._testing import FakeClock
    from pytest_gpuperf.measure.timing import PROBE_WARMUP_CALLS, measure

    clock, events = FakeClock(), []

    def fn() -> None:
        events.append("f")
        clock.advance_ms(1.0)

    def probe() -> None:
        events.append("p")
        clock.advance_ms(0.3)

    t = measure(fn, (), {}, options=OPTS, device="cpu", rounds=10, warmup_calls=2, clock=clock, probe=probe)
    assert t.probe_every == 3  # ceil(0.3 ms / (10% of 1 ms))
    assert t.probe_ms == pytest.approx((0.3,) * 4)  # after rounds 3, 6, 9 and the partial block of round 10
    timed = "".join(events)[2 + PROBE_WARMUP_CALLS:]  # after the warmup calls and the probe's warmup
    assert "".join(events)[:2 + PROBE_WARMUP_CALLS] == "ff" + "p" * PROBE_WARMUP_CALLS
    assert timed == "fffp" * 3 + "fp"
    assert t.samples_ms == pytest.approx((1.0,) * 10)  # the probe is never inside a round
    plain = measure(fn, (), {}, options=OPTS, device="cpu", rounds=10, warmup_calls=2, clock=clock)
    assert plain.probe_ms == () and plain.probe_every == 1
