"""``environment.git_commit`` / ``git_dirty``: what a baseline records about the checkout it was
measured in (the A/B confirmation re-measures that commit only when it was clean)."""

from __future__ import annotations

from pathlib import Path

from gitrepo import commit, init
from pytest_gpuperf.core.git import head_commit as git_commit, is_dirty as git_dirty


def test_dirty_means_uncommitted_changes_to_tracked_files_outside_the_baselines(tmp_path: Path) -> None:
    assert git_dirty(str(tmp_path)) is None and git_commit(str(tmp_path)) is None  # not a git checkout
    init(tmp_path)
    (tmp_path / "code.py").write_text("x = 1\n")
    (tmp_path / "baselines").mkdir()
    (tmp_path / "baselines" / "b.json").write_text("{}\n")
    sha = commit(tmp_path, "first")
    assert git_commit(str(tmp_path)) == sha
    assert git_dirty(str(tmp_path), ignore=str(tmp_path / "baselines")) is False
    (tmp_path / "new_untracked.py").write_text("y = 2\n")  # untracked files do not count
    assert git_dirty(str(tmp_path)) is False
    (tmp_path / "baselines" / "b.json").write_text('{"updated": true}\n')  # an update run writes these
    assert git_dirty(str(tmp_path), ignore=str(tmp_path / "baselines")) is False
    assert git_dirty(str(tmp_path)) is True
    (tmp_path / "code.py").write_text("x = 2\n")
    assert git_dirty(str(tmp_path), ignore=str(tmp_path / "baselines")) is True
    sub = tmp_path / "pkg"
    sub.mkdir()
    assert git_dirty(str(sub), ignore=str(tmp_path / "baselines")) is True  # from a folder inside the checkout
