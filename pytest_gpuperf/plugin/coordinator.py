"""The coordinator role (issue 33): the session the user started, when it measures before the tests.

:class:`Coordinator` runs the replicate worker processes (``--gpuperf-processes`` >= 2, the
default; then more processes where the evidence is thin, the A/B confirmation of stored
regressions, the bisection of confirmed ones and the op profiles of stored regressions), an A/B run
(``--gpuperf-ab``) or a bisection instead of the tests (``--gpuperf-bisect``). The session
(:class:`~pytest_gpuperf.plugin.session.GpuPerfSession`) makes one at session start only in that
role, runs it, and hands its :attr:`Coordinator.results` to the tests, which pick up their finished
results. A worker process (replicate, extras, A/B, pytest-xdist) never has one.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import pytest

from pytest_gpuperf.core import options as opts
from pytest_gpuperf.plugin.instructions import InstructionMode
from pytest_gpuperf.plugin.settings import SessionSettings


class Coordinator:
    """Measuring before the tests, in the session the user started (see the module doc).

    ``config``/``settings``: the session's; ``progress()``: its progress line
    (:class:`~pytest_gpuperf.reporting.terminal.ProgressLine`); ``baseline(path)``: its cached
    baseline files (raises ``BaselineError``); ``warn(line)``: adds a line to its summary's warnings.

    What it leaves: ``results`` (full id -> finished result, or why there is none; None until
    :meth:`run` measured), ``removed`` (A/B: ids that exist on side A only), ``bisect_lines`` (reports
    of ``--gpuperf-bisect-on-regression``), ``more_processes`` (full id -> worker processes its
    decision used, when more were added), ``not_escalated`` (the same, for thin evidence that more
    processes could not decide: :func:`_thin`), ``stored_entries`` (full id -> its baseline entry)
    ``priors`` (the session's spreads over worker processes that every inconclusive verdict is read
    with: :func:`_priors`), ``stopped`` (how Ctrl-C or
    SIGTERM stopped the measuring, None when it did not) and ``phases_s`` (where its time went:
    step -> wall seconds, in the order run; :func:`_phase`).
    """

    def __init__(self, config: pytest.Config, settings: SessionSettings, progress: Callable[[], Any],
                 baseline: Callable[[Path], Any], warn: Callable[[str], None]) -> None:
        self.config = config
        self.settings = settings
        self.progress = progress
        self.baseline = baseline
        self.warn = warn
        self.results: dict[str, Any] | None = None
        self.removed: list[str] = []
        self.bisect_lines: list[str] = []
        self.more_processes: dict[str, int] = {}
        self.not_escalated: dict[str, int] = {}
        self.stored_entries: dict[str, Any] = {}
        self.stopped: str | None = None
        self.priors: Any = None  # the session's spreads (verdict.moderation.Priors), fitted after the first decisions
        self.reference: dict[str, Any] | None = None  # the reference workloads, median over the timed processes
        self._commit_known: dict[str, bool] = {}  # baseline commit -> whether this clone has it (A/B can confirm)
        self.phases_s: dict[str, float] = {}
        self.allocator: str | None = None  # its workers' allocator thresholds (core.allocator; set by the session)
        self.instructions = InstructionMode(settings, lambda line: self.progress().line(line), warn)

    def run(self) -> None:
        """Replicate worker processes (the default) or the A/B measurement, before the tests run; or,
        with ``--gpuperf-bisect``, the bisection instead of the tests."""
        if self.settings.bisect is not None:
            run_bisect(self.config, self.settings, self.progress())
            return
        if self.settings.replicated:
            from pytest_gpuperf.plugin.replicates import ReplicateError

            try:
                self._run_replicates()
            except ReplicateError as exc:
                pytest.exit(f"pytest-gpuperf: {exc}", returncode=pytest.ExitCode.INTERNAL_ERROR)
            return
        if self.settings.ab is None:
            return
        from pytest_gpuperf.ab.run import ABError

        try:
            self._run_ab()
        except ABError as exc:
            pytest.exit(f"pytest-gpuperf: {exc}", returncode=pytest.ExitCode.USAGE_ERROR)

    def _run_replicates(self) -> None:
        """Measure every selected benchmark in ``self.settings.processes`` worker processes, decide each against
        its baseline and keep the finished results for the tests (see :mod:`pytest_gpuperf.plugin.replicates`).

        Ctrl-C or SIGTERM (a CI timeout) stops the running worker and every later step: what was
        measured is decided and kept (:func:`_decide_all`; ``stopped`` says how it was stopped), every
        other test is skipped (:data:`~pytest_gpuperf.plugin.replicates.STOPPED`)."""
        from pytest_gpuperf.plugin.replicates import STOPPED, UNREPORTED
        from pytest_gpuperf.core.signals import Terminated, sigterm_raises, stop_reason

        finished: dict[str, Any] = {}
        with sigterm_raises():  # also between the workers and in the steps after them
            try:
                args, logs, first = _worker_args(self.config), _replicate_logs(self.settings.rootpath), _first(self.settings)
                with _phase(self.phases_s, f"{first} worker processes"):
                    runs, extras, unreported, self.stopped = _measure_replicates(
                        self.config, self.settings, self.progress(), args, logs, self.instructions, first)
                self.reference = _run_reference(runs)
                commits: dict[str, tuple[str | None, bool | None]] = {}  # key -> its baseline's (commit, dirty)
                self._decide(finished, runs, extras, first, commits)
                if self.stopped is None and first < self.settings.processes:  # the last process: what is open
                    open_, now, self.stopped = _timed(self.phases_s, f"worker process {self.settings.processes}",
                                                      _last_process, self.config, self.settings, self.progress(),
                                                      args, logs, finished, runs, first)
                    runs += now
                    self._decide(finished, runs, extras, self.settings.processes, commits, set(open_))
                if self.stopped is None:
                    self._after_decisions(finished, commits, runs, extras, args, logs)
                for r in runs + extras:
                    if r.error and not r.stopped:
                        self.warn(f"{r.error}; its output: {r.log}")
                if unreported is not None:
                    finished[UNREPORTED] = unreported
            except (KeyboardInterrupt, Terminated) as exc:  # between the workers, or in a later step
                self.stopped = self.stopped or f"stopped ({stop_reason(exc)}) after the first decisions"
        if self.stopped is not None:
            finished[STOPPED] = self.stopped
        self.results = finished
        _hand_to_xdist(self.settings, finished)

    def _decide(self, finished: dict[str, Any], runs: list[Any], extras: list[Any], processes: int,
                commits: dict[str, tuple[str | None, bool | None]], only: set[str] | None = None) -> None:
        """Decide the benchmarks ``runs`` measured (those in ``only``, when given) on their first
        ``processes``, then read each inconclusive one again with the session's spreads (``priors``)."""
        def decide(key: str, entries: list[dict[str, Any]], *more: Any) -> Any:
            return self._decide_replicated(key, entries, commits, *more)

        self.priors = None
        _decide_all(finished, runs, extras, processes, decide, only)
        self.priors = _priors(finished, self.stored_entries)
        if self.priors:  # only an inconclusive verdict can move
            _decide_all(finished, runs, extras, processes, decide, _inconclusive(finished) & set(only or finished))

    def _after_decisions(self, finished: dict[str, Any], commits: dict[str, tuple[str | None, bool | None]],
                         runs: list[Any], extras: list[Any], args: list[str], logs: Path) -> None:
        """More processes where the evidence is thin, the A/B confirmation of regressions and their
        bisection, the why of stored regressions; a stop in any of them keeps the decisions so far."""
        from pytest_gpuperf.plugin.stopping import Stopped

        try:
            runs += _timed(self.phases_s, "more processes", self._measure_more,
                           finished, commits, runs, extras, args, logs)
        except Stopped as exc:
            self.stopped = f"stopped ({exc.why}) while measuring more processes for thin evidence"
            return
        if not self.settings.updating:  # a regression no A/B confirms, against the machine's own speed
            _machine_check(finished, self.reference, self.stored_entries, lambda k: self._ab_will_confirm(k, commits))
        if self.settings.ab_confirm and not self.settings.updating:
            _timed(self.phases_s, "A/B confirmation", self._confirm_by_ab, finished, commits)
            if self.settings.bisect_on_regression:
                _timed(self.phases_s, "bisection", self._bisect_regressions, finished, commits)
        if self.settings.why and not self.settings.updating:
            _timed(self.phases_s, "op profiles (why)", self._diff_stored, finished, runs, args, logs)

    def _measure_more(self, finished: dict[str, Any], commits: dict[str, tuple[str | None, bool | None]],
                      runs: list[Any], extras: list[Any], args: list[str], logs: Path) -> list[Any]:
        """Pyperf's answer to process-level spread is more processes; Pinpoint's is "measure more"
        until the comparison decides. Benchmarks whose evidence is thin after the first P processes
        (:func:`~pytest_gpuperf.plugin.replicates.needs_more`), and regressions that no A/B will
        confirm (:func:`~pytest_gpuperf.plugin.replicates.replicate_regression`), get
        :data:`~pytest_gpuperf.plugin.replicates.MORE_BATCH` more worker processes at a time, running
        only their tests (hidden ``--gpuperf-select``), up to ``limits.max_processes`` in all and as
        many as the time for them allows (:func:`_budget`: ``limits.more_time_s``, by default as long
        as the first P processes took), and are decided again on all their processes (``finished`` is
        updated). A thin benchmark that, by the spread of its processes so far, even the processes
        allowed could not decide gets none (or no more): its comparison gets a note saying so
        (:func:`~pytest_gpuperf.plugin.replicates.not_escalated`) and it is counted in
        ``not_escalated``. Returns the added runs."""
        from pytest_gpuperf.plugin.replicates import MORE_BATCH, extras_for, run_workers

        s, limits, progress = self.settings, self.settings.limits, self.progress()
        added: list[Any] = []
        k, budget = s.processes, _budget(runs, limits.more_time_s)
        while k < limits.max_processes:  # the time spent is the added processes' own (their wall times)
            fit = budget.processes(sum(r.seconds or 0.0 for r in added))  # more processes the time left allows
            thin = _thin(finished, s, k, progress, lambda key: self._ab_will_confirm(key, commits),
                         self.more_processes, self.not_escalated, fit)
            nodeids = sorted({next(r.entries[key].get("nodeid") for r in runs + added if key in r.entries)
                              for key in thin} - {""})
            if not nodeids:
                break
            select = logs / "select.txt"
            select.write_text("\n".join(nodeids) + "\n", encoding="utf-8")
            batch = min(MORE_BATCH, fit or MORE_BATCH, limits.max_processes - k)  # a replication goes past the time
            progress.line(f"gpuperf: {_thin_why(finished, thin, s.updating)} after {k} worker processes: measuring "
                          f"them in {batch} more (--gpuperf-max-processes {limits.max_processes}, time for more "
                          f"{budget.seconds:.0f} s)")
            now = run_workers([*args, "--gpuperf-select", str(select)], Path(self.config.invocation_params.dir),
                              s.processes, logs, progress=progress, first=k, count=batch,
                              timeout_s=limits.worker_timeout_s, tick=progress.tick if progress.live else None,
                              nproc=s.nproc)
            added += now
            budget = budget.after([r.seconds for r in now if r.seconds is not None])
            k += batch
            for key in thin:
                entries = [r.entries[key] for r in runs + added if key in r.entries]
                finished[key] = self._decide_replicated(key, entries, commits, *extras_for(key, extras))
                self.more_processes[key] = len(entries)
        return added

    def _diff_stored(self, finished: dict[str, Any], runs: list[Any], args: list[str], logs: Path) -> None:
        """Why it got slower without the old commit (issue 32): every stored-baseline verdict that
        regressed and has no per-op diff from an A/B run (no commit to measure, a
        shallow clone, ``--gpuperf-no-ab-confirm``, side A failed), but whose baseline stored an op
        profile, is profiled in 2 extras processes of its own (after all timing) and diffed against
        that profile (:func:`~pytest_gpuperf.verdict.opdiff.diff_against_stored`), marked as from
        another process and time. An ``improved`` verdict is not profiled (issue 45: 2 processes,
        about 20 s on tensordict's suite, for a why of a verdict that fails nothing; an A/B run still
        diffs both). Contained: a failure leaves the verdict, says why in the message."""
        from pytest_gpuperf.core.containment import OP_DIFF, Unavailable, contained
        from pytest_gpuperf.plugin.replicates import ReplicateError, extras_for, run_extras
        from pytest_gpuperf.verdict.opdiff import OpSample, diff_against_stored

        keys = _stored_why(finished, self.stored_entries, self.settings.limits.why_max)
        nodeids = sorted({n for k in keys for r in runs if k in r.entries and (n := r.entries[k].get("nodeid"))})
        if not nodeids:
            return
        select = logs / "select-op-profile.txt"
        select.write_text("\n".join(nodeids) + "\n", encoding="utf-8")
        say = self.progress().line
        say(f"gpuperf: {len(keys)} regression(s) with no A/B to profile: profiling the ops in 2 more processes "
            f"to diff against the baselines' stored op profiles (why it got slower; --gpuperf-no-why)")
        try:
            profiled = run_extras([*args, "--gpuperf-select", str(select)], Path(self.config.invocation_params.dir),
                                  self.settings.processes, logs, count=2, progress=say, op_profile=True,
                                  timeout_s=self.settings.limits.worker_timeout_s,
                                  stem="op-profile", nproc=self.settings.nproc)
        except ReplicateError as exc:
            profiled, failed = [], str(exc)
        else:
            failed = next((f"{r.error} (output: {r.log})" for r in profiled if r.error), "")
        for key in keys:
            r, entry = finished[key], self.stored_entries[key]
            entries, missing = extras_for(key, profiled)
            cycles = [c for e in entries for c in ((e.get("op_profile") or {}).get("cycles") or ())]
            unavailable = dict(r.unavailable)
            if not cycles:
                unavailable[OP_DIFF] = Unavailable(OP_DIFF, failed or missing or "no op profile of this run")
                finished[key] = r.replace(unavailable=unavailable)
                continue
            c = r.comparison
            whole = (c.baseline_median_ms, c.current_median_ms) if c.baseline_median_ms and c.current_median_ms else None
            when = (entry.data.get("timestamp_utc") or "?")[:16]
            source = (f"the baseline's op profile ({when}" + (f", {entry.git_commit[:7]}" if entry.git_commit else "")
                      + "; other processes and time, maybe another machine)")
            diff = contained(OP_DIFF, lambda: diff_against_stored(
                entry.data["op_profile"], [OpSample.from_dict(x) for x in cycles], whole_ms=whole, source=source),
                unavailable)
            finished[key] = r.replace(op_diff=diff, unavailable=unavailable)

    def _ab_will_confirm(self, key: str, commits: dict[str, tuple[str | None, bool | None]]) -> bool:
        """Whether a stored-stage regression (or inconclusive comparison) of ``key`` will be measured
        again by A/B against its baseline's commit (``--gpuperf-ab-confirm`` on, a committed baseline,
        the commit in this clone; :func:`~pytest_gpuperf.plugin.replicates.measured_by_ab`)."""
        commit, dirty = commits.get(key, (None, None))
        if not self.settings.ab_confirm or self.settings.updating or commit is None or dirty:
            return False
        known = self._commit_known.get(commit)
        if known is None:
            from pytest_gpuperf.ab.run import ABError, resolve_revision

            try:
                resolve_revision(Path(self.config.invocation_params.dir), commit)
                known = True
            except ABError:
                known = False
            self._commit_known[commit] = known
        return known

    def _confirm_by_ab(self, finished: dict[str, Any],
                       commits: dict[str, tuple[str | None, bool | None]]) -> None:
        """Re-measure every stored-baseline regression in ``finished``, and every inconclusive
        comparison (:func:`~pytest_gpuperf.plugin.replicates.measured_by_ab`), by A/B against the
        commit its baseline was recorded at, on this machine (a worktree of that commit is side A, the
        working tree side B; :mod:`pytest_gpuperf.ab.run`), and make the A/B verdict the final one
        (Chromium Pinpoint confirms a dashboard alert the same way). A baseline recorded from
        uncommitted changes, a commit that is not in this clone, or a side A that cannot run keeps the
        stored verdict, with a note; so does an inconclusive one that the time for settling
        (``--gpuperf-settle-time``) left out."""
        import dataclasses

        from pytest_gpuperf.ab.run import ABError, resolve_revision
        from pytest_gpuperf.plugin.replicates import measured_by_ab, with_ab_confirmation

        suspects = [k for k, r in finished.items() if measured_by_ab(r)]
        by_commit: dict[str, list[str]] = {}
        for key in suspects:
            commit, dirty = commits.get(key, (None, None))
            if commit is None or dirty:
                why = ("the baseline was recorded from uncommitted changes" if dirty else
                       "the baseline records no git commit")
                finished[key] = with_ab_confirmation(finished[key], None, "its commit", why)
                continue
            by_commit.setdefault(commit, []).append(key)
        say = self.progress().line
        for commit, keys in by_commit.items():
            label = commit[:7]
            try:
                rev = dataclasses.replace(resolve_revision(Path(self.config.invocation_params.dir), commit),
                                          ref="the baselines' commit")
                label = rev.label
                say(f"gpuperf: {_ab_what(finished, keys)}: measuring by A/B against {label} on this machine")
                outcome = self._measure_ab(rev, only=set(keys), must={k for k in keys if _regressed(finished[k])})
            except ABError as exc:
                why = str(exc)
                if "no such commit" in why:
                    why = (f"the baselines' commit {commit[:7]} is not in this repository (a shallow clone? fetch the "
                           f"history, e.g. actions/checkout with fetch-depth: 0)")
                for key in keys:
                    finished[key] = with_ab_confirmation(finished[key], None, label, why)
                continue
            _settled(finished, keys, outcome, rev, commit, self.settings.limits.settle_time_s, say)

    def _bisect_regressions(self, finished: dict[str, Any], commits: dict[str, tuple[str | None, bool | None]]) -> None:
        """``--gpuperf-bisect-on-regression N``: bisect from the baseline's commit to HEAD for at most N
        benchmarks whose regression the A/B confirmation confirmed (largest ratio first), within the time
        cap; the reports go to the terminal summary (:attr:`bisect_lines`)."""
        import time

        from pytest_gpuperf.bisect.report import summary_lines
        from pytest_gpuperf.bisect.run import BisectError, uncommitted

        confirmed = sorted(((r.comparison.ratio or 0.0, k) for k, r in finished.items()
                            if not isinstance(r, str) and r.comparison is not None and r.comparison.ab is not None
                            and r.comparison.verdict.value == "regressed" and commits.get(k, (None,))[0]),
                           reverse=True)[:self.settings.bisect_on_regression]
        by_commit: dict[str, set[str]] = {}
        for _, key in confirmed:
            by_commit.setdefault(commits[key][0], set()).add(key)
        progress = self.progress()
        start = time.monotonic()
        for commit, keys in by_commit.items():
            progress.line(f"gpuperf: bisecting {len(keys)} confirmed regression(s) from the baselines' commit "
                          f"{commit[:7]} to HEAD (--gpuperf-bisect-on-regression)")
            left_s = max(1e-9, self.settings.bisect_timeout_s - (time.monotonic() - start))  # one cap for all
            try:
                b = bisector(self.config, self.settings, progress.line, progress.tick, left_s)
                # the A/B confirmation measured the working tree against this very commit: with nothing
                # uncommitted nor untracked, that is HEAD against it, the bisection's first step
                known = None if uncommitted(b.repo, untracked=True) else {k: _probe_of(finished[k]) for k in keys}
                run = b.run(commit, "HEAD", keys=keys, known=known)
            except BisectError as exc:
                self.bisect_lines.append(f"bisect {commit[:7]}..HEAD: {exc}")
                continue
            self.bisect_lines += summary_lines(run, sorted(keys))

    def _decide_replicated(self, key: str, entries: list[dict[str, Any]],
                           commits: dict[str, tuple[str | None, bool | None]],
                           extras: list[dict[str, Any]] | None = None, extras_missing: str | None = None) -> Any:
        """The finished result of benchmark ``key`` (``module::id``) from its workers' entries, decided
        against its stored baseline; a string when the baseline file is unusable. ``commits`` gets the
        baseline's ``(git commit, dirty)``."""
        from pytest_gpuperf.ab.results import options_from_entry
        from pytest_gpuperf.storage.baseline import BaselineError, baseline_path, check_module
        from pytest_gpuperf.measure.environment import device_key
        from pytest_gpuperf.plugin.replicates import decide

        module, _, bid = key.partition("::")
        options = options_from_entry(entries[0])  # worker 0's: the test's own options, with max_time split over the workers
        baseline = path = None
        env = entries[0].get("environment") or {}
        if env.get("device_type"):  # --gpuperf-nproc N: the -wsN folder, as under torchrun
            path = baseline_path(self.settings.baseline_dir, device_key(env) + _world_suffix(self.settings), module)
            try:
                base_file = self.baseline(path)
                check_module(base_file, module)
            except BaselineError as exc:
                return str(exc)
            baseline = base_file.get(bid) if base_file is not None else None
        if baseline is not None:
            commits[key] = (baseline.git_commit, baseline.dirty)
            self.stored_entries[key] = baseline
        result = self.instructions.judge(key, decide(  # with the instruction gate, where counted
            key, entries, baseline, options, baseline_file=self.settings.relpath(path) if path else None,
            can_fail=not self.settings.updating, extras=extras, extras_missing=extras_missing,
            priors=self.priors), baseline)
        if self.settings.nproc and env.get("device_type"):  # scaling efficiency, communication's change
            result, note = _launched(self.settings, self.baseline, device_key(env), module, bid, result, baseline)
            if note:  # a benchmark decided again (priors) warns again: the summary prints each line once
                self.warn(f"{key}: {note}")
        return result

    def _run_ab(self) -> None:
        rev = self.settings.ab
        self.progress().line(f"gpuperf: A/B vs {rev.label}: preparing the worktree of {rev.ref}")
        outcome = self._measure_ab(rev)
        self.results, self.removed = outcome.results, outcome.removed
        _hand_to_xdist(self.settings, self.results)

    def _measure_ab(self, rev: Any, only: set[str] | None = None,
                    must: frozenset[str] | set[str] = frozenset()) -> Any:
        """Measure the working tree (B) against a worktree of ``rev`` (A) in ``self.settings.ab_processes`` pairs
        of worker processes (``only``: just these benchmarks, whose stored comparisons it confirms
        or settles: no extras, only regressions profiled, within ``--gpuperf-settle-time`` but for
        ``must``), then the sequential step: a benchmark that
        says regressed, or whose CI straddles 1+T, is measured by ``confirm`` more pairs and decided again
        on all pairs together. Returns the :class:`~pytest_gpuperf.ab.run.ABOutcome`; notes go to the
        session's warnings. Raises :class:`~pytest_gpuperf.ab.run.ABError`."""
        from pytest_gpuperf.ab.run import ab_folder, measure_ab, prepare_worktree, side_specs, with_nproc, worker_args

        worktree = prepare_worktree(rev)
        logs = ab_folder(rev.repo) / "logs"
        logs.mkdir(exist_ok=True)
        specs = with_nproc(side_specs(rev, worktree, Path(self.config.invocation_params.dir), self.settings.ab_roots),
                           self.settings.nproc)  # --gpuperf-nproc: each worker a torchrun launch
        args = worker_args(self.config.invocation_params.args, self.config)
        if self.config.pluginmanager.hasplugin("xdist"):
            args += ["-n", "0"]  # an `addopts = -n N` must not spread a worker's benchmarks over subprocesses
        progress = self.progress()  # a line per benchmark measured, rewritten in place on a terminal (issue 24)
        outcome = measure_ab(specs, args, self.settings.ab_processes, logs, rev.label, only=only,
                             progress=progress, announce=progress.line, why=self.settings.why,
                             traces_dir=self.settings.artifacts_dir, confirming=only is not None,
                             why_max=self.settings.limits.why_max, op_free=_op_free(self.stored_entries),
                             settle_s=None if only is None or (t := self.settings.limits.settle_time_s) is None
                             else (t, set(must)))
        for note in outcome.notes:
            self.warn(note)
        return outcome


def _hand_to_xdist(s: SessionSettings, results: Mapping[str, Any]) -> None:
    """Under pytest-xdist, the finished results for its workers' sessions (``ab-results.json``)."""
    if s.xdist_dir is not None:
        from pytest_gpuperf.ab.results import dump_results

        dump_results(s.xdist_dir / "ab-results.json", results)


def _launched(s: SessionSettings, baseline: Callable[[Path], Any], key: str, module: str, bid: str, result: Any,
              entry: Any) -> tuple[Any, str | None]:
    """A ``--gpuperf-nproc`` benchmark's result with its scaling efficiency and communication's change
    (:func:`~pytest_gpuperf.verdict.distributed.launched_result`), and its note or None."""
    from pytest_gpuperf.storage.scaling import ScalingReference
    from pytest_gpuperf.verdict.distributed import launched_result

    reference = ScalingReference(baseline, Path(s.baseline_dir), key, module, s.nproc, s.relpath)
    return launched_result(result, entry, reference(bid), reference.folder, s.nproc)


@contextmanager
def _phase(ledger: dict[str, float], step: str) -> Iterator[None]:
    """Add the wall time of the block to ``ledger[step]`` (seconds), also when it raises (a stop);
    a step that took under 0.05 s (nothing to do) is not entered."""
    started = time.monotonic()
    try:
        yield
    finally:
        spent = time.monotonic() - started
        if spent >= 0.05 or step in ledger:
            ledger[step] = ledger.get(step, 0.0) + spent


def _timed(ledger: dict[str, float], step: str, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``, its wall time added to ``ledger[step]`` (:func:`_phase`)."""
    with _phase(ledger, step):
        return fn(*args)


def _op_free(stored: Mapping[str, Any]) -> frozenset[str]:
    """The benchmarks whose baseline (``stored``: id -> entry) stored an op profile without any
    torch op (:func:`~pytest_gpuperf.verdict.opdiff.op_free`): their why is not profiled."""
    from pytest_gpuperf.verdict.opdiff import op_free

    return frozenset(k for k, e in stored.items()
                     if isinstance(p := e.data.get("op_profile"), dict) and op_free(p.get("cycles")))


def _regressed(result: Any) -> bool:
    """Whether a finished result's timing verdict is ``regressed``."""
    c = None if isinstance(result, str) else result.comparison
    return c is not None and c.verdict.value == "regressed"


def _settled(finished: dict[str, Any], keys: list[str], outcome: Any, rev: Any, commit: str,
             settle_s: float | None, say: Callable[[str], None]) -> None:
    """``finished[key]`` for each of ``keys`` after the A/B against the baselines' commit ``rev``
    (``outcome``, an :class:`~pytest_gpuperf.ab.run.ABOutcome`):
    :func:`~pytest_gpuperf.plugin.replicates.with_ab_confirmation`, a regression's note ending in
    its bisect command; one the time for settling (``settle_s``, ``--gpuperf-settle-time``) left
    out keeps its stored verdict, saying so, and ``say`` tells how many."""
    import shlex

    from pytest_gpuperf.bisect.run import uncommitted
    from pytest_gpuperf.plugin.replicates import with_ab_confirmation

    late = f"the time for settling ran out (--gpuperf-settle-time {settle_s:g} s)" if settle_s is not None else None
    if outcome.skipped:
        say(f"gpuperf: {late}: {len(outcome.skipped)} inconclusive benchmark(s) not measured by A/B keep their "
            f"stored verdicts")
    after = (" (after committing your changes: bisect measures commits, and the working tree has "
             "uncommitted changes)" if uncommitted(rev.repo) else "")
    for key in keys:
        finished[key] = with_ab_confirmation(finished[key], outcome.results.get(key), rev.label,
                                             late if key in outcome.skipped else None,
                                             bisect_command=f"gpuperf bisect {commit[:12]} HEAD -- "
                                                            f"{shlex.quote(key)}{after}")


def _stored_why(finished: dict[str, Any], stored: Mapping[str, Any], why_max: int) -> list[str]:
    """The stored-baseline regressions of ``finished`` to profile for their why: no per-op diff
    yet (no A/B made one, nor left it out for ``--gpuperf-why-max``), a baseline that stored an op
    profile (``stored[key]``), at most ``why_max`` in the run (less those an A/B profiled), the
    largest first (:func:`~pytest_gpuperf.ab.run.why_first`: the others' ``op diff`` is marked
    not profiled in ``finished``), none whose stored op profile held no torch op (marked so:
    :func:`~pytest_gpuperf.ab.run.without_why`)."""
    from pytest_gpuperf.ab.run import why_first, without_why
    from pytest_gpuperf.core.containment import OP_DIFF
    from pytest_gpuperf.verdict.opdiff import NOT_PROFILED

    results = [r for r in finished.values() if not isinstance(r, str)]
    keys = [k for k, r in finished.items()
            if _regressed(r) and r.op_diff is None and k in stored and isinstance(stored[k].data.get("op_profile"), dict)
            and not getattr(r.unavailable.get(OP_DIFF), "error", "").startswith(NOT_PROFILED)]
    free = _op_free({k: stored[k] for k in keys})  # no op to name
    finished.update(without_why(free, {k: finished[k] for k in free}))
    keys = [k for k in keys if k not in free]
    left = max(0, why_max - sum(r.op_diff is not None for r in results))
    picked, capped = why_first(set(keys), {k: finished[k] for k in keys}, left)
    finished.update(capped)
    return [k for k in keys if k in picked]


def _replicate_logs(rootpath: Path) -> Path:
    """The worker processes' folder (``<rootdir>/.gpuperf/replicates``; a temporary one where that cannot be made)."""
    import tempfile

    from pytest_gpuperf.core.files import ensure_output_dir

    logs = rootpath / ".gpuperf" / "replicates"
    try:
        ensure_output_dir(logs)
    except OSError:
        logs = Path(tempfile.mkdtemp(prefix="gpuperf-replicates-"))
    return logs


def _probe_of(result: Any) -> Any:
    """A confirmed regression's A/B comparison (``result``, its final result) as a bisection step's
    :class:`~pytest_gpuperf.verdict.bisection.Probe` (the commit indices are the step's)."""
    from pytest_gpuperf.reporting.messages import comparison_note
    from pytest_gpuperf.verdict.bisection import Probe, call_of

    c = result.comparison
    return Probe(0, 0, call_of(c.verdict.value), c.ratio, c.ratio_ci, c.verdict.value, comparison_note(c),
                 op_diff=result.op_diff)


def _world_suffix(settings: SessionSettings) -> str:
    """The baseline folder suffix of ``--gpuperf-nproc N`` (``-wsN``; empty without it)."""
    from pytest_gpuperf.verdict.scaling import world_size_suffix

    return world_size_suffix(settings.nproc) if settings.nproc else ""


def _worker_count(options: opts.BenchOptions, session_processes: int) -> int:
    """How many worker processes measure a benchmark: its ``processes`` option, at most the session's."""
    return min(options.processes or session_processes, session_processes)


def bisector(config: pytest.Config, settings: SessionSettings, progress: Any, step_progress: Any,
             time_cap_s: float) -> Any:
    """A :class:`~pytest_gpuperf.bisect.run.Bisector` for the session's selection (``progress``: a
    line per step; ``step_progress``: inside a step, on a terminal only). Raises its ``BisectError``
    outside a git repository."""
    from pytest_gpuperf.bisect.run import Bisector, repository

    here = Path(config.invocation_params.dir)
    args = list(config.invocation_params.args)
    if config.pluginmanager.hasplugin("xdist"):
        args += ["-n", "0"]
    return Bisector(repository(here), here, args, processes=settings.bisect_processes,
                    import_roots=settings.ab_roots, progress=progress, time_cap_s=time_cap_s,
                    step_progress=step_progress, why=settings.why, config=config, nproc=settings.nproc)

def run_bisect(config: pytest.Config, settings: SessionSettings, progress: Any) -> None:
    """``--gpuperf-bisect GOOD..BAD``: bisect instead of running the tests, print the report (and write
    it to ``--gpuperf-json``/``--gpuperf-markdown``), then end the session with the command's exit code
    (0: a first bad commit found; 1: none; a usage error for bad revisions)."""
    import json

    from pytest_gpuperf.bisect.report import exit_code, json_dict, markdown, summary_lines
    from pytest_gpuperf.bisect.run import BisectError
    from pytest_gpuperf.core.files import write_atomic

    good, bad = settings.bisect
    try:
        run = bisector(config, settings, progress.line, progress.tick, settings.bisect_timeout_s).run(good, bad)
    except BisectError as exc:
        pytest.exit(f"pytest-gpuperf: --gpuperf-bisect: {exc}", returncode=pytest.ExitCode.USAGE_ERROR)
    from pytest_gpuperf.ab.run import selection_args

    args = selection_args(config.invocation_params.args, config)  # for the reproduce command
    for line in summary_lines(run, args):
        progress.line(line)
    for path, text in ((settings.json_path, lambda: json.dumps(json_dict(run, args), indent=1)),
                       (settings.markdown_path, lambda: markdown(run, args))):
        if path is not None:
            write_atomic(path, text())
            progress.line(f"bisect report written to {path}")
    code = exit_code(run)
    pytest.exit("gpuperf: bisection " + ("found the first bad commit" if code == 0 else "found no single commit"),
                returncode=code)


def _thin(finished: dict[str, Any], s: SessionSettings, k: int, progress: Any, ab_confirms: Callable[[str], bool],
          more: dict[str, int], hopeless_seen: dict[str, int], fit: int | None = None) -> list[str]:
    """The benchmarks that more worker processes can help (:func:`~pytest_gpuperf.plugin.replicates.needs_more`
    with the session's ``max_processes`` in all, and with ``fit`` (the more processes the time left
    allows; None: no limit) at most its own processes plus ``fit``; ``ab_confirms(key)``: an A/B
    will confirm its regression, or settle its inconclusive comparison (then it gets no more
    processes); ``more``: those measured in more processes already), after ``k``
    processes. The thin ones that more processes cannot decide get the note that says so
    (``finished`` is updated), are recorded in ``hopeless_seen`` (id -> processes) and counted in
    one progress line."""
    from pytest_gpuperf.plugin.replicates import measured_by_ab, needs_more, not_escalated, replicate_regression
    from pytest_gpuperf.reporting.terminal import not_escalated_line

    limits = s.limits
    thin, hopeless, caps = [], [], set()
    for key, r in finished.items():
        if measured_by_ab(r) and r.comparison.verdict.value == "inconclusive" and ab_confirms(key):
            continue  # A/B settles it (both sides now): more processes cannot shrink the baseline's spread
        own = (len(r.process_medians_ms or ()) or k) if not isinstance(r, str) else k
        cap = limits.max_processes if fit is None else min(limits.max_processes, own + fit)
        if needs_more(r, s.updating, max_processes=cap, by_time=cap < limits.max_processes,
                      replicate=not s.updating and replicate_regression(ab_confirms(key), key in more)):
            thin.append(key)
        elif key not in hopeless_seen and needs_more(r, s.updating):  # thin, but more cannot decide it
            hopeless.append(key)
            finished[key] = not_escalated(r, s.updating, cap, cap < limits.max_processes)
            hopeless_seen[key] = own
            caps.add(cap)
    if hopeless:
        cap = max(caps)
        progress.line(not_escalated_line(len(hopeless), cap, s.updating, after=k, by_time=cap < limits.max_processes))
    return thin


def _thin_why(finished: Mapping[str, Any], thin: list[str], updating: bool) -> str:
    """What the progress line says the benchmarks measured in more processes are."""
    if updating:
        return f"{len(thin)} benchmark(s) too imprecise a baseline"
    regressed = sum(finished[key].comparison.verdict.value == "regressed" for key in thin)
    return ", ".join(x for x in (
        f"{len(thin) - regressed} benchmark(s) inconclusive" if len(thin) > regressed else "",
        f"{regressed} regressed with no A/B against the baselines' commit to confirm it" if regressed else "",
    ) if x)


def _ab_what(finished: Mapping[str, Any], keys: list[str]) -> str:
    """What an A/B confirmation re-measures, for its progress line: ``2 regression(s), 5 inconclusive``."""
    regressed = sum(finished[k].comparison.verdict.value == "regressed" for k in keys)
    return ", ".join(x for x in (f"{regressed} regression(s)" if regressed else "",
                                 f"{len(keys) - regressed} inconclusive" if len(keys) > regressed else "") if x)


def _budget(runs: list[Any], more_time_s: float | None) -> Any:
    """The time the processes added for thin evidence may take
    (:class:`~pytest_gpuperf.verdict.escalation.TimeBudget`): ``more_time_s``
    (``--gpuperf-more-processes-time``), else as long as the first timed processes ``runs`` took."""
    from pytest_gpuperf.verdict.escalation import TimeBudget

    took = [r.seconds for r in runs if r.seconds is not None]
    if not took:  # no process said how long it took: only the count limits them
        return TimeBudget(more_time_s if more_time_s is not None else float("inf"), 0.0)
    return TimeBudget.of(took, more_time_s if more_time_s is not None else max(sum(took), 1e-9))


_IN_EXTRAS = "while measuring the extras (peak memory, counts, bottleneck)"


def _first(s: SessionSettings) -> int:
    """How many timed worker processes measure every benchmark before the first decisions: in a
    compare run of P >= 3 processes (not ``--gpuperf-nproc``), P - 1, and the P-th measures only
    what they left open (:func:`_last_process`); else all P."""
    return s.processes - 1 if s.processes >= 3 and not s.updating and not s.nproc else s.processes


def _passing(result: Any) -> bool:
    """A decided pass: ``unchanged`` or ``improved`` (the upper bound of its CI already below
    1 + threshold, which another process cannot fail at the CI's level)."""
    return (not isinstance(result, str) and result.comparison is not None
            and result.comparison.verdict.value in ("unchanged", "improved"))


def _open(result: Any, first: int) -> bool:
    """Whether a benchmark decided on the first ``first`` processes still needs the last one: every
    comparison but a decided pass (:func:`_passing`), except one whose ``processes`` option asked
    for no more than ``first``. A string (no result) never does."""
    if isinstance(result, str):
        return False
    if result.options.processes is not None:
        return result.options.processes > first
    return not _passing(result)


def _last_process(config: pytest.Config, s: SessionSettings, progress: Any, args: list[str], logs: Path,
                  finished: Mapping[str, Any], runs: list[Any], first: int) -> tuple[list[str], list[Any], str | None]:
    """The last of the P timed worker processes, for the benchmarks the first ``first`` (P - 1) did
    not decide as passing (:func:`_open`), run with only their tests (hidden ``--gpuperf-select``):
    a process whose measurements cannot change a verdict is not started (issue 45; two-stage
    sampling: the second stage only where the first is not conclusive). Its regression, as every
    regression, stands on all P processes. Returns (the open benchmarks, the run, how Ctrl-C or
    SIGTERM stopped it or None); none is started when nothing is open."""
    from pytest_gpuperf.plugin.replicates import run_workers
    from pytest_gpuperf.plugin.stopping import Stopped

    open_ = [key for key, r in finished.items() if _open(r, first)]
    nodeids = sorted({next((r.entries[key].get("nodeid") for r in runs if key in r.entries), "") for key in open_}
                     - {""})
    passing = sum(_passing(r) for r in finished.values())
    progress.line(f"gpuperf: {passing} of {len(finished)} benchmark(s) decided passing after "
                  f"{first} worker processes" + (f"; measuring the other {len(open_)} in worker process "
                                                 f"{s.processes}/{s.processes}" if nodeids else ""))
    if not nodeids:
        return open_, [], None
    select = logs / "select-last.txt"
    select.write_text("\n".join(nodeids) + "\n", encoding="utf-8")
    try:
        now = run_workers([*args, "--gpuperf-select", str(select)], Path(config.invocation_params.dir), s.processes,
                          logs, progress=progress.line, first=first, count=1, timeout_s=s.limits.worker_timeout_s,
                          tick=progress.tick if progress.live else None)
    except Stopped as exc:
        return open_, list(exc.runs), f"stopped ({exc.why}) during worker process {s.processes}/{s.processes}"
    finally:
        progress.close()
    return open_, now, None


def _measure_replicates(config: pytest.Config, s: SessionSettings, progress: Any, args: list[str],
                        logs: Path, instructions: Any, first: int) -> tuple[list[Any], list[Any], str | None, str | None]:
    """The first ``first`` (:func:`_first`) timed worker processes, then the extras (peak memory, counts, bottleneck), after all
    timing: an update run's in two processes, so that what differs between processes is seen as
    variable. The last timed processes make them after their timing
    (:mod:`~pytest_gpuperf.plugin.extras_pass`; not under torchrun), and an extras process of its
    own makes those whose pass did not start. Then, where benchmarks ask for them, the instruction
    worker (``instructions``, an :class:`~pytest_gpuperf.plugin.instructions.InstructionMode`).
    Returns (timed runs, extras runs, the message for benchmarks no worker reported, how Ctrl-C or
    SIGTERM stopped it or None). After a stop while timing, the timed runs so far come back (the
    stopped one last) with the extras their passes made; after one in the extras, the extras so far."""
    from pytest_gpuperf.plugin.extras_pass import collect, plan
    from pytest_gpuperf.plugin.replicates import run_extras, run_workers, unreported_message
    from pytest_gpuperf.plugin.stopping import Stopped

    progress.line(f"gpuperf: measuring in {s.processes} worker processes in turn (--gpuperf-processes)"
                  + (f", each a torchrun launch of {s.nproc} ranks (--gpuperf-nproc)" if s.nproc else "")
                  + (f", the last only for what the first {first} leave open" if first < s.processes else ""))
    here, count = Path(config.invocation_params.dir), 2 if s.updating else 1
    timeout_s, op_profile = s.limits.worker_timeout_s, s.updating and s.why
    passes, then = plan(first, count, op_profile, logs) if not s.nproc else ({}, {})
    try:
        runs = run_workers(args, here, s.processes, logs, timeout_s=timeout_s, nproc=s.nproc, count=first,
                           progress=progress, tick=progress.tick if progress.live else None, then=then)
    except Stopped as exc:
        runs = list(exc.runs)
        extras, _ = collect(runs, passes)  # a stop in the last process's pass: its timing finished
        done = sum(not r.stopped for r in runs)
        if done < first:
            stopped = (f"stopped ({exc.why}) during worker process {done + 1}/{s.processes}, after {done} finished"
                       if done < len(runs) else f"stopped ({exc.why}) {_IN_EXTRAS}, after {done} of {s.processes} "
                       f"worker processes")
            progress.line(f"gpuperf: {stopped.partition(',')[0]}: deciding the benchmarks that "
                          f"{min(2, s.processes)} processes measured; the others are not measured")
            progress.close()
            return runs, extras, None, stopped
        progress.close()
        return runs, extras, unreported_message(runs), f"stopped ({exc.why}) {_IN_EXTRAS}"
    unreported, stopped = unreported_message(runs), None  # for the benchmarks no worker reported
    extras, missing = collect(runs, passes) if passes else ([], list(range(count)))
    try:
        if missing:
            extras += run_extras(args, here, s.processes, logs, count=count, progress=progress.line,
                                 timeout_s=timeout_s, op_profile=op_profile, nproc=s.nproc, only=missing)
    except Stopped as exc:  # the timing is complete: keep it, with the extras finished so far
        stopped = f"stopped ({exc.why}) {_IN_EXTRAS}"
        extras += [r for r in exc.runs if r.entries]
    if stopped is None and instructions is not None:
        stopped = instructions.run(args, here, logs, runs)
    progress.close()
    return runs, sorted(extras, key=lambda r: -r.index), unreported, stopped


def _decide_all(finished: dict[str, Any], runs: list[Any], extras: list[Any], processes: int,
                decide: Callable[[str, list[dict[str, Any]], Any, Any], Any], only: set[str] | None = None) -> None:
    """Decide every benchmark the worker ``runs`` reported (those in ``only``, when given) into
    ``finished`` (``decide(key, entries, *extras_for(key))``). After a stop, a benchmark is decided
    on the processes that measured it, when at least two did (or every one asked for); else it gets
    no result (its test is skipped)."""
    from pytest_gpuperf.ab.results import options_from_entry
    from pytest_gpuperf.plugin.replicates import extras_for, missing_message

    for key in dict.fromkeys(k for r in runs for k in r.entries if only is None or k in only):
        first = next(r.entries[key] for r in runs if key in r.entries)
        wanted = _worker_count(options_from_entry(first), processes)
        mine = [r for r in runs[:wanted] if not (r.stopped and key not in r.entries)]  # marker processes=N: the first N
        if len(mine) < wanted and len(mine) < 2:
            continue  # stopped before enough processes measured it
        problem = missing_message(key, mine)
        finished[key] = problem if problem is not None else decide(key, [r.entries[key] for r in mine],
                                                                   *extras_for(key, extras))


def _priors(finished: Mapping[str, Any], baselines: Mapping[str, Any]) -> Any:
    """The session's spreads over worker processes, one prior per clock
    (:func:`pytest_gpuperf.verdict.moderation.session_priors`), from every decided benchmark with a
    stored baseline (``baselines``: full id -> its entry)."""
    from pytest_gpuperf.verdict.moderation import session_priors

    return session_priors((r.process_medians_ms, r.cpu.process_medians_ms if r.cpu is not None else None,
                           baselines.get(key), (r.probe, r.ref_medians))
                          for key, r in finished.items() if not isinstance(r, str))


def _run_reference(runs: list[Any]) -> dict[str, Any] | None:
    """The reference workloads of this run: each timed worker process's (the first of its entries
    that has them), median over the processes (:func:`~pytest_gpuperf.verdict.machine.median_reference`)."""
    from pytest_gpuperf.verdict.machine import median_reference

    def reference_of(run: Any) -> Any:
        found = [(e.get("environment") or {}).get("reference") for e in run.entries.values()]
        return next((ref for ref in found if ref), None)

    return median_reference([reference_of(r) for r in runs if not r.stopped])


def _machine_check(finished: dict[str, Any], reference: Mapping[str, Any] | None, baselines: Mapping[str, Any],
                   ab_confirms: Callable[[str], bool]) -> None:
    """Each regression that no A/B will confirm (``ab_confirms(key)`` False), read against the
    machine's speed now and when its baseline was recorded
    (:func:`~pytest_gpuperf.verdict.gate.machine_explains`); ``finished`` is updated."""
    from pytest_gpuperf.verdict.gate import machine_explains
    from pytest_gpuperf.verdict.machine import cpu_drift_ratio, drift_ratios

    for key, r in finished.items():
        base = baselines.get(key)
        if (isinstance(r, str) or r.comparison is None or base is None
                or r.comparison.verdict.value != "regressed" or ab_confirms(key)):
            continue
        c = machine_explains(r.comparison, drift_ratios(reference, base.reference),
                             cpu_drift_ratio(reference, base.reference))
        if c is not r.comparison:
            finished[key] = r.replace(comparison=c)


def _inconclusive(finished: Mapping[str, Any]) -> set[str]:
    """The benchmarks of ``finished`` whose timing verdict is inconclusive (what a prior may move)."""
    return {key for key, r in finished.items()
            if not isinstance(r, str) and r.comparison is not None and r.comparison.verdict.value == "inconclusive"}


def _worker_args(config: pytest.Config) -> list[str]:
    """The worker processes' command-line arguments: the user's selection and options, built
    positively (:func:`~pytest_gpuperf.ab.run.worker_args`), without pytest-xdist."""
    from pytest_gpuperf.ab.run import worker_args

    args = worker_args(config.invocation_params.args, config)
    return [*args, "-n", "0"] if config.pluginmanager.hasplugin("xdist") else args
