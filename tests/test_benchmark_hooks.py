"""pytest-benchmark's hooks in a suite's conftest (issue 46): declared when pytest-benchmark is not
there, and called where they mean something here (the JSON report's machine and commit info, the
report itself). Before, a conftest implementing one stopped the session at collection
(``PluginValidationError: unknown hook``). Timings are scripted (tests/scripted.py)."""

from __future__ import annotations

import json

import pytest

from scripted import script_timings

pytest_plugins = ["pytester"]

#: a conftest implementing every hook pytest-benchmark 5 declares
HOOKS = """
def pytest_benchmark_scale_unit(config, unit, benchmarks, best, worst, sort):
    return None

def pytest_benchmark_generate_machine_info(config):
    return {"node": "generated-node"}

def pytest_benchmark_update_machine_info(config, machine_info):
    machine_info["runner"] = "ci-7"

def pytest_benchmark_generate_commit_info(config):
    return {"id": "abc123", "project": "demo"}

def pytest_benchmark_update_commit_info(config, commit_info):
    commit_info["branch"] = "main"

def pytest_benchmark_group_stats(config, benchmarks, group_by):
    return None

def pytest_benchmark_generate_json(config, benchmarks, include_data, machine_info, commit_info):
    return None

def pytest_benchmark_update_json(config, benchmarks, output_json):
    output_json["suite"] = {"benchmarks": [b.benchmark_id for b in benchmarks]}

def pytest_benchmark_compare_machine_info(config, benchmarksession, machine_info, compared_benchmark):
    pass
"""
BODY = """
def test_a(benchmark):
    benchmark(sum, range(10))
"""
RUN = ("-p", "no:cacheprovider", "--gpuperf-processes=1", "--gpuperf-json=r.json")


@pytest.mark.parametrize("pytest_benchmark", ["absent", "taken over"])
def test_a_conftest_with_every_pytest_benchmark_hook_loads_and_shapes_the_report(
        pytester: pytest.Pytester, pytest_benchmark: str) -> None:
    pytester.makepyfile(test_bench=BODY)
    script_timings(pytester, {"ms": 1.0, "cv": 0.02, "seed": 1}, conftest=HOOKS)
    blocked = ("-p", "no:benchmark") if pytest_benchmark == "absent" else ()
    pytester.runpytest(*blocked, *RUN).assert_outcomes(passed=1)  # a plain run collects too
    rec = pytester.runpytest("--gpuperf", *blocked, *RUN)
    rec.assert_outcomes(passed=1)
    report = json.loads(pytester.path.joinpath("r.json").read_text())
    assert report["machine_info"] == {"node": "generated-node", "runner": "ci-7"}
    assert report["commit_info"] == {"id": "abc123", "project": "demo", "branch": "main"}
    assert report["suite"] == {"benchmarks": ["test_a"]}
    from pytest_gpuperf.storage.schema import validate

    validate(report, "report")


def test_a_raising_hook_is_a_warning_and_the_report_is_written(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_bench=BODY)
    script_timings(pytester, {"ms": 1.0, "cv": 0.02, "seed": 1}, conftest="""
def pytest_benchmark_update_json(config, benchmarks, output_json):
    raise KeyError("no such field")
""")
    rec = pytester.runpytest("--gpuperf", "-p", "no:benchmark", *RUN)
    rec.assert_outcomes(passed=1)
    rec.stdout.fnmatch_lines(["*pytest_benchmark_update_json (a pytest-benchmark hook) raised KeyError: "
                              "'no such field'; the JSON report was written without its part*"])
    report = json.loads(pytester.path.joinpath("r.json").read_text())
    assert list(report["benchmarks"]) == ["test_bench.py::test_a"] and report["machine_info"]["python_version"]


DISPLAY_HOOKS = """
import os

def pytest_benchmark_update_machine_info(config, machine_info):
    machine_info["runner"] = os.environ.get("RUNNER", "ci-7")

def pytest_benchmark_group_stats(config, benchmarks, group_by):
    assert group_by == "group" and {b["fullname"] for b in benchmarks} == {
        "test_bench.py::test_fast", "test_bench.py::test_slow"}
    assert all(b["median"] > 0 and b["rounds"] > 0 for b in benchmarks)  # seconds, as pytest-benchmark's
    return [("quick ones", [b for b in benchmarks if "fast" in b["name"]]),
            ("slow ones", [b for b in benchmarks if "slow" in b["name"]])]

def pytest_benchmark_scale_unit(config, unit, benchmarks, best, worst, sort):
    assert unit == "seconds" and best["median"] <= worst["median"]
    return "u", 1e6

def pytest_benchmark_compare_machine_info(config, benchmarksession, machine_info, compared_benchmark):
    saved = compared_benchmark["machine_info"]
    for info in (machine_info, saved):  # as torch's conftest does: its CPU clock moves between runs
        info["cpu"].pop("hz_actual")
        info["cpu"].pop("hz_actual_friendly")
    if saved.get("runner") != machine_info.get("runner"):
        benchmarksession.logger.warning(
            f"machine differs: {saved['runner']} vs {machine_info['runner']} ({benchmarksession.storage.location})")
"""


def test_a_conftest_s_display_hooks_group_the_table_set_its_unit_and_compare_the_machine(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    # issue 46: pytest-benchmark's group_stats, scale_unit and compare_machine_info were declared
    # and never called; a suite that relies on them now gets its groups, its unit and its warning
    pytester.makepyfile(test_bench="""
def test_fast(benchmark):
    benchmark(sum, range(10))

def test_slow(benchmark):
    benchmark(sum, range(10))
""")
    script_timings(pytester, {"ms": 1.0, "cv": 0.02, "seed": 1}, conftest=DISPLAY_HOOKS)
    run = ("-p", "no:benchmark", "-p", "no:cacheprovider", "--gpuperf-processes=1")
    rec = pytester.runpytest("--gpuperf-update-baselines", *run)
    rec.assert_outcomes(passed=2)
    (baseline,) = pytester.path.joinpath("baselines").rglob("*.json")
    stored = json.loads(baseline.read_text())["benchmarks"]
    assert stored["test_fast"]["machine_info"]["runner"] == "ci-7"  # the update run's, hooks included
    cpu = stored["test_fast"]["machine_info"]["cpu"]  # pytest-benchmark's (py-cpuinfo's keys)
    assert {"brand_raw", "vendor_id_raw", "arch", "bits", "count", "hz_advertised", "hz_actual_friendly"} <= set(cpu)
    assert len(cpu["hz_actual"]) == 2 and all(isinstance(v, int) for v in cpu["hz_actual"])
    monkeypatch.setenv("RUNNER", "ci-8")
    rec = pytester.runpytest("--gpuperf", *run)
    rec.assert_outcomes(passed=2)
    out = rec.stdout.str()
    rec.stdout.fnmatch_lines(["group: quick ones", "*test_bench.py::test_fast*", "*group: slow ones",
                              "*test_bench.py::test_slow*"])
    row = next(ln for ln in rec.stdout.lines if ln.startswith("test_bench.py::test_fast "))
    assert " us " in row and " ms " not in row and "µs" not in row  # every time in the hook's unit
    assert "machine differs: ci-7 vs ci-8 (baselines/" in out
    assert "raised" not in out  # machine_info["cpu"] is there, in this run's and in the stored one
    pytester.path.joinpath("conftest.py").write_text(pytester.path.joinpath("conftest.py").read_text().replace(
        'return "u", 1e6', 'return "u"'))
    rec = pytester.runpytest("--gpuperf", *run)  # a hook that returns nonsense: a warning, the table's own units
    rec.assert_outcomes(passed=2)
    rec.stdout.fnmatch_lines(["*pytest_benchmark_scale_unit (a pytest-benchmark hook) returned 'u', not (prefix, "
                              "scale)*each time keeps its own unit*"])
