"""What a pytest-xdist worker hands its controller (issue 33: one wire format, one place).

A worker's session writes :func:`worker_payload` (its :class:`Recorded` measurements as
:mod:`pytest_gpuperf.storage.codec` entries, warnings, notes) to ``worker-<id>.json`` in the run's
shared folder; the controller's session reads every such file with :func:`merge_workers` before it
writes its summary and reports. ``session``: the
:class:`~pytest_gpuperf.plugin.session.GpuPerfSession`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any


@dataclass
class Recorded:
    """One measurement of the session, with where it came from: the test's node id and module, the
    :class:`~pytest_gpuperf.verdict.result.BenchResult`, its baseline file, device key and environment
    fingerprint, and whether it was written to its baseline."""

    nodeid: str
    module: str
    result: Any  # BenchResult
    baseline_path: str | None
    device_key: str | None
    environment: dict[str, Any] | None
    updated: bool = False


def hand_to_controller(session: Any) -> None:
    """At a pytest-xdist worker's session finish (after its deferred baselines were written): hand
    its measurements, and its errors (a baseline it could not write) as warnings, to the controller
    through the run's folder (``worker-<id>.json``)."""
    session.warnings.extend(session.errors.values())
    session.errors.clear()
    s = session.settings
    if s.xdist_dir is not None and (session.recorded or session.warnings):
        from pytest_gpuperf.core.files import write_atomic
        from pytest_gpuperf.storage.baseline import dumps

        write_atomic(s.xdist_dir / f"worker-{s.worker_id}.json", dumps(worker_payload(session)))


def worker_payload(session: Any) -> dict[str, Any]:
    """A pytest-xdist worker's measurements, warnings and notes, for its controller (JSON-ready)."""
    from pytest_gpuperf.measure.environment import utc_now
    from pytest_gpuperf.storage.codec import encode_result

    stamp = utc_now()
    return {
        "records": [
            {
                "nodeid": rec.nodeid, "module": rec.module, "baseline_path": rec.baseline_path,
                "device_key": rec.device_key, "environment": rec.environment, "updated": rec.updated,
                "entry": dict(encode_result(rec.result, environment=rec.environment or {}, git_commit=None,
                                           timestamp_utc=stamp, with_comparison=True), smoke=rec.result.smoke),
            }
            for rec in session.recorded
        ],
        "warnings": session.warnings,
        "notes": session.notes,
        "overruns": [[name, dataclasses.asdict(o)] for name, o in session.overruns],
        "inconclusive": session.inconclusive,
    }


def merge_workers(session: Any) -> None:
    """Controller: add every pytest-xdist worker's measurements to ``session``'s (a worker file that
    cannot be read is one warning). Nothing outside pytest-xdist."""
    if session.settings.xdist_dir is None:
        return
    import json

    from pytest_gpuperf.storage.codec import decode_result
    from pytest_gpuperf.verdict.result import Overrun

    for path in sorted(session.settings.xdist_dir.glob("worker-*.json")):
        session.workers_seen += 1
        try:
            payload = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            session.warnings.append(f"could not read the results of pytest-xdist worker file {path}: {exc}")
            continue
        for r in payload.get("records", []):
            session.recorded.append(Recorded(
                r["nodeid"], r["module"], decode_result(r["entry"]), r.get("baseline_path"),
                r.get("device_key"), r.get("environment"), bool(r.get("updated")),
            ))
        session.warnings.extend(payload.get("warnings", []))
        session.overruns.extend((name, Overrun(**o)) for name, o in payload.get("overruns", []))
        session.inconclusive.extend(payload.get("inconclusive", []))
        session.notes.extend(payload.get("notes", []))
