"""Recording each measuring run into the history store (issue 34; one feature, one small plugin
object, registered only when active).

:class:`HistoryRecorder` is registered by :func:`pytest_gpuperf.plugin.pytest_configure` in the
session the user started (pytest-xdist's controller; never in a worker process, an A/B side or an
extras process) when it measures (``--gpuperf``, ``--gpuperf-update-baselines``, ``--gpuperf-ab``)
and history is on: ``--gpuperf-history URL`` (ini ``gpuperf_history_url``; default
``.gpuperf/history.sqlite`` under the rootdir), off with ``--gpuperf-no-history`` or ini
``gpuperf_history_url = off``. After the reports, it appends the run and a row per measured benchmark
in one transaction (:mod:`pytest_gpuperf.storage.history`). A store that cannot be written is one
warning naming its URL (password hidden) — the tests' outcome and the reports stand — and, under
``--gpuperf-strict``, an error that fails the session.
"""

from __future__ import annotations

import platform
import uuid
from typing import Any

import pytest

def history_url(config: pytest.Config, settings: Any) -> str | None:
    """The store URL this session appends its run to, or None (not measuring, a worker process, a
    bisection, or history off). A command-line path is relative to the invocation folder, an ini
    one and the default to the rootdir. Raises ``pytest.UsageError`` for a URL that is not accepted."""
    if not settings.measuring or settings.bisect is not None or not coordinating(settings):
        return None  # (a plain run stops here, having imported nothing)
    if config.getoption("--gpuperf-no-history"):
        return None
    from pytest_gpuperf.plugin.settings import OFF_WORDS
    from pytest_gpuperf.storage.history import DEFAULT_PATH, HistoryError, normalize_url

    raw, root, source = config.getoption("--gpuperf-history"), settings.invocation_dir, "--gpuperf-history"
    if raw is None:
        raw, root, source = (config.getini("gpuperf_history_url") or "").strip() or None, settings.rootpath, "ini gpuperf_history_url"
    if raw is not None and raw.strip().lower() in OFF_WORDS:
        return None
    try:
        return normalize_url(raw if raw is not None else DEFAULT_PATH, root)
    except HistoryError as exc:
        raise pytest.UsageError(f"{exc} ({source})") from None


def coordinating(settings: Any) -> bool:
    """Whether this process is the session the user started (not a pytest-xdist worker, a
    replicate worker, an A/B side or an extras process, whose measurements go to it)."""
    return (settings.worker_id is None and settings.replicate is None and not settings.in_ab_worker
            and settings.select_file is None and not settings.op_profile)


class HistoryRecorder:
    """Appends the run of ``session`` (the :class:`~pytest_gpuperf.plugin.session.GpuPerfSession`)
    to the store at ``url`` after the session's own ``pytest_sessionfinish`` merged the
    measurements."""

    def __init__(self, session: Any, url: str) -> None:
        self.session = session
        self.url = url

    def run_record(self) -> Any:
        """The :class:`~pytest_gpuperf.storage.history.RunRecord` of this session."""
        from pytest_gpuperf.core.git import commit_subjects, current_branch
        from pytest_gpuperf.measure.environment import utc_now
        from pytest_gpuperf.storage.history import RunRecord

        s = self.session
        st = s.settings
        commit, dirty = s.git_state()
        subject, commit_time = commit_subjects(st.rootpath, [commit]).get(commit, (None, None)) if commit else (None, None)
        env = next((rec.environment for rec in s.recorded if rec.environment), None) or {}
        keys = sorted({rec.device_key for rec in s.recorded if rec.device_key})
        mode = "update" if st.updating else "ab" if st.ab is not None else "compare"
        options = dict(st.options.to_dict(), processes=st.processes, strict=st.strict, normalize=st.normalize,
                       ab_ref=getattr(st.ab, "label", None) if st.ab is not None else None)
        return RunRecord(run_id=uuid.uuid4().hex, created_utc=utc_now(), mode=mode, commit=commit,
                         branch=current_branch(st.rootpath), dirty=dirty, machine=platform.node() or None,
                         device_key=",".join(keys) or None, torch_version=env.get("torch_version"),
                         cuda_version=env.get("cuda_version"), driver_version=env.get("driver_version"),
                         plugin_version=env.get("plugin_version"), options=options, subject=subject,
                         commit_time=commit_time)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        from pytest_gpuperf.storage.history import HistoryError, HistoryStore, rows_of

        s = self.session
        rows = rows_of([(f"{rec.module}::{rec.result.benchmark_id}", rec.result, rec.device_key)
                        for rec in s.recorded])
        if not rows:
            return  # nothing measured (all smoke, deselected or failed before measuring)
        try:
            with HistoryStore(self.url) as store:
                store.append(self.run_record(), rows)
        except Exception as exc:  # contained: the store never takes the session or its reports down
            if not isinstance(exc, HistoryError):
                from pytest_gpuperf.storage.history import redact, shown

                exc = HistoryError(f"pytest-gpuperf: history store {shown(self.url)}: "
                                   f"{type(exc).__name__}: {redact(str(exc))}")
            if s.settings.strict:
                s.errors["--gpuperf-history"] = f"{exc} (an error under --gpuperf-strict)"
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
            else:
                s.warnings.append(f"the run was not recorded in the history: {exc}")
