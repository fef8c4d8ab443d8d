"""The extras made after a timed worker's timing (issue 45, pytest_gpuperf.plugin.extras_pass): the
role that asks for them, which timed process makes which, and how the coordinator reads what the
pass left, including a pass that never started (pure parts; no worker is started; the processes
are in tests/test_extras_process_e2e.py and tests/test_replicates_e2e.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_gpuperf.plugin import replicates
from pytest_gpuperf.plugin.extras_pass import PASS_STARTED, collect, pass_started, plan
from pytest_gpuperf.plugin.replicates import ThenExtras


def test_the_role_carries_the_pass_and_is_checked() -> None:
    role = replicates.WorkerRole((2, 3), "/tmp/w.jsonl", then=ThenExtras("/tmp/extras-0.jsonl", 2))
    assert replicates.worker_role(role.argument().partition("=")[2]) == role
    assert replicates.worker_role('{"replicate": "2/3", "then": {"out": "e.jsonl"}}').then == ThenExtras("e.jsonl", 0)
    for bad in ('{"replicate": "2/3", "then": 1}', '{"replicate": "2/3", "then": {"op_profile": 1}}',
                '{"replicate": "2/3", "then": {"out": "e", "op_profile": -1}}',
                '{"replicate": "2/3", "then": {"out": "e", "op_profile": true}}'):
        with pytest.raises(ValueError, match=r'--gpuperf-role "then" .*expected \{"out": "<file>", "op_profile"'):
            replicates.worker_role(bad)
    with pytest.raises(ValueError, match="only a timed worker"):  # an extras process has no second pass
        replicates.worker_role('{"replicate": "x/3", "then": {"out": "e"}}')


def test_the_last_timed_processes_make_the_extras(tmp_path: Path) -> None:
    passes, then = plan(3, 1, False, tmp_path)  # a compare run: the last process, no op profile
    assert passes == {0: tmp_path / "extras-0.jsonl"} and then == {2: ThenExtras(str(tmp_path / "extras-0.jsonl"), 0)}
    passes, then = plan(3, 2, True, tmp_path)  # an update: the last two, sharing the op profile's cycles
    assert then == {2: ThenExtras(str(passes[0]), 2), 1: ThenExtras(str(passes[1]), 2)}
    passes, then = plan(1, 2, True, tmp_path)  # one timed process: the second share has no process to make it
    assert set(passes) == {0, 1} and set(then) == {0}


def _entry(key: str) -> str:
    return json.dumps({"key": key, "entry": {"samples_ms": [1.0]}, "nodeid": "t.py::t"}) + "\n"


def test_the_coordinator_reads_the_passes_and_names_those_that_did_not_start(tmp_path: Path) -> None:
    passes, _ = plan(3, 2, False, tmp_path)
    done, hung = (replicates.WorkerRun(k, rc, tmp_path / f"worker-{k}.log", {"t.py::t": {}}, error=error,
                                       seconds=30.0, launched=1000.0, then_out=str(passes[j]))
                  for k, j, rc, error in ((2, 0, -9, "worker process 3/3 exited with code -9"),
                                          (1, 1, None, "worker process 2/3 timed out after 20 s and was stopped")))
    # process 3 timed for 12 s, made the extras of one benchmark, then crashed; process 2 hung while timing
    passes[0].write_text(json.dumps({PASS_STARTED: 1012.0}) + "\n" + _entry("t.py::t") + "{torn")
    assert pass_started(passes[0]) == 1012.0 and pass_started(passes[1]) is None
    assert replicates.read_results(passes[0])[0].keys() == {"t.py::t"}  # (the pass's first line is no result)
    extras, missing = collect([hung, done], passes)
    assert missing == [1]  # an extras process of its own makes that share
    [extra] = extras
    assert (extra.index, extra.log, set(extra.entries)) == (-1, done.log, {"t.py::t"})
    assert extra.error == "worker process 3/3 exited with code -9 while measuring the extras"
    assert (done.error, done.seconds, extra.seconds) == (None, 12.0, 18.0)  # its timing finished, in 12 s
    assert hung.error and hung.seconds == 30.0  # untouched
