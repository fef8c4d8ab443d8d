"""End-to-end: CPU time beside the wall clock, and the clock each verdict is decided on (issue 45).

Scripted timings (tests/scripted.py, ``"cpu"`` in a spec scripts the thread's and the process's CPU
time): a verdict asserted here is the same on any machine. One recorded baseline and one compare
session cover the four cases of the rule (pytest_gpuperf/verdict/cputime.py):

* a neighbour that stretches the wall clock (about 2x, in bursts) and not the CPU time, on a busy
  host: decided on CPU time, unchanged: neither a failure nor inconclusive;
* a real 2x slowdown on that busy host: decided on CPU time, regressed;
* a call that now sleeps half its time, on a quiet host (CPU time unchanged): the wall clock
  decides, regressed;
* lost parallelism on a quiet host (the work moved off the calling thread, the process's CPU time
  unchanged): the wall clock decides, regressed.

The same session holds the CPU's default threshold (10%, ``core.options.for_device``): a +7%
slowdown passes at the default and fails where the marker sets 5%.
"""

from __future__ import annotations

import json

import pytest

from scripted import script_timings, set_timings

pytest_plugins = ["pytester"]

RUN = ("-p", "no:cacheprovider")

WORK = """
import pytest

OPTS = dict(max_time=0.2, warmup_time=0.01, device="cpu", confirm=0)

@pytest.mark.gpu_bench(**OPTS)
def test_neighbour(gpu_bench):
    gpu_bench(sum, range(100))

@pytest.mark.gpu_bench(**OPTS)
def test_busy_slowdown(gpu_bench):
    gpu_bench(sum, range(100))

@pytest.mark.gpu_bench(**OPTS)
def test_sleeps(gpu_bench):
    gpu_bench(sum, range(100))

@pytest.mark.gpu_bench(**OPTS)
def test_parallel(gpu_bench):
    gpu_bench(sum, range(100))

@pytest.mark.gpu_bench(**OPTS)
def test_mild(gpu_bench):
    gpu_bench(sum, range(100))

@pytest.mark.gpu_bench(threshold=0.05, **OPTS)
def test_mild_gated_at_5(gpu_bench):
    gpu_bench(sum, range(100))
"""

#: every round on the CPU: the thread's CPU time is the wall time
QUIET = {"ms": 1.0, "cv": 0.02, "seed": 1, "cpu": {"share": 1.0}}
#: a bursty neighbour: most rounds stretched 1.5-3x, a quarter untouched
BURSTS = {"every": 7, "factors": [1.0, 3.0, 1.5, 2.5]}


def _verdicts(report: dict) -> dict[str, dict]:
    return {k.split("::")[-1]: v for k, v in report["benchmarks"].items()}


def test_each_verdict_names_its_clock_and_cpu_time_decides_on_a_busy_host(pytester: pytest.Pytester,
                                                                          capsys: pytest.CaptureFixture) -> None:
    pytester.makepyfile(test_bench=WORK)
    script_timings(pytester, QUIET, test_parallel={"ms": 1.0, "cv": 0.02, "seed": 1,
                                                   "cpu": {"share": 1.0, "parallel": 2.0}})
    pytester.runpytest("--gpuperf-update-baselines", "--gpuperf-json", "base.json", *RUN).assert_outcomes(passed=6)
    # the baseline stores the CPU time of the same rounds (thread and process), the history its median
    stored = next(pytester.path.joinpath("baselines").rglob("*.json"))
    entry = json.loads(stored.read_text())["benchmarks"]["test_neighbour"]
    cpu = entry["cpu_time"]
    assert len(cpu["samples_ms"]) == len(cpu["process_samples_ms"]) == len(entry["samples_ms"])
    assert cpu["median_ms"] == pytest.approx(entry["stats"]["median_ms"], rel=0.02)
    assert entry["history"][-1]["cpu_median_ms"] == pytest.approx(cpu["median_ms"])
    from pytest_gpuperf.storage.schema import validate

    validate(json.loads(stored.read_text()), "baseline")

    set_timings(pytester, QUIET,
                test_neighbour={"ms": 1.0, "cv": 0.02, "seed": 3, "machine": BURSTS, "host_load": 0.98,
                                "cpu": {"ms": 1.0, "cv": 0.02, "seed": 3}},
                test_busy_slowdown={"ms": 2.0, "cv": 0.02, "seed": 3, "machine": BURSTS, "host_load": 0.98,
                                    "cpu": {"ms": 2.0, "cv": 0.02, "seed": 3}},
                test_sleeps={"ms": 2.0, "cv": 0.02, "seed": 3, "cpu": {"ms": 1.0, "cv": 0.02, "seed": 3}},
                test_parallel={"ms": 2.0, "cv": 0.02, "seed": 3, "cpu": {"ms": 1.0, "cv": 0.02, "seed": 3,
                                                                         "parallel": 2.0}},
                test_mild={"ms": 1.07, "cv": 0.01, "seed": 3, "cpu": {"share": 1.0}},
                test_mild_gated_at_5={"ms": 1.07, "cv": 0.01, "seed": 3, "cpu": {"share": 1.0}})
    rec = pytester.runpytest("--gpuperf", "--gpuperf-json", "r.json", "-rf", *RUN)
    rec.assert_outcomes(passed=2, failed=4)
    report = json.loads(pytester.path.joinpath("r.json").read_text())
    validate(report, "report")
    got = _verdicts(report)
    c = {name: e["comparison"] for name, e in got.items()}
    # a neighbour that doubles the wall time, not the CPU time: decided, on CPU time
    assert (c["test_neighbour"]["verdict"], c["test_neighbour"]["clock"]) == ("unchanged", "cpu")
    assert "host busy: other processes used 0.98" in c["test_neighbour"]["note"]
    assert "decided on CPU time" in c["test_neighbour"]["note"]
    # a real slowdown on the busy host fails, on CPU time
    assert (c["test_busy_slowdown"]["verdict"], c["test_busy_slowdown"]["clock"]) == ("regressed", "cpu")
    assert c["test_busy_slowdown"]["ratio"] == pytest.approx(2.0, rel=0.05)
    # quiet host, a slowdown only the wall clock sees (a sleep; lost parallelism) still fails, on it
    for name in ("test_sleeps", "test_parallel"):
        assert (c[name]["verdict"], c[name]["clock"]) == ("regressed", "wall"), name
    # the CPU's default threshold is 10%: +7% passes there, and fails where the marker sets 5%
    assert c["test_mild"]["threshold"] == 0.1 and c["test_mild"]["verdict"] != "regressed"
    assert c["test_mild"]["ratio"] == pytest.approx(1.07, rel=0.02)
    assert "threshold +10%" in c["test_mild"]["message"]
    assert (c["test_mild_gated_at_5"]["threshold"], c["test_mild_gated_at_5"]["verdict"]) == (0.05, "regressed")
    assert got["test_mild"]["options"]["threshold"] == 0.1  # the result carries the value used
    # every surface names the clock: the failure message, the table's verdict cell, the report's cpu_time
    rec.stdout.fnmatch_lines(["FAILED test_bench.py::test_busy_slowdown - regressed *: CPU time median *"])
    assert any("test_neighbour" in ln and "unchanged* on CPU time" in ln for ln in rec.outlines)
    assert all(e["cpu_time"]["median_ms"] > 0 for e in got.values())
    sleeps = [ln for ln in rec.outlines if ln.startswith("FAILED test_bench.py::test_sleeps")]
    assert sleeps and "CPU time" not in sleeps[0]
    # `gpuperf compare` on the same baseline and report decides as the plugin did, on the same clock
    # (issue 45: it read the wall clock alone, so the neighbour's benchmark ended inconclusive there)
    from pytest_gpuperf.cli.reports import main

    (baseline,) = pytester.path.joinpath("baselines").rglob("*.json")
    assert main(["compare", str(baseline), str(pytester.path / "r.json"), "-v"]) == 1
    out = capsys.readouterr().out
    rows = {ln.split()[0].split("::")[-1]: ln for ln in out.splitlines()
            if ln.startswith("test_bench.py::") and not ln.split()[0].endswith(":")}  # the table's rows
    assert len(rows) == 6, out
    from pytest_gpuperf.core.units import format_ms, format_ratio

    for name, row in rows.items():  # the same verdict and the same ratio, on the same clock
        assert c[name]["verdict"] in row and f" {format_ratio(c[name]['shown_ratio'])} " in row, (name, out)
    for name in ("test_neighbour", "test_busy_slowdown"):
        assert f"CPU time median {format_ms(c[name]['baseline_median_ms'])}" in out, (name, out)
