"""Process-level replicates: option resolution, worker slots, merging, missing replicates and the
A/B confirmation's final result (pure parts of pytest_gpuperf.plugin.replicates; no worker is started)."""

from __future__ import annotations

import json
from typing import Any
from pathlib import Path

import pytest

from pytest_gpuperf.plugin import replicates
from pytest_gpuperf.verdict.compare import ABEvidence, Comparison, Verdict
from pytest_gpuperf.core.options import BenchOptions
from pytest_gpuperf.reporting.report import result_entry
from pytest_gpuperf.verdict.result import BenchResult
from pytest_gpuperf.reporting.messages import comparison_message, failure_messages


def test_processes_come_from_cli_then_ini_then_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUPERF_PROCESSES", raising=False)
    assert replicates.default_processes(None, None) == replicates.DEFAULT_PROCESSES == 3
    monkeypatch.setenv("GPUPERF_PROCESSES", "5")
    assert replicates.default_processes(None, None) == 5
    assert replicates.default_processes(None, "2") == 2
    assert replicates.default_processes("1", "2") == 1
    for bad in ("0", "-1", "two", "1.5"):
        with pytest.raises(ValueError, match="expected an integer >= 1"):
            replicates.default_processes(bad, None)
    with pytest.raises(ValueError, match="ini gpuperf_processes"):
        replicates.default_processes(None, "x")


def test_worker_slot_and_options(monkeypatch: pytest.MonkeyPatch) -> None:
    assert replicates.worker_role(None) is None
    role = replicates.WorkerRole((1, 3), "/tmp/w.jsonl")
    assert replicates.worker_role(role.argument().partition("=")[2]) == role
    assert replicates.worker_role('{"replicate": "1/3"}').slot == (1, 3)
    for bad in ("x", "1", "-1/3", "1/0"):  # k >= P is a process added for inconclusive benchmarks
        with pytest.raises(ValueError, match="--gpuperf-role"):
            replicates.worker_role(json.dumps({"replicate": bad}))
    with pytest.raises(ValueError, match="--gpuperf-role"):
        replicates.worker_role("1/3")  # not the JSON the coordinator passes
    assert replicates.worker_role('{"replicate": "x/3"}').slot == (replicates.EXTRAS, 3)  # the extras process (issue 31)
    o = BenchOptions(max_time=1.5, warmup_time=0.03, expect_bottleneck=("compute",))
    first, other = replicates.worker_options(o, (0, 3)), replicates.worker_options(o, (2, 3))
    # every timed worker measures its share of max_time; none makes the extras (the extras process
    # does, and keeps the options as they are): the options themselves are the test's
    assert first.max_time == pytest.approx(0.5) and first.counts and first.expect_bottleneck == ("compute",)
    assert other.max_time == pytest.approx(0.5) and other.counts and other.expect_bottleneck == ("compute",)
    assert first.threshold == o.threshold and first.alpha == o.alpha
    assert replicates.worker_options(o, (replicates.EXTRAS, 3)) == o


def test_worker_options_split_min_rounds():
    """Issue 45: ``min_rounds`` is split over the processes like ``max_time`` (ceil, at least
    MIN_PROCESS_ROUNDS in each), so a long call makes about min_rounds rounds in all, not in each."""
    assert replicates.MIN_PROCESS_ROUNDS == 2
    assert replicates.worker_options(BenchOptions(min_rounds=10), (0, 3)).min_rounds == 4
    assert replicates.worker_options(BenchOptions(min_rounds=10), (4, 3)).min_rounds == 4  # an added process
    assert replicates.worker_options(BenchOptions(min_rounds=5), (1, 3)).min_rounds == 2
    assert replicates.worker_options(BenchOptions(min_rounds=5, processes=2), (1, 3)).min_rounds == 3
    assert replicates.worker_options(BenchOptions(min_rounds=1), (0, 3)).min_rounds == 1  # never more than asked
    assert replicates.worker_options(BenchOptions(min_rounds=30, max_rounds=5), (0, 3)).min_rounds <= 5
    assert replicates.worker_options(BenchOptions(min_rounds=10), (replicates.EXTRAS, 3)).min_rounds == 10


def _entry(median: float, *, telemetry: dict | None = None, peak: int | None = 100, probe_ms: float | None = None) -> dict:
    r = BenchResult.from_samples(tuple(median * f for f in (0.99, 1.0, 1.01) * 4), name="t", device="cpu", rounds=12,
                                 calls_per_round=2, warmup_calls=3, benchmark_id="test_x", options={"threshold": 0.05},
                                 telemetry=telemetry, peak_memory_bytes=peak, probe_ms=probe_ms,
                                 probe="memory: 2 MiB copy" if probe_ms else None)
    return result_entry(r, environment={"device_type": "cpu", "device_name": "X"}, git_commit=None, timestamp_utc="")


def test_merge_keeps_each_process_and_pools_the_host_load() -> None:
    entries = [_entry(1.0, telemetry={"host_wall_s": 0.3, "host_other_s": 0.3, "cpu_count": 2}),
               _entry(1.2, telemetry={"host_wall_s": 0.3, "host_other_s": 0.0}, peak=999)]
    m = replicates.merge("t.py::test_x", entries)
    assert m.process_medians_ms == pytest.approx((1.0, 1.2))
    assert m.samples_ms[:12] == tuple(entries[0]["samples_ms"]) and len(m.samples_ms) == 24
    assert m.rounds == 24 and m.calls_per_round == 2 and m.peak_memory_bytes == 100  # worker 0's
    # 0.3 core-seconds of others over 0.6 s of spans: neither worker alone timed the 0.5 s that count
    assert m.telemetry["other_cpu_cores"] == pytest.approx(0.5)
    with pytest.raises(ValueError):
        replicates.merge("t.py::test_x", [])
    assert m.probe_ms is None
    # the probe level recorded is the workers' median (it was dropped before: baselines had none)
    probed = replicates.merge("t.py::test_x", [_entry(1.0, probe_ms=0.2), _entry(1.0, probe_ms=0.3),
                                               _entry(1.0, probe_ms=0.25)])
    assert probed.probe_ms == pytest.approx(0.25) and probed.probe == "memory: 2 MiB copy"


def test_missing_replicates_name_the_worker_and_its_output(tmp_path: Path) -> None:
    log = tmp_path / "worker-1.log"
    log.write_text("line\nSegmentation fault\n")
    ok = replicates.WorkerRun(0, 0, tmp_path / "worker-0.log", {"m::a": {}, "m::b": {}})
    crashed = replicates.WorkerRun(1, -11, log, {"m::a": {}}, error="worker process 2/2 exited with code -11")
    runs = [ok, crashed]
    assert replicates.missing_message("m::a", runs) is None
    text = replicates.missing_message("m::b", runs)
    assert text.startswith("m::b: measured by 1 of 2 worker processes: worker process 2/2 exited with code -11")
    assert "Segmentation fault" in text and "partial set of replicates" in text
    assert replicates.missing_message("m::c", [ok, replicates.WorkerRun(1, 0, log, {})]) is None  # ran in none
    skipped = replicates.missing_message("m::b", [ok, replicates.WorkerRun(1, 0, log, {"m::a": {}})])
    assert skipped.startswith("m::b: measured by 1 of 2 worker processes (worker 2 did not report it")


def test_worker_results_survive_a_torn_last_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "w.jsonl"
    r = BenchResult.from_samples((1.0, 2.0), name="t", device="cpu", rounds=2, calls_per_round=1, warmup_calls=0,
                                 benchmark_id="test_x")
    replicates.report_result("m::test_x", r, {"device_type": "cpu"}, out=str(out))
    with open(out, "a") as f:
        f.write('{"key": "m::test_y", "entr')  # the worker died while writing
    got, failures = replicates.read_results(out)
    assert list(got) == ["m::test_x"] and got["m::test_x"]["samples_ms"] == [1.0, 2.0] and failures == {}
    assert replicates.read_results(tmp_path / "none.jsonl") == ({}, {})


def test_a_worker_whose_test_raised_names_the_exception(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "w.jsonl"

    def user_code():
        raise RuntimeError("Converting a tensordict to boolean value is not permitted")

    try:
        user_code()
    except RuntimeError as exc:
        replicates.report_failure("m.py::test_b", exc, out=str(out))
    entries, failures = replicates.read_results(out)
    assert entries == {} and failures["m.py::test_b"].startswith(
        "RuntimeError: Converting a tensordict to boolean value is not permitted (at ")
    assert "in user_code" in failures["m.py::test_b"]
    log = tmp_path / "worker-1.log"
    log.write_text("")
    ok = replicates.WorkerRun(0, 0, tmp_path / "worker-0.log", {"m.py::test_b::fwd": {}})
    raised = replicates.WorkerRun(1, 1, log, {}, failures=failures)
    text = replicates.missing_message("m.py::test_b::fwd", [ok, raised])
    assert text.startswith("m.py::test_b::fwd: measured by 1 of 2 worker processes (worker 2 did not report it: its "
                           "test raised RuntimeError: Converting a tensordict to boolean value is not permitted (at ")
    assert replicates.WorkerRun(1, 1, log, {}, failures=failures).failure_of("m.py::test_bc") is None


def test_ab_confirmation_makes_the_ab_verdict_final_or_keeps_the_stored_one_with_a_note() -> None:
    def result(c: Comparison) -> BenchResult:
        return BenchResult.from_samples((1.3,) * 4, name="t", device="cpu", rounds=4, calls_per_round=1,
                                        warmup_calls=0, benchmark_id="test_x", comparison=c, peak_memory_bytes=5,
                                        process_medians_ms=(1.3, 1.3))

    stored = result(Comparison(Verdict.REGRESSED, "m::test_x", 1.3, 1.0, ratio=1.3, ratio_ci=(1.2, 1.4)))
    same = result(Comparison(Verdict.UNCHANGED, "m::test_x", 1.3, 1.29, ratio=1.005, ratio_ci=(0.99, 1.02),
                             ab=ABEvidence("the baselines' commit (abc1234)")))
    final = replicates.with_ab_confirmation(stored, same, "the baselines' commit (abc1234)")
    c = final.comparison
    assert c.verdict is Verdict.UNCHANGED and not failure_messages(final)
    assert c.ab_confirmation.startswith("the stored baseline said regressed 1.300x; not confirmed by A/B")
    assert final.peak_memory_bytes == 5 and final.process_medians_ms == (1.3, 1.3)
    kept = replicates.with_ab_confirmation(stored, None, "abc1234", "the commit is not in this repository")
    assert kept.comparison.verdict is Verdict.REGRESSED and failure_messages(kept)
    assert "not confirmed by A/B against abc1234: the commit is not in this repository; the stored verdict stands" \
        in comparison_message(kept.comparison)
    json.dumps(result_entry(final, environment={}, git_commit=None, timestamp_utc="", with_comparison=True))
    # an inconclusive stored comparison is measured by A/B too (issue 45), which settles it, or not
    unsure = result(Comparison(Verdict.INCONCLUSIVE, "m::test_x", 1.3, 1.2, ratio=1.08, ratio_ci=(0.8, 1.5)))
    assert replicates.measured_by_ab(unsure) and replicates.measured_by_ab(stored)
    assert not replicates.measured_by_ab(same) and not replicates.measured_by_ab("no result")
    settled = replicates.with_ab_confirmation(unsure, same, "the baselines' commit (abc1234)").comparison
    assert settled.verdict is Verdict.UNCHANGED
    assert settled.ab_confirmation.startswith("the stored baseline said inconclusive 1.080x; settled by A/B against "
                                              "the baseline's commit on this machine: ")
    still = result(Comparison(Verdict.INCONCLUSIVE, "m::test_x", 1.3, 1.2, ratio=1.04, ratio_ci=(0.9, 1.2),
                              ab=ABEvidence("the baselines' commit (abc1234)")))
    assert "; not settled by A/B against" in replicates.with_ab_confirmation(unsure, still, "x").comparison.ab_confirmation
    kept = replicates.with_ab_confirmation(unsure, None, "abc1234", "side A failed")
    assert kept.comparison.ab_confirmation == "not settled by A/B against abc1234: side A failed; the stored verdict stands"


def test_a_benchmark_measured_by_fewer_processes_splits_its_time_over_those() -> None:
    o = BenchOptions(max_time=1.2, processes=2)
    assert replicates.worker_options(o, (0, 3)).max_time == pytest.approx(0.6)
    assert replicates.worker_options(BenchOptions(max_time=1.2, processes=9), (0, 3)).max_time == pytest.approx(0.4)
    from pytest_gpuperf.core.options import OptionError, with_marker

    assert with_marker(BenchOptions(), {"processes": 1}, where="m").processes == 1
    with pytest.raises(OptionError, match="processes=0: expected an integer >= 1"):
        with_marker(BenchOptions(), {"processes": 0}, where="m")


def test_one_process_on_each_side_is_decided_on_the_samples_with_a_note() -> None:
    from pytest_gpuperf.storage.baseline import BaselineEntry
    from pytest_gpuperf.verdict.compare import decide_replicates
    from pytest_gpuperf.verdict.gate import judge_replicates

    base = BaselineEntry.from_samples("m::t", [1.0 + 0.001 * (i % 7) for i in range(50)])
    slower = [[1.3 + 0.001 * (i % 5) for i in range(50)]]
    c = judge_replicates(slower, base, BenchOptions())
    assert c.verdict is Verdict.REGRESSED and "run-to-run spread not measured" in c.note
    with pytest.raises(ValueError, match="two processes"):
        decide_replicates(slower, [1.0])


def test_needs_more_processes_where_the_evidence_is_thin() -> None:
    from pytest_gpuperf.verdict.compare import Verdict

    def result(verdict: Verdict, ci: tuple[float, float] | None, medians=(1.0, 1.0), **options) -> BenchResult:
        c = Comparison(verdict=verdict, benchmark_id="b", current_median_ms=1.0, ratio_ci=ci)
        return BenchResult.from_samples((1.0,) * 4, name="t", device="cpu", rounds=4, calls_per_round=1,
                                        warmup_calls=0, comparison=c, process_medians_ms=medians,
                                        options=BenchOptions(**options))
    # comparing: an inconclusive CI that spans 1 and 1 + threshold gets more; decided ones do not
    assert replicates.needs_more(result(Verdict.INCONCLUSIVE, (0.99, 1.25)), updating=False)
    assert not replicates.needs_more(result(Verdict.INCONCLUSIVE, (1.06, 1.25)), updating=False)
    assert not replicates.needs_more(result(Verdict.REGRESSED, (1.06, 1.25)), updating=False)
    # a stored-stage regression that no A/B confirms is measured again in later processes, once
    assert replicates.needs_more(result(Verdict.REGRESSED, (1.06, 1.25)), updating=False, replicate=True)
    assert replicates.replicate_regression(ab_confirms=False, already_more=False)
    assert not replicates.replicate_regression(ab_confirms=True, already_more=False)
    assert not replicates.replicate_regression(ab_confirms=False, already_more=True)
    assert not replicates.needs_more(result(Verdict.UNCHANGED, (0.98, 1.03)), updating=False)
    assert not replicates.needs_more(result(Verdict.INCONCLUSIVE, (0.99, 1.25), processes=3), updating=False)
    assert not replicates.needs_more("why it has no result", updating=False)
    # updating: while the baseline's 99% CI reaches beyond twice the threshold
    noisy = result(Verdict.NO_BASELINE, None, medians=(1.0, 1.08, 0.93))
    quiet = result(Verdict.NO_BASELINE, None, medians=(1.0, 1.005, 0.997))
    assert replicates.needs_more(noisy, updating=True) and not replicates.needs_more(quiet, updating=True)
    # issue 45: processes in the VM's speed modes, steady on the reference clock: precise enough there
    # (a later comparison that the wall clock leaves inconclusive is decided on it); not the other way round
    steady = noisy.replace(ref_medians=(2.0, 2.01, 1.995))
    assert replicates.baseline_levels(steady) == (2.0, 2.01, 1.995) and not replicates.needs_more(steady, updating=True)
    wobbly = quiet.replace(ref_medians=(2.0, 2.2, 1.8))
    assert replicates.baseline_levels(wobbly) == (1.0, 1.005, 0.997)
    assert replicates.baseline_levels(noisy.replace(ref_medians=(2.0, 2.01))) == (1.0, 1.08, 0.93)  # not one per process


def test_geometric_mean_ci_of_process_medians() -> None:
    from pytest_gpuperf.verdict.stats import geometric_mean_ci

    g, lo, hi = geometric_mean_ci([1.0, 1.1, 0.9, 1.05], alpha=0.01)
    assert lo < g < hi and g == pytest.approx((1.0 * 1.1 * 0.9 * 1.05) ** 0.25)
    assert geometric_mean_ci([1.0]) is None
    with pytest.raises(ValueError):
        geometric_mean_ci([1.0, 0.0])


def _coordinator_with_a_worker(tmp_path: Path, body: str) -> tuple[Any, int]:
    """A "coordinator" process running ``body`` (Python, with ``subprocess``, ``sys``, ``time`` and
    ``PID_FILE`` in scope), which starts a worker that sleeps 60 s and writes its pid there; returns
    the coordinator's Popen and the worker's pid once known."""
    import subprocess
    import sys
    import time

    pid_file = tmp_path / "child.pid"
    coordinator = subprocess.Popen([sys.executable, "-c", f"import subprocess, sys, time\nPID_FILE = {str(pid_file)!r}\n"
                                                          + body])
    for _ in range(200):
        if pid_file.exists() and pid_file.read_text():
            break
        time.sleep(0.05)
    return coordinator, int(pid_file.read_text())


def _assert_gone(pid: int, what: str) -> None:
    """``pid`` stops running within 5 s (else it is killed and the test fails with ``what``)."""
    import os
    import signal
    import time

    def running() -> bool:
        if Path("/proc/self/stat").exists():
            return _alive(pid)  # a zombie left to its parent is not running
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True

    for _ in range(100):
        if not running():
            return
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    raise AssertionError(what)


WORKER = '[sys.executable, "-c", "import time; time.sleep(60)"]'


def test_no_worker_outlives_a_coordinator_stopped_by_sigterm(tmp_path: Path) -> None:
    # a cancelled CI job sends SIGTERM: the worker it was waiting for must go too (issue 31's study
    # found a worker left running after its coordinator was stopped by `timeout`)
    import signal

    coordinator, child = _coordinator_with_a_worker(tmp_path, f"""
from pytest_gpuperf.plugin.replicates import _killed_with_us
child = subprocess.Popen({WORKER})
with _killed_with_us(child):
    open(PID_FILE, "w").write(str(child.pid))  # once the handler is in place: the signal may come at once
    child.wait()
""")
    coordinator.send_signal(signal.SIGTERM)
    assert coordinator.wait(timeout=30) == 128 + signal.SIGTERM
    _assert_gone(child, "the worker outlived its coordinator")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="prctl(PR_SET_PDEATHSIG): Linux")
def test_a_worker_dies_with_its_coordinator_even_when_it_is_killed(tmp_path: Path) -> None:
    # issue 46: a coordinator killed by SIGKILL (no handler runs) left its workers measuring on
    import signal

    coordinator, child = _coordinator_with_a_worker(tmp_path, f"""
from pytest_gpuperf.core.launch import die_with_parent
child = subprocess.Popen({WORKER}, preexec_fn=die_with_parent())
open(PID_FILE, "w").write(str(child.pid))
time.sleep(60)
""")
    coordinator.send_signal(signal.SIGKILL)
    coordinator.wait(timeout=30)
    _assert_gone(child, "the worker outlived its killed coordinator")


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, left to a parent that does not reap it, is not running)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)")
def test_a_stopped_torchrun_launch_gets_sigterm_first_and_leaves_no_rank(tmp_path: Path) -> None:
    # a launch as torch elastic makes it: the agent in a session of its own (as _run_one starts it),
    # its rank in another session (out of reach of a signal to the agent's group). This agent passes
    # SIGTERM on and exits; the rank ignores SIGTERM, so only the SIGKILL after the grace time ends it.
    import os
    import signal
    import subprocess
    import sys
    import time

    from pytest_gpuperf.core.launch import stop as _stop

    rank_pid, termed = tmp_path / "rank.pid", tmp_path / "agent.termed"
    rank = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"
    agent = f"""
import os, signal, subprocess, sys, time
rank = subprocess.Popen([sys.executable, "-c", {rank!r}], start_new_session=True)
def stop(signum, frame):
    open({str(termed)!r}, "w").write("1")
    rank.send_signal(signal.SIGTERM)
    sys.exit(1)
signal.signal(signal.SIGTERM, stop)
open({str(rank_pid)!r}, "w").write(str(rank.pid))
time.sleep(120)
"""
    proc = subprocess.Popen([sys.executable, "-c", agent], start_new_session=True)
    for _ in range(400):
        if rank_pid.exists() and rank_pid.read_text():
            break
        time.sleep(0.05)
    pid = int(rank_pid.read_text())
    time.sleep(0.5)  # the rank has set its SIGTERM handler
    _stop(proc, grace_s=2.0)
    assert termed.exists()  # SIGTERM first: the agent could stop its ranks
    for _ in range(100):
        if not _alive(pid):
            break
        time.sleep(0.05)
    else:
        os.kill(pid, signal.SIGKILL)
        raise AssertionError("a rank outlived its stopped launch")


def test_a_worker_process_is_a_torchrun_launch_with_nproc() -> None:
    import sys

    from pytest_gpuperf.core.launch import launcher

    assert launcher() == launcher(None) == [sys.executable, "-m", "pytest"]
    assert launcher(4) == [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=4",
                           "-m", "pytest"]


def test_launches_merge_each_ranks_median_over_the_launches() -> None:
    from types import SimpleNamespace

    from pytest_gpuperf.plugin.replicates import _merged_ranks
    from pytest_gpuperf.verdict.distributed import RankTiming

    launches = [SimpleNamespace(ranks=RankTiming.of(m)) for m in ([2.0, 3.0], [2.2, 2.9], [1.8, 3.3])]
    merged = _merged_ranks(launches)
    assert list(merged.medians_ms) == [2.0, 3.0]
    assert merged.slowest_rank == 1 and merged.imbalance == pytest.approx(1.5)
    assert _merged_ranks([SimpleNamespace(ranks=None)]) is None  # worker processes, no launches
    assert _merged_ranks([launches[0], SimpleNamespace(ranks=RankTiming.of([1.0, 1.0, 1.0]))]) is None
    from pytest_gpuperf.verdict.distributed import merged_ranks

    assert merged_ranks([]) is None and merged_ranks([RankTiming.of([2.0])]).medians_ms == (2.0,)


def test_the_ini_nproc_is_the_user_sessions_only() -> None:
    """``gpuperf_nproc`` in the ini file: the session the user started gets it; every rank of a
    launch, a replicate or A/B worker reads the same file and ignores it; on the command line under
    torchrun it is a usage error (it would start torchrun inside torchrun)."""
    from types import SimpleNamespace

    from pytest_gpuperf.plugin.settings import _nproc

    def config(cli=None, ini=""):
        return SimpleNamespace(getoption=lambda name, default=None: cli if name == "--gpuperf-nproc" else default,
                               getini=lambda name: ini, option=SimpleNamespace(numprocesses=None, dist="no"))

    ranks = SimpleNamespace(world_size=2)
    assert _nproc(config(ini="2"), None, in_worker=False) == 2
    assert _nproc(config(ini="1"), None, in_worker=False) is None
    assert _nproc(config(ini="2"), ranks, in_worker=False) is None  # a rank of a launch
    assert _nproc(config(ini="2"), None, in_worker=True) is None  # a replicate or A/B worker
    with pytest.raises(pytest.UsageError, match="already runs under torchrun"):
        _nproc(config(cli="2"), ranks, in_worker=False)
    with pytest.raises(pytest.UsageError, match="ini gpuperf_nproc 'x': expected a whole number"):
        _nproc(config(ini="x"), None, in_worker=False)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="prctl(PR_SET_PDEATHSIG): Linux")
def test_a_sigterm_while_a_worker_is_forked_is_delivered_after_not_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    # a preexec_fn makes Popen run Python's at-fork callbacks, where the exception a SIGTERM handler
    # raises is printed and dropped: a cancelled bisect ran on to its end (exit 0 for 143)
    import os
    import signal
    import subprocess
    import sys

    from pytest_gpuperf.core import launch
    from pytest_gpuperf.core.signals import Terminated, raise_terminated

    seen: list[str] = []
    real_popen = subprocess.Popen

    def popen(cmd, **kwargs):  # the signal arrives (at this thread) while the worker is forked
        signal.raise_signal(signal.SIGTERM)
        seen.append("forked")
        return real_popen(cmd, **kwargs)

    previous = signal.signal(signal.SIGTERM, lambda *_: seen.append("SIGTERM"))
    try:
        monkeypatch.setattr(launch.subprocess, "Popen", popen)
        proc = launch.popen_dying_with_parent(
            [sys.executable, "-c", "import signal; print(sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])))"],
            stdout=subprocess.PIPE, text=True)
        assert seen == ["forked", "SIGTERM"]  # held across the fork, delivered as Popen returned
        out, _ = proc.communicate(timeout=60)
        assert int(signal.SIGTERM) not in eval(out) and int(signal.SIGINT) not in eval(out)  # the child's unblocked
        assert signal.SIGTERM not in signal.pthread_sigmask(signal.SIG_BLOCK, [])  # and ours restored

        def dropped(cmd, **kwargs):  # another thread took it; its exception raised in an at-fork callback, dropped
            try:
                raise_terminated(signal.SIGTERM, None)
            except Terminated:
                pass
            return real_popen(cmd, **kwargs)

        monkeypatch.setattr(launch.subprocess, "Popen", dropped)
        with pytest.raises(Terminated):
            launch.popen_dying_with_parent([sys.executable, "-c", "pass"])
    finally:
        signal.signal(signal.SIGTERM, previous)
