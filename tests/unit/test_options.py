"""Unit tests for pytest_gpuperf.core.options: validation and marker > CLI > ini > default resolution."""

from __future__ import annotations

import dataclasses

import pytest

from pytest_gpuperf.core.options import (
    CLI_OPTIONS,
    CPU_THRESHOLD,
    DEFAULTS,
    OPTION_HELP,
    OPTION_NAMES,
    BenchOptions,
    OptionError,
    check_names,
    convert,
    for_device,
    resolve,
)


def test_defaults():
    opts = resolve()
    assert opts == BenchOptions()
    assert resolve(None, None, None) == BenchOptions()
    assert resolve({}, {}, {}) == BenchOptions()
    assert opts.device is None
    assert opts.threshold == 0.05 and opts.alpha == 0.01
    assert opts.flush_l2 is False and opts.cuda_graph is False


def test_option_names_and_cli_options():
    assert set(OPTION_NAMES) == set(BenchOptions().to_dict())
    assert set(CLI_OPTIONS) <= set(OPTION_NAMES)


def test_to_dict_round_trips():
    opts = resolve({"threshold": 0.2, "group": "g", "device": "cuda:1"})
    d = opts.to_dict()
    assert d["threshold"] == 0.2 and d["group"] == "g" and d["device"] == "cuda:1"
    assert BenchOptions(**d) == opts


# --------------------------------------------------------------------------------------------
# precedence
# --------------------------------------------------------------------------------------------


def test_precedence_marker_over_cli_over_ini_over_default():
    opts = resolve(
        marker={"threshold": 0.30},
        cli={"threshold": 0.20, "alpha": 0.02, "max_time": 2.0},
        ini={"threshold": "0.10", "alpha": "0.03", "max_time": "3.0", "warmup_time": "0.5"},
    )
    assert opts.threshold == 0.30  # marker
    assert opts.alpha == 0.02  # cli beats ini
    assert opts.max_time == 2.0  # cli beats ini
    assert opts.warmup_time == 0.5  # ini beats default
    assert opts.min_rounds == BenchOptions().min_rounds  # default


@pytest.mark.parametrize(
    "marker, cli, ini, expected",
    [
        ({}, {}, {}, 0.05),
        ({}, {}, {"threshold": "0.1"}, 0.1),
        ({}, {"threshold": 0.2}, {"threshold": "0.1"}, 0.2),
        ({"threshold": 0.3}, {"threshold": 0.2}, {"threshold": "0.1"}, 0.3),
        ({"threshold": 0.3}, {}, {"threshold": "0.1"}, 0.3),
        ({"threshold": 0.3}, {"threshold": 0.2}, {}, 0.3),
    ],
)
def test_precedence_table(marker, cli, ini, expected):
    assert resolve(marker, cli, ini).threshold == expected


def test_none_in_cli_and_ini_means_not_set():
    opts = resolve(cli={"threshold": None, "device": None}, ini={"threshold": "0.2", "alpha": None})
    assert opts.threshold == 0.2
    assert opts.alpha == BenchOptions().alpha
    assert opts.device is None
    assert resolve(cli={"max_time": None}, ini={"max_time": None}).max_time == BenchOptions().max_time


def test_invalid_lower_priority_value_still_rejected():
    # A bad ini value is an error even when the marker overrides it: the config is wrong.
    with pytest.raises(OptionError, match="threshold"):
        resolve(marker={"threshold": 0.1}, ini={"threshold": "lots"})


# --------------------------------------------------------------------------------------------
# ini string conversion
# --------------------------------------------------------------------------------------------


def test_ini_strings_converted():
    opts = resolve(
        ini={
            "max_time": "0.5",
            "warmup_time": " 0.25 ",
            "min_rounds": "3",
            "max_rounds": "300",
            "target_precision": "0",
            "threshold": "0.07",
            "alpha": "0.05",
            "flush_l2": "true",
            "cuda_graph": "false",
            "device": "cpu",
            "group": "matmul",
        }
    )
    assert opts.max_time == 0.5 and type(opts.max_time) is float
    assert opts.warmup_time == 0.25
    assert opts.min_rounds == 3 and type(opts.min_rounds) is int
    assert opts.max_rounds == 300 and type(opts.max_rounds) is int
    assert opts.target_precision == 0.0
    assert opts.threshold == 0.07
    assert opts.alpha == 0.05
    assert opts.flush_l2 is True
    assert opts.cuda_graph is False
    assert opts.device == "cpu"
    assert opts.group == "matmul"


@pytest.mark.parametrize("text", ["true", "True", "TRUE", "1", "yes", "on", " true "])
def test_bool_true_strings(text):
    assert convert("flush_l2", text) is True


@pytest.mark.parametrize("text", ["false", "False", "0", "no", "off"])
def test_bool_false_strings(text):
    assert convert("flush_l2", text) is False


def test_native_values_pass_through():
    assert convert("flush_l2", True) is True
    assert convert("min_rounds", 5) == 5
    assert convert("min_rounds", 5.0) == 5  # an integral float is accepted as an int
    assert type(convert("min_rounds", 5.0)) is int
    assert convert("max_time", 2) == 2.0 and type(convert("max_time", 2)) is float
    assert convert("group", "") is None
    assert convert("group", None) is None


# --------------------------------------------------------------------------------------------
# device
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, expected",
    [("auto", None), ("AUTO", None), (None, None), ("cpu", "cpu"), ("cuda", "cuda"),
     ("cuda:1", "cuda:1"), ("CUDA:0", "cuda:0"), (" cuda:12 ", "cuda:12")],
)
def test_device_values(value, expected):
    assert resolve({"device": value}).device == expected
    assert convert("device", value) == expected


def test_device_from_cli():
    assert resolve(cli={"device": "cuda:1"}).device == "cuda:1"
    assert resolve(cli={"device": "auto"}, ini={"device": "cpu"}).device is None


@pytest.mark.parametrize("value", ["tpu", "cuda:", "cuda:x", "gpu", "cuda1", "cpu:0", ""])
def test_device_bad(value):
    with pytest.raises(OptionError, match="device") as exc:
        resolve({"device": value})
    assert "cuda:N" in str(exc.value)


# --------------------------------------------------------------------------------------------
# unknown names
# --------------------------------------------------------------------------------------------


def test_unknown_marker_option():
    with pytest.raises(OptionError) as exc:
        resolve({"max_tim": 1.0}, where="gpu_bench marker of test_x")
    msg = str(exc.value)
    assert "'max_tim'" in msg
    assert "gpu_bench marker of test_x" in msg
    for name in OPTION_NAMES:
        assert name in msg


def test_option_error_is_value_error():
    assert issubclass(OptionError, ValueError)


def test_check_names():
    check_names({"threshold": 1, "group": None}, "here")  # no error
    with pytest.raises(OptionError, match="'bogus'"):
        check_names({"threshold": 1, "bogus": 2}, "here")


def test_convert_unknown_name():
    with pytest.raises(OptionError, match="'bogus'"):
        convert("bogus", 1)


@pytest.mark.parametrize("source", ["cli", "ini"])
def test_unknown_name_in_cli_or_ini(source):
    with pytest.raises(OptionError, match="'bogus'"):
        resolve(**{source: {"bogus": "1"}})


# --------------------------------------------------------------------------------------------
# bad values
# --------------------------------------------------------------------------------------------


BAD_VALUES = [
    ("max_time", -1.0),
    ("max_time", 0),
    ("max_time", "-0.5"),
    ("max_time", "soon"),
    ("max_time", float("nan")),
    ("warmup_time", -0.1),
    ("alpha", 1.5),
    ("alpha", 0.0),
    ("alpha", 1.0),
    ("alpha", -0.01),
    ("threshold", -0.05),
    ("threshold", "-5%"),
    ("target_precision", 1.0),
    ("target_precision", -0.1),
    ("min_rounds", 0),
    ("min_rounds", -3),
    ("min_rounds", 2.5),
    ("min_rounds", "2.5"),
    ("min_rounds", "ten"),
    ("max_rounds", 0),
    ("device", "tpu"),
    ("device", 1),
    ("flush_l2", "maybe"),
    ("flush_l2", 1),
    ("flush_l2", None),
    ("cuda_graph", "2"),
    ("group", 3),
    # bools are not numbers here
    ("max_time", True),
    ("min_rounds", True),
    ("threshold", False),
    ("alpha", True),
    ("max_rounds", False),
    # None in the marker is a value, and not a number
    ("threshold", None),
]


@pytest.mark.parametrize("name, value", BAD_VALUES, ids=[f"{n}={v!r}" for n, v in BAD_VALUES])
def test_bad_marker_value_names_option(name, value):
    with pytest.raises(OptionError) as exc:
        resolve({name: value})
    msg = str(exc.value)
    assert name in msg
    assert "gpu_bench marker" in msg


@pytest.mark.parametrize(
    "name, value",
    [("max_time", "-1"), ("alpha", "1.5"), ("min_rounds", "0"), ("device", "tpu"), ("flush_l2", "maybe")],
)
def test_bad_ini_value_names_option_and_source(name, value):
    with pytest.raises(OptionError) as exc:
        resolve(ini={name: value})
    msg = str(exc.value)
    assert name in msg and "ini" in msg


@pytest.mark.parametrize("name, value", [("max_time", -1.0), ("alpha", 1.5), ("threshold", -1.0)])
def test_bad_cli_value_names_option_and_source(name, value):
    with pytest.raises(OptionError) as exc:
        resolve(cli={name: value})
    msg = str(exc.value)
    assert name in msg and "command line" in msg


def test_max_rounds_below_min_rounds():
    with pytest.raises(OptionError) as exc:
        resolve({"min_rounds": 20, "max_rounds": 10})
    msg = str(exc.value)
    assert "max_rounds" in msg and "min_rounds" in msg
    # Also when the two come from different sources.
    with pytest.raises(OptionError, match="max_rounds"):
        resolve({"max_rounds": 5}, ini={"min_rounds": "6"})
    # Equal is fine.
    assert resolve({"min_rounds": 7, "max_rounds": 7}).max_rounds == 7


def test_boundary_values_accepted():
    opts = resolve({"threshold": 0, "target_precision": 0, "warmup_time": 0, "min_rounds": 1,
                    "max_rounds": 1, "alpha": 0.999})
    assert opts.threshold == 0.0 and opts.target_precision == 0.0 and opts.warmup_time == 0.0
    assert opts.min_rounds == opts.max_rounds == 1
    assert opts.alpha == 0.999


@pytest.mark.parametrize("name", ["min_rounds", "max_rounds"])
def test_infinite_value_for_integer_option_is_option_error(name):
    with pytest.raises(OptionError, match=name):
        resolve({name: float("inf")})


@pytest.mark.parametrize("name", ["threshold", "max_time", "warmup_time", "memory_threshold"])
@pytest.mark.parametrize("value", [float("inf"), "inf", float("-inf")])
def test_infinite_numbers_are_rejected(name, value):
    # an infinite threshold or time budget would silently disable the gate
    with pytest.raises(OptionError, match=name):
        resolve({name: value})


@pytest.mark.parametrize("device_type, given, expected", [
    ("cpu", False, CPU_THRESHOLD),   # the CPU's default: 10% (issue 45)
    ("cpu", True, 0.05),             # a threshold that was set wins, even at the CUDA default's value
    ("cuda", False, 0.05),           # CUDA keeps 5%
    ("cuda", True, 0.05),
])
def test_the_cpu_default_threshold_applies_only_where_no_source_set_one(device_type, given, expected):
    options = resolve(cli={"threshold": 0.05} if given else {})
    out = for_device(options, device_type, threshold_given=given)
    assert out.threshold == expected
    assert dataclasses.replace(out, threshold=options.threshold) == options  # nothing else changes
    assert CPU_THRESHOLD == 0.10 and DEFAULTS.threshold == 0.05
    assert "0.1 = 10% on the CPU" in OPTION_HELP["threshold"]
