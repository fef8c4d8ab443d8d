"""glibc's allocator thresholds in the worker processes the plugin starts (issue 45).

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
``gpuperf_allocator = inherit`` (ini) leaves the environment alone.

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
    """This process's allocator thresholds as the fingerprint records them: ``"MALLOC_MMAP_THRESHOLD_=…
    MALLOC_TRIM_THRESHOLD_=…"`` (those set) or :data:`ADAPTIVE`."""
    env = os.environ if environ is None else environ
    names = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_ARENA_MAX")
    set_ = [f"{k}={env[k]}" for k in names if env.get(k)]
    tunables = [t for t in env.get("GLIBC_TUNABLES", "").split(":") if t.startswith("glibc.malloc.")]
    set_ += [f"GLIBC_TUNABLES={':'.join(tunables)}"] if tunables else []
    return " ".join(set_) if set_ else ADAPTIVE
