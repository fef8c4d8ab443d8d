"""The A/B decision and schedule (pure; seeded synthetic blocks, no timing)."""

from __future__ import annotations

import math
import random

import pytest

from pytest_gpuperf.verdict.paired import (Block, PairedRatio, abba_schedule, decide_ab, min_pairs, paired_ratios,
                               per_process_ratios)
from pytest_gpuperf.verdict.compare import Verdict
from pytest_gpuperf.reporting.messages import ab_summary, comparison_message


def _blocks(slowdown: float, *, processes: int = 2, groups: int = 4, cv: float = 0.03, drift: float = 0.0,
            process_modes: tuple[float, ...] = (), seed: int = 1, rounds: int = 20) -> list[Block]:
    """Blocks as the coordinator gets them: A at 1 ms, B at 1 ms * (1 + slowdown); ``drift`` moves
    the machine's speed by that fraction per block (both sides alike); ``process_modes`` multiplies
    each process pair's B side (a speed mode of one process)."""
    rng = random.Random(seed)
    out = []
    for p in range(processes):
        for pos, side in enumerate(abba_schedule(groups, seed=p)):
            level = 1.0 * (1 + drift) ** (p * 4 * groups + pos)
            if side == "B":
                level *= 1 + slowdown
                if process_modes:
                    level *= process_modes[p]
            out.append(Block(side, p, pos, tuple(level * math.exp(rng.gauss(0, cv)) for _ in range(rounds))))
    return out


def _decide(blocks: list[Block], **kw):
    a = [v for b in blocks if b.side == "A" for v in b.samples_ms]
    b = [v for b in blocks if b.side == "B" for v in b.samples_ms]
    return decide_ab(paired_ratios(blocks), a_median_ms=sorted(a)[len(a) // 2], b_median_ms=sorted(b)[len(b) // 2],
                     ref="origin/main (3f2a1c9)", benchmark_id="t.py::test_x", **kw)


def test_abba_schedule_is_balanced_seeded_and_randomized():
    s = abba_schedule(4, seed=7)
    assert len(s) == 16 and s.count("A") == s.count("B") == 8
    for k in range(0, 16, 2):  # every adjacent pair has one of each side
        assert sorted(s[k:k + 2]) == ["A", "B"]
    assert s == abba_schedule(4, seed=7)
    assert len({tuple(abba_schedule(4, seed=i)) for i in range(20)}) > 1
    with pytest.raises(ValueError, match="groups"):
        abba_schedule(0, seed=1)


def test_paired_ratios_pairs_adjacent_blocks_of_one_process():
    blocks = [Block("A", 0, 0, (1.0,)), Block("B", 0, 1, (2.0,)), Block("B", 0, 2, (3.0,)), Block("A", 0, 3, (1.0,)),
              Block("A", 1, 0, (1.0,))]  # the last has no partner: left out
    r = paired_ratios(blocks)
    assert [round(math.exp(x.log_ratio), 6) for x in r] == [2.0, 3.0]
    assert [x.process for x in r] == [0, 0]
    with pytest.raises(ValueError, match="no positive samples"):
        paired_ratios([Block("A", 0, 0, ())])


def test_injected_slowdown_regresses_and_aa_passes():
    slow = _decide(_blocks(0.20))
    assert slow.verdict is Verdict.REGRESSED
    assert 1.17 < slow.ratio < 1.23 and slow.ratio_ci[0] > 1.0
    assert slow.ab.pairs == 16 and slow.runs == 2 and len(slow.ab.process_ratios) == 2
    text = comparison_message(slow)
    assert "A/B vs origin/main (3f2a1c9): 1.19" in text and "Wilcoxon signed-rank" in text and "16 paired blocks" in text
    assert ab_summary(slow).startswith("A/B vs origin/main (3f2a1c9): 1.")
    same = _decide(_blocks(0.0))
    assert same.verdict is Verdict.UNCHANGED and not same.fails(strict=True)


def test_drift_during_the_run_cancels_in_the_pairs():
    # the machine slows down by 2% per block (A and B alike): ~x1.9 over the run, no code change
    assert _decide(_blocks(0.0, drift=0.02)).verdict is Verdict.UNCHANGED
    assert _decide(_blocks(0.10, drift=0.02)).verdict is Verdict.REGRESSED


def test_a_slowdown_carried_by_one_process_pair_is_inconclusive():
    c = _decide(_blocks(0.0, process_modes=(1.30, 1.01), cv=0.01))  # pooled: significant and above +5%
    assert c.verdict is Verdict.INCONCLUSIVE
    assert "not by half the threshold in every pair of worker processes" in c.note and c.fails(strict=True) and not c.fails()


def test_improvement_and_threshold():
    assert _decide(_blocks(-0.2)).verdict is Verdict.IMPROVED
    c = _decide(_blocks(0.03, cv=0.005))  # significant but inside the 5% threshold
    assert c.verdict is Verdict.UNCHANGED and "within the effect floor" in c.note
    assert _decide(_blocks(0.03, cv=0.005), threshold=0.01).verdict is Verdict.REGRESSED


def test_too_few_pairs_is_inconclusive():
    assert min_pairs(0.01) == 7 and min_pairs(0.05) == 5
    c = _decide(_blocks(0.5, processes=1, groups=1))
    assert c.verdict is Verdict.INCONCLUSIVE and "needs 7" in c.note


def test_per_process_ratios_and_bad_options():
    r = [PairedRatio(0, math.log(1.1)), PairedRatio(0, math.log(1.3)), PairedRatio(1, math.log(0.9))]
    assert [round(v, 3) for v in per_process_ratios(r)] == [1.196, 0.9]
    with pytest.raises(ValueError, match="alpha"):
        decide_ab(r, a_median_ms=1, b_median_ms=1, ref="x", alpha=0)
    with pytest.raises(ValueError, match="threshold"):
        decide_ab(r, a_median_ms=1, b_median_ms=1, ref="x", threshold=-1)


def test_the_ci_is_over_process_pairs_not_pooled_blocks():
    # Two pairs of worker processes in different speed modes (B 1.00x in one, 1.16x in the other):
    # a bootstrap of the pooled blocks gives a narrow CI; the two-stage one spans both pairs' levels.
    from pytest_gpuperf.verdict.paired import median_ci

    blocks = _blocks(0.0, process_modes=(1.0, 1.16), cv=0.01)
    c = _decide(blocks)
    flat = median_ci([r.log_ratio for r in paired_ratios(blocks)])
    assert c.ratio_ci[0] < 1.02 and c.ratio_ci[1] > 1.14
    assert math.exp(flat[1]) - math.exp(flat[0]) < c.ratio_ci[1] - c.ratio_ci[0]


def test_confirmation_pairs_are_decided_jointly_with_the_first():
    # Issue 21's tokenizer: 1.40x in the first two process pairs, 1.38x in the confirmation pair:
    # one joint decision says regressed (confirmed); an A/A confirmation pair after a one-pair fluke
    # does not fail.
    from pytest_gpuperf.ab.results import needs_more_pairs
    from pytest_gpuperf.verdict.gate import Reference, judge_ab
    from pytest_gpuperf.core.options import BenchOptions

    def decide_pooled(key, blocks, ref, options, confirm_from):
        return judge_ab(blocks, Reference.ab(ref, measured=True), options, benchmark_id=key, confirm_from=confirm_from)

    first = _blocks(0.40, processes=2, seed=3)
    more = [Block(b.side, b.process + 2, b.position, b.samples_ms) for b in _blocks(0.38, processes=1, seed=4)]
    c = decide_pooled("t.py::test_x", first + more, "HEAD (3f2a1c9)", BenchOptions(), confirm_from=2)
    assert c.verdict is Verdict.REGRESSED and c.confirmed is True and c.runs == 3
    assert c.ratio_ci[0] > 1.05
    fluke = _blocks(0.0, process_modes=(1.25, 1.0), cv=0.01, seed=5)
    aa = [Block(b.side, b.process + 2, b.position, b.samples_ms) for b in _blocks(0.0, processes=1, seed=6)]
    c = decide_pooled("t.py::test_x", fluke + aa, "HEAD (3f2a1c9)", BenchOptions(), confirm_from=2)
    assert not c.fails() and c.confirmed is False
    assert needs_more_pairs(_decide(_blocks(0.40)))
    assert not needs_more_pairs(_decide(_blocks(0.0)))


def test_an_ab_comparison_is_read_as_non_inferiority_like_the_stored_one():
    """Issue 45: the gate asks "slower by more than the threshold?". An A/B whose 99% CI spans both
    1 and 1 + T, but whose one-sided 97.5% upper bound is under 1 + T, is unchanged (with the note
    that says so); one whose bound reaches 1 + T stays inconclusive; a real slowdown still fails."""
    def ratios(shift: float, sd: float) -> list[PairedRatio]:
        rng = random.Random(1)
        return [PairedRatio(p, shift + rng.gauss(0, sd)) for p in (0, 1) for _ in range(8)]

    c = decide_ab(ratios(0.015, 0.06), a_median_ms=1.0, b_median_ms=1.0, ref="HEAD")
    assert c.ratio_ci[0] < 1 < 1.05 < c.ratio_ci[1]  # the 99% CI spans both
    assert c.verdict is Verdict.UNCHANGED
    assert c.note.startswith("not slower by more than 5.0%: the one-sided 97.5% upper bound 1.0")
    assert c.note.endswith("is under 1+T=1.050x (non-inferiority; the 99% CI 0.953x-1.057x spans both)")
    near = decide_ab(ratios(0.04, 0.08), a_median_ms=1.0, b_median_ms=1.04, ref="HEAD")
    assert near.verdict is Verdict.INCONCLUSIVE and "non-inferiority" not in (near.note or "")
    assert decide_ab(ratios(0.2, 0.06), a_median_ms=1.0, b_median_ms=1.2, ref="HEAD").verdict is Verdict.REGRESSED
