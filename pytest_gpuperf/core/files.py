"""Files written safely: atomic replacement (:func:`write_atomic`), its orphaned temporary files,
and output folders (stdlib only).

Every file the plugin writes (baselines, reports, A/B results, the shared reference workloads) goes
through :func:`write_atomic`, so a reader sees either the old or the new file, never a partial one.
"""

from __future__ import annotations

import os
import re
import stat
import tempfile
import time
from pathlib import Path


#: A temporary file of :func:`write_atomic` older than this (seconds) is an orphan of a killed
#: write: the next write of the same target removes it. Younger ones may belong to a running writer.
STALE_TEMP_SECONDS = 3600.0


#: ``.<target name>.<8 random characters of tempfile.mkstemp>.tmp``
_TEMP_NAME = re.compile(r"\.(?P<target>.+)\.[a-z0-9_]{8}\.tmp")


def is_temp_file_name(name: str, target_name: str | None = None) -> bool:
    """Whether ``name`` is a temporary file name of :func:`write_atomic` (of ``target_name``, if given)."""
    m = _TEMP_NAME.fullmatch(name)
    return m is not None and (target_name is None or m.group("target") == target_name)


def find_temp_files(root: os.PathLike[str] | str) -> list[tuple[Path, int, float]]:
    """The temporary files of :func:`write_atomic` under ``root``: ``(path, size in bytes, age in s)``, sorted."""
    now = time.time()
    found = []
    for folder, _dirs, names in os.walk(root):
        for name in names:
            if not is_temp_file_name(name):
                continue
            path = Path(folder, name)
            try:
                st = path.lstat()
            except OSError:  # removed meanwhile
                continue
            if stat.S_ISREG(st.st_mode):
                found.append((path, st.st_size, max(0.0, now - st.st_mtime)))
    return sorted(found)


def _remove_stale_temps(target: Path) -> None:
    """Remove temporary files of ``target`` older than :data:`STALE_TEMP_SECONDS` (orphans of killed writes).

    Never a younger one: a concurrent writer may still own it. Errors are ignored (another
    writer may remove the same orphan first).
    """
    cutoff = time.time() - STALE_TEMP_SECONDS
    try:
        with os.scandir(target.parent) as it:
            for e in it:
                if not is_temp_file_name(e.name, target.name):
                    continue
                try:
                    if e.is_file(follow_symlinks=False) and e.stat(follow_symlinks=False).st_mtime < cutoff:
                        os.unlink(e.path)
                except OSError:
                    pass
    except OSError:
        pass


def write_atomic(path: os.PathLike[str] | str, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder and ``os.replace``.

    Readers see either the old or the new file, never a partial one. When ``path`` is a symbolic
    link (or lies in a linked folder), the link's final target is written, atomically (the
    temporary file is made in the target's folder), and the link stays a link. Temporary files
    of the same target left by killed writes and older than :data:`STALE_TEMP_SECONDS` are removed.
    """
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    target = Path(os.path.realpath(p))  # through links: replacing the link itself would cut it
    target.parent.mkdir(parents=True, exist_ok=True)  # a dangling link's folder
    try:
        mode = target.stat().st_mode & 0o777  # keep an existing file's permissions
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask  # what open() would give a new file
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        os.chmod(tmp, mode)
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _remove_stale_temps(target)


def ensure_output_dir(path: Path) -> None:
    """Create the folder ``path``; when it lies in a ``.gpuperf`` folder, that folder gets a
    ``.gitignore`` of ``*`` (as pytest does for ``.pytest_cache``), so nothing in it is committed."""
    for folder in (path, *path.parents):
        if folder.name == ".gpuperf":
            folder.mkdir(parents=True, exist_ok=True)
            ignore = folder / ".gitignore"
            if not ignore.exists():
                ignore.write_text("# created by pytest-gpuperf\n*\n")
            break
    path.mkdir(parents=True, exist_ok=True)
