"""Sizing for the bundled perf suite: small on a CPU, large enough to fill an H100 on CUDA."""

from __future__ import annotations

import pytest


@pytest.fixture
def on_cuda(gpu_bench) -> bool:
    """True when the suite runs on a CUDA device (sizes then scale up)."""
    return gpu_bench.device.type == "cuda"
