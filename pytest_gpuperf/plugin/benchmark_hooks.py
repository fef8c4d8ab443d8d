"""pytest-benchmark's hooks, declared here when pytest-benchmark is not installed (issue 46).

A suite written for pytest-benchmark may implement its hooks in a ``conftest.py`` (its machine or
commit info, its JSON). pytest refuses a conftest that implements a hook nobody declared
(``PluginValidationError: unknown hook 'pytest_benchmark_compare_machine_info'``), so, where
pytest-benchmark does not declare them itself,
:func:`~pytest_gpuperf.plugin.benchmark_compat.declare_hooks` adds these specifications: the same names, arguments and ``firstresult`` as pytest-benchmark 5's
``hookspec.py``. Which of them pytest-gpuperf calls, and with what, is
:mod:`pytest_gpuperf.plugin.benchmark_compat` (:func:`~pytest_gpuperf.plugin.benchmark_compat.report_info`,
:func:`~pytest_gpuperf.plugin.benchmark_compat.update_json`) and the summary's
:func:`~pytest_gpuperf.plugin.benchmark_compat.group_stats`,
:func:`~pytest_gpuperf.plugin.benchmark_compat.scale_unit` and
:func:`~pytest_gpuperf.plugin.benchmark_compat.compare_machine_info`, documented in
docs/pytest-benchmark.md; ``pytest_benchmark_generate_json`` is declared so that a suite that
implements it loads, and is not called (the report is pytest-gpuperf's own).
"""

from __future__ import annotations

import pytest


@pytest.hookspec(firstresult=True)
def pytest_benchmark_scale_unit(config, unit, benchmarks, best, worst, sort):  # type: ignore[no-untyped-def]
    """pytest-benchmark: the unit prefix and scale of its table: ``(prefix, scale)``; called with
    ``unit="seconds"`` where a conftest implements it, and every time of the summary table is then
    shown in that unit (else each time gets its own: µs, ms, s)."""


@pytest.hookspec(firstresult=True)
def pytest_benchmark_generate_machine_info(config):  # type: ignore[no-untyped-def]
    """The machine info of the JSON report (``--gpuperf-json``/``--benchmark-json``): a dict, or
    None for pytest-gpuperf's own (from the session's environment)."""


def pytest_benchmark_update_machine_info(config, machine_info):  # type: ignore[no-untyped-def]
    """Change the JSON report's ``machine_info`` dict in place."""


@pytest.hookspec(firstresult=True)
def pytest_benchmark_generate_commit_info(config):  # type: ignore[no-untyped-def]
    """The commit info of the JSON report: a dict, or None for pytest-gpuperf's own (``id``,
    ``dirty``, ``branch``)."""


def pytest_benchmark_update_commit_info(config, commit_info):  # type: ignore[no-untyped-def]
    """Change the JSON report's ``commit_info`` dict in place."""


@pytest.hookspec(firstresult=True)
def pytest_benchmark_group_stats(config, benchmarks, group_by):  # type: ignore[no-untyped-def]
    """pytest-benchmark: group its table's rows, ``[(group, [benchmark dict, ...]), ...]``; called
    where a conftest implements it, with ``group_by`` (``--benchmark-group-by``, default
    ``group``), and the summary table is grouped as it returns (None: as ``--benchmark-group-by``)."""


@pytest.hookspec(firstresult=True)
def pytest_benchmark_generate_json(config, benchmarks, include_data, machine_info, commit_info):  # type: ignore[no-untyped-def]
    """pytest-benchmark: its whole JSON document. Declared, not called: the report is
    pytest-gpuperf's (its schema: ``pytest_gpuperf/storage/schema/report.schema.json``)."""


def pytest_benchmark_update_json(config, benchmarks, output_json):  # type: ignore[no-untyped-def]
    """Change the JSON report (``output_json``, a dict) in place before it is written;
    ``benchmarks``: the session's results (:class:`~pytest_gpuperf.verdict.result.BenchResult`)."""


def pytest_benchmark_compare_machine_info(config, benchmarksession, machine_info, compared_benchmark):  # type: ignore[no-untyped-def]
    """pytest-benchmark: warn when a saved run's machine differs; called where a conftest
    implements it, once per baseline file compared against, with the ``machine_info`` its update
    run stored (``compared_benchmark["machine_info"]``); ``benchmarksession.logger.warning``
    becomes a warning of the session."""
