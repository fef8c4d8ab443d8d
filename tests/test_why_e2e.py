"""Why it got slower (issue 32), end to end: a real A/B run in a two-commit repository.

The timing verdicts and the op profiles are scripted (``timings.json``: side B's benchmark 1.5x
slower, its ``aten::sort`` 3.5x), so nothing here depends on the machine; the A/B machinery (worker
pairs, the profiling pairs, the diff, the message and the report) is the real one. One test times
and profiles for real, with a change so large (one op's input 50x as large, the op then most of B's
call) that what it asserts cannot flip. How often the real profiler names the right op is measured
by ``benchmarks/why_study.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gitrepo import commit, init, scripted_project

STAGES = '''
import pytest
import torch

x = torch.randn(96, 96)
WIDTH = @W@

@pytest.mark.gpu_bench(max_time=0.1, counts=False)
def test_stages(gpu_bench):
    def f():
        y = torch.softmax(x @ x, 1)
        return torch.sort(y.unfold(1, WIDTH, 1), dim=-1)[0].sum()
    gpu_bench(f)
'''
ONE_PAIR = ("--gpuperf-ab-processes", "1", "-p", "no:cacheprovider")


OPS = {"aten::mm": 0.5, "aten::softmax": 0.2, "aten::sort": 0.2, "aten::sum": 0.05}


def _timings(repo: Path, ms: float, **ops: float) -> None:
    (repo / "timings.json").write_text(json.dumps({"*": {"ms": ms, "cv": 0.03, "ops": dict(OPS, **ops)}}))


@pytest.fixture
def repo(pytester: pytest.Pytester) -> Path:
    top = scripted_project(pytester, STAGES.replace("@W@", "4"))
    _timings(top, 1.0)
    commit(top, "A")
    return top


def test_a_regression_names_the_op_that_got_slower(pytester: pytest.Pytester, repo: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    pytester.makepyfile(test_x=STAGES.replace("@W@", "64"))  # B: the sort's windows 16x as wide
    _timings(repo, 1.5, **{"aten::sort": 0.7})
    res = pytester.runpytest("--gpuperf-ab", "HEAD", *ONE_PAIR, "--gpuperf-json=out.json", "--gpuperf-markdown=out.md")
    res.assert_outcomes(failed=1)
    text = res.stdout.str()
    md = (repo / "out.md").read_text()
    assert "Why it moved, op by op" in md and "| aten::sort | " in md and "| slower |" in md
    res.stdout.fnmatch_lines(["*A/B: profiling 1 benchmark(s) on both sides in 3 more pair(s) of worker processes*"])
    # the verdict first, then the cause
    res.stdout.fnmatch_lines(["regressed 1.*(A/B vs HEAD (*))", "  why: aten::sort +*/call (+*% of the slowdown)*"])
    assert "unchanged: aten::mm, aten::softmax" in text and "rest " in text
    bench = json.loads((repo / "out.json").read_text())["benchmarks"]["test_x.py::test_stages"]
    diff = bench["op_diff"]
    named = [c for c in diff["ops"] if c["status"] in ("slower", "faster", "new", "removed")]
    assert named and named[0]["name"] == "aten::sort"
    assert diff["processes"] == [3, 3] and diff["cycles"][0] >= 6
    total = diff["named_ms"] + diff["new_ms"] + diff["removed_ms"] + diff["rest_ms"]
    assert total == pytest.approx(diff["total_shift_ms"])
    assert diff["whole_from"] == "timing"  # the verdict's own medians are the change to explain
    # gpuperf compare shows the report's diff under the decision
    from pytest_gpuperf.cli.reports import main

    capsys.readouterr()
    main(["compare", str(repo / "out.json"), str(repo / "out.json")])
    shown = capsys.readouterr().out
    assert "  why: aten::sort +" in shown and "  | aten::sort | " in shown


def test_an_aa_run_profiles_nothing_and_names_nothing(pytester: pytest.Pytester, repo: Path) -> None:
    res = pytester.runpytest("--gpuperf-ab", "HEAD", *ONE_PAIR, "--gpuperf-json=out.json")
    res.assert_outcomes(passed=1)
    assert "profiling" not in res.stdout.str() and "why:" not in res.stdout.str()
    bench = json.loads((repo / "out.json").read_text())["benchmarks"]["test_x.py::test_stages"]
    assert "op_diff" not in bench


def test_a_profile_that_fails_leaves_the_verdict_and_says_why(pytester: pytest.Pytester, repo: Path) -> None:
    # side B's code refuses to run under the profiler (real profiler: no scripted ops); the verdict stands
    pytester.makepyfile(test_x=STAGES.replace("@W@", "8").replace(
        "    def f():\n", "    def f():\n        if torch.autograd._profiler_enabled():\n"
                         "            raise RuntimeError('not under a profiler')\n"))
    (repo / "timings.json").write_text(json.dumps({"*": {"ms": 1.5, "cv": 0.03}}))
    res = pytester.runpytest("--gpuperf-ab", "HEAD", *ONE_PAIR)
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines(["regressed 1.*(A/B vs HEAD (*))",
                              "  why: no diagnosis (the op profiles failed: side B: RuntimeError: not under a profiler*"])


SORTS = '''
import pytest
import torch

x = torch.randn(256, 256)
s = torch.randn(@N@)

@pytest.mark.gpu_bench(max_time=0.1, counts=False, memory_threshold=100)  # B's sort buffers: ~2 MiB more
def test_sorts(gpu_bench):
    def f():
        y = torch.softmax(x @ x, 1)
        return torch.sort(s)[0][0] + y.sum()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # no intra-op pool that waits for a thread a busy host took away
    try:
        gpu_bench(f)
    finally:  # the in-process session shares torch with the rest of the suite
        torch.set_num_threads(threads)
'''


def test_real_timing_names_an_op_made_fifty_times_slower(pytester: pytest.Pytester) -> None:
    """Real timing and the real profiler (no scripted measurer). B sorts 50x as many elements
    (100,000 instead of 2,000): ``aten::sort`` takes some 80x as long (about 6 ms against A's whole
    0.3 ms call, in one thread), so it is most of B's call and ~90% of the slowdown, where the diff
    names an op from 10% and ranks by the shift; no machine's speed or noise makes that a pass or
    names another op first. Only such facts are asserted, no figures."""
    top = pytester.path
    init(top)
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(test_x=SORTS.replace("@N@", "2_000"))
    commit(top, "A")
    pytester.makepyfile(test_x=SORTS.replace("@N@", "100_000"))  # B: the sort 50x as large
    res = pytester.runpytest("--gpuperf-ab", "HEAD", *ONE_PAIR, "--gpuperf-json=out.json")
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines(["regressed *(A/B vs HEAD (*))", "  why: aten::sort +*/call (*"])
    why = next(line for line in res.stdout.lines if line.startswith("  why: "))
    assert "unchanged: " in why and "aten::mm" in why.split("unchanged: ", 1)[1]
    bench = json.loads((top / "out.json").read_text())["benchmarks"]["test_x.py::test_sorts"]
    named = [c for c in bench["op_diff"]["ops"] if c["status"] in ("slower", "faster", "new", "removed")]
    assert named and named[0]["name"] == "aten::sort" and named[0]["status"] == "slower"


def test_without_the_old_commit_a_stored_regression_is_diffed_against_the_baselines_profile(
        pytester: pytest.Pytester) -> None:
    """No git history (or a shallow clone): no A/B can confirm a stored regression, so the baseline's
    compact op profile (recorded by the update run's extras processes) is side A. Scripted timings
    and ops: the regression stands, the sort is named, and the why line says where A came from."""
    from scripted import script_timings, set_timings

    pytester.makepyfile(test_x=STAGES.replace("@W@", "4"))
    run = ("-p", "no:cacheprovider", "--gpuperf-processes=2", "--gpuperf-max-processes=2")
    script_timings(pytester, {"ms": 1.0, "cv": 0.02, "ops": OPS})
    pytester.runpytest("--gpuperf-update-baselines", *run).assert_outcomes(passed=1)
    stored = json.loads(next((pytester.path / "baselines").rglob("*.json")).read_text())
    profile = stored["benchmarks"]["test_stages"]["op_profile"]
    assert len(profile["cycles"]) == 12 and {"aten::mm", "aten::sort"} <= set(profile["cycles"][0]["self_ms"])
    assert len({c["process"] for c in profile["cycles"]}) == 2  # both extras processes profiled
    set_timings(pytester, {"ms": 1.5, "cv": 0.02, "ops": dict(OPS, **{"aten::sort": 0.7})})
    res = pytester.runpytest("--gpuperf", *run, "--gpuperf-json=out.json")
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines(["*profiling the ops in 2 more processes to diff against the baselines' stored op profiles*",
                              "regressed 1.*", "  why: aten::sort +*/call (*% of the slowdown)*"])
    assert "[against the baseline's op profile (" in res.stdout.str()
    bench = json.loads((pytester.path / "out.json").read_text())["benchmarks"]["test_x.py::test_stages"]
    assert bench["op_diff"]["source"].startswith("the baseline's op profile (") and "op_profile" not in bench
    # an unchanged run profiles nothing
    set_timings(pytester, {"ms": 1.0, "cv": 0.02, "ops": OPS})
    res = pytester.runpytest("--gpuperf", *run)
    res.assert_outcomes(passed=1)
    assert "profiling the ops" not in res.stdout.str()
