"""The result codec: one benchmark's result as the JSON entry that crosses every boundary — the
baseline files, the worker processes' hand-offs (replicate JSON lines, the A/B socket replies,
``ab-results.json``, the pytest-xdist payload) and the JSON report — and back (issue 33, "one wire
format"). Pure and without message wording: the report writer adds the messages
(:func:`pytest_gpuperf.reporting.report.result_entry`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pytest_gpuperf.core import containment
from pytest_gpuperf.storage.baseline import SCHEMA_VERSION
from pytest_gpuperf.verdict.compare import Comparison, MemoryComparison
from pytest_gpuperf.verdict.communication import Communication
from pytest_gpuperf.verdict.distributed import RankTiming
from pytest_gpuperf.verdict.scaling import ScalingCheck
from pytest_gpuperf.verdict.result import BenchResult
from pytest_gpuperf.verdict.stats import thin
from pytest_gpuperf.verdict.cputime import positive_floats


def comparison_to_dict(c: Comparison | None) -> dict[str, Any] | None:
    """A :class:`~pytest_gpuperf.verdict.compare.Comparison` as a JSON-ready dict (verdict as a
    string, CI as a 2-list, the advice codes as a list of their values, the A/B record and the
    normalization flat); no message, and the note as the verdict layer wrote it."""
    if c is None:
        return None
    d = dataclasses.asdict(c)
    d["verdict"] = c.verdict.value
    d["ratio_ci"] = list(c.ratio_ci) if c.ratio_ci else None
    d["advice"] = [a.value for a in c.advice]
    d["machine_differs"] = c.machine_differs  # a property (the advice says it), kept as a key of report schema 2
    d["shown_ratio"] = c.shown_ratio  # the ratio every surface shows with ratio_ci (issue 47)
    del d["ab"], d["normalization"]  # stored flat, under the keys of report schema 2
    ab, norm = c.ab, c.normalization
    d.update(ab_ref=ab.ref if ab else None, ab_pairs=ab.pairs if ab else None,
             ab_process_ratios=list(ab.process_ratios) if ab and ab.process_ratios is not None else None,
             ab_blocks=[list(b) for b in ab.blocks] if ab and ab.blocks is not None else None,
             raw_ratio=norm.raw_ratio if norm else None, normalized_by=norm.by if norm else None)
    return d


def memory_comparison_to_dict(m: MemoryComparison | None) -> dict[str, Any] | None:
    """A :class:`~pytest_gpuperf.verdict.compare.MemoryComparison` as a JSON-ready dict; no messages."""
    if m is None:
        return None
    d = dataclasses.asdict(m)
    d["verdict"] = m.verdict.value
    d["over_budget"] = m.over_budget
    return d


def count_comparison_to_dict(cc: Any) -> dict[str, Any] | None:
    """A :class:`~pytest_gpuperf.verdict.counts.CountComparison` as a JSON-ready dict; no messages."""
    return None if cc is None else cc.to_dict()


def _json_options(options: Any) -> dict[str, Any]:
    out = options.to_dict()  # BenchResult.options is always a BenchOptions
    if isinstance(out.get("expect_bottleneck"), tuple):
        out["expect_bottleneck"] = list(out["expect_bottleneck"])
    return out


def json_safe(value: Any) -> Any:
    """``value`` made JSON-ready for ``extra_info``: dicts (string keys), lists, strings, booleans,
    integers and finite floats pass; other numbers become int/float, a non-finite float its text, and
    anything else ``"UNSERIALIZABLE[<repr>]"`` (as pytest-benchmark writes it)."""
    import math
    import numbers

    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        f = float(value)
        return f if math.isfinite(f) else str(f)
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return f"UNSERIALIZABLE[{value!r}]"


def _optional_parts(result: BenchResult, kept: int) -> dict[str, Any]:
    """The keys an entry has only when they say something (``kept``: the samples it keeps)."""
    entry: dict[str, Any] = {}
    if kept < len(result.samples_ms):
        entry["samples_total"] = len(result.samples_ms)
    if result.extra_info:
        entry["extra_info"] = json_safe(dict(result.extra_info))
    if result.probe_ms is not None:
        entry["probe_ms"] = result.probe_ms
        entry["probe"] = result.probe
        if result.ref_medians:  # the reference clock: each process's rounds over that probe (dimensionless)
            entry["ref_medians"] = list(result.ref_medians)
    if not result.smoke:  # the run's median as the verdict decided on it (issue 47), beside stats' pooled one
        entry["estimate_ms"] = result.estimate_ms
        if result.cpu_estimate_ms is not None:
            entry["cpu_estimate_ms"] = result.cpu_estimate_ms
    if result.process_medians_ms is not None:
        entry["process_medians_ms"] = list(result.process_medians_ms)
    if result.cpu is not None:  # the CPU time of the same rounds, thinned as the samples are
        entry["cpu_time"] = result.cpu.to_dict(kept if kept < len(result.samples_ms) else None)
    if result.gpu_clock is not None:  # the SM clock of the same rounds, thinned as the samples are (issue 49)
        entry["gpu_clock"] = result.gpu_clock.to_dict(kept if kept < len(result.samples_ms) else None,
                                                      result.samples_ms)
    if result.ranks is not None:  # under torchrun: each rank's median, the slowest rank, the imbalance
        entry["ranks"] = result.ranks.to_dict()
    if result.communication is not None:  # under torchrun: communication per call, share, overlap
        entry["communication"] = result.communication.to_dict()
    if result.peak_memory_low_bytes is not None:  # the peak differed between the calls measured
        entry["peak_memory_low_bytes"] = result.peak_memory_low_bytes
    if result.unavailable:  # extras that could not be measured: left out above, with why
        entry["unavailable"] = containment.to_dict(result.unavailable)
    if result.op_diff is not None:  # why an A/B verdict moved, op by op (verdict.opdiff)
        entry["op_diff"] = result.op_diff.to_dict()
    if result.op_profile is not None:  # the op profile's cycles (a baseline keeps them compact)
        entry["op_profile"] = result.op_profile
    if result.instructions is not None:  # --gpuperf-instructions: the host's instructions per call
        entry["instructions"] = result.instructions.to_dict()
    return entry


def encode_result(
    result: BenchResult,
    *,
    environment: dict[str, Any],
    git_commit: str | None,
    timestamp_utc: str,
    with_comparison: bool = False,
    max_samples: int | None = None,
) -> dict[str, Any]:
    """The JSON entry of one benchmark (the one wire format: baselines, worker hand-offs and, with
    ``with_comparison``, the verdicts of reports), without any message wording (the report adds it:
    :func:`pytest_gpuperf.reporting.report.result_entry`).

    Samples cross between processes whole, so a result read back has the statistics of its samples.
    A file that keeps at most ``max_samples`` of them (baselines and reports:
    :data:`~pytest_gpuperf.verdict.stats.MAX_STORED_SAMPLES`, evenly spaced, :func:`~pytest_gpuperf.verdict.stats.thin`)
    records how many were measured (``samples_total``); its ``stats`` are those of all of them."""
    samples = list(result.samples_ms) if max_samples is None else thin(result.samples_ms, max_samples)
    entry: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "id": result.benchmark_id,
        "name": result.name,
        "group": result.group,
        "device": result.device,
        "stats": result.stats_dict(),
        "samples_ms": samples,
        "rounds": result.rounds,
        "calls_per_round": result.calls_per_round,
        "warmup_rounds": result.warmup_calls,
        "peak_memory_bytes": result.peak_memory_bytes,
        "bottleneck": result.bottleneck.to_dict() if result.bottleneck is not None else None,
        "telemetry": result.telemetry,
        "counts": result.counts.to_dict() if result.counts is not None else None,
        "throughput": result.rates(),
        "options": _json_options(result.options),
        "environment": environment,
        "git_commit": git_commit,
        "timestamp_utc": timestamp_utc,
    }
    entry.update(_optional_parts(result, len(samples)))
    if with_comparison:
        entry["comparison"] = comparison_to_dict(result.comparison)
        entry["verdict"] = result.comparison.verdict.value if result.comparison else None
        entry["memory_comparison"] = memory_comparison_to_dict(result.memory_comparison)
        cc = result.count_comparison
        entry["count_comparison"] = count_comparison_to_dict(cc)
        entry["trace_path"] = result.trace_path
        if result.scaling is not None:  # under torchrun: the efficiency against a smaller world size's baseline
            entry["scaling"] = result.scaling.to_dict()
        if result.instruction_comparison is not None:  # the instruction gate (issue 48)
            entry["instruction_comparison"] = result.instruction_comparison.to_dict()
    return entry


def _comparison_from(d: dict[str, Any] | None) -> Any:
    """A report entry's ``comparison`` as a :class:`~pytest_gpuperf.verdict.compare.Comparison` (None: none).
    ``advice``: the known codes of the stored list (an unknown one is left out; none stored: ``()``);
    an entry written before the codes with ``machine_differs`` true gets
    :attr:`~pytest_gpuperf.verdict.advice.Advice.UPDATE_OR_AB` (what ``machine_differs`` reads)."""
    from pytest_gpuperf.verdict.advice import Advice, advice_of
    from pytest_gpuperf.verdict.compare import ABEvidence, Comparison, Normalization, Verdict

    if not d:
        return None
    fields = {f.name for f in dataclasses.fields(Comparison)} - {"ab", "normalization"}
    kw = {k: v for k, v in d.items() if k in fields}
    kw["verdict"] = Verdict(d["verdict"])
    kw["ratio_ci"] = tuple(d["ratio_ci"]) if d.get("ratio_ci") else None
    kw["advice"] = advice_of(d.get("advice"))
    if d.get("machine_differs") is True and "advice" not in d:
        kw["advice"] += (Advice.UPDATE_OR_AB,)
    if d.get("ab_ref") is not None:  # the A/B record, stored flat
        kw["ab"] = ABEvidence(
            d["ab_ref"], pairs=d.get("ab_pairs"),
            process_ratios=tuple(d["ab_process_ratios"]) if d.get("ab_process_ratios") is not None else None,
            blocks=tuple(tuple(b) for b in d["ab_blocks"]) if d.get("ab_blocks") is not None else None)
    if d.get("normalized_by") is not None and d.get("raw_ratio") is not None:
        kw["normalization"] = Normalization(d["normalized_by"], d["raw_ratio"])
    return Comparison(**kw)


def _memory_from(d: dict[str, Any] | None) -> Any:
    """A report entry's ``memory_comparison`` as a :class:`~pytest_gpuperf.verdict.compare.MemoryComparison`."""
    from pytest_gpuperf.verdict.compare import MemoryComparison, Verdict

    if not d:
        return None
    fields = {f.name for f in dataclasses.fields(MemoryComparison)}
    kw = {k: v for k, v in d.items() if k in fields}
    kw["verdict"] = Verdict(d["verdict"])
    return MemoryComparison(**kw)


def _bottleneck_from(d: dict[str, Any] | None) -> Any:
    """A report entry's ``bottleneck`` as a :class:`~pytest_gpuperf.verdict.bottleneck.Bottleneck`."""
    from pytest_gpuperf.verdict.bottleneck import Bottleneck, Evidence

    if not d:
        return None
    fields = {f.name for f in dataclasses.fields(Evidence)}
    ev = Evidence(**{k: v for k, v in d["evidence"].items() if k in fields})
    return Bottleneck(d["kind"], ev, d.get("reason", ""))


def decode_result(entry: dict[str, Any]) -> BenchResult:
    """Rebuild a :class:`BenchResult` from a report entry (as :func:`encode_result` wrote it).

    Used to merge pytest-xdist workers' results on the controller and by the command line. The
    return value of ``fn`` and the top-ops table are not stored, so they come back as None.
    Raises ``KeyError``/``TypeError`` for entries that are not report entries.
    """
    from pytest_gpuperf.core.options import options_from_dict
    from pytest_gpuperf.verdict.counts import CountComparison, Counts
    from pytest_gpuperf.verdict.instructions import InstructionVerdict, Instructions
    from pytest_gpuperf.verdict.stats import STAT_FIELDS, Outliers, Summary

    samples = tuple(entry["samples_ms"])
    stats = None  # computed from the samples
    if isinstance(entry.get("stats"), dict):  # as written: of these samples, or of all when a file thinned them
        s = entry["stats"]
        ci = s.get("median_ci_ms")
        stats = Summary(n=entry.get("samples_total") or len(samples), median_ci_ms=tuple(ci) if ci else None,
                        outliers=Outliers(**(s.get("outliers") or {})), **{k: s[k] for k in STAT_FIELDS})
    return BenchResult.from_samples(
        samples,
        stats=stats,
        name=entry.get("name") or entry["id"],
        device=entry["device"],
        rounds=entry["rounds"],
        calls_per_round=entry.get("calls_per_round", 1),
        warmup_calls=entry.get("warmup_rounds", 0),
        comparison=_comparison_from(entry.get("comparison")),
        peak_memory_bytes=entry.get("peak_memory_bytes"),
        memory_comparison=_memory_from(entry.get("memory_comparison")),
        bottleneck=_bottleneck_from(entry.get("bottleneck")),
        trace_path=entry.get("trace_path"),
        telemetry=entry.get("telemetry"),
        benchmark_id=entry["id"],
        group=entry.get("group"),
        smoke=bool(entry.get("smoke", False)),
        options=options_from_dict(entry.get("options")),
        counts=Counts.from_dict(entry["counts"]) if isinstance(entry.get("counts"), dict) else None,
        count_comparison=(CountComparison.from_dict(entry["count_comparison"])
                          if isinstance(entry.get("count_comparison"), dict) else None),
        extra_info=dict(entry.get("extra_info") or {}),
        probe_ms=entry.get("probe_ms"),
        probe=entry.get("probe"),
        ref_medians=positive_floats(entry.get("ref_medians")) if entry.get("probe_ms") else None,
        process_medians_ms=tuple(entry["process_medians_ms"]) if entry.get("process_medians_ms") else None,
        cpu=_cpu_from(entry.get("cpu_time"), len(samples)),
        gpu_clock=_clock_from(entry.get("gpu_clock"), len(samples)),
        ranks=RankTiming.from_dict(entry.get("ranks")),
        scaling=ScalingCheck.from_dict(entry.get("scaling")),
        communication=Communication.from_dict(entry.get("communication")),
        unavailable=containment.from_dict(entry.get("unavailable")),
        peak_memory_low_bytes=entry.get("peak_memory_low_bytes"),
        op_diff=decode_op_diff(entry.get("op_diff")),
        op_profile=entry.get("op_profile") if isinstance(entry.get("op_profile"), dict) else None,
        instructions=Instructions.from_dict(entry.get("instructions")),
        instruction_comparison=InstructionVerdict.from_dict(entry.get("instruction_comparison"), entry["id"]),
    )


def _cpu_from(d: Any, samples: int) -> Any:
    """An entry's ``cpu_time`` as a :class:`~pytest_gpuperf.verdict.cputime.CpuTime` (None: absent,
    malformed, or not aligned with the entry's ``samples`` wall samples)."""
    from pytest_gpuperf.verdict.cputime import CpuTime

    cpu = CpuTime.from_dict(d)
    return cpu if cpu is not None and len(cpu.samples_ms) == samples else None


def _clock_from(d: Any, samples: int) -> Any:
    """An entry's ``gpu_clock`` as a :class:`~pytest_gpuperf.verdict.gpuclock.GpuClock` (None: absent,
    malformed, or not aligned with the entry's ``samples`` wall samples)."""
    from pytest_gpuperf.verdict.gpuclock import GpuClock

    clock = GpuClock.from_dict(d)
    return clock if clock is not None and len(clock.mhz) == samples else None


def decode_op_diff(d: Any) -> Any:
    """An entry's ``op_diff`` as an :class:`~pytest_gpuperf.verdict.opdiff.OpDiff` (None when absent or unreadable:
    a diagnosis is never needed to read a result)."""
    if not isinstance(d, dict):
        return None
    from pytest_gpuperf.verdict.opdiff import OpDiff

    try:
        return OpDiff.from_dict(d)
    except (TypeError, ValueError, KeyError):
        return None
