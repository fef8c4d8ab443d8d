"""A run that Ctrl-C or SIGTERM stops (a CI job's timeout, a cancelled job) keeps what it finished (issue 45).

* In the coordinator (worker processes before the tests) SIGTERM raises
  :class:`~pytest_gpuperf.core.signals.Terminated` (:func:`~pytest_gpuperf.core.signals.sigterm_raises`); the running worker is stopped and :class:`Stopped` carries what the
  workers finished, which the coordinator decides and keeps (its ``stopped`` says how it was
  stopped); the tests of the benchmarks not measured are skipped.
* In the user's session otherwise (:class:`SigtermInterrupts`, registered when it measures),
  SIGTERM interrupts it as Ctrl-C does, so that pytest still finishes the session: the reports and
  the history keep what was measured, and a baseline is written as each test passes.
"""

from __future__ import annotations

import signal
from typing import Any

import pytest



class Stopped(Exception):
    """The worker processes were stopped by Ctrl-C or SIGTERM (``why``) while one ran: ``runs`` are
    those that finished and the stopped one (a :class:`~pytest_gpuperf.plugin.replicates.WorkerRun`
    with ``stopped`` set), whose ``entries`` hold what it reported before the stop."""

    def __init__(self, runs: list[Any], why: str) -> None:
        super().__init__(why)
        self.runs, self.why = runs, why


class SigtermInterrupts:
    """The user's measuring session: from session start SIGTERM interrupts it as Ctrl-C does
    (pytest then runs ``pytest_sessionfinish``: reports, history); the previous handler comes back
    at the end. When the coordinator was stopped (``session.coordinator.stopped``), the summary says
    what was kept and the session exits with pytest's "interrupted" status (2).

    ``session``: the :class:`~pytest_gpuperf.plugin.session.GpuPerfSession`."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.previous: Any = None

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        def interrupt(signum: int, frame: Any) -> None:
            raise KeyboardInterrupt(f"signal {signum} (SIGTERM)")

        try:
            self.previous = signal.signal(signal.SIGTERM, interrupt)
        except ValueError:  # not the main thread
            self.previous = None

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        s = self.session
        stopped = getattr(s.coordinator, "stopped", None)
        if stopped is None:
            return
        written = " and their baselines written" if s.settings.updating else ""
        s.errors["stopped"] = (f"the measuring was {stopped}: {len(s.recorded)} benchmark result(s) kept{written}; "
                               "the tests of the others were skipped, not measured")
        session.exitstatus = pytest.ExitCode.INTERRUPTED

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGTERM, self.previous)
            self.previous = None
