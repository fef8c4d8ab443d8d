"""Fault injection for the statistics studies that run this suite (off unless the variable is set).

``GPUPERF_INJECT="slowdown:0.2:test_mlp_forward"`` makes every call of the benchmarks whose test id
contains ``test_mlp_forward`` 20% slower: a busy wait on ``time.perf_counter()`` of 0.2x the call's
own duration, after the call. Several injections are separated by ``,``. Under ``--gpuperf-ab``
they apply to the working tree's side (B) only: a worker of side A (``GPUPERF_AB_SIDE=A``) ignores
them, so an A/B run with the variable set compares unchanged code (A) with injected code (B).

The ``benchmark`` fixture below is the plugin's own, wrapped: ``benchmark(fn, *args, **kwargs)`` and
``benchmark.pedantic(fn, ...)`` hand it an injected ``fn`` when a spec matches the test, else ``fn``
itself; every other attribute (``extra_info``, ``group``, ``name``, ``stats``, ...) is the fixture's.
The plugin reads the device from the call's tensor arguments and from a module ``fn``; the wrapper
hides the second, so this suite passes its tensors as arguments.
"""

from __future__ import annotations

import math
import os
import time
from typing import Any, Callable

import pytest

_FORM = "slowdown:<fraction>:<substring of test id>"


def _slowdowns(test_id: str) -> list[float]:
    """The fractions of the ``GPUPERF_INJECT`` slowdowns that match ``test_id`` (every spec checked)."""
    out: list[float] = []
    side_a = os.environ.get("GPUPERF_AB_SIDE") == "A"
    for spec in filter(None, (s.strip() for s in os.environ.get("GPUPERF_INJECT", "").split(","))):
        parts = spec.split(":", 2)
        try:
            fraction = float(parts[1]) if parts[0] == "slowdown" and len(parts) == 3 and parts[2] else -1.0
        except ValueError:
            fraction = -1.0
        if not 0.0 <= fraction < math.inf:  # also rejects nan
            raise pytest.UsageError(f"GPUPERF_INJECT: {spec!r}: expected {_FORM}, e.g. slowdown:0.2:test_mlp_forward")
        if not side_a and parts[2] in test_id:
            out.append(fraction)
    return out


def _inject(fn: Callable[..., Any], slowdowns: list[float]) -> Callable[..., Any]:
    """``fn``, each call followed by a busy wait of ``sum(slowdowns)`` x the call's own duration."""
    fraction = sum(slowdowns)

    def injected(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        out = fn(*args, **kwargs)
        now = time.perf_counter()
        until = now + fraction * (now - start)
        while time.perf_counter() < until:
            pass
        return out

    return injected


class _Injected:
    """The plugin's ``benchmark`` with the benchmarked function wrapped (everything else passes through)."""

    def __init__(self, bench: Any, slowdowns: list[float]) -> None:
        object.__setattr__(self, "_bench", bench)
        object.__setattr__(self, "_slowdowns", slowdowns)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._bench, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._bench, name, value)

    def _wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        return _inject(fn, self._slowdowns) if self._slowdowns else fn

    def __call__(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return self._bench(self._wrap(fn), *args, **kwargs)

    def pedantic(self, fn: Callable[..., Any], args: tuple = (), kwargs: dict[str, Any] | None = None,
                 **kw: Any) -> Any:
        return self._bench.pedantic(self._wrap(fn), args=args, kwargs=kwargs, **kw)


def pytest_configure(config: pytest.Config) -> None:
    """A malformed ``GPUPERF_INJECT`` stops the session at the start (a usage error, exit code 4)."""
    _slowdowns("")


@pytest.fixture
def benchmark(benchmark: Any, request: pytest.FixtureRequest) -> Any:
    """The plugin's ``benchmark``, with ``GPUPERF_INJECT``'s slowdowns when one matches this test."""
    return _Injected(benchmark, _slowdowns(request.node.nodeid))
