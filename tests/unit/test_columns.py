"""80 columns everywhere (issue 47, item 5): the legend explains the columns shown and every mark,
a failure's first line fits 80 columns in every mode, the mode header fits the width, and names
are cut at their separators. Pure: no sessions (tests/test_columns_e2e.py runs them)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pytest_gpuperf.core.units import shorten_name
from pytest_gpuperf.reporting import report
from pytest_gpuperf.reporting.messages import (FIRST_LINE_WIDTH, comparison_message, fit_first_line, labelled,
                                               with_straggler)
from pytest_gpuperf.reporting.terminal import Row, SessionSummary, summary
from pytest_gpuperf.verdict.compare import ABEvidence, Comparison, Verdict

BID = "tests/models/test_matmul_variants.py::test_tmul_chain_of_eight_matrices_in_bfloat16[large-batch]"


def _comparison(**fields) -> Comparison:
    base = dict(verdict=Verdict.INCONCLUSIVE, benchmark_id=BID, current_median_ms=693.6123, baseline_median_ms=461.7,
                ratio=1.4623, median_ratio=1.4623, ratio_ci=(1.3912, 1.5234), p_slower=0.002, clock="cpu",
                baseline_file="baselines/cpu-amd-epyc/tests__models__test_matmul_variants.json")
    return Comparison(**{**base, **fields})


@pytest.mark.parametrize("mode", ["stored", "processes", "set aside", "A/B", "A/B long ref"])
def test_a_failures_first_line_fits_80_columns_in_every_mode(mode: str) -> None:
    fields = {
        "stored": {},
        "processes": dict(processes=12, baseline_processes=12, resolution=0.05, run_sd=0.01, clock="wall"),
        "set aside": dict(processes=3, baseline_processes=3, resolution=0.05, run_sd=0.01, clock="wall",
                          note="this run's process 3 of 3 set aside: a slow period"),
        "A/B": dict(ab=ABEvidence("main (3f2a1c9)", pairs=8, process_ratios=(1.4, 1.5)), runs=2, clock="wall"),
        "A/B long ref": dict(ab=ABEvidence("origin/feature/a-rather-long-branch-name (3f2a1c9)", pairs=8,
                                           process_ratios=(1.4, 1.5)), runs=2),
    }[mode]
    if mode in ("processes", "set aside", "A/B"):  # room for the aside
        fields.update(verdict=Verdict.REGRESSED, current_median_ms=2.0, baseline_median_ms=1.0)
    message = comparison_message(_comparison(**fields))
    first = message.splitlines()[0]
    assert len(first) <= FIRST_LINE_WIDTH and " 1.462x [1.391x, 1.523x]: " in first, first
    aside = {"processes": " (12 processes)", "set aside": " (2 of 3 processes)", "A/B": " (A/B vs main (3f2a1c9))",
             "A/B long ref": " (A/B)", "stored": ""}[mode]
    assert first.endswith("ms" + aside), first  # the real counts; a long ref left to the evidence line
    if mode == "A/B long ref":
        assert "A/B vs origin/feature/a-rather-long-branch-name (3f2a1c9)" in message.splitlines()[1]


def test_a_straggler_goes_under_a_first_line_it_would_push_past_80_columns() -> None:
    straggler = SimpleNamespace(rank=1, median_ms=3.1, others_ms=2.2)
    r = SimpleNamespace(ranks=SimpleNamespace(straggler=lambda: straggler))
    short = with_straggler("regressed 1.46x\n  evidence", r)
    assert short.splitlines()[0] == "regressed 1.46x: rank 1 is the straggler (median 3.1 ms vs 2.2 ms on the others)"
    message = comparison_message(_comparison(clock="wall"))
    moved = with_straggler(message, r).splitlines()
    assert moved[0] == message.splitlines()[0] and moved[1].startswith("  rank 1 is the straggler")


def test_fit_first_line_cuts_outside_parentheses_and_labelled_puts_the_reason_first() -> None:
    text = "memory regressed +100.0%: 1.000 MiB -> 2.000 MiB, allowed +10% + 1.000 MiB (the peak varies, a lot)"
    assert fit_first_line(text) == ("memory regressed +100.0%: 1.000 MiB -> 2.000 MiB\n"
                                    "  allowed +10% + 1.000 MiB (the peak varies, a lot)")  # not in the aside
    long = "counts unavailable: RuntimeError: this function refuses to run under a dispatch mode; max_ops=1 needs it"
    assert fit_first_line(long).splitlines()[0] == ("counts unavailable: RuntimeError: this function refuses to run "
                                                    "under a dispatch")  # no clause ends within 80: a space
    assert fit_first_line("short\n  evidence") == "short\n  evidence"
    assert fit_first_line("x" * 90) == "x" * 90  # nowhere to cut: whole
    got = labelled(BID, "expected compute-bound, measured overhead-bound: device busy 23% of 4.1 ms; 1,840 kernels")
    assert got.splitlines() == ["expected compute-bound, measured overhead-bound: device busy 23% of 4.1 ms",
                                f"  {BID}", "  1,840 kernels"]


def _result(comparison: Comparison | None, **fields):
    from pytest_gpuperf.verdict.result import BenchResult

    return BenchResult.from_samples([1.0, 1.1, 1.2, 1.05], name="t", device="cpu", rounds=4, calls_per_round=1,
                                    warmup_calls=0, benchmark_id=comparison.benchmark_id if comparison else "t",
                                    comparison=comparison, **fields)


def test_the_legend_explains_only_the_columns_shown_and_every_mark() -> None:
    c = _comparison(verdict=Verdict.UNCHANGED, note="host busy: decided on CPU time")
    items = [(BID, _result(c), True), ("tests/a.py::test_b", _result(_comparison(clock="wall", note=None)), False)]
    wide = report.summary_lines(items)
    text = report.legend("stored", wide)
    for part in ("baseline = median of the stored runs' medians", "ratio = median / baseline", "CPU = ",
                 "ops/kern, syncs = ", "FLOP/s, B/s = ", "a verdict 'on CPU time'", "* = a note"):
        assert part in text, part
    assert "[upd] = " not in text  # the full form "(baseline updated)" needs no footnote
    narrow = report.summary_lines(items, width=60)
    header = report.table_headers(narrow)
    assert header == {"name", "median", "ratio", "verdict"}, narrow  # the baseline went last
    text = report.legend("stored", narrow)
    assert "baseline = " not in text and "CPU = " not in text and "FLOP/s" not in text and "ops/kern" not in text
    assert "ratio = median / baseline" in text and "[upd] = baseline updated" in text
    assert "a verdict 'on CPU time' ([cpu])" in text and any("[cpu]" in ln for ln in narrow)
    assert report.legend("stored", narrow, columns=False).startswith("a verdict 'on CPU time'")
    assert report.legend("replicates", wide).startswith("median = geometric mean")
    assert "rows with [CI]" not in report.legend("replicates", wide)  # no A/B-confirmed row
    confirmed = report.format_table([("t", "1.0 ms", "1.12x [1.08x, 1.16x]", "regressed")],
                                    ("name", "median", "ratio", "verdict"), ())
    assert report.legend("replicates", confirmed).endswith(report.CONFIRMED_CI_NOTE)
    assert report.legend("ab", wide).startswith("A/B: median = of B's (the working tree's) samples; baseline = ")
    assert report.LEGEND.startswith("baseline = ") and "Hodges-Lehmann" in report.LEGEND


@pytest.mark.parametrize("cell", ["regressed, counts regressed", "unchanged, misclassified (host busy: not trusted)",
                                  "unchanged* on CPU time (baseline updated)", "no-baseline, over max_memory",
                                  "inconclusive (machine differs: +12%)", "regressed, below min_scaling_efficiency"])
def test_every_compact_verdict_mark_has_its_footnote(cell: str) -> None:
    compact = report.compact_verdict(cell)
    assert len(compact) < len(cell)
    lines = report.format_table([("t", compact)], ("name", "verdict"), ())
    notes = report.legend("stored", lines, columns=False)
    import re

    marks = {r"\w\+\w": "a+b (compact verdict)", "?": "misclassified? = ", "[cpu]": "([cpu])", "[upd]": "[upd] = ",
             "^new": "new = no baseline", "(machine +": "(machine +N%) = ", "*": "* = a note"}
    for mark, note in marks.items():
        found = re.search(mark, compact) if mark.startswith(("^", "\\")) else mark in compact
        assert (note in notes) is bool(found), (mark, compact, notes)


def test_the_baseline_outlives_a_long_verdict_cell_at_80_columns() -> None:
    header = ("name", "median", "baseline", "ratio", "verdict")
    rows = [(BID, "996.1 µs", "498.0 µs", "2.000x", "regressed, misclassified (host busy: not trusted)"),
            ("tests/a.py::test_b", "1.002 ms", "996.1 µs", "1.006x", "unchanged* on CPU time")]
    lines = report.fit_table(rows, header, {"median", "baseline", "ratio"}, 80, [r[0] for r in rows])
    assert max(map(len, lines)) <= 80 and "baseline" in lines[0], lines
    assert "regressed+misclassified?" in lines[2] and lines[3].startswith("tests/a.py::test_b ")


def test_names_are_cut_at_their_separators_keeping_the_test_id() -> None:
    assert shorten_name("tests/a.py::test_b", 70) == "tests/a.py::test_b"
    name = "tests/models/test_matmul_variants.py::test_tmul_chain"
    assert shorten_name(name, 40) == "tests/models/test_...test_tmul_chain"
    assert shorten_name(name, 24) == "tests/...test_tmul_chain"
    for width in range(24, len(name)):
        cut = shorten_name(name, width)
        assert len(cut) <= width and cut.endswith("tmul_chain"), (width, cut)
    assert shorten_name("x" * 100, 30) == report.shorten_middle("x" * 100, 30)  # no separator: the middle


@pytest.mark.parametrize("summary_input", [
    dict(updating=True, world_size=2),  # torchrun
    dict(replicated=True, processes=1, world_size=2),  # --gpuperf-nproc
    dict(replicated=True, processes=3),
    dict(),  # one process
    dict(ab_label="origin/feature/a-rather-long-branch-name-for-the-ab-run (3f2a1c9)", ab_processes=2),
])
def test_the_mode_header_fits_80_columns(summary_input: dict) -> None:
    rows = [Row(f"m.py::test_{i}", _result(None)) for i in range(4)]
    lines = summary(SessionSummary(rows=rows, width=80, **summary_input))
    sep = lines[0]
    assert sep[0] == "sep" and len(sep[1]) + 4 <= 80 and sep[1].startswith("gpuperf: 4 benchmark(s), mode: ")
    assert all(len(text) <= 80 for _, text, _ in lines), lines
    wide = summary(SessionSummary(rows=rows, width=None, **summary_input))[0][1]
    assert " ".join(text for _, text, _ in lines[:3]).startswith(wide[:60])  # the same words, wrapped
    if "world_size" in summary_input and not summary_input.get("replicated"):
        assert wide == ("gpuperf: 4 benchmark(s), mode: update baselines (torchrun: 2 ranks in step; a round = "
                        "the slowest rank's)")
