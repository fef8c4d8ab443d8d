"""Microsecond-scale CPU benchmarks, written as a pytest-benchmark user writes them."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass

import pytest
import torch
from torch import nn

TEXT = (
    "the quick brown fox jumps over the lazy dog and the dog sleeps while the fox runs "
    "over the hill to the river where the quick fish swim under the old bridge by the mill"
)


@dataclass
class Point:
    x: float
    y: float
    label: str = ""


def make_points(n: int) -> list[Point]:
    return [Point(float(i), -float(i), "p") for i in range(n)]


def test_dataclass_construction(benchmark):
    points = benchmark(make_points, 20)
    assert len(points) == 20 and points[3] == Point(3.0, -3.0, "p")


def test_module_construction(benchmark):
    torch.manual_seed(0)
    layer = benchmark(nn.Linear, 16, 16)
    assert layer.weight.shape == (16, 16) and layer.bias.shape == (16,)


def test_tensor_zeros(benchmark):
    t = benchmark(torch.zeros, 8)
    assert t.shape == (8,) and not t.any()


def test_tensor_from_list(benchmark):
    values = [float(i) for i in range(16)]
    t = benchmark(torch.tensor, values)
    assert t.shape == (16,) and t[5].item() == 5.0


@pytest.mark.parametrize("batch", [1, 16])
def test_linear_forward(benchmark, batch):
    torch.manual_seed(0)
    layer = nn.Linear(64, 64)
    x = torch.randn(batch, 64)
    with torch.no_grad():
        y = benchmark(layer, x)
    assert y.shape == (batch, 64)
    torch.testing.assert_close(y, x @ layer.weight.T + layer.bias)


def test_mlp_forward(benchmark):
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))
    x = torch.randn(4, 32)
    with torch.no_grad():
        y = benchmark(mlp, x)
        assert y.shape == (4, 10)
        torch.testing.assert_close(y, mlp(x))


def test_layernorm_forward(benchmark):
    torch.manual_seed(0)
    norm = nn.LayerNorm(64)
    x = torch.randn(8, 64)
    with torch.no_grad():
        y = benchmark(norm, x)
    assert y.shape == (8, 64)
    torch.testing.assert_close(y.mean(-1), torch.zeros(8), atol=1e-5, rtol=0)


def test_conv1d_forward(benchmark):
    torch.manual_seed(0)
    conv = nn.Conv1d(4, 8, kernel_size=3, padding=1)
    x = torch.randn(2, 4, 32)
    with torch.no_grad():
        y = benchmark(conv, x)
    assert y.shape == (2, 8, 32)


def _score(v: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.tanh(v @ w).sum()


def test_vmap(benchmark):
    torch.manual_seed(0)
    vs, w = torch.randn(8, 16), torch.randn(16, 4)
    batched = torch.vmap(_score, in_dims=(0, None))
    out = benchmark(batched, vs, w)
    assert out.shape == (8,)
    torch.testing.assert_close(out, torch.stack([_score(v, w) for v in vs]))


def _loss(w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return ((x @ w) ** 2).sum()


def test_grad(benchmark):
    torch.manual_seed(0)
    w, x = torch.randn(8), torch.randn(4, 8)
    g = benchmark(torch.func.grad(_loss), w, x)
    torch.testing.assert_close(g, 2 * x.T @ (x @ w))


def sum_squares(n: int) -> int:
    return sum([i * i for i in range(n)])


@pytest.mark.parametrize("n", [100, 1000])
def test_sum_squares(benchmark, n):
    assert benchmark(sum_squares, n) == (n - 1) * n * (2 * n - 1) // 6


def word_count(text: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for word in text.split():
        counts[word] = counts.get(word, 0) + 1
    return counts


def test_word_count(benchmark):
    counts = benchmark(word_count, TEXT)
    assert counts == dict(Counter(TEXT.split())) and counts["the"] == 9


def test_sort_floats(benchmark):
    rng = random.Random(0)
    values = [rng.random() for _ in range(500)]

    def setup():
        return (list(values),), {}

    def sort_in_place(items):
        items.sort()
        return items

    out = benchmark.pedantic(sort_in_place, setup=setup, rounds=200, warmup_rounds=5)
    assert out == sorted(values)


@pytest.mark.parametrize("n", [1000])
def test_elementwise(benchmark, n):
    torch.manual_seed(0)
    a, b, c = torch.randn(n), torch.randn(n), torch.randn(n)
    out = benchmark(lambda a, b, c: a * b + c, a, b, c)
    torch.testing.assert_close(out, torch.addcmul(c, a, b))
