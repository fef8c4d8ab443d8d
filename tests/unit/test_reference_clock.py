"""The A/B's reference-normalized clock (issue 45): each round of a block read relative to the
pure-Python reference probe timed beside it (``Block.referenced``), deciding what the wall clock
left inconclusive (``gate.ab_with_reference``). Scripted blocks on a machine whose speed jumps
between 1x and 1.8x from one block to the next, as this project's VM does (docs/verdicts.md):
seeded, independent of the machine."""

from __future__ import annotations

import dataclasses
import math
import random

import pytest

from pytest_gpuperf.core.options import BenchOptions
from pytest_gpuperf.verdict.compare import Verdict
from pytest_gpuperf.verdict.cputime import REF
from pytest_gpuperf.verdict.gate import Evidence, Reference, evaluate
from pytest_gpuperf.verdict.paired import Block, abba_schedule

OPTS = BenchOptions(threshold=0.1)
A_MS, PROBE_MS, EVERY, ROUNDS = 0.5, 0.3, 2, 20


def blocks(b_factor: float, *, seed: int = 0, pairs: int = 2, probes: bool = True) -> tuple[Block, ...]:
    """``pairs`` process pairs of 4 ABBA groups; the machine's speed mode (1x or 1.8x, at random)
    holds for 8 rounds at a time, the rounds and the probes between them alike, each with 2% noise
    of its own."""
    rng = random.Random(seed)
    out = []
    for p in range(pairs):
        for pos, side in enumerate(abba_schedule(4, seed=p)):
            modes = [1.8 if rng.random() < 0.5 else 1.0 for _ in range(ROUNDS // 8 + 1)]
            cost = A_MS * (b_factor if side == "B" else 1.0)
            samples = tuple(cost * modes[i // 8] * math.exp(rng.gauss(0, 0.02)) for i in range(ROUNDS))
            probe = tuple(PROBE_MS * modes[min(ROUNDS - 1, j * EVERY + EVERY - 1) // 8] * math.exp(rng.gauss(0, 0.02))
                          for j in range(-(-ROUNDS // EVERY)))
            out.append(Block(side, p, pos, samples, probe_ms=probe if probes else (), probe_every=EVERY))
    return tuple(out)


REF_AB = Reference.ab("main", measured=True)


def test_referenced_divides_each_round_by_the_probes_beside_it() -> None:
    b = Block("A", 0, 0, (2.0, 2.0, 4.0, 4.0, 6.0), probe_ms=(1.0, 4.0, 2.0), probe_every=2)
    # group 0: the probe after it (1); group 1: sqrt(1 * 4) = 2; group 2 (one round): sqrt(4 * 2)
    assert b.referenced.samples_ms == pytest.approx((2.0, 2.0, 2.0, 2.0, 6.0 / math.sqrt(8.0)))
    assert Block("A", 0, 0, (1.0, 1.0, 1.0), probe_ms=(1.0,), probe_every=2).referenced is None  # misaligned
    assert Block("A", 0, 0, (1.0,)).referenced is None  # no probe timed


def test_speed_modes_that_leave_the_wall_clock_inconclusive_cancel_on_the_reference_clock() -> None:
    ab = blocks(1.0)
    wall = evaluate(Evidence(ab_blocks=blocks(1.0, probes=False)), REF_AB, OPTS).comparison
    assert wall.verdict is Verdict.INCONCLUSIVE  # the jumps widen its CI
    c = evaluate(Evidence(ab_blocks=ab), REF_AB, OPTS).comparison
    assert (c.verdict, c.clock) == (Verdict.UNCHANGED, REF), c
    assert "relative to the reference probe" in c.note and "wall clock inconclusive" in c.note
    assert c.ratio == pytest.approx(1.0, abs=0.03)
    # the medians are speed-normalized ms (the same ratio as the verdict's), the recorded blocks the wall clock's
    assert c.current_median_ms / c.baseline_median_ms == pytest.approx(1.0, abs=0.03)
    assert A_MS <= c.baseline_median_ms <= 1.8 * A_MS
    assert c.ab.blocks == wall.ab.blocks


@pytest.mark.parametrize("seed", range(4))
def test_a_slowdown_of_the_code_is_not_normalized_away(seed) -> None:
    from pytest_gpuperf.verdict.gate import ab_with_reference

    c = evaluate(Evidence(ab_blocks=blocks(1.3, seed=seed)), REF_AB, OPTS).comparison
    assert c.verdict is Verdict.REGRESSED, c  # on whichever clock decided it
    # read on the reference clock where the wall clock could not tell: the code's own 1.3x
    wall = dataclasses.replace(c, verdict=Verdict.INCONCLUSIVE)
    r = ab_with_reference(wall, Evidence(ab_blocks=blocks(1.3, seed=seed)), REF_AB, OPTS)
    assert (r.verdict, r.clock) == (Verdict.REGRESSED, REF)
    assert r.ratio == pytest.approx(1.3, rel=0.03)


def test_a_busy_host_keeps_its_own_rule() -> None:
    busy = "host busy: other processes used 0.98 of 2 CPU cores while it ran"
    c = evaluate(Evidence(ab_blocks=blocks(1.0), throttle=busy, host_busy=busy), REF_AB, OPTS).comparison
    assert c.clock != REF and c.verdict is not Verdict.UNCHANGED


def test_an_inconclusive_reading_is_the_narrower_of_the_two() -> None:
    """Where neither clock decides (B 1.1x slower, right at 1 + T), the reference clock's narrower
    CI is the one shown and later moderated (its pairs' spread is the machine's less)."""
    ab = blocks(1.1, seed=1)
    wall = evaluate(Evidence(ab_blocks=blocks(1.1, seed=1, probes=False)), REF_AB, OPTS).comparison
    c = evaluate(Evidence(ab_blocks=ab), REF_AB, OPTS).comparison
    assert wall.verdict is Verdict.INCONCLUSIVE and c.verdict is Verdict.INCONCLUSIVE
    assert c.clock == REF and "read, with a narrower CI, on the wall clock relative to the reference probe" in c.note
    assert math.log(c.ratio_ci[1] / c.ratio_ci[0]) < math.log(wall.ratio_ci[1] / wall.ratio_ci[0])


# --- the stored stage (gate.with_reference): each worker process's level on the reference clock ---

PROBE = "python: 1500-iteration interpreter loop"


def stored_entry(process_ms: tuple[float, ...], levels: tuple[float, ...] | None, probe: str = PROBE):
    """A baseline entry recorded by len(process_ms) worker processes, with their reference levels."""
    from pytest_gpuperf.verdict.history import BaselineEntry, RunRecord

    run = RunRecord(sorted(process_ms)[len(process_ms) // 2], process_medians_ms=process_ms, probe_ms=PROBE_MS,
                    probe=probe, ref_medians=levels)
    return BaselineEntry("b", process_ms, (run,))


#: Process speed modes (1x to 1.7x) of the baseline's 3 processes and of this run's 3.
BASE_MODES, RUN_MODES = (1.0, 1.7, 1.25), (1.45, 1.0, 1.65)


def stored_evidence(code_factor: float, *, busy: str | None = None, probe: str = PROBE) -> Evidence:
    """This run's 3 processes: 30 rounds each at A_MS x code_factor x the process's mode (2% noise),
    the probe in the same mode; the levels are rounds over probe."""
    rng = random.Random(5)
    groups = tuple(tuple(A_MS * code_factor * m * math.exp(rng.gauss(0, 0.02)) for _ in range(30)) for m in RUN_MODES)
    levels = tuple(A_MS * code_factor / PROBE_MS * math.exp(rng.gauss(0, 0.01)) for _ in RUN_MODES)
    return Evidence(process_samples_ms=groups, ref_medians=levels, probe=probe, probe_ms=PROBE_MS * 1.3,
                    host_busy=busy, device="cpu")


BASE = stored_entry(tuple(A_MS * m for m in BASE_MODES), tuple(A_MS / PROBE_MS * f for f in (1.0, 1.01, 0.99)))


def test_stored_stage_speed_modes_cancel_on_the_reference_clock() -> None:
    plain = dataclasses.replace(stored_evidence(1.0), ref_medians=None)
    wall = evaluate(plain, Reference.stored(BASE), OPTS).comparison
    assert wall.verdict is Verdict.INCONCLUSIVE, wall  # 1x-1.7x process modes on both sides
    c = evaluate(stored_evidence(1.0), Reference.stored(BASE), OPTS).comparison
    assert (c.verdict, c.clock) == (Verdict.UNCHANGED, REF), c
    assert "relative to the reference probe" in c.note and "wall clock inconclusive" in c.note
    assert c.ratio == pytest.approx(1.0, abs=0.03)
    # its medians are ms at this run's median probe time (the levels times PROBE_MS x 1.3)
    assert c.current_median_ms == pytest.approx(A_MS / PROBE_MS * PROBE_MS * 1.3, rel=0.03)


def test_stored_stage_a_slower_code_regresses_on_the_reference_clock() -> None:
    c = evaluate(stored_evidence(1.3), Reference.stored(BASE), OPTS).comparison
    assert (c.verdict, c.clock) == (Verdict.REGRESSED, REF), c
    assert c.ratio == pytest.approx(1.3, rel=0.03)


@pytest.mark.parametrize("case", ["busy", "other probe", "baseline without levels", "one baseline process"])
def test_stored_stage_keeps_the_wall_clock_where_the_reference_cannot_apply(case: str) -> None:
    evidence, base = stored_evidence(1.0), BASE
    if case == "busy":  # a busy host: CPU time's rule, not the probe (the neighbour slows it alone)
        evidence = stored_evidence(1.0, busy="host busy: 1.0 of 2 cores used by other processes")
    elif case == "other probe":  # a baseline recorded with another probe: its levels are not comparable
        base = stored_entry(BASE.history[-1].process_medians_ms, BASE.history[-1].ref_medians, "memory: 2 MiB copy")
    elif case == "baseline without levels":  # recorded before the reference clock
        base = stored_entry(BASE.history[-1].process_medians_ms, None)
    else:
        base = stored_entry((A_MS,), (A_MS / PROBE_MS,))
    c = evaluate(evidence, Reference.stored(base), OPTS).comparison
    assert c.clock != REF and c.verdict is not Verdict.UNCHANGED, c


def test_the_levels_are_stored_with_each_run_and_merged_over_processes() -> None:
    from pytest_gpuperf.plugin.replicates import merge
    from pytest_gpuperf.storage.codec import encode_result as encode
    from pytest_gpuperf.verdict.history import BaselineEntry, run_record
    from pytest_gpuperf.verdict.result import BenchResult

    def encode_result(r: BenchResult) -> dict:
        return encode(r, environment={}, git_commit=None, timestamp_utc="2026-11-29T00:00:00Z")

    def worker(ms: float, level: float | None, probe: str = PROBE) -> dict:
        r = BenchResult.from_samples((ms, ms), name="b", device="cpu", rounds=2, calls_per_round=1, warmup_calls=0,
                                     benchmark_id="b", probe_ms=0.3, probe=probe,
                                     ref_medians=None if level is None else (level,))
        return encode_result(r)

    merged = merge("b", [worker(1.0, 3.3), worker(1.5, 3.4)])
    assert merged.ref_medians == (3.3, 3.4)
    entry = encode_result(merged)
    assert entry["ref_medians"] == [3.3, 3.4] and run_record(entry)["ref_medians"] == [3.3, 3.4]
    view = BaselineEntry.from_json("b", dict(entry, history=[run_record(entry)])).ref_view(PROBE, 2.0)
    assert view is not None and view.replicate_medians_ms == (6.6, 6.8)
    assert merge("b", [worker(1.0, 3.3), worker(1.5, None)]).ref_medians is None  # not every process
    assert merge("b", [worker(1.0, 3.3), worker(1.5, 3.4, "other")]).ref_medians is None  # another probe
