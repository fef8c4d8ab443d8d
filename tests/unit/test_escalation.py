"""More worker processes only where they can decide (issue 45 item 2): the prediction of
pytest_gpuperf.verdict.escalation and its use in replicates.needs_more (synthetic numbers; no worker
is started)."""

from __future__ import annotations

import dataclasses
import math

import pytest

from pytest_gpuperf.core.options import BenchOptions
from pytest_gpuperf.plugin import replicates
from pytest_gpuperf.reporting.terminal import more_processes_line, not_escalated_line
from pytest_gpuperf.verdict import escalation
from pytest_gpuperf.verdict.advice import Advice
from pytest_gpuperf.verdict.compare import Comparison, Verdict, decide_replicates, process_level_test
from pytest_gpuperf.verdict.result import BenchResult
from pytest_gpuperf.verdict.stats import geometric_mean_ci


def _spread(centre: float, sd: float, n: int) -> list[float]:
    """``n`` process medians (ms) around ``centre`` whose log SD (ddof=1) is exactly ``sd``."""
    z = [i - (n - 1) / 2 for i in range(n)]
    scale = math.sqrt(sum(v * v for v in z) / (n - 1))
    return [centre * math.exp(sd * v / scale) for v in z]


def _compared(ratio: float, sd: float, n: int = 3, m: int = 3, **options) -> BenchResult:
    """A replicated result (one sample per process) decided against a baseline of ``m`` processes."""
    current, baseline = _spread(ratio, sd, n), _spread(1.0, sd, m)
    c = decide_replicates([[v] for v in current], baseline, threshold=options.get("threshold", 0.05))
    if c.verdict is Verdict.INCONCLUSIVE:
        c = dataclasses.replace(c, advice=(Advice.MORE_PROCESSES,))
    return BenchResult.from_samples(tuple(current), name="t", device="cpu", rounds=n, calls_per_round=1,
                                    warmup_calls=0, comparison=c, process_medians_ms=tuple(current),
                                    options=BenchOptions(**options))


def test_the_prediction_at_the_observed_counts_is_the_process_level_test() -> None:
    current, baseline = [1.0, 1.04, 0.97, 1.1], [1.0, 1.02, 0.95]
    ratio, ci, *_, sd = process_level_test(current, baseline)
    assert escalation.predicted_ci(ratio, sd, 4, 3) == pytest.approx(ci)
    c = decide_replicates([[v] for v in current], baseline)
    assert escalation.smallest_detectable(sd, 4, 3, 0.01, 0.05) == pytest.approx(c.resolution)
    g, lo, hi = geometric_mean_ci(baseline)
    assert escalation.geometric_mean_width(escalation.log_sd(baseline), 3) == pytest.approx(hi / lo - 1)


def test_the_ci_narrows_with_processes_but_never_below_the_baselines_share() -> None:
    widths = [escalation.predicted_ci(1.0, 0.1, n, 3)[1] for n in (3, 5, 10, 100, 1000)]
    assert widths == sorted(widths, reverse=True)
    floor = math.exp(2.576 * 0.1 / math.sqrt(3))  # t -> z, 1/n -> 0: the baseline's 3 processes alone
    assert widths[-1] > floor - 1e-3 and widths[-1] == pytest.approx(floor, rel=0.01)
    assert escalation.straddles((0.99, 1.06), 0.05) and not escalation.straddles((0.99, 1.04), 0.05)
    assert not escalation.straddles((1.01, 1.2), 0.05)
    with pytest.raises(ValueError):
        escalation.half_width(0.1, 1, 1)


def test_processes_to_decide_is_the_first_count_that_decides() -> None:
    n = escalation.processes_to_decide(1.07, 0.025, 3, 0.05, start=3)
    assert n is not None and 3 < n <= 10
    assert escalation.straddles(escalation.predicted_ci(1.07, 0.025, n - 1, 3), 0.05)
    assert not escalation.straddles(escalation.predicted_ci(1.07, 0.025, n, 3), 0.05)
    assert escalation.processes_to_decide(1.02, 0.28, 3, 0.05) is None  # the baseline's spread alone


def test_a_tight_benchmark_that_just_straddles_gets_more_processes() -> None:
    r = _compared(1.07, 0.025)
    c = r.comparison
    assert c.verdict is Verdict.INCONCLUSIVE and c.ratio_ci[0] < 1 < 1.05 < c.ratio_ci[1]
    assert escalation.can_decide(c, 0.05, 10)
    assert replicates.needs_more(r, updating=False, max_processes=10)
    assert replicates.cannot_decide(r, updating=False, max_processes=10) is None
    assert replicates.not_escalated(r, False, 10) is r
    # one spread twice as wide (5%) is decided at 10 processes but not at 4: then the prediction says so
    wider = _compared(1.07, 0.05)
    assert wider.comparison.verdict is Verdict.INCONCLUSIVE
    assert replicates.needs_more(wider, updating=False, max_processes=10)
    assert not replicates.needs_more(wider, updating=False, max_processes=4)
    assert "about " in replicates.cannot_decide(wider, updating=False, max_processes=4)


def test_a_benchmark_28_percent_apart_between_processes_gets_none() -> None:
    r = _compared(1.02, 0.28)
    assert r.comparison.verdict is Verdict.INCONCLUSIVE
    assert replicates.needs_more(r, updating=False)  # thin evidence, as before
    assert not replicates.needs_more(r, updating=False, max_processes=10)  # but 10 processes cannot decide it
    note = replicates.cannot_decide(r, updating=False, max_processes=10)
    assert note.startswith("more worker processes cannot decide it: at 10 processes the ratio's 99% CI")
    assert "spanning 1 and 1+T=1.050x" in note and "no number would" in note
    assert "the smallest slowdown this run could detect is +" in note
    decided = replicates.not_escalated(r, False, 10)
    assert decided.comparison.verdict is Verdict.INCONCLUSIVE
    assert decided.comparison.note.endswith(note) and decided.comparison.note.startswith(r.comparison.note)
    assert Advice.MORE_PROCESSES not in decided.comparison.advice  # no number of processes would


def test_regressions_to_replicate_and_processes_options_keep_their_rule() -> None:
    noisy = _compared(4.0, 0.28)  # 99% CI about 1.4x-11x
    assert noisy.comparison.verdict is Verdict.REGRESSED
    assert replicates.needs_more(noisy, updating=False, replicate=True, max_processes=10)
    assert not replicates.needs_more(noisy, updating=False, max_processes=10)
    fixed = _compared(1.07, 0.025, processes=3)
    assert not replicates.needs_more(fixed, updating=False, max_processes=10)
    assert replicates.cannot_decide(fixed, updating=False, max_processes=10) is None
    # no process-level spread to predict from (a comparison without run_sd): escalated as before
    c = Comparison(verdict=Verdict.INCONCLUSIVE, benchmark_id="b", current_median_ms=1.0, ratio_ci=(0.99, 1.25))
    bare = BenchResult.from_samples((1.0,) * 4, name="t", device="cpu", rounds=4, calls_per_round=1,
                                    warmup_calls=0, comparison=c, process_medians_ms=(1.0, 1.0), options=BenchOptions())
    assert replicates.needs_more(bare, updating=False, max_processes=10)


def _update(medians: list[float]) -> BenchResult:
    c = decide_replicates([[v] for v in medians], None)
    return BenchResult.from_samples(tuple(medians), name="t", device="cpu", rounds=len(medians), calls_per_round=1,
                                    warmup_calls=0, comparison=c, process_medians_ms=tuple(medians),
                                    options=BenchOptions())


def test_an_update_run_adds_processes_only_where_they_narrow_the_baseline() -> None:
    tight, noisy = _update(_spread(1.0, 0.025, 3)), _update(_spread(1.0, 0.28, 3))
    for r in (tight, noisy):  # both too imprecise after 3 processes
        assert replicates.needs_more(r, updating=True)
    assert replicates.needs_more(tight, updating=True, max_processes=10)
    assert not replicates.needs_more(noisy, updating=True, max_processes=10)
    note = replicates.cannot_decide(noisy, updating=True, max_processes=10)
    assert note.startswith("more worker processes cannot make this baseline precise enough: at 10 processes")
    b = escalation.predict_baseline(_spread(1.0, 0.28, 3), 0.10, 10)
    assert not b.narrows and b.needed is not None and b.needed > 10
    low = escalation.optimistic_sd(0.28, 2)  # the spread read optimistically (its lower 95% bound)
    assert low == pytest.approx(0.28 * math.sqrt(2 / 5.991), rel=1e-3)
    assert escalation.geometric_mean_width(low, b.needed) <= 0.10 < escalation.geometric_mean_width(low, b.needed - 1)
    assert replicates.not_escalated(noisy, True, 10).comparison.note == note


def test_the_closing_line_counts_the_benchmarks_not_escalated() -> None:
    assert more_processes_line({"m::a": 7}, 3) == (
        "gpuperf: 1 benchmark(s) were measured in more than 3 worker processes, where the evidence was thin; "
        "processes each decision used: m::a (7)")
    both = more_processes_line({"m::a": 7}, 3, not_escalated=102, max_processes=10)
    assert both.startswith("gpuperf: 1 benchmark(s)") and "; 102 benchmark(s) inconclusive not measured" in both
    alone = more_processes_line({}, 3, not_escalated=5, max_processes=10)
    assert alone == not_escalated_line(5, 10)
    assert "even 10 processes (--gpuperf-max-processes, within --gpuperf-more-processes-time) could not decide them" in alone
    assert "after 3 worker processes" in not_escalated_line(5, 10, after=3)
    assert "too imprecise a baseline" in not_escalated_line(2, 10, updating=True)


# ----------------------------------------------------------------------------- the time budget


def test_the_time_budget_is_the_first_processes_time_and_counts_processes_by_the_last_batch() -> None:
    b = escalation.TimeBudget.of([14.0, 15.0, 16.0])  # three first processes of a torch suite
    assert (b.seconds, b.per_process_s) == (45.0, 15.0)
    assert b.processes(0.0) == 3 and b.processes(20.0) == 1 and b.processes(44.0) == 0 and b.processes(50.0) == 0
    cheaper = b.after([9.0, 10.0])  # added processes run only the thin benchmarks
    assert cheaper.per_process_s == 9.5 and cheaper.seconds == 45.0
    assert cheaper.processes(19.0) == 2 and b.after([]) is b
    assert escalation.TimeBudget.of([14.0, 15.0, 16.0], seconds=600).processes(0.0) == 40
    assert escalation.TimeBudget(10.0, 0.0).processes(0.0) == escalation.MAX_PREDICTED
    for bad in ([], [1.0, -1.0]):
        with pytest.raises(ValueError, match="non-negative times"):
            escalation.TimeBudget.of(bad)
    with pytest.raises(ValueError, match="must be > 0 s"):
        escalation.TimeBudget.of([1.0], seconds=0)


def test_a_benchmark_the_processes_the_time_allows_cannot_decide_gets_none_and_the_note_says_time() -> None:
    wider = _compared(1.07, 0.05)  # decided at 10 processes, not at 4 (above)
    assert replicates.needs_more(wider, updating=False, max_processes=10)
    assert not replicates.needs_more(wider, updating=False, max_processes=4, by_time=True)
    note = replicates.cannot_decide(wider, updating=False, max_processes=4, by_time=True)
    assert note.startswith("more worker processes cannot decide it: at 4 processes (as many as the time left for "
                           "more allows, --gpuperf-more-processes-time) the ratio's 99% CI would still be about")
    assert "would (--gpuperf-more-processes-time, --gpuperf-max-processes)" in note
    # no process fits in the time left: none is started, even where the optimistic reading would decide
    tight = _compared(1.07, 0.025)
    assert replicates.needs_more(tight, updating=False, max_processes=10)
    assert not replicates.needs_more(tight, updating=False, max_processes=3, by_time=True)
    out = replicates.cannot_decide(tight, updating=False, max_processes=3, by_time=True)
    assert out.startswith("not measured in more worker processes: the time for them (--gpuperf-more-processes-time) "
                          "had run out; the smallest slowdown this run could detect is +")
    # a regression to replicate still gets its processes: a replication goes past the time
    noisy = _compared(4.0, 0.28)
    assert replicates.needs_more(noisy, updating=False, replicate=True, max_processes=3, by_time=True)
    line = not_escalated_line(2, 3, after=3, by_time=True)
    assert line == ("gpuperf: 2 benchmark(s) inconclusive after 3 worker processes not measured in more worker "
                    "processes: the time for them (--gpuperf-more-processes-time) had run out (each verdict's note "
                    "says why)")
    assert "the 5 processes the time left allows (--gpuperf-more-processes-time) could not decide them" in \
        not_escalated_line(2, 5, after=3, by_time=True)


def test_the_time_left_caps_each_benchmark_at_its_own_processes_plus_those_that_fit() -> None:
    """The coordinator's choice of the benchmarks for the next batch (coordinator._thin): with ``fit``
    more processes left in the time, a benchmark measured in fewer processes than the session so far
    (left out of the last batch) may still get them; with none left, no inconclusive one does,
    whatever its own count, while a regression to replicate still does; one that an A/B will
    measure again gets none (issue 45)."""
    from pathlib import Path

    from pytest_gpuperf.plugin.coordinator import _thin
    from pytest_gpuperf.plugin.settings import ProcessLimits, SessionSettings

    class Lines:
        def __init__(self) -> None:
            self.lines: list[str] = []

        def line(self, text: str) -> None:
            self.lines.append(text)

    s = SessionSettings(measuring=True, updating=False, baseline_dir=Path("b"), rootpath=Path("."),
                        options=BenchOptions(), processes=3, limits=ProcessLimits(max_processes=10))
    tight = _compared(1.07, 0.025)  # 3 processes; decided by about 5-10 (above)
    noisy = _compared(4.0, 0.28)  # regressed on the first 3: replicated when no A/B confirms it
    finished = {"m::tight": tight, "m::noisy": noisy}
    progress = Lines()
    thin = _thin(dict(finished), s, 7, progress, lambda key: False, {}, {}, fit=7)  # 3 + 7 = 10 for tight
    assert thin == ["m::tight", "m::noisy"] and not progress.lines
    none_left = dict(finished)
    thin = _thin(none_left, s, 7, progress, lambda key: False, {}, {}, fit=0)
    assert thin == ["m::noisy"]  # the regression is replicated whatever the time
    assert progress.lines == [not_escalated_line(1, 3, after=7, by_time=True)]
    assert "the time for them (--gpuperf-more-processes-time) had run out" in none_left["m::tight"].comparison.note
    # with an A/B against the baselines' commit to come, neither gets processes: the A/B confirms the
    # regression and settles the inconclusive comparison (both sides measured now), with no note here
    ab, lines = dict(finished), Lines()
    assert _thin(ab, s, 7, lines, lambda key: True, {}, {}) == []
    assert not lines.lines and ab["m::tight"] is tight
    assert _thin(dict(finished), s, 7, Lines(), lambda key: key == "m::noisy", {}, {}) == ["m::tight"]
