"""Argument types the ``gpuperf`` subcommands share (argparse ``type=`` callables): a bad value is
argparse's usage error (exit code 2) naming the option, the value and what is accepted."""

from __future__ import annotations

import argparse
from typing import Callable


def at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: a whole number >= ``minimum`` (``--processes 0`` -> ``expected a whole
    number >= 1, got '0'``)."""

    def whole_number(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected a whole number >= {minimum}, got {text!r}")
        return value

    whole_number.__name__ = f"whole number >= {minimum}"
    return whole_number


#: Where a project's history store is when ``--history`` is not given (relative to a folder).
DEFAULT_HISTORY = ".gpuperf/history.sqlite"
#: ``--history``'s help, shared by the subcommands.
HISTORY_HELP = ("the store: sqlite:///PATH, a path (SQLite) or postgresql://... (default: the nearest "
                f"{DEFAULT_HISTORY} in this folder or a parent, as git finds its repository)")


def add_history_option(parser: argparse.ArgumentParser) -> None:
    """``--history URL`` (default None: :func:`history_url` finds the project's store)."""
    parser.add_argument("--history", default=None, metavar="URL", help=HISTORY_HELP)


def history_url(given: str | None, reading: bool = True) -> tuple[str | None, str | None]:
    """The store a subcommand opens: ``given`` (``--history``), else the nearest
    :data:`DEFAULT_HISTORY` in the current folder or a parent (issue 46: run from a subfolder, a
    reading command finds the project's store instead of creating one there). Returns ``(url,
    None)``, or for a reading command with none found ``(None, why)`` naming where it looked; a
    writing command (``reading=False``) gets the current folder's then."""
    from pathlib import Path

    if given is not None:
        return given, None
    here = Path.cwd()
    for folder in (here, *here.parents):
        if (folder / DEFAULT_HISTORY).is_file():
            return str(folder / DEFAULT_HISTORY), None
    if not reading:
        return str(here / DEFAULT_HISTORY), None
    return None, (f"no history store: looked for {DEFAULT_HISTORY} in {here} and its parents (runs are recorded "
                  "by pytest --gpuperf, or brought in with gpuperf history import; or give --history URL)")
