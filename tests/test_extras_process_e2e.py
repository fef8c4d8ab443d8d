"""End-to-end: the extras in a process of their own, and what varies is not gated exactly (issue 31).

With worker processes (``--gpuperf-processes`` >= 2) no timed round shares a process with an extra
call: the last timed process measures peak memory and the counts, each from two calls, in a second
pass after all its timing (an update run's last two, issue 45; before, extras processes of their
own). A count or a peak that differs between those calls is
stored with its range and gated only beyond twice it, so an unchanged rerun passes; a large
change still fails. Timings are scripted (tests/scripted.py); the counts and peaks are real and
deterministic (a call counter picks each call's size).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scripted import script_timings

pytest_plugins = ["pytester"]

# --gpuperf-no-why: the update run's extras processes would also profile the ops (why it got slower;
# tested in tests/test_why_e2e.py), which nothing here checks
RUN = ("-p", "no:cacheprovider", "--gpuperf-processes=2", "--gpuperf-max-processes=1", "--gpuperf-no-why")
STEADY = {"ms": 1.0, "cv": 0.02, "process_factors": [1.0, 1.01]}

VARYING = """
import itertools, pytest, torch

calls = itertools.count()

def sample(scale):
    n = next(calls) % 3 + 1              # 1, 2 or 3 MiB, call after call (a buffer sampled at random)
    buf = torch.ones(n * scale * (1 << 18))  # float32: n * scale MiB
    return buf.sum()

@pytest.mark.gpu_bench(max_time=0.05, warmup_time=0.0, device="cpu")
def test_sample(gpu_bench):
    gpu_bench(sample, {scale})
"""


def _baselines(pytester: pytest.Pytester) -> dict[str, tuple[Path, dict]]:
    """Each stored benchmark's name -> (its baseline file, its entry)."""
    return {name: (path, entry) for path in pytester.path.joinpath("baselines").rglob("*.json")
            for name, entry in json.loads(path.read_text())["benchmarks"].items()}


# A call of 4,400 torch ops (a 1 ms call by the scripted timings): a round of its extras is
# estimated at 2 x 1 ms + 4,400 x EXTRA_MS_PER_OP = 1,102 ms, over EXTRA_SECOND_CALL_S, so each
# extras process makes one call of each extra, not two (issue 45). Each call made for the extras
# (the session's role is then "x/P") is logged with its process id.
MANY_OPS = """
import os, sys, pytest, torch

from pytest_gpuperf.plugin import session_of

x = torch.ones(8)

def many_ops(extras):
    if extras:
        with open("extras-calls.log", "a") as f:
            f.write(f"{os.getpid()}\\n")
    y = x
    for _ in range(4400):
        y = y + 1
    return y

@pytest.mark.gpu_bench(max_time=0.05, warmup_time=0.0, device="cpu")
def test_slow(gpu_bench, request):
    slot = session_of(request.config).settings.replicate_slot
    gpu_bench(many_ops, slot is not None and slot[0] == -1)
"""


# pytest-benchmark's fixture: the second run of its test (the extras pass) gets a GpuBench of its own
COMPAT = """
def test_compat(benchmark):
    benchmark(sum, range(1000))
"""


def test_timed_workers_make_no_extra_call_and_variable_extras_are_not_gated_exactly(pytester: pytest.Pytester) -> None:
    # Two benchmarks that vary alike, recorded in one update run; the compare run shows both
    # behaviours in one session (each session costs three processes that import torch): test_sample
    # is unchanged and passes, test_grow moves ten times the data and fails. test_slow's extras take
    # long: one call of each per extras process.
    from pytest_gpuperf.plugin.replicates import EXTRA_CALLS, EXTRA_MS_PER_OP, EXTRA_SECOND_CALL_S, extra_calls

    assert (EXTRA_CALLS, EXTRA_SECOND_CALL_S, EXTRA_MS_PER_OP) == (2, 1.0, 0.25)
    assert extra_calls(1.0, 100) == extra_calls(499.0, None) == extra_calls(1.0, 3_990) == 2
    assert extra_calls(500.0, None) == extra_calls(1.0, 4_400) == extra_calls(100.0, 431_712) == 1
    script_timings(pytester, STEADY)
    pytester.makepyfile(test_sample=VARYING.format(scale=1), test_slow=MANY_OPS, test_compat=COMPAT,
                        test_grow=VARYING.format(scale=1).replace("def test_sample", "def test_grow"))
    rec = pytester.runpytest("--gpuperf-update-baselines", *RUN)
    rec.assert_outcomes(passed=4)
    assert _baselines(pytester)["test_compat"][1]["peak_memory_bytes"] is not None, rec.stdout.str()
    assert "already called" not in rec.stdout.str()
    calls = (pytester.path / "extras-calls.log").read_text().split()
    # the two timed processes make the extras after their timing, no process of their own starts
    # (issue 45: a start that only repeats the import); in each: an untimed first call
    # (torch.compile's counters are loaded: what compiles later is a recompilation), one for its
    # value and time, one for the peak, one counted; with a second of each, 6
    assert len(set(calls)) == 2 and all(calls.count(pid) == 4 for pid in set(calls)), calls
    assert _baselines(pytester)["test_slow"][1]["peak_memory_bytes"] is not None
    rec.stdout.fnmatch_lines(["*worker process 1/2 done (4 benchmark(s), then their peak memory, counts, bottleneck,*",
                              "*worker process 2/2 done (4 benchmark(s), then their peak memory, counts, bottleneck,*"])
    assert "extras process" not in rec.stdout.str()
    logs = pytester.path / ".gpuperf" / "replicates"
    assert sorted(p.name for p in logs.glob("extras-*")) == ["extras-0.jsonl", "extras-1.jsonl"]  # no process's log
    timed = [json.loads(line)["entry"] for k in (0, 1) for line in (logs / f"worker-{k}.jsonl").read_text().splitlines()]
    assert len(timed) == 8 and all(e["counts"] is None and e["peak_memory_bytes"] is None
                                   for e in timed)  # nothing but timing
    stored = _baselines(pytester)
    mib = 1 << 20
    for name in ("test_sample", "test_grow"):
        entry = stored[name][1]
        assert entry["peak_memory_low_bytes"] < entry["peak_memory_bytes"] <= 3 * mib + 4096
        assert entry["counts"]["varied"]["traffic_bytes"][0] < entry["counts"]["varied"]["traffic_bytes"][1]
        assert entry["history"][-1]["counts"]["varied"] == entry["counts"]["varied"]
    recorded = {name: path.read_bytes() for name, (path, _) in stored.items()}
    # test_grow: ten times the data
    pytester.makepyfile(test_grow=VARYING.format(scale=10).replace("def test_sample", "def test_grow"))
    rec = pytester.runpytest("--gpuperf", "--gpuperf-no-ab-confirm", "--gpuperf-json", "r.json", *RUN)
    rec.assert_outcomes(passed=3, failed=1)
    benches = json.loads(pytester.path.joinpath("r.json").read_text())["benchmarks"]
    # an unchanged rerun passes: the count and the peak vary, and say so
    bench = benches["test_sample.py::test_sample"]
    statuses = {c["name"]: c["status"] for c in bench["count_comparison"]["changes"]}
    assert statuses["traffic_bytes"] == "varies" and statuses["ops"] == "unchanged"
    assert bench["memory_comparison"]["verdict"] == "unchanged" and bench["memory_comparison"]["spread_bytes"]
    # ten times the data: both fail
    rec.stdout.fnmatch_lines(["FAILED test_grow.py::test_grow - *"])
    out = rec.stdout.str().split("__ test_grow __", 1)[1].split("\n==", 1)[0]  # its section of FAILURES
    assert "memory regressed" in out and "(the peak varies between calls)" in out
    assert "byte counts regressed" in out
    # a compare run leaves the baselines as they were: a second unchanged rerun would see the same
    assert {name: path.read_bytes() for name, (path, _) in _baselines(pytester).items()} == recorded
