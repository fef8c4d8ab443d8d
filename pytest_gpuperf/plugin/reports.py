"""The reports a session gives when it ends (issue 33: one feature, one small plugin object).

:class:`TerminalSummary` prints the summary; :class:`ReportWriter` writes ``--gpuperf-json``, ``--gpuperf-markdown`` and ``--gpuperf-plot`` from the
session's recorded measurements, in the session the user started (pytest-xdist's controller; never in
a worker process). :func:`pytest_gpuperf.plugin.pytest_configure` registers it only when one of them
is asked for. A report that cannot be written is one error line of the summary (``errors``), a plot
that fails one warning: neither takes the session down.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


class ReportWriter:
    """Writes the session's reports after its own ``pytest_sessionfinish`` merged and sorted the
    measurements (``session``: the :class:`~pytest_gpuperf.plugin.session.GpuPerfSession`)."""

    def __init__(self, session: Any) -> None:
        self.session = session

    @staticmethod
    def wanted(settings: Any) -> bool:
        """Whether a session with these :class:`~pytest_gpuperf.plugin.settings.SessionSettings` writes a report."""
        return any(p is not None for p in (settings.json_path, settings.markdown_path, settings.plot_dir))

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        s = self.session
        if s.ab_worker is not None or s.settings.worker_id is not None:
            return  # a worker's measurements go to its coordinator, which writes the reports
        if s.settings.json_path is not None:
            self._write_report("--gpuperf-json", s.settings.json_path, lambda: self._write_json())
        if s.settings.markdown_path is not None:
            from pytest_gpuperf.core.files import write_atomic
            from pytest_gpuperf.reporting.report import markdown

            items = [(f"{rec.module}::{rec.result.benchmark_id}", rec.result) for rec in s.recorded]
            devices = sorted({rec.result.device for rec in s.recorded})
            self._write_report("--gpuperf-markdown", s.settings.markdown_path, lambda: write_atomic(
                s.settings.markdown_path, markdown(items, devices=devices, strict=s.settings.strict,
                                                   warnings=s.session_warnings(),
                                                   mode="ab" if s.settings.ab is not None else
                                                   "replicates" if s.settings.replicated else "stored")))
        if s.settings.plot_dir is not None:
            self._write_plots()

    def _write_report(self, option: str, path: Path, write: Any) -> None:
        """Run ``write()``; an OSError becomes one error line of the summary (no traceback after the run)."""
        try:
            write()
        except OSError as exc:
            self.session.errors[str(path)] = f"could not write {option} {path}: {exc.strerror or exc}"

    def _write_plots(self) -> None:
        s = self.session
        from pytest_gpuperf.storage.baseline import BaselineError, load
        from pytest_gpuperf.reporting.plots import plot_benchmark, plot_forest, safe_filename
        from pytest_gpuperf.reporting.report import comparison_dict

        rows = []
        for rec in s.recorded:
            c = rec.result.comparison
            if c is None or c.ratio is None or not rec.baseline_path:
                continue
            name = f"{rec.module}::{rec.result.benchmark_id}"
            try:
                base = load(rec.baseline_path)
            except BaselineError:
                continue
            entry = base.get(rec.result.benchmark_id) if base else None
            if entry is None:
                continue
            d = comparison_dict(c)
            try:
                plot_benchmark(name, rec.result.samples_ms, entry.samples_ms, d,
                               s.settings.plot_dir / f"{safe_filename(name)}.png")
            except (ValueError, OSError) as exc:  # a plot never takes the session down
                s.warnings.append(f"could not plot {name}: {exc}")
            rows.append(dict(d, name=name))
        if rows:
            try:
                plot_forest(rows, s.settings.plot_dir / "forest.png", threshold=_common_threshold(rows))
            except (ValueError, OSError) as exc:
                s.warnings.append(f"could not write the forest plot: {exc}")

    def _write_json(self) -> None:
        s = self.session
        from pytest_gpuperf.core.files import write_atomic
        from pytest_gpuperf.storage.baseline import SCHEMA_VERSION, dumps
        from pytest_gpuperf.measure.environment import utc_now
        from pytest_gpuperf.reporting.report import result_entry

        from pytest_gpuperf.core.git import current_branch
        from pytest_gpuperf.plugin.benchmark_compat import report_info, update_json

        stamp, (commit, dirty) = utc_now(), s.git_state()
        environments = {rec.device_key: rec.environment for rec in s.recorded if rec.device_key}
        machine_info, commit_info, problems = report_info(s.config, commit, dirty, current_branch(s.settings.rootpath))
        data = {
            "schema_version": SCHEMA_VERSION,
            "kind": "report",
            "created_utc": stamp,
            "git_commit": commit,
            "environments": environments,
            "benchmarks": {
                f"{rec.module}::{rec.result.benchmark_id}": dict(
                    result_entry(rec.result, environment=rec.environment or {}, git_commit=commit,
                                 timestamp_utc=stamp, with_comparison=True),
                    module=rec.module,
                    baseline_file=s.settings.relpath(Path(rec.baseline_path)) if rec.baseline_path else None,
                    smoke=rec.result.smoke,
                )
                for rec in s.recorded
            },
            "warnings": s.session_warnings(),
            "machine_info": machine_info,
            "commit_info": commit_info,
        }
        if s.before_tests_s is not None:  # where the measuring before the tests went (issue 45)
            steps = s.coordinator.phases_s if s.coordinator is not None else {}
            data["measuring_s"] = {"before_tests": round(s.before_tests_s, 3),
                                   "steps": {k: round(v, 3) for k, v in steps.items()}}
        for entry in data["benchmarks"].values():
            entry.pop("op_profile", None)  # the baselines keep it (compact); the report has the op diff
        problems += update_json(s.config, [rec.result for rec in s.recorded], data)
        if problems:  # a conftest's pytest-benchmark hook raised: the report says so too
            for line in problems:
                s.warn(line)
            data["warnings"] = s.session_warnings()
        write_atomic(s.settings.json_path, dumps(data))


class TerminalSummary:
    """The session's summary at the end of the terminal output (the table, notes, warnings, the
    reports written, the bisections of confirmed regressions, the whole session's time), in the
    session the user started; :func:`pytest_gpuperf.plugin.pytest_configure` registers it in every
    process but a pytest-xdist worker (whose measurements its controller summarizes).
    ``session``: the :class:`~pytest_gpuperf.plugin.session.GpuPerfSession`."""

    def __init__(self, session: Any) -> None:
        self.session = session

    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
        """The session's summary (:func:`pytest_gpuperf.reporting.terminal.summary`)."""
        import dataclasses

        from pytest_gpuperf.reporting.terminal import summary

        width = config.get_terminal_writer().fullwidth  # the width pytest reports with
        for kind, text, markup in summary(dataclasses.replace(self._summary_input(config), width=width)):
            if kind == "sep":
                terminalreporter.write_sep("=", text)
            else:
                terminalreporter.write_line(text, **markup)
        s = self.session
        coordinator = s.coordinator
        if coordinator is not None and coordinator.bisect_lines:
            terminalreporter.write_sep("=", "gpuperf: bisection of the confirmed regressions")
            for line in coordinator.bisect_lines:
                terminalreporter.write_line(line)
        from pytest_gpuperf.reporting.terminal import more_processes_line, whole_time_line, wrap

        closing = []
        if coordinator is not None and (coordinator.more_processes or coordinator.not_escalated):
            closing.append(more_processes_line(coordinator.more_processes, s.settings.processes,
                                               not_escalated=len(coordinator.not_escalated),
                                               max_processes=s.settings.limits.max_processes,
                                               updating=s.settings.updating))
        if s.before_tests_s is not None:
            import time

            closing.append(whole_time_line(time.monotonic() - s.started, s.before_tests_s,
                                           ab=s.settings.ab is not None,
                                           phases_s=coordinator.phases_s if coordinator is not None else None))
        for line in closing:  # wrapped to the terminal, as the notes and warnings are
            for part in wrap(line, width):
                terminalreporter.write_line(part)

    def _summary_input(self, config: pytest.Config) -> Any:
        """What the terminal summary reports (a :class:`~pytest_gpuperf.reporting.terminal.SessionSummary`)."""
        from pytest_gpuperf.plugin import benchmark_compat
        from pytest_gpuperf.reporting.terminal import Row, SessionSummary

        session = self.session
        s = session.settings
        ab = s.ab
        reports = (("results", s.json_path), ("Markdown summary", s.markdown_path), ("plots", s.plot_dir))
        rows = [Row(f"{rec.module}::{rec.result.benchmark_id}", rec.result, rec.updated, rec.device_key)
                for rec in session.recorded]
        rows, table_options = self._benchmark_display_hooks(config, rows)
        return SessionSummary(
            rows=rows,
            measuring=s.measuring, updating=s.updating, replicated=s.replicated, processes=s.processes,
            world_size=s.world_size if s.world_size > 1 else None,
            ab_label=None if ab is None else getattr(ab, "label", str(ab)), ab_processes=s.ab_processes,
            ab_removed=tuple(session.ab_removed), baselines=s.relpath(s.baseline_dir),
            table_options=table_options, notes=tuple(session.notes),
            warnings=tuple(session.session_warnings()), workers_seen=session.workers_seen,
            written=tuple((label, str(path)) for label, path in reports if path is not None and str(path) not in session.errors),
            errors=tuple(session.errors.values()),
        )

    def _benchmark_display_hooks(self, config: pytest.Config, rows: list[Any]) -> tuple[list[Any], dict[str, Any]]:
        """pytest-benchmark's display hooks, where a conftest implements them (issue 46): the rows
        regrouped by ``pytest_benchmark_group_stats``, the table's time unit from
        ``pytest_benchmark_scale_unit``, and each baseline file's machine compared by
        ``pytest_benchmark_compare_machine_info``; a hook that raised is a warning. Returns the
        rows and the table's options."""
        import dataclasses

        from pytest_gpuperf.plugin import benchmark_compat as compat

        session, problems = self.session, []
        pairs = [(row.name, row.result) for row in rows]
        options = dict(compat.table_options(config))
        groups = compat.group_stats(config, pairs, problems)
        if groups:
            rows = [dataclasses.replace(row, result=dataclasses.replace(row.result, group=groups[row.name]))
                    if row.name in groups else row for row in rows]
        options["time_unit"] = compat.scale_unit(config, pairs, problems)
        if compat.implemented(config, "pytest_benchmark_compare_machine_info"):
            machine_info, raised = compat.session_machine_info(session)
            problems += raised + compat.compare_machine_info(config, machine_info, self._compared(), session.warn)
        for line in problems:
            session.warn(line)
        return rows, options

    def _compared(self) -> dict[str, Any]:
        """Each baseline file this session compared against (as shown) -> one of its entries' data."""
        from pytest_gpuperf.storage.baseline import BaselineError, load

        out: dict[str, Any] = {}
        for rec in self.session.recorded:
            c = rec.result.comparison
            if c is None or c.baseline_median_ms is None or not rec.baseline_path:
                continue
            shown = str(self.session.settings.relpath(Path(rec.baseline_path)))
            if shown in out:
                continue
            try:
                base = load(rec.baseline_path)
            except BaselineError:
                continue
            entry = base.get(rec.result.benchmark_id) if base else None
            if entry is not None:
                out[shown] = entry.data
        return out


def _common_threshold(rows: list[dict[str, Any]]) -> float | None:
    """The threshold most of the forest plot's rows were decided with (the band; a CPU run's default
    is 10%, a CUDA run's 5%: :func:`~pytest_gpuperf.core.options.for_device`), None without any."""
    from collections import Counter

    counts = Counter(r["threshold"] for r in rows if isinstance(r.get("threshold"), (int, float)))
    return counts.most_common(1)[0][0] if counts else None
