"""Every benchmark starts from its own seed where the plugin measures (issue 45; the reason is in
:mod:`pytest_gpuperf.core.seeding`): one small plugin object, registered only when the session
measures and seeding is on (``--gpuperf-no-seed``, ini ``gpuperf_seed = false`` turn it off)."""

from __future__ import annotations

import pytest

from pytest_gpuperf.core.seeding import reseed, seed_for
from pytest_gpuperf.plugin.benchmark_compat import is_benchmark_test


def register_seeding(config: pytest.Config) -> None:
    """Register :class:`SeededBenchmarks` in a session that measures, unless ``--gpuperf-no-seed``
    or ini ``gpuperf_seed = false`` turn it off."""
    if not config.getoption("--gpuperf-no-seed") and config.getini("gpuperf_seed"):
        config.pluginmanager.register(SeededBenchmarks(), "gpuperf-seed")


class SeededBenchmarks:
    """Before a benchmark's fixtures are set up, seed the global random generators the process
    has imported with :func:`~pytest_gpuperf.core.seeding.seed_for` of its node id. Other tests
    (not :func:`~pytest_gpuperf.plugin.benchmark_compat.is_benchmark_test`) are left alone."""

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        if is_benchmark_test(item):
            reseed(seed_for(item.nodeid))
