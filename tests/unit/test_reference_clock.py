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
