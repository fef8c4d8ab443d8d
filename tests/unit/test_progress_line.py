"""The progress line of long work (issue 24): one line rewritten in place on a terminal, plain lines
in CI logs and pipes. Written through a real pytest ``TerminalReporter`` into a string."""

from __future__ import annotations

import io

import pytest
from _pytest.terminal import TerminalReporter

from pytest_gpuperf.reporting.terminal import ProgressLine


def _reporter(config: pytest.Config, tty: bool) -> tuple[TerminalReporter, io.StringIO]:
    out = io.StringIO()
    tr = TerminalReporter(config, file=out)
    tr.isatty = lambda: tty  # type: ignore[method-assign]
    return tr, out


def test_on_a_terminal_steps_rewrite_one_line_cut_to_the_width(pytestconfig: pytest.Config) -> None:
    tr, out = _reporter(pytestconfig, tty=True)
    p = ProgressLine(tr, width=40)
    p.line("gpuperf: measuring in 3 worker processes")
    p.step("worker process 1/3 done")
    p.tick("worker process 2/3: 5 benchmark(s) measured, 12 s elapsed")  # longer than the width: cut
    p.step("worker process 2/3 done")
    p.close()
    p.line("after")
    raw = out.getvalue()
    assert raw.startswith("gpuperf: measuring in 3 worker processes\n")
    steps = raw.split("\n")[1].split("\r")[1:]  # every step on the same screen line
    assert [s.rstrip() for s in steps] == ["worker process 1/3 done",
                                           "worker process 2/3: 5 benchmark(s) mea…",
                                           "worker process 2/3 done"]
    assert all(len(s) == 39 for s in steps)  # padded to erase a longer step, never wrapping at 40 columns
    assert raw.endswith("worker process 2/3 done" + " " * 16 + "\nafter\n")  # the last step stays visible


def test_in_a_log_every_step_is_a_plain_line_and_ticks_are_not_shown(pytestconfig: pytest.Config) -> None:
    tr, out = _reporter(pytestconfig, tty=False)
    p = ProgressLine(tr, width=40)
    p.line("start")
    p.step("worker process 1/3 done")
    p.tick("worker process 2/3: 5 benchmark(s) measured")  # finer steps only where they cost no line
    p.step("worker process 2/3 done")
    p.close()
    assert "\r" not in out.getvalue()
    assert out.getvalue().splitlines() == ["start", "worker process 1/3 done", "worker process 2/3 done"]


def test_a_line_ends_a_rewritten_step_first(pytestconfig: pytest.Config) -> None:
    tr, out = _reporter(pytestconfig, tty=True)
    p = ProgressLine(tr, width=40)
    p.step("A/B: test_a (worker pair 1)")
    p.line("A/B: confirming 1 regression(s)")
    assert out.getvalue().split("\n")[1] == "A/B: confirming 1 regression(s)"


def test_without_a_terminal_reporter_nothing_is_written() -> None:
    p = ProgressLine(None)
    p.line("x")
    p("y")
    p.tick("z")
    p.close()
    assert p.live is False


def test_the_closing_line_says_where_the_time_before_the_tests_went() -> None:
    from pytest_gpuperf.reporting.terminal import whole_time_line

    line = whole_time_line(240.0, 233.8, phases_s={"3 worker processes": 66.2, "A/B confirmation": 152.4})
    assert line == ("gpuperf: the session took 240.0 s in all, 233.8 s of it in worker processes before the tests: "
                    "3 worker processes 66 s, A/B confirmation 152 s (pytest's closing time counts the tests only)")
    # one step alone is the whole of it: no list
    assert whole_time_line(70.0, 66.0, phases_s={"3 worker processes": 66.0}).endswith(
        "66.0 s of it in worker processes before the tests (pytest's closing time counts the tests only)")


def test_a_phase_is_timed_also_when_it_is_stopped() -> None:
    import time

    from pytest_gpuperf.plugin.coordinator import _phase

    ledger: dict[str, float] = {}
    with _phase(ledger, "nothing to do"):
        pass
    assert ledger == {}  # a step with nothing to do is not listed
    with pytest.raises(KeyboardInterrupt):
        with _phase(ledger, "more processes"):
            time.sleep(0.06)
            raise KeyboardInterrupt
    assert ledger["more processes"] >= 0.06
    with _phase(ledger, "more processes"):  # a step run again adds up
        pass
    assert list(ledger) == ["more processes"] and ledger["more processes"] >= 0.06
