"""Every benchmark starts from its own seed where the plugin measures (issue 45; the reason is in
:mod:`pytest_gpuperf.core.seeding`): one small plugin object, registered only when the session
measures and seeding is on (``--gpuperf-no-seed``, ini ``gpuperf_seed = false`` turn it off)."""

from __future__ import annotations

import pytest

from pytest_gpuperf.core.seeding import reseed, seed_for

#: Fixtures that make a test a benchmark (the ``gpu_bench`` marker does too).
BENCHMARK_FIXTURES = frozenset({"gpu_bench", "benchmark", "memory_budget"})


def register_seeding(config: pytest.Config) -> None:
    """Register :class:`SeededBenchmarks` in a session that measures, unless ``--gpuperf-no-seed``
    or ini ``gpuperf_seed = false`` turn it off."""
    if not config.getoption("--gpuperf-no-seed") and config.getini("gpuperf_seed"):
        config.pluginmanager.register(SeededBenchmarks(), "gpuperf-seed")


class SeededBenchmarks:
    """Before a benchmark's fixtures are set up, seed the global random generators the process
    has imported with :func:`~pytest_gpuperf.core.seeding.seed_for` of its node id. Other tests
    are left alone."""

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        if item.get_closest_marker("gpu_bench") is None and not BENCHMARK_FIXTURES & set(
                getattr(item, "fixturenames", ())):
            return
        reseed(seed_for(item.nodeid))
