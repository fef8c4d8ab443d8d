"""``--gpuperf-ab REF`` end to end: a temporary git repository with two commits, scripted timings.

The scripted measurer (``pytest_gpuperf._testing``) makes every verdict deterministic: each side's
worker reads the per-call time of its own commit, so a slowdown is "in the code" of the working
tree and nowhere else. One pair of worker processes (``--gpuperf-ab-processes 1``: 8 paired
blocks, enough for the signed-rank test at alpha 0.01) keeps each run to a few seconds.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gitrepo import commit, git, scripted_project
from pytest_gpuperf._testing import SCRIPTED_CONFTEST

TESTS = '''
import pytest

@pytest.mark.gpu_bench(max_time=0.1, counts=False)
def test_a(gpu_bench):
    seen = []
    r = gpu_bench(lambda: seen.append(1) or sum(range(10)))
    assert r.value == 45 and seen  # the test's own checks see a real call

@pytest.mark.gpu_bench(max_time=0.1, counts=False)
def test_b(gpu_bench):
    gpu_bench(lambda: None)
'''

ONE_PAIR = ("--gpuperf-ab-processes", "1", "-p", "no:cacheprovider")


def timings(repo: Path, default_ms: float = 1.0, **per_test: float) -> None:
    data = {"*": {"ms": default_ms, "cv": 0.03}, **{k: {"ms": v, "cv": 0.03} for k, v in per_test.items()}}
    (repo / "timings.json").write_text(json.dumps(data))


NO_WHY = "gpuperf_why = false\n"


@pytest.fixture
def repo(pytester: pytest.Pytester) -> Path:
    """A git repository holding a scripted-timing test project (committed once). The A/B verdicts
    are under test here; the op profiles of the moved ones (why it got slower) are tested in
    tests/test_why_e2e.py, and each costs worker processes."""
    top = scripted_project(pytester, TESTS, ini=NO_WHY)
    timings(top)
    commit(top, "A")
    return top


TESTS_B = TESTS.replace("def test_b(", "def test_c(") + '''

@pytest.mark.gpu_bench(max_time=0.1)
def test_d(gpu_bench):
    import torch
    x = torch.ones(4)
    gpu_bench(lambda: x.add(1).mul(2)[0].item()@EXTRA@)
'''


def test_ab_catches_a_slowdown_reports_new_and_removed_gates_counts_and_passes_aa(pytester: pytest.Pytester,
                                                                                    repo: Path):
    """One A/B run covers a slowdown (test_a, 1.3x), a removed benchmark (test_b), a new one (test_c)
    and a count regression (test_d: one more sync); then A/A (everything committed) passes."""
    pytester.makepyfile(test_x=TESTS + TESTS_B[len(TESTS):].replace("@EXTRA@", ""))
    commit(repo, "A with test_d")
    sha = git(repo, "rev-parse", "HEAD")
    timings(repo, test_a=1.3)  # the working tree's test_a got 30% slower (uncommitted)
    pytester.makepyfile(test_x=TESTS_B.replace("@EXTRA@", " + torch.zeros(1).item()"))
    res = pytester.runpytest("--gpuperf-ab", "HEAD", *ONE_PAIR, "--gpuperf-json=out.json", "--gpuperf-markdown=out.md")
    res.assert_outcomes(failed=2, passed=1)
    text = res.stdout.str()
    # the reason first (issue 24), within 80 columns: "(A/B vs HEAD (sha))" where it fits, else "(A/B)" (issue 47)
    first = re.search(rf"\nregressed 1\.[^\n]*\(A/B( vs HEAD \({sha[:7]}\))?\)\n", text)
    assert first and len(first.group(0).strip()) <= 80, text
    # progress without -v (issue 24): a line per benchmark with the time elapsed; in the confirmation
    # pair, how many benchmarks the run holds and an estimate of the time left
    assert re.search(r"A/B: test_x\.py::test_a \(worker pair 1\), benchmark \d+, \d+ s elapsed", text)
    assert re.search(r"A/B: test_x\.py::test_a \(worker pair 2\), benchmark \d+ of \d+, \d+ s elapsed", text)
    assert f"  test_x.py::test_a: A/B vs HEAD ({sha[:7]}): 1." in text
    # One process pair found the regression; a second pair (the confirmation) measured test_a alone again.
    assert "Wilcoxon signed-rank" in text and "16 paired blocks from 2 pair(s)" in text
    assert "confirmed on re-measure" in text
    res.stdout.fnmatch_lines([f"*mode: A/B vs HEAD ({sha[:7]})*"])
    res.stdout.fnmatch_lines(["*counts regressed: ops 4 -> 6 per call*", "*syncs 1 -> 2*", "  test_x.py::test_d*"])
    assert f"test_x.py::test_b: removed since HEAD ({sha[:7]})" in text  # reported, not failed
    report = json.loads((repo / "out.json").read_text())["benchmarks"]
    c = report["test_x.py::test_a"]["comparison"]
    assert c["verdict"] == "regressed" and c["ab_ref"] == f"HEAD ({sha[:7]})" and c["ab_pairs"] == 16
    assert c["confirmed"] is True and len(c["ab_process_ratios"]) == 2
    assert 1.25 < c["ratio"] < 1.35
    new = report["test_x.py::test_c"]["comparison"]
    assert new["verdict"] == "no-baseline" and new["note"] == f"new: not in HEAD ({sha[:7]})"
    assert report["test_x.py::test_d"]["comparison"]["verdict"] == "unchanged"  # same time, more syncs
    md = (repo / "out.md").read_text()
    assert f"`test_x.py::test_a`: A/B vs HEAD ({sha[:7]}): 1." in md
    # the reports follow the mode (issue 24): REF's median in the Markdown header and both legends
    assert "| baseline (REF's median) |" in md and "history median" not in md and "process medians" not in md
    assert "A/B: median = of B's (the working tree's) samples; baseline = of REF's (A's) samples" in text
    assert "stored runs' medians" not in text and "per-process medians" not in text
    assert ".gpuperf" not in git(repo, "status", "--porcelain")  # the worktree stays out of the repository
    # the history store (issue 34) records side B: one run, mode "ab", REF named, test_a's ratio
    from pytest_gpuperf.storage.history import HistoryStore

    with HistoryStore(repo / ".gpuperf" / "history.sqlite") as store:
        (run,) = store.runs()
        assert run["mode"] == "ab" and run["options"]["ab_ref"] == f"HEAD ({sha[:7]})" and run["commit"] == sha
        assert run["dirty"] is True and run["subject"] == "A with test_d"
        rows = {r["benchmark"]: r for r in store.series()}
        assert rows["test_x.py::test_a"]["verdict"] == "regressed" and 1.25 < rows["test_x.py::test_a"]["ratio"] < 1.35

    commit(repo, "B")  # A/A: both sides now run the same code
    res = pytester.runpytest("--gpuperf-ab", "HEAD", *ONE_PAIR)
    res.assert_outcomes(passed=3)
    assert "regressed" not in res.stdout.str()


def test_ab_refuses_code_imported_from_the_working_tree(pytester: pytest.Pytester, repo: Path):
    """An installed working tree (simulated: a conftest that puts the working tree's src first on
    sys.path, as an editable install does) would make side A run B's code: the run stops."""
    pkg = repo / "src" / "mypkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("MS = 1.0\n")
    pytester.makeconftest(SCRIPTED_CONFTEST.replace("import pytest", f"import sys\nsys.path.insert(0, {str(repo / 'src')!r})\nimport pytest", 1)
                          + "\nimport mypkg\n")
    commit(repo, "pkg")
    res = pytester.runpytest("--gpuperf-ab", "HEAD", *ONE_PAIR)
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    text = res.stdout.str() + res.stderr.str()
    assert "side A must run the code of REF's worktree" in text and "mypkg" in text
    assert "gpuperf_ab_pythonpath = src" in text


def test_ab_import_roots_run_each_sides_own_package(pytester: pytest.Pytester, repo: Path,
                                                    monkeypatch: pytest.MonkeyPatch):
    """With ``gpuperf_ab_pythonpath = src`` each side imports its own tree's package: the timing
    comes from the package (A: 1 ms, B: 1.25 ms), so a verdict of regressed proves A ran A's code.
    (The user's own session imports it as installed: here from the working tree's src.)"""
    monkeypatch.syspath_prepend(str(repo / "src"))
    pkg = repo / "src" / "mypkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("MS = 1.0\n")
    pytester.makeini("[pytest]\ngpuperf_ab_pythonpath = src\n" + NO_WHY)
    pytester.makeconftest('''
import pytest
from pytest_gpuperf._testing import ScriptedMeasurer, noisy

@pytest.fixture
def _gpuperf_measurer():
    import mypkg
    return ScriptedMeasurer(noisy(mypkg.MS, 0.03))
''')
    commit(repo, "pkg")
    (pkg / "__init__.py").write_text("MS = 1.25\n")
    res = pytester.runpytest("--gpuperf-ab", "HEAD", *ONE_PAIR, "-k", "test_a")
    res.assert_outcomes(failed=1, deselected=1)
    res.stdout.fnmatch_lines(["regressed 1.2*(A/B*", "  test_x.py::test_a: A/B vs HEAD*: 1.2*"])


def test_ab_usage_errors(pytester: pytest.Pytester, repo: Path):
    res = pytester.runpytest("--gpuperf-ab", "no-such-ref", "-p", "no:cacheprovider")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*--gpuperf-ab no-such-ref: no such commit*"])
    res = pytester.runpytest("--gpuperf-ab", "HEAD", "--gpuperf-update-baselines", "-p", "no:cacheprovider")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*cannot be combined with --gpuperf-update-baselines*"])
    res = pytester.runpytest("--gpuperf-ab", "HEAD", "--gpuperf-ab-processes", "0", "-p", "no:cacheprovider")
    res.stderr.fnmatch_lines(["*--gpuperf-ab-processes 0: expected an integer >= 1*"])


def test_ab_under_xdist(pytester: pytest.Pytester, repo: Path):
    pytest.importorskip("xdist")
    timings(repo, test_a=1.3)
    res = pytester.runpytest_subprocess("--gpuperf-ab", "HEAD", *ONE_PAIR, "-n", "2")
    res.assert_outcomes(failed=1, passed=1)
    res.stdout.fnmatch_lines(["*regressed *(A/B*", "*test_x.py::test_a: A/B vs HEAD*"])
