"""``gpuperf bisect GOOD BAD -- <pytest args>`` end to end (issue 25): a temporary git repository of
6 commits whose committed ``timings.json`` scripts the per-call time of each commit (the scripted
measurer, ``pytest_gpuperf._testing``), so the slowdown is "in the code" of a known commit and every
verdict is the same on any machine. Each step is a real A/B run: one pair of worker processes of the
two commits, each in its own worktree (the benchmark's ``confirm=0``: a step that says regressed is
not measured again by more pairs, which ``tests/test_ab_e2e.py`` tests; every pair costs seconds of
importing torch). The search's logic on many more histories is covered with
scripted probes in ``tests/unit/test_bisection.py``; the git handling in ``tests/test_bisect_git.py``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gitrepo import commit, git, init
from pytest_gpuperf._testing import SCRIPTED_CONFTEST
from pytest_gpuperf.cli import main

TESTS = '''
import pytest

@pytest.mark.gpu_bench(max_time=0.1, counts=False, confirm=0)
def test_a(gpu_bench):
    gpu_bench(lambda: sum(range(10)))
'''


def history(repo: Path, times_ms: list[float], broken: frozenset[int] = frozenset()) -> list[str]:
    """Commit ``len(times_ms)`` commits; commit k scripts test_a at ``times_ms[k]`` per call, and a
    commit in ``broken`` has a test module that fails to import. Returns the shas, oldest first."""
    init(repo)
    (repo / "pytest.ini").write_text("[pytest]\n")
    (repo / "conftest.py").write_text(SCRIPTED_CONFTEST)
    shas = []
    for k, ms in enumerate(times_ms):
        ops = {"aten::mm": 0.5, "aten::softmax": 0.3, "aten::sort": 0.2 + (ms - 1.0) * 1.5}  # the sort moved
        (repo / "timings.json").write_text(json.dumps({"*": {"ms": ms, "cv": 0.03, "seed": k, "ops": ops}}))
        (repo / "test_x.py").write_text(("import no_such_module\n" if k in broken else "") + TESTS)
        (repo / "notes.txt").write_text(f"change {k}\n")
        shas.append(commit(repo, f"change {k}" + (" (breaks the import)" if k in broken else "")))
    return shas


def test_bisect_finds_the_first_bad_commit_skips_a_broken_one_and_cleans_up(
        pytester: pytest.Pytester, capsys: pytest.CaptureFixture) -> None:
    repo = pytester.path
    # +30% from commit 4 on; commit 2, the first middle the search tries, does not import. The fewest
    # commits where the search steps around it to a good commit (3) that is not GOOD, so that the
    # culprit's own step is a pair of its own, and the culprit is not BAD (BAD is measured against it).
    shas = history(repo, [1.0] * 4 + [1.3] * 2, broken=frozenset({2}))
    code = main(["bisect", shas[0], "HEAD", "--json", "b.json", "--markdown", "b.md", "--",
                 "-k", "test_a", "-p", "no:cacheprovider"])
    captured = capsys.readouterr()
    out = captured.out
    assert code == 0, out + captured.err
    # a progress line per step: the commit, its ratio with the CI, the verdict and the call
    assert re.search(rf"bisect: step 1: {shas[5][:7]} \(5/5\) vs GOOD {shas[0][:7]}: test_a 1\.[23]\d+x "
                     rf"\[1\.\d+x, 1\.\d+x\] regressed -> bad; \d+ s elapsed", out), out
    assert f"{shas[2][:7]} (2/5) vs GOOD {shas[0][:7]}: test_a skip (test_x.py::test_a did not run at" in out
    # the verdict, reason first, with the subject and the command that reproduces the pair
    assert re.search(rf"test_x\.py::test_a: first bad commit {shas[4][:7]} 'change 4': 1\.[23]\d+x \[", out)
    assert f"reproduce: git checkout {shas[4][:7]} && pytest --gpuperf --gpuperf-ab {shas[3][:7]} -k test_a" in out
    # the culprit's own step was profiled on both sides: why it got slower, op by op
    assert re.search(r"\n  why: aten::sort \+.*/call \(.*of the slowdown\); unchanged: aten::mm, aten::softmax", out), out
    report = json.loads((repo / "b.json").read_text())
    b = report["benchmarks"]["test_x.py::test_a"]
    assert b["status"] == "found" and b["culprits"][0]["first_bad"] == shas[4]
    assert b["culprits"][0]["last_good"] == shas[3] and b["culprits"][0]["single"] is True
    assert len(b["culprits"]) == 1  # BAD is not slower than the culprit: no further regression
    # the steps: BAD, the broken middle, the nearest other commit (good), the culprit, its own step
    # against the last good commit, BAD against the culprit
    assert [(p["a"], p["b"], p["call"]) for p in b["probes"]] == [
        (shas[0], shas[5], "bad"), (shas[0], shas[2], "skip"), (shas[0], shas[3], "good"),
        (shas[0], shas[4], "bad"), (shas[3], shas[4], "bad"), (shas[4], shas[5], "good")]
    diff = b["culprits"][0]["step"]["op_diff"]
    assert [c["name"] for c in diff["ops"] if c["status"] == "slower"] == ["aten::sort"]
    assert "op_diff" not in b["probes"][0]  # BAD against GOOD (not adjacent): not profiled
    assert "Why `" in (repo / "b.md").read_text()
    skipped = [p for p in b["probes"] if p["call"] == "skip"]
    assert [p["b"] for p in skipped] == [shas[2]]
    assert "| 4 | `" in (repo / "b.md").read_text()
    # every worktree is removed, nothing is left in the repository's status
    assert not list((repo / ".gpuperf" / "bisect").glob("*/.git"))
    assert ".gpuperf" not in git(repo, "worktree", "list")
    assert git(repo, "status", "--porcelain", "--untracked-files=no") == ""


def test_a_cancelled_bisect_sigterm_leaves_no_worktree(pytester: pytest.Pytester) -> None:
    """A CI job that is cancelled sends SIGTERM: the worktrees are removed as on Ctrl-C."""
    import os
    import signal
    import subprocess
    import sys
    import time

    repo = pytester.path
    shas = history(repo, [1.0] * 4 + [1.3] * 4)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    proc = subprocess.Popen([sys.executable, "-m", "pytest_gpuperf", "bisect", shas[0], "HEAD", "--", "-k", "test_a",
                             "-p", "no:cacheprovider"], cwd=repo, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while not list((repo / ".gpuperf" / "bisect").glob("*/.git")) and time.monotonic() < deadline:
        time.sleep(0.2)  # until the first step's worktrees exist
    assert proc.poll() is None, proc.communicate()[0]
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 143, out
    assert "terminated (SIGTERM); its worktrees were removed" in out
    assert not list((repo / ".gpuperf" / "bisect").glob("*/.git"))
    assert ".gpuperf" not in git(repo, "worktree", "list")
