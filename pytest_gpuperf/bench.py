"""The object behind the ``gpu_bench`` fixture (no pytest imports; the plugin wires it up)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable

from .compare import decide, decide_memory
from .options import BenchOptions
from .result import BenchResult
from .timing import measure, time_once


class GpuBenchUsageError(RuntimeError):
    """The fixture was used in a way it does not support (the message says how to fix it)."""


class GpuBench:
    """Measures callables for one test: ``gpu_bench(fn, *args, **kwargs) -> BenchResult``.

    ``device`` is the ``torch.device`` the benchmark should allocate its tensors on. With
    ``--gpuperf`` each call warms up, times rounds (CUDA events on a GPU, the CPU clock
    otherwise) and compares with the stored baseline; without it, ``fn`` runs exactly once
    (smoke mode). A test may measure several things when each has a distinct ``name=``.
    """

    def __init__(
        self,
        *,
        test_id: str,
        module: str = "",
        options: BenchOptions,
        device: Any,
        measuring: bool,
        baseline_entry: Callable[[str], dict[str, Any] | None] = lambda _id: None,
        baseline_file: str | None = None,
        on_result: Callable[[BenchResult], None] = lambda _r: None,
        snapshot_dir: str | None = None,
        classify: bool = False,
        thresholds: Any = None,
        artifacts_dir: str | None = None,
        confirm_regressions: bool = True,
        reference: dict[str, Any] | None = None,
        normalize: bool = False,
        device_lock: Callable[[], Any] | None = None,
        progress: Callable[[int, float, float], None] | None = None,
    ) -> None:
        self.test_id = test_id
        self.module = module
        self.options = options
        self._device = device
        self.measuring = measuring
        self._baseline_entry = baseline_entry
        self._snapshot_dir = snapshot_dir
        self._classify = classify
        self._thresholds = thresholds
        self._artifacts_dir = artifacts_dir
        self._confirm_regressions = confirm_regressions
        self._reference = reference
        self._normalize = normalize
        self._device_lock = device_lock
        self._progress = progress
        self._baseline_file = baseline_file
        self._on_result = on_result
        self.results: list[BenchResult] = []

    @property
    def device(self) -> Any:
        """The ``torch.device`` to benchmark on (``cuda:N`` or ``cpu``)."""
        return self._device

    def phase(self, name: str) -> Any:
        """Label a phase inside the benchmarked function: ``with gpu_bench.phase("forward"): ...``.

        A ``torch.profiler.record_function`` region; when the benchmark is classified, each
        phase's share of device time is reported in ``result.bottleneck.evidence.phases``.
        """
        from .profiling import phase

        return phase(name)

    def __call__(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> BenchResult:
        """Benchmark ``fn(*args, **kwargs)`` with the options of the test's marker."""
        return self._run(fn, tuple(args), dict(kwargs), setup=None, rounds=None, warmup_rounds=None, name=None)

    def pedantic(
        self,
        fn: Callable[..., Any],
        args: tuple = (),
        kwargs: dict[str, Any] | None = None,
        *,
        setup: Callable[[], Any] | None = None,
        rounds: int | None = None,
        warmup_rounds: int | None = None,
        name: str | None = None,
    ) -> BenchResult:
        """Benchmark with explicit control.

        ``setup`` runs untimed before every round (one call per round then) and may return
        ``(args, kwargs)`` to use for that round; ``rounds`` fixes the number of timed rounds and
        ``warmup_rounds`` the number of warmup calls (0 allowed); ``name`` labels the measurement
        (``<test id>::<name>``) so one test can hold several. Raises ``ValueError`` for
        non-integer or out-of-range counts.
        """
        if rounds is not None and (isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1):
            raise ValueError(f"gpu_bench.pedantic: rounds={rounds!r}: expected an integer >= 1")
        if warmup_rounds is not None and (
            isinstance(warmup_rounds, bool) or not isinstance(warmup_rounds, int) or warmup_rounds < 0
        ):
            raise ValueError(f"gpu_bench.pedantic: warmup_rounds={warmup_rounds!r}: expected an integer >= 0")
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise ValueError(f"gpu_bench.pedantic: name={name!r}: expected a non-empty string")
        return self._run(fn, tuple(args), dict(kwargs or {}), setup=setup, rounds=rounds,
                         warmup_rounds=warmup_rounds, name=name)

    def _benchmark_id(self, name: str | None) -> str:
        bid = self.test_id if name is None else f"{self.test_id}::{name}"
        if any(r.benchmark_id == bid for r in self.results):
            if name is None:
                raise GpuBenchUsageError(
                    f"gpu_bench was already called without a name in {self.test_id}; to measure "
                    f"several things in one test give each a distinct name, e.g. "
                    f"gpu_bench.pedantic(fn, args=(x,), name='forward')"
                )
            raise GpuBenchUsageError(
                f"gpu_bench measurement name {name!r} is used twice in {self.test_id}; names must be distinct"
            )
        return bid

    def _run(self, fn, args, kwargs, *, setup, rounds, warmup_rounds, name) -> BenchResult:
        if not callable(fn):
            raise TypeError(f"gpu_bench: expected a callable as first argument, got {type(fn).__name__}")
        bid = self._benchmark_id(name)
        label = name or self.test_id.split("::")[-1]
        common = dict(name=label, device=str(self._device), benchmark_id=bid,
                      group=self.options.group, options=self.options.to_dict())
        try:
            result = self._measure(fn, args, kwargs, setup, rounds, warmup_rounds, bid, common)
        except Exception as exc:
            from .memory import is_oom

            if not is_oom(exc):
                raise
            self._raise_oom(exc, fn, args, kwargs, bid)
        self.results.append(result)
        self._on_result(result)
        return result

    def _full_id(self, bid: str) -> str:
        return f"{self.module}::{bid}" if self.module else bid

    def _measure(self, fn, args, kwargs, setup, rounds, warmup_rounds, bid, common) -> BenchResult:
        if self.measuring and self._device_lock is not None:
            # pytest-xdist: never let two workers time the same device at once
            with self._device_lock():
                return self._measure_unlocked(fn, args, kwargs, setup, rounds, warmup_rounds, bid, common)
        return self._measure_unlocked(fn, args, kwargs, setup, rounds, warmup_rounds, bid, common)

    def _measure_unlocked(self, fn, args, kwargs, setup, rounds, warmup_rounds, bid, common) -> BenchResult:
        if not self.measuring:
            if setup is not None:
                out = setup()
                if isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], dict):
                    args, kwargs = tuple(out[0]), dict(out[1])
            t = time_once(fn, args, kwargs, self._device)
            return BenchResult.from_samples(
                t.samples_ms, rounds=1, calls_per_round=1, warmup_rounds=0, smoke=True, value=t.value, **common
            )
        from .memory import measure_peak
        from .timing import prepare_call

        from .telemetry import sampler_for

        self._reset_cuda_peak()
        sampler = sampler_for(self._device)
        with sampler:  # background telemetry while the timed rounds run (daemon, bounded)
            t = measure(fn, args, kwargs, options=self.options, device=self._device, setup=setup,
                        rounds=rounds, warmup_rounds=warmup_rounds, progress=self._progress)
        telemetry = sampler.summary()
        # One extra call, outside the timed rounds, measures peak memory (never perturbs timing).
        a, k = prepare_call(fn, args, kwargs, setup)
        mem, _ = measure_peak(fn, a, k, self._device)
        entry = self._baseline_entry(bid)
        from .baseline import history_of
        from .compare import Verdict

        decide_args = dict(
            threshold=self.options.threshold,
            alpha=self.options.alpha,
            benchmark_id=self._full_id(bid),
            baseline_file=self._baseline_file,
            run_medians_ms=[r["median_ms"] for r in history_of(entry)] if entry else None,
        )
        base_samples = entry["samples_ms"] if entry else None
        current = list(t.samples_ms)
        norm = self._drift_ratio(entry)
        if norm is not None:
            from .drift import normalize

            current = normalize(current, norm[1])
        comparison = decide(current, base_samples, **decide_args)
        if comparison.verdict is Verdict.REGRESSED and self.options.confirm > 0 and self._confirm_regressions:
            # Confirm from a fresh warmup and decide on the pooled evidence (a one-off slow
            # period, e.g. a neighbour's burst, is then outvoted).
            extra: list[float] = []
            rounds_total = t.rounds
            for _ in range(self.options.confirm):
                t2 = measure(fn, args, kwargs, options=self.options, device=self._device, setup=setup,
                             rounds=rounds, warmup_rounds=warmup_rounds)
                extra.extend(t2.samples_ms)
                rounds_total += t2.rounds
            conf = extra if norm is None else normalize(extra, norm[1])
            comparison = decide(current, base_samples, confirmation_ms=conf, **decide_args)
            t = dataclasses.replace(t, samples_ms=tuple(t.samples_ms) + tuple(extra), rounds=rounds_total)
        if norm is not None and comparison.ratio is not None:
            raw = decide(list(t.samples_ms), base_samples, **decide_args).ratio
            comparison = dataclasses.replace(comparison, raw_ratio=raw, normalized_by=f"{norm[0]} x{norm[1]:.3f}")
        from .compare import downgrade_throttled
        from .telemetry import throttle_verdict

        comparison = downgrade_throttled(comparison, throttle_verdict(telemetry))
        base_peak = entry.get("peak_memory_bytes") if entry else None
        memory = decide_memory(
            mem.peak_bytes,
            base_peak if isinstance(base_peak, int) else None,
            threshold=self.options.memory_threshold,
            max_memory_bytes=self.options.max_memory,
            benchmark_id=self._full_id(bid),
            device=str(self._device),
            baseline_file=self._baseline_file,
        )
        if memory.failed:
            memory = dataclasses.replace(memory, snapshot=self._snapshot(fn, a, k, bid))
        import statistics

        median_ms = statistics.median(t.samples_ms)
        expected = self.options.expect_bottleneck
        prof = bottleneck = None
        if expected or self._classify:
            prof, bottleneck = self._classify_fn(fn, a, k, median_ms)
        trace_path = top_ops = None
        mismatch = bool(expected) and bottleneck is not None and bottleneck.kind not in expected
        if (comparison.failed or mismatch) and self._artifacts_dir is not None:
            from .profiling import export_trace, profile_call_count, profile_calls, top_ops_table

            if prof is None:
                prof, _ = profile_calls(fn, a, k, self._device, profile_call_count(median_ms))
            trace_path = export_trace(prof, Path(self._artifacts_dir, f"{self._safe_id(bid)}.trace.json"))
            top_ops = top_ops_table(prof, self._device)
        return BenchResult.from_samples(
            t.samples_ms, rounds=t.rounds, calls_per_round=t.calls_per_round,
            warmup_rounds=t.warmup_rounds, comparison=comparison, peak_memory_bytes=mem.peak_bytes,
            memory_comparison=memory, bottleneck=bottleneck, trace_path=trace_path, top_ops=top_ops,
            telemetry=telemetry, value=t.value, **common
        )

    def _drift_ratio(self, entry: dict[str, Any] | None) -> tuple[str, float] | None:
        """With --gpuperf-normalize: (reference name, now/then ratio) to divide samples by."""
        if not self._normalize or not entry:
            return None
        from .drift import drift_ratios, ratio_for

        ratios = drift_ratios(self._reference, (entry.get("environment") or {}).get("reference"))
        expected = self.options.expect_bottleneck
        return ratio_for(ratios, expected[0] if expected else None)

    def _safe_id(self, bid: str) -> str:
        import re

        return re.sub(r"[^A-Za-z0-9_.-]+", "_", self._full_id(bid)).strip("_")

    def _classify_fn(self, fn, args, kwargs, median_ms: float) -> tuple[Any, Any]:
        """Profile a few calls, count FLOPs and bytes, calibrate, and classify (outside timing)."""
        from .bottleneck import Thresholds, analyze, classify, with_roofline
        from .profiling import (calibrate, count_flops_and_bytes, cpu_op_floor_s, profile_call_count,
                                profile_calls)

        dev_type = getattr(self._device, "type", "cpu")
        floor = cpu_op_floor_s() if dev_type == "cpu" else 0.0
        calls = profile_call_count(median_ms)
        prof, events = profile_calls(fn, args, kwargs, self._device, calls)
        evidence = analyze(events, device_type=dev_type, calls=calls, cpu_op_floor_s=floor)
        flops, nbytes, dtype = count_flops_and_bytes(fn, args, kwargs)
        peak_flops, peak_bw = calibrate(self._device, dtype)
        evidence = with_roofline(evidence, flops=flops, bytes_moved=nbytes, peak_flops_per_s=peak_flops,
                                 peak_bytes_per_s=peak_bw, dtype=dtype or "float32")
        return prof, classify(evidence, self._thresholds or Thresholds())

    def _reset_cuda_peak(self) -> None:
        if getattr(self._device, "type", "cpu") == "cuda":
            import torch

            torch.cuda.reset_peak_memory_stats(self._device)

    def _snapshot(self, fn, args, kwargs, bid) -> str | None:
        """CUDA with --gpuperf-memory-snapshot: re-run ``fn`` recording allocation history, save it."""
        if self._snapshot_dir is None or getattr(self._device, "type", "cpu") != "cuda":
            return None
        from .memory import SnapshotRecorder, free_cached_memory, is_oom

        rec = SnapshotRecorder(self._device, Path(self._snapshot_dir, f"{self._safe_id(bid)}.pickle"))
        rec.start()
        try:
            fn(*args, **kwargs)
        except Exception as exc:
            if not is_oom(exc):
                rec.discard()
                raise
            free_cached_memory(self._device)
        return rec.save()

    def _raise_oom(self, exc: BaseException, fn, args, kwargs, bid) -> None:
        from .memory import MemoryLimitError, cuda_memory_summary, free_cached_memory
        from .units import format_bytes

        peak = None
        if getattr(self._device, "type", "cpu") == "cuda":
            import torch

            peak = torch.cuda.max_memory_allocated(self._device)
        details = cuda_memory_summary(self._device)
        free_cached_memory(self._device)
        budget = format_bytes(self.options.max_memory) if self.options.max_memory is not None else "none"
        message = (
            f"out of memory in benchmark {self._full_id(bid)} on {self._device}: max_memory {budget}, "
            f"peak so far {format_bytes(peak) if peak is not None else 'not tracked on the CPU'} "
            f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
        )
        extra = self._snapshot(fn, args, kwargs, bid)
        if extra:
            message += "\n" + extra
        raise MemoryLimitError(message, details=details) from exc
