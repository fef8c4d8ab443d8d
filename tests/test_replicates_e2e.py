"""End-to-end: process-level replicates (``--gpuperf-processes``, issue 21).

Every benchmark is measured in P worker processes; the baseline stores each process's median, and
the gate decides on the spread between processes, not on pooled rounds. Timings are scripted
(tests/scripted.py), per worker process too (``process_factors``: a process-level speed mode), so
every verdict here is the same on any machine. Each inner run starts P worker processes that import
torch, so the tests keep P and the number of runs small.
"""

from __future__ import annotations

import json

import pytest

from scripted import script_timings, set_timings

pytest_plugins = ["pytester"]

# more processes for thin evidence (issue 31) are off unless a test asks for them: each adds processes
RUN = ("-p", "no:cacheprovider", "--gpuperf-max-processes=1")

BENCH = """
import pytest

@pytest.mark.gpu_bench(device="cpu", counts=False)
def test_loop(gpu_bench):
    gpu_bench.pedantic(sum, args=(range(100),), rounds=30, warmup_rounds=2)
"""
RECORDED = {"ms": 1.0, "cv": 0.02, "process_factors": [1.0, 1.03, 0.98]}


def _record(pytester: pytest.Pytester, processes: int = 3, bench: str = BENCH) -> dict:
    pytester.makepyfile(test_bench=bench)
    script_timings(pytester, RECORDED)
    rec = pytester.runpytest("--gpuperf-update-baselines", f"--gpuperf-processes={processes}", *RUN)
    rec.assert_outcomes(passed=1)
    rec.stdout.fnmatch_lines([f"*mode: update baselines ({processes} worker processes per benchmark)*"])
    (path,) = pytester.path.joinpath("baselines").rglob("*.json")
    return json.loads(path.read_text())["benchmarks"]["test_loop"]


def test_baseline_stores_each_process_median_and_an_aa_rerun_passes(pytester: pytest.Pytester) -> None:
    entry = _record(pytester)
    medians = entry["process_medians_ms"]
    assert len(medians) == 3 and entry["history"][-1]["process_medians_ms"] == medians
    assert medians[1] > medians[0] > medians[2]  # the scripted process modes, in process order
    assert entry["rounds"] == 90  # 30 rounds in each of the 3 processes
    # A/A: other process modes, no code change: the processes' spread decides, nothing fails
    set_timings(pytester, {"ms": 1.0, "cv": 0.02, "seed": 7, "process_factors": [1.02, 0.99, 1.01]})
    rec = pytester.runpytest("--gpuperf", "--gpuperf-processes=3", "--gpuperf-json=r.json", *RUN)
    rec.assert_outcomes(passed=1)
    c = json.loads(pytester.path.joinpath("r.json").read_text())["benchmarks"]["test_bench.py::test_loop"]["comparison"]
    assert c["verdict"] in ("unchanged", "inconclusive")
    assert c["processes"] == 3 and c["baseline_processes"] == 3
    # progress (issue 24): each worker process says when it is done, the time elapsed and about how long is left
    rec.stdout.fnmatch_lines(["gpuperf: worker process 1/3 done (1 benchmark(s), * s elapsed, about * s left)",
                              "gpuperf: worker process 3/3 done (1 benchmark(s), * s elapsed)"])


def test_slower_code_in_every_process_fails_with_process_level_evidence(pytester: pytest.Pytester,
                                                                         capsys: pytest.CaptureFixture) -> None:
    _record(pytester, processes=2)
    set_timings(pytester, {"ms": 1.3, "cv": 0.02, "process_factors": [1.0, 1.02]})
    rec = pytester.runpytest("--gpuperf", "--gpuperf-processes=2", "--gpuperf-no-ab-confirm", "--gpuperf-json=r.json",
                             "--gpuperf-markdown=r.md", *RUN)
    rec.assert_outcomes(failed=1)
    rec.stdout.fnmatch_lines(["regressed 1.*x [[]*]: median * -> * (2 worker processes)",  # the reason first
                              "  test_bench.py::test_loop: 1.*x*geometric mean of 2 process "
                              "medians*Student t over process medians*"])
    # One verdict wherever it is shown (issue 21, item 5): the JSON, the Markdown, the terminal
    # table and `gpuperf compare` on the same baseline and report, with the same ratio.
    from pytest_gpuperf.cli.reports import main
    from pytest_gpuperf.core.units import format_ratio

    c = json.loads(pytester.path.joinpath("r.json").read_text())["benchmarks"]["test_bench.py::test_loop"]["comparison"]
    assert c["verdict"] == "regressed"
    ratio = format_ratio(c["ratio"])
    md = pytester.path.joinpath("r.md").read_text()
    assert f"| {ratio} (" in md  # median ratio = the gate's, here
    # the reports follow the mode (issue 24): process medians in the Markdown header and the legends
    assert "| baseline (process medians) |" in md and "history median" not in md
    rec.stdout.fnmatch_lines(["*mode: compare (2 worker processes per benchmark)*",
                              "median = geometric mean of this run's per-process medians; baseline = that of the*"])
    assert "stored runs' medians" not in rec.stdout.str()
    table = [ln for ln in rec.stdout.lines if ln.startswith("test_bench.py::test_loop ")]
    assert table and ratio in table[0] and "regressed" in table[0]
    (baseline,) = pytester.path.joinpath("baselines").rglob("*.json")
    capsys.readouterr()
    assert main(["compare", str(baseline), str(pytester.path / "r.json")]) == 1
    compared = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("test_bench.py::test_loop ")]
    assert compared and ratio in compared[0] and "regressed" in compared[0]


def test_one_slow_process_is_not_a_regression(pytester: pytest.Pytester) -> None:
    # One of three processes lands in a 25% slower mode: its thousands of rounds would make a pooled
    # rank test say p ~ 0; over process medians it is one replicate of three.
    _record(pytester)
    set_timings(pytester, {"ms": 1.0, "cv": 0.02, "seed": 3, "process_factors": [1.0, 1.25, 1.0]})
    rec = pytester.runpytest("--gpuperf", "--gpuperf-processes=3", "--gpuperf-no-ab-confirm", "--gpuperf-json=r.json",
                             *RUN)
    rec.assert_outcomes(passed=1)
    c = json.loads(pytester.path.joinpath("r.json").read_text())["benchmarks"]["test_bench.py::test_loop"]["comparison"]
    assert c["verdict"] != "regressed" and c["ratio_ci"][0] < 1.0


def test_a_crashed_worker_fails_its_benchmarks_and_stores_nothing(pytester: pytest.Pytester) -> None:
    bench = BENCH + """

def test_crash(gpu_bench):
    import os, sys
    if '"replicate": "1/' in " ".join(sys.argv):  # the second worker process (its --gpuperf-role)
        os._exit(3)  # the second worker process dies here
    gpu_bench.pedantic(sum, args=(range(10),), rounds=10, warmup_rounds=1)
"""
    pytester.makepyfile(test_bench=bench)
    script_timings(pytester, RECORDED)
    rec = pytester.runpytest("--gpuperf-update-baselines", "--gpuperf-processes=2", *RUN)
    rec.assert_outcomes(failed=1, passed=1)  # test_crash failed; test_loop was measured before the crash
    out = rec.stdout.str()
    assert "test_bench.py::test_crash: measured by 1 of 2 worker processes: worker process 2/2 exited with code 3" in out
    assert "nothing is compared or stored from a partial set of replicates" in out
    (path,) = pytester.path.joinpath("baselines").rglob("*.json")
    assert sorted(json.loads(path.read_text())["benchmarks"]) == ["test_loop"]


def test_a_benchmark_that_raises_in_one_worker_names_the_exception(pytester: pytest.Pytester) -> None:
    # issue 31: the message says why the worker has no result (type, message, the user's frame),
    # not only where its log is; the session's summary gives the whole time, workers included
    bench = BENCH + """

def flaky_setup():
    import os, sys
    if '"replicate": "1/' in " ".join(sys.argv):  # the second worker process (its --gpuperf-role)
        raise RuntimeError("Converting a tensordict to boolean value is not permitted")

def test_raises(gpu_bench):
    flaky_setup()
    gpu_bench.pedantic(sum, args=(range(10),), rounds=10, warmup_rounds=1)
"""
    pytester.makepyfile(test_bench=bench)
    script_timings(pytester, RECORDED)
    rec = pytester.runpytest("--gpuperf-update-baselines", "--gpuperf-processes=2", *RUN)
    rec.assert_outcomes(failed=1, passed=1)
    out = rec.stdout.str()
    assert ("test_bench.py::test_raises: measured by 1 of 2 worker processes (worker 2 did not report it: its test "
            "raised RuntimeError: Converting a tensordict to boolean value is not permitted (at ") in out
    assert "test_bench.py:" in out and "in flaky_setup" in out
    rec.stdout.fnmatch_lines(["gpuperf: the session took * s in all, * s of it in worker processes before the tests*"])


def test_an_inconclusive_benchmark_gets_more_processes_and_decides(pytester: pytest.Pytester) -> None:
    # issue 31: after the first P processes, a comparison whose CI straddles 1 and 1 + threshold is
    # measured in more worker processes (two at a time, only its tests) and decided on all of them
    spread = {"cv": 0.01, "process_factors": [1.0, 1.08, 0.93, 1.04, 0.97]}
    pytester.makepyfile(test_bench=BENCH)
    script_timings(pytester, dict(spread, ms=1.0))
    rec = pytester.runpytest("--gpuperf-update-baselines", "--gpuperf-processes=3", *RUN)
    rec.assert_outcomes(passed=1)
    set_timings(pytester, dict(spread, ms=1.25))  # 25% slower
    rec = pytester.runpytest("--gpuperf", "--gpuperf-no-ab-confirm", "--gpuperf-processes=3", *RUN)
    rec.assert_outcomes(passed=1)  # 3 processes: inconclusive, which passes
    assert "inconclusive" in rec.stdout.str()
    rec = pytester.runpytest("--gpuperf", "--gpuperf-no-ab-confirm", "--gpuperf-processes=3", "--gpuperf-json",
                             "r.json", *RUN, "--gpuperf-max-processes=5")
    rec.assert_outcomes(failed=1)
    rec.stdout.fnmatch_lines([
        "*gpuperf: 1 benchmark(s) inconclusive after 3 worker processes: measuring them in 2 more*",
        "*regressed 1.2*(5 worker processes)*",
        "*geometric mean of 5 process medians*",
        "*processes each decision used: test_bench.py::test_loop (5)*"])
    bench = json.loads(pytester.path.joinpath("r.json").read_text())["benchmarks"]["test_bench.py::test_loop"]
    assert len(bench["process_medians_ms"]) == 5 and bench["verdict"] == "regressed"


def test_a_stored_regression_is_replicated_in_later_processes_before_it_fails(pytester: pytest.Pytester) -> None:
    # issue 31: with no A/B to confirm it (here --gpuperf-no-ab-confirm), a regression decided on the
    # first processes is measured again in processes started after the decision. A slowdown of the
    # host that covers only the first 3 processes then passes; one that holds in the later ones fails.
    pytester.makepyfile(test_bench=BENCH)
    script_timings(pytester, {"ms": 1.0, "cv": 0.01, "process_factors": [1.0, 1.01, 0.99]})
    pytester.runpytest("--gpuperf-update-baselines", "--gpuperf-processes=3", *RUN).assert_outcomes(passed=1)
    compare = ("--gpuperf", "--gpuperf-no-ab-confirm", "--gpuperf-processes=3", "--gpuperf-json=r.json", *RUN)
    set_timings(pytester, {"ms": 1.0, "cv": 0.01, "process_factors": [1.25, 1.26, 1.24, 1.0, 1.01]})
    rec = pytester.runpytest(*compare, "--gpuperf-max-processes=3")  # no later process: the regression stands
    rec.assert_outcomes(failed=1)
    rec = pytester.runpytest(*compare, "--gpuperf-max-processes=5")
    rec.assert_outcomes(passed=1)
    rec.stdout.fnmatch_lines(["*gpuperf: 1 regressed with no A/B against the baselines' commit to confirm it after 3 "
                              "worker processes: measuring them in 2 more*"])
    bench = json.loads(pytester.path.joinpath("r.json").read_text())["benchmarks"]["test_bench.py::test_loop"]
    assert len(bench["process_medians_ms"]) == 5 and bench["verdict"] in ("inconclusive", "unchanged")
    set_timings(pytester, {"ms": 1.0, "cv": 0.01, "process_factors": [1.25, 1.26, 1.24, 1.25, 1.26]})
    rec = pytester.runpytest(*compare, "--gpuperf-max-processes=5")
    rec.assert_outcomes(failed=1)
    rec.stdout.fnmatch_lines(["*regressed 1.2*(5 worker processes)*"])


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


def test_processes_option_is_checked(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_bench=BENCH)
    rec = pytester.runpytest("--gpuperf", "--gpuperf-processes=0", *RUN)
    assert rec.ret == pytest.ExitCode.USAGE_ERROR
    rec.stderr.fnmatch_lines(["*--gpuperf-processes '0': expected an integer >= 1*"])


def test_marker_processes_limits_the_workers_that_measure_a_benchmark(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_bench=BENCH + """

@pytest.mark.gpu_bench(device="cpu", counts=False, processes=1)
def test_once(gpu_bench):
    gpu_bench.pedantic(sum, args=(range(10),), rounds=10, warmup_rounds=1)
""")
    script_timings(pytester, RECORDED)
    pytester.runpytest("--gpuperf-update-baselines", "--gpuperf-processes=2", *RUN).assert_outcomes(passed=2)
    (path,) = pytester.path.joinpath("baselines").rglob("*.json")
    stored = json.loads(path.read_text())["benchmarks"]
    assert len(stored["test_loop"]["process_medians_ms"]) == 2 and stored["test_loop"]["rounds"] == 60
    assert stored["test_once"]["process_medians_ms"] == [pytest.approx(stored["test_once"]["stats"]["median_ms"])]
    assert stored["test_once"]["rounds"] == 10  # the second worker ran test_once without measuring it


def test_replicates_under_xdist_are_measured_once_and_merged(pytester: pytest.Pytester) -> None:
    # The controller runs the worker processes before pytest-xdist starts its own; the xdist workers
    # pick up the finished results (nothing is measured twice) and the controller merges them.
    pytester.makepyfile(test_bench=BENCH + BENCH.replace("test_loop", "test_other"))
    script_timings(pytester, RECORDED)
    rec = pytester.runpytest_subprocess("--gpuperf-update-baselines", "--gpuperf-processes=2", "-n", "2", *RUN)
    rec.assert_outcomes(passed=2)
    rec.stdout.fnmatch_lines(["*worker process 2/2 done (2 benchmark(s)*", "*results of 2 worker(s) merged*"])
    (path,) = pytester.path.joinpath("baselines").rglob("*.json")
    stored = json.loads(path.read_text())["benchmarks"]
    assert sorted(stored) == ["test_loop", "test_other"]
    assert all(len(e["process_medians_ms"]) == 2 and e["rounds"] == 60 for e in stored.values())


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
    rec = pytester.runpytest("--gpuperf-update-baselines", "--gpuperf-processes=2", *RUN)
    rec.assert_outcomes(passed=1)
    rewritten = json.loads(pytester.path.joinpath("rewritten.json").read_text())
    done = [line for line in rewritten if "done" in line]
    assert [line.split(" (")[0] for line in done] == ["gpuperf: worker process 1/2 done",
                                                      "gpuperf: worker process 2/2 done"]
    rec.stdout.fnmatch_lines(["gpuperf: measuring in 2 worker processes in turn (--gpuperf-processes)"])
    # the finer steps, each benchmark a running worker finished (of the first worker's count, once known)
    assert "gpuperf: worker process 2/2: 1 of 1 benchmark(s) measured" in "\n".join(rewritten)
