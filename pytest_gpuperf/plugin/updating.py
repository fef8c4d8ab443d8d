"""Writing baselines (``--gpuperf-update-baselines``): a test's measurements into its baseline files.

Called by the session when a test's call phase passed (:func:`write_baselines`), or at session
finish for the tests whose writes were deferred (:func:`write_pending`: worker processes measured
them, or under torchrun); the baseline files themselves are :mod:`pytest_gpuperf.storage.baseline`
(locked, atomic, validated).
"""

from __future__ import annotations

from typing import Any

import pytest


def write_baselines(session: Any, items: list[pytest.Item]) -> str | None:
    """``--gpuperf-update-baselines``: write the measurements that ``session`` (the
    :class:`~pytest_gpuperf.plugin.session.GpuPerfSession`) recorded for ``items`` (tests) into their baseline files, with the checkout's commit: one read-modify-write per file
    (a file of 100 benchmarks written once, not once per test: issue 45 measured 95 s of a 159 s
    update run in per-test writes of a 5 MB file). Returns an error message (the first) or None."""
    from pytest_gpuperf.storage.baseline import BaselineError, update
    from pytest_gpuperf.measure.environment import utc_now
    from pytest_gpuperf.plugin.benchmark_compat import session_machine_info
    from pytest_gpuperf.storage.codec import encode_result
    from pytest_gpuperf.verdict.stats import MAX_STORED_SAMPLES

    nodeids = {item.nodeid for item in items}
    mine = [r for r in session.recorded if r.nodeid in nodeids and not r.result.smoke]
    if not mine:
        return None
    stamp, (commit, dirty) = utc_now(), session.git_state()
    machine_info, problems = session_machine_info(session)  # kept for pytest_benchmark_compare_machine_info
    for line in problems:
        session.warn(line)
    by_path: dict[str, list[Any]] = {}
    for rec in mine:
        by_path.setdefault(rec.baseline_path or "", []).append(rec)
    problem = None
    for path, recs in by_path.items():
        entries = {
            rec.result.benchmark_id: _without_local_paths(_compact_op_profile(dict(encode_result(
                rec.result, environment=rec.environment or {}, git_commit=commit, timestamp_utc=stamp,
                max_samples=MAX_STORED_SAMPLES), **({} if dirty is None else {"dirty": dirty}),
                machine_info=machine_info)))
            for rec in recs
        }
        try:
            update(path, entries, device_key=recs[0].device_key or "", module=recs[0].module)
        except (BaselineError, OSError) as exc:
            problem = problem or f"pytest-gpuperf: could not write baseline: {exc}"
            continue
        for rec in recs:
            rec.updated = True
        session.forget_baseline(path)  # the next read sees what was written
    return problem


def write_pending(session: Any, pytest_session: pytest.Session) -> None:
    """At session finish: the baselines of the tests that passed whose writes were deferred
    (``session.pending_writes``), once per file (:func:`write_baselines`): those of a session that
    measured in worker processes (its tests only replay finished results), and under torchrun
    rank 0's, after a barrier (:func:`_every_rank_finished`). A baseline that cannot be written is
    an error of the summary and fails the session (``pytest_session.exitstatus``)."""
    if session.settings.ranks is not None and not _every_rank_finished(session, pytest_session):
        return
    if not session.pending_writes:
        return
    problem = write_baselines(session, session.pending_writes)
    if problem:
        session.errors["baselines"] = problem
        pytest_session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _every_rank_finished(session: Any, pytest_session: pytest.Session) -> bool:
    """Under torchrun, on every rank: a barrier. When it fails, or an earlier collective already
    did (``ranks.broken``: then no barrier is tried, and rank 0 used to reach the writes before
    torchrun stopped it, in 2 of 6 runs of the killed-rank test), False: nothing is written, so no
    baseline comes from a run in which a rank failed (a summary error says so)."""
    from pytest_gpuperf.measure.distributed import DistributedFault

    ranks = session.settings.ranks
    fault = ranks.broken  # an earlier collective failed: the barrier would not even be tried
    if fault is None:
        try:
            ranks.barrier()
        except DistributedFault as exc:
            fault = str(exc)
    if fault is None:
        return True
    if session.pending_writes:
        session.errors["baselines"] = (f"no baseline written ({len(session.pending_writes)} test(s) passed): "
                                       f"not every rank finished the session: {fault}")
        pytest_session.exitstatus = pytest.ExitCode.TESTS_FAILED
    return False


def _compact_op_profile(entry: dict[str, Any]) -> dict[str, Any]:
    """A baseline entry with its op profile in the compact form a baseline stores
    (:func:`~pytest_gpuperf.verdict.opdiff.compact_profile`: a few KB), or without one that cannot be read."""
    raw = entry.pop("op_profile", None)
    if isinstance(raw, dict):
        from pytest_gpuperf.verdict.opdiff import compact_profile, stored_samples

        try:
            entry["op_profile"] = compact_profile(stored_samples(raw)[0])
        except ValueError:
            pass  # nothing profiled: no profile stored
    return entry


def _without_local_paths(entry: dict[str, Any]) -> dict[str, Any]:
    """A baseline entry without this run's local callgrind dump path (``instructions.dump``): the
    instruction mode keeps the baseline's dump under ``.gpuperf/instructions/`` by benchmark instead
    (:mod:`pytest_gpuperf.plugin.instructions`), and a committed file names no local path."""
    inst = entry.get("instructions")
    if isinstance(inst, dict):
        entry["instructions"] = {k: v for k, v in inst.items() if k != "dump"}
    return entry
