"""End-to-end: process-level replicates (``--gpuperf-processes``, issue 21).

Every benchmark is measured in P worker processes; the baseline stores each process's median, and
the gate decides on the spread between processes, not on pooled rounds. Timings are scripted
(tests/scripted.py), per worker process too (``process_factors``: a process-level speed mode), so
every verdict here is the same on any machine. Each inner run starts P worker processes that import
torch (seconds each), so the tests keep P and the number of runs small: most compare against one
baseline of two benchmarks recorded by the real update path once per test process (``pair``), and
where one session can show two behaviours, its two benchmarks show one each.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
from pathlib import Path

import pytest

from pytest_gpuperf.core import allocator
from scripted import SUITE_BASE, SUITE_CURRENT, script_timings, set_timings

pytest_plugins = ["pytester"]

# more processes for thin evidence (issue 31) are off unless a test asks for them, and so is the op
# profile of a verdict that moved (2 more processes; tested in tests/test_why_e2e.py): each adds processes
RUN = ("-p", "no:cacheprovider", "--gpuperf-max-processes=1", "--gpuperf-no-why")

BENCH = """
import pytest

@pytest.mark.gpu_bench(device="cpu", counts=False)
def test_loop(gpu_bench):
    gpu_bench.pedantic(sum, args=(range(100),), rounds=30, warmup_rounds=2)
"""
#: The probe follows each process's speed mode (``process_factors`` scale both): the reference
#: clock's level (rounds over probe) is 2.0 in every process.
RECORDED = {"ms": 1.0, "cv": 0.02, "process_factors": [1.0, 1.03, 0.98], "probe": {"ms": 0.5, "cv": 0.0}}
#: An inner conftest that records every baseline file write (its file name, one per line).
COUNT_WRITES = """
import os
import pytest_gpuperf.storage.baseline as _baseline

_update = _baseline.update

def _counted(path, *args, **kwargs):
    with open(os.path.join(os.path.dirname(__file__), "writes.txt"), "a") as f:
        f.write(os.path.basename(str(path)) + "\\n")
    return _update(path, *args, **kwargs)

_baseline.update = _counted

def pytest_unconfigure(config):  # the inner session shares this process's modules: put it back
    _baseline.update = _update
"""
#: Two benchmarks, the baseline most tests compare against (:func:`pair`): a session shows one
#: behaviour with each where it can (per-test timings), instead of running twice.
PAIR = BENCH + BENCH.replace("test_loop", "test_other")


def _record(pytester: pytest.Pytester, processes: int = 2, bench: str = PAIR) -> dict:
    """Record ``bench``'s baselines from :data:`RECORDED` by the update run in ``processes`` worker
    processes (its outcome and mode line checked): the stored benchmarks by name."""
    pytester.makepyfile(test_bench=bench)
    script_timings(pytester, RECORDED, conftest=COUNT_WRITES)
    before = {k: os.environ.get(k) for k in allocator.FIXED}
    rec = pytester.runpytest("--gpuperf-update-baselines", f"--gpuperf-processes={processes}", *RUN)
    rec.assert_outcomes(passed=bench.count("def test_"))
    rec.stdout.fnmatch_lines([f"*mode: update baselines ({processes} worker processes per benchmark)*"])
    (path,) = pytester.path.joinpath("baselines").rglob("*.json")
    # the tests' baselines are written once per file at the session's end, not once per test
    # (issue 45: per-test writes of a 5 MB file took 95 s of a real suite's 159 s update run)
    assert pytester.path.joinpath("writes.txt").read_text().split() == [path.name]
    stored = json.loads(path.read_text())["benchmarks"]
    # the worker processes ran with glibc's thresholds fixed (a value set here stands), the
    # session's own process and its tests with the environment they started with
    assert {e["environment"]["allocator"] for e in stored.values()} == {allocator.describe({**allocator.FIXED,
                                                                                             **os.environ})}
    assert {k: os.environ.get(k) for k in allocator.FIXED} == before
    return stored


@pytest.fixture(scope="module")
def recorded() -> dict[str, Path]:
    """A copy of :data:`PAIR`'s recorded ``baselines/`` folder, once per test process (see :func:`pair`)."""
    return {}


def _keep(pytester: pytest.Pytester, recorded: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> None:
    if "pair" not in recorded:
        copy = tmp_path_factory.mktemp("replicates-recorded") / "baselines"
        shutil.copytree(pytester.path / "baselines", copy)
        recorded["pair"] = copy


@pytest.fixture
def pair(pytester: pytest.Pytester, recorded: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> None:
    """:data:`PAIR` in ``test_bench.py`` with the scripted measurer and its baselines, recorded by
    the real update run (:func:`_record`: two worker processes, :data:`RECORDED`) in the first test
    of this process that asks, and copied from that run into the others' folders."""
    if "pair" in recorded:
        pytester.makepyfile(test_bench=PAIR)
        script_timings(pytester, RECORDED)
        shutil.copytree(recorded["pair"], pytester.path / "baselines")
    else:
        _record(pytester)
        _keep(pytester, recorded, tmp_path_factory)


def _benchmarks(pytester: pytest.Pytester, report: str = "r.json") -> dict:
    return json.loads(pytester.path.joinpath(report).read_text())["benchmarks"]


def test_baseline_stores_each_process_median_and_an_aa_rerun_passes_with_one_slow_process(
        pytester: pytest.Pytester, recorded: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> None:
    stored = _record(pytester)  # always the real update run here, whatever the other tests copied
    _keep(pytester, recorded, tmp_path_factory)
    assert sorted(stored) == ["test_loop", "test_other"]
    for entry in stored.values():
        medians = entry["process_medians_ms"]
        assert len(medians) == 2 and entry["history"][-1]["process_medians_ms"] == medians
        assert medians[1] > medians[0]  # the scripted process modes (1.0, then 1.03), in process order
        assert entry["rounds"] == 60  # 30 rounds in each of the 2 processes
        # the reference clock (issue 45): each process's rounds over the probe beside them
        assert entry["ref_medians"] == pytest.approx([2.0, 2.0], rel=0.03) == entry["history"][-1]["ref_medians"]
    # A/A in 3 processes, no code change: other process modes (test_loop), the processes' spread
    # decides, nothing fails. In test_other one of the three processes lands in a 25% slower mode:
    # its thousands of rounds would make a pooled rank test say p ~ 0; over process medians it is
    # one replicate of three, not a regression.
    set_timings(pytester, {"ms": 1.0, "cv": 0.02, "seed": 7, "process_factors": [1.02, 0.99, 1.01]},
                test_other={"ms": 1.0, "cv": 0.02, "seed": 3, "process_factors": [1.0, 1.25, 1.0]})
    rec = pytester.runpytest("--gpuperf", "--gpuperf-processes=3", "--gpuperf-no-ab-confirm", "--gpuperf-json=r.json",
                             *RUN)
    rec.assert_outcomes(passed=2)
    benchmarks = _benchmarks(pytester)
    loop, other = (benchmarks[f"test_bench.py::{n}"]["comparison"] for n in ("test_loop", "test_other"))
    assert loop["verdict"] in ("unchanged", "inconclusive")
    assert other["verdict"] != "regressed" and other["ratio_ci"][0] < 1.0
    # issue 45: the 3rd process only for what the first 2 left open. test_loop passed decided on 2
    # (its upper bound under 1 + T: a 3rd process could not fail it); test_other's 2 processes
    # disagree by 25%, so the 3rd measures it alone, and the slow one is set aside among 3.
    assert (loop["processes"], other["processes"]) == (2, 3)
    assert all(c["baseline_processes"] == 2 for c in (loop, other))
    # progress (issue 24): each worker process says when it is done, the time elapsed and about how long is left
    rec.stdout.fnmatch_lines(["gpuperf: measuring in 3 worker processes in turn (--gpuperf-processes), the last "
                              "only for what the first 2 leave open",
                              "gpuperf: worker process 1/2 done (2 benchmark(s), * s elapsed, about * s left)",
                              "gpuperf: 1 of 2 benchmark(s) decided passing after 2 worker processes; measuring the "
                              "other 1 in worker process 3/3",
                              "gpuperf: worker process 3/3 done (1 benchmark(s), * s elapsed)"])
    last = pytester.path.joinpath(".gpuperf", "replicates", "select-last.txt").read_text().split()
    assert last == ["test_bench.py::test_other"]


def test_slower_code_in_every_process_fails_with_one_median_and_ratio_on_every_surface(
        pytester: pytest.Pytester, pair: None, capsys: pytest.CaptureFixture) -> None:
    # test_loop's code is 30% slower in all 3 processes, and the third also ran in a slow period of
    # the machine (set aside); test_other's is unchanged (and passes)
    same = {"ms": 1.0, "cv": 0.02, "process_factors": [1.0, 1.02, 1.0]}
    set_timings(pytester, same, test_loop=dict(same, ms=1.3, process_factors=[1.0, 1.02, 1.4]))
    rec = pytester.runpytest("--gpuperf", "--gpuperf-processes=3", "--gpuperf-no-ab-confirm", "--gpuperf-json=r.json",
                             "--gpuperf-markdown=r.md", "--junitxml=j.xml", "--gpuperf-history=h.sqlite", *RUN)
    rec.assert_outcomes(failed=1, passed=1)
    rec.stdout.fnmatch_lines(["regressed 1.*x [[]*]: median * -> * (2 of 3 processes)",  # the reason first, the real count
                              "  test_bench.py::test_loop: 1.*x*geometric mean of 2 of 3 process "
                              "medians*Student t over process medians*"])
    # One median and one ratio wherever they are shown (issue 47): computed once in the verdict
    # layer, shown by the terminal table, the message, JSON, Markdown, JUnit, the history, the
    # dashboard, `gpuperf show` and `gpuperf compare`.
    import xml.etree.ElementTree as ET

    from pytest_gpuperf.cli.reports import main
    from pytest_gpuperf.core.units import format_ms, format_ratio
    from pytest_gpuperf.storage.history import HistoryStore

    e = json.loads(pytester.path.joinpath("r.json").read_text())["benchmarks"]["test_bench.py::test_loop"]
    c = e["comparison"]
    assert c["verdict"] == "regressed" and c["processes"] == 3
    median, base, ratio = e["estimate_ms"], c["baseline_median_ms"], c["shown_ratio"]
    assert median == c["current_median_ms"] and ratio == c["ratio"]
    assert ratio == pytest.approx(median / base)  # the ratio is its medians' ratio
    pms = e["process_medians_ms"]
    assert median == pytest.approx((pms[0] * pms[1]) ** 0.5)  # the slow third process set aside
    assert format_ms(e["stats"]["median_ms"]) != format_ms(median)  # the pooled median is another statistic
    shown = (format_ms(median), format_ratio(ratio), format_ms(base))
    assert f"median {shown[2]} -> {shown[0]}" in c["message"].splitlines()[0] and shown[1] in c["message"]
    table = [ln for ln in rec.stdout.lines if ln.startswith("test_bench.py::test_loop ")]
    assert table and all(x in table[0] for x in shown) and "regressed" in table[0]
    md = pytester.path.joinpath("r.md").read_text()
    md_row = next(ln for ln in md.splitlines() if "`test_bench.py::test_loop`" in ln)
    assert all(f"| {x} " in md_row for x in shown[::2]) and f"| {shown[1]} (" in md_row
    assert "| baseline (process medians) |" in md and "history median" not in md
    (case,) = [t for t in ET.parse(pytester.path / "j.xml").iter("testcase") if t.get("name") == "test_loop"]
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert float(props["median_ms"]) == pytest.approx(median) and float(props["ratio"]) == pytest.approx(ratio)
    assert float(props["pooled_median_ms"]) == pytest.approx(e["stats"]["median_ms"])
    with HistoryStore(str(pytester.path / "h.sqlite"), read_only=True) as store:
        (row,) = store.series("test_bench.py::test_loop")
    assert row["estimate_ms"] == pytest.approx(median) and row["ratio"] == pytest.approx(ratio)
    rec.stdout.fnmatch_lines(["*mode: compare (3 worker processes per benchmark; 1 decided on 2)*",
                              "median = geometric mean of this run's per-process medians*"])
    assert "stored runs' medians" not in rec.stdout.str()
    (baseline,) = pytester.path.joinpath("baselines").rglob("*.json")
    capsys.readouterr()
    assert main(["compare", str(baseline), str(pytester.path / "r.json")]) == 1
    compared = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("test_bench.py::test_loop ")]
    assert compared and all(x in compared[0] for x in shown) and "regressed" in compared[0]
    assert main(["show", str(pytester.path / "baselines")]) == 0  # the baseline's median as its verdict read it
    listed = [ln for ln in capsys.readouterr().out.splitlines() if ln.lstrip().startswith("test_loop ")]
    assert listed and shown[2] in listed[0]
    if importlib.util.find_spec("plotly") is not None:
        from pytest_gpuperf.cli import main as gpuperf

        assert gpuperf(["dashboard", "--history", str(pytester.path / "h.sqlite"), "--out", str(pytester.path / "site")]) == 0
        (page,) = [p for p in pytester.path.joinpath("site", "bench").glob("*.html") if "test_loop" in p.name]
        data = re.search(r'id="gp-data">(.*?)</script>', page.read_text(encoding="utf-8"), re.S)
        assert data is not None and json.loads(data.group(1))["runs"]["median"] == [pytest.approx(median, rel=1e-5)]


def test_process_speed_modes_cancel_on_the_reference_clock_and_slower_code_still_fails(
        pytester: pytest.Pytester, pair: None, capsys: pytest.CaptureFixture[str]) -> None:
    # issue 45: this project's VM runs whole processes 1.5-2x slower for a while; the probe timed
    # beside the rounds (the reference clock) slows with them. Both benchmarks' processes land in
    # modes of 0.75x-1.45x, the probe in the same mode, which leaves the wall clock inconclusive:
    # test_loop's code is unchanged (unchanged on the reference clock), test_other's 30% slower
    # (regressed on it: it fails, with no A/B to confirm it here).
    probe = {"ms": 0.5, "cv": 0.0}
    set_timings(pytester, {"ms": 1.0, "cv": 0.02, "probe": probe, "process_factors": [1.45, 0.8, 1.3]},
                test_other={"ms": 1.3, "cv": 0.02, "probe": probe, "process_factors": [1.0, 0.75, 1.2]})
    rec = pytester.runpytest("--gpuperf", "--gpuperf-processes=3", "--gpuperf-no-ab-confirm", "--gpuperf-json=r.json",
                             *RUN)
    rec.assert_outcomes(failed=1, passed=1)
    benchmarks = _benchmarks(pytester)
    loop, other = (benchmarks[f"test_bench.py::{n}"] for n in ("test_loop", "test_other"))
    assert (loop["comparison"]["verdict"], loop["comparison"]["clock"]) == ("unchanged", "ref"), loop["comparison"]
    assert (other["comparison"]["verdict"], other["comparison"]["clock"]) == ("regressed", "ref"), other["comparison"]
    assert other["comparison"]["ratio"] == pytest.approx(1.3, rel=0.05)
    for entry in (loop, other):
        assert "decided on the wall clock relative to the reference probe" in entry["comparison"]["note"]
        assert "wall clock inconclusive" in entry["comparison"]["note"]
    assert (len(loop["ref_medians"]), len(other["ref_medians"])) == (2, 3)  # the 3rd process: only what is open
    rec.stdout.fnmatch_lines(["regressed 1.*x*speed-normalized median*",
                              "*test_other*relative to the reference probe*"])
    from pytest_gpuperf.cli.reports import main  # gpuperf compare reads the two files the same way

    capsys.readouterr()
    (path,) = pytester.path.joinpath("baselines").rglob("*.json")
    assert main(["compare", str(path), str(pytester.path / "r.json")]) == 1  # test_other fails
    rows = {n: ln for ln in capsys.readouterr().out.splitlines() for n in ("test_loop", "test_other")
            if ln.startswith(f"test_bench.py::{n} ")}
    assert "unchanged" in rows["test_loop"] and "regressed" in rows["test_other"], rows


def test_a_crashed_or_raising_worker_fails_its_benchmarks_names_why_and_stores_nothing(
        pytester: pytest.Pytester) -> None:
    # one update run shows both ways a worker can leave a benchmark without its result: the second
    # worker process dies in test_crash, and test_raises raises in the first one only
    bench = BENCH + """

def flaky_setup():
    import sys
    if '"replicate": "0/' in " ".join(sys.argv):  # the first worker process (its --gpuperf-role)
        raise RuntimeError("Converting a tensordict to boolean value is not permitted")

def test_raises(gpu_bench):
    flaky_setup()
    gpu_bench.pedantic(sum, args=(range(10),), rounds=10, warmup_rounds=1)

def test_crash(gpu_bench):
    import os, sys
    if '"replicate": "1/' in " ".join(sys.argv):  # the second worker process (its --gpuperf-role)
        os._exit(3)  # the second worker process dies here
    gpu_bench.pedantic(sum, args=(range(10),), rounds=10, warmup_rounds=1)
"""
    pytester.makepyfile(test_bench=bench)
    script_timings(pytester, RECORDED)
    rec = pytester.runpytest("--gpuperf-update-baselines", "--gpuperf-processes=2", *RUN)
    # test_crash and test_raises failed; test_loop (and test_raises, by the second worker) was measured
    # before the crash
    rec.assert_outcomes(failed=2, passed=1)
    out = rec.stdout.str()
    assert "test_bench.py::test_crash: measured by 1 of 2 worker processes: worker process 2/2 exited with code 3" in out
    assert "nothing is compared or stored from a partial set of replicates" in out
    (path,) = pytester.path.joinpath("baselines").rglob("*.json")
    assert sorted(json.loads(path.read_text())["benchmarks"]) == ["test_loop"]
    # issue 31: the message says why the worker has no result (type, message, the user's frame),
    # not only where its log is; the session's summary gives the whole time, workers included
    assert ("test_bench.py::test_raises: measured by 1 of 2 worker processes (worker 1 did not report it: its test "
            "raised RuntimeError: Converting a tensordict to boolean value is not permitted (at ") in out
    assert "test_bench.py:" in out and "in flaky_setup" in out
    rec.stdout.fnmatch_lines(["gpuperf: the session took * s in all, * s of it in worker processes before the tests*"])


def test_an_inconclusive_benchmark_gets_more_processes_and_decides(pytester: pytest.Pytester, pair: None) -> None:
    # issue 31: after the first P processes, a comparison whose CI straddles 1 and 1 + threshold is
    # measured in more worker processes (two at a time, only its tests) and decided on all of them.
    # test_loop: 30% slower, the processes' modes spread: inconclusive on 3, regressed on 5;
    # issue 45: test_other, 25% slower, modes spread so widely (1.0, 1.25, 0.8) that by the spread of
    # its first 3 processes even 5 could not decide it: no process is started for it; it stays
    # inconclusive (which passes) and its note says why
    set_timings(pytester, {"ms": 1.3, "cv": 0.01, "process_factors": [1.0, 1.08, 0.93, 1.04, 0.97]},
                test_other={"ms": 1.25, "cv": 0.01, "process_factors": [1.0, 1.25, 0.8, 1.0, 1.0]})
    rec = pytester.runpytest("--gpuperf", "--gpuperf-no-ab-confirm", "--gpuperf-processes=3", "--gpuperf-json",
                             "r.json", *RUN, "--gpuperf-max-processes=5")
    rec.assert_outcomes(failed=1, passed=1)
    rec.stdout.fnmatch_lines([
        "gpuperf: 1 benchmark(s) inconclusive after 3 worker processes not measured in more worker processes: by "
        "their spread so far, even 5 processes (--gpuperf-max-processes, within --gpuperf-more-processes-time) could "
        "not decide them*",
        "*gpuperf: 1 benchmark(s) inconclusive after 3 worker processes: measuring them in 2 more*",
        "*worker process 5/5 done (1 benchmark(s)*",
        "*regressed 1.*5 proc*",  # "(5 processes)", or "(4 of 5 processes)" with one set aside
        "*geometric mean of 5 process medians*",
        "*processes each decision used: test_bench.py::test_loop (5); 1 benchmark(s) inconclusive not measured*"])
    # the header gives the real counts (issue 47: it said 3 when more ran)
    rec.stdout.fnmatch_lines(["*mode: compare (3 worker processes per benchmark; 1 measured in up to 5)*"])
    benchmarks = _benchmarks(pytester)
    loop, other = benchmarks["test_bench.py::test_loop"], benchmarks["test_bench.py::test_other"]
    assert len(loop["process_medians_ms"]) == 5 and loop["verdict"] == "regressed"
    assert len(other["process_medians_ms"]) == 3 and other["verdict"] == "inconclusive"
    assert "more worker processes cannot decide it: at 5 processes" in other["comparison"]["note"]
    # the processes added may take as long as the first 3 took, by default (before the first is added
    # that allows 3 more, whatever the machine's speed); with no time for them, none is started
    rec = pytester.runpytest("--gpuperf", "--gpuperf-no-ab-confirm", "--gpuperf-processes=3", "--gpuperf-json",
                             "r.json", *RUN, "--gpuperf-max-processes=5", "--gpuperf-more-processes-time=0.001")
    rec.assert_outcomes(passed=2)
    rec.stdout.fnmatch_lines(["gpuperf: 2 benchmark(s) inconclusive after 3 worker processes not measured in more "
                              "worker processes: the time for them (--gpuperf-more-processes-time) had run out*"])
    assert "worker process 4/" not in rec.stdout.str()
    loop = _benchmarks(pytester)["test_bench.py::test_loop"]
    assert len(loop["process_medians_ms"]) == 3 and loop["verdict"] == "inconclusive"
    assert "the time for them (--gpuperf-more-processes-time) had run out" in loop["comparison"]["note"]


SUITE = """
import pytest

@pytest.mark.gpu_bench(device="cpu", counts=False)
@pytest.mark.parametrize("i", range(12))
def test_p(gpu_bench, i):
    gpu_bench.pedantic(sum, args=(range(100),), rounds=20, warmup_rounds=1)
"""


def test_each_benchmark_is_read_with_the_suites_spread_and_gets_no_process_that_cannot_help(
        pytester: pytest.Pytester) -> None:
    # issue 45: twelve benchmarks whose process medians spread about 1% (tests/scripted.py's
    # SUITE_BASE, recorded in 2 processes, and SUITE_CURRENT, 3). test_p[0]'s own spread on its first
    # 2 processes came out 3.2%: inconclusive alone; with the suite's spread as Smyth's prior its
    # one-sided bound is under 1+T, so it passes unchanged on those 2 and no process is added for it. test_p[1] (+30%) still fails on its
    # own evidence, replicated in 2 more processes (no A/B to confirm it); test_p[2] (+4%, as wide)
    # stays inconclusive, and gets no process either: by its spread, even 5 could not decide it.
    # (At a 5% threshold, as the scenario was built: the CPU's default is 10%, which test_p[0]'s own
    # spread already decides.)
    pytester.makepyfile(test_bench=SUITE)
    script_timings(pytester, **{f"test_p[{i}]": {"ms": 1.0, "cv": 0.002, "process_factors": list(f)}
                                for i, f in enumerate(SUITE_BASE)})
    pytester.runpytest("--gpuperf-update-baselines", "--gpuperf-processes=2", *RUN).assert_outcomes(passed=12)
    set_timings(pytester, **{f"test_p[{i}]": {"ms": 1.0, "cv": 0.002, "process_factors": list(f)}
                             for i, f in enumerate(SUITE_CURRENT)})
    rec = pytester.runpytest("--gpuperf", "--gpuperf-processes=3", "--gpuperf-no-ab-confirm", "--gpuperf-json=r.json",
                             *RUN, "--gpuperf-max-processes=5", "--gpuperf-threshold=0.05")
    rec.assert_outcomes(passed=11, failed=1)
    benchmarks = _benchmarks(pytester)
    p0, p1, p2 = (benchmarks[f"test_bench.py::test_p[{i}]"] for i in range(3))
    assert p0["verdict"] == "unchanged" and len(p0["process_medians_ms"]) == 2  # decided on the first 2
    assert "with the spread moderated by this run's 12 benchmarks (SD of log process medians 3.2% -> " \
           in p0["comparison"]["note"]
    assert p1["verdict"] == "regressed" and len(p1["process_medians_ms"]) == 5
    assert p2["verdict"] == "inconclusive" and len(p2["process_medians_ms"]) == 3
    assert "more worker processes cannot decide it: at 5 processes" in p2["comparison"]["note"]
    rec.stdout.fnmatch_lines(["*1 regressed with no A/B against the baselines' commit to confirm it after 3 worker "
                              "processes: measuring them in 2 more*"])


TWO = """
import pytest

@pytest.mark.gpu_bench(device="cpu", counts=False)
def test_wide(gpu_bench):
    gpu_bench(sum, range(100))

@pytest.mark.gpu_bench(device="cpu", counts=False)
def test_steady(gpu_bench):
    gpu_bench(sum, range(100))
"""


def test_a_process_times_a_benchmark_no_finer_than_the_spread_between_processes(pytester: pytest.Pytester) -> None:
    # issue 45 (verdict/allocation.py): a process median's own error is what its rounds shrink, and
    # it is worth shrinking only to well under the spread between processes. test_wide's processes
    # differ by about 24% (1.0, 1.3, 0.8), test_steady's by 1%; each round's noise is 5%. Recorded
    # with no baseline, both time their whole max_time / 3 in each process (the default 0.5% early
    # stop is finer than 5% noise allows in 1/3 s). Compared against that baseline, test_wide's
    # processes stop once their median is within 2.5% (a quarter of the 10% threshold): a tenth
    # of the rounds; test_steady's keep the 0.5% aim. Neither regresses.
    pytester.makepyfile(test_bench=TWO)
    noisy = {"ms": 1.0, "cv": 0.05}
    script_timings(pytester, test_wide=dict(noisy, process_factors=[1.0, 1.3, 0.8]),
                   test_steady=dict(noisy, process_factors=[1.0, 1.01, 0.99]))
    pytester.runpytest("--gpuperf-update-baselines", "--gpuperf-processes=3", *RUN).assert_outcomes(passed=2)
    (path,) = pytester.path.joinpath("baselines").rglob("*.json")
    stored = json.loads(path.read_text())["benchmarks"]
    assert stored["test_wide"]["rounds"] == pytest.approx(stored["test_steady"]["rounds"], rel=0.1)
    rec = pytester.runpytest("--gpuperf", "--gpuperf-processes=3", "--gpuperf-no-ab-confirm", "--gpuperf-json=r.json",
                             *RUN)
    rec.assert_outcomes(passed=2)
    wide, steady = (_benchmarks(pytester)[f"test_bench.py::{n}"] for n in ("test_wide", "test_steady"))
    def per_process(entry: dict) -> float:  # a benchmark decided passing on 2 processes has no 3rd
        return entry["rounds"] / len(entry["process_medians_ms"])

    assert per_process(steady) == pytest.approx(stored["test_steady"]["rounds"] / 3, rel=0.1)
    assert per_process(wide) < per_process(steady) / 5, (wide["rounds"], steady["rounds"])
    assert "regressed" not in (wide["verdict"], steady["verdict"])


def test_a_stored_regression_is_replicated_in_later_processes_before_it_fails(pytester: pytest.Pytester,
                                                                               pair: None,
                                                                               capsys: pytest.CaptureFixture) -> None:
    # issue 31: with no A/B to confirm it (here --gpuperf-no-ab-confirm), a regression decided on the
    # first processes is measured again in processes started after the decision. A slowdown of the
    # host that covers only the first 2 processes then passes (test_loop); one that holds in the
    # later ones fails (test_other).
    compare = ("--gpuperf", "--gpuperf-no-ab-confirm", "--gpuperf-processes=2", "--gpuperf-json=r.json", *RUN)
    set_timings(pytester, {"ms": 1.0, "cv": 0.01, "process_factors": [1.25, 1.26, 1.24, 1.25]},
                test_loop={"ms": 1.0, "cv": 0.01, "process_factors": [1.25, 1.26, 1.0, 1.01]})
    # (with --gpuperf-max-processes 1, as in the other tests here, no later process: a regression stands)
    rec = pytester.runpytest(*compare, "--gpuperf-max-processes=4")
    rec.assert_outcomes(failed=1, passed=1)
    rec.stdout.fnmatch_lines(["*gpuperf: 2 regressed with no A/B against the baselines' commit to confirm it after 2 "
                              "worker processes: measuring them in 2 more*",
                              "*regressed 1.2*4 proc*"])
    benchmarks = _benchmarks(pytester)
    loop, other = benchmarks["test_bench.py::test_loop"], benchmarks["test_bench.py::test_other"]
    assert len(loop["process_medians_ms"]) == 4 and loop["verdict"] in ("inconclusive", "unchanged")
    assert len(other["process_medians_ms"]) == 4 and other["verdict"] == "regressed"
    # The machine check (issue 45): each timed worker times the reference workloads before its first
    # benchmark (scripted here, reference.json); the baseline stores their median over its processes.
    # When both read 25% slower in every process, a 1.25x "regression" is what the machine's
    # own slowdown explains (inconclusive, not trusted); a 1.6x one is beyond it and fails.
    (path,) = pytester.path.joinpath("baselines").rglob("*.json")
    stored = json.loads(path.read_text())["benchmarks"]["test_loop"]["environment"]["reference"]
    assert (stored["matmul_ms"], stored["copy_ms"]) == (1.0, 1.0)
    pytester.path.joinpath("reference.json").write_text(json.dumps({"matmul_ms": 1.25, "copy_ms": 1.25}))
    set_timings(pytester, {"ms": 1.0, "cv": 0.01, "process_factors": [1.25, 1.26]},
                test_other={"ms": 1.6, "cv": 0.01})
    rec = pytester.runpytest(*compare, "--gpuperf-max-processes=2")
    rec.assert_outcomes(failed=1, passed=1)
    benchmarks = _benchmarks(pytester)
    loop, other = benchmarks["test_bench.py::test_loop"], benchmarks["test_bench.py::test_other"]
    assert loop["verdict"] == "inconclusive" and other["verdict"] == "regressed"
    assert loop["comparison"]["note"].startswith("machine differs: reference workloads matmul +25%, copy +25% "
                                                 "(session-start, median of this run's worker processes")
    assert "is within what the machine's own slowdown (x1.25) explains" in loop["comparison"]["note"]
    assert loop["environment"]["reference"]["copy_ms"] == 1.25
    rec.stdout.fnmatch_lines(["*machine speed drift since the baseline was recorded*copy +25.0%*"])
    assert "--gpuperf-normalize" not in rec.stdout.str()  # single-process mode's correction: not offered here
    from pytest_gpuperf.cli.reports import main  # gpuperf compare reads the two files the same way

    capsys.readouterr()
    assert main(["compare", str(path), str(pytester.path / "r.json")]) == 1  # test_other still fails
    out = capsys.readouterr().out
    assert "machine differs: reference workloads matmul +25%, copy +25%" in out
    rows = {n: ln for ln in out.splitlines() for n in ("test_loop", "test_other")
            if ln.startswith(f"test_bench.py::{n} ")}
    assert "inconclusive" in rows["test_loop"] and "regressed" in rows["test_other"]


def test_a_cpu_time_regression_is_read_against_the_cpus_own_speed(pytester: pytest.Pytester,
                                                                  capsys: pytest.CaptureFixture[str],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # The machine check of a verdict decided on CPU time (issue 45): with one core busy, this
    # project's VM once ran every cattrs benchmark's thread CPU time about 2x its baseline's (16 of
    # 64 false failures: the CPU itself slower, not only the core taken away). Each timed worker
    # times a pure-Python loop's thread CPU time at session start (scripted: reference.json). On a
    # busy host, a 1.25x CPU-time "regression" while that loop reads 1.3x is inconclusive (machine
    # differs); a 2x one is beyond it and fails. The baseline was recorded with gpuperf_allocator =
    # inherit (glibc's adaptive thresholds), the rerun at the default: the verdicts say so.
    for name in allocator.FIXED:
        monkeypatch.delenv(name, raising=False)
    pytester.makepyfile(test_bench=PAIR)
    script_timings(pytester, {**RECORDED, "cpu": {"share": 1.0}})
    pytester.runpytest("--gpuperf-update-baselines", "--gpuperf-processes=2", "-o", "gpuperf_allocator=inherit",
                       *RUN).assert_outcomes(passed=2)
    (path,) = pytester.path.joinpath("baselines").rglob("*.json")
    stored = json.loads(path.read_text())["benchmarks"]["test_loop"]["environment"]
    assert (stored["reference"]["python_cpu_ms"], stored["allocator"]) == (1.0, allocator.ADAPTIVE)
    data = json.loads(path.read_text())  # test_loop's entry as a baseline recorded before the thresholds were fixed
    del data["benchmarks"]["test_loop"]["environment"]["allocator"]
    path.write_text(json.dumps(data))
    pytester.path.joinpath("reference.json").write_text(json.dumps({"python_cpu_ms": 1.3}))
    busy = {"cv": 0.01, "seed": 3, "host_load": 0.98, "machine": {"every": 7, "factors": [1.0, 3.0, 1.5, 2.5]}}
    set_timings(pytester, dict(busy, ms=1.25, cpu={"ms": 1.25, "cv": 0.01, "seed": 3}),  # the neighbour's bursts
                test_other=dict(busy, ms=2.0, cpu={"ms": 2.0, "cv": 0.01, "seed": 3}))  # stretch the wall clock only
    rec = pytester.runpytest("--gpuperf", "--gpuperf-processes=2", "--gpuperf-no-ab-confirm", "--gpuperf-json=r.json",
                             *RUN)
    benchmarks = _benchmarks(pytester)
    rec.assert_outcomes(failed=1, passed=1)
    loop, other = benchmarks["test_bench.py::test_loop"]["comparison"], benchmarks["test_bench.py::test_other"]["comparison"]
    assert (loop["verdict"], loop["clock"]) == ("inconclusive", "cpu"), loop["message"]
    assert loop["note"].startswith("machine differs: reference CPU time +30% (a pure-Python loop's, session-start, "
                                   "median of this run's worker processes, now/baseline)"), loop["note"]
    assert (other["verdict"], other["clock"]) == ("regressed", "cpu"), other["message"]
    assert benchmarks["test_bench.py::test_loop"]["environment"]["reference"]["python_cpu_ms"] == 1.3
    fixed = allocator.describe(dict(allocator.FIXED))
    warnings = json.loads(pytester.path.joinpath("r.json").read_text())["warnings"]
    assert (f"test_bench.py::test_other: environment differs from the baseline's: allocator {allocator.ADAPTIVE} -> "
            f"{fixed}") in warnings
    # the entry that records no thresholds: one line for its file, saying what to do (no per-benchmark note)
    unrecorded = [w for w in warnings if "record no allocator thresholds" in w]
    assert unrecorded == [f"{path.relative_to(pytester.path)}: its baselines record no allocator thresholds (recorded "
                          f"before pytest-gpuperf fixed glibc's in the processes that time; now {fixed}): allocation-heavy "
                          "benchmarks may read faster than recorded; record them again with --gpuperf-update-baselines"]
    assert not any(w.startswith("test_bench.py::test_loop: environment differs") for w in warnings), warnings
    # gpuperf compare reads the two files the same way: the share of CPU time in the wall time from
    # the report's rounds (as the plugin read them), the decision over the process medians
    from pytest_gpuperf.cli.reports import main

    capsys.readouterr()
    assert main(["compare", str(path), str(pytester.path / "r.json")]) == 1  # test_other fails
    out = capsys.readouterr().out
    assert "machine differs: reference CPU time +30%" in out, out
    rows = {n: ln for ln in out.splitlines() for n in ("test_loop", "test_other")
            if ln.startswith(f"test_bench.py::{n} ")}
    assert "inconclusive" in rows["test_loop"] and "regressed" in rows["test_other"], out


def test_a_single_process_baseline_counts_its_runs_as_replicates(pytester: pytest.Pytester) -> None:
    # A baseline recorded before --gpuperf-processes (one process per run, three runs) still loads:
    # its runs' medians are the replicates; a 30% slower run in two processes fails.
    pytester.makepyfile(test_bench=BENCH)
    script_timings(pytester, {"ms": 1.0, "cv": 0.02})
    for seed in (1, 2, 3):
        set_timings(pytester, {"ms": 1.0 * (1 + 0.01 * seed), "cv": 0.02, "seed": seed})
        pytester.runpytest("--gpuperf-update-baselines", "--gpuperf-processes=1", *RUN).assert_outcomes(passed=1)
    (path,) = pytester.path.joinpath("baselines").rglob("*.json")
    entry = json.loads(path.read_text())["benchmarks"]["test_loop"]
    assert "process_medians_ms" not in entry and len(entry["history"]) == 3
    set_timings(pytester, {"ms": 1.3, "cv": 0.02})
    rec = pytester.runpytest("--gpuperf", "--gpuperf-processes=2", "--gpuperf-no-ab-confirm", *RUN)
    rec.assert_outcomes(failed=1)
    rec.stdout.fnmatch_lines(["*geometric mean of 2 process medians*of the baseline's 3*"])


@pytest.mark.parametrize("listing", ["--collect-only", "--setup-plan"])
def test_a_session_that_runs_no_test_starts_no_worker_and_writes_no_baseline(pytester: pytest.Pytester,
                                                                             listing: str) -> None:
    """``pytest --gpuperf --collect-only`` lists the benchmarks at once: on a real torch suite it
    had started all the worker processes (107 s for tensordict's 28 benchmarks); an update that runs
    no test writes no baseline."""
    pytester.makepyfile(test_bench=PAIR)
    for mode in ("--gpuperf-update-baselines", "--gpuperf"):
        rec = pytester.runpytest(mode, "--gpuperf-processes=3", listing, *RUN)
        assert rec.ret == pytest.ExitCode.OK
        assert "worker process" not in rec.stdout.str()
        rec.stdout.fnmatch_lines(["*test_loop*", "*test_other*"])
    assert not pytester.path.joinpath("baselines").exists()


def test_processes_option_is_checked(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_bench=BENCH)
    rec = pytester.runpytest("--gpuperf", "--gpuperf-processes=0", *RUN)
    assert rec.ret == pytest.ExitCode.USAGE_ERROR
    rec.stderr.fnmatch_lines(["*--gpuperf-processes '0': expected an integer >= 1*"])
    rec = pytester.runpytest("--gpuperf", "-o", "gpuperf_allocator=adaptive", *RUN)
    assert rec.ret == pytest.ExitCode.USAGE_ERROR
    rec.stderr.fnmatch_lines(["*ini gpuperf_allocator = 'adaptive': expected one of fixed, inherit*"])


def test_replicates_under_xdist_are_measured_once_and_merged_and_the_marker_limits_the_workers(
        pytester: pytest.Pytester) -> None:
    # The controller runs the worker processes before pytest-xdist starts its own; the xdist workers
    # pick up the finished results (nothing is measured twice) and the controller merges them.
    # The same session shows the marker's processes option: test_once is measured by the first
    # worker process only (the marker limits the workers that measure a benchmark).
    pytester.makepyfile(test_bench=PAIR + """

@pytest.mark.gpu_bench(device="cpu", counts=False, processes=1)
def test_once(gpu_bench):
    gpu_bench.pedantic(sum, args=(range(10),), rounds=10, warmup_rounds=1)
""")
    script_timings(pytester, RECORDED)
    rec = pytester.runpytest_subprocess("--gpuperf-update-baselines", "--gpuperf-processes=2", "-n", "2", *RUN)
    rec.assert_outcomes(passed=3)
    rec.stdout.fnmatch_lines(["*worker process 1/2 done (3 benchmark(s)*", "*worker process 2/2 done (2 benchmark(s)*",
                              "*results of 2 worker(s) merged*"])
    (path,) = pytester.path.joinpath("baselines").rglob("*.json")
    stored = json.loads(path.read_text())["benchmarks"]
    assert sorted(stored) == ["test_loop", "test_once", "test_other"]
    assert all(len(stored[n]["process_medians_ms"]) == 2 and stored[n]["rounds"] == 60
               for n in ("test_loop", "test_other"))
    assert stored["test_once"]["process_medians_ms"] == [pytest.approx(stored["test_once"]["stats"]["median_ms"])]
    assert stored["test_once"]["rounds"] == 10  # the second worker ran test_once without measuring it


#: An inner conftest that makes pytest's terminal reporter say it writes to a terminal and keeps the
#: lines it rewrote in place (the raw "\r" of a rewrite does not survive pytester's line splitting).
TTY_CONFTEST = """
import json

@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    tr = config.pluginmanager.getplugin("terminalreporter")
    tr.isatty = lambda: True
    config._rewritten = []
    rewrite = tr.rewrite
    def recording(line, **markup):
        config._rewritten.append(line.rstrip())
        rewrite(line, **markup)
    tr.rewrite = recording

def pytest_unconfigure(config):
    with open("rewritten.json", "w") as f:
        json.dump(config._rewritten, f)
"""


def test_on_a_terminal_worker_progress_is_one_line_rewritten_in_place(pytester: pytest.Pytester) -> None:
    """Issue 24: on a terminal the workers' progress rewrites one line (each benchmark a worker
    finished, then each worker done) instead of adding a line per step; the phase's first line stays."""
    pytester.makepyfile(test_bench=BENCH)
    script_timings(pytester, RECORDED, conftest=TTY_CONFTEST)
    rec = pytester.runpytest("--gpuperf", "--gpuperf-processes=2", *RUN)  # no baseline: a comparison run's workers
    rec.assert_outcomes(passed=1)
    rewritten = json.loads(pytester.path.joinpath("rewritten.json").read_text())
    done = [line for line in rewritten if "done" in line]
    assert [line.split(" (")[0] for line in done] == ["gpuperf: worker process 1/2 done",
                                                      "gpuperf: worker process 2/2 done"]
    rec.stdout.fnmatch_lines(["gpuperf: measuring in 2 worker processes in turn (--gpuperf-processes)"])
    # the finer steps, each benchmark a running worker finished (of the first worker's count, once known)
    assert "gpuperf: worker process 2/2: 1 of 1 benchmark(s) measured" in "\n".join(rewritten)


HUNG = """
import json
import sys
import time

import pytest

@pytest.mark.gpu_bench(device="cpu", counts=False)
def test_hangs(gpu_bench):
    role = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--gpuperf-role=")), None)
    if role and json.loads(role)["replicate"] == "0/2":
        time.sleep(600)  # worker 0 hangs
    gpu_bench.pedantic(sum, args=(range(100),), rounds=30, warmup_rounds=2)
"""


def test_a_hung_worker_is_stopped_after_the_worker_timeout(pytester: pytest.Pytester) -> None:
    # worker 0 hangs: it is stopped after --gpuperf-worker-timeout, the benchmark it did not report
    # fails with that reason, and the session goes on (worker 1, with its share of the extras after its
    # timing; worker 0's share, which it never started, in an extras process of its own) and ends
    pytester.makepyfile(test_bench=HUNG)
    script_timings(pytester, RECORDED)
    rec = pytester.runpytest("--gpuperf-update-baselines", "--gpuperf-processes=2", "--gpuperf-worker-timeout=8", *RUN)
    rec.assert_outcomes(failed=1)
    # (whether worker 0 reported it before it hung or not, worker 0 is stopped and the test fails)
    rec.stdout.fnmatch_lines(["*test_bench.py::test_hangs: measured by * of 2 worker processes: worker process 1/2 "
                              "timed out after 8 s and was stopped*"])
    rec.stdout.fnmatch_lines(["*worker process 2/2 done (1 benchmark(s), then their peak memory, counts, bottleneck*",
                              "*extras process 2/2 done (peak memory, counts, bottleneck*of 1 benchmark(s)*"])
    assert "extras process 1/2" not in rec.stdout.str()
    assert not list(pytester.path.joinpath("baselines").rglob("*.json"))  # nothing stored


@pytest.mark.parametrize("value", ["0", "-1", "soon"])
def test_worker_timeout_option_is_checked(pytester: pytest.Pytester, value: str) -> None:
    pytester.makepyfile(test_bench=BENCH)
    rec = pytester.runpytest("--gpuperf", f"--gpuperf-worker-timeout={value}", *RUN)
    assert rec.ret == pytest.ExitCode.USAGE_ERROR
    rec.stderr.fnmatch_lines([f"*--gpuperf-worker-timeout {value}: expected a number of seconds > 0*"])
    pytester.makeini(f"[pytest]\ngpuperf_worker_timeout = {value}\n")
    rec = pytester.runpytest("--gpuperf", *RUN)
    assert rec.ret == pytest.ExitCode.USAGE_ERROR
    rec.stderr.fnmatch_lines([f"*ini gpuperf_worker_timeout {value}: expected a number of seconds > 0*"])


def test_process_limits_and_ab_pairs_are_resolved_once_into_the_settings(pytester: pytest.Pytester) -> None:
    # command line over ini over the defaults (ProcessLimits); --gpuperf-ab-processes also gives the
    # A/B confirmation's pairs, with no --gpuperf-ab
    pytester.makepyfile(test_s="""
from pytest_gpuperf.plugin import session_of

def test_s(pytestconfig):
    s = session_of(pytestconfig).settings
    assert (s.limits.max_processes, s.limits.more_time_s, s.limits.worker_timeout_s) == (4, 60.0, 7.5)
    assert s.ab_processes == 1 and s.ab is None and (s.limits.why_max, s.limits.settle_time_s) == (3, 40.0)
""")
    pytester.makeini("[pytest]\ngpuperf_max_processes = 4\ngpuperf_more_processes_time = 60\n"
                     "gpuperf_worker_timeout = 99\ngpuperf_why_max = 3\ngpuperf_settle_time = 40\n")
    rec = pytester.runpytest("--gpuperf-worker-timeout=7.5", "--gpuperf-ab-processes=1", "-p", "no:cacheprovider")
    rec.assert_outcomes(passed=1)
    bad = pytester.runpytest("--gpuperf-why-max=some", "-p", "no:cacheprovider")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["*pytest-gpuperf: --gpuperf-why-max some: expected a whole number >= 0*"])


SEEDED = """
import os, random
import pytest

def test_plain():  # first: what the process's own random state gives
    with open(os.environ["DRAWN_LOG"], "a") as f:
        f.write(f"plain {os.getpid()} {random.random()!r}\\n")

@pytest.mark.gpu_bench(device="cpu", counts=False, max_time=0.02)
def test_draws(gpu_bench):
    gpu_bench(lambda: [random.random() for _ in range(10)])  # as many draws as its timing took

@pytest.fixture
def drawn():
    return random.random()

@pytest.mark.gpu_bench(device="cpu", counts=False, max_time=0.02)
def test_uses(gpu_bench, drawn):
    with open(os.environ["DRAWN_LOG"], "a") as f:
        f.write(f"{drawn!r}\\n")
    gpu_bench(sum, range(10))

"""


def test_every_benchmark_starts_from_its_own_seed_in_every_process(pytester: pytest.Pytester,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 45: a fixture's random input is the same in every run of the benchmark (2 timed
    workers, each then its extras pass, and the user's session), although the benchmark before it drew as
    many numbers as its timing took; a test that is no benchmark is left alone; --gpuperf-no-seed
    (passed on to the workers) turns it off. Real timing, only what cannot flip is asserted."""
    pytester.makepyfile(test_seed=SEEDED)
    log = pytester.path / "drawn.log"
    monkeypatch.setenv("DRAWN_LOG", str(log))
    pytester.runpytest("--gpuperf-update-baselines", "--gpuperf-processes=2", *RUN).assert_outcomes(passed=3)
    lines = log.read_text().splitlines()
    drawn = [ln for ln in lines if not ln.startswith("plain")]
    assert len(drawn) == 5 and len(set(drawn)) == 1, lines  # 2 workers, their 2 extras passes, the session
    first = {}  # not reseeded: each process's first draw its own (3 processes; the passes run it again)
    for pid, value in (ln.split()[1:] for ln in lines if ln.startswith("plain")):
        first.setdefault(pid, value)
    assert len(first) == 3 and len(set(first.values())) == 3, lines
    log.unlink()
    pytester.runpytest("--gpuperf-update-baselines", "--gpuperf-processes=2", "--gpuperf-no-seed",
                       *RUN).assert_outcomes(passed=3)
    drawn = [ln for ln in log.read_text().splitlines() if not ln.startswith("plain")]
    assert len(drawn) == 5 and len(set(drawn)) == 5
