"""``gpuperf bisect`` on real temporary git repositories with scripted measurements (issue 25).

Each commit's ``timings.json`` says how long test_a takes there; the injected measure of
:class:`~pytest_gpuperf.bisect.run.Bisector` reads both commits' files with ``git show`` and makes
the call the A/B run would (bad above +5%, good below +2%, unclear between, skip where the file says
the benchmark cannot run). The git handling (first-parent line, reversed or unrelated revisions, a
dirty tree, a shallow clone, worktrees removed on Ctrl-C) and the reports run for real; the real
A/B steps are in ``tests/test_bisect_e2e.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gitrepo import commit, git, init
from pytest_gpuperf.bisect.report import EXIT_FOUND, EXIT_NOT_FOUND, exit_code, json_dict, markdown, summary_lines
from pytest_gpuperf.bisect.run import BisectError, Bisector
from pytest_gpuperf.verdict.bisection import Call, Probe

KEY = "test_x.py::test_a"


def history(repo: Path, times_ms: list[float | None]) -> list[str]:
    """One commit per entry (None: the benchmark cannot run there); the shas, oldest first."""
    init(repo)
    shas = []
    for k, ms in enumerate(times_ms):
        (repo / "timings.json").write_text(json.dumps({"ms": ms}))
        (repo / "notes.txt").write_text(f"change {k}\n")
        shas.append(commit(repo, f"change {k}"))
    return shas


def scripted(repo: Path, asked: list[tuple[str, str]] | None = None):
    def measure(a: str, b: str, keys: set[str] | None) -> dict[str, Probe]:
        if asked is not None:
            asked.append((a, b))
        ms_a, ms_b = (json.loads(git(repo, "show", f"{sha}:timings.json"))["ms"] for sha in (a, b))
        if ms_a is None or ms_b is None:
            return {KEY: Probe(0, 0, Call.SKIP, note="ImportError: no module named 'x'")}
        r = ms_b / ms_a
        call = Call.BAD if r > 1.05 else Call.GOOD if r < 1.02 else Call.UNCLEAR
        verdict = {Call.BAD: "regressed", Call.GOOD: "unchanged", Call.UNCLEAR: "inconclusive"}[call]
        return {KEY: Probe(0, 0, call, r, (r * 0.98, r * 1.02), verdict)}

    return measure


def bisector(repo: Path, lines: list[str] | None = None, **kw) -> Bisector:
    out = lines if lines is not None else []
    kw.setdefault("measure", scripted(repo))
    return Bisector(repo, repo, ["-k", "test_a"], progress=out.append, **kw)


def test_one_step_regression_in_16_commits_is_found_exactly(tmp_path: Path) -> None:
    shas = history(tmp_path, [1.0] * 11 + [1.2] * 5)
    lines: list[str] = []
    run = bisector(tmp_path, lines).run(shas[0], shas[-1])
    o = run.outcomes[KEY]
    assert o.status == "found" and o.culprits[0].first_bad == 11 and o.culprits[0].single
    assert exit_code(run) == EXIT_FOUND
    text = "\n".join(summary_lines(run, ["-k", "test_a"]))
    assert f"{KEY}: first bad commit {shas[11][:7]} 'change 11': 1.200x [1.176x, 1.224x] against {shas[10][:7]}" in text
    assert f"reproduce: git checkout {shas[11][:7]} && pytest --gpuperf --gpuperf-ab {shas[10][:7]} -k test_a" in text
    assert len(lines) - 1 == len(run.steps) <= 7  # one progress line per step (after the first line)
    md = markdown(run, ["-k", "test_a"])
    assert md.startswith(f"## pytest-gpuperf bisect: `{shas[0][:7]}..{shas[-1][:7]}`")
    assert json_dict(run, [])["benchmarks"][KEY]["culprits"][0]["first_bad"] == shas[11]


def test_a_first_step_already_measured_is_not_measured_again(tmp_path: Path) -> None:
    """``known`` (the A/B confirmation measured BAD against GOOD already): the search starts from
    those probes, and its first progress line says where they came from."""
    shas = history(tmp_path, [1.0] * 3 + [1.3] * 2)
    asked: list = []
    lines: list[str] = []
    known = {KEY: Probe(0, 0, Call.BAD, 1.3, (1.27, 1.33), "regressed")}
    run = bisector(tmp_path, lines, measure=scripted(tmp_path, asked)).run(shas[0], "HEAD", keys={KEY}, known=known)
    assert (shas[0], shas[-1]) not in asked and asked  # the rest of the search measured as before
    assert run.outcomes[KEY].culprits[0].first_bad == 3
    assert run.steps[0].probes[KEY].ratio == 1.3 and (run.steps[0].a, run.steps[0].b) == (0, 4)
    assert lines[1].startswith(f"bisect: step 1: {shas[-1][:7]} (4/4) vs GOOD {shas[0][:7]}: test_a 1.300x")
    assert lines[1].endswith(" (measured by the A/B confirmation)")


def test_untracked_files_count_as_uncommitted_only_when_asked(tmp_path: Path) -> None:
    from pytest_gpuperf.bisect.run import uncommitted

    history(tmp_path, [1.0])
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"")
    assert not uncommitted(tmp_path) and not uncommitted(tmp_path, untracked=True)  # bytecode caches aside
    (tmp_path / "new.py").write_text("")
    assert not uncommitted(tmp_path) and uncommitted(tmp_path, untracked=True)


def test_two_regressions_the_larger_first_the_other_a_further_suspect(tmp_path: Path) -> None:
    shas = history(tmp_path, [1.0] * 3 + [1.1] * 6 + [1.43] * 3)  # +10% at 3, +30% at 9
    run = bisector(tmp_path).run(shas[0], shas[-1])
    o = run.outcomes[KEY]
    assert [c.first_bad for c in o.culprits] == [9, 3]
    text = "\n".join(summary_lines(run, []))
    assert f"first bad commit {shas[9][:7]}" in text and f"further suspect: {shas[3][:7]} 'change 3'" in text


def test_a_commit_that_cannot_run_is_skipped_and_named(tmp_path: Path) -> None:
    shas = history(tmp_path, [1.0] * 5 + [None] + [1.3] * 6)  # 12 commits; 5, the first middle, does not import
    run = bisector(tmp_path).run(shas[0], shas[-1])
    o = run.outcomes[KEY]
    assert o.culprits[0].first_bad == 6 and o.culprits[0].skipped == (5,)
    text = "\n".join(summary_lines(run, []))
    assert "skip (ImportError: no module named 'x')" in text
    assert f"could not be measured (the change may be in one of them): {shas[5][:7]}" in text


def test_a_spread_out_slowdown_is_reported_as_such(tmp_path: Path) -> None:
    shas = history(tmp_path, [1.0 * 1.03 ** k for k in range(10)])  # +3% per commit
    run = bisector(tmp_path).run(shas[0], shas[-1])
    text = "\n".join(summary_lines(run, []))
    assert "the slowdown is spread over several commits or below the resolution here" in text
    assert "first bad commit" not in text
    assert exit_code(run) == EXIT_NOT_FOUND


def test_bad_not_slower_says_so(tmp_path: Path) -> None:
    shas = history(tmp_path, [1.0] * 8)
    asked: list = []
    run = bisector(tmp_path, measure=scripted(tmp_path, asked)).run(shas[0], "HEAD")
    assert asked == [(shas[0], shas[-1])]  # one step: nothing to search
    assert "is not slower than GOOD" in "\n".join(summary_lines(run, []))
    assert exit_code(run) == EXIT_NOT_FOUND


def test_bad_against_good_inconclusive_names_no_commit(tmp_path: Path) -> None:
    shas = history(tmp_path, [1.0] * 7 + [1.03])  # +3%: inside the scripted unclear band
    run = bisector(tmp_path).run(shas[0], "HEAD")
    text = "\n".join(summary_lines(run, []))
    assert f"BAD {shas[-1][:7]} against GOOD {shas[0][:7]} stayed inconclusive after measuring more" in text
    assert "no commit is named" in text and exit_code(run) == EXIT_NOT_FOUND


def test_the_time_cap_stops_the_search_with_the_range_narrowed_so_far(tmp_path: Path) -> None:
    shas = history(tmp_path, [1.0] * 5 + [1.3] * 5)
    asked: list = []
    run = bisector(tmp_path, measure=scripted(tmp_path, asked), time_cap_s=1e-9).run(shas[0], "HEAD")
    assert asked == [(shas[0], shas[-1])]  # BAD against GOOD, then no step starts
    text = "\n".join(summary_lines(run, []))
    assert f"between {shas[0][:7]} and {shas[-1][:7]}: not narrowed further, the time cap was reached (1e-09 s)" in text


def test_reversed_unrelated_and_unknown_revisions_are_clear_usage_errors(tmp_path: Path) -> None:
    shas = history(tmp_path, [1.0] * 4)
    b = bisector(tmp_path)
    with pytest.raises(BisectError, match=r"newer than BAD.*reversed.*gpuperf bisect"):
        b.run(shas[3], shas[0])
    with pytest.raises(BisectError, match="the same commit"):
        b.run("HEAD", shas[3])
    with pytest.raises(BisectError, match=r"GOOD 'nope' is not a commit"):
        b.run("nope", "HEAD")
    git(tmp_path, "checkout", "-q", "--orphan", "other")
    (tmp_path / "timings.json").write_text(json.dumps({"ms": 1.0}))
    other = commit(tmp_path, "unrelated root")
    with pytest.raises(BisectError, match=r"not an ancestor of BAD.*git merge-base"):
        b.run(shas[0], other)


def test_good_on_a_merged_branch_is_not_on_the_first_parent_line(tmp_path: Path) -> None:
    shas = history(tmp_path, [1.0] * 3)
    git(tmp_path, "checkout", "-q", "-b", "side", shas[0])
    (tmp_path / "side.txt").write_text("x")
    side = commit(tmp_path, "side work")
    git(tmp_path, "checkout", "-q", "-")
    git(tmp_path, "merge", "-q", "--no-ff", "-m", "merge side", "side")
    with pytest.raises(BisectError, match="only through a merged branch"):
        bisector(tmp_path).run(side, "HEAD")


def test_a_dirty_working_tree_is_noted_and_not_measured(tmp_path: Path) -> None:
    shas = history(tmp_path, [1.0] * 4 + [1.3] * 4)
    (tmp_path / "timings.json").write_text(json.dumps({"ms": 9.0}))  # uncommitted: must not count
    run = bisector(tmp_path).run(shas[0], "HEAD")
    assert run.outcomes[KEY].culprits[0].first_bad == 4
    assert "note: the working tree has uncommitted changes: they are not measured" in "\n".join(summary_lines(run, []))


def test_a_shallow_clone_without_good_says_to_fetch_the_history(tmp_path: Path) -> None:
    origin = tmp_path / "origin"
    origin.mkdir()
    shas = history(origin, [1.0] * 6)
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", "--depth", "2", f"file://{origin}", str(clone))
    with pytest.raises(BisectError, match=r"GOOD .* is not a commit.*shallow.*fetch-depth: 0"):
        Bisector(clone, clone, [], progress=lambda s: None, measure=scripted(clone)).run(shas[0], "HEAD")


def test_ctrl_c_leaves_no_worktree(tmp_path: Path) -> None:
    shas = history(tmp_path, [1.0] * 4 + [1.3] * 4)
    inner = scripted(tmp_path)
    steps = []

    def measure(a: str, b: str, keys):
        b_ = holder[0]
        b_.worktrees(a), b_.worktrees(b)  # as the real A/B step does
        steps.append((a, b))
        if len(steps) == 3:
            raise KeyboardInterrupt
        return inner(a, b, keys)

    holder = [bisector(tmp_path, measure=measure)]
    with pytest.raises(KeyboardInterrupt):
        holder[0].run(shas[0], "HEAD")
    assert len(steps) == 3
    assert ".gpuperf" not in git(tmp_path, "worktree", "list")
    assert not [p for p in (tmp_path / ".gpuperf" / "bisect").iterdir() if p.name != "logs"]


def test_an_interrupt_during_git_worktree_add_leaves_no_part_of_it(tmp_path: Path, monkeypatch) -> None:
    """SIGTERM or Ctrl-C while ``git worktree add`` runs (the half-made worktree already has its
    ``.git``; git is killed): closing the worktrees removes that part too (a CI run of the real
    SIGTERM test hit this window)."""
    import pytest_gpuperf.bisect.run as run_mod
    from pytest_gpuperf.bisect.run import Worktrees

    shas = history(tmp_path, [1.0, 1.0])
    real_git = run_mod.git

    def interrupted(repo, *args):
        if args[:2] == ("worktree", "add"):
            real_git(repo, *args)  # the worktree exists, as far as git got before the signal,
            real_git(repo, "worktree", "lock", args[-2])  # and git still holds it locked (CI saw that)
            raise KeyboardInterrupt
        return real_git(repo, *args)

    monkeypatch.setattr(run_mod, "git", interrupted)
    with pytest.raises(KeyboardInterrupt):
        with Worktrees(tmp_path) as trees:
            trees(shas[0])
    assert ".gpuperf" not in git(tmp_path, "worktree", "list")
    assert not [p for p in (tmp_path / ".gpuperf" / "bisect").iterdir() if p.name != "logs"]
