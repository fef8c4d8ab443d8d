"""Test helpers (not public API): scripted timings for deterministic tests of verdicts.

A :class:`ScriptedMeasurer` runs the real measurement protocol of :mod:`pytest_gpuperf.timing`
(warmup, batching, rounds, early stopping, the ``max_time`` budget) on a :class:`FakeClock` that
advances by a scripted number of milliseconds at every call of the benchmarked function, so a
test of a verdict gives the same answer on any machine, loaded or not. The function itself is
still called (its return value and side effects stay real); only time is scripted.

An inner pytest session (``pytester``) uses it by overriding the plugin's ``_gpuperf_measurer``
fixture in its conftest::

    import pytest
    from pytest_gpuperf._testing import ScriptedMeasurer

    @pytest.fixture
    def _gpuperf_measurer(request):
        return ScriptedMeasurer.from_file(request.config.rootpath / "timings.json", request.node.name)

``timings.json`` maps a test name (or ``"*"``) to a spec, see :meth:`ScriptedMeasurer.from_spec`.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from .timing import Measurer, measure, time_once

#: ``script(i) -> ms``: the duration of the i-th call of the benchmarked function (0-based).
Script = Callable[[int], float]


class FakeClock:
    """A nanosecond clock that only moves when told to (``advance_ms``)."""

    def __init__(self) -> None:
        self.ns = 0

    def __call__(self) -> int:
        return self.ns

    def advance_ms(self, ms: float) -> None:
        self.ns += max(1, int(round(ms * 1e6)))


def noisy(median_ms: float, cv: float = 0.02, seed: int = 0, *, slow_calls: int = 0,
          slow_factor: float = 1.0, stall_every: int = 0, stall_factor: float = 1.0) -> Script:
    """A script of lognormal per-call times: ``median_ms * exp(cv * z_i)``, z_i seeded per call.

    The first ``slow_calls`` calls take ``slow_factor`` times longer (a one-off slow period); every
    ``stall_every``-th call (if > 0) takes ``stall_factor`` times longer (periodic stalls).
    """
    def script(i: int) -> float:
        z = random.Random(seed * 1_000_003 + i).gauss(0.0, 1.0)
        ms = median_ms * math.exp(cv * z)
        if i < slow_calls:
            ms *= slow_factor
        if stall_every and i % stall_every == stall_every - 1:
            ms *= stall_factor
        return ms

    return script


class ScriptedMeasurer(Measurer):
    """A :class:`~pytest_gpuperf.timing.Measurer` whose clock advances ``script(i)`` ms at call i.

    ``script`` is a function of the call index, a sequence (cycled), or a constant (ms). The call
    index runs across warmup, rounds and re-measures of one fixture instance. Always uses the CPU
    protocol (also when the test's device is a GPU), so it is deterministic everywhere.
    """

    def __init__(self, script: Script | Sequence[float] | float) -> None:
        clock = FakeClock()
        super().__init__(clock)
        self.fake = clock
        if callable(script):
            self.script: Script = script
        elif isinstance(script, (int, float)):
            self.script = lambda _i, v=float(script): v
        else:
            values = [float(v) for v in script]
            self.script = lambda i: values[i % len(values)]
        self.calls = 0

    def _timed(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            value = fn(*args, **kwargs)
            self.fake.advance_ms(self.script(self.calls))
            self.calls += 1
            return value

        return call

    def measure(self, fn, args, kwargs, *, options, device, setup=None, rounds=None, warmup_rounds=None,
                progress=None, calls_per_round=None):
        return measure(self._timed(fn), args, kwargs, options=options, device="cpu", setup=setup, rounds=rounds,
                       warmup_rounds=warmup_rounds, progress=progress, clock=self.fake,
                       calls_per_round=calls_per_round)

    def once(self, fn, args, kwargs, device):
        return time_once(self._timed(fn), args, kwargs, "cpu", clock=self.fake)

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> "ScriptedMeasurer":
        """From a dict: ``{"ms": 1.0, "cv": 0.02, "seed": 0, "slow_calls": 0, "slow_factor": 1.0,
        "stall_every": 0, "stall_factor": 1.0}`` (see :func:`noisy`), or ``{"sequence": [...]}``."""
        if "sequence" in spec:
            return cls(list(spec["sequence"]))
        return cls(noisy(float(spec["ms"]), float(spec.get("cv", 0.02)), int(spec.get("seed", 0)),
                         slow_calls=int(spec.get("slow_calls", 0)), slow_factor=float(spec.get("slow_factor", 1.0)),
                         stall_every=int(spec.get("stall_every", 0)),
                         stall_factor=float(spec.get("stall_factor", 1.0))))

    @classmethod
    def from_file(cls, path: str | Path, test_name: str) -> "ScriptedMeasurer":
        """The spec for ``test_name`` (else its name without parameters, else ``"*"``) in the JSON
        file at ``path``."""
        specs = json.loads(Path(path).read_text())
        spec = specs.get(test_name, specs.get(test_name.split("[")[0], specs.get("*")))
        if spec is None:
            raise KeyError(f"{path}: no timing spec for {test_name!r} and no '*' entry")
        return cls.from_spec(spec)


#: conftest.py text for an inner pytest session that reads ``timings.json`` in its rootdir.
SCRIPTED_CONFTEST = '''
import pytest
from pytest_gpuperf._testing import ScriptedMeasurer

@pytest.fixture
def _gpuperf_measurer(request):
    return ScriptedMeasurer.from_file(request.config.rootpath / "timings.json", request.node.name)
'''
