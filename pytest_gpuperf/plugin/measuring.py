"""How one ``gpu_bench`` call is measured: a strategy per process role, chosen once (issue 33).

:func:`strategy_for` picks it from the test's :class:`~pytest_gpuperf.plugin.bench.BenchContext`:

* :class:`Smoke`: without ``--gpuperf``, ``fn`` runs once;
* :class:`Replay`: the user's session when worker processes measured before the tests (replicates,
  ``--gpuperf-ab``): the finished result, and one call for the test's value; a benchmark that no
  worker reported because one failed fails with why;
* :class:`ABWorker`: an A/B worker process, measuring blocks as its coordinator commands;
* :class:`ExtrasOnly`: the extras process, timing nothing: peak memory, counts, bottleneck (and op
  profiles), each from :data:`~pytest_gpuperf.plugin.replicates.EXTRA_CALLS` calls;
* :class:`InstructionsOnly`: the instruction worker under valgrind (issue 48), timing nothing: the
  host's instructions per call;
* :class:`InProcess`: a timed process (a replicate worker, or the one process with
  ``--gpuperf-processes 1``): warmup, timed rounds with telemetry, the extras inline where asked,
  the verdict against the stored baseline, the bottleneck and the trace.

Each ``measure(fn, args, kwargs, setup, rounds, warmup_calls, bid, common, calls_per_round)`` returns
a :class:`~pytest_gpuperf.verdict.result.BenchResult`; ``common`` holds the result's name, device,
benchmark id, group, options and extra_info. No pytest imports.
"""

from __future__ import annotations

import contextlib
import dataclasses
import statistics
import sys
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from pytest_gpuperf.core.containment import BOTTLENECK, COUNTS, INSTRUCTIONS, MEMORY, SNAPSHOT, TRACE, contained
from pytest_gpuperf.core.options import BenchOptions
from pytest_gpuperf.measure.gpuclock import drop_throttled, gpu_clock_of
from pytest_gpuperf.measure.timing import Timing, prepare_call
from pytest_gpuperf.plugin.replicates import STOPPED, UNREPORTED
from pytest_gpuperf.storage.baseline import BaselineEntry
from pytest_gpuperf.verdict.result import BenchResult, Overrun



#: Under torchrun (no replicate processes, no A/B confirmation; a regression is re-measured in the
#: same session, in step on every rank) the gate knows the spread from one session to the next only
#: from the baseline's stored runs: with fewer, a note asks for more. Measured (docs/distributed.md,
#: benchmarks/distributed_aa.py): 16% false alarms with one stored run, far fewer with three.
TORCHRUN_BASELINE_RUNS = 3

class GpuBenchUsageError(RuntimeError):
    """The fixture was used in a way it does not support (the message says how to fix it)."""


def _lazy_kind(value: Any) -> str | None:
    """"generator", "async generator" or "coroutine" when calling fn only created one, else None."""
    import inspect

    if inspect.isgenerator(value):
        return "generator"
    if inspect.isasyncgen(value):
        return "async generator"
    if inspect.iscoroutine(value):
        value.close()  # never awaited: close it quietly
        return "coroutine"
    return None


class Measuring:
    """What every strategy shares: the test's context (``context``, a
    :class:`~pytest_gpuperf.plugin.bench.BenchContext`), the value check, the extra calls (peak
    memory, counts, op profile, classification), memory snapshots and the out-of-memory failure."""

    #: where a lazy return value is reported instead of failing (:attr:`~pytest_gpuperf.plugin.bench.GpuBench.lazy_value`)
    lazy_value: Callable[[str], Any] | None = None

    def __init__(self, context: Any) -> None:
        self.context = context

    @property
    def options(self) -> BenchOptions:
        return self.context.options

    def measure(self, fn, args, kwargs, setup, rounds, warmup_calls, bid, common, calls_per_round=None) -> BenchResult:
        """One measurement of ``fn`` (see the module doc)."""
        raise NotImplementedError

    def _across_ranks(self, bid: str, measure: Callable[[], BenchResult]) -> BenchResult:
        """``measure()``, under torchrun within this benchmark's bounded waits: its first collective
        waits ``--gpuperf-rank-timeout``, the later ones (and the test's outcome exchange) the
        benchmark's budget (:func:`~pytest_gpuperf.verdict.distributed.collective_budget`), until the
        ranks agreed on the test's outcome. A rank that crashed or hung fails the test here with the
        reason once (:class:`~pytest_gpuperf.measure.distributed.DistributedFault`, re-raised)."""
        ranks = self.context.ranks
        if ranks is None:
            return measure()
        from pytest_gpuperf.measure.distributed import DistributedFault
        from pytest_gpuperf.verdict.distributed import collective_budget

        o = self.options
        ranks.begin_benchmark(collective_budget(o.warmup_time, o.max_time, ranks.rank_timeout_s))
        try:
            return measure()
        except DistributedFault as exc:
            fault = exc
        if self.context.fail is not None:  # a rank crashed or hung: the reason once, without the collective's traceback
            self.context.fail(f"{self._full_id(bid)}: {fault}")
        raise fault

    def _communication(self, fn, a, k, entry: BaselineEntry | None, unavailable: dict[str, Any]) -> Any:
        """Under torchrun: every rank profiles the same few calls (after the timed rounds,
        :func:`pytest_gpuperf.measure.communication.profile_communication`), and one gather brings
        each rank's figures to every rank. Contained: a rank that could not measure makes the
        part unavailable on every rank (naming the rank); the timing stands. With the baseline's
        figures, the result carries the evidence line of a regression (``change``)."""
        from pytest_gpuperf.core.containment import COMMUNICATION, Unavailable, contained
        from pytest_gpuperf.measure.communication import profile_communication
        from pytest_gpuperf.verdict.communication import Communication, change_text

        ranks, local = self.context.ranks, {}
        mine = contained(COMMUNICATION, lambda: profile_communication(fn, a, k, self.context.device,
                                                                      align=ranks.barrier), local)
        gathered = ranks.gather(mine if mine is not None else local[COMMUNICATION])
        failed = [(r, g) for r, g in enumerate(gathered) if isinstance(g, Unavailable) or g is None]
        if failed:
            r, why = failed[0]
            unavailable.setdefault(COMMUNICATION, Unavailable(
                COMMUNICATION, f"rank {r}: {why.error if why is not None else 'nothing measured'}",
                why.where if why is not None else ""))
            return None
        import torch.distributed as dist

        o = self.options
        now = Communication.of(gathered, backend=str(dist.get_backend()), bytes_per_call=o.bytes_per_call,
                               collective=o.collective)
        then = Communication.from_dict(entry.data.get("communication")) if entry is not None else None
        return dataclasses.replace(now, change=change_text(then, now))

    def _check_value(self, fn: Callable[..., Any], value: Any) -> None:
        """When ``fn`` returned a generator or coroutine (only its creation was timed): fail the test
        (``gpu_bench``), or warn once (pytest-benchmark's ``benchmark``, :attr:`lazy_value`)."""
        kind = _lazy_kind(value)
        if kind is None:
            return
        name = getattr(fn, "__name__", "fn")
        fix = f"lambda: list({name}(...))" if kind == "generator" else "a function that runs it to the end"
        if self.lazy_value is not None:
            self.lazy_value(
                f"{self.context.nodeid}: benchmark: {name}() returned a {kind}, so only its creation is timed "
                f"(as pytest-benchmark does), not the work it does; to time the work, benchmark {fix}")
            return
        raise GpuBenchUsageError(
            f"gpu_bench: {name}() returned a {kind}, so only its creation was timed, not the work it does; "
            f"benchmark {fix} instead"
        )

    def _extra_calls(self, fn, a, k, args, kwargs, setup, compiled, bid, notes: list[str],
                     unavailable: dict[str, Any]) -> tuple[Any, Any, Any]:
        """Calls outside the timed rounds (they never perturb timing): one for peak memory, and with
        ``counts`` one for the exact counts (with ``compiled``, ``torch.compile``'s compiles since the
        first call; a recompile adds a note). Each is contained (:func:`~pytest_gpuperf.core.containment.contained`):
        a failure is recorded in ``unavailable`` and that part is None. Returns ``(memory report or
        None, counts or None, FLOP dtype or None)``."""
        from pytest_gpuperf.measure.memory import measure_peak

        report = contained(MEMORY, lambda: measure_peak(fn, a, k, self.context.device), unavailable)
        mem = report[0] if report is not None else None
        counts = flop_dtype = None
        if self.options.counts:
            counted = contained(COUNTS, lambda: self._count(fn, args, kwargs, setup), unavailable)
            if counted is not None:
                counts, flop_dtype = counted
            if counts is not None and compiled is not None:
                counts = dataclasses.replace(counts, **compiled)
                if compiled["recompiles"]:
                    notes.append(self._recompile_note(bid, compiled["recompiles"]))
        return mem, counts, flop_dtype

    def _count(self, fn, args, kwargs, setup) -> tuple[Any, Any]:
        """One counting call (:func:`pytest_gpuperf.measure.counting.count_call`) on fresh arguments."""
        from pytest_gpuperf.measure.counting import count_call

        ca, ck = prepare_call(fn, args, kwargs, setup)
        return count_call(fn, ca, ck, self.context.device)

    def _op_profile(self, fn, args, kwargs, setup, call_ms: float, bid: str, notes: list[str],
                    ops: int | None = None) -> Any:
        """The op profile of this benchmark (:func:`pytest_gpuperf.measure.opprofile.profile_ops`, its
        cycles labelled with this process's id) as ``{"floor_ms": 0, "cycles": [...]}`` (every op;
        a baseline keeps the compact form), in the cycles that fit the profiler's budget
        (:func:`~pytest_gpuperf.measure.opprofile.cycles_for`; ``ops``: the call's aten ops, when
        counted). Contained: a profile that fails or does not fit adds a note and gives None
        (a diagnosis is never a check: nothing is marked unavailable)."""
        import os

        from pytest_gpuperf.core.containment import OP_DIFF
        from pytest_gpuperf.core.units import format_ms
        from pytest_gpuperf.measure.opprofile import (MIN_CYCLES, PROFILE_BUDGET_MS, PROFILE_BUDGET_OPS,
                                                      calls_per_cycle, cycles_for, profile_ops)
        from pytest_gpuperf.verdict.opdiff import compact_profile

        failed: dict[str, Any] = {}
        calls = calls_per_cycle(call_ms)
        share = self.context.op_profile or 1  # processes that share the profile's cycles
        cycles = cycles_for(call_ms, calls, ops, processes=share)
        if not cycles:
            notes.append(f"{self._full_id(bid)}: no op profile taken (why it got slower): {MIN_CYCLES} cycles of "
                         f"a {format_ms(call_ms)} call" + (f" of {ops:,} aten ops" if ops else "")
                         + f" exceed the profiler's budget ({PROFILE_BUDGET_MS / 1e3:g} s, {PROFILE_BUDGET_OPS:,} ops "
                         + ("a benchmark and process" if share == 1 else f"a benchmark, shared by {share} processes")
                         + "); an A/B run against the baselines' commit still profiles both sides")
            return None
        a, k = prepare_call(fn, args, kwargs, setup)
        profile = getattr(self.context.measurer, "profile_ops", profile_ops)  # a scripted backend's own
        got = contained(OP_DIFF, lambda: compact_profile(
            profile(fn, a, k, self.context.device, cycles=cycles, calls=calls,
                    process=os.getpid() % 1_000_000), floor_share=0.0, max_ops=None), failed)
        if OP_DIFF in failed:
            notes.append(f"{self._full_id(bid)}: the op profile (why it got slower) could not be taken: "
                         f"{failed[OP_DIFF].text()}")
        return got

    def _first_call_compiles(self, fn, args, kwargs, setup) -> dict[str, dict[str, int]] | None:
        """With ``torch.compile`` loaded: make one untimed call first and return dynamo's counters
        after it, so that what compiles later counts as a recompilation (None: not loaded)."""
        if "torch._dynamo.eval_frame" not in sys.modules:
            return None
        from pytest_gpuperf.measure.counting import compile_snapshot

        a, k = prepare_call(fn, args, kwargs, setup)
        fn(*a, **k)  # the first call compiles; its frames are not recompilations
        return compile_snapshot()

    def _recompile_note(self, bid: str, n: int) -> str:
        return (f"{self._full_id(bid)}: torch.compile compiled {n} frame(s) after the first call, during warmup "
                f"and the timed rounds: recompilations (their compile time is in the timing); mark the sizes "
                f"that vary dynamic (torch._dynamo.mark_dynamic) or give each shape its own benchmark")

    def _classify_fn(self, fn, args, kwargs, median_ms: float, counted: tuple | None = None) -> tuple[Any, Any]:
        """Profile a few calls, count FLOPs and bytes, calibrate, and classify (outside timing):
        :func:`pytest_gpuperf.measure.profiling.classify_call`. ``counted``: ``(flops, bytes, dtype)``
        from the count gate's call, reused when given."""
        from pytest_gpuperf.measure.profiling import classify_call

        return classify_call(fn, args, kwargs, self.context.device, median_ms, counted=counted,
                             thresholds=self.context.thresholds)

    def _safe_id(self, bid: str) -> str:
        """A bounded, file-system-safe file stem for the benchmark (see ``plots.safe_filename``)."""
        from pytest_gpuperf.reporting.plots import safe_filename

        return safe_filename(self._full_id(bid))

    def _snapshot(self, fn, args, kwargs, bid) -> str | None:
        """CUDA with --gpuperf-memory-snapshot: re-run ``fn`` recording allocation history, save it."""
        if self.context.snapshot_dir is None or getattr(self.context.device, "type", "cpu") != "cuda":
            return None
        from pytest_gpuperf.measure.memory import SnapshotRecorder, free_cached_memory, is_oom

        rec = SnapshotRecorder(self.context.device, Path(self.context.snapshot_dir, f"{self._safe_id(bid)}.pickle"))
        rec.start()
        try:
            fn(*args, **kwargs)
        except Exception as exc:
            if not is_oom(exc):
                rec.discard()
                raise
            free_cached_memory(self.context.device)
        return rec.save()

    def _reset_cuda_peak(self) -> None:
        if getattr(self.context.device, "type", "cpu") == "cuda":
            import torch

            torch.cuda.reset_peak_memory_stats(self.context.device)

    def raise_oom(self, exc: BaseException, fn, args, kwargs, bid) -> None:
        from pytest_gpuperf.measure.memory import MemoryLimitError, cuda_memory_summary, free_cached_memory, oom_message
        from pytest_gpuperf.core.units import format_bytes, size_unit

        peak = None
        if getattr(self.context.device, "type", "cpu") == "cuda":
            import torch

            peak = torch.cuda.max_memory_allocated(self.context.device)
        details = cuda_memory_summary(self.context.device)
        free_cached_memory(self.context.device)
        budget = (format_bytes(self.options.max_memory, size_unit(self.context.max_memory_text))
                  if self.options.max_memory is not None else "none")
        message = oom_message(f"in benchmark {self._full_id(bid)}", self.context.device, f"max_memory {budget}",
                              peak, exc)
        extra = self._snapshot(fn, args, kwargs, bid)
        if extra:
            message += "\n" + extra
        raise MemoryLimitError(message, details=details) from exc

    def _full_id(self, bid: str) -> str:
        module = self.context.module
        return f"{module}::{bid}" if module else bid


class Smoke(Measuring):
    """Without ``--gpuperf`` (or a benchmark no worker process measured): ``fn`` runs exactly once."""

    def measure(self, fn, args, kwargs, setup, rounds, warmup_calls, bid, common, calls_per_round=None) -> BenchResult:
        a, k = prepare_call(fn, args, kwargs, setup)
        t = self.context.measurer.once(fn, a, k, self.context.device)
        self._check_value(fn, t.value)
        return BenchResult.from_samples(
            t.samples_ms, rounds=1, calls_per_round=1, warmup_calls=0, smoke=True, value=t.value, **common
        )


class Replay(Smoke):
    """The user's session after worker processes measured (``context.ab_results``): the finished
    result, decided already, with one call here for the test's value and side effects; a string
    result (the workers could not measure it: crashed, timed out, partial replicates) fails the test
    with it; a benchmark the workers did not run at all runs once, as in smoke mode, unless Ctrl-C or
    SIGTERM stopped them (``STOPPED``): then it was not measured and its test is skipped."""

    def measure(self, fn, args, kwargs, setup, rounds, warmup_calls, bid, common, calls_per_round=None) -> BenchResult:
        ctx = self.context
        done = ctx.ab_results.get(self._full_id(bid))
        if done is None and STOPPED in ctx.ab_results:  # the measuring was stopped before it
            import pytest

            pytest.skip(f"{self._full_id(bid)}: not measured: the run was {ctx.ab_results[STOPPED]}")
        if done is None and UNREPORTED in ctx.ab_results:  # no worker reported it, and one failed
            done = f"{self._full_id(bid)}: {ctx.ab_results[UNREPORTED]}"
        if isinstance(done, str):
            if ctx.fail is not None:
                ctx.fail(done)
            raise RuntimeError(done)
        if done is None:
            return super().measure(fn, args, kwargs, setup, rounds, warmup_calls, bid, common, calls_per_round)
        a, k = prepare_call(fn, args, kwargs, setup)  # gives the test its value and side effects
        value = ctx.measurer.once(fn, a, k, ctx.device).value
        self._check_value(fn, value)
        return done.replace(name=common["name"], group=common["group"], value=value,
                                   options=common["options"], extra_info=common["extra_info"])


def _block_probe(ctx: Any) -> dict[str, Any]:
    """The ``probe`` keyword of an A/B worker's blocks: the reference probe
    (:func:`~pytest_gpuperf.measure.probe.reference_probe`) on the CPU backend with a measurer that
    takes probes, outside torchrun; else none (``{}``)."""
    if ctx.ranks is not None or not ctx.measurer.supports_probe or getattr(ctx.device, "type", "cpu") != "cpu":
        return {}
    from pytest_gpuperf.measure.probe import reference_probe

    return {"probe": reference_probe()}


class ABWorker(Measuring):
    """An A/B worker process (``context.ab_worker``, its :class:`~pytest_gpuperf.ab.run.WorkerClient`)."""

    def measure(self, fn, args, kwargs, setup, rounds, warmup_calls, bid, common, calls_per_round=None) -> BenchResult:
        """In an A/B worker process: report ready, then warm up, time blocks and finish as the
        coordinator commands (see :mod:`pytest_gpuperf.ab.run`). An exception of ``fn`` is reported
        to the coordinator and re-raised (the worker's test fails; the user's session re-runs it)."""
        return self._across_ranks(bid, lambda: self._obey(fn, args, kwargs, setup, bid, common, calls_per_round))

    def _obey(self, fn, args, kwargs, setup, bid, common, calls_per_round) -> BenchResult:
        """The command loop of :meth:`measure`. In a torchrun launch (``--gpuperf-nproc``) every rank
        obeys rank 0's commands with its rounds in step, and what a rank reports is the slowest
        rank's time per round (:func:`_combine_ranks`); the result keeps each rank's median."""
        ctx, client = self.context, self.context.ab_worker
        client.ready(self._full_id(bid), ctx.nodeid, self.options.max_time)
        cpr, samples, rounds, warm = calls_per_round, [], 0, 0
        per_rank: list[list[float]] = []  # in a launch: each rank's samples over the blocks
        lockstep = {} if ctx.ranks is None else {"lockstep": _lockstep_of(ctx.measurer, ctx.ranks)}
        host = ctx.measurer.host_load_meter(ctx.device, measure=ctx.host_load)  # over its blocks (CPU)
        probe = _block_probe(ctx)
        while True:
            cmd = client.command()
            try:
                if cmd["op"] == "warmup":
                    t, _ = self._in_step(fn, args, kwargs, setup, lockstep, rounds=1,
                                         **({} if cpr is None else {"calls_per_round": cpr}))
                    cpr, warm = t.calls_per_round, t.warmup_calls
                    client.reply("warm", round_ms=t.samples_ms[0] * cpr, cpr=cpr)
                elif cmd["op"] == "block":
                    with host.span() if host is not None else contextlib.nullcontext():
                        t, mine = self._in_step(fn, args, kwargs, setup, lockstep, rounds=int(cmd["rounds"]),
                                                warmup_calls=int(cmd["rewarm"]), calls_per_round=cpr or 1, **probe)
                    per_rank = [a + b for a, b in zip(per_rank or [[] for _ in mine], mine)]
                    samples.extend(t.samples_ms)
                    rounds += t.rounds
                    client.reply("samples", samples_ms=list(t.samples_ms), cpu_samples_ms=list(t.cpu_samples_ms),
                                 process_cpu_samples_ms=list(t.process_cpu_samples_ms),
                                 probe_ms=list(t.probe_ms) if probe else [], probe_every=t.probe_every)
                elif cmd["op"] == "profile":  # why it got slower (issue 32): op profiles, outside the timed blocks
                    self._profile_for_ab(fn, args, kwargs, setup, cmd)
                elif cmd["op"] == "finish":
                    load = host.summary() if host is not None else {}
                    result = self._ab_result(fn, args, kwargs, setup, bid, common, samples, rounds, cpr or 1, warm,
                                             extras=bool(cmd.get("extras")), classify=bool(cmd.get("classify")),
                                             telemetry=load or None)
                    if per_rank:
                        from pytest_gpuperf.verdict.distributed import rank_timing

                        result = result.replace(ranks=rank_timing(per_rank))
                    from pytest_gpuperf.storage.codec import encode_result

                    # every launch's rank medians (--gpuperf-nproc): the coordinator merges them over the launches
                    client.reply("result", entry=encode_result(result, environment={}, git_commit=None,
                                                              timestamp_utc="")
                                 if cmd.get("entry", cmd.get("extras")) else None,
                                 ranks=list(result.ranks.medians_ms) if result.ranks is not None else None)
                    return result
                else:
                    client.reply("error", error=f"unknown command {cmd!r}")
            except Exception as exc:
                from pytest_gpuperf.core.containment import describe

                error, where = describe(exc)  # the type, the message and the last frames of the user's code
                client.reply("error", error=error + (f" (at {where})" if where else ""))
                raise

    def _profile_for_ab(self, fn, args, kwargs, setup, cmd: dict[str, Any]) -> None:
        """The ``profile`` command: the op profile of ``cmd["cycles"]`` cycles of ``cmd["calls"]``
        calls, replied as samples or as the error (a diagnosis never fails the benchmark); in a
        launch only rank 0 writes the chrome trace."""
        from pytest_gpuperf.core.containment import describe
        from pytest_gpuperf.measure.opprofile import profile_ops

        ctx, client = self.context, self.context.ab_worker
        try:
            a, k = prepare_call(fn, args, kwargs, setup)
            profile = getattr(ctx.measurer, "profile_ops", profile_ops)  # a scripted backend's own
            got = profile(fn, a, k, ctx.device, cycles=int(cmd["cycles"]), calls=int(cmd["calls"]),
                          process=int(cmd["process"]),
                          trace_path=cmd.get("trace") if ctx.ranks is None or ctx.ranks.is_writer else None)
            client.reply("profile", samples=[x.to_dict() for x in got])
        except Exception as exc:  # noqa: BLE001 - a diagnosis never fails the benchmark
            error, where = describe(exc)
            client.reply("profile", error=error, where=where)

    def _in_step(self, fn, args, kwargs, setup, lockstep: dict[str, Any], **how: Any) -> tuple[Timing, list]:
        """One measurement of the A/B protocol (``how``: the measurer's rounds, warmup and calls per
        round) and every rank's samples (``[]`` outside torchrun); in a launch with the ranks' rounds
        in step (``lockstep``) and each round the slowest rank's (:func:`_combined`)."""
        ctx = self.context
        t = ctx.measurer.measure(fn, args, kwargs, options=self.options, device=ctx.device, setup=setup, **how,
                                 **lockstep)
        if ctx.ranks is None:
            return t, []
        mine = ctx.ranks.gather(list(t.samples_ms))
        return _combined(t, mine), mine

    def _ab_result(self, fn, args, kwargs, setup, bid, common, samples, rounds, cpr, warm, *, extras,
                   classify=True, telemetry=None) -> BenchResult:
        """An A/B worker's result: its samples, and with ``extras`` peak memory, counts and (with
        ``classify`` and ``expect_bottleneck`` or ``--gpuperf-classify``) the bottleneck, each from
        one more call (side B classifies; A's class is not compared); ``telemetry`` the host load
        over its blocks (CPU backend; None elsewhere)."""
        if not samples:  # finished before any block (the other side failed): one timed call
            samples = list(self.context.measurer.once(fn, *prepare_call(fn, args, kwargs, setup),
                                                      self.context.device).samples_ms)
        extra: dict[str, Any] = {}
        unavailable: dict[str, Any] = {}
        if extras:
            a, k = prepare_call(fn, args, kwargs, setup)
            mem, counts, flop_dtype = self._extra_calls(fn, a, k, args, kwargs, setup, None, bid, [], unavailable)
            extra["peak_memory_bytes"] = mem.peak_bytes if mem is not None else None
            extra["counts"] = counts
            counted = (counts.flops, counts.traffic_bytes, flop_dtype) if counts is not None else None
            if classify and (self.options.expect_bottleneck or self.context.classify):
                median = statistics.median(samples)
                got = contained(BOTTLENECK, lambda: self._classify_fn(fn, a, k, median, counted), unavailable)
                extra["bottleneck"] = got[1] if got is not None else None
        return BenchResult.from_samples(tuple(samples), rounds=max(rounds, len(samples)), calls_per_round=cpr,
                                        warmup_calls=warm, telemetry=telemetry, unavailable=unavailable,
                                        **extra, **common)


class ExtrasOnly(Measuring):
    """The extras process (``context.extras == "only"``)."""

    def measure(self, fn, args, kwargs, setup, rounds, warmup_calls, bid, common, calls_per_round=None) -> BenchResult:
        """The extras process (``extras="only"``): time nothing; measure peak memory and the counts
        from :data:`~pytest_gpuperf.plugin.replicates.EXTRA_CALLS` calls each, or one for a long call
        or one of many ops (:func:`~pytest_gpuperf.plugin.replicates.extra_calls`) (a count or peak that
        differs between them is variable: :func:`~pytest_gpuperf.verdict.counts.combine_counts`), and
        classify the bottleneck when asked. Every part is contained. Its one sample is a single
        call's time (sizes the profiled calls; never compared). Under torchrun (``--gpuperf-nproc``
        launches) every rank makes the same calls: the profiled calls are sized from the slowest
        rank's call, and the collectives are bounded as a timed benchmark's are."""
        return self._across_ranks(bid, lambda: self._extras(fn, args, kwargs, setup, bid, common))

    def _extras(self, fn, args, kwargs, setup, bid, common) -> BenchResult:
        from pytest_gpuperf.measure.memory import measure_peak
        from pytest_gpuperf.plugin.replicates import EXTRA_CALLS, extra_calls
        from pytest_gpuperf.verdict.counts import combine_counts

        ctx, counting = self.context, self.options.counts
        first_compile = self._first_call_compiles(fn, args, kwargs, setup) if counting else None
        t = ctx.measurer.once(fn, *prepare_call(fn, args, kwargs, setup), ctx.device)
        self._check_value(fn, t.value)
        call_ms = t.samples_ms[0]
        if ctx.ranks is not None:  # a number of calls sized from one rank's own time would put the ranks out of step
            call_ms = max(ctx.ranks.gather(call_ms))
        unavailable: dict[str, Any] = {}
        peaks, counted = [], []
        for i in range(EXTRA_CALLS):
            a, k = prepare_call(fn, args, kwargs, setup)
            report = contained(MEMORY, lambda: measure_peak(fn, a, k, ctx.device), unavailable)
            if report is not None:
                peaks.append(report[0].peak_bytes)
            got = contained(COUNTS, lambda: self._count(fn, args, kwargs, setup), unavailable) if counting else None
            if got is not None:
                counted.append(got)
            if i == 0:  # every rank makes the same calls: the largest op count decides
                ops = counted[0][0].ops if counted else None
                if extra_calls(call_ms, max(ctx.ranks.gather(ops or 0)) if ctx.ranks is not None else ops) == 1:
                    break
        counts = combine_counts([c for c, _ in counted]) if counted and COUNTS not in unavailable else None
        if counts is not None and first_compile is not None:
            from pytest_gpuperf.measure.counting import compile_snapshot
            from pytest_gpuperf.verdict.counts import compile_delta

            compiled = compile_delta(first_compile, compile_snapshot())
            if compiled is not None:
                counts = dataclasses.replace(counts, **compiled)
        bottleneck = None
        if self.options.expect_bottleneck or ctx.classify:
            flops = (counts.flops, counts.traffic_bytes, counted[0][1]) if counts is not None else None
            a, k = prepare_call(fn, args, kwargs, setup)
            got = contained(BOTTLENECK, lambda: self._classify_fn(fn, a, k, call_ms, flops), unavailable)
            bottleneck = got[1] if got is not None else None
        high = max(peaks) if peaks and MEMORY not in unavailable else None
        low = min(peaks) if high is not None and min(peaks) != high else None
        notes: list[str] = []
        op_profile = (self._op_profile(fn, args, kwargs, setup, call_ms, bid, notes,
                                       ops=counts.ops if counts is not None else None) if ctx.op_profile else None)
        communication = None
        if ctx.ranks is not None:  # the coordinator compares it with the baseline's (its change)
            communication = self._communication(fn, *prepare_call(fn, args, kwargs, setup), None, unavailable)
        return BenchResult.from_samples(t.samples_ms, rounds=1, calls_per_round=1, warmup_calls=0,
                                        peak_memory_bytes=high, peak_memory_low_bytes=low, counts=counts,
                                        bottleneck=bottleneck, unavailable=unavailable, value=t.value,
                                        op_profile=op_profile, communication=communication, notes=tuple(notes),
                                        **common)


class InstructionsOnly(Measuring):
    """The instruction worker (``context.extras == "instructions"``, under valgrind's callgrind;
    :mod:`pytest_gpuperf.plugin.instructions`)."""

    def measure(self, fn, args, kwargs, setup, rounds, warmup_calls, bid, common, calls_per_round=None) -> BenchResult:
        """Count the host's instructions of ``fn``'s calls (the process's
        :class:`~pytest_gpuperf.measure.instructions.InstructionCounting`: uncounted warmup calls,
        then the counted ones, one callgrind dump), with the arguments prepared once (a pedantic
        ``setup`` runs once, uncounted). A benchmark without the ``instructions`` option runs once.
        Nothing is timed: the one sample is the first call's time under valgrind (never compared).
        Where counting fails the part is unavailable with why (the session goes on)."""
        import time

        a, k = prepare_call(fn, args, kwargs, setup)
        start = time.perf_counter()
        value = fn(*a, **k)
        first_ms = max((time.perf_counter() - start) * 1e3, 1e-6)
        self._check_value(fn, value)
        unavailable: dict[str, Any] = {}
        counted = None
        if self.options.instructions:
            from pytest_gpuperf.measure.instructions import process_counting

            counted = contained(INSTRUCTIONS, lambda: process_counting().measure(self._full_id(bid), lambda: fn(*a, **k)),
                                unavailable)
        return BenchResult.from_samples((first_ms,), rounds=1, calls_per_round=1, warmup_calls=0, value=value,
                                        instructions=counted, unavailable=unavailable, **common)


class InProcess(Measuring):
    """A timed process: measured here, under pytest-xdist one worker at a time per device."""

    def measure(self, fn, args, kwargs, setup, rounds, warmup_calls, bid, common, calls_per_round=None) -> BenchResult:
        return self._across_ranks(bid, lambda: self._measure_locked(fn, args, kwargs, setup, rounds, warmup_calls,
                                                                    bid, common, calls_per_round))

    def _measure_locked(self, fn, args, kwargs, setup, rounds, warmup_calls, bid, common,
                        calls_per_round=None) -> BenchResult:
        if self.context.device_lock is None:
            return self._measure_unlocked(fn, args, kwargs, setup, rounds, warmup_calls, bid, common, calls_per_round)
        with self.context.device_lock():  # pytest-xdist: never let two workers time the same device at once
            return self._measure_unlocked(fn, args, kwargs, setup, rounds, warmup_calls, bid, common, calls_per_round)

    def _measure_unlocked(self, fn, args, kwargs, setup, rounds, warmup_calls, bid, common,
                          calls_per_round=None) -> BenchResult:
        """One measurement, in phases: the timed rounds with telemetry (:meth:`_timed_rounds`), the
        untimed extra calls for peak memory and exact counts (:meth:`_extra_calls`), the verdict
        (:meth:`_evaluate`, which may re-measure), and the bottleneck and trace (:meth:`_explain`)."""
        ctx = self.context
        # the interleaved machine-speed probe, for a measurer that supports it (not yet under torchrun)
        probe = self._probe() if ctx.measurer.supports_probe and ctx.ranks is None else None
        fixed: dict[str, Any] = {} if probe is None else {"probe": probe}
        if ctx.ranks is not None:
            fixed["lockstep"] = _lockstep_of(ctx.measurer, ctx.ranks)

        def timed(progress: Any = None) -> Timing:  # throttled rounds (the GPU's clock) left out
            return drop_throttled(ctx.measurer.measure(
                fn, args, kwargs, options=self.options, device=ctx.device, setup=setup, rounds=rounds,
                warmup_calls=warmup_calls, progress=progress, calls_per_round=calls_per_round, **fixed))

        inline = ctx.extras == "inline"  # a timed replicate worker makes no extra call: the extras process does
        first_compile = self._first_call_compiles(fn, args, kwargs, setup) if self.options.counts and inline else None
        t, telemetry, elapsed_s = self._timed_rounds(timed)
        # torchrun: one gather of every rank's rounds, the slowest rank's per round
        t, ranks = _combine_ranks(ctx.ranks, t, ctx.reference) if ctx.ranks is not None else (t, None)
        compiled = None
        if self.options.counts and inline:  # torch.compile's compiles since the first call
            from pytest_gpuperf.measure.counting import compile_snapshot
            from pytest_gpuperf.verdict.counts import compile_delta

            compiled = compile_delta(first_compile, compile_snapshot())
        self._check_value(fn, t.value)
        overrun = self._overrun(t, elapsed_s) if rounds is None else None
        notes = [f"{self._full_id(bid)}: {note}" for note in getattr(t, "notes", ())]
        a, k = prepare_call(fn, args, kwargs, setup)
        unavailable: dict[str, Any] = {}  # extras that failed (core.containment): the timing stands
        mem = counts = flop_dtype = None
        if inline:
            mem, counts, flop_dtype = self._extra_calls(fn, a, k, args, kwargs, setup, compiled, bid, notes,
                                                        unavailable)
        entry = self._baseline_entry(bid, notes)
        communication = (self._communication(fn, a, k, entry, unavailable)
                         if ctx.ranks is not None and inline else None)
        evaluation, t, probe_stored = self._evaluate(t, timed, probe, entry, telemetry, mem, counts, rounds, bid, ranks)
        memory = evaluation.memory
        if memory is not None and memory.failed:
            memory = dataclasses.replace(memory, snapshot=contained(
                SNAPSHOT, lambda: self._snapshot(fn, a, k, bid), unavailable))
        bottleneck, trace_path, top_ops = self._explain(fn, a, k, t, counts, flop_dtype, telemetry,
                                                        evaluation.comparison.failed, bid, notes, unavailable)
        op_profile = (self._op_profile(fn, args, kwargs, setup, statistics.median(t.samples_ms), bid, notes,
                                       ops=counts.ops if counts is not None else None)
                      if inline and ctx.op_profile else None)
        scaling = self._scaling(t, bid, notes)
        return BenchResult.from_samples(
            t.samples_ms, rounds=t.rounds, calls_per_round=t.calls_per_round,
            warmup_calls=t.warmup_calls, comparison=evaluation.comparison,
            peak_memory_bytes=mem.peak_bytes if mem is not None else None,
            memory_comparison=memory, bottleneck=bottleneck, trace_path=trace_path, top_ops=top_ops,
            telemetry=telemetry, value=t.value, notes=tuple(notes), counts=counts,
            count_comparison=evaluation.counts, overrun=overrun, unavailable=unavailable, op_profile=op_profile,
            ranks=ranks, scaling=scaling, communication=communication, cpu=cpu_time_of(t), gpu_clock=gpu_clock_of(t),
            **probe_stored, **common)

    def _baseline_entry(self, bid: str, notes: list[str]) -> BaselineEntry | None:
        """The benchmark's stored entry (None: none). Under torchrun, comparing with one of fewer than
        :data:`TORCHRUN_BASELINE_RUNS` stored runs adds the note that asks for more to ``notes``."""
        ctx = self.context
        entry = ctx.baseline.get(bid) if ctx.baseline is not None else None
        if ctx.ranks is not None and ctx.confirm_regressions and entry is not None \
                and len(entry.history) < TORCHRUN_BASELINE_RUNS:
            n = len(entry.history)
            notes.append(f"{self._full_id(bid)}: under torchrun a verdict rests on one session's measurements and "
                         f"the baseline has {n} stored run(s): record it in {TORCHRUN_BASELINE_RUNS - n} more update "
                         f"run(s) (--gpuperf-update-baselines under torchrun) so that the gate knows the spread from "
                         f"one session to the next")
        return entry

    def _scaling(self, t: Timing, bid: str, notes: list[str]) -> Any:
        """Under torchrun, this run's :class:`~pytest_gpuperf.verdict.scaling.ScalingCheck` against
        the benchmark's baseline at a smaller world size (with ``min_scaling_efficiency``, the gate);
        None outside torchrun or without such a baseline (then, with the option, a note says the gate
        could not be applied)."""
        ctx = self.context
        if ctx.ranks is None or ctx.scaling_reference is None:
            return None
        from pytest_gpuperf.verdict.scaling import scaling_of

        check, note = scaling_of(self.options.scaling, self.options.min_scaling_efficiency, ctx.ranks.world_size,
                                 statistics.median(t.samples_ms), ctx.scaling_reference(bid),
                                 ctx.scaling_reference.folder)
        if note:
            notes.append(f"{self._full_id(bid)}: {note}")
        return check

    def _timed_rounds(self, timed: Callable[[Any], Timing]) -> tuple[Timing, dict[str, Any] | None, float]:
        """The timed rounds (``timed(progress)``), with background telemetry (daemon, bounded):
        ``(timing, telemetry summary, elapsed s on the measurer's clock)``."""
        from pytest_gpuperf.measure.telemetry import sampler_for

        ctx = self.context
        self._reset_cuda_peak()
        sampler = _sampler(ctx.measurer, ctx.device, sampler_for, measure=ctx.host_load)
        clock = ctx.measurer.clock  # the clock of the time budgets
        start_ns = clock()
        with sampler:
            t = timed(ctx.progress)
        return t, sampler.summary(), (clock() - start_ns) / 1e9

    def _evaluate(self, t: Timing, timed: Callable[..., Timing], probe: Any, entry: BaselineEntry | None,
                  telemetry: dict[str, Any] | None, mem: Any, counts: Any, rounds: int | None,
                  bid: str, ranks: Any = None) -> tuple[Any, Timing, dict[str, Any]]:
        """The verdict of :func:`pytest_gpuperf.verdict.gate.evaluate` on this measurement (a
        regression is re-measured, ``confirm`` times). Under torchrun (``ranks``: this measurement's
        :class:`~pytest_gpuperf.verdict.distributed.RankTiming`) only a straggler that holds fails
        against one stored run (:func:`_one_stored_run`, with the re-measures' rank timings).
        Returns ``(evaluation, timing with the pooled samples the verdict was decided on, the probe
        fields to store)``."""
        from pytest_gpuperf.verdict.gate import Evidence, Reference, evaluate
        from pytest_gpuperf.verdict.machine import host_busy, throttle_verdict

        ctx = self.context
        confirmations: list[Timing] = []

        def remeasure() -> Timing:
            confirmations.append(timed())
            return confirmations[-1]  # judge reads its samples_ms and probe_ms

        def judged(again: Callable[[], Timing] | None) -> Any:
            return evaluate(
                Evidence(samples_ms=tuple(t.samples_ms), peak_memory_bytes=mem.peak_bytes if mem is not None else None,
                         counts=counts, throttle=throttle_verdict(telemetry), device=str(ctx.device),
                         cpu=cpu_time_of(t), host_busy=host_busy(telemetry), gpu_clock=gpu_clock_of(t)),
                Reference.stored(entry, ctx.baseline_file), self.options, benchmark_id=self._full_id(bid),
                remeasure=again if ctx.confirm_regressions else None, drift=self._drift_ratio(entry),
                fixed_rounds=rounds is not None,
                can_fail=ctx.confirm_regressions,  # off only while updating baselines, which never fail on timing
                probe=self._probe_evidence(t, probe, entry), machine_reference=self._reference_ratio(entry),
                normalize=ctx.normalize, max_memory_text=ctx.max_memory_text,
            )

        if ctx.ranks is None:
            evaluation = judged(remeasure)
        else:  # torchrun: the re-measures in step on every rank, when rank 0's verdict asks for them
            remeasured: list[Any] = []  # and their rank timings: against one stored run, a straggler must hold
            evaluation = _judged_in_step(judged, ctx.ranks, self.options.confirm if ctx.confirm_regressions else 0,
                                         lambda: _remeasure_ranks(ctx, timed(), confirmations, remeasured),
                                         confirmations)
            evaluation = _one_stored_run(evaluation, ranks, entry, ctx.ranks, remeasured)
        probe_all = t.probe_ms + sum((c.probe_ms for c in confirmations), ())
        probe_stored = ({"probe_ms": statistics.median(probe_all), "probe": probe.name}
                        if probe is not None and probe_all else {})
        if probe_stored and probe.kind == "python":  # the reference clock (verdict.refclock): this process's level
            from pytest_gpuperf.verdict.refclock import referenced

            parts = [referenced(x.samples_ms, x.probe_ms, x.probe_every) for x in (t, *confirmations)]
            if all(parts):
                probe_stored["ref_medians"] = (statistics.median(v for p in parts for v in p or ()),)
        if confirmations:  # the result holds the pooled samples the verdict was decided on
            # (CPU time that was not read for every round no longer lines up: cpu_time_of leaves it out)
            t = dataclasses.replace(
                t, samples_ms=t.samples_ms + sum((c.samples_ms for c in confirmations), ()),
                rounds=t.rounds + sum(c.rounds for c in confirmations),
                cpu_samples_ms=t.cpu_samples_ms + sum((c.cpu_samples_ms for c in confirmations), ()),
                process_cpu_samples_ms=t.process_cpu_samples_ms + sum((c.process_cpu_samples_ms for c in confirmations), ()),
                sm_clock_mhz=t.sm_clock_mhz + sum((c.sm_clock_mhz for c in confirmations), ()),
                clock_reasons=t.clock_reasons + sum((c.clock_reasons for c in confirmations), ()),
                throttled_dropped=t.throttled_dropped + sum(c.throttled_dropped for c in confirmations))
        return evaluation, t, probe_stored

    def _explain(self, fn, a, k, t: Timing, counts: Any, flop_dtype: Any, telemetry: dict[str, Any] | None,
                 regressed: bool, bid: str, notes: list[str],
                 unavailable: dict[str, Any]) -> tuple[Any, str | None, str | None]:
        """The bottleneck (with ``expect_bottleneck`` or ``--gpuperf-classify``; a mismatch on a busy
        host adds a note) and, for a regression or a mismatch, the chrome trace and the top-ops table.
        Both are contained: a failure is recorded in ``unavailable``.
        Returns ``(bottleneck or None, trace path or None, top ops or None)``."""
        from pytest_gpuperf.verdict.machine import host_busy

        ctx = self.context
        median_ms = statistics.median(t.samples_ms)
        expected = self.options.expect_bottleneck
        prof = bottleneck = None
        if (expected or ctx.classify) and ctx.extras == "inline":
            counted = (counts.flops, counts.traffic_bytes, flop_dtype) if counts is not None else None
            prof, bottleneck = contained(BOTTLENECK, lambda: self._classify_fn(fn, a, k, median_ms, counted),
                                         unavailable) or (None, None)
        trace_path = top_ops = None
        mismatch = bool(expected) and bottleneck is not None and bottleneck.kind not in expected
        busy = host_busy(telemetry)
        if mismatch and busy and ctx.confirm_regressions:  # not while updating
            notes.append(f"{self._full_id(bid)}: expected {'/'.join(expected)}-bound, measured "
                         f"{bottleneck.kind}-bound while {busy}: the bottleneck check is not trusted "
                         f"(fails with --gpuperf-strict); rerun on a quiet machine")
        # under torchrun only rank 0's verdict counts, so extra profiled calls would differ between ranks
        if (regressed or mismatch) and ctx.artifacts_dir is not None and ctx.ranks is None:
            traced = contained(TRACE, lambda: self._trace(fn, a, k, prof, median_ms, bid, notes), unavailable)
            trace_path, top_ops = traced or (None, None)
        return bottleneck, trace_path, top_ops

    def _trace(self, fn, a, k, prof: Any, median_ms: float, bid: str, notes: list[str]) -> tuple[str | None, str]:
        """The chrome trace (written under ``artifacts_dir``) and the top-ops table of ``prof``, or
        of a few profiled calls when the classification made none: ``(path or None, table)``."""
        from pytest_gpuperf.measure.profiling import profile_call_count, profile_calls, top_ops_table

        if prof is None:
            prof, _ = profile_calls(fn, a, k, self.context.device, profile_call_count(median_ms))
        return self._export_trace(prof, bid, notes), top_ops_table(prof, self.context.device)

    def _overrun(self, t: Timing, elapsed_s: float) -> Overrun | None:
        """An :class:`~pytest_gpuperf.verdict.result.Overrun` when the measurement took far longer than
        ``max_time`` because one call is long (``min_rounds`` rounds and the warmup are always made)."""
        o = self.options
        round_ms = statistics.median(t.samples_ms) * t.calls_per_round
        if elapsed_s < max(1.0, 2 * (o.max_time + o.warmup_time)) or round_ms / 1e3 * o.min_rounds <= o.max_time:
            return None
        return Overrun(elapsed_s, o.max_time, statistics.median(t.samples_ms), o.min_rounds, t.warmup_calls)

    def _export_trace(self, prof: Any, bid: str, notes: list[str]) -> str | None:
        """Write the chrome trace under ``artifacts_dir``; its path, or None when no file was written."""
        from pytest_gpuperf.core.files import ensure_output_dir
        from pytest_gpuperf.measure.profiling import export_trace

        path = Path(self.context.artifacts_dir or ".", f"{self._safe_id(bid)}.trace.json")
        try:
            ensure_output_dir(path.parent)
            written = export_trace(prof, path)
        except OSError as exc:
            notes.append(f"{self._full_id(bid)}: could not write the trace {path}: {exc}")
            return None
        return written if Path(written).is_file() else None

    def _probe(self) -> Any:
        """The interleaved machine-speed probe (:func:`pytest_gpuperf.measure.probe.make_probe`): on
        the CPU backend the reference clock's probe (no torch), on a GPU the probe of this
        benchmark's class (from ``expect_bottleneck``)."""
        from pytest_gpuperf.measure.probe import make_probe, probe_kind

        return make_probe(probe_kind(self.options.expect_bottleneck), self.context.device)

    @staticmethod
    def _probe_evidence(t: Timing, probe: Any, entry: BaselineEntry | None) -> Any:
        """What judge needs of the probe: this run's probe times and the baseline's stored level
        (None when no probe ran, e.g. an injected measurer without probe support)."""
        if probe is None or not getattr(t, "probe_ms", ()):
            return None
        from pytest_gpuperf.verdict.machine import ProbeEvidence

        return ProbeEvidence.of(t, entry.probe_level_ms(probe.name) if entry is not None else None, probe.name)

    def _drift_ratio(self, entry: BaselineEntry | None) -> tuple[str, float] | None:
        """With --gpuperf-normalize: (reference name, now/then ratio) to divide samples by."""
        if not self.context.normalize:
            return None
        return self._reference_ratio(entry)

    def _reference_ratio(self, entry: BaselineEntry | None) -> tuple[str, float] | None:
        """(reference name, now/then ratio) of the session-start reference workload of this
        benchmark's class (matmul for compute-bound, else copy); None without both medians."""
        if entry is None:
            return None
        from pytest_gpuperf.verdict.machine import drift_ratios, ratio_for

        ratios = drift_ratios(self.context.reference, entry.reference)
        expected = self.options.expect_bottleneck
        return ratio_for(ratios, expected[0] if expected else None)


def strategy_for(context: Any) -> Measuring:
    """The measuring strategy of a test's :class:`~pytest_gpuperf.plugin.bench.BenchContext` (see the module doc)."""
    if not context.measuring:
        return Smoke(context)
    if context.ab_results is not None:
        return Replay(context)
    if context.ab_worker is not None:
        return ABWorker(context)
    if context.extras == "only":
        return ExtrasOnly(context)
    if context.extras == "instructions":
        return InstructionsOnly(context)
    return InProcess(context)


def _lockstep_of(measurer: Any, ranks: Any) -> Any:
    """``ranks`` as the timing backend's lockstep; raises :class:`GpuBenchUsageError` for a backend
    whose ``measure`` takes no ``lockstep`` keyword (it cannot keep the ranks' rounds aligned)."""
    import inspect

    try:
        takes = "lockstep" in inspect.signature(measurer.measure).parameters
    except (TypeError, ValueError):
        takes = False
    if not takes:
        raise GpuBenchUsageError(f"gpu_bench under torchrun: the timing backend {type(measurer).__name__}.measure "
                                 f"takes no lockstep= keyword, so the ranks' rounds cannot be kept aligned")
    return ranks


class _ConfirmWanted(Exception):
    """The gate asked for a re-measure (:func:`_judged_in_step`'s first pass)."""


def _judged_in_step(judged: Callable[[Any], Any], ranks: Any, confirm: int, measure_again: Callable[[], None],
                    measured: list[Timing]) -> Any:
    """Under torchrun: the gate's verdict (``judged(remeasure)``, :func:`pytest_gpuperf.verdict.gate.evaluate`)
    with its confirmation re-measures made in step on every rank.

    A re-measure is collectives on every rank (the lockstep rounds, the gather of the samples), so
    the ranks must agree to make it: each rank first judges without one (a first pass that stops
    where the gate would re-measure), rank 0's answer goes to every rank (one broadcast,
    :meth:`~pytest_gpuperf.measure.distributed.Ranks.decide`), and then either every rank makes
    the ``confirm`` re-measures (``measure_again``: one in-step measurement, each round the slowest
    rank's, appended to ``measured``) and judges on them, or none does. Rank 0's verdict is the one
    every rank reports, so a rank whose own first pass differed follows it."""
    wants = False

    def ask() -> Any:
        raise _ConfirmWanted

    try:
        first = judged(ask) if confirm > 0 else judged(None)
    except _ConfirmWanted:
        wants, first = True, None
    if confirm <= 0 or not ranks.decide(wants):
        return first if first is not None else judged(None)
    for _ in range(confirm):
        measure_again()
    again = iter(list(measured))
    return judged(lambda: next(again, measured[-1]))


def cpu_time_of(t: Timing) -> Any:
    """The :class:`~pytest_gpuperf.verdict.cputime.CpuTime` of a timing's rounds (None: its CPU
    clocks were not read, or not for every round)."""
    from pytest_gpuperf.verdict.cputime import CpuTime

    n = len(t.samples_ms)
    if not t.cpu_samples_ms or len(t.cpu_samples_ms) != n or len(t.process_cpu_samples_ms) != n:
        return None
    return CpuTime(tuple(t.cpu_samples_ms), tuple(t.process_cpu_samples_ms))


def _combine_ranks(ranks: Any, t: Timing, reference: Any = None) -> tuple[Timing, Any]:
    """Under torchrun: every rank's samples gathered once (one ``all_gather_object``), the timing of
    the benchmark (each round the slowest rank's, :func:`~pytest_gpuperf.verdict.distributed.combine_rounds`)
    and the :class:`~pytest_gpuperf.verdict.distributed.RankTiming` (per-rank medians, imbalance, and
    each rank's session-start reference workload: ``reference``, this rank's, as the session measured
    it, its ``matmul_ms`` gathered with the samples; and each rank's CPU time per call, issue 45)."""
    from pytest_gpuperf.verdict.distributed import rank_timing

    mine = reference.get("matmul_ms") if isinstance(reference, Mapping) else None
    gathered = ranks.gather([list(t.samples_ms), mine, list(t.cpu_samples_ms), list(t.process_cpu_samples_ms)])
    per_rank = [g[0] for g in gathered]
    return (_combined(t, per_rank, [g[2] for g in gathered], [g[3] for g in gathered]),
            rank_timing(per_rank, [g[1] for g in gathered], [g[2] for g in gathered]))


def _combined(t: Timing, per_rank: Sequence[Sequence[float]], cpu: Sequence[Sequence[float]] = (),
              process_cpu: Sequence[Sequence[float]] = ()) -> Timing:
    """``t`` with each round the slowest rank's (``per_rank``: every rank's samples, ms, rank order),
    and each round's CPU time the highest rank's (``cpu``/``process_cpu``: every rank's thread and
    process CPU time per call, ms; left out unless every rank read both for every round)."""
    from pytest_gpuperf.verdict.distributed import combine_cpu_rounds, combine_rounds

    combined = combine_rounds(per_rank)
    thread = combine_cpu_rounds(cpu, len(combined))
    process = combine_cpu_rounds(process_cpu, len(combined))
    if not (thread and process):
        thread = process = ()
    return dataclasses.replace(t, samples_ms=combined, rounds=len(combined), cpu_samples_ms=thread,
                               process_cpu_samples_ms=process, sm_clock_mhz=(), clock_reasons=())


def _remeasure_ranks(ctx: Any, t: Timing, confirmations: list[Timing], remeasured: list[Any] | None) -> None:
    """Under torchrun, one in-step re-measure ``t``: its combined timing to ``confirmations``, its
    :class:`~pytest_gpuperf.verdict.distributed.RankTiming` to ``remeasured``."""
    combined, ranks = _combine_ranks(ctx.ranks, t, ctx.reference)
    confirmations.append(combined)
    if remeasured is not None:
        remeasured.append(ranks)


def _one_stored_run(evaluation: Any, ranks: Any, entry: BaselineEntry | None, session: Any = None,
                    remeasured: Sequence[Any] = ()) -> Any:
    """Under torchrun (``ranks``: this run's :class:`~pytest_gpuperf.verdict.distributed.RankTiming`),
    the evaluation with its timing verdict passed through
    :func:`~pytest_gpuperf.verdict.distributed.one_stored_run` against ``entry``'s stored runs and
    ranks, the session's earlier benchmarks' rank shifts (``session``: the
    :class:`~pytest_gpuperf.measure.distributed.Ranks`, which keeps them; this one's is added) and
    the re-measures' rank timings (``remeasured``); unchanged outside torchrun or without a baseline."""
    if ranks is None or entry is None:
        return evaluation
    from pytest_gpuperf.verdict.distributed import RankTiming, one_stored_run, rank_shifts

    stored = RankTiming.from_dict(entry.data.get("ranks"))
    earlier = tuple(session.shifts) if session is not None else ()
    shift = rank_shifts(ranks, stored)
    if session is not None and shift is not None:
        session.shifts.append(shift)
    return dataclasses.replace(evaluation, comparison=one_stored_run(
        evaluation.comparison, len(entry.history), ranks, stored, earlier, tuple(remeasured)))


def _sampler(measurer: Any, device: Any, sampler_for: Callable[[Any], Any], *, measure: bool = True) -> Any:
    """The telemetry sampler for one measurement: ``sampler_for(device)``, whose CPU sampler gets
    the measurer's host-load meter (:meth:`~pytest_gpuperf.measure.timing.Measurer.host_load_meter`)."""
    from pytest_gpuperf.measure.telemetry import CpuSampler

    s = sampler_for(device)
    if isinstance(s, CpuSampler):
        s.meter = measurer.host_load_meter(device, measure=measure)
    return s
