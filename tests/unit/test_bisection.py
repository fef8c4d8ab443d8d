"""The pure bisection search (issue 25) on scripted measurements: each commit has a speed (its
time relative to GOOD); a probe of b against a is bad above +5%, good below +2%, unclear between."""

from __future__ import annotations

import pytest

from pytest_gpuperf.verdict.bisection import Call, Probe, bisect, call_of


def line(times: list[float], skip: frozenset[int] = frozenset(), unclear_band: tuple[float, float] = (1.02, 1.05)):
    """A measure function over commits with these times, and the list of pairs it was asked for."""
    asked: list[tuple[int, int]] = []

    def measure(a: int, b: int) -> Probe:
        asked.append((a, b))
        if b in skip or a in skip:
            return Probe(a, b, Call.SKIP, note="ImportError at collection")
        r = times[b] / times[a]
        call = Call.BAD if r > unclear_band[1] else Call.GOOD if r < unclear_band[0] else Call.UNCLEAR
        return Probe(a, b, call, ratio=r, ci=(r * 0.98, r * 1.02))

    return measure, asked


@pytest.mark.parametrize("n", [2, 3, 8, 12, 16])
def test_one_step_regression_is_found_exactly_at_every_position(n: int) -> None:
    for k in range(1, n):
        measure, asked = line([1.0] * k + [1.2] * (n - k))
        out = bisect(n, measure)
        assert out.status == "found" and len(out.culprits) == 1
        c = out.culprits[0]
        assert (c.last_good, c.first_bad, c.single) == (k - 1, k, True)
        assert len(asked) == len(set(asked))  # each pair measured once
        # BAD vs GOOD, the binary search, the culprit's own step, BAD vs the culprit (a further
        # regression?): about log2(n) + 3 measurements
        assert len(asked) <= (n - 1).bit_length() + 3


def test_two_regressions_both_found_the_larger_step_first() -> None:
    times = [1.0] * 4 + [1.1] * 6 + [1.1 * 1.3] * 6  # +10% at 4, +30% at 10
    measure, _ = line(times)
    out = bisect(16, measure)
    assert out.status == "found"
    assert [c.first_bad for c in out.culprits] == [10, 4]
    assert out.culprits[0].step.ratio == pytest.approx(1.3)
    assert out.culprits[1].reference == 0 and out.culprits[0].reference == 4


def test_a_commit_that_cannot_run_is_skipped_and_named() -> None:
    times = [1.0] * 6 + [1.2] * 6
    measure, asked = line(times, skip=frozenset({5}))  # the first middle commit cannot run
    out = bisect(12, measure)
    assert out.status == "found" and out.culprits[0].first_bad == 6
    assert any(p.b == 5 and p.call is Call.SKIP for p in out.probes)
    assert out.culprits[0].skipped == (5,)  # between the last good (4) and the first bad: named


def test_when_only_skipped_commits_separate_good_and_bad_the_culprit_may_be_any_of_them() -> None:
    times = [1.0] * 5 + [1.2] * 5  # the change at 5; commit 4 cannot run
    measure, _ = line(times, skip=frozenset({4}))
    out = bisect(10, measure)
    c = out.culprits[0]
    assert (c.last_good, c.first_bad, c.skipped) == (3, 5, (4,))


def test_a_spread_slowdown_is_reported_as_such_not_as_one_commit() -> None:
    times = [1.0 * 1.015 ** i for i in range(12)]  # +1.5% per commit: no single step is a regression
    measure, _ = line(times, unclear_band=(1.05, 1.05))  # every call decided: bad above +5%
    out = bisect(12, measure)
    assert out.status == "found"
    assert out.culprits[0].first_bad == 4  # the first commit 5% slower than GOOD ...
    assert all(not c.single for c in out.culprits)  # ... but no commit's own step is a regression
    assert out.culprits[0].step.call is Call.GOOD
    # with an unclear band the search stops on an unclear step instead: never one commit named
    measure, _ = line(times)
    out = bisect(12, measure)
    assert out.status == "unresolved" or all(not c.single for c in out.culprits)


def test_an_unclear_step_stops_the_search_and_names_the_range() -> None:
    times = [1.0] * 6 + [1.035] * 3 + [1.2] * 3  # the middle commits are within the unclear band
    measure, _ = line(times)
    out = bisect(12, measure)
    assert out.unresolved is not None
    lo, hi = out.unresolved
    assert lo < 6 <= hi


def test_bad_not_slower_and_bad_that_cannot_run() -> None:
    measure, asked = line([1.0] * 8)
    out = bisect(8, measure)
    assert out.status == "not-slower" and asked == [(0, 7)]
    measure, _ = line([1.0] * 7 + [1.3], skip=frozenset({7}))
    assert bisect(8, measure).status == "cannot-measure"
    measure, _ = line([1.0] * 7 + [1.03])
    assert bisect(8, measure).status == "unresolved"


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="GOOD and BAD"):
        bisect(1, lambda a, b: Probe(a, b, Call.GOOD))
    with pytest.raises(ValueError, match="max_regressions"):
        bisect(4, lambda a, b: Probe(a, b, Call.GOOD), max_regressions=0)


@pytest.mark.parametrize("verdict, call", [("regressed", Call.BAD), ("unchanged", Call.GOOD),
                                           ("improved", Call.GOOD), ("inconclusive", Call.UNCLEAR),
                                           ("no-baseline", Call.SKIP), (None, Call.SKIP)])
def test_call_of_an_ab_verdict(verdict, call) -> None:
    assert call_of(verdict) is call
