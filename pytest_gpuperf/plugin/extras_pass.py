"""The extras made at the end of the last timed worker processes (issue 45, "no process that
cannot help"): peak memory, counts, bottleneck and, in an update, the op profile, measured in a
second pass over the tests once the process has timed every benchmark, instead of in extras
processes of their own. Each of those started Python, imported the suite (torch, the library) and
collected it again only to make a few calls of each benchmark: on tensordict's suite a compare
run's extras took 10-12 s as a process and 5.4-5.9 s as a pass (docs/verdicts.md, "The extras after
the timing"), and a compare run now starts one process fewer, an update two fewer.

The timing is not disturbed: the pass starts after the process's last timed round, as the extras
processes started after the last timed process. A process whose pass did not start (it crashed,
timed out or was stopped while timing) leaves the extras to an extras
process of their own, as before (:func:`collect`).

Both sides of the feature live here, as pytest's cacheprovider keeps its one feature in one place:
the worker's plugin object (:class:`ExtrasPass`, registered only in a timed worker whose role
carries a :class:`~pytest_gpuperf.plugin.replicates.ThenExtras`) and the coordinator's reading of what the pass left (:func:`collect`).
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import pytest

from pytest_gpuperf.plugin.replicates import EXTRAS, ThenExtras, WorkerRole, WorkerRun, read_results

#: The key of the line the pass writes first in its results file: the wall-clock time
#: (``time.time()``, s) at which the process's timing ended and the pass began.
PASS_STARTED = "extras_pass_started"


class ExtrasPass:
    """In a timed worker whose role carries :class:`ThenExtras`: once pytest's loop has run every
    test (timed), run each test again as the extras process does (``extras="only"``: peak memory,
    counts, bottleneck, the op profile when asked), writing to the pass's own file. The switch is
    one new role for the :class:`~pytest_gpuperf.plugin.session.GpuPerfSession`'s settings (whose
    options are merged per item and role, and whose GpuBench of a test is released at its teardown).

    pytest's ``runtestprotocol`` runs each test again without logging a second report, as
    pytest-rerunfailures does (``_pytest.runner``; no public API runs an item twice)."""

    def __init__(self, session: Any) -> None:
        self.session = session

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Iterator[None]:
        outcome = yield
        if outcome.excinfo is None and not (session.shouldfail or session.shouldstop):
            self.run(session)

    def run(self, session: pytest.Session) -> None:
        """The pass over ``session.items`` (see the class)."""
        from _pytest.runner import runtestprotocol


        s = self.session.settings
        then = s.replicate.then
        with open(then.out, "w", encoding="utf-8") as f:
            f.write(json.dumps({PASS_STARTED: time.time()}) + "\n")
        self.session.settings = dataclasses.replace(
            s, replicate=WorkerRole((EXTRAS, s.replicate.slot[1]), then.out), op_profile=then.op_profile)
        items = list(session.items)
        for i, item in enumerate(items):
            runtestprotocol(item, log=False, nextitem=items[i + 1] if i + 1 < len(items) else None)
            if session.shouldfail or session.shouldstop:
                break


def pass_started(path: Path) -> float | None:
    """When the pass that writes ``path`` began (``time.time()``, s), or None when it did not."""
    try:
        with open(path, encoding="utf-8") as f:
            first = json.loads(f.readline() or "null")
    except (OSError, ValueError):
        return None
    value = first.get(PASS_STARTED) if isinstance(first, dict) else None
    return float(value) if isinstance(value, (int, float)) else None


def collect(runs: Sequence[Any], passes: Mapping[int, Path]) -> tuple[list[Any], list[int]]:
    """After the timed processes ``runs`` (:class:`~pytest_gpuperf.plugin.replicates.WorkerRun`):
    the extras runs their passes left, and the extras indexes ``j`` whose pass did not start (their
    extras need a process of their own). ``passes``: extras index ``j`` -> the pass's results file,
    made by the timed process that the file's run names (its ``then``).

    A pass's run takes the index ``-1 - j`` and the log of its process. The timed run keeps only
    what happened before its pass: its ``seconds`` end where the pass began (what the escalation
    expects a timed process to cost), and a crash or a timeout after its timing is the pass's
    error, not the timing's."""
    extras, missing = [], []
    by_file = {r.then_out: r for r in runs if r.then_out is not None}
    for j, path in sorted(passes.items()):
        run = by_file.get(str(path))
        started = pass_started(path)
        if run is None or started is None:
            missing.append(j)
            continue
        entries, failures = read_results(path)
        extra = WorkerRun(-1 - j, run.returncode, run.log, entries, run.error and f"{run.error} while measuring the extras",
                          failures, run.stopped)
        if run.launched is not None:
            extra.seconds = (run.seconds or 0.0) - max(0.0, started - run.launched)
            run.seconds = max(0.0, started - run.launched)
        run.error, run.stopped = None, False  # its timing finished
        extras.append(extra)
    return extras, missing


def plan(processes: int, count: int, op_profile: bool, log_dir: Path) -> tuple[dict[int, Path], dict[int, ThenExtras]]:
    """The passes of a session of ``processes`` (P) timed processes that needs ``count`` extras
    runs (an update 2, so that what differs between processes is seen as variable; else 1): extras
    run j is made by timed process P - 1 - j after its timing, into ``<log_dir>/extras-j.jsonl``
    (the file an extras process of its own would write). Returns (j -> that file, k -> the
    :class:`ThenExtras` of timed process k). ``op_profile``: the passes share the op profile's
    cycles, as ``count`` extras processes would."""
    passes = {j: log_dir / f"extras-{j}.jsonl" for j in range(count)}
    then = {processes - 1 - j: ThenExtras(str(path), count if op_profile else 0)
            for j, path in passes.items() if processes - 1 - j >= 0}
    return passes, then
