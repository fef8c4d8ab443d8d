"""A temporary git repository for end-to-end tests of the A/B machinery (``--gpuperf-ab`` and the
A/B confirmation against a baseline's commit)."""

from __future__ import annotations

import subprocess
from pathlib import Path


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
