"""The plugin's role under ``torchrun``: one object that keeps a distributed session's ranks agreeing (issue 35).

Registered at configure time when torchrun started this process with ``WORLD_SIZE`` > 1 (see
:class:`~pytest_gpuperf.measure.distributed.Ranks`); in every other session it does not exist.
Its hooks:

* session start: create the default process group when the user's code has not (gloo on the CPU,
  nccl on CUDA, with ``--gpuperf-rank-timeout`` as its timeout), destroyed at the end (after a
  last barrier: torchrun stops every rank once one exits non-zero) only if it was created here,
  and the roll call's gloo side groups (:class:`~pytest_gpuperf.measure.distributed.Ranks`);
* collection finish: every rank must run the same tests in the same order (one
  ``all_gather_object`` of the node ids); a mismatch is one usage error naming the first differing
  test and the ranks, not a hang in the first benchmark's collectives;
* each test's setup and teardown report: a fault (or a skip) on one rank fails (skips) the test on
  every rank (:func:`~pytest_gpuperf.verdict.distributed.agreed_phase`), so no rank runs a call
  the others do not;
* each test's call report, twice: before the plugin's verdict (:class:`RaisedOnAnyRank`: a test
  that raised on any rank fails on every rank, naming it, so no baseline is written for it), and
  after it (every rank reports rank 0's verdict:
  :func:`~pytest_gpuperf.verdict.distributed.agreed_outcome`). So exit codes agree. After that the
  test's benchmark is over: its collectives' budget and the hung-rank watchdog end;
* each test's setup, call and teardown: the hung-rank watchdog is armed until the ranks agreed on
  the phase's outcome (:class:`PhaseWatchdog`). A rank whose phase raised sends its exception in
  one line (:func:`raised_summary`), so the others name the rank, its exception's type, message
  and innermost frame.

Rank 0 alone writes baselines, reports and history (:mod:`pytest_gpuperf.plugin` registers the
writers there only; :mod:`pytest_gpuperf.plugin.session` writes baselines on rank 0).

With ``--gpuperf-nproc N`` the session the user started is no rank: it runs the torchrun launches
(:func:`~pytest_gpuperf.core.launch.launcher`), whose rank 0 reports to it, and decides.
:func:`~pytest_gpuperf.verdict.distributed.launched_result` adds to that decision what a rank
would (scaling efficiency, the communication's change), and :class:`WorldOfOne` gives its tests a
process group of one rank.
"""

from __future__ import annotations

from typing import Any, Iterator

import pytest

#: Characters of a rank's failure text sent to the others (its tail: where it failed).
TEXT_TAIL = 2000


class DistributedSession:
    """The hooks of a session under torchrun (see the module doc): ``settings`` (the session's
    :class:`~pytest_gpuperf.plugin.settings.SessionSettings`) and ``ranks`` (this process's
    :class:`~pytest_gpuperf.measure.distributed.Ranks`)."""

    def __init__(self, settings: Any, ranks: Any) -> None:
        self.settings = settings
        self.ranks = ranks

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """Create the default process group (when the user's code has not) on the session's device
        kind, and the hung-rank watchdog's file (:func:`_watchdog_file`)."""
        self.ranks.watchdog_file, self.ranks.watchdog_dir = _watchdog_file(session.config, self.ranks)
        self.ranks.start(_device_type(self.settings))


    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Every rank collected the same tests in the same order, or one usage error says where not."""
        from pytest_gpuperf.verdict.distributed import first_mismatch

        mismatch = first_mismatch(self.ranks.gather([item.nodeid for item in session.items]))
        if mismatch is None:
            return
        position, rank, ours, theirs = mismatch
        raise pytest.UsageError(
            f"pytest-gpuperf under torchrun: the ranks collected different tests: test {position + 1} is "
            f"{ours or '(none: the list ended)'} on rank 0 but {theirs or '(none: the list ended)'} on rank {rank}; "
            f"every rank must run the same tests in the same order (same arguments, -k and selection on every rank)")

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
        """After the plugin's own verdict (this wrapper is outside the session's): the ranks agree on
        the call's outcome, rank 0's verdict for all (:func:`_agree`)."""
        outcome = yield
        report = outcome.get_result()
        if report.when == "call":
            try:
                self._agree(item, report, call)
            finally:  # the test's benchmark is over everywhere: its waits and watchdog end
                self.ranks.end_benchmark()
        else:  # setup, teardown: a fault on one rank fails (a skip skips) the test on every rank
            self._agree_phase(item, report, call)

    def _agree_phase(self, item: pytest.Item, report: pytest.TestReport, call: pytest.CallInfo[None]) -> None:
        """One ``all_gather_object`` of the ranks' setup (or teardown) outcomes, this rank's report
        made the agreed one (:func:`~pytest_gpuperf.verdict.distributed.agreed_phase`): a setup
        that failed or skipped on one rank fails or skips the test on every rank, so no rank runs a
        call the others do not (issue 46). Nothing once a collective failed."""
        if self.ranks.broken is not None:
            return
        from pytest_gpuperf.measure.distributed import DistributedFault
        from pytest_gpuperf.verdict.distributed import agreed_phase

        text = _report_text(report)
        try:
            outcomes = _exchange(self.ranks, item, report, call, report.failed, f"{report.nodeid} ({report.when})")
        except DistributedFault as exc:
            report.outcome = "failed"
            report.longrepr = (f"pytest-gpuperf under torchrun: the ranks could not agree on this test's "
                               f"{report.when}: {exc}" + (f"\n\nthis rank ({self.ranks.rank}):\n{text}" if text else ""))
            return
        agreed, why = agreed_phase(outcomes)
        if agreed == report.outcome:
            return
        if agreed == "failed":
            report.outcome, report.longrepr = "failed", f"pytest-gpuperf under torchrun: {report.when}: {why}"
        elif agreed == "skipped":
            path, line, _ = item.location
            report.outcome, report.longrepr = "skipped", (str(item.path), (line or 0) + 1, f"Skipped: {why}")

    def _agree(self, item: pytest.Item, report: pytest.TestReport, call: pytest.CallInfo[None]) -> None:
        """One ``all_gather_object`` of the ranks' outcomes, and this rank's report made the agreed
        one (:func:`~pytest_gpuperf.verdict.distributed.agreed_outcome`); nothing once a collective failed."""
        if self.ranks.broken is not None:  # a rank crashed or hung: no more waiting
            return
        from pytest_gpuperf.measure.distributed import DistributedFault
        from pytest_gpuperf.verdict.distributed import agreed_outcome

        raised = call.excinfo is not None and not call.excinfo.errisinstance(pytest.skip.Exception)
        text = _report_text(report)
        try:
            outcomes = _exchange(self.ranks, item, report, call, raised, report.nodeid)
        except DistributedFault as exc:  # the ranks could not agree (one crashed, hung or raised elsewhere):
            report.outcome = "failed"    # this test fails here, with why; never an INTERNALERROR (issue 46)
            own = f"\n\nthis rank ({self.ranks.rank}):\n{text}" if text else ""
            report.longrepr = f"pytest-gpuperf under torchrun: the ranks could not agree on this test's outcome: {exc}{own}"
            return
        agreed, why = agreed_outcome(outcomes)
        if agreed == report.outcome:
            return
        if agreed == "failed":
            report.outcome = "failed"
            report.longrepr = why
        elif agreed == "passed":  # rank 0 judged it passed: this rank's own verdict does not count
            report.outcome, report.longrepr = "passed", None
        # rank 0 skipped but this rank did not: keep this rank's own (the test ran here)


    @pytest.hookimpl(trylast=True)
    def pytest_unconfigure(self, config: pytest.Config) -> None:
        """The last barrier (after a fault: rank 0's farewell to the ranks still there instead), then
        destroy the default process group when it was created here.

        torchrun stops every rank as soon as one exits non-zero, so no rank leaves before rank 0
        wrote its summary, reports and history (they are written at session finish)."""
        from pytest_gpuperf.measure.distributed import DistributedFault

        try:
            self.ranks.barrier()
        except DistributedFault as exc:  # a rank never reached the end: say so, the exit code says the rest
            import sys

            sys.stderr.write(f"pytest-gpuperf under torchrun: {exc}\n")
        finally:
            self.ranks.farewell()  # after a fault: the ranks still there leave after rank 0's output
            self.ranks.stop()
            fd, self.ranks.watchdog_file = self.ranks.watchdog_file, None
            if fd is not None:
                _close_watchdog_file(fd, self.ranks)


def _exchange(ranks: Any, item: pytest.Item, report: pytest.TestReport, call: pytest.CallInfo[None], raised: bool,
              where: str) -> list[Any]:
    """One ``all_gather_object`` of this rank's outcome of the phase (a
    :class:`~pytest_gpuperf.verdict.distributed.RankOutcome` of ``report``, with the exception it
    ``raised`` in one line, :func:`raised_summary`): every rank's, in rank order. A rank that raised leaves its
    exception where the other ranks look when they cannot reach it (``where``: the test and phase
    it names), until the exchange is done; then the phase's watchdog is disarmed. Raises
    :class:`~pytest_gpuperf.measure.distributed.DistributedFault` as the gather does."""
    from pytest_gpuperf.measure.distributed import note_raised, watch_phase
    from pytest_gpuperf.verdict.distributed import RankOutcome

    text = _report_text(report)
    summary = raised_summary(call.excinfo, item.config.rootpath) if raised else ""
    if raised:
        note_raised(ranks.watchdog_dir, ranks.rank, f"{where}: {text}", summary)
    outcomes = ranks.gather(RankOutcome(report.outcome, raised, text, summary))
    if raised:  # every rank has it now: a later fault must not quote it
        note_raised(ranks.watchdog_dir, ranks.rank, "")
    watch_phase(ranks, False)
    return outcomes


def raised_summary(excinfo: Any, rootpath: Any) -> str:
    """The exception of ``excinfo`` (pytest's ``ExceptionInfo``) in one line: type, message and its
    innermost frame (not one hidden with ``__tracebackhide__``), the path relative to ``rootpath``
    when it is under it (:func:`~pytest_gpuperf.verdict.distributed.exception_line`); ``""`` when
    there is none or it cannot be read."""
    import os

    from pytest_gpuperf.verdict.distributed import exception_line

    if excinfo is None:
        return ""
    try:
        frames = excinfo.traceback.filter(excinfo) or excinfo.traceback
        inner = frames[-1]
        path = str(inner.path)
        relative = os.path.relpath(path, str(rootpath))
        shown = relative if not relative.startswith("..") and not os.path.isabs(relative) else path
        return exception_line(excinfo.typename, str(excinfo.value), shown, inner.lineno + 1, inner.name)
    except Exception:  # noqa: BLE001 - an odd exception or frame: the text still says it
        return exception_line(type(excinfo.value).__name__, str(excinfo.value), "?", 0, "?")


class PhaseWatchdog:
    """Each test's setup, call and teardown arm the hung-rank watchdog until the ranks agree on the
    phase's outcome (:func:`~pytest_gpuperf.measure.distributed.watch_phase`; a benchmark arms its
    own in its call): a rank that hangs in a fixture, or in a test outside its benchmark, writes
    its traceback, which the other ranks quote (issue 46). Registered beside
    :class:`DistributedSession`."""

    def __init__(self, ranks: Any) -> None:
        self.ranks = ranks

    def _arm(self) -> None:
        from pytest_gpuperf.measure.distributed import watch_phase

        watch_phase(self.ranks, True)

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Iterator[None]:
        """Arm the watchdog for the setup."""
        self._arm()
        yield

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Iterator[None]:
        """Arm the watchdog for the call."""
        self._arm()
        yield

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> Iterator[None]:
        """Arm the watchdog for the teardown."""
        self._arm()
        yield


def _report_text(report: pytest.TestReport) -> str:
    """What a rank sends the others of its report: the tail of why it failed or skipped (a skip's
    reason alone), empty when it passed."""
    if report.passed or report.longrepr is None:
        return ""
    if report.skipped and isinstance(report.longrepr, tuple) and len(report.longrepr) == 3:
        return str(report.longrepr[2]).removeprefix("Skipped: ")[-TEXT_TAIL:]
    return str(report.longrepr)[-TEXT_TAIL:]


class WorldOfOne:
    """``--gpuperf-nproc N``, in the session the user started: the torchrun launches measured every
    benchmark before the tests (:class:`~pytest_gpuperf.plugin.coordinator.Coordinator`); the tests
    then call each benchmarked function once here for the test's value, as every session that
    measured in worker processes does. This process is no rank of a launch, so a function that
    calls ``torch.distributed`` needs a process group here: a world of one rank (rank 0, a
    ``HashStore``; gloo, or nccl when the session's benchmarks run on a GPU), made before the first
    test when the user's code has not made one, and destroyed at the end. A collective in a world
    of one returns at once with its input."""

    def __init__(self, settings: Any) -> None:
        self.settings = settings
        self.owned = False

    @pytest.hookimpl(trylast=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        import torch.distributed as dist

        if not dist.is_available() or dist.is_initialized():
            return
        backend = "nccl" if _device_type(self.settings) == "cuda" else "gloo"
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
        self.owned = True

    @pytest.hookimpl(trylast=True)
    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self.owned:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()
            self.owned = False


def _device_type(settings: Any) -> str:
    """``"cuda"`` when the session's benchmarks default to a GPU that exists here, else ``"cpu"``."""
    requested = settings.options.device
    if requested is not None and str(requested).startswith("cpu"):
        return "cpu"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _watchdog_file(config: pytest.Config, ranks: Any, environ: Any = None) -> tuple[int | None, str | None]:
    """The hung-rank watchdog's file descriptor and folder: ``(fd, folder)``.

    When every rank is on this node: this rank's file in a folder the node's ranks share
    (:func:`watchdog_folder`), so the other ranks quote a hung rank's traceback in their failure
    messages; otherwise (or when that folder cannot be made) a copy of this process's stderr
    descriptor (``faulthandler`` writes there while pytest captures fd 2; torchrun streams it),
    folder None. ``(None, None)`` when pytest's own ``faulthandler_timeout`` is set (its watchdog
    is the process's only one: the plugin's would replace it) or stderr has no descriptor."""
    import os
    import sys

    try:
        if float(config.getini("faulthandler_timeout") or 0) > 0:
            return None, None
    except (ValueError, TypeError):  # pytest's faulthandler plugin is off (-p no:faulthandler)
        pass
    folder = watchdog_folder(ranks, os.environ if environ is None else environ)
    if folder is not None:
        from pytest_gpuperf.verdict.distributed import watchdog_path

        if ranks.rank == 0:
            sweep_stale_watchdogs(os.path.dirname(folder), keep=folder)

        try:
            os.makedirs(folder, mode=0o700, exist_ok=True)
            return os.open(watchdog_path(folder, ranks.rank), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), folder
        except OSError:  # another user's folder of that name, a read-only temp dir: stderr then
            pass
    for stream in (sys.stderr, sys.__stderr__):
        try:
            fd = stream.fileno()  # type: ignore[union-attr]
            if fd >= 0:
                return os.dup(fd), None
        except (AttributeError, ValueError, OSError):
            continue
    return None, None


def watchdog_folder(ranks: Any, environ: Any) -> str | None:
    """The folder in the temp dir that the ranks of one torchrun launch share for their hung-rank
    tracebacks, when every rank is on this node (``LOCAL_WORLD_SIZE == WORLD_SIZE``) and torchrun
    named the run (``TORCHELASTIC_RUN_ID``): ``gpuperf-watchdog-<run id>-<master port>-<restart>``
    (the port keeps apart launches that share a run id, torchrun's default ``none``); else None
    (several nodes: each rank's traceback goes to its own stderr)."""
    import os
    import re
    import tempfile

    run_id = environ.get("TORCHELASTIC_RUN_ID")
    if not run_id or ranks.local_world_size != ranks.world_size:
        return None
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", run_id)[:64]
    port = re.sub(r"[^0-9]", "", environ.get("MASTER_PORT", ""))
    restart = re.sub(r"[^0-9]", "", environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    return os.path.join(tempfile.gettempdir(), f"gpuperf-watchdog-{safe}-{port}-{restart or 0}")


#: A watchdog folder untouched this long (s) belongs to a launch that ended without removing it
#: (killed, or stopped by torchrun before its ranks' session end): it is swept.
STALE_WATCHDOG_S = 24 * 3600


def sweep_stale_watchdogs(temp_dir: str, keep: str | None = None, now: float | None = None) -> list[str]:
    """Remove the ``gpuperf-watchdog-*`` folders in ``temp_dir`` (:func:`watchdog_folder`) whose
    newest file is older than :data:`STALE_WATCHDOG_S` (issue 46: a killed launch's folder stayed),
    except ``keep``; returns the removed paths. Never raises (another user's folder, a race)."""
    import glob
    import os
    import shutil
    import time

    now = time.time() if now is None else now
    removed = []
    for folder in glob.glob(os.path.join(temp_dir, "gpuperf-watchdog-*")):
        if keep is not None and os.path.abspath(folder) == os.path.abspath(keep):
            continue
        try:
            paths = [folder, *(os.path.join(folder, n) for n in os.listdir(folder))]
            newest = max(os.stat(p).st_mtime for p in paths)
        except OSError:
            continue
        if now - newest > STALE_WATCHDOG_S:
            shutil.rmtree(folder, ignore_errors=True)
            if not os.path.exists(folder):
                removed.append(folder)
    return removed


def _close_watchdog_file(fd: int, ranks: Any) -> None:
    """At the session's end: close the watchdog's descriptor; in the node's folder remove this
    rank's file when nothing was written to it (a traceback stays, where the failure messages say),
    and the folder once it is empty."""
    import os

    try:
        empty = ranks.watchdog_dir is not None and os.fstat(fd).st_size == 0
    except OSError:
        empty = False
    os.close(fd)
    if ranks.watchdog_dir is None:
        return
    from pytest_gpuperf.verdict.distributed import raised_path, watchdog_path

    try:
        os.unlink(raised_path(ranks.watchdog_dir, ranks.rank))
    except OSError:
        pass
    try:
        if empty:
            os.unlink(watchdog_path(ranks.watchdog_dir, ranks.rank))
        os.rmdir(ranks.watchdog_dir)
    except OSError:  # another rank's file is still there (or its traceback): the last one out removes it
        pass


class RaisedOnAnyRank:
    """Before the plugin's verdict and baseline writing (a wrapper inside the session's): a test
    that raised on any rank fails on every rank first, so rank 0 writes no baseline for a benchmark
    whose test failed on another rank. Registered beside :class:`DistributedSession`."""

    def __init__(self, session: DistributedSession) -> None:
        self.session = session

    @pytest.hookimpl(hookwrapper=True, trylast=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
        outcome = yield
        report = outcome.get_result()
        if report.when == "call":
            self.session._agree(item, report, call)  # before any verdict: only a rank that raised fails the others
