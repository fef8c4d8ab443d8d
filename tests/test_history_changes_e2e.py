"""Issue 34's end-to-end check: a 10-commit repository whose committed ``timings.json`` (the
scripted measurer, ``pytest_gpuperf._testing``) makes ``test_a`` 25% slower from its seventh
commit. Each commit is measured by a real ``pytest --gpuperf`` session (the first records the
baselines), which records the run in the default history store; ``gpuperf changes`` then finds the
step between the sixth and seventh commits, with the ``gpuperf bisect`` command of that range, and
none in the unchanged ``test_b``; ``gpuperf dashboard`` marks it. Scripted timings: the same
verdicts on any machine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gitrepo import commit, git, init
from pytest_gpuperf._testing import SCRIPTED_CONFTEST
from pytest_gpuperf.cli import main

pytest_plugins = ["pytester"]

TESTS = '''
import pytest

@pytest.mark.gpu_bench(max_time=0.05, warmup_time=0.0, device="cpu", counts=False, confirm=0)
def test_a(gpu_bench):
    gpu_bench(sum, range(10))

@pytest.mark.gpu_bench(max_time=0.05, warmup_time=0.0, device="cpu", counts=False, confirm=0)
def test_b(gpu_bench):
    gpu_bench(sum, range(20))
'''
ONE = ("-p", "no:cacheprovider", "--gpuperf-processes=1", "--gpuperf-no-why")


def test_a_step_in_ten_recorded_commits_is_found_at_its_commit(pytester: pytest.Pytester,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    repo = pytester.path
    init(repo)
    (repo / "pytest.ini").write_text("[pytest]\n")
    (repo / "conftest.py").write_text(SCRIPTED_CONFTEST)
    (repo / "test_x.py").write_text(TESTS)
    (repo / ".gitignore").write_text("baselines/\n")
    shas = []
    for k in range(10):
        (repo / "timings.json").write_text(json.dumps({
            "test_a": {"ms": 1.25 if k >= 6 else 1.0, "cv": 0.03, "seed": k},
            "test_b": {"ms": 2.0, "cv": 0.03, "seed": 100 + k}}))
        shas.append(commit(repo, f"change {k}"))
        res = pytester.runpytest("--gpuperf-update-baselines" if k == 0 else "--gpuperf", *ONE)
        res.assert_outcomes(passed=2 if k < 6 else 1, failed=0 if k < 6 else 1)  # the gate fails from the step on
    assert git(repo, "status", "--porcelain", "--untracked-files=no") == ""

    capsys.readouterr()
    assert main(["changes", "--json"]) == 0  # the default store, .gpuperf/history.sqlite
    found = json.loads(capsys.readouterr().out)
    (c,) = found["changes"]  # test_b: no change
    assert c["benchmark"] == "test_x.py::test_a" and c["slower"] and c["index"] == 6
    assert (c["before_commit"], c["after_commit"]) == (shas[5], shas[6]) and c["pvalue"] < 0.001
    assert 20 < c["change_pct"] < 30 and c["runs_before"] == 6 and c["runs_after"] == 4
    assert c["bisect"] == f"gpuperf bisect {shas[5][:12]} {shas[6][:12]} -- test_x.py::test_a"
    assert main(["changes"]) == 0
    text = capsys.readouterr().out
    assert f"commits {shas[5][:12]}..{shas[6][:12]}" in text and "1 change(s) in 1 of 2 series" in text

    from pytest_gpuperf.storage.history import HistoryStore

    with HistoryStore(repo / ".gpuperf" / "history.sqlite") as store:
        runs = store.runs()
    assert [r["mode"] for r in runs] == ["update"] + ["compare"] * 9 and [r["commit"] for r in runs] == shas
    assert [r["subject"] for r in runs] == [f"change {k}" for k in range(10)] and not any(r["dirty"] for r in runs)

    pytest.importorskip("plotly")
    assert main(["dashboard", "--out", "site"]) == 0
    assert f"{shas[5][:9]}..{shas[6][:9]}" in (repo / "site" / "regressions.html").read_text(encoding="utf-8")
