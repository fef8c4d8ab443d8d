"""How the plugin starts and stops its worker processes when they are torchrun launches
(``--gpuperf-nproc``, issue 35): the command prefix (:func:`launcher`, torch's own launcher) and
the stop that leaves no rank behind (:func:`stop`). Stdlib only: nothing here imports torch.

torch elastic's agent starts every rank in a session of its own, so a signal to the launch's
process group does not reach the ranks; :func:`stop` asks the agent first (SIGTERM: it stops its
ranks) and then kills what it had started (found in ``/proc`` on Linux).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Callable

def torchrun(nproc: int) -> list[str]:
    """``python -m torch.distributed.run --standalone --nproc-per-node=N``: torch's own launcher
    (as ``torchrun``) for ``nproc`` ranks on this node, before its script or ``-m module``."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"]


def launcher(nproc: int | None = None) -> list[str]:
    """The command a worker process's pytest arguments follow: ``python -m pytest``, or with
    ``nproc`` (``--gpuperf-nproc N``, N >= 2) a whole torchrun launch of N ranks on this node,
    ``python -m torch.distributed.run --standalone --nproc-per-node N -m pytest`` (torch's own
    launcher, as ``torchrun``; its rank 0 reports the launch's results, the slowest rank's time)."""
    if not nproc:
        return [sys.executable, "-m", "pytest"]
    return [*torchrun(nproc), "-m", "pytest"]


#: How long a torchrun launch that is stopped gets to stop its ranks (s): torch elastic's agent, on
#: SIGTERM, sends its workers SIGTERM and SIGKILLs them after 30 s.
STOP_GRACE_S = 40.0


def stop(proc: subprocess.Popen, grace_s: float = STOP_GRACE_S) -> None:
    """Stop a worker process and wait for it. A plain worker is killed. A torchrun launch (started
    in a session of its own, :func:`launcher`) gets SIGTERM first, so that its agent stops its
    ranks (torch elastic starts each rank in a session of its own, out of reach of a signal to the
    launch's process group), then, after ``grace_s`` s, SIGKILL for it and for every process it had
    started that is still there (:func:`_descendants`), so that no rank outlives it."""
    try:
        own_group = os.getpgid(proc.pid) == proc.pid and proc.pid != os.getpgrp()
    except ProcessLookupError:
        own_group = False
    if not own_group:
        proc.kill()
        proc.wait()
        return
    family = _descendants(proc.pid)
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        family |= _descendants(proc.pid)
    for pid, started in family:
        if _start_time(pid) == started:  # still the same process (not a pid used again)
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _start_time(pid: int) -> str | None:
    """The start time of process ``pid`` (Linux ``/proc/<pid>/stat`` field 22), None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[19]
    except (OSError, IndexError):
        return None


def _descendants(root: int) -> set[tuple[int, str]]:
    """Every process below ``root``, as ``(pid, start time)`` (from ``/proc``; empty where there is none)."""
    children: dict[int, list[int]] = {}
    try:
        pids = [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rpartition(")")[2].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(pid)
    found: set[tuple[int, str]] = set()
    todo = list(children.get(root, ()))
    while todo:
        pid = todo.pop()
        started = _start_time(pid)
        if started is not None:
            found.add((pid, started))
        todo.extend(children.get(pid, ()))
    return found


#: The signals held while a worker is forked (:func:`popen_dying_with_parent`).
HELD_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT})


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` for a worker process (Linux): it gets SIGTERM when the process that started it
    dies, even by SIGKILL, where no handler of that process runs (``prctl(PR_SET_PDEATHSIG)``),
    so that no worker measures on for nobody (issue 46: a killed coordinator's workers ran on;
    the replicate and instruction workers and both A/B sides use it). It checks that its parent
    did not die before the call, and unblocks :data:`HELD_SIGNALS` in the child. None elsewhere
    (no such call). Start workers with :func:`popen_dying_with_parent`, not with this alone.

    The signal follows the *thread* that started the child: call it from a thread that outlives
    the worker (the session's own)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved before the fork
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, HELD_SIGNALS)  # held by the parent across the fork
        prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent died before the call
            os.kill(os.getpid(), signal.SIGTERM)

    return preexec


def popen_dying_with_parent(cmd: list[str], **kwargs: object) -> subprocess.Popen:
    """``subprocess.Popen(cmd, **kwargs)`` with :func:`die_with_parent`'s ``preexec_fn``, and
    SIGTERM and SIGINT held in this thread while it forks. A ``preexec_fn`` makes Popen fork
    through Python's at-fork callbacks (logging's among them), and the exception our SIGTERM
    handler raises inside one of those is printed and dropped (``Exception ignored in
    _releaseLock``): a CI job's SIGTERM at that moment was lost and the run went on to its end.
    Held, the signal arrives as Popen returns; one that another thread took and whose exception was
    dropped all the same (:func:`pytest_gpuperf.core.signals.terminations` moved) is raised again
    here. Raises what Popen raises (``OSError``) and :class:`~pytest_gpuperf.core.signals.Terminated`."""
    from pytest_gpuperf.core.signals import Terminated, terminations

    preexec = die_with_parent()
    if preexec is None:
        return subprocess.Popen(cmd, **kwargs)  # type: ignore[call-overload]
    before = terminations()
    held = signal.pthread_sigmask(signal.SIG_BLOCK, HELD_SIGNALS)
    try:
        proc = subprocess.Popen(cmd, preexec_fn=preexec, **kwargs)  # type: ignore[call-overload]
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
    if terminations() != before:  # delivered to another thread and handled in an at-fork callback: dropped
        raise Terminated(128 + signal.SIGTERM)
    return proc
