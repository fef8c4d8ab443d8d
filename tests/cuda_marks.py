"""Shared skip marker for tests that need a CUDA GPU (they skip with a reason on CPU-only machines)."""

import pytest


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


needs_cuda = pytest.mark.skipif(not cuda_available(), reason="needs a CUDA GPU (none available here)")
