"""The plugin's session object: :class:`GpuPerfSession` owns one pytest session's state.

In the style of pytest-memray's ``Manager``: :func:`pytest_gpuperf.plugin.pytest_configure`
resolves the :class:`~pytest_gpuperf.plugin.settings.SessionSettings` once, makes one
:class:`GpuPerfSession`, registers it as a plugin (its methods are the session's hooks: session
start, collection, test reports, session finish) and puts it in ``config.stash`` under
:data:`~pytest_gpuperf.plugin.keys.SESSION_KEY`, where the fixtures and the pytest-benchmark
adapter find it. Everything mutable of the session lives here: the recorded measurements,
warnings, telemetry notes, report errors, the finished A/B or replicate results, and the caches
of environments and baseline files.

Each role and feature beyond that is a small object of its own (issue 33), present only where it
is active: the :class:`~pytest_gpuperf.plugin.coordinator.Coordinator` (the session that measures
before the tests), the :class:`~pytest_gpuperf.plugin.reports.TerminalSummary` (not in a
pytest-xdist worker), the :class:`~pytest_gpuperf.plugin.reports.ReportWriter` (when a report is
asked for); the xdist hand-off (:mod:`~pytest_gpuperf.plugin.handoff`) and the baseline writing
(:mod:`~pytest_gpuperf.plugin.updating`) are modules of their own.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

import pytest

from pytest_gpuperf.core import options as opts
from pytest_gpuperf.plugin import benchmark_compat
from pytest_gpuperf.plugin.handoff import Recorded, hand_to_controller, merge_workers
from pytest_gpuperf.plugin.keys import BENCH_KEY
from pytest_gpuperf.plugin.settings import SessionSettings, cli_values, ini_values
from pytest_gpuperf.plugin.updating import write_baselines, write_pending

if TYPE_CHECKING:
    from pytest_gpuperf.storage.baseline import BaselineFile



@dataclass(frozen=True)
class _Stored:
    """What a test is compared with: its module, its environment fingerprint and device key (None:
    not measured), and its baseline file's path and contents (None: not compared with stored baselines)."""

    module: str
    env: dict[str, Any] | None = None
    key: str | None = None
    path: Path | None = None
    baseline: "BaselineFile | None" = None
    scaling: Any = None  # under torchrun: bid -> its baseline at a smaller world size (plugin.distributed)

_REFERENCE_CACHE: dict[str, dict[str, Any]] = {}


def _reference_for(device: Any, measure: Any, shared_dir: Path | None = None, lock: Any = None) -> dict[str, Any] | None:
    """Reference-workload medians of ``device`` (about 0.3 s), measured once per process, under the
    device's lock; under pytest-xdist once per run, shared through ``shared_dir`` (see
    :func:`pytest_gpuperf.measure.drift.shared_reference`)."""
    import contextlib

    from pytest_gpuperf.measure.drift import shared_reference

    key = str(device)
    if key not in _REFERENCE_CACHE:
        try:
            _REFERENCE_CACHE[key] = shared_reference(device, measure, shared_dir, lock or contextlib.nullcontext())
        except Exception as exc:  # a failing reference must not take the session down
            return {"error": f"{type(exc).__name__}: {exc}"}
    return _REFERENCE_CACHE[key]




OPTIONS_KEY = pytest.StashKey[tuple[Any, opts.BenchOptions]]()  # (the role's slot, the item's merged options)


class GpuPerfSession:
    """One pytest session of the plugin: its :class:`~pytest_gpuperf.plugin.settings.SessionSettings`
    (``settings``, frozen) and its mutable state, with the session's hooks as methods.

    ``recorded``: every measurement (:class:`Recorded`), in order; ``warnings``/``notes``: summary
    lines (telemetry notes apart); ``errors``: report path -> why it could not be written;
    ``workers_seen``: pytest-xdist workers whose results were merged; ``ab_worker``: in an A/B
    worker process, its :class:`~pytest_gpuperf.ab.run.WorkerClient`; ``ab_results``: full id ->
    finished result (or why there is none) of the A/B or replicate workers; ``ab_removed``:
    benchmarks that exist on side A only.
    """

    def __init__(self, config: pytest.Config, settings: SessionSettings) -> None:
        self.config = config
        self.settings = settings
        self.recorded: list[Recorded] = []
        self.warnings: list[str] = []
        self.notes: list[str] = []
        self.overruns: list[tuple[str, Any]] = []  # (module::id, Overrun): one summary line for all
        self.inconclusive: list[str] = []  # module::id of inconclusive verdicts that pass: one line for all
        self.errors: dict[str, str] = {}
        self.pending_writes: list[pytest.Item] = []  # tests whose baselines are written at the end (updating.write_pending)
        self._progress_line: Any = None  # ProgressLine, made when long work starts
        self.workers_seen = 0
        self.ab_worker: Any = None
        if settings.in_ab_worker:
            from pytest_gpuperf.ab.run import WorkerClient

            self.ab_worker = WorkerClient.from_environment(settings.ranks)  # in a launch: rank 0 talks
        self.ab_results: dict[str, Any] | None = None
        self.ab_removed: list[str] = []
        self._git: tuple[str | None, bool | None] | None = None
        self._baselines: dict[str, BaselineFile | None] = {}
        self._environments: dict[str, dict[str, Any]] = {}
        import time

        self.started = time.monotonic()  # configure time: the whole session's clock (issue 31)
        self.before_tests_s: float | None = None  # worker processes / A/B before the tests, when any
        self.coordinator: Any = None  # the Coordinator, in the session that measures before the tests

    def warn(self, message: str) -> None:
        """Add a line to the summary's warnings (each distinct line is printed once)."""
        self.warnings.append(message)

    def session_warnings(self) -> list[str]:
        """The session's warnings, each once, in order, with the ones grouped for the whole session
        (the benchmarks whose ``max_time`` is too short for their calls) last."""
        if not (self.inconclusive or self.overruns):  # a plain run: the messages module needs numpy
            return list(dict.fromkeys(self.warnings))
        from pytest_gpuperf.reporting.messages import inconclusive_warning, overrun_warning

        grouped = [inconclusive_warning(self.inconclusive), overrun_warning(self.overruns)]
        return list(dict.fromkeys([*self.warnings, *(g for g in grouped if g)]))

    def environment(self, device: Any) -> dict[str, Any]:
        """Fingerprint of ``device`` with its reference-workload medians (once per session)."""
        key = str(device)
        if key not in self._environments:
            from pytest_gpuperf.measure.drift import measure_reference

            env = _workers_environment(device, self.coordinator)  # an A/B run's: its workers' allocator
            env["reference"] = _reference_for(device, measure_reference, self.settings.xdist_dir, self.device_lock(device))
            self._environments[key] = env
            if device.type == "cuda":
                from pytest_gpuperf.measure.telemetry import handle_for, nvml_status, other_processes, other_processes_warning

                status = nvml_status()
                if status:
                    self.notes.append(status)
                warning = other_processes_warning(other_processes(handle_for(device.index or 0)), device)
                if warning:
                    self.warnings.append(warning)
        return self._environments[key]

    def baseline(self, path: Path) -> "BaselineFile | None":
        """Load (once per session) the baseline file at ``path``; raises BaselineError."""
        key = str(path)
        if key not in self._baselines:
            from pytest_gpuperf.storage.baseline import load

            self._baselines[key] = load(path)
        return self._baselines[key]


    def forget_baseline(self, path: str | Path) -> None:
        """Drop the cached baseline file at ``path`` (after it was written)."""
        self._baselines.pop(str(path), None)

    def git_state(self) -> tuple[str | None, bool | None]:
        """``(commit, dirty)`` of the checkout, once per session (before any baseline is written; the
        baseline folder's own changes do not make it dirty)."""
        if self._git is None:
            from pytest_gpuperf.core.git import head_commit, is_dirty

            self._git = (head_commit(self.settings.rootpath), is_dirty(self.settings.rootpath, ignore=self.settings.baseline_dir))
        return self._git


    def device_lock(self, device: Any) -> Any:
        """Under pytest-xdist, a file lock serializing measurements on one device across workers."""
        if self.settings.xdist_dir is None:
            import contextlib

            return contextlib.nullcontext()
        from filelock import FileLock

        return FileLock(str(self.settings.xdist_dir / f"device-{str(device).replace(':', '_')}.lock"))

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """In the coordinator role (replicate worker processes, ``--gpuperf-ab``, ``--gpuperf-bisect``):
        measure before the tests (and before pytest-xdist starts its workers) with a
        :class:`~pytest_gpuperf.plugin.coordinator.Coordinator`; the tests then pick up their finished results."""
        s = self.settings
        if s.worker_id is not None or self.ab_worker is not None:
            return
        if s.bisect is None and not s.replicated and s.ab is None:
            return
        if _runs_no_test(self.config):  # --collect-only, --setup-only, --setup-plan: nothing to measure
            return
        import time

        from pytest_gpuperf.core.allocator import for_workers
        from pytest_gpuperf.plugin.coordinator import Coordinator

        start = time.monotonic()
        self.coordinator = Coordinator(self.config, s, self._progress, self.baseline, self.warn)
        try:
            with for_workers(s.limits.allocator) as self.coordinator.allocator:  # its workers' env, not the tests'
                self.coordinator.run()
        finally:
            self._progress().close()
            self.ab_results, self.ab_removed = self.coordinator.results, self.coordinator.removed
            if s.replicated or s.ab is not None:
                self.before_tests_s = time.monotonic() - start

    def _progress(self) -> Any:
        """The session's progress line (:class:`~pytest_gpuperf.reporting.terminal.ProgressLine`): rewritten in
        place on a terminal, plain lines in CI logs."""
        if self._progress_line is None:
            from pytest_gpuperf.reporting.terminal import ProgressLine

            self._progress_line = ProgressLine(self.config.pluginmanager.getplugin("terminalreporter"),
                                               self.config.get_terminal_writer().fullwidth)
        return self._progress_line

    def pytest_collection_modifyitems(self, session: pytest.Session, config: pytest.Config,
                                      items: list[pytest.Item]) -> None:
        """A worker process added for inconclusive benchmarks (hidden ``--gpuperf-select FILE``) runs
        only the tests named in FILE, one node id per line; the others are deselected."""
        if self.settings.select_file is None:
            return
        wanted = set(self.settings.select_file.read_text(encoding="utf-8").splitlines())
        keep = [item for item in items if item.nodeid in wanted]
        dropped = [item for item in items if item.nodeid not in wanted]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = keep

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """An A/B worker tells the coordinator which tests it collected."""
        if self.ab_worker is not None and not self.ab_worker.said_hello:
            self.ab_worker.hello([item.nodeid for item in session.items])

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self.settings.owns_xdist_dir:
            import shutil

            shutil.rmtree(self.settings.xdist_dir, ignore_errors=True)

    def options_for(self, item: pytest.Item) -> opts.BenchOptions:
        """The item's options: its markers over the session's; merged once per item and role (an extras
        pass runs a timed worker's tests again with the extras role's options; raises OptionError)."""
        slot, cached = self.settings.replicate_slot, item.stash.get(OPTIONS_KEY, None)
        if cached is None or cached[0] != slot:
            item.stash[OPTIONS_KEY] = cached = (slot, _merged_options(item, self.settings.options, slot))
        return cached[1]

    def make_gpu_bench(self, request: pytest.FixtureRequest, _gpuperf_measurer: Any, device: Any = None) -> Any:
        """The test's :class:`~pytest_gpuperf.plugin.bench.GpuBench` (also behind the ``benchmark`` fixture).

        ``device``: a ``torch.device`` to measure on (the ``benchmark`` fixture passes the device of
        the tensors it was given); None resolves the test's ``device`` option. Skips or fails the test
        as the ``gpu_bench`` fixture does. Phases: the options and the device, the baseline to compare
        with (:meth:`_stored`), the :class:`~pytest_gpuperf.plugin.bench.BenchContext`
        (:meth:`_context`), and what happens to each result (:meth:`_record`).
        """
        from pytest_gpuperf.measure.timing import DeviceUnavailable, resolve_device, use_device
        from pytest_gpuperf.plugin.bench import GpuBench

        item = request.node
        try:
            options = self.options_for(item)
        except opts.OptionError as exc:
            raise pytest.fail.Exception(str(exc), pytrace=False) from None  # the reason once, without the chained traceback
        try:
            device = resolve_device(options.device, default_index=self.settings.device_index) if device is None else device
        except DeviceUnavailable as exc:
            pytest.skip(f"pytest-gpuperf: {exc}")
        use_device(device)  # "cuda" in the test's own code now means the GPU measured (xdist worker k: GPU k)
        options = opts.for_device(options, device.type, threshold_given=_threshold_given(item))  # 10% on the CPU
        slot = self.settings.replicate_slot
        # marker processes=N: a replicate worker past the first N only runs the test (one call)
        measuring = self.settings.measuring and not (slot is not None and slot[0] >= (options.processes or 10 ** 9))
        stored = self._stored(item, device, measuring)
        options = _aimed(options, self.settings, stored, item.nodeid) if measuring else options  # a timed worker's aim
        bench = GpuBench(self._context(request, _gpuperf_measurer, options, device, measuring, stored),
                         lambda result: self._record(item, bench, device, stored, result))
        item.stash[BENCH_KEY] = bench
        return bench

    def _stored(self, item: pytest.Item, device: Any, measuring: bool) -> "_Stored":
        """The test's environment and, when it is compared with stored baselines, its baseline file
        (fails the test, naming the file, when that file is unusable)."""
        module, _ = _split_nodeid(item.nodeid)
        s = self.settings
        from pytest_gpuperf.measure.environment import device_key, fingerprint

        if measuring and (self.ab_worker is not None or s.ab is not None or s.replicate_slot is not None):
            timed = s.replicate_slot is not None and s.replicate_slot[0] >= 0 and s.ranks is None  # issue 45
            env = self.environment(device) if timed else fingerprint(device)  # only a timed worker: reference workloads
            return _Stored(module, env, device_key(env))
        if not s.measuring:
            return _Stored(module)
        env = _workers_environment(device, self.coordinator) if s.replicated else self.environment(device)
        key, scaling = device_key(env), None
        if s.world_size > 1:  # torchrun or --gpuperf-nproc: a folder per world size, 2-rank and 8-rank runs never mix
            from pytest_gpuperf.storage.scaling import ScalingReference
            from pytest_gpuperf.verdict.scaling import world_size_suffix

            scaling = ScalingReference(self.baseline, Path(s.baseline_dir), key, module, s.world_size, s.relpath)
            key += world_size_suffix(s.world_size)
        from pytest_gpuperf.storage.baseline import BaselineError, baseline_path, check_module

        path = baseline_path(s.baseline_dir, key, module)
        try:
            baseline = self.baseline(path)
            check_module(baseline, module)  # a file of another module is neither compared nor written
        except BaselineError as exc:
            raise pytest.fail.Exception(str(exc), pytrace=False) from None  # the reason once, without the chained traceback
        return _Stored(module, env, key, path, baseline, scaling)

    def _context(self, request: pytest.FixtureRequest, measurer: Any, options: opts.BenchOptions, device: Any,
                 measuring: bool, stored: "_Stored") -> Any:
        """The :class:`~pytest_gpuperf.plugin.bench.BenchContext` of one test: its own values and the
        session settings it needs."""
        from pytest_gpuperf.plugin.bench import BenchContext

        s, item = self.settings, request.node
        return BenchContext(
            options=options,
            device=device,
            measuring=measuring,
            baseline=stored.baseline,
            baseline_file=s.relpath(stored.path) if stored.path else None,
            snapshot_dir=str(s.snapshot_dir) if s.snapshot_dir else None,
            classify=s.classify,
            thresholds=s.thresholds,
            artifacts_dir=None if s.updating else str(s.artifacts_dir),  # traces only for failed comparisons
            confirm_regressions=not s.updating,
            reference=(stored.env or {}).get("reference"),
            normalize=s.normalize,
            host_load=s.host_load,
            device_lock=lambda: self.device_lock(device),
            progress=_progress_writer(request.config, item.nodeid) if s.verbose > 0 and s.measuring else None,
            measurer=measurer,
            max_memory_text=_max_memory_text(item),
            group_of=benchmark_compat.group_of(item),
            ab_worker=self.ab_worker,
            ab_results=self._finished_results(),
            nodeid=item.nodeid,
            fail=lambda message: pytest.fail(message, pytrace=False),
            extras=_extras_mode(s.replicate_slot),
            op_profile=_op_profile_mode(s),
            ranks=s.ranks,
            scaling_reference=stored.scaling,
        )

    def _record(self, item: pytest.Item, bench: Any, device: Any, stored: "_Stored", result: Any) -> None:
        """One result of the test's ``gpu_bench``: recorded for the summary and the reports (and, in a
        replicate worker, handed to the coordinator at once), its JUnit properties, its warnings."""
        module, test_id = _split_nodeid(item.nodeid)
        # the session keeps the result for the summary and the reports, not the benchmark's return
        # value: a GPU tensor per benchmark would stay allocated for the rest of the session
        self.recorded.append(Recorded(item.nodeid, module, dataclasses.replace(result, value=None),
                                      str(stored.path) if stored.path else None, stored.key, stored.env))
        if self.settings.replicate_slot is not None and not result.smoke and self._reports_to_coordinator:
            from pytest_gpuperf.plugin.replicates import report_result

            report_result(f"{module}::{result.benchmark_id}", result, stored.env or {}, item.nodeid,
                          out=self.settings.replicate.out)
        _record_properties(item, result, several=len(bench.results) > 1 or result.name != test_id.split("::")[-1])
        self.warnings.extend(result.notes)
        self.warnings.extend(_not_counted(self.settings, result))
        name = f"{module}::{result.benchmark_id}"
        self.warnings.extend(_extras_warnings(name, result))
        if result.overrun is not None:
            self.overruns.append((name, result.overrun))
        c, s = result.comparison, self.settings
        if (stored.baseline is not None and stored.env is not None and c is not None
                and c.verdict.value == "inconclusive" and not s.strict and not s.updating
                and not c.machine_differs):  # one summary line for all (machine differs has its own)
            self.inconclusive.append(name)
        self.warnings.extend(_result_warnings(s, name, device, stored, result))

    @property
    def _reports_to_coordinator(self) -> bool:
        """A replicate worker's results go to its coordinator from this process: always, except in a
        torchrun launch of ``--gpuperf-nproc``, where rank 0 alone reports (every rank holds the
        launch's result: the slowest rank's time, each rank's median)."""
        return self.settings.ranks is None or self.settings.ranks.is_writer

    def _finished_results(self) -> dict[str, Any] | None:
        """The finished results of the A/B or replicate workers (a pytest-xdist worker reads the
        controller's file once); None when this session measures in its own process."""
        if (self.settings.ab is None or self.ab_worker is not None) and not self.settings.replicated:
            return None
        if self.ab_results is None and self.settings.xdist_dir is not None:
            from pytest_gpuperf.ab.results import load_results

            self.ab_results = load_results(self.settings.xdist_dir / "ab-results.json")
        return self.ab_results if self.ab_results is not None else {}

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        """pytest-xdist, in the controller: each worker it starts gets the run's shared folder."""
        from pytest_gpuperf.plugin.settings import XDIST_DIR_KEY

        if self.settings.xdist_dir is not None:
            node.workerinput[XDIST_DIR_KEY] = str(self.settings.xdist_dir)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
        outcome = yield
        report = outcome.get_result()
        bench = item.stash.get(BENCH_KEY, None)
        if bench is not None and call.when == "teardown":  # the test is over: let its return values go
            bench.results[:] = [dataclasses.replace(r, value=None) for r in bench.results]
            del item.stash[BENCH_KEY]  # a test run again (an extras pass, a rerun) starts a new GpuBench
        if (self.settings.replicate_slot is not None and report.failed and call.excinfo is not None
                and report.when in ("setup", "call") and self._reports_to_coordinator):  # the coordinator says why this worker has no result
            from pytest_gpuperf.plugin.replicates import report_failure

            report_failure(item.nodeid, call.excinfo.value, out=self.settings.replicate.out)
        details = getattr(call.excinfo.value, "details", None) if call.excinfo is not None else None
        if details and isinstance(details, str):
            report.sections.append(("gpuperf memory", details))
        if report.when == "call" and report.passed and (bench is None or not bench.results):
            self._warn_if_measured_nothing(item)
        if bench is None or report.when != "call" or not report.passed or not bench.results:
            return
        from pytest_gpuperf.reporting.messages import failure_messages

        messages = []
        for r in bench.results:
            messages.extend(failure_messages(r, strict=self.settings.strict, updating=self.settings.updating, label=f"{bench.module}::{r.benchmark_id}"))
            if r.top_ops and self.settings.verbose > 0:  # else only in the trace artifact (-v shows it)
                report.sections.append((f"gpuperf top ops: {r.benchmark_id}", r.top_ops))
        if self.settings.updating:
            # never a benchmark that fails its own hard checks; deferred (updating.write_pending) under torchrun or workers
            ranks = self.settings.ranks
            if (ranks is not None or self.settings.replicated) and not messages:
                if ranks is None or ranks.is_writer:
                    self.pending_writes.append(item)
                return
            problem = ("baseline not updated: " + "\n".join(messages)) if messages else write_baselines(self, [item])
            if problem:
                from pytest_gpuperf.reporting.messages import fit_first_line
                from pytest_gpuperf.reporting.terminal import wrap_message

                report.outcome = "failed"
                report.longrepr = wrap_message(fit_first_line(problem), self.config.get_terminal_writer().fullwidth)
            return
        if messages:
            from pytest_gpuperf.reporting.terminal import wrap_message

            report.outcome = "failed"
            report.longrepr = wrap_message("\n".join(messages), self.config.get_terminal_writer().fullwidth)

    def _warn_if_measured_nothing(self, item: pytest.Item) -> None:
        """A test marked ``gpu_bench`` that passed without measuring anything gets a summary warning."""
        if self.settings.measuring and item.get_closest_marker("gpu_bench") is not None:
            self.warnings.append(
                f"{item.nodeid} is marked gpu_bench but measured nothing: call gpu_bench(fn, ...) in the test"
            )

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.ab_worker is not None:
            if not self.ab_worker.said_hello:
                self.ab_worker.hello([])
            self.ab_worker.bye()
            return
        if self.settings.worker_id is not None:  # a pytest-xdist worker
            write_pending(self, session)
            hand_to_controller(self)
            return
        merge_workers(self)
        write_pending(self, session)
        self.recorded.sort(key=lambda rec: (rec.nodeid, rec.result.benchmark_id))  # the reports' order


def _split_nodeid(nodeid: str) -> tuple[str, str]:
    module, _, rest = nodeid.partition("::")
    return module, rest or module


def _op_profile_mode(s: SessionSettings) -> int:
    """Whether this process profiles the ops where it makes the extras (why it got slower), as the
    number of processes that share the profile's cycles (0: it does not): while updating in one
    process (1: the baseline stores the profile), or as an extras process told so (hidden
    ``--gpuperf-op-profile N``: an update's, or one started to diff a stored regression); never
    with ``--gpuperf-no-why``."""
    if not (s.why and s.measuring):
        return 0
    return s.op_profile or (1 if s.updating else 0)


def _extras_mode(slot: tuple[int, int] | None) -> str:
    """Where a process makes the extras (:attr:`~pytest_gpuperf.plugin.bench.BenchContext.extras`):
    inline in one process, none in a timed replicate worker, only them in the extras process,
    instruction counts in the instruction worker."""
    if slot is None:
        return "inline"
    from pytest_gpuperf.plugin.replicates import EXTRAS, INSTRUCTION_WORKER

    return {EXTRAS: "only", INSTRUCTION_WORKER: "instructions"}.get(slot[0], "none")


def _not_counted(s: SessionSettings, result: Any) -> list[str]:
    """The warning for a benchmark that asks for instruction counts in a session that cannot make them."""
    if not result.options.instructions or result.smoke or s.replicate is not None or s.replicated:
        return []
    return ["--gpuperf-instructions: instructions are counted by the instruction worker of a session that "
            "measures in worker processes (--gpuperf-processes 2 or more, the default, without --gpuperf-ab or "
            "torchrun); this session measured in its own process: none counted"]


def _extras_warnings(name: str, result: Any) -> list[str]:
    """Summary warnings about a result's extras: each one that could not be measured (those its
    options ask for fail the test instead, with the reason) and a note of the counting call."""
    from pytest_gpuperf.reporting.messages import unavailable_message

    asked = result.missing_requested()
    out = [unavailable_message(part, why, name) for part, why in result.unavailable.items() if part not in asked]
    note = getattr(result.counts, "note", None)
    if note:
        out.append(f"{name}: {note}")
    return out


def _merged_options(item: pytest.Item, session_options: opts.BenchOptions, slot: Any) -> opts.BenchOptions:
    """The item's markers (``gpu_bench`` over pytest-benchmark's) over the session's options; a
    replicate worker's (``slot``) share of ``max_time``. Raises OptionError naming the item."""
    marker = {**benchmark_compat.marker_options(item, session_options), **_marker_options(item)}
    options = opts.with_marker(session_options, marker, where=f"{item.nodeid}: gpu_bench marker")
    if slot is not None:  # a replicate worker measures its share of max_time
        from pytest_gpuperf.plugin.replicates import worker_options

        options = worker_options(options, slot)
    return options


def _aimed(options: opts.BenchOptions, s: SessionSettings, stored: "_Stored", nodeid: str) -> opts.BenchOptions:
    """A timed replicate worker's options with the early stop aimed no finer than the spread between
    the processes of the test's baseline (:func:`~pytest_gpuperf.verdict.allocation.process_precision`,
    issue 45), read from its baseline file as it is (:func:`~pytest_gpuperf.storage.baseline.process_spreads`);
    ``options`` as they are elsewhere (the extras process, torchrun ranks, no baseline)."""
    slot = s.replicate_slot
    if slot is None or slot[0] < 0 or s.ranks is not None or stored.key is None or options.target_precision <= 0:
        return options
    from pytest_gpuperf.storage.baseline import baseline_path, process_spreads
    from pytest_gpuperf.verdict.allocation import process_precision

    module, test_id = _split_nodeid(nodeid)
    medians = process_spreads(str(baseline_path(s.baseline_dir, stored.key, module))).get(test_id, ())
    aim = process_precision(options.target_precision, options.threshold, *medians)
    return options if aim == options.target_precision else dataclasses.replace(options, target_precision=aim)


def _marker_options(item: pytest.Item) -> dict[str, Any]:
    """Merge every gpu_bench marker on the item; the closest (function) marker wins."""
    merged: dict[str, Any] = {}
    for mark in reversed(list(item.iter_markers("gpu_bench"))):
        if mark.args:
            raise opts.OptionError(
                f"{item.nodeid}: gpu_bench marker takes keyword options only, got positional {mark.args!r}"
            )
        merged.update(mark.kwargs)
    return merged


def _threshold_given(item: pytest.Item) -> bool:
    """Whether the item's ``threshold`` was set (a ``gpu_bench`` marker, ``--gpuperf-threshold``,
    the ini's ``gpuperf_threshold``) rather than left to the backend's default
    (:func:`~pytest_gpuperf.core.options.for_device`)."""
    return ("threshold" in _marker_options(item) or cli_values(item.config).get("threshold") is not None
            or "threshold" in ini_values(item.config))


def _max_memory_text(item: pytest.Item) -> str | None:
    """The ``max_memory`` option as its author wrote it (marker, else ini), to report it in that unit."""
    marker = _marker_options(item)
    raw = marker["max_memory"] if "max_memory" in marker else ini_values(item.config).get("max_memory")
    return raw if isinstance(raw, str) else None


def _record_properties(item: pytest.Item, result: Any, several: bool) -> None:
    """JUnit XML properties of a benchmark (``record_property`` style), for CI dashboards: ``median_ms``
    the run's median as the verdict decided on it (``estimate_ms``, issue 47), ``pooled_median_ms``
    that of all rounds pooled, ``ratio`` the verdict's as its message shows it, ``clock`` the clock
    that decided (a verdict on CPU time: its ratio and baseline are CPU time's)."""
    c, b = result.comparison, result.bottleneck
    props = {
        "median_ms": result.estimate_ms if not result.smoke else result.median_ms,
        "pooled_median_ms": result.median_ms if not result.smoke else None,
        "baseline_median_ms": c.baseline_median_ms if c is not None else None,
        "ratio": c.shown_ratio if c is not None else None,
        "clock": c.clock if c is not None else None,
        "verdict": (c.verdict.value if c is not None else ("smoke" if result.smoke else None)),
        "peak_memory_bytes": result.peak_memory_bytes,
        "bottleneck": b.kind if b is not None else None,
    }
    k, cc, rates = result.counts, result.count_comparison, result.rates() or {}
    if k is not None:
        props.update(ops=k.ops, kernels=k.kernels, syncs=k.syncs, copies=k.copies, flops=k.flops,
                     traffic_bytes=k.traffic_bytes, recompiles=k.recompiles)
    if cc is not None:
        props["count_verdict"] = cc.verdict.value
    for key in ("flops_per_s", "bytes_per_s", "items_per_s"):
        props[key] = rates.get(key)
    prefix = f"{result.name}." if several else ""
    for name, value in props.items():
        if value is not None:
            item.user_properties.append((f"{prefix}{name}", value))


def _progress_writer(config: pytest.Config, nodeid: str) -> Any:
    """In verbose mode: a callback printing rounds, elapsed time and median of a long benchmark."""
    from pytest_gpuperf.core.units import format_ms

    def write(rounds: int, elapsed_s: float, median_ms: float) -> None:
        tr = config.pluginmanager.getplugin("terminalreporter")
        capman = config.pluginmanager.getplugin("capturemanager")
        if tr is None:
            return
        line = f"  gpuperf {nodeid}: {rounds} rounds, {elapsed_s:.1f} s, median {format_ms(median_ms)}"
        if capman is not None:
            with capman.global_and_fixture_disabled():
                tr.write_line(line)
        else:
            tr.write_line(line)

    return write


def _result_warnings(s: SessionSettings, name: str, device: Any, stored: "_Stored", result: Any) -> list[str]:
    """Summary warnings about one result: a noisy new baseline, the machine's drift since the
    baseline, an environment that differs from the baseline's."""
    out: list[str] = []
    if s.updating and not result.smoke:
        from pytest_gpuperf.reporting.report import noisy_baseline_warning

        noisy = noisy_baseline_warning(name, result)
        if noisy:
            out.append(noisy)
    if stored.baseline is None or stored.env is None:
        return out
    entry = stored.baseline.get(result.benchmark_id)
    if entry is not None:
        from pytest_gpuperf.measure.environment import differences
        from pytest_gpuperf.verdict.machine import drift_agrees, drift_ratios, drift_warning

        ratios = drift_ratios(stored.env.get("reference"), entry.reference)
        drift = drift_warning(ratios)
        if drift:  # one line per cause: the same drift on one device reads the same for every file and worker
            # no correction to offer for workloads that disagree, nor over worker processes (single-process only)
            offer = not s.normalize and not s.replicated and drift_agrees(ratios)
            out.append(f"{device}: {drift}" + (" (--gpuperf-normalize corrects for it)" if offer else ""))
        for part, why in entry.unavailable.items():
            if part not in result.unavailable:
                out.append(f"{name}: {part} not compared: unavailable when its baseline was recorded "
                           f"({why.text()})")
        diffs = differences(entry.environment, stored.env)
        if diffs:
            out.append(f"{name}: environment differs from the baseline's: " + "; ".join(diffs))
        unrecorded = _allocator_unrecorded(entry.environment, stored.env, s.relpath(stored.path) if stored.path else None,
                                           s.updating)
        if unrecorded:  # the same line for every benchmark of the file: printed once
            out.append(unrecorded)
    return out


def _allocator_unrecorded(baseline_env: Any, env: dict[str, Any], path: Any, updating: bool) -> str | None:
    """One line for a baseline file whose entry (``baseline_env``, its environment) records no
    ``allocator`` while this run's processes (``env``) measured with glibc's thresholds fixed: it
    was recorded before pytest-gpuperf fixed them (issue 45), when allocation-heavy calls could run
    several times slower in some worker processes. None where that does not apply, or in an update
    (which records it again)."""
    from pytest_gpuperf.core.allocator import ADAPTIVE

    if updating or not isinstance(baseline_env, dict) or "allocator" in baseline_env:
        return None
    now = env.get("allocator")
    if now is None or now == ADAPTIVE:
        return None
    where = str(path) if path is not None else "a baseline file"
    return (f"{where}: its baselines record no allocator thresholds (recorded before pytest-gpuperf fixed glibc's in "
            f"the processes that time; now {now}): allocation-heavy benchmarks may read faster than recorded; record "
            "them again with --gpuperf-update-baselines")


def _runs_no_test(config: pytest.Config) -> bool:
    """Whether this session runs no test body (``--collect-only``, ``--setup-only``, ``--setup-plan``):
    then no worker process, A/B or bisection starts, and no baseline is written (pytest-benchmark
    measures nothing there either)."""
    return bool(config.getoption("collectonly", False) or config.getoption("setuponly", False)
                or config.getoption("setupplan", False))


def _workers_environment(device: Any, coordinator: Any) -> dict[str, Any]:
    """The fingerprint of ``device`` as the worker processes of ``coordinator`` (a
    :class:`~pytest_gpuperf.plugin.coordinator.Coordinator`, or None: this process measures) saw it:
    their ``allocator`` (:func:`pytest_gpuperf.core.allocator.describe` of the environment they were
    started with) and, where timed worker processes timed them, the reference workloads' medians
    over those processes (the coordinator's ``reference``)."""
    from pytest_gpuperf.measure.environment import fingerprint

    env = fingerprint(device)
    if getattr(coordinator, "allocator", None) is not None:
        env["allocator"] = coordinator.allocator
    reference = coordinator.reference if coordinator is not None else None
    if reference:
        env["reference"] = reference
    return env
