"""Why as a tree (issue 47, item 2) on scripted nested profiles: the op the benchmark called is
named with its whole cost and what ran inside it under it (never as causes of their own), the
shares add to 100% with the other ops and the time outside ops written out, ×N is explained, and a
profile stored before the tree was kept still loads and diffs (by self time)."""

from __future__ import annotations

import random
import re
from types import SimpleNamespace

import pytest

from pytest_gpuperf.verdict.opdiff import (OpDiff, OpSample, compact_profile, diff_against_stored, diff_profiles,
                                           percent_shares, table, why_line)

#: top-level op -> {inner op -> self ms per call} (the op itself: its own self time); per call counts
TREE = {"aten::sort": {"aten::sort": 0.3, "aten::copy_": 0.2, "aten::arange": 0.1},
        "aten::mm": {"aten::mm": 1.0}, "aten::softmax": {"aten::softmax": 0.1, "aten::_softmax": 0.3}}
COUNTS = {"aten::sort": 3, "aten::copy_": 7, "aten::arange": 6}


def nested(seed: int, tree: dict[str, dict[str, float]] = TREE, *, cycles: int = 8, processes: int = 2,
           cv: float = 0.03, outside: float = 0.1) -> list[OpSample]:
    """Cycles of one side with the profiler's tree: each inner op's self time with multiplicative
    noise, a top-level op's total the sum of its parts, the call's total the tops plus ``outside``."""
    rng = random.Random(seed)
    factors = [1 + rng.gauss(0, cv / 2) for _ in range(processes)]
    out = []
    for i in range(cycles):
        proc = i % processes
        tree_ms, tree_counts, self_ms, counts = {}, {}, {}, {}
        for top, inner in tree.items():
            n_top = COUNTS.get(top, 1)
            for op, ms in inner.items():
                t = ms * factors[proc] * max(0.5, 1 + rng.gauss(0, cv))
                tree_ms[f"{top} > {op}"] = t
                tree_counts[f"{top} > {op}"] = COUNTS.get(op, 1)
                self_ms[op] = self_ms.get(op, 0.0) + t
                counts[op] = counts.get(op, 0) + COUNTS.get(op, 1)
            tree_ms[top] = sum(v for k, v in tree_ms.items() if k.startswith(top + " > "))
            tree_counts[top] = n_top
        total = sum(tree_ms[t] for t in tree) + outside
        out.append(OpSample(self_ms, counts, total, process=proc, tree_ms=tree_ms, tree_counts=tree_counts))
    return out


GROWN = dict(TREE, **{"aten::sort": {"aten::sort": 0.6, "aten::copy_": 0.6, "aten::arange": 0.4}})


def shares_in(line: str) -> list[int]:
    return [int(x) for x in re.findall(r"(-?\d+)% of the slowdown", line)] + [
        int(x) for x in re.findall(r"ops [+-][^(;]+\((-?\d+)%\)", line)]


def test_the_op_called_is_named_with_its_whole_cost_and_its_children_under_it() -> None:
    d = diff_profiles(nested(1), nested(2, GROWN), whole_ms=(2.1, 3.0))  # +0.9 ms: sort +0.3 self, +0.4, +0.3 inside
    assert d.tree and [c.name for c in d.named] == ["aten::sort"]  # copy_ and arange are no causes of their own
    sort = d.named[0]
    assert sort.shift_ms == pytest.approx(1.0, rel=0.1) and sort.a_count == 3
    assert {c.name for c in d.ops} == {"aten::sort", "aten::mm", "aten::softmax"}  # top-level only
    inside = {c.name: c for c in d.inside}
    assert inside["aten::sort > aten::copy_"].shift_ms == pytest.approx(0.4, rel=0.15)
    assert inside["aten::sort > aten::copy_"].status == "slower" and inside["aten::sort > aten::copy_"].b_count == 7
    assert inside["aten::sort > aten::sort"].shift_ms == pytest.approx(0.3, rel=0.15)
    # the accounting: named + other ops + outside ops = the whole change, exactly
    assert d.named_ms + d.new_ms + d.removed_ms + d.other_ms + d.outside_ms == pytest.approx(d.total_shift_ms)
    assert d.rest_ms == pytest.approx(d.other_ms + d.outside_ms)
    line = why_line(d)
    assert line.startswith("why: aten::sort ×3 +") and ", of which self +" in line
    assert "inside: aten::copy_ ×7 +" in line and "aten::arange ×6 +" in line
    assert "; rest: other ops " in line and ", outside ops " in line
    assert line.endswith("; ×N: calls per benchmark call")
    assert sum(shares_in(line)) == 100  # the sort's whole cost exceeds the timed change: the rest says by how much
    assert "aten::copy_" not in line.split("inside:")[0]
    text = table(d)
    rows = text.splitlines()
    at = next(i for i, r in enumerate(rows) if r.startswith("| aten::sort ×3 |"))
    assert rows[at + 1].startswith("| └ ") and any(r.startswith("| └ aten::copy_ ×7 |") for r in rows)
    assert "| └ self ×3 |" in text and "other ops " in rows[-1] and "outside ops " in rows[-1]
    assert OpDiff.from_dict(d.to_dict()) == d


@pytest.mark.parametrize("seed", range(10))
def test_shares_add_to_100_percent_in_every_line(seed: int) -> None:
    d = diff_profiles(nested(300 + seed), nested(400 + seed, GROWN), whole_ms=(2.1, 2.1 + 0.5 + seed / 10))
    assert d.named and sum(shares_in(why_line(d))) == 100


def test_percent_shares_round_to_exactly_100() -> None:
    assert percent_shares([1.0, 1.0, 1.0], 3.0) == [34, 33, 33]
    assert percent_shares([1.17, -0.1, -0.07], 1.0) == [117, -10, -7]
    assert sum(percent_shares([0.333, 0.333, 0.334], 1.0)) == 100
    with pytest.raises(ValueError, match="no change"):
        percent_shares([1.0], 0.0)


def test_a_profile_without_the_tree_diffs_by_self_time_and_an_old_report_reads() -> None:
    b = nested(6, GROWN)
    flat_a = [OpSample(s.self_ms, s.counts, s.total_ms, process=s.process) for s in nested(5)]
    d = diff_profiles(flat_a, b, whole_ms=(2.1, 3.0))
    assert not d.tree and d.inside == () and "aten::copy_" in {c.name for c in d.ops}
    assert sum(shares_in(why_line(d))) == 100
    old = d.to_dict()
    for k in ("tree", "inside", "other_ms", "outside_ms"):
        old.pop(k)
    assert why_line(OpDiff.from_dict(old)).split("; ")[-2].startswith("rest ")  # a report written before


def test_a_stored_profile_keeps_the_tree_and_an_old_one_still_loads() -> None:
    stored = compact_profile(nested(7))
    cycle = stored["cycles"][0]
    assert "aten::sort" in cycle["tree_ms"] and "aten::sort > aten::copy_" in cycle["tree_ms"]
    assert cycle["tree_counts"]["aten::sort > aten::copy_"] == 7 and len(str(stored)) < 8000
    d = diff_against_stored(stored, nested(8, GROWN), whole_ms=(2.1, 3.0), source="the baseline's op profile")
    assert d.tree and [c.name for c in d.named] == ["aten::sort"]
    old = {"floor_ms": stored["floor_ms"], "cycles": [{k: v for k, v in c.items() if not k.startswith("tree")}
                                                      for c in stored["cycles"]]}
    flat = diff_against_stored(old, nested(8, GROWN), whole_ms=(2.1, 3.0), source="an old baseline")
    assert not flat.tree and flat.named and why_line(flat).endswith("[against an old baseline]")


def test_fold_tree_on_profiler_events() -> None:
    from pytest_gpuperf.measure.opprofile import fold_tree

    cpu = SimpleNamespace(name="CPU")

    def ev(name: str, self_us: float, total_us: float, parent: object = None) -> SimpleNamespace:
        return SimpleNamespace(name=name, self_cpu_time_total=self_us, cpu_time_total=total_us, cpu_parent=parent,
                               device_type=cpu)

    step = ev("ProfilerStep#1", 1, 1000)
    region = ev("gpuperf::region", 1, 900, step)
    sort = ev("aten::sort", 300, 700, region)
    arange = ev("aten::arange", 50, 100, sort)
    events = [step, region, sort, ev("aten::copy_", 300, 300, sort), arange, ev("aten::arange", 50, 50, arange),
              ev("aten::add", 100, 100, region), SimpleNamespace(name="gemm", device_type=SimpleNamespace(name="CUDA"))]
    tree, counts = fold_tree(events, calls=2)
    assert tree == pytest.approx({"aten::sort": 0.35, "aten::sort > aten::sort": 0.15, "aten::sort > aten::copy_": 0.15,
                                  "aten::sort > aten::arange": 0.05, "aten::add": 0.05, "aten::add > aten::add": 0.05})
    assert counts["aten::sort > aten::arange"] == 1.0 and counts["aten::sort"] == 0.5
    # 20 calls of one sort each: exactly 1 a call (not 20 × 1/20), so the line shows no "×1"
    many = [ev("aten::sort", 300, 700, region) for _ in range(20)]
    assert fold_tree(many, calls=20)[1]["aten::sort"] == 1.0


def test_a_leaf_op_is_named_alone_without_parts() -> None:
    d = diff_profiles(nested(9), nested(10, dict(TREE, **{"aten::mm": {"aten::mm": 2.0}})), whole_ms=(2.1, 3.1))
    assert [c.name for c in d.named] == ["aten::mm"]
    line = why_line(d)
    assert line.startswith("why: aten::mm +") and "of which" not in line and "×N" not in line
    assert "└" not in table(d) and sum(shares_in(line)) == 100
