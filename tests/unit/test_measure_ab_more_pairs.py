"""``measure_ab(max_pairs=...)`` (issue 25): a step that cannot decide measures more, one pair at a
time, until it decides or ``max_pairs`` pairs ran; without ``max_pairs`` only the one confirmation
round of ``--gpuperf-ab``. A scripted coordinator stands in for the worker processes."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pytest_gpuperf.ab import results as ab_results_module
from pytest_gpuperf.ab import run as ab_run


class FakeCoordinator:
    instances: list["FakeCoordinator"] = []

    def __init__(self, specs, args, processes, log_dir, progress=None, announce=None, traces_dir=None, extras=True):
        self.processes, self.confirmed_pairs, self.notes, self.calls = processes, 0, [], []
        self.only, self.extras, self.deadline, self.skipped = None, extras, None, set()
        FakeCoordinator.instances.append(self)

    def elapsed_s(self):
        return 1000.0  # started long ago: any time for settling is spent

    def run(self):
        self.calls.append(("run", self.processes))

    def confirm(self, keys, pairs):
        self.calls.append(("confirm", sorted(keys), pairs))
        self.confirmed_pairs += pairs

    def profile(self, keys, pairs):
        self.calls.append(("profile", sorted(keys), pairs))

    measured: dict = {}


def _install(monkeypatch: pytest.MonkeyPatch, decided_after_pairs: int) -> None:
    """Results that need more pairs until ``decided_after_pairs`` pairs ran in all."""
    FakeCoordinator.instances.clear()
    monkeypatch.setattr(ab_run, "Coordinator", FakeCoordinator)

    def fake_results(coordinator, label):
        pairs = coordinator.processes + coordinator.confirmed_pairs
        undecided = pairs < decided_after_pairs
        c = SimpleNamespace(undecided=undecided, verdict=SimpleNamespace(value="inconclusive" if undecided else "unchanged"))
        return {"m.py::t": SimpleNamespace(comparison=c, options=SimpleNamespace(confirm=1))}, [], []

    monkeypatch.setattr(ab_results_module, "ab_results", fake_results)
    monkeypatch.setattr(ab_results_module, "needs_more_pairs", lambda c: c.undecided)


def test_a_regression_is_confirmed_once_not_measured_up_to_the_bound(monkeypatch, tmp_path) -> None:
    FakeCoordinator.instances.clear()
    monkeypatch.setattr(ab_run, "Coordinator", FakeCoordinator)
    regressed = SimpleNamespace(verdict=SimpleNamespace(value="regressed"))
    monkeypatch.setattr(ab_results_module, "ab_results", lambda coordinator, label: (
        {"m.py::t": SimpleNamespace(comparison=regressed, options=SimpleNamespace(confirm=1))}, [], []))
    monkeypatch.setattr(ab_results_module, "needs_more_pairs", lambda c: True)  # regressed: confirm
    ab_run.measure_ab({}, [], 1, tmp_path, "REF", max_pairs=6, why=False)
    (c,) = FakeCoordinator.instances
    assert c.calls == [("run", 1), ("confirm", ["m.py::t"], 1)]  # the confirmation, then decided
    # issue 32: with `why` (the default), a benchmark that comes out regressed is then profiled on both sides
    ab_run.measure_ab({}, [], 1, tmp_path, "REF")
    assert FakeCoordinator.instances[-1].calls[-1] == ("profile", ["m.py::t"], ab_run.PROFILE_PAIRS)


@pytest.mark.parametrize("decided_after, max_pairs, pairs_run", [
    (1, 6, 1),     # decided by the first pair: nothing more
    (2, 6, 2),     # the confirmation round decides
    (4, 6, 4),     # two more pairs, one at a time
    (99, 6, 6),    # never decides: stops at the bound
    (99, None, 2), # --gpuperf-ab: one confirmation round only
])
def test_more_pairs_until_decided_or_the_bound(monkeypatch, tmp_path, decided_after, max_pairs, pairs_run):
    _install(monkeypatch, decided_after)
    ab_run.measure_ab({}, [], 1, tmp_path, "REF", max_pairs=max_pairs)
    (c,) = FakeCoordinator.instances
    assert c.processes + c.confirmed_pairs == pairs_run
    assert all(call[2] == 1 for call in c.calls if call[0] == "confirm")


@pytest.mark.parametrize("named_after_first_pairs, calls", [
    (True, [("profile", ["m.py::t"], ab_run.PROFILE_PAIRS)]),
    (False, [("profile", ["m.py::t"], ab_run.PROFILE_PAIRS), ("profile", ["m.py::t"], ab_run.MORE_PROFILE_PAIRS)]),
])
def test_a_diff_that_names_no_op_is_profiled_in_more_pairs(monkeypatch, tmp_path, named_after_first_pairs,
                                                           calls) -> None:
    """docs/why.md: with 3 pairs one process's allocator mode could hide a 2x larger op; a diff that
    names nothing gets 2 more pairs (then one of 5 may disagree), a diff that names an op none."""
    FakeCoordinator.instances.clear()
    monkeypatch.setattr(ab_run, "Coordinator", FakeCoordinator)
    regressed = SimpleNamespace(verdict=SimpleNamespace(value="regressed"))
    result = SimpleNamespace(comparison=regressed, options=SimpleNamespace(confirm=0), op_diff=None)
    monkeypatch.setattr(ab_results_module, "ab_results", lambda coordinator, label: ({"m.py::t": result}, [], []))
    monkeypatch.setattr(ab_results_module, "needs_more_pairs", lambda c: False)

    def with_op_diff(r, m, label):
        c = FakeCoordinator.instances[-1]
        pairs = sum(call[2] for call in c.calls if call[0] == "profile")
        named = named_after_first_pairs or pairs > ab_run.PROFILE_PAIRS
        return SimpleNamespace(**{**vars(r), "op_diff": SimpleNamespace(named=("aten::x",) if named else (), pairs=pairs)})

    monkeypatch.setattr(ab_run, "with_op_diff", with_op_diff)
    out = ab_run.measure_ab({}, [], 1, tmp_path, "REF")
    assert FakeCoordinator.instances[-1].calls[1:] == calls
    assert out.results["m.py::t"].op_diff.named == ("aten::x",)
    assert out.results["m.py::t"].op_diff.pairs == (ab_run.PROFILE_PAIRS if named_after_first_pairs
                                                    else ab_run.PROFILE_PAIRS + ab_run.MORE_PROFILE_PAIRS)


def test_the_ab_that_confirms_stored_comparisons_times_only_and_profiles_its_regressions(monkeypatch, tmp_path) -> None:
    # issue 45: its workers make no extra calls (memory, counts, bottleneck stay the stored run's) and
    # an improvement is not profiled; --gpuperf-ab (not confirming) does both
    FakeCoordinator.instances.clear()
    monkeypatch.setattr(ab_run, "Coordinator", FakeCoordinator)

    def moved(verdict: str, ratio: float) -> SimpleNamespace:
        return SimpleNamespace(comparison=SimpleNamespace(verdict=SimpleNamespace(value=verdict), ratio=ratio),
                               options=SimpleNamespace(confirm=0))

    monkeypatch.setattr(ab_results_module, "ab_results", lambda coordinator, label: (
        {"m.py::slow": moved("regressed", 1.3), "m.py::fast": moved("improved", 0.5)}, [], []))
    monkeypatch.setattr(ab_results_module, "needs_more_pairs", lambda c: False)
    ab_run.measure_ab({}, [], 2, tmp_path, "REF", confirming=True)
    c = FakeCoordinator.instances[-1]
    assert c.extras is False and c.calls[-1] == ("profile", ["m.py::slow"], ab_run.PROFILE_PAIRS)
    ab_run.measure_ab({}, [], 2, tmp_path, "REF")
    c = FakeCoordinator.instances[-1]
    assert c.extras is True and c.calls[-1] == ("profile", ["m.py::fast", "m.py::slow"], ab_run.PROFILE_PAIRS)


def test_the_time_for_settling_bounds_the_first_pair_and_the_confirmation_but_not_the_regressions(
        monkeypatch, tmp_path) -> None:
    # --gpuperf-settle-time: the first pair's share of it (seconds / (pairs + 0.5)) is its deadline, the
    # regressions to confirm are measured whatever the time, and once the time is spent a CI that
    # straddles 1 + T gets no confirmation pair; a regression still does
    _install(monkeypatch, 99)  # never decided: every result would want more pairs
    out = ab_run.measure_ab({}, [], 2, tmp_path, "REF", only={"m.py::t", "m.py::u"}, confirming=True,
                            settle_s=(50.0, {"m.py::u"}))
    (c,) = FakeCoordinator.instances
    assert c.deadline == (20.0, frozenset({"m.py::u"})) and c.calls == [("run", 2)]  # inconclusive: no confirmation
    assert out.skipped == frozenset()
    FakeCoordinator.instances.clear()
    regressed = SimpleNamespace(verdict=SimpleNamespace(value="regressed"))
    monkeypatch.setattr(ab_results_module, "ab_results", lambda coordinator, label: (
        {"m.py::u": SimpleNamespace(comparison=regressed, options=SimpleNamespace(confirm=1))}, [], []))
    monkeypatch.setattr(ab_results_module, "needs_more_pairs", lambda c: True)  # regressed: confirm
    ab_run.measure_ab({}, [], 2, tmp_path, "REF", only={"m.py::u"}, confirming=True, why=False,
                      settle_s=(50.0, {"m.py::u"}))
    assert FakeCoordinator.instances[-1].calls == [("run", 2), ("confirm", ["m.py::u"], 1)]


def test_the_first_pair_starts_no_benchmark_past_its_deadline_but_the_ones_it_must_measure() -> None:
    c = ab_run.Coordinator({}, [], 2, __import__("pathlib").Path("."))
    c.only, c.deadline = {"a", "b", "must"}, (10.0, frozenset({"must"}))
    assert not c._late(0, "a") and c.only == {"a", "b", "must"}  # within the time
    c._started -= 11.0
    assert c._late(0, "a") and c.only == {"b", "must"} and c.skipped == {"a"}
    assert not c._late(0, "must") and not c._late(1, "b")  # always measured; later pairs measure what the first did
    c.deadline = None
    assert not c._late(0, "b")


def test_no_why_is_profiled_where_the_op_profile_holds_no_torch_op(monkeypatch, tmp_path) -> None:
    """Issue 45: a pure-Python benchmark's op profile has no torch op (pydantic-core, cattrs), so an
    op-by-op diff cannot name one: one whose stored profile says so is not profiled at all (its
    ``op diff`` says why), and one whose first profiling pairs found no op on either side gets no
    more pairs; a benchmark with ops is profiled as before."""
    from pytest_gpuperf.core.containment import OP_DIFF
    from pytest_gpuperf.verdict.opdiff import OP_FREE

    FakeCoordinator.instances.clear()
    monkeypatch.setattr(ab_run, "Coordinator", FakeCoordinator)
    regressed = SimpleNamespace(verdict=SimpleNamespace(value="regressed"), ratio=1.3)

    def result():
        return SimpleNamespace(comparison=regressed, options=SimpleNamespace(confirm=0), op_diff=None, unavailable={},
                               replace=lambda **kw: SimpleNamespace(**{**vars(result()), **kw}))

    monkeypatch.setattr(ab_results_module, "ab_results", lambda coordinator, label: (
        {"m.py::python": result(), "m.py::torch": result(), "m.py::stored_free": result()}, [], []))
    monkeypatch.setattr(ab_results_module, "needs_more_pairs", lambda c: False)
    free, ops = [{"self_ms": {}, "counts": {}, "total_ms": 0.1}], [{"self_ms": {"aten::add": 0.1}, "counts": {}}]
    monkeypatch.setattr(FakeCoordinator, "measured", {
        "m.py::python": SimpleNamespace(profiles={"A": free, "B": free}),
        "m.py::torch": SimpleNamespace(profiles={"A": ops, "B": ops})})
    monkeypatch.setattr(ab_run, "with_op_diff", lambda r, m, label: SimpleNamespace(
        **{**vars(r), "op_diff": SimpleNamespace(named=())}))
    out = ab_run.measure_ab({}, [], 2, tmp_path, "REF", confirming=True, op_free=frozenset({"m.py::stored_free"}))
    c = FakeCoordinator.instances[-1]
    assert c.calls[1:] == [("profile", ["m.py::python", "m.py::torch"], ab_run.PROFILE_PAIRS),
                           ("profile", ["m.py::torch"], ab_run.MORE_PROFILE_PAIRS)]
    assert out.results["m.py::stored_free"].unavailable[OP_DIFF].error == OP_FREE
    assert out.results["m.py::stored_free"].op_diff is None
