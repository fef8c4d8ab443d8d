"""Git, the one place the plugin runs it: the baselines' commit and dirty state, the A/B worktrees'
revisions, ``gpuperf bisect``'s first-parent line and the dashboard's commit subjects all call
:func:`run` (stdlib only).

:func:`run` raises :class:`GitError` with git's own message; :func:`head_commit` and
:func:`is_dirty` answer None where there is no git checkout (or no git), as a session that only
records its commit must not fail outside a repository.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Iterable

#: Seconds one git command may take (a ``git worktree add`` of a large repository included).
TIMEOUT_S = 120


class GitError(RuntimeError):
    """A git command failed or could not run; the message is ``git <args>: <git's message>``."""


def run(repo: str | Path, *args: str, timeout: float = TIMEOUT_S, strip: bool = True) -> str:
    """``git -C repo <args>``: its standard output, stripped (``strip=False``: as git wrote it, e.g.
    ``status --porcelain``, whose lines start with a space). Raises :class:`GitError` (with git's
    message) when git fails, times out or is missing."""
    try:
        out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError) as exc:
        raise GitError(f"git {' '.join(args)} failed: {exc}") from None
    if out.returncode != 0:
        raise GitError(f"git {' '.join(args)}: {out.stderr.strip() or out.stdout.strip()}")
    return out.stdout.strip() if strip else out.stdout


def head_commit(root: str | Path) -> str | None:
    """``git rev-parse HEAD`` in ``root``, or None when not a git checkout (or git is missing).
    Not cached: a commit can change between two sessions of one process (pytester)."""
    try:
        return run(root, "rev-parse", "HEAD", timeout=5) or None
    except GitError:
        return None


def is_dirty(root: str | Path, ignore: str | Path | None = None) -> bool | None:
    """Whether the checkout at ``root`` has uncommitted changes to tracked files, leaving out those
    under the folder ``ignore`` (the baseline folder, which an update run writes); None when not a
    git checkout (or git is missing)."""
    try:
        top = run(root, "rev-parse", "--show-toplevel", timeout=5)
        status = run(root, "status", "--porcelain", "--untracked-files=no", timeout=30, strip=False)
    except GitError:
        return None
    skip = None
    if ignore:
        skip = os.path.relpath(os.path.realpath(ignore), os.path.realpath(top)).replace(os.sep, "/")
    for line in status.splitlines():
        path = line[3:].split(" -> ")[-1].strip('"')
        if skip and not skip.startswith("..") and (path == skip or path.startswith(skip.rstrip("/") + "/")):
            continue
        return True
    return False


#: Where CI systems name the branch of a detached checkout (GitHub Actions: the PR's head branch,
#: else the ref; GitLab CI), read in this order.
CI_BRANCH_VARIABLES = ("GITHUB_HEAD_REF", "GITHUB_REF_NAME", "CI_COMMIT_REF_NAME")


def current_branch(root: str | Path) -> str | None:
    """The checked-out branch at ``root`` (``git rev-parse --abbrev-ref HEAD``); in a detached
    checkout (CI's usual one) the branch CI names (:data:`CI_BRANCH_VARIABLES`), else None. None
    when not a git checkout."""
    try:
        name = run(root, "rev-parse", "--abbrev-ref", "HEAD", timeout=5)
    except GitError:
        return None
    if name and name != "HEAD":
        return name
    return next((os.environ[v] for v in CI_BRANCH_VARIABLES if os.environ.get(v, "").strip()), None)


def commit_subjects(root: str | Path, commits: Iterable[str | None], chunk: int = 500) -> dict[str, tuple[str, str]]:
    """``{commit: (subject, committer date ISO 8601)}`` of those ``commits`` (full or abbreviated
    shas, the keys as given) that the checkout at ``root`` knows (``git log --no-walk --ignore-missing``, ``chunk`` shas per call); commits it
    does not have, and values that are not hex shas, are left out. Empty when ``root`` is not a
    git checkout or git is missing: the dashboard's hover then shows no subject."""
    shas = sorted({c for c in commits if c and re.fullmatch(r"[0-9a-fA-F]{7,64}", c)})
    found: dict[str, tuple[str, str]] = {}
    for i in range(0, len(shas), chunk):
        try:
            out = run(root, "log", "--no-walk=unsorted", "--ignore-missing", "--format=%H%x00%s%x00%cI",
                      *shas[i:i + chunk], timeout=30)
        except GitError:
            return found
        for line in out.splitlines():
            parts = line.split("\0")
            if len(parts) == 3:
                found[parts[0]] = (parts[1], parts[2])
    known = {}
    for c in shas:  # an abbreviated sha: the full one that starts with it
        full = c if c in found else next((f for f in found if f.startswith(c.lower())), None)
        if full is not None:
            known[c] = found[full]
    return known
