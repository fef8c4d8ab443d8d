"""End-to-end: a run that SIGTERM stops (a CI job's timeout, a cancelled job) keeps what it finished (issue 45).

Scripted timings (tests/scripted.py); the inner sessions run in a subprocess of their own, so the
signal reaches them and not this test process. One update session in 3 worker processes covers the
replicated case: the second worker sends its coordinator SIGTERM while it measures the third
benchmark; again, the last worker sends it while it makes the extras after its timing. One
single-process session covers the other: the session itself gets SIGTERM in its second test. A
compare run is stopped in its last process, which measures only what the first two left open. The
first session again, with SIGKILL for SIGTERM, checks that the killed coordinator's worker does not
measure on.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scripted import script_timings

pytest_plugins = ["pytester"]

RUN = ("-p", "no:cacheprovider", "-rs", "--gpuperf-max-processes=1", "--gpuperf-no-why", "--gpuperf-json=r.json")

BENCH = """
import os, signal, sys, time

import pytest

OPTS = dict(device="cpu", counts=False)


def _stop_in_worker(slot):
    # in the worker process of that slot: SIGTERM (SIGKILL with KILL_COORDINATOR=1) to its
    # coordinator, then wait to be stopped
    if any(f'"replicate": "{slot}"' in arg for arg in sys.argv):
        open("stopped-worker.pid", "w").write(str(os.getpid()))
        kill = os.environ.get("KILL_COORDINATOR") == "1"
        os.kill(os.getppid(), signal.SIGKILL if kill else signal.SIGTERM)
        time.sleep(60)

@pytest.mark.gpu_bench(**OPTS)
def test_a(gpu_bench):
    gpu_bench.pedantic(sum, args=(range(100),), rounds=20, warmup_rounds=1)

@pytest.mark.gpu_bench(**OPTS)
def test_b(gpu_bench):
    gpu_bench.pedantic(sum, args=(range(100),), rounds=20, warmup_rounds=1)

@pytest.mark.gpu_bench(**OPTS)
def test_c(gpu_bench):
    if os.environ.get("STOP_IN_PASS") != "1":
        _stop_in_worker(os.environ.get("STOP_SLOT", "1/3"))
    if os.environ.get("STOP_SELF") == "1":
        os.kill(os.getpid(), signal.SIGTERM)
    gpu_bench.pedantic(sum, args=(range(100),), rounds=20, warmup_rounds=1)

@pytest.mark.gpu_bench(**OPTS)
def test_d(gpu_bench, request):
    from pytest_gpuperf.plugin import session_of

    # the last timed process's extras pass (its session's role is then x/3): SIGTERM to its coordinator
    if (os.environ.get("STOP_IN_PASS") == "1" and session_of(request.config).settings.replicate_slot == (-1, 3)
            and any('"replicate": "2/3"' in arg for arg in sys.argv)):
        os.kill(os.getppid(), signal.SIGTERM)
        time.sleep(60)
    gpu_bench.pedantic(sum, args=(range(100),), rounds=20, warmup_rounds=1)
"""


def _stored(pytester: pytest.Pytester) -> list[str]:
    return sorted(name for path in pytester.path.joinpath("baselines").rglob("*.json")
                  for name in json.loads(path.read_text())["benchmarks"])


def _reported(pytester: pytest.Pytester) -> list[str]:
    return sorted(k.split("::")[-1] for k in json.loads(pytester.path.joinpath("r.json").read_text())["benchmarks"])


def test_sigterm_keeps_the_benchmarks_finished_so_far_and_says_which_were_not_measured(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(test_bench=BENCH)
    script_timings(pytester, {"ms": 1.0, "cv": 0.02, "seed": 1})
    # replicated: worker 2 of 3 stops its coordinator at test_c. test_a and test_b were measured by
    # two processes: decided on those and stored; test_c and test_d were not: skipped, not stored
    rec = pytester.runpytest_subprocess("--gpuperf-update-baselines", "--gpuperf-processes=3", *RUN)
    assert rec.ret == pytest.ExitCode.INTERRUPTED
    rec.assert_outcomes(passed=2, skipped=2)
    assert _stored(pytester) == ["test_a", "test_b"]
    assert _reported(pytester) == ["test_a", "test_b"]
    entry = json.loads(next(pytester.path.joinpath("baselines").rglob("*.json")).read_text())["benchmarks"]["test_a"]
    assert len(entry["process_medians_ms"]) == 2
    rec.stdout.fnmatch_lines(["*test_bench.py::test_c: not measured: the run was stopped (SIGTERM) during "
                              "worker process 2/3, after 1 finished*"])
    rec.stdout.fnmatch_lines(["*the measuring was stopped (SIGTERM) during worker process 2/3, after 1 finished: "
                              "2 benchmark result(s) kept and their baselines written; the tests of the others were "
                              "skipped, not measured*"])
    assert "Traceback" not in rec.stdout.str() + rec.stderr.str()
    rec.stdout.fnmatch_lines(["gpuperf: stopped (SIGTERM) during worker process 2/3: deciding the benchmarks "
                              "that 2 processes measured*"])
    # no worker process outlives the stop (that one would sleep 60 s)
    pid = int(pytester.path.joinpath("stopped-worker.pid").read_text())
    assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()

    # a stop in the last timed process's extras pass: the timing is complete, all four are decided
    # and stored, with the extras the pass finished (test_a..test_c)
    for path in pytester.path.joinpath("baselines").rglob("*.json"):
        path.unlink()
    monkeypatch.setenv("STOP_IN_PASS", "1")
    rec = pytester.runpytest_subprocess("--gpuperf-update-baselines", "--gpuperf-processes=3", *RUN)
    assert rec.ret == pytest.ExitCode.INTERRUPTED
    rec.assert_outcomes(passed=4)
    assert _stored(pytester) == ["test_a", "test_b", "test_c", "test_d"]
    rec.stdout.fnmatch_lines(["*stopped (SIGTERM) while measuring the extras (peak memory, counts, bottleneck)*"])
    monkeypatch.delenv("STOP_IN_PASS")

    # a compare run stopped in its last process, which measures only what the first 2 left open
    # (test_c: its 2nd process 30% slower): every benchmark is decided on the processes that
    # measured it, test_c on its 2, and the run says where it stopped
    from scripted import set_timings

    set_timings(pytester, {"ms": 1.0, "cv": 0.02, "seed": 1},
                test_c={"ms": 1.0, "cv": 0.02, "seed": 1, "process_factors": [1.0, 1.3, 1.0]})
    monkeypatch.setenv("STOP_SLOT", "2/3")
    rec = pytester.runpytest_subprocess("--gpuperf", "--gpuperf-processes=3", "--gpuperf-no-ab-confirm", *RUN)
    assert rec.ret == pytest.ExitCode.INTERRUPTED
    rec.assert_outcomes(passed=4)
    rec.stdout.fnmatch_lines(["gpuperf: 3 of 4 benchmark(s) decided passing after 2 worker processes; measuring the "
                              "other 1 in worker process 3/3",
                              "*stopped (SIGTERM) during worker process 3/3*"])
    reported = json.loads(pytester.path.joinpath("r.json").read_text())["benchmarks"]
    assert [len(reported[f"test_bench.py::test_{n}"]["process_medians_ms"]) for n in "abcd"] == [2, 2, 2, 2]
    assert reported["test_bench.py::test_c"]["verdict"] == "inconclusive"
    monkeypatch.delenv("STOP_SLOT")
    set_timings(pytester, {"ms": 1.0, "cv": 0.02, "seed": 1})

    # SIGKILL (no handler runs): the worker still goes with its coordinator (PR_SET_PDEATHSIG; issue 46)
    import time

    monkeypatch.setenv("KILL_COORDINATOR", "1")
    pytester.path.joinpath("stopped-worker.pid").unlink()
    rec = pytester.runpytest_subprocess("--gpuperf-update-baselines", "--gpuperf-processes=3", *RUN)
    assert rec.ret == -9  # the coordinator, killed
    pid = int(pytester.path.joinpath("stopped-worker.pid").read_text())
    deadline = time.monotonic() + 30

    def running() -> bool:
        try:
            return "zombie" not in Path(f"/proc/{pid}/status").read_text()
        except OSError:
            return False

    while running():
        assert time.monotonic() < deadline, "the worker outlived its killed coordinator"
        time.sleep(0.1)
    monkeypatch.delenv("KILL_COORDINATOR")

    # single process: SIGTERM in the session itself interrupts it as Ctrl-C does; the reports keep
    # what it measured (test_a, test_b), whose baselines were written as each passed
    for path in pytester.path.joinpath("baselines").rglob("*.json"):
        path.unlink()
    monkeypatch.setenv("STOP_SELF", "1")
    rec = pytester.runpytest_subprocess("--gpuperf-update-baselines", "--gpuperf-processes=1", *RUN)
    assert rec.ret == pytest.ExitCode.INTERRUPTED
    assert _stored(pytester) == ["test_a", "test_b"]
    assert _reported(pytester) == ["test_a", "test_b"]
