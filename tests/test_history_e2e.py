"""End-to-end: baseline history, confirmation re-measure, strict mode, and schema-1 upgrades."""

from __future__ import annotations

import json

import pytest

from scripted import script_timings, set_timings

pytest_plugins = ["pytester"]

RUN = ("-p", "no:cacheprovider")

# Timings are scripted (tests/scripted.py): the verdicts below are the same on any machine.
BENCH = """
import pytest

@pytest.mark.gpu_bench(confirm=2, threshold=0.3, device="cpu")
def test_loop(gpu_bench):
    gpu_bench.pedantic(sum, args=(range(100),), rounds=30, warmup_rounds=5)
"""
STEADY = {"ms": 1.0, "cv": 0.02, "seed": 1}
RERUN = {"ms": 1.0, "cv": 0.02, "seed": 2}
# The first 35 calls (5 warmup + the 30 rounds of the first measurement) take twice as long.
SLOW_FIRST = dict(RERUN, slow_calls=35, slow_factor=2.0)
TWICE_AS_SLOW = {"ms": 2.0, "cv": 0.02, "seed": 3}


def _record(pytester: pytest.Pytester, bench: str = BENCH) -> None:
    pytester.makepyfile(test_bench=bench)
    script_timings(pytester, STEADY)
    pytester.runpytest("--gpuperf-update-baselines", *RUN).assert_outcomes(passed=1)


def _entry(pytester: pytest.Pytester) -> dict:
    (path,) = pytester.path.joinpath("baselines").rglob("*.json")
    return json.loads(path.read_text())["benchmarks"]["test_loop"]


def test_one_off_slow_first_measurement_is_not_confirmed(pytester: pytest.Pytester) -> None:
    _record(pytester)
    set_timings(pytester, SLOW_FIRST)
    rec = pytester.runpytest("--gpuperf", "--gpuperf-json", "r.json", *RUN)
    rec.assert_outcomes(passed=1)
    rec.stdout.fnmatch_lines(["*test_loop*not confirmed*"])
    c = json.loads(pytester.path.joinpath("r.json").read_text())["benchmarks"]["test_bench.py::test_loop"]["comparison"]
    assert c["confirmed"] is False and c["verdict"] != "regressed"
    assert "not confirmed on re-measure (noise)" in c["message"]


def test_genuine_slowdown_is_confirmed_and_fails(pytester: pytest.Pytester) -> None:
    _record(pytester)
    set_timings(pytester, TWICE_AS_SLOW)
    rec = pytester.runpytest("--gpuperf", *RUN)
    rec.assert_outcomes(failed=1)
    rec.stdout.fnmatch_lines(["regressed *", "  test_bench.py::test_loop: *confirmed on re-measure*"])
    assert "not confirmed" not in rec.stdout.str()


def test_no_confirmation_when_disabled(pytester: pytest.Pytester) -> None:
    _record(pytester)
    set_timings(pytester, SLOW_FIRST)
    rec = pytester.runpytest("--gpuperf", "--gpuperf-confirm", "0", *RUN)
    rec.assert_outcomes(passed=1)  # the marker's confirm=2 wins over the command line
    bench = BENCH.replace("confirm=2, ", "")
    _record(pytester, bench)
    set_timings(pytester, SLOW_FIRST)
    rec = pytester.runpytest("--gpuperf", "--gpuperf-confirm", "0", *RUN)
    rec.assert_outcomes(failed=1)  # no re-measure: the one-off slow measurement fails the test
    assert "confirmed" not in rec.stdout.str()


def test_updates_append_history_and_old_single_run_file_upgrades(pytester: pytest.Pytester) -> None:
    _record(pytester)
    (path,) = pytester.path.joinpath("baselines").rglob("*.json")
    # Rewrite the file as the schema-1 plugin wrote it: one run, no history.
    data = json.loads(path.read_text())
    data["schema_version"] = 1
    old = data["benchmarks"]["test_loop"]
    old.pop("history")
    old["schema_version"] = 1
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    set_timings(pytester, RERUN)
    rec = pytester.runpytest("--gpuperf", *RUN)
    rec.assert_outcomes(passed=1)
    rec.stdout.fnmatch_lines(["*test_loop*unchanged*"])
    for expected_runs in (2, 3):
        pytester.runpytest("--gpuperf-update-baselines", *RUN).assert_outcomes(passed=1)
        entry = _entry(pytester)
        assert entry["schema_version"] == 2 and len(entry["history"]) == expected_runs
    assert entry["history"][0]["median_ms"] == pytest.approx(old["stats"]["median_ms"])
    assert [set(r) >= {"median_ms", "iqr_ms", "rounds", "timestamp_utc", "environment", "git_commit"}
            for r in entry["history"]] == [True] * 3


def test_history_is_truncated_to_the_history_option(pytester: pytest.Pytester) -> None:
    _record(pytester, BENCH.replace("confirm=2,", "confirm=2, history=2,"))
    for _ in range(2):
        pytester.runpytest("--gpuperf-update-baselines", *RUN).assert_outcomes(passed=1)
    assert len(_entry(pytester)["history"]) == 2


def test_inconclusive_passes_with_warning_and_fails_in_strict_mode(pytester: pytest.Pytester) -> None:
    _record(pytester)
    (path,) = pytester.path.joinpath("baselines").rglob("*.json")
    data = json.loads(path.read_text())
    entry = data["benchmarks"]["test_loop"]
    med = entry["stats"]["median_ms"]
    # A baseline of six widely spread samples: the ratio's CI spans both 1 and 1 + T.
    entry["samples_ms"] = [med * f for f in (0.4, 0.6, 0.9, 1.1, 1.6, 2.4)]
    entry["history"] = entry["history"][:1]
    path.write_text(json.dumps(data))
    set_timings(pytester, RERUN)
    rec = pytester.runpytest("--gpuperf", *RUN)
    rec.assert_outcomes(passed=1)
    # issue 24: one warning line names every inconclusive benchmark; each one's note is in the notes
    rec.stdout.fnmatch_lines(["*test_loop*inconclusive*", "* notes:", "  test_bench.py::test_loop: *spans both 1 and*",
                              "warning: 1 benchmark(s) inconclusive, which passes (fails with --gpuperf-strict):"
                              " test_bench.py::test_loop; each one's note says why and how to decide"])
    rec = pytester.runpytest("--gpuperf", "--gpuperf-strict", *RUN)
    rec.assert_outcomes(failed=1)
    # rounds are fixed (pedantic), so the hint is more rounds, not max_time
    rec.stdout.fnmatch_lines(["inconclusive *", "  test_bench.py::test_loop: *more rounds (pedantic rounds=...)*"])
    assert "max_time" not in rec.stdout.str()
