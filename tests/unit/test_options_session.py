"""Unit tests for the session/marker split of option resolution (pytest_gpuperf.core.options):
``resolve_session`` (command line over ini over defaults), ``with_marker`` (marker over session),
``DEFAULTS`` and ``OPTION_HELP``.
"""

from __future__ import annotations

import dataclasses

import pytest

from pytest_gpuperf.verdict import compare

from pytest_gpuperf.core import options as opts
from pytest_gpuperf.verdict.bottleneck import CLASSES
from pytest_gpuperf.core.options import (
    CLI_OPTIONS,
    DEFAULTS,
    OPTION_HELP,
    OPTION_NAMES,
    BenchOptions,
    OptionError,
    resolve,
    resolve_session,
    with_marker,
)
from pytest_gpuperf.measure.timing import MIN_WARMUP_CALLS

# --------------------------------------------------------------------------------------------
# DEFAULTS
# --------------------------------------------------------------------------------------------


def test_defaults_are_the_dataclass_defaults():
    assert isinstance(DEFAULTS, BenchOptions)
    assert DEFAULTS == BenchOptions()
    assert resolve_session() == DEFAULTS
    assert resolve_session(None, None) == DEFAULTS
    assert resolve_session({}, {}) == DEFAULTS
    assert resolve_session({n: None for n in CLI_OPTIONS}, {n: None for n in OPTION_NAMES}) == DEFAULTS
    assert (compare.DEFAULT_THRESHOLD, compare.DEFAULT_ALPHA) == (DEFAULTS.threshold, DEFAULTS.alpha)


def test_defaults_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        DEFAULTS.threshold = 0.5  # type: ignore[misc]


# --------------------------------------------------------------------------------------------
# resolve_session: command line over ini over defaults
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cli, ini, expected", [
    ({}, {}, DEFAULTS.threshold),
    ({}, {"threshold": "0.2"}, 0.2),
    ({"threshold": "0.3"}, {}, 0.3),
    ({"threshold": "0.3"}, {"threshold": "0.2"}, 0.3),
    ({"threshold": None}, {"threshold": "0.2"}, 0.2),
    ({"threshold": 0}, {"threshold": "0.2"}, 0.0),  # 0 is a value, not "unset"
])
def test_resolve_session_cli_over_ini(cli, ini, expected):
    assert resolve_session(cli, ini).threshold == expected


def test_resolve_session_mixes_sources_per_option():
    s = resolve_session(cli={"alpha": "0.05", "device": "cpu", "max_time": None},
                        ini={"alpha": "0.001", "max_time": "2.5", "min_rounds": "20", "flush_l2": "yes",
                             "max_memory": "2 KiB"})
    assert s.alpha == 0.05  # command line
    assert s.device == "cpu"  # command line only
    assert s.max_time == 2.5  # ini (command line unset)
    assert s.min_rounds == 20 and isinstance(s.min_rounds, int)  # ini strings converted
    assert s.flush_l2 is True
    assert s.max_memory == 2048
    assert s.threshold == DEFAULTS.threshold  # nobody set it


def test_resolve_session_device_auto_on_the_command_line_overrides_ini():
    assert resolve_session(cli={"device": "auto"}, ini={"device": "cpu"}).device is None


@pytest.mark.parametrize("source, label", [("ini", "ini"), ("cli", "command line")])
def test_resolve_session_errors_name_the_source(source, label):
    with pytest.raises(OptionError) as exc:
        resolve_session(**{source: {"threshold": "lots"}})
    msg = str(exc.value)
    assert msg.startswith(f"{label} threshold: ")
    assert "'lots'" in msg and "expected a fraction" in msg
    with pytest.raises(OptionError) as exc:
        resolve_session(**{source: {"bogus": "1"}})
    assert str(exc.value).startswith(f"{label} bogus: unknown gpu_bench option 'bogus'")
    assert "valid options are: " + ", ".join(OPTION_NAMES) in str(exc.value)


def test_resolve_session_validates_an_overridden_ini_value():
    with pytest.raises(OptionError, match=r"^ini alpha: "):
        resolve_session(cli={"alpha": "0.05"}, ini={"alpha": "2"})


def test_resolve_session_min_above_max_rounds_names_both_sources():
    with pytest.raises(OptionError) as exc:
        resolve_session(cli={"max_rounds": 5}, ini={"min_rounds": "20"})
    assert str(exc.value) == "command line/ini: max_rounds=5 is smaller than min_rounds=20"


# --------------------------------------------------------------------------------------------
# with_marker: marker over session
# --------------------------------------------------------------------------------------------


def test_with_marker_overrides_the_session():
    session = resolve_session(cli={"threshold": "0.3", "max_time": "2"}, ini={"alpha": "0.001"})
    t = with_marker(session, {"threshold": 0.1, "group": "g"})
    assert t.threshold == 0.1 and t.group == "g"  # the marker's
    assert (t.max_time, t.alpha) == (2.0, 0.001)  # the session's
    assert session.threshold == 0.3 and session.group is None  # the session is not changed
    assert dataclasses.replace(t, threshold=0.3, group=None) == session


@pytest.mark.parametrize("marker", [None, {}])
def test_with_empty_marker_is_the_session(marker):
    session = resolve_session(cli={"confirm": "3"})
    assert with_marker(session, marker) == session


def test_with_marker_converts_like_the_other_sources():
    t = with_marker(DEFAULTS, {"max_memory": "1 MiB", "expect_bottleneck": "compute", "device": "CUDA:1",
                               "cuda_graph": "on"})
    assert t.max_memory == 1 << 20
    assert t.expect_bottleneck == ("compute",)
    assert t.device == "cuda:1"
    assert t.cuda_graph is True


def test_with_marker_errors_name_where():
    where = "gpu_bench marker of tests/perf/test_x.py::test_y"
    with pytest.raises(OptionError) as exc:
        with_marker(DEFAULTS, {"threshold": "x"}, where=where)
    assert str(exc.value).startswith(f"{where}: threshold='x': ")
    with pytest.raises(OptionError) as exc:
        with_marker(DEFAULTS, {"max_tim": 1.0}, where=where)
    assert str(exc.value).startswith(f"{where}: unknown gpu_bench option 'max_tim'")
    with pytest.raises(OptionError, match=r"^gpu_bench marker: "):  # the default label
        with_marker(DEFAULTS, {"alpha": 1.5})


def test_with_marker_checks_rounds_against_the_session():
    session = resolve_session(ini={"min_rounds": "20"})
    with pytest.raises(OptionError) as exc:
        with_marker(session, {"max_rounds": 10}, where="gpu_bench marker of t")
    assert str(exc.value) == "gpu_bench marker of t: max_rounds=10 is smaller than min_rounds=20"
    assert with_marker(session, {"max_rounds": 10, "min_rounds": 5}).max_rounds == 10


@pytest.mark.parametrize("marker, cli, ini", [
    ({}, {}, {}),
    ({"threshold": 0.1}, {"threshold": "0.2"}, {"threshold": "0.3"}),
    ({"group": "g"}, {"alpha": "0.02"}, {"max_time": "3", "alpha": "0.2"}),
    (None, {"device": "cpu"}, {"confirm": "0", "history": "4"}),
])
def test_resolve_is_with_marker_of_resolve_session(marker, cli, ini):
    assert resolve(marker, cli, ini) == with_marker(resolve_session(cli, ini), marker)


def test_resolve_session_is_resolved_once_and_reused():
    # The session options are a value: resolving every test's marker against it never re-reads
    # the command line or ini.
    session = resolve_session(cli={"threshold": "0.2"})
    tests = [with_marker(session, {"group": f"g{i}"}) for i in range(3)]
    assert all(t.threshold == 0.2 for t in tests)
    assert [t.group for t in tests] == ["g0", "g1", "g2"]


# --------------------------------------------------------------------------------------------
# OPTION_HELP
# --------------------------------------------------------------------------------------------


def test_option_help_has_every_option():
    assert set(OPTION_HELP) == set(OPTION_NAMES)
    assert list(OPTION_HELP) == list(OPTION_NAMES)  # in the dataclass's order
    for name, text in OPTION_HELP.items():
        assert isinstance(text, str) and text.strip() == text and text, name
        assert "%%" not in text, name  # plain text; the plugin escapes for argparse


def _numeric_defaults() -> list[tuple[str, float]]:
    return [(f.name, getattr(DEFAULTS, f.name)) for f in dataclasses.fields(BenchOptions)
            if isinstance(getattr(DEFAULTS, f.name), (int, float)) and not isinstance(getattr(DEFAULTS, f.name), bool)]


def test_every_numeric_option_is_covered():
    assert {n for n, _ in _numeric_defaults()} == {
        "warmup_time", "min_rounds", "max_rounds", "max_time", "target_precision", "threshold", "alpha",
        "memory_threshold", "history", "confirm", "count_tolerance", "steady_clock",
    }


@pytest.mark.parametrize("name, default", _numeric_defaults())
def test_option_help_mentions_the_numeric_default(name, default):
    assert f"default {default:g}" in OPTION_HELP[name]


def test_option_help_specific_defaults():
    assert "0.05" in OPTION_HELP["threshold"] and "5%" in OPTION_HELP["threshold"]
    assert "0.01" in OPTION_HELP["alpha"]
    assert "0.005" in OPTION_HELP["target_precision"] and "0 disables" in OPTION_HELP["target_precision"]
    assert "0.025" in OPTION_HELP["warmup_time"]
    assert f"at least {MIN_WARMUP_CALLS} calls" in OPTION_HELP["warmup_time"]
    assert "1 MiB" in OPTION_HELP["memory_threshold"] and compare.MEMORY_SLACK_BYTES == 1 << 20
    assert "default false" in OPTION_HELP["flush_l2"] and "default false" in OPTION_HELP["cuda_graph"]
    assert "default auto" in OPTION_HELP["device"] and "default none" in OPTION_HELP["max_memory"]
    for kind in CLASSES:
        assert kind in OPTION_HELP["expect_bottleneck"]


def test_option_help_follows_changed_defaults():
    # The help is built from DEFAULTS, not written by hand: the f-strings use the dataclass.
    assert opts.OPTION_HELP["history"] == f"baseline runs kept per benchmark (default {BenchOptions.history})"
    assert opts.OPTION_HELP["confirm"].endswith(f"(default {BenchOptions.confirm})")
