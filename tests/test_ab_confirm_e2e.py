"""End-to-end: a stored-baseline regression is confirmed by A/B against the baseline's own commit.

A temporary git repository: the baselines are recorded at commit 1 (two replicate worker
processes) and committed. Timings are scripted: a test module's ``MS`` holds each benchmark's
per-call time, so a slowdown "in the code" is a different ``MS`` in the working tree, while
``MACHINE`` (an environment variable every worker inherits) slows both sides alike, as a slower
machine would; the session-start reference workloads are scripted too (``SCRIPTED_REFERENCE``).
Every verdict is therefore the same on any machine.

Every worker process costs seconds (it imports torch): the baselines are recorded once per test
process and copied into each test's folder (``repo``), and where one session can show two
behaviours, the project's two benchmarks show one each (the A/B confirmation runs once per session,
for all of its suspects, and the stored stage needs its worker processes whatever it measures).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gitrepo import commit, copy_tree, git, init

from pytest_gpuperf._testing import SCRIPTED_REFERENCE

CONFTEST = '''
import os
import pytest
from pytest_gpuperf._testing import ScriptedMeasurer
from pytest_gpuperf.plugin.replicates import slot_of

@pytest.fixture
def _gpuperf_measurer(request):
    machine = float(os.environ.get("MACHINE", "1"))
    spec = {"ms": request.module.MS[request.node.name] * machine, "cv": 0.03}
    spread = os.environ.get("SPREAD_" + request.node.name)  # worker process k runs factor k slower
    if spread:
        return ScriptedMeasurer.from_spec(dict(spec, process_factors=[float(f) for f in spread.split(",")]),
                                          slot_of(request.config))
    return ScriptedMeasurer.from_spec(spec)
'''

# confirm=0: an A/B that says regressed is not measured again by more pairs of worker processes
# (the scripted timings decide on the first ones; measuring more is tested in tests/test_ab_e2e.py)
TESTS = '''
import pytest

MS = {"test_a": @A@, "test_b": @B@, "test_c": 1.0}

@pytest.mark.gpu_bench(counts=False, confirm=0)
def test_a(gpu_bench):
    gpu_bench.pedantic(sum, args=(range(10),), rounds=40, warmup_rounds=2)

@pytest.mark.gpu_bench(counts=False, confirm=0)
def test_b(gpu_bench):
    gpu_bench.pedantic(sum, args=(range(10),), rounds=40, warmup_rounds=2)

@pytest.mark.gpu_bench(counts=False, confirm=0)
def test_c(gpu_bench):
    gpu_bench.pedantic(sum, args=(range(10),), rounds=40, warmup_rounds=2)
'''

FAST = ("--gpuperf-processes=2", "--gpuperf-ab-processes=1", "-p", "no:cacheprovider", "--gpuperf-max-processes=1")


def project(a: float = 1.0, b: float = 1.0) -> str:
    """``test_x.py`` whose test_a takes ``a`` ms per call and test_b ``b`` ms."""
    return TESTS.replace("@A@", repr(a)).replace("@B@", repr(b))


@pytest.fixture(scope="module")
def recorded() -> dict[str, Path]:
    """Where :func:`repo` keeps a copy of its first recording, once per test process."""
    return {}


@pytest.fixture
def repo(pytester: pytest.Pytester, recorded: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A git repository with a scripted-timing project whose baselines were recorded at its first
    commit (by two worker processes) and committed. Recorded, and its update run checked, by the
    first test of this process that asks; the others get a copy of that folder, ``.git`` included."""
    top = pytester.path
    if "repo" in recorded:
        copy_tree(recorded["repo"], top)
        return top
    init(top)
    # the verdicts are under test here; the op profiles of the moved ones (why it got slower) are
    # tested in tests/test_why_e2e.py, and each costs worker processes
    pytester.makeini("[pytest]\ngpuperf_why = false\n")
    # the session-start reference workloads scripted too (1 ms each), in every process: a regression
    # that no A/B confirms is read against the machine's own speed, which must not be this machine's
    pytester.makeconftest(SCRIPTED_REFERENCE + CONFTEST)
    pytester.makepyfile(test_x=project())
    first = commit(top, "code")
    pytester.runpytest("--gpuperf-update-baselines", *FAST).assert_outcomes(passed=3)
    for name in ("test_a", "test_b", "test_c"):
        entry = _baselines(top)["benchmarks"][name]
        assert entry["git_commit"] == first and entry["dirty"] is False
        assert entry["environment"]["reference"]["matmul_ms"] == 1.0  # scripted, not this machine's
    commit(top, "baselines")
    copy = recorded["repo"] = tmp_path_factory.mktemp("ab-confirm-recorded")
    copy_tree(top, copy)
    return top


def _baselines(top: Path) -> dict:
    (path,) = top.joinpath("baselines").rglob("*.json")
    return json.loads(path.read_text())


def _comparison(pytester: pytest.Pytester, name: str) -> dict:
    report = json.loads(pytester.path.joinpath("r.json").read_text())
    return report["benchmarks"][f"test_x.py::{name}"]["comparison"]


def test_slower_machine_passes_and_slower_code_fails_after_ab(pytester: pytest.Pytester, repo: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    first = git(repo, "rev-parse", "HEAD~1")
    # This machine is 1.3x slower. test_a's code is unchanged: the stored comparison says regressed,
    # the A/B against the baselines' commit on this machine says unchanged, and that is the verdict.
    # test_b's code is 1.3x slower too (uncommitted): the stored comparison says regressed (the
    # machine's and the code's slowdown), and the A/B, both sides on this machine, confirms it.
    # test_c's code is unchanged, but this run's second worker process is 1.4x slower than its first:
    # against the stored baseline that is inconclusive, and the A/B (each pair's processes alike) settles it.
    monkeypatch.setenv("MACHINE", "1.3")
    monkeypatch.setenv("SPREAD_test_c", "1.0,1.4")
    pytester.makepyfile(test_x=project(b=1.3))
    rec = pytester.runpytest("--gpuperf", "--gpuperf-json=r.json", *FAST)
    rec.assert_outcomes(passed=2, failed=1)
    rec.stdout.fnmatch_lines(["gpuperf: 2 regression(s), 1 inconclusive: measuring by A/B against the baselines' commit "
                              f"({first[:7]}) on this machine"])
    # the closing line says where the time went (issue 45: the cost of each step, measured)
    assert re.search(r"gpuperf: the session took [\d.]+ s in all, [\d.]+ s of it in worker processes before the "
                     r"tests: \d worker processes \d+ s, A/B confirmation \d+ s \(", " ".join(rec.stdout.str().split()))
    measuring = json.loads(pytester.path.joinpath("r.json").read_text())["measuring_s"]
    assert list(measuring["steps"])[-1] == "A/B confirmation" and measuring["before_tests"] >= sum(
        measuring["steps"].values()) * 0.99
    c = _comparison(pytester, "test_c")
    assert c["verdict"] == "unchanged" and c["ab_ref"] == f"the baselines' commit ({first[:7]})", c
    assert c["ab_confirmation"].startswith("the stored baseline said inconclusive 1."), c["ab_confirmation"]
    assert "; settled by A/B against the baseline's commit on this machine: " in c["ab_confirmation"]
    assert c["ab_confirmation"].endswith("(unchanged)")
    c = _comparison(pytester, "test_a")
    assert c["verdict"] != "regressed" and c["ab_ref"] == f"the baselines' commit ({first[:7]})"
    assert c["ab_confirmation"].startswith("the stored baseline said regressed 1.3")
    assert "not confirmed by A/B against the baseline's commit on this machine" in c["ab_confirmation"]
    rec.stdout.fnmatch_lines(["regressed 1.*(A/B*",
                              "  test_x.py::test_b: A/B vs the baselines' commit*: 1.*the "
                              "stored baseline said regressed 1.*confirmed by A/B against the baseline's commit on this "
                              "machine*--gpuperf-update-baselines*"])
    c = _comparison(pytester, "test_b")
    assert c["verdict"] == "regressed"
    # the message ends with the command that finds the commit (issue 25); the slow code is not committed yet
    assert c["ab_confirmation"].endswith(f"; find the commit: gpuperf bisect {first[:12]} HEAD -- test_x.py::test_b "
                                         f"(after committing your changes: bisect measures commits, and the working "
                                         f"tree has uncommitted changes)")
    # Opting out leaves the stored verdicts alone: the slower machine fails test_a too.
    # test_c stays inconclusive (and passes).
    rec = pytester.runpytest("--gpuperf", "--gpuperf-no-ab-confirm", "--gpuperf-json=r.json", *FAST)
    rec.assert_outcomes(passed=1, failed=2)
    assert _comparison(pytester, "test_a")["ab_ref"] is None
    assert _comparison(pytester, "test_b")["ab_ref"] is None
    c = _comparison(pytester, "test_c")
    assert c["verdict"] == "inconclusive" and c["ab_ref"] is None


def test_a_committed_regression_is_bisected_in_the_same_run_and_by_the_pytest_form(
        pytester: pytest.Pytester, repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 25: ``--gpuperf-bisect-on-regression 1`` bisects a confirmed regression from the baselines'
    commit to HEAD in the same run; ``--gpuperf-bisect GOOD..BAD`` bisects instead of running the tests.
    Issue 45: with ``--gpuperf-settle-time`` spent before it starts, the A/B confirms the regression
    all the same, and leaves the inconclusive test_c (a 1.4x slower second process) as the stored
    stage said, saying why."""
    first, base = git(repo, "rev-parse", "HEAD~1"), git(repo, "rev-parse", "HEAD")
    pytester.makepyfile(test_x=project(a=1.3))
    slow = commit(repo, "make test_a slower")
    monkeypatch.setenv("SPREAD_test_c", "1.0,1.4")
    rec = pytester.runpytest("--gpuperf", "--gpuperf-bisect-on-regression=1", "--gpuperf-settle-time=0.001",
                             "--gpuperf-json=r.json", *FAST)
    rec.assert_outcomes(passed=2, failed=1)
    c = _comparison(pytester, "test_c")
    assert c["verdict"] == "inconclusive" and c["ab_ref"] is None, c
    assert c["ab_confirmation"] == ("not settled by A/B against the baselines' commit (" + first[:7] + "): the time "
                                    "for settling ran out (--gpuperf-settle-time 0.001 s); the stored verdict stands")
    rec.stdout.fnmatch_lines(["gpuperf: the time for settling ran out (--gpuperf-settle-time 0.001 s): 1 inconclusive "
                              "benchmark(s) not measured by A/B keep their stored verdicts"])
    monkeypatch.delenv("SPREAD_test_c")
    out = rec.stdout.str()
    assert f"find the commit: gpuperf bisect {first[:12]} HEAD -- test_x.py::test_a" in out
    assert "(after committing" not in out  # committed: the command runs as printed
    # the search from the baselines' commit to HEAD: BAD against GOOD (the A/B confirmation's own
    # measurement: nothing is uncommitted), the middle commit (the one that committed the baselines),
    # then the culprit's own step
    rec.stdout.fnmatch_lines([f"bisect: step 1: {slow[:7]} (2/2) vs GOOD {first[:7]}: test_a 1.* regressed -> bad*"
                              " (measured by the A/B confirmation)",
                              f"bisect: step 2: {base[:7]} (1/2) vs GOOD {first[:7]}: test_a 1.* unchanged -> good*",
                              f"bisect: step 3: {slow[:7]} (2/2) vs {base[:7]}: test_a 1.* regressed -> bad*",
                              "*gpuperf: bisection of the confirmed regressions*",
                              f"test_x.py::test_a: first bad commit {slow[:7]} 'make test_a slower': 1.*"])
    # the pytest form: no tests run, exit 0 when the commit is found; given its own range, here the
    # baselines' commit..HEAD (one step: every step runs pairs of worker processes)
    rec = pytester.runpytest(f"--gpuperf-bisect={base[:7]}..HEAD", "--gpuperf-json=b.json", "-k", "test_a", *FAST)
    assert rec.ret == 0
    rec.stdout.fnmatch_lines([f"bisect: step 1: {slow[:7]} (1/1) vs GOOD {base[:7]}: test_a 1.* regressed -> bad*",
                              f"test_x.py::test_a: first bad commit {slow[:7]} 'make test_a slower'*",
                              f"  reproduce: git checkout {slow[:7]} && pytest --gpuperf --gpuperf-ab *"])
    report = json.loads(repo.joinpath("b.json").read_text())
    assert report["benchmarks"]["test_x.py::test_a"]["culprits"][0]["first_bad"] == slow
    rec = pytester.runpytest("--gpuperf-bisect=HEAD", *FAST)
    assert rec.ret == pytest.ExitCode.USAGE_ERROR
    rec.stderr.fnmatch_lines(["*--gpuperf-bisect HEAD: expected GOOD..BAD*"])


def test_missing_or_dirty_baseline_commit_keeps_the_stored_verdict_with_a_note(pytester: pytest.Pytester,
                                                                             repo: Path) -> None:
    # both slower; test_a's baseline names a commit this clone lacks, test_b's was recorded dirty
    (path,) = repo.joinpath("baselines").rglob("*.json")
    pytester.makepyfile(test_x=project(a=1.3, b=1.3))
    data = json.loads(path.read_text())
    data["benchmarks"]["test_a"]["git_commit"] = "0123456789abcdef0123456789abcdef01234567"  # not in this clone
    data["benchmarks"]["test_b"]["history"][-1]["dirty"] = True  # recorded from uncommitted changes
    path.write_text(json.dumps(data))
    rec = pytester.runpytest("--gpuperf", *FAST)
    rec.assert_outcomes(passed=1, failed=2)
    rec.stdout.fnmatch_lines(["*test_x.py::test_a*not confirmed by A/B against 0123456: the baselines' commit 0123456 "
                              "is not in this repository (a shallow clone? fetch the history*fetch-depth: 0); the "
                              "stored verdict stands*"])
    rec.stdout.fnmatch_lines(["*test_x.py::test_b*not confirmed by A/B against its commit: the baseline was recorded "
                              "from uncommitted changes; the stored verdict stands*"])
