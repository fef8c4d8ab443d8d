"""Unit tests of benchmarks under torchrun (issue 35) without torchrun: the pure combining and
straggler logic (pytest_gpuperf.verdict.distributed), torchrun's environment
(pytest_gpuperf.measure.distributed.Ranks), the round loop's lockstep on a fake clock, the JSON
codec's ``ranks``, the straggler in a regression's message, and faults: each collective's wait,
the roll call's reading of ``monitored_barrier``'s error and the message that names the ranks."""

from __future__ import annotations

import pytest

from pytest_gpuperf._testing import ScriptedMeasurer
from pytest_gpuperf.core.options import BenchOptions
from pytest_gpuperf.measure.distributed import DistributedFault, RankEnvironmentError, Ranks
from pytest_gpuperf.verdict.distributed import (RankOutcome, RankTiming, agreed_outcome, collective_budget,
                                                combine_rounds, first_mismatch, missing_ranks_of, rank_timing,
                                                roll_call_text, roll_call_timeout, watchdog_delay)
from pytest_gpuperf.verdict.result import BenchResult


# ----------------------------------------------------------------------------- combining ranks


def test_each_round_costs_what_its_slowest_rank_took() -> None:
    assert combine_rounds([[1.0, 5.0, 2.0], [3.0, 1.0, 2.5]]) == (3.0, 5.0, 2.5)


def test_ranks_with_different_round_counts_are_refused() -> None:
    with pytest.raises(ValueError, match=r"different numbers of rounds \[2, 3\]"):
        combine_rounds([[1.0, 2.0], [1.0, 2.0, 3.0]])
    with pytest.raises(ValueError):
        combine_rounds([])


def test_rank_timing_names_the_slowest_rank_and_the_imbalance() -> None:
    rt = rank_timing([[2.0, 2.2, 1.8], [3.1, 3.0, 3.2], [2.1, 2.3, 2.2]])
    assert rt.medians_ms == (2.0, 3.1, 2.2) and rt.world_size == 3
    assert rt.slowest_rank == 1
    assert rt.imbalance == pytest.approx(3.1 / 2.0)
    s = rt.straggler()
    assert (s.rank, s.median_ms, s.others_ms) == (1, 3.1, pytest.approx(2.1))


def test_balanced_ranks_have_no_straggler() -> None:
    assert RankTiming.of([2.0, 2.05, 2.1]).straggler() is None  # within STRAGGLER_RATIO
    assert RankTiming.of([2.0]).straggler() is None  # one rank
    assert RankTiming.of([2.0, 2.3]).straggler(ratio=1.2) is None


@pytest.mark.parametrize("bad", [[], [0.0, 1.0], [float("nan")], [float("inf"), 1.0]])
def test_rank_timing_refuses_unusable_medians(bad: list[float]) -> None:
    with pytest.raises(ValueError, match="one positive finite median"):
        RankTiming.of(bad)


def test_rank_timing_round_trips_through_its_json_form() -> None:
    rt = RankTiming.of([2.0, 3.0])
    d = rt.to_dict()
    assert d == {"world_size": 2, "medians_ms": [2.0, 3.0], "slowest_rank": 1, "imbalance": 1.5}
    assert RankTiming.from_dict(d) == rt
    assert RankTiming.from_dict(None) is None and RankTiming.from_dict({"medians_ms": "x"}) is None


def test_the_codec_keeps_per_rank_medians() -> None:
    from pytest_gpuperf.storage.codec import decode_result, encode_result

    r = BenchResult.from_samples([3.0, 3.1], name="t", device="cpu", rounds=2, calls_per_round=1, warmup_calls=1,
                                 benchmark_id="t", ranks=RankTiming.of([2.0, 3.05]))
    entry = encode_result(r, environment={}, git_commit=None, timestamp_utc="")
    assert entry["ranks"]["medians_ms"] == [2.0, 3.05] and entry["ranks"]["slowest_rank"] == 1
    assert decode_result(entry).ranks == r.ranks
    plain = BenchResult.from_samples([3.0], name="t", device="cpu", rounds=1, calls_per_round=1, warmup_calls=0)
    assert "ranks" not in encode_result(plain, environment={}, git_commit=None, timestamp_utc="")


def test_a_regression_carried_by_one_rank_names_it() -> None:
    from pytest_gpuperf.reporting.messages import straggler_text, with_straggler

    r = BenchResult.from_samples([3.1], name="t", device="cpu", rounds=1, calls_per_round=1, warmup_calls=0,
                                 ranks=RankTiming.of([2.2, 3.1]))
    assert straggler_text(r.ranks) == "rank 1 is the straggler (median 3.1 ms vs 2.2 ms on the others)"
    assert with_straggler("regressed 1.4x\n  details", r) == (
        "regressed 1.4x: rank 1 is the straggler (median 3.1 ms vs 2.2 ms on the others)\n  details")
    # issue 47: on the line under a first line it would push past 80 characters
    assert with_straggler("t: regressed 1.42x\n  details", r) == (
        "t: regressed 1.42x\n  rank 1 is the straggler (median 3.1 ms vs 2.2 ms on the others)\n  details")
    balanced = r.replace(ranks=RankTiming.of([3.0, 3.1]))
    assert with_straggler("t: regressed 1.42x", balanced) == "t: regressed 1.42x"


# ----------------------------------------------------------------------------- one decision


def test_rank_0_judges_for_every_rank() -> None:
    assert agreed_outcome([RankOutcome("failed", False, "regressed"), RankOutcome("passed")]) == ("failed", "regressed")
    # another rank's own verdict does not count; rank 0's pass stands
    assert agreed_outcome([RankOutcome("passed"), RankOutcome("failed", False, "regressed")]) == ("passed", "")


def test_a_test_that_raised_on_another_rank_fails_everywhere_naming_it() -> None:
    got = agreed_outcome([RankOutcome("passed"), RankOutcome("passed"), RankOutcome("failed", True, "ZeroDivisionError")])
    assert got == ("failed", "rank 2 failed: ZeroDivisionError")
    with pytest.raises(ValueError):
        agreed_outcome([])


def test_a_rank_that_raised_is_named_with_its_exceptions_type_message_and_innermost_frame() -> None:
    # issue 46: "naming the rank and quoting its exception's type, message and innermost frame",
    # rank 0 included (its raise was everyone's failure without naming it)
    from pytest_gpuperf.verdict.distributed import agreed_phase, exception_line

    line = exception_line("ZeroDivisionError", "rank 0's own error\nmore", "test_d.py", 12, "test_x")
    assert line == "ZeroDivisionError: rank 0's own error (at test_d.py:12 in test_x)"
    assert exception_line("KeyError", "", "t.py", 3, "f") == "KeyError (at t.py:3 in f)"
    raised = RankOutcome("failed", True, "tail", line)
    assert agreed_outcome([raised, RankOutcome("passed")]) == ("failed", f"rank 0 raised {line}\ntail")
    assert agreed_outcome([RankOutcome("passed"), raised]) == ("failed", f"rank 1 raised {line}\ntail")
    assert agreed_outcome([RankOutcome("failed", False, "regressed"), raised]) == ("failed", "regressed")  # a verdict
    assert agreed_phase([RankOutcome("passed"), raised]) == ("failed", f"rank 1 raised {line}\ntail")


def test_first_mismatch_names_the_position_the_rank_and_both_tests() -> None:
    assert first_mismatch([["a", "b"], ["a", "b"]]) is None
    assert first_mismatch([["a", "b", "c"], ["a", "b", "c"], ["a", "c"]]) == (1, 2, "b", "c")
    assert first_mismatch([["a", "b"], ["a"]]) == (1, 1, "b", None)
    assert first_mismatch([["a"], ["a", "x"]]) == (1, 1, None, "x")


# ----------------------------------------------------------------------------- torchrun's environment


TORCHRUN = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}


def test_ranks_read_torchruns_environment() -> None:
    r = Ranks.from_environment(TORCHRUN)
    assert (r.rank, r.world_size, r.local_rank, r.local_world_size) == (1, 2, 1, 2)
    assert r.master == "127.0.0.1:29500" and not r.is_writer
    assert Ranks.from_environment({**TORCHRUN, "RANK": "0"}).is_writer


@pytest.mark.parametrize("env", [{}, {"WORLD_SIZE": ""}, {"WORLD_SIZE": "1", "RANK": "0"}])
def test_no_ranks_outside_torchrun_or_with_one_rank(env: dict[str, str]) -> None:
    assert Ranks.from_environment(env) is None


@pytest.mark.parametrize("env, match", [
    ({"WORLD_SIZE": "2"}, "RANK is not set while WORLD_SIZE='2'"),
    ({**TORCHRUN, "RANK": "two"}, "RANK='two': expected a whole number"),
    ({**TORCHRUN, "RANK": "2"}, "RANK=2 with WORLD_SIZE=2: expected a rank from 0 to 1"),
])
def test_unusable_torchrun_variables_are_named(env: dict[str, str], match: str) -> None:
    with pytest.raises(RankEnvironmentError, match=match):
        Ranks.from_environment(env)


# ----------------------------------------------------------------------------- the round loop in step


class Rank0Says:
    """A lockstep that answers as rank 0 would: warm up ``warmup`` calls, then ``choose`` gives
    ``numbers`` in order (calls per round, then how often to ask), and the round loop stops at the
    ``stop_at``-th question; what this rank decided itself is recorded and ignored."""

    def __init__(self, warmup: int, numbers: list[int], stop_at: int) -> None:
        self.warmup, self.numbers, self.stop_at = warmup, list(numbers), stop_at
        self.warmup_questions = self.round_questions = 0

    def decide(self, local: bool) -> bool:
        if self.numbers:  # still warming up (the numbers come after the warmup)
            self.warmup_questions += 1
            return self.warmup_questions > self.warmup
        self.round_questions += 1
        return self.round_questions >= self.stop_at

    def choose(self, local: int) -> int:
        return self.numbers.pop(0)


def test_a_rank_makes_rank_0s_warmup_calls_calls_per_round_and_rounds() -> None:
    lock = Rank0Says(warmup=4, numbers=[3, 2], stop_at=3)  # 3 calls per round, ask every 2 rounds
    m = ScriptedMeasurer(1.0)
    t = m.measure(lambda: None, (), {}, options=BenchOptions(max_time=10.0, min_rounds=2), device="cpu",
                  lockstep=lock)
    # asked at 2, 4 and 6 rounds (min_rounds, then every 2): stops at the third
    assert (t.rounds, t.calls_per_round, t.warmup_calls) == (6, 3, 4)
    assert lock.round_questions == 3
    assert m.calls == 4 + 6 * 3
    assert len(t.samples_ms) == 6 and all(s == pytest.approx(1.0) for s in t.samples_ms)


def test_under_a_lockstep_the_round_count_rules_need_no_question() -> None:
    lock = Rank0Says(warmup=1, numbers=[1, 1], stop_at=10 ** 6)  # rank 0 never says stop
    t = ScriptedMeasurer(1.0).measure(lambda: None, (), {}, options=BenchOptions(max_time=10.0, min_rounds=2,
                                      max_rounds=5), device="cpu", lockstep=lock)
    assert t.rounds == 5 and lock.round_questions == 3  # asked at 2, 3, 4; 5 = max_rounds on every rank
    fixed = Rank0Says(warmup=0, numbers=[1, 1], stop_at=10 ** 6)
    t = ScriptedMeasurer(1.0).measure(lambda: None, (), {}, options=BenchOptions(), device="cpu", rounds=4,
                                      warmup_calls=1, lockstep=fixed)
    assert t.rounds == 4 and fixed.round_questions == 0 and fixed.warmup_questions == 0


def test_without_a_lockstep_the_loop_decides_alone() -> None:
    m = ScriptedMeasurer(1.0)
    t = m.measure(lambda: None, (), {}, options=BenchOptions(max_time=0.02, min_rounds=3, target_precision=0.0),
                  device="cpu")
    assert t.rounds >= 3 and t.rounds != 7


class Recording:
    """A lockstep that passes this rank's own decisions through and records every question
    (what a rank 0 does): the CUDA loops must ask the same questions in the same order on every rank."""

    def __init__(self) -> None:
        self.questions: list[tuple[str, object]] = []

    def decide(self, local: bool) -> bool:
        self.questions.append(("decide", local))
        return local

    def choose(self, local: int) -> int:
        self.questions.append(("choose", local))
        return local


@pytest.mark.parametrize("cuda_graph", [False, True])
def test_the_cuda_loops_ask_rank_0_for_warmup_calls_per_round_and_blocks(monkeypatch: pytest.MonkeyPatch,
                                                                         cuda_graph: bool) -> None:
    import torch

    from pytest_gpuperf.measure import timing
    from pytest_gpuperf.testing import SimulatedCuda

    sim = SimulatedCuda(devices=2).install(monkeypatch)
    lock = Recording()
    t = timing.Measurer(clock=sim.clock).measure(lambda: sim.kernel(ms=1.0), (), {}, device=torch.device("cuda", 1),
                                                 options=BenchOptions(max_time=0.2, cuda_graph=cuda_graph),
                                                 lockstep=lock)
    kinds = [k for k, _ in lock.questions]
    assert kinds.count("choose") >= 2 and "decide" in kinds  # warmup chunk, calls per round (and blocks)
    assert [v for k, v in lock.questions if k == "decide"][-1] is True  # the last question stopped the rounds
    assert t.rounds >= 1 and all(s == pytest.approx(1.0, rel=0.05) for s in t.samples_ms)


# ----------------------------------------------------------------------------- faults: waits and the roll call


@pytest.mark.parametrize("warmup, max_time, rank_timeout, budget", [
    (0.025, 1.0, 300.0, 30.0),  # the defaults: the 30 s floor
    (2.0, 10.0, 300.0, 48.0),  # 4 x (2 + 10)
    (5.0, 100.0, 300.0, 300.0),  # 4 x 105 = 420: never more than the rank timeout
    (0.0, 0.05, 5.0, 5.0),  # a rank timeout below the floor bounds everything
])
def test_a_benchmarks_collectives_wait_four_times_its_time_at_least_30_s_at_most_the_rank_timeout(
        warmup: float, max_time: float, rank_timeout: float, budget: float) -> None:
    assert collective_budget(warmup, max_time, rank_timeout) == pytest.approx(budget)


@pytest.mark.parametrize("args", [(-1.0, 1.0, 300.0), (0.0, 1.0, 0.0), (0.0, float("nan"), 300.0)])
def test_the_budget_refuses_unusable_times(args: tuple[float, float, float]) -> None:
    with pytest.raises(ValueError, match="expected times >= 0 s and a rank timeout > 0 s"):
        collective_budget(*args)


def test_the_roll_call_waits_10_s_or_the_rank_timeout_and_the_watchdog_fires_inside_it() -> None:
    assert roll_call_timeout(300.0) == 10.0 and roll_call_timeout(5.0) == 5.0
    # after the collective's own wait (a rank that only waits fails first), before the roll call ends
    assert watchdog_delay(30.0, 300.0) == 35.0 and watchdog_delay(5.0, 5.0) == 7.5


@pytest.mark.parametrize("text, ranks", [
    ("[Rank 0]: Ranks 2 failed to pass monitoredBarrier in 5000 ms", (2,)),  # torch 2.13, wait_all_ranks=True
    ("[Rank 0]: Ranks 1, 3, 12 failed to pass monitoredBarrier in 10000 ms", (1, 3, 12)),
    ("[Rank 0]: Rank 1 failed to pass monitoredBarrier in 2000 ms\n Original exception: \n[gloo/transport/tcp/"
     "pair.cc:598] Connection closed by peer [::1]:8594", (1,)),  # wait_all_ranks=False
    ("[Rank 0]: Rank 2 failed to pass monitoredBarrier in 5000 ms\n[Rank 0]: Rank 4 failed to pass monitoredBarrier "
     "in 5000 ms\n[Rank 0]: Ranks 2, 4 failed to pass monitoredBarrier in 5000 ms", (2, 4)),  # the log lines too
    ("Rank 1 successfully reached monitoredBarrier, but received errors while waiting for send/recv from rank 0", None),
    ("[../gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:925", None),
    ("", None),
])
def test_the_ranks_that_missed_the_roll_call_are_read_from_monitored_barriers_error(
        text: str, ranks: tuple[int, ...] | None) -> None:
    assert missing_ranks_of(text) == ranks


def test_the_failure_message_names_the_ranks_that_did_not_answer_and_where_to_look() -> None:
    assert roll_call_text((2,), 5.0) == ("rank 2 did not answer within 5 s (crashed, hung, or still running): if it "
                                         "hung, its traceback (faulthandler) is in its output")
    assert roll_call_text((2, 5), 30.0).startswith("ranks 2, 5 did not answer within 30 s (crashed, hung, or still "
                                                   "running): if they hung, their tracebacks (faulthandler)")
    assert roll_call_text((1,), None).startswith("rank 1 did not answer (crashed")  # the group's own wait: unknown
    assert roll_call_text((), 30.0).startswith("every rank answered the roll call afterwards: one was late within 30 s")
    assert roll_call_text(None, 5.0, text="RuntimeError: boom\nmore") == "the roll call of the ranks failed: " \
                                                                          "RuntimeError: boom"
    assert roll_call_text(None, 5.0, caller_answered=False, roll_call_s=20.0).startswith(
        "rank 0, which calls the roll of the ranks, sent no answer within 20 s: rank 0 crashed or hung")


def test_when_a_rank_raised_the_fault_is_headed_by_its_exception_and_no_rank_is_called_late() -> None:
    # issue 46: rank 1 raised in a collective-free function; rank 0's headline was "one was late
    # within 5 s, not gone", rank 1's exception quoted only below it
    from pytest_gpuperf.verdict.distributed import fault_text

    roll = roll_call_text((), 5.0, watchdog_dir="/tmp/w", raised=(1,))
    assert roll == "every rank answered the roll call afterwards: rank 1 raised, none was gone"
    assert "late" not in roll
    assert roll_call_text((), 5.0, watchdog_dir="/tmp/w").startswith(  # no note: nobody raised on this node
        "every rank answered the roll call afterwards: one was late within 5 s, not gone")
    assert roll_call_text((), 5.0).startswith(  # ranks on several nodes: a raise there is not known here
        "every rank answered the roll call afterwards: one was late within 5 s or raised (its own failure says which)")
    mine = "ZeroDivisionError: rank 1's own error (at test_d.py:10 in raise_on_rank_1)"
    text = fault_text(0, 2, "broadcast", "RuntimeError: timed out", roll, {1: mine})
    assert text == (f"rank 1 raised {mine}; so rank 0 of 2: broadcast failed: RuntimeError: timed out; {roll}")
    # a rank whose own exception is the collective that failed in torch.distributed comes after the fault
    waited = "RuntimeError: Timed out (at /venv/lib/torch/distributed/distributed_c10d.py:3252 in all_reduce)"
    assert fault_text(1, 2, "all_gather_object", "E: x", roll, {0: waited, 1: mine}).startswith(
        f"rank 1 raised {mine}; rank 0 raised {waited}; so rank 1 of 2: all_gather_object failed: E: x")
    assert fault_text(0, 2, "broadcast", "E: x", "R", {}) == ("rank 0 of 2: broadcast failed, a rank crashed or "
                                                              "hung: E: x; R")


def test_a_failed_collective_after_a_raise_names_that_rank_and_a_settled_raise_is_forgotten(tmp_path) -> None:
    from pytest_gpuperf.measure.distributed import note_raised, raised_notes

    folder = str(tmp_path)
    mine = "ZeroDivisionError: rank 1's own error (at test_d.py:10 in raise_on_rank_1)"
    note_raised(folder, 1, "test_d.py::test_x: <its traceback>", mine)
    r = Timeouts(missing=(), watchdog_dir=folder)

    def closed() -> None:
        raise RuntimeError("Connection closed by peer")

    with pytest.raises(DistributedFault) as fault:
        r._collective("broadcast", closed)
    assert str(fault.value).startswith(f"rank 1 raised {mine}; so rank 0 of 3: broadcast failed: RuntimeError: "
                                       f"Connection closed by peer; every rank answered the roll call afterwards")
    assert str(fault.value).endswith("\nrank 1's test raised:\ntest_d.py::test_x: <its traceback>")
    assert r.broken is not None and r.broken.startswith(f"rank 1 raised {mine}")  # the later tests' reason
    note_raised(folder, 1, "")  # the ranks agreed on that test: no later fault quotes it
    assert raised_notes(folder) == {} and not list(tmp_path.iterdir())


def test_the_innermost_frame_of_a_raised_exception_is_read_relative_to_the_rootdir(tmp_path) -> None:
    from pathlib import Path

    from pytest_gpuperf.plugin.distributed import raised_summary

    def inner() -> None:
        raise ValueError("rank 1's own error\nsecond line")

    with pytest.raises(ValueError) as info:
        inner()
    here = Path(__file__)
    line = inner.__code__.co_firstlineno + 1
    assert raised_summary(info, here.parent) == f"ValueError: rank 1's own error (at {here.name}:{line} in inner)"
    assert raised_summary(info, tmp_path).endswith(f"(at {here}:{line} in inner)")  # outside the rootdir: absolute
    assert raised_summary(None, tmp_path) == ""


def test_a_hung_ranks_traceback_is_quoted_from_its_file_on_one_node(tmp_path) -> None:
    """All ranks on one node: the failure message points at the hung rank's file and quotes the
    start of its last faulthandler dump (innermost frames first); nothing when it wrote none."""
    from pytest_gpuperf.verdict.distributed import hung_rank_tracebacks, last_dump, watchdog_path

    folder = str(tmp_path)
    assert roll_call_text((2,), 5.0, watchdog_dir=folder).endswith(
        f"if it hung, its traceback (faulthandler) is in {folder}/rank2.txt")
    assert roll_call_text((1, 2), 5.0, watchdog_dir=folder).endswith(f"are in {folder}/rank<rank>.txt")
    frames = "".join(f'  File "t.py", line {i} in f{i}\n' for i in range(30))
    text = ("Timeout (0:00:01)!\nThread 0x1 (most recent call first):\n  File \"old.py\", line 1 in g\n"
            f"Timeout (0:00:07.500000)!\nThread 0x2 (most recent call first):\n{frames}")
    dump = last_dump(text)
    assert dump.startswith("Timeout (0:00:07.500000)!\nThread 0x2") and "old.py" not in dump
    assert dump.splitlines()[-1] == "... (12 more lines)" and len(dump.splitlines()) == 21
    assert last_dump("rank 2 was fine\n") == ""
    quoted = hung_rank_tracebacks({2: dump, 3: ""})
    assert quoted.startswith("\nrank 2's traceback (faulthandler, ") and "\n      File \"t.py\", line 0 in f0" in quoted
    assert "rank 3" not in quoted and hung_rank_tracebacks({}) == ""
    assert watchdog_path(folder + "/", 4) == f"{folder}/rank4.txt"


def test_the_watchdog_folder_is_per_launch_and_only_on_one_node(tmp_path) -> None:
    """One folder per launch (run id, master port, restart), shared by its ranks; None on several
    nodes or outside torch elastic; a rank's empty file and the empty folder go at the end."""
    import os

    from pytest_gpuperf.plugin.distributed import _close_watchdog_file, watchdog_folder

    env = {"TORCHELASTIC_RUN_ID": "none", "MASTER_PORT": "29500", "TORCHELASTIC_RESTART_COUNT": "0"}
    one_node = Ranks(rank=1, world_size=2, local_rank=1, local_world_size=2)
    folder = watchdog_folder(one_node, env)
    assert folder is not None and folder.endswith("gpuperf-watchdog-none-29500-0")
    assert watchdog_folder(one_node, dict(env, MASTER_PORT="29501")) != folder  # another launch beside it
    assert watchdog_folder(Ranks(rank=1, world_size=4, local_rank=1, local_world_size=2), env) is None
    assert watchdog_folder(one_node, {}) is None
    assert "/" not in os.path.basename(watchdog_folder(one_node, dict(env, TORCHELASTIC_RUN_ID="../x")))
    d = tmp_path / "w"
    d.mkdir()
    quiet, hung = Ranks(rank=0, world_size=2, watchdog_dir=str(d)), Ranks(rank=1, world_size=2, watchdog_dir=str(d))
    fd0 = os.open(d / "rank0.txt", os.O_WRONLY | os.O_CREAT)
    fd1 = os.open(d / "rank1.txt", os.O_WRONLY | os.O_CREAT)
    os.write(fd1, b"Timeout (0:00:07)!\n")
    _close_watchdog_file(fd0, quiet)
    _close_watchdog_file(fd1, hung)
    assert sorted(p.name for p in d.iterdir()) == ["rank1.txt"]  # the traceback stays, where the message says


def test_stale_watchdog_folders_are_swept_and_a_rank_s_raised_note_is_quoted_by_the_others(tmp_path) -> None:
    """Issue 46: a killed launch's ``gpuperf-watchdog-*`` folder stayed in the temp dir; one untouched
    for a day is swept (never the current launch's, nor a recent one). A rank whose test raised
    leaves its failure in the launch's folder, the other ranks quote it, and it goes at the end."""
    import os

    from pytest_gpuperf.measure.distributed import note_raised, raised_elsewhere
    from pytest_gpuperf.plugin.distributed import STALE_WATCHDOG_S, _close_watchdog_file, sweep_stale_watchdogs

    old, recent, current = (tmp_path / f"gpuperf-watchdog-none-{p}-0" for p in (1, 2, 3))
    for d in (old, recent, current):
        d.mkdir()
        (d / "rank1.txt").write_text("Timeout (0:00:07)!\n")
    other = tmp_path / "someone-else"
    other.mkdir()
    now = os.stat(recent / "rank1.txt").st_mtime + 60
    for path in (old, old / "rank1.txt", current, current / "rank1.txt", other):
        os.utime(path, (now - 2 * STALE_WATCHDOG_S, now - 2 * STALE_WATCHDOG_S))
    assert sweep_stale_watchdogs(str(tmp_path), keep=str(current), now=now) == [str(old)]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([recent.name, current.name, other.name])

    note_raised(str(recent), 1, "test_d.py::test_x: ValueError: rank 1's own error")
    assert raised_elsewhere(str(recent), 0) == "\nrank 1's test raised:\ntest_d.py::test_x: ValueError: rank 1's own error"
    assert raised_elsewhere(str(recent), 1) == "" and raised_elsewhere(None, 0) == ""
    fd = os.open(recent / "rank0.txt", os.O_WRONLY | os.O_CREAT)
    _close_watchdog_file(fd, Ranks(rank=1, world_size=2, watchdog_dir=str(recent)))
    assert not (recent / "rank1-raised.txt").exists()


class Timeouts(Ranks):
    """A :class:`Ranks` whose process group is a list of the timeouts it was given (s), a managed
    gloo group with its own timeout ``resting``; the roll call answers ``missing``."""

    def __init__(self, resting: float | None = 600.0, missing: tuple[int, ...] = (2,), **kw) -> None:
        super().__init__(rank=0, world_size=3, rank_timeout_s=60.0, **kw)
        self._resting_s = self._wait_s = resting
        self.set: list[float] = []
        self.missing = missing

    def _set_wait(self, seconds: float | None) -> None:
        if self._resting_s is not None and seconds is not None and seconds != self._wait_s:
            self.set.append(seconds)
            self._wait_s = seconds

    def _roll_call(self, waited_s: float | None) -> str:
        return roll_call_text(self.missing, waited_s)


def test_a_benchmarks_first_collective_waits_the_rank_timeout_the_later_ones_its_budget() -> None:
    r = Timeouts()
    r._collective("all_gather_object", lambda: None)  # the session's: the rank timeout, then the group's own again
    assert r.set == [60.0, 600.0]
    r.begin_benchmark(30.0)
    for _ in range(3):
        r._collective("broadcast", lambda: None)
    assert r.set == [60.0, 600.0, 60.0, 30.0]  # the first waited 60 s; from then on 30 s, set once
    r.end_benchmark()
    assert r.set[-1] == 600.0 and r._wait_now() == 60.0
    r.end_benchmark()  # idempotent
    assert r.set[-1] == 600.0 and len(r.set) == 5


def test_a_group_whose_timeout_is_not_managed_keeps_its_own() -> None:
    r = Timeouts(resting=None)
    r.begin_benchmark(30.0)
    r._collective("broadcast", lambda: None)
    r._collective("broadcast", lambda: None)
    assert r.set == [] and r._wait_now() is None  # the suite's own nccl group, say: its own timeout
    r.owns_group = True
    assert r._wait_now() == 60.0  # the plugin made it with the rank timeout


def test_a_failed_collective_names_the_missing_ranks_and_every_later_one_fails_at_once() -> None:
    r = Timeouts()
    r.begin_benchmark(30.0)
    r._collective("broadcast", lambda: None)

    def timed_out() -> None:
        raise RuntimeError("[gloo/transport/tcp/unbound_buffer.cc:129] Timed out waiting 30000ms for send operation\nx")

    with pytest.raises(DistributedFault) as fault:
        r._collective("broadcast", timed_out)
    assert str(fault.value) == (
        "rank 0 of 3: broadcast failed, a rank crashed or hung: RuntimeError: [gloo/transport/tcp/unbound_buffer.cc"
        ":129] Timed out waiting 30000ms for send operation; rank 2 did not answer within 30 s (crashed, hung, or "
        "still running): if it hung, its traceback (faulthandler) is in its output")
    ran = []
    with pytest.raises(DistributedFault, match="not measured in step: an earlier collective failed: rank 0 of 3"):
        r._collective("all_gather_object", lambda: ran.append(1))
    assert ran == []  # no second wait


def test_the_watchdog_is_armed_at_the_collectives_of_a_benchmark_only(monkeypatch: pytest.MonkeyPatch) -> None:
    import faulthandler

    from pytest_gpuperf.measure import distributed

    armed: list[float] = []
    now = [100.0]
    monkeypatch.setattr(faulthandler, "dump_traceback_later", lambda t, exit, file: armed.append(t))
    monkeypatch.setattr(faulthandler, "cancel_dump_traceback_later", lambda: armed.append(0.0))
    monkeypatch.setattr(distributed.time, "monotonic", lambda: now[0])
    r = Timeouts(watchdog_file=2)
    r._collective("all_gather_object", lambda: None)
    assert armed == []  # outside a benchmark: none
    r.begin_benchmark(30.0)
    assert armed == [65.0]  # the first collective's wait (60 s) + half the roll call's (10 s)
    r._collective("broadcast", lambda: None)  # the same wait, at once: no second arming
    r._collective("broadcast", lambda: None)  # in step: the budget's
    r._collective("broadcast", lambda: None)
    assert armed == [65.0, 35.0]
    now[0] += 1.0  # re-armed at most once a second
    r._collective("broadcast", lambda: None)
    assert armed == [65.0, 35.0, 35.0]
    r.end_benchmark()
    assert armed[-1] == 0.0  # cancelled


def test_the_watchdog_is_armed_for_each_phase_outside_a_benchmark(monkeypatch: pytest.MonkeyPatch) -> None:
    # issue 46: a rank that hung in a fixture wrote no traceback, while the others' failure said it was in its file
    import faulthandler

    from pytest_gpuperf.measure.distributed import watch_phase

    armed: list[float] = []
    monkeypatch.setattr(faulthandler, "dump_traceback_later", lambda t, exit, file: armed.append(t))
    monkeypatch.setattr(faulthandler, "cancel_dump_traceback_later", lambda: armed.append(0.0))
    r = Timeouts(watchdog_file=2)
    watch_phase(r, True)  # a setup starts: the others wait the rank timeout (60 s) for its outcome
    assert armed == [65.0]
    watch_phase(r, False)  # the ranks agreed on it
    assert armed == [65.0, 0.0]
    r.begin_benchmark(30.0)
    watch_phase(r, True)  # inside a benchmark: its own arming stands
    assert armed == [65.0, 0.0, 65.0]
    r.end_benchmark()
    r.broken = "an earlier collective failed"
    watch_phase(r, True)
    assert armed == [65.0, 0.0, 65.0, 0.0]  # broken: nothing armed
    r.broken, r.watchdog_file = None, None
    watch_phase(r, True)
    assert armed == [65.0, 0.0, 65.0, 0.0]  # no watchdog (pytest's faulthandler_timeout is set)


class Options:
    """What ``_ranks`` reads of a pytest config: the command line ``cli`` and the ini ``ini``."""

    def __init__(self, cli: dict[str, str] | None = None, ini: dict[str, str] | None = None) -> None:
        self.cli, self.ini = cli or {}, ini or {}
        self.option = type("option", (), {"numprocesses": None, "dist": "no"})()

    def getoption(self, name: str, default: object = None) -> object:
        return self.cli.get(name, default)

    def getini(self, name: str) -> str:
        return self.ini.get(name, "")


@pytest.mark.parametrize("value", ["0", "-1", "soon", "inf", "nan"])
def test_the_rank_timeout_is_checked_in_every_session(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    from pytest_gpuperf.plugin.settings import _ranks

    monkeypatch.delenv("WORLD_SIZE", raising=False)  # not under torchrun: checked all the same
    with pytest.raises(pytest.UsageError, match=f"--gpuperf-rank-timeout {value}: expected a finite number of seconds > 0"):
        _ranks(Options(cli={"--gpuperf-rank-timeout": value}))
    with pytest.raises(pytest.UsageError, match=f"ini gpuperf_rank_timeout {value}: expected a finite number of seconds > 0"):
        _ranks(Options(ini={"gpuperf_rank_timeout": value}))


def test_the_rank_timeout_comes_from_the_command_line_else_the_ini_else_300_s(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_gpuperf.plugin.settings import _ranks

    for name, value in TORCHRUN.items():
        monkeypatch.setenv(name, value)
    assert _ranks(Options()).rank_timeout_s == 300.0
    assert _ranks(Options(ini={"gpuperf_rank_timeout": "45"})).rank_timeout_s == 45.0
    assert _ranks(Options(cli={"--gpuperf-rank-timeout": "5"}, ini={"gpuperf_rank_timeout": "45"})).rank_timeout_s == 5.0


class _Decides:
    """Ranks whose ``decide`` answers rank 0's scripted ``answer`` and records what it was given."""

    def __init__(self, answer: bool) -> None:
        self.answer, self.asked = answer, []

    def decide(self, local: bool) -> bool:
        self.asked.append(local)
        return self.answer


def _gate(regressed_first: bool):
    """A gate (``judged(remeasure)``): it re-measures once when its first look says regressed, and
    returns what it saw."""
    def judged(remeasure):
        if regressed_first and remeasure is not None:
            return ("confirmed on", remeasure())
        return ("decided without a re-measure", None)
    return judged


def test_under_torchrun_every_rank_re_measures_in_step_when_rank_0_asks() -> None:
    """The confirmation re-measure is collectives on every rank: each rank judges first without
    it, rank 0's answer goes to all (one decide), and then all re-measure (``confirm`` times) or
    none does, whatever their own first look said."""
    from pytest_gpuperf.plugin.measuring import _judged_in_step

    measured: list = []
    again = lambda: measured.append(f"in step {len(measured)}")  # noqa: E731
    ranks = _Decides(True)  # rank 0 saw a regression; this rank did not: it re-measures all the same
    assert _judged_in_step(_gate(False), ranks, 2, again, measured) == ("decided without a re-measure", None)
    assert ranks.asked == [False] and measured == ["in step 0", "in step 1"]
    measured.clear()
    ranks = _Decides(True)
    assert _judged_in_step(_gate(True), ranks, 1, again, measured) == ("confirmed on", "in step 0")
    assert ranks.asked == [True] and measured == ["in step 0"]
    measured.clear()
    ranks = _Decides(False)  # rank 0 saw none: no rank re-measures, this one judges without
    assert _judged_in_step(_gate(True), ranks, 1, again, measured) == ("decided without a re-measure", None)
    assert ranks.asked == [True] and measured == []
    ranks = _Decides(True)  # an update run (confirm 0): no question, no re-measure
    assert _judged_in_step(_gate(True), ranks, 0, again, measured) == ("decided without a re-measure", None)
    assert ranks.asked == [] and measured == []


def test_a_setup_or_teardown_that_failed_or_skipped_on_one_rank_does_so_on_every_rank():
    # issue 46: a fixture that raised on rank 1 left rank 0 running the call alone, waiting in its
    # benchmark's collectives; now no rank judges setup or teardown: a fault anywhere fails it everywhere
    from pytest_gpuperf.verdict.distributed import RankOutcome, agreed_phase

    ok = RankOutcome("passed")
    assert agreed_phase([ok, ok]) == ("passed", "")
    assert agreed_phase([ok, RankOutcome("failed", True, "KeyError: x")]) == ("failed", "rank 1 failed: KeyError: x")
    assert agreed_phase([RankOutcome("skipped", False, "no device"), ok])[0] == "skipped"
    # a failure wins over a skip, whichever rank has it
    assert agreed_phase([RankOutcome("skipped", False, "s"), RankOutcome("failed", True, "f")]) == ("failed", "rank 1 failed: f")
    with pytest.raises(ValueError):
        agreed_phase([])


def test_under_torchrun_one_stored_run_fails_only_a_regression_a_rank_carries():
    # issue 45: against one recorded run, A/A torchrun sessions read a bare all-reduce 1.57x-2.80x
    # (4 false failures in 40 benchmark-runs, nothing else running); a straggler, a contrast inside
    # one session, still fails
    import dataclasses

    from pytest_gpuperf.verdict.advice import Advice
    from pytest_gpuperf.verdict.compare import Comparison, Verdict
    from pytest_gpuperf.verdict.distributed import RankTiming, one_stored_run

    c = Comparison(verdict=Verdict.REGRESSED, benchmark_id="t.py::test_x", current_median_ms=2.0,
                   baseline_median_ms=1.0, ratio=2.0, ratio_ci=(1.9, 2.1))
    balanced, straggling = RankTiming.of([2.0, 2.02]), RankTiming.of([1.0, 2.0])
    uniform = one_stored_run(c, 1, balanced, RankTiming.of([1.0, 1.01]))
    assert uniform.verdict is Verdict.INCONCLUSIVE and Advice.STRICT in uniform.advice
    assert "one stored run under torchrun" in uniform.note and "2 more update runs" in uniform.note
    assert one_stored_run(c, 1, straggling, RankTiming.of([1.0, 1.01])) is c  # rank 1 carries it: fails
    assert one_stored_run(c, 1, straggling, None) is c
    assert one_stored_run(c, 1, straggling, RankTiming.of([1.0, 2.0])).verdict is Verdict.INCONCLUSIVE  # as before
    # ranks 1.22x apart in an A/A session of a matmul, and a 10 µs sum's 1.45x (its CPU time too, in
    # its re-measure as well): within what A/A sessions showed, not a rank that carries a slowdown
    assert one_stored_run(c, 1, RankTiming.of([1.0, 1.22]), RankTiming.of([1.0, 1.0])).verdict is Verdict.INCONCLUSIVE
    assert one_stored_run(c, 1, RankTiming.of([0.0109, 0.0075]), RankTiming.of([0.0074, 0.0074]),
                          remeasured=(RankTiming.of([0.0108, 0.0075]),)).verdict is Verdict.INCONCLUSIVE
    # a "straggler" whose other ranks moved with it: the whole session shifted (all-reduce, 1.17x apart)
    assert one_stored_run(c, 1, RankTiming.of([1.12, 1.31]), RankTiming.of([0.594, 0.596])).verdict \
        is Verdict.INCONCLUSIVE
    assert one_stored_run(c, 3, balanced, None) is c  # stored runs give the spread between sessions
    unchanged = dataclasses.replace(c, verdict=Verdict.UNCHANGED)
    assert one_stored_run(unchanged, 1, balanced, None) is unchanged
    # a whole session faster than the one recorded run is no more a code change than a slower one
    # (A/A sessions read a 5 µs sum improved in 13 of 20)
    improved = dataclasses.replace(c, verdict=Verdict.IMPROVED, current_median_ms=0.6, ratio=0.6, ratio_ci=(0.55, 0.65))
    faster = one_stored_run(improved, 1, RankTiming.of([0.6, 0.61]), RankTiming.of([1.0, 1.01]))
    assert faster.verdict is Verdict.INCONCLUSIVE and Advice.STRICT in faster.advice
    assert "this session's speed-up is not told from the code's" in faster.note
    assert one_stored_run(improved, 2, balanced, None) is improved
    assert one_stored_run(None, 1, balanced, None) is None


def test_a_rank_slow_in_the_whole_session_is_its_core_and_a_rank_with_twice_the_work_still_fails():
    """Issue 45: in an A/A session of 2 gloo ranks, rank 0 ran 1.29x slower in every benchmark and
    its matmul failed as a straggler (the 1.5x bar withholds that much by itself now: here 1.6x);
    with the session's earlier benchmarks' rank shifts, the same rank's slowness explains it
    (inconclusive, saying so); twice the work on one rank in one benchmark is far beyond its
    session's slowness and fails; one earlier benchmark is not enough."""
    from pytest_gpuperf.verdict.compare import Comparison, Verdict
    from pytest_gpuperf.verdict.distributed import RankTiming, one_stored_run, rank_shifts, session_rank_slowness

    c = Comparison(verdict=Verdict.REGRESSED, benchmark_id="t.py::test_matmul", current_median_ms=1.6,
                   baseline_median_ms=1.0, ratio=1.6, ratio_ci=(1.55, 1.65))
    stored = RankTiming.of([1.0, 1.0])
    slow_rank_0 = RankTiming.of([1.6, 1.0])
    earlier = [rank_shifts(RankTiming.of([0.8, 0.5]), RankTiming.of([0.5, 0.5])),  # the sum: rank 0 1.6x
               rank_shifts(RankTiming.of([3.2, 2.0]), RankTiming.of([2.0, 2.02]))]  # the step: 1.62x
    assert earlier[0] == (1.6, 1.0) and session_rank_slowness(earlier, 0)[1] == 2
    assert one_stored_run(c, 1, slow_rank_0, stored) is c  # without the session: a straggler, fails
    core = one_stored_run(c, 1, slow_rank_0, stored, earlier)
    assert core.verdict is Verdict.INCONCLUSIVE
    assert "rank 0 is the straggler, but it ran 1.61x slower than the other ranks in the 2 earlier" in core.note
    assert one_stored_run(c, 1, slow_rank_0, stored, earlier[:1]) is c  # one earlier benchmark: not enough
    twice = RankTiming.of([1.0, 2.0])  # rank 1 does twice the work in this benchmark only
    assert one_stored_run(c, 1, twice, stored, [(1.0, 1.02), (0.99, 1.0)]) is c
    assert one_stored_run(c, 1, twice, stored, earlier) is c  # rank 0 was the slow one in the session
    assert session_rank_slowness([(1.0,)], 0) is None and rank_shifts(twice, RankTiming.of([1.0, 1.0, 1.0])) is None


def test_the_first_benchmark_reads_the_ranks_core_from_their_session_start_reference():
    """The session's first benchmark has no earlier ones: each rank's session-start reference
    workload, against the baseline's, says whether a straggling rank's core was slow all session."""
    from pytest_gpuperf.verdict.compare import Comparison, Verdict
    from pytest_gpuperf.verdict.distributed import RankTiming, one_stored_run

    c = Comparison(verdict=Verdict.REGRESSED, benchmark_id="t.py::test_matmul", current_median_ms=1.6,
                   baseline_median_ms=1.0, ratio=1.6, ratio_ci=(1.55, 1.65))
    stored = RankTiming.of([1.0, 1.0], [3.0, 3.1])
    slow_core = one_stored_run(c, 1, RankTiming.of([1.6, 1.0], [4.8, 3.1]), stored)
    assert slow_core.verdict is Verdict.INCONCLUSIVE
    assert "its session-start reference workload ran 1.60x slower than the other ranks' too" in slow_core.note
    assert one_stored_run(c, 1, RankTiming.of([1.0, 2.0], [3.0, 3.1]), stored) is c  # twice the work: fails
    assert one_stored_run(c, 1, RankTiming.of([1.6, 1.0], [3.0, 3.1]), stored) is c  # the core was not slow
    assert one_stored_run(c, 1, RankTiming.of([1.6, 1.0]), stored) is c  # no reference this run
    # the JSON form keeps the references; one missing on a rank drops them
    assert RankTiming.from_dict(stored.to_dict()) == stored
    assert RankTiming.of([1.0, 1.0], [3.0, None]).reference_ms is None
    assert "reference_ms" not in RankTiming.of([1.0, 1.0]).to_dict()


def test_a_straggler_that_is_gone_in_the_re_measure_is_a_passing_disturbance():
    """Issue 45, seen in the A/A study: rank 0's matmul ran 1.27x slower for its first measurement
    and at the other rank's speed in the in-step re-measure, and the pooled samples still read
    regressed; a straggler must hold in the re-measure. Twice the work on a rank holds, and fails."""
    from pytest_gpuperf.verdict.compare import Comparison, Verdict
    from pytest_gpuperf.verdict.distributed import RankTiming, one_stored_run

    c = Comparison(verdict=Verdict.REGRESSED, benchmark_id="t.py::test_matmul", current_median_ms=0.056,
                   baseline_median_ms=0.044, ratio=1.26, ratio_ci=(1.005, 1.28))
    stored, first = RankTiming.of([0.044, 0.044]), RankTiming.of([0.0702, 0.0444])  # 1.27x then; 1.58x here
    gone = one_stored_run(c, 1, first, stored, remeasured=(RankTiming.of([0.0445, 0.0444]),))
    assert gone.verdict is Verdict.INCONCLUSIVE
    assert ("rank 0 is the straggler, but it ran at the other ranks' speed in the re-measure (1.00x apart, "
            "against 1.58x first): a passing disturbance, not this benchmark's code") in gone.note
    # the 1.27x of the study: under the bar for one stored run (inconclusive, the rank named)
    small = one_stored_run(c, 1, RankTiming.of([0.0562, 0.0444]), stored)
    assert small.verdict is Verdict.INCONCLUSIVE
    assert ("rank 0 is the straggler, but its own shift is only 1.27x the other ranks' (each against its stored "
            "level; against one stored run at least 1.5x carries a slowdown)") in small.note
    twice = RankTiming.of([0.044, 0.088])
    assert one_stored_run(c, 1, twice, stored, remeasured=(RankTiming.of([0.044, 0.087]),)) is c
    assert one_stored_run(c, 1, twice, stored, remeasured=(None,)) is c  # a re-measure without rank timing: as before


def test_twice_the_work_on_a_rank_fails_when_it_takes_cpu_from_the_other_ranks_too():
    """Issue 45, seen on the 2-core VM: rank 1 did twice the matmul's work and read 108 µs and 102 µs
    against 44 µs recorded, but rank 0 (sharing the cores) read 54 µs and 66 µs (+22%, +50%), so
    "the other ranks kept the baseline's level" failed and the regression ended inconclusive ("no
    rank carries this slowdown"). Rank 1's own shift over rank 0's (2.0x, 1.55x) is far beyond the
    A/A regressions' (at most 1.45x): it fails, saying how much the others moved; a straggler whose
    own shift is within that is inconclusive and named."""
    from pytest_gpuperf.verdict.compare import Comparison, Verdict
    from pytest_gpuperf.verdict.distributed import RankTiming, one_stored_run

    c = Comparison(verdict=Verdict.REGRESSED, benchmark_id="t.py::test_matmul", current_median_ms=0.108,
                   baseline_median_ms=0.044, ratio=2.45, ratio_ci=(2.3, 2.6))
    stored = RankTiming.of([0.044, 0.044], [3.0, 3.0])
    for rank0, rank1, own in ((0.054, 0.108, "2.00"), (0.066, 0.102, "1.55")):
        caught = one_stored_run(c, 1, RankTiming.of([rank0, rank1], [3.3, 3.1]), stored)
        assert caught.verdict is Verdict.REGRESSED
        assert f"rank 1 carries it: its own shift is {own}x the other ranks'" in caught.note
        assert f"which ran {rank0 / 0.044:.2f}x the baseline's level" in caught.note
        # it must still hold in the re-measure
        gone = one_stored_run(c, 1, RankTiming.of([rank0, rank1]), stored, remeasured=(RankTiming.of([0.06, 0.06]),))
        assert gone.verdict is Verdict.INCONCLUSIVE and "passing disturbance" in gone.note
    # the whole session moved 1.5x and rank 1 1.3x more: an A/A session's tail, not code
    noise = one_stored_run(c, 1, RankTiming.of([0.066, 0.0858]), stored)
    assert noise.verdict is Verdict.INCONCLUSIVE
    assert ("rank 1 is the straggler, but its own shift is only 1.30x the other ranks' (each against its stored "
            "level, which ran 1.50x the baseline's level;") in noise.note
    # without the baseline's rank timing, this run's contrast is the shift
    assert one_stored_run(c, 1, RankTiming.of([0.066, 0.0858]), None).verdict is Verdict.INCONCLUSIVE
    assert one_stored_run(c, 1, RankTiming.of([0.054, 0.108]), None).verdict is Verdict.REGRESSED


def test_on_a_busy_host_the_ranks_are_read_by_their_cpu_time():
    """Issue 45, one core busy: twice the work on rank 1 read 2.4x the baseline's wall clock on rank
    1 and 1.2x on rank 0, whose core the neighbour shared; the host-busy guard made it inconclusive.
    With each rank's CPU time gathered, a verdict decided on CPU time reads the ranks on it too:
    rank 1's CPU time doubled while rank 0's kept its level, so rank 1 carries it; a session whose
    every rank's CPU time moved is not a straggler."""
    import dataclasses

    from pytest_gpuperf.verdict.compare import Comparison, Verdict
    from pytest_gpuperf.verdict.cputime import CPU, WALL
    from pytest_gpuperf.verdict.distributed import RankTiming, combine_cpu_rounds, one_stored_run, rank_timing

    on_cpu = Comparison(verdict=Verdict.REGRESSED, benchmark_id="t.py::test_matmul", current_median_ms=0.088,
                        baseline_median_ms=0.043, ratio=2.05, ratio_ci=(1.9, 2.2), clock=CPU)
    stored = RankTiming.of([0.044, 0.044], [3.0, 3.0], [0.043, 0.043])
    twice = RankTiming.of([0.080, 0.108], [3.6, 3.1], [0.044, 0.088])  # wall: rank 0 +82% (the neighbour)
    assert one_stored_run(on_cpu, 1, twice, stored) is on_cpu
    # the same ranks read on the wall clock: rank 0 moved, rank 1's own shift 1.35x: inconclusive
    assert one_stored_run(dataclasses.replace(on_cpu, clock=WALL), 1, RankTiming.of([0.080, 0.108]),
                          RankTiming.of([0.044, 0.044])).verdict is Verdict.INCONCLUSIVE
    # every rank's CPU time moved (a slower machine), and on the wall clock rank 0 "straggles"
    moved = one_stored_run(on_cpu, 1, RankTiming.of([0.09, 0.05], None, [0.049, 0.048]), stored)
    assert moved.verdict is Verdict.INCONCLUSIVE and "no rank carries this slowdown" in moved.note
    # the re-measure is read on CPU time too: rank 1's doubled work holds there
    assert one_stored_run(on_cpu, 1, twice, stored, remeasured=(RankTiming.of([0.09, 0.1], None, [0.044, 0.087]),)) \
        is on_cpu
    # a rank without CPU time: the wall clock's ranks, as before
    assert one_stored_run(on_cpu, 1, RankTiming.of([0.080, 0.108]), stored).verdict is Verdict.INCONCLUSIVE
    # stored and read back; a rank without CPU time drops them all
    assert RankTiming.from_dict(twice.to_dict()) == twice and twice.to_dict()["cpu_medians_ms"] == [0.044, 0.088]
    assert RankTiming.of([1.0, 1.0], None, [0.5, None]).cpu_ms is None and twice.on_cpu().medians_ms == (0.044, 0.088)
    assert rank_timing([[1.0, 3.0], [2.0, 2.0]], None, [[0.5, 0.7], []]).cpu_ms is None
    assert rank_timing([[1.0, 3.0], [2.0, 2.0]], None, [[0.5, 0.7], [1.0, 1.0]]).cpu_ms == (0.6, 1.0)
    # each round's CPU time is the highest rank's, only when every rank read every round
    assert combine_cpu_rounds([[1.0, 2.0], [1.5, 1.0]], 2) == (1.5, 2.0)
    assert combine_cpu_rounds([[1.0, 2.0], [1.5]], 2) == () and combine_cpu_rounds([], 0) == ()
