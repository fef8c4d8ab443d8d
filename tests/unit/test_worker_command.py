"""Worker command lines, built positively (pytest_gpuperf.ab.run.selection_args / worker_args): the
selection, our flags a worker needs (core/flags.py), pytest's options of a short list, and every
other plugin's or conftest's option with its value; pytest's others, pytest-xdist's and the
coordinator's own flags are dropped."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_gpuperf.ab import run as abrun
from pytest_gpuperf.ab.run import selection_args, worker_args
from pytest_gpuperf.core import flags


def conftest_config() -> Any:
    """A pytest configuration with a user's conftest options: ``--device DEVICE``, ``--fast``, ``--seeds N...``."""
    from _pytest.config import get_config

    config = get_config()
    config._parser.addoption("--device", action="store", default="cpu")
    config._parser.addoption("--fast", action="store_true")
    config._parser.addoption("--seeds", nargs="+", default=[])
    return config


CASES = [
    # positional paths and node ids, in any order with options
    (["tests/perf", "tests/x.py::test_a[cuda-1]", "tests/x.py::C::test_b"],
     ["tests/perf", "tests/x.py::test_a[cuda-1]", "tests/x.py::C::test_b"]),
    # -k / -m in every form; a short option's attached value
    (["-k", "gemm and not slow", "-kfoo", "-k=bar", "-m", "gpu", "-mgpu"],
     ["-k", "gemm and not slow", "-kfoo", "-k=bar", "-m", "gpu", "-mgpu"]),
    # xdist: -n N, -nN, -nauto, --numprocesses=N, --dist X, -d, --tx
    (["-n", "2", "-n2", "-nauto", "-nlogical", "--numprocesses=4", "--dist", "load", "--dist=worksteal", "-d",
      "--tx", "popen", "--maxprocesses", "3", "t.py"], ["t.py"]),
    # our flags: the coordinator's dropped in both forms, the worker's kept as written
    (["--gpuperf-json", "r.json", "--gpuperf-json=r.json", "--gpuperf-markdown", "s.md", "--gpuperf-ab", "main",
      "--gpuperf-ab-processes=3", "--gpuperf-processes", "5", "--gpuperf-update-baselines", "--gpuperf",
      "--gpuperf-bisect", "a..b", "--gpuperf-no-why", "--gpuperf-plot", "plots", "--gpuperf-max-processes", "8",
      "--gpuperf-worker-timeout=60", "--gpuperf-columns", "name,median", "--gpuperf-role", "{}", "t.py"], ["t.py"]),
    (["--gpuperf-threshold", "0.1", "--gpuperf-alpha=0.01", "--gpuperf-strict", "--gpuperf-max-time", "0.5",
      "--gpuperf-device=cuda:1", "--gpuperf-no-counts", "--gpuperf-classify", "--gpuperf-only",
      "--gpuperf-baseline-dir", "b", "--gpuperf-confirm=2", "--gpuperf-normalize", "--gpuperf-no-host-load"],
     ["--gpuperf-threshold", "0.1", "--gpuperf-alpha=0.01", "--gpuperf-strict", "--gpuperf-max-time", "0.5",
      "--gpuperf-device=cuda:1", "--gpuperf-no-counts", "--gpuperf-classify", "--gpuperf-only",
      "--gpuperf-baseline-dir", "b", "--gpuperf-confirm=2", "--gpuperf-normalize", "--gpuperf-no-host-load"]),
    # the simulated device's plugin and its flag
    (["-p", "pytest_gpuperf.testing", "--gpuperf-simulated-cuda", "2", "-ppytest_gpuperf.testing",
      "--gpuperf-simulated-cuda=1"],
     ["-p", "pytest_gpuperf.testing", "--gpuperf-simulated-cuda", "2", "-ppytest_gpuperf.testing",
      "--gpuperf-simulated-cuda=1"]),
    # pytest's own: kept (configuration, collection, output) and dropped (reports, cache, debugging, -x)
    (["-c", "ci.ini", "--rootdir=.", "-o", "addopts=", "--override-ini=x=1", "--confcutdir", "t", "--import-mode",
      "importlib", "-W", "error", "--pyargs", "--deselect", "t.py::a", "--ignore=t/x", "--ignore-glob", "*.py",
      "--noconftest", "--strict-markers", "-p", "no:randomly", "-v", "-q", "-rA", "--tb=short", "-s"],
     ["-c", "ci.ini", "--rootdir=.", "-o", "addopts=", "--override-ini=x=1", "--confcutdir", "t", "--import-mode",
      "importlib", "-W", "error", "--pyargs", "--deselect", "t.py::a", "--ignore=t/x", "--ignore-glob", "*.py",
      "--noconftest", "--strict-markers", "-p", "no:randomly", "-v", "-q", "-rA", "--tb=short", "-s"]),
    (["--junitxml", "j.xml", "--junit-xml=j.xml", "--lf", "--ff", "--nf", "--sw", "--stepwise-skip", "--pdb",
      "--trace", "-x", "--maxfail", "2", "--maxfail=3", "--durations", "5", "--basetemp", "/tmp/b", "--co",
      "--log-file", "l.log", "--debug", "--cache-clear", "t.py"], ["t.py"]),
    # a cluster of short switches: as written when all are kept, else the kept ones
    (["-vs", "-xvs", "-vvk", "gemm"], ["-vs", "-v", "-s", "-vvk", "gemm"]),
    # pytest-benchmark's flags: what selects or shapes a measurement kept, the rest (and its nargs="+") dropped
    (["--benchmark-only", "--benchmark-min-rounds", "5", "--benchmark-warmup", "--benchmark-json", "b.json",
      "--benchmark-autosave", "--benchmark-compare-fail", "min:5%", "mean:0.001", "--benchmark-sort=mean", "t.py"],
     ["--benchmark-only", "--benchmark-min-rounds", "5", "--benchmark-warmup", "t.py"]),
    # everything after --
    (["--lf", "--", "-x", "--junitxml=j"], ["--", "-x", "--junitxml=j"]),
]


@pytest.mark.parametrize("args,expected", CASES)
def test_a_worker_gets_exactly_the_selection_and_the_options_it_needs(args: list[str], expected: list[str]) -> None:
    assert selection_args(args) == expected
    assert selection_args(args, conftest_config()) == expected
    assert worker_args(args) == ["--gpuperf", "-p", "no:cacheprovider", "-p", "no:unraisableexception", *expected]


def test_other_plugins_and_conftest_options_pass_through_with_their_values() -> None:
    args = ["--device", "cuda", "tests/perf", "--fast", "--cov=pkg", "--cov", "other", "--seeds", "1", "2",
            "-n", "2", "--device=cpu", "t.py::test_a"]
    expected = ["--device", "cuda", "tests/perf", "--fast", "--cov=pkg", "--cov", "other", "--seeds", "1", "2",
                "--device=cpu", "t.py::test_a"]
    # with the session's configuration, the conftest's options are known with their values...
    assert selection_args(args, conftest_config()) == expected
    # ...and without it (``gpuperf bisect -- ARGS``) an unknown option's value is kept as a positional
    assert selection_args(args) == expected


def test_a_conftest_option_whose_value_looks_like_an_option_keeps_it_with_the_configuration() -> None:
    assert selection_args(["--device", "-1", "t.py"], conftest_config()) == ["--device", "-1", "t.py"]
    assert selection_args(["--seeds", "1", "-n", "2"], conftest_config()) == ["--seeds", "1"]


def test_pytest_benchmarks_own_flags_are_dropped_with_their_values() -> None:
    from _pytest.config import get_config

    config = get_config()
    config._parser.addoption("--benchmark-storage", action="store")
    assert selection_args(["--benchmark-storage", "file://x", "t.py"], config) == ["t.py"]


def test_without_pytests_parser_the_fallback_tables_give_the_same_command_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    abrun._known_options.cache_clear()
    monkeypatch.setattr(abrun, "_parser_arities", lambda config: {})
    try:
        for args, expected in CASES:
            assert selection_args(args) == expected, args
    finally:
        abrun._known_options.cache_clear()


def test_the_fallback_tables_agree_with_pytests_parser() -> None:
    known, own, xdist = abrun._known_options()
    for name, nargs in abrun._FALLBACK_PYTEST.items():
        if name in known:  # an option of another pytest version may be missing
            assert known[name] == nargs, name
    assert abrun.PYTEST_WORKER_OPTIONS <= set(abrun._FALLBACK_PYTEST)
    assert abrun.PYTEST_WORKER_OPTIONS - own <= {"--strict", "--log-disable", "--disable-plugin-autoload"}  # pytest 7.4
    if xdist:
        for name in xdist & set(abrun._FALLBACK_XDIST):
            assert known[name] == abrun._FALLBACK_XDIST[name], name


def test_every_gpuperf_flag_is_declared_from_the_one_table() -> None:
    from _pytest.config import get_config

    config = get_config()
    config.pluginmanager.import_plugin("pytest_gpuperf.plugin")
    config.pluginmanager.import_plugin("pytest_gpuperf.testing")  # the simulated device's plugin
    declared = {n for n in abrun._parser_arities(config) if n.startswith("--gpuperf")}
    table = {f.name for f in (*flags.PLUGIN_FLAGS, flags.SIMULATED_CUDA)}
    assert declared == table
    assert {f.name for f in flags.PLUGIN_FLAGS if f.worker} >= {"--gpuperf-threshold", "--gpuperf-alpha",
                                                               "--gpuperf-max-time", "--gpuperf-device"}
    assert not any(f.worker for f in flags.PLUGIN_FLAGS if f.help is None)  # the hidden role flags: the coordinator's
