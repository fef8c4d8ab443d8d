"""Every benchmark option has one default and one precedence: marker > command line > ini > default.

The table below lists every option of :class:`~pytest_gpuperf.core.options.BenchOptions`, so a new
option fails here until it is given an ini, a command-line (when it has a flag) and a marker value.
The plugin's own path (its ``--gpuperf-*`` flags, ini keys and markers, plus pytest-benchmark's
``--benchmark-*`` flags and ``@pytest.mark.benchmark``) is checked end to end in
``tests/test_plugin.py::test_every_option_resolves_with_one_precedence_through_the_plugin``.
"""

from __future__ import annotations

import dataclasses

import pytest

from pytest_gpuperf.core.options import CLI_OPTIONS, DEFAULTS, OPTION_HELP, OPTION_NAMES, BenchOptions, resolve

from option_samples import SAMPLES  # noqa: E402 (tests/: every option, a value per source)


def test_the_table_lists_every_option_and_every_flag():
    assert set(SAMPLES) == set(OPTION_NAMES), "add the new option to SAMPLES (and to the plugin test)"
    assert {n for n, (_, cli, _) in SAMPLES.items() if cli is not None} == set(CLI_OPTIONS)
    assert set(OPTION_HELP) == set(OPTION_NAMES)


def test_every_default_is_written_once_in_bench_options():
    # DEFAULTS is the dataclass's defaults; nothing else restates them (issue 23): the help texts
    # read them from DEFAULTS, and the verdict code's module constants are DEFAULTS' values.
    from pytest_gpuperf.verdict import compare

    assert DEFAULTS == BenchOptions()
    for f in dataclasses.fields(BenchOptions):
        assert getattr(DEFAULTS, f.name) == f.default
    assert (compare.DEFAULT_THRESHOLD, compare.DEFAULT_ALPHA, compare.DEFAULT_MEMORY_THRESHOLD) == (
        DEFAULTS.threshold, DEFAULTS.alpha, DEFAULTS.memory_threshold)


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_marker_over_command_line_over_ini_over_default(name):
    (ini_raw, ini_value), cli, (marker_raw, marker_value) = SAMPLES[name]
    default = getattr(DEFAULTS, name)
    # each source must change what the one below it gave (booleans have two values: enough)
    assert ini_value != default and marker_value != ini_value, name
    assert cli is None or (cli[1] != ini_value and marker_value != cli[1]), name
    assert getattr(resolve(), name) == default
    assert getattr(resolve(ini={name: ini_raw}), name) == ini_value
    assert getattr(resolve(marker={name: marker_raw}, ini={name: ini_raw}), name) == marker_value
    if cli is not None:
        cli_raw, cli_value = cli
        assert getattr(resolve(cli={name: cli_raw}), name) == cli_value
        assert getattr(resolve(cli={name: cli_raw}, ini={name: ini_raw}), name) == cli_value
        assert getattr(resolve(marker={name: marker_raw}, cli={name: cli_raw}, ini={name: ini_raw}), name) == marker_value
