"""glibc's allocator thresholds in the processes that time (issue 45): the worker processes the
plugin starts (environment variables) and a process that times in itself (``mallopt``).

glibc's ``malloc`` serves a block above its mmap threshold with a fresh ``mmap`` (page faults and
zeroing on every call) and below it from the heap, and it *moves* that threshold up each time such
a block is freed (the "dynamic mmap threshold", up to 32 MiB on 64-bit; ``mallopt(3)``). Which
mode a call's large allocations run in therefore depends on what the process allocated and freed
before: two worker processes timing the same allocation-heavy call can differ several-fold for their
whole life. On tensordict's suite that was the between-process spread that no number of processes
decided (docs/verdicts.md, "The allocator's thresholds in the worker processes").

Setting ``MALLOC_MMAP_THRESHOLD_`` turns the adaptation off (``mallopt(3)``: setting any of the
thresholds disables it); with both thresholds at 4 GiB every large block comes from the heap and
stays there, so every process runs in the same mode. ``tox -e perf`` has set them for this project's
own CPU benchmarks, and the A/B's profiling pairs since issue 47 (whatever the mode). :func:`for_workers` sets them, for
the time the coordinator measures, in the environment every worker inherits (replicate, extras,
A/B and bisection workers, torchrun launches, the instruction worker); the session's own process
and its tests keep the environment they started with. A value the user set stands, and
``gpuperf_allocator = inherit`` (ini) leaves the environment alone. A process that times in itself
(``--gpuperf-processes 1``) never sees that environment: :func:`fix_in_process` pins the same
thresholds there with ``mallopt(3)``. torchrun ranks keep theirs as they are (measured, not adopted).

Stdlib only.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator, MutableMapping

#: The thresholds (bytes, as glibc reads them from the environment) that pin the allocator's mode.
FIXED = {"MALLOC_MMAP_THRESHOLD_": "4294967296", "MALLOC_TRIM_THRESHOLD_": "4294967296"}

#: The accepted values of ``gpuperf_allocator``: ``fixed`` (the default: :data:`FIXED` where unset)
#: or ``inherit`` (the workers get this environment as it is).
MODES = ("fixed", "inherit")

#: What the fingerprint says where no threshold is set (glibc moves its mmap threshold itself).
ADAPTIVE = "glibc adaptive"


def parse_mode(value: object, where: str = "ini gpuperf_allocator") -> str:
    """``value`` as one of :data:`MODES` (empty or None: ``"fixed"``). Raises ``ValueError`` naming
    ``where`` and the accepted values for anything else."""
    text = str(value or "").strip().lower() or "fixed"
    if text not in MODES:
        raise ValueError(f"{where} = {value!r}: expected one of {', '.join(MODES)} (fixed: glibc's mmap and trim "
                         f"thresholds set for the worker processes; inherit: their environment as it is)")
    return text


@contextmanager
def for_workers(mode: str, environ: MutableMapping[str, str] | None = None) -> Iterator[str]:
    """With ``mode`` ``"fixed"``: :data:`FIXED`'s variables that ``environ`` (default ``os.environ``)
    does not set are set in it while the block runs, and removed again after it (also when it
    raises), so that the processes started inside inherit them and nothing after does. Yields the
    thresholds those processes get (:func:`describe`)."""
    env = os.environ if environ is None else environ
    added = {k: v for k, v in FIXED.items() if k not in env} if mode == "fixed" else {}
    env.update(added)
    try:
        yield describe(env)
    finally:
        for key in added:
            env.pop(key, None)


def describe(environ: MutableMapping[str, str] | None = None) -> str:
    """The allocator thresholds as the fingerprint records them: ``"MALLOC_MMAP_THRESHOLD_=…
    MALLOC_TRIM_THRESHOLD_=…"`` (those ``environ`` sets); for this process (``environ`` None) where
    its environment sets none, what :func:`fix_in_process` set (:data:`IN_PROCESS_TEXT`); else
    :data:`ADAPTIVE`."""
    env = os.environ if environ is None else environ
    names = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_ARENA_MAX")
    set_ = [f"{k}={env[k]}" for k in names if env.get(k)]
    tunables = [t for t in env.get("GLIBC_TUNABLES", "").split(":") if t.startswith("glibc.malloc.")]
    set_ += [f"GLIBC_TUNABLES={':'.join(tunables)}"] if tunables else []
    if set_:
        return " ".join(set_)
    return IN_PROCESS_TEXT if environ is None and _fixed_here else ADAPTIVE


#: The thresholds :func:`fix_in_process` sets (bytes): ``mallopt`` takes an ``int``, so 2 GiB - 1
#: rather than :data:`FIXED`'s 4 GiB; either is above any block a benchmark allocates.
IN_PROCESS = 2 ** 31 - 1
#: How the fingerprint names them.
IN_PROCESS_TEXT = f"mallopt M_MMAP_THRESHOLD={IN_PROCESS} M_TRIM_THRESHOLD={IN_PROCESS}"
#: ``mallopt(3)``'s parameter numbers (glibc's malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_fixed_here = False


def fix_in_process(mode: str, environ: MutableMapping[str, str] | None = None) -> str | None:
    """In a process that times in itself (``--gpuperf-processes 1``; not yet a torchrun rank: see
    docs/verdicts.md), with ``mode``
    ``"fixed"``: pin glibc's mmap and trim thresholds with ``mallopt(3)`` (setting them turns the
    dynamic threshold off, as the environment variables do for the worker processes), unless the
    environment (default ``os.environ``) sets any malloc threshold or tunable already (yours
    stand). Returns what was set (:data:`IN_PROCESS_TEXT`), or None: nothing to do, not glibc, or
    ``mallopt`` refused. Measured on this project's VM (2026-12-07): ``t * 2 + 1`` of a 1.5 MB
    float tensor ran at about 1,000 µs in 6 of 8 fresh processes and 53-64 µs in 2; with this
    call after importing torch, 47-54 µs in 8 of 8."""
    global _fixed_here
    env = os.environ if environ is None else environ
    if mode != "fixed" or describe(env) != ADAPTIVE:
        return None
    if _fixed_here:
        return IN_PROCESS_TEXT
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018  (glibc only: musl and others have no such thresholds)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return None
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    if mallopt(_M_MMAP_THRESHOLD, IN_PROCESS) != 1 or mallopt(_M_TRIM_THRESHOLD, IN_PROCESS) != 1:
        return None
    _fixed_here = True
    return IN_PROCESS_TEXT
