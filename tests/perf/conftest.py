"""Sizing for the bundled perf suite: small on a CPU, large enough to fill an H100 on CUDA.

Fault injection for the studies under ``benchmarks/`` (off unless the variable is set):
``GPUPERF_INJECT="sync:test_gemm"`` adds one ``.item()`` (a host-device sync) to every call of the
benchmarks whose test id contains ``test_gemm``; ``GPUPERF_INJECT="slowdown:0.2:test_gemm"`` makes
each of their calls 20% slower (a busy wait of 0.2x the call's own duration, after a device sync).
Several injections are separated by ``,``. Under ``--gpuperf-ab`` they apply to the working tree's
side (B) only: a worker of side A (``side`` "A" in ``GPUPERF_AB_WORKER``) ignores them, so an A/B run with the
variable set compares unchanged code (A) with injected code (B).
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable

import pytest


@pytest.fixture
def on_cuda(gpu_bench) -> bool:
    """True when the suite runs on a CUDA device (sizes then scale up)."""
    return gpu_bench.device.type == "cuda"


def _injections(test_id: str) -> list[tuple[str, float]]:
    """(kind, amount) of the injections in ``GPUPERF_INJECT`` that match ``test_id``."""
    out = []
    from pytest_gpuperf.core.environ import ab_worker

    if ab_worker().get("side") == "A":
        return out
    for spec in filter(None, (s.strip() for s in os.environ.get("GPUPERF_INJECT", "").split(","))):
        parts = spec.split(":")
        if parts[0] == "sync" and len(parts) == 2 and parts[1] in test_id:
            out.append(("sync", 1.0))
        elif parts[0] == "slowdown" and len(parts) == 3 and parts[2] in test_id:
            out.append(("slowdown", float(parts[1])))
        elif parts[0] not in ("sync", "slowdown") or len(parts) not in (2, 3):
            raise pytest.UsageError(f"GPUPERF_INJECT: {spec!r}: expected sync:<test> or slowdown:<fraction>:<test>")
    return out


def _inject(fn: Callable[..., Any], injections: list[tuple[str, float]], device: Any) -> Callable[..., Any]:
    import torch

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def injected(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        out = fn(*args, **kwargs)
        for kind, amount in injections:
            if kind == "sync":
                torch.zeros((), device=device).item()
            else:
                sync()
                until = time.perf_counter() + amount * (time.perf_counter() - start)
                while time.perf_counter() < until:
                    pass
        return out

    return injected


class _Injected:
    """``gpu_bench`` with the benchmarked function wrapped (everything else passes through)."""

    def __init__(self, bench: Any, injections: list[tuple[str, float]]) -> None:
        self._bench, self._injections = bench, injections

    def __getattr__(self, name: str) -> Any:
        return getattr(self._bench, name)

    def __call__(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return self._bench(_inject(fn, self._injections, self._bench.device), *args, **kwargs)


@pytest.fixture
def gpu_bench(gpu_bench: Any, request: pytest.FixtureRequest) -> Any:
    """The plugin's ``gpu_bench``, with ``GPUPERF_INJECT``'s faults when one matches this test."""
    injections = _injections(request.node.nodeid)
    return _Injected(gpu_bench, injections) if injections else gpu_bench
