"""A temporary git repository for end-to-end tests of the A/B machinery (``--gpuperf-ab`` and the
A/B confirmation against a baseline's commit)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any


def git(repo: Path, *args: str) -> str:
    """Run ``git -C repo args`` and return its stripped output (raises on failure)."""
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def init(repo: Path) -> None:
    """``git init`` with a committer identity of its own."""
    git(repo, "init", "-q")
    git(repo, "config", "user.email", "t@t")
    git(repo, "config", "user.name", "t")


def commit(repo: Path, message: str) -> str:
    """Commit everything in ``repo``; returns the new commit's sha."""
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", message)
    return git(repo, "rev-parse", "HEAD")


def scripted_project(pytester: Any, test_x: str, ini: str = "") -> Path:
    """A git repository (:func:`init`) in ``pytester.path`` holding a scripted-timing test project:
    an ini (``[pytest]`` and the lines of ``ini``), the scripted measurer's conftest and
    ``test_x.py``; the caller writes ``timings.json`` and commits."""
    from pytest_gpuperf._testing import SCRIPTED_CONFTEST

    top = pytester.path
    init(top)
    pytester.makeini("[pytest]\n" + ini)
    pytester.makeconftest(SCRIPTED_CONFTEST)
    pytester.makepyfile(test_x=test_x)
    return top


def copy_tree(src: Path, dst: Path) -> None:
    """Copy the whole folder ``src`` into ``dst``, ``.git`` included: a repository without linked
    worktrees holds no absolute path, so the copy is a repository of its own (end-to-end tests
    share one expensive setup, e.g. baselines recorded by worker processes, across their tests)."""
    import shutil

    shutil.copytree(src, dst, symlinks=True, dirs_exist_ok=True)
