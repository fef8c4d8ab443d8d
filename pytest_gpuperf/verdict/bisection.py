"""Bisecting a regression over a line of commits (pure: no git, no torch, no pytest).

The commits are indexed ``0 .. n-1`` along the first-parent line, ``0`` the known good commit
(GOOD) and ``n-1`` the bad one (BAD). ``measure(a, b)`` measures commit ``b`` against commit ``a``
for one benchmark (in production a paired A/B run, :func:`pytest_gpuperf.ab.run.measure_ab`) and
returns a :class:`Probe` whose :class:`Call` is ``bad`` (``b`` regressed against ``a``), ``good``
(unchanged or faster), ``unclear`` (inconclusive after the A/B run measured more) or ``skip`` (the
benchmark cannot run at ``b``: import error, failing test, benchmark missing).

:func:`bisect` is a binary search like ``git bisect`` (and asv's ``asv find``) with three choices:

- **Every step measures against the reference** (GOOD, or the previous culprit when looking for a
  further regression), not against a neighbour: the question "is ``m`` already slower than GOOD?"
  is monotone along the line for one step regression, a neighbour comparison is not.
- **The culprit's own step is measured** (``first_bad`` against the last good commit before it):
  when that step is not itself a regression, the slowdown is spread over several commits (or
  below the resolution of one A/B run here), and the outcome says so instead of naming a commit.
- **Several regressions**: after a culprit ``f``, BAD is measured against ``f``; if it is still
  slower the search continues on ``f .. BAD`` with ``f`` as the reference (at most
  ``max_regressions`` culprits). The culprits are ordered by the size of their own step.

A skipped commit is stepped around (the nearest untried commit to the middle, as ``git bisect
skip`` does); when only skipped commits separate the last good and the first bad commit, the
culprit is one of them and the outcome lists them. An unclear step stops the search: the outcome
names the range still holding the change.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Callable


class Call(enum.Enum):
    """What one measurement says of the later commit."""

    GOOD = "good"
    BAD = "bad"
    UNCLEAR = "unclear"
    SKIP = "skip"


def call_of(verdict: str | None) -> Call:
    """The :class:`Call` of an A/B timing verdict (``Verdict.value``): ``regressed`` is bad,
    ``unchanged`` and ``improved`` good, ``inconclusive`` unclear; no verdict (the benchmark did
    not run on that side, or has no A side) is skip."""
    if verdict == "regressed":
        return Call.BAD
    if verdict in ("unchanged", "improved"):
        return Call.GOOD
    if verdict == "inconclusive":
        return Call.UNCLEAR
    return Call.SKIP


@dataclass(frozen=True)
class Probe:
    """Commit ``b`` measured against commit ``a`` (indices) for one benchmark: the :class:`Call`,
    the A/B ratio b/a with its 99% CI, the A/B verdict, and a note (why a skip is a skip).
    ``op_diff``: for a step between adjacent commits that moved, why, op by op
    (:class:`~pytest_gpuperf.verdict.opdiff.OpDiff`); ``why_missing``: why that diagnosis is missing."""

    a: int
    b: int
    call: Call
    ratio: float | None = None
    ci: tuple[float, float] | None = None
    verdict: str | None = None
    note: str = ""
    op_diff: Any = None
    why_missing: str = ""


@dataclass(frozen=True)
class Culprit:
    """A regression found: ``first_bad`` is the first commit slower than ``reference``; ``last_good``
    the last commit before it that was not; ``skipped`` the commits between them that could not be
    measured (the culprit may be any of them too); ``step``: ``first_bad`` measured against
    ``last_good``; ``single``: that step is itself a regression (else the change is spread over
    several commits, or below the resolution here)."""

    reference: int
    last_good: int
    first_bad: int
    step: Probe
    skipped: tuple[int, ...] = ()

    @property
    def single(self) -> bool:
        return self.step.call is Call.BAD


@dataclass(frozen=True)
class Outcome:
    """The result of :func:`bisect`.

    ``status``: ``"found"`` (at least one culprit), ``"not-slower"`` (BAD is not slower than GOOD
    here), ``"unresolved"`` (a step stayed unclear: the change lies in ``unresolved``, a (good, bad)
    index pair, and may be spread or too small to resolve), ``"cannot-measure"`` (the benchmark does
    not run at BAD or GOOD). ``culprits``: largest own step first. ``probes``: every measurement, in
    order. ``unresolved``: the range left when a later search stopped (also with ``"found"``)."""

    status: str
    culprits: tuple[Culprit, ...] = ()
    probes: tuple[Probe, ...] = ()
    unresolved: tuple[int, int] | None = None
    first: Probe | None = None  # BAD against GOOD


@dataclass
class _Search:
    measure: Callable[[int, int], Probe]
    probes: list[Probe] = field(default_factory=list)
    cache: dict[tuple[int, int], Probe] = field(default_factory=dict)

    def __call__(self, a: int, b: int) -> Probe:
        if (a, b) not in self.cache:
            p = self.measure(a, b)
            self.cache[(a, b)] = p
            self.probes.append(p)
        return self.cache[(a, b)]


def bisect(n: int, measure: Callable[[int, int], Probe], max_regressions: int = 3) -> Outcome:
    """Find the commit(s) that made one benchmark slower along commits ``0 .. n-1`` (0 = GOOD,
    n-1 = BAD; ``n >= 2``). ``measure(a, b)`` is called at most once per pair. See the module doc.
    Raises ``ValueError`` for ``n < 2`` or ``max_regressions < 1``."""
    if n < 2:
        raise ValueError(f"bisect needs GOOD and BAD, got {n} commit(s)")
    if max_regressions < 1:
        raise ValueError(f"max_regressions must be >= 1, got {max_regressions}")
    probe = _Search(measure)
    first = probe(0, n - 1)
    if first.call is Call.GOOD:
        return Outcome("not-slower", probes=tuple(probe.probes), first=first)
    if first.call is Call.SKIP:
        return Outcome("cannot-measure", probes=tuple(probe.probes), first=first)
    if first.call is Call.UNCLEAR:
        return Outcome("unresolved", probes=tuple(probe.probes), unresolved=(0, n - 1), first=first)
    culprits: list[Culprit] = []
    ref, unresolved = 0, None
    while len(culprits) < max_regressions:
        last_good, first_bad, skipped, decided = _search(probe, ref, n - 1)
        if not decided:
            unresolved = (last_good, first_bad)
            break
        culprits.append(Culprit(ref, last_good, first_bad, probe(last_good, first_bad), skipped))
        if first_bad == n - 1 or probe(first_bad, n - 1).call is not Call.BAD:
            break
        ref = first_bad  # BAD is slower still than this culprit: a further regression after it
    if not culprits:
        return Outcome("unresolved", probes=tuple(probe.probes), unresolved=unresolved, first=first)
    ordered = sorted(culprits, key=lambda c: (not c.single, -(c.step.ratio or 0.0)))
    return Outcome("found", tuple(ordered), tuple(probe.probes), unresolved, first)


def _search(probe: _Search, ref: int, bad: int) -> tuple[int, int, tuple[int, ...], bool]:
    """Binary search between ``ref`` (good against itself) and ``bad`` (slower than ``ref``):
    ``(last_good, first_bad, skipped between them, True)``, or ``(good, bad, (), False)`` with the
    range narrowed so far when a step is unclear."""
    lo, hi = ref, bad
    skipped: set[int] = set()
    while True:
        untried = [i for i in range(lo + 1, hi) if i not in skipped]
        if not untried:
            return lo, hi, tuple(sorted(i for i in skipped if lo < i < hi)), True
        middle = (lo + hi) / 2
        m = min(untried, key=lambda i: (abs(i - middle), i))
        p = probe(ref, m)
        if p.call is Call.BAD:
            hi = m
        elif p.call is Call.GOOD:
            lo = m
        elif p.call is Call.SKIP:
            skipped.add(m)
        else:
            return lo, hi, (), False
