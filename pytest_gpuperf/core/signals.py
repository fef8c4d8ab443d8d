"""SIGTERM as an exception, for the code that must clean up when a CI job's timeout or a cancelled
job stops it (worker processes, worktrees): as Ctrl-C raises ``KeyboardInterrupt``, SIGTERM raises
:class:`Terminated` inside :func:`sigterm_raises`. Pure: the standard library only."""

from __future__ import annotations

import contextlib
import signal
from typing import Any, Iterator


class Terminated(SystemExit):
    """SIGTERM as an exception, with exit code 128 + 15 (what an uncaught one exits with)."""


_HANDLED = [0]  # SIGTERMs raise_terminated handled in this process


def raise_terminated(signum: int, frame: Any) -> None:
    """A SIGTERM handler: raises :class:`Terminated` (and counts it: :func:`terminations`)."""
    _HANDLED[0] += 1
    raise Terminated(128 + signum)


def terminations() -> int:
    """How many SIGTERMs :func:`raise_terminated` handled in this process: code during which Python
    may drop the handler's exception (an at-fork callback prints and drops it) compares the count
    before and after."""
    return _HANDLED[0]


def stop_reason(exc: BaseException) -> str:
    """How a run was stopped, for messages: ``"SIGTERM"`` (:class:`Terminated`) or ``"Ctrl-C"``."""
    return "SIGTERM" if isinstance(exc, Terminated) else "Ctrl-C"


@contextlib.contextmanager
def sigterm_raises() -> Iterator[None]:
    """Within it SIGTERM raises :class:`Terminated` (main thread only; elsewhere nothing changes);
    the previous handler is restored afterwards."""
    try:
        previous = signal.signal(signal.SIGTERM, raise_terminated)
    except ValueError:  # not the main thread
        previous = None
    try:
        yield
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
